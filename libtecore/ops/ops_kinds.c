/* SPDX-License-Identifier: Apache-2.0 */
/* ops_kinds.c -- libtecore's own operation kinds, each defined the way an
 * upper layer registers one (struct tecore_op_kind_def): the desc fields
 * it reads, whether it aliases storage or uses a residual slot, its shape
 * function (checks, output shape, parameters, saved vectors), its backward
 * workspace, and its forward and backward run by themselves through
 * libtecore's public kernels.  The sequence and the planner read only
 * these entries, so a registered kind runs exactly as a built-in one.
 *
 * Shapes: activations [rows][cols] of the sequence's dtype; parameters
 * [cols] (Bias, norms) or [out][in] (Linear's weight); reduced vectors go
 * through F32 scratch and are then added into the F32 gradient buffers,
 * which is what makes gradients accumulate across microbatches. */
#include "ops/ops_internal.h"
#include "norm/norm_internal.h"

#include <math.h>

static const char add_fn[] = "tecore_seq_add";

/* The name of one of this file's kinds (te_builtin_kinds, below); the
 * registry's tecore_op_kind_name answers the same for them. */
static const char *builtin_name(int kind) {
  return kind >= 0 && kind < TECORE_OP_BUILTIN_COUNT_ ? te_builtin_kinds[kind].def.name : "?";
}

/* ---- shapes ------------------------------------------------------------------------------ */

static tecore_result_t linear_shape(const struct tecore_op_desc *d, struct tecore_op_shape *sh,
                                    void *ctx) {
  (void)ctx;
  TE_ARG(d->features >= 1, "%s: desc->features (out_features of a linear) is 0", add_fn);
  TE_ARG(d->bias == 0 || d->bias == 1, "%s: desc->bias is %d, not 0 or 1", add_fn, d->bias);
  TE_ARG(d->features <= ((size_t)1 << 40) / sh->in_features,
         "%s: desc->features %zu: the weight [%zu][%zu] is too large", add_fn, d->features,
         d->features, sh->in_features);
  sh->out_features = d->features;
  /* weight and bias uniform in +-1/sqrt(in_features) */
  double bound = 1.0 / sqrt((double)sh->in_features);
  sh->nparams = 1 + (size_t)d->bias;
  sh->param[0] = (struct tecore_op_param_def){.name = "weight", .rows = d->features,
                                              .cols = sh->in_features,
                                              .init = TECORE_OP_INIT_UNIFORM, .bound = bound};
  sh->param[1] = (struct tecore_op_param_def){.name = "bias", .rows = 1, .cols = d->features,
                                              .init = TECORE_OP_INIT_UNIFORM, .bound = bound};
  return TECORE_SUCCESS;
}

static tecore_result_t reshape_shape(const struct tecore_op_desc *d, struct tecore_op_shape *sh,
                                     void *ctx) {
  (void)ctx;
  size_t total = sh->in_rows * sh->in_features;
  TE_ARG(d->features >= 1 && total % d->features == 0,
         "%s: desc->features %zu does not divide the %zu elements ([%zu][%zu]) of the input "
         "to reshape", add_fn, d->features, total, sh->in_rows, sh->in_features);
  sh->out_features = d->features;
  sh->out_rows = total / d->features;
  return TECORE_SUCCESS;
}

static tecore_result_t bias_shape(const struct tecore_op_desc *d, struct tecore_op_shape *sh,
                                  void *ctx) {
  (void)d, (void)ctx;
  sh->nparams = 1;
  sh->param[0] = (struct tecore_op_param_def){.name = "bias", .rows = 1,
                                              .cols = sh->in_features};
  return TECORE_SUCCESS;
}

static tecore_result_t gated_shape(const struct tecore_op_desc *d, struct tecore_op_shape *sh,
                                   void *ctx) {
  (void)ctx;
  TE_ARG(sh->in_features % 2 == 0, "%s: %s takes [rows][2f] inputs; the input has %zu features "
         "(odd)", add_fn, builtin_name(d->kind), sh->in_features);
  sh->out_features = sh->in_features / 2;
  return TECORE_SUCCESS;
}

