#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu-run-s30.sh -- session 30's GPU checks, from the top of a
# configured and built tree (.devdeps/run builds it):
#
#     bash .devdeps/run 'T=$OUT; OUT=/tmp/o TAR=$T/r.tgz PHASES=a bash bench/gpu-run-s30.sh'
#
# Outputs: bench/2026-12-05/c1 (phase a) ..; record: bench/2026-12-05-gpu.md.
# Phase a: programmatic dependent launch for libtecore's own kernels
# (kernels/pdl.cuh: every kernel waits for the grid before it first, then
# lets the next one launch; TECORE_PDL=0 turns it off): the kernel
# families' checks under TE_DEVICE=cuda; GPT-2 124M's step with it and
# without beside torch.compile's (the losses of both must be the same
# bits); the step with cuBLASLt's algorithms measured for every GEMM with
# a dimension of at most 1024 (TECORE_GEMM_TUNE_MAX_DIM, which covers all
# of GPT-2's); llama-1b and 1.3B FP8 with and without; the --profile.
# Phase a result (c1): every check passes under cuda; the step 57.12-57.26
# ms with PDL, 56.97-57.13 without (no gain: the step's gaps are not
# launch latency), torch.compile 68.44; with every GEMM measured 56.70
# (the LM head's forward 3532 -> 3203 us, QKV 174 -> 163, 768 x 3072 x
# 32768 236 -> 213) but a 3.1 GiB timing scratch for the logits (peak
# 19903 MiB).  llama-1b 95.41 / 95.82 ms with / without PDL.
# Phase b: the derivative-aux GELU pair (TECORE_GEMM_EPI_BIAS_GELU_DAUX
# and DAUX_BGRAD: the forward saves gelu', the backward multiplies; the
# fuser takes it, TECORE_OPS_GELU_DAUX) and the tuner's new default
# (TECORE_GEMM_TUNE_MAX_DIM 4096, D itself as the timing output where it
# can be): check_gemm (its 84 own GEMMs), check_gemm_tune, check_transformer
# (case (c): the fuser's DAUX block against finite differences), te-bench
# --gemm (the DAUX rows), the step with the defaults, without DAUX and
# with the old tuning bound beside torch.compile, the profile; llama-1b
# and 1.3B FP8 with and without the new tuning bound; the decode.
# Phase b result (c2): check_gemm 11/11 (88 own GEMMs, the DAUX ones
# among them), check_transformer 17/17 (case (c) on the kernel); te-bench:
# the DAUX forward 293 us (pre-activation 286), DAUX_BGRAD 319 (dGELU +
# bias gradient 388); the step 56.78 / 57.41 ms with DAUX, 56.99 / 58.39
# without, torch.compile 68.93 (a noisy call: the profile ran slow
# throughout); llama-1b FP8 94.50 ms with the new tuning bound, 95.95
# with 512; 1.3B 184.91 / 185.47; decode steady 1766 / 1771 tokens/s
# with / without PDL.
# Phase c: the norm backward's reduce and the column sums' final kernel
# with their parts loaded before they are added (the same order, the same
# bits); TECORE_CUDNN_ENGINE_CFG 0-3 in the profile (which engines cuDNN's
# heuristics offer for attention, and their times); the step with the
# defaults and without DAUX, alternating, beside torch.compile twice.
# Phase c result (c3): check_norm 31/31, check_transformer 17/17,
# check_ops 47/47, check_kernels 10/10 under cuda; the step 56.04-56.76
# ms with the defaults (four runs), 56.58-56.92 without DAUX (two),
# torch.compile 68.61 / 68.71: 1.21-1.23x.  cuDNN's heuristics offer 3
# backward and 4 forward configurations; its first (engines 6 and 2) is
# the fastest by far (the others 1035-1272 us a backward against 674).
# The profiled step 2 ran ~12% slow after step 1's GEMM measurements.
# Phase d: the final code (te-gpt --profile now profiles step 3): the
# profile, the step beside torch.compile, llama-1b and 1.3B FP8 beside
# theirs.
# Phase d result (c4): the step 56.81 / 56.78 ms against torch.compile's
# 68.67 (1.209x); llama-1b FP8 93.88 against 145.43 (1.549x), 1.3B FP8
# 183.52 against 283.87 (1.547x).
# Phase e: the fc2 and attention-projection bias gradients from the norm
# backward that writes their output gradient (te_norm_bwd_fast_ds: the
# column sums of dx beside dgamma's; TECORE_OPS_NORM_BIAS_SUMS): the norm,
# transformer and fuser suites under cuda, the step with it and without
# beside torch.compile, the profile with and without.
# Phase e result (c5): correct (check_transformer 17/17, check_norm 31/31,
# check_ops 47/47) but slower: te_norm_bwd_fast_ds 141.9 us a call against
# te_norm_bwd_fast's 89.4 (its shared-memory adds and 332 bytes of spills
# at 80 registers), 1.2 ms a step more for 0.55 ms of column sums saved;
# the step 57.33-57.70 ms with it, 56.58-56.75 without, torch.compile
# 68.09.  Reverted (the phase needs de09757's code to run again).
# Phase f: the final code (the DAUX forward decided from the backward
# plan, e476247; g16_epi rewritten, b4fda3d): check_gemm's reference case
# and check_transformer under cuda, the step beside torch.compile.
# Phase f result (c6): check_gemm 11/11 (88 own GEMMs), check_transformer
# 17/17; the step 55.78 / 55.43 ms against torch.compile's 67.65
# (1.213-1.220x).
set -u
default_phases="a"
. "$(dirname "$0")/gpu-lib.sh"
gpt=tools/te-gpt
small="$gpt --model gpt2-124m --synthetic --batch 32 --steps 20 --eval-every 0 --sample 0 --json"
prof="$gpt --model gpt2-124m --synthetic --batch 32 --steps 3 --eval-every 0 --sample 0 --profile"
llama="$gpt --model llama-1b --synthetic --batch 4 --steps 14 --eval-every 0 --sample 0 --recipe delayed --json"
big="$gpt --model gpt-1.3b --synthetic --batch 8 --steps 14 --eval-every 0 --sample 0 --recipe delayed --json"
step machine sh -c 'nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv; nvcc --version | tail -2'
checks() {
  for t in check_norm check_kernels check_xent check_optim check_act check_embedding check_rope \
           check_transpose check_quantize check_recipe check_attn_cudnn check_gemm check_ops \
           check_transformer; do
    STEP_TIMEOUT=120 step "$t$1" env TE_DEVICE=cuda t/core/$t
  done
  STEP_TIMEOUT=120 step "check_attention-libte$1" env TE_DEVICE=cuda TECORE_ATTN_BACKEND=libte t/core/check_attention
  STEP_TIMEOUT=120 step "check_graph_seq$1" env TE_DEVICE=cuda t/graph/check_graph_seq
  STEP_TIMEOUT=120 step "check_graph_callable$1" env TE_DEVICE=cuda t/graph/check_graph_callable
}
if has a; then
  make -s tools/te-gpt tools/te-bench > /dev/null 2>&1
  make -s $(for t in norm kernels xent optim act embedding rope transpose quantize recipe attn_cudnn \
              gemm ops transformer attention; do echo t/core/check_$t; done) \
    t/graph/check_graph_seq t/graph/check_graph_callable > /dev/null 2>&1
  step small-1 $small
  step small-nopdl env TECORE_PDL=0 $small
  step small-peer20 python3 bench/gpt_peer.py speed --model gpt2-124m --batch 32 --compile --steps 20 --warmup 3
  step small-2 $small
  step small-nopdl2 env TECORE_PDL=0 $small
  step small-tune env TECORE_GEMM_TUNE_MAX_DIM=1024 TE_DEBUG=INFO TE_DEBUG_SUBSYS=TUNE $small
  step profile $prof
  checks ""
  step llama $llama
  step llama-nopdl env TECORE_PDL=0 $llama
  step big $big
  step big-nopdl env TECORE_PDL=0 $big
