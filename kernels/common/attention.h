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
