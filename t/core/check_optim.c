/* SPDX-License-Identifier: Apache-2.0 */
/* check_optim.c -- tecore_adam_step, tecore_sgd_step, tecore_l2norm_multi
 * (and its workspace size) and tecore_unscale_multi on the selected backend.
 *
 * Two references for every step:
 *   - float64: the optimizer math of te/optim.h carried in double over all
 *     steps, independently of the device's state.  Tolerances (stated per
 *     compare below) cover float rounding over the steps taken: moments
 *     2e-6 absolute (gradients are O(1)) + 1e-5 relative, master weights
 *     2e-6 absolute + 2e-6 relative, while an error in the formula moves a
 *     weight by about lr = 1e-2;
 *   - exact: the step redone on the host from the device's previous state
 *     with kernels/common/optim.h (the kernels' own element math), which the
 *     device must match bit for bit -- on vdev a self-check, on cuda the
 *     proof that both backends give the same bits.
 * Model copies are checked bit for bit against convert.h / fp8.h applied to
 * the device's updated master weight (FP8: times the scale, one float
 * rounding); FP8 amax and scale_inv bit for bit.  The L2 norm must be
 * within 1 ulp of the float64 norm and bit-exact against the documented
 * order of additions (and the same bits when run twice).  Unscale outputs
 * are the float product converted to the output type, bit for bit.
 * Shapes: tensors of 1, 7, 33, 4097 and 1000003 elements in one call, mixed
 * gradient and model types, pointers misaligned for the vector paths, more
 * tensors than one launch takes.  Inputs are fresh random values each run;
 * every output and a guard zone around every buffer are poisoned (0xA5 /
 * NaN) before the kernels run. */
#include "tests.h"
#include <float.h>
#include "common/optim.h"

#define NO_MODEL ((tecore_dtype_t)-1)
#define GUARD 16   /* elements of poison before and after every buffer */
#define LR 1e-2

static size_t dsz(tecore_dtype_t d) { return tecore_dtype_size(d); }

/* ---- one parameter tensor under test ------------------------------------------- */

struct ot {
  size_t n;
  int off;                      /* 0: data GUARD elements in; 1: one element further (misaligned) */
  tecore_dtype_t gdt, wdt;      /* wdt NO_MODEL: no model copy */
  int has_m, has_v;
  tecore_devptr_t bp, bg, bm, bv, bw, bs;   /* allocations (bs: scale, scale_inv, amax) */
  tecore_devptr_t dp, dg, dm, dv, dw;
  float scale;
  uint32_t amax0;               /* amax before each step */
  float *p, *m, *v;             /* the device state as last read */
  void *graw;                   /* this step's gradient as uploaded */
  double *rp, *rm, *rv;         /* the float64 reference state */
};

static tecore_devptr_t alloc_poisoned(size_t n, size_t esz, int off, tecore_devptr_t *base) {
  size_t bytes = (n + 2 * GUARD + 1) * esz;
  *base = te_dalloc(bytes);
  te_poison_dev(*base, bytes);
  return *base + (GUARD + (size_t)off) * esz;
}

/* Bytes of an allocation outside its data must still be poison. */
static void check_guard(tecore_devptr_t base, size_t n, size_t esz, int off, const char *what) {
  size_t bytes = (n + 2 * GUARD + 1) * esz, lo = (GUARD + (size_t)off) * esz, hi = lo + n * esz;
  unsigned char *b = malloc(bytes);
  te_d2h(b, base, bytes);
  for (size_t i = 0; i < bytes; i++)
    if ((i < lo || i >= hi) && b[i] != TE_POISON_BYTE)   /* Check records every assertion: */
      ck_assert_msg(0, "%s: guard byte %zd (relative to the data) is 0x%02x",   /* fail only */
                    what, (ssize_t)i - (ssize_t)lo, b[i]);
  free(b);
}

/* te_expect_f32_near for long arrays: scans first and asserts only when an
 * element is out of tolerance (Check writes a record for every assertion). */
static void expect_near(const float *got, const float *want, size_t n, double abs_tol,
                        double rel_tol, const char *what) {
  for (size_t i = 0; i < n; i++) {
    double g = got[i], w = want[i];
    if ((isnan(g) && isnan(w)) || g == w || fabs(g - w) <= abs_tol + rel_tol * fabs(w)) continue;
    char at[160];
    snprintf(at, sizeof at, "%s, element %zu of %zu", what, i, n);
    te_expect_f32_near(got + i, want + i, 1, abs_tol, rel_tol, at);
  }
}

static void ot_init(struct ot *t, size_t n, int off, tecore_dtype_t gdt, tecore_dtype_t wdt,
                    int has_m, int has_v) {
  memset(t, 0, sizeof *t);
  t->n = n;
  t->off = off;
  t->gdt = gdt;
  t->wdt = wdt;
  t->has_m = has_m;
  t->has_v = has_v;
  t->p = malloc(n * 4);
  t->m = calloc(n, 4);
  t->v = calloc(n, 4);
  t->graw = malloc(n * 4);
  t->rp = malloc(n * 8);
  t->rm = calloc(n, 8);
  t->rv = calloc(n, 8);
  t->dp = alloc_poisoned(n, 4, off, &t->bp);
  t->dg = alloc_poisoned(n, dsz(gdt), off, &t->bg);
  te_rand_floats(t->p, n, -1.0f, 1.0f);
  for (size_t i = 0; i < n; i++) t->rp[i] = t->p[i];
  te_h2d(t->dp, t->p, n * 4);
  if (has_m) {
    t->dm = alloc_poisoned(n, 4, off, &t->bm);
    if (has_v) {
      te_h2d(t->dm, t->m, n * 4);   /* Adam starts from zero moments */
    } else {
      te_poison_dev_nan(t->dm, n);   /* SGD must not read the buffer at step 1 */
      te_poison_host_nan(t->m, n);
    }
  }
  if (has_v) {
    t->dv = alloc_poisoned(n, 4, off, &t->bv);
    te_h2d(t->dv, t->v, n * 4);
  }
  if (wdt != NO_MODEL) {
    t->dw = alloc_poisoned(n, dsz(wdt), off, &t->bw);
    t->bs = te_dalloc(16);
    /* E4M3 scales up to 1000 saturate |p| > 0.448 */
    t->scale = wdt == TECORE_DTYPE_E4M3 ? te_rand_float(100.0f, 1000.0f)
                                        : te_rand_float(1000.0f, 60000.0f);
    te_h2d(t->bs, &t->scale, 4);
  }
}

static void ot_free(struct ot *t) {
  check_guard(t->bp, t->n, 4, t->off, "param");
  check_guard(t->bg, t->n, dsz(t->gdt), t->off, "grad");
  TE_OK(tecore_mem_free(t->bp));
  TE_OK(tecore_mem_free(t->bg));
  if (t->has_m) {
    check_guard(t->bm, t->n, 4, t->off, "exp_avg");
    TE_OK(tecore_mem_free(t->bm));
  }
  if (t->has_v) {
    check_guard(t->bv, t->n, 4, t->off, "exp_avg_sq");
    TE_OK(tecore_mem_free(t->bv));
  }
  if (t->wdt != NO_MODEL) {
    check_guard(t->bw, t->n, dsz(t->wdt), t->off, "model");
    TE_OK(tecore_mem_free(t->bw));
    TE_OK(tecore_mem_free(t->bs));
  }
  free(t->p), free(t->m), free(t->v), free(t->graw), free(t->rp), free(t->rm), free(t->rv);
}

static struct tecore_optim_tensor ot_desc(const struct ot *t) {
  struct tecore_optim_tensor d = {.param = t->dp, .grad = t->dg, .exp_avg = t->dm,
                                  .exp_avg_sq = t->dv, .numel = t->n, .grad_dtype = t->gdt};
  if (t->wdt != NO_MODEL) {
    d.model = t->dw;
    d.model_dtype = t->wdt;
    if (t->wdt == TECORE_DTYPE_E4M3 || t->wdt == TECORE_DTYPE_E5M2) {
      d.model_scale = t->bs;
      d.model_scale_inv = t->bs + 4;
      d.model_amax = t->bs + 8;
    }
  }
  return d;
}

