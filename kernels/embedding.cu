// SPDX-License-Identifier: Apache-2.0
// embedding.cu -- token embedding (te/embedding.h; the order and the
// status word are kernels/common/embedding.h's).
//
// te_emb_fwd: a warp a token (TE_EMB_THREADS / 32 tokens a block, blocks
// looping), lanes over the row in 16-byte vectors (TE_EMB_VEC) or
// elements.  An id or position outside its table writes zeros and sets
// the status word; nothing is read from outside.  With TE_EMB_STORE the
// copy goes the other way (row t of w into row ids[t] of out: a KV
// cache's append); an id outside the table writes nothing.  With a
// window (a shard of the table: kernels/common/embedding.h) an element
// outside it is written as 0.
// te_emb_bwd (the element path) and te_emb_bwd_<dy>_<dw> (the vector
// path, a kernel for each dtype pair): block b owns table rows
// [b*R, b*R + R) (R = TE_EMB_ROWS), so no two blocks write one row and no
// atomics touch dW.  For each chunk of TE_EMB_CHUNK tokens the block reads
// all the chunk's ids once and lists its hits in token order, warp 0
// groups them by row (token order kept), then the warps take (row, columns)
// items: read the row, add its tokens' dy in order, store it -- each row a
// chunk names is read and written once.  Same order as the vdev code: the
// same bits.  With a window, blocks start at row row0 and an item's
// columns are those of its row inside the window.  te_emb_bwd_pos: the
// position table's faster twin (below).
#include "common/embedding.h"
#include "ldst.cuh"
#include "pdl.cuh"

#define ET TE_EMB_THREADS
#define NW (ET / 32)

struct fwd_k {
  TE_KMEMBERS(TE_EMB_FWD_PARAMS)
};
struct bwd_k {
  TE_KMEMBERS(TE_EMB_BWD_PARAMS)
};

__device__ __forceinline__ void emb_report(unsigned long long *st, unsigned long long w) {
  if (st && *(volatile unsigned long long *)st == 0) {
    *(volatile unsigned long long *)st = w;
    __threadfence_system();
  }
}

extern "C" __global__ void __launch_bounds__(ET) te_emb_fwd(TE_KSIG(TE_EMB_FWD_PARAMS)) {
  te_pdl_enter();
  const fwd_k a = {TE_KNAMES(TE_EMB_FWD_PARAMS)};
  const int dw = TE_EMB_DT(a.dtypes, 0), dp = TE_EMB_DT(a.dtypes, 1), dout = TE_EMB_DT(a.dtypes, 2);
  const int lane = threadIdx.x % 32;
  for (unsigned long long t = (unsigned long long)blockIdx.x * NW + threadIdx.x / 32; t < a.tokens;
       t += (unsigned long long)gridDim.x * NW) {
    const long long id = a.ids[t], pos = a.p ? te_emb_id(a.positions, t, a.seq_len) : 0;
    const bool ok = id >= 0 && id < a.vocab, pok = !a.p || (pos >= 0 && pos < a.max_pos);
    if (lane == 0 && !ok) emb_report(a.status, te_emb_status(t, id, 0));
    else if (lane == 0 && !pok) emb_report(a.status, te_emb_status(t, pos, 1));
    const bool store = (a.flags & TE_EMB_STORE) != 0;
    if (store && !ok) continue;   /* a store past the table writes nothing */
    const uint64_t pb = pok ? (uint64_t)pos * a.hidden : 0;
    const uint64_t wb = store ? t * a.hidden : ok ? (uint64_t)id * a.hidden : 0;
    const uint64_t ob = store ? (uint64_t)id * a.hidden : t * a.hidden;
    // element wb + j of the table at w's (wb + j - wfirst): below the
    // window it wraps past wcount
    const uint64_t wo = wb - a.wfirst;
    if (a.flags & TE_EMB_VEC) {
      for (uint64_t j = (uint64_t)lane * 8; j < a.hidden; j += 256) {
        float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (ok && pok) {
          if (wo + j < a.wcount) te_dev_ld8(a.w, wo + j, dw, v);
          if (a.p) {
            float q[8];
            te_dev_ld8(a.p, pb + j, dp, q);
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = te_add_rn(v[k], q[k]);
          }
        }
        te_dev_st8(a.out, ob + j, dout, v);
      }
    } else {
      for (uint64_t j = lane; j < a.hidden; j += 32) {
        float v = 0.0f;
        if (ok && pok) {
          if (wo + j < a.wcount) v = te_ld(a.w, wo + j, dw);
          if (a.p) v = te_add_rn(v, te_ld(a.p, pb + j, dp));
        }
        te_st(a.out, ob + j, dout, v);
      }
    }
  }
}

