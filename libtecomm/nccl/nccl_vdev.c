/* SPDX-License-Identifier: Apache-2.0 */
/* nccl_vdev.c -- NCCL for the vdev backend: the entry points libtecomm
 * takes from libnccl.so.2 (struct tc_nccl), written for ranks that are
 * processes on one machine, so that the NCCL link of the chain, the NCCL
 * baseline of te-demo --tp and a failure inside NCCL's initialisation run
 * in CI as they do on a GPU machine.
 *
 * What it keeps of NCCL's contract:
 *   - a unique id made on one rank and carried by the caller's bootstrap;
 *     a communicator exists once every rank has joined it;
 *   - blocking and non-blocking communicators (ncclConfig_t.blocking): a
 *     non-blocking init returns ncclInProgress and completes in the
 *     background, seen through ncclCommGetAsyncError; the first
 *     collective of a non-blocking communicator returns ncclInProgress
 *     too, as NCCL's runtime connection does;
 *   - collectives are stream-ordered device work: each is one vdev kernel
 *     launch on the caller's stream (so it is captured into graphs and
 *     replayed like any kernel), and the calls of one communicator run in
 *     the order they were issued on every rank;
 *   - ncclCommAbort ends a collective that waits for a peer.
 * Where NCCL would wait for a dead or missing peer forever, this one gives
 * up after TECOMM_TIMEOUT (or at once when the peer's process is gone)
 * and sets ncclRemoteError as the communicator's asynchronous error; the
 * receive buffer is then undefined.
 *
 * Transport: one memfd per communicator, made by ncclGetUniqueId and
 * opened by every rank through /proc/PID/fd/FD (the unique id carries the
 * maker's pid, fd and a nonce).  It holds a header (each rank's pid, join
 * state and barrier counter) and one staging slot per rank.  A collective
 * moves its data a slot at a time: each rank copies its part into its
 * slot, all meet at a barrier, each reduces every slot in rank order into
 * its output (so every rank gets the same bits), and all meet again
 * before the slots are reused.  SUM and MAX accumulate in float and round
 * once into the element type. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "nccl.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <te/kernel.h>
#include "comm_priv.h"
#include "common/convert.h"

/* ncclResult_t values */
enum {
  NV_OK = 0,
  NV_SYSTEM = 2,
  NV_INTERNAL = 3,
  NV_INVALID_ARG = 4,
  NV_INVALID_USAGE = 5,
  NV_REMOTE = 6,
  NV_IN_PROGRESS = 7
};

#define NV_VERSION 22800              /* the NCCL 2.28 API */
#define NV_MAX_RANKS 64
#define NV_SLOT ((size_t)1 << 20)     /* staging bytes per rank and step */
#define NV_HDR ((size_t)8192)
#define NV_BYTES (NV_HDR + NV_MAX_RANKS * NV_SLOT) /* sparse: untouched slots cost nothing */
#define NV_ID_MAGIC 0x6c63636e76646576ull /* "vdevnccl" */
#define NV_CONFIG_MAGIC 0xcafebeefu

/* A rank's record in the segment, a cache line each. */
enum { NV_JOINED = 1, NV_GONE = 2 };
struct nv_rank {
  int32_t pid;
  uint32_t state;    /* bits: NV_JOINED, then NV_GONE (destroyed or aborted) */
  uint64_t arrive;   /* the last barrier this rank reached */
  char pad[48];
};
struct nv_shm {
  uint64_t magic, nonce;
  int32_t nranks;    /* set by the first rank to join */
  char pad[44];
  struct nv_rank r[NV_MAX_RANKS];
};
_Static_assert(sizeof(struct nv_shm) <= NV_HDR, "nv_shm must fit the header");

/* What travels in ncclUniqueId. */
struct nv_uid {
  uint64_t magic, nonce;
  uint64_t host;   /* tc_machine_id() of the maker */
  int32_t pid, fd;
};
_Static_assert(sizeof(struct nv_uid) <= sizeof(tc_nccl_uid_t), "nv_uid must fit ncclUniqueId");

