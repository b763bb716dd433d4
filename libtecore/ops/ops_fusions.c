/* SPDX-License-Identifier: Apache-2.0 */
/* ops_fusions.c -- libtecore's built-in fusion patterns: the table the
 * planner reads (name, pass, kinds, predicate, executor) and the executors.
 *
 * Forward
 *   rmsnorm+quantize / layernorm+quantize   [norm] or [norm, Quantize] before
 *       an FP8 Linear, delayed scaling: the norm kernel writes the Linear's
 *       FP8 input directly (rowwise; the columnwise copy is made in backward).
 *       Not under current scaling: the norm would take two passes over its
 *       input, and with the backward's columnwise copy that moves more bytes
 *       than the separate quantize-and-transpose does.
 *   gelu+quantize (relu, silu, qgelu, swiglu, geglu, reglu)   [activation]
 *       before an FP8 Linear, delayed scaling: likewise the activation
 *       kernel writes the Linear's FP8 input rowwise from its float
 *       result; the backward's columnwise copy is the byte transpose.
 *       Instead of the activation's 16-bit output written and read back
 *       by a cast+transpose that writes both copies: an MLP's widest
 *       tensor, [rows][ffn], half the bytes (nothing in the backward
 *       reads the activation's output; its input is what dact reads).
 *   linear+bias, linear+gelu, linear+bias+gelu, linear+add, linear+bias+add
 *       [Linear, (Bias), (GELU | AddExtraInput)]: one GEMM whose epilogue
 *       adds the bias, applies GELU (the pre-activation saved as aux: the
 *       GELU's input boundary) or adds the residual through C with beta = 1.
 *       Not the GELU ones for an FP8 Linear under the block recipe: its
 *       block-scaled GEMM takes no GELU epilogue.
 *   rope+quantize, attention+quantize / attention_fp8   [RoPE], [attention]
 *       (inference sequences, delayed scaling; ops_attn.c): RoPE writes E4M3
 *       Q, K and V (tecore_rope_fwd_fp8; its BF16 output is left unwritten)
 *       and attention reads them, writing O as the next FP8 Linear's E4M3
 *       input at its scale, its amax counted (attention+quantize), or in
 *       the dtype (attention_fp8).  Not in training: attention's backward
 *       takes BF16/F16 only and reads Q, K, V and O.  The two are planned
 *       together or not at all (te_plan_build).
 * Backward
 *   dgelu+dbias+cast_transpose (and drelu/dsilu/dqgelu, with or without the
 *       bias)   [Linear, (Bias), act] with FP8: one kernel computes
 *       dy * act'(x), its column sums (the bias gradient) and the Linear's
 *       FP8 gradient in both layouts; then the Linear's two GEMMs.  Per-
 *       tensor recipes only (the kernel writes no 1x128 blocks).
 *   dswiglu+cast_transpose (dgeglu, dreglu)   [Linear, gated activation]
 *       with FP8 (per-tensor), the Linear without a bias: the gated
 *       activation's backward writes the Linear's FP8 gradient rowwise
 *       from its float result (tecore_act_bwd with an FP8 output), the
 *       columnwise copy is its byte transpose (one per-tensor scale:
 *       the same codes); then the Linear's two GEMMs.  Instead of the
 *       16-bit [rows][2 ffn] gradient written and read back by a
 *       cast+transpose (a Llama MLP's widest tensor).
 *   dgrad+dgelu+dbias / dgrad+dgelu   [Linear, (Bias), GELU, Linear] without
 *       FP8: the second Linear's dgrad GEMM applies dGELU (aux = the saved
 *       pre-activation) and sums the first Linear's bias gradient.
 *   rmsnorm_bwd_add, layernorm_bwd_add   [MakeExtraOutput, RMSNorm] or
 *       [MakeExtraOutput, LayerNorm]: the norm's dx plus the residual's
 *       gradient in one kernel (a pre-norm block's every norm: the add of
 *       the fork's two gradients no longer writes dx and reads it back).
 *   linear_dgrad+add  [MakeExtraOutput, Linear]: the dgrad GEMM accumulates
 *       into the residual's gradient (C = it, beta = 1). */