// The backward: one pass over a chunk's ids, then its rows.
//
// Phase 1: thread k takes the chunk's tokens [32 k, 32 k + 32), loaded 4 at
// a time, and keeps a mask of those naming a row of the block; a block scan
// of the counts places them in hit[] in token order (chunk-relative, 16
// bits), and each row's hits are counted (integer atomics: exact).
// Phase 2 (warp 0): hit[] grouped by row into list[], token order kept
// (emb_group).  Phase 3: the rows (emb_rows_vec, emb_rows_elem).
#define TPT (TE_EMB_CHUNK / ET)  // tokens a thread scans
#define EMB_MINB 2  // blocks resident on an SM: at most 128 registers
static_assert(TPT == 32 && TE_EMB_CHUNK <= 65536,
              "te_emb_bwd: a thread's hits are a 32-bit mask; hit[] holds 16-bit tokens");

struct emb_smem {
  uint16_t hit[TE_EMB_CHUNK];   // the chunk's hits, token order
  uint16_t list[TE_EMB_CHUNK];  // the same grouped by row, token order within a row
  int cnt[TE_EMB_ROWS], start[TE_EMB_ROWS + 1], rows[TE_EMB_ROWS], nrows;
  int wsum[NW];
};

// 4 ids from token t (t a multiple of 4, all below the chunk's end).
__device__ __forceinline__ void emb_ids4(const bwd_k &a, unsigned long long t, bool vec,
                                         long long *id) {
  if (vec) {
    const int4 q = __ldg((const int4 *)(a.ids + t));
    id[0] = q.x, id[1] = q.y, id[2] = q.z, id[3] = q.w;
  } else {
#pragma unroll
    for (int e = 0; e < 4; e++) id[e] = te_emb_id(a.ids, t + e, a.seq_len);
  }
}

// Phase 1; returns the chunk's hits in the block's rows (all threads).
__device__ int emb_scan(const bwd_k &a, unsigned long long c0, int n, long long v0, emb_smem &s) {
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32, pos = a.flags & TE_EMB_POS;
  const int i0 = threadIdx.x * TPT;
  const bool vec = a.ids && (uintptr_t)a.ids % 16 == 0;
  unsigned m = 0;
  // an id outside the table (chunk token i0 + q), reported by block 0
  auto report = [&](long long id, int q) {
    if (blockIdx.x == 0 && (id < 0 || id >= a.vocab))
      emb_report(a.status, te_emb_status(c0 + i0 + q, id, pos));
  };
  // one id: its bit in m and its row's count
  auto take = [&](long long id, int q) {
    const long long r = id - v0;
    if (r >= 0 && r < TE_EMB_ROWS && id < a.vocab) {
      m |= 1u << q;
      atomicAdd(&s.cnt[r], 1);
    }
    report(id, q);
  };
  // all TPT ids loaded before the first is tested (rows in int range)
  if (vec && i0 + TPT <= n && v0 <= 0x7fffffffll - TE_EMB_ROWS) {
    int4 q4[TPT / 4];
#pragma unroll
    for (int q = 0; q < TPT / 4; q++) q4[q] = __ldg((const int4 *)(a.ids + c0 + i0) + q);
    bool bad = false;
#pragma unroll
    for (int q = 0; q < TPT / 4; q++) {
      const int id[4] = {q4[q].x, q4[q].y, q4[q].z, q4[q].w};
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const unsigned r = (unsigned)id[e] - (unsigned)v0;  // a negative id: past 2^31
        if (r < TE_EMB_ROWS && id[e] < a.vocab) {
          m |= 1u << (4 * q + e);
          atomicAdd(&s.cnt[r], 1);
        }
        bad |= id[e] < 0 || id[e] >= a.vocab;
      }
    }
    if (blockIdx.x == 0 && bad)
      for (int q = 0; q < TPT; q++) report(a.ids[c0 + i0 + q], q);
  } else {
#pragma unroll 2
    for (int q = 0; q < TPT; q += 4) {
      const int i = i0 + q;
      if (i >= n) break;
      long long id[4];
      if (i + 4 <= n) emb_ids4(a, c0 + i, vec, id);
      else
        for (int e = 0; e < 4; e++) id[e] = i + e < n ? te_emb_id(a.ids, c0 + i + e, a.seq_len) : -1;
#pragma unroll
      for (int e = 0; e < 4; e++)
        if (i + e < n) take(id[e], q + e);
    }
  }
  int c = __popc(m), inc = c;
  for (int o = 1; o < 32; o <<= 1) {
    const int v = __shfl_up_sync(0xffffffffu, inc, o);
    if (lane >= o) inc += v;
  }
  if (lane == 31) s.wsum[w] = inc;
  __syncthreads();
  int off = inc - c, total = 0;
