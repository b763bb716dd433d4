/* tensor.c -- the tensor descriptor (te/tensor.h): init, numel, 2-D view,
 * scale-buffer shapes per scaling mode, validation, and DLPack import and
 * export.  No device work happens here; nothing is allocated. */
#include <string.h>
#include "fp8/fp8_internal.h"

TE_EXPORT const char *tecore_scaling_name(tecore_scaling_mode_t mode) {
  static const char *const names[TECORE_SCALING_COUNT_] = {
      [TECORE_SCALING_NONE] = "none",         [TECORE_SCALING_DELAYED] = "delayed",
      [TECORE_SCALING_CURRENT] = "current",   [TECORE_SCALING_MXFP8] = "mxfp8",
      [TECORE_SCALING_BLOCK_1X128] = "block1x128",
      [TECORE_SCALING_BLOCK_128X128] = "block128x128"};
  return (unsigned)mode < TECORE_SCALING_COUNT_ ? names[mode] : "?";
}

TE_EXPORT tecore_result_t tecore_tensor_init(struct tecore_tensor *t, tecore_dtype_t dtype,
                                             int ndim, const size_t *shape,
                                             tecore_devptr_t data) {
  TE_ARG(t, "tecore_tensor_init: t is NULL");
  TE_ARG((unsigned)dtype < TECORE_DTYPE_COUNT_, "tecore_tensor_init: dtype %d is not a dtype",
         (int)dtype);
  TE_ARG(ndim >= 0 && ndim <= TECORE_TENSOR_MAX_DIMS,
         "tecore_tensor_init: ndim %d is outside 0..%d", ndim, TECORE_TENSOR_MAX_DIMS);
  TE_ARG(ndim == 0 || shape, "tecore_tensor_init: shape is NULL with ndim %d", ndim);
  *t = (struct tecore_tensor){.dtype = dtype, .scaling = TECORE_SCALING_NONE, .ndim = ndim,
                              .data = data};
  for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
  return TECORE_SUCCESS;
}

/* Product of the shape, or (size_t)-1 on overflow. */
static size_t shape_product(const struct tecore_tensor *t) {
  size_t n = 1;
  for (int i = 0; i < t->ndim; i++) {
    if (t->shape[i] == 0) return 0;
    if (n > SIZE_MAX / t->shape[i]) return SIZE_MAX;
    n *= t->shape[i];
  }
  return n;
}

TE_EXPORT size_t tecore_tensor_numel(const struct tecore_tensor *t) {
  if (!t || t->ndim < 0 || t->ndim > TECORE_TENSOR_MAX_DIMS) return 0;
  size_t n = shape_product(t);
  return n == SIZE_MAX ? 0 : n;
}

void te_tensor_view(const struct tecore_tensor *t, size_t *rows, size_t *cols) {
  size_t r = 1;
  for (int i = 0; i + 1 < t->ndim; i++) r *= t->shape[i];
  *rows = r;
  *cols = t->ndim > 0 ? t->shape[t->ndim - 1] : 1;
}

TE_EXPORT tecore_result_t tecore_tensor_2d(const struct tecore_tensor *t, size_t *rows,
                                           size_t *cols) {
  TE_ARG(rows, "tecore_tensor_2d: rows is NULL");
  TE_ARG(cols, "tecore_tensor_2d: cols is NULL");
  TE_CHECK(te_tensor_check(t, 0, __func__, "t"));
  te_tensor_view(t, rows, cols);
  return TECORE_SUCCESS;
}

/* The scale array shape of a checked tensor. */
static void scale_shape(const struct tecore_tensor *t, int columnwise, size_t *sr, size_t *sc,
                        tecore_dtype_t *dt) {
  size_t rows, cols;
  te_tensor_view(t, &rows, &cols);
  *dt = TECORE_DTYPE_F32;
  switch (t->scaling) {
  case TECORE_SCALING_DELAYED:
  case TECORE_SCALING_CURRENT:
    *sr = *sc = 1;
    return;
  case TECORE_SCALING_MXFP8:
    *dt = TECORE_DTYPE_E8M0;
    if (columnwise) *sr = te_cdiv(rows, 32), *sc = cols;
    else *sr = rows, *sc = te_cdiv(cols, 32);
    return;
  case TECORE_SCALING_BLOCK_1X128:
    if (columnwise) *sr = cols, *sc = te_cdiv(rows, 128);
    else *sr = rows, *sc = te_cdiv(cols, 128);
    return;
  case TECORE_SCALING_BLOCK_128X128:
    if (columnwise) *sr = te_cdiv(cols, 128), *sc = te_cdiv(rows, 128);
    else *sr = te_cdiv(rows, 128), *sc = te_cdiv(cols, 128);
    return;
  default:
    *sr = *sc = 0;
    return;
  }
}

