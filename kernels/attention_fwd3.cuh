// SPDX-License-Identifier: Apache-2.0
// attention_fwd3.cuh -- the forward on Hopper's warpgroup MMAs (wgmma,
// sm_90a), included by kernels/attention.cu: te_attn_fwd3_d64 and
// te_attn_fwd3_d128 compute what te_attn_fwd2 computes (O and lse of the
// same rows, the same mask rule, the online softmax in base 2 with P
// rounded to the input dtype), with
//
//  - a block of TE_ATTN_FWD3_BM = 128 query rows in two warpgroups of 64;
//  - Q, and two buffers of K and V tiles of BN keys, in 128-byte swizzled
//    shared memory (kernels/wgmma.cuh), filled by cp.async (zeros past the
//    sequence and past head_dim) and fenced for the tensor cores' proxy;
//  - S = Q K^T as DP / 16 wgmma m64nBNk16 with both operands in shared
//    memory (K-major), and O += P V as BN / 16 wgmma m64nDPk16 with P's A
//    fragments taken from S's accumulators in registers and V read
//    MN-major (transposed) from shared memory;
//  - a warpgroup skipping a tile none of its rows sees, and a warp the
//    mask on a tile all its rows see whole.
//
// The grid is (query blocks counted from the last, heads, batch): the
// blocks that run together share a (sequence, head)'s K and V in L2 (with
// the heads first, as te_attn_fwd2 has it, every resident block streamed
// a different head's keys from memory).  Built for anything but sm_90a the kernels trap; attn_libte.c
// launches them only on compute capability 9.0 from a build with sm_90a.

#include "wgmma.cuh"

// A thread's share of an R-row swizzled tile load (every NT / (DP / 8)
// rows a 16-byte chunk: the swizzle of its rows is the same, so each row
// is the first's offset plus a constant); left: the rows it has (<= 0, or
// a chunk past head_dim: zeros).
template <int R, int DP, int NT, typename T>
__device__ __forceinline__ void load_rows_sw(uint32_t dst, const T *src, long long ts, int left) {
  constexpr int RS = NT / (DP / 8);
  static_assert(RS % 8 == 0, "rows of a pass keep the swizzle phase");
  const long long step = RS * ts;
#pragma unroll
  for (int it = 0; it < R / RS; it++) {
    const bool ok = it * RS < left;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst + it * RS * 128),
                 "l"(src), "r"(ok ? 16 : 0));
    if (it * RS + RS < left) src += step;  // stays inside the view
  }
}