/* ctx: the number of parameters (LayerNorm 2: gamma, beta; RMSNorm 1) */
static tecore_result_t norm_shape(const struct tecore_op_desc *d, struct tecore_op_shape *sh,
                                  void *ctx) {
  TE_ARG(isfinite(d->epsilon) && d->epsilon > 0.0f, "%s: desc->epsilon is %g, not a positive "
         "finite number", add_fn, (double)d->epsilon);
  TE_ARG((d->norm_flags & ~TECORE_NORM_ZERO_CENTERED_GAMMA) == 0,
         "%s: desc->norm_flags 0x%x has bits other than TECORE_NORM_ZERO_CENTERED_GAMMA", add_fn,
         d->norm_flags);
  sh->nparams = sh->nsaved = (size_t)(uintptr_t)ctx;   /* rsigma (, mu) */
  int zc = (d->norm_flags & TECORE_NORM_ZERO_CENTERED_GAMMA) != 0;
  sh->param[0] = (struct tecore_op_param_def){.name = "gamma", .rows = 1,
                                              .cols = sh->in_features,
                                              .init = zc ? TECORE_OP_INIT_ZERO
                                                         : TECORE_OP_INIT_ONE};
  sh->param[1] = (struct tecore_op_param_def){.name = "beta", .rows = 1,
                                              .cols = sh->in_features};
  return TECORE_SUCCESS;
}

static tecore_result_t scale_shape(const struct tecore_op_desc *d, struct tecore_op_shape *sh,
                                   void *ctx) {
  (void)sh, (void)ctx;
  TE_ARG(isfinite(d->scale), "%s: desc->scale is not finite", add_fn);
  return TECORE_SUCCESS;
}

static tecore_result_t layernorm_ws(const struct tecore_op_desc *d, size_t rows, size_t cols,
                                    size_t *bytes, void *ctx) {
  (void)d, (void)ctx;
  return tecore_norm_bwd_workspace_size(TECORE_NORM_LAYERNORM, rows, cols, bytes);
}

static tecore_result_t rmsnorm_ws(const struct tecore_op_desc *d, size_t rows, size_t cols,
                                  size_t *bytes, void *ctx) {
  (void)d, (void)ctx;
  return tecore_norm_bwd_workspace_size(TECORE_NORM_RMSNORM, rows, cols, bytes);
}

/* ---- executors (one operation, count 1) ------------------------------------------------- */

static size_t bytes_of(const struct tecore_tensor *t) {
  return t->shape[0] * t->shape[1] * tecore_dtype_size(t->dtype);
}

static size_t numel(const struct tecore_tensor *t) { return t->shape[0] * t->shape[1]; }

/* dst = src unless they alias (they do but at the sequence's ends) */
static tecore_result_t copy_if(const struct tecore_tensor *dst, const struct tecore_tensor *src,
                               tecore_stream_t stream) {
  if (dst->data == src->data) return TECORE_SUCCESS;
  return tecore_memcpy_async(dst->data, src->data, bytes_of(src), stream);
}

static const struct te_op *op_of(const struct tecore_seq_exec *x) {
  return &x->seq->ops[x->first];
}

static tecore_result_t pass_fwd(const struct tecore_seq_exec *x) {
  return copy_if(&x->act[1], &x->act[0], x->stream);
}

static tecore_result_t pass_bwd(const struct tecore_seq_exec *x) {
  return copy_if(&x->grad[0], &x->grad[1], x->stream);
}

static tecore_result_t quantize_fwd(const struct tecore_seq_exec *x) {
  TE_CHECK(copy_if(&x->act[1], &x->act[0], x->stream));
  if (!x->seq->fp8) return TECORE_SUCCESS;
  struct tecore_tensor q;
  TE_CHECK(te_bnd_f8_tensor(x->seq, x->first + 1, &q));
  if (te_seq_infer(x->seq)) q.columnwise_data = 0;   /* no backward reads it */
  return tecore_quantize(&x->act[0], &q, 0, x->stream);
}

static tecore_result_t linear_fwd(const struct tecore_seq_exec *x) {
  const struct te_op *o = op_of(x);
  struct te_lin_fwd a = {.op = x->first, .x = &x->act[0], .y = &x->act[1],
                         .bias = o->d.bias ? o->param[1] : 0, .noop_flag = x->noop_flag,
                         .stream = x->stream};
  return te_linear_fwd(x->seq, &a);
}

