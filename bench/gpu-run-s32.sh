#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu-run-s32.sh -- session 32's GPU checks, from the top of a
# configured and built tree (.devdeps/run builds it):
#
#     bash .devdeps/run 'T=$OUT; OUT=/tmp/o TAR=$T/r.tgz PHASES=a bash bench/gpu-run-s32.sh'
#
# Outputs: bench/2026-12-07/c1 (phase a) ..; record: bench/2026-12-07-gpu.md.
# Phase a: libte's own 16-bit GEMM in clusters of two blocks that share
# B's tiles through the TMA's multicast (TECORE_GEMM16_CLUSTER=2, the
# default; 1: every block alone): check_gemm's reference case under cuda
# (the own shapes: odd and even rows of blocks), te-bench --gemm both
# ways (the GELU rows; TECORE_GEMM_OWN=2 the plain ones), GPT-2 124M's
# step both ways beside torch.compile's, check_transformer; Nsight
# Compute's throughputs of the fc1 forward kernel both ways.
# Phase a result (c1): correct (check_gemm 11/11, 128 own GEMMs;
# check_transformer 17/17) and slower: the fc1 forward with gelu' 0.414 ms
# against 0.302 alone, the DAUX backward 0.451 against 0.305, plain
# 32768x768x3072 0.382 against 0.274; the step 58.20 / 58.28 ms against
# 55.79 alone (torch.compile 68.67).  Nsight Compute: alone, L2 55%,
# L1 58%, SM 55%, DRAM 44% -- nothing saturated; in pairs L2 69%.
# Phase b: where the own GEMM's warps wait: Nsight Compute's full set with
# its per-instruction stall samples (the source page as CSV) for the fc1
# forward (gelu' as aux) and the fc2 dgrad (the DAUX product) alone, and
# the fc1 forward in pairs.
# Phase b result (c2): alone, the MMA warps wait at the stages' full
# barrier (13% of all samples of the fc1 forward, 15% of the DAUX
# product's), the epilogue warps wait for the tile (17%: they keep up),
# the DAUX epilogue waits on its aux loads (17%); the three 64-deep stages
# leave the TMA one k-tile of MMAs (about 1000 cycles) to land a stage.
# In pairs 28% more wait at the cluster-scope release of the remote
# arrive (MEMBAR.ALL.GPU, ERRBAR in every k-step).
# Phase c: six stages of k = 32 (the same shared memory; the TMA has four
# 32-deep k-steps, twice the time, to land one), the pairs' remote
# arrive without the cluster-scope fence: check_gemm's reference case
# under cuda, te-bench --gemm in pairs and alone, GPT-2's step both ways
# beside torch.compile's, check_transformer, the plain rows
# (TECORE_GEMM_OWN=2) both ways, the stall samples again.
# Phase c result (c3): correct (check_gemm 11/11, check_transformer
# 17/17); the full-barrier waits fall (13% to 5% alone, 2% in pairs), but
# alone the kernels are slower (fc1 with gelu' 0.331 ms, plain 32768 x
# 2304 x 768 0.222 against c1's 0.302 and 0.191 with 64-deep stages); in
# pairs plain GEMMs gain 10% (0.245 against 0.271 alone at 32768 x 768 x
# 3072) and the GELU ones do not (0.307-0.318, the DAUX product
# 0.317-0.321); the step 56.97 / 56.86 ms in pairs, 56.58 alone
# (torch.compile 69.05).
# Phase d: both stage depths in one build (TECORE_GEMM16_STAGE_K 64, the
# default, or 32) and the pairs' cheap arrive with 64-deep stages:
# check_gemm's reference case (pairs and 64-deep stages, the defaults),
# te-bench --gemm with 64-deep stages in pairs and alone and 32-deep in
# pairs, GPT-2's step each way beside torch.compile's, t/demo/te-gpt.sh
# and check_transformer under cuda with the defaults.
# Phase d result (c4): correct (check_gemm 11/11, check_transformer 17/17,
# t/demo/te-gpt.sh passes); fc1 with gelu' 0.304 ms in pairs, 0.300
# alone, 0.305 with 32-deep stages; the DAUX product 0.319 / 0.308 /
# 0.316; the step 55.66 / 55.91 ms in pairs, 56.61 / 55.49 alone, 55.69
# with 32-deep stages (torch.compile 68.36).  Neither kept (91ea8bb: the
# kernel is session 31's again, the same SASS).
# Phase e: where the step's time goes between kernels: Nsight Compute
# times every kernel of GPT-2's three-step run one at a time
# (gpu__time_duration, graph nodes one by one), to set their sum for a
# replayed step beside the step's own time.
# Phase e result (c5): ncu saw the first, eager step only (1725 kernels,
# most of them cuBLASLt's algorithm measurements): the step graph is
# fired from the device (te_graph_fire), whose nodes ncu does not time.
# Phase f: the same over te-gpt --profile's eager steps (caches not
# flushed), to sum the third step's kernels.
# Phase f result (c6): the third eager step's 456 kernels take 53.37 ms
# one by one (the second's 603, with the eager zero-grad fills, 53.88);
# the graph step 55.56 ms: 2.2 ms between kernels and in clocks.
# Phase g: the clocks and power of a sustained step (nvidia-smi every 50
# ms beside te-gpt and beside torch.compile's peer), and the step without
# programmatic dependent launch (TECORE_PDL=0): how much of those 2.2 ms
# is clocks and how much boundaries.
# Phase g result (c7): te-gpt's replayed steps draw 666-693 W (the limit
# is 700) at a median SM clock of 1695 MHz (1410-1965), where Nsight
# Compute's one-by-one kernels ran near 1965: the step is held by power.
# Without PDL 56.45 / 55.39 ms against 55.18 / 56.32 with it (within the
# calls' spread); torch.compile 68.43.
set -u
default_phases="a"
. "$(dirname "$0")/gpu-lib.sh"
gpt=tools/te-gpt
small="$gpt --model gpt2-124m --synthetic --batch 32 --steps 20 --eval-every 0 --sample 0 --json"
prof="$gpt --model gpt2-124m --synthetic --batch 32 --steps 3 --eval-every 0 --sample 0 --profile"
peer="python3 bench/gpt_peer.py speed --model gpt2-124m --batch 32 --compile --steps 20 --warmup 3"
ncu="/usr/local/cuda/bin/ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --kernel-name regex:te_gemm16_bf16_.*_gelud --launch-skip 2 --launch-count 1"
step machine sh -c 'nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv; nvcc --version | tail -2'
if has a; then
  make -s tools/te-gpt tools/te-bench t/core/check_gemm t/core/check_transformer > /dev/null 2>&1
  step check_gemm env TE_DEVICE=cuda CK_RUN_CASE=reference t/core/check_gemm
  step bench-gemm tools/te-bench --gemm
  step bench-gemm-alone env TECORE_GEMM16_CLUSTER=1 tools/te-bench --gemm
  if grep -q "^ok.*gemm_own_shapes" "$out/check_gemm.txt"; then
    step small-1 $small
    step small-peer20 $peer
    step small-alone env TECORE_GEMM16_CLUSTER=1 $small
    step small-2 $small
  fi
  step bench-gemm-own env TECORE_GEMM_OWN=2 tools/te-bench --gemm
  step bench-gemm-own-alone env TECORE_GEMM_OWN=2 TECORE_GEMM16_CLUSTER=1 tools/te-bench --gemm
  step check_transformer env TE_DEVICE=cuda t/core/check_transformer
  step ncu-gemm $ncu tools/te-bench --gemm
  step ncu-gemm-alone env TECORE_GEMM16_CLUSTER=1 $ncu tools/te-bench --gemm
