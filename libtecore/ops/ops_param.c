/* SPDX-License-Identifier: Apache-2.0 */
/* ops_param.c -- tecore_seq_set_param, tecore_seq_set_param_grad and
 * tecore_seq_set_fp8_weight_data: a parameter's value, its gradient, or
 * a given FP8 weight's codes, in storage the caller gives.  What
 * they are for: fully sharded data parallelism (libtecomm's ZeRO-3),
 * where no rank holds every weight across a step; the group points each
 * layer's weights into a small ring of buffers it all-gathers them into
 * right before the layer's forward and backward, and each layer's
 * gradients into a second ring it reduce-scatters them out of as soon as
 * the backward wrote them.
 *
 * The executors read op->param[p] when they queue work, so the new
 * address holds from the next pass on; the parameter's own allocation is
 * freed (the memory the sharding saves) and param_ext keeps destroy from
 * freeing the caller's. */
#include "ops/ops_internal.h"

/* The operation and slot of parameter index in tecore_seq_params' order. */
static int param_at(tecore_seq_t *s, size_t index, struct te_op **op, size_t *p) {
  size_t k = 0;
  for (size_t i = 0; i < s->nops; i++) {
    if (index < k + s->ops[i].nparams) {
      *op = &s->ops[i];
      *p = index - k;
      return 1;
    }
    k += s->ops[i].nparams;
  }
  return 0;
}

static size_t param_count(const tecore_seq_t *s) {
  size_t k = 0;
  for (size_t i = 0; i < s->nops; i++) k += s->ops[i].nparams;
  return k;
}

/* The pass writes and reads all of the parameter's bytes at ptr. */
static tecore_result_t param_fits(const char *fn, tecore_devptr_t ptr, size_t bytes,
                                  size_t index) {
  tecore_devptr_t base = 0;
  size_t len = 0;
  TE_ARG(tecore_mem_range(ptr, &base, &len) == TECORE_SUCCESS,
         "%s: ptr 0x%llx is not in an allocation of the device layer", fn,
         (unsigned long long)ptr);
  size_t left = ptr - base <= len ? len - (size_t)(ptr - base) : 0;
  TE_ARG(bytes <= left, "%s: index %zu needs %zu bytes; ptr 0x%llx has %zu to the end of "
         "its allocation", fn, index, bytes, (unsigned long long)ptr, left);
  return TECORE_SUCCESS;
}

/* Storage of the sequence's own, zeroed, into *own (untouched on failure). */
static tecore_result_t own_zeroed(tecore_seq_t *s, size_t bytes, tecore_devptr_t *own) {
  tecore_devptr_t p = 0;
  TE_CHECK(te_seq_alloc(s, bytes, 1, &p));
  tecore_result_t r = tecore_memset_d8_async(p, 0, bytes, NULL);
  if (r == TECORE_SUCCESS) r = tecore_stream_synchronize(NULL);
  if (r != TECORE_SUCCESS) {
    (void)te_seq_release(s, p);
    return r;
  }
  *own = p;
  return TECORE_SUCCESS;
}

/* What both calls check: a live, built sequence, the index, ptr's
 * alignment; the parameter's operation and slot. */
