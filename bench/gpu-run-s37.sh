#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu-run-s37.sh -- session 37's GPU checks, from the top of a
# configured and built tree (.devdeps/run builds it):
#
#     bash .devdeps/run 'T=$OUT; OUT=/tmp/o TAR=$T/r.tgz PHASES=a bash bench/gpu-run-s37.sh'
#
# Outputs: bench/2026-12-12/c1 (phase a) ..; record: bench/2026-12-12-gpu.md.
# Phase a: the wide DAUX product kernel (te_gemm16_*_dmulw: 384 threads,
# one m64n256k16 MMA a k-step, the aux tile through the TMA into the
# output tile, multiplied there by the MMA warpgroups) against the
# 512-thread one (TECORE_GEMM16_WIDE=0): check_transformer and
# check_gemm's reference case under cuda, Nsight Compute's times of the
# own GEMMs in GPT-2's step both ways, GPT-2's step for 40 steps with,
# without, with, without beside one 40-step run of the peer (clocks
# sampled), and the full set of one wide launch.
# Phase a result (c1): correct (check_transformer 19/19, check_gemm's
# reference case 11/11 under cuda); GPT-2's fc2 dgrad (DAUX product +
# bias gradient, 32768 x 3072 x 768) 273.0 us a call (median of 12) on
# the wide kernel against 316.1 on the 512-thread one; the step 54.22 /
# 54.11 ms wide, 54.63 / 55.16 not, torch.compile 68.18 (1.257 / 1.260x
# wide, 1.248 / 1.236x not).  The wide kernel's tensor pipe is busy 63%
# of the time; 20% of its stall samples are the MMA warps at the stages'
# full barrier, L2 at 74% of its peak, DRAM at 49%.
# Phase b: the final code: GPT-2 BF16 from a saved initial checkpoint
# against bench/gpt_peer.py check on the same batches (50 steps, the
# DAUX pair on the wide kernel), then GPT-2's step for 40 steps four
# times around two 40-step runs of the peer (clocks sampled).
# Phase b result (c2): te-gpt's losses from the saved checkpoint against
# PyTorch's on the same batches: step 1 within 1.5e-6, at most 3.0% apart
# (step 26, where the loss falls fastest; 0.6% at step 50: BF16's drift,
# as in bench/2026-11-23g, 2.8% at step 24).  GPT-2 54.71 / 55.09 /
# 54.72 / 55.57 ms (medians of steps 3-40; 1623-1670 MHz, 635-659 W)
# against torch.compile's 68.95 / 69.06 (1826 MHz, 615-631 W):
# 1.241-1.262x, 1.257x median to median; peak memory 16831 / 18763 MiB.
# Phase c: the wide forward kernel (te_gemm16_*_geludw: 288 threads, the
# m64n256k16 mainloop, no epilogue warps: each MMA warp stores the GELU
# and gelu' of its 16 rows of the last block in slices between the next
# block's k-tiles, 224 registers a thread) against the 512-thread one
# (TECORE_GEMM16_WIDE=1: the product alone wide): check_transformer and
# check_gemm's reference case under cuda, Nsight Compute's times of the
# own GEMMs both ways, GPT-2's step for 40 steps with, without, with,
# without beside one 40-step run of the peer (c4 and c5 also took the
# full set of one wide forward launch: geludw-details.txt).
# Phase c result (c3-c5): correct and slower; removed.  c3: the kernel at
# 224 registers a thread (__maxnreg__) did not launch (too many
# resources: 288 threads are 9 warps, three of them on one SM
# sub-partition, whose 16384 registers allow 170 a thread), so it went
# back to 168 registers with the bias in shared memory.  c4 (a slice
# after each k-tile's wait) and c5 (before it, while two k-tiles are
# queued): the forward 358.2 / 353.2 us a call against the 512-thread
# kernel's 293.4 / 291.8 -- the slices, latency-bound chains of ex2 and
# rcp in the MMA warps, hold back the next k-tile's MMAs (tensor pipe 46%
# busy).  gemm_own_shapes passed with it (c4, c5: check_gemm 12/12 in
# c5).  The step with the product alone wide (TECORE_GEMM16_WIDE=1, the
# final code): 54.77 / 54.37 ms (c4), 54.97 / 54.68 (c5) against
# torch.compile's 68.83 / 68.68: 1.249-1.266x.  The kernel is gone
# again; phase c now runs the same kernels both ways.
# Phase d: the wide product kernel in clusters of two (each CTA loads its
# A and half of B, multicast to both: 32 KiB a k-step from L2 instead of
# 48) against alone (TECORE_GEMM16_CLUSTER=1): check_transformer,
# Nsight Compute's times of the own GEMMs both ways, GPT-2's step for 40
# steps with, without, with, without beside one 40-step run of the peer,
# check_gemm's reference case under cuda.
# Phase d result (c6): correct (check_transformer 19/19, check_gemm 12/12
# under cuda) and no faster: the product 290.4 us a call in pairs against
# 280.5 alone (Nsight Compute, medians of 12; grid 132 both ways, so 66
# pairs ran at once); the step 54.63 / 54.93 ms in pairs, 55.34 / 54.90
# alone, torch.compile 67.75 (1.224-1.240x: this call's peer ran 1-2%
# faster than in c1-c5).  The pairs were removed again (their launch code
# is session 32's, 5dbaf29); phase d now needs them back to run.
set -u
default_phases="a"
. "$(dirname "$0")/gpu-lib.sh"
gpt=tools/te-gpt
prof="$gpt --model gpt2-124m --synthetic --batch 32 --steps 3 --eval-every 0 --sample 0 --profile"
long="$gpt --model gpt2-124m --synthetic --batch 32 --steps 40 --eval-every 0 --sample 0 --json"
peer40="python3 bench/gpt_peer.py speed --model gpt2-124m --batch 32 --compile --steps 40 --warmup 3"
kt="/usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base"
full="/usr/local/cuda/bin/ncu --clock-control none --set full --import-source no --launch-count 1"
# ab SFX CMD...: the own GEMM's times and GPT-2's step with the defaults
# and under CMD (an env setting; steps named ...-SFX), after
# check_transformer under cuda; then check_gemm's reference case.
# Returns 1, with a step "stop", where check_transformer fails.
ab() {
  local sfx=$1 gk='regex:te_gemm16_bf16'
  shift
  make -s tools/te-gpt t/core/check_gemm t/core/check_transformer > /dev/null 2>&1
  STEP_TIMEOUT=60 step check_transformer env TE_DEVICE=cuda t/core/check_transformer
  if ! grep -q "^1\.\." "$out/check_transformer.txt" || grep -q "^not ok" "$out/check_transformer.txt"; then
    step stop true
    return 1
  fi
  step ncu-g16 $kt --kernel-name "$gk" --launch-count 24 $prof
  step "ncu-g16-$sfx" "$@" $kt --kernel-name "$gk" --launch-count 24 $prof
  smi gpt40-1 $long
  smi "gpt40-$sfx-1" "$@" $long
  smi peer40 $peer40 --json "$out/peer40.json"
  smi gpt40-2 $long
  smi "gpt40-$sfx-2" "$@" $long
  STEP_TIMEOUT=200 step check_gemm env TE_DEVICE=cuda CK_RUN_CASE=reference t/core/check_gemm
}
step machine sh -c 'nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv; nvcc --version | tail -2'
if has a && ab w0 env TECORE_GEMM16_WIDE=0; then
  step ncu-w-full $full --kernel-name regex:dmulw --launch-skip 3 -o "$out/dmulw" $prof
  export_rep "$out/dmulw"
  step done true
