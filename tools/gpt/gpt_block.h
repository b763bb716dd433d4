/* SPDX-License-Identifier: Apache-2.0
 * gpt_block.h -- one pre-norm transformer block as fuser operations
 * (te/ops.h), in the order tecore_seq_add_transformer(3)
 * appends them (so that the parameters come in the same order):
 *   make(slot) -> norm -> QKV Linear -> [RoPE] -> causal attention ->
 *   output Linear -> add(slot) -> make(slot) -> norm -> fc1 -> act -> fc2
 *   -> add(slot).
 * QKV is one Linear hidden -> (heads + 2 kv_heads) * head_dim, its rows
 * the query heads, then the key heads, then the value heads; a gated
 * activation's fc1 is hidden -> 2 ffn, each row [a | b], out = act(a) * b. */
#ifndef TE_GPT_BLOCK_H
#define TE_GPT_BLOCK_H

#include <string.h>
#include <te/core.h>

struct gpt_block_desc {
  size_t hidden, ffn;
  int heads, kv_heads;        /* kv_heads 0: heads */
  int norm;                   /* TECORE_OP_LAYERNORM or TECORE_OP_RMSNORM */
  int activation;             /* TECORE_OP_GELU, RELU, SWIGLU, GEGLU, ... */
  int qkv_bias, proj_bias, mlp_bias, rope;
  unsigned attn_flags;
  size_t batch, max_seqlen;
  int slot;
};

static inline tecore_result_t gpt_add_block(tecore_seq_t *q, const struct gpt_block_desc *b) {
  int kv = b->kv_heads ? b->kv_heads : b->heads;
  int hd = (int)(b->hidden / (size_t)b->heads);
  int gated = b->activation == TECORE_OP_SWIGLU || b->activation == TECORE_OP_GEGLU ||
              b->activation == TECORE_OP_REGLU;
  struct tecore_op_rope_args ra = {.heads = b->heads, .kv_heads = kv, .head_dim = hd,
                                   .style = TECORE_ROPE_HALVES, .batch = b->batch,
                                   .max_seqlen = b->max_seqlen};
  struct tecore_op_attention_args aa = {.heads = b->heads, .kv_heads = kv, .head_dim = hd,
                                        .flags = b->attn_flags, .batch = b->batch,
                                        .max_seqlen = b->max_seqlen};
  struct tecore_op_desc d[13];
  int n = 0;
  memset(d, 0, sizeof d);
  for (int half = 0; half < 2; half++) {
    d[n++] = (struct tecore_op_desc){.kind = TECORE_OP_MAKE_EXTRA_OUTPUT, .slot = b->slot};
    d[n++] = (struct tecore_op_desc){.kind = b->norm, .epsilon = 1e-5f};
    if (!half) {
      d[n++] = (struct tecore_op_desc){.kind = TECORE_OP_LINEAR,
                                       .features = (size_t)(b->heads + 2 * kv) * (size_t)hd,
                                       .bias = b->qkv_bias};
      if (b->rope) d[n++] = (struct tecore_op_desc){.kind = TECORE_OP_ROPE, .ctx = &ra};
      d[n++] = (struct tecore_op_desc){.kind = TECORE_OP_ATTENTION, .ctx = &aa};
      d[n++] = (struct tecore_op_desc){.kind = TECORE_OP_LINEAR, .features = b->hidden,
                                       .bias = b->proj_bias};
    } else {
      d[n++] = (struct tecore_op_desc){.kind = TECORE_OP_LINEAR,
                                       .features = (gated ? 2 : 1) * b->ffn, .bias = b->mlp_bias};
      d[n++] = (struct tecore_op_desc){.kind = b->activation};
      d[n++] = (struct tecore_op_desc){.kind = TECORE_OP_LINEAR, .features = b->hidden,
                                       .bias = b->mlp_bias};
    }
    d[n++] = (struct tecore_op_desc){.kind = TECORE_OP_ADD_EXTRA_INPUT, .slot = b->slot};
  }
  for (int k = 0; k < n; k++) {
    tecore_result_t r = tecore_seq_add(q, &d[k], NULL);
    if (r != TECORE_SUCCESS) return r;
  }
  return TECORE_SUCCESS;
}

#endif
