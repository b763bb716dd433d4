// SPDX-License-Identifier: Apache-2.0
// optim.cu -- optimizer kernels for Hopper: multi-tensor Adam / AdamW and
// SGD (momentum, Nesterov) on FP32 master weights with a refreshed
// BF16 / F16 / FP8 model copy, the two-stage L2 norm of many tensors, and
// multi-tensor unscale with a found-inf flag.
// Element math and geometry: kernels/common/optim.h (shared with the vdev
// implementations in libtecore/optim/optim_vdev.c, which give the same bits).
//
// Kernels and the shapes they handle (256 threads a block):
//   te_optim_adam, te_optim_sgd   up to TE_OPTIM_MAX tensors of any length in
//       one launch, passed by value in one parameter (te_optim_params); one
//       block per (tensor, 4096-element chunk); 4 elements a thread a step,
//       as 16-byte vectors of p, m, v (8 or 4 bytes of a 16-bit or FP8 grad
//       and model copy) when the host found every pointer of the tensor
//       aligned for them, else element by element.  The whole launch returns
//       at once when *found_inf != 0.  FP8 copies: one atomicMax of |p| bits
//       per block into the tensor's amax; chunk 0 writes scale_inv.
//   te_optim_l2_partial   sum of squares (double) of one 16384-element chunk
//       of one tensor per block into partial[base + blockIdx.x]; up to
//       TE_L2_MAX tensors.
//   te_optim_l2_final     one block: the partials in a fixed order, then
//       norm = sqrt(sum) (and found_inf = 1 when the sum is not finite).
//   te_optim_unscale      out = in * scale for up to TE_UNSCALE_MAX tensors
//       (f32/f16/bf16 in and out, in place allowed; 4096-element chunks),
//       found_inf = 1 when an output is not finite.
//   te_optim_commit   one thread: state->step += 1 after a step that read
//       its step number and learning rate from device memory, unless
//       *found_inf skipped it.
// Built without fast math and without flush-to-zero: the element math must
// round like the host's.
#include "common/optim.h"
#include "common/optim_params.h"
#include "ldst.cuh"
#include "pdl.cuh"

#define OT TE_OPTIM_THREADS

