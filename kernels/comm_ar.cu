// SPDX-License-Identifier: Apache-2.0
// comm_ar.cu -- libtecomm's allreduce protocols on the GPU: IPC one-shot,
// two-shot and Lamport one-shot, NVLS simple (multimem load-reduce and
// store) and NVLS Lamport (multimem store), plain and with the
// residual-add + RMSNorm (+ FP8) epilogue fused in; the gather kernel of
// all-gather (reduce-scatter is one-shot over a range: comm_ar.h); the
// Lamport kernel also runs both (ar_lam_store_rs, ar_lam_gather).  The
// workspace layout, parameter block, work
// split, element math and sentinel rules are kernels/common/comm_ar.h,
// shared with the vdev implementations (libtecomm/base/ar_vdev.c); the norm's
// summation order is kernels/common/norm.h's, so the fused results are the
// bits tecore_rmsnorm_fwd gives on the unfused path.
//
// Memory: inputs of peers (in[s]) are peer mappings over NVLink, read with
// ld.global.cg (L2, never a stale L1 line); flags are 64-bit words written
// with st.release.sys and polled with ld.acquire.sys; Lamport granules are
// written with st.volatile.v4 into the peers' buffers and polled with
// ld.volatile.v4 locally (ld.volatile is a relaxed .sys load: it never
// hits L1, and the peers' stores land in this GPU's L2).  Flags live in
// lines of their own (comm_ar.h).
//
// Latency: a small call is a chain of waits, so no thread waits on one
// load before issuing the next independent one (set-up words together,
// polls of every slot together, the fused kernels' rows in one batch).
//
// Every wait is bounded: %globaltimer against the call's timeout; on expiry
// the waiter writes the error word (first failure wins) and the block
// leaves; the abort word and an earlier failure make every waiter leave.
//
// Launch: 1-D grids of at most TE_AR_MAX_BLOCKS blocks (co-resident on
// Hopper), 512 threads for the plain kernels, the RMSNorm plan's block
// (tpr x rows-per-block threads) for the fused ones, 2-4x that for the
// spread fused Lamport kernels; programmatic dependent launch (see the
// entry points).
#include "common/comm_ar.h"
#include "common/norm.h"
#include "ldst.cuh"
#include <type_traits>

#define FULL_MASK 0xffffffffu
#define F32 TE_FP8_DT_F32
#define F16 TE_FP8_DT_F16
#define BF16 TE_FP8_DT_BF16

// ---- memory operations -------------------------------------------------------

__device__ __forceinline__ uint64_t ar_gtimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ uint64_t ar_ld_acquire(const uint64_t *p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void ar_st_release(uint64_t *p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ uint32_t ar_ld_volatile32(const uint32_t *p) {
  uint32_t v;
  asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint4 ar_ld_volatile16(const void *p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}
__device__ __forceinline__ void ar_st_volatile16(void *p, uint4 v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}
template <typename T>
__device__ __forceinline__ T *ar_ptr(uint64_t a) {
  return reinterpret_cast<T *>(a);
}

// ---- waits -------------------------------------------------------------------------

struct ar_block {
  uint64_t deadline;  // 0: none
  uint32_t *err, *abort_word;
};

__device__ __forceinline__ void ar_fail(const ar_block &c, uint32_t code, int peer) {
  atomicCAS(c.err, 0u, TE_AR_ERRWORD(code, peer));
}

// Between polls: true to poll again, false to give up (checked every 32
// polls: the local words and the timer are cheap, not free).
__device__ __forceinline__ bool ar_poll_again(const ar_block &c, int peer, unsigned &it) {
  if ((++it & 31u) != 0) return true;
  if (ar_ld_volatile32(c.abort_word)) {
    ar_fail(c, TE_AR_ABORTED, peer);
    return false;
  }
  if (ar_ld_volatile32(c.err)) return false;
  if (c.deadline && ar_gtimer() > c.deadline) {
    ar_fail(c, TE_AR_TIMEOUT, peer);
    return false;
  }
  return true;
}

// The call's descriptor into this rank's workspace (thread 0 of block 0,
// once the call runs), for the host to name a mismatch (comm_ar.h).
__device__ __forceinline__ void ar_desc_note(const te_ar_params &p) {
  if (!p.desc.hash || blockIdx.x != 0) return;
  const uint64_t *src = reinterpret_cast<const uint64_t *>(&p.desc);
  volatile uint64_t *dst = ar_ptr<volatile uint64_t>(p.ws[p.rank] + TE_AR_OFF_DESC);
#pragma unroll
  for (int i = 0; i < (int)(sizeof(te_ar_desc) / 8); i++) dst[i] = src[i];
}

// Block set-up: the deadline, the error and abort words, and nphases
// phases of this block's barrier counter (returned: the base).  Returns
// false in every thread when this rank already failed.
__device__ __forceinline__ bool ar_begin(const te_ar_params &p, int nphases, ar_block &c,
                                         uint64_t &base) {
  __shared__ uint64_t s_base, s_deadline;
  __shared__ int s_failed;
  uint64_t ws = p.ws[p.rank];
  c.err = ar_ptr<uint32_t>(ws + TE_AR_OFF_ERR);
  c.abort_word = ar_ptr<uint32_t>(ws + TE_AR_OFF_ABORT);
  if (threadIdx.x == 0) {
    /* three independent loads in flight together (one trip to L2) */
    uint64_t *e = ar_ptr<uint64_t>(ws + TE_AR_OFF_EPOCH + 8u * blockIdx.x);
    uint64_t eb = nphases ? *(volatile uint64_t *)e : 0;
    uint32_t er = ar_ld_volatile32(c.err), ab = ar_ld_volatile32(c.abort_word);
    s_failed = (er | ab) != 0;
    s_deadline = p.timeout_ns ? ar_gtimer() + p.timeout_ns : 0;
    s_base = eb;
    /* only barrier kernels, whose grids stay within TE_AR_MAX_BLOCKS */
    if (nphases) *e = eb + (uint64_t)nphases;
    if (!s_failed) ar_desc_note(p);
  }
  __syncthreads();
  c.deadline = s_deadline;
  base = s_base;
  return !s_failed;
}

// Block blockIdx.x's barrier at phase (comm_ar.h); false: leave.
__device__ __forceinline__ bool ar_barrier(const te_ar_params &p, const ar_block &c,
                                           uint64_t phase) {
  __shared__ int s_quit;
  if (threadIdx.x == 0) s_quit = 0;
  __syncthreads();
  if ((int)threadIdx.x < p.nranks) {
    int s = threadIdx.x;
    // the descriptor hash goes out in the flag's line, before the flag
    // (release); it is compared after the flag is seen (acquire), before
    // the block touches any data (comm_ar.h, Agreement)
    uint64_t *out = ar_ptr<uint64_t>(te_ar_flag_addr(p.ws[s], blockIdx.x, p.rank));
    *ar_ptr<volatile uint64_t>(te_ar_flag_desc((uint64_t)out, phase)) = p.desc.hash;
    ar_st_release(out, phase);
    const uint64_t *f = ar_ptr<const uint64_t>(te_ar_flag_addr(p.ws[p.rank], blockIdx.x, s));
    unsigned it = 0;
    bool seen = true;
    while (ar_ld_acquire(f) < phase)
      if (!ar_poll_again(c, s, it)) {
        s_quit = 1;
        seen = false;
        break;
      }
    if (seen && p.desc.hash &&
        *ar_ptr<const volatile uint64_t>(te_ar_flag_desc((uint64_t)f, phase)) != p.desc.hash) {
      ar_fail(c, TE_AR_MISMATCH, s);
      s_quit = 1;
    }
  }
  __syncthreads();
  return !s_quit;
}

// 16 bytes of dtype DT to floats (EPG = 16 / element size).
template <int DT>
__device__ __forceinline__ void ar_unpack(uint4 u, float *v) {
  uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int k = 0; k < 4; k++) {
    if constexpr (DT == F32) v[k] = __uint_as_float(w[k]);
    else if constexpr (DT == BF16) {
      v[2 * k] = __uint_as_float(w[k] << 16);
      v[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
    } else {
      v[2 * k] = te_dev_h2f(w[k] & 0xffffu);
      v[2 * k + 1] = te_dev_h2f(w[k] >> 16);
    }
  }
}

// Floats to 16 bytes of dtype DT (round to nearest even).
template <int DT>
__device__ __forceinline__ uint4 ar_pack(const float *v) {
  if constexpr (DT == F32)
    return make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]),
                      __float_as_uint(v[3]));
  else if constexpr (DT == BF16)
    return make_uint4(te_dev_bf16x2(v[0], v[1]), te_dev_bf16x2(v[2], v[3]),
                      te_dev_bf16x2(v[4], v[5]), te_dev_bf16x2(v[6], v[7]));
  else
    return make_uint4(te_dev_f16x2(v[0], v[1]), te_dev_f16x2(v[2], v[3]), te_dev_f16x2(v[4], v[5]),
                      te_dev_f16x2(v[6], v[7]));
}

// ---- granules: EPG elements of dtype DT (16 bytes, or one element) ---------

template <int DT, int EPG>
__device__ __forceinline__ void ar_ld(uint64_t base, uint64_t g, float *v) {
  if constexpr (EPG == 1) {
    if constexpr (DT == F32) v[0] = __ldcg(ar_ptr<const float>(base) + g);
    else {
      uint16_t h = __ldcg(ar_ptr<const unsigned short>(base) + g);
      v[0] = DT == BF16 ? te_bf16_to_f32(h) : te_f16_to_f32(h);
    }
  } else {
    uint4 u = __ldcg(ar_ptr<const uint4>(base) + g);
    uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
      if constexpr (DT == F32) v[k] = __uint_as_float(w[k]);
      else if constexpr (DT == BF16) {
        v[2 * k] = __uint_as_float(w[k] << 16);
        v[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
      } else {
        v[2 * k] = te_dev_h2f(w[k] & 0xffffu);
        v[2 * k + 1] = te_dev_h2f(w[k] >> 16);
      }
    }
  }
}

template <int DT, int EPG>
__device__ __forceinline__ void ar_st(uint64_t base, uint64_t g, const float *v) {
  if constexpr (EPG == 1) {
    if constexpr (DT == F32) ar_ptr<float>(base)[g] = v[0];
    else ar_ptr<uint16_t>(base)[g] = DT == BF16 ? te_f32_to_bf16(v[0]) : te_f32_to_f16(v[0]);
  } else {
    ar_ptr<uint4>(base)[g] = ar_pack<DT>(v);
  }
}

// Granule g reduced over the ranks in rank order: all loads issued first
// (kept as the raw 16 bytes, 4 registers a rank, until folded).
template <int DT, int EPG>
__device__ __forceinline__ void ar_reduce(const te_ar_params &p, uint64_t g, float *acc) {
  if constexpr (EPG == 1) {
    float v[TE_AR_MAX_RANKS];
#pragma unroll
    for (int s = 0; s < TE_AR_MAX_RANKS; s++)
      if (s < p.nranks) ar_ld<DT, 1>(p.in[s], g, &v[s]);
    acc[0] = v[0];
#pragma unroll
    for (int s = 1; s < TE_AR_MAX_RANKS; s++)
      if (s < p.nranks) acc[0] = te_ar_op(acc[0], v[s], p.op);
  } else {
    uint4 raw[TE_AR_MAX_RANKS];
#pragma unroll
    for (int s = 0; s < TE_AR_MAX_RANKS; s++)
      if (s < p.nranks) raw[s] = __ldcg(ar_ptr<const uint4>(p.in[s]) + g);
    ar_unpack<DT>(raw[0], acc);
#pragma unroll
    for (int s = 1; s < TE_AR_MAX_RANKS; s++)
      if (s < p.nranks) {
        float b[EPG];
        ar_unpack<DT>(raw[s], b);
#pragma unroll
        for (int k = 0; k < EPG; k++) acc[k] = te_ar_op(acc[k], b[k], p.op);
      }
  }
}

// One element of the tail (past the last full granule), scalar.
template <int DT>
__device__ __forceinline__ float ar_reduce_elem(const te_ar_params &p, uint64_t e) {
  float a;
  ar_ld<DT, 1>(p.in[0], e, &a);
  for (int s = 1; s < p.nranks; s++) {
    float b;
    ar_ld<DT, 1>(p.in[s], e, &b);
    a = te_ar_op(a, b, p.op);
  }
  return a;
}

// 16 bytes (a packed granule) to out + 16 g, where out may be aligned to
// its element size only: the ranks cut a call into granules by their
// inputs' alignment (the same on every rank), not by out's, which each
// rank chooses.  al: out is 16-byte aligned (uniform over the grid).
template <int DT>
__device__ __forceinline__ void ar_st_granule(uint64_t out, uint64_t g, uint4 v, bool al) {
  if (al) {
    ar_ptr<uint4>(out)[g] = v;
  } else if constexpr (DT == F32) {
    uint32_t *d = ar_ptr<uint32_t>(out) + 4 * g;
    d[0] = v.x, d[1] = v.y, d[2] = v.z, d[3] = v.w;
  } else {
    uint16_t *d = ar_ptr<uint16_t>(out) + 8 * g;
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 4; k++) d[2 * k] = (uint16_t)w[k], d[2 * k + 1] = (uint16_t)(w[k] >> 16);
  }
}

