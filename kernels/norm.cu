// SPDX-License-Identifier: Apache-2.0
// norm.cu -- LayerNorm and RMSNorm, forward and backward.
//
// Shapes: x, y, dy, dx, extra_grad [rows][hidden]; gamma, beta [hidden];
// mu, rsigma [rows] float; backward workspace float [k][parts][hidden]
// (k = 2 for LayerNorm: dgamma then dbeta partials).
// Dtypes (packed 4 bits each, kernels/common/norm.h): inputs and gamma
// F32/BF16/F16; y also E4M3/E5M2 (y*scale, amax of y, scale_inv).
//
// Layout (te_norm_plan_make): T threads per row (32 .. 1024), R rows per
// block; thread t owns vectors t, t+T, ... of VEC elements (8: 16-byte
// accesses; 1: element path for odd hidden sizes or alignments).  The row
// stays in registers (up to 4 vectors a thread forward, 2 backward); longer
// rows take the _stream kernels, which reread it (from L2).  Sums are
// added in the order norm.h defines, so the vdev implementation gives the
// same bits.  Forward blocks loop over row groups when the grid is smaller
// than the rows need; a block whose amax adds nothing skips its atomic.
//
// te_norm_fwd_full16 takes the BF16 rows that fill 4 vectors of every
// thread (hidden 4096, 8192) with their width a compile-time constant: no
// per-vector tests, constant address offsets (about 570 instructions a row
// of 32 elements a thread where te_norm_fwd_fast16 takes about 800).
//
// The element loops are instruction-bound unless every branch is gone, so
// the common cases (one dtype for x, gamma (and dy, dx, extra_grad), the
// output that dtype or FP8; LayerNorm or RMSNorm) are compiled with those
// as constants; a template argument of -1 means "read it at run time",
// which the other cases take.
//
// Backward is two kernels: te_norm_bwd_* computes dx and writes one row of
// dgamma (dbeta) partials per block into the workspace, te_norm_bwd_reduce
// adds the partials per column.
#include "common/norm.h"
#include "common/norm_params.h"
#include "ldst.cuh"
#include "pdl.cuh"

#define FULL_MASK 0xffffffffu
#define F32 TE_FP8_DT_F32
#define F16 TE_FP8_DT_F16
#define BF16 TE_FP8_DT_BF16
#define E4M3 TE_FP8_DT_E4M3
#define E5M2 TE_FP8_DT_E5M2

// One vector (VEC elements) of dtype DT (or dt when DT < 0).
template <int VEC, int DT>
__device__ __forceinline__ void nv_ld(const void *p, unsigned long long i, int dt, float *v) {
  if constexpr (VEC == 8 && DT >= 0) te_dev_ld8t<DT>(p, i, v);
  else if constexpr (VEC == 8) te_dev_ld8(p, i, dt, v);
  else v[0] = te_ld(p, i, DT >= 0 ? DT : dt);
}
template <int VEC, int DT>
__device__ __forceinline__ void nv_ld_ro(const void *p, unsigned long long i, int dt, float *v) {
  if constexpr (VEC == 8 && DT == F32) {
    const float4 *q = (const float4 *)((const float *)p + i);
    float4 a = __ldg(q), b = __ldg(q + 1);
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
  } else if constexpr (VEC == 8 && DT >= 0) {
    uint4 u = __ldg((const uint4 *)((const uint16_t *)p + i));
    uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
      if constexpr (DT == BF16) {
        v[2 * k] = __uint_as_float(w[k] << 16);
        v[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
      } else {
        v[2 * k] = te_dev_h2f(w[k] & 0xffffu);
        v[2 * k + 1] = te_dev_h2f(w[k] >> 16);
      }
    }
  } else if constexpr (VEC == 8) {
    te_dev_ld8_ro(p, i, dt, v);
  } else {
    v[0] = te_ld(p, i, DT >= 0 ? DT : dt);
  }
}
template <int VEC, int DT>
__device__ __forceinline__ void nv_st(void *p, unsigned long long i, int dt, const float *v) {
  if constexpr (VEC == 8 && DT >= 0) te_dev_st8t<DT>(p, i, v);
  else if constexpr (VEC == 8) te_dev_st8(p, i, dt, v);
  else te_st(p, i, DT >= 0 ? DT : dt, v[0]);
}

// The later passes' widening of a packed BF16 row (RAW, FULL): the same
// floats as te_dev_unpack8t, by byte permutes instead of shifts and masks,
// so that the compiler does not keep the first pass's 32 floats live to
// reuse them (under te_norm_fwd_fast16's 48 registers they spilled; an
// empty asm between the passes did not stop ptxas).  F16 goes through
// te_dev_unpack8t.
template <int DT>
__device__ __forceinline__ void unpack8_again(uint4 u, float *v) {
  if constexpr (DT == BF16) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
      v[2 * k] = __uint_as_float(__byte_perm(w[k], 0u, 0x1044));       // bytes 1,0 on top
      v[2 * k + 1] = __uint_as_float(__byte_perm(w[k], 0u, 0x3244));   // bytes 3,2 on top
    }
  } else {
    te_dev_unpack8t<DT>(u, v);
  }
}

