/* profile.c -- per-kernel device time from timing events (te/profile.h).
 * SPDX-License-Identifier: Apache-2.0
 *
 * A record is a pair of events around one eager launch.  Records pile up
 * under a lock until tecore_profile_report turns them into a table; the
 * events are created per record and destroyed by the report, so nothing
 * outlives it. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include "internal.h"
#include "profile_hook.h"
#include <te/profile.h>

#define PROF_MAX_RECORDS (1u << 20) /* 2 Mi events; past this, launches are counted as dropped */
#define PROF_LABEL 48

struct prof_rec {
  const char *name;
  char label[PROF_LABEL];
  tecore_event_t e0, e1;
};

static pthread_mutex_t prof_lock = PTHREAD_MUTEX_INITIALIZER;
static int prof_on; /* read without the lock on every launch */
static struct prof_rec *recs;
static size_t nrecs, caprecs, dropped;
static __thread int prof_depth;

void te_prof_begin(struct te_prof_mark *m, tecore_stream_t stream) {
  m->on = 0;
  if (prof_depth++ > 0 || !__atomic_load_n(&prof_on, __ATOMIC_RELAXED)) return;
  tecore_capture_status_t st = TECORE_CAPTURE_NONE;
  if (tecore_stream_capture_status(stream, &st) != TECORE_SUCCESS ||
      st != TECORE_CAPTURE_NONE)
    return;
  if (tecore_event_create(TECORE_EVENT_DEFAULT, &m->e0) != TECORE_SUCCESS) return;
  if (tecore_event_record(m->e0, stream) != TECORE_SUCCESS) {
    tecore_event_destroy(m->e0);
    return;
  }
  m->stream = stream;
  m->on = 1;
}

static int push(const char *name, const char *label, tecore_event_t e0, tecore_event_t e1) {
  int ok = 0;
  pthread_mutex_lock(&prof_lock);
  if (nrecs == caprecs && caprecs < PROF_MAX_RECORDS) {
    size_t nc = caprecs ? caprecs * 2 : 1024;
    struct prof_rec *n = realloc(recs, nc * sizeof *n);
    if (n) {
      recs = n;
      caprecs = nc;
    }
  }
  if (nrecs < caprecs) {
    struct prof_rec *p = &recs[nrecs++];
    p->name = name;
    snprintf(p->label, sizeof p->label, "%s", label ? label : "");
    p->e0 = e0;
    p->e1 = e1;
    ok = 1;
  } else {
    dropped++;
  }
  pthread_mutex_unlock(&prof_lock);
  return ok;
}

void te_prof_end(struct te_prof_mark *m, const char *name, const char *label, tecore_result_t r) {
  prof_depth--;
  if (!m->on) return;
  tecore_event_t e1 = NULL;
  if (r == TECORE_SUCCESS && tecore_event_create(TECORE_EVENT_DEFAULT, &e1) == TECORE_SUCCESS) {
    if (tecore_event_record(e1, m->stream) == TECORE_SUCCESS && push(name, label, m->e0, e1))
      return;
    tecore_event_destroy(e1);
  }
  tecore_event_destroy(m->e0);
}

