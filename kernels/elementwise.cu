// elementwise.cu -- fill and scale-and-add over n elements of f32/f16/bf16.
// Grid-stride loops; one thread per element per step.  The element math is
// kernels/common/elementwise.h, shared with the vdev implementation.
#include "common/elementwise.h"

extern "C" __global__ void te_fill(void *dst, int dtype, unsigned long long n, float value) {
  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += stride)
    te_ew_store(dst, i, dtype, value);
}

extern "C" __global__ void te_scale_add(void *dst, const void *a, float alpha, const void *b,
                                        float beta, int dtype, unsigned long long n) {
  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += stride)
    te_ew_store(dst, i, dtype,
                te_ew_scale_add(te_ew_load(a, i, dtype), alpha, te_ew_load(b, i, dtype), beta));
}
