/* SPDX-License-Identifier: Apache-2.0 */
/* rope.c -- rotary position embedding (te/rope.h): the kernel table of
 * kernels/rope.cu and its vdev implementation (rope_vdev.c), the argument
 * and aliasing checks, and the public entry points, which launch one
 * kernel per tensor (Q, K, and V for the FP8 variant). */
#include "rope/rope_internal.h"
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <te/rope.h>

/* ---- the table ---------------------------------------------------------------------- */

enum { K_V8, K_V1 };
static const struct tecore_kernel_def rope_kernels[] = {
    [K_V8] = TE_KDEF("te_rope_v8", te_rope_vdev, TE_ROPE_PARAMS),
    [K_V1] = TE_KDEF("te_rope_v1", te_rope_vdev, TE_ROPE_PARAMS),
};
static const struct te_kalign rope_align[] = {
    [K_V8] = TE_KALIGN(TE_ROPE_PARAMS),
    [K_V1] = TE_KALIGN(TE_ROPE_PARAMS),
};
TE_KERNEL_TABLE_FATBIN_ALIGNED(rope_first_id, "libtecore/rope", rope_kernels, rope_align, rope)

/* ---- views ---------------------------------------------------------------------------- */

/* A view with its strides resolved (elements) and its element size. */
struct rope_v {
  tecore_devptr_t p;
  size_t ts, hs, es;
  int heads;
};

static struct rope_v rope_resolve(const struct tecore_rope_view *v, int heads, int dim, size_t es) {
  struct rope_v r = {.p = v->data, .ts = v->token_stride, .hs = v->head_stride, .es = es,
                     .heads = heads};
  if (!r.hs) r.hs = (size_t)dim;
  if (!r.ts) r.ts = (size_t)heads * r.hs;
  return r;
}

/* Bytes from the first to one past the last element; per-token footprint. */
static size_t rope_extent(const struct rope_v *v, size_t tokens, int dim) {
  if (!tokens) return 0;
  return ((tokens - 1) * v->ts + (size_t)(v->heads - 1) * v->hs + (size_t)dim) * v->es;
}
static size_t rope_foot(const struct rope_v *v, int dim) {
  return ((size_t)(v->heads - 1) * v->hs + (size_t)dim) * v->es;
}

/* The view's bytes (rope_extent) fit the address space from its address:
 * every later check and the kernels' offsets rest on it. */
static tecore_result_t rope_check_extent(const struct rope_v *v, size_t tokens, int dim,
                                         const char *fn, const char *arg) {
  if (!tokens) return TECORE_SUCCESS;
  size_t t, h, e;
  int ovf = __builtin_mul_overflow(tokens - 1, v->ts, &t) ||
            __builtin_mul_overflow((size_t)(v->heads - 1), v->hs, &h) ||
            __builtin_add_overflow(t, h, &e) || __builtin_add_overflow(e, (size_t)dim, &e) ||
            __builtin_mul_overflow(e, v->es, &e) || __builtin_add_overflow(v->p, e, &t);
  TE_ARG(!ovf && e <= (size_t)LLONG_MAX, "%s: %s: %zu tokens at token_stride %zu and %d heads at "
         "head_stride %zu reach past the address space", fn, arg, tokens, v->ts, v->heads, v->hs);
  return TECORE_SUCCESS;
}

static tecore_result_t rope_check_view(const struct rope_v *v, size_t tokens, int dim,
                                       const char *fn, const char *arg) {
  TE_ARG(v->p || tokens == 0, "%s: %s.data is 0", fn, arg);
  TE_ARG(v->p % v->es == 0, "%s: %s.data (0x%llx) is not aligned to its %zu-byte elements", fn,
         arg, (unsigned long long)v->p, v->es);
  TE_ARG(v->hs >= (size_t)dim, "%s: %s.head_stride %zu is below head_dim %d", fn, arg, v->hs, dim);
  TE_ARG(v->ts >= (size_t)dim, "%s: %s.token_stride %zu is below head_dim %d", fn, arg, v->ts, dim);
  TE_ARG(v->ts < (1ull << 40) && v->hs < (1ull << 40), "%s: %s: strides exceed 2^40", fn, arg);
  TE_CHECK(rope_check_extent(v, tokens, dim, fn, arg));
  /* elements must not repeat: heads inside a token, or tokens inside a head */
  int ok = v->ts >= (size_t)(v->heads - 1) * v->hs + (size_t)dim ||
           v->hs >= (tokens ? tokens - 1 : 0) * v->ts + (size_t)dim;
  TE_ARG(ok, "%s: %s: token_stride %zu and head_stride %zu make heads and tokens overlap", fn,
         arg, v->ts, v->hs);
  if (tokens && te_dev_checks_on())
    TE_CHECK(te_dev_check_range(v->p, rope_extent(v, tokens, dim), fn, arg));
  return TECORE_SUCCESS;
}

