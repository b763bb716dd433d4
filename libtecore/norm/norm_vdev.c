/* SPDX-License-Identifier: Apache-2.0 */
/* norm_vdev.c -- the vdev implementations of kernels/norm.cu, which
 * follow the GPU's thread layout and summation order
 * (kernels/common/norm.h), so both backends give the same bits.  Each runs
 * the whole grid on the stream's worker thread. */
#include "norm/norm_internal.h"
#include <stdlib.h>
#include "common/ldst.h"

/* ---- vdev: forward ---------------------------------------------------------------
 * Parameters: TE_NORM_FWD_PARAMS (kernels/common/norm_params.h).  The block
 * layout only decides the order of the row sums, reproduced here thread by
 * thread. */

/* Each row sum is taken as the GPU's T threads take it: thread t adds its
 * elements in order into part[t], then te_norm_tree_sum. */
static void norm_vdev_fwd(int vec, void *const *args) {
  const struct te_norm_fwd_args a = te_norm_fwd_args_of(args);
  const void *x = a.x, *gamma = a.gamma, *beta = a.beta;
  void *y = a.y;
  float *mu = a.mu, *rsigma = a.rsigma;
  const float *scale = a.scale;
  unsigned *amax = a.amax;
  float *scale_inv = a.scale_inv;
  unsigned long long rows = a.rows;
  unsigned hidden = a.hidden;
  float eps = a.eps;
  int flags = a.flags, dtypes = a.dtypes, tpr = a.tpr, nv = a.nv;
  int dx = TE_NORM_DT(dtypes, 0), dw = TE_NORM_DT(dtypes, 1), dy = TE_NORM_DT(dtypes, 2);
  int ln = flags & TE_NORM_LAYERNORM;
  float sc = (te_dt_is_fp8(dy) && scale) ? *scale : 1.0f, zc = te_norm_zc(flags);
  if (scale_inv && scale) *scale_inv = te_fp8_scale_inv(*scale);
  unsigned nvec = vec == 8 ? hidden / 8 : hidden;
  float h = (float)hidden;
  float part[1024];
  float am = 0.0f;
  for (unsigned long long row = 0; row < rows; row++) {
    const unsigned long long base = row * hidden;
    for (int t = 0; t < tpr; t++) {
      float s = 0.0f;
      for (int j = 0; j < nv; j++) {
        unsigned vi = (unsigned)j * (unsigned)tpr + (unsigned)t;
        if (vi >= nvec) continue;
        for (int k = 0; k < vec; k++) {
          float v = te_ld(x, base + (unsigned long long)vi * vec + k, dx);
          s = ln ? te_add_rn(s, v) : te_fma_rn(v, v, s);
        }
      }
      part[t] = s;
    }
    float total = te_norm_tree_sum(part, tpr);
    float mean = 0.0f, rs;
    if (ln) {
      mean = te_norm_mean(total, h);
      for (int t = 0; t < tpr; t++) {
        float q = 0.0f;
        for (int j = 0; j < nv; j++) {
          unsigned vi = (unsigned)j * (unsigned)tpr + (unsigned)t;
          if (vi >= nvec) continue;
          for (int k = 0; k < vec; k++) {
            float d = te_sub_rn(te_ld(x, base + (unsigned long long)vi * vec + k, dx), mean);
            q = te_fma_rn(d, d, q);
          }
        }
        part[t] = q;
      }
      rs = te_norm_rsigma(te_norm_mean(te_norm_tree_sum(part, tpr), h), eps);
    } else {
      rs = te_norm_rsigma(te_norm_mean(total, h), eps);
    }
    if (mu) mu[row] = mean;
    if (rsigma) rsigma[row] = rs;
    for (unsigned c = 0; c < hidden; c++) {
      float v = te_ld(x, base + c, dx);
      float g = te_norm_gamma(te_ld(gamma, c, dw), zc);
      float o = ln ? te_ln_out(te_sub_rn(v, mean), rs, g, te_ld(beta, c, dw))
                   : te_rms_out(v, rs, g);
      am = te_amax_f32(am, o);
      te_st(y, base + c, dy, te_mul_rn(o, sc));
    }
  }
  if (amax && te_abs_bits(am)) te_vdev_amax_update(amax, te_abs_bits(am));
}

