/* SPDX-License-Identifier: Apache-2.0 */
/* graph.c -- graphs: instantiate, launch, update, their nodes, and the
 * in-place setters of an instantiated graph's nodes (a kernel node's new
 * pointers checked against its kernel's alignment, kernel.c). */
#include "device/device_ops.h"
#include "device/graph_owner.h"
#include "device/graph_device.h"
#include <stdio.h>
#include <string.h>

/* Declares o = the backend's ops, or returns the init failure. */
#define OPS(o)                                   \
  const struct te_device_ops *o = NULL;          \
  TE_CHECK(te_ops_get(&o))

TE_EXPORT tecore_result_t tecore_graph_destroy(tecore_graph_t graph) {
  TE_ARG(graph, "tecore_graph_destroy: graph is NULL");
  OPS(o);
  TE_CHECK(o->graph_destroy(graph));
  te_graph_owner_forget(graph, 0);
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_graph_node_count(tecore_graph_t graph, size_t *count) {
  TE_ARG(graph, "tecore_graph_node_count: graph is NULL");
  TE_ARG(count, "tecore_graph_node_count: count is NULL");
  OPS(o);
  return o->graph_node_count(graph, count);
}

TE_EXPORT tecore_result_t tecore_graph_dot(tecore_graph_t graph, const char *path) {
  TE_ARG(graph, "tecore_graph_dot: graph is NULL");
  TE_ARG(path && path[0], "tecore_graph_dot: path is NULL or empty");
  OPS(o);
  return o->graph_dot(graph, path);
}

TE_EXPORT tecore_result_t tecore_graph_instantiate(tecore_graph_exec_t *exec,
                                                   tecore_graph_t graph) {
  TE_ARG(exec, "tecore_graph_instantiate: exec is NULL");
  TE_ARG(graph, "tecore_graph_instantiate: graph is NULL");
  OPS(o);
  /* a failure leaves *exec as the caller had it */
  __typeof__(*exec) out_ = NULL;
  TE_CHECK(o->graph_instantiate(&out_, graph));
  te_graph_owner_exec_add(o, out_, graph);
  *exec = out_;
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_graph_exec_destroy(tecore_graph_exec_t exec) {
  TE_ARG(exec, "tecore_graph_exec_destroy: exec is NULL");
  TE_ARG(!te_graph_device_chained(exec), "tecore_graph_exec_destroy: exec %p belongs to a graph "
         "chain; destroy the chain first (tecore_graph_chain_destroy)", (void *)exec);
  OPS(o);
  TE_CHECK(o->graph_exec_destroy(exec));
  te_graph_owner_forget(exec, 1);
  te_graph_device_forget(o, exec);
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_graph_launch(tecore_graph_exec_t exec, tecore_stream_t stream) {
  TE_ARG(exec, "tecore_graph_launch: exec is NULL");
  OPS(o);
  return o->graph_launch(exec, stream);
}

TE_EXPORT tecore_result_t tecore_graph_launch_device(tecore_graph_exec_t exec,
                                                     tecore_stream_t stream) {
  TE_ARG(exec, "tecore_graph_launch_device: exec is NULL");
  OPS(o);
  return te_graph_device_launch(o, exec, stream);
}

TE_EXPORT tecore_result_t tecore_graph_upload(tecore_graph_exec_t exec, tecore_stream_t stream) {
  TE_ARG(exec, "tecore_graph_upload: exec is NULL");
  OPS(o);
  return o->graph_upload(exec, stream);
}

TE_EXPORT tecore_result_t tecore_graph_exec_update(tecore_graph_exec_t exec, tecore_graph_t graph,
                                                   tecore_graph_update_result_t *why) {
  TE_ARG(exec, "tecore_graph_exec_update: exec is NULL");
  TE_ARG(graph, "tecore_graph_exec_update: graph is NULL");
  tecore_graph_update_result_t local;
  if (!why) why = &local;
  *why = TECORE_GRAPH_UPDATE_SUCCESS;
  OPS(o);
  TE_CHECK(o->graph_exec_update(exec, graph, why));
  te_graph_device_dirty(exec);
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_graph_exec_update_or_instantiate(tecore_graph_exec_t *exec,
                                                                  tecore_graph_t graph,
                                                                  int *reinstantiated) {
  TE_ARG(exec, "tecore_graph_exec_update_or_instantiate: exec is NULL");
  TE_ARG(graph, "tecore_graph_exec_update_or_instantiate: graph is NULL");
  OPS(o);
  int re = 0;
  tecore_result_t r = TECORE_ERR_GRAPH_UPDATE;
  tecore_graph_update_result_t why = TECORE_GRAPH_UPDATE_SUCCESS;
  if (*exec) r = o->graph_exec_update(*exec, graph, &why);
  if (r == TECORE_SUCCESS) te_graph_device_dirty(*exec);
  if (r == TECORE_ERR_GRAPH_UPDATE) {
    static const char fn[] = "tecore_graph_exec_update_or_instantiate";
    tecore_graph_exec_t fresh = NULL;
    if (*exec)
      TE_INFO(TECORE_SUBSYS_GRAPH, "graph update refused (%s); instantiating anew",
              tecore_graph_update_result_name(why));
    /* an executable launched from the device is replaced by another */
    const int dev = *exec && te_graph_device_has(*exec);
    if (dev) {
      TE_CHECK(te_graph_device_check(o, graph, TECORE_GRAPH_INSTANTIATE_DEVICE_LAUNCH, fn));
      TE_CHECK(o->graph_instantiate_flags(&fresh, graph, TECORE_GRAPH_INSTANTIATE_DEVICE_LAUNCH,
                                          NULL));
      tecore_result_t ra = te_graph_device_add(o, fresh, fn);
      if (ra != TECORE_SUCCESS) {
        te_error_hop(fn, __FILE__, __LINE__);
        (void)o->graph_exec_destroy(fresh);
        return ra;
      }
    } else {
      TE_CHECK(o->graph_instantiate(&fresh, graph));
    }
    te_graph_owner_exec_add(o, fresh, graph);
    if (*exec && o->graph_exec_destroy(*exec) == TECORE_SUCCESS) {
      te_graph_owner_forget(*exec, 1);
      te_graph_device_forget(o, *exec);
    }
    *exec = fresh;
    re = 1;
    r = TECORE_SUCCESS;
  }
  if (reinstantiated) *reinstantiated = re;
  return r;
}

TE_EXPORT const char *tecore_graph_update_result_name(tecore_graph_update_result_t r) {
  static const char *names[] = {"success",           "error",
                                "topology changed",  "node type changed",
                                "function changed",  "parameters changed",
                                "not supported",     "unsupported function change",
                                "attributes changed"};
  return (unsigned)r < TE_ARRAY_SIZE(names) ? names[r] : "unknown";
}

TE_EXPORT tecore_result_t tecore_stream_begin_capture_to_graph(tecore_stream_t stream,
                                                               tecore_graph_t graph,
                                                               tecore_capture_mode_t mode) {
  TE_ARG(stream, "tecore_stream_begin_capture_to_graph: the legacy default stream cannot capture");
  TE_ARG(graph, "tecore_stream_begin_capture_to_graph: graph is NULL");
  TE_ARG(mode >= TECORE_CAPTURE_GLOBAL && mode <= TECORE_CAPTURE_RELAXED,
         "tecore_stream_begin_capture_to_graph: unknown mode %d", (int)mode);
  OPS(o);
  return o->stream_begin_capture_to_graph(stream, graph, mode);
}

#define GRAPH_INSTANTIATE_FLAGS                                                  \
  (TECORE_GRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH | TECORE_GRAPH_INSTANTIATE_UPLOAD | \
   TECORE_GRAPH_INSTANTIATE_DEVICE_LAUNCH | TECORE_GRAPH_INSTANTIATE_USE_NODE_PRIORITY)

TE_EXPORT tecore_result_t tecore_graph_instantiate_with_flags(tecore_graph_exec_t *exec,
                                                              tecore_graph_t graph, unsigned flags,
                                                              tecore_stream_t upload_stream) {
  TE_ARG(exec, "tecore_graph_instantiate_with_flags: exec is NULL");
  TE_ARG(graph, "tecore_graph_instantiate_with_flags: graph is NULL");
  TE_ARG(!(flags & ~GRAPH_INSTANTIATE_FLAGS),
         "tecore_graph_instantiate_with_flags: unknown flags 0x%x", flags & ~GRAPH_INSTANTIATE_FLAGS);
  OPS(o);
  static const char fn[] = "tecore_graph_instantiate_with_flags";
  TE_CHECK(te_graph_device_check(o, graph, flags, fn));
  /* a failure leaves *exec as the caller had it */
  __typeof__(*exec) out_ = NULL;
  TE_CHECK(o->graph_instantiate_flags(&out_, graph, flags, upload_stream));
  if (flags & TECORE_GRAPH_INSTANTIATE_DEVICE_LAUNCH) {
    tecore_result_t r = te_graph_device_add(o, out_, fn);
    if (r != TECORE_SUCCESS) {
      te_error_hop(fn, __FILE__, __LINE__);
      (void)o->graph_exec_destroy(out_);
      return r;
    }
  }
  te_graph_owner_exec_add(o, out_, graph);
  *exec = out_;
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_graph_nodes(tecore_graph_t graph,
                                             struct tecore_graph_node_desc *nodes, size_t max,
                                             size_t *count) {
  TE_ARG(graph, "tecore_graph_nodes: graph is NULL");
  TE_ARG(count, "tecore_graph_nodes: count is NULL");
  TE_ARG(nodes || max == 0, "tecore_graph_nodes: nodes is NULL but max is %zu", max);
  OPS(o);
  /* entries past the graph's nodes stay as they were (max may exceed
   * what nodes really holds); a failure leaves *count */
  size_t n = 0;
  TE_CHECK(o->graph_nodes(graph, nodes, max, &n));
  *count = n;
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_graph_kernel_node_args(tecore_graph_t graph,
                                                        tecore_graph_node_t node,
                                                        void *const *args) {
  TE_ARG(graph, "tecore_graph_kernel_node_args: graph is NULL");
  TE_ARG(node, "tecore_graph_kernel_node_args: node is NULL");
  TE_ARG(args, "tecore_graph_kernel_node_args: args is NULL");
  OPS(o);
  TE_CHECK(te_graph_owner_check_graph(o, graph, node, "tecore_graph_kernel_node_args"));
  return o->graph_kernel_node_args(graph, node, args);
}

TE_EXPORT tecore_result_t tecore_graph_exec_kernel_node_set(tecore_graph_exec_t exec,
                                                            tecore_graph_node_t node,
                                                            const struct tecore_launch_cfg *cfg,
                                                            void *const *args) {
  TE_ARG(exec, "tecore_graph_exec_kernel_node_set: exec is NULL");
  TE_ARG(node, "tecore_graph_exec_kernel_node_set: node is NULL");
  TE_ARG(args, "tecore_graph_exec_kernel_node_set: args is NULL");
  if (cfg) TE_CHECK(te_launch_cfg_check(cfg, "tecore_graph_exec_kernel_node_set: cfg"));
  OPS(o);
  TE_CHECK(te_graph_owner_check_exec(exec, node, "tecore_graph_exec_kernel_node_set"));
  /* the new pointers as aligned as the node's kernel needs (kernel.c), on
   * both backends: a misaligned one faulted at the next launch */
  int id = -1;
  if (te_graph_owner_exec_kernel_id(o, exec, node, &id) != TECORE_SUCCESS) tecore_clear_error();
  else if (id >= 0) TE_CHECK(te_kernel_check_align(id, args, "tecore_graph_exec_kernel_node_set"));
  TE_CHECK(o->graph_exec_kernel_node_set(exec, node, cfg, args));
  te_graph_device_dirty(exec);
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_graph_exec_memcpy_node_set(tecore_graph_exec_t exec,
                                                            tecore_graph_node_t node,
                                                            tecore_devptr_t dst,
                                                            tecore_devptr_t src) {
  TE_ARG(exec, "tecore_graph_exec_memcpy_node_set: exec is NULL");
  TE_ARG(node, "tecore_graph_exec_memcpy_node_set: node is NULL");
  TE_ARG(dst, "tecore_graph_exec_memcpy_node_set: dst is NULL");
  TE_ARG(src, "tecore_graph_exec_memcpy_node_set: src is NULL");
  OPS(o);
  TE_CHECK(te_graph_owner_check_exec(exec, node, "tecore_graph_exec_memcpy_node_set"));
  TE_CHECK(o->graph_exec_memcpy_node_set(exec, node, dst, src));
  te_graph_device_dirty(exec);
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_graph_exec_memset_node_set(tecore_graph_exec_t exec,
                                                            tecore_graph_node_t node,
                                                            tecore_devptr_t dst, uint32_t value) {
  TE_ARG(exec, "tecore_graph_exec_memset_node_set: exec is NULL");
  TE_ARG(node, "tecore_graph_exec_memset_node_set: node is NULL");
  TE_ARG(dst, "tecore_graph_exec_memset_node_set: dst is NULL");
  OPS(o);
  TE_CHECK(te_graph_owner_check_exec(exec, node, "tecore_graph_exec_memset_node_set"));
  TE_CHECK(o->graph_exec_memset_node_set(exec, node, dst, value));
  te_graph_device_dirty(exec);
  return TECORE_SUCCESS;
}

