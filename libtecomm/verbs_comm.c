/* verbs_comm.c -- the verbs level of the fallback chain: opening the
 * endpoint at communicator init (every rank agrees), and the
 * stream-ordered allreduce over it.
 * SPDX-License-Identifier: Apache-2.0
 *
 * On a stream an allreduce is three steps, all legal in a capture:
 *   a copy of the input into page-locked host staging (tecore_memcpy_async),
 *   a service-engine job (te/svc.h) whose call runs the host allreduce
 *     over verbs in the staging buffer -- the stream waits for it through
 *     stream memory operations, the engine thread drives the completion
 *     queue --,
 *   a copy of the result back to recv.
 * The engine runs one job at a time, so the verbs path wants one rank per
 * process (ranks that are threads of one process would wait for each
 * other on the one engine thread).  A failure (a dead peer, an error
 * completion) leaves the staging buffer NaN, so recv is never partial
 * sums, and makes the endpoint's sticky error the next call's answer. */
#include "comm_priv.h"
#include "verbs_priv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <te/svc.h>

TECORE_TUNABLE_INT(tc_tun_verbs, "TECOMM_VERBS", 1, 0, 1,
                   "0: never open the verbs path (the fallback after NCCL across nodes)")

/* One service-engine job: the allreduce of one shape on one staging buffer. */
struct tc_vjob {
  struct tc_vjob *next;
  tecore_svc_job_t *job;
  struct tecomm_comm *c;
  void *host;
  size_t count;
  tecore_dtype_t dtype;
  tecomm_op_t op;
};

/* Older staging buffers stay until the communicator goes: captured graphs
 * may still name them. */
struct tc_vhost {
  struct tc_vhost *next;
  void *ptr;
  size_t bytes;
};

tecomm_result_t tc_verbs_comm_open(struct tecomm_comm *c) {
  if (c->nranks < 2) return TECOMM_SUCCESS;
  if (!tecore_tunable_int(&tc_tun_verbs)) {
    snprintf(c->verbs_why, sizeof c->verbs_why, "TECOMM_VERBS=0");
    return TECOMM_SUCCESS;
  }
  tecomm_result_t r = tc_vb_open(c->xchg, &c->vb);
  if (r == TECOMM_ERR_NOT_SUPPORTED) {
    /* every rank got the same answer: the chain goes on without verbs */
    snprintf(c->verbs_why, sizeof c->verbs_why, "%s", tecore_last_error());
    return TECOMM_SUCCESS;
  }
  if (r != TECOMM_SUCCESS) return r;
  snprintf(c->verbs_why, sizeof c->verbs_why, "verbs on %s", tc_vb_name(c->vb));
  return TECOMM_SUCCESS;
}

void tc_verbs_comm_close(struct tecomm_comm *c) {
  while (c->vjobs) {
    struct tc_vjob *j = c->vjobs;
    c->vjobs = j->next;
    (void)tecore_svc_job_destroy(j->job);
    free(j);
  }
  while (c->vhosts) {
    struct tc_vhost *h = c->vhosts;
    c->vhosts = h->next;
    (void)tecore_mem_free_host(h->ptr);
    free(h);
  }
  tc_vb_close(c->vb);
  c->vb = NULL;
}

static tecore_result_t vjob_run(void *arg) {
  struct tc_vjob *j = arg;
  tecomm_result_t r = tc_vb_allreduce(j->c->vb, j->host, j->count, j->dtype, j->op);
  if (r == TECOMM_SUCCESS) return TECORE_SUCCESS;
  return r == TECOMM_ERR_TIMEOUT ? TECORE_ERR_TIMEOUT : TECORE_ERR_SYSTEM;
}

static int capturing(tecore_stream_t stream) {
  tecore_capture_status_t st = TECORE_CAPTURE_NONE;
  if (tecore_stream_capture_status(stream, &st) != TECORE_SUCCESS) return 0;
  return st != TECORE_CAPTURE_NONE;
}

/* The staging buffer for bytes (grown outside captures only). */
static tecomm_result_t staging(struct tecomm_comm *c, size_t bytes, tecore_stream_t stream,
                               const char *fn, void **out) {
  if (c->vhosts && c->vhosts->bytes >= bytes) {
    *out = c->vhosts->ptr;
    return TECOMM_SUCCESS;
  }
  if (capturing(stream))
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
  h->next = c->vhosts;
  c->vhosts = h;
  *out = h->ptr;
  return TECOMM_SUCCESS;
}

static tecomm_result_t vjob_get(struct tecomm_comm *c, void *host, size_t count,
                                tecore_dtype_t dtype, tecomm_op_t op, const char *fn,
                                struct tc_vjob **out) {
  for (struct tc_vjob *j = c->vjobs; j; j = j->next)
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
  struct tecore_svc_op sop = {.kind = TECORE_SVC_CALL, .fn = vjob_run, .arg = j, .name = name,
                              .buf_index = -1};
  tecore_result_t cr = tecore_svc_job_create(&sop, 1, &j->job);
  if (cr != TECORE_SUCCESS) {
    free(j);
    return tc_core(cr, fn);
  }
  j->next = c->vjobs;
  c->vjobs = j;
  *out = j;
  return TECOMM_SUCCESS;
}

tecomm_result_t tc_verbs_allreduce(struct tecomm_comm *c, tecore_devptr_t send,
                                   tecore_devptr_t recv, size_t count, tecore_dtype_t dtype,
                                   tecomm_op_t op, tecore_stream_t stream, const char *fn) {
  if (!c->vb)
    return TC_ERR(TECOMM_ERR_NOT_SUPPORTED, "%s: no verbs path (%s)", fn, c->verbs_why);
  TC_CHECK(tc_vb_status(c->vb, fn));
  size_t bytes = count * tecore_dtype_size(dtype);
  void *host = NULL;
  struct tc_vjob *j = NULL;
  TC_CHECK(staging(c, bytes, stream, fn, &host));
  TC_CHECK(vjob_get(c, host, count, dtype, op, fn, &j));
  TC_CORE(tecore_memcpy_async((tecore_devptr_t)(uintptr_t)host, send, bytes, stream), fn);
  tecore_result_t cr = tecore_svc_job_enqueue(j->job, stream);
  if (cr != TECORE_SUCCESS) {
    /* the job's sticky error: the endpoint's says more (names the peer) */
    TC_CHECK(tc_vb_status(c->vb, fn));
    return tc_core(cr, fn);
  }
  TC_CORE(tecore_memcpy_async(recv, (tecore_devptr_t)(uintptr_t)host, bytes, stream), fn);
  if (!capturing(stream)) (void)tecore_svc_kick();
  return TECOMM_SUCCESS;
}