static int is_fp8(tecore_dtype_t d) { return d == TECORE_DTYPE_E4M3 || d == TECORE_DTYPE_E5M2; }

/* A fresh gradient, multiplied by gscale (a power of two) as stored. */
static void ot_grad(struct ot *t, float gscale) {
  for (size_t i = 0; i < t->n; i++) {
    float x = te_rand_float(-1.0f, 1.0f) * gscale;
    te_st(t->graw, i, (int)t->gdt, x);
  }
  te_h2d(t->dg, t->graw, t->n * dsz(t->gdt));
}

/* The gradient the kernel uses: the stored value times gsi (exact: a power of two). */
static float ot_g(const struct ot *t, size_t i, float gsi) {
  return te_ld(t->graw, i, (int)t->gdt) * gsi;
}

/* Before a step: amax to its start value, scale_inv poisoned. */
static void ot_prepare_model(struct ot *t) {
  if (!is_fp8(t->wdt)) return;
  te_h2d(t->bs + 8, &t->amax0, 4);
  te_poison_dev_nan(t->bs + 4, 1);
}

/* After a step: reads the state back and checks the model copy, amax and
 * scale_inv against the device's master weights. */
static void ot_read_and_check_model(struct ot *t) {
  te_d2h(t->p, t->dp, t->n * 4);
  if (t->has_m) te_d2h(t->m, t->dm, t->n * 4);
  if (t->has_v) te_d2h(t->v, t->dv, t->n * 4);
  if (t->wdt == NO_MODEL) return;
  size_t esz = dsz(t->wdt);
  unsigned char *got = malloc(t->n * esz), *want = malloc(t->n * esz);
  te_d2h(got, t->dw, t->n * esz);
  uint32_t am = t->amax0;
  for (size_t i = 0; i < t->n; i++) {
    if (is_fp8(t->wdt)) {
      want[i] = te_f32_to_fp8(t->p[i] * t->scale, (int)t->wdt);   /* float product, one rounding */
      uint32_t a = te_f32_bits_of(t->p[i]) & 0x7fffffffu;
      if (a > am) am = a;
    } else {
      uint16_t h = t->wdt == TECORE_DTYPE_BF16 ? te_f32_to_bf16(t->p[i]) : te_f32_to_f16(t->p[i]);
      memcpy(want + 2 * i, &h, 2);
    }
  }
  char what[64];
  snprintf(what, sizeof what, "model (%s, n %zu)", tecore_dtype_name(t->wdt), t->n);
  if (is_fp8(t->wdt)) {
    te_expect_mem_eq(got, want, t->n, what);
    float sa[3];
    te_d2h(sa, t->bs, 12);
    ck_assert_msg(te_f32_bits_of(sa[1]) == te_f32_bits_of(1.0f / t->scale),
                  "scale_inv %a, want %a", (double)sa[1], (double)(1.0f / t->scale));
    ck_assert_msg(te_f32_bits_of(sa[2]) == am, "amax 0x%08x, want 0x%08x (start 0x%08x)",
                  te_f32_bits_of(sa[2]), am, t->amax0);
  } else {
    te_expect_half_bits((const uint16_t *)got, (const uint16_t *)want, t->n,
                        t->wdt == TECORE_DTYPE_BF16 ? 8 : 5,
                        t->wdt == TECORE_DTYPE_BF16 ? te_bf16_to_f32 : te_f16_to_f32, what);
  }
  free(got);
  free(want);
}

/* Compares the device state with the exact emulation (bits) and the
 * float64 reference (tolerances in the header). */
static void ot_compare(const struct ot *t, const float *ep, const float *em, const float *ev,
                       int step) {
  char what[80];
  float *rf = malloc(t->n * 4);
  snprintf(what, sizeof what, "step %d: param (n %zu, exact)", step, t->n);
  te_expect_f32_bits(t->p, ep, t->n, what);
  for (size_t i = 0; i < t->n; i++) rf[i] = (float)t->rp[i];
  snprintf(what, sizeof what, "step %d: param (n %zu) vs float64", step, t->n);
  expect_near(t->p, rf, t->n, 2e-6, 2e-6, what);
  if (t->has_m) {
    snprintf(what, sizeof what, "step %d: exp_avg (n %zu, exact)", step, t->n);
    te_expect_f32_bits(t->m, em, t->n, what);
    for (size_t i = 0; i < t->n; i++) rf[i] = (float)t->rm[i];
    snprintf(what, sizeof what, "step %d: exp_avg (n %zu) vs float64", step, t->n);
    expect_near(t->m, rf, t->n, 2e-6, 1e-5, what);
  }
  if (t->has_v) {
    snprintf(what, sizeof what, "step %d: exp_avg_sq (n %zu, exact)", step, t->n);
    te_expect_f32_bits(t->v, ev, t->n, what);
    for (size_t i = 0; i < t->n; i++) rf[i] = (float)t->rv[i];
    snprintf(what, sizeof what, "step %d: exp_avg_sq (n %zu) vs float64", step, t->n);
    expect_near(t->v, rf, t->n, 2e-6, 1e-5, what);
  }
  free(rf);
}

/* ---- the kernels' hyperparameters, derived as te/optim.h says -------------------- */

static struct te_optim_hp hp_adam(const struct tecore_adam_config *c) {
  struct te_optim_hp h;
  memset(&h, 0, sizeof h);
  double bc1 = 1, bc2 = 1;
  if (!(c->flags & TECORE_ADAM_NO_BIAS_CORRECTION)) {
    bc1 = 1 - pow(c->beta1, (double)c->step);
    bc2 = 1 - pow(c->beta2, (double)c->step);
  }
  h.kind = (c->flags & TECORE_ADAM_W) ? TE_OPTIM_ADAMW : TE_OPTIM_ADAM_L2;
  h.lr = (float)c->lr;
  h.beta1 = (float)c->beta1;
  h.beta2 = (float)c->beta2;
  h.omb1 = (float)(1 - c->beta1);
  h.omb2 = (float)(1 - c->beta2);
  h.eps = (float)c->eps;
  h.wd = (float)c->weight_decay;
  h.step_size = (float)(c->lr / bc1);
  h.bc2_sqrt = (float)sqrt(bc2);
  h.decay = (float)(1 - c->lr * c->weight_decay);
  return h;
}

static struct te_optim_hp hp_sgd(const struct tecore_sgd_config *c) {
  struct te_optim_hp h;
  memset(&h, 0, sizeof h);
  h.kind = TE_OPTIM_SGD;
  h.lr = (float)c->lr;
  h.wd = (float)c->weight_decay;
  h.momentum = (float)c->momentum;
  h.damp1 = (float)(1 - c->dampening);
  h.first = c->step == 1;
  h.nesterov = (c->flags & TECORE_SGD_NESTEROV) != 0;
  return h;
}

/* ---- float64 references ------------------------------------------------------------ */

static void ref_adam(struct ot *t, const struct tecore_adam_config *c, float gsi) {
  double b1 = c->beta1, b2 = c->beta2, wd = c->weight_decay, lr = c->lr;
  double bc1 = 1, bc2 = 1;
  if (!(c->flags & TECORE_ADAM_NO_BIAS_CORRECTION)) {
    bc1 = 1 - pow(b1, (double)c->step);
    bc2 = 1 - pow(b2, (double)c->step);
  }
  for (size_t i = 0; i < t->n; i++) {
    double g = ot_g(t, i, gsi), p = t->rp[i];
    if (!(c->flags & TECORE_ADAM_W)) g += wd * p;
    t->rm[i] = b1 * t->rm[i] + (1 - b1) * g;
    t->rv[i] = b2 * t->rv[i] + (1 - b2) * g * g;
    double denom = sqrt(t->rv[i] / bc2) + c->eps;
    if (c->flags & TECORE_ADAM_W) p *= 1 - lr * wd;
    t->rp[i] = p - lr * (t->rm[i] / bc1) / denom;
  }
}

static void ref_sgd(struct ot *t, const struct tecore_sgd_config *c, float gsi) {
  for (size_t i = 0; i < t->n; i++) {
    double d = ot_g(t, i, gsi) + c->weight_decay * t->rp[i];
    if (c->momentum != 0) {
      t->rm[i] = c->step == 1 ? d : c->momentum * t->rm[i] + (1 - c->dampening) * d;
      d = (c->flags & TECORE_SGD_NESTEROV) ? d + c->momentum * t->rm[i] : t->rm[i];
    }
    t->rp[i] = t->rp[i] - c->lr * d;
  }
}