// ---- one-shot -------------------------------------------------------------------------
// Block b owns granules [lo, hi) (te_ar_split); per round every thread keeps
// up to TE_AR_UNROLL reduced granules in registers: barrier (inputs ready,
// or the previous round read everywhere), reduce, barrier (read
// everywhere), store.  Stores never precede the peers' reads, so out may
// be in[rank], and no exit barrier is needed: after the last one no peer
// reads this rank's input again.  Block 0 also reduces the tail.
// Reduce-scatter (TE_AR_V_RS, comm_ar.h) runs the same fold over the
// block this rank keeps, which no peer reads (each reads its own block of
// the inputs): it stores as it goes, without the barrier of each round,
// and ends with one barrier so that no peer still reads this rank's input
// when the kernel ends.

template <int DT, int EPG>
__device__ void ar_oneshot(const te_ar_params &p) {
  const uint64_t ngran = p.count / EPG;
  uint64_t lo, hi;
  te_ar_split(ngran, gridDim.x, blockIdx.x, &lo, &hi);
  const uint64_t per_round = (uint64_t)blockDim.x * TE_AR_UNROLL;
  uint64_t rounds = (hi - lo + per_round - 1) / per_round;
  if (rounds == 0) rounds = 1;
  const bool rs = (p.desc.variant & TE_AR_V_RS) != 0; // the same on every thread and rank
  ar_block c;
  uint64_t base;
  if (!ar_begin(p, rs ? 2 : (int)rounds + 1, c, base)) return;
  if (!ar_barrier(p, c, base + 1)) return;
  const uint64_t t0 = ngran * EPG;
  const bool tail = blockIdx.x == 0 && t0 + threadIdx.x < p.count;
  float tv = 0.0f;
  if (tail) tv = ar_reduce_elem<DT>(p, t0 + threadIdx.x);
  for (uint64_t r = 0; r < rounds; r++) {
    // the reduced granules wait for the barrier packed in the dtype
    using keep_t = typename std::conditional<EPG == 1, float, uint4>::type;
    keep_t keep[TE_AR_UNROLL];
    uint64_t g0 = lo + r * per_round + threadIdx.x;
#pragma unroll
    for (int u = 0; u < TE_AR_UNROLL; u++) {
      uint64_t g = g0 + (uint64_t)u * blockDim.x;
      if (g < hi) {
        float a[EPG];
        ar_reduce<DT, EPG>(p, g, a);
        if constexpr (EPG == 1) keep[u] = a[0];
        else keep[u] = ar_pack<DT>(a);
      }
    }
    if (!rs && !ar_barrier(p, c, base + 2 + r)) return;
#pragma unroll
    for (int u = 0; u < TE_AR_UNROLL; u++) {
      uint64_t g = g0 + (uint64_t)u * blockDim.x;
      if (g < hi) {
        if constexpr (EPG == 1) ar_st<DT, 1>(p.out, g, &keep[u]);
        else ar_st_granule<DT>(p.out, g, keep[u], (p.out & 15u) == 0);
      }
    }
    if (r == 0 && tail) ar_st<DT, 1>(p.out, t0 + threadIdx.x, &tv);
  }
  if (rs) ar_barrier(p, c, base + 2);
}

// ---- all-gather ------------------------------------------------------------------------
// p.count is the bytes of one rank's block (comm_ar.h).  Barrier (every
// input in place); block b copies its 16-byte granules of every rank's
// input to that rank's slot of out, as 16-byte moves where both ends are
// aligned and bytes otherwise (each rank's own choice: no barrier depends
// on it); barrier (no peer still reads this rank's input, so the caller
// may overwrite it and the next call may stage into it).  A slot that
// already is the input (in place on symmetric memory) is skipped.
// A thread loads granule g of every peer before it stores any, starting
// at the next rank: every rank's input is read by all peers at once.
// Reading the ranks one after another sent every reader to the same rank
// at the same time, whose links then carried three readers' traffic while
// the others idled (4 H100s: half of NCCL's bus bandwidth from 32 MiB).

// the slot of source s: 16-byte moves, or bytes where an end is unaligned
__device__ __forceinline__ void ar_gather_bytes(uint64_t src, uint64_t dst, uint64_t g,
                                                uint64_t bytes) {
  const uint64_t end = 16u * g + 16u < bytes ? 16u * g + 16u : bytes;
  for (uint64_t i = 16u * g; i < end; i++)
    ar_ptr<unsigned char>(dst)[i] = __ldcg(ar_ptr<const unsigned char>(src) + i);
}

__device__ void ar_gather(const te_ar_params &p) {
  const uint64_t bytes = p.count, ngran = (bytes + 15u) / 16u;
  uint64_t lo, hi;
  te_ar_split(ngran, gridDim.x, blockIdx.x, &lo, &hi);
  ar_block c;
  uint64_t base;
  if (!ar_begin(p, 2, c, base)) return;
  if (!ar_barrier(p, c, base + 1)) return;
  // the sources in reading order (this rank's own last), whether each is
  // read (not already in its slot) and moves 16-byte granules; constant
  // indices after unrolling keep them in registers
  uint64_t src[TE_AR_MAX_RANKS], dst[TE_AR_MAX_RANKS];
  bool use[TE_AR_MAX_RANKS], al[TE_AR_MAX_RANKS];
#pragma unroll
  for (int j = 0; j < TE_AR_MAX_RANKS; j++) {
    const int s = (p.rank + 1 + j) % p.nranks;
    src[j] = p.in[s];
    dst[j] = p.out + (uint64_t)s * bytes;
    use[j] = j < p.nranks && src[j] != dst[j];
    al[j] = ((src[j] | dst[j]) & 15u) == 0;
  }
  for (uint64_t g = lo + threadIdx.x; g < hi; g += blockDim.x) {
    const bool whole = 16u * g + 16u <= bytes;
    uint4 v[TE_AR_MAX_RANKS];
#pragma unroll
    for (int j = 0; j < TE_AR_MAX_RANKS; j++)
      if (use[j] && whole && al[j]) v[j] = __ldcg(ar_ptr<const uint4>(src[j]) + g);
#pragma unroll
    for (int j = 0; j < TE_AR_MAX_RANKS; j++) {
      if (!use[j]) continue;
      if (whole && al[j]) ar_ptr<uint4>(dst[j])[g] = v[j];
      else ar_gather_bytes(src[j], dst[j], g, bytes);
    }
  }
  ar_barrier(p, c, base + 2);
}

// ---- two-shot ---------------------------------------------------------------------------
// Barrier; block b reduces its part of chunk `rank` (only this rank reads
// that chunk of the inputs) and stores the result into chunk `rank` of
// every rank's input, its own included: NVLink carries posted stores
// instead of a second round of remote loads.  Barrier: every chunk of
// in[rank] now holds the sum; copy it into out unless out is in[rank].
// After the second barrier no rank touches a peer's input, and a peer
// writes into this rank's input again only in a later call, after that
// call's first barrier, which this rank reaches only when this kernel has
// ended.  The tail: reduced by block 0 before the second barrier, stored
// after it.

template <int DT, int EPG>
__device__ void ar_twoshot(const te_ar_params &p) {
  const uint64_t ngran = p.count / EPG;
  ar_block c;
  uint64_t base;
  if (!ar_begin(p, 2, c, base)) return;
  if (!ar_barrier(p, c, base + 1)) return;
  uint64_t clo, chi, lo, hi;
  te_ar_chunk(ngran, p.nranks, p.rank, &clo, &chi);
  te_ar_split(chi - clo, gridDim.x, blockIdx.x, &lo, &hi);
  const uint64_t mine = p.in[p.rank];
  for (uint64_t g = clo + lo + threadIdx.x; g < clo + hi; g += (uint64_t)blockDim.x * 2) {
    float a[EPG], b[EPG];
    uint64_t g2 = g + blockDim.x;
    const bool two = g2 < clo + hi;
    ar_reduce<DT, EPG>(p, g, a);
    if (two) ar_reduce<DT, EPG>(p, g2, b);
#pragma unroll
    for (int s = 0; s < TE_AR_MAX_RANKS; s++)
      if (s < p.nranks) {
        ar_st<DT, EPG>(p.in[s], g, a);
        if (two) ar_st<DT, EPG>(p.in[s], g2, b);
      }
  }
  const uint64_t t0 = ngran * EPG;
  const bool tail = blockIdx.x == 0 && t0 + threadIdx.x < p.count;
  float tv = 0.0f;
  if (tail) tv = ar_reduce_elem<DT>(p, t0 + threadIdx.x);
  if (!ar_barrier(p, c, base + 2)) return;
  if (p.out != mine) {
    for (int q = 0; q < p.nranks; q++) {
      te_ar_chunk(ngran, p.nranks, q, &clo, &chi);
      te_ar_split(chi - clo, gridDim.x, blockIdx.x, &lo, &hi);
      if constexpr (EPG == 1) {
        for (uint64_t g = clo + lo + threadIdx.x; g < clo + hi; g += blockDim.x) {
          float v;
          ar_ld<DT, 1>(mine, g, &v);
          ar_st<DT, 1>(p.out, g, &v);
        }
      } else {
        const uint4 *s4 = ar_ptr<const uint4>(mine);
        const bool al = (p.out & 15u) == 0;
        const uint64_t step = (uint64_t)blockDim.x * 4;
        for (uint64_t g = clo + lo + threadIdx.x; g < clo + hi; g += step) {
          uint4 v[4];
#pragma unroll
          for (int u = 0; u < 4; u++)
            if (g + (uint64_t)u * blockDim.x < clo + hi) v[u] = __ldcg(s4 + g + (uint64_t)u * blockDim.x);
#pragma unroll
          for (int u = 0; u < 4; u++)
            if (g + (uint64_t)u * blockDim.x < clo + hi)
              ar_st_granule<DT>(p.out, g + (uint64_t)u * blockDim.x, v[u], al);
        }
      }
    }
  }
  if (tail) ar_st<DT, 1>(p.out, t0 + threadIdx.x, &tv);
}

// ---- the copy-engine one-shot's sum ---------------------------------------------------------
// (kernels/common/comm_ar.h says how the call runs.)  in[] are local here:
// this rank's input and the scratch copies of the peers'; the fold in rank
// order goes to out.  No waits: the copies before it are stream-ordered.
// A rank that already failed does nothing (the error word reports the
// call).  The tail (count past the last granule) is block 0's, element by
// element.
template <int DT, int EPG>
__device__ void ar_ce_reduce(const te_ar_params &p) {
  ar_block c;
  uint64_t base;
  if (!ar_begin(p, 0, c, base)) return;
  const uint64_t n = p.count / EPG;
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t g = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; g < n; g += 2 * stride) {
    float a[EPG], b[EPG];
    const uint64_t g2 = g + stride;
    const bool two = g2 < n;
    ar_reduce<DT, EPG>(p, g, a);
    if (two) ar_reduce<DT, EPG>(p, g2, b);
    ar_st<DT, EPG>(p.out, g, a);
    if (two) ar_st<DT, EPG>(p.out, g2, b);
  }
  if (EPG > 1 && blockIdx.x == 0) {
    const uint64_t e = n * EPG + threadIdx.x;
    if (e < p.count) {
      float v = ar_reduce_elem<DT>(p, e);
      ar_st<DT, 1>(p.out, e, &v);
    }
  }
}

// ---- Lamport ------------------------------------------------------------------------------
// Call k uses buffer k % 3; see ar_vdev.c for why re-arming the previous
// call's buffer is safe.  A thread writes granule g of this rank's input
// into slot `rank` of every rank's buffer, then polls granule g of every
// slot of its own buffer: a block only waits for granules that the same
// block of each peer writes before it waits itself.
//
// Latency, not bandwidth, is what a small call costs: every load a thread
// waits for before it can issue the next one adds a trip to L2 (about half
// a microsecond for these .sys loads).  So the set-up reads its five words
// at once, the input is loaded while they are on their way, and a thread
// issues its polls of every slot (and, in the fused kernel, of every
// granule it owns) before it looks at any of them.

struct ar_lam {
  uint64_t k;
  int bi, bj;
  uint64_t used_j;
  uint64_t used_i; /* bytes this call arms in buffer bi (ar_lam_rearm records them) */
};

