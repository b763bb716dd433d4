// SPDX-License-Identifier: Apache-2.0
// attn_cudnn.cu -- the device side of the cuDNN attention row's variable
// sequence lengths (libtecore/attn/attn_cudnn.c): per-sequence lengths and
// ragged element offsets from cu_seqlens, and the softmax statistics moved
// between cuDNN's padded layout and the caller's lse; and the two steps
// around the E4M3 forward graph (its device constants before, the amaxes
// and a staged BF16/F16 O after).  Grid-stride loops
// over the items of kernels/common/attn_cudnn.h, whose math the vdev twins
// (libtecore/attn/attn_cudnn_kern.c) share.
#include "common/attn_cudnn.h"

extern "C" __global__ void __launch_bounds__(TE_ACD_THREADS)
    te_attn_cudnn_ragged(TE_KSIG(TE_ACD_RAGGED_PARAMS)) {
  const long long m[TE_ACD_ROLES] = {m0, m1, m2, m3, m4, m5, m6, m7};
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i <= batch;
       i += (long long)gridDim.x * blockDim.x)
    te_acd_ragged_item(cu_q, cu_kv, out, batch, stride, m, i);
}

extern "C" __global__ void __launch_bounds__(TE_ACD_THREADS)
    te_attn_cudnn_stats(TE_KSIG(TE_ACD_STATS_PARAMS)) {
  const long long n = dir == TE_ACD_TO_LSE ? heads * total_q : batch * heads * max_q;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    te_acd_stats_item(cu_q, cu_kv, padded, lse, o, o_ts, o_hs, batch, heads, max_q, total_q, d,
                      causal, dir, i);
}

extern "C" __global__ void __launch_bounds__(TE_ACD_THREADS)
    te_attn_cudnn_fp8(TE_KSIG(TE_ACD_FP8_PARAMS)) {
  const long long n = mode == TE_ACD_FP8_PRE ? 1 : (o8 ? total_q * heads * d : 0) + 1;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    te_acd_fp8_item(slots, v_si, o8, o, s_amax, o_amax, o_scale, o_scale_inv, o_ts, o_hs,
                    total_q, heads, d, o_dt, mode, i);
}
