#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# allreduce-perf.sh -- te-allreduce-perf as a newcomer first runs it, on a
# machine with no GPU: vdev ranks forked by -n, eager and graph-captured,
# plain and fused allreduce, reduce-scatter and all-gather.  Every size must have run (a time, not n/a) with no
# wrong element, and the header must give the latency floor.
set -u
tool=${top_builddir:-.}/tools/te-allreduce-perf
fail=0
run() {
  out=$(TE_DEVICE=vdev "$tool" "$@" -w 2 -i 3 --csv 2>&1)
  rc=$?
  rows=$(printf '%s\n' "$out" | grep -v '^#' | grep -v '^size,' )
  if [ $rc -ne 0 ] || [ -z "$rows" ]; then
    echo "FAIL: te-allreduce-perf $* exited $rc"; printf '%s\n' "$out"; fail=1; return
  fi
  # the floor beside the figures: two positive times (tecomm_probe)
  if ! printf '%s\n' "$out" | grep -Eq '^# floor .*empty kernel [0-9.]*[1-9][0-9.]*, one word to and from every peer [0-9.]*[1-9]'; then
    echo "FAIL: te-allreduce-perf $*: no floor line with two positive times"; printf '%s\n' "$out"; fail=1
  fi
  # a size that did not run has no time (an empty field)
  bad=$(printf '%s\n' "$rows" | awk -F, '$5 == "" || $8 != "0"')
  if [ -n "$bad" ]; then
    echo "FAIL: te-allreduce-perf $*: rows not run or wrong:"; printf '%s\n' "$bad"; fail=1
  fi
  printf '%s\n' "$out" | head -3
}
run -n 2 -b 8 -e 1M -f 16 -d bf16
run -n 3 -b 4 -e 64K -f 8 -d float -G 4
run -n 4 -b 1K -e 64K -f 8 -d half -a twoshot
run -n 2 -b 8K -e 32K -f 2 -d bf16 --fused 1024 -G 2
# reduce-scatter and all-gather: every size a multiple of the ranks, each checked
run -n 2 -b 8 -e 256K -f 16 -d bf16 -C reduce-scatter
run -n 3 -b 12 -e 48K -f 8 -d float -C allgather -G 2
run -n 4 -b 16 -e 64K -f 16 -d half -C reduce-scatter -G 2
# the overlapped GEMMs at one shape: five rows (overlap, gemm, chunks,
# pair, coll), each with a time, and no element of the overlapped call off
# the pair's; the chunks row's blocks named (--chunks, else the ranks)
gemm_run() {
  out=$(TE_DEVICE=vdev "$tool" "$@" -w 1 -i 2 --csv 2>&1)
  rc=$?
  rows=$(printf '%s\n' "$out" | grep -E '^(overlap|gemm|chunks|pair|coll),[0-9.]+,')
  if [ $rc -ne 0 ] || [ "$(printf '%s\n' "$rows" | wc -l)" -ne 5 ] ||
     ! printf '%s\n' "$out" | grep -q "chunks: the GEMM in $want_chunks row blocks" ||
     ! printf '%s\n' "$out" | grep -q '^# wrong elements (overlap against pair): 0$' ||
     ! printf '%s\n' "$out" | grep -q '^# floor: the gemm row'; then
    echo "FAIL: te-allreduce-perf $* exited $rc, or lacks a row, the floor or #wrong 0"
    printf '%s\n' "$out"; fail=1
  fi
}
want_chunks=2 gemm_run -n 2 -C ag-gemm --mnk 64,48,32 -d bf16
want_chunks=3 gemm_run -n 3 -C gemm-rs --mnk 63,32,40 -d half -G 2
want_chunks=4 gemm_run -n 4 -C ag-gemm --mnk 20,16,24 -d bf16 -G 2
want_chunks=2 gemm_run -n 2 -C gemm-rs --mnk 32,16,32 -d e4m3
want_chunks=4 gemm_run -n 1 -C gemm-rs --mnk 64,32,32 -d bf16 --chunks 4
# --chunks: 1 to 64, dividing M, with the GEMM modes only (exit 2)
for bad in "-C gemm-rs --mnk 64,32,32 --chunks 3" "-C ag-gemm --chunks 0" "--chunks 2"; do
  # shellcheck disable=SC2086
  TE_DEVICE=vdev "$tool" -n 1 $bad > /dev/null 2>&1
  if [ $? -ne 2 ]; then echo "FAIL: te-allreduce-perf -n 1 $bad was not refused with exit 2"; fail=1; fi
done
TE_DEVICE=vdev "$tool" -n 2 -C gemm-rs --mnk 3,4 > /dev/null 2>&1
if [ $? -ne 2 ]; then echo "FAIL: --mnk 3,4 was not refused with exit 2"; fail=1; fi
# --fused is an allreduce's: refused with another collective (exit 2)
TE_DEVICE=vdev "$tool" -n 2 -C allgather --fused 64 > /dev/null 2>&1
if [ $? -ne 2 ]; then echo "FAIL: -C allgather --fused was not refused with exit 2"; fail=1; fi
exit $fail
