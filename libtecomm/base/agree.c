/* SPDX-License-Identifier: Apache-2.0 */
/* agree.c -- the agreement of allreduce calls at the NCCL and verbs
 * levels (issue 28): before such a call enqueues anything, every rank
 * allgathers its call descriptor (sequence number, count, dtype, op,
 * algorithm, the fused shape) over the communicator's host exchange and
 * compares it with every other rank's.  Ranks that disagree all return
 * TECOMM_ERR_MISMATCH naming the first differing field and both values,
 * before the data call, so nothing is written to any output.
 *
 * Why on the host, not inside the data path as the IPC kernels do:
 * ncclAllReduce cannot be stopped once enqueued with counts that differ
 * (it hangs or reads past a buffer), so the answer must be known before
 * the call; and the verbs path's copy back to recv is already enqueued
 * behind the service-engine job, so a mismatch found inside the job
 * could not keep recv unwritten.  The cost is one host round trip per
 * call (TECOMM_HOST_AGREE=0 turns it off).  Under capture the exchange
 * runs when the call is captured: the captured calls are checked, the
 * replays (no host code runs) are not.
 *
 * A rank whose communicator failed otherwise (a verbs error completion,
 * NCCL's watchdog) refuses its next call, and its peers would wait in
 * the exchange for it until TECOMM_TIMEOUT and learn nothing of who is
 * gone; so the first refused call takes part once more, saying it failed
 * (tc_agree_refused), and the peers waiting there return
 * TECOMM_ERR_TIMEOUT naming it at once. */
#include "agree.h"
#include "comm_priv.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TECORE_TUNABLE_INT(tc_tun_host_agree, "TECOMM_HOST_AGREE", 1, 0, 1,
                   "1: an allreduce at the NCCL or verbs level first allgathers its call "
                   "descriptor (sequence, count, dtype, op, algorithm, fused shape) over the host "
                   "exchange, so that ranks that disagree all get TECOMM_ERR_MISMATCH before "
                   "anything is enqueued (one host round trip per eager call; at capture time "
                   "for captured calls, replays are not checked); 0: off (ranks that disagree "
                   "then hang in NCCL until the watchdog's TECOMM_TIMEOUT).  Every rank must "
                   "use the same value")

/* What one rank sends: plain fixed-width data, the same layout on every
 * rank of one build (the mesh checks the length). */
struct tc_agree_wire {
  uint64_t seq;     /* this communicator's host-agreed calls before this one */
  uint64_t count;
  int32_t dtype, op, algo, fused;
  uint32_t hidden;
  float eps;
  int32_t failed;   /* 0, or the result that failed this rank's communicator */
  int32_t coll;     /* tc_coll_t */
};

static int host_agree_on(void) { return tecore_tunable_int(&tc_tun_host_agree) != 0; }

static const char *op_name(int32_t op) {
  return op == TECOMM_SUM ? "SUM" : op == TECOMM_MAX ? "MAX" : "?";
}

/* The collective a call is (tc_coll_t, fused). */
static const char *call_name(const struct tc_agree_wire *w) {
  if (w->coll == 1) return "reduce-scatter";
  if (w->coll == 2) return "all-gather";
  return w->fused ? "allreduce + add + RMSNorm" : "allreduce";
}

/* The first field of a and b that differs, named, with both values
 * (a's first); 0 when none does. */
static int first_diff(const struct tc_agree_wire *a, const struct tc_agree_wire *b,
                      const char **field, char *va, char *vb, size_t n) {
  if (a->count != b->count) {
    *field = "count";
    snprintf(va, n, "%llu", (unsigned long long)a->count);
    snprintf(vb, n, "%llu", (unsigned long long)b->count);
  } else if (a->dtype != b->dtype) {
    *field = "dtype";
    snprintf(va, n, "%s", tecore_dtype_name((tecore_dtype_t)a->dtype));
    snprintf(vb, n, "%s", tecore_dtype_name((tecore_dtype_t)b->dtype));
  } else if (a->op != b->op) {
    *field = "op";
    snprintf(va, n, "%s", op_name(a->op));
    snprintf(vb, n, "%s", op_name(b->op));
  } else if (a->algo != b->algo) {
    *field = "algorithm";
    snprintf(va, n, "%s", tecomm_algo_name((tecomm_algo_t)a->algo));
    snprintf(vb, n, "%s", tecomm_algo_name((tecomm_algo_t)b->algo));
  } else if (a->fused != b->fused || a->coll != b->coll) {
    *field = "call";
    snprintf(va, n, "%s", call_name(a));
    snprintf(vb, n, "%s", call_name(b));
  } else if (a->hidden != b->hidden) {
    *field = "hidden (fused)";
    snprintf(va, n, "%u", a->hidden);
    snprintf(vb, n, "%u", b->hidden);
  } else if (memcmp(&a->eps, &b->eps, sizeof a->eps) != 0) {
    *field = "eps (fused)";
    snprintf(va, n, "%g", (double)a->eps);
    snprintf(vb, n, "%g", (double)b->eps);
  } else if (a->seq != b->seq) {
    *field = "the call sequence (calls at the NCCL or verbs level so far)";
    snprintf(va, n, "%llu", (unsigned long long)a->seq);
    snprintf(vb, n, "%llu", (unsigned long long)b->seq);
  } else {
    return 0;
  }
  return 1;
}