fi
if has b; then
  make -s tools/te-gpt tools/te-bench t/core/check_gemm t/core/check_gemm_tune \
    t/core/check_transformer t/core/check_ops > /dev/null 2>&1
  STEP_TIMEOUT=150 step check_gemm env TE_DEVICE=cuda CK_RUN_CASE=reference t/core/check_gemm
  if grep -q "^not ok" "$out/check_gemm.txt" || ! grep -q "^1\.\." "$out/check_gemm.txt"; then
    exit 0
  fi
  step check_transformer env TE_DEVICE=cuda t/core/check_transformer
  step small-1 $small
  step small-nodaux env TECORE_OPS_GELU_DAUX=0 $small
  step small-peer20 python3 bench/gpt_peer.py speed --model gpt2-124m --batch 32 --compile --steps 20 --warmup 3
  step small-2 $small
  step small-nodaux2 env TECORE_OPS_GELU_DAUX=0 $small
  step profile $prof
  step bench-gemm tools/te-bench --gemm
  step small-tune512 env TECORE_GEMM_TUNE_MAX_DIM=512 $small
  STEP_TIMEOUT=100 step check_gemm_tune env TE_DEVICE=cuda t/core/check_gemm_tune
  step check_ops env TE_DEVICE=cuda t/core/check_ops
  step llama $llama
  step llama-tune512 env TECORE_GEMM_TUNE_MAX_DIM=512 $llama
  step big $big
  step big-tune512 env TECORE_GEMM_TUNE_MAX_DIM=512 $big
  step decode tools/te-gpt --model gpt2-124m --synthetic --steps 0 --sample 256 --json
  step decode-nopdl env TECORE_PDL=0 tools/te-gpt --model gpt2-124m --synthetic --steps 0 --sample 256 --json
