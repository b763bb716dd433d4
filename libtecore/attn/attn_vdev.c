/* SPDX-License-Identifier: Apache-2.0 */
/* attn_vdev.c -- the attention kernels in plain C: the vdev side of
 * kernels/attention.cu's table (attn_libte.c), which the "vdev" row of the
 * backend table runs on the virtual device for every problem the entry
 * points accept, E4M3 included; and the vdev side of the cuDNN row's two
 * helper kernels (attn_cudnn_kern.c).  They call nothing of attn/: the
 * tables above name them.
 *
 * The math is the GPU's: float products and sums, the softmax in base 2
 * with the scale folded into log2(e) (p = 2^(s * scale_log2 - m)), lse
 * stored in natural log; the backward recomputes P from lse, takes
 * D = rowsum(dO * O) from the stored O, and sums dQ in a float buffer
 * (dq_acc, already multiplied by scale) that te_attn_bwd_dq converts.
 * E4M3 inputs are dequantized (value * scale_inv), everything computed in
 * float, and O quantized with its scale at the end; as cuDNN's FP8 engines
 * do (attn_cudnn.c), the probabilities are rounded to E4M3 at the fixed
 * scale 448 before the product with V, and a BF16/F16 O passes through
 * E4M3 at the staged scale 0.5 / v.scale_inv (kernels/common/attn_cudnn.h).  Each function runs
 * its whole grid on the stream's worker thread. */
#include "attn/attn_internal.h"
#include "attn/attn_cudnn_kern.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/ldst.h"

#define LOG2E 1.4426950408889634f

static float attn_ld(const void *base, long long i, int dt) {
  if (dt == TE_FP8_DT_E4M3) return te_e4m3_to_f32(((const uint8_t *)base)[i]);
  return te_ld(base, (uint64_t)i, dt);
}

/* A [tokens][heads][d] view the kernels read (src) or write (dst):
 * strides in elements, dt a TE_FP8_DT_* code. */
struct attn_src {
  const void *base;
  long long ts, hs;
  int d, dt;
};

struct attn_dst {
  void *base;
  long long ts, hs;
  int d, dt;
};