#include "ops/ops_internal.h"
#include "norm/norm_internal.h"
#include "transpose/transpose_internal.h"

#include <string.h>

static const struct te_op *op_at(const tecore_seq_t *s, size_t i) { return &s->ops[i]; }

/* ---- predicates ------------------------------------------------------------------------ */

static int fp8_delayed(const tecore_seq_t *s, const struct tecore_recipe *r) {
  return s->fp8_run && r && r->kind == TECORE_RECIPE_DELAYED;
}

/* ctx bits of the norm+quantize patterns */
#define NQ_QUANTIZE 0x1u    /* [norm, Quantize]: a Quantize op between the norm and the GEMM */
#define NQ_LAYERNORM 0x2u   /* the norm is a LayerNorm (gamma and beta) */

static int p_norm_q(const tecore_seq_t *s, size_t i, const struct tecore_recipe *r, void *ctx) {
  size_t lin = i + 1 + ((uintptr_t)ctx & NQ_QUANTIZE);
  return fp8_delayed(s, r) && lin < s->nops && te_op_fp8(s, lin);
}

/* [activation] before an FP8 Linear under delayed scaling */
static int p_act_q(const tecore_seq_t *s, size_t i, const struct tecore_recipe *r, void *ctx) {
  (void)ctx;
  return fp8_delayed(s, r) && i + 1 < s->nops && te_op_fp8(s, i + 1);
}

/* ctx bits of the Linear patterns */
#define L_OWN_BIAS 0x1u     /* the Linear has its own bias */
#define L_NO_BIAS 0x2u      /* the Linear has none */
#define L_GELU 0x4u         /* needs an aux epilogue */
#define L_BIAS_EPI 0x8u     /* needs a bias epilogue */
#define L_BIAS_OP 0x10u     /* a Bias op follows the Linear in the pattern */

/* cuBLASLt's GEMMs with a GELU aux epilogue (forward, and dGELU in the
 * dgrad) ran on an H100 at 255 TFLOP/s where the same GEMM without it ran
 * at 660 (te-gpt --profile, GPT-2 124M BF16: bench/2026-11-23.md, session 13),
 * also after measuring every candidate algorithm; 0 plans the GELU as its
 * own kernels instead (the GEMM keeps a bias epilogue). */
TE_PARAM_INT(ops_gelu_epilogue, "TECORE_OPS_GELU_EPILOGUE", 1, 0, 1,
             "1: a Linear followed by GELU runs the GELU in the GEMM's epilogue (forward: "
             "bias + GELU with the pre-activation saved as aux; backward: the next Linear's "
             "dgrad with dGELU); 0: the GELU and its gradient as separate kernels (as "
             "TECORE_SEQ_NO_GELU_EPILOGUE)")

/* The sequence's flag or the process's tunable turns the epilogue off
 * (ops_internal.h). */
int te_gelu_epilogue(const tecore_seq_t *s) {
  return !(s->cfg.flags & TECORE_SEQ_NO_GELU_EPILOGUE) && tecore_tunable_int(&ops_gelu_epilogue);
}

static int p_linear(const tecore_seq_t *s, size_t i, const struct tecore_recipe *r, void *ctx) {
  (void)r;
  unsigned f = (unsigned)(uintptr_t)ctx;
  if ((f & L_GELU) && !te_gelu_epilogue(s)) return 0;
  const struct te_op *l = op_at(s, i);
  if ((f & L_OWN_BIAS) && !l->d.bias) return 0;
  if ((f & L_NO_BIAS) && l->d.bias) return 0;
  int comp_ok = te_linear_companion(s) == s->cfg.dtype;
  if ((f & (L_GELU | L_BIAS_EPI)) && !comp_ok) return 0;
  if ((f & L_GELU) && l->out_cols % 8) return 0;
  /* block-scaled GEMMs take the bias epilogue, not GELU's (te/gemm.h) */
  if ((f & L_GELU) && te_seq_block(s) && te_op_fp8(s, i)) return 0;
  return 1;
}

