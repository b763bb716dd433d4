/* SPDX-License-Identifier: Apache-2.0 */
/* ops_linear.c -- the Linear operation y = x W^T (+ b), forward and
 * backward, with the options fused groups use: a bias, GELU or residual
 * epilogue on the forward GEMM; a prepared FP8 gradient, a residual
 * gradient added through C, and a dGELU(+dbias) epilogue on the dgrad GEMM.
 *
 * Shapes: x [rows][in], W [out][in], y [rows][out], b [out].
 *   forward  y  = x W^T          tecore_gemm(x, N, W, T)
 *   dgrad    dx = dy W           tecore_gemm(dy, N, W, N)
 *   wgrad    dW += dy^T x        tecore_gemm(dy, T, x, N), F32, beta = 1
 *                                (0 for the first after tecore_seq_zero_grad)
 * Operands by case:
 *   FP8 recipe   x, W, dy quantized (E4M3 / E4M3 / E5M2 with HYBRID); W
 *                rowwise by the forward, its columnwise copy for dgrad
 *                made by the backward (w8_for_dgrad); x and dy with both
 *                copies (the wgrad GEMM reads their columnwise ones: the
 *                TN layout Hopper needs).  Per-tensor scales (delayed,
 *                current) or blocks (block: x and dy 1x128, W 128x128,
 *                each copy quantized from the high-precision tensor, no
 *                fast accumulation);
 *   BF16/F16     the tensors themselves (also a Linear of an FP8 sequence
 *                too small for FP8 to gain: te_op.hp);
 *   F32          bf16 copies of x, W and dy (the GEMM takes 16-bit or FP8
 *                operands), written to F32 outputs. */
#include "ops/ops_internal.h"
#include "transpose/transpose_internal.h"
#include "elementwise/elementwise_internal.h"
#include "act/act_internal.h"
#include "norm/norm_internal.h"
#include "gemm/gemm_problem.h"
#include <stdio.h>
#include <string.h>

#include <string.h>

tecore_dtype_t te_linear_companion(const tecore_seq_t *s) {
  return s->fp8 && s->cfg.dtype == TECORE_DTYPE_F32 ? TECORE_DTYPE_BF16 : s->cfg.dtype;
}

/* Entry index of a scaling state as an FP8 tensor's scaling (its data set
 * by the caller).  Under the block recipe the blocks' scale_inv arrays
 * srow and scol (rowwise, columnwise copy) take the place of the entry's
 * one scale; the entry keeps only the dtype. */
static tecore_result_t fp8_entry(const tecore_seq_t *s, const struct tecore_delayed_state *st,
                                 size_t index, tecore_fp8_role_t role, tecore_devptr_t srow,
                                 tecore_devptr_t scol, struct tecore_tensor *t) {
  TE_CHECK(tecore_delayed_state_tensor(st, index, t));
  if (s->recipe.kind == TECORE_RECIPE_CURRENT) t->scaling = TECORE_SCALING_CURRENT;
  if (te_seq_block(s)) {
    TE_CHECK(tecore_recipe_apply(&s->recipe, role, t));
    t->amax = t->scale = 0;
    t->scale_inv = srow;
    t->columnwise_scale_inv = scol;
  }
  return TECORE_SUCCESS;
}

tecore_result_t te_bnd_f8_tensor(const tecore_seq_t *s, size_t b, struct tecore_tensor *t) {
  const struct te_bnd *bd = &s->bnd[b];
  if (bd->f8 < 0) return TE_ERR(TECORE_ERR_INTERNAL, "fuser: boundary %zu has no FP8 copy", b);
  te_t2d(t, TECORE_DTYPE_E4M3, bd->rows, bd->cols, bd->f8_row);
  t->columnwise_data = bd->f8_col;
  return fp8_entry(s, &s->st_act, (size_t)bd->f8, TECORE_FP8_ACTIVATION, bd->f8_srow,
                   bd->f8_scol, t);
}

TE_EXPORT tecore_result_t tecore_seq_fp8_input(const tecore_seq_t *s, size_t index,
                                               struct tecore_tensor *t) {
  static const char fn[] = "tecore_seq_fp8_input";
  TE_CHECK(te_seq_op_arg(s, index, fn));
  TE_ARG(t, "%s: t is NULL", fn);
  if (!s->bnd || !te_op_fp8(s, index) || s->bnd[index].f8 < 0)
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED,
                  "%s: operation %zu (%s) does not run in FP8 (no recipe, not built, not a "
                  "Linear, or a high-precision plan for a small GEMM)",
                  fn, index, s->ops[index].def.name);
  return te_bnd_f8_tensor(s, index, t);
}

tecore_result_t te_seq_grad8_plan_ok(const tecore_seq_t *s, const char *fn) {
  if (!s->nops)
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: the sequence has no operations", fn);
  size_t last = s->nops - 1;
  const struct te_op *o = &s->ops[last];
  if (o->d.kind != TECORE_OP_LINEAR || o->d.bias)   /* a registered kind has an id of its own */
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED,
                  "%s: the sequence's last operation is no built-in Linear without a bias", fn);
  if (!s->bnd || !te_op_fp8(s, last) || te_seq_infer(s))
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED,
                  "%s: the last Linear (op %zu) has no FP8 backward (no recipe, not built, an "
                  "inference sequence, or a high-precision plan for a small GEMM)", fn, last);
  const struct te_plan *p = &s->plan;
  const struct te_group *g = NULL;
  for (size_t k = 0; k < p->ngroups[TECORE_SEQ_BACKWARD]; k++)
    if (p->groups[TECORE_SEQ_BACKWARD][k].first + p->groups[TECORE_SEQ_BACKWARD][k].count ==
        s->nops)
      g = &p->groups[TECORE_SEQ_BACKWARD][k];
  if (!g || g->f || g->count != 1)
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: the last Linear's backward is fused (%s): it "
                  "takes a 16-bit gradient", fn, g ? g->name : "not planned");
  if (te_fusion_named_off("grad_fp8"))
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: TECORE_OPS_FUSION_OFF names grad_fp8", fn);
  if (te_seq_block(s))
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: the recipe's gradient scaling is 1x128 "
                  "blocks: the columnwise copy is a transpose only under one per-tensor scale",
                  fn);
  return TECORE_SUCCESS;
}

tecore_result_t te_seq_grad_fp8(const tecore_seq_t *s, struct tecore_tensor *t, const char *fn) {
  TE_CHECK(te_seq_grad8_plan_ok(s, fn));
  size_t last = s->nops - 1;
  const struct te_op *o = &s->ops[last];
  if (!s->dy8_row)
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: the last Linear (op %zu) has no FP8 gradient "
                  "scratch (not built for training)", fn, last);
  TE_CHECK(te_dy8_tensor(s, last, t));
  if (!te_scaling_per_tensor(t->scaling) || t->columnwise_scale_inv)
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: the recipe's gradient scaling is %s: the "
                  "columnwise copy is a transpose only under one per-tensor scale", fn,
                  tecore_scaling_name(t->scaling));
  /* TECORE_SEQ_GRAD_FP8_GIVEN: both copies the caller's; else the LM
   * head's gradient is larger than the columnwise scratch: that copy the
   * caller's (linear_bwd_split) */
  if (s->grad8_given) t->data = 0;
  if (s->grad8_given || o->out_rows * o->out_cols > s->dy8_col_elems) t->columnwise_data = 0;
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_seq_grad_fp8(const tecore_seq_t *s, struct tecore_tensor *t) {
  static const char fn[] = "tecore_seq_grad_fp8";
  TE_CHECK(te_seq_arg(s, fn));
  TE_ARG(t, "%s: t is NULL", fn);
  TE_ARG(s->built, "%s: the sequence is not built (tecore_seq_build)", fn);
  if (te_seq_infer(s))
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: seq %p is an inference sequence: no backward",
                  fn, (const void *)s);
  return te_seq_grad_fp8(s, t, fn);
}

