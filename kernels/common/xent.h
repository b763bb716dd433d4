/* SPDX-License-Identifier: Apache-2.0 */
/* xent.h -- the parameters of kernels/xent.cu (declared once, kparams.h)
 * and the per-token math both backends share.
 *
 * te_xent_row (a block a row) modes:
 *   FULL    one pass: online max / sum-exp, sum x; writes loss and lse;
 *   MAX     ws[t] = the slice's max (reduced across ranks by the caller);
 *   SUMS    with M = ws[t]: ws[T + 3t ..] = {sum exp(x - M), x_label (0
 *           when the label is not in the slice), sum x} (then summed
 *           across ranks);
 *   FINISH  no logits: loss and lse from ws.
 * te_xent_mean: one block of TE_XENT_MEAN_THREADS; thread i adds the losses
 * of rows i, i + N, ... that are not ignored, then the tree of
 * te_xent_tree_sum: the same bits on both backends (count_only: mean[1]
 * only, the count, loss not read).
 * te_xent_bwd: dlogits over x (y NULL), or into y of dtype ydtype: a
 * 16/32-bit copy, or E4M3/E5M2 codes of dlogits * *scale (scale NULL: 1)
 * with the amax of the unscaled dlogits max-accumulated into *amax (one
 * atomic a block) and *scale_inv = 1 / *scale (te/fp8.h's protocol). */
#ifndef TE_KERNELS_XENT_H
#define TE_KERNELS_XENT_H

#include "kparams.h"
#include "te_hd.h"
#include "fmath.h"
#ifndef __CUDACC__
#include <math.h>
#endif

#define TE_XENT_FULL 0
#define TE_XENT_MAX 1
#define TE_XENT_SUMS 2
#define TE_XENT_FINISH 3
/* flags */
#define TE_XENT_VEC 0x10        /* rows 16-byte aligned, vocab % 8 == 0 */
#define TE_XENT_DLOSS_MEAN 0x20 /* backward: dloss[0] / mean[1] */

#define TE_XENT_THREADS 512
#define TE_XENT_MEAN_THREADS 1024
/* te_xent_bwd: threads of a block, the 16-byte vectors a thread loads
 * before it uses any, and the slice of a row a block takes at most
 * (units: vectors with TE_XENT_VEC, else elements). */
#define TE_XENT_BWD_THREADS 256
#define TE_XENT_BWD_UNROLL 4
#define TE_XENT_BWD_CHUNK (TE_XENT_BWD_THREADS * TE_XENT_BWD_UNROLL)

#define TE_XENT_ROW_PARAMS(P)         \
  P(const void *, x, eptr(12, TE_KP_WHOLE)) \
  P(const int *, labels, ptr)         \
  P(float *, loss, ptr)               \
  P(float *, lse, ptr)                \
  P(float *, ws, ptr)                 \
  P(unsigned long long, tokens, val)  \
  P(unsigned long long, vocab, val)   \
  P(long long, vocab_off, val)        \
  P(long long, vocab_total, val)      \
  P(int, ignore, val)                 \
  P(float, smoothing, val)            \
  P(int, mode, val)                   \
  P(int, dtype, val)

#define TE_XENT_MEAN_PARAMS(P)        \
  P(const float *, loss, ptr)         \
  P(const int *, labels, ptr)         \
  P(float *, mean, ptr)               \
  P(unsigned long long, tokens, val)  \
  P(int, ignore, val)                 \
  P(int, count_only, val)

