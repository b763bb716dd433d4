/* SPDX-License-Identifier: Apache-2.0 */
/* norm.c -- LayerNorm and RMSNorm forward and backward (te/norm.h): the
 * kernel table of kernels/norm.cu and its vdev implementation
 * (norm_vdev.c), argument checks, and the public entry points that pick
 * the plan, the kernel and the grid, and launch. */
#include "norm/norm_internal.h"
#include <math.h>
#include <te/norm.h>

/* ---- the table ---------------------------------------------------------------------- */

enum { K_FWD_V8, K_FWD_V1, K_FWD_STREAM_V8, K_FWD_STREAM_V1,
       K_BWD_V8, K_BWD_V1, K_BWD_STREAM_V8, K_BWD_STREAM_V1, K_BWD_REDUCE,
       K_FWD_FAST, K_BWD_FAST, K_FWD_FAST16, K_FWD_FULL16, K_BWD_FAST_CS, K_FWD_WARP16 };

#define NORM_FWD_DEF(sym, fn) TE_KDEF(sym, fn, TE_NORM_FWD_PARAMS)
#define NORM_BWD_DEF(sym, fn) TE_KDEF(sym, fn, TE_NORM_BWD_PARAMS)
static const struct tecore_kernel_def norm_kernels[] = {
    [K_FWD_V8] = NORM_FWD_DEF("te_norm_fwd_v8", te_norm_vdev_fwd_v8),
    [K_FWD_V1] = NORM_FWD_DEF("te_norm_fwd_v1", te_norm_vdev_fwd_v1),
    [K_FWD_STREAM_V8] = NORM_FWD_DEF("te_norm_fwd_stream_v8", te_norm_vdev_fwd_v8),
    [K_FWD_STREAM_V1] = NORM_FWD_DEF("te_norm_fwd_stream_v1", te_norm_vdev_fwd_v1),
    [K_BWD_V8] = NORM_BWD_DEF("te_norm_bwd_v8", te_norm_vdev_bwd_v8),
    [K_BWD_V1] = NORM_BWD_DEF("te_norm_bwd_v1", te_norm_vdev_bwd_v1),
    [K_BWD_STREAM_V8] = NORM_BWD_DEF("te_norm_bwd_stream_v8", te_norm_vdev_bwd_v8),
    [K_BWD_STREAM_V1] = NORM_BWD_DEF("te_norm_bwd_stream_v1", te_norm_vdev_bwd_v1),
    [K_BWD_REDUCE] = TE_KDEF("te_norm_bwd_reduce", te_norm_vdev_bwd_reduce, TE_NORM_REDUCE_PARAMS),
    [K_FWD_FAST] = NORM_FWD_DEF("te_norm_fwd_fast", te_norm_vdev_fwd_v8),
    [K_BWD_FAST] = NORM_BWD_DEF("te_norm_bwd_fast", te_norm_vdev_bwd_v8),
    [K_FWD_FAST16] = NORM_FWD_DEF("te_norm_fwd_fast16", te_norm_vdev_fwd_v8),
    [K_FWD_FULL16] = NORM_FWD_DEF("te_norm_fwd_full16", te_norm_vdev_fwd_v8),
    [K_BWD_FAST_CS] = NORM_BWD_DEF("te_norm_bwd_fast_cs", te_norm_vdev_bwd_v8),
    [K_FWD_WARP16] = NORM_FWD_DEF("te_norm_fwd_warp16", te_norm_vdev_fwd_v8),
};

#define NORM_FWD_ALIGN TE_KALIGN(TE_NORM_FWD_PARAMS)
#define NORM_BWD_ALIGN TE_KALIGN(TE_NORM_BWD_PARAMS)
static const struct te_kalign norm_align[] = {
    [K_FWD_V8] = NORM_FWD_ALIGN,        [K_FWD_V1] = NORM_FWD_ALIGN,
    [K_FWD_STREAM_V8] = NORM_FWD_ALIGN, [K_FWD_STREAM_V1] = NORM_FWD_ALIGN,
    [K_BWD_V8] = NORM_BWD_ALIGN,        [K_BWD_V1] = NORM_BWD_ALIGN,
    [K_BWD_STREAM_V8] = NORM_BWD_ALIGN, [K_BWD_STREAM_V1] = NORM_BWD_ALIGN,
    [K_BWD_REDUCE] = TE_KALIGN(TE_NORM_REDUCE_PARAMS),
    [K_FWD_FAST] = NORM_FWD_ALIGN,      [K_BWD_FAST] = NORM_BWD_ALIGN,
    [K_FWD_FAST16] = NORM_FWD_ALIGN,   [K_FWD_FULL16] = NORM_FWD_ALIGN,
    [K_BWD_FAST_CS] = NORM_BWD_ALIGN,  [K_FWD_WARP16] = NORM_FWD_ALIGN,
};

