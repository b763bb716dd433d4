/* SPDX-License-Identifier: Apache-2.0 */
/* te/device.h -- libtecore's device layer: one API over two backends.
 *
 * The backend is the CUDA Driver API ("cuda") or the test VM's virtual GPU
 * ("vdev"), chosen once by TE_DEVICE=cuda|vdev|auto at tecore_init().
 * Handles are opaque.  Under cuda a tecore_stream_t *is* a CUstream (and
 * an event a CUevent, a graph a CUgraph), so a caller's cudaStream_t
 * passes straight in; under vdev they are the virtual device's objects.
 * Device addresses are 64-bit integers (tecore_devptr_t); with unified
 * addressing a host pointer cast to tecore_devptr_t is accepted wherever
 * a copy takes one.
 *
 * Threads: every call works on the calling thread's current context
 * (tecore_ctx_set_current); tecore_ctx_create makes the new context
 * current.  All calls are thread-safe. */
#ifndef TE_DEVICE_H
#define TE_DEVICE_H

#include <stddef.h>
#include <stdint.h>
#include <te/result.h>
#include <te/deprecated.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Forward declarations compatible with <cuda.h> and <cuda_runtime.h>. */
struct CUctx_st;
struct CUstream_st;
struct CUevent_st;
struct CUgraph_st;
struct CUgraphExec_st;

typedef uint64_t tecore_devptr_t;
typedef struct CUctx_st *tecore_ctx_t;
typedef struct CUstream_st *tecore_stream_t;
typedef struct CUevent_st *tecore_event_t;
typedef struct CUgraph_st *tecore_graph_t;
typedef struct CUgraphExec_st *tecore_graph_exec_t;
typedef uint64_t tecore_vmm_handle_t;   /* physical allocation (CUmemGenericAllocationHandle) */
typedef uint64_t tecore_mc_handle_t;    /* multicast object */

/* ---- backend and devices -------------------------------------------- */

typedef enum tecore_backend {
  TECORE_BACKEND_NONE = 0,
  TECORE_BACKEND_CUDA = 1,
  TECORE_BACKEND_VDEV = 2
} tecore_backend_t;

/* Selects and starts the backend (TE_DEVICE).  Idempotent and thread-safe;
 * the first call decides.  Every other device call initializes on demand,
 * so calling this is optional, but it is where a missing driver shows. */
tecore_result_t tecore_init(void);
/* Ends libtecore in the process: runs the hooks of tecore_fini_register
 * (last registered first), stops the service engine and the backend (vdev:
 * every stream drains and its worker is joined, the never-destroyed ones
 * and the legacy default streams included) and frees libtecore's
 * process-wide state.  Afterwards device calls, tecore_init included,
 * return TECORE_ERR_NOT_INITIALIZED (the first initialization decides for
 * the life of the process); host-only calls keep working.  A second call
 * does nothing.  No other thread may be in a libte call meanwhile. */
tecore_result_t tecore_fini(void);
/* Adds fn(arg) to the hooks tecore_fini runs first, while the device still
 * works (libtegraph frees its tables this way).  The same fn and arg twice
 * is one hook; 16 at most (TECORE_ERR_NOMEM past that). */
tecore_result_t tecore_fini_register(void (*fn)(void *arg), void *arg);
/* The backend in use (initializes on demand). */
tecore_result_t tecore_backend(tecore_backend_t *backend);
/* "cuda", "vdev" or "none". */
const char *tecore_backend_name(tecore_backend_t backend);
/* Driver version (e.g. 13000), or the vdev's emulated version. */
tecore_result_t tecore_driver_version(int *version);

tecore_result_t tecore_device_count(int *count);

