/* SPDX-License-Identifier: Apache-2.0 */
/* seq_callable.c -- tegraph_callable_from_seq: a graphed callable whose
 * forward and backward functions run a built operation-fuser sequence
 * (te/ops.h).  The sequence's input is the callable's one input, its
 * output the one output ([rows][features] -> [out_rows][out_features] as
 * 2-D views, the sequence's dtype); the parameters and their gradients
 * stay in the sequence.  Checks the description against the sequence
 * before creating anything, clears the gradients warmup accumulated, and
 * hands the small context it allocates to the callable, which frees it at
 * tegraph_callable_destroy.  The sequence is held (tecore_seq_hold) for
 * the callable's life: it cannot be destroyed under it, nor given to a
 * second callable. */
#include "callable.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the functions need; owned by the callable (user_free). */
struct seq_ctx {
  tecore_seq_t *seq;
  tecore_devptr_t param0;   /* the first parameter's address (0: none) */
  int need_dx;
};


/* The sequence is still there: its hold is a public flag, and a caller
 * that dropped it (tecore_seq_hold(seq, 0)) and destroyed the sequence
 * had the graphs replay on freed buffers and report success.  Asked
 * before each replay, with libtecore's registry (the pointer compared,
 * never read) and, against another sequence made at the same address,
 * the first parameter's address the graphs were captured with. */
static tegraph_result_t seq_alive(void *user, const char *fn) {
  const struct seq_ctx *x = user;
  struct tecore_seq_param p;
  size_t n = 0;
  tecore_result_t r = tecore_seq_params(x->seq, &p, 1, &n);
  if (r == TECORE_SUCCESS && (n ? p.value.data : 0) == x->param0) return TEGRAPH_SUCCESS;
  tecore_clear_error();
  return TG_ERR(TEGRAPH_ERR_STATE, "%s: the callable's sequence %p was destroyed (its hold "
                "dropped with tecore_seq_hold(seq, 0)): the graphs would run on freed buffers; "
                "destroy the callable", fn, (void *)x->seq);
}

/* The callable's end: the sequence may be destroyed again (a sequence
 * already gone, or another one at its address, is left alone). */
static void seq_ctx_free(void *user) {
  struct seq_ctx *x = user;
  if (seq_alive(x, "tegraph_callable_destroy") == TEGRAPH_SUCCESS)
    (void)tecore_seq_hold(x->seq, 0);
  else
    tecore_clear_error();
  free(x);
}

static tecore_result_t seq_forward(void *user, tecore_stream_t stream,
                                   const struct tegraph_io *io) {
  const struct seq_ctx *x = user;
  /* noop_flag: the graph sets it from is_first_microbatch, so later
   * microbatches reuse the FP8 weights the first one quantized */
  return tecore_seq_forward(x->seq, &io->inputs[0], &io->outputs[0], io->noop_flag, stream);
}

static tecore_result_t seq_backward(void *user, tecore_stream_t stream,
                                    const struct tegraph_io *io) {
  const struct seq_ctx *x = user;
  return tecore_seq_backward(x->seq, &io->grad_outputs[0],
                             x->need_dx ? &io->grad_inputs[0] : NULL, stream);
}

/* Warmup's backward added real gradients into the sequence's buffers:
 * clear them so that only replays accumulate.  The library has waited
 * for the callable's stream; waiting for the context as well covers work
 * a function forked onto other streams. */
static tecore_result_t seq_post_warmup(void *user) {
  const struct seq_ctx *x = user;
  tecore_result_t r = tecore_ctx_synchronize();
  if (r != TECORE_SUCCESS) return r;
  tecore_stream_t s = NULL;
  r = tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s);
  if (r != TECORE_SUCCESS) return r;
  r = tecore_seq_zero_grad(x->seq, s);
  tecore_result_t r2 = tecore_stream_synchronize(s);
  if (r == TECORE_SUCCESS) r = r2;
  r2 = tecore_stream_destroy(s);
  return r == TECORE_SUCCESS ? r2 : r;
}

