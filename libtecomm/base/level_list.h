/* SPDX-License-Identifier: Apache-2.0 */
/* level_list.h -- the one list of libtecomm's levels, best first (the
 * fallback chain's order).  From it come enum tc_lv (the rows of
 * tc_levels[], the slots of c->lv[]), tc_level_t (the places in the
 * chain a communicator stands at, c->level, and their names),
 * tc_algo_at_t (where an algorithm runs, algos.h's at column), the table
 * itself (levels.c) and its rows' declarations (level.h).
 *
 * X(id, name, places):
 *   id      TC_LV_<id> and TC_AT_<id>; the row is tc_level_<name>;
 *   places  the places in the chain the level can give a communicator,
 *           as a list P(place, text): TC_LEVEL_<place>, called text in
 *           messages.  nvls and mnnvl give none: their algorithms run
 *           beside the place the others gave. */
#ifndef TC_LEVEL_LIST_H
#define TC_LEVEL_LIST_H

/* pool: IPC kernels, inputs staged in the symmetric pool; in-place: no
 * pool, IPC in place on registered (tecomm_mem_alloc) inputs; nccl:
 * ncclAllReduce; verbs: host-staged allreduce over InfiniBand/RoCE */
#define TC_LV_NO_PLACES(P)
#define TC_LV_IPC_PLACES(P) P(POOL, "pool") P(INPLACE, "registered in-place")
#define TC_LV_NCCL_PLACES(P) P(NCCL, "nccl")
#define TC_LV_VERBS_PLACES(P) P(VERBS, "verbs")

#define TC_LEVELS(X)               \
  X(NVLS, nvls, TC_LV_NO_PLACES)   \
  X(MNNVL, mnnvl, TC_LV_NO_PLACES) \
  X(IPC, ipc, TC_LV_IPC_PLACES)    \
  X(NCCL, nccl, TC_LV_NCCL_PLACES) \
  X(VERBS, verbs, TC_LV_VERBS_PLACES)

#define TC_LV_ENUM_(id, name, places) TC_LV_##id,
enum tc_lv { TC_LEVELS(TC_LV_ENUM_) TC_LV_COUNT };

/* Where a communicator stands, best first (every rank at the same place,
 * decided from allgathered facts only); NONE: nothing can run (no IPC,
 * NCCL or verbs), calls fail clearly.  Ordered: c->level > INPLACE is
 * "below the IPC kernels". */
#define TC_PLACE_ENUM_(place, text) TC_LEVEL_##place,
#define TC_LV_PLACE_ENUM_(id, name, places) places(TC_PLACE_ENUM_)
typedef enum { TC_LEVELS(TC_LV_PLACE_ENUM_) TC_LEVEL_NONE } tc_level_t;

/* Where an algorithm runs: the selection table (auto), or a level (its
 * row's index). */
#define TC_AT_ENUM_(id, name, places) TC_AT_##id = TC_LV_##id,
typedef enum tc_algo_at { TC_AT_TABLE = -1, TC_LEVELS(TC_AT_ENUM_) } tc_algo_at_t;

#endif