/* The FP8 weight of Linear o as the forward writes it: rowwise, and the
 * columnwise copy too where it is kept (TECORE_OPS_W8_COL_KEEP). */
static tecore_result_t w8_tensor(const tecore_seq_t *s, const struct te_op *o,
                                 struct tecore_tensor *t) {
  te_t2d(t, TECORE_DTYPE_E4M3, o->out_cols, o->in_cols, o->w8_row);
  t->columnwise_data = o->w8_col;
  return fp8_entry(s, &s->st_w, o->lin, TECORE_FP8_WEIGHT, o->w8_srow, o->w8_scol, t);
}

TE_EXPORT tecore_result_t tecore_seq_fp8_weight(const tecore_seq_t *s, size_t index,
                                                struct tecore_tensor *t) {
  static const char fn[] = "tecore_seq_fp8_weight";
  TE_CHECK(te_seq_op_arg(s, index, fn));
  TE_ARG(t, "%s: t is NULL", fn);
  TE_ARG(s->built, "%s: the sequence is not built (tecore_seq_build)", fn);
  const struct te_op *o = &s->ops[index];
  if (o->d.kind != TECORE_OP_LINEAR || !te_op_fp8(s, index) || !o->w8_row)
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: operation %zu (%s) is no Linear running in "
                  "FP8 (no recipe, or a high-precision plan for a small GEMM)", fn, index,
                  o->def.name);
  if (te_seq_infer(s))
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: seq %p is an inference sequence: its weight "
                  "copies are cached (tecore_seq_weights_changed)", fn, (const void *)s);
  if (s->recipe.kind != TECORE_RECIPE_DELAYED)
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: the recipe is %s: only delayed scaling knows "
                  "the weight's scale before the weight itself", fn,
                  te_seq_block(s) ? "block" : "current");
  if (o->w8_col)
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: TECORE_OPS_W8_COL_KEEP: the forward writes "
                  "a columnwise copy too", fn);
  if (te_fusion_named_off("weight_fp8"))
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: TECORE_OPS_FUSION_OFF names weight_fp8", fn);
  TE_CHECK(w8_tensor(s, o, t));
  t->columnwise_data = 0;
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_seq_set_fp8_weight_given(tecore_seq_t *s, size_t index,
                                                          int given) {
  static const char fn[] = "tecore_seq_set_fp8_weight_given";
  struct tecore_tensor t;
  TE_ARG(given == 0 || given == 1, "%s: given %d: 0 or 1", fn, given);
  /* the same conditions as the hand-off itself (its checks name the
   * argument; a failure here says tecore_seq_fp8_weight, so the text
   * names this call instead) */
  tecore_result_t r = tecore_seq_fp8_weight(s, index, &t);
  if (r != TECORE_SUCCESS) {
    char text[400];
    snprintf(text, sizeof text, "%s", tecore_last_error());
    const char *tail = strncmp(text, "tecore_seq_fp8_weight: ", 23) == 0 ? text + 23 : text;
    return TE_ERR(r, "%s: %s", fn, tail);
  }
  struct te_op *o = &s->ops[index];
  if (!given && o->w8_ext) {   /* the codes in storage of the sequence's own again */
    tecore_devptr_t own = 0;
    TE_CHECK(te_seq_alloc(s, o->plen[0], 0, &own));
    o->w8_row = own;
    o->w8_ext = 0;
  }
  o->w8_given = given;
  return TECORE_SUCCESS;
}

/* The FP8 weight for the dgrad GEMM dx = dy W, which reads its columnwise
 * copy: made now in the sequence's one scratch (s->w8_col) as the byte
 * transpose of the rowwise codes.  Exact: with a per-tensor scale the
 * columnwise copy is the same codes transposed under the same scale_inv
 * (columnwise_scale_inv stays 0), what the forward's cast+transpose
 * wrote before.  Safe to share: only dgrad GEMMs read it, each queued
 * right after its transpose on the same stream (a deferred weight
 * gradient, ops_overlap.c, reads dy and x, never W).  A Linear whose
 * gradient is larger than dy8_col (an LM head: linear_bwd_split, its
 * weight the largest) puts it in dy8_col instead, which that backward
 * leaves unused: w8_col is then sized for the other weights. */
static tecore_result_t w8_for_dgrad(tecore_seq_t *s, const struct te_op *o,
                                    struct tecore_tensor *t, tecore_stream_t st) {
  TE_CHECK(w8_tensor(s, o, t));
  if (o->w8_col) return TECORE_SUCCESS;   /* kept from the forward */
  const size_t op = (size_t)(o - s->ops);
  tecore_devptr_t col = te_w8_in_given(s, op) ? s->run_dy8_col
                        : te_w8_in_dy8(s, op) ? s->dy8_col
                                              : s->w8_col;
  if (col && te_seq_block(s) && s->w8_scol) {
    /* 128x128 blocks: a block's amax, scale and codes do not depend on
     * the direction it is read in, so the columnwise copy is the codes
     * transposed and the grid of block scales transposed -- the bytes
     * quantizing the weight again gives (te-gpt-memory.sh, part 5, holds
     * them to the forward's columnwise copy), reading a quarter of the
     * bytes an F32 weight has */
    size_t rb = te_cdiv(o->out_cols, 128), cb = te_cdiv(o->in_cols, 128);
    struct te_copy2d g = {.dst = s->w8_scol, .src = o->w8_srow, .drows = cb, .dcols = rb,
                          .srows = cb, .scols = rb, .dsi = rb, .dsj = 1, .ssi = 1, .ssj = cb};
    TE_CHECK(te_copy2d_u32(&g, st));
    t->columnwise_data = col;
    t->columnwise_scale_inv = s->w8_scol;
    return te_byte_transpose(col, o->w8_row, o->out_cols, o->in_cols, st);
  }
  if (!col || !te_scaling_per_tensor(t->scaling) || t->columnwise_scale_inv)
    return TE_ERR(TECORE_ERR_INTERNAL, "fuser: the weight's columnwise FP8 copy needs the "
                  "training scratch and one per-tensor scale");
  t->columnwise_data = col;
  return te_byte_transpose(col, o->w8_row, o->out_cols, o->in_cols, st);
}

/* The FP8 copies of a gradient (or of a Linear's input) in the copies t
 * has: per-tensor scaling casts and transposes in one kernel; 1x128
 * blocks quantize each copy from dy itself (tecore_quantize, one read). */
static tecore_result_t quantize_both(const tecore_seq_t *s, const struct tecore_tensor *dy,
                                     struct tecore_tensor *t, tecore_stream_t st) {
  if (te_seq_block(s)) return tecore_quantize(dy, t, 0, st);
  return tecore_cast_transpose(dy, t, st);
}

