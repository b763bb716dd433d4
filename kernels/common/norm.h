/* SPDX-License-Identifier: Apache-2.0 */
/* norm.h -- LayerNorm and RMSNorm math shared by kernels/norm.cu and the
 * vdev implementations (libtecore/norm/), so both give the same bits:
 * the launch plan (which thread owns which elements of a row), the order
 * in which a row's sums are added, and the per-element formulas.
 *
 * Shapes: x, y, dy, dx [rows][hidden]; gamma, beta, dgamma, dbeta
 * [hidden]; mu, rsigma [rows] (float).
 *
 * The summation order, which fixes every rounding:
 *   A row is handled by T threads ("tpr": 32 .. 1024, a power of two).
 *   The row is cut into vectors of VEC elements (VEC = 8 when the row's
 *   pointers allow 16-byte accesses and hidden % 8 == 0, else 1); thread t
 *   owns vectors t, t+T, t+2T, ... and adds its elements into one float
 *   in that order, element by element.  Threads without elements hold 0.
 *   Each warp then adds its 32 values by an xor butterfly (offsets 16, 8,
 *   4, 2, 1; every lane ends with the same sum, since IEEE addition
 *   commutes).  With more than one warp per row, the warp sums are laid
 *   in lanes 0 .. T/32-1 of a warp, zeros above, and butterflied again.
 *   te_norm_tree_sum reproduces this in C.
 *
 * Forward (float, one IEEE operation each, fmath.h):
 *   LN:  mean = S(x) / H;  d = x - mean;  var = S(d*d) / H  (fma into the sum);
 *        rs = 1 / sqrt(var + eps);  y = fma(d*rs, g, beta)
 *   RMS: ms = S(x*x) / H (fma);  rs = 1 / sqrt(ms + eps);  y = (x*rs)*g
 *   g = gamma + zc (zc = 1 with zero-centered gamma, else -0: g = gamma).
 *   Output: y * scale, scale = 1 unless the output is FP8, q = fp8(y *
 *   scale); amax = max |y| (before the scale; te_amax_f32).
 *
 * Backward:
 *   xhat = (x - mu)*rs (LN) or x*rs (RMS);  dyg = dy*g
 *   m1 = S(dyg) / H (LN only);  m2 = S(dyg*xhat) / H (fma)
 *   LN:  dx = rs * (dyg - fma(xhat, m2, m1))
 *   RMS: dx = rs * (dyg - xhat*m2)   [+ extra_grad, for rmsnorm_bwd_add]
 *   dgamma += dy*xhat (fma), dbeta += dy, per column, over rows.
 *   Column partials: block b of P handles row-slot s (0 .. R-1) of row
 *   groups b, b+P, b+2P, ...; each slot adds its rows in order, the block
 *   adds its slots in order 0 .. R-1 and writes partial row b of the
 *   workspace.  The reduce kernel gives column c to 32 groups: group g adds
 *   partials g, g+32, ... in order, then the 32 group sums are butterflied
 *   as above. */
#ifndef TE_KERNELS_NORM_H
#define TE_KERNELS_NORM_H

#include "fmath.h"

/* flags of the norm kernels */
#define TE_NORM_LAYERNORM 0x1      /* else RMSNorm */
#define TE_NORM_ZERO_CENTERED 0x2  /* g = 1 + gamma */
#define TE_NORM_EXTRA_GRAD 0x4     /* backward: dx += extra_grad */
#define TE_NORM_SMEM_PARTIALS 0x8  /* streaming backward: column partials in
                                      dynamic shared memory (GPU only) */
/* The most shared memory the streaming backward takes for its partials. */
#define TE_NORM_SMEM_MAX (200u * 1024u)

/* Dtypes of a kernel's tensors packed in one int, 4 bits each
 * (tecore_dtype_t values). */
#define TE_NORM_DT(packed, slot) (((packed) >> (4 * (slot))) & 0xf)
#define TE_NORM_DT_PACK(a, b, c, d, e) \
  ((a) | ((b) << 4) | ((c) << 8) | ((d) << 12) | ((e) << 16))