fi
if has b; then
  make -s tools/te-bench > /dev/null 2>&1
  full="/usr/local/cuda/bin/ncu --clock-control none --set full --import-source no --launch-skip 3 --launch-count 1"
  export_rep() {
    /usr/local/cuda/bin/ncu --import "$1.ncu-rep" --page details > "$1-details.txt" 2>&1
    /usr/local/cuda/bin/ncu --import "$1.ncu-rep" --page source --csv --print-source sass \
      2>&1 | gzip > "$1-source.csv.gz"
    rm -f "$1.ncu-rep"
  }
  step ncu-gelud env TECORE_GEMM16_CLUSTER=1 $full --kernel-name regex:te_gemm16_bf16_kn_gelud \
    -o "$out/gelud" tools/te-bench --gemm
  export_rep "$out/gelud"
  step ncu-dmul env TECORE_GEMM16_CLUSTER=1 $full --kernel-name regex:te_gemm16_bf16_nk_dmul \
    -o "$out/dmul" tools/te-bench --gemm
  export_rep "$out/dmul"
  step ncu-gelud-pair env TECORE_GEMM16_CLUSTER=2 $full --kernel-name regex:te_gemm16_bf16_kn_gelud \
    -o "$out/gelud-pair" tools/te-bench --gemm
  export_rep "$out/gelud-pair"
  step done true
