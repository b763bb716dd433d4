/* SPDX-License-Identifier: Apache-2.0 */
/* alias_tensor.c -- the byte ranges a tensor descriptor names, as te_span
 * lists for te_check_alias (ksupport.h): what a kernel writes through an
 * output tensor and what it reads through an input, so every family
 * states its aliasing rule in one call. */
#include "ksupport/ksupport.h"
#include <stdio.h>

/* Bytes of one scale buffer: a per-tensor scale is one float; for block
 * modes the start is what every layout has (the kernels own the rest). */
static size_t scale_bytes(const struct tecore_tensor *t) {
  return te_scaling_per_tensor(t->scaling) ? sizeof(float) : 1;
}

static void add(struct te_tensor_spans *s, const char *arg, const char *field,
                tecore_devptr_t p, size_t bytes) {
  if (!p || !bytes || s->n == TE_TENSOR_SPANS_MAX) return;
  snprintf(s->names[s->n], sizeof s->names[s->n], "%s->%s", arg, field);
  s->span[s->n] = (struct te_span){s->names[s->n], p, bytes, s->access, s->pair, NULL, 0};
  s->n++;
}

void te_tensor_spans(const struct tecore_tensor *t, const char *arg, unsigned which,
                     struct te_tensor_spans *s) {
  size_t numel = te_tensor_count(t), bytes = 0;
  if (numel != SIZE_MAX && __builtin_mul_overflow(numel, tecore_dtype_size(t->dtype), &bytes))
    bytes = 0;
  if (which & TE_SPAN_DATA) {
    add(s, arg, "data", t->data, bytes);
    add(s, arg, "columnwise_data", t->columnwise_data, bytes);
  }
  if (which & TE_SPAN_AMAX) add(s, arg, "amax", t->amax, sizeof(float));
  if (which & TE_SPAN_SCALE) add(s, arg, "scale", t->scale, sizeof(float));
  if (which & TE_SPAN_SCALE_INV) {
    add(s, arg, "scale_inv", t->scale_inv, scale_bytes(t));
    add(s, arg, "columnwise_scale_inv", t->columnwise_scale_inv, scale_bytes(t));
  }
}

void te_span_add(struct te_tensor_spans *s, const char *name, tecore_devptr_t p, size_t bytes) {
  if (!p || !bytes || s->n == TE_TENSOR_SPANS_MAX) return;
  snprintf(s->names[s->n], sizeof s->names[s->n], "%s", name);
  s->span[s->n] = (struct te_span){s->names[s->n], p, bytes, s->access, s->pair, NULL, 0};
  s->n++;
}