/* Register limits: a forward thread keeps up to 4 vectors of a row (32
 * floats), a backward thread 2 vectors of x and of dy and their column
 * partials; longer rows take the streaming kernels, which re-read the row
 * from global memory (L2) instead of keeping it in registers. */
#define TE_NORM_FWD_NV_MAX 4
#define TE_NORM_BWD_NV_MAX 2
/* Threads of a block in the warp-per-row layouts, and the most threads a
 * row gets (the backward kernels keep more per thread: at 512 threads a
 * block they have 128 registers, enough not to spill). */
#define TE_NORM_FWD_BLOCK 128
#define TE_NORM_BWD_BLOCK 256
#define TE_NORM_FWD_TMAX 1024
#define TE_NORM_BWD_TMAX 512
/* The compiled-constant forward kernel takes rows of at most this many
 * threads (so it may use 128 registers). */
#define TE_NORM_FAST_TMAX 512
/* Partial rows of the backward workspace, at most: two blocks on each of
 * an H100 SXM's 132 SMs, so the first stage is one full wave there.  A
 * constant, not the device's SM count, so that every device (and vdev)
 * adds the column sums in the same order. */
#define TE_NORM_BWD_MAX_PARTS 264
/* te_norm_bwd_fast (80 registers, 256 threads) fits three blocks an SM:
 * three waves' worth of partial rows, so that an SM keeps 24 warps of
 * loads in flight (at two blocks a GPT-2 LayerNorm backward, 32768 x
 * 768, ran at about 60% of the copy floor on an H100). */
#define TE_NORM_BWD_FAST_MAX_PARTS 396
/* The reduce kernel: 8 columns x 32 groups of partials x 3 sums per block
 * (96 blocks for hidden 768: with 32 columns a block, GPT-2's 24 blocks
 * took 6.8 us a call on an H100, bench/2026-11-26.md, session 33, c1).  The groups'
 * butterfly, a warp a column, needs 32 groups. */
#define TE_NORM_REDUCE_COLS 8
#define TE_NORM_REDUCE_GROUPS 32

struct te_norm_plan {
  int vec;            /* elements per vector: 8 or 1 */
  int tpr;            /* threads per row (T) */
  int nv;             /* vectors per thread */
  int rows_per_block; /* R: row slots of a block */
  int stream;         /* 1: the row does not fit in registers */
  unsigned threads;   /* block size = tpr * rows_per_block */
};

TE_HD unsigned te_norm_pow2_ceil(unsigned long long v) {
  unsigned p = 1;
  while (p < v && p < (1u << 30)) p <<= 1;
  return p;
}

/* The layout of a row: vec 8 or 1, nv_max the register limit, block the
 * block size for warp-per-row shapes, tmax the most threads a row gets. */
TE_HD struct te_norm_plan te_norm_plan_make(unsigned long long hidden, int vec, int nv_max,
                                            unsigned block, unsigned tmax) {
  struct te_norm_plan p;
  unsigned long long nvec = (hidden + (unsigned)vec - 1) / (unsigned)vec;
  p.vec = vec;
  unsigned t = te_norm_pow2_ceil((nvec + (unsigned)nv_max - 1) / (unsigned)nv_max);
  if (t < 32) t = 32;
  if (t > tmax) t = tmax;
  p.tpr = (int)t;
  p.nv = (int)((nvec + t - 1) / t);
  p.stream = p.nv > nv_max;
  p.rows_per_block = (t >= block) ? 1 : (int)(block / t);
  p.threads = t * (unsigned)p.rows_per_block;
  return p;
}

TE_HD struct te_norm_plan te_norm_plan_fwd(unsigned long long hidden, int vec) {
  return te_norm_plan_make(hidden, vec, TE_NORM_FWD_NV_MAX, TE_NORM_FWD_BLOCK, TE_NORM_FWD_TMAX);
}
TE_HD struct te_norm_plan te_norm_plan_bwd(unsigned long long hidden, int vec) {
  return te_norm_plan_make(hidden, vec, TE_NORM_BWD_NV_MAX, TE_NORM_BWD_BLOCK, TE_NORM_BWD_TMAX);
}

