/* SPDX-License-Identifier: Apache-2.0 */
/* svc_engine.c -- the service engine's thread (te/svc.h): starting and
 * stopping it with its io_uring and eventfd, the polling loop with its
 * back-off, kicks, statistics and the injected-fault setting.
 *
 * The loop.  Each pass takes the jobs whose go word holds their ticket
 * (clearing it), starts them, submits their I/O, reaps completions, calls
 * the polls of running jobs once each (a verbs transfer progresses there,
 * so it never holds up the other jobs) and checks timeouts.  While I/O is in flight it sleeps in the ring (a
 * completion wakes it) for at most one poll interval, so new hand-offs
 * are still seen.  Idle, it polls for TECORE_SVC_SPIN_US after the last
 * work or kick, then sleeps on the eventfd with intervals that double from
 * 1 us up to TECORE_SVC_MAX_SLEEP_US: an idle engine wakes about
 * 1e6 / MAX_SLEEP_US times a second and uses next to no CPU. */
#define _GNU_SOURCE 1   /* ppoll */
#include "svc/svc_internal.h"

#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

TE_PARAM_INT(svc_spin_us, "TECORE_SVC_SPIN_US", 50, 0, 1000000,
             "microseconds the service engine polls without sleeping after work or a kick")
TE_PARAM_INT(svc_max_sleep_us, "TECORE_SVC_MAX_SLEEP_US", 1000, 1, 1000000,
             "longest sleep (microseconds) between the idle service engine's polls: its "
             "hand-off latency when idle, and about 1e6/this wake-ups a second")
TE_PARAM_INT(svc_queue_depth, "TECORE_SVC_QUEUE_DEPTH", 64, 1, 4096,
             "reads and writes the service engine keeps in flight in its io_uring")
TE_PARAM_STR(svc_fault, "TECORE_SVC_FAULT", "", NULL,
             "debug: inject one I/O error, \"read:N:ERRNO\" or \"write:N:ERRNO\" (the Nth "
             "read or write the engine starts fails with that errno, e.g. write:3:5 for EIO)")

/* Takes the jobs whose go word holds their ticket; returns how many. */
static int take_jobs(struct tecore_svc_job **active) {
  int n = 0;
  pthread_mutex_lock(&te_svc.lock);
  for (struct tecore_svc_job *j = te_svc.jobs; j; j = j->next) {
    if (j->state != SVC_IDLE) continue;
    if (atomic_load_explicit(j->go, memory_order_acquire) != j->ticket) continue;
    atomic_store_explicit(j->go, 0, memory_order_relaxed);
    j->state = SVC_RUNNING;
    j->active_next = *active;
    *active = j;
    n++;
  }
  pthread_mutex_unlock(&te_svc.lock);
  return n;
}

static void sleep_on_eventfd(long ns) {
  struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
  struct pollfd pf = {.fd = te_svc.efd, .events = POLLIN};
  if (ppoll(&pf, 1, &ts, NULL) > 0) {
    uint64_t v;
    ssize_t r = read(te_svc.efd, &v, sizeof v);
    (void)r;
  }
}

static void *engine_main(void *unused) {
  (void)unused;
  if (pthread_getcpuclockid(pthread_self(), &te_svc.cpu_clock) == 0) te_svc.have_cpu_clock = 1;
  struct tecore_svc_job *active = NULL;
  uint64_t spin_ns = (uint64_t)tecore_tunable_int(&svc_spin_us) * 1000ull;
  long max_sleep = (long)tecore_tunable_int(&svc_max_sleep_us) * 1000L;
  uint64_t last_work = te_now_ns();
  long sleep_ns = 1000;
  while (!atomic_load(&te_svc.stop)) {
    uint64_t t0 = te_now_ns();
    int started = take_jobs(&active);
    for (struct tecore_svc_job *j = active; j && started; j = j->active_next, started--)
      te_svc_io_start(j);   /* the newest are at the head */
    int did = te_svc_io_submit(&active);
    did |= te_svc_io_reap();
    did |= te_svc_poll(active);
    te_svc_io_timeouts(active);
    /* drop the finished jobs from the running list */
    for (struct tecore_svc_job **pp = &active; *pp;) {
      struct tecore_svc_job *j = *pp;
      if (j->pending == 0 && !j->forced) {
        *pp = j->active_next;
        te_svc_job_finish(j);
        did = 1;
      } else if (j->forced && j->pending == 0) {
        *pp = j->active_next;
        pthread_mutex_lock(&te_svc.lock);
        j->state = SVC_IDLE;
        j->forced = 0;
        pthread_mutex_unlock(&te_svc.lock);
      } else {
        pp = &j->active_next;
      }
    }
    uint64_t t1 = te_now_ns();
    if (active || did) atomic_fetch_add(&te_svc.busy_ns, t1 - t0);
    if (active) {
      /* I/O in flight: sleep in the ring until a completion or a poll
       * interval; polls alone: a short nap (a kick ends it) */
      if (!did && !te_svc_io_wait(50000)) sleep_on_eventfd(20000);
      last_work = te_now_ns();
      sleep_ns = 1000;
      continue;
    }
    if (did) {
      last_work = t1;
      sleep_ns = 1000;
      continue;
    }
    if (t1 - last_work < spin_ns) {
      sched_yield();
      continue;
    }
    atomic_fetch_add(&te_svc.wakeups, 1);
    sleep_on_eventfd(sleep_ns);
    sleep_ns = sleep_ns * 2 > max_sleep ? max_sleep : sleep_ns * 2;
    /* a kick (a host launch) restarts the spin window */
    struct pollfd pf = {.fd = te_svc.efd, .events = POLLIN};
    if (poll(&pf, 1, 0) > 0) {
      uint64_t v;
      ssize_t r = read(te_svc.efd, &v, sizeof v);
      (void)r;
      last_work = te_now_ns();
      sleep_ns = 1000;
    }
  }
  return NULL;
}

