/* SPDX-License-Identifier: Apache-2.0 */
/* status_word.c -- the caller's status word (internal.h): where kernels
 * report device-resident input that the host could not check (attention's
 * cu_seqlens, RoPE's positions), checked before anything touches it. */
#include "internal.h"
#include <stdio.h>

/* *d, the word's device address, once it is checked to be 8-byte aligned
 * mapped host memory (TECORE_ERR_INVALID naming arg otherwise); nothing is
 * read or written before. */
static tecore_result_t word_dev(uint64_t *status, tecore_devptr_t *d, const char *fn,
                                const char *arg) {
  *d = 0;
  TE_ARG((uintptr_t)status % 8 == 0, "%s: %s (%p) is not aligned to 8 bytes", fn, arg,
         (void *)status);
  /* the registry's answer for both ends first: a word that is not (or no
   * longer) mapped host memory is never read or written */
  tecore_devptr_t last = 0;
  tecore_result_t r = tecore_mem_host_device_ptr(status, d);
  if (r == TECORE_SUCCESS) r = tecore_mem_host_device_ptr((char *)status + 7, &last);
  if (r == TECORE_SUCCESS && last != *d + 7)
    r = TE_ERR(TECORE_ERR_INVALID, "its 8 bytes span two mappings");
  if (r == TECORE_SUCCESS) return TECORE_SUCCESS;
  *d = 0;
  char why[256];   /* the registry's answer, copied before the new error replaces it */
  snprintf(why, sizeof why, "%s", tecore_last_error());
  return TE_ERR(TECORE_ERR_INVALID, "%s: %s is not mapped host memory (%p; "
                "tecore_mem_alloc_host): %s", fn, arg, (void *)status, why);
}

/* The word, cleared. */
static uint64_t take(uint64_t *status) { return __atomic_exchange_n(status, 0, __ATOMIC_ACQ_REL); }

tecore_result_t te_status_word_arg(uint64_t *status, te_status_err_fn err, tecore_devptr_t *d,
                                   const char *fn) {
  *d = 0;
  if (!status) return TECORE_SUCCESS;
  TE_CHECK(word_dev(status, d, fn, "args->status"));
  return err(take(status), fn, "an earlier call");
}

tecore_result_t te_status_word_check(uint64_t *status, tecore_stream_t stream,
                                     te_status_err_fn err, const char *fn) {
  TE_ARG(status, "%s: status is NULL", fn);
  tecore_devptr_t d;
  TE_CHECK(word_dev(status, &d, fn, "status"));
  TE_CHECK(tecore_stream_synchronize(stream));
  return err(take(status), fn, "a call");
}
