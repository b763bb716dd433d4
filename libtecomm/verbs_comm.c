/* verbs_comm.c -- the verbs level of the fallback chain: opening the
 * endpoint at communicator init (every rank agrees), and the
 * stream-ordered allreduce over it.
 * SPDX-License-Identifier: Apache-2.0
 *
 * On a stream an allreduce is three steps, all legal in a capture:
 *   a copy of the input into page-locked host staging (tecore_memcpy_async),
 *   a service-engine job (te/svc.h) whose call starts the host allreduce
 *     over verbs in the staging buffer and whose poll drives it -- the
 *     stream waits for it through stream memory operations; the engine
 *     polls the completion queue once a pass of its loop, between its
 *     other jobs (offload's reads and writes go on meanwhile) --,
 *   a copy of the result back to recv.
 * Ranks spanning nodes go hierarchical where they can (verbs_hier.c):
 * only the node leaders run this.  A failure (a dead peer, an error
 * completion) leaves the staging buffer NaN, so recv is never partial
 * sums, and makes the endpoint's sticky error the next call's answer. */
#include "verbs_lv.h"
#include "agree.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <te/svc.h>

#define WHY(c) ((c)->lv_why[TC_LV_VERBS])

TECORE_TUNABLE_INT(tc_tun_verbs, "TECOMM_VERBS", 1, 0, 1,
                   "0: never open the verbs path (the fallback after NCCL across nodes)")

/* One service-engine job: the allreduce of one shape on one staging
 * buffer, a call that starts it and a poll that drives it. */
struct tc_vjob {
  struct tc_vjob *next;
  tecore_svc_job_t *job;
  struct tecomm_comm *c;
  void *host;
  size_t count;
  tecore_dtype_t dtype;
  tecomm_op_t op;
  struct tc_vb_ar ar;        /* the allreduce under way (engine thread) */
  int failed;                /* the start failed: the poll reports it */
};

/* Older staging buffers stay until the communicator goes: captured graphs
 * may still name them. */
struct tc_vhost {
  struct tc_vhost *next;
  void *ptr;
  size_t bytes;
};

static tecomm_result_t endpoint_open(struct tecomm_comm *c) {
  c->leader = -1;
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
    if (c->local) tc_comm_child_free(c->local);
    c->local = NULL;
    c->leader = -1;
  }
  if (r == TECOMM_ERR_NOT_SUPPORTED) {
    /* every rank got the same answer: the chain goes on without verbs */
    snprintf(WHY(c), sizeof WHY(c), "%s", tecore_last_error());
    return TECOMM_SUCCESS;
  }
  if (r != TECOMM_SUCCESS) return r;
  tc_gdr_detect(c);
  if (VL(c)->vb)
    TC_INFO("verbs: rank %d on device %d: gpudirect: %s", c->rank, c->device, c->gdr_why);
  if (c->leader >= 0)
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
  if (c->leader >= 0)
    snprintf(line, n, "verbs: hierarchical over %d nodes: reduce in the node (%s, %d ranks), "
             "allreduce among node leaders%s, broadcast in the node; gpudirect: %s",
             c->nnodes, c->local ? tc_level_name(c->local->level) : "one rank",
             c->local ? c->local->nranks : 1, dev, c->gdr_why);
  else
    snprintf(line, n, "verbs: flat over %d ranks%s; gpudirect: %s", c->nranks, dev, c->gdr_why);
}

static void verbs_close(struct tecomm_comm *c) {
  if (!VL(c)) return;
  while (VL(c)->jobs) {
    struct tc_vjob *j = VL(c)->jobs;
    VL(c)->jobs = j->next;
    (void)tecore_svc_job_destroy(j->job);
    tc_vb_ar_fini(&j->ar);
    free(j);
  }
  while (VL(c)->hosts) {
    struct tc_vhost *h = VL(c)->hosts;
    VL(c)->hosts = h->next;
    (void)tecore_mem_free_host(h->ptr);
    free(h);
  }
  tc_vb_close(VL(c)->vb);
  free(VL(c));
  c->lv[TC_LV_VERBS] = NULL;
}

/* A failed run: the node's other ranks must not wait for this leader,
 * and the job's error is the endpoint's (it names the peer). */
