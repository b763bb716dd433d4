/* SPDX-License-Identifier: Apache-2.0 */
/* check_attn_fp8.c -- the E4M3 attention forward through the public API
 * (tecore_attention_fwd), called the way te-bench -A and a model call it:
 *   - after other work on the same stream: a BF16 attention forward and
 *     backward and a current-scaled quantize of other data, whose buffers
 *     are then freed, and buffers filled with garbage and freed, so that
 *     this case's buffers are recycled memory that held other values;
 *   - Q, K and V quantized by tecore_quantize with current scaling from
 *     distinct random BF16 data in [-2, 2) (scales 448 / amax: not powers
 *     of two; one case with TECORE_TENSOR_POW2_SCALES), their scale_inv
 *     at 8, 20 and 32 bytes into one scratch as te-bench places them (4-
 *     and 8-byte aligned, which te/attention.h allows);
 *   - O in BF16 and in E4M3 (at half V's scale, not a power of two),
 *     several sequences and heads, causal (head dims 128 and 64) and not;
 *   - O, the workspace and lse poisoned (NaN bytes) first, so an O that
 *     is never written shows as NaN; the forward run twice, the second
 *     checked, the first's elements past tolerance and unlike the second
 *     counted and printed (a plan's first run against later ones);
 *   - the BF16-O forward queued right after the quantize with no host
 *     wait between (te-bench's order: a scale read too early would be
 *     stale), the E4M3-O one after the host read V's scale (te-bench
 *     sets O's scale to half of it).
 * O is checked against the float64 attention of the dequantized inputs
 * (the E4M3 codes read back times the scale_inv read back) with the bound
 * te/attention.h states, per element (fp8_tol, check_attn_cudnn.c's):
 * P rounded to E4M3 at 448 (2^-4 of sum_j p_j |v_j| plus the subnormal
 * half-step 2^-10 / 448 of sum_j |v_j|), O rounded to E4M3 (2^-4 |o| plus
 * its subnormal half-step at O's scale, the staged one for a BF16 O),
 * BF16's own rounding (2^-8 |o|), float sums (2^-12 of the magnitude).
 * lse within 2^-9 (1 + |lse|) (cuDNN forms E4M3 scores at about F16's
 * precision); o.amax, s_amax and o.scale_inv too where every row is checked.
 *
 * Variants, a forked test each (the tunable set before its first read):
 * 0 the backend the library picks (as TECORE_ATTN_BACKEND says, auto by
 * default), 1 the same with TECORE_PDL=0, 2 TECORE_ATTN_BACKEND=cudnn,
 * 3 TECORE_ATTN_BACKEND=libte.  A variant no backend takes (vdev with
 * cudnn or libte; libte, which has no E4M3 kernel; cuda without cuDNN)
 * must fail with TECORE_ERR_NOT_SUPPORTED and says so.  With CK_FORK=no
 * only variant 0 runs.
 *
 * On cuda (TE_DEVICE=cuda) fp8_fwd_bench_shapes runs te-bench's three
 * shapes (16 16 2048 128, 4 16 8192 128, 32 12 1024 64, causal, softmax
 * scale 0.25 / sqrt(d)) on sampled rows, and the first with Q = K = V
 * (te-bench's old inputs) and with power-of-two scales.
 *
 * Every case prints one line: variant, backend, shape, O type, the
 * scale_inv of Q, K and V, O's scale, the largest |err| / tolerance, the
 * elements past it and NaN, max |O| got and wanted, the least-squares
 * factor got/want (1: right; a constant far from 1: a scale applied
 * wrongly; near 0 with errors: O not computed from these inputs), and the
 * amaxes; where elements are wrong a second line: the wrong rows, the
 * heads they are in, their count by 128-row query tile, the first few.
 * Every case runs even after one fails (the test fails at its end, naming
 * the first failure), and a last line per test counts the failed ones.
 * One GPU run thus says which backend, O type, shape and scale range is
 * wrong.
 *
 * TE_FP8_SHAPES (any device): only the shapes it lists run, as the test
 * "shapes", under the tunables the environment sets (no variants):
 *   TE_FP8_SHAPES="b,h,s,d,causal[,row_step[,scale_mult[,same]]];..."
 * causal 0 or 1; row_step: every row_step-th query row and the last are
 * checked (0: every row; default 31: the float64 reference runs on the
 * host); scale_mult: softmax scale scale_mult / sqrt(d) (default 0.25);
 * same 1: Q, K and V hold the same values (te-bench's inputs before
 * 2fc7428, where every row's own key dominates its scores).
 * E.g. TE_FP8_SHAPES="4,8,512,128,1;4,8,2048,128,1" TE_DEVICE=cuda
 * t/core/check_attn_fp8 (TE_DEBUG=INFO TE_DEBUG_SUBSYS=KERNEL names the
 * cuDNN plan and engine of each shape). */
#include "tests.h"

#include <math.h>

