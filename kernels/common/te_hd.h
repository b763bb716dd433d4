/* SPDX-License-Identifier: Apache-2.0 */
/* te_hd.h -- what lets one header of element math serve both the CUDA
 * kernels (nvcc) and the vdev C implementations (a C99 compiler).
 * TE_HD marks a function __host__ __device__ under nvcc and nothing in C. */
#ifndef TE_KERNELS_TE_HD_H
#define TE_KERNELS_TE_HD_H

#include <stdint.h>

#ifdef __CUDACC__
#define TE_HD __host__ __device__ __forceinline__
#else
#define TE_HD static inline
#endif

/* Bit casts that compile to moves on both sides. */
TE_HD uint32_t te_f32_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  union { float f; uint32_t u; } v;
  v.f = f;
  return v.u;
#endif
}
TE_HD float te_bits_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  union { float f; uint32_t u; } v;
  v.u = u;
  return v.f;
#endif
}

#endif
