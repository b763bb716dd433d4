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
# Phase d result: slower (the dGELU 507-515 us a call): the unrolled rows
# spill and outgrow the instruction cache.  Back to phase c's kernel.
# Phase e: diagnostic variants of phase c's kernel (TE_G16_X, built only
# for this call, not kept): the dGELU without its aux loads (1), without
# its gelu' (2), with gelu' from the hardware tanh (3); the GELU forward
# without the GELU (1), with the hardware tanh (2).
# Phase e result: dGELU 385 us (as phase c), 309 without the loads, 319
# without the arithmetic, 348 with tanh; the forward 289, 303 without the
# GELU, 297 with tanh: the forward is not bound by its epilogue warps, the
# dGELU by both their loads and their arithmetic.
# Phase f: eleven epilogue warps (640 threads: three warpgroups give
# registers back down to 56, the MMA warpgroups keep 168), the dGELU's
# aux two rows ahead in a rolled loop; the checks and the step as in
# phase c, te-gpt with its new default (the epilogues on).
# Phase f result (c6): the first own GEMM of check_gemm hung: with 640
# threads a launch gives each 96 registers, the MMA warpgroups' raise to
# 168 waited for more than the others gave back (56 each).  Phase g:
# the same with the others at 48 (the balance computed from the launch's
# share).
# Phase g result (c7): correct, but the dGELU 439 us a call (the 48-register
# epilogue warps spill), the forward 287: not kept; back to seven epilogue
# warps (phase c's kernel, its SASS unchanged).
# Phase h: phase c's kernel with the dGELU's aux loaded two batches of
# three rows ahead (three register sets, the loop still rolled by batch):
# the checks and the step as in phase g.
# Phase h result (c8): the dGELU 413 us a call (385-387 in c3 and c5):
# not kept.  The final kernel is phase c's (c3, c5's x0 rows).
# Phase i: the final code (phase c's kernel, SASS unchanged): check_gemm
# with gemm_own_shapes' new cases (1536 x 3072 x 448: seven k-tiles a
# block, the stages' phases turning within and across blocks), the whole
# check_gemm and check_transformer with te-gpt's epilogues, the step with
# te-gpt's default and with the GELU apart beside torch.compile.
# Phase i result (c9): check_gemm 15/15 (52 own GEMMs, the new ones among
# them); the step 56.92 / 57.03 ms with te-gpt's default, 58.41 / 58.80
# with the GELU apart, torch.compile 68.29: 1.197-1.200x.
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
if has f || has g || has h || has i; then
  make -s t/core/check_gemm t/core/check_transformer tools/te-gpt tools/te-bench > /dev/null 2>&1
  STEP_TIMEOUT=150 step check_gemm env TE_DEVICE=cuda CK_RUN_CASE=reference t/core/check_gemm
  if grep -q "^not ok" "$out/check_gemm.txt" || ! grep -q "^1\.\." "$out/check_gemm.txt"; then
    exit 0
  fi
  has h || has i || step bench-gemm-own2 env TECORE_GEMM_OWN=2 tools/te-bench --gemm
  has i || step bench-gemm tools/te-bench --gemm
  step check_transformer-epi env TE_DEVICE=cuda TECORE_OPS_GELU_EPILOGUE=1 t/core/check_transformer
  step small-1 $small
  step small-apart env TECORE_OPS_GELU_EPILOGUE=0 $small
  step small-peer20 python3 bench/gpt_peer.py speed --model gpt2-124m --batch 32 --compile --steps 20 --warmup 3
  step small-2 $small
  step small-apart2 env TECORE_OPS_GELU_EPILOGUE=0 $small
  step profile $prof
  has i && step check_gemm-all env TE_DEVICE=cuda t/core/check_gemm
fi
if has e; then
  # diagnostic kernels (not kept): TE_G16_X picks a variant of the bf16
  # dGELU (B [k][n]) and GELU (B [n][k]) kernels
  make -s tools/te-gpt tools/te-bench > /dev/null 2>&1
  step bench-x0 tools/te-bench --gemm
  step bench-x1 env TE_G16_X=1 tools/te-bench --gemm
  step bench-x2 env TE_G16_X=2 tools/te-bench --gemm
  step bench-x3 env TE_G16_X=3 tools/te-bench --gemm
  step small-x0 $small
  step small-x3 env TE_G16_X=3 $small
  step small-x0b $small
  step small-x3b env TE_G16_X=3 $small
fi
