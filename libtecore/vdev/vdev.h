/* SPDX-License-Identifier: Apache-2.0 */
/* vdev.h -- private header of the vdev backend: the test VM's virtual GPU.
 *
 * Device memory is host memory; each stream is a worker thread that runs a
 * FIFO of operations; events are completion markers; capture records the
 * same operations into graphs; VMM and multicast are memfd mappings.
 * This header is shared by the vdev .c files only (vdev comm kernels of
 * the upper libraries reach multicast members through tecore_mc_members).
 *
 * Object model.  Streams, events, graphs and graph execs are refcounted
 * objects (struct vdev_obj) kept in a registry of live pointers: a public
 * handle is looked up there (taking a reference) before it is touched, so
 * a stale or foreign handle gets TECORE_ERR_INVALID instead of a crash, and
 * an object destroyed by one thread while another uses it stays alive
 * until the last reference goes.  VMM and multicast handles are u64 ids in
 * a separate table (vdev_vmm.c).
 *
 * Locks, outermost first (never taken in the other order):
 *   te_vdev_cap_lock     every capture's state, stream->cap/frontier,
 *                        event->cap/cap_deps
 *   ctx->lock            the context's stream list and legacy stream
 *   memory registry      (vdev_mem.c; reaping a deferred free reads stream
 *                        positions under it)
 *   stream->lock         the stream's queue and counters
 *   leaf locks           object registry, markers, event->lock,
 *                        exec->lock, VMM table */
#ifndef TECORE_VDEV_H
#define TECORE_VDEV_H

#include <pthread.h>
#include <stdatomic.h>
#include "device/device_ops.h"

#define VDEV_MAX_DEVICES 8
#define VDEV_GRANULARITY ((size_t)2 << 20) /* VMM and multicast: 2 MiB */
#define VDEV_DRIVER_VERSION 13000

/* ---- small containers (vdev_util.c) -------------------------------------- */

/* Open-addressing hash map from nonzero u64 keys to pointers; the caller
 * locks.  Used for the object registry, allocations and VMM handles. */
struct vdev_map {
  uint64_t *keys;
  void **vals;
  size_t cap, count;
};
void *te_vdev_map_get(const struct vdev_map *m, uint64_t key);
/* 0 on success, -1 when out of memory. */
int te_vdev_map_put(struct vdev_map *m, uint64_t key, void *val);
/* Removes key; returns its value or NULL. */
void *te_vdev_map_del(struct vdev_map *m, uint64_t key);

/* A sorted set of node indices: a capture stream's frontier, a node's
 * dependencies.  Sorted so two sets compare with memcmp. */
struct vdev_deps {
  size_t n, cap;
  size_t *v;
};
int te_vdev_deps_add(struct vdev_deps *d, size_t x);
int te_vdev_deps_union(struct vdev_deps *d, const struct vdev_deps *src);
int te_vdev_deps_copy(struct vdev_deps *dst, const struct vdev_deps *src);
int te_vdev_deps_equal(const struct vdev_deps *a, const struct vdev_deps *b);
void te_vdev_deps_free(struct vdev_deps *d);

/* ---- refcounted objects and their registry (vdev_util.c) ----------------- */

enum vdev_kind { VDEV_KIND_STREAM = 1, VDEV_KIND_EVENT, VDEV_KIND_GRAPH, VDEV_KIND_EXEC };

struct vdev_obj {
  uint32_t magic;                         /* per kind while alive; poisoned when freed */
  uint32_t kind;
  atomic_int refs;
  void (*destroy)(struct vdev_obj *);     /* frees the containing object */
};
void te_vdev_obj_init(struct vdev_obj *o, enum vdev_kind kind, void (*destroy)(struct vdev_obj *));
/* Makes a handle valid (the registry does not own a reference: the
 * creator's reference is the one the public destroy drops). */
tecore_result_t te_vdev_obj_register(struct vdev_obj *o);
/* Looks a public handle up: a new reference, or NULL when the handle is not
 * a live object of that kind. */
