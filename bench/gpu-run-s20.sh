#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu-run-s20.sh -- session 20's GPU checks, from the top of a
# configured and built tree (.devdeps/run builds it).  Through the device
# tool keep the step files outside $OUT and pack them into it after every
# step (at most 8 files come back, and a call cut short keeps what it
# finished):
#
#     bash .devdeps/run 'OUT=/tmp/o TAR=$OUT/r.tgz PHASES="dl ab3" bash bench/gpu-run-s20.sh'
#
# Phases (any subset, in this order):
#   dl    device launch of graphs: check_graph_device, check_graph_graphs
#         and check_graph_memset under TE_DEVICE=cuda; te-bench --graph
#         (lines of 100-2000 kernels and the mixed 400-node graphs, host
#         launch beside device launch); te-gpt 1.3B FP8 with the step
#         graph launched from the device and from the host
#         (--graph-launch), and GPT-2 124M BF16 from the device
#   ab3   llama-1b FP8 with dswiglu+cast_transpose and without
#         (TECORE_OPS_FUSION_OFF), beside torch.compile in the same call
#   dl2   after c4: check_graph_device under cuda (a device-launched
#         graph refuses a capture); te-bench --graph with the host's wait
#         policy left to the driver and with TECORE_CUDA_SYNC=spin (the
#         rows "waited": a launch right after ~100 ms of device work);
#         te-gpt 1.3B FP8 and GPT-2 124M with both policies; 1.3B with
#         --offload, its step graph (offload's copies in it) launched
#         from the device and from the host
#   pipe  after the host queues the next step before it waits (te-gpt's
#         default now): check_graph_device under cuda; te-bench --graph
#         (launch rows "waited" and "busy"); te-gpt 1.3B FP8, GPT-2 124M
#         BF16 and llama-1b FP8 pipelined, 1.3B with --no-pipeline, and
#         1.3B with --offload (host launches, its default)
#   final the three models' speed targets with the final build
#         (pipelined steps), each beside torch.compile in the same call
# Every step is bounded by STEP_TIMEOUT seconds (150) and writes
# $OUT/NAME.txt (standard error to NAME.err) and a summary line
# (bench/gpu-lib.sh).  Never changes clocks, power, MIG or multicast.
set -u
default_phases="dl"
. "$(dirname "$0")/gpu-lib.sh"
gpt=tools/te-gpt
if has dl; then
  step machine sh -c 'nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvcc --version | tail -2'
  for t in graph/check_graph_device graph/check_graph_graphs core/check_graph_memset; do
    [ -x "t/$t" ] || make -s "t/$t" > /dev/null 2>&1
    step "$(basename $t)" env TE_DEVICE=cuda "t/$t"
  done
  step bench-graph tools/te-bench --graph --iters 20
  big="$gpt --model gpt-1.3b --synthetic --batch 8 --steps 12 --eval-every 0 --sample 0 --recipe delayed --json"
  step big-device $big
  step big-host $big --graph-launch host
  step small-device $gpt --model gpt2-124m --synthetic --batch 32 --steps 20 --eval-every 0 \
    --sample 0 --json
fi
if has ab3; then
  llama="$gpt --model llama-1b --synthetic --batch 4 --steps 12 --eval-every 0 --sample 0 --recipe delayed --json"
  step llama-on $llama
  step llama-off env TECORE_OPS_FUSION_OFF=dswiglu+cast_transpose $llama
  step llama-peer-compile python3 bench/gpt_peer.py speed --model llama-1b --batch 4 --compile \
    --steps 8 --warmup 3
fi
if has dl2; then
  step check_graph_device env TE_DEVICE=cuda t/graph/check_graph_device
  step bench-graph-auto tools/te-bench --graph --iters 20
  step bench-graph-spin env TECORE_CUDA_SYNC=spin tools/te-bench --graph --iters 20
  big="$gpt --model gpt-1.3b --synthetic --batch 8 --steps 14 --eval-every 0 --sample 0 --recipe delayed --json"
  step big-auto $big
  step big-spin env TECORE_CUDA_SYNC=spin $big
  step small-spin env TECORE_CUDA_SYNC=spin $gpt --model gpt2-124m --synthetic --batch 32 \
    --steps 20 --eval-every 0 --sample 0 --json
  step big-offload-device $big --offload
  step big-offload-host $big --offload --graph-launch host
fi
if has pipe; then
  make -s t/graph/check_graph_device > /dev/null 2>&1
  step check_graph_device env TE_DEVICE=cuda t/graph/check_graph_device
  step bench-graph tools/te-bench --graph --iters 20
  big="$gpt --model gpt-1.3b --synthetic --batch 8 --steps 14 --eval-every 0 --sample 0 --recipe delayed --json"
  step big-pipe $big
  step big-nopipe $big --no-pipeline
  step small-pipe $gpt --model gpt2-124m --synthetic --batch 32 --steps 20 --eval-every 0 \
    --sample 0 --json
  step llama-pipe $gpt --model llama-1b --synthetic --batch 4 --steps 14 --eval-every 0 \
    --sample 0 --recipe delayed --json
  step big-offload $big --offload
fi
if has final; then
  step llama $gpt --model llama-1b --synthetic --batch 4 --steps 20 --eval-every 0 --sample 0 \
    --recipe delayed --json
  step llama-peer-compile python3 bench/gpt_peer.py speed --model llama-1b --batch 4 --compile \
    --steps 8 --warmup 3
  step big $gpt --model gpt-1.3b --synthetic --batch 8 --steps 16 --eval-every 0 --sample 0 \
    --recipe delayed --json
  step big-peer-compile python3 bench/gpt_peer.py speed --model gpt-1.3b --batch 8 --compile \
    --steps 8 --warmup 3
  step small $gpt --model gpt2-124m --synthetic --batch 32 --steps 20 --eval-every 0 --sample 0 \
    --json
  step small-peer-compile python3 bench/gpt_peer.py speed --model gpt2-124m --batch 32 --compile \
    --steps 10 --warmup 3
fi
