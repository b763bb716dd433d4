/* util.c -- libtegraph's error helpers (the detail string shared with
 * libtecore, mapped libtecore results) and small tensor helpers. */
#include "tg_internal.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

tegraph_result_t tg_err(tegraph_result_t code, const char *file, int line, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  tecore_set_error("%s", msg);
  tecore_log(TECORE_LOG_INFO, TECORE_SUBSYS_GRAPH, file, line, "%s: %s", tegraph_result_name(code),
             msg);
  return code;
}

tegraph_result_t tg_core(tecore_result_t r, const char *what) {
  char prev[400];
  snprintf(prev, sizeof prev, "%s", tecore_last_error());
  tecore_set_error("%s: %s", what, prev[0] ? prev : tecore_strerror(r));
  switch (r) {
  case TECORE_SUCCESS: return TEGRAPH_SUCCESS;
  case TECORE_ERR_INVALID: return TEGRAPH_ERR_INVALID;
  case TECORE_ERR_NOMEM:
  case TECORE_ERR_DEVICE_NOMEM: return TEGRAPH_ERR_NOMEM;
  case TECORE_ERR_CAPTURE: return TEGRAPH_ERR_CAPTURE;
  case TECORE_ERR_NOT_SUPPORTED: return TEGRAPH_ERR_NOT_SUPPORTED;
  default: return TEGRAPH_ERR_DEVICE;
  }
}

size_t tg_tensor_bytes(const struct tecore_tensor *t) {
  return tecore_tensor_numel(t) * tecore_dtype_size(t->dtype);
}

const char *tg_shape_str(const struct tecore_tensor *t, char *buf, size_t n) {
  size_t len = 0;
  len += (size_t)snprintf(buf, n, "[");
  for (int d = 0; d < t->ndim && d < TECORE_TENSOR_MAX_DIMS && len < n; d++)
    len += (size_t)snprintf(buf + len, n - len, "%s%zu", d ? ", " : "", t->shape[d]);
  if (len < n) snprintf(buf + len, n - len, "]");
  return buf;
}