#pragma unroll
  for (int k = 0; k < NW; k++) {
    off += k < w ? s.wsum[k] : 0;
    total += s.wsum[k];
  }
  for (; m; m &= m - 1) s.hit[off++] = (uint16_t)(i0 + __ffs(m) - 1);
  return total;
}

// Phase 2, warp 0: start[] from cnt[] (2 rows a lane), rows[] the rows hit,
// then hit[] placed by row: a match over each 32 ranks a lane among the
// earlier lanes of its row.
__device__ void emb_group(const bwd_k &a, unsigned long long c0, int n, long long v0,
                          emb_smem &s) {
  static_assert(TE_EMB_ROWS == 64, "emb_group: a lane takes rows 2 lane, 2 lane + 1");
  const int lane = threadIdx.x % 32;
  const int c0n = s.cnt[2 * lane], c1n = s.cnt[2 * lane + 1];
  int sum = c0n + c1n, k = (c0n > 0) + (c1n > 0);  // inclusive scans over the lanes
  for (int o = 1; o < 32; o <<= 1) {
    const int s2 = __shfl_up_sync(0xffffffffu, sum, o), k2 = __shfl_up_sync(0xffffffffu, k, o);
    if (lane >= o) sum += s2, k += k2;
  }
  const int se = sum - c0n - c1n, ke = k - (c0n > 0) - (c1n > 0);
  s.start[2 * lane] = se;
  s.start[2 * lane + 1] = se + c0n;
  if (c0n) s.rows[ke] = 2 * lane;
  if (c1n) s.rows[ke + (c0n > 0)] = 2 * lane + 1;
  if (lane == 31) s.start[TE_EMB_ROWS] = sum, s.nrows = k;
  s.cnt[2 * lane] = s.cnt[2 * lane + 1] = 0;  // now each row's fill cursor
  __syncwarp();
  for (int i0 = 0; i0 < n; i0 += 32) {
    const int i = i0 + lane;
    const int t = i < n ? s.hit[i] : 0;
    const int r = i < n ? (int)(te_emb_id(a.ids, c0 + t, a.seq_len) - v0) : -1;
    const unsigned same = __match_any_sync(0xffffffffu, r);
    const int rank = __popc(same & ((1u << lane) - 1u));
    if (r >= 0) s.list[s.start[r] + s.cnt[r] + rank] = (uint16_t)t;
    __syncwarp();
    if (r >= 0 && rank == 0) s.cnt[r] += __popc(same);
    __syncwarp();
  }
}

