/* SPDX-License-Identifier: Apache-2.0 */
/* check_quantize.c -- tecore_quantize / tecore_dequantize /
 * tecore_quantize_multi / tecore_amax / tecore_compute_scale and the tensor
 * descriptor (te/tensor.h, DLPack) on the selected backend.
 *
 * The reference is written here from the rules in te/tensor.h and
 * te/recipe.h: block amaxes as float maxima, per-tensor and per-block scales
 * computed in float64 and rounded once (fp8_max / amax is a quotient of two
 * floats, so the double quotient rounded to float is the correctly rounded
 * float quotient), E8M0 exponents from frexp, the product x * scale rounded
 * to float, and the element conversion of kernels/common/fp8.h, which
 * check_fp8_convert proves against a float64 nearest-value search.
 * Tolerance: FP8 bytes, scale and scale_inv bits and amax bits exact;
 * dequantized values exact (the product of an FP8 value and a scale_inv is
 * rounded once to the output type).
 * Shapes: 1 row, widths not a multiple of 8/16/32/128, misaligned pointers,
 * a long row; inputs are fresh random values over a wide range each run,
 * outputs poisoned (0xA5) with guard bytes after every buffer. */
#include "tests.h"
#include <float.h>
#include "common/fp8.h"
#include "common/convert.h"

#define GUARD 64

/* ---- host reference --------------------------------------------------------------- */

static float fp8max(tecore_dtype_t d) { return d == TECORE_DTYPE_E4M3 ? 448.0f : 57344.0f; }

static float ref_current_scale(float amax, float eps, float fmax, int pow2) {
  if (isnan(amax) || isinf(amax)) return 1.0f;
  float a = amax < eps ? eps : amax;
  if (!(a > 0.0f)) return 1.0f;
  double q = (double)fmax / (double)a;
  float s = q > FLT_MAX ? FLT_MAX : (float)q;
  if (isinf(s)) s = FLT_MAX;
  if (pow2) {
    int k;
    frexpf(s, &k);
    s = ldexpf(1.0f, k - 1);
  }
  return s;
}

static uint8_t ref_e8m0(float amax, tecore_dtype_t d) {
  int emax = d == TECORE_DTYPE_E4M3 ? 8 : 15;
  if (isnan(amax) || isinf(amax)) return 0xff;
  if (amax == 0.0f) return 0;
  int k;
  frexp((double)amax, &k);
  int e = k - 1 - emax + 127;
  return (uint8_t)(e < 0 ? 0 : e > 254 ? 254 : e);
}

static uint8_t q8(float x, float s, tecore_dtype_t d) {
  float p = (float)((double)x * (double)s);   /* the float product, rounded once */
  return te_f32_to_fp8(p, (int)d);
}

static float habs_max(const float *x, size_t n) {
  uint32_t m = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t b = te_f32_bits_of(x[i]) & 0x7fffffffu;
    if (b > m) m = b;
  }
  return te_f32_from_bits(m);
}

/* ---- inputs ------------------------------------------------------------------------ */

/* Values spread over many binades (some rows and columns much larger than
 * others so block scales differ), rounded to the input type. */
static void make_input(float *x, size_t rows, size_t cols, tecore_dtype_t dt, float range) {
  for (size_t r = 0; r < rows; r++) {
    float rs = ldexpf(1.0f, (int)te_rand_below(9) - 4);
    for (size_t c = 0; c < cols; c++) {
      float cs = (c / 37) % 3 == 0 ? 1.0f : ldexpf(1.0f, -(int)((c / 37) % 5));
      float v = te_rand_float(-range, range) * rs * cs;
      if (te_rand_below(50) == 0) v = ldexpf(v, -(int)te_rand_below(20));   /* tiny ones */
      if (dt == TECORE_DTYPE_BF16) v = te_bf16_to_f32(te_f32_to_bf16(v));
      if (dt == TECORE_DTYPE_F16) v = te_f16_to_f32(te_f32_to_f16(v));
      x[r * cols + c] = v;
    }
  }
}

/* The input as stored bytes of dt. */
static void *pack_input(const float *x, size_t n, tecore_dtype_t dt) {
  void *p = malloc(n * tecore_dtype_size(dt) + 16);
  for (size_t i = 0; i < n; i++) {
    if (dt == TECORE_DTYPE_F32) ((float *)p)[i] = x[i];
    else if (dt == TECORE_DTYPE_BF16) ((uint16_t *)p)[i] = te_f32_to_bf16(x[i]);
    else ((uint16_t *)p)[i] = te_f32_to_f16(x[i]);
  }
  return p;
}

/* ---- device buffers with guards ------------------------------------------------------ */

struct dbuf {
  tecore_devptr_t base, p;
  size_t bytes, off;
};

/* A poisoned device buffer of bytes (+ guard), whose pointer is base + off. */
static struct dbuf dbuf_new(size_t bytes, size_t off) {
  struct dbuf b = {.bytes = bytes, .off = off};
  b.base = te_dalloc(bytes + off + GUARD);
  te_poison_dev(b.base, bytes + off + GUARD);
  b.p = b.base + off;
  return b;
}
static void dbuf_get(void *dst, struct dbuf b) { te_d2h(dst, b.p, b.bytes); }
static void dbuf_check_guard(struct dbuf b, const char *what) {
  unsigned char g[GUARD];
  te_d2h(g, b.p + b.bytes, GUARD);
  te_expect_bytes_eq(g, TE_POISON_BYTE, GUARD, what);
}
static void dbuf_free(struct dbuf *b) {
  if (b->base) TE_OK(tecore_mem_free(b->base));
  b->base = 0;
}

static float dget_f32(tecore_devptr_t p) {
  float v;
  te_d2h(&v, p, 4);
  return v;
}
static void dset_f32(tecore_devptr_t p, float v) { te_h2d(p, &v, 4); }

/* ---- one quantize case ------------------------------------------------------------------- */

struct qcase {
  size_t rows, cols;
  tecore_dtype_t in_dt, out_dt;
  tecore_scaling_mode_t mode;
  int rowwise, colwise;
  int pow2;
  float eps;
  size_t in_off, out_off;   /* byte offsets that misalign the data pointers */
  float range;
};

