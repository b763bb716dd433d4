/* SPDX-License-Identifier: Apache-2.0 */
/* ops_attn.c -- the fuser's RoPE and attention kinds (te/ops.h): a packed
 * QKV activation [rows][(heads + 2 kv_heads) head_dim], rows the tokens of
 * packed sequences (cu_seqlens, or batch * max_seqlen fixed), through
 * te/rope.h and te/attention.h.
 *
 *   ROPE       forward: out = in, then Q and K of out rotated in place
 *              (one copy and one in-place rotation: libtecore has no
 *              strided copy for V alone); backward: dQ and dK rotated
 *              back where the gradient lies (the kind aliases its
 *              gradient), dV untouched.
 *   ATTENTION  forward: O [rows][heads head_dim] and lse [heads][rows]
 *              from the packed views; backward: the packed dQKV from dO,
 *              QKV, O and lse.  F32 sequences run it on bf16 copies
 *              (attention takes 16-bit operands): the input's and the
 *              output's are kept from the forward for the backward, dO
 *              and dQKV go through bf16 scratch of the op.
 * With cu_seqlens, rows past the last sequence are padding: attention
 * writes none of them, so O and dQKV are zeroed first (a Linear reading
 * them must see zeros, not stale bytes or NaN). */
#include "ops/ops_internal.h"

#include <math.h>
#include <string.h>

static const char add_fn[] = "tecore_seq_add";

/* ---- checks at tecore_seq_add ------------------------------------------------------------ */

/* The heads of a packed QKV and the sequence structure, common to both. */
static tecore_result_t check_heads(const char *kn, int heads, int kv_heads, int head_dim,
                                   const struct tecore_op_shape *sh) {
  /* RoPE's and attention's bound, which also keeps heads + 2 kv_heads an int */
  TE_ARG(heads >= 1 && heads <= 65536 && kv_heads >= 1 && kv_heads <= 65536,
         "%s: %s: ctx->heads %d and ctx->kv_heads %d must be in 1..65536", add_fn, kn, heads,
         kv_heads);
  TE_ARG(heads % kv_heads == 0, "%s: %s: ctx->heads %d is not a multiple of ctx->kv_heads %d",
         add_fn, kn, heads, kv_heads);
  TE_ARG(head_dim >= 1 && head_dim <= 4096, "%s: %s: ctx->head_dim %d is not in 1..4096", add_fn,
         kn, head_dim);
  size_t qkv = ((size_t)heads + 2 * (size_t)kv_heads) * (size_t)head_dim;
  TE_ARG(sh->in_features == qkv, "%s: %s: the input has %zu features, but a packed QKV of %d "
         "query heads, %d key and %d value heads of %d has (heads + 2 kv_heads) head_dim = %zu",
         add_fn, kn, sh->in_features, heads, kv_heads, kv_heads, head_dim, qkv);
  return TECORE_SUCCESS;
}

static tecore_result_t check_seqs(const char *kn, tecore_devptr_t cu, size_t batch,
                                  size_t max_seqlen, size_t rows) {
  TE_ARG(batch >= 1 && batch <= INT32_MAX, "%s: %s: ctx->batch %zu is not in 1..%d", add_fn, kn,
         batch, INT32_MAX);
  TE_ARG(max_seqlen >= 1 && max_seqlen <= rows, "%s: %s: ctx->max_seqlen %zu is not in 1..%zu "
         "(the sequence's rows)", add_fn, kn, max_seqlen, rows);
  if (cu) {
    TE_ARG(cu % 4 == 0, "%s: %s: ctx->cu_seqlens 0x%llx is not 4-byte aligned (int32)", add_fn,
           kn, (unsigned long long)cu);
    TE_ARG(rows <= INT32_MAX, "%s: %s: %zu rows exceed an int32 cu_seqlens", add_fn, kn, rows);
    return TECORE_SUCCESS;
  }
  TE_ARG(batch * max_seqlen == rows, "%s: %s: without ctx->cu_seqlens the rows are ctx->batch "
         "%zu sequences of ctx->max_seqlen %zu tokens, but the sequence has %zu rows", add_fn,
         kn, batch, max_seqlen, rows);
  return TECORE_SUCCESS;
}

