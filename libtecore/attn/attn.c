/* SPDX-License-Identifier: Apache-2.0 */
/* attn.c -- the attention entry points (te/attention.h): argument checks
 * naming the argument, the validated problem (attn_backend.h), the walk
 * of the backend table (TECORE_ATTN_BACKEND), the workspace split between
 * this file's copy of fixed sequence lengths and the backend's scratch,
 * and the description of the choice. */
#include "attn/attn_internal.h"
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <te/attention.h>

TE_PARAM_STR(attn_backend_param, "TECORE_ATTN_BACKEND", "auto", "auto|cudnn|libte",
             "attention backend: auto (cuDNN when it loads and takes the problem, else "
             "libte's kernels; the C implementation on vdev), or only the one named");

#define ATTN_WS_ALIGN 256u
static size_t attn_round(size_t b) { return (b + ATTN_WS_ALIGN - 1) / ATTN_WS_ALIGN * ATTN_WS_ALIGN; }

/* ---- argument checks ------------------------------------------------------------- */

static int attn_dtype_hp(tecore_dtype_t d) { return d == TECORE_DTYPE_BF16 || d == TECORE_DTYPE_F16; }

static tecore_result_t attn_check_dtypes(const struct tecore_attention_args *a, int backward,
                                         const char *fn) {
  TE_ARG(attn_dtype_hp(a->dtype) || a->dtype == TECORE_DTYPE_E4M3,
         "%s: dtype %s: Q, K and V are BF16, F16 or E4M3", fn, tecore_dtype_name(a->dtype));
  if (a->dtype == TECORE_DTYPE_E4M3 && backward)
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: dtype E4M3: the backward takes BF16 or F16", fn);
  if (attn_dtype_hp(a->dtype))
    TE_ARG(a->o_dtype == a->dtype, "%s: o_dtype %s differs from dtype %s", fn,
           tecore_dtype_name(a->o_dtype), tecore_dtype_name(a->dtype));
  else
    TE_ARG(attn_dtype_hp(a->o_dtype) || a->o_dtype == TECORE_DTYPE_E4M3,
           "%s: o_dtype %s: an E4M3 forward writes BF16, F16 or E4M3", fn,
           tecore_dtype_name(a->o_dtype));
  return TECORE_SUCCESS;
}

