/* SPDX-License-Identifier: Apache-2.0 */
/* offload_ctx.c -- an activation-offload context's life (te/offload.h):
 * the configuration and its tunables, the pinned pool (allocated once,
 * staging buffers carved from its top), the copy streams, the spill files
 * (io_uring probed first; O_DIRECT where the file system takes it; the
 * pool registered with the service engine), failure reporting and the
 * statistics. */
#define _GNU_SOURCE 1   /* O_DIRECT */
#include "offload_internal.h"
#include "te_handles.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The offload tunables (te/tunable.h's public macro, as every libte
 * tunable is registered) */
TECORE_TUNABLE_INT(tg_offload_host_mb, "TEGRAPH_OFFLOAD_HOST_MB", 1024, 1, 1 << 24,
                   "libtegraph: MiB of pinned host memory an offload context holds when its "
                   "configuration's host_budget is 0 (past it, tensors spill to files)")
TECORE_TUNABLE_INT(tg_offload_min_elems, "TEGRAPH_OFFLOAD_MIN_ELEMS", 262144, 1,
                   (int64_t)1 << 40,
                   "libtegraph: tensors with fewer elements stay on the device when the "
                   "offload configuration's min_elems is 0 (TE's threshold: 256K)")
TECORE_TUNABLE_INT(tg_offload_staging_mb, "TEGRAPH_OFFLOAD_STAGING_MB", 8, 1, 4096,
                   "libtegraph: MiB of each of an offload context's four spill staging "
                   "buffers when the configuration's staging_bytes is 0")
TECORE_TUNABLE_INT(tg_offload_no_uring, "TEGRAPH_OFFLOAD_NO_URING", 0, 0, 1,
                   "libtegraph: 1 = act as if io_uring were missing (offload keeps "
                   "everything in host memory and says why): a test of the fallback")

static void free_pool(tegraph_offload_t *c) {
  if (!c->pool) return;
  if (c->pool_registered) {
    (void)tecore_mem_host_unregister(c->pool);
    free(c->pool);
  } else {
    (void)tecore_mem_free_host(c->pool);
  }
  c->pool = NULL;
}

static tegraph_result_t close_files(tegraph_offload_t *c) {
  for (size_t i = 0; i < c->nfiles; i++) {
    if (c->fds && c->fds[i] >= 0) close(c->fds[i]);
    if (c->paths && c->paths[i]) {
      unlink(c->paths[i]);
      free(c->paths[i]);
    }
  }
  free(c->fds);
  free(c->paths);
  c->fds = NULL;
  c->paths = NULL;
  c->nfiles = 0;
  return TEGRAPH_SUCCESS;
}

