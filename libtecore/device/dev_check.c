/* SPDX-License-Identifier: Apache-2.0 */
/* dev_check.c -- the memory checks of the layers above the ops table: a
 * raw pointer or a tensor's buffer must hold the whole range a kernel will
 * touch.  The backend answers through its checks_on and mem_check ops:
 * on vdev the allocation registry (TECORE_VDEV_CHECK, on by default;
 * vdev_check.c), on cuda the driver's address ranges (TECORE_CUDA_CHECK=1,
 * a debugging mode; cuda_memory.c). */
#include "internal.h"
#include "device_ops.h"
#include "ksupport/span.h"
#include <stdio.h>

int te_dev_checks_on(void) {
  const struct te_device_ops *o = te_ops_if_ready();
  int on = 0;
  if (!o || o->checks_on(&on) != TECORE_SUCCESS) return 0;
  return on;
}

/* 0 when [p, p+bytes) lies in one allocation; else -1 and the reason. */
static int range_bad(tecore_devptr_t p, size_t bytes, char *why, size_t n) {
  const struct te_device_ops *o = te_ops_if_ready();
  if (!o) return 0;
  return o->mem_check(p, bytes, why, n) == TECORE_SUCCESS ? 0 : -1;
}

tecore_result_t te_dev_check_range(tecore_devptr_t p, size_t bytes, const char *fn,
                                   const char *what) {
  if (!te_dev_checks_on()) return TECORE_SUCCESS;
  char why[240];
  if (range_bad(p, bytes, why, sizeof why) == 0) return TECORE_SUCCESS;
  return TE_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "%s: illegal address: %s (0x%llx, %zu bytes): %s", fn,
                what, (unsigned long long)p, bytes, why);
}

/* A tensor's buffer found too small is reported by the launch that would
 * run past it, not by the descriptor check: the public function's own
 * argument errors (a wrong dtype, a bad shape) come first, as they would
 * without the checker.  The deferred error lives with the thread's error
 * state (error.c), which drops it when any error is set. */
void te_dev_check_range_later(tecore_devptr_t p, size_t bytes, const char *fn, const char *what) {
  if (te_error_deferred() || !te_dev_checks_on()) return;
  char why[240];
  if (range_bad(p, bytes, why, sizeof why) == 0) return;
  te_error_defer(TECORE_ERR_ILLEGAL_ADDRESS, "%s: illegal address: %s (0x%llx, %zu bytes): %s",
                 fn, what, (unsigned long long)p, bytes, why);
}

/* A span that runs past the allocation it starts in, when the registry
 * knows it: a shape larger than its buffer (internal.h).  Asked only
 * after a conflict, so the query costs nothing on calls that pass. */
int te_span_past_buffer(const struct te_span *s, size_t n, char *msg, size_t len) {
  for (size_t i = 0; i < n; i++) {
    tecore_devptr_t base = 0;
    size_t bytes = 0;
    if (!s[i].p || !s[i].bytes || tecore_mem_range(s[i].p, &base, &bytes) != TECORE_SUCCESS)
      continue;
    size_t left = bytes - (size_t)(s[i].p - base);
    if (s[i].bytes <= left) continue;
    char nm[96];
    snprintf(msg, len, "%s: the shape exceeds the buffer: it needs %zu bytes from 0x%llx, the "
             "buffer holds %zu from there (allocation [0x%llx, +%zu))",
             te_span_name(&s[i], nm, sizeof nm), s[i].bytes, (unsigned long long)s[i].p, left,
             (unsigned long long)base, bytes);
    return 1;
  }
  return 0;
}
