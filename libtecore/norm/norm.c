/* norm.c -- LayerNorm and RMSNorm forward and backward (te/norm.h): the
 * vdev implementations of kernels/norm.cu, which follow the GPU's thread
 * layout and summation order (kernels/common/norm.h) so both backends give
 * the same bits, the kernel table, and the public entry points. */
#include "act/act_internal.h"
#include <math.h>
#include <stdlib.h>
#include <te/norm.h>
#include "common/ldst.h"
#include "common/norm.h"

#define PTR(i) (*(void *const *)args[i])
#define U64(i) (*(const unsigned long long *)args[i])
#define U32(i) (*(const unsigned *)args[i])
#define I32(i) (*(const int *)args[i])
#define F32(i) (*(const float *)args[i])

/* ---- vdev: forward ---------------------------------------------------------------
 * Parameters: x, gamma, beta, y, mu, rsigma, scale, amax, scale_inv, rows,
 * hidden, eps, flags, dtypes, tpr, nv.  The block layout only decides the
 * order of the row sums, reproduced here thread by thread. */

/* Each row sum is taken as the GPU's T threads take it: thread t adds its
 * elements in order into part[t], then te_norm_tree_sum. */
static void norm_vdev_fwd(int vec, void *const *args) {
  const void *x = PTR(0), *gamma = PTR(1), *beta = PTR(2);
  void *y = PTR(3);
  float *mu = PTR(4), *rsigma = PTR(5);
  const float *scale = PTR(6);
  unsigned *amax = PTR(7);
  float *scale_inv = PTR(8);
  unsigned long long rows = U64(9);
  unsigned hidden = U32(10);
  float eps = F32(11);
  int flags = I32(12), dtypes = I32(13), tpr = I32(14), nv = I32(15);
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
 * dtypes, tpr, nv, parts; the block is tpr * R threads (R row slots), the
 * grid parts blocks. */

static void norm_vdev_bwd(int vec, const struct tecore_launch_cfg *cfg, void *const *args) {
  const void *dy = PTR(0), *x = PTR(1), *gamma = PTR(4), *extra = PTR(5);
  const float *mu = PTR(2), *rsigma = PTR(3);
  void *dx = PTR(6);
  float *ws = PTR(7);
  unsigned long long rows = U64(8);
  unsigned hidden = U32(9);
  int flags = I32(10), dtypes = I32(11), tpr = I32(12), nv = I32(13);
  unsigned parts = U32(14);
  int dtx = TE_NORM_DT(dtypes, 0), dtdy = TE_NORM_DT(dtypes, 1), dtw = TE_NORM_DT(dtypes, 2),
      dtdx = TE_NORM_DT(dtypes, 3), dte = TE_NORM_DT(dtypes, 4);
  int ln = flags & TE_NORM_LAYERNORM, add = flags & TE_NORM_EXTRA_GRAD;
  float zc = te_norm_zc(flags);
  unsigned R = cfg->block[0] / (unsigned)tpr;
  unsigned nvec = vec == 8 ? hidden / 8 : hidden;
  float h = (float)hidden;
  float part1[1024], part2[1024];
  /* per-slot column sums, added into the block's partial row in slot order */
  float *accg = malloc(2 * (size_t)hidden * sizeof(float));
  if (!accg) {
    TE_LOG_ERROR(TECORE_SUBSYS_KERNEL, "vdev norm backward: out of memory (%u columns)", hidden);
    return;
  }
  float *accb = accg + hidden;
  for (unsigned b = 0; b < parts; b++) {
    float *wsg = ws + (unsigned long long)b * hidden;
    float *wsb = ws + ((unsigned long long)parts + b) * hidden;
    for (unsigned s = 0; s < R; s++) {
      for (unsigned c = 0; c < hidden; c++) accg[c] = accb[c] = 0.0f;
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
          accg[c] = te_fma_rn(g, xh, accg[c]);
          if (ln) accb[c] = te_add_rn(accb[c], g);
        }
      }
      for (unsigned c = 0; c < hidden; c++) {
        wsg[c] = s == 0 ? accg[c] : te_add_rn(wsg[c], accg[c]);
        if (ln) wsb[c] = s == 0 ? accb[c] : te_add_rn(wsb[c], accb[c]);
      }
    }
  }
  free(accg);
}

