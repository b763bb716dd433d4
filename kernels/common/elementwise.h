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

/* Element i of a uniform initialization after splitmix64 state s0 (the
 * generator advances the state by its golden-ratio step before each draw,
 * so draw i is a function of s0 + (i + 1) steps, computed anywhere alone):
 * 53 random bits scaled to [0, 2) (exact), minus 1, times bound, to float,
 * each step one IEEE rounding to nearest (an fma of the exact product with
 * the subtraction rounds alike, so contraction changes nothing).  round
 * (TE_EW_F16 or TE_EW_BF16, else -1) rounds the value through that type
 * first: an F32 weight holds what the sequence's 16-bit type would. */
#define TE_SPLITMIX_STEP 0x9e3779b97f4a7c15ull
TE_HD float te_ew_uniform(uint64_t s0, uint64_t i, double bound, int round) {
  uint64_t z = s0 + (i + 1u) * TE_SPLITMIX_STEP;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  double t = (double)(z >> 11) * (2.0 / 9007199254740992.0) - 1.0;
  float v = (float)(bound * t);
  if (round == TE_EW_F16) v = te_f16_to_f32(te_f32_to_f16(v));
  else if (round == TE_EW_BF16) v = te_bf16_to_f32(te_f32_to_bf16(v));
  return v;
}

#endif
