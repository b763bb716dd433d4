/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_device.c -- the cuda backend's devices and contexts: count,
 * properties (cuDeviceGetAttribute), peer access and NVLink count, and
 * primary-context retain/release/current.
 *
 * Contexts are always primary contexts, so a context made here is the one
 * the CUDA runtime (and so cuBLASLt, NCCL, the caller's own code) uses. */
#include "cuda_backend.h"

#include <stdio.h>
#include <string.h>

tecore_result_t te_cuda_device_count(int *count) {
  TE_CHECK(TE_CU(cuDeviceGetCount, count));
  return TECORE_SUCCESS;
}

static tecore_result_t attr(CUdevice dev, CUdevice_attribute a, int *v) {
  *v = 0;
  TE_CHECK(TE_CU(cuDeviceGetAttribute, v, a, dev));
  return TECORE_SUCCESS;
}

/* Attributes an older driver may not know (it answers INVALID_VALUE):
 * 0 then, and no error, since "unknown" is what props reports with 0. */
static int attr_or_zero(CUdevice dev, CUdevice_attribute a) {
  int v = 0;
  if (te_cu.p_cuDeviceGetAttribute(&v, a, dev) != CUDA_SUCCESS) v = 0;
  return v;
}

tecore_result_t te_cuda_device_props(int ordinal, struct tecore_device_props *p) {
  CUdevice dev;
  TE_CHECK(te_cuda_device(ordinal, &dev));
  memset(p, 0, sizeof *p);
  p->ordinal = ordinal;
  TE_CHECK(TE_CU(cuDeviceGetName, p->name, (int)sizeof p->name, dev));
  p->name[sizeof p->name - 1] = '\0';
  TE_CHECK(attr(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &p->cc_major));
  TE_CHECK(attr(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &p->cc_minor));
  TE_CHECK(attr(dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &p->sm_count));
  TE_CHECK(attr(dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &p->max_threads_per_block));
  TE_CHECK(attr(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                &p->max_shared_per_block));
  TE_CHECK(attr(dev, CU_DEVICE_ATTRIBUTE_WARP_SIZE, &p->warp_size));
  TE_CHECK(attr(dev, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, &p->l2_bytes));
  TE_CHECK(attr(dev, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, &p->pci_domain));
  TE_CHECK(attr(dev, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, &p->pci_bus));
  TE_CHECK(attr(dev, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, &p->pci_device));
  TE_CHECK(attr(dev, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, &p->unified_addressing));
  TE_CHECK(TE_CU(cuDeviceTotalMem, &p->total_mem, dev));
  /* Clocks and bus width are informational (and deprecated in newer
   * toolkits' runtime structs): 0 when the driver stops reporting them. */
  p->clock_khz = attr_or_zero(dev, CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
  p->mem_clock_khz = attr_or_zero(dev, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
  p->mem_bus_width = attr_or_zero(dev, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
  p->vmm_supported = attr_or_zero(dev, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED);
  p->posix_fd_handles =
      attr_or_zero(dev, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED);
  /* Multicast also needs the driver's multicast entry points (12.1+). */
  p->multicast_supported = attr_or_zero(dev, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED) &&
                           te_cu.p_cuMulticastCreate != NULL;
  /* CUDA 12 enables stream memory ops everywhere and reports 64-bit
   * support in a new attribute; the _V1 one is the pre-12 answer. */
  p->stream_mem_ops = attr_or_zero(dev, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS);
  if (!p->stream_mem_ops)
    p->stream_mem_ops = attr_or_zero(dev, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1);
  p->stream_mem_ops = p->stream_mem_ops && te_cu.p_cuStreamWriteValue64 != NULL &&
                      te_cu.p_cuStreamWaitValue64 != NULL;
  /* dma-buf export (cuMemGetHandleForAddressRange): GPUDirect RDMA
   * without the nvidia-peermem module */
  p->dma_buf = attr_or_zero(dev, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED);
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_device_peer(int a, int b, int *can, int *link) {
  CUdevice da, db;
  TE_CHECK(te_cuda_device(a, &da));
  TE_CHECK(te_cuda_device(b, &db));
  /* A device is not its own peer (the driver and the runtime say 0). */
  if (a == b) {
    *can = 0;
    *link = 0;
    return TECORE_SUCCESS;
  }
  TE_CHECK(TE_CU(cuDeviceCanAccessPeer, can, da, db));
  char bus_a[32];
  int dom_b, bus_b, dev_b;
  TE_CHECK(TE_CU(cuDeviceGetPCIBusId, bus_a, (int)sizeof bus_a, da));
  TE_CHECK(attr(db, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, &dom_b));
  TE_CHECK(attr(db, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, &bus_b));
  TE_CHECK(attr(db, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, &dev_b));
  *link = te_cuda_nvlink_count(bus_a, dom_b, bus_b, dev_b);
  return TECORE_SUCCESS;
}

/* ---- contexts ------------------------------------------------------------- */

tecore_result_t te_cuda_ctx_create(int ordinal, tecore_ctx_t *ctx) {
  CUdevice dev;
  CUcontext c = NULL;
  tecore_result_t res;
  TE_CHECK(te_cuda_device(ordinal, &dev));
  (void)te_cuda_sync_policy(dev);
  TE_CHECK(TE_CU(cuDevicePrimaryCtxRetain, &c, dev));
  TE_CHECK_GOTO(TE_CU(cuCtxSetCurrent, c), res, fail);
  *ctx = c;
  return TECORE_SUCCESS;
fail:
  (void)TE_CU(cuDevicePrimaryCtxRelease, dev);
  return res;
}

tecore_result_t te_cuda_ctx_destroy(tecore_ctx_t ctx) {
  CUcontext cur = NULL, popped = NULL;
  CUdevice dev;
  tecore_result_t res;
  /* The device behind ctx: make it current for a moment. */
  TE_CHECK(TE_CU(cuCtxPushCurrent, ctx));
  res = TE_CU(cuCtxGetDevice, &dev);
  TE_CHECK(TE_CU(cuCtxPopCurrent, &popped));
  TE_CHECK(res);
  TE_CHECK(TE_CU(cuDevicePrimaryCtxRelease, dev));
  /* When that was the last reference the context is gone; a thread that
   * still had it current would carry a dangling context, so drop it here
   * (the next op falls back to the implicit context). */
  unsigned flags = 0;
  int active = 1;
  TE_CHECK(TE_CU(cuDevicePrimaryCtxGetState, dev, &flags, &active));
  TE_CHECK(TE_CU(cuCtxGetCurrent, &cur));
  if (!active && cur == ctx) TE_CHECK(TE_CU(cuCtxSetCurrent, NULL));
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_ctx_set_current(tecore_ctx_t ctx) {
  TE_CHECK(TE_CU(cuCtxSetCurrent, ctx));
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_ctx_get_current(tecore_ctx_t *ctx) {
  CUcontext c = NULL;
  TE_CHECK(TE_CU(cuCtxGetCurrent, &c));
  *ctx = c;
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_ctx_synchronize(void) {
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuCtxSynchronize));
  return TECORE_SUCCESS;
}

/* tecore_fini: the work queued before fini finishes before it returns, as
 * on vdev (check_fini's first test saw a copy still in flight on an H100);
 * the driver's objects are left to process exit. */
tecore_result_t te_cuda_fini(int ready) {
  if (ready) (void)te_cuda_ctx_synchronize();
  return TECORE_SUCCESS;
}
