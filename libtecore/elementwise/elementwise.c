/* SPDX-License-Identifier: Apache-2.0 */
/* elementwise.c -- tecore_fill, tecore_fill_uniform and tecore_scale_add: libtecore's first
 * kernel table, and the pattern every kernel family follows:
 *   1. kernels/<family>.cu   the CUDA kernels (extern "C" symbols)
 *   2. the vdev C functions (elementwise_vdev.c), built from the same
 *      kernels/common math
 *   3. a static tecore_kernel_table naming both, registered once, its
 *      entries and the vdev argument structs generated from the parameter
 *      lists of kernels/common/elementwise_params.h (kparams.h)
 *   4. public entry points that validate, pick a launch shape and launch. */
#include "elementwise/elementwise_internal.h"

/* ---- the table --------------------------------------------------------- */

enum {
  K_FILL, K_SCALE_ADD, K_MEMSET, K_COPY, K_COPY2D, K_COLSUM_PART, K_COLSUM_FINAL, K_QKV_KV_BIAS,
  K_INIT_UNIFORM
};
static const struct tecore_kernel_def ew_kernels[] = {
    [K_FILL] = TE_KDEF("te_fill", te_ew_vdev_fill, TE_FILL_PARAMS),
    [K_SCALE_ADD] = TE_KDEF("te_scale_add", te_ew_vdev_scale_add, TE_SCALE_ADD_PARAMS),
    [K_MEMSET] = TE_KDEF("te_memset", te_ew_vdev_memset, TE_MEMSET_PARAMS),
    [K_COPY] = TE_KDEF("te_copy", te_ew_vdev_copy, TE_COPY_PARAMS),
    [K_COPY2D] = TE_KDEF("te_copy2d_u32", te_ew_vdev_copy2d_u32, TE_COPY2D_U32_PARAMS),
    [K_COLSUM_PART] = TE_KDEF("te_colsum_part", te_ew_vdev_colsum_part, TE_COLSUM_PART_PARAMS),
    [K_COLSUM_FINAL] = TE_KDEF("te_colsum_final", te_ew_vdev_colsum_final,
                               TE_COLSUM_FINAL_PARAMS),
    [K_QKV_KV_BIAS] = TE_KDEF("te_qkv_kv_bias", te_ew_vdev_qkv_kv_bias, TE_QKV_KV_BIAS_PARAMS),
    [K_INIT_UNIFORM] = TE_KDEF("te_init_uniform", te_ew_vdev_init_uniform,
                               TE_INIT_UNIFORM_PARAMS),
};

static const struct te_kalign ew_align[] = {
    [K_FILL] = TE_KALIGN(TE_FILL_PARAMS),
    [K_SCALE_ADD] = TE_KALIGN(TE_SCALE_ADD_PARAMS),
    [K_MEMSET] = TE_KALIGN(TE_MEMSET_PARAMS),
    [K_COPY] = TE_KALIGN(TE_COPY_PARAMS),
    [K_COPY2D] = TE_KALIGN(TE_COPY2D_U32_PARAMS),
    [K_COLSUM_PART] = TE_KALIGN(TE_COLSUM_PART_PARAMS),
    [K_COLSUM_FINAL] = TE_KALIGN(TE_COLSUM_FINAL_PARAMS),
    [K_QKV_KV_BIAS] = TE_KALIGN(TE_QKV_KV_BIAS_PARAMS),
    [K_INIT_UNIFORM] = TE_KALIGN(TE_INIT_UNIFORM_PARAMS),
};

TE_KERNEL_TABLE_FATBIN_ALIGNED(ew_first_id, "libtecore/elementwise", ew_kernels, ew_align,
                               elementwise)

/* 1-D grid: enough blocks to fill the device, capped; grid-stride inside. */
static void ew_shape(size_t count, struct tecore_launch_cfg *cfg) {
  size_t blocks = (count + 255) / 256;
  if (blocks > 132u * 16u) blocks = 132u * 16u;
  if (blocks == 0) blocks = 1;
  *cfg = (struct tecore_launch_cfg){.grid = {(unsigned)blocks, 1, 1}, .block = {256, 1, 1}};
}

