/* vdev_graph.c -- vdev graphs: a list of nodes (an op and the indices of
 * the earlier nodes it depends on), built by capture and immutable once
 * handed out; destroy, node count and the Graphviz DOT dump. */
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
  free(g);
}

struct vdev_graph *te_vdev_graph_new(void) {
  struct vdev_graph *g = calloc(1, sizeof *g);
  if (g) te_vdev_obj_init(&g->obj, VDEV_KIND_GRAPH, graph_obj_free);
  return g;
}

void te_vdev_graph_free(struct vdev_graph *g) {
  if (g) te_vdev_obj_unref(&g->obj);
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
  struct vdev_graph *g;
  TE_CHECK(graph_get(h, &g, "vdev graph_destroy"));
  int was = te_vdev_obj_unregister(&g->obj);
  te_vdev_obj_unref(&g->obj);
  if (!was)
    return TE_ERR(TECORE_ERR_INVALID, "vdev graph_destroy: graph %p is already destroyed",
                  (void *)h);
  te_vdev_obj_unref(&g->obj);
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_graph_node_count(tecore_graph_t h, size_t *count) {
  struct vdev_graph *g;
  TE_CHECK(graph_get(h, &g, "vdev graph_node_count"));
  *count = g->count;
  te_vdev_obj_unref(&g->obj);
  return TECORE_SUCCESS;
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
  struct vdev_graph *g;
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
