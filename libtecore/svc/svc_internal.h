/* SPDX-License-Identifier: Apache-2.0 */
/* svc_internal.h -- the service engine's private state (te/svc.h): the one
 * engine of the process (its thread, io_uring, wake-up eventfd, jobs,
 * flag-word slabs, statistics, injected faults) and a job's run state.
 *
 * Locks.  `life` serializes starting and stopping the engine (held by
 * API calls only, never by the engine thread); `lock` protects the job
 * list, each job's state and error, the slabs and the fault.  The engine
 * thread alone touches the ring and the run state of running jobs. */
#ifndef TECORE_SVC_INTERNAL_H
#define TECORE_SVC_INTERNAL_H

#include "internal.h"
#include "te_uring.h"   /* liburing, loaded at run time */
#include <stdatomic.h>
#include <te/svc.h>

#define SVC_NAME_LEN 160

/* One operation's run state; its address is the io_uring user_data. */
struct svc_opst {
  struct tecore_svc_job *job;
  size_t index;
  int inflight;          /* submitted, completion not seen */
  int polling;           /* a POLL op not done yet */
};

enum svc_job_state { SVC_IDLE = 0, SVC_RUNNING = 1 };

struct tecore_svc_job {
  struct tecore_svc_job *next, *prev;      /* the engine's list (under lock) */
  struct tecore_svc_job *active_next;      /* the engine thread's running list */
  struct tecore_svc_op *ops;
  char (*names)[SVC_NAME_LEN];
  struct svc_opst *st;
  size_t nops;
  _Atomic uint64_t *go, *done;             /* host addresses of the flag words */
  tecore_devptr_t go_d, done_d;            /* their device addresses */
  size_t word;                             /* the pair's index in the slabs */
  uint64_t ticket;                         /* the value written to go and done */
  int state;                               /* enum svc_job_state (under lock) */
  /* engine thread only, while running */
  size_t next_io;                          /* the next op to submit */
  size_t pending;                          /* ops submitted or to submit */
  uint64_t t_start;
  int timed_out, forced;
  /* host side */
  uint64_t launches;                       /* eager launches (not captured) */
  _Atomic uint64_t runs;
  tecore_result_t err;                     /* sticky (under lock) */
  char errmsg[512];
  /* The creator's current context (or NULL): callbacks run with it
   * current on the engine thread, never with the driver's fallback
   * (device 0's primary context, which a rank of another GPU would then
   * open and keep: seen on 4 H100s as 16 descriptors of /dev/nvidia0). */
  tecore_ctx_t ctx;
};

/* A page of pinned, device-mapped host memory holding flag-word pairs. */
#define SVC_SLAB_BYTES 4096
#define SVC_SLAB_PAIRS (SVC_SLAB_BYTES / 16)
struct svc_slab {
  struct svc_slab *next;
  void *host;
  tecore_devptr_t dev;
  unsigned char used[SVC_SLAB_PAIRS];
};

#define SVC_MAX_BUFFERS 64

struct svc_engine {
  pthread_mutex_t life, lock;
  int running;
  pthread_t thread;
  atomic_int stop;
  int efd;                                 /* eventfd: kicks */
  struct io_uring ring;
  int have_ring, have_fixed, qd;
  char why[160];
  struct tecore_svc_job *jobs;             /* under lock */
  size_t njobs;
  uint64_t next_ticket;
  struct svc_slab *slabs;
  int buf_used[SVC_MAX_BUFFERS];
  unsigned char *buf_base[SVC_MAX_BUFFERS];   /* each registration's range */
  size_t buf_len[SVC_MAX_BUFFERS];
  size_t nbuffers;
  /* injected fault (under lock) */
  tecore_svc_op_kind_t fault_kind;
  unsigned fault_nth;
  int fault_err;
  /* statistics */
  _Atomic uint64_t runs, ops, errors, wakeups, bytes_read, bytes_written, busy_ns;
  uint64_t t_up;
  clockid_t cpu_clock;
  int have_cpu_clock;
};

/* The files, each calling only those above it in this list:
 *   svc_state.c    the engine's state, its kick, flag words, a run's end
 *   svc_io.c       the engine thread's operations
 *   svc_engine.c   the thread: start, stop, the loop; stats, faults
 *   svc_job.c      the job and buffer API */

/* svc_state.c */
extern struct svc_engine te_svc;
void te_svc_wake(void);
/* A pair of flag words for job (lock held); back to the slabs; the
 * slabs freed (the engine stopping). */
tecore_result_t te_svc_words_get(struct tecore_svc_job *job);
void te_svc_words_put(struct tecore_svc_job *job);
void te_svc_slabs_free(void);
/* The engine's side of a job's run (engine thread). */
void te_svc_job_finish(struct tecore_svc_job *job);
void te_svc_job_fail(struct tecore_svc_job *job, tecore_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* svc_engine.c */
tecore_result_t te_svc_start_locked(void);   /* with life held */
void te_svc_stop_if_unused_locked(void);     /* with life held */
/* tecore_fini: stops the engine even with jobs or buffers left. */
void te_svc_fini(void);
/* svc_io.c: engine thread */
void te_svc_io_start(struct tecore_svc_job *job);              /* calls, then queues I/O */
int te_svc_io_submit(struct tecore_svc_job **active);          /* submits what fits; 1 if any */
int te_svc_io_reap(void);                                      /* completions seen */
int te_svc_io_wait(long ns);     /* sleeps until a completion; 0: no I/O in flight */
void te_svc_io_timeouts(struct tecore_svc_job *active);
int te_svc_poll(struct tecore_svc_job *active);                 /* polls; 1 if one finished */

#endif
