/* SPDX-License-Identifier: Apache-2.0 */
/* attn_internal.h -- private interface between the libte and vdev rows of
 * the attention backend table: the kernel table of kernels/attention.cu
 * (attn_libte.c), the launches both rows share, and the vdev
 * implementations of the kernels (attn_vdev.c). */
#ifndef TECORE_ATTN_INTERNAL_H
#define TECORE_ATTN_INTERNAL_H

#include "ksupport/ksupport.h"
#include "attn/attn_backend.h"
#include "common/attention.h"
#include "common/attention_params.h"

TE_KARGS(te_attn_args, TE_ATTN_PARAMS)
TE_KARGS(te_attn_seqlens_args, TE_ATTN_SEQLENS_PARAMS)

/* The backend table, in the order auto walks it (attn_backends.c). */
extern const struct te_attn_backend *const te_attn_backends[];
extern const size_t te_attn_backend_count;

/* The kernels of kernels/attention.cu, by index into the table. */
enum te_attn_kernel { TE_ATTN_K_SEQLENS, TE_ATTN_K_FWD, TE_ATTN_K_BWD_PREP, TE_ATTN_K_BWD,
                      TE_ATTN_K_BWD_DQ, TE_ATTN_K_COUNT_ };

/* The vdev implementations (attn_vdev.c): each runs the whole grid. */
void te_attn_vdev_seqlens(const struct tecore_launch_cfg *cfg, void *const *args);
void te_attn_vdev_fwd(const struct tecore_launch_cfg *cfg, void *const *args);
void te_attn_vdev_bwd_prep(const struct tecore_launch_cfg *cfg, void *const *args);
void te_attn_vdev_bwd(const struct tecore_launch_cfg *cfg, void *const *args);
void te_attn_vdev_bwd_dq(const struct tecore_launch_cfg *cfg, void *const *args);

/* Fills cu_q and cu_kv (device int32 [batch + 1]) with b * len (attn.c's
 * copy of fixed lengths; a kernel, so it captures). */
tecore_result_t te_attn_launch_seqlens(tecore_devptr_t cu_q, tecore_devptr_t cu_kv, size_t batch,
                                       size_t len_q, size_t len_kv, tecore_stream_t stream);
/* The kernel launches of a forward and a backward (attn_libte.c). */
tecore_result_t te_attn_launch_fwd(const struct te_attn_problem *p, tecore_stream_t stream);
tecore_result_t te_attn_launch_bwd(const struct te_attn_problem *p, tecore_stream_t stream);
/* The backward's workspace: dsum then dq_acc, float. */
size_t te_attn_bwd_workspace(const struct te_attn_problem *p);
/* 1 when the device is the virtual one. */
int te_attn_on_vdev(void);

#endif
