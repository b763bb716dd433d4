/* SPDX-License-Identifier: Apache-2.0 */
/* svc_job.c -- service-engine jobs (te/svc.h): making and freeing them
 * (their flag words come from svc_state.c's pinned pages, the engine is
 * started and stopped with them), the stream side of a hand-off (launch:
 * write go; wait: wait for done, reset it), and fixed-buffer
 * registration.
 *
 * The protocol, per run:  stream: go = T  ->  engine: sees go == T, sets
 * go = 0, runs the job, sets done = T  ->  stream: waits done == T, sets
 * done = 0.  T (the ticket) is the job's own, so a graph that captured the
 * three memory operations hands the engine the same job at every replay,
 * and a run's done can never be mistaken for another job's. */
#include "svc/svc_internal.h"
#include "te_handles.h"
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- jobs -------------------------------------------------------------------------- */

static tecore_result_t check_op(const struct tecore_svc_op *op, size_t i, const char *fn) {
  switch (op->kind) {
  case TECORE_SVC_READ:
  case TECORE_SVC_WRITE:
    TE_ARG(op->fd >= 0, "%s: ops[%zu].fd %d is not a file descriptor", fn, i, op->fd);
    TE_ARG(op->buf, "%s: ops[%zu].buf is NULL", fn, i);
    TE_ARG(op->bytes > 0 && op->bytes <= 0x7ffff000u,
           "%s: ops[%zu].bytes %zu is not in 1..2147479552 (one read or write)", fn, i,
           op->bytes);
    TE_ARG(op->buf_index >= -1 && op->buf_index < SVC_MAX_BUFFERS,
           "%s: ops[%zu].buf_index %d is not -1 or a registered buffer", fn, i, op->buf_index);
    /* a file offset is an off_t: offset + bytes must not pass its largest */
    TE_ARG(op->offset <= (uint64_t)INT64_MAX - op->bytes,
           "%s: ops[%zu].offset %llu + bytes %zu passes the largest file offset (wraps)", fn, i,
           (unsigned long long)op->offset, op->bytes);
    TE_ARG((uintptr_t)op->buf <= UINTPTR_MAX - op->bytes,
           "%s: ops[%zu].buf %p + bytes %zu wraps around the address space", fn, i, op->buf,
           op->bytes);
    return TECORE_SUCCESS;
  case TECORE_SVC_CALL:
  case TECORE_SVC_POLL:
    TE_ARG(op->fn, "%s: ops[%zu].fn is NULL for TECORE_SVC_%s", fn, i,
           op->kind == TECORE_SVC_CALL ? "CALL" : "POLL");
    return TECORE_SUCCESS;
  }
  return TE_ERR(TECORE_ERR_INVALID, "%s: ops[%zu].kind %d is not TECORE_SVC_READ, _WRITE, "
                "_CALL or _POLL", fn, i, (int)op->kind);
}

/* An op naming a registered buffer must lie inside it (lock held). */
static tecore_result_t check_op_buffer(const struct tecore_svc_op *op, size_t i, const char *fn) {
  if ((op->kind != TECORE_SVC_READ && op->kind != TECORE_SVC_WRITE) || op->buf_index < 0)
    return TECORE_SUCCESS;
  int k = op->buf_index;
  const unsigned char *b = op->buf, *base = te_svc.buf_base[k];
  if (!te_svc.buf_used[k])
    return TE_ERR(TECORE_ERR_INVALID, "%s: ops[%zu].buf_index %d is not registered", fn, i, k);
  if (b < base || (size_t)(b - base) > te_svc.buf_len[k] ||
      op->bytes > te_svc.buf_len[k] - (size_t)(b - base))
    return TE_ERR(TECORE_ERR_INVALID, "%s: ops[%zu]: [%p, +%zu) is not inside registered buffer "
                  "%d [%p, +%zu)", fn, i, op->buf, op->bytes, k, (const void *)base,
                  te_svc.buf_len[k]);
  return TECORE_SUCCESS;
}

static void job_free(struct tecore_svc_job *j) {
  free(j->ops);
  free(j->names);
  free(j->st);
  free(j);
}

