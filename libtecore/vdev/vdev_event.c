/* SPDX-License-Identifier: Apache-2.0 */
/* vdev_event.c -- vdev events: record (a completion marker queued on the
 * stream, or, in a capturing stream, the stream's capture frontier),
 * stream_wait_event (a wait on that marker, or joining the capture),
 * query, synchronize, elapsed time, create and destroy.
 *
 * An event never recorded counts as complete (the driver's "empty set of
 * work").  Recording inside a capture replaces the event's state with a
 * capture point: until that capture ends, querying or synchronizing it is
 * illegal; after, the event holds no work (complete). */
#include "vdev/vdev.h"
#include <stdlib.h>

static void event_free(struct vdev_obj *o) {
  struct vdev_event *e = (struct vdev_event *)o;
  te_vdev_marker_unref(e->marker);
  if (e->cap) te_vdev_capture_unref(e->cap);
  te_vdev_deps_free(&e->cap_deps);
  pthread_mutex_destroy(&e->lock);
  te_vdev_obj_free_memory(e);
}

static tecore_result_t event_get(tecore_event_t h, struct vdev_event **e, const char *fn) {
  struct vdev_obj *o = te_vdev_obj_get(h, VDEV_KIND_EVENT);
  if (!o)
    return TE_ERR(TECORE_ERR_INVALID, "%s: event %p is not a live vdev event (destroyed?)", fn,
                  (void *)h);
  *e = (struct vdev_event *)o;
  return TECORE_SUCCESS;
}

static void event_put(struct vdev_event *e) {
  if (e) te_vdev_obj_unref(&e->obj);
}

struct vdev_marker *te_vdev_event_marker(struct vdev_event *e) {
  pthread_mutex_lock(&e->lock);
  struct vdev_marker *m = e->marker;
  if (m) te_vdev_marker_ref(m);
  pthread_mutex_unlock(&e->lock);
  return m;
}

void te_vdev_event_set_marker(struct vdev_event *e, struct vdev_marker *m) {
  if (m) te_vdev_marker_ref(m);
  pthread_mutex_lock(&e->lock);
  struct vdev_marker *old = e->marker;
  e->marker = m;
  pthread_mutex_unlock(&e->lock);
  te_vdev_marker_unref(old);
}

/* The live capture the event was last recorded in, or NULL (cap lock held). */
static struct vdev_capture *event_capture_locked(struct vdev_event *e) {
  return e->cap && e->cap->status != VDEV_CAP_ENDED ? e->cap : NULL;
}

tecore_result_t te_vdev_event_create(unsigned flags, tecore_event_t *event) {
  if (flags & ~(TECORE_EVENT_BLOCKING_SYNC | TECORE_EVENT_DISABLE_TIMING))
    return TE_ERR(TECORE_ERR_INVALID, "vdev event_create: unknown flags 0x%x", flags);
  struct vdev_event *e = calloc(1, sizeof *e);
  if (!e) return TE_ERR(TECORE_ERR_NOMEM, "vdev event_create: out of host memory");
  te_vdev_obj_init(&e->obj, VDEV_KIND_EVENT, event_free);
  e->flags = flags;
  pthread_mutex_init(&e->lock, NULL);
  tecore_result_t r = te_vdev_obj_register(&e->obj);
  if (r != TECORE_SUCCESS) {
    event_free(&e->obj);
    return r;
  }
  *event = (tecore_event_t)(void *)e;
  return TECORE_SUCCESS;
}

/* Waits already queued on the event keep their own reference to its
 * marker, so destroying an event with pending work is fine (as on the
 * driver). */
tecore_result_t te_vdev_event_destroy(tecore_event_t h) {
  struct vdev_event *e = NULL;
  TE_CHECK(event_get(h, &e, "vdev event_destroy"));
  int was = te_vdev_obj_unregister(&e->obj);
  event_put(e);
  if (!was)
    return TE_ERR(TECORE_ERR_INVALID, "vdev event_destroy: event %p is already destroyed",
                  (void *)h);
  te_vdev_obj_unref(&e->obj);
  return TECORE_SUCCESS;
}

/* event_record's steps (te_vdev_capture_or_enqueue).  In a capture: a
 * capture point, no node (the driver's default record), only the
 * dependencies a later stream_wait_event will take. */
static tecore_result_t record_capture(struct vdev_stream *s, void *arg, const char *fn) {
  struct vdev_event *e = arg;
  if (s->cap->status == VDEV_CAP_INVALIDATED)
    return TE_ERR(TECORE_ERR_CAPTURE, "%s: stream %p's capture is invalidated", fn, (void *)s);
  if (te_vdev_deps_copy(&e->cap_deps, &s->frontier) != 0)
    return TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
  if (e->cap != s->cap) {
    if (e->cap) te_vdev_capture_unref(e->cap);
    e->cap = s->cap;
    atomic_fetch_add(&e->cap->refs, 1);
  }
  te_vdev_event_set_marker(e, NULL);
  return TECORE_SUCCESS;
}

