// SPDX-License-Identifier: Apache-2.0
// attention.cu -- libte's flash-attention kernels: forward and backward of
// softmax(scale Q K^T) V over sequences packed without padding, BF16 or
// F16, head_dim a multiple of 8 up to 128 (tiles DP = 64 or 128 wide, the
// columns past head_dim zeros in shared memory).  Parameters and the mask
// rule: kernels/common/attention.h.
//
// Forward (te_attn_fwd_d64/_d128): a block owns TE_ATTN_FWD_BM = 128
// query rows of one (sequence, head), 8 warps of 16 rows; K and V tiles of
// TE_ATTN_FWD_BN = 64 keys stream through two shared-memory buffers
// (cp.async, the next tile loading while this one computes).  S = Q K^T
// and O += P V on the tensor cores (mma.sync m16n8k16, fragments loaded
// with ldmatrix from XOR-swizzled tiles); the softmax is online, in base 2
// with the scale folded into log2(e); P is rounded to the input dtype for
// the P V product.  Tiles that no row of a warp masks skip the mask;
// exponentials are ex2.approx.ftz; blockIdx.x counts the query blocks
// from the last, so the longest (causal) blocks start first.
// te_attn_fwd2_d64/_d128 compute the same with 4 warps of 32 rows at two
// blocks an SM (its comment below); attn_libte.c launches it where its
// grid fits and keeps te_attn_fwd for the rest.
//
// Backward: te_attn_bwd_prep takes D = rowsum(dO * O) per (token, head) and
// zeroes dq_acc; te_attn_bwd_d64/_d128 give a block 64 keys of one
// (sequence, KV head) and loop over the query heads of the group and the
// 64-row query tiles that see those keys: it recomputes P from lse, takes
// dP = dO V^T, dS = P (dP - D) scale, keeps dV += P^T dO and dK += dS^T Q
// in registers (each warp 16 keys) and adds dQ = dS K into dq_acc with
// 16-byte reductions (red.global.add.v4.f32, lane pairs swapping halves
// of their fragments); te_attn_bwd_dq converts dq_acc to dQ's dtype.  The
// next query tile loads (cp.async) into staging buffers while one
// computes, and is copied into place at the start of its turn.
// te_attn_bwd2_d64/_d128 compute the same with 8 warps of 16 keys and
// P kept in registers (kernels/attention_bwd2.cuh); attn_libte.c launches
// them where their grid fits and keeps te_attn_bwd for the rest.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "common/attention.h"
#include "common/attention_params.h"

#include "async.cuh"
#include "pdl.cuh"
#include "sfu.cuh"

// ---- small helpers -----------------------------------------------------------------------

// c += a b for one 16x8x16 tile (row.col, f32 accumulators).
template <int DT>
__device__ __forceinline__ void mma16816(float *c, const uint32_t *a, const uint32_t *b) {
  if (DT == BF16)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void ldsm_x4(uint32_t *r, const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t *r, const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
// *a += (x, y, z, w) without a result (a 16-byte aligned float4).
__device__ __forceinline__ void red_add4(float *a, float x, float y, float z, float w) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(a), "f"(x), "f"(y),
               "f"(z), "f"(w)
               : "memory");
}
// 4 bytes global -> shared; src_bytes 0 writes zeros.
__device__ __forceinline__ void cp_async4(void *dst, const void *src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(src_bytes));
}

// Element offset of (row, 8-element chunk) in a tile of rows of W
// elements: chunk c of row r sits at chunk c ^ (r & 7), so the 8 rows an
// ldmatrix reads at one logical chunk hit 8 different bank groups.
template <int W> __device__ __forceinline__ int swz(int row, int chunk) {
  return row * W + ((chunk ^ (row & 7)) << 3);
}

// Loads rows [r0, r0 + R) of head h of a view into a swizzled R x DP tile:
// rows past nrows and columns past d are zeros.
template <int R, int DP, int NT, typename T>
__device__ __forceinline__ void load_tile(T *tile, const T *base, long long ts, long long hs,
                                          long long t0, int h, int nrows, int d) {
  const int chunks = DP / 8;
  for (int i = threadIdx.x; i < R * chunks; i += NT) {
    int r = i / chunks, c = i % chunks;
    bool ok = r < nrows && c * 8 < d;
    const T *src = ok ? base + (t0 + r) * ts + (long long)h * hs + c * 8 : base;
    cp_async16(tile + swz<DP>(r, c), src, ok ? 16 : 0);
  }
}

// The keys [lo, hi) row i (of lq) sees among lk (the mask rule).
__device__ __forceinline__ void key_range(const te_attn_params &p, int i, int lq, int lk, int &lo,
                                          int &hi) {
  long long a, b;
  te_attn_key_range(&p, i, lq, lk, &a, &b);
  lo = (int)a;
  hi = (int)b;
}

// A thread's two columns of each 8-column block of O row r (o[4 j + e],
// e = 0, 1: columns j * 8 + tq * 2 + e) divided by the row sum, and the
// row's lse: l is the thread's part of the sum (added over the quad here,
// so every lane calls), m the row max in base 2.  Rows past lq are not
// written.
// Where a thread's output row lies: the sequence's first query q0, the
// row r of its lq, head h, the thread's column pair tq.
struct o_row_at {
  int q0, r, lq, h, tq;
};
template <int DT, int NO>
__device__ __forceinline__ void store_o_row(const te_attn_params &p, const float *o, float l,
                                            float m, const o_row_at at) {
  const int q0 = at.q0, r = at.r, lq = at.lq, h = at.h, tq = at.tq;
  typedef typename elem<DT>::t T;
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  if (r >= lq) return;
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  T *orow = static_cast<T *>(p.o) + (long long)(q0 + r) * p.o_ts + (long long)h * p.o_hs;
#pragma unroll
  for (int j = 0; j < NO; j++) {
    const int col = j * 8 + tq * 2;
    if (col < p.head_dim)
      *reinterpret_cast<uint32_t *>(orow + col) =
          elem<DT>::pack(o[4 * j] * inv, o[4 * j + 1] * inv);
  }
  if (p.lse && tq == 0)
    p.lse[(long long)h * p.total_q + q0 + r] =
        l > 0.0f ? (m + log2f(l)) * 0.6931471805599453f : -INFINITY;
}

