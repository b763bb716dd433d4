/* SPDX-License-Identifier: Apache-2.0 */
/* nccl.h -- libnccl.so.2, dlopen'ed once (nothing links -lnccl, so the
 * library loads and runs without NCCL): the entry points libtecomm uses,
 * with NCCL's ABI written out here (types by value, enum numbers), so no
 * nccl.h is needed to build. */
#ifndef TECOMM_NCCL_H
#define TECOMM_NCCL_H

#include "base/tc_internal.h"

typedef struct tc_nccl_uid {
  char internal[128];          /* ncclUniqueId */
} tc_nccl_uid_t;
typedef void *tc_nccl_comm_t;  /* ncclComm_t */

/* ncclDataType_t and ncclRedOp_t values */
enum { TC_NCCL_UINT8 = 1, TC_NCCL_FLOAT16 = 6, TC_NCCL_FLOAT32 = 7, TC_NCCL_BFLOAT16 = 9 };
enum { TC_NCCL_SUM = 0, TC_NCCL_MAX = 2 };

struct tc_nccl {
  int (*GetVersion)(int *version);
  int (*GetUniqueId)(tc_nccl_uid_t *id);
  int (*CommInitRank)(tc_nccl_comm_t *comm, int nranks, tc_nccl_uid_t id, int rank);
  /* NULL where the library predates it (NCCL < 2.14): then init blocks */
  int (*CommInitRankConfig)(tc_nccl_comm_t *comm, int nranks, tc_nccl_uid_t id, int rank,
                            const void *config);
  int (*CommDestroy)(tc_nccl_comm_t comm);
  int (*CommAbort)(tc_nccl_comm_t comm);
  int (*CommCount)(tc_nccl_comm_t comm, int *count);
  int (*CommUserRank)(tc_nccl_comm_t comm, int *rank);
  int (*CommGetAsyncError)(tc_nccl_comm_t comm, int *result);
  const char *(*GetErrorString)(int result);
  int (*AllReduce)(const void *send, void *recv, size_t count, int dtype, int op,
                   tc_nccl_comm_t comm, tecore_stream_t stream);
  int (*AllGather)(const void *send, void *recv, size_t count, int dtype, tc_nccl_comm_t comm,
                   tecore_stream_t stream);
  int (*ReduceScatter)(const void *send, void *recv, size_t count, int dtype, int op,
                       tc_nccl_comm_t comm, tecore_stream_t stream);
  int version;
  int emulated; /* vdev's emulation (nccl_vdev.c): no caller's communicator is one of its own */
};

/* ncclResult_t values libtecomm tells apart */
enum { TC_NCCL_OK = 0, TC_NCCL_REMOTE_ERROR = 6, TC_NCCL_IN_PROGRESS = 7 };

/* The head of ncclConfig_t as NCCL 2.17 laid it out (later versions add
 * fields after splitShare and read only `size` bytes of an older one). */
struct tc_nccl_config {
  size_t size;
  unsigned magic;       /* 0xcafebeef */
  unsigned version;     /* the layout's NCCL version code, 21700 */
  int blocking;
  int cga_cluster_size, min_ctas, max_ctas;
  const char *net_name;
  int split_share;
};
#define TC_NCCL_CONFIG_UNDEF (-2147483647 - 1) /* NCCL_CONFIG_UNDEF_INT */

/* The NCCL entry points: libnccl.so.2 on cuda; on vdev its emulation
 * (nccl_vdev.c) for ranks that are processes of one machine.  NULL (with
 * the reason in *why when why is not NULL) when TECOMM_NCCL=0 or
 * libnccl.so.2 does not load. */
const struct tc_nccl *tc_nccl_get(const char **why);
/* nccl_vdev.c: fills n with the emulation's entry points. */
void tc_nccl_vdev_fill(struct tc_nccl *n);
/* A libtecomm error for an NCCL result. */
tecomm_result_t tc_nccl_err(int result, const char *what);
/* The end of a call on a non-blocking communicator: result when it is not
 * ncclInProgress, else ncclCommGetAsyncError polled until it is not, at
 * most limit_ms; -1 when that passed (the caller aborts). */
int tc_nccl_wait(const struct tc_nccl *n, tc_nccl_comm_t comm, int result, int64_t limit_ms);
/* How long NCCL's init may take: TECOMM_NCCL_INIT_TIMEOUT, or
 * TECOMM_TIMEOUT when that is 0. */
int64_t tc_nccl_init_timeout_ms(void);

#endif