fi
if has b; then
  make -s tools/te-gpt > /dev/null 2>&1
  corpus=/tmp/te-gpt-corpus.txt
  cat man/man1/*.1 man/man3/*.3 man/man7/*.7 > "$corpus"
  rm -rf /tmp/te-gpt-init
  step check-init $gpt --model gpt2-124m --data "$corpus" --steps 0 --save /tmp/te-gpt-init --sample 0
  step check-te $gpt --model gpt2-124m --load /tmp/te-gpt-init --data "$corpus" --steps 50 \
    --batch 8 --lr 6e-4 --eval-every 0 --sample 0 --json
  step check-peer python3 bench/gpt_peer.py check --ckpt /tmp/te-gpt-init --data "$corpus" \
    --te-json "$out/check-te.txt" --steps 50 --batch 8 --lr 6e-4
  smi gpt40-1 $long
  smi peer40-1 $peer40 --json "$out/peer40-1.json"
  smi gpt40-2 $long
  smi gpt40-3 $long
  smi peer40-2 $peer40 --json "$out/peer40-2.json"
  smi gpt40-4 $long
  step done true
fi
if has c && ab w1 env TECORE_GEMM16_WIDE=1; then
  step done true
fi
if has d && ab c1 env TECORE_GEMM16_CLUSTER=1; then
  step done true
fi
