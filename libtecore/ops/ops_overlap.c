/* SPDX-License-Identifier: Apache-2.0 */
/* ops_overlap.c -- the backward overlap of a collective with a weight
 * gradient GEMM (te/ops.h, "Overlap"): whether a sequence does it, its
 * side stream and events, and which backward groups take part; also which
 * backward groups may overwrite the gradient they read
 * (TECORE_EXEC_GRAD_DEAD).  ops_exec.c runs the pairs, ops_linear.c defers
 * the GEMM.
 *
 * Why.  In a tensor-parallel MLP the backward sum of fc1's input gradient
 * (tp_copy's backward) is on the critical path between fc1's dgrad and
 * the RMSNorm's backward, while fc1's weight-gradient GEMM depends on
 * neither: run on a side stream, the sum hides behind the GEMM.  The side
 * stream has the device's highest priority and the GEMM is queued after
 * the sum, so the comm kernel gets SMs before the GEMM's CTAs take them
 * all. */
#include "ops/ops_internal.h"

#include <stdint.h>

TE_PARAM_INT(ops_overlap, "TECORE_OPS_OVERLAP", 1, 0, 1,
             "1: a fuser backward runs a collective that follows a Linear (tp_copy's and "
             "allreduce's sums) on a high-priority side stream, concurrently with that "
             "Linear's weight-gradient GEMM; 0: everything on the caller's stream (as "
             "TECORE_SEQ_NO_OVERLAP)")

TE_PARAM_INT(ops_fwd_chunks, "TECORE_OPS_FWD_CHUNKS", 1, 1, 64,
             "with TECORE_OPS_OVERLAP, a fuser forward runs a Linear's GEMM in this many blocks "
             "of rows when a pattern that works on row blocks follows it (libtecomm's allreduce "
             "+ add + RMSNorm), each block's collective on the side stream while the next "
             "block's GEMM runs; 1 (the default: 4 blocks measured slower on 2x H200): no "
             "blocks")
TE_PARAM_INT(ops_fwd_chunk_min_kb, "TECORE_OPS_FWD_CHUNK_MIN_KB", 2048, 0, INT64_MAX,
             "the row blocks of TECORE_OPS_FWD_CHUNKS are used only when each holds at least "
             "this many KiB of the GEMM's output (smaller collectives cost more in latency than "
             "the overlap hides)")

/* Does op i's backward overlap with the wgrad of the Linear after it? */
static int pair_at(const tecore_seq_t *s, size_t i) {
  return i + 1 < s->nops && (s->ops[i].def.flags & TECORE_OP_BACKWARD_OVERLAP) &&
         (s->ops[i + 1].fp8 & TE_KIND_GEMM);
}

tecore_result_t te_overlap_setup(tecore_seq_t *s) {
  s->defer_op = s->chunk_op = SIZE_MAX;
  s->pend.valid = 0;
  s->overlap = 0;
  if ((s->cfg.flags & TECORE_SEQ_NO_OVERLAP) || tecore_tunable_int(&ops_overlap) == 0)
    return TECORE_SUCCESS;
  int any = 0;
  for (size_t i = 0; i < s->nops && !any; i++) any = pair_at(s, i);
  if (!any) return TECORE_SUCCESS;   /* no stream a sequence would never use */
  int least = 0, greatest = 0;
  TE_CHECK(tecore_stream_priority_range(&least, &greatest));
  TE_CHECK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, greatest, &s->side));
  tecore_result_t r = tecore_event_create(TECORE_EVENT_DISABLE_TIMING, &s->ev_fork);
  if (r == TECORE_SUCCESS) r = tecore_event_create(TECORE_EVENT_DISABLE_TIMING, &s->ev_join);
  if (r != TECORE_SUCCESS) {
    te_overlap_release(s);
    return r;
  }
  s->overlap = 1;
  return TECORE_SUCCESS;
}