/* ---- cases ---------------------------------------------------------------- */

struct fcase {
  int b, h, s, d, causal;
  float scale_mult;  /* softmax scale: scale_mult / sqrt(d) */
  int row_step;      /* check every row_step-th row and the last (0: every row) */
  int pow2;          /* Q, K, V quantized with power-of-two scales */
  int same;          /* Q, K and V hold the same values (te-bench before its fix) */
};

static const struct {
  const char *name, *env, *val;
} variants[] = {
    {"picked", NULL, NULL},
    {"pdl-off", "TECORE_PDL", "0"},
    {"cudnn", "TECORE_ATTN_BACKEND", "cudnn"},
    {"libte", "TECORE_ATTN_BACKEND", "libte"},
};
#define NVARIANTS ((int)(sizeof variants / sizeof variants[0]))

static int on_cuda(void) { return te_backend_kind == TECORE_BACKEND_CUDA; }

/* Sets variant v's tunable (before anything reads it); 0 when that cannot
 * hold in this process. */
static int variant_set(int v) {
  if (!variants[v].env) return 1;
  if (!te_test_forking) {
    printf("# variant %s: CK_FORK=no, tunables already read: not run\n", variants[v].name);
    return 0;
  }
  ck_assert_int_eq(setenv(variants[v].env, variants[v].val, 1), 0);
  struct tecore_tunable_info info;
  TE_OK(tecore_tunable_find(variants[v].env, &info));
  int ok = info.type == TECORE_TUNABLE_INT ? info.value_int == atoll(variants[v].val)
                                           : !strcmp(info.value_str, variants[v].val);
  ck_assert_msg(ok, "variant %s: %s was read before the test set it", variants[v].name,
                variants[v].env);
  return 1;
}

/* ---- the work that runs before ------------------------------------------------ */

/* Device buffers of the given sizes filled with random bytes, then freed:
 * the allocations after this one may get that memory back. */
static void garbage_then_free(const size_t *bytes, int n) {
  for (int i = 0; i < n; i++) {
    unsigned char *h = malloc(bytes[i]);
    ck_assert(h);
    te_rand_bytes(h, bytes[i]);
    tecore_devptr_t d = te_dalloc(bytes[i]);
    te_h2d(d, h, bytes[i]);
    free(h);
    TE_OK(tecore_mem_free(d));
  }
}

static tecore_devptr_t up_rand_bf16(size_t n) {
  uint16_t *h = malloc(n * 2);
  for (size_t i = 0; i < n; i++) h[i] = tecore_f32_to_bf16(te_rand_float(-2, 2));
  tecore_devptr_t d = te_dalloc(n * 2);
  te_h2d(d, h, n * 2);
  free(h);
  return d;
}

/* A BF16 causal attention forward and backward (2 sequences of 128, 4
 * heads of 64) and a current-scaled quantize of other data into sc, on
 * te_stream; everything but sc freed after. */