/* Parameters: ws, out0, out1, parts, hidden, dtypes. */
static void vdev_norm_bwd_reduce(const struct tecore_launch_cfg *cfg, void *const *args) {
  const float *ws = PTR(0);
  void *out[2] = {PTR(1), PTR(2)};
  unsigned parts = U32(3), hidden = U32(4);
  int dtypes = I32(5);
  (void)cfg;
  for (int which = 0; which < (out[1] ? 2 : 1); which++) {
    const float *w = ws + (unsigned long long)which * parts * hidden;
    for (unsigned c = 0; c < hidden; c++) {
      float g[TE_NORM_REDUCE_GROUPS];
      for (unsigned grp = 0; grp < TE_NORM_REDUCE_GROUPS; grp++) {
        float acc = 0.0f;
        for (unsigned p = grp; p < parts; p += TE_NORM_REDUCE_GROUPS)
          acc = te_add_rn(acc, w[(unsigned long long)p * hidden + c]);
        g[grp] = acc;
      }
      te_st(out[which], c, TE_NORM_DT(dtypes, which), te_norm_tree_sum(g, TE_NORM_REDUCE_GROUPS));
    }
  }
}

static void vdev_norm_fwd_v8(const struct tecore_launch_cfg *cfg, void *const *args) {
  (void)cfg;
  norm_vdev_fwd(8, args);
}
static void vdev_norm_fwd_v1(const struct tecore_launch_cfg *cfg, void *const *args) {
  (void)cfg;
  norm_vdev_fwd(1, args);
}
static void vdev_norm_bwd_v8(const struct tecore_launch_cfg *cfg, void *const *args) {
  norm_vdev_bwd(8, cfg, args);
}
static void vdev_norm_bwd_v1(const struct tecore_launch_cfg *cfg, void *const *args) {
  norm_vdev_bwd(1, cfg, args);
}

/* ---- the table ---------------------------------------------------------------------- */

#ifdef TE_HAVE_CUDA
#define NORM_FATBIN te_fatbin_norm
#define NORM_FATBIN_BYTES ((size_t)(te_fatbin_norm_end - te_fatbin_norm))
#else
#define NORM_FATBIN NULL
#define NORM_FATBIN_BYTES 0
#endif

enum { K_FWD_V8, K_FWD_V1, K_FWD_STREAM_V8, K_FWD_STREAM_V1,
       K_BWD_V8, K_BWD_V1, K_BWD_STREAM_V8, K_BWD_STREAM_V1, K_BWD_REDUCE,
       K_FWD_FAST, K_BWD_FAST };

#define NORM_FWD_DEF(sym, fn)                                                               \
  {.name = sym, .vdev = fn, .nparams = 16,                                                  \
   .param_size = {8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 4, 4, 4, 4, 4, 4},                         \
   .param_is_ptr = {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0}}
#define NORM_BWD_DEF(sym, fn)                                                               \
  {.name = sym, .vdev = fn, .nparams = 15,                                                  \
   .param_size = {8, 8, 8, 8, 8, 8, 8, 8, 8, 4, 4, 4, 4, 4, 4},                            \
   .param_is_ptr = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0}}
