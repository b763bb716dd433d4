/* SPDX-License-Identifier: Apache-2.0 */
/* rope_internal.h -- private interface of the RoPE family
 * (libtecore/rope): the kernels' argument struct and the vdev
 * implementation (rope_vdev.c) that the kernel table (rope.c) names. */
#ifndef TECORE_ROPE_INTERNAL_H
#define TECORE_ROPE_INTERNAL_H

#include "ksupport/ksupport.h"
#include "common/rope.h"

TE_KARGS(te_rope_args, TE_ROPE_PARAMS)

/* te_rope_v8 and te_rope_v1 compute the same thing (elementwise). */
void te_rope_vdev(const struct tecore_launch_cfg *cfg, void *const *args);

#endif
