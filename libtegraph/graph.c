/* SPDX-License-Identifier: Apache-2.0 */
/* graph.c -- tegraph_graph: one graph and its executable over the device
 * layer.  A capture replaces the graph (or appends to it); an existing
 * executable is then updated as a whole (tecore_graph_exec_update), and
 * instantiated anew where the driver refuses.  Kernel arguments are read
 * and set per node through the node table (nodes.c), loaded on first use
 * and dropped whenever the graph or the executable is replaced.  After a
 * whole-graph update the executable's nodes are still named by the graph
 * it was instantiated from, which is kept (inst) as long as it is.  A
 * captured graph's memset nodes become kernel nodes before anything else
 * sees it (TEGRAPH_MEMSET_KERNELS). */
#include "tg_internal.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tegraph_graph {
  unsigned flags;                 /* instantiate flags */
  tecore_graph_t graph;
  tecore_graph_exec_t exec;
  tecore_graph_t inst;            /* the graph exec was instantiated from, when a
                                     whole-graph update gave exec a newer graph's
                                     values (its nodes name exec's nodes); else NULL */
  tecore_stream_t cap_stream;     /* the capture in progress, or NULL */
  int cap_append;
  struct tg_nodes *nodes;         /* NULL until needed */
};

TECORE_TUNABLE_INT(tg_memset_kernels, "TEGRAPH_MEMSET_KERNELS", 1, 0, 1,
                   "libtegraph: 1 = a captured graph's memset nodes (a library's, such as "
                   "cuBLASLt's split-K counter clears, or the caller's) become te_memset kernel "
                   "nodes, so the graph is kernel nodes only and launches on the driver's fast "
                   "path; 0 = keep them")
TECORE_TUNABLE_INT(tg_copy_kernels, "TEGRAPH_COPY_KERNELS", 262144, 0, 1 << 30,
                   "libtegraph: a captured graph's copies within the device, and those of at "
                   "most this many bytes between device memory and pinned host memory, become "
                   "te_copy kernel nodes, as memsets do (a step's tokens in, its losses out); "
                   "larger host copies stay on the copy engines, where they overlap kernels; "
                   "0 = keep every copy node")

/* One libtecore replacement pass; done counts the nodes it replaced. */
static tegraph_result_t to_kernels(tecore_result_t r, size_t done, const char *what,
                                   const char *fn) {
  if (r != TECORE_SUCCESS) {
    char msg[128];
    snprintf(msg, sizeof msg, "%s: replacing the captured graph's %s nodes", fn, what);
    return tg_core(r, msg);
  }
  if (done)
    tecore_log(TECORE_LOG_TRACE, TECORE_SUBSYS_GRAPH, __FILE__, __LINE__,
               "%s: %zu %s nodes of the captured graph are kernel nodes now", fn, done, what);
  return TEGRAPH_SUCCESS;
}

tegraph_result_t tg_graph_to_kernels(tecore_graph_t graph, const char *fn) {
  size_t done = 0;
  if (tecore_tunable_int(&tg_memset_kernels)) {
    tegraph_result_t res =
        to_kernels(tecore_graph_memsets_to_kernels(graph, &done), done, "memset", fn);
    if (res != TEGRAPH_SUCCESS) return res;
  }
  int max = tecore_tunable_int(&tg_copy_kernels);
  if (max <= 0) return TEGRAPH_SUCCESS;
  done = 0;
  return to_kernels(tecore_graph_copies_to_kernels(graph, (size_t)max, SIZE_MAX, &done), done,
                    "memcpy", fn);
}

#define INST_FLAGS                                                                   \
  (TEGRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH | TEGRAPH_INSTANTIATE_UPLOAD |            \
   TEGRAPH_INSTANTIATE_DEVICE_LAUNCH | TEGRAPH_INSTANTIATE_USE_NODE_PRIORITY)

