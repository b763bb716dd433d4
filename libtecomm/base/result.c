/* SPDX-License-Identifier: Apache-2.0 */
/* result.c -- libtecomm's result strings, version and last error,
 * generated from TECOMM_RESULT_LIST (te/comm.h) by common/te_upper.h. */
#include "tc_internal.h"
#include "te_results_check.h"

/* TECOMM_RESULT_LIST is common/te_results.h's comm column. */
TE_RESULTS_CHECK(comm, TECOMM, TECOMM_RESULT_LIST);

TE_UPPER_RESULT_FUNCS(tecomm, tecomm_result_t, TECOMM_RESULT_LIST)
