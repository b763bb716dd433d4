/* SPDX-License-Identifier: Apache-2.0 */
/* stream.c -- streams, events, stream memory operations and stream capture. */
#include "device/device_ops.h"
#include <stdio.h>
#include <string.h>

/* Declares o = the backend's ops, or returns the init failure. */
#define OPS(o)                                   \
  const struct te_device_ops *o = NULL;          \
  TE_CHECK(te_ops_get(&o))

TE_EXPORT tecore_result_t tecore_stream_priority_range(int *least, int *greatest) {
  TE_ARG(least, "tecore_stream_priority_range: least is NULL");
  TE_ARG(greatest, "tecore_stream_priority_range: greatest is NULL");
  OPS(o);
  return o->stream_priority_range(least, greatest);
}

TE_EXPORT tecore_result_t tecore_stream_create(unsigned flags, int priority,
                                               tecore_stream_t *stream) {
  TE_ARG(stream, "tecore_stream_create: stream is NULL");
  TE_ARG(!(flags & ~TECORE_STREAM_NON_BLOCKING), "tecore_stream_create: unknown flags 0x%x",
         flags);
  OPS(o);
  int least = 0, greatest = 0;
  TE_CHECK(o->stream_priority_range(&least, &greatest));
  TE_ARG(priority >= greatest && priority <= least,
         "tecore_stream_create: priority %d outside [%d, %d]", priority, greatest, least);
  /* a failure leaves *stream as the caller had it */
  __typeof__(*stream) out_ = NULL;
  TE_CHECK(o->stream_create(flags, priority, &out_));
  *stream = out_;
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_stream_destroy(tecore_stream_t stream) {
  TE_ARG(stream, "tecore_stream_destroy: stream is NULL (the default stream cannot be destroyed)");
  OPS(o);
  return o->stream_destroy(stream);
}

TE_EXPORT tecore_result_t tecore_stream_synchronize(tecore_stream_t stream) {
  OPS(o);
  return o->stream_synchronize(stream);
}

TE_EXPORT tecore_result_t tecore_stream_query(tecore_stream_t stream) {
  OPS(o);
  return o->stream_query(stream);
}

TE_EXPORT tecore_result_t tecore_stream_wait_event(tecore_stream_t stream, tecore_event_t event) {
  TE_ARG(event, "tecore_stream_wait_event: event is NULL");
  OPS(o);
  return o->stream_wait_event(stream, event);
}

TE_EXPORT tecore_result_t tecore_stream_get_priority(tecore_stream_t stream, int *priority) {
  TE_ARG(priority, "tecore_stream_get_priority: priority is NULL");
  OPS(o);
  return o->stream_get_priority(stream, priority);
}

/* ---- events ---- */

TE_EXPORT tecore_result_t tecore_event_create(unsigned flags, tecore_event_t *event) {
  TE_ARG(event, "tecore_event_create: event is NULL");
  TE_ARG(!(flags & ~(TECORE_EVENT_BLOCKING_SYNC | TECORE_EVENT_DISABLE_TIMING)),
         "tecore_event_create: unknown flags 0x%x", flags);
  OPS(o);
  /* a failure leaves *event as the caller had it */
  __typeof__(*event) out_ = NULL;
  TE_CHECK(o->event_create(flags, &out_));
  *event = out_;
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_event_destroy(tecore_event_t event) {
  TE_ARG(event, "tecore_event_destroy: event is NULL");
  OPS(o);
  return o->event_destroy(event);
}

TE_EXPORT tecore_result_t tecore_event_record(tecore_event_t event, tecore_stream_t stream) {
  TE_ARG(event, "tecore_event_record: event is NULL");
  OPS(o);
  return o->event_record(event, stream);
}

TE_EXPORT tecore_result_t tecore_event_synchronize(tecore_event_t event) {
  TE_ARG(event, "tecore_event_synchronize: event is NULL");
  OPS(o);
  return o->event_synchronize(event);
}

TE_EXPORT tecore_result_t tecore_event_query(tecore_event_t event) {
  TE_ARG(event, "tecore_event_query: event is NULL");
  OPS(o);
  return o->event_query(event);
}

TE_EXPORT tecore_result_t tecore_event_elapsed(float *ms, tecore_event_t start,
                                               tecore_event_t end) {
  TE_ARG(ms, "tecore_event_elapsed: ms is NULL");
  TE_ARG(start, "tecore_event_elapsed: start is NULL");
  TE_ARG(end, "tecore_event_elapsed: end is NULL");
  OPS(o);
  return o->event_elapsed(ms, start, end);
}

/* ---- stream memory operations ---- */

static tecore_result_t memop_check(tecore_devptr_t addr, unsigned width, int cond,
                                   const char *fn) {
  TE_ARG(addr, "%s: addr is NULL", fn);
  TE_ARG(addr % (width / 8) == 0, "%s: addr 0x%llx is not %u-byte aligned", fn,
         (unsigned long long)addr, width / 8);
  TE_ARG(cond >= TECORE_WAIT_GEQ && cond <= TECORE_WAIT_NOR, "%s: unknown condition %d", fn, cond);
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_stream_write_value64(tecore_stream_t stream, tecore_devptr_t addr,
                                                      uint64_t value) {
  TE_CHECK(memop_check(addr, 64, 0, __func__));
  OPS(o);
  return o->stream_write_value(stream, addr, value, 64);
}

TE_EXPORT tecore_result_t tecore_stream_wait_value64(tecore_stream_t stream, tecore_devptr_t addr,
                                                     uint64_t value, tecore_wait_cond_t cond) {
  TE_CHECK(memop_check(addr, 64, (int)cond, __func__));
  OPS(o);
  return o->stream_wait_value(stream, addr, value, cond, 64);
}

TE_EXPORT tecore_result_t tecore_stream_write_value32(tecore_stream_t stream, tecore_devptr_t addr,
                                                      uint32_t value) {
  TE_CHECK(memop_check(addr, 32, 0, __func__));
  OPS(o);
  return o->stream_write_value(stream, addr, value, 32);
}

TE_EXPORT tecore_result_t tecore_stream_wait_value32(tecore_stream_t stream, tecore_devptr_t addr,
                                                     uint32_t value, tecore_wait_cond_t cond) {
  TE_CHECK(memop_check(addr, 32, (int)cond, __func__));
  OPS(o);
  return o->stream_wait_value(stream, addr, value, cond, 32);
}

/* ---- capture and graphs ---- */

TE_EXPORT tecore_result_t tecore_stream_begin_capture(tecore_stream_t stream,
                                                      tecore_capture_mode_t mode) {
  TE_ARG(stream, "tecore_stream_begin_capture: the legacy default stream cannot capture");
  TE_ARG(mode >= TECORE_CAPTURE_GLOBAL && mode <= TECORE_CAPTURE_RELAXED,
         "tecore_stream_begin_capture: unknown mode %d", (int)mode);
  OPS(o);
  return o->stream_begin_capture(stream, mode);
}

TE_EXPORT tecore_result_t tecore_stream_end_capture(tecore_stream_t stream,
                                                    tecore_graph_t *graph) {
  TE_ARG(stream, "tecore_stream_end_capture: stream is NULL");
  TE_ARG(graph, "tecore_stream_end_capture: graph is NULL");
  OPS(o);
  /* as the driver's: an ended (even invalidated) capture leaves no graph
   * behind, and the man page says *graph is NULL on failure */
  *graph = NULL;
  return o->stream_end_capture(stream, graph);
}

TE_EXPORT tecore_result_t tecore_stream_capture_status(tecore_stream_t stream,
                                                       tecore_capture_status_t *status) {
  TE_ARG(status, "tecore_stream_capture_status: status is NULL");
  OPS(o);
  return o->stream_capture_status(stream, status);
}

