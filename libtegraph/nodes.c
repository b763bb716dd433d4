/* SPDX-License-Identifier: Apache-2.0 */
/* nodes.c -- the node table: a graph's nodes (tecore_graph_nodes), the
 * argument values of each registered kernel's node, and which nodes are
 * opaque (their memory use cannot be seen: a kernel that is not
 * registered, a child graph, a host node, a 2-D copy ...).  Per-node
 * updates of an executable go through here and keep the table equal to
 * what the executable runs. */
#include "tg_internal.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tg_nodes_free(struct tg_nodes *n) {
  if (!n) return;
  for (size_t i = 0; i < n->nk; i++) free(n->k[i].vals);
  free(n->k);
  free(n->desc);
  free(n);
}

static const char *type_name(tecore_graph_node_type_t t) {
  switch (t) {
  case TECORE_GRAPH_NODE_KERNEL: return "kernel";
  case TECORE_GRAPH_NODE_MEMCPY: return "memcpy";
  case TECORE_GRAPH_NODE_MEMSET: return "memset";
  case TECORE_GRAPH_NODE_HOST: return "host";
  case TECORE_GRAPH_NODE_GRAPH: return "child graph";
  case TECORE_GRAPH_NODE_CONDITIONAL: return "conditional";
  case TECORE_GRAPH_NODE_EXT_SEMAS_SIGNAL:
  case TECORE_GRAPH_NODE_EXT_SEMAS_WAIT: return "external semaphore";
  default: return "unknown";
  }
}

/* Why node d hides its memory use, or NULL when it does not.  Event nodes,
 * empty nodes, graph memory nodes and stream memory operations (flag
 * words) touch no tensor data. */
static const char *opaque_reason(const struct tecore_graph_node_desc *d, char *buf, size_t n) {
  switch (d->type) {
  case TECORE_GRAPH_NODE_KERNEL:
    if (d->kernel_id >= 0) return NULL;
    return "a kernel that is not registered (its parameter layout is unknown)";
  case TECORE_GRAPH_NODE_MEMCPY:
    return d->bytes ? NULL : "a memcpy that is not a 1-D linear copy";
  case TECORE_GRAPH_NODE_MEMSET:
    return d->count ? NULL : "a 2-D memset";
  case TECORE_GRAPH_NODE_EMPTY:
  case TECORE_GRAPH_NODE_WAIT_EVENT:
  case TECORE_GRAPH_NODE_EVENT_RECORD:
  case TECORE_GRAPH_NODE_MEM_ALLOC:
  case TECORE_GRAPH_NODE_MEM_FREE:
  case TECORE_GRAPH_NODE_BATCH_MEM_OP:
    return NULL;
  default:
    snprintf(buf, n, "a %s node", type_name(d->type));
    return buf;
  }
}

tegraph_result_t tg_nodes_load(tecore_graph_t graph, struct tg_nodes **out, const char *fn) {
  struct tg_nodes *n = calloc(1, sizeof *n);
  tegraph_result_t res = TEGRAPH_SUCCESS;
  tecore_result_t r;
  char what[160];
  if (!n) return TG_ERR(TEGRAPH_ERR_NOMEM, "%s: out of host memory", fn);
  snprintf(what, sizeof what, "%s: listing the graph's nodes", fn);
  r = tecore_graph_nodes(graph, NULL, 0, &n->count);
  if (r != TECORE_SUCCESS) {
    res = tg_core(r, what);
    goto fail;
  }
  n->desc = calloc(n->count ? n->count : 1, sizeof *n->desc);
  if (!n->desc) goto nomem;
  size_t got = 0;
  r = tecore_graph_nodes(graph, n->desc, n->count, &got);
  if (r != TECORE_SUCCESS) {
    res = tg_core(r, what);
    goto fail;
  }
  if (got < n->count) n->count = got;
  size_t nk = 0;
  for (size_t i = 0; i < n->count; i++) {
    char buf[64];
    const char *why = opaque_reason(&n->desc[i], buf, sizeof buf);
    if (why) {
      if (!n->opaque) snprintf(n->opaque_why, sizeof n->opaque_why, "node %zu is %s", i, why);
      n->opaque++;
    }
    if (n->desc[i].type == TECORE_GRAPH_NODE_KERNEL && n->desc[i].kernel_id >= 0) nk++;
  }
  n->k = calloc(nk ? nk : 1, sizeof *n->k);
  if (!n->k) goto nomem;
  for (size_t i = 0; i < n->count; i++) {
    const struct tecore_graph_node_desc *d = &n->desc[i];
    if (d->type != TECORE_GRAPH_NODE_KERNEL || d->kernel_id < 0) continue;
    struct tg_knode *k = &n->k[n->nk];
    k->node = i;
    k->handle = d->node;
    k->kernel_id = d->kernel_id;
    k->cfg = d->cfg;
    r = tecore_kernel_get_def(d->kernel_id, &k->def);
    if (r != TECORE_SUCCESS) {
      res = tg_core(r, what);
      goto fail;
    }
    for (unsigned p = 0; p < k->def->nparams; p++)
      k->off[p + 1] = k->off[p] + (((size_t)k->def->param_size[p] + 7) & ~(size_t)7);
    k->vals = calloc(k->off[k->def->nparams] ? k->off[k->def->nparams] : 1, 1);
    if (!k->vals) goto nomem;
    n->nk++;
    void *argv[TECORE_KERNEL_MAX_PARAMS];
    for (unsigned p = 0; p < k->def->nparams; p++) argv[p] = k->vals + k->off[p];
    r = tecore_graph_kernel_node_args(graph, k->handle, argv);
    if (r != TECORE_SUCCESS) {
      snprintf(what, sizeof what, "%s: reading the arguments of kernel %s (node %zu)", fn,
               k->def->name, i);
      res = tg_core(r, what);
      goto fail;
    }
  }
  *out = n;
  return TEGRAPH_SUCCESS;
nomem:
  res = TG_ERR(TEGRAPH_ERR_NOMEM, "%s: out of host memory", fn);
fail:
  tg_nodes_free(n);
  return res;
}

