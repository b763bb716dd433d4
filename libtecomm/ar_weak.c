/* ar_weak.c -- stand-ins for the allreduce kernels' entry points
 * (ar_kernels.h), defined weak: while the kernels are not linked in, the
 * library builds and runs with no IPC algorithm (the selection skips
 * them; pool, memory and NCCL work).  The kernels' own definitions
 * replace these at link time. */
#include "comm_priv.h"

#define TC_WEAK __attribute__((weak))

TC_WEAK tecore_result_t tecomm_ar_kernels_register(void) { return TECORE_SUCCESS; }

TC_WEAK size_t tecomm_ar_workspace_bytes(int nranks, size_t max_bytes) {
  (void)nranks;
  (void)max_bytes;
  return 4096;
}

TC_WEAK tecore_result_t tecomm_ar_workspace_init(tecore_devptr_t ws, int nranks, size_t max_bytes,
                                                 tecore_stream_t stream) {
  (void)nranks;
  (void)max_bytes;
  return tecore_memset_d8_async(ws, 0, 4096, stream);
}

TC_WEAK size_t tecomm_ar_max_bytes(tecomm_ar_algo_t algo, int nranks, size_t ws_max_bytes) {
  (void)algo;
  (void)nranks;
  (void)ws_max_bytes;
  return 0; /* no kernels: no IPC algorithm */
}

TC_WEAK int tecomm_ar_clobbers_input(tecomm_ar_algo_t algo) { return algo == TECOMM_AR_TWOSHOT; }

TC_WEAK tecore_result_t tecomm_ar_launch(const struct tecomm_ar_call *call, tecore_stream_t stream) {
  (void)call;
  (void)stream;
  tecore_set_error("tecomm_ar_launch: the allreduce kernels are not built in");
  return TECORE_ERR_NOT_SUPPORTED;
}

TC_WEAK tecore_result_t tecomm_ar_error(tecore_devptr_t ws, int *code, int *peer, int clear) {
  (void)ws;
  (void)clear;
  *code = TECOMM_AR_OK;
  *peer = -1;
  return TECORE_SUCCESS;
}

TC_WEAK tecore_result_t tecomm_ar_abort(tecore_devptr_t ws) {
  (void)ws;
  return TECORE_SUCCESS;
}
