/* SPDX-License-Identifier: Apache-2.0 */
/* norm_params.h -- the parameters of kernels/norm.cu, declared once
 * (kparams.h).  dtypes packs TE_FP8_DT_* codes (TE_NORM_DT_PACK); flags
 * are TE_NORM_*; tpr and nv come from the plan (te_norm_plan_*). */
#ifndef TE_KERNELS_NORM_PARAMS_H
#define TE_KERNELS_NORM_PARAMS_H

#include "kparams.h"

/* te_norm_fwd_v8 / _v1 / _stream_v8 / _stream_v1 / _fast */
#define TE_NORM_FWD_PARAMS(P)        \
  P(const void *, x, eptr(13, 0))    \
  P(const void *, gamma, eptr(13, 1)) \
  P(const void *, beta, eptr(13, 1)) \
  P(void *, y, eptr(13, 2))          \
  P(float *, mu, ptr)                \
  P(float *, rsigma, ptr)            \
  P(const float *, scale, ptr)       \
  P(unsigned *, amax, ptr)           \
  P(float *, scale_inv, ptr)         \
  P(unsigned long long, rows, val)   \
  P(unsigned, hidden, val)           \
  P(float, eps, val)                 \
  P(int, flags, val)                 \
  P(int, dtypes, val)                \
  P(int, tpr, val)                   \
  P(int, nv, val)

/* te_norm_bwd_v8 / _v1 / _stream_v8 / _stream_v1 / _fast.  cs (te_norm_bwd_fast
 * only, else NULL): dx's column sums as stored, a partial row [parts][hidden]
 * per block, in the order of the dgamma partials (the fuser's bias
 * gradient of the Linear before the norm, added by te_colsum_final). */
#define TE_NORM_BWD_PARAMS(P)        \
  P(const void *, dy, eptr(11, 1))   \
  P(const void *, x, eptr(11, 0))    \
  P(const float *, mu, ptr)          \
  P(const float *, rsigma, ptr)      \
  P(const void *, gamma, eptr(11, 2)) \
  P(const void *, extra, eptr(11, 4)) \
  P(void *, dx, eptr(11, 3))         \
  P(float *, ws, ptr)                \
  P(unsigned long long, rows, val)   \
  P(unsigned, hidden, val)           \
  P(int, flags, val)                 \
  P(int, dtypes, val)                \
  P(int, tpr, val)                   \
  P(int, nv, val)                    \
  P(unsigned, parts, val)            \
  P(float *, cs, ptr)

/* te_norm_bwd_reduce: column sums of ws [which][parts][hidden] into out0
 * (and out1 when set), dtypes slots 0 and 1; with cs_out, also those of
 * cs [parts][hidden] (te_norm_bwd_fast_cs's) into the F32 cs_out, added
 * to its values when cs_acc, and (cs_copy set) the sums alone into the F32
 * cs_copy. */
#define TE_NORM_REDUCE_PARAMS(P)     \
  P(const float *, ws, ptr)          \
  P(void *, out0, eptr(5, 0))        \
  P(void *, out1, eptr(5, 1))        \
  P(unsigned, parts, val)            \
  P(unsigned, hidden, val)           \
  P(int, dtypes, val)                \
  P(const float *, cs, ptr)          \
  P(float *, cs_out, ptr)            \
  P(int, cs_acc, val)                \
  P(float *, cs_copy, ptr)

#endif
