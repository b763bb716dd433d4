/* SPDX-License-Identifier: Apache-2.0 */
/* fp8_out.c -- the FP8 output-pass protocol of ksupport.h (amax pass,
 * scale, bytes pass) and the two small kernels it queues: the amax reset
 * and the scale from an amax (kernels/fp8_scale.cu on cuda, the vdev
 * functions of fp8_out_vdev.c, both from kernels/common/fp8.h).  Quantize, the
 * activations, the norms and the cast-transpose family use them, so they
 * live below all four. */
#include "ksupport/fp8_out.h"

/* ---- the table ------------------------------------------------------------------ */

enum { K_AMAX_INIT, K_SCALE };
static const struct tecore_kernel_def fs_kernels[] = {
    [K_AMAX_INIT] = TE_KDEF("te_fp8_amax_init", te_fp8_out_vdev_amax_init, TE_FP8_AMAX_INIT_PARAMS),
    [K_SCALE] = TE_KDEF("te_fp8_compute_scale", te_fp8_out_vdev_compute_scale, TE_FP8_COMPUTE_SCALE_PARAMS),
};

static const struct te_kalign fs_align[] = {
    [K_AMAX_INIT] = TE_KALIGN(TE_FP8_AMAX_INIT_PARAMS),
    [K_SCALE] = TE_KALIGN(TE_FP8_COMPUTE_SCALE_PARAMS),
};

TE_KERNEL_TABLE_FATBIN_ALIGNED(fs_first_id, "libtecore/fp8_scale", fs_kernels, fs_align,
                               fp8_scale)

/* One thread's work, launched as one block of 256 threads (the shape the
 * quantize kernels have always had: graphs captured before compare equal). */
static tecore_result_t fs_launch(int k, void **args, tecore_stream_t stream) {
  int id = fs_first_id();
  if (id < 0) return TE_ERR(TECORE_ERR_INTERNAL, "FP8 scale kernel table could not be registered");
  struct tecore_launch_cfg cfg = {.grid = {1, 1, 1}, .block = {256, 1, 1}};
  TE_CHECK(te_kernel_launch_pdl(id + k, &cfg, args, stream));
  return TECORE_SUCCESS;
}

tecore_result_t te_fp8_amax_zero(tecore_devptr_t amax, tecore_devptr_t noop,
                                 tecore_stream_t stream) {
  struct te_amax_init_args a = {.amax = TE_DPTR(amax), .noop = TE_DPTR(noop)};
  void *args[TE_KNPARAMS(TE_FP8_AMAX_INIT_PARAMS)];
  te_amax_init_args_ptrs(&a, args);
  return fs_launch(K_AMAX_INIT, args, stream);
}

tecore_result_t te_fp8_scale_from_amax(const struct tecore_tensor *t, tecore_devptr_t noop,
                                       tecore_stream_t stream) {
  struct te_compute_scale_args a = {
      .amax = TE_DPTR(t->amax), .scale = TE_DPTR(t->scale), .scale_inv = TE_DPTR(t->scale_inv),
      .scale_inv_col = TE_DPTR(t->columnwise_scale_inv), .eps = t->amax_epsilon,
      .fp8_max = te_fp8_max((int)t->dtype),
      .pow2 = (t->flags & TECORE_TENSOR_POW2_SCALES) ? 1 : 0, .noop = TE_DPTR(noop)};
  void *args[TE_KNPARAMS(TE_FP8_COMPUTE_SCALE_PARAMS)];
  te_compute_scale_args_ptrs(&a, args);
  return fs_launch(K_SCALE, args, stream);
}

/* ---- the protocol ------------------------------------------------------------------ */

tecore_result_t te_qout_begin(const struct tecore_tensor *t, int pass, tecore_devptr_t noop,
                              tecore_stream_t stream, struct te_qout *q) {
  q->scale = q->scale_inv = NULL;
  q->amax = TE_DPTR(t->amax);
  if (t->scaling == TECORE_SCALING_DELAYED) {
    q->scale = TE_DPTR(t->scale);
    q->scale_inv = TE_DPTR(t->scale_inv);
  } else if (t->scaling == TECORE_SCALING_CURRENT) {
    if (pass == 0) {
      TE_CHECK(te_fp8_amax_zero(t->amax, noop, stream));
    } else {
      TE_CHECK(te_fp8_scale_from_amax(t, noop, stream));
      q->scale = TE_DPTR(t->scale);
      q->amax = NULL;
    }
  }
  return TECORE_SUCCESS;
}