/* The head of ncclConfig_t, every version's. */
struct nv_config {
  size_t size;
  unsigned magic, version;
  int blocking;
};

struct nv_comm {
  uint64_t id;                /* the registry's key, what kernels carry */
  struct nv_comm *next;
  int rank, nranks, blocking;
  int fd, owner_fd;           /* owner_fd: the id's memfd when this process made it */
  struct nv_shm *shm;
  int async;                  /* ncclCommGetAsyncError's answer (atomic) */
  int joined_all;             /* every rank joined (init complete) */
  int connect_pending;        /* the first collective's emulated connection */
  int aborted;                /* atomic: running collectives quit */
  int deaf;                   /* TECOMM_TEST_FAIL=nccl-deaf: notices no dead peer, no timeout */
  int running;                /* kernels inside the communicator (under nv_lock) */
  uint64_t seq;               /* barriers passed (under mu) */
  pthread_mutex_t mu;         /* one collective at a time, as NCCL orders them */
};

static pthread_mutex_t nv_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t nv_idle = PTHREAD_COND_INITIALIZER;
static struct nv_comm *nv_live;
static uint64_t nv_next_id = 1;

/* memfds this process made in ncclGetUniqueId, until a comm takes one */
struct nv_owned {
  int fd;
  uint64_t nonce;
  struct nv_owned *next;
};
static struct nv_owned *nv_owned;

static int nv_kernel_id = -1;

/* ---- registry ------------------------------------------------------------------- */

static int nv_valid(const void *comm) {
  pthread_mutex_lock(&nv_lock);
  struct nv_comm *c = nv_live;
  while (c && c != comm) c = c->next;
  pthread_mutex_unlock(&nv_lock);
  return c != NULL;
}

/* The live communicator with this id, with its running count raised. */
static struct nv_comm *nv_acquire(uint64_t id) {
  pthread_mutex_lock(&nv_lock);
  struct nv_comm *c = nv_live;
  while (c && c->id != id) c = c->next;
  if (c) c->running++;
  pthread_mutex_unlock(&nv_lock);
  return c;
}

static void nv_release(struct nv_comm *c) {
  pthread_mutex_lock(&nv_lock);
  if (--c->running == 0) pthread_cond_broadcast(&nv_idle);
  pthread_mutex_unlock(&nv_lock);
}

/* Out of the registry (no kernel finds it any more), once none runs in it. */
static void nv_unlist(struct nv_comm *c) {
  pthread_mutex_lock(&nv_lock);
  struct nv_comm **pp = &nv_live;
  while (*pp && *pp != c) pp = &(*pp)->next;
  if (*pp) *pp = c->next;
  while (c->running > 0) pthread_cond_wait(&nv_idle, &nv_lock);
  pthread_mutex_unlock(&nv_lock);
}

