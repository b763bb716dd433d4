#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu-run-s22.sh -- session 22's GPU checks, from the top of a
# configured and built tree (.devdeps/run builds it).  Through the device
# tool keep the step files outside $OUT (gpu-lib.sh):
#
#     bash .devdeps/run 'T=$OUT; OUT=/tmp/o TAR=$T/r.tgz PHASES=given bash bench/gpu-run-s22.sh'
#
# Session 22 had no device time: this is what its work owes the GPU, in
# the order of what matters most when the device time runs out.
# Phase given: check_xent and check_ops under TE_DEVICE=cuda (the FP8
# cross-entropy backward over the logits, xent_bwd_inplace8, and
# TECORE_SEQ_GRAD_FP8_GIVEN's caller buffers on kernels/xent.cu and
# cuBLASLt); te-bench --model (the row "xent bwd fp8 in place" beside
# "xent bwd into fp8" and the copy floor); llama-1b FP8 with the codes
# over the logits (the default) and in the fuser's buffer
# (TECORE_OPS_FUSION_OFF=grad_fp8_given), then its torch.compile peer,
# all in one call: the step time, and the peak memory (issue 31: no more
# than the peer's; 37215 against 35439 MiB in session 21); the same for
# the 1.3B model; then llama-1b at --batch 2 --accum 2 (the same tokens a
# step, half the activations) beside them.
# Phase loss: issue 31's FP8 against BF16 after 300 steps on real text
# (the man pages, GPT-2 124M shape at batch 8): the validation losses.
set -u
default_phases="given"
. "$(dirname "$0")/gpu-lib.sh"
gpt=tools/te-gpt
step machine sh -c 'nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvcc --version | tail -2'
if has given; then
  make -s t/core/check_xent t/core/check_ops > /dev/null 2>&1
  step check_xent env TE_DEVICE=cuda t/core/check_xent
  step check_ops env TE_DEVICE=cuda t/core/check_ops
  step bench-model tools/te-bench --model
  llama="$gpt --model llama-1b --synthetic --batch 4 --steps 14 --eval-every 0 --sample 0 --recipe delayed --json"
  big="$gpt --model gpt-1.3b --synthetic --batch 8 --steps 14 --eval-every 0 --sample 0 --recipe delayed --json"
  step llama-given $llama
  step llama-own env TECORE_OPS_FUSION_OFF=grad_fp8_given $llama
  step llama-peer python3 bench/gpt_peer.py speed --model llama-1b --batch 4 --compile --steps 8 --warmup 3
  step big-given $big
  step big-peer python3 bench/gpt_peer.py speed --model gpt-1.3b --batch 8 --compile --steps 8 --warmup 3
  step llama-accum2 $gpt --model llama-1b --synthetic --batch 2 --accum 2 --steps 14 --eval-every 0 \
    --sample 0 --recipe delayed --json
fi
if has loss; then
  for r in none delayed; do
    STEP_TIMEOUT=${LOSS_TIMEOUT:-280} step loss-$r $gpt --model gpt2-124m --batch 8 --steps 300 \
      --eval-every 50 --sample 0 --recipe $r --seed 1 --csv
  done
fi
cat "$summary"
