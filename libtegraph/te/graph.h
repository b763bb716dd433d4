/* SPDX-License-Identifier: Apache-2.0 */
/* te/graph.h -- libtegraph: CUDA graph capture and update, a device-memory
 * pool for graphs, and graphed forward/backward callables.  Link with
 * `pkg-config --libs te-graph`.
 *
 * Three layers, each usable alone:
 *   - tegraph_mempool_*   a device-memory arena from which the static
 *                         buffers of graphs come, shared by several graphs;
 *   - tegraph_graph_*     one graph and its executable: capture (also into
 *                         the existing graph), instantiate with flags,
 *                         whole-graph update with an automatic fallback to
 *                         a new instantiation, per-node kernel argument
 *                         update, upload, launch, DOT dump;
 *   - tegraph_callable_*  a forward and a backward function captured once
 *                         from sample tensors and replayed: static buffers,
 *                         copy-in only when a pointer differs, rebinding of
 *                         new pointers in place, keyword tensors, warmup
 *                         with hooks, FP8 weight caching across
 *                         microbatches, side-stream replay, delayed weight
 *                         gradients, several callables captured in a
 *                         pipeline order.
 *
 * Errors: every function returns a tegraph_result_t; the detail (naming
 * the function and the argument) is tegraph_last_error(), shared with
 * libtecore.  A call that fails on its arguments changes nothing.
 *
 * Threads: objects are not locked (like the driver's graphs): one thread
 * at a time per object.  A memory pool is locked and may be shared. */
#ifndef TE_GRAPH_H
#define TE_GRAPH_H

#include <stddef.h>
#include <stdint.h>
#include <te/core.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, message).  The numbers and messages are libtecore's
 * (te/result.h) for the same meaning; a code libtecore does not return has
 * a number of its own (18 and up). */
#define TEGRAPH_RESULT_LIST(X)                                                  \
  X(TEGRAPH_SUCCESS, 0, "success")                                              \
  X(TEGRAPH_ERR_INVALID, 1, "invalid argument")                                 \
  X(TEGRAPH_ERR_NOMEM, 2, "out of memory")                                      \
  X(TEGRAPH_ERR_NOT_SUPPORTED, 8, "not supported by this backend, device or system") \
  X(TEGRAPH_ERR_CAPTURE, 10,                                                    \
    "illegal operation during stream capture, or the capture failed")          \
  X(TEGRAPH_ERR_TIMEOUT, 14, "timed out (a peer or the device did not answer in time)") \
  X(TEGRAPH_ERR_DEVICE, 18, "device layer call failed (see tecore_last_error)") \
  X(TEGRAPH_ERR_STATE, 19, "call not allowed in the object's current state")    \
  X(TEGRAPH_ERR_IO, 20, "I/O failed")

typedef enum tegraph_result {
#define TEGRAPH_RESULT_ENUM_(name, value, msg) name = value,
  TEGRAPH_RESULT_LIST(TEGRAPH_RESULT_ENUM_)
#undef TEGRAPH_RESULT_ENUM_
  TEGRAPH_RESULT_COUNT_
} tegraph_result_t;

/* A static message for a result code. */
const char *tegraph_strerror(tegraph_result_t r);
/* The enum's name, e.g. "TEGRAPH_ERR_INVALID". */
const char *tegraph_result_name(tegraph_result_t r);
/* The calling thread's detail for its last failure (shared with libtecore). */
const char *tegraph_last_error(void);
void tegraph_version(int *major, int *minor, int *patch);

/* Whether io_uring works here (kernel support, not blocked by seccomp or
 * io_uring_disabled): *supported = 1, or 0 with the reason in *why
 * (a static string).  The file-spill path of activation offload needs it. */
tegraph_result_t tegraph_uring_probe(int *supported, const char **why);

/* ==== the graph memory pool =============================================
 * A device-memory arena owned by libtegraph: device memory is reserved in
 * chunks (tecore_mem_alloc) and handed out in 256-byte aligned blocks,
 * first fit, freed blocks merged with their neighbours.  Chunks are given
 * back only when the pool is destroyed, so addresses baked into captured
 * graphs stay valid however blocks come and go.  Graphed callables take
 * their static buffers from a pool; several callables (and the caller's own
 * graphs) can share one, which is how a pipeline schedule keeps all its
 * graphs' buffers in one place.  The driver's own graph memory pool
 * (memory allocation nodes) is not used.
 *
 * Reserving a chunk is a device allocation, which a GLOBAL capture forbids:
 * grow the pool before capturing (tegraph_mempool_reserve).  A pool is
 * thread-safe. */
