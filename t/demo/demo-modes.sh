#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# demo-modes.sh -- te-demo's three ways of running a step (eager launches,
# graphed callables, one graph per step with AdamW's step and learning rate
# on the device) take the same steps: every printed loss, FP8 and BF16, is
# the same to the last digit.  A callable whose warmup races the caller's
# work, or a graph that replays stale optimizer values, shows up as a
# different loss.  Each run is also te-demo's own check (losses go down,
# FP8 stays near BF16).  Random seed each run (TE_TEST_SEED to repeat).
# Exit 0: all equal; 77: skip (TE_DEVICE=cuda without a GPU); 1: a run
# failed or the losses differ.
# Environment (from t/Makefile.inc): top_builddir.

# $demo, the skip under TE_DEVICE=cuda without a GPU, $seed
. "$(dirname "$0")/demo-lib.sh"
tmp=${TMPDIR:-/tmp}/te-demo-modes.$$
trap 'rm -f "$tmp".*' EXIT
status=0
for mode in eager callables step; do
  case $mode in
    eager) flag=--no-graphs ;;
    callables) flag= ;;
    step) flag=--step-graph ;;
  esac
  # FP8 and BF16, 3 microbatches so that the cached FP8 weights are reused
  if ! "$demo" $flag --seed "$seed" --steps 5 --microbatches 3 --layers 3 > "$tmp.$mode" 2>&1; then
    echo "FAIL: te-demo $flag --seed $seed:"
    cat "$tmp.$mode"
    status=1
    continue
  fi
  sed -n 's/^ *\(fp8\|bf16\) *step *\([0-9]*\)\/[0-9]* *loss \([0-9.e+-]*\).*/\1 \2 \3/p' \
    "$tmp.$mode" > "$tmp.$mode.loss"
  if test "$(wc -l < "$tmp.$mode.loss")" -ne 10; then
    echo "FAIL: te-demo $flag printed $(wc -l < "$tmp.$mode.loss") step losses, want 10:"
    cat "$tmp.$mode"
    status=1
  fi
done
test $status -eq 0 || exit 1
for mode in callables step; do
  if ! cmp -s "$tmp.eager.loss" "$tmp.$mode.loss"; then
    echo "FAIL: the $mode losses differ from the eager ones (seed $seed):"
    paste "$tmp.eager.loss" "$tmp.$mode.loss"
    exit 1
  fi
done
echo "ok: eager, graphed callables and the step graph print the same 10 losses"
cat "$tmp.eager.loss"
exit 0
