/* SPDX-License-Identifier: Apache-2.0
 * gpt_decode.h -- te-gpt's decode step with a KV cache (gpt_decode.c):
 * the model's parameters where the fuser sequence keeps them, a key and
 * value cache per layer for seq positions, the step's buffers and its
 * graph.  --tp: this rank's heads and MLP columns, the row-parallel
 * Linears' partial sums summed over the ranks before the residual add, so
 * every rank holds the same residual and logits; every rank runs every
 * step (the sums are collective). */
#ifndef TE_GPT_DECODE_H
#define TE_GPT_DECODE_H

#include "gpt.h"

struct gpt_decoder {
  const struct gpt_model *m;
  struct { struct tecore_tensor gamma, beta; int has_beta; } *norm;   /* 2 layers + 1 */
  /* w16: a BF16 copy of an F32 weight (FP8 training's, TECORE_SEQ_F32_WEIGHTS), or 0 */
  struct { struct tecore_tensor w, b; int has_b; tecore_devptr_t w16; } *lin; /* 4 layers + 1 */
  int heads, kv_heads, ffn;          /* this rank's (--tp: the model's / tp) */
  tecore_devptr_t *kvc;              /* per layer BF16 [seq][2][kv_heads * head_dim]: key, value */
  size_t qkv_w, f1_w;
  tecore_devptr_t x, h, o, qkv, f1, a, logits;   /* BF16 [1][...] */
  tecore_devptr_t part;              /* --tp: BF16 [1][hidden], a row-parallel partial sum */
  /* int32 {token, pos, 0, pos + 1, 0, 1}: the step's token and position,
   * the keys' and the query's cu_seqlens, all read by the kernels */
  tecore_devptr_t meta;
  int32_t *meta_host;                /* pinned staging of meta's first four */
  tecore_devptr_t ws;
  size_t wsb;
  int use_graph;                     /* replay the step as one graph (from its second call) */
  int steps;                         /* steps run */
  struct tegraph_graph *graph;
};

/* The decoder of m; use_graph: the step is captured once (after one eager
 * step) and replayed. */
void gpt_decoder_create(struct gpt_decoder *d, const struct gpt_model *m, int use_graph);
void gpt_decoder_destroy(struct gpt_decoder *d);
/* Runs token at position pos (0 .. seq - 1; the cache holds positions
 * 0 .. pos - 1 from earlier steps): d->logits, BF16 [1][vocab], on s. */
void gpt_decode_step(struct gpt_decoder *d, int token, int pos, tecore_stream_t s);

#endif
