/* SPDX-License-Identifier: Apache-2.0 */
/* boot_nccl.c -- the bootstrap over a caller's NCCL communicator: rank
 * and size from it, allgather through ncclAllGather on a private stream
 * (host blocks staged through one device buffer), barrier as a one-byte
 * allgather.  Waits are bounded by TECOMM_TIMEOUT. */
#include "boot.h"
#include "nccl/nccl.h"
#include <stdlib.h>
#include <string.h>

struct nccl_boot {
  struct tc_boot b;
  tc_nccl_comm_t comm;
  tecore_stream_t stream;
};

static tecomm_result_t nb_allgather(struct tc_boot *b, const void *send, void *recv,
                                    size_t bytes) {
  struct nccl_boot *nb = (struct nccl_boot *)b;
  const struct tc_nccl *n = tc_nccl_get(NULL);
  size_t all = (size_t)b->nranks * bytes;
  tecore_devptr_t d = 0;
  TC_CORE(tecore_mem_alloc(all ? all : 1, &d), "nccl bootstrap: device buffer");
  tecomm_result_t res = TECOMM_SUCCESS;
  tecore_devptr_t mine = d + (size_t)b->rank * bytes;
  tecore_result_t cr = tecore_memcpy_async(mine, (tecore_devptr_t)(uintptr_t)send, bytes, nb->stream);
  if (cr != TECORE_SUCCESS) {
    res = tc_core(cr, "nccl bootstrap: copy in");
    goto out;
  }
  int nr = n->AllGather((const void *)(uintptr_t)mine, (void *)(uintptr_t)d, bytes, TC_NCCL_UINT8,
                        nb->comm, nb->stream);
  nr = tc_nccl_wait(n, nb->comm, nr, tc_timeout_ms()); /* a caller's non-blocking communicator */
  if (nr == -1) {
    res = TC_ERR(TECOMM_ERR_TIMEOUT, "nccl bootstrap: ncclAllGather stayed in progress past "
                                     "TECOMM_TIMEOUT");
    goto out;
  }
  if (nr != 0) {
    res = tc_nccl_err(nr, "nccl bootstrap: ncclAllGather");
    goto out;
  }
  cr = tecore_memcpy_async((tecore_devptr_t)(uintptr_t)recv, d, all, nb->stream);
  if (cr != TECORE_SUCCESS) {
    res = tc_core(cr, "nccl bootstrap: copy out");
    goto out;
  }
  int64_t deadline = tc_now_ms() + tc_timeout_ms();
  for (;;) {
    cr = tecore_stream_query(nb->stream);
    if (cr == TECORE_SUCCESS) break;
    if (cr != TECORE_ERR_NOT_READY) {
      res = tc_core(cr, "nccl bootstrap: stream");
      goto out;
    }
    if (tc_now_ms() > deadline) {
      res = TC_ERR(TECOMM_ERR_TIMEOUT, "nccl bootstrap: ncclAllGather did not finish within "
                                       "TECOMM_TIMEOUT");
      goto out; /* the buffer stays allocated: NCCL may still write it */
    }
  }
  (void)tecore_mem_free(d);
  return TECOMM_SUCCESS;
out:
  if (res != TECOMM_ERR_TIMEOUT) (void)tecore_mem_free(d);
  return res;
}

static void nb_close(struct tc_boot *b) {
  struct nccl_boot *nb = (struct nccl_boot *)b;
  if (nb->stream) {
    (void)tecore_stream_synchronize(nb->stream);
    (void)tecore_stream_destroy(nb->stream);
  }
  free(nb);
}

tecomm_result_t tc_boot_nccl_open(void *nccl_comm, int *rank, int *nranks, struct tc_boot **out) {
  static const char fn[] = "tecomm_comm_init (NCCL bootstrap)";
  const char *why = NULL;
  const struct tc_nccl *n = tc_nccl_get(&why);
  if (!n) return TC_ERR(TECOMM_ERR_NOT_SUPPORTED, "%s: %s", fn, why);
  if (n->emulated) /* vdev's NCCL: no communicator of the caller's can be one of its own */
    return TC_ERR(TECOMM_ERR_NOT_SUPPORTED, "%s: %s has no ncclAllGather for a caller's "
                  "communicator", fn, why);
  int r = -1, c = -1;
  if (n->CommUserRank(nccl_comm, &r) != 0 || n->CommCount(nccl_comm, &c) != 0)
    return TC_ERR(TECOMM_ERR_INVALID, "%s: bootstrap->nccl_comm is not a live NCCL communicator", fn);
  TC_ARG(*rank < 0 || *rank == r, "%s: rank %d but the NCCL communicator says %d", fn, *rank, r);
  TC_ARG(*nranks < 0 || *nranks == c, "%s: nranks %d but the NCCL communicator has %d", fn, *nranks,
         c);
  *rank = r;
  *nranks = c;
  struct nccl_boot *nb = calloc(1, sizeof *nb);
  if (!nb) return TC_ERR(TECOMM_ERR_NOMEM, "%s: out of host memory", fn);
  nb->b = (struct tc_boot){.rank = r, .nranks = c, .kind = "nccl", .failed_peer = -1,
                           .allgather = nb_allgather,
                           .barrier = tc_boot_barrier, .close = nb_close};
  nb->comm = nccl_comm;
  tecore_result_t cr = tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &nb->stream);
  if (cr != TECORE_SUCCESS) {
    free(nb);
    return tc_core(cr, "nccl bootstrap: stream");
  }
  *out = &nb->b;
  return TECOMM_SUCCESS;
}