static int rope_same(const struct rope_v *a, const struct rope_v *b) {
  return a->p == b->p && a->ts == b->ts && a->hs == b->hs && a->es == b->es;
}

/* 1 when two views may share a byte: their ranges overlap, unless both
 * step tokens alike and their per-token footprints sit apart inside one
 * token's period (Q, K and V of one packed buffer). */
static int rope_conflict(const struct rope_v *a, const struct rope_v *b, size_t tokens, int dim) {
  size_t ea = rope_extent(a, tokens, dim), eb = rope_extent(b, tokens, dim);
  if (!ea || !eb || a->p + ea <= b->p || b->p + eb <= a->p) return 0;
  size_t pa = a->ts * a->es, pb = b->ts * b->es, fa = rope_foot(a, dim), fb = rope_foot(b, dim);
  if (pa != pb || fa > pa || fb > pb || a->hs * (size_t)(a->heads - 1) + (size_t)dim > a->ts ||
      b->hs * (size_t)(b->heads - 1) + (size_t)dim > b->ts)
    return 1;
  /* b's offset inside a's period */
  size_t d = b->p >= a->p ? (size_t)(b->p - a->p) % pa : (pa - (size_t)(a->p - b->p) % pa) % pa;
  return !(fa <= d && d + fb <= pa);
}

/* ---- argument checks ---------------------------------------------------------------- */

/* The checked, resolved call. */
struct rope_call {
  size_t tokens;
  int head_dim, rot, dt;
  struct rope_v q_in, q_out, k_in, k_out;
  int has_k;
  double log2_theta;
  tecore_devptr_t status; /* the word's device address, or 0 */
};

static tecore_result_t rope_check_range(tecore_devptr_t p, size_t bytes, const char *fn,
                                        const char *arg) {
  TE_ARG(p % 4 == 0, "%s: %s (0x%llx) is not aligned to 4 bytes", fn, arg, (unsigned long long)p);
  if (p && bytes && te_dev_checks_on()) TE_CHECK(te_dev_check_range(p, bytes, fn, arg));
  return TECORE_SUCCESS;
}

static tecore_result_t rope_check_positions(const struct tecore_rope_args *a, const char *fn) {
  TE_ARG(!(a->positions && a->cu_seqlens), "%s: args->positions and args->cu_seqlens are both set",
         fn);
  TE_ARG(!a->seq_len || (!a->positions && !a->cu_seqlens),
         "%s: args->seq_len %zu is set with positions or cu_seqlens", fn, a->seq_len);
  TE_ARG(!a->cu_seqlens || (a->batch >= 1 && a->batch <= INT_MAX - 1),
         "%s: args->batch %zu is not in 1 .. %d with cu_seqlens", fn, a->batch, INT_MAX - 1);
  TE_CHECK(rope_check_range(a->positions, a->tokens * 4, fn, "args->positions"));
  TE_CHECK(rope_check_range(a->cu_seqlens, (a->batch + 1) * 4, fn, "args->cu_seqlens"));
  TE_ARG(!a->cos_table == !a->sin_table, "%s: args->%s is set without args->%s", fn,
         a->cos_table ? "cos_table" : "sin_table", a->cos_table ? "sin_table" : "cos_table");
  if (a->cos_table) {
    TE_ARG(a->table_len >= 1 && a->table_len < (1ull << 40),
           "%s: args->table_len %zu is not in 1 .. 2^40 with a table", fn, a->table_len);
    size_t bytes = a->table_len * (size_t)(a->rotary_dim ? a->rotary_dim : a->head_dim) / 2 * 4;
    TE_CHECK(rope_check_range(a->cos_table, bytes, fn, "args->cos_table"));
    TE_CHECK(rope_check_range(a->sin_table, bytes, fn, "args->sin_table"));
  }
  return TECORE_SUCCESS;
}

