/* SPDX-License-Identifier: Apache-2.0 */
/* ops_grad.c -- tecore_seq_set_grad: an activation gradient of a sequence
 * in storage the caller gives.  What it is for: a collective that reads
 * its input where it lies (libtecomm's symmetric memory) sums the
 * gradient a Linear's dgrad wrote there with no staging copy -- tp_copy's
 * backward sum of a column-parallel fc1's input gradient (te-demo --tp).
 *
 * The boundary's gradient leaves the shared arena (te_bnd.gshared, laid
 * out by the backward plan) or, when it had a buffer of its own, frees
 * it; later plans leave it where the caller put it (TE_EXT_GRAD). */
#include "ops/ops_internal.h"

/* The backward writes all of the gradient's bytes at ptr (on a GPU
 * nothing would catch a short buffer): they must lie inside one
 * allocation the device layer knows, as tecore_seq_set_saved's must. */
static tecore_result_t grad_fits(tecore_devptr_t ptr, size_t bytes, size_t bnd, const char *fn) {
  tecore_devptr_t base = 0;
  size_t len = 0;
  TE_ARG(tecore_mem_range(ptr, &base, &len) == TECORE_SUCCESS,
         "%s: ptr 0x%llx is not in an allocation of the device layer", fn,
         (unsigned long long)ptr);
  size_t left = ptr - base <= len ? len - (size_t)(ptr - base) : 0;
  TE_ARG(bytes <= left, "%s: the gradient of boundary %zu needs %zu bytes; ptr 0x%llx has %zu "
         "to the end of its allocation", fn, bnd, bytes, (unsigned long long)ptr, left);
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_seq_set_grad(tecore_seq_t *s, size_t bnd, tecore_devptr_t ptr) {
  static const char fn[] = "tecore_seq_set_grad";
  TE_CHECK(te_seq_arg(s, fn));
  TE_ARG(s->built, "%s: the sequence is not built (tecore_seq_build)", fn);
  TE_ARG(!te_seq_infer(s), "%s: seq %p is an inference sequence (TECORE_SEQ_INFERENCE): it has "
         "no gradients", fn, (const void *)s);
  TE_ARG(bnd >= 1 && bnd < s->nops,
         "%s: bnd %zu is not an inner boundary (1 .. %zu: the input of an operation but the "
         "first; the ends are the caller's dx and dy)", fn, bnd, s->nops - 1);
  TE_ARG(ptr % 256 == 0, "%s: ptr 0x%llx is not 256-byte aligned", fn, (unsigned long long)ptr);
  size_t o = bnd;
  while (s->bnd[o].galias >= 0) o = (size_t)s->bnd[o].galias;
  TE_ARG(o < s->nops, "%s: the gradient of boundary %zu is the caller's dy (the operations "
         "after it alias their gradients up to the sequence's output)", fn, bnd);
  struct te_bnd *bd = &s->bnd[o];
  int ext = (bd->ext & TE_EXT_GRAD) != 0;
  const size_t bytes = bd->rows * bd->cols * tecore_dtype_size(s->cfg.dtype);
  if (ptr) {
    TE_CHECK(grad_fits(ptr, bytes, bnd, fn));
    if (!ext && !bd->gshared) TE_CHECK(te_seq_release(s, bd->g));
    bd->g = ptr;
    bd->gshared = 0;
    bd->ext |= TE_EXT_GRAD;
    return TECORE_SUCCESS;
  }
  if (!ext) return TECORE_SUCCESS;   /* already the sequence's own */
  tecore_devptr_t own = 0;
  TE_CHECK(te_seq_alloc(s, bytes, 0, &own));
  bd->g = own;
  bd->ext &= ~TE_EXT_GRAD;
  return TECORE_SUCCESS;
}
