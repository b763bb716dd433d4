/* SPDX-License-Identifier: Apache-2.0 */
/* vdev_dev.c -- the virtual devices: their count (TECORE_VDEV_DEVICES),
 * properties, peer access, and one primary context per device with the
 * calling thread's current context. */
#include "vdev/vdev.h"
#include <stdio.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <unistd.h>

TE_PARAM_INT(vdev_devices, "TECORE_VDEV_DEVICES", 1, 1, VDEV_MAX_DEVICES,
             "number of virtual devices the vdev backend shows")

#define VDEV_CTX_MAGIC 0x76435458U /* "vCTX" */

static struct vdev_ctx vdev_ctxs[VDEV_MAX_DEVICES];
static int vdev_ndev;
static pthread_once_t vdev_once = PTHREAD_ONCE_INIT;
static __thread struct vdev_ctx *vdev_current;

static void vdev_init_once(void) {
  vdev_ndev = (int)tecore_tunable_int(&vdev_devices);
  if (vdev_ndev < 1 || vdev_ndev > VDEV_MAX_DEVICES) vdev_ndev = 1;
  for (int i = 0; i < VDEV_MAX_DEVICES; i++) {
    struct vdev_ctx *c = &vdev_ctxs[i];
    c->magic = VDEV_CTX_MAGIC;
    c->ordinal = i;
    pthread_mutex_init(&c->lock, NULL);
  }
  te_vdev_fork_register();
  TE_INFO(TECORE_SUBSYS_INIT, "vdev: %d virtual device(s), driver version %d emulated",
          vdev_ndev, VDEV_DRIVER_VERSION);
}

static tecore_result_t te_vdev_ensure_init(void) {
  pthread_once(&vdev_once, vdev_init_once);
  return TECORE_SUCCESS;
}

int te_vdev_ndevices(void) {
  te_vdev_ensure_init();
  return vdev_ndev;
}

tecore_result_t te_vdev_init(void) { return te_vdev_ensure_init(); }

/* tecore_fini: streams first (their workers run what is queued and are
 * joined), then the deferred frees they were holding, then the tables. */
