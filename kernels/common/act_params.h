/* SPDX-License-Identifier: Apache-2.0 */
/* act_params.h -- the parameters of kernels/act.cu, declared once
 * (kparams.h).  dtypes packs the TE_FP8_DT_* codes 4 bits each (fwd: in,
 * out; bwd: dy, x, dx; bit 12: fast math); vec picks the GPU's access
 * width only.  scale, amax and scale_inv follow the FP8 output-pass
 * protocol (libtecore/ksupport/ksupport.h). */
#ifndef TE_KERNELS_ACT_PARAMS_H
#define TE_KERNELS_ACT_PARAMS_H

#include "kparams.h"

/* te_act_fwd_<kind> */
#define TE_ACT_FWD_PARAMS(P)         \
  P(const void *, in, eptr(8, 0))    \
  P(void *, out, eptr(8, 1))         \
  P(const float *, scale, ptr)       \
  P(unsigned *, amax, ptr)           \
  P(float *, scale_inv, ptr)         \
  P(const int *, noop, ptr)          \
  P(unsigned long long, rows, val)   \
  P(unsigned long long, cols, val)   \
  P(int, dtypes, val)                \
  P(int, vec, val)

/* te_act_bwd_<kind> */
#define TE_ACT_BWD_PARAMS(P)         \
  P(const void *, dy, eptr(8, 0))    \
  P(const void *, x, eptr(8, 1))     \
  P(void *, dx, eptr(8, 2))          \
  P(const float *, scale, ptr)       \
  P(unsigned *, amax, ptr)           \
  P(float *, scale_inv, ptr)         \
  P(unsigned long long, rows, val)   \
  P(unsigned long long, cols, val)   \
  P(int, dtypes, val)                \
  P(int, vec, val)

/* te_act_bwd_colsum_<kind> (the elementwise kinds): dx = dy * act'(x),
 * one 16-bit or F32 dtype for dy, x and dx ([rows][cols], 16-byte
 * aligned, cols % 8 == 0), and the column sums of dx as stored (rounded
 * to dtype) in parts of rpp rows into ws[part][col]: te_colsum_part's
 * blocks and order (kernels/common/elementwise_params.h), so that
 * te_colsum_final then gives the bits te_colsum would have from dx. */
#define TE_ACT_BWD_COLSUM_PARAMS(P)  \
  P(const void *, dy, nnptr)         \
  P(const void *, x, nnptr)          \
  P(void *, dx, nnptr)               \
  P(float *, ws, nnptr)              \
  P(unsigned long long, rows, val)   \
  P(unsigned long long, cols, val)   \
  P(unsigned long long, rpp, val)    \
  P(int, dtype, val)

#endif
