/* SPDX-License-Identifier: Apache-2.0 */
/* attn_cudnn_kern.h -- private to the cuDNN attention row: the kernels of
 * kernels/attn_cudnn.cu (table in attn_cudnn_kern.c, vdev twins in attn_vdev.c) that
 * turn cu_seqlens into what cuDNN's variable-length graphs read, and move
 * the softmax statistics between cuDNN's padded layout and lse.  Built in
 * every configuration, so that vdev runs (and tests) the same math. */
#ifndef TECORE_ATTN_CUDNN_KERN_H
#define TECORE_ATTN_CUDNN_KERN_H

#include "ksupport/ksupport.h"
#include "common/attn_cudnn.h"

TE_KARGS(te_acd_ragged_args, TE_ACD_RAGGED_PARAMS)
TE_KARGS_FNS(te_acd_stats_args, TE_ACD_STATS_PARAMS) /* the structs: common/attn_cudnn.h */
TE_KARGS_FNS(te_acd_fp8_args, TE_ACD_FP8_PARAMS)

/* The vdev twins of the two kernels (attn_vdev.c). */
void te_acd_vdev_ragged(const struct tecore_launch_cfg *cfg, void *const *args);
void te_acd_vdev_stats(const struct tecore_launch_cfg *cfg, void *const *args);
void te_acd_vdev_fp8(const struct tecore_launch_cfg *cfg, void *const *args);

/* The int32 elements of each array te_attn_cudnn_ragged writes: batch + 1
 * rounded up to a multiple of 4; the arrays are 2 + TE_ACD_ROLES of them. */
static inline size_t te_acd_ragged_stride(size_t batch) { return (batch + 1 + 3) & ~(size_t)3; }
static inline size_t te_acd_ragged_bytes(size_t batch) {
  return (2 + TE_ACD_ROLES) * te_acd_ragged_stride(batch) * sizeof(int32_t);
}

/* Lengths and element offsets (mult[r]: token stride of role r: Q K V O dO
 * dQ dK dV, 0 when absent) into out (16-byte aligned), from p's cu_seqlens
 * clamped to its tokens and max_seqlen. */
struct te_attn_problem;
tecore_result_t te_acd_launch_ragged(const struct te_attn_problem *p, tecore_devptr_t out,
                                     const long long mult[TE_ACD_ROLES], tecore_stream_t stream);
/* What te_acd_launch_stats moves: padded float [batch][heads][max_q],
 * lse [heads][total_q], the lengths (cu_q, cu_kv), and O (16-bit elements,
 * strides in elements; 0: not touched) whose rows that see no key
 * (causal as given) are zeroed by the forward. */
struct te_acd_stats_call {
  tecore_devptr_t cu_q, cu_kv, padded, lse, o;
  size_t o_ts, o_hs, batch, heads, max_q, total_q;
  int d, causal;
};
/* Statistics: padded to lse (dir TE_ACD_TO_LSE; rows that see no key get
 * lse = -inf, O = 0) or back (TE_ACD_FROM_LSE; 0 past each length and for
 * -inf); see kernels/common/attn_cudnn.h. */
tecore_result_t te_acd_launch_stats(const struct te_acd_stats_call *c, int dir,
                                    tecore_stream_t stream);

/* What te_acd_launch_fp8 brackets the E4M3 forward graph with: slots
 * (float[TE_ACD_SLOTS] in the workspace, 16-byte aligned); Q's, K's and
 * V's dequantize factors (copied into slots); the staged E4M3 O (packed
 * [total_q][heads][d], 0: O is E4M3 and the graph wrote it) and the
 * caller's O (o_dt BF16/F16, strides in elements); the caller's amaxes
 * and O scale (each 0 when absent; a set o_scale is copied into its slot). */
struct te_acd_fp8_call {
  tecore_devptr_t slots, q_si, k_si, v_si, o8, o, s_amax, o_amax, o_scale, o_scale_inv;
  size_t o_ts, o_hs, total_q, heads;
  int d, o_dt;
};
/* mode TE_ACD_FP8_PRE (before the graph) or TE_ACD_FP8_POST (after); see
 * kernels/common/attn_cudnn.h. */
tecore_result_t te_acd_launch_fp8(const struct te_acd_fp8_call *c, int mode,
                                  tecore_stream_t stream);

#endif
