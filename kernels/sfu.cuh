// SPDX-License-Identifier: Apache-2.0
// sfu.cuh -- the special-function unit's approximations, for kernels whose
// results are checked against a tolerance (attention's softmax, the GEMM's
// GELU epilogues, the cross-entropy's exponentials), not bit for bit
// against the vdev backend.
#ifndef TE_KERNELS_SFU_CUH
#define TE_KERNELS_SFU_CUH

// 2^x, one MUFU.EX2: relative error about 2^-22, subnormal results
// flushed to zero (2^-inf = 0, NaN stays NaN).
__device__ __forceinline__ float te_ex2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

#endif
