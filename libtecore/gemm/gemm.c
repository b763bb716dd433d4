/* SPDX-License-Identifier: Apache-2.0 */
/* gemm.c -- tecore_gemm's public entry: every argument validated (shapes,
 * types per operand, scales, which copy of each FP8 operand is read,
 * cuBLASLt's layout and alignment rules, the epilogue's buffers), reduced
 * to a struct te_gemm_problem, then handed to the backend's gemm op
 * (device_ops.h): cuBLASLt on cuda (cuda/cuda_gemm.c), the reference GEMM
 * on vdev (gemm_vdev.c).
 *
 * The rules are checked here, once, for both backends: a call that fails
 * on a GPU because of a cuBLASLt constraint fails the same way on vdev,
 * so code tested on vdev does not meet new errors on a GPU.  See te/gemm.h
 * for the rules themselves. */
#include "gemm/gemm_problem.h"
#include "device/device_ops.h"
#include "profile_hook.h"
#include "fp8/fp8_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char fn[] = "tecore_gemm";

TE_EXPORT const char *tecore_gemm_epilogue_name(tecore_gemm_epilogue_t e) {
  switch (e) {
  case TECORE_GEMM_EPI_NONE: return "none";
  case TECORE_GEMM_EPI_BIAS: return "bias";
  case TECORE_GEMM_EPI_GELU_AUX: return "gelu_aux";
  case TECORE_GEMM_EPI_BIAS_GELU_AUX: return "bias_gelu_aux";
  case TECORE_GEMM_EPI_DGELU: return "dgelu";
  case TECORE_GEMM_EPI_DGELU_BGRAD: return "dgelu_bgrad";
  case TECORE_GEMM_EPI_BGRAD: return "bgrad";
  case TECORE_GEMM_EPI_GELU: return "gelu";
  case TECORE_GEMM_EPI_BIAS_GELU: return "bias_gelu";
  case TECORE_GEMM_EPI_GELU_DAUX: return "gelu_daux";
  case TECORE_GEMM_EPI_BIAS_GELU_DAUX: return "bias_gelu_daux";
  case TECORE_GEMM_EPI_DAUX: return "daux";
  case TECORE_GEMM_EPI_DAUX_BGRAD: return "daux_bgrad";
  default: return "?";
  }
}

static int is_16bit(tecore_dtype_t d) { return d == TECORE_DTYPE_BF16 || d == TECORE_DTYPE_F16; }

static tecore_result_t check_align(tecore_devptr_t p, size_t align, const char *arg,
                                   const char *field, const char *why) {
  if (p % align)
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s: %s (0x%llx) is not aligned to %zu bytes%s%s", fn,
                  arg, field, (unsigned long long)p, align, why ? ": " : "", why ? why : "");
  return TECORE_SUCCESS;
}

/* An operand's type and scaling, before its orientation is known. */
static tecore_result_t check_operand_kind(const struct tecore_tensor *t, const char *arg) {
  if (!is_16bit(t->dtype) && !te_dtype_is_fp8(t->dtype))
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s: dtype %s is not bf16, f16, e4m3 or e5m2", fn, arg,
                  tecore_dtype_name(t->dtype));
  if (te_dtype_is_fp8(t->dtype)) {
    switch (t->scaling) {
    case TECORE_SCALING_DELAYED:
    case TECORE_SCALING_CURRENT:
    case TECORE_SCALING_MXFP8:
    case TECORE_SCALING_BLOCK_1X128:
    case TECORE_SCALING_BLOCK_128X128: break;
    case TECORE_SCALING_NONE:
      return TE_ERR(TECORE_ERR_INVALID,
                    "%s: %s: an FP8 operand needs its scales (scaling delayed, current, "
                    "mxfp8, block1x128 or block128x128), not scaling none", fn, arg);
    default:
      return TE_ERR(TECORE_ERR_NOT_SUPPORTED,
                    "%s: %s: %s scaling is not supported by the GEMM yet (per-tensor and "
                    "mxfp8 are)", fn, arg, tecore_scaling_name(t->scaling));
    }
  }
  return TECORE_SUCCESS;
}

/* Picks the copy of operand t that runs along k and fills *o.
 * kmajor_is_rowwise: 1 when the rowwise data already has k contiguous
 * (A with transa = N, B with transb = T).  rows_eff is m (for A) or n (for
 * B): the operand's extent other than k. */