fi
if has c; then
  make -s tools/te-gpt tools/te-bench t/core/check_norm t/core/check_transformer \
    t/core/check_ops t/core/check_kernels > /dev/null 2>&1
  step check_norm env TE_DEVICE=cuda t/core/check_norm
  step check_transformer env TE_DEVICE=cuda t/core/check_transformer
  step small-1 $small
  step small-nodaux env TECORE_OPS_GELU_DAUX=0 $small
  step small-peer20 python3 bench/gpt_peer.py speed --model gpt2-124m --batch 32 --compile --steps 20 --warmup 3
  step small-2 $small
  step small-nodaux2 env TECORE_OPS_GELU_DAUX=0 $small
  step small-3 $small
  step small-peer20b python3 bench/gpt_peer.py speed --model gpt2-124m --batch 32 --compile --steps 20 --warmup 3
  step small-4 $small
  for k in 0 1 2 3; do
    step profile-cfg$k env TECORE_CUDNN_ENGINE_CFG=$k TE_DEBUG=INFO TE_DEBUG_SUBSYS=KERNEL $prof
  done
  step check_ops env TE_DEVICE=cuda t/core/check_ops
  step check_kernels env TE_DEVICE=cuda t/core/check_kernels
fi
if has d; then
  make -s tools/te-gpt > /dev/null 2>&1
  step profile $prof
  step small-1 $small
  step small-peer20 python3 bench/gpt_peer.py speed --model gpt2-124m --batch 32 --compile --steps 20 --warmup 3
  step small-2 $small
  step llama $llama
  step llama-peer python3 bench/gpt_peer.py speed --model llama-1b --batch 4 --compile --steps 8 --warmup 3
  step big $big
  step big-peer python3 bench/gpt_peer.py speed --model gpt-1.3b --batch 8 --compile --steps 8 --warmup 3
fi
if has e; then
  make -s tools/te-gpt t/core/check_norm t/core/check_transformer t/core/check_ops > /dev/null 2>&1
  step check_transformer env TE_DEVICE=cuda t/core/check_transformer
  step check_norm env TE_DEVICE=cuda t/core/check_norm
  step small-1 $small
  step small-nosums env TECORE_OPS_NORM_BIAS_SUMS=0 $small
  step small-peer20 python3 bench/gpt_peer.py speed --model gpt2-124m --batch 32 --compile --steps 20 --warmup 3
  step small-2 $small
  step small-nosums2 env TECORE_OPS_NORM_BIAS_SUMS=0 $small
  step small-3 $small
  step profile $prof
  step profile-nosums env TECORE_OPS_NORM_BIAS_SUMS=0 $prof
  step check_ops env TE_DEVICE=cuda t/core/check_ops
fi
if has f; then
  make -s tools/te-gpt t/core/check_gemm t/core/check_transformer > /dev/null 2>&1
  STEP_TIMEOUT=150 step check_gemm env TE_DEVICE=cuda CK_RUN_CASE=reference t/core/check_gemm
  step check_transformer env TE_DEVICE=cuda t/core/check_transformer
  step small-1 $small
  step small-peer20 python3 bench/gpt_peer.py speed --model gpt2-124m --batch 32 --compile --steps 20 --warmup 3
  step small-2 $small
fi
