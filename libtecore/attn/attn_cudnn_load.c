/* SPDX-License-Identifier: Apache-2.0 */
/* attn_cudnn_load.c -- loads cuDNN for the attention backend: dlopen once
 * (pthread_once) on the first question -- TECORE_CUDNN_LIB when set, else
 * libcudnn.so.9 through the loader's search path -- every entry point of
 * TE_DNN_SYMBOLS looked up with dlsym, the version checked; then one
 * cudnnHandle_t per device context, created on first use and destroyed by
 * te_dnn_handles_free (the plan cache's tecore_fini hook calls it after
 * freeing the plans, which refer to the handles).
 *
 * A missing library is no error until attention asks: the cudnn row then
 * refuses with the reason and the next row (libte's kernel) runs. */
#include "attn/attn_cudnn_api.h"

#include "cuda/cuda_backend.h"
#include "internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

struct te_dnn_api te_dnn;

static struct {
  pthread_once_t once;
  int ok;
  char msg[768];
  void *lib;
  size_t version;
} g_dnn = {.once = PTHREAD_ONCE_INIT};

#define TE_DNN_MAX_HANDLES 16
static pthread_mutex_t handle_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  tecore_ctx_t ctx;
  te_dnn_handle_t h;
} handles[TE_DNN_MAX_HANDLES];
static int nhandles;

static void dnn_load(void) {
  const char *want = te_dnn_lib_name();
  const char *name = want && want[0] ? want : "libcudnn.so.9";
  dlerror();
  void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *e = dlerror();
    snprintf(g_dnn.msg, sizeof g_dnn.msg,
             "cuDNN not loaded: %s (%s); install cuDNN 9, add its lib folder to "
             "LD_LIBRARY_PATH or set TECORE_CUDNN_LIB to libcudnn.so.9's path",
             name, e ? e : "dlopen failed");
    return;
  }
  void *fn;
#define TE_DNN_LOAD_(sym, ret, params, req)                                          \
  fn = dlsym(lib, #sym);                                                             \
  if (!fn && (req)) {                                                                \
    snprintf(g_dnn.msg, sizeof g_dnn.msg, "cuDNN at %s lacks %s: not cuDNN 9", name, #sym); \
    dlclose(lib);                                                                    \
    return;                                                                          \
  }                                                                                  \
  te_dnn.p_##sym = (ret(*) params)fn;
  TE_DNN_SYMBOLS(TE_DNN_LOAD_)
#undef TE_DNN_LOAD_
  size_t v = te_dnn.p_cudnnGetVersion();
  if (v < TE_DNN_MIN_VERSION) {
    snprintf(g_dnn.msg, sizeof g_dnn.msg,
             "cuDNN at %s is version %zu.%zu.%zu; attention needs %d.%d or newer", name,
             v / 10000, v / 100 % 100, v % 100, TE_DNN_MIN_VERSION / 10000,
             TE_DNN_MIN_VERSION / 100 % 100);
    dlclose(lib);
    return;
  }
  g_dnn.lib = lib;
  g_dnn.version = v;
  g_dnn.ok = 1;
  TE_INFO(TECORE_SUBSYS_INIT, "attention: loaded cuDNN %zu.%zu.%zu from %s", v / 10000,
          v / 100 % 100, v % 100, name);
}

/* 0 when cuDNN is usable; else -1 and why says what failed (every later
 * call repeats it). */
static int te_dnn_load(char *why, size_t why_len) {
  pthread_once(&g_dnn.once, dnn_load);
  if (g_dnn.ok) return 0;
  snprintf(why, why_len, "%s", g_dnn.msg);
  return -1;
}

size_t te_dnn_version(void) { return g_dnn.ok ? g_dnn.version : 0; }

tecore_result_t te_dnn_result(te_dnn_status_t s) {
  switch (s / 1000) {
  case 0: return TECORE_SUCCESS;
  case 1: return TECORE_ERR_NO_LIBRARY;
  case 2: return TECORE_ERR_INVALID;
  case 3: return TECORE_ERR_NOT_SUPPORTED;
  case 4: return s == 4004 ? TECORE_ERR_DEVICE_NOMEM : TECORE_ERR_INTERNAL;
  default: return TECORE_ERR_DRIVER;
  }
}

void te_dnn_describe(te_dnn_status_t s, const char *fn, char *buf, size_t len) {
  const char *name = te_dnn.p_cudnnGetErrorString ? te_dnn.p_cudnnGetErrorString(s) : NULL;
  char last[256] = "";
  if (te_dnn.p_cudnnGetLastErrorString) te_dnn.p_cudnnGetLastErrorString(last, sizeof last);
  snprintf(buf, len, "%s failed: %s (%d)%s%s", fn, name ? name : "CUDNN_STATUS_?", s,
           last[0] ? ": " : "", last);
}

int te_dnn_relax_capture(void) {
  if (!te_cu.p_cuThreadExchangeStreamCaptureMode) return -1;
  CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
  if (te_cu.p_cuThreadExchangeStreamCaptureMode(&m) != CUDA_SUCCESS) return -1;
  return (int)m;
}

void te_dnn_restore_capture(int token) {
  if (token < 0) return;
  CUstreamCaptureMode m = (CUstreamCaptureMode)token;
  (void)te_cu.p_cuThreadExchangeStreamCaptureMode(&m);
}

void te_dnn_handles_free(void) {
  pthread_mutex_lock(&handle_lock);
  for (int i = 0; i < nhandles; i++) (void)te_dnn.p_cudnnDestroy(handles[i].h);
  memset(handles, 0, sizeof handles);
  nhandles = 0;
  pthread_mutex_unlock(&handle_lock);
}

te_dnn_handle_t te_dnn_handle(char *why, size_t why_len) {
  if (te_dnn_load(why, why_len) != 0) return NULL;
  tecore_ctx_t ctx = NULL;
  if (te_cuda_need_ctx() != TECORE_SUCCESS || tecore_ctx_get_current(&ctx) != TECORE_SUCCESS) {
    snprintf(why, why_len, "no current CUDA context: %s", tecore_last_error());
    return NULL;
  }
  te_dnn_handle_t h = NULL;
  pthread_mutex_lock(&handle_lock);
  for (int i = 0; i < nhandles && !h; i++)
    if (handles[i].ctx == ctx) h = handles[i].h;
  if (!h && nhandles == TE_DNN_MAX_HANDLES)
    snprintf(why, why_len, "cuDNN handles exist for %d contexts already", nhandles);
  else if (!h) {
    int tok = te_dnn_relax_capture();
    te_dnn_status_t s = te_dnn.p_cudnnCreate(&h);
    te_dnn_restore_capture(tok);
    if (s != TE_DNN_SUCCESS) {
      te_dnn_describe(s, "cudnnCreate", why, why_len);
      h = NULL;
    } else {
      handles[nhandles].ctx = ctx;
      handles[nhandles].h = h;
      nhandles++;
    }
  }
  pthread_mutex_unlock(&handle_lock);
  return h;
}