struct tecore_device_props {
  char name[256];
  int ordinal;
  int cc_major, cc_minor;          /* compute capability */
  int sm_count;
  int max_threads_per_block;
  int max_shared_per_block;        /* bytes, opt-in maximum */
  int warp_size;
  int clock_khz;                   /* SM clock, 0 if unknown */
  int mem_clock_khz;               /* 0 if unknown */
  int mem_bus_width;               /* bits, 0 if unknown */
  int l2_bytes;
  size_t total_mem;                /* bytes */
  int pci_domain, pci_bus, pci_device;
  int unified_addressing;          /* 1 if host pointers are device-visible */
  int vmm_supported;               /* 1 if VMM (reserve/map) works */
  int posix_fd_handles;            /* 1 if VMM handles export as POSIX fds */
  int multicast_supported;         /* 1 if the device reports multicast */
  int stream_mem_ops;              /* 1 if 64-bit stream memory ops work */
  int dma_buf;                     /* 1 if device memory exports as dma-buf (an RDMA
                                      NIC may then register it: GPUDirect RDMA) */
};
tecore_result_t tecore_device_get_props(int ordinal, struct tecore_device_props *props);
#if TE_DEPRECATED_NAMES_VISIBLE
/* Deprecated former name of tecore_device_get_props (te/deprecated.h). */
tecore_result_t tecore_device_props(int ordinal, struct tecore_device_props *props)
    TE_DEPRECATED("use tecore_device_get_props");
#endif
/* 1 in *can if device a can map device b's memory; *link gets the NVLink
 * count between them (0 = PCIe or none; -1 if unknown). */
tecore_result_t tecore_device_peer(int a, int b, int *can, int *link);

/* ---- contexts ---------------------------------------------------------- */

/* Retains the device's primary context and makes it current for the
 * calling thread.  Release with tecore_ctx_destroy. */
tecore_result_t tecore_ctx_create(int ordinal, tecore_ctx_t *ctx);
tecore_result_t tecore_ctx_destroy(tecore_ctx_t ctx);
tecore_result_t tecore_ctx_set_current(tecore_ctx_t ctx);
tecore_result_t tecore_ctx_get_current(tecore_ctx_t *ctx);
/* Waits for all work of the current context. */
tecore_result_t tecore_ctx_synchronize(void);

/* ---- memory ------------------------------------------------------------ */

tecore_result_t tecore_mem_alloc(size_t bytes, tecore_devptr_t *dptr);
tecore_result_t tecore_mem_free(tecore_devptr_t dptr);
/* Free device memory and the total, in bytes. */
tecore_result_t tecore_mem_info(size_t *free_bytes, size_t *total_bytes);
/* Page-locked host memory, mapped into the device's address space. */
tecore_result_t tecore_mem_alloc_host(size_t bytes, void **ptr);
tecore_result_t tecore_mem_free_host(void *ptr);
/* Page-locks an existing host range (flags: TECORE_HOST_REGISTER_*). */
#define TECORE_HOST_REGISTER_MAPPED 0x2u
#define TECORE_HOST_REGISTER_READONLY 0x8u
tecore_result_t tecore_mem_host_register(void *ptr, size_t bytes, unsigned flags);
tecore_result_t tecore_mem_host_unregister(void *ptr);
/* The device address of page-locked host memory. */
tecore_result_t tecore_mem_host_device_ptr(void *host, tecore_devptr_t *dptr);
/* The live allocation that holds ptr: its first address in *base and its
 * size in *bytes (device memory, pinned or registered host memory, VMM
 * mappings).  TECORE_ERR_INVALID when the backend knows no allocation
 * there (pageable host memory, a freed pointer); out-parameters are then
 * left as they were.  Under cuda, VMM memory reports its reservation. */
tecore_result_t tecore_mem_range(tecore_devptr_t ptr, tecore_devptr_t *base, size_t *bytes);

/* Copies bytes in stream order; src and dst may be device or host. */
tecore_result_t tecore_memcpy_async(tecore_devptr_t dst, tecore_devptr_t src, size_t bytes,
                                    tecore_stream_t stream);
/* Synchronous copy, issued on the legacy default stream as the driver's
 * cuMemcpy is: it runs after earlier work of blocking streams (not of
 * TECORE_STREAM_NON_BLOCKING ones) and returns when the copy is done. */
