/* SPDX-License-Identifier: Apache-2.0 */
/* te_results_check.h -- compile-time proof that a library's public result
 * list agrees with common/te_results.h.  Each library's result file says
 *   TE_RESULTS_CHECK(graph, TEGRAPH, TEGRAPH_RESULT_LIST)
 * after including its public header: every row the library has (Y in its
 * column) must be <PFX>_<suffix> with the row's number, and the public list
 * must have as many entries as the library has rows (so nothing else).
 * Every row's instead must be a code of each library that lacks the row.
 * The messages are compared at run time (t/graph/check_upper.c,
 * t/core/check_result.c): C cannot compare strings at compile time. */
#ifndef TE_RESULTS_CHECK_H
#define TE_RESULTS_CHECK_H

#include "te_results.h"

#define TE_RES_CK_Y(PFX, sfx, num) \
  _Static_assert(PFX##_##sfx == num, #PFX "_" #sfx " is not " #num " as in common/te_results.h");
#define TE_RES_CK_N(PFX, sfx, num)
#define TE_RES_CK(PFX, yn, sfx, num) TE_RES_CK_##yn(PFX, sfx, num)

#define TE_RES_CK_core_(PFX, sfx, num, in_core, in_graph, in_comm) TE_RES_CK(PFX, in_core, sfx, num)
#define TE_RES_CK_graph_(PFX, sfx, num, in_core, in_graph, in_comm) TE_RES_CK(PFX, in_graph, sfx, num)
#define TE_RES_CK_comm_(PFX, sfx, num, in_core, in_graph, in_comm) TE_RES_CK(PFX, in_comm, sfx, num)
#define TE_RES_CNT_core_(in_core, in_graph, in_comm) +TE_RES_HAS(in_core)
#define TE_RES_CNT_graph_(in_core, in_graph, in_comm) +TE_RES_HAS(in_graph)
#define TE_RES_CNT_comm_(in_core, in_graph, in_comm) +TE_RES_HAS(in_comm)
#define TE_RES_ONE_(name, value, msg) +1

#define TE_RESULTS_CHECK(lib, PFX, LIST)                                                      \
  TE_RESULT_ROWS(TE_RES_CHECK_ROW_##lib##_)                                                   \
  _Static_assert(0 LIST(TE_RES_ONE_) == 0 TE_RESULT_ROWS(TE_RES_COUNT_ROW_##lib##_),         \
                 #PFX "_RESULT_LIST has other entries than common/te_results.h gives " #lib)

#define TE_RES_CHECK_ROW_core_(s, n, m, a, b, c, i) TE_RES_CK_core_(TECORE, s, n, a, b, c)
#define TE_RES_CHECK_ROW_graph_(s, n, m, a, b, c, i) TE_RES_CK_graph_(TEGRAPH, s, n, a, b, c)
#define TE_RES_CHECK_ROW_comm_(s, n, m, a, b, c, i) TE_RES_CK_comm_(TECOMM, s, n, a, b, c)
#define TE_RES_COUNT_ROW_core_(s, n, m, a, b, c, i) TE_RES_CNT_core_(a, b, c)
#define TE_RES_COUNT_ROW_graph_(s, n, m, a, b, c, i) TE_RES_CNT_graph_(a, b, c)
#define TE_RES_COUNT_ROW_comm_(s, n, m, a, b, c, i) TE_RES_CNT_comm_(a, b, c)

/* every row's instead is a code of each library that lacks the row and
 * converts from one that has it (libtecore <-> libtegraph, libtecore <->
 * libtecomm; libtegraph and libtecomm never convert each other's) */
#define TE_RES_INSTEAD_(sfx, num, msg, in_core, in_graph, in_comm, instead)                  \
  _Static_assert((TE_RES_HAS(in_core) || te_res_in_core_##instead) &&                       \
                     (TE_RES_HAS(in_graph) || !TE_RES_HAS(in_core) || te_res_in_graph_##instead) && \
                     (TE_RES_HAS(in_comm) || !TE_RES_HAS(in_core) || te_res_in_comm_##instead), \
                 "common/te_results.h: " #instead ", instead of " #sfx                      \
                 ", is not a code of every library that lacks " #sfx);
TE_RESULT_ROWS(TE_RES_INSTEAD_)

#endif