// The entry whose blocks include blockIdx.x: entries are in block order.
template <class P>
static __device__ __forceinline__ int find_entry(const P &p) {
  int lo = 0, hi = p.count - 1;
  unsigned b = blockIdx.x;
  while (lo < hi) {
    int mid = (lo + hi + 1) >> 1;
    if (p.e[mid].block0 <= b) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// ---- 4-element loads and stores ----------------------------------------------
// Vector forms need i % 4 == 0 and the pointer aligned to 4 elements; the
// element forms take the first k (1..4) elements.

template <int DT>
static __device__ __forceinline__ void ld4v(const void *b, uint64_t i, float *x) {
  if constexpr (DT == TE_FP8_DT_F32) {
    float4 f = *(const float4 *)((const float *)b + i);
    x[0] = f.x, x[1] = f.y, x[2] = f.z, x[3] = f.w;
  } else {
    uint2 u = *(const uint2 *)((const uint16_t *)b + i);
    if constexpr (DT == TE_FP8_DT_BF16) {
      x[0] = __uint_as_float(u.x << 16), x[1] = __uint_as_float(u.x & 0xffff0000u);
      x[2] = __uint_as_float(u.y << 16), x[3] = __uint_as_float(u.y & 0xffff0000u);
    } else {
      x[0] = te_dev_h2f(u.x & 0xffffu), x[1] = te_dev_h2f(u.x >> 16);
      x[2] = te_dev_h2f(u.y & 0xffffu), x[3] = te_dev_h2f(u.y >> 16);
    }
  }
}
template <int DT>
static __device__ __forceinline__ void ld4s(const void *b, uint64_t i, int k, float *x) {
#pragma unroll
  for (int q = 0; q < 4; q++)
    if (q < k) x[q] = te_ld(b, i + q, DT);
}
static __device__ __forceinline__ void st4f(float *b, uint64_t i, bool vec, int k, const float *x) {
  if (vec) {
    *(float4 *)(b + i) = make_float4(x[0], x[1], x[2], x[3]);
  } else {
#pragma unroll
    for (int q = 0; q < 4; q++)
      if (q < k) b[i + q] = x[q];
  }
}
// x[] already scaled for FP8.
template <int DT>
static __device__ __forceinline__ void st4w(void *b, uint64_t i, bool vec, int k, const float *x) {
  if (vec) {
    if constexpr (DT == TE_FP8_DT_BF16)
      *(uint2 *)((uint16_t *)b + i) = make_uint2(te_dev_bf16x2(x[0], x[1]), te_dev_bf16x2(x[2], x[3]));
    else if constexpr (DT == TE_FP8_DT_F16)
      *(uint2 *)((uint16_t *)b + i) = make_uint2(te_dev_f16x2(x[0], x[1]), te_dev_f16x2(x[2], x[3]));
    else
      *(uint32_t *)((uint8_t *)b + i) = te_dev_fp8x2(x[0], x[1], DT) | (te_dev_fp8x2(x[2], x[3], DT) << 16);
  } else {
#pragma unroll
    for (int q = 0; q < 4; q++)
      if (q < k) te_st(b, i + q, DT, x[q]);
  }
}

// ---- Adam / SGD ---------------------------------------------------------------

// One chunk of one tensor.  WDT: model-copy type or TE_OPTIM_W_NONE.
template <bool SGD, int GDT, int WDT>
static __device__ __forceinline__ void step_chunk(const te_optim_entry &e, const te_optim_hp &h,
                                                  const float *gsi_p) {
  constexpr bool FP8 = WDT == TE_FP8_DT_E4M3 || WDT == TE_FP8_DT_E5M2;
  const unsigned c = blockIdx.x - e.block0;
  const uint64_t start = (uint64_t)c * TE_OPTIM_CHUNK;
  const uint64_t end = e.n - start < TE_OPTIM_CHUNK ? e.n : start + TE_OPTIM_CHUNK;
  const float gsi = gsi_p ? *gsi_p : 1.0f;
  float scale = 1.0f;
  if constexpr (FP8) scale = *e.w_scale;
  // SGD: the momentum buffer is read unless there is none or this is the first step
  const bool read_m = !SGD || (h.momentum != 0.0f && !h.first);
  const bool write_m = !SGD || h.momentum != 0.0f;
  uint32_t am = 0;
  for (uint64_t i = start + threadIdx.x * TE_OPTIM_VEC; i < end; i += OT * TE_OPTIM_VEC) {
    const int k = end - i < 4 ? (int)(end - i) : 4;
    const bool vec = e.vec && k == 4;
    float p[4] = {0, 0, 0, 0}, g[4] = {0, 0, 0, 0}, m[4] = {0, 0, 0, 0}, v[4] = {0, 0, 0, 0};
    if (vec) {
      ld4v<TE_FP8_DT_F32>(e.p, i, p);
      ld4v<GDT>(e.g, i, g);
      if (read_m) ld4v<TE_FP8_DT_F32>(e.m, i, m);
      if constexpr (!SGD) ld4v<TE_FP8_DT_F32>(e.v, i, v);
    } else {
      ld4s<TE_FP8_DT_F32>(e.p, i, k, p);
      ld4s<GDT>(e.g, i, k, g);
      if (read_m) ld4s<TE_FP8_DT_F32>(e.m, i, k, m);
      if constexpr (!SGD) ld4s<TE_FP8_DT_F32>(e.v, i, k, v);
    }
#pragma unroll
    for (int q = 0; q < 4; q++) {
      float gq = gsi_p ? te_mul_rn(g[q], gsi) : g[q];
      if constexpr (SGD) te_sgd_elem(&p[q], &m[q], gq, &h);
      else te_adam_elem(&p[q], &m[q], &v[q], gq, &h);
    }
    st4f(e.p, i, vec, k, p);
    if (write_m) st4f(e.m, i, vec, k, m);
    if constexpr (!SGD) st4f(e.v, i, vec, k, v);
    if constexpr (WDT != TE_OPTIM_W_NONE) {
      float w[4];
#pragma unroll
      for (int q = 0; q < 4; q++) {
        w[q] = te_optim_w_value(p[q], WDT, scale);
        if (FP8 && q < k) am = te_max_u32(am, te_abs_bits(p[q]));
      }
      st4w<WDT>(e.w, i, vec, k, w);
    }
  }
  if constexpr (FP8) {
    if (e.w_amax) te_dev_block_amax(e.w_amax, am);   // uniform per block
    if (c == 0 && threadIdx.x == 0 && e.w_scale_inv) *e.w_scale_inv = te_fp8_scale_inv(scale);
  }
}

template <bool SGD, int GDT>
static __device__ __forceinline__ void step_w(const te_optim_entry &e, const te_optim_hp &h,
                                              const float *gsi) {
  switch (e.w_dt) {
  case TE_FP8_DT_BF16: step_chunk<SGD, GDT, TE_FP8_DT_BF16>(e, h, gsi); break;
  case TE_FP8_DT_F16: step_chunk<SGD, GDT, TE_FP8_DT_F16>(e, h, gsi); break;
  case TE_FP8_DT_E4M3: step_chunk<SGD, GDT, TE_FP8_DT_E4M3>(e, h, gsi); break;
  case TE_FP8_DT_E5M2: step_chunk<SGD, GDT, TE_FP8_DT_E5M2>(e, h, gsi); break;
  default: step_chunk<SGD, GDT, TE_OPTIM_W_NONE>(e, h, gsi); break;
  }
}

template <bool SGD>
static __device__ __forceinline__ void step(const te_optim_params &p) {
  if (p.found_inf && *p.found_inf) return;
  const te_optim_entry &e = p.e[find_entry(p)];
  te_optim_hp h = p.hp;
  if (p.state) te_optim_hp_from_state(&h, p.state, &p.dhp);
  switch (e.g_dt) {
  case TE_FP8_DT_BF16: step_w<SGD, TE_FP8_DT_BF16>(e, h, p.gsi); break;
  case TE_FP8_DT_F16: step_w<SGD, TE_FP8_DT_F16>(e, h, p.gsi); break;
  default: step_w<SGD, TE_FP8_DT_F32>(e, h, p.gsi); break;
  }
}

extern "C" __global__ void __launch_bounds__(OT) te_optim_adam(TE_KSIG(TE_OPTIM_STEP_PARAMS)) {
  te_pdl_enter();
  step<false>(p);
}
extern "C" __global__ void __launch_bounds__(OT) te_optim_sgd(TE_KSIG(TE_OPTIM_STEP_PARAMS)) {
  te_pdl_enter();
  step<true>(p);
}

// After every launch of a step that read its values from state: the step
// counts, unless found_inf skipped it.  One thread.
extern "C" __global__ void te_optim_commit(TE_KSIG(TE_OPTIM_COMMIT_PARAMS)) {
  te_pdl_enter();
  if (threadIdx.x == 0 && !(found_inf && *found_inf)) state->step += 1;
}

// ---- L2 norm ---------------------------------------------------------------------

// Sum of the block's 256 values in te_l2_tree256's order; the result is
// valid in thread 0.
static __device__ __forceinline__ double block_sum(double x) {
  __shared__ double ws[OT / 32];
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) x = x + __shfl_down_sync(0xffffffffu, x, off);
  if ((threadIdx.x & 31) == 0) ws[threadIdx.x >> 5] = x;
  __syncthreads();
  if (threadIdx.x < 32) {
    x = threadIdx.x < OT / 32 ? ws[threadIdx.x] : 0.0;
#pragma unroll
    for (int off = 4; off > 0; off >>= 1) x = x + __shfl_down_sync(0xffffffffu, x, off);
  }
  return x;
}

// Four of a thread's groups are loaded before any is added, so that several
// loads are in flight; the additions keep the documented order.
template <int DT>
static __device__ __forceinline__ double l2_chunk(const te_l2_entry &e, uint64_t start, uint64_t end) {
  double acc = 0.0;
#pragma unroll 1
  for (int s0 = 0; s0 < TE_RED_STEPS; s0 += 4) {
    float x[4][4];
    int k[4];
#pragma unroll
    for (int s = 0; s < 4; s++) {
      const uint64_t i = start + ((uint64_t)(s0 + s) * OT + threadIdx.x) * TE_OPTIM_VEC;
      k[s] = i >= end ? 0 : end - i < 4 ? (int)(end - i) : 4;
#pragma unroll
      for (int q = 0; q < 4; q++) x[s][q] = 0.0f;
      if (e.vec && k[s] == 4) ld4v<DT>(e.x, i, x[s]);
      else ld4s<DT>(e.x, i, k[s], x[s]);
    }
#pragma unroll
    for (int s = 0; s < 4; s++)
#pragma unroll
      for (int q = 0; q < 4; q++)
        if (q < k[s]) acc = acc + te_l2_sq(x[s][q]);   // the square is exact: fused or not, same sum
  }
  return acc;
}

extern "C" __global__ void __launch_bounds__(OT) te_optim_l2_partial(TE_KSIG(TE_OPTIM_L2_PARTIAL_PARAMS)) {
  te_pdl_enter();
  const te_l2_entry &e = p.e[find_entry(p)];
  const uint64_t start = (uint64_t)(blockIdx.x - e.block0) * TE_RED_CHUNK;
  const uint64_t end = e.n - start < TE_RED_CHUNK ? e.n : start + TE_RED_CHUNK;
  double acc;
  switch (e.dt) {
  case TE_FP8_DT_BF16: acc = l2_chunk<TE_FP8_DT_BF16>(e, start, end); break;
  case TE_FP8_DT_F16: acc = l2_chunk<TE_FP8_DT_F16>(e, start, end); break;
  default: acc = l2_chunk<TE_FP8_DT_F32>(e, start, end); break;
  }
  double s = block_sum(acc);
  if (threadIdx.x == 0) p.partial[p.base + blockIdx.x] = s;
}

extern "C" __global__ void __launch_bounds__(OT) te_optim_l2_final(TE_KSIG(TE_OPTIM_L2_FINAL_PARAMS)) {
  te_pdl_enter();
  double acc = 0.0;
  for (unsigned i = threadIdx.x; i < nparts; i += OT) acc = acc + partial[i];
  double s = block_sum(acc);
  if (threadIdx.x == 0) {
    *norm = (float)sqrt(s);
    if (found_inf && !te_l2_finite(s)) *found_inf = 1;
    if (scale) *scale = te_clip_scale(*norm, max_norm);
  }
}

// ---- unscale ------------------------------------------------------------------------

// All of a thread's groups loaded, then converted and stored (measured
// faster than a load-store loop for F32, and than 16384-element chunks).
template <int IDT, int ODT>
static __device__ __forceinline__ int unscale_chunk(const te_unscale_entry &e, float s) {
  const uint64_t start = (uint64_t)(blockIdx.x - e.block0) * TE_OPTIM_CHUNK;
  const uint64_t end = e.n - start < TE_OPTIM_CHUNK ? e.n : start + TE_OPTIM_CHUNK;
  int bad = 0;
#pragma unroll 1
  for (int t0 = 0; t0 < TE_OPTIM_STEPS; t0 += 4) {
    float x[4][4];
    int k[4];
#pragma unroll
    for (int t = 0; t < 4; t++) {
      const uint64_t i = start + ((uint64_t)(t0 + t) * OT + threadIdx.x) * TE_OPTIM_VEC;
      k[t] = i >= end ? 0 : end - i < 4 ? (int)(end - i) : 4;
#pragma unroll
      for (int q = 0; q < 4; q++) x[t][q] = 0.0f;
      if (e.vec && k[t] == 4) ld4v<IDT>(e.in, i, x[t]);
      else ld4s<IDT>(e.in, i, k[t], x[t]);
    }
#pragma unroll
    for (int t = 0; t < 4; t++) {
      const uint64_t i = start + ((uint64_t)(t0 + t) * OT + threadIdx.x) * TE_OPTIM_VEC;
#pragma unroll
      for (int q = 0; q < 4; q++) {
        x[t][q] = te_mul_rn(x[t][q], s);
        if (q < k[t]) bad |= te_unscale_bad(x[t][q], ODT);
      }
      if (k[t] == 0) continue;
      const bool vec = e.vec && k[t] == 4;
      if constexpr (ODT == TE_FP8_DT_F32) st4f((float *)e.out, i, vec, k[t], x[t]);
      else st4w<ODT>(e.out, i, vec, k[t], x[t]);
    }
  }
  return bad;
}

template <int IDT>
static __device__ __forceinline__ int unscale_o(const te_unscale_entry &e, float s) {
  switch (e.out_dt) {
  case TE_FP8_DT_BF16: return unscale_chunk<IDT, TE_FP8_DT_BF16>(e, s);
  case TE_FP8_DT_F16: return unscale_chunk<IDT, TE_FP8_DT_F16>(e, s);
  default: return unscale_chunk<IDT, TE_FP8_DT_F32>(e, s);
  }
}

extern "C" __global__ void __launch_bounds__(OT) te_optim_unscale(TE_KSIG(TE_OPTIM_UNSCALE_PARAMS)) {
  te_pdl_enter();
  const te_unscale_entry &e = p.e[find_entry(p)];
  const float s = *p.scale;
  int bad;
  switch (e.in_dt) {
  case TE_FP8_DT_BF16: bad = unscale_o<TE_FP8_DT_BF16>(e, s); break;
  case TE_FP8_DT_F16: bad = unscale_o<TE_FP8_DT_F16>(e, s); break;
  default: bad = unscale_o<TE_FP8_DT_F32>(e, s); break;
  }
  if (p.found_inf) {   // uniform: every thread of the block takes the barrier
    if (__syncthreads_or(bad) && threadIdx.x == 0) *p.found_inf = 1;
  }
}