TE_EXPORT tegraph_result_t tegraph_graph_create(unsigned instantiate_flags, tegraph_graph_t **g) {
  TG_ARG(g, "tegraph_graph_create: g is NULL");
  TG_ARG(!(instantiate_flags & ~INST_FLAGS), "tegraph_graph_create: unknown instantiate flags 0x%x",
         instantiate_flags & ~INST_FLAGS);
  TG_ARG(!(instantiate_flags & TEGRAPH_INSTANTIATE_DEVICE_LAUNCH) ||
             !(instantiate_flags & TEGRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH),
         "tegraph_graph_create: TEGRAPH_INSTANTIATE_DEVICE_LAUNCH does not go with "
         "AUTO_FREE_ON_LAUNCH");
  *g = calloc(1, sizeof **g);
  if (!*g) return TG_ERR(TEGRAPH_ERR_NOMEM, "tegraph_graph_create: out of host memory");
  (*g)->flags = instantiate_flags;
  return TEGRAPH_SUCCESS;
}

static void drop_nodes(struct tegraph_graph *g) {
  tg_nodes_free(g->nodes);
  g->nodes = NULL;
}

TE_EXPORT tegraph_result_t tegraph_graph_destroy(tegraph_graph_t *g) {
  static const char fn[] = "tegraph_graph_destroy";
  TG_ARG(g, "%s: g is NULL", fn);
  if (g->cap_stream)
    return TG_ERR(TEGRAPH_ERR_STATE, "%s: g is capturing on stream %p; end the capture first", fn,
                  (void *)g->cap_stream);
  drop_nodes(g);
  tegraph_result_t res = TEGRAPH_SUCCESS;
  if (g->exec) {
    tecore_result_t r = tecore_graph_exec_destroy(g->exec);
    if (r != TECORE_SUCCESS) res = tg_core(r, fn);
  }
  if (g->graph) {
    tecore_result_t r = tecore_graph_destroy(g->graph);
    if (r != TECORE_SUCCESS && res == TEGRAPH_SUCCESS) res = tg_core(r, fn);
  }
  if (g->inst) (void)tecore_graph_destroy(g->inst);
  free(g);
  return res;
}

TE_EXPORT tegraph_result_t tegraph_graph_begin_capture(tegraph_graph_t *g, tecore_stream_t stream,
                                                       tecore_capture_mode_t mode,
                                                       unsigned flags) {
  static const char fn[] = "tegraph_graph_begin_capture";
  TG_ARG(g, "%s: g is NULL", fn);
  TG_ARG(stream, "%s: stream is NULL (the legacy default stream cannot capture)", fn);
  TG_ARG(mode >= TECORE_CAPTURE_GLOBAL && mode <= TECORE_CAPTURE_RELAXED,
         "%s: unknown capture mode %d", fn, (int)mode);
  TG_ARG(!(flags & ~TEGRAPH_CAPTURE_APPEND), "%s: unknown flags 0x%x", fn,
         flags & ~TEGRAPH_CAPTURE_APPEND);
  if (g->cap_stream)
    return TG_ERR(TEGRAPH_ERR_STATE, "%s: g already captures on stream %p", fn,
                  (void *)g->cap_stream);
  int append = (flags & TEGRAPH_CAPTURE_APPEND) && g->graph;
  if (append) TG_CORE(tecore_stream_begin_capture_to_graph(stream, g->graph, mode), fn);
  else TG_CORE(tecore_stream_begin_capture(stream, mode), fn);
  g->cap_stream = stream;
  g->cap_append = append;
  return TEGRAPH_SUCCESS;
}

static tegraph_result_t instantiate(struct tegraph_graph *g, tecore_stream_t upload,
                                    tecore_graph_exec_t *out, const char *fn) {
  TG_CORE(tecore_graph_instantiate_with_flags(out, g->graph, g->flags, upload), fn);
  return TEGRAPH_SUCCESS;
}

/* A new executable from g->graph: the old instantiation graph goes. */
static void set_exec(struct tegraph_graph *g, tecore_graph_exec_t fresh) {
  if (g->exec) (void)tecore_graph_exec_destroy(g->exec);
  g->exec = fresh;
  if (g->inst) (void)tecore_graph_destroy(g->inst);
  g->inst = NULL;
}

/* Brings g's executable (if any) up to g's graph: whole-graph update, or a
 * new instance where the driver refuses.  old: the graph g had before the
 * capture (NULL for an appending capture); kept as inst when the exec was
 * instantiated from it and is only updated, else destroyed. */