static tecore_result_t select_operand(const struct tecore_tensor *t, const char *arg,
                                      const char *opname, int kmajor_is_rowwise,
                                      size_t rows_eff, size_t k, struct te_gemm_operand *o) {
  memset(o, 0, sizeof *o);
  o->dtype = t->dtype;
  if (is_16bit(t->dtype)) {
    /* any layout: the rowwise data with strides */
    if (!t->data)
      return TE_ERR(TECORE_ERR_INVALID, "%s: %s: data is 0 (bf16/f16 operands are read from "
                    "their rowwise data)", fn, arg);
    TE_CHECK(te_tensor_check(t, TECORE_TENSOR_ROWWISE, fn, arg));
    o->data = t->data;
    o->scale_kind = TE_GEMM_SCALE_NONE;
    if (kmajor_is_rowwise) {
      o->si = (int64_t)k;
      o->sk = 1;
    } else {
      o->si = 1;
      o->sk = (int64_t)rows_eff;
    }
    o->kmajor = kmajor_is_rowwise;
    return TECORE_SUCCESS;
  }
  int col = !kmajor_is_rowwise;
  int mx = t->scaling == TECORE_SCALING_MXFP8;
  if (col && !t->columnwise_data)
    return TE_ERR(TECORE_ERR_INVALID,
                  "%s: %s: columnwise_data is 0: an FP8 operand with %s is read from its "
                  "columnwise copy (k-major, the TN layout cuBLASLt's FP8 GEMM takes); "
                  "quantize it with columnwise output or change %s", fn, arg, opname, opname);
  if (!col && !t->data)
    return TE_ERR(TECORE_ERR_INVALID,
                  "%s: %s: data is 0: an FP8 operand with %s is read from its rowwise data",
                  fn, arg, opname);
  TE_CHECK(te_tensor_check(t, col ? TECORE_TENSOR_COLUMNWISE : TECORE_TENSOR_ROWWISE, fn, arg));
  o->data = col ? t->columnwise_data : t->data;
  TE_CHECK(check_align(o->data, 16, arg, col ? "columnwise_data" : "data",
                       "FP8 GEMM operands must be 16-byte aligned"));
  o->columnwise = col;
  if (te_scaling_block(t->scaling)) {
    /* blocks: the columnwise copy is the transpose, [rows_eff][k], with
     * its own scales ([rows_eff][cdiv(k,128)] for 1x128, in blocks of
     * rows for 128x128): te/tensor.h */
    const int two = t->scaling == TECORE_SCALING_BLOCK_128X128;
    o->scale_kind = two ? TE_GEMM_SCALE_BLK2D : TE_GEMM_SCALE_BLK1D;
    o->scale_inv = col ? t->columnwise_scale_inv : t->scale_inv;
    TE_CHECK(check_align(o->scale_inv, 4, arg, col ? "columnwise_scale_inv" : "scale_inv", NULL));
    o->si = (int64_t)k;
    o->sk = 1;
    o->kmajor = 1;
    o->s_si = (int64_t)te_cdiv(k, 128);
    o->s_sk = 1;
    return TECORE_SUCCESS;
  }
  if (!mx) {
    /* per-tensor: the columnwise copy is the transpose, [rows_eff][k] */
    o->scale_kind = TE_GEMM_SCALE_TENSOR;
    o->scale_inv = col && t->columnwise_scale_inv ? t->columnwise_scale_inv : t->scale_inv;
    o->si = (int64_t)k;
    o->sk = 1;
    o->kmajor = 1;
    return TECORE_SUCCESS;
  }
  /* MXFP8: the columnwise copy keeps the logical layout [k][rows_eff] with
   * E8M0 blocks along its columns (along k). */
  o->scale_kind = TE_GEMM_SCALE_MX;
  size_t kb = te_cdiv(k, 32);
  o->kmajor = !col;
  if (!col) {
    o->scale_inv = t->scale_inv;
    o->si = (int64_t)k;
    o->sk = 1;
    o->s_si = (int64_t)kb;
    o->s_sk = 1;
  } else {
    o->scale_inv = t->columnwise_scale_inv;
    o->si = 1;
    o->sk = (int64_t)rows_eff;
    o->s_si = 1;
    o->s_sk = (int64_t)rows_eff;
  }
  return TECORE_SUCCESS;
}

