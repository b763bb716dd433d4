#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu-run-s27.sh -- session 27's GPU checks, from the top of a
# configured and built tree (.devdeps/run builds it):
#
#     bash .devdeps/run 'T=$OUT; OUT=/tmp/o TAR=$T/r.tgz PHASES=a bash bench/gpu-run-s27.sh'
#
# Phases a and b measure bench/2026-12-02/wgrad-side-stream.patch applied
# to 0e4cb51 (phase a: its first variant), not kept on main
# (bench/2026-12-02-gpu.md); on main the variable is gone and every run of
# them is the caller's-stream step.
# Phase a: each BF16 Linear's weight-gradient GEMM on a side stream
# (TECORE_OPS_WGRAD_STREAM, ops_overlap.c), concurrently with the backward
# up to the next Linear: check_transformer (its new case compares the side
# stream with the caller's stream bit for bit, eagerly and in a graph) and
# check_ops under TE_DEVICE=cuda; GPT-2 124M's step with the side stream
# and without it, beside torch.compile's (bench/gpt_peer.py) in the same
# call; t/demo/te-gpt.sh under TE_DEVICE=cuda.
# Phase b (after a: the GEMM beside the input-gradient GEMM measured
# slower, 62.4-62.9 ms against 59.6): the weight gradient queued after
# the input-gradient GEMM, beside the memory-bound groups up to the next
# Linear (TECORE_OPS_WGRAD_STREAM=1) or beside the attention's backward
# too (=2): check_transformer under TE_DEVICE=cuda, GPT-2 124M's step in
# each mode, twice, interleaved.
# Phase c: te_norm_bwd_fast asks each block's next rows into L2
# (prefetch.global.L2) after loading the current ones
# (TECORE_NORM_BWD_PREFETCH, default 1): check_norm under TE_DEVICE=cuda;
# te-bench --model with it on and off, twice each, and with fewer blocks
# (TECORE_NORM_BWD_FAST_PARTS 264, 330); GPT-2 124M's step on and off.
# Phase c result: no gain (bench/2026-12-02-gpu.md), not kept.
# Phase d: a Linear with more outputs than inputs computes its weight
# gradient transposed (dW^T = x^T dy, BGRAD_B for the bias, then a
# transpose-add; TECORE_OPS_WGRAD_TRANSPOSE, default 1): check_gemm
# (BGRAD_B, cuBLASLt's BGRADA) and check_transformer under TE_DEVICE=cuda;
# GPT-2 124M's step with it at 0, 1 and 2, twice, and its --profile at 1.
# Phase e: the weight-gradient GEMMs without the bias epilogue, in both
# orientations: GPT-2 124M with --bias 0, --profile with
# TECORE_OPS_WGRAD_TRANSPOSE 0 and 1.
# Phase e result: the weight-gradient GEMMs without the bias epilogue
# are 24-96 us faster a call.  Phase f: a 16-bit Linear's bias gradient
# as dy's column sums by libtecore's kernel (te_colsum_part/final), the
# GEMM without epilogue (TECORE_OPS_BGRAD_EPILOGUE=0, the default):
# check_transformer under TE_DEVICE=cuda (the bias gradient against the
# exact column sums); GPT-2 124M's step with it and with the epilogue
# (=1), twice, interleaved; its --profile.
# Phase g: the GELU's backward makes the column sums of its dx (the bias
# gradient of the Linear before it) on the way (te_act_bwd_colsum): the
# final code once more: check_transformer and check_act under
# TE_DEVICE=cuda, t/demo/te-gpt.sh under TE_DEVICE=cuda; GPT-2 124M's step
# (twice, and once with TECORE_OPS_BGRAD_EPILOGUE=1) beside
# torch.compile's over the same 20 steps (bench/gpt_peer.py), and its
# --profile.
# Phase h (after g: the fused kernel held 120 registers, two blocks an
# SM, and took 345 us against 211 + 70 for the GELU's backward and the
# column sums apart): two rows' loads in flight, 64 registers, four
# blocks an SM, the sums' rounding by cvt: check_transformer under
# TE_DEVICE=cuda, GPT-2 124M's step twice and with
# TECORE_OPS_BGRAD_EPILOGUE=1, its --profile.
# Phase i: the final code (the column-sum blocks' end and the vdev
# twins' order one helper each, colsum.cuh and common/colsum.h; the SASS
# of te_colsum_part and te_act_bwd_colsum_gelu moved a few zeroing
# instructions): phase h again.
# Phase j: te_act_bwd_colsum_<kind> with one row's loads in flight a
# thread, 40 registers, six blocks an SM (c10: two rows, 64 registers,
# four blocks, 239.8 us a GPT-2 call against 211 for the plain GELU
# backward): check_transformer under TE_DEVICE=cuda, the step twice, its
# --profile.  Result: 256.9 us, slower; not kept (main keeps c10's).
# Phase k: the column-sum kernels' place as one helper (colsum.cuh; the
# SASS reorders a few instructions): phase h again on that code.
set -u
default_phases="a"
. "$(dirname "$0")/gpu-lib.sh"
gpt=tools/te-gpt
small="$gpt --model gpt2-124m --synthetic --batch 32 --steps 20 --eval-every 0 --sample 0 --json"
step machine sh -c 'nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvcc --version | tail -2'
if has a; then
  make -s t/core/check_transformer t/core/check_ops tools/te-gpt > /dev/null 2>&1
  step check_transformer env TE_DEVICE=cuda t/core/check_transformer
  step check_ops env TE_DEVICE=cuda t/core/check_ops
  step small-side $small
  step small-noside env TECORE_OPS_WGRAD_STREAM=0 $small
  step small-peer python3 bench/gpt_peer.py speed --model gpt2-124m --batch 32 --compile --steps 8 --warmup 3
  step small-side2 $small
  step te-gpt-sh env TE_DEVICE=cuda top_builddir=. sh t/demo/te-gpt.sh
