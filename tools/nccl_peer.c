/* SPDX-License-Identifier: Apache-2.0 */
/* nccl_peer.c -- NCCL called directly, te-allreduce-perf's peer
 * (nccl_peer.h).  NCCL's ABI is written out here (types by value, enum
 * numbers from nccl.h), so no nccl.h is needed to build. */
#include "nccl_peer.h"
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { char internal[128]; } peer_uid_t; /* ncclUniqueId */
typedef void *peer_comm_t;                          /* ncclComm_t */

/* ncclDataType_t and ncclRedOp_t values */
enum { P_UINT8 = 1, P_FLOAT16 = 6, P_FLOAT32 = 7, P_BFLOAT16 = 9 };
enum { P_SUM = 0 };

struct nccl_peer {
  void *lib;
  peer_comm_t comm;
  int (*GetUniqueId)(peer_uid_t *id);
  int (*CommInitRank)(peer_comm_t *comm, int nranks, peer_uid_t id, int rank);
  int (*CommDestroy)(peer_comm_t comm);
  int (*AllReduce)(const void *send, void *recv, size_t count, int dtype, int op, peer_comm_t comm,
                   tecore_stream_t s);
  int (*ReduceScatter)(const void *send, void *recv, size_t count, int dtype, int op,
                       peer_comm_t comm, tecore_stream_t s);
  int (*AllGather)(const void *send, void *recv, size_t count, int dtype, peer_comm_t comm,
                   tecore_stream_t s);
};

/* The entry points, or 0 with why. */
static int load(struct nccl_peer *p, char *why, size_t len) {
  p->lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!p->lib) {
    snprintf(why, len, "libnccl.so.2 does not load");
    return 0;
  }
  struct { const char *name; void **slot; } f[] = {
      {"ncclGetUniqueId", (void **)&p->GetUniqueId},
      {"ncclCommInitRank", (void **)&p->CommInitRank},
      {"ncclCommDestroy", (void **)&p->CommDestroy},
      {"ncclAllReduce", (void **)&p->AllReduce},
      {"ncclReduceScatter", (void **)&p->ReduceScatter},
      {"ncclAllGather", (void **)&p->AllGather}};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
    *f[i].slot = dlsym(p->lib, f[i].name);
    if (!*f[i].slot) {
      snprintf(why, len, "libnccl.so.2 has no %s", f[i].name);
      return 0;
    }
  }
  return 1;
}

/* What each rank tells the others before NCCL's init: whether it loaded
 * NCCL, and rank 0's unique id. */
struct hello {
  peer_uid_t id;
  int32_t ok, pad_;
};

/* Every rank's hello, through comm (bytes moved exactly: an FP8 dtype of
 * one byte an element); 0 on failure. */
static int exchange(tecomm_comm_t comm, int n, const struct hello *me, struct hello *all,
                    tecore_stream_t s) {
  tecore_devptr_t d = 0;
  size_t b = sizeof *me;
  int ok = tecore_mem_alloc(b * (size_t)(n + 1), &d) == TECORE_SUCCESS;
  ok = ok && tecore_memcpy_async(d, (tecore_devptr_t)(uintptr_t)me, b, s) == TECORE_SUCCESS;
  ok = ok && tecomm_allgather(comm, d, d + b, b, TECORE_DTYPE_E4M3, s) == TECOMM_SUCCESS;
  ok = ok && tecore_memcpy_async((tecore_devptr_t)(uintptr_t)all, d + b, b * (size_t)n, s) ==
                 TECORE_SUCCESS;
  ok = ok && tecore_stream_synchronize(s) == TECORE_SUCCESS;
  if (d) (void)tecore_mem_free(d);
  return ok;
}

struct nccl_peer *nccl_peer_open(tecomm_comm_t comm, tecore_stream_t s, char *why, size_t len) {
  int rank = 0, n = 0;
  tecore_backend_t be = TECORE_BACKEND_NONE;
  if (tecomm_comm_rank(comm, &rank, &n, NULL) != TECOMM_SUCCESS ||
      tecore_backend(&be) != TECORE_SUCCESS || be != TECORE_BACKEND_CUDA) {
    snprintf(why, len, "not on cuda");
    return NULL; /* the same answer on every rank: no exchange */
  }
  struct nccl_peer *p = calloc(1, sizeof *p);
  struct hello me, *all = calloc((size_t)n, sizeof *all);
  memset(&me, 0, sizeof me);
  char mine[160] = "";
  me.ok = p && all && load(p, mine, sizeof mine);
  if (me.ok && rank == 0) me.ok = p->GetUniqueId(&me.id) == 0;
  int agreed = all && exchange(comm, n, &me, all, s);
  for (int r = 0; agreed && r < n; r++)
    if (!all[r].ok) {
      snprintf(why, len, "NCCL not usable on rank %d%s%s", r, r == rank && *mine ? ": " : "",
               r == rank ? mine : "");
      agreed = 0;
    }
  if (agreed && p->CommInitRank(&p->comm, n, all[0].id, rank) != 0) {
    snprintf(why, len, "ncclCommInitRank failed on rank %d", rank);
    agreed = 0;
  }
  free(all);
  if (agreed) return p;
  if (p && p->lib) dlclose(p->lib);
  free(p);
  return NULL;
}

static int nccl_dtype(tecore_dtype_t d) {
  return d == TECORE_DTYPE_F32 ? P_FLOAT32 : d == TECORE_DTYPE_BF16 ? P_BFLOAT16 : P_FLOAT16;
}

int nccl_peer_call(struct nccl_peer *p, enum nccl_peer_coll coll, tecore_devptr_t send,
                   tecore_devptr_t recv, size_t count, tecore_dtype_t dtype, tecore_stream_t s) {
  const void *in = (const void *)(uintptr_t)send;
  void *out = (void *)(uintptr_t)recv;
  switch (coll) {
  case NCCL_PEER_ALLREDUCE: return p->AllReduce(in, out, count, nccl_dtype(dtype), P_SUM, p->comm, s);
  case NCCL_PEER_REDUCE_SCATTER:
    return p->ReduceScatter(in, out, count, nccl_dtype(dtype), P_SUM, p->comm, s);
  case NCCL_PEER_ALLGATHER:
    /* bytes: any dtype, FP8 included, whatever this NCCL's types */
    return p->AllGather(in, out, count * tecore_dtype_size(dtype), P_UINT8, p->comm, s);
  }
  return -1;
}

void nccl_peer_close(struct nccl_peer *p) {
  if (!p) return;
  if (p->comm) (void)p->CommDestroy(p->comm);
  free(p); /* the library stays loaded: NCCL's threads may outlive the communicator */
}
