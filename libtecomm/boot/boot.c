/* SPDX-License-Identifier: Apache-2.0 */
/* boot.c -- picks the bootstrap a tecomm_bootstrap describes, and the
 * caller-callbacks bootstrap (allgather + barrier + ctx). */
#include "boot.h"
#include <stdlib.h>

struct cb_boot {
  struct tc_boot b;
  tecomm_allgather_fn allgather;
  tecomm_barrier_fn barrier;
  void *ctx;
};

static tecomm_result_t cb_allgather(struct tc_boot *b, const void *send, void *recv,
                                    size_t bytes) {
  struct cb_boot *c = (struct cb_boot *)b;
  int r = c->allgather(send, recv, bytes, c->ctx);
  if (r != 0)
    return TC_ERR(TECOMM_ERR_BOOTSTRAP, "bootstrap: the caller's allgather of %zu bytes returned %d",
                  bytes, r);
  return TECOMM_SUCCESS;
}

static tecomm_result_t cb_barrier(struct tc_boot *b) {
  struct cb_boot *c = (struct cb_boot *)b;
  int r = c->barrier(c->ctx);
  if (r != 0) return TC_ERR(TECOMM_ERR_BOOTSTRAP, "bootstrap: the caller's barrier returned %d", r);
  return TECOMM_SUCCESS;
}

static void cb_close(struct tc_boot *b) { free(b); }

static tecomm_result_t tc_boot_callbacks_open(const struct tecomm_bootstrap *bs, int rank,
                                              int nranks, struct tc_boot **out) {
  static const char fn[] = "tecomm_comm_init";
  TC_ARG(bs->allgather, "%s: bootstrap->allgather is NULL (TECOMM_BOOTSTRAP_CALLBACKS)", fn);
  TC_ARG(bs->barrier, "%s: bootstrap->barrier is NULL (TECOMM_BOOTSTRAP_CALLBACKS)", fn);
  TC_ARG(rank >= 0 && nranks >= 1, "%s: rank (%d) and nranks (%d) must be given with callbacks",
         fn, rank, nranks);
  struct cb_boot *c = calloc(1, sizeof *c);
  if (!c) return TC_ERR(TECOMM_ERR_NOMEM, "%s: out of host memory", fn);
  c->b = (struct tc_boot){.rank = rank, .nranks = nranks, .kind = "callbacks",
                          .failed_peer = -1,
                          .allgather = cb_allgather, .barrier = cb_barrier, .close = cb_close};
  c->allgather = bs->allgather;
  c->barrier = bs->barrier;
  c->ctx = bs->ctx;
  *out = &c->b;
  return TECOMM_SUCCESS;
}

tecomm_result_t tc_boot_open(const struct tecomm_bootstrap *bs, int *rank, int *nranks,
                             struct tc_boot **out) {
  static const char fn[] = "tecomm_comm_init";
  tecomm_bootstrap_kind_t kind = bs ? bs->kind : TECOMM_BOOTSTRAP_ENV;
  tecomm_result_t r;
  switch (kind) {
  case TECOMM_BOOTSTRAP_ENV:
    r = tc_boot_tcp_open(bs ? bs->root : NULL, rank, nranks, out);
    break;
  case TECOMM_BOOTSTRAP_CALLBACKS:
    r = tc_boot_callbacks_open(bs, *rank, *nranks, out);
    break;
  case TECOMM_BOOTSTRAP_NCCL:
    TC_ARG(bs->nccl_comm, "%s: bootstrap->nccl_comm is NULL (TECOMM_BOOTSTRAP_NCCL)", fn);
    r = tc_boot_nccl_open(bs->nccl_comm, rank, nranks, out);
    break;
  case TECOMM_BOOTSTRAP_MPI:
    /* libtecomm links no MPI: te/comm_mpi.h, compiled by the caller's MPI,
     * fills the callbacks (and mpi_comm) of this kind */
    TC_ARG(bs->mpi_comm, "%s: bootstrap->mpi_comm is NULL (TECOMM_BOOTSTRAP_MPI)", fn);
    if (!bs->allgather || !bs->barrier)
      return TC_ERR(TECOMM_ERR_NOT_SUPPORTED,
                    "%s: TECOMM_BOOTSTRAP_MPI without callbacks: libtecomm links no MPI; fill "
                    "the bootstrap with tecomm_mpi_bootstrap() of <te/comm_mpi.h>, compiled by "
                    "your MPI's mpicc", fn);
    r = tc_boot_callbacks_open(bs, *rank, *nranks, out);
    break;
  default:
    return TC_ERR(TECOMM_ERR_INVALID, "%s: bootstrap->kind %d is not a tecomm_bootstrap_kind", fn,
                  (int)kind);
  }
  if (r != TECOMM_SUCCESS) return r;
  if ((*out)->rank != *rank || (*out)->nranks != *nranks) {
    /* adapters fill rank/nranks; a mismatch with what the caller said is
     * the caller's error, caught before any exchange can hang on it */
    tc_boot_close(*out);
    *out = NULL;
    return TC_ERR(TECOMM_ERR_INVALID, "%s: rank/nranks disagree with the bootstrap", fn);
  }
  return TECOMM_SUCCESS;
}

void tc_boot_close(struct tc_boot *b) {
  if (b && b->close) b->close(b);
}
