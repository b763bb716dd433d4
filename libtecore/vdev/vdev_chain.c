/* SPDX-License-Identifier: Apache-2.0 */
/* vdev_chain.c -- vdev's twin of a graph chain's launcher (te_graph_chain,
 * kernels/graph_fire.cu; the protocol: kernels/common/graph_chain.h).
 *
 * A thread plays the launcher, one loop turn per launcher run, on the same
 * control block with the same reads, writes and fences: it writes done,
 * waits for go (or stop, or the timeout) with the same "ended, read go
 * once more, then gone" exit, launches the ticket's executable on the
 * chain's stream and waits for it (on cuda the next run starts when the
 * tail-launched graph ended).  The stream is not held between tickets as
 * the cuda launcher holds it: work queued on it while the chain runs would
 * run between tickets here and after the chain there (tecore_graph_chain
 * says to queue none). */
#include "vdev/vdev.h"
#include "common/graph_chain.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct vdev_chain {
  struct te_chain_ctl *ctl;
  tecore_stream_t stream;
  pthread_t thread;
  int joinable;
};

static void chain_sleep(long *ns) {
  struct timespec ts = {0, *ns};
  nanosleep(&ts, NULL);
  if (*ns < 100000) *ns *= 2;
}

/* One launcher run's wait: 1 to go on (a ticket is queued), 0 to end. */
static int chain_wait_ticket(struct te_chain_ctl *c, uint64_t r) {
  const uint64_t t0 = te_now_ns();
  long ns = 1000;
  for (;;) {
    if (c->go > r) return 1;
    if (c->stop || te_now_ns() - t0 > c->timeout_ns || atomic_load(&te_vdev_exiting)) {
      c->ended = 1;
      __atomic_thread_fence(__ATOMIC_SEQ_CST);
      if (c->go > r) {   /* queued while we decided: take it */
        c->ended = 0;
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        return 1;
      }
      if (!c->stop) c->status = TE_CHAIN_TIMED_OUT;
      return 0;
    }
    chain_sleep(&ns);
  }
}

static void *chain_thread(void *arg) {
  struct vdev_chain *v = arg;
  struct te_chain_ctl *c = v->ctl;
  for (;;) {
    const uint64_t r = c->ran;
    c->runs = c->runs + 1;
    if (r) {
      __atomic_thread_fence(__ATOMIC_SEQ_CST);
      c->done = r;
    }
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (!chain_wait_ticket(c, r)) break;
    const uint64_t t = r + 1;
    const uint32_t w = c->which[t % TE_CHAIN_RING];
    tecore_result_t res = TECORE_SUCCESS;
    if (w >= c->nexec) {
      c->status = TE_CHAIN_BAD_INDEX;
    } else {
      res = te_vdev_graph_launch((tecore_graph_exec_t)(uintptr_t)c->exec[w], v->stream);
      if (res == TECORE_SUCCESS) res = te_vdev_stream_synchronize(v->stream);
      /* the CUDA error the stream's would be: an illegal address (700) or unknown */
      if (res != TECORE_SUCCESS) c->status = res == TECORE_ERR_ILLEGAL_ADDRESS ? 700 : 999;
    }
    if (c->status) {
      c->ended = 1;
      break;
    }
    c->ran = t;
  }
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  c->gone = 1;
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  return NULL;
}

static void chain_join(struct vdev_chain *v) {
  if (!v->joinable) return;
  pthread_join(v->thread, NULL);
  v->joinable = 0;
}

tecore_result_t te_vdev_graph_chain_prepare(struct te_chain_ctl *ctl, tecore_stream_t stream,
                                            void **state) {
  struct vdev_chain *v = calloc(1, sizeof *v);
  if (!v) return TE_ERR(TECORE_ERR_NOMEM, "graph chain: out of host memory");
  v->ctl = ctl;
  v->stream = stream;
  *state = v;
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_graph_chain_start(void *state, tecore_stream_t stream) {
  struct vdev_chain *v = state;
  if (!v) return TE_ERR(TECORE_ERR_INTERNAL, "graph chain: no launcher");
  chain_join(v);   /* the last launcher wrote gone: it is ending or ended */
  v->stream = stream;
  int e = pthread_create(&v->thread, NULL, chain_thread, v);
  if (e) return TE_ERR(TECORE_ERR_SYSTEM, "graph chain: pthread_create: %s", strerror(e));
  v->joinable = 1;
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_graph_chain_release(void *state) {
  struct vdev_chain *v = state;
  if (!v) return TECORE_SUCCESS;
  chain_join(v);
  free(v);
  return TECORE_SUCCESS;
}
