/* SPDX-License-Identifier: Apache-2.0 */
/* check_xent.c -- fused softmax + cross-entropy (te/loss.h) against a
 * float64 reference: BF16 and F32 logits, ignore_index, label smoothing,
 * the vector and element paths, a vocabulary of 50304, the mean, the
 * in-place backward with per-token and mean gradients, the backward into
 * another tensor (FP8 under delayed and current scaling, BF16), a finite-difference
 * check of dlogits, the vocabulary-parallel callback with two simulated
 * ranks (threads) matching the whole vocabulary, the one-pass forward +
 * backward against the two calls bit for bit, and every bad argument.
 * Fresh random logits in [-8, 8), outputs poisoned with NaN. */
#include "parts_util.h"
#include <pthread.h>
#include <te/loss.h>

#define IGN (-100)

struct xref {
  double *lse, *loss, mean, count;
};

static void ref_fwd(const float *x, const int32_t *lab, int T, int V, double eps, struct xref *r) {
  r->mean = 0;
  r->count = 0;
  for (int t = 0; t < T; t++) {
    const float *row = x + (size_t)t * V;
    double m = -INFINITY, s = 0, sx = 0;
    for (int j = 0; j < V; j++) m = fmax(m, row[j]);
    for (int j = 0; j < V; j++) { s += exp(row[j] - m); sx += row[j]; }
    r->lse[t] = m + log(s);
    r->loss[t] = lab[t] == IGN ? 0 : r->lse[t] - (1 - eps) * row[lab[t]] - eps / V * sx;
    if (lab[t] != IGN) { r->mean += r->loss[t]; r->count++; }
  }
  if (r->count) r->mean /= r->count;
}

static double ref_grad(const float *x, const int32_t *lab, int t, int j, int V, double eps,
                       double lse, double dl) {
  if (lab[t] == IGN) return 0;
  double p = exp(x[(size_t)t * V + j] - lse);
  return dl * (p - (j == lab[t] ? 1 - eps : 0) - eps / V);
}

static void rand_labels(int32_t *lab, int T, int V) {
  for (int t = 0; t < T; t++) lab[t] = t % 4 == 1 ? IGN : (int32_t)te_rand_below(V);
}