tecore_result_t tecore_memcpy(tecore_devptr_t dst, tecore_devptr_t src, size_t bytes);
/* Sets count elements of 1, 2 or 4 bytes to value, in stream order. */
tecore_result_t tecore_memset_d8_async(tecore_devptr_t dst, uint8_t value, size_t count,
                                       tecore_stream_t stream);
tecore_result_t tecore_memset_d16_async(tecore_devptr_t dst, uint16_t value, size_t count,
                                        tecore_stream_t stream);
tecore_result_t tecore_memset_d32_async(tecore_devptr_t dst, uint32_t value, size_t count,
                                        tecore_stream_t stream);

/* ---- streams ----------------------------------------------------------- */

#define TECORE_STREAM_DEFAULT 0x0u
#define TECORE_STREAM_NON_BLOCKING 0x1u
/* Lower numbers are higher priority; *greatest <= priority <= *least. */
tecore_result_t tecore_stream_priority_range(int *least, int *greatest);
tecore_result_t tecore_stream_create(unsigned flags, int priority, tecore_stream_t *stream);
tecore_result_t tecore_stream_destroy(tecore_stream_t stream);
tecore_result_t tecore_stream_synchronize(tecore_stream_t stream);
/* TECORE_SUCCESS when all work is done, TECORE_ERR_NOT_READY otherwise. */
tecore_result_t tecore_stream_query(tecore_stream_t stream);
tecore_result_t tecore_stream_wait_event(tecore_stream_t stream, tecore_event_t event);
tecore_result_t tecore_stream_get_priority(tecore_stream_t stream, int *priority);

/* ---- events ------------------------------------------------------------ */

#define TECORE_EVENT_DEFAULT 0x0u
#define TECORE_EVENT_BLOCKING_SYNC 0x1u
#define TECORE_EVENT_DISABLE_TIMING 0x2u
tecore_result_t tecore_event_create(unsigned flags, tecore_event_t *event);
tecore_result_t tecore_event_destroy(tecore_event_t event);
tecore_result_t tecore_event_record(tecore_event_t event, tecore_stream_t stream);
tecore_result_t tecore_event_synchronize(tecore_event_t event);
/* TECORE_SUCCESS when complete, TECORE_ERR_NOT_READY otherwise. */
tecore_result_t tecore_event_query(tecore_event_t event);
/* Milliseconds between two completed events recorded with timing. */
tecore_result_t tecore_event_elapsed(float *ms, tecore_event_t start, tecore_event_t end);

/* ---- stream memory operations ------------------------------------------ */

typedef enum tecore_wait_cond {
  TECORE_WAIT_GEQ = 0,   /* (int64)(*addr - value) >= 0, as the driver's cyclic compare */
  TECORE_WAIT_EQ = 1,
  TECORE_WAIT_AND = 2,   /* (*addr & value) != 0 */
  TECORE_WAIT_NOR = 3    /* ~(*addr | value) != 0 */
} tecore_wait_cond_t;
/* addr: device memory or page-locked host memory's device address;
 * 8-byte aligned (4 for the 32-bit forms). */
tecore_result_t tecore_stream_write_value64(tecore_stream_t stream, tecore_devptr_t addr,
                                            uint64_t value);
tecore_result_t tecore_stream_wait_value64(tecore_stream_t stream, tecore_devptr_t addr,
                                           uint64_t value, tecore_wait_cond_t cond);
tecore_result_t tecore_stream_write_value32(tecore_stream_t stream, tecore_devptr_t addr,
                                            uint32_t value);
tecore_result_t tecore_stream_wait_value32(tecore_stream_t stream, tecore_devptr_t addr,
                                           uint32_t value, tecore_wait_cond_t cond);

/* ---- stream capture and graphs ----------------------------------------- */