static tecore_result_t take_args(tecore_seq_t *s, const char *fn, size_t index,
                                 tecore_devptr_t ptr, struct te_op **op, size_t *p) {
  TE_CHECK(te_seq_arg(s, fn));
  TE_ARG(s->built, "%s: the sequence is not built (tecore_seq_build)", fn);
  TE_ARG(param_at(s, index, op, p), "%s: index %zu is out of range (the sequence has %zu "
         "parameters)", fn, index, param_count(s));
  TE_ARG(ptr % 16 == 0, "%s: ptr 0x%llx is not 16-byte aligned", fn, (unsigned long long)ptr);
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_seq_set_param(tecore_seq_t *s, size_t index, tecore_devptr_t ptr) {
  static const char fn[] = "tecore_seq_set_param";
  struct te_op *op = NULL;
  size_t p = 0;
  TE_CHECK(take_args(s, fn, index, ptr, &op, &p));
  const size_t bytes = op->plen[p] * tecore_dtype_size(te_param_dtype(s, op, p));
  const unsigned bit = 1u << p;
  if (!ptr) {   /* storage of the sequence's own again, zeroed (the caller's is gone) */
    if (op->param_ext & bit) TE_CHECK(own_zeroed(s, bytes, &op->param[p]));
    op->param_ext &= ~bit;
    return TECORE_SUCCESS;
  }
  TE_CHECK(param_fits(fn, ptr, bytes, index));
  if (!(op->param_ext & bit)) TE_CHECK(te_seq_release(s, op->param[p]));
  op->param[p] = ptr;
  op->param_ext |= bit;
  op->w8_cached = 0;   /* an inference FP8 copy was of the old value */
  return TECORE_SUCCESS;
}

/* A gradient region (tecore_seq_set_grad_region) is one allocation of
 * the caller's: a gradient moved out of it leaves its bytes there.  A
 * mark tecore_seq_zero_grad left goes with the gradient (te_grad_take_fresh
 * looks for op->grad[p]). */
TE_EXPORT tecore_result_t tecore_seq_set_param_grad(tecore_seq_t *s, size_t index,
                                                    tecore_devptr_t ptr) {
  static const char fn[] = "tecore_seq_set_param_grad";
  struct te_op *op = NULL;
  size_t p = 0;
  TE_CHECK(take_args(s, fn, index, ptr, &op, &p));
  TE_ARG(!te_seq_infer(s), "%s: an inference sequence (TECORE_SEQ_INFERENCE) has no gradients",
         fn);
  const size_t bytes = op->plen[p] * tecore_dtype_size(te_grad_dtype(s, op, p));
  const unsigned bit = 1u << p;
  if (!ptr) {   /* the sequence's own again, zeroed */
    if (op->grad_ext & bit) TE_CHECK(own_zeroed(s, bytes, &op->grad[p]));
    op->grad_ext &= ~bit;
    return TECORE_SUCCESS;
  }
  TE_CHECK(param_fits(fn, ptr, bytes, index));
  if (!(op->grad_ext & bit) && !s->gregion.alloc) TE_CHECK(te_seq_release(s, op->grad[p]));
  op->grad[p] = ptr;
  op->grad_ext |= bit;
  return TECORE_SUCCESS;
}

/* The codes of a weight the caller gives (tecore_seq_set_fp8_weight_given)
 * are read by the passes only (the forward's GEMM, the backward's byte
 * transpose), never written: a ZeRO-3 ring slot the group gathers them
 * into before each pass can hold them.  Given 0 or a new recipe ends it
 * (ops_linear.c, ops_seq.c). */
TE_EXPORT tecore_result_t tecore_seq_set_fp8_weight_data(tecore_seq_t *s, size_t index,
                                                         tecore_devptr_t ptr) {
  static const char fn[] = "tecore_seq_set_fp8_weight_data";
  TE_CHECK(te_seq_op_arg(s, index, fn));
  TE_ARG(s->built, "%s: the sequence is not built (tecore_seq_build)", fn);
  struct te_op *o = &s->ops[index];
  TE_ARG(o->w8_given && o->w8_row, "%s: operation %zu's FP8 weight is not given "
         "(tecore_seq_set_fp8_weight_given)", fn, index);
  TE_ARG(ptr % 16 == 0, "%s: ptr 0x%llx is not 16-byte aligned", fn, (unsigned long long)ptr);
  const size_t bytes = o->plen[0];   /* E4M3: a byte a weight */
  if (!ptr) {   /* the sequence's own again (its bytes undefined until written) */
    if (o->w8_ext) TE_CHECK(te_seq_alloc(s, bytes, 0, &o->w8_row));
    o->w8_ext = 0;
    return TECORE_SUCCESS;
  }
  if (o->w8_ext && o->w8_row == ptr) return TECORE_SUCCESS;
  TE_CHECK(param_fits(fn, ptr, bytes, index));
  if (!o->w8_ext) TE_CHECK(te_seq_release(s, o->w8_row));
  o->w8_row = ptr;
  o->w8_ext = 1;
  return TECORE_SUCCESS;
}
