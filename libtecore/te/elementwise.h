/* SPDX-License-Identifier: Apache-2.0 */
/* te/elementwise.h -- small elementwise kernels (fill, uniform random
 * fill, scale-and-add).
 * Both run on either backend from the same kernels/common math. */
#ifndef TE_ELEMENTWISE_H
#define TE_ELEMENTWISE_H

#include <stdint.h>
#include <te/device.h>
#include <te/dtype.h>

#ifdef __cplusplus
extern "C" {
#endif

/* dst[i] = value (rounded once from double to dtype, nearest even) for i < count.
 * dtype: F32, F16 or BF16.  dst aligned to the element size. */
tecore_result_t tecore_fill(tecore_devptr_t dst, tecore_dtype_t dtype, size_t count,
                            double value, tecore_stream_t stream);
/* dst[i] = a value uniform in [-bound, bound] for i < count: draw offset +
 * i + 1 of the splitmix64 generator seeded with seed, its top 53 bits x
 * giving bound * (x / 2^52 - 1) in double, rounded to float and then to
 * dtype (F32, F16 or BF16; nearest even).  Each element depends on its
 * draw alone: any launch, either backend, and any split of a range into
 * calls with offsets give the same bits.  bound finite and >= 0. */
tecore_result_t tecore_fill_uniform(tecore_devptr_t dst, tecore_dtype_t dtype, size_t count,
                                    double bound, uint64_t seed, uint64_t offset,
                                    tecore_stream_t stream);
/* dst[i] = alpha * a[i] + beta * b[i], computed in float and rounded to
 * dtype (F32, F16 or BF16).  dst may alias a or b. */
tecore_result_t tecore_scale_add(tecore_devptr_t dst, tecore_devptr_t a, float alpha,
                                 tecore_devptr_t b, float beta, tecore_dtype_t dtype,
                                 size_t count, tecore_stream_t stream);

#ifdef __cplusplus
}
#endif
#endif
