#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# te-gpt-data.sh -- te-gpt on real data and real runs (issue 60); each
# case failed before its change:
#  1. token shards: --tokenize writes the llm shard header (magic 20240520,
#     version 1, the count) and the bytes as uint16 tokens; training on
#     that shard, and on a uint32 shard (magic 20240801, version 2) of the
#     same tokens, gives the bytes' losses bit for bit; shards with a
#     wrong version, a count the size disagrees with, a negative count, a
#     header cut short, or a token past --vocab are refused (exit 1, a
#     message naming what is wrong), and so are tokens that widened to a
#     shard's width pass the 1 GiB limit;
#  2. the validation windows are te-gpt(1)'s: the held-out tenth's and a
#     --val file's validation loss is --eval's loss over that tenth or that
#     file (N = W windows: every one, in order), and with N = W / 2 the
#     mean of windows 0, 2, ..; --eval ignores a last
#     batch's unused rows (17 windows = 16 + 1, weighted) and reads no
#     training data (a checkpoint whose --data is gone is scored);
#  3. runs: the options a run was given come back on --load (a resume
#     without them continues the straight run's losses), those given
#     again win; --save-every saves mid-run without changing the losses;
#     --log holds the step rows; stored options that are not run options
#     or hold control bytes are refused;
#  4. weights: a NaN in a loaded tensor is refused with its name; a model
#     whose logits overflow refuses to sample (exit 1, was "????" and 0);
#     a checkpoint without optimizer.safetensors samples and trains;
#  5. --help gives --tp's range as the error does (1..8).
# Exit 0 pass, 1 fail, 77 skip (TE_DEVICE=cuda without a GPU).
# Environment (from t/Makefile.inc): top_builddir.
demo_tool=te-gpt
. "$(dirname "$0")/demo-lib.sh"
gpt=$demo
tmp=$(mktemp -d "${TMPDIR:-/tmp}/te-gpt-data.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
# jf FILE FIELD [STEP]: a summary field of a JSON document, or step STEP's
jf() {
  if [ -n "${3:-}" ]; then
    sed -n "s/.*{\"step\": $3, .*\"$2\": *\([^,}]*\).*/\1/p" "$1" | head -1
  else
    sed -n "s/.*\"$2\": *\([^,}]*\).*/\1/p" "$1" | head -1
  fi
}
# the step rows' losses of a JSON document, one a line
losses() { grep -o '"step": [0-9]*, "loss": [^,]*' "$1"; }
# near A B TOL: |A - B| <= TOL, both numbers
near() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d;
  exit !(a + 0 == a && b + 0 == b && d <= t) }'; }
# runs OUT ARGS...: te-gpt ARGS --json > OUT, exit 0 wanted
runs() {
  out=$1
  shift
  "$gpt" "$@" --json > "$out" 2> "$out.err" ||
    { bad "te-gpt $* exits non-zero: $(head -3 "$out.err")"; return 1; }
}
# refused WORDS ARGS...: te-gpt ARGS exits 1 saying WORDS
refused() {
  want=$1
  shift
  "$gpt" "$@" -q > "$tmp/out" 2> "$tmp/err"
  rc=$?
  [ $rc = 1 ] && grep -q -- "$want" "$tmp/err" ||
    bad "te-gpt $*: exit $rc (want 1), stderr: $(head -2 "$tmp/err") (want '$want')"
}
le32() {
  n=$1 i=0
  [ "$n" -lt 0 ] && n=$((n + 4294967296))
  while [ $i -lt 4 ]; do
    printf "\\$(printf %03o $((n % 256)))"
    n=$((n / 256)) i=$((i + 1))
  done
}
# header MAGIC VERSION COUNT: an llm shard header (256 int32)
header() {
  le32 "$1"; le32 "$2"; le32 "$3"
  head -c 1012 /dev/zero
}
# a corpus of 10250 bytes: its last tenth is 1025 bytes, 16 windows of 64
head -c 10250 "$(dirname "$0")/../../man/man1/te-gpt.1" > "$tmp/d.txt"
[ "$(wc -c < "$tmp/d.txt")" = 10250 ] || { echo "FAIL: no te-gpt.1 to read"; exit 1; }
common="--seed $seed --steps 4 --eval-every 2 --sample 0"