static tecore_result_t attn_check_shape(const struct tecore_attention_args *a, const char *fn) {
  TE_ARG(a->batch <= INT_MAX, "%s: batch %zu exceeds %d", fn, a->batch, INT_MAX);
  TE_ARG(a->heads >= 1, "%s: heads %d is not positive", fn, a->heads);
  TE_ARG(a->kv_heads >= 1, "%s: kv_heads %d is not positive", fn, a->kv_heads);
  TE_ARG(a->heads % a->kv_heads == 0, "%s: heads %d is not a multiple of kv_heads %d", fn,
         a->heads, a->kv_heads);
  TE_ARG(a->head_dim >= 8 && a->head_dim <= TE_ATTN_DMAX && a->head_dim % 8 == 0,
         "%s: head_dim %d is not a multiple of 8 in [8, %d]", fn, a->head_dim, TE_ATTN_DMAX);
  TE_ARG(isfinite(a->scale) && a->scale > 0.0f, "%s: scale %g is not a finite value > 0", fn,
         (double)a->scale);
  TE_ARG((a->flags & ~(TECORE_ATTN_CAUSAL | TECORE_ATTN_WINDOW)) == 0,
         "%s: flags 0x%x has unknown bits", fn, a->flags);
  TE_ARG(a->window_left <= INT_MAX, "%s: window_left %zu exceeds %d", fn, a->window_left, INT_MAX);
  TE_ARG(a->max_seqlen_q <= INT_MAX && a->max_seqlen_kv <= INT_MAX,
         "%s: max_seqlen_q %zu / max_seqlen_kv %zu exceed %d", fn, a->max_seqlen_q,
         a->max_seqlen_kv, INT_MAX);
  TE_ARG(!a->cu_seqlens_q == !a->cu_seqlens_kv,
         "%s: cu_seqlens_q and cu_seqlens_kv are both set or both 0 (cu_seqlens_%s is 0)", fn,
         a->cu_seqlens_q ? "kv" : "q");
  if (a->cu_seqlens_q) {
    TE_ARG(a->cu_seqlens_q % 4 == 0, "%s: cu_seqlens_q (0x%llx) is not aligned to 4 bytes", fn,
           (unsigned long long)a->cu_seqlens_q);
    TE_ARG(a->cu_seqlens_kv % 4 == 0, "%s: cu_seqlens_kv (0x%llx) is not aligned to 4 bytes", fn,
           (unsigned long long)a->cu_seqlens_kv);
    TE_ARG(a->tokens_q <= INT_MAX && a->tokens_kv <= INT_MAX,
           "%s: tokens_q %zu / tokens_kv %zu exceed %d", fn, a->tokens_q, a->tokens_kv, INT_MAX);
  } else {
    size_t tq = a->batch * a->max_seqlen_q, tk = a->batch * a->max_seqlen_kv;
    TE_ARG(a->max_seqlen_q == 0 || tq / a->max_seqlen_q == a->batch, "%s: batch * max_seqlen_q overflows", fn);
    TE_ARG(a->max_seqlen_kv == 0 || tk / a->max_seqlen_kv == a->batch, "%s: batch * max_seqlen_kv overflows", fn);
    TE_ARG(a->tokens_q == 0 || a->tokens_q == tq,
           "%s: tokens_q %zu is not batch * max_seqlen_q (%zu) with fixed lengths", fn,
           a->tokens_q, tq);
    TE_ARG(a->tokens_kv == 0 || a->tokens_kv == tk,
           "%s: tokens_kv %zu is not batch * max_seqlen_kv (%zu) with fixed lengths", fn,
           a->tokens_kv, tk);
    TE_ARG(tq <= INT_MAX && tk <= INT_MAX, "%s: batch * max_seqlen exceeds %d tokens", fn, INT_MAX);
  }
  return TECORE_SUCCESS;
}

/* What attn_fill wants of one view: its name, heads and tokens, its
 * dtype, and whether the call writes it. */
struct attn_use {
  const char *arg;
  int heads;
  size_t tokens;
  tecore_dtype_t dtype;
  int written;
};

/* The view's bytes, ((tokens - 1) token_stride + (heads - 1) head_stride
 * + head_dim) elements from its address, fit the address space: the
 * extent every later check and the kernels' offsets rest on. */
static tecore_result_t attn_view_fits(const struct te_attn_view *v, const struct attn_use *u,
                                      int d, const char *fn) {
  if (u->tokens == 0) return TECORE_SUCCESS;
  size_t t, h, e;
  int ovf = __builtin_mul_overflow(u->tokens - 1, v->token_stride, &t) ||
            __builtin_mul_overflow((size_t)(u->heads - 1), v->head_stride, &h) ||
            __builtin_add_overflow(t, h, &e) || __builtin_add_overflow(e, (size_t)d, &e) ||
            __builtin_mul_overflow(e, tecore_dtype_size(u->dtype), &e) ||
            __builtin_add_overflow(v->ptr, e, &t);
  TE_ARG(!ovf && e <= (size_t)LLONG_MAX,
         "%s: %s: %zu tokens at token_stride %zu and %d heads at head_stride %zu reach past the "
         "address space", fn, u->arg, u->tokens, v->token_stride, u->heads, v->head_stride);
  return TECORE_SUCCESS;
}

/* A view's strides (0: packed), its alignment, and, for an output, that
 * no two of its elements share a byte. */
