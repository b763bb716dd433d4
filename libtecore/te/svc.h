/* SPDX-License-Identifier: Apache-2.0 */
/* te/svc.h -- the service engine: host work that device streams wait for.
 *
 * One thread per process, with one io_uring, runs jobs that streams hand
 * it: file reads and writes (activation offload's spill to files, through
 * registered buffers) and host callbacks.  A job is made once and launched
 * any number of times:
 *
 *   tecore_svc_job_launch(job, s)  queues a write of the job's ticket to its
 *                                  go word (pinned, device-mapped host
 *                                  memory: tecore_stream_write_value64);
 *   the engine sees it, clears go, runs the job's operations, then writes
 *                                  the ticket to the job's done word;
 *   tecore_svc_job_wait(job, s)    queues a wait for done == ticket
 *                                  (tecore_stream_wait_value64) and a reset
 *                                  of done to 0.
 *
 * Both are stream memory operations, legal inside a stream capture: a
 * graph that captured a launch and a wait hands the engine the same job at
 * every replay.  Nothing here waits on the host for the device or for I/O.
 *
 * Every wait is bounded.  An operation that fails (an errno, a short read
 * or write, a callback's error) or runs past TECORE_SVC_TIMEOUT_MS still
 * completes the job -- the engine writes done, so the stream goes on -- and
 * leaves the job a sticky error: tecore_svc_job_status, the next launch
 * and tecore_svc_job_wait return it, with a detail that names the
 * operation (its name: e.g. the file and the tensor).  A failed read
 * leaves its buffer filled with 0xff bytes (NaN in every float format),
 * never stale data.  On the device side a stream's wait is bounded by the
 * backend (vdev: TECORE_VDEV_WAIT_TIMEOUT).
 *
 * The engine idles without burning a core: after work it polls for
 * TECORE_SVC_SPIN_US, then sleeps with intervals that double up to
 * TECORE_SVC_MAX_SLEEP_US (an eventfd wakes it at once when a job is
 * launched from the host or tecore_svc_kick is called).  It starts with
 * the first job or registered buffer and stops when the last is gone.
 * Without io_uring (an old kernel, seccomp, io_uring_disabled) reads and
 * writes run with pread/pwrite on the engine thread; tecore_svc_get_stats
 * says which and why.
 *
 * Threads: the functions are thread-safe; one job is launched on one
 * stream at a time, each launch followed by its wait before the next.
 * After fork() the child has no engine and its parent's jobs are invalid. */
#ifndef TE_SVC_H
#define TE_SVC_H

#include <stddef.h>
#include <stdint.h>
#include <te/result.h>
#include <te/device.h>
#include <te/deprecated.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tecore_svc_job tecore_svc_job_t;

typedef enum tecore_svc_op_kind {
  TECORE_SVC_READ = 1,    /* read bytes at offset of fd into buf */
  TECORE_SVC_WRITE = 2,   /* write bytes of buf to fd at offset */
  TECORE_SVC_CALL = 3,    /* fn(arg) on the engine thread */
  TECORE_SVC_POLL = 4     /* fn(arg) on the engine thread at every pass of its loop
                             until it returns other than TECORE_ERR_NOT_READY */
} tecore_svc_op_kind_t;

/* One operation of a job.  A job's reads and writes run concurrently (up
 * to TECORE_SVC_QUEUE_DEPTH in flight); its calls run first, in order,
 * when the job starts.  A call must not wait for a stream that waits for
 * this job.  A poll is work that progresses by itself (a network
 * transfer): the engine calls it once per pass of its loop, between its
 * other jobs, and the op is done when it returns TECORE_SUCCESS (or an
 * error, which fails the job); TECORE_ERR_NOT_READY means "call again".
 * A poll must return at once: a call that blocks holds up every job. */
struct tecore_svc_op {
  tecore_svc_op_kind_t kind;
  int fd;                              /* READ/WRITE: open file (O_DIRECT allowed) */
  void *buf;                           /* READ/WRITE: host memory */
  size_t bytes;                        /* READ/WRITE: > 0 */
  uint64_t offset;
  int buf_index;                       /* a registered buffer holding buf .. buf + bytes, or -1 */
  tecore_result_t (*fn)(void *arg);    /* CALL, POLL */
  void *arg;
  const char *name;                    /* what the op moves, for errors (copied; may be NULL) */
};

