/* SPDX-License-Identifier: Apache-2.0 */
/* ldst.h -- one element of a runtime dtype to and from float, for the
 * activation and norm kernels' element paths and their vdev
 * implementations.  dtype is a tecore_dtype_t value: loads take F32, F16,
 * BF16; stores also take E4M3 and E5M2 (the caller has applied the scale).
 * Conversions round to nearest even (convert.h, fp8.h). */
#ifndef TE_KERNELS_LDST_H
#define TE_KERNELS_LDST_H

#include "convert.h"
#include "fp8.h"

TE_HD float te_ld(const void *p, uint64_t i, int dtype) {
  if (dtype == TE_FP8_DT_F32) return ((const float *)p)[i];
  if (dtype == TE_FP8_DT_F16) return te_f16_to_f32(((const uint16_t *)p)[i]);
  return te_bf16_to_f32(((const uint16_t *)p)[i]);
}
TE_HD void te_st(void *p, uint64_t i, int dtype, float v) {
  if (dtype == TE_FP8_DT_F32) ((float *)p)[i] = v;
  else if (dtype == TE_FP8_DT_F16) ((uint16_t *)p)[i] = te_f32_to_f16(v);
  else if (dtype == TE_FP8_DT_BF16) ((uint16_t *)p)[i] = te_f32_to_bf16(v);
  else ((uint8_t *)p)[i] = te_f32_to_fp8(v, dtype);
}
TE_HD int te_dt_is_fp8(int dtype) { return dtype == TE_FP8_DT_E4M3 || dtype == TE_FP8_DT_E5M2; }

#endif
