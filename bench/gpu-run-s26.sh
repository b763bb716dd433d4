#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu-run-s26.sh -- session 26's GPU checks, from the top of a
# configured and built tree (.devdeps/run builds it):
#
#     bash .devdeps/run 'T=$OUT; OUT=/tmp/o TAR=$T/r.tgz PHASES=a bash bench/gpu-run-s26.sh'
#
# Phase a: te_attn_bwd3 software-pipelined (one barrier a tile, tile t's
# dQ reduced while tile t + 1's S^T and dP^T run, P computed while dP^T
# runs, dS^T while dV runs, the mask test without branches):
# check_attention with TECORE_ATTN_BACKEND=libte under TE_DEVICE=cuda (the
# float64 reference), with TECORE_ATTN_WGMMA=0 (the mma.sync kernels share
# the mask helper), te-bench --attention with and without wgmma beside
# PyTorch's SDPA flash and cuDNN (bench/attn_peer.py).
# Phase b (after a: every attention row met): the embedding backward's
# scan with a thread's 32 ids loaded at once (te-bench --model, and
# check_embedding under TE_DEVICE=cuda); issue 29's other rows in one call:
# te-bench --attention on the auto backend (cuDNN, BF16 and E4M3) and on
# libte's kernels beside the peer; GPT-2 124M's step on libte's attention
# beside cuDNN's.
# Phase c (after b: the E4M3 forward with a BF16 O at 1.281x the BF16
# forward, 1.3x asked): the staged O widened 8 codes a thread, four loads
# in flight, each warp's loads and stores contiguous: check_attn_cudnn and
# check_attention under TE_DEVICE=cuda, te-bench --attention (auto).
# Phase d: te_attn_bwd3_d64 with one warpgroup of 64 keys a block (every
# column of dQ, two blocks an SM, so that one block's softmax overlaps the
# other's MMAs): check_attention (libte) under TE_DEVICE=cuda, te-bench
# --attention (libte) beside the peer, GPT-2 124M's step on libte's
# attention; check_attn_cudnn again (its s_amax reference fixed).
# Phase e: te_norm_bwd_fast loads the residual branch's gradient with x
# and dy (one round trip to memory a row, was two): check_norm under
# TE_DEVICE=cuda, te-bench --model (its new LayerNorm backward row), GPT-2
# 124M's step and its --profile.
# Phase f: the final code, once more: check_attention (libte, auto),
# check_embedding, check_attn_cudnn under TE_DEVICE=cuda; t/demo/te-gpt.sh
# under TE_DEVICE=cuda; te-bench --model and --attention (libte and auto)
# beside the peer; GPT-2 124M's decode at batch 1 beside the PyTorch loop.
# Phase g: te_attn_bwd3 adds dQ into dq_acc by bulk reductions (a
# warpgroup's fragments staged in shared memory, one
# cp.reduce.async.bulk a query row) instead of 16-byte red.global from
# every thread: check_attention (libte, and with wgmma off) under
# TE_DEVICE=cuda, te-bench --attention (libte) beside the peer, twice.
set -u
default_phases="a"
. "$(dirname "$0")/gpu-lib.sh"
step machine sh -c 'nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvcc --version | tail -2'
if has a; then
  make -s t/core/check_attention > /dev/null 2>&1
  step check_attn_libte env TE_DEVICE=cuda TECORE_ATTN_BACKEND=libte t/core/check_attention
  step check_attn_mma env TE_DEVICE=cuda TECORE_ATTN_BACKEND=libte TECORE_ATTN_WGMMA=0 \
    t/core/check_attention
  step bench-attn-wgmma env TECORE_ATTN_BACKEND=libte tools/te-bench --attention
  step attn-peer python3 bench/attn_peer.py
  step bench-attn-mma env TECORE_ATTN_BACKEND=libte TECORE_ATTN_WGMMA=0 tools/te-bench --attention
