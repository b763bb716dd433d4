/* SPDX-License-Identifier: Apache-2.0 */
/* te/gemm.h -- matrix multiplication on tensor descriptors (te/tensor.h):
 * FP8 (per-tensor or MXFP8 scales) and BF16/FP16 GEMMs with fused
 * epilogues, through cuBLASLt on the cuda backend and a reference GEMM
 * on vdev.
 *
 * The operation.  Row-major throughout, like the tensors:
 *
 *     D[m][n] = epilogue( alpha * op(A)[m][k] * op(B)[k][n] + beta * C[m][n] )
 *
 * op(X) is X (TECORE_GEMM_N) or its transpose (TECORE_GEMM_T), where X
 * means the tensor as its shape describes it (its 2-D view, rowwise).  So
 * with transa = N, A's view is [m][k]; with transa = T it is [k][m]; with
 * transb = N, B's view is [k][n]; with transb = T it is [n][k].
 * A Linear layer y = x W^T is tecore_gemm(x, N, W, T, y): the common
 * "TN" case, and the only one Hopper's FP8 tensor cores take directly
 * (both operands with k contiguous).
 *
 * Which data is read.  For FP8 operands the library reads, of each
 * operand, the copy whose rows run along k:
 *   A, transa = N: A's rowwise data        A, transa = T: A's columnwise data
 *   B, transb = T: B's rowwise data        B, transb = N: B's columnwise data
 * (columnwise data being the transpose for per-tensor scaling, and the
 * same layout with blocks along columns for MXFP8), with the matching
 * scale_inv (columnwise_scale_inv, or scale_inv when that is 0 for the
 * per-tensor modes).  A weight that carries both rowwise and columnwise
 * data therefore serves the forward GEMM and both backward GEMMs, and the
 * caller never transposes.  A missing copy is an error naming it.  BF16
 * and FP16 operands are always read from their rowwise data (any layout).
 *
 * Types.
 *   BF16 x BF16 or F16 x F16: D is the input type or F32; C (if any) has
 *     D's type; bias and aux have D's type.  Operands have scaling NONE.
 *   FP8: E4M3 x E4M3, E4M3 x E5M2, E5M2 x E4M3, both per-tensor scaled
 *     (DELAYED or CURRENT: *scale_inv is the dequantization factor) or
 *     both MXFP8.  D is BF16, F16, F32, E4M3, or E5M2 when an operand is
 *     E5M2.  An FP8 D has DELAYED scaling: the result is multiplied by
 *     *D.scale and rounded (as te/fp8.h's quantize does); D.scale_inv is
 *     not written (it stays the recipe's 1/scale); when D.amax is set,
 *     *D.amax is SET (not max-accumulated) to max |result| before the
 *     scale, as cuBLASLt does.  bias and aux have the GEMM's "companion"
 *     type: D's type for a BF16/F16 D, BF16 for an F32 D, and for an FP8
 *     D the type of C, aux or bias, whichever is given first (BF16 or
 *     F16; BF16 when none is).  C has D's type, or the companion type
 *     when D is FP8 (cuBLASLt reads no FP8 C).
 *   D.amax may be set only for an FP8 D.
 *
 * Accumulation: float.  fast_accum lets FP8 tensor cores skip the
 * periodic promotion of partial sums to full float (faster, less exact;
 * no effect elsewhere).  alpha and beta are floats on the host.
 *
 * Epilogues (pre = alpha * op(A) op(B) + beta * C, computed in float):
 *   NONE           D = pre
 *   BIAS           D = pre + bias[n]                  (bias input, [n])
 *   GELU_AUX       aux = pre; D = gelu(pre)           (aux output, [m][n])
 *   BIAS_GELU_AUX  aux = pre + bias; D = gelu(aux)    (aux is what dGELU needs)
 *   DGELU          D = pre * gelu'(aux)               (aux input, [m][n])
 *   DGELU_BGRAD    D = pre * gelu'(aux); bias[j] = sum_i D[i][j]  (bias output, [n])
 *   BGRAD          D = pre; bias[i] = sum_k op(A)[i][k]           (bias output, [m])
 *   GELU           D = gelu(pre)                      (no aux: a forward that no
 *   BIAS_GELU      D = gelu(pre + bias)                backward follows, inference)
 *   GELU_DAUX      aux = gelu'(pre); D = gelu(pre)    (aux output: the derivative,
 *   BIAS_GELU_DAUX aux = gelu'(pre + bias); D = gelu(pre + bias)   not the input)
 *   DAUX           D = pre * aux                      (aux input: a DAUX forward's)
 *   DAUX_BGRAD     D = pre * aux; bias[j] = sum_i D[i][j]  (bias output, [n])
 * The DAUX pair saves gelu' itself for the backward, which then multiplies
 * instead of evaluating gelu' (the same memory as the pre-activation; the
 * derivative rounded to aux's type where DGELU rounds its argument).
 * BF16/F16 operands, D and aux only; on cuda they run on libte's own
 * Hopper GEMM (see tecore_gemm(3)), elsewhere TECORE_ERR_NOT_SUPPORTED.
 * GELU is the tanh form.  aux holds the float value rounded to aux's type;
 * gelu and the bias sums use the float value.  BGRAD needs BF16/F16
 * operands and alpha = 1 (in an FP8 backward pass the bias gradient comes
 * from the cast-transpose kernels).  Aux epilogues need n % 8 == 0 (the
 * aux leading dimension cuBLASLt accepts).
 *
 * Accumulating: beta != 0 adds beta * C; opts->C NULL means C is D itself
 * (D += ..., gradient accumulation with beta = 1; not for an FP8 D, whose
 * C must be a separate BF16/F16 tensor).
 *
 * Layout rules (cuBLASLt's, enforced identically on both backends so that
 * code tested on vdev runs on a GPU):
 *   - FP8: k % 16 == 0, the rows of C and D a multiple of 16 bytes
 *     (n * element size % 16 == 0), and every data pointer (A, B, C, D,
 *     bias, aux) 16-byte aligned.  m is free.
 *   - BF16/F16: any m, n, k; data pointers aligned to their element size.
 *   - scale pointers 4-byte aligned; the workspace 256-byte aligned.
 * m or n of 0 is an empty GEMM (nothing runs); k of 0 is an error.
 *
 * Workspace: opts->workspace/workspace_bytes, or (both 0) an internal
 * buffer of TECORE_GEMM_WORKSPACE_MB MiB per (context, stream), allocated
 * on a stream's first GEMM and kept for the life of the process.  A
 * graph captured from a GEMM keeps using that stream's buffer: replaying
 * it concurrently with other GEMMs on the same stream's buffer races, so
 * captured GEMMs whose graphs run on other streams should pass their own
 * workspace; and the first GEMM on a stream cannot run during a global-
 * mode capture (the allocation is illegal there): run one before, or pass
 * a workspace.  vdev needs no workspace (a given one is validated only).
 *
 * Backends.  cuda: cuBLASLt, dlopen'ed on the first GEMM (libcublasLt.so.13,
 * then .12, or TECORE_CUBLASLT_LIB); the algorithm is chosen by cuBLASLt's
 * heuristic once per (shape, types, layouts, epilogue, alignment,
 * workspace) and cached; a combination that passes the rules above but
 * that this cuBLASLt does not implement (some epilogues with an FP8 D, for
 * instance) returns TECORE_ERR_NOT_SUPPORTED naming it.  MXFP8 returns
 * TECORE_ERR_NOT_SUPPORTED on cuda for now: cuBLASLt's block-scaled GEMM
 * needs sm_100 and its E8M0 scales in a tiled layout, which libte does
 * not produce yet (the compact layout of te/tensor.h differs).  vdev: a
 * reference GEMM in C on the stream's worker (dequantize, double
 * accumulation rounded to float, the same epilogue and rounding rules).
 * Both queue the work on stream and return; it is stream-ordered and
 * captured into a graph when stream captures.  The 1x128 and 128x128
 * block modes are not supported yet (TECORE_ERR_NOT_SUPPORTED).
 *
 * Aliasing: what the GEMM writes (D, an FP8 D's amax and scale_inv, an
 * output aux or bias, opts->workspace) shares no byte with anything else
 * the call reads or writes, except that D may be exactly C (the same
 * address and bytes: accumulation in place).  Otherwise
 * TECORE_ERR_INVALID names both buffers, and nothing is queued.
 *
 * Descriptors are read during the call only; the buffers they point to
 * must stay valid until the GEMM has run on stream. */
