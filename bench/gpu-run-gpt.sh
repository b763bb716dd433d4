#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu-run-gpt.sh -- te-gpt on a GPU beside its PyTorch twin
# (bench/gpt_peer.py) in the same call, from the top of a configured and
# built tree:
#
#     OUT=gpu-out PHASES="suites check small big" bash bench/gpu-run-gpt.sh
#
# Phases (any subset, in this order):
#   suites  the transformer suites and t/demo/te-gpt.sh under TE_DEVICE=cuda
#   check   GPT-2 124M BF16: te-gpt saves its initial checkpoint, trains 50
#           steps from it on the man pages' bytes; the peer loads the same
#           safetensors file and trains on the same batches; then BF16 and
#           FP8 (delayed) 300 steps each on the same text
#   small   GPT-2 124M BF16 speed (batch 32 x 1024) against torch.compile
#           and eager; decode at batch 1 against a PyTorch KV-cache loop
#   big     1.3B (BF16 and FP8) and llama-1b (FP8) against torch.compile BF16
#   profile te-gpt's suites on the GPU, --profile of the 124M step (BF16,
#           FP8), the decode graph against eager decode and the PyTorch
#           loop, 1.3B FP8 with and without --share-saved
#   final   the last checks and figures of a session in one short call
#   gelu    te-gpt BF16 with the GELU GEMM epilogue on and off
#   confirm session 14's last changes: the graph and te-gpt suites under
#           TE_DEVICE=cuda, the 1.3B and llama-1b FP8 steps (launch, speed)
#   memory  session 14: the step graph's launch with its copies as kernels,
#           the memory after the fuser's savings (te-gpt's note), 1.3B FP8
#           with and without --offload, llama-1b, each beside
#           torch.compile BF16; --profile of the 1.3B FP8 step
# Every step is bounded by STEP_TIMEOUT seconds (240) and writes
# $OUT/NAME.txt (standard error to NAME.err); device memory is sampled by nvidia-smi every 100 ms during
# each training step ($OUT/NAME.mem: the peak above the idle baseline is in
# the summary).  cuDNN is PyTorch's (TECORE_CUDNN_LIB).  Never changes
# clocks, power, MIG or multicast.
set -u
out=${OUT:-gpu-out}
mkdir -p "$out"
summary="$out/summary.txt"
phases=${PHASES:-suites check small big}
cudnn=$(python3 -c 'import nvidia.cudnn, os; print(list(nvidia.cudnn.__path__)[0])' 2>/dev/null)
[ -n "$cudnn" ] && export TECORE_CUDNN_LIB="$cudnn/lib/libcudnn.so.9"
base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)

step() {   # step NAME COMMAND...: runs it, output to $out/NAME.txt, memory to $out/NAME.mem
  local name=$1
  shift
  local t0=$SECONDS
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$out/$name.mem" 2>/dev/null &
  local mon=$!
  timeout "${STEP_TIMEOUT:-240}" "$@" > "$out/$name.txt" 2> "$out/$name.err"
  local rc=$?
  kill "$mon" 2>/dev/null
  wait "$mon" 2>/dev/null
  local peak
  peak=$(sort -n "$out/$name.mem" | tail -1)
  printf '%-26s rc %3d %5d s  peak %6s MiB above idle  %s\n' "$name" "$rc" $((SECONDS - t0)) \
    "$(( ${peak:-0} - ${base:-0} ))" "$*" >> "$summary"
}

has() { case " $phases " in *" $1 "*) return 0 ;; esac; return 1; }

