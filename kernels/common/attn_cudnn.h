/* SPDX-License-Identifier: Apache-2.0 */
/* attn_cudnn.h -- the parameters of kernels/attn_cudnn.cu (declared once,
 * kparams.h) and the per-element math both backends share: what the cuDNN
 * attention row (libtecore/attn/attn_cudnn.c) needs on the device to run
 * variable sequence lengths, computed from cu_seqlens without host reads.
 *
 * te_attn_cudnn_ragged, one item per i in [0, batch]: into int32 arrays of
 * `stride` elements each (stride >= batch + 1, a multiple of 4, so that
 * every array starts 16-byte aligned) at out:
 *   array 0: len_q[b]  = cu_q[b + 1] - cu_q[b]        (b < batch)
 *   array 1: len_kv[b] = cu_kv[b + 1] - cu_kv[b]      (b < batch)
 *   array 2 + r: cu[i] * mult_r, r = 0 .. 7 for Q K V O dO dQ dK dV
 *     (cu_q for Q O dO dQ, cu_kv for K V dK dV): the element offset of
 *     sequence i's first token in that tensor (its token stride times the
 *     token index); mult_r 0 writes zeros.
 *   Every sequence is first clamped to the views' rows as libte's kernels
 *   clamp it (te_attn_seq_of, attention.h: start in [0, total], length
 *   at most max_seqlen and the rows left), so a bad cu_seqlens never
 *   leads cuDNN outside Q, K, V, O or the gradients; the cu and len
 *   above are the clamped ones (here and in te_attn_cudnn_stats).
 * te_attn_cudnn_stats moves the softmax statistics between cuDNN's padded
 * [batch][heads][max_q] and the caller's lse [heads][total_q]:
 *   TE_ACD_TO_LSE, item (h, t) of heads x total_q: lse[h][t] =
 *     padded[b][h][t - cu_q[b]], b the sequence of token t (t past
 *     cu_q[batch], or past max_q in its sequence, is left alone); a row
 *     that sees no key (lk = 0, or causal and i + lk - lq < 0) gets
 *     lse = -inf and, when o is set, O = 0 (its d 16-bit elements at
 *     o + t * o_ts + h * o_hs), the attention contract cuDNN does not keep;
 *   TE_ACD_FROM_LSE, item (b, h, i) of batch x heads x max_q: padded[b][h][i]
 *     = lse[h][cu_q[b] + i] for i < len_q[b] where that is not -inf, else 0
 *     (so that a row that sees no key gives exp(-inf - 0) = 0, no NaN).
 * te_attn_cudnn_fp8 brackets the E4M3 forward graph (slots:
 * float[TE_ACD_SLOTS] in the workspace, TE_ACD_SLOT_*):
 *   TE_ACD_FP8_PRE, one item: every scalar the graph reads from device
 *     memory, each in a slot of its own 16 bytes apart (the graph declares
 *     its tensors 16-byte aligned; the caller's scale_inv and scale need
 *     only 4): descale_s = 1/448, scale_s = 448, copies of q_si[0],
 *     k_si[0], v_si[0] (1 where absent), and scale_o = o_scale[0] where
 *     set (an E4M3 O), else, for a staged O (BF16 or F16 O: the graph
 *     writes E4M3 into o8), 0.5 / v_si[0] rounded down to a power of two
 *     (1 when v_si[0] is not a positive finite number);
 *   TE_ACD_FP8_POST, item i of n = (o8 ? total_q * heads * d / 8 : 0) + 1:
 *     i < n - 1, the 8 elements e = 8 i .. 8 i + 7 of o8 (d % 8 == 0, so
 *     they share a token and head): o[t * o_ts + h * o_hs + x] (dtype o_dt)
 *     = o8[e] / scale_o for e = (t * heads + h) * d + x; item n - 1: s_amax
 *     and o_amax (when set) max-accumulated with the graph's amaxes (which
 *     it overwrites), and o_scale_inv = 1 / o_scale[0] (when set).  The GPU
 *     loads 8 bytes and stores 16 per item (o and its strides are 16-byte
 *     aligned: attn_cudnn.c checks), the widening a memory pass. */
#ifndef TE_KERNELS_ATTN_CUDNN_H
#define TE_KERNELS_ATTN_CUDNN_H

