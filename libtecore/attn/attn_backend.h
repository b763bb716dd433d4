/* SPDX-License-Identifier: Apache-2.0 */
/* attn_backend.h -- the contract between libtecore's attention entry points
 * (te/attention.h, attn.c) and its backends: the validated problem every
 * backend receives, and the table row a backend fills.
 *
 * attn.c checks the caller's arguments, fills one struct te_attn_problem and
 * walks te_attn_backends[] in order (TECORE_ATTN_BACKEND=auto), or takes
 * the named row (cudnn | libte); the first row whose supports() says yes
 * runs.  On vdev the "vdev" row runs (plain C, float accumulation).  A
 * backend keeps its own state (loaded library, plan cache) behind its own
 * file; nothing here is shared between rows but the problem.
 *
 * Layout.  Tokens of all sequences are packed without padding ("THD"):
 * a tensor X of the problem is addressed as
 *   X + (token * x.token_stride + head * x.head_stride + d) elements,
 * d in [0, head_dim), so Q, K and V may be separate tensors or slices of
 * one packed QKV output of a Linear ([tokens][(heads + 2 kv_heads) dim]).
 * Sequence b holds tokens [cu_seqlens[b], cu_seqlens[b+1]) of its tensor.
 *
 * Masking.  Within a sequence with lq queries and lk keys, query i may see
 * key j when
 *   causal:   j <= i + (lk - lq)          (bottom-right aligned: the last
 *                                          query sees every key; lq == lk
 *                                          is the usual causal mask)
 *   window:   j >= i + (lk - lq) - window_left   (window_left >= 0)
 * A query row that sees no key writes O = 0 and lse = -inf.
 *
 * Softmax statistics.  lse is float [heads][total_q]: the natural log of
 * sum_j exp(scale * q.k_j) for each query row (the scale applied), written
 * by the forward and read by the backward.  A backend that needs another
 * layout asks for stats workspace and keeps its own. */
#ifndef TECORE_ATTN_BACKEND_H
#define TECORE_ATTN_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <te/device.h>
#include <te/dtype.h>
#include <te/result.h>

/* One [tokens][heads][head_dim] view: a device address and two strides in
 * elements (the dimension stride is 1). */
struct te_attn_view {
  tecore_devptr_t ptr;
  size_t token_stride, head_stride;
};

struct te_attn_problem {
  /* Shape. */
  size_t batch;                      /* sequences */
  size_t total_q, total_kv;          /* tokens of all sequences */
  size_t max_seqlen_q, max_seqlen_kv;
  int heads, kv_heads;               /* heads % kv_heads == 0 */
  int head_dim;                      /* of Q, K and V (multiple of 8, <= 256) */
  /* Device int32 [batch + 1] prefix sums of sequence lengths (0 first). */
  tecore_devptr_t cu_seqlens_q, cu_seqlens_kv;
  /* Host copies when the caller gave fixed lengths (cu_* then point at
   * attn.c's device copy); 0 when the lengths live only on the device. */
  size_t fixed_seqlen_q, fixed_seqlen_kv;

  float scale;                       /* softmax scale, e.g. 1/sqrt(head_dim) */
  int causal;                        /* bottom-right aligned, see above */
  long window_left;                  /* -1: none */

  /* Element types: q, k, v (BF16, F16 or E4M3); o (BF16, F16, or E4M3
   * when q is E4M3); the gradients are q's type in BF16/F16. */
  tecore_dtype_t qkv_dtype, o_dtype;

  struct te_attn_view q, k, v, o;
  tecore_devptr_t lse;               /* float [heads][total_q] */

  /* FP8 (qkv_dtype E4M3): q/k/v dequantize factors (float scale_inv of
   * each tensor, device); o's scale and amax when o is FP8 (else o_amax
   * alone may be set: max |O| max-accumulated); s_amax: max over the
   * softmax probabilities (delayed scaling of the P tensor), or 0. */
  tecore_devptr_t q_scale_inv, k_scale_inv, v_scale_inv;
  tecore_devptr_t o_scale, o_scale_inv, o_amax, s_amax;

  /* Backward only: dO in, dQ dK dV out (the same strides rules). */
  struct te_attn_view d_o, dq, dk, dv;

  /* Scratch from the caller (tecore_attention_workspace_size), 256-byte
   * aligned; contents undefined on entry and after. */
  tecore_devptr_t workspace;
  size_t workspace_bytes;
};

/* One backend.  supports() returns 1 when it can run the problem (forward,
 * or backward when backward != 0) and 0 with the reason in why; it makes
 * no driver call that could break a capture.  workspace() says the bytes
 * it needs.  fwd()/bwd() queue the work on stream, allocate nothing while
 * the stream captures, and return a libtecore result with the detail set.
 * fixed_seqlens(), where set, says whether a call with fixed lengths reads
 * the prefix sums attn.c writes for them (NULL: it does). */
struct te_attn_backend {
  const char *name;
  int (*supports)(const struct te_attn_problem *p, int backward, char *why, size_t why_len);
  size_t (*workspace)(const struct te_attn_problem *p, int backward);
  tecore_result_t (*fwd)(const struct te_attn_problem *p, tecore_stream_t stream);
  tecore_result_t (*bwd)(const struct te_attn_problem *p, tecore_stream_t stream);
  int (*fixed_seqlens)(const struct te_attn_problem *p, int backward);
};

/* The rows, in the order auto walks them (attn_backends.c). */
extern const struct te_attn_backend te_attn_backend_cudnn; /* attn_cudnn.c */

/* 1 when cuDNN may run this causal E4M3 forward: at most
 * TECORE_CUDNN_FP8_CAUSAL_MAX_TILES query tiles of 128 rows over all
 * sequences and heads (attn_cudnn_lib.c says why); else 0 with the reason.
 * Any other problem: 1. */
int te_dnn_fp8_causal_fits(const struct te_attn_problem *p, char *why, size_t len);
extern const struct te_attn_backend te_attn_backend_libte; /* attn_libte.c: kernels/attention.cu */
extern const struct te_attn_backend te_attn_backend_vdev;  /* attn_libte.c: attn_vdev.c's C twins */

#endif