/* A [m][n] companion tensor (C, aux): shape, dtype, data, alignment. */
static tecore_result_t check_mn(const struct tecore_tensor *t, const char *arg, size_t m,
                                size_t n, tecore_dtype_t want, const char *why, size_t align) {
  TE_CHECK(te_tensor_check(t, TECORE_TENSOR_ROWWISE, fn, arg));
  size_t r, c;
  te_tensor_view(t, &r, &c);
  if (r != m || c != n)
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s: its 2-D view is [%zu][%zu], not [m][n] = [%zu][%zu]",
                  fn, arg, r, c, m, n);
  if (t->dtype != want)
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s: dtype %s, expected %s (%s)", fn, arg,
                  tecore_dtype_name(t->dtype), tecore_dtype_name(want), why);
  if (t->scaling != TECORE_SCALING_NONE)
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s: scaling must be none", fn, arg);
  TE_CHECK(check_align(t->data, align, arg, "data", align == 16 ? "FP8 GEMMs need 16-byte "
                       "aligned matrices" : NULL));
  return TECORE_SUCCESS;
}

/* What the checks learn on the way to the problem: the problem itself, and
 * what later checks need to word their messages. */
struct gemm_call {
  struct te_gemm_problem p;
  int d_fp8;              /* D is FP8 */
  int blk;                /* the operands are block-scaled (1x128 / 128x128) */
  size_t align;           /* 16 for FP8 GEMMs; 0: the element size (te_tensor_check's rule) */
  const char *comp_why;   /* why bias and aux have the type they must have */
};

/* The call's scalars, enums and that every tensor is one. */
static tecore_result_t check_call(const struct tecore_tensor *A, tecore_gemm_op_t transa,
                                  const struct tecore_tensor *B, tecore_gemm_op_t transb,
                                  const struct tecore_tensor *D, float alpha, float beta,
                                  const struct tecore_gemm_opts *opts) {
  TE_ARG(transa == TECORE_GEMM_N || transa == TECORE_GEMM_T,
         "%s: transa is %d, not TECORE_GEMM_N or TECORE_GEMM_T", fn, (int)transa);
  TE_ARG(transb == TECORE_GEMM_N || transb == TECORE_GEMM_T,
         "%s: transb is %d, not TECORE_GEMM_N or TECORE_GEMM_T", fn, (int)transb);
  TE_ARG((unsigned)opts->epilogue < TECORE_GEMM_EPI_COUNT_,
         "%s: opts->epilogue is %d, not an epilogue", fn, (int)opts->epilogue);
  TE_ARG(opts->fast_accum == 0 || opts->fast_accum == 1, "%s: opts->fast_accum is %d, not 0 or 1",
         fn, opts->fast_accum);
  TE_ARG(isfinite(alpha), "%s: alpha is not finite", fn);
  TE_ARG(isfinite(beta), "%s: beta is not finite", fn);
  TE_CHECK(te_tensor_check(A, 0, fn, "A"));
  TE_CHECK(te_tensor_check(B, 0, fn, "B"));
  TE_CHECK(te_tensor_check(D, 0, fn, "D"));
  return TECORE_SUCCESS;
}

/* Operands: each one's type and scaling, and the pairs the GEMM takes. */
static tecore_result_t check_operands(const struct tecore_tensor *A,
                                      const struct tecore_tensor *B, struct gemm_call *g) {
  TE_CHECK(check_operand_kind(A, "A"));
  TE_CHECK(check_operand_kind(B, "B"));
  int fp8 = te_dtype_is_fp8(A->dtype);
  if (fp8 != te_dtype_is_fp8(B->dtype))
    return TE_ERR(TECORE_ERR_INVALID, "%s: A and B: %s x %s mixes an FP8 and a 16-bit operand",
                  fn, tecore_dtype_name(A->dtype), tecore_dtype_name(B->dtype));
  if (!fp8 && A->dtype != B->dtype)
    return TE_ERR(TECORE_ERR_INVALID, "%s: A and B: %s x %s: 16-bit operands must have one type",
                  fn, tecore_dtype_name(A->dtype), tecore_dtype_name(B->dtype));
  if (fp8 && A->dtype == TECORE_DTYPE_E5M2 && B->dtype == TECORE_DTYPE_E5M2)
    return TE_ERR(TECORE_ERR_INVALID, "%s: A and B: e5m2 x e5m2 is not supported (FP8 GEMMs "
                  "take e4m3 x e4m3, e4m3 x e5m2 and e5m2 x e4m3)", fn);
  const int blk_a = te_scaling_block(A->scaling), blk_b = te_scaling_block(B->scaling);
  if (fp8 && blk_a != blk_b)
    return TE_ERR(TECORE_ERR_INVALID, "%s: A and B: scaling %s and %s cannot be mixed (a "
                  "block-scaled operand pairs with a block-scaled one)", fn,
                  tecore_scaling_name(A->scaling), tecore_scaling_name(B->scaling));
  if (fp8 && blk_a && A->scaling == TECORE_SCALING_BLOCK_128X128 &&
      B->scaling == TECORE_SCALING_BLOCK_128X128)
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: A and B: both block128x128: block-scaled GEMMs "
                  "take 1x128 x 1x128, 1x128 x 128x128 and 128x128 x 1x128 (cuBLASLt has no "
                  "kernel for two 128x128 operands); quantize one of them in 1x128 blocks", fn);
  if (fp8 && blk_a && g->p.fast_accum)
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: opts->fast_accum is 1: block-scaled GEMMs "
                  "accumulate with their scales applied per block (cuBLASLt has no fast "
                  "accumulation for them); set it to 0", fn);
  g->blk = fp8 && blk_a;
  if (fp8 && (A->scaling == TECORE_SCALING_MXFP8) != (B->scaling == TECORE_SCALING_MXFP8))
    return TE_ERR(TECORE_ERR_INVALID, "%s: A and B: scaling %s and %s cannot be mixed (both "
                  "per-tensor or both mxfp8)", fn, tecore_scaling_name(A->scaling),
                  tecore_scaling_name(B->scaling));
  g->p.fp8 = fp8;
  g->align = fp8 ? 16 : 0;
  return TECORE_SUCCESS;
}

