/* SPDX-License-Identifier: Apache-2.0 */
/* comm_priv.h -- what a communicator is: its ranks and host transport,
 * the capabilities every rank reported, the place in the fallback chain
 * they all took, its symmetric segments, the levels' state (opaque here:
 * each level's own header says what it keeps) and its error state.
 * Shared by comm.c, pool.c, select.c and allreduce.c. */
#ifndef TECOMM_COMM_PRIV_H
#define TECOMM_COMM_PRIV_H

#include "boot/boot.h"
#include "base/ar_kernels.h"
#include "base/level_list.h"

/* The levels (enum tc_lv) and the places in the chain (tc_level_t): one
 * list, base/level_list.h.  Each level keeps its state in c->lv[id] and
 * says why it is off in c->lv_why[id]. */

/* The IPC kernels' workspace (flags, barriers, Lamport buffers) that the
 * kernel levels share: every rank's, mapped here.  Made with the
 * symmetric pool on one host (pool.c, tc_symm_open), or imported from
 * fabric handles across nodes (the mnnvl level); me 0 when there is
 * none. */
struct tc_ws {
  tecore_devptr_t me;                    /* this rank's */
  tecore_devptr_t peer[TC_AR_MAX_RANKS]; /* every rank's (peer[rank] == me) */
  size_t max_bytes;                      /* the payload it was sized for */
};

/* Text appended to a buffer (describe): tc_put truncates and always
 * terminates. */