__device__ __forceinline__ uint64_t ar_ld_volatile64(const void *p) {
  uint64_t v;
  asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// Block set-up of a Lamport kernel: the deadline, the error and abort
// words, the call counter k and the bytes buffer (k + 2) % 3 holds, read
// by thread 0 in one round of loads.  Returns false in every thread when
// this rank already failed.  The counter advances later, in ar_lam_rearm,
// once this block's granules are out: the atomic that finds the last
// block costs thread 0 a trip to L2, and before the stores it delayed
// thread 0's granule, which every peer waits for.
__device__ __forceinline__ bool ar_lam_start(const te_ar_params &p, uint64_t used_bytes,
                                             ar_block &c, ar_lam &l) {
  __shared__ uint64_t s_k, s_used, s_deadline;
  __shared__ int s_failed;
  uint64_t ws = p.ws[p.rank];
  char *lam = ar_ptr<char>(te_ar_lam_ws(&p) + TE_AR_OFF_LAM);
  c.err = ar_ptr<uint32_t>(ws + TE_AR_OFF_ERR);
  c.abort_word = ar_ptr<uint32_t>(ws + TE_AR_OFF_ABORT);
  if (threadIdx.x == 0) {
    uint32_t e = ar_ld_volatile32(c.err), a = ar_ld_volatile32(c.abort_word);
    uint64_t k = ar_ld_volatile64(lam + TE_AR_LAM_COUNTER);
    uint64_t u0 = ar_ld_volatile64(lam + TE_AR_LAM_USED);
    uint64_t u1 = ar_ld_volatile64(lam + TE_AR_LAM_USED + 8);
    uint64_t u2 = ar_ld_volatile64(lam + TE_AR_LAM_USED + 16);
    s_deadline = p.timeout_ns ? ar_gtimer() + p.timeout_ns : 0;
    s_failed = (e | a) != 0;
    int j = (int)((k + 2) % 3);
    s_k = k;
    s_used = j == 0 ? u0 : j == 1 ? u1 : u2;
    if (!s_failed) ar_desc_note(p);
  }
  __syncthreads();
  c.deadline = s_deadline;
  l.k = s_k;
  l.bi = (int)(l.k % 3);
  l.bj = (int)((l.k + 2) % 3);
  l.used_j = s_used;
  l.used_i = used_bytes;
  return !s_failed;
}

// Granule g (16 bytes) of the nbytes at base, bytes past them zero.
__device__ __forceinline__ uint4 ar_lam_load_at(uint64_t base, uint64_t g, uint64_t nbytes,
                                                bool aligned) {
  uint64_t off = g * 16;
  if (aligned && off + 16 <= nbytes) return *ar_ptr<const uint4>(base + off);
  uint32_t b[4] = {0, 0, 0, 0};
  const unsigned char *src = ar_ptr<const unsigned char>(base + off);
  for (int i = 0; i < 16 && off + (uint64_t)i < nbytes; i++)
    b[i / 4] |= (uint32_t)src[i] << (8 * (i % 4));
  return make_uint4(b[0], b[1], b[2], b[3]);
}
// Granule g of this rank's input.
__device__ __forceinline__ uint4 ar_lam_load(const te_ar_params &p, uint64_t g, uint64_t nbytes,
                                             bool aligned) {
  return ar_lam_load_at(p.in[p.rank], g, nbytes, aligned);
}

// 16 bytes through a multicast address: every member gets them (sm_90).
__device__ __forceinline__ void ar_mc_st16(uint64_t a, uint4 v) {
#if __CUDA_ARCH__ >= 900
  asm volatile("multimem.st.relaxed.sys.global.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(a),
               "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
#else
  (void)a;
  (void)v;
  __trap(); /* the communicator never picks NVLS below sm_90 */
#endif
}
// Orders this thread's accesses through the multicast and the unicast
// addresses of the same memory (two virtual aliases of it).
__device__ __forceinline__ void ar_mc_fence() {
#if __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.alias;" ::: "memory");
#endif
}

// Granule g's words w, sentinels fixed, into slot `rank` of buffer bi of
// every rank (NVLS: one store through the multicast address).  MR bounds
// nranks: the fused kernels instantiate it small, so the unrolled stores
// of ranks a call does not have are not in their instruction stream.
template <int MR = TE_AR_MAX_RANKS>
__device__ __forceinline__ void ar_lam_store(const te_ar_params &p, const ar_lam &l, uint64_t g,
                                             uint4 w) {
  w.x = te_ar_lam_fix(w.x, p.dtype);
  w.y = te_ar_lam_fix(w.y, p.dtype);
  w.z = te_ar_lam_fix(w.z, p.dtype);
  w.w = te_ar_lam_fix(w.w, p.dtype);
  if (p.mc) {
    ar_mc_st16(te_ar_lam_addr(p.mc, p.lam_slot, p.nranks, l.bi, p.rank) + g * 16, w);
    return;
  }
#pragma unroll
  for (int s = 0; s < MR; s++)
    if (s < p.nranks)
      ar_st_volatile16(
          ar_ptr<void>(te_ar_lam_addr(p.ws[s], p.lam_slot, p.nranks, l.bi, p.rank) + g * 16), w);
}

// Reduce-scatter: granule g of every block s of the input (every load
// out before the first store), then block s's into slot `rank` of rank
// s's buffer bi (comm_ar.h, Lamport reduce-scatter and all-gather).
template <int MR = TE_AR_MAX_RANKS>
__device__ __forceinline__ void ar_lam_load_rs(const te_ar_params &p, uint64_t g, uint64_t nbytes,
                                               bool aligned, uint4 *w) {
#pragma unroll
  for (int s = 0; s < MR; s++)
    if (s < p.nranks) w[s] = ar_lam_load_at(p.in[p.rank] + (uint64_t)s * nbytes, g, nbytes, aligned);
}
template <int MR = TE_AR_MAX_RANKS>
__device__ __forceinline__ void ar_lam_send_rs(const te_ar_params &p, const ar_lam &l, uint64_t g,
                                               uint4 *w) {
#pragma unroll
  for (int s = 0; s < MR; s++)
    if (s < p.nranks) {
      w[s].x = te_ar_lam_fix(w[s].x, p.dtype);
      w[s].y = te_ar_lam_fix(w[s].y, p.dtype);
      w[s].z = te_ar_lam_fix(w[s].z, p.dtype);
      w[s].w = te_ar_lam_fix(w[s].w, p.dtype);
      ar_st_volatile16(
          ar_ptr<void>(te_ar_lam_addr(p.ws[s], p.lam_slot, p.nranks, l.bi, p.rank) + g * 16), w[s]);
    }
}

// All-gather's granules: two {data, flag} 64-bit words (below).
__device__ __forceinline__ void ar_st_volatile2x64(uint64_t a, uint64_t x, uint64_t y) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(a), "l"(x), "l"(y) : "memory");
}
__device__ __forceinline__ ulonglong2 ar_ld_volatile2x64(uint64_t a) {
  ulonglong2 v;
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(v.x), "=l"(v.y) : "l"(a) : "memory");
  return v;
}
__device__ __forceinline__ bool ar_ag_ready(ulonglong2 v, uint64_t flag) {
  return (v.x >> 32) == (flag >> 32) && (v.y >> 32) == (flag >> 32);
}
__device__ __forceinline__ bool ar_lam_ready(uint4 v, int dt) {
  return te_ar_lam_ready(v.x, dt) && te_ar_lam_ready(v.y, dt) && te_ar_lam_ready(v.z, dt) &&
         te_ar_lam_ready(v.w, dt);
}

// Waits for granules g[0 .. J-1] (those with gv[j]) of every slot of this
// rank's buffer bi; raw[j][s] their words.  Every load is issued before
// any is looked at; later rounds reload only what is still armed.  False:
// give up (timeout, abort, an earlier failure).
template <int J, int MR = TE_AR_MAX_RANKS>
__device__ __forceinline__ bool ar_lam_wait(const te_ar_params &p, const ar_lam &l,
                                            const ar_block &c, const uint64_t *g, const bool *gv,
                                            uint4 (*raw)[MR]) {
  const uint64_t b0 = te_ar_lam_addr(te_ar_lam_ws(&p), p.lam_slot, p.nranks, l.bi, 0);
#pragma unroll
  for (int j = 0; j < J; j++)
#pragma unroll
    for (int s = 0; s < MR; s++)
      if (gv[j] && s < p.nranks)
        raw[j][s] = ar_ld_volatile16(ar_ptr<const void>(b0 + (uint64_t)s * p.lam_slot + g[j] * 16));
  unsigned it = 0;
  for (;;) {
    int waiting = -1;
#pragma unroll
    for (int j = 0; j < J; j++)
#pragma unroll
      for (int s = 0; s < MR; s++)
        if (gv[j] && s < p.nranks && waiting < 0 && !ar_lam_ready(raw[j][s], p.dtype)) waiting = s;
    if (waiting < 0) return true;
    if (!ar_poll_again(c, waiting, it)) return false;
#pragma unroll
    for (int j = 0; j < J; j++)
#pragma unroll
      for (int s = 0; s < MR; s++)
        if (gv[j] && s < p.nranks && !ar_lam_ready(raw[j][s], p.dtype))
          raw[j][s] = ar_ld_volatile16(ar_ptr<const void>(b0 + (uint64_t)s * p.lam_slot + g[j] * 16));
  }
}

// raw[0 .. nranks-1] folded in rank order into EPG floats (MR >= nranks).
template <int DT, int MR = TE_AR_MAX_RANKS>
__device__ __forceinline__ void ar_fold(const te_ar_params &p, const uint4 *raw, float *acc) {
  constexpr int EPG = DT == F32 ? 4 : 8;
  ar_unpack<DT>(raw[0], acc);
#pragma unroll
  for (int s = 1; s < MR; s++)
    if (s < p.nranks) {
      float b[EPG];
      ar_unpack<DT>(raw[s], b);
#pragma unroll
      for (int k = 0; k < EPG; k++) acc[k] = te_ar_op(acc[k], b[k], p.op);
    }
}

// After this block's granules are out: this block's part of buffer bj,
// the one the previous call used, is re-armed, and the last block to have
// read the call counter (ar_lam_start) records used_i for buffer bi and
// advances the counter, so a replayed graph walks the buffers; the next
// call reads them only after this kernel has ended.  The kernels do
// both before they wait for the peers' bytes (te_ar_vdev_lamport in
// libtecomm/base/ar_vdev.c says why re-arming then is safe), so neither is on
// the call's critical path; a block that then gives up has re-armed a
// buffer no one writes before call k + 2, which a failed rank never
// reaches (its error word stays set).
__device__ __forceinline__ void ar_lam_rearm(const te_ar_params &p, const ar_lam &l) {
  char *lam = ar_ptr<char>(te_ar_lam_ws(&p) + TE_AR_OFF_LAM);
  unsigned *arrived = (unsigned *)(lam + TE_AR_LAM_DONE);
  // thread 0's atomic goes out first and its reply is looked at after the
  // re-arm's stores: a round trip (0.4 us on an H200) no longer delays
  // thread 0's wait, which the whole block waits for in the fused kernels
  unsigned before = 0;
  if (threadIdx.x == 0 && gridDim.x > 1) before = atomicAdd(arrived, 1u);
  uint64_t lo, hi;
  te_ar_split(l.used_j / 16, gridDim.x, blockIdx.x, &lo, &hi);
  const uint4 arm = make_uint4(TE_AR_LAM_ARM, TE_AR_LAM_ARM, TE_AR_LAM_ARM, TE_AR_LAM_ARM);
  for (int s = 0; s < p.nranks; s++) {
    uint4 *d = ar_ptr<uint4>(te_ar_lam_addr(te_ar_lam_ws(&p), p.lam_slot, p.nranks, l.bj, s));
    for (uint64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) d[i] = arm;
  }
  // the descriptor granules of buffer bj (comm_ar.h, Agreement)
  if (blockIdx.x == 0 && (int)threadIdx.x < p.nranks)
    *ar_ptr<uint4>(te_ar_lam_addr(te_ar_lam_ws(&p), p.lam_slot, p.nranks, l.bj, threadIdx.x) +
                   te_ar_lam_desc_off(p.lam_slot)) = arm;
  if (threadIdx.x == 0 && (gridDim.x == 1 || before == gridDim.x - 1)) {
    if (gridDim.x > 1) *(volatile unsigned *)arrived = 0;
    ((volatile uint64_t *)(lam + TE_AR_LAM_USED))[l.bi] = l.used_i;
    *(volatile uint64_t *)(lam + TE_AR_LAM_COUNTER) = l.k + 1;
  }
}

// Lamport's agreement (comm_ar.h): block 0's thread 0 sends this call's
// descriptor granule with its data; a thread that has granules to store
// first waits for every slot's descriptor granule (local memory, polled
// like data, arriving with it) and compares.  False: leave (a mismatch
// is in the error word).
__device__ __forceinline__ uint4 ar_desc_granule(const te_ar_params &p, const ar_lam &l) {
  uint32_t w[4];
  te_ar_desc_words(&p, l.k, w);
  return make_uint4(w[0], w[1], w[2], w[3]);
}
template <int MR = TE_AR_MAX_RANKS>
__device__ __forceinline__ void ar_lam_desc_send(const te_ar_params &p, const ar_lam &l) {
  if (p.desc.hash && blockIdx.x == 0 && threadIdx.x == 0)
    ar_lam_store<MR>(p, l, te_ar_lam_desc_off(p.lam_slot) / 16, ar_desc_granule(p, l));
}
template <int MR = TE_AR_MAX_RANKS>
__device__ __forceinline__ bool ar_lam_desc_ok(const te_ar_params &p, const ar_lam &l,
                                               const ar_block &c) {
  if (!p.desc.hash) return true;
  uint4 raw[1][MR];
  const uint64_t gg[1] = {te_ar_lam_desc_off(p.lam_slot) / 16};
  const bool gv[1] = {true};
  if (!ar_lam_wait<1, MR>(p, l, c, gg, gv, raw)) return false;
  const uint4 mine = ar_desc_granule(p, l);
#pragma unroll
  for (int s = 0; s < MR; s++)
    if (s < p.nranks && (raw[0][s].x != mine.x || raw[0][s].y != mine.y ||
                         raw[0][s].z != mine.z || raw[0][s].w != mine.w)) {
      ar_fail(c, TE_AR_MISMATCH, s);
      return false;
    }
  return true;
}