# 1. shards
"$gpt" --tokenize "$tmp/d.txt" "$tmp/d16.bin" || bad "--tokenize exits non-zero"
set -- $(od -A n -t d4 -N 12 "$tmp/d16.bin")
[ "$*" = "20240520 1 10250" ] || bad "--tokenize's header is '$*', not 20240520 1 10250"
[ "$(wc -c < "$tmp/d16.bin")" = $((1024 + 2 * 10250)) ] || bad "--tokenize: wrong size"
od -A n -v -t u1 "$tmp/d.txt" | tr -s ' ' '\n' | grep . |
  awk '{ printf "\\%03o\\000\\000\\000", $1 }' > "$tmp/esc"
{ header 20240801 2 10250; printf "$(cat "$tmp/esc")"; } > "$tmp/d32.bin"
runs "$tmp/bytes.json" $common --data "$tmp/d.txt"
for sh in d16 d32; do
  runs "$tmp/$sh.json" $common --data "$tmp/$sh.bin" || continue
  losses "$tmp/$sh.json" > "$tmp/$sh.l"
  losses "$tmp/bytes.json" | cmp -s - "$tmp/$sh.l" && [ -s "$tmp/$sh.l" ] ||
    bad "$sh shard: the losses are not the bytes' ($(head -1 "$tmp/$sh.l"))"
  [ "$(jf "$tmp/$sh.json" last_val_loss)" = "$(jf "$tmp/bytes.json" last_val_loss)" ] ||
    bad "$sh shard: another validation loss than the bytes'"
done
tail -c 2048 "$tmp/d16.bin" > "$tmp/toks"
{ header 20240520 2 1024; cat "$tmp/toks"; } > "$tmp/v2.bin"
refused "has version 2, not 1" --data "$tmp/v2.bin"
{ header 20240520 1 1025; cat "$tmp/toks"; } > "$tmp/long.bin"
refused "says 1025 tokens" --data "$tmp/long.bin"
{ header 20240520 1 -4; cat "$tmp/toks"; } > "$tmp/neg.bin"
refused "says -4 tokens" --data "$tmp/neg.bin"
{ le32 20240520; le32 1; } > "$tmp/short.bin"
refused "its header alone is 1024" --data "$tmp/short.bin"
refused "a directory, not a regular file" --data "$tmp"
# the tokens before a wider shard pass the limit once widened: 600 MB of
# bytes are 1200 MB as uint16 (was an unsigned wrap: read, widened, trained)
truncate -s 600000000 "$tmp/big.txt" && { header 20240520 1 1; printf 'a\000'; } > "$tmp/one.bin"
if command -v timeout > /dev/null; then
  timeout 120 "$gpt" --data "$tmp/big.txt" --data "$tmp/one.bin" --steps 1 --sample 0 -q \
    > /dev/null 2> "$tmp/err"
  rc=$?
  [ $rc = 1 ] && grep -q "corpus limit of 1024 MiB" "$tmp/err" ||
    bad "600 MB of bytes, then a shard: exit $rc (want 1), $(head -1 "$tmp/err")"
fi
rm -f "$tmp/big.txt"
{ header 20240520 1 1024; head -c 2000 "$tmp/toks"; printf '\054\001'; tail -c 46 "$tmp/toks"; } \
  > "$tmp/big.bin"
refused "token 1000 is 300, past the vocabulary (--vocab 256)" --data "$tmp/big.bin"

# 2. the validation windows: the held-out tenth's 16 windows (--batch 4,
# --eval-batches 4) are --eval's over that tenth; a --val file's as well
runs "$tmp/tr.json" $common --data "$tmp/d.txt" --save "$tmp/ck"
tail -c 1025 "$tmp/d.txt" > "$tmp/tail.txt"
runs "$tmp/ev.json" --load "$tmp/ck" --eval "$tmp/tail.txt"
v=$(jf "$tmp/tr.json" last_val_loss) e=$(jf "$tmp/ev.json" eval_loss)
echo "# held-out tenth: validation loss $v, --eval of it $e ($(jf "$tmp/ev.json" eval_windows) windows)"
near "$v" "$e" 1e-5 || bad "the validation loss $v is not --eval's $e over the last tenth"
# N = 8 of W = 16 (--eval-batches 2): windows 0, 2, .., 14, not the first 8
runs "$tmp/tr8.json" $common --data "$tmp/d.txt" --eval-batches 2 --save "$tmp/ck8"
sum=0
for j in 0 2 4 6 8 10 12 14; do
  tail -c +$((j * 64 + 1)) "$tmp/tail.txt" | head -c 65 > "$tmp/w"
  runs "$tmp/w.json" --load "$tmp/ck8" --eval "$tmp/w"
  sum=$(awk -v s="$sum" -v l="$(jf "$tmp/w.json" eval_loss)" 'BEGIN { printf "%.9g", s + l / 8 }')
