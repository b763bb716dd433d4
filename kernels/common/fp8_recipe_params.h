/* SPDX-License-Identifier: Apache-2.0 */
/* fp8_recipe_params.h -- the parameters of kernels/fp8_recipe.cu, declared
 * once (kparams.h), and the launch geometry the library and the kernel
 * share. */
#ifndef TE_KERNELS_FP8_RECIPE_PARAMS_H
#define TE_KERNELS_FP8_RECIPE_PARAMS_H

#include "kparams.h"

/* States (groups of tensors) one launch updates; more go in batches. */
#define TE_DU_MAX 16
/* Tensors a block owns (blockDim.x), and the history rows each thread
 * holds per pass (kernels/fp8_recipe.cu says why these). */
#define TE_DU_TX 8
#define TE_DU_ROWS 8
/* blockDim.y: TE_DU_MIN_TY .. TE_DU_MAX_TY, a power of two (a warp is
 * TE_DU_TX tensors x 4 rows) */
#define TE_DU_MIN_TY 4
#define TE_DU_MAX_TY 128
/* Blocks one launch may have (the grid's x limit, with room). */
#define TE_DU_MAX_BLOCKS (1u << 30)

/* One group: count tensors' amax[count], history[len][count], scale and
 * scale_inv; the format's max; the first of its ceil(count / TE_DU_TX)
 * blocks in the launch. */
struct te_du_state {
  float *amax;
  float *history;
  float *scale;
  float *scale_inv;
  unsigned long long count;
  float fp8_max;
  unsigned block0;
};

/* te_fp8_delayed_update: nstates groups of one recipe (its history length,
 * the window rule (most_recent or max), 2^-margin and pow2). */
struct te_du_params {
  struct te_du_state st[TE_DU_MAX];
  int nstates;
  int len;
  int most_recent;
  int pow2;
  float margin_mult;
  int pad_;
};

#define TE_FP8_DELAYED_UPDATE_PARAMS(P) P(struct te_du_params, p, gcblk)

#endif
