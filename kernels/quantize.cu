// SPDX-License-Identifier: Apache-2.0
// quantize.cu -- FP8 quantize, dequantize and amax kernels for Hopper.
// Element math: kernels/common/fp8.h and quantize.h (shared with the vdev
// implementations in libtecore/fp8/quantize.c, which give the same bytes).
//
// (The amax reset and the scale from an amax, which every family writing
// FP8 needs, are kernels/fp8_scale.cu.)  Kernels and the shapes they handle:
//   te_fp8_quantize_pt     per-tensor, rowwise: n elements of f32/f16/bf16 ->
//                          e4m3/e5m2, any n; warp-contiguous: each load of a
//                          warp reads 512 contiguous bytes (16 bytes a lane)
//                          when both pointers are 16-byte aligned, else one
//                          element per step; grid-stride.
//   te_fp8_amax            max |x| over n elements, same loop shape.
//   te_fp8_quantize_mx_*   MXFP8 (one kernel per input type: f32, bf16, f16),
//                          rows x cols, any shape: one 32x128 tile per warp,
//                          128-thread blocks, 16 columns per thread; rowwise
//                          (1x32 along a row) and/or columnwise (32x1 down a
//                          column) outputs, both in [rows][cols] layout.
//   te_fp8_quantize_blk    1x128, 128x128 or per-tensor scales, rows x cols,
//                          128x128 tiles, 256 threads: rowwise and/or the
//                          transposed columnwise output through shared memory.
//   te_fp8_dequantize      FP8 -> f32/f16/bf16, any mode, 8 columns a thread.
//   te_fp8_quantize_multi, te_fp8_amax_multi, te_fp8_amax_init_multi:
//                          up to TE_QMULTI_MAX per-tensor tensors in one launch.
// amax: per thread, then per warp (__reduce_max_sync), then one atomicMax of
// the float bits per block.  Every kernel returns at once when noop && *noop.
// Built without fast math and without flush-to-zero (the rounding of
// x * scale must be the host's).
#include "common/quantize.h"
#include "common/quantize_params.h"
#include "pdl.cuh"

#define QT 256   // threads per block of every kernel here

static __device__ __forceinline__ bool noop_set(const int *noop) { return noop && *noop; }

// Block-wide max of m, then one atomicMax into *amax (all threads of a
// block of up to 1024 threads call it).
static __device__ __noinline__ void block_amax(uint32_t m, unsigned *amax) {
  __shared__ uint32_t warp_max[32];
  m = __reduce_max_sync(0xffffffffu, m);
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x < 32) {
    uint32_t v = threadIdx.x < (blockDim.x >> 5) ? warp_max[threadIdx.x] : 0u;
    v = __reduce_max_sync(0xffffffffu, v);
    if (threadIdx.x == 0 && amax) atomicMax(amax, v);
  }
}

// 16 consecutive elements (chunk c) as floats; needs 16-byte alignment.
template <int IDT>
static __device__ __forceinline__ void load16(const void *__restrict__ in, uint64_t c, float v[16]) {
  if (IDT == TE_FP8_DT_F32) {
    const float4 *p = (const float4 *)in + c * 4;
#pragma unroll
    for (int k = 0; k < 4; k++) {
      float4 f = p[k];
      v[4 * k] = f.x, v[4 * k + 1] = f.y, v[4 * k + 2] = f.z, v[4 * k + 3] = f.w;
    }
  } else {
    const uint4 *p = (const uint4 *)in + c * 2;
    uint4 a = p[0], b = p[1];
    uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int k = 0; k < 8; k++) {
      if (IDT == TE_FP8_DT_BF16) {
        v[2 * k] = __uint_as_float(w[k] << 16);
        v[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
      } else {
        v[2 * k] = te_f16_to_f32((uint16_t)(w[k] & 0xffffu));
        v[2 * k + 1] = te_f16_to_f32((uint16_t)(w[k] >> 16));
      }
    }
  }
}

// 8 values times s -> 8 FP8 bytes in a 64-bit word (element k in byte k).
template <int ODT>
static __device__ __forceinline__ uint2 quant8(const float v[8], float s) {
  uint32_t w[2];
#pragma unroll
  for (int k = 0; k < 2; k++) {
    uint32_t lo = te_f32x2_to_fp8x2(v[4 * k] * s, v[4 * k + 1] * s, ODT);
    uint32_t hi = te_f32x2_to_fp8x2(v[4 * k + 2] * s, v[4 * k + 3] * s, ODT);
    w[k] = lo | (hi << 16);
  }
  return make_uint2(w[0], w[1]);
}

// ---- per-tensor, flat, a chunk a lane (te_fp8_quantize_multi) --------------