/* Shapes: m, n, k from op(A), op(B), and D = [m][n]. */
static tecore_result_t check_shape(const struct tecore_tensor *A, tecore_gemm_op_t transa,
                                   const struct tecore_tensor *B, tecore_gemm_op_t transb,
                                   const struct tecore_tensor *D, struct te_gemm_problem *p) {
  size_t ar, ac, br, bc, dr, dc;
  te_tensor_view(A, &ar, &ac);
  te_tensor_view(B, &br, &bc);
  te_tensor_view(D, &dr, &dc);
  size_t m = transa == TECORE_GEMM_N ? ar : ac, ka = transa == TECORE_GEMM_N ? ac : ar;
  size_t n = transb == TECORE_GEMM_N ? bc : br, kb = transb == TECORE_GEMM_N ? br : bc;
  if (ka != kb)
    return TE_ERR(TECORE_ERR_INVALID, "%s: A and B: op(A) is [%zu][%zu] and op(B) is [%zu][%zu]: "
                  "k differs (A is [%zu][%zu] with transa %c, B is [%zu][%zu] with transb %c)",
                  fn, m, ka, kb, n, ar, ac, transa ? 'T' : 'N', br, bc, transb ? 'T' : 'N');
  if (dr != m || dc != n)
    return TE_ERR(TECORE_ERR_INVALID, "%s: D: its 2-D view is [%zu][%zu], not [m][n] = [%zu][%zu]",
                  fn, dr, dc, m, n);
  p->m = m;
  p->n = n;
  p->k = ka;
  return TECORE_SUCCESS;
}

/* D's type (what the operands may write) and scaling. */
static tecore_result_t check_output(const struct tecore_tensor *D, tecore_dtype_t a_dtype,
                                    tecore_dtype_t b_dtype, struct gemm_call *g) {
  tecore_dtype_t dt = D->dtype;
  int d_fp8 = te_dtype_is_fp8(dt);
  if (!g->p.fp8) {
    if (dt != a_dtype && dt != TECORE_DTYPE_F32)
      return TE_ERR(TECORE_ERR_INVALID, "%s: D: dtype %s; a %s GEMM writes %s or f32", fn,
                    tecore_dtype_name(dt), tecore_dtype_name(a_dtype), tecore_dtype_name(a_dtype));
  } else {
    if (!is_16bit(dt) && dt != TECORE_DTYPE_F32 && !d_fp8)
      return TE_ERR(TECORE_ERR_INVALID, "%s: D: dtype %s; an FP8 GEMM writes bf16, f16, f32, "
                    "e4m3 or e5m2", fn, tecore_dtype_name(dt));
    if (dt == TECORE_DTYPE_E5M2 && a_dtype == TECORE_DTYPE_E4M3 && b_dtype == TECORE_DTYPE_E4M3)
      return TE_ERR(TECORE_ERR_INVALID, "%s: D: an e4m3 x e4m3 GEMM cannot write e5m2 (e4m3, "
                    "bf16, f16 or f32)", fn);
  }
  if (d_fp8 && g->blk)
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: D: dtype %s: a block-scaled GEMM writes bf16, "
                  "f16 or f32 (an FP8 output needs one per-tensor scale: write bf16 and "
                  "tecore_quantize it)", fn, tecore_dtype_name(dt));
  if (d_fp8) {
    if (D->scaling == TECORE_SCALING_CURRENT)
      return TE_ERR(TECORE_ERR_NOT_SUPPORTED,
                    "%s: D: current scaling needs the output's amax before quantizing, which "
                    "one GEMM cannot do; use delayed scaling, or a bf16 D and tecore_quantize",
                    fn);
    if (D->scaling != TECORE_SCALING_DELAYED)
      return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: D: an FP8 output takes delayed scaling, not %s",
                    fn, tecore_scaling_name(D->scaling));
    TE_CHECK(te_tensor_check(D, TECORE_TENSOR_ROWWISE | TECORE_TENSOR_NEED_SCALE, fn, "D"));
  } else {
    TE_CHECK(te_tensor_check(D, TECORE_TENSOR_ROWWISE, fn, "D"));
    if (D->amax)
      return TE_ERR(TECORE_ERR_INVALID, "%s: D: amax is set, but the GEMM computes the amax "
                    "only of an FP8 output (D is %s)", fn, tecore_dtype_name(dt));
  }
  g->d_fp8 = d_fp8;
  g->p.d_dtype = dt;
  return TECORE_SUCCESS;
}

