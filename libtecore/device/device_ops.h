/* SPDX-License-Identifier: Apache-2.0 */
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
#include "common/kparams.h"
#include <string.h>

struct te_gemm_problem;
struct te_chain_ctl;

/* A registered kernel, as the backends see it. */
struct te_kernel_entry {
  const struct tecore_kernel_def *def;
  const struct tecore_kernel_table *table;
  int id;
  int table_index;           /* index of table in the registry */
  void *backend_handle;      /* cuda: CUkernel (loaded on first launch) */
  /* What each pointer parameter needs of its alignment (kparams.h
   * TE_KALIGN), NULL for none (tables registered through the public call).
   * Set once, right after registration (kernel.c): read with acquire. */
  const struct te_kalign *align;
};

/* The dtype code that sets a's alignment: int parameter a->dt_param whole,
 * or its 4-bit field a->dt_slot (~0u for a field past the int). */
static inline unsigned te_kparam_dt_code(const struct te_kparam_align *a, void *const *args) {
  int v = 0;
  memcpy(&v, args[a->dt_param], sizeof v);
  if (a->dt_slot == TE_KP_WHOLE) return (unsigned)v;
  return a->dt_slot < 8 ? ((unsigned)v >> (4 * a->dt_slot)) & 0xf : ~0u;
}

/* The alignment pointer parameter p of a kernel (def, its alignment record
 * al, NULL: none) needs with the argument values args (1 when it needs
 * none).  Pure: the registry (kernel.c) checks launches with it, and a
 * backend that checks a node's pointers later (vdev_check.c) uses the
 * record its kernel entry brought down. */
static inline size_t te_kparam_align(const struct te_kalign *al,
                                     const struct tecore_kernel_def *def, unsigned p,
                                     void *const *args) {
  if (!al || p >= TECORE_KERNEL_MAX_PARAMS) return 1;
  const struct te_kparam_align *a = &al->p[p];
  if (a->dt_param == TE_KP_NO_DT) return a->align ? a->align : 1;
  /* a dtype parameter that is not a 4-byte value is a table bug: no check */
  if (a->dt_param >= def->nparams || def->param_is_ptr[a->dt_param] ||
      def->param_size[a->dt_param] != sizeof(int))
    return 1;
  unsigned c = te_kparam_dt_code(a, args);
  /* a code no dtype has asks for 8, the widest element: the kernels would
   * read such a code as some other type, and a misaligned access is what
   * must not happen */
  size_t n = c < TECORE_DTYPE_COUNT_ ? tecore_dtype_size((tecore_dtype_t)c) : 0;
  return n ? n : 8;
}

/* A registered table's backend state. */
struct te_kernel_module {
  const struct tecore_kernel_table *table;
  void *backend_handle;      /* cuda: CUlibrary */
};

/* TE_DEVICE_OPS(X, pfx): every device op, written once.  Each is
 * X(pfx, op, (parameters)) and returns tecore_result_t; pfx is passed
 * through untouched (a backend's prefix).  From this one list come the table's
 * fields (struct te_device_ops), each backend's prototypes
 * (TE_DEVICE_OPS(TE_DEVICE_OP_PROTO, cuda) declares te_cuda_<op>) and each
 * backend's table (TE_DEVICE_OP_ENTRY): adding an op is one line here and
 * one function per backend, and a backend that forgets it fails to link. */
