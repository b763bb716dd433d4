/* SPDX-License-Identifier: Apache-2.0 */
/* te/rope.h -- rotary position embedding (RoPE) of Q and K, forward and
 * backward, and a forward that also writes FP8 Q, K and V for FP8
 * attention.
 *
 * Shapes.  Q and K are [tokens][heads][head_dim] views with a token stride
 * and a head stride in elements (struct tecore_rope_view), so slices of a
 * packed QKV buffer work; the last dimension is compact.  Each head's first
 * rotary_dim elements are rotated, the rest pass through.
 *   Frequencies: f_i = theta^(-2i / rotary_dim), i < rotary_dim / 2, or a
 *   caller's table cos[pos][i], sin[pos][i] (float [table_len][rotary_dim/2]).
 *   Pairs: TECORE_ROPE_HALVES (GPT-NeoX, Llama) pairs element i with
 *   i + rotary_dim/2; TECORE_ROPE_INTERLEAVED (GPT-J) pairs 2i with 2i+1.
 *   y1 = x1 cos - x2 sin,  y2 = x2 cos + x1 sin  (angle pos * f_i).
 *   The backward applies the inverse rotation (sin negated) to the
 *   gradients.
 * Positions: given (int32 per token, for decoding with a KV cache), or
 * implied by the sequence: cu_seqlens (int32 [batch+1], packed variable-
 * length sequences: pos = token - cu_seqlens[b]), or a fixed seq_len
 * (pos = token % seq_len; 0: pos = token).
 * Dtypes: BF16, F16 or F32 in and out (the same for Q and K); math in
 * float, angles reduced in double, so positions far into a long context
 * keep their accuracy.
 *
 * Positions outside the table.  Positions live in device memory (given,
 * or implied by cu_seqlens), so the host cannot check them against
 * table_len.  A token whose position is negative or >= table_len is never
 * looked up: its rotated part (each head's first rotary_dim elements) is
 * written as zeros, the rest passes through as usual.  When args->status
 * is set (a uint64_t in mapped host memory, tecore_mem_alloc_host, zeroed
 * once), the kernel records one such token and its position there; the
 * next call given the same word fails with TECORE_ERR_INVALID naming them
 * (and clears it), and tecore_rope_check reports it after waiting for the
 * stream.  Without a table every position is valid.
 *
 * In place (out == in: same address and strides) or out of place (no
 * byte shared).  Everything runs in stream order on stream, allocates
 * nothing and is graph-capturable. */
#ifndef TE_ROPE_H
#define TE_ROPE_H

#include <stddef.h>
#include <stdint.h>
#include <te/result.h>
#include <te/device.h>
#include <te/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tecore_rope_style {
  TECORE_ROPE_HALVES = 0,      /* rotate halves: i with i + rotary_dim/2 */
  TECORE_ROPE_INTERLEAVED = 1  /* interleaved pairs: 2i with 2i + 1 */
} tecore_rope_style_t;

/* A [tokens][heads][head_dim] view.  Strides in elements; 0 means compact
 * (token_stride = heads * head_stride, head_stride = head_dim). */
struct tecore_rope_view {
  tecore_devptr_t data;
  size_t token_stride;
  size_t head_stride;
};

struct tecore_rope_args {
  tecore_dtype_t dtype;          /* of q_in, q_out, k_in, k_out */
  size_t tokens;
  int q_heads;                   /* >= 1 */
  int k_heads;                   /* 0: no K */
  int head_dim;                  /* even, >= 2 */
  int rotary_dim;                /* even, <= head_dim; 0: head_dim */
  tecore_rope_style_t style;
  float theta;                   /* the base; 0: 10000 */
  tecore_devptr_t cos_table;     /* float [table_len][rotary_dim/2], or 0 (theta) */
  tecore_devptr_t sin_table;     /* set with cos_table */
  size_t table_len;              /* positions in the table */
  tecore_devptr_t positions;     /* int32 [tokens], or 0 */
  tecore_devptr_t cu_seqlens;    /* int32 [batch+1], or 0 */
  size_t batch;                  /* with cu_seqlens */
  size_t seq_len;                /* fixed length without cu_seqlens/positions; 0: one sequence */
  struct tecore_rope_view q_in, q_out;
  struct tecore_rope_view k_in, k_out;  /* unused when k_heads is 0 */
  uint64_t *status;              /* mapped host word for positions outside the table, or NULL */
};

/* Rotates Q and K: q_out = rope(q_in), k_out = rope(k_in). */
tecore_result_t tecore_rope_fwd(const struct tecore_rope_args *args, tecore_stream_t stream);

/* The backward: q_out = rope^-1(q_in), the same for K (q_in holds dQ after
 * the rotation, q_out receives dQ before it). */
tecore_result_t tecore_rope_bwd(const struct tecore_rope_args *args, tecore_stream_t stream);

/* Waits for stream, then reads and clears *status: TECORE_SUCCESS, or
 * TECORE_ERR_INVALID naming the token and position outside the table that
 * an earlier call met.  Synchronous: not for use while capturing a graph. */
tecore_result_t tecore_rope_check(uint64_t *status, tecore_stream_t stream);

/* Forward fused with the FP8 quantization of attention's inputs: q8 =
 * fp8(rope(q_in)), k8 = fp8(rope(k_in)), and v8 = fp8(v_in) (v_heads heads
 * of head_dim; v_in may be a slice of the same packed QKV).  args->q_out
 * and k_out must be unset (data 0).  q8, k8, v8: compact tensors of
 * tokens * heads * head_dim elements, E4M3 or E5M2 with DELAYED scaling
 * (reads *scale, writes *scale_inv, max-accumulates max |y| into *amax when
 * set) or CURRENT scaling (an amax pass, the scale, then the bytes, as
 * tecore_quantize).  k8 is ignored without K; v8 may be NULL (no V). */
tecore_result_t tecore_rope_fwd_fp8(const struct tecore_rope_args *args,
                                    const struct tecore_rope_view *v_in, int v_heads,
                                    struct tecore_tensor *q8, struct tecore_tensor *k8,
                                    struct tecore_tensor *v8, tecore_stream_t stream);

#ifdef __cplusplus
}
#endif
#endif