// The bm-row query tiles of a sequence (lq queries, lk keys) that see any
// of keys [n0, n0 + bn): nqt tiles from row ibeg.  Causal needs i >= key -
// shift, a window i <= key + window - shift (shift = lk - lq).
__device__ __forceinline__ void key_block_queries(const te_attn_params &p, int n0, int bn,
                                                  int lq, int lk, int bm, int &ibeg, int &nqt) {
  const int shift = lk - lq;
  ibeg = p.causal ? max(0, n0 - shift) : 0;
  int iend = lq;
  if (p.window >= 0)
    iend = (int)min((long long)lq, (long long)min(n0 + bn, lk) - 1 + p.window - shift + 1);
  ibeg = (ibeg / bm) * bm;
  nqt = iend > ibeg ? (iend - ibeg + bm - 1) / bm : 0;
}

// Whether query i (of lq) sees key (of lk) under the mask rule, shift = lk - lq.
__device__ __forceinline__ bool pair_seen(const te_attn_params &p, int key, int i, int lq, int lk,
                                          int shift) {
  // bitwise: no branch per element
  return (i < lq) & (key < lk) & (!p.causal | (key <= i + shift)) &
         ((p.window < 0) | ((long long)key >= (long long)i + shift - p.window));
}

// dK and dV of the warp's 16 keys (rows g and g + 8 from key kw): the
// m16n8 accumulator quads of NJ 8-column groups, dk[4 j + e], in the
// tensors' dtype, columns past d (head_dim) and keys past lk not written.
// Where a warp's keys lie: the sequence's first key k0, the warp's kw of
// its lk, the key/value head kvh, head_dim d, the thread's row g and
// column pair tq.
struct dkdv_at {
  int k0, kw, lk, kvh, d, g, tq;
};
template <int DT, int NJ>
__device__ __forceinline__ void store_dkdv(const te_attn_params &p, const float *dk,
                                           const float *dv, const dkdv_at at) {
  const int k0 = at.k0, kw = at.kw, lk = at.lk, kvh = at.kvh, d = at.d, g = at.g, tq = at.tq;
  typedef typename elem<DT>::t T;
  T *DK = static_cast<T *>(p.dk), *DV = static_cast<T *>(p.dv);
#pragma unroll
  for (int hr = 0; hr < 2; hr++) {
    const int key = kw + g + hr * 8;
    if (key >= lk) continue;
    T *dkr = DK + (long long)(k0 + key) * p.dk_ts + (long long)kvh * p.dk_hs;
    T *dvr = DV + (long long)(k0 + key) * p.dv_ts + (long long)kvh * p.dv_hs;
#pragma unroll
    for (int j = 0; j < NJ; j++) {
      const int col = j * 8 + tq * 2;
      if (col < d) {
        *reinterpret_cast<uint32_t *>(dkr + col) =
            elem<DT>::pack(dk[4 * j + 2 * hr], dk[4 * j + 2 * hr + 1]);
        *reinterpret_cast<uint32_t *>(dvr + col) =
            elem<DT>::pack(dv[4 * j + 2 * hr], dv[4 * j + 2 * hr + 1]);
      }
    }
  }
}

// ---- fixed lengths ---------------------------------------------------------------------------

extern "C" __global__ void te_attn_seqlens(TE_KSIG(TE_ATTN_SEQLENS_PARAMS)) {
  te_pdl_enter();
  for (int b = threadIdx.x; b <= batch; b += blockDim.x) {
    cu_q[b] = b * len_q;
    cu_kv[b] = b * len_kv;
  }
}

// ---- the caller's lengths ----------------------------------------------------------------------

// The first entry seen out of bounds goes to *status (mapped host memory);
// the attention kernels clamp on their own (te_attn_seq_of), so this one
// only reports.
__device__ __forceinline__ void attn_report(unsigned long long *st, unsigned long long w) {
  if (w && *(volatile unsigned long long *)st == 0) {
    *(volatile unsigned long long *)st = w;
    __threadfence_system();
  }
}

extern "C" __global__ void te_attn_seqlens_check(TE_KSIG(TE_ATTN_CHECK_PARAMS)) {
  te_pdl_enter();
  for (int i = threadIdx.x; i <= batch; i += blockDim.x) {
    attn_report(status, te_attn_seqlens_fault(cu_q, i, total_q, max_q, 0));
    attn_report(status, te_attn_seqlens_fault(cu_kv, i, total_kv, max_kv, 1));
  }
}

// ---- forward ---------------------------------------------------------------------------------

#define FWD_WARPS (TE_ATTN_FWD_THREADS / 32)

