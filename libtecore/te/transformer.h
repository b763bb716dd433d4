/* SPDX-License-Identifier: Apache-2.0 */
/* te/transformer.h -- a whole pre-norm transformer block appended to a
 * fuser sequence (te/ops.h) from one descriptor:
 *
 *   x -> norm -> QKV Linear -> RoPE -> attention -> output Linear -> + x
 *     -> norm -> Linear (fc1) -> activation -> Linear (fc2) -> + (the sum before)
 *
 * The block is made of the fuser's own operations (the residuals are one
 * residual slot made and added twice), so the fuser plans and fuses it
 * like any other sequence, and tecore_seq_params lists its parameters in
 * the fixed order of tecore_seq_add_transformer(3).  With tp_size > 1 the
 * heads and the MLP width are split across the ranks (column-parallel
 * QKV and fc1, row-parallel output Linear and fc2), the sums through
 * libtecomm's TP_COPY / TP_REDUCE operations (te/comm.h), whose
 * parameters the caller passes as tp_ctx; sequence_parallel puts the
 * ALLGATHER / REDUCE_SCATTER pair in their places. */
#ifndef TE_TRANSFORMER_H
#define TE_TRANSFORMER_H

#include <stddef.h>
#include <te/result.h>
#include <te/ops.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A block.  Zero the struct, then set the fields; a zero field takes the
 * default written beside it.  Field by field in
 * tecore_seq_add_transformer(3). */
struct tecore_transformer_desc {
  size_t hidden;          /* the block's input and output features (the sequence's current ones) */
  int heads;              /* query heads (>= 1) */
  int kv_heads;           /* key/value heads; divides heads; 0: heads */
  int head_dim;           /* 0: hidden / heads; a multiple of 8, <= 256 */
  size_t ffn;             /* MLP width; gated activations: the width of each half */
  int norm;               /* TECORE_OP_LAYERNORM or TECORE_OP_RMSNORM */
  float epsilon;          /* the norms' epsilon; 0: 1e-5 */
  unsigned norm_flags;    /* the norms' TECORE_NORM_* (te/norm.h) */
  int activation;         /* TECORE_OP_GELU, RELU, SILU, QGELU, SWIGLU, GEGLU or REGLU */
  int qkv_bias;           /* 1: the QKV Linear has a bias */
  int proj_bias;          /* 1: the attention output Linear has a bias */
  int mlp_bias;           /* 1: fc1 and fc2 have biases */
  int rope;               /* 1: RoPE on Q and K; 0: none */
  int rope_style;         /* tecore_rope_style_t (te/rope.h) */
  float rope_theta;       /* 0: 10000 */
  int rotary_dim;         /* even, <= head_dim; 0: head_dim */
  unsigned attn_flags;    /* TECORE_ATTN_CAUSAL, TECORE_ATTN_WINDOW (te/attention.h) */
  size_t window_left;     /* with TECORE_ATTN_WINDOW */
  float attn_scale;       /* 0: 1 / sqrt(head_dim) */
  tecore_devptr_t cu_seqlens; /* int32 [batch + 1], or 0: as struct tecore_op_attention_args */
  size_t batch, max_seqlen;   /* the sequence structure (te/ops.h) */
  int slot;               /* the residual slot the block uses (made and added twice) */
  int tp_size;            /* ranks the block is split over; 0 or 1: none */
  int tp_rank;            /* this rank, 0 .. tp_size - 1 */
  void *tp_ctx;           /* tp_size > 1: desc.ctx of the TP_REDUCE operations
                             (libtecomm: a struct tecomm_op_params, the caller's,
                             outliving the sequence) */
  void *tp_copy_ctx;      /* desc.ctx of the TP_COPY operations; NULL: tp_ctx */
  int sequence_parallel;  /* 1 (tp_size > 1): the block's input and output are this
                             rank's rows (rows / tp_size of the gathered ones): the
                             norms and residuals on them, ALLGATHER before QKV and
                             fc1 (tp_copy_ctx), REDUCE_SCATTER after the output
                             Linear and fc2 (tp_ctx); batch * max_seqlen counts the
                             gathered rows */
};

/* Appends the block's operations to seq (before tecore_seq_build), in
 * forward order; *d is copied (it need not outlive the call; what
 * tp_ctx and cu_seqlens point to must).  On failure nothing is appended. */
tecore_result_t tecore_seq_add_transformer(tecore_seq_t *seq,
                                           const struct tecore_transformer_desc *d);

#ifdef __cplusplus
}
#endif
#endif