typedef struct tegraph_mempool tegraph_mempool_t;

/* chunk_bytes: the least size of each reservation (0: TEGRAPH_POOL_CHUNK_MB,
 * default 64 MiB); a larger block gets a chunk of its own size. */
tegraph_result_t tegraph_mempool_create(size_t chunk_bytes, tegraph_mempool_t **pool);
/* A block of bytes (> 0), 256-byte aligned, contents undefined. */
tegraph_result_t tegraph_mempool_alloc(tegraph_mempool_t *pool, size_t bytes, tecore_devptr_t *ptr);
/* Returns a block (ptr as returned by tegraph_mempool_alloc) to the pool.
 * The caller makes sure no queued work still uses it. */
tegraph_result_t tegraph_mempool_free(tegraph_mempool_t *pool, tecore_devptr_t ptr);
/* Makes sure a block of bytes can be handed out without reserving device
 * memory (reserves a chunk if needed): call it before a capture. */
tegraph_result_t tegraph_mempool_reserve(tegraph_mempool_t *pool, size_t bytes);
/* Bytes in live blocks, bytes reserved from the device, and the number of
 * callables using the pool (any pointer may be NULL). */
tegraph_result_t tegraph_mempool_usage(tegraph_mempool_t *pool, size_t *used, size_t *reserved,
                                       int *users);
/* Frees every chunk (blocks still live are freed with them).  Refused
 * (TEGRAPH_ERR_STATE) while a callable uses the pool. */
tegraph_result_t tegraph_mempool_destroy(tegraph_mempool_t *pool);

/* ==== graphs ================================================================
 * A tegraph_graph holds one tecore graph and, once instantiated, its
 * executable.  Capturing again replaces the graph; when an executable
 * exists it is brought up to date by a whole-graph update
 * (tecore_graph_exec_update) or, where the driver refuses the update (the
 * topology changed ...), by a new instantiation -- struct
 * tegraph_update_info says which and why. */
typedef struct tegraph_graph tegraph_graph_t;

/* Instantiation flags: tecore's (te/device.h). */
#define TEGRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH TECORE_GRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH
#define TEGRAPH_INSTANTIATE_UPLOAD TECORE_GRAPH_INSTANTIATE_UPLOAD
#define TEGRAPH_INSTANTIATE_USE_NODE_PRIORITY TECORE_GRAPH_INSTANTIATE_USE_NODE_PRIORITY
/* tegraph_graph_launch launches the graph from the device
 * (tecore_graph_launch_device): the host queues one kernel node whatever
 * the graph holds.  Kernel, memcpy, memset and child-graph nodes only
 * (tegraph turns captured memsets and copies into kernels first); not with
 * AUTO_FREE_ON_LAUNCH. */
#define TEGRAPH_INSTANTIATE_DEVICE_LAUNCH TECORE_GRAPH_INSTANTIATE_DEVICE_LAUNCH

/* An empty graph object; instantiate_flags are used at every
 * instantiation (TEGRAPH_INSTANTIATE_*). */
tegraph_result_t tegraph_graph_create(unsigned instantiate_flags, tegraph_graph_t **g);
/* Waits for nothing: the caller makes sure no launch is in flight when the
 * memory its graph uses is freed (the driver finishes queued launches). */
tegraph_result_t tegraph_graph_destroy(tegraph_graph_t *g);

/* Capture flags. */
#define TEGRAPH_CAPTURE_APPEND 0x1u  /* into the existing graph, after its leaves */
/* Begins capturing stream (not the legacy NULL stream) in mode.  Without
 * TEGRAPH_CAPTURE_APPEND the capture makes a new graph that replaces g's
 * at tegraph_graph_end_capture; with it, the work is appended to g's graph
 * (tecore_stream_begin_capture_to_graph).  TEGRAPH_ERR_STATE while g
 * already captures. */
tegraph_result_t tegraph_graph_begin_capture(tegraph_graph_t *g, tecore_stream_t stream,
                                             tecore_capture_mode_t mode, unsigned flags);

