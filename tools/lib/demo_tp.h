/* SPDX-License-Identifier: Apache-2.0
 * demo_tp.h -- the tools' multi-rank runs (libtetools: te-demo --tp, te-gpt
 * --tp and --dp), and te-demo's tensor-parallel model: N ranks as forked
 * processes (one per GPU on cuda, device = rank; vdev ranks need none),
 * bootstrapped through a shared page (libtecomm's caller-callbacks
 * bootstrap: an allgather and a barrier, both bounded), the MLP blocks
 * split Megatron-style, and the page where ranks leave their losses and
 * times for rank 0 to check and print.
 *
 * A block on rank r of N (ffn_local = ffn / N):
 *   make_extra_output | rmsnorm | tp_copy | linear [ffn_local] + bias |
 *   gelu | linear [hidden] (+ bias on rank 0 only, so it is added once) |
 *   tp_reduce | add_extra_input
 * fc1 is column-parallel (rows r * ffn_local .. of the full weight), fc2
 * row-parallel (those columns); the weights are sliced from the full
 * model of the same seed, so the N ranks compute the single-process model.
 * tp_reduce -> add -> the next block's make_extra_output -> rmsnorm is the
 * fuser pattern libtecomm registers (one tecomm_allreduce_add_rmsnorm).
 *
 * Sequence-parallel (sp): the sequence holds this rank's rows of the
 * tokens (rows r * tokens / N ..), so the norm and the residual work on
 * a shard; allgather stands for tp_copy (the column-parallel Linear reads
 * every token) and reduce_scatter for tp_reduce (each rank keeps the sum
 * of its rows).  The norm's gamma gradient is then a partial sum over
 * this rank's rows: demo_tp_sp_grads sums it over the ranks before the
 * optimizer, so every rank keeps the same gamma. */
#ifndef TE_TOOLS_DEMO_TP_H
#define TE_TOOLS_DEMO_TP_H

#include <stdint.h>
#include <sys/types.h>
#include <te/core.h>
#include <te/comm.h>

#define DEMO_TP_MAX 8

/* The variants a rank trains, in this order: fused (the backward sums
 * overlapped with the wgrad GEMMs unless TECORE_OPS_OVERLAP=0), the
 * unfused baseline without overlap (TECORE_SEQ_NO_OVERLAP: as it ran
 * before the fuser overlapped), and with --tp-base-overlap the baseline
 * with overlap. */
enum { DEMO_TP_FUSED = 0, DEMO_TP_BASE = 1, DEMO_TP_BASE_OVL = 2, DEMO_TP_NVARIANTS = 3 };

struct demo_tp_page;   /* shared by the parent and every rank (MAP_SHARED) */

struct demo_tp {
  int n, rank;
  int nccl;                           /* the baseline's allreduce is NCCL's */
  tecomm_comm_t comm;
  struct tecomm_op_params params[DEMO_TP_NVARIANTS];   /* fused, baseline (twice) */
  /* the tp_copy ops' (their sum is the backward's): params[], or the
   * fused variant's with NCCL's backward sum (demo_tp_bwd_nccl) */
  struct tecomm_op_params copy_params[DEMO_TP_NVARIANTS];
  int variant;                        /* the model make_model builds now */
  int sp;                             /* sequence-parallel blocks (above) */
  tecore_devptr_t loss_sum;           /* demo_tp_sum_loss's F32 (0: not yet) */
  struct demo_tp_page *page;
  tecore_devptr_t *sym;               /* demo_tp_symmetric's allocations */
  size_t nsym;
};

/* The calling tool's name, for the messages (default "te-demo"). */
void demo_tp_set_tool(const char *name);

/* The shared page for n ranks, steps steps; NULL after saying why. */
struct demo_tp_page *demo_tp_page_create(int n, int steps);
void demo_tp_page_free(struct demo_tp_page *p);

