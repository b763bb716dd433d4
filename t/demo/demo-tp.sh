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
# plan names the fused group and that the forward alone ran on the
# inference twin, whose output matched the training forward's.  --tp 2 also runs --tp-profile (times mean
# nothing on vdev, the code path is checked): per precision a table whose
# collective groups per step are the plan's (fused FP8 forward: the first
# tp_copy, a fused call per block boundary that takes the next tp_copy in,
# the last tp_reduce; fused BF16 keeps the tp_copies apart; baseline: a
# tp_copy and a tp_reduce per block; backward: a sum and an alias per
# block, both), each part within its phase, the phases adding up to the
# step, the group table naming the fused call (4 a step, the fused variant
# only), and the Amdahl bounds >= 1.  --tp 4 also runs the third variant,
# the baseline with the fuser's backward overlap (--tp-base-overlap), whose
# losses must be within the tolerance too (the fused variant overlaps by
# default: both overlap paths are checked).  --tp 2 --sp (sequence
# parallel: norms and residuals on each rank's half of the tokens, an
# all-gather before fc1 and a reduce-scatter after fc2) on the same model
# and seed gives --tp 2's baseline losses of the same precision within
# 1e-4 of the first loss on vdev, 1e-3 on cuda and for the fused BF16
# variant (below) (the same model: what may
# differ is the order of float sums -- the reduce-scatter's against the
# allreduce's, the gamma gradients summed from the ranks' shards, the
# loss from the ranks' shares; on vdev the printed losses are the same.
# Gamma gradients left unsummed move them by ~2.5e-4 of the first loss
# by step 2), its plans naming both collectives, the fused bf16 one the
# overlapped GEMMs (libtecomm's allgather+linear+gelu, linear+reduce_scatter:
# the Linears' biases and GELU taken in).  Random seed each run (TE_TEST_SEED to repeat).
# Exit 0: ok; 77: skip (TE_DEVICE=cuda with fewer GPUs than ranks);
# 1: a run failed or a loss left the one-process curve.
# Environment (from t/Makefile.inc): top_builddir.

. "$(dirname "$0")/demo-lib.sh"
: "${TECORE_VDEV_DEVICES:=8}"
export TECORE_VDEV_DEVICES
tmp=${TMPDIR:-/tmp}/te-demo-tp.$$
trap 'rm -f "$tmp".*' EXIT
status=0
gpus=
if test "x$TE_DEVICE" = xcuda && command -v nvidia-smi > /dev/null 2>&1; then
  gpus=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU')
fi
# the --tp options' misuse: refused with status 2 and a reason
for bad in "--tp-profile" "--tp-bwd-comm nccl" "--tp 2 --tp-bwd-comm sideways" "--tp-base-overlap" \
    "--sp" "--tp 3 --sp --ffn 192 -q"; do
  rc=0
  # shellcheck disable=SC2086
  "$demo" $bad > "$tmp.cli" 2>&1 || rc=$?
  if test $rc -ne 2 || ! grep -q 'tp' "$tmp.cli"; then
    echo "FAIL: te-demo $bad: exit $rc (want 2, the option named):"
    cat "$tmp.cli"
    status=1
  fi
done
# without NCCL (TECOMM_NCCL=0) the NCCL options are refused with the reason
for bad in "--tp 2 --tp-bwd-comm nccl" "--tp 2 --tp-comm nccl"; do
  rc=0
  # shellcheck disable=SC2086
  TECOMM_NCCL=0 "$demo" $bad > "$tmp.cli" 2>&1 || rc=$?
  if test $rc -ne 2 || ! grep -q 'no NCCL here (.*TECOMM_NCCL=0' "$tmp.cli"; then
    echo "FAIL: TECOMM_NCCL=0 te-demo $bad: exit $rc (want 2: no NCCL, and why):"
    cat "$tmp.cli"
    status=1
  fi