tecore_result_t te_rope_shape(const struct tecore_op_desc *d, struct tecore_op_shape *sh,
                              void *ctx) {
  (void)ctx;
  TE_ARG(d->ctx, "%s: desc->ctx is NULL; rope takes a struct tecore_op_rope_args there", add_fn);
  const struct tecore_op_rope_args *r = d->ctx;
  TE_CHECK(check_heads("rope", r->heads, r->kv_heads, r->head_dim, sh));
  TE_ARG(r->head_dim % 2 == 0, "%s: rope: ctx->head_dim %d is odd (rotation pairs elements)",
         add_fn, r->head_dim);
  TE_ARG(r->rotary_dim >= 0 && r->rotary_dim % 2 == 0 && r->rotary_dim <= r->head_dim,
         "%s: rope: ctx->rotary_dim %d is not even in 0..head_dim %d", add_fn, r->rotary_dim,
         r->head_dim);
  TE_ARG(r->style == TECORE_ROPE_HALVES || r->style == TECORE_ROPE_INTERLEAVED,
         "%s: rope: ctx->style %d is neither TECORE_ROPE_HALVES nor TECORE_ROPE_INTERLEAVED",
         add_fn, r->style);
  TE_ARG(isfinite(r->theta) && (r->theta == 0.0f || r->theta > 1.0f),
         "%s: rope: ctx->theta %g is not 0 (10000) or a finite base > 1", add_fn,
         (double)r->theta);
  return check_seqs("rope", r->cu_seqlens, r->batch, r->max_seqlen, sh->in_rows);
}

tecore_result_t te_attn_shape(const struct tecore_op_desc *d, struct tecore_op_shape *sh,
                              void *ctx) {
  (void)ctx;
  TE_ARG(d->ctx, "%s: desc->ctx is NULL; attention takes a struct tecore_op_attention_args there",
         add_fn);
  const struct tecore_op_attention_args *a = d->ctx;
  TE_CHECK(check_heads("attention", a->heads, a->kv_heads, a->head_dim, sh));
  TE_ARG(a->head_dim % 8 == 0 && a->head_dim <= 256, "%s: attention: ctx->head_dim %d is not a "
         "multiple of 8 up to 256", add_fn, a->head_dim);
  TE_ARG(isfinite(a->scale) && a->scale >= 0.0f, "%s: attention: ctx->scale %g is not 0 "
         "(1/sqrt(head_dim)) or a finite value > 0", add_fn, (double)a->scale);
  TE_ARG((a->flags & ~(TECORE_ATTN_CAUSAL | TECORE_ATTN_WINDOW)) == 0, "%s: attention: "
         "ctx->flags 0x%x has bits other than TECORE_ATTN_CAUSAL and TECORE_ATTN_WINDOW", add_fn,
         a->flags);
  TE_ARG((a->flags & TECORE_ATTN_WINDOW) || a->window_left == 0, "%s: attention: "
         "ctx->window_left %zu without TECORE_ATTN_WINDOW (must be 0)", add_fn, a->window_left);
  TE_CHECK(check_seqs("attention", a->cu_seqlens, a->batch, a->max_seqlen, sh->in_rows));
  sh->out_features = (size_t)a->heads * (size_t)a->head_dim;
  return TECORE_SUCCESS;
}

/* ---- RoPE ------------------------------------------------------------------------------------ */

static const struct te_op *op_of(const struct tecore_seq_exec *x) {
  return &x->seq->ops[x->first];
}

static size_t bytes_of(const struct tecore_tensor *t) {
  return t->shape[0] * t->shape[1] * tecore_dtype_size(t->dtype);
}

/* Q and K of the packed QKV at p, rotated in place (inverse: backward). */
static tecore_result_t rope_in_place(const struct tecore_seq_exec *x, tecore_devptr_t p,
                                     int inverse) {
  const struct tecore_op_rope_args *r = &op_of(x)->prm.rope;
  size_t es = tecore_dtype_size(x->seq->cfg.dtype), w = x->act[0].shape[1];
  size_t d = (size_t)r->head_dim;
  struct tecore_rope_view q = {.data = p, .token_stride = w, .head_stride = d};
  struct tecore_rope_view k = {.data = p + (size_t)r->heads * d * es, .token_stride = w,
                               .head_stride = d};
  struct tecore_rope_args a = {
      .dtype = x->seq->cfg.dtype, .tokens = x->act[0].shape[0], .q_heads = r->heads,
      .k_heads = r->kv_heads, .head_dim = r->head_dim, .rotary_dim = r->rotary_dim,
      .style = (tecore_rope_style_t)r->style, .theta = r->theta, .cu_seqlens = r->cu_seqlens,
      .batch = r->cu_seqlens ? r->batch : 0, .seq_len = r->cu_seqlens ? 0 : r->max_seqlen,
      .q_in = q, .q_out = q, .k_in = k, .k_out = k};
  return inverse ? tecore_rope_bwd(&a, x->stream) : tecore_rope_fwd(&a, x->stream);
}