/* Outside a capture the event forgets the capture it was last recorded in. */
static tecore_result_t record_idle(struct vdev_stream *s, void *arg, int *taken, const char *fn) {
  struct vdev_event *e = arg;
  (void)s;
  (void)taken;
  (void)fn;
  if (e->cap) {
    te_vdev_capture_unref(e->cap);
    e->cap = NULL;
    e->cap_deps.n = 0;
  }
  return TECORE_SUCCESS;
}

static tecore_result_t record_enqueue(struct vdev_stream *s, void *arg, const char *fn) {
  struct vdev_event *e = arg;
  struct vdev_marker *m = te_vdev_marker_new();
  if (!m) return TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
  te_vdev_event_set_marker(e, m);
  te_vdev_marker_ref(m); /* the op's */
  struct vdev_op op = {.type = VDEV_OP_MARKER, .u.marker.m = m};
  tecore_result_t r = te_vdev_stream_enqueue(s, &op);
  /* never leave a marker that nobody will complete */
  if (r != TECORE_SUCCESS) te_vdev_marker_complete(m);
  te_vdev_marker_unref(m);
  return r;
}

tecore_result_t te_vdev_event_record(tecore_event_t eh, tecore_stream_t sh) {
  static const char fn[] = "vdev event_record";
  static const struct vdev_submit_steps steps = {record_capture, record_idle, record_enqueue};
  struct vdev_event *e = NULL;
  struct vdev_stream *s = NULL;
  TE_CHECK(event_get(eh, &e, fn));
  tecore_result_t r = te_vdev_stream_get(sh, &s, fn);
  if (r != TECORE_SUCCESS) {
    event_put(e);
    return r;
  }
  r = te_vdev_capture_or_enqueue(s, &steps, e, fn);
  te_vdev_stream_put(s);
  event_put(e);
  return r;
}

/* Querying or waiting for an event recorded in a live capture is illegal
 * (the driver's CUDA_ERROR_CAPTURED_EVENT) and invalidates that capture. */
static tecore_result_t event_capture_check(struct vdev_event *e, const char *fn) {
  tecore_result_t r = TECORE_SUCCESS;
  pthread_mutex_lock(&te_vdev_cap_lock);
  struct vdev_capture *c = event_capture_locked(e);
  if (c) {
    te_vdev_capture_invalidate_locked(c, fn);
    r = TE_ERR(TECORE_ERR_CAPTURE,
               "%s: event %p was recorded in a capture still in progress (now invalidated)", fn,
               (void *)e);
  }
  pthread_mutex_unlock(&te_vdev_cap_lock);
  return r;
}

tecore_result_t te_vdev_event_query(tecore_event_t h) {
  struct vdev_event *e = NULL;
  TE_CHECK(event_get(h, &e, "vdev event_query"));
  tecore_result_t r = event_capture_check(e, "vdev event_query");
  if (r == TECORE_SUCCESS) {
    struct vdev_marker *m = te_vdev_event_marker(e);
    if (m && !te_vdev_marker_done(m)) r = TECORE_ERR_NOT_READY;
    te_vdev_marker_unref(m);
  }
  event_put(e);
  return r;
}

tecore_result_t te_vdev_event_synchronize(tecore_event_t h) {
  struct vdev_event *e = NULL;
  TE_CHECK(event_get(h, &e, "vdev event_synchronize"));
  tecore_result_t r = event_capture_check(e, "vdev event_synchronize");
  if (r == TECORE_SUCCESS) {
    struct vdev_marker *m = te_vdev_event_marker(e);
    if (m) te_vdev_marker_wait(m);
    te_vdev_marker_unref(m);
    r = te_vdev_memcheck_sync(NULL, "vdev event_synchronize");
  }
  event_put(e);
  return r;
}

/* One side of elapsed: its completion time, or why there is none. */
static tecore_result_t event_time(struct vdev_event *e, const char *which, uint64_t *t) {
  static const char fn[] = "vdev event_elapsed";
  if (e->flags & TECORE_EVENT_DISABLE_TIMING)
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s event %p was created with DISABLE_TIMING", fn, which,
                  (void *)e);
  pthread_mutex_lock(&te_vdev_cap_lock);
  int in_capture = event_capture_locked(e) != NULL;
  pthread_mutex_unlock(&te_vdev_cap_lock);
  if (in_capture)
    return TE_ERR(TECORE_ERR_CAPTURE, "%s: %s event %p was recorded in a capture", fn, which,
                  (void *)e);
  struct vdev_marker *m = te_vdev_event_marker(e);
  if (!m)
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s event %p was never recorded", fn, which, (void *)e);
  tecore_result_t r = TECORE_SUCCESS;
  if (!atomic_load_explicit(&m->done, memory_order_acquire)) r = TECORE_ERR_NOT_READY;
  else *t = m->t_ns;
  te_vdev_marker_unref(m);
  return r;
}