fi
if has b; then
  make -s t/core/check_embedding t/core/check_attention tools/te-gpt > /dev/null 2>&1
  step check_embedding env TE_DEVICE=cuda t/core/check_embedding
  step bench-model tools/te-bench --model
  step bench-attn-auto tools/te-bench --attention
  step bench-attn-libte env TECORE_ATTN_BACKEND=libte tools/te-bench --attention
  step attn-peer python3 bench/attn_peer.py
  small="tools/te-gpt --model gpt2-124m --synthetic --batch 32 --steps 20 --eval-every 0 --sample 0 --json"
  step small-libte env TECORE_ATTN_BACKEND=libte $small
  step small-cudnn $small
fi
if has c; then
  make -s t/core/check_attn_cudnn t/core/check_attention > /dev/null 2>&1
  step check_attn_cudnn env TE_DEVICE=cuda t/core/check_attn_cudnn
  step check_attn_auto env TE_DEVICE=cuda t/core/check_attention
  step bench-attn-auto tools/te-bench --attention
  step bench-attn-auto2 tools/te-bench --attention
fi
if has d; then
  make -s t/core/check_attention t/core/check_attn_cudnn tools/te-gpt > /dev/null 2>&1
  step check_attn_libte env TE_DEVICE=cuda TECORE_ATTN_BACKEND=libte t/core/check_attention
  step bench-attn-libte env TECORE_ATTN_BACKEND=libte tools/te-bench --attention
  step attn-peer python3 bench/attn_peer.py
  step check_attn_cudnn env TE_DEVICE=cuda t/core/check_attn_cudnn
  small="tools/te-gpt --model gpt2-124m --synthetic --batch 32 --steps 20 --eval-every 0 --sample 0 --json"
  step small-libte env TECORE_ATTN_BACKEND=libte $small
fi
if has e; then
  make -s t/core/check_norm tools/te-gpt > /dev/null 2>&1
  step check_norm env TE_DEVICE=cuda t/core/check_norm
  step bench-model tools/te-bench --model
  small="tools/te-gpt --model gpt2-124m --synthetic --batch 32 --steps 20 --eval-every 0 --sample 0 --json"
  step small-cudnn $small
  step small-profile tools/te-gpt --model gpt2-124m --synthetic --batch 32 --steps 3 --eval-every 0 --sample 0 --profile
fi
if has f; then
  make -s t/core/check_attention t/core/check_embedding t/core/check_attn_cudnn tools/te-gpt \
    > /dev/null 2>&1
  step check_attn_libte env TE_DEVICE=cuda TECORE_ATTN_BACKEND=libte t/core/check_attention
  step check_attn_auto env TE_DEVICE=cuda t/core/check_attention
  step check_attn_cudnn env TE_DEVICE=cuda t/core/check_attn_cudnn
  step check_embedding env TE_DEVICE=cuda t/core/check_embedding
  step bench-model tools/te-bench --model
  step bench-attn-libte env TECORE_ATTN_BACKEND=libte tools/te-bench --attention
  step bench-attn-auto tools/te-bench --attention
  step attn-peer python3 bench/attn_peer.py
  step decode-wgmma tools/te-gpt --model gpt2-124m --synthetic --steps 0 --sample 256 --json
  step decode-peer python3 bench/gpt_peer.py decode --model gpt2-124m --tokens 256
  step te-gpt-sh make -s check TESTS=t/demo/te-gpt.sh TE_DEVICE=cuda
  cp t/demo/te-gpt.sh.log "$out/" 2>/dev/null
fi
if has g; then
  make -s t/core/check_attention tools/te-gpt > /dev/null 2>&1
  step check_attn_libte env TE_DEVICE=cuda TECORE_ATTN_BACKEND=libte t/core/check_attention
  step bench-attn-libte env TECORE_ATTN_BACKEND=libte tools/te-bench --attention
  step attn-peer python3 bench/attn_peer.py
  step bench-attn-libte2 env TECORE_ATTN_BACKEND=libte tools/te-bench --attention
  small="tools/te-gpt --model gpt2-124m --synthetic --batch 32 --steps 20 --eval-every 0 --sample 0 --json"
  step small-libte env TECORE_ATTN_BACKEND=libte $small
fi
