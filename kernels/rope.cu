// SPDX-License-Identifier: Apache-2.0
// rope.cu -- rotary position embedding of one [tokens][heads][head_dim]
// view into another (te/rope.h; libtecore/rope/rope.c launches one kernel
// per tensor).
//
// x: F32/F16/BF16 with token and head strides; y: the same dtypes, or
// E4M3/E5M2 (y*scale, amax of y, scale_inv).  Blocks of TE_ROPE_THREADS
// threads take tokens blockIdx.x, + gridDim.x, ...
//
// te_rope_v8: a thread takes 8 frequencies of one head (HALVES: 8 elements
// of each half; INTERLEAVED: 16 contiguous elements), two 16-byte loads and
// stores; work item w = h * nfg + fg (nfg = rot/16 frequency groups), so a
// thread whose stride keeps fg (128 % nfg == 0) computes its cos/sin once
// a token and reuses it over its heads.  The pass-through elements
// [rot, head_dim) move 8 at a time.  Needs rot % 16 == 0, head_dim and
// strides % 8 == 0, x 16-byte and y 16-byte (FP8: 8-byte) aligned.
// te_rope_v1: one pair (or pass-through element) a work item, any shape.
// The math (position, angle in double, rotation) is kernels/common/rope.h's.
#include "common/rope.h"
#include "ldst.cuh"

struct rope_k {
  TE_KMEMBERS(TE_ROPE_PARAMS)
};

__device__ __forceinline__ void rope_cs(const rope_k &a, long long pos, int i, int half, int inv,
                                        double f, float *c, float *s) {
  if (a.flags & TE_ROPE_TABLE)
    te_rope_cs_table(pos, i, half, a.cos_t, a.sin_t, a.table_len, inv, c, s);
  else
    te_rope_cs(pos, f, inv, c, s);
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

extern "C" __global__ void __launch_bounds__(TE_ROPE_THREADS) te_rope_v8(TE_KSIG(TE_ROPE_PARAMS)) {
  const rope_k a = {TE_KNAMES(TE_ROPE_PARAMS)};
  const int dx = TE_ROPE_DT(a.dtypes, 0), dy = TE_ROPE_DT(a.dtypes, 1);
  const int inter = a.flags & TE_ROPE_INTERLEAVED, inv = (a.flags & TE_ROPE_INVERSE) != 0;
  const int half = a.rot_dim / 2, nfg = a.rot_dim / 16, npass = (a.head_dim - a.rot_dim) / 8;
  const float sc = rope_scale(a, dy);
  float am = 0.0f;
  const int items = nfg * a.heads;
  int curf = -1;
  double f[8];
  for (unsigned long long t = blockIdx.x; t < a.tokens; t += gridDim.x) {
    const long long pos = te_rope_pos(t, a.positions, a.cu_seqlens, a.batch, a.seq_len);
    int cur = -1;
    float c[8], s[8];
    for (int w = threadIdx.x; w < items; w += blockDim.x) {
      const int h = w / nfg, fg = w - h * nfg, i0 = fg * 8;
      if (fg != curf && !(a.flags & TE_ROPE_TABLE)) {
#pragma unroll
        for (int k = 0; k < 8; k++) f[k] = te_rope_inv_freq(i0 + k, a.rot_dim, a.log2_theta);
        curf = fg;
      }
      if (fg != cur) {
#pragma unroll
        for (int k = 0; k < 8; k++) rope_cs(a, pos, i0 + k, half, inv, f[k], &c[k], &s[k]);
        cur = fg;
      }
      const uint64_t xb = t * a.x_ts + (uint64_t)h * a.x_hs, yb = t * a.y_ts + (uint64_t)h * a.y_hs;
      float u[8], v[8], p[8], q[8];
      if (inter) {
        te_dev_ld8(a.x, xb + 2 * i0, dx, u);
        te_dev_ld8(a.x, xb + 2 * i0 + 8, dx, v);
#pragma unroll
        for (int k = 0; k < 4; k++) {
          te_rope_rot(u[2 * k], u[2 * k + 1], c[k], s[k], &p[2 * k], &p[2 * k + 1]);
          te_rope_rot(v[2 * k], v[2 * k + 1], c[k + 4], s[k + 4], &q[2 * k], &q[2 * k + 1]);
        }
        rope_st8(a, yb + 2 * i0, dy, p, sc, &am);
        rope_st8(a, yb + 2 * i0 + 8, dy, q, sc, &am);
      } else {
        te_dev_ld8(a.x, xb + i0, dx, u);
        te_dev_ld8(a.x, xb + half + i0, dx, v);
#pragma unroll
        for (int k = 0; k < 8; k++) te_rope_rot(u[k], v[k], c[k], s[k], &p[k], &q[k]);
        rope_st8(a, yb + i0, dy, p, sc, &am);
        rope_st8(a, yb + half + i0, dy, q, sc, &am);
      }
    }
    if (!(a.flags & TE_ROPE_INPLACE)) {
      for (int w = threadIdx.x; w < npass * a.heads; w += blockDim.x) {
        const int h = w / npass, j = a.rot_dim + (w - h * npass) * 8;
        float u[8];
        te_dev_ld8(a.x, t * a.x_ts + (uint64_t)h * a.x_hs + j, dx, u);
        rope_st8(a, t * a.y_ts + (uint64_t)h * a.y_hs + j, dy, u, sc, &am);
      }
    }
  }
  rope_fin(a, am);
}

__device__ __forceinline__ void rope_st1(const rope_k &a, uint64_t i, int dy, float v, float sc,
                                         float *am) {
  *am = te_amax_f32(*am, v);
  te_st(a.y, i, dy, te_dt_is_fp8(dy) ? te_mul_rn(v, sc) : v);
}

extern "C" __global__ void __launch_bounds__(TE_ROPE_THREADS) te_rope_v1(TE_KSIG(TE_ROPE_PARAMS)) {
  const rope_k a = {TE_KNAMES(TE_ROPE_PARAMS)};
  const int dx = TE_ROPE_DT(a.dtypes, 0), dy = TE_ROPE_DT(a.dtypes, 1);
  const int inter = a.flags & TE_ROPE_INTERLEAVED, inv = (a.flags & TE_ROPE_INVERSE) != 0;
  const int half = a.rot_dim / 2, npass = a.head_dim - a.rot_dim;
  const float sc = rope_scale(a, dy);
  float am = 0.0f;
  for (unsigned long long t = blockIdx.x; t < a.tokens; t += gridDim.x) {
    const long long pos = te_rope_pos(t, a.positions, a.cu_seqlens, a.batch, a.seq_len);
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
