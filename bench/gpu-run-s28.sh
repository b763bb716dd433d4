#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu-run-s28.sh -- session 28's GPU checks, from the top of a
# configured and built tree (.devdeps/run builds it):
#
#     bash .devdeps/run 'T=$OUT; OUT=/tmp/o TAR=$T/r.tgz PHASES=a bash bench/gpu-run-s28.sh'
#
# Outputs: bench/2026-12-03/c1 (phase a) .. c6 (phase f); record:
# bench/2026-12-03-gpu.md.  Phases c-e ran the 128-wide variant
# (TECORE_GEMM_OWN_TILE=128), not kept: on main the variable is gone and
# those steps run the 256-wide kernel.
# Phase a: cuBLASLt's algorithm measured for every GEMM of GPT-2 124M's
# step, not only the small, deep and aux ones (TECORE_GEMM_TUNE_MAX_DIM
# above every dimension; TECORE_GEMM_TUNE_ALGOS 8 and 32), with the
# tuner's choices logged (TE_DEBUG=INFO TE_DEBUG_SUBSYS=TUNE); the step
# as it is, beside torch.compile's over the same 20 steps
# (bench/gpt_peer.py); the tuned step's --profile; a 40-step run with
# the SM clock, power and temperature every 100 ms (the 5-7 ms slower
# steps 15-18 of session 27's runs).
# Phase a result: no gain beyond the runs' spread (57.8-59.4 ms against
# 58.6-58.9) and 3 GiB more peak (the measurement's scratch); the GPU
# holds its 700 W cap from about a second into a run (clocks 1470-1770
# MHz): the slower steps.  Not kept.
# Phase b: libte's own 16-bit GEMM (kernels/gemm16.cu, wgmma) for the
# GELU epilogues: check_gemm under TE_DEVICE=cuda (gemm_own_shapes: every
# epilogue it has, both B layouts, against the reference); te-bench
# --gemm with TECORE_GEMM_OWN=2 (the plain BF16 4096^3 and 8192^3 GEMMs
# through it, cuBLASLt called directly beside); GPT-2 124M's step with
# the GELU epilogues (TECORE_OPS_GELU_EPILOGUE=1) on libte's kernel, on
# cuBLASLt's (TECORE_GEMM_OWN=0) and off (te-gpt's default), its
# --profile; check_transformer and check_ops under TE_DEVICE=cuda.
# Phase b result: the kernel's plain GEMM at 0.80x (4096^3) and 0.86x
# (8192^3) of cuBLASLt's; the GELU epilogues correct in te-gpt (the same
# losses) but 701 us a call: the correctly rounded GELU of
# kernels/common/act.h costs more than the MMAs, behind them; check_gemm's
# new case failed with a launch failure (the case not named).
# Phase c: the GELU and its derivative on the special-function unit, a
# 128 x 128 variant two blocks an SM (TECORE_GEMM_OWN_TILE=128): check_gemm
# under TE_DEVICE=cuda with CUDA_LAUNCH_BLOCKING=1 and each case named
# before it runs (both widths; compute-sanitizer on it where it fails);
# te-bench --gemm with TECORE_GEMM_OWN=2 at both widths; GPT-2 124M's step
# with the GELU epilogues at both widths and their --profile.
# Phase c result: the dGELU kernel without column sums wrote through a null
# pointer (the failing case); the GELU GEMMs still 693-698 us a call at
# either width: not the GELU's arithmetic.  The epilogue's 4-byte stores
# (8 rows a warp instruction) are.
# Phase d: the epilogue through shared memory (D, aux, and the dGELU's
# aux read, whole rows of 16-byte accesses a warp): phase c again.
# Phase d result: check_gemm passes at both widths (48 GEMMs on the
# kernel); the plain GEMM 0.885x / 0.92x of cuBLASLt's at 4096^3 / 8192^3;
# the GELU GEMMs 435-442 us a call: the step at par with the separate
# GELU kernels (59.2 against 58.8-59.0 ms).
# Phase e: persistent blocks (one an SM; two at width 128), the next
# output block's first k-tiles loading during the epilogue, which takes
# the other stages; the forward's aux and D through one tile in turn:
# phase c again.
# Phase e result: 419 us a GELU GEMM call at width 256 (433 at 128), the
# plain GEMM 0.83x cuBLASLt's at 4096^3; the step at par (58.70 against
# 58.58-58.65 ms).  The 128-wide variant is dropped (slower everywhere).
# Phase f: the final code (width 256 only): check_gemm, check_transformer
# (with the GELU epilogues on and off) under TE_DEVICE=cuda; te-bench
# --gemm with TECORE_GEMM_OWN=2; GPT-2 124M's step as te-gpt runs it, with
# the GELU epilogues on libte's kernel and on cuBLASLt's
# (TECORE_GEMM_OWN=0), beside torch.compile's over the same 20 steps; the
# --profile with the epilogues on.
set -u
default_phases="a"
. "$(dirname "$0")/gpu-lib.sh"
gpt=tools/te-gpt
small="$gpt --model gpt2-124m --synthetic --batch 32 --steps 20 --eval-every 0 --sample 0 --json"
prof="$gpt --model gpt2-124m --synthetic --batch 32 --steps 3 --eval-every 0 --sample 0 --profile"
tune_all="TECORE_GEMM_TUNE_MAX_DIM=1000000000"
step machine sh -c 'nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv; nvcc --version | tail -2'
if has a; then
  make -s tools/te-gpt > /dev/null 2>&1
  step small-1 $small
  step small-t8 env $tune_all TECORE_GEMM_TUNE_ALGOS=8 TE_DEBUG=INFO TE_DEBUG_SUBSYS=TUNE $small
  step small-t32 env $tune_all TECORE_GEMM_TUNE_ALGOS=32 TE_DEBUG=INFO TE_DEBUG_SUBSYS=TUNE $small
  step small-peer20 python3 bench/gpt_peer.py speed --model gpt2-124m --batch 32 --compile --steps 20 --warmup 3
  step small-2 $small
  step small-t32b env $tune_all TECORE_GEMM_TUNE_ALGOS=32 $small
  step profile-t32 env $tune_all TECORE_GEMM_TUNE_ALGOS=32 $prof
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
    --format=csv -lms 100 > "$out/clocks.csv" 2>&1 &
  mon=$!
  step small-40 $gpt --model gpt2-124m --synthetic --batch 32 --steps 40 --eval-every 0 --sample 0 --json
  kill $mon 2>/dev/null; wait $mon 2>/dev/null
  [ -n "${TAR:-}" ] && tar czf "$TAR.part" -C "$out" . && mv "$TAR.part" "$TAR"