// Quantizes in[0..n) with scale s, using blocks blk .. of nblk (grid-stride
// within the tensor's own blocks); returns this thread's max |x| bits.
template <int IDT, int ODT>
static __device__ __forceinline__ uint32_t quant_flat(const void *__restrict__ in,
                                                      uint8_t *__restrict__ out, uint64_t n,
                                                      float s, uint64_t blk, uint64_t nblk) {
  uint32_t m = 0;
  const bool vec = (((uintptr_t)in | (uintptr_t)out) & 15u) == 0;
  const uint64_t nchunks = vec ? n / 16 : 0;
  const uint64_t stride = nblk * QT;
  for (uint64_t c = blk * QT + threadIdx.x; c < nchunks; c += stride) {
    float v[16];
    load16<IDT>(in, c, v);
#pragma unroll
    for (int k = 0; k < 16; k++) m = te_max_u32(m, te_abs_bits(v[k]));
    uint2 a = quant8<ODT>(v, s), b = quant8<ODT>(v + 8, s);
    ((uint4 *)out)[c] = make_uint4(a.x, a.y, b.x, b.y);
  }
  for (uint64_t i = nchunks * 16 + blk * QT + threadIdx.x; i < n; i += stride) {
    float x = te_q_load(in, i, IDT);
    m = te_max_u32(m, te_abs_bits(x));
    out[i] = te_f32_to_fp8(x * s, ODT);
  }
  return m;
}

// ---- per-tensor, flat, warp-contiguous (te_fp8_quantize_pt, te_fp8_amax) ---
// The same elements as quant_flat, cut into tiles of NV x 32 16-byte vectors
// (NV vectors a lane: 32 bytes, 64 for f32), a warp a tile a step (tile =
// the warp's global index + step x the grid's warps); each load instruction
// of the warp reads 512 contiguous bytes: lane l takes the vectors l, l +
// 32, ... of the tile, all loads issued before the first conversion.  In
// quant_flat a lane's 32-byte chunk is two 16-byte loads, so each load
// instruction touches 32 sectors for half their bytes and L1 sees every
// sector twice (ncu: 10.5M theoretical L2 sectors against 6.3M ideal at
// 8192^2); here every instruction is 16 full sectors.  The last, partial
// tile goes chunk by chunk, the elements past the last chunk one by one,
// as in quant_flat.  (Measured on an H100 at 8192^2 bf16, delayed: this
// loop 0.069-0.070 ms, quant_flat 0.070, against a 0.067 ms copy floor;
// bulk asynchronous copies through shared memory, both ways or inward
// only, 0.073, and 64 bytes a lane with L1-bypassing loads 0.071:
// bench/2026-11-23.md, session 7.  Those loops are gone.)

// A 16-byte vector of IDT as V = 16 / element-size floats.
template <int IDT>
static __device__ __forceinline__ void unpack_vec(uint4 r, float *v) {
  const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int i = 0; i < 4; i++) {
    if (IDT == TE_FP8_DT_F32) {
      v[i] = __uint_as_float(w[i]);
    } else if (IDT == TE_FP8_DT_BF16) {
      v[2 * i] = __uint_as_float(w[i] << 16);
      v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    } else {
      v[2 * i] = te_f16_to_f32((uint16_t)(w[i] & 0xffffu));
      v[2 * i + 1] = te_f16_to_f32((uint16_t)(w[i] >> 16));
    }
  }
}

// Quantizes (out != NULL; else only the amax) in[0..n) with scale s; the
// grid's blocks blk of nblk.  Returns this thread's max |x| bits.
template <int IDT, int ODT>
static __device__ __forceinline__ uint32_t quant_flat_w(const void *__restrict__ in,
                                                        uint8_t *__restrict__ out, uint64_t n,
                                                        float s, uint64_t blk, uint64_t nblk) {
  constexpr int V = IDT == TE_FP8_DT_F32 ? 4 : 8;   // elements of a 16-byte vector
  constexpr int NV = 16 / V;                         // vectors a lane a step
  constexpr int ES = IDT == TE_FP8_DT_F32 ? 4 : 2;   // input element size
  constexpr uint64_t TC = 2 * NV * V;                // 16-element chunks of a tile
  uint32_t m = 0;
  const bool vec = (((uintptr_t)in | (uintptr_t)out) & 15u) == 0;
  const uint64_t nchunks = vec ? n / 16 : 0, ntiles = nchunks / TC;
  const unsigned lane = threadIdx.x & 31u;
  const uint64_t warps = nblk * (QT / 32);
  uint64_t t = (blk * QT + threadIdx.x) / 32;
  // this lane's first element of the tile, stepped a tile-turn at a time;
  // the vectors of a step are at constant offsets from it
  uint64_t e = t * TC * 16 + lane * V;
  const uint64_t estep = warps * TC * 16;
  for (; t < ntiles; t += warps, e += estep) {
    const char *ip = (const char *)in + e * ES;
    uint4 r[NV];
#pragma unroll
    for (int k = 0; k < NV; k++) r[k] = *(const uint4 *)(ip + k * 32 * V * ES);
#pragma unroll
    for (int k = 0; k < NV; k++) {
      float v[V];
      unpack_vec<IDT>(r[k], v);
#pragma unroll
      for (int i = 0; i < V; i++) m = te_max_u32(m, te_abs_bits(v[i]));
      if (!out) continue;
      uint8_t *o = out + e + k * 32 * V;
      if (V == 8) {
        *(uint2 *)o = quant8<ODT>(v, s);
      } else {
        const uint32_t lo = te_f32x2_to_fp8x2(v[0] * s, v[1 % V] * s, ODT);
        const uint32_t hi = te_f32x2_to_fp8x2(v[2 % V] * s, v[3 % V] * s, ODT);
        *(uint32_t *)o = lo | (hi << 16);
      }
    }
  }
  if (t == ntiles)   // this warp's turn is the partial tile (if any)
    for (uint64_t c = ntiles * TC + lane; c < nchunks; c += 32) {
      float v[16];
      load16<IDT>(in, c, v);
#pragma unroll
      for (int k = 0; k < 16; k++) m = te_max_u32(m, te_abs_bits(v[k]));
      if (!out) continue;
      uint2 a = quant8<ODT>(v, s), b = quant8<ODT>(v + 8, s);
      ((uint4 *)out)[c] = make_uint4(a.x, a.y, b.x, b.y);
    }
  for (uint64_t i = nchunks * 16 + blk * QT + threadIdx.x; i < n; i += nblk * QT) {
    float x = te_q_load(in, i, IDT);
    m = te_max_u32(m, te_abs_bits(x));
    if (out) out[i] = te_f32_to_fp8(x * s, ODT);
  }
  return m;
}

