#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# funcs.sh -- short functions and struct arguments (issues 30 and 58): no
# function over 120 lines, and none outside the public API with more than
# 8 parameters (a longer list is a struct: a descriptor of the call, or
# its shapes and pointers grouped), in every folder with code: the three
# libraries, common/, the tools (tools/gpt too) and the GPU kernels
# (kernels/*.cu, *.cuh and kernels/common/*.h: __global__ and __device__
# functions, templates).  t/lint/funcs.py lists each finding.  What may
# stay over is the list below, one reason a line; an entry that is no
# longer over fails too, so that the list only shrinks.
set -u
src=${srcdir:-.}
command -v python3 > /dev/null || { echo "SKIP: no python3"; exit 77; }
cd "$src" || exit 1
tmp=${TMPDIR:-/tmp}/funcs.$$
trap 'rm -f "$tmp"' EXIT
# path function reason
cat > "$tmp" <<'LIST'
kernels/comm_ar.cu ar_fused_fast being changed on branch coll
kernels/comm_ar.cu ar_fused_spread being changed on branch coll
# GPU kernel bodies: each keeps a row (or a tile) and its partial sums in
# registers from its load stage through its math to its store stage; a
# split into __forceinline__ stages must give the same machine code for
# every instantiation (t/gpu/cubin-same.py on the sm_90a cubins before
# and after, as gemm16's, gemm16w's and norm_fwd's did), or else a GPU's timing
kernels/norm.cu norm_bwd x, dy and the dgamma/dbeta column partials in registers across both passes
kernels/attention.cu attn_fwd the query tile, running max/sum and output accumulators in registers
kernels/attention.cu attn_fwd2 the same, on mma.sync fragments
kernels/attention.cu attn_bwd dQ/dK/dV accumulators in registers across the key loop
kernels/attention_fwd3.cuh attn_fwd3 wgmma accumulators live across the key loop
kernels/attention_bwd2.cuh attn_bwd2 dK/dV fragments in registers across the query loop
kernels/attention_bwd3.cuh attn_bwd3 wgmma dK/dV accumulators across the query loop
kernels/transpose.cu ct_body the tile in registers from the load through amax to both stores (its two store stages as functions changed 50 kernels' code)
# helpers whose arguments gathered in a struct changed the machine code
# (t/gpu/cubin-same.py): to time on a GPU first
kernels/act.cu act_bwd a struct of its arguments changed the gated kinds' backward code (nvcc 13.0 sm_90a): to time on a GPU
kernels/quantize.cu quant_pt a struct of its arguments changed te_fp8_quantize_pt's and _multi's code (nvcc 13.0 sm_90a): to time on a GPU
kernels/quantize.cu quant_pt_w the same
kernels/quantize.cu quant_blk the same for te_fp8_quantize_blk
LIST
status=0
for dir in libtecore libtecomm libtegraph common tools kernels; do
  test -d "$dir" || continue
  if python3 t/lint/funcs.py --allow "$tmp" "$dir"; then
    echo "ok: $dir: no function over 120 lines, no private one over 8 parameters"
  else
    echo "FAIL: $dir (above)"
    status=1
  fi
done
exit $status
