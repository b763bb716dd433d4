/* SPDX-License-Identifier: Apache-2.0 */
/* verbs.c -- the InfiniBand/RoCE devices libtecomm's inter-node fallback
 * can use, through libibverbs loaded at run time (verbs_api.h); or
 * TECOMM_ERR_NOT_SUPPORTED saying why there can be none (built without
 * verbs, or libibverbs.so.1 missing on this node). */
#include "verbs_api.h"

#include <stdio.h>

TE_EXPORT tecomm_result_t tecomm_verbs_devices(int *count, char (*names)[64], int max) {
  TC_ARG(count, "tecomm_verbs_devices: count is NULL");
  TC_ARG(max >= 0 && (max == 0 || names),
         "tecomm_verbs_devices: names is NULL or max (%d) is negative", max);
  *count = 0;
  TC_CHECK(tc_verbs_load("tecomm_verbs_devices"));
#ifdef TE_HAVE_VERBS
  int n = 0;
  struct ibv_device **list = te_ibv.get_device_list(&n);
  if (!list) return TECOMM_SUCCESS;   /* no rdma subsystem (ENOSYS): no devices */
  for (int i = 0; i < n && i < max; i++)
    snprintf(names[i], 64, "%s", te_ibv.get_device_name(list[i]));
  *count = n;
  te_ibv.free_device_list(list);
#endif
  return TECOMM_SUCCESS;
}
