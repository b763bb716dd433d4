// SPDX-License-Identifier: Apache-2.0
// attn_cudnn.cu -- the device side of the cuDNN attention row's variable
// sequence lengths (libtecore/attn/attn_cudnn.c): per-sequence lengths and
// ragged element offsets from cu_seqlens, and the softmax statistics moved
// between cuDNN's padded layout and the caller's lse; and the two steps
// around the E4M3 forward graph (its device constants before, the amaxes
// and a staged BF16/F16 O after).  Grid-stride loops
// over the items of kernels/common/attn_cudnn.h, whose math the vdev twins
// (libtecore/attn/attn_cudnn_kern.c) share.
#include "common/attn_cudnn.h"
#include "ldst.cuh"
#include "pdl.cuh"

extern "C" __global__ void __launch_bounds__(TE_ACD_THREADS)
    te_attn_cudnn_ragged(TE_KSIG(TE_ACD_RAGGED_PARAMS)) {
  te_pdl_enter();
  const long long m[TE_ACD_ROLES] = {m0, m1, m2, m3, m4, m5, m6, m7};
  const te_acd_bounds bd = {total_q, total_kv, max_q, max_kv};
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i <= batch;
       i += (long long)gridDim.x * blockDim.x)
    te_acd_ragged_item(cu_q, cu_kv, out, batch, stride, m, &bd, i);
}

extern "C" __global__ void __launch_bounds__(TE_ACD_THREADS)
    te_attn_cudnn_stats(TE_KSIG(TE_ACD_STATS_PARAMS)) {
  te_pdl_enter();
  const te_acd_stats_args a = {TE_KNAMES(TE_ACD_STATS_PARAMS)};
  const long long n = dir == TE_ACD_TO_LSE ? heads * total_q : batch * heads * max_q;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    te_acd_stats_item(&a, i);
}

// Two E4M3 codes to floats through the hardware's exact E4M3 -> F16
// conversion (every finite E4M3 value is an F16 value; NaN stays NaN): the
// same floats as te_e4m3_to_f32.
__device__ __forceinline__ void te_acd_e4m3x2(uint32_t two, float *f) {
  uint32_t h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"((unsigned short)two));
  f[0] = te_dev_h2f(h2 & 0xffffu);
  f[1] = te_dev_h2f(h2 >> 16);
}

// 8 staged codes (w: two words) to O's floats: code / scale_o, which
// te_acd_staged_scale makes a power of two, so code * (1 / scale_o) is the
// same float (vdev divides) without a division an element.
__device__ __forceinline__ void te_acd_widen8(uint32_t w0, uint32_t w1, float inv, float *v) {
  te_acd_e4m3x2(w0, v), te_acd_e4m3x2(w0 >> 16, v + 2);
  te_acd_e4m3x2(w1, v + 4), te_acd_e4m3x2(w1 >> 16, v + 6);
#pragma unroll
  for (int e = 0; e < 8; e++) v[e] *= inv;
}

// The staged O widened: where O is packed like the staged copy (token
// stride heads * d, head stride d) item i's 8 codes become O's elements
// 8 i .. 8 i + 7, so a warp's loads (256 bytes) and its stores (512
// bytes at BF16/F16) are each one contiguous run, and a thread keeps four
// loads in flight; otherwise item i goes to the offset it names.  Thread
// 0 does the last item's fold of the amaxes.
extern "C" __global__ void __launch_bounds__(TE_ACD_THREADS)
    te_attn_cudnn_fp8(TE_KSIG(TE_ACD_FP8_PARAMS)) {
  te_pdl_enter();
  const long long n = te_acd_fp8_items(o8, total_q, heads, d, mode);
  const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long step = (long long)gridDim.x * blockDim.x;
  if (mode == TE_ACD_FP8_PRE) {
    if (first == 0)
      te_acd_fp8_pre(slots, q_si, k_si, v_si, o_scale);
    return;
  }
  /* item n - 1's fold, by the first thread (the grid may hold fewer than n) */
  if (first == 0) te_acd_fp8_fold(slots, s_amax, o_amax, o_scale, o_scale_inv);
  if (n == 1) return;
  const float inv = 1.0f / slots[TE_ACD_SLOT_SCALE_O];
  float v[8];
  if (o_ts == heads * d && o_hs == d) {
    const uint2 *src = (const uint2 *)o8;
    long long i = first;
    for (; i + 3 * step < n - 1; i += 4 * step) {
      uint2 u[4];
#pragma unroll
      for (int k = 0; k < 4; k++) u[k] = src[i + k * step];
#pragma unroll
      for (int k = 0; k < 4; k++) {
        te_acd_widen8(u[k].x, u[k].y, inv, v);
        te_dev_st8(o, (uint64_t)((i + k * step) * TE_ACD_FP8_VEC), o_dt, v);
      }
    }
    for (; i < n - 1; i += step) {
      const uint2 u = src[i];
      te_acd_widen8(u.x, u.y, inv, v);
      te_dev_st8(o, (uint64_t)(i * TE_ACD_FP8_VEC), o_dt, v);
    }
    return;
  }
  for (long long i = first; i < n - 1; i += step) {
    uint2 u = *(const uint2 *)(o8 + i * TE_ACD_FP8_VEC);
    te_acd_widen8(u.x, u.y, inv, v);
    te_dev_st8(o, (uint64_t)te_acd_fp8_o_at(i, o_ts, o_hs, heads, d), o_dt, v);
  }
}