static tecore_result_t rope_check_args(const struct tecore_rope_args *a, int fp8,
                                       struct rope_call *c, const char *fn) {
  TE_ARG(a, "%s: args is NULL", fn);
  TE_ARG(a->dtype == TECORE_DTYPE_F32 || a->dtype == TECORE_DTYPE_F16 ||
             a->dtype == TECORE_DTYPE_BF16,
         "%s: args->dtype %s is not f32, f16 or bf16", fn, tecore_dtype_name(a->dtype));
  TE_ARG(a->tokens <= INT_MAX, "%s: args->tokens %zu exceeds %d", fn, a->tokens, INT_MAX);
  TE_ARG(a->q_heads >= 1 && a->q_heads <= 65536, "%s: args->q_heads %d is not in 1 .. 65536", fn,
         a->q_heads);
  TE_ARG(a->k_heads >= 0 && a->k_heads <= 65536, "%s: args->k_heads %d is not in 0 .. 65536", fn,
         a->k_heads);
  TE_ARG(a->head_dim >= 2 && a->head_dim % 2 == 0 && a->head_dim <= 65536,
         "%s: args->head_dim %d is not an even number in 2 .. 65536", fn, a->head_dim);
  int rot = a->rotary_dim ? a->rotary_dim : a->head_dim;
  TE_ARG(rot >= 2 && rot % 2 == 0 && rot <= a->head_dim,
         "%s: args->rotary_dim %d is not an even number in 2 .. head_dim (%d)", fn, a->rotary_dim,
         a->head_dim);
  TE_ARG(a->style == TECORE_ROPE_HALVES || a->style == TECORE_ROPE_INTERLEAVED,
         "%s: args->style %d is not a tecore_rope_style_t", fn, (int)a->style);
  float th = a->theta == 0.0f ? 10000.0f : a->theta;
  TE_ARG(isfinite(th) && th > 1.0f, "%s: args->theta %g is not a finite base above 1", fn,
         (double)a->theta);
  TE_CHECK(rope_check_positions(a, fn));
  size_t es = tecore_dtype_size(a->dtype);
  *c = (struct rope_call){.tokens = a->tokens, .head_dim = a->head_dim, .rot = rot,
                          .dt = (int)a->dtype, .has_k = a->k_heads > 0,
                          .log2_theta = log2((double)th)};
  c->q_in = rope_resolve(&a->q_in, a->q_heads, a->head_dim, es);
  c->q_out = rope_resolve(&a->q_out, a->q_heads, a->head_dim, es);
  TE_CHECK(rope_check_view(&c->q_in, a->tokens, a->head_dim, fn, "args->q_in"));
  if (!fp8) TE_CHECK(rope_check_view(&c->q_out, a->tokens, a->head_dim, fn, "args->q_out"));
  else TE_ARG(!a->q_out.data, "%s: args->q_out.data is set: the FP8 variant writes q8", fn);
  if (c->has_k) {
    c->k_in = rope_resolve(&a->k_in, a->k_heads, a->head_dim, es);
    c->k_out = rope_resolve(&a->k_out, a->k_heads, a->head_dim, es);
    TE_CHECK(rope_check_view(&c->k_in, a->tokens, a->head_dim, fn, "args->k_in"));
    if (!fp8) TE_CHECK(rope_check_view(&c->k_out, a->tokens, a->head_dim, fn, "args->k_out"));
    else TE_ARG(!a->k_out.data, "%s: args->k_out.data is set: the FP8 variant writes k8", fn);
  }
  return TECORE_SUCCESS;
}

/* ---- the status word ------------------------------------------------------------------ */

static tecore_result_t rope_status_err(uint64_t w, const char *fn, const char *when) {
  if (!w) return TECORE_SUCCESS;
  return TE_ERR(TECORE_ERR_INVALID, "%s: status: %s met position %" PRId32 " at token %" PRIu64
                " outside the cos/sin table", fn, when, (int32_t)(uint32_t)w,
                (w >> 32) & 0x7fffffffu);
}

TE_EXPORT tecore_result_t tecore_rope_check(uint64_t *status, tecore_stream_t stream) {
  return te_status_word_check(status, stream, rope_status_err, __func__);
}

