/* SPDX-License-Identifier: Apache-2.0 */
/* quantize.c -- tecore_quantize, tecore_dequantize, tecore_quantize_multi,
 * tecore_amax and tecore_compute_scale (te/fp8.h): the kernel table naming
 * the CUDA kernels of kernels/quantize.cu and their vdev twins (fp8_vdev.c),
 * and the validated public entry points that pick a kernel and a launch
 * shape. */
#include <stdio.h>
#include <string.h>
#include "fp8/fp8_kernels.h"

/* ---- the table ------------------------------------------------------------------ */

enum {
  K_QPT, K_AMAX, K_MX_F32, K_MX_F16, K_MX_BF16, K_BLK, K_DEQ, K_QMULTI,
  K_AMAX_MULTI, K_INIT_MULTI
};
static const struct tecore_kernel_def q_kernels[] = {
    [K_QPT] = TE_KDEF("te_fp8_quantize_pt", te_fp8_vdev_quantize_pt, TE_FP8_QUANTIZE_PT_PARAMS),
    [K_AMAX] = TE_KDEF("te_fp8_amax", te_fp8_vdev_amax, TE_FP8_AMAX_PARAMS),
    /* one CUDA kernel per input type (registers), one vdev function */
    [K_MX_F32] = TE_KDEF("te_fp8_quantize_mx_f32", te_fp8_vdev_quantize_mx, TE_FP8_QUANTIZE_MX_PARAMS),
    [K_MX_F16] = TE_KDEF("te_fp8_quantize_mx_f16", te_fp8_vdev_quantize_mx, TE_FP8_QUANTIZE_MX_PARAMS),
    [K_MX_BF16] = TE_KDEF("te_fp8_quantize_mx_bf16", te_fp8_vdev_quantize_mx, TE_FP8_QUANTIZE_MX_PARAMS),
    [K_BLK] = TE_KDEF("te_fp8_quantize_blk", te_fp8_vdev_quantize_blk, TE_FP8_QUANTIZE_BLK_PARAMS),
    [K_DEQ] = TE_KDEF("te_fp8_dequantize", te_fp8_vdev_dequantize, TE_FP8_DEQUANTIZE_PARAMS),
    [K_QMULTI] = TE_KDEF("te_fp8_quantize_multi", te_fp8_vdev_quantize_multi, TE_FP8_QMULTI_PARAMS),
    [K_AMAX_MULTI] = TE_KDEF("te_fp8_amax_multi", te_fp8_vdev_amax_multi, TE_FP8_QMULTI_PARAMS),
    [K_INIT_MULTI] = TE_KDEF("te_fp8_amax_init_multi", te_fp8_vdev_amax_init_multi, TE_FP8_QMULTI_PARAMS),
};

static const struct te_kalign q_align[] = {
    [K_QPT] = TE_KALIGN(TE_FP8_QUANTIZE_PT_PARAMS),
    [K_AMAX] = TE_KALIGN(TE_FP8_AMAX_PARAMS),
    [K_MX_F32] = TE_KALIGN(TE_FP8_QUANTIZE_MX_PARAMS),
    [K_MX_F16] = TE_KALIGN(TE_FP8_QUANTIZE_MX_PARAMS),
    [K_MX_BF16] = TE_KALIGN(TE_FP8_QUANTIZE_MX_PARAMS),
    [K_BLK] = TE_KALIGN(TE_FP8_QUANTIZE_BLK_PARAMS),
    [K_DEQ] = TE_KALIGN(TE_FP8_DEQUANTIZE_PARAMS),
    [K_QMULTI] = TE_KALIGN(TE_FP8_QMULTI_PARAMS),
    [K_AMAX_MULTI] = TE_KALIGN(TE_FP8_QMULTI_PARAMS),
    [K_INIT_MULTI] = TE_KALIGN(TE_FP8_QMULTI_PARAMS),
};

TE_KERNEL_TABLE_FATBIN_ALIGNED(q_first_id, "libtecore/quantize", q_kernels, q_align, quantize)

/* ---- launch shapes ------------------------------------------------------------------ */

#define QT 256u

/* 1-D grid of `want` blocks (at least 1), capped at per_sm blocks per SM
 * (the kernels loop over the rest). */