// 8 elements as loaded (F32: two quads; 16-bit: one), widened when used,
// so the loads of a batch are all in flight before the first is waited on.
template <int DT>
__device__ __forceinline__ void emb_ldraw(const void *p, uint64_t i, uint4 *r) {
  if constexpr (DT == TE_FP8_DT_F32) {
    const uint4 *q = (const uint4 *)((const float *)p + i);
    r[0] = q[0];
    r[1] = q[1];
  } else {
    r[0] = *(const uint4 *)((const uint16_t *)p + i);
  }
}
// dy is read once: streamed past the caches.
template <int DT>
__device__ __forceinline__ void emb_ldraw_cs(const void *p, uint64_t i, uint4 *r) {
  if constexpr (DT == TE_FP8_DT_F32) {
    const uint4 *q = (const uint4 *)((const float *)p + i);
    r[0] = __ldcs(q);
    r[1] = __ldcs(q + 1);
  } else {
    r[0] = __ldcs((const uint4 *)((const uint16_t *)p + i));
  }
}
template <int DT>
__device__ __forceinline__ void emb_unpack(const uint4 *r, float *v) {
  if constexpr (DT == TE_FP8_DT_F32) {
    const uint32_t w[8] = {r[0].x, r[0].y, r[0].z, r[0].w, r[1].x, r[1].y, r[1].z, r[1].w};
#pragma unroll
    for (int k = 0; k < 8; k++) v[k] = __uint_as_float(w[k]);
  } else {
    te_dev_unpack8t<DT>(r[0], v);
  }
}
template <int DT>
__device__ __forceinline__ void emb_add(float *acc, const uint4 *r) {
  float v[8];
  emb_unpack<DT>(r, v);
#pragma unroll
  for (int k = 0; k < 8; k++) acc[k] = te_add_rn(acc[k], v[k]);
}

// Phase 3, the vector path: a warp an item (row hit, EB * 256 columns),
// a lane EB vectors of 8 columns 256 apart.  The dW vectors and the row's
// first dy are loaded together, then each further token's EB vectors, in
// token order.  An item's row, token list and bounds are the warp's, so
// its lanes never diverge and the loads' offsets are constants.
// EB: 4 vectors a lane (3 when dy is F32: its twice wider loads would
// spill past 128 registers).
template <int DT>
using emb_raw = uint4[DT == TE_FP8_DT_F32 ? 2 : 1];
template <int DT>
__device__ constexpr int emb_esize() { return DT == TE_FP8_DT_F32 ? 4 : 2; }

template <int DY, int DW>
__device__ void emb_rows_vec(const bwd_k &a, unsigned long long c0, long long v0,
                             const emb_smem &s) {
  constexpr int EB = DY == TE_FP8_DT_F32 ? 3 : 4, EMB_SEG = EB * 256;
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const unsigned hidden = (unsigned)a.hidden;  // the host takes this path below 2^31 columns
  const unsigned segs = (hidden + EMB_SEG - 1) / EMB_SEG, items = (unsigned)s.nrows * segs;
  const char *dy = (const char *)a.dy + (c0 * hidden + lane * 8) * emb_esize<DY>();
  const size_t dyrow = (size_t)hidden * emb_esize<DY>();
  for (unsigned it = w; it < items; it += NW) {
    const unsigned k = it / segs, j0 = (it - k * segs) * EMB_SEG + lane * 8;
    const int r = s.rows[k], i0 = s.start[r], i1 = s.start[r + 1];
    // the lane's vectors in the window (the row's columns [lo, hi) in it;
    // the whole row without a shard): nv of the item's EB from its e0-th,
    // at column jv, so the loops below test one bound
    const uint64_t rb = (uint64_t)(v0 + r) * hidden;
    unsigned long long lo, hi;
    te_emb_window(rb, hidden, a.wfirst, a.wcount, &lo, &hi);
    const int e0 = lo > j0 ? (int)((lo - j0 + 255) / 256) : 0;
    const unsigned jv = j0 + (unsigned)e0 * 256;
    const int nv = hi > jv && e0 < EB ? min((int)((hi - jv + 255) / 256), EB - e0) : 0;
    char *dw = (char *)a.dw + (rb + jv - a.wfirst) * emb_esize<DW>();
    const char *dyj = dy + (size_t)(jv - lane * 8) * emb_esize<DY>();
    float acc[EB][8];
    {
      emb_raw<DW> rw[EB];
      emb_raw<DY> rd[EB];
      const char *p = dyj + s.list[i0] * dyrow;
#pragma unroll
      for (int e = 0; e < EB; e++)
        if (e < nv) {
          emb_ldraw<DW>(dw, e * 256, rw[e]);
          emb_ldraw_cs<DY>(p, e * 256, rd[e]);
        }
#pragma unroll
      for (int e = 0; e < EB; e++)
        if (e < nv) {
          emb_unpack<DW>(rw[e], acc[e]);
          emb_add<DY>(acc[e], rd[e]);
        }
    }
#pragma unroll 1
    for (int i = i0 + 1; i < i1; i++) {
      emb_raw<DY> rd[EB];
      const char *p = dyj + s.list[i] * dyrow;
#pragma unroll
      for (int e = 0; e < EB; e++)
        if (e < nv) emb_ldraw_cs<DY>(p, e * 256, rd[e]);
#pragma unroll
      for (int e = 0; e < EB; e++)
        if (e < nv) emb_add<DY>(acc[e], rd[e]);
    }
#pragma unroll
    for (int e = 0; e < EB; e++)
      if (e < nv) te_dev_st8t<DW>(dw, e * 256, acc[e]);
  }
}

