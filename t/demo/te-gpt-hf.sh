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
name=te-gpt-hf
. "$(dirname "$0")/hf-lib.sh"

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
hf_import GPT-2

# 3. tied: lm_head.weight (the file's last tensor) cut off
hf_tied "wte's"
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