void te_overlap_release(tecore_seq_t *s) {
  if (s->ev_join) (void)tecore_event_destroy(s->ev_join);
  if (s->ev_fork) (void)tecore_event_destroy(s->ev_fork);
  if (s->side) (void)tecore_stream_destroy(s->side);
  s->ev_join = s->ev_fork = NULL;
  s->side = NULL;
  s->overlap = 0;
}

static size_t grad_owner(const tecore_seq_t *s, size_t b) {
  while (s->bnd[b].galias >= 0) b = (size_t)s->bnd[b].galias;
  return b;
}

/* Is boundary o's gradient storage a residual slot's (read by the slot's
 * maker in a later group, and by tecore_seq_extra after the pass)? */
static int slot_grad(const tecore_seq_t *s, size_t o) {
  for (size_t i = 0; i < s->npairs; i++) {
    const struct te_slot *sl = &s->pairs[i];
    if (sl->maker >= 0 && sl->adder >= 0 && grad_owner(s, (size_t)sl->adder + 1) == o) return 1;
  }
  return 0;
}

/* Backward group k's output gradient is dead after it: the sequence's
 * storage, and no group run later (a lower index) touches it. */
static int grad_dead(const tecore_seq_t *s, size_t k) {
  const struct te_group *grp = s->plan.groups[TECORE_SEQ_BACKWARD];
  size_t o = grad_owner(s, grp[k].first + grp[k].count);
  if (o == s->nops || slot_grad(s, o)) return 0;
  for (size_t j = 0; j < k; j++)
    for (size_t b = grp[j].first; b <= grp[j].first + grp[j].count; b++)
      if (grad_owner(s, b) == o) return 0;
  return 1;
}

/* Forward group k's GEMM in row blocks: a Linear alone, then a pattern
 * that works on row blocks over boundaries of the Linear's rows; blocks
 * of a multiple of 16 rows (FP8 GEMMs; and 16-row offsets keep every
 * view 16-byte aligned) holding at least the minimum. */
static size_t fwd_chunks(const tecore_seq_t *s, size_t k) {
  const struct te_group *grp = s->plan.groups[TECORE_SEQ_FORWARD];
  if (!s->overlap || k + 1 >= s->plan.ngroups[TECORE_SEQ_FORWARD]) return 1;
  const struct te_group *lin = &grp[k], *nx = &grp[k + 1];
  if (lin->f || !(s->ops[lin->first].fp8 & TE_KIND_GEMM) || !nx->f ||
      !(nx->f->def.flags & TECORE_FUSION_ROWS))
    return 1;
  size_t rows = s->ops[lin->first].out_rows, cols = s->ops[lin->first].out_cols;
  for (size_t b = nx->first; b <= nx->first + nx->count; b++)
    if (s->bnd[b].rows != rows) return 1;
  size_t n = (size_t)tecore_tunable_int(&ops_fwd_chunks);
  int64_t min_kb = tecore_tunable_int(&ops_fwd_chunk_min_kb);
  if (n < 2 || rows % (16 * n)) return 1;
  double kb = (double)(rows / n) * (double)cols * (double)tecore_dtype_size(s->cfg.dtype) / 1024;
  return kb >= (double)min_kb ? n : 1;
}

void te_overlap_plan(tecore_seq_t *s) {
  for (size_t k = 0; k < s->plan.ngroups[TECORE_SEQ_FORWARD]; k++)
    s->plan.groups[TECORE_SEQ_FORWARD][k].chunks = fwd_chunks(s, k);
  size_t ng = s->plan.ngroups[TECORE_SEQ_BACKWARD];
  struct te_group *grp = s->plan.groups[TECORE_SEQ_BACKWARD];
  for (size_t k = 0; k < ng; k++) {
    grp[k].grad_dead = grad_dead(s, k);
    /* group k - 1 runs right after group k: one operation, a collective
     * right before the Linear that starts group k */
    grp[k].overlap = s->overlap && k > 0 && !grp[k - 1].f && grp[k - 1].count == 1 &&
                     pair_at(s, grp[k - 1].first);
  }
}
