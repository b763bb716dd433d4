/* SPDX-License-Identifier: Apache-2.0 */
/* te/comm.h -- libtecomm: communicators, a symmetric memory pool and
 * allreduce (NVLS over NVLink multicast, IPC one-shot, two-shot and
 * Lamport kernels over the pool, MNNVL across nodes, NCCL and verbs as
 * the fallbacks) with residual-add + RMSNorm fused in, reduce-scatter and
 * all-gather.
 * Link with `pkg-config --libs te-comm`.  libtecomm(7) is the overview:
 * algorithms, the selection table, the fallback chain, every variable.
 *
 * Ownership and threads.  A communicator is used by one thread at a time,
 * with its device's context current (init makes it current); its
 * collective calls (init, split, mem_alloc, mem_free, allreduce,
 * reduce_scatter, allgather, ag_gemm, gemm_rs, destroy)
 * must be made by every rank in the same order.  Results of stream-ordered calls are ready on the
 * stream passed in; nothing blocks the host except init, split, mem_alloc,
 * mem_free and destroy (host exchanges with the peers, each bounded by
 * TECOMM_TIMEOUT). */
#ifndef TE_COMM_H
#define TE_COMM_H

#include <stddef.h>
#include <te/core.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, message).  The numbers and messages are libtecore's
 * (te/result.h) for the same meaning; a code libtecore does not return has
 * a number of its own (18 and up). */
#define TECOMM_RESULT_LIST(X)                                                   \
  X(TECOMM_SUCCESS, 0, "success")                                               \
  X(TECOMM_ERR_INVALID, 1, "invalid argument")                                  \
  X(TECOMM_ERR_NOMEM, 2, "out of memory")                                       \
  X(TECOMM_ERR_NOT_SUPPORTED, 8, "not supported by this backend, device or system") \
  X(TECOMM_ERR_CAPTURE, 10,                                                     \
    "illegal operation during stream capture, or the capture failed")          \
  X(TECOMM_ERR_SYSTEM, 12, "system call failed")                                \
  X(TECOMM_ERR_TIMEOUT, 14, "timed out (a peer or the device did not answer in time)") \
  X(TECOMM_ERR_DEVICE, 18, "device layer call failed (see tecore_last_error)")  \
  X(TECOMM_ERR_BOOTSTRAP, 21, "bootstrap exchange failed")                      \
  X(TECOMM_ERR_ABORTED, 22, "the communicator was aborted")                     \
  X(TECOMM_ERR_MISMATCH, 23, "the ranks made different collective calls")

typedef enum tecomm_result {
#define TECOMM_RESULT_ENUM_(name, value, msg) name = value,
  TECOMM_RESULT_LIST(TECOMM_RESULT_ENUM_)
#undef TECOMM_RESULT_ENUM_
  TECOMM_RESULT_COUNT_
} tecomm_result_t;

const char *tecomm_strerror(tecomm_result_t r);
const char *tecomm_result_name(tecomm_result_t r);
/* The calling thread's detail for its last failure (shared with libtecore). */
const char *tecomm_last_error(void);
void tecomm_version(int *major, int *minor, int *patch);

/* The InfiniBand/RoCE devices the verbs fallback can use: their count, and
 * names[0..min(count,max)-1] copied into caller-owned buffers of 64 bytes.
 * Built without verbs: TECOMM_ERR_NOT_SUPPORTED. */
tecomm_result_t tecomm_verbs_devices(int *count, char (*names)[64], int max);
/* Whether an RDMA NIC could read and write device's memory directly
 * (GPUDirect RDMA: the nvidia-peermem module loaded, or dma-buf export):
 * *possible 1 or 0, and why (len bytes, NUL-terminated; NULL with len 0)
 * says which, or why not.  Detected only: the verbs path stages through
 * host memory either way. */
tecomm_result_t tecomm_gpudirect(int device, int *possible, char *why, size_t len);

/* ---- bootstrap -------------------------------------------------------------
 * How the ranks find each other at tecomm_comm_init.  It is used during
 * init (and, for communicators spanning hosts, by the later collective
 * host exchanges); ranks on one host then talk over a per-communicator
 * Unix socket mesh, which also carries the memory handles (SCM_RIGHTS). */

