/* SPDX-License-Identifier: Apache-2.0 */
/* vdev_memop.c -- stream memory operations on vdev: write a 32/64-bit
 * word after the stream's prior work (release store), and block the
 * stream until a word satisfies a condition (acquire loads, polled with a
 * backoff), released by another stream, another process or the host.
 *
 * A wait never hangs forever: after TECORE_VDEV_WAIT_TIMEOUT seconds it
 * gives up, logs, and leaves the stream a sticky TECORE_ERR_TIMEOUT that
 * every later synchronize/query of that stream returns.  Later work on the
 * stream still runs (so nothing else waits behind it forever).  Destroying
 * the stream fails its pending wait at once. */
#include "vdev/vdev.h"
#include <sched.h>
#include <stdio.h>
#include <time.h>

TE_PARAM_INT(vdev_wait_timeout, "TECORE_VDEV_WAIT_TIMEOUT", 60, 0, 7 * 24 * 3600,
             "seconds a vdev stream wait_value may block before the stream fails with "
             "TECORE_ERR_TIMEOUT (0: wait forever)")

/* The driver's conditions; GEQ is its cyclic compare, so a counter that
 * wraps around still compares right. */
static int cond_holds(const struct vdev_op *op) {
  if (op->u.mem.width == 32) {
    uint32_t cur = __atomic_load_n((const uint32_t *)(uintptr_t)op->u.mem.addr, __ATOMIC_ACQUIRE);
    uint32_t v = (uint32_t)op->u.mem.value;
    switch (op->u.mem.cond) {
    case TECORE_WAIT_GEQ: return (int32_t)(cur - v) >= 0;
    case TECORE_WAIT_EQ: return cur == v;
    case TECORE_WAIT_AND: return (cur & v) != 0;
    case TECORE_WAIT_NOR: return (uint32_t)~(cur | v) != 0;
    }
    return 0;
  }
  uint64_t cur = __atomic_load_n((const uint64_t *)(uintptr_t)op->u.mem.addr, __ATOMIC_ACQUIRE);
  uint64_t v = op->u.mem.value;
  switch (op->u.mem.cond) {
  case TECORE_WAIT_GEQ: return (int64_t)(cur - v) >= 0;
  case TECORE_WAIT_EQ: return cur == v;
  case TECORE_WAIT_AND: return (cur & v) != 0;
  case TECORE_WAIT_NOR: return ~(cur | v) != 0;
  }
  return 0;
}

void te_vdev_write_value_run(const struct vdev_op *op) {
  if (op->u.mem.width == 32)
    __atomic_store_n((uint32_t *)(uintptr_t)op->u.mem.addr, (uint32_t)op->u.mem.value,
                     __ATOMIC_RELEASE);
  else
    __atomic_store_n((uint64_t *)(uintptr_t)op->u.mem.addr, op->u.mem.value, __ATOMIC_RELEASE);
}

tecore_result_t te_vdev_wait_value_run(struct vdev_stream *s, const struct vdev_op *op) {
  if (cond_holds(op)) return TECORE_SUCCESS;
  int64_t timeout_s = tecore_tunable_int(&vdev_wait_timeout);
  uint64_t start = te_now_ns();
  uint64_t limit = timeout_s > 0 ? (uint64_t)timeout_s * 1000000000ull : 0;
  long sleep_ns = 1000;
  for (unsigned polls = 0;; polls++) {
    if (cond_holds(op)) return TECORE_SUCCESS;
    if (atomic_load(&te_vdev_exiting)) return TECORE_ERR_TIMEOUT;
    if (__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
      pthread_mutex_lock(&s->lock);
      if (s->sticky == TECORE_SUCCESS) {
        s->sticky = TECORE_ERR_INVALID;
        snprintf(s->sticky_msg, sizeof s->sticky_msg,
                 "wait_value%u on 0x%llx failed: the stream was destroyed while it waited",
                 op->u.mem.width, (unsigned long long)op->u.mem.addr);
      }
      pthread_mutex_unlock(&s->lock);
      return TECORE_ERR_INVALID;
    }
    if (limit && te_now_ns() - start > limit) break;
    if (polls < 64) {
      sched_yield(); /* a quick handoff costs no sleep */
    } else {
      struct timespec ts = {0, sleep_ns};
      nanosleep(&ts, NULL);
      if (sleep_ns < 100000) sleep_ns *= 2; /* up to ~100 us between polls */
    }
  }
  TE_LOG_ERROR(TECORE_SUBSYS_DEVICE,
               "vdev: stream %p: wait_value%u on 0x%llx (cond %d, value %llu) timed out after "
               "%lld s (TECORE_VDEV_WAIT_TIMEOUT); the stream now fails with TECORE_ERR_TIMEOUT",
               (void *)s, op->u.mem.width, (unsigned long long)op->u.mem.addr, (int)op->u.mem.cond,
               (unsigned long long)op->u.mem.value, (long long)timeout_s);
  pthread_mutex_lock(&s->lock);
  if (s->sticky == TECORE_SUCCESS) {
    s->sticky = TECORE_ERR_TIMEOUT;
    snprintf(s->sticky_msg, sizeof s->sticky_msg,
             "wait_value%u on 0x%llx timed out after %lld s (TECORE_VDEV_WAIT_TIMEOUT)",
             op->u.mem.width, (unsigned long long)op->u.mem.addr, (long long)timeout_s);
  }
  pthread_mutex_unlock(&s->lock);
  return TECORE_ERR_TIMEOUT;
}

tecore_result_t te_vdev_stream_write_value(tecore_stream_t stream, tecore_devptr_t addr,
                                           uint64_t value, unsigned width) {
  if (width != 32 && width != 64)
    return TE_ERR(TECORE_ERR_INVALID, "vdev stream_write_value: width %u is not 32 or 64", width);
  struct vdev_op op = {.type = VDEV_OP_WRITE_VALUE,
                       .u.mem = {.addr = addr, .value = value, .width = width}};
  return te_vdev_submit(stream, &op, "vdev stream_write_value");
}

tecore_result_t te_vdev_stream_wait_value(tecore_stream_t stream, tecore_devptr_t addr,
                                          uint64_t value, tecore_wait_cond_t cond,
                                          unsigned width) {
  if (width != 32 && width != 64)
    return TE_ERR(TECORE_ERR_INVALID, "vdev stream_wait_value: width %u is not 32 or 64", width);
  if (cond < TECORE_WAIT_GEQ || cond > TECORE_WAIT_NOR)
    return TE_ERR(TECORE_ERR_INVALID, "vdev stream_wait_value: unknown condition %d", (int)cond);
  struct vdev_op op = {.type = VDEV_OP_WAIT_VALUE,
                       .u.mem = {.addr = addr, .value = value, .width = width, .cond = cond}};
  return te_vdev_submit(stream, &op, "vdev stream_wait_value");
}
