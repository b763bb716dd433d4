#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu-run-s15.sh -- session 15's GPU call, from the top of a
# configured and built tree (.devdeps/run builds it):
#
#     OUT=gpu-out PHASES="suites bench gpt" bash bench/gpu-run-s15.sh
#
# Phases (any subset, in this order):
#   suites  the model-part suites under TE_DEVICE=cuda: attention on each
#           backend (auto, libte's kernels, cuDNN), the cuDNN rows against
#           float64 (FP8 forward included), RoPE, embedding, cross-entropy,
#           the fuser (plain and with attention), the transformer block,
#           te-gpt's memory test
#   bench   te-bench --model (RoPE, embedding backward, cross-entropy
#           against the copy floor) and --attention once per backend (the
#           cuDNN rows with FP8 beside BF16), PyTorch's SDPA peer
#           (bench/attn_peer.py)
#   gpt     te-gpt 1.3B FP8 (its memory note, speed, peak) beside
#           torch.compile BF16 (bench/gpt_peer.py), GPT-2 124M BF16
# Every step is bounded by STEP_TIMEOUT seconds (150) and writes
# $OUT/NAME.txt (standard error to NAME.err); device memory is sampled by
# nvidia-smi every 100 ms ($OUT/NAME.mem; the peak above idle is in the
# summary).  cuDNN is PyTorch's (TECORE_CUDNN_LIB).  Never changes clocks,
# power, MIG or multicast.
set -u
default_phases="suites bench gpt"
. "$(dirname "$0")/gpu-lib.sh"
suite() {   # suite PATH [NAME [ENV...]]
  local s=$1 n=${2:-${1##*/}}
  shift 2 2>/dev/null || shift
  [ -x "$s" ] || make -s "$s" > /dev/null 2>&1
  step "$n" env TE_DEVICE=cuda "$@" "$s"
}
gpt=tools/te-gpt
if has suites; then
  step machine sh -c 'nvidia-smi; nvcc --version | tail -2; echo "TECORE_CUDNN_LIB=${TECORE_CUDNN_LIB:-}"'
  suite t/core/check_attention
  suite t/core/check_attention check_attention-libte TECORE_ATTN_BACKEND=libte
  suite t/core/check_attention check_attention-cudnn TECORE_ATTN_BACKEND=cudnn TE_DEBUG=INFO
  suite t/core/check_attn_cudnn check_attn_cudnn TE_DEBUG=INFO
  for s in check_rope check_embedding check_xent check_ops_attention check_ops check_transformer; do
    suite "t/core/$s"
  done
  step te-gpt-memory make -s check TESTS=t/demo/te-gpt-memory.sh TE_DEVICE=cuda
  cp t/demo/te-gpt-memory.log "$out/te-gpt-memory.log" 2>/dev/null
fi
if has bench; then
  step bench-model tools/te-bench --model
  step bench-attn-cudnn env TECORE_ATTN_BACKEND=cudnn tools/te-bench --attention
  step bench-attn-libte env TECORE_ATTN_BACKEND=libte tools/te-bench --attention
  step attn-peer python3 bench/attn_peer.py
fi
if has gpt; then
  step big-te-fp8 $gpt --model gpt-1.3b --synthetic --batch 8 --steps 12 --eval-every 0 \
    --sample 0 --recipe delayed --json
  step big-peer-compile python3 bench/gpt_peer.py speed --model gpt-1.3b --batch 8 --compile \
    --steps 8 --warmup 3
  step small-te-bf16 $gpt --model gpt2-124m --synthetic --batch 32 --steps 20 --eval-every 0 \
    --sample 0 --json
fi
cat "$summary"
