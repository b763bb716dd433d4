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
