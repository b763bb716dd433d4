/* SPDX-License-Identifier: Apache-2.0 */
/* te/optim.h -- optimizer kernels: multi-tensor Adam / AdamW and SGD with
 * momentum (and Nesterov) on FP32 master weights, with a BF16, F16 or FP8
 * model-weight copy refreshed in the same pass; the L2 norm of many
 * tensors; multi-tensor unscaling with a found-inf flag (loss scaling).
 *
 * All run in stream order on stream (graph-capturable) on either backend,
 * and the two backends give the same bits (kernels/common/optim.h).
 *
 * Ownership.  Nothing here allocates or frees.  Every device buffer is the
 * caller's.  The arrays of descriptors (struct tecore_optim_tensor,
 * struct tecore_tensor) are host memory read during the call only: the
 * library packs the device addresses into the kernels' parameters (by
 * value, up to 4 KiB a launch, TECORE_OPTIM_BATCH tensors for Adam/SGD),
 * so no device descriptor buffer exists, the arrays may be freed as soon
 * as the call returns, and a captured graph replays the same addresses and
 * hyperparameters (including step and lr, unless cfg->state puts those two
 * in device memory: see below).  The one scratch buffer, the L2 norm's workspace, is
 * allocated by the caller with the size tecore_l2norm_multi_workspace_size
 * gives.
 *
 * The found-inf flag.  found_inf is 0 or the device address of an int32
 * (4-byte aligned).  tecore_unscale_multi and tecore_l2norm_multi set it to
 * 1 when they meet a value that is not finite and never clear it (the
 * caller zeroes it before the step, e.g. tecore_memset_d32_async);
 * tecore_adam_step and tecore_sgd_step read it when they start and, when
 * it is nonzero (any bits: a float 1.0f works too), return without writing
 * anything: the step is skipped on the device, no host synchronization.
 *
 * Steps in a graph.  A graph captured around tecore_adam_step or
 * tecore_sgd_step replays the values it was captured with.  To replay one
 * graph for every step, set cfg->state to the device address of a struct
 * tecore_optim_state: each step then reads its step number (state->step +
 * 1) and learning rate (state->lr) there when it runs, and adds 1 to
 * state->step after its last launch (not when found_inf skipped the step).
 * A learning-rate schedule writes state->lr in stream order between steps
 * (tecore_memcpy_async from pinned memory, or a kernel of its own).  With
 * cfg->state set, cfg->lr and cfg->step are not used; the device does not
 * check the values it reads (lr must be finite and >= 0, step >= 0, as the
 * config fields).  Adam's bias corrections are then computed on the device
 * in double, beta^t by repeated squaring, so they may differ from the
 * host's pow() in the last bit of the float step size.
 *
 * Aliasing: what a call writes (param, exp_avg, exp_avg_sq, model,
 * model_scale_inv, model_amax, cfg->state; the L2 norm's workspace, norm
 * and found_inf; unscale's out and found_inf) shares no byte with anything
 * else of the call, across all its tensors, except that tensors may share
 * one model_amax (a max reduction) and unscale's out[i] may be exactly
 * in[i] (same address, same element size: in place).  Otherwise
 * TECORE_ERR_INVALID names both buffers ("tensors[2].param overlaps
 * tensors[1].exp_avg"), and nothing is queued.
 *
 * Results are ready on stream when the call's work completes there. */
#ifndef TE_OPTIM_H
#define TE_OPTIM_H

#include <stddef.h>
#include <stdint.h>
#include <te/result.h>
#include <te/dtype.h>
#include <te/device.h>
#include <te/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Tensors per launch of tecore_adam_step and tecore_sgd_step (count itself
 * is unbounded: more tensors take more launches). */
#define TECORE_OPTIM_BATCH 40

/* One parameter tensor of an optimizer step: numel elements each.
 * Device addresses; the pointers that a step does not use may be 0. */
struct tecore_optim_tensor {
  tecore_devptr_t param;           /* F32 master weights, updated in place; 4-byte aligned */
  tecore_devptr_t grad;            /* grad_dtype, read */
  tecore_devptr_t exp_avg;         /* F32: Adam's first moment / SGD's momentum buffer */
  tecore_devptr_t exp_avg_sq;      /* F32: Adam's second moment (SGD: unused) */
  tecore_devptr_t model;           /* model_dtype copy written from the updated param, or 0 */
  tecore_devptr_t model_scale;     /* FP8 model: float, read: model = fp8(param * scale) */
  tecore_devptr_t model_scale_inv; /* FP8 model: float, written 1/scale; or 0 */
  tecore_devptr_t model_amax;      /* FP8 model: float, max-accumulated with |param|; or 0 */
  size_t numel;                    /* 0: the tensor is skipped and not checked */
  tecore_dtype_t grad_dtype;       /* F32, BF16 or F16 */
  tecore_dtype_t model_dtype;      /* BF16, F16, E4M3 or E5M2 (when model is set) */
};

/* A step counter and learning rate in device memory (8-byte aligned),
 * written by the caller before the first step, e.g. {0, 1e-3}. */
struct tecore_optim_state {
  int64_t step;           /* steps taken so far: the next step is number step + 1 */
  double lr;              /* the learning rate of the next step */
};

/* Adam hyperparameters.  Derived values are computed on the host in double
 * and rounded to float once: step_size = lr / (1 - beta1^step),
 * sqrt(1 - beta2^step), 1 - beta, AdamW's 1 - lr*weight_decay. */