template <int DT, int DP>
__device__ __forceinline__ void attn_fwd(const te_attn_params &p) {
  typedef typename elem<DT>::t T;
  constexpr int BM = TE_ATTN_FWD_BM, BN = TE_ATTN_FWD_BN, NT = TE_ATTN_FWD_THREADS;
  constexpr int NTILE_S = BN / 8, NTILE_O = DP / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  T *sq = reinterpret_cast<T *>(smem);
  T *sk = sq + BM * DP;  // two buffers
  T *sv = sk + 2 * BN * DP;

  // the last query blocks, which see the most keys when causal, first
  const int b = blockIdx.z, h = blockIdx.y, m0 = (gridDim.x - 1 - blockIdx.x) * BM;
  const te_attn_seq seqq = te_attn_seq_of(p.cu_q, b, p.total_q, p.max_q);
  const int q0 = seqq.t0, lq = seqq.len;
  if (m0 >= lq) return;
  const te_attn_seq seqk = te_attn_seq_of(p.cu_kv, b, p.total_kv, p.max_kv);
  const int k0 = seqk.t0, lk = seqk.len;
  const int kvh = h / (p.heads / p.kv_heads), d = p.head_dim;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const T *Q = static_cast<const T *>(p.q), *K = static_cast<const T *>(p.k),
          *V = static_cast<const T *>(p.v);

  // the keys any row of the block sees
  int lo0, hi0, lo1, hi1;
  key_range(p, m0, lq, lk, lo0, hi0);
  key_range(p, min(m0 + BM, lq) - 1, lq, lk, lo1, hi1);
  const int kstart = (lo0 / BN) * BN, kend = hi1;
  const int ntiles = kend > kstart ? (kend - kstart + BN - 1) / BN : 0;

  load_tile<BM, DP, NT>(sq, Q, p.q_ts, p.q_hs, q0 + m0, h, lq - m0, d);
  if (ntiles > 0) {
    load_tile<BN, DP, NT>(sk, K, p.k_ts, p.k_hs, k0 + kstart, kvh, lk - kstart, d);
    load_tile<BN, DP, NT>(sv, V, p.v_ts, p.v_hs, k0 + kstart, kvh, lk - kstart, d);
  }
  cp_async_commit();

  // this thread's rows: g and g + 8 of the warp's 16
  const int g = lane / 4, tq = lane % 4;
  const int r0 = m0 + warp * 16 + g, r1 = r0 + 8;
  int rlo[2], rhi[2];
  key_range(p, r0, lq, lk, rlo[0], rhi[0]);
  key_range(p, r1, lq, lk, rlo[1], rhi[1]);
  if (r0 >= lq) rhi[0] = rlo[0] = 0;
  if (r1 >= lq) rhi[1] = rlo[1] = 0;

  float o[NTILE_O][4];
#pragma unroll
  for (int j = 0; j < NTILE_O; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f};
  uint32_t qf[DP / 16][4];

  for (int t = 0; t < ntiles; t++) {
    const int buf = t & 1, n0 = kstart + t * BN;
    if (t + 1 < ntiles) {
      const int nb = buf ^ 1, n1 = n0 + BN;
      load_tile<BN, DP, NT>(sk + nb * BN * DP, K, p.k_ts, p.k_hs, k0 + n1, kvh, lk - n1, d);
      load_tile<BN, DP, NT>(sv + nb * BN * DP, V, p.v_ts, p.v_hs, k0 + n1, kvh, lk - n1, d);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (t == 0) {
#pragma unroll
      for (int kk = 0; kk < DP / 16; kk++)
        ldsm_x4(qf[kk], sq + swz<DP>(warp * 16 + (lane % 16), kk * 2 + lane / 16));
    }
    const T *tk = sk + buf * BN * DP, *tv = sv + buf * BN * DP;

    // S = Q K^T for the warp's 16 rows x 64 keys
    float s[NTILE_S][4];
#pragma unroll
    for (int j = 0; j < NTILE_S; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < DP / 16; kk++) {
#pragma unroll
      for (int jn = 0; jn < NTILE_S; jn += 2) {
        uint32_t kf[4];
        const int m = lane / 8;
        ldsm_x4(kf, tk + swz<DP>(jn * 8 + (m / 2) * 8 + lane % 8, kk * 2 + (m % 2)));
        mma16816<DT>(s[jn], qf[kk], kf);
        mma16816<DT>(s[jn + 1], qf[kk], kf + 2);
      }
    }
    // mask, online softmax in base 2 (the max taken on the raw scores, the
    // scale folded into the exponent's FMA)
    float mnew[2];
    // no key of the tile masked for any row of the warp (rows past lq see
    // no keys): the mask is skipped
    const bool whole = __all_sync(0xffffffffu, n0 >= max(rlo[0], rlo[1]) &&
                                                   n0 + BN <= min(rhi[0], rhi[1]));
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
      float mx = -INFINITY;  // of the raw scores (scale > 0)
      if (whole) {
#pragma unroll
        for (int j = 0; j < NTILE_S; j++)
#pragma unroll
          for (int e = 0; e < 2; e++) mx = fmaxf(mx, s[j][hr * 2 + e]);
      } else {
#pragma unroll
        for (int j = 0; j < NTILE_S; j++)
#pragma unroll
          for (int e = 0; e < 2; e++) {
            const int key = n0 + j * 8 + tq * 2 + e;
            float v = s[j][hr * 2 + e];
            v = (key >= rlo[hr] && key < rhi[hr]) ? v : -INFINITY;
            s[j][hr * 2 + e] = v;
            mx = fmaxf(mx, v);
          }
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      mnew[hr] = fmaxf(mrow[hr], mx * p.scale_log2);
    }
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
      const float mu = mnew[hr] == -INFINITY ? 0.0f : mnew[hr];
      const float corr = te_ex2_ftz(mrow[hr] - mu);
      mrow[hr] = mnew[hr];
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < NTILE_S; j++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
          float pe = te_ex2_ftz(fmaf(s[j][hr * 2 + e], p.scale_log2, -mu));
          s[j][hr * 2 + e] = pe;
          sum += pe;
        }
      lrow[hr] = lrow[hr] * corr + sum;
#pragma unroll
      for (int j = 0; j < NTILE_O; j++) {
        o[j][hr * 2] *= corr;
        o[j][hr * 2 + 1] *= corr;
      }
    }
    // O += P V
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++) {
      uint32_t pf[4];
      pf[0] = elem<DT>::pack(s[2 * kk][0], s[2 * kk][1]);
      pf[1] = elem<DT>::pack(s[2 * kk][2], s[2 * kk][3]);
      pf[2] = elem<DT>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pf[3] = elem<DT>::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int jn = 0; jn < NTILE_O; jn += 2) {
        uint32_t vf[4];
        const int m = lane / 8;
        ldsm_x4_t(vf, tv + swz<DP>(kk * 16 + (m % 2) * 8 + lane % 8, jn + m / 2));
        mma16816<DT>(o[jn], pf, vf);
        mma16816<DT>(o[jn + 1], pf, vf + 2);
      }
    }
    __syncthreads();  // the buffer is refilled two tiles on
  }
  cp_async_wait<0>();  // no tile: Q's copy is still outstanding

  // the row sums over the quad, then O / l and lse
