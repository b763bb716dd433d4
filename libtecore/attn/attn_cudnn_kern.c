/* SPDX-License-Identifier: Apache-2.0 */
/* attn_cudnn_kern.c -- the kernel table of kernels/attn_cudnn.cu (its vdev
 * twins are in attn_vdev.c) and the launches the cuDNN attention row makes for
 * variable sequence lengths and around its E4M3 forward (attn_cudnn_kern.h). */
#include "attn/attn_cudnn_kern.h"
#include "attn/attn_backend.h"

enum { K_RAGGED, K_STATS, K_FP8 };
static const struct tecore_kernel_def acd_kernels[] = {
    [K_RAGGED] = TE_KDEF("te_attn_cudnn_ragged", te_acd_vdev_ragged, TE_ACD_RAGGED_PARAMS),
    [K_STATS] = TE_KDEF("te_attn_cudnn_stats", te_acd_vdev_stats, TE_ACD_STATS_PARAMS),
    [K_FP8] = TE_KDEF("te_attn_cudnn_fp8", te_acd_vdev_fp8, TE_ACD_FP8_PARAMS),
};
static const struct te_kalign acd_align[] = {
    [K_RAGGED] = TE_KALIGN(TE_ACD_RAGGED_PARAMS),
    [K_STATS] = TE_KALIGN(TE_ACD_STATS_PARAMS),
    [K_FP8] = TE_KALIGN(TE_ACD_FP8_PARAMS),
};
TE_KERNEL_TABLE_FATBIN_ALIGNED(acd_first_id, "libtecore/attn_cudnn", acd_kernels, acd_align,
                               attn_cudnn)

static unsigned blocks_for(size_t n) {
  size_t b = te_cdiv(n ? n : 1, TE_ACD_THREADS), cap = (size_t)te_sm_count() * 8;
  return (unsigned)(b < cap ? b : cap);
}

tecore_result_t te_acd_launch_ragged(const struct te_attn_problem *p, tecore_devptr_t out,
                                     const long long mult[TE_ACD_ROLES], tecore_stream_t stream) {
  size_t batch = p->batch;
  int id = acd_first_id();
  if (id < 0)
    return TE_ERR(TECORE_ERR_INTERNAL, "attention (cudnn): the attn_cudnn kernels did not register");
  struct tecore_launch_cfg cfg = {.grid = {blocks_for(batch + 1), 1, 1},
                                  .block = {TE_ACD_THREADS, 1, 1}};
  struct te_acd_ragged_args k = {
      .cu_q = TE_DPTR(p->cu_seqlens_q), .cu_kv = TE_DPTR(p->cu_seqlens_kv), .out = TE_DPTR(out),
      .batch = (long long)batch, .stride = (long long)te_acd_ragged_stride(batch),
      .total_q = (long long)p->total_q, .total_kv = (long long)p->total_kv,
      .max_q = (int)p->max_seqlen_q, .max_kv = (int)p->max_seqlen_kv,
      .m0 = mult[0], .m1 = mult[1], .m2 = mult[2], .m3 = mult[3],
      .m4 = mult[4], .m5 = mult[5], .m6 = mult[6], .m7 = mult[7]};
  void *kargs[TE_KNPARAMS(TE_ACD_RAGGED_PARAMS)];
  te_acd_ragged_args_ptrs(&k, kargs);
  return te_kernel_launch_pdl(id + K_RAGGED, &cfg, kargs, stream);
}

tecore_result_t te_acd_launch_stats(const struct te_acd_stats_call *c, int dir,
                                    tecore_stream_t stream) {
  size_t batch = c->batch, heads = c->heads, max_q = c->max_q, total_q = c->total_q;
  size_t n = dir == TE_ACD_TO_LSE ? heads * total_q : batch * heads * max_q;
  if (n == 0) return TECORE_SUCCESS;
  int id = acd_first_id();
  if (id < 0)
    return TE_ERR(TECORE_ERR_INTERNAL, "attention (cudnn): the attn_cudnn kernels did not register");
  struct tecore_launch_cfg cfg = {.grid = {blocks_for(n), 1, 1}, .block = {TE_ACD_THREADS, 1, 1}};
  struct te_acd_stats_args k = {
      .cu_q = TE_DPTR(c->cu_q), .cu_kv = TE_DPTR(c->cu_kv), .padded = TE_DPTR(c->padded),
      .lse = TE_DPTR(c->lse), .o = TE_DPTR(c->o), .o_ts = (long long)c->o_ts,
      .o_hs = (long long)c->o_hs, .batch = (long long)batch, .heads = (long long)heads,
      .max_q = (long long)max_q, .total_q = (long long)total_q, .d = c->d, .causal = c->causal,
      .dir = dir};
  void *kargs[TE_KNPARAMS(TE_ACD_STATS_PARAMS)];
  te_acd_stats_args_ptrs(&k, kargs);
  return te_kernel_launch_pdl(id + K_STATS, &cfg, kargs, stream);
}

tecore_result_t te_acd_launch_fp8(const struct te_acd_fp8_call *c, int mode,
                                  tecore_stream_t stream) {
  int id = acd_first_id();
  if (id < 0)
    return TE_ERR(TECORE_ERR_INTERNAL, "attention (cudnn): the attn_cudnn kernels did not register");
  if (c->o8 && c->d % TE_ACD_FP8_VEC)
    return TE_ERR(TECORE_ERR_INTERNAL, "attention (cudnn): staged O with head_dim %d, not a "
                  "multiple of %d", c->d, TE_ACD_FP8_VEC);
  size_t n = (size_t)te_acd_fp8_items((const unsigned char *)(uintptr_t)c->o8,
                                      (long long)c->total_q, (long long)c->heads, c->d, mode);
  struct tecore_launch_cfg cfg = {.grid = {blocks_for(n), 1, 1}, .block = {TE_ACD_THREADS, 1, 1}};
  struct te_acd_fp8_args k = {
      .slots = TE_DPTR(c->slots), .q_si = TE_DPTR(c->q_si), .k_si = TE_DPTR(c->k_si),
      .v_si = TE_DPTR(c->v_si), .o8 = TE_DPTR(c->o8),
      .o = TE_DPTR(c->o), .s_amax = TE_DPTR(c->s_amax), .o_amax = TE_DPTR(c->o_amax),
      .o_scale = TE_DPTR(c->o_scale), .o_scale_inv = TE_DPTR(c->o_scale_inv),
      .o_ts = (long long)c->o_ts, .o_hs = (long long)c->o_hs,
      .total_q = (long long)c->total_q, .heads = (long long)c->heads, .d = c->d,
      .o_dt = c->o_dt, .mode = mode};
  void *kargs[TE_KNPARAMS(TE_ACD_FP8_PARAMS)];
  te_acd_fp8_args_ptrs(&k, kargs);
  return te_kernel_launch_pdl(id + K_FP8, &cfg, kargs, stream);
}
