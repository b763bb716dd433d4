/* SPDX-License-Identifier: Apache-2.0 */
/* ar_kernels.h -- the contract between libtecomm's communicator layer
 * (comm.c, pool.c, select.c: who owns memory, who is a peer, which
 * algorithm runs) and its allreduce kernels (ar_*.c, kernels/comm_*.cu:
 * the protocols that run on the device, on cuda and on vdev).
 *
 * Memory model.  Every local rank owns one symmetric allocation (the
 * pool) mapped by all local peers; the same offset in each rank's pool is
 * "the same buffer".  The communicator layer hands the kernels, per call:
 *   - ws[r]: rank r's workspace (flags, epoch counter, error word, Lamport
 *     buffers), tc_ar_workspace_bytes() bytes at one offset of every
 *     rank's pool, initialised once with tc_ar_workspace_init();
 *   - in[r]: rank r's input for this call, in rank r's pool (the
 *     communicator layer copied it in on the same stream when the caller's
 *     buffer was not already in the pool).  Lamport does not read in[] of
 *     peers: it writes its own input into the peers' workspaces.
 *   - out: this rank's output (anywhere in device memory; may equal
 *     in[rank] for in-place calls).
 *   - Two-shot leaves its reduced chunk in in[rank] (it reduce-scatters in
 *     place): its in[rank] must be a pool copy or equal out
 *     (tc_ar_clobbers_input says which algorithms do this).
 *   - Fused outputs (residual_out, out, fp8_out) must not overlap any
 *     in[]: peers may still read the inputs while they are written.
 * Pointers in ws[] / in[] are device addresses valid in this process
 * (cuda: VMM mappings of the peers' handles; vdev: memfd mappings).
 *
 * Ordering.  Each kernel is stream-ordered and graph-capturable: the
 * epoch a call uses is read from and advanced in the workspace by the
 * kernel itself (never passed from the host), so a captured graph
 * replayed N times runs N distinct epochs.
 *
 * Bounded waits.  Every device-side spin-wait compares the device's
 * global timer against timeout_ns; on expiry it writes the error word in
 * the local workspace (code TC_AR_ERR_TIMEOUT, the peer waited for)
 * and the kernel returns.  tc_ar_error() reads it back.
 *
 * Owner of this file: the kernels side.  The communicator side only
 * calls what is declared here. */
#ifndef TC_AR_KERNELS_H
#define TC_AR_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <te/core.h>

#define TC_AR_MAX_RANKS 8 /* local ranks one kernel reduces over */

typedef enum tc_ar_algo {
  TC_AR_ONESHOT = 0, /* flag barrier; every rank reads all peers, fixed rank order */
  TC_AR_TWOSHOT = 1, /* reduce-scatter then all-gather through the pool */
  TC_AR_LAMPORT = 2, /* -0.0 sentinels, 3 rotating buffers, no barrier */
  TC_AR_NVLS = 3,    /* NVLink multicast: load-reduce and store through mc (SUM only) */
  TC_AR_CE = 4,      /* one-shot whose bytes the copy engines move; needs scratch */
  TC_AR_ALGO_COUNT_
} tc_ar_algo_t;

typedef enum tc_ar_op { TC_AR_SUM = 0, TC_AR_MAX = 1 } tc_ar_op_t;

/* The collective a call runs (kernels/common/comm_ar.h, Reduce-scatter
 * and all-gather).  count is one rank's block.  REDUCE_SCATTER (ONESHOT
 * or CE): in[s] is block `rank` of rank s's input, out gets their fold.
 * ALLGATHER (ONESHOT: the gather kernel, or CE): in[s] is rank s's block,
 * out + s * count * esize gets it; any dtype of 1, 2 or 4 bytes (FP8
 * included: bytes move, op is ignored); no scratch.  LAMPORT (either,
 * no multicast): only in[rank] is read, this rank's whole input (reduce-
 * scatter: nranks blocks; all-gather: its block), anywhere in device
 * memory; blocks up to tc_ar_lamport_block_max. */
