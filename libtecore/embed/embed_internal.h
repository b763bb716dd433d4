/* SPDX-License-Identifier: Apache-2.0 */
/* embed_internal.h -- private interface of the token-embedding family
 * (libtecore/embed): the kernels' argument structs and the vdev
 * implementations (embed_vdev.c) that the kernel table (embed.c) names. */
#ifndef TECORE_EMBED_INTERNAL_H
#define TECORE_EMBED_INTERNAL_H

#include "ksupport/ksupport.h"
#include "common/embedding.h"

TE_KARGS(te_emb_fwd_args, TE_EMB_FWD_PARAMS)
TE_KARGS(te_emb_bwd_args, TE_EMB_BWD_PARAMS)

void te_emb_vdev_fwd(const struct tecore_launch_cfg *cfg, void *const *args);
void te_emb_vdev_bwd(const struct tecore_launch_cfg *cfg, void *const *args);
void te_emb_vdev_bwd_pos(const struct tecore_launch_cfg *cfg, void *const *args);

#endif
