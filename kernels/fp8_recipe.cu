// SPDX-License-Identifier: Apache-2.0
// fp8_recipe.cu -- the delayed-scaling update of up to TE_DU_MAX groups of
// tensors (a fuser sequence's activation, weight and gradient states) in
// one launch.  Per group, history is [len][count] floats, row 0 the most
// recent; the update moves every row down one (dropping the oldest), puts
// the new amax in row 0, and sets scale and scale_inv from the window.
//
// One thread per tensor walking its column was latency-bound: len dependent
// load/store pairs, 370 us for the default len 1024 on an H100 (te-demo
// --profile).  Then a block of 32 x 32 threads owned 32 tensors, the rows
// in chunks of 128: eight dependent load/sync/store rounds for len 1024,
// and one block for a group of up to 32 tensors, one launch per group.
// Here a block of TE_DU_TX x blockDim.y threads owns TE_DU_TX (8) tensors:
// x picks the tensor (a row's 8 floats are one 32-byte sector), y spreads
// the rows, TE_DU_ROWS a thread, so a pass covers blockDim.y * 8 rows --
// all of the default 1024 with blockDim.y = 128, one round trip -- and a
// small group still spreads over several SMs.  The blocks of every group
// of the launch run side by side (the grid is the groups' blocks laid end
// to end, block0 saying where each group starts).  Longer histories take
// several passes from the oldest rows up: every thread loads its rows of
// the pass, the block syncs, then stores them one row lower; the row a
// pass writes last was read by the pass before it, which has finished.
// The window max is an integer max of the float bits (amaxes are >= 0; a
// NaN wins and keeps the old scale), reduced over y with shuffles inside a
// warp (TE_DU_TX tensors x 4 rows) and through shared memory across warps.
// The rule is kernels/common/fp8.h's te_fp8_delayed_scale, shared with the
// vdev implementation in libtecore/fp8/recipe.c, which computes the same
// bits one tensor at a time.
#include "common/fp8.h"
#include "common/fp8_recipe_params.h"
#include "pdl.cuh"

extern "C" __global__ void __launch_bounds__(1024)
te_fp8_delayed_update(TE_KSIG(TE_FP8_DELAYED_UPDATE_PARAMS)) {
  te_pdl_enter();
  __shared__ uint32_t wmax[TE_DU_MAX_TY / 4][TE_DU_TX];
  const unsigned b = blockIdx.x;
  int g = 0;
  while (g + 1 < p.nstates && p.st[g + 1].block0 <= b) g++;
  const te_du_state &st = p.st[g];
  const unsigned tx = threadIdx.x, ty = threadIdx.y, ny = blockDim.y;
  const unsigned long long count = st.count;
  const unsigned long long i = (unsigned long long)(b - st.block0) * TE_DU_TX + tx;
  const bool live = i < count;
  float *const history = st.history;
  const int len = p.len, pass = (int)ny * TE_DU_ROWS;
  uint32_t win = 0;
  for (int top = len - 1; top >= 1; top -= pass) {
    float h[TE_DU_ROWS];
#pragma unroll
    for (int r = 0; r < TE_DU_ROWS; r++) {
      const int k = top - (int)ty - (int)ny * r;  // row written; it gets row k - 1
      h[r] = live && k >= 1 ? history[(unsigned long long)(k - 1) * count + i] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < TE_DU_ROWS; r++) {
      const int k = top - (int)ty - (int)ny * r;
      if (live && k >= 1) {
        history[(unsigned long long)k * count + i] = h[r];
        win = te_max_u32(win, te_abs_bits(h[r]));
      }
    }
    __syncthreads();
  }
  // lane = (ty % 4) * TE_DU_TX + tx: xor 8 and 16 pair a tensor's rows
  const unsigned lin = ty * TE_DU_TX + tx, lane = lin & 31, warp = lin >> 5;
  win = te_max_u32(win, __shfl_xor_sync(0xffffffffu, win, 8));
  win = te_max_u32(win, __shfl_xor_sync(0xffffffffu, win, 16));
  if (lane < TE_DU_TX) wmax[warp][lane] = win;
  __syncthreads();
  if (warp != 0) return;
  win = 0;
  for (unsigned w = lane / TE_DU_TX; w < ny / 4; w += 4) win = te_max_u32(win, wmax[w][tx]);
  win = te_max_u32(win, __shfl_xor_sync(0xffffffffu, win, 8));
  win = te_max_u32(win, __shfl_xor_sync(0xffffffffu, win, 16));
  // lanes 0..7 of warp 0 are ty 0, tx = lane: one a tensor
  if (lane >= TE_DU_TX || !live) return;
  const float a = st.amax[i];
  win = te_max_u32(win, te_abs_bits(a));
  history[i] = a;
  const float use = __uint_as_float(p.most_recent ? te_abs_bits(a) : win);
  const float s = te_fp8_delayed_scale(use, st.scale[i], st.fp8_max, p.margin_mult, p.pow2);
  st.scale[i] = s;
  st.scale_inv[i] = te_fp8_scale_inv(s);
  st.amax[i] = 0.0f;
}
