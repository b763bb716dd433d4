/* SPDX-License-Identifier: Apache-2.0 */
/* te/norm.h -- LayerNorm and RMSNorm: forward (optionally quantizing the
 * output to FP8), backward with dgamma/dbeta reduced across rows, and
 * either backward fused with the add of an extra gradient (a residual
 * branch's, in a pre-norm transformer).
 *
 * Shapes (2-D views, te/tensor.h): x, y, dy, dx, extra_grad
 * [rows][hidden]; gamma, beta, dgamma, dbeta have hidden elements (any
 * shape); mu and rsigma are float[rows] in device memory.
 *   LayerNorm: y = (x - mean) * rsigma * g + beta,
 *              rsigma = 1 / sqrt(var + epsilon) (biased variance)
 *   RMSNorm:   y = x * rsigma * g,  rsigma = 1 / sqrt(mean(x^2) + epsilon)
 *   g = gamma, or 1 + gamma with TECORE_NORM_ZERO_CENTERED_GAMMA.
 * Dtypes: x, gamma, beta, dy F32, F16 or BF16 (gamma's dtype may differ
 * from x's); y F32/F16/BF16 (scaling NONE) or E4M3/E5M2 with DELAYED
 * scaling (reads *scale, q = fp8(y * scale), writes *scale_inv when set,
 * max-accumulates max |y| into *amax when set; the caller resets amax),
 * or with CURRENT scaling (two passes over x: the first finds *amax =
 * max |y|, overwritten; then scale and scale_inv as tecore_quantize's
 * current scaling sets them; the second writes q = fp8(y * scale)).
 * dx, dgamma, dbeta F32/F16/BF16.  All arithmetic is float, in an order
 * both backends share, so cuda and vdev give the same bits.
 *
 * Aliasing: what a call writes (y with its amax and scale_inv, mu,
 * rsigma; dx, dgamma, dbeta, the workspace) shares no byte with anything
 * else it touches (so mu != rsigma, dgamma != dbeta, y's scale !=
 * scale_inv), except that a _bwd_add call's dx may be exactly extra_grad.
 * Otherwise TECORE_ERR_INVALID names both buffers, and nothing is queued.
 *
 * Everything runs in stream order on stream and is graph-capturable;
 * nothing here allocates: the backward's workspace is the caller's
 * (tecore_norm_bwd_workspace_size). */
#ifndef TE_NORM_H
#define TE_NORM_H

#include <stddef.h>
#include <te/result.h>
#include <te/device.h>
#include <te/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tecore_norm {
  TECORE_NORM_LAYERNORM = 0,
  TECORE_NORM_RMSNORM = 1
} tecore_norm_t;

/* flags */
#define TECORE_NORM_ZERO_CENTERED_GAMMA 0x1u   /* the weight is 1 + gamma */

/* LayerNorm forward.  mu and rsigma: 0, or float[rows] receiving each
 * row's mean and 1/sqrt(var + epsilon) for the backward. */
tecore_result_t tecore_layernorm_fwd(const struct tecore_tensor *x,
                                     const struct tecore_tensor *gamma,
                                     const struct tecore_tensor *beta, float epsilon,
                                     unsigned flags, struct tecore_tensor *y,
                                     tecore_devptr_t mu, tecore_devptr_t rsigma,
                                     tecore_stream_t stream);

/* RMSNorm forward; rsigma: 0 or float[rows]. */
tecore_result_t tecore_rmsnorm_fwd(const struct tecore_tensor *x,
                                   const struct tecore_tensor *gamma, float epsilon,
                                   unsigned flags, struct tecore_tensor *y,
                                   tecore_devptr_t rsigma, tecore_stream_t stream);

/* Bytes of workspace the backward of kind needs for rows x hidden
 * (0 when rows or hidden is 0).  Device memory, 16-byte aligned; its
 * contents need no initialization and are scratch after the call. */
tecore_result_t tecore_norm_bwd_workspace_size(tecore_norm_t kind, size_t rows, size_t hidden,
                                               size_t *bytes);

/* LayerNorm backward: dx, and dgamma, dbeta summed over the rows.  mu and
 * rsigma as the forward wrote them.  Two launches: dx with per-block
 * column partials into workspace, then the column sums. */
tecore_result_t tecore_layernorm_bwd(const struct tecore_tensor *dy,
                                     const struct tecore_tensor *x, tecore_devptr_t mu,
                                     tecore_devptr_t rsigma, const struct tecore_tensor *gamma,
                                     unsigned flags, struct tecore_tensor *dx,
                                     struct tecore_tensor *dgamma, struct tecore_tensor *dbeta,
                                     tecore_devptr_t workspace, size_t workspace_bytes,
                                     tecore_stream_t stream);

/* LayerNorm backward fused with the residual branch's gradient:
 * dx = layernorm_dx + extra_grad (extra_grad [rows][hidden], F32/F16/BF16;
 * it may be exactly dx: the same address and element size, in place),
 * added in float before dx's one rounding. */
tecore_result_t tecore_layernorm_bwd_add(const struct tecore_tensor *dy,
                                         const struct tecore_tensor *x, tecore_devptr_t mu,
                                         tecore_devptr_t rsigma,
                                         const struct tecore_tensor *gamma,
                                         const struct tecore_tensor *extra_grad, unsigned flags,
                                         struct tecore_tensor *dx, struct tecore_tensor *dgamma,
                                         struct tecore_tensor *dbeta, tecore_devptr_t workspace,
                                         size_t workspace_bytes, tecore_stream_t stream);

/* RMSNorm backward: dx and dgamma. */
tecore_result_t tecore_rmsnorm_bwd(const struct tecore_tensor *dy, const struct tecore_tensor *x,
                                   tecore_devptr_t rsigma, const struct tecore_tensor *gamma,
                                   unsigned flags, struct tecore_tensor *dx,
                                   struct tecore_tensor *dgamma, tecore_devptr_t workspace,
                                   size_t workspace_bytes, tecore_stream_t stream);

/* RMSNorm backward fused with the residual branch's gradient:
 * dx = rmsnorm_dx + extra_grad (extra_grad [rows][hidden], F32/F16/BF16;
 * it may be exactly dx: the same address and element size, in place). */
tecore_result_t tecore_rmsnorm_bwd_add(const struct tecore_tensor *dy,
                                       const struct tecore_tensor *x, tecore_devptr_t rsigma,
                                       const struct tecore_tensor *gamma,
                                       const struct tecore_tensor *extra_grad, unsigned flags,
                                       struct tecore_tensor *dx, struct tecore_tensor *dgamma,
                                       tecore_devptr_t workspace, size_t workspace_bytes,
                                       tecore_stream_t stream);

#ifdef __cplusplus
}
#endif
#endif
