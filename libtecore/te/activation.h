/* SPDX-License-Identifier: Apache-2.0 */
/* te/activation.h -- activation functions forward and backward: GELU (tanh
 * form), ReLU, SiLU, QGELU and the gated SwiGLU, GeGLU, ReGLU, each with an
 * optional fused quantize of its output to FP8 (per-tensor scaling).
 *
 * Tensors (te/tensor.h) are seen as their 2-D view [rows][cols].
 *   elementwise kinds: out[i] = act(in[i]); in and out have the same
 *     element count.
 *   gated kinds: in is [rows][2*cols], each row [a | b]; out is
 *     [rows][cols] with out = act(a) * b.
 * Input dtypes F32, F16, BF16 (scaling NONE).  The output is F32, F16 or
 * BF16 (scaling NONE), or E4M3/E5M2 with scaling DELAYED: the kernel reads
 * *scale, writes q = fp8(y * scale), writes *scale_inv = 1/scale when
 * scale_inv is set, and max-accumulates max |y| (y before the scale) into
 * *amax when amax is set (one atomic per block; the caller resets it).  A
 * NONE output with amax set gets the same amax.  E4M3/E5M2 with scaling
 * CURRENT (scale, scale_inv and amax set) takes two passes over the
 * input: the first writes *amax = max |y| (overwritten, not accumulated),
 * then scale = fp8_max / max(amax, amax_epsilon) (a power of two with
 * TECORE_TENSOR_POW2_SCALES) and scale_inv = 1/scale are written, then
 * the second pass writes q = fp8(y * scale).  Columnwise outputs are
 * not produced (see the cast-transpose family).
 *
 * Math: float, the same on both backends bit for bit
 * (kernels/common/act.h, which states the error bounds against float64);
 * rounding to the output dtype is nearest even.
 * Aliasing: what a call writes (the output's data, amax and scale_inv)
 * shares no byte with anything else it touches (the output's scale
 * included), except that the output's data may be exactly an input's
 * (out == in; dx == dy or dx == x): the same address, bytes and element
 * size, in place, each element read before it is written.  Otherwise
 * TECORE_ERR_INVALID names both buffers, and nothing is queued.
 * Everything runs in stream order on stream and is graph-capturable;
 * nothing here allocates. */
#ifndef TE_ACTIVATION_H
#define TE_ACTIVATION_H

#include <te/result.h>
#include <te/device.h>
#include <te/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tecore_activation {
  TECORE_ACT_GELU = 0,    /* 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))) */
  TECORE_ACT_RELU = 1,    /* max(x, 0) */
  TECORE_ACT_SILU = 2,    /* x * sigmoid(x) */
  TECORE_ACT_QGELU = 3,   /* x * sigmoid(1.702x) */
  TECORE_ACT_SWIGLU = 4,  /* silu(a) * b */
  TECORE_ACT_GEGLU = 5,   /* gelu(a) * b */
  TECORE_ACT_REGLU = 6,   /* relu(a) * b */
  TECORE_ACT_COUNT_
} tecore_activation_t;

/* "gelu", "relu", "silu", "qgelu", "swiglu", "geglu", "reglu" ("?" else). */
const char *tecore_activation_name(tecore_activation_t act);
/* 1 for the gated kinds, 0 for the others (and for unknown values). */
int tecore_activation_is_gated(tecore_activation_t act);

/* out = act(in) (see above).  noop_flag: 0 or the device address of an
 * int32; when it is nonzero at run time the kernel writes nothing (as
 * tecore_quantize, te/fp8.h).  Empty tensors succeed without a launch. */
tecore_result_t tecore_act_fwd(tecore_activation_t act, const struct tecore_tensor *in,
                               struct tecore_tensor *out, tecore_devptr_t noop_flag,
                               tecore_stream_t stream);

/* Backward.  Elementwise kinds: dx = dy * act'(x), dy, x and dx of one
 * element count.  Gated kinds: x [rows][2*cols] = [a | b], dy [rows][cols],
 * dx [rows][2*cols] = [dy * b * act'(a) | dy * act(a)].  dy and x: F32,
 * F16, BF16; dx as out of tecore_act_fwd (FP8 with DELAYED or CURRENT
 * scaling allowed, amax over dx). */
tecore_result_t tecore_act_bwd(tecore_activation_t act, const struct tecore_tensor *dy,
                               const struct tecore_tensor *x, struct tecore_tensor *dx,
                               tecore_stream_t stream);

#ifdef __cplusplus
}
#endif
#endif
