/* graph_owner.c -- SPDX-License-Identifier: Apache-2.0
 * Which graph a node handle belongs to, for the calls that take a graph
 * (or an executable) and a node: tecore_graph_kernel_node_args and the
 * tecore_graph_exec_*_node_set family.  A node of another graph passed
 * there was taken for a node of this one: vdev's handles are positions,
 * so graph A's node 3 edited graph B's node 3 without a word.  The check
 * lives here, above the backends, so both refuse it the same way.
 *
 * A record holds the sorted node handles of one owner:
 *   an executable  the nodes of the graph it was instantiated from, taken
 *                  when it is instantiated (an executable's node set never
 *                  changes; the driver's rule is that its nodes are named
 *                  by that graph's handles, also after an update);
 *   a graph        taken on the first check and taken again when a node
 *                  is not found (a capture into the graph appends nodes;
 *                  existing handles stay valid), so a handle is refused
 *                  only against the graph's current node list.
 * Records go when their owner is destroyed through the public calls.  An
 * owner without a record (its snapshot failed for lack of memory) is not
 * checked here; the backend's own checks still apply. */
#include "graph_owner.h"
#include <stddef.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct owner {
  const void *handle;       /* a tecore_graph_t or tecore_graph_exec_t */
  int is_exec;
  tecore_graph_node_t *nodes; /* sorted */
  int *kid;                 /* exec: nodes[i]'s kernel id once asked, -2 before */
  size_t n;
};

static pthread_mutex_t owner_lock = PTHREAD_MUTEX_INITIALIZER;
static struct owner *owners;
static size_t nowners, capowners;

static int cmp_node(const void *a, const void *b) {
  uintptr_t x = (uintptr_t) * (const tecore_graph_node_t *)a;
  uintptr_t y = (uintptr_t) * (const tecore_graph_node_t *)b;
  return x < y ? -1 : x > y;
}

/* The node handles of graph, sorted, in a fresh array (*n of them; NULL
 * with *n 0 for an empty graph).  The caller frees it. */
static tecore_result_t snapshot(const struct te_device_ops *o, tecore_graph_t graph,
                                tecore_graph_node_t **out, size_t *n) {
  size_t count = 0;
  TE_CHECK(o->graph_node_handles(graph, NULL, 0, &count));
  tecore_graph_node_t *h = NULL;
  if (count) {
    h = malloc(count * sizeof *h);
    if (!h) return TE_ERR(TECORE_ERR_NOMEM, "graph node list: out of host memory");
    size_t got = 0;
    tecore_result_t r = o->graph_node_handles(graph, h, count, &got);
    if (r != TECORE_SUCCESS) {
      free(h);
      return r;
    }
    if (got < count) count = got;
    qsort(h, count, sizeof *h, cmp_node);
  }
  *out = h;
  *n = count;
  return TECORE_SUCCESS;
}

static struct owner *find_locked(const void *handle, int is_exec) {
  for (size_t i = 0; i < nowners; i++)
    if (owners[i].handle == handle && owners[i].is_exec == is_exec) return &owners[i];
  return NULL;
}

/* Replaces (or adds) handle's record with nodes (taken over). */
static void put_locked(const void *handle, int is_exec, tecore_graph_node_t *nodes, size_t n) {
  struct owner *w = find_locked(handle, is_exec);
  if (!w) {
    if (nowners == capowners) {
      size_t ncap = capowners ? capowners * 2 : 32;
      struct owner *g = realloc(owners, ncap * sizeof *g);
      if (!g) {
        free(nodes); /* no record: this owner goes unchecked */
        return;
      }
      owners = g;
      capowners = ncap;
    }
    w = &owners[nowners++];
    w->handle = handle;
    w->is_exec = is_exec;
    w->nodes = NULL;
    w->kid = NULL;
  }
  free(w->nodes);
  free(w->kid);
  w->nodes = nodes;
  w->kid = NULL;
  w->n = n;
  if (is_exec && n) {
    w->kid = malloc(n * sizeof *w->kid);
    for (size_t i = 0; w->kid && i < n; i++) w->kid[i] = -2;
  }
}

/* Index of node in w's list, or -1. */
static ptrdiff_t index_locked(const struct owner *w, tecore_graph_node_t node) {
  const tecore_graph_node_t *f =
      w->n ? bsearch(&node, w->nodes, w->n, sizeof node, cmp_node) : NULL;
  return f ? f - w->nodes : -1;
}

