#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# te-gpt-hf-llama.sh -- te-gpt's Hugging Face Llama checkpoints (issue 60),
# without numpy or Python: the test reads the files with od and sed.
#  1. --save-hf of a Llama-shaped model (RMSNorm, SwiGLU, RoPE, no biases,
#     2 key/value heads of 4) writes LlamaForCausalLM's config.json (the
#     shape's keys, num_key_value_heads, head_dim, rope_theta, silu,
#     rms_norm_eps 1e-05, untied) and model.safetensors under Llama's names,
#     qkv cut into q_proj [64,64], k_proj and v_proj [32,64], fc1 into
#     gate_proj and up_proj [256,64]: elements equal to te-gpt's bit for bit
#     (k_proj row 3 is qkv row 64 + 3, up_proj row 7 is fc1 row 256 + 7);
#  2. --load-hf of it gives --load's --eval loss to the printed digit, then
#     trains and samples;
#  3. without lm_head.weight (tied) the LM head starts as embed_tokens;
#  4. refused: rope_scaling, hidden_act gelu, rms_norm_eps 1e-06,
#     attention_bias true.
# Exit 0 pass, 1 fail, 77 skip (TE_DEVICE=cuda without a GPU).
# Environment (from t/Makefile.inc): top_builddir.
demo_tool=te-gpt
. "$(dirname "$0")/demo-lib.sh"
gpt=$demo
name=te-gpt-hf-llama
. "$(dirname "$0")/hf-lib.sh"
same() {   # same TE_TENSOR TE_INDEX HF_TENSOR HF_INDEX
  a=$(at "$tmp/te/model.safetensors" "$1" "$2")
  b=$(at "$tmp/hf/model.safetensors" "$3" "$4")
  [ -n "$a" ] && [ "$a" = "$b" ] || bad "$1[$2] $a is not $3[$4] $b"
}
llama="--norm rmsnorm --act swiglu --bias 0 --rope 1 --kv-heads 2"

# 1. the files
"$gpt" --seed "$seed" $llama --data "$tmp/d.txt" --steps 4 --sample 0 -q \
  --save "$tmp/te" --save-hf "$tmp/hf" > /dev/null 2> "$tmp/err" ||
  { echo "FAIL: --save-hf exits non-zero: $(head -2 "$tmp/err")"; exit 1; }
for kv in '"architectures": \["LlamaForCausalLM"\]' '"model_type": "llama"' '"hidden_size": 64' \
  '"num_hidden_layers": 2' '"num_attention_heads": 4' '"num_key_value_heads": 2' \
  '"head_dim": 16' '"intermediate_size": 256' '"vocab_size": 256' \
  '"max_position_embeddings": 64' '"rope_theta": 10000.0' '"hidden_act": "silu"' \
  '"rms_norm_eps": 1e-05' '"tie_word_embeddings": false' '"attention_bias": false'; do
  grep -q "$kv" "$tmp/hf/config.json" || bad "config.json lacks $kv"
done
h=$(header "$tmp/hf/model.safetensors")
for ts in model.embed_tokens.weight:256,64 model.layers.0.input_layernorm.weight:64 \
  model.layers.1.self_attn.q_proj.weight:64,64 model.layers.1.self_attn.k_proj.weight:32,64 \
  model.layers.0.self_attn.v_proj.weight:32,64 model.layers.0.self_attn.o_proj.weight:64,64 \
  model.layers.1.post_attention_layernorm.weight:64 model.layers.0.mlp.gate_proj.weight:256,64 \
  model.layers.1.mlp.up_proj.weight:256,64 model.layers.1.mlp.down_proj.weight:64,256 \
  model.norm.weight:64 lm_head.weight:256,64; do
  printf '%s' "$h" | grep -q "\"${ts%%:*}\":{\"dtype\":\"F32\",\"shape\":\[${ts#*:}\]" ||
    bad "model.safetensors has no ${ts%%:*} F32 [${ts#*:}]"
done
printf '%s' "$h" | grep -q 'bias\|wpe\|pos_emb' && bad "model.safetensors holds a bias or positions"
same layers.0.attn.qkv.weight $((10 * 64 + 5)) model.layers.0.self_attn.q_proj.weight $((10 * 64 + 5))
same layers.0.attn.qkv.weight $(((64 + 3) * 64 + 5)) model.layers.0.self_attn.k_proj.weight $((3 * 64 + 5))
same layers.1.attn.qkv.weight $(((96 + 31) * 64 + 63)) model.layers.1.self_attn.v_proj.weight $((31 * 64 + 63))
same layers.1.mlp.fc1.weight $((200 * 64 + 9)) model.layers.1.mlp.gate_proj.weight $((200 * 64 + 9))
same layers.1.mlp.fc1.weight $(((256 + 7) * 64 + 1)) model.layers.1.mlp.up_proj.weight $((7 * 64 + 1))
same layers.0.mlp.fc2.weight $((5 * 256 + 200)) model.layers.0.mlp.down_proj.weight $((5 * 256 + 200))
same layers.1.mlp_norm.weight 17 model.layers.1.post_attention_layernorm.weight 17

# 2. imported, the same model
hf_import Llama

# 3. tied: lm_head.weight (the file's last tensor) cut off
hf_tied "embed_tokens'"
a=$(at "$tmp/te2/model.safetensors" lm_head.weight 777)
b=$(at "$tmp/te2/model.safetensors" tok_embeddings.weight 777)
[ -n "$a" ] && [ "$a" = "$b" ] || bad "tied: lm_head.weight[777] $a is not embed_tokens' $b"

# 4. refused
mkdir "$tmp/no" && cp "$tmp/hf/model.safetensors" "$tmp/no/"
refuse() {   # refuse SED-EXPRESSION MESSAGE
  sed "$1" "$tmp/hf/config.json" > "$tmp/no/config.json"
  "$gpt" --load-hf "$tmp/no" --steps 0 -q > /dev/null 2> "$tmp/err"
  [ $? = 1 ] && grep -q "$2" "$tmp/err" || bad "config.json with $1: $(head -1 "$tmp/err")"
}
refuse 's/"rope_scaling": null/"rope_scaling": {"rope_type": "llama3"}/' '"rope_scaling" is given'
refuse 's/"silu"/"gelu"/' '"hidden_act" is not "silu"'
refuse 's/1e-05/1e-06/' '"rms_norm_eps" is not 1e-05'
refuse 's/"attention_bias": false/"attention_bias": true/' '"attention_bias" is not false'
exit $fail
