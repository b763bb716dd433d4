#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# te-gpt-memory.sh -- te-gpt's memory savers on vdev (issue 31): each
# moves or reuses bytes, none may change a bit of the training.
#  1. a 4-block tiny model (so that with the ring's two slots two blocks
#     leave the device), BF16 and FP8 (delayed), with validation losses
#     every 3 steps (forwards without a backward, which offload must
#     forget): the per-step losses, gradient norms and validation losses
#     equal the run without --offload to the printed digits (exact: the
#     same kernels on the same data), the step graph is captured after
#     offload is attached, and the note says how many saved tensors left
#     and that the sequence's device bytes fell;
#     with --offload-prefetch 1 offload is attached before the first
#     step, and the steps are the same again;
#  2. with a host budget smaller than a pass and a spill directory, the
#     same losses again (the files take the rest; skipped with the reason
#     when this machine has no io_uring);
#  3. bad combinations exit 2: --offload-layers without --offload,
#     --offload with --tp;
#  4. the LM head's FP8 gradient copies one at a time in one buffer
#     (TECORE_OPS_DY8_ONE_COPY, the default) against both at once, with a
#     vocabulary of 4096 (the head's output 16x the MLP's), delayed,
#     current and block scaling, every Linear
#     in FP8 however small (TECORE_OPS_FP8_MIN_MNK=0: on cuda the tiny
#     model's would run in BF16 and need no FP8 gradient at all), the
#     gradient in the fuser's buffer (TECORE_OPS_FUSION_OFF=grad_fp8_given:
#     with the codes over the logits it keeps none; te-gpt.sh): the same
#     steps, and the note's FP8 buffers smaller by the head's gradient
#     less the MLP's;
#  5. the weights' columnwise FP8 copies made by the backward and
#     zero_grad without a fill, against the old ways (TECORE_OPS_W8_COL_KEEP
#     and TECORE_OPS_ZERO_GRAD_FILL): the same saved bytes, less memory.
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

# a given prefetch: attached before the first step (no plain steps)
"$gpt" $base --offload --offload-prefetch 1 > "$tmp/pf.txt" 2> "$tmp/pf.err" ||
  { echo "FAIL: te-gpt --offload --offload-prefetch 1 fails"; cat "$tmp/pf.err"; fail=1; }
"$gpt" $base > "$tmp/plain.txt" 2> /dev/null
rows "$tmp/plain.txt" > "$tmp/plain.rows"
rows "$tmp/pf.txt" > "$tmp/pf.rows"
grep -q '^# offload: after step 0, .*prefetch 1, given' "$tmp/pf.txt" ||
  { echo "FAIL: --offload-prefetch 1 did not attach before step 1:"; grep offload "$tmp/pf.txt"; fail=1; }
cmp -s "$tmp/plain.rows" "$tmp/pf.rows" && echo "ok: offload from step 1 gives the same steps" ||
  { echo "FAIL: offload from step 1 changes the steps:"; diff "$tmp/plain.rows" "$tmp/pf.rows"; fail=1; }

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
# 4. one FP8 copy of the LM head's gradient at a time
for recipe in delayed current block; do
  for v in 1 0; do
    TECORE_OPS_FUSION_OFF=grad_fp8_given TECORE_OPS_FP8_MIN_MNK=0 TECORE_OPS_DY8_ONE_COPY=$v \
      "$gpt" --seed "$seed" --synthetic --vocab 4096 --recipe $recipe \
      --steps 4 --sample 0 --eval-every 0 > "$tmp/dy$v.txt" 2> "$tmp/dy$v.err" ||
      { echo "FAIL: TECORE_OPS_DY8_ONE_COPY=$v te-gpt --recipe $recipe fails"; cat "$tmp/dy$v.err"; fail=1; }
    rows "$tmp/dy$v.txt" > "$tmp/dy$v.rows"
  done
  if cmp -s "$tmp/dy1.rows" "$tmp/dy0.rows" && [ "$(wc -l < "$tmp/dy1.rows")" -eq 4 ]; then
    echo "ok: $recipe: the LM head's FP8 gradient one copy at a time gives the same steps"
  else
    echo "FAIL: $recipe: one copy at a time changes the steps:"; diff "$tmp/dy0.rows" "$tmp/dy1.rows"; fail=1
  fi
  w1=$(sed -n 's/.*FP8 copies and workspaces \([0-9.]*\).*/\1/p' "$tmp/dy1.txt")
  w0=$(sed -n 's/.*FP8 copies and workspaces \([0-9.]*\).*/\1/p' "$tmp/dy0.txt")
  # the head's gradient, 4 x 64 tokens x 4096 bytes = 1 MiB, less the
  # MLP's that the columnwise buffer still holds (64 KiB)
  awk -v a="$w1" -v b="$w0" 'BEGIN { exit !(a + 0.9 <= b) }' ||
    { echo "FAIL: $recipe: FP8 buffers $w1 MiB one copy at a time, $w0 both at once"; fail=1; }
