/* fp8_internal.h -- private helpers of libtecore's FP8 code (tensors,
 * quantize, recipes), also usable by the other kernel families that take
 * tensors (cast-transpose, activations, norms): argument checks that name
 * the calling function and argument, and the 2-D view as integers. */
#ifndef TECORE_FP8_INTERNAL_H
#define TECORE_FP8_INTERNAL_H

#include "internal.h"

/* tecore_tensor_validate's checks with a detail that reads
 * "<fn>: <arg>: <what is wrong>". */
tecore_result_t te_tensor_check(const struct tecore_tensor *t, unsigned flags, const char *fn,
                                const char *arg);

/* The 2-D view of a tensor already checked (no argument checks). */
void te_tensor_view(const struct tecore_tensor *t, size_t *rows, size_t *cols);

/* 1 for the two per-tensor modes. */
static inline int te_scaling_per_tensor(tecore_scaling_mode_t m) {
  return m == TECORE_SCALING_DELAYED || m == TECORE_SCALING_CURRENT;
}
static inline int te_dtype_is_fp8(tecore_dtype_t d) {
  return d == TECORE_DTYPE_E4M3 || d == TECORE_DTYPE_E5M2;
}
/* Input types the quantize and activation kernels read. */
static inline int te_dtype_is_hp(tecore_dtype_t d) {
  return d == TECORE_DTYPE_F32 || d == TECORE_DTYPE_F16 || d == TECORE_DTYPE_BF16;
}
static inline size_t te_cdiv(size_t a, size_t b) { return (a + b - 1) / b; }

/* Current scaling's two small steps (quantize.c's kernels), for the
 * families that write FP8 themselves: *amax = 0, and scale / scale_inv
 * (and columnwise_scale_inv when set) from t's amax, amax_epsilon and
 * TECORE_TENSOR_POW2_SCALES.  Both skip when noop points at a nonzero
 * value (noop may be 0). */
tecore_result_t te_fp8_amax_zero(tecore_devptr_t amax, tecore_devptr_t noop,
                                 tecore_stream_t stream);
tecore_result_t te_fp8_scale_from_amax(const struct tecore_tensor *t, tecore_devptr_t noop,
                                     tecore_stream_t stream);

#endif
