/* SPDX-License-Identifier: Apache-2.0 */
/* ops.c -- the device layer's core: the backend chosen (TE_DEVICE) and
 * its ops table handed to the rest of the layer (te_ops_get), the hooks
 * run once the backend is ready, the backend's end (te_device_fini, after
 * which no call reaches it: te_finished), and the launch configuration
 * check every launch path makes.  The public device API is in the files
 * beside it, each checking its arguments before it calls an op (see
 * device_ops.h for what a backend may then assume). */
#include "device/device_ops.h"
#include "device/graph_owner.h"
#include "device/graph_device.h"
#include <pthread.h>
#include <stdio.h>
#include <string.h>

TE_PARAM_STR(te_device_param, "TE_DEVICE", "auto", "auto|cuda|vdev",
             "device backend: cuda (CUDA driver), vdev (virtual device) or auto "
             "(cuda when a GPU is visible, else vdev)")

static pthread_once_t dev_once = PTHREAD_ONCE_INIT;
static const struct te_device_ops *dev_ops;
static tecore_result_t dev_init_result = TECORE_ERR_NOT_INITIALIZED;
static char dev_init_detail[512];

static void dev_select(void) {
  const char *want = tecore_tunable_str(&te_device_param);
  int try_cuda = strcmp(want, "vdev") != 0;
  int try_vdev = strcmp(want, "cuda") != 0;
  tecore_result_t r = TECORE_ERR_NO_DRIVER;
  snprintf(dev_init_detail, sizeof dev_init_detail, "no backend");
#ifdef TE_HAVE_CUDA
  if (try_cuda) {
    r = te_cuda_ops.init();
    if (r == TECORE_SUCCESS) {
      dev_ops = &te_cuda_ops;
      TE_INFO(TECORE_SUBSYS_INIT, "TE_DEVICE=%s: using the cuda backend", want);
    } else {
      snprintf(dev_init_detail, sizeof dev_init_detail, "cuda backend: %s", tecore_last_error());
      if (try_vdev)
        TE_INFO(TECORE_SUBSYS_INIT, "TE_DEVICE=auto: no GPU visible (%s); using the virtual device",
                tecore_last_error());
    }
  }
#else
  if (try_cuda && !try_vdev) {
    r = TECORE_ERR_NOT_SUPPORTED;
    snprintf(dev_init_detail, sizeof dev_init_detail,
             "TE_DEVICE=cuda: libtecore was built without CUDA (configure --with-cuda)");
  } else if (try_cuda) {
    TE_INFO(TECORE_SUBSYS_INIT, "TE_DEVICE=auto: built without CUDA; using the virtual device");
  }
#endif
  if (!dev_ops && try_vdev) {
    r = te_vdev_ops.init();
    if (r == TECORE_SUCCESS)
      dev_ops = &te_vdev_ops;
    else
      snprintf(dev_init_detail, sizeof dev_init_detail, "vdev backend: %s", tecore_last_error());
  }
  dev_init_result = dev_ops ? TECORE_SUCCESS : r;
}

static pthread_once_t preload_once = PTHREAD_ONCE_INIT;
static const struct te_device_ops *dev_ready;

/* Registered from constructors, before any thread can run a hook: the
 * count is published with release and read with acquire. */
static te_device_ready_fn ready_hooks[TE_DEVICE_READY_HOOKS];
static int ready_nhooks;

void te_device_on_ready(te_device_ready_fn fn) {
  int n = __atomic_load_n(&ready_nhooks, __ATOMIC_ACQUIRE);
  for (int i = 0; i < n; i++)
    if (ready_hooks[i] == fn) return;
  if (n == TE_DEVICE_READY_HOOKS) {
    TE_WARN(TECORE_SUBSYS_INIT, "more than %d backend-ready hooks; one is dropped",
            TE_DEVICE_READY_HOOKS);
    return;
  }
  ready_hooks[n] = fn;
  __atomic_store_n(&ready_nhooks, n + 1, __ATOMIC_RELEASE);
}

tecore_result_t te_device_ready_run(const struct te_device_ops *o) {
  tecore_result_t first = TECORE_SUCCESS;
  int n = __atomic_load_n(&ready_nhooks, __ATOMIC_ACQUIRE);
  for (int i = 0; i < n; i++) {
    tecore_result_t r = ready_hooks[i](o);
    if (r != TECORE_SUCCESS && first == TECORE_SUCCESS) first = r;
  }
  return first;
}