static void run_case(const struct qcase *k) {
  const size_t rows = k->rows, cols = k->cols, n = rows * cols;
  char what[256];
  snprintf(what, sizeof what, "%s %zux%zu %s->%s row=%d col=%d pow2=%d eps=%g off=%zu/%zu",
           tecore_scaling_name(k->mode), rows, cols, tecore_dtype_name(k->in_dt),
           tecore_dtype_name(k->out_dt), k->rowwise, k->colwise, k->pow2, (double)k->eps,
           k->in_off, k->out_off);
  float *x = malloc(n * sizeof(float));
  make_input(x, rows, cols, k->in_dt, k->range);
  void *xin = pack_input(x, n, k->in_dt);
  struct dbuf din = dbuf_new(n * tecore_dtype_size(k->in_dt), k->in_off);
  te_h2d(din.p, xin, din.bytes);

  size_t shape[2] = {rows, cols};
  struct tecore_tensor in, out;
  TE_OK(tecore_tensor_init(&in, k->in_dt, 2, shape, din.p));
  TE_OK(tecore_tensor_init(&out, k->out_dt, 2, shape, 0));
  out.scaling = k->mode;
  out.amax_epsilon = k->eps;
  out.flags = k->pow2 ? TECORE_TENSOR_POW2_SCALES : 0;

  size_t srr, src, scr, scc;
  tecore_dtype_t sdt;
  TE_OK(tecore_tensor_scale_shape(&out, 0, &srr, &src, &sdt));
  TE_OK(tecore_tensor_scale_shape(&out, 1, &scr, &scc, &sdt));
  size_t ss = tecore_dtype_size(sdt);
  struct dbuf qrow = {0}, qcol = {0}, srow = {0}, scol = {0};
  if (k->rowwise) qrow = dbuf_new(n, k->out_off), srow = dbuf_new(srr * src * ss, 0);
  if (k->colwise) qcol = dbuf_new(n, k->out_off), scol = dbuf_new(scr * scc * ss, 0);
  out.data = qrow.p;
  out.columnwise_data = qcol.p;
  out.scale_inv = srow.p;
  out.columnwise_scale_inv = scol.p;
  int per_tensor = k->mode == TECORE_SCALING_DELAYED || k->mode == TECORE_SCALING_CURRENT;
  if (per_tensor && !k->rowwise) {   /* per-tensor: scale_inv is one float either way */
    out.scale_inv = 0;
  }
  tecore_devptr_t dscal = te_dalloc(8);   /* [0] amax  [1] scale */
  float amax0 = te_rand_float(0.0f, 0.001f);            /* an earlier amax to accumulate onto */
  float xmax = habs_max(x, n);
  float scale_given = te_rand_float(0.5f, 2.0f) * fp8max(k->out_dt) / (xmax > 0 ? xmax : 1.0f);
  if (te_rand_below(4) == 0) scale_given *= 4.0f;   /* some values saturate */
  dset_f32(dscal, amax0);
  dset_f32(dscal + 4, scale_given);
  out.amax = dscal;
  out.scale = dscal + 4;

  TE_OK(tecore_quantize(&in, &out, 0, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));

  /* reference */
  uint8_t *wrow = malloc(n + 1), *wcol = malloc(n + 1), *grow = malloc(n + 1), *gcol = malloc(n + 1);
  float *wsrow = calloc(srr * src + 1, 4), *wscol = calloc(scr * scc + 1, 4);
  uint8_t *wsrow8 = calloc(srr * src + 1, 1), *wscol8 = calloc(scr * scc + 1, 1);
  const tecore_dtype_t od = k->out_dt;
  float want_amax = amax0 > xmax ? amax0 : xmax;
  if (per_tensor) {
    float s = k->mode == TECORE_SCALING_CURRENT ? ref_current_scale(xmax, k->eps, fp8max(od), k->pow2)
                                                : scale_given;
    if (k->mode == TECORE_SCALING_CURRENT) want_amax = xmax;
    for (size_t r = 0; r < rows; r++)
      for (size_t c = 0; c < cols; c++) {
        uint8_t q = q8(x[r * cols + c], s, od);
        wrow[r * cols + c] = q;
        wcol[c * rows + r] = q;
      }
    wsrow[0] = wscol[0] = (float)(1.0 / (double)s);
    ck_assert_msg(te_f32_bits_of(dget_f32(out.scale)) == te_f32_bits_of(s),
                  "%s: scale %a, want %a", what, (double)dget_f32(out.scale), (double)s);
  } else if (k->mode == TECORE_SCALING_MXFP8) {
    const size_t nb = (cols + 31) / 32;
    for (size_t r = 0; r < rows; r++)
      for (size_t b = 0; b < nb; b++) {
        size_t c1 = (b + 1) * 32 < cols ? (b + 1) * 32 : cols;
        float m = habs_max(x + r * cols + b * 32, c1 - b * 32);
        uint8_t e = ref_e8m0(m, od);
        float mult = e == 0xff ? NAN : ldexpf(1.0f, 127 - e);
        wsrow8[r * nb + b] = e;
        for (size_t c = b * 32; c < c1; c++) wrow[r * cols + c] = q8(x[r * cols + c], mult, od);
      }
    for (size_t rb = 0; rb * 32 < rows; rb++)
      for (size_t c = 0; c < cols; c++) {
        size_t r1 = (rb + 1) * 32 < rows ? (rb + 1) * 32 : rows;
        float m = 0;
        for (size_t r = rb * 32; r < r1; r++) m = fmaxf(m, fabsf(x[r * cols + c]));
        uint8_t e = ref_e8m0(m, od);
        float mult = e == 0xff ? NAN : ldexpf(1.0f, 127 - e);
        wscol8[rb * cols + c] = e;
        for (size_t r = rb * 32; r < r1; r++) wcol[r * cols + c] = q8(x[r * cols + c], mult, od);
      }
  } else {
    /* block amaxes first: per row block, per column block, per tile */
    const size_t T = 128, ntr = (rows + T - 1) / T, ntc = (cols + T - 1) / T;
    const int two_d = k->mode == TECORE_SCALING_BLOCK_128X128;
    float *mrow = calloc(rows * ntc, 4), *mcol = calloc(cols * ntr, 4), *mtile = calloc(ntr * ntc, 4);
    for (size_t r = 0; r < rows; r++)
      for (size_t c = 0; c < cols; c++) {
        float a = fabsf(x[r * cols + c]);
        mrow[r * ntc + c / T] = fmaxf(mrow[r * ntc + c / T], a);
        mcol[c * ntr + r / T] = fmaxf(mcol[c * ntr + r / T], a);
        mtile[(r / T) * ntc + c / T] = fmaxf(mtile[(r / T) * ntc + c / T], a);
      }
    for (size_t r = 0; r < rows; r++)
      for (size_t c = 0; c < cols; c++) {
        float mr = two_d ? mtile[(r / T) * ntc + c / T] : mrow[r * ntc + c / T];
        float mc = two_d ? mtile[(r / T) * ntc + c / T] : mcol[c * ntr + r / T];
        float sr = ref_current_scale(mr, k->eps, fp8max(od), k->pow2);
        float sc = ref_current_scale(mc, k->eps, fp8max(od), k->pow2);
        wrow[r * cols + c] = q8(x[r * cols + c], sr, od);
        wcol[c * rows + r] = q8(x[r * cols + c], sc, od);
        if (two_d) {
          wsrow[(r / T) * ntc + c / T] = (float)(1.0 / sr);
          wscol[(c / T) * ntr + r / T] = (float)(1.0 / sc);
        } else {
          wsrow[r * ntc + c / T] = (float)(1.0 / sr);
          wscol[c * ntr + r / T] = (float)(1.0 / sc);
        }
      }
    free(mrow), free(mcol), free(mtile);
  }

  /* compare */
  char w2[300];
  if (k->rowwise) {
    dbuf_get(grow, qrow);
    snprintf(w2, sizeof w2, "%s: rowwise bytes", what);
    te_expect_mem_eq(grow, wrow, n, w2);
    dbuf_check_guard(qrow, "rowwise guard");
  }
  if (k->colwise) {
    dbuf_get(gcol, qcol);
    snprintf(w2, sizeof w2, "%s: columnwise bytes", what);
    te_expect_mem_eq(gcol, wcol, n, w2);
    dbuf_check_guard(qcol, "columnwise guard");
  }
  if (k->mode == TECORE_SCALING_MXFP8) {
    uint8_t *g = malloc(srr * src + scr * scc + 2);
    if (k->rowwise) {
      dbuf_get(g, srow);
      snprintf(w2, sizeof w2, "%s: rowwise e8m0 scales", what);
      te_expect_mem_eq(g, wsrow8, srr * src, w2);
      dbuf_check_guard(srow, "rowwise scale guard");
    }
    if (k->colwise) {
      dbuf_get(g, scol);
      snprintf(w2, sizeof w2, "%s: columnwise e8m0 scales", what);
      te_expect_mem_eq(g, wscol8, scr * scc, w2);
      dbuf_check_guard(scol, "columnwise scale guard");
    }
    free(g);
  } else {
    float *g = malloc((srr * src + scr * scc + 2) * 4);
    if (k->rowwise) {
      dbuf_get(g, srow);
      snprintf(w2, sizeof w2, "%s: scale_inv", what);
      te_expect_f32_bits(g, wsrow, srr * src, w2);
      dbuf_check_guard(srow, "scale_inv guard");
    }
    if (k->colwise) {
      dbuf_get(g, scol);
      snprintf(w2, sizeof w2, "%s: columnwise_scale_inv", what);
      te_expect_f32_bits(g, wscol, scr * scc, w2);
      dbuf_check_guard(scol, "columnwise scale_inv guard");
    }
    free(g);
  }
  float got_amax = dget_f32(out.amax);
  ck_assert_msg(te_f32_bits_of(got_amax) == te_f32_bits_of(want_amax), "%s: amax %a, want %a",
                what, (double)got_amax, (double)want_amax);

  /* dequantize what was written and compare with fp8 value * scale_inv */
  if (k->rowwise || k->mode == TECORE_SCALING_MXFP8) {
    tecore_dtype_t ddt = (tecore_dtype_t)(te_rand_below(3));   /* f32, f16 or bf16 */
    struct dbuf dq = dbuf_new(n * tecore_dtype_size(ddt), 0);
    struct tecore_tensor o;
    TE_OK(tecore_tensor_init(&o, ddt, 2, shape, dq.p));
    TE_OK(tecore_dequantize(&out, &o, te_stream));
    TE_OK(tecore_stream_synchronize(te_stream));
    void *gd = malloc(dq.bytes), *wd = malloc(dq.bytes);
    dbuf_get(gd, dq);
    const int use_col = !k->rowwise;
    const uint8_t *q = use_col ? wcol : wrow;
    for (size_t r = 0; r < rows; r++)
      for (size_t c = 0; c < cols; c++) {
        float si;
        if (per_tensor) si = wsrow[0];
        else if (k->mode == TECORE_SCALING_MXFP8) {
          uint8_t e = use_col ? wscol8[(r / 32) * cols + c] : wsrow8[r * ((cols + 31) / 32) + c / 32];
          si = e == 0xff ? NAN : ldexpf(1.0f, e - 127);
        } else if (k->mode == TECORE_SCALING_BLOCK_128X128) si = wsrow[(r / 128) * ((cols + 127) / 128) + c / 128];
        else si = wsrow[r * ((cols + 127) / 128) + c / 128];
        float v = (float)((double)te_fp8_to_f32(q[r * cols + c], (int)od) * (double)si);
        size_t i = r * cols + c;
        if (ddt == TECORE_DTYPE_F32) ((float *)wd)[i] = v;
        else if (ddt == TECORE_DTYPE_BF16) ((uint16_t *)wd)[i] = te_f32_to_bf16(v);
        else ((uint16_t *)wd)[i] = te_f32_to_f16(v);
      }
    snprintf(w2, sizeof w2, "%s: dequantized to %s", what, tecore_dtype_name(ddt));
    if (ddt == TECORE_DTYPE_F32) te_expect_f32_bits(gd, wd, n, w2);
    else te_expect_half_bits(gd, wd, n, ddt == TECORE_DTYPE_F16 ? 5 : 8,
                             ddt == TECORE_DTYPE_F16 ? te_f16_to_f32 : te_bf16_to_f32, w2);
    dbuf_check_guard(dq, "dequantize guard");
    free(gd);
    free(wd);
    dbuf_free(&dq);
  }

  free(x), free(xin), free(wrow), free(wcol), free(grow), free(gcol);
  free(wsrow), free(wscol), free(wsrow8), free(wscol8);
  dbuf_free(&din), dbuf_free(&qrow), dbuf_free(&qcol), dbuf_free(&srow), dbuf_free(&scol);
  TE_OK(tecore_mem_free(dscal));
}

