/* SPDX-License-Identifier: Apache-2.0 */
/* te/transpose.h -- the cast-transpose family: one pass over a
 * high-precision tensor that writes its FP8 rowwise copy and its FP8
 * columnwise copy (the transpose, for per-tensor scaling), optionally
 * fused with the column sums of the input (dbias) and with the backward
 * of an activation (dx = dy * act'(x)).  What a GEMM's backward needs:
 * dgrad takes the rowwise copy, wgrad the columnwise one, the bias
 * gradient the sums.
 *
 * Tensors (te/tensor.h) are seen as their 2-D view [rows][cols].
 *   in, dy, x  F32, F16 or BF16, scaling NONE, rowwise data (dy and x of
 *              one dtype and one 2-D view).
 *   out        E4M3 or E5M2 with the 2-D view of the input, scaling
 *                DELAYED  reads *scale; q = fp8(v * scale); writes
 *                         *scale_inv (and *columnwise_scale_inv when set)
 *                         = 1/scale; max-accumulates max |v| into *amax
 *                         when amax is set (the recipe resets it).
 *                CURRENT  needs amax and scale: overwrites *amax with
 *                         max |v|, computes *scale from it (te/fp8.h's
 *                         tecore_compute_scale), then as DELAYED: two
 *                         passes over the input.
 *                MXFP8    1x32 blocks along rows (E8M0 scale_inv
 *                         [rows][cdiv(cols,32)]) for data and 32x1 blocks
 *                         along columns (E8M0 columnwise_scale_inv
 *                         [cdiv(rows,32)][cols]) for columnwise_data, which
 *                         keeps the [rows][cols] layout; *amax
 *                         max-accumulated when set.
 *              The block modes (1x128, 128x128) are not supported here
 *              (TECORE_ERR_NOT_SUPPORTED).  Per-tensor columnwise_data is
 *              the transpose [cols][rows].  Whichever of data and
 *              columnwise_data are set are written; at least one must be.
 *   dbias      F32, F16 or BF16, scaling NONE, cols elements:
 *              dbias[c] = sum over rows of v[r][c], added in float in a
 *              fixed order (the same bits on both backends and on every
 *              run), then rounded to dbias's dtype.
 * v is the input (cast-transpose) or dx = dy * act'(x) in float.
 *
 * FP8 conversion rounds to nearest even and saturates to the format's max
 * (kernels/common/fp8.h); both backends give identical bytes.
 *
 * Memory.  Nothing here allocates.  The dbias functions take a workspace
 * of device memory (4-byte aligned) of at least
 * tecore_cast_transpose_dbias_workspace_size bytes for the input's shape;
 * it holds partial sums between the two kernels and may be reused once the
 * call's work on stream is done.  Everything runs in stream order on
 * stream, is graph-capturable, and is complete when stream's work up to
 * this call is.
 *
 * Aliasing: what a call writes (out's data and columnwise data, dbias, the
 * workspace) shares no byte with the input, x, or another output;
 * otherwise TECORE_ERR_INVALID names both buffers, and nothing is queued.
 *
 * Speed.  Tiles of 64x64 through shared memory; 16-byte loads and stores
 * where a row's bytes are a multiple of 16 and the pointer is 16-byte
 * aligned (data: cols; per-tensor columnwise_data: rows), element access
 * otherwise (any shape works). */
#ifndef TE_TRANSPOSE_H
#define TE_TRANSPOSE_H

#include <stddef.h>
#include <te/result.h>
#include <te/device.h>
#include <te/tensor.h>
#include <te/activation.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out = fp8(in) rowwise and columnwise (see above). */
tecore_result_t tecore_cast_transpose(const struct tecore_tensor *in, struct tecore_tensor *out,
                                      tecore_stream_t stream);

/* Bytes of workspace the dbias functions need for an input of in's 2-D
 * view (0 for an empty tensor).  Depends on the shape only, not on the
 * device or the dtypes. */
tecore_result_t tecore_cast_transpose_dbias_workspace_size(const struct tecore_tensor *in,
                                                           size_t *bytes);

/* tecore_cast_transpose, and dbias = column sums of in. */
tecore_result_t tecore_cast_transpose_dbias(const struct tecore_tensor *in,
                                            struct tecore_tensor *out,
                                            struct tecore_tensor *dbias,
                                            tecore_devptr_t workspace, size_t workspace_bytes,
                                            tecore_stream_t stream);

/* dx = dy * act'(x) (act: TECORE_ACT_GELU, RELU, SILU or QGELU, the math
 * of te/activation.h), cast and transposed into out, and dbias = column
 * sums of dx.  dbias may be NULL (then workspace is not used and may be
 * 0): dact + cast + transpose alone. */
tecore_result_t tecore_dact_dbias_cast_transpose(tecore_activation_t act,
                                                 const struct tecore_tensor *dy,
                                                 const struct tecore_tensor *x,
                                                 struct tecore_tensor *out,
                                                 struct tecore_tensor *dbias,
                                                 tecore_devptr_t workspace,
                                                 size_t workspace_bytes, tecore_stream_t stream);

#ifdef __cplusplus
}
#endif
#endif
