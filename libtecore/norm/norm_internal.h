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

/* tecore_layernorm_bwd_add (ln 1) or tecore_rmsnorm_bwd_add (ln 0) that
 * also writes the column sums of dx as stored into dsum (F32 [hidden];
 * added into it when dsum_acc), from the same kernel: the bias gradient of
 * the Linear whose output gradient dx is (the fuser's residual,
 * ops_fusions.c).  The workspace holds one more [parts][hidden] array
 * (te_norm_bwd_dsum_ws_bytes).  TECORE_ERR_NOT_SUPPORTED, nothing queued,
 * where te_norm_bwd_fast does not run the call (one 16-bit dtype, rows in
 * registers): the caller then sums the columns its own way. */
struct te_norm_bwd_dsum {
  int ln;
  const struct tecore_tensor *dy, *x, *gamma, *extra_grad;
  tecore_devptr_t mu, rsigma;
  unsigned flags;
  struct tecore_tensor *dx, *dgamma, *dbeta;
  tecore_devptr_t workspace;
  size_t workspace_bytes;
  tecore_devptr_t dsum;
  int dsum_acc;
};
tecore_result_t te_norm_bwd_add_dsum(const struct te_norm_bwd_dsum *d, tecore_stream_t stream);
/* TECORE_SUCCESS when te_norm_bwd_add_dsum's kernel runs d's tensors (as
 * it checks them: types, alignment, rows in registers), else
 * TECORE_ERR_NOT_SUPPORTED; nothing is queued or recorded as an error. */
tecore_result_t te_norm_bwd_add_dsum_probe(const struct te_norm_bwd_dsum *d);
/* The workspace te_norm_bwd_add_dsum needs. */
size_t te_norm_bwd_dsum_ws_bytes(int ln, size_t rows, size_t hidden);

#endif
