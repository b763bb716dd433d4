/* SPDX-License-Identifier: Apache-2.0 */
/* fp8_scale_params.h -- the parameters of kernels/fp8_scale.cu, declared
 * once (kparams.h). */
#ifndef TE_KERNELS_FP8_SCALE_PARAMS_H
#define TE_KERNELS_FP8_SCALE_PARAMS_H

#include "kparams.h"

/* te_fp8_amax_init: *amax = 0 unless noop && *noop. */
#define TE_FP8_AMAX_INIT_PARAMS(P) \
  P(unsigned *, amax, ptr)         \
  P(const int *, noop, ptr)

/* te_fp8_compute_scale: scale and scale_inv (and scale_inv_col, either
 * may be NULL) from the amax bits, eps, the format's max and pow2. */
#define TE_FP8_COMPUTE_SCALE_PARAMS(P) \
  P(const unsigned *, amax, ptr)       \
  P(float *, scale, ptr)               \
  P(float *, scale_inv, ptr)           \
  P(float *, scale_inv_col, ptr)       \
  P(float, eps, val)                   \
  P(float, fp8_max, val)               \
  P(int, pow2, val)                    \
  P(const int *, noop, ptr)

#endif