#pragma unroll
  for (int hr = 0; hr < 2; hr++)
    store_o_row<DT, NTILE_O>(p, &o[0][hr * 2], lrow[hr], mrow[hr], {q0, hr ? r1 : r0, lq, h, tq});
}

// head_dim 64 fits two blocks an SM (128 registers, 48 KiB each)
#define FWD_KERNEL(name, DP, MINB)                                                    \
  extern "C" __global__ void __launch_bounds__(TE_ATTN_FWD_THREADS, MINB)             \
      name(TE_KSIG(TE_ATTN_PARAMS)) {                                                 \
    te_pdl_enter();                                                                   \
    if (p.qkv_dt == BF16) attn_fwd<BF16, DP>(p);                                      \
    else attn_fwd<F16, DP>(p);                                                        \
  }
FWD_KERNEL(te_attn_fwd_d64, 64, 2)
FWD_KERNEL(te_attn_fwd_d128, 128, 1)

// ---- forward, 4 warps of 32 rows --------------------------------------------------------------
//
// te_attn_fwd2_d64/_d128: the same result as te_attn_fwd_*, a block of
// TE_ATTN_FWD2_BM = 128 query rows in 4 warps of 32 (two 16-row MMA tiles
// each: every K and V fragment read from shared memory feeds two MMAs, a
// third less shared-memory traffic than 8 warps of 16 rows) at two blocks
// an SM.  Q stays in shared memory (its fragments reloaded every tile: O's
// 128 accumulators at head_dim 128 leave no room for it in registers).
// Tiles are padded rows (DP + 8 elements) rather than swizzled: ldmatrix
// stays conflict-free and every fragment's address is a lane's base plus
// an immediate, which keeps the registers for the accumulators.  A warp
// skips a tile none of its rows sees (past the causal diagonal) and the
// mask on a tile all its rows see whole; rows past the sequence's end
// compute on zero rows of Q and are not written.  The query block is
// blockIdx.z, counted from the last: the longest blocks of every head run
// first.

