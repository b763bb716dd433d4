// SPDX-License-Identifier: Apache-2.0
// act_cvt_exhaustive.cu -- proof, over all 2^32 float bit patterns, that the
// hardware conversions the activation and norm kernels store through
// (kernels/ldst.cuh: te_dev_fp8x2, te_dev_bf16x2, te_dev_f16x2) give the
// bytes of the integer code the vdev backend uses (kernels/common/fp8.h,
// convert.h); for BF16/F16 a NaN may differ in payload only.
// A standalone program (CUDA runtime, no libte):
//   nvcc -O3 -arch=sm_90a -Ikernels -o actcvt t/gpu/act_cvt_exhaustive.cu
// Prints the mismatch counts per conversion; exit 0 when all are 0.
#include <cstdio>
#include <cuda_runtime.h>
#include "ldst.cuh"

__device__ unsigned long long g_bad[4];
__device__ uint32_t g_ex[4];

__device__ static bool h_is_nan(uint32_t h, int bf) {
  return bf ? ((h & 0x7f80u) == 0x7f80u && (h & 0x7fu)) : ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu));
}

__global__ void check(uint64_t base) {
  uint64_t i = base + (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  uint32_t u0 = (uint32_t)(i * 2), u1 = u0 + 1;
  float a = __uint_as_float(u0), b = __uint_as_float(u1);
  unsigned long long bad[4] = {0, 0, 0, 0};
  uint32_t e4 = te_dev_fp8x2(a, b, TE_FP8_DT_E4M3), e5 = te_dev_fp8x2(a, b, TE_FP8_DT_E5M2);
  if (e4 != ((uint32_t)te_f32_to_e4m3(a) | ((uint32_t)te_f32_to_e4m3(b) << 8))) bad[0]++;
  if (e5 != ((uint32_t)te_f32_to_e5m2(a) | ((uint32_t)te_f32_to_e5m2(b) << 8))) bad[1]++;
  uint32_t bf = te_dev_bf16x2(a, b), hf = te_dev_f16x2(a, b);
  uint32_t sbf = te_f32_to_bf16(a) | ((uint32_t)te_f32_to_bf16(b) << 16);
  uint32_t shf = te_f32_to_f16(a) | ((uint32_t)te_f32_to_f16(b) << 16);
  for (int k = 0; k < 2; k++) {
    uint32_t x = (bf >> (16 * k)) & 0xffffu, y = (sbf >> (16 * k)) & 0xffffu;
    if (x != y && !(h_is_nan(x, 1) && h_is_nan(y, 1))) bad[2]++;
    x = (hf >> (16 * k)) & 0xffffu;
    y = (shf >> (16 * k)) & 0xffffu;
    if (x != y && !(h_is_nan(x, 0) && h_is_nan(y, 0))) bad[3]++;
  }
  for (int k = 0; k < 4; k++)
    if (bad[k]) {
      atomicAdd(&g_bad[k], bad[k]);
      g_ex[k] = u0;
    }
}

int main() {
  const uint64_t pairs = 1ull << 31, step = 1ull << 28;
  for (uint64_t base = 0; base < pairs; base += step) check<<<(unsigned)(step / 256), 256>>>(base);
  if (cudaDeviceSynchronize() != cudaSuccess) {
    printf("CUDA error: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 2;
  }
  unsigned long long bad[4];
  uint32_t ex[4];
  cudaMemcpyFromSymbol(bad, g_bad, sizeof bad);
  cudaMemcpyFromSymbol(ex, g_ex, sizeof ex);
  const char *nm[4] = {"e4m3x2", "e5m2x2", "bf16x2", "f16x2"};
  int fail = 0;
  for (int k = 0; k < 4; k++) {
    printf("%s: %llu mismatches over 2^32 inputs%s", nm[k], bad[k], bad[k] ? "" : "\n");
    if (bad[k]) printf(" (e.g. near 0x%08x)\n", ex[k]);
    fail |= bad[k] != 0;
  }
  return fail;
}