static const struct tecore_kernel_def norm_kernels[] = {
    [K_FWD_V8] = NORM_FWD_DEF("te_norm_fwd_v8", vdev_norm_fwd_v8),
    [K_FWD_V1] = NORM_FWD_DEF("te_norm_fwd_v1", vdev_norm_fwd_v1),
    [K_FWD_STREAM_V8] = NORM_FWD_DEF("te_norm_fwd_stream_v8", vdev_norm_fwd_v8),
    [K_FWD_STREAM_V1] = NORM_FWD_DEF("te_norm_fwd_stream_v1", vdev_norm_fwd_v1),
    [K_BWD_V8] = NORM_BWD_DEF("te_norm_bwd_v8", vdev_norm_bwd_v8),
    [K_BWD_V1] = NORM_BWD_DEF("te_norm_bwd_v1", vdev_norm_bwd_v1),
    [K_BWD_STREAM_V8] = NORM_BWD_DEF("te_norm_bwd_stream_v8", vdev_norm_bwd_v8),
    [K_BWD_STREAM_V1] = NORM_BWD_DEF("te_norm_bwd_stream_v1", vdev_norm_bwd_v1),
    [K_BWD_REDUCE] = {.name = "te_norm_bwd_reduce", .vdev = vdev_norm_bwd_reduce, .nparams = 6,
                      .param_size = {8, 8, 8, 4, 4, 4}, .param_is_ptr = {1, 1, 1, 0, 0, 0}},
    [K_FWD_FAST] = NORM_FWD_DEF("te_norm_fwd_fast", vdev_norm_fwd_v8),
    [K_BWD_FAST] = NORM_BWD_DEF("te_norm_bwd_fast", vdev_norm_bwd_v8),
};

TE_KERNEL_TABLE(norm_first_id, "libtecore/norm", norm_kernels, NORM_FATBIN, NORM_FATBIN_BYTES)

/* ---- argument checks ---------------------------------------------------------------- */

/* Row lengths and counts the kernels' index types hold. */
#define NORM_MAX_HIDDEN 0x7fffffffull
#define NORM_MAX_ROWS 0x7fffffffull

static tecore_result_t norm_check_flags(unsigned flags, const char *fn) {
  TE_ARG((flags & ~TECORE_NORM_ZERO_CENTERED_GAMMA) == 0, "%s: flags 0x%x has unknown bits", fn,
         flags);
  return TECORE_SUCCESS;
}

/* t has hidden elements (a weight or its gradient). */
static tecore_result_t norm_check_vector(const struct tecore_tensor *t, size_t hidden,
                                         const char *fn, const char *arg) {
  if (tecore_tensor_numel(t) != hidden)
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s has %zu elements, hidden is %zu", fn, arg,
                  tecore_tensor_numel(t), hidden);
  return TECORE_SUCCESS;
}

/* t has the rows x hidden elements of x. */
static tecore_result_t norm_check_like(const struct tecore_tensor *t, size_t rows, size_t hidden,
                                       const char *fn, const char *arg) {
  size_t r, c;
  te_tensor_view(t, &r, &c);
  if (r != rows || c != hidden)
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s is %zu x %zu, x is %zu x %zu", fn, arg, r, c, rows,
                  hidden);
  return TECORE_SUCCESS;
}

static tecore_result_t norm_check_rowvec(tecore_devptr_t p, int required, const char *fn,
                                         const char *arg) {
  TE_ARG(p || !required, "%s: %s is 0", fn, arg);
  TE_ARG(p % 4 == 0, "%s: %s (0x%llx) is not aligned to 4 bytes", fn, arg, (unsigned long long)p);
  return TECORE_SUCCESS;
}

static tecore_result_t norm_check_x(const struct tecore_tensor *x, const char *fn, size_t *rows,
                                    size_t *hidden) {
  TE_CHECK(te_act_check_in(x, fn, "x"));
  te_tensor_view(x, rows, hidden);
  TE_ARG(*hidden <= NORM_MAX_HIDDEN, "%s: x: hidden %zu exceeds %llu", fn, *hidden, NORM_MAX_HIDDEN);
  TE_ARG(*rows <= NORM_MAX_ROWS, "%s: x: %zu rows exceed %llu", fn, *rows, NORM_MAX_ROWS);
  return TECORE_SUCCESS;
}

/* ---- forward -------------------------------------------------------------------------- */

