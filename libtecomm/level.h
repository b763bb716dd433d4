/* SPDX-License-Identifier: Apache-2.0 */
/* level.h -- libtecomm's levels: each link of the fallback chain is one
 * struct tc_level, and one ordered table (levels.c) holds them, best
 * first: nvls, mnnvl, ipc, nccl, verbs.  Init opens them in that order,
 * destroy closes them in reverse, a collective's health check, abort,
 * status and describe walk them, and the selection table asks each in
 * turn for its choice.  A level keeps its state behind c->lv[its id]
 * (opaque to everything but its own files) and says why it is off in
 * c->lv_why[its id].  The IPC workspace the kernel levels share (nvls,
 * mnnvl and ipc) is the communicator's struct tc_ws, made by the ipc
 * level on one host or imported by mnnvl across nodes.
 *
 * A new level is a folder with one file that defines its struct
 * tc_level, one row of TC_LEVELS (base/level_list.h), which makes its
 * place in tc_levels[], its enum tc_lv and tc_algo_at_t values, and the
 * rows of its algorithms in base/algos.h (their "at" column names the
 * level). */
#ifndef TC_LEVEL_H
#define TC_LEVEL_H

#include "comm_priv.h"
#include "base/algos.h"

/* The collective of a call (coll.c): allreduce, or reduce-scatter and
 * all-gather, whose count is one rank's block. */
typedef enum tc_coll {
  TC_COLL_ALLREDUCE = 0,
  TC_COLL_REDUCE_SCATTER = 1,
  TC_COLL_ALLGATHER = 2
} tc_coll_t;

/* One collective after selection: the caller's arguments and what
 * selection saw.  fa non-NULL: the fused allreduce + add + RMSNorm. */
struct tc_call {
  tc_coll_t coll;                      /* reduce-scatter, all-gather: run by run_coll */
  tecore_devptr_t send, recv;
  size_t count, bytes;
  tecore_dtype_t dtype;
  tecomm_op_t op;
  tecomm_algo_t algo;                  /* the algorithm selection gave (before: the one asked) */
  const struct tecomm_add_rmsnorm *fa;
  unsigned how;                        /* TC_AR_SCRATCH, TC_AR_BESIDE */
  int cap;                             /* the stream is capturing */
  int in_place;                        /* the input may be overwritten (facts.in_place) */
  struct tc_seg *seg;                  /* the symmetric segment holding send, or NULL */
  tecore_devptr_t nvls_uc, nvls_mc;    /* the nvls level's region (0: none) */
  size_t nvls_data_bytes;
  size_t off;                          /* send's offset in seg */
  tecore_stream_t stream;
  const char *fn;
};

/* The facts selection reads (comm_priv.h), from k's fields, so that the
 * two never disagree; fused_lamport_ok is the allreduce's to set
 * (select.c). */
struct tc_call_facts tc_call_facts_of(const struct tc_call *k);

/* struct tc_level's hosts. */
#define TC_ONE_HOST 1u
#define TC_ACROSS_HOSTS 2u

/* struct tc_level's why_in: the messages beyond describe that tell why a
 * level is off, as "; <why_name>: <c->lv_why[id]>".  REFUSED: a call no
 * level has an algorithm for ("absent" when the text is empty); LOGGED:
 * init's level line at TE_DEBUG=INFO. */
#define TC_WHY_REFUSED 1u
#define TC_WHY_LOGGED 2u

struct tc_level {
  const char *name;
  /* Its links in tecomm_comm_describe's chain line, and where it is in
   * the chain: on one host, across hosts or both (TC_ONE_HOST, ...). */
  const char *chain;
  unsigned hosts;
  /* An algorithm of another level this one runs instead when it is open
   * (mnnvl: lamport across nodes); TECOMM_ALGO_AUTO: none. */
  tecomm_algo_t claims;
  /* Opened only when no level above it gave the communicator a place in
   * the chain (c->level still TC_LEVEL_NONE). */
  int last_resort;
  /* Where its "why off" text is told, under which name (TC_WHY_...;
   * 0: describe's own lines only). */
  unsigned why_in;
  const char *why_name;
  /* Optional: fills the level's fields of this rank's report at init
   * (struct tc_caps, allgathered before any level opens). */
  void (*caps)(struct tecomm_comm *c, struct tc_caps *k);
  /* Collective: opens the level, or leaves it off with c->lv_why[id]
   * saying why (the same on every rank), from every rank's report (all,
   * c->nranks of them).  An error return is a broken exchange, not "the
   * level is off". */
  tecomm_result_t (*open)(struct tecomm_comm *c, const struct tc_caps *all, tecore_stream_t st);
  void (*close)(struct tecomm_comm *c);
  /* Optional: the level's failure before a collective (a transport that
   * broke, a peer's error it learnt of); check_device as tc_comm_ready. */
  tecomm_result_t (*health)(struct tecomm_comm *c, const char *fn, int check_device);
  /* Optional: stops the level's waits (tecomm_comm_abort). */
  void (*abort)(struct tecomm_comm *c);
  /* Optional: the peer the level's failure names, or -1. */
  int (*failed_peer)(struct tecomm_comm *c);
  /* Selection: asked TECOMM_ALGO_AUTO gives the table's choice at this
   * level in *algo (TECOMM_ALGO_AUTO when it has none for the call); an
   * algorithm of this level asked for by name is checked and kept, or
   * refused with TECOMM_ERR_NOT_SUPPORTED and why. */
  tecomm_result_t (*pick)(struct tecomm_comm *c, tecomm_algo_t asked,
                          const struct tc_call_facts *f, tecomm_algo_t *algo);
  /* Runs the plain and the fused call (k->fa) with the algorithm chosen. */
  tecomm_result_t (*run)(struct tecomm_comm *c, const struct tc_call *k);
  /* Optional: runs a reduce-scatter or all-gather (k->coll) with the
   * algorithm chosen; NULL: the level has none (TECOMM_ERR_NOT_SUPPORTED). */
  tecomm_result_t (*run_coll)(struct tecomm_comm *c, const struct tc_call *k);
  /* Appends the level's lines to tecomm_comm_describe's text. */
  void (*describe)(struct tecomm_comm *c, struct tc_text *t);
};

