/* SPDX-License-Identifier: Apache-2.0 */
/* result.c -- libtecomm's result strings, version and last error,
 * generated from TECOMM_RESULT_LIST (te/comm.h) by common/te_upper.h. */
#include "tc_internal.h"

TE_UPPER_RESULT_FUNCS(tecomm, tecomm_result_t, TECOMM_RESULT_LIST)
