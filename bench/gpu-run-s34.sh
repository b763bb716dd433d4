#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu-run-s34.sh -- session 34's GPU checks, from the top of a
# configured and built tree (.devdeps/run builds it):
#
#     bash .devdeps/run 'T=$OUT; OUT=/tmp/o TAR=$T/r.tgz PHASES=a bash bench/gpu-run-s34.sh'
#
# Outputs: bench/2026-12-09/c1 (phase a) ..; record: bench/2026-12-09-gpu.md.
# Phase a: the QKV bias gradient from the softmax's identities (the query
# part's column sums only, the key part 0, the value part the output
# Linear's bias gradient times its weight: TECORE_OPS_QKV_BIAS, default
# 1): check_transformer and check_norm under cuda, GPT-2 124M's step with
# and without it beside torch.compile's, Nsight Compute's times of the
# column-sum kernels and te_qkv_kv_bias in te-gpt --profile's eager steps
# both ways.
# Phase a result (c1): correct (check_transformer 19/19, the new case's
# query part the same bits as the twin's, the value part 1.6e-3 from it;
# check_norm 31/31); the step 55.09 / 54.98 / 54.65 ms with it against
# 55.13 / 55.10 without (torch.compile 68.71: 1.247-1.257x against
# 1.246-1.247x); the QKV bias gradient's kernels 32.4 us a layer (sums of
# the query third 20.6 + their final 4.6 + te_qkv_kv_bias 7.2) where the
# whole dQKV's took 56.2 (51.9 + 4.3).
# Phase b: te_qkv_kv_bias with eight rows' loads in flight (the final
# code): check_transformer and check_norm under cuda, its time, and
# GPT-2's step five times with it and twice without, beside two runs of
# torch.compile's peer.
# Phase b result (c2): correct (check_transformer 19/19, check_norm
# 31/31); te_qkv_kv_bias 6.1 us (the QKV bias gradient's kernels 31.2 us
# a layer); the step 55.48 / 55.75 / 55.87 / 55.38 / 55.14 ms with the
# identities, 56.31 / 55.81 without, torch.compile 69.36 / 69.51:
# 1.243-1.259x (without 1.233-1.244x).
# Phase c: Nsight Compute's full set (the per-instruction stall samples
# as CSV) for the memory-bound kernels of the step furthest from the copy
# floor: the cross-entropy (te_xent_train, 2.6 ms, 85%), the norm forward
# (te_norm_fwd_fast16, 39 us a call) and backward with the column sums
# (te_norm_bwd_fast_cs, 78 us a call).
# Phase c result (c3): te_xent_train 2.58 ms at 76.8% of DRAM's peak, 49%
# occupancy, the row reduction's barrier 18.6% of the samples;
# te_norm_fwd_fast16 40.5 us at 59.5%, the first loads 28%;
# te_norm_bwd_fast_cs 80.2 us at 72.5%, 80 registers (37.5% occupancy).
# Phase d: the final code (te_qkv_kv_bias's launcher takes the heads as a
# struct; the kernels as in phase b): check_transformer and check_norm
# under cuda, and GPT-2's step four times around two runs of the peer.
# Phase d result (c4): correct (check_transformer 19/19, check_norm
# 31/31); the step 55.19 / 54.98 / 55.38 / 54.94 ms, torch.compile 68.45
# / 68.53: 1.237-1.247x.
set -u
default_phases="a"
. "$(dirname "$0")/gpu-lib.sh"
gpt=tools/te-gpt
small="$gpt --model gpt2-124m --synthetic --batch 32 --steps 20 --eval-every 0 --sample 0 --json"
prof="$gpt --model gpt2-124m --synthetic --batch 32 --steps 3 --eval-every 0 --sample 0 --profile"
peer="python3 bench/gpt_peer.py speed --model gpt2-124m --batch 32 --compile --steps 20 --warmup 3"
kt="/usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base"
step machine sh -c 'nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv; nvcc --version | tail -2'
if has a; then
  make -s tools/te-gpt t/core/check_norm t/core/check_transformer > /dev/null 2>&1
  step check_transformer env TE_DEVICE=cuda t/core/check_transformer
  step check_norm env TE_DEVICE=cuda t/core/check_norm
  step small-1 $small
  step small-peer20 $peer
  step small-noqkv env TECORE_OPS_QKV_BIAS=0 $small
  step small-2 $small
  step small-noqkv2 env TECORE_OPS_QKV_BIAS=0 $small
  step small-3 $small
  step ncu-cs $kt --kernel-name 'regex:te_colsum|te_qkv|te_norm_bwd' $prof
  step ncu-cs-noqkv env TECORE_OPS_QKV_BIAS=0 $kt --kernel-name 'regex:te_colsum|te_qkv|te_norm_bwd' $prof
  step done true
fi
if has b; then
  make -s tools/te-gpt t/core/check_norm t/core/check_transformer > /dev/null 2>&1
  step check_transformer env TE_DEVICE=cuda t/core/check_transformer
  step check_norm env TE_DEVICE=cuda t/core/check_norm
  step small-1 $small
  step small-peer20 $peer
  step small-noqkv env TECORE_OPS_QKV_BIAS=0 $small
  step small-2 $small
  step small-3 $small
  step small-peer20b $peer
  step small-noqkv2 env TECORE_OPS_QKV_BIAS=0 $small
  step small-4 $small
  step small-5 $small
  step ncu-cs $kt --kernel-name 'regex:te_colsum|te_qkv' $prof
  step done true
fi
if has c; then
  make -s tools/te-gpt > /dev/null 2>&1
  full="/usr/local/cuda/bin/ncu --clock-control none --set full --import-source no --launch-count 1"
  export_rep() {
    /usr/local/cuda/bin/ncu --import "$1.ncu-rep" --page details > "$1-details.txt" 2>&1
    /usr/local/cuda/bin/ncu --import "$1.ncu-rep" --page source --csv --print-source sass \
      2>&1 | gzip > "$1-source.csv.gz"
    rm -f "$1.ncu-rep"
  }
  step ncu-xent $full --kernel-name te_xent_train --launch-skip 1 -o "$out/xent" $prof
  export_rep "$out/xent"
  step ncu-normfwd $full --kernel-name te_norm_fwd_fast16 --launch-skip 30 -o "$out/normfwd" $prof
  export_rep "$out/normfwd"
  step ncu-normbwd $full --kernel-name te_norm_bwd_fast_cs --launch-skip 30 -o "$out/normbwd" $prof
  export_rep "$out/normbwd"
  step done true
fi
if has d; then
  make -s tools/te-gpt t/core/check_norm t/core/check_transformer > /dev/null 2>&1
  step check_transformer env TE_DEVICE=cuda t/core/check_transformer
  step check_norm env TE_DEVICE=cuda t/core/check_norm
  step small-1 $small
  step small-peer20 $peer
  step small-2 $small
  step small-3 $small
  step small-peer20b $peer
  step small-4 $small
  step done true
fi
