/* SPDX-License-Identifier: Apache-2.0 */
/* svc_io.c -- the service engine's operations, on its thread: a job's
 * calls, then its reads and writes through the io_uring (fixed buffers
 * where registered, at most the queue depth in flight), or pread/pwrite
 * without a ring; completions (errors, short transfers), timeouts
 * (cancel, and the job completed after a second timeout even if the
 * kernel never answers), injected faults, and the polls (work that
 * progresses by itself, called once a pass).
 *
 * A read that fails leaves its buffer filled with 0xff bytes, so whatever
 * reads it afterwards sees NaNs, never the previous tensor's data. */
#include "svc/svc_internal.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

TE_PARAM_INT(svc_timeout_ms, "TECORE_SVC_TIMEOUT_MS", 60000, 1, 24 * 3600 * 1000,
             "milliseconds one service-engine job may run before it fails with "
             "TECORE_ERR_TIMEOUT (its stream then goes on)")

static int inflight;

static const char *kind_word(tecore_svc_op_kind_t k) {
  return k == TECORE_SVC_READ ? "read" : "write";
}

/* An injected fault for this op? (consumes it) */
static int take_fault(const struct tecore_svc_op *op) {
  int err = 0;
  pthread_mutex_lock(&te_svc.lock);
  if (te_svc.fault_nth && te_svc.fault_kind == op->kind && --te_svc.fault_nth == 0)
    err = te_svc.fault_err;
  pthread_mutex_unlock(&te_svc.lock);
  return err;
}

/* Accounts one finished read or write (res: bytes or -errno). */
static void io_done(struct tecore_svc_job *j, size_t i, long res) {
  const struct tecore_svc_op *op = &j->ops[i];
  atomic_fetch_add(&te_svc.ops, 1);
  if (res == (long)op->bytes) {
    atomic_fetch_add(op->kind == TECORE_SVC_READ ? &te_svc.bytes_read : &te_svc.bytes_written,
                     op->bytes);
  } else if (res < 0) {
    te_svc_job_fail(j, TECORE_ERR_SYSTEM, "%s: %s of %zu bytes at offset %llu failed: %s%s",
                    op->name, kind_word(op->kind), op->bytes, (unsigned long long)op->offset,
                    strerror((int)-res),
                    -res == ECANCELED ? " (cancelled after TECORE_SVC_TIMEOUT_MS)" : "");
  } else if (op->kind == TECORE_SVC_READ) {
    te_svc_job_fail(j, TECORE_ERR_SYSTEM, "%s: short read: %ld of %zu bytes at offset %llu "
                    "(the file is shorter than what was written)", op->name, res, op->bytes,
                    (unsigned long long)op->offset);
  } else {
    te_svc_job_fail(j, TECORE_ERR_SYSTEM, "%s: short write: %ld of %zu bytes at offset %llu "
                    "(file system full, or a file size limit)", op->name, res, op->bytes,
                    (unsigned long long)op->offset);
  }
  if (res != (long)op->bytes && op->kind == TECORE_SVC_READ) memset(op->buf, 0xff, op->bytes);
  j->pending--;
}