// Sums NVAL values over the T threads of each row (norm.h's order); every
// thread of the row gets the sums.  buf alternates between calls so a call
// needs one barrier only.  All threads of the block must call it.
//
// The second stage, W = T/32 warp sums w[0..W-1] in lanes below W and +0
// above, butterflied over 32 lanes, is for W <= 8 computed by every lane
// from shared memory instead, to the same bits: the levels 16 .. W add a
// +0 to each w (w + 0 is w, but -0 becomes +0, so one add of +0 stands
// for them all), then level h = W/2 .. 1 adds w[i] and w[i + h] (IEEE
// addition commutes, so every lane's butterfly value is lane 0's).  A few
// shared loads and log2(W) dependent adds in place of five shuffle-and-add
// steps: LayerNorm's rows at hidden 4096 (W = 4) take this path twice.
// Only where SMEM2 asks (te_norm_fwd_fast16): in the generic kernels the
// unrolled w[] took registers (te_norm_fwd_v1: 32 -> 60).  W is a run-time
// value, so the tree is compiled once for each W (2, 4, 8) and the row
// takes its own: the version with "i < W" tests on every w made all eight
// loads and adds, predicated, about 45 instructions a sum for W = 4.
template <int W, int NVAL>
__device__ __forceinline__ void row_tree_smem(float *v, const float (*red)[32], int first) {
#pragma unroll
  for (int k = 0; k < NVAL; k++) {
    float w[W];
#pragma unroll
    for (int i = 0; i < W; i++) w[i] = te_add_rn(red[k][first + i], 0.0f);
#pragma unroll
    for (int h = W / 2; h >= 1; h >>= 1)
#pragma unroll
      for (int i = 0; i < h; i++) w[i] = te_add_rn(w[i], w[i + h]);
    v[k] = w[0];
  }
}
template <int NVAL, bool SMEM2 = false>
__device__ __forceinline__ void row_reduce(float *v, int T, int buf, float (*red)[NVAL][32]) {
#pragma unroll
  for (int off = 16; off >= 1; off >>= 1)
#pragma unroll
    for (int k = 0; k < NVAL; k++) v[k] = te_add_rn(v[k], __shfl_xor_sync(FULL_MASK, v[k], off));
  if (T > 32) {
    // T and W are powers of two: masks, not divisions (a division by a
    // run-time W cost about 15 instructions a row).
    const int W = T >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int first = warp & ~(W - 1);
    if (lane == 0)
#pragma unroll
      for (int k = 0; k < NVAL; k++) red[buf][k][warp] = v[k];
    __syncthreads();
    if (SMEM2 && W <= 8) {
      if (W == 2) row_tree_smem<2, NVAL>(v, red[buf], first);
      else if (W == 4) row_tree_smem<4, NVAL>(v, red[buf], first);
      else row_tree_smem<8, NVAL>(v, red[buf], first);
      return;
    }
#pragma unroll
    for (int k = 0; k < NVAL; k++) v[k] = lane < W ? red[buf][k][first + lane] : 0.0f;
#pragma unroll
    for (int off = 16; off >= 1; off >>= 1)
#pragma unroll
      for (int k = 0; k < NVAL; k++) v[k] = te_add_rn(v[k], __shfl_xor_sync(FULL_MASK, v[k], off));
  }
}

// ---- forward -----------------------------------------------------------------

// The kernel's parameters, gathered (kernels/common/norm_params.h).
struct fwd_args {
  TE_KMEMBERS(TE_NORM_FWD_PARAMS)
};

// The row lives in registers (v[] or the packed xr[], NVR * VEC values a
// thread) from the sum pass through the variance pass into the output
// pass, with the running amax beside it.  A pass moved into a helper
// takes those arrays by pointer: nvcc keeps them in registers only if the
// helper is inlined and every index stays a compile-time constant, so
// each move is shown on the machine code of every instantiation
// (t/gpu/cubin-same.py before and after: pass 1, norm_fwd_sum, gives the
// same bytes); the other passes are still marked in this body.
// ZCC: zero-centered gamma known at compile time (0, 1), or -1: read the
// flag (g + zc, te_norm_gamma).
// FT: 0, or the threads of a row known at compile time when every thread
// holds exactly FNV vectors of its row (nv == FNV, hidden == FNV * FT *
// VEC: FT 128 and FNV 4 is hidden 4096, 256 is 8192, FT 32 and FNV 3 is
// 768; the host checks and takes that instantiation).  Then no per-vector tests, and every address
// is a row base plus constant offsets (te_norm_fwd_fast16's LayerNorm is
// bound by instruction issue: these were about 70 of its 900 instructions
// a row, ncu).  A row slot past the last row (FT < the block, R > 1) loads
// the last row instead, so that passes 1 and 2 need no test (their sums
// are never used), and skips the output pass.
// A thread's place in its row for norm_fwd's passes: T threads a row,
// this one t; nv vectors a thread, nvec in the row; the row at base,
// valid or a padding slot; x's dtype (dx) and LayerNorm or RMSNorm (ln).
struct fwd_row {
  int T, t, nv;
  unsigned nvec;
  unsigned long long base;
  bool valid, ln;
  int dx;
};

// Pass 1: the thread's part of S(x) (LayerNorm) or S(x*x) (RMSNorm) into
// s[0], the row kept in v (or packed in xr when RAW) for the later passes.
template <int VEC, bool STREAM, int DX, bool FULL, int NVR, bool RAW>
__device__ __forceinline__ void norm_fwd_sum(const fwd_args &a, const fwd_row &w, float *v,
                                             uint4 *xr, float *s) {
  const int T = w.T, t = w.t, nv = w.nv, dx = w.dx;
  const unsigned nvec = w.nvec;
  const unsigned long long base = w.base;
  const bool valid = w.valid, ln = w.ln;
  if (RAW) {
#pragma unroll
    for (int j = 0; j < NVR; j++) {
      const unsigned vi = (unsigned)j * T + t;
      if (FULL || (j < nv && valid && vi < nvec))
        xr[j] = te_dev_ld8raw<DX>(a.x, base + (unsigned long long)vi * VEC);
    }
#pragma unroll
    for (int j = 0; j < NVR; j++) {
      const unsigned vi = (unsigned)j * T + t;
      if (FULL || (j < nv && valid && vi < nvec)) {
        te_dev_unpack8t<DX>(xr[j], v);
#pragma unroll
        for (int k = 0; k < VEC; k++) s[0] = ln ? te_add_rn(s[0], v[k]) : te_fma_rn(v[k], v[k], s[0]);
      }
    }
  } else if (!STREAM) {
#pragma unroll
    for (int j = 0; j < NVR; j++) {
      const unsigned vi = (unsigned)j * T + t;
      if (j < nv && valid && vi < nvec) {
        nv_ld<VEC, DX>(a.x, base + (unsigned long long)vi * VEC, dx, &v[j * VEC]);
#pragma unroll
        for (int k = 0; k < VEC; k++)
          s[0] = ln ? te_add_rn(s[0], v[j * VEC + k]) : te_fma_rn(v[j * VEC + k], v[j * VEC + k], s[0]);
      }
    }
  } else {
    for (int j = 0; j < nv; j++) {
      const unsigned vi = (unsigned)j * T + t;
      if (valid && vi < nvec) {
        nv_ld<VEC, DX>(a.x, base + (unsigned long long)vi * VEC, dx, v);
#pragma unroll
        for (int k = 0; k < VEC; k++) s[0] = ln ? te_add_rn(s[0], v[k]) : te_fma_rn(v[k], v[k], s[0]);
      }
    }
  }
}