static tecore_result_t norm_fwd(int ln, const struct tecore_tensor *x,
                                const struct tecore_tensor *gamma, const struct tecore_tensor *beta,
                                float eps, unsigned flags, struct tecore_tensor *y,
                                tecore_devptr_t mu, tecore_devptr_t rsigma,
                                tecore_stream_t stream, const char *fn) {
  size_t rows, hidden;
  TE_CHECK(norm_check_x(x, fn, &rows, &hidden));
  TE_CHECK(te_act_check_in(gamma, fn, "gamma"));
  TE_CHECK(norm_check_vector(gamma, hidden, fn, "gamma"));
  if (ln) {
    TE_CHECK(te_act_check_in(beta, fn, "beta"));
    TE_CHECK(norm_check_vector(beta, hidden, fn, "beta"));
    TE_ARG(beta->dtype == gamma->dtype, "%s: beta is %s, gamma %s: they must match", fn,
           tecore_dtype_name(beta->dtype), tecore_dtype_name(gamma->dtype));
  }
  TE_CHECK(te_act_check_out(y, fn, "y"));
  TE_CHECK(norm_check_like(y, rows, hidden, fn, "y"));
  TE_ARG(isfinite(eps) && eps >= 0.0f, "%s: epsilon %g is not a finite value >= 0", fn, (double)eps);
  TE_CHECK(norm_check_flags(flags, fn));
  if (ln) TE_CHECK(norm_check_rowvec(mu, 0, fn, "mu"));
  TE_CHECK(norm_check_rowvec(rsigma, 0, fn, "rsigma"));
  if (rows == 0 || hidden == 0) return TECORE_SUCCESS;
  int id = norm_first_id();
  if (id < 0) return TE_ERR(TECORE_ERR_INTERNAL, "%s: the norm kernels did not register", fn);

  int vec = hidden % 8 == 0 && te_al16(x->data) && te_al16(y->data) && te_al16(gamma->data) &&
            (!ln || te_al16(beta->data)) ? 8 : 1;
  struct te_norm_plan p = te_norm_plan_fwd(hidden, vec);
  int k = vec == 8 ? (p.stream ? K_FWD_STREAM_V8 : K_FWD_V8) : (p.stream ? K_FWD_STREAM_V1 : K_FWD_V1);
  /* te_norm_fwd_fast: one dtype for x and the weights, the output that
   * dtype or FP8 */
  if (k == K_FWD_V8 && p.tpr <= TE_NORM_FAST_TMAX && gamma->dtype == x->dtype &&
      (y->dtype == x->dtype || te_dtype_is_fp8(y->dtype)))
    k = K_FWD_FAST;
  unsigned long long blocks = (rows + (unsigned)p.rows_per_block - 1) / (unsigned)p.rows_per_block;
  struct tecore_launch_cfg cfg = {.grid = {(unsigned)blocks, 1, 1}, .block = {p.threads, 1, 1}};

  void *px = (void *)(uintptr_t)x->data, *pg = (void *)(uintptr_t)gamma->data,
       *pb = ln ? (void *)(uintptr_t)beta->data : NULL, *py = (void *)(uintptr_t)y->data,
       *pmu = ln ? (void *)(uintptr_t)mu : NULL, *prs = (void *)(uintptr_t)rsigma;
  unsigned long long r = rows;
  unsigned hid = (unsigned)hidden;
  int kflags = (ln ? TE_NORM_LAYERNORM : 0) |
               ((flags & TECORE_NORM_ZERO_CENTERED_GAMMA) ? TE_NORM_ZERO_CENTERED : 0);
  int dtypes = TE_NORM_DT_PACK((int)x->dtype, (int)gamma->dtype, (int)y->dtype, 0, 0);
  int tpr = p.tpr, nv = p.nv;
  /* current scaling: a pass for the amax, then one with the scale */
  for (int pass = 0; pass < te_qout_passes(y); pass++) {
    struct te_qout q;
    TE_CHECK(te_qout_begin(y, pass, 0, stream, &q));
    void *args[] = {&px, &pg, &pb, &py, &pmu, &prs, &q.scale, &q.amax, &q.scale_inv, &r, &hid,
                    &eps, &kflags, &dtypes, &tpr, &nv};
    TE_CHECK(tecore_kernel_launch(id + k, &cfg, args, stream));
  }
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_layernorm_fwd(const struct tecore_tensor *x,
                                               const struct tecore_tensor *gamma,
                                               const struct tecore_tensor *beta, float epsilon,
                                               unsigned flags, struct tecore_tensor *y,
                                               tecore_devptr_t mu, tecore_devptr_t rsigma,
                                               tecore_stream_t stream) {
  return norm_fwd(1, x, gamma, beta, epsilon, flags, y, mu, rsigma, stream, __func__);
}

TE_EXPORT tecore_result_t tecore_rmsnorm_fwd(const struct tecore_tensor *x,
                                             const struct tecore_tensor *gamma, float epsilon,
                                             unsigned flags, struct tecore_tensor *y,
                                             tecore_devptr_t rsigma, tecore_stream_t stream) {
  return norm_fwd(0, x, gamma, NULL, epsilon, flags, y, 0, rsigma, stream, __func__);
}

/* ---- backward ------------------------------------------------------------------------- */

/* An upper bound of the parts any plan uses, so the size needs no pointers. */
static size_t norm_ws_bytes(int ln, size_t rows, size_t hidden) {
  size_t parts = rows < TE_NORM_BWD_MAX_PARTS ? rows : TE_NORM_BWD_MAX_PARTS;
  return (ln ? 2u : 1u) * parts * hidden * sizeof(float);
}

TE_EXPORT tecore_result_t tecore_norm_bwd_workspace_size(tecore_norm_t kind, size_t rows,
                                                         size_t hidden, size_t *bytes) {
  TE_ARG(kind == TECORE_NORM_LAYERNORM || kind == TECORE_NORM_RMSNORM,
         "%s: kind %d is not a tecore_norm_t", __func__, (int)kind);
  TE_ARG(bytes, "%s: bytes is NULL", __func__);
  TE_ARG(hidden <= NORM_MAX_HIDDEN, "%s: hidden %zu exceeds %llu", __func__, hidden, NORM_MAX_HIDDEN);
  TE_ARG(rows <= NORM_MAX_ROWS, "%s: %zu rows exceed %llu", __func__, rows, NORM_MAX_ROWS);
  *bytes = norm_ws_bytes(kind == TECORE_NORM_LAYERNORM, rows, hidden);
  return TECORE_SUCCESS;
}

static tecore_result_t norm_check_grad_out(const struct tecore_tensor *t, const char *fn,
                                           const char *arg) {
  TE_CHECK(te_act_check_out(t, fn, arg));
  TE_ARG(t->scaling == TECORE_SCALING_NONE, "%s: %s: scaling %s: gradients are written in f32, f16 or bf16",
         fn, arg, tecore_scaling_name(t->scaling));
  return TECORE_SUCCESS;
}

static tecore_result_t norm_bwd(int ln, const struct tecore_tensor *dy,
                                const struct tecore_tensor *x, tecore_devptr_t mu,
                                tecore_devptr_t rsigma, const struct tecore_tensor *gamma,
                                const struct tecore_tensor *extra, unsigned flags,
                                struct tecore_tensor *dx, struct tecore_tensor *dgamma,
                                struct tecore_tensor *dbeta, tecore_devptr_t workspace,
                                size_t workspace_bytes, tecore_stream_t stream, const char *fn) {
  size_t rows, hidden;
  TE_CHECK(norm_check_x(x, fn, &rows, &hidden));
  TE_CHECK(te_act_check_in(dy, fn, "dy"));
  TE_CHECK(norm_check_like(dy, rows, hidden, fn, "dy"));
  TE_CHECK(te_act_check_in(gamma, fn, "gamma"));
  TE_CHECK(norm_check_vector(gamma, hidden, fn, "gamma"));
  if (extra) {
    TE_CHECK(te_act_check_in(extra, fn, "extra_grad"));
    TE_CHECK(norm_check_like(extra, rows, hidden, fn, "extra_grad"));
  }
  TE_CHECK(norm_check_grad_out(dx, fn, "dx"));
  TE_CHECK(norm_check_like(dx, rows, hidden, fn, "dx"));
  TE_CHECK(norm_check_grad_out(dgamma, fn, "dgamma"));
  TE_CHECK(norm_check_vector(dgamma, hidden, fn, "dgamma"));
  if (ln) {
    TE_CHECK(norm_check_grad_out(dbeta, fn, "dbeta"));
    TE_CHECK(norm_check_vector(dbeta, hidden, fn, "dbeta"));
  }
  TE_CHECK(norm_check_flags(flags, fn));
  if (ln) TE_CHECK(norm_check_rowvec(mu, rows > 0, fn, "mu"));
  TE_CHECK(norm_check_rowvec(rsigma, rows > 0, fn, "rsigma"));
  size_t need = norm_ws_bytes(ln, rows, hidden);
  TE_ARG(workspace_bytes >= need,
         "%s: workspace_bytes %zu is below the %zu bytes tecore_norm_bwd_workspace_size gives", fn,
         workspace_bytes, need);
  TE_ARG(workspace || need == 0, "%s: workspace is 0", fn);
  TE_ARG(workspace % 16 == 0, "%s: workspace (0x%llx) is not aligned to 16 bytes", fn,
         (unsigned long long)workspace);
  if (hidden == 0) return TECORE_SUCCESS;
  int id = norm_first_id();
  if (id < 0) return TE_ERR(TECORE_ERR_INTERNAL, "%s: the norm kernels did not register", fn);
  if (rows == 0) {
    /* no rows: the sums over rows are 0 */
    TE_CHECK(tecore_memset_d8_async(dgamma->data, 0, hidden * tecore_dtype_size(dgamma->dtype), stream));
    if (ln) TE_CHECK(tecore_memset_d8_async(dbeta->data, 0, hidden * tecore_dtype_size(dbeta->dtype), stream));
    return TECORE_SUCCESS;
  }

  int vec = hidden % 8 == 0 && te_al16(x->data) && te_al16(dy->data) && te_al16(dx->data) &&
            te_al16(gamma->data) && (!extra || te_al16(extra->data)) ? 8 : 1;
  struct te_norm_plan p = te_norm_plan_bwd(hidden, vec);
  unsigned parts = te_norm_bwd_parts(rows, p.rows_per_block);
  int k = vec == 8 ? (p.stream ? K_BWD_STREAM_V8 : K_BWD_V8) : (p.stream ? K_BWD_STREAM_V1 : K_BWD_V1);
  /* te_norm_bwd_fast: one 16-bit dtype for x, dy, gamma, dx (and extra_grad) */
  if (k == K_BWD_V8 && x->dtype != TECORE_DTYPE_F32 && dy->dtype == x->dtype && gamma->dtype == x->dtype &&
      dx->dtype == x->dtype && (!extra || extra->dtype == x->dtype))
    k = K_BWD_FAST;
  unsigned comb = p.stream ? 0
                           : (unsigned)((p.rows_per_block - 1) * p.tpr * TE_NORM_BWD_NV_MAX * vec *
                                        2 * (int)sizeof(float));
  int smem_partials = 0;
  if (p.stream && (ln ? 2u : 1u) * hidden * sizeof(float) <= TE_NORM_SMEM_MAX) {
    /* long rows: column partials in shared memory, not read-modify-write
     * of the workspace in global memory */
    comb = (unsigned)((ln ? 2u : 1u) * hidden * sizeof(float));
    smem_partials = TE_NORM_SMEM_PARTIALS;
  }
  struct tecore_launch_cfg cfg = {.grid = {parts, 1, 1}, .block = {p.threads, 1, 1},
                                  .shared_bytes = comb};
  void *pdy = (void *)(uintptr_t)dy->data, *px = (void *)(uintptr_t)x->data,
       *pmu = ln ? (void *)(uintptr_t)mu : NULL, *prs = (void *)(uintptr_t)rsigma,
       *pg = (void *)(uintptr_t)gamma->data,
       *pe = extra ? (void *)(uintptr_t)extra->data : NULL, *pdx = (void *)(uintptr_t)dx->data,
       *pws = (void *)(uintptr_t)workspace;
  unsigned long long r = rows;
  unsigned hid = (unsigned)hidden;
  int kflags = (ln ? TE_NORM_LAYERNORM : 0) | (extra ? TE_NORM_EXTRA_GRAD : 0) |
               ((flags & TECORE_NORM_ZERO_CENTERED_GAMMA) ? TE_NORM_ZERO_CENTERED : 0) |
               smem_partials;
  int dtypes = TE_NORM_DT_PACK((int)x->dtype, (int)dy->dtype, (int)gamma->dtype, (int)dx->dtype,
                               extra ? (int)extra->dtype : 0);
  int tpr = p.tpr, nv = p.nv;
  void *args[] = {&pdy, &px, &pmu, &prs, &pg, &pe, &pdx, &pws, &r, &hid, &kflags, &dtypes,
                  &tpr, &nv, &parts};
  TE_CHECK(tecore_kernel_launch(id + k, &cfg, args, stream));

  struct tecore_launch_cfg rcfg = {
      .grid = {(unsigned)((hidden + TE_NORM_REDUCE_COLS - 1) / TE_NORM_REDUCE_COLS), 1, 1},
      .block = {TE_NORM_REDUCE_COLS, TE_NORM_REDUCE_GROUPS, 1}};
  void *pdg = (void *)(uintptr_t)dgamma->data, *pdb = ln ? (void *)(uintptr_t)dbeta->data : NULL;
  int rdtypes = TE_NORM_DT_PACK((int)dgamma->dtype, ln ? (int)dbeta->dtype : 0, 0, 0, 0);
  void *rargs[] = {&pws, &pdg, &pdb, &parts, &hid, &rdtypes};
  TE_CHECK(tecore_kernel_launch(id + K_BWD_REDUCE, &rcfg, rargs, stream));
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_layernorm_bwd(const struct tecore_tensor *dy,
                                               const struct tecore_tensor *x, tecore_devptr_t mu,
                                               tecore_devptr_t rsigma,
                                               const struct tecore_tensor *gamma, unsigned flags,
                                               struct tecore_tensor *dx,
                                               struct tecore_tensor *dgamma,
                                               struct tecore_tensor *dbeta,
                                               tecore_devptr_t workspace, size_t workspace_bytes,
                                               tecore_stream_t stream) {
  return norm_bwd(1, dy, x, mu, rsigma, gamma, NULL, flags, dx, dgamma, dbeta, workspace,
                  workspace_bytes, stream, __func__);
}

TE_EXPORT tecore_result_t tecore_rmsnorm_bwd(const struct tecore_tensor *dy,
                                             const struct tecore_tensor *x, tecore_devptr_t rsigma,
                                             const struct tecore_tensor *gamma, unsigned flags,
                                             struct tecore_tensor *dx,
                                             struct tecore_tensor *dgamma,
                                             tecore_devptr_t workspace, size_t workspace_bytes,
                                             tecore_stream_t stream) {
  return norm_bwd(0, dy, x, 0, rsigma, gamma, NULL, flags, dx, dgamma, NULL, workspace,
                  workspace_bytes, stream, __func__);
}

TE_EXPORT tecore_result_t tecore_rmsnorm_bwd_add(const struct tecore_tensor *dy,
                                                 const struct tecore_tensor *x,
                                                 tecore_devptr_t rsigma,
                                                 const struct tecore_tensor *gamma,
                                                 const struct tecore_tensor *extra_grad,
                                                 unsigned flags, struct tecore_tensor *dx,
                                                 struct tecore_tensor *dgamma,
                                                 tecore_devptr_t workspace,
                                                 size_t workspace_bytes, tecore_stream_t stream) {
  TE_ARG(extra_grad, "%s: extra_grad is NULL", __func__);
  return norm_bwd(0, dy, x, 0, rsigma, gamma, extra_grad, flags, dx, dgamma, NULL, workspace,
                  workspace_bytes, stream, __func__);
}
