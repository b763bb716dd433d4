/* mnnvl.c -- the MNNVL link of the fallback chain: ranks on several nodes
 * of one NVLink domain (GB200 NVL72-like systems) reach each other's
 * memory through fabric handles; the IPC Lamport allreduce then runs over
 * the imported workspaces.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Collective over the caller's bootstrap (there is no local mesh across
 * nodes), each step voted (tc_vote) so all ranks fall back together:
 *   1. availability: TECOMM_MNNVL_ENABLE / NCCL_MNNVL_ENABLE not 0, at
 *      most TC_AR_MAX_RANKS ranks, the kernels, on cuda an IMEX
 *      channel (/dev/nvidia-caps-imex-channels);
 *   2. every rank makes its workspace exportable as a fabric handle and
 *      exports it (cuda: fails without fabric support or IMEX);
 *   3. the 64-byte handles go through the bootstrap's allgather;
 *   4. every rank imports and maps the peers' workspaces in a helper
 *      thread and waits for it at most TECOMM_MNNVL_TIMEOUT ms: a host
 *      that advertises fabric support but whose IMEX daemon never answers
 *      must not hang the job; a rank that gave up votes no, and every
 *      rank falls back (the abandoned thread releases what it made when
 *      it finishes);
 *   5. the workspaces are initialised, then a barrier.
 * vdev emulates fabric handles across its "nodes" (processes given
 * different TECOMM_VDEV_NODE), so this path runs in CI. */
#include "level.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

TECORE_TUNABLE_INT(tc_tun_mnnvl_enable, "TECOMM_MNNVL_ENABLE", 1, 0, 1,
                   "0: never use multi-node NVLink (fabric handles) across nodes, as with "
                   "NCCL_MNNVL_ENABLE=0 (which is honoured too)")
TECORE_TUNABLE_INT(tc_tun_mnnvl_timeout, "TECOMM_MNNVL_TIMEOUT", 10000, 1, 3600000,
                   "milliseconds a rank may take to import and map its peers' fabric handles "
                   "before every rank gives up multi-node NVLink together")

struct tc_mnnvl {
  size_t bytes, stride;
  tecore_devptr_t va;                     /* every rank's workspace, rank r at va + r*stride */
  int nmapped;
  tecore_vmm_handle_t h[TC_AR_MAX_RANKS];
};

#define WHY(c) ((c)->lv_why[TC_LV_MNNVL])
static struct tc_mnnvl *state(const struct tecomm_comm *c) { return c->lv[TC_LV_MNNVL]; }

static void mn_free(struct tc_mnnvl *m, int n) {
  if (!m) return;
  for (int r = 0; r < m->nmapped; r++) (void)tecore_vmm_unmap(m->va + (size_t)r * m->stride, m->bytes);
  if (m->va) (void)tecore_vmm_free_va(m->va, (size_t)n * m->stride);
  for (int r = 0; r < n; r++)
    if (m->h[r]) (void)tecore_vmm_release(m->h[r]);
  free(m);
}

/* The import of step 4, run by a helper thread. */
struct mn_job {
  pthread_mutex_t lock;
  pthread_cond_t cv;
  int done, abandoned, ok;
  int rank, nranks, device, hang_ms;
  tecore_ctx_t ctx;
  size_t gran;
  struct tc_mnnvl *m;                     /* h[rank] made by the caller */
  struct tecore_fabric_handle fh[TC_AR_MAX_RANKS];
  char why[256];
};

