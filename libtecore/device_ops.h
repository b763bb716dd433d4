/* device_ops.h -- the private device ops table: every device operation the
 * libraries need, implemented twice (cuda/: the CUDA Driver API; vdev/:
 * the test VM's virtual GPU).
 *
 * Contract for implementations:
 * - Arguments are already validated by the public layer (device.c): no NULL
 *   out-pointers, no zero sizes where the API forbids them, alignment
 *   checked.  Backends check what only they can know (unknown handles,
 *   driver failures, capture legality) and fail with TE_ERR(code, "...")
 *   so the thread's detail names the driver call and its result.
 * - stream == NULL means the legacy default stream (synchronizing with
 *   other blocking streams, as the driver does).
 * - Every op is thread-safe.
 * - ctx: operations act on the calling thread's current context; ops that
 *   need one and find none make device 0's primary context current (as the
 *   runtime API does), so simple callers need no ctx calls. */
#ifndef TECORE_DEVICE_OPS_H
#define TECORE_DEVICE_OPS_H

#include "internal.h"

/* A registered kernel, as the backends see it. */
struct te_kernel_entry {
  const struct tecore_kernel_def *def;
  const struct tecore_kernel_table *table;
  int id;
  int table_index;           /* index of table in the registry */
  void *backend_handle;      /* cuda: CUkernel (loaded on first launch) */
};

/* A registered table's backend state. */
struct te_kernel_module {
  const struct tecore_kernel_table *table;
  void *backend_handle;      /* cuda: CUlibrary */
};

struct te_device_ops {
  const char *name;
  tecore_backend_t backend;

  /* init: returns TECORE_ERR_NO_DRIVER / TECORE_ERR_NO_DEVICE when unusable */
  tecore_result_t (*init)(void);
  tecore_result_t (*driver_version)(int *version);
  tecore_result_t (*device_count)(int *count);
  tecore_result_t (*device_props)(int ordinal, struct tecore_device_props *props);
  tecore_result_t (*device_peer)(int a, int b, int *can, int *link);

  tecore_result_t (*ctx_create)(int ordinal, tecore_ctx_t *ctx);
  tecore_result_t (*ctx_destroy)(tecore_ctx_t ctx);
  tecore_result_t (*ctx_set_current)(tecore_ctx_t ctx);
  tecore_result_t (*ctx_get_current)(tecore_ctx_t *ctx);
  tecore_result_t (*ctx_synchronize)(void);

  tecore_result_t (*mem_alloc)(size_t bytes, tecore_devptr_t *dptr);
  tecore_result_t (*mem_free)(tecore_devptr_t dptr);
  tecore_result_t (*mem_info)(size_t *free_bytes, size_t *total_bytes);
  tecore_result_t (*mem_alloc_host)(size_t bytes, void **ptr);
  tecore_result_t (*mem_free_host)(void *ptr);
  tecore_result_t (*mem_host_register)(void *ptr, size_t bytes, unsigned flags);
  tecore_result_t (*mem_host_unregister)(void *ptr);
  tecore_result_t (*mem_host_device_ptr)(void *host, tecore_devptr_t *dptr);

  tecore_result_t (*memcpy_async)(tecore_devptr_t dst, tecore_devptr_t src, size_t bytes,
                                  tecore_stream_t stream);
  tecore_result_t (*memcpy_sync)(tecore_devptr_t dst, tecore_devptr_t src, size_t bytes);
  /* elem_size is 1, 2 or 4; value holds the low elem_size bytes */
  tecore_result_t (*memset_async)(tecore_devptr_t dst, uint32_t value, unsigned elem_size,
                                  size_t count, tecore_stream_t stream);

  tecore_result_t (*stream_priority_range)(int *least, int *greatest);
  tecore_result_t (*stream_create)(unsigned flags, int priority, tecore_stream_t *stream);
  tecore_result_t (*stream_destroy)(tecore_stream_t stream);
  tecore_result_t (*stream_synchronize)(tecore_stream_t stream);
  tecore_result_t (*stream_query)(tecore_stream_t stream);
  tecore_result_t (*stream_wait_event)(tecore_stream_t stream, tecore_event_t event);
  tecore_result_t (*stream_get_priority)(tecore_stream_t stream, int *priority);