TE_EXPORT tecore_result_t tecore_svc_job_create(const struct tecore_svc_op *ops, size_t nops,
                                                tecore_svc_job_t **job) {
  static const char fn[] = "tecore_svc_job_create";
  TE_ARG(job, "%s: job is NULL", fn);
  *job = NULL;
  TE_ARG(ops, "%s: ops is NULL", fn);
  TE_ARG(nops >= 1 && nops <= 4096, "%s: nops %zu is not in 1..4096", fn, nops);
  for (size_t i = 0; i < nops; i++) TE_CHECK(check_op(&ops[i], i, fn));
  struct tecore_svc_job *j = calloc(1, sizeof *j);
  if (j) {
    j->ops = malloc(nops * sizeof *j->ops);
    j->names = calloc(nops, sizeof *j->names);
    j->st = calloc(nops, sizeof *j->st);
  }
  if (!j || !j->ops || !j->names || !j->st) {
    if (j) job_free(j);
    return TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
  }
  memcpy(j->ops, ops, nops * sizeof *ops);
  j->nops = nops;
  if (tecore_ctx_get_current(&j->ctx) != TECORE_SUCCESS) {
    j->ctx = NULL;
    tecore_clear_error();
  }
  for (size_t i = 0; i < nops; i++) {
    if (ops[i].name)
      snprintf(j->names[i], SVC_NAME_LEN, "%s", ops[i].name);
    else
      snprintf(j->names[i], SVC_NAME_LEN, "op %zu", i);
    j->ops[i].name = j->names[i];
    j->st[i].job = j;
    j->st[i].index = i;
  }
  pthread_mutex_lock(&te_svc.life);
  tecore_result_t r = te_svc_start_locked();
  if (r == TECORE_SUCCESS) {
    pthread_mutex_lock(&te_svc.lock);
    for (size_t i = 0; i < nops && r == TECORE_SUCCESS; i++) r = check_op_buffer(&ops[i], i, fn);
    if (r == TECORE_SUCCESS) r = te_svc_words_get(j);
    if (r == TECORE_SUCCESS && te_handle_add(j) != 0) {
      te_svc_words_put(j);
      r = TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
    }
    if (r == TECORE_SUCCESS) {
      j->ticket = ++te_svc.next_ticket;
      j->next = te_svc.jobs;
      if (te_svc.jobs) te_svc.jobs->prev = j;
      te_svc.jobs = j;
      te_svc.njobs++;
    }
    pthread_mutex_unlock(&te_svc.lock);
    if (r != TECORE_SUCCESS) te_svc_stop_if_unused_locked();
  }
  pthread_mutex_unlock(&te_svc.life);
  if (r != TECORE_SUCCESS) {
    te_error_hop(fn, __FILE__, __LINE__);
    job_free(j);
    return r;
  }
  *job = j;
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_svc_job_destroy(tecore_svc_job_t *j) {
  static const char fn[] = "tecore_svc_job_destroy";
  TE_ARG(j, "%s: job is NULL", fn);
  pthread_mutex_lock(&te_svc.life);
  pthread_mutex_lock(&te_svc.lock);
  if (!te_handle_live(j)) {   /* only the pointer is compared: never read */
    pthread_mutex_unlock(&te_svc.lock);
    pthread_mutex_unlock(&te_svc.life);
    return TE_ERR(TECORE_ERR_INVALID, "%s: job %p is not a live job (destroyed?)", fn, (void *)j);
  }
  uint64_t runs = atomic_load(&j->runs);
  if (j->state != SVC_IDLE || j->launches > runs ||
      atomic_load(j->go) == j->ticket) {
    pthread_mutex_unlock(&te_svc.lock);
    pthread_mutex_unlock(&te_svc.life);
    return TE_ERR(TECORE_ERR_NOT_READY, "%s: the job has a run queued or running (%llu "
                  "launched, %llu done); wait for its streams first", fn,
                  (unsigned long long)j->launches, (unsigned long long)runs);
  }
  if (j->prev) j->prev->next = j->next;
  else te_svc.jobs = j->next;
  if (j->next) j->next->prev = j->prev;
  te_svc.njobs--;
  te_svc_words_put(j);
  te_handle_del(j);
  pthread_mutex_unlock(&te_svc.lock);
  te_svc_stop_if_unused_locked();
  pthread_mutex_unlock(&te_svc.life);
  job_free(j);
  return TECORE_SUCCESS;
}

/* The job's sticky error, as the result of the calling API function. */
static tecore_result_t sticky(struct tecore_svc_job *j, const char *fn) {
  pthread_mutex_lock(&te_svc.lock);
  tecore_result_t e = j->err;
  char msg[512];
  snprintf(msg, sizeof msg, "%s", j->errmsg);
  pthread_mutex_unlock(&te_svc.lock);
  if (e == TECORE_SUCCESS) return e;
  return TE_ERR(e, "%s: an earlier run failed: %s", fn, msg);
}

TE_EXPORT tecore_result_t tecore_svc_job_launch(tecore_svc_job_t *j, tecore_stream_t stream) {
  static const char fn[] = "tecore_svc_job_launch";
  TE_ARG(j, "%s: job is NULL", fn);
  TE_ARG(te_handle_live(j), "%s: job %p is not a live job (destroyed?)", fn, (void *)j);
  TE_CHECK(sticky(j, fn));
  tecore_capture_status_t cs = TECORE_CAPTURE_NONE;
  TE_CHECK(tecore_stream_capture_status(stream, &cs));
  TE_CHECK(tecore_stream_write_value64(stream, j->go_d, j->ticket));
  if (cs == TECORE_CAPTURE_NONE) {
    pthread_mutex_lock(&te_svc.lock);
    j->launches++;
    pthread_mutex_unlock(&te_svc.lock);
    te_svc_wake();
  }
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_svc_job_wait(tecore_svc_job_t *j, tecore_stream_t stream) {
  static const char fn[] = "tecore_svc_job_wait";
  TE_ARG(j, "%s: job is NULL", fn);
  TE_ARG(te_handle_live(j), "%s: job %p is not a live job (destroyed?)", fn, (void *)j);
  TE_CHECK(tecore_stream_wait_value64(stream, j->done_d, j->ticket, TECORE_WAIT_EQ));
  TE_CHECK(tecore_stream_write_value64(stream, j->done_d, 0));
  return sticky(j, fn);
}

TE_EXPORT tecore_result_t tecore_svc_job_enqueue(tecore_svc_job_t *j, tecore_stream_t stream) {
  TE_CHECK(tecore_svc_job_launch(j, stream));
  return tecore_svc_job_wait(j, stream);
}

TE_EXPORT tecore_result_t tecore_svc_job_status(tecore_svc_job_t *j, uint64_t *runs) {
  TE_ARG(j, "tecore_svc_job_status: job is NULL");
  TE_ARG(te_handle_live(j), "tecore_svc_job_status: job %p is not a live job (destroyed?)",
         (void *)j);
  if (runs) *runs = atomic_load(&j->runs);
  return sticky(j, "tecore_svc_job_status");
}

/* ---- fixed buffers ------------------------------------------------------------------ */

/* buf must hold bytes: inside the pinned or registered allocation the
 * device layer knows there, else (pageable memory) every page mapped. */
static tecore_result_t buffer_holds(void *buf, size_t bytes, const char *fn) {
  TE_ARG((uintptr_t)buf <= UINTPTR_MAX - bytes, "%s: [%p, +%zu) wraps around the address space",
         fn, buf, bytes);
  tecore_devptr_t base = 0;
  size_t len = 0;
  if (tecore_mem_range((tecore_devptr_t)(uintptr_t)buf, &base, &len) == TECORE_SUCCESS) {
    size_t at = (size_t)((uintptr_t)buf - base);
    TE_ARG(at <= len && bytes <= len - at,
           "%s: bytes %zu is more than buf's allocation holds (%zu bytes from buf to its end)",
           fn, bytes, len - (at <= len ? at : len));
    return TECORE_SUCCESS;
  }
  tecore_clear_error();
  long pg = sysconf(_SC_PAGESIZE);
  uintptr_t lo = (uintptr_t)buf / (uintptr_t)pg * (uintptr_t)pg;
  uintptr_t hi = (uintptr_t)buf + bytes;
  unsigned char v[256];
  for (uintptr_t a = lo; a < hi; a += 256u * (uintptr_t)pg) {
    size_t n = hi - a < 256u * (uintptr_t)pg ? hi - a : 256u * (size_t)pg;
    TE_ARG(mincore((void *)a, n, v) == 0,
           "%s: [%p, +%zu) is not all mapped memory: bytes is more than buf holds", fn, buf, bytes);
  }
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_svc_register_buffer(void *buf, size_t bytes, int *index) {
  static const char fn[] = "tecore_svc_register_buffer";
  TE_ARG(index, "%s: index is NULL", fn);
  *index = -1;
  TE_ARG(buf, "%s: buf is NULL", fn);
  TE_ARG(bytes > 0, "%s: bytes is 0", fn);
  TE_CHECK(buffer_holds(buf, bytes, fn));
  pthread_mutex_lock(&te_svc.life);
  tecore_result_t r = te_svc_start_locked();
  if (r != TECORE_SUCCESS) {
    pthread_mutex_unlock(&te_svc.life);
    return r;
  }
  pthread_mutex_lock(&te_svc.lock);
  int slot = -1;
  for (int i = 0; i < SVC_MAX_BUFFERS; i++)
    if (!te_svc.buf_used[i]) {
      slot = i;
      break;
    }
  if (slot < 0) {
    r = TE_ERR(TECORE_ERR_NOMEM, "%s: all %d buffer slots are registered", fn, SVC_MAX_BUFFERS);
  } else {
    /* counted even without fixed buffers, so the engine lives while it is "registered" */
    te_svc.buf_used[slot] = 1;
    te_svc.buf_base[slot] = buf;
    te_svc.buf_len[slot] = bytes;
    te_svc.nbuffers++;
    if (te_svc.have_fixed) {
      struct iovec iov = {.iov_base = buf, .iov_len = bytes};
      __u64 tag = 0;
      int rc = io_uring_register_buffers_update_tag(&te_svc.ring, (unsigned)slot, &iov, &tag, 1);
      if (rc < 0) {
        TE_INFO(TECORE_SUBSYS_OFFLOAD, "%s: %zu bytes: io_uring buffer registration failed "
                "(%s; RLIMIT_MEMLOCK?): plain reads and writes instead", fn, bytes,
                strerror(-rc));
        te_svc.buf_used[slot] = 2;   /* held, but not a fixed buffer */
      }
    } else {
      te_svc.buf_used[slot] = 2;
    }
    *index = slot;
  }
  pthread_mutex_unlock(&te_svc.lock);
  pthread_mutex_unlock(&te_svc.life);
  return r;
}

TE_EXPORT tecore_result_t tecore_svc_unregister_buffer(int index) {
  static const char fn[] = "tecore_svc_unregister_buffer";
  int slot = index;
  TE_ARG(slot >= 0 && slot < SVC_MAX_BUFFERS,
         "%s: index %d is not a registration", fn, index);
  pthread_mutex_lock(&te_svc.life);
  pthread_mutex_lock(&te_svc.lock);
  int used = te_svc.buf_used[slot];
  tecore_result_t r = TECORE_SUCCESS;
  if (!used) {
    r = TE_ERR(TECORE_ERR_INVALID, "%s: index %d is not registered", fn, index);
  } else {
    if (used == 1 && te_svc.have_fixed) {
      struct iovec iov = {.iov_base = NULL, .iov_len = 0};
      __u64 tag = 0;
      (void)io_uring_register_buffers_update_tag(&te_svc.ring, (unsigned)slot, &iov, &tag, 1);
    }
    te_svc.buf_used[slot] = 0;
    te_svc.nbuffers--;
  }
  pthread_mutex_unlock(&te_svc.lock);
  if (r == TECORE_SUCCESS) te_svc_stop_if_unused_locked();
  pthread_mutex_unlock(&te_svc.life);
  return r;
}