fi
if has b; then
  make -s t/core/check_gemm t/core/check_transformer t/core/check_ops tools/te-gpt tools/te-bench > /dev/null 2>&1
  step check_gemm env TE_DEVICE=cuda t/core/check_gemm
  step bench-gemm-own2 env TECORE_GEMM_OWN=2 tools/te-bench --gemm
  step small-1 $small
  step small-epi env TECORE_OPS_GELU_EPILOGUE=1 $small
  step small-epi-lt env TECORE_OPS_GELU_EPILOGUE=1 TECORE_GEMM_OWN=0 $small
  step small-epi-own2 env TECORE_OPS_GELU_EPILOGUE=1 TECORE_GEMM_OWN=2 $small
  step profile-epi env TECORE_OPS_GELU_EPILOGUE=1 $prof
  step small-epi2 env TECORE_OPS_GELU_EPILOGUE=1 $small
  step small-2 $small
  step check_transformer env TE_DEVICE=cuda TECORE_OPS_GELU_EPILOGUE=1 t/core/check_transformer
  step check_ops env TE_DEVICE=cuda t/core/check_ops
fi
if has c || has d || has e; then
  make -s t/core/check_gemm tools/te-gpt tools/te-bench > /dev/null 2>&1
  step check_gemm env TE_DEVICE=cuda CUDA_LAUNCH_BLOCKING=1 t/core/check_gemm
  step check_gemm-128 env TE_DEVICE=cuda CUDA_LAUNCH_BLOCKING=1 TECORE_GEMM_OWN_TILE=128 t/core/check_gemm
  if grep -q "^not ok" "$out/check_gemm.txt" "$out/check_gemm-128.txt"; then
    san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
    [ -n "$san" ] && step sanitizer env TE_DEVICE=cuda CK_RUN_CASE=reference CK_FORK=no $san --tool memcheck t/core/check_gemm
  fi
  step bench-gemm-own2 env TECORE_GEMM_OWN=2 tools/te-bench --gemm
  step bench-gemm-own2-128 env TECORE_GEMM_OWN=2 TECORE_GEMM_OWN_TILE=128 tools/te-bench --gemm
  step small-1 $small
  step small-epi env TECORE_OPS_GELU_EPILOGUE=1 $small
  step small-epi128 env TECORE_OPS_GELU_EPILOGUE=1 TECORE_GEMM_OWN_TILE=128 $small
  step profile-epi env TECORE_OPS_GELU_EPILOGUE=1 $prof
  step profile-epi128 env TECORE_OPS_GELU_EPILOGUE=1 TECORE_GEMM_OWN_TILE=128 $prof
  step small-2 $small
fi
if has f; then
  make -s t/core/check_gemm t/core/check_transformer tools/te-gpt tools/te-bench > /dev/null 2>&1
  step check_gemm env TE_DEVICE=cuda t/core/check_gemm
  step check_transformer env TE_DEVICE=cuda t/core/check_transformer
  step check_transformer-epi env TE_DEVICE=cuda TECORE_OPS_GELU_EPILOGUE=1 t/core/check_transformer
  step bench-gemm-own2 env TECORE_GEMM_OWN=2 tools/te-bench --gemm
  step small-1 $small
  step small-epi env TECORE_OPS_GELU_EPILOGUE=1 $small
  step small-epi-lt env TECORE_OPS_GELU_EPILOGUE=1 TECORE_GEMM_OWN=0 $small
  step small-peer20 python3 bench/gpt_peer.py speed --model gpt2-124m --batch 32 --compile --steps 20 --warmup 3
  step small-2 $small
  step small-epi2 env TECORE_OPS_GELU_EPILOGUE=1 $small
  step profile-epi env TECORE_OPS_GELU_EPILOGUE=1 $prof
fi