struct vdev_obj *te_vdev_obj_get(const void *handle, enum vdev_kind kind);
/* Removes o from the registry; 1 if it was there (only one destroyer wins). */
int te_vdev_obj_unregister(struct vdev_obj *o);
void te_vdev_obj_ref(struct vdev_obj *o);
void te_vdev_obj_unref(struct vdev_obj *o);
/* The last step of a destroy: frees an object's memory, after the next
 * 1024 destructions (vdev_util.c says why). */
void te_vdev_obj_free_memory(void *p);

/* ---- completion markers (vdev_util.c) ------------------------------------- */

/* The completion of one point in a stream: what an event record captures.
 * Shared (refcounted) by the event, the stream op that completes it and
 * every wait on it, so an event may be re-recorded or destroyed while
 * waits on an older record are pending. */
struct vdev_marker {
  atomic_int refs;
  atomic_int done;
  uint64_t t_ns;  /* CLOCK_MONOTONIC at completion (written before done) */
  int gen;        /* te_vdev_fork_gen at creation */
};
struct vdev_marker *te_vdev_marker_new(void);
void te_vdev_marker_ref(struct vdev_marker *m);
void te_vdev_marker_unref(struct vdev_marker *m);
void te_vdev_marker_complete(struct vdev_marker *m);
/* Blocks until m completes (or the process exits). */
void te_vdev_marker_wait(struct vdev_marker *m);
/* 1 when m completed (or belongs to work queued before a fork, which
 * never completes in the child). */
int te_vdev_marker_done(const struct vdev_marker *m);

/* Set by the library destructor: waits give up so exit never hangs. */
extern atomic_int te_vdev_exiting;

/* ---- fork (vdev_fork.c) ------------------------------------------------------
 * Worker threads do not survive fork: the child disowns the streams,
 * captures and pending markers it inherits (a stream from before the fork
 * is an unknown handle there; a wait on pre-fork work returns at once) and
 * starts afresh.  Every lock is held across fork so the child's are sane.
 * te_vdev_fork_gen counts the forks this process descends from. */
extern atomic_int te_vdev_fork_gen;
enum vdev_fork_phase { VDEV_FORK_PREPARE, VDEV_FORK_PARENT, VDEV_FORK_CHILD };
void te_vdev_fork_register(void);
/* each file's part: lock at PREPARE, unlock after (and reset in the child) */
void te_vdev_capture_fork(enum vdev_fork_phase phase);
void te_vdev_ctx_fork(enum vdev_fork_phase phase);
void te_vdev_registry_fork(enum vdev_fork_phase phase);
void te_vdev_mem_fork(enum vdev_fork_phase phase);

/* ---- devices and contexts (vdev_dev.c) ------------------------------------ */

struct vdev_stream;

/* A device's primary context.  Streams belong to the context current when
 * they are created; the legacy default stream is one per context. */
struct vdev_ctx {
  uint32_t magic;
  int ordinal;
  pthread_mutex_t lock;           /* streams[], legacy, retain */
  int retain;                     /* ctx_create count minus ctx_destroy count */
  struct vdev_stream *legacy;     /* created on first use */
  struct vdev_stream **streams;   /* live created streams (not the legacy one) */
  size_t nstreams, cap;
};
int te_vdev_ndevices(void);
/* The calling thread's context; device 0's primary one is made current when
 * the thread has none (as the runtime API does).  Never NULL. */
struct vdev_ctx *te_vdev_ctx_current(void);
/* Device ordinal's primary context (NULL outside [0, ndevices)). */
struct vdev_ctx *te_vdev_ctx_at(int ordinal);

/* ---- operations: what a stream runs and a graph node holds (vdev_op.c) ---- */

enum vdev_op_type {
  /* graph node types (what capture records) */
  VDEV_OP_EMPTY = 0,
  VDEV_OP_KERNEL,
  VDEV_OP_MEMCPY,
  VDEV_OP_MEMSET,
  VDEV_OP_WRITE_VALUE,
  VDEV_OP_WAIT_VALUE,
  VDEV_OP_EVENT_RECORD,
  VDEV_OP_EVENT_WAIT,
  VDEV_OP_CHILD_GRAPH,
  VDEV_OP_NODE_TYPES_,            /* marks the end of the node types */
  /* stream-only operations */
  VDEV_OP_MARKER,                 /* completes a marker (event record) */
  VDEV_OP_WAIT_MARKER,            /* waits for a marker (stream wait event) */
  VDEV_OP_BARRIER,                /* waits for other streams to reach positions */
  VDEV_OP_GRAPH_LAUNCH            /* runs an exec's plan */
};

