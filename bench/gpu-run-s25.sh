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
