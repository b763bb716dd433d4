/* SPDX-License-Identifier: Apache-2.0 */
/* ops_gregion.c -- tecore_seq_set_grad_region: the parameters' gradients
 * in one region of the caller's memory instead of one allocation each.
 * A data-parallel group reduces a bucket of gradients in place when they
 * lie in its collective's symmetric memory, contiguous: no copy into a
 * buffer and back (libtecomm's dp).  The layout is te_seq_alloc's, laid
 * end to end: operation order, each gradient rounded up to 256 bytes, so
 * that the kernels see the alignment and padding they always saw and the
 * memory counts (tecore_seq_memory) do not change. */
#include "ops/ops_internal.h"

#include <stdio.h>
#include <string.h>

#define GR_ALIGN 256

static size_t gr_round(size_t bytes) {
  if (bytes == 0) bytes = 16;   /* te_seq_alloc's minimum */
  return (bytes + GR_ALIGN - 1) & ~(size_t)(GR_ALIGN - 1);
}

/* Parameter p of op o's gradient, in bytes as the region holds it. */
static size_t gr_bytes_of(const tecore_seq_t *s, const struct te_op *o, size_t p) {
  return gr_round(o->plen[p] * tecore_dtype_size(te_grad_dtype(s, o, p)));
}

TE_EXPORT tecore_result_t tecore_seq_set_grad_region(tecore_seq_t *s,
                                                     const struct tecore_seq_grad_region *region) {
  static const char fn[] = "tecore_seq_set_grad_region";
  TE_CHECK(te_seq_arg(s, fn));
  TE_ARG(!s->built, "%s: the sequence is built: the gradients' storage is chosen before "
         "tecore_seq_build", fn);
  TE_ARG(!te_seq_infer(s), "%s: an inference sequence (TECORE_SEQ_INFERENCE) has no gradients",
         fn);
  TE_ARG(!region || region->alloc, "%s: region->alloc is NULL", fn);
  memset(&s->gregion, 0, sizeof s->gregion);
  if (region) s->gregion = *region;
  return TECORE_SUCCESS;
}

/* What alloc gave, checked; a refused region goes back to the caller. */
static tecore_result_t gr_check_base(tecore_seq_t *s, size_t bytes, tecore_devptr_t base) {
  static const char fn[] = "tecore_seq_build";
  if (base && base % GR_ALIGN == 0) return TECORE_SUCCESS;
  if (base && s->gregion.release) (void)s->gregion.release(s->gregion.ctx, base);
  tecore_clear_error();
  if (!base)
    return TE_ERR(TECORE_ERR_INVALID, "%s: the gradient region's alloc (%zu bytes) returned "
                  "success and base 0", fn, bytes);
  return TE_ERR(TECORE_ERR_INVALID, "%s: the gradient region's alloc (%zu bytes) returned base "
                "0x%llx, not a multiple of %d bytes", fn, bytes, (unsigned long long)base,
                GR_ALIGN);
}

tecore_result_t te_gregion_open(tecore_seq_t *s, tecore_stream_t stream) {
  if (!s->gregion.alloc || te_seq_infer(s)) return TECORE_SUCCESS;
  size_t bytes = 0;
  for (size_t i = 0; i < s->nops; i++)
    for (size_t p = 0; p < s->ops[i].nparams; p++) bytes += gr_bytes_of(s, &s->ops[i], p);
  if (!bytes) return TECORE_SUCCESS;   /* no parameters: nothing to place */
  tecore_devptr_t base = 0;
  tecore_result_t r = s->gregion.alloc(s->gregion.ctx, bytes, &base);
  if (r != TECORE_SUCCESS) {
    /* the callee's own message, kept in ours */
    char why[400];
    snprintf(why, sizeof why, "%s", tecore_last_error());
    if (base && s->gregion.release) (void)s->gregion.release(s->gregion.ctx, base);
    return TE_ERR(r, "tecore_seq_build: the gradient region's alloc (%zu bytes) failed (%s): %s",
                  bytes, tecore_result_name(r), why[0] ? why : "no detail");
  }
  TE_CHECK(gr_check_base(s, bytes, base));
  s->gr_base = base;
  s->gr_bytes = bytes;
  s->gr_used = 0;
  /* the padding too: a collective over a span of the region sums it */
  return tecore_memset_d8_async(base, 0, bytes, stream);
}

tecore_result_t te_gregion_take(tecore_seq_t *s, const struct te_op *o, size_t p,
                                tecore_devptr_t *g) {
  size_t es = tecore_dtype_size(te_grad_dtype(s, o, p));
  if (!s->gr_base) return te_seq_alloc(s, o->plen[p] * es, 1, g);
  size_t bytes = gr_bytes_of(s, o, p);
  if (bytes > s->gr_bytes - s->gr_used)
    return TE_ERR(TECORE_ERR_INTERNAL, "tecore_seq_build: the gradient region (%zu bytes) is "
                  "too small for the parameters' gradients", s->gr_bytes);
  *g = s->gr_base + s->gr_used;
  s->gr_used += bytes;
  s->bytes_total += bytes;
  s->bytes_param += bytes;
  return TECORE_SUCCESS;
}

tecore_result_t te_gregion_close(tecore_seq_t *s) {
  tecore_devptr_t base = s->gr_base;
  s->gr_base = 0;
  s->gr_bytes = s->gr_used = 0;
  if (!base || !s->gregion.release) return TECORE_SUCCESS;
  tecore_result_t r = s->gregion.release(s->gregion.ctx, base);
  if (r == TECORE_SUCCESS) return TECORE_SUCCESS;
  char why[400];
  snprintf(why, sizeof why, "%s", tecore_last_error());
  return TE_ERR(r, "tecore_seq: the gradient region's release (0x%llx) failed (%s): %s",
                (unsigned long long)base, tecore_result_name(r), why[0] ? why : "no detail");
}