struct vdev_event;
struct vdev_plan;

struct vdev_op {
  enum vdev_op_type type;
  union {
    struct {
      const struct tecore_kernel_def *def;
      const struct te_kalign *align; /* the entry's alignment record (NULL: none) */
      int id;
      struct tecore_launch_cfg cfg;
      unsigned char *args;        /* the parameter values, copied at enqueue */
      size_t args_bytes;
    } kernel;
    struct {
      uint64_t dst, src;
      size_t bytes;
    } copy;
    struct {
      uint64_t dst;
      uint32_t value;
      unsigned elem;              /* 1, 2 or 4 bytes */
      size_t count;
    } set;
    struct {
      uint64_t addr, value;
      unsigned width;             /* 32 or 64 */
      tecore_wait_cond_t cond;    /* WAIT_VALUE only */
    } mem;
    struct {
      struct vdev_event *event;   /* a reference */
    } ev;
    struct {
      struct vdev_plan *plan;     /* a reference (CHILD_GRAPH, GRAPH_LAUNCH) */
      struct vdev_marker *prev;   /* GRAPH_LAUNCH: the exec's previous launch */
      struct vdev_marker *done;   /* GRAPH_LAUNCH: completed after the plan */
    } graph;
    struct {
      struct vdev_marker *m;      /* a reference */
    } marker;
    struct {
      size_t n;
      struct vdev_stream **streams; /* references */
      uint64_t *pos;
    } barrier;
  } u;
};
/* Drops what op owns (argument copy, references); op becomes EMPTY. */
void te_vdev_op_release(struct vdev_op *op);
/* Deep copy (graph nodes into plans and back). */
tecore_result_t te_vdev_op_clone(struct vdev_op *dst, const struct vdev_op *src);
/* Runs op on the calling (worker) thread; a failure becomes the stream's
 * sticky error. */
tecore_result_t te_vdev_op_run(struct vdev_stream *s, struct vdev_op *op);
const char *te_vdev_op_name(enum vdev_op_type type);
/* A one-line description for DOT labels ("\n" separates lines). */
void te_vdev_op_label(const struct vdev_op *op, char *buf, size_t n);

/* vdev_kernel.c, vdev_memop.c: the op bodies that need more than a line */
tecore_result_t te_vdev_kernel_run(const struct vdev_op *op);
/* A kernel op of k (its argument values copied); fn names errors. */
tecore_result_t te_vdev_kernel_op(const struct te_kernel_entry *k,
                                  const struct tecore_launch_cfg *cfg, void *const *args,
                                  struct vdev_op *op, const char *fn);
/* Where parameter i of def sits in a kernel op's packed argument copy
 * (i == nparams: the copy's size). */
size_t te_vdev_arg_offset(const struct tecore_kernel_def *def, unsigned i);
tecore_result_t te_vdev_wait_value_run(struct vdev_stream *s, const struct vdev_op *op);
void te_vdev_write_value_run(const struct vdev_op *op);

/* ---- streams (vdev_stream.c) ---------------------------------------------- */

struct vdev_work {
  struct vdev_work *next;
  struct vdev_op op;
};

struct vdev_capture;

struct vdev_stream {
  struct vdev_obj obj;
  struct vdev_ctx *ctx;
  unsigned flags;
  int priority;
  int legacy;                     /* the context's NULL stream */
  int gen;                        /* te_vdev_fork_gen at creation */
  pthread_mutex_t lock;
  pthread_cond_t work_cv;         /* the worker waits for work */
  pthread_cond_t done_cv;         /* synchronizers wait for progress */
  struct vdev_work *head, *tail;
  uint64_t enqueued, completed;   /* positions: ops pushed, ops finished */
  tecore_result_t sticky;         /* first failure of a run op (a timeout) */
  char sticky_msg[512];
  int stop;                       /* destroy: drain, then exit */
  pthread_t thread;
  /* capture state, under te_vdev_cap_lock */
  struct vdev_capture *cap;       /* the capture this stream records into */
  struct vdev_deps frontier;      /* nodes the next captured op depends on */
  const char *last_kernel;        /* memcheck: the name of the last kernel it ran */
};