static int p_dact(const tecore_seq_t *s, size_t i, const struct tecore_recipe *r, void *ctx) {
  (void)r;
  unsigned f = (unsigned)(uintptr_t)ctx;
  const struct te_op *l = op_at(s, i);
  if ((f & L_OWN_BIAS) && !l->d.bias) return 0;
  if ((f & L_NO_BIAS) && l->d.bias) return 0;
  /* the fused kernel writes per-tensor FP8 only */
  return te_op_fp8(s, i) && !te_seq_block(s);
}

static int p_dgrad_dgelu(const tecore_seq_t *s, size_t i, const struct tecore_recipe *r,
                         void *ctx) {
  (void)r;
  unsigned f = (unsigned)(uintptr_t)ctx;
  const struct te_op *l = op_at(s, i);
  if ((f & L_OWN_BIAS) && !l->d.bias) return 0;
  if ((f & L_NO_BIAS) && l->d.bias) return 0;
  if (te_op_fp8(s, i) || l->out_cols % 8 || !te_gelu_epilogue(s)) return 0;
  /* the second Linear's dgrad GEMM takes the dGELU epilogue: not in FP8 either */
  for (size_t k = i + 1; k < s->nops && k <= i + 3; k++)
    if (op_at(s, k)->fp8 & TE_KIND_GEMM) return !te_op_fp8(s, k);
  return 1;
}

/* rope+quantize [RoPE] / attention+quantize [attention] (inference, delayed
 * scaling, ops_attn.c): prepare_fp8 gave the attention FP8 Q/K/V entries;
 * ctx 1: O as the next FP8 Linear's input (that pattern's name), 0: O in
 * the dtype ("attention_fp8") */
static int p_rope_q(const tecore_seq_t *s, size_t i, const struct tecore_recipe *r, void *ctx) {
  (void)ctx;
  return fp8_delayed(s, r) && i + 1 < s->nops && s->ops[i + 1].qkv8;
}

static int p_attn_q(const tecore_seq_t *s, size_t i, const struct tecore_recipe *r, void *ctx) {
  if (!fp8_delayed(s, r) || !s->ops[i].qkv8) return 0;
  return te_attn_fp8_takes(s, i, 1) == ((uintptr_t)ctx != 0);
}

/* ---- forward executors ------------------------------------------------------------------- */

static tecore_result_t x_norm_q(const struct tecore_seq_exec *x) {
  tecore_seq_t *s = x->seq;
  const struct te_op *o = op_at(s, x->first);
  struct tecore_tensor y8, g, b;
  TE_CHECK(te_bnd_f8_tensor(s, x->first + x->count, &y8));
  y8.columnwise_data = 0;
  te_vec(&g, s->cfg.dtype, o->in_cols, o->param[0]);
  if ((uintptr_t)x->ctx & NQ_LAYERNORM) {
    te_vec(&b, s->cfg.dtype, o->in_cols, o->param[1]);
    return tecore_layernorm_fwd(&x->act[0], &g, &b, o->d.epsilon, o->d.norm_flags, &y8,
                                o->saved[1], o->saved[0], x->stream);
  }
  return tecore_rmsnorm_fwd(&x->act[0], &g, o->d.epsilon, o->d.norm_flags, &y8, o->saved[0],
                            x->stream);
}

static tecore_result_t x_act_q(const struct tecore_seq_exec *x) {
  tecore_seq_t *s = x->seq;
  struct tecore_tensor y8;
  TE_CHECK(te_bnd_f8_tensor(s, x->first + 1, &y8));
  y8.columnwise_data = 0;
  return tecore_act_fwd(te_op_act(op_at(s, x->first)), &x->act[0], &y8, 0, x->stream);
}

