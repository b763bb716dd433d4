/* SPDX-License-Identifier: Apache-2.0 */
/* norm_internal.h -- private interface of the norm family (libtecore/norm):
 * the kernels' argument structs and the vdev implementations (norm_vdev.c)
 * that the kernel table (norm.c) names, over the kernel-support layer and
 * the shared element math. */
#ifndef TECORE_NORM_INTERNAL_H
#define TECORE_NORM_INTERNAL_H

#include "ksupport/ksupport.h"
#include "common/norm.h"
#include "common/norm_params.h"

/* The kernels' arguments (kernels/common/norm_params.h). */
TE_KARGS(te_norm_fwd_args, TE_NORM_FWD_PARAMS)
TE_KARGS(te_norm_bwd_args, TE_NORM_BWD_PARAMS)
TE_KARGS(te_norm_reduce_args, TE_NORM_REDUCE_PARAMS)

/* Forward, 8-element vectors or elements (the _stream and _fast kernels
 * share them: the layout changes the GPU's speed, not its sums). */
void te_norm_vdev_fwd_v8(const struct tecore_launch_cfg *cfg, void *const *args);
void te_norm_vdev_fwd_v1(const struct tecore_launch_cfg *cfg, void *const *args);
/* Backward (dx and the per-block dgamma / dbeta partials). */
void te_norm_vdev_bwd_v8(const struct tecore_launch_cfg *cfg, void *const *args);
void te_norm_vdev_bwd_v1(const struct tecore_launch_cfg *cfg, void *const *args);
/* The column sums of the partials. */
void te_norm_vdev_bwd_reduce(const struct tecore_launch_cfg *cfg, void *const *args);

#endif
