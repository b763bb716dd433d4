/* SPDX-License-Identifier: Apache-2.0 */
/* vdev_stream.c -- vdev streams: one worker thread per stream running its
 * queue in order, the legacy default stream of each context with the
 * driver's implicit synchronization, and create / destroy / synchronize /
 * query / priority.
 *
 * Positions.  Each stream counts the ops pushed (enqueued) and finished
 * (completed); "stream t has reached position p" means completed >= p.
 * The legacy stream's implicit synchronization is a BARRIER op holding
 * (stream, position) pairs: an op on the legacy stream first waits for
 * every blocking stream of its context to reach the position it had when
 * the op was submitted, and an op on a blocking stream first waits for the
 * legacy stream likewise.  Positions are read when the op is submitted, so
 * two barriers can never wait on each other. */
#include "vdev/vdev.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VDEV_PRIORITY_LEAST 0
#define VDEV_PRIORITY_GREATEST (-5)

int te_vdev_stream_is_blocking(const struct vdev_stream *s) {
  return !s->legacy && !(s->flags & TECORE_STREAM_NON_BLOCKING);
}

static void stream_free(struct vdev_obj *o) {
  struct vdev_stream *s = (struct vdev_stream *)o;
  /* the worker was joined (or never started); nothing should be queued */
  while (s->head) {
    struct vdev_work *w = s->head;
    s->head = w->next;
    te_vdev_op_release(&w->op);
    free(w);
  }
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->work_cv);
  pthread_cond_destroy(&s->done_cv);
  te_vdev_deps_free(&s->frontier);
  te_vdev_obj_free_memory(s);
}