/* Resolves a public stream (NULL: the current context's legacy stream) to a
 * new reference; TECORE_ERR_INVALID for an unknown handle. */
tecore_result_t te_vdev_stream_get(tecore_stream_t h, struct vdev_stream **s, const char *fn);
void te_vdev_stream_put(struct vdev_stream *s);
/* Submits op to a public stream: recorded as a graph node when the stream
 * captures, else queued behind the implicit synchronization of the legacy
 * stream.  Always takes ownership of op (released on failure). */
tecore_result_t te_vdev_submit(tecore_stream_t h, struct vdev_op *op, const char *fn);
/* The capture-or-enqueue steps of a submission that is not one plain op
 * (an event record or wait, a graph launch): under te_vdev_cap_lock the
 * legacy stream's capture rule, then capture when s captures, else idle
 * (when given), which may take the work itself (*taken = 1: the stream
 * joined a capture); outside the lock, enqueue when nothing took it.  The
 * first failure ends the steps and is returned. */
struct vdev_submit_steps {
  tecore_result_t (*capture)(struct vdev_stream *s, void *arg, const char *fn);
  tecore_result_t (*idle)(struct vdev_stream *s, void *arg, int *taken, const char *fn);
  tecore_result_t (*enqueue)(struct vdev_stream *s, void *arg, const char *fn);
};
tecore_result_t te_vdev_capture_or_enqueue(struct vdev_stream *s,
                                           const struct vdev_submit_steps *steps, void *arg,
                                           const char *fn);
/* Queues op on s (no capture check), with the legacy stream's implicit
 * synchronization.  Takes ownership of op. */
tecore_result_t te_vdev_stream_enqueue(struct vdev_stream *s, struct vdev_op *op);

/* Everything queued now, on every stream of every context: a BARRIER op
 * of (stream, position) pairs (type EMPTY when no stream has pending
 * work).  What a free must wait for, as cuMemFree does, before memory
 * that queued work may still touch goes back. */
tecore_result_t te_vdev_pending_work(struct vdev_op *barrier);
/* 1 when every stream of a BARRIER op reached its position (or belongs to
 * a process this one forked from: that work never runs here). */
int te_vdev_barrier_reached(const struct vdev_op *barrier);
/* Blocks until te_vdev_barrier_reached (or the process exits). */
void te_vdev_barrier_wait(const struct vdev_op *barrier);

/* ---- events (vdev_event.c) ------------------------------------------------ */

struct vdev_event {
  struct vdev_obj obj;
  unsigned flags;
  pthread_mutex_t lock;           /* marker */
  struct vdev_marker *marker;     /* last record outside capture; NULL: none */
  /* last record inside a capture, under te_vdev_cap_lock */
  struct vdev_capture *cap;       /* a reference; NULL when none */
  struct vdev_deps cap_deps;      /* the recording stream's frontier then */
};
/* The event's current marker (a new reference) or NULL. */
struct vdev_marker *te_vdev_event_marker(struct vdev_event *e);
void te_vdev_event_set_marker(struct vdev_event *e, struct vdev_marker *m);

/* ---- capture (vdev_capture.c) --------------------------------------------- */

enum vdev_cap_status { VDEV_CAP_ACTIVE = 1, VDEV_CAP_INVALIDATED, VDEV_CAP_ENDED };

struct vdev_capture {
  atomic_int refs;
  tecore_capture_mode_t mode;
  pthread_t thread;               /* the thread that began it */
  struct vdev_ctx *ctx;
  enum vdev_cap_status status;
  struct vdev_stream *origin;     /* member 0 */
  struct vdev_stream **members;   /* references; origin and joined streams */
  size_t nmembers, cap;
  struct vdev_graph *graph;       /* being built; not registered until the end */
  int to_graph;                   /* graph is the caller's (capture to graph): a
                                     reference; rolled back to base_count on failure */
  size_t base_count;
  struct vdev_capture *next;      /* the list of live captures */
};
extern pthread_mutex_t te_vdev_cap_lock;
void te_vdev_capture_unref(struct vdev_capture *c);
/* A "potentially unsafe" call (allocation, device-wide synchronization):
 * TECORE_ERR_CAPTURE, invalidating the captures that forbid it, when a
 * GLOBAL capture runs on any thread or a THREAD_LOCAL one on this thread. */
