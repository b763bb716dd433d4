/* SPDX-License-Identifier: Apache-2.0 */
/* te/attention.h -- scaled dot-product attention, forward and backward,
 * over sequences packed without padding:
 *   O_i = sum_j softmax_j(scale * Q_i . K_j) V_j   over the keys j query i sees
 * with causal and sliding-window masks, grouped- and multi-query heads,
 * BF16/F16 (forward and backward) and E4M3 Q/K/V (forward).
 *
 * E4M3 forward: the probabilities P are rounded to E4M3 at the fixed
 * scale 448 (P <= 1; dequantized by 1/448) before the product with V, and
 * a BF16/F16 O passes through E4M3 at 0.5 / v.scale_inv, on every backend
 * alike: that is how cuDNN's FP8 engines (Hopper: E4M3 O only) compute it.
 * O is then within about 2^-4 (sum_j p_j |v_j| + |O|) of the attention of
 * the dequantized inputs.
 *
 * Layout.  Q, K, V, O (and dO, dQ, dK, dV) are [tokens][heads][head_dim]
 * views: element (t, h, d) of a view sits at
 *   data + (t * token_stride + h * head_stride + d) * element size,
 * so Q, K and V may be separate tensors or slices of one packed QKV Linear
 * output.  Tokens of sequence b are [cu_seqlens[b], cu_seqlens[b+1]).
 * Q and O have `heads` heads; K and V `kv_heads`, heads % kv_heads == 0:
 * query head h reads KV head h / (heads / kv_heads).
 *
 * Masks (per sequence of lq queries and lk keys): query i sees key j when
 * j <= i + lk - lq (TECORE_ATTN_CAUSAL: bottom-right aligned) and
 * j >= i + lk - lq - window_left (TECORE_ATTN_WINDOW).  A query that sees
 * no key gets O = 0 and lse = -inf.
 *
 * Backends (TECORE_ATTN_BACKEND=auto|cudnn|libte): cuDNN's fused
 * attention when libcudnn loads and takes the problem, else libte's own
 * kernels; on the virtual device, its C implementation.
 * tecore_attention_describe says which runs a given call and why the
 * others were refused.  A problem no allowed backend takes fails with
 * TECORE_ERR_NOT_SUPPORTED and the reasons; nothing falls back to another
 * precision.
 *
 * Lengths out of bounds.  cu_seqlens live in device memory, so the host
 * cannot check them: every kernel clamps sequence b to rows
 * [s, s + n) with s = cu[b] clamped into [0, tokens], its end cu[b+1]
 * into [s, tokens], and n at most max_seqlen, so a bad entry gives wrong
 * sequences (in rows the call may write) but never a read or write
 * outside Q, K, V, O, lse or the gradients.  When args->status is set
 * (a uint64_t in mapped host memory, tecore_mem_alloc_host, zeroed once),
 * a kernel records there the first entry that is outside [0, tokens],
 * below the one before it, or that ends a sequence longer than
 * max_seqlen; the next call given the same word fails with
 * TECORE_ERR_INVALID naming it (and clears it), and
 * tecore_attention_check reports it after waiting for the stream.
 *
 * Everything runs in stream order on stream and is graph-capturable:
 * nothing allocates or waits on the host; scratch is the caller's
 * (tecore_attention_workspace_size). */
#ifndef TE_ATTENTION_H
#define TE_ATTENTION_H

#include <stddef.h>
#include <stdint.h>
#include <te/result.h>
#include <te/device.h>
#include <te/dtype.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One [tokens][heads][head_dim] view.  Strides count elements; 0 takes
 * the packed default (token_stride heads * head_dim, head_stride
 * head_dim).  scale_inv (E4M3 inputs: float[1], the dequantize factor),
 * scale and amax (an E4M3 output: float[1] each; amax, when set, is
 * max-accumulated with max |O| before quantization, for any O dtype) have
 * the meaning of struct tecore_tensor's fields of those names. */
