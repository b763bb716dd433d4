#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu-run-s21.sh -- session 21's GPU checks, from the top of a
# configured and built tree (.devdeps/run builds it).  Through the device
# tool keep the step files outside $OUT (gpu-lib.sh):
#
#     bash .devdeps/run 'T=$OUT; OUT=/tmp/o TAR=$T/r.tgz PHASES=w8 bash bench/gpu-run-s21.sh'
#
# Phase w8 (in the order of what matters most when the device time runs
# out): check_xent under TE_DEVICE=cuda (the backward into FP8 dlogits,
# kernels/xent.cu's new paths); te-bench --model (its row "xent bwd into
# fp8" beside the in-place one and the copy floor); llama-1b and 1.3B FP8 with the two new
# fusions (the cross-entropy writing the LM head's FP8 gradient,
# tecore_seq_grad_fp8; AdamW writing the FP8 weights,
# tecore_seq_fp8_weight) and without them (TECORE_OPS_FUSION_OFF), same
# build, same call; check_ops under TE_DEVICE=cuda; decode at batch 1
# on GPT-2 124M against the PyTorch KV-cache loop.
set -u
default_phases="w8"
. "$(dirname "$0")/gpu-lib.sh"
gpt=tools/te-gpt
step machine sh -c 'nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvcc --version | tail -2'
if has w8; then
  make -s t/core/check_xent t/core/check_ops > /dev/null 2>&1
  step check_xent env TE_DEVICE=cuda t/core/check_xent
  step bench-model tools/te-bench --model
  llama="$gpt --model llama-1b --synthetic --batch 4 --steps 14 --eval-every 0 --sample 0 --recipe delayed --json"
  big="$gpt --model gpt-1.3b --synthetic --batch 8 --steps 14 --eval-every 0 --sample 0 --recipe delayed --json"
  step llama-on $llama
  step llama-off env TECORE_OPS_FUSION_OFF=grad_fp8,weight_fp8 $llama
  step big-on $big
  step big-off env TECORE_OPS_FUSION_OFF=grad_fp8,weight_fp8 $big
  step check_ops env TE_DEVICE=cuda t/core/check_ops
  # decode at batch 1 (GPT-2 124M, 256 tokens): the graph, the PyTorch loop
  step decode-graph $gpt --model gpt2-124m --synthetic --steps 0 --sample 256 --json
  step decode-peer python3 bench/gpt_peer.py decode --model gpt2-124m --tokens 256
fi
cat "$summary"
