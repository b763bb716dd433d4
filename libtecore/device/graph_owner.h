/* graph_owner.h -- SPDX-License-Identifier: Apache-2.0
 * Private to libtecore: the check that a node handle belongs to the graph
 * (or the executable's graph) it is used with (graph_owner.c says how). */
#ifndef TECORE_GRAPH_OWNER_H
#define TECORE_GRAPH_OWNER_H

#include "device_ops.h"

/* After a successful instantiation: remembers graph's nodes for exec. */
void te_graph_owner_exec_add(const struct te_device_ops *o, tecore_graph_exec_t exec,
                             tecore_graph_t graph);
/* tecore_fini: every record goes (no call reaches the backend again). */
void te_graph_owner_fini(void);
/* After a destroy: drops the record of a graph (is_exec 0) or exec (1). */
void te_graph_owner_forget(const void *handle, int is_exec);
/* TECORE_ERR_INVALID naming fn when node is not one of exec's (graph's). */
tecore_result_t te_graph_owner_check_exec(tecore_graph_exec_t exec, tecore_graph_node_t node,
                                          const char *fn);
/* The registry id of the kernel of exec's node (-1: not a registered
 * kernel's node), asked of the backend once per node and kept. */
tecore_result_t te_graph_owner_exec_kernel_id(const struct te_device_ops *o,
                                             tecore_graph_exec_t exec, tecore_graph_node_t node,
                                             int *id);
tecore_result_t te_graph_owner_check_graph(const struct te_device_ops *o, tecore_graph_t graph,
                                           tecore_graph_node_t node, const char *fn);

#endif