/* The [rows][cols] 2-D view of t, or an error naming what. */
static tegraph_result_t view_2d(const struct tecore_tensor *t, const char *fn, const char *what,
                                size_t *rows, size_t *cols) {
  TG_ARG(t->ndim >= 1 && t->ndim <= TECORE_TENSOR_MAX_DIMS,
         "%s: %s: ndim %d; the sequence takes tensors of 1..%d dimensions", fn, what, t->ndim,
         TECORE_TENSOR_MAX_DIMS);
  tecore_result_t r = tecore_tensor_2d(t, rows, cols);
  if (r != TECORE_SUCCESS) {
    char w[160];
    snprintf(w, sizeof w, "%s: %s", fn, what);
    return tg_core(r, w);
  }
  return TEGRAPH_SUCCESS;
}

/* The sequence's input and output views and, when it has parameters, its
 * dtype (*dtype_known 0 otherwise: the forward then checks the dtype). */
static tegraph_result_t seq_shape(tecore_seq_t *seq, const char *fn, size_t *in_rows,
                                  size_t *in_cols, size_t *out_rows, size_t *out_cols,
                                  tecore_dtype_t *dtype, int *dtype_known) {
  size_t nparams = 0;
  tecore_result_t r = tecore_seq_params(seq, NULL, 0, &nparams);
  if (r != TECORE_SUCCESS)
    return TG_ERR(TEGRAPH_ERR_INVALID, "%s: d->seq is not usable (build it with "
                  "tecore_seq_build first): %s", fn, tecore_last_error());
  *dtype_known = 0;
  if (nparams > 0) {
    struct tecore_seq_param p;
    size_t one = 0;
    TG_CORE(tecore_seq_params(seq, &p, 1, &one), fn);
    *dtype = p.value.dtype; /* parameters have the sequence's dtype */
    *dtype_known = 1;
  }
  /* the last operation: where the last forward group ends */
  size_t ng = 0;
  TG_CORE(tecore_seq_groups(seq, TECORE_SEQ_FORWARD, NULL, 0, &ng), fn);
  if (ng == 0) return TG_ERR(TEGRAPH_ERR_INVALID, "%s: d->seq has no operations", fn);
  struct tecore_seq_group *g = calloc(ng, sizeof *g);
  if (!g) return TG_ERR(TEGRAPH_ERR_NOMEM, "%s: out of host memory", fn);
  tecore_result_t rg = tecore_seq_groups(seq, TECORE_SEQ_FORWARD, g, ng, &ng);
  size_t last = rg == TECORE_SUCCESS ? g[ng - 1].first + g[ng - 1].count - 1 : 0;
  free(g);
  if (rg != TECORE_SUCCESS) return tg_core(rg, fn);
  struct tecore_op_info first_op, last_op;
  TG_CORE(tecore_seq_op(seq, 0, &first_op), fn);
  TG_CORE(tecore_seq_op(seq, last, &last_op), fn);
  *in_rows = first_op.in_rows;
  *in_cols = first_op.in_features;
  *out_rows = last_op.out_rows;
  *out_cols = last_op.out_features;
  return TEGRAPH_SUCCESS;
}

/* A tensor describing the sequence's activation: dtype and 2-D view. */
static tegraph_result_t check_act(const struct tecore_tensor *t, const char *fn, const char *what,
                                  const char *side, size_t rows, size_t cols, tecore_dtype_t dtype,
                                  int dtype_known) {
  TG_ARG(tecore_dtype_size(t->dtype) > 0, "%s: %s: unknown dtype %d", fn, what, (int)t->dtype);
  TG_ARG(!dtype_known || t->dtype == dtype, "%s: %s: dtype %s, but the sequence's dtype is %s",
         fn, what, tecore_dtype_name(t->dtype), tecore_dtype_name(dtype));
  TG_ARG(t->scaling == TECORE_SCALING_NONE,
         "%s: %s: scaling mode %s; the sequence takes plain tensors (TECORE_SCALING_NONE)", fn,
         what, tecore_scaling_name(t->scaling));
  size_t r = 0, c = 0;
  TG_CHECK(view_2d(t, fn, what, &r, &c));
  TG_ARG(r == rows && c == cols, "%s: %s: its 2-D view is [%zu][%zu], the sequence's %s is "
         "[%zu][%zu]", fn, what, r, c, side, rows, cols);
  return TEGRAPH_SUCCESS;
}

