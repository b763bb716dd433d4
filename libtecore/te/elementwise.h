/* SPDX-License-Identifier: Apache-2.0 */
/* te/elementwise.h -- small elementwise kernels (fill, scale-and-add).
 * Both run on either backend from the same kernels/common math. */
#ifndef TE_ELEMENTWISE_H
#define TE_ELEMENTWISE_H

#include <te/device.h>
#include <te/dtype.h>

#ifdef __cplusplus
extern "C" {
#endif

/* dst[i] = value (rounded once from double to dtype, nearest even) for i < count.
 * dtype: F32, F16 or BF16.  dst aligned to the element size. */
tecore_result_t tecore_fill(tecore_devptr_t dst, tecore_dtype_t dtype, size_t count,
                            double value, tecore_stream_t stream);
/* dst[i] = alpha * a[i] + beta * b[i], computed in float and rounded to
 * dtype (F32, F16 or BF16).  dst may alias a or b. */
tecore_result_t tecore_scale_add(tecore_devptr_t dst, tecore_devptr_t a, float alpha,
                                 tecore_devptr_t b, float beta, tecore_dtype_t dtype,
                                 size_t count, tecore_stream_t stream);

#ifdef __cplusplus
}
#endif
#endif
