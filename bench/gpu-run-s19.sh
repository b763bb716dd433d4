#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu-run-s19.sh -- session 19's GPU checks, from the top of a
# configured and built tree (.devdeps/run builds it):
#
#     OUT=gpu-out PHASES="check ab" bash bench/gpu-run-s19.sh
#
# Through the device tool, pack after every step into its $OUT, so that a
# call cut short brings back the steps it finished (session 19's last call
# did not: it tarred at the end and ran out of device time first):
#
#     bash .devdeps/run 'OUT=/tmp/o TAR=$OUT/r.tgz PHASES=ab3 bash bench/gpu-run-s19.sh'
#
# Phases (any subset, in this order):
#   check   layernorm_bwd_add and the block GEMM's aligned shapes under
#           TE_DEVICE=cuda: check_norm (every mode with one 16-bit dtype:
#           te_norm_bwd_fast's new LayerNorm+add case), check_ops,
#           check_gemm, check_transformer, te-gpt's own test
#   ab      te-gpt 1.3B FP8 (delayed) and GPT-2 124M BF16 with
#           layernorm_bwd_add and without it (TECORE_OPS_FUSION_OFF),
#           alternating, beside torch.compile on the same models
#           (bench/gpt_peer.py) in the same call; --profile of the 1.3B
#           step with the fusion
#   check2  after gelu+quantize: check_ops, check_transformer and te-gpt's
#           own test under TE_DEVICE=cuda
#   ab2     te-gpt 1.3B FP8 and llama-1b FP8 with gelu+quantize /
#           swiglu+quantize and without (TECORE_OPS_FUSION_OFF),
#           alternating, beside torch.compile on both models; --profile
#           of the 1.3B step
#   ab3     after dswiglu+cast_transpose: check_ops and check_transformer
#           under TE_DEVICE=cuda; llama-1b FP8 with it and without
#           (TECORE_OPS_FUSION_OFF), alternating, beside torch.compile
#   prof    the 1.3B FP8 step twice more beside torch.compile, and
#           --profile of the 1.3B and llama-1b FP8 steps (cuDNN attention
#           rows in the table now)
# Every step is bounded by STEP_TIMEOUT seconds (150) and writes
# $OUT/NAME.txt (standard error to NAME.err) and a summary line
# (bench/gpu-lib.sh).  Never changes clocks, power, MIG or multicast.
set -u
default_phases="check ab"
. "$(dirname "$0")/gpu-lib.sh"
gpt=tools/te-gpt
if has check; then
  step machine sh -c 'nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvcc --version | tail -2'
  for t in check_norm check_ops check_gemm check_transformer; do
    [ -x "t/core/$t" ] || make -s "t/core/$t" > /dev/null 2>&1
    step "$t" env TE_DEVICE=cuda "t/core/$t"
  done
  step te-gpt-sh make -s check TESTS=t/demo/te-gpt.sh TE_DEVICE=cuda
  cp t/demo/te-gpt.log "$out/te-gpt-sh.log" 2>/dev/null
fi
if has ab; then
  big="$gpt --model gpt-1.3b --synthetic --batch 8 --steps 12 --eval-every 0 --sample 0 --recipe delayed --json"
  small="$gpt --model gpt2-124m --synthetic --batch 32 --steps 20 --eval-every 0 --sample 0 --json"
  off=TECORE_OPS_FUSION_OFF=layernorm_bwd_add
  step big-on-1 $big
  step big-off-1 env $off $big
  step big-on-2 $big
  step big-off-2 env $off $big
  step big-peer-compile python3 bench/gpt_peer.py speed --model gpt-1.3b --batch 8 --compile \
    --steps 8 --warmup 3
  step small-on-1 $small
  step small-off-1 env $off $small
  step small-peer-compile python3 bench/gpt_peer.py speed --model gpt2-124m --batch 32 --compile \
    --steps 10 --warmup 3
  step prof-big $gpt --model gpt-1.3b --synthetic --batch 8 --steps 3 --eval-every 0 \
    --sample 0 --recipe delayed --profile
fi
if has check2; then
  for t in check_ops check_transformer check_norm; do
    [ -x "t/core/$t" ] || make -s "t/core/$t" > /dev/null 2>&1
    step "$t" env TE_DEVICE=cuda "t/core/$t"
  done
  step te-gpt-sh make -s check TESTS=t/demo/te-gpt.sh TE_DEVICE=cuda
  cp t/demo/te-gpt.log "$out/te-gpt-sh.log" 2>/dev/null
fi
if has ab2; then
  big="$gpt --model gpt-1.3b --synthetic --batch 8 --steps 12 --eval-every 0 --sample 0 --recipe delayed --json"
  llama="$gpt --model llama-1b --synthetic --batch 4 --steps 12 --eval-every 0 --sample 0 --recipe delayed --json"
  step big-on-1 $big
  step big-off-1 env TECORE_OPS_FUSION_OFF=gelu+quantize $big
  step big-on-2 $big
  step big-off-2 env TECORE_OPS_FUSION_OFF=gelu+quantize $big
  step big-peer-compile python3 bench/gpt_peer.py speed --model gpt-1.3b --batch 8 --compile \
    --steps 8 --warmup 3
  step llama-on-1 $llama
  step llama-off-1 env TECORE_OPS_FUSION_OFF=swiglu+quantize $llama
  step llama-peer-compile python3 bench/gpt_peer.py speed --model llama-1b --batch 4 --compile \
    --steps 8 --warmup 3
  step prof-big $gpt --model gpt-1.3b --synthetic --batch 8 --steps 3 --eval-every 0 \
    --sample 0 --recipe delayed --profile
fi
if has ab3; then
  for t in check_ops check_transformer; do
    [ -x "t/core/$t" ] || make -s "t/core/$t" > /dev/null 2>&1
    step "$t" env TE_DEVICE=cuda "t/core/$t"
  done
  llama="$gpt --model llama-1b --synthetic --batch 4 --steps 12 --eval-every 0 --sample 0 --recipe delayed --json"
  off=TECORE_OPS_FUSION_OFF=dswiglu+cast_transpose
  step llama-on-1 $llama
  step llama-off-1 env $off $llama
  step llama-on-2 $llama
  step llama-off-2 env $off $llama
  step llama-peer-compile python3 bench/gpt_peer.py speed --model llama-1b --batch 4 --compile \
    --steps 8 --warmup 3
  step prof-llama $gpt --model llama-1b --synthetic --batch 4 --steps 3 --eval-every 0 \
    --sample 0 --recipe delayed --profile
fi
if has prof; then
  big="$gpt --model gpt-1.3b --synthetic --batch 8 --steps 12 --eval-every 0 --sample 0 --recipe delayed --json"
  step big-on-3 $big
  step big-peer-compile-2 python3 bench/gpt_peer.py speed --model gpt-1.3b --batch 8 --compile \
    --steps 8 --warmup 3
  step big-on-4 $big
  step prof-big $gpt --model gpt-1.3b --synthetic --batch 8 --steps 3 --eval-every 0 \
    --sample 0 --recipe delayed --profile
  step prof-llama $gpt --model llama-1b --synthetic --batch 4 --steps 3 --eval-every 0 \
    --sample 0 --recipe delayed --profile
  step prof-small $gpt --model gpt2-124m --synthetic --batch 32 --steps 3 --eval-every 0 \
    --sample 0 --profile
fi
cat "$summary"
