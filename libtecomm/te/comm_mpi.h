/* SPDX-License-Identifier: Apache-2.0 */
/* te/comm_mpi.h -- libtecomm's bootstrap over the caller's MPI communicator,
 * compiled by the caller's own MPI (mpicc of MPICH, Open MPI, Cray MPI...):
 * libtecomm links no MPI library; this header turns an MPI_Comm into the
 * callbacks bootstrap (MPI_Allgather of bytes and MPI_Barrier).
 *
 *   #include <mpi.h>
 *   #include <te/comm_mpi.h>
 *   MPI_Comm world = MPI_COMM_WORLD;      // outlives the communicator
 *   tecomm_comm_t c;
 *   tecomm_comm_init_mpi(&world, -1, &c);
 *
 * The MPI_Comm the pointer names must stay valid until the communicator is
 * destroyed (communicators spanning hosts use the bootstrap after init).
 * MPI's calls block without a bound of libtecomm's: a dead peer is MPI's to
 * report.  The functions are static inline, so nothing here is a symbol of
 * libtecomm. */
#ifndef TE_COMM_MPI_H
#define TE_COMM_MPI_H

#include <limits.h>
#include <stddef.h>
#include <string.h>
#include <mpi.h>
#include <te/comm.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A tecomm_allgather_fn over the MPI_Comm that ctx points to. */
static inline int tecomm_mpi_allgather(const void *send, void *recv, size_t bytes, void *ctx) {
  if (!ctx || bytes > (size_t)INT_MAX) return -1;
  return MPI_Allgather((void *)send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE,
                       *(MPI_Comm *)ctx) == MPI_SUCCESS ? 0 : -1;
}

/* A tecomm_barrier_fn over the MPI_Comm that ctx points to. */
static inline int tecomm_mpi_barrier(void *ctx) {
  if (!ctx) return -1;
  return MPI_Barrier(*(MPI_Comm *)ctx) == MPI_SUCCESS ? 0 : -1;
}

/* Fills *bootstrap for comm and says this process's rank and the size
 * (either pointer may be NULL).  TECOMM_ERR_INVALID when a pointer is NULL
 * or MPI is not initialized; TECOMM_ERR_BOOTSTRAP when MPI refuses comm. */
static inline tecomm_result_t tecomm_mpi_bootstrap(MPI_Comm *comm,
                                                   struct tecomm_bootstrap *bootstrap,
                                                   int *rank, int *nranks) {
  int inited = 0, r = -1, n = -1;
  if (!comm || !bootstrap) return TECOMM_ERR_INVALID;
  if (MPI_Initialized(&inited) != MPI_SUCCESS || !inited) return TECOMM_ERR_INVALID;
  if (MPI_Comm_rank(*comm, &r) != MPI_SUCCESS || MPI_Comm_size(*comm, &n) != MPI_SUCCESS)
    return TECOMM_ERR_BOOTSTRAP;
  struct tecomm_bootstrap b;
  memset(&b, 0, sizeof b);
  b.kind = TECOMM_BOOTSTRAP_MPI;
  b.allgather = tecomm_mpi_allgather;
  b.barrier = tecomm_mpi_barrier;
  b.ctx = comm;
  b.mpi_comm = comm;
  *bootstrap = b;
  if (rank) *rank = r;
  if (nranks) *nranks = n;
  return TECOMM_SUCCESS;
}

/* tecomm_comm_init with rank and size from comm (see tecomm_comm_init for
 * device and the result). */
static inline tecomm_result_t tecomm_comm_init_mpi(MPI_Comm *comm, int device,
                                                   tecomm_comm_t *out) {
  struct tecomm_bootstrap b;
  int r, n;
  tecomm_result_t res = tecomm_mpi_bootstrap(comm, &b, &r, &n);
  if (res != TECOMM_SUCCESS) return res;
  return tecomm_comm_init(r, n, device, &b, out);
}

#ifdef __cplusplus
}
#endif
#endif
