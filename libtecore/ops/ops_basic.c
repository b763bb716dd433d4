/* ops_basic.c -- each built-in operation run by itself, forward and
 * backward, through libtecore's public kernels, and the small helpers the
 * fused executors share (casts, gradient accumulation into F32, bias add
 * and bias gradient).
 *
 * Shapes: activations [rows][cols] of the sequence's dtype; parameters
 * [cols] (Bias, norms); reduced vectors go through F32 scratch and are
 * then added into the F32 gradient buffers, which is what makes gradients
 * accumulate across microbatches. */
#include "ops/ops_internal.h"

#include <string.h>

tecore_activation_t te_kind_act(int kind) {
  switch (kind) {
  case TECORE_OP_RELU: return TECORE_ACT_RELU;
  case TECORE_OP_SILU: return TECORE_ACT_SILU;
  case TECORE_OP_QGELU: return TECORE_ACT_QGELU;
  case TECORE_OP_SWIGLU: return TECORE_ACT_SWIGLU;
  case TECORE_OP_GEGLU: return TECORE_ACT_GEGLU;
  case TECORE_OP_REGLU: return TECORE_ACT_REGLU;
  default: return TECORE_ACT_GELU;
  }
}

static void vec(struct tecore_tensor *t, tecore_dtype_t dt, size_t n, tecore_devptr_t p) {
  te_t2d(t, dt, 1, n, p);
  t->ndim = 1;
  t->shape[0] = n;
  t->shape[1] = 0;
}

tecore_result_t te_cast(tecore_seq_t *s, tecore_devptr_t dst, tecore_dtype_t ddt,
                        tecore_devptr_t src, tecore_dtype_t sdt, size_t n,
                        tecore_stream_t stream) {
  struct tecore_tensor in, out;
  vec(&in, sdt, n, src);
  vec(&out, ddt, n, dst);
  return tecore_unscale_multi(&in, &out, 1, s->one_f32, 0, stream);
}

tecore_result_t te_accum_f32(tecore_seq_t *s, tecore_devptr_t dst, tecore_devptr_t src,
                             tecore_dtype_t dt, size_t n, tecore_stream_t stream) {
  if (dt != TECORE_DTYPE_F32) {
    TE_CHECK(te_cast(s, s->dvec_tmp, TECORE_DTYPE_F32, src, dt, n, stream));
    src = s->dvec_tmp;
  }
  return tecore_scale_add(dst, dst, 1.0f, src, 1.0f, TECORE_DTYPE_F32, n, stream);
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
  vec(&b, y->dtype, cols, bias);
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
  vec(&db, TECORE_DTYPE_F32, cols, s->dvec);
  TE_CHECK(tecore_cast_transpose_dbias(dy, &q, &db, s->ws, s->ws_bytes, stream));
  return te_accum_f32(s, grad, s->dvec, TECORE_DTYPE_F32, cols, stream);
}

static size_t bytes_of(const struct tecore_tensor *t) {
  return t->shape[0] * t->shape[1] * tecore_dtype_size(t->dtype);
}

static tecore_result_t copy_if(const struct tecore_tensor *dst, const struct tecore_tensor *src,
                               tecore_stream_t stream) {
  if (dst->data == src->data) return TECORE_SUCCESS;
  return tecore_memcpy_async(dst->data, src->data, bytes_of(src), stream);
}

static void slot_tensor(const tecore_seq_t *s, const struct tecore_tensor *like, int pair,
                        int grad, struct tecore_tensor *t) {
  te_t2d(t, s->cfg.dtype, like->shape[0], like->shape[1],
         grad ? te_slot_grad(s, pair) : te_slot_value(s, pair));
}

static void norm_params(const tecore_seq_t *s, const struct te_op *o, struct tecore_tensor *g,
                        struct tecore_tensor *b) {
  vec(g, s->cfg.dtype, o->in_cols, o->param[0]);
  if (b) vec(b, s->cfg.dtype, o->in_cols, o->param[1]);
}

tecore_result_t te_op_forward(const struct tecore_seq_exec *x) {
  tecore_seq_t *s = x->seq;
  const struct te_op *o = &s->ops[x->first];
  const struct tecore_tensor *in = &x->act[0], *out = &x->act[1];
  size_t n = in->shape[0] * in->shape[1];
  tecore_stream_t st = x->stream;
  switch (o->d.kind) {
  case TECORE_OP_IDENTITY:
  case TECORE_OP_RESHAPE:
  case TECORE_OP_MAKE_EXTRA_OUTPUT:
    return copy_if(out, in, st);
  case TECORE_OP_QUANTIZE: {
    TE_CHECK(copy_if(out, in, st));
    if (!s->fp8) return TECORE_SUCCESS;
    struct tecore_tensor q;
    TE_CHECK(te_bnd_f8_tensor(s, x->first + 1, &q));
    return tecore_quantize(in, &q, 0, st);
  }
  case TECORE_OP_LINEAR: {
    struct te_lin_fwd a = {.op = x->first, .x = in, .y = out,
                           .bias = o->d.bias ? o->param[1] : 0, .noop_flag = x->noop_flag,
                           .stream = st};
    return te_linear_fwd(s, &a);
  }
  case TECORE_OP_BIAS:
    return te_bias_add(s, in, out, o->param[0], st);
  case TECORE_OP_GELU:
  case TECORE_OP_RELU:
  case TECORE_OP_SILU:
  case TECORE_OP_QGELU:
  case TECORE_OP_SWIGLU:
  case TECORE_OP_GEGLU:
  case TECORE_OP_REGLU: {
    struct tecore_tensor y = *out;
    return tecore_act_fwd(te_kind_act(o->d.kind), in, &y, 0, st);
  }
  case TECORE_OP_LAYERNORM: {
    struct tecore_tensor g, b, y = *out;
    norm_params(s, o, &g, &b);
    return tecore_layernorm_fwd(in, &g, &b, o->d.epsilon, o->d.norm_flags, &y, o->saved[1],
                                o->saved[0], st);
  }
  case TECORE_OP_RMSNORM: {
    struct tecore_tensor g, y = *out;
    norm_params(s, o, &g, NULL);
    return tecore_rmsnorm_fwd(in, &g, o->d.epsilon, o->d.norm_flags, &y, o->saved[0], st);
  }
  case TECORE_OP_CONSTANT_SCALE:
    return tecore_scale_add(out->data, in->data, o->d.scale, in->data, 0.0f, s->cfg.dtype, n, st);
  case TECORE_OP_ADD_EXTRA_INPUT:
    return tecore_scale_add(out->data, in->data, 1.0f, te_slot_value(s, o->pair), 1.0f,
                            s->cfg.dtype, n, st);
  default:
    return TE_ERR(TECORE_ERR_INTERNAL, "fuser: no forward for kind %d", o->d.kind);
  }
}