// The plain kernels' first wait: every slot's descriptor granule and
// granule g of every slot polled in the same rounds.  A wait for the
// descriptors, then one for the data, cost a small call a round trip to
// L2 of its own after the last descriptor had come; here the data is
// usually seen in the round that sees the descriptors.  The agreement
// stands (comm_ar.h): the data counts only once every descriptor has come
// and equals this call's, so a peer that sends other granules (another
// count) is named a mismatch, never waited for.  G: uint4 (the sums,
// sentinels of p.dtype) or ulonglong2 (all-gather, flag).
__device__ __forceinline__ void ar_lam_poll(uint64_t a, uint4 &v) {
  v = ar_ld_volatile16(ar_ptr<const void>(a));
}
__device__ __forceinline__ void ar_lam_poll(uint64_t a, ulonglong2 &v) { v = ar_ld_volatile2x64(a); }
__device__ __forceinline__ bool ar_lam_here(uint4 v, int dt, uint64_t) { return ar_lam_ready(v, dt); }
__device__ __forceinline__ bool ar_lam_here(ulonglong2 v, int, uint64_t flag) {
  return ar_ag_ready(v, flag);
}
// The first slot whose descriptor granule d[s] has not come, -1 when all
// have and equal mine, -2 when one differs (then in the error word).
template <int MR>
__device__ __forceinline__ int ar_lam_desc_seen(const te_ar_params &p, const ar_block &c,
                                                const uint4 *d, uint4 mine) {
#pragma unroll
  for (int s = 0; s < MR; s++)
    if (s < p.nranks && !ar_lam_ready(d[s], p.dtype)) return s;
#pragma unroll
  for (int s = 0; s < MR; s++)
    if (s < p.nranks && (d[s].x != mine.x || d[s].y != mine.y || d[s].z != mine.z ||
                         d[s].w != mine.w)) {
      ar_fail(c, TE_AR_MISMATCH, s);
      return -2;
    }
  return -1;
}
template <int MR, typename G>
__device__ __forceinline__ bool ar_lam_wait_agreed(const te_ar_params &p, const ar_lam &l,
                                                   const ar_block &c, uint64_t g, uint64_t flag,
                                                   G *raw) {
  const uint64_t b0 = te_ar_lam_addr(te_ar_lam_ws(&p), p.lam_slot, p.nranks, l.bi, 0);
  const uint64_t doff = te_ar_lam_desc_off(p.lam_slot);
  const bool agree = p.desc.hash != 0;
  const uint4 mine = ar_desc_granule(p, l);
  uint4 d[MR];
#pragma unroll
  for (int s = 0; s < MR; s++)
    if (s < p.nranks) {
      if (agree) d[s] = ar_ld_volatile16(ar_ptr<const void>(b0 + (uint64_t)s * p.lam_slot + doff));
      ar_lam_poll(b0 + (uint64_t)s * p.lam_slot + g * 16, raw[s]);
    }
  unsigned it = 0;
  for (;;) {
    int waiting = agree ? ar_lam_desc_seen<MR>(p, c, d, mine) : -1;
    if (waiting == -2) return false;
#pragma unroll
    for (int s = 0; s < MR; s++)
      if (waiting == -1 && s < p.nranks && !ar_lam_here(raw[s], p.dtype, flag)) waiting = s;
    if (waiting < 0) return true;
    if (!ar_poll_again(c, waiting, it)) return false;
#pragma unroll
    for (int s = 0; s < MR; s++)
      if (s < p.nranks) {
        if (agree && !ar_lam_ready(d[s], p.dtype))
          d[s] = ar_ld_volatile16(ar_ptr<const void>(b0 + (uint64_t)s * p.lam_slot + doff));
        if (!ar_lam_here(raw[s], p.dtype, flag))
          ar_lam_poll(b0 + (uint64_t)s * p.lam_slot + g * 16, raw[s]);
      }
  }
}

// MR bounds nranks: te_comm_ar_lamport2 and _4 instantiate it small.  A
// small call is a chain of dependent steps, so the instructions it runs
// matter: with MR 8 and predicates the 2-rank call ran eight unrolled
// copies of each per-rank step (the ladder, t/gpu/lamport_ladder.cu, timed
// the whole kernel 0.65 us above the same protocol written for 2 ranks).
template <int DT, int MR = TE_AR_MAX_RANKS>
__device__ void ar_lamport(const te_ar_params &p) {
  constexpr int EPG = DT == F32 ? 4 : 8;
  const uint64_t nbytes = p.count * (DT == F32 ? 4u : 2u), ngr = (nbytes + 15) / 16;
  const bool aligned = p.vec > 1, rs = (p.desc.variant & TE_AR_V_RS) != 0;
  uint64_t lo, hi;
  te_ar_split(ngr, gridDim.x, blockIdx.x, &lo, &hi);
  const uint64_t g0 = lo + threadIdx.x;
  // granule g0 of the input (reduce-scatter: of every block) is on its
  // way during the set-up: loaded after it, it was a trip to memory on
  // the call's critical path
  uint4 w[MR];
  if (g0 < hi && rs) ar_lam_load_rs<MR>(p, g0, nbytes, aligned, w);
  else if (g0 < hi) w[0] = ar_lam_load(p, g0, nbytes, aligned);
  ar_block c;
  ar_lam l;
  if (!ar_lam_start(p, ngr * 16, c, l)) return;
  for (uint64_t g = g0; g < hi; g += blockDim.x) {
    if (rs) {
      if (g != g0) ar_lam_load_rs<MR>(p, g, nbytes, aligned, w);
      ar_lam_send_rs<MR>(p, l, g, w);
    } else {
      ar_lam_store<MR>(p, l, g, g == g0 ? w[0] : ar_lam_load(p, g, nbytes, aligned));
    }
  }
  ar_lam_desc_send<MR>(p, l);
  ar_lam_rearm(p, l); /* off the critical path: while the peers' bytes travel */
  for (uint64_t g = g0; g < hi; g += blockDim.x) {
    uint4 raw[1][MR];
    const uint64_t gg[1] = {g};
    const bool gv[1] = {true};
    if (g == g0 ? !ar_lam_wait_agreed<MR>(p, l, c, g, 0, raw[0])
                : !ar_lam_wait<1, MR>(p, l, c, gg, gv, raw))
      break;
    float acc[EPG];
    ar_fold<DT, MR>(p, raw[0], acc);
    if (aligned && (g + 1) * EPG <= p.count) {
      ar_st<DT, EPG>(p.out, g, acc);
    } else {
      for (int k = 0; k < EPG && g * EPG + k < p.count; k++) ar_st<DT, 1>(p.out, g * EPG + k, &acc[k]);
    }
  }
}

// ---- Lamport all-gather ----------------------------------------------------------
// comm_ar.h: a slot granule is {4 data bytes, flag, 4 data bytes, flag},
// stored and polled as two 64-bit words (each lands whole), so any byte
// pattern moves exactly.  p.count is the bytes of a block; p.vec > 1:
// input, out and the blocks allow 8-byte moves.

// Bytes 8g .. 8g+7 of the nbytes at base (past them zero), and back.
__device__ __forceinline__ ulonglong2 ar_ag_load8(uint64_t base, uint64_t g, uint64_t nbytes,
                                                  bool aligned, uint64_t flag) {
  uint32_t b[2] = {0, 0};
  if (aligned) {
    uint2 v = *ar_ptr<const uint2>(base + g * 8);
    b[0] = v.x;
    b[1] = v.y;
  } else {
    const unsigned char *src = ar_ptr<const unsigned char>(base + g * 8);
    for (int i = 0; i < 8 && g * 8 + (uint64_t)i < nbytes; i++)
      b[i / 4] |= (uint32_t)src[i] << (8 * (i % 4));
  }
  return make_ulonglong2(b[0] | flag, b[1] | flag);
}
__device__ __forceinline__ void ar_ag_store8(uint64_t base, uint64_t g, uint64_t nbytes,
                                             bool aligned, ulonglong2 v) {
  if (aligned) {
    *ar_ptr<uint2>(base + g * 8) = make_uint2((uint32_t)v.x, (uint32_t)v.y);
    return;
  }
  unsigned char *dst = ar_ptr<unsigned char>(base + g * 8);
  for (int i = 0; i < 8 && g * 8 + (uint64_t)i < nbytes; i++)
    dst[i] = (unsigned char)((i < 4 ? v.x : v.y) >> (8 * (i % 4)));
}

// Waits for granule g of every slot of buffer bi (all loads out first).
template <int MR>
__device__ __forceinline__ bool ar_ag_wait(const te_ar_params &p, const ar_lam &l,
                                           const ar_block &c, uint64_t g, uint64_t flag,
                                           ulonglong2 *v) {
  const uint64_t b0 = te_ar_lam_addr(te_ar_lam_ws(&p), p.lam_slot, p.nranks, l.bi, 0) + g * 16;
#pragma unroll
  for (int s = 0; s < MR; s++)
    if (s < p.nranks) v[s] = ar_ld_volatile2x64(b0 + (uint64_t)s * p.lam_slot);
  unsigned it = 0;
  for (;;) {
    int waiting = -1;
#pragma unroll
    for (int s = 0; s < MR; s++)
      if (s < p.nranks && waiting < 0 && !ar_ag_ready(v[s], flag)) waiting = s;
    if (waiting < 0) return true;
    if (!ar_poll_again(c, waiting, it)) return false;
#pragma unroll
    for (int s = 0; s < MR; s++)
      if (s < p.nranks && !ar_ag_ready(v[s], flag))
        v[s] = ar_ld_volatile2x64(b0 + (uint64_t)s * p.lam_slot);
  }
}

template <int MR = TE_AR_MAX_RANKS>
__device__ void ar_lam_gather(const te_ar_params &p) {
  const uint64_t bytes = p.count, ngr = (bytes + 7) / 8;
  const bool aligned = p.vec > 1;
  uint64_t lo, hi;
  te_ar_split(ngr, gridDim.x, blockIdx.x, &lo, &hi);
  const uint64_t g0 = lo + threadIdx.x;
  // granule g0 is on its way during the set-up (its flag, the call
  // counter's, is known only after it)
  ulonglong2 v0 = make_ulonglong2(0, 0);
  if (g0 < hi) v0 = ar_ag_load8(p.in[p.rank], g0, bytes, aligned, 0);
  ar_block c;
  ar_lam l;
  if (!ar_lam_start(p, te_ar_lam_ag_slot(bytes), c, l)) return;
  const uint64_t flag = (uint64_t)te_ar_lam_ag_flag(l.k) << 32;
  for (uint64_t g = g0; g < hi; g += blockDim.x) {
    const ulonglong2 v = g == g0 ? make_ulonglong2(v0.x | flag, v0.y | flag)
                                 : ar_ag_load8(p.in[p.rank], g, bytes, aligned, flag);
#pragma unroll
    for (int s = 0; s < MR; s++)
      if (s < p.nranks)
        ar_st_volatile2x64(te_ar_lam_addr(p.ws[s], p.lam_slot, p.nranks, l.bi, p.rank) + g * 16,
                           v.x, v.y);
  }
  ar_lam_desc_send<MR>(p, l);
  ar_lam_rearm(p, l); /* while the peers' bytes travel */
  for (uint64_t g = g0; g < hi; g += blockDim.x) {
    ulonglong2 v[MR];
    if (g == g0 ? !ar_lam_wait_agreed<MR>(p, l, c, g, flag, v)
                : !ar_ag_wait<MR>(p, l, c, g, flag, v))
      break;
#pragma unroll
    for (int s = 0; s < MR; s++)
      if (s < p.nranks && (s != p.rank || p.out + (uint64_t)s * bytes != p.in[p.rank]))
        ar_ag_store8(p.out + (uint64_t)s * bytes, g, bytes, aligned, v[s]);
  }
}

// ---- NVLS simple -----------------------------------------------------------------------
// comm_ar.h's NVLS simple protocol.  Granules are 16 bytes; the input's
// last one is padded with zeros in the member (the padding is reduced and
// never written out).  Block b handles part b (te_ar_split) of every
// rank's chunk (te_ar_chunk) in each phase, so the barrier of block b
// covers exactly what block b of every rank wrote.  16-bit types reduce
// with an f32 accumulator (.acc::f32): one rounding to the dtype, as the
// IPC kernels.

template <int DT>
__device__ __forceinline__ uint4 ar_mc_ld_reduce16(uint64_t a) {
  uint4 v = make_uint4(0, 0, 0, 0);
#if __CUDA_ARCH__ >= 900
  if constexpr (DT == F32)
    asm volatile("multimem.ld_reduce.relaxed.sys.global.add.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(a)
                 : "memory");
  else if constexpr (DT == BF16)
    asm volatile("multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v4.bf16x2 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(a)
                 : "memory");
  else
    asm volatile("multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v4.f16x2 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(a)
                 : "memory");
#else
  (void)a;
  __trap();
#endif
  return v;
}

