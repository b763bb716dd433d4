#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu-run-s36.sh -- session 36's GPU checks, from the top of a
# configured and built tree (.devdeps/run builds it):
#
#     bash .devdeps/run 'T=$OUT; OUT=/tmp/o TAR=$T/r.tgz PHASES=a bash bench/gpu-run-s36.sh'
#
# Outputs: bench/2026-12-11/c1 (phase a) ..; record: bench/2026-12-11-gpu.md.
# Phase a: AdamW through shared memory (te_optim_adam_staged: each full
# chunk's p, m, v and g copied with cp.async before the block reads the
# step's values and works out its hyperparameters) against the register
# kernel (TECORE_OPTIM_ADAM_STAGED=0): check_optim under cuda, GPT-2
# 124M's step four times with it and twice without beside one run of
# torch.compile's peer, Nsight Compute's times of both Adam kernels and
# of the norm's partial sums, and the full sets of the staged kernel,
# te_optim_l2_partial and te_norm_bwd_fast_cs (what to take on next).
# Phase a result (c1): correct (check_optim 22/22 under cuda), no faster:
# the two AdamW launches of GPT-2's decayed tensors 1019.4 / 550.8 us
# staged against 1020.6 / 563.3 in registers (2.9 TB/s either way, 87% of
# DRAM's peak for the 28 bytes a parameter moves); the step 55.27 / 54.35
# / 55.01 / 54.26 ms staged, 55.16 / 54.87 not, torch.compile 68.19.  The
# staged kernel is gone (b974421).  te_optim_l2_partial 116 + 55 us at
# 77% of DRAM's peak; te_norm_bwd_fast_cs 80.5 us at 72%, 36% of its
# samples waiting on a row's first loads, 41% of issue slots busy.
# Phase b: where GPT-2's graphed step goes: Nsight Systems over 20 steps
# (every kernel node of the replayed graph: the GPU's busy time against
# the step, the gaps between kernels) and Nsight Compute's times of every
# kernel of te-gpt --profile with the caches as the kernels leave them.
# Phase b result (c2): Nsight Systems is not on the machine; the eager
# step's kernels add up to 53.39 ms (te_fill and te_scale_add, which the
# graph does not hold, 0.64 of it).  In every run of phase a (and of
# session 35) steps 15-19 take 57-61 ms against 54-55 for steps 3-14.
# Phase c: what slows steps 15-19: GPT-2's step for 40 steps (twice) and
# torch.compile's peer for 40 (its per-step times in JSON), each with
# the GPU's SM clock, power, temperature and throttle reasons sampled
# every 50 ms by nvidia-smi.
# Phase c result (c3): the GPU is held at its power limit (700 W; the
# throttle reason is the software power cap, 0x4, in every sample over
# 400 W): te-gpt's SM clock averages 1630-1665 MHz at 633-639 W, the
# peer's 1791 at 632.  The step time swings with a period of about 17
# steps: steps 15-19 and 32-38 of te-gpt's runs take 57-62 ms against
# 54-56 for the others, the peer's 16-18 73 ms against 69-70.  Medians:
# te-gpt 55.37 / 55.96 ms over steps 3-20, 55.49 / 56.20 over 3-40; the
# peer 69.85 over its 40 (69.77 over its first 20): 1.243-1.259x.
# Phase d: the final code: check_xent under cuda (its copies now through
# ldst.cuh's helpers), GPT-2's step for 40 steps four times around two
# 40-step runs of the peer (clocks sampled), llama-1b and the 1.3B model
# in FP8 each beside its torch.compile peer.
# Phase d result (c4): check_xent 10/10 under cuda; GPT-2 55.04 / 55.49
# / 55.37 / 55.19 ms (medians of steps 3-40) against torch.compile's
# 68.04 / 68.58 (its 40): 1.231-1.246x (steps 3-20 against the peer's
# first 20: 1.228-1.250x); te-gpt's clock 1638 MHz at 655 W, the peer's
# 1829 at 624.  llama-1b FP8 93.26 ms against 145.64 (1.562x), the 1.3B
# FP8 182.98 against 280.62 (1.534x); peak memory 16831 / 18763, 34283
# / 35439 and 45495 / 49847 MiB.
# Phase e: the norm kernels ask L2 for the rows they take next
# (cp.async.bulk.prefetch.L2): te_norm_bwd_fast(_cs) each row slot's next
# row (x, dy, extra_grad), the 16-bit forwards the rows of the block that
# starts as this one ends.  check_norm under cuda; Nsight Compute's times
# of te_norm_bwd_fast_cs and te_norm_fwd_warp16 with the prefetches
# (the default) and without (TECORE_NORM_BWD_PREFETCH=0,
# TECORE_NORM_FWD_PREFETCH=0); GPT-2's step for 40 steps with, without,
# with, without, beside one 40-step run of the peer.
# Phase e result (c5): correct (check_norm 33/33 under cuda) and no
# faster: te_norm_bwd_fast_cs 81.47 us a call (median of 48) with the
# prefetch, 82.03 without; te_norm_fwd_warp16 34.72 with, 33.89 without;
# the step 54.05 / 55.00 ms with, 54.30 / 55.13 without, torch.compile
# 68.62 (1.245-1.270x: the pairs differ by less than the runs).  Both
# prefetches were removed again (c2c0e91).
set -u
default_phases="a"
. "$(dirname "$0")/gpu-lib.sh"
gpt=tools/te-gpt
small="$gpt --model gpt2-124m --synthetic --batch 32 --steps 20 --eval-every 0 --sample 0 --json"
prof="$gpt --model gpt2-124m --synthetic --batch 32 --steps 3 --eval-every 0 --sample 0 --profile"
peer="python3 bench/gpt_peer.py speed --model gpt2-124m --batch 32 --compile --steps 20 --warmup 3"
kt="/usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base"
full="/usr/local/cuda/bin/ncu --clock-control none --set full --import-source no --launch-count 1"
step machine sh -c 'nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv; nvcc --version | tail -2'
if has a; then
  make -s tools/te-gpt t/core/check_optim > /dev/null 2>&1
  step check_optim env TE_DEVICE=cuda t/core/check_optim
  step small-1 $small
  step small-peer20 $peer
  step small-2 $small
  step small-s0-1 env TECORE_OPTIM_ADAM_STAGED=0 $small
  step small-3 $small
  step small-s0-2 env TECORE_OPTIM_ADAM_STAGED=0 $small
  step small-4 $small
  ak='regex:te_optim_adam|te_optim_l2_partial'
  step ncu-adam $kt --kernel-name "$ak" --launch-count 40 $prof
  step ncu-adam-s0 env TECORE_OPTIM_ADAM_STAGED=0 $kt --kernel-name "$ak" --launch-count 40 $prof
  step ncu-adam-full $full --kernel-name te_optim_adam_staged --launch-skip 5 -o "$out/adam" $prof
  export_rep "$out/adam"
  step ncu-l2-full $full --kernel-name te_optim_l2_partial --launch-skip 2 -o "$out/l2" $prof
  export_rep "$out/l2"
  step ncu-nbwd-full $full --kernel-name te_norm_bwd_fast_cs --launch-skip 30 -o "$out/nbwd" $prof
  export_rep "$out/nbwd"
  step done true
