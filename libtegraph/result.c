/* SPDX-License-Identifier: Apache-2.0 */
/* result.c -- libtegraph's result strings, version and last error,
 * generated from TEGRAPH_RESULT_LIST (te/graph.h) by common/te_upper.h. */
#include "tg_internal.h"
#include "te_results_check.h"

/* TEGRAPH_RESULT_LIST is common/te_results.h's graph column. */
TE_RESULTS_CHECK(graph, TEGRAPH, TEGRAPH_RESULT_LIST);

TE_UPPER_RESULT_FUNCS(tegraph, tegraph_result_t, TEGRAPH_RESULT_LIST)
