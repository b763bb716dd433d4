/* SPDX-License-Identifier: Apache-2.0 */
/* elementwise_params.h -- the parameters of kernels/elementwise.cu, declared
 * once (kparams.h): the kernels' signatures, their table entries and the
 * vdev argument structs come from these lists. */
#ifndef TE_KERNELS_ELEMENTWISE_PARAMS_H
#define TE_KERNELS_ELEMENTWISE_PARAMS_H

#include "kparams.h"

/* te_fill: dst[0, n) = value, dtype F32/F16/BF16 (TE_EW_*). */
#define TE_FILL_PARAMS(P)   \
  P(void *, dst, nneptr(1, TE_KP_WHOLE)) \
  P(int, dtype, val)        \
  P(unsigned long long, n, val) \
  P(float, value, val)

/* te_scale_add: dst = alpha * a + beta * b over n elements of dtype. */
#define TE_SCALE_ADD_PARAMS(P) \
  P(void *, dst, eptr(5, TE_KP_WHOLE))   \
  P(const void *, a, eptr(5, TE_KP_WHOLE)) \
  P(float, alpha, val)         \
  P(const void *, b, eptr(5, TE_KP_WHOLE)) \
  P(float, beta, val)          \
  P(int, dtype, val)           \
  P(unsigned long long, n, val)

/* te_memset: n elements of elem_size bytes (1, 2 or 4) at dst set to the
 * low elem_size bytes of value: what a memset node does, as a kernel
 * (tecore_graph_memsets_to_kernels puts it where a captured memset was). */
#define TE_MEMSET_PARAMS(P)          \
  P(void *, dst, nnptr)              \
  P(unsigned, value, val)            \
  P(int, elem_size, val)             \
  P(unsigned long long, n, val)

/* te_copy: n bytes from src to dst (device memory, or pinned host memory
 * through its device address): what a small memcpy node does, as a kernel
 * (tecore_graph_copies_to_kernels puts it where a captured copy was). */
#define TE_COPY_PARAMS(P)            \
  P(void *, dst, nnptr)              \
  P(const void *, src, nnptr)        \
  P(unsigned long long, n, val)

/* te_copy2d_u32: a 2-D array of 4-byte elements copied between strides,
 * zeros past the source: for i < drows, j < dcols (the destination's
 * extent, padding included), dst[i * dsi + j * dsj] = i < srows && j <
 * scols ? src[i * ssi + j * ssj] : 0 (strides in elements).  The block-
 * scaled GEMM rearranges its operands' scales with it (cuda_gemm.c). */
#define TE_COPY2D_U32_PARAMS(P)      \
  P(unsigned *, dst, nnptr)          \
  P(const unsigned *, src, nnptr)    \
  P(unsigned long long, drows, val)  \
  P(unsigned long long, dcols, val)  \
  P(unsigned long long, srows, val)  \
  P(unsigned long long, scols, val)  \
  P(unsigned long long, dsi, val)    \
  P(unsigned long long, dsj, val)    \
  P(unsigned long long, ssi, val)    \
  P(unsigned long long, ssj, val)

#endif
