/* demo_offload.c -- te-demo --offload: an offload context sized for the
 * model's offloaded blocks (their saved tensors that the backward reads,
 * plus four staging buffers when spilling), attached to the model's
 * sequence block by block, and the figures te-demo prints: device memory
 * saved against the most offload can save, bytes moved to host and to
 * files per pass. */
#include "demo_offload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OPS_PER_BLOCK 6   /* mlp_block.h */

static void die(const char *what, tegraph_result_t r) {
  fprintf(stderr, "te-demo: %s failed: %s (%s)\n", what, tegraph_strerror(r),
          tegraph_last_error());
  exit(2);
}

void demo_offload_attach(struct demo_offload *d, const struct demo_offload_opts *o,
                         tecore_seq_t *seq, int layers, int quiet) {
  memset(d, 0, sizeof *d);
  int nb = o->layers > 0 && o->layers < layers ? o->layers : layers;
  /* what the blocks that leave the device save: sizes the default budget */
  size_t ns = 0;
  if (tecore_seq_saved(seq, NULL, 0, &ns) != TECORE_SUCCESS) {
    fprintf(stderr, "te-demo: tecore_seq_saved: %s\n", tecore_last_error());
    exit(2);
  }
  struct tecore_seq_saved *sv = calloc(ns ? ns : 1, sizeof *sv);
  if (!sv || tecore_seq_saved(seq, sv, ns, &ns) != TECORE_SUCCESS) {
    fprintf(stderr, "te-demo: tecore_seq_saved: %s\n", tecore_last_error());
    exit(2);
  }
  size_t min_elems = o->min_elems ? o->min_elems : 262144;
  size_t need = 0;
  int copied = nb - 2;   /* prefetch 1: two slots stay */
  for (size_t i = 0; i < ns; i++) {
    size_t blk = sv[i].op_first / OPS_PER_BLOCK;
    if ((int)blk >= copied || sv[i].op_last / OPS_PER_BLOCK != blk) continue;
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
  struct tegraph_offload_config cfg = {.min_elems = o->min_elems, .prefetch = 1,
                                       .dirs = ndirs ? dirs : NULL, .ndirs = ndirs,
                                       .files_per_dir = ndirs ? 2 : 0};
  if (o->host_budget_mb > 0) {
    cfg.host_budget = (size_t)(o->host_budget_mb * 1048576.0);
  } else {
    cfg.host_budget = need + (ndirs ? (size_t)32 << 20 : 0) + 4096;
  }
  if (cfg.host_budget < ((size_t)64 << 20)) {   /* small budgets: small stripes */
    cfg.stripe_bytes = 64 << 10;
    cfg.staging_bytes = 64 << 10;
  }
  tegraph_result_t r = tegraph_offload_create(&cfg, &d->ctx);
  free(dirbuf);
  if (r != TEGRAPH_SUCCESS) die("tegraph_offload_create", r);
  struct tegraph_offload_block *b = calloc((size_t)nb, sizeof *b);
  for (int l = 0; l < nb; l++)
    b[l] = (struct tegraph_offload_block){(size_t)l * OPS_PER_BLOCK, OPS_PER_BLOCK};
  struct tegraph_offload_seq_desc sd = {.seq = seq, .blocks = b, .nblocks = (size_t)nb};
  r = tegraph_offload_attach(d->ctx, &sd);
  free(b);
  if (r != TEGRAPH_SUCCESS) die("tegraph_offload_attach", r);
  tegraph_offload_stats(d->ctx, &d->st);
  if (!quiet)
    printf("  offload: %d of %d blocks attached (%d leave the device), %zu saved tensors "
           "offloaded, %zu kept; pool %.1f MiB; %s\n", nb, layers, copied > 0 ? copied : 0,
           d->st.offloaded, d->st.kept, d->st.pool_bytes / 1048576.0, d->st.why);
}

void demo_offload_check(struct demo_offload *d, int step) {
  if (!d->ctx) return;
  tegraph_result_t r = tegraph_offload_check(d->ctx);
  if (r == TEGRAPH_SUCCESS) return;
  fprintf(stderr, "te-demo: step %d failed: %s\n", step, tegraph_last_error());
  exit(2);
}

void demo_offload_destroy(struct demo_offload *d) {
  if (!d->ctx) return;
  tegraph_offload_stats(d->ctx, &d->st);
  tegraph_result_t r = tegraph_offload_destroy(d->ctx);
  if (r != TEGRAPH_SUCCESS) die("tegraph_offload_destroy", r);
  d->ctx = NULL;
}
