/* SPDX-License-Identifier: Apache-2.0 */
/* vdev_capture.c -- stream capture on vdev: begin / end / status, the
 * recording of ops as graph nodes, cross-stream forks and joins through
 * events, and the driver's rules on what a capture forbids.
 *
 * A capture owns a graph being built.  Each stream in it (the origin, and
 * streams that joined by waiting on an event recorded in it) has a
 * frontier: the nodes its next op depends on.  Capturing an op adds a node
 * depending on the frontier and makes the frontier that node.  At the end,
 * every joined stream must have been joined back: its frontier must lie
 * among the ancestors of the origin's frontier, else the capture fails as
 * "unjoined" (CUDA_ERROR_STREAM_CAPTURE_UNJOINED).
 *
 * An illegal operation invalidates the capture(s) it concerns; ops on an
 * invalidated capture's streams fail; end_capture then ends it with
 * TECORE_ERR_CAPTURE and no graph.
 *
 * A capture to an existing graph (begin_capture_to_graph) builds on the
 * caller's graph instead of a new one: the origin's first node depends on
 * the graph's leaves, the graph is marked as captured into (so it cannot be
 * instantiated or destroyed meanwhile), and a failed capture cuts the
 * nodes it added, leaving the graph as it was. */
#include "vdev/vdev.h"
#include <stdlib.h>

pthread_mutex_t te_vdev_cap_lock = PTHREAD_MUTEX_INITIALIZER;
static struct vdev_capture *cap_list; /* captures not yet ended */

static const char *mode_name(tecore_capture_mode_t m) {
  switch (m) {
  case TECORE_CAPTURE_GLOBAL: return "GLOBAL";
  case TECORE_CAPTURE_THREAD_LOCAL: return "THREAD_LOCAL";
  case TECORE_CAPTURE_RELAXED: return "RELAXED";
  }
  return "?";
}

/* A child of fork starts with no capture (the parent's streams are gone). */
void te_vdev_capture_fork(enum vdev_fork_phase phase) {
  if (phase == VDEV_FORK_PREPARE) {
    pthread_mutex_lock(&te_vdev_cap_lock);
    return;
  }
  if (phase == VDEV_FORK_CHILD) cap_list = NULL;
  pthread_mutex_unlock(&te_vdev_cap_lock);
}

/* Lets go of the graph of a capture that failed: a new graph is freed, the
 * caller's graph loses what the capture added. */
static void capture_drop_graph(struct vdev_capture *c) {
  if (!c->graph) return;
  if (c->to_graph) {
    te_vdev_graph_truncate(c->graph, c->base_count);
    c->graph->capturing = 0;
  }
  te_vdev_graph_free(c->graph);
  c->graph = NULL;
}

void te_vdev_capture_unref(struct vdev_capture *c) {
  if (c && atomic_fetch_sub(&c->refs, 1) == 1) {
    capture_drop_graph(c);
    free(c->members);
    free(c);
  }
}

void te_vdev_capture_invalidate_locked(struct vdev_capture *c, const char *why) {
  if (c->status != VDEV_CAP_ACTIVE) return;
  c->status = VDEV_CAP_INVALIDATED;
  TE_INFO(TECORE_SUBSYS_GRAPH, "vdev: capture on stream %p invalidated by %s", (void *)c->origin,
          why);
}

/* Ends c: every member leaves it and it leaves the live list (the list's
 * reference goes; events recorded in it may keep it as ENDED). */
static void capture_finish_locked(struct vdev_capture *c) {
  c->status = VDEV_CAP_ENDED;
  for (size_t i = 0; i < c->nmembers; i++) {
    struct vdev_stream *m = c->members[i];
    m->cap = NULL;
    m->frontier.n = 0;
    te_vdev_stream_put(m);
  }
  c->nmembers = 0;
  c->origin = NULL;
  capture_drop_graph(c); /* a failed capture's: nobody will get it */
  for (struct vdev_capture **pp = &cap_list; *pp; pp = &(*pp)->next)
    if (*pp == c) {
      *pp = c->next;
      break;
    }
  te_vdev_capture_unref(c);
}

tecore_result_t te_vdev_capture_unsafe_call(const char *fn) {
  pthread_t self = pthread_self();
  int found = 0;
  pthread_mutex_lock(&te_vdev_cap_lock);
  for (struct vdev_capture *c = cap_list; c; c = c->next)
    if (c->mode == TECORE_CAPTURE_GLOBAL ||
        (c->mode == TECORE_CAPTURE_THREAD_LOCAL && pthread_equal(c->thread, self))) {
      te_vdev_capture_invalidate_locked(c, fn);
      found++;
    }
  pthread_mutex_unlock(&te_vdev_cap_lock);
  if (found)
    return TE_ERR(TECORE_ERR_CAPTURE,
                  "%s: not permitted during a GLOBAL stream capture, or a THREAD_LOCAL one begun "
                  "on this thread (%d capture(s) invalidated)",
                  fn, found);
  return TECORE_SUCCESS;
}

