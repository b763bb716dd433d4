/* SPDX-License-Identifier: Apache-2.0 */
/* ops_off.c -- TECORE_OPS_FUSION_OFF, the names of what the fuser leaves
 * out: the planner's patterns (ops_plan.c drops them from its table) and
 * the two hand-offs to a caller's kernels, grad_fp8 and weight_fp8
 * (tecore_seq_grad_fp8 and tecore_seq_fp8_weight, ops_linear.c, refuse),
 * and grad_fp8_given (TECORE_SEQ_GRAD_FP8_GIVEN has no effect, ops_seq.c).
 * A file of its own so that both read it without importing each other. */
#include "ops/ops_internal.h"

#include <string.h>

TE_PARAM_STR(ops_fusion_off, "TECORE_OPS_FUSION_OFF", "", NULL,
             "fusion patterns the planner leaves out, by name, comma-separated (e.g. "
             "layernorm_bwd_add,linear+bias+gelu; tecore_seq_describe prints the names); the "
             "operations they covered run by themselves or in other patterns; grad_fp8 and "
             "weight_fp8 make tecore_seq_grad_fp8 and tecore_seq_fp8_weight refuse (the "
             "caller then leaves the quantize to the sequence); grad_fp8_given makes the "
             "flag TECORE_SEQ_GRAD_FP8_GIVEN have no effect (the last Linear's FP8 gradient in "
             "the sequence's own buffer)")

const char *te_fusion_off_list(void) { return tecore_tunable_str(&ops_fusion_off); }

const char *te_fusion_off_next(const char **p, size_t *len) {
  const char *b = *p;
  while (*b == ' ' || *b == '\t' || *b == ',') b++;
  if (!*b) return NULL;
  const char *e = b;
  while (*e && *e != ',') e++;
  const char *t = e;
  while (t > b && (t[-1] == ' ' || t[-1] == '\t')) t--;
  *len = (size_t)(t - b);
  *p = e;
  return b;
}

int te_fusion_named_off(const char *name) {
  const char *list = te_fusion_off_list();
  if (!list || !*list) return 0;
  size_t n = strlen(name), len;
  for (const char *q; (q = te_fusion_off_next(&list, &len));)
    if (len == n && n && memcmp(q, name, n) == 0) return 1;
  return 0;
}