tecore_result_t te_vdev_fini(int ready) {
  (void)ready;
  te_vdev_streams_fini();
  te_vdev_vmm_fini();
  te_vdev_mem_fini();
  te_vdev_registry_fini();
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_driver_version(int *version) {
  *version = VDEV_DRIVER_VERSION;
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_device_count(int *count) {
  *count = te_vdev_ndevices();
  return TECORE_SUCCESS;
}

static tecore_result_t check_ordinal(int ordinal, const char *fn) {
  int n = te_vdev_ndevices();
  if (ordinal < 0 || ordinal >= n)
    return TE_ERR(TECORE_ERR_INVALID, "%s: device ordinal %d outside [0, %d)", fn, ordinal, n);
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_device_props(int ordinal, struct tecore_device_props *p) {
  TE_CHECK(check_ordinal(ordinal, "vdev device_props"));
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "te-vdev virtual GPU");
  p->ordinal = ordinal;
  p->cc_major = 9;
  p->cc_minor = 0;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  p->sm_count = cpus > 0 ? (int)cpus : 1;
  p->max_threads_per_block = 1024;
  p->max_shared_per_block = 227 * 1024;
  p->warp_size = 32;
  p->l2_bytes = 50 << 20;
  struct sysinfo si;
  if (sysinfo(&si) == 0) p->total_mem = (size_t)si.totalram * si.mem_unit;
  p->pci_bus = ordinal; /* distinct per device, like separate slots */
  p->unified_addressing = 1;
  p->vmm_supported = 1;
  p->posix_fd_handles = 1;
  p->multicast_supported = 1;
  p->stream_mem_ops = 1;
  return TECORE_SUCCESS;
}

/* Every pair of distinct devices can map each other (they share the host's
 * memory); no NVLink.  A device with itself reports 0, as the driver's
 * cuDeviceCanAccessPeer does. */
tecore_result_t te_vdev_device_peer(int a, int b, int *can, int *link) {
  TE_CHECK(check_ordinal(a, "vdev device_peer"));
  TE_CHECK(check_ordinal(b, "vdev device_peer"));
  *can = a != b;
  *link = 0;
  return TECORE_SUCCESS;
}

/* ---- contexts ------------------------------------------------------------- */

/* The child of a fork has no stream workers: it forgets the parent's
 * streams (leaked, never touched again) and makes a new legacy stream on
 * first use.  Contexts are initialized before this can run (pthread_once). */
void te_vdev_ctx_fork(enum vdev_fork_phase phase) {
  for (int i = 0; i < VDEV_MAX_DEVICES; i++) {
    struct vdev_ctx *c = &vdev_ctxs[i];
    if (phase == VDEV_FORK_PREPARE) {
      pthread_mutex_lock(&c->lock);
      continue;
    }
    if (phase == VDEV_FORK_CHILD) {
      c->legacy = NULL;
      c->nstreams = 0;
    }
    pthread_mutex_unlock(&c->lock);
  }
}

struct vdev_ctx *te_vdev_ctx_at(int ordinal) {
  te_vdev_ensure_init();
  return ordinal >= 0 && ordinal < vdev_ndev ? &vdev_ctxs[ordinal] : NULL;
}

struct vdev_ctx *te_vdev_ctx_current(void) {
  te_vdev_ensure_init();
  if (!vdev_current) vdev_current = &vdev_ctxs[0];
  return vdev_current;
}

/* A public context handle back to ours (NULL when it is not one). */
static struct vdev_ctx *ctx_from_handle(tecore_ctx_t h) {
  te_vdev_ensure_init();
  for (int i = 0; i < vdev_ndev; i++)
    if ((void *)h == (void *)&vdev_ctxs[i]) return &vdev_ctxs[i];
  return NULL;
}

tecore_result_t te_vdev_ctx_create(int ordinal, tecore_ctx_t *ctx) {
  TE_CHECK(check_ordinal(ordinal, "vdev ctx_create"));
  struct vdev_ctx *c = &vdev_ctxs[ordinal];
  pthread_mutex_lock(&c->lock);
  c->retain++;
  pthread_mutex_unlock(&c->lock);
  vdev_current = c;
  *ctx = (tecore_ctx_t)(void *)c;
  return TECORE_SUCCESS;
}

/* Releases one retain of the primary context.  The context itself (its
 * streams, memory) lives on, as a primary context with other users does;
 * a release without a matching retain is refused. */
tecore_result_t te_vdev_ctx_destroy(tecore_ctx_t ctx) {
  struct vdev_ctx *c = ctx_from_handle(ctx);
  if (!c)
    return TE_ERR(TECORE_ERR_INVALID, "vdev ctx_destroy: %p is not a vdev context", (void *)ctx);
  pthread_mutex_lock(&c->lock);
  int had = c->retain;
  if (had > 0) c->retain--;
  pthread_mutex_unlock(&c->lock);
  if (had <= 0)
    return TE_ERR(TECORE_ERR_INVALID, "vdev ctx_destroy: context of device %d is not retained",
                  c->ordinal);
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_ctx_set_current(tecore_ctx_t ctx) {
  if (!ctx) { /* unbinds, as cuCtxSetCurrent(NULL) does */
    vdev_current = NULL;
    return TECORE_SUCCESS;
  }
  struct vdev_ctx *c = ctx_from_handle(ctx);
  if (!c)
    return TE_ERR(TECORE_ERR_INVALID, "vdev ctx_set_current: %p is not a vdev context",
                  (void *)ctx);
  vdev_current = c;
  return TECORE_SUCCESS;
}

/* NULL when the thread has no current context (the driver's answer). */
tecore_result_t te_vdev_ctx_get_current(tecore_ctx_t *ctx) {
  te_vdev_ensure_init();
  *ctx = (tecore_ctx_t)(void *)vdev_current;
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_ctx_synchronize(void) {
  TE_CHECK(te_vdev_capture_unsafe_call("vdev ctx_synchronize"));
  return te_vdev_ctx_drain(te_vdev_ctx_current());
}