/* Caller callbacks.  allgather: every rank contributes bytes from send;
 * recv receives nranks * bytes, rank r's block at r * bytes.  barrier:
 * returns when every rank entered it.  Both return 0 on success, anything
 * else on failure (init then fails with TECOMM_ERR_BOOTSTRAP). */
typedef int (*tecomm_allgather_fn)(const void *send, void *recv, size_t bytes, void *ctx);
typedef int (*tecomm_barrier_fn)(void *ctx);

typedef enum tecomm_bootstrap_kind {
  TECOMM_BOOTSTRAP_ENV = 0,       /* TCP rendezvous: TECOMM_RANK, TECOMM_NRANKS, TECOMM_ROOT */
  TECOMM_BOOTSTRAP_CALLBACKS = 1, /* allgather + barrier + ctx */
  TECOMM_BOOTSTRAP_NCCL = 2,      /* an existing NCCL communicator (ncclAllGather) */
  TECOMM_BOOTSTRAP_MPI = 3        /* an MPI communicator: te/comm_mpi.h fills it */
} tecomm_bootstrap_kind_t;

/* Zero-initialised, or NULL where a bootstrap is asked for, means ENV. */
struct tecomm_bootstrap {
  tecomm_bootstrap_kind_t kind;
  tecomm_allgather_fn allgather;  /* CALLBACKS */
  tecomm_barrier_fn barrier;      /* CALLBACKS */
  void *ctx;                      /* CALLBACKS: passed to both */
  const char *root;               /* ENV: "host:port"; NULL reads TECOMM_ROOT */
  void *nccl_comm;                /* NCCL: an ncclComm_t (stays the caller's) */
  const void *mpi_comm;           /* MPI: the address of an MPI_Comm (te/comm_mpi.h) */
};

/* ---- communicators ------------------------------------------------------ */

typedef struct tecomm_comm *tecomm_comm_t;

/* Makes a communicator of nranks ranks; this process is rank.  rank and
 * nranks may be -1: the bootstrap says (TECOMM_RANK / TECOMM_NRANKS, the
 * NCCL or MPI communicator).  device: the device ordinal this rank uses
 * (its primary context is retained and made current on the calling
 * thread); -1 picks the local rank modulo the device count.  Collective:
 * every rank calls it.  At init the ranks allgather their capabilities and
 * all take the same place in the fallback chain (libtecomm(7)); the choice
 * is logged at INFO.  Free with tecomm_comm_destroy. */
tecomm_result_t tecomm_comm_init(int rank, int nranks, int device,
                                 const struct tecomm_bootstrap *bootstrap, tecomm_comm_t *comm);

/* Splits comm into groups of the ranks that pass the same color (>= 0),
 * ordered by key, then by rank in comm.  A rank passing TECOMM_SPLIT_NONE
 * gets *newcomm = NULL.  Collective over comm.  The groups must lie on one
 * host (tensor-parallel groups). */
#define TECOMM_SPLIT_NONE (-1)
tecomm_result_t tecomm_comm_split(tecomm_comm_t comm, int color, int key, tecomm_comm_t *newcomm);

/* Collective; waits for the communicator's work, unmaps the peers' pools
 * and frees everything.  NULL is accepted. */
tecomm_result_t tecomm_comm_destroy(tecomm_comm_t comm);

/* Not collective: makes every device-side wait of this rank give up
 * (queued and running collectives finish with an error instead of
 * waiting for peers), aborts the NCCL communicator, and makes every later
 * call return TECOMM_ERR_ABORTED.  The communicator must still be
 * destroyed. */
tecomm_result_t tecomm_comm_abort(tecomm_comm_t comm);

/* The communicator's health: TECOMM_SUCCESS, TECOMM_ERR_TIMEOUT (a
 * device-side wait expired; *peer says for which rank), TECOMM_ERR_ABORTED,
 * or the first error a collective met.  Reads the device error word
 * (synchronously: call it between collectives).  peer may be NULL. */