tegraph_result_t tg_nodes_rehandle(struct tg_nodes *n, tecore_graph_t inst, const char *fn) {
  size_t count = 0;
  char what[160];
  snprintf(what, sizeof what, "%s: listing the instantiated graph's nodes", fn);
  tecore_result_t r = tecore_graph_nodes(inst, NULL, 0, &count);
  if (r != TECORE_SUCCESS) return tg_core(r, what);
  if (count != n->count)
    return TG_ERR(TEGRAPH_ERR_DEVICE, "%s: the instantiated graph has %zu nodes, the updated one "
                  "%zu", fn, count, n->count);
  struct tecore_graph_node_desc *d = calloc(count ? count : 1, sizeof *d);
  if (!d) return TG_ERR(TEGRAPH_ERR_NOMEM, "%s: out of host memory", fn);
  r = tecore_graph_nodes(inst, d, count, &count);
  tegraph_result_t res = TEGRAPH_SUCCESS;
  if (r != TECORE_SUCCESS) res = tg_core(r, what);
  for (size_t i = 0; i < n->count && res == TEGRAPH_SUCCESS; i++)
    if (d[i].type != n->desc[i].type)
      res = TG_ERR(TEGRAPH_ERR_DEVICE, "%s: node %zu is a different kind of node in the "
                   "instantiated graph", fn, i);
  if (res == TEGRAPH_SUCCESS) {
    for (size_t i = 0; i < n->count; i++) n->desc[i].node = d[i].node;
    for (size_t k = 0; k < n->nk; k++) n->k[k].handle = d[n->k[k].node].node;
  }
  free(d);
  return res;
}

tegraph_result_t tg_knode_set(tecore_graph_exec_t exec, struct tg_knode *k, unsigned p,
                              const void *value, const char *fn) {
  unsigned char old[64];
  size_t size = k->def->param_size[p];
  unsigned char *heap = size > sizeof old ? malloc(size) : NULL;
  unsigned char *save = heap ? heap : old;
  if (size > sizeof old && !heap) return TG_ERR(TEGRAPH_ERR_NOMEM, "%s: out of host memory", fn);
  memcpy(save, k->vals + k->off[p], size);
  memcpy(k->vals + k->off[p], value, size);
  void *argv[TECORE_KERNEL_MAX_PARAMS];
  for (unsigned i = 0; i < k->def->nparams; i++) argv[i] = k->vals + k->off[i];
  tecore_result_t r = tecore_graph_exec_kernel_node_set(exec, k->handle, &k->cfg, argv);
  tegraph_result_t res = TEGRAPH_SUCCESS;
  if (r != TECORE_SUCCESS) {
    memcpy(k->vals + k->off[p], save, size);
    char what[160];
    snprintf(what, sizeof what, "%s: updating kernel %s (node %zu) parameter %u", fn,
             k->def->name, k->node, p);
    res = tg_core(r, what);
  }
  free(heap);
  return res;
}

tegraph_result_t tg_copy_set(tecore_graph_exec_t exec, struct tg_nodes *n, size_t i,
                             tecore_devptr_t dst, tecore_devptr_t src, const char *fn) {
  tecore_result_t r = tecore_graph_exec_memcpy_node_set(exec, n->desc[i].node, dst, src);
  if (r != TECORE_SUCCESS) {
    char what[128];
    snprintf(what, sizeof what, "%s: updating memcpy node %zu", fn, i);
    return tg_core(r, what);
  }
  n->desc[i].dst = dst;
  n->desc[i].src = src;
  return TEGRAPH_SUCCESS;
}

tegraph_result_t tg_memset_set(tecore_graph_exec_t exec, struct tg_nodes *n, size_t i,
                               tecore_devptr_t dst, uint32_t value, const char *fn) {
  tecore_result_t r = tecore_graph_exec_memset_node_set(exec, n->desc[i].node, dst, value);
  if (r != TECORE_SUCCESS) {
    char what[128];
    snprintf(what, sizeof what, "%s: updating memset node %zu", fn, i);
    return tg_core(r, what);
  }
  n->desc[i].dst = dst;
  n->desc[i].value = value;
  return TEGRAPH_SUCCESS;
}
