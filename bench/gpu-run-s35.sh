#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu-run-s35.sh -- session 35's GPU checks, from the top of a
# configured and built tree (.devdeps/run builds it):
#
#     bash .devdeps/run 'T=$OUT; OUT=/tmp/o TAR=$T/r.tgz PHASES=a bash bench/gpu-run-s35.sh'
#
# Outputs: bench/2026-12-10/c1 (phase a) ..; record: bench/2026-12-10-gpu.md.
# Phase a: te_xent_train without its per-row stalls (session 34's c3: the
# row's scalars loaded after its reduction, the label's logit from
# global memory, a spilled register reloaded each row, every copy of the
# next row waited for before the first sum): check_xent under cuda (a
# case of more rows than blocks), GPT-2 124M's step four times beside two
# runs of torch.compile's peer, Nsight Compute's times of te_xent_train
# and of te_norm_fwd_fast16 with TECORE_NORM_FWD_WAVES 0 (a block a row
# group), 1, 2 and 4, and te_xent_train's full set.
# Phase a result (c1): correct (check_xent 10/10), but no faster:
# te_xent_train 2.56 ms at 76.7% of DRAM's peak (2.58 before); the step
# 56.38 / 55.31 / 55.76 / 55.09 ms against torch.compile's 68.99 / 69.20;
# te_norm_fwd_fast16 39.5 us a call with a block a row group, 41.2 / 40.9
# / 39.1 with 1 / 2 / 4 waves (no gain: the default stays).  The stall
# samples moved (the barrier 14%, the row's label load 7%) without the
# time moving: the two blocks of an SM run the same phases at the same
# time, so while both sum a row nothing of theirs is in flight.
# Phase b: te_xent_train sums the next row batch by batch during the
# gradient pass of the one before (a batch once the copy of the batch
# after it is issued), so a block keeps writing and copying while it
# sums: check_xent under cuda, te_xent_train's time, GPT-2's step four
# times around two runs of the peer, and te_xent_train's full set.
# Phase b result (c2): correct (check_xent 10/10, its case of more rows
# than blocks), and again no faster: te_xent_train 2.58-2.59 ms, 75.9% of
# DRAM's peak (the barrier still 14.6% of the samples, short scoreboard
# 21.6%); the step 54.93 / 54.93 / 54.83 / 54.68 ms against
# torch.compile's 68.47 / 68.47 (1.247-1.252x).  Not kept: the kernel is
# phase a's again (simpler, the same time).
# Phase c: te_xent_train's row copies (and its 16-bit gradient stores)
# with an evict-first L2 policy: the rows are read once, and their
# gradients are next read after 3 GB of other traffic.  TE_XENT_L2_HINT 2
# (copies and stores), 1 (copies) and 0 (neither), each rebuilt here:
# check_xent under cuda, te_xent_train's time and GPT-2's step twice for
# each, the peer once; llama-1b and the 1.3B model in FP8 with the
# default, against their session-33 figures (bench/2026-12-08-gpu.md).
# Phase c result (c3): correct (check_xent 10/10); no policy moves it:
# te_xent_train 2.54-2.57 ms with copies and stores evict-first, 2.56-2.58
# with copies only, 2.52-2.54 with neither (2.53-2.55 again with both);
# the step 54.61 / 54.69 / 54.93, 54.95 / 55.00 and 54.80 / 54.84 ms
# against torch.compile's 68.35 (1.244-1.252x).  llama-1b FP8 93.71 ms,
# the 1.3B FP8 182.13 (session 33: 93.35, 183.08).  The knob is gone: the
# kernel is phase a's.
# Phase d: GPT-2's LayerNorm rows (768: a warp a row, 3 vectors a thread)
# in a kernel compiled for that width (te_norm_fwd_warp16, norm_fwd's FT
# 32 and FNV 3: no per-vector tests, constant offsets), against
# te_norm_fwd_fast16 (TECORE_NORM_FWD_WARP16=0): check_norm under cuda,
# the forward norms' times both ways, and GPT-2's step four times with it
# and twice without beside the peer.
# Phase d result (c4): correct (check_norm 31/31, its 768-wide cases on
# te_norm_fwd_warp16); the forward norm 34.27 us a call (median of 50)
# against te_norm_fwd_fast16's 39.39, 0.13 ms a step over 25 calls; the
# step 55.03 / 54.87 / 54.51 / 54.74 ms with it, 54.77 / 54.66 without,
# torch.compile 68.52 (1.245-1.257x with it, median 1.250; 1.251 / 1.254
# without: the runs differ by more than the kernel saves).  The losses
# of runs of one setting differ from step 2 on (cuDNN's backward adds in
# no fixed order), so they cannot show the two kernels' bits equal; step
# 1's loss (forward only) is the same in every run, 10.99328.
set -u
default_phases="a"
. "$(dirname "$0")/gpu-lib.sh"
gpt=tools/te-gpt
small="$gpt --model gpt2-124m --synthetic --batch 32 --steps 20 --eval-every 0 --sample 0 --json"
prof="$gpt --model gpt2-124m --synthetic --batch 32 --steps 3 --eval-every 0 --sample 0 --profile"
peer="python3 bench/gpt_peer.py speed --model gpt2-124m --batch 32 --compile --steps 20 --warmup 3"
kt="/usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base"
full="/usr/local/cuda/bin/ncu --clock-control none --set full --import-source no --launch-count 1"
export_rep() {
  /usr/local/cuda/bin/ncu --import "$1.ncu-rep" --page details > "$1-details.txt" 2>&1
  /usr/local/cuda/bin/ncu --import "$1.ncu-rep" --page source --csv --print-source sass \
    2>&1 | gzip > "$1-source.csv.gz"
  rm -f "$1.ncu-rep"
}
step machine sh -c 'nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv; nvcc --version | tail -2'
if has a; then
  make -s tools/te-gpt t/core/check_xent > /dev/null 2>&1
  step check_xent env TE_DEVICE=cuda t/core/check_xent
  step small-1 $small
  step small-peer20 $peer
  step small-2 $small
  step small-3 $small
  step small-peer20b $peer
  step small-4 $small
  nk='regex:te_xent_train|te_norm_fwd_fast16'
  step ncu-k $kt --kernel-name "$nk" --launch-count 60 $prof
  for w in 1 2 4; do
    step ncu-k-waves$w env TECORE_NORM_FWD_WAVES=$w $kt --kernel-name "$nk" --launch-count 60 $prof
  done
  step small-waves2 env TECORE_NORM_FWD_WAVES=2 $small
  step ncu-xent $full --kernel-name te_xent_train --launch-skip 1 -o "$out/xent" $prof
  export_rep "$out/xent"
  step done true