static void *stream_worker(void *arg) {
  struct vdev_stream *s = arg;
  pthread_mutex_lock(&s->lock);
  for (;;) {
    while (!s->head && !s->stop) pthread_cond_wait(&s->work_cv, &s->lock);
    struct vdev_work *w = s->head;
    if (!w) break; /* stopping and drained: no queued work is ever lost */
    s->head = w->next;
    if (!s->head) s->tail = NULL;
    pthread_mutex_unlock(&s->lock);

    tecore_result_t r = te_vdev_op_run(s, &w->op);
    te_vdev_op_release(&w->op);
    free(w);

    pthread_mutex_lock(&s->lock);
    if (r != TECORE_SUCCESS && s->sticky == TECORE_SUCCESS) {
      s->sticky = r;
      snprintf(s->sticky_msg, sizeof s->sticky_msg, "an earlier operation failed: %s",
               tecore_strerror(r));
    }
    s->completed++;
    pthread_cond_broadcast(&s->done_cv);
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

static tecore_result_t stream_new(struct vdev_ctx *ctx, unsigned flags, int priority, int legacy,
                                  struct vdev_stream **out) {
  struct vdev_stream *s = calloc(1, sizeof *s);
  if (!s) return TE_ERR(TECORE_ERR_NOMEM, "vdev stream_create: out of host memory");
  te_vdev_obj_init(&s->obj, VDEV_KIND_STREAM, stream_free);
  s->ctx = ctx;
  s->flags = flags;
  s->priority = priority;
  s->legacy = legacy;
  s->gen = atomic_load(&te_vdev_fork_gen);
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->work_cv, NULL);
  pthread_cond_init(&s->done_cv, NULL);
  int rc = pthread_create(&s->thread, NULL, stream_worker, s);
  if (rc != 0) {
    stream_free(&s->obj);
    errno = rc;
    return TE_ERR(TECORE_ERR_SYSTEM, "vdev stream_create: pthread_create failed (%s)",
                  strerror(rc));
  }
  *out = s;
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_stream_get(tecore_stream_t h, struct vdev_stream **out, const char *fn) {
  if (!h) {
    struct vdev_ctx *ctx = te_vdev_ctx_current();
    tecore_result_t r = TECORE_SUCCESS;
    pthread_mutex_lock(&ctx->lock);
    if (!ctx->legacy) r = stream_new(ctx, 0, 0, 1, &ctx->legacy);
    if (r == TECORE_SUCCESS) te_vdev_obj_ref(&ctx->legacy->obj);
    *out = ctx->legacy;
    pthread_mutex_unlock(&ctx->lock);
    return r;
  }
  struct vdev_obj *o = te_vdev_obj_get(h, VDEV_KIND_STREAM);
  if (!o)
    return TE_ERR(TECORE_ERR_INVALID, "%s: stream %p is not a live vdev stream (destroyed?)", fn,
                  (void *)h);
  struct vdev_stream *s = (struct vdev_stream *)o;
  if (s->gen != atomic_load(&te_vdev_fork_gen)) {
    te_vdev_obj_unref(o);
    return TE_ERR(TECORE_ERR_INVALID,
                  "%s: stream %p was created before this process forked; its worker is gone", fn,
                  (void *)h);
  }
  *out = s;
  return TECORE_SUCCESS;
}

void te_vdev_stream_put(struct vdev_stream *s) {
  if (s) te_vdev_obj_unref(&s->obj);
}

/* Adds (t, t's current position) to a barrier op when t has pending work. */
static int barrier_add(struct vdev_op *op, size_t *cap, struct vdev_stream *t) {
  pthread_mutex_lock(&t->lock);
  uint64_t pos = t->enqueued;
  int pending = t->completed < pos;
  pthread_mutex_unlock(&t->lock);
  if (!pending) return 0;
  if (op->u.barrier.n == *cap) {
    size_t ncap = *cap ? *cap * 2 : 4;
    struct vdev_stream **ns = realloc(op->u.barrier.streams, ncap * sizeof *ns);
    if (!ns) return -1;
    op->u.barrier.streams = ns;
    uint64_t *np = realloc(op->u.barrier.pos, ncap * sizeof *np);
    if (!np) return -1;
    op->u.barrier.pos = np;
    *cap = ncap;
  }
  te_vdev_obj_ref(&t->obj);
  op->u.barrier.streams[op->u.barrier.n] = t;
  op->u.barrier.pos[op->u.barrier.n] = pos;
  op->u.barrier.n++;
  return 0;
}

/* The implicit synchronization an op submitted to s needs now, as a
 * BARRIER op (type EMPTY when none is needed). */
static tecore_result_t implicit_barrier(struct vdev_stream *s, struct vdev_op *op) {
  memset(op, 0, sizeof *op);
  op->type = VDEV_OP_BARRIER;
  size_t cap = 0;
  int rc = 0;
  if (s->legacy || te_vdev_stream_is_blocking(s)) {
    struct vdev_ctx *ctx = s->ctx;
    pthread_mutex_lock(&ctx->lock);
    if (s->legacy) {
      for (size_t i = 0; i < ctx->nstreams && rc == 0; i++)
        if (te_vdev_stream_is_blocking(ctx->streams[i]))
          rc = barrier_add(op, &cap, ctx->streams[i]);
    } else if (ctx->legacy) {
      rc = barrier_add(op, &cap, ctx->legacy);
    }
    pthread_mutex_unlock(&ctx->lock);
  }
  if (rc != 0) {
    te_vdev_op_release(op);
    return TE_ERR(TECORE_ERR_NOMEM, "vdev: out of host memory queueing an operation");
  }
  if (op->u.barrier.n == 0) te_vdev_op_release(op); /* nothing to wait for: EMPTY */
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_stream_enqueue(struct vdev_stream *s, struct vdev_op *op) {
  struct vdev_work *w = malloc(sizeof *w), *bw = NULL;
  struct vdev_op barrier;
  tecore_result_t r = TECORE_SUCCESS;
  if (!w) {
    r = TE_ERR(TECORE_ERR_NOMEM, "vdev: out of host memory queueing an operation");
    goto fail;
  }
  TE_CHECK_GOTO(implicit_barrier(s, &barrier), r, fail);
  if (barrier.type == VDEV_OP_BARRIER) {
    bw = malloc(sizeof *bw);
    if (!bw) {
      te_vdev_op_release(&barrier);
      r = TE_ERR(TECORE_ERR_NOMEM, "vdev: out of host memory queueing an operation");
      goto fail;
    }
    bw->op = barrier;
    bw->next = w;
  }
  w->op = *op;
  w->next = NULL;
  struct vdev_work *first = bw ? bw : w;
  pthread_mutex_lock(&s->lock);
  if (s->stop) { /* destroyed under our feet by another thread */
    pthread_mutex_unlock(&s->lock);
    if (bw) {
      te_vdev_op_release(&bw->op);
      free(bw);
    }
    free(w);
    w = NULL;
    r = TE_ERR(TECORE_ERR_INVALID, "vdev: stream %p is being destroyed", (void *)s);
    goto fail;
  }
  if (s->tail) s->tail->next = first;
  else s->head = first;
  s->tail = w;
  s->enqueued += bw ? 2 : 1;
  pthread_cond_signal(&s->work_cv);
  pthread_mutex_unlock(&s->lock);
  return TECORE_SUCCESS;
fail:
  free(w);
  te_vdev_op_release(op);
  return r;
}

tecore_result_t te_vdev_submit(tecore_stream_t h, struct vdev_op *op, const char *fn) {
  struct vdev_stream *s = NULL;
  tecore_result_t r = te_vdev_stream_get(h, &s, fn);
  if (r != TECORE_SUCCESS) {
    te_vdev_op_release(op);
    return r;
  }
  pthread_mutex_lock(&te_vdev_cap_lock);
  /* eager work is checked now; a captured node when its graph launches */
  if (!s->cap) r = te_vdev_check_op(s, op, fn);
  if (r == TECORE_SUCCESS && s->legacy) r = te_vdev_capture_legacy_use_locked(s->ctx, fn);
  if (r == TECORE_SUCCESS && s->cap) {
    r = te_vdev_capture_add_locked(s, op, fn);
    pthread_mutex_unlock(&te_vdev_cap_lock);
    te_vdev_stream_put(s);
    return r;
  }
  pthread_mutex_unlock(&te_vdev_cap_lock);
  if (r == TECORE_SUCCESS) r = te_vdev_stream_enqueue(s, op);
  else te_vdev_op_release(op);
  te_vdev_stream_put(s);
  return r;
}

tecore_result_t te_vdev_capture_or_enqueue(struct vdev_stream *s,
                                           const struct vdev_submit_steps *steps, void *arg,
                                           const char *fn) {
  tecore_result_t r = TECORE_SUCCESS;
  int taken = 0;
  pthread_mutex_lock(&te_vdev_cap_lock);
  if (s->legacy) r = te_vdev_capture_legacy_use_locked(s->ctx, fn);
  if (r == TECORE_SUCCESS && s->cap) {
    taken = 1;
    r = steps->capture(s, arg, fn);
  } else if (r == TECORE_SUCCESS && steps->idle) {
    r = steps->idle(s, arg, &taken, fn);
  }
  pthread_mutex_unlock(&te_vdev_cap_lock);
  if (r == TECORE_SUCCESS && !taken) r = steps->enqueue(s, arg, fn);
  return r;
}

tecore_result_t te_vdev_pending_work(struct vdev_op *op) {
  memset(op, 0, sizeof *op);
  op->type = VDEV_OP_BARRIER;
  size_t cap = 0;
  int rc = 0;
  for (int d = 0; rc == 0 && d < te_vdev_ndevices(); d++) {
    struct vdev_ctx *ctx = te_vdev_ctx_at(d);
    pthread_mutex_lock(&ctx->lock);
    for (size_t i = 0; i < ctx->nstreams && rc == 0; i++) rc = barrier_add(op, &cap, ctx->streams[i]);
    if (rc == 0 && ctx->legacy) rc = barrier_add(op, &cap, ctx->legacy);
    pthread_mutex_unlock(&ctx->lock);
  }
  if (rc != 0) {
    te_vdev_op_release(op);
    return TE_ERR(TECORE_ERR_NOMEM, "vdev: out of host memory");
  }
  if (op->u.barrier.n == 0) te_vdev_op_release(op);
  return TECORE_SUCCESS;
}

/* ---- public stream ops ------------------------------------------------------ */

tecore_result_t te_vdev_stream_priority_range(int *least, int *greatest) {
  *least = VDEV_PRIORITY_LEAST;
  *greatest = VDEV_PRIORITY_GREATEST;
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_stream_create(unsigned flags, int priority, tecore_stream_t *stream) {
  if (flags & ~TECORE_STREAM_NON_BLOCKING)
    return TE_ERR(TECORE_ERR_INVALID, "vdev stream_create: unknown flags 0x%x", flags);
  /* the driver clamps priorities into the range */
  if (priority > VDEV_PRIORITY_LEAST) priority = VDEV_PRIORITY_LEAST;
  if (priority < VDEV_PRIORITY_GREATEST) priority = VDEV_PRIORITY_GREATEST;
  struct vdev_ctx *ctx = te_vdev_ctx_current();
  struct vdev_stream *s = NULL;
  TE_CHECK(stream_new(ctx, flags, priority, 0, &s));
  if (te_vdev_obj_register(&s->obj) != TECORE_SUCCESS) goto nomem;
  pthread_mutex_lock(&ctx->lock);
  if (ctx->nstreams == ctx->cap) {
    size_t ncap = ctx->cap ? ctx->cap * 2 : 16;
    struct vdev_stream **ns = realloc(ctx->streams, ncap * sizeof *ns);
    if (!ns) {
      pthread_mutex_unlock(&ctx->lock);
      te_vdev_obj_unregister(&s->obj);
      goto nomem;
    }
    ctx->streams = ns;
    ctx->cap = ncap;
  }
  ctx->streams[ctx->nstreams++] = s;
  pthread_mutex_unlock(&ctx->lock);
  *stream = (tecore_stream_t)(void *)s;
  return TECORE_SUCCESS;
nomem:
  pthread_mutex_lock(&s->lock);
  s->stop = 1;
  pthread_cond_signal(&s->work_cv);
  pthread_mutex_unlock(&s->lock);
  pthread_join(s->thread, NULL);
  te_vdev_obj_unref(&s->obj);
  return TE_ERR(TECORE_ERR_NOMEM, "vdev stream_create: out of host memory");
}

/* Waits for the queued work of the stream to finish; unlike the driver,
 * which may return at once and release later, this lets the worker drain
 * the queue (so no work is lost) and joins it.  A wait_value the stream is
 * blocked in (or reaches later) fails at once instead of holding the
 * destroy for TECORE_VDEV_WAIT_TIMEOUT: nobody could see it succeed. */
tecore_result_t te_vdev_stream_destroy(tecore_stream_t h) {
  struct vdev_stream *s = NULL;
  TE_CHECK(te_vdev_stream_get(h, &s, "vdev stream_destroy"));
  if (s->legacy) {
    te_vdev_stream_put(s);
    return TE_ERR(TECORE_ERR_INVALID,
                  "vdev stream_destroy: the default stream cannot be destroyed");
  }
  if (!te_vdev_obj_unregister(&s->obj)) { /* another thread destroyed it first */
    te_vdev_stream_put(s);
    return TE_ERR(TECORE_ERR_INVALID, "vdev stream_destroy: stream %p is already destroyed",
                  (void *)h);
  }
  te_vdev_capture_stream_gone(s);
  struct vdev_ctx *ctx = s->ctx;
  pthread_mutex_lock(&ctx->lock);
  for (size_t i = 0; i < ctx->nstreams; i++)
    if (ctx->streams[i] == s) {
      ctx->streams[i] = ctx->streams[--ctx->nstreams];
      break;
    }
  pthread_mutex_unlock(&ctx->lock);
  pthread_mutex_lock(&s->lock);
  __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE); /* a pending wait_value fails now */
  pthread_cond_signal(&s->work_cv);
  pthread_mutex_unlock(&s->lock);
  if (pthread_equal(pthread_self(), s->thread)) pthread_detach(s->thread); /* from its own kernel */
  else pthread_join(s->thread, NULL);
  te_vdev_stream_put(s);           /* ours */
  te_vdev_obj_unref(&s->obj);      /* the creator's */
  return TECORE_SUCCESS;
}

/* tecore_fini: stops s after its queued work (a pending stream wait fails),
 * joins its worker and drops the reference its owner held (the creator's,
 * or the context's for a legacy stream); registered: s is a public handle
 * to take out of the registry first. */
static void stream_shutdown(struct vdev_stream *s, int registered) {
  if (registered && !te_vdev_obj_unregister(&s->obj)) return;
  te_vdev_capture_stream_gone(s);
  pthread_mutex_lock(&s->lock);
  __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
  pthread_cond_signal(&s->work_cv);
  pthread_mutex_unlock(&s->lock);
  pthread_join(s->thread, NULL);
  te_vdev_obj_unref(&s->obj);
}

void te_vdev_streams_fini(void) {
  for (int d = 0; d < te_vdev_ndevices(); d++) {
    struct vdev_ctx *ctx = te_vdev_ctx_at(d);
    pthread_mutex_lock(&ctx->lock);
    struct vdev_stream **list = ctx->streams, *legacy = ctx->legacy;
    size_t n = ctx->nstreams;
    ctx->streams = NULL;
    ctx->nstreams = ctx->cap = 0;
    ctx->legacy = NULL;
    pthread_mutex_unlock(&ctx->lock);
    for (size_t i = 0; i < n; i++) stream_shutdown(list[i], 1);
    if (legacy) stream_shutdown(legacy, 0);
    free(list);
  }
}

/* Waits until s has run everything queued before the call. */
static void stream_wait_drained(struct vdev_stream *s) {
  pthread_mutex_lock(&s->lock);
  uint64_t target = s->enqueued;
  while (s->completed < target && !atomic_load(&te_vdev_exiting))
    pthread_cond_wait(&s->done_cv, &s->lock);
  pthread_mutex_unlock(&s->lock);
}

static tecore_result_t stream_sticky(struct vdev_stream *s, const char *fn) {
  pthread_mutex_lock(&s->lock);
  tecore_result_t r = s->sticky;
  char msg[sizeof s->sticky_msg];
  memcpy(msg, s->sticky_msg, sizeof msg);
  pthread_mutex_unlock(&s->lock);
  if (r != TECORE_SUCCESS) return TE_ERR(r, "%s: stream %p: %s", fn, (void *)s, msg);
  return TECORE_SUCCESS;
}

/* Capture rules shared by synchronize and query: querying or waiting for a
 * capturing stream is illegal and invalidates its capture (as on the
 * driver); the legacy stream may not be used while a capture includes a
 * blocking stream of its context. */
static tecore_result_t sync_capture_check(struct vdev_stream *s, const char *fn) {
  tecore_result_t r = TECORE_SUCCESS;
  pthread_mutex_lock(&te_vdev_cap_lock);
  if (s->legacy) {
    r = te_vdev_capture_legacy_use_locked(s->ctx, fn);
  } else if (s->cap) {
    te_vdev_capture_invalidate_locked(s->cap, fn);
    r = TE_ERR(TECORE_ERR_CAPTURE, "%s: stream %p is capturing (the capture is now invalidated)",
               fn, (void *)s);
  }
  pthread_mutex_unlock(&te_vdev_cap_lock);
  return r;
}

/* Snapshot of the blocking streams of the legacy stream's context with
 * their positions (what a legacy-stream synchronize must also wait for). */
static tecore_result_t legacy_peers(struct vdev_stream *legacy, struct vdev_op *op) {
  memset(op, 0, sizeof *op);
  op->type = VDEV_OP_BARRIER;
  size_t cap = 0;
  int rc = 0;
  pthread_mutex_lock(&legacy->ctx->lock);
  for (size_t i = 0; i < legacy->ctx->nstreams && rc == 0; i++)
    if (te_vdev_stream_is_blocking(legacy->ctx->streams[i]))
      rc = barrier_add(op, &cap, legacy->ctx->streams[i]);
  pthread_mutex_unlock(&legacy->ctx->lock);
  if (rc != 0) {
    te_vdev_op_release(op);
    return TE_ERR(TECORE_ERR_NOMEM, "vdev: out of host memory");
  }
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_stream_synchronize(tecore_stream_t h) {
  struct vdev_stream *s = NULL;
  TE_CHECK(te_vdev_stream_get(h, &s, "vdev stream_synchronize"));
  tecore_result_t r = sync_capture_check(s, "vdev stream_synchronize");
  if (r == TECORE_SUCCESS && s->legacy) {
    /* the legacy stream synchronizes with every blocking stream */
    struct vdev_op peers;
    r = legacy_peers(s, &peers);
    if (r == TECORE_SUCCESS) {
      te_vdev_op_run(s, &peers);
      te_vdev_op_release(&peers);
    }
  }
  if (r == TECORE_SUCCESS) {
    stream_wait_drained(s);
    r = stream_sticky(s, "vdev stream_synchronize");
  }
  if (r == TECORE_SUCCESS) r = te_vdev_memcheck_sync(s, "vdev stream_synchronize");
  te_vdev_stream_put(s);
  te_vdev_mem_reap(); /* frees that waited for this work */
  return r;
}

static int stream_idle(struct vdev_stream *s) {
  pthread_mutex_lock(&s->lock);
  int idle = s->completed >= s->enqueued;
  pthread_mutex_unlock(&s->lock);
  return idle;
}

tecore_result_t te_vdev_stream_query(tecore_stream_t h) {
  struct vdev_stream *s = NULL;
  TE_CHECK(te_vdev_stream_get(h, &s, "vdev stream_query"));
  tecore_result_t r = sync_capture_check(s, "vdev stream_query");
  if (r == TECORE_SUCCESS) r = stream_sticky(s, "vdev stream_query");
  if (r == TECORE_SUCCESS) {
    int idle = stream_idle(s);
    if (idle && s->legacy) {
      pthread_mutex_lock(&s->ctx->lock);
      for (size_t i = 0; i < s->ctx->nstreams && idle; i++)
        if (te_vdev_stream_is_blocking(s->ctx->streams[i])) idle = stream_idle(s->ctx->streams[i]);
      pthread_mutex_unlock(&s->ctx->lock);
    }
    if (!idle) r = TECORE_ERR_NOT_READY; /* a normal answer: no error detail */
  }
  te_vdev_stream_put(s);
  return r;
}

tecore_result_t te_vdev_stream_get_priority(tecore_stream_t h, int *priority) {
  struct vdev_stream *s = NULL;
  TE_CHECK(te_vdev_stream_get(h, &s, "vdev stream_get_priority"));
  *priority = s->priority;
  te_vdev_stream_put(s);
  return TECORE_SUCCESS;
}

/* Waits for every stream of ctx; returns the first sticky failure. */
tecore_result_t te_vdev_ctx_drain(struct vdev_ctx *ctx) {
  pthread_mutex_lock(&ctx->lock);
  size_t n = ctx->nstreams + (ctx->legacy ? 1 : 0);
  struct vdev_stream **all = n ? malloc(n * sizeof *all) : NULL;
  if (n && !all) {
    pthread_mutex_unlock(&ctx->lock);
    return TE_ERR(TECORE_ERR_NOMEM, "vdev ctx_synchronize: out of host memory");
  }
  for (size_t i = 0; i < ctx->nstreams; i++) all[i] = ctx->streams[i];
  if (ctx->legacy) all[n - 1] = ctx->legacy;
  for (size_t i = 0; i < n; i++) te_vdev_obj_ref(&all[i]->obj);
  pthread_mutex_unlock(&ctx->lock);
  tecore_result_t r = TECORE_SUCCESS;
  for (size_t i = 0; i < n; i++) {
    stream_wait_drained(all[i]);
    tecore_result_t ri = stream_sticky(all[i], "vdev ctx_synchronize");
    if (r == TECORE_SUCCESS) r = ri;
    te_vdev_stream_put(all[i]);
  }
  free(all);
  te_vdev_mem_reap(); /* frees that waited for this work */
  if (r == TECORE_SUCCESS) r = te_vdev_memcheck_sync(NULL, "vdev ctx_synchronize");
  return r;
}
