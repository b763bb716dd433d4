#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu-run-s29.sh -- session 29's GPU checks, from the top of a
# configured and built tree (.devdeps/run builds it):
#
#     bash .devdeps/run 'T=$OUT; OUT=/tmp/o TAR=$T/r.tgz PHASES=a bash bench/gpu-run-s29.sh'
#
# Outputs: bench/2026-12-04/c1 (phase a) ..; record: bench/2026-12-04-gpu.md.
# Phase a: the warp-specialized own GEMM (kernels/gemm16.cu: a TMA
# producer warp and mbarrier stages, three epilogue warps taking each
# output block from shared memory while the two MMA warpgroups run the
# next): check_gemm under TE_DEVICE=cuda (gemm_own_shapes, the 144-block
# cases among them; compute-sanitizer on it where it fails, and nothing
# else then); te-bench --gemm with TECORE_GEMM_OWN=2 (the plain GEMMs and
# the BF16 Linear+bias+GELU rows at GPT-2's fc1); check_transformer with
# the GELU epilogues; GPT-2 124M's step with the GELU epilogues on the
# kernel, off (te-gpt's default before this session) and on cuBLASLt's,
# beside torch.compile's over the same 20 steps; the --profile with the
# epilogues on.
# Phase a result: check_gemm passes (gemm_own_shapes' 50 GEMMs on the
# kernel, the 144-block ones among them); the fused Linear+bias+GELU at
# GPT-2's fc1 301 us against 417 unfused; but te-gpt's GELU GEMMs average
# 594 us a call (forward and dGELU together) and the step is slower with
# the epilogues (61.8 ms) than without (59.0): three epilogue warps, one
# an SM sub-partition, cannot keep up with the MMAs (about 170
# instructions a row of 8 values, latency-bound with one warp each).
# Phase b: seven epilogue warps (512 threads; setmaxnreg gives the MMA
# warpgroups 168 registers and the others 88), rows without bounds checks
# but the last, the dGELU's aux three rows ahead; te-bench --gemm's new
# dGELU + bias-gradient row at GPT-2's fc2 dgrad (B [k][n]): phase a's
# steps again.
# Phase b result: check_gemm passes; the step with the epilogues 57.4 ms
# against 58.9-59.0 without and torch.compile's 68.2 (1.189x); the GELU
# GEMMs 367 us a call in te-gpt; te-bench: 308 us the forward, 385 the
# dGELU + bias gradient (461 unfused without it).
# Phase c: the bias from shared memory (the epilogue warps stage each
# block's; the MMA warpgroups' global loads of it stalled the MMAs), the
# dGELU's first aux rows loaded before the block is ready; te-gpt turns
# the GELU epilogues on itself for BF16 on compute capability 9.0;
# te-bench --gemm also with the default TECORE_GEMM_OWN (the plain GEMMs
# of its notes on cuBLASLt); phase b's steps again.
# Phase c result: the forward 288 us a call (the same GEMM with the bias
# alone 249 on the kernel, 224 on cuBLASLt), the dGELU 387 (alone 247 /
# 222): the dGELU's epilogue warps wait on their aux loads (three rows in
# flight a warp); the step 57.3-57.5 ms with the epilogues, 58.7-58.9
# without, torch.compile 68.5 (1.19x).
# Phase d: the dGELU's aux six rows ahead (the rows' loop unrolled, each
# row's chunk live from its load to its use); phase c's steps again.
set -u
default_phases="a"
. "$(dirname "$0")/gpu-lib.sh"
gpt=tools/te-gpt
small="$gpt --model gpt2-124m --synthetic --batch 32 --steps 20 --eval-every 0 --sample 0 --json"
prof="$gpt --model gpt2-124m --synthetic --batch 32 --steps 3 --eval-every 0 --sample 0 --profile"
step machine sh -c 'nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv; nvcc --version | tail -2'
if has a || has b || has c || has d; then
  make -s t/core/check_gemm t/core/check_transformer tools/te-gpt tools/te-bench > /dev/null 2>&1
  STEP_TIMEOUT=90 step check_gemm env TE_DEVICE=cuda CK_RUN_CASE=reference t/core/check_gemm
  if grep -q "^not ok" "$out/check_gemm.txt" || ! grep -q "^1\.\." "$out/check_gemm.txt"; then
    san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
    [ -n "$san" ] && STEP_TIMEOUT=120 step sanitizer env TE_DEVICE=cuda CK_RUN_CASE=reference CK_FORK=no \
      CUDA_LAUNCH_BLOCKING=1 $san --tool memcheck t/core/check_gemm
    exit 0
  fi
  step bench-gemm-own2 env TECORE_GEMM_OWN=2 tools/te-bench --gemm
  { has c || has d; } && step bench-gemm tools/te-bench --gemm
  step check_transformer-epi env TE_DEVICE=cuda TECORE_OPS_GELU_EPILOGUE=1 t/core/check_transformer
  step small-epi env TECORE_OPS_GELU_EPILOGUE=1 $small
  step small-1 env TECORE_OPS_GELU_EPILOGUE=0 $small
  step small-epi-lt env TECORE_OPS_GELU_EPILOGUE=1 TECORE_GEMM_OWN=0 $small
  step small-peer20 python3 bench/gpt_peer.py speed --model gpt2-124m --batch 32 --compile --steps 20 --warmup 3
  step small-epi2 env TECORE_OPS_GELU_EPILOGUE=1 $small
  step small-2 env TECORE_OPS_GELU_EPILOGUE=0 $small
  step profile-epi env TECORE_OPS_GELU_EPILOGUE=1 $prof
  step check_gemm-all env TE_DEVICE=cuda t/core/check_gemm
fi
