// SPDX-License-Identifier: Apache-2.0
// fp8_recipe.cu -- the delayed-scaling update for a group of tensors in one
// launch.  history is [len][count] floats, row 0 the most recent; the
// update moves every row down one (dropping the oldest), puts the new amax
// in row 0, and sets scale and scale_inv from the window.
//
// One thread per tensor walking its column was latency-bound: len dependent
// load/store pairs, 370 us for the default len 1024 on an H100 (te-demo
// --profile), more than all of a small step's GEMMs.  Here a block of
// 32 x 32 threads owns 32 tensors: x picks the tensor (a row's loads and
// stores are coalesced), y spreads the rows.  The shift goes from the
// oldest rows up in chunks of 32 * TE_DU_ROWS rows: every thread loads its
// TE_DU_ROWS rows of the chunk, the block syncs, then stores them one row
// lower; the row a chunk writes last was read by the chunk before it,
// which has finished.  The window max is an integer max of the float bits
// (amaxes are >= 0; a NaN wins and keeps the old scale), reduced over y in
// shared memory.  The rule is kernels/common/fp8.h's te_fp8_delayed_scale,
// shared with the vdev implementation in libtecore/fp8/recipe.c, which
// computes the same bits one tensor at a time.
#include "common/fp8.h"
#include "common/fp8_recipe_params.h"

#define TE_DU_ROWS 4

extern "C" __global__ void __launch_bounds__(1024)
te_fp8_delayed_update(TE_KSIG(TE_FP8_DELAYED_UPDATE_PARAMS)) {
  __shared__ uint32_t wmax[32][33];
  if (noop && *noop) return;
  const unsigned tx = threadIdx.x, ty = threadIdx.y;
  const unsigned long long i = (unsigned long long)blockIdx.x * 32 + tx;
  const bool live = i < count;
  uint32_t win = 0;
  for (int top = len - 1; top >= 1; top -= 32 * TE_DU_ROWS) {
    float h[TE_DU_ROWS];
#pragma unroll
    for (int r = 0; r < TE_DU_ROWS; r++) {
      const int k = top - (int)ty - 32 * r;  // row written; it gets row k - 1
      h[r] = live && k >= 1 ? history[(unsigned long long)(k - 1) * count + i] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < TE_DU_ROWS; r++) {
      const int k = top - (int)ty - 32 * r;
      if (live && k >= 1) {
        history[(unsigned long long)k * count + i] = h[r];
        win = te_max_u32(win, te_abs_bits(h[r]));
      }
    }
    __syncthreads();
  }
  wmax[ty][tx] = win;
  __syncthreads();
  if (ty != 0 || !live) return;
  for (int y = 1; y < 32; y++) win = te_max_u32(win, wmax[y][tx]);
  const float a = amax[i];
  win = te_max_u32(win, te_abs_bits(a));
  history[i] = a;
  const float use = __uint_as_float(most_recent ? te_abs_bits(a) : win);
  const float s = te_fp8_delayed_scale(use, scale[i], fp8_max, margin_mult, pow2);
  scale[i] = s;
  scale_inv[i] = te_fp8_scale_inv(s);
  amax[i] = 0.0f;
}
