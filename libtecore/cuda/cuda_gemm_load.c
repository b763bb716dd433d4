/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_gemm_load.c -- loads cuBLASLt for the cuda backend's GEMMs: dlopen
 * once (pthread_once) on the first GEMM -- TECORE_CUBLASLT_LIB when set,
 * else libcublasLt.so.13 then libcublasLt.so.12 (the loader's search path,
 * then the toolkit's usual /usr/local/cuda/lib64) -- every entry point
 * looked up with dlsym, and the process's one cublasLtHandle_t, created
 * under a mutex on first use (a failed creation is retried next call).
 *
 * A missing library is not an error until a GEMM needs it: libtecore
 * loads, and everything but GEMMs works, on machines without cuBLASLt. */
#include "cuda/cuda_gemm.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

TE_PARAM_STR(gemm_cublaslt_lib, "TECORE_CUBLASLT_LIB", "", NULL,
             "cuBLASLt to dlopen for GEMMs: a path or a soname (default: libcublasLt.so.13, "
             "then libcublasLt.so.12)")

struct te_lt_api te_lt;

static struct {
  pthread_once_t once;
  tecore_result_t status;
  char msg[1024];
  void *lib;
  size_t version;
  char path[512];
  pthread_mutex_t handle_lock;
  cublasLtHandle_t handle;   /* published with release once created */
} g_lt = {.once = PTHREAD_ONCE_INIT, .handle_lock = PTHREAD_MUTEX_INITIALIZER};

static void load_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void load_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_lt.msg, sizeof g_lt.msg, fmt, ap);
  va_end(ap);
  g_lt.status = TECORE_ERR_NO_LIBRARY;
}

/* Appends "name: reason; " to the list of failed attempts. */
static void *try_open(const char *name, char *tried, size_t n) {
  dlerror();
  void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (lib) {
    snprintf(g_lt.path, sizeof g_lt.path, "%s", name);
    return lib;
  }
  const char *e = dlerror();
  size_t len = strlen(tried);
  if (len < n) snprintf(tried + len, n - len, "%s%s", len ? "; " : "", e ? e : name);
  return NULL;
}

static void lt_load(void) {
  char tried[768] = "";
  const char *want = tecore_tunable_str(&gemm_cublaslt_lib);
  void *lib = NULL;
  if (want && want[0]) {
    lib = try_open(want, tried, sizeof tried);
    if (!lib) {
      load_fail("cuBLASLt not loaded: TECORE_CUBLASLT_LIB=%s cannot be opened (%s)", want, tried);
      return;
    }
  } else {
    static const char *const names[] = {"libcublasLt.so.13", "libcublasLt.so.12",
                                        "/usr/local/cuda/lib64/libcublasLt.so.13",
                                        "/usr/local/cuda/lib64/libcublasLt.so.12"};
    for (size_t i = 0; i < TE_ARRAY_SIZE(names) && !lib; i++)
      lib = try_open(names[i], tried, sizeof tried);
    if (!lib) {
      load_fail("cuBLASLt not found, so GEMMs cannot run on the cuda backend (tried: %s); "
                "install the CUDA toolkit's libcublas, add its folder to LD_LIBRARY_PATH, or "
                "set TECORE_CUBLASLT_LIB to the library's path", tried);
      return;
    }
  }
  void *fn;
#define TE_LT_LOAD_(name, req)                                                          \
  fn = dlsym(lib, #name);                                                               \
  if (!fn && (req)) {                                                                   \
    load_fail("cuBLASLt at %s lacks %s: the library is too old or not cuBLASLt",        \
              g_lt.path, #name);                                                        \
    dlclose(lib);                                                                       \
    return;                                                                             \
  }                                                                                     \
  te_lt.p_##name = (__typeof__(te_lt.p_##name))fn;
  TE_LT_SYMBOLS(TE_LT_LOAD_)
#undef TE_LT_LOAD_
  g_lt.lib = lib;
  g_lt.version = te_lt.p_cublasLtGetVersion();
  if (g_lt.version < 120000) {
    load_fail("cuBLASLt at %s is version %zu; libte needs 12.0 or newer (FP8 GEMMs)", g_lt.path,
              g_lt.version);
    return;
  }
  g_lt.status = TECORE_SUCCESS;
  TE_INFO(TECORE_SUBSYS_INIT, "gemm: loaded cuBLASLt %zu.%zu.%zu from %s (built against %d)",
          g_lt.version / 10000, g_lt.version / 100 % 100, g_lt.version % 100, g_lt.path,
          CUBLAS_VERSION);
}

size_t te_lt_version(void) {
  return g_lt.status == TECORE_SUCCESS ? g_lt.version : 0;
}

tecore_result_t te_lt_result(cublasStatus_t s, const char *fn, const char *what, const char *file,
                             int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return TECORE_SUCCESS;
  tecore_result_t r;
  switch (s) {
  case CUBLAS_STATUS_INVALID_VALUE: r = TECORE_ERR_INVALID; break;
  case CUBLAS_STATUS_NOT_SUPPORTED:
  case CUBLAS_STATUS_ARCH_MISMATCH: r = TECORE_ERR_NOT_SUPPORTED; break;
  case CUBLAS_STATUS_ALLOC_FAILED: r = TECORE_ERR_NOMEM; break;
  case CUBLAS_STATUS_NOT_INITIALIZED: r = TECORE_ERR_NO_LIBRARY; break;
  default: r = TECORE_ERR_DRIVER; break;
  }
  const char *name = te_lt.p_cublasLtGetStatusName ? te_lt.p_cublasLtGetStatusName(s) : NULL;
  const char *text = te_lt.p_cublasLtGetStatusString ? te_lt.p_cublasLtGetStatusString(s) : NULL;
  return te_error_set(r, file, line, "%s failed: %s (%d): %s%s%s", fn,
                      name ? name : "CUBLAS_STATUS_?", (int)s, text ? text : "no description",
                      what ? ": " : "", what ? what : "");
}

tecore_result_t te_lt_ready(cublasLtHandle_t *handle) {
  pthread_once(&g_lt.once, lt_load);
  if (g_lt.status != TECORE_SUCCESS) return TE_ERR(g_lt.status, "tecore_gemm: %s", g_lt.msg);
  cublasLtHandle_t h = __atomic_load_n(&g_lt.handle, __ATOMIC_ACQUIRE);
  if (h) {
    *handle = h;
    return TECORE_SUCCESS;
  }
  TE_CHECK(te_cuda_need_ctx());
  tecore_result_t r = TECORE_SUCCESS;
  pthread_mutex_lock(&g_lt.handle_lock);
  if (!g_lt.handle) {
    cublasLtHandle_t nh = NULL;
    r = TE_LT(cublasLtCreate, &nh);
    if (r == TECORE_SUCCESS) __atomic_store_n(&g_lt.handle, nh, __ATOMIC_RELEASE);
  }
  h = g_lt.handle;
  pthread_mutex_unlock(&g_lt.handle_lock);
  if (r != TECORE_SUCCESS) return r;
  *handle = h;
  return TECORE_SUCCESS;
}