done
# 5. the weights' columnwise FP8 copies made by the backward in one shared
#    buffer (TECORE_OPS_W8_COL_KEEP=0, the default) and the gradients
#    marked instead of filled by a captured zero_grad
#    (TECORE_OPS_ZERO_GRAD_FILL=0), against the old layout and fill: two
#    microbatches a step (the first contribution stored, the second added),
#    the step graph from step 2, BF16, delayed, current and block scaling
#    (block: the codes and the grid of 128x128 scales transposed against
#    the copy the forward quantizes from the weight, the same bytes); the
#    saved weights and AdamW state are the same bytes (both runs with the
#    forward quantizing the weights, TECORE_OPS_FUSION_OFF=weight_fp8: the
#    kept columnwise copy rules AdamW's FP8 weights out, and those leave
#    the next step's weight amax pending in the saved FP8 state -- the same
#    training, other bytes), and the FP8
#    buffers (the JSON's mem_fp8_other_mib, in bytes) fall by every
#    weight's bytes but those of the largest one the shared buffer must
#    hold: hidden 128, ffn 256, 2 blocks, vocab 256: (3+1+2+2) x 128 x 128
#    x 2 + 256 x 128 - 3 x 128 x 128 (qkv's) = 245760 bytes.  And with vocab
#    1024 at hidden 64 the LM head's gradient (256 tokens x 1024) exceeds
#    the columnwise gradient buffer (256 x 256, fc1's) while its weight
#    (64 KiB) fits there: the head's columnwise copy goes to that buffer
#    (te_w8_in_dy8), the shared one is fc1's 16 KiB: 12 x 64 x 64 x 2 +
#    65536 - 16384 = 147456 bytes.  Block scaling keeps each weight's grid
#    of columnwise scales too (256-byte allocations, one a weight): up to
#    4 KiB more.
for shape in "--hidden 128:245760" "--vocab 1024:147456"; do
 opt=${shape%%:*} want=${shape#*:}
 for recipe in none delayed current block; do
  for v in 1 0; do
    rm -rf "$tmp/ck$v"
    TECORE_OPS_FUSION_OFF=weight_fp8 \
    TECORE_OPS_FP8_MIN_MNK=0 TECORE_OPS_W8_COL_KEEP=$v TECORE_OPS_ZERO_GRAD_FILL=$v "$gpt" \
      --seed "$seed" $opt --recipe $recipe --accum 2 --steps 4 --sample 0 \
      --eval-every 0 --save "$tmp/ck$v" > "$tmp/w$v.txt" 2> "$tmp/w$v.err" ||
      { echo "FAIL: TECORE_OPS_W8_COL_KEEP=$v te-gpt --recipe $recipe fails"; cat "$tmp/w$v.err"; fail=1; }
    rows "$tmp/w$v.txt" > "$tmp/w$v.rows"
  done
  same=1
  for f in model.safetensors optimizer.safetensors; do
    cmp -s "$tmp/ck1/$f" "$tmp/ck0/$f" || same=0
  done
  if [ $same -eq 1 ] && cmp -s "$tmp/w1.rows" "$tmp/w0.rows" && [ "$(wc -l < "$tmp/w1.rows")" -eq 4 ]
  then
    echo "ok: $opt, $recipe: weights' columnwise copies in the backward and zero_grad without a fill give the same bytes"
  else
    echo "FAIL: $opt, $recipe: the new layout or zero_grad changes the training:"; diff "$tmp/w1.rows" "$tmp/w0.rows"; fail=1
    for f in model.safetensors optimizer.safetensors; do
      cmp "$tmp/ck1/$f" "$tmp/ck0/$f" 2>&1 | sed "s/^/  | $f: /"
    done
  fi
  [ $recipe = none ] && continue
  for v in 1 0; do
    TECORE_OPS_FP8_MIN_MNK=0 TECORE_OPS_W8_COL_KEEP=$v TECORE_OPS_ZERO_GRAD_FILL=$v "$gpt" \
      --seed "$seed" $opt --recipe $recipe --accum 2 --steps 1 --sample 0 --eval-every 0 \
      --json > "$tmp/j$v.json" 2> "$tmp/j$v.err" ||
      { echo "FAIL: te-gpt --json --recipe $recipe fails"; cat "$tmp/j$v.err"; fail=1; }
  done
  w1=$(sed -n 's/.*"mem_fp8_other_mib": *\([0-9.e+-]*\).*/\1/p' "$tmp/j1.json")
  w0=$(sed -n 's/.*"mem_fp8_other_mib": *\([0-9.e+-]*\).*/\1/p' "$tmp/j0.json")
  hi=$want
  [ $recipe = block ] && hi=$((want + 4096))
  d=$(awk -v a="$w1" -v b="$w0" 'BEGIN { printf "%.0f", (a - b) * 1048576 }')
  echo "# $opt, $recipe: FP8 copies and workspaces $w1 MiB kept, $w0 MiB made by the backward: $d bytes less"
  [ -n "$w1" ] && [ -n "$w0" ] && [ "$d" -ge "$want" ] && [ "$d" -le "$hi" ] ||
    { echo "FAIL: $opt, $recipe: FP8 buffers $d bytes less, want $want to $hi"; fail=1; }
 done
done
[ $fail -eq 0 ] && echo "PASS: te-gpt's memory savers"
exit $fail