static tecore_result_t x_linear_epi(const struct tecore_seq_exec *x) {
  tecore_seq_t *s = x->seq;
  const struct te_op *l = op_at(s, x->first);
  struct te_lin_fwd a = {.op = x->first, .x = &x->act[0], .y = &x->act[x->count],
                         .bias = l->d.bias ? l->param[1] : 0, .noop_flag = x->noop_flag,
                         .stream = x->stream};
  unsigned f = (unsigned)(uintptr_t)x->ctx;
  size_t k = 1;
  if (f & L_BIAS_OP) {
    a.bias = op_at(s, x->first + k)->param[0];
    k++;
  }
  struct tecore_tensor C;
  if (k < x->count) {   /* a GELU epilogue, or the residual's add */
    const struct te_op *e = op_at(s, x->first + k);
    if (f & L_GELU) {
      a.aux = &x->act[k];
      a.aux_dead = te_seq_infer(s);   /* no backward reads the pre-activation */
    } else {
      te_t2d(&C, s->cfg.dtype, x->act[k].shape[0], x->act[k].shape[1],
             te_slot_value(s, e->pair));
      a.C = &C;
    }
  }
  return te_linear_fwd(s, &a);
}

/* ---- backward executors ----------------------------------------------------------------- */

static tecore_result_t x_dact_ct(const struct tecore_seq_exec *x) {
  tecore_seq_t *s = x->seq;
  const struct te_op *l = op_at(s, x->first);
  tecore_devptr_t bgrad = l->d.bias ? l->grad[1] : 0;
  size_t k = 1;
  if ((uintptr_t)x->ctx & L_BIAS_OP) {
    bgrad = op_at(s, x->first + k)->grad[0];
    k++;
  }
  const struct te_op *act = op_at(s, x->first + k);
  struct tecore_tensor dy8, db;
  TE_CHECK(te_dy8_tensor(s, x->first, &dy8));
  te_vec(&db, TECORE_DTYPE_F32, l->out_cols, s->dvec);
  TE_CHECK(tecore_dact_dbias_cast_transpose(te_op_act(act), &x->grad[x->count],
                                            &x->act[k], &dy8, bgrad ? &db : NULL, s->ws,
                                            s->ws_bytes, x->stream));
  if (bgrad) TE_CHECK(te_accum_f32(s, bgrad, s->dvec, TECORE_DTYPE_F32, l->out_cols, x->stream));
  struct te_lin_bwd a = {.op = x->first, .x = &x->act[0], .dy8_ready = 1, .dx = &x->grad[0],
                         .stream = x->stream};
  return te_linear_bwd(s, &a);
}

/* [Linear (no bias), gated activation]: see the file's head */
static tecore_result_t x_dgact_ct(const struct tecore_seq_exec *x) {
  tecore_seq_t *s = x->seq;
  const struct te_op *l = op_at(s, x->first), *act = op_at(s, x->first + 1);
  struct tecore_tensor dy8;
  TE_CHECK(te_dy8_tensor(s, x->first, &dy8));
  if (!te_scaling_per_tensor(dy8.scaling) || dy8.columnwise_scale_inv)
    return TE_ERR(TECORE_ERR_INTERNAL, "fuser: op %zu: the gated backward's FP8 gradient is "
                  "transposed only under one per-tensor scale (scaling %s)",
                  x->first, tecore_scaling_name(dy8.scaling));
  struct tecore_tensor row = dy8;
  row.columnwise_data = 0;
  TE_CHECK(tecore_act_bwd(te_op_act(act), &x->grad[2], &x->act[1], &row, x->stream));
  TE_CHECK(te_byte_transpose(dy8.columnwise_data, dy8.data, l->out_rows, l->out_cols, x->stream));
  struct te_lin_bwd a = {.op = x->first, .x = &x->act[0], .dy8_ready = 1, .dx = &x->grad[0],
                         .stream = x->stream};
  return te_linear_bwd(s, &a);
}

static tecore_result_t x_dgrad_dgelu(const struct tecore_seq_exec *x) {
  tecore_seq_t *s = x->seq;
  const struct te_op *l1 = op_at(s, x->first);
  tecore_devptr_t b1 = l1->d.bias ? l1->grad[1] : 0;
  size_t k = 1;
  if ((uintptr_t)x->ctx & L_BIAS_OP) {
    b1 = op_at(s, x->first + k)->grad[0];
    k++;
  }
  size_t l2i = x->first + k + 1;
  const struct te_op *l2 = op_at(s, l2i);
  struct te_lin_bwd a2 = {.op = l2i, .x = &x->act[k + 1], .dy = &x->grad[k + 2],
                          .bias_grad = l2->d.bias ? l2->grad[1] : 0, .dx = &x->grad[k],
                          .aux = &x->act[k], .aux_daux = l1->gelu_daux, .dgelu_bias_grad = b1,
                          .stream = x->stream};
  TE_CHECK(te_linear_bwd(s, &a2));
  struct te_lin_bwd a1 = {.op = x->first, .x = &x->act[0], .dy = &x->grad[k], .dx = &x->grad[0],
                          .stream = x->stream};
  return te_linear_bwd(s, &a1);
}

