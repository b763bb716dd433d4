#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# te-gpt-bpe.sh -- te-gpt --tokenize with --tokenizer (issue 60): the
# fixture t/demo/bpe/ (tokenizer.json; vocab.json + merges.txt) turns a
# text into the ids worked out by hand, in a version 1 shard (magic
# 20240520, uint16) that --data then trains on; --data and --val text
# with --tokenizer train as their shards do (the same rows); --sample
# decoded through it; the tokenizer travels with checkpoints (--save and
# --save-hf copy it, --load and --load-hf use it without --tokenizer and
# sample the same text, --eval reads text through it, another
# --tokenizer than the checkpoint's is refused, and a metadata
# "tokenizer" that names a path); a hostile tokenizer
# file is refused (exit 1, the byte offset named) and writes no shard.
# The tokenizer itself: t/demo/bpe_check.
# Exit 0 pass, 1 fail, 77 skip (TE_DEVICE=cuda without a GPU).
# Environment (from t/Makefile.inc): top_builddir, srcdir.
demo_tool=te-gpt
. "$(dirname "$0")/demo-lib.sh"
gpt=$demo
fix="$(dirname "$0")/bpe"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/te-gpt-bpe.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# ids: a byte is its value; 257 the, 258 " the", 264 er, 265 's, 266 12,
# 270 café, 271 <|endoftext|> (t/demo/bpe_check.c lists them all)
printf "the theater it's 12 caf\303\251<|endoftext|>" > "$tmp/in.txt"
want='257 258 97 116 264 32 105 116 265 32 266 32 270 271'
for tk in tokenizer.json vocab.json; do
  "$gpt" --tokenize "$tmp/in.txt" "$tmp/$tk.bin" --tokenizer "$fix/$tk" 2> "$tmp/err" ||
    { bad "--tokenizer $tk: exit $?: $(head -1 "$tmp/err")"; continue; }
  got=$(od -A n -t u2 -j 1024 -v "$tmp/$tk.bin" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
  head=$(od -A n -t u4 -N 12 "$tmp/$tk.bin" | tr -s ' ' ' ' | sed 's/^ //; s/ $//')
  # vocab.json has no added tokens: <|endoftext|> is its bytes
  [ "$tk" = vocab.json ] && want='257 258 97 116 264 32 105 116 265 32 266 32 270 60 124 101 110 100 111 102 116 101 120 116 124 62'
  [ "$got" = "$want" ] || bad "--tokenizer $tk: ids '$got', not '$want'"
  n=$(echo "$want" | wc -w)
  [ "$head" = "20240520 1 $n" ] || bad "--tokenizer $tk: header '$head', not '20240520 1 $n'"
done
for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do cat "$tmp/in.txt"; done > "$tmp/in15.txt"
"$gpt" --tokenize "$tmp/in15.txt" "$tmp/in15.bin" --tokenizer "$fix/tokenizer.json" 2> "$tmp/err" ||
  bad "--tokenize of 15 copies: $(head -1 "$tmp/err")"
"$gpt" --seed "$seed" --data "$tmp/in15.bin" --vocab 272 --seq 8 --batch 1 --steps 1 --sample 0 -q \
  > /dev/null 2> "$tmp/err" || bad "--data of the BPE shard: $(head -1 "$tmp/err")"

# sampling decoded through the tokenizer: a model trained on the shard
# writes the text's words (ids past 255 among them), the prompt encoded
for i in 1 2 3; do cat "$tmp/in15.txt"; done > "$tmp/in45.txt"
"$gpt" --tokenize "$tmp/in45.txt" "$tmp/in45.bin" --tokenizer "$fix/tokenizer.json" 2> /dev/null
"$gpt" --seed "$seed" --data "$tmp/in45.bin" --vocab 272 --seq 16 --steps 40 --sample 30 \
  --prompt "the" --tokenizer "$fix/tokenizer.json" > "$tmp/out" 2> "$tmp/err" ||
  bad "--sample --tokenizer: $(head -1 "$tmp/err")"
last=$(tail -1 "$tmp/out")
case $last in
  the*theater* | the*'<|endoftext|>'*) ;;
  *) bad "--sample --tokenizer: '$last' holds none of the text's words" ;;
esac
# --data and --val text read through the tokenizer: the same losses as
# the shards of the same text
"$gpt" --seed "$seed" --data "$tmp/in45.bin" --val "$tmp/in15.bin" --vocab 272 --seq 8 --steps 3 \
  --sample 0 -q > "$tmp/shard.txt" 2> "$tmp/err" || bad "--data of shards: $(head -1 "$tmp/err")"
"$gpt" --seed "$seed" --data "$tmp/in45.txt" --val "$tmp/in15.txt" --vocab 272 --seq 8 \
  --steps 3 --sample 0 -q --tokenizer "$fix/tokenizer.json" > "$tmp/text.txt" 2> "$tmp/err" ||
  bad "--data of text with --tokenizer: $(head -1 "$tmp/err")"
# step, loss, validation loss, learning rate, gradient norm (not the times)
cols() { awk '{ print $1, $2, $3, $4, $5 }' "$1"; }
[ -s "$tmp/text.txt" ] && [ "$(cols "$tmp/shard.txt")" = "$(cols "$tmp/text.txt")" ] ||
  bad "--data text --tokenizer: rows '$(cols "$tmp/text.txt" | tail -1)', the shard's '$(cols "$tmp/shard.txt" | tail -1)'"
"$gpt" --data "$tmp/in45.txt" --seq 8 --steps 1 -q --tokenizer "$fix/tokenizer.json" \
  > /dev/null 2> "$tmp/err"
