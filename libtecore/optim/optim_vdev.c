/* SPDX-License-Identifier: Apache-2.0 */
/* optim_vdev.c -- the vdev (C) implementations of kernels/optim.cu: the
 * same element math (kernels/common/optim.h) over the same parameter
 * blocks, so the two backends agree bit for bit.  Each function runs the
 * whole grid on the stream's worker thread.  Element-wise kernels (Adam,
 * SGD, unscale) need no particular order; the L2 norm replays the GPU's
 * order of additions exactly: per thread the elements it visits, in the
 * order it visits them, then the block tree, then the partials. */
#include "optim/optim_internal.h"
#include <string.h>

/* ---- Adam / SGD --------------------------------------------------------------- */

static void step_entry(const struct te_optim_entry *e, const struct te_optim_hp *h,
                       const float *gsi_p, int sgd) {
  const int fp8 = te_dt_is_fp8(e->w_dt);
  const float gsi = gsi_p ? *gsi_p : 1.0f;
  const float scale = fp8 ? *e->w_scale : 1.0f;
  const int read_m = !sgd || (h->momentum != 0.0f && !h->first);
  const int write_m = !sgd || h->momentum != 0.0f;
  uint32_t am = 0;
  for (unsigned long long i = 0; i < e->n; i++) {
    float p = e->p[i], m = read_m ? e->m[i] : 0.0f, v = sgd ? 0.0f : e->v[i];
    float g = te_ld(e->g, i, e->g_dt);
    if (gsi_p) g = te_mul_rn(g, gsi);
    if (sgd) te_sgd_elem(&p, &m, g, h);
    else te_adam_elem(&p, &m, &v, g, h);
    e->p[i] = p;
    if (write_m) e->m[i] = m;
    if (!sgd) e->v[i] = v;
    if (e->w_dt != TE_OPTIM_W_NONE) {
      te_st(e->w, i, e->w_dt, te_optim_w_value(p, e->w_dt, scale));
      if (fp8) am = te_max_u32(am, te_abs_bits(p));
    }
  }
  if (fp8) {
    if (e->w_amax && am > *e->w_amax) *e->w_amax = am;
    if (e->w_scale_inv) *e->w_scale_inv = te_fp8_scale_inv(scale);
  }
}

static void step_all(void *const *args, int sgd) {
  const struct te_optim_params *p = te_optim_step_args_of(args).p;
  if (p->found_inf && *p->found_inf) return;
  struct te_optim_hp h = p->hp;
  if (p->state) te_optim_hp_from_state(&h, p->state, &p->dhp);
  for (int t = 0; t < p->count; t++) step_entry(&p->e[t], &h, p->gsi, sgd);
}

void te_optim_vdev_adam(const struct tecore_launch_cfg *cfg, void *const *args) {
  (void)cfg;
  step_all(args, 0);
}

void te_optim_vdev_sgd(const struct tecore_launch_cfg *cfg, void *const *args) {
  (void)cfg;
  step_all(args, 1);
}

void te_optim_vdev_commit(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_optim_commit_args a = te_optim_commit_args_of(args);
  (void)cfg;
  if (!(a.found_inf && *a.found_inf)) a.state->step += 1;
}

/* ---- L2 norm ------------------------------------------------------------------- */

/* Block c of an entry: thread k adds the squares of its 4-element groups
 * k, k + 256, ... of the chunk, element by element. */
static double l2_block(const struct te_l2_entry *e, unsigned c) {
  double a[TE_OPTIM_THREADS];
  const uint64_t start = (uint64_t)c * TE_RED_CHUNK;
  const uint64_t end = e->n - start < TE_RED_CHUNK ? e->n : start + TE_RED_CHUNK;
  for (unsigned k = 0; k < TE_OPTIM_THREADS; k++) {
    double acc = 0.0;
    for (uint64_t i = start + (uint64_t)k * TE_OPTIM_VEC; i < end;
         i += TE_OPTIM_THREADS * TE_OPTIM_VEC)
      for (uint64_t q = i; q < i + TE_OPTIM_VEC && q < end; q++)
        acc = acc + te_l2_sq(te_ld(e->x, q, e->dt));
    a[k] = acc;
  }
  return te_l2_tree256(a);
}

void te_optim_vdev_l2_partial(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_l2_params *p = te_optim_l2_partial_args_of(args).p;
  (void)cfg;
  for (int t = 0; t < p->count; t++) {
    const struct te_l2_entry *e = &p->e[t];
    for (unsigned c = 0; c < e->nblocks; c++)
      p->partial[p->base + e->block0 + c] = l2_block(e, c);
  }
}

void te_optim_vdev_l2_final(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_optim_l2_final_args f = te_optim_l2_final_args_of(args);
  const double *partial = f.partial;
  const unsigned nparts = f.nparts;
  double a[TE_OPTIM_THREADS];
  (void)cfg;
  for (unsigned k = 0; k < TE_OPTIM_THREADS; k++) {
    double acc = 0.0;
    for (unsigned i = k; i < nparts; i += TE_OPTIM_THREADS) acc = acc + partial[i];
    a[k] = acc;
  }
  double s = te_l2_tree256(a);
  *f.norm = (float)sqrt(s);
  if (f.found_inf && !te_l2_finite(s)) *f.found_inf = 1;
  if (f.scale) *f.scale = te_clip_scale(*f.norm, f.max_norm);
}

/* ---- unscale ----------------------------------------------------------------------- */

void te_optim_vdev_unscale(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_unscale_params *p = te_optim_unscale_args_of(args).p;
  const float s = *p->scale;
  int bad = 0;
  (void)cfg;
  for (int t = 0; t < p->count; t++) {
    const struct te_unscale_entry *e = &p->e[t];
    for (unsigned long long i = 0; i < e->n; i++) {
      float v = te_mul_rn(te_ld(e->in, i, e->in_dt), s);
      bad |= te_unscale_bad(v, e->out_dt);
      te_st(e->out, i, e->out_dt, v);
    }
  }
  if (bad && p->found_inf) *p->found_inf = 1;
}