tecore_result_t te_vdev_capture_unsafe_call(const char *fn);
/* Use of ctx's legacy stream: TECORE_ERR_CAPTURE, invalidating them, when
 * a capture includes a blocking stream of ctx (the implicit
 * synchronization would cross the capture).  Caller holds te_vdev_cap_lock. */
tecore_result_t te_vdev_capture_legacy_use_locked(struct vdev_ctx *ctx, const char *fn);
/* Records op as a node of s's capture (s->cap != NULL); takes ownership.
 * Caller holds te_vdev_cap_lock. */
tecore_result_t te_vdev_capture_add_locked(struct vdev_stream *s, struct vdev_op *op,
                                           const char *fn);
void te_vdev_capture_invalidate_locked(struct vdev_capture *c, const char *why);
/* s (not capturing) joins c, its next node depending on deps (a fork
 * through an event).  Caller holds te_vdev_cap_lock. */
tecore_result_t te_vdev_capture_join_locked(struct vdev_capture *c, struct vdev_stream *s,
                                            const struct vdev_deps *deps, const char *fn);
/* s is being destroyed: leaves its capture (ending it when s is the origin). */
void te_vdev_capture_stream_gone(struct vdev_stream *s);
/* tecore_fini (vdev_dev.c's te_vdev_fini calls these in this order): every
 * stream of every context, the legacy ones included, drained, its worker
 * joined and freed; the deferred frees released and the memory registry
 * and arena freed; the object registry's table freed. */
void te_vdev_streams_fini(void);
void te_vdev_mem_fini(void);
void te_vdev_registry_fini(void);
/* 1 when s is a blocking (not NON_BLOCKING), non-legacy stream. */
int te_vdev_stream_is_blocking(const struct vdev_stream *s);

/* ---- graphs and plans (vdev_graph.c, vdev_exec.c) ------------------------- */

struct vdev_node {
  struct vdev_op op;
  struct vdev_deps deps;          /* indices of earlier nodes */
};

struct vdev_graph {
  struct vdev_obj obj;
  struct vdev_node *nodes;
  size_t count, cap;
  int capturing;                  /* a capture appends to it (te_vdev_cap_lock) */
  uint32_t serial;                /* in its node handles: unique among graphs */
};
struct vdev_graph *te_vdev_graph_new(void);
/* Appends a node (takes ownership of op, copies deps). */
tecore_result_t te_vdev_graph_add(struct vdev_graph *g, struct vdev_op *op,
                                  const struct vdev_deps *deps, size_t *index);
/* Frees an unregistered graph (a failed capture's). */
void te_vdev_graph_free(struct vdev_graph *g);
/* Drops nodes from count on (a failed capture into an existing graph). */
void te_vdev_graph_truncate(struct vdev_graph *g, size_t count);
/* Public node handles are the graph's serial (high 32 bits) and the
 * position plus one (low 32 bits): a node of one graph is never a valid
 * handle of another (graph_owner.c checks it above the backends). */
#define VDEV_NODE_HANDLE(serial, i) \
  ((tecore_graph_node_t)(uintptr_t)(((uint64_t)(serial) << 32) | (uint64_t)((i) + 1)))
#define VDEV_NODE_INDEX(h) ((size_t)((uint64_t)(uintptr_t)(h) & 0xffffffffu) - 1)
#define VDEV_NODE_SERIAL(h) ((uint32_t)((uint64_t)(uintptr_t)(h) >> 32))

/* An instantiated graph: an immutable copy of the nodes plus a
 * topological order.  An exec points at its current plan; each launch holds
 * a reference, so an update or destroy never changes a launch in flight. */
