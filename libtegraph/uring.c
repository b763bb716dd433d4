/* SPDX-License-Identifier: Apache-2.0 */
/* uring.c -- whether io_uring works on this system.  A kernel may have it
 * compiled out, disabled (kernel.io_uring_disabled) or blocked by a
 * seccomp filter (containers), and liburing.so.2 (loaded at run time by
 * libtecore) may be missing; the offload spill path asks first and falls
 * back to host memory only, with a clear reason, when it cannot.  The
 * service engine that does the I/O is libtecore's, so libtecore answers
 * (tecore_svc_uring_probe). */
#include "tg_internal.h"
#include <te/svc.h>

TE_EXPORT tegraph_result_t tegraph_uring_probe(int *supported, const char **why) {
  if (!supported) {
    tecore_set_error("tegraph_uring_probe: supported is NULL");
    return TEGRAPH_ERR_INVALID;
  }
  if (tecore_svc_uring_probe(supported, why) != TECORE_SUCCESS) {
    *supported = 0;
    if (why) *why = "the io_uring probe failed";
  }
  return TEGRAPH_SUCCESS;
}
