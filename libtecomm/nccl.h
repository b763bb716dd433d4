/* SPDX-License-Identifier: Apache-2.0 */
/* nccl.h -- libnccl.so.2, dlopen'ed once (nothing links -lnccl, so the
 * library loads and runs without NCCL): the entry points libtecomm uses,
 * with NCCL's ABI written out here (types by value, enum numbers), so no
 * nccl.h is needed to build. */
#ifndef TECOMM_NCCL_H
#define TECOMM_NCCL_H

#include "tc_internal.h"

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
  int version;
};

/* The loaded library, or NULL (with the reason in *why when why is not
 * NULL) when TECOMM_NCCL=0, the backend is not cuda, or it does not load. */
const struct tc_nccl *tc_nccl_get(const char **why);
/* A libtecomm error for an NCCL result. */
tecomm_result_t tc_nccl_err(int result, const char *what);

#endif
