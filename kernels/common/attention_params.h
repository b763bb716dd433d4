/* SPDX-License-Identifier: Apache-2.0 */
/* attention_params.h -- the parameters of kernels/attention.cu, declared
 * once (kparams.h).  The attention kernels take one parameter block
 * (struct te_attn_params, kernels/common/attention.h), __grid_constant__
 * on the GPU. */
#ifndef TE_KERNELS_ATTENTION_PARAMS_H
#define TE_KERNELS_ATTENTION_PARAMS_H

#include "kparams.h"
#include "attention.h"

/* te_attn_fwd, te_attn_bwd_prep, te_attn_bwd, te_attn_bwd_dq */
#define TE_ATTN_PARAMS(P) P(struct te_attn_params, p, gcblk)
/* te_attn_seqlens: cu_q[b] = b * len_q, cu_kv[b] = b * len_kv, b <= batch */
#define TE_ATTN_SEQLENS_PARAMS(P) \
  P(int *, cu_q, nnptr)           \
  P(int *, cu_kv, nnptr)          \
  P(int, batch, val)              \
  P(int, len_q, val)              \
  P(int, len_kv, val)

/* te_attn_seqlens_check: entries of cu_q, cu_kv (batch + 1 each) out of
 * bounds reported into *status (see te_attn_seqlens_fault) */
#define TE_ATTN_CHECK_PARAMS(P)         \
  P(const int *, cu_q, nnptr)           \
  P(const int *, cu_kv, nnptr)          \
  P(unsigned long long *, status, nnptr) \
  P(int, batch, val)                    \
  P(long long, total_q, val)            \
  P(long long, total_kv, val)           \
  P(int, max_q, val)                    \
  P(int, max_kv, val)

#endif
