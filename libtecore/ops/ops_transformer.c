/* SPDX-License-Identifier: Apache-2.0 */
/* ops_transformer.c -- tecore_seq_add_transformer (te/transformer.h): a
 * pre-norm transformer block as the fuser's own operations.
 *
 *   make_extra_output(slot) norm [tp_copy] linear(qkv) [rope] attention
 *   linear(proj) [tp_reduce] add_extra_input(slot)
 *   make_extra_output(slot) norm [tp_copy] linear(fc1) act linear(fc2)
 *   [tp_reduce] add_extra_input(slot)
 *
 * The order is chosen for the fuser's patterns: linear+bias+act (GEMM
 * epilogue) forward, and at a block boundary (or between the two halves)
 * [tp_reduce, add_extra_input, make_extra_output, rmsnorm, tp_copy], which
 * libtecomm runs as one allreduce+add+rmsnorm call.  sequence_parallel:
 * allgather for tp_copy and reduce_scatter for tp_reduce, the norms and
 * the residual slot on this rank's rows.  Every field is checked
 * first, with a message naming it; should an operation still be refused,
 * the ones appended before it are taken back, so a failed call leaves the
 * sequence as it was. */
#include "ops/ops_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <te/transformer.h>

static const char fn[] = "tecore_seq_add_transformer";

/* The features of the sequence's output so far. */
static size_t cur_features(const tecore_seq_t *s) {
  return s->nops ? s->ops[s->nops - 1].out_cols : s->cfg.features;
}

/* The rows of the sequence's output so far. */
static size_t cur_rows(const tecore_seq_t *s) {
  return s->nops ? s->ops[s->nops - 1].out_rows : s->cfg.rows;
}

static int is_act(int a) {
  return a == TECORE_OP_GELU || a == TECORE_OP_RELU || a == TECORE_OP_SILU ||
         a == TECORE_OP_QGELU || a == TECORE_OP_SWIGLU || a == TECORE_OP_GEGLU ||
         a == TECORE_OP_REGLU;
}

static int is_gated(int a) {
  return a == TECORE_OP_SWIGLU || a == TECORE_OP_GEGLU || a == TECORE_OP_REGLU;
}

static tecore_result_t check_01(int v, const char *name) {
  TE_ARG(v == 0 || v == 1, "%s: d->%s is %d, not 0 or 1", fn, name, v);
  return TECORE_SUCCESS;
}

/* heads, head_dim, ffn, norm, activation, biases. */
static tecore_result_t check_shape(const tecore_seq_t *s, const struct tecore_transformer_desc *d) {
  size_t f = cur_features(s);
  TE_ARG(d->hidden >= 1 && d->hidden == f, "%s: d->hidden is %zu, but the sequence's output has "
         "%zu features here (the block maps hidden to hidden)", fn, d->hidden, f);
  TE_ARG(d->heads >= 1 && d->heads <= 4096, "%s: d->heads %d is not in 1..4096", fn, d->heads);
  TE_ARG(d->kv_heads >= 0 && d->kv_heads <= d->heads, "%s: d->kv_heads %d is not in 0..heads "
         "(%d; 0: heads)", fn, d->kv_heads, d->heads);
  int kvh = d->kv_heads ? d->kv_heads : d->heads;
  TE_ARG(d->heads % kvh == 0, "%s: d->heads %d is not a multiple of d->kv_heads %d", fn, d->heads,
         kvh);
  TE_ARG(d->head_dim >= 0, "%s: d->head_dim %d is negative", fn, d->head_dim);
  TE_ARG(d->head_dim || d->hidden % (size_t)d->heads == 0, "%s: d->head_dim is 0 (hidden / "
         "heads), but d->hidden %zu is not a multiple of d->heads %d", fn, d->hidden, d->heads);
  int hd = d->head_dim ? d->head_dim : (int)(d->hidden / (size_t)d->heads);
  TE_ARG(hd % 8 == 0 && hd <= 256, "%s: the head dimension %d (d->head_dim, or hidden / heads) "
         "is not a multiple of 8 in 8..256 (attention's kernels)", fn, hd);
  /* bounded like a Linear's width (2^40), so that a gated MLP's 2 ffn
   * features cannot wrap */
  TE_ARG(d->ffn >= 1 && d->ffn <= (size_t)1 << 40, "%s: d->ffn %zu (the MLP width) is not in "
         "1..2^40", fn, d->ffn);
  TE_ARG(d->norm == TECORE_OP_LAYERNORM || d->norm == TECORE_OP_RMSNORM, "%s: d->norm %d is not "
         "TECORE_OP_LAYERNORM or TECORE_OP_RMSNORM", fn, d->norm);
  TE_ARG(isfinite(d->epsilon) && d->epsilon >= 0.0f, "%s: d->epsilon %g is not 0 (1e-5) or "
         "positive", fn, (double)d->epsilon);
  TE_ARG((d->norm_flags & ~TECORE_NORM_ZERO_CENTERED_GAMMA) == 0, "%s: d->norm_flags 0x%x has "
         "bits other than TECORE_NORM_ZERO_CENTERED_GAMMA", fn, d->norm_flags);
  TE_ARG(is_act(d->activation), "%s: d->activation %d is not TECORE_OP_GELU, RELU, SILU, QGELU, "
         "SWIGLU, GEGLU or REGLU", fn, d->activation);
  TE_CHECK(check_01(d->qkv_bias, "qkv_bias"));
  TE_CHECK(check_01(d->proj_bias, "proj_bias"));
  TE_CHECK(check_01(d->mlp_bias, "mlp_bias"));
  return TECORE_SUCCESS;
}

