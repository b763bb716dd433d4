/* SPDX-License-Identifier: Apache-2.0 */
/* vmm.c -- virtual memory (reserve, create, map, export and import as a POSIX fd
 * or a fabric handle) and multicast objects. */
#include "device/device_ops.h"
#include <stdio.h>
#include <string.h>

/* Declares o = the backend's ops, or returns the init failure. */
#define OPS(o)                                   \
  const struct te_device_ops *o = NULL;          \
  TE_CHECK(te_ops_get(&o))

/* ---- VMM ---- */

TE_EXPORT tecore_result_t tecore_vmm_granularity(size_t *granularity, int recommended) {
  TE_ARG(granularity, "tecore_vmm_granularity: granularity is NULL");
  OPS(o);
  return o->vmm_granularity(granularity, recommended);
}

static tecore_result_t vmm_check_size(const struct te_device_ops *o, size_t bytes,
                                      const char *fn, const char *what) {
  size_t g = 0;
  TE_ARG(bytes > 0, "%s: %s is 0", fn, what);
  TE_CHECK(o->vmm_granularity(&g, 0));
  TE_ARG(g && bytes % g == 0, "%s: %s (%zu) is not a multiple of the granularity %zu", fn, what,
         bytes, g);
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_vmm_reserve(size_t bytes, size_t align, tecore_devptr_t *va) {
  TE_ARG(va, "tecore_vmm_reserve: va is NULL");
  TE_ARG(align == 0 || (align & (align - 1)) == 0, "tecore_vmm_reserve: align %zu is not a power of 2",
         align);
  OPS(o);
  TE_CHECK(vmm_check_size(o, bytes, __func__, "bytes"));
  /* a failure leaves *va as the caller had it */
  __typeof__(*va) out_ = 0;
  TE_CHECK(o->vmm_reserve(bytes, align, &out_));
  *va = out_;
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_vmm_free_va(tecore_devptr_t va, size_t bytes) {
  TE_ARG(va, "tecore_vmm_free_va: va is 0");
  OPS(o);
  TE_CHECK(vmm_check_size(o, bytes, __func__, "bytes"));
  return o->vmm_free_va(va, bytes);
}

TE_EXPORT tecore_result_t tecore_vmm_create(size_t bytes, unsigned flags,
                                            tecore_vmm_handle_t *handle) {
  TE_ARG(handle, "tecore_vmm_create: handle is NULL");
  TE_ARG(!(flags & ~(TECORE_VMM_EXPORT_POSIX_FD | TECORE_VMM_EXPORT_FABRIC)),
         "tecore_vmm_create: unknown flags 0x%x", flags);
  OPS(o);
  TE_CHECK(vmm_check_size(o, bytes, __func__, "bytes"));
  /* a failure leaves *handle as the caller had it */
  __typeof__(*handle) out_ = 0;
  TE_CHECK(o->vmm_create(bytes, flags, &out_));
  *handle = out_;
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_vmm_release(tecore_vmm_handle_t handle) {
  TE_ARG(handle, "tecore_vmm_release: handle is 0");
  OPS(o);
  return o->vmm_release(handle);
}

TE_EXPORT tecore_result_t tecore_vmm_map(tecore_devptr_t va, size_t bytes,
                                         tecore_vmm_handle_t handle, size_t offset) {
  TE_ARG(va, "tecore_vmm_map: va is 0");
  TE_ARG(handle, "tecore_vmm_map: handle is 0");
  OPS(o);
  TE_CHECK(vmm_check_size(o, bytes, __func__, "bytes"));
  size_t g = 0;
  TE_CHECK(o->vmm_granularity(&g, 0));
  TE_ARG(va % g == 0, "tecore_vmm_map: va 0x%llx is not granularity-aligned", (unsigned long long)va);
  TE_ARG(offset % g == 0, "tecore_vmm_map: offset %zu is not a multiple of the granularity", offset);
  return o->vmm_map(va, bytes, handle, offset);
}

TE_EXPORT tecore_result_t tecore_vmm_unmap(tecore_devptr_t va, size_t bytes) {
  TE_ARG(va, "tecore_vmm_unmap: va is 0");
  OPS(o);
  TE_CHECK(vmm_check_size(o, bytes, __func__, "bytes"));
  return o->vmm_unmap(va, bytes);
}

TE_EXPORT tecore_result_t tecore_vmm_set_access(tecore_devptr_t va, size_t bytes, int ordinal) {
  TE_ARG(va, "tecore_vmm_set_access: va is 0");
  OPS(o);
  TE_CHECK(vmm_check_size(o, bytes, __func__, "bytes"));
  TE_CHECK(te_check_ordinal(o, ordinal, __func__));
  return o->vmm_set_access(va, bytes, ordinal);
}

TE_EXPORT tecore_result_t tecore_vmm_export_fd(tecore_vmm_handle_t handle, int *fd) {
  TE_ARG(handle, "tecore_vmm_export_fd: handle is 0");
  TE_ARG(fd, "tecore_vmm_export_fd: fd is NULL");
  OPS(o);
  /* a failure leaves *fd as the caller had it */
  __typeof__(*fd) out_ = -1;
  TE_CHECK(o->vmm_export_fd(handle, &out_));
  *fd = out_;
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_vmm_import_fd(int fd, tecore_vmm_handle_t *handle) {
  TE_ARG(fd >= 0, "tecore_vmm_import_fd: fd %d is negative", fd);
  TE_ARG(handle, "tecore_vmm_import_fd: handle is NULL");
  OPS(o);
  /* a failure leaves *handle as the caller had it */
  __typeof__(*handle) out_ = 0;
  TE_CHECK(o->vmm_import_fd(fd, &out_));
  *handle = out_;
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_vmm_export_fabric(tecore_vmm_handle_t handle,
                                                   struct tecore_fabric_handle *fabric) {
  TE_ARG(handle, "tecore_vmm_export_fabric: handle is 0");
  TE_ARG(fabric, "tecore_vmm_export_fabric: fabric is NULL");
  OPS(o);
  /* a failure leaves *fabric as the caller had it */
  struct tecore_fabric_handle out_;
  memset(&out_, 0, sizeof out_);
  TE_CHECK(o->vmm_export_fabric(handle, &out_));
  *fabric = out_;
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_vmm_import_fabric(const struct tecore_fabric_handle *fabric,
                                                   tecore_vmm_handle_t *handle) {
  TE_ARG(fabric, "tecore_vmm_import_fabric: fabric is NULL");
  TE_ARG(handle, "tecore_vmm_import_fabric: handle is NULL");
  OPS(o);
  __typeof__(*handle) out_ = 0;
  TE_CHECK(o->vmm_import_fabric(fabric, &out_));
  *handle = out_;
  return TECORE_SUCCESS;
}

/* ---- multicast ---- */

/* NVLink multicast can take a host's GPUs out of service where the
 * operator has turned it off (multicast_guard.c); the cuda backend also
 * checks this.  vdev's emulation is always allowed. */
static tecore_result_t mc_allowed(const struct te_device_ops *o, const char *fn) {
  if (o->backend == TECORE_BACKEND_CUDA) TE_CHECK(te_multicast_allowed(fn));
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_mc_allowed(void) {
  return te_multicast_allowed("tecore_mc_allowed");
}

/* The most GPUs one NVLink domain joins (GB200 NVL576); the driver
 * answered a granularity query for 1000 devices, so the bound is ours. */
#define TE_MC_MAX_DEVICES 576

static tecore_result_t mc_ndevices(int ndevices, const char *fn) {
  TE_ARG(ndevices > 0, "%s: ndevices %d is not positive", fn, ndevices);
  TE_ARG(ndevices <= TE_MC_MAX_DEVICES, "%s: ndevices %d is more than the %d GPUs an NVLink "
         "domain joins", fn, ndevices, TE_MC_MAX_DEVICES);
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_mc_granularity(size_t bytes, int ndevices, size_t *granularity) {
  TE_ARG(granularity, "tecore_mc_granularity: granularity is NULL");
  TE_ARG(bytes > 0, "tecore_mc_granularity: bytes is 0");
  TE_CHECK(mc_ndevices(ndevices, "tecore_mc_granularity"));
  OPS(o);
  TE_CHECK(mc_allowed(o, __func__));
  return o->mc_granularity(bytes, ndevices, granularity);
}

TE_EXPORT tecore_result_t tecore_mc_create(size_t bytes, int ndevices, unsigned flags,
                                           tecore_mc_handle_t *mc) {
  TE_ARG(mc, "tecore_mc_create: mc is NULL");
  TE_ARG(bytes > 0, "tecore_mc_create: bytes is 0");
  TE_CHECK(mc_ndevices(ndevices, "tecore_mc_create"));
  TE_ARG(flags == 0, "tecore_mc_create: flags must be 0 (got 0x%x)", flags);
  OPS(o);
  TE_CHECK(mc_allowed(o, __func__));
  /* a failure leaves *mc as the caller had it */
  __typeof__(*mc) out_ = 0;
  TE_CHECK(o->mc_create(bytes, ndevices, flags, &out_));
  *mc = out_;
  /* the line a run log is searched for to show whether multicast was used */
  TE_INFO(TECORE_SUBSYS_DEVICE, "tecore_mc_create: multicast object of %zu bytes for %d devices "
          "created (%s)", bytes, ndevices, o->name);
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_mc_add_device(tecore_mc_handle_t mc, int ordinal) {
  TE_ARG(mc, "tecore_mc_add_device: mc is 0");
  OPS(o);
  TE_CHECK(te_check_ordinal(o, ordinal, __func__));
  return o->mc_add_device(mc, ordinal);
}

TE_EXPORT tecore_result_t tecore_mc_bind_mem(tecore_mc_handle_t mc, size_t mc_offset,
                                             tecore_vmm_handle_t mem, size_t mem_offset,
                                             size_t bytes) {
  TE_ARG(mc, "tecore_mc_bind_mem: mc is 0");
  TE_ARG(mem, "tecore_mc_bind_mem: mem is 0");
  TE_ARG(bytes > 0, "tecore_mc_bind_mem: bytes is 0");
  OPS(o);
  return o->mc_bind_mem(mc, mc_offset, mem, mem_offset, bytes);
}

TE_EXPORT tecore_result_t tecore_mc_unbind(tecore_mc_handle_t mc, int ordinal, size_t mc_offset,
                                           size_t bytes) {
  TE_ARG(mc, "tecore_mc_unbind: mc is 0");
  TE_ARG(bytes > 0, "tecore_mc_unbind: bytes is 0");
  OPS(o);
  TE_CHECK(te_check_ordinal(o, ordinal, __func__));
  return o->mc_unbind(mc, ordinal, mc_offset, bytes);
}

TE_EXPORT tecore_result_t tecore_mc_release(tecore_mc_handle_t mc) {
  TE_ARG(mc, "tecore_mc_release: mc is 0");
  OPS(o);
  return o->mc_release(mc);
}

TE_EXPORT tecore_result_t tecore_mc_export_fd(tecore_mc_handle_t mc, int *fd) {
  TE_ARG(mc, "tecore_mc_export_fd: mc is 0");
  TE_ARG(fd, "tecore_mc_export_fd: fd is NULL");
  OPS(o);
  /* a failure leaves *fd as the caller had it */
  __typeof__(*fd) out_ = -1;
  TE_CHECK(o->mc_export_fd(mc, &out_));
  *fd = out_;
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_mc_import_fd(int fd, tecore_mc_handle_t *mc) {
  TE_ARG(fd >= 0, "tecore_mc_import_fd: fd %d is negative", fd);
  TE_ARG(mc, "tecore_mc_import_fd: mc is NULL");
  OPS(o);
  /* a failure leaves *mc as the caller had it */
  __typeof__(*mc) out_ = 0;
  TE_CHECK(o->mc_import_fd(fd, &out_));
  *mc = out_;
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_mc_members(tecore_devptr_t mc_va, tecore_devptr_t *members,
                                            int max, int *count) {
  TE_ARG(mc_va, "tecore_mc_members: mc_va is 0");
  TE_ARG(count, "tecore_mc_members: count is NULL");
  TE_ARG(max >= 0, "tecore_mc_members: max %d is negative", max);
  TE_ARG(members || max == 0, "tecore_mc_members: members is NULL and max is %d", max);
  OPS(o);
  return o->mc_members(mc_va, members, max, count);
}

