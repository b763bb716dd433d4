// SPDX-License-Identifier: Apache-2.0
// attention_bwd3.cuh -- te_attn_bwd3_d64/_d128: the backward of
// te_attn_bwd2 on Hopper's warpgroup MMAs (wgmma, sm_90a), included by
// kernels/attention.cu after attention_fwd3.cuh (its helpers and
// kernels/wgmma.cuh).  The same products and mask; the grid is (key
// blocks, KV heads, batch), so that the blocks resident together share a
// (sequence, head)'s Q, dO and dQ accumulator in L2:
//
//  - a block owns TE_ATTN_BWD3_BN = 128 keys of one (sequence, KV head),
//    each of its two warpgroups 64 of them, and loops over the query heads
//    of the group and the TE_ATTN_BWD3_BM = 64-row query tiles that see
//    those keys (Q, dO, lse and D double-buffered by cp.async);
//  - S^T = K Q^T and dP^T = V dO^T (64 keys x 64 queries a warpgroup) by
//    wgmma with both operands in 128-byte swizzled shared memory;
//  - P^T and dS^T (scale folded in) leave the accumulators as the A
//    fragments of dV += P^T dO and dK += dS^T Q (dO and Q read transposed
//    from shared memory); dK and dV stay in registers over the loop;
//  - dS^T goes to shared memory once (two buffers), and dQ = dS K (64
//    queries x head_dim, over the block's 128 keys: A = dS^T and B = K
//    both read transposed) is split by columns between the warpgroups and
//    added into dq_acc with 16-byte reductions.
// The tiles are software-pipelined with one barrier each and no MMA in
// flight across it (ptxas serialises wgmma whose accumulators stay in
// flight over a loop's back edge): tile t issues tile t - 1's dQ and its
// own S^T and dP^T as three groups, reduces that dQ while S^T runs,
// computes P while dP^T runs and dS^T while dV runs.  A warpgroup whose
// keys no query of a tile sees runs it masked (all zeros) rather than
// branch around the MMAs, which would serialise them.  Built for anything
// but sm_90a the kernels trap (attn_libte.c launches them only where fwd3
// runs).

// The thread's first key and query, the sequence's lq queries and lk
// keys, shift = lk - lq (pair_seen's arguments).
struct probs_at {
  int key0, i0, lq, lk, shift;
};

// P^T of the thread's 64 x BM elements of S^T (in place) and their A
// fragments; MASK: some pair of the warp's may be unseen.
template <int DT, int BM, bool MASK>
__device__ __forceinline__ void bwd3_probs(const te_attn_params &p, float *s, uint32_t (*pa)[4],
                                           const float *lse, const probs_at at) {
  const int key0 = at.key0, i0 = at.i0, lq = at.lq, lk = at.lk, shift = at.shift;
#pragma unroll
  for (int j = 0; j < BM / 8; j++) {
    const float2 l2 = *reinterpret_cast<const float2 *>(lse + j * 8);
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const float l = ((e & 1) ? l2.y : l2.x) * 1.4426950408889634f;
      float pe = te_ex2_ftz(fmaf(s[4 * j + e], p.scale_log2, -l));
      if (MASK) pe = pair_seen(p, key0 + (e / 2) * 8, i0 + j * 8 + (e & 1), lq, lk, shift) ? pe : 0.0f;
      s[4 * j + e] = pe;
    }
    pa[j / 2][(j % 2) * 2] = elem<DT>::pack(s[4 * j], s[4 * j + 1]);
    pa[j / 2][(j % 2) * 2 + 1] = elem<DT>::pack(s[4 * j + 2], s[4 * j + 3]);
  }
}