#define TE_XENT_BWD_PARAMS(P)         \
  P(void *, x, eptr(12, TE_KP_WHOLE)) \
  P(const int *, labels, ptr)         \
  P(const float *, lse, ptr)          \
  P(const float *, dloss, ptr)        \
  P(const float *, mean, ptr)         \
  P(unsigned long long, tokens, val)  \
  P(unsigned long long, vocab, val)   \
  P(unsigned long long, chunk, val)   \
  P(long long, vocab_off, val)        \
  P(long long, vocab_total, val)      \
  P(int, ignore, val)                 \
  P(float, smoothing, val)            \
  P(int, dtype, val)                  \
  P(int, flags, val)                  \
  P(void *, y, eptr(18, TE_KP_WHOLE)) \
  P(const float *, scale, ptr)        \
  P(unsigned *, amax, ptr)            \
  P(float *, scale_inv, ptr)          \
  P(int, ydtype, val)

/* te_xent_train: the forward (FULL, whole vocabulary here) and the
 * backward of each row in one block: the row read once for its sums and
 * kept in shared memory (vocab * element size bytes of dynamic shared
 * memory, at most TE_XENT_TRAIN_MAX_ROW), the loss and lse written, then
 * its gradient from the same lse into y or over x.  A block a row (blocks
 * loop over rows, two an SM); rows 16-byte aligned with vocab % 8 == 0
 * (TE_XENT_VEC).  With TE_XENT_DLOSS_MEAN, mean[1] holds the count already
 * (te_xent_mean with count_only ran before). */
#define TE_XENT_TRAIN_MAX_ROW (110 * 1024)
#define TE_XENT_TRAIN_PARAMS(P)       \
  P(void *, x, eptr(15, TE_KP_WHOLE)) \
  P(const int *, labels, ptr)         \
  P(float *, loss, ptr)               \
  P(float *, lse, ptr)                \
  P(const float *, dloss, ptr)        \
  P(const float *, mean, ptr)         \
  P(void *, y, eptr(17, TE_KP_WHOLE)) \
  P(const float *, scale, ptr)        \
  P(unsigned *, amax, ptr)            \
  P(float *, scale_inv, ptr)          \
  P(unsigned long long, tokens, val)  \
  P(unsigned long long, vocab, val)   \
  P(long long, vocab_total, val)      \
  P(int, ignore, val)                 \
  P(float, smoothing, val)            \
  P(int, dtype, val)                  \
  P(int, flags, val)                  \
  P(int, ydtype, val)

/* The loss of a row from its reductions (M the max, S = sum exp(x - M),
 * xl the label's logit, sx = sum x). */
TE_HD float te_xent_lse(float m, float s) { return te_add_rn(m, logf(s)); }
TE_HD float te_xent_loss(float lse, float xl, float sx, float eps, float vtot) {
  float l = te_sub_rn(lse, te_mul_rn(te_sub_rn(1.0f, eps), xl));
  return eps != 0.0f ? te_sub_rn(l, te_mul_rn(te_div_rn(eps, vtot), sx)) : l;
}
/* 1 when label is a valid id, 0 when ignored, -1 when out of range. */
TE_HD int te_xent_label_state(int label, int ignore, long long vtot) {
  if (label == ignore) return 0;
  return (label >= 0 && (long long)label < vtot) ? 1 : -1;
}
/* lse log2 e: exp(x - lse) is evaluated as 2^(x log2 e - lse2), one fma. */
TE_HD float te_xent_lse2(float lse) { return te_mul_rn(lse, 1.4426950408889634f); }
/* The gradient of one logit (the GPU's exponential is ex2.approx.ftz of
 * the same fma, within 2^-22 of exp2f's). */
TE_HD float te_xent_grad(float x, float lse, int is_label, float eps, float vtot, float scale) {
  float p = exp2f(fmaf(x, 1.4426950408889634f, -te_xent_lse2(lse)));
  float g = te_sub_rn(p, te_div_rn(eps, vtot));
  if (is_label) g = te_sub_rn(g, te_sub_rn(1.0f, eps));
  return te_mul_rn(g, scale);
}

/* The pairwise tree over TE_XENT_MEAN_THREADS partials (halving). */
TE_HD float te_xent_tree_step(float a, float b) { return te_add_rn(a, b); }

#endif
