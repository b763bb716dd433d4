#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# te-gpt.sh -- te-gpt, the main job, on vdev:
#  1. the tiny model with no options but a seed trains on the man pages:
#     the first loss is near ln 256 = 5.545 and the validation loss after
#     30 steps is below GPT_VAL_MAX; the sample has --sample bytes, and
#     the KV-cache decode's logits are the whole model's (--sample-check);
#     with the block FP8 recipe the validation loss is within 0.1 of BF16's;
#     under delayed FP8 the cross-entropy's backward writes the LM head's
#     FP8 gradient: the first step as the BF16 dlogits' within rounding,
#     and 30 steps learn as theirs do (GPT_DL8_*), and
#     AdamW writing the FP8 weights gives the forward's quantize's bits;
#     BF16 weight gradients (--wgrad bf16, the default) start as F32's
#     within a rounding and learn alike, in less memory;
#  2. a run resumed from a checkpoint continues with the same bits: 6
#     steps straight, against 3 steps, --save, --load, 3 more: the same
#     losses and byte-identical model.safetensors and optimizer.safetensors;
#     and 4 against 2 + 2 with FP8 (delayed scaling); the step graph
#     (the default) and eager launches (--no-graph) take the same steps,
#     and so do the next step queued before the host waits (the default),
#     --no-pipeline and --graph-launch host;
#     the saved tensors on shared scratch (--share-saved,
#     the default) give the same bits as each on its own; the decode step
#     replayed as a graph samples the eager decode's text; --profile lists
#     step 2's kernels; --plan prints the fuser's plans (delayed FP8 fuses
#     each norm with its quantize, block and BF16 quantize in no fusion);
#  3. hostile checkpoints (truncated, a header length past the file, bad
#     JSON, offsets out of range or overlapping, a shape whose size
#     overflows, a span that disagrees with its shape, a missing tensor)
#     are refused with a message and exit 1, never a crash;
#  4. bad options exit 2 (a shape the attention cannot take, an unknown
#     model or recipe) or 1 (a file that is not there).
# --tp: t/demo/te-gpt-tp.sh.
# Random seed each run (TE_TEST_SEED to repeat).
# Exit 0 pass, 1 fail, 77 skip (TE_DEVICE=cuda without a GPU).
# Environment (from t/Makefile.inc): top_builddir.
demo_tool=te-gpt
. "$(dirname "$0")/demo-lib.sh"
gpt=$demo
tmp=$(mktemp -d "${TMPDIR:-/tmp}/te-gpt.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0

# The validation loss after the default 30 steps (4 fixed batches of the
# held-out tenth), over seeds 1..24: 3.10 .. 3.37 (the unigram entropy of
# the pages is about 3.3 nats, the start ln 256 = 5.545).  4.0 leaves a
# margin of 0.6 over the worst seed seen while still failing a model that
# learns nothing (stays near 5.5).  The first loss over 600 seeds (1..200
# and 400 random draws): mean 5.71, sd 0.11, 5.37 .. 6.11; seed 54043
# gives 6.23 (a fresh-clone CI run failed there on a bound of 6.2): the
# bound is 5.0 .. 7.0, which an untrained model meets and a trained one
# (near 3.3) or a broken initialization (far above ln 256) does not.
GPT_VAL_MAX=4.0

# 1. training and sampling (JSON: the summary fields, the sample in ASCII)
if ! "$gpt" --seed "$seed" --sample 24 --sample-check --json > "$tmp/run.json" 2> "$tmp/run.err"; then
  echo "FAIL: te-gpt --seed $seed exits non-zero"; sed 's/^/  | /' "$tmp/run.err"; exit 1
fi
field() { sed -n "s/.*\"$1\": *\\([^,}]*\\).*/\\1/p" "$tmp/run.json" | head -1; }
first=$(field first_loss) val=$(field last_val_loss)
echo "# first loss $first, validation loss after 30 steps $val (limit $GPT_VAL_MAX)"
awk -v f="$first" 'BEGIN { exit !(f > 5.0 && f < 7.0) }' ||
  { echo "FAIL: the first loss $first is not near ln 256"; fail=1; }
awk -v v="$val" -v m="$GPT_VAL_MAX" 'BEGIN { exit !(v + 0 == v && v < m) }' ||
  { echo "FAIL: the validation loss $val is not below $GPT_VAL_MAX"; fail=1; }
sample=$(sed -n 's/.*"sample": *"\(\([^"\\]\|\\.\)*\)".*/\1/p' "$tmp/run.json" |
  sed 's/\\u00[0-9a-f][0-9a-f]/?/g; s/\\./?/g')
[ ${#sample} = 24 ] || { echo "FAIL: the sample has ${#sample} bytes, not 24: '$sample'"; fail=1; }
# the summary's ms/step: the median of the step rows from the third (the
# first two make the lazy choices and capture the graph), the row figure
# printed with 6 digits, so within 1e-5 relative
med=$(field ms_median) from=$(field median_first_step)
rows_med=$(grep -o '"step": [0-9]*, [^}]*"ms": [^,]*' "$tmp/run.json" |
  sed 's/"step": \([0-9]*\),.*"ms": \(.*\)/\1 \2/' | awk '$1 >= 3 { print $2 }' | sort -g |
  awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
awk -v a="$med" -v b="$rows_med" -v f="$from" \
  'BEGIN { d = a - b; if (d < 0) d = -d; exit !(f == 3 && b > 0 && d <= 1e-5 * b) }' ||
  { echo "FAIL: ms_median $med (from step $from) is not the rows' median $rows_med of steps 3-"; fail=1; }

# FP8 with the block recipe (E4M3, 1x128 and 128x128 scales; every Linear
# in FP8): the same 30 steps learn as BF16's do, and the validation loss
# stays within GPT_BLOCK_GAP of BF16's on the same seed (two trajectories
# of a tiny model at a high learning rate, parted from the first step:
# seen up to 0.071 over 72 seeds, so a bound of 0.1 would fail about one
# run in a hundred)
GPT_BLOCK_GAP=0.2
if TECORE_OPS_FP8_MIN_MNK=0 "$gpt" --seed "$seed" --recipe block --sample 0 --json \
     > "$tmp/blk.json" 2> "$tmp/blk.err"; then
  bval=$(sed -n 's/.*"last_val_loss": *\([^,}]*\).*/\1/p' "$tmp/blk.json" | head -1)
  echo "# block recipe: validation loss after 30 steps $bval (BF16 $val, gap limit $GPT_BLOCK_GAP)"
  awk -v v="$bval" -v b="$val" -v g="$GPT_BLOCK_GAP" -v m="$GPT_VAL_MAX" \
    'BEGIN { d = v - b; if (d < 0) d = -d; exit !(v + 0 == v && v < m && d < g) }' ||
    { echo "FAIL: block recipe: validation loss $bval (BF16 $val)"; fail=1; }
else
  echo "FAIL: te-gpt --recipe block exits non-zero"; sed 's/^/  | /' "$tmp/blk.err"; fail=1
fi

# FP8 with delayed scaling, every Linear in FP8: the cross-entropy's
# backward writes the LM head's FP8 gradient itself (dlogits_fp8 1;
# tecore_seq_grad_fp8); with TECORE_OPS_FUSION_OFF=grad_fp8 it writes BF16
# dlogits that the head quantizes (0).  They differ by a rounding of each
# gradient to BF16 first, so from the same weights: the first loss the
# same bits, the first step's gradient norm within GPT_DL8_NORM (seen:
# up to 0.26% over 6 seeds; a gradient scaled wrong by 2 or written in
# another layout moves the head's share of the norm far past it), the
# second loss within GPT_DL8_LOSS2 (seen 0.21%).  After 30 steps the two
# trajectories, parted at the first rounding, both learn: validation
# losses below GPT_VAL_MAX and within GPT_DL8_GAP of each other (seen: up
# to 0.054 over 44 seeds; a bound of 0.1 failed a CI run once)
GPT_DL8_NORM=0.02 GPT_DL8_LOSS2=0.01 GPT_DL8_GAP=0.25
for off in "" grad_fp8; do
  TECORE_OPS_FUSION_OFF=$off TECORE_OPS_FP8_MIN_MNK=0 "$gpt" --seed "$seed" --recipe delayed \
    --sample 0 --json > "$tmp/dl8$off.json" 2> "$tmp/dl8.err" ||
    { echo "FAIL: te-gpt --recipe delayed (FUSION_OFF '$off') fails"; cat "$tmp/dl8.err"; fail=1; }
done
# jf FILE FIELD [STEP]: a summary field of the JSON, or the field of step STEP's row
jf() {
  if [ -n "${3:-}" ]; then
    sed -n "s/.*{\"step\": $3, .*\"$2\": *\([^,}]*\).*/\1/p" "$1" | head -1
  else
    sed -n "s/.*\"$2\": *\([^,}]*\).*/\1/p" "$1" | head -1
  fi
}
a=$tmp/dl8.json b=$tmp/dl8grad_fp8.json
d8=$(jf "$a" dlogits_fp8) d16=$(jf "$b" dlogits_fp8)
[ "$d8:$d16" = "2:0" ] || { echo "FAIL: dlogits_fp8 is '$d8' and (grad_fp8 off) '$d16', not 2 and 0"; fail=1; }
l8=$(jf "$a" loss 1) l16=$(jf "$b" loss 1) n8=$(jf "$a" grad_norm 1) n16=$(jf "$b" grad_norm 1)
s8=$(jf "$a" loss 2) s16=$(jf "$b" loss 2) v8=$(jf "$a" last_val_loss) v16=$(jf "$b" last_val_loss)
echo "# FP8 dlogits against BF16: step 1 loss $l8 / $l16, gradient norm $n8 / $n16;" \
  "step 2 loss $s8 / $s16; validation loss after 30 steps $v8 / $v16"
[ -n "$l8" ] && [ "$l8" = "$l16" ] ||
  { echo "FAIL: FP8 dlogits: the first loss $l8 is not the BF16 dlogits' $l16"; fail=1; }
awk -v a="$n8" -v b="$n16" -v t="$GPT_DL8_NORM" \
  'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a + 0 == a && b > 0 && d <= t * b) }' ||
  { echo "FAIL: FP8 dlogits: step 1 gradient norm $n8, BF16 dlogits $n16 (limit $GPT_DL8_NORM)"; fail=1; }
awk -v a="$s8" -v b="$s16" -v t="$GPT_DL8_LOSS2" \
  'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a + 0 == a && b > 0 && d <= t * b) }' ||
  { echo "FAIL: FP8 dlogits: step 2 loss $s8, BF16 dlogits $s16 (limit $GPT_DL8_LOSS2)"; fail=1; }
awk -v a="$v8" -v b="$v16" -v g="$GPT_DL8_GAP" -v m="$GPT_VAL_MAX" \
  'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a + 0 == a && a < m && b < m && d < g) }' ||
  { echo "FAIL: FP8 dlogits: validation loss $v8 (BF16 dlogits $v16, gap limit $GPT_DL8_GAP)"; fail=1; }

# The codes over the logits themselves (dlogits_fp8 2: tecore_xent_bwd in
# place, TECORE_SEQ_GRAD_FP8_GIVEN) against the sequence's own buffer
# (TECORE_OPS_FUSION_OFF=grad_fp8_given: 1): the same bits in 4 steps'
# losses and gradient norms, and less device memory by at least the head
# gradient's size less the other Linears' (a vocabulary of 4096 against an
# FFN of 256, 256 rows: the sequence's rowwise FP8 gradient buffer shrinks
# from 256 x 4096 to 256 x 256 bytes; the head weight's columnwise copy
# moves into the caller's memory too)
for off in "" grad_fp8_given; do
  TECORE_OPS_FUSION_OFF=$off TECORE_OPS_FP8_MIN_MNK=0 "$gpt" --seed "$seed" --synthetic \
    --vocab 4096 --recipe delayed --steps 4 --eval-every 0 --sample 0 --json \
    > "$tmp/gv$off.json" 2> "$tmp/gv.err" ||
    { echo "FAIL: te-gpt --vocab 4096 (FUSION_OFF '$off') fails"; cat "$tmp/gv.err"; fail=1; }
  grep -o '"loss": [^,]*, "val_loss": [^,]*, "lr": [^,]*, "grad_norm": [^,]*' "$tmp/gv$off.json" \
    > "$tmp/gv$off.steps"
done
g2=$(jf "$tmp/gv.json" dlogits_fp8) g1=$(jf "$tmp/gvgrad_fp8_given.json" dlogits_fp8)
m2=$(jf "$tmp/gv.json" mem_fp8_other_mib) m1=$(jf "$tmp/gvgrad_fp8_given.json" mem_fp8_other_mib)
echo "# FP8 dlogits over the logits: dlogits_fp8 $g2 / $g1, FP8 copies and workspaces $m2 / $m1 MiB"
[ "$g2:$g1" = "2:1" ] || { echo "FAIL: dlogits_fp8 is '$g2' (grad_fp8_given off: '$g1'), not 2 and 1"; fail=1; }
[ "$(wc -l < "$tmp/gv.steps")" = 4 ] && cmp -s "$tmp/gv.steps" "$tmp/gvgrad_fp8_given.steps" ||
  { echo "FAIL: the codes over the logits and in the sequence's buffer differ:";
    diff "$tmp/gv.steps" "$tmp/gvgrad_fp8_given.steps"; fail=1; }
awk -v a="$m2" -v b="$m1" 'BEGIN { exit !(a + 0 > 0 && b - a >= 256 * (4096 - 256) / 1048576) }' ||
  { echo "FAIL: the codes over the logits save too little: $m2 MiB against $m1"; fail=1; }

# --wgrad bf16 (the default with --accum 1: TECORE_SEQ_BF16_WGRAD) against
# f32, BF16 and delayed FP8: the same first loss (the forward does not
# depend on it), the first step's gradient norm within GPT_WG_NORM (each
# weight gradient rounded to BF16 once: a relative 2^-9 an element, seen
# up to 4e-5 on the norm), 30 steps that learn alike (GPT_DL8_GAP), and
# the weight gradients' memory halved
GPT_WG_NORM=0.002
for r in none delayed; do
  for w in bf16 f32; do
    TECORE_OPS_FP8_MIN_MNK=0 "$gpt" --seed "$seed" --recipe $r --wgrad $w --sample 0 --json \
      > "$tmp/wg$w.json" 2> "$tmp/wg.err" ||
      { echo "FAIL: te-gpt --recipe $r --wgrad $w fails"; cat "$tmp/wg.err"; fail=1; }
  done
  a=$tmp/wgbf16.json b=$tmp/wgf32.json
  l1=$(jf "$a" loss 1) l2=$(jf "$b" loss 1) n1=$(jf "$a" grad_norm 1) n2=$(jf "$b" grad_norm 1)
  v1=$(jf "$a" last_val_loss) v2=$(jf "$b" last_val_loss)
  echo "# --recipe $r, --wgrad bf16 / f32: first loss $l1 / $l2, gradient norm $n1 / $n2," \
    "validation loss $v1 / $v2"
  [ -n "$l1" ] && [ "$l1" = "$l2" ] || { echo "FAIL: --wgrad bf16 changes the first loss"; fail=1; }
  awk -v a="$n1" -v b="$n2" -v t="$GPT_WG_NORM" -v va="$v1" -v vb="$v2" -v g="$GPT_DL8_GAP" \
    -v m="$GPT_VAL_MAX" 'BEGIN { d = a - b; if (d < 0) d = -d; e = va - vb; if (e < 0) e = -e
      exit !(a + 0 == a && b > 0 && d <= t * b && va < m && vb < m && e < g) }' ||
    { echo "FAIL: --recipe $r --wgrad bf16: gradient norm $n1, validation $v1 (f32: $n2, $v2)"; fail=1; }
  # the tiny model's Linear weights: 2 x (64 x 192 + 64 x 64 + 2 x 64 x 256) + 256 x 64
  # = 114688, 2 bytes each fewer: 0.22 MiB
  m1=$(jf "$a" mem_mib 1) m2=$(jf "$b" mem_mib 1)
  awk -v a="$m1" -v b="$m2" 'BEGIN { exit !(a + 0 > 0 && b - a >= 114688 * 2 / 1048576 - 1e-6) }' ||
    { echo "FAIL: --recipe $r --wgrad bf16: $m1 MiB, f32 $m2 MiB"; fail=1; }
done

# AdamW writing each FP8 Linear's next weight codes (tecore_seq_fp8_weight;
# the forwards after the first step quantize none) against the forward
# quantizing them (TECORE_OPS_FUSION_OFF=weight_fp8): the same bits, in
# the losses, validation losses and gradient norms of 6 steps and in the
# saved model (the saved FP8 state differs: AdamW's leaves the next
# step's weight amax pending, which the forward would record)
for off in "" weight_fp8; do
  TECORE_OPS_FUSION_OFF=$off "$gpt" --seed "$seed" --recipe delayed --batch 2 --steps 6 \
    --sample 0 --eval-every 2 --csv -q --save "$tmp/w8$off" > "$tmp/w8$off.csv" 2> "$tmp/w8.err" ||
    { echo "FAIL: te-gpt --recipe delayed (FUSION_OFF '$off') fails"; cat "$tmp/w8.err"; fail=1; }
  cut -d, -f1-5 "$tmp/w8$off.csv" > "$tmp/w8$off.cut"
done
[ "$(wc -l < "$tmp/w8.cut")" = 7 ] && cmp -s "$tmp/w8.cut" "$tmp/w8weight_fp8.cut" ||
  { echo "FAIL: AdamW-written FP8 weights and the forward's quantize differ:";
    diff "$tmp/w8.cut" "$tmp/w8weight_fp8.cut"; fail=1; }
cmp -s "$tmp/w8/model.safetensors" "$tmp/w8weight_fp8/model.safetensors" ||
  { echo "FAIL: AdamW-written FP8 weights: model.safetensors differs"; fail=1; }

# the KV cache past its seq positions (it starts again from half the
# window), with learned positions, and with RMSNorm, SwiGLU and 2 KV heads;
# after FP8 training, whose Linear weights are F32 (the decode and the
# whole model read BF16 copies rounded from them)
for cfg in "--seq 16 --rope 0" "--norm rmsnorm --act swiglu --kv-heads 2 --bias 0" \
           "--recipe delayed" "--recipe block"; do
  "$gpt" $cfg --seed "$seed" --steps 2 --batch 1 --sample 40 --sample-check -q > "$tmp/out" 2> "$tmp/err" ||
    { echo "FAIL: te-gpt $cfg --sample-check:"; cat "$tmp/err"; fail=1; }
done

# 2. resume: the same bits as a straight run
opts="--seed $seed --batch 2 --sample 0 --eval-every 2 --csv -q"
"$gpt" $opts --steps 6 --save "$tmp/a" > "$tmp/a.csv" 2> "$tmp/a.err" &&
  "$gpt" $opts --steps 3 --decay-steps 6 --save "$tmp/b" > "$tmp/b1.csv" 2> "$tmp/b.err" &&
  "$gpt" $opts --load "$tmp/b" --steps 6 --save "$tmp/c" > "$tmp/b2.csv" 2>> "$tmp/b.err" ||
  { echo "FAIL: the resume runs fail"; cat "$tmp/a.err" "$tmp/b.err"; fail=1; }
# step, loss, val_loss, lr, grad_norm (not the times)
cut -d, -f1-5 "$tmp/a.csv" > "$tmp/a.cut"
{ cut -d, -f1-5 "$tmp/b1.csv"; cut -d, -f1-5 "$tmp/b2.csv" | sed 1d; } > "$tmp/b.cut"
if ! cmp -s "$tmp/a.cut" "$tmp/b.cut"; then
  echo "FAIL: 6 steps straight and 3 + 3 resumed give other losses:"; diff "$tmp/a.cut" "$tmp/b.cut"
  fail=1
fi
# a resumed run of two steps (4 and 5): its summary's median takes both
"$gpt" --seed "$seed" --batch 2 --sample 0 --eval-every 0 --load "$tmp/b" --steps 5 --json \
  > "$tmp/r5.json" 2>> "$tmp/b.err" || { echo "FAIL: the two-step resume fails"; fail=1; }
r5med=$(sed -n 's/.*"ms_median": *\([^,}]*\).*/\1/p' "$tmp/r5.json" | head -1)
r5from=$(sed -n 's/.*"median_first_step": *\([^,}]*\).*/\1/p' "$tmp/r5.json" | head -1)
awk -v m="$r5med" -v f="$r5from" 'BEGIN { exit !(m + 0 == m && m > 0 && f == 4) }' ||
  { echo "FAIL: resumed at step 3 for 2 steps: ms_median '$r5med' from step '$r5from' (want 4)"; fail=1; }
# the step graph (the default) and eager launches: the same bits
"$gpt" $opts --steps 6 --no-graph > "$tmp/e.csv" 2> "$tmp/e.err" ||
  { echo "FAIL: te-gpt --no-graph fails"; cat "$tmp/e.err"; fail=1; }
cut -d, -f1-5 "$tmp/e.csv" | cmp -s - "$tmp/a.cut" ||
  { echo "FAIL: eager launches (--no-graph) and the step graph give other losses"; fail=1; }
# the host queueing the next step graph before it waits for this one (the
# default, through a graph chain; no validation pass in between, so every
# step), waiting for each step (--no-pipeline), the graph launched by the
# host (--graph-launch host) or by one kernel node from the device
# (--graph-launch device): the same bits, losses and gradient norms
pv=0
for v in "" --no-pipeline "--graph-launch host" "--graph-launch device"; do
  pv=$((pv + 1))
  "$gpt" --seed "$seed" --batch 2 --sample 0 --eval-every 0 --csv -q --steps 7 $v \
    > "$tmp/p$pv.csv" 2> "$tmp/p$pv.err" || { echo "FAIL: te-gpt $v fails"; cat "$tmp/p$pv.err"; fail=1; }
  cut -d, -f1-5 "$tmp/p$pv.csv" > "$tmp/p$pv.cut"
done
[ "$(wc -l < "$tmp/p1.cut")" = 8 ] || { echo "FAIL: the pipelined run has no 7 rows"; fail=1; }
for pv in 2 3 4; do
  cmp -s "$tmp/p1.cut" "$tmp/p$pv.cut" ||
    { echo "FAIL: pipelined steps and run $pv (--no-pipeline / --graph-launch host / device) differ:";
      diff "$tmp/p1.cut" "$tmp/p$pv.cut"; fail=1; }
done
for f in model optimizer; do
  cmp -s "$tmp/a/$f.safetensors" "$tmp/c/$f.safetensors" ||
    { echo "FAIL: $f.safetensors differs between the straight and the resumed run"; fail=1; }
done
[ "$(wc -l < "$tmp/a.cut")" = 7 ] || { echo "FAIL: the straight run has no 6 rows"; fail=1; }
# the same with FP8 (delayed scaling: the amax histories travel in the checkpoint)
opts="--seed $seed --batch 2 --sample 0 --eval-every 2 --recipe delayed --csv -q"
"$gpt" $opts --steps 4 --save "$tmp/fa" > "$tmp/fa.csv" 2> "$tmp/a.err" &&
  "$gpt" $opts --steps 2 --decay-steps 4 --save "$tmp/fb" > "$tmp/fb1.csv" 2> "$tmp/b.err" &&
  "$gpt" $opts --load "$tmp/fb" --steps 4 --save "$tmp/fc" > "$tmp/fb2.csv" 2>> "$tmp/b.err" ||
  { echo "FAIL: the FP8 resume runs fail"; cat "$tmp/a.err" "$tmp/b.err"; fail=1; }
cut -d, -f1-5 "$tmp/fa.csv" > "$tmp/a.cut"
{ cut -d, -f1-5 "$tmp/fb1.csv"; cut -d, -f1-5 "$tmp/fb2.csv" | sed 1d; } > "$tmp/b.cut"
cmp -s "$tmp/a.cut" "$tmp/b.cut" ||
  { echo "FAIL: FP8: 4 steps straight and 2 + 2 resumed give other losses:"; diff "$tmp/a.cut" "$tmp/b.cut"; fail=1; }
for f in model optimizer; do
  cmp -s "$tmp/fa/$f.safetensors" "$tmp/fc/$f.safetensors" ||
    { echo "FAIL: FP8: $f.safetensors differs between the straight and the resumed run"; fail=1; }
done
# the saved tensors the backward never reads on shared scratch (the
# default) or each on its own (--share-saved 0): the same bits, FP8 (where
# most are shared) and, with gradient accumulation and eager launches, BF16
"$gpt" $opts --steps 4 --share-saved 0 > "$tmp/fs.csv" 2> "$tmp/fs.err" ||
  { echo "FAIL: te-gpt --share-saved 0 fails"; cat "$tmp/fs.err"; fail=1; }
cut -d, -f1-5 "$tmp/fs.csv" | cmp -s - "$tmp/a.cut" ||
  { echo "FAIL: FP8: --share-saved 0 and 1 give other losses"; fail=1; }
"$gpt" --seed "$seed" --batch 2 --steps 1 --recipe delayed --sample 0 --json > "$tmp/sh.json" 2>&1
grep -q '"saved_shared_mib": [0-9]*\.*[0-9]*[1-9]' "$tmp/sh.json" ||
  { echo "FAIL: FP8: no saved tensor was laid over shared scratch"; cat "$tmp/sh.json"; fail=1; }
for sh in 0 1; do
  "$gpt" --seed "$seed" --batch 2 --accum 2 --no-graph --sample 0 --eval-every 2 --csv -q \
    --steps 3 --share-saved $sh > "$tmp/s$sh.csv" 2> "$tmp/s.err" ||
    { echo "FAIL: te-gpt --share-saved $sh --accum 2 fails"; cat "$tmp/s.err"; fail=1; }
done
cut -d, -f1-5 "$tmp/s0.csv" > "$tmp/s0.cut"
cut -d, -f1-5 "$tmp/s1.csv" | cmp -s - "$tmp/s0.cut" ||
  { echo "FAIL: BF16, accumulation: --share-saved 0 and 1 give other losses"; fail=1; }
# the decode step as one graph (the default) and eager (--no-graph): the
# same text, sampled at a temperature past the cache's seq positions
for g in "" --no-graph; do
  "$gpt" --seed "$seed" --batch 2 --steps 2 --eval-every 0 --sample 150 --temperature 0.8 \
    --top-k 20 --json $g 2> "$tmp/dg.err" | grep -o '"sample": .*' > "$tmp/dg$g.txt" ||
    { echo "FAIL: te-gpt --sample $g fails"; cat "$tmp/dg.err"; fail=1; }
done
[ -s "$tmp/dg.txt" ] && cmp -s "$tmp/dg.txt" "$tmp/dg--no-graph.txt" ||
  { echo "FAIL: the graphed and the eager decode sample other text"; fail=1; }
# --profile: step 2's kernels (--steps 2) on standard error (GEMMs, attention, AdamW)
"$gpt" --seed "$seed" --batch 2 --steps 2 --sample 0 --eval-every 0 -q --profile \
  > /dev/null 2> "$tmp/prof.err" ||
  { echo "FAIL: te-gpt --profile fails"; cat "$tmp/prof.err"; fail=1; }
# (attention: libte's kernels te_attn_* on vdev, cuDNN's cudnn_sdpa_* rows
# on a GPU, which with fixed lengths launch no kernel of libte's)
for k in gemm "te_attn|cudnn_sdpa" te_optim_adam te_xent te_norm; do
  grep -E -q "^($k)" "$tmp/prof.err" ||
    { echo "FAIL: te-gpt --profile lists no $k"; cat "$tmp/prof.err"; fail=1; }
done
# --plan: the fuser's plans, forward and backward; delayed FP8 (every
# Linear in FP8) fuses the norms with the quantize of the next Linear's
# input, the block recipe does not (its inputs have 1x128 scales of
# their own), BF16 quantizes nothing
for r in delayed block none; do
  TECORE_OPS_FP8_MIN_MNK=0 "$gpt" --seed "$seed" --steps 1 --sample 0 --eval-every 0 \
    --recipe $r --plan > "$tmp/plan.txt" 2> "$tmp/plan.err" ||
    { echo "FAIL: te-gpt --plan --recipe $r fails"; cat "$tmp/plan.err"; fail=1; }
  fw=$(grep '^# plan forward: ' "$tmp/plan.txt") bw=$(grep '^# plan backward: ' "$tmp/plan.txt")
  case "$r:$fw" in
    delayed:*norm+quantize*|block:*attention*|none:*attention*) ;;
    *) echo "FAIL: te-gpt --plan --recipe $r: forward plan: $fw"; fail=1 ;;
  esac
  case "$r:$fw" in
    block:*quantize*|none:*quantize*) echo "FAIL: $r: a quantize fusion: $fw"; fail=1 ;;
  esac
  case "$bw" in
    *attention*linear*) ;;
    *) echo "FAIL: te-gpt --plan --recipe $r: backward plan: $bw"; fail=1 ;;
  esac
