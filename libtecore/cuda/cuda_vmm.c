/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_vmm.c -- the cuda backend's virtual memory management: physical
 * allocations on the current device (cuMemCreate, pinned, optionally
 * exportable as a POSIX fd), address reservations, map/unmap, access for a
 * device, and the fd export/import that libtecomm's symmetric pool sends
 * between local ranks over SCM_RIGHTS. */
#include "cuda_backend.h"

/* The allocation properties for physical memory on dev. */
static void vmm_prop(CUmemAllocationProp *prop, CUdevice dev, int posix_fd, int fabric) {
  *prop = (CUmemAllocationProp){0};
  prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop->location.id = (int)dev;
  prop->requestedHandleTypes = (CUmemAllocationHandleType)(
      (posix_fd ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : 0) |
      (fabric ? CU_MEM_HANDLE_TYPE_FABRIC : 0));
}

tecore_result_t te_cuda_vmm_granularity(size_t *granularity, int recommended) {
  CUdevice dev;
  CUmemAllocationProp prop;
  int posix_fd = 0;
  TE_CHECK(te_cuda_current_device(&dev));
  /* Ask with the exportable handle type when the device has it, so the
   * answer holds for allocations created with TECORE_VMM_EXPORT_POSIX_FD. */
  TE_CHECK(TE_CU(cuDeviceGetAttribute, &posix_fd,
                 CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev));
  vmm_prop(&prop, dev, posix_fd, 0);
  TE_CHECK(TE_CU(cuMemGetAllocationGranularity, granularity, &prop,
                 recommended ? CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
                             : CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_vmm_reserve(size_t bytes, size_t align, tecore_devptr_t *va) {
  CUdeviceptr p = 0;
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuMemAddressReserve, &p, bytes, align, 0, 0));
  *va = (tecore_devptr_t)p;
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_vmm_free_va(tecore_devptr_t va, size_t bytes) {
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuMemAddressFree, (CUdeviceptr)va, bytes));
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_vmm_create(size_t bytes, unsigned flags, tecore_vmm_handle_t *handle) {
  CUdevice dev;
  CUmemAllocationProp prop;
  CUmemGenericAllocationHandle h = 0;
  TE_CHECK(te_cuda_current_device(&dev));
  if (flags & TECORE_VMM_EXPORT_FABRIC) TE_CHECK(te_cuda_fabric_supported(dev));
  vmm_prop(&prop, dev, (flags & TECORE_VMM_EXPORT_POSIX_FD) != 0,
           (flags & TECORE_VMM_EXPORT_FABRIC) != 0);
  TE_CHECK(TE_CU(cuMemCreate, &h, bytes, &prop, 0));
  *handle = (tecore_vmm_handle_t)h;
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_vmm_release(tecore_vmm_handle_t handle) {
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuMemRelease, (CUmemGenericAllocationHandle)handle));
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_vmm_map(tecore_devptr_t va, size_t bytes, tecore_vmm_handle_t handle,
                                size_t offset) {
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuMemMap, (CUdeviceptr)va, bytes, offset, (CUmemGenericAllocationHandle)handle,
                 0));
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_vmm_unmap(tecore_devptr_t va, size_t bytes) {
  TE_CHECK(te_cuda_need_ctx());
  /* cuMemUnmap does not wait for queued work that still reads or writes
   * the range (seen on an H100: a queued memset then faulted with
   * CUDA_ERROR_ILLEGAL_ADDRESS); tecore_vmm_unmap promises, as
   * tecore_mem_free does, that the range outlives the work queued before
   * it, so the context drains first.  Unmapping is rare; the cost is one
   * synchronize. */
  TE_CHECK(te_cuda_ctx_synchronize());
  TE_CHECK(TE_CU(cuMemUnmap, (CUdeviceptr)va, bytes));
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_vmm_set_access(tecore_devptr_t va, size_t bytes, int ordinal) {
  CUdevice dev;
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(te_cuda_device(ordinal, &dev));
  CUmemAccessDesc desc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = (int)dev},
                          .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  TE_CHECK(TE_CU(cuMemSetAccess, (CUdeviceptr)va, bytes, &desc, 1));
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_vmm_export_fd(tecore_vmm_handle_t handle, int *fd) {
  int out = -1;
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuMemExportToShareableHandle, &out, (CUmemGenericAllocationHandle)handle,
                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  *fd = out;
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_vmm_import_fd(int fd, tecore_vmm_handle_t *handle) {
  CUmemGenericAllocationHandle h = 0;
  TE_CHECK(te_cuda_need_ctx());
  /* The fd travels by value inside the pointer; the driver does not take
   * ownership of it, so it stays the caller's to close. */
  TE_CHECK(TE_CU(cuMemImportFromShareableHandle, &h, (void *)(uintptr_t)fd,
                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  *handle = (tecore_vmm_handle_t)h;
  return TECORE_SUCCESS;
}
