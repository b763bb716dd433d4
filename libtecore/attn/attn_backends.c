/* SPDX-License-Identifier: Apache-2.0 */
/* attn_backends.c -- the attention backend table, in the order
 * TECORE_ATTN_BACKEND=auto walks it: the virtual device's C
 * implementation first (it takes every problem, and only on vdev), then
 * cuDNN's fused attention, then libte's own kernels.  A new backend is a
 * file and a row here. */
#include "attn/attn_internal.h"

const struct te_attn_backend *const te_attn_backends[] = {
    &te_attn_backend_vdev,
    &te_attn_backend_cudnn,
    &te_attn_backend_libte,
};
const size_t te_attn_backend_count = TE_ARRAY_SIZE(te_attn_backends);