typedef enum tc_ar_coll {
  TC_AR_COLL_ALLREDUCE = 0,
  TC_AR_COLL_REDUCE_SCATTER = 1,
  TC_AR_COLL_ALLGATHER = 2
} tc_ar_coll_t;

/* Optional fused epilogue: residual_out = allreduce(x) + residual_in;
 * out = rmsnorm(residual_out) * gamma over rows of `hidden` elements
 * (count = rows * hidden); optional FP8 copy of out (delayed or current
 * scaling, libtecore's tensor conventions); optional rsigma, each row's
 * 1/rms in F32 (the value tecore_rmsnorm_fwd saves). */
struct tc_ar_fused {
  size_t hidden;
  float eps;
  tecore_devptr_t residual_in;  /* count elements of the allreduce dtype */
  tecore_devptr_t residual_out; /* count elements; may equal residual_in */
  tecore_devptr_t gamma;        /* hidden elements of the allreduce dtype */
  tecore_devptr_t out;          /* count elements (may be 0 when only fp8_out is wanted) */
  const struct tecore_tensor *fp8_out; /* NULL: none */
  tecore_devptr_t rsigma;       /* rows F32, 4-byte aligned, or 0 */
};

struct tc_ar_call {
  tc_ar_algo_t algo;
  tc_ar_op_t op;
  tecore_dtype_t dtype;           /* F32, BF16, F16 */
  size_t count;                   /* elements */
  int rank, nranks;               /* local rank and local ranks (<= TC_AR_MAX_RANKS) */
  tecore_devptr_t ws[TC_AR_MAX_RANKS];
  tecore_devptr_t in[TC_AR_MAX_RANKS];
  tecore_devptr_t out;
  uint64_t timeout_ns;            /* 0: no bound */
  const struct tc_ar_fused *fused; /* NULL: plain allreduce */
  size_t ws_max_bytes;            /* the max_bytes the workspaces were sized and
                                     initialised for (Lamport needs it: its slot
                                     size; the others ignore it) */
  /* NVLS (kernels/common/comm_ar.h): this rank's member of the multicast
   * region (nvls_uc, unicast) and the region's multicast address
   * (nvls_mc).  TC_AR_NVLS needs both; TC_AR_LAMPORT with both set
   * is the NVLS Lamport (its state and buffers in the region, the input
   * stored once through nvls_mc).  nvls_data_bytes: what the simple
   * protocol's data buffer holds. */
  tecore_devptr_t nvls_uc, nvls_mc;
  size_t nvls_data_bytes;
  /* 1: the call runs beside another kernel (the fuser's backward overlap
   * with a GEMM): its grid is capped at TECOMM_AR_OVERLAP_BLOCKS so that
   * the other kernel keeps most SMs */
  int beside;
  /* TC_AR_CE: local device memory for copies of the peers' inputs, at
   * least tc_ar_ce_scratch_bytes() bytes, 16-byte aligned, used by
   * nothing else until the call has run */
  tecore_devptr_t scratch;
  size_t scratch_bytes;
  tc_ar_coll_t coll;
  /* reduce-scatter, all-gather: in[] lie where the callers' send does
   * (symmetric memory; 2: all-gather in place, in[s] in rank s's recv),
   * 0: staged copies.  Part of the descriptor, so that ranks that read
   * differently fail with TC_AR_ERR_MISMATCH instead of reading garbage */
  int sym_in;
  /* the overlapped GEMMs (libtecomm/overlap/): their barriers and fold
   * carry the GEMM's other dimension here (0: not one of them), part of
   * the descriptor (TE_AR_V_GEMM), so that a rank making another call or
   * another shape fails with TC_AR_ERR_MISMATCH */
  size_t gemm_dim;
};

/* Device error word contents (TC_AR_ERR_MISMATCH: the peer's call
 * descriptor differs from this rank's; tc_ar_desc_read says how). */