tecore_result_t te_dy8_tensor(const tecore_seq_t *s, size_t op, struct tecore_tensor *t) {
  const struct te_op *o = &s->ops[op];
  te_t2d(t, TECORE_DTYPE_E5M2, o->out_rows, o->out_cols, s->dy8_row);
  t->columnwise_data = s->dy8_col;
  return fp8_entry(s, &s->st_g, o->lin, TECORE_FP8_GRADIENT, s->dy8_srow, s->dy8_scol, t);
}

/* The Linear whose dgrad reads op's GELU aux: the last of the backward
 * plan's dgrad+dgelu group that starts at op (x_dgrad_dgelu passes it the
 * aux), or SIZE_MAX when the plan has none there -- then the GELU's own
 * backward reads the aux, which must stay the pre-activation. */
static size_t daux_reader(const tecore_seq_t *s, size_t op) {
  const struct te_group *g = s->plan.groups[TECORE_SEQ_BACKWARD];
  for (size_t j = 0; j < s->plan.ngroups[TECORE_SEQ_BACKWARD]; j++)
    if (g[j].first == op && g[j].count >= 3 && g[j].f &&
        g[j].f->builtin_id == TE_FUSE_DGRAD_DGELU)
      return op + g[j].count - 1;
  return SIZE_MAX;
}

/* The forward of a GELU Linear that saves gelu' as aux for the backward
 * (TECORE_GEMM_EPI_BIAS_GELU_DAUX, te/gemm.h): where the backward plan's
 * dgrad+dgelu group reads the aux (daux_reader) and the GEMM library
 * runs the epilogue for this forward and that dgrad (16-bit, no
 * residual, the shapes of gemm.c's daux rule), which then multiplies by
 * aux instead of evaluating gelu' (the dGELU GEMM is bound by its
 * epilogue warps' aux loads and gelu', doc/kernels.md).
 * TECORE_ERR_NOT_SUPPORTED: not here -- the pre-activation epilogue then
 * runs, as before (a refusal of the library marks the op: not asked
 * again). */
static tecore_result_t gelu_daux_fwd(tecore_seq_t *s, const struct te_lin_fwd *a,
                                     const struct tecore_tensor *A,
                                     const struct tecore_tensor *B,
                                     const struct tecore_gemm_opts *opts, tecore_stream_t st) {
  struct te_op *o = &s->ops[a->op];
  o->gelu_daux = 0;
  const tecore_dtype_t dt = a->y->dtype;
  /* the backward's DAUX GEMM is that Linear's dgrad: rows x out (this
   * one's) x its out */
  const size_t next = daux_reader(s, a->op);
  if (o->gelu_daux_off || a->C || next == SIZE_MAX ||
      (dt != TECORE_DTYPE_BF16 && dt != TECORE_DTYPE_F16) || A->dtype != dt || B->dtype != dt ||
      !te_gemm_daux_shapes(a->y->shape[0], o->out_cols, o->in_cols) ||
      !te_gemm_daux_shapes(a->y->shape[0], o->out_cols, s->ops[next].out_cols))
    return TECORE_ERR_NOT_SUPPORTED;
  struct tecore_gemm_opts d = *opts;
  d.epilogue = opts->epilogue == TECORE_GEMM_EPI_BIAS_GELU_AUX ? TECORE_GEMM_EPI_BIAS_GELU_DAUX
                                                                : TECORE_GEMM_EPI_GELU_DAUX;
  tecore_result_t r = tecore_gemm(A, TECORE_GEMM_N, B, TECORE_GEMM_T, a->y, 1.0f, 0.0f, &d, st);
  if (r == TECORE_SUCCESS) {
    o->gelu_daux = 1;
    return r;
  }
  if (r != TECORE_ERR_NOT_SUPPORTED) {
    te_error_hop(__func__, __FILE__, __LINE__);
    return r;
  }
  TE_INFO(TECORE_SUBSYS_KERNEL, "fuser: op %zu: %s; the pre-activation GELU epilogue instead, "
          "from now on", a->op, tecore_last_error());
  o->gelu_daux_off = 1;
  tecore_clear_error();
  return r;
}

/* The forward GEMM in s->chunk_n blocks of rows (ops_overlap.c: the
 * pattern after it runs on each block as soon as it is written): x's and
 * y's rows r0 .. r0 + n are contiguous, so a block is a view at an offset
 * (the FP8 input's rowwise copy only: the forward GEMM reads no other). */
static tecore_result_t gemm_rows(tecore_seq_t *s, const struct te_lin_fwd *a,
                                 const struct tecore_tensor *A, const struct tecore_tensor *B,
                                 const struct tecore_gemm_opts *opts, int fuse_bias) {
  size_t rows = a->y->shape[0], n = rows / s->chunk_n;
  size_t ea = tecore_dtype_size(A->dtype), ey = tecore_dtype_size(a->y->dtype);
  for (size_t r0 = 0; r0 < rows; r0 += n) {
    struct tecore_tensor Ab = *A, yb = *a->y;
    Ab.data += r0 * A->shape[1] * ea;
    Ab.shape[0] = n;
    Ab.columnwise_data = 0;
    Ab.columnwise_scale_inv = 0;
    /* 1x128 blocks: a row's scales are its own, [rows][cdiv(cols,128)] */
    if (A->scaling == TECORE_SCALING_BLOCK_1X128)
      Ab.scale_inv += r0 * ((A->shape[1] + 127) / 128) * sizeof(float);
    yb.data += r0 * a->y->shape[1] * ey;
    yb.shape[0] = n;
    TE_CHECK(tecore_gemm(&Ab, TECORE_GEMM_N, B, TECORE_GEMM_T, &yb, 1.0f, 0.0f, opts, a->stream));
    if (a->bias && !fuse_bias) TE_CHECK(te_bias_add(s, &yb, &yb, a->bias, a->stream));
    TE_CHECK(s->chunk_done(s, r0, n));
  }
  return TECORE_SUCCESS;
}

/* The FP8 operands of Linear op's forward GEMM, quantized now where the
 * forward quantizes them: A its input x (unless the group before wrote
 * the FP8 copy), B its weight. */