static tegraph_result_t refresh_exec(struct tegraph_graph *g, tecore_graph_t old,
                                     struct tegraph_update_info *info, const char *fn) {
  info->had_exec = g->exec != NULL;
  if (!g->exec) {
    if (old) (void)tecore_graph_destroy(old);
    return TEGRAPH_SUCCESS;
  }
  tecore_graph_update_result_t why = TECORE_GRAPH_UPDATE_SUCCESS;
  tecore_result_t r = tecore_graph_exec_update(g->exec, g->graph, &why);
  info->why = why;
  if (r == TECORE_SUCCESS) {
    info->updated = 1;
    if (old && !g->inst) g->inst = old; /* exec's nodes are old's */
    else if (old) (void)tecore_graph_destroy(old);
    return TEGRAPH_SUCCESS;
  }
  if (r != TECORE_ERR_GRAPH_UPDATE) {
    /* the exec keeps running what it ran: keep what names its nodes */
    if (old && !g->inst) g->inst = old;
    else if (old) (void)tecore_graph_destroy(old);
    return tg_core(r, fn);
  }
  tecore_log(TECORE_LOG_INFO, TECORE_SUBSYS_GRAPH, __FILE__, __LINE__,
             "%s: whole-graph update refused (%s); instantiating anew", fn,
             tecore_graph_update_result_name(why));
  tecore_graph_exec_t fresh = NULL;
  tegraph_result_t res = instantiate(g, g->cap_stream, &fresh, fn);
  if (res != TEGRAPH_SUCCESS) {
    if (old && !g->inst) g->inst = old;
    else if (old) (void)tecore_graph_destroy(old);
    return res;
  }
  set_exec(g, fresh);
  if (old) (void)tecore_graph_destroy(old);
  info->reinstantiated = 1;
  return TEGRAPH_SUCCESS;
}

TE_EXPORT tegraph_result_t tegraph_graph_end_capture(tegraph_graph_t *g,
                                                     struct tegraph_update_info *info) {
  static const char fn[] = "tegraph_graph_end_capture";
  struct tegraph_update_info local;
  TG_ARG(g, "%s: g is NULL", fn);
  if (!info) info = &local;
  memset(info, 0, sizeof *info);
  if (!g->cap_stream) return TG_ERR(TEGRAPH_ERR_STATE, "%s: g is not capturing", fn);
  tecore_stream_t s = g->cap_stream;
  tecore_graph_t ng = NULL;
  tecore_result_t r = tecore_stream_end_capture(s, &ng);
  g->cap_stream = NULL;
  if (r != TECORE_SUCCESS) {
    char what[96];
    snprintf(what, sizeof what, "%s: the capture on stream %p failed", fn, (void *)s);
    tegraph_result_t res = tg_core(r, what);
    return res == TEGRAPH_ERR_INVALID ? TEGRAPH_ERR_CAPTURE : res;
  }
  drop_nodes(g);
  tegraph_result_t mres = tg_graph_to_kernels(ng, fn);
  if (mres != TEGRAPH_SUCCESS) {
    if (ng != g->graph) (void)tecore_graph_destroy(ng);
    return mres;
  }
  tecore_graph_t old = NULL;
  if (!g->cap_append) {
    old = g->graph;
    g->graph = ng;
  }
  g->cap_stream = s; /* the upload stream of a re-instantiation */
  tegraph_result_t res = refresh_exec(g, old, info, fn);
  g->cap_stream = NULL;
  return res;
}

TE_EXPORT tegraph_result_t tegraph_graph_instantiate(tegraph_graph_t *g,
                                                     tecore_stream_t upload_stream) {
  static const char fn[] = "tegraph_graph_instantiate";
  TG_ARG(g, "%s: g is NULL", fn);
  if (g->cap_stream) return TG_ERR(TEGRAPH_ERR_STATE, "%s: g is capturing", fn);
  if (!g->graph) return TG_ERR(TEGRAPH_ERR_STATE, "%s: g has no graph yet (capture first)", fn);
  tecore_graph_exec_t fresh = NULL;
  TG_CHECK(instantiate(g, upload_stream, &fresh, fn));
  set_exec(g, fresh);
  drop_nodes(g); /* the new executable runs the graph's values */
  return TEGRAPH_SUCCESS;
}