/* What an output may share: nothing, except being exactly its own input. */
static tecore_result_t rope_check_out_alias(const struct tecore_rope_args *a,
                                            const struct rope_call *c, const char *fn) {
  const struct rope_v *outs[2] = {&c->q_out, c->has_k ? &c->k_out : NULL};
  const struct rope_v *ins[2] = {&c->q_in, c->has_k ? &c->k_in : NULL};
  const char *on[2] = {"args->q_out", "args->k_out"}, *in_[2] = {"args->q_in", "args->k_in"};
  for (int o = 0; o < 2; o++) {
    if (!outs[o]) continue;
    for (int i = 0; i < 2; i++) {
      if (!ins[i] || (i == o && rope_same(outs[o], ins[i]))) continue;
      TE_ARG(!rope_conflict(outs[o], ins[i], c->tokens, c->head_dim), "%s: %s overlaps %s", fn,
             on[o], in_[i]);
    }
    if (o == 1) TE_ARG(!rope_conflict(outs[0], outs[1], c->tokens, c->head_dim),
                       "%s: args->k_out overlaps args->q_out", fn);
    size_t e = rope_extent(outs[o], c->tokens, c->head_dim);
    struct te_tensor_spans l = {.access = TE_ACCESS_WRITE};
    te_span_add(&l, on[o], outs[o]->p, e);
    l.access = TE_ACCESS_READ;
    size_t tb = a->table_len * (size_t)c->rot / 2 * 4;
    te_span_add(&l, "args->cos_table", a->cos_table, a->cos_table ? tb : 0);
    te_span_add(&l, "args->sin_table", a->sin_table, a->sin_table ? tb : 0);
    te_span_add(&l, "args->positions", a->positions, a->positions ? c->tokens * 4 : 0);
    te_span_add(&l, "args->cu_seqlens", a->cu_seqlens, a->cu_seqlens ? (a->batch + 1) * 4 : 0);
    TE_CHECK(te_check_spans(l.span, l.n, fn));
  }
  return TECORE_SUCCESS;
}

/* ---- launch ----------------------------------------------------------------------------- */

/* One tensor's pass: x (hp) -> y (dtype ydt: hp, or FP8 with q's scale
 * pointers; q NULL otherwise), rot of its dimensions rotated (0: none,
 * a strided copy), inverse for the backward. */
struct rope_pass {
  const struct rope_v *x, *y;
  int ydt, rot, inverse;
  const struct te_qout *q;
};

static tecore_result_t rope_launch(const struct tecore_rope_args *a, const struct rope_call *c,
                                   const struct rope_pass *ps, tecore_stream_t stream) {
  const struct rope_v *x = ps->x, *y = ps->y;
  const struct te_qout *q = ps->q;
  int ydt = ps->ydt, rot = ps->rot;
  if (!c->tokens) return TECORE_SUCCESS;
  int id = rope_first_id();
  if (id < 0) return TE_ERR(TECORE_ERR_INTERNAL, "rope: the kernels did not register");
  size_t yal = ydt == TECORE_DTYPE_E4M3 || ydt == TECORE_DTYPE_E5M2 ? 8 : 16;
  int v8 = rot % 16 == 0 && rot >= 16 && rot / 2 <= TE_ROPE_CS && c->head_dim % 8 == 0 && x->ts % 8 == 0 && x->hs % 8 == 0 &&
           y->ts % 8 == 0 && y->hs % 8 == 0 && x->p % 16 == 0 && y->p % yal == 0;
  int flags = (a->style == TECORE_ROPE_INTERLEAVED ? TE_ROPE_INTERLEAVED : 0) |
              (ps->inverse ? TE_ROPE_INVERSE : 0) | (rope_same(x, y) ? TE_ROPE_INPLACE : 0) |
              (a->cos_table ? TE_ROPE_TABLE : 0);
  /* v8 takes te_rope_group() tokens a pass, their cos/sin table in dynamic
   * shared memory.  A block a group (the cap only bounds huge calls): the
   * hardware hands groups to SMs as slots free, so no partly filled last
   * wave of long-lived blocks (at 96 registers 5 blocks fit a SM, not 16). */
  unsigned long long g = v8 ? (unsigned long long)te_rope_group(x->heads, rot) : 1ull;
  unsigned long long cap = (unsigned long long)te_sm_count() * 512ull, n = (c->tokens + g - 1) / g;
  unsigned blocks = (unsigned)(n < cap ? n : cap);
  struct tecore_launch_cfg cfg = {.grid = {blocks, 1, 1}, .block = {TE_ROPE_THREADS, 1, 1},
                                  .shared_bytes = v8 ? (unsigned)(g * (unsigned)rot / 2 * 2 * 4) : 0};
  struct te_rope_args ka = {
      .x = TE_DPTR(x->p), .y = TE_DPTR(y->p), .cos_t = TE_DPTR(a->cos_table),
      .sin_t = TE_DPTR(a->sin_table), .positions = TE_DPTR(a->positions),
      .cu_seqlens = TE_DPTR(a->cu_seqlens), .scale = q ? q->scale : NULL,
      .amax = q ? q->amax : NULL, .scale_inv = q ? q->scale_inv : NULL, .tokens = c->tokens,
      .x_ts = x->ts, .x_hs = x->hs, .y_ts = y->ts, .y_hs = y->hs, .heads = x->heads,
      .head_dim = c->head_dim, .rot_dim = rot, .batch = (int)a->batch,
      .seq_len = (long long)a->seq_len, .table_len = (long long)a->table_len,
      .log2_theta = c->log2_theta, .flags = flags, .dtypes = c->dt | (ydt << 4),
      .status = TE_DPTR(c->status)};
  void *args[TE_KNPARAMS(TE_ROPE_PARAMS)];
  te_rope_args_ptrs(&ka, args);
  return te_kernel_launch_pdl(id + (v8 ? K_V8 : K_V1), &cfg, args, stream);
}

