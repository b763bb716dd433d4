// SPDX-License-Identifier: Apache-2.0
// ldst.cuh -- device-side loads and stores of 8 elements (one 16-byte
// vector of a 16-bit type, two of F32, 8 bytes of FP8) of a runtime dtype,
// converting to and from float.  Used by act.cu, norm.cu, transpose.cu,
// optim.cu and xent.cu; with cp.async's copies into shared memory.
//
// The conversions use the hardware's cvt instructions, which round to
// nearest even and saturate like kernels/common/convert.h and fp8.h and so
// give the same bytes as the vdev implementations (FP8 NaN is 0x7F on both;
// t/gpu/act_cvt_exhaustive.cu checks all 2^32 inputs).  BF16/F16 NaN
// payloads may differ from convert.h's.
// Element paths (scalar) use kernels/common/ldst.h.
#ifndef TE_KERNELS_LDST_CUH
#define TE_KERNELS_LDST_CUH

#include "common/ldst.h"

__device__ __forceinline__ float te_dev_h2f(uint32_t h16) {
  float f;
  unsigned short h = (unsigned short)h16;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}

// Two floats to a packed pair, lo in the low half.
__device__ __forceinline__ uint32_t te_dev_bf16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ uint32_t te_dev_f16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ uint32_t te_dev_fp8x2(float lo, float hi, int dtype) {
  unsigned short r;
  if (dtype == TE_FP8_DT_E4M3)
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}

