/* SPDX-License-Identifier: Apache-2.0 */
/* attention.h -- the parameter block and the mask rule of the attention
 * kernels (kernels/attention.cu) and their vdev implementations
 * (libtecore/attn/attn_vdev.c).
 *
 * Shapes.  Tokens of all sequences packed ([tokens][heads][head_dim]
 * views, strides in elements); sequence b holds tokens
 * [cu_q[b], cu_q[b+1]) of Q/O and [cu_kv[b], cu_kv[b+1]) of K/V.
 * lse and dsum are float [heads][total_q]; dq_acc float
 * [total_q][heads][head_dim] (the backward's dQ, summed over key blocks).
 *
 * Kernels and grids:
 *   te_attn_seqlens   cu_q[b] = b * fixed_q, cu_kv[b] = b * fixed_kv
 *                     (fixed lengths; one block of up to 1024 threads
 *                     looping over batch + 1)
 *   te_attn_seqlens_check  the caller's cu_q and cu_kv against total_q,
 *                     total_kv, max_q, max_kv: the first entry out of
 *                     bounds (te_attn_seqlens_fault) into *status (one
 *                     block looping over batch + 1).  Every kernel that
 *                     reads cu_q or cu_kv clamps them (te_attn_seq_of)
 *                     whether or not this one runs.
 *   te_attn_fwd       grid (ceil(max_q / TE_ATTN_FWD_BM), heads, batch),
 *                     TE_ATTN_FWD_THREADS threads: O, lse
 *   te_attn_fwd2      the same at 2 blocks an SM: grid (heads, batch,
 *                     ceil(max_q / TE_ATTN_FWD2_BM)), TE_ATTN_FWD2_THREADS
 *   te_attn_fwd3      the same on Hopper's wgmma (sm_90a only): grid
 *                     (ceil(max_q / TE_ATTN_FWD3_BM), heads, batch),
 *                     TE_ATTN_FWD3_THREADS threads
 *   te_attn_bwd_prep  grid (ceil(total_q * heads / 8)), 256 threads (a warp
 *                     a (token, head) row): dsum = rowsum(dO * O), dq_acc = 0
 *   te_attn_bwd       grid (ceil(max_kv / TE_ATTN_BWD_BN), kv_heads, batch),
 *                     TE_ATTN_BWD_THREADS threads: dK, dV of the block's
 *                     keys over every query head of the group, dQ added to
 *                     dq_acc (already multiplied by scale)
 *   te_attn_bwd2      the same at 8 warps of 16 keys: grid (kv_heads, batch,
 *                     ceil(max_kv / TE_ATTN_BWD2_BN)), TE_ATTN_BWD2_THREADS
 *   te_attn_bwd3      the same on Hopper's wgmma (sm_90a only): grid
 *                     (ceil(max_kv / TE_ATTN_BWD3_BN), kv_heads, batch),
 *                     TE_ATTN_BWD3_THREADS threads
 *   te_attn_bwd_dq    grid (ceil(total_q * heads / 8)), 256 threads: dq =
 *                     dq_acc in dq's dtype
 *
 * Dtypes are tecore_dtype_t codes (TE_FP8_DT_*): qkv_dt of Q, K, V, dO,
 * dQ, dK, dV; o_dt of O.  E4M3 inputs run only on vdev (their kernels
 * refuse nothing: the backend table does). */
#ifndef TE_KERNELS_ATTENTION_H
#define TE_KERNELS_ATTENTION_H

#include "te_hd.h"

#define TE_ATTN_FWD_BM 128     /* query rows of a forward block */
#define TE_ATTN_FWD_BN 64      /* keys of a forward tile */
#define TE_ATTN_FWD_THREADS 256 /* 8 warps of 16 query rows */
#define TE_ATTN_FWD2_BM 128    /* query rows of a te_attn_fwd2 block */
#define TE_ATTN_FWD2_THREADS 128 /* 4 warps of 32 query rows */
#define TE_ATTN_FWD2_BN64 128  /* keys of a te_attn_fwd2 tile, head_dim <= 64 */
#define TE_ATTN_FWD2_BN128 64  /* keys of a te_attn_fwd2 tile, head_dim <= 128 */
#define TE_ATTN_FWD3_BM 128    /* query rows of a te_attn_fwd3 block (wgmma) */
#define TE_ATTN_FWD3_THREADS 256 /* 2 warpgroups of 64 query rows */
#define TE_ATTN_FWD3_BN64 64   /* keys of a te_attn_fwd3 tile, head_dim <= 64 */
#define TE_ATTN_FWD3_BN128 128 /* keys of a te_attn_fwd3 tile, head_dim <= 128 */
#define TE_ATTN_BWD3_BN 128    /* keys of a te_attn_bwd3 block (wgmma) */
#define TE_ATTN_BWD3_BM 64     /* query rows of a te_attn_bwd3 tile */
#define TE_ATTN_BWD3_THREADS 256 /* 2 warpgroups of 64 keys */
#define TE_ATTN_BWD_BM 64      /* query rows of a backward tile */
#define TE_ATTN_BWD_BN 64      /* keys of a backward block */
#define TE_ATTN_BWD_THREADS 128
#define TE_ATTN_BWD2_BN 128    /* keys of a te_attn_bwd2 block */
#define TE_ATTN_BWD2_BM64 128  /* query rows of a te_attn_bwd2 tile, head_dim <= 64 */
#define TE_ATTN_BWD2_BM128 64  /* query rows of a te_attn_bwd2 tile, head_dim <= 128 */
#define TE_ATTN_BWD2_THREADS 256 /* 8 warps of 16 keys */
#define TE_ATTN_ROW_THREADS 256 /* bwd_prep and bwd_dq */
#define TE_ATTN_DMAX 256       /* head_dim bound of the problem */