struct vdev_plan {
  atomic_int refs;
  size_t count;
  struct vdev_node *nodes;
  size_t *order;
};
void te_vdev_plan_ref(struct vdev_plan *p);
void te_vdev_plan_unref(struct vdev_plan *p);
tecore_result_t te_vdev_plan_run(struct vdev_stream *s, struct vdev_plan *p);

/* ---- VMM and multicast (vdev_vmm.c, vdev_mc.c) ----------------------------- */

/* The table of u64 handles, shared by VMM allocations and multicast
 * objects, and the reserved/mapped ranges, all under te_vdev_vmm_lock. */
extern pthread_mutex_t te_vdev_vmm_lock;
#define VDEV_HANDLE_PHYS 0x5600000000000000ull /* 'V' */
#define VDEV_HANDLE_MC 0x4d00000000000000ull   /* 'M' */
#define VDEV_HANDLE_TAG_MASK 0xff00000000000000ull
/* Registers obj under a new handle of that tag; 0 when out of memory. */
uint64_t te_vdev_handle_new_locked(uint64_t tag, void *obj);
void *te_vdev_handle_get_locked(uint64_t handle, uint64_t tag);
void *te_vdev_handle_del_locked(uint64_t handle, uint64_t tag);
/* A physical allocation's memfd (not duplicated) and size. */
tecore_result_t te_vdev_phys_fd_locked(uint64_t handle, int *fd, size_t *bytes, const char *fn);
/* Wraps fd (owned from then on, closed on failure) of bytes as a new
 * physical allocation handle with flags (TECORE_VMM_EXPORT_*). */
tecore_result_t te_vdev_phys_adopt(int fd, size_t bytes, unsigned flags, uint64_t *handle,
                                   const char *fn);
/* A physical allocation's TECORE_VMM_EXPORT_* flags (0 if unknown). */
unsigned te_vdev_phys_flags_locked(uint64_t handle);
/* A multicast object's size, for vmm_map (TECORE_ERR_INVALID if unknown). */
tecore_result_t te_vdev_mc_size_locked(uint64_t handle, size_t *bytes, const char *fn);
/* The multicast mapping containing va: its object and the offset in it. */
int te_vdev_mc_mapping_locked(uint64_t va, uint64_t *mc, size_t *mc_offset);


/* ---- the ops ------------------------------------------------------------
 * te_vdev_<op> for every op of TE_DEVICE_OPS (device_ops.h), by file:
 * vdev_dev.c (init, driver_version, device_*, ctx_*), vdev_mem.c (mem_*),
 * vdev_copy.c (memcpy_*, memset_async), vdev_stream.c (stream_*),
 * vdev_event.c (event_*, stream_wait_event), vdev_memop.c (stream memory
 * ops), vdev_kernel.c (kernel_*), vdev_capture.c (capture), vdev_graph.c
 * (a graph's nodes, count, DOT, destroy), vdev_exec.c (instantiate,
 * graph_exec_*, launch, upload), vdev_vmm.c (vmm_*), vdev_fabric.c
 * (vmm_export_fabric, vmm_import_fabric), vdev_mc.c (mc_*),
 * gemm/gemm_vdev.c (gemm: the reference GEMM). */
TE_DEVICE_OPS(TE_DEVICE_OP_PROTO, vdev)

/* vdev_mem.c: the allocation registry */
enum vdev_alloc_kind {
  VDEV_ALLOC_DEVICE = 1,
  VDEV_ALLOC_HOST,                /* tecore_mem_alloc_host */
  VDEV_ALLOC_HOST_REGISTERED      /* tecore_mem_host_register */
};
struct vdev_alloc_info {
  uintptr_t base;
  size_t bytes;
  enum vdev_alloc_kind kind;
};
const char *te_vdev_alloc_kind_name(enum vdev_alloc_kind k);
/* 1 and *info when a live allocation overlaps [p, p+bytes) (the one
 * containing p when there is one). */