/* The executable, instantiated on first need. */
static tegraph_result_t need_exec(struct tegraph_graph *g, tecore_stream_t s, const char *fn) {
  if (g->cap_stream) return TG_ERR(TEGRAPH_ERR_STATE, "%s: g is capturing", fn);
  if (!g->graph) return TG_ERR(TEGRAPH_ERR_STATE, "%s: g has no graph yet (capture first)", fn);
  if (!g->exec) {
    TG_CHECK(instantiate(g, s, &g->exec, fn));
    drop_nodes(g);
  }
  return TEGRAPH_SUCCESS;
}

TE_EXPORT tegraph_result_t tegraph_graph_launch(tegraph_graph_t *g, tecore_stream_t stream) {
  static const char fn[] = "tegraph_graph_launch";
  TG_ARG(g, "%s: g is NULL", fn);
  TG_CHECK(need_exec(g, stream, fn));
  if (g->flags & TEGRAPH_INSTANTIATE_DEVICE_LAUNCH)
    TG_CORE(tecore_graph_launch_device(g->exec, stream), fn);   /* a capture refuses it */
  else
    TG_CORE(tecore_graph_launch(g->exec, stream), fn);
  return TEGRAPH_SUCCESS;
}

TE_EXPORT tegraph_result_t tegraph_graph_upload(tegraph_graph_t *g, tecore_stream_t stream) {
  static const char fn[] = "tegraph_graph_upload";
  TG_ARG(g, "%s: g is NULL", fn);
  TG_CHECK(need_exec(g, stream, fn));
  TG_CORE(tecore_graph_upload(g->exec, stream), fn);
  return TEGRAPH_SUCCESS;
}

TE_EXPORT tegraph_result_t tegraph_graph_node_count(tegraph_graph_t *g, size_t *count) {
  static const char fn[] = "tegraph_graph_node_count";
  TG_ARG(g, "%s: g is NULL", fn);
  TG_ARG(count, "%s: count is NULL", fn);
  *count = 0;
  if (g->cap_stream) return TG_ERR(TEGRAPH_ERR_STATE, "%s: g is capturing", fn);
  if (!g->graph) return TEGRAPH_SUCCESS;
  TG_CORE(tecore_graph_node_count(g->graph, count), fn);
  return TEGRAPH_SUCCESS;
}

TE_EXPORT tegraph_result_t tegraph_graph_dot(tegraph_graph_t *g, const char *path) {
  static const char fn[] = "tegraph_graph_dot";
  TG_ARG(g, "%s: g is NULL", fn);
  TG_ARG(path && path[0], "%s: path is NULL or empty", fn);
  if (g->cap_stream) return TG_ERR(TEGRAPH_ERR_STATE, "%s: g is capturing", fn);
  if (!g->graph) return TG_ERR(TEGRAPH_ERR_STATE, "%s: g has no graph yet (capture first)", fn);
  TG_CORE(tecore_graph_dot(g->graph, path), fn);
  return TEGRAPH_SUCCESS;
}

TE_EXPORT tegraph_result_t tegraph_graph_handles(tegraph_graph_t *g, tecore_graph_t *graph,
                                                 tecore_graph_exec_t *exec) {
  TG_ARG(g, "tegraph_graph_handles: g is NULL");
  if (graph) *graph = g->graph;
  if (exec) *exec = g->exec;
  return TEGRAPH_SUCCESS;
}

/* The node table of the current graph (and executable). */
static tegraph_result_t need_nodes(struct tegraph_graph *g, const char *fn) {
  if (g->cap_stream) return TG_ERR(TEGRAPH_ERR_STATE, "%s: g is capturing", fn);
  if (!g->graph) return TG_ERR(TEGRAPH_ERR_STATE, "%s: g has no graph yet (capture first)", fn);
  if (!g->nodes) {
    TG_CHECK(tg_nodes_load(g->graph, &g->nodes, fn));
    tegraph_result_t res = g->inst ? tg_nodes_rehandle(g->nodes, g->inst, fn) : TEGRAPH_SUCCESS;
    if (res != TEGRAPH_SUCCESS) {
      drop_nodes(g);
      return res;
    }
  }
  return TEGRAPH_SUCCESS;
}