TE_EXPORT tecore_result_t tecore_tensor_scale_shape(const struct tecore_tensor *t,
                                                    int columnwise, size_t *srows,
                                                    size_t *scols, tecore_dtype_t *dtype) {
  TE_ARG(srows, "tecore_tensor_scale_shape: srows is NULL");
  TE_ARG(scols, "tecore_tensor_scale_shape: scols is NULL");
  TE_ARG(dtype, "tecore_tensor_scale_shape: dtype is NULL");
  TE_ARG(columnwise == 0 || columnwise == 1,
         "tecore_tensor_scale_shape: columnwise is %d, not 0 or 1", columnwise);
  TE_CHECK(te_tensor_check(t, 0, __func__, "t"));
  scale_shape(t, columnwise, srows, scols, dtype);
  return TECORE_SUCCESS;
}

#define TENSOR_FLAGS_ALL                                                              \
  (TECORE_TENSOR_ROWWISE | TECORE_TENSOR_COLUMNWISE | TECORE_TENSOR_NEED_SCALE |      \
   TECORE_TENSOR_NEED_AMAX | TECORE_TENSOR_ALIGN16)

static tecore_result_t check_ptr(tecore_devptr_t p, size_t align, const char *fn,
                                 const char *arg, const char *field) {
  if (p % align)
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s: %s (0x%llx) is not aligned to %zu bytes", fn,
                  arg, field, (unsigned long long)p, align);
  return TECORE_SUCCESS;
}

tecore_result_t te_tensor_check(const struct tecore_tensor *t, unsigned flags, const char *fn,
                                const char *arg) {
  if (!t) return TE_ERR(TECORE_ERR_INVALID, "%s: %s is NULL", fn, arg);
  if (flags & ~TENSOR_FLAGS_ALL)
    return TE_ERR(TECORE_ERR_INVALID, "%s: flags 0x%x has unknown bits", fn, flags);
  if ((unsigned)t->dtype >= TECORE_DTYPE_COUNT_)
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s: dtype %d is not a dtype", fn, arg, (int)t->dtype);
  if (t->ndim < 0 || t->ndim > TECORE_TENSOR_MAX_DIMS)
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s: ndim %d is outside 0..%d", fn, arg, t->ndim,
                  TECORE_TENSOR_MAX_DIMS);
  size_t numel = shape_product(t);
  if (numel == SIZE_MAX)
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s: the shape's element count overflows", fn, arg);
  if ((unsigned)t->scaling >= TECORE_SCALING_COUNT_)
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s: scaling mode %d is not a mode", fn, arg,
                  (int)t->scaling);
  if (t->flags & ~TECORE_TENSOR_POW2_SCALES)
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s: flags 0x%x has unknown bits", fn, arg, t->flags);
  if (!(t->amax_epsilon >= 0.0f) || t->amax_epsilon > 3.4e38f)
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s: amax_epsilon %g is not a finite value >= 0", fn,
                  arg, (double)t->amax_epsilon);
  int scaled = t->scaling != TECORE_SCALING_NONE;
  if (scaled && !te_dtype_is_fp8(t->dtype))
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s: scaling mode %s needs dtype e4m3 or e5m2, not %s",
                  fn, arg, tecore_scaling_name(t->scaling), tecore_dtype_name(t->dtype));

  size_t esize = tecore_dtype_size(t->dtype);
  size_t dalign = (flags & TECORE_TENSOR_ALIGN16) ? 16 : esize;
  TE_CHECK(check_ptr(t->data, dalign, fn, arg, "data"));
  TE_CHECK(check_ptr(t->columnwise_data, dalign, fn, arg, "columnwise_data"));
  TE_CHECK(check_ptr(t->amax, 4, fn, arg, "amax"));
  TE_CHECK(check_ptr(t->scale, 4, fn, arg, "scale"));
  size_t salign = t->scaling == TECORE_SCALING_MXFP8 ? 1 : 4;
  TE_CHECK(check_ptr(t->scale_inv, salign, fn, arg, "scale_inv"));
  TE_CHECK(check_ptr(t->columnwise_scale_inv, salign, fn, arg, "columnwise_scale_inv"));

  if (flags & TECORE_TENSOR_NEED_AMAX && !t->amax)
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s: amax is 0 (an amax buffer is required)", fn, arg);
  if (flags & TECORE_TENSOR_NEED_SCALE && te_scaling_per_tensor(t->scaling) && !t->scale)
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s: scale is 0 (%s scaling reads or writes *scale)",
                  fn, arg, tecore_scaling_name(t->scaling));
  if (numel == 0) return TECORE_SUCCESS;   /* an empty tensor needs no data */
  if (flags & TECORE_TENSOR_ROWWISE) {
    if (!t->data)
      return TE_ERR(TECORE_ERR_INVALID, "%s: %s: data is 0 (rowwise data is required)", fn, arg);
    if (scaled && !t->scale_inv)
      return TE_ERR(TECORE_ERR_INVALID, "%s: %s: scale_inv is 0 (%s scaling needs it)", fn, arg,
                    tecore_scaling_name(t->scaling));
  }
  if (flags & TECORE_TENSOR_COLUMNWISE) {
    if (!scaled)
      return TE_ERR(TECORE_ERR_INVALID,
                    "%s: %s: columnwise data asked of a tensor with scaling mode none", fn, arg);
    if (!t->columnwise_data)
      return TE_ERR(TECORE_ERR_INVALID,
                    "%s: %s: columnwise_data is 0 (columnwise output is required)", fn, arg);
    if (te_scaling_per_tensor(t->scaling)) {
      if (!t->scale_inv && !t->columnwise_scale_inv)
        return TE_ERR(TECORE_ERR_INVALID,
                      "%s: %s: scale_inv and columnwise_scale_inv are both 0", fn, arg);
    } else if (!t->columnwise_scale_inv) {
      return TE_ERR(TECORE_ERR_INVALID,
                    "%s: %s: columnwise_scale_inv is 0 (%s columnwise output needs it)", fn, arg,
                    tecore_scaling_name(t->scaling));
    }
  }
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_tensor_validate(const struct tecore_tensor *t, unsigned flags) {
  return te_tensor_check(t, flags, __func__, "t");
}