static void *mn_import(void *arg) {
  struct mn_job *j = arg;
  struct tc_mnnvl *m = j->m;
  int ok = tecore_ctx_set_current(j->ctx) == TECORE_SUCCESS;
  if (!ok) snprintf(j->why, sizeof j->why, "context: %s", tecore_last_error());
  if (j->hang_ms > 0) usleep((useconds_t)j->hang_ms * 1000u); /* TECOMM_TEST_FAIL mnnvl-hang */
  for (int p = 0; ok && p < j->nranks; p++)
    if (p != j->rank && tecore_vmm_import_fabric(&j->fh[p], &m->h[p]) != TECORE_SUCCESS) {
      m->h[p] = 0;
      snprintf(j->why, sizeof j->why, "import of rank %d's fabric handle: %s", p, tecore_last_error());
      ok = 0;
    }
  if (ok && tecore_vmm_reserve((size_t)j->nranks * m->stride, j->gran, &m->va) != TECORE_SUCCESS) {
    m->va = 0;
    snprintf(j->why, sizeof j->why, "reserve: %s", tecore_last_error());
    ok = 0;
  }
  for (int p = 0; ok && p < j->nranks; p++) {
    tecore_devptr_t at = m->va + (size_t)p * m->stride;
    if (tecore_vmm_map(at, m->bytes, m->h[p], 0) != TECORE_SUCCESS) {
      snprintf(j->why, sizeof j->why, "map of rank %d: %s", p, tecore_last_error());
      ok = 0;
      break;
    }
    m->nmapped = p + 1;
    if (tecore_vmm_set_access(at, m->bytes, j->device) != TECORE_SUCCESS) {
      snprintf(j->why, sizeof j->why, "access to rank %d: %s", p, tecore_last_error());
      ok = 0;
    }
  }
  pthread_mutex_lock(&j->lock);
  j->ok = ok;
  j->done = 1;
  int abandoned = j->abandoned;
  pthread_cond_signal(&j->cv);
  pthread_mutex_unlock(&j->lock);
  if (abandoned) {
    /* the communicator gave up on this rank's import: nobody else will
     * ever look at what it made */
    mn_free(m, j->nranks);
    pthread_mutex_destroy(&j->lock);
    pthread_cond_destroy(&j->cv);
    free(j);
  }
  return NULL;
}

/* Runs the import with the deadline; 1 when done in time and ok.  On a
 * timeout the job (and m) belong to the thread from then on. */
static int import_bounded(struct mn_job *j, int64_t timeout_ms, int *timed_out) {
  pthread_t t;
  *timed_out = 0;
  if (pthread_create(&t, NULL, mn_import, j) != 0) {
    snprintf(j->why, sizeof j->why, "cannot start the import thread");
    return 0;
  }
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += (time_t)(timeout_ms / 1000);
  dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  if (dl.tv_nsec >= 1000000000L) dl.tv_sec++, dl.tv_nsec -= 1000000000L;
  pthread_mutex_lock(&j->lock);
  while (!j->done)
    if (pthread_cond_timedwait(&j->cv, &j->lock, &dl) != 0 && !j->done) break;
  int done = j->done, ok = j->ok;
  if (!done) j->abandoned = 1;
  pthread_mutex_unlock(&j->lock);
  if (done) {
    pthread_join(t, NULL);
    return ok;
  }
  pthread_detach(t);
  *timed_out = 1;
  return 0;
}

/* Step 1 on this rank. */
static int available(struct tecomm_comm *c, char *why, size_t len) {
  const char *v = getenv("NCCL_MNNVL_ENABLE");
  if (v && strcmp(v, "0") == 0) return snprintf(why, len, "refused (NCCL_MNNVL_ENABLE=0)"), 0;
  if (tecore_tunable_int(&tc_tun_mnnvl_enable) == 0)
    return snprintf(why, len, "refused (TECOMM_MNNVL_ENABLE=0)"), 0;
  if (c->nranks > TC_AR_MAX_RANKS)
    return snprintf(why, len, "%d ranks (the kernels reduce over at most %d)", c->nranks,
                    TC_AR_MAX_RANKS), 0;
  if (c->n_kernels != c->nranks) return snprintf(why, len, "no allreduce kernels"), 0;
  /* vdev's fabric joins only the nodes it plays (TECOMM_VDEV_NODE); ranks
   * split into hosts otherwise (TECOMM_NODE_MAP, separate guests) have no
   * NVLink between them */
  if (c->backend == TECORE_BACKEND_VDEV && tc_vdev_node() < 0)
    return snprintf(why, len, "vdev: no NVLink domain across these hosts (TECOMM_VDEV_NODE unset)"), 0;
  if (c->backend == TECORE_BACKEND_CUDA && access("/dev/nvidia-caps-imex-channels", F_OK) != 0)
    return snprintf(why, len, "no IMEX channel (/dev/nvidia-caps-imex-channels)"), 0;
  return 1;
}