typedef enum tecore_capture_mode {
  TECORE_CAPTURE_GLOBAL = 0,
  TECORE_CAPTURE_THREAD_LOCAL = 1,
  TECORE_CAPTURE_RELAXED = 2
} tecore_capture_mode_t;
typedef enum tecore_capture_status {
  TECORE_CAPTURE_NONE = 0,
  TECORE_CAPTURE_ACTIVE = 1,
  TECORE_CAPTURE_INVALIDATED = 2
} tecore_capture_status_t;

tecore_result_t tecore_stream_begin_capture(tecore_stream_t stream, tecore_capture_mode_t mode);
/* Ends capture; *graph is owned by the caller (tecore_graph_destroy).  An
 * invalidated capture returns TECORE_ERR_CAPTURE and no graph. */
tecore_result_t tecore_stream_end_capture(tecore_stream_t stream, tecore_graph_t *graph);
tecore_result_t tecore_stream_capture_status(tecore_stream_t stream,
                                             tecore_capture_status_t *status);
tecore_result_t tecore_graph_destroy(tecore_graph_t graph);
tecore_result_t tecore_graph_node_count(tecore_graph_t graph, size_t *count);
/* Writes the graph in Graphviz DOT form to path. */
tecore_result_t tecore_graph_dot(tecore_graph_t graph, const char *path);

tecore_result_t tecore_graph_instantiate(tecore_graph_exec_t *exec, tecore_graph_t graph);
tecore_result_t tecore_graph_exec_destroy(tecore_graph_exec_t exec);
tecore_result_t tecore_graph_launch(tecore_graph_exec_t exec, tecore_stream_t stream);
tecore_result_t tecore_graph_upload(tecore_graph_exec_t exec, tecore_stream_t stream);

/* The driver's CUgraphExecUpdateResult values. */
typedef enum tecore_graph_update_result {
  TECORE_GRAPH_UPDATE_SUCCESS = 0,
  TECORE_GRAPH_UPDATE_ERROR = 1,
  TECORE_GRAPH_UPDATE_TOPOLOGY_CHANGED = 2,
  TECORE_GRAPH_UPDATE_NODE_TYPE_CHANGED = 3,
  TECORE_GRAPH_UPDATE_FUNCTION_CHANGED = 4,
  TECORE_GRAPH_UPDATE_PARAMETERS_CHANGED = 5,
  TECORE_GRAPH_UPDATE_NOT_SUPPORTED = 6,
  TECORE_GRAPH_UPDATE_UNSUPPORTED_FUNCTION_CHANGE = 7,
  TECORE_GRAPH_UPDATE_ATTRIBUTES_CHANGED = 8
} tecore_graph_update_result_t;
/* Updates exec in place to graph's parameters.  On failure returns
 * TECORE_ERR_GRAPH_UPDATE with *why set (TOPOLOGY_CHANGED when nodes or
 * edges differ), and exec still runs its old parameters. */
tecore_result_t tecore_graph_exec_update(tecore_graph_exec_t exec, tecore_graph_t graph,
                                         tecore_graph_update_result_t *why);
/* Updates in place, or, where update refuses, instantiates graph anew and
 * replaces *exec (the old one destroyed).  *reinstantiated says which. */
tecore_result_t tecore_graph_exec_update_or_instantiate(tecore_graph_exec_t *exec,
                                                        tecore_graph_t graph,
                                                        int *reinstantiated);
const char *tecore_graph_update_result_name(tecore_graph_update_result_t r);

/* ---- graphs: capture into a graph, instantiate flags, nodes ------------ *
 * What libtegraph builds on: appending captured work to an existing graph,
 * instantiation options, and reading and rewriting single nodes of an
 * executable graph (the driver's per-node exec updates), so that a new
 * pointer can be written into captured kernels without a new capture. */

/* Begins capturing stream into graph (which the caller keeps owning): the
 * captured work is appended after the graph's current leaves (the nodes
 * nothing depends on yet), so it runs after everything the graph holds.
 * tecore_stream_end_capture then returns graph itself.  A capture that
 * fails or is invalidated leaves graph as it was before (vdev) or as the
 * driver leaves it (cuda).  cuda: needs driver 12.3
 * (cuStreamBeginCaptureToGraph). */
