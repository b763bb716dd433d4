/* SPDX-License-Identifier: Apache-2.0 */
/* vdev_exec.c -- executable graphs on vdev: instantiate (a plan: a private
 * copy of the nodes in topological order), launch (the whole plan as one
 * stream op), upload, update in place, destroy.
 *
 * An exec points at an immutable, refcounted plan.  A launch takes a
 * reference, so an update (which swaps in a new plan) or a destroy never
 * changes a launch already queued: the driver's rule that updates apply to
 * later launches only.  Launches of one exec run one after another, even
 * on different streams, as on the driver: each waits for the previous one's
 * completion marker.
 *
 * A launch into a capturing stream records a child-graph node holding the
 * exec's current plan (what the driver records when a graph launch is
 * captured).
 *
 * Per-node updates (kernel arguments, memcpy and memset nodes) edit the
 * current plan in place when nothing else holds it (no launch queued, no
 * capture recorded it), and otherwise a copy that replaces it: the same
 * rule, launches queued before the update run the old values. */
#include "vdev/vdev.h"
#include <stdlib.h>
#include <string.h>

struct vdev_exec {
  struct vdev_obj obj;
  pthread_mutex_t lock;           /* plan, last */
  struct vdev_plan *plan;
  struct vdev_marker *last;       /* the latest launch's completion, or NULL */
  uint32_t serial;                /* the graph's it was instantiated from (node handles) */
};

/* ---- plans ----------------------------------------------------------------- */

void te_vdev_plan_ref(struct vdev_plan *p) { atomic_fetch_add(&p->refs, 1); }

void te_vdev_plan_unref(struct vdev_plan *p) {
  if (!p || atomic_fetch_sub(&p->refs, 1) != 1) return;
  for (size_t i = 0; i < p->count; i++) {
    te_vdev_op_release(&p->nodes[i].op);
    te_vdev_deps_free(&p->nodes[i].deps);
  }
  free(p->nodes);
  free(p->order);
  free(p);
}

/* Nodes that block until something else happens. */
static int is_wait(const struct vdev_op *op) {
  return op->type == VDEV_OP_WAIT_VALUE || op->type == VDEV_OP_EVENT_WAIT;
}

/* Kahn's algorithm.  The plan runs serially, while the GPU runs
 * independent branches concurrently; so among the ready nodes the waits go
 * last, and a wait never blocks a write on another branch that would have
 * released it.  Otherwise ready nodes keep their capture order. */
static tecore_result_t plan_order(struct vdev_plan *p) {
  size_t n = p->count, *indeg = NULL, *first = NULL, *child = NULL, *ready = NULL, *waits = NULL;
  size_t edges = 0;
  for (size_t i = 0; i < n; i++)
    for (size_t d = 0; d < p->nodes[i].deps.n; d++) {
      size_t x = p->nodes[i].deps.v[d];
      if (x >= n || x == i)
        return TE_ERR(TECORE_ERR_INVALID, "vdev graph_instantiate: node %zu depends on node %zu "
                                          "(of %zu)", i, x, n);
      edges++;
    }
  if (n == 0) return TECORE_SUCCESS;
  tecore_result_t r = TECORE_SUCCESS;
  indeg = calloc(n, sizeof *indeg);
  first = calloc(n + 1, sizeof *first);
  child = malloc((edges ? edges : 1) * sizeof *child);
  ready = malloc(n * sizeof *ready);
  waits = malloc(n * sizeof *waits);
  if (!indeg || !first || !child || !ready || !waits) {
    r = TE_ERR(TECORE_ERR_NOMEM, "vdev graph_instantiate: out of host memory");
    goto out;
  }
  /* children lists in CSR form: child[first[x] .. first[x+1]) */
  for (size_t i = 0; i < n; i++)
    for (size_t d = 0; d < p->nodes[i].deps.n; d++) first[p->nodes[i].deps.v[d] + 1]++;
  for (size_t x = 0; x < n; x++) first[x + 1] += first[x];
  for (size_t x = 0; x < n; x++) indeg[x] = first[x]; /* indeg is the fill cursor first */
  for (size_t i = 0; i < n; i++)
    for (size_t d = 0; d < p->nodes[i].deps.n; d++) child[indeg[p->nodes[i].deps.v[d]]++] = i;
  for (size_t i = 0; i < n; i++) indeg[i] = p->nodes[i].deps.n;
  /* two FIFOs of ready nodes: others first, then waits */
  size_t rh = 0, rt = 0, wh = 0, wt = 0, done = 0;
  for (size_t i = 0; i < n; i++)
    if (!indeg[i]) {
      if (is_wait(&p->nodes[i].op)) waits[wt++] = i;
      else ready[rt++] = i;
    }
  while (rh < rt || wh < wt) {
    size_t x = rh < rt ? ready[rh++] : waits[wh++];
    p->order[done++] = x;
    for (size_t c = first[x]; c < first[x + 1]; c++)
      if (--indeg[child[c]] == 0) {
        if (is_wait(&p->nodes[child[c]].op)) waits[wt++] = child[c];
        else ready[rt++] = child[c];
      }
  }
  if (done != n) r = TE_ERR(TECORE_ERR_INVALID, "vdev graph_instantiate: the graph has a cycle");
out:
  free(indeg);
  free(first);
  free(child);
  free(ready);
  free(waits);
  return r;
}