static tecomm_result_t mnnvl_open(struct tecomm_comm *c, const struct tc_caps *all,
                                  tecore_stream_t st) {
  (void)all;
  if (c->all_local) {
    snprintf(WHY(c), sizeof WHY(c), "off (one host: IPC)");
    return TECOMM_SUCCESS;
  }
  char mine[256] = "", why[300] = "";
  int ok = 0, good = available(c, mine, sizeof mine);
  struct tc_boot *b = c->xchg;
  c->lv[TC_LV_MNNVL] = NULL;
  TC_CHECK(tc_vote(b, good, mine, &ok, why, sizeof why));
  if (!ok) goto off;
  /* 2: this rank's workspace, exportable across the fabric */
  size_t ws_max = c->ws.max_bytes;
  size_t need = (tc_ar_workspace_bytes(c->nranks, ws_max) + 255) / 256 * 256, g = 0;
  struct tc_mnnvl *m = calloc(1, sizeof *m);
  struct tecore_fabric_handle fh;
  memset(&fh, 0, sizeof fh);
  good = m != NULL && need > 0;
  if (!good) snprintf(mine, sizeof mine, "out of host memory");
  if (good && tecore_vmm_granularity(&g, 0) != TECORE_SUCCESS)
    good = 0, snprintf(mine, sizeof mine, "granularity: %s", tecore_last_error());
  if (good) {
    m->bytes = m->stride = (need + g - 1) / g * g;
    if (tc_test_fail("mnnvl", c->rank))
      good = 0, snprintf(mine, sizeof mine, "fabric export: TECOMM_TEST_FAIL");
    else if (tecore_vmm_create(m->bytes, TECORE_VMM_EXPORT_FABRIC, &m->h[c->rank]) != TECORE_SUCCESS)
      good = 0, m->h[c->rank] = 0, snprintf(mine, sizeof mine, "fabric allocation: %s",
                                            tecore_last_error());
    else if (tecore_vmm_export_fabric(m->h[c->rank], &fh) != TECORE_SUCCESS)
      good = 0, snprintf(mine, sizeof mine, "fabric export: %s", tecore_last_error());
  }
  tecomm_result_t r = tc_vote(b, good, mine, &ok, why, sizeof why);
  if (r != TECOMM_SUCCESS || !ok) {
    mn_free(m, c->nranks);
    TC_CHECK(r);
    goto off;
  }
  /* 3: the handles, through the bootstrap */
  struct mn_job *j = calloc(1, sizeof *j);
  if (!j) {
    mn_free(m, c->nranks);
    return TC_ERR(TECOMM_ERR_NOMEM, "tecomm_comm_init: out of host memory");
  }
  r = b->allgather(b, &fh, j->fh, sizeof fh);
  if (r != TECOMM_SUCCESS) {
    free(j);
    mn_free(m, c->nranks);
    return r;
  }
  /* 4: import and map, bounded */
  pthread_mutex_init(&j->lock, NULL);
  pthread_cond_init(&j->cv, NULL);
  j->rank = c->rank;
  j->nranks = c->nranks;
  j->device = c->device;
  j->gran = g;
  j->m = m;
  int64_t tmo = tecore_tunable_int(&tc_tun_mnnvl_timeout);
  j->hang_ms = tc_test_fail("mnnvl-hang", c->rank) ? (int)tmo + 500 : 0;
  (void)tecore_ctx_get_current(&j->ctx);
  int timed_out = 0;
  good = import_bounded(j, tmo, &timed_out);
  if (timed_out)
    snprintf(mine, sizeof mine, "importing the peers' fabric handles took more than "
             "TECOMM_MNNVL_TIMEOUT=%lld ms (is the IMEX daemon running?)", (long long)tmo);
  else if (!good)
    snprintf(mine, sizeof mine, "%s", j->why);
  if (!timed_out) {
    pthread_mutex_destroy(&j->lock);
    pthread_cond_destroy(&j->cv);
    free(j);
  } else {
    m = NULL; /* the thread's now */
  }
  r = tc_vote(b, good, mine, &ok, why, sizeof why);
  if (r == TECOMM_SUCCESS && ok) {
    /* 5: this rank's workspace words, then nobody writes into a peer's
     * before its owner initialised it */
    r = tc_core(tc_ar_workspace_init(m->va + (size_t)c->rank * m->stride, c->nranks, ws_max, st),
                "MNNVL workspace");
    if (r == TECOMM_SUCCESS) r = tc_core(tecore_stream_synchronize(st), "MNNVL workspace");
    if (r == TECOMM_SUCCESS) r = b->barrier(b);
  }
  if (r != TECOMM_SUCCESS || !ok) {
    tecomm_result_t br = r == TECOMM_SUCCESS ? b->barrier(b) : r;
    mn_free(m, c->nranks);
    TC_CHECK(br);
    if (r != TECOMM_SUCCESS) return r;
    goto off;
  }
  c->lv[TC_LV_MNNVL] = m;
  /* the kernel levels' workspace object: the imported ones */
  c->ws.me = m->va + (size_t)c->rank * m->stride;
  for (int p = 0; p < c->nranks; p++) c->ws.peer[p] = m->va + (size_t)p * m->stride;
  snprintf(WHY(c), sizeof WHY(c),
           "on (workspaces imported from fabric handles: Lamport up to %zu KiB)", ws_max >> 10);
  TC_INFO("tecomm: rank %d: MNNVL %s", c->rank, WHY(c));
  return TECOMM_SUCCESS;
off:
  snprintf(WHY(c), sizeof WHY(c), "off (%.300s)", why);
  TC_INFO("tecomm: MNNVL is off on every rank: %s", why);
  return TECOMM_SUCCESS;
}