// Per-tensor quantize of in[0..n) by the blocks blk of nblk, with the
// warp-contiguous loop (WARP: te_fp8_quantize_pt) or a chunk a lane
// (te_fp8_quantize_multi, whose blocks are shared among the tensors).
template <int IDT, int ODT, bool WARP = false>
static __device__ void quant_pt(const void *in, void *out, uint64_t n, float *scale,
                                float *scale_inv, float *scale_inv_col, unsigned *amax,
                                int current, float eps, int pow2, uint64_t blk, uint64_t nblk) {
  float s = te_q_tensor_scale(current, scale, amax, eps, ODT, pow2);
  if (blk == 0 && threadIdx.x == 0) {
    float si = te_fp8_scale_inv(s);
    if (current) *scale = s;
    if (scale_inv) *scale_inv = si;
    if (scale_inv_col) *scale_inv_col = si;
  }
  uint32_t m = WARP ? quant_flat_w<IDT, ODT>(in, (uint8_t *)out, n, s, blk, nblk)
                    : quant_flat<IDT, ODT>(in, (uint8_t *)out, n, s, blk, nblk);
  if (!current && amax) block_amax(m, amax);
}
template <int IDT, int ODT>
static __device__ void quant_pt_w(const void *in, void *out, uint64_t n, float *scale,
                                  float *scale_inv, float *scale_inv_col, unsigned *amax,
                                  int current, float eps, int pow2, uint64_t blk, uint64_t nblk) {
  quant_pt<IDT, ODT, true>(in, out, n, scale, scale_inv, scale_inv_col, amax, current, eps, pow2,
                           blk, nblk);
}

#define DISPATCH_IO(in_dt, out_dt, FN, ...)                                              \
  do {                                                                                  \
    if (out_dt == TE_FP8_DT_E4M3) {                                                     \
      if (in_dt == TE_FP8_DT_F32) FN<TE_FP8_DT_F32, TE_FP8_DT_E4M3>(__VA_ARGS__);        \
      else if (in_dt == TE_FP8_DT_BF16) FN<TE_FP8_DT_BF16, TE_FP8_DT_E4M3>(__VA_ARGS__); \
      else FN<TE_FP8_DT_F16, TE_FP8_DT_E4M3>(__VA_ARGS__);                               \
    } else {                                                                            \
      if (in_dt == TE_FP8_DT_F32) FN<TE_FP8_DT_F32, TE_FP8_DT_E5M2>(__VA_ARGS__);        \
      else if (in_dt == TE_FP8_DT_BF16) FN<TE_FP8_DT_BF16, TE_FP8_DT_E5M2>(__VA_ARGS__); \
      else FN<TE_FP8_DT_F16, TE_FP8_DT_E5M2>(__VA_ARGS__);                               \
    }                                                                                   \
  } while (0)

// Held to 32 registers, so that a grid of 8 blocks an SM is one resident
// wave (the loop took 40 unbounded: 6 blocks).
extern "C" __global__ void __launch_bounds__(QT, 8)
te_fp8_quantize_pt(TE_KSIG(TE_FP8_QUANTIZE_PT_PARAMS)) {
  te_pdl_enter();
  if (noop_set(noop)) return;
  DISPATCH_IO(in_dt, out_dt, quant_pt_w, in, out, n, scale, scale_inv, scale_inv_col, amax,
              current, eps, pow2, blockIdx.x, gridDim.x);
}

// ---- amax -------------------------------------------------------------------

// A chunk a lane (te_fp8_amax_multi).
template <int IDT>
static __device__ __forceinline__ uint32_t amax_flat(const void *__restrict__ in, uint64_t n,
                                                     uint64_t blk, uint64_t nblk) {
  uint32_t m = 0;
  const bool vec = ((uintptr_t)in & 15u) == 0;
  const uint64_t nchunks = vec ? n / 16 : 0;
  const uint64_t stride = nblk * QT;
  for (uint64_t c = blk * QT + threadIdx.x; c < nchunks; c += stride) {
    float v[16];
    load16<IDT>(in, c, v);
#pragma unroll
    for (int k = 0; k < 16; k++) m = te_max_u32(m, te_abs_bits(v[k]));
  }
  for (uint64_t i = nchunks * 16 + blk * QT + threadIdx.x; i < n; i += stride)
    m = te_max_u32(m, te_abs_bits(te_q_load(in, i, IDT)));
  return m;
}