struct te_attn_params {
  const void *q, *k, *v;
  void *o;
  const void *d_o;
  void *dq, *dk, *dv;
  long long q_ts, q_hs, k_ts, k_hs, v_ts, v_hs, o_ts, o_hs;
  long long do_ts, do_hs, dq_ts, dq_hs, dk_ts, dk_hs, dv_ts, dv_hs;
  const int *cu_q, *cu_kv;
  float *lse;            /* [heads][total_q], or NULL (forward) */
  float *dsum;           /* [heads][total_q] (backward) */
  float *dq_acc;         /* [total_q][heads][head_dim] (backward) */
  long long total_q, total_kv;
  int batch, heads, kv_heads, head_dim;
  int max_q, max_kv;
  float scale;           /* softmax scale */
  float scale_log2;      /* scale * log2(e): exponents in base 2 */
  int causal;
  long long window;      /* window_left, or -1 */
  int qkv_dt, o_dt;
  /* E4M3 (vdev): dequantize factors, O's scale, its scale_inv (written as
   * 1 / *o_scale when set), amaxes as float bits (max-accumulated) */
  const float *q_si, *k_si, *v_si, *o_scale;
  float *o_scale_inv;
  unsigned *o_amax, *s_amax;
};

/* Sequence b's tokens in a view of `total` rows, from prefix sums that
 * live in device memory (the host never sees them): the start clamped
 * into [0, total], the end into [start, total], the length to at most
 * max.  Whatever cu holds, rows [t0, t0 + len) lie inside the view, so a
 * bad cu_seqlens can give wrong sequences but never a read or write
 * outside Q, K, V, O, lse or the gradients (te_attn_seqlens_fault
 * reports it). */
struct te_attn_seq {
  int t0, len;
};
TE_HD struct te_attn_seq te_attn_seq_of(const int *cu, long long b, long long total, int max) {
  long long s = cu[b], e = cu[b + 1];
  s = s < 0 ? 0 : (s > total ? total : s);
  e = e < s ? s : (e > total ? total : e);
  struct te_attn_seq r = {(int)s, (int)(e - s < max ? e - s : max)};
  return r;
}

/* Status word of te_attn_seqlens_check (a uint64_t the host reads): 0, or
 * bit 63 | bit 62 for cu_seqlens_kv (clear: cu_seqlens_q) | the reason in
 * bits 60-61 | the entry's index in bits 32-59 | its value in bits 0-31. */
#define TE_ATTN_STATUS_SET (1ull << 63)
#define TE_ATTN_STATUS_KV (1ull << 62)
#define TE_ATTN_BAD_RANGE 1ull /* outside [0, tokens] */
#define TE_ATTN_BAD_ORDER 2ull /* below the entry before it */
#define TE_ATTN_BAD_LONG 3ull  /* a sequence longer than max_seqlen */

/* 0 when entry i of cu (of batch + 1) is in bounds, else its status word. */
TE_HD unsigned long long te_attn_seqlens_fault(const int *cu, long long i, long long total,
                                               int max, int kv) {
  long long v = cu[i], prev = i > 0 ? cu[i - 1] : 0;
  unsigned long long why = v < 0 || v > total ? TE_ATTN_BAD_RANGE
                           : i > 0 && v < prev ? TE_ATTN_BAD_ORDER
                           : i > 0 && v - prev > max ? TE_ATTN_BAD_LONG : 0ull;
  if (!why) return 0ull;
  return TE_ATTN_STATUS_SET | (kv ? TE_ATTN_STATUS_KV : 0ull) | (why << 60) |
         (((unsigned long long)i & 0xfffffffull) << 32) | (unsigned long long)(unsigned)v;
}

/* The first and one-past-last key query i (of lq) sees among lk keys. */
TE_HD void te_attn_key_range(const struct te_attn_params *p, long long i, long long lq,
                             long long lk, long long *lo, long long *hi) {
  long long diag = i + lk - lq;
  *hi = p->causal ? (diag + 1 < lk ? diag + 1 : lk) : lk;
  *lo = p->window >= 0 ? (diag - p->window > 0 ? diag - p->window : 0) : 0;
  if (*hi < 0) *hi = 0;
  if (*lo > *hi) *lo = *hi;
}

#endif