#define TE_DEVICE_OPS(X, pfx)                                                                     \
  /* init: returns TECORE_ERR_NO_DRIVER / TECORE_ERR_NO_DEVICE when unusable */                   \
  X(pfx, init, (void))                                                                            \
  /* tecore_fini: the backend stops; ready: its context was made ready                            \
   * (vdev: streams drained and joined, registries freed; cuda: the work                           \
   * queued before fini finishes, the driver's objects are left to exit) */                       \
  X(pfx, fini, (int ready))                                                                       \
  /* The memory checks of the layers above (dev_check.c): *on, whether                           \
   * they run; mem_check: TECORE_SUCCESS   when [p, p + bytes) lies in one                        \
   * allocation, else TECORE_ERR_ILLEGAL_ADDRESS with the reason in why */                        \
  X(pfx, checks_on, (int *on))                                                                    \
  X(pfx, mem_check, (tecore_devptr_t p, size_t bytes, char *why, size_t n))                       \
  X(pfx, driver_version, (int *version))                                                          \
  X(pfx, device_count, (int *count))                                                              \
  X(pfx, device_props, (int ordinal, struct tecore_device_props *props))                          \
  X(pfx, device_peer, (int a, int b, int *can, int *link))                                        \
                                                                                                  \
  X(pfx, ctx_create, (int ordinal, tecore_ctx_t *ctx))                                            \
  X(pfx, ctx_destroy, (tecore_ctx_t ctx))                                                         \
  X(pfx, ctx_set_current, (tecore_ctx_t ctx))                                                     \
  X(pfx, ctx_get_current, (tecore_ctx_t *ctx))                                                    \
  X(pfx, ctx_synchronize, (void))                                                                 \
                                                                                                  \
  X(pfx, mem_alloc, (size_t bytes, tecore_devptr_t *dptr))                                        \
  X(pfx, mem_free, (tecore_devptr_t dptr))                                                        \
  X(pfx, mem_info, (size_t *free_bytes, size_t *total_bytes))                                     \
  X(pfx, mem_alloc_host, (size_t bytes, void **ptr))                                              \
  X(pfx, mem_free_host, (void *ptr))                                                              \
  X(pfx, mem_host_register, (void *ptr, size_t bytes, unsigned flags))                            \
  X(pfx, mem_host_unregister, (void *ptr))                                                        \
  X(pfx, mem_host_device_ptr, (void *host, tecore_devptr_t *dptr))                                \
  /* The live allocation holding ptr as the backend knows it; *bytes 0 (and                       \
   * TECORE_SUCCESS, no detail set) when it knows none: callers on hot                            \
   * paths treat that as a foreign pointer. */                                                    \
  X(pfx, mem_range, (tecore_devptr_t ptr, tecore_devptr_t *base, size_t *bytes))                  \
  /* The address through which a kernel on the current device reaches                             \
   * [ptr, ptr + bytes): ptr itself for this device's memory, the mapped                          \
   * address for pinned host memory (*host 1); *kaddr 0 (TECORE_SUCCESS, no                       \
   * detail set) when a kernel cannot reach all of it (pageable host                              \
   * memory, another device's, managed memory, an unknown address). */                            \
  X(pfx, mem_kernel_addr, (tecore_devptr_t ptr, size_t bytes, tecore_devptr_t *kaddr, int *host)) \
                                                                                                  \
  X(pfx, memcpy_async, (tecore_devptr_t dst, tecore_devptr_t src, size_t bytes,                   \
                        tecore_stream_t stream))                                                  \
  X(pfx, memcpy_sync, (tecore_devptr_t dst, tecore_devptr_t src, size_t bytes))                   \
  /* elem_size is 1, 2 or 4; value holds the low elem_size bytes */                               \
  X(pfx, memset_async, (tecore_devptr_t dst, uint32_t value, unsigned elem_size, size_t count,    \
                        tecore_stream_t stream))                                                  \
                                                                                                  \
  X(pfx, stream_priority_range, (int *least, int *greatest))                                      \
  X(pfx, stream_create, (unsigned flags, int priority, tecore_stream_t *stream))                  \
  X(pfx, stream_destroy, (tecore_stream_t stream))                                                \
  X(pfx, stream_synchronize, (tecore_stream_t stream))                                            \
  X(pfx, stream_query, (tecore_stream_t stream))                                                  \
  X(pfx, stream_wait_event, (tecore_stream_t stream, tecore_event_t event))                       \
  X(pfx, stream_get_priority, (tecore_stream_t stream, int *priority))                            \
                                                                                                  \
  X(pfx, event_create, (unsigned flags, tecore_event_t *event))                                   \
  X(pfx, event_destroy, (tecore_event_t event))                                                   \
  X(pfx, event_record, (tecore_event_t event, tecore_stream_t stream))                            \
  X(pfx, event_synchronize, (tecore_event_t event))                                               \
  X(pfx, event_query, (tecore_event_t event))                                                     \
  X(pfx, event_elapsed, (float *ms, tecore_event_t start, tecore_event_t end))                    \
                                                                                                  \
  /* width is 32 or 64 */                                                                         \
  X(pfx, stream_write_value, (tecore_stream_t stream, tecore_devptr_t addr, uint64_t value,       \
                              unsigned width))                                                    \
  X(pfx, stream_wait_value, (tecore_stream_t stream, tecore_devptr_t addr, uint64_t value,        \
                             tecore_wait_cond_t cond, unsigned width))                            \
                                                                                                  \
  /* Loads a table's fatbin (cuda) once; called under the registry lock. */                       \
  X(pfx, kernel_module_load, (struct te_kernel_module *mod))                                      \
  /* Resolves one kernel of a loaded module into the current context                              \
   * (cuda: cuKernelGetFunction), so that no launch loads code: loading                           \
   * waits for streams blocked on a stream memory op and would deadlock                           \
   * there.  vdev has nothing to prepare. */                                                      \
  X(pfx, kernel_prepare, (struct te_kernel_entry *k, struct te_kernel_module *mod))               \
  /* Launches (or, in a capturing stream, records) one kernel; flags are                          \
   * TECORE_LAUNCH_* (checked by the caller). */                                                  \
  X(pfx, kernel_launch, (struct te_kernel_entry *k, struct te_kernel_module *mod,                 \
                         const struct tecore_launch_cfg *cfg, void *const *args,                  \
                         unsigned flags, tecore_stream_t stream))                                 \
                                                                                                  \
  X(pfx, stream_begin_capture, (tecore_stream_t stream, tecore_capture_mode_t mode))              \
  X(pfx, stream_end_capture, (tecore_stream_t stream, tecore_graph_t *graph))                     \
  X(pfx, stream_capture_status, (tecore_stream_t stream, tecore_capture_status_t *status))        \
  X(pfx, graph_destroy, (tecore_graph_t graph))                                                   \
  X(pfx, graph_node_count, (tecore_graph_t graph, size_t *count))                                 \
  X(pfx, graph_dot, (tecore_graph_t graph, const char *path))                                     \
  X(pfx, graph_instantiate, (tecore_graph_exec_t *exec, tecore_graph_t graph))                    \
  X(pfx, graph_exec_destroy, (tecore_graph_exec_t exec))                                          \
  X(pfx, graph_launch, (tecore_graph_exec_t exec, tecore_stream_t stream))                        \
  X(pfx, graph_upload, (tecore_graph_exec_t exec, tecore_stream_t stream))                        \
  /* On refusal: TECORE_ERR_GRAPH_UPDATE and *why set; exec unchanged. */                         \
  X(pfx, graph_exec_update, (tecore_graph_exec_t exec, tecore_graph_t graph,                      \
                             tecore_graph_update_result_t *why))                                  \
  /* Capture appended after graph's leaves; end_capture returns graph. */                         \
  X(pfx, stream_begin_capture_to_graph, (tecore_stream_t stream, tecore_graph_t graph,            \
                                         tecore_capture_mode_t mode))                             \
  /* flags: TECORE_GRAPH_INSTANTIATE_* (checked); upload_stream only with UPLOAD */               \
  X(pfx, graph_instantiate_flags, (tecore_graph_exec_t *exec, tecore_graph_t graph,               \
                                   unsigned flags, tecore_stream_t upload_stream))                \
  /* Device launch (graph_device.c): prepare after an instantiation with                          \
   * TECORE_GRAPH_INSTANTIATE_DEVICE_LAUNCH (*state: the backend's; NULL                          \
   * allowed), launch (uploading exec first when upload is set), the                              \
   * failure code a device launch left (read and cleared; 0: none), and                           \
   * release, before the exec is destroyed. */                                                    \
  X(pfx, graph_device_prepare, (tecore_graph_exec_t exec, void **state))                          \
  X(pfx, graph_device_launch, (tecore_graph_exec_t exec, void *state, int upload,                 \
                               tecore_stream_t stream))                                           \
  X(pfx, graph_device_status, (void *state, unsigned *code))                                      \
  X(pfx, graph_device_release, (void *state))                                                     \
  /* Graph chains (graph_chain.c; the protocol: kernels/common/graph_chain.h):                     \
   * prepare the launcher of ctl (page-locked host memory, exec[] and nexec                       \
   * set; the executables uploaded), start it on stream (after the work                           \
   * queued there; the stream holds it until it ends), release it (ended). */                      \
  X(pfx, graph_chain_prepare, (struct te_chain_ctl *ctl, tecore_stream_t stream, void **state))    \
  X(pfx, graph_chain_start, (void *state, tecore_stream_t stream))                                \
  X(pfx, graph_chain_release, (void *state))                                                      \
  /* Up to max descriptions (nodes may be NULL when max is 0), *count all. */                     \
  X(pfx, graph_nodes, (tecore_graph_t graph, struct tecore_graph_node_desc *nodes, size_t max,    \
                       size_t *count))                                                            \
  /* The node handles only (cheap: no node is described), up to max, *count all. */              \
  X(pfx, graph_node_handles, (tecore_graph_t graph, tecore_graph_node_t *nodes, size_t max,       \
                              size_t *count))                                                     \
  /* args[i]: param_size[i] bytes of caller storage each */                                       \
  X(pfx, graph_kernel_node_args, (tecore_graph_t graph, tecore_graph_node_t node,                 \
                                  void *const *args))                                             \
  /* Puts a node of kernel k (launch shape cfg, arguments args, copied) in                        \
   * node's place in graph: the same dependencies and dependents, node                            \
   * destroyed; *out is the new node's handle.  libtecore uses it for                             \
   * memset and memcpy nodes only (graph_memset.c), and the backends refuse                       \
   * others. */                                                                                   \
  X(pfx, graph_node_to_kernel, (tecore_graph_t graph, tecore_graph_node_t node,                   \
                                struct te_kernel_entry *k, struct te_kernel_module *mod,          \
                                const struct tecore_launch_cfg *cfg, void *const *args,           \
                                tecore_graph_node_t *out))                                        \
  /* The registry id of the kernel of exec's node (node from the graph exec                      \
   * was instantiated from), -1 when it is no registered kernel's node. */                        \
  X(pfx, graph_exec_node_kernel_id, (tecore_graph_exec_t exec, tecore_graph_node_t node,          \
                                     int *id))                                                    \
  /* cfg NULL: the node's shape in its graph */                                                   \
  X(pfx, graph_exec_kernel_node_set, (tecore_graph_exec_t exec, tecore_graph_node_t node,         \
                                      const struct tecore_launch_cfg *cfg, void *const *args))    \
  X(pfx, graph_exec_memcpy_node_set, (tecore_graph_exec_t exec, tecore_graph_node_t node,         \
                                      tecore_devptr_t dst, tecore_devptr_t src))                  \
  X(pfx, graph_exec_memset_node_set, (tecore_graph_exec_t exec, tecore_graph_node_t node,         \
                                      tecore_devptr_t dst, uint32_t value))                       \
                                                                                                  \
  X(pfx, vmm_granularity, (size_t *granularity, int recommended))                                 \
  X(pfx, vmm_reserve, (size_t bytes, size_t align, tecore_devptr_t *va))                          \
  X(pfx, vmm_free_va, (tecore_devptr_t va, size_t bytes))                                         \
  X(pfx, vmm_create, (size_t bytes, unsigned flags, tecore_vmm_handle_t *handle))                 \
  X(pfx, vmm_release, (tecore_vmm_handle_t handle))                                               \
  X(pfx, vmm_map, (tecore_devptr_t va, size_t bytes, tecore_vmm_handle_t handle, size_t offset))  \
  X(pfx, vmm_unmap, (tecore_devptr_t va, size_t bytes))                                           \
  X(pfx, vmm_set_access, (tecore_devptr_t va, size_t bytes, int ordinal))                         \
  X(pfx, vmm_export_fd, (tecore_vmm_handle_t handle, int *fd))                                    \
  X(pfx, vmm_import_fd, (int fd, tecore_vmm_handle_t *handle))                                    \
  X(pfx, vmm_export_fabric, (tecore_vmm_handle_t handle, struct tecore_fabric_handle *fabric))      \
  X(pfx, vmm_import_fabric, (const struct tecore_fabric_handle *fabric,                            \
                             tecore_vmm_handle_t *handle))                                        \
                                                                                                  \
  X(pfx, mc_granularity, (size_t bytes, int ndevices, size_t *granularity))                       \
  X(pfx, mc_create, (size_t bytes, int ndevices, unsigned flags, tecore_mc_handle_t *mc))         \
  X(pfx, mc_add_device, (tecore_mc_handle_t mc, int ordinal))                                     \
  X(pfx, mc_bind_mem, (tecore_mc_handle_t mc, size_t mc_offset, tecore_vmm_handle_t mem,          \
                       size_t mem_offset, size_t bytes))                                          \
  X(pfx, mc_unbind, (tecore_mc_handle_t mc, int ordinal, size_t mc_offset, size_t bytes))         \
  X(pfx, mc_release, (tecore_mc_handle_t mc))                                                     \
  X(pfx, mc_export_fd, (tecore_mc_handle_t mc, int *fd))                                          \
  X(pfx, mc_import_fd, (int fd, tecore_mc_handle_t *mc))                                          \
  X(pfx, mc_members, (tecore_devptr_t mc_va, tecore_devptr_t *members, int max, int *count))     \
                                                                                                  \
  /* One GEMM (gemm/gemm_problem.h: checked and reduced by gemm.c) on                             \
   * stream: cuBLASLt on cuda, the reference GEMM on vdev. */                                     \
  X(pfx, gemm, (const struct te_gemm_problem *p, tecore_stream_t stream))

