// SPDX-License-Identifier: Apache-2.0
// ladder.cuh -- what t/gpu/lamport_ladder.cu and t/gpu/fused_ladder.cu
// share: the CUDA error check, peer access between every pair of the
// first n GPUs, a plain bf16 Lamport call's parameters, and the timing of
// one graph a GPU launched together.
#ifndef TE_T_GPU_LADDER_CUH
#define TE_T_GPU_LADDER_CUH
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>
#include "common/comm_ar.h"
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));      \
      exit(1);                                                                                 \
    }                                                                                          \
  } while (0)

// Peer access from every GPU to every other of the first n; false (after
// a message) when a pair has none.
static bool ladder_peers(int n, const char *who) {
  for (int i = 0; i < n; i++) {
    CK(cudaSetDevice(i));
    for (int j = 0; j < n; j++)
      if (j != i) {
        int ok = 0;
        CK(cudaDeviceCanAccessPeer(&ok, i, j));
        if (!ok) {
          fprintf(stderr, "%s: no peer access %d -> %d\n", who, i, j);
          return false;
        }
        CK(cudaDeviceEnablePeerAccess(j, 0));
      }
  }
  return true;
}

// The library's parameters of rank's plain bf16 sum of count elements
// from in to out over the workspaces ws[0 .. n-1] (Lamport slots of slot
// bytes).
static te_ar_params ladder_params(int rank, int n, char *const *ws, const void *in, void *out,
                                  uint64_t count, uint64_t slot, uint64_t timeout_ns) {
  te_ar_params a;
  memset(&a, 0, sizeof a);
  for (int j = 0; j < n; j++) a.ws[j] = (uint64_t)(uintptr_t)ws[j];
  a.in[rank] = (uint64_t)(uintptr_t)in;
  a.out = (uint64_t)(uintptr_t)out;
  a.count = count;
  a.timeout_ns = timeout_ns;
  a.lam_slot = slot;
  a.rank = rank;
  a.nranks = n;
  a.dtype = TE_FP8_DT_BF16;
  a.op = TE_AR_SUM;
  a.vec = 8;
  return a;
}

// Graph ge[i] launched on stream st[i] of every GPU i < n, six times: the
// best (after the first, the warm-up) of the slowest GPU's time, in ms.
static double ladder_time(int n, cudaGraphExec_t *ge, cudaStream_t *st, cudaEvent_t *e0,
                          cudaEvent_t *e1) {
  double best = 1e30;
  for (int rep = 0; rep < 6; rep++) {
    for (int i = 0; i < n; i++) {
      CK(cudaSetDevice(i));
      CK(cudaEventRecord(e0[i], st[i]));
      CK(cudaGraphLaunch(ge[i], st[i]));
      CK(cudaEventRecord(e1[i], st[i]));
    }
    double worst = 0;
    for (int i = 0; i < n; i++) {
      CK(cudaSetDevice(i));
      CK(cudaEventSynchronize(e1[i]));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0[i], e1[i]));
      if (ms > worst) worst = ms;
    }
    if (rep > 0 && worst < best) best = worst;
  }
  return best;
}
#endif
