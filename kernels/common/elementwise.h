/* SPDX-License-Identifier: Apache-2.0 */
/* elementwise.h -- element math of the fill and scale-and-add kernels,
 * shared by kernels/elementwise.cu and the vdev implementations.
 * Element types are coded as tecore_dtype_t values (0 f32, 1 f16, 2 bf16). */
#ifndef TE_KERNELS_ELEMENTWISE_H
#define TE_KERNELS_ELEMENTWISE_H

#include "convert.h"
#ifndef __CUDACC__
#include <math.h>
#endif

#define TE_EW_F32 0
#define TE_EW_F16 1
#define TE_EW_BF16 2

TE_HD float te_ew_load(const void *p, uint64_t i, int dtype) {
  if (dtype == TE_EW_F32) return ((const float *)p)[i];
  if (dtype == TE_EW_F16) return te_f16_to_f32(((const uint16_t *)p)[i]);
  return te_bf16_to_f32(((const uint16_t *)p)[i]);
}
TE_HD void te_ew_store(void *p, uint64_t i, int dtype, float v) {
  if (dtype == TE_EW_F32) ((float *)p)[i] = v;
  else if (dtype == TE_EW_F16) ((uint16_t *)p)[i] = te_f32_to_f16(v);
  else ((uint16_t *)p)[i] = te_f32_to_bf16(v);
}
/* alpha*a + beta*b with one rounding per product and one for the sum, in
 * the order the GPU evaluates it (fmaf(alpha, a, beta*b)). */
TE_HD float te_ew_scale_add(float a, float alpha, float b, float beta) {
#ifdef __CUDA_ARCH__
  return __fmaf_rn(alpha, a, __fmul_rn(beta, b));
#else
  return fmaf(alpha, a, beta * b);
#endif
}

#endif