// v[0..7] = elements i .. i+7 of p (i a multiple of 8, p 16-byte aligned).
__device__ __forceinline__ void te_dev_ld8(const void *p, uint64_t i, int dtype, float *v) {
  if (dtype == TE_FP8_DT_F32) {
    const float4 *q = (const float4 *)((const float *)p + i);
    float4 a = q[0], b = q[1];
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
  } else {
    uint4 u = *(const uint4 *)((const uint16_t *)p + i);
    uint32_t w[4] = {u.x, u.y, u.z, u.w};
    if (dtype == TE_FP8_DT_BF16) {
#pragma unroll
      for (int k = 0; k < 4; k++) {
        v[2 * k] = __uint_as_float(w[k] << 16);
        v[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
      }
    } else {
#pragma unroll
      for (int k = 0; k < 4; k++) {
        v[2 * k] = te_dev_h2f(w[k] & 0xffffu);
        v[2 * k + 1] = te_dev_h2f(w[k] >> 16);
      }
    }
  }
}

// The same through the read-only path, for inputs reread by many threads (gamma).
__device__ __forceinline__ void te_dev_ld8_ro(const void *p, uint64_t i, int dtype, float *v) {
  if (dtype == TE_FP8_DT_F32) {
    const float4 *q = (const float4 *)((const float *)p + i);
    float4 a = __ldg(q), b = __ldg(q + 1);
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
  } else {
    uint4 u = __ldg((const uint4 *)((const uint16_t *)p + i));
    uint32_t w[4] = {u.x, u.y, u.z, u.w};
    if (dtype == TE_FP8_DT_BF16) {
#pragma unroll
      for (int k = 0; k < 4; k++) {
        v[2 * k] = __uint_as_float(w[k] << 16);
        v[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
      }
    } else {
#pragma unroll
      for (int k = 0; k < 4; k++) {
        v[2 * k] = te_dev_h2f(w[k] & 0xffffu);
        v[2 * k + 1] = te_dev_h2f(w[k] >> 16);
      }
    }
  }
}

// Stores v[0..7] as elements i .. i+7 of p (already scaled for FP8).
__device__ __forceinline__ void te_dev_st8(void *p, uint64_t i, int dtype, const float *v) {
  if (dtype == TE_FP8_DT_F32) {
    float4 *q = (float4 *)((float *)p + i);
    q[0] = make_float4(v[0], v[1], v[2], v[3]);
    q[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else if (dtype == TE_FP8_DT_BF16) {
    *(uint4 *)((uint16_t *)p + i) =
        make_uint4(te_dev_bf16x2(v[0], v[1]), te_dev_bf16x2(v[2], v[3]),
                   te_dev_bf16x2(v[4], v[5]), te_dev_bf16x2(v[6], v[7]));
  } else if (dtype == TE_FP8_DT_F16) {
    *(uint4 *)((uint16_t *)p + i) =
        make_uint4(te_dev_f16x2(v[0], v[1]), te_dev_f16x2(v[2], v[3]),
                   te_dev_f16x2(v[4], v[5]), te_dev_f16x2(v[6], v[7]));
  } else {
    uint32_t lo = te_dev_fp8x2(v[0], v[1], dtype) | (te_dev_fp8x2(v[2], v[3], dtype) << 16);
    uint32_t hi = te_dev_fp8x2(v[4], v[5], dtype) | (te_dev_fp8x2(v[6], v[7], dtype) << 16);
    *(uint2 *)((uint8_t *)p + i) = make_uint2(lo, hi);
  }
}

// The same with the dtype known at compile time (the kernels' fast paths:
// no run-time dtype branches in the element loops).
template <int DT>
__device__ __forceinline__ void te_dev_ld8t(const void *p, uint64_t i, float *v) {
  if constexpr (DT == TE_FP8_DT_F32) {
    const float4 *q = (const float4 *)((const float *)p + i);
    float4 a = q[0], b = q[1];
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
  } else {
    uint4 u = *(const uint4 *)((const uint16_t *)p + i);
    uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
      if constexpr (DT == TE_FP8_DT_BF16) {
        v[2 * k] = __uint_as_float(w[k] << 16);
        v[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
      } else {
        v[2 * k] = te_dev_h2f(w[k] & 0xffffu);
        v[2 * k + 1] = te_dev_h2f(w[k] >> 16);
      }
    }
  }
}
// 8 16-bit elements (BF16 or F16) kept packed in a register quad and
// widened when used: half the registers of 8 floats.
template <int DT>
__device__ __forceinline__ uint4 te_dev_ld8raw(const void *p, uint64_t i) {
  return *(const uint4 *)((const uint16_t *)p + i);
}
template <int DT>
__device__ __forceinline__ void te_dev_unpack8t(uint4 u, float *v) {
  uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int k = 0; k < 4; k++) {
    if constexpr (DT == TE_FP8_DT_BF16) {
      v[2 * k] = __uint_as_float(w[k] << 16);
      v[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
    } else {
      v[2 * k] = te_dev_h2f(w[k] & 0xffffu);
      v[2 * k + 1] = te_dev_h2f(w[k] >> 16);
    }
  }
}
// The two 16-bit elements of one word of such a quad.
template <int DT>
__device__ __forceinline__ void te_dev_unpack2t(uint32_t w, float *v) {
  if constexpr (DT == TE_FP8_DT_BF16) {
    v[0] = __uint_as_float(w << 16);
    v[1] = __uint_as_float(w & 0xffff0000u);
  } else {
    v[0] = te_dev_h2f(w & 0xffffu);
    v[1] = te_dev_h2f(w >> 16);
  }
}
// 8 floats rounded to a 16-bit type (BF16 or F16), packed as te_dev_unpack8t reads them.
template <int DT>
__device__ __forceinline__ uint4 te_dev_pack8t(const float *v) {
  if constexpr (DT == TE_FP8_DT_BF16)
    return make_uint4(te_dev_bf16x2(v[0], v[1]), te_dev_bf16x2(v[2], v[3]),
                      te_dev_bf16x2(v[4], v[5]), te_dev_bf16x2(v[6], v[7]));
  else
    return make_uint4(te_dev_f16x2(v[0], v[1]), te_dev_f16x2(v[2], v[3]),
                      te_dev_f16x2(v[4], v[5]), te_dev_f16x2(v[6], v[7]));
}
template <int DT>
__device__ __forceinline__ void te_dev_st8t(void *p, uint64_t i, const float *v) {
  if constexpr (DT == TE_FP8_DT_F32) {
    float4 *q = (float4 *)((float *)p + i);
    q[0] = make_float4(v[0], v[1], v[2], v[3]);
    q[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else if constexpr (DT == TE_FP8_DT_BF16 || DT == TE_FP8_DT_F16) {
    *(uint4 *)((uint16_t *)p + i) = te_dev_pack8t<DT>(v);
  } else {
    uint32_t lo = te_dev_fp8x2(v[0], v[1], DT) | (te_dev_fp8x2(v[2], v[3], DT) << 16);
    uint32_t hi = te_dev_fp8x2(v[4], v[5], DT) | (te_dev_fp8x2(v[6], v[7], DT) << 16);
    *(uint2 *)((uint8_t *)p + i) = make_uint2(lo, hi);
  }
}

// amax of a block: each thread's max |value| as bits (te_abs_bits; fp8.h:
// non-negative floats order like their bits, NaN above all) -> one
// atomicMax.  A block whose max does not exceed the value already there
// skips the atomic, so thousands of blocks do not queue on one address.
// Every thread of the block must call it (it synchronizes).
__device__ __forceinline__ void te_dev_block_amax(unsigned *amax, uint32_t mine) {
  __shared__ unsigned te_amax_smem;
  if (threadIdx.x == 0) te_amax_smem = 0;
  __syncthreads();
  mine = __reduce_max_sync(0xffffffffu, mine);
  if ((threadIdx.x & 31) == 0 && mine) atomicMax(&te_amax_smem, mine);
  __syncthreads();
  if (threadIdx.x == 0 && te_amax_smem > *(volatile unsigned *)amax) atomicMax(amax, te_amax_smem);
}
// The same from a float max (te_amax_f32: >= 0 or NaN).
__device__ __forceinline__ void te_dev_block_amax_f(unsigned *amax, float mine) {
  te_dev_block_amax(amax, te_abs_bits(mine));
}

// ---- asynchronous copies into shared memory (cp.async, sm_80 on) ----
// A thread's copies land in shared memory in the groups it committed;
// after te_cp_async_wait the thread reads what its own finished groups
// wrote (other threads' copies need a barrier besides).

// 16 bytes global -> shared, bypassing L1.
__device__ __forceinline__ void te_cp_async16(void *dst, const void *src) {
  const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
}
// The copies issued since the last commit become one group.
__device__ __forceinline__ void te_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most `pending` of the thread's groups are in flight (an
// immediate operand: more than 3 waits as for 3, which is only sooner).
__device__ __forceinline__ void te_cp_async_wait(int pending) {
  if (pending <= 0) asm volatile("cp.async.wait_group 0;\n" ::: "memory");
  else if (pending == 1) asm volatile("cp.async.wait_group 1;\n" ::: "memory");
  else if (pending == 2) asm volatile("cp.async.wait_group 2;\n" ::: "memory");
  else asm volatile("cp.async.wait_group 3;\n" ::: "memory");
}

#endif
