/* SPDX-License-Identifier: Apache-2.0 */
/* status_word.c -- the caller's status word (internal.h): where kernels
 * report device-resident input that the host could not check (attention's
 * cu_seqlens, RoPE's positions), checked before anything touches it. */
#include "internal.h"

tecore_result_t te_status_word_dev(uint64_t *status, tecore_devptr_t *d, const char *fn,
                                   const char *arg) {
  *d = 0;
  TE_ARG((uintptr_t)status % 8 == 0, "%s: %s (%p) is not aligned to 8 bytes", fn, arg,
         (void *)status);
  /* the registry's answer first: a word that is not (or no longer) mapped
   * host memory is never read or written */
  if (tecore_mem_host_device_ptr(status, d) != TECORE_SUCCESS)
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s is not mapped host memory (tecore_mem_alloc_host): "
                  "%s", fn, arg, tecore_last_error());
  return TECORE_SUCCESS;
}

uint64_t te_status_word_take(uint64_t *status) {
  return __atomic_exchange_n(status, 0, __ATOMIC_ACQ_REL);
}