fi
if has b; then
  make -s tools/te-gpt t/core/check_xent > /dev/null 2>&1
  step check_xent env TE_DEVICE=cuda t/core/check_xent
  step ncu-xent-t $kt --kernel-name te_xent_train $prof
  step small-1 $small
  step small-peer20 $peer
  step small-2 $small
  step small-3 $small
  step small-peer20b $peer
  step small-4 $small
  step ncu-xent $full --kernel-name te_xent_train --launch-skip 1 -o "$out/xent" $prof
  export_rep "$out/xent"
  step done true
fi
if has c; then
  # TE_XENT_L2_HINT (kernels/xent.cu): 2 (as built), then 1 and 0, each
  # rebuilt by adding the define to the compiler's command
  nv=$(sed -n 's/^NVCC = //p' Makefile)
  make -s tools/te-gpt t/core/check_xent > /dev/null 2>&1
  step check_xent env TE_DEVICE=cuda t/core/check_xent
  step ncu-xent-h2 $kt --kernel-name te_xent_train $prof
  step small-h2-1 $small
  step small-peer20 $peer
  step small-h2-2 $small
  for h in 1 0; do
    touch kernels/xent.cu
    make -s kernels/xent.fatbin NVCC="$nv -DTE_XENT_L2_HINT=$h" > /dev/null 2>&1
    make -s tools/te-gpt > /dev/null 2>&1
    step ncu-xent-h$h $kt --kernel-name te_xent_train $prof
    step small-h$h-1 $small
    step small-h$h-2 $small
  done
  touch kernels/xent.cu
  make -s tools/te-gpt > /dev/null 2>&1
  step ncu-xent-h2b $kt --kernel-name te_xent_train $prof
  step small-h2-3 $small
  step llama $gpt --model llama-1b --synthetic --batch 4 --steps 14 --eval-every 0 --sample 0 --recipe delayed --json
  step big $gpt --model gpt-1.3b --synthetic --batch 8 --steps 14 --eval-every 0 --sample 0 --recipe delayed --json
  step done true
fi
if has d; then
  make -s tools/te-gpt t/core/check_norm > /dev/null 2>&1
  step check_norm env TE_DEVICE=cuda t/core/check_norm
  nf='regex:te_norm_fwd'
  step ncu-nf $kt --kernel-name "$nf" --launch-count 50 $prof
  step ncu-nf-w0 env TECORE_NORM_FWD_WARP16=0 $kt --kernel-name "$nf" --launch-count 50 $prof
  step small-1 $small
  step small-w0 env TECORE_NORM_FWD_WARP16=0 $small
  step small-2 $small
  step small-peer20 $peer
  step small-3 $small
  step small-w0b env TECORE_NORM_FWD_WARP16=0 $small
  step small-4 $small
  step done true
fi
