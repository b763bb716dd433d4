/* SPDX-License-Identifier: Apache-2.0 */
/* embed_vdev.c -- the vdev implementations of kernels/embedding.cu: the
 * gather (and its reverse, the store), and the backward (all its kernels)
 * in the order kernels/common/embedding.h defines (chunks of tokens; per
 * chunk, each named row read, added to in token order, stored), so both
 * backends give the same bits; with a window (a shard of the table) the
 * elements outside it are written as 0 (forward) or left unread (backward),
 * as there.  Runs on the stream's worker thread. */
#include "embed/embed_internal.h"
#include <stdlib.h>
#include "common/ldst.h"
#include "common/fmath.h"

static void emb_vdev_report(unsigned long long *status, unsigned long long word) {
  if (status && __atomic_load_n(status, __ATOMIC_RELAXED) == 0)
    __atomic_store_n(status, word, __ATOMIC_RELAXED);
}

void te_emb_vdev_fwd(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_emb_fwd_args a = te_emb_fwd_args_of(args);
  (void)cfg;
  int dw = TE_EMB_DT(a.dtypes, 0), dp = TE_EMB_DT(a.dtypes, 1), dout = TE_EMB_DT(a.dtypes, 2);
  for (unsigned long long t = 0; t < a.tokens; t++) {
    long long id = a.ids[t], pos = a.p ? te_emb_id(a.positions, t, a.seq_len) : 0;
    int ok = id >= 0 && id < a.vocab, pok = !a.p || (pos >= 0 && pos < a.max_pos);
    if (!ok) emb_vdev_report(a.status, te_emb_status(t, id, 0));
    else if (!pok) emb_vdev_report(a.status, te_emb_status(t, pos, 1));
    if (a.flags & TE_EMB_STORE) {   /* the other way: row t into row id */
      for (unsigned long long j = 0; j < a.hidden && ok; j++)
        te_st(a.out, (uint64_t)id * a.hidden + j, dout, te_ld(a.w, t * a.hidden + j, dw));
      continue;
    }
    const uint64_t wo = (uint64_t)id * a.hidden - a.wfirst;   /* wraps below the window */
    for (unsigned long long j = 0; j < a.hidden; j++) {
      float v = 0.0f;
      if (ok && pok) {
        if (wo + j < a.wcount) v = te_ld(a.w, wo + j, dw);
        if (a.p) v = te_add_rn(v, te_ld(a.p, (uint64_t)pos * a.hidden + j, dp));
      }
      te_st(a.out, t * a.hidden + j, dout, v);
    }
  }
}

/* A chunk's hit: its row, then its token (the sort key: rows in order,
 * tokens in order within a row). */
struct emb_hit {
  long long id;
  unsigned long long t;
};
static int emb_hit_cmp(const void *x, const void *y) {
  const struct emb_hit *a = x, *b = y;
  if (a->id != b->id) return a->id < b->id ? -1 : 1;
  return a->t < b->t ? -1 : a->t > b->t;
}

void te_emb_vdev_bwd(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_emb_bwd_args a = te_emb_bwd_args_of(args);
  (void)cfg;
  int ddy = TE_EMB_DT(a.dtypes, 0), ddw = TE_EMB_DT(a.dtypes, 1), pos = a.flags & TE_EMB_POS;
  float *acc = malloc((size_t)a.hidden * sizeof(float));
  struct emb_hit *hit = malloc(TE_EMB_CHUNK * sizeof *hit);
  if (!acc || !hit) {
    TE_LOG_ERROR(TECORE_SUBSYS_KERNEL, "vdev embedding backward: out of memory (%llu columns)",
                 a.hidden);
    free(acc);
    free(hit);
    return;
  }
  for (unsigned long long c0 = 0; c0 < a.tokens; c0 += TE_EMB_CHUNK) {
    unsigned long long c1 = c0 + TE_EMB_CHUNK < a.tokens ? c0 + TE_EMB_CHUNK : a.tokens;
    size_t n = 0;
    for (unsigned long long t = c0; t < c1; t++) {
      long long id = te_emb_id(a.ids, t, a.seq_len);
      if (id < 0 || id >= a.vocab) emb_vdev_report(a.status, te_emb_status(t, id, pos));
      else hit[n++] = (struct emb_hit){id, t};
    }
    qsort(hit, n, sizeof *hit, emb_hit_cmp);
    /* each named row's columns in the window read once, its tokens' dy
     * added in token order, stored */
    for (size_t i = 0; i < n;) {
      uint64_t rb = (uint64_t)hit[i].id * a.hidden, wb = rb - a.wfirst;
      unsigned long long lo, hi;
      te_emb_window(rb, a.hidden, a.wfirst, a.wcount, &lo, &hi);
      for (unsigned long long j = lo; j < hi; j++) acc[j] = te_ld(a.dw, wb + j, ddw);
      size_t e = i;
      for (; e < n && hit[e].id == hit[i].id; e++)
        for (unsigned long long j = lo; j < hi; j++)
          acc[j] = te_add_rn(acc[j], te_ld(a.dy, hit[e].t * a.hidden + j, ddy));
      for (unsigned long long j = lo; j < hi; j++) te_st(a.dw, wb + j, ddw, acc[j]);
      i = e;
    }
  }
  free(acc);
  free(hit);
}

/* kernels/embedding.cu's te_emb_bwd_pos: position p's tokens p, p + S, ...
 * added in token order to its row, a 16-bit row rounded where a chunk of
 * TE_EMB_CHUNK tokens ends (te_emb_vdev_bwd's store and load), the same
 * bits as that function, walked the kernel's way (a vector of 8 columns
 * at a time). */
void te_emb_vdev_bwd_pos(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_emb_bwd_args a = te_emb_bwd_args_of(args);
  (void)cfg;
  const int ddy = TE_EMB_DT(a.dtypes, 0), ddw = TE_EMB_DT(a.dtypes, 1);
  const unsigned long long S = (unsigned long long)a.seq_len;
  const unsigned long long np = a.tokens < S ? a.tokens : S;
  for (unsigned long long p = 0; p < np; p++)
    for (unsigned long long j = 0; j < a.hidden; j += 8) {
      float acc[8];
      for (int k = 0; k < 8; k++) acc[k] = te_ld(a.dw, p * a.hidden + j + k, ddw);
      unsigned long long chunk = p / TE_EMB_CHUNK;
      for (unsigned long long t = p; t < a.tokens; t += S) {
        if (t / TE_EMB_CHUNK != chunk) {
          for (int k = 0; k < 8; k++) {
            te_st(a.dw, p * a.hidden + j + k, ddw, acc[k]);
            acc[k] = te_ld(a.dw, p * a.hidden + j + k, ddw);
          }
          chunk = t / TE_EMB_CHUNK;
        }
        for (int k = 0; k < 8; k++)
          acc[k] = te_add_rn(acc[k], te_ld(a.dy, t * a.hidden + j + k, ddy));
      }
      for (int k = 0; k < 8; k++) te_st(a.dw, p * a.hidden + j + k, ddw, acc[k]);
    }
}