enum {
  TC_AR_OK = 0,
  TC_AR_ERR_TIMEOUT = 1,
  TC_AR_ERR_ABORTED = 2,
  TC_AR_ERR_MISMATCH = 3 /* a peer's call descriptor differs (struct tc_ar_desc) */
};

/* Registers the kernel table (idempotent, thread-safe). */
tecore_result_t tc_ar_kernels_register(void);

/* Bytes of workspace per rank for calls up to max_bytes of payload with
 * nranks ranks (flags, counters, error word, Lamport's three buffers). */
size_t tc_ar_workspace_bytes(int nranks, size_t max_bytes);
/* Bytes of a rank's NVLS region (its multicast member): Lamport state and
 * buffers for lamport_max_bytes, then data_bytes for the simple protocol. */
size_t tc_ar_nvls_bytes(int nranks, size_t lamport_max_bytes, size_t data_bytes);
/* Initialises this rank's NVLS region (through its unicast address). */
tecore_result_t tc_ar_nvls_init(tecore_devptr_t uc, int nranks, size_t lamport_max_bytes,
                                    tecore_stream_t stream);
/* Initialises this rank's workspace (sentinels, zero flags) on stream. */
tecore_result_t tc_ar_workspace_init(tecore_devptr_t ws, int nranks, size_t max_bytes,
                                         tecore_stream_t stream);
/* Largest payload in bytes an algorithm accepts for a workspace sized for
 * max_bytes (Lamport is bounded by its buffers; the others by the input). */
size_t tc_ar_max_bytes(tc_ar_algo_t algo, int nranks, size_t ws_max_bytes);

/* The largest block (bytes) a Lamport reduce-scatter or all-gather
 * takes with workspaces sized for ws_max_bytes: a reduce-scatter's block
 * is a slot's payload, an all-gather's half of it (its granules carry
 * flags, kernels/common/comm_ar.h). */
size_t tc_ar_lamport_block_max(tc_ar_coll_t coll, size_t ws_max_bytes);

/* Bytes of scratch a TC_AR_CE call of count elements of dtype needs
 * on nranks ranks (0 for nranks < 2 or out of range). */
size_t tc_ar_ce_scratch_bytes(int nranks, size_t count, tecore_dtype_t dtype);

/* 1 when algo overwrites in[rank] (two-shot), 0 when it only reads it
 * (the clobbers column of the algorithm list, algos.h; in algos.c). */
int tc_ar_clobbers_input(tc_ar_algo_t algo);

/* The one rule on a fused call's row length: the fused kernels read and
 * write rows of hidden elements in vectors of 8 (16 bytes of 16-bit
 * elements) only when hidden is a multiple of 8; fused Lamport takes no
 * other rows, and selection, the alignment copies (ar_run.c) and the
 * launch (ar_kernels.c) all ask this. */
static inline int tc_ar_fused_rows_vec(size_t hidden) { return hidden % 8 == 0; }

/* Enqueues one allreduce on stream (captured when stream captures).
 * Every rank must make the same sequence of calls (algo, count, dtype,
 * fused shape): the launch grid, and with it the barrier counters, follow
 * from them.  count 0 enqueues nothing.  After a timeout or an abort the
 * error word stays set and later calls return at once without touching
 * peers; the workspaces must then be initialised again (collectively)
 * before the next use.
 * The fused epilogue is one kernel for one-shot, and for Lamport when
 * hidden % 8 == 0 and residual_out, out / fp8 data and gamma are 16-byte
 * aligned (TECORE_ERR_NOT_SUPPORTED otherwise); two-shot is one kernel
 * that reduce-scatters by rows into in[rank] and reads each row from its
 * owner (kernels/common/comm_ar.h), or with TECOMM_FUSED_TWOSHOT=0 an
 * in-place two-shot into in[rank] then the epilogue kernel.  TC_AR_CE:
 * a probe exchange as a barrier, stream memcpys from the peers' in[],
 * then (plain) the local sum kernel and another barrier, or (fused) the
 * one-shot fused kernel over the local copies (kernels/common/comm_ar.h);
 * a timeout in a barrier sets the error word like any other wait.  FP8 with current
 * scaling takes two more launches after the fused one (which writes the
 * amax): tecore_compute_scale, then tecore_rmsnorm_fwd of residual_out
 * into fp8_out with that scale, libtecore's own second pass. */
