/* SPDX-License-Identifier: Apache-2.0 */
/* boot_mpi.c -- the bootstrap over a caller's MPI communicator (configure
 * --with-mpi): rank and size from it, MPI_Allgather of bytes, MPI_Barrier.
 * MPI's calls block without a bound of ours: a dead peer is MPI's to
 * report (most implementations abort the job). */
#include "boot.h"
#include <mpi.h>
#include <stdlib.h>

struct mpi_boot {
  struct tc_boot b;
  MPI_Comm comm;
};

static tecomm_result_t mb_allgather(struct tc_boot *b, const void *send, void *recv,
                                    size_t bytes) {
  struct mpi_boot *m = (struct mpi_boot *)b;
  if (bytes > (size_t)INT32_MAX)
    return TC_ERR(TECOMM_ERR_INVALID, "mpi bootstrap: %zu bytes exceed an MPI count", bytes);
  int r = MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, m->comm);
  if (r != MPI_SUCCESS)
    return TC_ERR(TECOMM_ERR_BOOTSTRAP, "mpi bootstrap: MPI_Allgather returned %d", r);
  return TECOMM_SUCCESS;
}

static tecomm_result_t mb_barrier(struct tc_boot *b) {
  struct mpi_boot *m = (struct mpi_boot *)b;
  int r = MPI_Barrier(m->comm);
  if (r != MPI_SUCCESS) return TC_ERR(TECOMM_ERR_BOOTSTRAP, "mpi bootstrap: MPI_Barrier returned %d", r);
  return TECOMM_SUCCESS;
}

static void mb_close(struct tc_boot *b) { free(b); }

tecomm_result_t tc_boot_mpi_open(const void *mpi_comm, int *rank, int *nranks,
                                 struct tc_boot **out) {
  static const char fn[] = "tecomm_comm_init (MPI bootstrap)";
  int inited = 0;
  MPI_Initialized(&inited);
  TC_ARG(inited, "%s: MPI is not initialized (call MPI_Init first)", fn);
  MPI_Comm comm = *(const MPI_Comm *)mpi_comm;
  int r = -1, n = -1;
  if (MPI_Comm_rank(comm, &r) != MPI_SUCCESS || MPI_Comm_size(comm, &n) != MPI_SUCCESS)
    return TC_ERR(TECOMM_ERR_INVALID, "%s: bootstrap->mpi_comm is not a valid communicator", fn);
  TC_ARG(*rank < 0 || *rank == r, "%s: rank %d but the MPI communicator says %d", fn, *rank, r);
  TC_ARG(*nranks < 0 || *nranks == n, "%s: nranks %d but the MPI communicator has %d", fn, *nranks,
         n);
  *rank = r;
  *nranks = n;
  struct mpi_boot *m = calloc(1, sizeof *m);
  if (!m) return TC_ERR(TECOMM_ERR_NOMEM, "%s: out of host memory", fn);
  m->b = (struct tc_boot){.rank = r, .nranks = n, .kind = "mpi", .allgather = mb_allgather,
                          .barrier = mb_barrier, .close = mb_close};
  m->comm = comm;
  *out = &m->b;
  return TECOMM_SUCCESS;
}