template <int DT, int DP, int BN>
__device__ __forceinline__ void attn_fwd3(const te_attn_params &p) {
#if TE_WGMMA
  typedef typename elem<DT>::t T;
  constexpr int BM = TE_ATTN_FWD3_BM, NT = TE_ATTN_FWD3_THREADS;
  constexpr int NSA = BN / 2, NOA = DP / 2;  // accumulators a thread: S, O
  constexpr uint32_t QB = BM * DP * 2, KB = BN * DP * 2;
  extern __shared__ __align__(128) unsigned char smem[];  // aligned to 1024 below
  const uint32_t s0 = (smem_addr(smem) + 1023u) & ~1023u;
  const uint32_t sq = s0, sk = s0 + QB, sv = s0 + QB + 2 * KB;  // K, V: two buffers each

  const int h = blockIdx.y, b = blockIdx.z, m0 = (gridDim.x - 1 - blockIdx.x) * BM;
  const te_attn_seq seqq = te_attn_seq_of(p.cu_q, b, p.total_q, p.max_q);
  const int q0 = seqq.t0, lq = seqq.len;
  if (m0 >= lq) return;
  const te_attn_seq seqk = te_attn_seq_of(p.cu_kv, b, p.total_kv, p.max_kv);
  const int k0 = seqk.t0, lk = seqk.len;
  const int kvh = h / (p.heads / p.kv_heads), d = p.head_dim;
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const T *Q = static_cast<const T *>(p.q), *K = static_cast<const T *>(p.k),
          *V = static_cast<const T *>(p.v);

  // the keys any row of the block sees
  int lo0, hi0, lo1, hi1;
  key_range_int(p, m0, lq, lk, lo0, hi0);
  key_range_int(p, min(m0 + BM, lq) - 1, lq, lk, lo1, hi1);
  const int kstart = (lo0 / BN) * BN, kend = hi1;
  const int ntiles = kend > kstart ? (kend - kstart + BN - 1) / BN : 0;

  // this thread's column chunk and first row of every tile load
  const int lr = threadIdx.x / (DP / 8), lc = threadIdx.x % (DP / 8);
  const bool cok = lc * 8 < d;
  const T *kp = K + (long long)(k0 + lr) * p.k_ts + (long long)kvh * p.k_hs + lc * 8;
  const T *vp = V + (long long)(k0 + lr) * p.v_ts + (long long)kvh * p.v_hs + lc * 8;
  const uint32_t kdst = sw128_off<BN>(lr, lc);
  auto load_kv = [&](int n, int nb) {
    const int left = cok ? lk - n - lr : 0;
    load_rows_sw<BN, DP, NT>(sk + nb * KB + kdst, left > 0 ? kp + (long long)n * p.k_ts : kp,
                             p.k_ts, left);
    load_rows_sw<BN, DP, NT>(sv + nb * KB + kdst, left > 0 ? vp + (long long)n * p.v_ts : vp,
                             p.v_ts, left);
  };
  {
    const int left = cok ? lq - m0 - lr : 0;
    const T *qp = Q + (long long)h * p.q_hs + lc * 8;
    load_rows_sw<BM, DP, NT>(sq + sw128_off<BM>(lr, lc),
                             left > 0 ? qp + (long long)(q0 + m0 + lr) * p.q_ts : qp, p.q_ts,
                             left);
  }
  if (ntiles > 0) load_kv(kstart, 0);
  cp_async_commit();

  // The warpgroup's rows [gf, gl] and the warp's [wf, wl] (those before
  // lq; the mask is monotone in the row): the keys some row sees are
  // [lo(first), hi(last)), those every row sees [lo(last), hi(first)).
  const int g = lane / 4, tq = lane % 4, gf = m0 + wg * 64, wf = gf + warp * 16;
  int glo = 0, ghi = 0, slo = 0, shi = 0, alo = 0, ahi = 0;
  if (gf < lq) {
    int x, y;
    key_range_int(p, gf, lq, lk, glo, x);
    key_range_int(p, min(gf + 63, lq - 1), lq, lk, y, ghi);
  }
  if (wf < lq) {
    key_range_int(p, wf, lq, lk, slo, ahi);
    key_range_int(p, min(wf + 15, lq - 1), lq, lk, alo, shi);
  }

  float o[NOA];
#pragma unroll
  for (int i = 0; i < NOA; i++) o[i] = 0.0f;
  float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f};  // rows g, g + 8
  const uint32_t qa = sq + wg * 64 * 128;  // the warpgroup's 64 rows of every column block

  for (int t = 0; t < ntiles; t++) {
    const int buf = t & 1, n0 = kstart + t * BN;
    if (t + 1 < ntiles) {
      load_kv(n0 + BN, buf ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    wg_proxy_fence();
    __syncthreads();
    // a tile no row of the warpgroup sees adds nothing (warpgroup-uniform)
    if (n0 < ghi && n0 + BN > glo) {
      const uint32_t tk = sk + buf * KB, tv = sv + buf * KB;
      float s[NSA];
      wg_fence();
#pragma unroll
      for (int kk = 0; kk < DP / 16; kk++) {
        const uint32_t off = (kk % 4) * 32u;  // the k-step within a column block
        const uint64_t da = wg_desc_k(qa + (kk / 4) * (BM * 128) + off);
        const uint64_t db = wg_desc_k(tk + (kk / 4) * (BN * 128) + off);
        if (BN == 128) wg_ss_n128<DT, 0, 0>(s, da, db, kk > 0);
        else wg_ss_n64<DT, 0, 0>(s, da, db, kk > 0);
      }
      wg_commit();
      wg_wait<0>();
      wg_keep_all<NSA>(s);

      // the mask only where some row of the warp lacks a key of the tile
      const bool whole = n0 >= alo && n0 + BN <= ahi;
#pragma unroll
      for (int hr = 0; hr < 2; hr++) {
        float mx = -INFINITY;  // of the raw scores (scale > 0)
        if (whole) {
#pragma unroll
          for (int j = 0; j < BN / 8; j++)
            mx = fmaxf(mx, fmaxf(s[4 * j + 2 * hr], s[4 * j + 2 * hr + 1]));
        } else {
          int lo, hi;
          key_range_int(p, wf + hr * 8 + g, lq, lk, lo, hi);
#pragma unroll
          for (int j = 0; j < BN / 8; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
              const int key = n0 + j * 8 + tq * 2 + e;
              float v = s[4 * j + 2 * hr + e];
              v = (key >= lo && key < hi) ? v : -INFINITY;
              s[4 * j + 2 * hr + e] = v;
              mx = fmaxf(mx, v);
            }
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mnew = fmaxf(mrow[hr], mx * p.scale_log2);
        const float mu = mnew == -INFINITY ? 0.0f : mnew;
        const float corr = te_ex2_ftz(mrow[hr] - mu);
        mrow[hr] = mnew;
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < BN / 8; j++)
#pragma unroll
          for (int e = 0; e < 2; e++) {
            const float pe = te_ex2_ftz(fmaf(s[4 * j + 2 * hr + e], p.scale_log2, -mu));
            s[4 * j + 2 * hr + e] = pe;
            sum += pe;
          }
        lrow[hr] = lrow[hr] * corr + sum;
#pragma unroll
        for (int j = 0; j < DP / 8; j++) {
          o[4 * j + 2 * hr] *= corr;
          o[4 * j + 2 * hr + 1] *= corr;
        }
      }
      // O += P V: P's A fragments from S's accumulators (keys 16 kk ..)
      uint32_t pf[BN / 16][4];
#pragma unroll
      for (int kk = 0; kk < BN / 16; kk++) {
        pf[kk][0] = elem<DT>::pack(s[8 * kk + 0], s[8 * kk + 1]);
        pf[kk][1] = elem<DT>::pack(s[8 * kk + 2], s[8 * kk + 3]);
        pf[kk][2] = elem<DT>::pack(s[8 * kk + 4], s[8 * kk + 5]);
        pf[kk][3] = elem<DT>::pack(s[8 * kk + 6], s[8 * kk + 7]);
      }
      wg_rs_mn_group<DT, DP, BN / 16>(o, pf, tv, BN * 128);
      wg_wait<0>();
      wg_keep_all<NOA>(o);
      wg_keep_all<BN / 4>(&pf[0][0]);
    }
    __syncthreads();  // the buffer is refilled two tiles on
  }
  cp_async_wait<0>();  // no tile: Q's copy is still outstanding

  // the row sums over the quad, then O / l and lse
#pragma unroll
  for (int hr = 0; hr < 2; hr++)
    store_o_row<DT, DP / 8>(p, &o[2 * hr], lrow[hr], mrow[hr], {q0, wf + hr * 8 + g, lq, h, tq});
#else
  __trap();
#endif
}

#define FWD3_KERNEL(name, DP, BN, MINB)                                              \
  extern "C" __global__ void __launch_bounds__(TE_ATTN_FWD3_THREADS, MINB)           \
      name(TE_KSIG(TE_ATTN_PARAMS)) {                                                \
    te_pdl_enter();                                                                  \
    if (p.qkv_dt == BF16) attn_fwd3<BF16, DP, BN>(p);                                \
    else attn_fwd3<F16, DP, BN>(p);                                                  \
  }
FWD3_KERNEL(te_attn_fwd3_d64, 64, TE_ATTN_FWD3_BN64, 2)
FWD3_KERNEL(te_attn_fwd3_d128, 128, TE_ATTN_FWD3_BN128, 1)
