/* SPDX-License-Identifier: Apache-2.0 */
/* tg_internal.h -- libtegraph's private helpers: the upper libraries'
 * conventions (common/te_upper.h: export marker, errors in the per-thread
 * detail shared with libtecore, checks that log each hop, libtecore
 * results converted by common/te_results.h, the live-handle registry)
 * bound to libtegraph's result type and log subsystem; the node table
 * that graphs and callables read and rewrite nodes through, and the
 * pool's user count.  libtegraph sees libtecore through its public API
 * only. */
#ifndef TEGRAPH_INTERNAL_H
#define TEGRAPH_INTERNAL_H

#include "config.h"
#include <stddef.h>
#include <stdint.h>
#include <te/graph.h>
#include "te_upper.h"

/* ---- errors ----------------------------------------------------------------
 * tg_err sets the detail (printf format), logs it at INFO (GRAPH) and
 * returns code:   return TG_ERR(TEGRAPH_ERR_INVALID, "%s: x is NULL", fn);  */
tegraph_result_t tg_err(tegraph_result_t code, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define TG_ERR(code, ...) tg_err((code), __FILE__, __LINE__, __VA_ARGS__)
#define TG_ARG(cond, ...)                                                      \
  do {                                                                         \
    if (!(cond)) return tg_err(TEGRAPH_ERR_INVALID, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
/* Propagates a libtegraph failure, logging the hop at TRACE (te_upper_hop). */
#define TG_CHECK(call) TE_UPPER_CHECK(tegraph_result_t, TEGRAPH_SUCCESS, TECORE_SUBSYS_GRAPH, call)

/* The libtegraph code for a libtecore failure (the same number where
 * libtegraph has the code, else the row's instead: common/te_results.h),
 * with "what: " put in front of libtecore's detail. */
tegraph_result_t tg_core(tecore_result_t r, const char *what);
/* Calls a libtecore function; on failure returns its converted code. */
#define TG_CORE(call, what)                                                    \
  do {                                                                         \
    tecore_result_t tg_c_ = (call);                                            \
    if (tg_c_ != TECORE_SUCCESS) return tg_core(tg_c_, (what));                \
  } while (0)

/* A freshly captured graph's memset nodes and small copies as te_memset
 * and te_copy kernel nodes (tecore_graph_memsets_to_kernels unless
 * TEGRAPH_MEMSET_KERNELS is 0; tecore_graph_copies_to_kernels up to
 * TEGRAPH_COPY_KERNELS bytes), graph.c.  fn names errors. */
tegraph_result_t tg_graph_to_kernels(tecore_graph_t graph, const char *fn);

/* ---- the node table (nodes.c) ------------------------------------------------
 * A graph's nodes as tecore_graph_nodes lists them, plus, for each node of
 * a registered kernel, its argument values as the executable holds them
 * now: per-node updates go through here so that changing one parameter
 * keeps the others' current values.  memcpy and memset descriptions are
 * kept current the same way. */
struct tg_knode {
  size_t node;                      /* position among all nodes */
  tecore_graph_node_t handle;
  int kernel_id;
  const struct tecore_kernel_def *def;
  struct tecore_launch_cfg cfg;
  unsigned char *vals;              /* parameter p at off[p] */
  size_t off[TECORE_KERNEL_MAX_PARAMS + 1];
};

struct tg_nodes {
  size_t count;
  struct tecore_graph_node_desc *desc;
  size_t nk;
  struct tg_knode *k;               /* registered kernels' nodes, in node order */
  size_t opaque;                    /* nodes whose memory use cannot be seen */
  char opaque_why[128];             /* the first of them, in words */
};

tegraph_result_t tg_nodes_load(tecore_graph_t graph, struct tg_nodes **out, const char *fn);
/* After a whole-graph update the executable still names its nodes by the
 * graph it was instantiated from (cuda: cuGraphExec*NodeSetParams take
 * that graph's nodes): takes the handles from inst, node for node (same
 * count and types, as the update required), keeping the values loaded
 * from the newer graph. */
tegraph_result_t tg_nodes_rehandle(struct tg_nodes *n, tecore_graph_t inst, const char *fn);
void tg_nodes_free(struct tg_nodes *n);
/* Sets parameter p of k in exec to value (param_size bytes), with the
 * launch shape of the table (which may differ from the instantiated
 * graph's after a whole-graph update); the table follows only when the
 * update succeeds. */
tegraph_result_t tg_knode_set(tecore_graph_exec_t exec, struct tg_knode *k, unsigned p,
                              const void *value, const char *fn);
/* Points 1-D memcpy node i at dst and src / memset node i at dst, value. */
tegraph_result_t tg_copy_set(tecore_graph_exec_t exec, struct tg_nodes *n, size_t i,
                             tecore_devptr_t dst, tecore_devptr_t src, const char *fn);
tegraph_result_t tg_memset_set(tecore_graph_exec_t exec, struct tg_nodes *n, size_t i,
                               tecore_devptr_t dst, uint32_t value, const char *fn);

/* ---- the pool's users (mempool.c) ------------------------------------------
 * Callables count themselves as users; a pool marked autofree (made by
 * tegraph_callables_create) is freed when its users drop to 0. */
void tg_mempool_use(tegraph_mempool_t *pool, int delta);
void tg_mempool_autofree(tegraph_mempool_t *pool);

/* ---- misc ------------------------------------------------------------------ */
/* Bytes of a plain tensor's data (numel * element size). */
size_t tg_tensor_bytes(const struct tecore_tensor *t);

/* Live pools and callables: te_handle_add, te_handle_del, te_handle_live
 * (te_handles.h), libtegraph's own registry. */
/* "[4, 8]" into buf. */
const char *tg_shape_str(const struct tecore_tensor *t, char *buf, size_t n);

#endif