static tecore_result_t te_vdev_plan_build(const struct vdev_node *nodes, size_t count,
                                          struct vdev_plan **out) {
  struct vdev_plan *p = calloc(1, sizeof *p);
  if (!p) return TE_ERR(TECORE_ERR_NOMEM, "vdev graph_instantiate: out of host memory");
  atomic_init(&p->refs, 1);
  p->nodes = calloc(count ? count : 1, sizeof *p->nodes);
  p->order = calloc(count ? count : 1, sizeof *p->order);
  tecore_result_t r = TECORE_SUCCESS;
  if (!p->nodes || !p->order) {
    r = TE_ERR(TECORE_ERR_NOMEM, "vdev graph_instantiate: out of host memory");
    goto fail;
  }
  for (size_t i = 0; i < count; i++) {
    TE_CHECK_GOTO(te_vdev_op_clone(&p->nodes[i].op, &nodes[i].op), r, fail);
    p->count = i + 1;
    if (te_vdev_deps_copy(&p->nodes[i].deps, &nodes[i].deps) != 0) {
      r = TE_ERR(TECORE_ERR_NOMEM, "vdev graph_instantiate: out of host memory");
      goto fail;
    }
  }
  TE_CHECK_GOTO(plan_order(p), r, fail);
  *out = p;
  return TECORE_SUCCESS;
fail:
  te_vdev_plan_unref(p);
  return r;
}

/* Nodes run one at a time in topological order on the stream's worker
 * (a valid schedule of the graph: each node after its dependencies). */
tecore_result_t te_vdev_plan_run(struct vdev_stream *s, struct vdev_plan *p) {
  tecore_result_t first = TECORE_SUCCESS;
  for (size_t i = 0; i < p->count; i++) {
    tecore_result_t r = te_vdev_op_run(s, &p->nodes[p->order[i]].op);
    if (r != TECORE_SUCCESS && first == TECORE_SUCCESS) first = r;
  }
  return first;
}

/* ---- execs -------------------------------------------------------------------- */

static void exec_free(struct vdev_obj *o) {
  struct vdev_exec *x = (struct vdev_exec *)o;
  te_vdev_plan_unref(x->plan);
  te_vdev_marker_unref(x->last);
  pthread_mutex_destroy(&x->lock);
  te_vdev_obj_free_memory(x);
}

