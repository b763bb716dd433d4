/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_graph_node.c -- the cuda backend's single-node graph operations:
 * capture appended to an existing graph (cuStreamBeginCaptureToGraph), the
 * node list with each kernel node mapped back to its registry id, a kernel
 * node's argument values, a memset node replaced by a kernel node, and
 * per-node updates of an executable graph
 * (cuGraphExec{Kernel,Memcpy,Memset}NodeSetParams).
 *
 * Kernel ids.  A registered kernel is launched as a CUkernel (cuda_kernel.c
 * stores it in te_kernel_entry.backend_handle).  A captured node reports
 * either that CUkernel (params.kern) or the CUfunction the driver resolved
 * it to in the context (params.func); the second is matched through
 * cuKernelGetFunction and remembered in a small cache, so per-replay
 * updates do not search the registry. */
#include "cuda_backend.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- edges ------------------------------------------------------------------------ */

/* A node's edges on one side (dependencies when in, else dependents), with
 * their edge data; *nodes and *data are malloc'd (NULL when *n is 0).
 * Always asked with room for edge data: a graph that holds programmatic
 * edges (kernels launched with TECORE_LAUNCH_PDL) answers a query without
 * it with CUDA_ERROR_LOSSY_QUERY, and a rebuilt edge must keep its type.
 * The driver fills at most the room given: grow until it fits. */
static tecore_result_t node_edges(CUgraphNode node, int in, CUgraphNode **nodes,
                                  CUgraphEdgeData **data, size_t *n) {
  *nodes = NULL;
  *data = NULL;
  *n = 0;
  for (size_t cap = 8;; cap *= 2) {
    CUgraphNode *nn = realloc(*nodes, cap * sizeof *nn);
    if (nn) *nodes = nn;
    CUgraphEdgeData *dd = realloc(*data, cap * sizeof *dd);
    if (dd) *data = dd;
    if (!nn || !dd) return TE_ERR(TECORE_ERR_NOMEM, "graph node edges: out of host memory");
    memset(*data, 0, cap * sizeof **data);
    size_t got = cap;
    if (in) TE_CHECK(TE_CU(cuGraphNodeGetDependencies, node, *nodes, *data, &got));
    else TE_CHECK(TE_CU(cuGraphNodeGetDependentNodes, node, *nodes, *data, &got));
    if (got < cap) {
      *n = got;
      return TECORE_SUCCESS;
    }
  }
}

/* 1 when node has no dependents (a leaf of its graph), through node_edges
 * so that programmatic edges are no lossy query. */
static tecore_result_t node_is_leaf(CUgraphNode node, int *leaf) {
  CUgraphNode *nodes = NULL;
  CUgraphEdgeData *data = NULL;
  size_t n = 0;
  tecore_result_t r = node_edges(node, 0, &nodes, &data, &n);
  free(nodes);
  free(data);
  *leaf = n == 0;
  return r;
}

/* ---- capture into a graph -------------------------------------------------- */

tecore_result_t te_cuda_stream_begin_capture_to_graph(tecore_stream_t stream,
                                                      tecore_graph_t graph,
                                                      tecore_capture_mode_t mode) {
  CUstreamCaptureMode cu_mode;
  switch (mode) {
  case TECORE_CAPTURE_GLOBAL: cu_mode = CU_STREAM_CAPTURE_MODE_GLOBAL; break;
  case TECORE_CAPTURE_THREAD_LOCAL: cu_mode = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL; break;
  case TECORE_CAPTURE_RELAXED: cu_mode = CU_STREAM_CAPTURE_MODE_RELAXED; break;
  default:
    return TE_ERR(TECORE_ERR_INVALID, "begin capture to graph: unknown capture mode %d", (int)mode);
  }
  TE_CHECK(te_cuda_need_ctx());
  if (!te_cu.p_cuStreamBeginCaptureToGraph) return te_cuda_missing("cuStreamBeginCaptureToGraph",
                                                                   __FILE__, __LINE__);
  /* the new work depends on the graph's leaves: it runs after all of it */
  size_t n = 0, nleaves = 0;
  TE_CHECK(TE_CU(cuGraphGetNodes, graph, NULL, &n));
  CUgraphNode *nodes = n ? malloc(n * sizeof *nodes) : NULL;
  if (n && !nodes) return TE_ERR(TECORE_ERR_NOMEM, "begin capture to graph: out of host memory");
  tecore_result_t res = TECORE_SUCCESS;
  if (n) TE_CHECK_GOTO(TE_CU(cuGraphGetNodes, graph, nodes, &n), res, out);
  for (size_t i = 0; i < n; i++) {
    int leaf = 0;
    TE_CHECK_GOTO(node_is_leaf(nodes[i], &leaf), res, out);
    if (leaf) nodes[nleaves++] = nodes[i];
  }
  TE_CHECK_GOTO(TE_CU(cuStreamBeginCaptureToGraph, stream, graph, nleaves ? nodes : NULL, NULL,
                      nleaves, cu_mode),
                res, out);
out:
  free(nodes);
  return res;
}