static tecore_result_t lin_fp8_operands(tecore_seq_t *s, size_t op, const struct tecore_tensor *x,
                                        tecore_devptr_t noop_flag, tecore_stream_t st,
                                        struct tecore_tensor *A, struct tecore_tensor *B) {
  struct te_op *o = &s->ops[op];
  struct tecore_tensor W;
  te_t2d(&W, te_param_dtype(s, o, 0), o->out_cols, o->in_cols, o->param[0]);
  TE_CHECK(te_bnd_f8_tensor(s, op, A));
  /* rowwise only: a norm wrote it so (training), or nothing will read a
   * columnwise copy (inference: a plain quantize, no cast+transpose) */
  if (s->bnd[op].f8_rowonly) A->columnwise_data = 0;
  if (!s->bnd[op].f8_ready) TE_CHECK(tecore_quantize(x, A, 0, st));
  TE_CHECK(w8_tensor(s, o, B));
  if (!te_seq_infer(s)) {
    /* the noop flag skips this on later microbatches: the cached copy
     * stays; a weight given (tecore_seq_set_fp8_weight_given) is never
     * quantized here: its codes came from the caller, and W may hold
     * nothing (ZeRO-3 gathers the codes instead of the values) */
    if (!o->w8_given) TE_CHECK(tecore_quantize(&W, B, noop_flag, st));
  } else if (!o->w8_cached) {
    /* inference: once, rowwise (the forward GEMM reads no other copy);
     * later forwards launch nothing for the weight */
    B->columnwise_data = 0;
    TE_CHECK(tecore_quantize(&W, B, 0, st));
    o->w8_cached = 1;
  }
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_seq_linear_fp8_operands(tecore_seq_t *s, size_t index,
                                                         const struct tecore_tensor *x,
                                                         tecore_devptr_t noop_flag,
                                                         tecore_stream_t stream,
                                                         struct tecore_tensor *a,
                                                         struct tecore_tensor *w) {
  static const char fn[] = "tecore_seq_linear_fp8_operands";
  TE_CHECK(te_seq_op_arg(s, index, fn));
  TE_ARG(a && w, "%s: %s is NULL", fn, a ? "w" : "a");
  const struct te_op *o = &s->ops[index];
  if (o->d.kind != TECORE_OP_LINEAR || !s->bnd || !te_op_fp8(s, index) || s->bnd[index].f8 < 0 ||
      !o->w8_row)
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: operation %zu (%s) is no Linear running in "
                  "FP8 (no recipe, not built, or a high-precision plan for a small GEMM)", fn,
                  index, o->def.name);
  if (!s->bnd[index].f8_ready) {
    TE_ARG(x, "%s: x is NULL (operation %zu quantizes its input)", fn, index);
    TE_ARG(x->dtype == s->cfg.dtype && tecore_tensor_numel(x) == o->in_rows * o->in_cols,
           "%s: x is %s of %zu elements, want the sequence's %s [%zu][%zu]", fn,
           tecore_dtype_name(x->dtype), tecore_tensor_numel(x), tecore_dtype_name(s->cfg.dtype),
           o->in_rows, o->in_cols);
  }
  return lin_fp8_operands(s, index, x, noop_flag, stream, a, w);
}

tecore_result_t te_linear_fwd(tecore_seq_t *s, const struct te_lin_fwd *a) {
  const struct te_op *o = &s->ops[a->op];
  tecore_dtype_t dt = s->cfg.dtype;
  tecore_stream_t st = a->stream;
  struct tecore_tensor A, B, W;
  te_t2d(&W, te_param_dtype(s, o, 0), o->out_cols, o->in_cols, o->param[0]);
  const int f8 = te_op_fp8(s, a->op);
  if (f8) {
    TE_CHECK(lin_fp8_operands(s, a->op, a->x, a->noop_flag, st, &A, &B));
  } else if (dt == TECORE_DTYPE_F32) {
    size_t xr = a->x->shape[0], xc = a->x->shape[1];
    TE_CHECK(te_cast(s, o->x16, TECORE_DTYPE_BF16, a->x->data, dt, xr * xc, st));
    TE_CHECK(te_cast(s, o->w16, TECORE_DTYPE_BF16, o->param[0], dt, o->plen[0], st));
    te_t2d(&A, TECORE_DTYPE_BF16, xr, xc, o->x16);
    te_t2d(&B, TECORE_DTYPE_BF16, o->out_cols, o->in_cols, o->w16);
  } else if (te_w16_cast(s, a->op)) {
    /* F32 weight: its 16-bit copy, kept for the backward's dgrad */
    TE_CHECK(te_cast(s, o->w16, dt, o->param[0], TECORE_DTYPE_F32, o->plen[0], st));
    A = *a->x;
    te_t2d(&B, dt, o->out_cols, o->in_cols, o->w16);
  } else {
    A = *a->x;
    B = W;
  }
  int fuse_bias = a->bias && te_linear_companion(s) == dt;
  struct tecore_tensor bias;
  te_vec(&bias, dt, o->out_cols, a->bias);
  /* cuBLASLt's block-scaled GEMMs have no fast accumulation (te/gemm.h) */
  struct tecore_gemm_opts opts = {.C = a->C, .aux = a->aux, .fast_accum = f8 && !te_seq_block(s),
                                  .workspace = s->gemm_ws, .workspace_bytes = s->gemm_ws_bytes};
  if (fuse_bias) opts.bias = &bias;
  if (a->aux)
    opts.epilogue = fuse_bias ? TECORE_GEMM_EPI_BIAS_GELU_AUX : TECORE_GEMM_EPI_GELU_AUX;
  else
    opts.epilogue = fuse_bias ? TECORE_GEMM_EPI_BIAS : TECORE_GEMM_EPI_NONE;
  if (a->aux && a->bias && !fuse_bias)
    return TE_ERR(TECORE_ERR_INTERNAL, "fuser: a GELU epilogue with a bias the GEMM cannot take");
  if (s->chunk_op == a->op && !a->aux && !a->C) return gemm_rows(s, a, &A, &B, &opts, fuse_bias);
  const float beta = a->C ? 1.0f : 0.0f;
  if (a->aux && a->aux_dead && !o->gelu_aux_only) {
    /* nothing reads the pre-activation: GELU without writing it (the same
     * D: te/gemm.h); a GEMM library without that epilogue for these
     * types says NOT_SUPPORTED before queuing anything, and the aux one
     * runs instead */
    struct tecore_gemm_opts na = opts;
    na.aux = NULL;
    na.epilogue = fuse_bias ? TECORE_GEMM_EPI_BIAS_GELU : TECORE_GEMM_EPI_GELU;
    tecore_result_t r = tecore_gemm(&A, TECORE_GEMM_N, &B, TECORE_GEMM_T, a->y, 1.0f, beta, &na, st);
    if (r != TECORE_ERR_NOT_SUPPORTED) {
      if (r != TECORE_SUCCESS) te_error_hop(__func__, __FILE__, __LINE__);
      return r;
    }
    TE_INFO(TECORE_SUBSYS_KERNEL, "fuser: op %zu: %s; the GELU epilogue with aux instead, from "
            "now on", a->op, tecore_last_error());
    s->ops[a->op].gelu_aux_only = 1;
    tecore_clear_error();
  }
  if (a->aux && !a->aux_dead) {
    tecore_result_t r = gelu_daux_fwd(s, a, &A, &B, &opts, st);
    if (r != TECORE_ERR_NOT_SUPPORTED) return r;
  }
  TE_CHECK(tecore_gemm(&A, TECORE_GEMM_N, &B, TECORE_GEMM_T, a->y, 1.0f, beta, &opts, st));
  if (a->bias && !fuse_bias) TE_CHECK(te_bias_add(s, a->y, a->y, a->bias, st));
  return TECORE_SUCCESS;
}

/* The FP8 input of Linear op for its weight gradient: both copies.  When a
 * norm wrote the rowwise copy only (rmsnorm+quantize), the columnwise one
 * is made now as the byte transpose of the rowwise codes: with a
 * per-tensor scale the columnwise copy holds the same codes transposed
 * and shares scale_inv (columnwise_scale_inv stays 0, so the GEMM reads
 * scale_inv for both), and the amax was counted by the forward.  A
 * quarter of the bytes of dequantizing and cast-transposing again. */