static struct tecore_launch_cfg q_cfg(uint64_t want, unsigned per_sm) {
  uint64_t cap = (uint64_t)te_sm_count() * per_sm;
  if (want > cap) want = cap;
  if (want == 0) want = 1;
  return (struct tecore_launch_cfg){.grid = {(unsigned)want, 1, 1}, .block = {QT, 1, 1}};
}

static tecore_result_t q_launch(int k, struct tecore_launch_cfg cfg, void **args,
                                tecore_stream_t stream) {
  int id = q_first_id();
  if (id < 0) return TE_ERR(TECORE_ERR_INTERNAL, "FP8 kernel table could not be registered");
  TE_CHECK(te_kernel_launch_pdl(id + k, &cfg, args, stream));
  return TECORE_SUCCESS;
}


/* The per-tensor and amax kernels' grid: the delayed-scaling quantize is
 * bound by DRAM, and which grid gets closest to the copy rate is a
 * measurement on each GPU, so it is a tunable (the default, a block per
 * 4096 elements, measured 0.070 ms at 8192^2 on an H100 against 0.072 for
 * one resident wave: bench/2026-11-23.md, session 6).  Same bytes out whatever
 * the grid.  The kernels' loop is one: the warp-contiguous loads
 * (kernels/quantize.cu says what the others measured before they went). */
TE_PARAM_INT(quantize_blocks_per_sm, "TECORE_QUANTIZE_BLOCKS_PER_SM", 0, 0, 64,
             "per-tensor quantize and amax grid: at most this many 256-thread blocks per SM "
             "(8: one resident wave, a grid-stride loop); 0, the default: a block per 4096 "
             "elements");

/* The grid of the per-tensor and amax kernels for n elements: a block per
 * step of its 256 threads (16 elements a thread), or at most the tunable's
 * blocks an SM. */
static struct tecore_launch_cfg q_pt_cfg(uint64_t n) {
  const int64_t per_sm = tecore_tunable_int(&quantize_blocks_per_sm);
  const uint64_t per_block = 16 * QT;
  const uint64_t want = (n + per_block - 1) / per_block;
  struct tecore_launch_cfg cfg = q_cfg(want, per_sm > 0 ? (unsigned)per_sm : 1);
  if (per_sm == 0 && want > 0 && want <= 0x7fffffffu) cfg.grid[0] = (unsigned)want;
  return cfg;
}

static tecore_result_t launch_amax(tecore_devptr_t in, tecore_dtype_t dt, uint64_t n,
                                   tecore_devptr_t amax, int init, tecore_devptr_t noop,
                                   tecore_stream_t stream) {
  if (init) TE_CHECK(te_fp8_amax_zero(amax, noop, stream));
  struct te_amax_args a = {.in = TE_DPTR(in), .n = n, .dt = (int)dt, .amax = TE_DPTR(amax), .noop = TE_DPTR(noop)};
  void *args[TE_KNPARAMS(TE_FP8_AMAX_PARAMS)];
  te_amax_args_ptrs(&a, args);
  TE_CHECK(q_launch(K_AMAX, q_pt_cfg(n), args, stream));
  return TECORE_SUCCESS;
}

/* ---- public entry points --------------------------------------------------------- */

static tecore_result_t check_hp_input(const struct tecore_tensor *in, const char *fn,
                                      const char *arg) {
  TE_CHECK(te_tensor_check(in, TECORE_TENSOR_ROWWISE, fn, arg));
  if (in->scaling != TECORE_SCALING_NONE || !te_dtype_is_hp(in->dtype))
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s must be f32, f16 or bf16 with scaling none (is %s, %s)",
                  fn, arg, tecore_dtype_name(in->dtype), tecore_scaling_name(in->scaling));
  return TECORE_SUCCESS;
}

