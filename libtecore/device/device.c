/* SPDX-License-Identifier: Apache-2.0 */
/* device.c -- the public device API's init, backend, devices and contexts: argument
 * checks, then the backend's ops (ops.c). */
#include "device/device_ops.h"
#include <stdio.h>
#include <string.h>

/* Declares o = the backend's ops, or returns the init failure. */
#define OPS(o)                                   \
  const struct te_device_ops *o = NULL;          \
  TE_CHECK(te_ops_get(&o))

TE_EXPORT tecore_result_t tecore_init(void) {
  OPS(o);
  (void)o;
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_backend(tecore_backend_t *backend) {
  TE_ARG(backend, "tecore_backend: backend is NULL");
  OPS(o);
  *backend = o->backend;
  return TECORE_SUCCESS;
}

TE_EXPORT const char *tecore_backend_name(tecore_backend_t backend) {
  switch (backend) {
  case TECORE_BACKEND_CUDA: return "cuda";
  case TECORE_BACKEND_VDEV: return "vdev";
  default: return "none";
  }
}

TE_EXPORT tecore_result_t tecore_driver_version(int *version) {
  TE_ARG(version, "tecore_driver_version: version is NULL");
  OPS(o);
  return o->driver_version(version);
}

TE_EXPORT tecore_result_t tecore_device_count(int *count) {
  TE_ARG(count, "tecore_device_count: count is NULL");
  OPS(o);
  return o->device_count(count);
}

TE_EXPORT tecore_result_t tecore_device_get_props(int ordinal, struct tecore_device_props *props) {
  TE_ARG(props, "tecore_device_get_props: props is NULL");
  OPS(o);
  TE_CHECK(te_check_ordinal(o, ordinal, __func__));
  memset(props, 0, sizeof *props);
  return o->device_props(ordinal, props);
}

TE_EXPORT tecore_result_t tecore_device_peer(int a, int b, int *can, int *link) {
  TE_ARG(can, "tecore_device_peer: can is NULL");
  TE_ARG(link, "tecore_device_peer: link is NULL");
  OPS(o);
  TE_CHECK(te_check_ordinal(o, a, __func__));
  TE_CHECK(te_check_ordinal(o, b, __func__));
  return o->device_peer(a, b, can, link);
}

/* ---- contexts ---- */

TE_EXPORT tecore_result_t tecore_ctx_create(int ordinal, tecore_ctx_t *ctx) {
  TE_ARG(ctx, "tecore_ctx_create: ctx is NULL");
  OPS(o);
  TE_CHECK(te_check_ordinal(o, ordinal, __func__));
  TE_CHECK(o->ctx_create(ordinal, ctx));
  /* the new context is current: give it every kernel now, not at a launch */
  if (te_device_ready_run(o) != TECORE_SUCCESS)
    TE_WARN(TECORE_SUBSYS_KERNEL, "device %d: loading the kernels failed (%s)", ordinal,
            tecore_last_error());
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_ctx_destroy(tecore_ctx_t ctx) {
  TE_ARG(ctx, "tecore_ctx_destroy: ctx is NULL");
  OPS(o);
  return o->ctx_destroy(ctx);
}

TE_EXPORT tecore_result_t tecore_ctx_set_current(tecore_ctx_t ctx) {
  OPS(o);
  return o->ctx_set_current(ctx);
}

TE_EXPORT tecore_result_t tecore_ctx_get_current(tecore_ctx_t *ctx) {
  TE_ARG(ctx, "tecore_ctx_get_current: ctx is NULL");
  OPS(o);
  return o->ctx_get_current(ctx);
}

TE_EXPORT tecore_result_t tecore_ctx_synchronize(void) {
  OPS(o);
  return o->ctx_synchronize();
}

/* ---- memory ---- */