static tecore_result_t exec_get(tecore_graph_exec_t h, struct vdev_exec **x, const char *fn) {
  struct vdev_obj *o = te_vdev_obj_get(h, VDEV_KIND_EXEC);
  if (!o)
    return TE_ERR(TECORE_ERR_INVALID, "%s: graph exec %p is not a live vdev graph exec", fn,
                  (void *)h);
  *x = (struct vdev_exec *)o;
  return TECORE_SUCCESS;
}

static tecore_result_t graph_get(tecore_graph_t h, struct vdev_graph **g, const char *fn) {
  struct vdev_obj *o = te_vdev_obj_get(h, VDEV_KIND_GRAPH);
  if (!o)
    return TE_ERR(TECORE_ERR_INVALID, "%s: graph %p is not a live vdev graph (destroyed?)", fn,
                  (void *)h);
  *g = (struct vdev_graph *)o;
  return TECORE_SUCCESS;
}

static struct vdev_plan *exec_plan(struct vdev_exec *x) {
  pthread_mutex_lock(&x->lock);
  struct vdev_plan *p = x->plan;
  te_vdev_plan_ref(p);
  pthread_mutex_unlock(&x->lock);
  return p;
}

/* The exec owns a copy: the graph may be destroyed right after.  The
 * flags change nothing on vdev (see te/device.h); an upload stream is
 * checked like the driver checks it. */