  tecore_result_t (*event_create)(unsigned flags, tecore_event_t *event);
  tecore_result_t (*event_destroy)(tecore_event_t event);
  tecore_result_t (*event_record)(tecore_event_t event, tecore_stream_t stream);
  tecore_result_t (*event_synchronize)(tecore_event_t event);
  tecore_result_t (*event_query)(tecore_event_t event);
  tecore_result_t (*event_elapsed)(float *ms, tecore_event_t start, tecore_event_t end);

  /* width is 32 or 64 */
  tecore_result_t (*stream_write_value)(tecore_stream_t stream, tecore_devptr_t addr,
                                        uint64_t value, unsigned width);
  tecore_result_t (*stream_wait_value)(tecore_stream_t stream, tecore_devptr_t addr,
                                       uint64_t value, tecore_wait_cond_t cond, unsigned width);

  /* Loads a table's fatbin (cuda) once; called under the registry lock. */
  tecore_result_t (*kernel_module_load)(struct te_kernel_module *mod);
  /* Resolves one kernel of a loaded module into the current context
   * (cuda: cuKernelGetFunction), so that no launch loads code: loading
   * waits for streams blocked on a stream memory op and would deadlock
   * there.  NULL when the backend needs nothing (vdev). */
  tecore_result_t (*kernel_prepare)(struct te_kernel_entry *k, struct te_kernel_module *mod);
  /* Launches (or, in a capturing stream, records) one kernel. */
  tecore_result_t (*kernel_launch)(struct te_kernel_entry *k, struct te_kernel_module *mod,
                                   const struct tecore_launch_cfg *cfg, void *const *args,
                                   tecore_stream_t stream);

  tecore_result_t (*stream_begin_capture)(tecore_stream_t stream, tecore_capture_mode_t mode);
  tecore_result_t (*stream_end_capture)(tecore_stream_t stream, tecore_graph_t *graph);
  tecore_result_t (*stream_capture_status)(tecore_stream_t stream,
                                           tecore_capture_status_t *status);
  tecore_result_t (*graph_destroy)(tecore_graph_t graph);
  tecore_result_t (*graph_node_count)(tecore_graph_t graph, size_t *count);
  tecore_result_t (*graph_dot)(tecore_graph_t graph, const char *path);
  tecore_result_t (*graph_instantiate)(tecore_graph_exec_t *exec, tecore_graph_t graph);
  tecore_result_t (*graph_exec_destroy)(tecore_graph_exec_t exec);
  tecore_result_t (*graph_launch)(tecore_graph_exec_t exec, tecore_stream_t stream);
  tecore_result_t (*graph_upload)(tecore_graph_exec_t exec, tecore_stream_t stream);
  /* On refusal: TECORE_ERR_GRAPH_UPDATE and *why set; exec unchanged. */
  tecore_result_t (*graph_exec_update)(tecore_graph_exec_t exec, tecore_graph_t graph,
                                       tecore_graph_update_result_t *why);
  /* Capture appended after graph's leaves; end_capture returns graph. */
  tecore_result_t (*stream_begin_capture_to_graph)(tecore_stream_t stream, tecore_graph_t graph,
                                                   tecore_capture_mode_t mode);
  /* flags: TECORE_GRAPH_INSTANTIATE_* (checked); upload_stream only with UPLOAD */
  tecore_result_t (*graph_instantiate_flags)(tecore_graph_exec_t *exec, tecore_graph_t graph,
                                             unsigned flags, tecore_stream_t upload_stream);
  /* Up to max descriptions (nodes may be NULL when max is 0), *count all. */
  tecore_result_t (*graph_nodes)(tecore_graph_t graph, struct tecore_graph_node_desc *nodes,
                                 size_t max, size_t *count);
  /* args[i]: param_size[i] bytes of caller storage each */
  tecore_result_t (*graph_kernel_node_args)(tecore_graph_t graph, tecore_graph_node_t node,
                                            void *const *args);
  /* cfg NULL: the node's shape in its graph */
  tecore_result_t (*graph_exec_kernel_node_set)(tecore_graph_exec_t exec, tecore_graph_node_t node,
                                                const struct tecore_launch_cfg *cfg,
                                                void *const *args);
  tecore_result_t (*graph_exec_memcpy_node_set)(tecore_graph_exec_t exec, tecore_graph_node_t node,
                                                tecore_devptr_t dst, tecore_devptr_t src);
  tecore_result_t (*graph_exec_memset_node_set)(tecore_graph_exec_t exec, tecore_graph_node_t node,
                                                tecore_devptr_t dst, uint32_t value);

