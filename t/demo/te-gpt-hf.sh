#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# te-gpt-hf.sh -- te-gpt's Hugging Face GPT-2 checkpoints (issue 60),
# without numpy or Python: the test reads the files with od and sed.
#  1. --save-hf writes GPT2LMHeadModel's config.json (the shape's keys,
#     gelu_new, epsilon 1e-05, untied) and model.safetensors under GPT-2's
#     names ("transformer.h.N.attn.c_attn.weight" ...), the Conv1D weights
#     [in][out]: an element of c_attn and of mlp.c_proj is te-gpt's qkv and
#     fc2 element transposed, bit for bit;
#  2. --load-hf of it gives --load's --eval loss to the printed digit, then
#     trains and samples;
#  3. without lm_head.weight (tied embeddings) the LM head starts as wte:
#     a --save of the imported model holds the same bytes in both;
#  4. refused: another model_type, GELU's erf form, --save-hf of a model
#     GPT-2's layout cannot hold (RoPE).
# Exit 0 pass, 1 fail, 77 skip (TE_DEVICE=cuda without a GPU).
# Environment (from t/Makefile.inc): top_builddir.
demo_tool=te-gpt
. "$(dirname "$0")/demo-lib.sh"
gpt=$demo
tmp=$(mktemp -d "${TMPDIR:-/tmp}/te-gpt-hf.XXXXXX") || exit 1
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

# 1. the files
"$gpt" --seed "$seed" --rope 0 --data "$tmp/d.txt" --steps 4 --sample 0 -q \
  --save "$tmp/te" --save-hf "$tmp/hf" > /dev/null 2> "$tmp/err" ||
  { echo "FAIL: --save-hf exits non-zero: $(head -2 "$tmp/err")"; exit 1; }
for kv in '"model_type": "gpt2"' '"n_embd": 64' '"n_layer": 2' '"n_head": 4' '"n_inner": 256' \
  '"vocab_size": 256' '"n_positions": 64' '"activation_function": "gelu_new"' \
  '"layer_norm_epsilon": 1e-05' '"tie_word_embeddings": false'; do
  grep -q "$kv" "$tmp/hf/config.json" || bad "config.json lacks $kv"
done
h=$(header "$tmp/hf/model.safetensors")
for ts in 'transformer.h.0.attn.c_attn.weight:64,192' 'transformer.h.1.mlp.c_fc.weight:64,256' \
  'transformer.h.0.mlp.c_proj.weight:256,64' 'transformer.h.1.attn.c_proj.bias:64' \
  'transformer.wpe.weight:64,64' 'transformer.ln_f.bias:64' 'lm_head.weight:256,64'; do
  printf '%s' "$h" | grep -q "\"${ts%%:*}\":{\"dtype\":\"F32\",\"shape\":\[${ts#*:}\]" ||
    bad "model.safetensors has no ${ts%%:*} F32 [${ts#*:}]"
done
a=$(at "$tmp/te/model.safetensors" layers.0.attn.qkv.weight $((130 * 64 + 7)))
b=$(at "$tmp/hf/model.safetensors" transformer.h.0.attn.c_attn.weight $((7 * 192 + 130)))
[ -n "$a" ] && [ "$a" = "$b" ] || bad "qkv.weight[130][7] $a is not c_attn.weight[7][130] $b"
a=$(at "$tmp/te/model.safetensors" layers.1.mlp.fc2.weight $((5 * 256 + 200)))
b=$(at "$tmp/hf/model.safetensors" transformer.h.1.mlp.c_proj.weight $((200 * 64 + 5)))
[ -n "$a" ] && [ "$a" = "$b" ] || bad "fc2.weight[5][200] $a is not mlp.c_proj.weight[200][5] $b"

# 2. imported, the same model
e1=$("$gpt" --load "$tmp/te" --eval "$tmp/v.txt" -q 2> /dev/null)
e2=$("$gpt" --load-hf "$tmp/hf" --eval "$tmp/v.txt" -q 2> /dev/null)
echo "# --eval: te-gpt's checkpoint '$e1', GPT-2's '$e2'"
[ -n "$e1" ] && [ "$e1" = "$e2" ] || bad "--load-hf's eval '$e2' is not --load's '$e1'"
"$gpt" --load-hf "$tmp/hf" --data "$tmp/d.txt" --steps 2 --sample 8 -q > /dev/null 2> "$tmp/err" ||
  bad "--load-hf then 2 steps and a sample fails: $(head -2 "$tmp/err")"

# 3. tied: lm_head.weight (the file's last tensor) cut off
f=$tmp/hf/model.safetensors
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
grep -q "no lm_head.weight: the LM head starts as wte's copy" "$tmp/err" || bad "tied: no note"
range "$tmp/te2/model.safetensors" lm_head.weight > "$tmp/lm"
range "$tmp/te2/model.safetensors" tok_embeddings.weight > "$tmp/wte"
[ -s "$tmp/lm" ] && cmp -s "$tmp/lm" "$tmp/wte" || bad "tied: lm_head.weight is not wte's bytes"

# 4. refused
mkdir "$tmp/llama" && cp "$tmp/hf/model.safetensors" "$tmp/llama/" &&
  sed 's/"gpt2"/"mistral"/' "$tmp/hf/config.json" > "$tmp/llama/config.json"
"$gpt" --load-hf "$tmp/llama" --steps 0 -q > /dev/null 2> "$tmp/err"
[ $? = 1 ] && grep -q 'is not "gpt2" or "llama"' "$tmp/err" || bad "model_type mistral: $(head -1 "$tmp/err")"
sed -i 's/"gelu_new"/"gelu"/; s/"mistral"/"gpt2"/' "$tmp/llama/config.json"
"$gpt" --load-hf "$tmp/llama" --steps 0 -q > /dev/null 2> "$tmp/err"
[ $? = 1 ] && grep -q "GELU's tanh form" "$tmp/err" || bad "gelu (erf): $(head -1 "$tmp/err")"
"$gpt" --steps 1 --sample 0 -q --save-hf "$tmp/rope" > /dev/null 2> "$tmp/err"
[ $? = 1 ] && grep -q "Llama's layout needs" "$tmp/err" || bad "--save-hf, RoPE with LayerNorm: $(head -1 "$tmp/err")"
exit $fail
