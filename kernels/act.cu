// SPDX-License-Identifier: Apache-2.0
// act.cu -- activations forward and backward, optionally quantizing the
// output to FP8 with a per-tensor scale.
//
// Kinds (kernels/common/act.h): GELU, RELU, SILU, QGELU elementwise over
// rows*cols elements; SWIGLU, GEGLU, REGLU gated: input row [a | b] of
// 2*cols, output act(a)*b of cols.  Backward: dx = dy*act'(x); gated
// dx = [dy*b*act'(a) | dy*act(a)] of 2*cols from dy of cols.
// Dtypes: inputs F32/BF16/F16; output also E4M3/E5M2 (y*scale, amax of y
// max-accumulated with one atomic per block, scale_inv = 1/scale).
//
// Launch: 1-D grid of 256-thread blocks, grid-stride over 8-element
// vectors (vec = 1: every pointer 16-byte aligned and, gated, cols % 8 ==
// 0) or over elements (vec = 0).  The vector path is compiled for each
// common dtype pair (input = output, or FP8 output; backward: one dtype
// for all three) so its loop has no dtype branches: these kernels are
// bound by instruction issue, not memory, for the transcendental kinds.
// Other pairs take a path that switches on the dtype per vector.  The
// element math is kernels/common/act.h, shared with the vdev
// implementation (libtecore/act/act.c): the same bits on both backends.
#include "common/act.h"
#include "common/act_params.h"
#include "colsum.cuh"
#include "ldst.cuh"
#include "pdl.cuh"

#define ACT_BLOCK 256
#define F32 TE_FP8_DT_F32
#define F16 TE_FP8_DT_F16
#define BF16 TE_FP8_DT_BF16
#define E4M3 TE_FP8_DT_E4M3
#define E5M2 TE_FP8_DT_E5M2

struct act_args {
  const void *in, *in2;  // fwd: in; bwd: dy, x
  void *out;
  float scale;           // 1 unless the output is FP8
  unsigned long long rows, cols;
  int d0, d1, dout;      // dtypes: fwd in, -, out; bwd dy, x, dx
};

// Thread position in a grid-stride loop over rows x cv vectors, advanced
// without a division per step.
struct rc_iter {
  unsigned long long r, c, step_r, step_c, cv;
  __device__ __forceinline__ rc_iter(unsigned long long start, unsigned long long step,
                                     unsigned long long ncv)
      : r(start / ncv), c(start % ncv), step_r(step / ncv), step_c(step % ncv), cv(ncv) {}
  __device__ __forceinline__ void next() {
    r += step_r;
    c += step_c;
    if (c >= cv) {
      c -= cv;
      r++;
    }
  }
};

// ---- forward -----------------------------------------------------------------

// Vector path with compile-time dtypes.
template <int KIND, int DIN, int DOUT>
__device__ __forceinline__ float act_fwd_vec(const act_args &a) {
  const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned long long nthr = (unsigned long long)gridDim.x * blockDim.x;
  float am = 0.0f;
  if (!te_act_is_gated(KIND)) {
    const unsigned long long nv = a.rows * a.cols / 8;
    for (unsigned long long v = tid; v < nv; v += nthr) {
      float x[8];
      te_dev_ld8t<DIN>(a.in, v * 8, x);
#pragma unroll
      for (int k = 0; k < 8; k++) {
        float y = te_act_fwd(KIND, x[k]);
        am = te_amax_f32(am, y);
        x[k] = te_mul_rn(y, a.scale);
      }
      te_dev_st8t<DOUT>(a.out, v * 8, x);
    }
  } else {
    const unsigned long long cv = a.cols / 8;
    rc_iter it(tid, nthr, cv);
    for (; it.r < a.rows; it.next()) {
      const unsigned long long ia = it.r * 2 * a.cols + it.c * 8;
      float x[8], b[8];
      te_dev_ld8t<DIN>(a.in, ia, x);
      te_dev_ld8t<DIN>(a.in, ia + a.cols, b);
#pragma unroll
      for (int k = 0; k < 8; k++) {
        float y = te_act_gated_fwd(KIND, x[k], b[k]);
        am = te_amax_f32(am, y);
        x[k] = te_mul_rn(y, a.scale);
      }
      te_dev_st8t<DOUT>(a.out, it.r * a.cols + it.c * 8, x);
    }
  }
  return am;
}