static const size_t shapes[][2] = {{1, 1},   {1, 7},    {1, 33},  {3, 16},   {31, 65},
                                   {64, 64}, {33, 129}, {130, 257}, {129, 128}, {1, 20011},
                                   {300, 50}, {7, 1000}};
#define NSHAPES (sizeof shapes / sizeof shapes[0])
static const tecore_dtype_t in_dts[] = {TECORE_DTYPE_F32, TECORE_DTYPE_BF16, TECORE_DTYPE_F16};

static void sweep(tecore_scaling_mode_t mode, int rowwise, int colwise) {
  for (size_t s = 0; s < NSHAPES; s++)
    for (int i = 0; i < 3; i++) {
      struct qcase k = {.rows = shapes[s][0], .cols = shapes[s][1], .in_dt = in_dts[i],
                        .out_dt = (s + i) % 2 ? TECORE_DTYPE_E5M2 : TECORE_DTYPE_E4M3,
                        .mode = mode, .rowwise = rowwise, .colwise = colwise,
                        .pow2 = (int)te_rand_below(2), .range = te_rand_float(0.5f, 3000.0f)};
      if (te_rand_below(3) == 0) k.eps = ldexpf(1.0f, -(int)te_rand_below(12));
      if ((s + i) % 3 == 1) {   /* misaligned by one element: the scalar paths */
        k.in_off = tecore_dtype_size(k.in_dt);
        k.out_off = 1;
      }
      run_case(&k);
    }
}

START_TEST(delayed_rowwise) { sweep(TECORE_SCALING_DELAYED, 1, 0); }
END_TEST

/* Per-tensor quantize of more elements than the grid's threads take in one
 * 16-element chunk each (the grid is capped at 8 blocks of 256 threads an
 * SM: 4.3M elements on 132 SMs), so that on a GPU every thread loops,
 * then the 3-element tail.  16.8M elements, delayed and current. */