static tecore_result_t attn_view(const struct tecore_attn_view *v, const struct attn_use *u,
                                 const struct tecore_attention_args *a, const char *fn,
                                 struct te_attn_view *out) {
  size_t d = (size_t)a->head_dim, es = tecore_dtype_size(u->dtype);
  out->ptr = v->data;
  out->head_stride = v->head_stride ? v->head_stride : d;
  out->token_stride = v->token_stride ? v->token_stride : (size_t)u->heads * d;
  TE_ARG(v->data || u->tokens == 0, "%s: %s.data is 0", fn, u->arg);
  TE_ARG(v->data % es == 0, "%s: %s.data (0x%llx) is not aligned to its %zu-byte elements", fn,
         u->arg, (unsigned long long)v->data, es);
  TE_ARG(out->token_stride <= (size_t)LLONG_MAX / es && out->head_stride <= (size_t)LLONG_MAX / es,
         "%s: %s: stride too large", fn, u->arg);
  TE_CHECK(attn_view_fits(out, u, a->head_dim, fn));
  if (u->written && u->tokens > 0) {
    size_t hs = out->head_stride, ts = out->token_stride, h = (size_t)u->heads;
    int heads_inner = hs >= d && (u->tokens == 1 || ts >= (h - 1) * hs + d);
    int tokens_inner = ts >= d && (h == 1 || hs >= (u->tokens - 1) * ts + d);
    TE_ARG(heads_inner || tokens_inner,
           "%s: %s: token_stride %zu and head_stride %zu overlap its elements (%zu tokens x %d "
           "heads x %d)", fn, u->arg, ts, hs, u->tokens, u->heads, a->head_dim);
  }
  return TECORE_SUCCESS;
}

/* Bytes from a view's first element to one past its last. */
static size_t attn_view_extent(const struct te_attn_view *v, int heads, size_t tokens, int d,
                               tecore_dtype_t dt) {
  if (tokens == 0) return 0;
  return ((tokens - 1) * v->token_stride + (size_t)(heads - 1) * v->head_stride + (size_t)d) *
         tecore_dtype_size(dt);
}

static tecore_result_t attn_check_scalar(tecore_devptr_t p, int required, const char *fn,
                                         const char *arg) {
  TE_ARG(p || !required, "%s: %s is 0", fn, arg);
  TE_ARG(p % 4 == 0, "%s: %s (0x%llx) is not aligned to 4 bytes", fn, arg, (unsigned long long)p);
  return TECORE_SUCCESS;
}

static tecore_result_t attn_fill_fp8(const struct tecore_attention_args *a,
                                     struct te_attn_problem *p, const char *fn) {
  int fp8 = a->dtype == TECORE_DTYPE_E4M3, ofp8 = a->o_dtype == TECORE_DTYPE_E4M3;
  TE_CHECK(attn_check_scalar(a->q.scale_inv, fp8, fn, "q.scale_inv"));
  TE_CHECK(attn_check_scalar(a->k.scale_inv, fp8, fn, "k.scale_inv"));
  TE_CHECK(attn_check_scalar(a->v.scale_inv, fp8, fn, "v.scale_inv"));
  TE_CHECK(attn_check_scalar(a->o.scale, ofp8, fn, "o.scale"));
  TE_CHECK(attn_check_scalar(a->o.scale_inv, 0, fn, "o.scale_inv"));
  TE_CHECK(attn_check_scalar(a->o.amax, 0, fn, "o.amax"));
  TE_CHECK(attn_check_scalar(a->s_amax, 0, fn, "s_amax"));
  if (fp8) {
    p->q_scale_inv = a->q.scale_inv;
    p->k_scale_inv = a->k.scale_inv;
    p->v_scale_inv = a->v.scale_inv;
    p->s_amax = a->s_amax;
  }
  if (ofp8) {
    p->o_scale = a->o.scale;
    p->o_scale_inv = a->o.scale_inv;
  }
  p->o_amax = a->o.amax;
  return TECORE_SUCCESS;
}