tecore_result_t tecore_stream_begin_capture_to_graph(tecore_stream_t stream, tecore_graph_t graph,
                                                     tecore_capture_mode_t mode);

/* Instantiation flags (the driver's values). */
#define TECORE_GRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH 0x1u
#define TECORE_GRAPH_INSTANTIATE_UPLOAD 0x2u          /* upload on upload_stream */
#define TECORE_GRAPH_INSTANTIATE_DEVICE_LAUNCH 0x4u  /* tecore_graph_launch_device */
#define TECORE_GRAPH_INSTANTIATE_USE_NODE_PRIORITY 0x8u
/* tecore_graph_instantiate with flags (TECORE_GRAPH_INSTANTIATE_*).
 * upload_stream is read only with TECORE_GRAPH_INSTANTIATE_UPLOAD (NULL is
 * the legacy stream).  vdev accepts every flag: it has no graph memory
 * nodes to free, nothing to upload, and runs nodes one at a time, so node
 * priorities change nothing there.
 * TECORE_GRAPH_INSTANTIATE_DEVICE_LAUNCH makes exec launchable by
 * tecore_graph_launch_device (and still by tecore_graph_launch).  Its
 * graph may hold kernel, memcpy, memset and child-graph nodes only, and
 * the flag does not go with AUTO_FREE_ON_LAUNCH: both backends refuse
 * either with TECORE_ERR_INVALID.  cuda: needs the device-launch kernel
 * built for the device's architecture (TECORE_ERR_NOT_SUPPORTED else). */
tecore_result_t tecore_graph_instantiate_with_flags(tecore_graph_exec_t *exec,
                                                    tecore_graph_t graph, unsigned flags,
                                                    tecore_stream_t upload_stream);
/* Launches exec, instantiated with TECORE_GRAPH_INSTANTIATE_DEVICE_LAUNCH,
 * from the device: the host queues a graph of one kernel into stream and
 * that kernel launches exec, so the host's cost is one node's whatever
 * exec holds (tecore_graph_launch's grows with the nodes).  Work queued on
 * stream after it waits for the whole of exec, as after
 * tecore_graph_launch.  The first device launch of each exec waits for
 * stream, so that the device's refusal, if any, is this call's error; a
 * later launch that the device refuses is reported (TECORE_ERR_DRIVER,
 * the CUDA error named) by the next call for the same exec, which then
 * does not launch.  An exec changed by tecore_graph_exec_update or a
 * tecore_graph_exec_*_node_set call is uploaded again first.  Not in a
 * capturing stream (TECORE_ERR_CAPTURE).  vdev runs exec as
 * tecore_graph_launch does. */
tecore_result_t tecore_graph_launch_device(tecore_graph_exec_t exec, tecore_stream_t stream);

/* Graph chains: executables (instantiated with
 * TECORE_GRAPH_INSTANTIATE_DEVICE_LAUNCH) queued with no driver call.  A
 * launcher kernel on the device waits for the host's next ticket in
 * page-locked memory and launches the executable it names, then itself;
 * queueing writes two words and waiting reads one.  The launcher ends when
 * stopped or after TECORE_GRAPH_CHAIN_TIMEOUT_MS with nothing queued (the
 * next queue starts it again).  While it runs it holds stream: queue
 * nothing else there before tecore_graph_chain_stop.  One thread at a time
 * uses a chain; its executables cannot be destroyed before it is. */
typedef struct tecore_graph_chain *tecore_graph_chain_t;
#define TECORE_GRAPH_CHAIN_MAX 8   /* executables a chain may hold */
tecore_result_t tecore_graph_chain_create(const tecore_graph_exec_t *execs, int count,
                                          tecore_stream_t stream, tecore_graph_chain_t *chain);
/* Queues execs[index] after every earlier ticket; *ticket (may be NULL)
 * numbers it, from 1. */
