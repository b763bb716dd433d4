/* SPDX-License-Identifier: Apache-2.0 */
/* te/fp8.h -- FP8 kernels: quantize (every scaling mode), dequantize,
 * multi-tensor quantize, amax, and scale computation.
 *
 * All run in stream order on stream (graph-capturable) on either backend
 * and give identical bytes on both (kernels/common/fp8.h).  Nothing here
 * allocates; every buffer is the caller's, described by struct
 * tecore_tensor (te/tensor.h), whose header gives the layouts.
 *
 * The no-op flag.  noop_flag is 0 or the device address of an int32; when
 * the int32 is nonzero at run time the kernels return at once and write
 * nothing (no data, scale, scale_inv or amax), so a captured graph can skip
 * re-quantizing a cached weight by setting the flag instead of re-capturing.
 *
 * Aliasing: what a call writes (an output's data, columnwise data, amax
 * and scale inverses; tecore_amax's amax) shares no byte with what it
 * reads (the input's data and scale inverses, the output's scale, the
 * no-op flag) nor with another output's data (quantize_multi's outputs may
 * share an amax or a scale).  So scale == scale_inv, an amax inside the
 * input, or an output over its input is refused: TECORE_ERR_INVALID names
 * both buffers, and nothing is queued. */
#ifndef TE_FP8_H
#define TE_FP8_H

#include <stddef.h>
#include <te/result.h>
#include <te/device.h>
#include <te/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Quantizes in (F32, F16 or BF16, scaling NONE) into out (E4M3 or E5M2) of
 * the same element count; out's 2-D view is the one used for blocks and
 * transposes.  What is written depends on out->scaling and on which of
 * out->data / out->columnwise_data are set (at least one must be):
 *   DELAYED  reads *out->scale; writes data (q = fp8(x * scale)), its
 *            transpose to columnwise_data, *scale_inv (and
 *            *columnwise_scale_inv when set), and max-accumulates |x| into
 *            *amax when amax is set.
 *   CURRENT  needs amax and scale: overwrites *amax with max|x|, computes
 *            *scale (te/recipe.h's rule), then as DELAYED.  Two passes over
 *            in (three launches).
 *   MXFP8, BLOCK_1X128, BLOCK_128X128: per-block scales as te/tensor.h
 *            describes, for each output that is set; *amax max-accumulated
 *            when set; scale unused.
 * Empty tensors succeed without a launch. */
tecore_result_t tecore_quantize(const struct tecore_tensor *in, struct tecore_tensor *out,
                                tecore_devptr_t noop_flag, tecore_stream_t stream);

/* out (F32, F16 or BF16, scaling NONE) = dequantized in (FP8, any scaling
 * mode), same element count: fp8_to_f32(q) * scale_inv of q's block (or of
 * the tensor), rounded to out's dtype (nearest even).  Reads in->data (or,
 * for MXFP8 with no rowwise data, in->columnwise_data). */
tecore_result_t tecore_dequantize(const struct tecore_tensor *in, struct tecore_tensor *out,
                                  tecore_stream_t stream);

/* count quantizations as tecore_quantize would do them one by one.  The
 * per-tensor modes (DELAYED, CURRENT) with rowwise output only are done in
 * one launch per pass for up to TECORE_QUANTIZE_MULTI_BATCH tensors;
 * other modes fall back to one tecore_quantize each.  One noop flag skips
 * them all. */
#define TECORE_QUANTIZE_MULTI_BATCH 32
tecore_result_t tecore_quantize_multi(const struct tecore_tensor *in, struct tecore_tensor *out,
                                      size_t count, tecore_devptr_t noop_flag,
                                      tecore_stream_t stream);

/* *amax = max |x| over in (F32, F16, BF16, or FP8 read as stored codes
 * decoded without scale), or max(*amax, max |x|) with
 * TECORE_AMAX_ACCUMULATE.  A NaN in the input makes *amax NaN. */
#define TECORE_AMAX_ACCUMULATE 0x1u
tecore_result_t tecore_amax(const struct tecore_tensor *in, tecore_devptr_t amax, unsigned flags,
                            tecore_devptr_t noop_flag, tecore_stream_t stream);

/* For a per-tensor tensor t (DELAYED or CURRENT): reads *t->amax and writes
 * *t->scale = fp8_max / max(amax, t->amax_epsilon) (1 when amax is not
 * finite; a power of two with TECORE_TENSOR_POW2_SCALES) and *t->scale_inv
 * (and *t->columnwise_scale_inv when set).  With tecore_amax and a
 * cross-rank MAX reduction in between, this is current scaling across
 * ranks; then tecore_quantize with t->scaling = DELAYED reads the scale. */
tecore_result_t tecore_compute_scale(const struct tecore_tensor *t, tecore_devptr_t noop_flag,
                                     tecore_stream_t stream);

#ifdef __cplusplus
}
#endif
#endif
