// SPDX-License-Identifier: Apache-2.0
// rope.cu -- rotary position embedding of one [tokens][heads][head_dim]
// view into another (te/rope.h; libtecore/rope/rope.c launches one kernel
// per tensor, or one for both when K's heads continue Q's).
//
// x: F32/F16/BF16 with token and head strides; y: the same dtypes, or
// E4M3/E5M2 (y*scale, amax of y, scale_inv).  Blocks of TE_ROPE_THREADS
// threads take tokens blockIdx.x, + gridDim.x, ...
//
// te_rope_v8: a block takes a group of tokens (te_rope_group), computes
// each (token, frequency)'s cos/sin once into shared memory (dynamic,
// sized by the launcher) while its first loads are in flight, and its
// threads take work items of 8 frequencies of one head (HALVES: 8 elements
// of each half; INTERLEAVED: 16 contiguous elements), two 16-byte loads and
// stores, TE_ROPE_UNROLL items loaded before any is stored (in place, the
// compiler cannot hoist a load above a store itself).  The pass-through
// elements [rot, head_dim) move 8 at a time.  Needs 16 <= rot <= 2 *
// TE_ROPE_CS, rot % 16 == 0, head_dim and strides % 8 == 0, x 16-byte and
// y 16-byte (FP8: 8-byte) aligned.
// te_rope_v1: one pair (or pass-through element) a work item, any shape.
// The math (position, angle in double, rotation) is kernels/common/rope.h's.
#include "common/rope.h"
#include "ldst.cuh"
#include "pdl.cuh"

struct rope_k {
  TE_KMEMBERS(TE_ROPE_PARAMS)
};

__device__ __forceinline__ void rope_cs(const rope_k &a, long long pos, int i, int half, int inv,
                                        double f, float *c, float *s) {
  if (a.flags & TE_ROPE_TABLE)
    te_rope_cs_table(pos, i, half, te_rope_tab{a.cos_t, a.sin_t, a.table_len}, inv, c, s);
  else
    te_rope_cs(pos, f, inv, c, s);
}

// A position outside the caller's table: its rotated part is written as
// zeros (te_rope_cs_table) and, once a token, reported to *status.
__device__ __forceinline__ void rope_report(const rope_k &a, unsigned long long t, long long pos) {
  unsigned long long *st = a.status;
  if (st && te_rope_table_miss(a.flags, pos, a.table_len) && *(volatile unsigned long long *)st == 0) {
    *(volatile unsigned long long *)st = te_rope_status(t, pos);
    __threadfence_system();
  }
}

__device__ __forceinline__ float rope_scale(const rope_k &a, int dy) {
  return (te_dt_is_fp8(dy) && a.scale) ? *a.scale : 1.0f;
}

__device__ __forceinline__ void rope_fin(const rope_k &a, float am) {
  if (a.scale_inv && a.scale && blockIdx.x == 0 && threadIdx.x == 0)
    *a.scale_inv = te_fp8_scale_inv(*a.scale);
  if (a.amax) te_dev_block_amax_f(a.amax, am);
}

__device__ __forceinline__ void rope_st8(const rope_k &a, uint64_t i, int dy, float *v, float sc,
                                         float *am) {
#pragma unroll
  for (int k = 0; k < 8; k++) {
    *am = te_amax_f32(*am, v[k]);
    if (te_dt_is_fp8(dy)) v[k] = te_mul_rn(v[k], sc);
  }
  te_dev_st8(a.y, i, dy, v);
}

// Fills the group's cos/sin table: entry k * half + i for token t0 + k,
// frequency i; once a (token, frequency), shared by all heads.
__device__ __forceinline__ void rope_table(const rope_k &a, unsigned long long t0, int nt, int half,
                                           int inv, float *tc, float *ts) {
  for (int e = threadIdx.x; e < nt * half; e += blockDim.x) {
    const int k = e / half, i = e - k * half;
    const long long pos = te_rope_pos(t0 + k, a.positions, a.cu_seqlens, a.batch, a.seq_len);
    const double f = (a.flags & TE_ROPE_TABLE) ? 0.0 : te_rope_inv_freq(i, a.rot_dim, a.log2_theta);
    if (i == 0) rope_report(a, t0 + k, pos);
    rope_cs(a, pos, i, half, inv, f, &tc[e], &ts[e]);
  }
}

// What every item of a launch is stored with: the layout (interleaved,
// half the rotated width), y's dtype and its FP8 scale.
struct rope_out {
  int inter, half, dy;
  float sc;
};