static tecore_result_t check_fp8_output(const struct tecore_tensor *out, const char *fn,
                                        const char *arg, unsigned *flags_out) {
  TE_ARG(out, "%s: %s is NULL", fn, arg);
  unsigned flags = (out->data ? TECORE_TENSOR_ROWWISE : 0u) |
                   (out->columnwise_data ? TECORE_TENSOR_COLUMNWISE : 0u);
  if (out->scaling == TECORE_SCALING_DELAYED) flags |= TECORE_TENSOR_NEED_SCALE;
  if (out->scaling == TECORE_SCALING_CURRENT)
    flags |= TECORE_TENSOR_NEED_SCALE | TECORE_TENSOR_NEED_AMAX;
  TE_CHECK(te_tensor_check(out, flags, fn, arg));
  if (out->scaling == TECORE_SCALING_NONE)
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s has scaling mode none (an FP8 mode is needed)", fn, arg);
  if (!(flags & (TECORE_TENSOR_ROWWISE | TECORE_TENSOR_COLUMNWISE)) && tecore_tensor_numel(out))
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s: data and columnwise_data are both 0", fn, arg);
  *flags_out = flags;
  return TECORE_SUCCESS;
}

/* Per-tensor, rowwise only (current scaling: the amax pass first). */
static tecore_result_t quantize_pt(const struct tecore_tensor *in, const struct tecore_tensor *out,
                                   uint64_t n, tecore_devptr_t noop, tecore_stream_t stream) {
  const int is_current = out->scaling == TECORE_SCALING_CURRENT;
  if (is_current) TE_CHECK(launch_amax(in->data, in->dtype, n, out->amax, 1, noop, stream));
  struct te_quantize_pt_args a = {
      .in = TE_DPTR(in->data), .out = TE_DPTR(out->data), .n = n, .in_dt = (int)in->dtype,
      .out_dt = (int)out->dtype, .scale = TE_DPTR(out->scale), .scale_inv = TE_DPTR(out->scale_inv),
      .scale_inv_col = TE_DPTR(out->columnwise_scale_inv), .amax = TE_DPTR(out->amax), .noop = TE_DPTR(noop),
      .current = is_current, .eps = out->amax_epsilon,
      .pow2 = (out->flags & TECORE_TENSOR_POW2_SCALES) ? 1 : 0};
  void *args[TE_KNPARAMS(TE_FP8_QUANTIZE_PT_PARAMS)];
  te_quantize_pt_args_ptrs(&a, args);
  return q_launch(K_QPT, q_pt_cfg(n), args, stream);
}

/* MXFP8, rowwise and / or columnwise. */
static tecore_result_t quantize_mx(const struct tecore_tensor *in, const struct tecore_tensor *out,
                                   size_t rows, size_t cols, tecore_devptr_t noop,
                                   tecore_stream_t stream) {
  uint64_t tiles = ((rows + TE_MX_TILE_R - 1) / TE_MX_TILE_R) * ((cols + TE_MX_TILE_C - 1) / TE_MX_TILE_C);
  struct te_quantize_mx_args a = {
      .in = TE_DPTR(in->data), .in_dt = (int)in->dtype, .rows = rows, .cols = cols,
      .out_row = TE_DPTR(out->data), .out_col = TE_DPTR(out->columnwise_data), .s_row = TE_DPTR(out->scale_inv),
      .s_col = TE_DPTR(out->columnwise_scale_inv), .out_dt = (int)out->dtype, .amax = TE_DPTR(out->amax),
      .noop = TE_DPTR(noop)};
  void *args[TE_KNPARAMS(TE_FP8_QUANTIZE_MX_PARAMS)];
  te_quantize_mx_args_ptrs(&a, args);
  /* a tile per warp, 4 warps a block; 6 blocks per SM are resident
   * (__launch_bounds__(128, 6), 32 KB of shared memory each): one wave */
  struct tecore_launch_cfg cfg = q_cfg((tiles + 3) / 4, 6);
  cfg.block[0] = 128;
  return q_launch(K_MX_F32 + a.in_dt, cfg, args, stream);   /* f32 0, f16 1, bf16 2 */
}