static void nv_free(struct nv_comm *c) {
  if (c->shm) {
    if (c->rank >= 0) __atomic_or_fetch(&c->shm->r[c->rank].state, NV_GONE, __ATOMIC_RELEASE);
    munmap(c->shm, NV_BYTES);
  }
  if (c->fd >= 0) close(c->fd);
  if (c->owner_fd >= 0) close(c->owner_fd);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

/* ---- waiting for peers ---------------------------------------------------------- */

static int64_t nv_now_ms(void) { return tc_now_ms(); }

/* Is rank r's process gone (exited, killed, or a zombie not yet reaped)? */
static int nv_dead(int32_t pid) {
  if (pid <= 0) return 0;
  if (kill(pid, 0) != 0 && errno == ESRCH) return 1;
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 1;
  buf[n] = '\0';
  const char *p = strrchr(buf, ')'); /* "pid (comm) S ..." */
  return p && (p[2] == 'Z' || p[2] == 'X');
}

static void nv_set_async(struct nv_comm *c, int code) {
  int want = NV_IN_PROGRESS, ok = NV_OK;
  /* an error replaces success or progress, never an earlier error */
  if (!__atomic_compare_exchange_n(&c->async, &ok, code, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
    (void)__atomic_compare_exchange_n(&c->async, &want, code, 0, __ATOMIC_SEQ_CST,
                                      __ATOMIC_SEQ_CST);
}

/* Between two polls of peer r: 0 to poll again, -1 when the wait is over
 * (the communicator's asynchronous error then says why). */
static int nv_poll(struct nv_comm *c, int r, int64_t deadline, int64_t *next_check,
                   const char *what) {
  if (__atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE)) {
    nv_set_async(c, NV_REMOTE);
    return -1;
  }
  int64_t now = nv_now_ms();
  if (!c->deaf && now >= *next_check) {
    *next_check = now + 20;
    const struct nv_rank *pr = &c->shm->r[r];
    const char *why = NULL;
    if (__atomic_load_n(&pr->state, __ATOMIC_ACQUIRE) & NV_GONE)
      why = "destroyed or aborted its communicator";
    else if (nv_dead(__atomic_load_n(&pr->pid, __ATOMIC_ACQUIRE)))
      why = "is gone (its process ended)";
    else if (now > deadline)
      why = "did not arrive within TECOMM_TIMEOUT";
    if (why) {
      TC_WARN("vdev NCCL: rank %d of %d: %s: rank %d %s", c->rank, c->nranks, what, r, why);
      nv_set_async(c, NV_REMOTE);
      return -1;
    }
  }
  sched_yield();
  return 0;
}

/* Every rank reached barrier k (this rank's next). */
static int nv_barrier(struct nv_comm *c, const char *what) {
  uint64_t k = ++c->seq;
  __atomic_store_n(&c->shm->r[c->rank].arrive, k, __ATOMIC_RELEASE);
  int64_t deadline = nv_now_ms() + tc_timeout_ms(), next = 0;
  for (int r = 0; r < c->nranks; r++) {
    if (r == c->rank) continue;
    while (__atomic_load_n(&c->shm->r[r].arrive, __ATOMIC_ACQUIRE) < k)
      if (nv_poll(c, r, deadline, &next, what)) return -1;
  }
  return 0;
}

/* Has every rank joined?  Checks the missing ones once (no waiting). */
static int nv_joined_all(struct nv_comm *c) {
  if (c->joined_all) return 1;
  for (int r = 0; r < c->nranks; r++)
    if (!(__atomic_load_n(&c->shm->r[r].state, __ATOMIC_ACQUIRE) & NV_JOINED)) {
      int32_t pid = __atomic_load_n(&c->shm->r[r].pid, __ATOMIC_ACQUIRE);
      if ((__atomic_load_n(&c->shm->r[r].state, __ATOMIC_ACQUIRE) & NV_GONE) || nv_dead(pid)) {
        TC_WARN("vdev NCCL: rank %d of %d: init: rank %d left before joining", c->rank,
                c->nranks, r);
        nv_set_async(c, NV_REMOTE);
      }
      return 0;
    }
  c->joined_all = 1;
  if (c->owner_fd >= 0) { /* every rank has the segment open: the id is spent */
    close(c->owner_fd);
    c->owner_fd = -1;
  }
  return 1;
}

/* ---- the collective kernel -------------------------------------------------------- */

/* kind: NV_ALLREDUCE, NV_REDUCE_SCATTER (count: the block each rank
 * keeps), NV_ALLGATHER (count: each rank's block) */
enum { NV_ALLREDUCE, NV_REDUCE_SCATTER, NV_ALLGATHER };
struct nv_params {
  uint64_t comm_id, count;
  int32_t dtype, op, kind, pad_;
};

static size_t nv_esz(int dtype) {
  switch (dtype) {
  case TC_NCCL_FLOAT16: case TC_NCCL_BFLOAT16: return 2;
  case TC_NCCL_FLOAT32: return 4;
  case TC_NCCL_UINT8: return 1;
  default: return 0;
  }
}

static float nv_load(const void *p, size_t i, int dtype) {
  const uint16_t *h = p;
  switch (dtype) {
  case TC_NCCL_FLOAT16: return te_f16_to_f32(h[i]);
  case TC_NCCL_BFLOAT16: return te_bf16_to_f32(h[i]);
  default: return ((const float *)p)[i];
  }
}

static void nv_store(void *p, size_t i, int dtype, float v) {
  uint16_t *h = p;
  switch (dtype) {
  case TC_NCCL_FLOAT16: h[i] = te_f32_to_f16(v); break;
  case TC_NCCL_BFLOAT16: h[i] = te_f32_to_bf16(v); break;
  default: ((float *)p)[i] = v;
  }
}

/* Allreduce over the ranks' send, count elements; reduce-scatter is the
 * same over the nranks blocks of send, each rank storing only the
 * elements of its own block (recv at its start). */
static void nv_allreduce(struct nv_comm *c, const struct nv_params *p, const char *send,
                         char *recv) {
  const int rs = p->kind == NV_REDUCE_SCATTER;
  const size_t esz = nv_esz(p->dtype), per = NV_SLOT / esz;
  const uint64_t total = rs ? p->count * (uint64_t)c->nranks : p->count;
  const uint64_t lo = rs ? p->count * (uint64_t)c->rank : 0, hi = rs ? lo + p->count : total;
  char *mine = (char *)c->shm + NV_HDR + (size_t)c->rank * NV_SLOT;
  for (uint64_t off = 0; off < total; off += per) {
    size_t n = total - off < per ? (size_t)(total - off) : per;
    memcpy(mine, send + off * esz, n * esz);
    if (nv_barrier(c, "allreduce")) return;
    for (size_t i = 0; i < n; i++) {
      if (off + i < lo || off + i >= hi) continue;
      float acc = nv_load((char *)c->shm + NV_HDR, i, p->dtype);
      for (int r = 1; r < c->nranks; r++) {
        float v = nv_load((char *)c->shm + NV_HDR + (size_t)r * NV_SLOT, i, p->dtype);
        if (p->op == TC_NCCL_MAX) acc = isnan(acc) || isnan(v) ? NAN : v > acc ? v : acc;
        else acc += v;
      }
      nv_store(recv + (off - lo) * esz, i, p->dtype, acc);
    }
    if (nv_barrier(c, "allreduce")) return;
  }
}

/* All-gather: each rank's count elements into its slot of every recv, a
 * staging slot at a time. */
static void nv_allgather(struct nv_comm *c, const struct nv_params *p, const char *send,
                         char *recv) {
  const size_t bytes = p->count * nv_esz(p->dtype);
  char *mine = (char *)c->shm + NV_HDR + (size_t)c->rank * NV_SLOT;
  for (size_t off = 0; off < bytes; off += NV_SLOT) {
    size_t n = bytes - off < NV_SLOT ? bytes - off : NV_SLOT;
    memcpy(mine, send + off, n);
    if (nv_barrier(c, "allgather")) return;
    for (int r = 0; r < c->nranks; r++)
      memcpy(recv + (size_t)r * bytes + off, (char *)c->shm + NV_HDR + (size_t)r * NV_SLOT, n);
    if (nv_barrier(c, "allgather")) return;
  }
}

/* The kernel: args[0] struct nv_params, args[1] send, args[2] recv.  A
 * node replayed after its communicator was destroyed finds none and does
 * nothing; so does a collective on a communicator that failed before. */
static void nv_kernel(const struct tecore_launch_cfg *cfg, void *const *args) {
  (void)cfg;
  const struct nv_params *p = args[0];
  const char *send = (const char *)(uintptr_t)*(const uint64_t *)args[1];
  char *recv = (char *)(uintptr_t)*(const uint64_t *)args[2];
  struct nv_comm *c = nv_acquire(p->comm_id);
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  int a = __atomic_load_n(&c->async, __ATOMIC_ACQUIRE);
  if (a == NV_OK || a == NV_IN_PROGRESS) {
    if (p->kind == NV_ALLGATHER) nv_allgather(c, p, send, recv);
    else nv_allreduce(c, p, send, recv);
  }
  pthread_mutex_unlock(&c->mu);
  nv_release(c);
}

static const struct tecore_kernel_def nv_defs[1] = {
    {.name = "te_comm_nccl_vdev",
     .vdev = nv_kernel,
     .nparams = 3,
     .param_size = {sizeof(struct nv_params), 8, 8},
     .param_is_ptr = {0, TECORE_KERNEL_PTR_NONNULL, TECORE_KERNEL_PTR_NONNULL}},
};
static const struct tecore_kernel_table nv_table = {
    .module = "libtecomm/nccl-vdev", .count = 1, .kernels = nv_defs};
static pthread_once_t nv_once = PTHREAD_ONCE_INIT;

static void nv_register(void) {
  if (tecore_kernel_table_register(&nv_table, &nv_kernel_id) != TECORE_SUCCESS) nv_kernel_id = -1;
}

/* ---- the entry points ------------------------------------------------------------ */

static int nv_get_version(int *version) {
  if (!version) return NV_INVALID_ARG;
  *version = NV_VERSION;
  return NV_OK;
}

static const char *nv_error_string(int result) {
  static const char *const s[] = {"no error", "unhandled cuda error", "unhandled system error",
                                  "internal error", "invalid argument", "invalid usage",
                                  "remote process exited or there was a network error",
                                  "NCCL operation in progress"};
  return result >= 0 && result < (int)(sizeof s / sizeof s[0]) ? s[result] : "unknown result code";
}

static int nv_get_unique_id(tc_nccl_uid_t *id) {
  if (!id) return NV_INVALID_ARG;
  struct nv_owned *o = calloc(1, sizeof *o);
  if (!o) return NV_SYSTEM;
  int fd = memfd_create("te-nccl-vdev", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, (off_t)NV_BYTES) != 0) {
    if (fd >= 0) close(fd);
    free(o);
    return NV_SYSTEM;
  }
  struct nv_shm *h = mmap(NULL, sizeof *h, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (h == MAP_FAILED) {
    close(fd);
    free(o);
    return NV_SYSTEM;
  }
  uint64_t nonce = ((uint64_t)getpid() << 32) ^ (uint64_t)nv_now_ms() ^ (uint64_t)(uintptr_t)o;
  h->nonce = nonce;
  __atomic_store_n(&h->magic, NV_ID_MAGIC, __ATOMIC_RELEASE);
  munmap(h, sizeof *h);
  o->fd = fd;
  o->nonce = nonce;
  pthread_mutex_lock(&nv_lock);
  o->next = nv_owned;
  nv_owned = o;
  pthread_mutex_unlock(&nv_lock);
  memset(id, 0, sizeof *id);
  struct nv_uid u = {NV_ID_MAGIC, nonce, tc_machine_id(), (int32_t)getpid(), fd};
  memcpy(id->internal, &u, sizeof u);
  return NV_OK;
}

/* The memfd this process made for nonce, taken out of the list (-1: none). */
static int nv_take_owned(uint64_t nonce) {
  int fd = -1;
  pthread_mutex_lock(&nv_lock);
  for (struct nv_owned **pp = &nv_owned; *pp; pp = &(*pp)->next)
    if ((*pp)->nonce == nonce) {
      struct nv_owned *o = *pp;
      *pp = o->next;
      fd = o->fd;
      free(o);
      break;
    }
  pthread_mutex_unlock(&nv_lock);
  return fd;
}

static int nv_init_config(tc_nccl_comm_t *comm, int nranks, tc_nccl_uid_t id, int rank,
                          const void *config) {
  if (!comm) return NV_INVALID_ARG;
  *comm = NULL;
  if (nranks < 1 || nranks > NV_MAX_RANKS || rank < 0 || rank >= nranks) return NV_INVALID_ARG;
  struct nv_uid u;
  memcpy(&u, id.internal, sizeof u);
  if (u.magic != NV_ID_MAGIC || u.pid <= 0 || u.fd < 0) return NV_INVALID_ARG;
  if (u.host != tc_machine_id()) {
    /* /proc/PID/fd/FD names another machine's file here */
    TC_WARN("vdev NCCL: rank %d: the unique id was made on another machine", rank);
    return NV_SYSTEM;
  }
  int blocking = 1;
  if (config) {
    const struct nv_config *cf = config;
    if (cf->magic != NV_CONFIG_MAGIC || cf->size < sizeof *cf) return NV_INVALID_ARG;
    if (cf->blocking != INT_MIN) blocking = cf->blocking != 0;
  }
  pthread_once(&nv_once, nv_register);
  if (nv_kernel_id < 0) return NV_INTERNAL;
  struct nv_comm *c = calloc(1, sizeof *c);
  if (!c) return NV_SYSTEM;
  c->rank = -1;
  c->fd = c->owner_fd = -1;
  pthread_mutex_init(&c->mu, NULL);
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)u.pid, (int)u.fd);
  c->fd = open(path, O_RDWR | O_CLOEXEC);
  if (c->fd < 0) {
    TC_WARN("vdev NCCL: rank %d: the unique id's segment (%s) does not open: %s", rank, path,
            strerror(errno));
    nv_free(c);
    return NV_SYSTEM;
  }
  if (u.pid == getpid()) c->owner_fd = nv_take_owned(u.nonce);
  struct stat st;
  if (fstat(c->fd, &st) != 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size != NV_BYTES) {
    /* not the segment (its maker is gone and the numbers were reused) */
    nv_free(c);
    return NV_INVALID_ARG;
  }
  void *m = mmap(NULL, NV_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, c->fd, 0);
  if (m == MAP_FAILED) {
    nv_free(c);
    return NV_SYSTEM;
  }
  c->shm = m;
  if (__atomic_load_n(&c->shm->magic, __ATOMIC_ACQUIRE) != NV_ID_MAGIC || c->shm->nonce != u.nonce) {
    nv_free(c);
    return NV_INVALID_ARG;
  }
  int32_t none = 0;
  if (!__atomic_compare_exchange_n(&c->shm->nranks, &none, nranks, 0, __ATOMIC_SEQ_CST,
                                   __ATOMIC_SEQ_CST) && none != nranks) {
    TC_WARN("vdev NCCL: rank %d: nranks %d, but the communicator has %d", rank, nranks, none);
    nv_free(c);
    return NV_INVALID_USAGE;
  }
  struct nv_rank *me = &c->shm->r[rank];
  int32_t nopid = 0;
  if (!__atomic_compare_exchange_n(&me->pid, &nopid, (int32_t)getpid(), 0, __ATOMIC_SEQ_CST,
                                   __ATOMIC_SEQ_CST)) {
    TC_WARN("vdev NCCL: rank %d joined the communicator twice", rank);
    nv_free(c);
    return NV_INVALID_USAGE;
  }
  c->rank = rank;
  c->nranks = nranks;
  c->blocking = blocking;
  c->async = NV_IN_PROGRESS;
  /* TECOMM_TEST_FAIL=nccl-deaf:R: rank R's collectives wait for a peer
   * until an abort, as libnccl.so.2's kernels may (the watchdog's test) */
  c->deaf = tc_test_fail("nccl-deaf", rank);
  /* TECOMM_TEST_FAIL=nccl-init:R: rank R stalls inside its init (it never
   * joins), as a rank whose ncclCommInitRank hangs would */
  if (!tc_test_fail("nccl-init", rank)) __atomic_or_fetch(&me->state, NV_JOINED, __ATOMIC_RELEASE);
  pthread_mutex_lock(&nv_lock);
  c->id = nv_next_id++;
  c->next = nv_live;
  nv_live = c;
  pthread_mutex_unlock(&nv_lock);
  if (blocking) {
    /* NCCL would wait here forever for a missing rank; this one gives up
     * as a non-blocking init would be given up */
    int64_t deadline = nv_now_ms() + tc_nccl_init_timeout_ms();
    while (!nv_joined_all(c) && __atomic_load_n(&c->async, __ATOMIC_ACQUIRE) == NV_IN_PROGRESS) {
      if (nv_now_ms() > deadline) {
        TC_WARN("vdev NCCL: rank %d of %d: init: not every rank joined within "
                "TECOMM_NCCL_INIT_TIMEOUT",
                rank, nranks);
        nv_set_async(c, NV_REMOTE);
        break;
      }
      usleep(200);
    }
    int a = __atomic_load_n(&c->async, __ATOMIC_ACQUIRE);
    if (a != NV_IN_PROGRESS && a != NV_OK) {
      nv_unlist(c);
      nv_free(c);
      return a;
    }
    c->async = NV_OK;
    *comm = c;
    return NV_OK;
  }
  *comm = c;
  if (nv_joined_all(c)) {
    int ip = NV_IN_PROGRESS;
    __atomic_compare_exchange_n(&c->async, &ip, NV_OK, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  }
  int a = __atomic_load_n(&c->async, __ATOMIC_ACQUIRE);
  return a;
}

static int nv_init_rank(tc_nccl_comm_t *comm, int nranks, tc_nccl_uid_t id, int rank) {
  return nv_init_config(comm, nranks, id, rank, NULL);
}

static int nv_get_async_error(tc_nccl_comm_t comm, int *result) {
  if (!result || !nv_valid(comm)) return NV_INVALID_ARG;
  struct nv_comm *c = comm;
  if (__atomic_load_n(&c->async, __ATOMIC_ACQUIRE) == NV_IN_PROGRESS) {
    int done = nv_joined_all(c);
    if (done && __atomic_load_n(&c->connect_pending, __ATOMIC_ACQUIRE) == 1) {
      /* the emulated connection of the first collective completes on the
       * poll after the one that saw the communicator made */
      __atomic_store_n(&c->connect_pending, 2, __ATOMIC_RELEASE);
    } else if (done) {
      int ip = NV_IN_PROGRESS;
      __atomic_compare_exchange_n(&c->async, &ip, NV_OK, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    }
  }
  *result = __atomic_load_n(&c->async, __ATOMIC_ACQUIRE);
  return NV_OK;
}

static int nv_comm_count(tc_nccl_comm_t comm, int *count) {
  if (!count || !nv_valid(comm)) return NV_INVALID_ARG;
  *count = ((struct nv_comm *)comm)->nranks;
  return NV_OK;
}

static int nv_comm_user_rank(tc_nccl_comm_t comm, int *rank) {
  if (!rank || !nv_valid(comm)) return NV_INVALID_ARG;
  *rank = ((struct nv_comm *)comm)->rank;
  return NV_OK;
}

static int nv_comm_abort(tc_nccl_comm_t comm) {
  if (!comm) return NV_OK;
  if (!nv_valid(comm)) return NV_INVALID_ARG;
  struct nv_comm *c = comm;
  __atomic_store_n(&c->aborted, 1, __ATOMIC_RELEASE);
  nv_unlist(c);
  nv_free(c);
  return NV_OK;
}

static int nv_comm_destroy(tc_nccl_comm_t comm) {
  if (!comm) return NV_INVALID_ARG;
  if (!nv_valid(comm)) return NV_INVALID_ARG;
  struct nv_comm *c = comm;
  nv_unlist(c);
  nv_free(c);
  return NV_OK;
}

/* The checks and the launch of an allreduce. */
static int nv_launch(struct nv_params *p, const void *send, void *recv, tc_nccl_comm_t comm,
                     tecore_stream_t stream) {
  if (!nv_valid(comm)) return NV_INVALID_ARG;
  struct nv_comm *c = comm;
  if (nv_esz(p->dtype) == 0) return NV_INVALID_ARG;
  if (p->op != TC_NCCL_SUM && p->op != TC_NCCL_MAX) return NV_INVALID_ARG;
  int a = __atomic_load_n(&c->async, __ATOMIC_ACQUIRE);
  if (a != NV_OK && a != NV_IN_PROGRESS) return a;
  if (a == NV_IN_PROGRESS && !c->joined_all) return NV_INVALID_USAGE; /* init not complete */
  if (p->count == 0) return NV_OK;
  if (!send || !recv) return NV_INVALID_ARG;
  p->comm_id = c->id;
  uint64_t s = (uint64_t)(uintptr_t)send, r = (uint64_t)(uintptr_t)recv;
  void *args[3] = {p, &s, &r};
  struct tecore_launch_cfg cfg = {{1, 1, 1}, {1, 1, 1}, 0};
  if (tecore_kernel_launch(nv_kernel_id, &cfg, args, stream) != TECORE_SUCCESS) {
    TC_WARN("vdev NCCL: launch refused: %s", tecore_last_error());
    return NV_INVALID_ARG;
  }
  /* a non-blocking communicator connects at its first collective, which
   * returns ncclInProgress (the operation is enqueued all the same) */
  if (!c->blocking && __atomic_load_n(&c->connect_pending, __ATOMIC_ACQUIRE) == 0) {
    __atomic_store_n(&c->connect_pending, 1, __ATOMIC_RELEASE);
    int ok = NV_OK;
    __atomic_compare_exchange_n(&c->async, &ok, NV_IN_PROGRESS, 0, __ATOMIC_SEQ_CST,
                                __ATOMIC_SEQ_CST);
    return NV_IN_PROGRESS;
  }
  return NV_OK;
}

static int nv_all_reduce(const void *send, void *recv, size_t count, int dtype, int op,
                         tc_nccl_comm_t comm, tecore_stream_t stream) {
  struct nv_params p = {0, count, dtype, op, NV_ALLREDUCE, 0};
  return nv_launch(&p, send, recv, comm, stream);
}

static int nv_reduce_scatter(const void *send, void *recv, size_t count, int dtype, int op,
                             tc_nccl_comm_t comm, tecore_stream_t stream) {
  struct nv_params p = {0, count, dtype, op, NV_REDUCE_SCATTER, 0};
  return nv_launch(&p, send, recv, comm, stream);
}

static int nv_all_gather(const void *send, void *recv, size_t count, int dtype,
                         tc_nccl_comm_t comm, tecore_stream_t stream) {
  struct nv_params p = {0, count, dtype, TC_NCCL_SUM, NV_ALLGATHER, 0};
  return nv_launch(&p, send, recv, comm, stream);
}

void tc_nccl_vdev_fill(struct tc_nccl *n) {
  memset(n, 0, sizeof *n);
  n->GetVersion = nv_get_version;
  n->GetUniqueId = nv_get_unique_id;
  n->CommInitRank = nv_init_rank;
  n->CommInitRankConfig = nv_init_config;
  n->CommDestroy = nv_comm_destroy;
  n->CommAbort = nv_comm_abort;
  n->CommCount = nv_comm_count;
  n->CommUserRank = nv_comm_user_rank;
  n->CommGetAsyncError = nv_get_async_error;
  n->GetErrorString = nv_error_string;
  n->AllReduce = nv_all_reduce;
  n->ReduceScatter = nv_reduce_scatter;
  n->AllGather = nv_all_gather;
  /* the bootstrap over a caller's NCCL communicator has no communicator
   * of vdev's to be given */
  n->emulated = 1;
  (void)nv_get_version(&n->version);
}
