// SPDX-License-Identifier: Apache-2.0
// xent.cu -- fused softmax + cross-entropy (te/loss.h; the modes and the
// math are kernels/common/xent.h's).
//
// te_xent_row: a block of TE_XENT_THREADS a row (blocks loop over rows).
// Each thread walks the row in 16-byte vectors (8 BF16 or 4+4 F32; with
// TE_XENT_VEC) or elements, keeping an online max m, sum-exp s relative to
// m (one rescale per vector) and sum x; then warp shuffles and shared
// memory merge the (m, s, sx) of the block.  The row is read once.
// te_xent_mean: one block, the fixed order of xent.h.
// te_xent_bwd: dx = dloss (exp(x - lse) - ...) written over x (or into
// y, 16/32-bit or FP8 with a scale and the amax), one read and one write
// of each logit; a block takes a slice of a.chunk units
// (16-byte vectors or elements) of a row; ignored rows are zeros (not read).
#include "common/xent.h"
#include "ldst.cuh"
#include "pdl.cuh"
#include "sfu.cuh"

#define XT TE_XENT_THREADS
#define LOG2E 1.4426950408889634f

struct row_k {
  TE_KMEMBERS(TE_XENT_ROW_PARAMS)
};
struct bwd_k {
  TE_KMEMBERS(TE_XENT_BWD_PARAMS)
};

// (m, s) merge: s relative to the larger max.
__device__ __forceinline__ void xent_merge(float &m, float &s, float m2, float s2) {
  float mm = fmaxf(m, m2);
  if (mm == -INFINITY) return;
  s = s * exp2f((m - mm) * LOG2E) + s2 * exp2f((m2 - mm) * LOG2E);
  m = mm;
}

// Adds n values v[] to the thread's (m, s, sx); fixed: m is the given max;
// SX: sx is summed (label smoothing reads it; without, it stays 0).  The
// exponentials are ex2.approx.ftz of one fma each.
template <bool SX>
__device__ __forceinline__ void xent_add(float &m, float &s, float &sx, const float *v, int n,
                                         bool fixed) {
  float vm = m;
  if (!fixed) {
    for (int k = 0; k < n; k++) vm = fmaxf(vm, v[k]);
    if (vm != m) {
      s = m == -INFINITY ? 0.0f : s * exp2f((m - vm) * LOG2E);
      m = vm;
    }
  }
  const float ml = m * LOG2E;
  for (int k = 0; k < n; k++) {
    s += te_ex2_ftz(fmaf(v[k], LOG2E, -ml));
    if constexpr (SX) sx += v[k];
  }
}

// The block's (m, s, sx); every thread gets them.  at_barrier runs in
// every thread once all of them have arrived at the first barrier and
// before any leaves the last (te_xent_train reads its label's logit there).
__shared__ float xent_red[3][XT / 32];   // one a kernel, whichever reduction uses it
template <typename F>
__device__ __forceinline__ void xent_block_reduce(float &m, float &s, float &sx, bool fixed,
                                                  F at_barrier) {
  float *sm = xent_red[0], *ss = xent_red[1], *sxs = xent_red[2];
  for (int o = 16; o > 0; o >>= 1) {
    float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    sx += __shfl_xor_sync(0xffffffffu, sx, o);
    if (fixed) s += s2; else xent_merge(m, s, m2, s2);
  }
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  if (l == 0) { sm[w] = m; ss[w] = s; sxs[w] = sx; }
  __syncthreads();
  at_barrier();
  if (w == 0) {
    m = l < XT / 32 ? sm[l] : -INFINITY;
    s = l < XT / 32 ? ss[l] : 0.0f;
    sx = l < XT / 32 ? sxs[l] : 0.0f;
    if (fixed && l < XT / 32) m = sm[0];
    for (int o = 16; o > 0; o >>= 1) {
      float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
      sx += __shfl_xor_sync(0xffffffffu, sx, o);
      if (fixed) s += s2; else xent_merge(m, s, m2, s2);
    }
    if (l == 0) { sm[0] = m; ss[0] = s; sxs[0] = sx; }
  }
  __syncthreads();
  m = sm[0]; s = ss[0]; sx = sxs[0];
  __syncthreads();
}
__device__ void xent_block_reduce(float &m, float &s, float &sx, bool fixed) {
  xent_block_reduce(m, s, sx, fixed, [] {});
}