#include "kparams.h"
#include "te_hd.h"
#include "ldst.h"
#include "attention.h"
#ifndef __CUDACC__
#include <math.h>
#endif

#define TE_ACD_THREADS 256
#define TE_ACD_ROLES 8
#define TE_ACD_TO_LSE 0
#define TE_ACD_FROM_LSE 1

#define TE_ACD_RAGGED_PARAMS(P)      \
  P(const int *, cu_q, nnptr)        \
  P(const int *, cu_kv, nnptr)       \
  P(int *, out, nnptr)               \
  P(long long, batch, val)           \
  P(long long, stride, val)          \
  P(long long, total_q, val)         \
  P(long long, total_kv, val)        \
  P(int, max_q, val)                 \
  P(int, max_kv, val)                \
  P(long long, m0, val)              \
  P(long long, m1, val)              \
  P(long long, m2, val)              \
  P(long long, m3, val)              \
  P(long long, m4, val)              \
  P(long long, m5, val)              \
  P(long long, m6, val)              \
  P(long long, m7, val)

#define TE_ACD_STATS_PARAMS(P)       \
  P(const int *, cu_q, nnptr)        \
  P(const int *, cu_kv, nnptr)       \
  P(float *, padded, nnptr)          \
  P(float *, lse, nnptr)             \
  P(unsigned short *, o, ptr)        \
  P(long long, o_ts, val)            \
  P(long long, o_hs, val)            \
  P(long long, batch, val)           \
  P(long long, heads, val)           \
  P(long long, max_q, val)           \
  P(long long, total_q, val)         \
  P(int, d, val)                     \
  P(int, causal, val)                \
  P(int, dir, val)
/* The kernel's arguments as one (C and CUDA; TE_KARGS_FNS in
 * attn_cudnn_kern.h reads them from a launch's args[] on vdev). */
struct te_acd_stats_args {
  TE_KMEMBERS(TE_ACD_STATS_PARAMS)
};

#define TE_ACD_FP8_PRE 0
#define TE_ACD_FP8_POST 1
/* Constant P scale: P <= 1, and E4M3's largest finite value is 448. */
#define TE_ACD_P_SCALE 448.0f
/* Float indices of the slots, 16 bytes apart: the graph declares every
 * tensor 16-byte aligned. */
enum {
  TE_ACD_SLOT_DESCALE_S = 0, TE_ACD_SLOT_SCALE_S = 4, TE_ACD_SLOT_SCALE_O = 8,
  TE_ACD_SLOT_AMAX_S = 12, TE_ACD_SLOT_AMAX_O = 16, TE_ACD_SLOT_DESCALE_Q = 20,
  TE_ACD_SLOT_DESCALE_K = 24, TE_ACD_SLOT_DESCALE_V = 28, TE_ACD_SLOTS = 32
};

#define TE_ACD_FP8_PARAMS(P)         \
  P(float *, slots, nnptr)           \
  P(const float *, q_si, ptr)        \
  P(const float *, k_si, ptr)        \
  P(const float *, v_si, ptr)        \
  P(const unsigned char *, o8, ptr)  \
  P(void *, o, ptr)                  \
  P(float *, s_amax, ptr)            \
  P(float *, o_amax, ptr)            \
  P(const float *, o_scale, ptr)     \
  P(float *, o_scale_inv, ptr)       \
  P(long long, o_ts, val)            \
  P(long long, o_hs, val)            \
  P(long long, total_q, val)         \
  P(long long, heads, val)           \
  P(int, d, val)                     \
  P(int, o_dt, val)                  \
  P(int, mode, val)
struct te_acd_fp8_args {
  TE_KMEMBERS(TE_ACD_FP8_PARAMS)
};

/* Roles whose offsets follow cu_kv (K V dK dV); the others follow cu_q. */
TE_HD int te_acd_role_kv(int r) { return r == 1 || r == 2 || r == 6 || r == 7; }

/* The bounds te_attn_seq_of clamps sequences to (attention.h): tokens and
 * max_seqlen of Q and of K/V. */
struct te_acd_bounds {
  long long total_q, total_kv;
  int max_q, max_kv;
};

/* Item i in [0, batch] of te_attn_cudnn_ragged; m: the 8 multipliers.
 * Each sequence clamped as libte's kernels clamp it (te_attn_seq_of), so
 * cuDNN's reads and writes stay inside the views whatever cu holds; entry
 * batch (no sequence of its own) is the clamped end of the last one. */