TE_KERNEL_TABLE_FATBIN_ALIGNED(norm_first_id, "libtecore/norm", norm_kernels, norm_align, norm)

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

/* On vdev, after every argument check: mu and rsigma hold rows floats, the
 * workspace the bytes the backward writes, inside live allocations (short
 * ones were written past: found by fuzz-api). */
static tecore_result_t norm_check_memory(tecore_devptr_t mu, tecore_devptr_t rsigma, size_t rows,
                                         tecore_devptr_t ws, size_t ws_bytes, const char *fn) {
  if (mu) TE_CHECK(te_dev_check_range(mu, rows * sizeof(float), fn, "mu"));
  if (rsigma) TE_CHECK(te_dev_check_range(rsigma, rows * sizeof(float), fn, "rsigma"));
  if (ws_bytes) TE_CHECK(te_dev_check_range(ws, ws_bytes, fn, "workspace"));
  return TECORE_SUCCESS;
}

static tecore_result_t norm_check_x(const struct tecore_tensor *x, const char *fn, size_t *rows,
                                    size_t *hidden) {
  TE_CHECK(te_check_hp_input(x, fn, "x"));
  te_tensor_view(x, rows, hidden);
  TE_ARG(*hidden <= NORM_MAX_HIDDEN, "%s: x: hidden %zu exceeds %llu", fn, *hidden, NORM_MAX_HIDDEN);
  TE_ARG(*rows <= NORM_MAX_ROWS, "%s: x: %zu rows exceed %llu", fn, *rows, NORM_MAX_ROWS);
  return TECORE_SUCCESS;
}

/* ---- the calls ----------------------------------------------------------------------- */

/* A forward as the entry points received it; ln: LayerNorm (beta and mu
 * used), else RMSNorm.  fn names the entry point in messages. */
struct norm_fwd_call {
  int ln;
  const struct tecore_tensor *x, *gamma, *beta;
  float eps;
  unsigned flags;
  struct tecore_tensor *y;
  tecore_devptr_t mu, rsigma;
  const char *fn;
};

/* ---- aliasing ------------------------------------------------------------------------ */

/* te/norm.h's rule: what a call writes (y, its amax and scale_inv, mu,
 * rsigma; dx, dgamma, dbeta, the workspace) shares no byte with anything
 * else the call touches, except that a _bwd_add call's dx may be exactly
 * extra_grad (each element read, then written, by one thread).  Absent
 * buffers are skipped. */
static void rowvec_span(struct te_tensor_spans *l, const char *name, tecore_devptr_t p,
                        size_t rows) {
  te_span_add(l, name, p, rows * sizeof(float));
}

/* RMSNorm's beta and mu are not read, whatever the call holds. */
static tecore_result_t norm_fwd_alias(const struct norm_fwd_call *c, size_t rows) {
  struct te_tensor_spans l = {.access = TE_ACCESS_WRITE};
  te_tensor_spans(c->y, "y", TE_SPAN_WRITTEN, &l);
  rowvec_span(&l, "mu", c->ln ? c->mu : 0, rows);
  rowvec_span(&l, "rsigma", c->rsigma, rows);
  l.access = TE_ACCESS_READ;
  te_tensor_spans(c->y, "y", TE_SPAN_SCALE, &l);
  te_tensor_spans(c->x, "x", TE_SPAN_DATA, &l);
  te_tensor_spans(c->gamma, "gamma", TE_SPAN_DATA, &l);
  if (c->ln && c->beta) te_tensor_spans(c->beta, "beta", TE_SPAN_DATA, &l);
  return te_check_spans(l.span, l.n, c->fn);
}