[ $? = 1 ] && grep -q "token 0 is 257 (--tokenizer), past the vocabulary (--vocab 256)" "$tmp/err" ||
  bad "--tokenizer's ids past --vocab: $(head -1 "$tmp/err")"
"$gpt" --synthetic --vocab 256 --seq 16 --steps 1 --sample 4 --tokenizer "$fix/tokenizer.json" \
  > /dev/null 2> "$tmp/err"
[ $? = 1 ] && grep -q "272 tokens, more than the model's vocabulary (256)" "$tmp/err" ||
  bad "a tokenizer larger than the model: $(head -1 "$tmp/err")"

# the tokenizer travels with the checkpoint: --save copies it, --load
# without --tokenizer decodes the sample as with it, and --eval reads text
# through it as the shard of the same text scores
"$gpt" --seed "$seed" --data "$tmp/in45.txt" --vocab 272 --seq 16 --steps 40 --sample 0 -q \
  --tokenizer "$fix/tokenizer.json" --save "$tmp/ck" --rope 0 --save-hf "$tmp/hf" > /dev/null 2> "$tmp/err" ||
  bad "--save --tokenizer: $(head -1 "$tmp/err")"
cmp -s "$fix/tokenizer.json" "$tmp/ck/tokenizer.json" || bad "--save: the checkpoint holds no copy of --tokenizer"
cmp -s "$fix/tokenizer.json" "$tmp/hf/tokenizer.json" || bad "--save-hf: no tokenizer.json beside the model"
sample() {   # sample OUT ARGS...: te-gpt's sample after the prompt "the"
  out=$1; shift
  "$gpt" --sample 30 --prompt the "$@" > "$tmp/out" 2> "$tmp/err" || bad "$*: $(head -1 "$tmp/err")"
  tail -1 "$tmp/out" > "$out"
}
sample "$tmp/s0" --load "$tmp/ck" --tokenizer "$fix/tokenizer.json"
sample "$tmp/s1" --load "$tmp/ck"
sample "$tmp/s2" --load-hf "$tmp/hf" --steps 0
case $(cat "$tmp/s1") in
  the*theater* | the*'<|endoftext|>'*) ;;
  *) bad "--load's tokenizer: '$(cat "$tmp/s1")' holds none of the text's words" ;;
esac
cmp -s "$tmp/s0" "$tmp/s1" || bad "--load without --tokenizer: '$(cat "$tmp/s1")', with it '$(cat "$tmp/s0")'"
cmp -s "$tmp/s0" "$tmp/s2" || bad "--load-hf's tokenizer.json: '$(cat "$tmp/s2")', --load's '$(cat "$tmp/s0")'"
"$gpt" --load "$tmp/ck" --eval "$tmp/in15.txt" -q > "$tmp/e1" 2> "$tmp/err" || bad "--eval of text: $(head -1 "$tmp/err")"
"$gpt" --load "$tmp/ck" --eval "$tmp/in15.bin" -q > "$tmp/e2" 2> "$tmp/err" || bad "--eval of a shard: $(head -1 "$tmp/err")"
grep -q '^eval loss' "$tmp/e1" && cmp -s "$tmp/e1" "$tmp/e2" ||
  bad "--eval of text through the checkpoint's tokenizer: '$(cat "$tmp/e1")', of its shard '$(cat "$tmp/e2")'"
# another tokenizer than the checkpoint's: refused, both named
"$gpt" --load "$tmp/ck" --tokenizer "$fix/llama3.json" --sample 4 > /dev/null 2> "$tmp/err"
[ $? = 1 ] && grep -q "llama3.json is not the checkpoint's tokenizer $tmp/ck/tokenizer.json" "$tmp/err" ||
  bad "--load with another --tokenizer: $(head -1 "$tmp/err")"
rm "$tmp/ck/tokenizer.json"
"$gpt" --load "$tmp/ck" --sample 4 > /dev/null 2> "$tmp/err"
[ $? = 1 ] && grep -q "ck/tokenizer.json" "$tmp/err" || bad "--load, its tokenizer.json gone: $(head -1 "$tmp/err")"
# the metadata's "tokenizer" names a file te-gpt writes, never a path
mkdir "$tmp/m" && h='{"__metadata__":{"format":"te-gpt 1","tokenizer":"../../etc/passwd"}}'
{ printf "\\$(printf %03o ${#h})\\0\\0\\0\\0\\0\\0\\0"; printf '%s' "$h"; } > "$tmp/m/model.safetensors"
"$gpt" --load "$tmp/m" --steps 1 > /dev/null 2> "$tmp/err"
[ $? = 1 ] && grep -q 'metadata "tokenizer" is neither' "$tmp/err" ||
  bad "a checkpoint's tokenizer named ../../etc/passwd: $(head -1 "$tmp/err")"

printf '{"model": {"vocab": {"a": 0, "b": 1}, "merges": ["a b"]}}' > "$tmp/bad.json"
"$gpt" --tokenize "$tmp/in.txt" "$tmp/bad.bin" --tokenizer "$tmp/bad.json" 2> "$tmp/err"
[ $? = 1 ] && grep -q 'byte 49: merge 0: a part or the result is not in the vocabulary' "$tmp/err" ||
  bad "a merge without its result: $(head -1 "$tmp/err")"
[ -e "$tmp/bad.bin" ] && bad "a refused tokenizer wrote a shard"
printf '{"model": {"vocab": {"a": 0, ' > "$tmp/bad.json"
"$gpt" --tokenize "$tmp/in.txt" "$tmp/bad.bin" --tokenizer "$tmp/bad.json" 2> "$tmp/err"
[ $? = 1 ] && grep -q 'malformed JSON at byte 29' "$tmp/err" || bad "truncated JSON: $(head -1 "$tmp/err")"
exit $fail