/* Opens the stripe files; c->spill = 1 on success, else why says why. */
static tegraph_result_t open_files(tegraph_offload_t *c, const char *fn) {
  const struct tegraph_offload_config *g = &c->cfg;
  int per = g->files_per_dir > 0 ? g->files_per_dir : 1;
  size_t n = g->ndirs * (size_t)per;
  c->fds = calloc(n, sizeof *c->fds);
  c->paths = calloc(n, sizeof *c->paths);
  if (!c->fds || !c->paths) return TG_ERR(TEGRAPH_ERR_NOMEM, "%s: out of host memory", fn);
  static unsigned serial;
  unsigned me = __atomic_add_fetch(&serial, 1, __ATOMIC_RELAXED);
  int direct = !(g->flags & TEGRAPH_OFFLOAD_NO_DIRECT), direct_refused = 0;
  for (size_t d = 0; d < g->ndirs; d++) {
    for (int k = 0; k < per; k++) {
      size_t i = c->nfiles;
      c->fds[i] = -1;
      char path[4096];
      int len = snprintf(path, sizeof path, "%s/te-offload.%d.%u.%d", g->dirs[d], (int)getpid(),
                         me, k);
      if (len < 0 || (size_t)len >= sizeof path)
        return TG_ERR(TEGRAPH_ERR_INVALID, "%s: cfg->dirs[%zu]: the path is too long", fn, d);
      c->paths[i] = strdup(path);
      if (!c->paths[i]) return TG_ERR(TEGRAPH_ERR_NOMEM, "%s: out of host memory", fn);
      int flags = O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC;
      int fd = direct ? open(path, flags | O_DIRECT, 0600) : -1;
      if (fd < 0 && direct && errno == EINVAL) {   /* tmpfs and others: no O_DIRECT */
        direct_refused = 1;
        fd = open(path, flags, 0600);
      } else if (fd < 0 && !direct) {
        fd = open(path, flags, 0600);
      }
      c->nfiles++;
      if (fd < 0)
        return TG_ERR(TEGRAPH_ERR_IO, "%s: cannot create the spill file %s: %s", fn, path,
                      strerror(errno));
      c->fds[i] = fd;
    }
  }
  c->spill = 1;
  struct tecore_svc_stats ss;
  int fixed = tecore_svc_get_stats(&ss) == TECORE_SUCCESS && ss.fixed_buffers;
  snprintf(c->why, sizeof c->why, "spill to %zu file%s in %zu director%s, %s, stripes of %zu "
           "KiB, staging 4 x %zu KiB%s", c->nfiles, c->nfiles == 1 ? "" : "s", g->ndirs,
           g->ndirs == 1 ? "y" : "ies", direct && !direct_refused ? "O_DIRECT" :
           direct_refused ? "buffered (the file system refused O_DIRECT)" : "buffered",
           c->stripe >> 10, c->stage_bytes >> 10, fixed ? ", fixed buffers" : "");
  return TEGRAPH_SUCCESS;
}

/* The largest stripe or staging buffer (1 GiB). */
#define TG_OFFLOAD_MAX_STRIPE ((size_t)1 << 30)

/* The checks of a configuration (out and cfg themselves aside). */
static tegraph_result_t check_config(const struct tegraph_offload_config *cfg, const char *fn) {
  TG_ARG(cfg->prefetch >= 0 && cfg->prefetch <= 64, "%s: cfg->prefetch %d is not in 0..64", fn,
         cfg->prefetch);
  TG_ARG(cfg->ndirs == 0 || cfg->dirs, "%s: cfg->dirs is NULL but ndirs is %zu", fn, cfg->ndirs);
  TG_ARG(cfg->ndirs <= 64, "%s: cfg->ndirs %zu is more than 64", fn, cfg->ndirs);
  for (size_t d = 0; d < cfg->ndirs; d++)
    TG_ARG(cfg->dirs[d] && cfg->dirs[d][0], "%s: cfg->dirs[%zu] is NULL or empty", fn, d);
  TG_ARG(cfg->files_per_dir >= 0 && cfg->files_per_dir <= 64,
         "%s: cfg->files_per_dir %d is not in 0..64", fn, cfg->files_per_dir);
  TG_ARG(cfg->stripe_bytes % 4096 == 0, "%s: cfg->stripe_bytes %zu is not a multiple of 4096",
         fn, cfg->stripe_bytes);
  /* sizes past these would wrap the staging buffers' addresses */
  TG_ARG(cfg->stripe_bytes <= TG_OFFLOAD_MAX_STRIPE,
         "%s: cfg->stripe_bytes %zu is more than %zu", fn, cfg->stripe_bytes,
         (size_t)TG_OFFLOAD_MAX_STRIPE);
  TG_ARG(cfg->staging_bytes <= TG_OFFLOAD_MAX_STRIPE,
         "%s: cfg->staging_bytes %zu is more than %zu", fn, cfg->staging_bytes,
         (size_t)TG_OFFLOAD_MAX_STRIPE);
  size_t stripe = cfg->stripe_bytes ? cfg->stripe_bytes : (size_t)1 << 20;
  TG_ARG(cfg->staging_bytes % stripe == 0,
         "%s: cfg->staging_bytes %zu is not a multiple of the stripe (%zu bytes)", fn,
         cfg->staging_bytes, stripe);
  TG_ARG(cfg->host_budget <= (size_t)1 << 50, "%s: cfg->host_budget %zu is too large", fn,
         cfg->host_budget);
  TG_ARG(!(cfg->flags & ~TEGRAPH_OFFLOAD_NO_DIRECT), "%s: cfg->flags 0x%x has unknown bits", fn,
         cfg->flags);
  return TEGRAPH_SUCCESS;
}