struct tc_text {
  char *buf;
  size_t cap, len;
};
void tc_put(struct tc_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* What one rank reports at init (allgathered; plain data, same layout on
 * every rank of one build). */
struct tc_caps {
  char host[64];
  uint64_t boot_id;     /* hash of /proc/sys/kernel/random/boot_id */
  uint64_t nonce;       /* rank 0's names the communicator's sockets */
  unsigned char seed[32]; /* rank 0's: the communicator's secret (comm.c) */
  int32_t device;
  int32_t vmm_fd;       /* VMM with POSIX-fd handles */
  int32_t nccl;         /* libnccl.so.2 loaded */
  int32_t kernels;      /* IPC allreduce kernels present */
  int32_t backend;
  int32_t rank;         /* the sender's: init checks every block was written */
  uint64_t nccl_host;   /* vdev's NCCL: tc_machine_id(), whose ranks it joins (0 on cuda) */
};

/* One symmetric allocation: a VMM allocation per rank (size[r] bytes),
 * all local ranks' mapped side by side in one reservation (rank r at
 * va + r*stride); bytes is what every rank has (the smallest). */
struct tc_seg {
  size_t bytes, stride;
  size_t size[TC_AR_MAX_RANKS];
  tecore_devptr_t va;
  int nmapped;                           /* ranks mapped from slot 0 up */
  tecore_vmm_handle_t h[TC_AR_MAX_RANKS];
  struct tc_seg *next;
  /* the pool's sub-allocator (only for the pool segment) */
  struct tc_block *free_list, *used_list;
  int internal;                          /* libtecomm's own (staging): not the caller's to free */
};

struct tc_block {
  size_t off, len;
  struct tc_block *next;
};

/* A node-local group's operations, for the levels that make one (the
 * hierarchical verbs path): the communicator layer hands them down
 * (c->groups) so that a level never calls up into it. */
struct tc_group_ops {
  /* a communicator over members me of n of parent on this host: its own
   * mesh (named by tag), the parent's device and context, its own place
   * in the chain (no_verbs: it does not open verbs) */
  tecomm_result_t (*make)(struct tecomm_comm *parent, uint64_t tag, int me, int n, int no_verbs,
                          struct tecomm_comm **out);
  void (*free)(struct tecomm_comm *c);
  void (*abort)(struct tecomm_comm *c);   /* tecomm_comm_abort's, on the group */
  tecomm_result_t (*ready)(struct tecomm_comm *c, const char *fn, int check_device);
  tecomm_result_t (*allreduce)(struct tecomm_comm *c, tecore_devptr_t send, tecore_devptr_t recv,
                               size_t count, tecore_dtype_t dtype, tecomm_op_t op,
                               tecore_stream_t stream, const char *fn);
  /* an all-gather of count elements of dtype a rank (send and recv as
   * tecomm_allgather's); a failure is the group's sticky error */
  tecomm_result_t (*allgather)(struct tecomm_comm *c, tecore_devptr_t send, tecore_devptr_t recv,
                               size_t count, tecore_dtype_t dtype, tecore_stream_t stream,
                               const char *fn);
};

struct tecomm_comm {
  int rank, nranks, device;
  const struct tc_group_ops *groups; /* comm.c's (see struct tc_group_ops) */
  tecore_ctx_t ctx;
  struct tc_boot *world;     /* the caller's bootstrap (kept only when ranks span hosts) */
  struct tc_boot *mesh;      /* ranks on one host: the Unix socket mesh */
  struct tc_boot *xchg;      /* the transport of collective host exchanges */
  uint64_t tag;              /* names this communicator's sockets */
  unsigned char secret[32];  /* every mesh connection proves it (auth.c) */
  unsigned nsplits;
  int all_local;

  /* capabilities: how many ranks have each */
  int n_vmm_fd, n_nccl, n_kernels, n_p2p, n_pool, n_ws;
  tecore_backend_t backend;
  tc_level_t level;
  char level_why[256];

  /* symmetric memory */
  size_t gran;
  struct tc_seg *pool;       /* NULL below TC_LEVEL_POOL */
  struct tc_seg *segs;       /* every segment (pool, workspace, registered) */
  struct tc_ws ws;           /* the IPC kernels' workspace (me 0: none) */
  size_t pool_req_mb;
  /* staging for inputs that are not symmetric memory (allreduce.c):
   * stage_bytes at offset stage of stage_seg (the pool, or past it a
   * segment of its own); stage_seg_total: bytes of those segments */
  struct tc_seg *stage_seg;
  size_t stage, stage_bytes, stage_seg_total;

  /* the levels' own state (opaque here) and why each is off */
  void *lv[TC_LV_COUNT];
  char lv_why[TC_LV_COUNT][320];
  /* the fused call on nccl or verbs (tc_run_composite): a temporary when
   * residual_out == residual_in */
  tecore_devptr_t scratch;
  size_t scratch_bytes;
  tecore_devptr_t ce_scratch; /* the copy-engine one-shot's (ce) copies of the peers' inputs (local memory) */
  size_t ce_scratch_bytes;
  tecore_devptr_t ce_old[24]; /* outgrown ones (a captured graph may name them) */
  int n_ce_old;
  /* aligned copies of a fused call's operands that are not 16-byte aligned
   * on this rank (allreduce.c, fused_align); grown and kept like ce_scratch */
  tecore_devptr_t al_scratch;
  size_t al_scratch_bytes;
  tecore_devptr_t al_old[24];
  int n_al_old;
  /* the overlapped GEMMs' state (overlap/: side stream, events, staging),
   * opaque here, made on their first call; freed by ov_free, set with it */
  void *ov;
  void (*ov_free)(struct tecomm_comm *c);
  /* the fuser's overlapped sequence-parallel groups (fuser_sp.c): the
   * shard's staging and the partial products, symmetric, made at plan
   * time and grown there (outgrown ones stay in the pool: a captured
   * graph may name them); they go with the segments */
  tecore_devptr_t sp_stage, sp_parts;
  size_t sp_stage_bytes, sp_parts_bytes;

  /* nodes (base/nodes.c), and the hierarchical verbs path (verbs_hier.c) */
  int *node_of;              /* every rank's node (its host, or TECOMM_NODE_MAP) */
  int nnodes, node;
  int no_verbs;              /* a hierarchical communicator's node-local group */

  /* errors */
  int aborted;
  tecomm_result_t sticky;    /* first failure seen (a timeout, a mismatch, an abort): kept */
  int sticky_peer;
  char sticky_why[192];      /* what the failure was, where the peer is unknown (NCCL's) */
  int64_t last_check_ms;     /* when a collective last read the error word */
  long creator;              /* getpid() of the process that made it (a fork may not use it) */
  uint64_t agree_seq;        /* calls agreed on the host so far (agree.c) */
  int agree_told;            /* the peers know this communicator failed (agree.c) */
};

/* ---- pool.c ----------------------------------------------------------------- */
/* Collective, at init before the levels open: where the ranks can do IPC
 * (one host, VMM with POSIX fds, P2P between all, at most
 * TC_AR_MAX_RANKS), the pool of pool_mb MiB with the kernels' workspace
 * at its start (level TC_LEVEL_POOL), or the workspace alone
 * (TC_LEVEL_INPLACE), or neither; c->level_why says which and why. */
tecomm_result_t tc_symm_open(struct tecomm_comm *c, size_t pool_mb, tecore_stream_t st);
/* Collective over the mesh: makes a segment of bytes per rank (rounded to
 * the granularity); every rank gets the same answer: TECOMM_SUCCESS, or
 * TECOMM_ERR_NOMEM naming the first rank that could not (*failed_rank).
 * fail_link: the TECOMM_TEST_FAIL link that fails it here (testfail.c),
 * or NULL. */
tecomm_result_t tc_seg_create(struct tecomm_comm *c, size_t bytes, const char *fail_link,
                              struct tc_seg **seg, int *failed_rank);
void tc_seg_destroy(struct tecomm_comm *c, struct tc_seg *seg);
/* The segment holding ptr in this rank's slot, and ptr's offset in it. */
struct tc_seg *tc_seg_find(struct tecomm_comm *c, tecore_devptr_t ptr, size_t bytes, size_t *off);
/* The most bytes one symmetric allocation may ask for (no size rounding
 * can wrap below it). */
#define TC_MEM_MAX ((size_t)1 << 52)
/* Whether ptr lies in symmetric memory (any rank's slot of a segment): 1
 * with *seg, its offset *off in the slot, and *room, the bytes from ptr to
 * the end of its live allocation (a block of the pool, or the whole
 * segment); *room 0 for free pool space (a freed block).  0 when ptr is
 * not symmetric memory. */
int tc_sym_room(struct tecomm_comm *c, tecore_devptr_t ptr, struct tc_seg **seg, size_t *off,
                size_t *room);
/* Sub-allocation in the pool: offset of bytes (aligned 256), or (size_t)-1. */
size_t tc_pool_take(struct tc_seg *pool, size_t bytes);
int tc_pool_give(struct tc_seg *pool, size_t off);
/* Address of rank r's copy of offset off of seg. */
static inline tecore_devptr_t tc_seg_addr(const struct tc_seg *s, int r, size_t off) {
  return s->va + (size_t)r * s->stride + off;
}

/* ---- select.c ----------------------------------------------------------------- */
/* The facts of one call that decide which algorithms can run it. */
struct tc_call_facts {
  size_t bytes;         /* payload */
  int symmetric;        /* the input is symmetric memory */
  int in_place;         /* a plain call with send == recv, or one whose caller
                           gives its input up: an algorithm that writes its
                           input may use a symmetric input directly (else it
                           needs the pool to stage a copy) */
  int fused_lamport_ok; /* 0: a fused call Lamport's fused kernel cannot take
                           (hidden % 8) */
  int sum;              /* the op is SUM (NVLS reduces nothing else) */
  int fused;            /* allreduce + add + RMSNorm (on 2 ranks one-shot
                           where the table says two-shot) */
  int beside;           /* runs beside another kernel (TC_AR_BESIDE: from
                           TECOMM_CE_MIN_KB up the copy-engine one-shot) */
};
/* The algorithm to run a call with facts f: asked (AUTO: TECOMM_ALGO, then
 * the table), or TECOMM_ERR_NOT_SUPPORTED with a reason when it cannot
 * run (an algorithm asked for is never replaced by another). */
tecomm_result_t tc_select(struct tecomm_comm *c, tecomm_algo_t asked,
                          const struct tc_call_facts *f, tecomm_algo_t *algo);
/* Decides the level from the counts (every rank computes the same). */
void tc_level_log(struct tecomm_comm *c);
const char *tc_level_name(tc_level_t l);

/* ---- base/nodes.c -------------------------------------------------------------- */
/* TECOMM_VDEV_NODE: the vdev node this process plays, or -1. */
int64_t tc_vdev_node(void);
/* TECOMM_NODE_MAP: this rank's host identity becomes its node's, so that
 * ranks of one host act as ranks of several nodes (tests). */
void tc_node_map_identity(char *host, size_t hl, uint64_t *boot_id, int rank);
/* The node of every rank (c->node_of, nnodes, node), from the allgathered
 * identities (all). */
tecomm_result_t tc_nodes_find(struct tecomm_comm *c, const struct tc_caps *all);
/* FNV-1a of the n bytes at p, from h. */
uint64_t tc_fnv(const void *p, size_t n, uint64_t h);

/* ---- testfail.c --------------------------------------------------------------- */
/* 1 when TECOMM_TEST_FAIL names link for this rank (tests force each link
 * of the fallback chain to fail on one rank; libtecomm(7)). */
int tc_test_fail(const char *link, int rank);

/* ---- vote.c ------------------------------------------------------------------ */
/* Allgathers (ok, why) over b; *all_ok 1 when every rank is ok, else out
 * gets "rank R: why" of the first rank that is not (the same on every
 * rank). */
tecomm_result_t tc_vote(struct tc_boot *b, int ok, const char *why, int *all_ok, char *out,
                        size_t outlen);
/* Each rank's count of ranks with flag set. */
tecomm_result_t tc_count_all(struct tc_boot *b, int flag, int *count);
/* Every rank's code (0: success): *nfail ranks failed, the first of them
 * *first with code *first_code. */
tecomm_result_t tc_gather_codes(struct tc_boot *b, int32_t code, int *nfail, int *first,
                                int32_t *first_code);

/* ---- comm.c ----------------------------------------------------------------- */
/* The checks every public call makes first: comm is a live communicator
 * (te_handles.h: never one destroyed) of this process (not a fork's copy
 * of the parent's).  TECOMM_ERR_INVALID naming fn otherwise. */
tecomm_result_t tc_comm_valid(const struct tecomm_comm *c, const char *fn);
#define TC_COMM(c, fn) TC_CHECK(tc_comm_valid((c), (fn)))
/* A collective's result r: a timeout, mismatch or abort becomes the
 * communicator's sticky error (its text kept: later calls are refused
 * with it); returns r. */
tecomm_result_t tc_comm_fail(struct tecomm_comm *c, tecomm_result_t r);
/* Fails with the communicator's state (aborted, a sticky or new device
 * error) before a collective; check_device 1 reads the error word when it
 * was not read in the last 10 ms, 2 always, 0 never. */
tecomm_result_t tc_comm_ready(struct tecomm_comm *c, const char *fn, int check_device);

#endif
