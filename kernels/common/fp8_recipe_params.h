/* SPDX-License-Identifier: Apache-2.0 */
/* fp8_recipe_params.h -- the parameters of kernels/fp8_recipe.cu, declared
 * once (kparams.h). */
#ifndef TE_KERNELS_FP8_RECIPE_PARAMS_H
#define TE_KERNELS_FP8_RECIPE_PARAMS_H

#include "kparams.h"

/* te_fp8_delayed_update: count tensors' amax, history [len][count], scale
 * and scale_inv; the window rule (most_recent or max), the format's max,
 * 2^-margin and pow2. */
#define TE_FP8_DELAYED_UPDATE_PARAMS(P) \
  P(float *, amax, ptr)                 \
  P(float *, history, ptr)              \
  P(float *, scale, ptr)                \
  P(float *, scale_inv, ptr)            \
  P(unsigned long long, count, val)     \
  P(int, len, val)                      \
  P(int, most_recent, val)              \
  P(float, fp8_max, val)                \
  P(float, margin_mult, val)            \
  P(int, pow2, val)                     \
  P(const int *, noop, ptr)

#endif