int te_vdev_mem_lookup(uintptr_t p, size_t bytes, struct vdev_alloc_info *info);
/* 1 when p is in the device-memory arena (live or not). */
int te_vdev_mem_in_arena(uintptr_t p);
/* Releases the deferred frees whose queued work is done. */
void te_vdev_mem_reap(void);
/* Address space for a VMM reservation, inside the arena so that a range
 * freed later stays refused by every check (it never becomes host memory
 * that someone else mapped): bytes at align (a power of two) from a span
 * of *span bytes at *span_base, reserved and inaccessible; 0 when the
 * arena has no room.  te_vdev_arena_unreserve gives the span back. */
uintptr_t te_vdev_arena_reserve(size_t bytes, size_t align, uintptr_t *span_base, size_t *span);
void te_vdev_arena_unreserve(uintptr_t span_base, size_t span);
/* tecore_fini: the reservations and mappings go with the arena. */
void te_vdev_vmm_fini(void);
/* vdev_vmm.c: 1 when [p, p+bytes) is covered by VMM mappings, -1 when it
 * touches a reservation without being covered, 0 when it is not VMM. */
int te_vdev_vmm_check_range(uintptr_t p, size_t bytes);
/* 1 and the gapless run of VMM mappings around p in [*base, *base+*bytes),
 * or 0 when no mapping holds p. */
int te_vdev_vmm_range(uintptr_t p, uintptr_t *base, size_t *bytes);
/* vdev_check.c: the memory checker (TECORE_VDEV_CHECK) */
/* TECORE_SUCCESS, or TECORE_ERR_ILLEGAL_ADDRESS (sticky on s when s is
 * not NULL) when op would touch memory outside every live allocation. */
tecore_result_t te_vdev_check_op(struct vdev_stream *s, const struct vdev_op *op, const char *fn);
/* An illegal address found by a check: sticky on s (when given and still
 * clean), logged as "TAG: FN: illegal address: WHY", and returned. */
tecore_result_t te_vdev_fault(struct vdev_stream *s, const char *tag, const char *fn,
                              const char *why);

/* vdev_memcheck.c: red zones around device memory (TECORE_VDEV_MEMCHECK) */
int te_vdev_memcheck_on(void);
/* The damage found in one allocation's red zones: offsets from its base
 * (negative: before it) of the first and last written byte. */
struct vdev_rz_hit {
  uintptr_t base;
  size_t bytes;
  ptrdiff_t first, last;
  size_t nbad;                    /* bytes not poison */
};
/* Pages to map for an allocation of bytes with its red zones. */
size_t te_vdev_rz_mapped(size_t bytes, size_t page);
/* The allocation's address in [region, region+mapped); poisons the rest. */
uintptr_t te_vdev_rz_place(uintptr_t region, size_t mapped, size_t bytes);
/* 1 and *h when a red zone was written (then repainted), else 0. */
int te_vdev_rz_verify(uintptr_t region, size_t mapped, uintptr_t base, size_t bytes,
                      struct vdev_rz_hit *h);
void te_vdev_rz_describe(const struct vdev_rz_hit *h, char *buf, size_t n);
/* Damage no call can return (a deferred free's): logged, and reported by
 * the next te_vdev_memcheck_sync. */
void te_vdev_memcheck_late(const struct vdev_rz_hit *h, const char *when);
/* After a kernel op ran on s; at a synchronize (s: the stream synchronized,
 * or NULL).  TECORE_ERR_ILLEGAL_ADDRESS, sticky on s, for a written red zone. */
tecore_result_t te_vdev_memcheck_kernel(struct vdev_stream *s, const struct vdev_op *op);
tecore_result_t te_vdev_memcheck_sync(struct vdev_stream *s, const char *fn);
/* vdev_mem.c: verifies (and repaints) the red zones of the device
 * allocations whose pages hold one of ptrs[0..n) (every allocation when
 * ptrs is NULL); the number damaged, the first in *h. */
size_t te_vdev_mem_redzones_check(const uintptr_t *ptrs, size_t n, struct vdev_rz_hit *h);
/* 1 and the allocation when p is in the pages of a memcheck allocation
 * (inside it or in its red zones). */
int te_vdev_mem_redzone_owner(uintptr_t p, struct vdev_alloc_info *info);

/* waits for every stream of ctx (vdev_stream.c; used by ctx_synchronize) */
tecore_result_t te_vdev_ctx_drain(struct vdev_ctx *ctx);

#endif