/* ---- kernel ids ------------------------------------------------------------------ */

#define FUNC_CACHE 256 /* a power of two */
static pthread_mutex_t func_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  CUfunction func;
  int id;
} func_cache[FUNC_CACHE];

static size_t func_slot(CUfunction f) { return ((uintptr_t)f >> 4) & (FUNC_CACHE - 1); }

/* The registry id behind a kernel node's parameters, or -1. */
static int kernel_id_of(const CUDA_KERNEL_NODE_PARAMS *p) {
  int nk = te_kernel_count();
  for (int id = 0; id < nk; id++) {
    void *h = __atomic_load_n(&te_kernel_entry_at(id)->backend_handle, __ATOMIC_ACQUIRE);
    if (h && ((void *)p->kern == h || (void *)p->func == h)) return id;
  }
  if (!p->func) return -1;
  pthread_mutex_lock(&func_lock);
  size_t slot = func_slot(p->func);
  int found = func_cache[slot].func == p->func ? func_cache[slot].id : -2;
  pthread_mutex_unlock(&func_lock);
  if (found != -2) return found;
  int id = -1;
  for (int k = 0; k < nk && id < 0; k++) {
    CUkernel kern = __atomic_load_n(&te_kernel_entry_at(k)->backend_handle, __ATOMIC_ACQUIRE);
    CUfunction f = NULL;
    if (kern && te_cu.p_cuKernelGetFunction && te_cu.p_cuKernelGetFunction(&f, kern) == CUDA_SUCCESS &&
        f == p->func)
      id = k;
  }
  pthread_mutex_lock(&func_lock);
  func_cache[slot].func = p->func;
  func_cache[slot].id = id;
  pthread_mutex_unlock(&func_lock);
  return id;
}

static tecore_result_t node_type(CUgraphNode n, CUgraphNodeType *t) {
  TE_CHECK(TE_CU(cuGraphNodeGetType, n, t));
  return TECORE_SUCCESS;
}

/* A kernel node's parameters and its registered kernel (the registry's
 * entry, NULL when it is not a registered kernel). */
static tecore_result_t kernel_node(CUgraphNode n, CUDA_KERNEL_NODE_PARAMS *p,
                                   const struct te_kernel_entry **e, const char *fn) {
  CUgraphNodeType t;
  TE_CHECK(node_type(n, &t));
  if (t != CU_GRAPH_NODE_TYPE_KERNEL)
    return TE_ERR(TECORE_ERR_INVALID, "%s: node %p is not a kernel node (type %d)", fn, (void *)n,
                  (int)t);
  memset(p, 0, sizeof *p);
  TE_CHECK(TE_CU(cuGraphKernelNodeGetParams, n, p));
  *e = te_kernel_entry_at(kernel_id_of(p));
  return TECORE_SUCCESS;
}

/* ---- the node list ------------------------------------------------------------------ */

/* A 1-D copy's end: its address (as a device address; host memory under
 * unified addressing) or 0 when it is not a plain linear address. */
static tecore_devptr_t copy_end(CUmemorytype t, CUdeviceptr dev, const void *host, size_t x) {
  switch (t) {
  case CU_MEMORYTYPE_DEVICE:
  case CU_MEMORYTYPE_UNIFIED: return dev ? dev + x : 0;
  case CU_MEMORYTYPE_HOST: return host ? (tecore_devptr_t)(uintptr_t)host + x : 0;
  default: return 0;
  }
}

static int copy_is_1d(const CUDA_MEMCPY3D *c) {
  return c->Height <= 1 && c->Depth <= 1 && c->srcY == 0 && c->srcZ == 0 && c->dstY == 0 &&
         c->dstZ == 0 && c->srcLOD == 0 && c->dstLOD == 0;
}