// A thread's share of an R-row tile load, 16 bytes a row every NT / (DP /
// 8) rows: its source row (first row, its column chunk), the row step,
// and the rows it has left (<= 0, or a chunk past head_dim: zeros).
template <int R, int DP, int NT, typename T>
__device__ __forceinline__ void load_rows(uint32_t dst, const T *src, long long ts, int left) {
  constexpr int RS = NT / (DP / 8);
  const long long step = RS * ts;
#pragma unroll
  for (int it = 0; it < R / RS; it++) {
    const bool ok = it * RS < left;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                     dst + it * RS * (DP + 8) * 2),
                 "l"(src), "r"(ok ? 16 : 0));
    if (it * RS + RS < left) src += step;  // stays inside the view
  }
}
__device__ __forceinline__ void ldsm_x4_at(uint32_t *r, uint32_t a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldsm_x4_t_at(uint32_t *r, uint32_t a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// Key range [lo, hi) of row i (lq rows, lk keys): te_attn_key_range.
__device__ __forceinline__ void key_range_int(const te_attn_params &p, int i, int lq, int lk,
                                              int &lo, int &hi) {
  const int diag = i + lk - lq;
  hi = p.causal ? min(diag + 1, lk) : lk;
  hi = max(hi, 0);
  lo = p.window >= 0 ? (int)max(0LL, (long long)diag - p.window) : 0;
  lo = min(lo, hi);
}

template <int DT, int DP, int BN>
__device__ __forceinline__ void attn_fwd2(const te_attn_params &p) {
  typedef typename elem<DT>::t T;
  constexpr int BM = TE_ATTN_FWD2_BM, NT = TE_ATTN_FWD2_THREADS, PITCH = DP + 8;
  constexpr int NS = BN / 8, NO = DP / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  T *sq = reinterpret_cast<T *>(smem);
  T *sk = sq + BM * PITCH;  // two buffers
  T *sv = sk + 2 * BN * PITCH;

  const int h = blockIdx.x, b = blockIdx.y, m0 = (gridDim.z - 1 - blockIdx.z) * BM;
  const te_attn_seq seqq = te_attn_seq_of(p.cu_q, b, p.total_q, p.max_q);
  const int q0 = seqq.t0, lq = seqq.len;
  if (m0 >= lq) return;
  const te_attn_seq seqk = te_attn_seq_of(p.cu_kv, b, p.total_kv, p.max_kv);
  const int k0 = seqk.t0, lk = seqk.len;
  const int kvh = h / (p.heads / p.kv_heads), d = p.head_dim;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const T *Q = static_cast<const T *>(p.q), *K = static_cast<const T *>(p.k),
          *V = static_cast<const T *>(p.v);

  // the keys any row of the block sees
  int lo0, hi0, lo1, hi1;
  key_range_int(p, m0, lq, lk, lo0, hi0);
  key_range_int(p, min(m0 + BM, lq) - 1, lq, lk, lo1, hi1);
  const int kstart = (lo0 / BN) * BN, kend = hi1;
  const int ntiles = kend > kstart ? (kend - kstart + BN - 1) / BN : 0;

  // this thread's column chunk and first row of every tile load
  const int lr = threadIdx.x / (DP / 8), lc = (threadIdx.x % (DP / 8)) * 8;
  const bool cok = lc < d;
  const uint32_t ldst = (lr * PITCH + lc) * 2;
  const T *kp = K + (long long)(k0 + lr) * p.k_ts + (long long)kvh * p.k_hs + lc;
  const T *vp = V + (long long)(k0 + lr) * p.v_ts + (long long)kvh * p.v_hs + lc;
  // rows n .. of K and V into buffer nb
  auto load_kv = [&](int n, int nb) {
    const int left = cok ? lk - n - lr : 0;
    const uint32_t o = ldst + nb * (BN * PITCH * 2);
    load_rows<BN, DP, NT>(smem_addr(sk) + o, left > 0 ? kp + (long long)n * p.k_ts : kp, p.k_ts,
                          left);
    load_rows<BN, DP, NT>(smem_addr(sv) + o, left > 0 ? vp + (long long)n * p.v_ts : vp, p.v_ts,
                          left);
  };
  {
    const int left = cok ? lq - m0 - lr : 0;
    const T *qp = Q + (long long)h * p.q_hs + lc;
    load_rows<BM, DP, NT>(smem_addr(sq) + ldst, left > 0 ? qp + (long long)(q0 + m0 + lr) * p.q_ts : qp,
                          p.q_ts, left);
  }
  if (ntiles > 0) load_kv(kstart, 0);
  cp_async_commit();

  // The warp's rows [wf, wl] (those before lq): the mask is monotone in
  // the row, so the keys some row sees are [lo(wf), hi(wl)) and those
  // every row sees [lo(wl), hi(wf)).
  const int g = lane / 4, tq = lane % 4, wr = warp * 32, wf = m0 + wr;
  const int wl = min(wf + 31, lq - 1);
  int slo = 0, shi = 0, alo = 0, ahi = 0;
  if (wf < lq) {
    key_range_int(p, wf, lq, lk, slo, ahi);
    key_range_int(p, wl, lq, lk, alo, shi);
  }

  // per-lane shared addresses of the fragments (the rest immediates)
  const int m = lane / 8;
  const uint32_t aq = smem_addr(sq + (wr + lane % 16) * PITCH + (lane / 16) * 8);
  const uint32_t ak = smem_addr(sk + ((m / 2) * 8 + lane % 8) * PITCH + (m % 2) * 8);
  const uint32_t av = smem_addr(sv + ((m % 2) * 8 + lane % 8) * PITCH + (m / 2) * 8);

  float o[2][NO][4];
#pragma unroll
  for (int mt = 0; mt < 2; mt++)
#pragma unroll
    for (int j = 0; j < NO; j++) o[mt][j][0] = o[mt][j][1] = o[mt][j][2] = o[mt][j][3] = 0.0f;
  float mrow[4], lrow[4];  // rows g, g + 8 of tile 0, then of tile 1
#pragma unroll
  for (int i = 0; i < 4; i++) mrow[i] = -INFINITY, lrow[i] = 0.0f;

  for (int t = 0; t < ntiles; t++) {
    const int buf = t & 1, n0 = kstart + t * BN;
    if (t + 1 < ntiles) {
      load_kv(n0 + BN, buf ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    // a tile no row of the warp sees adds nothing (warp-uniform)
    if (n0 < shi && n0 + BN > slo) {
      const uint32_t tk = ak + buf * (BN * PITCH * 2), tv = av + buf * (BN * PITCH * 2);

      // S = Q K^T for the warp's 32 rows x BN keys
      float s[2][NS][4];
#pragma unroll
      for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int j = 0; j < NS; j++) s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < DP / 16; kk++) {
        uint32_t qa[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; mt++) ldsm_x4_at(qa[mt], aq + (mt * 16 * PITCH + kk * 16) * 2);
#pragma unroll
        for (int jn = 0; jn < NS; jn += 2) {
          uint32_t kf[4];
          ldsm_x4_at(kf, tk + (jn * 8 * PITCH + kk * 16) * 2);
#pragma unroll
          for (int mt = 0; mt < 2; mt++) {
            mma16816<DT>(s[mt][jn], qa[mt], kf);
            mma16816<DT>(s[mt][jn + 1], qa[mt], kf + 2);
          }
        }
      }
      // the mask only where some row of the warp lacks a key of the tile
      const bool whole = n0 >= alo && n0 + BN <= ahi;
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const int mt = i / 2, hr = i % 2;
        float mx = -INFINITY;  // of the raw scores (scale > 0)
        if (whole) {
#pragma unroll
          for (int j = 0; j < NS; j++)
            mx = fmaxf(mx, fmaxf(s[mt][j][hr * 2], s[mt][j][hr * 2 + 1]));
        } else {
          int lo, hi;
          key_range_int(p, wf + mt * 16 + hr * 8 + g, lq, lk, lo, hi);
#pragma unroll
          for (int j = 0; j < NS; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
              const int key = n0 + j * 8 + tq * 2 + e;
              float v = s[mt][j][hr * 2 + e];
              v = (key >= lo && key < hi) ? v : -INFINITY;
              s[mt][j][hr * 2 + e] = v;
              mx = fmaxf(mx, v);
            }
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mnew = fmaxf(mrow[i], mx * p.scale_log2);
        const float mu = mnew == -INFINITY ? 0.0f : mnew;
        const float corr = te_ex2_ftz(mrow[i] - mu);
        mrow[i] = mnew;
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < NS; j++)
#pragma unroll
          for (int e = 0; e < 2; e++) {
            const float pe = te_ex2_ftz(fmaf(s[mt][j][hr * 2 + e], p.scale_log2, -mu));
            s[mt][j][hr * 2 + e] = pe;
            sum += pe;
          }
        lrow[i] = lrow[i] * corr + sum;
#pragma unroll
        for (int j = 0; j < NO; j++) {
          o[mt][j][hr * 2] *= corr;
          o[mt][j][hr * 2 + 1] *= corr;
        }
      }
      // O += P V, P's A fragments straight from S's accumulators
#pragma unroll
      for (int kk = 0; kk < BN / 16; kk++) {
        uint32_t pf[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; mt++) {
          pf[mt][0] = elem<DT>::pack(s[mt][2 * kk][0], s[mt][2 * kk][1]);
          pf[mt][1] = elem<DT>::pack(s[mt][2 * kk][2], s[mt][2 * kk][3]);
          pf[mt][2] = elem<DT>::pack(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
          pf[mt][3] = elem<DT>::pack(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
#pragma unroll
        for (int jn = 0; jn < NO; jn += 2) {
          uint32_t vf[4];
          ldsm_x4_t_at(vf, tv + (kk * 16 * PITCH + jn * 8) * 2);
#pragma unroll
          for (int mt = 0; mt < 2; mt++) {
            mma16816<DT>(o[mt][jn], pf[mt], vf);
            mma16816<DT>(o[mt][jn + 1], pf[mt], vf + 2);
          }
        }
      }
    }
    __syncthreads();  // the buffer is refilled two tiles on
  }
  cp_async_wait<0>();  // no tile: Q's copy is still outstanding

  // the row sums over the quad, then O / l and lse
  float *lse = p.lse;
  T *O = static_cast<T *>(p.o);
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const int mt = i / 2, hr = i % 2;
    float l = lrow[i];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int r = wf + mt * 16 + hr * 8 + g;
    if (r >= lq) continue;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    T *orow = O + (long long)(q0 + r) * p.o_ts + (long long)h * p.o_hs;
#pragma unroll
    for (int j = 0; j < NO; j++) {
      const int col = j * 8 + tq * 2;
      if (col < d)
        *reinterpret_cast<uint32_t *>(orow + col) =
            elem<DT>::pack(o[mt][j][hr * 2] * inv, o[mt][j][hr * 2 + 1] * inv);
    }
    if (lse && tq == 0)
      lse[(long long)h * p.total_q + q0 + r] =
          l > 0.0f ? (mrow[i] + log2f(l)) * 0.6931471805599453f : -INFINITY;
  }
}

#define FWD2_KERNEL(name, DP, BN)                                                     \
  extern "C" __global__ void __launch_bounds__(TE_ATTN_FWD2_THREADS, 2)               \
      name(TE_KSIG(TE_ATTN_PARAMS)) {                                                 \
    te_pdl_enter();                                                                   \
    if (p.qkv_dt == BF16) attn_fwd2<BF16, DP, BN>(p);                                 \
    else attn_fwd2<F16, DP, BN>(p);                                                   \
  }
FWD2_KERNEL(te_attn_fwd2_d64, 64, TE_ATTN_FWD2_BN64)
FWD2_KERNEL(te_attn_fwd2_d128, 128, TE_ATTN_FWD2_BN128)

// ---- forward on the warpgroup MMAs (sm_90a) ------------------------------------------------
#include "attention_fwd3.cuh"
#include "attention_bwd3.cuh"

// ---- backward: D and the dQ accumulator --------------------------------------------------------

template <int DT> __device__ void bwd_prep(const te_attn_params &p) {
  const long long row = (long long)blockIdx.x * (TE_ATTN_ROW_THREADS / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= p.total_q * p.heads) return;
  const long long t = row / p.heads;
  const int h = (int)(row % p.heads);
  // 8 elements (16 bytes: rows start on 16 bytes, head_dim % 8 == 0) a lane
  typedef typename elem<DT>::t T;
  const T *dorow = static_cast<const T *>(p.d_o) + t * p.do_ts + (long long)h * p.do_hs;
  const T *orow = static_cast<const T *>(p.o) + t * p.o_ts + (long long)h * p.o_hs;
  float acc = 0.0f;
  for (int x = lane * 8; x < p.head_dim; x += 256) {
    const uint4 a = *reinterpret_cast<const uint4 *>(dorow + x);
    const uint4 c = *reinterpret_cast<const uint4 *>(orow + x);
    const uint32_t ua[4] = {a.x, a.y, a.z, a.w}, uc[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
      const float2 fa = elem<DT>::unpack(ua[k]), fc = elem<DT>::unpack(uc[k]);
      acc += fa.x * fc.x + fa.y * fc.y;
    }
  }
  for (int off = 16; off; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) p.dsum[(long long)h * p.total_q + t] = acc;
  float4 *dq = reinterpret_cast<float4 *>(p.dq_acc + row * p.head_dim);
  for (int x = lane; x < p.head_dim / 4; x += 32) dq[x] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}

extern "C" __global__ void te_attn_bwd_prep(TE_KSIG(TE_ATTN_PARAMS)) {
  te_pdl_enter();
  if (p.qkv_dt == BF16) bwd_prep<BF16>(p);
  else bwd_prep<F16>(p);
}

template <int DT> __device__ void bwd_dq(const te_attn_params &p) {
  typedef typename elem<DT>::t T;
  const long long row = (long long)blockIdx.x * (TE_ATTN_ROW_THREADS / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= p.total_q * p.heads) return;
  const long long t = row / p.heads;
  const int h = (int)(row % p.heads);
  const float *src = p.dq_acc + row * p.head_dim;
  T *dst = static_cast<T *>(p.dq) + t * p.dq_ts + (long long)h * p.dq_hs;
  for (int x = lane * 2; x < p.head_dim; x += 64)
    *reinterpret_cast<uint32_t *>(dst + x) = elem<DT>::pack(src[x], src[x + 1]);
}

extern "C" __global__ void te_attn_bwd_dq(TE_KSIG(TE_ATTN_PARAMS)) {
  te_pdl_enter();
  if (p.qkv_dt == BF16) bwd_dq<BF16>(p);
  else bwd_dq<F16>(p);
}

// ---- backward: dK, dV and dQ ----------------------------------------------------------------------

template <int DT, int DP>
__device__ __forceinline__ void attn_bwd(const te_attn_params &p) {
  typedef typename elem<DT>::t T;
  constexpr int BM = TE_ATTN_BWD_BM, BN = TE_ATTN_BWD_BN, NT = TE_ATTN_BWD_THREADS;
  constexpr int NTILE_S = BN / 8, NTILE_D = DP / 8;
  constexpr int DQ_COLS = 64;  // dQ's columns a pass (fewer live registers)
  extern __shared__ __align__(128) unsigned char smem[];
  T *sk = reinterpret_cast<T *>(smem);
  T *sv = sk + BN * DP;
  T *sq = sv + BN * DP;
  T *sdo = sq + BM * DP;
  T *sp = sdo + BM * DP;   // [BM][BN] P
  T *sds = sp + BM * BN;   // [BM][BN] dS (times scale)
  float *slse = reinterpret_cast<float *>(sds + BM * BN), *sdsum = slse + BM;
  // the next tile's Q, dO (as sq, sdo) and raw lse, D (as slse, sdsum)
  T *stq = reinterpret_cast<T *>(sdsum + BM);
  float *stl = reinterpret_cast<float *>(stq + 2 * BM * DP);

  const int b = blockIdx.z, kvh = blockIdx.y, n0 = blockIdx.x * BN;
  const te_attn_seq seqk = te_attn_seq_of(p.cu_kv, b, p.total_kv, p.max_kv);
  const int k0 = seqk.t0, lk = seqk.len;
  if (n0 >= lk) return;
  const te_attn_seq seqq = te_attn_seq_of(p.cu_q, b, p.total_q, p.max_q);
  const int q0 = seqq.t0, lq = seqq.len;
  const int group = p.heads / p.kv_heads, d = p.head_dim;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
  const T *Q = static_cast<const T *>(p.q), *K = static_cast<const T *>(p.k),
          *V = static_cast<const T *>(p.v), *DO = static_cast<const T *>(p.d_o);

  load_tile<BN, DP, NT>(sk, K, p.k_ts, p.k_hs, k0 + n0, kvh, lk - n0, d);
  load_tile<BN, DP, NT>(sv, V, p.v_ts, p.v_hs, k0 + n0, kvh, lk - n0, d);
  cp_async_commit();

  // the query rows that see any of keys [n0, n0 + BN): causal needs
  // i >= key - (lk - lq), a window i <= key + window - (lk - lq)
  const int shift = lk - lq;
  int ibeg = p.causal ? max(0, n0 - shift) : 0;
  int iend = lq;
  if (p.window >= 0)
    iend = (int)min((long long)lq, (long long)min(n0 + BN, lk) - 1 + p.window - shift + 1);
  ibeg = (ibeg / BM) * BM;

  float dk[NTILE_D][4], dv[NTILE_D][4];
#pragma unroll
  for (int j = 0; j < NTILE_D; j++)
#pragma unroll
    for (int e = 0; e < 4; e++) dk[j][e] = dv[j][e] = 0.0f;

  // Tile (h, m0)'s Q, dO, lse and D load into the staging buffers while
  // the tile before computes; rows past lq load as zeros (they see no
  // keys: P = dS = 0 whatever their lse).
  auto stage = [&](int h, int m0) {
    load_tile<BM, DP, NT>(stq, Q, p.q_ts, p.q_hs, q0 + m0, h, lq - m0, d);
    load_tile<BM, DP, NT>(stq + BM * DP, DO, p.do_ts, p.do_hs, q0 + m0, h, lq - m0, d);
    for (int i = threadIdx.x; i < BM; i += NT) {
      const bool ok = m0 + i < lq;
      const long long idx = ok ? (long long)h * p.total_q + q0 + m0 + i : 0;
      cp_async4(stl + i, p.lse + idx, ok ? 4 : 0);
      cp_async4(stl + BM + i, p.dsum + idx, ok ? 4 : 0);
    }
    cp_async_commit();
  };
  if (ibeg < iend) stage(kvh * group, ibeg);

  for (int h = kvh * group; h < (kvh + 1) * group; h++) {
    for (int m0 = ibeg; m0 < iend; m0 += BM) {
      // staging -> sq, sdo, slse, sdsum (every warp is past the last tile)
      cp_async_wait<0>();
      __syncthreads();
#pragma unroll 1
      for (int i = threadIdx.x; i < 2 * BM * DP / 8; i += NT)
        reinterpret_cast<uint4 *>(sq)[i] = reinterpret_cast<const uint4 *>(stq)[i];
      for (int i = threadIdx.x; i < 2 * BM; i += NT)
        slse[i] = i < BM ? stl[i] * 1.4426950408889634f : stl[i];
      __syncthreads();
      {
        const int mn = m0 + BM < iend ? m0 + BM : ibeg, hn = m0 + BM < iend ? h : h + 1;
        if (hn < (kvh + 1) * group) stage(hn, mn);
      }

      // S and dP for the warp's 16 query rows x 64 keys
      float s[NTILE_S][4], dp[NTILE_S][4];
#pragma unroll
      for (int j = 0; j < NTILE_S; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) s[j][e] = dp[j][e] = 0.0f;
#pragma unroll 2  // unrolled deeper (DP 128), the hoisted addresses spill
      for (int kk = 0; kk < DP / 16; kk++) {
        uint32_t qf[4], of[4];
        ldsm_x4(qf, sq + swz<DP>(warp * 16 + (lane % 16), kk * 2 + lane / 16));
        ldsm_x4(of, sdo + swz<DP>(warp * 16 + (lane % 16), kk * 2 + lane / 16));
#pragma unroll
        for (int jn = 0; jn < NTILE_S; jn += 2) {
          uint32_t kf[4], vf[4];
          const int m = lane / 8, row = jn * 8 + (m / 2) * 8 + lane % 8, ch = kk * 2 + (m % 2);
          ldsm_x4(kf, sk + swz<DP>(row, ch));
          ldsm_x4(vf, sv + swz<DP>(row, ch));
          mma16816<DT>(s[jn], qf, kf);
          mma16816<DT>(s[jn + 1], qf, kf + 2);
          mma16816<DT>(dp[jn], of, vf);
          mma16816<DT>(dp[jn + 1], of, vf + 2);
        }
      }
      // P from lse, dS = P (dP - D) scale; both to shared memory
#pragma unroll
      for (int hr = 0; hr < 2; hr++) {
        const int ri = warp * 16 + g + hr * 8, i = m0 + ri;
        int lo = 0, hi = 0;
        if (i < lq) key_range(p, i, lq, lk, lo, hi);
        const float l2 = slse[ri], ds0 = sdsum[ri];
#pragma unroll
        for (int j = 0; j < NTILE_S; j++) {
          float pv[2], dsv[2];
#pragma unroll
          for (int e = 0; e < 2; e++) {
            const int key = n0 + j * 8 + tq * 2 + e;
            const bool vis = key >= lo && key < hi;
            pv[e] = vis ? te_ex2_ftz(s[j][hr * 2 + e] * p.scale_log2 - l2) : 0.0f;
            dsv[e] = pv[e] * (dp[j][hr * 2 + e] - ds0) * p.scale;
          }
          const int off = swz<BN>(ri, j) + tq * 2;
          *reinterpret_cast<uint32_t *>(sp + off) = elem<DT>::pack(pv[0], pv[1]);
          *reinterpret_cast<uint32_t *>(sds + off) = elem<DT>::pack(dsv[0], dsv[1]);
        }
      }
      __syncthreads();

      // dV += P^T dO and dK += dS^T Q: the warp's 16 keys x DP
#pragma unroll
      for (int kk = 0; kk < BM / 16; kk++) {
        uint32_t pf[4], sf[4];
        const int m = lane / 8;
        const int prow = kk * 16 + (m / 2) * 8 + lane % 8, pch = warp * 2 + (m % 2);
        ldsm_x4_t(pf, sp + swz<BN>(prow, pch));
        ldsm_x4_t(sf, sds + swz<BN>(prow, pch));
#pragma unroll
        for (int jn = 0; jn < NTILE_D; jn += 2) {
          uint32_t of[4], qf[4];
          const int row = kk * 16 + (m % 2) * 8 + lane % 8, ch = jn + m / 2;
          ldsm_x4_t(of, sdo + swz<DP>(row, ch));
          ldsm_x4_t(qf, sq + swz<DP>(row, ch));
          mma16816<DT>(dv[jn], pf, of);
          mma16816<DT>(dv[jn + 1], pf, of + 2);
          mma16816<DT>(dk[jn], sf, qf);
          mma16816<DT>(dk[jn + 1], sf, qf + 2);
        }
      }

      // dQ += dS K: the warp's 16 query rows x DP, DQ_COLS columns a pass,
      // added into dq_acc with 16-byte reductions
#pragma unroll
      for (int half = 0; half < DP / DQ_COLS; half++) {
        float dq[DQ_COLS / 8][4];
#pragma unroll
        for (int j = 0; j < DQ_COLS / 8; j++) dq[j][0] = dq[j][1] = dq[j][2] = dq[j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) {
          uint32_t af[4];
          ldsm_x4(af, sds + swz<BN>(warp * 16 + (lane % 16), kk * 2 + lane / 16));
#pragma unroll
          for (int jn = 0; jn < DQ_COLS / 8; jn += 2) {
            uint32_t kf[4];
            const int m = lane / 8;
            const int ch = half * (DQ_COLS / 8) + jn + m / 2;
            ldsm_x4_t(kf, sk + swz<DP>(kk * 16 + (m % 2) * 8 + lane % 8, ch));
            mma16816<DT>(dq[jn], af, kf);
            mma16816<DT>(dq[jn + 1], af, kf + 2);
          }
        }
        // lanes tq and tq ^ 1 swap halves: the even one adds 4 columns of
        // row g, the odd one the same 4 columns of row g + 8
        const int odd = tq & 1, i = m0 + warp * 16 + g + odd * 8;
        float *acc = p.dq_acc + ((long long)(q0 + i) * p.heads + h) * d + (tq - odd) * 2;
#pragma unroll
        for (int j = 0; j < DQ_COLS / 8; j++) {
          const float r0 = __shfl_xor_sync(0xffffffffu, odd ? dq[j][0] : dq[j][2], 1);
          const float r1 = __shfl_xor_sync(0xffffffffu, odd ? dq[j][1] : dq[j][3], 1);
          const int col = (half * (DQ_COLS / 8) + j) * 8;
          if (i < lq && col < d) {
            if (odd) red_add4(acc + col, r0, r1, dq[j][2], dq[j][3]);
            else red_add4(acc + col, dq[j][0], dq[j][1], r0, r1);
          }
        }
      }
    }
  }
  cp_async_wait<0>();  // no query tile: K and V are still in flight

  // dK and dV of the warp's 16 keys: rows g and g + 8
  T *DK = static_cast<T *>(p.dk), *DV = static_cast<T *>(p.dv);
#pragma unroll
  for (int hr = 0; hr < 2; hr++) {
    const int key = n0 + warp * 16 + g + hr * 8;
    if (key >= lk) continue;
    T *dkr = DK + (long long)(k0 + key) * p.dk_ts + (long long)kvh * p.dk_hs;
    T *dvr = DV + (long long)(k0 + key) * p.dv_ts + (long long)kvh * p.dv_hs;
#pragma unroll
    for (int j = 0; j < NTILE_D; j++) {
      const int col = j * 8 + tq * 2;
      if (col < d) {
        *reinterpret_cast<uint32_t *>(dkr + col) = elem<DT>::pack(dk[j][hr * 2], dk[j][hr * 2 + 1]);
        *reinterpret_cast<uint32_t *>(dvr + col) = elem<DT>::pack(dv[j][hr * 2], dv[j][hr * 2 + 1]);
      }
    }
  }
}

#define BWD_KERNEL(name, DP)                                                          \
  extern "C" __global__ void __launch_bounds__(TE_ATTN_BWD_THREADS)                   \
      name(TE_KSIG(TE_ATTN_PARAMS)) {                                                 \
    te_pdl_enter();                                                                   \
    if (p.qkv_dt == BF16) attn_bwd<BF16, DP>(p);                                      \
    else attn_bwd<F16, DP>(p);                                                        \
  }
BWD_KERNEL(te_attn_bwd_d64, 64)
BWD_KERNEL(te_attn_bwd_d128, 128)

#include "attention_bwd2.cuh"
