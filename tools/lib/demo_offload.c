/* SPDX-License-Identifier: Apache-2.0 */
/* demo_offload.c -- te-demo's and te-gpt's --offload: an offload context sized for the
 * model's offloaded blocks (their saved tensors that the backward reads,
 * plus four staging buffers when spilling), attached to the model's
 * sequence block by block, and the figures te-demo prints: device memory
 * saved against the most offload can save, bytes moved to host and to
 * files per pass. */
#include "demo_offload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OPS_PER_BLOCK 6   /* te-demo's (mlp_block.h), when the caller names none */
#define STALL_BUDGET 0.03 /* the automatic prefetch accepts a modelled 3% step overhead */

/* ---- the automatic prefetch ----------------------------------------------------------
 * With K = prefetch + 1 ring slots, the first nb - K attached blocks leave
 * the device and block j's forward waits for block j - K's copy out (the
 * slot's reader); block j's backward waits for its reload, which starts
 * when block j + K's backward has freed the slot.  Copies in one direction
 * run one after another on their stream.  When a block's copy is longer
 * than its forward, a small K makes the forward wait on the link: the
 * model below replays that schedule with the plain run's per-block times
 * (forward a third of fwd+bwd) and the measured copy bandwidth, and picks
 * the smallest K, the most memory saved, whose modelled overhead is within
 * STALL_BUDGET. */

/* One microbatch's modelled stall (ms) with K slots; f: a block's forward
 * (backward 2f); d[j]: block j's copy (ms); layers - nb blocks follow
 * unattached. */
static double model_stall(int nb, int layers, int K, double f, const double *d) {
  int c = nb - K;   /* blocks copied */
  if (c <= 0) return 0;
  double out[1024], in[1024];
  double t = 0, link = 0;
  for (int j = 0; j < nb; j++) {
    if (j >= K && j - K < c && out[j - K] > t) t = out[j - K];
    t += f;
    if (j < c) {
      out[j] = (link > t ? link : t) + d[j];
      link = out[j];
    }
  }
  t += (layers - nb) * f;
  if (link > t) t = link;   /* the forward's last group joins the copy stream */
  t += (layers - nb) * 2 * f;
  link = t;
  for (int j = nb - 1; j >= 0; j--) {
    if (j < c && in[j] > t) t = in[j];
    t += 2 * f;
    if (j >= K && j - K < c) {
      in[j - K] = (link > t ? link : t) + d[j - K];
      link = in[j - K];
    }
  }
  return t - 3.0 * f * layers;
}

/* Pinned D2H bandwidth (bytes/ms): the best of three 64 MiB copies. */
static double measure_d2h(void) {
  size_t bytes = (size_t)64 << 20;
  tecore_devptr_t dv = 0;
  void *h = NULL;
  tecore_stream_t s = NULL;
  tecore_event_t e0 = NULL, e1 = NULL;
  double best = 0;
  if (tecore_mem_alloc(bytes, &dv) == TECORE_SUCCESS &&
      tecore_mem_alloc_host(bytes, &h) == TECORE_SUCCESS &&
      tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s) == TECORE_SUCCESS &&
      tecore_event_create(TECORE_EVENT_DEFAULT, &e0) == TECORE_SUCCESS &&
      tecore_event_create(TECORE_EVENT_DEFAULT, &e1) == TECORE_SUCCESS) {
    for (int i = 0; i < 3; i++) {
      float ms = 0;
      if (tecore_event_record(e0, s) != TECORE_SUCCESS ||
          tecore_memcpy_async((tecore_devptr_t)(uintptr_t)h, dv, bytes, s) != TECORE_SUCCESS ||
          tecore_event_record(e1, s) != TECORE_SUCCESS ||
          tecore_event_synchronize(e1) != TECORE_SUCCESS ||
          tecore_event_elapsed(&ms, e0, e1) != TECORE_SUCCESS || ms <= 0)
        break;
      if ((double)bytes / ms > best) best = (double)bytes / ms;
    }
  }
  if (e1) (void)tecore_event_destroy(e1);
  if (e0) (void)tecore_event_destroy(e0);
  if (s) (void)tecore_stream_destroy(s);
  if (h) (void)tecore_mem_free_host(h);
  if (dv) (void)tecore_mem_free(dv);
  return best;
}