/* Without a ring: the whole transfer on this thread. */
static long sync_io(const struct tecore_svc_op *op) {
  size_t done = 0;
  while (done < op->bytes) {
    ssize_t r = op->kind == TECORE_SVC_READ
                    ? pread(op->fd, (char *)op->buf + done, op->bytes - done,
                            (off_t)(op->offset + done))
                    : pwrite(op->fd, (const char *)op->buf + done, op->bytes - done,
                             (off_t)(op->offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (r == 0) break;
    done += (size_t)r;
  }
  return (long)done;
}

/* A callback of j is about to run on the engine thread: j's creator's
 * context current (set only when it changes). */
static void job_ctx(const struct tecore_svc_job *j) {
  static __thread tecore_ctx_t set;
  if (!j->ctx || j->ctx == set) return;
  if (tecore_ctx_set_current(j->ctx) == TECORE_SUCCESS) set = j->ctx;
  else tecore_clear_error();   /* the callback reports what then fails */
}

void te_svc_io_start(struct tecore_svc_job *j) {
  j->t_start = te_now_ns();
  j->timed_out = j->forced = 0;
  j->next_io = 0;
  j->pending = 0;
  for (size_t i = 0; i < j->nops; i++) {
    const struct tecore_svc_op *op = &j->ops[i];
    if (op->kind == TECORE_SVC_POLL) {
      j->pending++;
      j->st[i].polling = 1;
      continue;
    }
    if (op->kind != TECORE_SVC_CALL) {
      j->pending++;
      continue;
    }
    atomic_fetch_add(&te_svc.ops, 1);
    job_ctx(j);
    tecore_result_t r = op->fn(op->arg);
    if (r != TECORE_SUCCESS)
      te_svc_job_fail(j, r, "%s: the callback failed: %s (%s)", op->name, tecore_strerror(r),
                      tecore_last_error());
  }
}

/* The next read or write of j that has not started, or nops. */
static size_t next_io(struct tecore_svc_job *j) {
  while (j->next_io < j->nops && (j->ops[j->next_io].kind == TECORE_SVC_CALL ||
                                  j->ops[j->next_io].kind == TECORE_SVC_POLL))
    j->next_io++;
  return j->next_io;
}

int te_svc_poll(struct tecore_svc_job *active) {
  int any = 0;
  for (struct tecore_svc_job *j = active; j; j = j->active_next) {
    for (size_t i = 0; i < j->nops; i++) {
      if (!j->st[i].polling) continue;
      const struct tecore_svc_op *op = &j->ops[i];
      job_ctx(j);
      tecore_result_t r = op->fn(op->arg);
      if (r == TECORE_ERR_NOT_READY) continue;
      j->st[i].polling = 0;
      j->pending--;
      atomic_fetch_add(&te_svc.ops, 1);
      any = 1;
      if (r != TECORE_SUCCESS)
        te_svc_job_fail(j, r, "%s: the poll failed: %s (%s)", op->name, tecore_strerror(r),
                        tecore_last_error());
    }
  }
  return any;
}

int te_svc_io_submit(struct tecore_svc_job **active) {
  int any = 0;
  for (struct tecore_svc_job *j = *active; j; j = j->active_next) {
    if (j->timed_out) continue;
    size_t i;
    while ((i = next_io(j)) < j->nops) {
      const struct tecore_svc_op *op = &j->ops[i];
      int fault = take_fault(op);
      if (fault || !te_svc.have_ring) {
        j->next_io++;
        io_done(j, i, fault ? -(long)fault : sync_io(op));
        any = 1;
        continue;
      }
      if (inflight >= te_svc.qd) break;
      struct io_uring_sqe *sqe = io_uring_get_sqe(&te_svc.ring);
      if (!sqe) break;
      int fixed = op->buf_index >= 0 && te_svc.buf_used[op->buf_index] == 1;
      if (op->kind == TECORE_SVC_READ) {
        if (fixed)
          io_uring_prep_read_fixed(sqe, op->fd, op->buf, (unsigned)op->bytes, op->offset,
                                   op->buf_index);
        else
          io_uring_prep_read(sqe, op->fd, op->buf, (unsigned)op->bytes, op->offset);
      } else {
        if (fixed)
          io_uring_prep_write_fixed(sqe, op->fd, op->buf, (unsigned)op->bytes, op->offset,
                                    op->buf_index);
        else
          io_uring_prep_write(sqe, op->fd, op->buf, (unsigned)op->bytes, op->offset);
      }
      io_uring_sqe_set_data(sqe, &j->st[i]);
      j->st[i].inflight = 1;
      j->next_io++;
      inflight++;
      any = 1;
    }
  }
  if (te_svc.have_ring && io_uring_sq_ready(&te_svc.ring) > 0) {
    int rc = io_uring_submit(&te_svc.ring);
    if (rc < 0) TE_WARN(TECORE_SUBSYS_OFFLOAD, "service engine: io_uring_submit: %s",
                        strerror(-rc));
  }
  return any;
}

static void reap_one(struct io_uring_cqe *cqe) {
  struct svc_opst *st = io_uring_cqe_get_data(cqe);
  long res = cqe->res;
  io_uring_cqe_seen(&te_svc.ring, cqe);
  if (!st) return;   /* a cancel request's own completion */
  st->inflight = 0;
  inflight--;
  io_done(st->job, st->index, res);
}

int te_svc_io_reap(void) {
  if (!te_svc.have_ring) return 0;
  int n = 0;
  struct io_uring_cqe *cqe;
  while (io_uring_peek_cqe(&te_svc.ring, &cqe) == 0) {
    reap_one(cqe);
    n++;
  }
  return n;
}

int te_svc_io_wait(long ns) {
  if (!te_svc.have_ring || inflight == 0) return 0;
  struct __kernel_timespec ts = {.tv_sec = ns / 1000000000L, .tv_nsec = ns % 1000000000L};
  struct io_uring_cqe *cqe;
  if (io_uring_wait_cqe_timeout(&te_svc.ring, &cqe, &ts) == 0) reap_one(cqe);
  return 1;
}

void te_svc_io_timeouts(struct tecore_svc_job *active) {
  uint64_t limit = (uint64_t)tecore_tunable_int(&svc_timeout_ms) * 1000000ull;
  uint64_t now = te_now_ns();
  for (struct tecore_svc_job *j = active; j; j = j->active_next) {
    if (j->pending == 0 || now - j->t_start <= limit) continue;
    if (!j->timed_out) {
      j->timed_out = 1;
      te_svc_job_fail(j, TECORE_ERR_TIMEOUT, "%s: the job did not finish within %llu ms "
                      "(TECORE_SVC_TIMEOUT_MS); its I/O is cancelled",
                      j->ops[0].name, (unsigned long long)(limit / 1000000ull));
      /* the polls are called no more; the ops not started never will be */
      for (size_t k = 0; k < j->nops; k++)
        if (j->st[k].polling) {
          j->st[k].polling = 0;
          j->pending--;
        }
      size_t i;
      while ((i = next_io(j)) < j->nops) {
        j->next_io++;
        j->pending--;
        if (j->ops[i].kind == TECORE_SVC_READ) memset(j->ops[i].buf, 0xff, j->ops[i].bytes);
      }
      for (size_t k = 0; k < j->nops && te_svc.have_ring; k++) {
        if (!j->st[k].inflight) continue;
        struct io_uring_sqe *sqe = io_uring_get_sqe(&te_svc.ring);
        if (!sqe) break;
        io_uring_prep_cancel64(sqe, (__u64)(uintptr_t)&j->st[k], 0);
        io_uring_sqe_set_data(sqe, NULL);
      }
      if (te_svc.have_ring) (void)io_uring_submit(&te_svc.ring);
    } else if (!j->forced && now - j->t_start > 2 * limit) {
      /* the kernel has not answered the cancel: let the stream go on (the
       * job stays busy, so it cannot be destroyed or run, until it does) */
      j->forced = 1;
      atomic_fetch_add(&j->runs, 1);
      atomic_store_explicit(j->done, j->ticket, memory_order_release);
    }
  }
}