done
v=$(jf "$tmp/tr8.json" last_val_loss)
echo "# 8 of 16 windows: validation loss $v, the mean of windows 0, 2, .., 14 $sum"
near "$v" "$sum" 1e-5 || bad "--eval-batches 2: the validation loss $v is not windows 0, 2, .., 14's $sum"
head -c 1025 "$tmp/d.txt" > "$tmp/val.txt"
runs "$tmp/trv.json" $common --data "$tmp/d.txt" --val "$tmp/val.txt" --save "$tmp/ckv"
runs "$tmp/evv.json" --load "$tmp/ckv" --eval "$tmp/val.txt"
v=$(jf "$tmp/trv.json" last_val_loss) e=$(jf "$tmp/evv.json" eval_loss)
near "$v" "$e" 1e-5 || bad "--val: the validation loss $v is not --eval's $e over the file"
# --eval reads no training data: a checkpoint whose --data is gone scores
cp "$tmp/d.txt" "$tmp/gone.txt"
runs "$tmp/g.json" --seed "$seed" --steps 1 --sample 0 --data "$tmp/gone.txt" --save "$tmp/ckg" &&
  rm "$tmp/gone.txt" && runs "$tmp/ge.json" --load "$tmp/ckg" --eval "$tmp/val.txt"
# a last batch of one window: 17 L(17) = 16 L(16) + L(1)
head -c $((17 * 64 + 1)) "$tmp/d.txt" > "$tmp/w17"
head -c $((16 * 64 + 1)) "$tmp/d.txt" > "$tmp/w16"
tail -c 65 "$tmp/w17" > "$tmp/w1"
for w in 17 16 1; do runs "$tmp/e$w.json" --load "$tmp/ck" --eval "$tmp/w$w"; done
l17=$(jf "$tmp/e17.json" eval_loss) l16=$(jf "$tmp/e16.json" eval_loss) l1=$(jf "$tmp/e1.json" eval_loss)
[ "$(jf "$tmp/e17.json" eval_windows):$(jf "$tmp/e17.json" eval_tokens)" = "17:1088" ] ||
  bad "--eval of 1089 bytes: not 17 windows, 1088 tokens"
near "$(awk -v a="$l17" 'BEGIN { print 17 * a }')" \
  "$(awk -v a="$l16" -v b="$l1" 'BEGIN { print 16 * a + b }')" 2e-4 ||
  bad "--eval: 17 x $l17 is not 16 x $l16 + $l1 (a last batch's unused rows counted)"

# 3. runs: a resume without the options continues the straight run
opts="--seed $seed --lr 0.005 --decay-steps 8 --eval-every 2 --sample 0 --data $tmp/d.txt"
runs "$tmp/straight.json" $opts --steps 4 --log "$tmp/log"
runs "$tmp/half.json" $opts --steps 2 --save "$tmp/ck2"
runs "$tmp/resumed.json" --load "$tmp/ck2" --steps 4
losses "$tmp/straight.json" | tail -2 > "$tmp/s.l"
losses "$tmp/resumed.json" > "$tmp/r.l"
cmp -s "$tmp/s.l" "$tmp/r.l" ||
  bad "--load without the run's options: losses $(tr '\n' ' ' < "$tmp/r.l"), straight $(tr '\n' ' ' < "$tmp/s.l")"
# given again, they win: step 3 of a 3-step warmup runs at the peak
runs "$tmp/over.json" --load "$tmp/ck2" --steps 3 --lr 0.002 --warmup 3
near "$(jf "$tmp/over.json" lr 3)" 0.002 1e-12 || bad "--lr given again: step 3's lr is $(jf "$tmp/over.json" lr 3)"
[ "$(grep -c '^step [1-4] loss [0-9.]* val_loss' "$tmp/log")" = 4 ] ||
  bad "--log: not 4 step lines: $(head -2 "$tmp/log")"