template <int DT>
__device__ void ar_nvls(const te_ar_params &p) {
  constexpr int EPG = DT == F32 ? 4 : 8;
  const uint64_t nbytes = p.count * (DT == F32 ? 4u : 2u), ngr = (nbytes + 15) / 16;
  const uint64_t uc = te_ar_lam_ws(&p) + p.nv_data, mc = p.mc + p.nv_data;
  const bool aligned = p.vec > 1;
  ar_block c;
  uint64_t base;
  if (!ar_begin(p, 2, c, base)) return;
  for (int q = 0; q < p.nranks; q++) {
    uint64_t clo, chi, lo, hi;
    te_ar_chunk(ngr, p.nranks, q, &clo, &chi);
    te_ar_split(chi - clo, gridDim.x, blockIdx.x, &lo, &hi);
    for (uint64_t g = clo + lo + threadIdx.x; g < clo + hi; g += blockDim.x)
      ar_ptr<uint4>(uc)[g] = ar_lam_load(p, g, nbytes, aligned);
  }
  ar_mc_fence();
  if (!ar_barrier(p, c, base + 1)) return;
  {
    uint64_t clo, chi, lo, hi;
    te_ar_chunk(ngr, p.nranks, p.rank, &clo, &chi);
    te_ar_split(chi - clo, gridDim.x, blockIdx.x, &lo, &hi);
    for (uint64_t g = clo + lo + threadIdx.x; g < clo + hi; g += blockDim.x)
      ar_mc_st16(mc + g * 16, ar_mc_ld_reduce16<DT>(mc + g * 16));
  }
  ar_mc_fence();
  if (!ar_barrier(p, c, base + 2)) return;
  if (!p.out) return; /* fused: the epilogue kernel reads the member */
  for (int q = 0; q < p.nranks; q++) {
    uint64_t clo, chi, lo, hi;
    te_ar_chunk(ngr, p.nranks, q, &clo, &chi);
    te_ar_split(chi - clo, gridDim.x, blockIdx.x, &lo, &hi);
    for (uint64_t g = clo + lo + threadIdx.x; g < clo + hi; g += blockDim.x) {
      uint4 w = __ldcg(ar_ptr<const uint4>(uc) + g);
      if (aligned && (g + 1) * EPG <= p.count) {
        ar_ptr<uint4>(p.out)[g] = w;
      } else {
        float v[EPG];
        ar_unpack<DT>(w, v);
        for (int k = 0; k < EPG && g * EPG + k < p.count; k++) ar_st<DT, 1>(p.out, g * EPG + k, &v[k]);
      }
    }
  }
}

// ---- the fused epilogue ---------------------------------------------------------------
// Row layout of tecore_rmsnorm_fwd (norm.h): tpr threads a row, rpb rows a
// block, thread t owns norm vectors t, t + tpr, ... of nvec elements.
// Pass 1 makes residual_out = round(ar + residual_in) and adds its squares
// in the thread's order; the row sum follows norm.h's tree; pass 2 rereads
// residual_out (this thread's own stores) and writes out and/or the FP8
// copy.  The allreduced values come from SRC: one-shot (reduce the peers'
// inputs), Lamport (the polled buffer), in[rank] (two-shot's result), or
// the row's owner's input after the kernel's own reduce-scatter by rows
// (SRC_RS, the fused two-shot: comm_ar.h).

enum { SRC_ONESHOT, SRC_LAMPORT, SRC_LOCAL, SRC_RS };

// Sums a value over the tpr threads of each row: norm.cu's row_reduce (the
// order norm.h defines), one value.  All threads of the block call it.
__device__ __forceinline__ float ar_row_sum(float v, int T, float (*red)[32], int buf) {
#pragma unroll
  for (int off = 16; off >= 1; off >>= 1) v = te_add_rn(v, __shfl_xor_sync(FULL_MASK, v, off));
  if (T > 32) {
    const int W = T >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int first = warp - warp % W;
    if (lane == 0) red[buf][warp] = v;
    __syncthreads();
    v = lane < W ? red[buf][first + lane] : 0.0f;
#pragma unroll
    for (int off = 16; off >= 1; off >>= 1) v = te_add_rn(v, __shfl_xor_sync(FULL_MASK, v, off));
  }
  return v;
}

// NV elements (8 or 1) at element e of p, runtime dtype.
template <int NV>
__device__ __forceinline__ void ar_ldn(uint64_t p, uint64_t e, int dt, float *v) {
  if constexpr (NV == 8) te_dev_ld8(ar_ptr<const void>(p), e, dt, v);
  else v[0] = te_ld(ar_ptr<const void>(p), e, dt);
}
template <int NV>
__device__ __forceinline__ void ar_stn(uint64_t p, uint64_t e, int dt, const float *v) {
  if constexpr (NV == 8) te_dev_st8(ar_ptr<void>(p), e, dt, v);
  else te_st(ar_ptr<void>(p), e, dt, v[0]);
}
// NV elements of every rank's input, reduced in rank order (16-byte loads
// when every input allows them: p.vec == 8).
template <int DT>
__device__ __forceinline__ void ar_reduce_8(const te_ar_params &p, uint64_t e, float *acc) {
  if (p.vec == 8) {
    if constexpr (DT == F32) {
      ar_reduce<F32, 4>(p, e / 4, acc);
      ar_reduce<F32, 4>(p, e / 4 + 1, acc + 4);
    } else {
      ar_reduce<DT, 8>(p, e / 8, acc);
    }
  } else {
#pragma unroll
    for (int k = 0; k < 8; k++) ar_reduce<DT, 1>(p, e + k, acc + k);
  }
}
template <int NV>
__device__ __forceinline__ void ar_reduce_n(const te_ar_params &p, uint64_t e, float *acc) {
  if constexpr (NV == 8) {
    if (p.dtype == F32) ar_reduce_8<F32>(p, e, acc);
    else if (p.dtype == BF16) ar_reduce_8<BF16>(p, e, acc);
    else ar_reduce_8<F16>(p, e, acc);
  } else {
    if (p.dtype == F32) ar_reduce<F32, 1>(p, e, acc);
    else if (p.dtype == BF16) ar_reduce<BF16, 1>(p, e, acc);
    else ar_reduce<F16, 1>(p, e, acc);
  }
}

// Lamport, NV == 8: the granules of elements e .. e+7 (one, or two for f32).
template <int DT>
__device__ __forceinline__ bool ar_lam_row_get_t(const te_ar_params &p, const ar_lam &l,
                                                 const ar_block &c, uint64_t e, float *acc) {
  constexpr int NG = DT == F32 ? 2 : 1, EPG = DT == F32 ? 4 : 8;
#pragma unroll
  for (int h = 0; h < NG; h++) {
    uint4 raw[1][TE_AR_MAX_RANKS];
    const uint64_t g[1] = {e * (DT == F32 ? 4u : 2u) / 16 + (uint64_t)h};
    const bool gv[1] = {true};
    if (!ar_lam_wait<1>(p, l, c, g, gv, raw)) return false;
    ar_fold<DT>(p, raw[0], acc + h * EPG);
  }
  return true;
}
__device__ __forceinline__ bool ar_lam_row_get(const te_ar_params &p, const ar_lam &l,
                                               const ar_block &c, uint64_t e, float *acc) {
  if (p.dtype == F32) return ar_lam_row_get_t<F32>(p, l, c, e, acc);
  if (p.dtype == BF16) return ar_lam_row_get_t<BF16>(p, l, c, e, acc);
  return ar_lam_row_get_t<F16>(p, l, c, e, acc);
}

// The FP8 copy's scale (1 without one); block 0's thread 0 writes its
// inverse, as the unfused quantize does.
__device__ __forceinline__ float ar_fp8_scale(const te_ar_params &p) {
  const float sc = (p.fflags & TE_AR_F_Q) ? *ar_ptr<const float>(p.q_scale) : 1.0f;
  if ((p.fflags & TE_AR_F_Q) && p.q_scale_inv && blockIdx.x == 0 && threadIdx.x == 0)
    *ar_ptr<float>(p.q_scale_inv) = te_fp8_scale_inv(sc);
  return sc;
}

// SRC_RS, phase 1 (comm_ar.h): block b reduces, in rank order, the rows of
// chunk `rank` that lie in its row groups (b, b + G, ...) and stores them
// over in[rank], EPG elements a granule (rows are whole granules: the host
// takes EPG > 1 only when hidden % 8 == 0 and every input is 16-byte
// aligned).  U granules a thread a round (2, or 1 for more than 4 ranks:
// registers), the loads of all of them from every rank issued before any
// is folded; the fold is ar_reduce's (rank order from rank 0's value).
template <int DT, int EPG, int MR>
__device__ void ar_rs_reduce(const te_ar_params &p) {
  constexpr int U = EPG == 1 || MR > 4 ? 1 : 2;
  uint64_t clo, chi;
  te_ar_row_chunk(p.rows, p.nranks, p.rank, &clo, &chi);
  if (clo >= chi) return;
  const uint64_t R = (uint64_t)p.rpb, G = gridDim.x, gpr = p.hidden / EPG;
  const uint64_t g0 = clo / R, g1 = (chi - 1) / R, mine = p.in[p.rank];
  for (uint64_t rg = g0 + ((uint64_t)blockIdx.x + G - g0 % G) % G; rg <= g1; rg += G) {
    const uint64_t r0 = rg * R > clo ? rg * R : clo, r1 = rg * R + R < chi ? rg * R + R : chi;
    const uint64_t hi = r1 * gpr;
    for (uint64_t g = r0 * gpr + threadIdx.x; g < hi; g += (uint64_t)blockDim.x * U) {
      if constexpr (EPG == 1) {
        float a;
        ar_reduce<DT, 1>(p, g, &a);
        ar_st<DT, 1>(mine, g, &a);
      } else {
        uint4 raw[U][MR];
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
          for (int q = 0; q < MR; q++)
            if (g + (uint64_t)u * blockDim.x < hi && q < p.nranks)
              raw[u][q] = __ldcg(ar_ptr<const uint4>(p.in[q]) + g + (uint64_t)u * blockDim.x);
#pragma unroll
        for (int u = 0; u < U; u++)
          if (g + (uint64_t)u * blockDim.x < hi) {
            float a[EPG];
            ar_fold<DT, MR>(p, raw[u], a);
            ar_st<DT, EPG>(mine, g + (uint64_t)u * blockDim.x, a);
          }
      }
    }
  }
}

// Phase 1 with registers for nranks' granules only (MR >= nranks).
template <int DT, int EPG>
__device__ __forceinline__ void ar_rs_reduce_n(const te_ar_params &p) {
  if constexpr (EPG == 1) ar_rs_reduce<DT, 1, 1>(p);
  else if (p.nranks <= 2) ar_rs_reduce<DT, EPG, 2>(p);
  else if (p.nranks <= 4) ar_rs_reduce<DT, EPG, 4>(p);
  else ar_rs_reduce<DT, EPG, TE_AR_MAX_RANKS>(p);
}

// SRC_RS set-up: three barrier phases (inputs ready, chunks reduced, peers
// done reading: the kernel's last barrier), the first barrier and phase
// 1; the caller then waits at base + 2.  DT < 0: the dtype and granule
// from p.
template <int DT>
__device__ __forceinline__ bool ar_rs_begin(const te_ar_params &p, ar_block &c, uint64_t &base) {
  if (!ar_begin(p, 3, c, base)) return false;
  if (!ar_barrier(p, c, base + 1)) return false;
  if constexpr (DT >= 0) {
    ar_rs_reduce_n<DT, 8>(p);
  } else if (p.dtype == F32) {
    if (p.vec == 8) ar_rs_reduce_n<F32, 4>(p);
    else ar_rs_reduce_n<F32, 1>(p);
  } else if (p.dtype == BF16) {
    if (p.vec == 8) ar_rs_reduce_n<BF16, 8>(p);
    else ar_rs_reduce_n<BF16, 1>(p);
  } else {
    if (p.vec == 8) ar_rs_reduce_n<F16, 8>(p);
    else ar_rs_reduce_n<F16, 1>(p);
  }
  return true;
}

// Where row `row`'s allreduced values are read in the epilogue.
template <int SRC>
__device__ __forceinline__ uint64_t ar_epi_src(const te_ar_params &p, uint64_t row) {
  if constexpr (SRC == SRC_RS)
    return p.in[row < p.rows ? te_ar_row_owner(p.rows, p.nranks, row) : p.rank];
  else
    return p.in[p.rank];
}

