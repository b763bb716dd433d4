/* SPDX-License-Identifier: Apache-2.0 */
/* optim_internal.h -- private to libtecore/optim: the optimizer kernel
 * table (ids by kernel), the kernels' argument structs, the vdev
 * implementations the table names, and the launch
 * helper shared by the step entry points (optim.c) and the norm / unscale
 * entry points (optim_reduce.c). */
#ifndef TECORE_OPTIM_INTERNAL_H
#define TECORE_OPTIM_INTERNAL_H

#include "ksupport/ksupport.h"
#include <te/optim.h>
#include "common/optim.h"
#include "common/optim_params.h"

/* The kernels' arguments (kernels/common/optim_params.h). */
TE_KARGS(te_optim_step_args, TE_OPTIM_STEP_PARAMS)
TE_KARGS(te_optim_l2_partial_args, TE_OPTIM_L2_PARTIAL_PARAMS)
TE_KARGS(te_optim_unscale_args, TE_OPTIM_UNSCALE_PARAMS)
TE_KARGS(te_optim_commit_args, TE_OPTIM_COMMIT_PARAMS)
TE_KARGS(te_optim_l2_final_args, TE_OPTIM_L2_FINAL_PARAMS)

/* Kernel ids relative to the table's first id. */
enum { TE_OPTIM_K_ADAM, TE_OPTIM_K_SGD, TE_OPTIM_K_L2_PARTIAL, TE_OPTIM_K_L2_FINAL,
       TE_OPTIM_K_UNSCALE, TE_OPTIM_K_COMMIT, TE_OPTIM_K_COUNT_ };

/* vdev implementations (optim_vdev.c): each runs the whole grid. */
void te_optim_vdev_adam(const struct tecore_launch_cfg *cfg, void *const *args);
void te_optim_vdev_sgd(const struct tecore_launch_cfg *cfg, void *const *args);
void te_optim_vdev_l2_partial(const struct tecore_launch_cfg *cfg, void *const *args);
void te_optim_vdev_l2_final(const struct tecore_launch_cfg *cfg, void *const *args);
void te_optim_vdev_unscale(const struct tecore_launch_cfg *cfg, void *const *args);
void te_optim_vdev_commit(const struct tecore_launch_cfg *cfg, void *const *args);

/* Launches kernel k of the table (registered on first use) on a 1-D grid
 * of `blocks` blocks of TE_OPTIM_THREADS threads. */
tecore_result_t te_optim_launch(int k, unsigned blocks, void **args, tecore_stream_t stream);

/* Blocks (4096-element chunks) a tensor of n elements takes in a step,
 * and (16384-element chunks) in the norm and unscale. */
static inline uint64_t te_optim_blocks(uint64_t n) {
  return (n + TE_OPTIM_CHUNK - 1) / TE_OPTIM_CHUNK;
}
static inline uint64_t te_red_blocks(uint64_t n) { return (n + TE_RED_CHUNK - 1) / TE_RED_CHUNK; }

/* Most blocks of one launch, and so most chunks of one tensor (grid.x). */
#define TE_OPTIM_MAX_BLOCKS 0x7fffffffull

/* 1 when addr is 0 or a multiple of align. */
static inline int te_optim_aligned(tecore_devptr_t addr, size_t align) {
  return addr % align == 0;
}

#endif
