#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# lamport-spills.sh -- the plain Lamport kernels (te_comm_ar_lamport, _2,
# _4: allreduce, reduce-scatter and all-gather below the Lamport edge)
# compile for sm_90 with no register spills.  A small call is a chain of
# dependent steps; a spilled value is a trip to local memory on it.  With
# __launch_bounds__(512) alone, ptxas (CUDA 13.0) capped the 4-rank build
# at 64 registers and spilled 128 bytes; (512, 1) lets it keep them.
# Compiles kernels/comm_ar.cu to PTX (about a minute), then ptxas -v on the
# three entries only.
# Exit 0: no spills; 77: skip (built without CUDA); 1: a kernel spills.
# Environment (from t/Makefile.inc): NVCC, TE_T_HAVE_CUDA, srcdir.

if test "x$TE_T_HAVE_CUDA" != xyes || test -z "$NVCC" || ! test -x "$NVCC"; then
  echo "SKIP: built without CUDA (no nvcc)"
  exit 77
fi
ptxas="$(dirname "$NVCC")/ptxas"
test -x "$ptxas" || { echo "SKIP: no ptxas beside $NVCC"; exit 77; }
src="${srcdir:-.}/kernels"
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
"$NVCC" -O3 -std=c++17 -ptx -arch=sm_90 -I"$src" "$src/comm_ar.cu" -o "$tmp/comm_ar.ptx" ||
  { echo "FAIL: nvcc could not compile $src/comm_ar.cu"; exit 1; }
"$ptxas" -arch=sm_90 -O3 -v -e te_comm_ar_lamport -e te_comm_ar_lamport2 -e te_comm_ar_lamport4 \
  "$tmp/comm_ar.ptx" -o "$tmp/comm_ar.cubin" > "$tmp/v" 2>&1 ||
  { cat "$tmp/v"; echo "FAIL: ptxas failed"; exit 1; }
# "Function properties for NAME", then "... N bytes spill stores, M bytes spill loads"
awk '
  /Function properties for/ { name = $NF; next }
  /spill stores/ && name != "" {
    for (i = 1; i <= NF; i++) if ($i == "spill" && $(i + 1) ~ /^stores/) st = $(i - 2)
    print name, st; seen++
    if (st + 0 != 0) { print "FAIL: " name " spills " st " bytes"; bad = 1 }
    name = ""
  }
  END { if (seen != 3) { print "FAIL: " seen " of 3 entries reported"; bad = 1 } exit bad }
' "$tmp/v"
