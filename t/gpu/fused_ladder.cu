// SPDX-License-Identifier: Apache-2.0
// fused_ladder.cu -- where the fused Lamport allreduce + residual add +
// RMSNorm spends the time it takes beyond the plain Lamport allreduce of
// the same bytes, on the GPUs of one host, in one process (peer access
// between every pair).  Not part of the library: a measuring stick for
// kernels/comm_ar.cu's ar_fused_spread, as lamport_ladder.cu is for the
// plain kernel.  Every rung is launched as te-allreduce-perf launches it
// (graph-captured, programmatic dependent launch, the library's grid and
// block for the shape); the cut rungs are the library's spread kernel
// left early (ar_fused_spread's CUT), so the difference between two rungs
// is the cost of the piece between the cuts.  The "after a 32 MB copy"
// rungs put a DRAM-bound kernel (a GEMM's weight stream, roughly) before
// every call, as in te-demo's decode forward, and subtract the copies' own
// time: the call's cost where it does not follow itself.
//
// Build: nvcc -O3 -std=c++17 -arch=sm_90a -Ikernels -o fladder t/gpu/fused_ladder.cu
// Run:   ./fladder [ngpus] [rows ...]   (hidden 4096 bf16; default rows 1 16 64)
// Against an earlier comm_ar.cu, in the same run (its kernels renamed and
// its functions in a namespace; the "base" rungs):
//   B=$(mktemp --suffix=.cu)
//   git show REV:kernels/comm_ar.cu | sed -e '/^#include/d' -e 's/te_comm_ar_/base_comm_ar_/g' >$B
//   nvcc ... -DFLADDER_BASE="\"$B\"" -o fladder t/gpu/fused_ladder.cu
#include <cuda_runtime.h>
#include "ladder.cuh"
#include <stdint.h>
// the spread kernel's phase clocks (comm_ar.cu's AR_TR): block 0's first
// and last thread, by call number
#define TE_AR_TRACE 1
#define NTR 12
__device__ long long te_ar_trace[64][2][NTR];
__device__ __forceinline__ void te_ar_trace_store(uint64_t k, const long long *t) {
  if (blockIdx.x != 0 || (threadIdx.x != 0 && threadIdx.x != blockDim.x - 1)) return;
  const int w = threadIdx.x == 0 ? 0 : 1;
  for (int i = 0; i < NTR; i++) te_ar_trace[k % 64][w][i] = t[i];
}
// comm_ar.cu's functions in a namespace of their own (its headers outside
// it), so that a base build's like-named ones can sit beside them
#include "common/comm_ar.h"
#include "common/norm.h"
#include "ldst.cuh"
#include <type_traits>
namespace cur {
#include "comm_ar.cu"
}
using namespace cur;
#ifdef FLADDER_BASE
#undef AR_DISPATCH
#undef AR_LAMPORT_KERNEL
#undef AR_FUSED_KERNELS
#undef AR_SPREAD_KERNEL
namespace base {
#include FLADDER_BASE
}
#define BASE_FUSED base::base_comm_ar_lamport_fused_spread
#define BASE_LAM2 base::base_comm_ar_lamport2
#else
#define BASE_FUSED te_comm_ar_lamport_fused_spread
#define BASE_LAM2 te_comm_ar_lamport2
#endif
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXR 8
#define OPS 200
#define H 4096
#define ARM 0x80008000u


template <int CUT>
__global__ void __launch_bounds__(TE_AR_SPREAD_THREADS) spread_cut(const te_ar_params p) {
  __shared__ ar_spread_smem sm;
  ar_pdl_enter();
  ar_fused_spread<BF16, 2, CUT>(p, sm);
}
// a DRAM-bound stand-in for a decode GEMM: n 16-byte words copied
__global__ void __launch_bounds__(512) stream_copy(const uint4 *a, uint4 *b, uint64_t n) {
  for (uint64_t i = blockIdx.x * 512ull + threadIdx.x; i < n; i += gridDim.x * 512ull) b[i] = a[i];
}