TE_HD void te_acd_ragged_item(const int *cu_q, const int *cu_kv, int *out, long long batch,
                              long long stride, const long long *m,
                              const struct te_acd_bounds *bd, long long i) {
  long long j = i < batch ? i : i - 1;
  struct te_attn_seq q = {0, 0}, kv = {0, 0};
  if (j >= 0) {
    q = te_attn_seq_of(cu_q, j, bd->total_q, bd->max_q);
    kv = te_attn_seq_of(cu_kv, j, bd->total_kv, bd->max_kv);
  }
  if (i < batch) {
    out[i] = q.len;
    out[stride + i] = kv.len;
  } else {
    q.t0 += q.len;
    kv.t0 += kv.len;
  }
  for (int r = 0; r < TE_ACD_ROLES; r++)
    out[(2 + r) * stride + i] = (int)((long long)(te_acd_role_kv(r) ? kv.t0 : q.t0) * m[r]);
}

/* The sequence b in [0, batch) with cu[b] <= t < cu[b + 1], or -1. */
TE_HD long long te_acd_seq_of(const int *cu, long long batch, long long t) {
  if (t < cu[0] || t >= cu[batch]) return -1;
  long long lo = 0, hi = batch - 1; /* cu[lo] <= t; the answer is in [lo, hi] */
  while (lo < hi) {
    long long mid = (lo + hi + 1) / 2;
    if (cu[mid] <= t)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/* Whether row r of a sequence of lq queries and lk keys sees no key. */
TE_HD int te_acd_row_blind(long long r, long long lq, long long lk, int causal) {
  return lk == 0 || (causal && r + lk - lq < 0);
}

/* Item i of te_attn_cudnn_stats (see above for the two directions). */
TE_HD void te_acd_stats_item(const struct te_acd_stats_args *a, long long i) {
  const int *cu_q = a->cu_q, *cu_kv = a->cu_kv;
  float *padded = a->padded, *lse = a->lse;
  unsigned short *o = a->o;
  const long long o_ts = a->o_ts, o_hs = a->o_hs, batch = a->batch, heads = a->heads;
  const long long max_q = a->max_q, total_q = a->total_q;
  const int d = a->d, causal = a->causal, dir = a->dir;
  if (dir == TE_ACD_TO_LSE) {
    long long h = i / total_q, t = i % total_q;
    long long b = te_acd_seq_of(cu_q, batch, t);
    if (b < 0) return;
    struct te_attn_seq q = te_attn_seq_of(cu_q, b, total_q, (int)max_q);
    long long r = t - q.t0;
    if (r < 0 || r >= q.len) return; /* outside its clamped sequence */
    if (te_acd_row_blind(r, q.len, cu_kv[b + 1] - cu_kv[b], causal)) {
      lse[i] = -INFINITY;
      if (o)
        for (int e = 0; e < d; e++) o[t * o_ts + h * o_hs + e] = 0;
      return;
    }
    if (r >= max_q) return;
    lse[i] = padded[(b * heads + h) * max_q + r];
  } else {
    long long b = i / (heads * max_q), h = (i / max_q) % heads, r = i % max_q;
    struct te_attn_seq q = te_attn_seq_of(cu_q, b, total_q, (int)max_q);
    float v = r < q.len ? lse[h * total_q + q.t0 + r] : 0.0f;
    padded[i] = v == -INFINITY ? 0.0f : v;
  }
}

/* The scale of a staged O from V's dequantize factor: |O| <= max |V| times
 * the row's sum of quantized probabilities (<= 1 + 2^-4), and |V| <= 448
 * v_si, so O * scale_o stays within 224 (1 + 2^-4) < 448 for scale_o <=
 * 0.5 / v_si; the largest power of two not above it, so that widening
 * divides exactly (the GPU multiplies by the reciprocal: the same bits). */
TE_HD float te_acd_staged_scale(const float *v_si) {
  float v = v_si ? v_si[0] : 1.0f;
  float s = v > 0.0f && v < 3.0e38f ? 0.5f / v : 1.0f;
  if (!(s >= 1.17549435e-38f && s < 3.0e38f)) return 1.0f; /* not a normal float */
  union {
    float f;
    uint32_t u;
  } x = {s};
  x.u &= 0x7f800000u; /* the exponent alone: 2^floor(log2 s) */
  return x.f;
}

/* Elements of the staged O per item of TE_ACD_FP8_POST. */
#define TE_ACD_FP8_VEC 8

/* The items of te_attn_cudnn_fp8 in mode. */
TE_HD long long te_acd_fp8_items(const unsigned char *o8, long long total_q, long long heads,
                                 int d, int mode) {
  if (mode == TE_ACD_FP8_PRE) return 1;
  return (o8 ? total_q * heads * (d / TE_ACD_FP8_VEC) : 0) + 1;
}

/* Where the 8 staged elements of item i land in O: element offset of the
 * first (the 8 are contiguous). */
TE_HD long long te_acd_fp8_o_at(long long i, long long o_ts, long long o_hs, long long heads,
                                int d) {
  long long per = d / TE_ACD_FP8_VEC, x = (i % per) * TE_ACD_FP8_VEC, th = i / per;
  return (th / heads) * o_ts + (th % heads) * o_hs + x;
}

/* The last item of TE_ACD_FP8_POST: the amaxes folded, O's scale_inv. */
TE_HD void te_acd_fp8_fold(const float *slots, float *s_amax, float *o_amax, const float *o_scale,
                           float *o_scale_inv) {
  float as = slots[TE_ACD_SLOT_AMAX_S], ao = slots[TE_ACD_SLOT_AMAX_O];
  if (s_amax && as > *s_amax) *s_amax = as;
  if (o_amax && ao > *o_amax) *o_amax = ao;
  if (o_scale && o_scale_inv) *o_scale_inv = te_fp8_scale_inv(o_scale[0]);
}

/* The one item of TE_ACD_FP8_PRE: the slots the graph reads (see above). */
TE_HD void te_acd_fp8_pre(float *slots, const float *q_si, const float *k_si, const float *v_si,
                          const float *o_scale) {
  slots[TE_ACD_SLOT_DESCALE_S] = 1.0f / TE_ACD_P_SCALE;
  slots[TE_ACD_SLOT_SCALE_S] = TE_ACD_P_SCALE;
  slots[TE_ACD_SLOT_DESCALE_Q] = q_si ? q_si[0] : 1.0f;
  slots[TE_ACD_SLOT_DESCALE_K] = k_si ? k_si[0] : 1.0f;
  slots[TE_ACD_SLOT_DESCALE_V] = v_si ? v_si[0] : 1.0f;
  slots[TE_ACD_SLOT_SCALE_O] = o_scale ? o_scale[0] : te_acd_staged_scale(v_si);
  slots[TE_ACD_SLOT_AMAX_S] = slots[TE_ACD_SLOT_AMAX_O] = 0.0f;
}

/* Item i of te_attn_cudnn_fp8 (see above), element by element (vdev; the
 * GPU kernel does the same math 8 at a time). */
TE_HD void te_acd_fp8_item(const struct te_acd_fp8_args *a, long long i) {
  float *slots = a->slots;
  const float *q_si = a->q_si, *k_si = a->k_si, *v_si = a->v_si, *o_scale = a->o_scale;
  const unsigned char *o8 = a->o8;
  void *o = a->o;
  float *s_amax = a->s_amax, *o_amax = a->o_amax, *o_scale_inv = a->o_scale_inv;
  const long long o_ts = a->o_ts, o_hs = a->o_hs, total_q = a->total_q, heads = a->heads;
  const int d = a->d, o_dt = a->o_dt, mode = a->mode;
  long long n = te_acd_fp8_items(o8, total_q, heads, d, mode);
  if (mode == TE_ACD_FP8_PRE) {
    te_acd_fp8_pre(slots, q_si, k_si, v_si, o_scale);
    return;
  }
  if (i < n - 1) {
    long long at = te_acd_fp8_o_at(i, o_ts, o_hs, heads, d);
    float so = slots[TE_ACD_SLOT_SCALE_O];
    for (int e = 0; e < TE_ACD_FP8_VEC; e++) /* so is a power of two: exact */
      te_st(o, (uint64_t)(at + e), o_dt, te_e4m3_to_f32(o8[i * TE_ACD_FP8_VEC + e]) / so);
    return;
  }
  if (i == n - 1) te_acd_fp8_fold(slots, s_amax, o_amax, o_scale, o_scale_inv);
}

#endif
