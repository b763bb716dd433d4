/* SPDX-License-Identifier: Apache-2.0 */
/* fp8_kernels.h -- private to the FP8 family's kernels: their argument
 * structs and the vdev twins (fp8_vdev.c) that the kernel tables of
 * quantize.c and recipe.c name. */
#ifndef TECORE_FP8_KERNELS_H
#define TECORE_FP8_KERNELS_H

#include "fp8/fp8_internal.h"
#include "common/fp8.h"
#include "common/quantize.h"
#include "common/quantize_params.h"
#include "common/fp8_recipe_params.h"

/* The kernels' arguments (kernels/common/quantize_params.h,
 * fp8_recipe_params.h). */
TE_KARGS(te_quantize_pt_args, TE_FP8_QUANTIZE_PT_PARAMS)
TE_KARGS(te_amax_args, TE_FP8_AMAX_PARAMS)
TE_KARGS(te_quantize_mx_args, TE_FP8_QUANTIZE_MX_PARAMS)
TE_KARGS(te_quantize_blk_args, TE_FP8_QUANTIZE_BLK_PARAMS)
TE_KARGS(te_dequantize_args, TE_FP8_DEQUANTIZE_PARAMS)
TE_KARGS(te_qmulti_args, TE_FP8_QMULTI_PARAMS)
TE_KARGS(te_delayed_update_args, TE_FP8_DELAYED_UPDATE_PARAMS)

#define TE_FP8_VDEV_FN(name) \
  void te_fp8_##name(const struct tecore_launch_cfg *cfg, void *const *args);
TE_FP8_VDEV_FN(vdev_quantize_pt)
TE_FP8_VDEV_FN(vdev_amax)
TE_FP8_VDEV_FN(vdev_quantize_mx)
TE_FP8_VDEV_FN(vdev_quantize_blk)
TE_FP8_VDEV_FN(vdev_dequantize)
TE_FP8_VDEV_FN(vdev_quantize_multi)
TE_FP8_VDEV_FN(vdev_amax_multi)
TE_FP8_VDEV_FN(vdev_amax_init_multi)
TE_FP8_VDEV_FN(vdev_delayed_update)
#undef TE_FP8_VDEV_FN

#endif
