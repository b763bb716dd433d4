/* SPDX-License-Identifier: Apache-2.0 */
/* quantize_params.h -- the parameters of kernels/quantize.cu, declared once
 * (kparams.h).  Dtypes are TE_FP8_DT_* codes; noop, when set, points at an
 * int that makes the kernel return at once when nonzero. */
#ifndef TE_KERNELS_QUANTIZE_PARAMS_H
#define TE_KERNELS_QUANTIZE_PARAMS_H

#include "kparams.h"
#include "quantize.h"

/* te_fp8_quantize_pt: per-tensor, rowwise, n elements. */
#define TE_FP8_QUANTIZE_PT_PARAMS(P) \
  P(const void *, in, eptr(3, TE_KP_WHOLE))    \
  P(void *, out, eptr(4, TE_KP_WHOLE))         \
  P(unsigned long long, n, val)      \
  P(int, in_dt, val)                 \
  P(int, out_dt, val)                \
  P(float *, scale, ptr)             \
  P(float *, scale_inv, ptr)         \
  P(float *, scale_inv_col, ptr)     \
  P(unsigned *, amax, ptr)           \
  P(const int *, noop, ptr)          \
  P(int, current, val)               \
  P(float, eps, val)                 \
  P(int, pow2, val)

/* te_fp8_amax: max-accumulates the amax bits of n elements into *amax. */
#define TE_FP8_AMAX_PARAMS(P)   \
  P(const void *, in, eptr(2, TE_KP_WHOLE)) \
  P(unsigned long long, n, val) \
  P(int, dt, val)               \
  P(unsigned *, amax, ptr)      \
  P(const int *, noop, ptr)

/* te_fp8_quantize_mx_f32 / _f16 / _bf16: MXFP8, rows x cols. */
#define TE_FP8_QUANTIZE_MX_PARAMS(P) \
  P(const void *, in, eptr(1, TE_KP_WHOLE))    \
  P(int, in_dt, val)                 \
  P(unsigned long long, rows, val)   \
  P(unsigned long long, cols, val)   \
  P(void *, out_row, eptr(8, TE_KP_WHOLE))     \
  P(void *, out_col, eptr(8, TE_KP_WHOLE))     \
  P(void *, s_row, ptr)              \
  P(void *, s_col, ptr)              \
  P(int, out_dt, val)                \
  P(unsigned *, amax, ptr)           \
  P(const int *, noop, ptr)

/* te_fp8_quantize_blk: 1x128, 128x128 or per-tensor (mode TE_BLK_*). */
#define TE_FP8_QUANTIZE_BLK_PARAMS(P) \
  P(const void *, in, eptr(1, TE_KP_WHOLE))     \
  P(int, in_dt, val)                  \
  P(unsigned long long, rows, val)    \
  P(unsigned long long, cols, val)    \
  P(void *, out_row, eptr(8, TE_KP_WHOLE))      \
  P(void *, out_col, eptr(8, TE_KP_WHOLE))      \
  P(float *, s_row, ptr)              \
  P(float *, s_col, ptr)              \
  P(int, out_dt, val)                 \
  P(int, mode, val)                   \
  P(const float *, scale, ptr)        \
  P(float, eps, val)                  \
  P(int, pow2, val)                   \
  P(unsigned *, amax, ptr)            \
  P(const int *, noop, ptr)

/* te_fp8_dequantize: FP8 rows x cols to out_dt, scales by mode (TE_DQ_*). */
#define TE_FP8_DEQUANTIZE_PARAMS(P)  \
  P(const void *, in, eptr(1, TE_KP_WHOLE))    \
  P(int, in_dt, val)                 \
  P(void *, out, eptr(3, TE_KP_WHOLE))         \
  P(int, out_dt, val)                \
  P(unsigned long long, rows, val)   \
  P(unsigned long long, cols, val)   \
  P(int, mode, val)                  \
  P(const void *, scale_inv, ptr)

/* te_fp8_quantize_multi, te_fp8_amax_multi, te_fp8_amax_init_multi: one
 * parameter block of up to TE_QMULTI_MAX tensors. */
#define TE_FP8_QMULTI_PARAMS(P) P(struct te_qmulti_params, p, blk)

#endif
