/* SPDX-License-Identifier: Apache-2.0 */
/* svc_state.c -- the service engine's state and what both of its sides
 * do to it: the one engine of the process (te_svc) and its kick, the
 * flag words of the jobs (pairs in pages of pinned, device-mapped host
 * memory), and the end of a run (finish, fail) that the engine thread
 * reports.  The bottom of svc/: it calls only libtecore's device API;
 * svc_io.c, svc_engine.c (the thread) and svc_job.c (the API) stand on
 * it and on each other in that order. */
#include "svc/svc_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the engine ------------------------------------------------------------------ */

struct svc_engine te_svc = {
    .life = PTHREAD_MUTEX_INITIALIZER, .lock = PTHREAD_MUTEX_INITIALIZER, .efd = -1};

void te_svc_wake(void) {
  if (te_svc.efd < 0) return;
  uint64_t one = 1;
  ssize_t w = write(te_svc.efd, &one, sizeof one);
  (void)w;   /* a full counter still wakes the engine */
}

/* ---- flag words ------------------------------------------------------------------ */

/* A pair of flag words for job from the slabs (lock held). */
tecore_result_t te_svc_words_get(struct tecore_svc_job *job) {
  size_t base = 0;
  for (struct svc_slab *sl = te_svc.slabs; sl; sl = sl->next, base += SVC_SLAB_PAIRS) {
    for (size_t i = 0; i < SVC_SLAB_PAIRS; i++) {
      if (sl->used[i]) continue;
      sl->used[i] = 1;
      job->word = base + i;
      job->go = (_Atomic uint64_t *)((char *)sl->host + 16 * i);
      job->done = job->go + 1;
      job->go_d = sl->dev + 16 * i;
      job->done_d = job->go_d + 8;
      atomic_store(job->go, 0);
      atomic_store(job->done, 0);
      return TECORE_SUCCESS;
    }
  }
  struct svc_slab *sl = calloc(1, sizeof *sl);
  if (!sl) return TE_ERR(TECORE_ERR_NOMEM, "tecore_svc_job_create: out of host memory");
  tecore_result_t r = tecore_mem_alloc_host(SVC_SLAB_BYTES, &sl->host);
  if (r == TECORE_SUCCESS) r = tecore_mem_host_device_ptr(sl->host, &sl->dev);
  if (r != TECORE_SUCCESS) {
    te_error_hop(__func__, __FILE__, __LINE__);
    if (sl->host) (void)tecore_mem_free_host(sl->host);
    free(sl);
    return r;
  }
  memset(sl->host, 0, SVC_SLAB_BYTES);
  /* appended, so that the indices of the slabs before stay */
  struct svc_slab **pp = &te_svc.slabs;
  while (*pp) pp = &(*pp)->next;
  *pp = sl;
  return te_svc_words_get(job);
}

void te_svc_words_put(struct tecore_svc_job *job) {
  size_t base = 0;
  for (struct svc_slab *sl = te_svc.slabs; sl; sl = sl->next, base += SVC_SLAB_PAIRS)
    if (job->word >= base && job->word < base + SVC_SLAB_PAIRS) sl->used[job->word - base] = 0;
}

void te_svc_slabs_free(void) {
  while (te_svc.slabs) {
    struct svc_slab *sl = te_svc.slabs;
    te_svc.slabs = sl->next;
    (void)tecore_mem_free_host(sl->host);
    free(sl);
  }
}

/* ---- the engine's side ----------------------------------------------------------- */

void te_svc_job_fail(struct tecore_svc_job *job, tecore_result_t code, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  atomic_fetch_add(&te_svc.errors, 1);
  pthread_mutex_lock(&te_svc.lock);
  if (job->err == TECORE_SUCCESS) {   /* the first failure is the one reported */
    job->err = code;
    snprintf(job->errmsg, sizeof job->errmsg, "%s", msg);
  }
  pthread_mutex_unlock(&te_svc.lock);
  TE_LOG_ERROR(TECORE_SUBSYS_OFFLOAD, "service engine: %s", msg);
}

void te_svc_job_finish(struct tecore_svc_job *job) {
  pthread_mutex_lock(&te_svc.lock);
  job->state = SVC_IDLE;
  pthread_mutex_unlock(&te_svc.lock);
  atomic_fetch_add(&job->runs, 1);
  atomic_fetch_add(&te_svc.runs, 1);
  /* last: the stream may go on (and launch again) as soon as it sees this */
  atomic_store_explicit(job->done, job->ticket, memory_order_release);
}