template <int SRC, int NV>
__device__ void ar_fused(const te_ar_params &p) {
  __shared__ float red[2][32];
  ar_block c;
  uint64_t base = 0;
  ar_lam l;
  if (SRC == SRC_LAMPORT) {
    if (!ar_lam_start(p, (p.count * (uint64_t)te_ar_esize(p.dtype) + 15) / 16 * 16, c, l)) return;
  } else if (SRC == SRC_RS) {
    if (!ar_rs_begin<-1>(p, c, base) || !ar_barrier(p, c, base + 2)) return;
  } else {
    if (!ar_begin(p, SRC == SRC_ONESHOT ? 2 : 0, c, base)) return;
    if (SRC == SRC_ONESHOT && !ar_barrier(p, c, base + 1)) return;
  }
  const int dt = p.dtype, T = p.tpr;
  const unsigned H = p.hidden;
  const unsigned nvecs = NV == 8 ? H / 8 : H;
  const uint64_t groups = (p.rows + (uint64_t)p.rpb - 1) / (uint64_t)p.rpb;
  const int t = threadIdx.x % T;
  const float sc = ar_fp8_scale(p);
  float am = 0.0f;
  bool ok = true;
  int buf = 0;
  // Lamport: every granule of the block's rows goes out before any wait
  if (SRC == SRC_LAMPORT) {
    for (uint64_t rg = blockIdx.x; rg < groups; rg += gridDim.x) {
      const uint64_t row = rg * (uint64_t)p.rpb + threadIdx.x / T;
      if (row >= p.rows) continue;
      for (int j = 0; j < p.nv; j++) {
        unsigned vi = (unsigned)j * (unsigned)T + (unsigned)t;
        if (vi >= nvecs) continue;
        uint64_t e = row * H + (uint64_t)vi * 8;
        uint64_t g = e * (uint64_t)te_ar_esize(dt) / 16, nb = p.count * (uint64_t)te_ar_esize(dt);
        uint4 w0 = ar_lam_load(p, g, nb, true), w1 = make_uint4(0, 0, 0, 0);
        if (dt == F32) w1 = ar_lam_load(p, g + 1, nb, true);
        ar_lam_store(p, l, g, w0);
        if (dt == F32) ar_lam_store(p, l, g + 1, w1);
      }
    }
    ar_lam_desc_send(p, l);
    ar_lam_rearm(p, l); /* while the peers' bytes travel */
    // every rank's descriptor granule compared before anything is written
    // (comm_ar.h, Agreement); a thread with no row writes nothing
    ok = (uint64_t)blockIdx.x * (uint64_t)p.rpb + threadIdx.x / T >= p.rows ||
         ar_lam_desc_ok(p, l, c);
  }
  for (uint64_t rg = blockIdx.x; rg < groups; rg += gridDim.x) {
    const uint64_t row = rg * (uint64_t)p.rpb + threadIdx.x / T;
    const bool valid = row < p.rows;
    const uint64_t src = ar_epi_src<SRC>(p, row);
    float s = 0.0f;
    for (int j = 0; j < p.nv; j++) {
      unsigned vi = (unsigned)j * (unsigned)T + (unsigned)t;
      if (!valid || vi >= nvecs || !ok) continue;
      uint64_t e = row * H + (uint64_t)vi * NV;
      float a[NV], r[NV];
      if constexpr (SRC == SRC_ONESHOT) ar_reduce_n<NV>(p, e, a);
      else if constexpr (SRC == SRC_LAMPORT) {
        if (!ar_lam_row_get(p, l, c, e, a)) {
          ok = false;
          continue;
        }
      } else if (NV == 8 && p.vec != 8) {
#pragma unroll
        for (int k = 0; k < NV; k++) a[k] = te_ld(ar_ptr<const void>(src), e + k, dt);
      } else {
        ar_ldn<NV>(src, e, dt, a);
      }
      ar_ldn<NV>(p.res_in, e, dt, r);
#pragma unroll
      for (int k = 0; k < NV; k++) {
        r[k] = te_ar_residual(te_ar_round(a[k], dt), r[k], dt);
        s = te_fma_rn(r[k], r[k], s);
      }
      ar_stn<NV>(p.res_out, e, dt, r);
    }
    float total = ar_row_sum(s, T, red, buf);
    buf ^= 1;
    float rs = te_norm_rsigma(te_norm_mean(total, (float)H), p.eps);
    // the row's statistic for the backward, once per row (its first thread)
    if (p.rsigma && valid && ok && t == 0) ar_ptr<float>(p.rsigma)[row] = rs;
    for (int j = 0; j < p.nv; j++) {
      unsigned vi = (unsigned)j * (unsigned)T + (unsigned)t;
      if (!valid || vi >= nvecs || !ok) continue;
      uint64_t e = row * H + (uint64_t)vi * NV;
      float x[NV], g[NV], o[NV];
      ar_ldn<NV>(p.res_out, e, dt, x);
      ar_ldn<NV>(p.gamma, (uint64_t)vi * NV, dt, g);
#pragma unroll
      for (int k = 0; k < NV; k++) {
        o[k] = te_rms_out(x[k], rs, te_norm_gamma(g[k], te_norm_zc(0)));
        am = te_amax_f32(am, o[k]);
      }
      if (p.fflags & TE_AR_F_OUT) ar_stn<NV>(p.fout, e, dt, o);
      if (p.fflags & TE_AR_F_Q) {
#pragma unroll
        for (int k = 0; k < NV; k++) o[k] = te_mul_rn(o[k], sc);
        ar_stn<NV>(p.q_data, e, p.q_dtype, o);
      }
    }
  }
  if (p.fflags & TE_AR_F_AMAX) te_dev_block_amax_f(ar_ptr<unsigned>(p.q_amax), am);
  if (SRC == SRC_ONESHOT) {
    ar_barrier(p, c, base + 2);
  } else if (SRC == SRC_RS) {
    ar_barrier(p, c, base + 3); /* the peers have read this rank's rows */
  }
}

// The outputs of vector g (8 elements x of residual_out, gamma packed in
// gq): out = x * rs * gamma and/or its FP8 copy at scale sc; am takes
// their amax.  The same per-element formula as tecore_rmsnorm_fwd.
template <int DT>
__device__ __forceinline__ void ar_norm_out8(const te_ar_params &p, uint64_t g, const float *x,
                                             uint4 gq, float rs, float sc, float &am) {
  float o[8], gm[8];
  ar_unpack<DT>(gq, gm);
#pragma unroll
  for (int k = 0; k < 8; k++) {
    o[k] = te_rms_out(x[k], rs, te_norm_gamma(gm[k], te_norm_zc(0)));
    am = te_amax_f32(am, o[k]);
  }
  if (p.fflags & TE_AR_F_OUT) ar_st<DT, 8>(p.fout, g, o);
  if (p.fflags & TE_AR_F_Q) {
#pragma unroll
    for (int k = 0; k < 8; k++) o[k] = te_mul_rn(o[k], sc);
    te_dev_st8(ar_ptr<void>(p.q_data), g * 8, p.q_dtype, o);
  }
}

// The fused kernel for the common shapes: 16-bit dtypes, 8-element norm
// vectors, at most TE_NORM_FWD_NV_MAX of them a thread (hidden up to 32768),
// and inputs the kernel may read 16 bytes at a time.  The same results as
// ar_fused (the same sums in the same order), with the loads of a row
// batched: a thread issues the loads of all its vectors (gamma and
// residual_in first, then every slot's granules) before it waits for any,
// and keeps residual_out in registers for the second pass.  ar_fused loops vector
// by vector, each waiting on its own loads: on 2x H200 that chain cost
// about 12 us a call, more than the allreduce itself.
template <int DT, int SRC, int MR>
__device__ void ar_fused_fast(const te_ar_params &p) {
  constexpr int NVM = TE_NORM_FWD_NV_MAX;
  __shared__ float red[2][32];
  const unsigned H = p.hidden, nvecs = H / 8;
  const int T = p.tpr, t = threadIdx.x % T, nv = p.nv;
  const uint64_t groups = (p.rows + (uint64_t)p.rpb - 1) / (uint64_t)p.rpb;
  const uint64_t nbytes = p.count * 2u;
  const uint64_t row0 = (uint64_t)blockIdx.x * (uint64_t)p.rpb + threadIdx.x / T;
  // Loads that need nothing from the protocol go out first, together:
  // gamma (the same columns in every row, so loaded once), the first row
  // group's residual_in and, for Lamport, its input.  They arrive while
  // the set-up's words, the barrier or the peers' granules are awaited,
  // instead of each costing a round trip after the wait (gamma used to be
  // loaded after the row sum).  Kept as packed 16-bit quads: 4 registers
  // a vector, widened where used (the same exact conversion as
  // te_dev_ld8t, so the same bits).
  uint4 gq[NVM], rq0[NVM];
#pragma unroll
  for (int j = 0; j < NVM; j++) {
    unsigned vi = (unsigned)j * (unsigned)T + (unsigned)t;
    if (j < nv && vi < nvecs) {
      gq[j] = *ar_ptr<const uint4>(p.gamma + (uint64_t)vi * 16u);
      if (row0 < p.rows) rq0[j] = *ar_ptr<const uint4>(p.res_in + (row0 * (H / 8) + vi) * 16u);
    }
  }
  ar_block c;
  uint64_t base = 0;
  ar_lam l;
  if constexpr (SRC == SRC_LAMPORT) {
    // the first row group's input is on its way during the set-up
    uint4 pre[NVM];
#pragma unroll
    for (int j = 0; j < NVM; j++) {
      unsigned vi = (unsigned)j * (unsigned)T + (unsigned)t;
      if (j < nv && vi < nvecs && row0 < p.rows)
        pre[j] = ar_lam_load(p, (row0 * H + (uint64_t)vi * 8) / 8, nbytes, true);
    }
    if (!ar_lam_start(p, (nbytes + 15) / 16 * 16, c, l)) return;
    for (uint64_t rg = blockIdx.x; rg < groups; rg += gridDim.x) {
      const uint64_t row = rg * (uint64_t)p.rpb + threadIdx.x / T;
      if (row >= p.rows) continue;
      uint4 w[NVM];
#pragma unroll
      for (int j = 0; j < NVM; j++) {
        unsigned vi = (unsigned)j * (unsigned)T + (unsigned)t;
        if (j < nv && vi < nvecs)
          w[j] = rg == blockIdx.x ? pre[j] : ar_lam_load(p, (row * H + (uint64_t)vi * 8) / 8, nbytes, true);
      }
#pragma unroll
      for (int j = 0; j < NVM; j++) {
        unsigned vi = (unsigned)j * (unsigned)T + (unsigned)t;
        if (j < nv && vi < nvecs) ar_lam_store<MR>(p, l, (row * H + (uint64_t)vi * 8) / 8, w[j]);
      }
    }
    ar_lam_desc_send<MR>(p, l);
    ar_lam_rearm(p, l); /* while the peers' bytes travel */
  } else {
    if (!ar_begin(p, SRC == SRC_ONESHOT ? 2 : 0, c, base)) return;
    if (SRC == SRC_ONESHOT && !ar_barrier(p, c, base + 1)) return;
  }
  const float sc = ar_fp8_scale(p);
  float am = 0.0f;
  bool ok = true;
  // Lamport: every rank's descriptor granule compared before anything is
  // written (comm_ar.h, Agreement); a thread with no row writes nothing
  if constexpr (SRC == SRC_LAMPORT) ok = row0 >= p.rows || ar_lam_desc_ok<MR>(p, l, c);
  int buf = 0;
  for (uint64_t rg = blockIdx.x; rg < groups; rg += gridDim.x) {
    const uint64_t row = rg * (uint64_t)p.rpb + threadIdx.x / T;
    const bool valid = row < p.rows && ok;
    bool jv[NVM];
    uint64_t gi[NVM];  // granule (= vector) index of vector j of this thread
#pragma unroll
    for (int j = 0; j < NVM; j++) {
      unsigned vi = (unsigned)j * (unsigned)T + (unsigned)t;
      jv[j] = valid && j < nv && vi < nvecs;
      gi[j] = (row * H + (uint64_t)vi * 8) / 8;
    }
    float x[NVM][8];
    float s = 0.0f;
    {
      uint4 rq[NVM];
      const bool first = rg == blockIdx.x;
#pragma unroll
      for (int j = 0; j < NVM; j++)
        if (jv[j]) rq[j] = first ? rq0[j] : *(ar_ptr<const uint4>(p.res_in) + gi[j]);
      // JB vectors a round: all of them, but for 8 ranks (registers)
      constexpr int JB = MR > 4 ? 2 : NVM;
#pragma unroll
      for (int j0 = 0; j0 < NVM; j0 += JB) {
        uint4 raw[JB][MR];
        if constexpr (SRC == SRC_LAMPORT) {
          if (valid && ok && !ar_lam_wait<JB, MR>(p, l, c, gi + j0, jv + j0, raw)) ok = false;
        } else if constexpr (SRC == SRC_ONESHOT) {
#pragma unroll
          for (int j = 0; j < JB; j++)
#pragma unroll
            for (int q = 0; q < MR; q++)
              if (jv[j0 + j] && q < p.nranks)
                raw[j][q] = __ldcg(ar_ptr<const uint4>(p.in[q]) + gi[j0 + j]);
        } else {
#pragma unroll
          for (int j = 0; j < JB; j++)
            if (jv[j0 + j]) raw[j][0] = __ldcg(ar_ptr<const uint4>(p.in[p.rank]) + gi[j0 + j]);
        }
#pragma unroll
        for (int jj = 0; jj < JB; jj++) {
          const int j = j0 + jj;
          if (!jv[j] || !ok) continue;
          float a[8], r[8];
          if constexpr (SRC == SRC_LOCAL) ar_unpack<DT>(raw[jj][0], a);
          else ar_fold<DT, MR>(p, raw[jj], a);
          ar_unpack<DT>(rq[j], r);
#pragma unroll
          for (int k = 0; k < 8; k++) {
            x[j][k] = te_ar_residual(te_ar_round(a[k], DT), r[k], DT);
            s = te_fma_rn(x[j][k], x[j][k], s);
          }
          ar_st<DT, 8>(p.res_out, gi[j], x[j]);
        }
      }
    }
    float total = ar_row_sum(s, T, red, buf);
    buf ^= 1;
    float rs = te_norm_rsigma(te_norm_mean(total, (float)H), p.eps);
    if (p.rsigma && valid && ok && t == 0) ar_ptr<float>(p.rsigma)[row] = rs;
#pragma unroll
    for (int j = 0; j < NVM; j++)
      if (jv[j] && ok) ar_norm_out8<DT>(p, gi[j], x[j], gq[j], rs, sc, am);
  }
  if (p.fflags & TE_AR_F_AMAX) te_dev_block_amax_f(ar_ptr<unsigned>(p.q_amax), am);
  if constexpr (SRC == SRC_ONESHOT) ar_barrier(p, c, base + 2);
}