__device__ __forceinline__ float xent_label_logit(const row_k &a, unsigned long long t) {
  long long lab = (long long)a.labels[t] - a.vocab_off;
  if (lab < 0 || (unsigned long long)lab >= a.vocab) return 0.0f;
  return te_ld(a.x, t * a.vocab + (uint64_t)lab, a.dtype);
}

// Row t's lse and loss (st: te_xent_label_state of its label).
__device__ __forceinline__ void xent_store_loss(const row_k &a, unsigned long long t, int st,
                                                float lse, float xl, float sx) {
  a.lse[t] = lse;
  a.loss[t] = st == 0 ? 0.0f : st < 0 ? __int_as_float(0x7fc00000)
                                      : te_xent_loss(lse, xl, sx, a.smoothing, (float)a.vocab_total);
}
__device__ __forceinline__ void xent_finish(const row_k &a, unsigned long long t, float m, float s,
                                            float xl, float sx) {
  xent_store_loss(a, t, te_xent_label_state(a.labels[t], a.ignore, a.vocab_total),
                  te_xent_lse(m, s), xl, sx);
}

extern "C" __global__ void __launch_bounds__(XT) te_xent_row(TE_KSIG(TE_XENT_ROW_PARAMS)) {
  te_pdl_enter();
  const row_k a = {TE_KNAMES(TE_XENT_ROW_PARAMS)};
  const int md = a.mode & 0xf;
  if (md == TE_XENT_FINISH) {
    unsigned long long t = (unsigned long long)blockIdx.x * XT + threadIdx.x;
    if (t < a.tokens) {
      const float *w = a.ws + a.tokens + 3 * t;
      xent_finish(a, t, a.ws[t], w[0], w[1], w[2]);
    }
    return;
  }
  const bool fixed = md == TE_XENT_SUMS, sx_on = a.smoothing != 0.0f;
  for (unsigned long long t = blockIdx.x; t < a.tokens; t += gridDim.x) {
    float m = fixed ? a.ws[t] : -INFINITY, s = 0.0f, sx = 0.0f;
    const uint64_t base = t * a.vocab;
    if (a.mode & TE_XENT_VEC) {
      for (uint64_t j = (uint64_t)threadIdx.x * 8; j < a.vocab; j += XT * 8) {
        float v[8];
        te_dev_ld8(a.x, base + j, a.dtype, v);
        if (sx_on) xent_add<true>(m, s, sx, v, 8, fixed);
        else xent_add<false>(m, s, sx, v, 8, fixed);
      }
    } else {
      for (uint64_t j = threadIdx.x; j < a.vocab; j += XT) {
        float v = te_ld(a.x, base + j, a.dtype);
        if (sx_on) xent_add<true>(m, s, sx, &v, 1, fixed);
        else xent_add<false>(m, s, sx, &v, 1, fixed);
      }
    }
    xent_block_reduce(m, s, sx, fixed);
    if (threadIdx.x == 0) {
      if (md == TE_XENT_FULL) {
        xent_finish(a, t, m, s, xent_label_logit(a, t), sx);
      } else if (md == TE_XENT_MAX) {
        a.ws[t] = m;
      } else {
        float *w = a.ws + a.tokens + 3 * t;
        w[0] = s;
        w[1] = xent_label_logit(a, t);
        w[2] = sx;
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(TE_XENT_MEAN_THREADS)
    te_xent_mean(TE_KSIG(TE_XENT_MEAN_PARAMS)) {
  te_pdl_enter();
  __shared__ float part[TE_XENT_MEAN_THREADS];
  __shared__ unsigned cnt[TE_XENT_MEAN_THREADS];
  const unsigned i = threadIdx.x;
  float s = 0.0f;
  unsigned c = 0;
  for (unsigned long long t = i; t < tokens; t += TE_XENT_MEAN_THREADS) {
    if (labels[t] == ignore) continue;
    if (!count_only) s = te_add_rn(s, loss[t]);
    c++;
  }
  part[i] = s;
  cnt[i] = c;
  __syncthreads();
  for (unsigned h = TE_XENT_MEAN_THREADS / 2; h > 0; h /= 2) {
    if (i < h) {
      part[i] = te_xent_tree_step(part[i], part[i + h]);
      cnt[i] += cnt[i + h];
    }
    __syncthreads();
  }
  if (i == 0) {
    if (!count_only) mean[0] = cnt[0] ? te_div_rn(part[0], (float)cnt[0]) : 0.0f;
    mean[1] = (float)cnt[0];
  }
}

// One logit's gradient: te_xent_grad's operations in its order, with the
// row's constants (lse2 = lse log2 e, eps / vtot, 1 - eps) formed once;
// the exponential is one fma and ex2.approx.ftz.  SMOOTH: c1 is not 0
// (p - 0 is p: the subtraction skipped gives the same bits).
template <bool SMOOTH>
__device__ __forceinline__ float xent_grad(float x, float lse2, bool is_label, float c1,
                                           float c2, float scale) {
  float g = te_ex2_ftz(fmaf(x, LOG2E, -lse2));
  if constexpr (SMOOTH) g = te_sub_rn(g, c1);
  if (is_label) g = te_sub_rn(g, c2);
  return te_mul_rn(g, scale);
}

// One batch of a row's copies into shared memory (units ub, ub + NT, ...,
// U of them below u1: NQ 16-byte vectors each), one cp.async group.
template <int NQ, int U, int NT>
__device__ __forceinline__ void xent_copy_batch(uint4 *sm, const uint4 *src, uint64_t ub,
                                                uint64_t u1) {
#pragma unroll
  for (int q = 0; q < U; q++) {
    const uint64_t u = ub + (uint64_t)q * NT;
    if (u >= u1) continue;
#pragma unroll
    for (int h = 0; h < NQ; h++) te_cp_async16(&sm[u * NQ + h], &src[u * NQ + h]);
  }
  te_cp_async_commit();
}

// Units [u0, u1) of row base (VEC: 8-element vectors), TE_XENT_BWD_UNROLL
// a thread loaded before any is used, so that a block keeps UNROLL * 16
// bytes a thread in flight.  st != 1: a constant (0 or NaN), x not read.
// DO: the output's dtype, DT (over x or into a.y) or E4M3/E5M2 (into a.y,
// times osc, the amax of the unscaled values kept in am).
// NT: the threads that share the units; SM (te_xent_train): the row's
// vectors in shared memory at sm, read there instead of from x; nxt (with
// SM): the next row, whose vectors are copied (cp.async) into the slots of
// a batch once the batch's values have been used; SMOOTH: xent_grad's.
// One row's slice and the facts of its gradient: units [u0, u1) of the
// row at base, lse2, the label's column (lab), xent_grad's c1, c2 and
// scale, the label's state st and the output's FP8 scale osc.  Passed by
// value: with a reference nvcc scheduled te_xent_train differently.
struct xent_row {
  uint64_t base, u0, u1;
  float lse2;
  long long lab;
  float c1, c2, scale;
  int st;
  float osc;
};

template <int DT, int DO, int NT, bool SM, bool SMOOTH>
__device__ __forceinline__ void xent_bwd_vec(const bwd_k &a, const xent_row row, float &am,
                                             uint4 *sm, const uint4 *nxt) {
  const uint64_t base = row.base, u0 = row.u0, u1 = row.u1;
  const float lse2 = row.lse2, c1 = row.c1, c2 = row.c2, scale = row.scale, osc = row.osc;
  const long long lab = row.lab;
  const int st = row.st;
  constexpr int NQ = DT == TE_FP8_DT_F32 ? 2 : 1, U = TE_XENT_BWD_UNROLL / NQ;  // 64 B a thread
  constexpr bool F8 = DO == TE_FP8_DT_E4M3 || DO == TE_FP8_DT_E5M2;
  void *out = a.y ? a.y : a.x;
  const float cst = st == 0 ? 0.0f : __int_as_float(0x7fc00000);
  for (uint64_t ub = u0 + threadIdx.x; ub < u1; ub += (uint64_t)U * NT) {
    uint4 r[U][NQ];
#pragma unroll
    for (int q = 0; q < U; q++) {
      const uint64_t u = ub + (uint64_t)q * NT;
      if (u >= u1 || st != 1) continue;
      const uint4 *p = SM ? sm + u * NQ
                          : (const uint4 *)((const char *)a.x + (base + u * 8) * (NQ == 2 ? 4 : 2));
#pragma unroll
      for (int h = 0; h < NQ; h++) r[q][h] = p[h];
    }
#pragma unroll
    for (int q = 0; q < U; q++) {
      const uint64_t u = ub + (uint64_t)q * NT;
      if (u >= u1) continue;
      float v[8];
      if (st == 1) {
        if constexpr (NQ == 2) {
          const uint32_t w[8] = {r[q][0].x, r[q][0].y, r[q][0].z, r[q][0].w,
                                 r[q][1].x, r[q][1].y, r[q][1].z, r[q][1].w};
#pragma unroll
          for (int k = 0; k < 8; k++) v[k] = __uint_as_float(w[k]);
        } else {
          te_dev_unpack8t<DT>(r[q][0], v);
        }
        const long long d = lab - (long long)(u * 8);  // the label's place in this vector
        const int dk = d >= 0 && d < 8 ? (int)d : -1;
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = xent_grad<SMOOTH>(v[k], lse2, k == dk, c1, c2, scale);
      } else {
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = cst;
      }
      if constexpr (F8) {
#pragma unroll
        for (int k = 0; k < 8; k++) {
          am = te_amax_f32(am, v[k]);
          v[k] = te_mul_rn(v[k], osc);
        }
        te_dev_st8t<DO>(out, base + u * 8, v);
      } else {
        te_dev_st8t<DT>(out, base + u * 8, v);
      }
    }
    // the batch's values are used: its slots take the next row's
    if (SM && nxt) xent_copy_batch<NQ, U, NT>(sm, nxt, ub, u1);
  }
}

template <int DT, int NT, bool SM, bool SMOOTH>
__device__ __forceinline__ void xent_bwd_vec_to(const bwd_k &a, const xent_row w, float &am,
                                                uint4 *sm, const uint4 *nxt) {
  if (!a.y || a.ydtype == DT)
    xent_bwd_vec<DT, DT, NT, SM, SMOOTH>(a, w, am, sm, nxt);
  else if (a.ydtype == TE_FP8_DT_E4M3)
    xent_bwd_vec<DT, TE_FP8_DT_E4M3, NT, SM, SMOOTH>(a, w, am, sm, nxt);
  else
    xent_bwd_vec<DT, TE_FP8_DT_E5M2, NT, SM, SMOOTH>(a, w, am, sm, nxt);
}

// The row's gradient into its output type; lse2 = lse log2 e (as
// te_xent_grad forms it).
template <int DT, int NT = TE_XENT_BWD_THREADS, bool SM = false>
__device__ __forceinline__ void xent_bwd_vec_out(const bwd_k &a, const xent_row w, float &am,
                                                 uint4 *sm = nullptr, const uint4 *nxt = nullptr) {
  if (w.c1 != 0.0f)
    xent_bwd_vec_to<DT, NT, SM, true>(a, w, am, sm, nxt);
  else
    xent_bwd_vec_to<DT, NT, SM, false>(a, w, am, sm, nxt);
}

// Blocks (chunk blockIdx.x of a.chunk units, rows blockIdx.y, +
// gridDim.y, ...): every block a near-equal slice of one row, so the grid
// is many short blocks that the hardware spreads evenly over the SMs.
extern "C" __global__ void __launch_bounds__(TE_XENT_BWD_THREADS, 4)
    te_xent_bwd(TE_KSIG(TE_XENT_BWD_PARAMS)) {
  te_pdl_enter();
  const bwd_k a = {TE_KNAMES(TE_XENT_BWD_PARAMS)};
  const float vtot = (float)a.vocab_total;
  const float c1 = te_div_rn(a.smoothing, vtot), c2 = te_sub_rn(1.0f, a.smoothing);
  const bool vec = (a.flags & TE_XENT_VEC) != 0;
  const uint64_t units = vec ? a.vocab / 8 : a.vocab;
  const uint64_t u0 = (uint64_t)blockIdx.x * a.chunk;
  const uint64_t u1 = u0 + a.chunk < units ? u0 + a.chunk : units;
  void *out = a.y ? a.y : a.x;
  const int od = a.y ? a.ydtype : a.dtype;
  const float osc = (a.y && te_dt_is_fp8(od) && a.scale) ? *a.scale : 1.0f;
  if (a.scale_inv && a.scale && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0)
    *a.scale_inv = te_fp8_scale_inv(*a.scale);
  float am = 0.0f;
  for (unsigned long long t = blockIdx.y; t < a.tokens; t += gridDim.y) {
    const uint64_t base = t * a.vocab;
    const int st = te_xent_label_state(a.labels[t], a.ignore, a.vocab_total);
    const float scale = (a.flags & TE_XENT_DLOSS_MEAN)
                            ? (a.mean[1] > 0.0f ? te_div_rn(a.dloss[0], a.mean[1]) : 0.0f)
                            : a.dloss[t];
    const long long lab = (long long)a.labels[t] - a.vocab_off;
    const float lse2 = te_xent_lse2(a.lse[t]);
    if (vec) {
      const xent_row w = {base, u0, u1, lse2, lab, c1, c2, scale, st, osc};
      if (a.dtype == TE_FP8_DT_BF16)
        xent_bwd_vec_out<TE_FP8_DT_BF16>(a, w, am);
      else if (a.dtype == TE_FP8_DT_F16)
        xent_bwd_vec_out<TE_FP8_DT_F16>(a, w, am);
      else
        xent_bwd_vec_out<TE_FP8_DT_F32>(a, w, am);
    } else {
      const float nan = __int_as_float(0x7fc00000);
      for (uint64_t j = u0 + threadIdx.x; j < u1; j += TE_XENT_BWD_THREADS) {
        float v = st == 1 ? te_ld(a.x, base + j, a.dtype) : 0.0f;
        v = st == 0 ? 0.0f
            : st < 0 ? nan
                     : xent_grad<true>(v, lse2, (long long)j == lab, c1, c2, scale);
        am = te_amax_f32(am, v);
        te_st(out, base + j, od, te_mul_rn(v, osc));
      }
    }
  }
  if (a.amax) te_dev_block_amax_f(a.amax, am);
}

// The forward and backward of each row in one block (kernels/common/xent.h):
// te_xent_row's FULL pass (each thread the same vectors in the same order,
// the same merge: the same loss and lse bits), keeping the row in shared
// memory, then te_xent_bwd's per-vector gradient from that lse (the same
// bits) read from there: the logits leave memory once.  The rows come in
// with cp.async, the whole row in flight, the next one copied during the
// gradient pass of the one before, a group a batch so that the sums start
// as the first batches land.  The label's logit is read from shared memory
// inside the reduction's barriers (every copy landed, none begun into its
// slot), and the row's scalars are loaded before its logits are waited for.
struct train_k {
  TE_KMEMBERS(TE_XENT_TRAIN_PARAMS)
};

// A row's copies into shared memory in xent_bwd_vec's batches (units tid +
// (U k + q) XT), one cp.async group a batch: the sums start on the first
// batches while the last are in flight.
template <int NQ>
__device__ __forceinline__ void xent_row_copy(uint4 *sm, const uint4 *row, uint64_t units) {
  constexpr int U = TE_XENT_BWD_UNROLL / NQ;
  for (uint64_t ub = threadIdx.x; ub < units; ub += (uint64_t)U * XT)
    xent_copy_batch<NQ, U, XT>(sm, row, ub, units);
}

// One element of a 16-bit or F32 row kept in shared memory.
template <int DT>
__device__ __forceinline__ float xent_sm_elem(const uint4 *sm, uint64_t i) {
  if constexpr (DT == TE_FP8_DT_F32) {
    return ((const float *)sm)[i];
  } else {
    const uint32_t w = ((const uint16_t *)sm)[i];
    float v[2];
    te_dev_unpack2t<DT>(w, v);
    return v[0];
  }
}

template <int DT, bool SX>
__device__ __forceinline__ void xent_train_rows(const train_k &a, const row_k &r, const bwd_k &b,
                                                float c1, float c2, float osc, float &am,
                                                uint4 *sm) {
  constexpr int NQ = DT == TE_FP8_DT_F32 ? 2 : 1, U = TE_XENT_BWD_UNROLL / NQ;
  const uint64_t units = a.vocab / 8;
  const size_t rowb = (size_t)a.vocab * (NQ == 2 ? 4 : 2);
  // the thread's batches of a row (the same for every row)
  const int nb = threadIdx.x < units ? (int)((units - threadIdx.x + U * XT - 1) / (U * XT)) : 0;
  // each thread copies its vectors to shared memory and reads back only
  // those, so its own waits suffice: the first row here, each next one
  // during the gradient pass of the one before
  if (blockIdx.x < a.tokens)
    xent_row_copy<NQ>(sm, (const uint4 *)((const char *)a.x + blockIdx.x * rowb), units);
  // the mean's scale is the same for every row: formed once
  const bool mean = (a.flags & TE_XENT_DLOSS_MEAN) != 0;
  const float mscale =
      mean ? (a.mean[1] > 0.0f ? te_div_rn(a.dloss[0], a.mean[1]) : 0.0f) : 0.0f;
  for (unsigned long long t = blockIdx.x; t < a.tokens; t += gridDim.x) {
    // the row's scalars are loaded before its logits are waited for
    const int label = a.labels[t];
    const float scale = mean ? mscale : a.dloss[t];
    float m = -INFINITY, s = 0.0f, sx = 0.0f;
    const uint64_t base = t * a.vocab;
    int j = 0;
    for (uint64_t u = threadIdx.x; u < units; u += XT, j++) {
      if (j % U == 0) te_cp_async_wait(nb - 1 - j / U);
      float v[8];
      if constexpr (NQ == 2) {
        const uint4 q0 = sm[u * 2], q1 = sm[u * 2 + 1];
        const uint32_t w[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = __uint_as_float(w[k]);
      } else {
        te_dev_unpack8t<DT>(sm[u], v);
      }
      xent_add<SX>(m, s, sx, v, 8, false);
    }
    // the label's logit from the row in shared memory: whole once every
    // thread has arrived at the reduction's first barrier, and no slot is
    // copied into before its last
    const long long lab = label;
    float xl = 0.0f;
    xent_block_reduce(m, s, sx, false, [&] {
      if (threadIdx.x == 0 && lab >= 0 && (unsigned long long)lab < a.vocab)
        xl = xent_sm_elem<DT>(sm, (uint64_t)lab);
    });
    const float lse = te_xent_lse(m, s);
    const int st = te_xent_label_state(label, a.ignore, a.vocab_total);
    if (threadIdx.x == 0) xent_store_loss(r, t, st, lse, xl, sx);
    const float lse2 = te_xent_lse2(lse);
    // the gradient from shared memory; each batch's slots then take the
    // next row's vectors (its reads overlap this row's writes)
    const unsigned long long tn = t + gridDim.x;
    const uint4 *nxt = tn < a.tokens ? (const uint4 *)((const char *)a.x + tn * rowb) : nullptr;
    const xent_row w = {base, 0, units, lse2, lab, c1, c2, scale, st, osc};
    xent_bwd_vec_out<DT, XT, true>(b, w, am, sm, nxt);
  }
}

template <bool SX>
__device__ __forceinline__ void xent_train_dt(const train_k &a, const row_k &r, const bwd_k &b,
                                              float c1, float c2, float osc, float &am,
                                              uint4 *sm) {
  if (a.dtype == TE_FP8_DT_BF16)
    xent_train_rows<TE_FP8_DT_BF16, SX>(a, r, b, c1, c2, osc, am, sm);
  else if (a.dtype == TE_FP8_DT_F16)
    xent_train_rows<TE_FP8_DT_F16, SX>(a, r, b, c1, c2, osc, am, sm);
  else
    xent_train_rows<TE_FP8_DT_F32, SX>(a, r, b, c1, c2, osc, am, sm);
}

extern "C" __global__ void __launch_bounds__(XT) te_xent_train(TE_KSIG(TE_XENT_TRAIN_PARAMS)) {
  te_pdl_enter();
  extern __shared__ uint4 xent_row_sm[];
  const train_k a = {TE_KNAMES(TE_XENT_TRAIN_PARAMS)};
  const row_k r = {a.x, a.labels, a.loss, a.lse, nullptr, a.tokens, a.vocab, 0ll,
                   a.vocab_total, a.ignore, a.smoothing, TE_XENT_FULL | TE_XENT_VEC, a.dtype};
  const bwd_k b = {a.x, a.labels, a.lse, a.dloss, a.mean, a.tokens, a.vocab, 0ull, 0ll,
                   a.vocab_total, a.ignore, a.smoothing, a.dtype, a.flags | TE_XENT_VEC,
                   a.y, a.scale, a.amax, a.scale_inv, a.ydtype};
  const float vtot = (float)a.vocab_total;
  const float c1 = te_div_rn(a.smoothing, vtot), c2 = te_sub_rn(1.0f, a.smoothing);
  const int od = a.y ? a.ydtype : a.dtype;
  const float osc = (a.y && te_dt_is_fp8(od) && a.scale) ? *a.scale : 1.0f;
  if (a.scale_inv && a.scale && blockIdx.x == 0 && threadIdx.x == 0)
    *a.scale_inv = te_fp8_scale_inv(*a.scale);
  float am = 0.0f;
  if (a.smoothing != 0.0f)
    xent_train_dt<true>(a, r, b, c1, c2, osc, am, xent_row_sm);
  else
    xent_train_dt<false>(a, r, b, c1, c2, osc, am, xent_row_sm);
  if (a.amax) te_dev_block_amax_f(a.amax, am);
}