static __device__ __forceinline__ uint32_t amax_any(const void *in, uint64_t n, int dt,
                                                    uint64_t blk, uint64_t nblk) {
  if (dt == TE_FP8_DT_F32) return amax_flat<TE_FP8_DT_F32>(in, n, blk, nblk);
  if (dt == TE_FP8_DT_BF16) return amax_flat<TE_FP8_DT_BF16>(in, n, blk, nblk);
  return amax_flat<TE_FP8_DT_F16>(in, n, blk, nblk);
}

// The warp-contiguous loop with no output (te_fp8_amax, the current-scaling
// quantize's first pass: the same grid as the quantize).
static __device__ __forceinline__ uint32_t amax_any_w(const void *in, uint64_t n, int dt,
                                                      uint64_t blk, uint64_t nblk) {
  if (dt == TE_FP8_DT_F32)
    return quant_flat_w<TE_FP8_DT_F32, TE_FP8_DT_E4M3>(in, NULL, n, 1.0f, blk, nblk);
  if (dt == TE_FP8_DT_BF16)
    return quant_flat_w<TE_FP8_DT_BF16, TE_FP8_DT_E4M3>(in, NULL, n, 1.0f, blk, nblk);
  return quant_flat_w<TE_FP8_DT_F16, TE_FP8_DT_E4M3>(in, NULL, n, 1.0f, blk, nblk);
}

extern "C" __global__ void __launch_bounds__(QT, 8) te_fp8_amax(TE_KSIG(TE_FP8_AMAX_PARAMS)) {
  te_pdl_enter();
  if (noop_set(noop)) return;
  block_amax(amax_any_w(in, n, dt, blockIdx.x, gridDim.x), amax);
}

// ---- multi-tensor -------------------------------------------------------------

// The entry whose blocks include blockIdx.x (entries are in block order).
static __device__ __forceinline__ int multi_entry(const te_qmulti_params &p) {
  int t = 0;
  while (t + 1 < p.count && blockIdx.x >= p.e[t + 1].block0) t++;
  return t;
}

extern "C" __global__ void __launch_bounds__(QT) te_fp8_quantize_multi(TE_KSIG(TE_FP8_QMULTI_PARAMS)) {
  te_pdl_enter();
  if (noop_set(p.noop)) return;
  const te_qmulti_entry &e = p.e[multi_entry(p)];
  DISPATCH_IO(e.in_dt, e.out_dt, quant_pt, e.in, e.out, e.n, e.scale, e.scale_inv,
              e.scale_inv_col, e.amax, p.current, e.eps, e.pow2, blockIdx.x - e.block0, e.nblocks);
}

extern "C" __global__ void __launch_bounds__(QT) te_fp8_amax_multi(TE_KSIG(TE_FP8_QMULTI_PARAMS)) {
  te_pdl_enter();
  if (noop_set(p.noop)) return;
  const te_qmulti_entry &e = p.e[multi_entry(p)];
  block_amax(amax_any(e.in, e.n, e.in_dt, blockIdx.x - e.block0, e.nblocks), e.amax);
}

extern "C" __global__ void te_fp8_amax_init_multi(TE_KSIG(TE_FP8_QMULTI_PARAMS)) {
  te_pdl_enter();
  if (noop_set(p.noop)) return;
  if (blockIdx.x == 0 && (int)threadIdx.x < p.count) *p.e[threadIdx.x].amax = 0u;
}

// ---- MXFP8 ------------------------------------------------------------------------
// One warp per 32 x 128 tile, no block barrier: lane l works on columns
// (l%8)*16 .. +16 of rows l/8 + 4*step, step 0..7, so a warp step reads
// four 256-byte row segments and writes four 128-byte ones (32 x 64 tiles,
// with 64-byte store segments, measured slower on an H100).  A row block of
// 32 columns is a lane and its neighbour (shuffle over lane bit 0); a
// column block is the 8 steps of a lane and the 4 lanes with the same l%8
// (shuffles over lane bits 3-4).  Pass 1 writes the rowwise output
// and finds the column amaxes; pass 2 writes the columnwise output from the
// tile pass 1 staged in shared memory.  Both outputs are [rows][cols].

// Raw storage words of 8 elements: 4 for 16-bit types, 8 for f32.
template <int IDT> struct raw8 { uint32_t w[IDT == TE_FP8_DT_F32 ? 8 : 4]; };

// Loads 8 elements of row r from column c0 as raw words (zeros, which are
// +0 in every type, past the edges).
template <int IDT>
static __device__ __forceinline__ raw8<IDT> load_raw8(const void *__restrict__ in, uint64_t rows,
                                                      uint64_t cols, uint64_t r, uint64_t c0,
                                                      bool vec_ok) {
  raw8<IDT> x;
  if (r < rows && c0 + 8 <= cols && vec_ok) {
    const uint4 *p = (const uint4 *)((const char *)in + (r * cols + c0) * (IDT == TE_FP8_DT_F32 ? 4 : 2));
    uint4 a = p[0];
    x.w[0] = a.x, x.w[1] = a.y, x.w[2] = a.z, x.w[3] = a.w;
    if (IDT == TE_FP8_DT_F32) {
      uint4 b = p[1];
      x.w[4 % (sizeof x.w / 4)] = b.x, x.w[5 % (sizeof x.w / 4)] = b.y;
      x.w[6 % (sizeof x.w / 4)] = b.z, x.w[7 % (sizeof x.w / 4)] = b.w;
    }
    return x;
  }
#pragma unroll
  for (int k = 0; k < 8; k++) {
    const bool in_range = r < rows && c0 + k < cols;
    if (IDT == TE_FP8_DT_F32) {
      x.w[k % (sizeof x.w / 4)] = in_range ? ((const uint32_t *)in)[r * cols + c0 + k] : 0u;
    } else {
      uint32_t h = in_range ? ((const uint16_t *)in)[r * cols + c0 + k] : 0u;
      if (k & 1) x.w[k / 2] |= h << 16;
      else x.w[k / 2] = h;
    }
  }
  return x;
}