static tecore_result_t x_rmsnorm_bwd_add(const struct tecore_seq_exec *x) {
  tecore_seq_t *s = x->seq;
  const struct te_op *m = op_at(s, x->first), *o = op_at(s, x->first + 1);
  struct tecore_tensor g, dg, extra, dx = x->grad[0];
  const tecore_devptr_t og = te_grad_out(s, o->grad[0], s->dvec);
  te_vec(&g, s->cfg.dtype, o->in_cols, o->param[0]);
  te_vec(&dg, TECORE_DTYPE_F32, o->in_cols, og);
  te_t2d(&extra, s->cfg.dtype, o->in_rows, o->in_cols, te_slot_grad(s, m->pair));
  struct te_norm_bwd_call c = {.dy = &x->grad[2], .x = &x->act[1], .gamma = &g,
                               .rsigma = o->saved[0], .extra = &extra,
                               .flags = o->d.norm_flags, .dx = &dx, .dgamma = &dg,
                               .workspace = s->ws, .workspace_bytes = s->ws_bytes,
                               .fn = "tecore_rmsnorm_bwd_add"};
  TE_CHECK(te_linear_norm_bwd(s, x->first, &c, x->stream));
  return te_grad_add(o->grad[0], og, o->in_cols, x->stream);
}

static tecore_result_t x_layernorm_bwd_add(const struct tecore_seq_exec *x) {
  tecore_seq_t *s = x->seq;
  const struct te_op *m = op_at(s, x->first), *o = op_at(s, x->first + 1);
  struct tecore_tensor g, dg, db, extra, dx = x->grad[0];
  const tecore_devptr_t og = te_grad_out(s, o->grad[0], s->dvec),
                        ob = te_grad_out(s, o->grad[1], s->dvec2);
  te_vec(&g, s->cfg.dtype, o->in_cols, o->param[0]);
  te_vec(&dg, TECORE_DTYPE_F32, o->in_cols, og);
  te_vec(&db, TECORE_DTYPE_F32, o->in_cols, ob);
  te_t2d(&extra, s->cfg.dtype, o->in_rows, o->in_cols, te_slot_grad(s, m->pair));
  struct te_norm_bwd_call c = {.ln = 1, .dy = &x->grad[2], .x = &x->act[1], .gamma = &g,
                               .mu = o->saved[1], .rsigma = o->saved[0], .extra = &extra,
                               .flags = o->d.norm_flags, .dx = &dx, .dgamma = &dg, .dbeta = &db,
                               .workspace = s->ws, .workspace_bytes = s->ws_bytes,
                               .fn = "tecore_layernorm_bwd_add"};
  TE_CHECK(te_linear_norm_bwd(s, x->first, &c, x->stream));
  TE_CHECK(te_grad_add(o->grad[0], og, o->in_cols, x->stream));
  return te_grad_add(o->grad[1], ob, o->in_cols, x->stream);
}

static tecore_result_t x_dgrad_add(const struct tecore_seq_exec *x) {
  tecore_seq_t *s = x->seq;
  const struct te_op *m = op_at(s, x->first), *l = op_at(s, x->first + 1);
  struct tecore_tensor C;
  te_t2d(&C, s->cfg.dtype, l->in_rows, l->in_cols, te_slot_grad(s, m->pair));
  struct te_lin_bwd a = {.op = x->first + 1, .x = &x->act[1], .dy = &x->grad[2],
                         .bias_grad = l->d.bias ? l->grad[1] : 0, .dx = &x->grad[0], .C = &C,
                         .stream = x->stream};
  return te_linear_bwd(s, &a);
}

/* ---- the table ----------------------------------------------------------------------------- */

