/* SPDX-License-Identifier: Apache-2.0 */
/* nccl_watch.c -- a watchdog over a communicator's NCCL collectives.
 *
 * Why: libtecomm's own kernels bound every wait on the device
 * (TECOMM_TIMEOUT), but NCCL's kernels wait for a peer until NCCL notices
 * that it is gone, which it may never do (a peer process killed between
 * two collectives leaves its peers' kernels spinning).  Then a stream
 * synchronize never returns.  So every NCCL call made outside a capture
 * is bracketed by two stream-ordered writes of its sequence number into
 * page-locked host words (tecore_stream_write_value64: "started" before
 * the call, "ended" after it); a thread reads the oldest call's words
 * every 20 ms, and a call that has started but not ended TECOMM_TIMEOUT
 * after the watchdog first saw it start gets its communicator aborted:
 * ncclCommAbort ends the kernels, the streams drain, and the
 * communicator's next call, or tecomm_comm_status, returns
 * TECOMM_ERR_TIMEOUT saying so.  Time queued behind other work does not
 * count; only time spent inside the collective does.  The thread reads
 * host memory and makes no driver call but the abort, so it never
 * disturbs a stream capture of another thread (an event query would
 * invalidate a global-mode one).
 *
 * Captured calls are not watched (their writes would become graph
 * nodes).  At most W_SLOTS calls in flight are watched; past that a call
 * goes unwatched (the oldest ones still are, and a hang shows there).
 *
 * The file owns the communicator's NCCL handle after init: its lock (every
 * NCCL call of libtecomm runs under it, tc_nccl_lock, and so do the
 * watchdog's abort and NCCL's asynchronous error check, so no call reaches
 * a communicator aborted meanwhile), its health and its end. */
#include "nccl_lv.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define W_SLOTS 64
#define W_POLL_MS 20

TECORE_TUNABLE_INT(tc_tun_nccl_watch, "TECOMM_NCCL_WATCHDOG", 1, 0, 1,
                   "1: a thread aborts an NCCL communicator whose collective (not captured) "
                   "has run TECOMM_TIMEOUT without ending, so streams never hang on a dead "
                   "peer; 0: no watchdog (NCCL's own detection only)")

struct tc_nccl_op {
  uint64_t seq;      /* the call's number, written to its words */
  int64_t seen_ms;   /* when the watchdog first saw it started; 0: not yet */
};

struct tc_nccl_watch {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  int started, stop;
  struct tc_nccl_op ops[W_SLOTS]; /* a ring: head, count */
  unsigned head, count;
  uint64_t seq;
  uint64_t *words;            /* page-locked: started[W_SLOTS], ended[W_SLOTS] */
  tecore_devptr_t dwords;     /* their device address */
  struct tecomm_comm *c;
  int fired;                  /* atomic: the watchdog aborted the NCCL communicator */
  char why[192];              /* written before fired is set */
};

tecomm_result_t tc_nccl_open_watch(struct tecomm_comm *c) {
  struct tc_nccl_watch *w = calloc(1, sizeof *w);
  if (!w) return TC_ERR(TECOMM_ERR_NOMEM, "tecomm_comm_init: out of host memory");
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  w->c = c;
  NL(c)->watch = w;
  return TECOMM_SUCCESS;
}

void tc_nccl_close(struct tecomm_comm *c) {
  if (!NL(c)) return;
  struct tc_nccl_watch *w = NL(c)->watch;
  const struct tc_nccl *n = tc_nccl_get(NULL);
  int fired = 0;
  if (w) {
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    fired = w->fired;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (w->started) pthread_join(w->thread, NULL);
    fired = w->fired;
  }
  if (NL(c)->comm && n && !fired) {
    /* abort, not destroy, after a failure: destroy may wait for peers */
    if (c->aborted || c->sticky != TECOMM_SUCCESS) (void)n->CommAbort(NL(c)->comm);
    else (void)n->CommDestroy(NL(c)->comm);
  }
  NL(c)->comm = NULL;
  if (!w) return;
  if (w->words) (void)tecore_mem_free_host(w->words);
  pthread_cond_destroy(&w->cv);
  pthread_mutex_destroy(&w->mu);
  free(w);
  NL(c)->watch = NULL;
}