template <int IDT>
static __device__ __forceinline__ void unpack8(const raw8<IDT> &x, float v[8]) {
#pragma unroll
  for (int k = 0; k < 8; k++) {
    if (IDT == TE_FP8_DT_F32) {
      v[k] = __uint_as_float(x.w[k % (sizeof x.w / 4)]);
    } else {
      uint32_t h = (x.w[k / 2] >> (16 * (k & 1))) & 0xffffu;
      v[k] = IDT == TE_FP8_DT_BF16 ? __uint_as_float(h << 16) : te_f16_to_f32((uint16_t)h);
    }
  }
}

// Stores 8 FP8 bytes of row r at column c0 (only those inside the tensor).
static __device__ __forceinline__ void store_row8(uint8_t *out, uint64_t rows, uint64_t cols,
                                                  uint64_t r, uint64_t c0, bool vec_ok, uint2 q) {
  if (r >= rows) return;
  if (c0 + 8 <= cols && vec_ok) {
    *(uint2 *)(out + r * cols + c0) = q;
    return;
  }
  uint64_t w = ((uint64_t)q.y << 32) | q.x;
  for (int k = 0; k < 8 && c0 + k < cols; k++) out[r * cols + c0 + k] = (uint8_t)(w >> (8 * k));
}

template <int ODT>
static __device__ __forceinline__ uint2 quant8_each(const float v[8], const float s[8]) {
  uint32_t w[2];
#pragma unroll
  for (int k = 0; k < 2; k++) {
    uint32_t lo = te_f32x2_to_fp8x2(v[4 * k] * s[4 * k], v[4 * k + 1] * s[4 * k + 1], ODT);
    uint32_t hi = te_f32x2_to_fp8x2(v[4 * k + 2] * s[4 * k + 2], v[4 * k + 3] * s[4 * k + 3], ODT);
    w[k] = lo | (hi << 16);
  }
  return make_uint2(w[0], w[1]);
}

// Stores 16 FP8 bytes of row r at column c0 (only those inside the tensor).
static __device__ __forceinline__ void store_row16(uint8_t *out, uint64_t rows, uint64_t cols,
                                                   uint64_t r, uint64_t c0, bool vec_ok, uint2 a,
                                                   uint2 b) {
  if (r < rows && c0 + 16 <= cols && vec_ok) {
    *(uint4 *)(out + r * cols + c0) = make_uint4(a.x, a.y, b.x, b.y);
    return;
  }
  store_row8(out, rows, cols, r, c0, false, a);
  store_row8(out, rows, cols, r, c0 + 8, false, b);
}

// The MXFP8 kernel's blocks: 4 warps, each with 8 KB of shared memory
// where pass 1 leaves its lanes' raw 16-bit input words for pass 2 (f32
// input, 16 KB a warp, is re-read from L1/L2 instead).
#define MX_THREADS 128
struct mx_stage {
  uint4 w[MX_THREADS / 32][8][2][32];   // [warp][step][half][lane]
};

// The kernel's arguments, gathered (kernels/common/quantize_params.h).
struct mx_k {
  TE_KMEMBERS(TE_FP8_QUANTIZE_MX_PARAMS)
};