#ifndef TE_GEMM_H
#define TE_GEMM_H

#include <stddef.h>
#include <te/result.h>
#include <te/device.h>
#include <te/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tecore_gemm_op {
  TECORE_GEMM_N = 0,   /* the operand as its shape describes it */
  TECORE_GEMM_T = 1    /* its transpose */
} tecore_gemm_op_t;

typedef enum tecore_gemm_epilogue {
  TECORE_GEMM_EPI_NONE = 0,
  TECORE_GEMM_EPI_BIAS = 1,
  TECORE_GEMM_EPI_GELU_AUX = 2,
  TECORE_GEMM_EPI_BIAS_GELU_AUX = 3,
  TECORE_GEMM_EPI_DGELU = 4,
  TECORE_GEMM_EPI_DGELU_BGRAD = 5,
  TECORE_GEMM_EPI_BGRAD = 6,
  TECORE_GEMM_EPI_GELU = 7,
  TECORE_GEMM_EPI_BIAS_GELU = 8,
  TECORE_GEMM_EPI_GELU_DAUX = 9,
  TECORE_GEMM_EPI_BIAS_GELU_DAUX = 10,
  TECORE_GEMM_EPI_DAUX = 11,
  TECORE_GEMM_EPI_DAUX_BGRAD = 12,
  TECORE_GEMM_EPI_COUNT_
} tecore_gemm_epilogue_t;