// One item's rotation from loaded u, v (HALVES: 8 of each half;
// INTERLEAVED: 16 contiguous) with the table entries from ci.
__device__ __forceinline__ void rope_item(const rope_k &a, const rope_out &o, uint64_t yb,
                                          const float *c, const float *s, float *u, float *v,
                                          float *am) {
  const int inter = o.inter, half = o.half, dy = o.dy;
  const float sc = o.sc;
  float p[8], q[8];
  if (inter) {
#pragma unroll
    for (int k = 0; k < 4; k++) {
      te_rope_rot(u[2 * k], u[2 * k + 1], c[k], s[k], &p[2 * k], &p[2 * k + 1]);
      te_rope_rot(v[2 * k], v[2 * k + 1], c[k + 4], s[k + 4], &q[2 * k], &q[2 * k + 1]);
    }
    rope_st8(a, yb, dy, p, sc, am);
    rope_st8(a, yb + 8, dy, q, sc, am);
  } else {
#pragma unroll
    for (int k = 0; k < 8; k++) te_rope_rot(u[k], v[k], c[k], s[k], &p[k], &q[k]);
    rope_st8(a, yb, dy, p, sc, am);
    rope_st8(a, yb + half, dy, q, sc, am);
  }
}

// Groups of te_rope_group() tokens, blockIdx.x, + gridDim.x, ...: the
// block fills the group's cos/sin table (shared memory), then each thread
// loads a batch of U items (128 bytes of x) before it rotates and stores
// any, so the loads stay in flight together even when y is x.
// 8 elements of x kept as loaded (F32: two quads; 16-bit: one), widened
// when used: a batch's loads are all issued before the first is waited on.
template <int DX>
__device__ __forceinline__ void rope_ldraw(const void *x, uint64_t i, uint4 *r) {
  if constexpr (DX == TE_FP8_DT_F32) {
    const uint4 *q = (const uint4 *)((const float *)x + i);
    r[0] = q[0];
    r[1] = q[1];
  } else {
    r[0] = *(const uint4 *)((const uint16_t *)x + i);
  }
}
template <int DX>
__device__ __forceinline__ void rope_unpack(const uint4 *r, float *v) {
  if constexpr (DX == TE_FP8_DT_F32) {
    const uint32_t w[8] = {r[0].x, r[0].y, r[0].z, r[0].w, r[1].x, r[1].y, r[1].z, r[1].w};
#pragma unroll
    for (int k = 0; k < 8; k++) v[k] = __uint_as_float(w[k]);
  } else {
    te_dev_unpack8t<DX>(r[0], v);
  }
}

template <int DX>
__device__ __forceinline__ void rope_v8(const rope_k &a, float *tc, float *ts) {
  const int dy = TE_ROPE_DT(a.dtypes, 1);
  const int inter = a.flags & TE_ROPE_INTERLEAVED, inv = (a.flags & TE_ROPE_INVERSE) != 0;
  const int half = a.rot_dim / 2, nfg = a.rot_dim / 16, npass = (a.head_dim - a.rot_dim) / 8;
  const int per_tok = nfg * a.heads, G = te_rope_group(a.heads, a.rot_dim);
  const float sc = rope_scale(a, dy);
  constexpr int U = DX == TE_FP8_DT_F32 ? TE_ROPE_UNROLL / 2 : TE_ROPE_UNROLL;  // 128 B a thread
  float am = 0.0f;
  for (unsigned long long t0 = (unsigned long long)blockIdx.x * G; t0 < a.tokens;
       t0 += (unsigned long long)gridDim.x * G) {
    const int nt = (int)(a.tokens - t0 < (unsigned long long)G ? a.tokens - t0 : G);
    const int items = nt * per_tok;
    __syncthreads();  // the previous group's readers are done with the table
    // b0 is the same in every thread (the barrier inside is reached by all)
    for (int b0 = 0; b0 < items; b0 += U * blockDim.x) {
      uint4 u[U][2], v[U][2];
      uint64_t yb[U];
      int cb[U];
#pragma unroll
      for (int r = 0; r < U; r++) {
        const int w = b0 + threadIdx.x + r * blockDim.x;
        cb[r] = -1;
        if (w >= items) continue;
        const int k = w / per_tok, hw = w - k * per_tok, h = hw / nfg, i0 = (hw - h * nfg) * 8;
        const unsigned long long t = t0 + k;
        const uint64_t xb = t * a.x_ts + (uint64_t)h * a.x_hs + (inter ? 2 * i0 : i0);
        rope_ldraw<DX>(a.x, xb, u[r]);
        rope_ldraw<DX>(a.x, xb + (inter ? 8 : half), v[r]);
        yb[r] = t * a.y_ts + (uint64_t)h * a.y_hs + (inter ? 2 * i0 : i0);
        cb[r] = k * half + i0;
      }
      if (b0 == 0) {  // the table's math runs while the first batch's loads are in flight
        rope_table(a, t0, nt, half, inv, tc, ts);
        __syncthreads();
      }
#pragma unroll
      for (int r = 0; r < U; r++) {
        if (cb[r] < 0) continue;
        float fu[8], fv[8];
        rope_unpack<DX>(u[r], fu);
        rope_unpack<DX>(v[r], fv);
        rope_item(a, rope_out{inter, half, dy, sc}, yb[r], tc + cb[r], ts + cb[r], fu, fv, &am);
      }
    }
    if (!(a.flags & TE_ROPE_INPLACE)) {
      for (int w = threadIdx.x; w < nt * npass * a.heads; w += blockDim.x) {
        const int k = w / (npass * a.heads), hw = w - k * npass * a.heads;
        const int h = hw / npass, j = a.rot_dim + (hw - h * npass) * 8;
        const unsigned long long t = t0 + k;
        float u[8];
        te_dev_ld8t<DX>(a.x, t * a.x_ts + (uint64_t)h * a.x_hs + j, u);
        rope_st8(a, t * a.y_ts + (uint64_t)h * a.y_hs + j, dy, u, sc, &am);
      }
    }
  }
  rope_fin(a, am);
}

