#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu-run-s18.sh -- the GPU work that sessions 17 and 18 left
# unrun (no device time was left to them), from the top of a configured
# and built tree (.devdeps/run builds it):
#
#     OUT=gpu-out PHASES="block h29" bash bench/gpu-run-s18.sh
#
# Phases (any subset, in this order):
#   block   FP8 block scaling on cuBLASLt: check_gemm (gemm_block: the
#           scales rearranged into the workspace, VEC128_32F /
#           BLK128x128_32F), check_kernels (te_copy2d_u32), check_ops and
#           check_transformer (the block recipe in the fuser) and te-gpt's
#           own test under TE_DEVICE=cuda; te-gpt 1.3B with --recipe block
#           beside --recipe delayed (speed, peak)
#   h29     the cuDNN E4M3 attention forward re-enabled in session 16
#           (h29fp8b) and never run since its last fix: check_attn_cudnn,
#           check_attention (auto), te-bench --attention on the cuDNN row
#           beside PyTorch's SDPA (bench/attn_peer.py)
# Every step is bounded by STEP_TIMEOUT seconds (150) and writes
# $OUT/NAME.txt (standard error to NAME.err) and a summary line
# (bench/gpu-lib.sh).  Never changes clocks, power, MIG or multicast.
set -u
default_phases="block h29"
. "$(dirname "$0")/gpu-lib.sh"
gpt=tools/te-gpt
need() {
  for t in "$@"; do [ -x "t/core/$t" ] || make -s "t/core/$t" > /dev/null 2>&1; done
}
if has block; then
  step machine sh -c 'nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvcc --version | tail -2'
  need check_gemm check_kernels check_ops check_transformer
  step check_gemm env TE_DEVICE=cuda TE_DEBUG=INFO t/core/check_gemm
  step check_kernels env TE_DEVICE=cuda t/core/check_kernels
  step check_ops env TE_DEVICE=cuda t/core/check_ops
  step check_transformer env TE_DEVICE=cuda t/core/check_transformer
  step te-gpt-sh make -s check TESTS=t/demo/te-gpt.sh TE_DEVICE=cuda
  cp t/demo/te-gpt.log "$out/te-gpt-sh.log" 2>/dev/null
  for r in block delayed; do
    step "big-te-$r" $gpt --model gpt-1.3b --synthetic --batch 8 --steps 12 --eval-every 0 \
      --sample 0 --recipe "$r" --json
  done
fi
if has h29; then
  need check_attn_cudnn check_attention
  step check_attn_cudnn env TE_DEVICE=cuda TE_DEBUG=INFO t/core/check_attn_cudnn
  step check_attention-auto env TE_DEVICE=cuda t/core/check_attention
  step bench-attn-cudnn env TECORE_ATTN_BACKEND=cudnn tools/te-bench --attention
  step attn-peer python3 bench/attn_peer.py
fi
cat "$summary"
