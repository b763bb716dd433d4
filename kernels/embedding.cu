// SPDX-License-Identifier: Apache-2.0
// embedding.cu -- token embedding (te/embedding.h; the order and the
// status word are kernels/common/embedding.h's).
//
// te_emb_fwd: a warp a token (TE_EMB_THREADS / 32 tokens a block, blocks
// looping), lanes over the row in 16-byte vectors (TE_EMB_VEC) or
// elements.  An id or position outside its table writes zeros and sets
// the status word; nothing is read from outside.
// te_emb_bwd: block b owns table rows [b*R, b*R + R) (R = TE_EMB_ROWS), so
// no two blocks write one row and no atomics are needed.  For each chunk of
// TE_EMB_CHUNK tokens the block loads the ids, marks the ones in its range
// (shared memory) and counts each row's hits; warp w takes its rows r = w,
// w + 8, ...: it lists the row's tokens in token order (ballots over the
// marks), then, 256 columns at a time, reads the row, adds those tokens'
// dy in order, and stores it.  Same order as the vdev code: the same bits.
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
    const uint64_t wb = ok ? (uint64_t)id * a.hidden : 0, pb = pok ? (uint64_t)pos * a.hidden : 0;
    const uint64_t ob = t * a.hidden;
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

// One row's columns [j, j + 8) (or [j] alone): read, add the listed
// tokens' dy in order, store.
__device__ __forceinline__ void emb_row_vec(const bwd_k &a, uint64_t rb, uint64_t j,
                                            const int *list, int n, int ddy, int ddw) {
  float acc[8], v[8];
  te_dev_ld8(a.dw, rb + j, ddw, acc);
  for (int i = 0; i < n; i++) {
    te_dev_ld8(a.dy, (uint64_t)list[i] * a.hidden + j, ddy, v);
#pragma unroll
    for (int k = 0; k < 8; k++) acc[k] = te_add_rn(acc[k], v[k]);
  }
  te_dev_st8(a.dw, rb + j, ddw, acc);
}

extern "C" __global__ void __launch_bounds__(ET) te_emb_bwd(TE_KSIG(TE_EMB_BWD_PARAMS)) {
  const bwd_k a = {TE_KNAMES(TE_EMB_BWD_PARAMS)};
  const int ddy = TE_EMB_DT(a.dtypes, 0), ddw = TE_EMB_DT(a.dtypes, 1);
  __shared__ signed char mark[TE_EMB_CHUNK];       // local row of each token, -1: none
  __shared__ int hits[TE_EMB_ROWS];
  __shared__ int list[NW][TE_EMB_CHUNK];            // per warp: one row's tokens
  const long long v0 = (long long)blockIdx.x * TE_EMB_ROWS;
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const int pos = a.flags & TE_EMB_POS;
  for (unsigned long long c0 = 0; c0 < a.tokens; c0 += TE_EMB_CHUNK) {
    const int n = (int)(a.tokens - c0 < TE_EMB_CHUNK ? a.tokens - c0 : TE_EMB_CHUNK);
    for (int r = threadIdx.x; r < TE_EMB_ROWS; r += ET) hits[r] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += ET) {
      const long long id = te_emb_id(a.ids, c0 + i, a.seq_len);
      const long long r = id - v0;
      const bool in = r >= 0 && r < TE_EMB_ROWS && id < a.vocab;
      mark[i] = in ? (signed char)r : (signed char)-1;
      if (in) atomicAdd(&hits[r], 1);
      if (blockIdx.x == 0 && (id < 0 || id >= a.vocab)) emb_report(a.status, te_emb_status(c0 + i, id, pos));
    }
    __syncthreads();
    for (int r = w; r < TE_EMB_ROWS; r += NW) {
      if (!hits[r] || v0 + r >= a.vocab) continue;
      int cnt = 0;  // the row's tokens, in order
      for (int i0 = 0; i0 < n; i0 += 32) {
        const int i = i0 + lane;
        const bool m = i < n && mark[i] == r;
        const unsigned b = __ballot_sync(0xffffffffu, m);
        if (m) list[w][cnt + __popc(b & ((1u << lane) - 1u))] = (int)(c0 + i);
        cnt += __popc(b);
      }
      __syncwarp();
      const uint64_t rb = (uint64_t)(v0 + r) * a.hidden;
      if (a.flags & TE_EMB_VEC) {
        for (uint64_t j = (uint64_t)lane * 8; j < a.hidden; j += 256)
          emb_row_vec(a, rb, j, list[w], cnt, ddy, ddw);
      } else {
        for (uint64_t j = lane; j < a.hidden; j += 32) {
          float acc = te_ld(a.dw, rb + j, ddw);
          for (int i = 0; i < cnt; i++)
            acc = te_add_rn(acc, te_ld(a.dy, (uint64_t)list[w][i] * a.hidden + j, ddy));
          te_st(a.dw, rb + j, ddw, acc);
        }
      }
      __syncwarp();
    }
    __syncthreads();
  }
}
