// SPDX-License-Identifier: Apache-2.0
// fp8_scale.cu -- the two one-thread kernels of current scaling's FP8
// output protocol (libtecore/ksupport/fp8_out.c): reset an amax, and set a
// scale and its inverse from an amax.  Every family that writes FP8 with a
// per-tensor current scale queues them around its own passes.  The rule is
// kernels/common/fp8.h's te_fp8_current_scale, shared with the vdev
// implementation.  Both return at once when noop && *noop.
#include "common/fp8.h"
#include "common/fp8_scale_params.h"
#include "pdl.cuh"

static __device__ __forceinline__ bool noop_set(const int *noop) { return noop && *noop; }

extern "C" __global__ void te_fp8_amax_init(TE_KSIG(TE_FP8_AMAX_INIT_PARAMS)) {
  te_pdl_enter();
  if (noop_set(noop)) return;
  if (blockIdx.x == 0 && threadIdx.x == 0) *amax = 0u;
}

extern "C" __global__ void te_fp8_compute_scale(TE_KSIG(TE_FP8_COMPUTE_SCALE_PARAMS)) {
  te_pdl_enter();
  if (noop_set(noop)) return;
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  float s = te_fp8_current_scale(__uint_as_float(*amax), eps, fp8_max, pow2);
  *scale = s;
  float si = te_fp8_scale_inv(s);
  if (scale_inv) *scale_inv = si;
  if (scale_inv_col) *scale_inv_col = si;
}
