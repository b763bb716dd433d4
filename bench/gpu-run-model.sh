#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu-run-model.sh -- the GPU checks and figures of the transformer's
# parts in one call on a GPU machine, from the top of a configured and
# built tree:
#
#     OUT=gpu-out bash bench/gpu-run-model.sh [SUITES...]
#
# Writes under $OUT: the machine, the model suites under TE_DEVICE=cuda
# (attention on each backend, RoPE, embedding, cross-entropy, the fuser's
# attention kinds, libtecomm's security and misuse suites on one GPU),
# te-bench's model and attention rows (once per attention backend), the
# PyTorch peer (bench/attn_peer.py: scaled_dot_product_attention's cuDNN
# and flash backends on the same shapes) and te-allreduce-perf on one GPU.
# cuDNN is PyTorch's (python3 -c 'import nvidia.cudnn'), loaded by
# TECORE_CUDNN_LIB.  SUITES_ONLY=1 runs the suites alone, BENCH_ONLY=1 the
# figures alone (the summary is appended to).  Each step is bounded by STEP_TIMEOUT seconds (150).
# Never changes clocks, power, MIG or multicast.
set -u
out=${OUT:-gpu-out}
mkdir -p "$out"
summary="$out/summary.txt"
[ "${BENCH_ONLY:-0}" = 1 ] || : > "$summary"
step() {   # step NAME COMMAND...: runs it, output to $out/NAME.txt
  local name=$1
  shift
  local t0=$SECONDS
  timeout "${STEP_TIMEOUT:-150}" "$@" > "$out/$name.txt" 2>&1
  local rc=$?
  printf '%-28s rc %3d  %5d s  %s\n' "$name" "$rc" $((SECONDS - t0)) "$*" >> "$summary"
}

cudnn=$(python3 -c 'import nvidia.cudnn, os; print(list(nvidia.cudnn.__path__)[0])' 2>/dev/null)
[ -n "$cudnn" ] && export TECORE_CUDNN_LIB="$cudnn/lib/libcudnn.so.9"
step machine sh -c 'nvidia-smi; uname -a; nvcc --version; echo "TECORE_CUDNN_LIB=${TECORE_CUDNN_LIB:-}"'
export TE_DEVICE=cuda
suites=${*:-t/core/check_attention t/core/check_attn_cudnn t/core/check_rope t/core/check_embedding \
  t/core/check_xent t/core/check_ops_attention t/comm/check_security t/comm/check_misuse}
[ "${BENCH_ONLY:-0}" = 1 ] && suites=
for s in $suites; do
  [ -x "$s" ] || make -s "$s" > /dev/null 2>&1
  n=${s##*/}
  step "$n" env TE_DEBUG=INFO "$s"
  case $n in
  check_attention)   # the libte kernels alone, then cuDNN alone
    step "$n-libte" env TECORE_ATTN_BACKEND=libte "$s"
    step "$n-cudnn" env TECORE_ATTN_BACKEND=cudnn "$s" ;;
  esac
done
if [ "${SUITES_ONLY:-0}" = 1 ]; then cat "$summary"; exit 0; fi
step bench-model tools/te-bench --model
step bench-attn-cudnn env TECORE_ATTN_BACKEND=cudnn TE_DEBUG=INFO tools/te-bench --attention
step bench-attn-libte env TECORE_ATTN_BACKEND=libte tools/te-bench --attention
step attn-peer python3 bench/attn_peer.py
step allreduce-1 tools/te-allreduce-perf -n 1 -G 20 -b 8 -e 1M -f 4 -d bf16
cat "$summary"