/* rope, attention, the sequence structure, the slot. */
static tecore_result_t check_attn(const tecore_seq_t *s, const struct tecore_transformer_desc *d) {
  int hd = d->head_dim ? d->head_dim : (int)(d->hidden / (size_t)d->heads);
  TE_CHECK(check_01(d->rope, "rope"));
  if (d->rope) {
    TE_ARG(d->rope_style == TECORE_ROPE_HALVES || d->rope_style == TECORE_ROPE_INTERLEAVED,
           "%s: d->rope_style %d is not TECORE_ROPE_HALVES or TECORE_ROPE_INTERLEAVED", fn,
           d->rope_style);
    TE_ARG(isfinite(d->rope_theta) && (d->rope_theta == 0.0f || d->rope_theta > 1.0f),
           "%s: d->rope_theta %g is not 0 (10000) or a base > 1", fn, (double)d->rope_theta);
    TE_ARG(d->rotary_dim >= 0 && d->rotary_dim % 2 == 0 && d->rotary_dim <= hd, "%s: "
           "d->rotary_dim %d is not 0 (head_dim) or even and <= the head dimension %d", fn,
           d->rotary_dim, hd);
  } else {
    TE_ARG(d->rope_style == 0 && d->rope_theta == 0.0f && d->rotary_dim == 0, "%s: d->rope is 0 "
           "but d->rope_style, d->rope_theta or d->rotary_dim is set (a block without RoPE?)",
           fn);
  }
  TE_ARG((d->attn_flags & ~(TECORE_ATTN_CAUSAL | TECORE_ATTN_WINDOW)) == 0, "%s: d->attn_flags "
         "0x%x has bits other than TECORE_ATTN_CAUSAL and TECORE_ATTN_WINDOW", fn, d->attn_flags);
  TE_ARG((d->attn_flags & TECORE_ATTN_WINDOW) || d->window_left == 0, "%s: d->window_left is "
         "%zu without TECORE_ATTN_WINDOW in d->attn_flags", fn, d->window_left);
  TE_ARG(isfinite(d->attn_scale) && d->attn_scale >= 0.0f, "%s: d->attn_scale %g is not 0 "
         "(1 / sqrt(head_dim)) or positive", fn, (double)d->attn_scale);
  /* the attention's rows: gathered ones under sequence parallelism */
  size_t rows = cur_rows(s) * (d->sequence_parallel && d->tp_size > 1 ? (size_t)d->tp_size : 1);
  TE_ARG(d->batch >= 1, "%s: d->batch is 0 (the number of sequences)", fn);
  TE_ARG(d->max_seqlen >= 1 && d->max_seqlen <= rows, "%s: d->max_seqlen %zu is not in 1..%zu "
         "(the attention's rows)", fn, d->max_seqlen, rows);
  TE_ARG(d->cu_seqlens % 4 == 0, "%s: d->cu_seqlens 0x%llx is not 4-byte aligned (int32)", fn,
         (unsigned long long)d->cu_seqlens);
  TE_ARG(d->cu_seqlens || d->batch * d->max_seqlen == rows, "%s: d->cu_seqlens is 0, so the rows "
         "are d->batch * d->max_seqlen (%zu * %zu), but the attention has %zu", fn, d->batch,
         d->max_seqlen, rows);
  TE_ARG(d->slot >= 0 && d->slot < TECORE_SEQ_MAX_SLOTS, "%s: d->slot %d is not in 0..%d", fn,
         d->slot, TECORE_SEQ_MAX_SLOTS - 1);
  int last = s->slot_last[d->slot];
  TE_ARG(last < 0 || s->pairs[last].adder >= 0, "%s: d->slot %d is open (made by op %d and not "
         "added yet): give the block a free slot", fn, d->slot, last >= 0 ? s->pairs[last].maker
         : -1);
  return TECORE_SUCCESS;
}

