/* SPDX-License-Identifier: Apache-2.0 */
/* device.c -- the public device API: backend selection (TE_DEVICE) and the
 * argument checks every call makes before it reaches the backend's ops.
 * Backends may assume what is checked here (see device_ops.h). */
#include "device_ops.h"
#include "graph_owner.h"
#include "profile_hook.h"
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
void te_device_fini(void) {
  const struct te_device_ops *o = __atomic_load_n(&dev_ops, __ATOMIC_ACQUIRE);
  if (o) (void)o->fini(__atomic_load_n(&dev_ready, __ATOMIC_ACQUIRE) != NULL);
  te_graph_owner_fini();
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

/* Declares o = the backend's ops, or returns the init failure. */
#define OPS(o)                                   \
  const struct te_device_ops *o = te_ops();      \
  if (!o) return dev_init_result

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

static tecore_result_t check_ordinal(const struct te_device_ops *o, int ordinal, const char *fn) {
  int n = 0;
  TE_CHECK(o->device_count(&n));
  TE_ARG(ordinal >= 0 && ordinal < n, "%s: device ordinal %d outside [0, %d)", fn, ordinal, n);
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_device_get_props(int ordinal, struct tecore_device_props *props) {
  TE_ARG(props, "tecore_device_get_props: props is NULL");
  OPS(o);
  TE_CHECK(check_ordinal(o, ordinal, __func__));
  memset(props, 0, sizeof *props);
  return o->device_props(ordinal, props);
}

TE_EXPORT tecore_result_t tecore_device_peer(int a, int b, int *can, int *link) {
  TE_ARG(can, "tecore_device_peer: can is NULL");
  TE_ARG(link, "tecore_device_peer: link is NULL");
  OPS(o);
  TE_CHECK(check_ordinal(o, a, __func__));
  TE_CHECK(check_ordinal(o, b, __func__));
  return o->device_peer(a, b, can, link);
}

/* ---- contexts ---- */

TE_EXPORT tecore_result_t tecore_ctx_create(int ordinal, tecore_ctx_t *ctx) {
  TE_ARG(ctx, "tecore_ctx_create: ctx is NULL");
  OPS(o);
  TE_CHECK(check_ordinal(o, ordinal, __func__));
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

TE_EXPORT tecore_result_t tecore_stream_priority_range(int *least, int *greatest) {
  TE_ARG(least, "tecore_stream_priority_range: least is NULL");
  TE_ARG(greatest, "tecore_stream_priority_range: greatest is NULL");
  OPS(o);
  return o->stream_priority_range(least, greatest);
}

TE_EXPORT tecore_result_t tecore_stream_create(unsigned flags, int priority,
                                               tecore_stream_t *stream) {
  TE_ARG(stream, "tecore_stream_create: stream is NULL");
  TE_ARG(!(flags & ~TECORE_STREAM_NON_BLOCKING), "tecore_stream_create: unknown flags 0x%x",
         flags);
  OPS(o);
  int least = 0, greatest = 0;
  TE_CHECK(o->stream_priority_range(&least, &greatest));
  TE_ARG(priority >= greatest && priority <= least,
         "tecore_stream_create: priority %d outside [%d, %d]", priority, greatest, least);
  /* a failure leaves *stream as the caller had it */
  __typeof__(*stream) out_ = NULL;
  TE_CHECK(o->stream_create(flags, priority, &out_));
  *stream = out_;
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_stream_destroy(tecore_stream_t stream) {
  TE_ARG(stream, "tecore_stream_destroy: stream is NULL (the default stream cannot be destroyed)");
  OPS(o);
  return o->stream_destroy(stream);
}

TE_EXPORT tecore_result_t tecore_stream_synchronize(tecore_stream_t stream) {
  OPS(o);
  return o->stream_synchronize(stream);
}

TE_EXPORT tecore_result_t tecore_stream_query(tecore_stream_t stream) {
  OPS(o);
  return o->stream_query(stream);
}

TE_EXPORT tecore_result_t tecore_stream_wait_event(tecore_stream_t stream, tecore_event_t event) {
  TE_ARG(event, "tecore_stream_wait_event: event is NULL");
  OPS(o);
  return o->stream_wait_event(stream, event);
}

TE_EXPORT tecore_result_t tecore_stream_get_priority(tecore_stream_t stream, int *priority) {
  TE_ARG(priority, "tecore_stream_get_priority: priority is NULL");
  OPS(o);
  return o->stream_get_priority(stream, priority);
}

/* ---- events ---- */

TE_EXPORT tecore_result_t tecore_event_create(unsigned flags, tecore_event_t *event) {
  TE_ARG(event, "tecore_event_create: event is NULL");
  TE_ARG(!(flags & ~(TECORE_EVENT_BLOCKING_SYNC | TECORE_EVENT_DISABLE_TIMING)),
         "tecore_event_create: unknown flags 0x%x", flags);
  OPS(o);
  /* a failure leaves *event as the caller had it */
  __typeof__(*event) out_ = NULL;
  TE_CHECK(o->event_create(flags, &out_));
  *event = out_;
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_event_destroy(tecore_event_t event) {
  TE_ARG(event, "tecore_event_destroy: event is NULL");
  OPS(o);
  return o->event_destroy(event);
}

TE_EXPORT tecore_result_t tecore_event_record(tecore_event_t event, tecore_stream_t stream) {
  TE_ARG(event, "tecore_event_record: event is NULL");
  OPS(o);
  return o->event_record(event, stream);
}

TE_EXPORT tecore_result_t tecore_event_synchronize(tecore_event_t event) {
  TE_ARG(event, "tecore_event_synchronize: event is NULL");
  OPS(o);
  return o->event_synchronize(event);
}

TE_EXPORT tecore_result_t tecore_event_query(tecore_event_t event) {
  TE_ARG(event, "tecore_event_query: event is NULL");
  OPS(o);
  return o->event_query(event);
}

TE_EXPORT tecore_result_t tecore_event_elapsed(float *ms, tecore_event_t start,
                                               tecore_event_t end) {
  TE_ARG(ms, "tecore_event_elapsed: ms is NULL");
  TE_ARG(start, "tecore_event_elapsed: start is NULL");
  TE_ARG(end, "tecore_event_elapsed: end is NULL");
  OPS(o);
  return o->event_elapsed(ms, start, end);
}

/* ---- stream memory operations ---- */

static tecore_result_t memop_check(tecore_devptr_t addr, unsigned width, int cond,
                                   const char *fn) {
  TE_ARG(addr, "%s: addr is NULL", fn);
  TE_ARG(addr % (width / 8) == 0, "%s: addr 0x%llx is not %u-byte aligned", fn,
         (unsigned long long)addr, width / 8);
  TE_ARG(cond >= TECORE_WAIT_GEQ && cond <= TECORE_WAIT_NOR, "%s: unknown condition %d", fn, cond);
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_stream_write_value64(tecore_stream_t stream, tecore_devptr_t addr,
                                                      uint64_t value) {
  TE_CHECK(memop_check(addr, 64, 0, __func__));
  OPS(o);
  return o->stream_write_value(stream, addr, value, 64);
}

TE_EXPORT tecore_result_t tecore_stream_wait_value64(tecore_stream_t stream, tecore_devptr_t addr,
                                                     uint64_t value, tecore_wait_cond_t cond) {
  TE_CHECK(memop_check(addr, 64, (int)cond, __func__));
  OPS(o);
  return o->stream_wait_value(stream, addr, value, cond, 64);
}

TE_EXPORT tecore_result_t tecore_stream_write_value32(tecore_stream_t stream, tecore_devptr_t addr,
                                                      uint32_t value) {
  TE_CHECK(memop_check(addr, 32, 0, __func__));
  OPS(o);
  return o->stream_write_value(stream, addr, value, 32);
}

TE_EXPORT tecore_result_t tecore_stream_wait_value32(tecore_stream_t stream, tecore_devptr_t addr,
                                                     uint32_t value, tecore_wait_cond_t cond) {
  TE_CHECK(memop_check(addr, 32, (int)cond, __func__));
  OPS(o);
  return o->stream_wait_value(stream, addr, value, cond, 32);
}

/* ---- capture and graphs ---- */

TE_EXPORT tecore_result_t tecore_stream_begin_capture(tecore_stream_t stream,
                                                      tecore_capture_mode_t mode) {
  TE_ARG(stream, "tecore_stream_begin_capture: the legacy default stream cannot capture");
  TE_ARG(mode >= TECORE_CAPTURE_GLOBAL && mode <= TECORE_CAPTURE_RELAXED,
         "tecore_stream_begin_capture: unknown mode %d", (int)mode);
  OPS(o);
  return o->stream_begin_capture(stream, mode);
}

TE_EXPORT tecore_result_t tecore_stream_end_capture(tecore_stream_t stream,
                                                    tecore_graph_t *graph) {
  TE_ARG(stream, "tecore_stream_end_capture: stream is NULL");
  TE_ARG(graph, "tecore_stream_end_capture: graph is NULL");
  OPS(o);
  /* as the driver's: an ended (even invalidated) capture leaves no graph
   * behind, and the man page says *graph is NULL on failure */
  *graph = NULL;
  return o->stream_end_capture(stream, graph);
}

TE_EXPORT tecore_result_t tecore_stream_capture_status(tecore_stream_t stream,
                                                       tecore_capture_status_t *status) {
  TE_ARG(status, "tecore_stream_capture_status: status is NULL");
  OPS(o);
  return o->stream_capture_status(stream, status);
}

TE_EXPORT tecore_result_t tecore_graph_destroy(tecore_graph_t graph) {
  TE_ARG(graph, "tecore_graph_destroy: graph is NULL");
  OPS(o);
  TE_CHECK(o->graph_destroy(graph));
  te_graph_owner_forget(graph, 0);
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_graph_node_count(tecore_graph_t graph, size_t *count) {
  TE_ARG(graph, "tecore_graph_node_count: graph is NULL");
  TE_ARG(count, "tecore_graph_node_count: count is NULL");
  OPS(o);
  return o->graph_node_count(graph, count);
}

TE_EXPORT tecore_result_t tecore_graph_dot(tecore_graph_t graph, const char *path) {
  TE_ARG(graph, "tecore_graph_dot: graph is NULL");
  TE_ARG(path && path[0], "tecore_graph_dot: path is NULL or empty");
  OPS(o);
  return o->graph_dot(graph, path);
}

TE_EXPORT tecore_result_t tecore_graph_instantiate(tecore_graph_exec_t *exec,
                                                   tecore_graph_t graph) {
  TE_ARG(exec, "tecore_graph_instantiate: exec is NULL");
  TE_ARG(graph, "tecore_graph_instantiate: graph is NULL");
  OPS(o);
  /* a failure leaves *exec as the caller had it */
  __typeof__(*exec) out_ = NULL;
  TE_CHECK(o->graph_instantiate(&out_, graph));
  te_graph_owner_exec_add(o, out_, graph);
  *exec = out_;
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_graph_exec_destroy(tecore_graph_exec_t exec) {
  TE_ARG(exec, "tecore_graph_exec_destroy: exec is NULL");
  OPS(o);
  TE_CHECK(o->graph_exec_destroy(exec));
  te_graph_owner_forget(exec, 1);
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_graph_launch(tecore_graph_exec_t exec, tecore_stream_t stream) {
  TE_ARG(exec, "tecore_graph_launch: exec is NULL");
  OPS(o);
  return o->graph_launch(exec, stream);
}

TE_EXPORT tecore_result_t tecore_graph_upload(tecore_graph_exec_t exec, tecore_stream_t stream) {
  TE_ARG(exec, "tecore_graph_upload: exec is NULL");
  OPS(o);
  return o->graph_upload(exec, stream);
}

TE_EXPORT tecore_result_t tecore_graph_exec_update(tecore_graph_exec_t exec, tecore_graph_t graph,
                                                   tecore_graph_update_result_t *why) {
  TE_ARG(exec, "tecore_graph_exec_update: exec is NULL");
  TE_ARG(graph, "tecore_graph_exec_update: graph is NULL");
  tecore_graph_update_result_t local;
  if (!why) why = &local;
  *why = TECORE_GRAPH_UPDATE_SUCCESS;
  OPS(o);
  return o->graph_exec_update(exec, graph, why);
}

TE_EXPORT tecore_result_t tecore_graph_exec_update_or_instantiate(tecore_graph_exec_t *exec,
                                                                  tecore_graph_t graph,
                                                                  int *reinstantiated) {
  TE_ARG(exec, "tecore_graph_exec_update_or_instantiate: exec is NULL");
  TE_ARG(graph, "tecore_graph_exec_update_or_instantiate: graph is NULL");
  OPS(o);
  int re = 0;
  tecore_result_t r = TECORE_ERR_GRAPH_UPDATE;
  tecore_graph_update_result_t why = TECORE_GRAPH_UPDATE_SUCCESS;
  if (*exec) r = o->graph_exec_update(*exec, graph, &why);
  if (r == TECORE_ERR_GRAPH_UPDATE) {
    tecore_graph_exec_t fresh = NULL;
    if (*exec)
      TE_INFO(TECORE_SUBSYS_GRAPH, "graph update refused (%s); instantiating anew",
              tecore_graph_update_result_name(why));
    TE_CHECK(o->graph_instantiate(&fresh, graph));
    te_graph_owner_exec_add(o, fresh, graph);
    if (*exec && o->graph_exec_destroy(*exec) == TECORE_SUCCESS) te_graph_owner_forget(*exec, 1);
    *exec = fresh;
    re = 1;
    r = TECORE_SUCCESS;
  }
  if (reinstantiated) *reinstantiated = re;
  return r;
}

TE_EXPORT const char *tecore_graph_update_result_name(tecore_graph_update_result_t r) {
  static const char *names[] = {"success",           "error",
                                "topology changed",  "node type changed",
                                "function changed",  "parameters changed",
                                "not supported",     "unsupported function change",
                                "attributes changed"};
  return (unsigned)r < TE_ARRAY_SIZE(names) ? names[r] : "unknown";
}

TE_EXPORT tecore_result_t tecore_stream_begin_capture_to_graph(tecore_stream_t stream,
                                                               tecore_graph_t graph,
                                                               tecore_capture_mode_t mode) {
  TE_ARG(stream, "tecore_stream_begin_capture_to_graph: the legacy default stream cannot capture");
  TE_ARG(graph, "tecore_stream_begin_capture_to_graph: graph is NULL");
  TE_ARG(mode >= TECORE_CAPTURE_GLOBAL && mode <= TECORE_CAPTURE_RELAXED,
         "tecore_stream_begin_capture_to_graph: unknown mode %d", (int)mode);
  OPS(o);
  return o->stream_begin_capture_to_graph(stream, graph, mode);
}

#define GRAPH_INSTANTIATE_FLAGS                                                  \
  (TECORE_GRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH | TECORE_GRAPH_INSTANTIATE_UPLOAD | \
   TECORE_GRAPH_INSTANTIATE_USE_NODE_PRIORITY)

TE_EXPORT tecore_result_t tecore_graph_instantiate_with_flags(tecore_graph_exec_t *exec,
                                                              tecore_graph_t graph, unsigned flags,
                                                              tecore_stream_t upload_stream) {
  TE_ARG(exec, "tecore_graph_instantiate_with_flags: exec is NULL");
  TE_ARG(graph, "tecore_graph_instantiate_with_flags: graph is NULL");
  TE_ARG(!(flags & ~GRAPH_INSTANTIATE_FLAGS),
         "tecore_graph_instantiate_with_flags: unknown flags 0x%x", flags & ~GRAPH_INSTANTIATE_FLAGS);
  OPS(o);
  /* a failure leaves *exec as the caller had it */
  __typeof__(*exec) out_ = NULL;
  TE_CHECK(o->graph_instantiate_flags(&out_, graph, flags, upload_stream));
  te_graph_owner_exec_add(o, out_, graph);
  *exec = out_;
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_graph_nodes(tecore_graph_t graph,
                                             struct tecore_graph_node_desc *nodes, size_t max,
                                             size_t *count) {
  TE_ARG(graph, "tecore_graph_nodes: graph is NULL");
  TE_ARG(count, "tecore_graph_nodes: count is NULL");
  TE_ARG(nodes || max == 0, "tecore_graph_nodes: nodes is NULL but max is %zu", max);
  OPS(o);
  /* entries past the graph's nodes stay as they were (max may exceed
   * what nodes really holds); a failure leaves *count */
  size_t n = 0;
  TE_CHECK(o->graph_nodes(graph, nodes, max, &n));
  *count = n;
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_graph_kernel_node_args(tecore_graph_t graph,
                                                        tecore_graph_node_t node,
                                                        void *const *args) {
  TE_ARG(graph, "tecore_graph_kernel_node_args: graph is NULL");
  TE_ARG(node, "tecore_graph_kernel_node_args: node is NULL");
  TE_ARG(args, "tecore_graph_kernel_node_args: args is NULL");
  OPS(o);
  TE_CHECK(te_graph_owner_check_graph(o, graph, node, "tecore_graph_kernel_node_args"));
  return o->graph_kernel_node_args(graph, node, args);
}

TE_EXPORT tecore_result_t tecore_graph_exec_kernel_node_set(tecore_graph_exec_t exec,
                                                            tecore_graph_node_t node,
                                                            const struct tecore_launch_cfg *cfg,
                                                            void *const *args) {
  TE_ARG(exec, "tecore_graph_exec_kernel_node_set: exec is NULL");
  TE_ARG(node, "tecore_graph_exec_kernel_node_set: node is NULL");
  TE_ARG(args, "tecore_graph_exec_kernel_node_set: args is NULL");
  if (cfg) TE_CHECK(te_launch_cfg_check(cfg, "tecore_graph_exec_kernel_node_set: cfg"));
  OPS(o);
  TE_CHECK(te_graph_owner_check_exec(exec, node, "tecore_graph_exec_kernel_node_set"));
  /* the new pointers as aligned as the node's kernel needs (kernel.c), on
   * both backends: a misaligned one faulted at the next launch */
  int id = -1;
  if (te_graph_owner_exec_kernel_id(o, exec, node, &id) != TECORE_SUCCESS) tecore_clear_error();
  else if (id >= 0) TE_CHECK(te_kernel_check_align(id, args, "tecore_graph_exec_kernel_node_set"));
  return o->graph_exec_kernel_node_set(exec, node, cfg, args);
}

TE_EXPORT tecore_result_t tecore_graph_exec_memcpy_node_set(tecore_graph_exec_t exec,
                                                            tecore_graph_node_t node,
                                                            tecore_devptr_t dst,
                                                            tecore_devptr_t src) {
  TE_ARG(exec, "tecore_graph_exec_memcpy_node_set: exec is NULL");
  TE_ARG(node, "tecore_graph_exec_memcpy_node_set: node is NULL");
  TE_ARG(dst, "tecore_graph_exec_memcpy_node_set: dst is NULL");
  TE_ARG(src, "tecore_graph_exec_memcpy_node_set: src is NULL");
  OPS(o);
  TE_CHECK(te_graph_owner_check_exec(exec, node, "tecore_graph_exec_memcpy_node_set"));
  return o->graph_exec_memcpy_node_set(exec, node, dst, src);
}

TE_EXPORT tecore_result_t tecore_graph_exec_memset_node_set(tecore_graph_exec_t exec,
                                                            tecore_graph_node_t node,
                                                            tecore_devptr_t dst, uint32_t value) {
  TE_ARG(exec, "tecore_graph_exec_memset_node_set: exec is NULL");
  TE_ARG(node, "tecore_graph_exec_memset_node_set: node is NULL");
  TE_ARG(dst, "tecore_graph_exec_memset_node_set: dst is NULL");
  OPS(o);
  TE_CHECK(te_graph_owner_check_exec(exec, node, "tecore_graph_exec_memset_node_set"));
  return o->graph_exec_memset_node_set(exec, node, dst, value);
}

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
  TE_CHECK(check_ordinal(o, ordinal, __func__));
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

TE_EXPORT tecore_result_t tecore_mc_granularity(size_t bytes, int ndevices, size_t *granularity) {
  TE_ARG(granularity, "tecore_mc_granularity: granularity is NULL");
  TE_ARG(bytes > 0, "tecore_mc_granularity: bytes is 0");
  TE_ARG(ndevices > 0, "tecore_mc_granularity: ndevices %d is not positive", ndevices);
  OPS(o);
  TE_CHECK(mc_allowed(o, __func__));
  return o->mc_granularity(bytes, ndevices, granularity);
}

TE_EXPORT tecore_result_t tecore_mc_create(size_t bytes, int ndevices, unsigned flags,
                                           tecore_mc_handle_t *mc) {
  TE_ARG(mc, "tecore_mc_create: mc is NULL");
  TE_ARG(bytes > 0, "tecore_mc_create: bytes is 0");
  TE_ARG(ndevices > 0, "tecore_mc_create: ndevices %d is not positive", ndevices);
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
  TE_CHECK(check_ordinal(o, ordinal, __func__));
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
  TE_CHECK(check_ordinal(o, ordinal, __func__));
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