fi
if has b; then
  make -s t/core/check_transformer tools/te-gpt > /dev/null 2>&1
  step check_transformer env TE_DEVICE=cuda t/core/check_transformer
  for r in 1 2; do
    step small-w0-$r env TECORE_OPS_WGRAD_STREAM=0 $small
    step small-w1-$r env TECORE_OPS_WGRAD_STREAM=1 $small
    step small-w2-$r env TECORE_OPS_WGRAD_STREAM=2 $small
  done
fi
if has c; then
  make -s t/core/check_norm tools/te-gpt tools/te-bench > /dev/null 2>&1
  step check_norm env TE_DEVICE=cuda t/core/check_norm
  for r in 1 2; do
    step bench-model-pf1-$r env TECORE_NORM_BWD_PREFETCH=1 tools/te-bench --model
    step bench-model-pf0-$r env TECORE_NORM_BWD_PREFETCH=0 tools/te-bench --model
  done
  step bench-model-p264 env TECORE_NORM_BWD_FAST_PARTS=264 tools/te-bench --model
  step bench-model-p330 env TECORE_NORM_BWD_FAST_PARTS=330 tools/te-bench --model
  for r in 1 2; do
    step small-pf1-$r env TECORE_NORM_BWD_PREFETCH=1 $small
    step small-pf0-$r env TECORE_NORM_BWD_PREFETCH=0 $small
  done
fi
if has d; then
  make -s t/core/check_gemm t/core/check_transformer tools/te-gpt > /dev/null 2>&1
  step check_gemm env TE_DEVICE=cuda t/core/check_gemm
  step check_transformer env TE_DEVICE=cuda t/core/check_transformer
  for r in 1 2; do
    step small-t0-$r env TECORE_OPS_WGRAD_TRANSPOSE=0 $small
    step small-t1-$r env TECORE_OPS_WGRAD_TRANSPOSE=1 $small
    step small-t2-$r env TECORE_OPS_WGRAD_TRANSPOSE=2 $small
  done
  step small-profile $gpt --model gpt2-124m --synthetic --batch 32 --steps 3 --eval-every 0 --sample 0 --profile
fi
if has e; then
  make -s tools/te-gpt > /dev/null 2>&1
  prof="$gpt --model gpt2-124m --bias 0 --synthetic --batch 32 --steps 3 --eval-every 0 --sample 0 --profile"
  step nobias-profile-t0 env TECORE_OPS_WGRAD_TRANSPOSE=0 $prof
  step nobias-profile-t1 env TECORE_OPS_WGRAD_TRANSPOSE=1 $prof
  step nobias-profile-t2 env TECORE_OPS_WGRAD_TRANSPOSE=2 $prof
fi
if has f; then
  make -s t/core/check_transformer tools/te-gpt > /dev/null 2>&1
  step check_transformer env TE_DEVICE=cuda t/core/check_transformer
  for r in 1 2; do
    step small-b0-$r env TECORE_OPS_BGRAD_EPILOGUE=0 $small
    step small-b1-$r env TECORE_OPS_BGRAD_EPILOGUE=1 $small
  done
  step small-profile $gpt --model gpt2-124m --synthetic --batch 32 --steps 3 --eval-every 0 --sample 0 --profile
fi
if has g; then
  make -s t/core/check_transformer t/core/check_act tools/te-gpt > /dev/null 2>&1
  step check_transformer env TE_DEVICE=cuda t/core/check_transformer
  step check_act env TE_DEVICE=cuda t/core/check_act
  step small-1 $small
  step small-b1 env TECORE_OPS_BGRAD_EPILOGUE=1 $small
  step small-peer20 python3 bench/gpt_peer.py speed --model gpt2-124m --batch 32 --compile --steps 20 --warmup 3
  step small-2 $small
  step small-profile $gpt --model gpt2-124m --synthetic --batch 32 --steps 3 --eval-every 0 --sample 0 --profile
  step te-gpt-sh env TE_DEVICE=cuda top_builddir=. sh t/demo/te-gpt.sh
fi
if has h || has i || has k; then
  make -s t/core/check_transformer tools/te-gpt > /dev/null 2>&1
  step check_transformer env TE_DEVICE=cuda t/core/check_transformer
  step small-1 $small
  step small-b1 env TECORE_OPS_BGRAD_EPILOGUE=1 $small
  step small-2 $small
  step small-profile $gpt --model gpt2-124m --synthetic --batch 32 --steps 3 --eval-every 0 --sample 0 --profile
fi
if has j; then
  make -s t/core/check_transformer tools/te-gpt > /dev/null 2>&1
  step check_transformer env TE_DEVICE=cuda t/core/check_transformer
  step small-1 $small
  step small-profile $gpt --model gpt2-124m --synthetic --batch 32 --steps 3 --eval-every 0 --sample 0 --profile
  step small-2 $small
fi