enum {
  R_LAM, R_LAM_SHAPE, R_CUT1, R_CUT2, R_CUT3, R_FUSED, R_FUSED_Q, R_FAST, R_FUSED_NOPDL,
  R_LAM_NOPDL, R_COPY, R_COPY_LAM, R_COPY_FUSED_Q, R_FUSED_Q_S2, R_COPY_FUSED_Q_S2, R_BASE_LAM,
  R_BASE_FUSED_Q, R_COPY_BASE_LAM, R_COPY_BASE_FUSED_Q, NRUNG
};
static const char *names[NRUNG] = {
    "lamport2 (library grid)", "lamport2 in the spread kernel's grid",
    "spread: protocol only (cut after the wait)", "  + residual add, residual_out (cut 2)",
    "  + row sum, 1/rms (cut 3)", "  + bf16 out (the library's kernel)",
    "spread, fp8 out + amax (te-demo's)", "fused, not spread (TECOMM_FUSED_SPREAD=0)",
    "spread, bf16 out, PDL off", "lamport2, PDL off", "32 MB copy alone",
    "  copy + lamport2, less the copy", "  copy + spread fp8, less the copy",
    "the other spread, fp8 out + amax", "  copy + the other spread fp8, less the copy",
    "base: lamport2", "base: spread fp8", "  base: copy + lamport2, less the copy",
    "  base: copy + spread fp8, less the copy"};

static const char *trnames[NTR] = {"entry", "set-up read", "granules out", "re-armed", "wait done",
                                   "residual, res_out", "sync 1", "squares", "row sum",
                                   "1/rms, sync 2", "outputs", "amax"};
static int cmpll(const void *a, const void *b) {
  long long x = *(const long long *)a, y = *(const long long *)b;
  return x < y ? -1 : x > y;
}
/* rank 0's phase clocks: the median over the calls of each phase's cycles */
static void trace_print(double ghz) {
  static long long tr[64][2][NTR];
  CK(cudaSetDevice(0));
  CK(cudaMemcpyFromSymbol(tr, te_ar_trace, sizeof tr));
  for (int w = 0; w < 2; w++) {
    printf("        phase clocks, block 0 %s thread (median cycles, ns at %.2f GHz):", w ? "last" : "first", ghz);
    for (int i = 1; i < NTR; i++) {
      long long d[64];
      int nd = 0;
      for (int k = 0; k < 64; k++) {
        int prev = i - 1;
        while (prev > 0 && tr[k][w][prev] == 0) prev--;
        if (tr[k][w][i] && tr[k][w][prev]) d[nd++] = tr[k][w][i] - tr[k][w][prev];
      }
      if (!nd) continue;
      qsort(d, nd, sizeof *d, cmpll);
      printf(" %s %lld (%.0f)", trnames[i], d[nd / 2], (double)d[nd / 2] / ghz);
    }
    printf("\n");
  }
}