/* One case: forward (loss, lse, mean), then the backward in place. */
static void run_case(tecore_dtype_t dt, int T, int V, float eps, int mean_mode) {
  size_t n = (size_t)T * V;
  float *x = malloc(n * 4), *g = malloc(n * 4), got[4096], m2[2];
  int32_t *lab = malloc(T * 4);
  double *rl = malloc(T * 8 * 2);
  struct xref r = {.lse = rl, .loss = rl + T};
  te_rand_floats(x, n, -8.0f, 8.0f);
  rand_labels(lab, T, V);
  tecore_devptr_t dx = pu_upload(x, n, dt), dlab = pu_upload_i32(lab, T);
  tecore_devptr_t out = te_dalloc(4 * (size_t)T * 3 + 64), loss = out, lse = out + 4 * T,
                  dloss = out + 8 * T, mean = out + 12 * T;
  te_poison_dev_nan(out, 3 * T + 2);
  struct tecore_tensor lt = pu_tensor2(dt, T, V, dx);
  struct tecore_xent_args a = {.logits = &lt, .labels = dlab, .ignore_index = IGN,
                               .label_smoothing = eps};
  TE_OK(tecore_xent_fwd(&a, loss, lse, mean, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  ref_fwd(x, lab, T, V, eps, &r);
  te_d2h(got, loss, 4 * T);
  for (int t = 0; t < T; t++)
    ck_assert_msg(fabs(got[t] - r.loss[t]) <= 2e-5 * (1 + fabs(r.loss[t])) + 1e-7 * V * eps * 8,
                  "V %d eps %g loss[%d] got %.8g want %.8g", V, eps, t, got[t], r.loss[t]);
  te_d2h(got, lse, 4 * T);
  for (int t = 0; t < T; t++)
    ck_assert_msg(fabs(got[t] - r.lse[t]) <= 2e-5 * (1 + fabs(r.lse[t])), "lse[%d] got %.8g want %.8g",
                  t, got[t], r.lse[t]);
  te_d2h(m2, mean, 8);
  ck_assert_msg(m2[1] == (float)r.count, "count got %g want %g", m2[1], r.count);
  ck_assert_msg(fabs(m2[0] - r.mean) <= 3e-5 * (1 + fabs(r.mean)), "mean got %.8g want %.8g", m2[0],
                r.mean);
  /* backward */
  float dls[4096];
  for (int t = 0; t < T; t++) dls[t] = te_rand_float(0.5f, 2.0f);
  if (mean_mode) dls[0] = 1.5f;
  te_h2d(dloss, dls, 4 * (mean_mode ? 1 : T));
  TE_OK(tecore_xent_bwd(&a, lse, dloss, mean_mode ? mean : 0,
                        mean_mode ? TECORE_XENT_DLOSS_MEAN : 0, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  pu_download(g, dx, n, dt);
  double rel = dt == TECORE_DTYPE_BF16 ? 8e-3 : 2e-5;
  for (int t = 0; t < T; t++)
    for (int j = 0; j < V; j++) {
      double dl = mean_mode ? dls[0] / r.count : dls[t];
      double w = ref_grad(x, lab, t, j, V, eps, r.lse[t], dl), gv = g[(size_t)t * V + j];
      ck_assert_msg(fabs(gv - w) <= rel * fabs(w) + 1e-6 * fabs(dl),
                    "dlogits[%d][%d] got %.8g want %.8g (V %d)", t, j, gv, w, V);
    }
  TE_OK(tecore_mem_free(dx));
  TE_OK(tecore_mem_free(dlab));
  TE_OK(tecore_mem_free(out));
  free(x); free(g); free(lab); free(rl);
}

START_TEST(xent_values) {
  run_case(TECORE_DTYPE_F32, 13, 1000, 0.0f, 0);
  run_case(TECORE_DTYPE_BF16, 13, 1000, 0.1f, 1);
  run_case(TECORE_DTYPE_F32, 9, 997, 0.2f, 1);   /* element path */
  run_case(TECORE_DTYPE_BF16, 7, 33, 0.0f, 0);
}
END_TEST

START_TEST(xent_vocab_50304) {
  run_case(TECORE_DTYPE_BF16, 3, 50304, 0.1f, 1);
}
END_TEST

/* dlogits of the mean against central differences of the mean (f32, V 7). */
/* The backward into args->dlogits (logits left as they are): E5M2 under a
 * delayed scale (a power of two; amax max-accumulated onto a small value
 * already there), E4M3 under current scaling (the amax pass, then the
 * scale from it), and a BF16 copy; the vector and element paths.  Each
 * code decoded times scale_inv against the float64 gradient of the same
 * (dtype-rounded) logits, within half an ulp of the output (2^-3 relative
 * for E5M2, 2^-4 for E4M3, 2^-8 for BF16), half the smallest subnormal,
 * and 1e-6 of the gradient's scale (the float math, as run_case); the
 * amax against the largest |gradient|. */
static void fp8_out_case(tecore_dtype_t dt, int T, int V, tecore_dtype_t odt, int current) {
  size_t n = (size_t)T * V;
  float *x = malloc(n * 4), *x2 = malloc(n * 4);
  int32_t *lab = malloc(T * 4);
  double *rl = malloc(T * 8 * 2);
  unsigned char *codes = malloc(n * 2);
  struct xref r = {.lse = rl, .loss = rl + T};
  te_rand_floats(x, n, -8.0f, 8.0f);
  for (size_t i = 0; i < n; i++) x[i] = pu_round(x[i], dt);
  rand_labels(lab, T, V);
  int f8 = odt == TECORE_DTYPE_E4M3 || odt == TECORE_DTYPE_E5M2;
  tecore_devptr_t dx = pu_upload(x, n, dt), dlab = pu_upload_i32(lab, T);
  tecore_devptr_t out = te_dalloc(4 * (size_t)T * 3 + 64), loss = out, lse = out + 4 * T,
                  dloss = out + 8 * T, mean = out + 12 * T;
  tecore_devptr_t y = te_dalloc(n * 2 + 64), st = te_dalloc(64);
  te_poison_dev(y, n * 2);
  struct tecore_tensor lt = pu_tensor2(dt, T, V, dx), yt = pu_tensor2(odt, T, V, y);
  float sc = 64.0f, am0 = 1e-9f;
  if (f8) {
    te_h2d(st, &sc, 4);
    te_h2d(st + 8, &am0, 4);
    te_poison_dev_nan(st + 4, 1);
    yt.scaling = current ? TECORE_SCALING_CURRENT : TECORE_SCALING_DELAYED;
    yt.scale = st;
    yt.scale_inv = st + 4;
    yt.amax = st + 8;
  }
  struct tecore_xent_args a = {.logits = &lt, .labels = dlab, .ignore_index = IGN,
                               .label_smoothing = 0.1f, .dlogits = &yt};
  TE_OK(tecore_xent_fwd(&a, loss, lse, mean, te_stream));
  float dl = 1.5f;
  te_h2d(dloss, &dl, 4);
  TE_OK(tecore_xent_bwd(&a, lse, dloss, mean, TECORE_XENT_DLOSS_MEAN, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  ref_fwd(x, lab, T, V, 0.1, &r);
  pu_download(x2, dx, n, dt);
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(x2[i] == x[i], "logits[%zu] changed: %g -> %g", i, x[i], x2[i]);
  float si = 1.0f, amax = 0.0f;
  if (f8) {
    float h[3];
    te_d2h(h, st, 12);
    si = h[1];
    amax = h[2];
    if (!current) ck_assert_msg(si == 1.0f / sc, "scale_inv %g, want 1/%g", si, sc);
    ck_assert_msg(isfinite(si) && si > 0, "scale_inv %g", si);
    te_d2h(codes, y, n);
  } else {
    pu_download(x2, y, n, odt);
  }
  double want_amax = am0;
  double ulp = odt == TECORE_DTYPE_E5M2 ? 0.125 : odt == TECORE_DTYPE_E4M3 ? 0.0625 : 1.0 / 256;
  double sub = odt == TECORE_DTYPE_E5M2 ? 0x1p-17 : odt == TECORE_DTYPE_E4M3 ? 0x1p-10 : 0;
  for (int t = 0; t < T; t++)
    for (int j = 0; j < V; j++) {
      size_t i = (size_t)t * V + j;
      double w = ref_grad(x, lab, t, j, V, 0.1, r.lse[t], dl / r.count);
      want_amax = fmax(want_amax, fabs(w));
      double g = !f8 ? x2[i]
                 : (odt == TECORE_DTYPE_E5M2 ? tecore_e5m2_to_f32(codes[i])
                                             : tecore_e4m3_to_f32(codes[i])) * (double)si;
      /* the rounding to odt, and the float math's own error: p - eps/V
       * cancels, so an absolute term in the row's gradient scale, as
       * run_case's 1e-6 |dloss| */
      double tol = ulp * fabs(w) * 1.001 + sub * si + 1e-6 * dl / r.count;
      ck_assert_msg(fabs(g - w) <= tol, "%s dlogits[%d][%d] got %.8g want %.8g (V %d)",
                    tecore_dtype_name(odt), t, j, g, w, V);
    }
  if (f8)
    ck_assert_msg(fabs(amax - want_amax) <= 1e-5 * want_amax, "amax %.9g, want %.9g", amax,
                  want_amax);
  TE_OK(tecore_mem_free(dx));
  TE_OK(tecore_mem_free(dlab));
  TE_OK(tecore_mem_free(out));
  TE_OK(tecore_mem_free(y));
  TE_OK(tecore_mem_free(st));
  free(x); free(x2); free(lab); free(rl); free(codes);
}

START_TEST(xent_bwd_into_fp8) {
  fp8_out_case(TECORE_DTYPE_BF16, 11, 1000, TECORE_DTYPE_E5M2, 0);
  fp8_out_case(TECORE_DTYPE_BF16, 7, 997, TECORE_DTYPE_E5M2, 0);   /* element path */
  fp8_out_case(TECORE_DTYPE_F32, 9, 1000, TECORE_DTYPE_E4M3, 1);
  fp8_out_case(TECORE_DTYPE_BF16, 5, 1000, TECORE_DTYPE_E4M3, 1);
  fp8_out_case(TECORE_DTYPE_BF16, 5, 1000, TECORE_DTYPE_BF16, 0);
  fp8_out_case(TECORE_DTYPE_F32, 5, 333, TECORE_DTYPE_BF16, 0);
}
END_TEST

/* FP8 dlogits over the logits' own bytes (args->dlogits->data == the
 * logits'), the first ws_rows rows through the workspace: the same codes,
 * amax and scale_inv, bit for bit, as into a buffer of their own; per-token
 * dloss (mean 0) when per_token.  The workspace and the rest of the
 * logits' buffer are poisoned. */
static void inplace8_case(tecore_dtype_t dt, int T, int V, tecore_dtype_t odt, int ws_rows,
                          int per_token) {
  size_t n = (size_t)T * V;
  float *x = malloc(n * 4), *dls = malloc(T * 4);
  int32_t *lab = malloc(T * 4);
  unsigned char *want = malloc(n), *got = malloc(n);
  te_rand_floats(x, n, -8.0f, 8.0f);
  te_rand_floats(dls, T, 0.5f, 2.0f);
  rand_labels(lab, T, V);
  lab[T / 2] = IGN;
  tecore_devptr_t dlab = pu_upload_i32(lab, T);
  tecore_devptr_t out = te_dalloc(4 * (size_t)T * 3 + 64), loss = out, lse = out + 4 * T,
                  dloss = out + 8 * T, mean = out + 12 * T;
  tecore_devptr_t ws = te_dalloc((size_t)ws_rows * V + 64), st = te_dalloc(64);
  float h[2][3];
  for (int inplace = 0; inplace < 2; inplace++) {
    tecore_devptr_t dx = pu_upload(x, n, dt);
    tecore_devptr_t y = inplace ? dx : te_dalloc(n + 64);
    if (!inplace) te_poison_dev(y, n);
    te_poison_dev(ws, (size_t)ws_rows * V);
    float sc = 32.0f, am0 = 1e-9f;
    te_h2d(st, &sc, 4);
    te_h2d(st + 8, &am0, 4);
    te_poison_dev_nan(st + 4, 1);
    struct tecore_tensor lt = pu_tensor2(dt, T, V, dx), yt = pu_tensor2(odt, T, V, y);
    yt.scaling = TECORE_SCALING_DELAYED;
    yt.scale = st;
    yt.scale_inv = st + 4;
    yt.amax = st + 8;
    struct tecore_xent_args a = {.logits = &lt, .labels = dlab, .ignore_index = IGN,
                                 .label_smoothing = 0.1f, .dlogits = &yt, .workspace = ws,
                                 .workspace_bytes = (size_t)ws_rows * V};
    TE_OK(tecore_xent_fwd(&a, loss, lse, per_token ? 0 : mean, te_stream));
    float dl = 1.5f;
    if (per_token) te_h2d(dloss, dls, T * 4);
    else te_h2d(dloss, &dl, 4);
    TE_OK(tecore_xent_bwd(&a, lse, dloss, per_token ? 0 : mean,
                          per_token ? 0 : TECORE_XENT_DLOSS_MEAN, te_stream));
    TE_OK(tecore_stream_synchronize(te_stream));
    te_d2h(inplace ? got : want, y, n);
    te_d2h(h[inplace], st, 12);
    if (!inplace) TE_OK(tecore_mem_free(y));
    TE_OK(tecore_mem_free(dx));
  }
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(got[i] == want[i], "%s over %s logits [%d][%d], %d workspace rows: code "
                  "[%zu][%zu] 0x%02x, into its own buffer 0x%02x", tecore_dtype_name(odt),
                  tecore_dtype_name(dt), T, V, ws_rows, i / V, i % V, got[i], want[i]);
  ck_assert_msg(h[0][1] == h[1][1] && h[0][2] == h[1][2],
                "scale_inv %g / amax %g in place, %g / %g into its own buffer", h[1][1], h[1][2],
                h[0][1], h[0][2]);
  ck_assert_msg(h[1][2] > 0 && isfinite(h[1][1]), "amax %g, scale_inv %g", h[1][2], h[1][1]);
  TE_OK(tecore_mem_free(dlab));
  TE_OK(tecore_mem_free(out));
  TE_OK(tecore_mem_free(ws));
  TE_OK(tecore_mem_free(st));
  free(x);
  free(dls);
  free(lab);
  free(want);
  free(got);
}

START_TEST(xent_bwd_fp8_in_place) {
  int T = 37 + (int)te_rand_below(20);
  inplace8_case(TECORE_DTYPE_BF16, T, 1000, TECORE_DTYPE_E5M2, 1, 0);
  inplace8_case(TECORE_DTYPE_BF16, T, 1000, TECORE_DTYPE_E5M2, 1 + (int)te_rand_below(9), 1);
  inplace8_case(TECORE_DTYPE_BF16, T, 997, TECORE_DTYPE_E4M3, 3, 0);   /* element path */
  inplace8_case(TECORE_DTYPE_F32, T, 1000, TECORE_DTYPE_E5M2, 1, 1);   /* slices grow 4x */
  inplace8_case(TECORE_DTYPE_BF16, 5, 1000, TECORE_DTYPE_E5M2, 64, 0); /* all in the workspace */
}
END_TEST

/* tecore_xent_fwd_bwd against tecore_xent_fwd then tecore_xent_bwd on
 * the same logits: loss, lse, mean and every dlogits byte the same, bit
 * for bit (outputs poisoned), and the one-pass loss against the float64
 * reference.  out: 0 dlogits over the logits (16-bit), 1 E5M2 into a
 * buffer of its own (delayed), 2 E5M2 over the logits (delayed, the
 * slices), 3 E4M3 current-scaled (two calls inside).  Labels include
 * ignored and (bad) out-of-range ids: the NaN rows must match too. */
static void fused_case(tecore_dtype_t dt, int T, int V, float eps, int mean_mode, int out) {
  size_t n = (size_t)T * V, es = tecore_dtype_size(dt);
  float *x = malloc(n * 4), *dls = malloc(T * 4);
  int32_t *lab = malloc(T * 4);
  double *rl = malloc(T * 8 * 2);
  struct xref r = {.lse = rl, .loss = rl + T};
  size_t gbytes = out == 0 ? n * es : n;
  unsigned char *g[2] = {malloc(gbytes), malloc(gbytes)};
  float o[2][3 * 4096 + 2], h[2][3];
  te_rand_floats(x, n, -8.0f, 8.0f);
  for (size_t i = 0; i < n; i++) x[i] = pu_round(x[i], dt);
  te_rand_floats(dls, T, 0.5f, 2.0f);
  rand_labels(lab, T, V);
  if (T > 3) lab[3] = V + 5;   /* out of range: a NaN loss and row */
  tecore_devptr_t dlab = pu_upload_i32(lab, T);
  tecore_devptr_t ws = te_dalloc(2 * (size_t)V + 64), st = te_dalloc(64);
  for (int fused = 0; fused < 2; fused++) {
    tecore_devptr_t dx = pu_upload(x, n, dt);
    tecore_devptr_t res = te_dalloc(4 * ((size_t)T * 3 + 2) + 64), loss = res, lse = res + 4 * T,
                    mean = res + 8 * T, dloss = res + 8 * T + 16;
    te_poison_dev_nan(res, 2 * T + 2);
    te_h2d(dloss, dls, 4 * (mean_mode ? 1 : T));
    tecore_devptr_t y = out == 1 || out == 3 ? te_dalloc(n + 64) : dx;
    if (y != dx) te_poison_dev(y, n);
    te_poison_dev(ws, 2 * (size_t)V);
    float sc = 16.0f, am0 = 1e-9f;
    te_h2d(st, &sc, 4);
    te_h2d(st + 8, &am0, 4);
    te_poison_dev_nan(st + 4, 1);
    struct tecore_tensor lt = pu_tensor2(dt, T, V, dx);
    struct tecore_tensor yt = pu_tensor2(out == 3 ? TECORE_DTYPE_E4M3 : TECORE_DTYPE_E5M2, T, V, y);
    yt.scaling = out == 3 ? TECORE_SCALING_CURRENT : TECORE_SCALING_DELAYED;
    yt.scale = st;
    yt.scale_inv = st + 4;
    yt.amax = st + 8;
    struct tecore_xent_args a = {.logits = &lt, .labels = dlab, .ignore_index = IGN,
                                 .label_smoothing = eps, .dlogits = out ? &yt : NULL,
                                 .workspace = ws, .workspace_bytes = 2 * (size_t)V};
    unsigned fl = mean_mode ? TECORE_XENT_DLOSS_MEAN : 0;
    /* the mean is the forward's output with per-token gradients too */
    if (fused) {
      TE_OK(tecore_xent_fwd_bwd(&a, loss, lse, mean, dloss, fl, te_stream));
    } else {
      TE_OK(tecore_xent_fwd(&a, loss, lse, mean, te_stream));
      TE_OK(tecore_xent_bwd(&a, lse, dloss, mean_mode ? mean : 0, fl, te_stream));
    }
    TE_OK(tecore_stream_synchronize(te_stream));
    te_d2h(o[fused], res, 4 * ((size_t)2 * T + 2));
    te_d2h(g[fused], y, gbytes);
    te_d2h(h[fused], st, 12);
    if (y != dx) TE_OK(tecore_mem_free(y));
    TE_OK(tecore_mem_free(dx));
    TE_OK(tecore_mem_free(res));
  }
  const char *what = out == 0 ? "in place" : out == 1 ? "E5M2 own buffer" : out == 2 ? "E5M2 over"
                                                                                     : "E4M3 current";
  ck_assert_msg(memcmp(o[0], o[1], 4 * ((size_t)2 * T + 2)) == 0,
                "%s [%d][%d]: loss/lse/mean differ between one pass and two calls", what, T, V);
  for (size_t i = 0; i < gbytes; i++)
    ck_assert_msg(g[0][i] == g[1][i], "%s [%d][%d] %s: dlogits byte %zu 0x%02x one pass, 0x%02x "
                  "two calls", what, T, V, tecore_dtype_name(dt), i, g[1][i], g[0][i]);
  if (out) ck_assert_msg(memcmp(h[0], h[1], 12) == 0, "%s: scale/scale_inv/amax differ", what);
  /* the one-pass loss against float64 (the bad label's row: NaN) */
  int bad = T > 3 ? 3 : -1;
  if (bad >= 0) lab[bad] = IGN;   /* the reference skips it */
  ref_fwd(x, lab, T, V, eps, &r);
  for (int t = 0; t < T; t++) {
    if (t == bad) {
      ck_assert_msg(isnan(o[1][t]), "loss[%d] of an out-of-range label is %g", t, o[1][t]);
      continue;
    }
    ck_assert_msg(fabs(o[1][t] - r.loss[t]) <= 2e-5 * (1 + fabs(r.loss[t])) + 1e-7 * V * eps * 8,
                  "one pass: loss[%d] got %.8g want %.8g", t, o[1][t], r.loss[t]);
  }
  free(x); free(dls); free(lab); free(rl); free(g[0]); free(g[1]);
  TE_OK(tecore_mem_free(dlab));
  TE_OK(tecore_mem_free(ws));
  TE_OK(tecore_mem_free(st));
}

START_TEST(xent_fwd_bwd_one_pass) {
  int T = 3 + (int)te_rand_below(40);
  fused_case(TECORE_DTYPE_BF16, T, 1000, 0.0f, 1, 0);
  fused_case(TECORE_DTYPE_BF16, T, 1000, 0.1f, 0, 0);
  fused_case(TECORE_DTYPE_F32, T, 1000, 0.1f, 1, 0);
  fused_case(TECORE_DTYPE_BF16, T, 997, 0.0f, 1, 0);   /* element path: two calls */
  fused_case(TECORE_DTYPE_BF16, T, 1000, 0.1f, 1, 1);
  fused_case(TECORE_DTYPE_BF16, T, 1000, 0.0f, 1, 2);
  fused_case(TECORE_DTYPE_F32, T, 1000, 0.1f, 0, 2);
  fused_case(TECORE_DTYPE_BF16, T, 1000, 0.0f, 1, 3);
  fused_case(TECORE_DTYPE_BF16, 2, 50304, 0.1f, 1, 0);
  /* more rows than an H100's 264 blocks (each block takes several rows,
   * the next copied in during the gradient of the one before) and rows of
   * several copy batches a thread (the sums wait for them one by one);
   * on vdev, whose twin has no blocks to loop, a few rows (its memory
   * makes 300 rows take 25 s) */
  int Tl = te_backend_kind == TECORE_BACKEND_CUDA ? 270 + (int)te_rand_below(60)
                                                  : 4 + (int)te_rand_below(8);
  fused_case(TECORE_DTYPE_BF16, Tl, 20000, 0.0f, 1, 0);
  fused_case(TECORE_DTYPE_F32, Tl, 20000, 0.1f, 0, 1);
}
END_TEST

/* The one-pass call's own refusals: the mean flag without mean, unknown
 * flags, a loss overlapping lse; nothing written. */
START_TEST(xent_fwd_bwd_bad_arguments) {
  int T = 4, V = 64;
  float x[4 * 64];
  int32_t lab[4];
  te_rand_floats(x, (size_t)T * V, -4.0f, 4.0f);
  rand_labels(lab, T, V);
  tecore_devptr_t dx = pu_upload(x, (size_t)T * V, TECORE_DTYPE_F32), dlab = pu_upload_i32(lab, T);
  tecore_devptr_t o = te_dalloc(256);
  struct tecore_tensor lt = pu_tensor2(TECORE_DTYPE_F32, T, V, dx);
  struct tecore_xent_args a = {.logits = &lt, .labels = dlab, .ignore_index = IGN};
  TE_EXPECT_INVALID("mean", tecore_xent_fwd_bwd(&a, o, o + 16, 0, o + 64, TECORE_XENT_DLOSS_MEAN,
                                                te_stream));
  TE_EXPECT_INVALID("flags", tecore_xent_fwd_bwd(&a, o, o + 16, 0, o + 64, 0x8, te_stream));
  TE_EXPECT_INVALID("loss overlaps lse", tecore_xent_fwd_bwd(&a, o, o + 8, 0, o + 64, 0, te_stream));
  TE_EXPECT_INVALID("loss", tecore_xent_fwd_bwd(&a, 0, o + 16, 0, o + 64, 0, te_stream));
  TE_EXPECT_INVALID("args", tecore_xent_fwd_bwd(NULL, o, o + 16, 0, o + 64, 0, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  float back[4 * 64];
  te_d2h(back, dx, sizeof back);
  ck_assert_msg(memcmp(back, x, sizeof back) == 0, "a refused call changed the logits");
  TE_OK(tecore_mem_free(dx));
  TE_OK(tecore_mem_free(dlab));
  TE_OK(tecore_mem_free(o));
}
END_TEST

/* In place, refused with nothing written: no workspace, a workspace
 * shorter than a row, a 16-bit dlogits at the logits' address, current
 * scaling. */
START_TEST(xent_bwd_fp8_in_place_refusals) {
  int T = 6, V = 64;
  size_t n = (size_t)T * V;
  float x[6 * 64], x2[6 * 64];
  int32_t lab[6];
  te_rand_floats(x, n, -4.0f, 4.0f);
  rand_labels(lab, T, V);
  tecore_devptr_t dx = pu_upload(x, n, TECORE_DTYPE_F32), dlab = pu_upload_i32(lab, T);
  tecore_devptr_t out = te_dalloc(256), ws = te_dalloc(256), st = te_dalloc(64);
  float sc = 1.0f;
  te_h2d(st, &sc, 4);
  struct tecore_tensor lt = pu_tensor2(TECORE_DTYPE_F32, T, V, dx),
                       yt = pu_tensor2(TECORE_DTYPE_E4M3, T, V, dx);
  yt.scaling = TECORE_SCALING_DELAYED;
  yt.scale = st;
  yt.scale_inv = st + 4;
  yt.amax = st + 8;
  struct tecore_xent_args a = {.logits = &lt, .labels = dlab, .ignore_index = IGN, .dlogits = &yt};
  TE_OK(tecore_xent_fwd(&a, out, out + 64, 0, te_stream));
  float one = 1.0f;
  te_h2d(out + 128, &one, 4);
  te_h2d(out + 132, &one, 4);
  ck_assert_int_eq(tecore_xent_bwd(&a, out + 64, out + 128, out + 128, TECORE_XENT_DLOSS_MEAN,
                                   te_stream), TECORE_ERR_INVALID);
  ck_assert_msg(strstr(tecore_last_error(), "args->workspace"), "%s", tecore_last_error());
  a.workspace = ws;
  a.workspace_bytes = V - 1;
  ck_assert_int_eq(tecore_xent_bwd(&a, out + 64, out + 128, out + 128, TECORE_XENT_DLOSS_MEAN,
                                   te_stream), TECORE_ERR_INVALID);
  a.workspace_bytes = V;
  struct tecore_tensor y16 = pu_tensor2(TECORE_DTYPE_BF16, T, V, dx);
  a.dlogits = &y16;
  ck_assert_int_eq(tecore_xent_bwd(&a, out + 64, out + 128, out + 128, TECORE_XENT_DLOSS_MEAN,
                                   te_stream), TECORE_ERR_INVALID);
  ck_assert_msg(strstr(tecore_last_error(), "in place only as FP8"), "%s", tecore_last_error());
  a.dlogits = &yt;
  yt.scaling = TECORE_SCALING_CURRENT;
  ck_assert_int_eq(tecore_xent_bwd(&a, out + 64, out + 128, out + 128, TECORE_XENT_DLOSS_MEAN,
                                   te_stream), TECORE_ERR_INVALID);
  ck_assert_msg(strstr(tecore_last_error(), "delayed"), "%s", tecore_last_error());
  TE_OK(tecore_stream_synchronize(te_stream));
  te_d2h(x2, dx, n * 4);
  ck_assert_msg(!memcmp(x, x2, n * 4), "a refused call changed the logits");
  TE_OK(tecore_mem_free(dx));
  TE_OK(tecore_mem_free(dlab));
  TE_OK(tecore_mem_free(out));
  TE_OK(tecore_mem_free(ws));
  TE_OK(tecore_mem_free(st));
}
END_TEST

START_TEST(xent_finite_difference) {
  int T = 3, V = 7;
  float x[21], g[21], m2[2];
  int32_t lab[3] = {2, IGN, 6};
  te_rand_floats(x, 21, -2.0f, 2.0f);
  tecore_devptr_t dx = te_dalloc(128), dlab = pu_upload_i32(lab, 3), out = te_dalloc(128);
  struct tecore_tensor lt = pu_tensor2(TECORE_DTYPE_F32, T, V, dx);
  struct tecore_xent_args a = {.logits = &lt, .labels = dlab, .ignore_index = IGN,
                               .label_smoothing = 0.1f};
  float one = 1.0f;
  te_h2d(dx, x, sizeof x);
  TE_OK(tecore_xent_fwd(&a, out, out + 16, out + 48, te_stream));
  te_h2d(out + 32, &one, 4);
  TE_OK(tecore_xent_bwd(&a, out + 16, out + 32, out + 48, TECORE_XENT_DLOSS_MEAN, te_stream));
  te_d2h(g, dx, sizeof g);
  const float h = 1e-2f;
  for (int i = 0; i < 21; i++) {
    double f[2];
    for (int s = 0; s < 2; s++) {
      float y[21];
      memcpy(y, x, sizeof y);
      y[i] += s ? -h : h;
      te_h2d(dx, y, sizeof y);
      TE_OK(tecore_xent_fwd(&a, out, out + 16, out + 48, te_stream));
      te_d2h(m2, out + 48, 8);
      f[s] = m2[0];
    }
    double fd = (f[0] - f[1]) / (2 * h);
    ck_assert_msg(fabs(fd - g[i]) <= 2e-3, "dlogits[%d] %.6g, finite difference %.6g", i, g[i], fd);
  }
  TE_OK(tecore_mem_free(dx));
  TE_OK(tecore_mem_free(dlab));
  TE_OK(tecore_mem_free(out));
}
END_TEST

/* ---- two simulated ranks --------------------------------------------------------- */

struct rank {
  int id;
  tecore_stream_t s;
  struct tecore_tensor lt;
  struct tecore_xent_args a;
  tecore_devptr_t out;
  tecore_result_t r;
};
static pthread_barrier_t xb;
static float xbuf[2][4 * 64];
static int ncalls[2];

static tecore_result_t reduce2(tecore_xent_reduce_op_t op, tecore_devptr_t data, size_t count,
                               tecore_stream_t stream, void *ctx) {
  struct rank *me = ctx;
  float v[4 * 64];
  if (count > 4 * 64) return TECORE_ERR_INVALID;
  ncalls[me->id]++;
  TE_OK(tecore_memcpy_async(te_hptr(xbuf[me->id]), data, count * 4, stream));
  TE_OK(tecore_stream_synchronize(stream));
  pthread_barrier_wait(&xb);
  for (size_t i = 0; i < count; i++)
    v[i] = op == TECORE_XENT_REDUCE_MAX ? fmaxf(xbuf[0][i], xbuf[1][i]) : xbuf[0][i] + xbuf[1][i];
  pthread_barrier_wait(&xb);
  TE_OK(tecore_memcpy_async(data, te_hptr(v), count * 4, stream));
  return tecore_stream_synchronize(stream);
}

static void *rank_main(void *p) {
  struct rank *r = p;
  tecore_ctx_set_current(te_ctx);
  r->r = tecore_xent_fwd(&r->a, r->out, r->out + 256, r->out + 512, r->s);
  if (r->r == TECORE_SUCCESS) r->r = tecore_stream_synchronize(r->s);
  return NULL;
}

START_TEST(xent_vocab_parallel_two_ranks) {
  int T = 11, V = 600, V0 = 256;  /* rank 0 has 256 columns, rank 1 344 */
  float *x = malloc((size_t)T * V * 4);
  int32_t lab[11];
  te_rand_floats(x, (size_t)T * V, -8.0f, 8.0f);
  rand_labels(lab, T, V);
  lab[0] = 3;
  lab[2] = 599;
  tecore_devptr_t dlab = pu_upload_i32(lab, T), full = pu_upload(x, (size_t)T * V, TECORE_DTYPE_F32);
  struct rank rk[2];
  pthread_barrier_init(&xb, NULL, 2);
  size_t wsb;
  TE_OK(tecore_xent_workspace_size(T, &wsb));
  for (int i = 0; i < 2; i++) {
    int c0 = i ? V0 : 0, nc = i ? V - V0 : V0;
    float *part = malloc((size_t)T * nc * 4);
    for (int t = 0; t < T; t++) memcpy(part + (size_t)t * nc, x + (size_t)t * V + c0, nc * 4);
    rk[i].id = i;
    TE_OK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &rk[i].s));
    rk[i].lt = pu_tensor2(TECORE_DTYPE_F32, T, nc, pu_upload(part, (size_t)T * nc, TECORE_DTYPE_F32));
    rk[i].out = te_dalloc(4096);
    te_poison_dev_nan(rk[i].out, 1024);
    rk[i].a = (struct tecore_xent_args){
        .logits = &rk[i].lt, .labels = dlab, .ignore_index = IGN, .label_smoothing = 0.1f,
        .vocab_offset = c0, .vocab_total = V, .reduce = reduce2, .reduce_ctx = &rk[i],
        .workspace = te_dalloc(wsb), .workspace_bytes = wsb};
    free(part);
  }
  pthread_t th[2];
  for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, rank_main, &rk[i]);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 2; i++) {
    ck_assert_msg(rk[i].r == TECORE_SUCCESS, "rank %d: %s", i, tecore_result_name(rk[i].r));
    ck_assert_msg(ncalls[i] == 2, "rank %d called the callback %d times", i, ncalls[i]);
  }
  /* the whole vocabulary in one call */
  tecore_devptr_t out = te_dalloc(4096);
  struct tecore_tensor lt = pu_tensor2(TECORE_DTYPE_F32, T, V, full);
  struct tecore_xent_args a = {.logits = &lt, .labels = dlab, .ignore_index = IGN,
                               .label_smoothing = 0.1f};
  TE_OK(tecore_xent_fwd(&a, out, out + 256, out + 512, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  /* floats: loss at 0, lse at 64, mean at 128 (byte offsets 0, 256, 512) */
  float want[130], got[130];
  te_d2h(want, out, sizeof want);
  for (int i = 0; i < 2; i++) {
    te_d2h(got, rk[i].out, sizeof got);
    for (int t = 0; t < T; t++) {
      ck_assert_msg(fabs(got[t] - want[t]) <= 1e-5 * (1 + fabs(want[t])), "rank %d loss[%d] %.8g, "
                    "whole vocabulary %.8g", i, t, got[t], want[t]);
      ck_assert_msg(fabs(got[64 + t] - want[64 + t]) <= 1e-5 * (1 + fabs(want[64 + t])),
                    "rank %d lse[%d] %.8g want %.8g", i, t, got[64 + t], want[64 + t]);
    }
    ck_assert_msg(fabs(got[128] - want[128]) <= 1e-5 * (1 + fabs(want[128])), "rank %d mean", i);
  }
  /* the backward of each slice equals the whole vocabulary's columns */
  float dl[16];
  for (int t = 0; t < 16; t++) dl[t] = te_rand_float(0.5f, 2.0f);
  te_h2d(out + 1024, dl, sizeof dl);
  TE_OK(tecore_xent_bwd(&a, out + 256, out + 1024, 0, 0, te_stream));
  float *gf = malloc((size_t)T * V * 4);
  pu_download(gf, full, (size_t)T * V, TECORE_DTYPE_F32);
  for (int i = 0; i < 2; i++) {
    int c0 = i ? V0 : 0, nc = i ? V - V0 : V0;
    float *gp = malloc((size_t)T * nc * 4);
    te_h2d(rk[i].out + 1024, dl, sizeof dl);
    TE_OK(tecore_xent_bwd(&rk[i].a, rk[i].out + 256, rk[i].out + 1024, 0, 0, rk[i].s));
    TE_OK(tecore_stream_synchronize(rk[i].s));
    pu_download(gp, rk[i].lt.data, (size_t)T * nc, TECORE_DTYPE_F32);
    for (int t = 0; t < T; t++)
      for (int j = 0; j < nc; j++) {
        float w = gf[(size_t)t * V + c0 + j], gv = gp[(size_t)t * nc + j];
        ck_assert_msg(fabs(gv - w) <= 1e-5 * fabs(w) + 1e-9, "rank %d dlogits[%d][%d] %.8g want %.8g",
                      i, t, c0 + j, gv, w);
      }
    free(gp);
  }
  free(gf);
  pthread_barrier_destroy(&xb);
  for (int i = 0; i < 2; i++) {
    TE_OK(tecore_stream_destroy(rk[i].s));
    TE_OK(tecore_mem_free(rk[i].lt.data));
    TE_OK(tecore_mem_free(rk[i].out));
    TE_OK(tecore_mem_free(rk[i].a.workspace));
  }
  TE_OK(tecore_mem_free(out));
  TE_OK(tecore_mem_free(full));
  TE_OK(tecore_mem_free(dlab));
  free(x);
}
END_TEST

static tecore_result_t reduce_fails(tecore_xent_reduce_op_t op, tecore_devptr_t data, size_t count,
                                    tecore_stream_t stream, void *ctx) {
  (void)op; (void)data; (void)count; (void)stream; (void)ctx;
  return TECORE_ERR_TIMEOUT;
}

START_TEST(xent_bad_arguments) {
  tecore_devptr_t b = te_dalloc(1 << 16), lab = b + 32768, o = b + 40000;
  int32_t l[4] = {0, 1, 2, 3};
  te_h2d(lab, l, 16);
  struct tecore_tensor lt = pu_tensor2(TECORE_DTYPE_BF16, 4, 64, b), bad;
  struct tecore_xent_args g = {.logits = &lt, .labels = lab, .ignore_index = IGN}, a;
  TE_OK(tecore_xent_fwd(&g, o, o + 16, o + 32, te_stream));
  TE_EXPECT_INVALID("args", tecore_xent_fwd(NULL, o, o + 16, 0, te_stream));
  a = g; a.logits = NULL;
  TE_EXPECT_INVALID("args->logits", tecore_xent_fwd(&a, o, o + 16, 0, te_stream));
  bad = lt; bad.dtype = TECORE_DTYPE_F16; a = g; a.logits = &bad;
  TE_EXPECT_INVALID("args->logits", tecore_xent_fwd(&a, o, o + 16, 0, te_stream));
  a = g; a.labels = 0;
  TE_EXPECT_INVALID("args->labels", tecore_xent_fwd(&a, o, o + 16, 0, te_stream));
  a = g; a.labels = lab + 2;
  TE_EXPECT_INVALID("args->labels", tecore_xent_fwd(&a, o, o + 16, 0, te_stream));
  a = g; a.label_smoothing = 1.0f;
  TE_EXPECT_INVALID("args->label_smoothing", tecore_xent_fwd(&a, o, o + 16, 0, te_stream));
  a = g; a.vocab_total = 100;
  TE_EXPECT_INVALID("args->reduce", tecore_xent_fwd(&a, o, o + 16, 0, te_stream));
  a = g; a.vocab_total = 100; a.vocab_offset = 50; a.reduce = reduce_fails;
  TE_EXPECT_INVALID("args->vocab_offset", tecore_xent_fwd(&a, o, o + 16, 0, te_stream));
  a = g; a.reduce = reduce_fails;
  TE_EXPECT_INVALID("args->workspace_bytes", tecore_xent_fwd(&a, o, o + 16, 0, te_stream));
  a.workspace = o + 1024; a.workspace_bytes = 64;
  TE_EXPECT_ERR(TECORE_ERR_TIMEOUT, "args->reduce", tecore_xent_fwd(&a, o, o + 16, 0, te_stream));
  TE_EXPECT_INVALID("loss", tecore_xent_fwd(&g, 0, o + 16, 0, te_stream));
  TE_EXPECT_INVALID("lse", tecore_xent_fwd(&g, o, 0, 0, te_stream));
  TE_EXPECT_INVALID("loss", tecore_xent_fwd(&g, o + 2, o + 16, 0, te_stream));
  TE_EXPECT_INVALID("loss overlaps lse", tecore_xent_fwd(&g, o, o + 8, 0, te_stream));
  TE_EXPECT_INVALID("loss overlaps args->logits", tecore_xent_fwd(&g, b + 64, o + 16, 0, te_stream));
  TE_EXPECT_INVALID("bytes", tecore_xent_workspace_size(4, NULL));
  TE_EXPECT_INVALID("flags", tecore_xent_bwd(&g, o + 16, o, 0, 0x10, te_stream));
  TE_EXPECT_INVALID("mean", tecore_xent_bwd(&g, o + 16, o, 0, TECORE_XENT_DLOSS_MEAN, te_stream));
  TE_EXPECT_INVALID("mean", tecore_xent_bwd(&g, o + 16, o, o + 32, 0, te_stream));
  TE_EXPECT_INVALID("dloss", tecore_xent_bwd(&g, o + 16, 0, 0, 0, te_stream));
  TE_EXPECT_INVALID("lse", tecore_xent_bwd(&g, b + 16, o, 0, 0, te_stream));
  /* args->dlogits: shape, scaling without a scale, overlapping the logits */
  struct tecore_tensor yb = pu_tensor2(TECORE_DTYPE_BF16, 4, 32, o + 1024);
  a = g; a.dlogits = &yb;
  TE_EXPECT_INVALID("args->dlogits", tecore_xent_bwd(&a, o + 16, o, 0, 0, te_stream));
  yb = pu_tensor2(TECORE_DTYPE_E5M2, 4, 64, o + 1024);
  yb.scaling = TECORE_SCALING_DELAYED;
  TE_EXPECT_INVALID("args->dlogits", tecore_xent_bwd(&a, o + 16, o, 0, 0, te_stream));
  yb = pu_tensor2(TECORE_DTYPE_BF16, 4, 64, b + 256);
  TE_EXPECT_INVALID("args->dlogits", tecore_xent_bwd(&a, o + 16, o, 0, 0, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  TE_OK(tecore_mem_free(b));
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("xent");
  TCase *tc = te_tcase(s, "values", 1);
  tcase_add_test(tc, xent_values);
  tcase_add_test(tc, xent_vocab_50304);
  tcase_add_test(tc, xent_finite_difference);
  tcase_add_test(tc, xent_bwd_into_fp8);
  tcase_add_test(tc, xent_bwd_fp8_in_place);
  tcase_add_test(tc, xent_bwd_fp8_in_place_refusals);
  tcase_add_test(tc, xent_vocab_parallel_two_ranks);
  tcase_add_test(tc, xent_fwd_bwd_one_pass);
  tc = te_tcase(s, "arguments", 1);
  tcase_add_test(tc, xent_bad_arguments);
  tcase_add_test(tc, xent_fwd_bwd_bad_arguments);
  return s;
}

TE_TEST_MAIN(make_suite, TE_TEST_DEVICE)