l2=$(printf %.4f "$(jf "$tmp/straight.json" loss 2)") v2=$(printf %.4f "$(jf "$tmp/straight.json" val_loss 2)")
grep -q "^step 2 loss $l2 val_loss $v2 " "$tmp/log" ||
  bad "--log: step 2's line is not the row's (loss $l2, val_loss $v2): $(sed -n 2p "$tmp/log")"
runs "$tmp/every.json" $opts --steps 4 --save-every 2 --save "$tmp/ck3"
losses "$tmp/every.json" | cmp -s - "$(losses "$tmp/straight.json" > "$tmp/all.l"; echo "$tmp/all.l")" ||
  bad "--save-every changed the losses"
grep -q "saved step 2 to" "$tmp/every.json.err" || bad "--save-every 2: no note of step 2's save"
mk_meta() {   # DIR JSON: a model.safetensors of no tensors, that metadata
  mkdir -p "$1"
  n=$(printf '%s' "$2" | wc -c)
  { le32 "$n"; le32 0; printf '%s' "$2"; } > "$1/model.safetensors"
}
mk_meta "$tmp/m1" '{"__metadata__":{"format":"te-gpt 1","te-gpt.arg.0":"--save=/x"}}'
"$gpt" --load "$tmp/m1" --steps 1 -q > /dev/null 2> "$tmp/err"
[ $? = 2 ] && grep -q "not an option a run stores" "$tmp/err" ||
  bad "a stored --save: $(head -1 "$tmp/err")"
mk_meta "$tmp/m2" '{"__metadata__":{"format":"te-gpt 1","te-gpt.arg.0":"--data=\u001b[2J"}}'
refused 'is not an option' --load "$tmp/m2"

# 4. weights: a NaN refused by name; logits that overflow refuse to sample
off() {   # FILE TENSOR: the byte where TENSOR's data starts
  h=$(od -A n -t u4 -N 4 "$1" | tr -d ' ')
  o=$(head -c $((8 + h)) "$1" | tail -c "$h" |
    sed -n "s/.*\"$2\":{[^}]*\"data_offsets\":\[\([0-9]*\),.*/\1/p")
  echo $((8 + h + o))
}
poke() {   # FILE TENSOR BYTES-FILE: BYTES-FILE written over TENSOR's first bytes
  dd if="$3" of="$1" bs=1 seek="$(off "$1" "$2")" conv=notrunc 2> /dev/null
}
cp -r "$tmp/ck" "$tmp/nan"
printf '\000\000\300\177' > "$tmp/nanf"
poke "$tmp/nan/model.safetensors" layers.0.mlp.fc1.weight "$tmp/nanf"
refused 'tensor "layers.0.mlp.fc1.weight" holds a NaN at element 0' --load "$tmp/nan" --steps 0 --sample 8
cp -r "$tmp/ck" "$tmp/inf"
printf '\000\000\177\177' > "$tmp/f"    # 3.39e38, BF16's largest
for i in 1 2 3 4 5 6; do cat "$tmp/f" "$tmp/f" > "$tmp/g" && mv "$tmp/g" "$tmp/f"; done
poke "$tmp/inf/model.safetensors" norm.bias "$tmp/f"   # 64 of them
printf '\000\000\200\077' > "$tmp/f"    # 1.0
for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14; do cat "$tmp/f" "$tmp/f" > "$tmp/g" && mv "$tmp/g" "$tmp/f"; done
poke "$tmp/inf/model.safetensors" lm_head.weight "$tmp/f"   # 256 x 64 of them
refused "the model's output is not finite, no sample" --load "$tmp/inf" --steps 0 --sample 8
# the model alone samples, and trains from a fresh optimizer
cp -r "$tmp/ck" "$tmp/alone" && rm "$tmp/alone/optimizer.safetensors"
runs "$tmp/alone.json" --load "$tmp/alone" --steps 0 --sample 8 &&
  [ "$(jf "$tmp/alone.json" sample)" != "" ] || bad "the model alone: no sample"
runs "$tmp/alone2.json" --load "$tmp/alone" --steps 2 --sample 0 &&
  grep -q "AdamW starts afresh from step 0" "$tmp/alone2.json.err" ||
  bad "the model alone: no training from step 0 ($(head -2 "$tmp/alone2.json.err"))"

# 5. --help's --tp range is the error's
"$gpt" --help | grep -q -- "--tp N .*1\.\.8" || bad "--help does not give --tp's range 1..8"
exit $fail
