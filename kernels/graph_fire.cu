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
