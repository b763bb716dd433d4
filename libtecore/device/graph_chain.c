/* SPDX-License-Identifier: Apache-2.0 */
/* graph_chain.c -- graph chains (tecore_graph_chain_*): executables queued
 * from the host with no driver call.
 *
 * Even a device launch (graph_device.c) costs the host one driver
 * submission a step, and on an H100 a submission right after a wait for
 * the device took 17-60 us where the same call back to back took 6
 * (te-bench --graph, bench/2026-11-25.md, session 20).  A chain takes the driver
 * out of the step: its launcher (a one-kernel graph, launched from the
 * host once) waits on the device for the host's next ticket in page-locked
 * memory and launches that executable and then itself as tail launches.
 * The host's queue is two stores and a fence; its wait polls one word.
 *
 * The protocol and the control block are in kernels/common/graph_chain.h;
 * the launcher is te_graph_chain (kernels/graph_fire.cu) on cuda and a
 * thread on vdev (vdev_chain.c).  Here: the host's side -- tickets, the
 * ring's bound, starting the launcher again when it ended on its timeout
 * (taking care of a ticket queued while it decided), the wait (which
 * also asks the stream for a device fault now and then, so that a dead
 * device is an error and not a hang), stop and destroy. */
#include "device/device_ops.h"
#include "device/graph_device.h"
#include "common/graph_chain.h"
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

TE_PARAM_INT(chain_timeout_ms, "TECORE_GRAPH_CHAIN_TIMEOUT_MS", 1000, 1, 3600000,
             "milliseconds a graph chain's launcher waits on the device for the next "
             "queued executable before it ends (the next tecore_graph_chain_queue starts it "
             "again with one host launch)")

struct tecore_graph_chain {
  struct te_chain_ctl *ctl;   /* page-locked host memory the device reaches */
  void *state;                /* the backend's launcher */
  tecore_stream_t stream;
  tecore_graph_exec_t exec[TE_CHAIN_MAX_EXECS];
  int n;
  int running;                /* started and not yet seen gone */
  uint64_t queued;            /* the last ticket queued */
  uint64_t starts;            /* host launches of the launcher */
  long creator;               /* getpid() of the process that made it */
};

_Static_assert(TECORE_GRAPH_CHAIN_MAX == TE_CHAIN_MAX_EXECS, "one limit");

static void fence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

/* A live chain of this process.  Only the pointer is compared with the
 * registry, so a destroyed chain is never read; a fork's copy is refused
 * since its launcher (a device graph, or a vdev thread) and its
 * page-locked ring stayed with the parent: a ticket queued there would
 * never run. */
static tecore_result_t chain_valid(const struct tecore_graph_chain *c, const char *fn) {
  TE_ARG(c, "%s: chain is NULL", fn);
  TE_ARG(te_handle_live(c), "%s: chain %p is not a live graph chain (destroyed, or not made by "
         "tecore_graph_chain_create)", fn, (const void *)c);
  long me = (long)getpid();
  TE_ARG(c->creator == me, "%s: chain was made by process %ld; process %ld (a fork of it) may "
         "not use it: its launcher and ring belong to the process that made it", fn, c->creator,
         me);
  return TECORE_SUCCESS;
}

/* A poller's pause: yields first, then sleeps from 1 us, doubling up to 64 us. */
struct poll {
  unsigned n;
  long ns;
};

static void poll_pause(struct poll *p) {
  if (++p->n < 64) {
    sched_yield();
    return;
  }
  if (p->ns < 1000) p->ns = 1000;
  struct timespec ts = {0, p->ns};
  nanosleep(&ts, NULL);
  if (p->ns < 50000) p->ns *= 2;
}

/* The launcher's failure as this call's error; TECORE_SUCCESS when it
 * has none (0, or it ended on its timeout). */
