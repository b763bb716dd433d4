// SPDX-License-Identifier: Apache-2.0
// attention_bwd2.cuh -- te_attn_bwd2_d64/_d128, the backward of
// kernels/attention.cu at 8 warps of 16 keys; a part of that file (it
// uses its helpers), included at its end.  Parameters, grid and the mask
// rule: kernels/common/attention.h.
//
// A block owns TE_ATTN_BWD2_BN = 128 keys of one (sequence, KV head), a
// warp 16 of them, and loops over the query heads of the group and the
// BM-row query tiles that see those keys (BM = 128 at head_dim <= 64, 64
// above).  The warp computes the transposed products S^T = K Q^T and
// dP^T = V dO^T (16 keys x BM queries), so that P^T and dS^T come out of
// the accumulators already laid out as the A operands of dV += P^T dO and
// dK += dS^T Q: P never goes through shared memory, and dK, dV stay in
// registers over the whole loop.  dS^T (scale folded in) goes to shared
// memory once, where the 8 warps read it back for dQ = dS K (a 2 x 4 or
// 4 x 2 grid of 32 x 32 warp tiles over the BM x DP tile), which is
// added into dq_acc with 16-byte reductions (red.global.add.v4.f32).
// The next tile's Q, dO, lse and D load (cp.async) into the other of two
// buffers while one computes.  Tiles are rows padded to DP + 8 (BM + 8
// for dS^T) elements: ldmatrix stays conflict-free and fragment
// addresses are a lane's base plus immediates, as in te_attn_fwd2.  A
// warp whose keys no query of the tile sees writes zeros for its dS^T
// rows and skips its products; the mask is applied only where some
// (key, query) pair of the warp's tile is hidden.  The key block is
// blockIdx.z: the first blocks, which see the most queries when causal,
// start first.
//
// dQ's sum over key blocks is made by atomics, in an order set by timing:
// dQ may differ in the last bits from run to run (dK and dV do not).