static tecore_result_t describe(CUgraphNode n, struct tecore_graph_node_desc *d) {
  CUgraphNodeType t;
  TE_CHECK(node_type(n, &t));
  memset(d, 0, sizeof *d);
  d->node = (tecore_graph_node_t)n;
  d->type = (unsigned)t <= CU_GRAPH_NODE_TYPE_CONDITIONAL ? (tecore_graph_node_type_t)t
                                                          : TECORE_GRAPH_NODE_OTHER;
  d->kernel_id = -1;
  if (t == CU_GRAPH_NODE_TYPE_KERNEL) {
    CUDA_KERNEL_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    TE_CHECK(TE_CU(cuGraphKernelNodeGetParams, n, &p));
    d->kernel_id = kernel_id_of(&p);
    d->cfg = (struct tecore_launch_cfg){.grid = {p.gridDimX, p.gridDimY, p.gridDimZ},
                                        .block = {p.blockDimX, p.blockDimY, p.blockDimZ},
                                        .shared_bytes = p.sharedMemBytes};
  } else if (t == CU_GRAPH_NODE_TYPE_MEMCPY) {
    CUDA_MEMCPY3D c;
    memset(&c, 0, sizeof c);
    TE_CHECK(TE_CU(cuGraphMemcpyNodeGetParams, n, &c));
    tecore_devptr_t src = copy_end(c.srcMemoryType, c.srcDevice, c.srcHost, c.srcXInBytes);
    tecore_devptr_t dst = copy_end(c.dstMemoryType, c.dstDevice, c.dstHost, c.dstXInBytes);
    if (copy_is_1d(&c) && src && dst) {
      d->src = src;
      d->dst = dst;
      d->bytes = c.WidthInBytes;
    }
  } else if (t == CU_GRAPH_NODE_TYPE_MEMSET) {
    CUDA_MEMSET_NODE_PARAMS m;
    memset(&m, 0, sizeof m);
    TE_CHECK(TE_CU(cuGraphMemsetNodeGetParams, n, &m));
    d->dst = m.dst;
    d->value = m.value;
    d->elem_size = m.elementSize;
    d->count = m.height <= 1 ? m.width : 0;
  }
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_graph_nodes(tecore_graph_t graph, struct tecore_graph_node_desc *nodes,
                                    size_t max, size_t *count) {
  size_t n = 0;
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuGraphGetNodes, graph, NULL, &n));
  *count = n;
  if (!max || !n) return TECORE_SUCCESS;
  CUgraphNode *all = malloc(n * sizeof *all);
  if (!all) return TE_ERR(TECORE_ERR_NOMEM, "graph nodes: out of host memory");
  tecore_result_t res = TECORE_SUCCESS;
  TE_CHECK_GOTO(TE_CU(cuGraphGetNodes, graph, all, &n), res, out);
  for (size_t i = 0; i < n && i < max; i++) TE_CHECK_GOTO(describe(all[i], &nodes[i]), res, out);
out:
  free(all);
  return res;
}

/* The driver names an executable's node by its source graph's node: the
 * node's own parameters say which kernel it launches. */
tecore_result_t te_cuda_graph_exec_node_kernel_id(tecore_graph_exec_t exec,
                                                  tecore_graph_node_t node, int *id) {
  struct tecore_graph_node_desc d;
  (void)exec;
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(describe((CUgraphNode)node, &d));
  *id = d.type == TECORE_GRAPH_NODE_KERNEL ? d.kernel_id : -1;
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_graph_node_handles(tecore_graph_t graph, tecore_graph_node_t *nodes,
                                           size_t max, size_t *count) {
  size_t n = 0;
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuGraphGetNodes, graph, NULL, &n));
  *count = n;
  if (!max || !n) return TECORE_SUCCESS;
  if (max >= n) return TE_CU(cuGraphGetNodes, graph, (CUgraphNode *)nodes, count);
  CUgraphNode *all = malloc(n * sizeof *all);
  if (!all) return TE_ERR(TECORE_ERR_NOMEM, "graph node handles: out of host memory");
  tecore_result_t res = TE_CU(cuGraphGetNodes, graph, all, &n);
  if (res == TECORE_SUCCESS) memcpy(nodes, all, max * sizeof *all);
  free(all);
  return res;
}

tecore_result_t te_cuda_graph_kernel_node_args(tecore_graph_t graph, tecore_graph_node_t node,
                                               void *const *args) {
  static const char fn[] = "graph kernel node args";
  CUDA_KERNEL_NODE_PARAMS p;
  const struct te_kernel_entry *e = NULL;
  (void)graph; /* the driver's node knows its graph */
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(kernel_node((CUgraphNode)node, &p, &e, fn));
  if (!e)
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: node %p runs a kernel that is not registered "
                  "(its parameter layout is unknown)", fn, (void *)node);
  if (!p.kernelParams)
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: kernel %s's node holds its arguments as an "
                  "'extra' buffer", fn, e->def->name);
  for (unsigned i = 0; i < e->def->nparams; i++)
    if (!args[i])
      return TE_ERR(TECORE_ERR_INVALID, "%s: kernel %s: args[%u] is NULL", fn, e->def->name, i);
  for (unsigned i = 0; i < e->def->nparams; i++)
    memcpy(args[i], p.kernelParams[i], e->def->param_size[i]);
  return TECORE_SUCCESS;
}

