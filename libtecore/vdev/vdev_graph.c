/* SPDX-License-Identifier: Apache-2.0 */
/* vdev_graph.c -- vdev graphs: a list of nodes (an op and the indices of
 * the earlier nodes it depends on), built by capture and changed after
 * that only by a capture into the graph (which appends) and by a memset
 * node turned into a kernel node in place; destroy, node
 * count, the node list and a kernel node's arguments, and the Graphviz
 * DOT dump. */
#include "vdev/vdev.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void graph_obj_free(struct vdev_obj *o) {
  struct vdev_graph *g = (struct vdev_graph *)o;
  for (size_t i = 0; i < g->count; i++) {
    te_vdev_op_release(&g->nodes[i].op);
    te_vdev_deps_free(&g->nodes[i].deps);
  }
  free(g->nodes);
  te_vdev_obj_free_memory(g);
}

struct vdev_graph *te_vdev_graph_new(void) {
  static uint32_t next_serial;
  struct vdev_graph *g = calloc(1, sizeof *g);
  if (!g) return NULL;
  te_vdev_obj_init(&g->obj, VDEV_KIND_GRAPH, graph_obj_free);
  do g->serial = __atomic_add_fetch(&next_serial, 1, __ATOMIC_RELAXED);
  while (!g->serial); /* 0 after 2^32 graphs: handles must differ from positions alone */
  return g;
}

void te_vdev_graph_free(struct vdev_graph *g) {
  if (g) te_vdev_obj_unref(&g->obj);
}

void te_vdev_graph_truncate(struct vdev_graph *g, size_t count) {
  while (g->count > count) {
    struct vdev_node *n = &g->nodes[--g->count];
    te_vdev_op_release(&n->op);
    te_vdev_deps_free(&n->deps);
  }
}

tecore_result_t te_vdev_graph_add(struct vdev_graph *g, struct vdev_op *op,
                                  const struct vdev_deps *deps, size_t *index) {
  if (g->count == g->cap) {
    size_t ncap = g->cap ? g->cap * 2 : 16;
    struct vdev_node *nn = realloc(g->nodes, ncap * sizeof *nn);
    if (!nn) goto nomem;
    g->nodes = nn;
    g->cap = ncap;
  }
  struct vdev_node *n = &g->nodes[g->count];
  memset(n, 0, sizeof *n);
  if (te_vdev_deps_copy(&n->deps, deps) != 0) {
    te_vdev_deps_free(&n->deps);
    goto nomem;
  }
  n->op = *op;
  *index = g->count++;
  return TECORE_SUCCESS;
nomem:
  te_vdev_op_release(op);
  return TE_ERR(TECORE_ERR_NOMEM, "vdev: out of host memory adding a graph node");
}