static uint16_t bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static float fbf(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static float in_val(int r, uint64_t e) { return (float)(r + 1) * (1.0f + (float)(e % 7) / 8.0f); }
static float res_val(uint64_t e) { return (float)(e % 5) / 4.0f - 0.5f; }
static float gam_val(uint64_t j) { return 1.0f + 0.125f * (float)(j % 5); }

/* Row `row` of the fused call on n ranks, as the library defines it:
 * x = residual_out = round(round(sum over ranks in rank order) +
 * residual_in); each plan thread t's fma chain over its vectors j*T + t
 * (8 elements each, in order); norm.h's tree over the T threads (an xor
 * butterfly in each warp, then one over the warps' sums); 1/rms; out. */
static void ref_fused(int n, uint64_t row, int T, int nv, float *x, float *o) {
  for (uint64_t j = 0; j < H; j++) {
    const uint64_t e = row * H + j;
    float a = fbf(bf16(in_val(0, e)));
    for (int k = 1; k < n; k++) a = te_add_rn(a, fbf(bf16(in_val(k, e))));
    x[j] = te_ar_residual(te_ar_round(a, TE_FP8_DT_BF16), fbf(bf16(res_val(e))), TE_FP8_DT_BF16);
  }
  float part[1024], lane[32];
  for (int t = 0; t < T; t++) {
    float sq = 0.0f;
    for (int j = 0; j < nv; j++) {
      const int vi = j * T + t;
      if (vi >= H / 8) continue;
      for (int k = 0; k < 8; k++) sq = te_fma_rn(x[vi * 8 + k], x[vi * 8 + k], sq);
    }
    part[t] = sq;
  }
  const int W = T > 32 ? T / 32 : 1;
  float wsum[32];
  for (int w = 0; w < W; w++) {
    for (int l = 0; l < 32; l++) lane[l] = w * 32 + l < T ? part[w * 32 + l] : 0.0f;
    for (int off = 16; off >= 1; off >>= 1) {
      float nl[32];
      for (int l = 0; l < 32; l++) nl[l] = te_add_rn(lane[l], lane[l ^ off]);
      memcpy(lane, nl, sizeof lane);
    }
    wsum[w] = lane[0];
  }
  float total = wsum[0];
  if (T > 32) {
    for (int l = 0; l < 32; l++) lane[l] = l < W ? wsum[l] : 0.0f;
    for (int off = 16; off >= 1; off >>= 1) {
      float nl[32];
      for (int l = 0; l < 32; l++) nl[l] = te_add_rn(lane[l], lane[l ^ off]);
      memcpy(lane, nl, sizeof lane);
    }
    total = lane[0];
  }
  const float rs = te_norm_rsigma(te_norm_mean(total, (float)H), 1e-5f);
  for (uint64_t j = 0; j < H; j++)
    o[j] = te_rms_out(x[j], rs, te_norm_gamma(fbf(bf16(gam_val(j))), te_norm_zc(0)));
}

int main(int argc, char **argv) {
  int ndev = 0;
  CK(cudaGetDeviceCount(&ndev));
  int n = argc > 1 ? atoi(argv[1]) : 2;
  if (n != 2 || n > ndev) {
    fprintf(stderr, "fladder: needs 2 GPUs (%d here)\n", ndev);
    return 77;
  }
  unsigned rowsv[8] = {1, 16, 64};
  int nsz = 3;
  if (argc > 2) {
    nsz = 0;
    for (int i = 2; i < argc && nsz < 8; i++) rowsv[nsz++] = (unsigned)atoi(argv[i]);
  }
  if (!ladder_peers(n, "fladder")) return 77;
  const uint64_t maxrows = 128, slot = maxrows * H * 2, bytes_max = slot;
  const uint64_t wsbytes = TE_AR_OFF_LAMBUF + 3 * (uint64_t)n * slot;
  const uint64_t copy_words = (32ull << 20) / 16;
  char *ws[MAXR];
  uint16_t *in[MAXR], *rin[MAXR], *rout[MAXR], *out[MAXR], *gam[MAXR];
  uint8_t *q[MAXR];
  float *qs[MAXR], *qsi[MAXR];
  unsigned *qa[MAXR];
  uint4 *ca[MAXR], *cb[MAXR];
  cudaStream_t st[MAXR];
  cudaEvent_t e0[MAXR], e1[MAXR];
  uint16_t *h = (uint16_t *)malloc(bytes_max);
  for (int i = 0; i < n; i++) {
    CK(cudaSetDevice(i));
    CK(cudaMalloc(&ws[i], wsbytes));
    CK(cudaMalloc(&in[i], bytes_max));
    CK(cudaMalloc(&rin[i], bytes_max));
    CK(cudaMalloc(&rout[i], bytes_max));
    CK(cudaMalloc(&out[i], bytes_max));
    CK(cudaMalloc(&gam[i], H * 2));
    CK(cudaMalloc(&q[i], bytes_max));
    CK(cudaMalloc(&qs[i], 4));
    CK(cudaMalloc(&qsi[i], 4));
    CK(cudaMalloc(&qa[i], 4));
    CK(cudaMalloc(&ca[i], copy_words * 16));
    CK(cudaMalloc(&cb[i], copy_words * 16));
    CK(cudaMemset(ca[i], 0x11, copy_words * 16));
    CK(cudaStreamCreateWithFlags(&st[i], cudaStreamNonBlocking));
    CK(cudaEventCreate(&e0[i]));
    CK(cudaEventCreate(&e1[i]));
    for (uint64_t e = 0; e < bytes_max / 2; e++) h[e] = bf16(in_val(i, e));
    CK(cudaMemcpy(in[i], h, bytes_max, cudaMemcpyHostToDevice));
    for (uint64_t e = 0; e < bytes_max / 2; e++) h[e] = bf16(res_val(e));
    CK(cudaMemcpy(rin[i], h, bytes_max, cudaMemcpyHostToDevice));
    for (uint64_t j = 0; j < H; j++) h[j] = bf16(gam_val(j));
    CK(cudaMemcpy(gam[i], h, H * 2, cudaMemcpyHostToDevice));
    float one = 1.0f;
    CK(cudaMemcpy(qs[i], &one, 4, cudaMemcpyHostToDevice));
  }
  uint32_t *armed = (uint32_t *)malloc(3 * n * slot);
  for (uint64_t i = 0; i < 3 * n * slot / 4; i++) armed[i] = ARM;
  int dev = 0;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  printf("# fused_ladder: %d x %s, hidden %d bf16, %d ops a graph, us per op (the slowest GPU)\n",
         n, prop.name, H, OPS);
  int khz = 0;
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0) != cudaSuccess || khz <= 0) khz = 1980000;
  const double ghz = khz / 1e6;
  double copy_us = 0;
  for (int z = 0; z < nsz; z++) {
    const unsigned rows = rowsv[z];
    if (rows < 1 || rows > maxrows) {
      fprintf(stderr, "fladder: rows 1..%llu\n", (unsigned long long)maxrows);
      return 2;
    }
    const uint64_t count = (uint64_t)rows * H, ngr = count * 2 / 16;
    struct te_norm_plan plan = te_norm_plan_fwd(H, 8);
    /* the library's spread (libtecomm/base/ar_kernels.c), and the other one */
    unsigned spread = TE_AR_SPREAD_THREADS / plan.threads;
    if (spread > (unsigned)plan.nv) spread = (unsigned)plan.nv;
    const unsigned spread_max = spread;
    if (spread > 2 && rows <= TE_AR_SPREAD_FEW_ROWS) spread = 2;
    const unsigned spread_alt = spread == 2 ? spread_max : 2;
    const uint64_t groups = (rows + plan.rows_per_block - 1) / plan.rows_per_block;
    unsigned fgrid = groups > TE_AR_MAX_BLOCKS ? TE_AR_MAX_BLOCKS : (unsigned)groups;
    unsigned lthreads = 128;
    while ((ngr + lthreads - 1) / lthreads > TE_AR_MAX_BLOCKS && lthreads < 512) lthreads *= 2;
    unsigned lgrid = (unsigned)((ngr + lthreads - 1) / lthreads);
    if (lgrid > TE_AR_MAX_BLOCKS) lgrid = TE_AR_MAX_BLOCKS;
    printf("# rows %u (%llu KB): lamport2 %u x %u threads; spread %u x %u threads (plan tpr %d nv %d "
           "rpb %d, spread %u; the other %u)\n",
           rows, (unsigned long long)(count * 2 / 1024), lgrid, lthreads, fgrid,
           plan.threads * spread, plan.tpr, plan.nv, plan.rows_per_block, spread, spread_alt);
    for (int r = 0; r < NRUNG; r++) {
      if (r == R_COPY && z > 0) {
        printf("%6u rows  %-44s %7.2f us\n", rows, names[r], copy_us);
        continue;
      }
      cudaGraphExec_t ge[MAXR];
      for (int i = 0; i < n; i++) {
        CK(cudaSetDevice(i));
        CK(cudaMemset(ws[i], 0, TE_AR_OFF_LAMBUF));
        CK(cudaMemcpy(ws[i] + TE_AR_OFF_LAMBUF, armed, 3 * n * slot, cudaMemcpyHostToDevice));
        CK(cudaMemset(out[i], 0xff, bytes_max));
        CK(cudaMemset(rout[i], 0xff, bytes_max));
        CK(cudaMemset(q[i], 0xff, bytes_max));
        CK(cudaMemset(qa[i], 0, 4));
        static long long zt[64][2][NTR];
        CK(cudaMemcpyToSymbol(te_ar_trace, zt, sizeof zt));
        te_ar_params a = ladder_params(i, n, ws, in[i], out[i], count, slot, 1000000000ull);
        te_ar_params f = a;
        f.out = 0;
        f.res_in = (uint64_t)(uintptr_t)rin[i];
        f.res_out = (uint64_t)(uintptr_t)rout[i];
        f.gamma = (uint64_t)(uintptr_t)gam[i];
        f.fout = (uint64_t)(uintptr_t)out[i];
        f.rows = rows;
        f.hidden = H;
        f.eps = 1e-5f;
        f.fflags = TE_AR_F_FUSED | TE_AR_F_OUT;
        f.tpr = plan.tpr;
        f.nv = plan.nv;
        f.rpb = plan.rows_per_block;
        f.nvec = 8;
        f.spread = (int)spread;
        te_ar_params fq = f;
        fq.fflags = TE_AR_F_FUSED | TE_AR_F_Q | TE_AR_F_AMAX;
        fq.q_data = (uint64_t)(uintptr_t)q[i];
        fq.q_scale = (uint64_t)(uintptr_t)qs[i];
        fq.q_scale_inv = (uint64_t)(uintptr_t)qsi[i];
        fq.q_amax = (uint64_t)(uintptr_t)qa[i];
        fq.q_dtype = TE_FP8_DT_E4M3;
        te_ar_params fa = f;
        fa.spread = 0;
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cudaLaunchConfig_t lc, sc, fc, cc;
        memset(&lc, 0, sizeof lc);
        lc.gridDim = dim3(lgrid);
        lc.blockDim = dim3(lthreads);
        lc.stream = st[i];
        lc.attrs = at;
        lc.numAttrs = r == R_LAM_NOPDL ? 0 : 1;
        sc = lc;
        sc.gridDim = dim3(fgrid);
        sc.blockDim = dim3(plan.threads * spread);
        sc.numAttrs = r == R_FUSED_NOPDL ? 0 : 1;
        fc = sc;
        fc.blockDim = dim3(plan.threads);
        cc = lc;
        cc.gridDim = dim3(132 * 4);
        cc.blockDim = dim3(512);
        cc.numAttrs = 0;
        cudaGraph_t gr;
        CK(cudaStreamBeginCapture(st[i], cudaStreamCaptureModeThreadLocal));
        const int with_copy = r == R_COPY || r == R_COPY_LAM || r == R_COPY_FUSED_Q ||
                              r == R_COPY_FUSED_Q_S2 || r == R_COPY_BASE_LAM ||
                              r == R_COPY_BASE_FUSED_Q;
        cudaLaunchConfig_t sc2 = sc;
        te_ar_params fq2 = fq;
        sc2.blockDim = dim3(plan.threads * spread_alt);
        fq2.spread = (int)spread_alt;
        for (int k = 0; k < OPS; k++) {
          if (with_copy) CK(cudaLaunchKernelEx(&cc, stream_copy, ca[i], cb[i], copy_words));
          switch (r) {
            case R_LAM: case R_LAM_NOPDL: case R_COPY_LAM:
              CK(cudaLaunchKernelEx(&lc, te_comm_ar_lamport2, a));
              break;
            case R_LAM_SHAPE: CK(cudaLaunchKernelEx(&sc, te_comm_ar_lamport2, a)); break;
            case R_CUT1: CK(cudaLaunchKernelEx(&sc, spread_cut<1>, f)); break;
            case R_CUT2: CK(cudaLaunchKernelEx(&sc, spread_cut<2>, f)); break;
            case R_CUT3: CK(cudaLaunchKernelEx(&sc, spread_cut<3>, f)); break;
            case R_FUSED: case R_FUSED_NOPDL:
              CK(cudaLaunchKernelEx(&sc, te_comm_ar_lamport_fused_spread, f));
              break;
            case R_FUSED_Q: case R_COPY_FUSED_Q:
              CK(cudaLaunchKernelEx(&sc, te_comm_ar_lamport_fused_spread, fq));
              break;
            case R_FAST: CK(cudaLaunchKernelEx(&fc, te_comm_ar_lamport_fused, fa)); break;
            case R_FUSED_Q_S2: case R_COPY_FUSED_Q_S2:
              CK(cudaLaunchKernelEx(&sc2, te_comm_ar_lamport_fused_spread, fq2));
              break;
            case R_BASE_LAM: case R_COPY_BASE_LAM: CK(cudaLaunchKernelEx(&lc, BASE_LAM2, a)); break;
            case R_BASE_FUSED_Q: case R_COPY_BASE_FUSED_Q:
              CK(cudaLaunchKernelEx(&sc, BASE_FUSED, fq));
              break;
            default: break;
          }
        }
        CK(cudaStreamEndCapture(st[i], &gr));
        CK(cudaGraphInstantiate(&ge[i], gr, 0));
        CK(cudaGraphDestroy(gr));
      }
      double best = ladder_time(n, ge, st, e0, e1);
      double us = best * 1000.0 / OPS;
      if (r == R_COPY) copy_us = us;
      if (r == R_COPY_LAM || r == R_COPY_FUSED_Q || r == R_COPY_FUSED_Q_S2 || r == R_COPY_BASE_LAM ||
          r == R_COPY_BASE_FUSED_Q)
        us -= copy_us;
      /* the results, bit for bit: plain sums; the fused rungs against
       * ref_fused (the library's formulas in its order, on the host) */
      long bad = 0, err = 0;
      for (int i = 0; i < n; i++) {
        CK(cudaSetDevice(i));
        uint32_t ew = 0;
        CK(cudaMemcpy(&ew, ws[i] + TE_AR_OFF_ERR, 4, cudaMemcpyDeviceToHost));
        err += ew != 0;
        int plain = r == R_LAM || r == R_LAM_SHAPE || r == R_LAM_NOPDL || r == R_COPY_LAM ||
                    r == R_BASE_LAM || r == R_COPY_BASE_LAM;
        int normed = r == R_FUSED || r == R_FAST || r == R_FUSED_NOPDL;
        int q8 = r == R_FUSED_Q || r == R_COPY_FUSED_Q || r == R_FUSED_Q_S2 || r == R_COPY_FUSED_Q_S2 ||
                 r == R_BASE_FUSED_Q || r == R_COPY_BASE_FUSED_Q;
        if (plain) {
          CK(cudaMemcpy(h, out[i], count * 2, cudaMemcpyDeviceToHost));
          for (uint64_t e = 0; e < count; e++) {
            float a = fbf(bf16(in_val(0, e)));
            for (int k = 1; k < n; k++) a = te_add_rn(a, fbf(bf16(in_val(k, e))));
            bad += h[e] != te_f32_to_bf16(a);
          }
        } else if (normed || q8) {
          uint16_t *ro = (uint16_t *)malloc(count * 2);
          uint8_t *qh = (uint8_t *)malloc(count);
          unsigned amax = 0, want_amax = 0;
          CK(cudaMemcpy(ro, rout[i], count * 2, cudaMemcpyDeviceToHost));
          if (normed) CK(cudaMemcpy(h, out[i], count * 2, cudaMemcpyDeviceToHost));
          else CK(cudaMemcpy(qh, q[i], count, cudaMemcpyDeviceToHost));
          CK(cudaMemcpy(&amax, qa[i], 4, cudaMemcpyDeviceToHost));
          static float x[H], o[H];
          for (uint64_t row = 0; row < rows; row++) {
            ref_fused(n, row, plan.tpr, plan.nv, x, o);
            for (uint64_t j = 0; j < H; j++) {
              const uint64_t e = row * H + j;
              bad += ro[e] != te_f32_to_bf16(x[j]);
              if (normed) bad += h[e] != te_f32_to_bf16(o[j]);
              else bad += qh[e] != te_f32_to_fp8(te_mul_rn(o[j], 1.0f), TE_FP8_DT_E4M3);
              if (te_abs_bits(o[j]) > want_amax) want_amax = te_abs_bits(o[j]);
            }
          }
          if (q8) bad += amax != want_amax;
          free(ro);
          free(qh);
        }
        CK(cudaGraphExecDestroy(ge[i]));
      }
      printf("%6u rows  %-44s %7.2f us%s%s\n", rows, names[r], us, err ? "  TIMEOUT" : "",
             bad ? "  WRONG" : "");
      if (r == R_CUT3 || r == R_FUSED_Q || r == R_COPY_FUSED_Q)
        trace_print(ghz);
      fflush(stdout);
    }
  }
  return 0;
}
