/* SPDX-License-Identifier: Apache-2.0 */
/* attn_internal.h -- private interface of the attention family's files:
 * the backend table (attn_backends.c), the kernel table of
 * kernels/attention.cu and the libte and vdev rows that launch it
 * (attn_libte.c), the vdev implementations of the kernels (attn_vdev.c),
 * and the one launch the entry points make (attn.c). */
#ifndef TECORE_ATTN_INTERNAL_H
#define TECORE_ATTN_INTERNAL_H

#include "ksupport/ksupport.h"
#include "attn/attn_backend.h"
#include "common/attention.h"
#include "common/attention_params.h"

TE_KARGS(te_attn_args, TE_ATTN_PARAMS)
TE_KARGS(te_attn_seqlens_args, TE_ATTN_SEQLENS_PARAMS)
TE_KARGS(te_attn_check_args, TE_ATTN_CHECK_PARAMS)

/* The backend table, in the order auto walks it (attn_backends.c). */
extern const struct te_attn_backend *const te_attn_backends[];
extern const size_t te_attn_backend_count;

/* The kernels of kernels/attention.cu, by index into the table. */
enum te_attn_kernel { TE_ATTN_K_SEQLENS, TE_ATTN_K_FWD, TE_ATTN_K_BWD_PREP, TE_ATTN_K_BWD,
                      TE_ATTN_K_BWD_DQ, TE_ATTN_K_COUNT_ };

/* The vdev implementations (attn_vdev.c): each runs the whole grid. */
void te_attn_vdev_seqlens(const struct tecore_launch_cfg *cfg, void *const *args);
void te_attn_vdev_seqlens_check(const struct tecore_launch_cfg *cfg, void *const *args);
void te_attn_vdev_fwd(const struct tecore_launch_cfg *cfg, void *const *args);
void te_attn_vdev_bwd_prep(const struct tecore_launch_cfg *cfg, void *const *args);
void te_attn_vdev_bwd(const struct tecore_launch_cfg *cfg, void *const *args);
void te_attn_vdev_bwd_dq(const struct tecore_launch_cfg *cfg, void *const *args);

/* Fills cu_q and cu_kv (device int32 [batch + 1]) with b * len (attn.c's
 * copy of fixed lengths; a kernel, so it captures; attn_libte.c). */
tecore_result_t te_attn_launch_seqlens(tecore_devptr_t cu_q, tecore_devptr_t cu_kv, size_t batch,
                                       size_t len_q, size_t len_kv, tecore_stream_t stream);
/* Reports the first entry of the caller's cu_seqlens out of the problem's
 * bounds into status (the device address of a mapped host word). */
tecore_result_t te_attn_launch_check(const struct te_attn_problem *p, tecore_devptr_t status,
                                     tecore_stream_t stream);

#endif
