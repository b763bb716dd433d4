/* SPDX-License-Identifier: Apache-2.0 */
/* act_internal.h -- private interface of the activation family
 * (libtecore/act): the kernels' argument structs and the vdev
 * implementations (act_vdev.c) that the kernel table (act.c) names. */
#ifndef TECORE_ACT_INTERNAL_H
#define TECORE_ACT_INTERNAL_H

#include "ksupport/ksupport.h"
#include "common/act.h"
#include "common/act_params.h"

/* The kernels' arguments (kernels/common/act_params.h). */
TE_KARGS(te_act_fwd_args, TE_ACT_FWD_PARAMS)
TE_KARGS(te_act_bwd_args, TE_ACT_BWD_PARAMS)

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

#endif