/* The epilogue: which of C, bias and aux it takes, the one companion type
 * they share (bias, aux; C of an FP8 D), and its own rules. */
static tecore_result_t check_epilogue(const struct tecore_gemm_opts *opts, float alpha,
                                      struct gemm_call *g) {
  const struct tecore_tensor *C = opts->C, *bias = opts->bias, *aux = opts->aux;
  tecore_gemm_epilogue_t epi = opts->epilogue;
  int want_bias = te_gemm_epi_has_bias_in(epi) || te_gemm_epi_has_bias_out(epi);
  int want_aux = te_gemm_epi_has_aux_in(epi) || te_gemm_epi_has_aux_out(epi);
  /* the epilogues Transformer Engine runs on cuBLASLt's block-scaled
   * kernels; every backend keeps to them so that a vdev run says what a
   * GPU run would */
  if (g->blk && epi != TECORE_GEMM_EPI_NONE && epi != TECORE_GEMM_EPI_BIAS &&
      epi != TECORE_GEMM_EPI_DGELU)
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: opts->epilogue %s with block-scaled operands: "
                  "they take none, bias and dgelu", fn, tecore_gemm_epilogue_name(epi));
  if (bias && !want_bias)
    return TE_ERR(TECORE_ERR_INVALID, "%s: opts->bias is set but epilogue %s does not use it", fn,
                  tecore_gemm_epilogue_name(epi));
  if (aux && !want_aux)
    return TE_ERR(TECORE_ERR_INVALID, "%s: opts->aux is set but epilogue %s does not use it", fn,
                  tecore_gemm_epilogue_name(epi));
  if (want_bias && !bias)
    return TE_ERR(TECORE_ERR_INVALID, "%s: opts->bias is NULL; epilogue %s needs a bias vector",
                  fn, tecore_gemm_epilogue_name(epi));
  if (want_aux && !aux)
    return TE_ERR(TECORE_ERR_INVALID, "%s: opts->aux is NULL; epilogue %s needs the [m][n] "
                  "pre-activation buffer", fn, tecore_gemm_epilogue_name(epi));
  if (C) TE_CHECK(te_tensor_check(C, 0, fn, "opts->C"));
  if (bias) TE_CHECK(te_tensor_check(bias, 0, fn, "opts->bias"));
  if (aux) TE_CHECK(te_tensor_check(aux, 0, fn, "opts->aux"));
  tecore_dtype_t dt = g->p.d_dtype, comp;
  if (!g->p.fp8 || is_16bit(dt)) {
    comp = dt;
    g->comp_why = "bias and aux have D's type";
  } else if (dt == TECORE_DTYPE_F32) {
    comp = TECORE_DTYPE_BF16;
    g->comp_why = "an FP8 GEMM with an f32 D takes a bf16 bias and aux";
  } else {
    comp = C ? C->dtype : aux ? aux->dtype : bias ? bias->dtype : TECORE_DTYPE_BF16;
    g->comp_why = "an FP8 D's C, aux and bias share one type, bf16 or f16";
    if (!is_16bit(comp))
      return TE_ERR(TECORE_ERR_INVALID, "%s: %s: dtype %s; %s", fn,
                    C ? "opts->C" : aux ? "opts->aux" : "opts->bias", tecore_dtype_name(comp),
                    g->comp_why);
  }
  g->p.c_dtype = g->d_fp8 ? comp : dt;
  g->p.bias_dtype = comp;
  g->p.aux_dtype = comp;
  if (epi == TECORE_GEMM_EPI_BGRAD) {
    if (g->p.fp8)
      return TE_ERR(TECORE_ERR_INVALID, "%s: epilogue bgrad needs bf16/f16 operands (an FP8 "
                    "backward pass takes the bias gradient from the cast-transpose kernels)", fn);
    if (alpha != 1.0f)
      return TE_ERR(TECORE_ERR_INVALID, "%s: epilogue bgrad needs alpha = 1 (alpha is %g)", fn,
                    (double)alpha);
  }
  if (te_gemm_epi_daux(epi) && (g->p.fp8 || !is_16bit(dt)))
    return TE_ERR(TECORE_ERR_INVALID, "%s: epilogue %s needs bf16/f16 operands and D (D is %s)",
                  fn, tecore_gemm_epilogue_name(epi), tecore_dtype_name(dt));
  g->p.epilogue = epi;
  return TECORE_SUCCESS;
}

