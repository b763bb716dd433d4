/* SPDX-License-Identifier: Apache-2.0 */
/* ipc_lv.h -- what the ipc level's files share (ipc.c, coll_run.c). */
#ifndef TC_IPC_LV_H
#define TC_IPC_LV_H

#include "level.h"

/* The IPC kernels' reduce-scatter and all-gather (coll_run.c): the
 * input read in place or staged in the pool, then one-shot, the gather
 * kernel or their copy-engine forms. */
tecomm_result_t tc_run_coll_kernel(struct tecomm_comm *c, const struct tc_call *k);

#endif