fi
if has b; then
  make -s tools/te-gpt > /dev/null 2>&1
  nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
  step small-1 $small
  step nsys $nsys profile --cuda-graph-trace=node --trace=cuda -o "$out/gpt" -f true $small
  step nsys-sum $nsys stats --report cuda_gpu_kern_sum --format csv -o "$out/gpt" "$out/gpt.nsys-rep"
  $nsys stats --report cuda_gpu_trace --format csv "$out/gpt.nsys-rep" 2>/dev/null | gzip > "$out/gpt-trace.csv.gz"
  rm -f "$out/gpt.nsys-rep" "$out/gpt.sqlite"
  step ncu-all $kt --cache-control none $prof
  gzip -f "$out/ncu-all.txt"
  step done true
fi
if has c; then
  make -s tools/te-gpt > /dev/null 2>&1
  long="$gpt --model gpt2-124m --synthetic --batch 32 --steps 40 --eval-every 0 --sample 0 --json"
  smi gpt40-1 $long
  smi peer40 python3 bench/gpt_peer.py speed --model gpt2-124m --batch 32 --compile --steps 40 \
    --warmup 3 --json "$out/peer40.json"
  smi gpt40-2 $long
  step done true
fi
if has d; then
  make -s tools/te-gpt t/core/check_xent > /dev/null 2>&1
  step check_xent env TE_DEVICE=cuda t/core/check_xent
  long="$gpt --model gpt2-124m --synthetic --batch 32 --steps 40 --eval-every 0 --sample 0 --json"
  peer40="python3 bench/gpt_peer.py speed --model gpt2-124m --batch 32 --compile --steps 40 --warmup 3"
  smi gpt40-1 $long
  smi peer40-1 $peer40 --json "$out/peer40-1.json"
  smi gpt40-2 $long
  smi gpt40-3 $long
  smi peer40-2 $peer40 --json "$out/peer40-2.json"
  smi gpt40-4 $long
  step llama $gpt --model llama-1b --synthetic --batch 4 --steps 14 --eval-every 0 --sample 0 --recipe delayed --json
  step llama-peer python3 bench/gpt_peer.py speed --model llama-1b --batch 4 --compile --steps 8 --warmup 3
  step big $gpt --model gpt-1.3b --synthetic --batch 8 --steps 14 --eval-every 0 --sample 0 --recipe delayed --json
  step big-peer python3 bench/gpt_peer.py speed --model gpt-1.3b --batch 8 --compile --steps 8 --warmup 3
  step done true
fi
if has e; then
  make -s tools/te-gpt t/core/check_norm > /dev/null 2>&1
  step check_norm env TE_DEVICE=cuda t/core/check_norm
  off="env TECORE_NORM_BWD_PREFETCH=0 TECORE_NORM_FWD_PREFETCH=0"
  nk='regex:te_norm_bwd_fast_cs|te_norm_fwd_warp16'
  step ncu-norm $kt --kernel-name "$nk" --launch-count 100 $prof
  step ncu-norm-off $off $kt --kernel-name "$nk" --launch-count 100 $prof
  long="$gpt --model gpt2-124m --synthetic --batch 32 --steps 40 --eval-every 0 --sample 0 --json"
  smi gpt40-1 $long
  smi gpt40-off-1 $off $long
  smi peer40 python3 bench/gpt_peer.py speed --model gpt2-124m --batch 32 --compile --steps 40 \
    --warmup 3 --json "$out/peer40.json"
  smi gpt40-2 $long
  smi gpt40-off-2 $off $long
  step done true
fi