tecomm_result_t tecomm_comm_status(tecomm_comm_t comm, int *peer);

/* This rank, the number of ranks and the device ordinal (any may be NULL). */
tecomm_result_t tecomm_comm_rank(tecomm_comm_t comm, int *rank, int *nranks, int *device);

/* ---- symmetric memory --------------------------------------------------- */

/* Collective: bytes of symmetric memory (256-byte aligned) at the same
 * offset of every rank's pool, so peers reach it (tecomm_mem_peer_ptr) and
 * allreduce reads it without a copy.  Past the pool (or where no pool
 * could be had) each call makes its own allocation, mapped by every peer.
 * Every rank passes the same bytes.  Free with tecomm_mem_free. */
tecomm_result_t tecomm_mem_alloc(tecomm_comm_t comm, size_t bytes, tecore_devptr_t *ptr);
/* Collective; ptr as tecomm_mem_alloc returned it (0 is accepted).  Work
 * using it must be done (the call does not wait for streams). */
tecomm_result_t tecomm_mem_free(tecomm_comm_t comm, tecore_devptr_t ptr);
/* The address in this process of peer's copy of ptr (ptr anywhere inside
 * a symmetric allocation of this rank). */
tecomm_result_t tecomm_mem_peer_ptr(tecomm_comm_t comm, tecore_devptr_t ptr, int peer,
                                    tecore_devptr_t *peer_ptr);

/* ---- allreduce ---------------------------------------------------------- */

typedef enum tecomm_op { TECOMM_SUM = 0, TECOMM_MAX = 1 } tecomm_op_t;

typedef enum tecomm_algo {
  TECOMM_ALGO_AUTO = 0,     /* the selection table (or TECOMM_ALGO) */
  TECOMM_ALGO_ONESHOT = 1,  /* IPC: flag barrier, every rank reads all peers */
  TECOMM_ALGO_TWOSHOT = 2,  /* IPC: reduce-scatter then all-gather */
  TECOMM_ALGO_LAMPORT = 3,  /* IPC: one-shot without a barrier (-0.0 sentinels) */
  TECOMM_ALGO_NCCL = 4,     /* ncclAllReduce (libnccl.so.2) */
  TECOMM_ALGO_VERBS = 5,    /* host-staged, over InfiniBand/RoCE verbs (across nodes) */
  TECOMM_ALGO_NVLS = 6,     /* NVLink multicast: multimem load-reduce + store (SUM) */
  TECOMM_ALGO_NVLS_LAMPORT = 7, /* NVLink multicast store, local poll on -0.0 sentinels (SUM) */
  TECOMM_ALGO_MNNVL = 8,    /* multi-node NVLink: Lamport over fabric-handle mappings */
  TECOMM_ALGO_CE = 9,       /* IPC one-shot whose bytes the copy engines move (plain calls) */
  TECOMM_ALGO_COUNT_
} tecomm_algo_t;

/* "auto", "oneshot", "twoshot", "lamport", "nccl", "verbs", "nvls",
 * "nvls-lamport", "mnnvl", "ce". */
const char *tecomm_algo_name(tecomm_algo_t algo);
/* The algorithm named name (as tecomm_algo_name writes it). */
tecomm_result_t tecomm_algo_parse(const char *name, tecomm_algo_t *algo);

/* recv[i] = op over the ranks of send[i], for count elements of dtype
 * (F32, BF16, F16); in place when send == recv.  Every rank gets the same
 * bits.  Enqueued on stream (captured when stream captures); send is
 * copied into the pool on stream unless it is symmetric memory already.
 * Collective: every rank passes the same count, dtype and op. */
tecomm_result_t tecomm_allreduce(tecomm_comm_t comm, tecore_devptr_t send, tecore_devptr_t recv,
                                 size_t count, tecore_dtype_t dtype, tecomm_op_t op,
                                 tecore_stream_t stream);
/* The same with the algorithm given (TECOMM_ALGO_AUTO: the table).  An
 * algorithm the communicator cannot run for this size is an error
 * (TECOMM_ERR_NOT_SUPPORTED), never a silent substitute. */
