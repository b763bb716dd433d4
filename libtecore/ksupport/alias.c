/* SPDX-License-Identifier: Apache-2.0 */
/* alias.c -- the aliasing checks of ksupport.h: a call's spans against
 * libte's one rule (span.h), reported as a libtecore error. */
#include "ksupport/ksupport.h"
#include <stdlib.h>

/* A span past its allocation also reaches the buffers placed after its
 * own, so the overlap found first is a symptom (a 4096x4096 tensor on a
 * 2.5 KiB buffer "overlapped" its own amax): the cause is named instead. */
static __attribute__((cold, noinline)) tecore_result_t conflict(const struct te_span *s, size_t n,
                                                                const char *fn, char *msg,
                                                                size_t len) {
  te_span_past_buffer(s, n, msg, len);
  return TE_ERR(TECORE_ERR_INVALID, "%s: %s", fn, msg);
}

tecore_result_t te_check_spans(const struct te_span *s, size_t n, const char *fn) {
  char msg[256];
  if (n < 2) return TECORE_SUCCESS;
  if (te_span_conflict(s, n, msg, sizeof msg)) return conflict(s, n, fn, msg, sizeof msg);
  return TECORE_SUCCESS;
}

tecore_result_t te_check_alias(const struct te_span *out, size_t nout, const struct te_span *in,
                               size_t nin, enum te_alias_rule rule, const char *fn) {
  struct te_span small[64], *all = small;
  size_t n = nout + nin;
  if (n > TE_ARRAY_SIZE(small) && !(all = malloc(n * sizeof *all)))
    return TE_ERR(TECORE_ERR_NOMEM, "%s: no host memory to check %zu buffers", fn, n);
  for (size_t i = 0; i < n; i++) {
    all[i] = i < nout ? out[i] : in[i - nout];
    all[i].access = i < nout ? TE_ACCESS_WRITE : TE_ACCESS_READ;
    all[i].pair = rule == TE_ALIAS_EXACT_OK ? 1u : 0u;
  }
  tecore_result_t r = te_check_spans(all, n, fn);
  if (all != small) free(all);
  return r;
}