template <int VEC, bool STREAM, int DX, int DW, int DY, int LNC, int ZCC, int FT = 0,
          int FNV = TE_NORM_FWD_NV_MAX>
__device__ __forceinline__ void norm_fwd(const fwd_args &a) {
  __shared__ float red[2][1][32];
  constexpr bool FULL = FT > 0;
  // T is a power of two: shifts, not divisions by a run-time value.
  const int T = FULL ? FT : a.tpr, lgT = 31 - __clz(T), t = threadIdx.x & (T - 1);
  const int nv = FULL ? FNV : a.nv;
  const int R = FULL && FT >= TE_NORM_FWD_BLOCK ? 1 : blockDim.x >> lgT;
  const int dx = TE_NORM_DT(a.dtypes, 0), dw = TE_NORM_DT(a.dtypes, 1), dy = TE_NORM_DT(a.dtypes, 2);
  const bool ln = LNC >= 0 ? (LNC != 0) : ((a.flags & TE_NORM_LAYERNORM) != 0);
  const float zc = te_norm_zc(a.flags);
  const float sc = (te_dt_is_fp8(DY >= 0 ? DY : dy) && a.scale) ? *a.scale : 1.0f;
  const unsigned hidden = FULL ? (unsigned)(FNV * FT * VEC) : a.hidden;
  const unsigned nvec = VEC == 8 ? hidden / 8 : hidden;
  const float h = (float)hidden, hinv = te_norm_inv_pow2(h);
  constexpr int NVR = STREAM ? 1 : FULL ? FNV : TE_NORM_FWD_NV_MAX;
  // RAW: a 16-bit row kept packed (16 registers for 4 vectors, not 32) and
  // widened in each pass, for occupancy (measured: LayerNorm keeping
  // x - mean as floats instead ran 30% slower); x - mean is recomputed, to
  // the same bits.
  constexpr bool RAW = VEC == 8 && !STREAM && (DX == BF16 || DX == F16);
  float am = 0.0f;
  int buf = 0;
  for (unsigned long long grp = blockIdx.x; grp * R < a.rows; grp += gridDim.x) {
    const unsigned long long row = grp * R + (threadIdx.x >> lgT);
    const bool valid = (FULL && R == 1) || row < a.rows;
    const unsigned long long base = (FULL && !valid ? a.rows - 1 : row) * hidden;
    float v[RAW ? VEC : NVR * VEC];
    uint4 xr[RAW ? NVR : 1];
    float s[1] = {0.0f};

    // pass 1: S(x) (LN) or S(x*x) (RMS)
    const fwd_row w = {T, t, nv, nvec, base, valid, ln, dx};
    norm_fwd_sum<VEC, STREAM, DX, FULL, NVR, RAW>(a, w, v, xr, s);
    row_reduce<1, RAW>(s, T, buf, red);
    buf ^= 1;
    float mean = 0.0f, rs;
    if (ln) {
      mean = te_norm_mean_inv(s[0], h, hinv);
      float q[1] = {0.0f};
      if (!STREAM) {
#pragma unroll
        for (int j = 0; j < NVR; j++) {
          const unsigned vi = (unsigned)j * T + t;
          if (FULL || (j < nv && valid && vi < nvec)) {
            float *e = RAW ? v : &v[j * VEC];
            if (RAW && FULL) unpack8_again<DX>(xr[j], v);
            else if (RAW) te_dev_unpack8t<DX>(xr[j], v);
#pragma unroll
            for (int k = 0; k < VEC; k++) {
              // RAW recomputes x - mean in the output pass; with FULL written
              // here as fma(x, 1, -mean), the same bits (x * 1 is exact, so
              // one rounding of x + (-mean); zeros: x - x is +0 either way),
              // so that the compiler does not keep the 32 differences live
              // from here to there (it did, and spilled)
              float d = RAW && FULL ? te_fma_rn(e[k], 1.0f, -mean) : te_sub_rn(e[k], mean);
              if (!RAW) e[k] = d;
              q[0] = te_fma_rn(d, d, q[0]);
            }
          }
        }
      } else {
        for (int j = 0; j < nv; j++) {
          const unsigned vi = (unsigned)j * T + t;
          if (valid && vi < nvec) {
            nv_ld<VEC, DX>(a.x, base + (unsigned long long)vi * VEC, dx, v);
#pragma unroll
            for (int k = 0; k < VEC; k++) {
              float d = te_sub_rn(v[k], mean);
              q[0] = te_fma_rn(d, d, q[0]);
            }
          }
        }
      }
      row_reduce<1, RAW>(q, T, buf, red);
      buf ^= 1;
      rs = te_norm_rsigma(te_norm_mean_inv(q[0], h, hinv), a.eps);
    } else {
      rs = te_norm_rsigma(te_norm_mean_inv(s[0], h, hinv), a.eps);
    }
    if (valid && t == 0) {
      if (a.mu) a.mu[row] = mean;
      if (a.rsigma) a.rsigma[row] = rs;
    }

    // output pass
    if (FULL && !valid) continue;
#pragma unroll
    for (int j = 0; j < (STREAM ? 1 : NVR); j++) {
      for (int js = j; js < (STREAM ? nv : j + 1); js++) {
        const unsigned vi = (unsigned)js * T + t;
        if (!FULL && !(js < nv && valid && vi < nvec)) continue;
        float *e = (RAW || STREAM) ? v : &v[j * VEC];
        if (STREAM) nv_ld<VEC, DX>(a.x, base + (unsigned long long)vi * VEC, dx, e);
        if (RAW && FULL) unpack8_again<DX>(xr[j], e);
        else if (RAW) te_dev_unpack8t<DX>(xr[j], e);
        if (ln && (STREAM || RAW))
#pragma unroll
          for (int k = 0; k < VEC; k++) e[k] = te_sub_rn(e[k], mean);
        float g[VEC], b[VEC];
        nv_ld_ro<VEC, DW>(a.gamma, (unsigned long long)vi * VEC, dw, g);
        if (ln) nv_ld_ro<VEC, DW>(a.beta, (unsigned long long)vi * VEC, dw, b);
#pragma unroll
        for (int k = 0; k < VEC; k++) {
          const float gk = ZCC == 0 ? g[k] : ZCC == 1 ? te_add_rn(g[k], 1.0f) : te_norm_gamma(g[k], zc);
          float o = ln ? te_ln_out(e[k], rs, gk, b[k]) : te_rms_out(e[k], rs, gk);
          am = te_amax_f32(am, o);
          e[k] = te_mul_rn(o, sc);
        }
        nv_st<VEC, DY>(a.y, base + (unsigned long long)vi * VEC, dy, e);
      }
    }
  }
  if (a.amax) te_dev_block_amax_f(a.amax, am);
}

