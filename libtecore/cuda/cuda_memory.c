/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_memory.c -- the cuda backend's memory: device allocations, pinned
 * host memory (allocated or registered, always mapped and portable),
 * copies (unified addressing: host pointers pass as device addresses)
 * and 8/16/32-bit memsets, all in the current (or implicit) context; and
 * the address-range check of TECORE_CUDA_CHECK. */
#include "cuda_backend.h"
#include <stdio.h>

tecore_result_t te_cuda_mem_alloc(size_t bytes, tecore_devptr_t *dptr) {
  CUdeviceptr p = 0;
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuMemAlloc, &p, bytes));
  *dptr = (tecore_devptr_t)p;
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_mem_free(tecore_devptr_t dptr) {
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuMemFree, (CUdeviceptr)dptr));
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_mem_info(size_t *free_bytes, size_t *total_bytes) {
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuMemGetInfo, free_bytes, total_bytes));
  return TECORE_SUCCESS;
}

/* The driver's address range of ptr (one call for both attributes).
 * cuPointerGetAttributes answers an address it does not know with the
 * attributes' null values, not an error: a range of 0 bytes.  For VMM
 * memory the range is the reservation (cuMemAddressReserve), which may be
 * larger than what is mapped; the range only ever errs on the side of
 * accepting. */
tecore_result_t te_cuda_mem_range(tecore_devptr_t ptr, tecore_devptr_t *base, size_t *bytes) {
  CUpointer_attribute attrs[2] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                  CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  CUdeviceptr b = 0;
  size_t n = 0;
  void *data[2] = {&b, &n};
  TE_CHECK(te_cuda_need_ctx());
  if (!te_cu.p_cuPointerGetAttributes ||
      te_cu.p_cuPointerGetAttributes(2, attrs, data, (CUdeviceptr)ptr) != CUDA_SUCCESS || !b ||
      (tecore_devptr_t)b > ptr || ptr - (tecore_devptr_t)b >= n)
    b = 0, n = 0;
  *base = (tecore_devptr_t)b;
  *bytes = n;
  return TECORE_SUCCESS;
}

/* Where a kernel on the current device reaches [ptr, ptr + bytes): one
 * cuPointerGetAttributes call, which answers an address it does not know
 * (pageable host memory) with null values instead of an error. */