struct tecore_attn_view {
  tecore_devptr_t data;
  size_t token_stride, head_stride;
  tecore_devptr_t scale_inv, scale, amax;
};

/* flags */
#define TECORE_ATTN_CAUSAL 0x1u  /* key j <= query i (bottom-right aligned) */
#define TECORE_ATTN_WINDOW 0x2u  /* key j >= i - window_left (same alignment) */

struct tecore_attention_args {
  /* Sequences.  cu_seqlens_q/_kv: device int32 [batch + 1] prefix sums of
   * the lengths (0 first; read by the kernels, so a graph replays with new
   * values); each length at most max_seqlen_q/_kv.  Both 0: every
   * sequence has max_seqlen_q queries and max_seqlen_kv keys. */
  size_t batch;
  tecore_devptr_t cu_seqlens_q, cu_seqlens_kv;
  size_t max_seqlen_q, max_seqlen_kv;
  /* Rows of Q/O and of K/V (and the stride of lse): with cu_seqlens at
   * least their last value; with fixed lengths 0 (or batch * max_seqlen). */
  size_t tokens_q, tokens_kv;
  int heads, kv_heads, head_dim;   /* head_dim a multiple of 8, <= 256 */
  float scale;                     /* softmax scale, > 0: e.g. 1/sqrt(head_dim) */
  unsigned flags;                  /* TECORE_ATTN_* */
  size_t window_left;              /* with TECORE_ATTN_WINDOW */
  /* Q, K, V (and dO, dQ, dK, dV): BF16 or F16, or E4M3 (forward only);
   * O: dtype, or BF16, F16 or E4M3 when dtype is E4M3. */
  tecore_dtype_t dtype, o_dtype;
  struct tecore_attn_view q, k, v, o;
  /* float [heads][tokens_q]: the forward writes ln sum_j exp(scale q.k_j)
   * of each query row, the backward reads it.  May be 0 in a forward. */
  tecore_devptr_t lse;
  /* E4M3 forward: float[1] max-accumulated with the largest softmax
   * probability (before P's rounding; P's scale is the fixed 448 above,
   * so this is for a caller's recipe to watch), or 0. */
  tecore_devptr_t s_amax;
  /* Backward: the output's gradient in, the inputs' gradients out. */
  struct tecore_attn_view d_o, dq, dk, dv;
  /* Scratch: tecore_attention_workspace_size bytes, 256-byte aligned
   * (may be 0 when that size is 0); contents undefined after. */
  tecore_devptr_t workspace;
  size_t workspace_bytes;
  /* A uint64_t in mapped host memory (tecore_mem_alloc_host, zeroed once),
   * or NULL: where the kernels report cu_seqlens out of bounds (below). */
  uint64_t *status;
};

/* Waits for stream, then reads and clears *status: TECORE_SUCCESS, or
 * TECORE_ERR_INVALID naming the cu_seqlens entry an earlier call met out
 * of bounds.  Synchronous: not for use while capturing a graph. */
tecore_result_t tecore_attention_check(uint64_t *status, tecore_stream_t stream);

/* The forward: O (and lse) from Q, K, V. */
tecore_result_t tecore_attention_fwd(const struct tecore_attention_args *args,
                                     tecore_stream_t stream);
/* The backward: dQ, dK, dV from dO, Q, K, V, O and the forward's lse. */
tecore_result_t tecore_attention_bwd(const struct tecore_attention_args *args,
                                     tecore_stream_t stream);
/* *bytes of workspace the forward (backward != 0: backward) of args needs
 * on the backend that would run it (pointers are not read). */
tecore_result_t tecore_attention_workspace_size(const struct tecore_attention_args *args,
                                                int backward, size_t *bytes);
/* Writes into buf (len bytes, NUL-terminated, truncated) the backend that
 * would run the call and why each one before it was refused. */
tecore_result_t tecore_attention_describe(const struct tecore_attention_args *args,
                                          int backward, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