template <int IDT, int ODT>
static __device__ void quant_mx(const mx_k &k, mx_stage &stage) {
  const void *__restrict__ in = k.in;
  const uint64_t rows = k.rows, cols = k.cols;
  uint8_t *__restrict__ out_row = (uint8_t *)k.out_row;
  uint8_t *__restrict__ out_col = (uint8_t *)k.out_col;
  uint8_t *__restrict__ s_row = (uint8_t *)k.s_row;
  uint8_t *__restrict__ s_col = (uint8_t *)k.s_col;
  unsigned *amax = k.amax;
  constexpr bool staged = IDT != TE_FP8_DT_F32;
  uint4(*const stw)[2][32] = stage.w[threadIdx.x >> 5];
  const uint64_t ntc = (cols + TE_MX_TILE_C - 1) / TE_MX_TILE_C;
  const uint64_t ntiles = ntc * ((rows + TE_MX_TILE_R - 1) / TE_MX_TILE_R);
  const uint64_t nrb = (cols + 31) / 32;   // row blocks per row
  const int lane = threadIdx.x & 31, seg = lane & 7, rg = lane >> 3;
  const bool in_vec = ((uintptr_t)in & 15u) == 0 && (cols * (IDT == TE_FP8_DT_F32 ? 4 : 2)) % 16 == 0;
  const bool out_vec = (((uintptr_t)out_row | (uintptr_t)out_col) & 15u) == 0 && cols % 16 == 0;
  const bool s_vec = ((uintptr_t)s_col & 15u) == 0 && cols % 16 == 0;
  const uint64_t warp0 = (uint64_t)blockIdx.x * (MX_THREADS / 32) + (threadIdx.x >> 5);
  const uint64_t nwarps = (uint64_t)gridDim.x * (MX_THREADS / 32);
  uint32_t m = 0;
  for (uint64_t tile = warp0; tile < ntiles; tile += nwarps) {
    const uint64_t r0 = (tile / ntc) * TE_MX_TILE_R + rg;
    const uint64_t c0 = (tile % ntc) * TE_MX_TILE_C + seg * 16;
    // pass 1: rowwise output and the column amaxes
    uint32_t cm[16];
#pragma unroll
    for (int k = 0; k < 16; k++) cm[k] = 0;
#pragma unroll 4
    for (int st = 0; st < 8; st++) {
      const uint64_t r = r0 + 4 * st;
      float v[16];
      raw8<IDT> x0 = load_raw8<IDT>(in, rows, cols, r, c0, in_vec);
      raw8<IDT> x1 = load_raw8<IDT>(in, rows, cols, r, c0 + 8, in_vec);
      if (staged && out_col) {   // only this lane reads it back: no barrier
        stw[st][0][lane] = make_uint4(x0.w[0], x0.w[1], x0.w[2], x0.w[3 % (sizeof x0.w / 4)]);
        stw[st][1][lane] = make_uint4(x1.w[0], x1.w[1], x1.w[2], x1.w[3 % (sizeof x1.w / 4)]);
      }
      unpack8<IDT>(x0, v);
      unpack8<IDT>(x1, v + 8);
      uint32_t rm = 0;
#pragma unroll
      for (int k = 0; k < 16; k++) {
        uint32_t a = te_abs_bits(v[k]);
        cm[k] = te_max_u32(cm[k], a);
        rm = te_max_u32(rm, a);
      }
      m = te_max_u32(m, rm);
      if (out_row) {   // a row block of 32 is this lane and its neighbour
        rm = te_max_u32(rm, __shfl_xor_sync(0xffffffffu, rm, 1));
        const uint8_t e8 = te_e8m0_from_amax(__uint_as_float(rm), ODT);
        const float mult = te_e8m0_quant_mult(e8);
        store_row16(out_row, rows, cols, r, c0, out_vec, quant8<ODT>(v, mult), quant8<ODT>(v + 8, mult));
        if ((seg & 1) == 0 && r < rows && c0 < cols) s_row[r * nrb + c0 / 32] = e8;
      }
    }
    // pass 2: the columnwise output, from the staged tile
    if (out_col) {
      float mult[16];
      uint32_t e4[4] = {0, 0, 0, 0};
#pragma unroll
      for (int k = 0; k < 16; k++) {
        cm[k] = te_max_u32(cm[k], __shfl_xor_sync(0xffffffffu, cm[k], 8));
        cm[k] = te_max_u32(cm[k], __shfl_xor_sync(0xffffffffu, cm[k], 16));
        const uint8_t e8 = te_e8m0_from_amax(__uint_as_float(cm[k]), ODT);
        e4[k / 4] |= (uint32_t)e8 << (8 * (k % 4));
        mult[k] = te_e8m0_quant_mult(e8);
      }
#pragma unroll 4
      for (int st = 0; st < 8; st++) {
        const uint64_t r = r0 + 4 * st;
        float v[16];
        raw8<IDT> x0, x1;
        if (staged) {
          uint4 a = stw[st][0][lane], b = stw[st][1][lane];
          x0.w[0] = a.x, x0.w[1] = a.y, x0.w[2] = a.z, x0.w[3 % (sizeof x0.w / 4)] = a.w;
          x1.w[0] = b.x, x1.w[1] = b.y, x1.w[2] = b.z, x1.w[3 % (sizeof x1.w / 4)] = b.w;
        } else {
          x0 = load_raw8<IDT>(in, rows, cols, r, c0, in_vec);
          x1 = load_raw8<IDT>(in, rows, cols, r, c0 + 8, in_vec);
        }
        unpack8<IDT>(x0, v);
        unpack8<IDT>(x1, v + 8);
        store_row16(out_col, rows, cols, r, c0, out_vec, quant8_each<ODT>(v, mult),
                    quant8_each<ODT>(v + 8, mult + 8));
      }
      if (rg == 0 && c0 < cols) {   // r0 is the tile's first row here
        uint8_t *dst = s_col + (r0 / 32) * cols + c0;
        if (c0 + 16 <= cols && s_vec) {
          *(uint4 *)dst = make_uint4(e4[0], e4[1], e4[2], e4[3]);
        } else {
          for (int k = 0; k < 16 && c0 + k < cols; k++) dst[k] = (uint8_t)(e4[k / 4] >> (8 * (k % 4)));
        }
      }
    }
  }
  block_amax(m, amax);
}