static tecore_result_t x8_both(tecore_seq_t *s, size_t op, struct tecore_tensor *X,
                               tecore_stream_t st) {
  TE_CHECK(te_bnd_f8_tensor(s, op, X));
  const struct te_bnd *bd = &s->bnd[op];
  if (!bd->f8_rowonly) return TECORE_SUCCESS;
  if (!te_scaling_per_tensor(X->scaling) || X->columnwise_scale_inv)
    return TE_ERR(TECORE_ERR_INTERNAL,
                  "fuser: boundary %zu: the columnwise FP8 copy is a transpose only with one "
                  "per-tensor scale (scaling %s)",
                  op, tecore_scaling_name(X->scaling));
  return te_byte_transpose(X->columnwise_data, X->data, bd->rows, bd->cols, st);
}

/* cuBLASLt's bias-gradient epilogue made GPT-2 124M's weight-gradient
 * GEMMs 24-96 us a call slower on an H100 (fc1 3072x768 over 32768
 * tokens: 307.9 us with it, 212.0 without), 2.7 ms a step, more than
 * reading the gradients again (bench/2026-11-26.md, session 27).  So a 16-bit
 * Linear's bias gradient is dy's column sums by their own kernel
 * (te_colsum), the GEMM without epilogue. */
TE_PARAM_INT(ops_bgrad_epilogue, "TECORE_OPS_BGRAD_EPILOGUE", 0, 0, 1,
             "0: a 16-bit Linear's bias gradient is the column sums of its output gradient by "
             "libtecore's own kernel, the weight-gradient GEMM without epilogue (measured "
             "faster on an H100); 1: cuBLASLt's bias-gradient epilogue on that GEMM")

size_t te_linear_cws_bytes(const tecore_seq_t *s) {
  size_t bytes = 0;
  if (tecore_tunable_int(&ops_bgrad_epilogue) != 0) return 0;   /* read once, at build */
  for (size_t i = 0; i < s->nops && !te_seq_infer(s); i++) {
    const struct te_op *o = &s->ops[i];
    size_t b = (o->fp8 & TE_KIND_GEMM) ? te_colsum_ws_bytes(o->out_cols) : 0;
    if (b > bytes) bytes = b;
  }
  return bytes;
}

/* Is dy's bias gradient taken by te_colsum (not the GEMM's epilogue)?  The
 * sequence has the scratch when TECORE_OPS_BGRAD_EPILOGUE was 0 at its
 * build. */
static int bgrad_split(const tecore_seq_t *s, const struct tecore_tensor *DY) {
  return s->cws && DY->ndim == 2 &&
         DY->shape[1] % 8 == 0 && DY->data % 16 == 0 &&
         te_colsum_ws_bytes(DY->shape[1]) <= s->cws_bytes;
}

tecore_result_t te_linear_act_bwd(tecore_seq_t *s, size_t act_op, tecore_activation_t act,
                                  const struct tecore_tensor *dy, const struct tecore_tensor *x,
                                  const struct tecore_tensor *dx, tecore_stream_t stream) {
  s->cs_op = SIZE_MAX;
  const size_t l = act_op - 1;
  const struct te_op *lo = act_op > 0 ? &s->ops[l] : NULL;
  if (lo && (lo->fp8 & TE_KIND_GEMM) && lo->d.bias && !te_op_fp8(s, l) && bgrad_split(s, dx) &&
      te_act_bwd_colsum_ok(act, dy, x, dx) && dx->shape[0] > 0) {
    /* bgrad_split checked the scratch: te_colsum_ws_bytes bounds the plan's parts */
    size_t parts = 0, rpp = te_colsum_plan(dx->shape[0], dx->shape[1], &parts);
    TE_CHECK(te_act_bwd_colsum(act, dy, x, dx, s->cws, rpp, parts, stream));
    s->cs_op = l;
    s->cs_parts = parts;
    s->cs_src = dx->data;
    s->cs_done = 0;
    return TECORE_SUCCESS;
  }
  struct tecore_tensor d = *dx;
  return tecore_act_bwd(act, dy, x, &d, stream);
}

/* A packed QKV Linear's bias gradient without the column sums of its key
 * and value parts.  The key bias adds q . b_k to every score of a query,
 * which the softmax takes away: its gradient is 0.  The value bias adds
 * b_v to every output row (each row of the softmax sums to 1): its
 * gradient is the sum of the rows of the attention output's gradient dO,
 * and dO = dy W_o for the output Linear after attention, so it is
 * (column sums of dy) W_o -- that Linear's bias gradient times its
 * weight, summed over the query heads of each key/value head.  GPT-2
 * 124M's QKV bias gradient read 2304 columns of dQKV at 52 us a layer on
 * an H100 (bench/2026-11-26.md, session 32, c6); the query part alone is a third of it.
 * Taken when the output Linear's bias gradient was made by the norm after
 * it (te_linear_norm_bwd, which keeps this backward's sums apart in
 * s->kvb), the attention has no cu_seqlens (no padding rows, whose dO
 * would count) and no RoPE between (a rotated key bias is not constant
 * over the keys). */
TE_PARAM_INT(ops_qkv_bias, "TECORE_OPS_QKV_BIAS", 1, 0, 1,
             "1: a packed QKV Linear's key and value bias gradients come from the softmax's "
             "identities (0, and the output Linear's bias gradient times its weight) where "
             "they hold; 0: column sums of the whole dQKV")

/* The QKV Linear whose key and value bias gradients the output Linear
 * o_op's bias gradient gives (above), or SIZE_MAX. */
static size_t qkv_chain(const tecore_seq_t *s, size_t o_op) {
  if (!tecore_tunable_int(&ops_qkv_bias) || !s->kvb || o_op < 2) return SIZE_MAX;
  const struct te_op *o = &s->ops[o_op], *a = &s->ops[o_op - 1], *q = &s->ops[o_op - 2];
  if (a->d.kind != TECORE_OP_ATTENTION || !a->own_ctx || q->d.kind != TECORE_OP_LINEAR ||
      !q->d.bias || !(q->fp8 & TE_KIND_GEMM) || te_op_fp8(s, o_op - 2) ||
      o->d.kind != TECORE_OP_LINEAR || !o->d.bias || te_op_fp8(s, o_op) ||
      (s->cfg.dtype != TECORE_DTYPE_BF16 && s->cfg.dtype != TECORE_DTYPE_F16) ||
      te_param_dtype(s, o, 0) != s->cfg.dtype)
    return SIZE_MAX;
  const struct tecore_op_attention_args *p = &a->prm.attn;
  const size_t hd = (size_t)p->head_dim, qc = (size_t)p->heads * hd, kc = (size_t)p->kv_heads * hd;
  if (p->cu_seqlens || q->out_cols != qc + 2 * kc || o->in_cols != qc || qc % 8 ||
      o->out_cols > s->max_cols)
    return SIZE_MAX;
  return o_op - 2;
}

/* The QKV Linear q's bias gradient: the query part's column sums of dy,
 * the key and value parts from s->kvb (qkv_chain). */
static tecore_result_t qkv_bias_grad(tecore_seq_t *s, size_t q, const struct tecore_tensor *DY,
                                     tecore_devptr_t bias_grad, tecore_stream_t st) {
  const struct te_op *o = &s->ops[q + 2];
  const struct tecore_op_attention_args *p = &s->ops[q + 1].prm.attn;
  const size_t qc = (size_t)p->heads * (size_t)p->head_dim;
  const int acc = !te_grad_take_fresh(s, bias_grad);
  s->kvb_op = SIZE_MAX;
  TE_CHECK(te_colsum_cols(bias_grad, DY, 0, qc, acc, s->cws, s->cws_bytes, st));
  const struct te_qkv_heads h = {p->heads, p->kv_heads, p->head_dim};
  return te_qkv_kv_bias(bias_grad + qc * 4, s->kvb, o->param[0], s->cfg.dtype, o->out_cols, &h,
                        acc, st);
}