gpt=tools/te-gpt
# GPT-2 124M at batch 1: te-gpt's decode as a graph and eager, the PyTorch loop
decode_rows() {
  step decode-graph $gpt --model gpt2-124m --synthetic --steps 0 --sample 256 --json
  step decode-eager $gpt --model gpt2-124m --synthetic --steps 0 --sample 256 --json --no-graph
  step decode-peer python3 bench/gpt_peer.py decode --model gpt2-124m --tokens 256
}
# GPT-2 124M at batch 32 x 1024: te-gpt BF16 and FP8, torch.compile BF16
small_rows() {
  step small-te-bf16 $gpt --model gpt2-124m --synthetic --batch 32 --steps 20 --eval-every 0 \
    --sample 0 --json
  step small-te-fp8 $gpt --model gpt2-124m --synthetic --batch 32 --steps 20 --eval-every 0 \
    --sample 0 --recipe delayed --json
  step small-peer-compile python3 bench/gpt_peer.py speed --model gpt2-124m --batch 32 --compile \
    --steps 10 --warmup 3
}
# 1.3B and llama-1b in FP8 (delayed); their torch.compile BF16 twins
big_fp8() { step big-te-fp8 $gpt --model gpt-1.3b --synthetic --batch 8 --steps 12 --eval-every 0 \
  --sample 0 --recipe delayed --json "$@"; }
llama_fp8() { step llama-te-fp8 $gpt --model llama-1b --synthetic --batch 4 --steps 12 \
  --eval-every 0 --sample 0 --recipe delayed --json; }
big_peer() { step big-peer-compile python3 bench/gpt_peer.py speed --model gpt-1.3b --batch 8 \
  --compile --steps 8 --warmup 3; }
llama_peer() { step llama-peer-compile python3 bench/gpt_peer.py speed --model llama-1b --batch 4 \
  --compile --steps 8 --warmup 3; }
if has suites; then
  step machine sh -c 'nvidia-smi; nvcc --version | tail -2; python3 -c "import torch; print(torch.__version__)"'
  for s in t/core/check_transformer t/core/check_ops_attention t/core/check_attention; do
    [ -x "$s" ] || make -s "$s" > /dev/null 2>&1
    step "${s#t/}" env TE_DEVICE=cuda "$s"
  done
  step te-gpt.sh make -s check TESTS=t/demo/te-gpt.sh TE_DEVICE=cuda
  cp t/demo/te-gpt.log "$out/te-gpt.sh.log" 2>/dev/null
  step te-gpt-default $gpt
fi
if has profile; then
  for s in t/core/check_embedding t/core/check_attention; do
    [ -x "$s" ] || make -s "$s" > /dev/null 2>&1
    step "${s#t/}" env TE_DEVICE=cuda "$s"
  done
  step te-gpt.sh make -s check TESTS=t/demo/te-gpt.sh TE_DEVICE=cuda
  cp t/demo/te-gpt.log "$out/te-gpt.sh.log" 2>/dev/null
  step prof-bf16 $gpt --model gpt2-124m --synthetic --batch 32 --steps 3 --eval-every 0 \
    --sample 0 --profile
  step prof-fp8 $gpt --model gpt2-124m --synthetic --batch 32 --steps 3 --eval-every 0 \
    --sample 0 --profile --recipe delayed
  decode_rows
  big_fp8
  step big-te-fp8-noshare $gpt --model gpt-1.3b --synthetic --batch 8 --steps 6 --eval-every 0 \
    --sample 0 --recipe delayed --json --share-saved 0
fi
if has final; then
  [ -x t/core/check_embedding ] || make -s t/core/check_embedding > /dev/null 2>&1
  step check_embedding env TE_DEVICE=cuda t/core/check_embedding
  step tiny-share1 $gpt --steps 6 --recipe delayed --eval-every 3 --sample 0 --csv -q
  step tiny-share0 $gpt --steps 6 --recipe delayed --eval-every 3 --sample 0 --csv -q \
    --share-saved 0
  step tiny-eager $gpt --steps 6 --recipe delayed --eval-every 3 --sample 0 --csv -q --no-graph
  decode_rows
  step decode-prof $gpt --model gpt2-124m --synthetic --steps 1 --sample 64 --profile -q
  step prof-bf16 $gpt --model gpt2-124m --synthetic --batch 32 --steps 3 --eval-every 0 \
    --sample 0 --profile
  small_rows
  big_fp8
  big_peer