/* The caller's arguments as the problem every backend receives (the
 * workspace not yet split: attn_split_workspace). */
static tecore_result_t attn_fill(const struct tecore_attention_args *a, int backward,
                                 struct te_attn_problem *p, const char *fn) {
  TE_ARG(a, "%s: args is NULL", fn);
  TE_CHECK(attn_check_shape(a, fn));
  TE_CHECK(attn_check_dtypes(a, backward, fn));
  memset(p, 0, sizeof *p);
  int fixed = !a->cu_seqlens_q;
  p->batch = a->batch;
  p->max_seqlen_q = a->max_seqlen_q;
  p->max_seqlen_kv = a->max_seqlen_kv;
  p->total_q = fixed ? a->batch * a->max_seqlen_q : a->tokens_q;
  p->total_kv = fixed ? a->batch * a->max_seqlen_kv : a->tokens_kv;
  p->cu_seqlens_q = a->cu_seqlens_q;
  p->cu_seqlens_kv = a->cu_seqlens_kv;
  p->fixed_seqlen_q = fixed ? a->max_seqlen_q : 0;
  p->fixed_seqlen_kv = fixed ? a->max_seqlen_kv : 0;
  p->heads = a->heads;
  p->kv_heads = a->kv_heads;
  p->head_dim = a->head_dim;
  p->scale = a->scale;
  p->causal = (a->flags & TECORE_ATTN_CAUSAL) != 0;
  p->window_left = (a->flags & TECORE_ATTN_WINDOW) ? (long)a->window_left : -1;
  p->qkv_dtype = a->dtype;
  p->o_dtype = a->o_dtype;
  size_t tq = p->total_q, tk = p->total_kv;
  int H = a->heads, KH = a->kv_heads;
  TE_CHECK(attn_view(&a->q, &(struct attn_use){"q", H, tq, a->dtype, 0}, a, fn, &p->q));
  TE_CHECK(attn_view(&a->k, &(struct attn_use){"k", KH, tk, a->dtype, 0}, a, fn, &p->k));
  TE_CHECK(attn_view(&a->v, &(struct attn_use){"v", KH, tk, a->dtype, 0}, a, fn, &p->v));
  TE_CHECK(attn_view(&a->o, &(struct attn_use){"o", H, tq, a->o_dtype, !backward}, a, fn, &p->o));
  TE_CHECK(attn_check_scalar(a->lse, backward && tq > 0, fn, "lse"));
  p->lse = a->lse;
  if (backward) {
    TE_CHECK(attn_view(&a->d_o, &(struct attn_use){"d_o", H, tq, a->dtype, 0}, a, fn, &p->d_o));
    TE_CHECK(attn_view(&a->dq, &(struct attn_use){"dq", H, tq, a->dtype, 1}, a, fn, &p->dq));
    TE_CHECK(attn_view(&a->dk, &(struct attn_use){"dk", KH, tk, a->dtype, 1}, a, fn, &p->dk));
    TE_CHECK(attn_view(&a->dv, &(struct attn_use){"dv", KH, tk, a->dtype, 1}, a, fn, &p->dv));
  }
  TE_CHECK(attn_fill_fp8(a, p, fn));
  return TECORE_SUCCESS;
}

/* ---- aliasing and memory ranges ------------------------------------------------------ */

struct attn_span {
  const char *name;
  tecore_devptr_t p;
  size_t bytes;
};

static int attn_overlap(const struct attn_span *x, const struct attn_span *y) {
  return x->bytes && y->bytes && x->p < y->p + y->bytes && y->p < x->p + x->bytes;
}

/* The E4M3 factors and amaxes are floats the kernels dereference: each
 * must be memory the device reaches, not just an aligned number. */