/* 1 when K's heads continue Q's in both views (the same strides, K's first
 * head one head stride past Q's last, as in a packed QKV): then one launch
 * over the q_heads + k_heads heads of merged views (*in, *out) does both,
 * the same math per head, without a second kernel's ramp and tail. */
static int rope_cont(const struct rope_v *q, const struct rope_v *k) {
  return k->ts == q->ts && k->hs == q->hs && k->es == q->es &&
         k->p == q->p + (tecore_devptr_t)((size_t)q->heads * q->hs * q->es);
}
static int rope_merge(const struct rope_call *c, struct rope_v *in, struct rope_v *out) {
  if (!c->has_k || !rope_cont(&c->q_in, &c->k_in) || !rope_cont(&c->q_out, &c->k_out)) return 0;
  *in = c->q_in;
  *out = c->q_out;
  in->heads = out->heads = c->q_in.heads + c->k_in.heads;
  return 1;
}

static tecore_result_t rope_run(const struct tecore_rope_args *a, int inverse,
                                tecore_stream_t stream, const char *fn) {
  struct rope_call c;
  TE_CHECK(rope_check_args(a, 0, &c, fn));
  TE_CHECK(rope_check_out_alias(a, &c, fn));
  TE_CHECK(te_status_word_arg(a->status, rope_status_err, &c.status, fn));
  struct rope_v qk_in, qk_out;
  if (rope_merge(&c, &qk_in, &qk_out))
    return rope_launch(a, &c, &(struct rope_pass){.x = &qk_in, .y = &qk_out, .ydt = c.dt,
                                                  .rot = c.rot, .inverse = inverse},
                       stream);
  TE_CHECK(rope_launch(a, &c, &(struct rope_pass){.x = &c.q_in, .y = &c.q_out, .ydt = c.dt,
                                                  .rot = c.rot, .inverse = inverse},
                       stream));
  if (c.has_k)
    TE_CHECK(rope_launch(a, &c, &(struct rope_pass){.x = &c.k_in, .y = &c.k_out, .ydt = c.dt,
                                                    .rot = c.rot, .inverse = inverse},
                         stream));
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_rope_fwd(const struct tecore_rope_args *args,
                                          tecore_stream_t stream) {
  return rope_run(args, 0, stream, __func__);
}

TE_EXPORT tecore_result_t tecore_rope_bwd(const struct tecore_rope_args *args,
                                          tecore_stream_t stream) {
  return rope_run(args, 1, stream, __func__);
}

/* ---- the FP8 variant ------------------------------------------------------------------- */

static tecore_result_t rope_check_fp8_out(const struct tecore_tensor *t, size_t tokens, int heads,
                                          int dim, const char *fn, const char *arg) {
  TE_CHECK(te_check_fused_output(t, fn, arg));
  TE_ARG(te_dtype_is_fp8(t->dtype), "%s: %s: dtype %s is not e4m3 or e5m2", fn, arg,
         tecore_dtype_name(t->dtype));
  size_t want = tokens * (size_t)heads * (size_t)dim;
  TE_ARG(tecore_tensor_numel(t) == want, "%s: %s has %zu elements, tokens x heads x head_dim is %zu",
         fn, arg, tecore_tensor_numel(t), want);
  if (want && te_dev_checks_on()) TE_CHECK(te_dev_check_range(t->data, want, fn, arg));
  return TECORE_SUCCESS;
}

/* The compact view of an FP8 output. */
static struct rope_v rope_fp8_view(const struct tecore_tensor *t, int heads, int dim) {
  return (struct rope_v){.p = t->data, .ts = (size_t)heads * (size_t)dim, .hs = (size_t)dim,
                         .es = 1, .heads = heads};
}

static tecore_result_t rope_fp8_one(const struct tecore_rope_args *a, const struct rope_call *c,
                                    const struct rope_v *x, struct tecore_tensor *t, int rot,
                                    tecore_stream_t stream) {
  struct rope_v y = rope_fp8_view(t, x->heads, c->head_dim);
  for (int pass = 0; pass < te_qout_passes(t); pass++) {
    struct te_qout q;
    TE_CHECK(te_qout_begin(t, pass, 0, stream, &q));
    TE_CHECK(rope_launch(a, c, &(struct rope_pass){.x = x, .y = &y, .ydt = (int)t->dtype,
                                                    .rot = rot, .q = &q},
                         stream));
  }
  return TECORE_SUCCESS;
}

static void rope_in_span(struct te_tensor_spans *l, const char *name, const struct rope_v *v,
                         size_t tokens, int dim) {
  te_span_add(l, name, v->p, rope_extent(v, tokens, dim));
}

TE_EXPORT tecore_result_t tecore_rope_fwd_fp8(const struct tecore_rope_args *args,
                                              const struct tecore_rope_view *v_in, int v_heads,
                                              struct tecore_tensor *q8, struct tecore_tensor *k8,
                                              struct tecore_tensor *v8, tecore_stream_t stream) {
  const char *fn = __func__;
  struct rope_call c;
  TE_CHECK(rope_check_args(args, 1, &c, fn));
  TE_CHECK(rope_check_fp8_out(q8, c.tokens, args->q_heads, c.head_dim, fn, "q8"));
  if (c.has_k) TE_CHECK(rope_check_fp8_out(k8, c.tokens, args->k_heads, c.head_dim, fn, "k8"));
  struct rope_v vv = {0};
  if (v8) {
    TE_ARG(v_in, "%s: v_in is NULL with v8 set", fn);
    TE_ARG(v_heads >= 1 && v_heads <= 65536, "%s: v_heads %d is not in 1 .. 65536", fn, v_heads);
    vv = rope_resolve(v_in, v_heads, c.head_dim, tecore_dtype_size(args->dtype));
    TE_CHECK(rope_check_view(&vv, c.tokens, c.head_dim, fn, "v_in"));
    TE_CHECK(rope_check_fp8_out(v8, c.tokens, v_heads, c.head_dim, fn, "v8"));
  }
  struct te_tensor_spans l = {.access = TE_ACCESS_WRITE};
  te_tensor_spans(q8, "q8", TE_SPAN_WRITTEN, &l);
  if (c.has_k) te_tensor_spans(k8, "k8", TE_SPAN_WRITTEN, &l);
  if (v8) te_tensor_spans(v8, "v8", TE_SPAN_WRITTEN, &l);
  l.access = TE_ACCESS_READ;
  te_tensor_spans(q8, "q8", TE_SPAN_SCALE, &l);
  if (c.has_k) te_tensor_spans(k8, "k8", TE_SPAN_SCALE, &l);
  if (v8) te_tensor_spans(v8, "v8", TE_SPAN_SCALE, &l);
  rope_in_span(&l, "args->q_in", &c.q_in, c.tokens, c.head_dim);
  if (c.has_k) rope_in_span(&l, "args->k_in", &c.k_in, c.tokens, c.head_dim);
  if (v8) rope_in_span(&l, "v_in", &vv, c.tokens, c.head_dim);
  TE_CHECK(te_check_spans(l.span, l.n, fn));
  TE_CHECK(te_status_word_arg(args->status, rope_status_err, &c.status, fn));

  TE_CHECK(rope_fp8_one(args, &c, &c.q_in, q8, c.rot, stream));
  if (c.has_k) TE_CHECK(rope_fp8_one(args, &c, &c.k_in, k8, c.rot, stream));
  /* V is not rotated: rotary_dim 0 makes the kernel a strided quantize */
  if (v8) TE_CHECK(rope_fp8_one(args, &c, &vv, v8, 0, stream));
  return TECORE_SUCCESS;
}