static tecore_result_t linear_bwd(const struct tecore_seq_exec *x) {
  const struct te_op *o = op_of(x);
  struct te_lin_bwd a = {.op = x->first, .x = &x->act[0], .dy = &x->grad[1],
                         .bias_grad = o->d.bias ? o->grad[1] : 0, .dx = &x->grad[0],
                         .stream = x->stream};
  /* the sequence's last Linear, given its FP8 gradient (tecore_seq_grad_fp8) */
  if (x->seq->run_dy8_col && x->first + 1 == x->seq->nops) {
    a.dy = NULL;
    a.dy8_ready = 1;
    a.dy8_col_make = x->seq->run_dy8_col;
    a.dy8_row_given = x->seq->run_dy8_row;
  }
  return te_linear_bwd(x->seq, &a);
}

static tecore_result_t bias_fwd(const struct tecore_seq_exec *x) {
  return te_bias_add(x->seq, &x->act[0], &x->act[1], op_of(x)->param[0], x->stream);
}

static tecore_result_t bias_bwd(const struct tecore_seq_exec *x) {
  TE_CHECK(copy_if(&x->grad[0], &x->grad[1], x->stream));
  return te_bias_grad(x->seq, &x->grad[1], op_of(x)->grad[0], x->stream);
}

static tecore_result_t act_fwd(const struct tecore_seq_exec *x) {
  struct tecore_tensor y = x->act[1];
  return tecore_act_fwd(te_op_act(op_of(x)), &x->act[0], &y, 0, x->stream);
}

static tecore_result_t act_bwd(const struct tecore_seq_exec *x) {
  return te_linear_act_bwd(x->seq, x->first, te_op_act(op_of(x)), &x->grad[1], &x->act[0],
                           &x->grad[0], x->stream);
}

static tecore_result_t layernorm_fwd(const struct tecore_seq_exec *x) {
  const struct te_op *o = op_of(x);
  struct tecore_tensor g, b, y = x->act[1];
  te_vec(&g, x->seq->cfg.dtype, o->in_cols, o->param[0]);
  te_vec(&b, x->seq->cfg.dtype, o->in_cols, o->param[1]);
  return tecore_layernorm_fwd(&x->act[0], &g, &b, o->d.epsilon, o->d.norm_flags, &y,
                              o->saved[1], o->saved[0], x->stream);
}

static tecore_result_t layernorm_bwd(const struct tecore_seq_exec *x) {
  tecore_seq_t *s = x->seq;
  const struct te_op *o = op_of(x);
  struct tecore_tensor g, dg, db, d = x->grad[0];
  const tecore_devptr_t og = te_grad_out(s, o->grad[0], s->dvec),
                        ob = te_grad_out(s, o->grad[1], s->dvec2);
  te_vec(&g, s->cfg.dtype, o->in_cols, o->param[0]);
  te_vec(&dg, TECORE_DTYPE_F32, o->in_cols, og);
  te_vec(&db, TECORE_DTYPE_F32, o->in_cols, ob);
  struct te_norm_bwd_call c = {.ln = 1, .dy = &x->grad[1], .x = &x->act[0], .gamma = &g,
                               .mu = o->saved[1], .rsigma = o->saved[0],
                               .flags = o->d.norm_flags, .dx = &d, .dgamma = &dg, .dbeta = &db,
                               .workspace = x->workspace,
                               .workspace_bytes = x->workspace_bytes,
                               .fn = "tecore_layernorm_bwd"};
  TE_CHECK(te_linear_norm_bwd(s, x->first, &c, x->stream));
  TE_CHECK(te_grad_add(o->grad[0], og, o->in_cols, x->stream));
  return te_grad_add(o->grad[1], ob, o->in_cols, x->stream);
}

static tecore_result_t rmsnorm_fwd(const struct tecore_seq_exec *x) {
  const struct te_op *o = op_of(x);
  struct tecore_tensor g, y = x->act[1];
  te_vec(&g, x->seq->cfg.dtype, o->in_cols, o->param[0]);
  return tecore_rmsnorm_fwd(&x->act[0], &g, o->d.epsilon, o->d.norm_flags, &y, o->saved[0],
                            x->stream);
}

