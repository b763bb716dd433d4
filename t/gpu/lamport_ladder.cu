// SPDX-License-Identifier: Apache-2.0
// lamport_ladder.cu -- where a small Lamport allreduce's time goes, on the
// GPUs of one host, measured in one process (peer access between every
// pair).  Not part of the library: a measuring stick for
// kernels/comm_ar.cu.  Each rung is the previous one plus one piece of the
// Lamport protocol, launched as te-allreduce-perf launches (graph-captured,
// programmatic dependent launch); the difference between two rungs is the
// cost of the piece.  The full rung also checks its sums.
//
// Build: nvcc -O3 -std=c++17 -arch=sm_90 -Ikernels -o ladder t/gpu/lamport_ladder.cu
// Run:   ./ladder [ngpus] [bytes ...]   (default: every GPU, 16 B and 8 KB)
#include <cuda_runtime.h>
#include "ladder.cuh"
#include "comm_ar.cu" /* the library's kernels: the last rungs run te_comm_ar_lamport itself */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXR 8
#define OPS 200
#define ARM 0x80008000u /* two bf16 -0.0: a granule word nobody wrote yet */


struct lp {
  int rank, nranks;
  unsigned ngr;            /* 16-byte granules */
  uint64_t slot;           /* bytes of one slot */
  char *buf[MAXR];         /* every rank's Lamport buffers [3][nranks][slot] */
  uint64_t *probe[MAXR];   /* every rank's probe words [nranks] */
  uint64_t *state;         /* this rank's words: counter, err, abort, used x3 */
  const uint4 *in;
  uint4 *out;
};