/* Generators for TE_DEVICE_OPS. */
#define TE_DEVICE_OP_FIELD(pfx, op, params) tecore_result_t(*op) params;
#define TE_DEVICE_OP_PROTO(pfx, op, params) tecore_result_t te_##pfx##_##op params;
#define TE_DEVICE_OP_ENTRY(pfx, op, params) .op = te_##pfx##_##op,

struct te_device_ops {
  const char *name;
  tecore_backend_t backend;
  TE_DEVICE_OPS(TE_DEVICE_OP_FIELD, _)
};

/* A backend's table: TE_DEVICE_OPS_TABLE(cuda, TECORE_BACKEND_CUDA) defines
 * te_cuda_ops with every entry te_cuda_<op>. */
#define TE_DEVICE_OPS_TABLE(pfx, id)                                          \
  const struct te_device_ops te_##pfx##_ops = {                               \
      .name = #pfx, .backend = id, TE_DEVICE_OPS(TE_DEVICE_OP_ENTRY, pfx)}

/* The registry's entries (kernel.c), for backends that map a driver's
 * kernel handle back to its id: entries 0 .. te_kernel_count()-1, never
 * removed, so the pointers stay valid. */
int te_kernel_count(void);
struct te_kernel_entry *te_kernel_entry_at(int id);