static void other_work(tecore_devptr_t sc) {
  const size_t T = 256, n = T * 4 * 64;
  tecore_devptr_t b[8];
  for (int i = 0; i < 8; i++) b[i] = up_rand_bf16(n);
  tecore_devptr_t lse = te_dalloc(T * 4 * 4), ws = 0;
  struct tecore_attention_args a = {
      .batch = 2, .max_seqlen_q = 128, .max_seqlen_kv = 128, .heads = 4, .kv_heads = 4,
      .head_dim = 64, .scale = 0.125f, .flags = TECORE_ATTN_CAUSAL,
      .dtype = TECORE_DTYPE_BF16, .o_dtype = TECORE_DTYPE_BF16, .q = {.data = b[0]},
      .k = {.data = b[1]}, .v = {.data = b[2]}, .o = {.data = b[3]}, .lse = lse,
      .d_o = {.data = b[4]}, .dq = {.data = b[5]}, .dk = {.data = b[6]}, .dv = {.data = b[7]}};
  size_t wf = 0, wb = 0;
  char desc[1024];
  TE_OK(tecore_attention_describe(&a, 1, desc, sizeof desc));
  if (strncmp(desc, "backend ", 8) == 0) {
    TE_OK(tecore_attention_workspace_size(&a, 0, &wf));
    TE_OK(tecore_attention_workspace_size(&a, 1, &wb));
    a.workspace_bytes = wf > wb ? wf : wb;
    if (a.workspace_bytes) a.workspace = ws = te_dalloc(a.workspace_bytes);
    TE_OK(tecore_attention_fwd(&a, te_stream));
    TE_OK(tecore_attention_bwd(&a, te_stream));
  } else { /* a forced backend that is not here (cudnn on vdev) */
    printf("# BF16 attention before: not run: %s\n", desc);
  }
  struct tecore_tensor in, out;
  size_t shape[1] = {n};
  tecore_devptr_t q8 = te_dalloc(n);
  TE_OK(tecore_tensor_init(&in, TECORE_DTYPE_BF16, 1, shape, b[5]));
  TE_OK(tecore_tensor_init(&out, TECORE_DTYPE_E4M3, 1, shape, q8));
  out.scaling = TECORE_SCALING_CURRENT;
  out.amax = sc, out.scale = sc + 4, out.scale_inv = sc + 8;
  TE_OK(tecore_quantize(&in, &out, 0, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  for (int i = 0; i < 8; i++) TE_OK(tecore_mem_free(b[i]));
  TE_OK(tecore_mem_free(lse));
  TE_OK(tecore_mem_free(q8));
  if (ws) TE_OK(tecore_mem_free(ws));
}

/* ---- the inputs ------------------------------------------------------------------ */

/* One case's device buffers and what the host knows of them. */
struct fdata {
  const struct fcase *c;
  size_t T, n;                        /* tokens, elements of Q (= K = V = O) */
  tecore_devptr_t x16[3], x8[3], sc;  /* BF16 Q K V; their E4M3 copies; scratch */
  tecore_devptr_t o, lse;
  uint8_t *code[3];                   /* the E4M3 codes, read back */
  float si[3], scale[3];              /* scale_inv and scale read back */
  float lut[3][256];                  /* code -> dequantized value */
};

/* sc: te-bench's layout: tensor i's amax, scale, scale_inv at 12 i, 12 i +
 * 4, 12 i + 8 bytes; o.amax 48, s_amax 52, o.scale 56, o.scale_inv 60. */
#define SC_OAMAX 48
#define SC_SAMAX 52
#define SC_OSCALE 56
#define SC_OSI 60

/* Q, K, V into their E4M3 copies on te_stream, no wait (te-bench runs the
 * forward right after); the same codes and scales each time. */
static void quantize_inputs(const struct fdata *f) {
  size_t shape[1] = {f->n};
  for (int i = 0; i < 3; i++) {
    struct tecore_tensor in, out;
    TE_OK(tecore_tensor_init(&in, TECORE_DTYPE_BF16, 1, shape, f->x16[i]));
    TE_OK(tecore_tensor_init(&out, TECORE_DTYPE_E4M3, 1, shape, f->x8[i]));
    out.scaling = TECORE_SCALING_CURRENT;
    if (f->c->pow2) out.flags |= TECORE_TENSOR_POW2_SCALES;
    out.amax = f->sc + 12 * (size_t)i, out.scale = out.amax + 4, out.scale_inv = out.amax + 8;
    TE_OK(tecore_quantize(&in, &out, 0, te_stream));
  }
}

/* The codes and scales quantize_inputs wrote (te_stream synchronized). */
static void read_inputs(struct fdata *f) {
  float h[9];
  te_d2h(h, f->sc, sizeof h);
  for (int i = 0; i < 3; i++) {
    f->scale[i] = h[3 * i + 1], f->si[i] = h[3 * i + 2];
    if (!f->code[i]) f->code[i] = malloc(f->n);
    te_d2h(f->code[i], f->x8[i], f->n);
    for (int k = 0; k < 256; k++) f->lut[i][k] = tecore_e4m3_to_f32((uint8_t)k) * f->si[i];
  }
}

static void data_new(struct fdata *f, const struct fcase *c) {
  memset(f, 0, sizeof *f);
  f->c = c;
  f->T = (size_t)c->b * c->s;
  f->n = f->T * c->h * c->d;
  const size_t n = f->n;
  /* the sizes allocated below, held garbage first */
  const size_t sizes[] = {2 * n, 2 * n, 2 * n, n, n, n, 256, 2 * n, f->T * c->h * 4};
  garbage_then_free(sizes, (int)(sizeof sizes / sizeof sizes[0]));
  f->x16[0] = up_rand_bf16(n);
  for (int i = 1; i < 3; i++) f->x16[i] = c->same ? f->x16[0] : up_rand_bf16(n);
  for (int i = 0; i < 3; i++) f->x8[i] = te_dalloc(n);
  f->sc = te_dalloc(256);
  other_work(f->sc);
  f->o = te_dalloc(2 * n);
  f->lse = te_dalloc(f->T * c->h * 4);
}

static void data_free(struct fdata *f) {
  for (int i = 0; i < 3; i++) {
    if (i == 0 || !f->c->same) TE_OK(tecore_mem_free(f->x16[i]));
    TE_OK(tecore_mem_free(f->x8[i]));
    free(f->code[i]);
  }
  TE_OK(tecore_mem_free(f->sc));
  TE_OK(tecore_mem_free(f->o));
  TE_OK(tecore_mem_free(f->lse));
}

/* ---- the reference and the verdict ------------------------------------------------- */

/* Wrong rows are counted by query tile of FP8_TILE_ROWS (the first
 * FP8_TILES tiles; later rows count in the last): which tiles go wrong
 * tells a kernel's tiling from noise. */
#define FP8_TILE_ROWS 128
#define FP8_TILES 64

/* What one forward gave against float64. */
struct fres {
  size_t checked, bad, nans;
  size_t bad1, differ;                /* the first run: past tolerance; unlike the second */
  double worst, lse_err;              /* largest |err| / tol; |lse - want| / (1 + |want|) */
  double lse_abs;                     /* largest |lse - want| */
  double got_max, want_max, gw, ww;   /* max |O|; sums of got * want and want^2 */
  double s_amax_want, o_amax_want, o_amax_tol;
  char first[200];                    /* the first element past tolerance */
  size_t rows, bad_rows, heads_bad;   /* rows checked, rows with a wrong element, their heads */
  size_t tile_rows[FP8_TILES], tile_bad[FP8_TILES]; /* by query tile of FP8_TILE_ROWS */
  char rows_first[160];               /* the first wrong rows: (batch, head, row) */
};

/* The bound of check_attn_cudnn.c's fp8_tol: omag = sum_j p_j |v_j|, vsum
 * = sum_j |v_j|, o_step: O's E4M3 subnormal half-step in O's units. */
static double fp8_tol(double o, double omag, double vsum, double o_step, int bf16_out) {
  double t = ldexp(omag, -4) + ldexp(vsum, -10) / 448;
  t += ldexp(fabs(o) + ldexp(omag, -4), -4) + o_step;
  if (bf16_out) t += ldexp(fabs(o), -8);
  return t + ldexp(omag, -12) + 1e-30;
}

/* The E4M3 scale a BF16 O is staged at: 0.5 / v.scale_inv rounded down to
 * a power of two (te/attention.h). */
static double staged_scale(float v_si) {
  int e;
  (void)frexp(0.5 / v_si, &e);
  return ldexp(1, e - 1);
}

struct orow {
  const struct fdata *f;
  const void *o;       /* O as the forward wrote it (BF16 or E4M3 codes) */
  const void *o1;      /* O of the first of the two runs */
  int e4;
  float o_si;          /* E4M3 O: its scale_inv read back */
  double o_step;
  double *p;           /* scratch: a row's probabilities */
};

static double o_of(const struct orow *w, const void *o, size_t i) {
  if (w->e4) return (double)tecore_e4m3_to_f32(((const uint8_t *)o)[i]) * w->o_si;
  return tecore_bf16_to_f32(((const uint16_t *)o)[i]);
}

/* Probabilities of row i of (b, h) into w->p; returns lse, *keys. */
static double ref_probs(const struct orow *w, int b, int h, int i, int *keys) {
  const struct fdata *f = w->f;
  const struct fcase *c = f->c;
  const size_t H = (size_t)c->h, D = (size_t)c->d;
  const size_t tq = (size_t)b * c->s + (size_t)i;
  const int hi = c->causal ? i + 1 : c->s;
  const double scale = c->scale_mult / sqrt((double)c->d);
  const uint8_t *q = f->code[0] + (tq * H + h) * D;
  double m = -INFINITY, z = 0;
  for (int j = 0; j < hi; j++) {
    const uint8_t *k = f->code[1] + (((size_t)b * c->s + j) * H + h) * D;
    double acc = 0;
    for (size_t x = 0; x < D; x++) acc += (double)f->lut[0][q[x]] * f->lut[1][k[x]];
    w->p[j] = acc * scale;
    m = fmax(m, w->p[j]);
  }
  for (int j = 0; j < hi; j++) z += exp(w->p[j] - m);
  double lse = m + log(z);
  for (int j = 0; j < hi; j++) w->p[j] = exp(w->p[j] - lse);
  *keys = hi;
  return lse;
}

/* Checks row i of (b, h) into r; 1 when an element of it is wrong. */
static int check_row(const struct orow *w, int b, int h, int i, const float *glse,
                     struct fres *r) {
  const struct fdata *f = w->f;
  const struct fcase *c = f->c;
  const size_t H = (size_t)c->h, D = (size_t)c->d, tq = (size_t)b * c->s + (size_t)i;
  int keys;
  const size_t bad0 = r->bad;
  double lse = ref_probs(w, b, h, i, &keys);
  for (int j = 0; j < keys; j++) r->s_amax_want = fmax(r->s_amax_want, w->p[j]);
  double le = fabs(glse[(size_t)h * f->T + tq] - lse) / (1 + fabs(lse));
  r->lse_err = isnan(le) ? INFINITY : fmax(r->lse_err, le);
  r->lse_abs = isnan(le) ? INFINITY : fmax(r->lse_abs, le * (1 + fabs(lse)));
  /* key by key (each key's V row is contiguous; every element's sum still
   * runs over the keys in order): O, sum_j p_j |v_j| and sum_j |v_j| */
  double os[256] = {0}, oms[256] = {0}, vss[256] = {0};
  for (int j = 0; j < keys; j++) {
    const uint8_t *vj = f->code[2] + (((size_t)b * c->s + j) * H + h) * D;
    for (size_t x = 0; x < D; x++) {
      double v = f->lut[2][vj[x]];
      os[x] += w->p[j] * v, oms[x] += w->p[j] * fabs(v), vss[x] += fabs(v);
    }
  }
  for (size_t x = 0; x < D; x++) {
    const double o = os[x], om = oms[x], vs = vss[x];
    size_t io = (tq * H + h) * D + x;
    double got = o_of(w, w->o, io), tol = fp8_tol(o, om, vs, w->o_step, !w->e4);
    double err = fabs(got - o), got1 = o_of(w, w->o1, io);
    r->checked++;
    if (!(fabs(got1 - o) <= tol)) r->bad1++;
    if (memcmp(&got, &got1, sizeof got)) r->differ++;
    if (isnan(got)) r->nans++;
    if (!(err <= tol) && !r->bad++)
      snprintf(r->first, sizeof r->first, "O[token %zu][head %d][%zu] %g, want %g (tolerance %g)",
               tq, h, x, got, o, tol);
    r->worst = fmax(r->worst, isnan(err) ? INFINITY : err / tol);
    if (!isnan(got)) r->got_max = fmax(r->got_max, fabs(got)), r->gw += got * o;
    r->want_max = fmax(r->want_max, fabs(o)), r->ww += o * o;
    r->o_amax_want = fmax(r->o_amax_want, fabs(o));
    r->o_amax_tol = fmax(r->o_amax_tol, ldexp(om, -4) + ldexp(vs, -10) / 448 + ldexp(om, -12));
  }
  return r->bad > bad0;
}

/* Row i of (b, h) counted by its tile; *head_bad set when it is wrong. */
static void tally_row(struct fres *r, int b, int h, int i, int wrong, int *head_bad) {
  int t = i / FP8_TILE_ROWS < FP8_TILES ? i / FP8_TILE_ROWS : FP8_TILES - 1;
  r->rows++, r->tile_rows[t]++;
  if (!wrong) return;
  size_t at = strlen(r->rows_first);
  if (r->bad_rows < 6 && at < sizeof r->rows_first)
    snprintf(r->rows_first + at, sizeof r->rows_first - at, "%s(%d,%d,%d)", at ? " " : "", b,
             h, i);
  r->bad_rows++, r->tile_bad[t]++;
  *head_bad = 1;
}

static void check_all(const struct orow *w, const float *glse, struct fres *r) {
  const struct fcase *c = w->f->c;
  memset(r, 0, sizeof *r);
  for (int b = 0; b < c->b; b++)
    for (int h = 0; h < c->h; h++) {
      int head_bad = 0;
      for (int i = 0; i < c->s; i++)
        if (!c->row_step || i % c->row_step == 0 || i == c->s - 1)
          tally_row(r, b, h, i, check_row(w, b, h, i, glse, r), &head_bad);
      r->heads_bad += (size_t)head_bad;
    }
}

/* Where the wrong rows are (printed only when some are). */
static void print_rows(const struct fcase *c, const struct fres *r) {
  if (!r->bad_rows) return;
  printf("#   wrong rows: %zu of %zu checked, in %zu of %d heads; by %d-row query tile "
         "(wrong/checked):", r->bad_rows, r->rows, r->heads_bad, c->b * c->h, FP8_TILE_ROWS);
  for (int t = 0; t < FP8_TILES; t++)
    if (r->tile_rows[t]) printf(" %d:%zu/%zu", t, r->tile_bad[t], r->tile_rows[t]);
  printf("; the first (batch,head,row): %s\n", r->rows_first);
}

/* ---- the verdict of a test: every case runs, the first failure is named ---------- */

static struct {
  int cases, failed;
  char first[640];
} verdict;

static void case_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void case_fail(const char *fmt, ...) {
  char msg[640];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  printf("# FAIL %s\n", msg);
  if (!verdict.failed++) snprintf(verdict.first, sizeof verdict.first, "%s", msg);
}

/* The end of a test: how many forwards failed, the first named. */
static void verdict_check(const char *test) {
  printf("# %s: %d of %d forwards failed\n", test, verdict.failed, verdict.cases);
  fflush(stdout);
  ck_assert_msg(verdict.failed == 0, "%s: %d of %d forwards failed; the first: %s", test,
                verdict.failed, verdict.cases, verdict.first);
}

/* ---- one forward ---------------------------------------------------------------- */

static struct tecore_attention_args fp8_args(const struct fdata *f, tecore_dtype_t o_dt) {
  const struct fcase *c = f->c;
  struct tecore_attention_args a = {
      .batch = (size_t)c->b, .max_seqlen_q = (size_t)c->s, .max_seqlen_kv = (size_t)c->s,
      .heads = c->h, .kv_heads = c->h, .head_dim = c->d,
      .scale = c->scale_mult / sqrtf((float)c->d), .flags = c->causal ? TECORE_ATTN_CAUSAL : 0,
      .dtype = TECORE_DTYPE_E4M3, .o_dtype = o_dt,
      .q = {.data = f->x8[0], .scale_inv = f->sc + 8},
      .k = {.data = f->x8[1], .scale_inv = f->sc + 20},
      .v = {.data = f->x8[2], .scale_inv = f->sc + 32},
      .o = {.data = f->o, .amax = f->sc + SC_OAMAX}, .lse = f->lse, .s_amax = f->sc + SC_SAMAX};
  if (o_dt == TECORE_DTYPE_E4M3) a.o.scale = f->sc + SC_OSCALE, a.o.scale_inv = f->sc + SC_OSI;
  return a;
}

/* On te_stream, as te-bench orders it: O and lse poisoned (NaN bytes),
 * the amaxes zeroed (they are max-accumulated), O's scale_inv poisoned,
 * then Q, K, V quantized; for an E4M3 O the host then reads V's scale and
 * sets O's (half V's: te-bench's), else the forward follows at once. */
static float fwd_prepare(struct fdata *f, tecore_dtype_t o_dt) {
  const int e4 = o_dt == TECORE_DTYPE_E4M3;
  TE_OK(tecore_memset_d8_async(f->o, 0xff, f->n * (e4 ? 1 : 2), te_stream));
  TE_OK(tecore_memset_d32_async(f->lse, 0x7fc0deadu, f->T * f->c->h, te_stream));
  TE_OK(tecore_memset_d32_async(f->sc + SC_OAMAX, 0, 2, te_stream));
  TE_OK(tecore_memset_d32_async(f->sc + SC_OSI, 0xffffffffu, 1, te_stream));
  quantize_inputs(f);
  if (!e4) return 0;
  TE_OK(tecore_stream_synchronize(te_stream));
  read_inputs(f);
  float os = 0.5f * f->scale[2];
  te_h2d(f->sc + SC_OSCALE, &os, sizeof os);
  return os;
}

/* Runs the forward twice (O of the first into first: a plan's first run
 * against a later one); 0 when no backend takes it (checked to fail so). */
static int fwd_run(const struct fdata *f, tecore_dtype_t o_dt, const char *tag, char be[32],
                   void *first) {
  struct tecore_attention_args a = fp8_args(f, o_dt);
  char desc[1024];
  TE_OK(tecore_attention_describe(&a, 0, desc, sizeof desc));
  /* cuDNN's causal E4M3 forward past 256 query tiles of 128 rows was
   * wrong on an H100 (cuDNN 9.19): refused for that reason, never run */
  const struct fcase *c = f->c;
  int past = on_cuda() && c->causal && !getenv("TECORE_CUDNN_FP8_CAUSAL_MAX_TILES") &&
             (size_t)c->b * (size_t)c->h * (((size_t)c->s + 127) / 128) > 256;
  if (sscanf(desc, "backend %31s", be) != 1) {
    printf("# %s O %s: not run: %s\n", tag, tecore_dtype_name(o_dt), desc);
    ck_assert_msg(!past || strstr(desc, "query tiles"), "%s: refused, but not for its query "
                  "tiles: %s", tag, desc);
    TE_EXPECT_ERR(TECORE_ERR_NOT_SUPPORTED, "no attention backend",
                  tecore_attention_fwd(&a, te_stream));
    return 0;
  }
  ck_assert_msg(!past, "%s: a causal E4M3 forward of B%d H%d S%d ran on %s past the query "
                "tile limit", tag, c->b, c->h, c->s, be);
  size_t wb = 0;
  TE_OK(tecore_attention_workspace_size(&a, 0, &wb));
  if (wb) {
    a.workspace = te_dalloc(wb), a.workspace_bytes = wb;
    TE_OK(tecore_memset_d8_async(a.workspace, 0xff, wb, te_stream));
  }
  TE_OK(tecore_attention_fwd(&a, te_stream));
  TE_OK(te_stream_wait(te_stream, 120000));
  te_d2h(first, f->o, f->n * (o_dt == TECORE_DTYPE_E4M3 ? 1 : 2));
  TE_OK(tecore_attention_fwd(&a, te_stream));
  TE_OK(te_stream_wait(te_stream, 120000));
  if (a.workspace) TE_OK(tecore_mem_free(a.workspace));
  return 1;
}

/* One forward's checks, each a case_fail (o_scale: an E4M3 O's, else 0;
 * sc: o.amax, s_amax, o.scale, o.scale_inv read back). */
static void fwd_verdict(const char *tag, tecore_dtype_t o_dt, const char *be,
                        const struct fres *r, const float sc[4], float o_scale, int all_rows) {
  const char *ot = tecore_dtype_name(o_dt);
  int before = verdict.failed;
  verdict.cases++;
  if (r->bad)
    case_fail("%s O %s (%s): %zu of %zu elements past tolerance (%zu NaN: %s); the first: %s",
              tag, ot, be, r->bad, r->checked, r->nans,
              r->nans ? "O not written there" : "written wrong", r->first);
  else if (r->bad1)
    case_fail("%s O %s (%s): the first run had %zu of %zu elements past tolerance, the "
              "second none (a plan's first run reads something stale)", tag, ot, be, r->bad1,
              r->checked);
  if (!(r->lse_err <= ldexp(1, -9)))
    case_fail("%s O %s (%s): lse off by %g of 1 + |lse|", tag, ot, be, r->lse_err);
  if (o_scale && sc[3] != 1.0f / o_scale)
    case_fail("%s: o.scale_inv %g, want 1 / %g", tag, sc[3], o_scale);
  if (all_rows && !(fabs(sc[0] - r->o_amax_want) <= r->o_amax_tol + 1e-3 * r->o_amax_want))
    case_fail("%s O %s: o.amax %g, want %g", tag, ot, sc[0], r->o_amax_want);
  /* P = exp(S - lse): the kernel's own lse error e (bounded above) scales
   * every probability it forms by exp(-e), the largest included */
  if (all_rows &&
      !(fabs(sc[1] - r->s_amax_want) <= r->s_amax_want * (ldexp(1, -10) + expm1(r->lse_abs))))
    case_fail("%s O %s: s_amax %g, want %g", tag, ot, sc[1], r->s_amax_want);
  if (verdict.failed > before) verdict.failed = before + 1; /* one forward, one failure */
}

static void fwd_case(struct fdata *f, tecore_dtype_t o_dt, const char *variant) {
  const struct fcase *c = f->c;
  const int e4 = o_dt == TECORE_DTYPE_E4M3;
  char tag[160], be[32] = "";
  snprintf(tag, sizeof tag, "%s: B%d H%d S%d D%d%s%s%s", variant, c->b, c->h, c->s, c->d,
           c->causal ? " causal" : "", c->pow2 ? " pow2-scales" : "", c->same ? " Q=K=V" : "");
  float o_scale = fwd_prepare(f, o_dt);
  void *o = malloc(f->n * 2), *o1 = malloc(f->n * 2);
  int ran = fwd_run(f, o_dt, tag, be, o1);
  TE_OK(tecore_stream_synchronize(te_stream));
  read_inputs(f);
  if (!ran) {
    free(o), free(o1);
    return;
  }
  float *glse = malloc(f->T * c->h * 4), sc[4];
  te_d2h(o, f->o, f->n * (e4 ? 1 : 2));
  te_d2h(glse, f->lse, f->T * c->h * 4);
  te_d2h(sc, f->sc + SC_OAMAX, sizeof sc);
  struct orow w = {.f = f, .o = o, .o1 = o1, .e4 = e4, .o_si = sc[3],
                   .o_step = ldexp(1, -10) / (e4 ? o_scale : staged_scale(f->si[2])),
                   .p = malloc((size_t)c->s * sizeof(double))};
  struct fres r;
  check_all(&w, glse, &r);
  const int all_rows = !c->row_step;
  printf("# %s O %s (%s): scale_inv q %.6g k %.6g v %.6g, O scale %.6g%s; largest "
         "|err|/tol %.4g, %zu of %zu past it, %zu NaN; max|O| %.4g got, %.4g want; got/want "
         "%.4g; lse err %.3g; o.amax %.4g (want %.4g), s_amax %.4g (want %.4g)",
         tag, tecore_dtype_name(o_dt), be, f->si[0], f->si[1], f->si[2],
         e4 ? o_scale : staged_scale(f->si[2]), e4 ? "" : " (staged)", r.worst, r.bad,
         r.checked, r.nans, r.got_max, r.want_max, r.ww > 0 ? r.gw / r.ww : 0.0, r.lse_err,
         sc[0], r.o_amax_want, sc[1], r.s_amax_want);
  if (e4) printf(", o.scale_inv %.6g", sc[3]);
  printf("; first run: %zu past tolerance, %zu unlike the second", r.bad1, r.differ);
  printf("%s\n", all_rows ? "" : " (amaxes of the sampled rows)");
  print_rows(c, &r);
  fflush(stdout);
  fwd_verdict(tag, o_dt, be, &r, sc, e4 ? o_scale : 0, all_rows);
  free(o), free(o1), free(glse), free(w.p);
}

/* Both O types of case c under variant v. */
static void run_case(const struct fcase *c, int v) {
  struct fdata f;
  data_new(&f, c);
  fwd_case(&f, TECORE_DTYPE_BF16, variants[v].name);
  int pow2 = 1;
  for (int i = 0; i < 3; i++) {
    int e;
    pow2 &= frexp(f.si[i], &e) == 0.5;
  }
  /* the point of current scaling here: scales that are not powers of two */
  ck_assert_msg(c->pow2 == pow2, "scale_inv %g %g %g: %s powers of two", f.si[0], f.si[1],
                f.si[2], pow2 ? "all" : "not all");
  fwd_case(&f, TECORE_DTYPE_E4M3, variants[v].name);
  data_free(&f);
}

/* ---- tests ----------------------------------------------------------------------- */

/* vdev runs the C implementation under the sanitizers: smaller shapes. */
static const struct fcase vdev_cases[] = {
    {2, 4, 192, 128, 1, 0.25f, 0, 0, 0},
    {2, 4, 192, 64, 1, 1.0f, 0, 0, 0},
    {1, 2, 128, 128, 0, 1.0f, 0, 0, 0},
    {1, 2, 128, 128, 1, 0.25f, 0, 1, 0},
};
static const struct fcase cuda_cases[] = {
    {4, 8, 512, 128, 1, 0.25f, 0, 0, 0},
    {4, 8, 512, 64, 1, 1.0f, 0, 0, 0},
    {2, 8, 384, 128, 0, 1.0f, 0, 0, 0},
    {4, 8, 512, 128, 1, 0.25f, 0, 1, 0},
};

START_TEST(fp8_fwd_after_other_work) {
  if (!variant_set(_i)) return;
  const struct fcase *cs = on_cuda() ? cuda_cases : vdev_cases;
  for (int i = 0; i < 4; i++) run_case(&cs[i], _i);
  verdict_check("after_other_work");
}
END_TEST

/* te-bench's shapes, rows sampled (cuda only: registered where TE_DEVICE
 * is cuda). */
START_TEST(fp8_fwd_bench_shapes) {
  static const struct fcase cases[] = {
      {16, 16, 2048, 128, 1, 0.25f, 97, 0, 0},
      {4, 16, 8192, 128, 1, 0.25f, 509, 0, 0},
      {32, 12, 1024, 64, 1, 0.25f, 61, 0, 0},
      {16, 16, 2048, 128, 1, 0.25f, 97, 0, 1},
      {16, 16, 2048, 128, 1, 0.25f, 97, 1, 0},
  };
  if (!variant_set(_i)) return;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i], _i);
  verdict_check("bench_shapes");
}
END_TEST