START_TEST(per_tensor_many_chunks_a_thread) {
  static const tecore_dtype_t dts[] = {TECORE_DTYPE_BF16, TECORE_DTYPE_F16, TECORE_DTYPE_F32};
  for (int i = 0; i < 3; i++)
    for (int cur = 0; cur < 2; cur++) {
      if (i > 0 && cur) continue;   /* the loop shape is the dtype's, not the mode's */
      struct qcase k = {.rows = 4097, .cols = 4099, .in_dt = dts[i],
                        .out_dt = (i + cur) % 2 ? TECORE_DTYPE_E5M2 : TECORE_DTYPE_E4M3,
                        .mode = cur ? TECORE_SCALING_CURRENT : TECORE_SCALING_DELAYED,
                        .rowwise = 1, .range = te_rand_float(0.5f, 3000.0f)};
      run_case(&k);
    }
}
END_TEST
/* The per-tensor and amax kernels (the warp-contiguous loop) with each
 * grid (TECORE_QUANTIZE_BLOCKS_PER_SM 0: a block per 4096 elements; 8:
 * one wave; 3 and 1: grid-stride loops of many steps): the same bytes as
 * the reference, delayed and current scaling (whose amax pass takes the
 * same loop and grid).  4.55M elements, a count that leaves a partial
 * last tile (the chunk-by-chunk fallback) and a 3-element tail; then
 * counts that are no multiple of a chunk, a tile or a block's elements
 * (1, odd, 4096k + 7, 4096 less or more one) and input pointers misaligned
 * by an element (the scalar path) or by 16 bytes (aligned enough for the
 * vector path, not for a 128-byte line).  On vdev every grid runs the
 * same C function; the test still sets each.  The tunable is read once a
 * process: set here, before this test's first quantize (Check forks a
 * process a test); under CK_FORK=no an earlier test has read it and the
 * case says it runs the grid read. */
static void run_grid(int per_sm) {
  char v[16];
  snprintf(v, sizeof v, "%d", per_sm);
  ck_assert_int_eq(setenv("TECORE_QUANTIZE_BLOCKS_PER_SM", v, 1), 0);
  struct tecore_tunable_info bi;
  TE_OK(tecore_tunable_find("TECORE_QUANTIZE_BLOCKS_PER_SM", &bi));
  if (bi.value_int != per_sm)
    fprintf(stderr, "# per_tensor_grid: tunable read earlier in this process: %lld blocks an "
            "SM\n", (long long)bi.value_int);
  static const tecore_dtype_t dts[] = {TECORE_DTYPE_BF16, TECORE_DTYPE_BF16, TECORE_DTYPE_F16,
                                       TECORE_DTYPE_F32};
  for (int i = 0; i < 4; i++) {
    struct qcase k = {.rows = 1111, .cols = 4099, .in_dt = dts[i],
                      .out_dt = (i + per_sm) % 2 ? TECORE_DTYPE_E5M2 : TECORE_DTYPE_E4M3,
                      .mode = i % 3 == 0 ? TECORE_SCALING_CURRENT : TECORE_SCALING_DELAYED,
                      .rowwise = 1, .range = te_rand_float(0.5f, 3000.0f)};
    run_case(&k);
  }
  /* rows x cols: 1, odd, 4096k + 7, 4096 (a block's elements) less and
   * more one, several blocks' and a partial one, a short one whose only
   * tile is partial; each in bf16 (delayed), one in f16 and f32, and
   * every third with the input misaligned by an element (or by 16 bytes) */
  static const size_t odd[][2] = {{1, 1},   {1, 33},     {1, 4095},  {1, 4097},
                                  {3, 100}, {1, 12295},  {7, 4103},  {2, 8192 * 3 + 7},
                                  {5, 999}, {1, 40967}};
  for (size_t j = 0; j < sizeof odd / sizeof odd[0]; j++) {
    struct qcase k = {.rows = odd[j][0], .cols = odd[j][1],
                      .in_dt = j == 6 ? TECORE_DTYPE_F16 : j == 7 ? TECORE_DTYPE_F32 : TECORE_DTYPE_BF16,
                      .out_dt = (j + per_sm) % 2 ? TECORE_DTYPE_E5M2 : TECORE_DTYPE_E4M3,
                      .mode = j == 8 ? TECORE_SCALING_CURRENT : TECORE_SCALING_DELAYED,
                      .rowwise = 1, .range = te_rand_float(0.5f, 3000.0f)};
    if (j % 3 == 1) k.in_off = tecore_dtype_size(k.in_dt);
    if (j % 3 == 2) k.in_off = 16, k.out_off = 16;
    run_case(&k);
  }
}
START_TEST(per_tensor_grid_block_per_4096) { run_grid(0); }
END_TEST
START_TEST(per_tensor_grid_one_wave) { run_grid(8); }
END_TEST
START_TEST(per_tensor_grid_stride_3_an_sm) { run_grid(3); }
END_TEST
START_TEST(per_tensor_grid_stride_1_an_sm) { run_grid(1); }
END_TEST

START_TEST(delayed_transposed) {
  sweep(TECORE_SCALING_DELAYED, 1, 1);
  sweep(TECORE_SCALING_DELAYED, 0, 1);
}
END_TEST
START_TEST(current_rowwise) { sweep(TECORE_SCALING_CURRENT, 1, 0); }
END_TEST
START_TEST(current_transposed) { sweep(TECORE_SCALING_CURRENT, 1, 1); }
END_TEST
START_TEST(mxfp8_both) { sweep(TECORE_SCALING_MXFP8, 1, 1); }
END_TEST
START_TEST(mxfp8_one_side) {
  sweep(TECORE_SCALING_MXFP8, 1, 0);
  sweep(TECORE_SCALING_MXFP8, 0, 1);
}
END_TEST
START_TEST(block_1x128) {
  sweep(TECORE_SCALING_BLOCK_1X128, 1, 1);
  sweep(TECORE_SCALING_BLOCK_1X128, 0, 1);
}
END_TEST
START_TEST(block_128x128) {
  sweep(TECORE_SCALING_BLOCK_128X128, 1, 1);
  sweep(TECORE_SCALING_BLOCK_128X128, 1, 0);
}
END_TEST

START_TEST(long_rows) {
  const tecore_scaling_mode_t modes[] = {TECORE_SCALING_DELAYED, TECORE_SCALING_CURRENT,
                                         TECORE_SCALING_MXFP8, TECORE_SCALING_BLOCK_1X128};
  for (int m = 0; m < 4; m++) {
    struct qcase k = {.rows = 2, .cols = 262147, .in_dt = TECORE_DTYPE_BF16,
                      .out_dt = TECORE_DTYPE_E4M3, .mode = modes[m], .rowwise = 1,
                      .colwise = m >= 2, .range = 100.0f};
    run_case(&k);
  }
  struct qcase k = {.rows = 1, .cols = 1 << 20, .in_dt = TECORE_DTYPE_F32,
                    .out_dt = TECORE_DTYPE_E5M2, .mode = TECORE_SCALING_DELAYED, .rowwise = 1,
                    .range = 1e4f};
  run_case(&k);
}
END_TEST

/* NaN and infinity in the input: saturation, the canonical NaN, NaN amax,
 * and the scale kept at 1 by current scaling. */