tecomm_result_t tecomm_allreduce_algo(tecomm_comm_t comm, tecore_devptr_t send,
                                      tecore_devptr_t recv, size_t count, tecore_dtype_t dtype,
                                      tecomm_op_t op, tecomm_algo_t algo, tecore_stream_t stream);

/* ---- reduce-scatter and all-gather ----------------------------------------
 * NCCL's convention: count is the elements of ONE rank's block.  Both are
 * collective (every rank passes the same count and dtype, and op), enqueued
 * on stream (captured when it captures), and run on the level table as
 * allreduce does: the IPC kernels over the symmetric pool (oneshot; send
 * staged into the pool unless it is symmetric memory), the copy engines
 * (ce), NCCL or verbs.  algo: TECOMM_ALGO_AUTO, _ONESHOT, _CE, _NCCL or
 * _VERBS (others: TECOMM_ERR_NOT_SUPPORTED); TECOMM_ALGO does not apply.
 *
 * Reduce-scatter: recv[0..count) = op over the ranks of
 * send[rank*count .. rank*count+count); send holds nranks*count elements.
 * In place when recv == send + rank*count*esize.  F32, BF16, F16; SUM,
 * MAX.  Every rank's block is folded in rank order: the bits do not depend
 * on timing, and are the bits tecomm_allreduce gives for that block. */
tecomm_result_t tecomm_reduce_scatter(tecomm_comm_t comm, tecore_devptr_t send, tecore_devptr_t recv,
                                      size_t count, tecore_dtype_t dtype, tecomm_op_t op,
                                      tecore_stream_t stream);
tecomm_result_t tecomm_reduce_scatter_algo(tecomm_comm_t comm, tecore_devptr_t send,
                                           tecore_devptr_t recv, size_t count, tecore_dtype_t dtype,
                                           tecomm_op_t op, tecomm_algo_t algo, tecore_stream_t stream);
/* All-gather: recv[r*count .. r*count+count) = rank r's send[0..count),
 * for every r; recv holds nranks*count elements.  In place when
 * send == recv + rank*count*esize.  F32, BF16, F16, E4M3, E5M2: bytes are
 * moved, never converted. */
tecomm_result_t tecomm_allgather(tecomm_comm_t comm, tecore_devptr_t send, tecore_devptr_t recv,
                                 size_t count, tecore_dtype_t dtype, tecore_stream_t stream);
tecomm_result_t tecomm_allgather_algo(tecomm_comm_t comm, tecore_devptr_t send, tecore_devptr_t recv,
                                      size_t count, tecore_dtype_t dtype, tecomm_algo_t algo,
                                      tecore_stream_t stream);

/* Allreduce fused with the residual add and RMSNorm that follow it in a
 * tensor-parallel block:
 *   residual_out = allreduce_sum(x) + residual_in
 *   out          = residual_out * rsqrt(mean(residual_out^2) + eps) * gamma
 * over rows of hidden elements, all of dtype (F32, BF16, F16).  out may be
 * 0 when only fp8_out is wanted; fp8_out (may be NULL) gets an FP8 copy of
 * out with its tensor's scaling (delayed or current, te/tensor.h).
 * rsigma (may be 0) gets each row's 1 / sqrt(mean(residual_out^2) + eps)
 * in F32, what tecore_rmsnorm_fwd saves for tecore_rmsnorm_bwd.
 * residual_out may equal residual_in.  One kernel on the IPC paths; on the
 * NCCL path ncclAllReduce then libtecore's add and tecore_rmsnorm_fwd. */
struct tecomm_add_rmsnorm {
  tecore_devptr_t x;             /* rows * hidden: this rank's partial sums */
  size_t rows, hidden;
  tecore_dtype_t dtype;
  tecore_devptr_t residual_in;   /* rows * hidden */
  tecore_devptr_t residual_out;  /* rows * hidden */
  tecore_devptr_t gamma;         /* hidden */
  float eps;
  tecore_devptr_t out;           /* rows * hidden, or 0 */
  const struct tecore_tensor *fp8_out; /* [rows][hidden] E4M3/E5M2, or NULL */
  tecomm_algo_t algo;            /* TECOMM_ALGO_AUTO: the table */
  tecore_devptr_t rsigma;        /* rows F32 (4-byte aligned), or 0 */
};
tecomm_result_t tecomm_allreduce_add_rmsnorm(tecomm_comm_t comm,
                                             const struct tecomm_add_rmsnorm *args,
                                             tecore_stream_t stream);