// Any dtypes: element by element (vec = 0), or by vectors with run-time
// dtype switches (vec = 1, uncommon pairs); non-gated tails.
template <int KIND>
__device__ __forceinline__ float act_fwd_any(const act_args &a, int vec) {
  const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned long long nthr = (unsigned long long)gridDim.x * blockDim.x;
  float am = 0.0f;
  if (!te_act_is_gated(KIND)) {
    const unsigned long long n = a.rows * a.cols;
    unsigned long long done = 0;
    if (vec) {
      const unsigned long long nv = n / 8;
      for (unsigned long long v = tid; v < nv; v += nthr) {
        float x[8];
        te_dev_ld8(a.in, v * 8, a.d0, x);
#pragma unroll
        for (int k = 0; k < 8; k++) {
          float y = te_act_fwd(KIND, x[k]);
          am = te_amax_f32(am, y);
          x[k] = te_mul_rn(y, a.scale);
        }
        te_dev_st8(a.out, v * 8, a.dout, x);
      }
      done = nv * 8;
    }
    for (unsigned long long i = done + tid; i < n; i += nthr) {
      float y = te_act_fwd(KIND, te_ld(a.in, i, a.d0));
      am = te_amax_f32(am, y);
      te_st(a.out, i, a.dout, te_mul_rn(y, a.scale));
    }
  } else if (vec) {
    rc_iter it(tid, nthr, a.cols / 8);
    for (; it.r < a.rows; it.next()) {
      const unsigned long long ia = it.r * 2 * a.cols + it.c * 8;
      float x[8], b[8];
      te_dev_ld8(a.in, ia, a.d0, x);
      te_dev_ld8(a.in, ia + a.cols, a.d0, b);
#pragma unroll
      for (int k = 0; k < 8; k++) {
        float y = te_act_gated_fwd(KIND, x[k], b[k]);
        am = te_amax_f32(am, y);
        x[k] = te_mul_rn(y, a.scale);
      }
      te_dev_st8(a.out, it.r * a.cols + it.c * 8, a.dout, x);
    }
  } else {
    rc_iter it(tid, nthr, a.cols);
    for (; it.r < a.rows; it.next()) {
      const unsigned long long ia = it.r * 2 * a.cols + it.c;
      float y = te_act_gated_fwd(KIND, te_ld(a.in, ia, a.d0), te_ld(a.in, ia + a.cols, a.d0));
      am = te_amax_f32(am, y);
      te_st(a.out, it.r * a.cols + it.c, a.dout, te_mul_rn(y, a.scale));
    }
  }
  return am;
}