/* The prefetch for nb attached blocks of block_bytes[] each; sets
 * *predicted to the modelled step ratio. */
static int auto_prefetch(const struct demo_offload_opts *o, int nb, int layers,
                         const size_t *block_bytes, double *predicted, double *bw_out,
                         double *f_out) {
  *predicted = 0;
  if (o->plain_step_ms <= 0 || o->microbatches <= 0 || nb < 3 || nb > 1024) return 1;
  double bw = measure_d2h();
  if (bw <= 0) return 1;
  double f = o->plain_step_ms / (3.0 * o->microbatches * layers);
  double d[1024];
  for (int j = 0; j < nb; j++) d[j] = (double)block_bytes[j] / bw;
  *bw_out = bw;
  *f_out = f;
  int K = 2;
  for (; K < nb - 1; K++)
    if (model_stall(nb, layers, K, f, d) * o->microbatches <= STALL_BUDGET * o->plain_step_ms)
      break;
  *predicted = 1 + model_stall(nb, layers, K, f, d) * o->microbatches / o->plain_step_ms;
  return K - 1;
}

static const char *tool = "te-demo";

static void die(const char *what, tegraph_result_t r) {
  fprintf(stderr, "%s: %s failed: %s (%s)\n", tool, what, tegraph_strerror(r),
          tegraph_last_error());
  exit(1); /* failures exit 1 here; 2 is a wrong command line (tools/cli.h) */
}

