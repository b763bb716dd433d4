/* SPDX-License-Identifier: Apache-2.0 */
/* xent_internal.h -- private interface of the cross-entropy family
 * (libtecore/xent): the kernels' argument structs and the vdev
 * implementations (xent_vdev.c) that the kernel table (xent.c) names. */
#ifndef TECORE_XENT_INTERNAL_H
#define TECORE_XENT_INTERNAL_H

#include "ksupport/ksupport.h"
#include "common/xent.h"

TE_KARGS(te_xent_row_args, TE_XENT_ROW_PARAMS)
TE_KARGS(te_xent_mean_args, TE_XENT_MEAN_PARAMS)
TE_KARGS(te_xent_bwd_args, TE_XENT_BWD_PARAMS)
TE_KARGS(te_xent_train_args, TE_XENT_TRAIN_PARAMS)

void te_xent_vdev_row(const struct tecore_launch_cfg *cfg, void *const *args);
void te_xent_vdev_mean(const struct tecore_launch_cfg *cfg, void *const *args);
void te_xent_vdev_bwd(const struct tecore_launch_cfg *cfg, void *const *args);
void te_xent_vdev_train(const struct tecore_launch_cfg *cfg, void *const *args);

#endif