static tecore_result_t check_tp(const struct tecore_transformer_desc *d) {
  TE_ARG(d->tp_size >= 0, "%s: d->tp_size %d is negative", fn, d->tp_size);
  TE_CHECK(check_01(d->sequence_parallel, "sequence_parallel"));
  TE_ARG(!d->sequence_parallel || d->tp_size > 1, "%s: d->sequence_parallel is 1, but "
         "d->tp_size is %d (it splits rows over the tensor-parallel ranks: tp_size > 1)", fn,
         d->tp_size);
  if (d->tp_size <= 1) {
    TE_ARG(d->tp_rank == 0 && !d->tp_ctx && !d->tp_copy_ctx, "%s: d->tp_size is %d (no tensor "
           "parallelism), but d->tp_rank, d->tp_ctx or d->tp_copy_ctx is set", fn, d->tp_size);
    return TECORE_SUCCESS;
  }
  int tp = d->tp_size, kvh = d->kv_heads ? d->kv_heads : d->heads;
  TE_ARG(d->tp_rank >= 0 && d->tp_rank < tp, "%s: d->tp_rank %d is not in 0..%d", fn, d->tp_rank,
         tp - 1);
  TE_ARG(d->tp_ctx, "%s: d->tp_size is %d but d->tp_ctx is NULL (libtecomm: a struct "
         "tecomm_op_params)", fn, tp);
  TE_ARG(d->heads % tp == 0 && kvh % tp == 0, "%s: d->heads %d and d->kv_heads %d must both be "
         "multiples of d->tp_size %d (whole heads per rank)", fn, d->heads, kvh, tp);
  TE_ARG(d->ffn % (size_t)tp == 0, "%s: d->ffn %zu is not a multiple of d->tp_size %d", fn,
         d->ffn, tp);
  return TECORE_SUCCESS;
}

/* ---- the operations ---------------------------------------------------------------------- */

struct block_ops {
  struct tecore_op_desc op[20];
  size_t n;
  struct tecore_op_rope_args rope;
  struct tecore_op_attention_args attn;
};

static void push(struct block_ops *b, struct tecore_op_desc d) { b->op[b->n++] = d; }

/* before a column-parallel Linear: the whole input on every rank */
static int copy_kind(const struct tecore_transformer_desc *d) {
  return d->sequence_parallel ? TECORE_OP_ALLGATHER : TECORE_OP_TP_COPY;
}

/* after a row-parallel one: the partial sums summed (each rank its rows) */
static int reduce_kind(const struct tecore_transformer_desc *d) {
  return d->sequence_parallel ? TECORE_OP_REDUCE_SCATTER : TECORE_OP_TP_REDUCE;
}

static void attention_half(struct block_ops *b, const struct tecore_transformer_desc *d,
                           float eps) {
  int tp = d->tp_size > 1 ? d->tp_size : 1;
  int kvh = d->kv_heads ? d->kv_heads : d->heads;
  int hd = d->head_dim ? d->head_dim : (int)(d->hidden / (size_t)d->heads);
  int h = d->heads / tp, kv = kvh / tp;
  void *cctx = d->tp_copy_ctx ? d->tp_copy_ctx : d->tp_ctx;
  b->rope = (struct tecore_op_rope_args){.heads = h, .kv_heads = kv, .head_dim = hd,
                                         .rotary_dim = d->rotary_dim, .theta = d->rope_theta,
                                         .style = d->rope_style, .cu_seqlens = d->cu_seqlens,
                                         .batch = d->batch, .max_seqlen = d->max_seqlen};
  b->attn = (struct tecore_op_attention_args){.heads = h, .kv_heads = kv, .head_dim = hd,
                                              .scale = d->attn_scale, .flags = d->attn_flags,
                                              .window_left = d->window_left,
                                              .cu_seqlens = d->cu_seqlens, .batch = d->batch,
                                              .max_seqlen = d->max_seqlen};
  push(b, (struct tecore_op_desc){.kind = TECORE_OP_MAKE_EXTRA_OUTPUT, .slot = d->slot});
  push(b, (struct tecore_op_desc){.kind = d->norm, .epsilon = eps, .norm_flags = d->norm_flags});
  if (tp > 1) push(b, (struct tecore_op_desc){.kind = copy_kind(d), .ctx = cctx});
  push(b, (struct tecore_op_desc){.kind = TECORE_OP_LINEAR,
                                  .features = (size_t)(h + 2 * kv) * (size_t)hd,
                                  .bias = d->qkv_bias});
  if (d->rope) push(b, (struct tecore_op_desc){.kind = TECORE_OP_ROPE, .ctx = &b->rope});
  push(b, (struct tecore_op_desc){.kind = TECORE_OP_ATTENTION, .ctx = &b->attn});
  /* row-parallel: the bias is added once, on rank 0, before the sum */
  push(b, (struct tecore_op_desc){.kind = TECORE_OP_LINEAR, .features = d->hidden,
                                  .bias = d->proj_bias && d->tp_rank == 0});
  if (tp > 1) push(b, (struct tecore_op_desc){.kind = reduce_kind(d), .ctx = d->tp_ctx});
  push(b, (struct tecore_op_desc){.kind = TECORE_OP_ADD_EXTRA_INPUT, .slot = d->slot});
}