/* What tegraph_graph_end_capture did to the executable. */
struct tegraph_update_info {
  int had_exec;                      /* 1: an executable existed before */
  int updated;                       /* 1: it was updated in place */
  int reinstantiated;                /* 1: the update was refused; a new one replaced it */
  tecore_graph_update_result_t why;  /* the driver's answer to the update */
};
/* Ends the capture begun on g.  When g has an executable it is updated
 * (whole-graph update, or a new instantiation where the driver refuses);
 * *info (may be NULL) says which.  A failed or invalidated capture returns
 * TEGRAPH_ERR_CAPTURE and leaves g's graph and executable as they were
 * (an APPEND capture on cuda: as the driver leaves the graph). */
tegraph_result_t tegraph_graph_end_capture(tegraph_graph_t *g, struct tegraph_update_info *info);
/* Instantiates g's graph now (replacing an executable it has), uploading
 * on upload_stream when g's flags include TEGRAPH_INSTANTIATE_UPLOAD. */
tegraph_result_t tegraph_graph_instantiate(tegraph_graph_t *g, tecore_stream_t upload_stream);
/* Launches the executable on stream (instantiating it first if needed):
 * from the device when g's flags include TEGRAPH_INSTANTIATE_DEVICE_LAUNCH
 * (then not into a capturing stream: TEGRAPH_ERR_CAPTURE). */
tegraph_result_t tegraph_graph_launch(tegraph_graph_t *g, tecore_stream_t stream);
/* Uploads the executable on stream (instantiating it first if needed). */
tegraph_result_t tegraph_graph_upload(tegraph_graph_t *g, tecore_stream_t stream);
tegraph_result_t tegraph_graph_node_count(tegraph_graph_t *g, size_t *count);
/* Writes g's graph as Graphviz DOT to path. */
tegraph_result_t tegraph_graph_dot(tegraph_graph_t *g, const char *path);
/* The tecore handles (still owned by g; either pointer may be NULL). */
tegraph_result_t tegraph_graph_handles(tegraph_graph_t *g, tecore_graph_t *graph,
                                       tecore_graph_exec_t *exec);

/* A kernel node of g's graph whose kernel is registered (te/kernel.h). */
struct tegraph_kernel_node {
  size_t node;                       /* its position among all the graph's nodes */
  int kernel_id;
  const char *name;                  /* the kernel's symbol name */
  unsigned nparams;
  struct tecore_launch_cfg cfg;
};
/* Lists the registered kernels' nodes: up to max in nodes[], the total in
 * *count.  Index i of this list is what the argument calls below take. */
tegraph_result_t tegraph_graph_kernel_nodes(tegraph_graph_t *g, struct tegraph_kernel_node *nodes,
                                            size_t max, size_t *count);
/* Reads parameter param of kernel node k as the executable runs it now
 * (bytes must be the parameter's size). */
tegraph_result_t tegraph_graph_kernel_arg(tegraph_graph_t *g, size_t k, unsigned param,
                                          void *value, size_t bytes);
/* Per-node update: sets parameter param of kernel node k in the executable
 * (instantiating it first if needed), from its next launch.  The graph
 * keeps its captured values; a later capture starts from those. */
tegraph_result_t tegraph_graph_set_kernel_arg(tegraph_graph_t *g, size_t k, unsigned param,
                                              const void *value, size_t bytes);

/* ==== graphed callables ======================================================
 * A callable is a forward function and (optionally) a backward function
 * and a delayed weight-gradient function, captured into three graphs.
 *
 * Buffers.  The callable owns a static buffer (from its memory pool) for
 * every positional input, keyword tensor, output, output gradient and
 * input gradient; the functions are captured reading and writing those.
 * The caller's parameters and their gradient buffers are the caller's:
 * the functions read and accumulate into them directly (through the user
 * context), and the library never allocates, replaces, resets or aliases
 * them, so an optimizer reading them after a replay reads what the
 * replays accumulated.
 *
 * Replay.  Each positional and keyword tensor given at a replay must match
 * its sample (dtype, shape).  When its address is the static buffer's,
 * nothing moves.  Otherwise, when the callable can rebind it -- every
 * node of its graphs that uses the buffer is a registered kernel holding
 * the address in a pointer parameter (at any offset into the buffer), a
 * 1-D memcpy or a memset, and no node is opaque (an unregistered kernel
 * such as cuBLASLt's, a child graph, a host node) -- the new address is
 * written into those nodes (per-node exec updates) and the graphs read the
 * caller's tensor in place until another address is given.  Otherwise the
 * tensor is copied into the static buffer (outputs: out of it) in stream
 * order.  tegraph_callable_slot says which path each buffer took.
 * A rebound input is read in place by the backward and backward_dw graphs
 * too: keep it unchanged until they have run (or create the callable with
 * TEGRAPH_CALLABLE_NO_REBIND).
 *
 * FP8 weight caching.  The forward function gets noop_flag, the device
 * address of an int32 that the forward graph sets first thing: 0 when the
 * replay's is_first_microbatch is nonzero, 1 otherwise.  Weight-quantize
 * kernels given that flag (te/fp8.h) skip their work when it is nonzero,
 * so later microbatches reuse the FP8 weights cached by the first one.
 * Warmup and capture run with the flag 0.
 *
 * Aliasing: what a replay writes (outputs, grad_inputs given with data)
 * shares no byte with anything else the replay is given (inputs, keyword
 * tensors, grad_outputs, each other) nor, in backward, with an input the
 * last forward rebound (the graphs read it in place).  Otherwise
 * TEGRAPH_ERR_INVALID names both, and the callable is left as it was.
 *
 * Order of use: backward needs a forward before it; when a backward_dw
 * function exists, backward_dw must follow each backward before the next
 * forward (the static buffers hold one microbatch).  Out-of-order calls
 * return TEGRAPH_ERR_STATE and change nothing. */