/* A pre-norm block's proj and fc2 bias gradients are the column sums of
 * the gradient a norm's backward writes (the residual stream's, through
 * AddExtraInput): GPT-2 124M's 24 of them took 21 us each by te_colsum
 * on an H100, reading that gradient once more (bench/2026-11-26.md, session 32, c6). */
TE_PARAM_INT(ops_norm_colsum, "TECORE_OPS_NORM_COLSUM", 1, 0, 1,
             "1: a norm's backward also makes the column sums of its input gradient where "
             "they are the bias gradient of the 16-bit Linear before it (past residual adds); "
             "0: that Linear's backward sums its output gradient again")

/* The Linear whose bias gradient is the column sums of g, the gradient at
 * boundary b (the input of op b), or SIZE_MAX. */
static size_t norm_cs_target(const tecore_seq_t *s, size_t b, const struct tecore_tensor *g) {
  if (!tecore_tunable_int(&ops_norm_colsum) || s->cfg.dtype == TECORE_DTYPE_F32) return SIZE_MAX;
  while (b > 0 && s->ops[b - 1].d.kind == TECORE_OP_ADD_EXTRA_INPUT) b--;
  if (b == 0) return SIZE_MAX;
  const size_t l = b - 1;
  const struct te_op *o = &s->ops[l];
  if (o->d.kind != TECORE_OP_LINEAR || !(o->fp8 & TE_KIND_GEMM) || !o->d.bias ||
      te_op_fp8(s, l) || o->out_cols != g->shape[1] || !bgrad_split(s, g))
    return SIZE_MAX;
  /* the Linear's dy is g itself (the AddExtraInputs between alias it) */
  return te_bnd_grad(s, l + 1) == g->data ? l : SIZE_MAX;
}

tecore_result_t te_linear_norm_bwd(tecore_seq_t *s, size_t first, struct te_norm_bwd_call *c,
                                   tecore_stream_t stream) {
  const size_t l = norm_cs_target(s, first, c->dx);
  size_t parts = 0;
  int fresh = 0;
  s->cs_op = SIZE_MAX;
  if (l != SIZE_MAX) {
    /* the sums go straight into the bias gradient with the norm's own
     * (a store when it is marked to be overwritten) */
    c->cs = s->cws;
    c->cs_bytes = s->cws_bytes;
    c->cs_parts = &parts;
    c->cs_out = s->ops[l].grad[1];
    fresh = te_grad_take_fresh(s, c->cs_out);
    c->cs_acc = !fresh;
    /* this backward's sums alone, for the QKV Linear's bias gradient */
    if (qkv_chain(s, l) != SIZE_MAX) c->cs_copy = s->kvb;
  }
  tecore_result_t r = te_norm_bwd(c, stream);
  if (parts && r == TECORE_SUCCESS) {
    s->cs_op = l;
    s->cs_parts = parts;
    s->cs_src = c->dx->data;
    s->cs_done = 1;
    s->kvb_op = c->cs_copy ? l : SIZE_MAX;
  } else if (fresh) {
    te_grad_put_fresh(s, c->cs_out);
  }
  return r;
}

/* The weight gradient dW += dy^T x (F32, beta = 1) from the prepared
 * operands; bias_grad: a BGRAD epilogue adds the column sums of dy there
 * too (through s->dvec).  x8_transpose: x's columnwise FP8 copy is made
 * first (x8_both), as only this GEMM reads it. */
static tecore_result_t wgrad(tecore_seq_t *s, size_t op, const struct tecore_tensor *DY,
                             const struct tecore_tensor *X, int x8_transpose,
                             tecore_devptr_t bias_grad, tecore_stream_t st) {
  const struct te_op *o = &s->ops[op];
  struct tecore_tensor Xc = *X, gW, db;
  if (x8_transpose) TE_CHECK(x8_both(s, op, &Xc, st));
  /* the epilogue's bias gradient has the GEMM output's type (BF16 under
   * TECORE_SEQ_BF16_WGRAD), added into the F32 bias gradient */
  const tecore_dtype_t gdt = te_grad_dtype(s, o, 0);
  te_t2d(&gW, gdt, o->out_cols, o->in_cols, o->grad[0]);
  struct tecore_gemm_opts wo = {.workspace = s->gemm_ws, .workspace_bytes = s->gemm_ws_bytes};
  const int split = bias_grad && !x8_transpose && bgrad_split(s, DY);
  if (bias_grad && !split) {
    te_vec(&db, gdt, o->out_cols, s->dvec);
    wo.epilogue = TECORE_GEMM_EPI_BGRAD;
    wo.bias = &db;
  }
  /* the first contribution after tecore_seq_zero_grad overwrites */
  const float beta = te_grad_take_fresh(s, o->grad[0]) ? 0.0f : 1.0f;
  TE_CHECK(tecore_gemm(DY, TECORE_GEMM_T, &Xc, TECORE_GEMM_N, &gW, 1.0f, beta, &wo, st));
  if (split && s->kvb_op == op + 2 && qkv_chain(s, op + 2) == op)
    return qkv_bias_grad(s, op, DY, bias_grad, st);
  if (split && s->cs_op == op && s->cs_src == DY->data && !s->cs_done) {
    /* the activation's backward left dy's column sums */
    s->cs_op = SIZE_MAX;
    return te_colsum_final(bias_grad, s->cws, s->cs_parts, DY->shape[1],
                           !te_grad_take_fresh(s, bias_grad), st);
  }
  if (split)
    return te_colsum(bias_grad, DY, !te_grad_take_fresh(s, bias_grad), s->cws, s->cws_bytes, st);
  if (bias_grad) TE_CHECK(te_accum_f32(s, bias_grad, s->dvec, gdt, o->out_cols, st));
  return TECORE_SUCCESS;
}

/* dy or x of tecore_seq_linear_wgrad: the sequence's dtype, rows x cols. */
static tecore_result_t wgrad_arg(const tecore_seq_t *s, const struct tecore_tensor *t,
                                 const char *name, size_t rows, size_t cols, const char *fn) {
  TE_ARG(t, "%s: %s is NULL", fn, name);
  TE_ARG(t->dtype == s->cfg.dtype && t->ndim == 2 && t->shape[0] == rows && t->shape[1] == cols &&
             t->data,
         "%s: %s is %s [%zu][%zu] at 0x%llx, want the sequence's %s [%zu][%zu] (data set)", fn,
         name, tecore_dtype_name(t->dtype), t->ndim > 0 ? t->shape[0] : 0,
         t->ndim > 1 ? t->shape[1] : 0, (unsigned long long)t->data,
         tecore_dtype_name(s->cfg.dtype), rows, cols);
  return TECORE_SUCCESS;
}

/* Why the FP8 backward of Linear index cannot be split as
 * tecore_seq_linear_fp8_dgrad_operands says, or NULL. */
