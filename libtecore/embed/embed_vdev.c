/* SPDX-License-Identifier: Apache-2.0 */
/* embed_vdev.c -- the vdev implementations of kernels/embedding.cu: the
 * gather (and its reverse, the store), and the backward in the order kernels/common/embedding.h
 * defines (chunks of tokens; per chunk, each named row read, added to in
 * token order, stored), so both backends give the same bits.  Runs on the
 * stream's worker thread. */
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
    for (unsigned long long j = 0; j < a.hidden; j++) {
      float v = 0.0f;
      if (ok && pok) {
        v = te_ld(a.w, (uint64_t)id * a.hidden + j, dw);
        if (a.p) v = te_add_rn(v, te_ld(a.p, (uint64_t)pos * a.hidden + j, dp));
      }
      te_st(a.out, t * a.hidden + j, dout, v);
    }
  }
}

void te_emb_vdev_bwd(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_emb_bwd_args a = te_emb_bwd_args_of(args);
  (void)cfg;
  int ddy = TE_EMB_DT(a.dtypes, 0), ddw = TE_EMB_DT(a.dtypes, 1), pos = a.flags & TE_EMB_POS;
  float *acc = malloc((size_t)a.hidden * sizeof(float));
  if (!acc) {
    TE_LOG_ERROR(TECORE_SUBSYS_KERNEL, "vdev embedding backward: out of memory (%llu columns)",
                 a.hidden);
    return;
  }
  for (unsigned long long c0 = 0; c0 < a.tokens; c0 += TE_EMB_CHUNK) {
    unsigned long long c1 = c0 + TE_EMB_CHUNK < a.tokens ? c0 + TE_EMB_CHUNK : a.tokens;
    for (unsigned long long t = c0; t < c1; t++) {
      long long id = te_emb_id(a.ids, t, a.seq_len);
      if (id < 0 || id >= a.vocab) {
        emb_vdev_report(a.status, te_emb_status(t, id, pos));
        continue;
      }
      /* the first token of the chunk naming this row does the row's work */
      int first = 1;
      for (unsigned long long u = c0; u < t && first; u++)
        first = te_emb_id(a.ids, u, a.seq_len) != id;
      if (!first) continue;
      uint64_t rb = (uint64_t)id * a.hidden;
      for (unsigned long long j = 0; j < a.hidden; j++) acc[j] = te_ld(a.dw, rb + j, ddw);
      for (unsigned long long u = t; u < c1; u++) {
        if (te_emb_id(a.ids, u, a.seq_len) != id) continue;
        for (unsigned long long j = 0; j < a.hidden; j++)
          acc[j] = te_add_rn(acc[j], te_ld(a.dy, u * a.hidden + j, ddy));
      }
      for (unsigned long long j = 0; j < a.hidden; j++) te_st(a.dw, rb + j, ddw, acc[j]);
    }
  }
  free(acc);
}