static tecore_result_t attn_check_scalars(const struct te_attn_problem *p, const char *fn) {
  const struct attn_span s[7] = {
      {"q.scale_inv", p->q_scale_inv, 4}, {"k.scale_inv", p->k_scale_inv, 4},
      {"v.scale_inv", p->v_scale_inv, 4}, {"o.scale", p->o_scale, 4},
      {"o.scale_inv", p->o_scale_inv, 4}, {"o.amax", p->o_amax, 4}, {"s_amax", p->s_amax, 4}};
  for (size_t i = 0; i < 7; i++)
    if (s[i].p) TE_CHECK(te_dev_check_range(s[i].p, s[i].bytes, fn, s[i].name));
  return TECORE_SUCCESS;
}

/* What a call writes shares no byte with what it reads (the written
 * gradients may interleave with each other: one packed dQKV). */
static tecore_result_t attn_check_spans(const struct te_attn_problem *p, int backward,
                                        const char *fn) {
  int d = p->head_dim, H = p->heads, KH = p->kv_heads;
  tecore_dtype_t dt = p->qkv_dtype;
  size_t tq = p->total_q, tk = p->total_kv, lse_b = (size_t)H * tq * sizeof(float);
  struct attn_span in[6] = {
      {"q", p->q.ptr, attn_view_extent(&p->q, H, tq, d, dt)},
      {"k", p->k.ptr, attn_view_extent(&p->k, KH, tk, d, dt)},
      {"v", p->v.ptr, attn_view_extent(&p->v, KH, tk, d, dt)},
  };
  struct attn_span out[4];
  size_t nin = 3, nout = 0;
  if (!backward) {
    out[nout++] = (struct attn_span){"o", p->o.ptr, attn_view_extent(&p->o, H, tq, d, p->o_dtype)};
    out[nout++] = (struct attn_span){"lse", p->lse, p->lse ? lse_b : 0};
  } else {
    in[nin++] = (struct attn_span){"o", p->o.ptr, attn_view_extent(&p->o, H, tq, d, dt)};
    in[nin++] = (struct attn_span){"d_o", p->d_o.ptr, attn_view_extent(&p->d_o, H, tq, d, dt)};
    in[nin++] = (struct attn_span){"lse", p->lse, lse_b};
    out[nout++] = (struct attn_span){"dq", p->dq.ptr, attn_view_extent(&p->dq, H, tq, d, dt)};
    out[nout++] = (struct attn_span){"dk", p->dk.ptr, attn_view_extent(&p->dk, KH, tk, d, dt)};
    out[nout++] = (struct attn_span){"dv", p->dv.ptr, attn_view_extent(&p->dv, KH, tk, d, dt)};
  }
  for (size_t i = 0; i < nout; i++) {
    for (size_t j = 0; j < nin; j++)
      TE_ARG(!attn_overlap(&out[i], &in[j]), "%s: %s overlaps %s", fn, out[i].name, in[j].name);
    for (size_t j = 0; j < i && !backward; j++)
      TE_ARG(!attn_overlap(&out[i], &out[j]), "%s: %s overlaps %s", fn, out[i].name, out[j].name);
    /* an output left out (a forward's lse 0) is not an address */
    if (out[i].p || out[i].bytes)
      TE_CHECK(te_dev_check_range(out[i].p, out[i].bytes, fn, out[i].name));
  }
  for (size_t j = 0; j < nin; j++) TE_CHECK(te_dev_check_range(in[j].p, in[j].bytes, fn, in[j].name));
  return attn_check_scalars(p, fn);
}

/* ---- the backend walk ------------------------------------------------------------------ */

/* The rows the tunable allows, in order; *named: the one it names. */
static const char *attn_wanted(void) { return tecore_tunable_str(&attn_backend_param); }

