#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu-run.sh -- every GPU figure and check this project records, in
# one command on a GPU machine, from the top of a configured and built tree
# (README.md, "Testing on a GPU machine"):
#
#     OUT=gpu-out bash bench/gpu-run.sh
#
# Writes under $OUT (or ./gpu-out): the machine's description, the suite
# with TE_DEVICE=cuda, te-bench --all, and te-demo in its three modes (eager
# launches, graphed callables, one graph per step) at the launch-bound size
# of the graph targets (12 blocks, hidden 256, 64 tokens) and at the
# default realistic size; te-offload-bench and te-demo --offload; and
# te-allreduce-perf on 2 and 4 GPUs when the machine has them.  Each step
# runs even when an earlier one failed;
# the summary lists the exit codes.  Never changes clocks, power, MIG or
# multicast (NCCL_NVLS_ENABLE=0 is left as the machine sets it).
set -u
out=${OUT:-gpu-out}
mkdir -p "$out"
summary="$out/summary.txt"
: > "$summary"
step() {   # step NAME COMMAND...: runs it, output to $out/NAME.txt
  local name=$1
  shift
  local t0=$SECONDS
  "$@" > "$out/$name.txt" 2>&1
  local rc=$?
  printf '%-28s rc %3d  %5d s  %s\n' "$name" "$rc" $((SECONDS - t0)) "$*" >> "$summary"
}

step machine sh -c 'nvidia-smi; nvidia-smi -q | sed -n "1,40p"; uname -a; nvcc --version'
step te-info tools/te-info
export TE_DEVICE=cuda
step make-check make -k check
cp test-suite.log "$out/test-suite.log" 2>/dev/null
step te-bench tools/te-bench --all
demo="tools/te-demo --layers 12 --hidden 256 --ffn 1024 --tokens 64 --steps 30"
step demo-small-eager $demo --no-graphs
step demo-small-callables $demo
step demo-small-step $demo --step-graph
step demo-default tools/te-demo
step demo-default-step tools/te-demo --step-graph
# activation offload: pool and spill beside raw copies / raw io_uring (on the
# local disk), the step with and without offload, the engine's idle CPU;
# te-demo --offload at the default size (all blocks, and the first 4 only:
# copying a block out takes longer than its forward at this size)
mkdir -p "$out/spill"
step offload-bench tools/te-offload-bench --dir "${SPILL_DIR:-$out/spill}"
step demo-offload tools/te-demo --offload --no-bf16
step demo-offload-4 tools/te-demo --offload --offload-layers 4 --no-bf16
step demo-offload-4-step tools/te-demo --offload --offload-layers 4 --no-bf16 --step-graph
step demo-offload-spill tools/te-demo --offload --offload-layers 4 --no-bf16 \
  --offload-dir "${SPILL_DIR:-$out/spill}" --host-budget 256
rm -rf "$out/spill"
# allreduce beside NCCL on 2 and 4 GPUs (where the machine has them):
# graph-captured BF16 over the sweep, then the fused add + RMSNorm for
# hidden 4096 and 8192 from 1 to 256 tokens
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
for n in 2 4; do
  [ "$ngpu" -ge "$n" ] || continue
  step allreduce-$n tools/te-allreduce-perf -n $n -G 20 -b 8 -e 256M -f 4 -d bf16
  step allreduce-fused4096-$n tools/te-allreduce-perf -n $n -G 20 -b 8K -e 2M -f 2 -d bf16 --fused 4096
  step allreduce-fused8192-$n tools/te-allreduce-perf -n $n -G 20 -b 16K -e 4M -f 2 -d bf16 --fused 8192
done
cat "$summary"