static const char *dgrad8_why_not(const tecore_seq_t *s, size_t index) {
  const struct te_op *o = &s->ops[index];
  if (te_seq_infer(s)) return "an inference sequence has no backward";
  if (s->recipe.kind != TECORE_RECIPE_DELAYED)
    return "only delayed scaling knows the gradient's scale before the gradient";
  /* the last Linear's copies may be the caller's (TECORE_SEQ_GRAD_FP8_GIVEN)
   * or too large for the columnwise scratch (te_seq_grad_fp8) */
  if ((s->grad8_given && index + 1 == s->nops) || o->out_rows * o->out_cols > s->dy8_col_elems)
    return "the gradient's FP8 copies are not the sequence's scratch (an LM head's)";
  return NULL;
}

TE_EXPORT tecore_result_t tecore_seq_linear_fp8_dgrad_operands(tecore_seq_t *s, size_t index,
                                                               tecore_stream_t stream,
                                                               struct tecore_tensor *dy8,
                                                               struct tecore_tensor *w) {
  static const char fn[] = "tecore_seq_linear_fp8_dgrad_operands";
  TE_CHECK(te_seq_op_arg(s, index, fn));
  TE_ARG(dy8, "%s: dy8 is NULL", fn);
  const struct te_op *o = &s->ops[index];
  if (o->d.kind != TECORE_OP_LINEAR || !s->bnd || !te_op_fp8(s, index) || !o->w8_row)
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: operation %zu (%s) is no Linear running in "
                  "FP8 (no recipe, not built, or a high-precision plan for a small GEMM)", fn,
                  index, o->def.name);
  const char *why = dgrad8_why_not(s, index);
  if (why) return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: operation %zu: %s", fn, index, why);
  TE_CHECK(te_dy8_tensor(s, index, dy8));
  dy8->columnwise_data = 0;   /* the caller writes the rowwise codes */
  dy8->columnwise_scale_inv = 0;
  return w ? w8_for_dgrad(s, o, w, stream) : TECORE_SUCCESS;
}

/* FP8: dy's codes are in the sequence's gradient scratch (the caller
 * wrote them, tecore_seq_linear_fp8_dgrad_operands); the columnwise copy
 * as the plain backward makes it -- with a bias its cast_transpose_dbias
 * on dy (the same codes again, both copies, the column sums), else the
 * byte transpose of the codes -- then the GEMM with x's FP8 copy. */
static tecore_result_t wgrad8(tecore_seq_t *s, size_t index, const struct tecore_tensor *dy,
                              tecore_stream_t st) {
  const struct te_op *o = &s->ops[index];
  struct tecore_tensor DY, X;
  TE_CHECK(te_dy8_tensor(s, index, &DY));
  if (o->d.bias && dy) {
    struct tecore_tensor db;
    te_vec(&db, TECORE_DTYPE_F32, o->out_cols, s->dvec);
    TE_CHECK(tecore_cast_transpose_dbias(dy, &DY, &db, s->ws, s->ws_bytes, st));
    TE_CHECK(te_accum_f32(s, o->grad[1], s->dvec, TECORE_DTYPE_F32, o->out_cols, st));
  } else {
    TE_CHECK(te_byte_transpose(DY.columnwise_data, DY.data, o->out_rows, o->out_cols, st));
  }
  TE_CHECK(te_bnd_f8_tensor(s, index, &X));
  return wgrad(s, index, &DY, &X, 1, 0, st);
}

TE_EXPORT tecore_result_t tecore_seq_linear_wgrad(tecore_seq_t *s, size_t index,
                                                  const struct tecore_tensor *x,
                                                  const struct tecore_tensor *dy,
                                                  tecore_stream_t stream) {
  static const char fn[] = "tecore_seq_linear_wgrad";
  TE_CHECK(te_seq_op_arg(s, index, fn));
  const struct te_op *o = &s->ops[index];
  if (o->d.kind != TECORE_OP_LINEAR || !s->bnd ||
      (s->cfg.dtype != TECORE_DTYPE_BF16 && s->cfg.dtype != TECORE_DTYPE_F16))
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: operation %zu (%s) is no Linear of a built "
                  "BF16 or F16 sequence (F32 sequences make other operands)", fn, index,
                  o->def.name);
  const int f8 = te_op_fp8(s, index);
  const char *why = f8 ? dgrad8_why_not(s, index) : NULL;
  if (why) return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: operation %zu runs in FP8: %s", fn,
                         index, why);
  if (!f8 || x) TE_CHECK(wgrad_arg(s, x, "x", o->in_rows, o->in_cols, fn));
  /* FP8 reads the codes alone: dy may be NULL (a bias's gradient is then
   * the caller's, tecore_seq_linear_bgrad) */
  if (!f8 || dy) TE_CHECK(wgrad_arg(s, dy, "dy", o->out_rows, o->out_cols, fn));
  s->cs_op = SIZE_MAX;   /* no activation's column sums are dy's */
  if (f8) return wgrad8(s, index, dy, stream);
  return wgrad(s, index, dy, x, 0, o->d.bias ? o->grad[1] : 0, stream);
}

TE_EXPORT tecore_result_t tecore_seq_linear_bgrad(tecore_seq_t *s, size_t index,
                                                  tecore_devptr_t db, tecore_stream_t stream) {
  static const char fn[] = "tecore_seq_linear_bgrad";
  TE_CHECK(te_seq_op_arg(s, index, fn));
  const struct te_op *o = &s->ops[index];
  if (o->d.kind != TECORE_OP_LINEAR || !s->bnd || !o->d.bias || !o->grad[1])
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: operation %zu (%s) is no Linear with a bias of "
                  "a built training sequence", fn, index, o->def.name);
  TE_ARG(db && db % 4 == 0, "%s: db (0x%llx) is NULL or not 4-byte aligned", fn,
         (unsigned long long)db);
  TE_CHECK(te_dev_check_range(db, o->out_cols * 4, fn, "db"));
  return te_accum_f32(s, o->grad[1], db, TECORE_DTYPE_F32, o->out_cols, stream);
}

tecore_result_t te_linear_wgrad_pending(tecore_seq_t *s, tecore_stream_t stream) {
  struct te_wgrad *p = &s->pend;
  if (!p->valid) return TECORE_SUCCESS;
  p->valid = 0;
  return wgrad(s, p->op, &p->dy, &p->x, p->x8_transpose, p->bias_grad, stream);
}

/* The FP8 backward of a Linear whose gradient is larger than the
 * columnwise scratch (an LM head, dy8_col_elems in ops_seq.c): dy's
 * columnwise copy first, in the rowwise buffer, for the weight gradient
 * (now, never deferred); then its rowwise copy over it for dgrad.  One
 * more read of dy (the amax, counted twice, is the same). */
