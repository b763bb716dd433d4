/* SPDX-License-Identifier: Apache-2.0 */
/* util.c -- libtegraph's error helpers (the detail string shared with
 * libtecore, libtecore results converted by common/te_results.h) and small tensor helpers. */
#include "tg_internal.h"
#include "te_results.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

tegraph_result_t tg_err(tegraph_result_t code, const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  te_upper_verr(TECORE_SUBSYS_GRAPH, tegraph_result_name(code), file, line, fmt, ap);
  va_end(ap);
  return code;
}

tegraph_result_t tg_core(tecore_result_t r, const char *what) {
  te_upper_core_detail(r, what);
  return (tegraph_result_t)te_result_to_graph((int)r);
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