/* Block modes, and per-tensor with a transposed output. */
static tecore_result_t quantize_blk(const struct tecore_tensor *in, const struct tecore_tensor *out,
                                    size_t rows, size_t cols, tecore_devptr_t noop,
                                    tecore_stream_t stream) {
  struct te_quantize_blk_args a = {
      .in = TE_DPTR(in->data), .in_dt = (int)in->dtype, .rows = rows, .cols = cols,
      .out_row = TE_DPTR(out->data), .out_col = TE_DPTR(out->columnwise_data), .s_row = TE_DPTR(out->scale_inv),
      .s_col = TE_DPTR(out->columnwise_scale_inv), .out_dt = (int)out->dtype,
      .mode = out->scaling == TECORE_SCALING_BLOCK_1X128     ? TE_BLK_1X128
              : out->scaling == TECORE_SCALING_BLOCK_128X128 ? TE_BLK_128X128
                                                             : TE_BLK_TENSOR,
      .scale = TE_DPTR(out->scale), .eps = out->amax_epsilon,
      .pow2 = (out->flags & TECORE_TENSOR_POW2_SCALES) ? 1 : 0, .amax = TE_DPTR(out->amax),
      .noop = TE_DPTR(noop)};
  if (out->scaling == TECORE_SCALING_CURRENT) {
    TE_CHECK(launch_amax(in->data, in->dtype, (uint64_t)rows * cols, out->amax, 1, noop, stream));
    TE_CHECK(te_fp8_scale_from_amax(out, noop, stream));
    a.amax = NULL;   /* the amax is already exact */
  }
  uint64_t tiles = ((rows + TE_BLK_TILE - 1) / TE_BLK_TILE) * ((cols + TE_BLK_TILE - 1) / TE_BLK_TILE);
  void *args[TE_KNPARAMS(TE_FP8_QUANTIZE_BLK_PARAMS)];
  te_quantize_blk_args_ptrs(&a, args);
  return q_launch(K_BLK, q_cfg(tiles, 4), args, stream);
}

/* One quantization, arguments already checked. */
static tecore_result_t quantize_one(const struct tecore_tensor *in, const struct tecore_tensor *out,
                                    tecore_devptr_t noop, tecore_stream_t stream) {
  size_t rows, cols;
  te_tensor_view(out, &rows, &cols);
  if (te_scaling_per_tensor(out->scaling) && !out->columnwise_data)
    return quantize_pt(in, out, (uint64_t)rows * cols, noop, stream);
  if (out->scaling == TECORE_SCALING_MXFP8) return quantize_mx(in, out, rows, cols, noop, stream);
  return quantize_blk(in, out, rows, cols, noop, stream);
}

static tecore_result_t check_pair(const struct tecore_tensor *in, const struct tecore_tensor *out,
                                  const char *fn, const char *ain, const char *aout) {
  size_t ni = tecore_tensor_numel(in), no = tecore_tensor_numel(out);
  if (ni != no)
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s has %zu elements and %s has %zu", fn, ain, ni, aout, no);
  return TECORE_SUCCESS;
}

/* What a quantize writes (out's data, columnwise data, amax and scale
 * inverses) shares no byte with what it reads (in's data, out's scale, the
 * no-op flag) nor with itself: scale == scale_inv, amax inside the input or
 * an output over the input were accepted and gave garbage. */
static tecore_result_t q_alias(const struct tecore_tensor *in, const char *ain,
                               const struct tecore_tensor *out, const char *aout,
                               tecore_devptr_t noop_flag, const char *fn) {
  struct te_tensor_spans w = {0}, r = {0};
  te_tensor_spans(out, aout, TE_SPAN_WRITTEN, &w);
  te_tensor_spans(in, ain, TE_SPAN_DATA, &r);
  te_tensor_spans(out, aout, TE_SPAN_SCALE, &r);
  te_span_add(&r, "noop_flag", noop_flag, 4);
  return te_check_alias(w.span, w.n, r.span, r.n, TE_ALIAS_FORBID, fn);
}