START_TEST(nan_and_inf_inputs) {
  const size_t n = 70;
  float x[70];
  te_rand_floats(x, n, -10.0f, 10.0f);
  x[3] = INFINITY, x[17] = -INFINITY, x[40] = NAN, x[41] = -NAN, x[69] = 1e30f;
  tecore_devptr_t din = te_dalloc(n * 4), dq = te_dalloc(n), ds = te_dalloc(16);
  te_h2d(din, x, n * 4);
  size_t shape[1] = {n};
  struct tecore_tensor in, out;
  TE_OK(tecore_tensor_init(&in, TECORE_DTYPE_F32, 1, shape, din));
  TE_OK(tecore_tensor_init(&out, TECORE_DTYPE_E4M3, 1, shape, dq));
  out.scaling = TECORE_SCALING_DELAYED;
  out.amax = ds, out.scale = ds + 4, out.scale_inv = ds + 8;
  TE_OK(tecore_memset_d32_async(ds, 0, 1, te_stream));
  dset_f32(ds + 4, 2.0f);
  te_poison_dev(dq, n);
  TE_OK(tecore_quantize(&in, &out, 0, te_stream));
  uint8_t q[70];
  te_d2h(q, dq, n);
  for (size_t i = 0; i < n; i++) {
    uint8_t want = te_f32_to_e4m3(x[i] * 2.0f);
    ck_assert_msg(q[i] == want, "element %zu (%g): 0x%02x, want 0x%02x", i, (double)x[i], q[i], want);
  }
  ck_assert_uint_eq(q[3], 0x7e);
  ck_assert_uint_eq(q[17], 0xfe);
  ck_assert_uint_eq(q[40], 0x7f);
  ck_assert_uint_eq(q[41], 0x7f);
  ck_assert_msg(isnan(dget_f32(ds)), "amax of an input with NaN is %g, want NaN", (double)dget_f32(ds));
  /* current scaling: amax NaN -> scale 1 */
  out.scaling = TECORE_SCALING_CURRENT;
  TE_OK(tecore_quantize(&in, &out, 0, te_stream));
  ck_assert_msg(dget_f32(ds + 4) == 1.0f, "current scale with a NaN amax is %g, want 1",
                (double)dget_f32(ds + 4));
  TE_OK(tecore_mem_free(din));
  TE_OK(tecore_mem_free(dq));
  TE_OK(tecore_mem_free(ds));
}
END_TEST

/* The no-op flag: with *flag != 0 nothing is written, in every mode. */
START_TEST(noop_flag_skips) {
  const tecore_scaling_mode_t modes[] = {TECORE_SCALING_DELAYED, TECORE_SCALING_CURRENT,
                                         TECORE_SCALING_MXFP8, TECORE_SCALING_BLOCK_1X128,
                                         TECORE_SCALING_BLOCK_128X128};
  const size_t rows = 40, cols = 136, n = rows * cols;
  float *x = malloc(n * 4);
  make_input(x, rows, cols, TECORE_DTYPE_F32, 50.0f);
  tecore_devptr_t din = te_dalloc(n * 4), flag = te_dalloc(4);
  te_h2d(din, x, n * 4);
  size_t shape[2] = {rows, cols};
  for (int m = 0; m < 5; m++) {
    for (int set = 1; set >= 0; set--) {
      struct tecore_tensor in, out;
      TE_OK(tecore_tensor_init(&in, TECORE_DTYPE_F32, 2, shape, din));
      TE_OK(tecore_tensor_init(&out, TECORE_DTYPE_E4M3, 2, shape, 0));
      out.scaling = modes[m];
      size_t a, b, c2, d;
      tecore_dtype_t sd;
      TE_OK(tecore_tensor_scale_shape(&out, 0, &a, &b, &sd));
      TE_OK(tecore_tensor_scale_shape(&out, 1, &c2, &d, &sd));
      size_t sbytes = (a * b + c2 * d) * tecore_dtype_size(sd) + 8;
      tecore_devptr_t all = te_dalloc(2 * n + sbytes + 16);
      te_poison_dev(all, 2 * n + sbytes + 16);
      out.data = all;
      out.columnwise_data = all + n;
      out.amax = all + 2 * n;
      out.scale = all + 2 * n + 4;
      out.scale_inv = all + 2 * n + 8;
      out.columnwise_scale_inv = out.scale_inv + a * b * tecore_dtype_size(sd) + 4;
      out.columnwise_scale_inv = (out.columnwise_scale_inv + 3) & ~(tecore_devptr_t)3;
      dset_f32(out.scale, 1.0f);
      unsigned char *before = malloc(2 * n + sbytes + 16), *after = malloc(2 * n + sbytes + 16);
      te_d2h(before, all, 2 * n + sbytes + 16);
      int32_t fv = set ? (int32_t)(1 + te_rand_below(1000)) : 0;
      te_h2d(flag, &fv, 4);
      TE_OK(tecore_quantize(&in, &out, flag, te_stream));
      TE_OK(tecore_stream_synchronize(te_stream));
      te_d2h(after, all, 2 * n + sbytes + 16);
      if (set)
        te_expect_mem_eq(after, before, 2 * n + sbytes + 16, tecore_scaling_name(modes[m]));
      else
        ck_assert_msg(memcmp(after, before, n) != 0, "%s: flag 0 and nothing written",
                      tecore_scaling_name(modes[m]));
      free(before), free(after);
      TE_OK(tecore_mem_free(all));
    }
  }
  free(x);
  TE_OK(tecore_mem_free(din));
  TE_OK(tecore_mem_free(flag));
}
END_TEST

/* Many tensors in one call: mixed types, sizes and modes, against one-by-one
 * tecore_quantize on copies. */
