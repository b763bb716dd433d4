// SPDX-License-Identifier: Apache-2.0
// async.cuh -- what libte's tensor-core kernels (kernels/attention.cu,
// kernels/gemm16.cu) share: the two 16-bit input types (F16, BF16, the
// DT template argument wgmma.cuh's MMAs take), their packing of two
// floats, a shared-memory address, and cp.async's 16-byte copies with
// their commit and wait.
#ifndef TE_KERNELS_ASYNC_CUH
#define TE_KERNELS_ASYNC_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#define F16 1
#define BF16 2

// Two floats to a packed pair of 16-bit values and back, per type.
__device__ __forceinline__ void cvt2(float a, float b, __nv_bfloat162 &v) {
  v = __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ void cvt2(float a, float b, __half2 &v) { v = __floats2half2_rn(a, b); }
__device__ __forceinline__ float2 to_float2(__nv_bfloat162 v) { return __bfloat1622float2(v); }
__device__ __forceinline__ float2 to_float2(__half2 v) { return __half22float2(v); }

// elem<DT>: the element type t of DT, and pack / unpack of a pair in 32 bits.
template <typename T, typename T2> struct elem16 {
  typedef T t;
  static __device__ __forceinline__ float to_float(T v) { return (float)v; }
  static __device__ __forceinline__ uint32_t pack(float a, float b) {
    T2 v;
    cvt2(a, b, v);
    return *reinterpret_cast<uint32_t *>(&v);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t u) {
    return to_float2(*reinterpret_cast<T2 *>(&u));
  }
};
template <int DT> struct elem;
template <> struct elem<BF16> : elem16<__nv_bfloat16, __nv_bfloat162> {};
template <> struct elem<F16> : elem16<__half, __half2> {};

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}
// 16 bytes global -> shared; src_bytes 0 writes zeros (rows past the end).
__device__ __forceinline__ void cp_async16(void *dst, const void *src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(src_bytes));
}
// The same to a shared-memory address (a swizzled tile's byte offset).
__device__ __forceinline__ void cp_async16_at(uint32_t dst, const void *src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

#endif