__device__ __forceinline__ void norm_fwd_prologue(const fwd_args &a) {
  if (a.scale_inv && a.scale && blockIdx.x == 0 && threadIdx.x == 0)
    *a.scale_inv = te_fp8_scale_inv(*a.scale);
}

// The common cases with every dtype and LN/RMS a constant (VEC 8, rows in
// registers).  The host launches these kernels only for them
// (and rows of at most TE_NORM_FAST_TMAX threads); kernels of their own so
// that the generic code's register needs do not lower their occupancy.
// te_norm_fwd_fast16 (x, gamma 16-bit, the row kept packed) is held to 48
// registers, where ptxas (sm_90a) spills nothing in any of its cases: 10
// blocks of 128 threads are resident, not the 8 that 64 registers allowed.
// A block handles one short row (a load, one or two block-wide sums, a
// store); LayerNorm's second sum makes each row's block live longer, so
// it needs more blocks in flight to keep the memory busy.  (At 40
// registers it would spill 40 bytes; at 32, 168.)  te_norm_fwd_fast (f32
// rows, 32 floats a thread) keeps __launch_bounds__(512, 2): 64 registers.
#define NORM_FWD_CASE(L, I, O)                                   \
  case L * 64 + I * 8 + O:                                       \
    if (zcf) norm_fwd<8, false, I, I, O, L, 1>(a);               \
    else norm_fwd<8, false, I, I, O, L, 0>(a);                   \
    return;
#define NORM_FWD_FAST(name, BOUNDS, CASES)                                        \
  extern "C" __global__ void BOUNDS name(TE_KSIG(TE_NORM_FWD_PARAMS)) {           \
    te_pdl_enter();                                                               \
    const fwd_args a = {TE_KNAMES(TE_NORM_FWD_PARAMS)};                           \
    norm_fwd_prologue(a);                                                         \
    const int ln = (flags & TE_NORM_LAYERNORM) != 0;                              \
    const int dx = TE_NORM_DT(dtypes, 0), dy = TE_NORM_DT(dtypes, 2);             \
    const bool zcf = (flags & TE_NORM_ZERO_CENTERED) != 0;                        \
    switch (ln * 64 + dx * 8 + dy) {                                              \
      CASES                                                                       \
      default: break;                                                             \
    }                                                                             \
  }
NORM_FWD_FAST(te_norm_fwd_fast16, __maxnreg__(48),
    NORM_FWD_CASE(0, BF16, BF16) NORM_FWD_CASE(0, BF16, E4M3) NORM_FWD_CASE(0, BF16, E5M2)
    NORM_FWD_CASE(0, F16, F16) NORM_FWD_CASE(0, F16, E4M3) NORM_FWD_CASE(0, F16, E5M2)
    NORM_FWD_CASE(1, BF16, BF16) NORM_FWD_CASE(1, BF16, E4M3) NORM_FWD_CASE(1, BF16, E5M2)
    NORM_FWD_CASE(1, F16, F16) NORM_FWD_CASE(1, F16, E4M3) NORM_FWD_CASE(1, F16, E5M2))
NORM_FWD_FAST(te_norm_fwd_fast, __launch_bounds__(TE_NORM_FAST_TMAX, 2),
    NORM_FWD_CASE(0, F32, F32) NORM_FWD_CASE(0, F32, E4M3) NORM_FWD_CASE(0, F32, E5M2)
    NORM_FWD_CASE(1, F32, F32) NORM_FWD_CASE(1, F32, E4M3) NORM_FWD_CASE(1, F32, E5M2))
#undef NORM_FWD_FAST
#undef NORM_FWD_CASE

// te_norm_fwd_full16: te_norm_fwd_fast16's BF16 cases whose rows are
// whole (norm_fwd's FT: 4 vectors a thread, 128 or 256 threads a row,
// hidden 4096 or 8192; gamma not zero-centered), a kernel of their own so
// that their register allocation is their own (inside te_norm_fwd_fast16
// they spilled).  F16 rows stay in te_norm_fwd_fast16: their later passes
// widen with the same instruction as the first, the compiler keeps the
// first pass's floats and spills.  te_norm_fwd_warp16: the same for rows
// of one warp with 3 vectors a thread (FNV: hidden 768), four rows a
// block; a kernel of its own again (inside te_norm_fwd_full16 it made that
// spill; 4 vectors a thread, hidden 1024, spill at 48 registers and stay
// in te_norm_fwd_fast16).
#define NORM_FULL_CASE(L, O)                                          \
  case L * 64 + O:                                                    \
    if (tpr == 128) norm_fwd<8, false, BF16, BF16, O, L, 0, 128>(a);  \
    else norm_fwd<8, false, BF16, BF16, O, L, 0, 256>(a);             \
    return;
