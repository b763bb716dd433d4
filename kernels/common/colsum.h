/* SPDX-License-Identifier: Apache-2.0 */
/* colsum.h -- te_colsum_part's order of sums on the host: the vdev twins
 * of te_colsum_part (elementwise_vdev.c) and te_act_bwd_colsum_<kind>
 * (act_vdev.c) add as the kernels do (kernels/colsum.cuh). */
#ifndef TE_KERNELS_COMMON_COLSUM_H
#define TE_KERNELS_COMMON_COLSUM_H

#include "elementwise_params.h"
#include "fmath.h"
#include <stdint.h>

#ifndef __CUDACC__
/* ws[part][c] for the parts of rpp rows of a [rows][cols] matrix: lane l
 * adds the values of rows r0 + l, r0 + l + TE_COLSUM_LANES, ... of the
 * part in order, then the lanes are added in order.  val(ctx, i) gives
 * (and may first write) the value at row-major index i. */
static inline void te_colsum_parts_host(float *ws, uint64_t rows, uint64_t cols, uint64_t rpp,
                                        float (*val)(void *ctx, uint64_t i), void *ctx) {
  for (uint64_t r0 = 0, p = 0; r0 < rows; r0 += rpp, p++) {
    const uint64_t r1 = r0 + rpp < rows ? r0 + rpp : rows;
    for (uint64_t c = 0; c < cols; c++) {
      float t = 0.0f;
      for (unsigned l = 0; l < TE_COLSUM_LANES; l++) {
        float s = 0.0f;
        for (uint64_t r = r0 + l; r < r1; r += TE_COLSUM_LANES) s = te_add_rn(s, val(ctx, r * cols + c));
        t = l == 0 ? s : te_add_rn(t, s);
      }
      ws[p * cols + c] = t;
    }
  }
}
#endif

#endif
