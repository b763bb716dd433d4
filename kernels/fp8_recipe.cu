// fp8_recipe.cu -- the delayed-scaling update for a group of tensors in one
// launch: one thread per tensor, count tensors, history [len][count] floats
// (row 0 the most recent), so thread i's loads and stores of a history row
// are coalesced with its neighbours'.  The rule is kernels/common/fp8.h's
// te_fp8_delayed_scale, shared with the vdev implementation in
// libtecore/fp8/recipe.c; the window max is an integer max of the float
// bits (amaxes are >= 0; a NaN wins and keeps the old scale).
#include "common/fp8.h"
#include "common/fp8_recipe_params.h"

extern "C" __global__ void __launch_bounds__(256)
te_fp8_delayed_update(TE_KSIG(TE_FP8_DELAYED_UPDATE_PARAMS)) {
  if (noop && *noop) return;
  const unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const float a = amax[i];
  uint32_t win = te_abs_bits(a);
  // shift the history down one row, dropping the oldest; row 0 gets a
  for (int k = len - 1; k >= 1; k--) {
    float h = history[(unsigned long long)(k - 1) * count + i];
    history[(unsigned long long)k * count + i] = h;
    win = te_max_u32(win, te_abs_bits(h));
  }
  history[i] = a;
  const float use = __uint_as_float(most_recent ? te_abs_bits(a) : win);
  const float s = te_fp8_delayed_scale(use, scale[i], fp8_max, margin_mult, pow2);
  scale[i] = s;
  scale_inv[i] = te_fp8_scale_inv(s);
  amax[i] = 0.0f;
}
