/* SPDX-License-Identifier: Apache-2.0 */
/* optim_params.h -- the parameters of kernels/optim.cu, declared once
 * (kparams.h).  The step, L2 and unscale kernels take one parameter block
 * each (kernels/common/optim.h), __grid_constant__ on the GPU. */
#ifndef TE_KERNELS_OPTIM_PARAMS_H
#define TE_KERNELS_OPTIM_PARAMS_H

#include "kparams.h"
#include "optim.h"

/* te_optim_adam, te_optim_sgd */
#define TE_OPTIM_STEP_PARAMS(P) P(struct te_optim_params, p, gcblk)
/* te_optim_l2_partial */
#define TE_OPTIM_L2_PARTIAL_PARAMS(P) P(struct te_l2_params, p, gcblk)
/* te_optim_unscale */
#define TE_OPTIM_UNSCALE_PARAMS(P) P(struct te_unscale_params, p, gcblk)
/* te_optim_commit: state->step += 1 unless *found_inf. */
#define TE_OPTIM_COMMIT_PARAMS(P)       \
  P(struct te_optim_state *, state, ptr) \
  P(const int *, found_inf, ptr)
/* te_optim_l2_final: the norm (and found_inf) from nparts partial sums;
 * scale (when set): min(1, max_norm / (norm + 1e-6)), clipping's factor. */
#define TE_OPTIM_L2_FINAL_PARAMS(P)     \
  P(const double *, partial, ptr)       \
  P(unsigned, nparts, val)              \
  P(float *, norm, ptr)                 \
  P(int *, found_inf, ptr)              \
  P(float *, scale, ptr)                \
  P(float, max_norm, val)

#endif