tecore_result_t tecore_graph_chain_queue(tecore_graph_chain_t chain, int index, uint64_t *ticket);
/* Waits until the graph of ticket (queued) has ended. */
tecore_result_t tecore_graph_chain_wait(tecore_graph_chain_t chain, uint64_t ticket);
/* Waits for every queued ticket, ends the launcher and frees stream. */
tecore_result_t tecore_graph_chain_stop(tecore_graph_chain_t chain);
/* Stops the chain, then frees it. */
tecore_result_t tecore_graph_chain_destroy(tecore_graph_chain_t chain);
struct tecore_graph_chain_counts {
  uint64_t queued;   /* the last ticket queued */
  uint64_t done;     /* the last ticket whose graph ended */
  uint64_t starts;   /* host launches of the launcher */
  uint64_t runs;     /* launcher runs on the device */
};
tecore_result_t tecore_graph_chain_stats(tecore_graph_chain_t chain,
                                         struct tecore_graph_chain_counts *stats);

/* A kernel launch's shape (te/kernel.h launches with it). */
struct tecore_launch_cfg {
  unsigned grid[3];
  unsigned block[3];
  unsigned shared_bytes;   /* dynamic shared memory */
};

/* A node of a graph.  Under cuda a CUgraphNode; under vdev the graph's
 * serial number and the node's position.  Valid while its graph lives and
 * is not captured into.  The calls that take a graph (or an executable)
 * and a node refuse a node of another graph with TECORE_ERR_INVALID. */
struct CUgraphNode_st;
typedef struct CUgraphNode_st *tecore_graph_node_t;

/* The driver's CUgraphNodeType values; vdev's stream memory operations are
 * BATCH_MEM_OP nodes, as on the driver. */
typedef enum tecore_graph_node_type {
  TECORE_GRAPH_NODE_KERNEL = 0,
  TECORE_GRAPH_NODE_MEMCPY = 1,
  TECORE_GRAPH_NODE_MEMSET = 2,
  TECORE_GRAPH_NODE_HOST = 3,
  TECORE_GRAPH_NODE_GRAPH = 4,        /* a child graph */
  TECORE_GRAPH_NODE_EMPTY = 5,
  TECORE_GRAPH_NODE_WAIT_EVENT = 6,
  TECORE_GRAPH_NODE_EVENT_RECORD = 7,
  TECORE_GRAPH_NODE_EXT_SEMAS_SIGNAL = 8,
  TECORE_GRAPH_NODE_EXT_SEMAS_WAIT = 9,
  TECORE_GRAPH_NODE_MEM_ALLOC = 10,
  TECORE_GRAPH_NODE_MEM_FREE = 11,
  TECORE_GRAPH_NODE_BATCH_MEM_OP = 12,
  TECORE_GRAPH_NODE_CONDITIONAL = 13,
  TECORE_GRAPH_NODE_OTHER = 255       /* a type newer than this header */
} tecore_graph_node_type_t;

/* What tecore_graph_nodes reports of one node. */
struct tecore_graph_node_desc {
  tecore_graph_node_t node;
  tecore_graph_node_type_t type;
  /* KERNEL: the registry id (te/kernel.h) of the kernel, or -1 when the
   * kernel is not a registered one (e.g. a library's own kernel captured
   * on cuda); its launch shape. */
  int kernel_id;
  struct tecore_launch_cfg cfg;
  /* MEMCPY: a one-dimensional copy of bytes from src to dst (bytes is 0
   * for 2-D/3-D or array copies).  MEMSET: dst, the value and element
   * size, count elements (count is 0 for 2-D memsets). */
  tecore_devptr_t dst, src;
  size_t bytes;
  uint32_t value;
  unsigned elem_size;
  size_t count;
};
/* Lists graph's nodes in their creation (capture) order: up to max
 * descriptions in nodes[] (nodes may be NULL when max is 0) and the total
 * in *count. */
tecore_result_t tecore_graph_nodes(tecore_graph_t graph, struct tecore_graph_node_desc *nodes,
                                   size_t max, size_t *count);
