// SPDX-License-Identifier: Apache-2.0
// colsum.cuh -- a column-sum thread's place and the end of its block (te_colsum_part in
// elementwise.cu, te_act_bwd_colsum_<kind> in act.cu): each thread's 8
// column sums of its lane into shared memory, then thread (x, y) adds the
// lanes of the block's column y * TE_COLSUM_VECS + x in lane order into
// ws[part][column] (kernels/common/elementwise_params.h; the vdev twins
// add in the same order, kernels/common/colsum.h).
#ifndef TE_KERNELS_COLSUM_CUH
#define TE_KERNELS_COLSUM_CUH

#include "common/elementwise_params.h"
#include "common/fmath.h"

// A column-sum thread's place: the first of its 8 columns, the first row
// of its lane in the block's part, and the part's end.
struct te_colsum_at {
  unsigned long long c, r, r1;
};
__device__ __forceinline__ te_colsum_at te_colsum_place(unsigned long long rows,
                                                        unsigned long long rpp) {
  const unsigned long long r0 = (unsigned long long)blockIdx.y * rpp;
  return {((unsigned long long)blockIdx.x * TE_COLSUM_VECS + threadIdx.x) * 8, r0 + threadIdx.y,
          r0 + rpp < rows ? r0 + rpp : rows};
}

__device__ __forceinline__ void te_colsum_block_end(float (*part)[TE_COLSUM_VECS * 8 + 1],
                                                    const float *s, float *ws,
                                                    unsigned long long cols) {
  const unsigned tx = threadIdx.x, ty = threadIdx.y;
#pragma unroll
  for (int k = 0; k < 8; k++) part[ty][tx * 8 + k] = s[k];
  __syncthreads();
  const unsigned cl = ty * TE_COLSUM_VECS + tx;
  const unsigned long long cc = (unsigned long long)blockIdx.x * TE_COLSUM_VECS * 8 + cl;
  if (cc < cols) {
    float t = part[0][cl];
#pragma unroll
    for (int l = 1; l < TE_COLSUM_LANES; l++) t = te_add_rn(t, part[l][cl]);
    ws[(unsigned long long)blockIdx.y * cols + cc] = t;
  }
}

#endif