/* te_memset's registry id (graph_memset.c puts it where a captured
 * memset was), -1 when the table did not register. */
int te_memset_kernel_id(void) {
  int first = ew_first_id();
  return first < 0 ? -1 : first + K_MEMSET;
}

/* te_copy's registry id (graph_memset.c puts it where a captured copy
 * was), -1 when the table did not register. */
int te_copy_kernel_id(void) {
  int first = ew_first_id();
  return first < 0 ? -1 : first + K_COPY;
}

tecore_result_t te_copy2d_u32(const struct te_copy2d *c, tecore_stream_t stream) {
  int id = ew_first_id();
  if (id < 0) return TECORE_ERR_INTERNAL;
  size_t n = c->drows * c->dcols;
  if (n == 0) return TECORE_SUCCESS;
  struct tecore_launch_cfg cfg;
  ew_shape(n, &cfg);
  struct te_copy2d_u32_args k = {.dst = TE_DPTR(c->dst), .src = TE_DPTR(c->src),
                                 .drows = c->drows, .dcols = c->dcols, .srows = c->srows,
                                 .scols = c->scols, .dsi = c->dsi, .dsj = c->dsj,
                                 .ssi = c->ssi, .ssj = c->ssj};
  void *args[TE_KNPARAMS(TE_COPY2D_U32_PARAMS)];
  te_copy2d_u32_args_ptrs(&k, args);
  return te_kernel_launch_pdl(id + K_COPY2D, &cfg, args, stream);
}

/* ---- column sums -------------------------------------------------------------
 * A block of te_colsum_part covers TE_COLSUM_VECS * 8 columns; the parts
 * (rows a multiple of TE_COLSUM_UNROLL * TE_COLSUM_LANES) are as many as
 * make about four blocks an SM, so the whole read is in flight at once;
 * at most TE_COLSUM_MAX_BLOCKS blocks, which bounds the scratch. */
#define TE_COLSUM_ROWS_Q (TE_COLSUM_UNROLL * TE_COLSUM_LANES)
#define TE_COLSUM_MAX_BLOCKS 2048u

size_t te_colsum_plan(size_t rows, size_t cols, size_t *parts) {
  size_t gx = te_cdiv(cols, TE_COLSUM_VECS * 8);
  size_t want = te_cdiv(4u * te_sm_count(), gx);
  if (want * gx > TE_COLSUM_MAX_BLOCKS) want = TE_COLSUM_MAX_BLOCKS / gx;
  if (want < 1) want = 1;
  size_t rpp = te_cdiv(te_cdiv(rows, want), TE_COLSUM_ROWS_Q) * TE_COLSUM_ROWS_Q;
  *parts = te_cdiv(rows, rpp);
  return rpp;
}

size_t te_colsum_ws_bytes(size_t cols) {
  /* parts * gx <= TE_COLSUM_MAX_BLOCKS, so parts * cols is at most that
   * times a block's columns (or the one part of a wider matrix) */
  size_t gx = te_cdiv(cols, TE_COLSUM_VECS * 8);
  size_t parts = gx > TE_COLSUM_MAX_BLOCKS ? 1 : TE_COLSUM_MAX_BLOCKS / gx;
  return parts * cols * sizeof(float);
}

tecore_result_t te_colsum(tecore_devptr_t out, const struct tecore_tensor *in, int acc,
                          tecore_devptr_t ws, size_t ws_bytes, tecore_stream_t stream) {
  return te_colsum_cols(out, in, 0, in->ndim == 2 ? in->shape[1] : 0, acc, ws, ws_bytes, stream);
}

