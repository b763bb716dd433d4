/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_stream.c -- the cuda backend's streams, events and stream memory
 * operations (cuStreamWriteValue32/64, cuStreamWaitValue32/64: the v2
 * entry points, legal inside captured graphs, which the service engine
 * and offload use to order host work with device streams).
 * tecore handles are the driver's: a tecore_stream_t is a CUstream. */
#include "cuda_backend.h"

tecore_result_t te_cuda_stream_priority_range(int *least, int *greatest) {
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuCtxGetStreamPriorityRange, least, greatest));
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_stream_create(unsigned flags, int priority, tecore_stream_t *stream) {
  CUstream s = NULL;
  unsigned cu_flags = (flags & TECORE_STREAM_NON_BLOCKING) ? CU_STREAM_NON_BLOCKING
                                                           : CU_STREAM_DEFAULT;
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuStreamCreateWithPriority, &s, cu_flags, priority));
  *stream = s;
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_stream_destroy(tecore_stream_t stream) {
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuStreamDestroy, stream));
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_stream_synchronize(tecore_stream_t stream) {
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuStreamSynchronize, stream));
  return TECORE_SUCCESS;
}

/* NOT_READY is an answer: returned as is, without a hop in the log. */
tecore_result_t te_cuda_stream_query(tecore_stream_t stream) {
  TE_CHECK(te_cuda_need_ctx());
  return TE_CU(cuStreamQuery, stream);
}

tecore_result_t te_cuda_stream_wait_event(tecore_stream_t stream, tecore_event_t event) {
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuStreamWaitEvent, stream, event, 0));
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_stream_get_priority(tecore_stream_t stream, int *priority) {
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuStreamGetPriority, stream, priority));
  return TECORE_SUCCESS;
}

/* ---- events ---------------------------------------------------------------- */

tecore_result_t te_cuda_event_create(unsigned flags, tecore_event_t *event) {
  CUevent e = NULL;
  unsigned cu_flags = CU_EVENT_DEFAULT;
  if (flags & TECORE_EVENT_BLOCKING_SYNC) cu_flags |= CU_EVENT_BLOCKING_SYNC;
  if (flags & TECORE_EVENT_DISABLE_TIMING) cu_flags |= CU_EVENT_DISABLE_TIMING;
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuEventCreate, &e, cu_flags));
  *event = e;
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_event_destroy(tecore_event_t event) {
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuEventDestroy, event));
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_event_record(tecore_event_t event, tecore_stream_t stream) {
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuEventRecord, event, stream));
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_event_synchronize(tecore_event_t event) {
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuEventSynchronize, event));
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_event_query(tecore_event_t event) {
  TE_CHECK(te_cuda_need_ctx());
  return TE_CU(cuEventQuery, event);
}

tecore_result_t te_cuda_event_elapsed(float *ms, tecore_event_t start, tecore_event_t end) {
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuEventElapsedTime, ms, start, end));
  return TECORE_SUCCESS;
}

/* ---- stream memory operations ------------------------------------------------ */

tecore_result_t te_cuda_stream_write_value(tecore_stream_t stream, tecore_devptr_t addr,
                                           uint64_t value, unsigned width) {
  TE_CHECK(te_cuda_need_ctx());
  if (width == 64)
    TE_CHECK(TE_CU(cuStreamWriteValue64, stream, (CUdeviceptr)addr, (cuuint64_t)value,
                   CU_STREAM_WRITE_VALUE_DEFAULT));
  else if (width == 32)
    TE_CHECK(TE_CU(cuStreamWriteValue32, stream, (CUdeviceptr)addr, (cuuint32_t)value,
                   CU_STREAM_WRITE_VALUE_DEFAULT));
  else
    return TE_ERR(TECORE_ERR_INVALID, "stream write value: width %u is not 32 or 64", width);
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_stream_wait_value(tecore_stream_t stream, tecore_devptr_t addr,
                                          uint64_t value, tecore_wait_cond_t cond,
                                          unsigned width) {
  unsigned cu_cond;
  switch (cond) {
  case TECORE_WAIT_GEQ: cu_cond = CU_STREAM_WAIT_VALUE_GEQ; break;
  case TECORE_WAIT_EQ: cu_cond = CU_STREAM_WAIT_VALUE_EQ; break;
  case TECORE_WAIT_AND: cu_cond = CU_STREAM_WAIT_VALUE_AND; break;
  case TECORE_WAIT_NOR: cu_cond = CU_STREAM_WAIT_VALUE_NOR; break;
  default: return TE_ERR(TECORE_ERR_INVALID, "stream wait value: unknown condition %d", (int)cond);
  }
  TE_CHECK(te_cuda_need_ctx());
  if (width == 64)
    TE_CHECK(TE_CU(cuStreamWaitValue64, stream, (CUdeviceptr)addr, (cuuint64_t)value, cu_cond));
  else if (width == 32)
    TE_CHECK(TE_CU(cuStreamWaitValue32, stream, (CUdeviceptr)addr, (cuuint32_t)value, cu_cond));
  else
    return TE_ERR(TECORE_ERR_INVALID, "stream wait value: width %u is not 32 or 64", width);
  return TECORE_SUCCESS;
}