/* ---- GEMMs with the collective of sequence parallelism inside -------------
 * The two GEMMs of sequence-parallel tensor parallelism, each split in
 * nranks chunks along the rows (tokens) so that one chunk's copy between
 * the ranks runs while another chunk multiplies.  The copies are the copy
 * engines' (stream memcpys between symmetric buffers on a side stream of
 * the communicator, ordered by events), so the GEMM keeps every SM.  Row-
 * major, D = A B^T as tecore_gemm(A, N, B, T, D): a and b BF16 or F16, d
 * of their dtype or F32; or a and b E4M3 with per-tensor scales
 * (a_scale_inv, b_scale_inv: one float each on the device, the
 * dequantization factors), d BF16, F16 or F32 (k a multiple of 16, rows
 * of d a multiple of 16 bytes, a, a_all, b and d 16-byte aligned: the FP8
 * GEMM's rules), so the all-gather moves half the bytes.  Collective (every rank passes the same rows, n,
 * k, dtypes and form), enqueued on stream, captured when it captures
 * (after one uncaptured call has made the side stream and buffers).
 * They need the IPC workspaces (TECOMM_ERR_NOT_SUPPORTED at the NCCL and
 * verbs levels).  A peer that does not come is TECOMM_ERR_TIMEOUT within
 * TECOMM_TIMEOUT, sticky as for the other collectives.
 *
 * All-gather + GEMM (before a column-parallel Linear): a_all = the ranks'
 * a stacked in rank order, d = a_all b^T.  Rank r multiplies its own rows
 * first, then rank r+1's, r+2's, ... (a ring), each as soon as it is
 * copied.  a must be symmetric memory (tecomm_mem_alloc), at the same
 * offset on every rank, or in place: a == a_all + rank*rows*k with a_all
 * symmetric.  a_all (any device memory unless in place) keeps the
 * gathered rows: the backward's weight gradient needs them.  bias, when
 * set, is added to every row of d (the GEMM's bias epilogue: a column-
 * parallel Linear's bias slice).  gelu_aux, when set, takes the GELU
 * epilogue: gelu_aux = a_all b^T (+ bias), the pre-activation a GELU's
 * backward reads, and d = gelu of it in float (tanh form; n a multiple of
 * 8).  a8, when set, gathers 16-bit rows and multiplies in E4M3: dtype is
 * BF16 or F16 (a, a_all), b holds E4M3 codes (b_scale_inv), and each
 * rank's rows, as they land, are quantized into a8's rows (a8: E4M3,
 * delayed scaling, [nranks*rows][k], rowwise only; its scale read, its
 * scale_inv written, |x| max-accumulated into its amax when set:
 * tecore_quantize of a_all whole, chunk by chunk), which the GEMM
 * multiplies (a_scale_inv unused): an FP8 Linear's input gathered in the
 * sequence's dtype, its codes made on arrival.  a8 may be E5M2 instead: a
 * row-parallel Linear's output gradient gathered for its data gradient
 * (b the weight's transposed E4M3 codes [in][out]), multiplied without
 * fast accumulation, as libtecore's FP8 backward does.  flags TECOMM_AG_GEMM_B_KN:
 * b is [k][n] and d = a_all b (16-bit operands only): the data gradient
 * of a row-parallel Linear, a_all the gathered output gradient and b the
 * Linear's [out][in] weight as it lies.  dtype E5M2 (no a8): a and a_all
 * hold a gradient's E5M2 codes (a_scale_inv their dequantization factor),
 * gathered as they are (half a 16-bit row's bytes), b the weight's
 * transposed E4M3 codes, multiplied without fast accumulation.  flags
 * TECOMM_AG_GEMM_DGELU: gelu_aux is read, not written: the pre-activation
 * of a GELU [nranks*rows][n] (of d_dtype), and d = (a_all b^T, or a_all b
 * with TECOMM_AG_GEMM_B_KN) * gelu'(gelu_aux) in float, rounded once (the
 * dGELU epilogue: the data gradient of a row-parallel Linear after a GELU
 * carried through that GELU); 16-bit operands, d of their dtype, no bias,
 * no a8, n a multiple of 8. */