tecomm_result_t tc_agree_host(struct tecomm_comm *c, const struct tc_agree_call *call,
                              const char *fn) {
  if (c->nranks < 2 || !host_agree_on()) return TECOMM_SUCCESS;
  struct tc_agree_wire me = {.seq = c->agree_seq++,
                             .count = call->count,
                             .dtype = (int32_t)call->dtype,
                             .op = (int32_t)call->op,
                             .algo = (int32_t)call->algo,
                             .fused = call->hidden != 0,
                             .hidden = (uint32_t)call->hidden,
                             .eps = call->hidden ? call->eps : 0.0f,
                             .coll = (int32_t)call->coll};
  struct tc_agree_wire few[16], *all = few;
  if (c->nranks > 16 && !(all = malloc((size_t)c->nranks * sizeof *all)))
    return TC_ERR(TECOMM_ERR_NOMEM, "%s: out of host memory", fn);
  tecomm_result_t r = c->xchg->allgather(c->xchg, &me, all, sizeof me);
  int peer = -1, gone = -1;
  int32_t gone_code = 0;
  const char *field = NULL;
  char va[64] = "", vb[64] = "";
  for (int p = 0; r == TECOMM_SUCCESS && p < c->nranks && gone < 0; p++)
    if (all[p].failed) gone = p, gone_code = all[p].failed;
  for (int p = 0; r == TECOMM_SUCCESS && gone < 0 && p < c->nranks && peer < 0; p++)
    if (p != c->rank && first_diff(&me, &all[p], &field, va, vb, sizeof va)) peer = p;
  if (all != few) free(all);
  /* whatever fails here, every rank that took part knows it: none of
   * them need tell the others again (tc_agree_refused) */
  if (r != TECOMM_SUCCESS || gone >= 0 || peer >= 0) c->agree_told = 1;
  /* the exchange itself failed: a peer that is gone, or does not come
   * within TECOMM_TIMEOUT (it made no call here, or another kind of
   * call); a timeout, as a dead peer is on the other links */
  if (r == TECOMM_ERR_BOOTSTRAP || r == TECOMM_ERR_TIMEOUT) {
    char text[400];
    snprintf(text, sizeof text, "%s", tecomm_last_error());
    c->sticky_peer = -1;
    return TC_ERR(TECOMM_ERR_TIMEOUT, "%s: not every rank came to the host agreement before the "
                  "%s call (nothing was enqueued): %s", fn, tecomm_algo_name(call->algo), text);
  }
  if (r != TECOMM_SUCCESS) return r;
  if (gone >= 0) {
    c->sticky_peer = gone;
    return TC_ERR(TECOMM_ERR_TIMEOUT,
                  "%s: rank %d cannot make this call: its communicator failed earlier (%s); "
                  "nothing was enqueued", fn, gone,
                  tecomm_result_name((tecomm_result_t)gone_code));
  }
  if (peer < 0) return TECOMM_SUCCESS;
  c->sticky_peer = peer;
  return TC_ERR(TECOMM_ERR_MISMATCH,
                "%s: rank %d's collective call differs from this rank's: %s %s here, %s on rank "
                "%d (compared on the host before the %s call; nothing was enqueued)",
                fn, peer, field, va, vb, peer, tecomm_algo_name(call->algo));
}

tecomm_result_t tc_agree_refused(struct tecomm_comm *c, tecomm_result_t why, const char *fn) {
  if (c->nranks < 2 || !host_agree_on() || c->agree_told || why == TECOMM_SUCCESS ||
      (c->level != TC_LEVEL_NCCL && c->level != TC_LEVEL_VERBS))
    return why;
  c->agree_told = 1;
  /* the refusal's text is the call's answer, whatever the exchange says */
  char text[512];
  snprintf(text, sizeof text, "%s", tecomm_last_error());
  struct tc_agree_wire me = {.seq = c->agree_seq++, .failed = (int32_t)why};
  struct tc_agree_wire few[16], *all = few;
  if (c->nranks <= 16 || (all = malloc((size_t)c->nranks * sizeof *all)) != NULL) {
    (void)c->xchg->allgather(c->xchg, &me, all, sizeof me);
    if (all != few) free(all);
  }
  (void)fn;
  tecore_set_error("%s", text);
  return why;
}