tecore_result_t te_colsum_cols(tecore_devptr_t out, const struct tecore_tensor *in, size_t c0,
                               size_t cols, int acc, tecore_devptr_t ws, size_t ws_bytes,
                               tecore_stream_t stream) {
  int id = ew_first_id();
  if (id < 0) return TE_ERR(TECORE_ERR_INTERNAL, "the elementwise kernels did not register");
  size_t rows = in->shape[0], ld = in->shape[1];
  const tecore_devptr_t data = in->data + c0 * tecore_dtype_size(in->dtype);
  if (in->ndim != 2 || ld % 8 || cols % 8 || c0 % 8 || c0 + cols > ld || data % 16 ||
      (in->dtype != TECORE_DTYPE_F32 && in->dtype != TECORE_DTYPE_F16 &&
       in->dtype != TECORE_DTYPE_BF16))
    return TE_ERR(TECORE_ERR_INTERNAL, "column sums: columns %zu..%zu of a 2-D f32/f16/bf16 "
                  "tensor, 16-byte aligned, columns and row length multiples of 8 (got %s "
                  "[%zu][%zu])", c0, c0 + cols, tecore_dtype_name(in->dtype), rows, ld);
  if (!cols) return TECORE_SUCCESS;
  size_t parts = 1, rpp = rows ? te_colsum_plan(rows, cols, &parts) : 1;
  if (!rows) parts = 0;
  if (parts * cols * sizeof(float) > ws_bytes)
    return TE_ERR(TECORE_ERR_INTERNAL, "column sums: %zu bytes of scratch, %zu needed", ws_bytes,
                  parts * cols * sizeof(float));
  if (parts) {
    size_t gx = te_cdiv(cols, TE_COLSUM_VECS * 8);
    struct tecore_launch_cfg cfg = {.grid = {(unsigned)gx, (unsigned)parts, 1},
                                    .block = {TE_COLSUM_VECS, TE_COLSUM_LANES, 1}};
    struct te_colsum_part_args k = {.in = TE_DPTR(data), .ws = TE_DPTR(ws), .rows = rows,
                                    .cols = cols, .ld = ld, .rpp = rpp,
                                    .dtype = (int)in->dtype};
    void *args[TE_KNPARAMS(TE_COLSUM_PART_PARAMS)];
    te_colsum_part_args_ptrs(&k, args);
    TE_CHECK(te_kernel_launch_pdl(id + K_COLSUM_PART, &cfg, args, stream));
  }
  return te_colsum_final(out, ws, parts, cols, acc, stream);
}

tecore_result_t te_colsum_final(tecore_devptr_t out, tecore_devptr_t ws, size_t parts,
                                size_t cols, int acc, tecore_stream_t stream) {
  int id = ew_first_id();
  if (id < 0) return TE_ERR(TECORE_ERR_INTERNAL, "the elementwise kernels did not register");
  if (!cols) return TECORE_SUCCESS;
  struct tecore_launch_cfg cfg = {.grid = {(unsigned)te_cdiv(cols, TE_COLSUM_FCOLS), 1, 1},
                                  .block = {TE_COLSUM_FCOLS, TE_COLSUM_FLANES, 1}};
  struct te_colsum_final_args f = {.ws = TE_DPTR(ws), .out = TE_DPTR(out), .parts = parts,
                                   .cols = cols, .acc = acc != 0};
  void *args[TE_KNPARAMS(TE_COLSUM_FINAL_PARAMS)];
  te_colsum_final_args_ptrs(&f, args);
  return te_kernel_launch_pdl(id + K_COLSUM_FINAL, &cfg, args, stream);
}

tecore_result_t te_qkv_kv_bias(tecore_devptr_t out, tecore_devptr_t s, tecore_devptr_t w,
                               tecore_dtype_t wdt, size_t n_out, const struct te_qkv_heads *h,
                               int acc, tecore_stream_t stream) {
  int id = ew_first_id();
  const int heads = h->heads, kv_heads = h->kv_heads, head_dim = h->head_dim;
  if (id < 0) return TE_ERR(TECORE_ERR_INTERNAL, "the elementwise kernels did not register");
  if (!out || !s || !w || out % 4 || s % 4 || (wdt != TECORE_DTYPE_BF16 && wdt != TECORE_DTYPE_F16) ||
      w % 2 || n_out == 0 || n_out > UINT32_MAX || heads < 1 || kv_heads < 1 ||
      heads % kv_heads || head_dim < 1 || (size_t)heads * (size_t)head_dim > UINT32_MAX / 2)
    return TE_ERR(TECORE_ERR_INTERNAL, "te_qkv_kv_bias: %zu rows of %s, heads %d over %d of %d: "
                  "not a case it takes", n_out, tecore_dtype_name(wdt), heads, kv_heads, head_dim);
  const size_t cols = 2 * (size_t)kv_heads * (size_t)head_dim;
  struct tecore_launch_cfg cfg = {.grid = {(unsigned)te_cdiv(cols, TE_QKV_KV_COLS), 1, 1},
                                  .block = {TE_QKV_KV_COLS, TE_QKV_KV_LANES, 1}};
  struct te_qkv_kv_bias_args k = {.out = TE_DPTR(out), .s = TE_DPTR(s), .w = TE_DPTR(w),
                                  .n_out = (unsigned)n_out, .heads = heads,
                                  .kv_heads = kv_heads, .head_dim = head_dim, .dtype = (int)wdt,
                                  .acc = acc != 0};
  void *args[TE_KNPARAMS(TE_QKV_KV_BIAS_PARAMS)];
  te_qkv_kv_bias_args_ptrs(&k, args);
  return te_kernel_launch_pdl(id + K_QKV_KV_BIAS, &cfg, args, stream);
}