tecore_result_t te_rope_op_fwd(const struct tecore_seq_exec *x) {
  TE_CHECK(tecore_memcpy_async(x->act[1].data, x->act[0].data, bytes_of(&x->act[0]), x->stream));
  return rope_in_place(x, x->act[1].data, 0);
}

tecore_result_t te_rope_op_bwd(const struct tecore_seq_exec *x) {
  /* the gradient is aliased but at the sequence's ends (the caller's dx / dy) */
  if (x->grad[0].data != x->grad[1].data)
    TE_CHECK(tecore_memcpy_async(x->grad[0].data, x->grad[1].data, bytes_of(&x->grad[1]),
                                 x->stream));
  return rope_in_place(x, x->grad[0].data, 1);
}

/* ---- attention ------------------------------------------------------------------------------- */

/* The arguments of op's attention on packed QKV at qkv and O at out
 * (dtype dt), without the backward's gradients. */
static void attn_args(const struct te_op *o, tecore_dtype_t dt, tecore_devptr_t qkv,
                      tecore_devptr_t out, struct tecore_attention_args *a) {
  const struct tecore_op_attention_args *p = &o->prm.attn;
  size_t es = tecore_dtype_size(dt), d = (size_t)p->head_dim, w = o->in_cols;
  size_t rows = o->in_rows;
  memset(a, 0, sizeof *a);
  a->batch = p->batch;
  a->cu_seqlens_q = a->cu_seqlens_kv = p->cu_seqlens;
  a->max_seqlen_q = a->max_seqlen_kv = p->max_seqlen;
  a->tokens_q = a->tokens_kv = p->cu_seqlens ? rows : 0;
  a->heads = p->heads;
  a->kv_heads = p->kv_heads;
  a->head_dim = p->head_dim;
  a->scale = p->scale > 0.0f ? p->scale : (float)(1.0 / sqrt((double)p->head_dim));
  a->flags = p->flags;
  a->window_left = p->window_left;
  a->dtype = a->o_dtype = dt;
  a->q = (struct tecore_attn_view){.data = qkv, .token_stride = w, .head_stride = d};
  a->k = a->q;
  a->k.data = qkv + (size_t)p->heads * d * es;
  a->v = a->q;
  a->v.data = qkv + (size_t)(p->heads + p->kv_heads) * d * es;
  a->o = (struct tecore_attn_view){.data = out};
  a->lse = o->lse;
}

/* The dtype attention runs in: the sequence's, or bf16 for F32 ones. */
static tecore_dtype_t attn_dtype(const tecore_seq_t *s) {
  return s->cfg.dtype == TECORE_DTYPE_F32 ? TECORE_DTYPE_BF16 : s->cfg.dtype;
}

tecore_result_t te_attn_ws(const struct tecore_op_desc *d, size_t rows, size_t cols,
                           size_t *bytes, void *ctx) {
  (void)ctx;
  struct te_op o;
  memset(&o, 0, sizeof o);
  memcpy(&o.prm.attn, d->ctx, sizeof o.prm.attn);
  o.in_rows = rows;
  o.in_cols = cols;
  static const tecore_dtype_t dts[2] = {TECORE_DTYPE_BF16, TECORE_DTYPE_F16};
  *bytes = 0;
  for (int k = 0; k < 4; k++) {
    struct tecore_attention_args a;
    /* addresses that only look valid: the size reads no pointer, but
     * checks the arguments as a call would */
    struct tecore_attention_args g;
    attn_args(&o, dts[k / 2], (tecore_devptr_t)1 << 30, (tecore_devptr_t)2 << 30, &a);
    attn_args(&o, dts[k / 2], (tecore_devptr_t)3 << 30, (tecore_devptr_t)4 << 30, &g);
    a.lse = (tecore_devptr_t)5 << 30;
    a.d_o = g.o;
    a.dq = g.q;
    a.dk = g.k;
    a.dv = g.v;
    size_t w = 0;
    TE_CHECK(tecore_attention_workspace_size(&a, k % 2, &w));
    if (w > *bytes) *bytes = w;
  }
  return TECORE_SUCCESS;
}

