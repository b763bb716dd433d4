// SPDX-License-Identifier: Apache-2.0
// embedding.cu -- token embedding (te/embedding.h; the order and the
// status word are kernels/common/embedding.h's).
//
// te_emb_fwd: a warp a token (TE_EMB_THREADS / 32 tokens a block, blocks
// looping), lanes over the row in 16-byte vectors (TE_EMB_VEC) or
// elements.  An id or position outside its table writes zeros and sets
// the status word; nothing is read from outside.  With TE_EMB_STORE the
// copy goes the other way (row t of w into row ids[t] of out: a KV
// cache's append); an id outside the table writes nothing.
// te_emb_bwd: block b owns table rows [b*R, b*R + R) (R = TE_EMB_ROWS), so
// no two blocks write one row and no atomics are needed.  For each chunk of
// TE_EMB_CHUNK tokens the block loads the ids, marks the ones in its range
// (shared memory) and counts each row's hits; warp 0 groups the chunk's
// tokens by row, in token order within a row (emb_group); then all threads
// take (row, 8 columns) items, EB at a time with their loads in flight
// together: read the row, add those tokens' dy in order, store it.  Same
// order as the vdev code: the same bits.
#include "common/embedding.h"
#include "ldst.cuh"

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
    if (a.flags & TE_EMB_VEC) {
      for (uint64_t j = (uint64_t)lane * 8; j < a.hidden; j += 256) {
        float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (ok && pok) {
          te_dev_ld8(a.w, wb + j, dw, v);
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
          v = te_ld(a.w, wb + j, dw);
          if (a.p) v = te_add_rn(v, te_ld(a.p, pb + j, dp));
        }
        te_st(a.out, ob + j, dout, v);
      }
    }
  }
}

// 8 elements as loaded (F32: two quads; 16-bit: one), widened when used,
// so the loads of a batch are all in flight before the first is waited on.
__device__ __forceinline__ void emb_ldraw(const void *p, uint64_t i, int dt, uint4 *r) {
  if (dt == TE_FP8_DT_F32) {
    const uint4 *q = (const uint4 *)((const float *)p + i);
    r[0] = q[0];
    r[1] = q[1];
  } else {
    r[0] = *(const uint4 *)((const uint16_t *)p + i);
  }
}
__device__ __forceinline__ void emb_unpack(const uint4 *r, int dt, float *v) {
  if (dt == TE_FP8_DT_F32) {
    const uint32_t w[8] = {r[0].x, r[0].y, r[0].z, r[0].w, r[1].x, r[1].y, r[1].z, r[1].w};
#pragma unroll
    for (int k = 0; k < 8; k++) v[k] = __uint_as_float(w[k]);
  } else if (dt == TE_FP8_DT_BF16) {
    te_dev_unpack8t<TE_FP8_DT_BF16>(r[0], v);
  } else {
    te_dev_unpack8t<TE_FP8_DT_F16>(r[0], v);
  }
}

// Warp 0: the chunk's hits grouped by row (start[] from hits[]), each
// row's tokens in token order (a match over each 32 marks ranks a lane
// among the earlier lanes of its row); rows[] lists the rows hit.
__device__ void emb_group(int n, unsigned long long c0, const signed char *mark, int *hits,
                          int *start, int *rows, int *nrows, int *list) {
  static_assert(TE_EMB_ROWS == 64, "emb_group: a lane takes rows 2 lane, 2 lane + 1");
  const int lane = threadIdx.x % 32;
  const int c0n = hits[2 * lane], c1n = hits[2 * lane + 1];
  int s = c0n + c1n, k = (c0n > 0) + (c1n > 0);  // inclusive scans over the lanes
  for (int o = 1; o < 32; o <<= 1) {
    const int s2 = __shfl_up_sync(0xffffffffu, s, o), k2 = __shfl_up_sync(0xffffffffu, k, o);
    if (lane >= o) s += s2, k += k2;
  }
  const int se = s - c0n - c1n, ke = k - (c0n > 0) - (c1n > 0);
  start[2 * lane] = se;
  start[2 * lane + 1] = se + c0n;
  if (c0n) rows[ke] = 2 * lane;
  if (c1n) rows[ke + (c0n > 0)] = 2 * lane + 1;
  if (lane == 31) start[TE_EMB_ROWS] = s, *nrows = k;
  hits[2 * lane] = hits[2 * lane + 1] = 0;  // now each row's fill cursor
  __syncwarp();
  for (int i0 = 0; i0 < n; i0 += 32) {
    const int i = i0 + lane;
    const int r = i < n ? mark[i] : -1;
    const unsigned same = __match_any_sync(0xffffffffu, r);
    const int rank = __popc(same & ((1u << lane) - 1u));
    if (r >= 0) list[start[r] + hits[r] + rank] = (int)(c0 + i);
    __syncwarp();
    if (r >= 0 && rank == 0) hits[r] += __popc(same);
    __syncwarp();
  }
}