/* The exact step from the device's previous state (kernels/common/optim.h). */
static void emu_step(const struct ot *t, const struct te_optim_hp *h, float gsi, int has_gsi,
                     float *ep, float *em, float *ev) {
  for (size_t i = 0; i < t->n; i++) {
    float p = t->p[i], m = t->m[i], v = t->v[i];
    float g = te_ld(t->graw, i, (int)t->gdt);
    if (has_gsi) g = te_mul_rn(g, gsi);
    if (h->kind == TE_OPTIM_SGD) te_sgd_elem(&p, &m, g, h);
    else te_adam_elem(&p, &m, &v, g, h);
    ep[i] = p, em[i] = m, ev[i] = v;
  }
}

/* ---- one multi-tensor run ----------------------------------------------------------- */

struct spec {
  size_t n;
  int off;
  tecore_dtype_t gdt, wdt;
};

static tecore_devptr_t dev_float(float x) {
  tecore_devptr_t d = te_dalloc(4);
  te_h2d(d, &x, 4);
  return d;
}
static tecore_devptr_t dev_int(int x) {
  tecore_devptr_t d = te_dalloc(4);
  te_h2d(d, &x, 4);
  return d;
}
static int read_int(tecore_devptr_t d) {
  int x;
  te_d2h(&x, d, 4);
  return x;
}

/* With a struct tecore_optim_state: the learning rate of step s (it
 * changes every step, as a schedule would). */
static double state_lr(int s) { return LR * (1.0 + 0.25 * s); }

/* Runs `steps` steps of Adam (sgd == NULL) or SGD over the tensors of
 * specs, even steps with gradients scaled by 1024 and grad_scale_inv set.
 * dev_state: step number and learning rate come from a struct
 * tecore_optim_state, and each step is a replay of one of two graphs
 * (with and without grad_scale_inv) captured once. */
static void run_steps_mode(const struct spec *specs, int count,
                           const struct tecore_adam_config *adam,
                           const struct tecore_sgd_config *sgd, int steps, int dev_state) {
  struct ot *t = calloc((size_t)count, sizeof *t);
  struct tecore_optim_tensor *d = calloc((size_t)count, sizeof *d);
  int has_m = adam || sgd->momentum != 0, has_v = adam != NULL;
  for (int i = 0; i < count; i++) {
    ot_init(&t[i], specs[i].n, specs[i].off, specs[i].gdt, specs[i].wdt, has_m, has_v);
    /* one FP8 tensor keeps a larger amax from before: amax accumulates */
    if (is_fp8(specs[i].wdt) && i % 2) t[i].amax0 = te_f32_bits_of(1000.0f);
    d[i] = ot_desc(&t[i]);
  }
  tecore_devptr_t gsi_d = dev_float(1.0f / 1024.0f), flag = dev_int(0), st = 0;
  tecore_graph_exec_t exec[2] = {NULL, NULL};
  if (dev_state) {
    st = te_dalloc(sizeof(struct tecore_optim_state));
    struct tecore_optim_state hs = {.step = 0, .lr = state_lr(1)};
    te_h2d(st, &hs, sizeof hs);
  }
  for (int s = 1; s <= steps; s++) {
    int scaled = s % 2 == 0;
    float gsi = scaled ? 1.0f / 1024.0f : 1.0f;
    struct tecore_adam_config ac;
    struct tecore_sgd_config sc;
    struct te_optim_hp h;
    if (adam) {
      ac = *adam;
      ac.step = s;
      if (dev_state) ac.lr = state_lr(s);
      h = hp_adam(&ac);
    } else {
      sc = *sgd;
      sc.step = s;
      if (dev_state) sc.lr = state_lr(s);
      h = hp_sgd(&sc);
    }
    if (dev_state) {   /* the kernel's values: bias corrections by repeated squaring */
      struct te_optim_state hs = {.step = s - 1, .lr = state_lr(s)};
      struct te_optim_dev_hp dh = {
          .beta1 = adam ? adam->beta1 : 0, .beta2 = adam ? adam->beta2 : 0,
          .wd = adam ? adam->weight_decay : sgd->weight_decay,
          .bias_correction = adam && !(adam->flags & TECORE_ADAM_NO_BIAS_CORRECTION)};
      te_optim_hp_from_state(&h, &hs, &dh);
      double lr = state_lr(s);
      te_h2d(st + offsetof(struct tecore_optim_state, lr), &lr, sizeof lr);
    }
    float **ep = calloc((size_t)count, sizeof *ep), **em = calloc((size_t)count, sizeof *em),
          **ev = calloc((size_t)count, sizeof *ev);
    for (int i = 0; i < count; i++) {
      ot_grad(&t[i], scaled ? 1024.0f : 1.0f);
      ot_prepare_model(&t[i]);
      ep[i] = malloc(t[i].n * 4), em[i] = malloc(t[i].n * 4), ev[i] = malloc(t[i].n * 4);
      emu_step(&t[i], &h, gsi, scaled, ep[i], em[i], ev[i]);
    }
    if (dev_state && !exec[scaled]) {
      /* captured once, with lr and step that must not matter */
      struct tecore_adam_config ca = adam ? *adam : (struct tecore_adam_config){0};
      struct tecore_sgd_config cs = sgd ? *sgd : (struct tecore_sgd_config){0};
      ca.lr = cs.lr = NAN;
      ca.step = cs.step = -5;
      ca.state = cs.state = st;
      tecore_graph_t g = NULL;
      TE_OK(tecore_stream_begin_capture(te_stream, TECORE_CAPTURE_THREAD_LOCAL));
      if (adam)
        TE_OK(tecore_adam_step(d, (size_t)count, &ca, scaled ? gsi_d : 0, flag, te_stream));
      else
        TE_OK(tecore_sgd_step(d, (size_t)count, &cs, scaled ? gsi_d : 0, flag, te_stream));
      TE_OK(tecore_stream_end_capture(te_stream, &g));
      TE_OK(tecore_graph_instantiate(&exec[scaled], g));
      TE_OK(tecore_graph_destroy(g));
    }
    if (dev_state)
      TE_OK(tecore_graph_launch(exec[scaled], te_stream));
    else if (adam)
      TE_OK(tecore_adam_step(d, (size_t)count, &ac, scaled ? gsi_d : 0, flag, te_stream));
    else
      TE_OK(tecore_sgd_step(d, (size_t)count, &sc, scaled ? gsi_d : 0, flag, te_stream));
    TE_OK(tecore_stream_synchronize(te_stream));
    for (int i = 0; i < count; i++) {
      if (adam) ref_adam(&t[i], &ac, gsi);
      else ref_sgd(&t[i], &sc, gsi);
      ot_read_and_check_model(&t[i]);
      ot_compare(&t[i], ep[i], em[i], ev[i], s);
      free(ep[i]), free(em[i]), free(ev[i]);
    }
    free(ep), free(em), free(ev);
  }
  ck_assert_int_eq(read_int(flag), 0);
  if (dev_state) {
    struct tecore_optim_state hs;
    te_d2h(&hs, st, sizeof hs);
    ck_assert_msg(hs.step == steps, "state->step %lld after %d steps", (long long)hs.step, steps);
    ck_assert_msg(hs.lr == state_lr(steps), "state->lr %g changed (wrote %g)", hs.lr,
                  state_lr(steps));
    for (int k = 0; k < 2; k++)
      if (exec[k]) TE_OK(tecore_graph_exec_destroy(exec[k]));
    TE_OK(tecore_mem_free(st));
  }
  for (int i = 0; i < count; i++) ot_free(&t[i]);
  TE_OK(tecore_mem_free(gsi_d));
  TE_OK(tecore_mem_free(flag));
  free(t);
  free(d);
}

static void run_steps(const struct spec *specs, int count, const struct tecore_adam_config *adam,
                      const struct tecore_sgd_config *sgd, int steps) {
  run_steps_mode(specs, count, adam, sgd, steps, 0);
}

