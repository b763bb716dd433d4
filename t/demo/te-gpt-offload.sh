#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# te-gpt-offload.sh -- te-gpt --offload on vdev (issue 31): activation
# offload moves bits, it must not change one.
#  1. a 4-block tiny model (so that with the ring's two slots two blocks
#     leave the device), BF16 and FP8 (delayed), with validation losses
#     every 3 steps (forwards without a backward, which offload must
#     forget): the per-step losses, gradient norms and validation losses
#     equal the run without --offload to the printed digits (exact: the
#     same kernels on the same data), the step graph is captured after
#     offload is attached, and the note says how many saved tensors left
#     and that the sequence's device bytes fell;
#  2. with a host budget smaller than a pass and a spill directory, the
#     same losses again (the files take the rest; skipped with the reason
#     when this machine has no io_uring);
#  3. bad combinations exit 2: --offload-layers without --offload,
#     --offload with --tp.
# Random seed each run (TE_TEST_SEED to repeat).
# Exit 0 pass, 1 fail, 77 skip (TE_DEVICE=cuda without a GPU).
# Environment (from t/Makefile.inc): top_builddir.
demo_tool=te-gpt
. "$(dirname "$0")/demo-lib.sh"
gpt=$demo
tmp=$(mktemp -d "${TMPDIR:-/tmp}/te-gpt-off.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
base="--layers 4 --seed $seed --steps 7 --eval-every 3 --sample 0"

# the step rows: step, loss, val_loss, grad_norm
rows() { grep -E '^ +[0-9]+ ' "$1" | awk '{print $1, $2, $3, $5}'; }

for recipe in none delayed; do
  "$gpt" $base --recipe $recipe > "$tmp/plain.txt" 2> "$tmp/plain.err" ||
    { echo "FAIL: te-gpt $base --recipe $recipe fails"; cat "$tmp/plain.err"; exit 1; }
  "$gpt" $base --recipe $recipe --offload > "$tmp/off.txt" 2> "$tmp/off.err" ||
    { echo "FAIL: te-gpt --offload --recipe $recipe fails"; cat "$tmp/off.err"; exit 1; }
  rows "$tmp/plain.txt" > "$tmp/plain.rows"
  rows "$tmp/off.txt" > "$tmp/off.rows"
  n=$(wc -l < "$tmp/plain.rows")
  [ "$n" -eq 7 ] || { echo "FAIL: $recipe: $n step rows, not 7"; fail=1; }
  if cmp -s "$tmp/plain.rows" "$tmp/off.rows"; then
    echo "ok: $recipe: --offload gives the same losses, gradient norms and validation losses"
  else
    echo "FAIL: $recipe: --offload changes the steps (step loss val_loss grad_norm):"
    diff "$tmp/plain.rows" "$tmp/off.rows" | sed 's/^/  | /'
    fail=1
  fi
  note=$(grep '^# offload: after step 2' "$tmp/off.txt")
  echo "# $recipe: $note"
  left=$(echo "$note" | sed -n 's/.*(\([0-9]*\) leave the device.*/\1/p')
  moved=$(echo "$note" | sed -n 's/.*, \([0-9]*\) saved tensors offloaded.*/\1/p')
  before=$(echo "$note" | sed -n 's/.*sequence \([0-9.]*\) -> .*/\1/p')
  after=$(echo "$note" | sed -n 's/.*sequence [0-9.]* -> \([0-9.]*\) MiB.*/\1/p')
  [ "${left:-0}" -eq 2 ] || { echo "FAIL: $recipe: $left blocks leave the device, not 2"; fail=1; }
  [ "${moved:-0}" -gt 0 ] || { echo "FAIL: $recipe: no saved tensor offloaded"; fail=1; }
  awk -v b="$before" -v a="$after" 'BEGIN { exit !(b > 0 && a < b) }' ||
    { echo "FAIL: $recipe: the sequence's device bytes did not fall ($before -> $after MiB)"; fail=1; }
  grep -q '^# step graph:' "$tmp/off.txt" ||
    { echo "FAIL: $recipe: no step graph with --offload"; fail=1; }
done

# 2. spilling past a small host budget
"$gpt" $base --offload --host-budget 0.25 --offload-dir "$tmp" > "$tmp/spill.txt" 2> "$tmp/spill.err" ||
  { echo "FAIL: te-gpt --offload --host-budget 0.25 --offload-dir fails"; cat "$tmp/spill.err"; fail=1; }
"$gpt" $base > "$tmp/plain.txt" 2> /dev/null
rows "$tmp/plain.txt" > "$tmp/plain.rows"
rows "$tmp/spill.txt" > "$tmp/spill.rows"
if grep -q '0.0 to files' "$tmp/spill.txt"; then
  echo "# spill: nothing went to files: $(grep '^# offload: after' "$tmp/spill.txt")"
  grep -q 'io_uring\|uring' "$tmp/spill.txt" "$tmp/spill.err" ||
    { echo "FAIL: the small budget spilled nothing and says no reason"; fail=1; }
fi
cmp -s "$tmp/plain.rows" "$tmp/spill.rows" && echo "ok: spilling to files gives the same steps" ||
  { echo "FAIL: spilling changes the steps:"; diff "$tmp/plain.rows" "$tmp/spill.rows" | sed 's/^/  | /'; fail=1; }

# 3. bad combinations
for bad in "--offload-layers 2" "--offload --tp 2" "--host-budget 8"; do
  "$gpt" $bad --steps 1 > "$tmp/bad.out" 2> "$tmp/bad.err"
  rc=$?
  [ $rc -eq 2 ] && grep -q 'offload' "$tmp/bad.err" ||
    { echo "FAIL: te-gpt $bad exits $rc, want 2 with a message naming offload"; cat "$tmp/bad.err"; fail=1; }
done
[ $fail -eq 0 ] && echo "PASS: te-gpt --offload"
exit $fail