static tecore_result_t vjob_failed(struct tc_vjob *j) {
  memset(j->host, 0xff, j->count * tecore_dtype_size(j->dtype));   /* NaN, never partial sums */
  if (j->c->leader == 1 && j->c->local) tc_hier_stop_node(j->c);
  tecomm_result_t r = tc_vb_status(VL(j->c)->vb, "verbs allreduce");
  return r == TECOMM_ERR_TIMEOUT ? TECORE_ERR_TIMEOUT : TECORE_ERR_SYSTEM;
}

/* The job's call: starts the run (on the engine thread). */
static tecore_result_t vjob_start(void *arg) {
  struct tc_vjob *j = arg;
  tecomm_result_t r = tc_vb_status(VL(j->c)->vb, "verbs allreduce");
  if (r == TECOMM_SUCCESS && j->c->local) r = tc_hier_node_ok(j->c);
  if (r == TECOMM_SUCCESS) r = tc_vb_ar_start(VL(j->c)->vb, &j->ar, j->host, j->count, j->dtype, j->op);
  j->failed = r != TECOMM_SUCCESS;
  return TECORE_SUCCESS;   /* the poll reports it */
}

/* The job's poll: one pass over the completion queue and the exchanges,
 * never blocking, so that the engine's other jobs go on meanwhile. */
static tecore_result_t vjob_poll(void *arg) {
  struct tc_vjob *j = arg;
  if (j->failed) return vjob_failed(j);
  int st = tc_vb_ar_poll(VL(j->c)->vb, &j->ar);
  if (st == 0) return TECORE_ERR_NOT_READY;
  if (st > 0) return TECORE_SUCCESS;
  return vjob_failed(j);
}


/* The staging buffer for bytes (grown outside captures only). */
static tecomm_result_t staging(struct tecomm_comm *c, size_t bytes, tecore_stream_t stream,
                               const char *fn, void **out) {
  if (VL(c)->hosts && VL(c)->hosts->bytes >= bytes) {
    *out = VL(c)->hosts->ptr;
    return TECOMM_SUCCESS;
  }
  if (tc_capturing(stream))
    return TC_ERR(TECOMM_ERR_NOT_SUPPORTED, "%s: the verbs path needs %zu bytes of staging; make "
                  "one eager call of this size before capturing", fn, bytes);
  size_t want = 64 * 1024;
  while (want < bytes) want *= 2;
  struct tc_vhost *h = calloc(1, sizeof *h);
  if (!h) return TC_ERR(TECOMM_ERR_NOMEM, "%s: out of host memory", fn);
  tecore_result_t cr = tecore_mem_alloc_host(want, &h->ptr);
  if (cr != TECORE_SUCCESS) {
    free(h);
    return tc_core(cr, fn);
  }
  h->bytes = want;
  h->next = VL(c)->hosts;
  VL(c)->hosts = h;
  *out = h->ptr;
  return TECOMM_SUCCESS;
}

static tecomm_result_t vjob_get(struct tecomm_comm *c, void *host, size_t count,
                                tecore_dtype_t dtype, tecomm_op_t op, const char *fn,
                                struct tc_vjob **out) {
  for (struct tc_vjob *j = VL(c)->jobs; j; j = j->next)
    if (j->host == host && j->count == count && j->dtype == dtype && j->op == op) {
      *out = j;
      return TECOMM_SUCCESS;
    }
  struct tc_vjob *j = calloc(1, sizeof *j);
  if (!j) return TC_ERR(TECOMM_ERR_NOMEM, "%s: out of host memory", fn);
  *j = (struct tc_vjob){.c = c, .host = host, .count = count, .dtype = dtype, .op = op};
  char name[96];
  snprintf(name, sizeof name, "verbs allreduce of %zu %s on rank %d", count,
           tecore_dtype_name(dtype), c->rank);
  struct tecore_svc_op sop[2] = {
      {.kind = TECORE_SVC_CALL, .fn = vjob_start, .arg = j, .name = name, .buf_index = -1},
      {.kind = TECORE_SVC_POLL, .fn = vjob_poll, .arg = j, .name = name, .buf_index = -1}};
  tecore_result_t cr = tecore_svc_job_create(sop, 2, &j->job);
  if (cr != TECORE_SUCCESS) {
    free(j);
    return tc_core(cr, fn);
  }
  j->next = VL(c)->jobs;
  VL(c)->jobs = j;
  *out = j;
  return TECOMM_SUCCESS;
}