TE_EXPORT tegraph_result_t tegraph_callable_from_seq(const struct tegraph_seq_callable_desc *d,
                                                     tegraph_mempool_t *pool,
                                                     tegraph_callable_t **out) {
  static const char fn[] = "tegraph_callable_from_seq";
  TG_ARG(d, "%s: d is NULL", fn);
  TG_ARG(out, "%s: out is NULL", fn);
  TG_ARG(d->seq, "%s: d->seq is NULL", fn);
  TG_ARG(d->sample_input, "%s: d->sample_input is NULL", fn);
  TG_ARG(d->num_warmup >= 0, "%s: d->num_warmup %d is negative", fn, d->num_warmup);
  TG_ARG(d->capture_mode >= TECORE_CAPTURE_GLOBAL && d->capture_mode <= TECORE_CAPTURE_RELAXED,
         "%s: d->capture_mode %d is unknown", fn, (int)d->capture_mode);
  unsigned inst = TEGRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH | TEGRAPH_INSTANTIATE_UPLOAD |
                  TEGRAPH_INSTANTIATE_USE_NODE_PRIORITY;
  TG_ARG(!(d->instantiate_flags & ~inst), "%s: d->instantiate_flags 0x%x unknown", fn,
         d->instantiate_flags & ~inst);
  TG_ARG(!(d->flags & ~TEGRAPH_CALLABLE_NO_REBIND), "%s: d->flags 0x%x unknown", fn,
         d->flags & ~TEGRAPH_CALLABLE_NO_REBIND);

  size_t in_rows = 0, in_cols = 0, out_rows = 0, out_cols = 0;
  tecore_dtype_t dtype = TECORE_DTYPE_F32;
  int dtype_known = 0;
  TG_CHECK(seq_shape(d->seq, fn, &in_rows, &in_cols, &out_rows, &out_cols, &dtype,
                     &dtype_known));
  TG_CHECK(check_act(d->sample_input, fn, "d->sample_input", "input", in_rows, in_cols, dtype,
                     dtype_known));
  TG_ARG(!d->sample_input->columnwise_data,
         "%s: d->sample_input: columnwise_data is set; only rowwise data is captured", fn);
  struct tecore_tensor output;
  if (d->output) {
    TG_CHECK(check_act(d->output, fn, "d->output", "output", out_rows, out_cols,
                       d->sample_input->dtype, 1));
    output = *d->output;
  } else {
    size_t shape[2] = {out_rows, out_cols};
    TG_CORE(tecore_tensor_init(&output, d->sample_input->dtype, 2, shape, 0), fn);
  }
  output.data = 0;
  output.columnwise_data = 0;

  struct seq_ctx *x = calloc(1, sizeof *x);
  if (!x) return TG_ERR(TEGRAPH_ERR_NOMEM, "%s: out of host memory", fn);
  /* the callable replays the sequence: it may not be destroyed first, and
   * two callables would share (and clobber) its saved activations */
  tecore_result_t hr = tecore_seq_hold(d->seq, 1);
  if (hr != TECORE_SUCCESS) {
    free(x);
    return tg_core(hr, fn);
  }
  x->seq = d->seq;
  x->need_dx = d->need_dx != 0;
  struct tecore_seq_param p0;
  size_t n0 = 0;
  if (tecore_seq_params(d->seq, &p0, 1, &n0) == TECORE_SUCCESS && n0) x->param0 = p0.value.data;
  unsigned char needs_grad = (unsigned char)x->need_dx;
  struct tegraph_callable_desc cd = {
      .forward = seq_forward, .backward = seq_backward, .user = x,
      .sample_inputs = d->sample_input, .ninputs = 1, .outputs = &output, .noutputs = 1,
      .input_needs_grad = &needs_grad, .num_warmup = d->num_warmup,
      .post_warmup = seq_post_warmup, .capture_mode = d->capture_mode,
      .instantiate_flags = d->instantiate_flags, .flags = d->flags, .user_free = seq_ctx_free};
  tegraph_result_t res = tegraph_callable_create(&cd, pool, out);
  if (res != TEGRAPH_SUCCESS) seq_ctx_free(x); /* a failed creation leaves user to us */
  else (*out)->user_alive = seq_alive;
  return res;
}