static tecore_result_t graph_get(tecore_graph_t h, struct vdev_graph **g, const char *fn) {
  struct vdev_obj *o = te_vdev_obj_get(h, VDEV_KIND_GRAPH);
  if (!o)
    return TE_ERR(TECORE_ERR_INVALID, "%s: graph %p is not a live vdev graph (destroyed?)", fn,
                  (void *)h);
  *g = (struct vdev_graph *)o;
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_graph_destroy(tecore_graph_t h) {
  struct vdev_graph *g = NULL;
  TE_CHECK(graph_get(h, &g, "vdev graph_destroy"));
  pthread_mutex_lock(&te_vdev_cap_lock);
  int capturing = g->capturing;
  pthread_mutex_unlock(&te_vdev_cap_lock);
  if (capturing) {
    te_vdev_obj_unref(&g->obj);
    return TE_ERR(TECORE_ERR_CAPTURE,
                  "vdev graph_destroy: graph %p is being captured into; end that capture first",
                  (void *)h);
  }
  int was = te_vdev_obj_unregister(&g->obj);
  te_vdev_obj_unref(&g->obj);
  if (!was)
    return TE_ERR(TECORE_ERR_INVALID, "vdev graph_destroy: graph %p is already destroyed",
                  (void *)h);
  te_vdev_obj_unref(&g->obj);
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_graph_node_count(tecore_graph_t h, size_t *count) {
  struct vdev_graph *g = NULL;
  TE_CHECK(graph_get(h, &g, "vdev graph_node_count"));
  *count = g->count;
  te_vdev_obj_unref(&g->obj);
  return TECORE_SUCCESS;
}

static tecore_graph_node_type_t node_type(enum vdev_op_type t) {
  switch (t) {
  case VDEV_OP_EMPTY: return TECORE_GRAPH_NODE_EMPTY;
  case VDEV_OP_KERNEL: return TECORE_GRAPH_NODE_KERNEL;
  case VDEV_OP_MEMCPY: return TECORE_GRAPH_NODE_MEMCPY;
  case VDEV_OP_MEMSET: return TECORE_GRAPH_NODE_MEMSET;
  case VDEV_OP_WRITE_VALUE:
  case VDEV_OP_WAIT_VALUE: return TECORE_GRAPH_NODE_BATCH_MEM_OP;
  case VDEV_OP_EVENT_RECORD: return TECORE_GRAPH_NODE_EVENT_RECORD;
  case VDEV_OP_EVENT_WAIT: return TECORE_GRAPH_NODE_WAIT_EVENT;
  case VDEV_OP_CHILD_GRAPH: return TECORE_GRAPH_NODE_GRAPH;
  default: return TECORE_GRAPH_NODE_OTHER;
  }
}

tecore_result_t te_vdev_graph_nodes(tecore_graph_t h, struct tecore_graph_node_desc *nodes,
                                    size_t max, size_t *count) {
  struct vdev_graph *g = NULL;
  TE_CHECK(graph_get(h, &g, "vdev graph_nodes"));
  for (size_t i = 0; i < g->count && i < max; i++) {
    const struct vdev_op *op = &g->nodes[i].op;
    struct tecore_graph_node_desc *d = &nodes[i];
    memset(d, 0, sizeof *d);
    d->node = VDEV_NODE_HANDLE(g->serial, i);
    d->type = node_type(op->type);
    d->kernel_id = -1;
    switch (op->type) {
    case VDEV_OP_KERNEL:
      d->kernel_id = op->u.kernel.id;
      d->cfg = op->u.kernel.cfg;
      break;
    case VDEV_OP_MEMCPY:
      d->dst = op->u.copy.dst;
      d->src = op->u.copy.src;
      d->bytes = op->u.copy.bytes;
      break;
    case VDEV_OP_MEMSET:
      d->dst = op->u.set.dst;
      d->value = op->u.set.value;
      d->elem_size = op->u.set.elem;
      d->count = op->u.set.count;
      break;
    default:
      break;
    }
  }
  *count = g->count;
  te_vdev_obj_unref(&g->obj);
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_graph_node_handles(tecore_graph_t h, tecore_graph_node_t *nodes,
                                           size_t max, size_t *count) {
  struct vdev_graph *g = NULL;
  TE_CHECK(graph_get(h, &g, "vdev graph_node_handles"));
  for (size_t i = 0; i < g->count && i < max; i++) nodes[i] = VDEV_NODE_HANDLE(g->serial, i);
  *count = g->count;
  te_vdev_obj_unref(&g->obj);
  return TECORE_SUCCESS;
}

/* TECORE_SUCCESS when node is a node of g (handle h) of the op type
 * `type` (named `what` in the message). */
static tecore_result_t node_of_type(const struct vdev_graph *g, tecore_graph_t h,
                                    tecore_graph_node_t node, int type, const char *what,
                                    const char *fn) {
  size_t i = VDEV_NODE_INDEX(node);
  if (i >= g->count || VDEV_NODE_SERIAL(node) != g->serial)
    return TE_ERR(TECORE_ERR_INVALID, "%s: node %p is not a node of graph %p (%zu nodes)", fn,
                  (void *)node, (void *)h, g->count);
  if ((int)g->nodes[i].op.type != type)
    return TE_ERR(TECORE_ERR_INVALID, "%s: node %zu is a %s node, not a %s node", fn, i,
                  te_vdev_op_name(g->nodes[i].op.type), what);
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_graph_kernel_node_args(tecore_graph_t h, tecore_graph_node_t node,
                                               void *const *args) {
  static const char fn[] = "vdev graph_kernel_node_args";
  struct vdev_graph *g = NULL;
  TE_CHECK(graph_get(h, &g, fn));
  size_t i = VDEV_NODE_INDEX(node);
  tecore_result_t r = node_of_type(g, h, node, VDEV_OP_KERNEL, "kernel", fn);
  if (r == TECORE_SUCCESS) {
    const struct vdev_op *op = &g->nodes[i].op;
    const struct tecore_kernel_def *def = op->u.kernel.def;
    for (unsigned p = 0; p < def->nparams && r == TECORE_SUCCESS; p++)
      if (!args[p])
        r = TE_ERR(TECORE_ERR_INVALID, "%s: kernel %s: args[%u] is NULL", fn, def->name, p);
    for (unsigned p = 0; p < def->nparams && r == TECORE_SUCCESS; p++)
      memcpy(args[p], op->u.kernel.args + te_vdev_arg_offset(def, p), def->param_size[p]);
  }
  te_vdev_obj_unref(&g->obj);
  return r;
}

/* In place: the node keeps its position, so its dependencies, its
 * dependents (which name it by position) and its handle stay. */
tecore_result_t te_vdev_graph_node_to_kernel(tecore_graph_t h, tecore_graph_node_t node,
                                             struct te_kernel_entry *k,
                                             struct te_kernel_module *mod,
                                             const struct tecore_launch_cfg *cfg,
                                             void *const *args, tecore_graph_node_t *out) {
  static const char fn[] = "vdev graph_node_to_kernel";
  struct vdev_graph *g = NULL;
  (void)mod;
  TE_CHECK(graph_get(h, &g, fn));
  size_t i = VDEV_NODE_INDEX(node);
  int copy = i < g->count && g->nodes[i].op.type == VDEV_OP_MEMCPY;
  tecore_result_t r = node_of_type(g, h, node, copy ? VDEV_OP_MEMCPY : VDEV_OP_MEMSET,
                                   "memset or memcpy", fn);
  struct vdev_op op;
  if (r == TECORE_SUCCESS && (r = te_vdev_kernel_op(k, cfg, args, &op, fn)) == TECORE_SUCCESS) {
    te_vdev_op_release(&g->nodes[i].op);
    g->nodes[i].op = op;
    *out = node;
  }
  te_vdev_obj_unref(&g->obj);
  return r;
}

/* Writes s as the inside of a DOT double-quoted string (the "\n" line
 * breaks in labels are kept; quotes are escaped). */
static void dot_string(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '"') fputs("\\\"", f);
    else if (*s == '\n') fputs("\\n", f);
    else fputc(*s, f);
  }
}

tecore_result_t te_vdev_graph_dot(tecore_graph_t h, const char *path) {
  static const char fn[] = "vdev graph_dot";
  struct vdev_graph *g = NULL;
  TE_CHECK(graph_get(h, &g, fn));
  FILE *f = fopen(path, "w");
  if (!f) {
    tecore_result_t r = TE_ERR(TECORE_ERR_SYSTEM, "%s: cannot open %s for writing", fn, path);
    te_vdev_obj_unref(&g->obj);
    return r;
  }
  fprintf(f, "digraph te_graph {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\"];\n");
  fprintf(f, "  label=\"vdev graph, %zu nodes\";\n", g->count);
  char label[512];
  for (size_t i = 0; i < g->count; i++) {
    te_vdev_op_label(&g->nodes[i].op, label, sizeof label);
    fprintf(f, "  n%zu [label=\"", i);
    dot_string(f, label);
    fprintf(f, "\"];\n");
  }
  for (size_t i = 0; i < g->count; i++)
    for (size_t d = 0; d < g->nodes[i].deps.n; d++)
      fprintf(f, "  n%zu -> n%zu;\n", g->nodes[i].deps.v[d], i);
  fprintf(f, "}\n");
  int bad = ferror(f);
  if (fclose(f) != 0) bad = 1;
  te_vdev_obj_unref(&g->obj);
  if (bad) return TE_ERR(TECORE_ERR_SYSTEM, "%s: writing %s failed", fn, path);
  return TECORE_SUCCESS;
}
