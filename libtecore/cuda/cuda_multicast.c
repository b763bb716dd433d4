/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_multicast.c -- the cuda backend's NVLink multicast objects (the
 * NVLS allreduce path): granularity, create, add device, bind/unbind
 * memory, release, POSIX-fd export/import.
 *
 * Where NCCL_NVLS_ENABLE=0 or TECOMM_NVLS_ENABLE=0 is set, multicast is
 * refused (TECORE_ERR_DISABLED) before any driver call: on the machines
 * that set it, creating a multicast object can take the host's GPUs out of
 * service.  The entry points arrived with driver 12.1; an older driver
 * answers TECORE_ERR_NOT_SUPPORTED through TE_CU. */
#include "cuda_backend.h"

/* TECORE_ERR_DISABLED with the variable that forbids multicast, or success
 * (the rule lives in multicast_guard.c). */
static tecore_result_t mc_allowed(const char *op) { return te_multicast_allowed(op); }

/* Always exportable as a POSIX fd: the creating rank hands the object to
 * its local peers that way (tecore_mc_create takes no flags for it). */
static void mc_prop(CUmulticastObjectProp *prop, size_t bytes, int ndevices) {
  *prop = (CUmulticastObjectProp){0};
  prop->numDevices = (unsigned)ndevices;
  prop->size = bytes;
  prop->handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop->flags = 0;
}

tecore_result_t te_cuda_mc_granularity(size_t bytes, int ndevices, size_t *granularity) {
  CUmulticastObjectProp prop;
  TE_CHECK(mc_allowed("multicast granularity"));
  TE_CHECK(te_cuda_need_ctx());
  mc_prop(&prop, bytes, ndevices);
  /* The minimum is what object sizes and bind offsets must be multiples
   * of; the recommended one can be hundreds of MiB, too coarse for the
   * symmetric pool's segments. */
  TE_CHECK(TE_CU(cuMulticastGetGranularity, granularity, &prop, CU_MULTICAST_GRANULARITY_MINIMUM));
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_mc_create(size_t bytes, int ndevices, unsigned flags,
                                  tecore_mc_handle_t *mc) {
  CUmulticastObjectProp prop;
  CUmemGenericAllocationHandle h = 0;
  /* First, before the driver is touched at all. */
  TE_CHECK(mc_allowed("multicast create"));
  TE_CHECK(te_cuda_need_ctx());
  mc_prop(&prop, bytes, ndevices);
  TE_CHECK(TE_CU(cuMulticastCreate, &h, &prop));
  *mc = (tecore_mc_handle_t)h;
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_mc_add_device(tecore_mc_handle_t mc, int ordinal) {
  CUdevice dev;
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(te_cuda_device(ordinal, &dev));
  TE_CHECK(TE_CU(cuMulticastAddDevice, (CUmemGenericAllocationHandle)mc, dev));
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_mc_bind_mem(tecore_mc_handle_t mc, size_t mc_offset,
                                    tecore_vmm_handle_t mem, size_t mem_offset, size_t bytes) {
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuMulticastBindMem, (CUmemGenericAllocationHandle)mc, mc_offset,
                 (CUmemGenericAllocationHandle)mem, mem_offset, bytes, 0));
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_mc_unbind(tecore_mc_handle_t mc, int ordinal, size_t mc_offset,
                                  size_t bytes) {
  CUdevice dev;
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(te_cuda_device(ordinal, &dev));
  TE_CHECK(TE_CU(cuMulticastUnbind, (CUmemGenericAllocationHandle)mc, dev, mc_offset, bytes));
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_mc_release(tecore_mc_handle_t mc) {
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuMemRelease, (CUmemGenericAllocationHandle)mc));
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_mc_export_fd(tecore_mc_handle_t mc, int *fd) {
  int out = -1;
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuMemExportToShareableHandle, &out, (CUmemGenericAllocationHandle)mc,
                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  *fd = out;
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_mc_import_fd(int fd, tecore_mc_handle_t *mc) {
  CUmemGenericAllocationHandle h = 0;
  /* A rank of a job where multicast is disabled takes no part either. */
  TE_CHECK(mc_allowed("multicast import"));
  TE_CHECK(te_cuda_need_ctx());
  /* The fd is passed by value and stays the caller's. */
  TE_CHECK(TE_CU(cuMemImportFromShareableHandle, &h, (void *)(uintptr_t)fd,
                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  *mc = (tecore_mc_handle_t)h;
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_mc_members(tecore_devptr_t mc_va, tecore_devptr_t *members, int max,
                                   int *count) {
  (void)mc_va;
  (void)members;
  (void)max;
  (void)count;
  return TE_ERR(TECORE_ERR_NOT_SUPPORTED,
                "tecore_mc_members: on cuda multimem instructions resolve multicast addresses");
}