// x's dtype at compile time: the loads of a batch stay in flight together
// (a run-time dtype branch would make each wait for its conversion).
extern "C" __global__ void __launch_bounds__(TE_ROPE_THREADS) te_rope_v8(TE_KSIG(TE_ROPE_PARAMS)) {
  te_pdl_enter();
  const rope_k a = {TE_KNAMES(TE_ROPE_PARAMS)};
  extern __shared__ float rope_cs_tab[];  // cos then sin, te_rope_group * rot / 2 each
  float *tc = rope_cs_tab, *ts = rope_cs_tab + te_rope_group(a.heads, a.rot_dim) * (a.rot_dim / 2);
  const int dx = TE_ROPE_DT(a.dtypes, 0);
  if (dx == TE_FP8_DT_BF16) rope_v8<TE_FP8_DT_BF16>(a, tc, ts);
  else if (dx == TE_FP8_DT_F16) rope_v8<TE_FP8_DT_F16>(a, tc, ts);
  else rope_v8<TE_FP8_DT_F32>(a, tc, ts);
}

__device__ __forceinline__ void rope_st1(const rope_k &a, uint64_t i, int dy, float v, float sc,
                                         float *am) {
  *am = te_amax_f32(*am, v);
  te_st(a.y, i, dy, te_dt_is_fp8(dy) ? te_mul_rn(v, sc) : v);
}

extern "C" __global__ void __launch_bounds__(TE_ROPE_THREADS) te_rope_v1(TE_KSIG(TE_ROPE_PARAMS)) {
  te_pdl_enter();
  const rope_k a = {TE_KNAMES(TE_ROPE_PARAMS)};
  const int dx = TE_ROPE_DT(a.dtypes, 0), dy = TE_ROPE_DT(a.dtypes, 1);
  const int inter = a.flags & TE_ROPE_INTERLEAVED, inv = (a.flags & TE_ROPE_INVERSE) != 0;
  const int half = a.rot_dim / 2, npass = a.head_dim - a.rot_dim;
  const float sc = rope_scale(a, dy);
  float am = 0.0f;
  for (unsigned long long t = blockIdx.x; t < a.tokens; t += gridDim.x) {
    const long long pos = te_rope_pos(t, a.positions, a.cu_seqlens, a.batch, a.seq_len);
    if (threadIdx.x == 0) rope_report(a, t, pos);
    for (int w = threadIdx.x; w < half * a.heads; w += blockDim.x) {
      const int h = w / half, i = w - h * half;
      float c, s, y1, y2;
      const double f = (a.flags & TE_ROPE_TABLE) ? 0.0 : te_rope_inv_freq(i, a.rot_dim, a.log2_theta);
      rope_cs(a, pos, i, half, inv, f, &c, &s);
      const uint64_t xb = t * a.x_ts + (uint64_t)h * a.x_hs, yb = t * a.y_ts + (uint64_t)h * a.y_hs;
      const int j1 = inter ? 2 * i : i, j2 = inter ? 2 * i + 1 : i + half;
      te_rope_rot(te_ld(a.x, xb + j1, dx), te_ld(a.x, xb + j2, dx), c, s, &y1, &y2);
      rope_st1(a, yb + j1, dy, y1, sc, &am);
      rope_st1(a, yb + j2, dy, y2, sc, &am);
    }
    if (!(a.flags & TE_ROPE_INPLACE)) {
      for (int w = threadIdx.x; w < npass * a.heads; w += blockDim.x) {
        const int h = w / npass, j = a.rot_dim + (w - h * npass);
        rope_st1(a, t * a.y_ts + (uint64_t)h * a.y_hs + j, dy,
                 te_ld(a.x, t * a.x_ts + (uint64_t)h * a.x_hs + j, dx), sc, &am);
      }
    }
  }
  rope_fin(a, am);
}
