/* SPDX-License-Identifier: Apache-2.0 */
/* tensor_check.c -- the tensor descriptor's checks for every kernel
 * family (ksupport.h): shape, dtype, scaling mode, pointer alignment and
 * the buffers a use needs, with details naming the caller's function and
 * argument; the 2-D view; and the scaling-mode names the details use. */
#include "ksupport/ksupport.h"
#include <stdio.h>
#include "device/device_ops.h"

TE_EXPORT const char *tecore_scaling_name(tecore_scaling_mode_t mode) {
  static const char *const names[TECORE_SCALING_COUNT_] = {
      [TECORE_SCALING_NONE] = "none",         [TECORE_SCALING_DELAYED] = "delayed",
      [TECORE_SCALING_CURRENT] = "current",   [TECORE_SCALING_MXFP8] = "mxfp8",
      [TECORE_SCALING_BLOCK_1X128] = "block1x128",
      [TECORE_SCALING_BLOCK_128X128] = "block128x128"};
  return (unsigned)mode < TECORE_SCALING_COUNT_ ? names[mode] : "?";
}

size_t te_tensor_count(const struct tecore_tensor *t) {
  size_t n = 1;
  for (int i = 0; i < t->ndim; i++) {
    if (t->shape[i] == 0) return 0;
    if (n > SIZE_MAX / t->shape[i]) return SIZE_MAX;
    n *= t->shape[i];
  }
  return n;
}

void te_tensor_view(const struct tecore_tensor *t, size_t *rows, size_t *cols) {
  size_t r = 1;
  for (int i = 0; i + 1 < t->ndim; i++) r *= t->shape[i];
  *rows = r;
  *cols = t->ndim > 0 ? t->shape[t->ndim - 1] : 1;
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


/* The scale array shape of a checked tensor. */
void te_tensor_scale_shape(const struct tecore_tensor *t, int columnwise, size_t *sr, size_t *sc,
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

/* A device ordinal: not negative, and below the device count once a
 * backend is up (a descriptor may be checked before any device work). */
static tecore_result_t check_device(int device, const char *fn, const char *arg) {
  if (device < 0)
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s: device %d is negative", fn, arg, device);
  const struct te_device_ops *o = te_ops_if_ready();
  int n = 0;
  if (o && o->device_count(&n) == TECORE_SUCCESS && device >= n)
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s: device %d outside [0, %d)", fn, arg, device, n);
  return TECORE_SUCCESS;
}

tecore_result_t te_tensor_check_desc(const struct tecore_tensor *t, unsigned flags,
                                     const char *fn, const char *arg) {
  if (!t) return TE_ERR(TECORE_ERR_INVALID, "%s: %s is NULL", fn, arg);
  if (flags & ~TENSOR_FLAGS_ALL)
    return TE_ERR(TECORE_ERR_INVALID, "%s: flags 0x%x has unknown bits", fn, flags);
  if ((unsigned)t->dtype >= TECORE_DTYPE_COUNT_)
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s: dtype %d is not a dtype", fn, arg, (int)t->dtype);
  if (t->ndim < 0 || t->ndim > TECORE_TENSOR_MAX_DIMS)
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s: ndim %d is outside 0..%d", fn, arg, t->ndim,
                  TECORE_TENSOR_MAX_DIMS);
  size_t numel = te_tensor_count(t), nbytes;
  if (numel == SIZE_MAX)
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s: the shape's element count overflows", fn, arg);
  /* no memory holds more than SIZE_MAX bytes (fuzz-parse: from_dlpack took
   * f32 [2^61][16], whose count fits but whose bytes do not) */
  if (__builtin_mul_overflow(numel, tecore_dtype_size(t->dtype), &nbytes))
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s: the shape's byte count overflows", fn, arg);
  TE_CHECK(check_device(t->device, fn, arg));
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


/* On vdev with its checks on: each buffer the descriptor names must lie
 * inside a live allocation for the bytes its shape implies (a shape larger
 * than its buffer is caught before a kernel runs past the end; the launch
 * reports it, after the caller's own argument checks: see
 * te_dev_check_range_later).  On the cuda path one load and compare. */
static void tensor_check_memory(const struct tecore_tensor *t, const char *fn, const char *arg) {
  if (!te_dev_checks_on()) return;
  size_t numel = te_tensor_count(t), bytes;
  if (numel == 0) return;
  /* bytes that overflow fit no buffer (they were let through unchecked,
   * and a kernel ran 2^63 elements past its buffer: found by fuzz-api) */
  if (__builtin_mul_overflow(numel, tecore_dtype_size(t->dtype), &bytes)) bytes = SIZE_MAX;
  char what[96];
  snprintf(what, sizeof what, "%s->data", arg);
  if (t->data) te_dev_check_range_later(t->data, bytes, fn, what);
  snprintf(what, sizeof what, "%s->columnwise_data", arg);
  if (t->columnwise_data) te_dev_check_range_later(t->columnwise_data, bytes, fn, what);
  snprintf(what, sizeof what, "%s->amax", arg);
  if (t->amax) te_dev_check_range_later(t->amax, 4, fn, what);
  snprintf(what, sizeof what, "%s->scale", arg);
  if (t->scale) te_dev_check_range_later(t->scale, 4, fn, what);
  /* per-tensor: one float; block modes: the whole scale array the kernels
   * write (a buffer too small for it was written past: found by fuzz-api) */
  for (int c = 0; c < 2; c++) {
    tecore_devptr_t p = c ? t->columnwise_scale_inv : t->scale_inv;
    if (!p) continue;
    size_t sbytes = 4, sr = 0, sc = 0;
    tecore_dtype_t sdt = TECORE_DTYPE_F32;
    if (!te_scaling_per_tensor(t->scaling)) {
      te_tensor_scale_shape(t, c, &sr, &sc, &sdt);
      if (__builtin_mul_overflow(sr, sc, &sbytes) ||
          __builtin_mul_overflow(sbytes, tecore_dtype_size(sdt), &sbytes))
        sbytes = SIZE_MAX;
    }
    if (sbytes == 0) continue;
    snprintf(what, sizeof what, "%s->%s", arg, c ? "columnwise_scale_inv" : "scale_inv");
    te_dev_check_range_later(p, sbytes, fn, what);
  }
}

tecore_result_t te_tensor_check(const struct tecore_tensor *t, unsigned flags, const char *fn,
                                const char *arg) {
  TE_CHECK(te_tensor_check_desc(t, flags, fn, arg));
  tensor_check_memory(t, fn, arg);
  return TECORE_SUCCESS;
}
