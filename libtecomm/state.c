/* SPDX-License-Identifier: Apache-2.0 */
/* state.c -- a communicator's health, read by every call: whether the
 * handle is live and this process's, the sticky error a failed collective
 * leaves (a timeout, a mismatch, an abort, kept with its text so that
 * every later call is refused with it), the device-side error word of the
 * IPC workspace (read at most every 10 ms on the collective path), and
 * each level's own health (levels.c). */
#include "level.h"
#include "te_handles.h"
#include <stdio.h>
#include <string.h>
#include <unistd.h>

tecomm_result_t tc_comm_valid(const struct tecomm_comm *c, const char *fn) {
  TC_ARG(c, "%s: comm is NULL", fn);
  /* only the pointer is compared: a destroyed communicator is never read */
  TC_ARG(te_handle_live(c),
         "%s: comm %p is not a live communicator (destroyed, or not made by tecomm_comm_init "
         "or tecomm_comm_split)", fn, (const void *)c);
  long me = (long)getpid();
  TC_ARG(c->creator == me,
         "%s: comm was made by process %ld; process %ld (a fork of it) may not use it: its "
         "memory, sockets and device state belong to the process that made it", fn, c->creator,
         me);
  return TECOMM_SUCCESS;
}

tecomm_result_t tc_comm_fail(struct tecomm_comm *c, tecomm_result_t r) {
  if (r != TECOMM_ERR_TIMEOUT && r != TECOMM_ERR_ABORTED && r != TECOMM_ERR_MISMATCH) return r;
  if (c->sticky == TECOMM_SUCCESS) {
    c->sticky = r;
    snprintf(c->sticky_why, sizeof c->sticky_why, "%s", tecomm_last_error());
  }
  return r;
}

static const char *ar_op_name(int op) { return op == TC_AR_SUM ? "SUM" : "MAX"; }

/* What a TC_AR_ERR_MISMATCH with peer was: the first field of the
 * call descriptors (this rank's and the peer's, read from the workspaces)
 * that differs, with both values. */
static void tc_mismatch_why(struct tecomm_comm *c, int peer, char *why, size_t n) {
  struct tc_ar_desc me, them;
  if (peer < 0 || peer >= c->nranks || !c->ws.peer[peer] ||
      tc_ar_desc_read(c->ws.me, &me) != TECORE_SUCCESS ||
      tc_ar_desc_read(c->ws.peer[peer], &them) != TECORE_SUCCESS) {
    snprintf(why, n, "rank %d made a different collective call (its descriptor is unreadable)",
             peer);
    return;
  }
  const char *f = "the call sequence";
  char a[64] = "", b[64] = "";
  if (strcmp(tc_ar_desc_call(&me), tc_ar_desc_call(&them)) != 0) {
    f = "call";
    snprintf(a, sizeof a, "%s", tc_ar_desc_call(&me));
    snprintf(b, sizeof b, "%s", tc_ar_desc_call(&them));
  } else if (me.count != them.count) {
    f = "count";
    snprintf(a, sizeof a, "%llu", (unsigned long long)me.count);
    snprintf(b, sizeof b, "%llu", (unsigned long long)them.count);
  } else if (me.dtype != them.dtype) {
    f = "dtype";
    snprintf(a, sizeof a, "%s", tecore_dtype_name((tecore_dtype_t)me.dtype));
    snprintf(b, sizeof b, "%s", tecore_dtype_name((tecore_dtype_t)them.dtype));
  } else if (strcmp(tc_ar_desc_input(&me), tc_ar_desc_input(&them)) != 0) {
    f = "input (read from)";
    snprintf(a, sizeof a, "%s", tc_ar_desc_input(&me));
    snprintf(b, sizeof b, "%s", tc_ar_desc_input(&them));
  } else if (me.op != them.op) {
    f = "op";
    snprintf(a, sizeof a, "%s", ar_op_name(me.op));
    snprintf(b, sizeof b, "%s", ar_op_name(them.op));
  } else if (me.algo != them.algo || me.variant != them.variant) {
    f = "algorithm";
    snprintf(a, sizeof a, "%s (variant %u)", tc_ar_kernel_name(me.algo), me.variant);
    snprintf(b, sizeof b, "%s (variant %u)", tc_ar_kernel_name(them.algo), them.variant);
  } else if (me.hidden != them.hidden) {
    f = tc_ar_desc_hidden(&me);
    snprintf(a, sizeof a, "%u", me.hidden);
    snprintf(b, sizeof b, "%u", them.hidden);
  } else if (me.eps != them.eps) {
    f = "eps (fused)";
    snprintf(a, sizeof a, "%g", (double)me.eps);
    snprintf(b, sizeof b, "%g", (double)them.eps);
  } else if (me.nranks != them.nranks) {
    f = "nranks";
    snprintf(a, sizeof a, "%d", me.nranks);
    snprintf(b, sizeof b, "%d", them.nranks);
  }
  if (a[0] && (me.variant & them.variant & TC_AR_DESC_GEMM))
    snprintf(why, n, "rank %d's collective call differs from this rank's (%s): %s %s here, %s on "
             "rank %d", peer, tc_ar_desc_call(&me), f, a, b, peer);
  else if (a[0])
    snprintf(why, n, "rank %d's collective call differs from this rank's: %s %s here, %s on rank %d",
             peer, f, a, b, peer);
  else
    snprintf(why, n, "rank %d's collective call differs from this rank's: %s (a call one rank "
             "made and the other did not)", peer, f);
}