typedef struct tegraph_callable tegraph_callable_t;

typedef enum tegraph_phase {
  TEGRAPH_PHASE_WARMUP = 0,   /* eager, on the callable's stream, before capture */
  TEGRAPH_PHASE_CAPTURE = 1,  /* being captured: enqueue only, no host reads of results */
  TEGRAPH_PHASE_EAGER = 2     /* not used by the library: for the caller's own eager runs */
} tegraph_phase_t;

/* What a function gets.  Tensors point into the callable's static buffers
 * (during warmup and capture).  grad_outputs: in backward and
 * backward_dw, the gradients of the outputs (read); grad_inputs: in
 * backward, the gradients of the inputs to write (an entry's data is 0
 * where input_needs_grad said no), NULL in forward and backward_dw. */
struct tegraph_io {
  tegraph_phase_t phase;
  const struct tecore_tensor *inputs;
  size_t ninputs;
  const char *const *kw_names;
  const struct tecore_tensor *kw;
  size_t nkw;
  const struct tecore_tensor *outputs;
  size_t noutputs;
  const struct tecore_tensor *grad_outputs;
  const struct tecore_tensor *grad_inputs;
  tecore_devptr_t noop_flag;  /* int32; forward: nonzero = reuse cached FP8 weights */
};
/* Enqueues the pass on stream (and only there, or on streams forked from
 * it and joined back); returns TECORE_SUCCESS or the failure, which the
 * library returns as TEGRAPH_ERR_CAPTURE (capture) or TEGRAPH_ERR_DEVICE. */
typedef tecore_result_t (*tegraph_fn)(void *user, tecore_stream_t stream,
                                      const struct tegraph_io *io);
/* Warmup hooks (e.g. to switch activation offload off around warmup). */
typedef tecore_result_t (*tegraph_hook)(void *user);

/* tegraph_callable_desc.flags */
#define TEGRAPH_CALLABLE_NO_REBIND 0x1u  /* always copy: the caller's tensors are never read in place */

struct tegraph_callable_desc {
  tegraph_fn forward;                  /* required */
  tegraph_fn backward;                 /* NULL: forward only */
  tegraph_fn backward_dw;              /* NULL: none (needs backward) */
  void *user;                          /* passed to the functions and hooks */
  /* samples: plain tensors (TECORE_SCALING_NONE, rowwise data); their
   * shapes and dtypes are fixed from here on; their values (when data is
   * not 0) fill the static buffers for warmup and capture */
  const struct tecore_tensor *sample_inputs;
  size_t ninputs;
  const char *const *kw_names;         /* distinct, non-empty */
  const struct tecore_tensor *sample_kw;
  size_t nkw;
  const struct tecore_tensor *outputs; /* dtype and shape of each output (data ignored) */
  size_t noutputs;                     /* >= 1 */
  const unsigned char *input_needs_grad; /* ninputs flags; NULL: every input */
  int num_warmup;                      /* eager iterations before capture (>= 0); they
                                          run backward for real: skip accumulating
                                          gradients in TEGRAPH_PHASE_WARMUP, or clear
                                          them in post_warmup */
  tegraph_hook pre_warmup, post_warmup; /* NULL: none; called once around all warmups */
  tecore_capture_mode_t capture_mode;
  unsigned instantiate_flags;          /* TEGRAPH_INSTANTIATE_* */
  unsigned flags;                      /* TEGRAPH_CALLABLE_* */
  void (*user_free)(void *user);       /* NULL: none; else called with user by
                                          tegraph_callable_destroy, after the
                                          callable is freed (not when creation
                                          fails: user stays the caller's) */
};