#define NORM_WARP_CASE(L, O)                                          \
  case L * 64 + O:                                                    \
    norm_fwd<8, false, BF16, BF16, O, L, 0, 32, 3>(a);                \
    return;
#define NORM_WHOLE_ROWS(name, CASE)                                                  \
  extern "C" __global__ void __maxnreg__(48) name(TE_KSIG(TE_NORM_FWD_PARAMS)) {     \
    te_pdl_enter();                                                                  \
    const fwd_args a = {TE_KNAMES(TE_NORM_FWD_PARAMS)};                              \
    norm_fwd_prologue(a);                                                            \
    const int ln = (flags & TE_NORM_LAYERNORM) != 0, dy = TE_NORM_DT(dtypes, 2);     \
    switch (ln * 64 + dy) {                                                          \
      CASE(0, BF16) CASE(0, E4M3) CASE(0, E5M2) CASE(1, BF16) CASE(1, E4M3) CASE(1, E5M2) \
      default: break;                                                                \
    }                                                                                \
  }
NORM_WHOLE_ROWS(te_norm_fwd_full16, NORM_FULL_CASE)
NORM_WHOLE_ROWS(te_norm_fwd_warp16, NORM_WARP_CASE)
#undef NORM_WHOLE_ROWS
#undef NORM_WARP_CASE
#undef NORM_FULL_CASE

#define TE_NORM_FWD_KERNEL(name, VEC, STREAM)                                                 \
  extern "C" __global__ void __launch_bounds__(1024)                                          \
      name(TE_KSIG(TE_NORM_FWD_PARAMS)) {                                                     \
    te_pdl_enter();                                                                           \
    const fwd_args a = {TE_KNAMES(TE_NORM_FWD_PARAMS)};                                       \
    norm_fwd_prologue(a);                                                                     \
    norm_fwd<VEC, STREAM, -1, -1, -1, -1, -1>(a);                                             \
  }
TE_NORM_FWD_KERNEL(te_norm_fwd_v8, 8, false)
TE_NORM_FWD_KERNEL(te_norm_fwd_v1, 1, false)
TE_NORM_FWD_KERNEL(te_norm_fwd_stream_v8, 8, true)
TE_NORM_FWD_KERNEL(te_norm_fwd_stream_v1, 1, true)

// ---- backward ----------------------------------------------------------------

struct bwd_args {
  TE_KMEMBERS(TE_NORM_BWD_PARAMS)
};

// DT: one compile-time dtype for x, dy, gamma, dx and extra_grad (or -1).
// One function on purpose (about 175 lines, past the project's 120): a
// thread's rows of x and dy (packed when RAW) and its column partials of
// dgamma and dbeta (accg[], accb[], NVR * VEC each) stay in registers
// across both passes of every row and the block's final reduction.  Split
// into helpers taking those arrays by reference, the code is only as fast
// if nvcc inlines them all and keeps every index constant, which has to be
// shown on the SASS (cuobjdump -sass, every instantiation) before and
// after; until then the phases stay in one body.
// u += (a, b, c, d), lane by lane, each add rounded to nearest.
__device__ __forceinline__ void f4_add(float4 &u, float a, float b, float c, float d) {
  u.x = te_add_rn(u.x, a); u.y = te_add_rn(u.y, b);
  u.z = te_add_rn(u.z, c); u.w = te_add_rn(u.w, d);
}