// Non-gated vector paths leave n % 8 elements: the element loop takes them.
template <int KIND>
__device__ __forceinline__ float act_fwd_tail(const act_args &a) {
  if (te_act_is_gated(KIND)) return 0.0f;
  const unsigned long long n = a.rows * a.cols, i = n / 8 * 8 + (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return 0.0f;
  float y = te_act_fwd(KIND, te_ld(a.in, i, a.d0));
  te_st(a.out, i, a.dout, te_mul_rn(y, a.scale));
  return te_amax_f32(0.0f, y);
}

// The forward kernels' arguments, gathered (kernels/common/act_params.h).
struct act_fwd_k {
  TE_KMEMBERS(TE_ACT_FWD_PARAMS)
};

template <int KIND>
__device__ __forceinline__ void act_fwd(const act_fwd_k &k) {
  const void *in = k.in;
  void *out = k.out;
  const float *scale = k.scale;
  unsigned *amax = k.amax;
  float *scale_inv = k.scale_inv;
  const int *noop = k.noop;
  const unsigned long long rows = k.rows, cols = k.cols;
  const int dtypes = k.dtypes, vec = k.vec;
  if (noop && *noop != 0) return;  // te/fp8.h: nonzero skips everything
  act_args a;
  a.in = in;
  a.in2 = nullptr;
  a.out = out;
  a.rows = rows;
  a.cols = cols;
  a.d0 = dtypes & 0xf;
  a.d1 = 0;
  a.dout = (dtypes >> 4) & 0xf;
  a.scale = (te_dt_is_fp8(a.dout) && scale) ? *scale : 1.0f;
  if (scale_inv && scale && blockIdx.x == 0 && threadIdx.x == 0) *scale_inv = te_fp8_scale_inv(*scale);
  float am;
  const int pair = a.d0 * 8 + a.dout;
  if (!vec) {
    am = act_fwd_any<KIND>(a, 0);
  } else {
    switch (pair) {
#define ACT_FWD_CASE(I, O)                                                                  \
  case I * 8 + O:                                                                           \
    am = act_fwd_vec<KIND, I, O>(a);                                                        \
    am = te_amax_f32(am, act_fwd_tail<KIND>(a));                                            \
    break;
      ACT_FWD_CASE(F32, F32) ACT_FWD_CASE(F32, E4M3) ACT_FWD_CASE(F32, E5M2)
      ACT_FWD_CASE(BF16, BF16) ACT_FWD_CASE(BF16, E4M3) ACT_FWD_CASE(BF16, E5M2)
      ACT_FWD_CASE(F16, F16) ACT_FWD_CASE(F16, E4M3) ACT_FWD_CASE(F16, E5M2)
#undef ACT_FWD_CASE
      default: am = act_fwd_any<KIND>(a, 1); break;
    }
  }
  if (amax) te_dev_block_amax_f(amax, am);
}

// ---- backward ----------------------------------------------------------------

template <int KIND, int DT>
__device__ __forceinline__ float act_bwd_vec(const act_args &a) {
  const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned long long nthr = (unsigned long long)gridDim.x * blockDim.x;
  float am = 0.0f;
  if (!te_act_is_gated(KIND)) {
    const unsigned long long nv = a.rows * a.cols / 8;
    for (unsigned long long v = tid; v < nv; v += nthr) {
      float g[8], x[8];
      te_dev_ld8t<DT>(a.in, v * 8, g);
      te_dev_ld8t<DT>(a.in2, v * 8, x);
#pragma unroll
      for (int k = 0; k < 8; k++) {
        float d = te_act_bwd(KIND, x[k], g[k]);
        am = te_amax_f32(am, d);
        g[k] = te_mul_rn(d, a.scale);
      }
      te_dev_st8t<DT>(a.out, v * 8, g);
    }
  } else {
    rc_iter it(tid, nthr, a.cols / 8);
    for (; it.r < a.rows; it.next()) {
      const unsigned long long ia = it.r * 2 * a.cols + it.c * 8;
      float x[8], b[8], g[8];
      te_dev_ld8t<DT>(a.in2, ia, x);
      te_dev_ld8t<DT>(a.in2, ia + a.cols, b);
      te_dev_ld8t<DT>(a.in, it.r * a.cols + it.c * 8, g);
#pragma unroll
      for (int k = 0; k < 8; k++) {
        float da, db;
        te_act_gated_bwd(KIND, x[k], b[k], g[k], &da, &db);
        am = te_amax_f32(te_amax_f32(am, da), db);
        x[k] = te_mul_rn(da, a.scale);
        b[k] = te_mul_rn(db, a.scale);
      }
      te_dev_st8t<DT>(a.out, ia, x);
      te_dev_st8t<DT>(a.out, ia + a.cols, b);
    }
  }
  return am;
}

template <int KIND>
__device__ __forceinline__ float act_bwd_any(const act_args &a, int vec) {
  const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned long long nthr = (unsigned long long)gridDim.x * blockDim.x;
  float am = 0.0f;
  if (!te_act_is_gated(KIND)) {
    const unsigned long long n = a.rows * a.cols;
    unsigned long long done = 0;
    if (vec) {
      const unsigned long long nv = n / 8;
      for (unsigned long long v = tid; v < nv; v += nthr) {
        float g[8], x[8];
        te_dev_ld8(a.in, v * 8, a.d0, g);
        te_dev_ld8(a.in2, v * 8, a.d1, x);
#pragma unroll
        for (int k = 0; k < 8; k++) {
          float d = te_act_bwd(KIND, x[k], g[k]);
          am = te_amax_f32(am, d);
          g[k] = te_mul_rn(d, a.scale);
        }
        te_dev_st8(a.out, v * 8, a.dout, g);
      }
      done = nv * 8;
    }
    for (unsigned long long i = done + tid; i < n; i += nthr) {
      float d = te_act_bwd(KIND, te_ld(a.in2, i, a.d1), te_ld(a.in, i, a.d0));
      am = te_amax_f32(am, d);
      te_st(a.out, i, a.dout, te_mul_rn(d, a.scale));
    }
  } else if (vec) {
    rc_iter it(tid, nthr, a.cols / 8);
    for (; it.r < a.rows; it.next()) {
      const unsigned long long ia = it.r * 2 * a.cols + it.c * 8;
      float x[8], b[8], g[8];
      te_dev_ld8(a.in2, ia, a.d1, x);
      te_dev_ld8(a.in2, ia + a.cols, a.d1, b);
      te_dev_ld8(a.in, it.r * a.cols + it.c * 8, a.d0, g);
#pragma unroll
      for (int k = 0; k < 8; k++) {
        float da, db;
        te_act_gated_bwd(KIND, x[k], b[k], g[k], &da, &db);
        am = te_amax_f32(te_amax_f32(am, da), db);
        x[k] = te_mul_rn(da, a.scale);
        b[k] = te_mul_rn(db, a.scale);
      }
      te_dev_st8(a.out, ia, a.dout, x);
      te_dev_st8(a.out, ia + a.cols, a.dout, b);
    }
  } else {
    rc_iter it(tid, nthr, a.cols);
    for (; it.r < a.rows; it.next()) {
      const unsigned long long ia = it.r * 2 * a.cols + it.c;
      float da, db;
      te_act_gated_bwd(KIND, te_ld(a.in2, ia, a.d1), te_ld(a.in2, ia + a.cols, a.d1),
                       te_ld(a.in, it.r * a.cols + it.c, a.d0), &da, &db);
      am = te_amax_f32(te_amax_f32(am, da), db);
      te_st(a.out, ia, a.dout, te_mul_rn(da, a.scale));
      te_st(a.out, ia + a.cols, a.dout, te_mul_rn(db, a.scale));
    }
  }
  return am;
}

template <int KIND>
__device__ __forceinline__ float act_bwd_tail(const act_args &a) {
  if (te_act_is_gated(KIND)) return 0.0f;
  const unsigned long long n = a.rows * a.cols, i = n / 8 * 8 + (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return 0.0f;
  float d = te_act_bwd(KIND, te_ld(a.in2, i, a.d1), te_ld(a.in, i, a.d0));
  te_st(a.out, i, a.dout, te_mul_rn(d, a.scale));
  return te_amax_f32(0.0f, d);
}

// Its arguments one by one: gathered in a struct, nvcc 13.0 scheduled the
// gated kinds' backward differently (sm_90a), not timed yet.
template <int KIND>
__device__ __forceinline__ void act_bwd(const void *dy, const void *x, void *dx,
                                        const float *scale, unsigned *amax, float *scale_inv,
                                        unsigned long long rows, unsigned long long cols,
                                        int dtypes, int vec) {
  act_args a;
  a.in = dy;
  a.in2 = x;
  a.out = dx;
  a.rows = rows;
  a.cols = cols;
  a.d0 = dtypes & 0xf;
  a.d1 = (dtypes >> 4) & 0xf;
  a.dout = (dtypes >> 8) & 0xf;
  a.scale = (te_dt_is_fp8(a.dout) && scale) ? *scale : 1.0f;
  if (scale_inv && scale && blockIdx.x == 0 && threadIdx.x == 0) *scale_inv = te_fp8_scale_inv(*scale);
  float am;
  if (vec && a.d0 == a.d1 && a.d0 == a.dout) {
    switch (a.d0) {
      case F32: am = act_bwd_vec<KIND, F32>(a); break;
      case BF16: am = act_bwd_vec<KIND, BF16>(a); break;
      default: am = act_bwd_vec<KIND, F16>(a); break;
    }
    am = te_amax_f32(am, act_bwd_tail<KIND>(a));
  } else {
    am = act_bwd_any<KIND>(a, vec);
  }
  if (amax) te_dev_block_amax_f(amax, am);
}

// MINB: blocks an SM must hold (8: 32 registers, full occupancy, for the
// elementwise kinds; the gated kinds keep more live values and would spill).
#define TE_ACT_KERNELS(name, KIND, MINB)                                                      \
  extern "C" __global__ void __launch_bounds__(ACT_BLOCK, MINB)                               \
      te_act_fwd_##name(TE_KSIG(TE_ACT_FWD_PARAMS)) {                                         \
    te_pdl_enter();                                                                           \
    act_fwd<KIND>(act_fwd_k{TE_KNAMES(TE_ACT_FWD_PARAMS)});                                              \
  }                                                                                           \
  extern "C" __global__ void __launch_bounds__(ACT_BLOCK, MINB)                               \
      te_act_bwd_##name(TE_KSIG(TE_ACT_BWD_PARAMS)) {                                         \
    te_pdl_enter();                                                                           \
    act_bwd<KIND>(TE_KNAMES(TE_ACT_BWD_PARAMS));                                              \
  }