/* Whether c spills (*want_spill: spill directories given and io_uring
 * usable; else c->why says why not) and, when it does, the size of its
 * four staging buffers, which come out of the host budget. */
static tegraph_result_t plan_spill(tegraph_offload_t *c, const struct tegraph_offload_config *cfg,
                                   int *want_spill, const char *fn) {
  int uring = 0;
  *want_spill = cfg->ndirs > 0;
  if (*want_spill) {
    const char *why = NULL;
    TG_CHECK(tegraph_uring_probe(&uring, &why));
    if (tecore_tunable_int(&tg_offload_no_uring)) {
      uring = 0;
      why = "TEGRAPH_OFFLOAD_NO_URING=1";
    }
    if (!uring) {
      *want_spill = 0;
      snprintf(c->why, sizeof c->why, "no spill: %s; tensors past the host budget stay on the "
               "device", why);
      tecore_log(TECORE_LOG_WARN, TECORE_SUBSYS_OFFLOAD, __FILE__, __LINE__, "%s: %s", fn,
                 c->why);
    }
  } else {
    snprintf(c->why, sizeof c->why, "no spill directory: tensors past the host budget stay on "
             "the device");
  }
  if (!*want_spill) return TEGRAPH_SUCCESS;
  size_t st = cfg->staging_bytes ? cfg->staging_bytes
                                 : (size_t)tecore_tunable_int(&tg_offload_staging_mb) << 20;
  if (st % c->stripe) st = (st / c->stripe + 1) * c->stripe;
  /* the staging buffers come out of the budget; a default size leaves at
   * least half of it for tensors */
  while (!cfg->staging_bytes && 4 * st > c->pool_bytes / 2 && st > c->stripe)
    st = st / 2 / c->stripe * c->stripe;
  if (st < c->stripe) st = c->stripe;
  if (4 * st > c->pool_bytes)
    return TG_ERR(TEGRAPH_ERR_INVALID, "%s: a host budget of %zu bytes cannot hold 4 staging "
                  "buffers of a stripe (%zu bytes) for spilling", fn, c->pool_bytes, c->stripe);
  c->stage_bytes = st;
  return TEGRAPH_SUCCESS;
}

/* The pinned pool of c->pool_bytes, its device address, and the staging
 * buffers at its end.  Ordinary pages, page-locked by the driver: io_uring
 * can register them and O_DIRECT can pin them (memory the driver maps
 * itself may refuse both); the driver's own pinned allocation if
 * registration fails. */
static tegraph_result_t alloc_pool(tegraph_offload_t *c, const char *fn) {
  tecore_result_t r;
  if (posix_memalign((void **)&c->pool, 4096, c->pool_bytes) == 0) {
    r = tecore_mem_host_register(c->pool, c->pool_bytes, TECORE_HOST_REGISTER_MAPPED);
    if (r == TECORE_SUCCESS) {
      c->pool_registered = 1;
    } else {
      free(c->pool);
      c->pool = NULL;
      tecore_clear_error();
    }
  }
  if (!c->pool) {
    r = tecore_mem_alloc_host(c->pool_bytes, (void **)&c->pool);
    if (r != TECORE_SUCCESS) return tg_core(r, "tegraph_offload_create: the pinned pool");
  }
  TG_CORE(tecore_mem_host_device_ptr(c->pool, &c->pool_d), fn);
  c->host_cap = c->pool_bytes - 4 * c->stage_bytes;
  for (int k = 0; k < 4 && c->stage_bytes; k++)
    c->stage[k] = c->pool + c->host_cap + (size_t)k * c->stage_bytes;
  return TEGRAPH_SUCCESS;
}