// CS (te_norm_bwd_fast_cs: DT 16-bit, TE_NORM_BWD_BLOCK threads): dx's
// column sums as stored into a.cs, each thread's in shared memory behind
// the slot-combine area (float4 [vector j][half][thread], rows in order:
// constant offsets from one address, so no registers beyond the fast
// kernel's), the slots then added in slot order as the dgamma partials
// are.
template <int VEC, bool STREAM, int DT, int LNC, int ADDC, bool CS = false>
__device__ __forceinline__ void norm_bwd(const bwd_args &a) {
  extern __shared__ float comb[];
  __shared__ float red[2][2][32];
  const int T = a.tpr, lgT = 31 - __clz(T), t = threadIdx.x & (T - 1), slot = threadIdx.x >> lgT;
  const int R = blockDim.x >> lgT;
  const int nv = a.nv;
  const int dtx = TE_NORM_DT(a.dtypes, 0), dtdy = TE_NORM_DT(a.dtypes, 1),
            dtw = TE_NORM_DT(a.dtypes, 2), dtdx = TE_NORM_DT(a.dtypes, 3),
            dte = TE_NORM_DT(a.dtypes, 4);
  const bool ln = LNC >= 0 ? (LNC != 0) : ((a.flags & TE_NORM_LAYERNORM) != 0);
  const bool add = ADDC >= 0 ? (ADDC != 0) : ((a.flags & TE_NORM_EXTRA_GRAD) != 0);
  const float zc = te_norm_zc(a.flags);
  const unsigned hidden = a.hidden;
  const unsigned nvec = VEC == 8 ? hidden / 8 : hidden;
  const float h = (float)hidden, hinv = te_norm_inv_pow2(h);
  constexpr int NVR = STREAM ? 1 : TE_NORM_BWD_NV_MAX;
  float *wsg = a.ws + (unsigned long long)blockIdx.x * hidden;
  float *wsb = a.ws + ((unsigned long long)a.parts + blockIdx.x) * hidden;
  // Streaming (one row slot a block): each thread adds its columns'
  // partials row after row in shared memory when the host gave enough
  // (TE_NORM_SMEM_PARTIALS), else in the workspace row itself.
  const bool smem_acc = STREAM && (a.flags & TE_NORM_SMEM_PARTIALS);
  float *colg = smem_acc ? comb : wsg, *colb = smem_acc ? comb + hidden : wsb;
  float accg[NVR * VEC], accb[NVR * VEC];
#pragma unroll
  for (int k = 0; k < NVR * VEC; k++) accg[k] = accb[k] = 0.0f;
  static_assert(!CS || (!STREAM && VEC == 8 && (DT == BF16 || DT == F16)),
                "column sums of dx: the 16-bit kernel with the row in registers only");
  constexpr int CB = TE_NORM_BWD_BLOCK;
  // CS: set 0 the column sums of dx, set 1 dbeta's (dy's), in shared
  // memory: 16 registers fewer than accb[], which spilled beside the sums
  float4 *csm = (float4 *)(comb + (R - 1) * T * NVR * VEC * 2);
  float4 *bsm = csm + NVR * 2 * CB;
  if constexpr (CS) {
#pragma unroll
    for (int e = 0; e < NVR * 2; e++) {
      csm[e * CB + threadIdx.x] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      bsm[e * CB + threadIdx.x] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  }
  if (STREAM) {
    for (int j = 0; j < nv; j++) {
      const unsigned vi = (unsigned)j * T + t;
      if (vi < nvec)
        for (int k = 0; k < VEC; k++) {
          colg[vi * VEC + k] = 0.0f;
          if (ln) colb[vi * VEC + k] = 0.0f;
        }
    }
  }
  // RAW: 16-bit x and dy kept packed, xhat and dy recomputed (to the same
  // bits) in the second pass; halves the registers of the row.
  constexpr bool RAW = VEC == 8 && !STREAM && (DT == BF16 || DT == F16);
  int buf = 0;
  for (unsigned long long grp = blockIdx.x; grp * R < a.rows; grp += a.parts) {
    const unsigned long long row = grp * R + slot;
    const bool valid = row < a.rows;
    const unsigned long long base = row * hidden;
    const float rs = valid ? a.rsigma[row] : 0.0f;
    const float m = (ln && valid) ? a.mu[row] : 0.0f;
    float xh[RAW ? VEC : NVR * VEC], g[RAW ? VEC : NVR * VEC];
    uint4 xr[RAW ? NVR : 1], gr[RAW ? NVR : 1], er[RAW ? NVR : 1];
    float s[2] = {0.0f, 0.0f};
    if (RAW) {
      // the extra gradient too, so that a row costs one round trip to memory
#pragma unroll
      for (int j = 0; j < NVR; j++) {
        const unsigned vi = (unsigned)j * T + t;
        if (j < nv && valid && vi < nvec) {
          xr[j] = te_dev_ld8raw<DT>(a.x, base + (unsigned long long)vi * VEC);
          gr[j] = te_dev_ld8raw<DT>(a.dy, base + (unsigned long long)vi * VEC);
          if (add) er[j] = te_dev_ld8raw<DT>(a.extra, base + (unsigned long long)vi * VEC);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < (STREAM ? nv : NVR); j++) {
      const unsigned vi = (unsigned)j * T + t;
      if (!(j < nv && valid && vi < nvec)) continue;
      float *xe = (STREAM || RAW) ? xh : &xh[j * VEC], *ge = (STREAM || RAW) ? g : &g[j * VEC];
      float w[VEC];
      if (RAW) {
        te_dev_unpack8t<DT>(xr[j], xe);
        te_dev_unpack8t<DT>(gr[j], ge);
      } else {
        nv_ld<VEC, DT>(a.x, base + (unsigned long long)vi * VEC, dtx, xe);
        nv_ld<VEC, DT>(a.dy, base + (unsigned long long)vi * VEC, dtdy, ge);
      }
      nv_ld_ro<VEC, DT>(a.gamma, (unsigned long long)vi * VEC, dtw, w);
#pragma unroll
      for (int k = 0; k < VEC; k++) {
        xe[k] = ln ? te_mul_rn(te_sub_rn(xe[k], m), rs) : te_mul_rn(xe[k], rs);
        const float dyg = te_mul_rn(ge[k], te_norm_gamma(w[k], zc));
        if (ln) s[0] = te_add_rn(s[0], dyg);
        s[1] = te_fma_rn(dyg, xe[k], s[1]);
      }
    }
    row_reduce<2>(s, T, buf, red);
    buf ^= 1;
    const float m1 = te_norm_mean_inv(s[0], h, hinv), m2 = te_norm_mean_inv(s[1], h, hinv);
#pragma unroll
    for (int j = 0; j < (STREAM ? nv : NVR); j++) {
      const unsigned vi = (unsigned)j * T + t;
      if (!(j < nv && valid && vi < nvec)) continue;
      float *xe = (STREAM || RAW) ? xh : &xh[j * VEC], *ge = (STREAM || RAW) ? g : &g[j * VEC];
      const unsigned long long off = base + (unsigned long long)vi * VEC;
      float w[VEC], ex[VEC], o[VEC];
      if (STREAM || RAW) {
        if (RAW) {
          te_dev_unpack8t<DT>(xr[j], xe);
          te_dev_unpack8t<DT>(gr[j], ge);
        } else {
          nv_ld<VEC, DT>(a.x, off, dtx, xe);
          nv_ld<VEC, DT>(a.dy, off, dtdy, ge);
        }
#pragma unroll
        for (int k = 0; k < VEC; k++)
          xe[k] = ln ? te_mul_rn(te_sub_rn(xe[k], m), rs) : te_mul_rn(xe[k], rs);
      }
      nv_ld_ro<VEC, DT>(a.gamma, (unsigned long long)vi * VEC, dtw, w);
      if (add && RAW) te_dev_unpack8t<DT>(er[j], ex);
      else if (add) nv_ld<VEC, DT>(a.extra, off, dte, ex);
#pragma unroll
      for (int k = 0; k < VEC; k++) {
        const float dyg = te_mul_rn(ge[k], te_norm_gamma(w[k], zc));
        float d = ln ? te_ln_dx(rs, dyg, xe[k], m1, m2) : te_rms_dx(rs, dyg, xe[k], m2);
        o[k] = add ? te_add_rn(d, ex[k]) : d;
      }
      if constexpr (CS) {
        const uint4 q = te_dev_pack8t<DT>(o);
        *(uint4 *)((uint16_t *)a.dx + off) = q;
        const uint32_t qw[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int h2 = 0; h2 < 2; h2++) {   // the values as stored, one half at a time
          float4 *cp = &csm[(j * 2 + h2) * CB + threadIdx.x];
          float4 u = *cp;
          float r[4];
          te_dev_unpack2t<DT>(qw[2 * h2], r);
          te_dev_unpack2t<DT>(qw[2 * h2 + 1], r + 2);
          f4_add(u, r[0], r[1], r[2], r[3]);
          *cp = u;
        }
      } else {
        nv_st<VEC, DT>(a.dx, off, dtdx, o);
      }
      if (!STREAM) {
#pragma unroll
        for (int k = 0; k < VEC; k++) {
          accg[j * VEC + k] = te_fma_rn(ge[k], xe[k], accg[j * VEC + k]);
          if (ln && !CS) accb[j * VEC + k] = te_add_rn(accb[j * VEC + k], ge[k]);
        }
        if (CS && ln) {
#pragma unroll
          for (int h2 = 0; h2 < 2; h2++) {
            float4 *bp = &bsm[(j * 2 + h2) * CB + threadIdx.x];
            float4 u = *bp;
            f4_add(u, ge[h2 * 4], ge[h2 * 4 + 1], ge[h2 * 4 + 2], ge[h2 * 4 + 3]);
            *bp = u;
          }
        }
      } else {
        for (int k = 0; k < VEC; k++) {
          const unsigned c = vi * VEC + k;
          colg[c] = te_fma_rn(ge[k], xe[k], colg[c]);
          if (ln) colb[c] = te_add_rn(colb[c], ge[k]);
        }
      }
    }
  }
  if (STREAM) {
    if (smem_acc)
      for (int j = 0; j < nv; j++) {
        const unsigned vi = (unsigned)j * T + t;
        if (vi < nvec)
          for (int k = 0; k < VEC; k++) {
            wsg[vi * VEC + k] = colg[vi * VEC + k];
            if (ln) wsb[vi * VEC + k] = colb[vi * VEC + k];
          }
      }
    return;
  }
  // Slots 1 .. R-1 hand their column partials to slot 0, which adds them in
  // slot order and writes the block's partial row.
  if (R > 1) {
    const int per = NVR * VEC;
    if (slot > 0)
#pragma unroll
      for (int e = 0; e < per; e++) {
        comb[(((slot - 1) * per + e) * 2 + 0) * T + t] = accg[e];
        if (!CS) comb[(((slot - 1) * per + e) * 2 + 1) * T + t] = accb[e];
      }
    __syncthreads();
    if (slot == 0)
      for (int s2 = 1; s2 < R; s2++)
#pragma unroll
        for (int e = 0; e < per; e++) {
          accg[e] = te_add_rn(accg[e], comb[(((s2 - 1) * per + e) * 2 + 0) * T + t]);
          if (!CS) accb[e] = te_add_rn(accb[e], comb[(((s2 - 1) * per + e) * 2 + 1) * T + t]);
        }
  }
  if (slot != 0) return;
  if constexpr (CS) {   // the slots' sums, in slot order (R > 1: after the barrier above)
    float *out = a.cs + (unsigned long long)blockIdx.x * hidden;
#pragma unroll
    for (int j = 0; j < NVR; j++) {
      const unsigned vi = (unsigned)j * T + t;
      if (!(j < nv && vi < nvec)) continue;
#pragma unroll
      for (int h2 = 0; h2 < 2; h2++) {
#pragma unroll
        for (int set = 0; set < 2; set++) {
          if (set == 1 && !ln) continue;
          const float4 *src = set ? bsm : csm;
          float4 v = src[(j * 2 + h2) * CB + t];
          for (int s2 = 1; s2 < R; s2++) {
            const float4 w = src[(j * 2 + h2) * CB + s2 * T + t];
            f4_add(v, w.x, w.y, w.z, w.w);
          }
          if (set) {
            accb[j * 8 + h2 * 4] = v.x; accb[j * 8 + h2 * 4 + 1] = v.y;
            accb[j * 8 + h2 * 4 + 2] = v.z; accb[j * 8 + h2 * 4 + 3] = v.w;
          } else {
            *(float4 *)(out + vi * 8 + h2 * 4) = v;
          }
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < NVR; j++) {
    const unsigned vi = (unsigned)j * T + t;
    if (!(j < nv && vi < nvec)) continue;
    if (VEC == 8) {
      float4 *pg = (float4 *)(wsg + vi * 8);
      pg[0] = make_float4(accg[j * 8], accg[j * 8 + 1], accg[j * 8 + 2], accg[j * 8 + 3]);
      pg[1] = make_float4(accg[j * 8 + 4], accg[j * 8 + 5], accg[j * 8 + 6], accg[j * 8 + 7]);
      if (ln) {
        float4 *pb = (float4 *)(wsb + vi * 8);
        pb[0] = make_float4(accb[j * 8], accb[j * 8 + 1], accb[j * 8 + 2], accb[j * 8 + 3]);
        pb[1] = make_float4(accb[j * 8 + 4], accb[j * 8 + 5], accb[j * 8 + 6], accb[j * 8 + 7]);
      }
    } else {
      wsg[vi] = accg[j];
      if (ln) wsb[vi] = accb[j];
    }
  }
}

// The common cases (one 16-bit dtype for everything, VEC 8, rows in
// registers), a kernel of their own as te_norm_fwd_fast, held to 80
// registers (3 blocks of 256 threads an SM; a few bytes spill to L1);
// te_norm_bwd_fast_cs the same with dx's column sums (CS).
template <bool CS>
__device__ __forceinline__ void norm_bwd_fast(const bwd_args &a) {
  const int d = TE_NORM_DT(a.dtypes, 0);
  const int ln = (a.flags & TE_NORM_LAYERNORM) != 0, add = (a.flags & TE_NORM_EXTRA_GRAD) != 0;
  switch (d * 4 + ln * 2 + add) {
#define NORM_BWD_CASE(D, L, A) \
  case D * 4 + L * 2 + A: norm_bwd<8, false, D, L, A, CS>(a); return;
    NORM_BWD_CASE(BF16, 1, 0) NORM_BWD_CASE(BF16, 1, 1) NORM_BWD_CASE(BF16, 0, 0)
    NORM_BWD_CASE(BF16, 0, 1) NORM_BWD_CASE(F16, 1, 0) NORM_BWD_CASE(F16, 1, 1)
    NORM_BWD_CASE(F16, 0, 0) NORM_BWD_CASE(F16, 0, 1)
#undef NORM_BWD_CASE
    default: break;
  }
}

extern "C" __global__ void __maxnreg__(80)
    te_norm_bwd_fast(TE_KSIG(TE_NORM_BWD_PARAMS)) {
  te_pdl_enter();
  norm_bwd_fast<false>({TE_KNAMES(TE_NORM_BWD_PARAMS)});
}
extern "C" __global__ void __maxnreg__(80)
    te_norm_bwd_fast_cs(TE_KSIG(TE_NORM_BWD_PARAMS)) {
  te_pdl_enter();
  norm_bwd_fast<true>({TE_KNAMES(TE_NORM_BWD_PARAMS)});
}

#define TE_NORM_BWD_KERNEL(name, VEC, STREAM)                                                 \
  extern "C" __global__ void __launch_bounds__(TE_NORM_BWD_TMAX)                              \
      name(TE_KSIG(TE_NORM_BWD_PARAMS)) {                                                     \
    te_pdl_enter();                                                                           \
    const bwd_args a = {TE_KNAMES(TE_NORM_BWD_PARAMS)};                                       \
    norm_bwd<VEC, STREAM, -1, -1, -1>(a);                                                     \
  }
TE_NORM_BWD_KERNEL(te_norm_bwd_v8, 8, false)
TE_NORM_BWD_KERNEL(te_norm_bwd_v1, 1, false)
TE_NORM_BWD_KERNEL(te_norm_bwd_stream_v8, 8, true)
TE_NORM_BWD_KERNEL(te_norm_bwd_stream_v1, 1, true)

// Column sums of the workspace: block (8 columns) x (32 groups) x (3
// sums); group g of sum z adds partial rows g, g+32, ... in order, then
// the 32 group sums of a column are butterflied by one warp (warp w: sum
// w / 8, the block's column w % 8).  ws holds nsum arrays [parts][hidden]
// (dgamma, then dbeta); out0/out1 get them in dtypes' slots 0 and 1; cs
// (te_norm_bwd_fast_cs's partials of dx's column sums), when cs_out is
// set, the same way into cs_out (F32, added to it when cs_acc).  A thread
// one sum's dozen or so partials, all loaded before any is added (one
// round trip; with the three sums in one thread, 56 registers held them
// in batches: 11 us a GPT-2 call on an H100, bench/2026-11-26.md, session 33, c3).
extern "C" __global__ void __launch_bounds__(TE_NORM_REDUCE_COLS * TE_NORM_REDUCE_GROUPS * 3)
    te_norm_bwd_reduce(TE_KSIG(TE_NORM_REDUCE_PARAMS)) {
  te_pdl_enter();
  static_assert(TE_NORM_REDUCE_GROUPS == 32, "a warp's lanes are the groups");
  __shared__ float s[3][TE_NORM_REDUCE_GROUPS][TE_NORM_REDUCE_COLS + 1];
  const unsigned c = blockIdx.x * TE_NORM_REDUCE_COLS + threadIdx.x;
  const unsigned g = threadIdx.y, which = threadIdx.z;
  const unsigned lin = (which * TE_NORM_REDUCE_GROUPS + g) * TE_NORM_REDUCE_COLS + threadIdx.x;
  const unsigned lane = lin % 32, warp = lin / 32;
  const bool on = which == 2 ? cs_out != nullptr : which < (out1 ? 2u : 1u);
  const float *src = which == 2 ? cs : ws + (unsigned long long)which * parts * hidden;
  constexpr int PMAX = 16;
  float acc = 0.0f;
  if (on && c < hidden) {
    for (unsigned p = g; p < parts; p += PMAX * TE_NORM_REDUCE_GROUPS) {
      float v[PMAX];
#pragma unroll
      for (int i = 0; i < PMAX; i++) {
        const unsigned q = p + (unsigned)i * TE_NORM_REDUCE_GROUPS;
        v[i] = q < parts ? src[(unsigned long long)q * hidden + c] : 0.0f;
      }
#pragma unroll
      for (int i = 0; i < PMAX; i++)
        if (p + (unsigned)i * TE_NORM_REDUCE_GROUPS < parts) acc = te_add_rn(acc, v[i]);
    }
  }
  s[which][g][threadIdx.x] = acc;
  __syncthreads();
  const unsigned wz = warp / TE_NORM_REDUCE_COLS, wc = warp % TE_NORM_REDUCE_COLS;
  const bool won = wz == 2 ? cs_out != nullptr : wz < (out1 ? 2u : 1u);
  if (!won) return;
  float v = s[wz][lane][wc];
#pragma unroll
  for (int off = 16; off >= 1; off >>= 1) v = te_add_rn(v, __shfl_xor_sync(FULL_MASK, v, off));
  const unsigned col = blockIdx.x * TE_NORM_REDUCE_COLS + wc;
  if (lane == 0 && col < hidden) {
    if (wz < 2) te_st(wz ? out1 : out0, col, TE_NORM_DT(dtypes, wz), v);
    else {
      cs_out[col] = cs_acc ? te_add_rn(cs_out[col], v) : v;
      if (cs_copy) cs_copy[col] = v;
    }
  }
}
