/* SPDX-License-Identifier: Apache-2.0 */
/* multicast_guard.c -- the one rule for NVLink multicast: where the
 * operator turned it off (NCCL_NVLS_ENABLE=0, NCCL's own switch, or
 * TECOMM_NVLS_ENABLE=0, ours), no multicast object is created or
 * imported.  On the machines that set it, multicast can take the host's
 * GPUs out of service, so device.c and the cuda backend both ask here
 * before anything reaches the driver.
 *
 * TECOMM_NVLS_ENABLE is a registered tunable (read once, listed by
 * te-info -e).  NCCL_NVLS_ENABLE belongs to NCCL: it is read as NCCL reads
 * it, at every call, so a process that turns it off late is still
 * obeyed. */
#include "internal.h"

TE_PARAM_INT(nvls_enable, "TECOMM_NVLS_ENABLE", 1, 0, 1,
             "0: NVLink multicast (the NVLS allreduce) is never created or imported on the cuda "
             "backend, as with NCCL_NVLS_ENABLE=0 (which is honoured too)")

tecore_result_t te_multicast_allowed(const char *fn) {
  if (te_env_is_zero("NCCL_NVLS_ENABLE"))
    return TE_ERR(TECORE_ERR_DISABLED, "%s: NVLink multicast is disabled by NCCL_NVLS_ENABLE=0",
                  fn);
  if (tecore_tunable_int(&nvls_enable) == 0)
    return TE_ERR(TECORE_ERR_DISABLED, "%s: NVLink multicast is disabled by TECOMM_NVLS_ENABLE=0",
                  fn);
  return TECORE_SUCCESS;
}
