#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu-run-s22.sh -- session 22's GPU checks, from the top of a
# configured and built tree (.devdeps/run builds it).  Through the device
# tool keep the step files outside $OUT (gpu-lib.sh):
#
#     bash .devdeps/run 'T=$OUT; OUT=/tmp/o TAR=$T/r.tgz PHASES=a bash bench/gpu-run-s22.sh'
#
# then, within the machine's idle window (the build stays), PHASES=b and
# PHASES=loss from /tmp/te-build with OUT=/tmp/o2 (gpu-lib.sh's TAR).
# Session 22 had no device time: this is what its work owes the GPU, in
# the order of what matters most when the device time runs out.
# Phase a: check_xent and check_ops under TE_DEVICE=cuda (the FP8
# cross-entropy backward over the logits, xent_bwd_inplace8;
# TECORE_SEQ_GRAD_FP8_GIVEN's caller buffers; TECORE_SEQ_BF16_WGRAD's
# BF16 weight-gradient GEMMs, test_bf16_wgrad); te-bench --model (the row
# "xent bwd fp8 in place" beside "xent bwd into fp8" and the copy floor);
# llama-1b FP8 as te-gpt runs it now (codes over the logits, BF16 weight
# gradients) and its torch.compile peer: issue 31's 1.5x and the peak
# memory against the peer's (37215 against 35439 MiB in session 21).
# Phase b: the 1.3B model and its peer; A/B on llama-1b: --wgrad f32,
# TECORE_OPS_FUSION_OFF=grad_fp8_given; llama-1b at --batch 2 --accum 2
# (the same tokens a step, half the activations; F32 gradients).
# Phase loss: issue 31's FP8 against BF16 after 300 steps on real text
# (the man pages, GPT-2 124M shape at batch 8): the validation losses.
set -u
default_phases="a"
. "$(dirname "$0")/gpu-lib.sh"
gpt=tools/te-gpt
llama="$gpt --model llama-1b --synthetic --batch 4 --steps 14 --eval-every 0 --sample 0 --recipe delayed --json"
big="$gpt --model gpt-1.3b --synthetic --batch 8 --steps 14 --eval-every 0 --sample 0 --recipe delayed --json"
step machine sh -c 'nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvcc --version | tail -2'
if has a; then
  make -s t/core/check_xent t/core/check_ops > /dev/null 2>&1
  step check_xent env TE_DEVICE=cuda t/core/check_xent
  step check_ops env TE_DEVICE=cuda t/core/check_ops
  step bench-model tools/te-bench --model
  step llama $llama
  step llama-peer python3 bench/gpt_peer.py speed --model llama-1b --batch 4 --compile --steps 8 --warmup 3
fi
if has b; then
  step big $big
  step big-peer python3 bench/gpt_peer.py speed --model gpt-1.3b --batch 8 --compile --steps 8 --warmup 3
  step llama-wgrad-f32 $llama --wgrad f32
  step llama-own env TECORE_OPS_FUSION_OFF=grad_fp8_given $llama
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
