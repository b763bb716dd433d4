/* SPDX-License-Identifier: Apache-2.0
 * gpt_decode.h -- te-gpt's decode step with a KV cache (gpt_decode.c):
 * the model's parameters where the fuser sequence keeps them, a key and a
 * value cache per layer for seq positions, and the step's buffers. */
#ifndef TE_GPT_DECODE_H
#define TE_GPT_DECODE_H

#include "gpt.h"

struct gpt_decoder {
  const struct gpt_model *m;
  struct { struct tecore_tensor gamma, beta; int has_beta; } *norm;   /* 2 layers + 1 */
  struct { struct tecore_tensor w, b; int has_b; } *lin;              /* 4 layers + 1 */
  tecore_devptr_t *kc, *vc;          /* per layer BF16 [seq][kv_heads * head_dim] */
  size_t qkv_w, f1_w;
  tecore_devptr_t x, h, o, qkv, f1, a, logits;   /* BF16 [1][...] */
  tecore_devptr_t idpos;             /* int32 {token, position} */
  tecore_devptr_t lse;               /* 0: a decode step keeps no statistics */
  tecore_devptr_t ws;
  size_t wsb;
};

void gpt_decoder_create(struct gpt_decoder *d, const struct gpt_model *m);
void gpt_decoder_destroy(struct gpt_decoder *d);
/* Runs token at position pos (0 .. seq - 1; the cache holds positions
 * 0 .. pos - 1 from earlier steps): d->logits, BF16 [1][vocab], on s. */
void gpt_decode_step(struct gpt_decoder *d, int token, int pos, tecore_stream_t s);

#endif
