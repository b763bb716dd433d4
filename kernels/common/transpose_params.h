/* SPDX-License-Identifier: Apache-2.0 */
/* transpose_params.h -- the parameters of kernels/transpose.cu, declared
 * once (kparams.h).  Every te_ct_* kernel takes TE_CT_PARAMS (the flags
 * word names the variant, kernels/common/transpose.h). */
#ifndef TE_KERNELS_TRANSPOSE_PARAMS_H
#define TE_KERNELS_TRANSPOSE_PARAMS_H

#include "kparams.h"

#define TE_CT_PARAMS(P)                                                           \
  P(const void *, in, reptr(12, 0)) /* input, or dy (dtype: flags' TE_CT_F_IN) */ \
  P(const void *, x, reptr(12, 0))  /* x of the activation, or NULL */           \
  P(uint8_t *, orow, rptr)          /* rowwise FP8 output, or NULL */            \
  P(uint8_t *, ocol, rptr)          /* columnwise FP8 output, or NULL */         \
  P(const float *, scale, rptr)     /* per-tensor scale (NULL for MXFP8) */      \
  P(unsigned *, amax, ptr)          /* amax bits to max-accumulate, or NULL */   \
  P(void *, sinv, rptr)             /* float (per-tensor) or E8M0 [rows][cdiv(cols,32)] */ \
  P(void *, csinv, rptr)            /* float (per-tensor) or E8M0 [cdiv(rows,32)][cols] */ \
  P(float *, ws, rptr)              /* float [grid_y][cols]: dbias partials, or NULL */ \
  P(unsigned long long, rows, val)                                               \
  P(unsigned long long, cols, val)                                               \
  P(unsigned, tpb, val)             /* row tiles per block */                    \
  P(unsigned, flags, val)           /* TE_CT_F_* */

/* te_ct_dbias_reduce: dbias[c] (dtype F32/F16/BF16) = the sum of the parts
 * partial rows of ws. */
#define TE_CTR_PARAMS(P)                \
  P(const float *, ws, rptr)            \
  P(void *, dbias, reptr(4, TE_KP_WHOLE))         \
  P(unsigned, parts, val)               \
  P(unsigned long long, cols, val)      \
  P(int, dtype, val)

/* te_ct_byte_transpose: out [cols][rows] = the transpose of in [rows][cols],
 * 1-byte elements (FP8 codes, copied, never converted). */
#define TE_CTB_PARAMS(P)                \
  P(const uint8_t *, in, rptr)          \
  P(uint8_t *, out, rptr)               \
  P(unsigned long long, rows, val)      \
  P(unsigned long long, cols, val)

#endif