typedef enum tegraph_pass {
  TEGRAPH_PASS_FORWARD = 0,
  TEGRAPH_PASS_BACKWARD = 1,
  TEGRAPH_PASS_BACKWARD_DW = 2
} tegraph_pass_t;

/* One step of a capture schedule: which callable, which pass. */
struct tegraph_schedule_entry {
  size_t callable;
  tegraph_pass_t pass;
};

/* Creates one callable: static buffers from pool (NULL: a pool of its own),
 * num_warmup eager iterations (forward, backward, backward_dw) on its
 * stream between the hooks, then captures and instantiates its graphs. */
tegraph_result_t tegraph_callable_create(const struct tegraph_callable_desc *desc,
                                         tegraph_mempool_t *pool, tegraph_callable_t **out);
/* Creates n callables that share pool (NULL: one new pool shared by them):
 * every pass of every callable appears exactly once in order[] (norder
 * entries), a callable's forward before its backward before its
 * backward_dw; warmup and capture run in that order (the pipeline
 * schedule).  order NULL: every forward in index order, then every
 * backward in reverse order, then every backward_dw.  On failure nothing
 * is created. */
tegraph_result_t tegraph_callables_create(const struct tegraph_callable_desc *descs, size_t n,
                                          const struct tegraph_schedule_entry *order,
                                          size_t norder, tegraph_mempool_t *pool,
                                          tegraph_callable_t **out);
/* Waits for the callable's last replay, then frees its graphs, streams and
 * static buffers (back to the pool). */
tegraph_result_t tegraph_callable_destroy(tegraph_callable_t *c);

/* How a replay runs.  NULL options: the legacy stream, is_first_microbatch 1. */
struct tegraph_replay_opts {
  tecore_stream_t stream;         /* the replay is ordered after the work queued here */
  tecore_stream_t replay_stream;  /* NULL: replay on stream; else on this stream, after
                                     stream's work (through an event) */
  tecore_event_t done;            /* recorded where the replay ran, after it; NULL with a
                                     replay_stream: stream waits for replay_stream (joins
                                     back) */
  int is_first_microbatch;        /* forward: nonzero re-quantizes cached FP8 weights */
};

/* Replays the forward graph.  inputs[ninputs] and the keyword tensors (the
 * same names as at creation, any order) must match the samples.
 * outputs: NULL with noutputs 0, or one entry per output: an entry with
 * data 0 receives the static output's descriptor (its values valid until
 * the next forward); an entry with data set (matching dtype and shape)
 * receives the output there (rebound or copied out).  Everything is
 * queued; nothing waits. */
tegraph_result_t tegraph_callable_forward(tegraph_callable_t *c,
                                          const struct tecore_tensor *inputs, size_t ninputs,
                                          const char *const *kw_names,
                                          const struct tecore_tensor *kw, size_t nkw,
                                          struct tecore_tensor *outputs, size_t noutputs,
                                          const struct tegraph_replay_opts *opts);
/* Replays the backward graph with grad_outputs[noutputs] (matching the
 * outputs).  grad_inputs[ninputs] (or NULL with 0) as forward's outputs:
 * data 0 receives the static gradient's descriptor. */
tegraph_result_t tegraph_callable_backward(tegraph_callable_t *c,
                                           const struct tecore_tensor *grad_outputs,
                                           size_t noutputs, struct tecore_tensor *grad_inputs,
                                           size_t ninputs, const struct tegraph_replay_opts *opts);
/* Replays the weight-gradient graph (after backward). */
tegraph_result_t tegraph_callable_backward_dw(tegraph_callable_t *c,
                                              const struct tegraph_replay_opts *opts);

/* tegraph_callable_reset flags */
#define TEGRAPH_RESET_RECAPTURE 0x1u
/* Points every rebound buffer back at the callable's static buffer, forgets
 * the order-of-use state, and with TEGRAPH_RESET_RECAPTURE captures every
 * pass again (no warmup) and updates the executables in place, or
 * re-instantiates them where the driver refuses.  Waits for the last
 * replay first. */
tegraph_result_t tegraph_callable_reset(tegraph_callable_t *c, unsigned flags);

