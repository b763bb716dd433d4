/* SPDX-License-Identifier: Apache-2.0 */
/* verbs_comm.c -- the verbs level of the fallback chain: the endpoint
 * opened at communicator init (every rank agrees; across nodes the
 * node-local groups first, verbs_hier.c), and the level's row.  An
 * allreduce runs on the stream through verbs_staged.c (flat), or as the
 * hierarchy's three steps (verbs_hier.c).  A failure (a dead peer, an
 * error completion) makes the endpoint's sticky error the next call's
 * answer. */
#include "verbs_lv.h"
#include "base/agree.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <te/svc.h>

#define WHY(c) ((c)->lv_why[TC_LV_VERBS])

TECORE_TUNABLE_INT(tc_tun_verbs, "TECOMM_VERBS", 1, 0, 1,
                   "0: never open the verbs path (the fallback after NCCL across nodes)")

static tecomm_result_t endpoint_open(struct tecomm_comm *c) {
  VL(c)->leader = -1;
  if (c->nranks < 2) return TECOMM_SUCCESS;
  if (c->no_verbs) {
    snprintf(WHY(c), sizeof WHY(c), "a node's group of a hierarchical communicator "
             "(its leader runs verbs)");
    return TECOMM_SUCCESS;
  }
  if (!tecore_tunable_int(&tc_tun_verbs)) {
    snprintf(WHY(c), sizeof WHY(c), "TECOMM_VERBS=0");
    return TECOMM_SUCCESS;
  }
  /* across nodes: the node-local groups first, then verbs among their
   * leaders (or among every rank, flat, when a node cannot reduce) */
  int member = 1;
  TC_CHECK(tc_hier_open(c, &member));
  tecomm_result_t r = tc_vb_open(c->xchg, member, &VL(c)->vb);
  if (r != TECOMM_SUCCESS) {
    if (VL(c)->local) c->groups->free(VL(c)->local);
    VL(c)->local = NULL;
    VL(c)->leader = -1;
  }
  if (r == TECOMM_ERR_NOT_SUPPORTED) {
    /* every rank got the same answer: the chain goes on without verbs */
    snprintf(WHY(c), sizeof WHY(c), "%s", tecore_last_error());
    return TECOMM_SUCCESS;
  }
  if (r != TECOMM_SUCCESS) return r;
  tc_gdr_detect(c);
  if (VL(c)->vb)
    TC_INFO("verbs: rank %d on device %d: gpudirect: %s", c->rank, c->device, VL(c)->gdr_why);
  if (VL(c)->leader >= 0)
    snprintf(WHY(c), sizeof WHY(c), "hierarchical: %d nodes, node leaders over verbs",
             c->nnodes);
  else
    snprintf(WHY(c), sizeof WHY(c), "verbs on %s", tc_vb_name(VL(c)->vb));
  return TECOMM_SUCCESS;
}

static void verbs_line(struct tecomm_comm *c, char *line, size_t n) {
  char dev[160] = "";
  if (VL(c)->vb)
    snprintf(dev, sizeof dev, " on %s, %u B inline (the device's)", tc_vb_name(VL(c)->vb),
             tc_vb_inline(VL(c)->vb));
  if (VL(c)->leader >= 0)
    snprintf(line, n, "verbs: hierarchical over %d nodes: reduce in the node (%s, %d ranks), "
             "allreduce among node leaders%s, broadcast in the node; gpudirect: %s",
             c->nnodes, VL(c)->local ? tc_level_name(VL(c)->local->level) : "one rank",
             VL(c)->local ? VL(c)->local->nranks : 1, dev, VL(c)->gdr_why);
  else
    snprintf(line, n, "verbs: flat over %d ranks%s; gpudirect: %s", c->nranks, dev,
             VL(c)->gdr_why);
}

static void verbs_close(struct tecomm_comm *c) {
  if (!VL(c)) return;
  tc_verbs_staged_free(c);
  tc_vb_close(VL(c)->vb);
  if (VL(c)->local) c->groups->free(VL(c)->local);
  free(VL(c));
  c->lv[TC_LV_VERBS] = NULL;
}

static tecomm_result_t verbs_reduce(struct tecomm_comm *c, tecore_devptr_t send,
                                   tecore_devptr_t recv, size_t count, tecore_dtype_t dtype,
                                   tecomm_op_t op, tecore_stream_t stream, const char *fn) {
  if (VL(c)->leader >= 0)
    return tc_hier_allreduce(c, send, recv, count, dtype, op, stream, fn);
  return tc_verbs_staged(c, send, recv, count, dtype, op, stream, fn);
}

/* The last link of the chain (every rank gets the same answer): a node's
 * non-leader has no endpoint of its own but stands at this level. */
