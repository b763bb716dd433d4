#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu-run-s25.sh -- session 25's GPU checks, from the top of a
# configured and built tree (.devdeps/run builds it):
#
#     bash .devdeps/run 'T=$OUT; OUT=/tmp/o TAR=$T/r.tgz PHASES=a bash bench/gpu-run-s25.sh'
#
# Phase a: libte's attention forward on the warpgroup MMAs (te_attn_fwd3,
# wgmma, sm_90a): check_attention with TECORE_ATTN_BACKEND=libte under
# TE_DEVICE=cuda (the float64 reference), te-bench --attention on libte's
# kernels with wgmma and with TECORE_ATTN_WGMMA=0 (mma.sync, the former
# forward) beside PyTorch's SDPA flash and cuDNN (bench/attn_peer.py); the
# te-bench --model rows (the embedding backward).
# Phase b (after a: the wgmma forward 1.05-1.15x flash, the backward still
# mma.sync): the backward on wgmma too (te_attn_bwd3): check_attention as
# in a, te-bench --attention with and without wgmma, the peer.
# Phase c: te-gpt on the wgmma kernels: t/demo/te-gpt.sh under
# TE_DEVICE=cuda, GPT-2 124M's decode at batch 1 (libte's kernels run the
# variable lengths) with and without wgmma beside the PyTorch loop, and
# 124M's training step on libte's kernels beside cuDNN's.
# Phase d (after c: fwd+bwd 0.84x and 0.87x flash on the short-sequence
# rows): the wgmma kernels' grids with the query (key) blocks on x, so
# that resident blocks share a head's tiles and dQ accumulator in L2; the
# mask and epilogue helpers shared with the mma.sync kernels:
# check_attention with and without wgmma, te-bench --attention with and
# without, the peer.
set -u
default_phases="a"
. "$(dirname "$0")/gpu-lib.sh"
step machine sh -c 'nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvcc --version | tail -2'
if has a; then
  make -s t/core/check_attention > /dev/null 2>&1
  step check_attn_libte env TE_DEVICE=cuda TECORE_ATTN_BACKEND=libte TE_DEBUG=INFO \
    TE_DEBUG_SUBSYS=KERNEL t/core/check_attention
  step bench-attn-wgmma env TECORE_ATTN_BACKEND=libte tools/te-bench --attention
  step bench-attn-mma env TECORE_ATTN_BACKEND=libte TECORE_ATTN_WGMMA=0 tools/te-bench --attention
  step attn-peer python3 bench/attn_peer.py
  step bench-model tools/te-bench --model
fi
if has b; then
  make -s t/core/check_attention > /dev/null 2>&1
  step check_attn_libte env TE_DEVICE=cuda TECORE_ATTN_BACKEND=libte t/core/check_attention
  step check_attn_auto env TE_DEVICE=cuda t/core/check_attention
  step bench-attn-wgmma env TECORE_ATTN_BACKEND=libte tools/te-bench --attention
  step bench-attn-mma env TECORE_ATTN_BACKEND=libte TECORE_ATTN_WGMMA=0 tools/te-bench --attention
  step attn-peer python3 bench/attn_peer.py
fi
if has c; then
  gpt=tools/te-gpt
  make -s tools/te-gpt > /dev/null 2>&1
  step te-gpt-sh make -s check TESTS=t/demo/te-gpt.sh TE_DEVICE=cuda
  cp t/demo/te-gpt.sh.log "$out/" 2>/dev/null
  step decode-wgmma $gpt --model gpt2-124m --synthetic --steps 0 --sample 256 --json
  step decode-mma env TECORE_ATTN_WGMMA=0 $gpt --model gpt2-124m --synthetic --steps 0 --sample 256 --json
  step decode-peer python3 bench/gpt_peer.py decode --model gpt2-124m --tokens 256
  small="$gpt --model gpt2-124m --synthetic --batch 32 --steps 20 --eval-every 0 --sample 0 --json"
  step small-libte env TECORE_ATTN_BACKEND=libte $small
  step small-cudnn $small
fi
if has d; then
  make -s t/core/check_attention > /dev/null 2>&1
  step check_attn_libte env TE_DEVICE=cuda TECORE_ATTN_BACKEND=libte t/core/check_attention
  step check_attn_mma env TE_DEVICE=cuda TECORE_ATTN_BACKEND=libte TECORE_ATTN_WGMMA=0 \
    t/core/check_attention
  step bench-attn-wgmma env TECORE_ATTN_BACKEND=libte tools/te-bench --attention
  step bench-attn-mma env TECORE_ATTN_BACKEND=libte TECORE_ATTN_WGMMA=0 tools/te-bench --attention
  step attn-peer python3 bench/attn_peer.py
fi