static int has_locked(const struct owner *w, tecore_graph_node_t node) {
  return index_locked(w, node) >= 0;
}

void te_graph_owner_exec_add(const struct te_device_ops *o, tecore_graph_exec_t exec,
                             tecore_graph_t graph) {
  tecore_graph_node_t *h = NULL;
  size_t n = 0;
  if (snapshot(o, graph, &h, &n) != TECORE_SUCCESS) {
    tecore_clear_error(); /* the instantiation succeeded; only the check is lost */
    return;
  }
  pthread_mutex_lock(&owner_lock);
  put_locked(exec, 1, h, n);
  pthread_mutex_unlock(&owner_lock);
}

void te_graph_owner_fini(void) {
  pthread_mutex_lock(&owner_lock);
  for (size_t i = 0; i < nowners; i++) {
    free(owners[i].nodes);
    free(owners[i].kid);
  }
  free(owners);
  owners = NULL;
  nowners = capowners = 0;
  pthread_mutex_unlock(&owner_lock);
}

void te_graph_owner_forget(const void *handle, int is_exec) {
  pthread_mutex_lock(&owner_lock);
  struct owner *w = find_locked(handle, is_exec);
  if (w) {
    free(w->nodes);
    free(w->kid);
    *w = owners[--nowners];
  }
  pthread_mutex_unlock(&owner_lock);
}

tecore_result_t te_graph_owner_check_exec(tecore_graph_exec_t exec, tecore_graph_node_t node,
                                          const char *fn) {
  pthread_mutex_lock(&owner_lock);
  const struct owner *w = find_locked(exec, 1);
  int ok = !w || has_locked(w, node);
  size_t n = w ? w->n : 0;
  pthread_mutex_unlock(&owner_lock);
  if (ok) return TECORE_SUCCESS;
  return TE_ERR(TECORE_ERR_INVALID,
                "%s: node %p is not a node of the graph exec %p was instantiated from (%zu "
                "nodes): a node of another graph?",
                fn, (void *)node, (void *)exec, n);
}

tecore_result_t te_graph_owner_exec_kernel_id(const struct te_device_ops *o,
                                             tecore_graph_exec_t exec, tecore_graph_node_t node,
                                             int *id) {
  pthread_mutex_lock(&owner_lock);
  const struct owner *w = find_locked(exec, 1);
  ptrdiff_t i = w ? index_locked(w, node) : -1;
  int k = i >= 0 && w->kid ? w->kid[i] : -2;
  pthread_mutex_unlock(&owner_lock);
  if (k != -2) {
    *id = k;
    return TECORE_SUCCESS;
  }
  TE_CHECK(o->graph_exec_node_kernel_id(exec, node, &k));
  if (i >= 0) {
    pthread_mutex_lock(&owner_lock);
    struct owner *v = find_locked(exec, 1);
    if (v && v->kid && (size_t)i < v->n && v->nodes[i] == node) v->kid[i] = k;
    pthread_mutex_unlock(&owner_lock);
  }
  *id = k;
  return TECORE_SUCCESS;
}

tecore_result_t te_graph_owner_check_graph(const struct te_device_ops *o, tecore_graph_t graph,
                                           tecore_graph_node_t node, const char *fn) {
  pthread_mutex_lock(&owner_lock);
  const struct owner *w = find_locked(graph, 0);
  int ok = w && has_locked(w, node);
  pthread_mutex_unlock(&owner_lock);
  if (ok) return TECORE_SUCCESS;
  /* first look, or the graph grew since: take its node list again */
  tecore_graph_node_t *h = NULL;
  size_t n = 0;
  TE_CHECK(snapshot(o, graph, &h, &n));
  ok = n && bsearch(&node, h, n, sizeof node, cmp_node) != NULL;
  pthread_mutex_lock(&owner_lock);
  put_locked(graph, 0, h, n);
  pthread_mutex_unlock(&owner_lock);
  if (ok) return TECORE_SUCCESS;
  return TE_ERR(TECORE_ERR_INVALID,
                "%s: node %p is not a node of graph %p (%zu nodes): a node of another graph?", fn,
                (void *)node, (void *)graph, n);
}