TE_ACT_KERNELS(gelu, TE_ACT_GELU, 8)
TE_ACT_KERNELS(relu, TE_ACT_RELU, 8)
TE_ACT_KERNELS(silu, TE_ACT_SILU, 8)
TE_ACT_KERNELS(qgelu, TE_ACT_QGELU, 8)
TE_ACT_KERNELS(swiglu, TE_ACT_SWIGLU, 1)
TE_ACT_KERNELS(geglu, TE_ACT_GEGLU, 1)
TE_ACT_KERNELS(reglu, TE_ACT_REGLU, 1)

// dx = dy * act'(x) with dx's column sums (te_act_bwd_colsum_<kind>): a
// bias gradient taken while dx is written (the fuser: the Linear before
// the activation).  te_colsum_part's blocks and order; each thread keeps
// TE_COLSUM_UNROLL rows' loads in flight.  The sums add the values as
// stored (rounded to dtype), so they are the column sums of dx itself.
__device__ __forceinline__ float act_round(float v, int dtype) {
  if (dtype == TE_FP8_DT_BF16) return __uint_as_float(te_dev_bf16x2(v, 0.0f) << 16);
  if (dtype == TE_FP8_DT_F16) return te_dev_h2f(te_dev_f16x2(v, 0.0f) & 0xffffu);
  return v;
}

