/* SPDX-License-Identifier: Apache-2.0 */
/* act_internal.h -- private interface of the activation family
 * (libtecore/act): the kernels' argument structs and the vdev
 * implementations (act_vdev.c) that the kernel table (act.c) names. */
#ifndef TECORE_ACT_INTERNAL_H
#define TECORE_ACT_INTERNAL_H

#include "ksupport/ksupport.h"
#include "common/act.h"
#include "common/act_params.h"
#include "common/elementwise_params.h"
#include <te/activation.h>

/* The kernels' arguments (kernels/common/act_params.h). */
TE_KARGS(te_act_fwd_args, TE_ACT_FWD_PARAMS)
TE_KARGS(te_act_bwd_args, TE_ACT_BWD_PARAMS)
TE_KARGS(te_act_bwd_colsum_args, TE_ACT_BWD_COLSUM_PARAMS)

/* te_act_vdev_fwd_<kind> and te_act_vdev_bwd_<kind> for each kind. */
#define TE_ACT_VDEV_DECL(name)                                                        \
  void te_act_vdev_fwd_##name(const struct tecore_launch_cfg *cfg, void *const *args); \
  void te_act_vdev_bwd_##name(const struct tecore_launch_cfg *cfg, void *const *args);
TE_ACT_VDEV_DECL(gelu)
TE_ACT_VDEV_DECL(relu)
TE_ACT_VDEV_DECL(silu)
TE_ACT_VDEV_DECL(qgelu)
TE_ACT_VDEV_DECL(swiglu)
TE_ACT_VDEV_DECL(geglu)
TE_ACT_VDEV_DECL(reglu)
#undef TE_ACT_VDEV_DECL
void te_act_vdev_bwd_colsum_gelu(const struct tecore_launch_cfg *cfg, void *const *args);
void te_act_vdev_bwd_colsum_relu(const struct tecore_launch_cfg *cfg, void *const *args);
void te_act_vdev_bwd_colsum_silu(const struct tecore_launch_cfg *cfg, void *const *args);
void te_act_vdev_bwd_colsum_qgelu(const struct tecore_launch_cfg *cfg, void *const *args);

/* dx = dy * act'(x) (an elementwise kind; dy, x, dx one dtype, F32/F16/
 * BF16, [rows][cols] with cols % 8 == 0, 16-byte aligned) and dx's
 * column sums in parts of rpp rows, ws[part][col] (parts * cols floats):
 * te_colsum's plan and order (the caller takes both from
 * elementwise_internal.h and adds the parts with te_colsum_final; the
 * fuser: the bias gradient of the Linear before the activation).  Other
 * kinds or shapes: TECORE_ERR_INTERNAL (the caller checks first). */
int te_act_bwd_colsum_ok(tecore_activation_t act, const struct tecore_tensor *dy,
                         const struct tecore_tensor *x, const struct tecore_tensor *dx);
tecore_result_t te_act_bwd_colsum(tecore_activation_t act, const struct tecore_tensor *dy,
                                  const struct tecore_tensor *x, const struct tecore_tensor *dx,
                                  tecore_devptr_t ws, size_t rpp, size_t parts,
                                  tecore_stream_t stream);
#endif