/* Replaces every 1-D memset node of graph by a node of libtecore's
 * te_memset kernel that writes the same bytes, with the same dependencies
 * and dependents: a graph of kernel nodes only launches several times
 * faster on cuda than one with memset nodes mixed in (te-bench --graph).
 * *replaced (may be NULL): how many were replaced.  2-D memsets stay.
 * Node handles of replaced nodes become invalid on cuda (vdev keeps
 * them); the graph's executables are not changed (instantiate or update
 * them after).  A failure leaves the nodes not yet replaced as they were. */
tecore_result_t tecore_graph_memsets_to_kernels(tecore_graph_t graph, size_t *replaced);
/* Replaces every 1-D memcpy node of graph whose two ends a kernel on the
 * current device can reach (this device's memory; pinned or registered
 * host memory mapped for the device) by a node of libtecore's te_copy
 * kernel that copies the same bytes, with the same dependencies and
 * dependents: a graph launches on the driver's fast path only when it
 * holds kernel nodes.  Copies with a host end are replaced up to
 * max_host_bytes (larger ones stay on the copy engines, where they
 * overlap kernels), copies within the device up to max_device_bytes
 * (SIZE_MAX: all); 0 keeps that kind.  *replaced (may be NULL): how many
 * were replaced.  Node handles, executables and failures as for
 * tecore_graph_memsets_to_kernels. */
tecore_result_t tecore_graph_copies_to_kernels(tecore_graph_t graph, size_t max_host_bytes,
                                               size_t max_device_bytes, size_t *replaced);
/* Copies the argument values of a registered kernel's node: args[i] points
 * to caller storage of the kernel's param_size[i] bytes (as for
 * tecore_kernel_launch).  TECORE_ERR_NOT_SUPPORTED for a kernel that is
 * not registered (kernel_id -1). */
tecore_result_t tecore_graph_kernel_node_args(tecore_graph_t graph, tecore_graph_node_t node,
                                              void *const *args);
/* Sets the launch shape (cfg; NULL keeps the shape the node has in its
 * graph) and every argument value (args as for tecore_kernel_launch) of a
 * registered kernel's node in exec, where node comes from the graph exec
 * was instantiated from (which must still exist).  Takes effect from
 * exec's next launch; launches already queued run their old values. */
tecore_result_t tecore_graph_exec_kernel_node_set(tecore_graph_exec_t exec, tecore_graph_node_t node,
                                                  const struct tecore_launch_cfg *cfg,
                                                  void *const *args);
/* Points a 1-D memcpy node of exec at new dst and src (same byte count,
 * same kinds of memory).  From exec's next launch. */
tecore_result_t tecore_graph_exec_memcpy_node_set(tecore_graph_exec_t exec, tecore_graph_node_t node,
                                                  tecore_devptr_t dst, tecore_devptr_t src);
/* Sets a 1-D memset node's destination and value (same element size and
 * count).  From exec's next launch. */
tecore_result_t tecore_graph_exec_memset_node_set(tecore_graph_exec_t exec, tecore_graph_node_t node,
                                                  tecore_devptr_t dst, uint32_t value);

/* ---- virtual memory management ----------------------------------------- */

#define TECORE_VMM_EXPORT_POSIX_FD 0x1u
/* Exportable as a fabric handle (multi-node NVLink; cuda: needs the
 * device's fabric handle support and an IMEX channel). */
#define TECORE_VMM_EXPORT_FABRIC 0x2u
/* Allocation granularity for physical memory on the current device
 * (recommended when recommended != 0, else minimum). */
tecore_result_t tecore_vmm_granularity(size_t *granularity, int recommended);
tecore_result_t tecore_vmm_reserve(size_t bytes, size_t align, tecore_devptr_t *va);
tecore_result_t tecore_vmm_free_va(tecore_devptr_t va, size_t bytes);
/* Physical memory on the current device; bytes a multiple of granularity. */
tecore_result_t tecore_vmm_create(size_t bytes, unsigned flags, tecore_vmm_handle_t *handle);
tecore_result_t tecore_vmm_release(tecore_vmm_handle_t handle);
tecore_result_t tecore_vmm_map(tecore_devptr_t va, size_t bytes, tecore_vmm_handle_t handle,
                               size_t offset);