/* The epilogue's buffers: C (and whether beta reads it), bias, aux. */
static tecore_result_t check_epilogue_buffers(const struct tecore_gemm_opts *opts,
                                              const struct tecore_tensor *D, float beta,
                                              struct gemm_call *g) {
  const struct tecore_tensor *C = opts->C, *bias = opts->bias, *aux = opts->aux;
  struct te_gemm_problem *p = &g->p;
  tecore_gemm_epilogue_t epi = p->epilogue;
  size_t m = p->m, n = p->n, align = g->align;
  if (C) {
    TE_CHECK(check_mn(C, "opts->C", m, n, p->c_dtype,
                      g->d_fp8 ? "an FP8 D's C is bf16 or f16, with its bias and aux"
                               : "C has D's type",
                      align ? align : tecore_dtype_size(p->c_dtype)));
  }
  if (beta != 0.0f && !C && g->d_fp8)
    return TE_ERR(TECORE_ERR_INVALID, "%s: beta is %g and opts->C is NULL, but D is %s: an FP8 "
                  "output cannot be accumulated into; pass a bf16/f16 C", fn, (double)beta,
                  tecore_dtype_name(p->d_dtype));
  if (beta != 0.0f) p->c = C ? C->data : D->data;
  if (bias) {
    size_t want_len = epi == TECORE_GEMM_EPI_BGRAD ? m : n;   /* DAUX_BGRAD: n, as DGELU's */
    TE_CHECK(te_tensor_check(bias, TECORE_TENSOR_ROWWISE, fn, "opts->bias"));
    if (tecore_tensor_numel(bias) != want_len)
      return TE_ERR(TECORE_ERR_INVALID, "%s: opts->bias: %zu elements; epilogue %s needs %zu (%s)",
                    fn, tecore_tensor_numel(bias), tecore_gemm_epilogue_name(epi), want_len,
                    epi == TECORE_GEMM_EPI_BGRAD ? "m" : "n");
    if (bias->dtype != p->bias_dtype)
      return TE_ERR(TECORE_ERR_INVALID, "%s: opts->bias: dtype %s, expected %s (%s)", fn,
                    tecore_dtype_name(bias->dtype), tecore_dtype_name(p->bias_dtype),
                    g->comp_why);
    if (bias->scaling != TECORE_SCALING_NONE)
      return TE_ERR(TECORE_ERR_INVALID, "%s: opts->bias: scaling must be none", fn);
    if (align) TE_CHECK(check_align(bias->data, 16, "opts->bias", "data",
                                    "FP8 GEMMs need 16-byte aligned vectors"));
    p->bias = bias->data;
  }
  if (te_gemm_epi_daux(epi) && (!te_gemm_daux_shapes(m, n, p->k) || beta != 0.0f))
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: epilogue %s runs where m %% 128, n %% 256 and "
                  "k %% 64 are 0 and beta is 0 (libte's own GEMM's tiles, on every backend); "
                  "m %zu, n %zu, k %zu, beta %g", fn, tecore_gemm_epilogue_name(epi), m, n, p->k,
                  (double)beta);
  if (aux) {
    TE_CHECK(check_mn(aux, "opts->aux", m, n, p->aux_dtype, g->comp_why,
                      align ? align : tecore_dtype_size(p->aux_dtype)));
    if (n % 8)
      return TE_ERR(TECORE_ERR_INVALID, "%s: opts->aux: n = %zu is not a multiple of 8 (the aux "
                    "matrix's leading dimension must be, for cuBLASLt)", fn, n);
    p->aux = aux->data;
  }
  return TECORE_SUCCESS;
}

