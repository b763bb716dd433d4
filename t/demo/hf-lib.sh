# SPDX-License-Identifier: Apache-2.0
# hf-lib.sh -- what te-gpt-hf.sh and te-gpt-hf-llama.sh share, sourced
# after demo-lib.sh: a scratch folder with training text ($tmp/d.txt) and
# held-out text ($tmp/v.txt), safetensors read with od and sed, the import
# check and the tied-embeddings file.  The caller sets gpt and name (the
# scratch folder's prefix) first.
tmp=$(mktemp -d "${TMPDIR:-/tmp}/$name.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
head -c 10250 "$(dirname "$0")/../../man/man1/te-gpt.1" > "$tmp/d.txt"
tail -c 1025 "$tmp/d.txt" > "$tmp/v.txt"
# hlen FILE: the safetensors header's length; header FILE: the header
hlen() { od -A n -t u4 -N 4 "$1" | tr -d ' '; }
header() { head -c $((8 + $(hlen "$1"))) "$1" | tail -c "$(hlen "$1")"; }
# at FILE TENSOR INDEX: the 4 bytes of F32 element INDEX of TENSOR, in hex
at() {
  o=$(header "$1" | sed -n "s/.*\"$2\":{[^}]*\"data_offsets\":\[\([0-9]*\),.*/\1/p")
  od -A n -t x4 -j $((8 + $(hlen "$1") + o + 4 * $3)) -N 4 "$1" | tr -d ' '
}
# range FILE TENSOR: the tensor's bytes to stdout
range() {
  set -- "$1" "$(header "$1" | sed -n "s/.*\"$2\":{[^}]*\"data_offsets\":\[\([0-9]*\),\([0-9]*\)\].*/\1 \2/p")"
  b=${2% *} e=${2#* }
  tail -c +$((8 + $(hlen "$1") + b + 1)) "$1" | head -c $((e - b))
}
# hf_import LABEL: --load-hf of $tmp/hf gives --load's --eval loss of
# $tmp/te to the printed digit, then trains and samples
hf_import() {
  e1=$("$gpt" --load "$tmp/te" --eval "$tmp/v.txt" -q 2> /dev/null)
  e2=$("$gpt" --load-hf "$tmp/hf" --eval "$tmp/v.txt" -q 2> /dev/null)
  echo "# --eval: te-gpt's checkpoint '$e1', $1's '$e2'"
  [ -n "$e1" ] && [ "$e1" = "$e2" ] || bad "--load-hf's eval '$e2' is not --load's '$e1'"
  "$gpt" --load-hf "$tmp/hf" --data "$tmp/d.txt" --steps 2 --sample 8 -q > /dev/null 2> "$tmp/err" ||
    bad "--load-hf then 2 steps and a sample fails: $(head -2 "$tmp/err")"
}
# hf_tied OWNER: $tmp/hf without lm_head.weight (the file's last tensor)
# in $tmp/tied; its --load-hf, saved to $tmp/te2, notes that the LM head
# starts as OWNER copy (a possessive: "wte's", "embed_tokens'")
hf_tied() {
  f=$tmp/hf/model.safetensors
  h=$(header "$f")
  hn=$(printf '%s' "$h" | sed 's/,"lm_head.weight":{[^}]*}//')
  while [ $(( $(printf '%s' "$hn" | wc -c) % 8 )) != 0 ]; do hn="$hn "; done
  cut=$(printf '%s' "$h" | sed -n 's/.*"lm_head.weight":{[^}]*"data_offsets":\[\([0-9]*\),.*/\1/p')
  mkdir "$tmp/tied" && cp "$tmp/hf/config.json" "$tmp/tied/"
  { n=$(printf '%s' "$hn" | wc -c); i=0
    while [ $i -lt 8 ]; do printf "\\$(printf %03o $((n % 256)))"; n=$((n / 256)) i=$((i + 1)); done
    printf '%s' "$hn"; tail -c +$((8 + $(hlen "$f") + 1)) "$f" | head -c "$cut"; } \
    > "$tmp/tied/model.safetensors"
  "$gpt" --load-hf "$tmp/tied" --steps 0 --sample 0 -q --save "$tmp/te2" > /dev/null 2> "$tmp/err" ||
    bad "--load-hf of a tied model fails: $(head -2 "$tmp/err")"
  grep -q "no lm_head.weight: the LM head starts as $1 copy" "$tmp/err" || bad "tied: no note"
}