static tecomm_result_t verbs_reduce(struct tecomm_comm *c, tecore_devptr_t send,
                                   tecore_devptr_t recv, size_t count, tecore_dtype_t dtype,
                                   tecomm_op_t op, tecore_stream_t stream, const char *fn) {
  if (c->leader >= 0) return tc_hier_allreduce(c, send, recv, count, dtype, op, stream, fn);
  return tc_verbs_staged(c, send, recv, count, dtype, op, stream, fn);
}

tecomm_result_t tc_verbs_staged(struct tecomm_comm *c, tecore_devptr_t send, tecore_devptr_t recv,
                                size_t count, tecore_dtype_t dtype, tecomm_op_t op,
                                tecore_stream_t stream, const char *fn) {
  if (!VL(c) || !VL(c)->vb)
    return TC_ERR(TECOMM_ERR_NOT_SUPPORTED, "%s: no verbs path (%s)", fn, WHY(c));
  TC_CHECK(tc_vb_status(VL(c)->vb, fn));
  size_t bytes = count * tecore_dtype_size(dtype);
  void *host = NULL;
  struct tc_vjob *j = NULL;
  TC_CHECK(staging(c, bytes, stream, fn, &host));
  TC_CHECK(vjob_get(c, host, count, dtype, op, fn, &j));
  TC_CORE(tecore_memcpy_async((tecore_devptr_t)(uintptr_t)host, send, bytes, stream), fn);
  tecore_result_t cr = tecore_svc_job_enqueue(j->job, stream);
  if (cr != TECORE_SUCCESS) {
    /* the job's sticky error: the endpoint's says more (names the peer) */
    TC_CHECK(tc_vb_status(VL(c)->vb, fn));
    return tc_core(cr, fn);
  }
  TC_CORE(tecore_memcpy_async(recv, (tecore_devptr_t)(uintptr_t)host, bytes, stream), fn);
  if (!tc_capturing(stream)) (void)tecore_svc_kick();
  return TECOMM_SUCCESS;
}

/* The last link of the chain (every rank gets the same answer): a node's
 * non-leader has no endpoint of its own but stands at this level. */
static tecomm_result_t verbs_open(struct tecomm_comm *c, tecore_stream_t st) {
  (void)st;
  struct tc_verbs_lv *l = calloc(1, sizeof *l);
  if (!l) return TC_ERR(TECOMM_ERR_NOMEM, "tecomm_comm_init: out of host memory");
  c->lv[TC_LV_VERBS] = l;
  TC_CHECK(endpoint_open(c));
  if (l->vb || c->leader >= 0) {
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
  if (c->local) TC_CHECK(tc_hier_ready(c, fn, check_device));
  return TECOMM_SUCCESS;
}

/* The endpoint's failure names its peer; the node's group names its. */
static int verbs_failed_peer(struct tecomm_comm *c) {
  if (VL(c) && VL(c)->vb && tc_vb_failed_peer(VL(c)->vb) >= 0) return tc_vb_failed_peer(VL(c)->vb);
  if (c->local) return tc_hier_failed_peer(c);
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

/* A verbs call cannot be stopped once its copy to recv is on the
 * stream: agreed on the host first. */
static tecomm_result_t verbs_run(struct tecomm_comm *c, const struct tc_call *k) {
  TC_CHECK(tc_agree_host(c, &(struct tc_agree_call){.count = k->count, .dtype = k->dtype,
                                                     .op = k->op, .algo = k->algo}, k->fn));
  return verbs_reduce(c, k->send, k->recv, k->count, k->dtype, k->op, k->stream, k->fn);
}

static tecomm_result_t verbs_run_fused(struct tecomm_comm *c, const struct tc_call *k) {
  TC_CHECK(tc_agree_host(c, &(struct tc_agree_call){.count = k->count, .dtype = k->dtype,
                                                     .op = k->op, .algo = k->algo,
                                                     .hidden = k->fa->hidden, .eps = k->fa->eps},
                         k->fn));
  return tc_run_composite(c, k, verbs_reduce);
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
    .at = TC_AT_VERBS,
    .last_resort = 1,
    .open = verbs_open,
    .close = verbs_close,
    .health = verbs_health,
    .failed_peer = verbs_failed_peer,
    .pick = verbs_pick,
    .run = verbs_run,
    .run_fused = verbs_run_fused,
    .describe = verbs_describe,
};