/* Outside dev_select's once: preloading calls back into the backend. */
static void dev_preload(void) {
  /* Only into a context that is already current: creating device 0's
   * implicit context here would cost every process that works on another
   * device a context on device 0.  A context made later (tecore_ctx_create,
   * or the implicit one) is preloaded when it is made. */
  tecore_ctx_t cur = NULL;
  int have_ctx = dev_ops && (dev_ops->backend != TECORE_BACKEND_CUDA ||
                             (dev_ops->ctx_get_current(&cur) == TECORE_SUCCESS && cur));
  if (have_ctx && te_device_ready_run(dev_ops) != TECORE_SUCCESS)
    TE_WARN(TECORE_SUBSYS_KERNEL, "loading the kernels failed (%s); launches will report it",
            tecore_last_error());
  __atomic_store_n(&dev_ready, dev_ops, __ATOMIC_RELEASE);
}

/* The selected backend's table (initializes on demand; NULL + error set
 * when no backend can start). */
static const struct te_device_ops *te_ops(void) {
  if (te_finished()) {
    TE_ERR(TECORE_ERR_NOT_INITIALIZED,
           "libtecore was shut down by tecore_fini(); it does not start again in this process");
    return NULL;
  }
  pthread_once(&dev_once, dev_select);
  if (!dev_ops) {
    TE_ERR(dev_init_result, "%s", dev_init_detail);
    return NULL;
  }
  pthread_once(&preload_once, dev_preload);
  return dev_ops;
}

const struct te_device_ops *te_ops_if_ready(void) {
  return __atomic_load_n(&dev_ready, __ATOMIC_ACQUIRE);
}

/* tecore_fini, after the hooks and the service engine: the backend stops
 * (vdev: streams drained and joined, bookkeeping freed; cuda: the driver's
 * objects are left to process exit) and no call reaches it again. */
static int finished;  /* te_device_fini has begun (read without a lock) */

int te_finished(void) { return __atomic_load_n(&finished, __ATOMIC_ACQUIRE); }

void te_device_fini(void) {
  __atomic_store_n(&finished, 1, __ATOMIC_RELEASE);   /* from here on no call reaches it */
  const struct te_device_ops *o = __atomic_load_n(&dev_ops, __ATOMIC_ACQUIRE);
  if (o) (void)o->fini(__atomic_load_n(&dev_ready, __ATOMIC_ACQUIRE) != NULL);
  te_graph_owner_fini();
  te_graph_device_fini();
  __atomic_store_n(&dev_ready, NULL, __ATOMIC_RELEASE);
  dev_ops = NULL;
  dev_init_result = TECORE_ERR_NOT_INITIALIZED;
}

tecore_result_t te_ops_get(const struct te_device_ops **o) {
  *o = te_ops();
  return *o ? TECORE_SUCCESS : dev_init_result;
}

tecore_result_t te_launch_cfg_check(const struct tecore_launch_cfg *cfg, const char *who) {
  for (int d = 0; d < 3; d++)
    TE_ARG(cfg->grid[d] > 0 && cfg->block[d] > 0, "%s: grid/block dimension %d is 0", who, d);
  TE_ARG((uint64_t)cfg->block[0] * cfg->block[1] * cfg->block[2] <= 1024,
         "%s: %u x %u x %u threads per block exceed 1024", who, cfg->block[0], cfg->block[1],
         cfg->block[2]);
  TE_ARG(cfg->grid[1] <= 65535 && cfg->grid[2] <= 65535, "%s: grid y/z above 65535", who);
  TE_ARG(cfg->grid[0] <= 0x7fffffffu, "%s: grid x %u above 2^31-1", who, cfg->grid[0]);
  return TECORE_SUCCESS;
}

/* TECORE_ERR_INVALID naming fn unless ordinal is a device of the backend. */
tecore_result_t te_check_ordinal(const struct te_device_ops *o, int ordinal, const char *fn) {
  int n = 0;
  TE_CHECK(o->device_count(&n));
  TE_ARG(ordinal >= 0 && ordinal < n, "%s: device ordinal %d outside [0, %d)", fn, ordinal, n);
  return TECORE_SUCCESS;
}