// One kernel per input type (te_fp8_quantize_mx_f32 / _bf16 / _f16): each
// gets the registers of its own path, which a kernel holding all three
// would not (it spills).  in_dt is kept so the three share one parameter
// list (and one vdev function).
#define MX_KERNEL(suffix, IDT)                                                              \
  extern "C" __global__ void __launch_bounds__(MX_THREADS, 6) te_fp8_quantize_mx_##suffix(  \
      TE_KSIG(TE_FP8_QUANTIZE_MX_PARAMS)) {                                                 \
    te_pdl_enter();                                                                         \
    __shared__ mx_stage stage;                                                              \
    (void)in_dt;                                                                            \
    if (noop_set(noop)) return;                                                             \
    const mx_k k = {TE_KNAMES(TE_FP8_QUANTIZE_MX_PARAMS)};                                  \
    if (out_dt == TE_FP8_DT_E4M3)                                                           \
      quant_mx<IDT, TE_FP8_DT_E4M3>(k, stage);                                              \
    else                                                                                    \
      quant_mx<IDT, TE_FP8_DT_E5M2>(k, stage);                                              \
  }
MX_KERNEL(f32, TE_FP8_DT_F32)
MX_KERNEL(bf16, TE_FP8_DT_BF16)
MX_KERNEL(f16, TE_FP8_DT_F16)

// Loads 8 elements of row r from column c0 as floats (zeros past the edges).
template <int IDT>
static __device__ __forceinline__ void load_row8(const void *__restrict__ in, uint64_t rows,
                                                 uint64_t cols, uint64_t r, uint64_t c0,
                                                 bool vec_ok, float v[8]) {
  unpack8<IDT>(load_raw8<IDT>(in, rows, cols, r, c0, vec_ok), v);
}

// ---- block scaling (1x128, 128x128) and per-tensor with transpose -----------
// Tile 128 x 128; thread t works on columns (t%16)*8 .. +8 of rows t/16 +
// 16*p, p = 0..7.  Pass 1 finds the row, column and tile amaxes; pass 2
// re-reads the tile (from L2), writes the rowwise bytes directly and the
// columnwise bytes into a shared transposed tile, written out last.

struct blk_smem {
  // [col][row]: the transposed tile.  A row of 132 bytes (33 words) puts
  // the byte stores of a warp (16 columns 8 apart, for each k) in 4 banks
  // instead of 1.
  __align__(16) uint8_t tq[TE_BLK_TILE][TE_BLK_TILE + 4];
  uint32_t cred[16][TE_BLK_TILE];                            // partial column amaxes
  float row_s[TE_BLK_TILE], col_s[TE_BLK_TILE];              // row / column block scales
  uint32_t tile_m;                                           // the tile's amax bits
};

