/* SPDX-License-Identifier: Apache-2.0 */
/* error.c -- result strings and the per-thread last-error detail.
 * The detail buffer is thread-local and fixed-size, so setting it never
 * allocates (it works when malloc has just failed). */
#include "internal.h"
#include "te_results_check.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define TE_DETAIL_MAX 1024
static __thread char te_detail[TE_DETAIL_MAX];

/* TECORE_RESULT_LIST is common/te_results.h's core column. */
TE_RESULTS_CHECK(core, TECORE, TECORE_RESULT_LIST);

TE_EXPORT const char *tecore_strerror(tecore_result_t r) {
  switch (r) {
#define TE_MSG_(name, value, msg) \
  case name:                      \
    return msg;
    TECORE_RESULT_LIST(TE_MSG_)
#undef TE_MSG_
  default:
    return "unknown result";
  }
}

TE_EXPORT const char *tecore_result_name(tecore_result_t r) {
  switch (r) {
#define TE_NAME_(name, value, msg) \
  case name:                       \
    return #name;
    TECORE_RESULT_LIST(TE_NAME_)
#undef TE_NAME_
  default:
    return "unknown result";
  }
}

TE_EXPORT const char *tecore_last_error(void) { return te_detail; }

TE_EXPORT void tecore_clear_error(void) { te_detail[0] = '\0'; }

/* An error found early but reported by a later call of the thread (the
 * vdev checker's buffer overrun, reported by the launch after the
 * caller's own argument checks): held here, below the layers that set
 * and take it, and dropped when any error is set first. */
static __thread int deferred_code;
static __thread char deferred_msg[600];

void te_error_defer(tecore_result_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(deferred_msg, sizeof deferred_msg, fmt, ap);
  va_end(ap);
  deferred_code = (int)code;
}

int te_error_deferred(void) { return deferred_code != 0; }

tecore_result_t te_error_deferred_take(void) {
  if (!deferred_code) return TECORE_SUCCESS;
  tecore_result_t code = (tecore_result_t)deferred_code;
  char msg[sizeof deferred_msg];
  memcpy(msg, deferred_msg, sizeof msg);
  deferred_code = 0;
  return TE_ERR(code, "%s", msg);
}

tecore_result_t te_error_set(tecore_result_t code, const char *file, int line, const char *fmt,
                             ...) {
  int saved = errno;
  deferred_code = 0; /* this call fails: an error held for a later launch is moot */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(te_detail, sizeof te_detail, fmt, ap);
  va_end(ap);
  tecore_log(TECORE_LOG_INFO, TECORE_SUBSYS_DEVICE, file, line, "%s: %s",
             tecore_result_name(code), te_detail);
  errno = saved;
  return code;
}

void te_error_hop(const char *func, const char *file, int line) {
  tecore_log(TECORE_LOG_TRACE, TECORE_SUBSYS_DEVICE, file, line, "<- %s", func);
}

/* Layered libraries (libtegraph, libtecomm) set the same per-thread detail
 * so one tecore_last_error() call explains any libte failure. */
TE_EXPORT void tecore_set_error(const char *fmt, ...) {
  int saved = errno;
  if (!fmt) { /* nothing to format: an empty detail, not a crash */
    te_detail[0] = '\0';
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(te_detail, sizeof te_detail, fmt, ap);
  va_end(ap);
  errno = saved;
}
