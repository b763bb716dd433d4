/* SPDX-License-Identifier: Apache-2.0 */
/* tensor.c -- the tensor descriptor (te/tensor.h): init, numel, 2-D view,
 * scale-buffer shapes per scaling mode, validation, and DLPack import and
 * export, over the checks of the kernel-support layer
 * (ksupport/tensor_check.c).  No device work happens here
 * (tecore_tensor_validate may start the backend to count its devices). */
#include <string.h>
#include "ksupport/ksupport.h"

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

TE_EXPORT size_t tecore_tensor_numel(const struct tecore_tensor *t) {
  if (!t || t->ndim < 0 || t->ndim > TECORE_TENSOR_MAX_DIMS) return 0;
  size_t n = te_tensor_count(t);
  return n == SIZE_MAX ? 0 : n;
}

TE_EXPORT tecore_result_t tecore_tensor_2d(const struct tecore_tensor *t, size_t *rows,
                                           size_t *cols) {
  TE_ARG(rows, "tecore_tensor_2d: rows is NULL");
  TE_ARG(cols, "tecore_tensor_2d: cols is NULL");
  TE_CHECK(te_tensor_check_desc(t, 0, __func__, "t"));
  te_tensor_view(t, rows, cols);
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_tensor_scale_shape(const struct tecore_tensor *t,
                                                    int columnwise, size_t *srows,
                                                    size_t *scols, tecore_dtype_t *dtype) {
  TE_ARG(srows, "tecore_tensor_scale_shape: srows is NULL");
  TE_ARG(scols, "tecore_tensor_scale_shape: scols is NULL");
  TE_ARG(dtype, "tecore_tensor_scale_shape: dtype is NULL");
  TE_ARG(columnwise == 0 || columnwise == 1,
         "tecore_tensor_scale_shape: columnwise is %d, not 0 or 1", columnwise);
  TE_CHECK(te_tensor_check_desc(t, 0, __func__, "t"));
  te_tensor_scale_shape(t, columnwise, srows, scols, dtype);
  return TECORE_SUCCESS;
}

/* The shared checks compare the device ordinal with the count only once a
 * backend is up; validation is asked for on its own, often first, so it
 * asks for the count itself (starting the backend when it can: a device
 * past 0 means device work is coming).  With no backend at all there is
 * no count to compare with. */
TE_EXPORT tecore_result_t tecore_tensor_validate(const struct tecore_tensor *t, unsigned flags) {
  TE_CHECK(te_tensor_check_desc(t, flags, __func__, "t"));
  int n = 0;
  if (t->device == 0) return TECORE_SUCCESS;
  if (tecore_device_count(&n) != TECORE_SUCCESS) {
    tecore_clear_error();
    return TECORE_SUCCESS;
  }
  TE_ARG(t->device < n, "%s: t: device %d outside [0, %d)", __func__, t->device, n);
  return TECORE_SUCCESS;
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
  TE_ARG(dev == kDLCPU ? dl->device.device_id == 0 : dl->device.device_id >= 0,
         "tecore_tensor_from_dlpack: dl->device.device_id %d is not a device ordinal",
         (int)dl->device.device_id);
  struct tecore_tensor r = {.dtype = dl_types[found].dt, .scaling = TECORE_SCALING_NONE,
                            .ndim = dl->ndim, .device = (int)dl->device.device_id};
  size_t numel = 1;
  int overflow = 0;
  for (int i = 0; i < dl->ndim; i++) {
    TE_ARG(dl->shape[i] >= 0, "tecore_tensor_from_dlpack: dl->shape[%d] is %lld", i,
           (long long)dl->shape[i]);
    r.shape[i] = (size_t)dl->shape[i];
    overflow |= __builtin_mul_overflow(numel, r.shape[i], &numel);
  }
  TE_ARG(numel == 0 || !overflow,
         "tecore_tensor_from_dlpack: dl->shape's element count overflows");
  if (dl->strides && numel > 0) {
    /* every product checked: shapes near 2^40 overflowed a signed multiply */
    int64_t want = 1;
    for (int i = dl->ndim - 1; i >= 0; i--) {
      TE_ARG(dl->shape[i] == 1 || dl->strides[i] == want,
             "tecore_tensor_from_dlpack: dl->strides[%d] is %lld, not %lld: only compact "
             "row-major tensors are accepted", i, (long long)dl->strides[i], (long long)want);
      TE_ARG(!__builtin_mul_overflow(want, dl->shape[i], &want),
             "tecore_tensor_from_dlpack: dl->shape's element count overflows");
    }
  }
  TE_ARG(dl->data || numel == 0, "tecore_tensor_from_dlpack: dl->data is NULL");
  TE_ARG(dl->byte_offset <= UINTPTR_MAX - (uintptr_t)dl->data,
         "tecore_tensor_from_dlpack: dl->data %p + dl->byte_offset %llu wraps around", dl->data,
         (unsigned long long)dl->byte_offset);
  r.data = (tecore_devptr_t)(uintptr_t)dl->data + dl->byte_offset;
  TE_CHECK(te_tensor_check_desc(&r, 0, __func__, "dl"));
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
  TE_CHECK(te_tensor_check_desc(t, columnwise ? TECORE_TENSOR_COLUMNWISE : 0, __func__, "t"));
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

  /* Shape and strides are built here and copied out only on success.  An
   * empty tensor passes the descriptor check with any other extents, so
   * a dimension may not fit DLPack's int64, nor a stride (the product of
   * the dimensions after it). */
  int ndim = t->ndim;
  size_t dims[TECORE_TENSOR_MAX_DIMS];
  if (columnwise && t->scaling != TECORE_SCALING_MXFP8) {
    size_t rows = 1, cols = t->ndim > 0 ? t->shape[t->ndim - 1] : 1;
    for (int i = 0; i + 1 < t->ndim; i++)
      TE_ARG(!__builtin_mul_overflow(rows, t->shape[i], &rows),
             "tecore_tensor_to_dlpack: t: the rows of its 2-D view overflow");
    ndim = 2;
    dims[0] = cols;   /* the transpose of the 2-D view */
    dims[1] = rows;
  } else {
    for (int i = 0; i < ndim; i++) dims[i] = t->shape[i];
  }
  int64_t sh[TECORE_TENSOR_MAX_DIMS], st[TECORE_TENSOR_MAX_DIMS], s = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    TE_ARG(dims[i] <= (size_t)INT64_MAX,
           "tecore_tensor_to_dlpack: t: dimension %d (%zu) does not fit DLPack's int64", i,
           dims[i]);
    sh[i] = (int64_t)dims[i];
    st[i] = s;
    TE_ARG(i == 0 || !__builtin_mul_overflow(s, sh[i], &s),
           "tecore_tensor_to_dlpack: t: the stride of dimension %d overflows int64", i - 1);
  }
  tecore_devptr_t data = columnwise ? t->columnwise_data : t->data;
  TE_ARG(data || te_tensor_count(t) == 0, "tecore_tensor_to_dlpack: t: %s is 0",
         columnwise ? "columnwise_data" : "data");
  memcpy(shape, sh, (size_t)ndim * sizeof *sh);
  memcpy(strides, st, (size_t)ndim * sizeof *st);
  memset(dl, 0, sizeof *dl);
  dl->data = (void *)(uintptr_t)data;
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
