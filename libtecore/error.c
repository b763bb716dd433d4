/* error.c -- result strings and the per-thread last-error detail.
 * The detail buffer is thread-local and fixed-size, so setting it never
 * allocates (it works when malloc has just failed). */
#include "internal.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define TE_DETAIL_MAX 1024
static __thread char te_detail[TE_DETAIL_MAX];

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

tecore_result_t te_error_set(tecore_result_t code, const char *file, int line, const char *fmt,
                             ...) {
  int saved = errno;
  te_dev_pending_clear(); /* this call fails: a buffer check held for its launch is moot */
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
