/* SPDX-License-Identifier: Apache-2.0 */
/* io_check.c -- the input and output checks shared by the element-wise
 * kernel families (activations, norms, cast-transpose): a high-precision
 * input, and an output a fused kernel writes rowwise, high precision or
 * FP8 with a per-tensor scale (ksupport.h). */
#include "ksupport/ksupport.h"

tecore_result_t te_check_hp_input(const struct tecore_tensor *t, const char *fn, const char *arg) {
  TE_CHECK(te_tensor_check(t, TECORE_TENSOR_ROWWISE, fn, arg));
  if (t->scaling != TECORE_SCALING_NONE || !te_dtype_is_hp(t->dtype))
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s: dtype %s (scaling %s) is not f32, f16 or bf16",
                  fn, arg, tecore_dtype_name(t->dtype), tecore_scaling_name(t->scaling));
  return TECORE_SUCCESS;
}

tecore_result_t te_check_fused_output(const struct tecore_tensor *t, const char *fn,
                                      const char *arg) {
  if (!t) return TE_ERR(TECORE_ERR_INVALID, "%s: %s is NULL", fn, arg);
  if (t->scaling == TECORE_SCALING_NONE) {
    TE_CHECK(te_tensor_check(t, TECORE_TENSOR_ROWWISE, fn, arg));
    if (!te_dtype_is_hp(t->dtype))
      return TE_ERR(TECORE_ERR_INVALID,
                    "%s: %s: dtype %s with scaling none is not f32, f16 or bf16 (FP8 outputs "
                    "need delayed scaling)",
                    fn, arg, tecore_dtype_name(t->dtype));
  } else if (t->scaling == TECORE_SCALING_DELAYED) {
    TE_CHECK(te_tensor_check(t, TECORE_TENSOR_ROWWISE | TECORE_TENSOR_NEED_SCALE, fn, arg));
  } else if (t->scaling == TECORE_SCALING_CURRENT) {
    TE_CHECK(te_tensor_check(
        t, TECORE_TENSOR_ROWWISE | TECORE_TENSOR_NEED_SCALE | TECORE_TENSOR_NEED_AMAX, fn, arg));
  } else {
    TE_CHECK(te_tensor_check(t, 0, fn, arg));
    return TE_ERR(TECORE_ERR_INVALID,
                  "%s: %s: scaling mode %s is not fused here (none, delayed or current only); "
                  "write a high-precision output and quantize it with tecore_quantize",
                  fn, arg, tecore_scaling_name(t->scaling));
  }
  if (t->columnwise_data)
    return TE_ERR(TECORE_ERR_INVALID,
                  "%s: %s: columnwise_data is set, but only rowwise output is written (use the "
                  "cast-transpose kernels for a transpose)",
                  fn, arg);
  return TECORE_SUCCESS;
}