static void parse_fault(void) {
  const char *f = tecore_tunable_str(&svc_fault);
  if (!f || !*f) return;
  char kind[8] = "";
  unsigned nth = 0;
  int err = 0;
  if (sscanf(f, "%7[a-z]:%u:%d", kind, &nth, &err) != 3 || nth == 0 || err <= 0 ||
      (strcmp(kind, "read") && strcmp(kind, "write"))) {
    TE_WARN(TECORE_SUBSYS_OFFLOAD, "TECORE_SVC_FAULT=\"%s\" is not read:N:ERRNO or "
            "write:N:ERRNO; ignored", f);
    return;
  }
  te_svc.fault_kind = strcmp(kind, "read") ? TECORE_SVC_WRITE : TECORE_SVC_READ;
  te_svc.fault_nth = nth;
  te_svc.fault_err = err;
}

tecore_result_t te_svc_start_locked(void) {
  if (te_svc.running) return TECORE_SUCCESS;
  if (te_finished())
    return TE_ERR(TECORE_ERR_NOT_INITIALIZED, "service engine: tecore_fini() already ran");
  te_svc.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (te_svc.efd < 0)
    return TE_ERR(TECORE_ERR_SYSTEM, "service engine: eventfd: %s", strerror(errno));
  te_svc.qd = (int)tecore_tunable_int(&svc_queue_depth);
  int rc = io_uring_queue_init((unsigned)te_svc.qd, &te_svc.ring, 0);
  te_svc.have_ring = rc == 0;
  te_svc.have_fixed = 0;
  if (rc == 0) {
    snprintf(te_svc.why, sizeof te_svc.why, "io_uring, queue depth %d", te_svc.qd);
    int fr = io_uring_register_buffers_sparse(&te_svc.ring, SVC_MAX_BUFFERS);
    if (fr == 0)
      te_svc.have_fixed = 1;
    else
      snprintf(te_svc.why, sizeof te_svc.why, "io_uring, queue depth %d; no fixed buffers "
               "(register_buffers_sparse: %s)", te_svc.qd, strerror(-fr));
  } else if (rc == -ELIBACC && !te_uring_loaded()) {
    snprintf(te_svc.why, sizeof te_svc.why, "no io_uring (%s): reads and writes use "
             "pread/pwrite on the engine thread", te_uring_why());
    TE_INFO(TECORE_SUBSYS_OFFLOAD, "service engine: %s", te_svc.why);
  } else {
    snprintf(te_svc.why, sizeof te_svc.why, "no io_uring (io_uring_queue_init: %s): reads and "
             "writes use pread/pwrite on the engine thread", strerror(-rc));
    TE_INFO(TECORE_SUBSYS_OFFLOAD, "service engine: %s", te_svc.why);
  }
  memset(te_svc.buf_used, 0, sizeof te_svc.buf_used);
  te_svc.nbuffers = 0;
  atomic_store(&te_svc.stop, 0);
  atomic_store(&te_svc.runs, 0);
  atomic_store(&te_svc.ops, 0);
  atomic_store(&te_svc.errors, 0);
  atomic_store(&te_svc.wakeups, 0);
  atomic_store(&te_svc.bytes_read, 0);
  atomic_store(&te_svc.bytes_written, 0);
  atomic_store(&te_svc.busy_ns, 0);
  te_svc.have_cpu_clock = 0;
  pthread_mutex_lock(&te_svc.lock);
  parse_fault();
  pthread_mutex_unlock(&te_svc.lock);
  te_svc.t_up = te_now_ns();
  int pr = pthread_create(&te_svc.thread, NULL, engine_main, NULL);
  if (pr != 0) {
    if (te_svc.have_ring) io_uring_queue_exit(&te_svc.ring);
    te_svc.have_ring = 0;
    close(te_svc.efd);
    te_svc.efd = -1;
    return TE_ERR(TECORE_ERR_SYSTEM, "service engine: pthread_create: %s", strerror(pr));
  }
  te_svc.running = 1;
  TE_INFO(TECORE_SUBSYS_OFFLOAD, "service engine started: %s", te_svc.why);
  return TECORE_SUCCESS;
}

