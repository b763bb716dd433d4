/* SPDX-License-Identifier: Apache-2.0 */
/* transpose_internal.h -- private interface of the cast-transpose family
 * (libtecore/transpose): the kernels' argument structs shared by the
 * launch code and the vdev implementation, the vdev functions, and an
 * entry that other libtecore code (tecore_quantize with a columnwise
 * output) may call to reuse these kernels. */
#ifndef TECORE_TRANSPOSE_INTERNAL_H
#define TECORE_TRANSPOSE_INTERNAL_H

#include "ksupport/ksupport.h"
#include "common/transpose_params.h"

/* The kernels' arguments (kernels/common/transpose_params.h): struct
 * te_ct_args for every te_ct_* kernel, struct te_ctr_args for
 * te_ct_dbias_reduce. */
TE_KARGS(te_ct_args, TE_CT_PARAMS)
TE_KARGS(te_ctr_args, TE_CTR_PARAMS)
TE_KARGS(te_ctb_args, TE_CTB_PARAMS)

/* The vdev implementations (libtecore/transpose/transpose_vdev.c): one
 * function serves every te_ct_* kernel (the flags word names the variant). */
void te_ct_vdev(const struct tecore_launch_cfg *cfg, void *const *args);
void te_ct_vdev_dbias_reduce(const struct tecore_launch_cfg *cfg, void *const *args);
void te_ct_vdev_byte_transpose(const struct tecore_launch_cfg *cfg, void *const *args);

/* out [cols][rows] = the transpose of in [rows][cols], 1-byte elements,
 * on stream: the columnwise copy of a per-tensor-scaled FP8 tensor from
 * its rowwise one (the codes are the same, so is the scale inverse).  in
 * and out are device buffers of rows * cols bytes that must not overlap;
 * for libtecore's own callers (ops_linear.c), which pass its buffers. */
tecore_result_t te_byte_transpose(tecore_devptr_t out, tecore_devptr_t in, size_t rows,
                                  size_t cols, tecore_stream_t stream);

#endif