// The element path: a warp a row, lanes over its columns in the window.
__device__ void emb_rows_elem(const bwd_k &a, unsigned long long c0, long long v0,
                              const emb_smem &s, int ddy, int ddw) {
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  for (int k = w; k < s.nrows; k += NW) {
    const int r = s.rows[k];
    const uint64_t rb = (uint64_t)(v0 + r) * a.hidden, wb = rb - a.wfirst;
    unsigned long long lo, hi;
    te_emb_window(rb, a.hidden, a.wfirst, a.wcount, &lo, &hi);
    for (uint64_t j = lo + lane; j < hi; j += 32) {
      float acc = te_ld(a.dw, wb + j, ddw);
      for (int i = s.start[r]; i < s.start[r + 1]; i++)
        acc = te_add_rn(acc, te_ld(a.dy, (c0 + s.list[i]) * a.hidden + j, ddy));
      te_st(a.dw, wb + j, ddw, acc);
    }
  }
}

// The position table's backward when every position is implied and in
// the table (t % seq_len, seq_len <= its rows): position p's tokens are p,
// p + S, p + 2 S, ..., so a thread takes one 8-column vector of one
// position and adds its tokens' dy in token order, rounding a 16-bit
// table where a chunk of TE_EMB_CHUNK tokens ends -- as te_emb_bwd's
// blocks store and reload it: the same bits, with every SM busy (te_emb_bwd
// gives such a table seq_len / TE_EMB_ROWS blocks, 16 for GPT-2's, each
// adding its tokens one dependent load after another: about 150 us on an
// H100 where the read takes 20).  EMB_POS_BATCH tokens' loads in flight.
#define EMB_POS_BATCH 8

template <int DW>
__device__ __forceinline__ void emb_round8(float *v) {
  if constexpr (DW != TE_FP8_DT_F32) te_dev_unpack8t<DW>(te_dev_pack8t<DW>(v), v);
}

template <int DY, int DW>
__device__ __forceinline__ void emb_pos_vec(const bwd_k &a, unsigned long long v) {
  const unsigned long long hv = a.hidden / 8, p = v / hv, S = (unsigned long long)a.seq_len;
  const uint64_t j = (v - p * hv) * 8;
  float acc[8];
  te_dev_ld8t<DW>(a.dw, p * a.hidden + j, acc);
  unsigned long long chunk = p / TE_EMB_CHUNK;
  for (unsigned long long t = p; t < a.tokens; t += EMB_POS_BATCH * S) {
    emb_raw<DY> r[EMB_POS_BATCH];
#pragma unroll
    for (int q = 0; q < EMB_POS_BATCH; q++)
      if (t + q * S < a.tokens) emb_ldraw_cs<DY>(a.dy, (t + q * S) * a.hidden + j, r[q]);
#pragma unroll
    for (int q = 0; q < EMB_POS_BATCH; q++) {
      const unsigned long long tq = t + q * S;
      if (tq >= a.tokens) break;
      if (tq / TE_EMB_CHUNK != chunk) {  // the chunk's store and the next one's load
        emb_round8<DW>(acc);
        chunk = tq / TE_EMB_CHUNK;
      }
      emb_add<DY>(acc, r[q]);
    }
  }
  te_dev_st8t<DW>(a.dw, p * a.hidden + j, acc);
}