// The memory operations are comm_ar.cu's (ar_ld_volatile64/16, ar_st_volatile16,
// ar_gtimer, ar_pdl_enter), so the rungs and the library load and store alike.
__device__ __forceinline__ uint32_t fix(uint32_t w) { /* -0.0 halves become +0.0 */
  if ((w & 0xffffu) == 0x8000u) w &= 0xffff0000u;
  if ((w >> 16) == 0x8000u) w &= 0x0000ffffu;
  return w;
}
__device__ __forceinline__ bool ready(uint4 v) {
  uint32_t w[4] = {v.x, v.y, v.z, v.w};
  for (int i = 0; i < 4; i++)
    if ((w[i] & 0xffffu) == 0x8000u || (w[i] >> 16) == 0x8000u) return false;
  return true;
}
__device__ __forceinline__ float bf(uint32_t h) { return __uint_as_float(h << 16); }
__device__ __forceinline__ uint32_t tobf(float f) { /* round to nearest even */
  uint32_t u = __float_as_uint(f);
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

// The rungs.  R: 0 empty kernel; 1 probe (one thread: counter, one word to
// and from every peer); 2 the probe in a block of blockDim threads, the
// others waiting on a barrier for thread 0's counter; 3 Lamport: input
// load, set-up words, granules out, re-arm, poll, fold, output; 4 as 3
// with only the counter in the set-up; 5 as 3 with no input load (a
// constant); 6 as 3 with no output store; 7 as 3 with the re-arm after the
// output instead of before the poll.  Rung 8 is rung 3 with a kernel
// parameter as large as te_ar_params; rungs 9 and 10 are the library's
// te_comm_ar_lamport on the same memory (10: no timeout, so no timer);
// 11 te_comm_ar_lamport2 (or 4), 12 its BF16 body alone (2 ranks).
struct lp_big {
  lp p;
  char pad[sizeof(te_ar_params) - sizeof(lp) > 0 ? sizeof(te_ar_params) - sizeof(lp) : 1];
};
template <int R>
__device__ __forceinline__ void rung_body(const lp &p);
template <int R>
__global__ void __launch_bounds__(512) rung(const lp p) { rung_body<R>(p); }
__global__ void __launch_bounds__(512) rung_big(const lp_big b) { rung_body<3>(b.p); }
__global__ void __launch_bounds__(512) lam_bf16_2(const te_ar_params p) {
  ar_pdl_enter();
  ar_lamport<BF16, 2>(p);
}

template <int R>
__device__ __forceinline__ void rung_body(const lp &p) {
  ar_pdl_enter();
  if (R == 0) return;
  if (R <= 2) {
    __shared__ uint64_t sk;
    if (threadIdx.x == 0) {
      uint64_t k = ar_ld_volatile64(p.state) + 1;
      for (int s = 0; s < p.nranks; s++) *(volatile uint64_t *)(p.probe[s] + p.rank) = k;
      uint64_t dl = ar_gtimer() + 1000000000ull;
      for (int s = 0; s < p.nranks; s++)
        while (ar_ld_volatile64(p.probe[p.rank] + s) < k)
          if (ar_gtimer() > dl) { *(volatile uint64_t *)(p.state + 1) = 1; break; }
      *(volatile uint64_t *)p.state = k;
      sk = k;
    }
    if (R == 2) __syncthreads();
    (void)sk;
    return;
  }
  __shared__ uint64_t s_k, s_used;
  const unsigned g = threadIdx.x; /* one block, one granule a thread */
  uint4 w = make_uint4(0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u);
  if (R != 5 && g < p.ngr) w = p.in[g];
  if (threadIdx.x == 0) {
    uint64_t k = ar_ld_volatile64(p.state), e = 0, u = 0;
    if (R != 4) {
      e = ar_ld_volatile64(p.state + 1) | ar_ld_volatile64(p.state + 2);
      uint64_t u0 = ar_ld_volatile64(p.state + 3), u1 = ar_ld_volatile64(p.state + 4), u2 = ar_ld_volatile64(p.state + 5);
      int j = (int)((k + 2) % 3);
      u = j == 0 ? u0 : j == 1 ? u1 : u2;
    } else {
      u = p.ngr;
    }
    (void)e;
    s_k = k;
    s_used = u;
  }
  __syncthreads();
  const uint64_t k = s_k, used = s_used;
  const int bi = (int)(k % 3), bj = (int)((k + 2) % 3);
  if (threadIdx.x == 0) {
    ((volatile uint64_t *)(p.state + 3))[bi] = (uint64_t)p.ngr;
    *(volatile uint64_t *)p.state = k + 1;
  }
  if (g < p.ngr) {
    w.x = fix(w.x); w.y = fix(w.y); w.z = fix(w.z); w.w = fix(w.w);
    for (int s = 0; s < p.nranks; s++)
      ar_st_volatile16(p.buf[s] + ((uint64_t)bi * p.nranks + p.rank) * p.slot + (uint64_t)g * 16, w);
  }
  const uint4 arm = make_uint4(ARM, ARM, ARM, ARM);
  char *mine = p.buf[p.rank];
  if (R != 7)
    for (int s = 0; s < p.nranks; s++)
      for (uint64_t i = threadIdx.x; i < used; i += blockDim.x)
        *(uint4 *)(mine + ((uint64_t)bj * p.nranks + s) * p.slot + i * 16) = arm;
  if (g < p.ngr) {
    uint4 raw[MAXR];
    for (int s = 0; s < p.nranks; s++)
      raw[s] = ar_ld_volatile16(mine + ((uint64_t)bi * p.nranks + s) * p.slot + (uint64_t)g * 16);
    uint64_t dl = ar_gtimer() + 1000000000ull;
    for (;;) {
      bool all = true;
      for (int s = 0; s < p.nranks; s++)
        if (!ready(raw[s])) {
          all = false;
          raw[s] = ar_ld_volatile16(mine + ((uint64_t)bi * p.nranks + s) * p.slot + (uint64_t)g * 16);
        }
      if (all) break;
      if (ar_gtimer() > dl) { *(volatile uint64_t *)(p.state + 1) = 1; return; }
    }
    float a[8];
    uint32_t q[4] = {raw[0].x, raw[0].y, raw[0].z, raw[0].w};
    for (int i = 0; i < 4; i++) { a[2 * i] = bf(q[i] & 0xffffu); a[2 * i + 1] = bf(q[i] >> 16); }
    for (int s = 1; s < p.nranks; s++) {
      uint32_t r[4] = {raw[s].x, raw[s].y, raw[s].z, raw[s].w};
      for (int i = 0; i < 4; i++) { a[2 * i] += bf(r[i] & 0xffffu); a[2 * i + 1] += bf(r[i] >> 16); }
    }
    uint4 o;
    o.x = tobf(a[0]) | tobf(a[1]) << 16; o.y = tobf(a[2]) | tobf(a[3]) << 16;
    o.z = tobf(a[4]) | tobf(a[5]) << 16; o.w = tobf(a[6]) | tobf(a[7]) << 16;
    if (R != 6) p.out[g] = o;
  }
  if (R == 7)
    for (int s = 0; s < p.nranks; s++)
      for (uint64_t i = threadIdx.x; i < used; i += blockDim.x)
        *(uint4 *)(mine + ((uint64_t)bj * p.nranks + s) * p.slot + i * 16) = arm;
}

typedef void (*kfn)(const lp);
static const kfn rungs[] = {rung<0>, rung<1>, rung<2>, rung<3>, rung<4>, rung<5>, rung<6>, rung<7>};
#define NRUNG 13
static const char *names[NRUNG] = {
    "empty kernel", "probe: one thread", "probe in the block, barrier",
    "Lamport (all pieces)", "  - set-up reads only the counter", "  - no input load (sums not checked)",
    "  - no output store (sums not checked)", "  - re-arm after the output", "  + a te_ar_params-sized parameter",
    "te_comm_ar_lamport (the library's)", "  - no timeout (no timer reads)",
    "te_comm_ar_lamport2 (up to 2 ranks)", "  ar_lamport<BF16, 2>, no dtype switch"};

int main(int argc, char **argv) {
  int ndev = 0;
  CK(cudaGetDeviceCount(&ndev));
  int n = argc > 1 ? atoi(argv[1]) : ndev;
  if (n < 2 || n > ndev || n > MAXR) {
    fprintf(stderr, "ladder: needs 2..%d GPUs (%d here)\n", MAXR, ndev);
    return 77;
  }
  unsigned sizes[8] = {16, 8192};
  int nsz = 2;
  if (argc > 2) {
    nsz = 0;
    for (int i = 2; i < argc && nsz < 8; i++) sizes[nsz++] = (unsigned)atoi(argv[i]);
  }
  if (!ladder_peers(n, "ladder")) return 77;
  const uint64_t slot = 8192;
  char *buf[MAXR], *ws[MAXR]; /* ws: the library's workspace layout (comm_ar.h) */
  const uint64_t wsbytes = TE_AR_OFF_LAMBUF + 3 * (uint64_t)n * slot;
  uint64_t *probe[MAXR], *state[MAXR];
  uint4 *in[MAXR], *out[MAXR];
  cudaStream_t st[MAXR];
  cudaEvent_t e0[MAXR], e1[MAXR];
  for (int i = 0; i < n; i++) {
    CK(cudaSetDevice(i));
    CK(cudaMalloc(&buf[i], 3 * n * slot));
    CK(cudaMalloc(&ws[i], wsbytes));
    CK(cudaMalloc(&probe[i], MAXR * 8));
    CK(cudaMalloc(&state[i], 64));
    CK(cudaMalloc(&in[i], slot));
    CK(cudaMalloc(&out[i], slot));
    CK(cudaStreamCreateWithFlags(&st[i], cudaStreamNonBlocking));
    CK(cudaEventCreate(&e0[i]));
    CK(cudaEventCreate(&e1[i]));
    /* input of rank i: element e is (i + 1) * (1 + (e % 7) / 8), exact in bf16 and in its sums */
    uint16_t *h = (uint16_t *)malloc(slot);
    for (unsigned e = 0; e < slot / 2; e++) {
      float f = (float)(i + 1) * (1.0f + (float)(e % 7) / 8.0f);
      uint32_t u;
      memcpy(&u, &f, 4);
      h[e] = (uint16_t)(u >> 16);
    }
    CK(cudaMemcpy(in[i], h, slot, cudaMemcpyHostToDevice));
    free(h);
  }
  uint32_t *armed = (uint32_t *)malloc(3 * n * slot);
  for (uint64_t i = 0; i < 3 * n * slot / 4; i++) armed[i] = ARM;
  printf("# lamport_ladder: %d GPUs, %d ops a graph, us per op (the slowest GPU), bf16\n", n, OPS);
  for (int z = 0; z < nsz; z++) {
    unsigned bytes = sizes[z], ngr = (bytes + 15) / 16;
    if (ngr > 512 || bytes % 16) { fprintf(stderr, "ladder: sizes are multiples of 16 up to 8192\n"); return 2; }
    for (int r = 0; r < NRUNG; r++) {
      if (r == 12 && n > 2) continue; /* a 2-rank body */
      cudaGraphExec_t ge[MAXR];
      for (int i = 0; i < n; i++) {
        CK(cudaSetDevice(i));
        CK(cudaMemcpy(buf[i], armed, 3 * n * slot, cudaMemcpyHostToDevice)); /* every half -0.0 */
        CK(cudaMemset(ws[i], 0, TE_AR_OFF_LAMBUF));
        CK(cudaMemcpy(ws[i] + TE_AR_OFF_LAMBUF, armed, 3 * n * slot, cudaMemcpyHostToDevice));
        CK(cudaMemset(probe[i], 0, MAXR * 8));
        CK(cudaMemset(state[i], 0, 64));
        uint64_t used[3] = {ngr, ngr, ngr};
        CK(cudaMemcpy(state[i] + 3, used, sizeof used, cudaMemcpyHostToDevice));
        CK(cudaMemset(out[i], 0xff, slot));
        lp p;
        memset(&p, 0, sizeof p);
        p.rank = i;
        p.nranks = n;
        p.ngr = ngr;
        p.slot = slot;
        for (int j = 0; j < n; j++) {
          p.buf[j] = buf[j];
          p.probe[j] = probe[j];
        }
        p.state = state[i];
        p.in = in[i];
        p.out = out[i];
        cudaLaunchConfig_t cfg;
        memset(&cfg, 0, sizeof cfg);
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.gridDim = dim3(1);
        cfg.blockDim = dim3(r == 0 || r == 1 ? 32 : 512);
        cfg.stream = st[i];
        cfg.attrs = at;
        cfg.numAttrs = 1;
        cudaGraph_t gr;
        CK(cudaStreamBeginCapture(st[i], cudaStreamCaptureModeThreadLocal));
        te_ar_params a =
            ladder_params(i, n, ws, in[i], out[i], bytes / 2, slot, r == 10 ? 0 : 1000000000ull);
        lp_big big;
        memset(&big, 0, sizeof big);
        big.p = p;
        for (int k = 0; k < OPS; k++) {
          if (r < 8) CK(cudaLaunchKernelEx(&cfg, rungs[r], p));
          else if (r == 8) CK(cudaLaunchKernelEx(&cfg, rung_big, big));
          else if (r <= 10) CK(cudaLaunchKernelEx(&cfg, te_comm_ar_lamport, a));
          else if (r == 11) CK(cudaLaunchKernelEx(&cfg, n <= 2 ? te_comm_ar_lamport2 : te_comm_ar_lamport4, a));
          else if (n <= 2) CK(cudaLaunchKernelEx(&cfg, lam_bf16_2, a));
        }
        CK(cudaStreamEndCapture(st[i], &gr));
        CK(cudaGraphInstantiate(&ge[i], gr, 0));
        CK(cudaGraphDestroy(gr));
      }
      double best = ladder_time(n, ge, st, e0, e1);
      long bad = 0, err = 0;
      for (int i = 0; i < n; i++) {
        CK(cudaSetDevice(i));
        uint64_t s[6];
        CK(cudaMemcpy(s, state[i], sizeof s, cudaMemcpyDeviceToHost));
        err += s[1] != 0;
        uint32_t ew = 0;
        CK(cudaMemcpy(&ew, ws[i] + TE_AR_OFF_ERR, 4, cudaMemcpyDeviceToHost));
        err += ew != 0;
        if (r >= 3 && r != 5 && r != 6) {
          uint16_t *h = (uint16_t *)malloc(slot);
          CK(cudaMemcpy(h, out[i], slot, cudaMemcpyDeviceToHost));
          for (unsigned e = 0; e < ngr * 8; e++) {
            float want = (float)(n * (n + 1) / 2) * (1.0f + (float)(e % 7) / 8.0f);
            uint32_t u = (uint32_t)h[e] << 16;
            float got;
            memcpy(&got, &u, 4);
            bad += got != want;
          }
          free(h);
        }
        CK(cudaGraphExecDestroy(ge[i]));
      }
      printf("%6u B  %-36s %7.2f us%s%s\n", bytes, names[r], best * 1000.0 / OPS,
             err ? "  TIMEOUT" : "", bad ? "  WRONG SUMS" : "");
      fflush(stdout);
    }
  }
  return 0;
}
