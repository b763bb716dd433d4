/* SPDX-License-Identifier: Apache-2.0 */
/* elementwise_internal.h -- private interface of the elementwise family
 * (libtecore/elementwise): the kernels' argument structs and the vdev
 * implementations (elementwise_vdev.c) that the kernel table
 * (elementwise.c) names. */
#ifndef TECORE_ELEMENTWISE_INTERNAL_H
#define TECORE_ELEMENTWISE_INTERNAL_H

#include "ksupport/ksupport.h"
#include "common/elementwise.h"
#include "common/elementwise_params.h"

/* The kernels' arguments (kernels/common/elementwise_params.h). */
TE_KARGS(te_fill_args, TE_FILL_PARAMS)
TE_KARGS(te_init_uniform_args, TE_INIT_UNIFORM_PARAMS)
TE_KARGS(te_scale_add_args, TE_SCALE_ADD_PARAMS)
TE_KARGS(te_memset_args, TE_MEMSET_PARAMS)
TE_KARGS(te_copy_args, TE_COPY_PARAMS)
TE_KARGS(te_copy2d_u32_args, TE_COPY2D_U32_PARAMS)
TE_KARGS(te_colsum_part_args, TE_COLSUM_PART_PARAMS)
TE_KARGS(te_colsum_final_args, TE_COLSUM_FINAL_PARAMS)
TE_KARGS(te_qkv_kv_bias_args, TE_QKV_KV_BIAS_PARAMS)

void te_ew_vdev_fill(const struct tecore_launch_cfg *cfg, void *const *args);
void te_ew_vdev_init_uniform(const struct tecore_launch_cfg *cfg, void *const *args);
void te_ew_vdev_scale_add(const struct tecore_launch_cfg *cfg, void *const *args);
void te_ew_vdev_memset(const struct tecore_launch_cfg *cfg, void *const *args);
void te_ew_vdev_copy(const struct tecore_launch_cfg *cfg, void *const *args);
void te_ew_vdev_copy2d_u32(const struct tecore_launch_cfg *cfg, void *const *args);
void te_ew_vdev_colsum_part(const struct tecore_launch_cfg *cfg, void *const *args);
void te_ew_vdev_colsum_final(const struct tecore_launch_cfg *cfg, void *const *args);
void te_ew_vdev_qkv_kv_bias(const struct tecore_launch_cfg *cfg, void *const *args);

/* n values of dtype (F32, F16, BF16) at dst, uniform in [-bound, bound):
 * draws 1 .. n of splitmix64 after state (te_ew_uniform), rounded through
 * round (F16 or BF16; TECORE_DTYPE_F32: not) before the store; on stream.
 * The caller's generator then stands at state + n steps. */
tecore_result_t te_init_uniform(tecore_devptr_t dst, tecore_dtype_t dtype, size_t n,
                                uint64_t state, double bound, tecore_dtype_t round,
                                tecore_stream_t stream);

/* The column sums of a [rows][cols] tensor, out[c] = sum_r in[r][c] in
 * F32 (plus out's old value when acc), in a fixed order (the same bits on
 * both backends, whatever the launch), on stream: a bias gradient
 * (ops_linear.c).  in: F32, F16 or BF16, 16-byte aligned, cols a
 * multiple of 8; ws: te_colsum_ws_bytes(cols) bytes of scratch. */
size_t te_colsum_ws_bytes(size_t cols);
/* te_colsum's parts: rows per part (returned) and *parts; rows > 0. */
size_t te_colsum_plan(size_t rows, size_t cols, size_t *parts);
/* te_colsum's second kernel alone: out[c] (+)= the sum over parts of
 * ws[part][c], the parts made by a kernel of te_colsum_part's plan and
 * order (te_act_bwd_colsum). */
tecore_result_t te_colsum_final(tecore_devptr_t out, tecore_devptr_t ws, size_t parts,
                                size_t cols, int acc, tecore_stream_t stream);
tecore_result_t te_colsum(tecore_devptr_t out, const struct tecore_tensor *in, int acc,
                          tecore_devptr_t ws, size_t ws_bytes, tecore_stream_t stream);
/* The key and value parts of a packed QKV Linear's bias gradient (out:
 * its F32 [2 kv_heads head_dim] after the query part) from the output
 * Linear's bias gradient s (F32 [n_out]) and weight w (F16/BF16 [n_out]
 * [heads head_dim]): TE_QKV_KV_BIAS_PARAMS. */
struct te_qkv_heads {
  int heads, kv_heads, head_dim;
};
tecore_result_t te_qkv_kv_bias(tecore_devptr_t out, tecore_devptr_t s, tecore_devptr_t w,
                               tecore_dtype_t wdt, size_t n_out, const struct te_qkv_heads *h,
                               int acc, tecore_stream_t stream);
/* te_colsum over columns c0 .. c0 + cols - 1 of in (c0 and cols multiples
 * of 8) into out[0 .. cols - 1]. */
tecore_result_t te_colsum_cols(tecore_devptr_t out, const struct tecore_tensor *in, size_t c0,
                               size_t cols, int acc, tecore_devptr_t ws, size_t ws_bytes,
                               tecore_stream_t stream);

#endif
