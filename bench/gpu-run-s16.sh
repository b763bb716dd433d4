#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu-run-s16.sh -- session 16's GPU calls, from the top of a
# configured and built tree (.devdeps/run builds it):
#
#     OUT=gpu-out PHASES="suites big" bash bench/gpu-run-s16.sh
#
# Phases (any subset, in this order):
#   suites  the fuser (F32 weights among its cases), the transformer block
#           and te-gpt's own test under TE_DEVICE=cuda
#   big     te-gpt 1.3B FP8 (delayed; its memory note, speed, peak) beside
#           torch.compile BF16 (bench/gpt_peer.py)
#   more    llama-1b FP8 and GPT-2 124M BF16 beside torch.compile BF16;
#           --profile of the 1.3B FP8 step
#   verify  the suites and the 1.3B FP8 step after TECORE_SEQ_DEFER_SAVED:
#           check_ops under cuda, 1.3B FP8 plain and with --offload,
#           llama-1b FP8, beside torch.compile BF16 on 1.3B
#   final   the merged helpers' work: check_embedding, check_attention and
#           check_ops_attention under cuda (libte's kernels, then auto),
#           check_attn_cudnn, te-bench --model (embedding backward, RoPE,
#           cross-entropy against the copy floor), te-bench --attention
#           per backend beside PyTorch's SDPA (bench/attn_peer.py)
#   diag    where the 1.3B FP8 step's transient peak comes from: 4 steps
#           sampled every 20 ms, as is, with the eager step only
#           (--no-graph), with session 15's fills and kept copies
#           (TECORE_OPS_ZERO_GRAD_FILL=1 TECORE_OPS_W8_COL_KEEP=1) and
#           without GEMM tuning (TECORE_GEMM_TUNE_ALGOS=0)
# Every step is bounded by STEP_TIMEOUT seconds (150) and writes
# $OUT/NAME.txt (standard error to NAME.err); device memory is sampled by
# nvidia-smi every 100 ms ($OUT/NAME.mem; the peak above idle is in the
# summary).  cuDNN is PyTorch's (TECORE_CUDNN_LIB).  Never changes clocks,
# power, MIG or multicast.
set -u
default_phases="suites big"
. "$(dirname "$0")/gpu-lib.sh"
gpt=tools/te-gpt
if has suites; then
  step machine sh -c 'nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvcc --version | tail -2'
  for s in check_ops check_transformer; do
    [ -x "t/core/$s" ] || make -s "t/core/$s" > /dev/null 2>&1
    step "$s" env TE_DEVICE=cuda "t/core/$s"
  done
  step te-gpt-sh make -s check TESTS=t/demo/te-gpt.sh TE_DEVICE=cuda
  cp t/demo/te-gpt.log "$out/te-gpt-sh.log" 2>/dev/null
fi
if has big; then
  step big-te-fp8 $gpt --model gpt-1.3b --synthetic --batch 8 --steps 12 --eval-every 0 \
    --sample 0 --recipe delayed --json
  step big-peer-compile python3 bench/gpt_peer.py speed --model gpt-1.3b --batch 8 --compile \
    --steps 8 --warmup 3
fi
if has more; then
  step llama-te-fp8 $gpt --model llama-1b --synthetic --batch 4 --steps 12 --eval-every 0 \
    --sample 0 --recipe delayed --json
  step llama-peer-compile python3 bench/gpt_peer.py speed --model llama-1b --batch 4 --compile \
    --steps 8 --warmup 3
  step small-te-bf16 $gpt --model gpt2-124m --synthetic --batch 32 --steps 20 --eval-every 0 \
    --sample 0 --json
  step small-peer-compile python3 bench/gpt_peer.py speed --model gpt2-124m --batch 32 --compile \
    --steps 10 --warmup 3
  step prof-big-fp8 $gpt --model gpt-1.3b --synthetic --batch 8 --steps 3 --eval-every 0 \
    --sample 0 --recipe delayed --profile
fi
if has verify; then
  [ -x t/core/check_ops ] || make -s t/core/check_ops > /dev/null 2>&1
  step check_ops env TE_DEVICE=cuda t/core/check_ops
  step big-te-fp8 $gpt --model gpt-1.3b --synthetic --batch 8 --steps 12 --eval-every 0 \
    --sample 0 --recipe delayed --json
  step big-te-fp8-offload $gpt --model gpt-1.3b --synthetic --batch 8 --steps 14 --eval-every 0 \
    --sample 0 --recipe delayed --json --offload
  step llama-te-fp8 $gpt --model llama-1b --synthetic --batch 4 --steps 12 --eval-every 0 \
    --sample 0 --recipe delayed --json
  step big-peer-compile python3 bench/gpt_peer.py speed --model gpt-1.3b --batch 8 --compile \
    --steps 8 --warmup 3
fi
if has final; then
  for t in check_embedding check_attention check_ops_attention check_attn_cudnn; do
    [ -x "t/core/$t" ] || make -s "t/core/$t" > /dev/null 2>&1
  done
  step check_embedding env TE_DEVICE=cuda t/core/check_embedding
  step check_attention-libte env TE_DEVICE=cuda TECORE_ATTN_BACKEND=libte t/core/check_attention
  step check_ops_attention-libte env TE_DEVICE=cuda TECORE_ATTN_BACKEND=libte \
    t/core/check_ops_attention
  step check_attention-auto env TE_DEVICE=cuda t/core/check_attention
  step check_attn_cudnn env TE_DEVICE=cuda TE_DEBUG=INFO t/core/check_attn_cudnn
  step bench-model tools/te-bench --model
  step bench-attn-libte env TECORE_ATTN_BACKEND=libte tools/te-bench --attention
  step bench-attn-cudnn env TECORE_ATTN_BACKEND=cudnn tools/te-bench --attention
  step attn-peer python3 bench/attn_peer.py
fi
if has diag; then
  export MEM_MS=20
  big4="$gpt --model gpt-1.3b --synthetic --batch 8 --steps 4 --eval-every 0 --sample 0 --recipe delayed --json"
  step diag-asis $big4
  step diag-nograph $big4 --no-graph
  step diag-s15 env TECORE_OPS_ZERO_GRAD_FILL=1 TECORE_OPS_W8_COL_KEEP=1 $big4
  step diag-notune env TECORE_GEMM_TUNE_ALGOS=0 $big4
  unset MEM_MS
fi
cat "$summary"
