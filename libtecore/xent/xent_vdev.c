/* SPDX-License-Identifier: Apache-2.0 */
/* xent_vdev.c -- the vdev implementations of kernels/xent.cu: each row's
 * reductions in order (online max and sum-exp, as the GPU's threads do
 * on their parts), the mean in the GPU's order (kernels/common/xent.h:
 * the same bits), and the backward (in place, or into another tensor,
 * FP8 with a scale and the amax).  Runs on the stream's
 * worker thread. */
#include "xent/xent_internal.h"
#include <math.h>
#include "common/ldst.h"

/* A row's max m, sum-exp s relative to it, and sum sx. */
struct xent_sums {
  float m, s, sx;
};

/* Row t's sums, online; with m0 (not NULL), relative to that max. */
static struct xent_sums xent_vdev_reduce(const struct te_xent_row_args *a, unsigned long long t,
                                         const float *m0) {
  uint64_t base = t * a->vocab;
  float mm = m0 ? *m0 : -INFINITY, ss = 0.0f, sum = 0.0f;
  for (unsigned long long j = 0; j < a->vocab; j++) {
    float v = te_ld(a->x, base + j, a->dtype);
    sum = te_add_rn(sum, v);
    if (!m0 && v > mm) {
      ss = te_mul_rn(ss, expf(te_sub_rn(mm, v)));
      mm = v;
    }
    ss = te_add_rn(ss, expf(te_sub_rn(v, mm)));
  }
  return (struct xent_sums){mm, ss, sum};
}

static float xent_vdev_label_logit(const struct te_xent_row_args *a, unsigned long long t) {
  long long lab = a->labels[t] - a->vocab_off;
  if (lab < 0 || (unsigned long long)lab >= a->vocab) return 0.0f;
  return te_ld(a->x, t * a->vocab + (uint64_t)lab, a->dtype);
}

static void xent_vdev_finish(const struct te_xent_row_args *a, unsigned long long t, float m,
                             float s, float xl, float sx) {
  int st = te_xent_label_state(a->labels[t], a->ignore, a->vocab_total);
  float lse = te_xent_lse(m, s);
  a->lse[t] = lse;
  a->loss[t] = st == 0 ? 0.0f
               : st < 0 ? NAN
                        : te_xent_loss(lse, xl, sx, a->smoothing, (float)a->vocab_total);
}

void te_xent_vdev_row(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_xent_row_args a = te_xent_row_args_of(args);
  (void)cfg;
  int mode = a.mode & 0xf;
  for (unsigned long long t = 0; t < a.tokens; t++) {
    float *w = mode >= TE_XENT_SUMS ? a.ws + a.tokens + 3 * t : NULL;
    if (mode == TE_XENT_FULL) {
      struct xent_sums r = xent_vdev_reduce(&a, t, NULL);
      xent_vdev_finish(&a, t, r.m, r.s, xent_vdev_label_logit(&a, t), r.sx);
    } else if (mode == TE_XENT_MAX) {
      a.ws[t] = xent_vdev_reduce(&a, t, NULL).m;
    } else if (mode == TE_XENT_SUMS) {
      struct xent_sums r = xent_vdev_reduce(&a, t, &a.ws[t]);
      w[0] = r.s;
      w[1] = xent_vdev_label_logit(&a, t);
      w[2] = r.sx;
    } else {
      xent_vdev_finish(&a, t, a.ws[t], w[0], w[1], w[2]);
    }
  }
}

void te_xent_vdev_mean(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_xent_mean_args a = te_xent_mean_args_of(args);
  (void)cfg;
  float part[TE_XENT_MEAN_THREADS];
  unsigned cnt[TE_XENT_MEAN_THREADS];
  for (unsigned i = 0; i < TE_XENT_MEAN_THREADS; i++) {
    float s = 0.0f;
    unsigned c = 0;
    for (unsigned long long t = i; t < a.tokens; t += TE_XENT_MEAN_THREADS) {
      if (a.labels[t] == a.ignore) continue;
      if (!a.count_only) s = te_add_rn(s, a.loss[t]);
      c++;
    }
    part[i] = s;
    cnt[i] = c;
  }
  for (unsigned h = TE_XENT_MEAN_THREADS / 2; h > 0; h /= 2)
    for (unsigned i = 0; i < h; i++) {
      part[i] = te_xent_tree_step(part[i], part[i + h]);
      cnt[i] += cnt[i + h];
    }
  if (!a.count_only) a.mean[0] = cnt[0] ? te_div_rn(part[0], (float)cnt[0]) : 0.0f;
  a.mean[1] = (float)cnt[0];
}