done

# 3. hostile checkpoints.  mkst FILE JSON [DATA BYTES]: the 8-byte length, the header, data
le8() {
  n=$1 i=0
  while [ $i -lt 8 ]; do
    printf "\\$(printf %03o $((n % 256)))"
    n=$((n / 256)) i=$((i + 1))
  done
}
mkst() {
  mkdir -p "$(dirname "$1")"
  { le8 ${#2}; printf '%s' "$2"; head -c "${3:-0}" /dev/zero; } > "$1"
}
meta='"__metadata__":{"format":"te-gpt 1","layers":"2","hidden":"64","heads":"4","kv_heads":"4","ffn":"256","seq":"64","vocab":"256","rope":"1","bias":"1","norm":"layernorm","act":"gelu"}'
# refuse CASE WORDS: te-gpt --load $tmp/CASE must exit 1 saying WORDS
refuse() {
  "$gpt" --load "$tmp/$1" --steps 7 --sample 0 -q > "$tmp/out" 2> "$tmp/err"
  rc=$?
  if [ $rc != 1 ] || ! grep -q "$2" "$tmp/err"; then
    echo "FAIL: checkpoint '$1': exit $rc (want 1), message: $(head -2 "$tmp/err")"; fail=1
  fi
}
mkdir -p "$tmp/trunc" && head -c 300 "$tmp/a/model.safetensors" > "$tmp/trunc/model.safetensors"
refuse trunc "header length"
mkdir -p "$tmp/short" && printf 'abc' > "$tmp/short/model.safetensors"
refuse short "shorter than"
mkst "$tmp/badjson/model.safetensors" '{"x": {"dtype": "F32", "shape": [1], }'
refuse badjson "not a valid safetensors"
mkst "$tmp/range/model.safetensors" '{"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}' 8
refuse range "out of the data"
mkst "$tmp/overlap/model.safetensors" \
  '{"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"y":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}' 16
refuse overlap "overlap"
mkst "$tmp/overflow/model.safetensors" \
  '{"x":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,0]}}'
refuse overflow "overflows"
mkst "$tmp/span/model.safetensors" '{"x":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}}' 16
refuse span "span"
mkst "$tmp/dtype/model.safetensors" '{"x":{"dtype":"Q7","shape":[3],"data_offsets":[0,12]}}' 12
refuse dtype "unknown dtype"
mkst "$tmp/big/model.safetensors" '{"x":{"dtype":"F32","shape":[3],"data_offsets":[0,99999999999999999999]}}'
refuse big "overflows 64 bits"
mkst "$tmp/empty/model.safetensors" "{$meta}"
refuse empty "no tensor"
mkdir -p "$tmp/huge" && { le8 1000000000000; printf '{}'; } > "$tmp/huge/model.safetensors"
refuse huge "header length"

# 4. bad options
expect() {
  want=$1
  shift
  "$gpt" "$@" > "$tmp/out" 2> "$tmp/err"
  rc=$?
  [ $rc = "$want" ] && [ -s "$tmp/err" ] ||
    { echo "FAIL: te-gpt $*: exit $rc (want $want), stderr: $(head -1 "$tmp/err")"; fail=1; }
}
expect 2 --model gpt-9
expect 2 --heads 3
expect 2 --hidden 64 --heads 16
expect 2 --kv-heads 3
expect 2 --recipe fp4
expect 2 --vocab 100
expect 2 --norm batchnorm
expect 2 --top-k 5
expect 2 --graph-launch sideways
expect 2 --wgrad f16
expect 2 --data /dev/null --synthetic
expect 2 --steps -1
expect 1 --data "$tmp/no-such-file" --steps 1
expect 1 --load "$tmp/no-such-dir" --steps 1
exit $fail