#define TECOMM_AG_GEMM_B_KN 0x1u
#define TECOMM_AG_GEMM_DGELU 0x2u
struct tecomm_ag_gemm_args {
  tecore_devptr_t a;        /* [rows][k]: this rank's rows */
  tecore_devptr_t a_all;    /* [nranks*rows][k]: written (rank s's rows at s*rows) */
  tecore_devptr_t b;        /* [n][k] (TECOMM_AG_GEMM_B_KN: [k][n]) */
  tecore_devptr_t d;        /* [nranks*rows][n]: written */
  size_t rows, n, k;        /* rows: one rank's */
  tecore_dtype_t dtype;     /* a, a_all, b: BF16, F16 or E4M3; or E5M2 (a, a_all; b E4M3) */
  tecore_dtype_t d_dtype;   /* dtype or F32 (FP8: BF16, F16 or F32) */
  tecore_devptr_t a_scale_inv, b_scale_inv; /* FP8: float[1] each; else unused */
  tecore_devptr_t bias;     /* [n] of d_dtype (BF16 or F16), or 0 */
  tecore_devptr_t gelu_aux; /* [nranks*rows][n] of d_dtype: written (TECOMM_AG_GEMM_DGELU:
                             * read), or 0 */
  const struct tecore_tensor *a8; /* NULL, or E4M3 or E5M2 [nranks*rows][k]: written
                                   * (the descriptor is read during the call only) */
  unsigned flags;           /* 0, TECOMM_AG_GEMM_B_KN, TECOMM_AG_GEMM_DGELU */
};
tecomm_result_t tecomm_ag_gemm(tecomm_comm_t comm, const struct tecomm_ag_gemm_args *args,
                               tecore_stream_t stream);

/* GEMM + reduce-scatter (after a row-parallel Linear): d = the sum over
 * the ranks of rows rank*rows .. rank*rows+rows of a b^T.  Rank r
 * multiplies rank r+1's rows first into its partials slot r+1, then
 * r+2's, ..., its own last; after each step every rank pulls its block
 * of that step's products from the peer that made it, by the copy
 * engine, while the next block multiplies; then one kernel folds the
 * nranks blocks in rank order in float and rounds once: the bits do not
 * depend on timing.  partials: symmetric memory of nranks*rows*n
 * elements of d_dtype (slot s: this rank's product for rank s), the same
 * allocation and offset on every rank, used by nothing else while calls
 * run; peers only read it.  With norm set the fold is fused with the
 * residual add and RMSNorm of tecomm_allreduce_add_rmsnorm over rows of
 * n (d_dtype is their dtype; d must be 0): the sequence-parallel block's
 * norm on this rank's rows.  bias, when set, is added to each of this
 * rank's products before the fold (the GEMM's bias epilogue): d = the
 * sum of (a b^T + bias) over the ranks, as a row-parallel Linear whose
 * bias lives on one rank makes it. */