/* The backend that runs p; NULL with the reasons of every refusal in why. */
static const struct te_attn_backend *attn_choose(const struct te_attn_problem *p, int backward,
                                                 char *why, size_t len) {
  const char *want = attn_wanted();
  int any = strcmp(want, "auto") == 0;
  size_t used = 0;
  why[0] = 0;
  for (size_t i = 0; i < te_attn_backend_count; i++) {
    const struct te_attn_backend *b = te_attn_backends[i];
    if (!any && strcmp(b->name, want) != 0) continue;
    char r[256] = "";
    if (b->supports(p, backward, r, sizeof r)) return b;
    if (used < len) {
      int n = snprintf(why + used, len - used, "%s%s: %s", used ? "; " : "", b->name,
                       r[0] ? r : "refused");
      if (n > 0) used += (size_t)n;
    }
  }
  if (!why[0]) snprintf(why, len, "no backend is named %s", want);
  return NULL;
}

static size_t attn_seqlens_bytes(const struct te_attn_problem *p) {
  return p->cu_seqlens_q ? 0 : 2 * attn_round((p->batch + 1) * sizeof(int));
}

static size_t attn_ws_bytes(const struct te_attn_problem *p, const struct te_attn_backend *b,
                            int backward) {
  return attn_seqlens_bytes(p) + attn_round(b->workspace(p, backward));
}

/* The first bytes of the workspace hold the fixed lengths' prefix sums
 * (filled by a kernel, so a capture records it, unless the backend says
 * it reads none: cuDNN's BF16/F16 graphs for fixed lengths); the backend
 * gets the rest. */
static tecore_result_t attn_split_workspace(const struct tecore_attention_args *a,
                                            struct te_attn_problem *p,
                                            const struct te_attn_backend *b, int backward,
                                            tecore_stream_t stream, const char *fn) {
  size_t need = attn_ws_bytes(p, b, backward), sl = attn_seqlens_bytes(p);
  TE_ARG(a->workspace_bytes >= need,
         "%s: workspace_bytes %zu is below the %zu bytes tecore_attention_workspace_size gives",
         fn, a->workspace_bytes, need);
  TE_ARG(a->workspace || need == 0, "%s: workspace is 0", fn);
  TE_ARG(a->workspace % ATTN_WS_ALIGN == 0, "%s: workspace (0x%llx) is not aligned to %u bytes",
         fn, (unsigned long long)a->workspace, ATTN_WS_ALIGN);
  if (need) TE_CHECK(te_dev_check_range(a->workspace, need, fn, "workspace"));
  p->workspace = a->workspace + sl;
  p->workspace_bytes = need - sl;
  if (sl) {
    p->cu_seqlens_q = a->workspace;
    p->cu_seqlens_kv = a->workspace + sl / 2;
    if (!b->fixed_seqlens || b->fixed_seqlens(p, backward))
      TE_CHECK(te_attn_launch_seqlens(p->cu_seqlens_q, p->cu_seqlens_kv, p->batch,
                                      p->fixed_seqlen_q, p->fixed_seqlen_kv, stream));
  }
  return TECORE_SUCCESS;
}

/* Says the choice at INFO once per backend and direction, then at TRACE. */
static void attn_log_choice(const struct te_attn_backend *b, int backward, const char *why) {
  static int said[8][2];
  size_t i = 0;
  while (i < te_attn_backend_count && te_attn_backends[i] != b) i++;
  int first = i < 8 && !__atomic_exchange_n(&said[i][backward != 0], 1, __ATOMIC_RELAXED);
  if (first)
    TE_INFO(TECORE_SUBSYS_KERNEL, "attention %s: backend %s%s%s", backward ? "backward" : "forward",
            b->name, why[0] ? " (refused: " : "", why[0] ? why : "");
  if (why[0]) TE_TRACE(TECORE_SUBSYS_KERNEL, "attention: %s runs; %s", b->name, why);
}

/* ---- the status word --------------------------------------------------------------------- */

