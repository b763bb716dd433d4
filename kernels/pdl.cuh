// SPDX-License-Identifier: Apache-2.0
// pdl.cuh -- the entry of a kernel that libtecore may launch with
// programmatic dependent launch (TECORE_LAUNCH_PDL; te_kernel_launch_pdl in
// libtecore/device/kernel.c, TECORE_PDL).
//
// Launched so, a grid may be placed on the GPU while the stream's previous
// kernel still runs.  te_pdl_enter() is therefore the first statement of
// every such kernel, before any load or store of global memory (only the
// kernel parameters, in the constant bank, come before it):
//  - griddepcontrol.wait returns once the previous grid has completed and
//    its memory is visible.  Every block runs it, with no early return
//    before it, so this grid cannot complete before the previous one: a
//    grid that waits on this one therefore also waits, transitively, on
//    every grid before it.
//  - griddepcontrol.launch_dependents then lets the next grid launch once
//    every block of this one has run it (that is, once the last of them
//    is placed): the next grid's launch, block placement and parameter
//    set-up overlap this grid's tail instead of following it.  It parks
//    in its own wait, so it never reads a partial result.
// Without the launch attribute (vdev, older GPUs, TECORE_PDL=0) both
// instructions return at once; below sm_90 they are not emitted.
#ifndef TE_KERNELS_PDL_CUH
#define TE_KERNELS_PDL_CUH

__device__ __forceinline__ void te_pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

#endif