  tecore_result_t (*vmm_granularity)(size_t *granularity, int recommended);
  tecore_result_t (*vmm_reserve)(size_t bytes, size_t align, tecore_devptr_t *va);
  tecore_result_t (*vmm_free_va)(tecore_devptr_t va, size_t bytes);
  tecore_result_t (*vmm_create)(size_t bytes, unsigned flags, tecore_vmm_handle_t *handle);
  tecore_result_t (*vmm_release)(tecore_vmm_handle_t handle);
  tecore_result_t (*vmm_map)(tecore_devptr_t va, size_t bytes, tecore_vmm_handle_t handle,
                             size_t offset);
  tecore_result_t (*vmm_unmap)(tecore_devptr_t va, size_t bytes);
  tecore_result_t (*vmm_set_access)(tecore_devptr_t va, size_t bytes, int ordinal);
  tecore_result_t (*vmm_export_fd)(tecore_vmm_handle_t handle, int *fd);
  tecore_result_t (*vmm_import_fd)(int fd, tecore_vmm_handle_t *handle);

  tecore_result_t (*mc_granularity)(size_t bytes, int ndevices, size_t *granularity);
  tecore_result_t (*mc_create)(size_t bytes, int ndevices, unsigned flags, tecore_mc_handle_t *mc);
  tecore_result_t (*mc_add_device)(tecore_mc_handle_t mc, int ordinal);
  tecore_result_t (*mc_bind_mem)(tecore_mc_handle_t mc, size_t mc_offset, tecore_vmm_handle_t mem,
                                 size_t mem_offset, size_t bytes);
  tecore_result_t (*mc_unbind)(tecore_mc_handle_t mc, int ordinal, size_t mc_offset, size_t bytes);
  tecore_result_t (*mc_release)(tecore_mc_handle_t mc);
  tecore_result_t (*mc_export_fd)(tecore_mc_handle_t mc, int *fd);
  tecore_result_t (*mc_import_fd)(int fd, tecore_mc_handle_t *mc);
};

/* The registry's entries (kernel.c), for backends that map a driver's
 * kernel handle back to its id: entries 0 .. te_kernel_count()-1, never
 * removed, so the pointers stay valid. */
int te_kernel_count(void);
struct te_kernel_entry *te_kernel_entry_at(int id);

extern const struct te_device_ops te_vdev_ops;
#ifdef TE_HAVE_CUDA
extern const struct te_device_ops te_cuda_ops;
#endif

/* The selected backend's table (initializes on demand; NULL + error set
 * when no backend can start). */
const struct te_device_ops *te_ops(void);
/* Same, as a result code: TECORE_SUCCESS and *o set, or the init failure. */
tecore_result_t te_ops_get(const struct te_device_ops **o);
/* The backend's ops once initialized, else NULL; never initializes. */
const struct te_device_ops *te_ops_if_ready(void);
/* Loads every registered kernel module and prepares each kernel in the
 * current context (kernel.c).  Run once the backend is up, and again by
 * tecore_ctx_create for each new context. */
tecore_result_t te_kernel_preload(const struct te_device_ops *o);

#endif