#define FWD TECORE_SEQ_FORWARD
#define BWD TECORE_SEQ_BACKWARD
#define K(...) {__VA_ARGS__}
#define CTX(v) ((void *)(uintptr_t)(v))
#define PAT(id, nm, dr, n, kk, pred, fnx, ctxv, prio)                                   \
  {.def = {.name = nm, .dir = dr, .nops = n, .kinds = kk, .applies = pred, .run = fnx,  \
           .ctx = ctxv, .priority = prio},                                                 \
   .builtin_id = id}

#define L TECORE_OP_LINEAR
#define B TECORE_OP_BIAS
#define G TECORE_OP_GELU
#define A TECORE_OP_ADD_EXTRA_INPUT
#define M TECORE_OP_MAKE_EXTRA_OUTPUT
#define Q TECORE_OP_QUANTIZE
#define RMS TECORE_OP_RMSNORM
#define LN TECORE_OP_LAYERNORM

#define DACT(actk, nm_b, nm)                                                                 \
  PAT(TE_FUSE_DACT_CT, nm_b, BWD, 2, K(L, actk), p_dact, x_dact_ct, CTX(L_OWN_BIAS), 20),    \
  PAT(TE_FUSE_DACT_CT, nm_b, BWD, 3, K(L, B, actk), p_dact, x_dact_ct,                      \
      CTX(L_NO_BIAS | L_BIAS_OP), 20),                                                       \
  PAT(TE_FUSE_DACT_CT, nm, BWD, 2, K(L, actk), p_dact, x_dact_ct, CTX(L_NO_BIAS), 20)

/* [activation] writing the next FP8 Linear's input; [Linear, gated
 * activation] writing the Linear's FP8 gradient */
#define ACTQ(actk, nm) PAT(TE_FUSE_ACT_QUANTIZE, nm, FWD, 1, K(actk), p_act_q, x_act_q, CTX(0), 10)
#define DGACT(actk, nm)                                                                      \
  PAT(TE_FUSE_DGACT_CT, nm, BWD, 2, K(L, actk), p_dact, x_dgact_ct, CTX(L_NO_BIAS), 20)

