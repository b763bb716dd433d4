#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# demo-order.sh -- te-demo's FP8/BF16 step-time ratio is fair to the order
# the runs went in.  FP8 always trained first and BF16 second, and at
# small sizes (where both run the same BF16 kernels) the run that went
# second looked 1-2% faster.  te-demo now trains both again in the
# reversed order and takes each precision's median step over both
# positions.  Here: the four runs' step lines are there (fp8, bf16, then
# bf16(2), fp8(2)); the per-order medians and the pooled medians that
# te-demo prints agree with the medians of the step times it printed
# (steps 2..N, to the printed rounding, 0.0015 ms); the ratio is the
# pooled BF16 median over the pooled FP8 one (to 0.006); and --one-order
# runs two trainings, says FP8 ran first, and takes its ratio from those
# two runs.  Random seed each run (TE_TEST_SEED to repeat).
# Exit 0: all hold; 77: skip (TE_DEVICE=cuda without a GPU); 1: otherwise.
# Environment (from t/Makefile.inc): top_builddir.

# $demo, the skip under TE_DEVICE=cuda without a GPU, $seed
. "$(dirname "$0")/demo-lib.sh"
tmp=${TMPDIR:-/tmp}/te-demo-order.$$
trap 'rm -f "$tmp".*' EXIT
status=0

# The step times te-demo printed, against the medians it printed.  awk
# reads the whole output; prints what disagrees and exits 1.
check_medians() {
  awk -v orders="$2" '
    function med(run,   n, i, j, t, a) {   # median of the steps >= 2 of run(s)
      n = 0
      for (i = 1; i <= nrun; i++) {
        if (index(" " run " ", " " name[i] " ") == 0) continue
        for (j = 2; j <= cnt[name[i]]; j++) a[++n] = ms[name[i], j]
      }
      for (i = 2; i <= n; i++) {   # insertion sort: a few tens of values
        t = a[i]
        for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]
        a[j + 1] = t
      }
      if (n == 0) return -1
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    function near(what, got, want, tol) {
      if (got - want > tol || want - got > tol) {
        printf "FAIL: %s: te-demo printed %s, the step times give %.4f\n", what, got, want
        bad = 1
      }
    }
    $2 == "step" && $4 == "loss" && $7 == "ms" {   # "  fp8  step   3/8  loss X   T ms ..."
      if (!($1 in cnt)) name[++nrun] = $1
      split($3, s, "/")
      cnt[$1] = s[1]
      ms[$1, s[1]] = $6
    }
    /^te-demo: fp8 vs bf16 by run order/ {
      byorder = 1
      sub(/.*fp8 then bf16 /, ""); fb1 = $1; bb1 = $3
      sub(/.*bf16 then fp8 /, ""); bb2 = $1; fb2 = $3
    }
    /^te-demo: fp8 vs bf16: loss curves/ {
      line = $0
      sub(/.*fp8 step /, ""); ratio = $1; sub(/x$/, "", ratio)
      sub(/.*by the median step \(/, ""); pf = $1; pb = $3
      order = $0; sub(/^[^,]*, /, "", order); sub(/\).*/, "", order)
    }
    END {
      want = orders == 2 ? "fp8 bf16 bf16(2) fp8(2)" : "fp8 bf16"
      got = ""
      for (i = 1; i <= nrun; i++) got = got (i > 1 ? " " : "") name[i]
      if (got != want) { printf "FAIL: runs with step lines: \"%s\", want \"%s\"\n", got, want; bad = 1 }
      if (line == "") { print "FAIL: no fp8 vs bf16 line"; exit 1 }
      if (orders == 2) {
        if (!byorder) { print "FAIL: no by-run-order line"; exit 1 }
        near("fp8 then bf16: fp8", fb1, med("fp8"), 0.0015)
        near("fp8 then bf16: bf16", bb1, med("bf16"), 0.0015)
        near("bf16 then fp8: bf16", bb2, med("bf16(2)"), 0.0015)
        near("bf16 then fp8: fp8", fb2, med("fp8(2)"), 0.0015)
        near("fp8 over both orders", pf, med("fp8 fp8(2)"), 0.0015)
        near("bf16 over both orders", pb, med("bf16 bf16(2)"), 0.0015)
        if (order != "both run orders") { printf "FAIL: the ratio says \"%s\"\n", order; bad = 1 }
      } else {
        if (byorder) { print "FAIL: --one-order printed a by-run-order line"; bad = 1 }
        near("fp8 (one order)", pf, med("fp8"), 0.0015)
        near("bf16 (one order)", pb, med("bf16"), 0.0015)
        if (order != "fp8 ran first") { printf "FAIL: the ratio says \"%s\"\n", order; bad = 1 }
      }
      near("the ratio", ratio, pb / pf, 0.006)
      if (bad) print "  in: " line
      exit bad
    }' "$1"
}

for order in 2 1; do
  flag=
  test $order = 1 && flag=--one-order
  if ! "$demo" $flag --seed "$seed" --steps 6 --layers 2 > "$tmp.$order" 2>&1; then
    echo "FAIL: te-demo $flag --seed $seed:"
    cat "$tmp.$order"
    status=1
    continue
  fi
  if ! check_medians "$tmp.$order" $order; then
    echo "FAIL: te-demo $flag --seed $seed: the figures above disagree; its output:"
    cat "$tmp.$order"
    status=1
    continue
  fi
  grep "^te-demo: fp8 vs bf16" "$tmp.$order" | sed "s/^/# $order order(s): /"
done
test $status -eq 0 && echo "ok: te-demo's FP8/BF16 medians are the printed steps', over both run orders"
exit $status