/* ws_used: the workspace bytes the backward writes.  RMSNorm's mu and
 * dbeta are not touched. */
static tecore_result_t norm_bwd_alias(const struct te_norm_bwd_call *c, size_t ws_used,
                                      size_t rows) {
  struct te_tensor_spans l = {.access = TE_ACCESS_WRITE, .pair = 1};
  te_tensor_spans(c->dx, "dx", TE_SPAN_DATA, &l);
  l.pair = 0;
  te_tensor_spans(c->dgamma, "dgamma", TE_SPAN_DATA, &l);
  if (c->ln && c->dbeta) te_tensor_spans(c->dbeta, "dbeta", TE_SPAN_DATA, &l);
  te_span_add(&l, "workspace", c->workspace, ws_used);
  l.access = TE_ACCESS_READ;
  te_tensor_spans(c->dy, "dy", TE_SPAN_DATA, &l);
  te_tensor_spans(c->x, "x", TE_SPAN_DATA, &l);
  rowvec_span(&l, "mu", c->ln ? c->mu : 0, rows);
  rowvec_span(&l, "rsigma", c->rsigma, rows);
  te_tensor_spans(c->gamma, "gamma", TE_SPAN_DATA, &l);
  if (c->extra) {
    l.pair = tecore_dtype_size(c->extra->dtype) == tecore_dtype_size(c->dx->dtype);
    te_tensor_spans(c->extra, "extra_grad", TE_SPAN_DATA, &l);
  }
  return te_check_spans(l.span, l.n, c->fn);
}

/* ---- forward -------------------------------------------------------------------------- */

/* te_norm_fwd_fast16 and _full16 blocks, each a row group, spend about 100
 * of their instructions on set-up and the block's amax, against 600-800 a
 * row, so their grid may be capped at this many waves of resident blocks,
 * which then loop over the row groups (the bytes out do not depend on the
 * grid).  Measured on an H100 (bench/2026-11-23.md, session 6), LayerNorm +
 * quantize at 16384x4096 took 0.080 ms with one wave, 0.073 with four and
 * 0.072 with a block per row group: the default is the last. */
TE_PARAM_INT(norm_fwd_waves, "TECORE_NORM_FWD_WAVES", 0, 0, 1024,
             "grid of the 16-bit LayerNorm/RMSNorm forward kernels: at most this many waves "
             "of resident blocks, looping over the rows (0, the default: a block per row "
             "group)");

/* Blocks of `threads` resident on one multiprocessor for a kernel held to
 * 48 registers (__maxnreg__(48)): 64K registers, 2048 threads, 32 blocks. */
static unsigned norm_resident_48(unsigned threads) {
  unsigned by_regs = 65536u / (48u * threads), by_threads = 2048u / threads;
  unsigned r = by_regs < by_threads ? by_regs : by_threads;
  return r < 1 ? 1 : r > 32 ? 32 : r;
}