/* ---- DLPack ----------------------------------------------------------------- */

static const struct {
  tecore_dtype_t dt;
  uint8_t code, bits;
} dl_types[] = {
    {TECORE_DTYPE_F32, kDLFloat, 32},        {TECORE_DTYPE_F16, kDLFloat, 16},
    {TECORE_DTYPE_BF16, kDLBfloat, 16},      {TECORE_DTYPE_F64, kDLFloat, 64},
    {TECORE_DTYPE_E4M3, kDLFloat8_e4m3fn, 8}, {TECORE_DTYPE_E5M2, kDLFloat8_e5m2, 8},
    {TECORE_DTYPE_E8M0, kDLFloat8_e8m0fnu, 8}, {TECORE_DTYPE_I32, kDLInt, 32},
    {TECORE_DTYPE_I64, kDLInt, 64},          {TECORE_DTYPE_U8, kDLUInt, 8},
    {TECORE_DTYPE_U8, kDLBool, 8},   /* import only: the first U8 row wins on export */
};

TE_EXPORT tecore_result_t tecore_tensor_from_dlpack(const DLTensor *dl, struct tecore_tensor *t) {
  TE_ARG(dl, "tecore_tensor_from_dlpack: dl is NULL");
  TE_ARG(t, "tecore_tensor_from_dlpack: t is NULL");
  TE_ARG(dl->ndim >= 0 && dl->ndim <= TECORE_TENSOR_MAX_DIMS,
         "tecore_tensor_from_dlpack: dl->ndim %d is outside 0..%d", (int)dl->ndim,
         TECORE_TENSOR_MAX_DIMS);
  TE_ARG(dl->ndim == 0 || dl->shape, "tecore_tensor_from_dlpack: dl->shape is NULL");
  TE_ARG(dl->dtype.lanes == 1, "tecore_tensor_from_dlpack: dl->dtype.lanes is %u, not 1",
         (unsigned)dl->dtype.lanes);
  int found = -1;
  for (size_t i = 0; i < TE_ARRAY_SIZE(dl_types); i++)
    if (dl_types[i].code == dl->dtype.code && dl_types[i].bits == dl->dtype.bits) {
      found = (int)i;
      break;
    }
  TE_ARG(found >= 0, "tecore_tensor_from_dlpack: dl->dtype (code %u, %u bits) is not supported",
         (unsigned)dl->dtype.code, (unsigned)dl->dtype.bits);
  int dev = (int)dl->device.device_type;
  if (dev == kDLCPU) {
    tecore_backend_t b;
    TE_CHECK(tecore_backend(&b));
    TE_ARG(b == TECORE_BACKEND_VDEV,
           "tecore_tensor_from_dlpack: dl->device is kDLCPU, which the %s backend cannot read "
           "(use pinned (kDLCUDAHost) or device memory)", tecore_backend_name(b));
  } else {
    TE_ARG(dev == kDLCUDA || dev == kDLCUDAHost || dev == kDLCUDAManaged,
           "tecore_tensor_from_dlpack: dl->device.device_type %d is not CUDA memory", dev);
  }
  struct tecore_tensor r = {.dtype = dl_types[found].dt, .scaling = TECORE_SCALING_NONE,
                            .ndim = dl->ndim, .device = (int)dl->device.device_id};
  size_t numel = 1;
  for (int i = 0; i < dl->ndim; i++) {
    TE_ARG(dl->shape[i] >= 0, "tecore_tensor_from_dlpack: dl->shape[%d] is %lld", i,
           (long long)dl->shape[i]);
    r.shape[i] = (size_t)dl->shape[i];
    numel *= r.shape[i];
  }
  if (dl->strides && numel > 0) {
    int64_t want = 1;
    for (int i = dl->ndim - 1; i >= 0; i--) {
      TE_ARG(dl->shape[i] == 1 || dl->strides[i] == want,
             "tecore_tensor_from_dlpack: dl->strides[%d] is %lld, not %lld: only compact "
             "row-major tensors are accepted", i, (long long)dl->strides[i], (long long)want);
      want *= dl->shape[i];
    }
  }
  TE_ARG(dl->data || numel == 0, "tecore_tensor_from_dlpack: dl->data is NULL");
  r.data = (tecore_devptr_t)(uintptr_t)dl->data + dl->byte_offset;
  TE_CHECK(te_tensor_check(&r, 0, __func__, "dl"));
  *t = r;
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_tensor_to_dlpack(const struct tecore_tensor *t, int columnwise,
                                                  DLTensor *dl, int64_t *shape,
                                                  int64_t *strides) {
  TE_ARG(dl, "tecore_tensor_to_dlpack: dl is NULL");
  TE_ARG(shape, "tecore_tensor_to_dlpack: shape is NULL");
  TE_ARG(strides, "tecore_tensor_to_dlpack: strides is NULL");
  TE_ARG(columnwise == 0 || columnwise == 1,
         "tecore_tensor_to_dlpack: columnwise is %d, not 0 or 1", columnwise);
  TE_CHECK(te_tensor_check(t, columnwise ? TECORE_TENSOR_COLUMNWISE : 0, __func__, "t"));
  int found = -1;
  for (size_t i = 0; i < TE_ARRAY_SIZE(dl_types); i++)
    if (dl_types[i].dt == t->dtype) {
      found = (int)i;
      break;
    }
  if (found < 0)
    return TE_ERR(TECORE_ERR_INTERNAL, "tecore_tensor_to_dlpack: no DLPack code for %s",
                  tecore_dtype_name(t->dtype));
  tecore_backend_t b;
  TE_CHECK(tecore_backend(&b));

  int ndim = t->ndim;
  if (columnwise && t->scaling != TECORE_SCALING_MXFP8) {
    size_t rows, cols;
    te_tensor_view(t, &rows, &cols);   /* the transpose of the 2-D view */
    ndim = 2;
    shape[0] = (int64_t)cols;
    shape[1] = (int64_t)rows;
  } else {
    for (int i = 0; i < ndim; i++) shape[i] = (int64_t)t->shape[i];
  }
  int64_t s = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    strides[i] = s;
    s *= shape[i];
  }
  memset(dl, 0, sizeof *dl);
  dl->data = (void *)(uintptr_t)(columnwise ? t->columnwise_data : t->data);
  dl->device.device_type = b == TECORE_BACKEND_CUDA ? kDLCUDA : kDLCPU;
  dl->device.device_id = b == TECORE_BACKEND_CUDA ? t->device : 0;
  dl->ndim = ndim;
  dl->dtype.code = dl_types[found].code;
  dl->dtype.bits = dl_types[found].bits;
  dl->dtype.lanes = 1;
  dl->shape = shape;
  dl->strides = strides;
  dl->byte_offset = 0;
  return TECORE_SUCCESS;
}