/* Optional parts of a GEMM.  A zeroed struct (or opts NULL) means: no
 * epilogue, C is D, float accumulation with promotion, internal workspace. */
struct tecore_gemm_opts {
  tecore_gemm_epilogue_t epilogue;
  const struct tecore_tensor *C;     /* addend [m][n] (read when beta != 0); NULL: D */
  const struct tecore_tensor *bias;  /* see the epilogue table: input or output */
  const struct tecore_tensor *aux;   /* GELU pre-activation [m][n]: output or input */
  int fast_accum;                    /* 1: FP8 fast accumulation */
  tecore_devptr_t workspace;         /* 0 (with workspace_bytes 0): internal */
  size_t workspace_bytes;
};

/* D = epilogue(alpha * op(A) op(B) + beta * C), queued on stream (see the
 * header comment for shapes, types, data selection and layout rules).
 * D, aux and an output bias are written by the GEMM; everything else is
 * read.  Aliasing: see above (D may be C, nothing else may overlap). */
tecore_result_t tecore_gemm(const struct tecore_tensor *A, tecore_gemm_op_t transa,
                            const struct tecore_tensor *B, tecore_gemm_op_t transb,
                            const struct tecore_tensor *D, float alpha, float beta,
                            const struct tecore_gemm_opts *opts, tecore_stream_t stream);

/* "none", "bias", "gelu_aux", "bias_gelu_aux", "dgelu", "dgelu_bgrad",
 * "bgrad", "gelu", "bias_gelu"; "?" for other values. */
const char *tecore_gemm_epilogue_name(tecore_gemm_epilogue_t epilogue);

#ifdef __cplusplus
}
#endif
#endif