template <int DT, int DP>
__device__ __forceinline__ void attn_bwd3(const te_attn_params &p) {
#if TE_WGMMA
  typedef typename elem<DT>::t T;
  constexpr int BN = TE_ATTN_BWD3_BN, BM = TE_ATTN_BWD3_BM, NT = TE_ATTN_BWD3_THREADS;
  constexpr int NSA = BM / 2, NDA = DP / 2, NQA = DP / 4;  // accumulators: S^T, dK/dV, dQ
  constexpr uint32_t KB = BN * DP * 2, QB = BM * DP * 2, SB = BN * BM * 2;
  static_assert(NT == 256 && BN == 128 && BM == 64, "two warpgroups of 64 keys, 64-row tiles");
  extern __shared__ __align__(128) unsigned char smem[];  // aligned to 1024 below
  const uint32_t s0 = (smem_addr(smem) + 1023u) & ~1023u;
  const uint32_t sk = s0, sv = sk + KB, sq = sv + KB;  // Q: two buffers
  const uint32_t sdo = sq + 2 * QB, sds = sdo + 2 * QB;  // dO, dS^T: two buffers each
  float *sl = reinterpret_cast<float *>(smem + (sds + 2 * SB - smem_addr(smem)));  // 2 x (lse, D)

  const int kvh = blockIdx.y, b = blockIdx.z, n0 = blockIdx.x * BN;
  const te_attn_seq seqk = te_attn_seq_of(p.cu_kv, b, p.total_kv, p.max_kv);
  const int k0 = seqk.t0, lk = seqk.len;
  if (n0 >= lk) return;
  const te_attn_seq seqq = te_attn_seq_of(p.cu_q, b, p.total_q, p.max_q);
  const int q0 = seqq.t0, lq = seqq.len;
  const int group = p.heads / p.kv_heads, d = p.head_dim;
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, tq = lane % 4;
  const T *Q = static_cast<const T *>(p.q), *K = static_cast<const T *>(p.k),
          *V = static_cast<const T *>(p.v), *DO = static_cast<const T *>(p.d_o);

  // this thread's column chunk and first row of every tile load
  const int lr = threadIdx.x / (DP / 8), lc = threadIdx.x % (DP / 8);
  const bool cok = lc * 8 < d;
  {
    const int left = cok ? lk - n0 - lr : 0;
    const T *kp = K + (long long)kvh * p.k_hs + lc * 8, *vp = V + (long long)kvh * p.v_hs + lc * 8;
    const uint32_t o = sw128_off<BN>(lr, lc);
    load_rows_sw<BN, DP, NT>(sk + o, left > 0 ? kp + (long long)(k0 + n0 + lr) * p.k_ts : kp,
                             p.k_ts, left);
    load_rows_sw<BN, DP, NT>(sv + o, left > 0 ? vp + (long long)(k0 + n0 + lr) * p.v_ts : vp,
                             p.v_ts, left);
    cp_async_commit();
  }

  // the query tiles that see any of keys [n0, n0 + BN)
  const int shift = lk - lq;
  const long long win = p.window;
  int ibeg, nqt;
  key_block_queries(p, n0, BN, lq, lk, BM, ibeg, nqt);
  const int ntl = group * nqt;

  // Tile t's Q, dO, lse and D into buffer nb; rows past lq load as zeros
  const uint32_t qdst = sw128_off<BM>(lr, lc);
  auto stage = [&](int t, int nb) {
    const int h = kvh * group + t / nqt, m0 = ibeg + (t % nqt) * BM;
    const int left = cok ? lq - m0 - lr : 0;
    const T *qp = Q + (long long)h * p.q_hs + lc * 8, *op = DO + (long long)h * p.do_hs + lc * 8;
    load_rows_sw<BM, DP, NT>(sq + nb * QB + qdst,
                             left > 0 ? qp + (long long)(q0 + m0 + lr) * p.q_ts : qp, p.q_ts, left);
    load_rows_sw<BM, DP, NT>(sdo + nb * QB + qdst,
                             left > 0 ? op + (long long)(q0 + m0 + lr) * p.do_ts : op, p.do_ts,
                             left);
    if (threadIdx.x < 2 * BM) {
      const int i = threadIdx.x % BM;
      const bool ok = m0 + i < lq;
      const long long idx = ok ? (long long)h * p.total_q + q0 + m0 + i : 0;
      cp_async4(sl + nb * 2 * BM + threadIdx.x, (threadIdx.x < BM ? p.lse : p.dsum) + idx,
                ok ? 4 : 0);
    }
    cp_async_commit();
  };

  float dk[NDA], dv[NDA];
#pragma unroll
  for (int i = 0; i < NDA; i++) dk[i] = dv[i] = 0.0f;
  const int kg = n0 + wg * 64, kw = kg + warp * 16;  // the warpgroup's, the warp's first key
  const uint32_t ka = sk + wg * 64 * 128, va = sv + wg * 64 * 128;
  // dS^T words of this thread: keys kw + g (+ 8), queries j * 8 + tq * 2
  const int srow = wg * 64 + warp * 16 + g;


  // S^T = K Q^T and dP^T = V dO^T (64 keys x 64 queries) of the tile in
  // buffer nb: two wgmma groups, so that P is computed while dP^T runs
  float s[NSA], dp[NSA];
  auto issue_sdp = [&](int nb) {
    const uint32_t tqs = sq + nb * QB, tdo = sdo + nb * QB;
#pragma unroll
    for (int kk = 0; kk < DP / 16; kk++) {
      const uint32_t off = (kk % 4) * 32u;
      wg_ss_n64<DT, 0, 0>(s, wg_desc_k(ka + (kk / 4) * (BN * 128) + off),
                          wg_desc_k(tqs + (kk / 4) * (BM * 128) + off), kk > 0);
    }
    wg_commit();
#pragma unroll
    for (int kk = 0; kk < DP / 16; kk++) {
      const uint32_t off = (kk % 4) * 32u;
      wg_ss_n64<DT, 0, 0>(dp, wg_desc_k(va + (kk / 4) * (BN * 128) + off),
                          wg_desc_k(tdo + (kk / 4) * (BM * 128) + off), kk > 0);
    }
    wg_commit();
  };

  // dQ += dS K of the tile whose dS^T is at tds: 64 queries x the
  // warpgroup's DP / 2 columns, over the block's 128 keys
  float dq[NQA];
  auto issue_dq = [&](uint32_t tds) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++) {
      const uint64_t as = wg_desc_mn(tds + kk * 2048, BN * 128);
      if (DP == 128)
        wg_ss_n64<DT, 1, 1>(dq, as, wg_desc_mn(sk + wg * (BN * 128) + kk * 2048, BN * 128), kk > 0);
      else
        wg_ss_n32<DT, 1, 1>(dq, as, wg_desc_mn(sk + wg * 64 + kk * 2048, BN * 128), kk > 0);
    }
    wg_commit();
  };
  // ... added into dq_acc (tile t): lanes tq and tq ^ 1 swap halves, the
  // even one adds 4 columns of row g, the odd one the same 4 of row g + 8
  auto reduce_dq = [&](int t) {
    const int h = kvh * group + t / nqt, m0 = ibeg + (t % nqt) * BM;
    const int odd = tq & 1, c0 = wg * (DP / 2);
    const int i = m0 + warp * 16 + g + odd * 8;
    float *acc = p.dq_acc + ((long long)(q0 + i) * p.heads + h) * d + c0 + (tq - odd) * 2;
#pragma unroll
    for (int j = 0; j < DP / 16; j++) {
      const float r0 = __shfl_xor_sync(0xffffffffu, odd ? dq[4 * j] : dq[4 * j + 2], 1);
      const float r1 = __shfl_xor_sync(0xffffffffu, odd ? dq[4 * j + 1] : dq[4 * j + 3], 1);
      if (i < lq && c0 + j * 8 < d) {
        if (odd) red_add4(acc + j * 8, r0, r1, dq[4 * j + 2], dq[4 * j + 3]);
        else red_add4(acc + j * 8, dq[4 * j], dq[4 * j + 1], r0, r1);
      }
    }
  };

  // One barrier a tile, and no MMA in flight across it: tile t issues
  // tile t - 1's dQ, its own S^T and dP^T, reduces that dQ while they run,
  // computes P while dP^T runs and dS^T while dV runs.  Q, dO (tile t + 2
  // loads from the end of tile t on) and dS^T are double-buffered.
  if (ntl > 0) {
    stage(0, 0);
    if (ntl > 1) {
      stage(1, 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    wg_proxy_fence();
    __syncthreads();
  }
  for (int t = 0; t < ntl; t++) {
    const int buf = t & 1, m0 = ibeg + (t % nqt) * BM;
    const uint32_t tqs = sq + buf * QB, tdo = sdo + buf * QB, tds = sds + buf * SB;
    unsigned char *wds = smem + (tds - smem_addr(smem));
    wg_fence();
    issue_dq(sds + (buf ^ 1) * SB);  // tile t - 1's (at t = 0 unread)
    issue_sdp(buf);
    wg_wait<2>();
    wg_keep_all<NQA>(dq);
    if (t > 0) reduce_dq(t - 1);

    const int qlast = min(m0 + BM, lq) - 1;
    // every pair of the warp's seen (warp-uniform)
    const bool whole = m0 + BM <= lq && kw + 16 <= lk && (!p.causal || kw + 15 <= m0 + shift) &&
                       (win < 0 || (long long)kw >= (long long)qlast + shift - win);
    const float *tl = sl + buf * 2 * BM + tq * 2;
    uint32_t pa[BM / 16][4], da[BM / 16][4];
    wg_wait<1>();  // S^T
    wg_keep_all<NSA>(s);
    const probs_at at = {kw + g, m0 + tq * 2, lq, lk, shift};
    if (whole) bwd3_probs<DT, BM, false>(p, s, pa, tl, at);
    else bwd3_probs<DT, BM, true>(p, s, pa, tl, at);
    // dV += P^T dO (64 keys x DP, the queries as k) while dS^T is formed
    wg_rs_mn_group<DT, DP, BM / 16>(dv, pa, tdo, BM * 128);
    wg_wait<1>();  // dP^T
    wg_keep_all<NSA>(dp);
#pragma unroll
    for (int j = 0; j < BM / 8; j++) {
      const float2 dd = *reinterpret_cast<const float2 *>(tl + BM + j * 8);
      float dsv[4];
#pragma unroll
      for (int e = 0; e < 4; e++)
        dsv[e] = s[4 * j + e] * (dp[4 * j + e] - ((e & 1) ? dd.y : dd.x)) * p.scale;
      da[j / 2][(j % 2) * 2] = elem<DT>::pack(dsv[0], dsv[1]);
      da[j / 2][(j % 2) * 2 + 1] = elem<DT>::pack(dsv[2], dsv[3]);
    }
    // dK += dS^T Q
    wg_rs_mn_group<DT, DP, BM / 16>(dk, da, tqs, BM * 128);
    // dS^T to shared memory for dQ (stored while the MMAs read the registers)
#pragma unroll
    for (int j = 0; j < BM / 8; j++) {
      *reinterpret_cast<uint32_t *>(wds + sw128_off<BN>(srow, j) + tq * 4) = da[j / 2][(j % 2) * 2];
      *reinterpret_cast<uint32_t *>(wds + sw128_off<BN>(srow + 8, j) + tq * 4) =
          da[j / 2][(j % 2) * 2 + 1];
    }
    wg_wait<0>();
    wg_keep_all<NDA>(dv);
    wg_keep_all<NDA>(dk);
    wg_keep_all<BM / 4>(&pa[0][0]);
    wg_keep_all<BM / 4>(&da[0][0]);
    if (t + 1 < ntl) cp_async_wait<0>();  // tile t + 1's Q, dO, lse and D
    wg_proxy_fence();
    // dS^T of tile t complete, tile t + 1's buffers filled, tile t's Q and
    // dO read, tile t - 1's dQ (the other dS^T buffer) done
    __syncthreads();
    if (t + 2 < ntl) stage(t + 2, buf);
  }
  if (ntl > 0) {
    wg_fence();
    issue_dq(sds + ((ntl - 1) & 1) * SB);
    wg_wait<0>();
    wg_keep_all<NQA>(dq);
    reduce_dq(ntl - 1);
  }
  cp_async_wait<0>();  // no query tile: K and V are still in flight

  store_dkdv<DT, DP / 8>(p, dk, dv, {k0, kw, lk, kvh, d, g, tq});
#else
  __trap();
#endif
}

#define BWD3_KERNEL(name, DP, MINB)                                                  \
  extern "C" __global__ void __launch_bounds__(TE_ATTN_BWD3_THREADS, MINB)           \
      name(TE_KSIG(TE_ATTN_PARAMS)) {                                                \
    te_pdl_enter();                                                                  \
    if (p.qkv_dt == BF16) attn_bwd3<BF16, DP>(p);                                    \
    else attn_bwd3<F16, DP>(p);                                                      \
  }
BWD3_KERNEL(te_attn_bwd3_d64, 64, 1)
BWD3_KERNEL(te_attn_bwd3_d128, 128, 1)