template <int IDT, int ODT>
static __device__ void quant_blk(const void *__restrict__ in, uint64_t rows, uint64_t cols,
                                 uint8_t *__restrict__ out_row, uint8_t *__restrict__ out_col,
                                 float *__restrict__ s_row, float *__restrict__ s_col, int mode,
                                 const float *scale, float eps, int pow2, unsigned *amax,
                                 blk_smem &sh) {
  uint8_t(*tq)[TE_BLK_TILE + 4] = sh.tq;
  uint32_t(*cred)[TE_BLK_TILE] = sh.cred;
  float *row_s = sh.row_s, *col_s = sh.col_s;
  uint32_t &tile_m = sh.tile_m;
  const float fmax = te_fp8_max(ODT);
  const uint64_t ntc = (cols + TE_BLK_TILE - 1) / TE_BLK_TILE;
  const uint64_t ntr = (rows + TE_BLK_TILE - 1) / TE_BLK_TILE;
  const int rr = threadIdx.x >> 4, seg = threadIdx.x & 15;
  const bool in_vec = ((uintptr_t)in & 15u) == 0 && (cols * (IDT == TE_FP8_DT_F32 ? 4 : 2)) % 16 == 0;
  const bool out_vec = ((uintptr_t)out_row & 7u) == 0 && cols % 8 == 0;
  const bool t_vec = ((uintptr_t)out_col & 15u) == 0 && rows % 16 == 0;
  const float ts = mode == TE_BLK_TENSOR ? *scale : 0.0f;
  if (mode == TE_BLK_TENSOR && blockIdx.x == 0 && threadIdx.x == 0) {
    if (s_row) *s_row = te_fp8_scale_inv(ts);
    if (s_col) *s_col = te_fp8_scale_inv(ts);
  }
  uint32_t m_all = 0;
  for (uint64_t tile = blockIdx.x; tile < ntr * ntc; tile += gridDim.x) {
    const uint64_t tr = tile / ntc, tc = tile % ntc;
    const uint64_t r0 = tr * TE_BLK_TILE, c0 = tc * TE_BLK_TILE + seg * 8;
    // pass 1: amaxes
    uint32_t cm[8] = {0, 0, 0, 0, 0, 0, 0, 0}, tm = 0;
    for (int p = 0; p < 8; p++) {
      const uint64_t r = r0 + rr + 16 * p;
      float v[8];
      load_row8<IDT>(in, rows, cols, r, c0, in_vec, v);
      uint32_t rm = 0;
#pragma unroll
      for (int k = 0; k < 8; k++) {
        uint32_t a = te_abs_bits(v[k]);
        cm[k] = te_max_u32(cm[k], a);
        rm = te_max_u32(rm, a);
      }
      tm = te_max_u32(tm, rm);
      // the row's max over the tile's 128 columns: 16 neighbouring lanes
#pragma unroll
      for (int o = 1; o < 16; o <<= 1) rm = te_max_u32(rm, __shfl_xor_sync(0xffffffffu, rm, o));
      if (seg == 0) row_s[rr + 16 * p] = te_fp8_current_scale(__uint_as_float(rm), eps, fmax, pow2);
    }
#pragma unroll
    for (int k = 0; k < 8; k++) cred[rr][seg * 8 + k] = cm[k];
    tm = __reduce_max_sync(0xffffffffu, tm);
    if (threadIdx.x == 0) tile_m = 0;
    __syncthreads();
    if ((threadIdx.x & 31) == 0) atomicMax(&tile_m, tm);
    if (threadIdx.x < TE_BLK_TILE) {
      uint32_t c = 0;
      for (int i = 0; i < 16; i++) c = te_max_u32(c, cred[i][threadIdx.x]);
      col_s[threadIdx.x] = te_fp8_current_scale(__uint_as_float(c), eps, fmax, pow2);
    }
    __syncthreads();
    m_all = te_max_u32(m_all, tile_m);
    const float tile_s = te_fp8_current_scale(__uint_as_float(tile_m), eps, fmax, pow2);
    // scale_inv outputs
    if (mode == TE_BLK_1X128) {
      if (out_row && threadIdx.x < TE_BLK_TILE && r0 + threadIdx.x < rows)
        s_row[(r0 + threadIdx.x) * ntc + tc] = te_fp8_scale_inv(row_s[threadIdx.x]);
      const uint64_t c = tc * TE_BLK_TILE + threadIdx.x;
      if (out_col && threadIdx.x < TE_BLK_TILE && c < cols)
        s_col[c * ntr + tr] = te_fp8_scale_inv(col_s[threadIdx.x]);
    } else if (mode == TE_BLK_128X128 && threadIdx.x == 0) {
      if (out_row) s_row[tr * ntc + tc] = te_fp8_scale_inv(tile_s);
      if (out_col) s_col[tc * ntr + tr] = te_fp8_scale_inv(tile_s);
    }
    // pass 2: quantize
    float cs[8];
#pragma unroll
    for (int k = 0; k < 8; k++)
      cs[k] = mode == TE_BLK_1X128 ? col_s[seg * 8 + k] : mode == TE_BLK_128X128 ? tile_s : ts;
    for (int p = 0; p < 8; p++) {
      const int tr_ = rr + 16 * p;
      const uint64_t r = r0 + tr_;
      float v[8];
      load_row8<IDT>(in, rows, cols, r, c0, in_vec, v);
      if (out_row) {
        float s = mode == TE_BLK_1X128 ? row_s[tr_] : mode == TE_BLK_128X128 ? tile_s : ts;
        store_row8(out_row, rows, cols, r, c0, out_vec, quant8<ODT>(v, s));
      }
      if (out_col) {
        uint2 q = quant8_each<ODT>(v, cs);
        uint64_t w = ((uint64_t)q.y << 32) | q.x;
#pragma unroll
        for (int k = 0; k < 8; k++) tq[seg * 8 + k][tr_] = (uint8_t)(w >> (8 * k));
      }
    }
    if (out_col) {
      __syncthreads();
      // the transposed tile: 128 columns of the input, each 128 bytes
      for (int k = threadIdx.x; k < TE_BLK_TILE * 8; k += QT) {
        const int col = k >> 3, part = k & 7;
        const uint64_t c = tc * TE_BLK_TILE + col, rs = r0 + part * 16;
        if (c >= cols || rs >= rows) continue;
        uint8_t *dst = out_col + c * rows + rs;
        if (t_vec && rs + 16 <= rows) {
          const uint32_t *w = (const uint32_t *)&tq[col][part * 16];   // 4-byte aligned
          *(uint4 *)dst = make_uint4(w[0], w[1], w[2], w[3]);
        } else {
          for (int i = 0; i < 16 && rs + i < rows; i++) dst[i] = tq[col][part * 16 + i];
        }
      }
    }
    __syncthreads();   // shared tiles are reused by the next tile
  }
  block_amax(m_all, amax);
}

extern "C" __global__ void __launch_bounds__(QT)
te_fp8_quantize_blk(TE_KSIG(TE_FP8_QUANTIZE_BLK_PARAMS)) {
  te_pdl_enter();
  __shared__ blk_smem sh;
  if (noop_set(noop)) return;
  DISPATCH_IO(in_dt, out_dt, quant_blk, in, rows, cols, (uint8_t *)out_row, (uint8_t *)out_col,
              s_row, s_col, mode, scale, eps, pow2, amax, sh);
}

// ---- dequantize -------------------------------------------------------------------
// Thread-steps of 8 columns of one row, grid-stride.

extern "C" __global__ void __launch_bounds__(QT)
te_fp8_dequantize(TE_KSIG(TE_FP8_DEQUANTIZE_PARAMS)) {
  te_pdl_enter();
  const uint8_t *q = (const uint8_t *)in;
  const uint64_t segs = (cols + 7) / 8, total = rows * segs;
  for (uint64_t u = (uint64_t)blockIdx.x * QT + threadIdx.x; u < total;
       u += (uint64_t)gridDim.x * QT) {
    const uint64_t r = u / segs, c0 = (u % segs) * 8;
    for (uint64_t c = c0; c < c0 + 8 && c < cols; c++) {
      float s = te_dq_scale(mode, scale_inv, r, c, rows, cols);
      te_q_store(out, r * cols + c, out_dt, te_fp8_to_f32(q[r * cols + c], in_dt) * s);
    }
  }
}