tecore_result_t te_attn_op_alloc(tecore_seq_t *s, size_t i) {
  struct te_op *o = &s->ops[i];
  const int train = !te_seq_infer(s);
  size_t rows = o->in_rows, in = rows * o->in_cols * 2, out = rows * o->out_cols * 2;
  if (train) TE_CHECK(te_seq_alloc(s, (size_t)o->prm.attn.heads * rows * 4, 0, &o->lse));
  if (s->cfg.dtype != TECORE_DTYPE_F32) return TECORE_SUCCESS;
  TE_CHECK(te_seq_alloc(s, in, 0, &o->qkv16));
  TE_CHECK(te_seq_alloc(s, out, 0, &o->o16));
  if (!train) return TECORE_SUCCESS;
  TE_CHECK(te_seq_alloc(s, out, 0, &o->do16));
  return te_seq_alloc(s, in, 0, &o->dqkv16);
}

/* Zeroes bytes at p when the rows may end in padding (cu_seqlens). */
static tecore_result_t zero_padding(const struct te_op *o, tecore_devptr_t p, size_t bytes,
                                    tecore_stream_t stream) {
  if (!o->prm.attn.cu_seqlens) return TECORE_SUCCESS;
  return tecore_memset_d8_async(p, 0, bytes, stream);
}

tecore_result_t te_attn_op_fwd(const struct tecore_seq_exec *x) {
  tecore_seq_t *s = x->seq;
  const struct te_op *o = op_of(x);
  tecore_dtype_t dt = attn_dtype(s);
  int f32 = s->cfg.dtype == TECORE_DTYPE_F32;
  size_t nin = o->in_rows * o->in_cols, nout = o->out_rows * o->out_cols;
  tecore_devptr_t qkv = x->act[0].data, out = x->act[1].data;
  if (f32) {
    TE_CHECK(te_cast(s, o->qkv16, dt, qkv, TECORE_DTYPE_F32, nin, x->stream));
    qkv = o->qkv16;
    out = o->o16;
  }
  TE_CHECK(zero_padding(o, out, nout * tecore_dtype_size(dt), x->stream));
  struct tecore_attention_args a;
  attn_args(o, dt, qkv, out, &a);
  a.workspace = x->workspace;
  a.workspace_bytes = x->workspace_bytes;
  TE_CHECK(tecore_attention_fwd(&a, x->stream));
  if (f32) TE_CHECK(te_cast(s, x->act[1].data, TECORE_DTYPE_F32, out, dt, nout, x->stream));
  return TECORE_SUCCESS;
}

tecore_result_t te_attn_op_bwd(const struct tecore_seq_exec *x) {
  tecore_seq_t *s = x->seq;
  const struct te_op *o = op_of(x);
  tecore_dtype_t dt = attn_dtype(s);
  int f32 = s->cfg.dtype == TECORE_DTYPE_F32;
  size_t nin = o->in_rows * o->in_cols, nout = o->out_rows * o->out_cols;
  tecore_devptr_t qkv = x->act[0].data, out = x->act[1].data, dout = x->grad[1].data;
  tecore_devptr_t dqkv = x->grad[0].data;
  if (f32) {
    TE_CHECK(te_cast(s, o->do16, dt, dout, TECORE_DTYPE_F32, nout, x->stream));
    qkv = o->qkv16;
    out = o->o16;
    dout = o->do16;
    dqkv = o->dqkv16;
  }
  TE_CHECK(zero_padding(o, dqkv, nin * tecore_dtype_size(dt), x->stream));
  struct tecore_attention_args a;
  attn_args(o, dt, qkv, out, &a);
  struct tecore_attention_args g;
  attn_args(o, dt, dqkv, dout, &g);   /* the same views over the gradients */
  a.d_o = g.o;
  a.dq = g.q;
  a.dk = g.k;
  a.dv = g.v;
  a.workspace = x->workspace;
  a.workspace_bytes = x->workspace_bytes;
  TE_CHECK(tecore_attention_bwd(&a, x->stream));
  if (f32) TE_CHECK(te_cast(s, x->grad[0].data, TECORE_DTYPE_F32, dqkv, dt, nin, x->stream));
  return TECORE_SUCCESS;
}