// The fused two-shot by rows for the common shapes (16-bit dtypes, vectors
// of 8, at most TE_NORM_FWD_NV_MAX of them a thread, 16-byte aligned
// inputs): ar_fused's sums in ar_fused_fast's order (vectors j, then their
// 8 elements), so the same bits, with the registers a block of
// TE_AR_FUSED_RS_THREADS threads has (128 a thread): residual_out is
// kept packed in the dtype between the passes (it is rounded to the dtype,
// so packing is exact), gamma is read again in the second pass (L1 hits:
// every row reads the same columns), and the next row group's
// residual_in and owner's values are loaded before this group's math, so
// a block always has one group's loads in flight.
template <int DT>
__device__ void ar_fused_rs_fast(const te_ar_params &p) {
  constexpr int NVM = TE_NORM_FWD_NV_MAX;
  __shared__ float red[2][32];
  const unsigned H = p.hidden, nvecs = H / 8;
  const int T = p.tpr, t = threadIdx.x % T, nv = p.nv;
  const uint64_t R = (uint64_t)p.rpb, groups = (p.rows + R - 1) / R;
  const uint64_t slot = threadIdx.x / T;
  ar_block c;
  uint64_t base = 0;
  if (!ar_rs_begin<DT>(p, c, base)) return;
  // the first group's residual_in goes out before the barrier
  uint4 rq[NVM], aq[NVM];
  {
    const uint64_t row = (uint64_t)blockIdx.x * R + slot;
#pragma unroll
    for (int j = 0; j < NVM; j++) {
      const unsigned vi = (unsigned)j * (unsigned)T + (unsigned)t;
      if (row < p.rows && j < nv && vi < nvecs)
        rq[j] = *(ar_ptr<const uint4>(p.res_in) + row * nvecs + vi);
    }
  }
  if (!ar_barrier(p, c, base + 2)) return; /* every chunk is reduced */
  {
    const uint64_t row = (uint64_t)blockIdx.x * R + slot;
    const uint64_t src = ar_epi_src<SRC_RS>(p, row);
#pragma unroll
    for (int j = 0; j < NVM; j++) {
      const unsigned vi = (unsigned)j * (unsigned)T + (unsigned)t;
      if (row < p.rows && j < nv && vi < nvecs)
        aq[j] = __ldcg(ar_ptr<const uint4>(src) + row * nvecs + vi);
    }
  }
  const float sc = ar_fp8_scale(p);
  float am = 0.0f;
  int buf = 0;
  for (uint64_t rg = blockIdx.x; rg < groups; rg += gridDim.x) {
    const uint64_t row = rg * R + slot;
    const bool valid = row < p.rows;
    // the next group's loads, before this group's math
    uint4 nrq[NVM], naq[NVM];
    {
      const uint64_t nrow = (rg + gridDim.x) * R + slot;
      const uint64_t nsrc = ar_epi_src<SRC_RS>(p, nrow);
#pragma unroll
      for (int j = 0; j < NVM; j++) {
        const unsigned vi = (unsigned)j * (unsigned)T + (unsigned)t;
        if (nrow < p.rows && j < nv && vi < nvecs) {
          nrq[j] = *(ar_ptr<const uint4>(p.res_in) + nrow * nvecs + vi);
          naq[j] = __ldcg(ar_ptr<const uint4>(nsrc) + nrow * nvecs + vi);
        }
      }
    }
    uint4 xq[NVM];
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < NVM; j++) {
      const unsigned vi = (unsigned)j * (unsigned)T + (unsigned)t;
      if (!valid || j >= nv || vi >= nvecs) continue;
      float a[8], r[8], x[8];
      ar_unpack<DT>(aq[j], a);
      ar_unpack<DT>(rq[j], r);
#pragma unroll
      for (int k = 0; k < 8; k++) {
        x[k] = te_ar_residual(te_ar_round(a[k], DT), r[k], DT);
        s = te_fma_rn(x[k], x[k], s);
      }
      xq[j] = ar_pack<DT>(x);
      ar_ptr<uint4>(p.res_out)[row * nvecs + vi] = xq[j];
    }
    float total = ar_row_sum(s, T, red, buf);
    buf ^= 1;
    float rs = te_norm_rsigma(te_norm_mean(total, (float)H), p.eps);
    if (p.rsigma && valid && t == 0) ar_ptr<float>(p.rsigma)[row] = rs;
#pragma unroll
    for (int j = 0; j < NVM; j++) {
      const unsigned vi = (unsigned)j * (unsigned)T + (unsigned)t;
      if (!valid || j >= nv || vi >= nvecs) continue;
      float x[8];
      ar_unpack<DT>(xq[j], x);
      ar_norm_out8<DT>(p, row * nvecs + vi, x, __ldg(ar_ptr<const uint4>(p.gamma) + vi), rs, sc, am);
    }
#pragma unroll
    for (int j = 0; j < NVM; j++) {
      rq[j] = nrq[j];
      aq[j] = naq[j];
    }
  }
  if (p.fflags & TE_AR_F_AMAX) te_dev_block_amax_f(ar_ptr<unsigned>(p.q_amax), am);
  ar_barrier(p, c, base + 3); /* the peers have read this rank's rows */
}

// Phase clocks of block 0's first and last thread, for
// t/gpu/fused_ladder.cu (which defines TE_AR_TRACE and the array); the
// library's build compiles them to nothing.
#ifdef TE_AR_TRACE
#define AR_TR_DECL long long ar_tr[12] = {0}
#define AR_TR(i) ar_tr[i] = clock64()
#define AR_TR_END(k) te_ar_trace_store(k, ar_tr)
#else
#define AR_TR_DECL \
  do {             \
  } while (0)
#define AR_TR(i) \
  do {           \
  } while (0)
#define AR_TR_END(k) \
  do {               \
  } while (0)
#endif

// The fused Lamport kernel with each row spread over more threads.  At a
// few rows the fast kernel's block is small (hidden 4096: 128 threads,
// one warp a scheduler) and each thread runs four vectors' loads, folds,
// roundings and norm math one after another.  Here every thread of the
// RMSNorm plan (u = 0 .. P-1, P = tpr x rows-per-block) gets S = spread
// threads (2 or 4; block S x P <= TE_AR_SPREAD_THREADS): thread s of u
// takes u's vectors j = s, s + S, ...  Each thread loads, stores, waits
// for and folds its vectors and writes their residual_out; the values go
// through shared memory to u's first thread, which sums their squares in
// the plan's order (j, then the 8 elements: the fma chain of ar_fused_fast
// and of tecore_rmsnorm_fwd), so the row sum, 1/rms and every output are
// the same bits.  1/rms comes back through shared memory, and each thread
// writes the outputs of its own vectors.
// Its shared memory, declared once in the kernel (static shared arrays of
// a template function would be one set per instantiation).
struct ar_spread_smem {
  float red[2][32];
  float4 xs[TE_AR_SPREAD_THREADS / 2 * TE_NORM_FWD_NV_MAX * 2];  // [j][half][u], P <= 256
  float rs[TE_AR_SPREAD_THREADS / 2];
  unsigned amax;
};
// v[0..7] rounded to DT and back with the conversion instructions (two a
// cvt), packed in q too.  te_ar_round's bits for every value but a NaN,
// which comes back canonical: every store of these values converts
// through the same instructions (ar_pack), and arithmetic on a NaN gives
// the canonical one, so no output or amax differs.
template <int DT>
__device__ __forceinline__ void ar_round8(float *v, uint4 &q) {
  q = ar_pack<DT>(v);
  ar_unpack<DT>(q, v);
}
// CUT (t/gpu/fused_ladder.cu only; the library's kernels take 0): leave
// after the wait (1), after residual_out (2), after 1/rms (3).
template <int DT, int MR, int CUT = 0>
__device__ void ar_fused_spread(const te_ar_params &p, ar_spread_smem &sm) {
  constexpr int NVM = TE_NORM_FWD_NV_MAX, JT = NVM / 2;  // S >= 2: at most 2 vectors a thread
  float(*red)[32] = sm.red;
  float4 *xs = sm.xs;
  float *rs_s = sm.rs;
  const unsigned H = p.hidden, nvecs = H / 8;
  const int T = p.tpr, nv = p.nv, S = p.spread;
  const int P = (int)blockDim.x / S, u = (int)threadIdx.x % P, si = (int)threadIdx.x / P;
  const int t = u % T;
  const uint64_t groups = (p.rows + (uint64_t)p.rpb - 1) / (uint64_t)p.rpb;
  const uint64_t nbytes = p.count * 2u;
  const uint64_t row0 = (uint64_t)blockIdx.x * (uint64_t)p.rpb + (uint64_t)(u / T);
  AR_TR_DECL;
  AR_TR(0);
  // as ar_fused_fast: gamma, the first row group's residual_in and input
  // go out before the set-up
  uint4 gq[JT], rq0[JT], pre[JT];
#pragma unroll
  for (int m = 0; m < JT; m++) {
    const int j = si + S * m;
    const unsigned vi = (unsigned)j * (unsigned)T + (unsigned)t;
    if (j < nv && vi < nvecs) {
      gq[m] = *ar_ptr<const uint4>(p.gamma + (uint64_t)vi * 16u);
      if (row0 < p.rows) {
        rq0[m] = *ar_ptr<const uint4>(p.res_in + (row0 * (H / 8) + vi) * 16u);
        pre[m] = ar_lam_load(p, row0 * (H / 8) + vi, nbytes, true);
      }
    }
  }
  if (threadIdx.x == 0) sm.amax = 0; /* ar_lam_start's barrier orders it */
  ar_block c;
  ar_lam l;
  if (!ar_lam_start(p, (nbytes + 15) / 16 * 16, c, l)) return;
  AR_TR(1);
  for (uint64_t rg = blockIdx.x; rg < groups; rg += gridDim.x) {
    const uint64_t row = rg * (uint64_t)p.rpb + (uint64_t)(u / T);
    if (row >= p.rows) continue;
#pragma unroll
    for (int m = 0; m < JT; m++) {
      const int j = si + S * m;
      const unsigned vi = (unsigned)j * (unsigned)T + (unsigned)t;
      if (j < nv && vi < nvecs) {
        const uint64_t g = row * (H / 8) + vi;
        ar_lam_store<MR>(p, l, g, rg == blockIdx.x ? pre[m] : ar_lam_load(p, g, nbytes, true));
      }
    }
  }
  AR_TR(2);
  ar_lam_desc_send<MR>(p, l);
  ar_lam_rearm(p, l); /* while the peers' bytes travel */
  AR_TR(3);
  const float sc = ar_fp8_scale(p);
  const float inv_h = te_norm_inv_pow2((float)H);
  float am = 0.0f;
  // every rank's descriptor granule compared before anything is written
  // (comm_ar.h, Agreement); a thread with no row writes nothing
  bool ok = row0 >= p.rows || ar_lam_desc_ok<MR>(p, l, c);
  int buf = 0;
  for (uint64_t rg = blockIdx.x; rg < groups; rg += gridDim.x) {
    const uint64_t row = rg * (uint64_t)p.rpb + (uint64_t)(u / T);
    const bool rv = row < p.rows;
    bool jv[JT];
    uint64_t gi[JT];
#pragma unroll
    for (int m = 0; m < JT; m++) {
      const int j = si + S * m;
      const unsigned vi = (unsigned)j * (unsigned)T + (unsigned)t;
      jv[m] = rv && ok && j < nv && vi < nvecs;
      gi[m] = row * (H / 8) + vi;
    }
    float x[JT][8];
    {
      uint4 rq[JT], raw[JT][MR];
      const bool first = rg == blockIdx.x;
#pragma unroll
      for (int m = 0; m < JT; m++)
        if (jv[m]) rq[m] = first ? rq0[m] : *(ar_ptr<const uint4>(p.res_in) + gi[m]);
      if (rv && ok && !ar_lam_wait<JT, MR>(p, l, c, gi, jv, raw)) ok = false;
      AR_TR(4);
      if constexpr (CUT == 1) {
        if (ok && rv && jv[0]) ar_ptr<uint4>(p.res_out)[gi[0]] = raw[0][0];
        continue;
      }
      // residual_out = round(round(sum) + residual_in) (te_ar_residual)
#pragma unroll
      for (int m = 0; m < JT; m++) {
        if (!jv[m] || !ok) continue;
        float a[8], r[8];
        uint4 q;
        ar_fold<DT, MR>(p, raw[m], a);
        ar_round8<DT>(a, q);
        ar_unpack<DT>(rq[m], r);
#pragma unroll
        for (int k = 0; k < 8; k++) x[m][k] = te_add_rn(a[k], r[k]);
        ar_round8<DT>(x[m], q);
        const int j = si + S * m;
        xs[(2 * j) * P + u] = make_float4(x[m][0], x[m][1], x[m][2], x[m][3]);
        xs[(2 * j + 1) * P + u] = make_float4(x[m][4], x[m][5], x[m][6], x[m][7]);
        ar_ptr<uint4>(p.res_out)[gi[m]] = q;
      }
    }
    AR_TR(5);
    __syncthreads();
    AR_TR(6);
    if constexpr (CUT == 1 || CUT == 2) continue;
    // plan thread u's sum of squares, in its order
    // (every vector's loads first, then the fma chain)
    float sq = 0.0f;
    if (si == 0 && rv) {
      float4 v[NVM][2];
#pragma unroll
      for (int j = 0; j < NVM; j++)
        if (j < nv && (unsigned)j * (unsigned)T + (unsigned)t < nvecs) {
          v[j][0] = xs[(2 * j) * P + u];
          v[j][1] = xs[(2 * j + 1) * P + u];
        }
#pragma unroll
      for (int j = 0; j < NVM; j++)
        if (j < nv && (unsigned)j * (unsigned)T + (unsigned)t < nvecs) {
          const float e[8] = {v[j][0].x, v[j][0].y, v[j][0].z, v[j][0].w,
                              v[j][1].x, v[j][1].y, v[j][1].z, v[j][1].w};
#pragma unroll
          for (int k = 0; k < 8; k++) sq = te_fma_rn(e[k], e[k], sq);
        }
    }
    AR_TR(7);
    float total = ar_row_sum(sq, T, red, buf);
    AR_TR(8);
    buf ^= 1;
    if (si == 0) rs_s[u] = te_norm_rsigma(te_norm_mean_inv(total, (float)H, inv_h), p.eps);
    __syncthreads();
    const float rs = rs_s[u];
    AR_TR(9);
    if constexpr (CUT == 3) {
      if (rv && ok && si == 0 && t == 0) ar_ptr<float>(p.res_out)[row] = rs;
      continue;
    }
    if (p.rsigma && rv && ok && si == 0 && t == 0) ar_ptr<float>(p.rsigma)[row] = rs;
#pragma unroll
    for (int m = 0; m < JT; m++)
      if (jv[m] && ok) ar_norm_out8<DT>(p, gi[m], x[m], gq[m], rs, sc, am);
    AR_TR(10);
  }
  if (p.fflags & TE_AR_F_AMAX) {
    // te_dev_block_amax without its first barrier (sm.amax was zeroed
    // before the set-up's) and without reading *q_amax before the atomic
    // (a round trip; at most TE_AR_MAX_BLOCKS blocks contend)
    const unsigned mw = __reduce_max_sync(FULL_MASK, te_abs_bits(am));
    if ((threadIdx.x & 31u) == 0 && mw) atomicMax(&sm.amax, mw);
    __syncthreads();
    if (threadIdx.x == 0 && sm.amax) atomicMax(ar_ptr<unsigned>(p.q_amax), sm.amax);
  }
  AR_TR(11);
  AR_TR_END(l.k);
}