/* ---- vdev: backward ----------------------------------------------------------------
 * Parameters: dy, x, mu, rsigma, gamma, extra, dx, ws, rows, hidden, flags,
 * dtypes, tpr, nv, parts, cs; the block is tpr * R threads (R row slots), the
 * grid parts blocks. */

static void norm_vdev_bwd(int vec, const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_norm_bwd_args a = te_norm_bwd_args_of(args);
  const void *dy = a.dy, *x = a.x, *gamma = a.gamma, *extra = a.extra;
  const float *mu = a.mu, *rsigma = a.rsigma;
  void *dx = a.dx;
  float *ws = a.ws;
  unsigned long long rows = a.rows;
  unsigned hidden = a.hidden;
  int flags = a.flags, dtypes = a.dtypes, tpr = a.tpr, nv = a.nv;
  unsigned parts = a.parts;
  int dtx = TE_NORM_DT(dtypes, 0), dtdy = TE_NORM_DT(dtypes, 1), dtw = TE_NORM_DT(dtypes, 2),
      dtdx = TE_NORM_DT(dtypes, 3), dte = TE_NORM_DT(dtypes, 4);
  int ln = flags & TE_NORM_LAYERNORM, add = flags & TE_NORM_EXTRA_GRAD;
  float zc = te_norm_zc(flags);
  unsigned R = cfg->block[0] / (unsigned)tpr;
  unsigned nvec = vec == 8 ? hidden / 8 : hidden;
  float h = (float)hidden;
  float part1[1024], part2[1024];
  /* per-slot column sums, added into the block's partial row in slot order */
  float *cs = a.cs;   /* te_norm_bwd_fast_cs: dx's column sums as stored */
  float *accg = malloc(3 * (size_t)hidden * sizeof(float));
  if (!accg) {
    TE_LOG_ERROR(TECORE_SUBSYS_KERNEL, "vdev norm backward: out of memory (%u columns)", hidden);
    return;
  }
  float *accb = accg + hidden, *acco = accb + hidden;
  for (unsigned b = 0; b < parts; b++) {
    float *wsg = ws + (unsigned long long)b * hidden;
    float *wsb = ws + ((unsigned long long)parts + b) * hidden;
    for (unsigned s = 0; s < R; s++) {
      for (unsigned c = 0; c < hidden; c++) accg[c] = accb[c] = acco[c] = 0.0f;
      for (unsigned long long grp = b; grp * R < rows; grp += parts) {
        unsigned long long row = grp * R + s;
        if (row >= rows) continue;
        unsigned long long base = row * hidden;
        float rs = rsigma[row], m = ln ? mu[row] : 0.0f;
        for (int t = 0; t < tpr; t++) {
          float s1 = 0.0f, s2 = 0.0f;
          for (int j = 0; j < nv; j++) {
            unsigned vi = (unsigned)j * (unsigned)tpr + (unsigned)t;
            if (vi >= nvec) continue;
            for (int k = 0; k < vec; k++) {
              unsigned c = vi * (unsigned)vec + (unsigned)k;
              float xv = te_ld(x, base + c, dtx);
              float xh = ln ? te_mul_rn(te_sub_rn(xv, m), rs) : te_mul_rn(xv, rs);
              float dyg = te_mul_rn(te_ld(dy, base + c, dtdy), te_norm_gamma(te_ld(gamma, c, dtw), zc));
              if (ln) s1 = te_add_rn(s1, dyg);
              s2 = te_fma_rn(dyg, xh, s2);
            }
          }
          part1[t] = s1;
          part2[t] = s2;
        }
        float m1 = te_norm_mean(te_norm_tree_sum(part1, tpr), h);
        float m2 = te_norm_mean(te_norm_tree_sum(part2, tpr), h);
        for (unsigned c = 0; c < hidden; c++) {
          float xv = te_ld(x, base + c, dtx), g = te_ld(dy, base + c, dtdy);
          float xh = ln ? te_mul_rn(te_sub_rn(xv, m), rs) : te_mul_rn(xv, rs);
          float dyg = te_mul_rn(g, te_norm_gamma(te_ld(gamma, c, dtw), zc));
          float d = ln ? te_ln_dx(rs, dyg, xh, m1, m2) : te_rms_dx(rs, dyg, xh, m2);
          if (add) d = te_add_rn(d, te_ld(extra, base + c, dte));
          te_st(dx, base + c, dtdx, d);
          if (cs) acco[c] = te_add_rn(acco[c], te_ld(dx, base + c, dtdx));
          accg[c] = te_fma_rn(g, xh, accg[c]);
          if (ln) accb[c] = te_add_rn(accb[c], g);
        }
      }
      for (unsigned c = 0; c < hidden; c++) {
        wsg[c] = s == 0 ? accg[c] : te_add_rn(wsg[c], accg[c]);
        if (ln) wsb[c] = s == 0 ? accb[c] : te_add_rn(wsb[c], accb[c]);
        if (cs) {
          float *o = cs + (unsigned long long)b * hidden + c;
          *o = s == 0 ? acco[c] : te_add_rn(*o, acco[c]);
        }
      }
    }
  }
  free(accg);
}

