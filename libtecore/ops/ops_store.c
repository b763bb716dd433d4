/* SPDX-License-Identifier: Apache-2.0 */
/* ops_store.c -- a sequence's storage and the views of it that every part
 * of the fuser takes: the device allocations (counted, freed by destroy),
 * 2-D tensor descriptors, and the storage a boundary's value or gradient
 * and a residual slot's resolve to in the current call.  The bottom of
 * ops/: it calls nothing of the fuser's other files. */
#include "ops/ops_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- allocation ------------------------------------------------------------------- */

tecore_result_t te_seq_alloc(tecore_seq_t *s, size_t bytes, int param, tecore_devptr_t *p) {
  if (bytes == 0) bytes = 16;
  if (s->nallocs == s->cap_allocs) {
    size_t cap = s->cap_allocs ? 2 * s->cap_allocs : 64;
    struct te_alloc *a = realloc(s->allocs, cap * sizeof *a);
    if (!a) return TE_ERR(TECORE_ERR_NOMEM, "tecore_seq: out of host memory");
    s->allocs = a;
    s->cap_allocs = cap;
  }
  /* round up so 16-byte vector paths may run over whole rows */
  bytes = (bytes + 255) & ~(size_t)255;
  TE_CHECK(tecore_mem_alloc(bytes, p));
  s->allocs[s->nallocs++] = (struct te_alloc){.p = *p, .bytes = bytes, .param = param};
  s->bytes_total += bytes;
  if (param) s->bytes_param += bytes;
  return TECORE_SUCCESS;
}

/* Frees an allocation of te_seq_alloc. */
tecore_result_t te_seq_release(tecore_seq_t *s, tecore_devptr_t p) {
  for (size_t i = 0; i < s->nallocs; i++) {
    if (s->allocs[i].p != p) continue;
    TE_CHECK(tecore_mem_free(p));
    s->bytes_total -= s->allocs[i].bytes;
    if (s->allocs[i].param) s->bytes_param -= s->allocs[i].bytes;
    s->allocs[i] = s->allocs[--s->nallocs];
    return TECORE_SUCCESS;
  }
  return TE_ERR(TECORE_ERR_INTERNAL, "tecore_seq: 0x%llx is not an allocation of the sequence",
                (unsigned long long)p);
}

/* ---- views ------------------------------------------------------------------------ */

void te_t2d(struct tecore_tensor *t, tecore_dtype_t dt, size_t rows, size_t cols,
            tecore_devptr_t data) {
  memset(t, 0, sizeof *t);
  t->dtype = dt;
  t->scaling = TECORE_SCALING_NONE;
  t->ndim = 2;
  t->shape[0] = rows;
  t->shape[1] = cols;
  t->data = data;
}

tecore_devptr_t te_bnd_hp(const tecore_seq_t *s, size_t b) {
  while (s->bnd[b].alias >= 0) b = (size_t)s->bnd[b].alias;
  if (b == 0) return s->run_in;
  if (b == s->nops) return s->run_out;
  return s->bnd[b].hp;
}

tecore_devptr_t te_bnd_grad(const tecore_seq_t *s, size_t b) {
  while (s->bnd[b].galias >= 0) b = (size_t)s->bnd[b].galias;
  if (b == s->nops) return s->run_dy;
  if (b == 0) return s->run_dx;
  return s->bnd[b].g;
}

tecore_devptr_t te_slot_value(const tecore_seq_t *s, int p) {
  const struct te_slot *sl = &s->pairs[p];
  if (sl->maker >= 0) return te_bnd_hp(s, (size_t)sl->maker);
  return sl->value;
}

tecore_devptr_t te_slot_grad(const tecore_seq_t *s, int p) {
  const struct te_slot *sl = &s->pairs[p];
  if (sl->maker >= 0 && sl->adder >= 0) return te_bnd_grad(s, (size_t)sl->adder + 1);
  return sl->grad;
}