struct tecore_adam_config {
  double lr;              /* >= 0 */
  double beta1, beta2;    /* in [0, 1) */
  double eps;             /* >= 0 */
  double weight_decay;    /* >= 0 */
  int64_t step;           /* >= 1: the step being taken (1 for the first) */
  unsigned flags;         /* TECORE_ADAM_* */
  tecore_devptr_t state;  /* 0, or a struct tecore_optim_state: lr and step from there */
};
#define TECORE_ADAM_W 0x1u                   /* AdamW: decoupled weight decay */
#define TECORE_ADAM_NO_BIAS_CORRECTION 0x2u  /* step_size = lr, no sqrt(1 - beta2^step) */

/* SGD hyperparameters (PyTorch's rules). */
struct tecore_sgd_config {
  double lr;              /* >= 0 */
  double momentum;        /* >= 0; 0: plain SGD, exp_avg unused */
  double dampening;       /* finite; 0 with Nesterov */
  double weight_decay;    /* >= 0 */
  int64_t step;           /* >= 1; at step 1 the momentum buffer starts as the gradient */
  unsigned flags;         /* TECORE_SGD_* */
  tecore_devptr_t state;  /* 0, or a struct tecore_optim_state: lr and step from there */
};
#define TECORE_SGD_NESTEROV 0x1u

/* One Adam or AdamW step over count tensors:
 *   g = grad * (*grad_scale_inv when set)
 *   Adam:  g += weight_decay * param
 *   exp_avg    = beta1*exp_avg + (1-beta1)*g
 *   exp_avg_sq = beta2*exp_avg_sq + (1-beta2)*g*g
 *   denom = sqrt(exp_avg_sq) / sqrt(1 - beta2^step) + eps
 *   AdamW: param *= 1 - lr*weight_decay
 *   param -= lr / (1 - beta1^step) * exp_avg / denom
 * then model (when set) = param rounded to model_dtype (nearest even; FP8:
 * fp8(param * *model_scale) with saturation, *model_scale_inv = 1/scale when
 * set, |param| max-accumulated into *model_amax when set: the delayed
 * recipe resets it).  param, grad, exp_avg and exp_avg_sq must be set.
 * grad_scale_inv: 0 or a device float.  found_inf: see above.
 * Tensors of the same call must not overlap (Aliasing, above).  Empty
 * calls succeed. */
tecore_result_t tecore_adam_step(const struct tecore_optim_tensor *tensors, size_t count,
                                 const struct tecore_adam_config *cfg,
                                 tecore_devptr_t grad_scale_inv, tecore_devptr_t found_inf,
                                 tecore_stream_t stream);

/* One SGD step over count tensors (exp_avg is the momentum buffer, needed
 * when momentum != 0; exp_avg_sq unused):
 *   d = grad * (*grad_scale_inv when set) + weight_decay * param
 *   momentum != 0: buf = step == 1 ? d : momentum*buf + (1-dampening)*d
 *                  d = Nesterov ? d + momentum*buf : buf
 *   param -= lr * d
 * and the model copy as tecore_adam_step. */
tecore_result_t tecore_sgd_step(const struct tecore_optim_tensor *tensors, size_t count,
                                const struct tecore_sgd_config *cfg,
                                tecore_devptr_t grad_scale_inv, tecore_devptr_t found_inf,
                                tecore_stream_t stream);

/* Bytes of device workspace tecore_l2norm_multi needs for these tensors
 * (8 bytes per 16384 elements of each tensor, rounded up per tensor; 0 when
 * all are empty).  Checks the tensors as tecore_l2norm_multi does. */
tecore_result_t tecore_l2norm_multi_workspace_size(const struct tecore_tensor *tensors,
                                                   size_t count, size_t *bytes);

/* *norm (a device float) = sqrt(sum over all tensors of x^2), tensors
 * F32, F16 or BF16 with scaling NONE (their data read as flat arrays).
 * Two stages: per-block sums of squares in double into workspace (8-byte
 * aligned, at least the size above), then one block adds them in a fixed
 * order; the result is deterministic and the same on both backends.
 * found_inf (0 or an int32) is set to 1 when any value is not finite. */
tecore_result_t tecore_l2norm_multi(const struct tecore_tensor *tensors, size_t count,
                                    tecore_devptr_t workspace, size_t workspace_bytes,
                                    tecore_devptr_t norm, tecore_devptr_t found_inf,
                                    tecore_stream_t stream);

/* Gradient clipping by the global norm, on the device: *norm as
 * tecore_l2norm_multi writes it, and *scale (a device float) = max_norm /
 * (*norm + 1e-6) when *norm exceeds max_norm, else exactly 1 (NaN when the
 * norm is); scale is meant as the grad_scale_inv of tecore_adam_step or
 * tecore_sgd_step, so a captured step clips without the host.  max_norm
 * finite and > 0; scale 4-byte aligned, not norm or found_inf. */
tecore_result_t tecore_clip_grad_norm(const struct tecore_tensor *tensors, size_t count,
                                      tecore_devptr_t workspace, size_t workspace_bytes,
                                      float max_norm, tecore_devptr_t norm, tecore_devptr_t scale,
                                      tecore_devptr_t found_inf, tecore_stream_t stream);

/* out[i] = in[i] * *scale for count pairs (F32, F16 or BF16, scaling NONE,
 * same element count; out[i] may be in[i] itself, in place; the dtypes may
 * differ).  found_inf (0 or an int32) is set to 1 when any product is not
 * finite, or would not be finite in out's dtype. */
tecore_result_t tecore_unscale_multi(const struct tecore_tensor *in,
                                     const struct tecore_tensor *out, size_t count,
                                     tecore_devptr_t scale, tecore_devptr_t found_inf,
                                     tecore_stream_t stream);

#ifdef __cplusplus
}
#endif
#endif