/* Makes a job of nops (1 .. 4096) operations (copied).  Starts the engine
 * if needed.  Allocates its two flag words in pinned host memory. */
tecore_result_t tecore_svc_job_create(const struct tecore_svc_op *ops, size_t nops,
                                      tecore_svc_job_t **job);
/* Frees the job.  TECORE_ERR_NOT_READY (and nothing freed) while an eager
 * launch has not completed; a job launched from a graph must not be
 * destroyed while the graph may still replay.  Stops the engine when it was
 * the last job and no buffer is registered. */
tecore_result_t tecore_svc_job_destroy(tecore_svc_job_t *job);
/* Queues on stream the hand-off of one run of job.  Returns the job's
 * sticky error, if any, instead. */
tecore_result_t tecore_svc_job_launch(tecore_svc_job_t *job, tecore_stream_t stream);
/* Queues on stream the wait for the run launched last.  Returns the job's
 * sticky error, if any (the wait is still queued). */
tecore_result_t tecore_svc_job_wait(tecore_svc_job_t *job, tecore_stream_t stream);
/* tecore_svc_job_launch then tecore_svc_job_wait on the same stream. */
tecore_result_t tecore_svc_job_enqueue(tecore_svc_job_t *job, tecore_stream_t stream);
/* The job's sticky error (TECORE_SUCCESS if none) and how many runs the
 * engine completed (*runs may be NULL).  Never waits. */
tecore_result_t tecore_svc_job_status(tecore_svc_job_t *job, uint64_t *runs);

/* Registers host memory (page-locked: tecore_mem_alloc_host) with the
 * engine's io_uring as a fixed buffer; *index (>= 0) is the registration.
 * READ/WRITE operations naming it move data without pinning pages per
 * call, where the ring has fixed buffers (tecore_svc_get_stats: fixed_buffers,
 * and the registration did not exceed RLIMIT_MEMLOCK; else they are plain
 * reads and writes, logged once).  Starts the engine if needed; the
 * engine lives while a registration does. */
tecore_result_t tecore_svc_register_buffer(void *buf, size_t bytes, int *index);
tecore_result_t tecore_svc_unregister_buffer(int index);

/* Wakes the engine now (e.g. after launching a graph that hands it work):
 * it polls at once instead of finishing its current sleep. */
tecore_result_t tecore_svc_kick(void);

struct tecore_svc_stats {
  int running;                /* the engine thread exists */
  int uring;                  /* 1: io_uring; 0: pread/pwrite (why says why) */
  int fixed_buffers;          /* 1: registered buffers available */
  char why[160];
  uint64_t runs, ops, errors, wakeups;
  uint64_t bytes_read, bytes_written;
  double up_s;                /* seconds since the engine started */
  double busy_s;              /* seconds with work in hand (running a job) */
  double cpu_s;               /* CPU seconds the engine thread used */
};
/* What the engine did since it started (zeros when it is not running). */
tecore_result_t tecore_svc_get_stats(struct tecore_svc_stats *st);
#if TE_DEPRECATED_NAMES_VISIBLE
/* Deprecated former name of tecore_svc_get_stats (te/deprecated.h). */
tecore_result_t tecore_svc_stats(struct tecore_svc_stats *st)
    TE_DEPRECATED("use tecore_svc_get_stats");
#endif

/* Whether the engine can use io_uring here: *supported 1, or 0 with the
 * reason in *why (a static string; may be NULL): liburing.so.2 missing
 * (it is loaded at run time), no io_uring in the kernel, disabled by
 * kernel.io_uring_disabled or seccomp.  Sets up and tears down a small
 * ring; an answer of 0 is not an error. */
tecore_result_t tecore_svc_uring_probe(int *supported, const char **why);

/* Debug: the nth (1 = next) READ or WRITE operation to start from now
 * fails with -err (e.g. EIO) without touching the file; nth 0 cancels.
 * TECORE_SVC_FAULT ("read:N:ERRNO" or "write:N:ERRNO") sets one at
 * engine start. */
tecore_result_t tecore_svc_inject_fault(tecore_svc_op_kind_t kind, unsigned nth, int err);

#ifdef __cplusplus
}
#endif
#endif
