/* SPDX-License-Identifier: Apache-2.0 */
/* boot.h -- the host exchanges of a communicator: one interface
 * (allgather + barrier over the ranks) with five implementations:
 *   boot.c       caller callbacks
 *   boot_tcp.c   the TCP rendezvous from the environment (TECOMM_ROOT)
 *   boot_nccl.c  an existing NCCL communicator (ncclAllGather)
 *   (MPI)        an MPI communicator (--with-mpi; without it boot.c
 *                answers TECOMM_ERR_NOT_SUPPORTED)
 *   mesh.c       a Unix socket mesh among ranks of one host, which also
 *                carries file descriptors (SCM_RIGHTS)
 * Every exchange is bounded by TECOMM_TIMEOUT where the transport lets us
 * bound it (the callbacks, NCCL and MPI adapters are the caller's). */
#ifndef TECOMM_BOOT_H
#define TECOMM_BOOT_H

#include "tc_internal.h"

struct tc_boot {
  int rank, nranks;
  const char *kind;  /* "callbacks", "tcp", "nccl", "mpi", "mesh" */
  /* recv gets nranks * bytes, rank r's block at r * bytes */
  tecomm_result_t (*allgather)(struct tc_boot *b, const void *send, void *recv, size_t bytes);
  tecomm_result_t (*barrier)(struct tc_boot *b);
  void (*close)(struct tc_boot *b);
};

/* Opens the bootstrap bs describes (NULL: ENV).  *rank / *nranks: -1 asks
 * the bootstrap; otherwise they must agree with what it knows. */
tecomm_result_t tc_boot_open(const struct tecomm_bootstrap *bs, int *rank, int *nranks,
                             struct tc_boot **out);
void tc_boot_close(struct tc_boot *b);

tecomm_result_t tc_boot_tcp_open(const char *root, int *rank, int *nranks, struct tc_boot **out);
tecomm_result_t tc_boot_nccl_open(void *nccl_comm, int *rank, int *nranks, struct tc_boot **out);

/* ---- the local mesh (mesh.c) -------------------------------------------- */

/* Connects the members of a group on one host: members[0..n-1] are ranks
 * of over (ascending), this process is members[me]; tag names the group
 * (unique on the host: the abstract socket names derive from it).  The
 * result is a tc_boot over the group (rank me of n). */
tecomm_result_t tc_mesh_open(uint64_t tag, int me, int n, struct tc_boot **out);
/* Sends fd to group rank peer / receives one from it (SCM_RIGHTS). */
tecomm_result_t tc_mesh_send_fd(struct tc_boot *mesh, int peer, int fd);
tecomm_result_t tc_mesh_recv_fd(struct tc_boot *mesh, int peer, int *fd);

/* Poll-driven exchange on connected stream sockets: sends sbuf[i] (slen
 * bytes) to fds[i] and receives rlen bytes from it into rbuf[i] for every
 * i with fds[i] >= 0, all at once (no pair can deadlock on full socket
 * buffers), within timeout_ms.  what names the exchange in errors. */
tecomm_result_t tc_sock_exchange(const int *fds, int n, const void *const *sbuf, size_t slen,
                                 void *const *rbuf, size_t rlen, int64_t timeout_ms,
                                 const char *what);

#endif