static tecore_result_t rmsnorm_bwd(const struct tecore_seq_exec *x) {
  tecore_seq_t *s = x->seq;
  const struct te_op *o = op_of(x);
  struct tecore_tensor g, dg, d = x->grad[0];
  const tecore_devptr_t og = te_grad_out(s, o->grad[0], s->dvec);
  te_vec(&g, s->cfg.dtype, o->in_cols, o->param[0]);
  te_vec(&dg, TECORE_DTYPE_F32, o->in_cols, og);
  struct te_norm_bwd_call c = {.dy = &x->grad[1], .x = &x->act[0], .gamma = &g,
                               .rsigma = o->saved[0], .flags = o->d.norm_flags, .dx = &d,
                               .dgamma = &dg, .workspace = x->workspace,
                               .workspace_bytes = x->workspace_bytes,
                               .fn = "tecore_rmsnorm_bwd"};
  TE_CHECK(te_linear_norm_bwd(s, x->first, &c, x->stream));
  return te_grad_add(o->grad[0], og, o->in_cols, x->stream);
}

static tecore_result_t scale_fwd(const struct tecore_seq_exec *x) {
  const struct tecore_tensor *in = &x->act[0];
  return tecore_scale_add(x->act[1].data, in->data, op_of(x)->d.scale, in->data, 0.0f,
                          in->dtype, numel(in), x->stream);
}

static tecore_result_t scale_bwd(const struct tecore_seq_exec *x) {
  const struct tecore_tensor *dy = &x->grad[1];
  return tecore_scale_add(x->grad[0].data, dy->data, op_of(x)->d.scale, dy->data, 0.0f,
                          dy->dtype, numel(dy), x->stream);
}

/* MakeExtraOutput: forward passes x through (aliased); backward adds the
 * slot's gradient */
static tecore_result_t make_extra_bwd(const struct tecore_seq_exec *x) {
  const struct tecore_tensor *dy = &x->grad[1];
  return tecore_scale_add(x->grad[0].data, dy->data, 1.0f,
                          te_slot_grad(x->seq, op_of(x)->pair), 1.0f, dy->dtype, numel(dy),
                          x->stream);
}

static tecore_result_t add_extra_fwd(const struct tecore_seq_exec *x) {
  const struct tecore_tensor *in = &x->act[0];
  return tecore_scale_add(x->act[1].data, in->data, 1.0f, te_slot_value(x->seq, op_of(x)->pair),
                          1.0f, in->dtype, numel(in), x->stream);
}

static tecore_result_t add_extra_bwd(const struct tecore_seq_exec *x) {
  const struct tecore_tensor *dy = &x->grad[1];
  TE_CHECK(copy_if(&x->grad[0], dy, x->stream));
  int p = op_of(x)->pair;
  if (x->seq->pairs[p].maker >= 0) return TECORE_SUCCESS;
  /* an extra input: its gradient goes to the slot's buffer */
  struct tecore_tensor sg = *dy;
  sg.data = te_slot_grad(x->seq, p);
  return copy_if(&sg, dy, x->stream);
}

/* ---- the table ----------------------------------------------------------------------------- */

#define F_FEAT TECORE_OP_FIELD_FEATURES
#define AF TECORE_OP_ALIAS_FORWARD
#define AB TECORE_OP_ALIAS_BACKWARD
#define NI TECORE_OP_BACKWARD_NO_INPUT
#define KIND(k, nm, fl, flg, shp, wsf, fw, bw, c, f8)                                         \
  [k] = {.def = {.name = nm, .fields = fl, .flags = flg, .shape = shp, .workspace = wsf,    \
                 .forward = fw, .backward = bw, .ctx = (void *)(uintptr_t)(c)},               \
         .fp8 = f8}
#define ACT(k, nm, shp, a) KIND(k, nm, 0, 0, shp, NULL, act_fwd, act_bwd, a, 0)
#define COMM(k, nm) [k] = {.def = {.name = nm}}
/* a kind whose parameters are a struct at desc->ctx (copied: te_op.prm) */
#define SEQK(k, nm, flg, shp, wsf, fw, bw, f8, st)                                            \
  [k] = {.def = {.name = nm, .fields = TECORE_OP_FIELD_CTX, .flags = flg, .shape = shp,      \
                 .workspace = wsf, .forward = fw, .backward = bw},                            \
         .fp8 = f8, .ctx_bytes = sizeof(st)}