// ar_fused_fast for ranks up to MR (a power of two: registers for them).
template <int DT, int SRC>
__device__ __forceinline__ void ar_fused_fast_n(const te_ar_params &p) {
  if (SRC == SRC_LOCAL || p.nranks <= 2) ar_fused_fast<DT, SRC, 2>(p);
  else if (p.nranks <= 4) ar_fused_fast<DT, SRC, 4>(p);
  else ar_fused_fast<DT, SRC, TE_AR_MAX_RANKS>(p);
}

// The fused kernel a call takes: ar_fused_fast (ar_fused_rs_fast for the
// fused two-shot) where its shape allows and the build has the registers
// for it (FAST: the narrow build).
template <int SRC, bool FAST>
__device__ __forceinline__ void ar_fused_entry(const te_ar_params &p) {
  const bool fast = FAST && p.nvec == 8 && p.nv <= TE_NORM_FWD_NV_MAX &&
                    (SRC == SRC_LAMPORT || p.vec == 8);
  if constexpr (SRC == SRC_RS) {
    if (fast && p.dtype == BF16) ar_fused_rs_fast<BF16>(p);
    else if (fast && p.dtype == F16) ar_fused_rs_fast<F16>(p);
    else if (p.nvec == 8) ar_fused<SRC, 8>(p);
    else ar_fused<SRC, 1>(p);
  } else {
    if (fast && p.dtype == BF16) ar_fused_fast_n<BF16, SRC>(p);
    else if (fast && p.dtype == F16) ar_fused_fast_n<F16, SRC>(p);
    else if (SRC == SRC_LAMPORT) ar_fused<SRC_LAMPORT, 8>(p);
    else if (p.nvec == 8) ar_fused<SRC, 8>(p);
    else ar_fused<SRC, 1>(p);
  }
}

// ---- entry points ----------------------------------------------------------------------
//
// Programmatic dependent launch (libtecomm launches these kernels with
// TECORE_LAUNCH_PDL unless TECOMM_PDL=0).  A grid launched so may start
// while the stream's previous kernel still runs, so every entry point
// first waits (griddepcontrol.wait: the previous grid has completed and
// its memory is visible) before it reads anything earlier work wrote --
// the input, residual_in, gamma, the Lamport counter and used words, the
// barrier epochs and flags, the error and abort words -- and before it
// writes anything.  Only the kernel parameter (constant bank) and address
// arithmetic come before it.  Without the launch attribute the wait
// returns at once.
//
// Then it lets the next grid launch (griddepcontrol.launch_dependents),
// which hides that grid's launch and block set-up behind this grid's
// waits on its peers.  Why that cannot break the co-residency the
// protocols rely on (block b of every rank waits for block b of the
// others, so all blocks of a grid must be resident together):
//  - the dependent grid launches only when every block of this grid has
//    run the trigger or ended, i.e. when every block of this grid is
//    already resident: a dependent can take SMs only from blocks that are
//    not yet placed, and there are none;
//  - the trigger comes after this grid's own wait, so at most two grids of
//    a stream are resident at once: this one, and its dependent parked in
//    its wait (which cannot trigger the one after it before this grid
//    ends).  Once this grid ends, the dependent has the GPU to itself, so
//    its blocks all become resident too (a grid fits: TE_AR_MAX_BLOCKS);
//  - across ranks, grid k on one rank passes its wait only after grid k-1
//    on that rank ended, which needed grid k-1 of every peer to have run;
//    by induction every grid of every rank becomes wholly resident.
// Memory: the dependent still waits for this grid's completion and
// memory flush in its own griddepcontrol.wait, so triggering early never
// lets it see a partial result.
__device__ __forceinline__ void ar_pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

#define AR_DISPATCH(body)                                       \
  if (p.dtype == F32) {                                         \
    if (p.vec > 1) body<F32, 4>(p); else body<F32, 1>(p);       \
  } else if (p.dtype == BF16) {                                 \
    if (p.vec > 1) body<BF16, 8>(p); else body<BF16, 1>(p);     \
  } else {                                                      \
    if (p.vec > 1) body<F16, 8>(p); else body<F16, 1>(p);       \
  }

extern "C" __global__ void __launch_bounds__(TE_AR_THREADS) te_comm_ar_oneshot(const te_ar_params p) {
  ar_pdl_enter();
  AR_DISPATCH(ar_oneshot)
}
extern "C" __global__ void __launch_bounds__(TE_AR_THREADS) te_comm_ar_twoshot(const te_ar_params p) {
  ar_pdl_enter();
  AR_DISPATCH(ar_twoshot)
}
extern "C" __global__ void __launch_bounds__(TE_AR_THREADS) te_comm_ar_gather(const te_ar_params p) {
  ar_pdl_enter();
  ar_gather(p);
}
extern "C" __global__ void __launch_bounds__(TE_AR_THREADS) te_comm_ar_ce_reduce(const te_ar_params p) {
  ar_pdl_enter();
  AR_DISPATCH(ar_ce_reduce)
}
// The Lamport kernel for up to 8 ranks, and for up to 2 and 4 (smaller
// code and registers: see ar_lamport).  One block an SM is all a call
// needs (at most TE_AR_MAX_BLOCKS blocks): said so, ptxas gives the
// kernels the registers they use instead of capping them at 64 and
// spilling on a small call's critical path (CUDA 13.0, sm_90: the 4-rank
// build spilled 128 bytes).
#define AR_LAMPORT_KERNEL(name, MR)                              \
  extern "C" __global__ void __launch_bounds__(TE_AR_THREADS, 1) \
      name(const te_ar_params p) {                               \
    ar_pdl_enter();                                              \
    if (p.desc.variant & TE_AR_V_AG) ar_lam_gather<MR>(p);       \
    else if (p.dtype == F32) ar_lamport<F32, MR>(p);             \
    else if (p.dtype == BF16) ar_lamport<BF16, MR>(p);           \
    else ar_lamport<F16, MR>(p);                                 \
  }
AR_LAMPORT_KERNEL(te_comm_ar_lamport, TE_AR_MAX_RANKS)
AR_LAMPORT_KERNEL(te_comm_ar_lamport2, 2)
AR_LAMPORT_KERNEL(te_comm_ar_lamport4, 4)
// The latency probe (tecomm_probe), one warp.  probe_launch does what
// every allreduce kernel does at its start and nothing else: the cost of
// a kernel node.  probe_exchange is the least any protocol that hears
// from every peer costs: thread 0 reads its call counter, writes the next
// call number into its word of every rank's probe line, and waits until
// every rank's word has reached it.  No rank can be two calls ahead of
// another (it would need this rank's word of the call between), so
// ">= k" is the test.  No data travels with the word: relaxed (volatile)
// accesses suffice.
extern "C" __global__ void __launch_bounds__(32) te_comm_ar_probe_launch(const te_ar_params p) {
  ar_pdl_enter();
  (void)p;
}
extern "C" __global__ void __launch_bounds__(32) te_comm_ar_probe_exchange(const te_ar_params p) {
  ar_pdl_enter();
  if (threadIdx.x != 0) return;
  const uint64_t ws = p.ws[p.rank];
  ar_block c;
  c.err = ar_ptr<uint32_t>(ws + TE_AR_OFF_ERR);
  c.abort_word = ar_ptr<uint32_t>(ws + TE_AR_OFF_ABORT);
  uint64_t *ctr = ar_ptr<uint64_t>(ws + TE_AR_OFF_PROBE);
  const uint64_t k = ar_ld_volatile64(ctr) + 1;
  if (ar_ld_volatile32(c.err) | ar_ld_volatile32(c.abort_word)) return;
  c.deadline = p.timeout_ns ? ar_gtimer() + p.timeout_ns : 0;
  // a copy-engine one-shot's exchange carries the call's descriptor hash
  // beside the word (release / acquire then); a plain probe carries 0
  const bool agree = p.desc.hash != 0;
  if (agree) ar_desc_note(p);
  for (int s = 0; s < p.nranks; s++) {
    *ar_ptr<volatile uint64_t>(te_ar_probe_desc(p.ws[s], p.rank, k)) = p.desc.hash;
    uint64_t *w = ar_ptr<uint64_t>(te_ar_probe_addr(p.ws[s], p.rank));
    if (agree) ar_st_release(w, k);
    else *(volatile uint64_t *)w = k;
  }
  for (int s = 0; s < p.nranks; s++) {
    const uint64_t *w = ar_ptr<const uint64_t>(te_ar_probe_addr(ws, s));
    unsigned it = 0;
    while ((agree ? ar_ld_acquire(w) : ar_ld_volatile64(w)) < k)
      if (!ar_poll_again(c, s, it)) return;
    if (agree && *ar_ptr<const volatile uint64_t>(te_ar_probe_desc(ws, s, k)) != p.desc.hash) {
      ar_fail(c, TE_AR_MISMATCH, s);
      return;
    }
  }
  *(volatile uint64_t *)ctr = k;
}
extern "C" __global__ void __launch_bounds__(TE_AR_THREADS) te_comm_ar_nvls(const te_ar_params p) {
  ar_pdl_enter();
  if (p.dtype == F32) ar_nvls<F32>(p);
  else if (p.dtype == BF16) ar_nvls<BF16>(p);
  else ar_nvls<F16>(p);
}
// The fused kernels in two builds: blocks of at most 256 threads (hidden up
// to 8192 with 8-element vectors: the common shapes, room for registers)
// and of up to 1024 (wider rows).
#define AR_FUSED_KERNELS(suffix, bound, fast)                                                          \
  extern "C" __global__ void __launch_bounds__(bound)                                            \
      te_comm_ar_oneshot_fused##suffix(const te_ar_params p) {                                   \
    ar_pdl_enter(); ar_fused_entry<SRC_ONESHOT, fast>(p);                                                           \
  }                                                                                              \
  extern "C" __global__ void __launch_bounds__(bound)                                            \
      te_comm_ar_lamport_fused##suffix(const te_ar_params p) {                                   \
    ar_pdl_enter(); ar_fused_entry<SRC_LAMPORT, fast>(p);                                                           \
  }                                                                                              \
  extern "C" __global__ void __launch_bounds__(bound) te_comm_ar_addnorm##suffix(const te_ar_params p) { \
    ar_pdl_enter(); ar_fused_entry<SRC_LOCAL, fast>(p);                                                           \
  }
AR_FUSED_KERNELS(, TE_AR_FUSED_NARROW, true)
AR_FUSED_KERNELS(_wide, 1024, false)
// The fused two-shot by rows (comm_ar.h): one kernel, a persistent grid
// of at most TE_AR_MAX_BLOCKS blocks of up to TE_AR_FUSED_RS_THREADS
// threads (the plan's rows stacked), and the wide build for plans of more.
extern "C" __global__ void __launch_bounds__(TE_AR_FUSED_RS_THREADS)
    te_comm_ar_twoshot_fused(const te_ar_params p) {
  ar_pdl_enter();
  ar_fused_entry<SRC_RS, true>(p);
}
extern "C" __global__ void __launch_bounds__(1024) te_comm_ar_twoshot_fused_wide(const te_ar_params p) {
  ar_pdl_enter();
  ar_fused_entry<SRC_RS, false>(p);
}
// The spread fused Lamport kernels (block spread x the plan's threads,
// 16-bit dtypes): one for 2 ranks and one for 3 or 4, each with the
// registers its ranks' granules need (together they would spill; the host
// takes the plan's kernel for more ranks).
#define AR_SPREAD_KERNEL(name, MR)                                                          \
  extern "C" __global__ void __launch_bounds__(TE_AR_SPREAD_THREADS) name(const te_ar_params p) { \
    __shared__ ar_spread_smem sm;                                                           \
    ar_pdl_enter();                                                                         \
    if (p.dtype == BF16) ar_fused_spread<BF16, MR>(p, sm);                                  \
    else ar_fused_spread<F16, MR>(p, sm);                                                   \
  }
AR_SPREAD_KERNEL(te_comm_ar_lamport_fused_spread, 2)
AR_SPREAD_KERNEL(te_comm_ar_lamport_fused_spread4, 4)
