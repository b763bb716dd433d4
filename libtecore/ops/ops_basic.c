/* SPDX-License-Identifier: Apache-2.0 */
/* ops_basic.c -- the small helpers the executors (ops_kinds.c,
 * ops_linear.c, ops_fusions.c) share: 1-D tensors, casts, gradient
 * accumulation into F32, bias add and bias gradient.
 *
 * Shapes: activations [rows][cols] of the sequence's dtype; vectors [cols]
 * (biases, reduced gradients) go through F32 scratch and are then added
 * into the F32 gradient buffers, which is what makes gradients accumulate
 * across microbatches. */
#include "ops/ops_internal.h"


void te_vec(struct tecore_tensor *t, tecore_dtype_t dt, size_t n, tecore_devptr_t p) {
  te_t2d(t, dt, 1, n, p);
  t->ndim = 1;
  t->shape[0] = n;
  t->shape[1] = 0;
}

tecore_result_t te_cast(tecore_seq_t *s, tecore_devptr_t dst, tecore_dtype_t ddt,
                        tecore_devptr_t src, tecore_dtype_t sdt, size_t n,
                        tecore_stream_t stream) {
  struct tecore_tensor in, out;
  te_vec(&in, sdt, n, src);
  te_vec(&out, ddt, n, dst);
  return tecore_unscale_multi(&in, &out, 1, s->one_f32, 0, stream);
}

int te_grad_take_fresh(tecore_seq_t *s, tecore_devptr_t g) {
  int hit = 0;
  if (!s->nfresh || !g) return 0;
  /* every operation whose gradient lies there (one, in practice) */
  for (size_t i = 0; i < s->nops; i++) {
    struct te_op *o = &s->ops[i];
    for (size_t p = 0; p < o->nparams && o->grad_fresh; p++)
      if (o->grad[p] == g && (o->grad_fresh & (1u << p))) {
        o->grad_fresh &= ~(1u << p);
        s->nfresh--;
        hit = 1;
      }
  }
  return hit;
}

void te_grad_put_fresh(tecore_seq_t *s, tecore_devptr_t g) {
  for (size_t i = 0; g && i < s->nops; i++) {
    struct te_op *o = &s->ops[i];
    for (size_t p = 0; p < o->nparams; p++)
      if (o->grad[p] == g && !(o->grad_fresh & (1u << p))) {
        o->grad_fresh |= 1u << p;
        s->nfresh++;
      }
  }
}

/* dst (F32) += src; a parameter gradient marked to be overwritten gets
 * src itself (a copy, or the cast into dst): the same values as adding
 * to the zeros a fill wrote, but for a -0.0 that stays -0.0 (0 + -0 is
 * +0), which no later use tells apart (squares, AdamW's moments). */
tecore_result_t te_accum_f32(tecore_seq_t *s, tecore_devptr_t dst, tecore_devptr_t src,
                             tecore_dtype_t dt, size_t n, tecore_stream_t stream) {
  if (te_grad_take_fresh(s, dst)) {
    if (dt != TECORE_DTYPE_F32) return te_cast(s, dst, TECORE_DTYPE_F32, src, dt, n, stream);
    return tecore_memcpy_async(dst, src, n * 4, stream);
  }
  if (dt != TECORE_DTYPE_F32) {
    TE_CHECK(te_cast(s, s->dvec_tmp, TECORE_DTYPE_F32, src, dt, n, stream));
    src = s->dvec_tmp;
  }
  return te_grad_add(dst, src, n, stream);
}

/* Where a kernel writes an F32 parameter gradient: straight into grad
 * when it is marked to be overwritten (the mark taken), else into tmp
 * for te_grad_add.  A captured backward then holds no copy node for it. */
tecore_devptr_t te_grad_out(tecore_seq_t *s, tecore_devptr_t grad, tecore_devptr_t tmp) {
  return te_grad_take_fresh(s, grad) ? grad : tmp;
}

/* grad += out (F32, n), unless te_grad_out gave grad itself. */
tecore_result_t te_grad_add(tecore_devptr_t grad, tecore_devptr_t out, size_t n,
                            tecore_stream_t stream) {
  if (out == grad) return TECORE_SUCCESS;
  return tecore_scale_add(grad, grad, 1.0f, out, 1.0f, TECORE_DTYPE_F32, n, stream);
}

/* y = x + bias: a GEMM of zeros (k = 16) whose epilogue adds the bias to
 * C = x.  libtecore has no broadcast-add kernel; the epilogue is one. */
tecore_result_t te_bias_add(tecore_seq_t *s, const struct tecore_tensor *x,
                            const struct tecore_tensor *y, tecore_devptr_t bias,
                            tecore_stream_t stream) {
  size_t rows = y->shape[0], cols = y->shape[1];
  struct tecore_tensor za, zb, b;
  te_t2d(&za, TECORE_DTYPE_BF16, rows, 16, s->zeros16);
  te_t2d(&zb, TECORE_DTYPE_BF16, cols, 16, s->zeros16);
  te_vec(&b, y->dtype, cols, bias);
  struct tecore_gemm_opts o = {.epilogue = TECORE_GEMM_EPI_BIAS, .C = x, .bias = &b,
                               .workspace = s->gemm_ws, .workspace_bytes = s->gemm_ws_bytes};
  return tecore_gemm(&za, TECORE_GEMM_N, &zb, TECORE_GEMM_T, y, 1.0f, 1.0f, &o, stream);
}

/* grad (F32) += column sums of dy: the cast-transpose kernel's dbias, its
 * FP8 output thrown away. */
tecore_result_t te_bias_grad(tecore_seq_t *s, const struct tecore_tensor *dy,
                             tecore_devptr_t grad, tecore_stream_t stream) {
  size_t rows = dy->shape[0], cols = dy->shape[1];
  struct tecore_tensor q, db;
  te_t2d(&q, TECORE_DTYPE_E4M3, rows, cols, s->f8_dummy);
  q.scaling = TECORE_SCALING_DELAYED;
  q.scale = s->one_f32;
  q.scale_inv = s->junk_f32;
  te_vec(&db, TECORE_DTYPE_F32, cols, s->dvec);
  TE_CHECK(tecore_cast_transpose_dbias(dy, &q, &db, s->ws, s->ws_bytes, stream));
  return te_accum_f32(s, grad, s->dvec, TECORE_DTYPE_F32, cols, stream);
}