// The vector path: items (row hit, 8 columns) over all threads, EB a
// thread a batch: the dW vectors and each row's first dy are loaded
// together, then the row's further tokens added in order.
#define EB 4
__device__ __forceinline__ void emb_rows_vec(const bwd_k &a, long long v0, const int *start,
                                             const int *rows, int nrows, const int *list, int ddy,
                                             int ddw) {
  const unsigned long long vpr = a.hidden / 8, items = (unsigned long long)nrows * vpr;
  for (unsigned long long w0 = threadIdx.x; w0 < items; w0 += EB * ET) {
    uint4 rw[EB][2], rd[EB][2];
    int row[EB];
    uint64_t jj[EB];
#pragma unroll
    for (int e = 0; e < EB; e++) {
      const unsigned long long w = w0 + (unsigned long long)e * ET;
      row[e] = -1;
      if (w >= items) continue;
      const unsigned long long k = w / vpr;
      row[e] = rows[k];
      jj[e] = (w - k * vpr) * 8;
      emb_ldraw(a.dw, (uint64_t)(v0 + row[e]) * a.hidden + jj[e], ddw, rw[e]);
      emb_ldraw(a.dy, (uint64_t)list[start[row[e]]] * a.hidden + jj[e], ddy, rd[e]);
    }
#pragma unroll
    for (int e = 0; e < EB; e++) {
      if (row[e] < 0) continue;
      float acc[8], v[8];
      emb_unpack(rw[e], ddw, acc);
      emb_unpack(rd[e], ddy, v);
#pragma unroll
      for (int k = 0; k < 8; k++) acc[k] = te_add_rn(acc[k], v[k]);
      for (int i = start[row[e]] + 1; i < start[row[e] + 1]; i++) {
        te_dev_ld8(a.dy, (uint64_t)list[i] * a.hidden + jj[e], ddy, v);
#pragma unroll
        for (int k = 0; k < 8; k++) acc[k] = te_add_rn(acc[k], v[k]);
      }
      te_dev_st8(a.dw, (uint64_t)(v0 + row[e]) * a.hidden + jj[e], ddw, acc);
    }
  }
}

extern "C" __global__ void __launch_bounds__(ET) te_emb_bwd(TE_KSIG(TE_EMB_BWD_PARAMS)) {
  const bwd_k a = {TE_KNAMES(TE_EMB_BWD_PARAMS)};
  const int ddy = TE_EMB_DT(a.dtypes, 0), ddw = TE_EMB_DT(a.dtypes, 1);
  __shared__ signed char mark[TE_EMB_CHUNK];  // local row of each token, -1: none
  __shared__ int hits[TE_EMB_ROWS], start[TE_EMB_ROWS + 1], rows[TE_EMB_ROWS], nrows;
  __shared__ int list[TE_EMB_CHUNK];          // the chunk's hits, by row, token order
  const long long v0 = (long long)blockIdx.x * TE_EMB_ROWS;
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const int pos = a.flags & TE_EMB_POS;
  for (unsigned long long c0 = 0; c0 < a.tokens; c0 += TE_EMB_CHUNK) {
    const int n = (int)(a.tokens - c0 < TE_EMB_CHUNK ? a.tokens - c0 : TE_EMB_CHUNK);
    for (int r = threadIdx.x; r < TE_EMB_ROWS; r += ET) hits[r] = 0;
    __syncthreads();
    int mine = 0;
    for (int i = threadIdx.x; i < n; i += ET) {
      const long long id = te_emb_id(a.ids, c0 + i, a.seq_len);
      const long long r = id - v0;
      const bool in = r >= 0 && r < TE_EMB_ROWS && id < a.vocab;
      mark[i] = in ? (signed char)r : (signed char)-1;
      if (in) atomicAdd(&hits[r], 1), mine = 1;
      if (blockIdx.x == 0 && (id < 0 || id >= a.vocab)) emb_report(a.status, te_emb_status(c0 + i, id, pos));
    }
    // a chunk naming none of the block's rows: nothing reads mark or hits
    // after this barrier, so the next chunk may overwrite them
    if (!__syncthreads_or(mine)) continue;
    if (w == 0) emb_group(n, c0, mark, hits, start, rows, &nrows, list);
    __syncthreads();
    if (a.flags & TE_EMB_VEC) {
      emb_rows_vec(a, v0, start, rows, nrows, list, ddy, ddw);
    } else {
      for (int k = w; k < nrows; k += NW) {
        const int r = rows[k];
        const uint64_t rb = (uint64_t)(v0 + r) * a.hidden;
        for (uint64_t j = lane; j < a.hidden; j += 32) {
          float acc = te_ld(a.dw, rb + j, ddw);
          for (int i = start[r]; i < start[r + 1]; i++)
            acc = te_add_rn(acc, te_ld(a.dy, (uint64_t)list[i] * a.hidden + j, ddy));
          te_st(a.dw, rb + j, ddw, acc);
        }
      }
    }
    __syncthreads();
  }
}
