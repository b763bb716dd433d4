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

#include "base/tc_internal.h"
#include "wire.h"

struct tc_boot {
  int rank, nranks;
  const char *kind;  /* "callbacks", "tcp", "nccl", "mpi", "mesh" */
  /* the TCP rendezvous's key (keyed 1): the communicator's secret is
   * derived from it (comm.c); the other bootstraps carry the secret */
  unsigned char key[32];
  int keyed;
  /* the rank the last allgather failed on (gone, or not there within
   * TECOMM_TIMEOUT); -1: none, or not known (the caller's callbacks,
   * NCCL's): tecomm_comm_status names it */
  int failed_peer;
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
 * (unique on the host); secret is the group's: every connection proves
 * it (auth.c), and the abstract socket names derive from it, so no one
 * without it can tell one rank's name from another's.  The result is a
 * tc_boot over the group (rank me of n). */
tecomm_result_t tc_mesh_open(const unsigned char secret[32], uint64_t tag, int me, int n,
                             struct tc_boot **out);
/* Sends fd to group rank peer / receives one from it (SCM_RIGHTS). */
tecomm_result_t tc_mesh_send_fd(struct tc_boot *mesh, int peer, int fd);
tecomm_result_t tc_mesh_recv_fd(struct tc_boot *mesh, int peer, int *fd);

/* Poll-driven exchange on connected stream sockets, each block framed
 * (wire.h): sends a TC_WIRE_DATA message of x->slen bytes numbered seq to
 * every fds[i] >= 0 and receives one of x->rlen bytes numbered seq from it
 * into x->rbuf[i], all at once (no pair can deadlock on full socket
 * buffers), within timeout_ms; x->sbuf or x->rbuf NULL: that direction is
 * idle.  A header that is not exactly that is a TECOMM_ERR_BOOTSTRAP
 * naming the rank and what was wrong; what names the exchange. */
struct tc_msg_blocks {
  const void *const *sbuf; /* NULL: nothing to send */
  size_t slen;
  void *const *rbuf;       /* NULL: nothing to receive */
  size_t rlen;
  int *failed;             /* the i of fds[i] a failure was on, or -1 (NULL: not wanted) */
};
tecomm_result_t tc_msg_exchange(const int *fds, int n, uint32_t seq, const struct tc_msg_blocks *x,
                                int64_t timeout_ms, const char *what);

/* ---- membership (auth.c) ------------------------------------------------- */

/* n bytes from the kernel's random source: 0, or -1. */
int tc_random_bytes(void *p, size_t n);
/* The TCP rendezvous's key from TECOMM_SECRET / TECOMM_SECRET_FILE
 * (*keyed 1), or none under TECOMM_INSECURE=1 (*keyed 0, a WARN);
 * otherwise TECOMM_ERR_INVALID saying how to make a secret. */
tecomm_result_t tc_auth_env_key(unsigned char key[32], int *keyed, const char *fn);
/* out = HMAC(key, label || data): derived secrets and socket names. */
void tc_auth_derive(const unsigned char key[32], const char *label, const void *data, size_t n,
                    unsigned char out[32]);
/* A listener's wait for ranks [lo, hi) of nranks on its listening
 * sockets lfd[0..nlfd-1] (nonblocking, at most 8). */
struct tc_auth_listen {
  const struct tc_wire_key *key;
  const int *lfd;
  int nlfd;
  int unix_sock;     /* 1: refuse other users (SO_PEERCRED) before reading */
  int nranks, lo, hi;
  const char *what;  /* names the listener in logs and errors */
};
/* Fills fd[r] (nonblocking sockets) for every r in [lo, hi) that is -1 on
 * entry, each with a connection that proved rank r; strangers are closed
 * and logged at WARN.  TECOMM_ERR_TIMEOUT past deadline. */
tecomm_result_t tc_auth_accept(const struct tc_auth_listen *a, int *fd, int64_t deadline);
/* The connector's half on a connected socket s: proves rank of nranks
 * and checks the listener's answer (and, unix_sock, its user).  0, or -1
 * with why (the caller closes s, and may dial again). */
int tc_auth_connect(const struct tc_wire_key *k, int s, int unix_sock, int rank, int nranks,
                    int64_t deadline, char *why, size_t wl);

/* A barrier from b's allgather (one byte a rank): every bootstrap that has
 * no cheaper one (vote.c). */
tecomm_result_t tc_boot_barrier(struct tc_boot *b);

#endif