template <int DY>
__device__ __forceinline__ void emb_pos_dw(const bwd_k &a, unsigned long long v, int dw) {
  if (dw == TE_FP8_DT_F32) emb_pos_vec<DY, TE_FP8_DT_F32>(a, v);
  else if (dw == TE_FP8_DT_BF16) emb_pos_vec<DY, TE_FP8_DT_BF16>(a, v);
  else emb_pos_vec<DY, TE_FP8_DT_F16>(a, v);
}

// A thread a vector: min(seq_len, tokens) positions x hidden / 8 (the host
// checks hidden % 8, the alignment and that the grid covers them).
extern "C" __global__ void __launch_bounds__(ET) te_emb_bwd_pos(TE_KSIG(TE_EMB_BWD_PARAMS)) {
  te_pdl_enter();
  const bwd_k a{TE_KNAMES(TE_EMB_BWD_PARAMS)};
  const unsigned long long S = (unsigned long long)a.seq_len;
  const unsigned long long np = a.tokens < S ? a.tokens : S;
  const unsigned long long v = (unsigned long long)blockIdx.x * ET + threadIdx.x;
  if (v >= np * (a.hidden / 8)) return;
  const int ddy = TE_EMB_DT(a.dtypes, 0), ddw = TE_EMB_DT(a.dtypes, 1);
  if (ddy == TE_FP8_DT_F32) emb_pos_dw<TE_FP8_DT_F32>(a, v, ddw);
  else if (ddy == TE_FP8_DT_BF16) emb_pos_dw<TE_FP8_DT_BF16>(a, v, ddw);
  else emb_pos_dw<TE_FP8_DT_F16>(a, v, ddw);
}

// The body of the backward kernels: DY, DW the dtypes of the vector path,
// or -1 for the element path (its dtypes read at run time).
template <int DY, int DW>
__device__ __forceinline__ void emb_bwd(const bwd_k &a) {
  __shared__ emb_smem s;
  // the host's grid covers the window's rows (the last block's rows past
  // it are taken but find no columns in it: an id test here would spill)
  const long long v0 = a.row0 + (long long)blockIdx.x * TE_EMB_ROWS;
  for (unsigned long long c0 = 0; c0 < a.tokens; c0 += TE_EMB_CHUNK) {
    const int n = (int)(a.tokens - c0 < TE_EMB_CHUNK ? a.tokens - c0 : TE_EMB_CHUNK);
    for (int r = threadIdx.x; r < TE_EMB_ROWS; r += ET) s.cnt[r] = 0;
    __syncthreads();
    const int hits = emb_scan(a, c0, n, v0, s);
    __syncthreads();
    // a chunk naming none of the block's rows: nothing reads hit[] or cnt[]
    // after the barrier above, so the next chunk may overwrite them
    if (!hits) continue;
    if (threadIdx.x < 32) emb_group(a, c0, hits, v0, s);
    __syncthreads();
    if constexpr (DY < 0)
      emb_rows_elem(a, c0, v0, s, TE_EMB_DT(a.dtypes, 0), TE_EMB_DT(a.dtypes, 1));
    else
      emb_rows_vec<DY, DW>(a, c0, v0, s);
    __syncthreads();
  }
}

extern "C" __global__ void __launch_bounds__(ET, EMB_MINB) te_emb_bwd(TE_KSIG(TE_EMB_BWD_PARAMS)) {
  te_pdl_enter();
  emb_bwd<-1, -1>(bwd_k{TE_KNAMES(TE_EMB_BWD_PARAMS)});
}

// The vector path, a kernel for each pair of dtypes (dy, dW) so that each
// gets the registers it needs and no more (kernels/common/embedding.h
// lists them in the order the host indexes them).
#define EMB_BWD_VEC(name, dy, dw)                                                    \
  extern "C" __global__ void __launch_bounds__(ET, EMB_MINB) name(                   \
      TE_KSIG(TE_EMB_BWD_PARAMS)) {                                                  \
    te_pdl_enter();                                                                  \
    emb_bwd<TE_FP8_DT_##dy, TE_FP8_DT_##dw>(bwd_k{TE_KNAMES(TE_EMB_BWD_PARAMS)});    \
  }
TE_EMB_BWD_VEC_LIST(EMB_BWD_VEC)
