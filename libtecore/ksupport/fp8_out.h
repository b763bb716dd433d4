/* SPDX-License-Identifier: Apache-2.0 */
/* fp8_out.h -- private to the FP8 output protocol (fp8_out.c): its two
 * kernels' argument structs and their vdev twins (fp8_out_vdev.c). */
#ifndef TECORE_FP8_OUT_H
#define TECORE_FP8_OUT_H

#include "ksupport/ksupport.h"
#include "common/fp8.h"
#include "common/fp8_scale_params.h"

TE_KARGS(te_amax_init_args, TE_FP8_AMAX_INIT_PARAMS)
TE_KARGS(te_compute_scale_args, TE_FP8_COMPUTE_SCALE_PARAMS)

void te_fp8_out_vdev_amax_init(const struct tecore_launch_cfg *cfg, void *const *args);
void te_fp8_out_vdev_compute_scale(const struct tecore_launch_cfg *cfg, void *const *args);

#endif