tecore_result_t tecore_vmm_unmap(tecore_devptr_t va, size_t bytes);
/* Read/write access for device ordinal to a mapped range. */
tecore_result_t tecore_vmm_set_access(tecore_devptr_t va, size_t bytes, int ordinal);
/* A new POSIX file descriptor for the allocation; the caller closes it. */
tecore_result_t tecore_vmm_export_fd(tecore_vmm_handle_t handle, int *fd);
/* Imports an exported allocation (fd stays the caller's). */
tecore_result_t tecore_vmm_import_fd(int fd, tecore_vmm_handle_t *handle);

/* A fabric handle: 64 opaque bytes naming an allocation to processes on
 * other nodes of one NVLink domain (cuda: CUmemFabricHandle).  Plain data:
 * it travels through any byte exchange (libtecomm's bootstrap allgather). */
struct tecore_fabric_handle {
  unsigned char data[64];
};
/* The fabric handle of an allocation made with TECORE_VMM_EXPORT_FABRIC.
 * TECORE_ERR_NOT_SUPPORTED where the system cannot export one (cuda: no
 * fabric support, or no IMEX channel for this process). */
tecore_result_t tecore_vmm_export_fabric(tecore_vmm_handle_t handle,
                                         struct tecore_fabric_handle *fabric);
/* Imports an allocation from its fabric handle (release the result with
 * tecore_vmm_release).  On vdev the exporting process must still hold the
 * allocation; vdev emulates the fabric across its "nodes" (processes). */
tecore_result_t tecore_vmm_import_fabric(const struct tecore_fabric_handle *fabric,
                                         tecore_vmm_handle_t *handle);

/* ---- multicast objects (NVLink SHARP) ---------------------------------- *
 * The cuda backend refuses to create one (TECORE_ERR_DISABLED) when
 * NCCL_NVLS_ENABLE=0 or TECOMM_NVLS_ENABLE=0 is set.  The vdev backend
 * emulates them over the bound unicast memory. */
/* The operator's rule alone, on every backend and without any driver
 * call: TECORE_SUCCESS, or TECORE_ERR_DISABLED with the variable that
 * forbids multicast named in the detail.  Ask it before anything else. */
tecore_result_t tecore_mc_allowed(void);
tecore_result_t tecore_mc_granularity(size_t bytes, int ndevices, size_t *granularity);
tecore_result_t tecore_mc_create(size_t bytes, int ndevices, unsigned flags,
                                 tecore_mc_handle_t *mc);
tecore_result_t tecore_mc_add_device(tecore_mc_handle_t mc, int ordinal);
tecore_result_t tecore_mc_bind_mem(tecore_mc_handle_t mc, size_t mc_offset,
                                   tecore_vmm_handle_t mem, size_t mem_offset, size_t bytes);
tecore_result_t tecore_mc_unbind(tecore_mc_handle_t mc, int ordinal, size_t mc_offset,
                                 size_t bytes);
tecore_result_t tecore_mc_release(tecore_mc_handle_t mc);
tecore_result_t tecore_mc_export_fd(tecore_mc_handle_t mc, int *fd);
tecore_result_t tecore_mc_import_fd(int fd, tecore_mc_handle_t *mc);
/* vdev: the unicast addresses in this process behind mc_va, an address in
 * a mapping of a multicast handle (tecore_vmm_map): members[0 ..
 * min(*count, max)) ordered by (device ordinal, binding order), the same
 * order in every process; *count: the members bound there.  This is how a
 * vdev kernel emulates a multimem load-reduce or store.  cuda:
 * TECORE_ERR_NOT_SUPPORTED (the hardware resolves multimem addresses). */
tecore_result_t tecore_mc_members(tecore_devptr_t mc_va, tecore_devptr_t *members, int max,
                                  int *count);

#ifdef __cplusplus
}
#endif
#endif
