// SPDX-License-Identifier: Apache-2.0
// graph_fire.cu -- the one kernel of a device-launch graph
// (tecore_graph_launch_device): it launches an executable graph from the
// device as the tail of its own graph, so the host queues one kernel node
// whatever the size of the graph it starts.  A tail launch runs after the
// launching graph ends, and the stream sees the pair end only when the
// tail has, so the work queued after it stays ordered behind the whole
// graph.
//
// Built apart from the other kernels: relocatable device code linked with
// the device runtime (cudadevrt), machine code only (kernels/Makefile.inc).
// A failed launch (the graph not uploaded, a launch of it still running)
// leaves the CUDA error code in *status, pinned host memory mapped for the
// device, which the host reads and clears before the next launch; a
// success writes nothing, so a failure is never overwritten unread.
#include <cuda_runtime.h>

extern "C" __global__ void te_graph_fire(cudaGraphExec_t exec, unsigned *status) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  cudaError_t e = cudaGraphLaunch(exec, cudaStreamGraphTailLaunch);
  if (e != cudaSuccess) *(volatile unsigned *)status = (unsigned)e;
}

// te_graph_chain: the launcher of a graph chain (tecore_graph_chain_create;
// the protocol is in kernels/common/graph_chain.h).  One thread; it waits
// for the host's next ticket with __nanosleep backoff (up to 1 us between
// reads of host memory), reading the global timer for its timeout.
#include "common/graph_chain.h"

static __device__ __forceinline__ uint64_t chain_now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

extern "C" __global__ void te_graph_chain(te_chain_ctl *c) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const uint64_t r = c->ran;
  c->runs = c->runs + 1;
  if (r) {   // the graph of ticket r ended before this run began
    __threadfence_system();
    c->done = r;
  }
  __threadfence_system();
  const uint64_t t0 = chain_now_ns();
  unsigned ns = 32;
  for (;;) {
    if (c->go > r) break;
    if (c->stop || chain_now_ns() - t0 > c->timeout_ns) {
      c->ended = 1;
      __threadfence_system();
      if (c->go > r) {   // queued while we decided: take it
        c->ended = 0;
        __threadfence_system();
        break;
      }
      if (!c->stop) c->status = TE_CHAIN_TIMED_OUT;
      __threadfence_system();
      c->gone = 1;
      __threadfence_system();
      return;
    }
    __nanosleep(ns);
    if (ns < 1024) ns *= 2;
  }
  const uint64_t t = r + 1;
  const uint32_t w = c->which[t % TE_CHAIN_RING];
  unsigned err = 0;
  if (w >= c->nexec) {
    err = TE_CHAIN_BAD_INDEX;
  } else {
    cudaError_t e = cudaGraphLaunch((cudaGraphExec_t)c->exec[w], cudaStreamGraphTailLaunch);
    if (e == cudaSuccess) e = cudaGraphLaunch(cudaGetCurrentGraphExec(), cudaStreamGraphTailLaunch);
    err = (unsigned)e;
  }
  if (err) {
    c->status = err;
    __threadfence_system();
    c->ended = 1;
    c->gone = 1;
    __threadfence_system();
    return;
  }
  c->ran = t;
}