tecore_result_t te_cuda_mem_kernel_addr(tecore_devptr_t ptr, size_t bytes,
                                        tecore_devptr_t *kaddr, int *host) {
  CUpointer_attribute attrs[6] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                  CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
                                  CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                  CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                  CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                  CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  unsigned type = 0, managed = 0;
  CUdeviceptr dp = 0, start = 0;
  int ordinal = -1;
  size_t size = 0;
  void *data[6] = {&type, &dp, &ordinal, &managed, &start, &size};
  CUdevice dev = 0;
  *kaddr = 0;
  *host = 0;
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(te_cuda_current_device(&dev));
  if (!te_cu.p_cuPointerGetAttributes ||
      te_cu.p_cuPointerGetAttributes(6, attrs, data, (CUdeviceptr)ptr) != CUDA_SUCCESS)
    return TECORE_SUCCESS;
  if (managed || !dp || !start || ptr < start || bytes > size || ptr - start > size - bytes)
    return TECORE_SUCCESS;
  if (type == CU_MEMORYTYPE_DEVICE && ordinal == (int)dev) *kaddr = (tecore_devptr_t)dp;
  else if (type == CU_MEMORYTYPE_HOST) *kaddr = (tecore_devptr_t)dp, *host = 1;
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_mem_alloc_host(size_t bytes, void **ptr) {
  void *p = NULL;
  TE_CHECK(te_cuda_need_ctx());
  /* PORTABLE: pinned for every context, not only the current one;
   * DEVICEMAP: kernels and stream memory ops can reach it. */
  TE_CHECK(TE_CU(cuMemHostAlloc, &p, bytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
  *ptr = p;
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_mem_free_host(void *ptr) {
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuMemFreeHost, ptr));
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_mem_host_register(void *ptr, size_t bytes, unsigned flags) {
  unsigned cu_flags = CU_MEMHOSTREGISTER_PORTABLE;
  if (flags & TECORE_HOST_REGISTER_MAPPED) cu_flags |= CU_MEMHOSTREGISTER_DEVICEMAP;
  if (flags & TECORE_HOST_REGISTER_READONLY) cu_flags |= CU_MEMHOSTREGISTER_READ_ONLY;
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuMemHostRegister, ptr, bytes, cu_flags));
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_mem_host_unregister(void *ptr) {
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuMemHostUnregister, ptr));
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_mem_host_device_ptr(void *host, tecore_devptr_t *dptr) {
  CUdeviceptr p = 0;
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuMemHostGetDevicePointer, &p, host, 0));
  *dptr = (tecore_devptr_t)p;
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_memcpy_async(tecore_devptr_t dst, tecore_devptr_t src, size_t bytes,
                                     tecore_stream_t stream) {
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuMemcpyAsync, (CUdeviceptr)dst, (CUdeviceptr)src, bytes, stream));
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_memcpy_sync(tecore_devptr_t dst, tecore_devptr_t src, size_t bytes) {
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuMemcpy, (CUdeviceptr)dst, (CUdeviceptr)src, bytes));
  /* cuMemcpy from pageable host memory returns once the bytes are staged,
   * and a device-to-device one returns at once: the DMA may still be
   * running, unordered with non-blocking streams and with peers reading
   * the memory.  tecore_memcpy promises a finished copy, so wait for the
   * legacy stream the copy went to. */
  TE_CHECK(TE_CU(cuStreamSynchronize, CU_STREAM_LEGACY));
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_memset_async(tecore_devptr_t dst, uint32_t value, unsigned elem_size,
                                     size_t count, tecore_stream_t stream) {
  TE_CHECK(te_cuda_need_ctx());
  switch (elem_size) {
  case 1: TE_CHECK(TE_CU(cuMemsetD8Async, (CUdeviceptr)dst, (unsigned char)value, count, stream));
    break;
  case 2:
    TE_CHECK(TE_CU(cuMemsetD16Async, (CUdeviceptr)dst, (unsigned short)value, count, stream));
    break;
  case 4: TE_CHECK(TE_CU(cuMemsetD32Async, (CUdeviceptr)dst, value, count, stream)); break;
  default:
    return TE_ERR(TECORE_ERR_INVALID, "memset: element size %u is not 1, 2 or 4", elem_size);
  }
  return TECORE_SUCCESS;
}

/* ---- the memory checks of the layers above (dev_check.c) ---- */

TE_PARAM_INT(cuda_check, "TECORE_CUDA_CHECK", 0, 0, 1,
             "1: under cuda, every raw pointer and tensor buffer a libtecore function is given "
             "is looked up in the driver's address ranges (one query per pointer per call) and "
             "a range past its allocation, or memory the driver does not know, fails the call "
             "with TECORE_ERR_ILLEGAL_ADDRESS; 0 (default): the GPU reports what it faults on")

/* Off by default: the query costs host time on every call. */
tecore_result_t te_cuda_checks_on(int *on) {
  *on = tecore_tunable_int(&cuda_check) != 0;
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_mem_check(tecore_devptr_t p, size_t bytes, char *why, size_t n) {
  if (!p) {
    snprintf(why, n, "address 0 (NULL)");
    return TECORE_ERR_ILLEGAL_ADDRESS;
  }
  tecore_devptr_t base = 0;
  size_t len = 0;
  if (te_cuda_mem_range(p, &base, &len) != TECORE_SUCCESS || len == 0) {
    snprintf(why, n, "0x%llx is memory the CUDA driver does not know (freed, or pageable host "
             "memory: TECORE_CUDA_CHECK=0 lets that through)", (unsigned long long)p);
    return TECORE_ERR_ILLEGAL_ADDRESS;
  }
  if (bytes == 0) bytes = 1;
  if (p < base || p - base > len || bytes > len - (size_t)(p - base)) {
    snprintf(why, n, "[0x%llx, +%zu) ends %llu bytes past the end of the allocation "
             "[0x%llx, +%zu)", (unsigned long long)p, bytes,
             (unsigned long long)(p - base + bytes - len), (unsigned long long)base, len);
    return TECORE_ERR_ILLEGAL_ADDRESS;
  }
  return TECORE_SUCCESS;
}