static tecore_result_t norm_fwd(const struct norm_fwd_call *c, tecore_stream_t stream) {
  const int ln = c->ln;
  const struct tecore_tensor *x = c->x, *gamma = c->gamma, *beta = c->beta;
  struct tecore_tensor *y = c->y;
  const char *fn = c->fn;
  size_t rows, hidden;
  TE_CHECK(norm_check_x(x, fn, &rows, &hidden));
  TE_CHECK(te_check_hp_input(gamma, fn, "gamma"));
  TE_CHECK(norm_check_vector(gamma, hidden, fn, "gamma"));
  if (ln) {
    TE_CHECK(te_check_hp_input(beta, fn, "beta"));
    TE_CHECK(norm_check_vector(beta, hidden, fn, "beta"));
    TE_ARG(beta->dtype == gamma->dtype, "%s: beta is %s, gamma %s: they must match", fn,
           tecore_dtype_name(beta->dtype), tecore_dtype_name(gamma->dtype));
  }
  TE_CHECK(te_check_fused_output(y, fn, "y"));
  TE_CHECK(norm_check_like(y, rows, hidden, fn, "y"));
  TE_ARG(isfinite(c->eps) && c->eps >= 0.0f, "%s: epsilon %g is not a finite value >= 0", fn,
         (double)c->eps);
  TE_CHECK(norm_check_flags(c->flags, fn));
  if (ln) TE_CHECK(norm_check_rowvec(c->mu, 0, fn, "mu"));
  TE_CHECK(norm_check_rowvec(c->rsigma, 0, fn, "rsigma"));
  TE_CHECK(norm_fwd_alias(c, rows));
  if (rows == 0 || hidden == 0) return TECORE_SUCCESS;
  TE_CHECK(norm_check_memory(ln ? c->mu : 0, c->rsigma, rows, 0, 0, fn));
  int id = norm_first_id();
  if (id < 0) return TE_ERR(TECORE_ERR_INTERNAL, "%s: the norm kernels did not register", fn);

  int vec = hidden % 8 == 0 && te_al16(x->data) && te_al16(y->data) && te_al16(gamma->data) &&
            (!ln || te_al16(beta->data)) ? 8 : 1;
  struct te_norm_plan p = te_norm_plan_fwd(hidden, vec);
  int k = vec == 8 ? (p.stream ? K_FWD_STREAM_V8 : K_FWD_V8) : (p.stream ? K_FWD_STREAM_V1 : K_FWD_V1);
  /* te_norm_fwd_fast16 (16-bit x) or te_norm_fwd_fast (f32 x): one dtype
   * for x and the weights, the output that dtype or FP8 */
  if (k == K_FWD_V8 && p.tpr <= TE_NORM_FAST_TMAX && gamma->dtype == x->dtype &&
      (y->dtype == x->dtype || te_dtype_is_fp8(y->dtype)))
    k = x->dtype == TECORE_DTYPE_F32 ? K_FWD_FAST : K_FWD_FAST16;
  /* te_norm_fwd_full16: BF16 rows that fill 4 vectors of each of 128 or
   * 256 threads (hidden 4096, 8192), gamma as stored */
  if (k == K_FWD_FAST16 && x->dtype == TECORE_DTYPE_BF16 && p.nv == TE_NORM_FWD_NV_MAX &&
      (p.tpr == 128 || p.tpr == 256) && hidden == (size_t)TE_NORM_FWD_NV_MAX * 8 * p.tpr &&
      !(c->flags & TECORE_NORM_ZERO_CENTERED_GAMMA))
    k = K_FWD_FULL16;
  /* te_norm_fwd_warp16: BF16 rows that fill 3 vectors of each thread of a
   * warp (hidden 768), gamma as stored (measured against te_norm_fwd_fast16
   * at GPT-2's LayerNorm, bench/2026-11-27.md, session 35, phase d; the
   * same operations in the same order) */
  if (k == K_FWD_FAST16 && x->dtype == TECORE_DTYPE_BF16 && p.tpr == 32 && p.nv == 3 &&
      hidden == 3 * 8 * 32 && !(c->flags & TECORE_NORM_ZERO_CENTERED_GAMMA))
    k = K_FWD_WARP16;
  unsigned long long blocks = (rows + (unsigned)p.rows_per_block - 1) / (unsigned)p.rows_per_block;
  const int64_t waves = tecore_tunable_int(&norm_fwd_waves);
  if ((k == K_FWD_FAST16 || k == K_FWD_FULL16 || k == K_FWD_WARP16) && waves > 0) {
    unsigned long long cap =
        (unsigned long long)te_sm_count() * norm_resident_48(p.threads) * (unsigned long long)waves;
    if (blocks > cap) blocks = cap;
  }
  struct tecore_launch_cfg cfg = {.grid = {(unsigned)blocks, 1, 1}, .block = {p.threads, 1, 1}};

  struct te_norm_fwd_args a = {
      .x = TE_DPTR(x->data), .gamma = TE_DPTR(gamma->data),
      .beta = ln ? TE_DPTR(beta->data) : NULL, .y = TE_DPTR(y->data),
      .mu = ln ? TE_DPTR(c->mu) : NULL, .rsigma = TE_DPTR(c->rsigma), .rows = rows,
      .hidden = (unsigned)hidden, .eps = c->eps,
      .flags = (ln ? TE_NORM_LAYERNORM : 0) |
               ((c->flags & TECORE_NORM_ZERO_CENTERED_GAMMA) ? TE_NORM_ZERO_CENTERED : 0),
      .dtypes = TE_NORM_DT_PACK((int)x->dtype, (int)gamma->dtype, (int)y->dtype, 0, 0),
      .tpr = p.tpr, .nv = p.nv};
  /* current scaling: a pass for the amax, then one with the scale */
  for (int pass = 0; pass < te_qout_passes(y); pass++) {
    struct te_qout q;
    TE_CHECK(te_qout_begin(y, pass, 0, stream, &q));
    a.scale = q.scale;
    a.amax = q.amax;
    a.scale_inv = q.scale_inv;
    void *args[TE_KNPARAMS(TE_NORM_FWD_PARAMS)];
    te_norm_fwd_args_ptrs(&a, args);
    TE_CHECK(te_kernel_launch_pdl(id + k, &cfg, args, stream));
  }
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_layernorm_fwd(const struct tecore_tensor *x,
                                               const struct tecore_tensor *gamma,
                                               const struct tecore_tensor *beta, float epsilon,
                                               unsigned flags, struct tecore_tensor *y,
                                               tecore_devptr_t mu, tecore_devptr_t rsigma,
                                               tecore_stream_t stream) {
  return norm_fwd(&(struct norm_fwd_call){.ln = 1, .x = x, .gamma = gamma, .beta = beta,
                                          .eps = epsilon, .flags = flags, .y = y, .mu = mu,
                                          .rsigma = rsigma, .fn = __func__},
                  stream);
}

TE_EXPORT tecore_result_t tecore_rmsnorm_fwd(const struct tecore_tensor *x,
                                             const struct tecore_tensor *gamma, float epsilon,
                                             unsigned flags, struct tecore_tensor *y,
                                             tecore_devptr_t rsigma, tecore_stream_t stream) {
  return norm_fwd(&(struct norm_fwd_call){.x = x, .gamma = gamma, .eps = epsilon,
                                          .flags = flags, .y = y, .rsigma = rsigma,
                                          .fn = __func__},
                  stream);
}

/* ---- backward ------------------------------------------------------------------------- */

TE_PARAM_INT(norm_bwd_fast_parts, "TECORE_NORM_BWD_FAST_PARTS", TE_NORM_BWD_FAST_MAX_PARTS, 1,
             TE_NORM_BWD_FAST_MAX_PARTS,
             "blocks (partial rows of the weight gradients) of the 16-bit LayerNorm/RMSNorm "
             "backward kernel, at most: 396, three waves of 132 SMs, by default; the sums' "
             "order, and so their bits, follow it")

/* An upper bound of the parts any plan uses, so the size needs no pointers. */
static size_t norm_ws_bytes(int ln, size_t rows, size_t hidden) {
  size_t parts = rows < TE_NORM_BWD_FAST_MAX_PARTS ? rows : TE_NORM_BWD_FAST_MAX_PARTS;
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
  TE_CHECK(te_check_fused_output(t, fn, arg));
  TE_ARG(t->scaling == TECORE_SCALING_NONE, "%s: %s: scaling %s: gradients are written in f32, f16 or bf16",
         fn, arg, tecore_scaling_name(t->scaling));
  return TECORE_SUCCESS;
}

tecore_result_t te_norm_bwd(const struct te_norm_bwd_call *c, tecore_stream_t stream) {
  if (c->cs_parts) *c->cs_parts = 0;
  const int ln = c->ln;
  const struct tecore_tensor *dy = c->dy, *x = c->x, *gamma = c->gamma, *extra = c->extra;
  struct tecore_tensor *dx = c->dx, *dgamma = c->dgamma, *dbeta = c->dbeta;
  const char *fn = c->fn;
  size_t rows, hidden;
  TE_CHECK(norm_check_x(x, fn, &rows, &hidden));
  TE_CHECK(te_check_hp_input(dy, fn, "dy"));
  TE_CHECK(norm_check_like(dy, rows, hidden, fn, "dy"));
  TE_CHECK(te_check_hp_input(gamma, fn, "gamma"));
  TE_CHECK(norm_check_vector(gamma, hidden, fn, "gamma"));
  if (extra) {
    TE_CHECK(te_check_hp_input(extra, fn, "extra_grad"));
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
  TE_CHECK(norm_check_flags(c->flags, fn));
  if (ln) TE_CHECK(norm_check_rowvec(c->mu, rows > 0, fn, "mu"));
  TE_CHECK(norm_check_rowvec(c->rsigma, rows > 0, fn, "rsigma"));
  size_t need = norm_ws_bytes(ln, rows, hidden);
  TE_ARG(c->workspace_bytes >= need,
         "%s: workspace_bytes %zu is below the %zu bytes tecore_norm_bwd_workspace_size gives", fn,
         c->workspace_bytes, need);
  TE_ARG(c->workspace || need == 0, "%s: workspace is 0", fn);
  TE_ARG(c->workspace % 16 == 0, "%s: workspace (0x%llx) is not aligned to 16 bytes", fn,
         (unsigned long long)c->workspace);
  TE_CHECK(norm_bwd_alias(c, need, rows));
  if (hidden == 0) return TECORE_SUCCESS;
  if (rows) TE_CHECK(norm_check_memory(ln ? c->mu : 0, c->rsigma, rows, c->workspace, need, fn));
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
  int k = vec == 8 ? (p.stream ? K_BWD_STREAM_V8 : K_BWD_V8) : (p.stream ? K_BWD_STREAM_V1 : K_BWD_V1);
  /* te_norm_bwd_fast: one 16-bit dtype for x, dy, gamma, dx (and extra_grad) */
  if (k == K_BWD_V8 && x->dtype != TECORE_DTYPE_F32 && dy->dtype == x->dtype && gamma->dtype == x->dtype &&
      dx->dtype == x->dtype && (!extra || extra->dtype == x->dtype))
    k = K_BWD_FAST;
  unsigned parts = te_norm_bwd_parts(
      rows, p.rows_per_block,
      k == K_BWD_FAST ? (unsigned)tecore_tunable_int(&norm_bwd_fast_parts) : TE_NORM_BWD_MAX_PARTS);
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
  /* dx's column sums from the same kernel: te_norm_bwd_fast's layout with
   * 256 threads (hidden up to 4096), the parts' rows in the caller's
   * scratch */
  size_t cs_need = (size_t)parts * hidden * sizeof(float);
  const int cs = c->cs && c->cs_out && k == K_BWD_FAST && p.threads == TE_NORM_BWD_BLOCK &&
                 cs_need <= c->cs_bytes && c->cs % 16 == 0 && c->cs_out % 4 == 0 &&
                 c->cs_copy % 4 == 0;
  if (c->cs_parts) *c->cs_parts = cs ? parts : 0;
  if (cs) {
    k = K_BWD_FAST_CS;
    /* two sets (dx's sums, dbeta's) of float4 [vector][half][thread] */
    comb += (unsigned)(2 * TE_NORM_BWD_NV_MAX * 2 * TE_NORM_BWD_BLOCK * 4 * sizeof(float));
  }
  struct tecore_launch_cfg cfg = {.grid = {parts, 1, 1}, .block = {p.threads, 1, 1},
                                  .shared_bytes = comb};
  struct te_norm_bwd_args a = {
      .dy = TE_DPTR(dy->data), .x = TE_DPTR(x->data), .mu = ln ? TE_DPTR(c->mu) : NULL,
      .rsigma = TE_DPTR(c->rsigma), .gamma = TE_DPTR(gamma->data),
      .extra = extra ? TE_DPTR(extra->data) : NULL, .dx = TE_DPTR(dx->data),
      .ws = TE_DPTR(c->workspace), .rows = rows, .hidden = (unsigned)hidden,
      .flags = (ln ? TE_NORM_LAYERNORM : 0) | (extra ? TE_NORM_EXTRA_GRAD : 0) |
               ((c->flags & TECORE_NORM_ZERO_CENTERED_GAMMA) ? TE_NORM_ZERO_CENTERED : 0) |
               smem_partials,
      .dtypes = TE_NORM_DT_PACK((int)x->dtype, (int)dy->dtype, (int)gamma->dtype, (int)dx->dtype,
                                extra ? (int)extra->dtype : 0),
      .tpr = p.tpr, .nv = p.nv, .parts = parts, .cs = cs ? TE_DPTR(c->cs) : NULL};
  void *args[TE_KNPARAMS(TE_NORM_BWD_PARAMS)];
  te_norm_bwd_args_ptrs(&a, args);
  TE_CHECK(te_kernel_launch_pdl(id + k, &cfg, args, stream));

  struct tecore_launch_cfg rcfg = {
      .grid = {(unsigned)((hidden + TE_NORM_REDUCE_COLS - 1) / TE_NORM_REDUCE_COLS), 1, 1},
      .block = {TE_NORM_REDUCE_COLS, TE_NORM_REDUCE_GROUPS, 3}};
  struct te_norm_reduce_args ra = {
      .ws = a.ws, .out0 = TE_DPTR(dgamma->data), .out1 = ln ? TE_DPTR(dbeta->data) : NULL,
      .parts = parts, .hidden = (unsigned)hidden,
      .dtypes = TE_NORM_DT_PACK((int)dgamma->dtype, ln ? (int)dbeta->dtype : 0, 0, 0, 0),
      .cs = a.cs, .cs_out = cs ? TE_DPTR(c->cs_out) : NULL, .cs_acc = c->cs_acc != 0,
      .cs_copy = cs ? TE_DPTR(c->cs_copy) : NULL};
  void *rargs[TE_KNPARAMS(TE_NORM_REDUCE_PARAMS)];
  te_norm_reduce_args_ptrs(&ra, rargs);
  TE_CHECK(te_kernel_launch_pdl(id + K_BWD_REDUCE, &rcfg, rargs, stream));
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
  return te_norm_bwd(&(struct te_norm_bwd_call){.ln = 1, .dy = dy, .x = x, .gamma = gamma, .mu = mu,
                                          .rsigma = rsigma, .flags = flags, .dx = dx,
                                          .dgamma = dgamma, .dbeta = dbeta,
                                          .workspace = workspace,
                                          .workspace_bytes = workspace_bytes, .fn = __func__},
                  stream);
}

TE_EXPORT tecore_result_t tecore_rmsnorm_bwd(const struct tecore_tensor *dy,
                                             const struct tecore_tensor *x, tecore_devptr_t rsigma,
                                             const struct tecore_tensor *gamma, unsigned flags,
                                             struct tecore_tensor *dx,
                                             struct tecore_tensor *dgamma,
                                             tecore_devptr_t workspace, size_t workspace_bytes,
                                             tecore_stream_t stream) {
  return te_norm_bwd(&(struct te_norm_bwd_call){.dy = dy, .x = x, .gamma = gamma, .rsigma = rsigma,
                                          .flags = flags, .dx = dx, .dgamma = dgamma,
                                          .workspace = workspace,
                                          .workspace_bytes = workspace_bytes, .fn = __func__},
                  stream);
}

TE_EXPORT tecore_result_t tecore_layernorm_bwd_add(
    const struct tecore_tensor *dy, const struct tecore_tensor *x, tecore_devptr_t mu,
    tecore_devptr_t rsigma, const struct tecore_tensor *gamma,
    const struct tecore_tensor *extra_grad, unsigned flags, struct tecore_tensor *dx,
    struct tecore_tensor *dgamma, struct tecore_tensor *dbeta, tecore_devptr_t workspace,
    size_t workspace_bytes, tecore_stream_t stream) {
  TE_ARG(extra_grad, "%s: extra_grad is NULL", __func__);
  return te_norm_bwd(&(struct te_norm_bwd_call){.ln = 1, .dy = dy, .x = x, .gamma = gamma, .mu = mu,
                                          .rsigma = rsigma, .extra = extra_grad, .flags = flags,
                                          .dx = dx, .dgamma = dgamma, .dbeta = dbeta,
                                          .workspace = workspace,
                                          .workspace_bytes = workspace_bytes, .fn = __func__},
                  stream);
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
  return te_norm_bwd(&(struct te_norm_bwd_call){.dy = dy, .x = x, .gamma = gamma, .rsigma = rsigma,
                                          .extra = extra_grad, .flags = flags, .dx = dx,
                                          .dgamma = dgamma, .workspace = workspace,
                                          .workspace_bytes = workspace_bytes, .fn = __func__},
                  stream);
}