const struct te_fusion te_builtin_fusions[] = {
    PAT(TE_FUSE_NORM_QUANTIZE, "rmsnorm+quantize", FWD, 1, K(RMS), p_norm_q, x_norm_q, CTX(0), 10),
    PAT(TE_FUSE_NORM_QUANTIZE, "layernorm+quantize", FWD, 1, K(LN), p_norm_q, x_norm_q,
        CTX(NQ_LAYERNORM), 10),
    PAT(TE_FUSE_NORM_Q_QUANTIZE, "rmsnorm+quantize", FWD, 2, K(RMS, Q), p_norm_q, x_norm_q,
        CTX(NQ_QUANTIZE), 10),
    PAT(TE_FUSE_NORM_Q_QUANTIZE, "layernorm+quantize", FWD, 2, K(LN, Q), p_norm_q, x_norm_q,
        CTX(NQ_QUANTIZE | NQ_LAYERNORM), 10),
    ACTQ(G, "gelu+quantize"), ACTQ(TECORE_OP_RELU, "relu+quantize"),
    ACTQ(TECORE_OP_SILU, "silu+quantize"), ACTQ(TECORE_OP_QGELU, "qgelu+quantize"),
    ACTQ(TECORE_OP_SWIGLU, "swiglu+quantize"), ACTQ(TECORE_OP_GEGLU, "geglu+quantize"),
    ACTQ(TECORE_OP_REGLU, "reglu+quantize"),
    PAT(TE_FUSE_ROPE_Q, "rope+quantize", FWD, 1, K(TECORE_OP_ROPE), p_rope_q, te_rope_q_fwd,
        CTX(0), 10),
    {.def = {.name = "attention+quantize", .dir = FWD, .nops = 1, .kinds = {TECORE_OP_ATTENTION},
             .applies = p_attn_q, .run = te_attn_q_fwd, .ctx = CTX(1), .priority = 10,
             .workspace = te_attn_q_ws},
     .builtin_id = TE_FUSE_ATTN_Q},
    {.def = {.name = "attention_fp8", .dir = FWD, .nops = 1, .kinds = {TECORE_OP_ATTENTION},
             .applies = p_attn_q, .run = te_attn_q_fwd, .ctx = CTX(0), .priority = 10,
             .workspace = te_attn_q_ws},
     .builtin_id = TE_FUSE_ATTN_Q},
    PAT(TE_FUSE_LINEAR_EPI, "linear+bias", FWD, 2, K(L, B), p_linear, x_linear_epi,
        CTX(L_NO_BIAS | L_BIAS_EPI | L_BIAS_OP), 10),
    PAT(TE_FUSE_LINEAR_EPI, "linear+bias+gelu", FWD, 2, K(L, G), p_linear, x_linear_epi,
        CTX(L_OWN_BIAS | L_GELU | L_BIAS_EPI), 10),
    PAT(TE_FUSE_LINEAR_EPI, "linear+bias+gelu", FWD, 3, K(L, B, G), p_linear, x_linear_epi,
        CTX(L_NO_BIAS | L_GELU | L_BIAS_EPI | L_BIAS_OP), 10),
    PAT(TE_FUSE_LINEAR_EPI, "linear+gelu", FWD, 2, K(L, G), p_linear, x_linear_epi,
        CTX(L_NO_BIAS | L_GELU), 10),
    PAT(TE_FUSE_LINEAR_EPI, "linear+bias+add", FWD, 2, K(L, A), p_linear, x_linear_epi,
        CTX(L_OWN_BIAS | L_BIAS_EPI), 10),
    PAT(TE_FUSE_LINEAR_EPI, "linear+bias+add", FWD, 3, K(L, B, A), p_linear, x_linear_epi,
        CTX(L_NO_BIAS | L_BIAS_EPI | L_BIAS_OP), 10),
    PAT(TE_FUSE_LINEAR_EPI, "linear+add", FWD, 2, K(L, A), p_linear, x_linear_epi,
        CTX(L_NO_BIAS), 10),
    DACT(TECORE_OP_GELU, "dgelu+dbias+cast_transpose", "dgelu+cast_transpose"),
    DACT(TECORE_OP_RELU, "drelu+dbias+cast_transpose", "drelu+cast_transpose"),
    DACT(TECORE_OP_SILU, "dsilu+dbias+cast_transpose", "dsilu+cast_transpose"),
    DACT(TECORE_OP_QGELU, "dqgelu+dbias+cast_transpose", "dqgelu+cast_transpose"),
    DGACT(TECORE_OP_SWIGLU, "dswiglu+cast_transpose"),
    DGACT(TECORE_OP_GEGLU, "dgeglu+cast_transpose"),
    DGACT(TECORE_OP_REGLU, "dreglu+cast_transpose"),
    PAT(TE_FUSE_DGRAD_DGELU, "dgrad+dgelu+dbias", BWD, 3, K(L, G, L), p_dgrad_dgelu,
        x_dgrad_dgelu, CTX(L_OWN_BIAS), 20),
    PAT(TE_FUSE_DGRAD_DGELU, "dgrad+dgelu+dbias", BWD, 4, K(L, B, G, L), p_dgrad_dgelu,
        x_dgrad_dgelu, CTX(L_NO_BIAS | L_BIAS_OP), 20),
    PAT(TE_FUSE_DGRAD_DGELU, "dgrad+dgelu", BWD, 3, K(L, G, L), p_dgrad_dgelu, x_dgrad_dgelu,
        CTX(L_NO_BIAS), 20),
    PAT(TE_FUSE_NORM_BWD_ADD, "rmsnorm_bwd_add", BWD, 2, K(M, RMS), NULL, x_rmsnorm_bwd_add,
        NULL, 10),
    PAT(TE_FUSE_NORM_BWD_ADD, "layernorm_bwd_add", BWD, 2, K(M, LN), NULL, x_layernorm_bwd_add,
        NULL, 10),
    PAT(TE_FUSE_DGRAD_ADD, "linear_dgrad+add", BWD, 2, K(M, L), NULL, x_dgrad_add, NULL, 10),
};
const size_t te_builtin_fusion_count = TE_ARRAY_SIZE(te_builtin_fusions);
