/* SPDX-License-Identifier: Apache-2.0 */
/* verbs_staged.c -- the verbs allreduce on a stream, over this rank's
 * endpoint: the input copied into page-locked staging, a service-engine
 * job that runs the host allreduce over verbs in it (its call starts it,
 * its poll drives it; the stream waits for the job), the result copied
 * back.  The flat verbs level runs it on every rank, the hierarchy on the
 * node leaders, which also stop their node's ranks when their step
 * fails (hier_stop_node) and refuse to send a node sum that is not
 * there (hier_node_ok).  Below verbs_comm.c and verbs_hier.c. */
#include "verbs_lv.h"
#include "verbs_ep.h"   /* tc_vb_fail */
#include "common/comm_ar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <te/svc.h>

#define WHY(c) ((c)->lv_why[TC_LV_VERBS])

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
  int gather;                /* an all-gather of count / nranks bytes a rank */
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

/* The leader, before its verbs step: TECOMM_SUCCESS, or (the node's group
 * failed: its error word is set) the endpoint made failed. */
static tecomm_result_t hier_node_ok(struct tecomm_comm *c) {
  struct tecomm_comm *lc = VL(c)->local;
  int code = TC_AR_OK, peer = -1;
  if (!lc || !lc->ws.me || tc_ar_error(lc->ws.me, &code, &peer, 0) != TECORE_SUCCESS ||
      code == TC_AR_OK)
    return TECOMM_SUCCESS;
  /* the node's sum is not there: sending it on would hand the other nodes
   * garbage without an error, so the leader's endpoint fails instead, and
   * its queue pairs in the error state tell the other leaders */
  int bad = peer >= 0 ? peer : 0, world = -1;
  for (int i = 0, k = 0; i < c->nranks; i++)
    if (c->node_of[i] == c->node && k++ == bad) world = i;
#ifdef TE_HAVE_VERBS
  return tc_vb_fail(VL(c)->vb, TECOMM_ERR_TIMEOUT, -1, "rank %d: node %d's group failed before the "
                    "inter-node step (%s, waiting for rank %d): its leader stops", c->rank,
                    c->node, code == TC_AR_ERR_ABORTED ? "aborted" : "a device-side wait "
                    "expired (TECOMM_TIMEOUT)", world);
#else
  return TC_ERR(TECOMM_ERR_TIMEOUT, "rank %d: node %d's group failed (rank %d)", c->rank, c->node,
                world);
#endif
}

/* Stops the node's ranks after the leader's inter-node step failed (the
 * engine thread calls it): their waits give up. */
static void hier_stop_node(struct tecomm_comm *c) {
  struct tecomm_comm *lc = VL(c)->local;
  if (!lc || !lc->ws.me) return;   /* an NCCL group: its ranks wait out TECOMM_TIMEOUT */
  for (int r = 0; r < lc->nranks; r++)
    if (lc->ws.peer[r] && tc_ar_abort(lc->ws.peer[r]) != TECORE_SUCCESS)
      TC_WARN("tecomm: rank %d: could not stop node rank %d: %s", c->rank, r, tecore_last_error());
}

/* A failed run: the node's other ranks must not wait for this leader,
 * and the job's error is the endpoint's (it names the peer). */
static tecore_result_t vjob_failed(struct tc_vjob *j) {
  memset(j->host, 0xff, j->count * tecore_dtype_size(j->dtype));   /* NaN, never partial sums */
  if (VL(j->c)->leader == 1 && VL(j->c)->local) hier_stop_node(j->c);
  tecomm_result_t r = tc_vb_status(VL(j->c)->vb, "verbs allreduce");
  return r == TECOMM_ERR_TIMEOUT ? TECORE_ERR_TIMEOUT : TECORE_ERR_SYSTEM;
}