/* An error naming the entry a status word holds, or success for 0. */
static tecore_result_t attn_status_err(uint64_t w, const char *fn, const char *when) {
  static const char *const why[4] = {"", "is outside [0, tokens]", "is below the entry before it",
                                     "ends a sequence longer than max_seqlen"};
  if (!w) return TECORE_SUCCESS;
  const char *kv = (w & TE_ATTN_STATUS_KV) ? "kv" : "q";
  return TE_ERR(TECORE_ERR_INVALID, "%s: status: %s met cu_seqlens_%s[%llu] = %" PRId32 ", which "
                "%s", fn, when, kv, (unsigned long long)((w >> 32) & 0xfffffffu),
                (int32_t)(uint32_t)w, why[(w >> 60) & 3]);
}

TE_EXPORT tecore_result_t tecore_attention_check(uint64_t *status, tecore_stream_t stream) {
  return te_status_word_check(status, stream, attn_status_err, __func__);
}

static tecore_result_t attn_run(const struct tecore_attention_args *a, int backward,
                                tecore_stream_t stream, const char *fn) {
  struct te_attn_problem p;
  tecore_devptr_t status;
  TE_CHECK(attn_fill(a, backward, &p, fn));
  TE_CHECK(attn_check_spans(&p, backward, fn));
  TE_CHECK(te_status_word_arg(a->status, attn_status_err, &status, fn));
  char why[1024];
  const struct te_attn_backend *b = attn_choose(&p, backward, why, sizeof why);
  if (!b)
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: no attention backend takes the problem "
                  "(TECORE_ATTN_BACKEND=%s): %s", fn, attn_wanted(), why);
  TE_CHECK(attn_split_workspace(a, &p, b, backward, stream, fn));
  attn_log_choice(b, backward, why);
  if (p.batch == 0) return TECORE_SUCCESS;
  /* the caller's lengths (fixed ones are ours): reported, and clamped by
   * every kernel whether or not this runs */
  if (status && a->cu_seqlens_q) TE_CHECK(te_attn_launch_check(&p, status, stream));
  if (p.total_q == 0) return TECORE_SUCCESS;
  return backward ? b->bwd(&p, stream) : b->fwd(&p, stream);
}

/* ---- entry points ------------------------------------------------------------------------ */

TE_EXPORT tecore_result_t tecore_attention_fwd(const struct tecore_attention_args *args,
                                               tecore_stream_t stream) {
  return attn_run(args, 0, stream, __func__);
}

TE_EXPORT tecore_result_t tecore_attention_bwd(const struct tecore_attention_args *args,
                                               tecore_stream_t stream) {
  return attn_run(args, 1, stream, __func__);
}

TE_EXPORT tecore_result_t tecore_attention_workspace_size(const struct tecore_attention_args *args,
                                                          int backward, size_t *bytes) {
  TE_ARG(bytes, "%s: bytes is NULL", __func__);
  struct te_attn_problem p;
  TE_CHECK(attn_fill(args, backward, &p, __func__));
  char why[1024];
  const struct te_attn_backend *b = attn_choose(&p, backward, why, sizeof why);
  if (!b)
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: no attention backend takes the problem "
                  "(TECORE_ATTN_BACKEND=%s): %s", __func__, attn_wanted(), why);
  *bytes = attn_ws_bytes(&p, b, backward);
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_attention_describe(const struct tecore_attention_args *args,
                                                    int backward, char *buf, size_t len) {
  TE_ARG(buf && len, "%s: buf is NULL or len is 0", __func__);
  buf[0] = 0;
  struct te_attn_problem p;
  TE_CHECK(attn_fill(args, backward, &p, __func__));
  char why[1024];
  const struct te_attn_backend *b = attn_choose(&p, backward, why, sizeof why);
  if (b)
    snprintf(buf, len, "backend %s (TECORE_ATTN_BACKEND=%s)%s%s", b->name, attn_wanted(),
             why[0] ? "; refused: " : "", why);
  else
    snprintf(buf, len, "no backend (TECORE_ATTN_BACKEND=%s); refused: %s", attn_wanted(), why);
  return TECORE_SUCCESS;
}