TE_EXPORT tegraph_result_t tegraph_graph_kernel_nodes(tegraph_graph_t *g,
                                                      struct tegraph_kernel_node *nodes,
                                                      size_t max, size_t *count) {
  static const char fn[] = "tegraph_graph_kernel_nodes";
  TG_ARG(g, "%s: g is NULL", fn);
  TG_ARG(count, "%s: count is NULL", fn);
  TG_ARG(nodes || max == 0, "%s: nodes is NULL but max is %zu", fn, max);
  *count = 0;
  TG_CHECK(need_nodes(g, fn));
  for (size_t i = 0; i < g->nodes->nk && i < max; i++) {
    const struct tg_knode *k = &g->nodes->k[i];
    nodes[i] = (struct tegraph_kernel_node){.node = k->node, .kernel_id = k->kernel_id,
                                            .name = k->def->name, .nparams = k->def->nparams,
                                            .cfg = k->cfg};
  }
  *count = g->nodes->nk;
  return TEGRAPH_SUCCESS;
}

static tegraph_result_t check_arg(struct tegraph_graph *g, size_t k, unsigned param, size_t bytes,
                                  const char *fn) {
  TG_ARG(k < g->nodes->nk, "%s: kernel node %zu outside [0, %zu)", fn, k, g->nodes->nk);
  const struct tecore_kernel_def *def = g->nodes->k[k].def;
  TG_ARG(param < def->nparams, "%s: kernel %s has %u parameters; param %u does not exist", fn,
         def->name, def->nparams, param);
  TG_ARG(bytes == def->param_size[param], "%s: kernel %s parameter %u has %u bytes, not %zu", fn,
         def->name, param, (unsigned)def->param_size[param], bytes);
  return TEGRAPH_SUCCESS;
}

TE_EXPORT tegraph_result_t tegraph_graph_kernel_arg(tegraph_graph_t *g, size_t k, unsigned param,
                                                    void *value, size_t bytes) {
  static const char fn[] = "tegraph_graph_kernel_arg";
  TG_ARG(g, "%s: g is NULL", fn);
  TG_ARG(value, "%s: value is NULL", fn);
  TG_CHECK(need_nodes(g, fn));
  TG_CHECK(check_arg(g, k, param, bytes, fn));
  const struct tg_knode *kn = &g->nodes->k[k];
  memcpy(value, kn->vals + kn->off[param], bytes);
  return TEGRAPH_SUCCESS;
}

TE_EXPORT tegraph_result_t tegraph_graph_set_kernel_arg(tegraph_graph_t *g, size_t k,
                                                        unsigned param, const void *value,
                                                        size_t bytes) {
  static const char fn[] = "tegraph_graph_set_kernel_arg";
  TG_ARG(g, "%s: g is NULL", fn);
  TG_ARG(value, "%s: value is NULL", fn);
  TG_CHECK(need_exec(g, NULL, fn));
  TG_CHECK(need_nodes(g, fn));
  TG_CHECK(check_arg(g, k, param, bytes, fn));
  struct tg_knode *kn = &g->nodes->k[k];
  if (kn->def->param_is_ptr[param] && bytes == 8) {
    /* a kernel reads through it at once: 0 or an address less aligned than
     * the one captured (what the kernel was written for) would fault */
    uint64_t nv, ov;
    memcpy(&nv, value, 8);
    memcpy(&ov, kn->vals + kn->off[param], 8);
    uint64_t align = ov ? (ov & (~ov + 1)) : 16;
    if (align > 16) align = 16;
    TG_ARG(nv != 0, "%s: kernel %s parameter %u is a device pointer; the new value is 0", fn,
           kn->def->name, param);
    TG_ARG(nv % align == 0,
           "%s: kernel %s parameter %u: the new pointer 0x%llx is not %llu-byte aligned as the "
           "captured one was",
           fn, kn->def->name, param, (unsigned long long)nv, (unsigned long long)align);
  }
  return tg_knode_set(g->exec, kn, param, value, fn);
}
