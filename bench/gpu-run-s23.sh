#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu-run-s23.sh -- session 23's GPU checks, from the top of a
# configured and built tree (.devdeps/run builds it).  Through the device
# tool keep the step files outside $OUT (gpu-lib.sh):
#
#     bash .devdeps/run 'T=$OUT; OUT=/tmp/o TAR=$T/r.tgz PHASES=chain bash bench/gpu-run-s23.sh'
#
# then, on a two-GPU machine within its idle window, PHASES=tp from
# /tmp/te-build with OUT=/tmp/o2.
# Phase chain: graph chains (tecore_graph_chain_*: the step graphs queued
# to a launcher kernel that waits on the device) -- check_graph_chain and
# check_graph_device under TE_DEVICE=cuda; te-gpt's step-graph host time
# and step time with --graph-launch chain (the default) against device
# launch, on llama-1b, the 1.3B model and GPT-2 124M (issue 31's <= 10 us).
# Phase tp: te-gpt --tp 2 on two GPUs (never run on hardware before):
# t/demo/te-gpt-tp.sh under TE_DEVICE=cuda, GPT-2 124M on the man pages
# one process against --tp 2 (50 steps), llama-1b --tp 2 speed.
# Phase final: GPT-2 124M BF16 and llama-1b FP8 with the chained default
# beside their torch.compile twins in the same call; 124M's --profile.
# Phase final2 (two GPUs): the 1.3B model and its twin; libtecomm's
# allreduce and the fused allreduce + add + RMSNorm on two H100s beside
# NCCL (te-allreduce-perf).
set -u
default_phases="chain"
. "$(dirname "$0")/gpu-lib.sh"
gpt=tools/te-gpt
llama="$gpt --model llama-1b --synthetic --batch 4 --steps 14 --eval-every 0 --sample 0 --recipe delayed --json"
big="$gpt --model gpt-1.3b --synthetic --batch 8 --steps 14 --eval-every 0 --sample 0 --recipe delayed --json"
small="$gpt --model gpt2-124m --synthetic --batch 32 --steps 20 --eval-every 0 --sample 0 --json"
step machine sh -c 'nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvidia-smi topo -m; nvcc --version | tail -2'
if has chain; then
  make -s t/graph/check_graph_chain t/graph/check_graph_device > /dev/null 2>&1
  step check_graph_chain env TE_DEVICE=cuda t/graph/check_graph_chain
  step check_graph_device env TE_DEVICE=cuda t/graph/check_graph_device
  step llama-chain $llama
  step llama-device $llama --graph-launch device
  step big-chain $big
  step big-device $big --graph-launch device
  step small-chain $small
  step small-device $small --graph-launch device
fi
if has final; then
  # the chained default beside its torch.compile twin in one call, and
  # where GPT-2 124M's BF16 step goes now (issue 31's 1.25x)
  step small $small
  step small-peer python3 bench/gpt_peer.py speed --model gpt2-124m --batch 32 --compile --steps 8 --warmup 3
  step llama $llama
  step llama-peer python3 bench/gpt_peer.py speed --model llama-1b --batch 4 --compile --steps 8 --warmup 3
  step small-profile $gpt --model gpt2-124m --synthetic --batch 32 --steps 3 --eval-every 0 --sample 0 --profile
fi
if has final2; then
  step big $big
  step big-peer python3 bench/gpt_peer.py speed --model gpt-1.3b --batch 8 --compile --steps 8 --warmup 3
  step ar-perf tools/te-allreduce-perf -n 2 -G 20 -d bf16 -b 8K -e 256M -f 4
  step ar-fused tools/te-allreduce-perf -n 2 -G 20 -d bf16 -b 8K -e 4M -f 4 --fused 4096
fi
if has tp; then
  step te-gpt-tp env TE_DEVICE=cuda top_builddir=. sh t/demo/te-gpt-tp.sh
  step tp1-124m $gpt --model gpt2-124m --batch 8 --steps 50 --eval-every 25 --sample 0 --seed 1 --csv
  step tp2-124m $gpt --model gpt2-124m --batch 8 --steps 50 --eval-every 25 --sample 0 --seed 1 --csv --tp 2
  step llama-tp2 $llama --tp 2
fi
cat "$summary"
