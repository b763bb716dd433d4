/* te/comm.h -- libtecomm: allreduce over IPC buffers, NVLS, NCCL and an
 * InfiniBand verbs fallback.  Link with `pkg-config --libs te-comm`.
 * This release holds the library's foundation: its result codes, version
 * and the inventory of verbs devices its inter-node fallback will use. */
#ifndef TE_COMM_H
#define TE_COMM_H

#include <te/core.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, message) */
#define TECOMM_RESULT_LIST(X)                                                   \
  X(TECOMM_SUCCESS, 0, "success")                                               \
  X(TECOMM_ERR_INVALID, 1, "invalid argument")                                  \
  X(TECOMM_ERR_NOMEM, 2, "out of memory")                                       \
  X(TECOMM_ERR_DEVICE, 3, "device layer call failed (see tecore_last_error)")   \
  X(TECOMM_ERR_TIMEOUT, 4, "a peer did not answer in time (TECOMM_TIMEOUT)")    \
  X(TECOMM_ERR_BOOTSTRAP, 5, "bootstrap exchange failed")                       \
  X(TECOMM_ERR_NOT_SUPPORTED, 6, "not supported on this system")                \
  X(TECOMM_ERR_SYSTEM, 7, "system call failed")

typedef enum tecomm_result {
#define TECOMM_RESULT_ENUM_(name, value, msg) name = value,
  TECOMM_RESULT_LIST(TECOMM_RESULT_ENUM_)
#undef TECOMM_RESULT_ENUM_
  TECOMM_RESULT_COUNT_
} tecomm_result_t;

const char *tecomm_strerror(tecomm_result_t r);
const char *tecomm_result_name(tecomm_result_t r);
/* The calling thread's detail for its last failure (shared with libtecore). */
const char *tecomm_last_error(void);
void tecomm_version(int *major, int *minor, int *patch);

/* The InfiniBand/RoCE devices the verbs fallback can use: their count, and
 * names[0..min(count,max)-1] copied into caller-owned buffers of 64 bytes.
 * Built without verbs: TECOMM_ERR_NOT_SUPPORTED. */
tecomm_result_t tecomm_verbs_devices(int *count, char (*names)[64], int max);

#ifdef __cplusplus
}
#endif
#endif