/* Number of partial rows (= blocks of the first backward stage), at most
 * max_parts (TE_NORM_BWD_MAX_PARTS, or TE_NORM_BWD_FAST_MAX_PARTS for
 * te_norm_bwd_fast). */
TE_HD unsigned te_norm_bwd_parts(unsigned long long rows, int rows_per_block,
                                 unsigned max_parts) {
  unsigned long long groups = (rows + (unsigned)rows_per_block - 1) / (unsigned)rows_per_block;
  if (groups < 1) groups = 1;
  return groups < max_parts ? (unsigned)groups : max_parts;
}

/* ---- per-element formulas ------------------------------------------------ */

/* The weight applied to a normalized element: g + zc, zc = 1 with
 * zero-centered gamma, else -0 (te_norm_zc).  An add rather than a branch
 * keeps the element loops of kernels that read the flag at run time free
 * of selects; g + (-0) is g bit for bit (a -0 gamma included), so a kernel
 * that knows the flag at compile time uses g itself, one operation fewer,
 * and gives the same bits. */
TE_HD float te_norm_zc(int flags) { return (flags & TE_NORM_ZERO_CENTERED) ? 1.0f : -0.0f; }
TE_HD float te_norm_gamma(float g, float zc) { return te_add_rn(g, zc); }
/* rs = 1 / sqrt(v + eps), v the variance or the mean square. */
TE_HD float te_norm_rsigma(float v, float eps) { return te_rcp_rn(te_sqrt_rn(te_add_rn(v, eps))); }
/* The mean of a sum over a row of h elements. */
TE_HD float te_norm_mean(float sum, float h) { return te_div_rn(sum, h); }
/* 1/h where h is a power of two (exact), else 0: then sum * (1/h) is
 * te_norm_mean's correctly rounded sum / h, bit for bit, for a multiply
 * instead of a division (with its range check and slow path) per row.
 * h = 2^k (1 <= h <= 2^32, a row length) has 1/h = 2^-k, whose biased
 * exponent is 254 minus h's: integer arithmetic, no division. */
TE_HD float te_norm_inv_pow2(float h) {
  uint32_t u = te_f32_bits(h);
  return (u & 0x7fffffu) == 0 ? te_bits_f32(0x7f000000u - (u & 0x7f800000u)) : 0.0f;
}
TE_HD float te_norm_mean_inv(float sum, float h, float inv) {
  return inv != 0.0f ? te_mul_rn(sum, inv) : te_div_rn(sum, h);
}
TE_HD float te_ln_out(float d, float rs, float g, float b) { return te_fma_rn(te_mul_rn(d, rs), g, b); }
TE_HD float te_rms_out(float x, float rs, float g) { return te_mul_rn(te_mul_rn(x, rs), g); }
TE_HD float te_ln_dx(float rs, float dyg, float xhat, float m1, float m2) {
  return te_mul_rn(rs, te_sub_rn(dyg, te_fma_rn(xhat, m2, m1)));
}
TE_HD float te_rms_dx(float rs, float dyg, float xhat, float m2) {
  return te_mul_rn(rs, te_sub_rn(dyg, te_mul_rn(xhat, m2)));
}

/* ---- the reduction tree, in C (for the vdev implementations) ---------------
 * v[0 .. n-1], n a multiple of 32 (at most 1024), are the per-thread
 * partials of one row; returns the sum the GPU's butterflies give.
 * v is used as scratch. */
#ifndef __CUDACC__
static inline void te_norm_butterfly32_(float *w) {
  float t[32];
  for (int off = 16; off >= 1; off >>= 1) {
    for (int l = 0; l < 32; l++) t[l] = te_add_rn(w[l], w[l ^ off]);
    for (int l = 0; l < 32; l++) w[l] = t[l];
  }
}
static inline float te_norm_tree_sum(float *v, int n) {
  float warps[32];
  int nw = n / 32;
  for (int w = 0; w < nw; w++) {
    te_norm_butterfly32_(v + 32 * w);
    warps[w] = v[32 * w];
  }
  if (nw == 1) return warps[0];
  for (int w = nw; w < 32; w++) warps[w] = 0.0f;
  te_norm_butterfly32_(warps);
  return warps[0];
}
#endif

#endif
