/* SPDX-License-Identifier: Apache-2.0 */
/* vdev_util.c -- the vdev backend's plumbing: a u64 hash map, sorted index
 * sets, the registry of live refcounted objects, completion markers, and
 * the exit flag that keeps process exit from waiting on streams. */
#include "vdev/vdev.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

atomic_int te_vdev_exiting;

/* Streams may still have queued work at exit (nobody destroyed them):
 * their workers are not joined; this flag only makes pending waits give up
 * so no thread spins while the process tears down. */
__attribute__((destructor)) static void vdev_at_exit(void) {
  atomic_store(&te_vdev_exiting, 1);
}

/* ---- hash map -------------------------------------------------------------- */

static size_t map_hash(uint64_t k, size_t cap) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  return (size_t)k & (cap - 1);
}

void *te_vdev_map_get(const struct vdev_map *m, uint64_t key) {
  if (!m->cap || !key) return NULL;
  for (size_t i = map_hash(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
    if (m->keys[i] == key) return m->vals[i];
    if (m->keys[i] == 0) return NULL;
  }
}

static int map_grow(struct vdev_map *m) {
  size_t ncap = m->cap ? m->cap * 2 : 64;
  uint64_t *nk = calloc(ncap, sizeof *nk);
  void **nv = calloc(ncap, sizeof *nv);
  if (!nk || !nv) {
    free(nk);
    free(nv);
    return -1;
  }
  for (size_t i = 0; i < m->cap; i++) {
    if (!m->keys[i]) continue;
    size_t j = map_hash(m->keys[i], ncap);
    while (nk[j]) j = (j + 1) & (ncap - 1);
    nk[j] = m->keys[i];
    nv[j] = m->vals[i];
  }
  free(m->keys);
  free(m->vals);
  m->keys = nk;
  m->vals = nv;
  m->cap = ncap;
  return 0;
}

int te_vdev_map_put(struct vdev_map *m, uint64_t key, void *val) {
  if (!key) return -1;
  if ((m->count + 1) * 4 > m->cap * 3 && map_grow(m) != 0) return -1; /* load <= 3/4 */
  size_t i = map_hash(key, m->cap);
  while (m->keys[i] && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
  if (!m->keys[i]) m->count++;
  m->keys[i] = key;
  m->vals[i] = val;
  return 0;
}

/* Backward-shift deletion: no tombstones, so lookups stay short. */
void *te_vdev_map_del(struct vdev_map *m, uint64_t key) {
  if (!m->cap || !key) return NULL;
  size_t i = map_hash(key, m->cap);
  while (m->keys[i] != key) {
    if (!m->keys[i]) return NULL;
    i = (i + 1) & (m->cap - 1);
  }
  void *val = m->vals[i];
  size_t mask = m->cap - 1;
  for (size_t j = (i + 1) & mask; m->keys[j]; j = (j + 1) & mask) {
    size_t home = map_hash(m->keys[j], m->cap);
    /* move j back into the hole at i unless its home lies in (i, j] */
    int stays = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
    if (!stays) {
      m->keys[i] = m->keys[j];
      m->vals[i] = m->vals[j];
      i = j;
    }
  }
  m->keys[i] = 0;
  m->vals[i] = NULL;
  m->count--;
  return val;
}

/* ---- sorted index sets ----------------------------------------------------- */

int te_vdev_deps_add(struct vdev_deps *d, size_t x) {
  size_t lo = 0, hi = d->n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (d->v[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  if (lo < d->n && d->v[lo] == x) return 0;
  if (d->n == d->cap) {
    size_t ncap = d->cap ? d->cap * 2 : 4;
    size_t *nv = realloc(d->v, ncap * sizeof *nv);
    if (!nv) return -1;
    d->v = nv;
    d->cap = ncap;
  }
  memmove(d->v + lo + 1, d->v + lo, (d->n - lo) * sizeof *d->v);
  d->v[lo] = x;
  d->n++;
  return 0;
}

int te_vdev_deps_union(struct vdev_deps *d, const struct vdev_deps *src) {
  for (size_t i = 0; i < src->n; i++)
    if (te_vdev_deps_add(d, src->v[i]) != 0) return -1;
  return 0;
}

int te_vdev_deps_copy(struct vdev_deps *dst, const struct vdev_deps *src) {
  dst->n = 0;
  return te_vdev_deps_union(dst, src);
}

int te_vdev_deps_equal(const struct vdev_deps *a, const struct vdev_deps *b) {
  return a->n == b->n && (a->n == 0 || memcmp(a->v, b->v, a->n * sizeof *a->v) == 0);
}

void te_vdev_deps_free(struct vdev_deps *d) {
  free(d->v);
  *d = (struct vdev_deps){0};
}

/* ---- object registry --------------------------------------------------------- */

static const uint32_t kind_magic[] = {
    [VDEV_KIND_STREAM] = 0x7653544dU, /* "vSTM" */
    [VDEV_KIND_EVENT] = 0x76455654U,  /* "vEVT" */
    [VDEV_KIND_GRAPH] = 0x76475250U,  /* "vGRP" */
    [VDEV_KIND_EXEC] = 0x76455845U,   /* "vEXE" */
};
#define VDEV_MAGIC_DEAD 0xdeadbeefU

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t marker_lock = PTHREAD_MUTEX_INITIALIZER; /* see markers below */
static struct vdev_map reg_objs;

/* The memory of destroyed objects, kept a while before free (a FIFO):
 * an object's address is its handle, and memory reused at once would turn
 * a stale handle into a live object of someone else (a library's internal
 * event, say), which the driver does too; vdev keeps the stale handle
 * dead for the next VDEV_QUARANTINE destructions, so its misuse is
 * refused as INVALID instead of reaching another owner's object. */
#define VDEV_QUARANTINE 1024
static pthread_mutex_t quar_lock = PTHREAD_MUTEX_INITIALIZER;
static void *quar[VDEV_QUARANTINE];
static unsigned quar_next;

void te_vdev_obj_free_memory(void *p) {
  pthread_mutex_lock(&quar_lock);
  void *old = quar[quar_next];
  quar[quar_next] = p;
  quar_next = (quar_next + 1) % VDEV_QUARANTINE;
  pthread_mutex_unlock(&quar_lock);
  free(old);
}

static void quarantine_fini(void) {
  pthread_mutex_lock(&quar_lock);
  for (unsigned i = 0; i < VDEV_QUARANTINE; i++) {
    free(quar[i]);
    quar[i] = NULL;
  }
  pthread_mutex_unlock(&quar_lock);
}

/* The registry, marker and quarantine locks across fork (see vdev_fork.c). */
void te_vdev_registry_fork(enum vdev_fork_phase phase) {
  if (phase == VDEV_FORK_PREPARE) {
    pthread_mutex_lock(&reg_lock);
    pthread_mutex_lock(&marker_lock);
    pthread_mutex_lock(&quar_lock);
  } else {
    pthread_mutex_unlock(&quar_lock);
    pthread_mutex_unlock(&marker_lock);
    pthread_mutex_unlock(&reg_lock);
  }
}

static const char *te_vdev_kind_name(enum vdev_kind kind) {
  switch (kind) {
  case VDEV_KIND_STREAM: return "stream";
  case VDEV_KIND_EVENT: return "event";
  case VDEV_KIND_GRAPH: return "graph";
  case VDEV_KIND_EXEC: return "graph exec";
  }
  return "object";
}

void te_vdev_obj_init(struct vdev_obj *o, enum vdev_kind kind,
                      void (*destroy)(struct vdev_obj *)) {
  o->magic = kind_magic[kind];
  o->kind = kind;
  atomic_init(&o->refs, 1);
  o->destroy = destroy;
}

tecore_result_t te_vdev_obj_register(struct vdev_obj *o) {
  pthread_mutex_lock(&reg_lock);
  int rc = te_vdev_map_put(&reg_objs, (uint64_t)(uintptr_t)o, o);
  pthread_mutex_unlock(&reg_lock);
  if (rc != 0) return TE_ERR(TECORE_ERR_NOMEM, "vdev: out of memory registering a %s",
                             te_vdev_kind_name(o->kind));
  return TECORE_SUCCESS;
}

struct vdev_obj *te_vdev_obj_get(const void *handle, enum vdev_kind kind) {
  if (!handle) return NULL;
  pthread_mutex_lock(&reg_lock);
  struct vdev_obj *o = te_vdev_map_get(&reg_objs, (uint64_t)(uintptr_t)handle);
  if (o && (o->kind != (uint32_t)kind || o->magic != kind_magic[kind])) o = NULL;
  if (o) atomic_fetch_add(&o->refs, 1);
  pthread_mutex_unlock(&reg_lock);
  return o;
}

int te_vdev_obj_unregister(struct vdev_obj *o) {
  pthread_mutex_lock(&reg_lock);
  int was = te_vdev_map_del(&reg_objs, (uint64_t)(uintptr_t)o) != NULL;
  pthread_mutex_unlock(&reg_lock);
  return was;
}

/* tecore_fini: the table goes (objects still registered are the caller's:
 * events, graphs and executables never destroyed). */
void te_vdev_registry_fini(void) {
  quarantine_fini();
  pthread_mutex_lock(&reg_lock);
  free(reg_objs.keys);
  free(reg_objs.vals);
  memset(&reg_objs, 0, sizeof reg_objs);
  pthread_mutex_unlock(&reg_lock);
}

void te_vdev_obj_ref(struct vdev_obj *o) { atomic_fetch_add(&o->refs, 1); }

void te_vdev_obj_unref(struct vdev_obj *o) {
  if (!o) return;
  if (atomic_fetch_sub(&o->refs, 1) == 1) {
    o->magic = VDEV_MAGIC_DEAD;
    o->destroy(o);
  }
}

/* ---- completion markers -------------------------------------------------------
 * One process-wide condition variable serves every marker: waits are rare
 * (event synchronize, cross-stream waits) and a broadcast per completion is
 * cheap next to the work a stream op does. */

static pthread_cond_t marker_cv = PTHREAD_COND_INITIALIZER;

struct vdev_marker *te_vdev_marker_new(void) {
  struct vdev_marker *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  atomic_init(&m->refs, 1);
  atomic_init(&m->done, 0);
  m->gen = atomic_load(&te_vdev_fork_gen);
  return m;
}

void te_vdev_marker_ref(struct vdev_marker *m) { atomic_fetch_add(&m->refs, 1); }

void te_vdev_marker_unref(struct vdev_marker *m) {
  if (m && atomic_fetch_sub(&m->refs, 1) == 1) free(m);
}

void te_vdev_marker_complete(struct vdev_marker *m) {
  m->t_ns = te_now_ns();
  pthread_mutex_lock(&marker_lock);
  atomic_store_explicit(&m->done, 1, memory_order_release);
  pthread_cond_broadcast(&marker_cv);
  pthread_mutex_unlock(&marker_lock);
}

int te_vdev_marker_done(const struct vdev_marker *m) {
  return atomic_load_explicit(&m->done, memory_order_acquire) ||
         m->gen != atomic_load(&te_vdev_fork_gen);
}

void te_vdev_marker_wait(struct vdev_marker *m) {
  if (te_vdev_marker_done(m)) return;
  pthread_mutex_lock(&marker_lock);
  while (!atomic_load_explicit(&m->done, memory_order_acquire) &&
         !atomic_load(&te_vdev_exiting)) {
    /* timed, so the exit flag (set without the lock) is seen */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&marker_cv, &marker_lock, &ts);
  }
  pthread_mutex_unlock(&marker_lock);
}