/* TE_FP8_SHAPES's entries (the file's header), at most max; -1 when one
 * does not parse or is out of range. */
static int shapes_parse(const char *env, struct fcase *out, int max) {
  int n = 0;
  for (const char *at = env; *at;) {
    struct fcase c = {.row_step = 31, .scale_mult = 0.25f};
    int used = 0;
    if (n == max || sscanf(at, " %d , %d , %d , %d , %d%n", &c.b, &c.h, &c.s, &c.d, &c.causal,
                           &used) != 5)
      return -1;
    at += used;
    if (sscanf(at, " , %d%n", &c.row_step, &used) == 1) at += used;
    if (sscanf(at, " , %f%n", &c.scale_mult, &used) == 1) at += used;
    if (sscanf(at, " , %d%n", &c.same, &used) == 1) at += used;
    if ((c.same != 0 && c.same != 1) || c.b < 1 || c.h < 1 || c.s < 1 || c.d < 16 || c.d > 256 || c.d % 16 || c.row_step < 0 ||
        (c.causal != 0 && c.causal != 1) || !(c.scale_mult > 0))
      return -1;
    out[n++] = c;
    while (*at == ' ') at++;
    if (*at && *at++ != ';') return -1;
  }
  return n;
}

/* The shapes TE_FP8_SHAPES lists, under the environment's tunables. */
START_TEST(fp8_fwd_env_shapes) {
  struct fcase cs[32];
  const char *env = getenv("TE_FP8_SHAPES");
  int n = shapes_parse(env ? env : "", cs, 32);
  ck_assert_msg(n > 0, "TE_FP8_SHAPES=\"%s\": want up to 32 entries "
                "b,h,s,d,causal[,row_step[,scale_mult[,same]]] separated by ';'", env ? env : "");
  for (int i = 0; i < n; i++) run_case(&cs[i], 0);
  verdict_check("shapes");
}
END_TEST

static Suite *attn_fp8_suite(void) {
  Suite *s = suite_create("attn_fp8");
  if (getenv("TE_FP8_SHAPES")) { /* only the shapes asked for */
    TCase *tc = te_tcase(s, "shapes", 1);
    tcase_set_timeout(tc, 8 * TE_TEST_TIMEOUT);
    tcase_add_test(tc, fp8_fwd_env_shapes);
    return s;
  }
  TCase *tc = te_tcase(s, "after_other_work", 1);
  tcase_add_loop_test(tc, fp8_fwd_after_other_work, 0, NVARIANTS);
  const char *dev = getenv("TE_DEVICE");
  if (dev && !strcmp(dev, "cuda")) {
    tc = te_tcase(s, "bench_shapes", 1);
    tcase_set_timeout(tc, 4 * TE_TEST_TIMEOUT);
    tcase_add_loop_test(tc, fp8_fwd_bench_shapes, 0, 2);
  }
  return s;
}

TE_TEST_MAIN(attn_fp8_suite, TE_TEST_DEVICE)
