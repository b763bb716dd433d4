/* SPDX-License-Identifier: Apache-2.0
 * handles.c -- the live-handle registry of te_handles.h: a sorted array
 * of the pointers a library handed out and has not destroyed.  Compiled
 * into libtecore and into libtegraph, each with a registry of its own
 * (the symbols are hidden, -fvisibility=hidden). */
#include "config.h"
#include "te_handles.h"
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A sorted array of live pointers under one lock.  Lookups compare the
 * pointer value only: a destroyed object is never read. */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static const void **live;
static size_t nlive, caplive;

/* Index of the first entry >= p. */
static size_t live_lower(const void *p) {
  size_t lo = 0, hi = nlive;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if ((uintptr_t)live[mid] < (uintptr_t)p) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

int te_handle_add(const void *p) {
  pthread_mutex_lock(&live_lock);
  int rc = 0;
  if (nlive == caplive) {
    size_t ncap = caplive ? caplive * 2 : 32;
    const void **n = realloc(live, ncap * sizeof *n);
    if (!n) rc = -1;
    else {
      live = n;
      caplive = ncap;
    }
  }
  if (rc == 0) {
    size_t i = live_lower(p);
    memmove(&live[i + 1], &live[i], (nlive - i) * sizeof *live);
    live[i] = p;
    nlive++;
  }
  pthread_mutex_unlock(&live_lock);
  return rc;
}

int te_handle_del(const void *p) {
  pthread_mutex_lock(&live_lock);
  size_t i = live_lower(p);
  int was = i < nlive && live[i] == p;
  if (was) {
    memmove(&live[i], &live[i + 1], (nlive - i - 1) * sizeof *live);
    nlive--;
  }
  pthread_mutex_unlock(&live_lock);
  return was;
}

int te_handle_live(const void *p) {
  pthread_mutex_lock(&live_lock);
  size_t i = live_lower(p);
  int has = i < nlive && live[i] == p;
  pthread_mutex_unlock(&live_lock);
  return has;
}

/* tecore_fini: the table goes (objects still live are the caller's). */
void te_handles_fini(void) {
  pthread_mutex_lock(&live_lock);
  free(live);
  live = NULL;
  nlive = caplive = 0;
  pthread_mutex_unlock(&live_lock);
}