/* The device's error word made the communicator's (sticky) error. */
static void ready_from_word(struct tecomm_comm *c, int code, int peer) {
  c->sticky_peer = peer;
  if (code == TC_AR_ERR_MISMATCH) {
    c->sticky = TECOMM_ERR_MISMATCH;
    tc_mismatch_why(c, peer, c->sticky_why, sizeof c->sticky_why);
  } else if (code == TC_AR_ERR_ABORTED) {
    c->sticky = TECOMM_ERR_ABORTED;
    snprintf(c->sticky_why, sizeof c->sticky_why,
             "a collective gave up: the communicator was aborted (here or by rank %d)", peer);
  } else {
    c->sticky = TECOMM_ERR_TIMEOUT;
    snprintf(c->sticky_why, sizeof c->sticky_why,
             "a device-side wait for rank %d expired (TECOMM_TIMEOUT %lld ms)", peer,
             (long long)tc_timeout_ms());
  }
}

tecomm_result_t tc_comm_ready(struct tecomm_comm *c, const char *fn, int check_device) {
  if (c->aborted && c->sticky == TECOMM_SUCCESS) {
    c->sticky = TECOMM_ERR_ABORTED;
    snprintf(c->sticky_why, sizeof c->sticky_why, "the communicator was aborted");
  }
  /* the error word is read through a stream of its own and waited for:
   * tens of microseconds on a GPU, so a collective reads it at most every
   * 10 ms (a timeout takes TECOMM_TIMEOUT to happen anyway); status
   * always reads it */
  int64_t now = check_device == 1 ? tc_now_ms() : 0;
  if (check_device == 1 && now - c->last_check_ms < 10) check_device = 0;
  if (check_device) c->last_check_ms = now;
  if (check_device && c->sticky == TECOMM_SUCCESS && c->ws.me) {
    int code = TC_AR_OK, peer = -1;
    tecore_result_t r = tc_ar_error(c->ws.me, &code, &peer, 0);
    if (r != TECORE_SUCCESS) return tc_core(r, fn);
    if (code != TC_AR_OK) ready_from_word(c, code, peer);
  }
  TC_CHECK(tc_levels_health(c, fn, check_device));
  /* sticky: every later call is refused with the first failure's text */
  if (c->sticky != TECOMM_SUCCESS && c->sticky_why[0])
    return TC_ERR(c->sticky, "%s: rank %d of %d: the communicator failed earlier: %s", fn, c->rank,
                  c->nranks, c->sticky_why);
  if (c->sticky != TECOMM_SUCCESS)
    return TC_ERR(c->sticky, "%s: the communicator failed earlier (%s)", fn,
                  tecomm_result_name(c->sticky));
  return TECOMM_SUCCESS;
}