struct tecomm_rs_add_rmsnorm {
  tecore_devptr_t residual_in;   /* [rows][n] */
  tecore_devptr_t residual_out;  /* [rows][n]: the sum + residual_in; may be residual_in */
  tecore_devptr_t gamma;         /* [n] */
  float eps;
  tecore_devptr_t out;           /* [rows][n]: the norm's output, or 0 */
  const struct tecore_tensor *fp8_out; /* [rows][n] E4M3/E5M2 or NULL */
  tecore_devptr_t rsigma;        /* rows F32, or 0 */
};
struct tecomm_gemm_rs_args {
  tecore_devptr_t a;        /* [nranks*rows][k]: every rank's rows, this rank's k */
  tecore_devptr_t b;        /* [n][k] */
  tecore_devptr_t d;        /* [rows][n]: written (0 with norm) */
  tecore_devptr_t partials; /* symmetric: [nranks][rows][n] of d_dtype */
  size_t rows, n, k;        /* rows: one rank's */
  tecore_dtype_t dtype;     /* a, b: BF16, F16 or E4M3 */
  tecore_dtype_t d_dtype;   /* dtype or F32 (E4M3: BF16, F16 or F32); the norm's */
  const struct tecomm_rs_add_rmsnorm *norm; /* NULL: a plain reduce-scatter */
  tecore_devptr_t a_scale_inv, b_scale_inv; /* E4M3: float[1] each; else unused */
  tecore_devptr_t bias;     /* [n] of d_dtype (BF16 or F16), or 0; this rank's */
};
tecomm_result_t tecomm_gemm_rs(tecomm_comm_t comm, const struct tecomm_gemm_rs_args *args,
                               tecore_stream_t stream);

/* A tecore_amax_reduce_fn (te/recipe.h) with ctx = a tecomm_comm_t: MAX
 * over F32 of the count amaxes in place.  Set recipe.amax_reduce to it and
 * recipe.amax_reduce_ctx to the communicator. */
tecore_result_t tecomm_amax_reduce(tecore_devptr_t amax, size_t count, tecore_stream_t stream,
                                   void *ctx);

/* ---- the allreduce as fuser operations (te/ops.h) ---------------------------
 * tecomm_ops_register fills libtecore's communication slots and adds a
 * forward fusion pattern, so that a tecore_seq carries its tensor-parallel
 * communication like any other operation:
 *   TECORE_OP_ALLREDUCE  "allreduce": y = sum over the ranks of x;
 *                        backward dx = sum over the ranks of dy (each
 *                        rank's copy of y feeds a loss term of its own)
 *   TECORE_OP_TP_COPY    "tp_copy": y = x; backward dx = sum of dy (before
 *                        a column-parallel Linear: its input is replicated,
 *                        its dgrad a partial sum)
 *   TECORE_OP_TP_REDUCE  "tp_reduce": y = sum of x; backward dx = dy (after
 *                        a row-parallel Linear: the loss is replicated)
 *   TECORE_OP_ALLGATHER  "allgather": y = every rank's x in rank order
 *                        (rows * nranks rows); backward dx = this rank's
 *                        rows of the sum of dy (sequence parallel: before
 *                        a column-parallel Linear, for tp_copy)
 *   TECORE_OP_REDUCE_SCATTER "reduce_scatter": y = this rank's rows of
 *                        the sum of x (rows / nranks; rows a multiple of
 *                        nranks); backward dx = every rank's dy (after a
 *                        row-parallel Linear, for tp_reduce)
 * Each operation's desc.ctx points to a struct tecomm_op_params (the
 * caller's; it and its communicator must outlive the sequence).  The sums
 * are tecomm_allreduce_algo calls on the pass's stream (captured when it
 * captures); every rank builds the same sequence and runs the same passes.
 * The sequence's dtype (F32, BF16, F16) is the allreduce's.
 *
 * Forward fusion "allreduce+add+rmsnorm" (and "tp_reduce+add+rmsnorm"):
 *   [ALLREDUCE | TP_REDUCE, ADD_EXTRA_INPUT, MAKE_EXTRA_OUTPUT, RMSNORM]
 * -- the row-parallel output's sum, the residual add, the fork of the new
 * residual and the next block's RMSNorm -- run as one
 * tecomm_allreduce_add_rmsnorm call (one kernel on the IPC paths).
 * Applies when the operation's flags lack TECOMM_OP_NO_FUSION and the
 * RMSNorm's norm_flags are 0.  The fused call also writes the norm's
 * rsigma (args.rsigma), which libtecore's rmsnorm_bwd_add reads in the
 * backward: nothing recomputes it.  The backward is planned by the fuser
 * independently of the forward.  tecore_seq_describe shows the groups.
 * FP8 variants (TECORE_FUSION_WRITES_FP8): "allreduce+add+rmsnorm+fp8",
 * "+quantize" ([..., RMSNORM, QUANTIZE]) and "+tp_copy+fp8" ([...,
 * RMSNORM, TP_COPY]), and the same for tp_reduce, where the next operation
 * is a Linear that runs in FP8 under delayed scaling: the one call writes
 * that Linear's FP8 input (tecore_seq_fp8_input) instead of the norm's
 * output, so the Linear consumes FP8 directly.
 * "rmsnorm+tp_copy+fp8" and "layernorm+tp_copy+fp8": [RMSNORM | LAYERNORM,
 * TP_COPY] before such a Linear where no sum precedes the norm (a model's
 * first block): the norm writes the Linear's FP8 input; not when the
 * tp_copy has TECOMM_OP_NO_FUSION.
 * "allgather+linear" [ALLGATHER, LINEAR] and "linear+reduce_scatter"
 * [LINEAR, REDUCE_SCATTER] (forward): the collective inside the Linear's
 * GEMM (tecomm_ag_gemm, tecomm_gemm_rs) over symmetric scratch the plan
 * makes in the communicator's pool; where the Linear is 16-bit (a bias
 * of its dtype allowed), not FP8 (linear+reduce_scatter: or FP8 under
 * delayed scaling, on the E4M3 codes of tecore_seq_linear_fp8_operands),
 * the communicator has the IPC workspaces, the flags lack
 * TECOMM_OP_NO_FUSION and TECOMM_SP_OVERLAP is not 0 -- on every rank:
 * the planner's answer is agreed over the ranks at plan time
 * (tecomm_ops_register(3)). */