/* ---- FP8 attention of inference sequences (rope+quantize, attention+quantize) ------------ */

/* Q, K and V of op o as compact E4M3 views of buf: [rows][heads d], then
 * [rows][kv_heads d] twice (what tecore_rope_fwd_fp8 writes). */
static void attn8_views(const struct te_op *o, tecore_devptr_t buf,
                        struct tecore_attention_args *a) {
  const struct tecore_op_attention_args *p = &o->prm.attn;
  size_t rows = o->in_rows, d = (size_t)p->head_dim;
  size_t qw = (size_t)p->heads * d, kw = (size_t)p->kv_heads * d;
  a->dtype = TECORE_DTYPE_E4M3;
  a->q = (struct tecore_attn_view){.data = buf, .token_stride = qw, .head_stride = d};
  a->k = (struct tecore_attn_view){.data = buf + rows * qw, .token_stride = kw, .head_stride = d};
  a->v = (struct tecore_attn_view){.data = buf + rows * (qw + kw), .token_stride = kw,
                                   .head_stride = d};
}

/* The arguments of an FP8 forward with addresses that only look valid
 * (the checks and sizes read no pointer). */
static void attn8_probe(const tecore_seq_t *s, const struct te_op *o, int o8,
                        struct tecore_attention_args *a) {
  attn_args(o, TECORE_DTYPE_E4M3, 0, (tecore_devptr_t)2 << 30, a);
  attn8_views(o, (tecore_devptr_t)1 << 30, a);
  a->q.scale_inv = a->k.scale_inv = a->v.scale_inv = (tecore_devptr_t)3 << 30;
  a->lse = 0;
  a->o_dtype = o8 ? TECORE_DTYPE_E4M3 : s->cfg.dtype;
  if (o8) {
    a->o.scale = (tecore_devptr_t)4 << 30;
    a->o.scale_inv = a->o.scale + 256;
    a->o.amax = a->o.scale + 512;
  }
}

int te_attn_fp8_takes(const tecore_seq_t *s, size_t i, int o8) {
  if (!te_seq_infer(s) || i == 0 || i >= s->nops) return 0;
  if (s->cfg.dtype != TECORE_DTYPE_BF16 && s->cfg.dtype != TECORE_DTYPE_F16) return 0;
  const struct te_op *r = &s->ops[i - 1], *o = &s->ops[i];
  if (r->d.kind != TECORE_OP_ROPE || o->d.kind != TECORE_OP_ATTENTION) return 0;
  /* RoPE's heads must be attention's: it writes Q, K and V by its own split */
  if (r->prm.rope.heads != o->prm.attn.heads || r->prm.rope.kv_heads != o->prm.attn.kv_heads ||
      r->prm.rope.head_dim != o->prm.attn.head_dim)
    return 0;
  if (o8 && !(i + 1 < s->nops && te_op_fp8(s, i + 1) && s->bnd && s->bnd[i + 1].f8 >= 0))
    return 0;
  struct tecore_attention_args a;
  attn8_probe(s, o, o8, &a);
  size_t w = 0;
  if (tecore_attention_workspace_size(&a, 0, &w) == TECORE_SUCCESS) return 1;
  TE_INFO(TECORE_SUBSYS_KERNEL, "fuser: op %zu: FP8 attention%s refused (%s); it runs in %s",
          i, o8 ? " with an E4M3 output" : "", tecore_last_error(),
          o8 ? "E4M3 with O in the dtype" : "the dtype");
  tecore_clear_error();
  return 0;
}

tecore_result_t te_attn_q_ws(const tecore_seq_t *s, size_t first, size_t *bytes, void *ctx) {
  struct tecore_attention_args a;
  attn8_probe(s, &s->ops[first], (uintptr_t)ctx != 0, &a);
  return tecore_attention_workspace_size(&a, 0, bytes);
}