START_TEST(multi_tensor) {
  enum { N = 40 };   /* more than one batch */
  struct tecore_tensor in[N], out[N], ref[N];
  tecore_devptr_t bufs[N][4];
  float *hs = malloc(N * 4);
  for (int t = 0; t < N; t++) {
    size_t n = 1 + te_rand_below(t % 7 == 0 ? 70000 : 3000);
    size_t shape[1] = {n};
    tecore_dtype_t idt = in_dts[te_rand_below(3)];
    float *x = malloc(n * 4);
    make_input(x, 1, n, idt, te_rand_float(1.0f, 500.0f));
    void *px = pack_input(x, n, idt);
    bufs[t][0] = te_dalloc(n * 4);
    te_h2d(bufs[t][0], px, n * tecore_dtype_size(idt));
    bufs[t][1] = te_dalloc(2 * n + 64);
    bufs[t][2] = te_dalloc(64);
    bufs[t][3] = te_dalloc(2 * (n / 32 + 1) + 64);   /* MXFP8 scales: out's, then ref's */
    te_poison_dev(bufs[t][1], 2 * n + 64);
    te_poison_dev(bufs[t][3], 2 * (n / 32 + 1) + 64);
    TE_OK(tecore_memset_d32_async(bufs[t][2], 0, 16, te_stream));
    TE_OK(tecore_tensor_init(&in[t], idt, 1, shape, bufs[t][0]));
    TE_OK(tecore_tensor_init(&out[t], t % 2 ? TECORE_DTYPE_E5M2 : TECORE_DTYPE_E4M3, 1, shape,
                             bufs[t][1]));
    out[t].scaling = t % 5 == 4 ? TECORE_SCALING_MXFP8 : t % 3 ? TECORE_SCALING_DELAYED
                                                              : TECORE_SCALING_CURRENT;
    out[t].amax = bufs[t][2];
    out[t].scale = bufs[t][2] + 4;
    out[t].scale_inv = bufs[t][2] + 8;
    hs[t] = te_rand_float(0.1f, 4.0f);
    dset_f32(out[t].scale, hs[t]);
    dset_f32(out[t].scale + 16, hs[t]);
    ref[t] = out[t];
    ref[t].data = bufs[t][1] + n + 32;
    ref[t].amax = bufs[t][2] + 16, ref[t].scale = bufs[t][2] + 20, ref[t].scale_inv = bufs[t][2] + 24;
    if (out[t].scaling == TECORE_SCALING_MXFP8) {
      out[t].scale_inv = bufs[t][3];
      ref[t].scale_inv = bufs[t][3] + n / 32 + 1;
    }
    free(x), free(px);
  }
  TE_OK(tecore_quantize_multi(in, out, N, 0, te_stream));
  for (int t = 0; t < N; t++) TE_OK(tecore_quantize(&in[t], &ref[t], 0, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  for (int t = 0; t < N; t++) {
    size_t n = tecore_tensor_numel(&out[t]);
    unsigned char *g = malloc(2 * n + 64);
    te_d2h(g, bufs[t][1], 2 * n + 64);
    char w[64];
    snprintf(w, sizeof w, "multi tensor %d (%s, n %zu)", t, tecore_scaling_name(out[t].scaling), n);
    te_expect_mem_eq(g, g + n + 32, n, w);
    float s[8];
    te_d2h(s, bufs[t][2], 32);
    ck_assert_msg(te_f32_bits_of(s[0]) == te_f32_bits_of(s[4]) &&
                      te_f32_bits_of(s[1]) == te_f32_bits_of(s[5]) &&
                      te_f32_bits_of(s[2]) == te_f32_bits_of(s[6]),
                  "%s: amax/scale/scale_inv %g %g %g, one by one %g %g %g", w, (double)s[0],
                  (double)s[1], (double)s[2], (double)s[4], (double)s[5], (double)s[6]);
    if (out[t].scaling == TECORE_SCALING_MXFP8) {
      size_t ns = (n + 31) / 32;
      unsigned char *e = malloc(2 * (n / 32 + 1));
      te_d2h(e, bufs[t][3], 2 * (n / 32 + 1));
      te_expect_mem_eq(e, e + n / 32 + 1, ns, w);
      free(e);
    }
    free(g);
    for (int b = 0; b < 4; b++) TE_OK(tecore_mem_free(bufs[t][b]));
  }
  free(hs);
}
END_TEST

START_TEST(multi_tensor_noop) {
  size_t shape[1] = {1000};
  /* outputs of one call never share a buffer (refused): one each */
  tecore_devptr_t d = te_dalloc(4000 + 3000 + 64), flag = te_dalloc(4);
  struct tecore_tensor in[3], out[3];
  for (int t = 0; t < 3; t++) {
    TE_OK(tecore_tensor_init(&in[t], TECORE_DTYPE_F32, 1, shape, d));
    TE_OK(tecore_tensor_init(&out[t], TECORE_DTYPE_E4M3, 1, shape, d + 4000 + 1000 * (size_t)t));
    out[t].scaling = t == 2 ? TECORE_SCALING_CURRENT : TECORE_SCALING_DELAYED;
    out[t].amax = d + 7000, out[t].scale = d + 7004, out[t].scale_inv = d + 7008;
  }
  te_poison_dev(d, 7064);
  int32_t one = 1;
  te_h2d(flag, &one, 4);
  unsigned char before[7064], after[7064];
  te_d2h(before, d, 7064);
  TE_OK(tecore_quantize_multi(in, out, 3, flag, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  te_d2h(after, d, 7064);
  te_expect_mem_eq(after, before, 7064, "multi with the no-op flag set");
  TE_OK(tecore_mem_free(d));
  TE_OK(tecore_mem_free(flag));
}
END_TEST

START_TEST(amax_and_compute_scale) {
  for (int it = 0; it < 6; it++) {
    size_t n = 1 + te_rand_below(50000);
    tecore_dtype_t dt = in_dts[it % 3];
    float *x = malloc(n * 4);
    make_input(x, 1, n, dt, te_rand_float(0.01f, 1e4f));
    void *px = pack_input(x, n, dt);
    tecore_devptr_t din = te_dalloc(n * 4 + 16), ds = te_dalloc(16);
    size_t off = it >= 3 ? tecore_dtype_size(dt) : 0;
    te_h2d(din + off, px, n * tecore_dtype_size(dt));
    size_t shape[1] = {n};
    struct tecore_tensor in;
    TE_OK(tecore_tensor_init(&in, dt, 1, shape, din + off));
    float m = habs_max(x, n), big = m * 2;
    dset_f32(ds, big);
    TE_OK(tecore_amax(&in, ds, TECORE_AMAX_ACCUMULATE, 0, te_stream));
    ck_assert_msg(dget_f32(ds) == big, "accumulate lost the larger amax");
    TE_OK(tecore_amax(&in, ds, 0, 0, te_stream));
    ck_assert_msg(te_f32_bits_of(dget_f32(ds)) == te_f32_bits_of(m), "amax %a, want %a",
                  (double)dget_f32(ds), (double)m);
    struct tecore_tensor t;
    TE_OK(tecore_tensor_init(&t, it % 2 ? TECORE_DTYPE_E5M2 : TECORE_DTYPE_E4M3, 1, shape, 0));
    t.scaling = TECORE_SCALING_CURRENT;
    t.amax = ds, t.scale = ds + 4, t.scale_inv = ds + 8;
    t.amax_epsilon = it == 4 ? m * 4 : 0.0f;
    t.flags = it % 2 ? TECORE_TENSOR_POW2_SCALES : 0;
    TE_OK(tecore_compute_scale(&t, 0, te_stream));
    float s = ref_current_scale(m, t.amax_epsilon, fp8max(t.dtype), (int)t.flags);
    ck_assert_msg(te_f32_bits_of(dget_f32(ds + 4)) == te_f32_bits_of(s), "scale %a, want %a",
                  (double)dget_f32(ds + 4), (double)s);
    ck_assert_msg(dget_f32(ds + 8) == 1.0f / s, "scale_inv %a, want %a", (double)dget_f32(ds + 8),
                  (double)(1.0f / s));
    free(x), free(px);
    TE_OK(tecore_mem_free(din));
    TE_OK(tecore_mem_free(ds));
  }
}
END_TEST

/* ---- argument checks ----------------------------------------------------------------- */

/* tecore_compute_scale took scale == scale_inv (and a scale on the amax):
 * the word read back was whichever write came last.  Refused naming
 * both, nothing written. */
START_TEST(compute_scale_scale_aliasing_scale_inv) {
  size_t shape[1] = {64};
  tecore_devptr_t ds = te_dalloc(64);
  float amax = te_rand_float(1.0f, 100.0f), poison = -7.0f;
  dset_f32(ds, amax);
  dset_f32(ds + 4, poison);
  struct tecore_tensor t;
  TE_OK(tecore_tensor_init(&t, TECORE_DTYPE_E4M3, 1, shape, 0));
  t.scaling = TECORE_SCALING_CURRENT;
  t.amax = ds, t.scale = ds + 4, t.scale_inv = ds + 4;
  TE_EXPECT_INVALID("t->scale_inv", tecore_compute_scale(&t, 0, te_stream));
  t.scale_inv = ds + 8, t.scale = ds;
  TE_EXPECT_INVALID("t->amax", tecore_compute_scale(&t, 0, te_stream));
  t.scale = ds + 4, t.scale_inv = ds + 8, t.columnwise_scale_inv = ds + 8;
  TE_EXPECT_INVALID("overlaps", tecore_compute_scale(&t, 0, te_stream));
  t.columnwise_scale_inv = 0;
  TE_EXPECT_INVALID("noop_flag", tecore_compute_scale(&t, ds + 4, te_stream));
  ck_assert_msg(dget_f32(ds + 4) == poison && dget_f32(ds) == amax,
                "a refused tecore_compute_scale wrote");
  TE_OK(tecore_compute_scale(&t, 0, te_stream));
  ck_assert_msg(dget_f32(ds + 8) == 1.0f / dget_f32(ds + 4), "scale_inv %a, scale %a",
                (double)dget_f32(ds + 8), (double)dget_f32(ds + 4));
  TE_OK(tecore_mem_free(ds));
}
END_TEST

START_TEST(bad_arguments) {
  size_t shape[2] = {4, 64};
  tecore_devptr_t d = te_dalloc(4096);
  struct tecore_tensor in, out;
  TE_OK(tecore_tensor_init(&in, TECORE_DTYPE_BF16, 2, shape, d));
  TE_OK(tecore_tensor_init(&out, TECORE_DTYPE_E4M3, 2, shape, d + 1024));
  out.scaling = TECORE_SCALING_DELAYED;
  out.scale = d + 2048, out.scale_inv = d + 2052, out.amax = d + 2056;
  TE_EXPECT_INVALID("in", tecore_quantize(NULL, &out, 0, te_stream));
  TE_EXPECT_INVALID("out", tecore_quantize(&in, NULL, 0, te_stream));
  struct tecore_tensor o2 = out;
  o2.scale = 0;
  TE_EXPECT_INVALID("scale", tecore_quantize(&in, &o2, 0, te_stream));
  o2 = out, o2.scale_inv = 0;
  TE_EXPECT_INVALID("scale_inv", tecore_quantize(&in, &o2, 0, te_stream));
  o2 = out, o2.scale = d + 2049;
  TE_EXPECT_INVALID("aligned", tecore_quantize(&in, &o2, 0, te_stream));
  o2 = out, o2.dtype = TECORE_DTYPE_BF16;
  TE_EXPECT_INVALID("e4m3", tecore_quantize(&in, &o2, 0, te_stream));
  o2 = out, o2.scaling = TECORE_SCALING_NONE;
  TE_EXPECT_INVALID("none", tecore_quantize(&in, &o2, 0, te_stream));
  o2 = out, o2.shape[1] = 63;
  TE_EXPECT_INVALID("elements", tecore_quantize(&in, &o2, 0, te_stream));
  o2 = out, o2.data = 0;
  TE_EXPECT_INVALID("columnwise_data", tecore_quantize(&in, &o2, 0, te_stream));
  o2 = out, o2.scaling = TECORE_SCALING_CURRENT, o2.amax = 0;
  TE_EXPECT_INVALID("amax", tecore_quantize(&in, &o2, 0, te_stream));
  o2 = out, o2.scaling = TECORE_SCALING_MXFP8, o2.columnwise_data = d + 3000;
  TE_EXPECT_INVALID("columnwise_scale_inv", tecore_quantize(&in, &o2, 0, te_stream));
  o2 = out, o2.amax_epsilon = -1.0f;
  TE_EXPECT_INVALID("amax_epsilon", tecore_quantize(&in, &o2, 0, te_stream));
  struct tecore_tensor i2 = in;
  i2.data = d + 1;
  TE_EXPECT_INVALID("aligned", tecore_quantize(&i2, &out, 0, te_stream));
  i2 = in, i2.dtype = TECORE_DTYPE_E4M3;
  TE_EXPECT_INVALID("in", tecore_quantize(&i2, &out, 0, te_stream));
  TE_EXPECT_INVALID("noop_flag", tecore_quantize(&in, &out, d + 2, te_stream));
  i2 = in, i2.ndim = 9;
  TE_EXPECT_INVALID("ndim", tecore_quantize(&i2, &out, 0, te_stream));
  TE_EXPECT_INVALID("out", tecore_dequantize(&out, &i2, te_stream));
  TE_EXPECT_INVALID("none", tecore_dequantize(&in, &in, te_stream));
  TE_EXPECT_INVALID("amax", tecore_amax(&in, 0, 0, 0, te_stream));
  TE_EXPECT_INVALID("flags", tecore_amax(&in, d, 0x10, 0, te_stream));
  o2 = out, o2.scaling = TECORE_SCALING_MXFP8;
  TE_EXPECT_INVALID("delayed or current", tecore_compute_scale(&o2, 0, te_stream));
  o2.scale_inv = 0;
  struct tecore_tensor min_[2] = {in, in}, mout[2] = {out, o2};
  TE_EXPECT_INVALID("out[1]", tecore_quantize_multi(min_, mout, 2, 0, te_stream));
  TE_OK(tecore_mem_free(d));
}
END_TEST

/* ---- the descriptor ---------------------------------------------------------------------- */

START_TEST(tensor_descriptor) {
  size_t shape[3] = {3, 5, 70};
  struct tecore_tensor t;
  TE_OK(tecore_tensor_init(&t, TECORE_DTYPE_E4M3, 3, shape, 0x1000));
  ck_assert_uint_eq(tecore_tensor_numel(&t), 1050);
  size_t r, c;
  TE_OK(tecore_tensor_2d(&t, &r, &c));
  ck_assert_uint_eq(r, 15);
  ck_assert_uint_eq(c, 70);
  tecore_dtype_t sd;
  const struct {
    tecore_scaling_mode_t m;
    size_t r0, c0, r1, c1;
    tecore_dtype_t dt;
  } want[] = {
      {TECORE_SCALING_DELAYED, 1, 1, 1, 1, TECORE_DTYPE_F32},
      {TECORE_SCALING_CURRENT, 1, 1, 1, 1, TECORE_DTYPE_F32},
      {TECORE_SCALING_MXFP8, 15, 3, 1, 70, TECORE_DTYPE_E8M0},
      {TECORE_SCALING_BLOCK_1X128, 15, 1, 70, 1, TECORE_DTYPE_F32},
      {TECORE_SCALING_BLOCK_128X128, 1, 1, 1, 1, TECORE_DTYPE_F32},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    t.scaling = want[i].m;
    TE_OK(tecore_tensor_scale_shape(&t, 0, &r, &c, &sd));
    ck_assert_msg(r == want[i].r0 && c == want[i].c0 && sd == want[i].dt, "%s rowwise %zux%zu",
                  tecore_scaling_name(want[i].m), r, c);
    TE_OK(tecore_tensor_scale_shape(&t, 1, &r, &c, &sd));
    ck_assert_msg(r == want[i].r1 && c == want[i].c1, "%s columnwise %zux%zu",
                  tecore_scaling_name(want[i].m), r, c);
  }
  t.scaling = TECORE_SCALING_DELAYED;
  TE_EXPECT_INVALID("scale_inv", tecore_tensor_validate(&t, TECORE_TENSOR_ROWWISE));
  t.scale_inv = 0x2000;
  TE_OK(tecore_tensor_validate(&t, TECORE_TENSOR_ROWWISE));
  TE_EXPECT_INVALID("scale", tecore_tensor_validate(&t, TECORE_TENSOR_NEED_SCALE));
  TE_EXPECT_INVALID("columnwise_data", tecore_tensor_validate(&t, TECORE_TENSOR_COLUMNWISE));
  t.data = 0x1008;
  TE_EXPECT_INVALID("16", tecore_tensor_validate(&t, TECORE_TENSOR_ALIGN16));
  t.dtype = TECORE_DTYPE_BF16;
  TE_EXPECT_INVALID("e4m3", tecore_tensor_validate(&t, 0));
  t.dtype = (tecore_dtype_t)77;
  TE_EXPECT_INVALID("dtype", tecore_tensor_validate(&t, 0));
  TE_EXPECT_INVALID("ndim", tecore_tensor_init(&t, TECORE_DTYPE_F32, 9, shape, 0));
  TE_EXPECT_INVALID("t", tecore_tensor_validate(NULL, 0));
  ck_assert_str_eq(tecore_scaling_name(TECORE_SCALING_MXFP8), "mxfp8");
  /* 0-D and empty tensors */
  TE_OK(tecore_tensor_init(&t, TECORE_DTYPE_F32, 0, NULL, 0x40));
  ck_assert_uint_eq(tecore_tensor_numel(&t), 1);
  size_t z[2] = {0, 7};
  TE_OK(tecore_tensor_init(&t, TECORE_DTYPE_F32, 2, z, 0));
  ck_assert_uint_eq(tecore_tensor_numel(&t), 0);
  TE_OK(tecore_tensor_validate(&t, TECORE_TENSOR_ROWWISE));
}
END_TEST

START_TEST(dlpack_round_trip) {
  tecore_devptr_t d = te_dalloc(4096);
  size_t shape[3] = {2, 3, 8};
  struct tecore_tensor t, back;
  const tecore_dtype_t dts[] = {TECORE_DTYPE_F32, TECORE_DTYPE_BF16, TECORE_DTYPE_F16,
                                TECORE_DTYPE_E4M3, TECORE_DTYPE_E5M2, TECORE_DTYPE_E8M0,
                                TECORE_DTYPE_I32, TECORE_DTYPE_I64, TECORE_DTYPE_U8,
                                TECORE_DTYPE_F64};
  for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
    TE_OK(tecore_tensor_init(&t, dts[i], 3, shape, d));
    DLTensor dl;
    int64_t sh[TECORE_TENSOR_MAX_DIMS], st[TECORE_TENSOR_MAX_DIMS];
    TE_OK(tecore_tensor_to_dlpack(&t, 0, &dl, sh, st));
    ck_assert_ptr_eq(dl.data, (void *)(uintptr_t)d);
    ck_assert_int_eq(dl.ndim, 3);
    ck_assert_int_eq(dl.dtype.lanes, 1);
    ck_assert_int_eq(dl.dtype.bits, (int)tecore_dtype_size(dts[i]) * 8);
    ck_assert(dl.strides[0] == 24 && dl.strides[1] == 8 && dl.strides[2] == 1);
    ck_assert_int_eq(dl.device.device_type, te_backend_kind == TECORE_BACKEND_CUDA ? kDLCUDA : kDLCPU);
    TE_OK(tecore_tensor_from_dlpack(&dl, &back));
    ck_assert_int_eq(back.dtype, dts[i]);
    ck_assert_int_eq(back.ndim, 3);
    ck_assert(back.shape[0] == 2 && back.shape[1] == 3 && back.shape[2] == 8);
    ck_assert(back.data == d);
  }
  /* byte_offset, NULL strides, FP8 codes, columnwise export */
  int64_t sh[2] = {4, 16};
  DLTensor dl = {.data = (void *)(uintptr_t)d, .device = {kDLCUDA, 0}, .ndim = 2,
                 .dtype = {kDLFloat8_e4m3fn, 8, 1}, .shape = sh, .strides = NULL, .byte_offset = 64};
  TE_OK(tecore_tensor_from_dlpack(&dl, &back));
  ck_assert(back.data == d + 64 && back.dtype == TECORE_DTYPE_E4M3);
  back.scaling = TECORE_SCALING_DELAYED;
  back.columnwise_data = d + 1024;
  back.scale_inv = d + 2048;
  DLTensor ct;
  int64_t s2[8], st2[8];
  TE_OK(tecore_tensor_to_dlpack(&back, 1, &ct, s2, st2));
  ck_assert(ct.shape[0] == 16 && ct.shape[1] == 4 && ct.data == (void *)(uintptr_t)(d + 1024));
  /* refusals */
  int64_t bad_strides[2] = {1, 4};   /* column-major */
  dl.strides = bad_strides;
  TE_EXPECT_INVALID("strides", tecore_tensor_from_dlpack(&dl, &back));
  dl.strides = NULL;
  dl.dtype.lanes = 4;
  TE_EXPECT_INVALID("lanes", tecore_tensor_from_dlpack(&dl, &back));
  dl.dtype.lanes = 1;
  dl.dtype.code = 5;   /* complex */
  TE_EXPECT_INVALID("dtype", tecore_tensor_from_dlpack(&dl, &back));
  dl.dtype.code = kDLFloat8_e4m3fn;
  dl.device.device_type = (DLDeviceType)4;   /* OpenCL */
  TE_EXPECT_INVALID("device", tecore_tensor_from_dlpack(&dl, &back));
  dl.device.device_type = kDLCPU;
  if (te_backend_kind == TECORE_BACKEND_CUDA)
    TE_EXPECT_INVALID("kDLCPU", tecore_tensor_from_dlpack(&dl, &back));
  else
    TE_OK(tecore_tensor_from_dlpack(&dl, &back));
  /* a stride on a dimension of extent 1 is anything */
  int64_t sh1[2] = {1, 16}, st1[2] = {999, 1};
  DLTensor d1 = {.data = (void *)(uintptr_t)d, .device = {kDLCUDA, 0}, .ndim = 2,
                 .dtype = {kDLFloat, 32, 1}, .shape = sh1, .strides = st1};
  TE_OK(tecore_tensor_from_dlpack(&d1, &back));
  TE_OK(tecore_mem_free(d));
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("quantize");
  TCase *tc = te_tcase(s, "per_tensor", 1);
  tcase_add_test(tc, delayed_rowwise);
  tcase_add_test(tc, delayed_transposed);
  tcase_add_test(tc, current_rowwise);
  tcase_add_test(tc, current_transposed);
  tcase_add_test(tc, nan_and_inf_inputs);
  tcase_add_test(tc, per_tensor_many_chunks_a_thread);
  tcase_add_test(tc, per_tensor_grid_block_per_4096);
  tcase_add_test(tc, per_tensor_grid_one_wave);
  tcase_add_test(tc, per_tensor_grid_stride_3_an_sm);
  tcase_add_test(tc, per_tensor_grid_stride_1_an_sm);
  tc = te_tcase(s, "blocks", 1);
  tcase_add_test(tc, mxfp8_both);
  tcase_add_test(tc, mxfp8_one_side);
  tcase_add_test(tc, block_1x128);
  tcase_add_test(tc, block_128x128);
  tcase_add_test(tc, long_rows);
  tc = te_tcase(s, "launch", 1);
  tcase_add_test(tc, noop_flag_skips);
  tcase_add_test(tc, multi_tensor);
  tcase_add_test(tc, multi_tensor_noop);
  tcase_add_test(tc, amax_and_compute_scale);
  tc = te_tcase(s, "api", 1);
  tcase_add_test(tc, bad_arguments);
  tcase_add_test(tc, compute_scale_scale_aliasing_scale_inv);
  tcase_add_test(tc, tensor_descriptor);
  tcase_add_test(tc, dlpack_round_trip);
  return s;
}

TE_TEST_MAIN(make_suite, TE_TEST_DEVICE)