static tecore_result_t instantiate(tecore_graph_exec_t *exec, tecore_graph_t gh, unsigned flags,
                                   tecore_stream_t upload_stream, const char *fn) {
  struct vdev_graph *g = NULL;
  if (flags & TECORE_GRAPH_INSTANTIATE_UPLOAD) {
    struct vdev_stream *s = NULL;
    TE_CHECK(te_vdev_stream_get(upload_stream, &s, fn));
    te_vdev_stream_put(s);
  }
  TE_CHECK(graph_get(gh, &g, fn));
  pthread_mutex_lock(&te_vdev_cap_lock);
  int capturing = g->capturing;
  pthread_mutex_unlock(&te_vdev_cap_lock);
  if (capturing) {
    te_vdev_obj_unref(&g->obj);
    return TE_ERR(TECORE_ERR_CAPTURE, "%s: graph %p is being captured into; end that capture first",
                  fn, (void *)gh);
  }
  struct vdev_plan *p = NULL;
  tecore_result_t r = te_vdev_plan_build(g->nodes, g->count, &p);
  uint32_t serial = g->serial;
  te_vdev_obj_unref(&g->obj);
  if (r != TECORE_SUCCESS) return r;
  struct vdev_exec *x = calloc(1, sizeof *x);
  if (!x) {
    te_vdev_plan_unref(p);
    return TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
  }
  te_vdev_obj_init(&x->obj, VDEV_KIND_EXEC, exec_free);
  pthread_mutex_init(&x->lock, NULL);
  x->plan = p;
  x->serial = serial;
  r = te_vdev_obj_register(&x->obj);
  if (r != TECORE_SUCCESS) {
    exec_free(&x->obj);
    return r;
  }
  *exec = (tecore_graph_exec_t)(void *)x;
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_graph_instantiate(tecore_graph_exec_t *exec, tecore_graph_t gh) {
  return instantiate(exec, gh, 0, NULL, "vdev graph_instantiate");
}

tecore_result_t te_vdev_graph_instantiate_flags(tecore_graph_exec_t *exec, tecore_graph_t gh,
                                                unsigned flags, tecore_stream_t upload_stream) {
  return instantiate(exec, gh, flags, upload_stream, "vdev graph_instantiate_with_flags");
}

/* Launches already queued hold the plan; they still run. */
tecore_result_t te_vdev_graph_exec_destroy(tecore_graph_exec_t h) {
  struct vdev_exec *x = NULL;
  TE_CHECK(exec_get(h, &x, "vdev graph_exec_destroy"));
  int was = te_vdev_obj_unregister(&x->obj);
  te_vdev_obj_unref(&x->obj);
  if (!was)
    return TE_ERR(TECORE_ERR_INVALID, "vdev graph_exec_destroy: exec %p is already destroyed",
                  (void *)h);
  te_vdev_obj_unref(&x->obj);
  return TECORE_SUCCESS;
}

/* graph_launch's steps (te_vdev_capture_or_enqueue): in a capture, the
 * exec's plan becomes a child-graph node. */
static tecore_result_t launch_capture(struct vdev_stream *s, void *arg, const char *fn) {
  struct vdev_op op = {.type = VDEV_OP_CHILD_GRAPH};
  op.u.graph.plan = exec_plan(arg);
  return te_vdev_capture_add_locked(s, &op, fn);
}

static tecore_result_t launch_enqueue(struct vdev_stream *s, void *arg, const char *fn) {
  struct vdev_exec *x = arg;
  struct vdev_marker *done = te_vdev_marker_new();
  if (!done) return TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
  struct vdev_op op = {.type = VDEV_OP_GRAPH_LAUNCH};
  pthread_mutex_lock(&x->lock);
  op.u.graph.plan = x->plan;
  te_vdev_plan_ref(x->plan);
  op.u.graph.prev = x->last; /* x->last's reference moves to the op */
  x->last = done;            /* the marker's first reference */
  te_vdev_marker_ref(done);  /* the op's */
  op.u.graph.done = done;
  te_vdev_marker_ref(done);  /* ours, for the failure path */
  pthread_mutex_unlock(&x->lock);
  tecore_result_t r = te_vdev_check_op(s, &op, fn);
  if (r == TECORE_SUCCESS) r = te_vdev_stream_enqueue(s, &op);
  else te_vdev_op_release(&op);
  if (r != TECORE_SUCCESS) te_vdev_marker_complete(done); /* later launches must not wait */
  te_vdev_marker_unref(done);
  return r;
}

tecore_result_t te_vdev_graph_launch(tecore_graph_exec_t h, tecore_stream_t sh) {
  static const char fn[] = "vdev graph_launch";
  static const struct vdev_submit_steps steps = {launch_capture, NULL, launch_enqueue};
  struct vdev_exec *x = NULL;
  struct vdev_stream *s = NULL;
  TE_CHECK(exec_get(h, &x, fn));
  tecore_result_t r = te_vdev_stream_get(sh, &s, fn);
  if (r != TECORE_SUCCESS) {
    te_vdev_obj_unref(&x->obj);
    return r;
  }
  r = te_vdev_capture_or_enqueue(s, &steps, x, fn);
  te_vdev_stream_put(s);
  te_vdev_obj_unref(&x->obj);
  return r;
}

/* Device launch: vdev's streams run a graph the same way whoever
 * launches it, so a device launch is a launch; there is no launcher to
 * build, nothing to upload and no device-side refusal to report.  The
 * node kinds are checked above the backends (graph_device.c). */
tecore_result_t te_vdev_graph_device_prepare(tecore_graph_exec_t exec, void **state) {
  struct vdev_exec *x = NULL;
  TE_CHECK(exec_get(exec, &x, "vdev graph_device_prepare"));
  te_vdev_obj_unref(&x->obj);
  *state = NULL;
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_graph_device_launch(tecore_graph_exec_t exec, void *state, int upload,
                                            tecore_stream_t stream) {
  (void)state;
  (void)upload;
  return te_vdev_graph_launch(exec, stream);
}

tecore_result_t te_vdev_graph_device_status(void *state, unsigned *code) {
  (void)state;
  *code = 0;
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_graph_device_release(void *state) {
  (void)state;
  return TECORE_SUCCESS;
}

/* Nothing to upload: device memory is host memory.  Validates only. */
tecore_result_t te_vdev_graph_upload(tecore_graph_exec_t h, tecore_stream_t sh) {
  static const char fn[] = "vdev graph_upload";
  struct vdev_exec *x = NULL;
  struct vdev_stream *s = NULL;
  TE_CHECK(exec_get(h, &x, fn));
  tecore_result_t r = te_vdev_stream_get(sh, &s, fn);
  if (r == TECORE_SUCCESS) te_vdev_stream_put(s);
  te_vdev_obj_unref(&x->obj);
  return r;
}

/* ---- update -------------------------------------------------------------------
 * The rules of cuGraphExecUpdate as far as vdev's node types go:
 * - the graphs must have the same number of nodes, paired in order, with
 *   the same dependencies (else TOPOLOGY_CHANGED);
 * - a paired node must have the same type (else NODE_TYPE_CHANGED);
 * - kernel nodes must run the same kernel (else FUNCTION_CHANGED); their
 *   launch shape and argument values may change;
 * - memset nodes must keep their element size (else PARAMETERS_CHANGED);
 *   destination, value and count may change;
 * - memcpy nodes may change addresses and size;
 * - stream memory op nodes must keep their width (a 32-bit op is another
 *   operation type than a 64-bit one: PARAMETERS_CHANGED); address, value
 *   and condition may change;
 * - event nodes may change their event;
 * - child graphs are compared node by node by the same rules. */
static tecore_graph_update_result_t nodes_compare(const struct vdev_node *a, size_t na,
                                                  const struct vdev_node *b, size_t nb,
                                                  size_t *at) {
  *at = 0;
  if (na != nb) return TECORE_GRAPH_UPDATE_TOPOLOGY_CHANGED;
  for (size_t i = 0; i < na; i++)
    if (!te_vdev_deps_equal(&a[i].deps, &b[i].deps)) {
      *at = i;
      return TECORE_GRAPH_UPDATE_TOPOLOGY_CHANGED;
    }
  for (size_t i = 0; i < na; i++) {
    const struct vdev_op *x = &a[i].op, *y = &b[i].op;
    *at = i;
    if (x->type != y->type) return TECORE_GRAPH_UPDATE_NODE_TYPE_CHANGED;
    switch (x->type) {
    case VDEV_OP_KERNEL:
      if (x->u.kernel.def != y->u.kernel.def) return TECORE_GRAPH_UPDATE_FUNCTION_CHANGED;
      break;
    case VDEV_OP_MEMSET:
      if (x->u.set.elem != y->u.set.elem) return TECORE_GRAPH_UPDATE_PARAMETERS_CHANGED;
      break;
    case VDEV_OP_WRITE_VALUE:
    case VDEV_OP_WAIT_VALUE:
      if (x->u.mem.width != y->u.mem.width) return TECORE_GRAPH_UPDATE_PARAMETERS_CHANGED;
      break;
    case VDEV_OP_CHILD_GRAPH: {
      size_t sub;
      tecore_graph_update_result_t r =
          nodes_compare(x->u.graph.plan->nodes, x->u.graph.plan->count, y->u.graph.plan->nodes,
                        y->u.graph.plan->count, &sub);
      if (r != TECORE_GRAPH_UPDATE_SUCCESS) return r;
      break;
    }
    default:
      break;
    }
  }
  return TECORE_GRAPH_UPDATE_SUCCESS;
}

static const char *why_name(tecore_graph_update_result_t r) {
  switch (r) {
  case TECORE_GRAPH_UPDATE_TOPOLOGY_CHANGED: return "topology changed";
  case TECORE_GRAPH_UPDATE_NODE_TYPE_CHANGED: return "node type changed";
  case TECORE_GRAPH_UPDATE_FUNCTION_CHANGED: return "kernel function changed";
  case TECORE_GRAPH_UPDATE_PARAMETERS_CHANGED: return "parameters changed in an unsupported way";
  default: return "refused";
  }
}

tecore_result_t te_vdev_graph_exec_update(tecore_graph_exec_t h, tecore_graph_t gh,
                                          tecore_graph_update_result_t *why) {
  static const char fn[] = "vdev graph_exec_update";
  struct vdev_exec *x = NULL;
  struct vdev_graph *g = NULL;
  TE_CHECK(exec_get(h, &x, fn));
  tecore_result_t r = graph_get(gh, &g, fn);
  if (r != TECORE_SUCCESS) {
    te_vdev_obj_unref(&x->obj);
    return r;
  }
  struct vdev_plan *old = exec_plan(x), *fresh = NULL;
  size_t at = 0;
  tecore_graph_update_result_t w = nodes_compare(old->nodes, old->count, g->nodes, g->count, &at);
  if (w != TECORE_GRAPH_UPDATE_SUCCESS) {
    *why = w;
    if (old->count != g->count)
      r = TE_ERR(TECORE_ERR_GRAPH_UPDATE, "%s: %s (%zu nodes in the exec, %zu in the graph)", fn,
                 why_name(w), old->count, g->count);
    else
      r = TE_ERR(TECORE_ERR_GRAPH_UPDATE, "%s: %s at node %zu (%s)", fn, why_name(w), at,
                 te_vdev_op_name(g->nodes[at].op.type));
  } else {
    r = te_vdev_plan_build(g->nodes, g->count, &fresh);
    if (r == TECORE_SUCCESS) {
      pthread_mutex_lock(&x->lock);
      struct vdev_plan *prev = x->plan;
      x->plan = fresh;
      pthread_mutex_unlock(&x->lock);
      te_vdev_plan_unref(prev);
      *why = TECORE_GRAPH_UPDATE_SUCCESS;
    } else {
      *why = TECORE_GRAPH_UPDATE_ERROR;
    }
  }
  te_vdev_plan_unref(old);
  te_vdev_obj_unref(&g->obj);
  te_vdev_obj_unref(&x->obj);
  return r;
}

/* ---- per-node updates ------------------------------------------------------- */

tecore_result_t te_vdev_graph_exec_node_kernel_id(tecore_graph_exec_t h, tecore_graph_node_t node,
                                                  int *id) {
  static const char fn[] = "vdev graph_exec_node_kernel_id";
  struct vdev_exec *x = NULL;
  TE_CHECK(exec_get(h, &x, fn));
  size_t i = VDEV_NODE_INDEX(node);
  tecore_result_t r = TECORE_SUCCESS;
  pthread_mutex_lock(&x->lock);
  const struct vdev_plan *p = x->plan;
  if (i >= p->count || VDEV_NODE_SERIAL(node) != x->serial)
    r = TE_ERR(TECORE_ERR_INVALID, "%s: node %p is not a node of exec %p's graph", fn,
               (void *)node, (void *)h);
  else
    *id = p->nodes[i].op.type == VDEV_OP_KERNEL ? p->nodes[i].op.u.kernel.id : -1;
  pthread_mutex_unlock(&x->lock);
  te_vdev_obj_unref(&x->obj);
  return r;
}

/* What one per-node update does to the node (in a plan only the exec sees). */
typedef tecore_result_t (*node_edit_fn)(struct vdev_op *op, const void *arg, const char *fn);

/* Applies edit to node of exec's plan: in place when the exec holds the only
 * reference (nothing queued or captured can see the change), else on a copy
 * that becomes the exec's plan.  The edit checks the node first and fails
 * without changing anything. */
static tecore_result_t exec_node_edit(tecore_graph_exec_t h, tecore_graph_node_t node,
                                      enum vdev_op_type type, node_edit_fn edit, const void *arg,
                                      const char *fn) {
  struct vdev_exec *x = NULL;
  TE_CHECK(exec_get(h, &x, fn));
  size_t i = VDEV_NODE_INDEX(node);
  tecore_result_t r = TECORE_SUCCESS;
  pthread_mutex_lock(&x->lock);
  struct vdev_plan *p = x->plan;
  if (i >= p->count || VDEV_NODE_SERIAL(node) != x->serial) {
    r = TE_ERR(TECORE_ERR_INVALID, "%s: node %p is not a node of exec %p's graph (%zu nodes)", fn,
               (void *)node, (void *)h, p->count);
  } else if (p->nodes[i].op.type != type) {
    r = TE_ERR(TECORE_ERR_INVALID, "%s: node %zu is a %s node, not a %s node", fn, i,
               te_vdev_op_name(p->nodes[i].op.type), te_vdev_op_name(type));
  } else if (atomic_load(&p->refs) == 1) {
    r = edit(&p->nodes[i].op, arg, fn);
  } else {
    struct vdev_plan *fresh = NULL;
    r = te_vdev_plan_build(p->nodes, p->count, &fresh);
    if (r == TECORE_SUCCESS) r = edit(&fresh->nodes[i].op, arg, fn);
    if (r == TECORE_SUCCESS) {
      x->plan = fresh;
      te_vdev_plan_unref(p);
    } else {
      te_vdev_plan_unref(fresh);
    }
  }
  pthread_mutex_unlock(&x->lock);
  te_vdev_obj_unref(&x->obj);
  return r;
}

struct kernel_edit {
  const struct tecore_launch_cfg *cfg;
  void *const *args;
};

static tecore_result_t kernel_edit(struct vdev_op *op, const void *arg, const char *fn) {
  const struct kernel_edit *k = arg;
  const struct tecore_kernel_def *def = op->u.kernel.def;
  for (unsigned p = 0; p < def->nparams; p++)
    if (!k->args[p])
      return TE_ERR(TECORE_ERR_INVALID, "%s: kernel %s: args[%u] is NULL", fn, def->name, p);
  for (unsigned p = 0; p < def->nparams; p++)
    memcpy(op->u.kernel.args + te_vdev_arg_offset(def, p), k->args[p], def->param_size[p]);
  if (k->cfg) op->u.kernel.cfg = *k->cfg;
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_graph_exec_kernel_node_set(tecore_graph_exec_t exec,
                                                   tecore_graph_node_t node,
                                                   const struct tecore_launch_cfg *cfg,
                                                   void *const *args) {
  struct kernel_edit k = {cfg, args};
  return exec_node_edit(exec, node, VDEV_OP_KERNEL, kernel_edit, &k,
                        "vdev graph_exec_kernel_node_set");
}

struct copy_edit {
  tecore_devptr_t dst, src;
};

static tecore_result_t copy_edit(struct vdev_op *op, const void *arg, const char *fn) {
  const struct copy_edit *c = arg;
  (void)fn;
  op->u.copy.dst = c->dst;
  op->u.copy.src = c->src;
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_graph_exec_memcpy_node_set(tecore_graph_exec_t exec,
                                                   tecore_graph_node_t node, tecore_devptr_t dst,
                                                   tecore_devptr_t src) {
  struct copy_edit c = {dst, src};
  return exec_node_edit(exec, node, VDEV_OP_MEMCPY, copy_edit, &c,
                        "vdev graph_exec_memcpy_node_set");
}

struct set_edit {
  tecore_devptr_t dst;
  uint32_t value;
};

static tecore_result_t set_edit(struct vdev_op *op, const void *arg, const char *fn) {
  const struct set_edit *e = arg;
  unsigned es = op->u.set.elem;
  if (e->dst % es)
    return TE_ERR(TECORE_ERR_INVALID, "%s: dst 0x%llx is not aligned to the node's %u-byte elements",
                  fn, (unsigned long long)e->dst, es);
  uint32_t mask = es == 4 ? 0xffffffffu : (1u << (8 * es)) - 1;
  op->u.set.dst = e->dst;
  op->u.set.value = e->value & mask;
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_graph_exec_memset_node_set(tecore_graph_exec_t exec,
                                                   tecore_graph_node_t node, tecore_devptr_t dst,
                                                   uint32_t value) {
  struct set_edit e = {dst, value};
  return exec_node_edit(exec, node, VDEV_OP_MEMSET, set_edit, &e,
                        "vdev graph_exec_memset_node_set");
}
