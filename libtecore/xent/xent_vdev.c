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
      s = te_add_rn(s, a.loss[t]);
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
  a.mean[0] = cnt[0] ? te_div_rn(part[0], (float)cnt[0]) : 0.0f;
  a.mean[1] = (float)cnt[0];
}

void te_xent_vdev_bwd(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_xent_bwd_args a = te_xent_bwd_args_of(args);
  (void)cfg;
  float vtot = (float)a.vocab_total;
  void *out = a.y ? a.y : a.x;
  int od = a.y ? a.ydtype : a.dtype;
  float osc = a.y && te_dt_is_fp8(od) && a.scale ? *a.scale : 1.0f;
  if (a.scale_inv && a.scale) *a.scale_inv = te_fp8_scale_inv(*a.scale);
  float am = 0.0f;
  for (unsigned long long t = 0; t < a.tokens; t++) {
    uint64_t base = t * a.vocab;
    int st = te_xent_label_state(a.labels[t], a.ignore, a.vocab_total);
    float scale = (a.flags & TE_XENT_DLOSS_MEAN)
                      ? (a.mean[1] > 0.0f ? te_div_rn(a.dloss[0], a.mean[1]) : 0.0f)
                      : a.dloss[t];
    long long lab = (long long)a.labels[t] - a.vocab_off;
    for (unsigned long long j = 0; j < a.vocab; j++) {
      float g = st == 0 ? 0.0f
                : st < 0 ? NAN
                         : te_xent_grad(te_ld(a.x, base + j, a.dtype), a.lse[t],
                                        (long long)j == lab, a.smoothing, vtot, scale);
      am = te_amax_f32(am, g);
      te_st(out, base + j, od, te_mul_rn(g, osc));
    }
  }
  if (a.amax && te_abs_bits(am)) te_vdev_amax_update(a.amax, te_abs_bits(am));
}
