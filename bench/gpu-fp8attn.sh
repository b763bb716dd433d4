#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu-fp8attn.sh -- where the cuDNN E4M3 attention forward goes
# wrong on the GPU (te-bench -A's shapes: about 10% of O wrong, |O| past
# max |V|), from the top of a configured and built tree:
#
#     bash .devdeps/run 'T=$OUT; OUT=/tmp/o TAR=$T/r.tgz bash bench/gpu-fp8attn.sh'
#
# t/core/check_attn_fp8 with TE_FP8_SHAPES (its header) over shapes that
# separate the sequence length from the number of query tiles (batch x
# heads x length / 128; an H100 has 132 SMs), causal and not, and
# te-bench's first shape with Q = K = V (its inputs before fffcca3); first with
# the defaults alone (step "defaults"), then three runs side by side, one
# tunable changed each: TECORE_CUDNN_MASK_VALUE=lowest (the masked score
# of the frontend's FP8 pattern), TECORE_CUDNN_ENGINE_CFG=1 (cuDNN's
# second engine) and TECORE_PDL=0.  TE_DEBUG=INFO names each plan's
# engine and workspace (the .err files).  Each run's "# FAIL" and
# "wrong rows" lines say which shapes fail and in which query tiles;
# summary.txt gathers them.
default_phases=a
. "$(dirname "$0")/gpu-lib.sh"
make -s t/core/check_attn_fp8 > "$out/make.txt" 2>&1
shapes="4,8,512,128,1; 4,8,1024,128,1; 4,8,2048,128,1; 16,8,512,128,1; 4,16,512,128,1"
shapes="$shapes; 1,8,2048,128,1; 1,4,4096,128,1; 4,8,2048,128,0; 16,16,2048,128,1,61"
shapes="$shapes; 16,16,2048,128,1,61,0.25,1"
export TE_FP8_SHAPES=${FP8_SHAPES:-$shapes} TE_DEVICE=cuda TE_DEBUG=INFO TE_DEBUG_SUBSYS=KERNEL
STEP_TIMEOUT=${STEP_TIMEOUT:-240} step defaults t/core/check_attn_fp8
for v in TECORE_CUDNN_MASK_VALUE=lowest TECORE_CUDNN_ENGINE_CFG=1 TECORE_PDL=0; do
  timeout "${STEP_TIMEOUT:-240}" env "$v" t/core/check_attn_fp8 > "$out/$v.txt" 2> "$out/$v.err" &
done
wait
for f in "$out"/*.txt; do
  case $f in */summary.txt | */make.txt) continue ;; esac
  { echo "== $(basename "$f" .txt)"; grep -E '^# (FAIL|shapes:)|wrong rows|^(not )?ok' "$f"
    grep -hoE 'cuDNN fwd plan .*|heuristics offered .*' "${f%.txt}.err"; } >> "$summary"
done
if [ -n "${TAR:-}" ]; then tar czf "$TAR.part" -C "$out" . && mv "$TAR.part" "$TAR"; fi