/* The E4M3 tensor of FP8 Q (k 0), K (1) or V (2) of attention op o. */
static tecore_result_t qkv8_tensor(const tecore_seq_t *s, const struct te_op *o, int k,
                                   struct tecore_tensor *t) {
  const struct tecore_op_attention_args *p = &o->prm.attn;
  size_t rows = o->in_rows, d = (size_t)p->head_dim;
  size_t qw = (size_t)p->heads * d, kw = (size_t)p->kv_heads * d;
  size_t off = k == 0 ? 0 : rows * (qw + (size_t)(k - 1) * kw);
  te_t2d(t, TECORE_DTYPE_E4M3, rows, k == 0 ? qw : kw, o->qkv8_buf + off);
  TE_CHECK(tecore_delayed_state_tensor(&s->st_qkv, o->qkv8_entry + (size_t)k, t));
  if (t->dtype != TECORE_DTYPE_E4M3)
    return TE_ERR(TECORE_ERR_INTERNAL, "fuser: FP8 Q/K/V of %s, not E4M3",
                  tecore_dtype_name(t->dtype));
  return TECORE_SUCCESS;
}

tecore_result_t te_rope_q_fwd(const struct tecore_seq_exec *x) {
  const tecore_seq_t *s = x->seq;
  const struct tecore_op_rope_args *r = &op_of(x)->prm.rope;
  const struct te_op *at = &s->ops[x->first + 1];
  size_t es = tecore_dtype_size(s->cfg.dtype), w = x->act[0].shape[1];
  size_t d = (size_t)r->head_dim;
  tecore_devptr_t p = x->act[0].data;
  struct tecore_rope_args a = {
      .dtype = s->cfg.dtype, .tokens = x->act[0].shape[0], .q_heads = r->heads,
      .k_heads = r->kv_heads, .head_dim = r->head_dim, .rotary_dim = r->rotary_dim,
      .style = (tecore_rope_style_t)r->style, .theta = r->theta, .cu_seqlens = r->cu_seqlens,
      .batch = r->cu_seqlens ? r->batch : 0, .seq_len = r->cu_seqlens ? 0 : r->max_seqlen,
      .q_in = {.data = p, .token_stride = w, .head_stride = d},
      .k_in = {.data = p + (size_t)r->heads * d * es, .token_stride = w, .head_stride = d}};
  struct tecore_rope_view v = {.data = p + (size_t)(r->heads + r->kv_heads) * d * es,
                               .token_stride = w, .head_stride = d};
  struct tecore_tensor q8, k8, v8;
  TE_CHECK(qkv8_tensor(s, at, 0, &q8));
  TE_CHECK(qkv8_tensor(s, at, 1, &k8));
  TE_CHECK(qkv8_tensor(s, at, 2, &v8));
  return tecore_rope_fwd_fp8(&a, &v, r->kv_heads, &q8, &k8, &v8, x->stream);
}

tecore_result_t te_attn_q_fwd(const struct tecore_seq_exec *x) {
  const tecore_seq_t *s = x->seq;
  const struct te_op *o = op_of(x);
  const int o8 = (uintptr_t)x->ctx != 0;
  struct tecore_tensor q8, k8, v8;
  TE_CHECK(qkv8_tensor(s, o, 0, &q8));
  TE_CHECK(qkv8_tensor(s, o, 1, &k8));
  TE_CHECK(qkv8_tensor(s, o, 2, &v8));
  struct tecore_attention_args a;
  attn_args(o, TECORE_DTYPE_E4M3, 0, x->act[1].data, &a);
  attn8_views(o, o->qkv8_buf, &a);
  a.q.scale_inv = q8.scale_inv;
  a.k.scale_inv = k8.scale_inv;
  a.v.scale_inv = v8.scale_inv;
  a.lse = 0;   /* inference: no backward reads it */
  a.o_dtype = s->cfg.dtype;
  if (o8) {    /* O as the next Linear's FP8 input, at its scale, its amax counted */
    struct tecore_tensor y8;
    TE_CHECK(te_bnd_f8_tensor(s, x->first + 1, &y8));
    a.o_dtype = TECORE_DTYPE_E4M3;
    a.o = (struct tecore_attn_view){.data = y8.data, .scale = y8.scale,
                                    .scale_inv = y8.scale_inv, .amax = y8.amax};
  }
  size_t nout = o->out_rows * o->out_cols;
  TE_CHECK(zero_padding(o, a.o.data, nout * tecore_dtype_size(a.o_dtype), x->stream));
  a.workspace = x->workspace;
  a.workspace_bytes = x->workspace_bytes;
  return tecore_attention_fwd(&a, x->stream);
}