/* The legacy stream synchronizes implicitly with every blocking stream of
 * its context; if one of them is capturing, that dependency would cross
 * the capture: CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, capture invalidated.
 * Captures made only of NON_BLOCKING streams are not affected (the driver
 * does not synchronize those with the legacy stream). */
tecore_result_t te_vdev_capture_legacy_use_locked(struct vdev_ctx *ctx, const char *fn) {
  int found = 0;
  for (struct vdev_capture *c = cap_list; c; c = c->next) {
    if (c->ctx != ctx) continue;
    int blocking = 0;
    for (size_t i = 0; i < c->nmembers && !blocking; i++)
      blocking = te_vdev_stream_is_blocking(c->members[i]);
    if (blocking) {
      te_vdev_capture_invalidate_locked(c, fn);
      found++;
    }
  }
  if (found)
    return TE_ERR(TECORE_ERR_CAPTURE,
                  "%s: the legacy default stream may not be used while a blocking stream of its "
                  "context is capturing (%d capture(s) invalidated)",
                  fn, found);
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_capture_add_locked(struct vdev_stream *s, struct vdev_op *op,
                                           const char *fn) {
  struct vdev_capture *c = s->cap;
  if (c->status != VDEV_CAP_ACTIVE) {
    te_vdev_op_release(op);
    return TE_ERR(TECORE_ERR_CAPTURE, "%s: stream %p's capture is invalidated", fn, (void *)s);
  }
  if (op->type >= VDEV_OP_NODE_TYPES_) {
    te_vdev_op_release(op);
    return TE_ERR(TECORE_ERR_INTERNAL, "%s: %s cannot be captured", fn, te_vdev_op_name(op->type));
  }
  size_t idx;
  tecore_result_t r = te_vdev_graph_add(c->graph, op, &s->frontier, &idx);
  if (r != TECORE_SUCCESS) return r;
  s->frontier.n = 0;
  if (te_vdev_deps_add(&s->frontier, idx) != 0) {
    te_vdev_capture_invalidate_locked(c, "out of host memory");
    return TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
  }
  return TECORE_SUCCESS;
}

static int add_member_locked(struct vdev_capture *c, struct vdev_stream *s) {
  if (c->nmembers == c->cap) {
    size_t ncap = c->cap ? c->cap * 2 : 4;
    struct vdev_stream **nm = realloc(c->members, ncap * sizeof *nm);
    if (!nm) return -1;
    c->members = nm;
    c->cap = ncap;
  }
  te_vdev_obj_ref(&s->obj);
  c->members[c->nmembers++] = s;
  s->cap = c;
  return 0;
}

tecore_result_t te_vdev_capture_join_locked(struct vdev_capture *c, struct vdev_stream *s,
                                            const struct vdev_deps *deps, const char *fn) {
  if (te_vdev_deps_copy(&s->frontier, deps) != 0 || add_member_locked(c, s) != 0) {
    s->frontier.n = 0;
    return TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
  }
  return TECORE_SUCCESS;
}

void te_vdev_capture_stream_gone(struct vdev_stream *s) {
  pthread_mutex_lock(&te_vdev_cap_lock);
  struct vdev_capture *c = s->cap;
  if (c) {
    te_vdev_capture_invalidate_locked(c, "stream_destroy of a capturing stream");
    if (c->origin == s) {
      capture_finish_locked(c); /* nobody can end it any more */
    } else {
      for (size_t i = 0; i < c->nmembers; i++)
        if (c->members[i] == s) {
          c->members[i] = c->members[--c->nmembers];
          break;
        }
      s->cap = NULL;
      s->frontier.n = 0;
      te_vdev_stream_put(s);
    }
  }
  pthread_mutex_unlock(&te_vdev_cap_lock);
}

/* ---- public capture ops ------------------------------------------------------ */

/* The nodes of g that no node depends on, as a frontier. */
static int graph_leaves(const struct vdev_graph *g, struct vdev_deps *out) {
  out->n = 0;
  if (g->count == 0) return 0;
  unsigned char *has_child = calloc(g->count, 1);
  if (!has_child) return -1;
  for (size_t i = 0; i < g->count; i++)
    for (size_t d = 0; d < g->nodes[i].deps.n; d++) has_child[g->nodes[i].deps.v[d]] = 1;
  int rc = 0;
  for (size_t i = 0; i < g->count && rc == 0; i++)
    if (!has_child[i]) rc = te_vdev_deps_add(out, i);
  free(has_child);
  return rc;
}

/* Begins a capture on sh into target (NULL: a new graph). */
static tecore_result_t begin_capture(tecore_stream_t sh, tecore_capture_mode_t mode,
                                     struct vdev_graph *target, const char *fn) {
  if (mode != TECORE_CAPTURE_GLOBAL && mode != TECORE_CAPTURE_THREAD_LOCAL &&
      mode != TECORE_CAPTURE_RELAXED)
    return TE_ERR(TECORE_ERR_INVALID, "%s: unknown mode %d", fn, (int)mode);
  struct vdev_stream *s = NULL;
  TE_CHECK(te_vdev_stream_get(sh, &s, fn));
  tecore_result_t r = TECORE_SUCCESS;
  struct vdev_capture *c = NULL;
  if (s->legacy) {
    r = TE_ERR(TECORE_ERR_CAPTURE, "%s: the legacy default stream cannot be captured", fn);
    goto out;
  }
  c = calloc(1, sizeof *c);
  struct vdev_graph *g = target ? target : te_vdev_graph_new();
  if (!c || !g) {
    free(c);
    c = NULL;
    if (g && !target) te_vdev_graph_free(g);
    r = TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
    goto out;
  }
  atomic_init(&c->refs, 1);
  c->mode = mode;
  c->thread = pthread_self();
  c->ctx = s->ctx;
  c->status = VDEV_CAP_ACTIVE;
  pthread_mutex_lock(&te_vdev_cap_lock);
  if (target && target->capturing) {
    r = TE_ERR(TECORE_ERR_CAPTURE, "%s: graph %p is already being captured into", fn,
               (void *)target);
  } else if (s->cap) {
    r = TE_ERR(TECORE_ERR_CAPTURE, "%s: stream %p is already capturing", fn, (void *)s);
  } else if (add_member_locked(c, s) != 0) {
    r = TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
  } else {
    c->graph = g;
    if (target) {
      te_vdev_obj_ref(&target->obj); /* the capture's */
      c->to_graph = 1;
      c->base_count = target->count;
      target->capturing = 1;
    }
    c->origin = s;
    s->frontier.n = 0;
    if (target && graph_leaves(target, &s->frontier) != 0) {
      te_vdev_capture_invalidate_locked(c, "out of host memory");
      r = TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
    }
    c->next = cap_list;
    cap_list = c;
    if (r != TECORE_SUCCESS) capture_finish_locked(c); /* the list's reference goes */
    c = NULL; /* the list owns it */
  }
  pthread_mutex_unlock(&te_vdev_cap_lock);
  if (c && !c->graph && !target) te_vdev_graph_free(g);
  if (c) te_vdev_capture_unref(c);
  if (r == TECORE_SUCCESS)
    TE_TRACE(TECORE_SUBSYS_GRAPH, "vdev: stream %p begins a %s capture%s", (void *)s,
             mode_name(mode), target ? " into an existing graph" : "");
out:
  te_vdev_stream_put(s);
  return r;
}

tecore_result_t te_vdev_stream_begin_capture(tecore_stream_t sh, tecore_capture_mode_t mode) {
  return begin_capture(sh, mode, NULL, "vdev stream_begin_capture");
}

tecore_result_t te_vdev_stream_begin_capture_to_graph(tecore_stream_t sh, tecore_graph_t gh,
                                                      tecore_capture_mode_t mode) {
  static const char fn[] = "vdev stream_begin_capture_to_graph";
  struct vdev_obj *o = te_vdev_obj_get(gh, VDEV_KIND_GRAPH);
  if (!o)
    return TE_ERR(TECORE_ERR_INVALID, "%s: graph %p is not a live vdev graph (destroyed?)", fn,
                  (void *)gh);
  tecore_result_t r = begin_capture(sh, mode, (struct vdev_graph *)o, fn);
  te_vdev_obj_unref(o);
  return r;
}

/* 1 when every joined stream's frontier lies among the ancestors (or is
 * part) of the origin's frontier. */
static int capture_joined_locked(struct vdev_capture *c) {
  struct vdev_graph *g = c->graph;
  if (c->nmembers <= 1) return 1;
  unsigned char *seen = calloc(g->count ? g->count : 1, 1);
  size_t *stack = malloc((g->count ? g->count : 1) * sizeof *stack);
  int ok = 1;
  if (!seen || !stack) {
    ok = 0;
    goto out;
  }
  size_t sp = 0;
  for (size_t i = 0; i < c->origin->frontier.n; i++) {
    size_t x = c->origin->frontier.v[i];
    if (!seen[x]) {
      seen[x] = 1;
      stack[sp++] = x;
    }
  }
  while (sp) {
    const struct vdev_deps *d = &g->nodes[stack[--sp]].deps;
    for (size_t i = 0; i < d->n; i++)
      if (!seen[d->v[i]]) {
        seen[d->v[i]] = 1;
        stack[sp++] = d->v[i];
      }
  }
  for (size_t m = 0; m < c->nmembers && ok; m++) {
    struct vdev_stream *s = c->members[m];
    if (s == c->origin) continue;
    for (size_t i = 0; i < s->frontier.n && ok; i++) ok = seen[s->frontier.v[i]];
  }
out:
  free(seen);
  free(stack);
  return ok;
}

tecore_result_t te_vdev_stream_end_capture(tecore_stream_t sh, tecore_graph_t *graph) {
  static const char fn[] = "vdev stream_end_capture";
  struct vdev_stream *s = NULL;
  TE_CHECK(te_vdev_stream_get(sh, &s, fn));
  tecore_result_t r = TECORE_SUCCESS;
  struct vdev_graph *g = NULL;
  int to_graph = 0;
  pthread_mutex_lock(&te_vdev_cap_lock);
  struct vdev_capture *c = s->cap;
  if (!c) {
    r = TE_ERR(TECORE_ERR_CAPTURE, "%s: stream %p is not capturing", fn, (void *)s);
  } else if (c->origin != s) {
    te_vdev_capture_invalidate_locked(c, fn);
    r = TE_ERR(TECORE_ERR_CAPTURE,
               "%s: stream %p joined the capture but did not begin it; end it on stream %p "
               "(capture invalidated)",
               fn, (void *)s, (void *)c->origin);
  } else if (c->mode != TECORE_CAPTURE_RELAXED && !pthread_equal(c->thread, pthread_self())) {
    te_vdev_capture_invalidate_locked(c, fn);
    r = TE_ERR(TECORE_ERR_CAPTURE,
               "%s: a %s capture must end on the thread that began it (capture invalidated)", fn,
               mode_name(c->mode));
  } else {
    if (c->status == VDEV_CAP_INVALIDATED) {
      r = TE_ERR(TECORE_ERR_CAPTURE, "%s: the capture on stream %p was invalidated", fn,
                 (void *)s);
    } else if (!capture_joined_locked(c)) {
      r = TE_ERR(TECORE_ERR_CAPTURE,
                 "%s: a stream forked from the capture on stream %p was not joined back "
                 "(unjoined capture)",
                 fn, (void *)s);
    } else {
      g = c->graph;
      c->graph = NULL;
      to_graph = c->to_graph;
      if (to_graph) g->capturing = 0;
    }
    capture_finish_locked(c); /* in every case: the streams leave capture mode */
  }
  pthread_mutex_unlock(&te_vdev_cap_lock);
  if (g) {
    TE_TRACE(TECORE_SUBSYS_GRAPH, "vdev: stream %p captured a graph of %zu nodes", (void *)s,
             g->count);
    if (to_graph) { /* the caller's graph, registered all along */
      *graph = (tecore_graph_t)(void *)g;
      te_vdev_obj_unref(&g->obj);
    } else {
      r = te_vdev_obj_register(&g->obj);
      if (r != TECORE_SUCCESS) te_vdev_graph_free(g);
      else *graph = (tecore_graph_t)(void *)g;
    }
  }
  te_vdev_stream_put(s);
  return r;
}

tecore_result_t te_vdev_stream_capture_status(tecore_stream_t sh, tecore_capture_status_t *status) {
  struct vdev_stream *s = NULL;
  TE_CHECK(te_vdev_stream_get(sh, &s, "vdev stream_capture_status"));
  pthread_mutex_lock(&te_vdev_cap_lock);
  if (!s->cap) *status = TECORE_CAPTURE_NONE;
  else if (s->cap->status == VDEV_CAP_ACTIVE) *status = TECORE_CAPTURE_ACTIVE;
  else *status = TECORE_CAPTURE_INVALIDATED;
  pthread_mutex_unlock(&te_vdev_cap_lock);
  te_vdev_stream_put(s);
  return TECORE_SUCCESS;
}