static tecore_result_t launcher_failed(const struct tecore_graph_chain *c, const char *fn) {
  uint32_t st = c->ctl->status;
  if (st == 0 || st == TE_CHAIN_TIMED_OUT) return TECORE_SUCCESS;
  if (st == TE_CHAIN_BAD_INDEX)
    return TE_ERR(TECORE_ERR_INTERNAL, "%s: chain %p's launcher read an executable index past "
                  "its %d", fn, (void *)c, c->n);
  if (st == 700)
    return TE_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "%s: chain %p: a graph it ran made an illegal "
                  "memory access (CUDA error 700); the chain queues nothing more", fn, (void *)c);
  return TE_ERR(TECORE_ERR_DRIVER, "%s: chain %p's launcher could not launch or run the next "
                "graph: CUDA error %u%s; the chain queues nothing more", fn, (void *)c, st,
                st == 1 ? " (invalid value: the executable not uploaded, or a launch of it "
                "still running)" : "");
}

/* Every few hundred polls: a device fault the stream reports. */
static tecore_result_t stream_fault(const struct te_device_ops *o, const struct tecore_graph_chain *c,
                                    const struct poll *p) {
  if (p->n % 256 != 255) return TECORE_SUCCESS;
  tecore_result_t q = o->stream_query(c->stream);
  return q == TECORE_ERR_NOT_READY ? TECORE_SUCCESS : q;
}

static tecore_result_t start(const struct te_device_ops *o, struct tecore_graph_chain *c,
                             const char *fn) {
  TE_CHECK(launcher_failed(c, fn));
  struct te_chain_ctl *x = c->ctl;
  x->ended = 0;
  x->gone = 0;
  x->status = 0;
  x->stop = 0;
  fence();
  TE_CHECK(o->graph_chain_start(c->state, c->stream));
  c->running = 1;
  c->starts++;
  return TECORE_SUCCESS;
}

/* Until the launcher is gone (stop set, or its timeout). */
static tecore_result_t wait_gone(const struct te_device_ops *o, struct tecore_graph_chain *c) {
  struct poll p = {0, 0};
  while (!c->ctl->gone) {
    TE_CHECK(stream_fault(o, c, &p));
    poll_pause(&p);
  }
  fence();
  return TECORE_SUCCESS;
}

static tecore_result_t stop(const struct te_device_ops *o, struct tecore_graph_chain *c,
                            const char *fn) {
  if (!c->running) return launcher_failed(c, fn);
  c->ctl->stop = 1;
  fence();
  tecore_result_t r = wait_gone(o, c);
  if (r == TECORE_SUCCESS) r = o->stream_synchronize(c->stream);
  c->running = 0;
  c->ctl->stop = 0;
  if (r != TECORE_SUCCESS) return r;
  TE_CHECK(launcher_failed(c, fn));
  if (c->ctl->done != c->queued)
    return TE_ERR(TECORE_ERR_INTERNAL, "%s: chain %p ended at ticket %llu of %llu", fn,
                  (void *)c, (unsigned long long)c->ctl->done, (unsigned long long)c->queued);
  return TECORE_SUCCESS;
}