/* The backward's output of one row: dlogits from lse into out (dtype od,
 * times osc), the amax of the unscaled values into *am. */
struct xent_vdev_out {
  void *out;
  int od;
  float osc, am;
};

/* What every row's gradient shares: the logits, this slice's first id
 * vocab_off (labels are ids of the whole vocabulary), the row length, the
 * ignored label, the whole vocabulary and the smoothing. */
struct xent_vdev_rows {
  const void *x;
  int dt, ignore;
  long long vocab_off, vocab_total;
  uint64_t vocab;
  float smoothing;
};

/* Row t's gradient. */
static void xent_vdev_grad_row(const struct xent_vdev_rows *r, int label, unsigned long long t,
                               float lse, float scale, struct xent_vdev_out *o) {
  uint64_t base = t * r->vocab;
  float vtot = (float)r->vocab_total;
  int st = te_xent_label_state(label, r->ignore, r->vocab_total);
  long long lab = (long long)label - r->vocab_off;
  for (unsigned long long j = 0; j < r->vocab; j++) {
    float g = st == 0 ? 0.0f
              : st < 0 ? NAN
                       : te_xent_grad(te_ld(r->x, base + j, r->dt), lse, (long long)j == lab,
                                      r->smoothing, vtot, scale);
    o->am = te_amax_f32(o->am, g);
    te_st(o->out, base + j, o->od, te_mul_rn(g, o->osc));
  }
}

static float xent_vdev_scale(int flags, const float *dloss, const float *mean,
                             unsigned long long t) {
  if (!(flags & TE_XENT_DLOSS_MEAN)) return dloss[t];
  return mean[1] > 0.0f ? te_div_rn(dloss[0], mean[1]) : 0.0f;
}

void te_xent_vdev_bwd(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_xent_bwd_args a = te_xent_bwd_args_of(args);
  (void)cfg;
  struct xent_vdev_out o = {.out = a.y ? a.y : a.x, .od = a.y ? a.ydtype : a.dtype};
  o.osc = a.y && te_dt_is_fp8(o.od) && a.scale ? *a.scale : 1.0f;
  if (a.scale_inv && a.scale) *a.scale_inv = te_fp8_scale_inv(*a.scale);
  const struct xent_vdev_rows rows = {.x = a.x, .dt = a.dtype, .ignore = a.ignore,
                                      .vocab_off = a.vocab_off, .vocab_total = a.vocab_total,
                                      .vocab = a.vocab, .smoothing = a.smoothing};
  for (unsigned long long t = 0; t < a.tokens; t++)
    xent_vdev_grad_row(&rows, a.labels[t], t, a.lse[t],
                       xent_vdev_scale(a.flags, a.dloss, a.mean, t), &o);
  if (a.amax && te_abs_bits(o.am)) te_vdev_amax_update(a.amax, te_abs_bits(o.am));
}

/* te_xent_train: each row's forward (FULL) then its gradient from the same
 * lse -- the bits of te_xent_vdev_row and te_xent_vdev_bwd. */
void te_xent_vdev_train(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_xent_train_args a = te_xent_train_args_of(args);
  (void)cfg;
  const struct te_xent_row_args r = {.x = a.x, .labels = a.labels, .loss = a.loss, .lse = a.lse,
                                     .tokens = a.tokens, .vocab = a.vocab,
                                     .vocab_total = a.vocab_total, .ignore = a.ignore,
                                     .smoothing = a.smoothing, .mode = TE_XENT_FULL,
                                     .dtype = a.dtype};
  struct xent_vdev_out o = {.out = a.y ? a.y : a.x, .od = a.y ? a.ydtype : a.dtype};
  o.osc = a.y && te_dt_is_fp8(o.od) && a.scale ? *a.scale : 1.0f;
  if (a.scale_inv && a.scale) *a.scale_inv = te_fp8_scale_inv(*a.scale);
  const struct xent_vdev_rows rows = {.x = a.x, .dt = a.dtype, .ignore = a.ignore,
                                      .vocab_total = a.vocab_total, .vocab = a.vocab,
                                      .smoothing = a.smoothing};
  for (unsigned long long t = 0; t < a.tokens; t++) {
    struct xent_sums sm = xent_vdev_reduce(&r, t, NULL);
    xent_vdev_finish(&r, t, sm.m, sm.s, xent_vdev_label_logit(&r, t), sm.sx);
    xent_vdev_grad_row(&rows, a.labels[t], t, a.lse[t],
                       xent_vdev_scale(a.flags, a.dloss, a.mean, t), &o);
  }
  if (a.amax && te_abs_bits(o.am)) te_vdev_amax_update(a.amax, te_abs_bits(o.am));
}