template <int DT, int DP, int BM>
__device__ __forceinline__ void attn_bwd2(const te_attn_params &p) {
  typedef typename elem<DT>::t T;
  constexpr int BN = TE_ATTN_BWD2_BN, NT = TE_ATTN_BWD2_THREADS;
  constexpr int PITCH = DP + 8, SP = BM + 8;  // row pitches (elements)
  constexpr int NS = BM / 8, ND = DP / 8;     // n-tiles of S^T; of dK, dV
  // dQ's warp grid: WM x WN warps of (BM / WM) x (DP / WN)
  constexpr int WM = BM == 128 ? 4 : 2, WN = 8 / WM, QR = BM / WM, QC = DP / WN;
  static_assert(NT == 256 && BN == 128 && QR == 32, "8 warps of 16 keys, 32-row dQ tiles");
  extern __shared__ __align__(128) unsigned char smem[];
  T *sk = reinterpret_cast<T *>(smem);
  T *sv = sk + BN * PITCH;
  T *sq = sv + BN * PITCH;       // two buffers of [BM][PITCH]
  T *sdo = sq + 2 * BM * PITCH;  // two buffers
  T *sds = sdo + 2 * BM * PITCH; // [BN][SP] dS^T
  float *sl = reinterpret_cast<float *>(sds + BN * SP);  // two buffers of lse[BM], D[BM]

  const int kvh = blockIdx.x, b = blockIdx.y, n0 = blockIdx.z * BN;
  const te_attn_seq seqk = te_attn_seq_of(p.cu_kv, b, p.total_kv, p.max_kv);
  const int k0 = seqk.t0, lk = seqk.len;
  if (n0 >= lk) return;
  const te_attn_seq seqq = te_attn_seq_of(p.cu_q, b, p.total_q, p.max_q);
  const int q0 = seqq.t0, lq = seqq.len;
  const int group = p.heads / p.kv_heads, d = p.head_dim;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
  const int m = lane / 8;
  const T *Q = static_cast<const T *>(p.q), *K = static_cast<const T *>(p.k),
          *V = static_cast<const T *>(p.v), *DO = static_cast<const T *>(p.d_o);

  // this thread's column chunk and first row of every tile load
  const int lr = threadIdx.x / (DP / 8), lc = (threadIdx.x % (DP / 8)) * 8;
  const bool cok = lc < d;
  const uint32_t ldst = (lr * PITCH + lc) * 2;
  {
    const int left = cok ? lk - n0 - lr : 0;
    const T *kp = K + (long long)kvh * p.k_hs + lc, *vp = V + (long long)kvh * p.v_hs + lc;
    load_rows<BN, DP, NT>(smem_addr(sk) + ldst, left > 0 ? kp + (long long)(k0 + n0 + lr) * p.k_ts : kp,
                          p.k_ts, left);
    load_rows<BN, DP, NT>(smem_addr(sv) + ldst, left > 0 ? vp + (long long)(k0 + n0 + lr) * p.v_ts : vp,
                          p.v_ts, left);
    cp_async_commit();
  }

  // the query tiles that see any of keys [n0, n0 + BN)
  const int shift = lk - lq;
  const long long win = p.window;
  int ibeg, nqt;
  key_block_queries(p, n0, BN, lq, lk, BM, ibeg, nqt);
  const int ntl = group * nqt;

  // Tile (h, m0)'s Q, dO, lse and D into buffer nb; rows past lq load as
  // zeros (the mask hides them).
  auto stage = [&](int t, int nb) {
    const int h = kvh * group + t / nqt, m0 = ibeg + (t % nqt) * BM;
    const int left = cok ? lq - m0 - lr : 0;
    const T *qp = Q + (long long)h * p.q_hs + lc, *op = DO + (long long)h * p.do_hs + lc;
    const uint32_t o = ldst + nb * (BM * PITCH * 2);
    load_rows<BM, DP, NT>(smem_addr(sq) + o, left > 0 ? qp + (long long)(q0 + m0 + lr) * p.q_ts : qp,
                          p.q_ts, left);
    load_rows<BM, DP, NT>(smem_addr(sdo) + o,
                          left > 0 ? op + (long long)(q0 + m0 + lr) * p.do_ts : op, p.do_ts, left);
    if (threadIdx.x < 2 * BM) {
      const int i = threadIdx.x % BM;
      const bool ok = m0 + i < lq;
      const long long idx = ok ? (long long)h * p.total_q + q0 + m0 + i : 0;
      cp_async4(sl + nb * 2 * BM + threadIdx.x, (threadIdx.x < BM ? p.lse : p.dsum) + idx,
                ok ? 4 : 0);
    }
    cp_async_commit();
  };
  if (ntl > 0) stage(0, 0);

  float dk[ND][4], dv[ND][4];
#pragma unroll
  for (int j = 0; j < ND; j++)
#pragma unroll
    for (int e = 0; e < 4; e++) dk[j][e] = dv[j][e] = 0.0f;

  // per-lane shared addresses of the fragments (the rest immediates)
  const uint32_t aK = smem_addr(sk + (warp * 16 + lane % 16) * PITCH + (lane / 16) * 8);
  const uint32_t aV = aK + (uint32_t)(BN * PITCH * 2);
  const uint32_t bQ = smem_addr(sq + ((m / 2) * 8 + lane % 8) * PITCH + (m % 2) * 8);
  const uint32_t bO = bQ + (uint32_t)(2 * BM * PITCH * 2);
  const uint32_t tQ = smem_addr(sq + ((m % 2) * 8 + lane % 8) * PITCH + (m / 2) * 8);
  const uint32_t tO = tQ + (uint32_t)(2 * BM * PITCH * 2);
  const int wm = warp / WN, wn = warp % WN;
  const uint32_t aS = smem_addr(sds + ((lane / 16) * 8 + lane % 8) * SP + wm * QR + (m % 2) * 8);
  const uint32_t bK = smem_addr(sk + ((m % 2) * 8 + lane % 8) * PITCH + wn * QC + (m / 2) * 8);
  T *wds = sds + (warp * 16 + g) * SP + tq * 2;  // this thread's dS^T words
  const int kw = n0 + warp * 16;                  // the warp's first key

  for (int t = 0; t < ntl; t++) {
    const int buf = t & 1, h = kvh * group + t / nqt, m0 = ibeg + (t % nqt) * BM;
    if (t + 1 < ntl) {
      stage(t + 1, buf ^ 1);  // its buffer's last readers passed the mid-tile barrier
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();

    // which (key, query) pairs of the warp's 16 x BM tile are seen
    const int qlast = min(m0 + BM, lq) - 1;
    const bool none = kw >= lk || (p.causal && kw > qlast + shift) ||
                      (win >= 0 && (long long)kw + 15 < (long long)m0 + shift - win);
    const bool whole = m0 + BM <= lq && kw + 16 <= lk && (!p.causal || kw + 15 <= m0 + shift) &&
                       (win < 0 || (long long)kw >= (long long)qlast + shift - win);
    if (none) {
#pragma unroll
      for (int j = 0; j < NS; j++) {
        *reinterpret_cast<uint32_t *>(wds + j * 8) = 0u;
        *reinterpret_cast<uint32_t *>(wds + 8 * SP + j * 8) = 0u;
      }
    } else {
      const uint32_t qo = buf * (BM * PITCH * 2);
      // S^T = K Q^T and dP^T = V dO^T: the warp's 16 keys x BM queries
      float s[NS][4], dp[NS][4];
#pragma unroll
      for (int j = 0; j < NS; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) s[j][e] = dp[j][e] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < DP / 16; kk++) {
        uint32_t ka[4], va[4];
        ldsm_x4_at(ka, aK + kk * 32);
        ldsm_x4_at(va, aV + kk * 32);
#pragma unroll
        for (int jn = 0; jn < NS; jn += 2) {
          uint32_t qb[4], ob[4];
          ldsm_x4_at(qb, bQ + qo + (jn * 8 * PITCH + kk * 16) * 2);
          ldsm_x4_at(ob, bO + qo + (jn * 8 * PITCH + kk * 16) * 2);
          mma16816<DT>(s[jn], ka, qb);
          mma16816<DT>(s[jn + 1], ka, qb + 2);
          mma16816<DT>(dp[jn], va, ob);
          mma16816<DT>(dp[jn + 1], va, ob + 2);
        }
      }
      // P^T = 2^(S^T scale_log2 - lse log2(e)), dS^T = P^T (dP^T - D) scale,
      // both rounded into A fragments (P^T's and dS^T's rows are keys g, g + 8;
      // columns the queries j * 8 + tq * 2 + e); dS^T also to shared memory
      const float *tl = sl + buf * 2 * BM;
      uint32_t pa[BM / 16][4], da[BM / 16][4];
#pragma unroll
      for (int j = 0; j < NS; j++) {
        const int c = j * 8 + tq * 2;
        const float2 l2 = *reinterpret_cast<const float2 *>(tl + c);
        const float2 dd = *reinterpret_cast<const float2 *>(tl + BM + c);
        float pv[4], dsv[4];
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const float lse = (e & 1) ? l2.y : l2.x, dsum = (e & 1) ? dd.y : dd.x;
          float pe = te_ex2_ftz(fmaf(s[j][e], p.scale_log2, -lse * 1.4426950408889634f));
          if (!whole) {
            const int key = kw + g + (e / 2) * 8, i = m0 + c + (e & 1);
            pe = pair_seen(p, key, i, lq, lk, shift) ? pe : 0.0f;
          }
          pv[e] = pe;
          dsv[e] = pe * (dp[j][e] - dsum) * p.scale;
        }
        pa[j / 2][(j % 2) * 2] = elem<DT>::pack(pv[0], pv[1]);
        pa[j / 2][(j % 2) * 2 + 1] = elem<DT>::pack(pv[2], pv[3]);
        da[j / 2][(j % 2) * 2] = elem<DT>::pack(dsv[0], dsv[1]);
        da[j / 2][(j % 2) * 2 + 1] = elem<DT>::pack(dsv[2], dsv[3]);
        *reinterpret_cast<uint32_t *>(wds + j * 8) = da[j / 2][(j % 2) * 2];
        *reinterpret_cast<uint32_t *>(wds + 8 * SP + j * 8) = da[j / 2][(j % 2) * 2 + 1];
      }
      // dV += P^T dO and dK += dS^T Q: the warp's 16 keys x DP
#pragma unroll
      for (int kk = 0; kk < BM / 16; kk++) {
#pragma unroll
        for (int jn = 0; jn < ND; jn += 2) {
          uint32_t ob[4], qb[4];
          ldsm_x4_t_at(ob, tO + qo + (kk * 16 * PITCH + jn * 8) * 2);
          ldsm_x4_t_at(qb, tQ + qo + (kk * 16 * PITCH + jn * 8) * 2);
          mma16816<DT>(dv[jn], pa[kk], ob);
          mma16816<DT>(dv[jn + 1], pa[kk], ob + 2);
          mma16816<DT>(dk[jn], da[kk], qb);
          mma16816<DT>(dk[jn + 1], da[kk], qb + 2);
        }
      }
    }
    __syncthreads();  // dS^T complete

    // dQ += dS K: the warp's QR query rows x QC columns, over the 128 keys
    float dq[QR / 16][QC / 8][4];
#pragma unroll
    for (int mt = 0; mt < QR / 16; mt++)
#pragma unroll
      for (int j = 0; j < QC / 8; j++) dq[mt][j][0] = dq[mt][j][1] = dq[mt][j][2] = dq[mt][j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++) {
      uint32_t a[QR / 16][4];
#pragma unroll
      for (int mt = 0; mt < QR / 16; mt++) ldsm_x4_t_at(a[mt], aS + (kk * 16 * SP + mt * 16) * 2);
#pragma unroll
      for (int jn = 0; jn < QC / 8; jn += 2) {
        uint32_t kb[4];
        ldsm_x4_t_at(kb, bK + (kk * 16 * PITCH + jn * 8) * 2);
#pragma unroll
        for (int mt = 0; mt < QR / 16; mt++) {
          mma16816<DT>(dq[mt][jn], a[mt], kb);
          mma16816<DT>(dq[mt][jn + 1], a[mt], kb + 2);
        }
      }
    }
    // lanes tq and tq ^ 1 swap halves: the even one adds 4 columns of row
    // g, the odd one the same 4 columns of row g + 8
    const int odd = tq & 1;
#pragma unroll
    for (int mt = 0; mt < QR / 16; mt++) {
      const int i = m0 + wm * QR + mt * 16 + g + odd * 8;
      float *acc = p.dq_acc + ((long long)(q0 + i) * p.heads + h) * d + wn * QC + (tq - odd) * 2;
#pragma unroll
      for (int j = 0; j < QC / 8; j++) {
        const float r0 = __shfl_xor_sync(0xffffffffu, odd ? dq[mt][j][0] : dq[mt][j][2], 1);
        const float r1 = __shfl_xor_sync(0xffffffffu, odd ? dq[mt][j][1] : dq[mt][j][3], 1);
        if (i < lq && wn * QC + j * 8 < d) {
          if (odd) red_add4(acc + j * 8, r0, r1, dq[mt][j][2], dq[mt][j][3]);
          else red_add4(acc + j * 8, dq[mt][j][0], dq[mt][j][1], r0, r1);
        }
      }
    }
  }
  cp_async_wait<0>();  // no query tile: K and V are still in flight

  store_dkdv<DT, ND>(p, &dk[0][0], &dv[0][0], {k0, kw, lk, kvh, d, g, tq});
}

#define BWD2_KERNEL(name, DP, BM)                                                     \
  extern "C" __global__ void __launch_bounds__(TE_ATTN_BWD2_THREADS, 1)               \
      name(TE_KSIG(TE_ATTN_PARAMS)) {                                                 \
    te_pdl_enter();                                                                   \
    if (p.qkv_dt == BF16) attn_bwd2<BF16, DP, BM>(p);                                 \
    else attn_bwd2<F16, DP, BM>(p);                                                   \
  }
BWD2_KERNEL(te_attn_bwd2_d64, 64, TE_ATTN_BWD2_BM64)
BWD2_KERNEL(te_attn_bwd2_d128, 128, TE_ATTN_BWD2_BM128)
