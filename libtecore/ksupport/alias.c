/* alias.c -- the aliasing check of ksupport.h: no output of an operation
 * may share a byte with another output, nor with an input unless the rule
 * lets it be the very same range (an in-place update). */
#include "ksupport/ksupport.h"

static int span_same(struct te_span a, struct te_span b) {
  return a.p == b.p && a.bytes == b.bytes;
}

tecore_result_t te_check_alias(const struct te_span *out, size_t nout, const struct te_span *in,
                               size_t nin, enum te_alias_rule rule, const char *fn) {
  for (size_t a = 0; a < nout; a++) {
    for (size_t b = 0; b < nin; b++)
      if (te_span_overlap(out[a], in[b]) && !(rule == TE_ALIAS_EXACT_OK && span_same(out[a], in[b])))
        return TE_ERR(TECORE_ERR_INVALID, "%s: %s overlaps %s%s", fn, out[a].name, in[b].name,
                      rule == TE_ALIAS_EXACT_OK ? " other than as the very same range (in place)"
                                                : "");
    for (size_t b = a + 1; b < nout; b++)
      if (te_span_overlap(out[a], out[b]))
        return TE_ERR(TECORE_ERR_INVALID, "%s: %s overlaps %s", fn, out[a].name, out[b].name);
  }
  return TECORE_SUCCESS;
}