/* The caller's workspace, if any: both fields or neither, 256-byte aligned. */
static tecore_result_t check_workspace(const struct tecore_gemm_opts *opts,
                                       struct te_gemm_problem *p) {
  if (opts->workspace) {
    TE_ARG(opts->workspace_bytes > 0, "%s: opts->workspace is set but workspace_bytes is 0", fn);
    TE_CHECK(check_align(opts->workspace, 256, "opts->workspace", "address",
                         "cuBLASLt needs a 256-byte aligned workspace"));
  } else {
    TE_ARG(opts->workspace_bytes == 0,
           "%s: opts->workspace_bytes is %zu but opts->workspace is 0", fn, opts->workspace_bytes);
  }
  p->workspace = opts->workspace;
  p->workspace_bytes = opts->workspace_bytes;
  return TECORE_SUCCESS;
}

/* cuBLASLt's FP8 layout rules (rows of A, B, C and D 16-byte aligned),
 * once the operands' copies are chosen. */
static tecore_result_t check_fp8_layout(const struct tecore_tensor *D,
                                        const struct tecore_tensor *C,
                                        const struct te_gemm_problem *p) {
  size_t n = p->n, k = p->k;
  if (k % 16)
    return TE_ERR(TECORE_ERR_INVALID, "%s: k = %zu is not a multiple of 16 (FP8 GEMMs need "
                  "16-byte aligned rows of A and B)", fn, k);
  if (n * tecore_dtype_size(p->d_dtype) % 16)
    return TE_ERR(TECORE_ERR_INVALID, "%s: D: rows of n = %zu %s elements are not a multiple "
                  "of 16 bytes (FP8 GEMMs need 16-byte aligned rows of D)", fn, n,
                  tecore_dtype_name(p->d_dtype));
  if (C && n * tecore_dtype_size(p->c_dtype) % 16)
    return TE_ERR(TECORE_ERR_INVALID, "%s: opts->C: rows of n = %zu %s elements are not a "
                  "multiple of 16 bytes (FP8 GEMMs need 16-byte aligned rows of C)", fn, n,
                  tecore_dtype_name(p->c_dtype));
  TE_CHECK(check_align(D->data, 16, "D", "data", "FP8 GEMMs need 16-byte aligned matrices"));
  return TECORE_SUCCESS;
}

/* The bytes of an operand's copy that the GEMM reads (the copy select_operand
 * chose: rows_eff x k elements) and of its scale inverses. */
static void operand_spans(const struct tecore_tensor *t, const char *arg,
                          const struct te_gemm_operand *o, size_t rows_eff, size_t k,
                          struct te_tensor_spans *l) {
  char name[32];
  snprintf(name, sizeof name, "%s->%s", arg, o->columnwise ? "columnwise_data" : "data");
  te_span_add(l, name, o->data, rows_eff * k * tecore_dtype_size(t->dtype));
  if (o->scale_kind == TE_GEMM_SCALE_NONE) return;
  snprintf(name, sizeof name, "%s->%s", arg,
           o->scale_inv == t->columnwise_scale_inv ? "columnwise_scale_inv" : "scale_inv");
  te_span_add(l, name, o->scale_inv,
              o->scale_kind == TE_GEMM_SCALE_MX ? rows_eff * te_cdiv(k, 32) : sizeof(float));
}

/* te/gemm.h's aliasing rule: what the GEMM writes (D, its amax and the
 * scale_inv that goes with its scale, aux and the bias of the gradient
 * epilogues, the caller's workspace) shares no byte with anything else it
 * touches, except that D may be exactly C (accumulation in place). */
