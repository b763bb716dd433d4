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

/* A backward: dy and what the forward saw (x, mu, rsigma, gamma), the
 * extra gradient added to dx (the _bwd_add calls, or NULL), the outputs and
 * the workspace; ln: LayerNorm (else RMSNorm); fn names the public call in
 * messages.  cs (the fuser: 0 from the public calls): where the kernel may
 * also write dx's column sums, the values as stored, as *cs_parts partial
 * rows [parts][hidden] (cs_bytes of room, 16-byte aligned), which the
 * dgamma/dbeta reduction then adds into cs_out (F32 [hidden]; to its
 * values when cs_acc; the sums alone also into cs_copy, F32 [hidden], when
 * set); *cs_parts is set to 0 when this call's kernel
 * cannot (only te_norm_bwd_fast's 256-thread layout does) and cs_out is
 * then not touched. */
struct te_norm_bwd_call {
  int ln;
  const struct tecore_tensor *dy, *x, *gamma, *extra;
  tecore_devptr_t mu, rsigma;
  unsigned flags;
  struct tecore_tensor *dx, *dgamma, *dbeta;
  tecore_devptr_t workspace;
  size_t workspace_bytes;
  const char *fn;
  tecore_devptr_t cs, cs_out, cs_copy;
  size_t cs_bytes;
  int cs_acc;
  size_t *cs_parts;
};
/* The checks and kernels of tecore_layernorm_bwd and the others (norm.c). */
tecore_result_t te_norm_bwd(const struct te_norm_bwd_call *c, tecore_stream_t stream);

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