/* ---- a memset node replaced by a kernel node --------------------------------------- */

/* The kernel node is added without edges, then given the memset node's
 * incoming and outgoing edges (with their edge data), then the memset node
 * is destroyed (which removes its edges).  On a failure the kernel node is
 * destroyed again and the graph is as it was. */
tecore_result_t te_cuda_graph_node_to_kernel(tecore_graph_t graph, tecore_graph_node_t node,
                                             struct te_kernel_entry *k,
                                             struct te_kernel_module *mod,
                                             const struct tecore_launch_cfg *cfg,
                                             void *const *args, tecore_graph_node_t *out) {
  static const char fn[] = "graph node to kernel";
  CUgraphNode old = (CUgraphNode)node, kn = NULL;
  CUgraphNode *in = NULL, *outn = NULL, *rep = NULL;
  CUgraphEdgeData *in_d = NULL, *out_d = NULL;
  size_t nin = 0, nout = 0;
  CUgraphNodeType t;
  CUkernel kern = NULL;
  tecore_result_t res = TECORE_SUCCESS;
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(node_type(old, &t));
  if (t != CU_GRAPH_NODE_TYPE_MEMSET && t != CU_GRAPH_NODE_TYPE_MEMCPY)
    return TE_ERR(TECORE_ERR_INVALID, "%s: node %p is not a memset or memcpy node (type %d)", fn,
                  (void *)node, (int)t);
  if (!mod->backend_handle)
    return TE_ERR(TECORE_ERR_INTERNAL, "%s: kernel %s's module is not loaded", fn, k->def->name);
  TE_CHECK(te_cuda_kernel_handle(k, (CUlibrary)mod->backend_handle, &kern));
  TE_CHECK_GOTO(node_edges(old, 1, &in, &in_d, &nin), res, out);
  TE_CHECK_GOTO(node_edges(old, 0, &outn, &out_d, &nout), res, out);
  size_t nrep = nin > nout ? nin : nout;
  if (nrep && !(rep = malloc(nrep * sizeof *rep))) {
    res = TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
    goto out;
  }
  CUDA_KERNEL_NODE_PARAMS p;
  memset(&p, 0, sizeof p);
  p.kern = kern; /* with func NULL and ctx NULL: the current context's */
  p.gridDimX = cfg->grid[0], p.gridDimY = cfg->grid[1], p.gridDimZ = cfg->grid[2];
  p.blockDimX = cfg->block[0], p.blockDimY = cfg->block[1], p.blockDimZ = cfg->block[2];
  p.sharedMemBytes = cfg->shared_bytes;
  p.kernelParams = (void **)args; /* the driver copies the values */
  TE_CHECK_GOTO(TE_CU(cuGraphAddKernelNode, &kn, (CUgraph)graph, NULL, 0, &p), res, out);
  for (size_t i = 0; i < nin; i++) rep[i] = kn;
  if (nin) TE_CHECK_GOTO(TE_CU(cuGraphAddDependencies, (CUgraph)graph, in, rep, in_d, nin), res, out);
  for (size_t i = 0; i < nout; i++) rep[i] = kn;
  if (nout)
    TE_CHECK_GOTO(TE_CU(cuGraphAddDependencies, (CUgraph)graph, rep, outn, out_d, nout), res, out);
  TE_CHECK_GOTO(TE_CU(cuGraphDestroyNode, old), res, out);
  *out = (tecore_graph_node_t)kn;
  kn = NULL;
out:
  if (kn && te_cu.p_cuGraphDestroyNode) (void)te_cu.p_cuGraphDestroyNode(kn);
  free(in);
  free(in_d);
  free(outn);
  free(out_d);
  free(rep);
  return res;
}

/* ---- per-node updates of an exec ---------------------------------------------------- */

