/* svc_probe.c -- whether the service engine can use io_uring here:
 * liburing.so.2 loadable (it is dlopened, te_uring.h), the kernel has
 * io_uring, and neither kernel.io_uring_disabled nor a seccomp filter
 * blocks it.  tegraph_uring_probe and te-info ask through this.
 * SPDX-License-Identifier: Apache-2.0 */
#include "svc_internal.h"

TE_EXPORT tecore_result_t tecore_svc_uring_probe(int *supported, const char **why) {
  TE_ARG(supported, "tecore_svc_uring_probe: supported is NULL");
  struct io_uring ring;
  int rc = io_uring_queue_init(4, &ring, 0);
  const char *reason = "io_uring works";
  if (rc == 0) {
    struct io_uring_probe *p = io_uring_get_probe_ring(&ring);
    int ok = p && io_uring_opcode_supported(p, IORING_OP_READ) &&
             io_uring_opcode_supported(p, IORING_OP_WRITE);
    if (p) io_uring_free_probe(p);
    io_uring_queue_exit(&ring);
    *supported = ok;
    if (!ok) reason = "io_uring lacks IORING_OP_READ/WRITE (kernel older than 5.6)";
  } else {
    *supported = 0;
    switch (-rc) {
    case ELIBACC: reason = te_uring_loaded() ? "io_uring_queue_init failed" : te_uring_why(); break;
    case ENOSYS: reason = "io_uring is not in this kernel"; break;
    case EPERM: reason = "io_uring is disabled (kernel.io_uring_disabled or seccomp)"; break;
    case ENOMEM: reason = "io_uring: locked-memory limit too low"; break;
    default: reason = "io_uring_queue_init failed"; break;
    }
  }
  if (why) *why = reason;
  return TECORE_SUCCESS;
}