#define TECOMM_OP_NO_FUSION 0x1u   /* this operation always runs by itself */

struct tecomm_op_params {
  tecomm_comm_t comm;     /* the tensor-parallel group */
  tecomm_algo_t algo;     /* TECOMM_ALGO_AUTO: the selection table */
  unsigned flags;         /* TECOMM_OP_* */
};

/* Registers the five kinds and the fusion patterns with libtecore's
 * tables (process-wide; idempotent and thread-safe: later calls return
 * TECOMM_SUCCESS and change nothing).  Sequences add the kinds after it. */
tecomm_result_t tecomm_ops_register(void);
/* Removes what tecomm_ops_register registered (sequences built before
 * keep their copies).  Nothing registered: TECOMM_SUCCESS. */
tecomm_result_t tecomm_ops_unregister(void);

/* The algorithm tecomm_allreduce would run for count elements of dtype
 * (fused != 0: tecomm_allreduce_add_rmsnorm). */
tecomm_result_t tecomm_comm_choose(tecomm_comm_t comm, size_t count, tecore_dtype_t dtype,
                                   int fused, tecomm_algo_t *algo);
/* Writes into buf (len bytes, NUL-terminated, truncated) the fallback
 * chain, where this communicator stands in it and why, and the algorithm
 * chosen for a payload of bytes (0: the whole table).  Same text on every
 * rank. */
tecomm_result_t tecomm_comm_describe(tecomm_comm_t comm, size_t bytes, char *buf, size_t len);

/* The latency floors an allreduce is measured against (te-allreduce-perf
 * prints them beside its figures): one kernel launched as the allreduce
 * kernels are, doing nothing (TECOMM_PROBE_LAUNCH), or one word sent to
 * every peer over the IPC mappings and every peer's waited for, with no
 * data (TECOMM_PROBE_EXCHANGE).  Collective like an allreduce (every rank
 * makes the same probes in the same order; capturable; a missing peer
 * fails it with TECOMM_ERR_TIMEOUT).  Needs the IPC workspaces:
 * TECOMM_ERR_NOT_SUPPORTED at the NCCL and verbs levels. */
typedef enum tecomm_probe {
  TECOMM_PROBE_LAUNCH = 0,
  TECOMM_PROBE_EXCHANGE = 1
} tecomm_probe_t;
tecomm_result_t tecomm_probe(tecomm_comm_t comm, tecomm_probe_t what, tecore_stream_t stream);

/* The NCCL library's version (e.g. 22803) when libnccl.so.2 loads. */
tecomm_result_t tecomm_nccl_version(int *version);

#ifdef __cplusplus
}
#endif
#endif