tecore_result_t tc_ar_launch(const struct tc_ar_call *call, tecore_stream_t stream);
/* What tc_ar_launch checks of call, without queueing anything (a caller
 * that queues other work first checks before it). */
tecore_result_t tc_ar_check(const struct tc_ar_call *call);

/* Which fused two-shot a fused TC_AR_TWOSHOT call runs now
 * (TECOMM_FUSED_TWOSHOT): "rows ..." (one kernel, reduce-scatter by rows)
 * or "gather ..." (two-shot, then the add + RMSNorm kernel).  A static
 * string. */
const char *tc_ar_fused_twoshot_variant(void);

/* Enqueues one latency probe over call's workspaces (only rank, nranks,
 * ws[] and timeout_ns are read): an empty kernel, or (exchange) one word
 * written to every rank's workspace and every rank's waited for
 * (kernels/comm_ar.cu).  Collective like an allreduce: every rank makes
 * the same probes in the same order; a timeout or abort sets the error
 * word as an allreduce's does. */
tecore_result_t tc_ar_probe(const struct tc_ar_call *call, int exchange,
                                tecore_stream_t stream);

/* A call's descriptor as the kernels publish it (kernels/common/comm_ar.h,
 * Agreement): every rank's call must have the same.  variant: 1 fused, 2
 * fused two-shot by rows, 4 through a multicast region, 8 reduce-scatter,
 * 16 all-gather, 32 inputs read where the callers' send lies, 64 (with
 * 32) all-gather in place (the TE_AR_V_* of comm_ar.h). */
struct tc_ar_desc {
  uint64_t hash, count;
  int algo, op, dtype, nranks;
  unsigned hidden, variant;
  float eps;
};
/* The collective a descriptor is: "allreduce", "reduce-scatter" or
 * "all-gather" (its variant's bits). */
const char *tc_ar_desc_call(const struct tc_ar_desc *d);
/* The descriptor's variant bit of the overlapped GEMMs' barriers and
 * fold (comm_ar.h's TE_AR_V_GEMM), for the host's messages. */
#define TC_AR_DESC_GEMM 0x80u
/* What the descriptor's hidden holds: "hidden (fused)", or the
 * overlapped GEMM's n (all-gather) or k (reduce-scatter). */
const char *tc_ar_desc_hidden(const struct tc_ar_desc *d);
/* Where a reduce-scatter or all-gather read its input: "a staged copy",
 * "symmetric send in place" or "symmetric recv in place". */
const char *tc_ar_desc_input(const struct tc_ar_desc *d);
/* The descriptor of the latest call that started on workspace ws (this
 * rank's, or a peer's mapped here); synchronous, like tc_ar_error. */
tecore_result_t tc_ar_desc_read(tecore_devptr_t ws, struct tc_ar_desc *d);

/* Reads this rank's error word (synchronous; host may call between
 * collectives): *code TC_AR_OK / _ERR_TIMEOUT / _ERR_ABORTED and the
 * peer waited for (-1 if none).  Clears it when clear != 0. */
tecore_result_t tc_ar_error(tecore_devptr_t ws, int *code, int *peer, int clear);
/* Makes every waiter on this rank's workspace give up (abort): sets the
 * abort word that the spin-waits poll, from the host, through a stream of
 * its own (it does not wait for the collective).  Given a peer's ws
 * (mapped here), it releases that peer's waiters too.  The word stays set
 * until tc_ar_workspace_init. */
tecore_result_t tc_ar_abort(tecore_devptr_t ws);

#endif
