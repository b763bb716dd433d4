#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu-run-s24.sh -- session 24's GPU checks, from the top of a
# configured and built tree (.devdeps/run builds it).  Through the device
# tool keep the step files outside $OUT (gpu-lib.sh):
#
#     bash .devdeps/run 'T=$OUT; OUT=/tmp/o TAR=$T/r.tgz PHASES=a bash bench/gpu-run-s24.sh'
#
# then, within the machine's idle window (the build stays), PHASES=b from
# /tmp/te-build with OUT=/tmp/o2.
# Phase a: the one-pass cross-entropy (tecore_xent_fwd_bwd) under
# TE_DEVICE=cuda (check_xent: bit for bit against the two calls) and its
# te-bench --model row beside the two calls; the GEMM tuner's split-k
# candidates for weight gradients (check_gemm_tune under cuda; GPT-2
# 124M BF16 with the tuner's log, against TECORE_GEMM_TUNE_MAX_MN=0, the
# old choice, in the same call), where its step goes (--profile), and its
# torch.compile twin (issue 31's 1.25x).
# Phase b: llama-1b FP8 (the one pass over its FP8 codes in place) and the
# 1.3B model beside their twins.
# Phase c (after a: the one pass kept its rows in L2 and ran slower than
# the two calls): the one pass with the row in shared memory (check_xent,
# te-bench --model); the 16-bit norm backward on three blocks an SM
# (check_norm; --profile's te_norm_bwd_fast beside
# TECORE_NORM_BWD_FAST_PARTS=264, the old two); GPT-2 124M and its twin.
# Phase d (after c: the one pass at 0.849 ms against the two calls' 0.905):
# the row copied with cp.async, all of it in flight at once; then the
# three models beside their twins, and 124M's profile.
# Phase e (after d: the one pass at 0.686 ms, 80.5% of its floor): each
# row's vectors copied into their slots during the previous row's gradient
# pass (reads overlapping writes); check_xent, te-bench --model, GPT-2 124M.
# Phase tp (two GPUs): te-gpt --tp with the norm summed on the device and
# the whole step one graph, pipelined and chained: t/demo/te-gpt-tp.sh
# under TE_DEVICE=cuda, GPT-2 124M one process against --tp 2 (50 steps
# on the man pages), llama-1b --tp 2 beside one GPU of the same machine.
set -u
default_phases="a"
. "$(dirname "$0")/gpu-lib.sh"
gpt=tools/te-gpt
llama="$gpt --model llama-1b --synthetic --batch 4 --steps 14 --eval-every 0 --sample 0 --recipe delayed --json"
big="$gpt --model gpt-1.3b --synthetic --batch 8 --steps 14 --eval-every 0 --sample 0 --recipe delayed --json"
small="$gpt --model gpt2-124m --synthetic --batch 32 --steps 20 --eval-every 0 --sample 0 --json"
step machine sh -c 'nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvcc --version | tail -2'
if has a; then
  make -s t/core/check_xent t/core/check_gemm_tune > /dev/null 2>&1
  step check_xent env TE_DEVICE=cuda t/core/check_xent
  step check_gemm_tune env TE_DEVICE=cuda t/core/check_gemm_tune
  step bench-model tools/te-bench --model
  step small env TE_DEBUG=INFO TE_DEBUG_SUBSYS=TUNE $small
  step small-mn0 env TECORE_GEMM_TUNE_MAX_MN=0 $small
  step small-peer python3 bench/gpt_peer.py speed --model gpt2-124m --batch 32 --compile --steps 8 --warmup 3
  step small-profile $gpt --model gpt2-124m --synthetic --batch 32 --steps 3 --eval-every 0 --sample 0 --profile
fi
if has b; then
  step llama $llama
  step llama-peer python3 bench/gpt_peer.py speed --model llama-1b --batch 4 --compile --steps 8 --warmup 3
  step big $big
  step big-peer python3 bench/gpt_peer.py speed --model gpt-1.3b --batch 8 --compile --steps 8 --warmup 3
fi
if has c; then
  make -s t/core/check_xent t/core/check_norm > /dev/null 2>&1
  step check_xent env TE_DEVICE=cuda t/core/check_xent
  step check_norm env TE_DEVICE=cuda t/core/check_norm
  step bench-model tools/te-bench --model
  step small $small
  step small-parts264 env TECORE_NORM_BWD_FAST_PARTS=264 $small
  step small-peer python3 bench/gpt_peer.py speed --model gpt2-124m --batch 32 --compile --steps 8 --warmup 3
  step small-profile $gpt --model gpt2-124m --synthetic --batch 32 --steps 3 --eval-every 0 --sample 0 --profile
  step small-profile264 env TECORE_NORM_BWD_FAST_PARTS=264 $gpt --model gpt2-124m --synthetic \
    --batch 32 --steps 3 --eval-every 0 --sample 0 --profile
fi
# the one pass on the GPU, its te-bench row, GPT-2 124M beside its twin and its profile
one_pass_small() {
  make -s t/core/check_xent > /dev/null 2>&1
  step check_xent env TE_DEVICE=cuda t/core/check_xent
  step bench-model tools/te-bench --model
  step small $small
  step small-peer python3 bench/gpt_peer.py speed --model gpt2-124m --batch 32 --compile --steps 8 --warmup 3
  step small-profile $gpt --model gpt2-124m --synthetic --batch 32 --steps 3 --eval-every 0 --sample 0 --profile
}
if has d; then
  one_pass_small
  step llama $llama
  step llama-peer python3 bench/gpt_peer.py speed --model llama-1b --batch 4 --compile --steps 8 --warmup 3
  step big $big
  step big-peer python3 bench/gpt_peer.py speed --model gpt-1.3b --batch 8 --compile --steps 8 --warmup 3
fi
if has e; then
  one_pass_small
fi
if has tp; then
  step te-gpt-tp env TE_DEVICE=cuda top_builddir=. sh t/demo/te-gpt-tp.sh
  step tp1-124m $gpt --model gpt2-124m --batch 8 --steps 50 --eval-every 25 --sample 0 --seed 1 --csv
  step tp2-124m $gpt --model gpt2-124m --batch 8 --steps 50 --eval-every 25 --sample 0 --seed 1 --csv --tp 2
  step llama1 $llama
  step llama-tp2 $llama --tp 2
fi
cat "$summary"