#define ACT_CS_UNROLL 2

template <int KIND>
__device__ __forceinline__ void act_bwd_colsum(TE_KSIG(TE_ACT_BWD_COLSUM_PARAMS)) {
  __shared__ float part[TE_COLSUM_LANES][TE_COLSUM_VECS * 8 + 1];
  const te_colsum_at w = te_colsum_place(rows, rpp);
  const unsigned long long c = w.c, r1 = w.r1;
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  if (c < cols) {
    unsigned long long r = w.r;
    // two rows' loads in flight (four, as te_colsum_part, held 120
    // registers: two blocks an SM, and the GELU's math went unhidden)
    for (; r + (ACT_CS_UNROLL - 1) * TE_COLSUM_LANES < r1; r += ACT_CS_UNROLL * TE_COLSUM_LANES) {
      float g[ACT_CS_UNROLL][8], xv[ACT_CS_UNROLL][8];
#pragma unroll
      for (int u = 0; u < ACT_CS_UNROLL; u++) {
        const unsigned long long i = (r + (unsigned long long)u * TE_COLSUM_LANES) * cols + c;
        te_dev_ld8(dy, i, dtype, g[u]);
        te_dev_ld8(x, i, dtype, xv[u]);
      }
#pragma unroll
      for (int u = 0; u < ACT_CS_UNROLL; u++) {
#pragma unroll
        for (int k = 0; k < 8; k++) {
          g[u][k] = te_act_bwd(KIND, xv[u][k], g[u][k]);
          s[k] = te_add_rn(s[k], act_round(g[u][k], dtype));
        }
        te_dev_st8(dx, (r + (unsigned long long)u * TE_COLSUM_LANES) * cols + c, dtype, g[u]);
      }
    }
    for (; r < r1; r += TE_COLSUM_LANES) {
      float g[8], xv[8];
      te_dev_ld8(dy, r * cols + c, dtype, g);
      te_dev_ld8(x, r * cols + c, dtype, xv);
#pragma unroll
      for (int k = 0; k < 8; k++) {
        g[k] = te_act_bwd(KIND, xv[k], g[k]);
        s[k] = te_add_rn(s[k], act_round(g[k], dtype));
      }
      te_dev_st8(dx, r * cols + c, dtype, g);
    }
  }
  te_colsum_block_end(part, s, ws, cols);
}

#define TE_ACT_COLSUM_KERNEL(name, KIND)                                                     \
  extern "C" __global__ void __launch_bounds__(TE_COLSUM_VECS * TE_COLSUM_LANES, 4)         \
      te_act_bwd_colsum_##name(TE_KSIG(TE_ACT_BWD_COLSUM_PARAMS)) {                          \
    te_pdl_enter();                                                                          \
    act_bwd_colsum<KIND>(TE_KNAMES(TE_ACT_BWD_COLSUM_PARAMS));                               \
  }
TE_ACT_COLSUM_KERNEL(gelu, TE_ACT_GELU)
TE_ACT_COLSUM_KERNEL(relu, TE_ACT_RELU)
TE_ACT_COLSUM_KERNEL(silu, TE_ACT_SILU)
TE_ACT_COLSUM_KERNEL(qgelu, TE_ACT_QGELU)