/* The table, best first (levels.c, from TC_LEVELS). */
extern const struct tc_level *const tc_levels[TC_LV_COUNT];
/* The level that runs algorithms at at (NULL for TC_AT_TABLE). */
const struct tc_level *tc_level_at(tc_algo_at_t at);

/* The walks (levels.c). */
void tc_levels_caps(struct tecomm_comm *c, struct tc_caps *k);
tecomm_result_t tc_levels_open(struct tecomm_comm *c, const struct tc_caps *all,
                               tecore_stream_t st);
void tc_levels_close(struct tecomm_comm *c);
tecomm_result_t tc_levels_health(struct tecomm_comm *c, const char *fn, int check_device);
void tc_levels_abort(struct tecomm_comm *c);
int tc_levels_failed_peer(struct tecomm_comm *c);
void tc_levels_describe(struct tecomm_comm *c, struct tc_text *t);

/* Each level's row (its own file). */
#define TC_LV_DECL_(id, name, places) extern const struct tc_level tc_level_##name;
TC_LEVELS(TC_LV_DECL_)

/* The IPC kernels' path, shared by the nvls, mnnvl and ipc levels
 * (ar_run.c): stages the input where the protocol needs it, then
 * launches the kernel. */
tecomm_result_t tc_run_kernel(struct tecomm_comm *c, const struct tc_call *k);
/* The staging buffer for count elements of dtype in the pool or a
 * segment past it (c->stage_seg at c->stage); collective when it grows
 * (ar_run.c). */
tecomm_result_t tc_stage_get(struct tecomm_comm *c, size_t count, tecore_dtype_t dtype, int cap,
                             const char *fn);
/* The copy-engine one-shot's local scratch of at least bytes
 * (c->ce_scratch; ar_run.c). */
/* The kernel call of k as every IPC path starts it (ar_run.c): the
 * protocol, op, dtype, count, ranks, output, timeout and workspaces. */
struct tc_ar_call;
void tc_ar_call_init(struct tecomm_comm *c, const struct tc_call *k, struct tc_ar_call *call);
tecomm_result_t tc_ce_scratch_get(struct tecomm_comm *c, size_t bytes, int cap, const char *fn);

/* A fused call's epilogue operands as every rank plans them (ar_run.c):
 * with hidden % 8 == 0 every rank takes the 16-byte vector row plan, and
 * the kernels' grids, which meet at the barriers, follow from it; so an
 * operand of this rank's that is not 16-byte aligned is replaced by an
 * aligned copy in the communicator's scratch (copied in on stream now,
 * copied out by tc_fused_post after the launch).  al->args is the call
 * as it runs; reads_x: the kernel reads x itself (Lamport, NVLS). */
struct tc_al_post {
  tecore_devptr_t to[3], from[3];
  size_t bytes[3];
  int n;
};
struct tc_al_call {
  struct tecomm_add_rmsnorm args; /* its fp8_out may point to fp8: used in place */
  struct tecore_tensor fp8;
  struct tc_al_post post;
};
tecomm_result_t tc_fused_align(struct tecomm_comm *c, const struct tecomm_add_rmsnorm *a,
                               int reads_x, int cap, tecore_stream_t stream,
                               struct tc_al_call *al, const char *fn);
tecomm_result_t tc_fused_post(const struct tc_al_call *al, tecore_stream_t stream,
                              const char *fn);
/* TECOMM_ERR_INVALID when p lies in symmetric memory and bytes from it
 * run past its allocation, or it is free pool space (allreduce.c). */
tecomm_result_t tc_sym_bounds(struct tecomm_comm *c, tecore_devptr_t p, size_t bytes,
                              const char *what, const char *fn);

/* The fused call on a level that only sums (nccl, verbs): allreduce with
 * reduce, then add and RMSNorm as kernels of their own, on operands
 * aligned as the IPC kernels' (ar_run.c). */
typedef tecomm_result_t (*tc_reduce_fn)(struct tecomm_comm *c, tecore_devptr_t send,
                                        tecore_devptr_t recv, size_t count, tecore_dtype_t dtype,
                                        tecomm_op_t op, tecore_stream_t stream, const char *fn);
tecomm_result_t tc_run_composite(struct tecomm_comm *c, const struct tc_call *k,
                                 tc_reduce_fn reduce);

/* A level whose enqueued call cannot be stopped (nccl, verbs): the call
 * agreed by every rank on the host first (agree.c), then reduce, or the
 * composite fused call around it (ar_run.c). */
tecomm_result_t tc_run_agreed(struct tecomm_comm *c, const struct tc_call *k, tc_reduce_fn reduce);
/* One rank's "allreduce": recv = send (ar_run.c). */
tecomm_result_t tc_copy_reduce(struct tecomm_comm *c, tecore_devptr_t send, tecore_devptr_t recv,
                               size_t count, tecore_dtype_t dtype, tecomm_op_t op,
                               tecore_stream_t stream, const char *fn);

/* The selection table's edges for nranks (select.c): Lamport and
 * one-shot's largest payloads. */
void tc_table_edges(int nranks, size_t *lamport, size_t *oneshot);

#endif