fi
if has gelu; then   # the GELU epilogue (TECORE_OPS_GELU_EPILOGUE) on and off, same call
  for e in 1 0; do
    step small-bf16-epi$e env TECORE_OPS_GELU_EPILOGUE=$e $gpt --model gpt2-124m --synthetic \
      --batch 32 --steps 20 --eval-every 0 --sample 0 --json
    step big-bf16-epi$e env TECORE_OPS_GELU_EPILOGUE=$e $gpt --model gpt-1.3b --synthetic \
      --batch 8 --steps 10 --eval-every 0 --sample 0 --json
  done
  step prof-bf16-epi0 env TECORE_OPS_GELU_EPILOGUE=0 $gpt --model gpt2-124m --synthetic \
    --batch 32 --steps 3 --eval-every 0 --sample 0 --profile
  step small-peer-compile python3 bench/gpt_peer.py speed --model gpt2-124m --batch 32 --compile \
    --steps 10 --warmup 3
fi
if has check; then
  corpus=/tmp/te-gpt-corpus.txt
  cat man/man1/*.1 man/man3/*.3 man/man7/*.7 > "$corpus"
  rm -rf /tmp/te-gpt-init
  step check-init $gpt --model gpt2-124m --data "$corpus" --steps 0 --save /tmp/te-gpt-init --sample 0
  step check-te $gpt --model gpt2-124m --load /tmp/te-gpt-init --data "$corpus" --steps 50 \
    --batch 8 --lr 6e-4 --eval-every 0 --sample 0 --json
  step check-peer python3 bench/gpt_peer.py check --ckpt /tmp/te-gpt-init --data "$corpus" \
    --te-json "$out/check-te.txt" --steps 50 --batch 8 --lr 6e-4
  for r in none delayed; do
    step "text300-$r" $gpt --model gpt2-124m --data "$corpus" --steps 300 --batch 8 --recipe $r \
      --eval-every 100 --sample 64 --json
  done
fi
if has small; then
  small_rows
  step small-peer-eager python3 bench/gpt_peer.py speed --model gpt2-124m --batch 32 --steps 10 \
    --warmup 2
  decode_rows
fi
if has big; then
  big_fp8
  step big-te-bf16 $gpt --model gpt-1.3b --synthetic --batch 8 --steps 12 --eval-every 0 \
    --sample 0 --json
  big_peer
  llama_fp8
  llama_peer
fi
if has confirm; then
  for s in t/core/check_graph_memset t/graph/check_graph_graphs t/graph/check_graph_callable \
           t/graph/check_offload t/core/check_ops t/core/check_transformer; do
    [ -x "$s" ] || make -s "$s" > /dev/null 2>&1
    step "${s##*/}" env TE_DEVICE=cuda "$s"
  done
  for t in te-gpt-memory te-gpt-tp; do
    step "$t" make -s check TESTS=t/demo/$t.sh TE_DEVICE=cuda
    cp "t/demo/$t.log" "$out/$t.log" 2>/dev/null
  done
  big_fp8
  llama_fp8
  step small-te-bf16 $gpt --model gpt2-124m --synthetic --batch 32 --steps 20 --eval-every 0 \
    --sample 0 --json
fi
if has memory; then
  small_rows
  big_fp8
  step big-te-fp8-offload $gpt --model gpt-1.3b --synthetic --batch 8 --steps 14 --eval-every 0 \
    --sample 0 --recipe delayed --json --offload
  big_peer
  llama_fp8
  llama_peer
  step prof-big-fp8 $gpt --model gpt-1.3b --synthetic --batch 8 --steps 3 --eval-every 0 \
    --sample 0 --recipe delayed --profile
fi
cat "$summary"
