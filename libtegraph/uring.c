/* uring.c -- whether io_uring works on this system.  A kernel may have it
 * compiled out, disabled (kernel.io_uring_disabled) or blocked by a
 * seccomp filter (containers); the offload spill path asks first and
 * falls back to host memory only, with a clear reason, when it cannot. */
#include "config.h"
#include <errno.h>
#include <liburing.h>
#include <te/graph.h>

#define TE_EXPORT __attribute__((visibility("default")))

TE_EXPORT tegraph_result_t tegraph_uring_probe(int *supported, const char **why) {
  if (!supported) {
    tecore_set_error("tegraph_uring_probe: supported is NULL");
    return TEGRAPH_ERR_INVALID;
  }
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
    case ENOSYS: reason = "io_uring is not in this kernel"; break;
    case EPERM: reason = "io_uring is disabled (kernel.io_uring_disabled or seccomp)"; break;
    case ENOMEM: reason = "io_uring: locked-memory limit too low"; break;
    default: reason = "io_uring_queue_init failed"; break;
    }
  }
  if (why) *why = reason;
  return TEGRAPH_SUCCESS;
}
