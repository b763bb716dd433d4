/* SPDX-License-Identifier: Apache-2.0 */
/* nccl_peer.h -- te-allreduce-perf's peer: NCCL itself, loaded and called
 * by the tool (libnccl.so.2, dlopen'ed), with a communicator of its own,
 * so that the NCCL column is NCCL's own time -- not NCCL behind
 * libtecomm's call agreement and health checks, which its nccl level adds
 * to every eager call.  cuda only: NCCL is never given vdev memory. */
#ifndef TE_NCCL_PEER_H
#define TE_NCCL_PEER_H

#include <stddef.h>
#include <te/comm.h>

/* The three collectives the tool times. */
enum nccl_peer_coll { NCCL_PEER_ALLREDUCE, NCCL_PEER_REDUCE_SCATTER, NCCL_PEER_ALLGATHER };

struct nccl_peer;

/* Collective over comm (every rank calls it): loads libnccl.so.2 and makes
 * an NCCL communicator of comm's ranks, its unique id handed from rank 0
 * through comm (tecomm_allgather).  NULL, with the reason in why (len
 * bytes), when the backend is not cuda or NCCL does not load or init on
 * every rank (all ranks then get NULL). */
struct nccl_peer *nccl_peer_open(tecomm_comm_t comm, tecore_stream_t s, char *why, size_t len);
/* One call of coll on stream s, NCCL's convention: count is the elements
 * of one rank's block for reduce-scatter (recv) and all-gather (send), of
 * the whole buffer for allreduce; SUM.  0 on success. */
int nccl_peer_call(struct nccl_peer *p, enum nccl_peer_coll coll, tecore_devptr_t send,
                   tecore_devptr_t recv, size_t count, tecore_dtype_t dtype, tecore_stream_t s);
/* The NCCL communicator destroyed, the library left loaded.  NULL is
 * accepted. */
void nccl_peer_close(struct nccl_peer *p);

#endif