#define F32 TECORE_DTYPE_F32
#define BF16 TECORE_DTYPE_BF16
#define F16 TECORE_DTYPE_F16
#define E4M3 TECORE_DTYPE_E4M3
#define E5M2 TECORE_DTYPE_E5M2

/* Odd sizes, every gradient and model type, aligned and misaligned. */
static const struct spec mixed[] = {
    {1, 0, F32, NO_MODEL},  {7, 1, BF16, BF16},     {1000003, 0, F32, E4M3},
    {33, 0, F16, F16},      {4097, 1, F32, E5M2},   {4096, 0, BF16, E4M3},
    {5000, 1, BF16, E4M3},  {1, 1, F16, E5M2},      {8191, 0, F32, BF16},
};
#define NMIXED ((int)(sizeof mixed / sizeof mixed[0]))

START_TEST(adam_multi_tensor) {
  /* eps 1e-3: with L2 decay, g + wd*p can cancel to about eps, where the
   * step divides float rounding of g + wd*p (6e-8) by eps; the float64
   * tolerance holds for lr * 6e-8 / eps < 2e-6.  The exact check holds
   * for any eps (adamw and many_tensors use 1e-6 and 1e-8). */
  struct tecore_adam_config c = {.lr = LR, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-3,
                                 .weight_decay = 0.05, .flags = 0};
  run_steps(mixed, NMIXED, &c, NULL, 4);
}
END_TEST

START_TEST(adamw_multi_tensor) {
  struct tecore_adam_config c = {.lr = LR, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6,
                                 .weight_decay = 0.1, .flags = TECORE_ADAM_W};
  run_steps(mixed, NMIXED, &c, NULL, 4);
}
END_TEST

START_TEST(adam_no_bias_correction) {
  static const struct spec s[] = {{1000, 0, F32, BF16}, {7, 1, BF16, NO_MODEL}};
  struct tecore_adam_config c = {.lr = LR, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-3,
                                 .weight_decay = 0, .flags = TECORE_ADAM_NO_BIAS_CORRECTION};
  run_steps(s, 2, &c, NULL, 3);
}
END_TEST

START_TEST(sgd_momentum) {
  struct tecore_sgd_config c = {.lr = LR, .momentum = 0.9, .dampening = 0.1,
                                .weight_decay = 0.01, .flags = 0};
  run_steps(mixed, NMIXED, NULL, &c, 3);
}
END_TEST

START_TEST(sgd_nesterov) {
  struct tecore_sgd_config c = {.lr = LR, .momentum = 0.9, .dampening = 0,
                                .weight_decay = 0.02, .flags = TECORE_SGD_NESTEROV};
  run_steps(mixed, NMIXED, NULL, &c, 3);
}
END_TEST

/* Graph-replayed steps reading step and lr from device memory: the same
 * bits as the kernel's definition with those values, the float64
 * reference with a new lr every step, and the counter advanced. */
START_TEST(adam_state_graph) {
  struct tecore_adam_config c = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-6,
                                 .weight_decay = 0.1, .flags = TECORE_ADAM_W};
  run_steps_mode(mixed, NMIXED, &c, NULL, 5, 1);
}
END_TEST

START_TEST(adam_l2_state_graph_many_tensors) {
  enum { N = TECORE_OPTIM_BATCH + 3 };   /* two launches read the same step number */
  struct spec s[N];
  for (int i = 0; i < N; i++)
    s[i] = (struct spec){1 + te_rand_below(5000), (int)te_rand_below(2), F32, BF16};
  struct tecore_adam_config c = {.beta1 = 0.8, .beta2 = 0.95, .eps = 1e-3,
                                 .weight_decay = 0.05, .flags = 0};
  run_steps_mode(s, N, &c, NULL, 3, 1);
}
END_TEST

START_TEST(sgd_state_graph) {
  /* step 1 starts the momentum buffer from the gradient: read from state */
  struct tecore_sgd_config c = {.momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01};
  run_steps_mode(mixed, NMIXED, NULL, &c, 3, 1);
}
END_TEST

START_TEST(sgd_plain) {
  /* no momentum: exp_avg is 0 and never touched */
  static const struct spec s[] = {{1000003, 1, BF16, E4M3}, {7, 0, F32, F16}};
  struct tecore_sgd_config c = {.lr = LR, .momentum = 0, .weight_decay = 0, .flags = 0};
  run_steps(s, 2, NULL, &c, 2);
}
END_TEST

/* More tensors than one launch takes (TECORE_OPTIM_BATCH), random sizes. */
START_TEST(many_tensors) {
  enum { N = 2 * TECORE_OPTIM_BATCH + 7 };
  static const tecore_dtype_t g[] = {F32, BF16, F16};
  static const tecore_dtype_t w[] = {NO_MODEL, BF16, F16, E4M3, E5M2};
  struct spec s[N];
  for (int i = 0; i < N; i++)
    s[i] = (struct spec){1 + te_rand_below(3000), (int)te_rand_below(2), g[te_rand_below(3)],
                         w[te_rand_below(5)]};
  struct tecore_adam_config c = {.lr = LR, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                                 .weight_decay = 0.01, .flags = TECORE_ADAM_W};
  run_steps(s, N, &c, NULL, 2);
}
END_TEST

/* ---- unscale ------------------------------------------------------------------------ */

static struct tecore_tensor plain(tecore_dtype_t dt, size_t n, tecore_devptr_t data) {
  struct tecore_tensor t;
  TE_OK(tecore_tensor_init(&t, dt, 1, &n, data));
  return t;
}