static tecore_result_t check_alias(const struct tecore_tensor *A, const struct tecore_tensor *B,
                                   const struct tecore_tensor *D,
                                   const struct tecore_gemm_opts *opts,
                                   const struct te_gemm_problem *p) {
  const struct tecore_tensor *C = opts->C, *bias = opts->bias, *aux = opts->aux;
  tecore_gemm_epilogue_t e = p->epilogue;
  size_t mn = p->m * p->n;
  struct te_tensor_spans l = {.access = TE_ACCESS_WRITE, .pair = 1};
  te_span_add(&l, "D->data", D->data, mn * tecore_dtype_size(D->dtype));
  l.pair = 0;
  if (te_dtype_is_fp8(D->dtype)) te_tensor_spans(D, "D", TE_SPAN_AMAX | TE_SPAN_SCALE_INV, &l);
  if (te_gemm_epi_has_aux_out(e))
    te_span_add(&l, "opts->aux->data", aux->data, mn * tecore_dtype_size(aux->dtype));
  if (te_gemm_epi_has_bias_out(e))
    te_span_add(&l, "opts->bias->data", bias->data,
                tecore_tensor_numel(bias) * tecore_dtype_size(bias->dtype));
  te_span_add(&l, "opts->workspace", opts->workspace, opts->workspace_bytes);
  l.access = TE_ACCESS_READ;
  operand_spans(A, "A", &p->a, p->m, p->k, &l);
  operand_spans(B, "B", &p->b, p->n, p->k, &l);
  if (te_dtype_is_fp8(D->dtype)) te_tensor_spans(D, "D", TE_SPAN_SCALE, &l);
  if (C && p->beta != 0.0f) {
    l.pair = 1;
    te_span_add(&l, "opts->C->data", C->data, mn * tecore_dtype_size(C->dtype));
    l.pair = 0;
  }
  if (te_gemm_epi_has_aux_in(e))
    te_span_add(&l, "opts->aux->data", aux->data, mn * tecore_dtype_size(aux->dtype));
  if (te_gemm_epi_has_bias_in(e))
    te_span_add(&l, "opts->bias->data", bias->data,
                tecore_tensor_numel(bias) * tecore_dtype_size(bias->dtype));
  return te_check_spans(l.span, l.n, fn);
}

/* The checks run in this order (the first failure is the one reported),
 * fill one problem, and hand it to the backend's gemm op. */
TE_EXPORT tecore_result_t tecore_gemm(const struct tecore_tensor *A, tecore_gemm_op_t transa,
                                      const struct tecore_tensor *B, tecore_gemm_op_t transb,
                                      const struct tecore_tensor *D, float alpha, float beta,
                                      const struct tecore_gemm_opts *opts,
                                      tecore_stream_t stream) {
  static const struct tecore_gemm_opts no_opts;
  if (!opts) opts = &no_opts;
  struct gemm_call g = {.p = {.alpha = alpha, .beta = beta, .fast_accum = opts->fast_accum}};
  struct te_gemm_problem *p = &g.p;
  TE_CHECK(check_call(A, transa, B, transb, D, alpha, beta, opts));
  TE_CHECK(check_operands(A, B, &g));
  TE_CHECK(check_shape(A, transa, B, transb, D, p));
  TE_CHECK(check_output(D, A->dtype, B->dtype, &g));
  TE_CHECK(check_epilogue(opts, alpha, &g));
  int empty = p->m == 0 || p->n == 0;
  if (!empty && p->k == 0)
    return TE_ERR(TECORE_ERR_INVALID, "%s: k is 0 (A and B are empty but D is [%zu][%zu])", fn,
                  p->m, p->n);
  TE_CHECK(check_epilogue_buffers(opts, D, beta, &g));
  TE_CHECK(check_workspace(opts, p));
  if (empty) return TECORE_SUCCESS;

  /* operands: which copy is read */
  TE_CHECK(select_operand(A, "A", transa == TECORE_GEMM_N ? "transa = N" : "transa = T",
                          transa == TECORE_GEMM_N, p->m, p->k, &p->a));
  TE_CHECK(select_operand(B, "B", transb == TECORE_GEMM_N ? "transb = N" : "transb = T",
                          transb == TECORE_GEMM_T, p->n, p->k, &p->b));
  if (p->fp8) TE_CHECK(check_fp8_layout(D, opts->C, p));
  TE_CHECK(check_alias(A, B, D, opts, p));
  /* a tensor found too small by the descriptor checks (deferred), then the
   * caller's workspace: cuBLASLt writes all of it */
  TE_CHECK(te_error_deferred_take());
  if (opts->workspace)
    TE_CHECK(te_dev_check_range(opts->workspace, opts->workspace_bytes, fn, "opts->workspace"));
  p->d = D->data;
  if (g.d_fp8) {
    p->d_scale = D->scale;
    p->d_amax = D->amax;
  }

  const struct te_device_ops *o;
  TE_CHECK(te_ops_get(&o));
  struct te_prof_mark pm;
  te_prof_begin(&pm, stream);
  tecore_result_t r = o->gemm(p, stream);
  if (pm.on) {
    char label[48];
    snprintf(label, sizeof label, "%s %zux%zux%zu", tecore_dtype_name(A->dtype), p->m, p->n, p->k);
    te_prof_end(&pm, "gemm", label, r);
  } else {
    te_prof_end(&pm, "gemm", NULL, r);
  }
  return r;
}