/* The pool registered with the service engine and the spill files open
 * (cfg->dirs read now, not kept). */
static tegraph_result_t open_spill(tegraph_offload_t *c, const struct tegraph_offload_config *cfg,
                                   const char *fn) {
  TG_CORE(tecore_svc_register_buffer(c->pool, c->pool_bytes, &c->buf_index), fn);
  c->cfg.dirs = cfg->dirs;
  tegraph_result_t res = open_files(c, fn);
  c->cfg.dirs = NULL;
  return res;
}

TE_EXPORT tegraph_result_t tegraph_offload_create(const struct tegraph_offload_config *cfg,
                                                  tegraph_offload_t **out) {
  static const char fn[] = "tegraph_offload_create";
  TG_ARG(out, "%s: ctx is NULL", fn);
  *out = NULL;
  TG_ARG(cfg, "%s: cfg is NULL", fn);
  TG_CHECK(check_config(cfg, fn));
  tegraph_offload_t *c = calloc(1, sizeof *c);
  if (!c) return TG_ERR(TEGRAPH_ERR_NOMEM, "%s: out of host memory", fn);
  c->cfg = *cfg;
  c->cfg.dirs = NULL;   /* not kept: the files are opened now */
  c->buf_index = -1;
  c->min_elems = cfg->min_elems ? cfg->min_elems
                                : (size_t)tecore_tunable_int(&tg_offload_min_elems);
  c->prefetch = cfg->prefetch ? cfg->prefetch : 1;
  c->pool_bytes = cfg->host_budget ? cfg->host_budget
                                   : (size_t)tecore_tunable_int(&tg_offload_host_mb) << 20;
  c->pool_bytes = (c->pool_bytes + 4095) & ~(size_t)4095;
  c->stripe = cfg->stripe_bytes ? cfg->stripe_bytes : (size_t)1 << 20;
  int want_spill = 0;
  tegraph_result_t res = plan_spill(c, cfg, &want_spill, fn);
  if (res == TEGRAPH_SUCCESS) res = alloc_pool(c, fn);
  if (res == TEGRAPH_SUCCESS && want_spill) res = open_spill(c, cfg, fn);
  if (res != TEGRAPH_SUCCESS) goto fail;
  tecore_result_t r = tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &c->d2h);
  if (r == TECORE_SUCCESS) r = tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &c->h2d);
  if (r == TECORE_SUCCESS) r = tecore_event_create(TECORE_EVENT_DISABLE_TIMING, &c->tail);
  if (r != TECORE_SUCCESS) {
    res = tg_core(r, fn);
    goto fail;
  }
  if (te_handle_add(c) != 0) {
    res = TG_ERR(TEGRAPH_ERR_NOMEM, "%s: out of host memory", fn);
    goto fail;
  }
  *out = c;
  return TEGRAPH_SUCCESS;
fail:
  close_files(c);
  if (c->buf_index >= 0) (void)tecore_svc_unregister_buffer(c->buf_index);
  if (c->tail) (void)tecore_event_destroy(c->tail);
  if (c->d2h) (void)tecore_stream_destroy(c->d2h);
  if (c->h2d) (void)tecore_stream_destroy(c->h2d);
  free_pool(c);
  free(c);
  return res;
}

/* A context that failed already reported it (the restore, the
 * sequence's pass or tegraph_offload_check that found it returned it, and
 * each later call repeats it): its streams keep that error (an illegal
 * address of the copy that failed), so what destroy meets on the way out
 * is the same failure again, not news.  Logged, not returned: the context
 * is freed whole and destroy succeeds. */
static tegraph_result_t destroy_failed(tegraph_offload_t *c, tegraph_result_t res,
                                       tecore_result_t sync, const char *fn) {
  char why[256] = "";
  if (res != TEGRAPH_SUCCESS || sync != TECORE_SUCCESS)
    snprintf(why, sizeof why, "; on the way out: %s", tecore_last_error());
  tecore_log(TECORE_LOG_INFO, TECORE_SUBSYS_OFFLOAD, __FILE__, __LINE__,
             "%s: the context had failed (%s): %s%s; freed whole", fn,
             tegraph_result_name(c->failed), c->failmsg, why);
  tecore_clear_error();
  return TEGRAPH_SUCCESS;
}