/* Parameters: ws, out0, out1, parts, hidden, dtypes, cs, cs_out, cs_acc,
 * cs_copy. */
void te_norm_vdev_bwd_reduce(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_norm_reduce_args a = te_norm_reduce_args_of(args);
  const float *ws = a.ws;
  void *out[2] = {a.out0, a.out1};
  unsigned parts = a.parts, hidden = a.hidden;
  int dtypes = a.dtypes;
  (void)cfg;
  for (int which = 0; which < 3; which++) {
    if (which == 2 ? !a.cs_out : which >= (out[1] ? 2 : 1)) continue;
    const float *w = which == 2 ? a.cs : ws + (unsigned long long)which * parts * hidden;
    for (unsigned c = 0; c < hidden; c++) {
      float g[TE_NORM_REDUCE_GROUPS];
      for (unsigned grp = 0; grp < TE_NORM_REDUCE_GROUPS; grp++) {
        float acc = 0.0f;
        for (unsigned p = grp; p < parts; p += TE_NORM_REDUCE_GROUPS)
          acc = te_add_rn(acc, w[(unsigned long long)p * hidden + c]);
        g[grp] = acc;
      }
      float v = te_norm_tree_sum(g, TE_NORM_REDUCE_GROUPS);
      if (which < 2) te_st(out[which], c, TE_NORM_DT(dtypes, which), v);
      else {
        a.cs_out[c] = a.cs_acc ? te_add_rn(a.cs_out[c], v) : v;
        if (a.cs_copy) a.cs_copy[c] = v;
      }
    }
  }
}

void te_norm_vdev_fwd_v8(const struct tecore_launch_cfg *cfg, void *const *args) {
  (void)cfg;
  norm_vdev_fwd(8, args);
}
void te_norm_vdev_fwd_v1(const struct tecore_launch_cfg *cfg, void *const *args) {
  (void)cfg;
  norm_vdev_fwd(1, args);
}
void te_norm_vdev_bwd_v8(const struct tecore_launch_cfg *cfg, void *const *args) {
  norm_vdev_bwd(8, cfg, args);
}
void te_norm_vdev_bwd_v1(const struct tecore_launch_cfg *cfg, void *const *args) {
  norm_vdev_bwd(1, cfg, args);
}
