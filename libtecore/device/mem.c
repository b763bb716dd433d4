/* SPDX-License-Identifier: Apache-2.0 */
/* mem.c -- device and page-locked host memory, copies and memsets (the copies
 * and memsets bracketed for tecore_profile_*). */
#include "device/device_ops.h"
#include "profile_hook.h"
#include <stdio.h>
#include <string.h>

/* Declares o = the backend's ops, or returns the init failure. */
#define OPS(o)                                   \
  const struct te_device_ops *o = NULL;          \
  TE_CHECK(te_ops_get(&o))

TE_EXPORT tecore_result_t tecore_mem_alloc(size_t bytes, tecore_devptr_t *dptr) {
  TE_ARG(dptr, "tecore_mem_alloc: dptr is NULL");
  TE_ARG(bytes > 0, "tecore_mem_alloc: bytes is 0");
  OPS(o);
  /* a failure leaves *dptr as the caller had it */
  __typeof__(*dptr) out_ = 0;
  TE_CHECK(o->mem_alloc(bytes, &out_));
  *dptr = out_;
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_mem_free(tecore_devptr_t dptr) {
  if (dptr == 0) return TECORE_SUCCESS; /* like free(NULL) */
  OPS(o);
  return o->mem_free(dptr);
}

TE_EXPORT tecore_result_t tecore_mem_info(size_t *free_bytes, size_t *total_bytes) {
  TE_ARG(free_bytes, "tecore_mem_info: free_bytes is NULL");
  TE_ARG(total_bytes, "tecore_mem_info: total_bytes is NULL");
  OPS(o);
  return o->mem_info(free_bytes, total_bytes);
}

TE_EXPORT tecore_result_t tecore_mem_alloc_host(size_t bytes, void **ptr) {
  TE_ARG(ptr, "tecore_mem_alloc_host: ptr is NULL");
  TE_ARG(bytes > 0, "tecore_mem_alloc_host: bytes is 0");
  OPS(o);
  /* a failure leaves *ptr as the caller had it */
  __typeof__(*ptr) out_ = NULL;
  TE_CHECK(o->mem_alloc_host(bytes, &out_));
  *ptr = out_;
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_mem_free_host(void *ptr) {
  if (!ptr) return TECORE_SUCCESS;
  OPS(o);
  return o->mem_free_host(ptr);
}

TE_EXPORT tecore_result_t tecore_mem_host_register(void *ptr, size_t bytes, unsigned flags) {
  TE_ARG(ptr, "tecore_mem_host_register: ptr is NULL");
  TE_ARG(bytes > 0, "tecore_mem_host_register: bytes is 0");
  TE_ARG(bytes <= UINTPTR_MAX - (uintptr_t)ptr,
         "tecore_mem_host_register: [%p, +%zu) wraps around the address space", ptr, bytes);
  TE_ARG(!(flags & ~(TECORE_HOST_REGISTER_MAPPED | TECORE_HOST_REGISTER_READONLY)),
         "tecore_mem_host_register: unknown flags 0x%x", flags);
  OPS(o);
  return o->mem_host_register(ptr, bytes, flags);
}

TE_EXPORT tecore_result_t tecore_mem_host_unregister(void *ptr) {
  TE_ARG(ptr, "tecore_mem_host_unregister: ptr is NULL");
  OPS(o);
  return o->mem_host_unregister(ptr);
}

TE_EXPORT tecore_result_t tecore_mem_range(tecore_devptr_t ptr, tecore_devptr_t *base,
                                           size_t *bytes) {
  TE_ARG(ptr, "tecore_mem_range: ptr is 0");
  TE_ARG(base, "tecore_mem_range: base is NULL");
  TE_ARG(bytes, "tecore_mem_range: bytes is NULL");
  OPS(o);
  tecore_devptr_t b = 0;
  size_t n = 0;
  TE_CHECK(o->mem_range(ptr, &b, &n));
  /* a failed call leaves the out-parameters as they were */
  if (!n)
    return TE_ERR(TECORE_ERR_INVALID,
                  "tecore_mem_range: 0x%llx is in no allocation the %s backend knows (pageable "
                  "host memory, freed, or not an address)",
                  (unsigned long long)ptr, o->name);
  *base = b;
  *bytes = n;
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_mem_host_device_ptr(void *host, tecore_devptr_t *dptr) {
  TE_ARG(host, "tecore_mem_host_device_ptr: host is NULL");
  TE_ARG(dptr, "tecore_mem_host_device_ptr: dptr is NULL");
  OPS(o);
  return o->mem_host_device_ptr(host, dptr);
}

TE_EXPORT tecore_result_t tecore_memcpy_async(tecore_devptr_t dst, tecore_devptr_t src,
                                              size_t bytes, tecore_stream_t stream) {
  if (bytes == 0) return TECORE_SUCCESS;
  TE_ARG(dst, "tecore_memcpy_async: dst is NULL");
  TE_ARG(src, "tecore_memcpy_async: src is NULL");
  OPS(o);
  struct te_prof_mark pm;
  te_prof_begin(&pm, stream);
  tecore_result_t r = o->memcpy_async(dst, src, bytes, stream);
  te_prof_end(&pm, "memcpy_async", NULL, r);
  return r;
}

TE_EXPORT tecore_result_t tecore_memcpy(tecore_devptr_t dst, tecore_devptr_t src, size_t bytes) {
  if (bytes == 0) return TECORE_SUCCESS;
  TE_ARG(dst, "tecore_memcpy: dst is NULL");
  TE_ARG(src, "tecore_memcpy: src is NULL");
  OPS(o);
  return o->memcpy_sync(dst, src, bytes);
}

static tecore_result_t memset_common(tecore_devptr_t dst, uint32_t value, unsigned es,
                                     size_t count, tecore_stream_t stream, const char *fn) {
  if (count == 0) return TECORE_SUCCESS;
  TE_ARG(dst, "%s: dst is NULL", fn);
  TE_ARG(dst % es == 0, "%s: dst 0x%llx is not %u-byte aligned", fn, (unsigned long long)dst, es);
  OPS(o);
  struct te_prof_mark pm;
  te_prof_begin(&pm, stream);
  tecore_result_t r = o->memset_async(dst, value, es, count, stream);
  te_prof_end(&pm, "memset_async", NULL, r);
  return r;
}

TE_EXPORT tecore_result_t tecore_memset_d8_async(tecore_devptr_t dst, uint8_t value, size_t count,
                                                 tecore_stream_t stream) {
  return memset_common(dst, value, 1, count, stream, __func__);
}
TE_EXPORT tecore_result_t tecore_memset_d16_async(tecore_devptr_t dst, uint16_t value,
                                                  size_t count, tecore_stream_t stream) {
  return memset_common(dst, value, 2, count, stream, __func__);
}
TE_EXPORT tecore_result_t tecore_memset_d32_async(tecore_devptr_t dst, uint32_t value,
                                                  size_t count, tecore_stream_t stream) {
  return memset_common(dst, value, 4, count, stream, __func__);
}

/* ---- streams ---- */