TE_EXPORT tecore_result_t tecore_profile_start(void) {
  TE_ARG(!__atomic_load_n(&prof_on, __ATOMIC_RELAXED),
         "tecore_profile_start: already recording (tecore_profile_stop first)");
  __atomic_store_n(&prof_on, 1, __ATOMIC_RELAXED);
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_profile_stop(void) {
  TE_ARG(__atomic_load_n(&prof_on, __ATOMIC_RELAXED),
         "tecore_profile_stop: not recording (tecore_profile_start first)");
  __atomic_store_n(&prof_on, 0, __ATOMIC_RELAXED);
  return TECORE_SUCCESS;
}

/* One line of the report: every record with the same name and label. */
struct prof_row {
  const char *name, *label;
  size_t calls;
  double us;
};

static int row_cmp(const void *a, const void *b) {
  const struct prof_row *x = a, *y = b;
  return x->us < y->us ? 1 : x->us > y->us ? -1 : strcmp(x->name, y->name);
}

static struct prof_row *row_find(struct prof_row *rows, size_t *nrows, const struct prof_rec *r) {
  for (size_t i = 0; i < *nrows; i++)
    if (rows[i].name == r->name && strcmp(rows[i].label, r->label) == 0) return &rows[i];
  struct prof_row *n = &rows[(*nrows)++];
  n->name = r->name;
  n->label = r->label;
  return n;
}

/* One line to fd (no stdio: dprintf's stream buffer is the leak this
 * replaced); a short write is retried.  *err keeps the first failure's
 * errno: a report that did not arrive is an error, not a success, and
 * after one the rest is not tried. */
static void put_line(int out, int *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void put_line(int out, int *err, const char *fmt, ...) {
  char line[512];
  if (*err) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  size_t len = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1, at = 0;
  while (at < len) {
    ssize_t w = write(out, line + at, len - at);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      *err = w < 0 ? errno : EIO;
      return;
    }
    at += (size_t)w;
  }
}

/* The table; 0 or the errno of the write that failed. */
static int print_rows(int out, const struct prof_row *rows, size_t nrows, double total,
                      size_t nrec, size_t ndropped) {
  int err = 0;
  put_line(out, &err, "%-34s %-26s %8s %12s %10s %6s\n", "kernel", "shape", "calls",
           "total us", "mean us", "share");
  for (size_t i = 0; i < nrows; i++)
    put_line(out, &err, "%-34s %-26s %8zu %12.1f %10.2f %5.1f%%\n", rows[i].name,
             rows[i].label, rows[i].calls, rows[i].us, rows[i].us / (double)rows[i].calls,
             total > 0 ? 100.0 * rows[i].us / total : 0.0);
  put_line(out, &err, "%-34s %-26s %8zu %12.1f\n", "all", "", nrec, total);
  if (ndropped)
    put_line(out, &err, "(%zu launches past %u records were not timed)\n", ndropped,
             PROF_MAX_RECORDS);
  return err;
}

/* fd must be open for writing; checked before the records are taken, so
 * that a wrong descriptor loses nothing. */
static tecore_result_t report_fd_check(int fd) {
  if (fd < 0) return TECORE_SUCCESS;
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0)
    return TE_ERR(TECORE_ERR_INVALID, "tecore_profile_report: fd %d is not an open descriptor "
                  "(%s); the records are kept", fd, strerror(errno));
  TE_ARG((fl & O_ACCMODE) != O_RDONLY, "tecore_profile_report: fd %d is open for reading "
         "only; the records are kept", fd);
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_profile_report(int fd, double *total_us) {
  TE_CHECK(report_fd_check(fd));
  pthread_mutex_lock(&prof_lock);
  struct prof_rec *r = recs;
  size_t n = nrecs, nd = dropped;
  recs = NULL;
  nrecs = caprecs = dropped = 0;
  pthread_mutex_unlock(&prof_lock);

  tecore_result_t res = n ? tecore_ctx_synchronize() : TECORE_SUCCESS;
  struct prof_row *rows = n ? calloc(n, sizeof *rows) : NULL;
  if (n && !rows && res == TECORE_SUCCESS)
    res = TE_ERR(TECORE_ERR_NOMEM, "tecore_profile_report: %zu rows", n);
  size_t nrows = 0;
  double total = 0;
  for (size_t i = 0; i < n; i++) {
    float ms = 0;
    if (res == TECORE_SUCCESS) {
      tecore_result_t e = tecore_event_elapsed(&ms, r[i].e0, r[i].e1);
      if (e != TECORE_SUCCESS) res = e;
      struct prof_row *row = row_find(rows, &nrows, &r[i]);
      row->calls++;
      row->us += 1000.0 * (double)ms;
      total += 1000.0 * (double)ms;
    }
  }
  if (res == TECORE_SUCCESS && fd >= 0) {
    if (nrows) qsort(rows, nrows, sizeof *rows, row_cmp);
    int err = print_rows(fd, rows, nrows, total, n, nd);
    if (err)
      res = TE_ERR(TECORE_ERR_SYSTEM, "tecore_profile_report: writing the report to fd %d: %s "
                   "(the records are released)", fd, strerror(err));
  }
  for (size_t i = 0; i < n; i++) {
    tecore_event_destroy(r[i].e0);
    tecore_event_destroy(r[i].e1);
  }
  free(rows);
  free(r);
  if (res == TECORE_SUCCESS && total_us) *total_us = total;
  return res;
}