tecore_result_t te_init_uniform(tecore_devptr_t dst, tecore_dtype_t dtype, size_t n,
                                uint64_t state, double bound, tecore_dtype_t round,
                                tecore_stream_t stream) {
  int id = ew_first_id();
  if (id < 0) return TE_ERR(TECORE_ERR_INTERNAL, "the elementwise kernels did not register");
  if (!dst || dst % tecore_dtype_size(dtype) ||
      (dtype != TECORE_DTYPE_F32 && dtype != TECORE_DTYPE_F16 && dtype != TECORE_DTYPE_BF16))
    return TE_ERR(TECORE_ERR_INTERNAL, "te_init_uniform: %s at 0x%llx: not a case it takes",
                  tecore_dtype_name(dtype), (unsigned long long)dst);
  if (n == 0) return TECORE_SUCCESS;
  struct tecore_launch_cfg cfg;
  ew_shape(n, &cfg);
  struct te_init_uniform_args k = {
      .dst = TE_DPTR(dst), .dtype = (int)dtype, .n = n, .state = state, .bound = bound,
      .round = round == TECORE_DTYPE_F16 ? TE_EW_F16 : round == TECORE_DTYPE_BF16 ? TE_EW_BF16 : -1};
  void *args[TE_KNPARAMS(TE_INIT_UNIFORM_PARAMS)];
  te_init_uniform_args_ptrs(&k, args);
  return te_kernel_launch_pdl(id + K_INIT_UNIFORM, &cfg, args, stream);
}

static tecore_result_t ew_check_dtype(tecore_dtype_t dtype, const char *fn) {
  if (dtype != TECORE_DTYPE_F32 && dtype != TECORE_DTYPE_F16 && dtype != TECORE_DTYPE_BF16)
    return TE_ERR(TECORE_ERR_INVALID, "%s: dtype %s is not f32, f16 or bf16", fn,
                  tecore_dtype_name(dtype));
  return TECORE_SUCCESS;
}

static tecore_result_t ew_check_ptr(tecore_devptr_t p, tecore_dtype_t dtype, const char *fn,
                                    const char *arg) {
  if (p == 0) return TE_ERR(TECORE_ERR_INVALID, "%s: %s is NULL", fn, arg);
  if (p % tecore_dtype_size(dtype))
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s (0x%llx) is not aligned to %zu bytes", fn, arg,
                  (unsigned long long)p, tecore_dtype_size(dtype));
  return TECORE_SUCCESS;
}

/* The fill value rounded once, from double straight to dtype (nearest
 * even).  Through float with round-to-odd: float keeps more than two bits
 * beyond f16/bf16, so the final rounding then lands where a direct
 * rounding would; the result is exact in float and the kernel stores it
 * without rounding again. */
static float fill_value(double v, tecore_dtype_t dtype) {
  float f = (float)v;
  if (dtype == TECORE_DTYPE_F32 || v != v) return f;
  if ((double)f != v) {
    uint32_t u = te_f32_bits(f);
    if (fabs((double)f) > fabs(v)) u--; /* truncate toward zero ... */
    f = te_bits_f32(u | 1u);            /* ... and mark it inexact */
  }
  return dtype == TECORE_DTYPE_F16 ? te_f16_to_f32(te_f32_to_f16(f))
                                   : te_bf16_to_f32(te_f32_to_bf16(f));
}