fi
if has c; then
  make -s tools/te-gpt tools/te-bench t/core/check_gemm t/core/check_transformer > /dev/null 2>&1
  step check_gemm env TE_DEVICE=cuda CK_RUN_CASE=reference t/core/check_gemm
  if grep -q "^ok.*gemm_own_shapes" "$out/check_gemm.txt"; then
    step bench-gemm tools/te-bench --gemm
    step bench-gemm-alone env TECORE_GEMM16_CLUSTER=1 tools/te-bench --gemm
    step small-1 $small
    step small-peer20 $peer
    step small-alone env TECORE_GEMM16_CLUSTER=1 $small
    step small-2 $small
    step check_transformer env TE_DEVICE=cuda t/core/check_transformer
    step bench-gemm-own env TECORE_GEMM_OWN=2 tools/te-bench --gemm
    step bench-gemm-own-alone env TECORE_GEMM_OWN=2 TECORE_GEMM16_CLUSTER=1 tools/te-bench --gemm
    full="/usr/local/cuda/bin/ncu --clock-control none --set full --import-source no --launch-skip 3 --launch-count 1"
    step ncu-gelud env TECORE_GEMM16_CLUSTER=1 $full --kernel-name regex:te_gemm16_bf16_kn_gelud \
      -o "$out/gelud" tools/te-bench --gemm
    /usr/local/cuda/bin/ncu --import "$out/gelud.ncu-rep" --page source --csv --print-source sass \
      2>&1 | gzip > "$out/gelud-source.csv.gz"
    rm -f "$out/gelud.ncu-rep"
    step ncu-gelud-pair env TECORE_GEMM16_CLUSTER=2 $full --kernel-name regex:te_gemm16_bf16_kn_gelud \
      -o "$out/gelud-pair" tools/te-bench --gemm
    /usr/local/cuda/bin/ncu --import "$out/gelud-pair.ncu-rep" --page source --csv --print-source sass \
      2>&1 | gzip > "$out/gelud-pair-source.csv.gz"
    rm -f "$out/gelud-pair.ncu-rep"
  fi
  step done true
fi
if has d; then
  make -s tools/te-gpt tools/te-bench t/core/check_gemm t/core/check_transformer > /dev/null 2>&1
  step check_gemm env TE_DEVICE=cuda CK_RUN_CASE=reference t/core/check_gemm
  if grep -q "^ok.*gemm_own_shapes" "$out/check_gemm.txt"; then
    step bench-gemm tools/te-bench --gemm
    step bench-gemm-alone env TECORE_GEMM16_CLUSTER=1 tools/te-bench --gemm
    step bench-gemm-k32 env TECORE_GEMM16_STAGE_K=32 tools/te-bench --gemm
    step small-1 $small
    step small-peer20 $peer
    step small-alone env TECORE_GEMM16_CLUSTER=1 $small
    step small-k32 env TECORE_GEMM16_STAGE_K=32 $small
    step small-2 $small
    step small-alone2 env TECORE_GEMM16_CLUSTER=1 $small
    STEP_TIMEOUT=200 step te-gpt-sh make -s check TESTS=t/demo/te-gpt.sh TE_DEVICE=cuda
    step te-gpt-sh-log sh -c "cat t/demo/te-gpt.log || cat test-suite.log"
    step check_transformer env TE_DEVICE=cuda t/core/check_transformer
  fi
  step done true
fi
if has e; then
  make -s tools/te-gpt > /dev/null 2>&1
  step small-1 $small
  STEP_TIMEOUT=330 step ncu-step /usr/local/cuda/bin/ncu --clock-control none \
    --graph-profiling node --metrics gpu__time_duration.sum --csv --print-units base \
    $gpt --model gpt2-124m --synthetic --batch 32 --steps 3 --eval-every 0 --sample 0
  gzip -f "$out/ncu-step.txt"
  step done true
fi
if has f; then
  make -s tools/te-gpt > /dev/null 2>&1
  STEP_TIMEOUT=330 step ncu-prof /usr/local/cuda/bin/ncu --clock-control none --cache-control none \
    --metrics gpu__time_duration.sum --csv --print-units base $prof
  gzip -f "$out/ncu-prof.txt"
  step small-1 $small
  step done true
fi
if has g; then
  make -s tools/te-gpt > /dev/null 2>&1
  smi="nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,noheader -lms 50"
  step small-1 sh -c "$smi > $out/clocks-te.csv & p=\$!; $small; kill \$p"
  step small-nopdl env TECORE_PDL=0 $small
  step small-peer20 sh -c "$smi > $out/clocks-peer.csv & p=\$!; $peer; kill \$p"
  step small-2 $small
  step small-nopdl2 env TECORE_PDL=0 $small
  step done true
fi