/* Under w->mu: the watchdog's abort becomes the communicator's failure. */
static void w_fold(struct tecomm_comm *c) {
  struct tc_nccl_watch *w = NL(c)->watch;
  if (!w->fired || c->sticky != TECOMM_SUCCESS) return;
  c->sticky = TECOMM_ERR_TIMEOUT;
  c->sticky_peer = -1;
  snprintf(c->sticky_why, sizeof c->sticky_why, "%s", w->why);
}

void tc_nccl_health(struct tecomm_comm *c) {
  if (!NL(c)) return;
  struct tc_nccl_watch *w = NL(c)->watch;
  if (!w) return;
  pthread_mutex_lock(&w->mu);
  w_fold(c);
  const struct tc_nccl *n = tc_nccl_get(NULL);
  int ar = TC_NCCL_OK;
  if (c->sticky == TECOMM_SUCCESS && NL(c)->comm && n &&
      n->CommGetAsyncError(NL(c)->comm, &ar) == TC_NCCL_OK && ar != TC_NCCL_OK &&
      ar != TC_NCCL_IN_PROGRESS) {
    /* NCCL reports the communicator failed (a peer gone: ncclRemoteError):
     * aborted at once, which ends its kernels still waiting for that
     * peer so the streams drain */
    c->sticky = ar == TC_NCCL_REMOTE_ERROR ? TECOMM_ERR_TIMEOUT : TECOMM_ERR_DEVICE;
    c->sticky_peer = -1;
    snprintf(c->sticky_why, sizeof c->sticky_why,
             "NCCL reports error %d (%s); its communicator was aborted", ar, n->GetErrorString(ar));
    TC_WARN("tecomm: rank %d of %d: %s", c->rank, c->nranks, c->sticky_why);
    (void)n->CommAbort(NL(c)->comm);
    NL(c)->comm = NULL;
  }
  pthread_mutex_unlock(&w->mu);
}

void tc_nccl_abort(struct tecomm_comm *c) {
  if (!NL(c)) return;
  struct tc_nccl_watch *w = NL(c)->watch;
  const struct tc_nccl *n = tc_nccl_get(NULL);
  if (w) pthread_mutex_lock(&w->mu);
  if (NL(c)->comm && n && !(w && w->fired)) (void)n->CommAbort(NL(c)->comm);
  NL(c)->comm = NULL;
  if (w) pthread_mutex_unlock(&w->mu);
}

/* Under w->mu: the oldest call's state.  Returns 1 when it has run past
 * the timeout (the caller aborts). */
static int w_check(struct tc_nccl_watch *w, int64_t now) {
  while (w->count > 0) {
    unsigned i = w->head;
    struct tc_nccl_op *o = &w->ops[i];
    if (__atomic_load_n(&w->words[W_SLOTS + i], __ATOMIC_ACQUIRE) == o->seq) { /* ended */
      w->head = (w->head + 1) % W_SLOTS;
      w->count--;
      continue;
    }
    if (o->seen_ms == 0 && __atomic_load_n(&w->words[i], __ATOMIC_ACQUIRE) == o->seq)
      o->seen_ms = now;
    return o->seen_ms != 0 && now - o->seen_ms > tc_timeout_ms();
  }
  return 0;
}