static void mnnvl_close(struct tecomm_comm *c) {
  if (!state(c)) return;
  mn_free(state(c), c->nranks);
  c->lv[TC_LV_MNNVL] = NULL;
  c->ws.me = 0;
  memset(c->ws.peer, 0, sizeof c->ws.peer);
}

/* Why MNNVL cannot run the call ("" when it can). */
static const char *cannot(struct tecomm_comm *c, const struct tc_call_facts *f) {
  if (!state(c)) return "MNNVL is off";
  if (f->bytes > c->ws.max_bytes) return "larger than the Lamport buffers";
  if (!f->fused_lamport_ok) return "fused Lamport needs hidden % 8 == 0 and 16-byte alignment";
  return "";
}

/* The table across nodes (SUM and MAX): MNNVL up to the Lamport buffers;
 * lamport asked for by name across nodes is MNNVL's too. */
static tecomm_result_t mnnvl_pick(struct tecomm_comm *c, tecomm_algo_t asked,
                                  const struct tc_call_facts *f, tecomm_algo_t *algo) {
  const char *why = cannot(c, f);
  if (asked == TECOMM_ALGO_AUTO) {
    *algo = !*why ? TECOMM_ALGO_MNNVL : TECOMM_ALGO_AUTO;
    return TECOMM_SUCCESS;
  }
  if (*why && asked == TECOMM_ALGO_LAMPORT)
    return TC_ERR(TECOMM_ERR_NOT_SUPPORTED, "algorithm lamport across nodes cannot run %zu "
                  "bytes: %s", f->bytes, why);
  if (*why)
    return TC_ERR(TECOMM_ERR_NOT_SUPPORTED, "algorithm %s cannot run %zu bytes: %s (%s)",
                  tc_algo_name(asked), f->bytes, why, WHY(c));
  *algo = TECOMM_ALGO_MNNVL;
  return TECOMM_SUCCESS;
}

static void mnnvl_describe(struct tecomm_comm *c, struct tc_text *t) {
  if (c->all_local) return;
  tc_put(t, "mnnvl: %s\n", WHY(c)[0] ? WHY(c) : "off");
  if (state(c))
    tc_put(t, "table above the level (SUM and MAX): mnnvl <= %zu KiB\n", c->ws.max_bytes / 1024);
}

const struct tc_level tc_level_mnnvl = {
    .name = "mnnvl",
    .chain = "mnnvl (lamport)",
    .hosts = TC_ACROSS_HOSTS,
    .claims = TECOMM_ALGO_LAMPORT,
    .open = mnnvl_open,
    .close = mnnvl_close,
    .pick = mnnvl_pick,
    .run = tc_run_kernel,
    .describe = mnnvl_describe,
};