void demo_offload_attach(struct demo_offload *d, const struct demo_offload_opts *o,
                         tecore_seq_t *seq, int layers, int quiet) {
  memset(d, 0, sizeof *d);
  if (o->tool) tool = o->tool;
  size_t per = o->ops_per_block ? o->ops_per_block : OPS_PER_BLOCK;
  int nb = o->layers > 0 && o->layers < layers ? o->layers : layers;
  /* what the blocks that leave the device save: sizes the default budget */
  size_t ns = 0;
  if (tecore_seq_get_saved(seq, NULL, 0, &ns) != TECORE_SUCCESS) {
    fprintf(stderr, "%s: tecore_seq_get_saved: %s\n", tool, tecore_last_error());
    exit(1);
  }
  struct tecore_seq_saved *sv = calloc(ns ? ns : 1, sizeof *sv);
  if (!sv || tecore_seq_get_saved(seq, sv, ns, &ns) != TECORE_SUCCESS) {
    fprintf(stderr, "%s: tecore_seq_get_saved: %s\n", tool, tecore_last_error());
    exit(1);
  }
  size_t min_elems = o->min_elems ? o->min_elems : 262144;
  /* the bytes each attached block copies out: the model's input */
  size_t *bb = calloc((size_t)nb, sizeof *bb);
  if (!bb) {
    fprintf(stderr, "%s: out of memory\n", tool);
    exit(1);
  }
  for (size_t i = 0; i < ns; i++) {
    size_t blk = sv[i].op_first / per;
    if ((int)blk >= nb || sv[i].op_last / per != blk) continue;
    if (sv[i].rows * sv[i].cols < min_elems || !sv[i].read_back) continue;
    bb[blk] += (sv[i].bytes + 255) & ~(size_t)255;
  }
  double bw = 0, f = 0;
  d->prefetch = o->prefetch > 0 ? o->prefetch
                                : auto_prefetch(o, nb, layers, bb, &d->predicted, &bw, &f);
  free(bb);
  if (d->prefetch > 999) d->prefetch = 999;
  size_t need = 0;
  int copied = nb - (d->prefetch + 1);   /* the last prefetch + 1 slots stay */
  for (size_t i = 0; i < ns; i++) {
    size_t blk = sv[i].op_first / per;
    if ((int)blk >= copied || sv[i].op_last / per != blk) continue;
    if (sv[i].rows * sv[i].cols < min_elems) continue;
    d->theory_bytes += (sv[i].bytes + 255) & ~(size_t)255;
    if (sv[i].read_back) need += (sv[i].bytes + 255) & ~(size_t)255;
  }
  free(sv);
  /* directories */
  char *dirbuf = o->dirs ? strdup(o->dirs) : NULL;
  const char *dirs[16];
  size_t ndirs = 0;
  for (char *tok = dirbuf ? strtok(dirbuf, ",") : NULL; tok && ndirs < 16;
       tok = strtok(NULL, ","))
    if (*tok) dirs[ndirs++] = tok;
  struct tegraph_offload_config cfg = {.min_elems = o->min_elems, .prefetch = d->prefetch,
                                       .dirs = ndirs ? dirs : NULL, .ndirs = ndirs,
                                       .files_per_dir = ndirs ? 2 : 0};
  if (o->host_budget_mb > 0) {
    cfg.host_budget = (size_t)(o->host_budget_mb * 1048576.0);
  } else {
    cfg.host_budget = need + (ndirs ? (size_t)32 << 20 : 0) + 4096;
  }
  if (cfg.host_budget < ((size_t)64 << 20)) {
    /* small budgets: 64 KiB stripes, and below 256 KiB (four staging
     * buffers of them) stripes of an eighth of it, so that a budget of
     * 32 KiB still spills, in 4 KiB stripes (vdev's default model moves
     * about 70 KiB a step) */
    size_t stripe = (size_t)64 << 10;
    if (cfg.host_budget < 4 * stripe) stripe = (cfg.host_budget / 8) & ~(size_t)4095;
    if (stripe < 4096) stripe = 4096;
    cfg.stripe_bytes = stripe;
    cfg.staging_bytes = stripe;
  }
  tegraph_result_t r = tegraph_offload_create(&cfg, &d->ctx);
  free(dirbuf);
  if (r != TEGRAPH_SUCCESS) die("tegraph_offload_create", r);
  struct tegraph_offload_block *b = calloc((size_t)nb, sizeof *b);
  for (int l = 0; l < nb; l++)
    b[l] = (struct tegraph_offload_block){(size_t)l * per, per};
  struct tegraph_offload_seq_desc sd = {.seq = seq, .blocks = b, .nblocks = (size_t)nb};
  r = tegraph_offload_attach(d->ctx, &sd);
  free(b);
  if (r != TEGRAPH_SUCCESS) die("tegraph_offload_attach", r);
  tegraph_offload_get_stats(d->ctx, &d->st);
  if (!quiet)
    printf("  offload: %d of %d blocks attached (%d leave the device), %zu saved tensors "
           "offloaded, %zu kept; pool %.1f MiB; %s\n", nb, layers, copied > 0 ? copied : 0,
           d->st.offloaded, d->st.kept, d->st.pool_bytes / 1048576.0, d->st.why);
  if (!quiet && o->prefetch <= 0 && d->predicted > 0)
    printf("  offload: prefetch %d chosen: copies at %.1f GB/s, a block's forward %.3f ms; "
           "modelled step %.3fx (budget %.2fx)\n", d->prefetch, bw * 1e-6, f, d->predicted,
           1 + STALL_BUDGET);
  else if (!quiet)
    printf("  offload: prefetch %d%s\n", d->prefetch,
           o->prefetch > 0 ? " (--offload-prefetch)" : " (no model: too few blocks)");
}

void demo_offload_check(struct demo_offload *d, int step) {
  if (!d->ctx) return;
  tegraph_result_t r = tegraph_offload_check(d->ctx);
  if (r == TEGRAPH_SUCCESS) return;
  fprintf(stderr, "%s: step %d failed: %s\n", tool, step, tegraph_last_error());
  exit(1);
}

void demo_offload_destroy(struct demo_offload *d) {
  if (!d->ctx) return;
  tegraph_offload_get_stats(d->ctx, &d->st);
  tegraph_result_t r = tegraph_offload_destroy(d->ctx);
  if (r != TEGRAPH_SUCCESS) die("tegraph_offload_destroy", r);
  d->ctx = NULL;
}