/* Joins the engine thread and frees its ring, eventfd and slabs. */
static void svc_stop_locked(void) {
  atomic_store(&te_svc.stop, 1);
  te_svc_wake();
  pthread_join(te_svc.thread, NULL);
  te_svc.running = 0;
  if (te_svc.have_ring) io_uring_queue_exit(&te_svc.ring);
  te_svc.have_ring = te_svc.have_fixed = 0;
  close(te_svc.efd);
  te_svc.efd = -1;
  te_svc_slabs_free();
}

void te_svc_stop_if_unused_locked(void) {
  if (!te_svc.running || te_svc.njobs > 0 || te_svc.nbuffers > 0) return;
  svc_stop_locked();
}

/* tecore_fini: the engine stops whatever it still holds (jobs and buffers
 * the caller did not release die with the library), before the backend
 * that its pinned slabs come from. */
void te_svc_fini(void) {
  pthread_mutex_lock(&te_svc.life);
  if (te_svc.running) svc_stop_locked();
  else te_svc_slabs_free();
  pthread_mutex_unlock(&te_svc.life);
}

/* fork(): the child has no engine thread; start it afresh if asked.  The
 * parent's ring, pages and jobs are left alone (they are the parent's). */
static void svc_atfork_child(void) {
  pthread_mutex_init(&te_svc.life, NULL);
  pthread_mutex_init(&te_svc.lock, NULL);
  if (te_svc.efd >= 0) close(te_svc.efd);
  if (te_svc.have_ring) close(te_svc.ring.ring_fd);
  te_svc.efd = -1;
  te_svc.running = te_svc.have_ring = te_svc.have_fixed = 0;
  te_svc.jobs = NULL;
  te_svc.njobs = 0;
  te_svc.slabs = NULL;
  te_svc.nbuffers = 0;
}

__attribute__((constructor)) static void svc_register_atfork(void) {
  pthread_atfork(NULL, NULL, svc_atfork_child);
}

/* At exit, a running engine is stopped so that it never touches pages the
 * backends are tearing down. */
__attribute__((destructor)) static void svc_at_exit(void) {
  if (!te_svc.running) return;
  atomic_store(&te_svc.stop, 1);
  te_svc_wake();
  pthread_join(te_svc.thread, NULL);
  te_svc.running = 0;
}

TE_EXPORT tecore_result_t tecore_svc_kick(void) {
  te_svc_wake();
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_svc_get_stats(struct tecore_svc_stats *st) {
  TE_ARG(st, "tecore_svc_get_stats: st is NULL");
  memset(st, 0, sizeof *st);
  pthread_mutex_lock(&te_svc.life);
  if (te_svc.running) {
    st->running = 1;
    st->uring = te_svc.have_ring;
    st->fixed_buffers = te_svc.have_fixed;
    snprintf(st->why, sizeof st->why, "%s", te_svc.why);
    st->runs = atomic_load(&te_svc.runs);
    st->ops = atomic_load(&te_svc.ops);
    st->errors = atomic_load(&te_svc.errors);
    st->wakeups = atomic_load(&te_svc.wakeups);
    st->bytes_read = atomic_load(&te_svc.bytes_read);
    st->bytes_written = atomic_load(&te_svc.bytes_written);
    st->up_s = (double)(te_now_ns() - te_svc.t_up) * 1e-9;
    st->busy_s = (double)atomic_load(&te_svc.busy_ns) * 1e-9;
    struct timespec ts;
    if (te_svc.have_cpu_clock && clock_gettime(te_svc.cpu_clock, &ts) == 0)
      st->cpu_s = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
  } else {
    snprintf(st->why, sizeof st->why, "not running (no jobs or buffers)");
  }
  pthread_mutex_unlock(&te_svc.life);
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_svc_inject_fault(tecore_svc_op_kind_t kind, unsigned nth,
                                                  int err) {
  static const char fn[] = "tecore_svc_inject_fault";
  TE_ARG(kind == TECORE_SVC_READ || kind == TECORE_SVC_WRITE,
         "%s: kind %d is not TECORE_SVC_READ or TECORE_SVC_WRITE", fn, (int)kind);
  TE_ARG(nth == 0 || err > 0, "%s: err %d is not a positive errno", fn, err);
  pthread_mutex_lock(&te_svc.lock);
  te_svc.fault_kind = kind;
  te_svc.fault_nth = nth;
  te_svc.fault_err = err;
  pthread_mutex_unlock(&te_svc.lock);
  return TECORE_SUCCESS;
}
