#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# demo-tp.sh -- te-demo --tp 2 and --tp 4: the MLP blocks split over 2 and
# 4 ranks (forked processes; vdev in CI), fused (the row-parallel sum,
# residual add and next RMSNorm in one libtecomm call) and the unfused
# baseline, FP8 (delayed scaling, amaxes reduced across the ranks) and
# BF16, each train with losses that stay within te-demo's tolerance
# (0.05 of the first loss) of the same model run in one process.  te-demo
# checks that itself; this script checks it again from the printed losses,
# so a te-demo whose check broke fails here too, and checks that the
# plan names the fused group.  Random seed each run (TE_TEST_SEED to repeat).
# Exit 0: ok; 77: skip (TE_DEVICE=cuda with fewer GPUs than ranks);
# 1: a run failed or a loss left the one-process curve.
# Environment (from t/Makefile.inc): top_builddir.

demo="${top_builddir:-.}/tools/te-demo"
info="${top_builddir:-.}/tools/te-info"
if test ! -x "$demo"; then
  echo "FAIL: $demo not built"
  exit 1
fi
if test "x$TE_DEVICE" = xcuda && ! "$info" > /dev/null 2>&1; then
  echo "SKIP: TE_DEVICE=cuda but no GPU can be used (te-info fails)"
  exit 77
fi
: "${TECORE_VDEV_DEVICES:=8}"
export TECORE_VDEV_DEVICES
seed=${TE_TEST_SEED:-$(od -An -N2 -tu2 /dev/urandom | tr -d ' ')}
seed=$((seed % 100000 + 1))
echo "# seed $seed (TE_TEST_SEED=$seed reproduces this run)"
tmp=${TMPDIR:-/tmp}/te-demo-tp.$$
trap 'rm -f "$tmp".*' EXIT
status=0
gpus=
if test "x$TE_DEVICE" = xcuda && command -v nvidia-smi > /dev/null 2>&1; then
  gpus=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU')
fi
ran=0
for n in 2 4; do
  if test -n "$gpus" && test "$gpus" -lt $n; then
    echo "# --tp $n needs $n GPUs, this machine has $gpus: not run"
    continue
  fi
  ran=$((ran + 1))
  # small on every backend (on cuda too: a check, not a benchmark)
  if ! "$demo" --tp $n --seed "$seed" --steps 5 --layers 3 --hidden 64 --ffn 256 --tokens 16 \
      > "$tmp.$n" 2>&1; then
    echo "FAIL: te-demo --tp $n --seed $seed:"
    cat "$tmp.$n"
    status=1
    continue
  fi
  # per step: the one-process losses ("fp8 step"), then the ranks' runs
  # ("fp8/fused step", "fp8/baseline step", the same for bf16)
  sed -n 's/^ *\(fp8\|bf16\)\(\/[a-z]*\)\{0,1\} *step *\([0-9]*\)\/[0-9]* *loss \([0-9.e+-]*\).*/\1\2 \3 \4/p' \
    "$tmp.$n" > "$tmp.$n.loss"
  if ! awk -v n=$n '
    { run[$1] = 1; loss[$1, $2] = $3; if ($2 > steps) steps = $2 }
    END {
      bad = 0; cnt = 0
      split("fp8/fused fp8/baseline bf16/fused bf16/baseline", rs, " ")
      for (i = 1; i <= 4; i++) {
        r = rs[i]; p = r; sub(/\/.*/, "", p)
        if (!(r in run) || !(p in run)) { print "FAIL: --tp " n ": no losses of " r " or " p; bad = 1; continue }
        for (k = 1; k <= steps; k++) {
          d = loss[r, k] - loss[p, k]; if (d < 0) d = -d
          cnt++
          if (!(d <= 0.05 * loss[p, 1])) {
            printf "FAIL: --tp %d %s step %d: loss %s, one process %s (tolerance %g)\n", n, r, k, loss[r, k], loss[p, k], 0.05 * loss[p, 1]
            bad = 1
          }
        }
      }
      if (!bad) printf "ok: --tp %d: %d losses of the fused and baseline runs within 0.05 of the first loss of the one-process run\n", n, cnt
      exit bad
    }' "$tmp.$n.loss"; then
    cat "$tmp.$n"
    status=1
  fi
  # (FP8: the variant that writes the next Linear's FP8 input)
  if ! grep -q 'plan forward:.*tp_reduce+add+rmsnorm\(+tp_copy+fp8\)\{0,1\}\[' "$tmp.$n"; then
    echo "FAIL: --tp $n: no fused tp_reduce+add+rmsnorm group in the printed plans:"
    grep 'plan' "$tmp.$n"
    status=1
  fi
  grep 'step time' "$tmp.$n"
done
test $ran -eq 0 && exit 77
exit $status