static void *w_main(void *arg) {
  struct tc_nccl_watch *w = arg;
  pthread_mutex_lock(&w->mu);
  while (!w->stop && !w->fired) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += W_POLL_MS * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    (void)pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    if (w->stop || !w_check(w, tc_now_ms())) continue;
    struct tecomm_comm *c = w->c;
    const struct tc_nccl *n = tc_nccl_get(NULL);
    snprintf(w->why, sizeof w->why,
             "an NCCL allreduce ran %lld ms (TECOMM_TIMEOUT) without ending: a peer is gone or "
             "stuck; the watchdog aborted the NCCL communicator",
             (long long)tc_timeout_ms());
    TC_WARN("tecomm: rank %d of %d: %s", c->rank, c->nranks, w->why);
    if (n && NL(c)->comm) (void)n->CommAbort(NL(c)->comm);
    __atomic_store_n(&w->fired, 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

tecomm_result_t tc_nccl_lock(struct tecomm_comm *c, const char *fn) {
  struct tc_nccl_watch *w = NL(c) ? NL(c)->watch : NULL;
  if (!w) return TC_ERR(TECOMM_ERR_NOT_SUPPORTED, "%s: no NCCL communicator", fn);
  pthread_mutex_lock(&w->mu);
  w_fold(c);
  if (!NL(c)->comm || c->sticky != TECOMM_SUCCESS) {
    tecomm_result_t r = c->sticky != TECOMM_SUCCESS
                            ? TC_ERR(c->sticky, "%s: rank %d of %d: %s", fn, c->rank, c->nranks,
                                     c->sticky_why[0] ? c->sticky_why : "the communicator failed")
                            : TC_ERR(TECOMM_ERR_NOT_SUPPORTED, "%s: no NCCL communicator", fn);
    pthread_mutex_unlock(&w->mu);
    return r;
  }
  return TECOMM_SUCCESS;
}

void tc_nccl_unlock(struct tecomm_comm *c) { pthread_mutex_unlock(&NL(c)->watch->mu); }

/* Under tc_nccl_lock: a slot for a call on stream, its start written, or
 * NULL (captured, the ring full, the watchdog off, or no thread). */
struct tc_nccl_op *tc_nccl_watch_begin(struct tecomm_comm *c, tecore_stream_t stream) {
  struct tc_nccl_watch *w = NL(c)->watch;
  if (!tecore_tunable_int(&tc_tun_nccl_watch) || tc_capturing(stream)) return NULL;
  if (!w->words) {
    void *h = NULL;
    if (tecore_mem_alloc_host(2 * W_SLOTS * sizeof(uint64_t), &h) != TECORE_SUCCESS) return NULL;
    if (tecore_mem_host_device_ptr(h, &w->dwords) != TECORE_SUCCESS) {
      (void)tecore_mem_free_host(h);
      return NULL;
    }
    memset(h, 0, 2 * W_SLOTS * sizeof(uint64_t));
    w->words = h;
  }
  if (!w->started) {
    if (pthread_create(&w->thread, NULL, w_main, w) != 0) {
      TC_WARN("tecomm: rank %d: the NCCL watchdog thread did not start: NCCL calls unwatched",
              c->rank);
      return NULL;
    }
    w->started = 1;
  }
  if (w->count == W_SLOTS) return NULL;
  unsigned i = (w->head + w->count) % W_SLOTS;
  struct tc_nccl_op *o = &w->ops[i];
  o->seq = ++w->seq;
  o->seen_ms = 0;
  if (tecore_stream_write_value64(stream, w->dwords + i * sizeof(uint64_t), o->seq) !=
      TECORE_SUCCESS)
    return NULL;
  return o;
}

/* Under tc_nccl_lock, after the NCCL call: its end written, and the slot
 * watched (ok: the call was enqueued). */
void tc_nccl_watch_end(struct tecomm_comm *c, struct tc_nccl_op *o, tecore_stream_t stream,
                       int ok) {
  struct tc_nccl_watch *w = NL(c)->watch;
  if (!o || !ok) return;
  unsigned i = (unsigned)(o - w->ops);
  if (tecore_stream_write_value64(stream, w->dwords + (W_SLOTS + i) * sizeof(uint64_t), o->seq) !=
      TECORE_SUCCESS)
    return;
  w->count++;
}
