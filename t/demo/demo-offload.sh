#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# demo-offload.sh -- te-demo --offload: the FP8 model trained again with
# its activations offloaded (pinned host memory; past a tiny host budget,
# spill files through io_uring) prints the same losses, to the last bit,
# as without offload -- te-demo itself compares the two runs and fails on
# any difference -- eagerly, as graphed callables (offload off during
# warmup, captured after) and as one graph per step.  A reload that brings
# back the wrong block, a copy that races the slot's next writer, or a
# captured schedule that replays stale state shows up as a different loss.
# te-offload-bench is run small, as a smoke test of the tool.
# Random seed each run (TE_TEST_SEED to repeat).
# Exit 0: all equal; 77: skip (TE_DEVICE=cuda without a GPU); 1: a failure.
# Environment (from t/Makefile.inc): top_builddir.

# $demo, the skip under TE_DEVICE=cuda without a GPU, $seed
. "$(dirname "$0")/demo-lib.sh"
# a directory of its own, new (mktemp): a stale one of an earlier run with
# the same pid would hold its files and fail the check at the end
top=$(mktemp -d "${TMPDIR:-/tmp}/te-demo-offload.XXXXXX") || exit 1
trap 'rm -rf "$top"' EXIT
tmp=$top/run
mkdir "$tmp.dir" || exit 1
status=0
# 4 blocks of 64 tokens: 2 leave the device (2 ring slots stay, prefetch
# 1), or as many as the automatic prefetch's model lets leave (mode auto)
base="--seed $seed --steps 3 --microbatches 2 --layers 4 --tokens 64 --no-bf16"
# (mode nocopy: prefetch 3 keeps all 4 blocks on the device; the captured
# passes then must not join copy streams they never forked)
# (modes default, default-spill: te-demo's own sizes, vdev's unless
# TE_DEVICE=cuda: --offload alone must move blocks to host, and a small
# host budget with a directory must move some to files)
modes="eager callables step eager-spill callables-spill step-spill auto nocopy"
test "x$TE_DEVICE" = xcuda || modes="$modes default default-spill"
for mode in $modes; do
  args=$base
  case $mode in
    eager*) flag=--no-graphs ;;
    callables*) flag= ;;
    step*) flag=--step-graph ;;
  esac
  case $mode in
    default-spill) off="--offload --host-budget 0.03 --offload-dir $tmp.dir"; flag=
      args="--seed $seed" ;;
    *-spill) off="--offload --offload-prefetch 1 --offload-dir $tmp.dir --host-budget 0.3" ;;
    auto) off=--offload; flag=--no-graphs ;;
    nocopy) off="--offload --offload-prefetch 3"; flag= ;;
    default) off=--offload; flag=; args="--seed $seed" ;;
    *) off="--offload --offload-prefetch 1" ;;
  esac
  if ! "$demo" $flag $args $off > "$tmp.$mode" 2>&1; then
    echo "FAIL: te-demo $flag $args $off:"
    cat "$tmp.$mode"
    status=1
    continue
  fi
  if ! grep -q "offload: losses bit-identical" "$tmp.$mode"; then
    echo "FAIL: te-demo $flag $off did not report identical losses:"
    cat "$tmp.$mode"
    status=1
    continue
  fi
  case $mode in
    auto)
      if ! grep -q "offload: prefetch [0-9]* chosen: copies at" "$tmp.$mode"; then
        echo "FAIL: te-demo $off did not report the prefetch it chose:"
        cat "$tmp.$mode"
        status=1
      fi ;;
    default)
      host=$(sed -n 's/.*per step \([0-9.]*\) MiB to host.*/\1/p' "$tmp.$mode")
      saved=$(sed -n 's/.*: saved \([0-9.]*\) MiB.*/\1/p' "$tmp.$mode")
      if ! awk "BEGIN { exit !(${host:-0} > 0 && ${saved:-0} > 0) }"; then
        echo "FAIL: te-demo $off at its default sizes moved nothing to host:"
        cat "$tmp.$mode"
        status=1
      fi ;;
    *-spill)
      files=$(sed -n 's/.*MiB to host and \([0-9.]*\) MiB to files.*/\1/p' "$tmp.$mode")
      if ! awk "BEGIN { exit !(${files:-0} > 0) }"; then
        echo "FAIL: te-demo $flag $off spilled nothing to files:"
        cat "$tmp.$mode"
        status=1
      fi ;;
  esac
  grep "te-demo: offload:" "$tmp.$mode" | sed "s/^/# $mode: /"
done
# te-offload-bench runs its figures (small) without failing
bench="${top_builddir:-.}/tools/te-offload-bench"
if ! "$bench" --mb 1 --iters 1 --dir "$tmp.dir" --layers 4 > "$tmp.bench" 2>&1; then
  echo "FAIL: te-offload-bench:"
  cat "$tmp.bench"
  status=1
else
  sed 's/^/# /' "$tmp.bench"
fi
if ls "$tmp.dir"/te-offload.* > /dev/null 2>&1; then
  echo "FAIL: spill files left behind in $tmp.dir"
  status=1
fi
test $status -eq 0 && echo "ok: te-demo --offload losses equal to the run without, eager, graphed and spilled"
exit $status