static void mlp_half(struct block_ops *b, const struct tecore_transformer_desc *d, float eps) {
  int tp = d->tp_size > 1 ? d->tp_size : 1;
  size_t f = d->ffn / (size_t)tp;
  void *cctx = d->tp_copy_ctx ? d->tp_copy_ctx : d->tp_ctx;
  push(b, (struct tecore_op_desc){.kind = TECORE_OP_MAKE_EXTRA_OUTPUT, .slot = d->slot});
  push(b, (struct tecore_op_desc){.kind = d->norm, .epsilon = eps, .norm_flags = d->norm_flags});
  if (tp > 1) push(b, (struct tecore_op_desc){.kind = copy_kind(d), .ctx = cctx});
  push(b, (struct tecore_op_desc){.kind = TECORE_OP_LINEAR,
                                  .features = is_gated(d->activation) ? 2 * f : f,
                                  .bias = d->mlp_bias});
  push(b, (struct tecore_op_desc){.kind = d->activation});
  push(b, (struct tecore_op_desc){.kind = TECORE_OP_LINEAR, .features = d->hidden,
                                  .bias = d->mlp_bias && d->tp_rank == 0});
  if (tp > 1) push(b, (struct tecore_op_desc){.kind = reduce_kind(d), .ctx = d->tp_ctx});
  push(b, (struct tecore_op_desc){.kind = TECORE_OP_ADD_EXTRA_INPUT, .slot = d->slot});
}

/* What tecore_seq_add changes, to take a partly appended block back. */
struct undo {
  size_t nops, npairs, nlinear;
  int slot_last[TECORE_SEQ_MAX_SLOTS];
  struct te_slot *pairs;
};

static tecore_result_t undo_save(const tecore_seq_t *s, struct undo *u) {
  u->nops = s->nops;
  u->npairs = s->npairs;
  u->nlinear = s->nlinear;
  memcpy(u->slot_last, s->slot_last, sizeof u->slot_last);
  u->pairs = NULL;
  if (!s->npairs) return TECORE_SUCCESS;
  u->pairs = malloc(s->npairs * sizeof *u->pairs);
  if (!u->pairs) return TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
  memcpy(u->pairs, s->pairs, s->npairs * sizeof *u->pairs);
  return TECORE_SUCCESS;
}

static void undo_apply(tecore_seq_t *s, const struct undo *u) {
  s->nops = u->nops;
  s->npairs = u->npairs;
  s->nlinear = u->nlinear;
  memcpy(s->slot_last, u->slot_last, sizeof s->slot_last);
  if (u->npairs) memcpy(s->pairs, u->pairs, u->npairs * sizeof *u->pairs);
}

TE_EXPORT tecore_result_t tecore_seq_add_transformer(tecore_seq_t *s,
                                                     const struct tecore_transformer_desc *d) {
  TE_CHECK(te_seq_arg(s, fn));
  TE_ARG(d, "%s: d is NULL", fn);
  TE_ARG(!s->built, "%s: the sequence is built; blocks are added before tecore_seq_build", fn);
  TE_CHECK(check_shape(s, d));
  TE_CHECK(check_attn(s, d));
  TE_CHECK(check_tp(d));
  float eps = d->epsilon > 0.0f ? d->epsilon : 1e-5f;
  struct block_ops *b = calloc(1, sizeof *b);
  if (!b) return TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
  attention_half(b, d, eps);
  mlp_half(b, d, eps);
  struct undo u;
  tecore_result_t r = undo_save(s, &u);
  for (size_t k = 0; r == TECORE_SUCCESS && k < b->n; k++) {
    r = tecore_seq_add(s, &b->op[k], NULL);
    if (r != TECORE_SUCCESS) {
      te_error_hop(__func__, __FILE__, __LINE__);
      undo_apply(s, &u);
    }
  }
  free(u.pairs);
  free(b);
  return r;
}