static tecore_result_t linear_bwd_split(tecore_seq_t *s, const struct te_lin_bwd *a) {
  const struct te_op *o = &s->ops[a->op];
  tecore_stream_t st = a->stream;
  if ((a->dy8_ready && !a->dy8_col_make) || a->bias_grad || a->aux)
    return TE_ERR(TECORE_ERR_INTERNAL, "fuser: op %zu: the one-copy-at-a-time FP8 backward "
                  "takes no fused dact, bias or aux", a->op);
  struct tecore_tensor DY, DYc, X, W;
  TE_CHECK(te_dy8_tensor(s, a->op, &DY));
  if (a->dy8_row_given) DY.data = a->dy8_row_given;
  DYc = DY;
  DYc.data = 0;
  if (a->dy8_col_make) {
    /* the rowwise copy is the caller's (in dy8_row): the columnwise one its
     * byte transpose, in the caller's scratch, under the same scale_inv */
    DYc.columnwise_data = a->dy8_col_make;
    TE_CHECK(te_byte_transpose(DYc.columnwise_data, DY.data, o->out_rows, o->out_cols, st));
  } else {
    DYc.columnwise_data = DY.data;
    if (te_seq_block(s)) DYc.scale_inv = 0;   /* per-tensor: serves both copies */
    TE_CHECK(quantize_both(s, a->dy, &DYc, st));
  }
  TE_CHECK(te_bnd_f8_tensor(s, a->op, &X));
  TE_CHECK(wgrad(s, a->op, &DYc, &X, 1, 0, st));
  DY.columnwise_data = 0;
  DY.columnwise_scale_inv = 0;
  if (!a->dy8_col_make) TE_CHECK(quantize_both(s, a->dy, &DY, st));
  TE_CHECK(w8_for_dgrad(s, o, &W, st));
  struct tecore_gemm_opts dopt = {.C = a->C, .workspace = s->gemm_ws,
                                  .workspace_bytes = s->gemm_ws_bytes};
  return tecore_gemm(&DY, TECORE_GEMM_N, &W, TECORE_GEMM_N, a->dx, 1.0f, a->C ? 1.0f : 0.0f,
                     &dopt, st);
}

static tecore_result_t linear_bwd(tecore_seq_t *s, const struct te_lin_bwd *a);

tecore_result_t te_linear_bwd(tecore_seq_t *s, const struct te_lin_bwd *a) {
  if (s->cs_op != a->op) s->cs_op = SIZE_MAX;   /* sums left for another Linear: stale */
  tecore_result_t r = linear_bwd(s, a);
  s->cs_op = SIZE_MAX;
  return r;
}

static tecore_result_t linear_bwd(tecore_seq_t *s, const struct te_lin_bwd *a) {
  const struct te_op *o = &s->ops[a->op];
  tecore_dtype_t dt = s->cfg.dtype;
  tecore_stream_t st = a->stream;
  size_t rows = o->in_rows, in = o->in_cols, out = o->out_cols;
  struct tecore_tensor DY, X, W;
  int bias_done = 0, x8t = 0;
  const int f8 = te_op_fp8(s, a->op);
  if (f8 && rows * out > s->dy8_col_elems) return linear_bwd_split(s, a);
  if (f8) {
    TE_CHECK(te_dy8_tensor(s, a->op, &DY));
    if (a->dy8_row_given) DY.data = a->dy8_row_given;
    if (a->dy8_col_make) {
      if (a->bias_grad || a->aux)
        return TE_ERR(TECORE_ERR_INTERNAL, "fuser: op %zu: a given FP8 gradient takes no bias "
                      "or aux", a->op);
      DY.columnwise_data = a->dy8_col_make;
      TE_CHECK(te_byte_transpose(DY.columnwise_data, DY.data, rows, out, st));
    } else if (!a->dy8_ready) {
      if (a->bias_grad && te_seq_block(s)) {
        /* no block-scaled cast_transpose_dbias: the column sums, then both copies */
        TE_CHECK(te_bias_grad(s, a->dy, a->bias_grad, st));
        TE_CHECK(quantize_both(s, a->dy, &DY, st));
        bias_done = 1;
      } else if (a->bias_grad) {
        struct tecore_tensor db;
        te_vec(&db, TECORE_DTYPE_F32, out, s->dvec);
        TE_CHECK(tecore_cast_transpose_dbias(a->dy, &DY, &db, s->ws, s->ws_bytes, st));
        TE_CHECK(te_accum_f32(s, a->bias_grad, s->dvec, TECORE_DTYPE_F32, out, st));
        bias_done = 1;
      } else {
        TE_CHECK(quantize_both(s, a->dy, &DY, st));
      }
    }
    /* x's columnwise copy: made by wgrad (x8_both), the only reader */
    TE_CHECK(te_bnd_f8_tensor(s, a->op, &X));
    x8t = 1;
  } else if (dt == TECORE_DTYPE_F32) {
    /* the bias gradient from the F32 gradient itself, not its bf16 copy */
    if (a->bias_grad) {
      TE_CHECK(te_bias_grad(s, a->dy, a->bias_grad, st));
      bias_done = 1;
    }
    TE_CHECK(te_cast(s, s->dy16, TECORE_DTYPE_BF16, a->dy->data, dt, rows * out, st));
    te_t2d(&DY, TECORE_DTYPE_BF16, rows, out, s->dy16);
    te_t2d(&X, TECORE_DTYPE_BF16, rows, in, o->x16);
    te_t2d(&W, TECORE_DTYPE_BF16, out, in, o->w16);
  } else {
    DY = *a->dy;
    X = *a->x;
    te_t2d(&W, dt, out, in, te_w16_cast(s, a->op) ? o->w16 : o->param[0]);
  }
  tecore_devptr_t bgrad = !f8 && a->bias_grad && !bias_done ? a->bias_grad : 0;
  /* the norm's backward added dy's column sums into the bias gradient
   * (te_linear_norm_bwd) */
  if (bgrad && s->cs_done && s->cs_op == a->op && s->cs_src == DY.data) bgrad = 0;

  /* wgrad, accumulated into the F32 gradient: now, or (overlap) after the
   * next group's collective was queued on the side stream -- its
   * operands stay as they are until then: dy's FP8 and bf16 copies are
   * scratch only Linears write, and the gradients it reads are kept
   * apart from the collective's (ops_overlap.c) */
  if (s->defer_op == a->op && !s->pend.valid) {
    s->pend = (struct te_wgrad){.valid = 1, .op = a->op, .dy = DY, .x = X, .x8_transpose = x8t,
                                .bias_grad = bgrad};
  } else {
    TE_CHECK(wgrad(s, a->op, &DY, &X, x8t, bgrad, st));
  }

  /* dgrad */
  struct tecore_tensor dgb;
  tecore_dtype_t comp = f8 ? te_linear_companion(s) : dt;
  te_vec(&dgb, comp, in, s->dvec16);
  struct tecore_gemm_opts dopt = {.C = a->C, .aux = a->aux, .workspace = s->gemm_ws,
                                  .workspace_bytes = s->gemm_ws_bytes};
  if (a->aux) {
    if (a->aux_daux)   /* aux is gelu' itself (gelu_daux_fwd) */
      dopt.epilogue = a->dgelu_bias_grad ? TECORE_GEMM_EPI_DAUX_BGRAD : TECORE_GEMM_EPI_DAUX;
    else
      dopt.epilogue = a->dgelu_bias_grad ? TECORE_GEMM_EPI_DGELU_BGRAD : TECORE_GEMM_EPI_DGELU;
    if (a->dgelu_bias_grad) dopt.bias = &dgb;
  }
  if (f8) TE_CHECK(w8_for_dgrad(s, o, &W, st));   /* after wgrad: W is read by this GEMM only */
  TE_CHECK(tecore_gemm(&DY, TECORE_GEMM_N, &W, TECORE_GEMM_N, a->dx, 1.0f, a->C ? 1.0f : 0.0f,
                       &dopt, st));
  if (a->aux && a->dgelu_bias_grad)
    TE_CHECK(te_accum_f32(s, a->dgelu_bias_grad, s->dvec16, comp, in, st));
  return TECORE_SUCCESS;
}