static tecore_result_t wait_ticket(const struct te_device_ops *o, struct tecore_graph_chain *c,
                                   uint64_t t, const char *fn) {
  struct poll p = {0, 0};
  for (;;) {
    if (c->ctl->done >= t) break;
    TE_CHECK(launcher_failed(c, fn));
    if (c->ctl->gone && c->ctl->done < t && c->ctl->ran < t) {
      fence();
      /* a launcher that ended on a device fault: the stream says so once
       * it drains (the polls' query may not have seen it yet) */
      if (c->ctl->done < t) TE_CHECK(o->stream_synchronize(c->stream));
      TE_CHECK(launcher_failed(c, fn));
      if (c->ctl->done < t)
        return TE_ERR(TECORE_ERR_INTERNAL, "%s: chain %p's launcher ended before ticket %llu "
                      "ran", fn, (void *)c, (unsigned long long)t);
    }
    TE_CHECK(stream_fault(o, c, &p));
    poll_pause(&p);
  }
  fence();   /* the graph's writes before the caller's reads */
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_graph_chain_create(const tecore_graph_exec_t *execs, int count,
                                                    tecore_stream_t stream,
                                                    tecore_graph_chain_t *chain) {
  static const char fn[] = "tecore_graph_chain_create";
  TE_ARG(chain, "%s: chain is NULL", fn);
  TE_ARG(execs, "%s: execs is NULL", fn);
  TE_ARG(count >= 1 && count <= TECORE_GRAPH_CHAIN_MAX, "%s: count %d is not in [1, %d]", fn,
         count, TECORE_GRAPH_CHAIN_MAX);
  for (int i = 0; i < count; i++) {
    TE_ARG(execs[i], "%s: execs[%d] is NULL", fn, i);
    TE_ARG(te_graph_device_has(execs[i]), "%s: execs[%d] (%p) was not instantiated with "
           "TECORE_GRAPH_INSTANTIATE_DEVICE_LAUNCH", fn, i, (void *)execs[i]);
  }
  TE_ARG(stream, "%s: stream is NULL: the launcher would hold the legacy default stream and "
         "with it every blocking stream; give the chain a stream of its own", fn);
  const struct te_device_ops *o = NULL;
  TE_CHECK(te_ops_get(&o));
  tecore_capture_status_t cs = TECORE_CAPTURE_NONE;
  TE_CHECK(o->stream_capture_status(stream, &cs));
  if (cs != TECORE_CAPTURE_NONE)
    return TE_ERR(TECORE_ERR_CAPTURE, "%s: stream %p is capturing", fn, (void *)stream);
  struct tecore_graph_chain *c = calloc(1, sizeof *c);
  if (!c) return TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
  tecore_result_t r;
  void *h = NULL;
  TE_CHECK_GOTO(o->mem_alloc_host(sizeof *c->ctl, &h), r, fail);
  c->ctl = h;
  memset(h, 0, sizeof *c->ctl);
  c->stream = stream;
  c->n = count;
  c->ctl->nexec = (uint32_t)count;
  c->ctl->timeout_ns = (uint64_t)tecore_tunable_int(&chain_timeout_ms) * 1000000u;
  for (int i = 0; i < count; i++) {
    c->exec[i] = execs[i];
    c->ctl->exec[i] = (uint64_t)(uintptr_t)execs[i];
  }
  TE_CHECK_GOTO(o->graph_chain_prepare(c->ctl, stream, &c->state), r, fail);
  for (int i = 0; i < count; i++) {
    (void)te_graph_device_take_dirty(execs[i]);   /* prepare uploaded them */
    (void)te_graph_device_chain(execs[i], 1, fn);
  }
  c->creator = (long)getpid();
  if (te_handle_add(c) != 0) {
    r = TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
    (void)o->graph_chain_release(c->state);
    for (int i = 0; i < count; i++) (void)te_graph_device_chain(execs[i], -1, fn);
    goto fail;
  }
  *chain = c;
  return TECORE_SUCCESS;
fail:
  if (c->ctl) (void)o->mem_free_host(c->ctl);
  free(c);
  return r;
}

TE_EXPORT tecore_result_t tecore_graph_chain_queue(tecore_graph_chain_t c, int index,
                                                   uint64_t *ticket) {
  static const char fn[] = "tecore_graph_chain_queue";
  TE_CHECK(chain_valid(c, fn));
  TE_ARG(index >= 0 && index < c->n, "%s: index %d is not in [0, %d)", fn, index, c->n);
  const struct te_device_ops *o = NULL;
  TE_CHECK(te_ops_get(&o));
  TE_CHECK(launcher_failed(c, fn));
  const uint64_t t = c->queued + 1;
  /* at most RING - 1 tickets queued and not done */
  if (t - c->ctl->done >= TE_CHAIN_RING) TE_CHECK(wait_ticket(o, c, t - TE_CHAIN_RING + 1, fn));
  if (te_graph_device_take_dirty(c->exec[index])) {
    /* changed since its upload: the launcher must not run while it is
     * uploaded again */
    tecore_result_t r = stop(o, c, fn);
    if (r == TECORE_SUCCESS) r = o->graph_upload(c->exec[index], c->stream);
    if (r != TECORE_SUCCESS) {
      te_graph_device_dirty(c->exec[index]);
      return r;
    }
  }
  struct te_chain_ctl *x = c->ctl;
  x->which[t % TE_CHAIN_RING] = (uint32_t)index;
  fence();
  x->go = t;
  c->queued = t;
  fence();
  if (ticket) *ticket = t;
  if (!c->running) return start(o, c, fn);
  if (!x->ended) return TECORE_SUCCESS;   /* the launcher waits, or will read go */
  /* it is deciding to end: it takes the ticket (ended back to 0) or it is
   * gone without it (then it starts again) */
  struct poll p = {0, 0};
  for (;;) {
    if (!x->ended) return TECORE_SUCCESS;
    if (x->gone) {
      fence();
      if (x->ran >= t) return TECORE_SUCCESS;   /* it took it, then ended for good */
      TE_CHECK(o->stream_synchronize(c->stream));   /* the last launcher graph's end */
      c->running = 0;
      return start(o, c, fn);
    }
    TE_CHECK(stream_fault(o, c, &p));
    poll_pause(&p);
  }
}

TE_EXPORT tecore_result_t tecore_graph_chain_wait(tecore_graph_chain_t c, uint64_t ticket) {
  static const char fn[] = "tecore_graph_chain_wait";
  TE_CHECK(chain_valid(c, fn));
  TE_ARG(ticket >= 1 && ticket <= c->queued, "%s: ticket %llu was not queued (the last is %llu)",
         fn, (unsigned long long)ticket, (unsigned long long)c->queued);
  const struct te_device_ops *o = NULL;
  TE_CHECK(te_ops_get(&o));
  return wait_ticket(o, c, ticket, fn);
}

TE_EXPORT tecore_result_t tecore_graph_chain_stop(tecore_graph_chain_t c) {
  TE_CHECK(chain_valid(c, "tecore_graph_chain_stop"));
  const struct te_device_ops *o = NULL;
  TE_CHECK(te_ops_get(&o));
  return stop(o, c, "tecore_graph_chain_stop");
}

TE_EXPORT tecore_result_t tecore_graph_chain_destroy(tecore_graph_chain_t c) {
  static const char fn[] = "tecore_graph_chain_destroy";
  if (!c) return TECORE_SUCCESS;
  TE_CHECK(chain_valid(c, fn));
  const struct te_device_ops *o = NULL;
  TE_CHECK(te_ops_get(&o));
  te_handle_del(c);
  tecore_result_t r = stop(o, c, fn), q;
  if ((q = o->graph_chain_release(c->state)) != TECORE_SUCCESS && r == TECORE_SUCCESS) r = q;
  for (int i = 0; i < c->n; i++) (void)te_graph_device_chain(c->exec[i], -1, fn);
  if ((q = o->mem_free_host(c->ctl)) != TECORE_SUCCESS && r == TECORE_SUCCESS) r = q;
  free(c);
  return r;
}

TE_EXPORT tecore_result_t tecore_graph_chain_stats(tecore_graph_chain_t c,
                                                   struct tecore_graph_chain_counts *stats) {
  TE_CHECK(chain_valid(c, "tecore_graph_chain_stats"));
  TE_ARG(stats, "tecore_graph_chain_stats: stats is NULL");
  stats->queued = c->queued;
  stats->done = c->ctl->done;
  stats->starts = c->starts;
  stats->runs = c->ctl->runs;
  return TECORE_SUCCESS;
}