/* Which buffer of a callable. */
typedef enum tegraph_slot_kind {
  TEGRAPH_SLOT_INPUT = 0,
  TEGRAPH_SLOT_KEYWORD = 1,
  TEGRAPH_SLOT_OUTPUT = 2,
  TEGRAPH_SLOT_GRAD_OUTPUT = 3,
  TEGRAPH_SLOT_GRAD_INPUT = 4
} tegraph_slot_kind_t;

/* What the last replay did with a buffer. */
typedef enum tegraph_bind_path {
  TEGRAPH_PATH_NONE = 0,     /* not replayed yet (or reset) */
  TEGRAPH_PATH_STATIC = 1,   /* the static buffer was given, or nothing (outputs): no work */
  TEGRAPH_PATH_REBOUND = 2,  /* the graphs use the caller's tensor in place */
  TEGRAPH_PATH_COPIED = 3    /* copied into (outputs: out of) the static buffer */
} tegraph_bind_path_t;

struct tegraph_slot_info {
  struct tecore_tensor tensor;  /* the static buffer */
  int rebindable;               /* 1: a new address can be written into its nodes */
  size_t uses;                  /* node parameters and copy/memset ends that hold it */
  tecore_devptr_t bound;        /* the address the graphs use now */
  tegraph_bind_path_t last_path;
  char why[160];                /* when not rebindable: why (else "") */
};
/* Describes buffer index of kind (KEYWORD: by name; index ignored). */
tegraph_result_t tegraph_callable_slot(tegraph_callable_t *c, tegraph_slot_kind_t kind,
                                       size_t index, const char *name,
                                       struct tegraph_slot_info *info);
/* Writes one pass's graph as Graphviz DOT to path. */
tegraph_result_t tegraph_callable_dot(tegraph_callable_t *c, tegraph_pass_t pass,
                                      const char *path);

/* ==== a callable made from an operation-fuser sequence ========================
 * te/ops.h's sequences only queue work on the stream they are given, so a
 * built sequence can be a graphed callable without hand-written functions:
 * the forward graph runs tecore_seq_forward(seq, input, output, noop_flag)
 * (so FP8 weight caching follows the replay's is_first_microbatch), the
 * backward graph tecore_seq_backward(seq, dy, need_dx ? dx : NULL).  One
 * input, one output, no keyword tensors, no backward_dw.
 *
 * Gradients.  The parameters and their F32 gradients stay the sequence's
 * (tecore_seq_params): replays of backward add into them, and the caller
 * clears them (tecore_seq_zero_grad) and updates delayed FP8 scales
 * (tecore_seq_update_scales) eagerly between steps, as without graphs.
 * Warmup runs backward for real, so after warmup the gradients are zeroed
 * (synchronously, on a stream of the library's): right after creation they
 * are zero, and they accumulate only from replays.  Warmup's forward does
 * record FP8 amaxes, as an eager forward would.
 *
 * The sequence must outlive the callable, and while the callable exists it
 * belongs to it: an eager forward or backward of the same sequence
 * overwrites the activations the graphs saved.  Extra inputs and outputs
 * (tecore_seq_extra) keep their addresses: write and read them there
 * around replays. */
struct tegraph_seq_callable_desc {
  tecore_seq_t *seq;                        /* built (tecore_seq_build) */
  const struct tecore_tensor *sample_input; /* the sequence's dtype; 2-D view [rows][features]
                                               of the sequence's input; values (data not 0)
                                               used for warmup and capture */
  const struct tecore_tensor *output;       /* dtype and shape of the output (data ignored);
                                               2-D view the sequence's output; NULL: 2-D
                                               [out_rows][out_features] */
  int need_dx;                              /* nonzero: backward writes the input's gradient */
  int num_warmup;                           /* eager iterations before capture (>= 0) */
  tecore_capture_mode_t capture_mode;
  unsigned instantiate_flags;               /* TEGRAPH_INSTANTIATE_* */
  unsigned flags;                           /* TEGRAPH_CALLABLE_* */
};
/* Creates a callable from d->seq (static buffers from pool; NULL: a pool of
 * its own).  Replay it with tegraph_callable_forward (one input, one
 * output) and tegraph_callable_backward (one output gradient; one input
 * gradient when need_dx), free it with tegraph_callable_destroy (the
 * sequence is not destroyed). */
tegraph_result_t tegraph_callable_from_seq(const struct tegraph_seq_callable_desc *d,
                                           tegraph_mempool_t *pool, tegraph_callable_t **out);

#ifdef __cplusplus
}
#endif
#endif