START_TEST(unscale_values) {
  struct pair {
    size_t n;
    tecore_dtype_t in, out;
    int off, in_place;
  } const ps[] = {{1000003, F32, F32, 0, 1}, {7, BF16, F32, 1, 0}, {4097, F16, BF16, 0, 0},
                  {1, F32, F16, 1, 0},       {33, BF16, BF16, 1, 1}, {5000, BF16, F16, 0, 1}};
  enum { NP = sizeof ps / sizeof ps[0] };
  struct tecore_tensor in[NP], out[NP];
  tecore_devptr_t bin[NP], bout[NP];
  void *hin[NP];
  float s = te_rand_float(0.25f, 2.0f);   /* not a power of two: the product rounds */
  tecore_devptr_t sd = dev_float(s), flag = dev_int(0);
  for (int i = 0; i < NP; i++) {
    tecore_devptr_t di = alloc_poisoned(ps[i].n, dsz(ps[i].in), ps[i].off, &bin[i]);
    hin[i] = malloc(ps[i].n * 4);
    for (size_t k = 0; k < ps[i].n; k++) te_st(hin[i], k, (int)ps[i].in, te_rand_float(-100, 100));
    te_h2d(di, hin[i], ps[i].n * dsz(ps[i].in));
    tecore_devptr_t dout = di;
    bout[i] = bin[i];
    if (!ps[i].in_place) dout = alloc_poisoned(ps[i].n, dsz(ps[i].out), ps[i].off, &bout[i]);
    in[i] = plain(ps[i].in, ps[i].n, di);
    out[i] = plain(ps[i].out, ps[i].n, dout);
  }
  TE_OK(tecore_unscale_multi(in, out, NP, sd, flag, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  ck_assert_msg(read_int(flag) == 0, "found_inf set for finite values");
  for (int i = 0; i < NP; i++) {
    size_t n = ps[i].n, osz = dsz(ps[i].out);
    unsigned char *got = malloc(n * osz), *want = malloc(n * osz);
    te_d2h(got, out[i].data, n * osz);
    for (size_t k = 0; k < n; k++) {
      float x = te_ld(hin[i], k, (int)ps[i].in) * s;   /* the float product */
      te_st(want, k, (int)ps[i].out, x);
    }
    char what[64];
    snprintf(what, sizeof what, "unscale pair %d (%s -> %s, n %zu)", i,
             tecore_dtype_name(ps[i].in), tecore_dtype_name(ps[i].out), n);
    te_expect_mem_eq(got, want, n * osz, what);
    check_guard(bout[i], n, osz, ps[i].off, what);
    if (!ps[i].in_place) {
      check_guard(bin[i], n, dsz(ps[i].in), ps[i].off, what);
      TE_OK(tecore_mem_free(bout[i]));
    }
    TE_OK(tecore_mem_free(bin[i]));
    free(got), free(want), free(hin[i]);
  }
  TE_OK(tecore_mem_free(sd));
  TE_OK(tecore_mem_free(flag));
}
END_TEST

/* Values that are not finite after unscaling set the flag; finite ones do not. */
START_TEST(unscale_found_inf) {
  struct {
    tecore_dtype_t in, out;
    float x, s;
    int bad;
  } const cs[] = {
      {F32, F32, INFINITY, 0.5f, 1},  {F32, F32, NAN, 0.5f, 1},      {BF16, F32, -INFINITY, 1, 1},
      {F32, F16, 70000.0f, 1.0f, 1},  {F32, F16, 60000.0f, 1.0f, 0}, {F32, F32, 3e38f, 4.0f, 1},
      {F32, BF16, FLT_MAX, 1.0f, 1},  {F16, F32, 1.0f, 0.0f, 0},     {F32, F32, 1e-30f, 1e-30f, 0},
  };
  for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
    size_t n = 1000;
    tecore_devptr_t bi, bo, sd = dev_float(cs[c].s), flag = dev_int(0);
    tecore_devptr_t di = alloc_poisoned(n, dsz(cs[c].in), 0, &bi);
    tecore_devptr_t dout = alloc_poisoned(n, dsz(cs[c].out), 0, &bo);
    void *h = malloc(n * 4);
    for (size_t k = 0; k < n; k++) te_st(h, k, (int)cs[c].in, te_rand_float(-1, 1));
    te_st(h, te_rand_below(n), (int)cs[c].in, cs[c].x);
    te_h2d(di, h, n * dsz(cs[c].in));
    struct tecore_tensor in = plain(cs[c].in, n, di), out = plain(cs[c].out, n, dout);
    TE_OK(tecore_unscale_multi(&in, &out, 1, sd, flag, te_stream));
    TE_OK(tecore_stream_synchronize(te_stream));
    ck_assert_msg(read_int(flag) == cs[c].bad, "case %zu (%g * %g, %s -> %s): found_inf %d, want %d",
                  c, (double)cs[c].x, (double)cs[c].s, tecore_dtype_name(cs[c].in),
                  tecore_dtype_name(cs[c].out), read_int(flag), cs[c].bad);
    /* the flag is only ever set, never cleared: finite values leave it as it is */
    for (size_t k = 0; k < n; k++) te_st(h, k, (int)cs[c].in, te_rand_float(-1, 1));
    te_h2d(di, h, n * dsz(cs[c].in));
    TE_OK(tecore_unscale_multi(&in, &out, 1, sd, flag, te_stream));
    TE_OK(tecore_stream_synchronize(te_stream));
    ck_assert_int_eq(read_int(flag), cs[c].bad);
    TE_OK(tecore_mem_free(bi));
    TE_OK(tecore_mem_free(bo));
    TE_OK(tecore_mem_free(sd));
    TE_OK(tecore_mem_free(flag));
    free(h);
  }
}
END_TEST

/* ---- skipping a step ------------------------------------------------------------------ */

static void snapshot(const struct ot *t, unsigned char **buf, size_t *bytes) {
  size_t n = t->n, wsz = t->wdt == NO_MODEL ? 0 : dsz(t->wdt);
  *bytes = n * 12 + n * wsz + 12;
  unsigned char *b = *buf = malloc(*bytes);
  te_d2h(b, t->dp, n * 4);
  te_d2h(b + n * 4, t->dm, n * 4);
  te_d2h(b + n * 8, t->dv, n * 4);
  if (wsz) {
    te_d2h(b + n * 12, t->dw, n * wsz);
    te_d2h(b + n * 12 + n * wsz, t->bs, 12);
  } else {
    memset(b + n * 12, 0, 12);
  }
}

/* Unscale meets an inf: the flag is set and the Adam and SGD steps that
 * read it write nothing; once cleared, the step runs. */
START_TEST(found_inf_skips_step) {
  static const struct spec s[] = {{7, 1, BF16, E4M3}, {1000003, 0, F32, BF16}, {33, 0, F32, E5M2}};
  enum { N = 3 };
  struct ot t[N];
  struct tecore_optim_tensor d[N];
  struct tecore_tensor g[N];
  for (int i = 0; i < N; i++) {
    ot_init(&t[i], s[i].n, s[i].off, s[i].gdt, s[i].wdt, 1, 1);
    d[i] = ot_desc(&t[i]);
    ot_grad(&t[i], 1024.0f);
    g[i] = plain(s[i].gdt, s[i].n, t[i].dg);
  }
  /* one step first, so the moments are not zero */
  struct tecore_adam_config c = {.lr = LR, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                                 .weight_decay = 0.01, .step = 1, .flags = TECORE_ADAM_W};
  tecore_devptr_t sd = dev_float(1.0f / 1024.0f), flag = dev_int(0);
  TE_OK(tecore_adam_step(d, N, &c, sd, flag, te_stream));
  /* an inf in the big gradient */
  float inf = INFINITY;
  te_h2d(t[1].dg + 4 * te_rand_below(s[1].n), &inf, 4);
  TE_OK(tecore_unscale_multi(g, g, N, sd, flag, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  ck_assert_msg(read_int(flag) == 1, "found_inf %d after an inf, want 1", read_int(flag));

  unsigned char *before[N], *after[N];
  size_t bytes[N];
  for (int i = 0; i < N; i++) snapshot(&t[i], &before[i], &bytes[i]);
  c.step = 2;
  TE_OK(tecore_adam_step(d, N, &c, 0, flag, te_stream));
  struct tecore_sgd_config sc = {.lr = LR, .momentum = 0.9, .step = 2};
  TE_OK(tecore_sgd_step(d, N, &sc, 0, flag, te_stream));
  /* any nonzero bits skip: a float 1.0f as well */
  float one = 1.0f;
  te_h2d(flag, &one, 4);
  TE_OK(tecore_adam_step(d, N, &c, 0, flag, te_stream));
  /* with a device step counter: skipped steps do not count */
  struct tecore_optim_state hs = {.step = 7, .lr = LR};
  tecore_devptr_t st = te_dalloc(sizeof hs);
  te_h2d(st, &hs, sizeof hs);
  struct tecore_adam_config cst = c;
  cst.state = st;
  TE_OK(tecore_adam_step(d, N, &cst, 0, flag, te_stream));
  struct tecore_sgd_config sst = sc;
  sst.state = st;
  TE_OK(tecore_sgd_step(d, N, &sst, 0, flag, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  te_d2h(&hs, st, sizeof hs);
  ck_assert_msg(hs.step == 7, "state->step %lld after skipped steps, want 7", (long long)hs.step);
  for (int i = 0; i < N; i++) {
    snapshot(&t[i], &after[i], &bytes[i]);
    te_expect_mem_eq(after[i], before[i], bytes[i], "state after a skipped step");
    free(after[i]);
  }
  /* cleared: the step runs (param changes) */
  for (int i = 0; i < N; i++) ot_grad(&t[i], 1.0f);
  TE_OK(tecore_memset_d32_async(flag, 0, 1, te_stream));
  TE_OK(tecore_unscale_multi(g, g, N, sd, flag, te_stream));
  TE_OK(tecore_adam_step(d, N, &cst, 0, flag, te_stream));   /* now it counts */
  TE_OK(tecore_stream_synchronize(te_stream));
  ck_assert_int_eq(read_int(flag), 0);
  te_d2h(&hs, st, sizeof hs);
  ck_assert_msg(hs.step == 8, "state->step %lld after a step, want 8", (long long)hs.step);
  for (int i = 0; i < N; i++) {
    snapshot(&t[i], &after[i], &bytes[i]);
    ck_assert_msg(memcmp(after[i], before[i], s[i].n * 4) != 0, "tensor %d: param unchanged", i);
    free(after[i]);
    free(before[i]);
    ot_free(&t[i]);
  }
  TE_OK(tecore_mem_free(st));
  TE_OK(tecore_mem_free(sd));
  TE_OK(tecore_mem_free(flag));
}
END_TEST

/* ---- L2 norm -------------------------------------------------------------------------- */

/* The documented order: per block, thread k's groups k, k+256, ... element
 * by element, the 256-value tree; then the partials strided over 256
 * threads, the tree again. */
static float emu_l2(void *const *h, const struct tecore_tensor *ts, int count, int *finite) {
  size_t np = 0, cap = 1024;
  double *parts = malloc(cap * sizeof *parts), a[TE_OPTIM_THREADS];
  for (int t = 0; t < count; t++) {
    size_t n = tecore_tensor_numel(&ts[t]);
    for (size_t c = 0; c * TE_RED_CHUNK < n; c++) {
      size_t start = c * TE_RED_CHUNK, end = n - start < TE_RED_CHUNK ? n : start + TE_RED_CHUNK;
      for (size_t k = 0; k < TE_OPTIM_THREADS; k++) {
        double acc = 0;
        for (size_t i = start + 4 * k; i < end; i += 4 * TE_OPTIM_THREADS)
          for (size_t q = i; q < i + 4 && q < end; q++) acc = acc + te_l2_sq(te_ld(h[t], q, (int)ts[t].dtype));
        a[k] = acc;
      }
      if (np == cap) parts = realloc(parts, (cap *= 2) * sizeof *parts);
      parts[np++] = te_l2_tree256(a);
    }
  }
  for (size_t k = 0; k < TE_OPTIM_THREADS; k++) {
    double acc = 0;
    for (size_t i = k; i < np; i += TE_OPTIM_THREADS) acc = acc + parts[i];
    a[k] = acc;
  }
  double s = te_l2_tree256(a);
  free(parts);
  *finite = isfinite(s);
  return (float)sqrt(s);
}

static void l2_case(int count, const size_t *sizes, int nan_at) {
  static const tecore_dtype_t dts[] = {F32, BF16, F16};
  struct tecore_tensor *ts = calloc((size_t)count, sizeof *ts);
  tecore_devptr_t *base = calloc((size_t)count, sizeof *base);
  void **h = calloc((size_t)count, sizeof *h);
  long double ref = 0;
  size_t want_ws = 0;
  for (int t = 0; t < count; t++) {
    tecore_dtype_t dt = dts[te_rand_below(3)];
    int off = (int)te_rand_below(2);
    size_t n = sizes[t];
    h[t] = malloc(n * 4 + 4);
    for (size_t i = 0; i < n; i++) {
      te_st(h[t], i, (int)dt, te_rand_float(-2, 2) * (t % 3 == 0 ? 1e-3f : 1.0f));
      double x = te_ld(h[t], i, (int)dt);
      ref += (long double)(x * x);
    }
    if (t == nan_at) te_st(h[t], n / 2, (int)dt, NAN);
    tecore_devptr_t dd = alloc_poisoned(n, dsz(dt), off, &base[t]);
    te_h2d(dd, h[t], n * dsz(dt));
    ts[t] = plain(dt, n, dd);
    want_ws += 8 * ((n + 16383) / 16384);
  }
  size_t ws_bytes;
  TE_OK(tecore_l2norm_multi_workspace_size(ts, (size_t)count, &ws_bytes));
  ck_assert_msg(ws_bytes == want_ws, "workspace size %zu, want %zu", ws_bytes, want_ws);
  tecore_devptr_t ws = te_dalloc(ws_bytes + 8), norm = te_dalloc(4), flag = dev_int(0);
  te_poison_dev(ws, ws_bytes + 8);
  float got[2];
  for (int r = 0; r < 2; r++) {   /* twice: the same bits */
    te_poison_dev_nan(norm, 1);
    TE_OK(tecore_l2norm_multi(ts, (size_t)count, ws, ws_bytes, norm, flag, te_stream));
    TE_OK(tecore_stream_synchronize(te_stream));
    te_d2h(&got[r], norm, 4);
  }
  int finite;
  float emu = emu_l2(h, ts, count, &finite);
  ck_assert_msg(read_int(flag) == !finite, "found_inf %d, want %d", read_int(flag), !finite);
  ck_assert_msg(te_f32_bits_of(got[0]) == te_f32_bits_of(got[1]), "two runs: %a then %a",
                (double)got[0], (double)got[1]);
  te_expect_f32_bits(got, &emu, 1, "l2 norm vs the documented order");
  if (nan_at < 0) {
    float want = (float)sqrtl(ref);
    te_expect_f32_near(got, &want, 1, 0, 1.2e-7, "l2 norm vs float64 (1 ulp)");
  } else {
    ck_assert_msg(isnan(got[0]), "norm %g with a NaN input", (double)got[0]);
  }
  /* the workspace is written only within its size */
  unsigned char tail[8];
  te_d2h(tail, ws + ws_bytes, 8);
  te_expect_bytes_eq(tail, TE_POISON_BYTE, 8, "workspace past its size");
  for (int t = 0; t < count; t++) {
    TE_OK(tecore_mem_free(base[t]));
    free(h[t]);
  }
  TE_OK(tecore_mem_free(ws));
  TE_OK(tecore_mem_free(norm));
  TE_OK(tecore_mem_free(flag));
  free(ts), free(base), free(h);
}

START_TEST(l2norm_multi_tensor) {
  static const size_t sizes[] = {1, 7, 1000003, 16384, 16385, 12345, 33};
  l2_case(7, sizes, -1);
}
END_TEST

START_TEST(l2norm_many_tensors) {
  enum { N = 130 };   /* more than one launch's worth */
  size_t sizes[N];
  for (int i = 0; i < N; i++) sizes[i] = 1 + te_rand_below(40000);
  l2_case(N, sizes, -1);
}
END_TEST

START_TEST(l2norm_nan_sets_found_inf) {
  static const size_t sizes[] = {100, 70000, 5};
  l2_case(3, sizes, 1);
}
END_TEST

START_TEST(l2norm_empty) {
  tecore_devptr_t norm = te_dalloc(4), flag = dev_int(0);
  te_poison_dev_nan(norm, 1);
  struct tecore_tensor e = plain(F32, 0, 0);
  size_t b = 1;
  TE_OK(tecore_l2norm_multi_workspace_size(&e, 1, &b));
  ck_assert_uint_eq(b, 0);
  TE_OK(tecore_l2norm_multi(&e, 1, 0, 0, norm, flag, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  float x;
  te_d2h(&x, norm, 4);
  ck_assert_msg(te_f32_bits_of(x) == 0, "norm of nothing is %a", (double)x);
  ck_assert_int_eq(read_int(flag), 0);
  TE_OK(tecore_mem_free(norm));
  TE_OK(tecore_mem_free(flag));
}
END_TEST

/* tecore_clip_grad_norm: the same norm as tecore_l2norm_multi (bits), and
 * the scale max_norm / (norm + 1e-6) in float (exact against the host's
 * float division) when the norm exceeds max_norm, exactly 1 when not, NaN
 * with a NaN norm; the scale poisoned before each call. */
START_TEST(clip_grad_norm_scale) {
  static const size_t sizes[] = {5, 70001, 16384};
  float *h[3];
  struct tecore_tensor ts[3];
  tecore_devptr_t d[3];
  for (int t = 0; t < 3; t++) {
    h[t] = malloc(sizes[t] * 4);
    for (size_t i = 0; i < sizes[t]; i++) h[t][i] = te_rand_float(-1, 1);
    d[t] = te_dalloc(sizes[t] * 4);
    te_h2d(d[t], h[t], sizes[t] * 4);
    ts[t] = plain(F32, sizes[t], d[t]);
  }
  size_t wb;
  TE_OK(tecore_l2norm_multi_workspace_size(ts, 3, &wb));
  tecore_devptr_t ws = te_dalloc(wb), n1 = te_dalloc(4), n2 = te_dalloc(4), sc = te_dalloc(4);
  TE_OK(tecore_l2norm_multi(ts, 3, ws, wb, n1, 0, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  float want_norm;
  te_d2h(&want_norm, n1, 4);
  /* about 0.58 * sqrt(86390) = 170: below, above and at the norm */
  const float maxes[4] = {want_norm * 0.25f, want_norm * (0.5f + te_rand_float(0, 0.4f)),
                          want_norm, want_norm * 3.0f};
  for (int k = 0; k < 4; k++) {
    te_poison_dev_nan(n2, 1);
    te_poison_dev_nan(sc, 1);
    TE_OK(tecore_clip_grad_norm(ts, 3, ws, wb, maxes[k], n2, sc, 0, te_stream));
    TE_OK(tecore_stream_synchronize(te_stream));
    float got_norm, got;
    te_d2h(&got_norm, n2, 4);
    te_d2h(&got, sc, 4);
    ck_assert_msg(te_f32_bits_of(got_norm) == te_f32_bits_of(want_norm),
                  "norm %a, tecore_l2norm_multi's %a", (double)got_norm, (double)want_norm);
    volatile float den = want_norm + 1e-6f;   /* float operations, as documented */
    float want = want_norm > maxes[k] ? maxes[k] / den : 1.0f;
    ck_assert_msg(te_f32_bits_of(got) == te_f32_bits_of(want),
                  "max_norm %g: scale %a, want %a (norm %g)", (double)maxes[k], (double)got,
                  (double)want, (double)want_norm);
  }
  /* a NaN gradient: a NaN scale (the step then writes NaN, as unclipped) */
  h[1][7] = NAN;
  te_h2d(d[1], h[1], sizes[1] * 4);
  TE_OK(tecore_clip_grad_norm(ts, 3, ws, wb, 1.0f, n2, sc, 0, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  float got;
  te_d2h(&got, sc, 4);
  ck_assert_msg(isnan(got), "scale %g with a NaN gradient", (double)got);
  /* arguments */
  TE_EXPECT_INVALID("max_norm", tecore_clip_grad_norm(ts, 3, ws, wb, 0.0f, n2, sc, 0, te_stream));
  TE_EXPECT_INVALID("max_norm", tecore_clip_grad_norm(ts, 3, ws, wb, NAN, n2, sc, 0, te_stream));
  TE_EXPECT_INVALID("max_norm",
                    tecore_clip_grad_norm(ts, 3, ws, wb, INFINITY, n2, sc, 0, te_stream));
  TE_EXPECT_INVALID("scale", tecore_clip_grad_norm(ts, 3, ws, wb, 1.0f, n2, 0, 0, te_stream));
  TE_EXPECT_INVALID("scale", tecore_clip_grad_norm(ts, 3, ws, wb, 1.0f, n2, sc + 2, 0, te_stream));
  TE_EXPECT_INVALID("scale", tecore_clip_grad_norm(ts, 3, ws, wb, 1.0f, n2, n2, 0, te_stream));
  TE_EXPECT_INVALID("workspace", tecore_clip_grad_norm(ts, 3, 0, wb, 1.0f, n2, sc, 0, te_stream));
  TE_EXPECT_INVALID("norm", tecore_clip_grad_norm(ts, 3, ws, wb, 1.0f, 0, sc, 0, te_stream));
  tecore_devptr_t b[] = {ws, n1, n2, sc, d[0], d[1], d[2]};
  for (int i = 0; i < 7; i++) TE_OK(tecore_mem_free(b[i]));
  for (int t = 0; t < 3; t++) free(h[t]);
}
END_TEST

/* ---- arguments ------------------------------------------------------------------------- */

/* tecore_clip_grad_norm took a scale inside a gradient it reads (the
 * final stage would write the scale into the gradient): refused, naming
 * both, and the gradient is left as it was; a scale inside the workspace
 * too. */
START_TEST(clip_grad_norm_scale_in_gradient) {
  enum { N = 1000 };
  float h[N], back[N];
  te_rand_floats(h, N, -1, 1);
  tecore_devptr_t g = te_dalloc(N * 4), n = te_dalloc(4);
  te_h2d(g, h, sizeof h);
  struct tecore_tensor t = plain(F32, N, g);
  size_t wb;
  TE_OK(tecore_l2norm_multi_workspace_size(&t, 1, &wb));
  tecore_devptr_t ws = te_dalloc(wb);
  TE_EXPECT_INVALID("scale overlaps tensors[0]",
                    tecore_clip_grad_norm(&t, 1, ws, wb, 1.0f, n, g + 4 * 17, 0, te_stream));
  TE_EXPECT_INVALID("scale",
                    tecore_clip_grad_norm(&t, 1, ws, wb, 1.0f, n, g + 4 * (N - 1), 0, te_stream));
  TE_EXPECT_INVALID("workspace", tecore_clip_grad_norm(&t, 1, ws, wb, 1.0f, n, ws, 0, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  te_d2h(back, g, sizeof back);
  ck_assert_msg(!memcmp(h, back, sizeof h), "a refused call changed the gradient");
  tecore_devptr_t b[] = {g, n, ws};
  for (int i = 0; i < 3; i++) TE_OK(tecore_mem_free(b[i]));
}
END_TEST

START_TEST(bad_arguments) {
  struct ot t[2];
  ot_init(&t[0], 100, 0, F32, E4M3, 1, 1);
  ot_init(&t[1], 100, 0, BF16, BF16, 1, 1);
  struct tecore_optim_tensor d[2] = {ot_desc(&t[0]), ot_desc(&t[1])}, b[2];
  struct tecore_adam_config a = {.lr = LR, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .step = 1};
  struct tecore_adam_config ba;
  struct tecore_sgd_config sg = {.lr = LR, .momentum = 0.9, .step = 1}, bs;
  tecore_devptr_t flag = dev_int(0);

  TE_EXPECT_INVALID("tensors", tecore_adam_step(NULL, 1, &a, 0, 0, te_stream));
  TE_EXPECT_INVALID("cfg", tecore_adam_step(d, 2, NULL, 0, 0, te_stream));
  TE_EXPECT_INVALID("grad_scale_inv", tecore_adam_step(d, 2, &a, flag + 2, 0, te_stream));
  TE_EXPECT_INVALID("found_inf", tecore_adam_step(d, 2, &a, 0, flag + 1, te_stream));
#define BAD_CFG(field, value)                                                        \
  do {                                                                               \
    ba = a;                                                                          \
    ba.field = value;                                                                \
    TE_EXPECT_INVALID(#field, tecore_adam_step(d, 2, &ba, 0, 0, te_stream));         \
  } while (0)
  BAD_CFG(lr, -1);
  BAD_CFG(lr, NAN);
  BAD_CFG(beta1, 1.0);
  BAD_CFG(beta1, -0.1);
  BAD_CFG(beta2, NAN);
  BAD_CFG(eps, -1e-8);
  BAD_CFG(weight_decay, -0.1);
  BAD_CFG(weight_decay, INFINITY);
  BAD_CFG(step, 0);
  BAD_CFG(flags, 0x80u);
  BAD_CFG(state, flag + 4);   /* not 8-byte aligned */
#define BAD_T(field, value, what)                                                    \
  do {                                                                               \
    b[0] = d[0], b[1] = d[1];                                                        \
    b[1].field = value;                                                              \
    TE_EXPECT_INVALID(what, tecore_adam_step(b, 2, &a, 0, 0, te_stream));            \
  } while (0)
  BAD_T(param, 0, "tensors[1].param");
  BAD_T(param, d[1].param + 2, "tensors[1].param");
  BAD_T(grad, 0, "tensors[1].grad");
  BAD_T(grad, d[1].grad + 1, "tensors[1].grad");
  BAD_T(grad_dtype, E4M3, "tensors[1].grad_dtype");
  BAD_T(grad_dtype, (tecore_dtype_t)99, "tensors[1].grad_dtype");
  BAD_T(exp_avg, 0, "tensors[1].exp_avg");
  BAD_T(exp_avg_sq, 0, "tensors[1].exp_avg_sq");
  BAD_T(exp_avg_sq, d[1].exp_avg_sq + 1, "tensors[1].exp_avg_sq");
  BAD_T(model_dtype, F32, "tensors[1].model_dtype");
  BAD_T(model_scale, t[0].bs, "model_scale");      /* a BF16 model has no scale */
  BAD_T(numel, (size_t)1 << 62, "tensors[1].numel");
  b[0] = d[0], b[1] = d[1];
  b[0].model_scale = 0;                              /* FP8 without its scale */
  TE_EXPECT_INVALID("tensors[0].model_scale", tecore_adam_step(b, 2, &a, 0, 0, te_stream));
  b[0] = d[0];
  b[0].model_amax = d[0].model_amax + 2;
  TE_EXPECT_INVALID("tensors[0].model_amax", tecore_adam_step(b, 2, &a, 0, 0, te_stream));
  b[0] = d[0];
  b[0].model = 0;                                    /* scale and amax without a model */
  TE_EXPECT_INVALID("tensors[0].model", tecore_adam_step(b, 2, &a, 0, 0, te_stream));

  /* an error in tensors[1] queues nothing, not even tensors[0]'s update */
  float before[100], after[100];
  te_d2h(before, t[0].dp, sizeof before);
  b[0] = d[0], b[1] = d[1];
  b[1].grad = 0;
  TE_EXPECT_INVALID("grad", tecore_adam_step(b, 2, &a, 0, 0, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  te_d2h(after, t[0].dp, sizeof after);
  te_expect_mem_eq(after, before, sizeof after, "param after a refused call");

  /* empty calls and empty tensors (whose pointers are not looked at) succeed */
  TE_OK(tecore_adam_step(NULL, 0, &a, 0, 0, te_stream));
  struct tecore_optim_tensor empty = {.numel = 0};
  TE_OK(tecore_adam_step(&empty, 1, &a, 0, 0, te_stream));
  TE_OK(tecore_sgd_step(&empty, 1, &sg, 0, 0, te_stream));

  /* SGD */
  TE_EXPECT_INVALID("cfg", tecore_sgd_step(d, 2, NULL, 0, 0, te_stream));
  bs = sg, bs.momentum = -0.5;
  TE_EXPECT_INVALID("momentum", tecore_sgd_step(d, 2, &bs, 0, 0, te_stream));
  bs = sg, bs.flags = TECORE_SGD_NESTEROV, bs.dampening = 0.5;
  TE_EXPECT_INVALID("Nesterov", tecore_sgd_step(d, 2, &bs, 0, 0, te_stream));
  bs = sg, bs.flags = TECORE_SGD_NESTEROV, bs.momentum = 0;
  TE_EXPECT_INVALID("Nesterov", tecore_sgd_step(d, 2, &bs, 0, 0, te_stream));
  bs = sg, bs.dampening = NAN;
  TE_EXPECT_INVALID("dampening", tecore_sgd_step(d, 2, &bs, 0, 0, te_stream));
  bs = sg, bs.step = -3;
  TE_EXPECT_INVALID("step", tecore_sgd_step(d, 2, &bs, 0, 0, te_stream));
  bs = sg, bs.flags = 0x4;
  TE_EXPECT_INVALID("flags", tecore_sgd_step(d, 2, &bs, 0, 0, te_stream));
  b[0] = d[0], b[1] = d[1];
  b[1].exp_avg = 0;   /* momentum needs its buffer; SGD never needs exp_avg_sq */
  b[1].exp_avg_sq = 0;
  TE_EXPECT_INVALID("tensors[1].exp_avg", tecore_sgd_step(b, 2, &sg, 0, 0, te_stream));

  /* L2 norm */
  struct tecore_tensor pt[2] = {plain(F32, 100, t[0].dp), plain(BF16, 100, t[1].dg)};
  size_t wb;
  TE_EXPECT_INVALID("bytes", tecore_l2norm_multi_workspace_size(pt, 2, NULL));
  TE_EXPECT_INVALID("tensors", tecore_l2norm_multi_workspace_size(NULL, 2, &wb));
  TE_OK(tecore_l2norm_multi_workspace_size(pt, 2, &wb));
  tecore_devptr_t ws = te_dalloc(wb), nrm = te_dalloc(4);
  TE_EXPECT_INVALID("workspace_bytes", tecore_l2norm_multi(pt, 2, ws, wb - 8, nrm, 0, te_stream));
  TE_EXPECT_INVALID("workspace", tecore_l2norm_multi(pt, 2, 0, wb, nrm, 0, te_stream));
  TE_EXPECT_INVALID("workspace", tecore_l2norm_multi(pt, 2, ws + 4, wb, nrm, 0, te_stream));
  TE_EXPECT_INVALID("norm", tecore_l2norm_multi(pt, 2, ws, wb, 0, 0, te_stream));
  TE_EXPECT_INVALID("norm", tecore_l2norm_multi(pt, 2, ws, wb, nrm + 1, 0, te_stream));
  TE_EXPECT_INVALID("found_inf", tecore_l2norm_multi(pt, 2, ws, wb, nrm, flag + 2, te_stream));
  struct tecore_tensor bt[2] = {pt[0], pt[1]};
  bt[1].dtype = E4M3;
  TE_EXPECT_INVALID("tensors[1]", tecore_l2norm_multi(bt, 2, ws, wb, nrm, 0, te_stream));
  bt[1] = pt[1];
  bt[1].data = 0;
  TE_EXPECT_INVALID("tensors[1]", tecore_l2norm_multi(bt, 2, ws, wb, nrm, 0, te_stream));

  /* unscale */
  tecore_devptr_t sc = dev_float(0.5f);
  TE_EXPECT_INVALID("in", tecore_unscale_multi(NULL, pt, 1, sc, 0, te_stream));
  TE_EXPECT_INVALID("out", tecore_unscale_multi(pt, NULL, 1, sc, 0, te_stream));
  TE_EXPECT_INVALID("scale", tecore_unscale_multi(pt, pt, 1, 0, 0, te_stream));
  TE_EXPECT_INVALID("scale", tecore_unscale_multi(pt, pt, 1, sc + 1, 0, te_stream));
  TE_EXPECT_INVALID("found_inf", tecore_unscale_multi(pt, pt, 1, sc, flag + 3, te_stream));
  bt[0] = plain(F32, 99, t[0].dm);
  TE_EXPECT_INVALID("out[0]", tecore_unscale_multi(pt, bt, 1, sc, 0, te_stream));
  bt[0] = plain(F32, 100, t[0].dp + 8);   /* overlapping, not the same buffer */
  TE_EXPECT_INVALID("overlaps", tecore_unscale_multi(pt, bt, 1, sc, 0, te_stream));
  bt[0] = plain(BF16, 100, t[0].dp);      /* the same start, another element size */
  TE_EXPECT_INVALID("overlaps", tecore_unscale_multi(pt, bt, 1, sc, 0, te_stream));
  bt[0] = plain(E5M2, 100, t[0].dm);
  TE_EXPECT_INVALID("out[0]", tecore_unscale_multi(pt, bt, 1, sc, 0, te_stream));
  TE_OK(tecore_unscale_multi(NULL, NULL, 0, sc, 0, te_stream));

  TE_OK(tecore_stream_synchronize(te_stream));
  TE_OK(tecore_mem_free(ws));
  TE_OK(tecore_mem_free(nrm));
  TE_OK(tecore_mem_free(sc));
  TE_OK(tecore_mem_free(flag));
  ot_free(&t[0]);
  ot_free(&t[1]);
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("optim");
  TCase *tc = te_tcase(s, "adam", 1);
  tcase_add_test(tc, adam_multi_tensor);
  tcase_add_test(tc, adamw_multi_tensor);
  tcase_add_test(tc, adam_no_bias_correction);
  tcase_add_test(tc, many_tensors);
  tc = te_tcase(s, "sgd", 1);
  tcase_add_test(tc, adam_state_graph);
  tcase_add_test(tc, adam_l2_state_graph_many_tensors);
  tcase_add_test(tc, sgd_state_graph);
  tcase_add_test(tc, sgd_momentum);
  tcase_add_test(tc, sgd_nesterov);
  tcase_add_test(tc, sgd_plain);
  tc = te_tcase(s, "loss_scaling", 1);
  tcase_add_test(tc, unscale_values);
  tcase_add_test(tc, unscale_found_inf);
  tcase_add_test(tc, found_inf_skips_step);
  tc = te_tcase(s, "l2norm", 1);
  tcase_add_test(tc, l2norm_multi_tensor);
  tcase_add_test(tc, l2norm_many_tensors);
  tcase_add_test(tc, l2norm_nan_sets_found_inf);
  tcase_add_test(tc, l2norm_empty);
  tcase_add_test(tc, clip_grad_norm_scale);
  tcase_add_test(tc, clip_grad_norm_scale_in_gradient);
  tc = te_tcase(s, "arguments", 1);
  tcase_add_test(tc, bad_arguments);
  return s;
}

TE_TEST_MAIN(make_suite, TE_TEST_DEVICE)