/* View x of p in qkv_dt (strides st_ts, st_hs: d_o's are do_ts, do_hs). */
#define ATTN_SRC(p, x, st) \
  ((struct attn_src){(p)->x, (p)->st##_ts, (p)->st##_hs, (p)->head_dim, (p)->qkv_dt})
#define ATTN_DST(p, x) \
  ((struct attn_dst){(p)->x, (p)->x##_ts, (p)->x##_hs, (p)->head_dim, (p)->qkv_dt})

/* Row (token t, head h) of a view as floats (times f). */
static void attn_row(const struct attn_src *v, long long t, int h, float f, float *out) {
  long long o = t * v->ts + (long long)h * v->hs;
  for (int i = 0; i < v->d; i++) out[i] = attn_ld(v->base, o + i, v->dt) * f;
}

void te_attn_vdev_seqlens(const struct tecore_launch_cfg *cfg, void *const *args) {
  (void)cfg;
  struct te_attn_seqlens_args a = te_attn_seqlens_args_of(args);
  for (int b = 0; b <= a.batch; b++) {
    a.cu_q[b] = b * a.len_q;
    a.cu_kv[b] = b * a.len_kv;
  }
}

static void attn_vdev_report(unsigned long long *st, unsigned long long w) {
  if (w && __atomic_load_n(st, __ATOMIC_RELAXED) == 0) __atomic_store_n(st, w, __ATOMIC_RELAXED);
}

void te_attn_vdev_seqlens_check(const struct tecore_launch_cfg *cfg, void *const *args) {
  (void)cfg;
  struct te_attn_check_args a = te_attn_check_args_of(args);
  for (int i = 0; i <= a.batch; i++) {
    attn_vdev_report(a.status, te_attn_seqlens_fault(a.cu_q, i, a.total_q, a.max_q, 0));
    attn_vdev_report(a.status, te_attn_seqlens_fault(a.cu_kv, i, a.total_kv, a.max_kv, 1));
  }
}

/* ---- forward ------------------------------------------------------------------------------ */

struct attn_fp8 {
  float q, k, v, o_scale;
  int on;              /* E4M3 inputs: P (and a BF16/F16 O) go through E4M3 */
  float staged;        /* BF16/F16 O's E4M3 scale (0: O is E4M3 itself) */
};

static struct attn_fp8 attn_fp8_factors(const struct te_attn_params *p) {
  struct attn_fp8 f = {1.0f, 1.0f, 1.0f, 1.0f, 0, 0.0f};
  if (p->qkv_dt == TE_FP8_DT_E4M3) {
    f.q = *p->q_si;
    f.k = *p->k_si;
    f.v = *p->v_si;
    f.on = 1;
    if (p->o_dt != TE_FP8_DT_E4M3) f.staged = te_acd_staged_scale(p->v_si);
  }
  if (p->o_dt == TE_FP8_DT_E4M3) f.o_scale = *p->o_scale;
  return f;
}

/* The keys one query row sees: tokens k0 + [lo, hi) of kv head kvh. */
struct attn_keys {
  long long k0, lo, hi;
  int kvh;
};

/* One query row: O (as floats, before any quantization) and lse. */
static float attn_fwd_row(const struct te_attn_params *p, const float *q,
                          const struct attn_keys *ks, const struct attn_fp8 *f, float *s,
                          float *kr, float *o) {
  const struct attn_src kv = ATTN_SRC(p, k, k), vv = ATTN_SRC(p, v, v);
  long long k0 = ks->k0, lo = ks->lo, hi = ks->hi;
  int d = p->head_dim;
  float m = -INFINITY;
  for (long long j = lo; j < hi; j++) {
    attn_row(&kv, k0 + j, ks->kvh, f->k, kr);
    float acc = 0.0f;
    for (int x = 0; x < d; x++) acc += q[x] * kr[x];
    s[j - lo] = acc * p->scale_log2;
    if (s[j - lo] > m) m = s[j - lo];
  }
  float l = 0.0f;
  memset(o, 0, (size_t)d * sizeof(float));
  if (f->on) /* the sum first: P = e / l is rounded to E4M3 before the product */
    for (long long j = lo; j < hi; j++) l += exp2f(s[j - lo] - m);
  for (long long j = lo; j < hi; j++) {
    float e = exp2f(s[j - lo] - m);
    if (f->on)
      e = te_e4m3_to_f32(te_f32_to_e4m3(e / l * TE_ACD_P_SCALE)) * (1.0f / TE_ACD_P_SCALE);
    else
      l += e;
    attn_row(&vv, k0 + j, ks->kvh, f->v, kr);
    for (int x = 0; x < d; x++) o[x] += e * kr[x];
  }
  if (hi <= lo) return -INFINITY;
  if (!f->on)
    for (int x = 0; x < d; x++) o[x] /= l;
  if (p->s_amax) te_vdev_amax_update(p->s_amax, te_abs_bits(1.0f / l));
  return (m + log2f(l)) / LOG2E;
}

static void attn_store_o(const struct te_attn_params *p, long long t, int h, const float *o,
                         const struct attn_fp8 *f, float *am) {
  long long base = t * p->o_ts + (long long)h * p->o_hs;
  for (int x = 0; x < p->head_dim; x++) {
    float v = o[x];
    if (fabsf(v) > *am) *am = fabsf(v);
    if (f->staged > 0.0f) v = te_e4m3_to_f32(te_f32_to_e4m3(v * f->staged)) / f->staged;
    te_st(p->o, (uint64_t)(base + x), p->o_dt, p->o_dt == TE_FP8_DT_E4M3 ? v * f->o_scale : v);
  }
}

void te_attn_vdev_fwd(const struct tecore_launch_cfg *cfg, void *const *args) {
  (void)cfg;
  const struct te_attn_params *p = te_attn_args_of(args).p;
  struct attn_fp8 f = attn_fp8_factors(p);
  if (p->o_scale_inv && p->o_dt == TE_FP8_DT_E4M3) *p->o_scale_inv = te_fp8_scale_inv(f.o_scale);
  int d = p->head_dim, group = p->heads / p->kv_heads;
  float *q = malloc((size_t)d * 3 * sizeof(float)), *s = malloc(((size_t)p->max_kv + 1) * sizeof(float));
  float *kr = q + d, *o = q + 2 * d, am = 0.0f;
  const struct attn_src qv = ATTN_SRC(p, q, q);
  for (int b = 0; q && s && b < p->batch; b++) {
    struct te_attn_seq sq = te_attn_seq_of(p->cu_q, b, p->total_q, p->max_q);
    struct te_attn_seq sk = te_attn_seq_of(p->cu_kv, b, p->total_kv, p->max_kv);
    long long q0 = sq.t0, lq = sq.len, k0 = sk.t0, lk = sk.len;
    for (int h = 0; h < p->heads; h++)
      for (long long i = 0; i < lq; i++) {
        struct attn_keys ks = {.k0 = k0, .kvh = h / group};
        te_attn_key_range(p, i, lq, lk, &ks.lo, &ks.hi);
        attn_row(&qv, q0 + i, h, f.q, q);
        float lse = attn_fwd_row(p, q, &ks, &f, s, kr, o);
        attn_store_o(p, q0 + i, h, o, &f, &am);
        if (p->lse) p->lse[(long long)h * p->total_q + q0 + i] = lse;
      }
  }
  if (p->o_amax) te_vdev_amax_update(p->o_amax, te_abs_bits(am));
  free(q);
  free(s);
}

/* ---- backward ----------------------------------------------------------------------------- */

void te_attn_vdev_bwd_prep(const struct tecore_launch_cfg *cfg, void *const *args) {
  (void)cfg;
  const struct te_attn_params *p = te_attn_args_of(args).p;
  int d = p->head_dim;
  for (long long t = 0; t < p->total_q; t++)
    for (int h = 0; h < p->heads; h++) {
      long long oo = t * p->o_ts + (long long)h * p->o_hs, od = t * p->do_ts + (long long)h * p->do_hs;
      float acc = 0.0f;
      for (int x = 0; x < d; x++) acc += attn_ld(p->d_o, od + x, p->qkv_dt) * attn_ld(p->o, oo + x, p->o_dt);
      p->dsum[(long long)h * p->total_q + t] = acc;
      memset(p->dq_acc + (t * p->heads + h) * d, 0, (size_t)d * sizeof(float));
    }
}

/* The contributions of query row i (token tq, head h) to dQ, dK, dV. */
static void attn_bwd_row(const struct te_attn_params *p, long long tq, int h,
                         const struct attn_keys *ks, float *buf, float *dk, float *dv) {
  const struct attn_src qv = ATTN_SRC(p, q, q), dov = ATTN_SRC(p, d_o, do);
  const struct attn_src kv = ATTN_SRC(p, k, k), vv = ATTN_SRC(p, v, v);
  long long k0 = ks->k0, lo = ks->lo, hi = ks->hi;
  int d = p->head_dim;
  float *q = buf, *dout = buf + d, *kr = buf + 2 * d, *vr = buf + 3 * d;
  float *dq = p->dq_acc + (tq * p->heads + h) * d;
  attn_row(&qv, tq, h, 1.0f, q);
  attn_row(&dov, tq, h, 1.0f, dout);
  float lse2 = p->lse[(long long)h * p->total_q + tq] * LOG2E, dsum = p->dsum[(long long)h * p->total_q + tq];
  for (long long j = lo; j < hi; j++) {
    attn_row(&kv, k0 + j, ks->kvh, 1.0f, kr);
    attn_row(&vv, k0 + j, ks->kvh, 1.0f, vr);
    float s = 0.0f, dp = 0.0f;
    for (int x = 0; x < d; x++) {
      s += q[x] * kr[x];
      dp += dout[x] * vr[x];
    }
    float pr = exp2f(s * p->scale_log2 - lse2), ds = pr * (dp - dsum) * p->scale;
    for (int x = 0; x < d; x++) {
      dq[x] += ds * kr[x];
      dk[j * d + x] += ds * q[x];
      dv[j * d + x] += pr * dout[x];
    }
  }
}

/* Rows t0 .. t0 + n of head h of a view from v ([n][d] floats). */
static void attn_store_rows(const struct attn_dst *o, long long t0, long long n, int h,
                            const float *v) {
  int d = o->d;
  for (long long j = 0; j < n; j++)
    for (int x = 0; x < d; x++)
      te_st(o->base, (uint64_t)((t0 + j) * o->ts + (long long)h * o->hs + x), o->dt,
            v[j * d + x]);
}

void te_attn_vdev_bwd(const struct tecore_launch_cfg *cfg, void *const *args) {
  (void)cfg;
  const struct te_attn_params *p = te_attn_args_of(args).p;
  int d = p->head_dim, group = p->heads / p->kv_heads;
  float *buf = malloc((size_t)d * 4 * sizeof(float));
  for (int b = 0; buf && b < p->batch; b++) {
    struct te_attn_seq sq = te_attn_seq_of(p->cu_q, b, p->total_q, p->max_q);
    struct te_attn_seq sk = te_attn_seq_of(p->cu_kv, b, p->total_kv, p->max_kv);
    long long q0 = sq.t0, lq = sq.len, k0 = sk.t0, lk = sk.len;
    float *dk = calloc((size_t)(lk > 0 ? lk : 1) * (size_t)d * 2, sizeof(float));
    if (!dk) break;
    float *dv = dk + lk * d;
    for (int kvh = 0; kvh < p->kv_heads; kvh++) {
      memset(dk, 0, (size_t)lk * (size_t)d * 2 * sizeof(float));
      for (int h = kvh * group; h < (kvh + 1) * group; h++)
        for (long long i = 0; i < lq; i++) {
          struct attn_keys ks = {.k0 = k0, .kvh = kvh};
          te_attn_key_range(p, i, lq, lk, &ks.lo, &ks.hi);
          attn_bwd_row(p, q0 + i, h, &ks, buf, dk, dv);
        }
      attn_store_rows(&ATTN_DST(p, dk), k0, lk, kvh, dk);
      attn_store_rows(&ATTN_DST(p, dv), k0, lk, kvh, dv);
    }
    free(dk);
  }
  free(buf);
}

void te_attn_vdev_bwd_dq(const struct tecore_launch_cfg *cfg, void *const *args) {
  (void)cfg;
  const struct te_attn_params *p = te_attn_args_of(args).p;
  const struct attn_dst dq = ATTN_DST(p, dq);
  for (long long t = 0; t < p->total_q; t++)
    for (int h = 0; h < p->heads; h++)
      attn_store_rows(&dq, t, 1, h, p->dq_acc + (t * p->heads + h) * p->head_dim);
}

/* ---- the cuDNN row's two helper kernels (kernels/attn_cudnn.cu): the same
 * per-item math, kernels/common/attn_cudnn.h, over the whole grid ---- */

void te_acd_vdev_ragged(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_acd_ragged_args a = te_acd_ragged_args_of(args);
  (void)cfg;
  const long long m[TE_ACD_ROLES] = {a.m0, a.m1, a.m2, a.m3, a.m4, a.m5, a.m6, a.m7};
  const struct te_acd_bounds bd = {a.total_q, a.total_kv, a.max_q, a.max_kv};
  for (long long i = 0; i <= a.batch; i++)
    te_acd_ragged_item(a.cu_q, a.cu_kv, a.out, a.batch, a.stride, m, &bd, i);
}

void te_acd_vdev_stats(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_acd_stats_args a = te_acd_stats_args_of(args);
  (void)cfg;
  long long n = a.dir == TE_ACD_TO_LSE ? a.heads * a.total_q : a.batch * a.heads * a.max_q;
  for (long long i = 0; i < n; i++)
    te_acd_stats_item(&a, i);
}

void te_acd_vdev_fp8(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_acd_fp8_args a = te_acd_fp8_args_of(args);
  (void)cfg;
  long long n = te_acd_fp8_items(a.o8, a.total_q, a.heads, a.d, a.mode);
  for (long long i = 0; i < n; i++)
    te_acd_fp8_item(&a, i);
}