TE_EXPORT tecore_result_t tecore_quantize(const struct tecore_tensor *in, struct tecore_tensor *out,
                                          tecore_devptr_t noop_flag, tecore_stream_t stream) {
  unsigned flags;
  TE_CHECK(check_hp_input(in, __func__, "in"));
  TE_CHECK(check_fp8_output(out, __func__, "out", &flags));
  TE_CHECK(check_pair(in, out, __func__, "in", "out"));
  TE_ARG(noop_flag % 4 == 0, "tecore_quantize: noop_flag (0x%llx) is not aligned to 4 bytes",
         (unsigned long long)noop_flag);
  TE_CHECK(q_alias(in, "in", out, "out", noop_flag, __func__));
  if (noop_flag) TE_CHECK(te_dev_check_range(noop_flag, 4, __func__, "noop_flag"));
  if (tecore_tensor_numel(out) == 0) return TECORE_SUCCESS;
  /* A columnwise output in the modes the cast-transpose family shares with
   * this one (same semantics, same bytes: te/transpose.h) goes through its
   * tiled kernel, which reaches more of the copy bandwidth than this file's
   * transposing paths (H100: 94% vs 65% per-tensor, 90% vs 80% MXFP8).
   * A no-op flag keeps the path here, which reads it. */
  if (!noop_flag && out->columnwise_data &&
      (out->scaling == TECORE_SCALING_DELAYED || out->scaling == TECORE_SCALING_CURRENT ||
       out->scaling == TECORE_SCALING_MXFP8)) {
    TE_CHECK(tecore_cast_transpose(in, out, stream));
    return TECORE_SUCCESS;
  }
  TE_CHECK(quantize_one(in, out, noop_flag, stream));
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_dequantize(const struct tecore_tensor *in, struct tecore_tensor *out,
                                            tecore_stream_t stream) {
  TE_CHECK(te_tensor_check(in, 0, __func__, "in"));
  TE_ARG(in->scaling != TECORE_SCALING_NONE,
         "tecore_dequantize: in has scaling mode none (an FP8 tensor is needed)");
  TE_CHECK(check_hp_input(out, __func__, "out"));
  TE_CHECK(check_pair(in, out, __func__, "in", "out"));
  int use_col = !in->data && in->scaling == TECORE_SCALING_MXFP8 && in->columnwise_data;
  TE_CHECK(te_tensor_check(in, use_col ? TECORE_TENSOR_COLUMNWISE : TECORE_TENSOR_ROWWISE,
                           __func__, "in"));
  {
    struct te_tensor_spans w = {0}, r = {0};
    te_tensor_spans(out, "out", TE_SPAN_DATA, &w);
    te_tensor_spans(in, "in", TE_SPAN_DATA | TE_SPAN_SCALE_INV, &r);
    TE_CHECK(te_check_alias(w.span, w.n, r.span, r.n, TE_ALIAS_FORBID, __func__));
  }
  size_t rows, cols;
  te_tensor_view(in, &rows, &cols);
  if (rows * cols == 0) return TECORE_SUCCESS;
  int mode;
  switch (in->scaling) {
  case TECORE_SCALING_MXFP8: mode = use_col ? TE_DQ_MX_COL : TE_DQ_MX_ROW; break;
  case TECORE_SCALING_BLOCK_1X128: mode = TE_DQ_1X128; break;
  case TECORE_SCALING_BLOCK_128X128: mode = TE_DQ_128X128; break;
  default: mode = TE_DQ_TENSOR; break;
  }
  struct te_dequantize_args a = {
      .in = TE_DPTR(use_col ? in->columnwise_data : in->data), .in_dt = (int)in->dtype,
      .out = TE_DPTR(out->data), .out_dt = (int)out->dtype, .rows = rows, .cols = cols, .mode = mode,
      .scale_inv = TE_DPTR(use_col ? in->columnwise_scale_inv : in->scale_inv)};
  void *args[TE_KNPARAMS(TE_FP8_DEQUANTIZE_PARAMS)];
  te_dequantize_args_ptrs(&a, args);
  TE_CHECK(q_launch(K_DEQ, q_cfg((rows * ((cols + 7) / 8) + QT - 1) / QT, 8), args, stream));
  return TECORE_SUCCESS;
}

/* Launches a batch of per-tensor, rowwise-only quantizations of one mode. */
static tecore_result_t quantize_batch(const struct tecore_tensor *const *in,
                                      const struct tecore_tensor *const *out, int count,
                                      int current, tecore_devptr_t noop, tecore_stream_t stream) {
  struct te_qmulti_params p;
  memset(&p, 0, sizeof p);
  p.noop = (const int *)TE_DPTR(noop);
  p.count = count;
  p.current = current;
  uint64_t cap = (uint64_t)te_sm_count() * 8, total = 0;
  for (int t = 0; t < count; t++) {
    struct te_qmulti_entry *e = &p.e[t];
    uint64_t n = tecore_tensor_numel(out[t]);
    uint64_t nb = (n + 16 * QT * 4 - 1) / (16 * QT * 4);   /* ~4 steps per thread */
    if (nb > cap) nb = cap;
    if (nb == 0) nb = 1;
    e->in = TE_DPTR(in[t]->data);
    e->out = TE_DPTR(out[t]->data);
    e->scale = (float *)TE_DPTR(out[t]->scale);
    e->scale_inv = (float *)TE_DPTR(out[t]->scale_inv);
    e->scale_inv_col = (float *)TE_DPTR(out[t]->columnwise_scale_inv);
    e->amax = (unsigned *)TE_DPTR(out[t]->amax);
    e->n = n;
    e->block0 = (unsigned)total;
    e->nblocks = (unsigned)nb;
    e->in_dt = (int)in[t]->dtype;
    e->out_dt = (int)out[t]->dtype;
    e->eps = out[t]->amax_epsilon;
    e->pow2 = (out[t]->flags & TECORE_TENSOR_POW2_SCALES) ? 1 : 0;
    total += nb;
  }
  struct te_qmulti_args a = {.p = &p};
  void *args[TE_KNPARAMS(TE_FP8_QMULTI_PARAMS)];
  te_qmulti_args_ptrs(&a, args);
  struct tecore_launch_cfg cfg = {.grid = {(unsigned)total, 1, 1}, .block = {QT, 1, 1}};
  if (current) {
    struct tecore_launch_cfg one = {.grid = {1, 1, 1}, .block = {QT, 1, 1}};
    TE_CHECK(q_launch(K_INIT_MULTI, one, args, stream));
    TE_CHECK(q_launch(K_AMAX_MULTI, cfg, args, stream));
  }
  TE_CHECK(q_launch(K_QMULTI, cfg, args, stream));
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_quantize_multi(const struct tecore_tensor *in,
                                                struct tecore_tensor *out, size_t count,
                                                tecore_devptr_t noop_flag, tecore_stream_t stream) {
  TE_ARG(count == 0 || in, "tecore_quantize_multi: in is NULL");
  TE_ARG(count == 0 || out, "tecore_quantize_multi: out is NULL");
  TE_ARG(noop_flag % 4 == 0, "tecore_quantize_multi: noop_flag (0x%llx) is not aligned to 4 bytes",
         (unsigned long long)noop_flag);
  char ain[32], aout[32];
  for (size_t i = 0; i < count; i++) {   /* check everything before launching anything */
    unsigned flags;
    snprintf(ain, sizeof ain, "in[%zu]", i);
    snprintf(aout, sizeof aout, "out[%zu]", i);
    TE_CHECK(check_hp_input(&in[i], __func__, ain));
    TE_CHECK(check_fp8_output(&out[i], __func__, aout, &flags));
    TE_CHECK(check_pair(&in[i], &out[i], __func__, ain, aout));
    TE_CHECK(q_alias(&in[i], ain, &out[i], aout, noop_flag, __func__));
    /* two outputs' data in one buffer: the later write wins (outputs may
     * share an amax or scale: those are reductions and reads) */
    struct te_tensor_spans w = {0};
    te_tensor_spans(&out[i], aout, TE_SPAN_DATA, &w);
    for (size_t j = 0; j < i; j++) {
      char aj[32];
      struct te_tensor_spans o = {0};
      snprintf(aj, sizeof aj, "out[%zu]", j);
      te_tensor_spans(&out[j], aj, TE_SPAN_DATA, &o);
      TE_CHECK(te_check_alias(w.span, w.n, o.span, o.n, TE_ALIAS_FORBID, __func__));
    }
  }
  if (noop_flag) TE_CHECK(te_dev_check_range(noop_flag, 4, __func__, "noop_flag"));
  const struct tecore_tensor *bin[2][TE_QMULTI_MAX], *bout[2][TE_QMULTI_MAX];
  int nb[2] = {0, 0};
  for (size_t i = 0; i < count; i++) {
    if (tecore_tensor_numel(&out[i]) == 0) continue;
    if (!te_scaling_per_tensor(out[i].scaling) || out[i].columnwise_data) {
      TE_CHECK(quantize_one(&in[i], &out[i], noop_flag, stream));
      continue;
    }
    int cur = out[i].scaling == TECORE_SCALING_CURRENT;
    bin[cur][nb[cur]] = &in[i];
    bout[cur][nb[cur]] = &out[i];
    if (++nb[cur] == TE_QMULTI_MAX) {
      TE_CHECK(quantize_batch(bin[cur], bout[cur], nb[cur], cur, noop_flag, stream));
      nb[cur] = 0;
    }
  }
  for (int cur = 0; cur < 2; cur++)
    if (nb[cur]) TE_CHECK(quantize_batch(bin[cur], bout[cur], nb[cur], cur, noop_flag, stream));
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_amax(const struct tecore_tensor *in, tecore_devptr_t amax,
                                      unsigned flags, tecore_devptr_t noop_flag,
                                      tecore_stream_t stream) {
  TE_CHECK(check_hp_input(in, __func__, "in"));
  TE_ARG(amax, "tecore_amax: amax is 0");
  TE_ARG(amax % 4 == 0, "tecore_amax: amax (0x%llx) is not aligned to 4 bytes",
         (unsigned long long)amax);
  TE_ARG(!(flags & ~TECORE_AMAX_ACCUMULATE), "tecore_amax: flags 0x%x has unknown bits", flags);
  TE_ARG(noop_flag % 4 == 0, "tecore_amax: noop_flag (0x%llx) is not aligned to 4 bytes",
         (unsigned long long)noop_flag);
  {
    struct te_tensor_spans w = {0}, r = {0};
    te_span_add(&w, "amax", amax, 4);
    te_tensor_spans(in, "in", TE_SPAN_DATA, &r);
    te_span_add(&r, "noop_flag", noop_flag, 4);
    TE_CHECK(te_check_alias(w.span, w.n, r.span, r.n, TE_ALIAS_FORBID, __func__));
  }
  /* the whole word, not its first byte: an amax in a buffer's last 3
   * bytes passed the launch's start-of-buffer check */
  TE_CHECK(te_dev_check_range(amax, 4, __func__, "amax"));
  if (noop_flag) TE_CHECK(te_dev_check_range(noop_flag, 4, __func__, "noop_flag"));
  TE_CHECK(launch_amax(in->data, in->dtype, tecore_tensor_numel(in), amax,
                       !(flags & TECORE_AMAX_ACCUMULATE), noop_flag, stream));
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_compute_scale(const struct tecore_tensor *t,
                                               tecore_devptr_t noop_flag, tecore_stream_t stream) {
  TE_CHECK(te_tensor_check(t, TECORE_TENSOR_NEED_AMAX | TECORE_TENSOR_NEED_SCALE, __func__, "t"));
  TE_ARG(te_scaling_per_tensor(t->scaling),
         "tecore_compute_scale: t has scaling mode %s (delayed or current is needed)",
         tecore_scaling_name(t->scaling));
  TE_ARG(noop_flag % 4 == 0, "tecore_compute_scale: noop_flag (0x%llx) is not aligned to 4 bytes",
         (unsigned long long)noop_flag);
  {
    /* the kernel writes scale and the scale inverses from amax: a scale
     * that is scale_inv (or amax, or the flag) was accepted, and the
     * value read back depended on the order of the writes */
    struct te_tensor_spans w = {0}, r = {0};
    te_tensor_spans(t, "t", TE_SPAN_SCALE | TE_SPAN_SCALE_INV, &w);
    te_tensor_spans(t, "t", TE_SPAN_AMAX, &r);
    te_span_add(&r, "noop_flag", noop_flag, 4);
    TE_CHECK(te_check_alias(w.span, w.n, r.span, r.n, TE_ALIAS_FORBID, __func__));
  }
  if (noop_flag) TE_CHECK(te_dev_check_range(noop_flag, 4, __func__, "noop_flag"));
  TE_CHECK(te_fp8_scale_from_amax(t, noop_flag, stream));
  return TECORE_SUCCESS;
}
