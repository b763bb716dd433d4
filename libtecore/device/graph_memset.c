/* SPDX-License-Identifier: Apache-2.0 */
/* graph_memset.c -- tecore_graph_memsets_to_kernels: a captured graph's
 * memset nodes become te_memset kernel nodes in place.
 *
 * Why: the driver launches a graph that is a line of kernel nodes on its
 * fast path; every memset node among them costs host time at each launch
 * (measured on an H100: one memset every 10th node of 400 took a launch
 * from 5.6 to 70 us).  Memsets reach a capture from libraries that libte
 * does not control (cuBLASLt clears its split-K counters so) as well as
 * from callers, so they are replaced after the capture, whoever made them. */
#include "internal.h"
#include "common/elementwise_params.h"

#include <stdlib.h>

TE_KARGS(te_memset_node_args, TE_MEMSET_PARAMS)

/* The launch shape of te_memset over count elements of elem bytes at dst:
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

TE_EXPORT tecore_result_t tecore_graph_memsets_to_kernels(tecore_graph_t graph,
                                                          size_t *replaced) {
  static const char fn[] = "tecore_graph_memsets_to_kernels";
  TE_ARG(graph, "%s: graph is NULL", fn);
  if (replaced) *replaced = 0;
  size_t n = 0;
  TE_CHECK(tecore_graph_nodes(graph, NULL, 0, &n));
  if (n == 0) return TECORE_SUCCESS;
  struct tecore_graph_node_desc *d = calloc(n, sizeof *d);
  if (!d) return TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
  tecore_result_t r = tecore_graph_nodes(graph, d, n, &n);
  size_t done = 0;
  int id = te_memset_kernel_id();
  if (r == TECORE_SUCCESS && id < 0)
    r = TE_ERR(TECORE_ERR_INTERNAL, "%s: the te_memset kernel did not register", fn);
  for (size_t i = 0; i < n && r == TECORE_SUCCESS; i++) {
    const struct tecore_graph_node_desc *m = &d[i];
    if (m->type != TECORE_GRAPH_NODE_MEMSET || m->count == 0) continue;
    if (m->elem_size != 1 && m->elem_size != 2 && m->elem_size != 4) continue;
    struct tecore_launch_cfg cfg;
    memset_shape(m->dst, m->elem_size, m->count, &cfg);
    struct te_memset_node_args a = {.dst = (void *)(uintptr_t)m->dst, .value = m->value,
                                    .elem_size = (int)m->elem_size,
                                    .n = (unsigned long long)m->count};
    void *args[TE_KNPARAMS(TE_MEMSET_PARAMS)];
    te_memset_node_args_ptrs(&a, args);
    tecore_graph_node_t nn = NULL;
    r = te_kernel_memset_node(id, graph, m->node, &cfg, args, &nn);
    if (r == TECORE_SUCCESS) done++;
    else te_error_hop(fn, __FILE__, __LINE__);
  }
  free(d);
  if (replaced) *replaced = done;
  return r;
}
