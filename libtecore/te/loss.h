/* SPDX-License-Identifier: Apache-2.0 */
/* te/loss.h -- fused softmax + cross-entropy from logits: the per-token
 * loss and the mean over the tokens not ignored, optional label
 * smoothing, and the backward, which writes dlogits over the logits (the
 * same buffer: no second [tokens][vocab] array).  A vocabulary split
 * across tensor-parallel ranks is handled through a caller's reduction
 * callback (as tecore_amax_reduce_fn is for FP8 amaxes).
 *
 * Shapes: logits [tokens][vocab_local] (2-D view), this rank's columns
 * vocab_offset .. vocab_offset + vocab_local - 1 of a vocabulary of
 * vocab_total; labels int32 [tokens], ids of the whole vocabulary.
 * Dtypes: logits BF16 or F32; all math in float.
 *   lse_t  = log sum_j exp(x_tj)                 (over the whole vocabulary)
 *   loss_t = lse_t - (1 - eps) x_t,label - (eps / V) sum_j x_tj
 *            (eps = label_smoothing; 0 when label == ignore_index)
 *   mean   = sum of loss_t over the tokens not ignored / their count
 *   dx_tj  = dloss_t (softmax_tj - (1 - eps)[j == label] - eps / V)
 *            (0 for ignored tokens; dloss_t = dmean / count for the mean)
 * A label outside 0 .. vocab_total - 1 that is not ignore_index makes that
 * token's loss NaN (and its gradient row NaN), so it cannot pass unseen.
 * Rows are reduced in chunks of the vocabulary with an online maximum and
 * sum of exponentials, so any vocabulary size (50304, 128256, ...) takes one
 * pass over the logits forward and one backward.
 *
 * Everything runs in stream order on stream, allocates nothing and is
 * graph-capturable (the callback must be too, when used in a capture). */
#ifndef TE_LOSS_H
#define TE_LOSS_H

#include <stddef.h>
#include <stdint.h>
#include <te/result.h>
#include <te/device.h>
#include <te/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tecore_xent_reduce_op {
  TECORE_XENT_REDUCE_MAX = 0,  /* element-wise maximum across ranks */
  TECORE_XENT_REDUCE_SUM = 1   /* element-wise sum across ranks */
} tecore_xent_reduce_op_t;

/* Reduces count floats at data (device memory) across the tensor-parallel
 * ranks in place, in stream order on stream (an all-reduce). */
typedef tecore_result_t (*tecore_xent_reduce_fn)(tecore_xent_reduce_op_t op, tecore_devptr_t data,
                                                 size_t count, tecore_stream_t stream, void *ctx);

struct tecore_xent_args {
  struct tecore_tensor *logits;  /* [tokens][vocab_local] BF16/F32; the backward overwrites it */
  tecore_devptr_t labels;        /* int32 [tokens] */
  int ignore_index;              /* labels equal to it add nothing (e.g. -100) */
  float label_smoothing;         /* 0 <= eps < 1 */
  size_t vocab_offset;           /* the slice's first id (0 on one rank) */
  size_t vocab_total;            /* the whole vocabulary; 0: vocab_local */
  tecore_xent_reduce_fn reduce;  /* NULL: the whole vocabulary is here */
  void *reduce_ctx;
  tecore_devptr_t workspace;     /* with reduce: tecore_xent_workspace_size bytes */
  size_t workspace_bytes;
  /* Backward only (the forward ignores it).  NULL: dlogits over logits.
   * Else dlogits go here, [tokens][vocab_local], rowwise, sharing no byte
   * with logits: F32/F16/BF16 (scaling NONE), or E4M3/E5M2 with a
   * per-tensor DELAYED (scale, scale_inv; amax max-accumulated) or
   * CURRENT (scale, scale_inv, amax; two passes over the logits) scale --
   * e.g. the FP8 gradient of a sequence's last Linear
   * (tecore_seq_grad_fp8), which then skips its own quantize. */
  struct tecore_tensor *dlogits;
};

/* Bytes of workspace a vocabulary-parallel call (reduce set) needs for
 * tokens rows: 16 * tokens.  Device memory, 16-byte aligned, scratch. */
tecore_result_t tecore_xent_workspace_size(size_t tokens, size_t *bytes);

/* Forward.  loss: float [tokens], receives loss_t (required); lse: float
 * [tokens], receives lse_t for the backward (required); mean: 0 or float
 * [2] receiving {mean, count} (count as a float; mean 0 when every token
 * is ignored). */
tecore_result_t tecore_xent_fwd(const struct tecore_xent_args *args, tecore_devptr_t loss,
                                tecore_devptr_t lse, tecore_devptr_t mean,
                                tecore_stream_t stream);

/* flags of tecore_xent_bwd */
#define TECORE_XENT_DLOSS_MEAN 0x1u  /* dloss is float[1], the gradient of the mean */

/* Backward: args->logits (or args->dlogits) receives dlogits.  lse as the forward
 * wrote it.  dloss: float [tokens] (per-token gradients), or with
 * TECORE_XENT_DLOSS_MEAN float [1] with mean the forward's {mean, count}. */
tecore_result_t tecore_xent_bwd(const struct tecore_xent_args *args, tecore_devptr_t lse,
                                tecore_devptr_t dloss, tecore_devptr_t mean, unsigned flags,
                                tecore_stream_t stream);

/* Forward and backward in one call (training: the loss is differentiated
 * right away): loss, lse and mean as tecore_xent_fwd writes them, and
 * dlogits as tecore_xent_bwd then writes them from that lse, bit for bit,
 * with one read of the logits from memory where the two calls take two.
 * dloss and flags as tecore_xent_bwd's; with TECORE_XENT_DLOSS_MEAN the
 * count of tokens not ignored is taken from the labels first.  A
 * vocabulary split across ranks (args->reduce), a current-scaled FP8
 * dlogits or rows not 16-byte aligned run as the two calls. */
tecore_result_t tecore_xent_fwd_bwd(const struct tecore_xent_args *args, tecore_devptr_t loss,
                                    tecore_devptr_t lse, tecore_devptr_t mean,
                                    tecore_devptr_t dloss, unsigned flags,
                                    tecore_stream_t stream);

#ifdef __cplusplus
}
#endif
#endif
