/* verbs.c -- the InfiniBand/RoCE devices libtecomm's inter-node fallback
 * can use (libibverbs), or TECOMM_ERR_NOT_SUPPORTED when built without it. */
#include "config.h"
#include <stdio.h>
#include <te/comm.h>
#ifdef TE_HAVE_VERBS
#include <infiniband/verbs.h>
#endif

#define TE_EXPORT __attribute__((visibility("default")))

TE_EXPORT tecomm_result_t tecomm_verbs_devices(int *count, char (*names)[64], int max) {
  if (!count) {
    tecore_set_error("tecomm_verbs_devices: count is NULL");
    return TECOMM_ERR_INVALID;
  }
  if (max < 0 || (max > 0 && !names)) {
    tecore_set_error("tecomm_verbs_devices: names is NULL or max (%d) is negative", max);
    return TECOMM_ERR_INVALID;
  }
#ifdef TE_HAVE_VERBS
  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  if (!list) {
    /* no rdma subsystem (ENOSYS) is not an error: there are no devices */
    *count = 0;
    return TECOMM_SUCCESS;
  }
  for (int i = 0; i < n && i < max; i++) snprintf(names[i], 64, "%s", ibv_get_device_name(list[i]));
  *count = n;
  ibv_free_device_list(list);
  return TECOMM_SUCCESS;
#else
  *count = 0;
  tecore_set_error("tecomm_verbs_devices: libtecomm was built without libibverbs");
  return TECOMM_ERR_NOT_SUPPORTED;
#endif
}