/* The job's call: starts the run (on the engine thread). */
static tecore_result_t vjob_start(void *arg) {
  struct tc_vjob *j = arg;
  tecomm_result_t r = tc_vb_status(VL(j->c)->vb, "verbs allreduce");
  if (r == TECOMM_SUCCESS && VL(j->c)->local) r = hier_node_ok(j->c);
  int me = 0, n = 1;
  tc_vb_ranks(VL(j->c)->vb, &me, &n);   /* the leaders alone, in the hierarchy */
  if (r == TECOMM_SUCCESS && j->gather)
    r = tc_vb_ag_start(VL(j->c)->vb, &j->ar, j->host, j->count / (size_t)n);
  else if (r == TECOMM_SUCCESS)
    r = tc_vb_ar_start(VL(j->c)->vb, &j->ar, j->host, j->count, j->dtype, j->op);
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

/* The job of one shape (an all-gather when gather: count bytes in all,
 * dtype E4M3, op SUM). */
static tecomm_result_t vjob_get(struct tecomm_comm *c, void *host, size_t count,
                                tecore_dtype_t dtype, tecomm_op_t op, int gather, const char *fn,
                                struct tc_vjob **out) {
  for (struct tc_vjob *j = VL(c)->jobs; j; j = j->next)
    if (j->host == host && j->count == count && j->dtype == dtype && j->op == op &&
        j->gather == gather) {
      *out = j;
      return TECOMM_SUCCESS;
    }
  struct tc_vjob *j = calloc(1, sizeof *j);
  if (!j) return TC_ERR(TECOMM_ERR_NOMEM, "%s: out of host memory", fn);
  *j = (struct tc_vjob){.c = c, .host = host, .count = count, .dtype = dtype, .op = op,
                        .gather = gather};
  char name[96];
  snprintf(name, sizeof name, "verbs %s of %zu %s on rank %d", gather ? "all-gather" : "allreduce",
           count, tecore_dtype_name(dtype), c->rank);
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

/* One staged run: send's in_bytes copied to the staging buffer at
 * in_at, the job, then out_bytes from its start copied to recv. */
struct staged_run {
  tecore_devptr_t send, recv;
  size_t in_at, in_bytes, out_bytes;
  size_t count;
  tecore_dtype_t dtype;
  tecomm_op_t op;
  int gather;
};

static tecomm_result_t staged(struct tecomm_comm *c, const struct staged_run *q,
                              tecore_stream_t stream, const char *fn) {
  if (!VL(c) || !VL(c)->vb)
    return TC_ERR(TECOMM_ERR_NOT_SUPPORTED, "%s: no verbs path (%s)", fn, WHY(c));
  TC_CHECK(tc_vb_status(VL(c)->vb, fn));
  void *host = NULL;
  struct tc_vjob *j = NULL;
  TC_CHECK(staging(c, q->out_bytes, stream, fn, &host));
  TC_CHECK(vjob_get(c, host, q->count, q->dtype, q->op, q->gather, fn, &j));
  const tecore_devptr_t h = (tecore_devptr_t)(uintptr_t)host;
  TC_CORE(tecore_memcpy_async(h + q->in_at, q->send, q->in_bytes, stream), fn);
  tecore_result_t cr = tecore_svc_job_enqueue(j->job, stream);
  if (cr != TECORE_SUCCESS) {
    /* the job's sticky error: the endpoint's says more (names the peer) */
    TC_CHECK(tc_vb_status(VL(c)->vb, fn));
    return tc_core(cr, fn);
  }
  TC_CORE(tecore_memcpy_async(q->recv, h, q->out_bytes, stream), fn);
  if (!tc_capturing(stream)) (void)tecore_svc_kick();
  return TECOMM_SUCCESS;
}

tecomm_result_t tc_verbs_staged(struct tecomm_comm *c, tecore_devptr_t send, tecore_devptr_t recv,
                                size_t count, tecore_dtype_t dtype, tecomm_op_t op,
                                tecore_stream_t stream, const char *fn) {
  const size_t bytes = count * tecore_dtype_size(dtype);
  return staged(c, &(struct staged_run){.send = send, .recv = recv, .in_bytes = bytes,
                                        .out_bytes = bytes, .count = count, .dtype = dtype,
                                        .op = op},
                stream, fn);
}

tecomm_result_t tc_verbs_staged_gather(struct tecomm_comm *c, tecore_devptr_t send,
                                       tecore_devptr_t recv, size_t bytes, tecore_stream_t stream,
                                       const char *fn) {
  if (!VL(c) || !VL(c)->vb)
    return TC_ERR(TECOMM_ERR_NOT_SUPPORTED, "%s: no verbs path (%s)", fn, WHY(c));
  int me = 0, n = 1;   /* the endpoint's members: every rank, or the node leaders */
  tc_vb_ranks(VL(c)->vb, &me, &n);
  const size_t all = (size_t)n * bytes;
  return staged(c, &(struct staged_run){.send = send, .recv = recv,
                                        .in_at = (size_t)me * bytes, .in_bytes = bytes,
                                        .out_bytes = all, .count = all,
                                        .dtype = TECORE_DTYPE_E4M3, .op = TECOMM_SUM,
                                        .gather = 1},
                stream, fn);
}

void tc_verbs_staged_free(struct tecomm_comm *c) {
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
}