tecore_result_t te_op_backward(const struct tecore_seq_exec *x) {
  tecore_seq_t *s = x->seq;
  const struct te_op *o = &s->ops[x->first];
  const struct tecore_tensor *in = &x->act[0];
  const struct tecore_tensor *dy = &x->grad[1], *dx = &x->grad[0];
  size_t n = dx->shape[0] * dx->shape[1];
  tecore_stream_t st = x->stream;
  switch (o->d.kind) {
  case TECORE_OP_IDENTITY:
  case TECORE_OP_RESHAPE:
  case TECORE_OP_QUANTIZE:
    return copy_if(dx, dy, st);
  case TECORE_OP_MAKE_EXTRA_OUTPUT: {
    struct tecore_tensor sg;
    slot_tensor(s, dy, o->pair, 1, &sg);
    return tecore_scale_add(dx->data, dy->data, 1.0f, sg.data, 1.0f, s->cfg.dtype, n, st);
  }
  case TECORE_OP_ADD_EXTRA_INPUT: {
    TE_CHECK(copy_if(dx, dy, st));
    const struct te_slot *sl = &s->pairs[o->pair];
    if (sl->maker < 0) {   /* an extra input: its gradient goes to the slot's buffer */
      struct tecore_tensor sg;
      slot_tensor(s, dy, o->pair, 1, &sg);
      TE_CHECK(copy_if(&sg, dy, st));
    }
    return TECORE_SUCCESS;
  }
  case TECORE_OP_BIAS:
    TE_CHECK(copy_if(dx, dy, st));
    return te_bias_grad(s, dy, o->grad[0], st);
  case TECORE_OP_LINEAR: {
    struct te_lin_bwd a = {.op = x->first, .x = in, .dy = dy,
                           .bias_grad = o->d.bias ? o->grad[1] : 0, .dx = dx, .stream = st};
    return te_linear_bwd(s, &a);
  }
  case TECORE_OP_GELU:
  case TECORE_OP_RELU:
  case TECORE_OP_SILU:
  case TECORE_OP_QGELU:
  case TECORE_OP_SWIGLU:
  case TECORE_OP_GEGLU:
  case TECORE_OP_REGLU: {
    struct tecore_tensor d = *dx;
    return tecore_act_bwd(te_kind_act(o->d.kind), dy, in, &d, st);
  }
  case TECORE_OP_LAYERNORM: {
    struct tecore_tensor g, dg, db, d = *dx;
    norm_params(s, o, &g, NULL);
    vec(&dg, TECORE_DTYPE_F32, o->in_cols, s->dvec);
    vec(&db, TECORE_DTYPE_F32, o->in_cols, s->dvec2);
    TE_CHECK(tecore_layernorm_bwd(dy, in, o->saved[1], o->saved[0], &g, o->d.norm_flags, &d, &dg,
                                  &db, s->ws, s->ws_bytes, st));
    TE_CHECK(te_accum_f32(s, o->grad[0], s->dvec, TECORE_DTYPE_F32, o->in_cols, st));
    return te_accum_f32(s, o->grad[1], s->dvec2, TECORE_DTYPE_F32, o->in_cols, st);
  }
  case TECORE_OP_RMSNORM: {
    struct tecore_tensor g, dg, d = *dx;
    norm_params(s, o, &g, NULL);
    vec(&dg, TECORE_DTYPE_F32, o->in_cols, s->dvec);
    TE_CHECK(tecore_rmsnorm_bwd(dy, in, o->saved[0], &g, o->d.norm_flags, &d, &dg, s->ws,
                                s->ws_bytes, st));
    return te_accum_f32(s, o->grad[0], s->dvec, TECORE_DTYPE_F32, o->in_cols, st);
  }
  case TECORE_OP_CONSTANT_SCALE:
    return tecore_scale_add(dx->data, dy->data, o->d.scale, dy->data, 0.0f, s->cfg.dtype, n, st);
  default:
    return TE_ERR(TECORE_ERR_INTERNAL, "fuser: no backward for kind %d", o->d.kind);
  }
}
