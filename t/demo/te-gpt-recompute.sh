#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# te-gpt-recompute.sh -- te-gpt --recompute (issue 61) on vdev: the blocks'
# activations computed again in the backward instead of kept.
#  1. a 4-block tiny model, BF16 and FP8 (delayed), with validation losses
#     every 3 steps: --recompute selective and full give the per-step
#     losses, gradient norms and validation losses of the run without, to
#     the printed digits (tolerance: exact -- the same kernels on the same
#     data, the recomputed forward writing the same bits, and under
#     delayed scaling the same amaxes, max-accumulated, so the scales and
#     histories are the same); the memory note's device total is smaller
#     with full than without;
#  2. the llama3-8b preset, shrunk by the shape options (its RoPE base
#     500000, RMSNorm, SwiGLU, grouped queries kept), trains two steps
#     with --recompute full to finite losses;
#  3. with --dp 2 (ranks as forked processes; the data-parallel group's
#     pass hooks see the recomputed forward as TECORE_SEQ_RECOMPUTE):
#     --recompute selective, and full, with --zero 0, --zero 3 and
#     --zero 3 --recipe delayed give the losses and learning rates of the
#     same run without, bit for bit (the same kernels; ZeRO-3 gathers each
#     recomputed layer's weights before its forward runs again);
#  4. bad uses exit 2: --recompute with an unknown mode, with --offload.
# Random seed each run (TE_TEST_SEED to repeat).
# Exit 0 pass, 1 fail, 77 skip (TE_DEVICE=cuda without a GPU).
# Environment (from t/Makefile.inc): top_builddir.
demo_tool=te-gpt
. "$(dirname "$0")/demo-lib.sh"
gpt=$demo
# a SELECTIVE unit's GELU runs as its own kernel, so the run without must
# not fuse it into fc1's epilogue (BF16 on an H100 would): the same kernels
# on both sides (tecore_seq_set_recompute(3))
export TECORE_OPS_GELU_EPILOGUE=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/te-gpt-rc.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
base="--layers 4 --seed $seed --steps 6 --eval-every 3 --sample 0"

# the step rows: step, loss, val_loss, grad_norm
rows() { grep -E '^ +[0-9]+ ' "$1" | awk '{print $1, $2, $3, $5}'; }
# the memory note's "device memory N MiB"
saved() { sed -n 's/.*device memory \([0-9.]*\) MiB.*/\1/p' "$1" | head -1; }

for recipe in none delayed; do
  for mode in none selective full; do
    "$gpt" $base --recipe $recipe --recompute $mode > "$tmp/$mode.txt" 2> "$tmp/$mode.err" ||
      { echo "FAIL: te-gpt $base --recipe $recipe --recompute $mode fails"; cat "$tmp/$mode.err"
        exit 1; }
    rows "$tmp/$mode.txt" > "$tmp/$mode.rows"
  done
  n=$(wc -l < "$tmp/none.rows")
  if test "$n" -ne 6; then
    echo "FAIL: --recipe $recipe: $n step rows, want 6"; fail=1
  fi
  for mode in selective full; do
    if cmp -s "$tmp/none.rows" "$tmp/$mode.rows"; then
      echo "ok: --recipe $recipe --recompute $mode: the same $n steps as without"
    else
      echo "FAIL: --recipe $recipe --recompute $mode: the steps differ from the run without"
      diff "$tmp/none.rows" "$tmp/$mode.rows"; fail=1
    fi
  done
  a=$(saved "$tmp/none.txt"); b=$(saved "$tmp/full.txt")
  if test -n "$a" && test -n "$b" && awk -v a="$a" -v b="$b" 'BEGIN { exit !(b < a) }'; then
    echo "ok: --recipe $recipe: device memory $a MiB -> $b MiB with --recompute full"
  else
    echo "FAIL: --recipe $recipe: device memory '$a' -> '$b' MiB: not smaller"; fail=1
  fi
done

small="--model llama3-8b --layers 2 --hidden 64 --heads 8 --kv-heads 2 --ffn 96 --seq 32 --vocab 256"
if "$gpt" $small --seed $seed --steps 2 --sample 0 --recompute full > "$tmp/l3.txt" 2> "$tmp/l3.err"; then
  if rows "$tmp/l3.txt" | awk 'NF < 2 || $2 != $2 + 0 || $2 ~ /nan|inf/ { bad = 1 } END { exit bad || NR != 2 }'; then
    echo "ok: llama3-8b (shrunk) trains 2 steps with --recompute full"
  else
    echo "FAIL: llama3-8b (shrunk): rows not finite"; rows "$tmp/l3.txt"; fail=1
  fi
else
  echo "FAIL: te-gpt $small fails"; cat "$tmp/l3.err"; fail=1
fi

# 3. with --dp 2: step, loss, val_loss, lr of the CSV rows, bit for bit
dpopts="--seed $seed --lr 2e-3 --steps 4 --batch 2 --dp 2 --sample 0 --eval-every 0 --csv -q"
for zr in "0 none" "3 none" "3 delayed"; do
  set -- $zr
  zero=$1 recipe=$2
  "$gpt" $dpopts --zero $zero --recipe $recipe > "$tmp/dp.csv" 2> "$tmp/dp.err" ||
    { echo "FAIL: te-gpt $dpopts --zero $zero --recipe $recipe fails"; cat "$tmp/dp.err"
      exit 1; }
  cut -d, -f1-4 "$tmp/dp.csv" > "$tmp/dp.rows"
  for mode in selective full; do
    what="--dp 2 --zero $zero --recipe $recipe --recompute $mode"
    if ! "$gpt" $dpopts --zero $zero --recipe $recipe --recompute $mode > "$tmp/dprc.csv" \
        2> "$tmp/dp.err"; then
      echo "FAIL: te-gpt $what fails"; cat "$tmp/dp.err"; fail=1; continue
    fi
    cut -d, -f1-4 "$tmp/dprc.csv" > "$tmp/dprc.rows"
    if test "$(wc -l < "$tmp/dp.rows")" -ge 4 && cmp -s "$tmp/dp.rows" "$tmp/dprc.rows"; then
      echo "ok: $what: the losses without, bit for bit"
    else
      echo "FAIL: $what: other losses than without:"; diff "$tmp/dp.rows" "$tmp/dprc.rows"
      fail=1
    fi
  done
done

for bad in "--recompute some" "--recompute full --offload"; do
  "$gpt" $bad --steps 1 --sample 0 > /dev/null 2> "$tmp/bad.err"
  rc=$?
  if test $rc -eq 2; then
    echo "ok: te-gpt $bad: exit 2 ($(head -1 "$tmp/bad.err"))"
  else
    echo "FAIL: te-gpt $bad: exit $rc, want 2"; cat "$tmp/bad.err"; fail=1
  fi
done
exit $fail