static tecomm_result_t verbs_open(struct tecomm_comm *c, const struct tc_caps *all,
                                  tecore_stream_t st) {
  (void)st;
  (void)all;
  struct tc_verbs_lv *l = calloc(1, sizeof *l);
  if (!l) return TC_ERR(TECOMM_ERR_NOMEM, "tecomm_comm_init: out of host memory");
  c->lv[TC_LV_VERBS] = l;
  TC_CHECK(endpoint_open(c));
  if (l->vb || VL(c)->leader >= 0) {
    c->level = TC_LEVEL_VERBS;
    snprintf(c->level_why, sizeof c->level_why, "%.250s", WHY(c));
  } else if (c->nranks > 1 && WHY(c)[0]) {
    size_t n = strlen(c->level_why);
    snprintf(c->level_why + n, sizeof c->level_why - n, "; no verbs: %.200s", WHY(c));
  }
  return TECOMM_SUCCESS;
}

static tecomm_result_t verbs_health(struct tecomm_comm *c, const char *fn, int check_device) {
  if (VL(c) && VL(c)->vb) TC_CHECK(tc_vb_status(VL(c)->vb, fn));
  if (VL(c) && VL(c)->local) TC_CHECK(tc_hier_ready(c, fn, check_device));
  return TECOMM_SUCCESS;
}

/* The node's group stops with its parent. */
static void verbs_abort(struct tecomm_comm *c) {
  if (VL(c) && VL(c)->local) c->groups->abort(VL(c)->local);
}

/* The endpoint's failure names its peer; the node's group names its. */
static int verbs_failed_peer(struct tecomm_comm *c) {
  if (VL(c) && VL(c)->vb && tc_vb_failed_peer(VL(c)->vb) >= 0) return tc_vb_failed_peer(VL(c)->vb);
  if (VL(c) && VL(c)->local) return tc_hier_failed_peer(c);
  return -1;
}

static tecomm_result_t verbs_pick(struct tecomm_comm *c, tecomm_algo_t asked,
                                  const struct tc_call_facts *f, tecomm_algo_t *algo) {
  (void)f;
  if (asked == TECOMM_ALGO_AUTO) {
    *algo = c->level == TC_LEVEL_VERBS ? TECOMM_ALGO_VERBS : TECOMM_ALGO_AUTO;
    return TECOMM_SUCCESS;
  }
  if (c->level != TC_LEVEL_VERBS)
    return TC_ERR(TECOMM_ERR_NOT_SUPPORTED, "algorithm verbs: level %s (%s)%s%s",
                  tc_level_name(c->level), c->level_why, WHY(c)[0] ? "; verbs: " : "", WHY(c));
  *algo = asked;
  return TECOMM_SUCCESS;
}

/* Agreed on the host first (tc_run_agreed): once its copy to recv is on
 * the stream, a verbs call cannot be stopped. */
static tecomm_result_t verbs_run(struct tecomm_comm *c, const struct tc_call *k) {
  return tc_run_agreed(c, k, verbs_reduce);
}

/* Reduce-scatter: the allreduce of the whole input into local scratch,
 * then this rank's block (one verbs allreduce moves more than a
 * reduce-scatter needs, but the fallback keeps one path).  All-gather:
 * the ring's all-gather (flat), or the hierarchy's (verbs_hier.c).
 * Agreed on the host first, as the allreduce. */
static tecomm_result_t verbs_coll(struct tecomm_comm *c, const struct tc_call *k) {
  const int rs = k->coll == TC_COLL_REDUCE_SCATTER;
  if (!rs && VL(c)->leader >= 0) return tc_hier_allgather(c, k);
  TC_CHECK(tc_agree_host(c, &(struct tc_agree_call){.count = k->count, .dtype = k->dtype,
                                                     .op = k->op, .algo = k->algo,
                                                     .coll = (int)k->coll}, k->fn));
  if (!rs) return tc_verbs_staged_gather(c, k->send, k->recv, k->bytes, k->stream, k->fn);
  const size_t all = (size_t)c->nranks * k->bytes;
  TC_CHECK(tc_ce_scratch_get(c, all, k->cap, k->fn));
  TC_CHECK(verbs_reduce(c, k->send, c->ce_scratch, (size_t)c->nranks * k->count, k->dtype, k->op,
                        k->stream, k->fn));
  TC_CORE(tecore_memcpy_async(k->recv, c->ce_scratch + (size_t)c->rank * k->bytes, k->bytes,
                              k->stream),
          k->fn);
  return TECOMM_SUCCESS;
}

static void verbs_describe(struct tecomm_comm *c, struct tc_text *t) {
  if (c->level != TC_LEVEL_VERBS) return;
  char line[512];
  verbs_line(c, line, sizeof line);
  tc_put(t, "table: verbs at every size (recursive doubling when small, else ring)\n");
  tc_put(t, "%s\n", line);
}

const struct tc_level tc_level_verbs = {
    .name = "verbs",
    .chain = "verbs",
    .hosts = TC_ONE_HOST | TC_ACROSS_HOSTS,
    .last_resort = 1,
    .open = verbs_open,
    .close = verbs_close,
    .health = verbs_health,
    .abort = verbs_abort,
    .failed_peer = verbs_failed_peer,
    .pick = verbs_pick,
    .run = verbs_run,
    .run_coll = verbs_coll,
    .describe = verbs_describe,
};
