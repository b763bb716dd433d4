/* SPDX-License-Identifier: Apache-2.0 */
/* graph_memset.c -- tecore_graph_memsets_to_kernels and
 * tecore_graph_copies_to_kernels: a captured graph's memset nodes, and its
 * small copies, become te_memset and te_copy kernel nodes in place.
 *
 * Why: the driver launches a graph that is a line of kernel nodes on its
 * fast path; every memset node among them costs host time at each launch
 * (measured on an H100: one memset every 10th node of 400 took a launch
 * from 5.6 to 70 us).  Memsets reach a capture from libraries that libte
 * does not control (cuBLASLt clears its split-K counters so) as well as
 * from callers, so they are replaced after the capture, whoever made them.
 * Copies cost the same (one copy to pinned host memory every 10th node of
 * 400: 110-118 us a launch against 4.1-4.6 for kernels only): a small copy
 * between this device's memory and pinned host memory (a step's tokens
 * in, its losses out) is done as well by a kernel, which reads or writes
 * the host memory through its mapped address.  Large copies to or from
 * the host stay on the copy engines, where they overlap the kernels
 * (activation offload); copies within the device run as fast on the SMs
 * (a fuser's residual fork copies [tokens][hidden] in each block). */
#include "internal.h"
#include "common/elementwise_params.h"
#include "device_ops.h"

#include <stdlib.h>

TE_KARGS(te_memset_node_args, TE_MEMSET_PARAMS)
TE_KARGS(te_copy_node_args, TE_COPY_PARAMS)

/* The launch shape of te_memset (te_copy: elem 1, dst the two ends or'ed)
 * over count elements of elem bytes at dst:
 * a thread a 16-byte store where dst is 16-byte aligned, else an element;
 * a grid-stride loop past 2112 blocks of 256 (an H100's 132 SMs x 16). */
static void memset_shape(tecore_devptr_t dst, unsigned elem, size_t count,
                         struct tecore_launch_cfg *cfg) {
  size_t per = dst % 16 == 0 ? 16 / elem : 1;
  size_t threads = (count + per - 1) / per;
  size_t blocks = (threads + 255) / 256;
  if (blocks > 132u * 16u) blocks = 132u * 16u;
  if (blocks == 0) blocks = 1;
  *cfg = (struct tecore_launch_cfg){.grid = {(unsigned)blocks, 1, 1}, .block = {256, 1, 1}};
}

/* What to replace (a kernel id of -1: that kind stays) and the storage of
 * one replacement's launch shape and arguments. */
struct node_job {
  int memset_id, copy_id;
  size_t copy_max_host, copy_max_device;   /* with a host end; both ends on this device */
  struct te_memset_node_args ms;
  struct te_copy_node_args cp;
  void *args[4];
  struct tecore_launch_cfg cfg;
};

/* The kernel (*id) that does node m's work, j's cfg and args filled; *id
 * -1 when m stays as it is. */
static tecore_result_t node_plan(const struct tecore_graph_node_desc *m, struct node_job *j,
                                 int *id) {
  *id = -1;
  if (m->type == TECORE_GRAPH_NODE_MEMSET && j->memset_id >= 0) {
    if (m->count == 0 || (m->elem_size != 1 && m->elem_size != 2 && m->elem_size != 4))
      return TECORE_SUCCESS;
    memset_shape(m->dst, m->elem_size, m->count, &j->cfg);
    j->ms = (struct te_memset_node_args){.dst = (void *)(uintptr_t)m->dst, .value = m->value,
                                         .elem_size = (int)m->elem_size,
                                         .n = (unsigned long long)m->count};
    te_memset_node_args_ptrs(&j->ms, j->args);
    *id = j->memset_id;
  } else if (m->type == TECORE_GRAPH_NODE_MEMCPY && j->copy_id >= 0) {
    if (m->bytes == 0) return TECORE_SUCCESS;
    const struct te_device_ops *o;
    tecore_devptr_t dst = 0, src = 0;
    int dhost = 0, shost = 0;
    TE_CHECK(te_ops_get(&o));
    TE_CHECK(o->mem_kernel_addr(m->dst, m->bytes, &dst, &dhost));
    TE_CHECK(o->mem_kernel_addr(m->src, m->bytes, &src, &shost));
    if (!dst || !src) return TECORE_SUCCESS;   /* pageable or another device's: stays */
    if (m->bytes > (dhost || shost ? j->copy_max_host : j->copy_max_device)) return TECORE_SUCCESS;
    memset_shape(dst | src, 1, m->bytes, &j->cfg);
    j->cp = (struct te_copy_node_args){.dst = (void *)(uintptr_t)dst,
                                       .src = (const void *)(uintptr_t)src,
                                       .n = (unsigned long long)m->bytes};
    te_copy_node_args_ptrs(&j->cp, j->args);
    *id = j->copy_id;
  }
  return TECORE_SUCCESS;
}

static tecore_result_t to_kernels(tecore_graph_t graph, struct node_job *j, size_t *replaced,
                                  const char *fn) {
  if (replaced) *replaced = 0;
  size_t n = 0;
  TE_CHECK(tecore_graph_nodes(graph, NULL, 0, &n));
  if (n == 0) return TECORE_SUCCESS;
  struct tecore_graph_node_desc *d = calloc(n, sizeof *d);
  if (!d) return TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
  tecore_result_t r = tecore_graph_nodes(graph, d, n, &n);
  size_t done = 0;
  for (size_t i = 0; i < n && r == TECORE_SUCCESS; i++) {
    int id;
    r = node_plan(&d[i], j, &id);
    if (r != TECORE_SUCCESS || id < 0) continue;
    tecore_graph_node_t nn = NULL;
    r = te_kernel_node_replace(id, graph, d[i].node, &j->cfg, j->args, &nn);
    if (r == TECORE_SUCCESS) done++;
  }
  if (r != TECORE_SUCCESS) te_error_hop(fn, __FILE__, __LINE__);
  free(d);
  if (replaced) *replaced = done;
  return r;
}

TE_EXPORT tecore_result_t tecore_graph_memsets_to_kernels(tecore_graph_t graph,
                                                          size_t *replaced) {
  static const char fn[] = "tecore_graph_memsets_to_kernels";
  TE_ARG(graph, "%s: graph is NULL", fn);
  struct node_job j = {.memset_id = te_memset_kernel_id(), .copy_id = -1};
  if (j.memset_id < 0)
    return TE_ERR(TECORE_ERR_INTERNAL, "%s: the te_memset kernel did not register", fn);
  return to_kernels(graph, &j, replaced, fn);
}

TE_EXPORT tecore_result_t tecore_graph_copies_to_kernels(tecore_graph_t graph,
                                                         size_t max_host_bytes,
                                                         size_t max_device_bytes,
                                                         size_t *replaced) {
  static const char fn[] = "tecore_graph_copies_to_kernels";
  TE_ARG(graph, "%s: graph is NULL", fn);
  struct node_job j = {.memset_id = -1, .copy_id = te_copy_kernel_id(),
                       .copy_max_host = max_host_bytes, .copy_max_device = max_device_bytes};
  if (j.copy_id < 0)
    return TE_ERR(TECORE_ERR_INTERNAL, "%s: the te_copy kernel did not register", fn);
  if (max_host_bytes == 0 && max_device_bytes == 0) {
    if (replaced) *replaced = 0;
    return TECORE_SUCCESS;
  }
  return to_kernels(graph, &j, replaced, fn);
}