/* Forks fn(arg, rank) in `count` processes (rank 0 .. count - 1), waits
 * for them and returns the largest exit status (1 for a rank killed by a
 * signal, named on stderr). */
int demo_tp_fork(int count, int (*fn)(void *arg, int rank), void *arg);

/* In rank `rank`: libtecomm's operations registered and the communicator
 * on device rank (cuda; made current) through the page's bootstrap; fills
 * t (params: fused, and the baseline unfused, libtecomm's).  Returns 0,
 * or 1 after saying why. */
int demo_tp_init(struct demo_tp *t, struct demo_tp_page *page, int n, int rank);
/* The baseline's sums: NCCL's (nccl) or libtecomm's table. */
void demo_tp_baseline(struct demo_tp *t, int nccl);
/* The fused variant's backward sums (tp_copy's: the column-parallel
 * input gradient, not symmetric memory, so libtecomm stages it) through
 * NCCL (nccl) or libtecomm's table (0, the default); after
 * demo_tp_baseline. */
void demo_tp_bwd_nccl(struct demo_tp *t, int nccl);
void demo_tp_fini(struct demo_tp *t);
/* Every rank waits for all (bounded: 1 hour, a dead rank fails the rest). */
int demo_tp_barrier(struct demo_tp_page *p);

/* The tecore_seq_config.flags of t->variant's sequence. */
unsigned demo_tp_seq_flags(const struct demo_tp *t);

/* Appends block `layer` for rank t->rank with t->params[t->variant]. */
tecore_result_t demo_tp_add_block(tecore_seq_t *q, const struct demo_tp *t, int layer,
                                  size_t hidden, size_t ffn);
/* Sequence parallel: adds the gamma gradients of the n parameters p of
 * this rank's sequence over the ranks, in place, on s (captured when s
 * captures): the norms saw this rank's rows only. */
tecore_result_t demo_tp_sp_grads(const struct demo_tp *t, const struct tecore_seq_param *p,
                                 size_t n, tecore_stream_t s);
/* Sequence parallel: *loss (this rank's rows' share of the loss) becomes
 * the sum over the ranks, the same bits on every rank.  Synchronous. */
tecore_result_t demo_tp_sum_loss(struct demo_tp *t, double *loss, tecore_stream_t s);
/* Overwrites the parameters of tp (the sequence of this rank's blocks)
 * with this rank's slices of full's (the single-process model); both
 * BF16.  Synchronous. */
tecore_result_t demo_tp_load_slices(tecore_seq_t *tp, tecore_seq_t *full, const struct demo_tp *t,
                                    int layers, size_t hidden, size_t ffn, tecore_stream_t s);

/* Moves the input of every tp_reduce of q (the row-parallel partial sums)
 * into symmetric memory (tecomm_mem_alloc), so the one-shot and Lamport
 * kernels read the peers' partial sums where fc2 wrote them instead of a
 * staged copy; and the gradient every tp_copy's backward sums (fc1's
 * input gradient, tecore_seq_set_grad) into one symmetric buffer that all
 * blocks share (each lives from fc1's dgrad to the sum, one block at a
 * time), which the sum, the gradient being dead after it, reduces where
 * it lies (grads 0: not that one; an inference sequence has no
 * gradients).  Collective; before any capture of q.  demo_tp_release
 * frees them after q is destroyed. */
tecore_result_t demo_tp_symmetric(tecore_seq_t *q, struct demo_tp *t, int grads);
void demo_tp_release(struct demo_tp *t);

/* The page's result slots: losses of the single-process reference
 * (prec 0 fp8, 1 bf16), and per precision, variant and rank the losses,
 * the mean step time and the forward time (ms). */
double *demo_tp_ref_loss(struct demo_tp_page *p, int prec);
double *demo_tp_loss(struct demo_tp_page *p, int prec, int variant, int rank);
double *demo_tp_times(struct demo_tp_page *p, int prec, int variant);   /* [2]: step, forward */

#endif