done
ran=0
for n in 2 4; do
  if test -n "$gpus" && test "$gpus" -lt $n; then
    echo "# --tp $n needs $n GPUs, this machine has $gpus: not run"
    continue
  fi
  ran=$((ran + 1))
  prof=
  test $n -eq 2 && prof=--tp-profile
  test $n -eq 4 && prof=--tp-base-overlap
  # small on every backend (on cuda too: a check, not a benchmark).  FP8
  # Linears on every backend: cuda's default keeps GEMMs this small in
  # BF16 (TECORE_OPS_FP8_MIN_MNK), and the plan checks below expect the
  # FP8 plan vdev runs
  if ! TECORE_OPS_FP8_MIN_MNK=0 "$demo" --tp $n --seed "$seed" --steps 5 --layers 3 --hidden 64 --ffn 256 --tokens 16 \
      $prof > "$tmp.$n" 2>&1; then
    echo "FAIL: te-demo --tp $n --seed $seed:"
    cat "$tmp.$n"
    status=1
    continue
  fi
  # per step: the one-process losses ("fp8 step"), then the ranks' runs
  # ("fp8/fused step", "fp8/baseline step", the same for bf16)
  sed -n 's/^ *\(fp8\|bf16\)\(\/[a-z+]*\)\{0,1\} *step *\([0-9]*\)\/[0-9]* *loss \([0-9.e+-]*\).*/\1\2 \3 \4/p' \
    "$tmp.$n" > "$tmp.$n.loss"
  runs="fp8/fused fp8/baseline bf16/fused bf16/baseline"
  test "$prof" = --tp-base-overlap && runs="$runs fp8/baseline+overlap bf16/baseline+overlap"
  if ! awk -v n=$n -v runs="$runs" '
    { run[$1] = 1; loss[$1, $2] = $3; if ($2 > steps) steps = $2 }
    END {
      bad = 0; cnt = 0
      nr = split(runs, rs, " ")
      for (i = 1; i <= nr; i++) {
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
      if (!bad) printf "ok: --tp %d: %d losses of the %s runs within 0.05 of the first loss of the one-process run\n", n, cnt, runs
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
  # the forward alone is the inference twin's (TECORE_SEQ_INFERENCE), its
  # output checked against the training forward by te-demo itself: on vdev
  # the same bits, the scales copied (every variant and precision)
  want="inference twin (copied scales) vs training forward: same bits"
  test "x$TE_DEVICE" = xcuda && want="inference twin (copied scales) vs training forward"
  twins=$(grep -c "$want" "$tmp.$n")
  if test "$twins" -lt 4; then
    echo "FAIL: --tp $n: $twins lines \"$want\", want one per variant and precision:"
    grep 'inference twin' "$tmp.$n"
    status=1
  fi
  grep 'step time' "$tmp.$n"
  test "$prof" = --tp-profile || continue
  # 3 layers, 2 microbatches: groups with a collective per step
  if ! awk '
    function num(s) { return s + 0 }
    /profile: eager pass/ { inp = 1; np++; sf = 0; sb = 0; prec = $4; next }
    inp && /^  (forward|backward|loss|scale update|other)/ {
      n = NF; f = num($(n - 1)); b = num($n); sf += f; sb += b
      ph = $1; pf = f; pb = b; next }
    inp && /in collectives/ {
      match($0, /\([0-9]+ \/ [0-9]+ groups\)/)
      split(substr($0, RSTART + 1, RLENGTH - 2), g, /[ \/]+/)
      # FP8 fuses the next tp_copy into the call too (+tp_copy+fp8)
      want_f = ph != "forward" ? 12 : prec == "fp8" ? 8 : 12; want_b = 12
      if (g[1] != want_f || g[2] != want_b) { printf "FAIL: %s: %s / %s groups with a collective, want %d / %d\n", ph, g[1], g[2], want_f, want_b; bad = 1 }
      cf = num($(NF - 1)); cb = num($NF)
      if (cf < 0 || cb < 0 || cf > pf * 1.0001 + 0.002 || cb > pb * 1.0001 + 0.002) { printf "FAIL: %s: collectives %g / %g ms outside the phase (%g / %g ms)\n", ph, cf, cb, pf, pb; bad = 1 }
      next }
    inp && /^  step / {
      f = num($(NF - 1)); b = num($NF)
      if (f - sf > 0.01 + 1e-3 * f || sf - f > 0.01 + 1e-3 * f || b - sb > 0.01 + 1e-3 * b || sb - b > 0.01 + 1e-3 * b) { printf "FAIL: step %g / %g ms, the phases add up to %g / %g\n", f, b, sf, sb; bad = 1 }
      next }
    inp && /comm share of the step/ { inp = 0; shares++; next }
    /^  \* fwd tp_reduce\+add_extra_input\+make_extra_output\+rmsnorm/ {
      # the fused call: 2 block boundaries x 2 microbatches, the fused variant only
      fusedrows++
      if ($(NF - 1) != "4x" || $NF != "-") { print "FAIL: want 4 fused calls a step, none in the baseline: " $0; bad = 1 }
      next }
    /with comm at zero cost the step would be at most/ {
      bounds++
      s = $0; while (match(s, /[0-9.]+x/)) { v = substr(s, RSTART, RLENGTH - 1) + 0; if (v < 0.9999) { print "FAIL: an Amdahl bound below 1: " $0; bad = 1 } s = substr(s, RSTART + RLENGTH) } }
    END {
      if (fusedrows != 2) { printf "FAIL: %d group tables name the fused call, want 2\n", fusedrows; bad = 1 }
      if (np != 2 || shares != 2 || bounds != 2) { printf "FAIL: --tp-profile printed %d tables, %d comm shares, %d bounds; want 2 each (fp8, bf16)\n", np, shares, bounds; bad = 1 }
      if (!bad) print "ok: --tp 2 --tp-profile: collective groups as the plans say, parts within phases, phases adding up to the step"
      exit bad
    }' "$tmp.$n"; then
    sed -n '/profile:/,/forward .*x (baseline)/p' "$tmp.$n"
    status=1
  fi
done
# --tp 2 --sp against --tp 2 (the loop's run of the same model and seed)
sptol=0.0001
test "x$TE_DEVICE" = xcuda && sptol=0.001
# the fused BF16 variant's backward runs fc2's dgrad with fc1's GELU in
# its epilogue and the gather inside (allgather+dgrad+dgelu): fc1 then
# sums its bias gradient in F32 from the BF16 products, where the
# baseline's dgrad+dgelu+dbias rounds the epilogue's float sums to BF16 --
# a few BF16 ulps of each sum, which AdamW's normalized steps carry into
# the losses (1.8e-4 of the first loss seen by step 5)
spdtol=0.001
if test -s "$tmp.2.loss"; then
  if ! TECORE_OPS_FP8_MIN_MNK=0 "$demo" --tp 2 --sp --seed "$seed" --steps 5 --layers 3 --hidden 64 \
      --ffn 256 --tokens 16 > "$tmp.sp" 2>&1; then
    echo "FAIL: te-demo --tp 2 --sp --seed $seed:"
    cat "$tmp.sp"
    status=1
  else
    sed -n 's/^ *\(fp8\|bf16\)\(\/[a-z+]*\) *step *\([0-9]*\)\/[0-9]* *loss \([0-9.e+-]*\).*/sp \1\2 \3 \4/p' \
      "$tmp.sp" > "$tmp.sp.loss"
    if ! cat "$tmp.2.loss" "$tmp.sp.loss" | awk -v tol=$sptol -v dtol=$spdtol '
      $1 != "sp" { if ($1 ~ /\/baseline$/) { p = $1; sub(/\/.*/, "", p); tp[p, $2] = $3 } next }
      { p = $2; sub(/\/.*/, "", p); cnt++
        if (!((p, $3) in tp)) { print "FAIL: --tp 2 --sp " $2 " step " $3 ": no --tp 2 baseline loss to compare"; bad = 1; next }
        d = $4 - tp[p, $3]; if (d < 0) d = -d
        t = $2 == "bf16/fused" ? dtol : tol
        if (!(d <= t * tp[p, 1])) { printf "FAIL: --tp 2 --sp %s step %d: loss %s, --tp 2 %s baseline %s (tolerance %g)\n", $2, $3, $4, p, tp[p, $3], t * tp[p, 1]; bad = 1 } }
      END {
        if (cnt != 20) { printf "FAIL: --tp 2 --sp: %d losses, want 20 (fused and baseline, fp8 and bf16, 5 steps)\n", cnt; bad = 1 }
        if (!bad) printf "ok: --tp 2 --sp: %d losses within %g (fused bf16: %g) of the first loss of --tp 2 (baseline, same precision)\n", cnt, tol, dtol
        exit bad
      }'; then
      cat "$tmp.sp"
      status=1
    fi
    if ! grep -q 'plan forward: .*rmsnorm\[[0-9]*\] | allgather\[.*reduce_scatter\[' "$tmp.sp" ||
        ! grep -q 'plan backward: .*allgather(side)\[' "$tmp.sp"; then
      echo "FAIL: --tp 2 --sp: the plans do not show the all-gather and reduce-scatter (and the backward overlap):"
      grep 'plan' "$tmp.sp"
      status=1
    fi
    # the Linears have biases and a GELU: the fused bf16 variant overlaps both,
    # and the backward's gather of fc2's output gradient with the GELU's
    # backward in that dgrad's epilogue (FP8: the E5M2 codes gathered)
    if ! grep -q 'plan forward: .*allgather+linear+gelu\[.*linear+reduce_scatter' "$tmp.sp"; then
      echo "FAIL: --tp 2 --sp: no forward plan shows allgather+linear+gelu and linear+reduce_scatter:"
      grep 'plan forward' "$tmp.sp"
      status=1
    fi
    if ! grep -q 'plan backward: .*allgather+dgrad+dgelu\[' "$tmp.sp" ||
        ! grep -q 'plan backward: .*allgather+dgrad8+dbias\[' "$tmp.sp"; then
      echo "FAIL: --tp 2 --sp: no backward plan shows allgather+dgrad+dgelu (bf16) and allgather+dgrad8+dbias (fp8):"
      grep 'plan backward' "$tmp.sp"
      status=1
    fi
  fi
fi
# the fused variant's backward sums on NCCL (libnccl.so.2 on cuda, vdev's
# NCCL on vdev): te-demo checks its losses against the one-process run
if test $ran -gt 0; then
  if ! TECORE_OPS_FP8_MIN_MNK=0 "$demo" --tp 2 --tp-bwd-comm nccl --seed "$seed" --steps 3 --layers 2 \
      --hidden 64 --ffn 256 --tokens 16 -q > "$tmp.bwd" 2>&1 ||
      ! grep -q 'backward sums: nccl' "$tmp.bwd"; then
    echo "FAIL: te-demo --tp 2 --tp-bwd-comm nccl:"
    cat "$tmp.bwd"
    status=1
  fi
fi
test $ran -eq 0 && exit 77
exit $status