extern const struct te_device_ops te_vdev_ops;
#ifdef TE_HAVE_CUDA
extern const struct te_device_ops te_cuda_ops;
#endif

/* The selected backend's table, as a result code: TECORE_SUCCESS and *o
 * set, or the init failure (initializes on demand). */
tecore_result_t te_ops_get(const struct te_device_ops **o);
/* The backend's ops once initialized, else NULL; never initializes. */
const struct te_device_ops *te_ops_if_ready(void);

/* "Backend ready" hooks: what the layers above the device layer must do in
 * every context before its first launch (kernel.c loads and prepares every
 * registered kernel: a code load at launch time could deadlock behind a
 * stream memory op).  A hook is registered once, from a constructor, and
 * device.c runs them without knowing what they do: when the backend comes
 * up with a context current, and again for each context made later
 * (tecore_ctx_create, cuda's implicit context).  So device.c needs nothing
 * from kernel.c. */
typedef tecore_result_t (*te_device_ready_fn)(const struct te_device_ops *o);
#define TE_DEVICE_READY_HOOKS 4
void te_device_on_ready(te_device_ready_fn fn);
/* Runs every hook for the current context; the first failure is returned
 * (the caller logs it), the remaining hooks still run. */
tecore_result_t te_device_ready_run(const struct te_device_ops *o);

/* The one check of a launch shape (grid and block dimensions nonzero, at
 * most 1024 threads a block, grid y and z at most 65535), for every call
 * that takes a tecore_launch_cfg; who prefixes the message. */
tecore_result_t te_launch_cfg_check(const struct tecore_launch_cfg *cfg, const char *who);

/* ops.c: TECORE_ERR_INVALID naming fn unless ordinal is one of the
 * backend's devices. */
tecore_result_t te_check_ordinal(const struct te_device_ops *o, int ordinal, const char *fn);

#endif
