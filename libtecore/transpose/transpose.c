/* SPDX-License-Identifier: Apache-2.0 */
/* transpose.c -- the cast-transpose family (te/transpose.h): the kernel
 * table of kernels/transpose.cu and its vdev implementation, argument
 * checks, and the public entry points that pick the variant, the vector
 * paths and the grid, and launch (two passes for current scaling, a
 * second kernel for dbias). */
#include "transpose/transpose_internal.h"
#include <te/transpose.h>
#include "common/transpose.h"

/* ---- the table -------------------------------------------------------------
 * Kernel index: db * 30 + mx * 15 + (act + 1) * 3 + input dtype (F32 0,
 * F16 1, BF16 2, the tecore_dtype_t values), db = 1 for the _db variants
 * that make dbias partial sums; then the dbias reduction. */

#define CT_NACT 5   /* none, gelu, relu, silu, qgelu */
#define CT_NDT 3
#define CT_NVAR (2 * CT_NACT * CT_NDT)   /* per dbias choice */
#define CT_K_REDUCE (2 * CT_NVAR)
#define CT_K_BYTE_T (CT_K_REDUCE + 1)

#define CT_DEF(nm) TE_KDEF(nm, te_ct_vdev, TE_CT_PARAMS)
#define CT_DEFS_ACT(mode, act, sfx)                                                        \
  CT_DEF("te_ct_" #mode "_" #act "_f32" sfx), CT_DEF("te_ct_" #mode "_" #act "_f16" sfx), \
      CT_DEF("te_ct_" #mode "_" #act "_bf16" sfx)
#define CT_DEFS_MODE(mode, sfx)                                                            \
  CT_DEFS_ACT(mode, none, sfx), CT_DEFS_ACT(mode, gelu, sfx), CT_DEFS_ACT(mode, relu, sfx), \
      CT_DEFS_ACT(mode, silu, sfx), CT_DEFS_ACT(mode, qgelu, sfx)

static const struct tecore_kernel_def ct_kernels[] = {
    CT_DEFS_MODE(pt, ""),
    CT_DEFS_MODE(mx, ""),
    CT_DEFS_MODE(pt, "_db"),
    CT_DEFS_MODE(mx, "_db"),
    [CT_K_REDUCE] = TE_KDEF("te_ct_dbias_reduce", te_ct_vdev_dbias_reduce, TE_CTR_PARAMS),
    [CT_K_BYTE_T] = TE_KDEF("te_ct_byte_transpose", te_ct_vdev_byte_transpose, TE_CTB_PARAMS),
};

/* The act kinds of kernels/common/act.h in table order (after "none"). */
_Static_assert(TE_ACT_GELU == 0 && TE_ACT_RELU == 1 && TE_ACT_SILU == 2 && TE_ACT_QGELU == 3,
               "kernel table order follows the act kinds");
_Static_assert(TECORE_DTYPE_F32 == 0 && TECORE_DTYPE_F16 == 1 && TECORE_DTYPE_BF16 == 2,
               "kernel table order follows the input dtypes");

#define CT_ALIGN TE_KALIGN(TE_CT_PARAMS)
#define CT_ALIGN_MODE CT_ALIGN, CT_ALIGN, CT_ALIGN, CT_ALIGN, CT_ALIGN, CT_ALIGN, CT_ALIGN, \
                      CT_ALIGN, CT_ALIGN, CT_ALIGN, CT_ALIGN, CT_ALIGN, CT_ALIGN, CT_ALIGN, CT_ALIGN
static const struct te_kalign ct_align[] = {
    CT_ALIGN_MODE, CT_ALIGN_MODE, CT_ALIGN_MODE, CT_ALIGN_MODE,
    [CT_K_REDUCE] = TE_KALIGN(TE_CTR_PARAMS),
    [CT_K_BYTE_T] = TE_KALIGN(TE_CTB_PARAMS),
};

TE_KERNEL_TABLE_FATBIN_ALIGNED(ct_first_id, "libtecore/transpose", ct_kernels, ct_align,
                               transpose)

/* ---- checks ------------------------------------------------------------------ */

/* A call: the input (dy for the dact variant), x (dact: the forward's
 * input), out, dbias and its workspace (or NULL and 0). */
struct ct_call {
  const struct tecore_tensor *in, *x, *out, *dbias;
  int act;                   /* TE_CT_ACT_NONE or a TE_ACT_* kind */
  tecore_devptr_t ws;
};

/* The output: an FP8 tensor this family writes, with in's 2-D view. */
static tecore_result_t ct_check_out(const struct tecore_tensor *out, size_t rows, size_t cols,
                                    const char *fn) {
  if (!out) return TE_ERR(TECORE_ERR_INVALID, "%s: out is NULL", fn);
  TE_CHECK(te_tensor_check(out, 0, fn, "out"));
  switch (out->scaling) {
    case TECORE_SCALING_DELAYED:
    case TECORE_SCALING_CURRENT:
    case TECORE_SCALING_MXFP8:
      break;
    case TECORE_SCALING_BLOCK_1X128:
    case TECORE_SCALING_BLOCK_128X128:
      return TE_ERR(TECORE_ERR_NOT_SUPPORTED,
                    "%s: out: scaling mode %s is not supported by the cast-transpose kernels "
                    "(delayed, current or mxfp8); use tecore_quantize",
                    fn, tecore_scaling_name(out->scaling));
    default:
      return TE_ERR(TECORE_ERR_INVALID,
                    "%s: out: scaling mode %s: the output must be FP8 with delayed, current or "
                    "mxfp8 scaling",
                    fn, tecore_scaling_name(out->scaling));
  }
  size_t orows, ocols;
  te_tensor_view(out, &orows, &ocols);
  if (orows != rows || ocols != cols)
    return TE_ERR(TECORE_ERR_INVALID,
                  "%s: out: 2-D view %zu x %zu differs from the input's %zu x %zu", fn, orows,
                  ocols, rows, cols);
  if (rows && cols && !out->data && !out->columnwise_data)
    return TE_ERR(TECORE_ERR_INVALID,
                  "%s: out: data and columnwise_data are both 0 (nothing to write)", fn);
  unsigned need = 0;
  if (out->data) need |= TECORE_TENSOR_ROWWISE;
  if (out->columnwise_data) need |= TECORE_TENSOR_COLUMNWISE;
  if (te_scaling_per_tensor(out->scaling)) need |= TECORE_TENSOR_NEED_SCALE;
  if (out->scaling == TECORE_SCALING_CURRENT) need |= TECORE_TENSOR_NEED_AMAX;
  TE_CHECK(te_tensor_check(out, need, fn, "out"));
  return TECORE_SUCCESS;
}

static tecore_result_t ct_check_dbias(const struct tecore_tensor *dbias, size_t cols,
                                      const char *fn) {
  TE_CHECK(te_check_hp_input(dbias, fn, "dbias"));
  size_t n = tecore_tensor_numel(dbias);
  if (n != cols)
    return TE_ERR(TECORE_ERR_INVALID, "%s: dbias: has %zu elements, the input has %zu columns",
                  fn, n, cols);
  return TECORE_SUCCESS;
}

/* No output may overlap an input or another output: out's copies, amax
 * and scale inverses, dbias and the workspace (ws_bytes of k->ws, used
 * only with dbias) are written; the input, x and out's scale are read
 * (scale == scale_inv was accepted). */
static tecore_result_t ct_check_alias(const struct ct_call *k, size_t ws_bytes, size_t rows,
                                      size_t cols, const char *fn) {
  const struct tecore_tensor *in = k->in, *x = k->x, *out = k->out, *dbias = k->dbias;
  const size_t n = rows * cols;
  struct te_tensor_spans l = {.access = TE_ACCESS_WRITE};
  te_span_add(&l, "out->data", out->data, n);
  te_span_add(&l, "out->columnwise_data", out->columnwise_data, n);
  te_tensor_spans(out, "out", TE_SPAN_AMAX | TE_SPAN_SCALE_INV, &l);
  if (dbias) te_span_add(&l, "dbias->data", dbias->data, cols * tecore_dtype_size(dbias->dtype));
  te_span_add(&l, "workspace", dbias ? k->ws : 0, dbias ? ws_bytes : 0);
  l.access = TE_ACCESS_READ;
  te_tensor_spans(out, "out", TE_SPAN_SCALE, &l);
  te_span_add(&l, "the input", in->data, n * tecore_dtype_size(in->dtype));
  if (x) te_span_add(&l, "x", x->data, n * tecore_dtype_size(x->dtype));
  return te_check_spans(l.span, l.n, fn);
}

static size_t ct_ws_bytes(size_t rows, size_t cols) {
  if (!rows || !cols) return 0;
  struct te_ct_shape sh = te_ct_shape_of(rows, cols);
  return (size_t)sh.grid_y * cols * sizeof(float);
}

/* ---- launch ------------------------------------------------------------------- */

static tecore_result_t ct_launch_main(const struct ct_call *k, size_t rows, size_t cols,
                                      unsigned extra_flags, tecore_devptr_t amax,
                                      tecore_devptr_t ws, tecore_stream_t stream) {
  int id = ct_first_id();
  if (id < 0)
    return TE_ERR(TECORE_ERR_INTERNAL, "the cast-transpose kernel table did not register");
  const struct tecore_tensor *in = k->in, *out = k->out;
  const int mx = out->scaling == TECORE_SCALING_MXFP8;
  const size_t isz = tecore_dtype_size(in->dtype);
  unsigned flags = TE_CT_F_IN(in->dtype) | TE_CT_F_OUT(out->dtype) | TE_CT_F_ACT(k->act) |
                   extra_flags;
  if (mx) flags |= TE_CT_F_MX;
  if (te_al16(in->data) && (!k->x || te_al16(k->x->data)) && (cols * isz) % 16 == 0)
    flags |= TE_CT_F_VEC_IN;
  if (te_al16(out->data) && cols % 16 == 0) flags |= TE_CT_F_VEC_ROW;
  if (te_al16(out->columnwise_data) && (mx ? cols : rows) % 16 == 0) flags |= TE_CT_F_VEC_COL;

  struct te_ct_shape sh = te_ct_shape_of(rows, cols);
  struct tecore_launch_cfg cfg = {.grid = {sh.grid_x, sh.grid_y, 1},
                                  .block = {te_ct_threads(flags), 1, 1}};
  const int kidx = (ws ? CT_NVAR : 0) + mx * CT_NACT * CT_NDT + (k->act + 1) * CT_NDT +
                   (int)in->dtype;
  struct te_ct_args a = {
      .in = TE_DPTR(in->data), .x = k->x ? TE_DPTR(k->x->data) : NULL,
      .orow = TE_DPTR(out->data), .ocol = TE_DPTR(out->columnwise_data),
      .scale = mx ? NULL : TE_DPTR(out->scale), .amax = TE_DPTR(amax),
      .sinv = TE_DPTR(out->scale_inv), .csinv = TE_DPTR(out->columnwise_scale_inv),
      .ws = TE_DPTR(ws), .rows = rows, .cols = cols, .tpb = sh.tpb, .flags = flags};
  void *args[TE_KNPARAMS(TE_CT_PARAMS)];
  te_ct_args_ptrs(&a, args);
  TE_CHECK(te_kernel_launch_pdl(id + kidx, &cfg, args, stream));
  return TECORE_SUCCESS;
}

static tecore_result_t ct_launch_reduce(tecore_devptr_t ws, const struct tecore_tensor *dbias,
                                        size_t rows, size_t cols, tecore_stream_t stream) {
  int id = ct_first_id();
  if (id < 0)
    return TE_ERR(TECORE_ERR_INTERNAL, "the cast-transpose kernel table did not register");
  struct te_ct_shape sh = te_ct_shape_of(rows, cols);
  size_t blocks = (cols + TE_CT_RED_COLS - 1) / TE_CT_RED_COLS;
  if (blocks > 0x7fffffffu)
    return TE_ERR(TECORE_ERR_INVALID, "dbias: %zu columns are too many for one launch", cols);
  struct tecore_launch_cfg cfg = {.grid = {(unsigned)blocks, 1, 1},
                                  .block = {TE_CT_RED_COLS * TE_CT_RED_CHUNKS, 1, 1}};
  struct te_ctr_args a = {.ws = TE_DPTR(ws), .dbias = TE_DPTR(dbias->data), .parts = sh.grid_y,
                          .cols = cols, .dtype = (int)dbias->dtype};
  void *args[TE_KNPARAMS(TE_CTR_PARAMS)];
  te_ctr_args_ptrs(&a, args);
  TE_CHECK(te_kernel_launch_pdl(id + CT_K_REDUCE, &cfg, args, stream));
  return TECORE_SUCCESS;
}

tecore_result_t te_byte_transpose(tecore_devptr_t out, tecore_devptr_t in, size_t rows,
                                  size_t cols, tecore_stream_t stream) {
  int id = ct_first_id();
  if (id < 0)
    return TE_ERR(TECORE_ERR_INTERNAL, "the cast-transpose kernel table did not register");
  if (!rows || !cols) return TECORE_SUCCESS;
  const size_t ct = te_cdiv(cols, TE_CT_TILE), rt = te_cdiv(rows, TE_CT_TILE);
  if (ct > 0x7fffffffu)
    return TE_ERR(TECORE_ERR_INVALID, "byte transpose: %zu columns are too many for one launch",
                  cols);
  /* one block a tile; past the grid's y limit the blocks stride */
  struct tecore_launch_cfg cfg = {
      .grid = {(unsigned)ct, (unsigned)(rt < TE_CT_MAX_GRID_Y ? rt : TE_CT_MAX_GRID_Y), 1},
      .block = {TE_CT_THREADS, 1, 1}};
  struct te_ctb_args a = {.in = TE_DPTR(in), .out = TE_DPTR(out), .rows = rows, .cols = cols};
  void *args[TE_KNPARAMS(TE_CTB_PARAMS)];
  te_ctb_args_ptrs(&a, args);
  return te_kernel_launch_pdl(id + CT_K_BYTE_T, &cfg, args, stream);
}

/* Everything after validation: current scaling's first pass and scale,
 * the main pass, the dbias reduction.  Empty inputs: dbias becomes 0 and
 * current scaling's amax 0 (and its scale from that). */
static tecore_result_t ct_run(const struct ct_call *k, tecore_stream_t stream) {
  const struct tecore_tensor *out = k->out;
  size_t rows, cols;
  te_tensor_view(k->in, &rows, &cols);
  const int current = out->scaling == TECORE_SCALING_CURRENT;
  if (current) TE_CHECK(tecore_memset_d32_async(out->amax, 0, 1, stream));
  if (rows == 0 || cols == 0) {
    if (current) TE_CHECK(te_fp8_scale_from_amax(out, 0, stream));
    if (k->dbias && cols) {
      if (tecore_dtype_size(k->dbias->dtype) == 4)
        TE_CHECK(tecore_memset_d32_async(k->dbias->data, 0, cols, stream));
      else
        TE_CHECK(tecore_memset_d16_async(k->dbias->data, 0, cols, stream));
    }
    return TECORE_SUCCESS;
  }
  if (current) {
    TE_CHECK(ct_launch_main(k, rows, cols, TE_CT_F_AMAX_ONLY, out->amax, 0, stream));
    TE_CHECK(te_fp8_scale_from_amax(out, 0, stream));
  }
  /* current scaling has its amax already: the main pass leaves it alone */
  TE_CHECK(ct_launch_main(k, rows, cols, 0, current ? 0 : out->amax,
                          k->dbias ? k->ws : 0, stream));
  if (k->dbias) TE_CHECK(ct_launch_reduce(k->ws, k->dbias, rows, cols, stream));
  return TECORE_SUCCESS;
}

/* Checks every argument of a call (fn names it in errors). */
static tecore_result_t ct_check(const struct ct_call *k, size_t ws_bytes, const char *fn,
                                const char *in_name) {
  size_t rows, cols;
  TE_CHECK(te_check_hp_input(k->in, fn, in_name));
  te_tensor_view(k->in, &rows, &cols);
  if (k->x) {
    TE_CHECK(te_check_hp_input(k->x, fn, "x"));
    size_t xr, xc;
    te_tensor_view(k->x, &xr, &xc);
    if (xr != rows || xc != cols)
      return TE_ERR(TECORE_ERR_INVALID, "%s: x: 2-D view %zu x %zu differs from dy's %zu x %zu",
                    fn, xr, xc, rows, cols);
    if (k->x->dtype != k->in->dtype)
      return TE_ERR(TECORE_ERR_INVALID, "%s: x: dtype %s differs from dy's %s", fn,
                    tecore_dtype_name(k->x->dtype), tecore_dtype_name(k->in->dtype));
  }
  if (te_cdiv(cols, TE_CT_TILE) > 0x7fffffffu)
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s: %zu columns are more than one launch covers", fn,
                  in_name, cols);
  TE_CHECK(ct_check_out(k->out, rows, cols, fn));
  if (k->dbias) {
    TE_CHECK(ct_check_dbias(k->dbias, cols, fn));
    size_t need = ct_ws_bytes(rows, cols);
    if (need) {
      if (!k->ws)
        return TE_ERR(TECORE_ERR_INVALID, "%s: workspace is 0 (%zu bytes are needed)", fn, need);
      if (k->ws % 4)
        return TE_ERR(TECORE_ERR_INVALID, "%s: workspace (0x%llx) is not aligned to 4 bytes", fn,
                      (unsigned long long)k->ws);
      if (ws_bytes < need)
        return TE_ERR(TECORE_ERR_INVALID,
                      "%s: workspace_bytes %zu is less than the %zu bytes needed (see "
                      "tecore_cast_transpose_dbias_workspace_size)",
                      fn, ws_bytes, need);
    }
  }
  TE_CHECK(ct_check_alias(k, ws_bytes, rows, cols, fn));
  /* vdev: the workspace's bytes inside an allocation (a short one was
   * written past: the same hole fuzz-api found in the norms) */
  size_t need = k->dbias ? ct_ws_bytes(rows, cols) : 0;
  if (need) TE_CHECK(te_dev_check_range(k->ws, need, fn, "workspace"));
  return TECORE_SUCCESS;
}

/* ---- public entry points ----------------------------------------------------- */

TE_EXPORT tecore_result_t tecore_cast_transpose(const struct tecore_tensor *in,
                                                struct tecore_tensor *out,
                                                tecore_stream_t stream) {
  struct ct_call k = {.in = in, .out = out, .act = TE_CT_ACT_NONE};
  TE_CHECK(ct_check(&k, 0, __func__, "in"));
  return ct_run(&k, stream);
}

TE_EXPORT tecore_result_t tecore_cast_transpose_dbias_workspace_size(const struct tecore_tensor *in,
                                                                     size_t *bytes) {
  TE_ARG(bytes, "%s: bytes is NULL", __func__);
  TE_CHECK(te_tensor_check(in, 0, __func__, "in"));
  size_t rows, cols;
  te_tensor_view(in, &rows, &cols);
  *bytes = ct_ws_bytes(rows, cols);
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_cast_transpose_dbias(const struct tecore_tensor *in,
                                                      struct tecore_tensor *out,
                                                      struct tecore_tensor *dbias,
                                                      tecore_devptr_t workspace,
                                                      size_t workspace_bytes,
                                                      tecore_stream_t stream) {
  if (!dbias) return TE_ERR(TECORE_ERR_INVALID, "%s: dbias is NULL", __func__);
  struct ct_call k = {.in = in, .out = out, .dbias = dbias, .act = TE_CT_ACT_NONE,
                      .ws = workspace};
  TE_CHECK(ct_check(&k, workspace_bytes, __func__, "in"));
  return ct_run(&k, stream);
}

TE_EXPORT tecore_result_t tecore_dact_dbias_cast_transpose(
    tecore_activation_t act, const struct tecore_tensor *dy, const struct tecore_tensor *x,
    struct tecore_tensor *out, struct tecore_tensor *dbias, tecore_devptr_t workspace,
    size_t workspace_bytes, tecore_stream_t stream) {
  if (act != TECORE_ACT_GELU && act != TECORE_ACT_RELU && act != TECORE_ACT_SILU &&
      act != TECORE_ACT_QGELU)
    return TE_ERR(TECORE_ERR_INVALID,
                  "%s: act %d (%s) is not gelu, relu, silu or qgelu (gated kinds have their "
                  "own backward, tecore_act_bwd)",
                  __func__, (int)act, tecore_activation_name(act));
  if (!x) return TE_ERR(TECORE_ERR_INVALID, "%s: x is NULL", __func__);
  struct ct_call k = {.in = dy, .x = x, .out = out, .dbias = dbias, .act = (int)act,
                      .ws = workspace};
  TE_CHECK(ct_check(&k, workspace_bytes, __func__, "dy"));
  return ct_run(&k, stream);
}