TE_EXPORT tecore_result_t tecore_fill(tecore_devptr_t dst, tecore_dtype_t dtype, size_t count,
                                      double value, tecore_stream_t stream) {
  TE_CHECK(ew_check_dtype(dtype, __func__));
  TE_CHECK(ew_check_ptr(dst, dtype, __func__, "dst"));
  if (count == 0) return TECORE_SUCCESS;
  TE_ARG(count <= SIZE_MAX / tecore_dtype_size(dtype), "%s: count %zu overflows a byte count",
         __func__, count);
  TE_CHECK(te_dev_check_range(dst, count * tecore_dtype_size(dtype), __func__, "dst"));
  int id = ew_first_id();
  if (id < 0) return TECORE_ERR_INTERNAL;
  struct tecore_launch_cfg cfg;
  ew_shape(count, &cfg);
  struct te_fill_args k = {.dst = TE_DPTR(dst), .dtype = (int)dtype, .n = count,
                          .value = fill_value(value, dtype)};
  void *args[TE_KNPARAMS(TE_FILL_PARAMS)];
  te_fill_args_ptrs(&k, args);
  TE_CHECK(te_kernel_launch_pdl(id + K_FILL, &cfg, args, stream));
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_fill_uniform(tecore_devptr_t dst, tecore_dtype_t dtype,
                                              size_t count, double bound, uint64_t seed,
                                              uint64_t offset, tecore_stream_t stream) {
  TE_CHECK(ew_check_dtype(dtype, __func__));
  TE_CHECK(ew_check_ptr(dst, dtype, __func__, "dst"));
  TE_ARG(isfinite(bound) && bound >= 0, "%s: bound %g is not finite and >= 0", __func__, bound);
  if (count == 0) return TECORE_SUCCESS;
  TE_ARG(count <= SIZE_MAX / tecore_dtype_size(dtype), "%s: count %zu overflows a byte count",
         __func__, count);
  TE_CHECK(te_dev_check_range(dst, count * tecore_dtype_size(dtype), __func__, "dst"));
  /* the generator's state before draw offset + 1 (it steps, then mixes) */
  uint64_t state = seed + offset * TE_SPLITMIX_STEP;
  return te_init_uniform(dst, dtype, count, state, bound, TECORE_DTYPE_F32, stream);
}

TE_EXPORT tecore_result_t tecore_scale_add(tecore_devptr_t dst, tecore_devptr_t a, float alpha,
                                           tecore_devptr_t b, float beta, tecore_dtype_t dtype,
                                           size_t count, tecore_stream_t stream) {
  TE_CHECK(ew_check_dtype(dtype, __func__));
  TE_CHECK(ew_check_ptr(dst, dtype, __func__, "dst"));
  TE_CHECK(ew_check_ptr(a, dtype, __func__, "a"));
  TE_CHECK(ew_check_ptr(b, dtype, __func__, "b"));
  if (count == 0) return TECORE_SUCCESS;
  TE_ARG(count <= SIZE_MAX / tecore_dtype_size(dtype), "%s: count %zu overflows a byte count",
         __func__, count);
  size_t bytes = count * tecore_dtype_size(dtype);
  TE_CHECK(te_dev_check_range(dst, bytes, __func__, "dst"));
  TE_CHECK(te_dev_check_range(a, bytes, __func__, "a"));
  TE_CHECK(te_dev_check_range(b, bytes, __func__, "b"));
  int id = ew_first_id();
  if (id < 0) return TECORE_ERR_INTERNAL;
  struct tecore_launch_cfg cfg;
  ew_shape(count, &cfg);
  struct te_scale_add_args k = {.dst = TE_DPTR(dst), .a = TE_DPTR(a), .alpha = alpha,
                               .b = TE_DPTR(b), .beta = beta, .dtype = (int)dtype, .n = count};
  void *args[TE_KNPARAMS(TE_SCALE_ADD_PARAMS)];
  te_scale_add_args_ptrs(&k, args);
  TE_CHECK(te_kernel_launch_pdl(id + K_SCALE_ADD, &cfg, args, stream));
  return TECORE_SUCCESS;
}