TE_EXPORT tegraph_result_t tegraph_offload_destroy(tegraph_offload_t *c) {
  static const char fn[] = "tegraph_offload_destroy";
  TG_CHECK(ol_live(c, fn));
  /* a sequence destroyed first left nothing to wait for or to detach */
  (void)ol_seq_forget_gone(c, fn);
  /* a forward's tensors out: the backward would read freed memory */
  TG_CHECK(ol_seq_idle(c, fn));
  /* from here everything goes, whatever fails (the first failure is
   * returned): a context whose restore failed is still freed whole */
  const int failed = c->failed != TEGRAPH_SUCCESS;
  tegraph_result_t res = TEGRAPH_SUCCESS;
  if (c->sq) res = tegraph_offload_detach(c);
  tecore_result_t r1 = tecore_stream_synchronize(c->d2h);
  tecore_result_t r2 = tecore_stream_synchronize(c->h2d);
  if (failed) {
    res = destroy_failed(c, res, r1 != TECORE_SUCCESS ? r1 : r2, fn);
  } else {
    if (res == TEGRAPH_SUCCESS && r1 != TECORE_SUCCESS) res = tg_core(r1, fn);
    if (res == TEGRAPH_SUCCESS && r2 != TECORE_SUCCESS) res = tg_core(r2, fn);
  }
  tegraph_result_t rr = ol_saves_free(c);
  if (res == TEGRAPH_SUCCESS && !failed) res = rr;
  if (c->sq) ol_seq_drop(c);
  te_handle_del(c);
  free(c->saves);
  close_files(c);
  if (c->buf_index >= 0) (void)tecore_svc_unregister_buffer(c->buf_index);
  (void)tecore_event_destroy(c->tail);
  (void)tecore_stream_destroy(c->d2h);
  (void)tecore_stream_destroy(c->h2d);
  free_pool(c);
  free(c);
  return res;
}

TE_EXPORT tegraph_result_t tegraph_offload_check(tegraph_offload_t *c) {
  TG_CHECK(ol_live(c, "tegraph_offload_check"));
  if (c->failed == TEGRAPH_SUCCESS) {
    for (size_t i = 0; i < c->nsaves && c->failed == TEGRAPH_SUCCESS; i++)
      (void)ol_xfer_check(c, &c->saves[i].x);
    if (c->failed == TEGRAPH_SUCCESS) (void)ol_seq_check(c);
  }
  if (c->failed != TEGRAPH_SUCCESS)
    return TG_ERR(c->failed, "tegraph_offload_check: %s", c->failmsg);
  return TEGRAPH_SUCCESS;
}

TE_EXPORT tegraph_result_t tegraph_offload_get_stats(tegraph_offload_t *c,
                                                     struct tegraph_offload_stats *st) {
  TG_CHECK(ol_live(c, "tegraph_offload_get_stats"));
  TG_ARG(st, "tegraph_offload_get_stats: st is NULL");
  memset(st, 0, sizeof *st);
  st->spill = c->spill;
  snprintf(st->why, sizeof st->why, "%s", c->why);
  st->pool_bytes = c->pool_bytes;
  st->host_bytes = c->host_used;
  st->file_bytes = (size_t)c->file_used;
  st->saves_to_host = c->saves_host;
  st->saves_to_files = c->saves_files;
  if (c->sq) {
    st->ring_bytes = (size_t)c->sq->K * c->sq->slot_bytes;
    st->seq_bytes_before = c->sq->before;
    st->seq_bytes_after = c->sq->after;
    st->offloaded = c->sq->offloaded;
    st->kept = c->sq->kept;
    st->pass_to_host = c->sq->pass_host;
    st->pass_to_files = c->sq->pass_files;
  }
  return TEGRAPH_SUCCESS;
}