tecore_result_t te_cuda_graph_exec_kernel_node_set(tecore_graph_exec_t exec,
                                                   tecore_graph_node_t node,
                                                   const struct tecore_launch_cfg *cfg,
                                                   void *const *args) {
  static const char fn[] = "graph exec kernel node set";
  CUDA_KERNEL_NODE_PARAMS p;
  const struct te_kernel_entry *e = NULL;
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(kernel_node((CUgraphNode)node, &p, &e, fn));
  if (!e)
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: node %p runs a kernel that is not registered "
                  "(its parameter layout is unknown)", fn, (void *)node);
  for (unsigned i = 0; i < e->def->nparams; i++)
    if (!args[i])
      return TE_ERR(TECORE_ERR_INVALID, "%s: kernel %s: args[%u] is NULL", fn, e->def->name, i);
  p.kernelParams = (void **)args; /* the driver copies the values */
  p.extra = NULL;
  if (cfg) {
    p.gridDimX = cfg->grid[0], p.gridDimY = cfg->grid[1], p.gridDimZ = cfg->grid[2];
    p.blockDimX = cfg->block[0], p.blockDimY = cfg->block[1], p.blockDimZ = cfg->block[2];
    p.sharedMemBytes = cfg->shared_bytes;
  }
  TE_CHECK(TE_CU(cuGraphExecKernelNodeSetParams, (CUgraphExec)exec, (CUgraphNode)node, &p));
  return TECORE_SUCCESS;
}

/* Points one end of a copy at addr, keeping its kind of memory. */
static void copy_set_end(CUmemorytype t, CUdeviceptr *dev, const void **host, size_t *x,
                         tecore_devptr_t addr) {
  *x = 0;
  if (t == CU_MEMORYTYPE_HOST) *host = (const void *)(uintptr_t)addr;
  else *dev = addr;
}

tecore_result_t te_cuda_graph_exec_memcpy_node_set(tecore_graph_exec_t exec,
                                                   tecore_graph_node_t node, tecore_devptr_t dst,
                                                   tecore_devptr_t src) {
  static const char fn[] = "graph exec memcpy node set";
  CUgraphNodeType t;
  CUcontext ctx = NULL;
  CUDA_MEMCPY3D c;
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(node_type((CUgraphNode)node, &t));
  if (t != CU_GRAPH_NODE_TYPE_MEMCPY)
    return TE_ERR(TECORE_ERR_INVALID, "%s: node %p is not a memcpy node (type %d)", fn,
                  (void *)node, (int)t);
  memset(&c, 0, sizeof c);
  TE_CHECK(TE_CU(cuGraphMemcpyNodeGetParams, (CUgraphNode)node, &c));
  if (!copy_is_1d(&c) || !copy_end(c.srcMemoryType, c.srcDevice, c.srcHost, 0) ||
      !copy_end(c.dstMemoryType, c.dstDevice, c.dstHost, 0))
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: node %p is not a 1-D linear copy", fn,
                  (void *)node);
  const void *dst_host = c.dstHost;
  copy_set_end(c.srcMemoryType, &c.srcDevice, &c.srcHost, &c.srcXInBytes, src);
  copy_set_end(c.dstMemoryType, &c.dstDevice, &dst_host, &c.dstXInBytes, dst);
  c.dstHost = (void *)(uintptr_t)dst_host;
  TE_CHECK(TE_CU(cuCtxGetCurrent, &ctx));
  TE_CHECK(TE_CU(cuGraphExecMemcpyNodeSetParams, (CUgraphExec)exec, (CUgraphNode)node, &c, ctx));
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_graph_exec_memset_node_set(tecore_graph_exec_t exec,
                                                   tecore_graph_node_t node, tecore_devptr_t dst,
                                                   uint32_t value) {
  static const char fn[] = "graph exec memset node set";
  CUgraphNodeType t;
  CUcontext ctx = NULL;
  CUDA_MEMSET_NODE_PARAMS m;
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(node_type((CUgraphNode)node, &t));
  if (t != CU_GRAPH_NODE_TYPE_MEMSET)
    return TE_ERR(TECORE_ERR_INVALID, "%s: node %p is not a memset node (type %d)", fn,
                  (void *)node, (int)t);
  memset(&m, 0, sizeof m);
  TE_CHECK(TE_CU(cuGraphMemsetNodeGetParams, (CUgraphNode)node, &m));
  if (m.elementSize && dst % m.elementSize)
    return TE_ERR(TECORE_ERR_INVALID, "%s: dst 0x%llx is not aligned to the node's %u-byte "
                  "elements", fn, (unsigned long long)dst, m.elementSize);
  m.dst = dst;
  m.value = m.elementSize == 4 ? value : value & ((1u << (8 * m.elementSize)) - 1);
  TE_CHECK(TE_CU(cuCtxGetCurrent, &ctx));
  TE_CHECK(TE_CU(cuGraphExecMemsetNodeSetParams, (CUgraphExec)exec, (CUgraphNode)node, &m, ctx));
  return TECORE_SUCCESS;
}
