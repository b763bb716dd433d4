/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_driver.c -- loads the CUDA driver for the cuda backend: dlopen of
 * libcuda.so.1 once (pthread_once), every entry point fetched through
 * cuGetProcAddress_v2 at the version pinned in cuda_backend.h, cuInit;
 * the CUresult -> tecore_result_t mapping behind TE_CU; and the implicit
 * context (device 0's primary context) for threads that have none.
 *
 * Nothing links -lcuda, so the library loads on machines with no driver
 * and init says why the backend cannot start. */
#include "cuda_backend.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

struct te_cuda_api te_cu;

static struct {
  pthread_once_t once;
  tecore_result_t status;   /* init's outcome, decided once */
  char msg[512];            /* its detail, re-reported on each init call */
  void *lib;
  int driver_version;
} g_drv = {.once = PTHREAD_ONCE_INIT};

/* The implicit context: retained once, on first need, never released. */
static pthread_mutex_t g_implicit_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext g_implicit_ctx;

/* ---- errors ----------------------------------------------------------------- */

static tecore_result_t map_cuda_error(CUresult r) {
  switch (r) {
  case CUDA_SUCCESS: return TECORE_SUCCESS;
  case CUDA_ERROR_OUT_OF_MEMORY: return TECORE_ERR_DEVICE_NOMEM;
  case CUDA_ERROR_NOT_READY: return TECORE_ERR_NOT_READY;
  case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED:
  case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED:
  case CUDA_ERROR_STREAM_CAPTURE_MERGE:
  case CUDA_ERROR_STREAM_CAPTURE_UNMATCHED:
  case CUDA_ERROR_STREAM_CAPTURE_UNJOINED:
  case CUDA_ERROR_STREAM_CAPTURE_ISOLATION:
  case CUDA_ERROR_STREAM_CAPTURE_IMPLICIT:
  case CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD:
  case CUDA_ERROR_CAPTURED_EVENT: return TECORE_ERR_CAPTURE;
  case CUDA_ERROR_NO_DEVICE: return TECORE_ERR_NO_DEVICE;
  case CUDA_ERROR_INVALID_VALUE:
  case CUDA_ERROR_INVALID_HANDLE: return TECORE_ERR_INVALID;
  case CUDA_ERROR_NOT_SUPPORTED: return TECORE_ERR_NOT_SUPPORTED;
  case CUDA_ERROR_ILLEGAL_ADDRESS: return TECORE_ERR_ILLEGAL_ADDRESS;
  case CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE: return TECORE_ERR_GRAPH_UPDATE;
  default: return TECORE_ERR_DRIVER;
  }
}

/* The driver's name and text for r; placeholders when they are unknown
 * (the driver says CUDA_ERROR_INVALID_VALUE for codes newer than itself). */
static void cuda_error_text(CUresult r, const char **name, const char **text) {
  *name = NULL;
  *text = NULL;
  if (te_cu.p_cuGetErrorName && te_cu.p_cuGetErrorName(r, name) != CUDA_SUCCESS) *name = NULL;
  if (te_cu.p_cuGetErrorString && te_cu.p_cuGetErrorString(r, text) != CUDA_SUCCESS)
    *text = NULL;
  if (!*name) *name = "CUDA_ERROR_UNKNOWN_CODE";
  if (!*text) *text = "no description";
}

tecore_result_t te_cuda_result(CUresult r, const char *fn, const char *file, int line) {
  if (r == CUDA_SUCCESS) return TECORE_SUCCESS;
  if (r == CUDA_ERROR_NOT_READY) {
    /* No stale detail from an earlier failure either. */
    tecore_clear_error();
    return TECORE_ERR_NOT_READY;
  }
  const char *name, *text;
  cuda_error_text(r, &name, &text);
  return te_error_set(map_cuda_error(r), file, line, "%s failed: %s (%d: %s)", fn, name, (int)r,
                      text);
}

tecore_result_t te_cuda_missing(const char *fn, const char *file, int line) {
  return te_error_set(TECORE_ERR_NOT_SUPPORTED, file, line,
                      "%s is not available in this CUDA driver (version %d)", fn,
                      g_drv.driver_version);
}

/* ---- loading ------------------------------------------------------------------ */

static void load_fail(tecore_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void load_fail(tecore_result_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_drv.msg, sizeof g_drv.msg, fmt, ap);
  va_end(ap);
  g_drv.status = code;
}

/* Fetches one symbol at its pinned version; NULL when absent. */
static void *load_symbol(PFN_cuGetProcAddress_v12000 gpa, const char *name, int version) {
  void *fn = NULL;
  CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  /* LEGACY_STREAM: a NULL stream is the legacy default stream, as
   * device_ops.h promises, whatever the caller was compiled with. */
  CUresult r = gpa(name, &fn, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &found);
  if (r != CUDA_SUCCESS || found != CU_GET_PROC_ADDRESS_SUCCESS) return NULL;
  return fn;
}

static int load_symbols(PFN_cuGetProcAddress_v12000 gpa) {
  void *fn;
#define TE_CUDA_LOAD_(name, ver, req)                                                      \
  fn = load_symbol(gpa, #name, ver);                                                       \
  if (!fn && (req)) {                                                                      \
    load_fail(TECORE_ERR_NO_DRIVER,                                                        \
              "the CUDA driver lacks %s (ABI of CUDA %d.%d): driver too old", #name,       \
              (ver) / 1000, (ver) % 1000 / 10);                                            \
    return -1;                                                                             \
  }                                                                                        \
  if (!fn) TE_INFO(TECORE_SUBSYS_INIT, "cuda: driver lacks %s (CUDA %d.%d ABI); ops using it " \
                   "return TECORE_ERR_NOT_SUPPORTED", #name, (ver) / 1000, (ver) % 1000 / 10); \
  te_cu.p_##name = (PFN_##name##_v##ver)fn;
  TE_CUDA_SYMBOLS(TE_CUDA_LOAD_)
#undef TE_CUDA_LOAD_
  return 0;
}

static void cuda_load(void) {
  dlerror();
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *e = dlerror();
    load_fail(TECORE_ERR_NO_DRIVER, "libcuda.so.1 not found: %s", e ? e : "dlopen failed");
    return;
  }
  /* The v2 form (CUDA 12.0+) reports why a symbol is missing. */
  PFN_cuGetProcAddress_v12000 gpa = (PFN_cuGetProcAddress_v12000)dlsym(lib, "cuGetProcAddress_v2");
  if (!gpa) {
    load_fail(TECORE_ERR_NO_DRIVER,
              "libcuda.so.1 has no cuGetProcAddress_v2: the CUDA driver is older than 12.0");
    goto fail;
  }
  if (load_symbols(gpa) != 0) goto fail;

  CUresult r = te_cu.p_cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char *name, *text;
    cuda_error_text(r, &name, &text);
    /* Any other cuInit failure (driver/library mismatch, system not ready)
     * also means the driver cannot be used: NO_DRIVER, so TE_DEVICE=auto
     * falls back to vdev. */
    load_fail(r == CUDA_ERROR_NO_DEVICE ? TECORE_ERR_NO_DEVICE : TECORE_ERR_NO_DRIVER,
              "cuInit failed: %s (%d: %s)", name, (int)r, text);
    goto fail;
  }
  if (te_cu.p_cuDriverGetVersion(&g_drv.driver_version) != CUDA_SUCCESS) g_drv.driver_version = 0;
  int count = 0;
  r = te_cu.p_cuDeviceGetCount(&count);
  if (r != CUDA_SUCCESS || count <= 0) {
    load_fail(TECORE_ERR_NO_DEVICE, "cuDeviceGetCount found no CUDA device (result %d)", (int)r);
    goto fail;
  }
  g_drv.lib = lib;
  g_drv.status = TECORE_SUCCESS;
  TE_INFO(TECORE_SUBSYS_INIT, "cuda: driver %d.%d, %d device(s), built with CUDA %d.%d",
          g_drv.driver_version / 1000, g_drv.driver_version % 1000 / 10, count,
          TE_CUDA_TOOLKIT_VERSION / 1000, TE_CUDA_TOOLKIT_VERSION % 1000 / 10);
  return;
fail:
  memset(&te_cu, 0, sizeof te_cu);
  dlclose(lib);
}

tecore_result_t te_cuda_init(void) {
  pthread_once(&g_drv.once, cuda_load);
  if (g_drv.status != TECORE_SUCCESS) return TE_ERR(g_drv.status, "%s", g_drv.msg);
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_driver_version(int *version) {
  TE_CHECK(te_cuda_init());
  *version = g_drv.driver_version;
  return TECORE_SUCCESS;
}

/* ---- contexts --------------------------------------------------------------- */

/* How the host thread waits for the device (stream and event
 * synchronization).  A host that sleeps through a long step wakes on a
 * core whose caches the idle state emptied, and its next launches pay for
 * it; spinning keeps the core busy instead. */
TE_PARAM_STR(cuda_sync, "TECORE_CUDA_SYNC", "auto", "auto|spin|yield|blocking",
             "how a host thread waits for the GPU in a primary context libtecore retains: auto "
             "(the driver's choice), spin, yield or blocking (CU_CTX_SCHED_*); set before the "
             "context is first used")

tecore_result_t te_cuda_sync_policy(CUdevice dev) {
  const char *v = tecore_tunable_str(&cuda_sync);
  unsigned flags;
  if (!v || !strcmp(v, "auto")) return TECORE_SUCCESS;
  if (!strcmp(v, "spin")) flags = CU_CTX_SCHED_SPIN;
  else if (!strcmp(v, "yield")) flags = CU_CTX_SCHED_YIELD;
  else if (!strcmp(v, "blocking")) flags = CU_CTX_SCHED_BLOCKING_SYNC;
  else return TECORE_SUCCESS;   /* the tunable refused it already */
  tecore_result_t r = TE_CU(cuDevicePrimaryCtxSetFlags, dev, flags);
  if (r != TECORE_SUCCESS)
    TE_WARN(TECORE_SUBSYS_DEVICE, "TECORE_CUDA_SYNC=%s not applied: %s", v, tecore_last_error());
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_need_ctx(void) {
  CUcontext cur = NULL;
  TE_CHECK(TE_CU(cuCtxGetCurrent, &cur));
  if (cur) return TECORE_SUCCESS;

  tecore_result_t res = TECORE_SUCCESS;
  int made = 0;
  pthread_mutex_lock(&g_implicit_lock);
  if (!g_implicit_ctx) {
    CUdevice dev;
    TE_CHECK_GOTO(TE_CU(cuDeviceGet, &dev, 0), res, out);
    (void)te_cuda_sync_policy(dev);
    TE_CHECK_GOTO(TE_CU(cuDevicePrimaryCtxRetain, &g_implicit_ctx, dev), res, out);
    TE_INFO(TECORE_SUBSYS_DEVICE, "cuda: no current context; using device 0's primary context");
    made = 1;
  }
  cur = g_implicit_ctx;
out:
  pthread_mutex_unlock(&g_implicit_lock);
  if (res != TECORE_SUCCESS) return res;
  TE_CHECK(TE_CU(cuCtxSetCurrent, cur));
  /* the implicit context is new: give it every kernel now (init skipped
   * the preload when no context was current, so that a process that
   * works on another device never touches device 0) */
  if (made && te_device_ready_run(&te_cuda_ops) != TECORE_SUCCESS)
    TE_WARN(TECORE_SUBSYS_KERNEL, "loading the kernels failed (%s); launches will report it",
            tecore_last_error());
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_current_device(CUdevice *dev) {
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuCtxGetDevice, dev));
  return TECORE_SUCCESS;
}

/* Attribute a of dev, read once per device (dev < 64) into cache
 * (value + 1; 0 = not read yet). */
static tecore_result_t attr_once(int *cache, CUdevice dev, CUdevice_attribute a, int *v) {
  if (dev >= 0 && dev < 64) {
    int c = __atomic_load_n(&cache[dev], __ATOMIC_RELAXED);
    if (c) {
      *v = c - 1;
      return TECORE_SUCCESS;
    }
  }
  TE_CHECK(TE_CU(cuDeviceGetAttribute, v, a, dev));
  if (dev >= 0 && dev < 64) __atomic_store_n(&cache[dev], *v + 1, __ATOMIC_RELAXED);
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_device_cc(CUdevice dev, int *cc) {
  static int major_c[64], minor_c[64];
  int major = 0, minor = 0;
  TE_CHECK(attr_once(major_c, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &major));
  TE_CHECK(attr_once(minor_c, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &minor));
  *cc = major * 10 + minor;
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_device_sms(CUdevice dev, int *sms) {
  static int sms_c[64];
  return attr_once(sms_c, dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, sms);
}

tecore_result_t te_cuda_device(int ordinal, CUdevice *dev) {
  int count = 0;
  TE_CHECK(TE_CU(cuDeviceGetCount, &count));
  if (ordinal < 0 || ordinal >= count)
    return TE_ERR(TECORE_ERR_INVALID, "device ordinal %d out of range (%d device%s)", ordinal,
                  count, count == 1 ? "" : "s");
  TE_CHECK(TE_CU(cuDeviceGet, dev, ordinal));
  return TECORE_SUCCESS;
}
