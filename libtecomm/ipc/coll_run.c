/* SPDX-License-Identifier: Apache-2.0 */
/* coll_run.c -- reduce-scatter and all-gather on the IPC kernels (the ipc
 * level's run_coll): where each rank's kernel reads the peers' blocks
 * (symmetric send in place, or a copy staged in the pool), the
 * copy-engine scratch, then tc_ar_launch with the call's collective
 * (ar_kernels.h; kernels/common/comm_ar.h says what the kernels do).
 *
 * Reduce-scatter reads block `rank` of every rank's input: in[s] =
 * rank s's input + rank * bytes.  All-gather reads every rank's whole
 * input: in[s] = rank s's input, which in place on symmetric memory is
 * rank s's own slot of its recv.  Where the input lies (staged, in place
 * on symmetric memory) goes into the call's descriptor, so ranks that
 * read differently fail with TECOMM_ERR_MISMATCH.  Lamport reads only
 * this rank's send, wherever it lies, and pushes it into the peers'
 * buffers itself: nothing is staged. */
#include "ipc_lv.h"
#include <string.h>

/* All-gather in place on symmetric memory: send is recv's slot `rank`
 * and recv lies in the same symmetric allocation, so rank s's block is
 * already where every peer can read it (offset of recv + s * bytes). */
static int ag_in_place(struct tecomm_comm *c, const struct tc_call *k, size_t *recv_off) {
  if (!k->seg || k->send != k->recv + (size_t)c->rank * k->bytes) return 0;
  size_t off = 0;
  struct tc_seg *s = tc_seg_find(c, k->recv, (size_t)c->nranks * k->bytes, &off);
  if (s != k->seg) return 0;
  *recv_off = off;
  return 1;
}

/* The inputs as read in place from symmetric memory (1), or 0 when they
 * must be staged. */
static int coll_sym_inputs(struct tecomm_comm *c, const struct tc_call *k,
                           struct tc_ar_call *call) {
  const size_t mine = (size_t)c->rank * k->bytes;
  size_t roff = 0;
  if (!k->seg) return 0;
  if (k->coll == TC_COLL_REDUCE_SCATTER) {
    for (int r = 0; r < c->nranks; r++) call->in[r] = tc_seg_addr(k->seg, r, k->off + mine);
    call->sym_in = 1;
  } else if (ag_in_place(c, k, &roff)) {
    for (int r = 0; r < c->nranks; r++)
      call->in[r] = tc_seg_addr(k->seg, r, roff + (size_t)r * k->bytes);
    call->sym_in = 2;
  } else {
    for (int r = 0; r < c->nranks; r++) call->in[r] = tc_seg_addr(k->seg, r, k->off);
    call->sym_in = 1;
  }
  return 1;
}

/* A copy of send in the staging buffer: the whole input (reduce-scatter:
 * nranks blocks, of which each peer reads its own). */
static tecomm_result_t coll_staged_inputs(struct tecomm_comm *c, const struct tc_call *k,
                                          struct tc_ar_call *call) {
  const size_t blocks = k->coll == TC_COLL_REDUCE_SCATTER ? (size_t)c->nranks : 1;
  const size_t at = k->coll == TC_COLL_REDUCE_SCATTER ? (size_t)c->rank * k->bytes : 0;
  TC_CHECK(tc_stage_get(c, blocks * k->count, k->dtype, k->cap, k->fn));
  for (int r = 0; r < c->nranks; r++) call->in[r] = tc_seg_addr(c->stage_seg, r, c->stage + at);
  TC_CORE(tecore_memcpy_async(tc_seg_addr(c->stage_seg, c->rank, c->stage), k->send,
                              blocks * k->bytes, k->stream),
          k->fn);
  return TECOMM_SUCCESS;
}

tecomm_result_t tc_run_coll_kernel(struct tecomm_comm *c, const struct tc_call *k) {
  struct tc_ar_call call;
  tc_ar_call_init(c, k, &call);
  call.coll = k->coll == TC_COLL_REDUCE_SCATTER ? TC_AR_COLL_REDUCE_SCATTER : TC_AR_COLL_ALLGATHER;
  if (call.algo == TC_AR_CE && call.coll == TC_AR_COLL_REDUCE_SCATTER) {
    TC_CHECK(tc_ce_scratch_get(c, tc_ar_ce_scratch_bytes(c->nranks, k->count, k->dtype), k->cap,
                               k->fn));
    call.scratch = c->ce_scratch;
    call.scratch_bytes = c->ce_scratch_bytes;
  }
  if (call.algo == TC_AR_LAMPORT) call.in[c->rank] = k->send;
  else if (!coll_sym_inputs(c, k, &call)) TC_CHECK(coll_staged_inputs(c, k, &call));
  TC_CORE(tc_ar_launch(&call, k->stream), k->fn);
  return TECOMM_SUCCESS;
}