const struct te_kind te_builtin_kinds[TECORE_OP_BUILTIN_COUNT_] = {
    KIND(TECORE_OP_IDENTITY, "identity", 0, AF | AB | NI, NULL, NULL, pass_fwd, pass_bwd, 0, 0),
    KIND(TECORE_OP_RESHAPE, "reshape", F_FEAT, AF | AB | NI, reshape_shape, NULL, pass_fwd, pass_bwd,
         0, 0),
    KIND(TECORE_OP_LINEAR, "linear", F_FEAT | TECORE_OP_FIELD_BIAS, 0, linear_shape, NULL,
         linear_fwd, linear_bwd, 0, TE_KIND_GEMM),
    KIND(TECORE_OP_BIAS, "bias", 0, AB | NI, bias_shape, NULL, bias_fwd, bias_bwd, 0, 0),
    ACT(TECORE_OP_GELU, "gelu", NULL, TECORE_ACT_GELU),
    ACT(TECORE_OP_RELU, "relu", NULL, TECORE_ACT_RELU),
    ACT(TECORE_OP_SILU, "silu", NULL, TECORE_ACT_SILU),
    ACT(TECORE_OP_QGELU, "qgelu", NULL, TECORE_ACT_QGELU),
    ACT(TECORE_OP_SWIGLU, "swiglu", gated_shape, TECORE_ACT_SWIGLU),
    ACT(TECORE_OP_GEGLU, "geglu", gated_shape, TECORE_ACT_GEGLU),
    ACT(TECORE_OP_REGLU, "reglu", gated_shape, TECORE_ACT_REGLU),
    KIND(TECORE_OP_LAYERNORM, "layernorm", TECORE_OP_FIELD_EPSILON, 0, norm_shape, layernorm_ws,
         layernorm_fwd, layernorm_bwd, 2, 0),
    KIND(TECORE_OP_RMSNORM, "rmsnorm", TECORE_OP_FIELD_EPSILON, 0, norm_shape, rmsnorm_ws,
         rmsnorm_fwd, rmsnorm_bwd, 1, 0),
    KIND(TECORE_OP_QUANTIZE, "quantize", 0, AF | AB | NI, NULL, NULL, quantize_fwd, pass_bwd, 0,
         TE_KIND_FP8_COPY),
    KIND(TECORE_OP_CONSTANT_SCALE, "constant_scale", TECORE_OP_FIELD_SCALE, NI, scale_shape, NULL,
         scale_fwd, scale_bwd, 0, 0),
    KIND(TECORE_OP_MAKE_EXTRA_OUTPUT, "make_extra_output", TECORE_OP_FIELD_SLOT,
         AF | NI | TECORE_OP_SLOT_MAKE, NULL, NULL, pass_fwd, make_extra_bwd, 0, 0),
    KIND(TECORE_OP_ADD_EXTRA_INPUT, "add_extra_input", TECORE_OP_FIELD_SLOT,
         AB | NI | TECORE_OP_SLOT_ADD, NULL, NULL, add_extra_fwd, add_extra_bwd, 0, 0),
    COMM(TECORE_OP_ALLREDUCE, "allreduce"),
    COMM(TECORE_OP_REDUCE_SCATTER, "reduce_scatter"),
    COMM(TECORE_OP_ALLGATHER, "allgather"),
    COMM(TECORE_OP_TP_COPY, "tp_copy"),
    COMM(TECORE_OP_TP_REDUCE, "tp_reduce"),
    SEQK(TECORE_OP_ROPE, "rope", AB | NI, te_rope_shape, NULL, te_rope_op_fwd, te_rope_op_bwd, 0,
         struct tecore_op_rope_args),
    SEQK(TECORE_OP_ATTENTION, "attention", TECORE_OP_BACKWARD_OUTPUT, te_attn_shape, te_attn_ws,
         te_attn_op_fwd, te_attn_op_bwd, TE_KIND_ATTN, struct tecore_op_attention_args),
};