tecore_result_t te_vdev_event_elapsed(float *ms, tecore_event_t start, tecore_event_t end) {
  static const char fn[] = "vdev event_elapsed";
  struct vdev_event *a = NULL, *b = NULL;
  TE_CHECK(event_get(start, &a, fn));
  tecore_result_t r = event_get(end, &b, fn);
  if (r != TECORE_SUCCESS) {
    event_put(a);
    return r;
  }
  uint64_t ta = 0, tb = 0;
  tecore_result_t ra = event_time(a, "start", &ta);
  tecore_result_t rb = event_time(b, "end", &tb);
  /* a hard error wins over "not ready" */
  if (ra != TECORE_SUCCESS && ra != TECORE_ERR_NOT_READY) r = ra;
  else if (rb != TECORE_SUCCESS && rb != TECORE_ERR_NOT_READY) r = rb;
  else if (ra != TECORE_SUCCESS || rb != TECORE_SUCCESS) r = TECORE_ERR_NOT_READY;
  else *ms = (float)((double)((int64_t)(tb - ta)) / 1e6);
  event_put(a);
  event_put(b);
  return r;
}

/* ---- stream_wait_event ---------------------------------------------------------
 * Outside capture: the stream waits for the event's current marker (taken
 * now; a later re-record does not change what it waits for).
 * Capture rules (the driver's):
 * - the event was recorded in the capture the stream records into: the
 *   stream's frontier gains the event's capture point (a join);
 * - the stream does not capture and the event belongs to a live capture:
 *   the stream joins that capture (a fork), starting from the event's point;
 * - anything that would connect a capture to work outside it (waiting on
 *   an event recorded outside the stream's capture, or in another capture)
 *   is illegal and invalidates the capture(s) concerned. */
static tecore_result_t wait_capture(struct vdev_stream *s, void *arg, const char *fn) {
  struct vdev_event *e = arg;
  struct vdev_capture *ec = event_capture_locked(e);
  if (s->cap->status == VDEV_CAP_INVALIDATED)
    return TE_ERR(TECORE_ERR_CAPTURE, "%s: stream %p's capture is invalidated", fn, (void *)s);
  if (ec == s->cap) {
    if (te_vdev_deps_union(&s->frontier, &e->cap_deps) != 0)
      return TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
    return TECORE_SUCCESS;
  }
  if (ec) {
    te_vdev_capture_invalidate_locked(s->cap, fn);
    te_vdev_capture_invalidate_locked(ec, fn);
    return TE_ERR(TECORE_ERR_CAPTURE,
                  "%s: event %p belongs to another capture than stream %p's (both invalidated)",
                  fn, (void *)e, (void *)s);
  }
  te_vdev_capture_invalidate_locked(s->cap, fn);
  return TE_ERR(TECORE_ERR_CAPTURE,
                "%s: capturing stream %p waits on event %p recorded outside the capture "
                "(capture invalidated)",
                fn, (void *)s, (void *)e);
}

/* A stream that does not capture, waiting on an event of a live capture,
 * joins that capture (a fork). */
static tecore_result_t wait_idle(struct vdev_stream *s, void *arg, int *taken, const char *fn) {
  struct vdev_event *e = arg;
  struct vdev_capture *ec = event_capture_locked(e);
  if (!ec) return TECORE_SUCCESS;
  *taken = 1;
  if (ec->status == VDEV_CAP_INVALIDATED)
    return TE_ERR(TECORE_ERR_CAPTURE, "%s: event %p belongs to an invalidated capture", fn,
                  (void *)e);
  if (s->legacy) {
    te_vdev_capture_invalidate_locked(ec, fn);
    return TE_ERR(TECORE_ERR_CAPTURE,
                  "%s: the legacy default stream cannot join a capture (capture invalidated)", fn);
  }
  return te_vdev_capture_join_locked(ec, s, &e->cap_deps, fn);
}

static tecore_result_t wait_enqueue(struct vdev_stream *s, void *arg, const char *fn) {
  struct vdev_event *e = arg;
  tecore_result_t r = TECORE_SUCCESS;
  (void)fn;
  struct vdev_marker *m = te_vdev_event_marker(e);
  if (m && !te_vdev_marker_done(m)) {
    struct vdev_op op = {.type = VDEV_OP_WAIT_MARKER, .u.marker.m = m};
    m = NULL; /* the op owns the reference */
    r = te_vdev_stream_enqueue(s, &op);
  } /* else complete already (or never recorded): nothing to wait for */
  te_vdev_marker_unref(m);
  return r;
}

tecore_result_t te_vdev_stream_wait_event(tecore_stream_t sh, tecore_event_t eh) {
  static const char fn[] = "vdev stream_wait_event";
  static const struct vdev_submit_steps steps = {wait_capture, wait_idle, wait_enqueue};
  struct vdev_event *e = NULL;
  struct vdev_stream *s = NULL;
  TE_CHECK(event_get(eh, &e, fn));
  tecore_result_t r = te_vdev_stream_get(sh, &s, fn);
  if (r != TECORE_SUCCESS) {
    event_put(e);
    return r;
  }
  r = te_vdev_capture_or_enqueue(s, &steps, e, fn);
  te_vdev_stream_put(s);
  event_put(e);
  return r;
}
