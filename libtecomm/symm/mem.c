/* SPDX-License-Identifier: Apache-2.0 */
/* mem.c -- tecomm_mem_alloc / tecomm_mem_free / tecomm_mem_peer_ptr:
 * symmetric memory for callers.  In the pool (first fit, the same offset
 * on every rank because every rank makes the same calls in the same
 * order: checked by an allgather of the offsets); past the pool, or where
 * no pool could be had, a segment of its own (registered with every
 * peer). */
#include "comm_priv.h"
#include <stdlib.h>

TE_EXPORT tecomm_result_t tecomm_mem_alloc(tecomm_comm_t comm, size_t bytes, tecore_devptr_t *ptr) {
  static const char fn[] = "tecomm_mem_alloc";
  TC_COMM(comm, fn);
  TC_ARG(ptr, "%s: ptr is NULL", fn);
  TC_ARG(bytes > 0, "%s: bytes is 0", fn);
  *ptr = 0;
  TC_ARG(bytes <= TC_MEM_MAX, "%s: bytes (%zu) is more than %zu", fn, bytes, TC_MEM_MAX);
  TC_CHECK(tc_comm_ready(comm, fn, 0));
  if (comm->level > TC_LEVEL_INPLACE || !comm->mesh)
    return TC_ERR(TECOMM_ERR_NOT_SUPPORTED, "%s: no symmetric memory at level %s (%s)", fn,
                  tc_level_name(comm->level), comm->level_why);
  size_t off = comm->pool ? tc_pool_take(comm->pool, bytes) : (size_t)-1;
  uint64_t mine[2] = {off, bytes}, all[2 * TC_AR_MAX_RANKS];
  tecomm_result_t gr = comm->mesh->allgather(comm->mesh, mine, all, sizeof mine);
  if (gr != TECOMM_SUCCESS) {
    if (off != (size_t)-1) (void)tc_pool_give(comm->pool, off);
    return tc_comm_fail(comm, gr);
  }
  for (int r = 0; r < comm->nranks; r++)
    if (all[2 * r] != off || all[2 * r + 1] != bytes) {
      if (off != (size_t)-1) (void)tc_pool_give(comm->pool, off);
      return TC_ERR(TECOMM_ERR_INVALID,
                    "%s: rank %d asked for %llu bytes (this rank %zu) or its pool diverged: every "
                    "rank must make the same calls",
                    fn, r, (unsigned long long)all[2 * r + 1], bytes);
    }
  if (off != (size_t)-1) {
    *ptr = tc_seg_addr(comm->pool, comm->rank, off);
    return TECOMM_SUCCESS;
  }
  /* the pool is full (or absent): a segment of its own, on every rank */
  struct tc_seg *seg = NULL;
  int bad = -1;
  TC_CHECK(tc_seg_create(comm, bytes, "ipc", &seg, &bad));
  TC_TRACE("%s: %zu bytes past the pool: a registered segment", fn, bytes);
  *ptr = tc_seg_addr(seg, comm->rank, 0);
  return TECOMM_SUCCESS;
}

TE_EXPORT tecomm_result_t tecomm_mem_free(tecomm_comm_t comm, tecore_devptr_t ptr) {
  static const char fn[] = "tecomm_mem_free";
  TC_COMM(comm, fn);
  if (!ptr) return TECOMM_SUCCESS;
  size_t off = 0;
  struct tc_seg *s = tc_seg_find(comm, ptr, 1, &off);
  int is_ws = comm->ws.me && ptr == comm->ws.me;
  int is_stage = s && (s->internal || (s == comm->stage_seg && off == comm->stage));
  if (!s || is_ws || is_stage || (s != comm->pool && off != 0) ||
      (s == comm->pool && tc_pool_give(comm->pool, off) != 0))
    return TC_ERR(TECOMM_ERR_INVALID, "%s: ptr 0x%llx is not an allocation of tecomm_mem_alloc",
                  fn, (unsigned long long)ptr);
  if (s != comm->pool) tc_seg_destroy(comm, s);
  return TECOMM_SUCCESS;
}

TE_EXPORT tecomm_result_t tecomm_mem_peer_ptr(tecomm_comm_t comm, tecore_devptr_t ptr, int peer,
                                              tecore_devptr_t *peer_ptr) {
  static const char fn[] = "tecomm_mem_peer_ptr";
  TC_COMM(comm, fn);
  TC_ARG(peer_ptr, "%s: peer_ptr is NULL", fn);
  TC_ARG(peer >= 0 && peer < comm->nranks, "%s: peer %d is not in [0, %d)", fn, peer, comm->nranks);
  *peer_ptr = 0;
  size_t off = 0, room = 0;
  struct tc_seg *s = NULL;
  TC_ARG(tc_seg_find(comm, ptr, 1, &off) && tc_sym_room(comm, ptr, &s, &off, &room),
         "%s: ptr 0x%llx is not in this rank's symmetric memory", fn, (unsigned long long)ptr);
  TC_ARG(room > 0, "%s: ptr 0x%llx is in free pool space (freed, or never allocated by "
         "tecomm_mem_alloc)", fn, (unsigned long long)ptr);
  *peer_ptr = tc_seg_addr(s, peer, off);
  return TECOMM_SUCCESS;
}
