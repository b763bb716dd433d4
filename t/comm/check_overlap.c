/* SPDX-License-Identifier: Apache-2.0 */
/* check_overlap.c -- tecomm_ag_gemm and tecomm_gemm_rs (the GEMMs with
 * sequence parallelism's all-gather and reduce-scatter overlapped
 * inside), ranks as forked processes (t/lib/comm_ranks.h), 1 to 4 ranks:
 *   - all-gather + GEMM: BF16, F16 and E4M3 operands (E4M3 with
 *     per-tensor factors 0.5 and 0.25), D of their dtype, BF16 or F32,
 *     odd row counts (1, 5, 7 rows a rank), in place (a inside a
 *     symmetric a_all) or not, poisoned outputs (NaN bytes), two calls
 *     back to back with fresh inputs, a bias of D's dtype in half the
 *     cases (each rank its own), the GELU epilogue in two (gelu_aux the
 *     pre-activation, d its tanh GELU), the dGELU one in two
 *     (TECOMM_AG_GEMM_DGELU: a random gelu_aux read and left as it was,
 *     d the product times the tanh GELU's derivative at it, one of them
 *     with b as [k][n]), b as [k][n] in three
 *     (TECOMM_AG_GEMM_B_KN: d = a_all b): a_all byte for byte against every
 *     rank's rows, d against the float64 product with the tolerance
 *     half an ulp of D's dtype of |ref| plus k * 2^-23 * sum |a b|
 *     (float accumulation);
 *   - all-gather + GEMM with a8 (16-bit rows gathered, each rank's rows
 *     quantized to E4M3, or E5M2 by E4M3 b, as they land, the GEMM on
 *     the codes): a_all byte
 *     for byte, every code the host's encoding of x * scale, scale_inv
 *     1 / scale, amax max(its old value, max |x| over every rank's rows),
 *     d against the float64 product of the codes (poisoned outputs, in
 *     place and not, a bias in one, a GELU epilogue in one);
 *   - GEMM + reduce-scatter: the same dtypes and rows, d against the
 *     float64 sum of every rank's product (plus its bias): each partial
 *     is rounded to D's
 *     dtype before the fold, so half an ulp of each |partial| plus half
 *     an ulp of |ref| plus n k 2^-23 sum |a b|; every rank's block;
 *     fused with the residual add and RMSNorm (residual_out, out and
 *     rsigma against float64 with the error of the sum carried through;
 *     at hidden 2048 with odd ranks' residual and out not 16-byte
 *     aligned, so that the ranks' row plans would differ without the
 *     aligned copies;
 *     an E4M3 copy of out with delayed scaling within half an E4M3 ulp,
 *     and its amax);
 *   - at the registered in-place level (no pool) the same products; at
 *     the NCCL level (no IPC workspaces) both refused, saying why;
 *   - argument errors named (NULL, zero rows, dtypes, operands that are
 *     not symmetric where the peers read them, overlaps, d with norm,
 *     unknown flags, TECOMM_AG_GEMM_B_KN with E4M3 operands or a8,
 *     a bias with an F32 d, misaligned or over an output);
 *   - ranks passing other shapes: TECOMM_ERR_MISMATCH on every rank
 *     within 2 s, naming the call; ranks passing other partials: the
 *     allocation a rank left out is never written (peers only read);
 *   - both calls captured in one graph, replayed on fresh inputs;
 *   - a rank SIGKILLed between calls, or inside one (queued, its
 *     arrival at the first barrier announced, then killed): the others' status is
 *     TECOMM_ERR_TIMEOUT naming it within TECOMM_TIMEOUT + 1 s, and
 *     sticky; a call waiting for a peer ends when its rank aborts.
 * On cuda (TE_DEVICE=cuda, 4 GPUs) the same cases run over the copy
 * engines and cuBLASLt. */
#include "comm_ranks.h"
#include <math.h>
#include <time.h>
#include "common/fp8.h"

static double half_ulp(tecore_dtype_t dt) {
  return dt == TECORE_DTYPE_F32 ? 0x1p-24 : dt == TECORE_DTYPE_BF16 ? 0x1p-8 : 0x1p-11;
}

/* The accumulation's error relative to the sum of |a_i b_i| over k
 * terms: k f32 roundings, or for E4M3 inputs 2^-8 (the chunks' GEMMs
 * use FP8 fast accumulation, as libtecore's FP8 Linear forward does:
 * check_gemm's bound for it; without it, on 2 H200s, E4M3 rows of k 32
 * and 48 were already off by 2^-11.1 and 2^-11.0 of it), or for E5M2 a
 * (a gradient's codes, no fast accumulation) 2^-9: the tensor cores'
 * FP8 accumulator, not k f32 roundings (on one H200 an E5M2 row of k 48
 * was off by 0.0063 where k f32 roundings allowed 0.0028) */
static double acc_rel(tecore_dtype_t dt, size_t k) {
  return dt == TECORE_DTYPE_E4M3 ? 0x1p-8 : dt == TECORE_DTYPE_E5M2 ? 0x1p-9
                                                                    : (double)k * 0x1p-23;
}

/* E5M2 cases: a holds a gradient's E5M2 codes, b a weight's E4M3 ones
 * (no fast accumulation) */
static tecore_dtype_t b_dt(tecore_dtype_t dt) {
  return dt == TECORE_DTYPE_E5M2 ? TECORE_DTYPE_E4M3 : dt;
}

static int fp8_dt(tecore_dtype_t dt) {
  return dt == TECORE_DTYPE_E4M3 || dt == TECORE_DTYPE_E5M2;
}

struct ov_case {
  tecore_dtype_t dt, ddt;
  size_t rows, n, k;
  int in_place; /* ag: a inside a_all */
  int norm;     /* rs: fused residual add + RMSNorm */
  int bias;     /* a bias of D's dtype (each rank its own) */
  int gelu;     /* ag: 1 the GELU epilogue (gelu_aux written); 2 the dGELU one
                   (TECOMM_AG_GEMM_DGELU: gelu_aux read, d = a_all b^T * gelu'(aux)) */
  int b_kn;     /* ag: b is [k][n], d = a_all b (TECOMM_AG_GEMM_B_KN); rs skips the case */
};
/* (dt E5M2: a's codes a gradient's, b E4M3: tecomm_ag_gemm only; rs
 * skips the case) */

static const struct ov_case cases[] = {
    {TECORE_DTYPE_BF16, TECORE_DTYPE_BF16, 5, 24, 40, 0, 0, 0, 0, 0},
    {TECORE_DTYPE_BF16, TECORE_DTYPE_F32, 7, 16, 33, 1, 0, 0, 0, 0},
    {TECORE_DTYPE_F16, TECORE_DTYPE_F16, 1, 8, 64, 1, 1, 1, 1, 0},
    {TECORE_DTYPE_BF16, TECORE_DTYPE_BF16, 5, 2048, 16, 0, 1, 1, 1, 0},
    {TECORE_DTYPE_E4M3, TECORE_DTYPE_BF16, 5, 32, 32, 1, 0, 1, 0, 0},
    {TECORE_DTYPE_E4M3, TECORE_DTYPE_F32, 3, 16, 48, 0, 1, 0, 0, 0},
    {TECORE_DTYPE_BF16, TECORE_DTYPE_BF16, 5, 24, 40, 0, 0, 1, 0, 1},
    {TECORE_DTYPE_F16, TECORE_DTYPE_F32, 3, 16, 48, 1, 0, 0, 0, 1},
    {TECORE_DTYPE_E5M2, TECORE_DTYPE_BF16, 5, 32, 48, 1, 0, 0, 0, 0},
    {TECORE_DTYPE_E5M2, TECORE_DTYPE_F32, 3, 16, 32, 0, 0, 0, 0, 0},
    {TECORE_DTYPE_BF16, TECORE_DTYPE_BF16, 5, 24, 40, 0, 0, 0, 2, 1},
    {TECORE_DTYPE_F16, TECORE_DTYPE_F16, 3, 16, 48, 1, 0, 0, 2, 0},
};
/* E4M3 cases' per-tensor dequantization factors (a, b) */
static const float fp8_si[2] = {0.5f, 0.25f};
#define NCASES (sizeof cases / sizeof cases[0])

/* Host copies of one rank's inputs for a case and call (salt). */
static void *host_make(size_t count, tecore_dtype_t dt, int r, uint64_t salt) {
  void *p = malloc(count * tecore_dtype_size(dt));
  RK_ASSERT(p, "malloc");
  if (!fp8_dt(dt)) {
    tc_make_input(p, count, dt, r, salt);
    return p;
  }
  /* random E4M3 bytes of magnitude below 16, never NaN (0x7f, 0xff); E5M2
   * ones below 16 (0x4c), never Inf or NaN (0x7c-0x7f) */
  uint64_t x = te_test_seed ^ ((uint64_t)(r + 1) << 40) ^ (salt * 0x9e3779b97f4a7c15ull);
  unsigned char *b = p;
  const unsigned top = dt == TECORE_DTYPE_E4M3 ? 0x58u : 0x4cu;
  for (size_t i = 0; i < count; i++) {
    unsigned v = (unsigned)(te_splitmix64(&x) >> 56);
    b[i] = (unsigned char)((v & 0x80u) | (v & 0x7fu) % top);
  }
  return p;
}

/* The E4M3 factors on the device (a's, then b's), or 0 for 16-bit cases. */
static tecore_devptr_t scales_put(const struct ov_case *k, tecore_stream_t s) {
  if (!fp8_dt(k->dt)) return 0;
  tecore_devptr_t d;
  RK_CORE(tecore_mem_alloc(sizeof fp8_si, &d));
  RK_CORE(tecore_memcpy_async(d, te_hptr(fp8_si), sizeof fp8_si, s));
  RK_CORE(tecore_stream_synchronize(s));
  return d;
}

static tecore_devptr_t dev_put(const void *h, size_t bytes, tecore_stream_t s) {
  tecore_devptr_t d;
  RK_CORE(tecore_mem_alloc(bytes, &d));
  RK_CORE(tecore_memcpy_async(d, te_hptr(h), bytes, s));
  return d;
}

/* A bias of bias_make on the device (0 without one). */
static tecore_devptr_t bias_put(const void *h, const struct ov_case *k, tecore_stream_t s) {
  return h ? dev_put(h, k->n * tecore_dtype_size(k->ddt), s) : 0;
}

static void *dev_get(tecore_devptr_t d, size_t bytes, tecore_stream_t s) {
  void *h = malloc(bytes);
  RK_ASSERT(h, "malloc");
  RK_CORE(tecore_memcpy_async(te_hptr(h), d, bytes, s));
  RK_CORE(tecore_stream_synchronize(s));
  return h;
}

/* Element i of an input: FP8 bytes times the operand's factor (dt E5M2:
 * a's codes, b's E4M3). */
static double in_val(const void *p, size_t i, tecore_dtype_t dt, int which) {
  if (!fp8_dt(dt)) return tc_from_dt(p, i, dt);
  const unsigned char c = ((const unsigned char *)p)[i];
  const float v = dt == TECORE_DTYPE_E5M2 && which == 0 ? te_e5m2_to_f32(c) : te_e4m3_to_f32(c);
  return (double)v * fp8_si[which];
}

/* One element of a b^T in float64, and the sum of |a_i b_i|; b_n: b is
 * [k][b_n] and the element is a b's (b_n 0: b is [n][k]). */
static double dot_kn(const void *a, size_t ra, const void *b, size_t rb, size_t k, size_t b_n,
                     tecore_dtype_t dt, double *abs_sum) {
  double s = 0, m = 0;
  for (size_t i = 0; i < k; i++) {
    const size_t bi = b_n ? i * b_n + rb : rb * k + i;
    double x = in_val(a, ra * k + i, dt, 0) * in_val(b, bi, dt, 1);
    s += x;
    m += fabs(x);
  }
  *abs_sum = m;
  return s;
}

static double dot(const void *a, size_t ra, const void *b, size_t rb, size_t k, tecore_dtype_t dt,
                  double *abs_sum) {
  return dot_kn(a, ra, b, rb, k, 0, dt, abs_sum);
}

static uint64_t salt_of(int ci, int it, int what) {
  return (uint64_t)(ci * 16 + it * 4 + what + 1);
}

/* Rank r's bias [n] of D's dtype for a case and call (NULL without one). */
static void *bias_make(const struct ov_case *k, int r, int ci, int it) {
  return k->bias ? host_make(k->n, k->ddt, r, 1000 + salt_of(ci, it, 0)) : NULL;
}

/* Element j of a bias made so, 0 without one. */
static double bias_at(const void *bias, size_t j, const struct ov_case *k) {
  return bias ? tc_from_dt(bias, j, k->ddt) : 0.0;
}

/* ---- all-gather + GEMM ------------------------------------------------------------- */

static void ag_check_all(const unsigned char *all, int n, const struct ov_case *k, int ci, int it) {
  const size_t chunk = k->rows * k->k * tecore_dtype_size(k->dt);
  for (int s = 0; s < n; s++) {
    unsigned char *want = host_make(k->rows * k->k, k->dt, s, salt_of(ci, it, 0));
    RK_ASSERT(memcmp(all + (size_t)s * chunk, want, chunk) == 0,
              "case %d call %d: a_all's rows of rank %d differ from its a", ci, it, s);
    free(want);
  }
}

static double gelu_tanh(double x) {
  return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

/* d/dx of gelu_tanh */
static double dgelu_tanh(double x) {
  const double c = 0.7978845608028654, t = tanh(c * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x);
}

/* TECOMM_AG_GEMM_DGELU: d = the float64 product times gelu' at aux's
 * value (an input, here |aux| < 2: |gelu'| < 1.2 carries the sum's
 * error; 2^-20 of the product the float derivative's), within a whole
 * ulp of d's dtype, as check_gemm holds tecore_gemm's dGELU epilogue:
 * on cuda libte's own Hopper GEMM rounds twice (seen on an H200: 20.5
 * for 20.592 in BF16, 0.7 ulp). */
static void ag_check_dgelu(const void *d, const void *aux, const void *all, const void *b,
                           int n, const struct ov_case *k, int ci, int it) {
  for (size_t i = 0; i < (size_t)n * k->rows; i++)
    for (size_t j = 0; j < k->n; j++) {
      double m, ref = dot_kn(all, i, b, j, k->k, k->b_kn ? k->n : 0, k->dt, &m);
      const double want = ref * dgelu_tanh(tc_from_dt(aux, i * k->n + j, k->ddt));
      const double got = tc_from_dt(d, i * k->n + j, k->ddt);
      const double acc = acc_rel(k->dt, k->k) * m + 1e-30;
      const double tol =
          2 * half_ulp(k->ddt) * fabs(want) + 1.2 * acc + 0x1p-20 * (fabs(ref) + 1);
      RK_ASSERT(fabs(got - want) <= tol, "case %d call %d: d[%zu][%zu] = %.9g, float64 product "
                "%.9g times gelu' of aux: %.9g (tolerance %.3g)", ci, it, i, j, got, ref, want,
                tol);
    }
}

/* d (and with the GELU epilogue aux = the pre-activation, d = gelu of its
 * float value: |gelu'| < 1.2 carries the sum's error, 2^-20 the float
 * tanh's) against float64. */
static void ag_check_d(const void *d, const void *aux, const void *all, const void *b,
                       const void *bias, int n, const struct ov_case *k, int ci, int it) {
  for (size_t i = 0; i < (size_t)n * k->rows; i++)
    for (size_t j = 0; j < k->n; j++) {
      double m, ref = dot_kn(all, i, b, j, k->k, k->b_kn ? k->n : 0, k->dt, &m) +
                      bias_at(bias, j, k);
      double got = tc_from_dt(aux ? aux : d, i * k->n + j, k->ddt);
      double acc = acc_rel(k->dt, k->k) * m + 1e-30, tol = half_ulp(k->ddt) * fabs(ref) + acc;
      RK_ASSERT(fabs(got - ref) <= tol, "case %d call %d: %s[%zu][%zu] = %.9g, float64 %.9g "
                "(tolerance %.3g)", ci, it, aux ? "gelu_aux" : "d", i, j, got, ref, tol);
      if (!aux) continue;
      double g = gelu_tanh(ref), gd = tc_from_dt(d, i * k->n + j, k->ddt);
      tol = half_ulp(k->ddt) * fabs(g) + 1.2 * acc + 0x1p-20 * (fabs(ref) + 1);
      RK_ASSERT(fabs(gd - g) <= tol, "case %d call %d: d[%zu][%zu] = %.9g, float64 gelu %.9g "
                "(tolerance %.3g)", ci, it, i, j, gd, g, tol);
    }
}

/* a_all (n chunks) and a (one): a at this rank's chunk of a symmetric
 * a_all in place, else a symmetric a beside a plain a_all. */
static void ag_alloc(tecomm_comm_t c, int in_place, size_t chunk, int n, int rank,
                     tecore_devptr_t *all, tecore_devptr_t *a) {
  if (in_place) {
    RK_OK(tecomm_mem_alloc(c, (size_t)n * chunk, all));
    *a = *all + (size_t)rank * chunk;
    return;
  }
  RK_CORE(tecore_mem_alloc((size_t)n * chunk, all));
  RK_OK(tecomm_mem_alloc(c, chunk, a));
}

static void ag_release(tecomm_comm_t c, int in_place, tecore_devptr_t all, tecore_devptr_t a) {
  if (in_place) {
    RK_OK(tecomm_mem_free(c, all));
    return;
  }
  RK_CORE(tecore_mem_free(all));
  RK_OK(tecomm_mem_free(c, a));
}

static void ag_case(tecomm_comm_t c, tecore_stream_t s, int rank, int n, int ci) {
  const struct ov_case *k = &cases[ci];
  const size_t esz = tecore_dtype_size(k->dt), dsz = tecore_dtype_size(k->ddt);
  const size_t chunk = k->rows * k->k * esz, dbytes = (size_t)n * k->rows * k->n * dsz;
  tecore_devptr_t all, a;
  ag_alloc(c, k->in_place, chunk, n, rank, &all, &a);
  tecore_devptr_t d, aux = 0, si = scales_put(k, s);
  RK_CORE(tecore_mem_alloc(dbytes, &d));
  if (k->gelu) RK_CORE(tecore_mem_alloc(dbytes, &aux));
  for (int it = 0; it < 2; it++) {
    void *ha = host_make(k->rows * k->k, k->dt, rank, salt_of(ci, it, 0));
    void *hb = host_make(k->n * k->k, b_dt(k->dt), rank, salt_of(ci, it, 1));
    void *hbias = bias_make(k, rank, ci, it);
    tecore_devptr_t b = dev_put(hb, k->n * k->k * esz, s), bias = bias_put(hbias, k, s);
    RK_CORE(tecore_memset_d8_async(all, 0xff, (size_t)n * chunk, s)); /* NaN bytes */
    RK_CORE(tecore_memset_d8_async(d, 0xff, dbytes, s));
    /* dGELU: the pre-activation an input, random; else an output, poisoned */
    void *hin = k->gelu == 2 ? host_make(dbytes / dsz, k->ddt, rank, salt_of(ci, it, 2)) : NULL;
    if (hin) RK_CORE(tecore_memcpy_async(aux, te_hptr(hin), dbytes, s));
    else if (aux) RK_CORE(tecore_memset_d8_async(aux, 0xff, dbytes, s));
    RK_CORE(tecore_memcpy_async(a, te_hptr(ha), chunk, s));
    struct tecomm_ag_gemm_args g = {.a = a, .a_all = all, .b = b, .d = d, .rows = k->rows,
                                    .n = k->n, .k = k->k, .dtype = k->dt, .d_dtype = k->ddt,
                                    .a_scale_inv = si, .b_scale_inv = si ? si + 4 : 0,
                                    .bias = bias, .gelu_aux = aux,
                                    .flags = (k->b_kn ? TECOMM_AG_GEMM_B_KN : 0) |
                                             (k->gelu == 2 ? TECOMM_AG_GEMM_DGELU : 0)};
    RK_OK(tecomm_ag_gemm(c, &g, s));
    RK_CORE(tecore_stream_synchronize(s));
    RK_OK(tecomm_comm_status(c, NULL));
    unsigned char *hall = dev_get(all, (size_t)n * chunk, s);
    void *hd = dev_get(d, dbytes, s), *haux = aux ? dev_get(aux, dbytes, s) : NULL;
    ag_check_all(hall, n, k, ci, it);
    if (hin) {
      RK_ASSERT(!memcmp(haux, hin, dbytes), "case %d call %d: gelu_aux, an input of the dGELU "
                "epilogue, was written", ci, it);
      ag_check_dgelu(hd, hin, hall, hb, n, k, ci, it);
    } else {
      ag_check_d(hd, haux, hall, hb, hbias, n, k, ci, it);
    }
    free(hin);
    free(haux);
    free(hbias);
    if (bias) RK_CORE(tecore_mem_free(bias));
    free(hall);
    free(hd);
    free(ha);
    free(hb);
    RK_CORE(tecore_mem_free(b));
  }
  RK_CORE(tecore_mem_free(d));
  if (aux) RK_CORE(tecore_mem_free(aux));
  if (si) RK_CORE(tecore_mem_free(si));
  ag_release(c, k->in_place, all, a);
}

/* A rank's run of count cases of one kind (arg: struct case_run). */
struct case_run {
  void (*one)(tecomm_comm_t c, tecore_stream_t s, int rank, int n, int ci);
  int count;
};
/* Each rank pulls its peers' rows or blocks over its own number of copy
 * streams (TECOMM_AG_GEMM_PULLS and TECOMM_GEMM_RS_PULLS 2, 3, 4, 1 for
 * ranks 0..3; the environment's where set): the pieces change nothing a
 * peer sees, nor any bit. */
static void pulls_env(int rank) {
  const char v[2] = {(char)('1' + (rank + 1) % 4), 0};
  setenv("TECOMM_AG_GEMM_PULLS", v, 0);
  setenv("TECOMM_GEMM_RS_PULLS", v, 0);
}

static void rank_cases(int rank, int n, void *arg) {
  const struct case_run *r = arg;
  pulls_env(rank);
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  for (int ci = 0; ci < r->count; ci++) r->one(c, s, rank, n, ci);
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(ag_gemm_matches_float64) {
  static const struct case_run run = {ag_case, (int)NCASES};
  tc_run_ranks(_i + 1, rank_cases, (void *)&run, 120);
  tc_shm_release();
}
END_TEST

/* ---- all-gather + GEMM, quantized on arrival (a8) -------------------------------------- */

/* a8 cases: the gathered dtype, rows a rank, n, k, in place, bias, GELU,
 * e5m2 (a8 E5M2: a gradient's codes by E4M3 b, as allgather+dgrad) */
struct a8_case {
  tecore_dtype_t dt;
  size_t rows, n, k;
  int in_place, bias, gelu, e5m2;
};
static const struct a8_case a8_cases[] = {
    {TECORE_DTYPE_BF16, 5, 16, 32, 0, 0, 0, 0},
    {TECORE_DTYPE_F16, 3, 24, 48, 1, 1, 0, 0},
    {TECORE_DTYPE_BF16, 1, 32, 16, 1, 1, 1, 0},
    {TECORE_DTYPE_BF16, 5, 16, 48, 0, 0, 0, 1},
    {TECORE_DTYPE_F16, 3, 32, 32, 1, 0, 0, 1},
};

static unsigned char a8_code(const struct a8_case *k, float v) {
  return k->e5m2 ? te_f32_to_e5m2(v) : te_f32_to_e4m3(v);
}
static double a8_value(const struct a8_case *k, unsigned char c) {
  return k->e5m2 ? te_e5m2_to_f32(c) : te_e4m3_to_f32(c);
}
/* a8's quantization scale and the weight codes' factor */
static const float a8_scale = 4.0f, a8_bsi = 0.25f;

/* The float64 check of one a8 call: hall (every rank's 16-bit rows),
 * codes, the scaling words (scale, scale_inv, amax), d (and aux). */
static void a8_check(const struct a8_case *k, int n, int ci, int it, const void *hall,
                     const unsigned char *codes, const float *w, float amax0, const void *hb,
                     const void *hbias, const void *hd, const void *haux) {
  const size_t all = (size_t)n * k->rows * k->k;
  double mx = amax0;
  for (size_t i = 0; i < all; i++) {
    float x = (float)tc_from_dt(hall, i, k->dt);
    unsigned char want = a8_code(k, x * a8_scale);
    RK_ASSERT(codes[i] == want, "a8 case %d call %d: code %zu is 0x%02x, want 0x%02x (x %.9g)",
              ci, it, i, codes[i], want, x);
    mx = fmax(mx, fabs(x));
  }
  RK_ASSERT(w[0] == a8_scale && w[1] == 1.0f / a8_scale,
            "a8 case %d call %d: scale %.9g, scale_inv %.9g, want %.9g and %.9g", ci, it, w[0],
            w[1], a8_scale, 1.0f / a8_scale);
  RK_ASSERT(w[2] == (float)mx, "a8 case %d call %d: amax %.9g, want %.9g (max of %.9g and every "
            "rank's rows)", ci, it, w[2], mx, amax0);
  const tecore_dtype_t ddt = TECORE_DTYPE_BF16;
  for (size_t i = 0; i < (size_t)n * k->rows; i++)
    for (size_t j = 0; j < k->n; j++) {
      double ref = 0, m = 0;
      for (size_t e = 0; e < k->k; e++) {
        double x = a8_value(k, codes[i * k->k + e]) / a8_scale *
                   te_e4m3_to_f32(((const unsigned char *)hb)[j * k->k + e]) * a8_bsi;
        ref += x;
        m += fabs(x);
      }
      ref += hbias ? tc_from_dt(hbias, j, ddt) : 0.0;
      /* E5M2: no fast accumulation (acc_rel) */
      const double acc = acc_rel(k->e5m2 ? TECORE_DTYPE_E5M2 : TECORE_DTYPE_E4M3, k->k) * m + 1e-30;
      double got = tc_from_dt(haux ? haux : hd, i * k->n + j, ddt);
      double tol = half_ulp(ddt) * fabs(ref) + acc;
      RK_ASSERT(fabs(got - ref) <= tol, "a8 case %d call %d: %s[%zu][%zu] = %.9g, float64 %.9g "
                "(tolerance %.3g)", ci, it, haux ? "gelu_aux" : "d", i, j, got, ref, tol);
      if (!haux) continue;
      double g = gelu_tanh(ref), gd = tc_from_dt(hd, i * k->n + j, ddt);
      tol = half_ulp(ddt) * fabs(g) + 1.2 * acc + 0x1p-20 * (fabs(ref) + 1);
      RK_ASSERT(fabs(gd - g) <= tol, "a8 case %d call %d: d[%zu][%zu] = %.9g, float64 gelu %.9g "
                "(tolerance %.3g)", ci, it, i, j, gd, g, tol);
    }
}

static void a8_case(tecomm_comm_t c, tecore_stream_t s, int rank, int n, int ci) {
  const struct a8_case *k = &a8_cases[ci];
  const size_t esz = tecore_dtype_size(k->dt), chunk = k->rows * k->k * esz;
  const size_t nall = (size_t)n * k->rows * k->k, dbytes = (size_t)n * k->rows * k->n * 2;
  tecore_devptr_t all, a, codes, d, aux = 0, w;
  ag_alloc(c, k->in_place, chunk, n, rank, &all, &a);
  RK_CORE(tecore_mem_alloc(nall, &codes));
  RK_CORE(tecore_mem_alloc(dbytes, &d));
  if (k->gelu) RK_CORE(tecore_mem_alloc(dbytes, &aux));
  RK_CORE(tecore_mem_alloc(16, &w));   /* scale, scale_inv, amax, b's factor */
  for (int it = 0; it < 2; it++) {
    void *ha = host_make(k->rows * k->k, k->dt, rank, 500 + salt_of(ci, it, 0));
    unsigned char *hb = host_make(k->n * k->k, TECORE_DTYPE_E4M3, 0, 500 + salt_of(ci, it, 1));
    void *hbias = k->bias ? host_make(k->n, TECORE_DTYPE_BF16, rank, 600 + salt_of(ci, it, 0))
                          : NULL;
    tecore_devptr_t b = dev_put(hb, k->n * k->k, s);
    tecore_devptr_t bias = hbias ? dev_put(hbias, k->n * 2, s) : 0;
    /* the amax before: below every |x| on the first call, above on the second */
    const float hw[4] = {a8_scale, -1.0f, it ? 1e6f : 1e-6f, a8_bsi};
    RK_CORE(tecore_memcpy_async(w, te_hptr(hw), sizeof hw, s));
    RK_CORE(tecore_memset_d8_async(all, 0xff, (size_t)n * chunk, s));   /* NaN bytes */
    RK_CORE(tecore_memset_d8_async(codes, 0x7f, nall, s));   /* NaN in E4M3 and E5M2 */
    RK_CORE(tecore_memset_d8_async(d, 0xff, dbytes, s));
    if (aux) RK_CORE(tecore_memset_d8_async(aux, 0xff, dbytes, s));
    RK_CORE(tecore_memcpy_async(a, te_hptr(ha), chunk, s));
    const size_t shape[2] = {(size_t)n * k->rows, k->k};
    struct tecore_tensor t8;
    RK_CORE(tecore_tensor_init(&t8, k->e5m2 ? TECORE_DTYPE_E5M2 : TECORE_DTYPE_E4M3, 2, shape,
                               codes));
    t8.scaling = TECORE_SCALING_DELAYED;
    t8.scale = w, t8.scale_inv = w + 4, t8.amax = w + 8;
    struct tecomm_ag_gemm_args g = {.a = a, .a_all = all, .b = b, .d = d, .rows = k->rows,
                                    .n = k->n, .k = k->k, .dtype = k->dt,
                                    .d_dtype = TECORE_DTYPE_BF16, .b_scale_inv = w + 12,
                                    .bias = bias, .gelu_aux = aux, .a8 = &t8};
    RK_OK(tecomm_ag_gemm(c, &g, s));
    RK_CORE(tecore_stream_synchronize(s));
    RK_OK(tecomm_comm_status(c, NULL));
    unsigned char *hall = dev_get(all, (size_t)n * chunk, s), *hc = dev_get(codes, nall, s);
    float *hwo = dev_get(w, sizeof hw, s);
    void *hd = dev_get(d, dbytes, s), *haux = aux ? dev_get(aux, dbytes, s) : NULL;
    for (int r = 0; r < n; r++) {
      void *want = host_make(k->rows * k->k, k->dt, r, 500 + salt_of(ci, it, 0));
      RK_ASSERT(memcmp(hall + (size_t)r * chunk, want, chunk) == 0,
                "a8 case %d call %d: a_all's rows of rank %d differ from its a", ci, it, r);
      free(want);
    }
    a8_check(k, n, ci, it, hall, hc, hwo, hw[2], hb, hbias, hd, haux);
    free(haux);
    free(hd);
    free(hwo);
    free(hc);
    free(hall);
    free(hbias);
    free(hb);
    free(ha);
    if (bias) RK_CORE(tecore_mem_free(bias));
    RK_CORE(tecore_mem_free(b));
  }
  RK_CORE(tecore_mem_free(w));
  RK_CORE(tecore_mem_free(d));
  RK_CORE(tecore_mem_free(codes));
  if (aux) RK_CORE(tecore_mem_free(aux));
  ag_release(c, k->in_place, all, a);
}

START_TEST(ag_gemm_a8_quantizes_on_arrival) {
  static const struct case_run run = {a8_case, (int)(sizeof a8_cases / sizeof a8_cases[0])};
  tc_run_ranks(_i + 1, rank_cases, (void *)&run, 120);
  tc_shm_release();
}
END_TEST

/* ---- GEMM + reduce-scatter ---------------------------------------------------------- */

/* The float64 sum over the ranks of this rank's block, and its tolerance. */
static void rs_ref(int rank, int n, const struct ov_case *k, int ci, int it, double *ref,
                   double *tol) {
  const size_t rows = k->rows, cnt = rows * k->n;
  double *pabs = calloc(cnt, sizeof *pabs), *mabs = calloc(cnt, sizeof *mabs);
  RK_ASSERT(pabs && mabs, "calloc");
  for (size_t e = 0; e < cnt; e++) ref[e] = 0;
  for (int s = 0; s < n; s++) {
    void *a = host_make((size_t)n * rows * k->k, k->dt, s, salt_of(ci, it, 0));
    void *b = host_make(k->n * k->k, k->dt, s, salt_of(ci, it, 1));
    void *bias = bias_make(k, s, ci, it);   /* rank s's, in its partials */
    for (size_t i = 0; i < rows; i++)
      for (size_t j = 0; j < k->n; j++) {
        double m, p = dot(a, (size_t)rank * rows + i, b, j, k->k, k->dt, &m) + bias_at(bias, j, k);
        ref[i * k->n + j] += p;
        pabs[i * k->n + j] += fabs(p);
        mabs[i * k->n + j] += m;
      }
    free(a);
    free(b);
    free(bias);
  }
  const double h = half_ulp(k->ddt);
  for (size_t e = 0; e < cnt; e++)
    tol[e] = h * (pabs[e] + fabs(ref[e])) + (double)n * acc_rel(k->dt, k->k) * mabs[e] + 1e-30;
  free(pabs);
  free(mabs);
}

static void rs_check_plain(const void *d, const double *ref, const double *tol,
                           const struct ov_case *k, int ci, int it) {
  for (size_t e = 0; e < k->rows * k->n; e++) {
    double got = tc_from_dt(d, e, k->ddt);
    RK_ASSERT(fabs(got - ref[e]) <= tol[e], "case %d call %d: d[%zu] = %.9g, float64 %.9g "
              "(tolerance %.3g)", ci, it, e, got, ref[e], tol[e]);
  }
}

/* residual_out = sum + residual_in; out and rsigma from the residual_out
 * the call wrote (so the sum's error is not counted twice). */
static void rs_check_norm(const void *ro, const void *out, const float *rsig, const void *res,
                          const void *gamma, const double *ref, const double *tol,
                          const struct ov_case *k, int ci) {
  const double h = half_ulp(k->ddt);
  for (size_t i = 0; i < k->rows; i++) {
    double ss = 0;
    for (size_t j = 0; j < k->n; j++) {
      size_t e = i * k->n + j;
      double want = ref[e] + tc_from_dt(res, e, k->ddt), got = tc_from_dt(ro, e, k->ddt);
      double t = tol[e] + h * (fabs(ref[e]) + fabs(want));
      RK_ASSERT(fabs(got - want) <= t, "case %d: residual_out[%zu] = %.9g, float64 %.9g "
                "(tolerance %.3g)", ci, e, got, want, t);
      ss += got * got;
    }
    double rs = 1.0 / sqrt(ss / (double)k->n + 1e-5);
    RK_ASSERT(fabs(rsig[i] - rs) <= 1e-5 * rs, "case %d: rsigma[%zu] = %.9g, float64 %.9g", ci, i,
              (double)rsig[i], rs);
    for (size_t j = 0; j < k->n; j++) {
      size_t e = i * k->n + j;
      double g = tc_from_dt(gamma, j, k->ddt);
      double want = tc_from_dt(ro, e, k->ddt) * rs * g, got = tc_from_dt(out, e, k->ddt);
      double t = 2 * h * fabs(want) + 1e-5 * fabs(g);
      RK_ASSERT(fabs(got - want) <= t, "case %d: out[%zu] = %.9g, float64 %.9g (tolerance %.3g)",
                ci, e, got, want, t);
    }
  }
}

struct rs_bufs {
  tecore_devptr_t a, b, d, partials, res, res_out, gamma, out, rsig;
  tecore_devptr_t q, sc; /* case 2: the E4M3 copy and its scale, scale_inv, amax */
  tecore_devptr_t res_base, out_base; /* case 3 on odd ranks: 2 bytes before res and out */
  tecore_devptr_t si;                 /* E4M3 cases: the operands' factors */
  void *hres, *hgamma;
};

static double e4m3_half_ulp(double v) {
  double a = fabs(v);
  if (a < 0x1p-6) return 0x1p-10;
  int e;
  frexp(a, &e); /* a = m * 2^e, m in [0.5, 1) */
  return ldexp(1.0, e - 1 - 3) / 2;
}

/* The FP8 copy: E4M3(residual_out * rsigma * gamma * 3.5) within half an
 * E4M3 ulp (the kernel's float products add at most 2^-21 before that
 * rounding); amax (from 0) the largest |residual_out * rsigma * gamma|. */
static void rs_check_fp8(const struct rs_bufs *m, const void *ro, const float *rsig,
                         const struct ov_case *k, tecore_stream_t s) {
  const size_t cnt = k->rows * k->n;
  unsigned char *q = dev_get(m->q, cnt, s);
  float *sc = dev_get(m->sc, 16, s);
  double am = 0;
  for (size_t i = 0; i < cnt; i++) {
    double o = tc_from_dt(ro, i, k->ddt) * rsig[i / k->n] * tc_from_dt(m->hgamma, i % k->n, k->ddt);
    am = fmax(am, fabs(o));
    double ref = o * 3.5, got = te_e4m3_to_f32(q[i]);
    double tol = e4m3_half_ulp(ref) + 0x1p-21 * fabs(ref);
    RK_ASSERT(fabs(got - ref) <= tol, "fp8_out[%zu] = %g (0x%02x), float64 %.9g (tolerance %.3g)",
              i, got, q[i], ref, tol);
  }
  RK_ASSERT(fabs(sc[2] - am) <= 0x1p-21 * am, "fp8 amax %.9g, float64 %.12g", (double)sc[2], am);
  free(q);
  free(sc);
}

static void rs_norm_bufs(struct rs_bufs *m, const struct ov_case *k, int rank, int ci,
                         tecore_stream_t s) {
  const size_t blk = k->rows * k->n * tecore_dtype_size(k->ddt);
  m->hres = host_make(k->rows * k->n, k->ddt, rank, salt_of(ci, 0, 2));
  m->hgamma = host_make(k->n, k->ddt, rank, salt_of(ci, 0, 3));
  /* case 3: odd ranks' residual and out 2 bytes past 16-byte alignment,
   * the even ranks' aligned: every rank must still plan the fused rows
   * alike (the ranks' grids meet at the fold's barriers) */
  const int skew = ci == 3 && rank % 2 ? 2 : 0;
  RK_CORE(tecore_mem_alloc(blk + 16, &m->res_base));
  m->res = m->res_base + (tecore_devptr_t)skew;
  RK_CORE(tecore_memcpy_async(m->res, te_hptr(m->hres), blk, s));
  m->gamma = dev_put(m->hgamma, k->n * tecore_dtype_size(k->ddt), s);
  m->res_out = m->res;
  if (ci % 2 == 0) RK_CORE(tecore_mem_alloc(blk, &m->res_out)); /* else in place */
  RK_CORE(tecore_mem_alloc(blk + 16, &m->out_base));
  m->out = m->out_base + (tecore_devptr_t)skew;
  RK_CORE(tecore_mem_alloc(k->rows * 4, &m->rsig));
  RK_CORE(tecore_memset_d8_async(m->out, 0xff, blk, s));
  RK_CORE(tecore_memset_d8_async(m->rsig, 0xff, k->rows * 4, s));
  if (ci == 2) {
    const float scales[4] = {3.5f, 1.0f / 3.5f, 0.0f, 0.0f}; /* scale, scale_inv, amax */
    RK_CORE(tecore_mem_alloc(k->rows * k->n, &m->q));
    RK_CORE(tecore_mem_alloc(sizeof scales, &m->sc));
    RK_CORE(tecore_memset_d8_async(m->q, 0xff, k->rows * k->n, s));
    RK_CORE(tecore_memcpy_async(m->sc, te_hptr(scales), sizeof scales, s));
    RK_CORE(tecore_stream_synchronize(s));
  }
  if (m->res_out != m->res) RK_CORE(tecore_memset_d8_async(m->res_out, 0xff, blk, s));
}

static void rs_norm_free(struct rs_bufs *m) {
  if (m->q) RK_CORE(tecore_mem_free(m->q));
  if (m->sc) RK_CORE(tecore_mem_free(m->sc));
  if (m->res_out != m->res) RK_CORE(tecore_mem_free(m->res_out));
  RK_CORE(tecore_mem_free(m->res_base));
  RK_CORE(tecore_mem_free(m->gamma));
  RK_CORE(tecore_mem_free(m->out_base));
  RK_CORE(tecore_mem_free(m->rsig));
  free(m->hres);
  free(m->hgamma);
}

static void rs_call(tecomm_comm_t c, tecore_stream_t s, int rank, int n, int ci, int it,
                    struct rs_bufs *m) {
  const struct ov_case *k = &cases[ci];
  const size_t esz = tecore_dtype_size(k->dt), dsz = tecore_dtype_size(k->ddt);
  const size_t blk = k->rows * k->n * dsz, cnt = k->rows * k->n;
  void *ha = host_make((size_t)n * k->rows * k->k, k->dt, rank, salt_of(ci, it, 0));
  void *hb = host_make(k->n * k->k, k->dt, rank, salt_of(ci, it, 1));
  void *hbias = bias_make(k, rank, ci, it);
  const tecore_devptr_t bias = bias_put(hbias, k, s);
  m->a = dev_put(ha, (size_t)n * k->rows * k->k * esz, s);
  m->b = dev_put(hb, k->n * k->k * esz, s);
  RK_CORE(tecore_memset_d8_async(m->partials, 0xff, (size_t)n * blk, s));
  /* delayed scaling max-accumulates the amax: each call's from 0 */
  if (m->sc) RK_CORE(tecore_memset_d8_async(m->sc + 8, 0, 4, s));
  if (m->d) RK_CORE(tecore_memset_d8_async(m->d, 0xff, blk, s));
  const size_t shape8[2] = {k->rows, k->n};
  struct tecore_tensor t8;
  RK_CORE(tecore_tensor_init(&t8, TECORE_DTYPE_E4M3, 2, shape8, m->q));
  t8.scaling = TECORE_SCALING_DELAYED;
  t8.scale = m->sc;
  t8.scale_inv = m->sc + 4;
  t8.amax = m->sc + 8;
  struct tecomm_rs_add_rmsnorm nm = {.residual_in = m->res, .residual_out = m->res_out,
                                     .gamma = m->gamma, .eps = 1e-5f, .out = m->out,
                                     .fp8_out = m->q ? &t8 : NULL, .rsigma = m->rsig};
  struct tecomm_gemm_rs_args g = {.a = m->a, .b = m->b, .d = m->d, .partials = m->partials,
                                  .rows = k->rows, .n = k->n, .k = k->k, .dtype = k->dt,
                                  .d_dtype = k->ddt, .norm = k->norm ? &nm : NULL,
                                  .a_scale_inv = m->si, .b_scale_inv = m->si ? m->si + 4 : 0,
                                  .bias = bias};
  RK_OK(tecomm_gemm_rs(c, &g, s));
  RK_CORE(tecore_stream_synchronize(s));
  RK_OK(tecomm_comm_status(c, NULL));
  double *ref = malloc(cnt * sizeof *ref), *tol = malloc(cnt * sizeof *tol);
  RK_ASSERT(ref && tol, "malloc");
  rs_ref(rank, n, k, ci, it, ref, tol);
  if (!k->norm) {
    void *hd = dev_get(m->d, blk, s);
    rs_check_plain(hd, ref, tol, k, ci, it);
    free(hd);
  } else {
    void *ro = dev_get(m->res_out, blk, s), *out = dev_get(m->out, blk, s);
    float *rsig = dev_get(m->rsig, k->rows * 4, s);
    rs_check_norm(ro, out, rsig, m->hres, m->hgamma, ref, tol, k, ci);
    if (m->q) rs_check_fp8(m, ro, rsig, k, s);
    free(ro);
    free(out);
    free(rsig);
    /* the next call's residual_in is what this one read */
    RK_CORE(tecore_memcpy_async(m->res, te_hptr(m->hres), blk, s));
    RK_CORE(tecore_stream_synchronize(s));
  }
  free(ref);
  free(tol);
  free(ha);
  free(hb);
  free(hbias);
  if (bias) RK_CORE(tecore_mem_free(bias));
  RK_CORE(tecore_mem_free(m->a));
  RK_CORE(tecore_mem_free(m->b));
}

static void rs_case(tecomm_comm_t c, tecore_stream_t s, int rank, int n, int ci) {
  const struct ov_case *k = &cases[ci];
  /* an all-gather layout (gemm_rs takes b as [n][k]), or a gradient's
   * codes (gemm_rs multiplies E4M3 or 16-bit rows) */
  if (k->b_kn || k->dt == TECORE_DTYPE_E5M2) return;
  const size_t blk = k->rows * k->n * tecore_dtype_size(k->ddt);
  struct rs_bufs m;
  memset(&m, 0, sizeof m);
  RK_OK(tecomm_mem_alloc(c, (size_t)n * blk, &m.partials));
  m.si = scales_put(k, s);
  if (k->norm) rs_norm_bufs(&m, k, rank, ci, s);
  else RK_CORE(tecore_mem_alloc(blk, &m.d));
  for (int it = 0; it < 2; it++) rs_call(c, s, rank, n, ci, it, &m);
  if (k->norm) rs_norm_free(&m);
  else RK_CORE(tecore_mem_free(m.d));
  RK_OK(tecomm_mem_free(c, m.partials));
  if (m.si) RK_CORE(tecore_mem_free(m.si));
}

START_TEST(gemm_rs_matches_float64) {
  static const struct case_run run = {rs_case, (int)NCASES};
  tc_run_ranks(_i + 1, rank_cases, (void *)&run, 120);
  tc_shm_release();
}
END_TEST

/* ---- argument errors ------------------------------------------------------------------ */

struct err_bufs {
  tecore_devptr_t sym, plain;
  size_t bytes;
  int rank;
};

static void ag_errors(tecomm_comm_t c, const struct err_bufs *e, tecore_stream_t s) {
  const struct tecomm_ag_gemm_args ok = {.a = e->sym, .a_all = e->plain, .b = e->plain + 4096,
                                    .d = e->plain + 8192, .rows = 3, .n = 8, .k = 16,
                                    .dtype = TECORE_DTYPE_BF16, .d_dtype = TECORE_DTYPE_BF16};
  struct tecomm_ag_gemm_args g = ok;
  RK_EXPECT(TECOMM_ERR_INVALID, "args is NULL", tecomm_ag_gemm(c, NULL, s));
  g.rows = 0;
  RK_EXPECT(TECOMM_ERR_INVALID, "rows, n and k", tecomm_ag_gemm(c, &g, s));
  g = ok;
  g.dtype = TECORE_DTYPE_F32;
  g.d_dtype = TECORE_DTYPE_F32;
  RK_EXPECT(TECOMM_ERR_INVALID, "args->dtype", tecomm_ag_gemm(c, &g, s));
  g = ok;
  g.d_dtype = TECORE_DTYPE_E4M3;
  RK_EXPECT(TECOMM_ERR_INVALID, "args->d_dtype", tecomm_ag_gemm(c, &g, s));
  g = ok;
  g.a = e->plain + 12288;
  RK_EXPECT(TECOMM_ERR_INVALID, "a is not this rank's symmetric", tecomm_ag_gemm(c, &g, s));
  g = ok; /* a peer's copy of a symmetric buffer is not this rank's */
  RK_OK(tecomm_mem_peer_ptr(c, e->sym, 1 - e->rank, &g.a));
  RK_EXPECT(TECOMM_ERR_INVALID, "a is not this rank's symmetric", tecomm_ag_gemm(c, &g, s));
  g = ok;
  g.d = 0;
  RK_EXPECT(TECOMM_ERR_INVALID, "args->d is 0", tecomm_ag_gemm(c, &g, s));
  g = ok;
  g.d = e->plain + 2;
  RK_EXPECT(TECOMM_ERR_INVALID, "overlaps", tecomm_ag_gemm(c, &g, s));
  g = ok;
  g.a = e->sym + e->bytes - 64; /* 3 x 16 BF16 = 96 bytes: past the allocation */
  RK_EXPECT(TECOMM_ERR_INVALID, "run past", tecomm_ag_gemm(c, &g, s));
  g = ok; /* the bias: d's dtype, aligned, apart from d */
  g.bias = e->plain + 28672;
  g.d_dtype = TECORE_DTYPE_F32;
  RK_EXPECT(TECOMM_ERR_INVALID, "args->bias is set with args->d_dtype f32",
            tecomm_ag_gemm(c, &g, s));
  g.d_dtype = TECORE_DTYPE_BF16;
  g.bias = e->plain + 28673;
  RK_EXPECT(TECOMM_ERR_INVALID, "args->bias (0x", tecomm_ag_gemm(c, &g, s));
  g.bias = ok.d + 16;
  RK_EXPECT(TECOMM_ERR_INVALID, "args->bias overlaps", tecomm_ag_gemm(c, &g, s));
  g.bias = ok.a_all;
  RK_EXPECT(TECOMM_ERR_INVALID, "args->bias overlaps", tecomm_ag_gemm(c, &g, s));
  g = ok; /* gelu_aux: d's dtype, n a multiple of 8, apart from the rest */
  g.gelu_aux = e->plain + 16384;
  g.d_dtype = TECORE_DTYPE_F32;
  RK_EXPECT(TECOMM_ERR_INVALID, "args->gelu_aux is set with args->d_dtype f32",
            tecomm_ag_gemm(c, &g, s));
  g.d_dtype = TECORE_DTYPE_BF16;
  g.n = 12;
  RK_EXPECT(TECOMM_ERR_INVALID, "n a multiple of 8", tecomm_ag_gemm(c, &g, s));
  g.n = 8;
  g.gelu_aux = ok.d + 2;
  RK_EXPECT(TECOMM_ERR_INVALID, "args->gelu_aux overlaps", tecomm_ag_gemm(c, &g, s));
  /* a8: E4M3 of delayed scaling, rowwise, its words set, apart from the
   * rest; the gathered rows 16-bit */
  const size_t sh8[2] = {(size_t)2 * 3, 16};
  struct tecore_tensor t8, ok8;
  RK_CORE(tecore_tensor_init(&ok8, TECORE_DTYPE_E4M3, 2, sh8, e->plain + 20480));
  ok8.scaling = TECORE_SCALING_DELAYED;
  ok8.scale = e->plain + 24576, ok8.scale_inv = e->plain + 24580, ok8.amax = e->plain + 24584;
  g = ok;
  g.b_scale_inv = e->plain + 24588;
  g.a8 = &t8;
  t8 = ok8;
  t8.scaling = TECORE_SCALING_NONE;
  RK_EXPECT(TECOMM_ERR_INVALID, "not E4M3 or E5M2 with delayed scaling", tecomm_ag_gemm(c, &g, s));
  t8 = ok8;
  t8.shape[0] = 5;
  RK_EXPECT(TECOMM_ERR_INVALID, "not nranks x rows x k", tecomm_ag_gemm(c, &g, s));
  t8 = ok8;
  t8.columnwise_data = e->plain + 22528;
  RK_EXPECT(TECOMM_ERR_INVALID, "rowwise only", tecomm_ag_gemm(c, &g, s));
  t8 = ok8;
  t8.scale = 0;
  RK_EXPECT(TECOMM_ERR_INVALID, "scale and scale_inv must be set", tecomm_ag_gemm(c, &g, s));
  t8 = ok8;
  t8.data = ok.d;
  RK_EXPECT(TECOMM_ERR_INVALID, "a8's codes overlap", tecomm_ag_gemm(c, &g, s));
  t8 = ok8;
  t8.amax = ok.d + 4;
  RK_EXPECT(TECOMM_ERR_INVALID, "lies in a buffer of the call", tecomm_ag_gemm(c, &g, s));
  t8 = ok8;
  g.b_scale_inv = 0;
  RK_EXPECT(TECOMM_ERR_INVALID, "b_scale_inv must be set", tecomm_ag_gemm(c, &g, s));
  g.b_scale_inv = e->plain + 24588;
  g.dtype = TECORE_DTYPE_E4M3;
  RK_EXPECT(TECOMM_ERR_INVALID, "args->a8 is set with args->dtype e4m3",
            tecomm_ag_gemm(c, &g, s));
  g.dtype = TECORE_DTYPE_BF16; /* B_KN: 16-bit operands only */
  g.flags = TECOMM_AG_GEMM_B_KN;
  RK_EXPECT(TECOMM_ERR_INVALID, "args->a8 with TECOMM_AG_GEMM_B_KN", tecomm_ag_gemm(c, &g, s));
  g.a8 = NULL;
  g.dtype = TECORE_DTYPE_E4M3;
  RK_EXPECT(TECOMM_ERR_INVALID, "TECOMM_AG_GEMM_B_KN with E4M3", tecomm_ag_gemm(c, &g, s));
  g.dtype = TECORE_DTYPE_E5M2; /* a gradient's codes: as E4M3 rows, no B_KN */
  RK_EXPECT(TECOMM_ERR_INVALID, "TECOMM_AG_GEMM_B_KN with E4M3", tecomm_ag_gemm(c, &g, s));
  g.flags = 0;
  g.a8 = &t8;
  RK_EXPECT(TECOMM_ERR_INVALID, "args->a8 is set with args->dtype e5m2",
            tecomm_ag_gemm(c, &g, s));
  g.a8 = NULL;
  g.a_scale_inv = 0;
  RK_EXPECT(TECOMM_ERR_INVALID, "a_scale_inv and b_scale_inv must be set",
            tecomm_ag_gemm(c, &g, s));
  /* TECOMM_AG_GEMM_DGELU: gelu_aux read; 16-bit operands, d of their
   * dtype, no bias, no a8 */
  g = ok;
  g.flags = TECOMM_AG_GEMM_DGELU;
  RK_EXPECT(TECOMM_ERR_INVALID, "TECOMM_AG_GEMM_DGELU wants gelu_aux set", tecomm_ag_gemm(c, &g, s));
  g.gelu_aux = e->plain + 16384;
  g.bias = e->plain + 28672;
  RK_EXPECT(TECOMM_ERR_INVALID, "no bias", tecomm_ag_gemm(c, &g, s));
  g.bias = 0;
  g.a8 = &ok8;
  RK_EXPECT(TECOMM_ERR_INVALID, "a8 set", tecomm_ag_gemm(c, &g, s));
  g.a8 = NULL;
  g.d_dtype = TECORE_DTYPE_F32;
  RK_EXPECT(TECOMM_ERR_INVALID, "d_dtype f32", tecomm_ag_gemm(c, &g, s));
  g.d_dtype = TECORE_DTYPE_BF16;
  g.dtype = TECORE_DTYPE_E4M3;
  g.a_scale_inv = g.b_scale_inv = e->plain + 24588;
  RK_EXPECT(TECOMM_ERR_INVALID, "dtype e4m3", tecomm_ag_gemm(c, &g, s));
  g = ok;
  g.flags = TECOMM_AG_GEMM_DGELU;
  g.gelu_aux = ok.d + 2;
  RK_EXPECT(TECOMM_ERR_INVALID, "args->gelu_aux overlaps", tecomm_ag_gemm(c, &g, s));
  g = ok;
  g.flags = 0x6;
  RK_EXPECT(TECOMM_ERR_INVALID, "args->flags 0x6 has unknown bits", tecomm_ag_gemm(c, &g, s));
}

static void rs_errors(tecomm_comm_t c, const struct err_bufs *e, tecore_stream_t s) {
  const struct tecomm_gemm_rs_args ok = {.a = e->plain, .b = e->plain + 4096, .d = e->plain + 8192,
                                    .partials = e->sym, .rows = 3, .n = 8, .k = 16,
                                    .dtype = TECORE_DTYPE_BF16, .d_dtype = TECORE_DTYPE_F32};
  struct tecomm_gemm_rs_args g = ok;
  RK_EXPECT(TECOMM_ERR_INVALID, "args is NULL", tecomm_gemm_rs(c, NULL, s));
  g.k = 0;
  RK_EXPECT(TECOMM_ERR_INVALID, "rows, n and k", tecomm_gemm_rs(c, &g, s));
  g = ok;
  g.partials = e->plain + 12288;
  RK_EXPECT(TECOMM_ERR_INVALID, "partials is not this rank's symmetric",
            tecomm_gemm_rs(c, &g, s));
  g = ok;
  g.d = e->sym;
  RK_EXPECT(TECOMM_ERR_INVALID, "overlaps", tecomm_gemm_rs(c, &g, s));
  g = ok;
  const struct tecomm_rs_add_rmsnorm nm = {.residual_in = e->plain + 16384,
                                           .residual_out = e->plain + 16384,
                                           .gamma = e->plain + 20480, .eps = 1e-5f,
                                           .out = e->plain + 24576};
  g.norm = &nm;
  RK_EXPECT(TECOMM_ERR_INVALID, "must be 0", tecomm_gemm_rs(c, &g, s));
  g.d = 0;
  struct tecomm_rs_add_rmsnorm no_gamma = nm;
  no_gamma.gamma = 0;
  g.norm = &no_gamma;
  RK_EXPECT(TECOMM_ERR_INVALID, "norm->gamma is 0", tecomm_gemm_rs(c, &g, s));
  g = ok; /* E4M3: the scales and the FP8 GEMM's rules, before anything runs */
  g.dtype = TECORE_DTYPE_E4M3;
  RK_EXPECT(TECOMM_ERR_INVALID, "a_scale_inv and b_scale_inv", tecomm_gemm_rs(c, &g, s));
  g.a_scale_inv = g.b_scale_inv = e->plain + 28672;
  g.k = 8;
  RK_EXPECT(TECOMM_ERR_INVALID, "k 8 is not a multiple of 16", tecomm_gemm_rs(c, &g, s));
  g.k = 16;
  g.a = e->plain + 4; /* E4M3 operands 16-byte aligned */
  RK_EXPECT(TECOMM_ERR_INVALID, "args->a (0x", tecomm_gemm_rs(c, &g, s));
  g = ok; /* the bias: d's dtype (not F32), apart from the partials and d */
  g.bias = e->plain + 28672;
  RK_EXPECT(TECOMM_ERR_INVALID, "args->bias is set with args->d_dtype f32",
            tecomm_gemm_rs(c, &g, s));
  g.d_dtype = TECORE_DTYPE_BF16;
  g.bias = e->sym;
  RK_EXPECT(TECOMM_ERR_INVALID, "args->bias overlaps", tecomm_gemm_rs(c, &g, s));
  g.bias = ok.d;
  RK_EXPECT(TECOMM_ERR_INVALID, "args->bias overlaps", tecomm_gemm_rs(c, &g, s));
}

static void rank_args(int rank, int n, void *arg) {
  (void)arg;
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  struct err_bufs e = {.bytes = 4096, .rank = rank};
  RK_OK(tecomm_mem_alloc(c, e.bytes, &e.sym));
  RK_CORE(tecore_mem_alloc(1 << 15, &e.plain));
  ag_errors(c, &e, s);
  rs_errors(c, &e, s);
  RK_OK(tecomm_comm_status(c, NULL)); /* refused calls leave the communicator healthy */
  RK_OK(tecomm_mem_free(c, e.sym));
  RK_CORE(tecore_mem_free(e.plain));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(argument_errors_named) {
  tc_run_ranks(2, rank_args, NULL, 60);
  tc_shm_release();
}
END_TEST

/* ---- a killed rank --------------------------------------------------------------------- */

struct killed_bufs {
  tecore_devptr_t sym, plain;
};

static tecomm_result_t killed_call(tecomm_comm_t c, int rs, const struct killed_bufs *k, int n,
                                   tecore_stream_t s) {
  if (rs) {
    struct tecomm_gemm_rs_args g = {.a = k->plain, .b = k->plain + 8192, .d = k->plain + 16384,
                               .partials = k->sym, .rows = 4, .n = 16, .k = 32,
                               .dtype = TECORE_DTYPE_BF16, .d_dtype = TECORE_DTYPE_BF16};
    return tecomm_gemm_rs(c, &g, s);
  }
  (void)n;
  struct tecomm_ag_gemm_args g = {.a = k->sym, .a_all = k->plain, .b = k->plain + 8192,
                             .d = k->plain + 16384, .rows = 4, .n = 16, .k = 32,
                             .dtype = TECORE_DTYPE_BF16, .d_dtype = TECORE_DTYPE_BF16};
  return tecomm_ag_gemm(c, &g, s);
}

/* arg: bit 0 gemm_rs (else ag_gemm); bit 1 the victim dies inside the
 * call: it queues it, waits 100 ms at its first barrier (the peers come
 * 300 ms late, so its arrival is announced and nothing after it), then
 * SIGKILL; else it dies between two calls. */
static void rank_killed(int rank, int n, void *arg) {
  const int rs = *(const int *)arg & 1, mid = *(const int *)arg & 2;
  setenv("TECOMM_TIMEOUT", "1000", 1);
  pulls_env(rank);
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  struct killed_bufs k;
  RK_OK(tecomm_mem_alloc(c, 8192, &k.sym));
  RK_CORE(tecore_mem_alloc(1 << 16, &k.plain));
  RK_CORE(tecore_memset_d8_async(k.plain, 0x3c, 1 << 16, s));
  RK_CORE(tecore_memset_d8_async(k.sym, 0x3c, 8192, s));
  RK_OK(killed_call(c, rs, &k, n, s));
  RK_CORE(tecore_stream_synchronize(s));
  RK_ASSERT(tc_shm_barrier(tc_shm) == 0, "barrier");
  if (rank == n - 1 && mid) {   /* inside the call: queued, at its first barrier */
    (void)killed_call(c, rs, &k, n, s);
    usleep(100 * 1000);
    raise(SIGKILL);
  }
  if (rank == n - 1) raise(SIGKILL); /* between calls: the peers wait in the next one */
  if (mid) usleep(300 * 1000);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  RK_OK(killed_call(c, rs, &k, n, s));
  RK_ASSERT(te_stream_wait(s, 5000) == TECORE_SUCCESS, "the stream did not come back in 5 s");
  int peer = -2;
  tecomm_result_t st = tecomm_comm_status(c, &peer);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  RK_ASSERT(st == TECOMM_ERR_TIMEOUT, "status after a peer died: %s (%s)", tecomm_result_name(st),
            tecomm_last_error());
  RK_ASSERT(peer == n - 1, "status names peer %d, not %d", peer, n - 1);
  RK_ASSERT(secs <= 2.0, "TIMEOUT after %.2f s, want <= TECOMM_TIMEOUT + 1 s = 2 s", secs);
  RK_EXPECT(TECOMM_ERR_TIMEOUT, "rank 2", killed_call(c, rs, &k, n, s)); /* sticky */
  RK_CORE(tecore_mem_free(k.plain));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(killed_rank_times_out) {
  int how = _i;   /* rank_killed's bits */
  tc_run_ranks_ex(3, rank_killed, &how, 30, 2);
  tc_shm_release();
}
END_TEST

/* ---- graph capture --------------------------------------------------------------------- */

struct graph_bufs {
  tecore_devptr_t ag_a, ag_all, ag_b, ag_d; /* all-gather + GEMM */
  tecore_devptr_t rs_a, rs_b, rs_d, part;   /* GEMM + reduce-scatter */
};

/* Call it's inputs (case 0's shape) into the buffers. */
static void graph_inputs(const struct graph_bufs *g, int rank, int n, int it, tecore_stream_t s) {
  const struct ov_case *k = &cases[0];
  const size_t esz = tecore_dtype_size(k->dt);
  void *h[4] = {host_make(k->rows * k->k, k->dt, rank, salt_of(0, it, 0)),
                host_make(k->n * k->k, k->dt, rank, salt_of(0, it, 1)),
                host_make((size_t)n * k->rows * k->k, k->dt, rank, salt_of(0, it, 0)),
                host_make(k->n * k->k, k->dt, rank, salt_of(0, it, 1))};
  const tecore_devptr_t to[4] = {g->ag_a, g->ag_b, g->rs_a, g->rs_b};
  const size_t bytes[4] = {k->rows * k->k * esz, k->n * k->k * esz,
                           (size_t)n * k->rows * k->k * esz, k->n * k->k * esz};
  for (int i = 0; i < 4; i++) RK_CORE(tecore_memcpy_async(to[i], te_hptr(h[i]), bytes[i], s));
  RK_CORE(tecore_memset_d8_async(g->ag_d, 0xff, (size_t)n * k->rows * k->n * 2, s));
  RK_CORE(tecore_memset_d8_async(g->rs_d, 0xff, k->rows * k->n * 2, s));
  RK_CORE(tecore_stream_synchronize(s));
  for (int i = 0; i < 4; i++) free(h[i]);
}

static void graph_calls(tecomm_comm_t c, const struct graph_bufs *g, tecore_stream_t s) {
  const struct ov_case *k = &cases[0];
  const struct tecomm_ag_gemm_args ag = {.a = g->ag_a, .a_all = g->ag_all, .b = g->ag_b,
                                         .d = g->ag_d, .rows = k->rows, .n = k->n, .k = k->k,
                                         .dtype = k->dt, .d_dtype = k->ddt};
  const struct tecomm_gemm_rs_args rs = {.a = g->rs_a, .b = g->rs_b, .d = g->rs_d,
                                         .partials = g->part, .rows = k->rows, .n = k->n,
                                         .k = k->k, .dtype = k->dt, .d_dtype = k->ddt};
  RK_OK(tecomm_ag_gemm(c, &ag, s));
  RK_OK(tecomm_gemm_rs(c, &rs, s));
}

static void graph_check(const struct graph_bufs *g, int rank, int n, int it, tecore_stream_t s) {
  const struct ov_case *k = &cases[0];
  const size_t cnt = k->rows * k->n;
  unsigned char *all = dev_get(g->ag_all, (size_t)n * k->rows * k->k * 2, s);
  void *d = dev_get(g->ag_d, (size_t)n * cnt * 2, s), *rd = dev_get(g->rs_d, cnt * 2, s);
  void *hb = host_make(k->n * k->k, k->dt, rank, salt_of(0, it, 1));
  ag_check_all(all, n, k, 0, it);
  ag_check_d(d, NULL, all, hb, NULL, n, k, 0, it);
  double *ref = malloc(cnt * sizeof *ref), *tol = malloc(cnt * sizeof *tol);
  RK_ASSERT(ref && tol, "malloc");
  rs_ref(rank, n, k, 0, it, ref, tol);
  rs_check_plain(rd, ref, tol, k, 0, it);
  free(ref);
  free(tol);
  free(all);
  free(d);
  free(rd);
  free(hb);
}

/* One eager call of each (which makes the side stream and staging), then
 * both captured in one graph and replayed twice on fresh inputs. */
static void rank_graph(int rank, int n, void *arg) {
  (void)arg;
  pulls_env(rank);   /* the further pull streams join the capture */
  const struct ov_case *k = &cases[0];
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  struct graph_bufs g;
  const size_t chunk = k->rows * k->k * 2, blk = k->rows * k->n * 2;
  RK_OK(tecomm_mem_alloc(c, chunk, &g.ag_a));
  RK_OK(tecomm_mem_alloc(c, (size_t)n * blk, &g.part));
  RK_CORE(tecore_mem_alloc((size_t)n * chunk, &g.ag_all));
  RK_CORE(tecore_mem_alloc(k->n * k->k * 2, &g.ag_b));
  RK_CORE(tecore_mem_alloc((size_t)n * blk, &g.ag_d));
  RK_CORE(tecore_mem_alloc((size_t)n * chunk, &g.rs_a));
  RK_CORE(tecore_mem_alloc(k->n * k->k * 2, &g.rs_b));
  RK_CORE(tecore_mem_alloc(blk, &g.rs_d));
  tecore_graph_exec_t exec = NULL;
  for (int it = 0; it < 3; it++) {
    graph_inputs(&g, rank, n, it, s);
    if (it == 0) {
      graph_calls(c, &g, s);
      tecore_graph_t gr;
      RK_CORE(tecore_stream_synchronize(s));
      graph_check(&g, rank, n, it, s);
      RK_CORE(tecore_stream_begin_capture(s, TECORE_CAPTURE_THREAD_LOCAL));
      graph_calls(c, &g, s);
      RK_CORE(tecore_stream_end_capture(s, &gr));
      RK_CORE(tecore_graph_instantiate(&exec, gr));
      RK_CORE(tecore_graph_destroy(gr));
      continue;
    }
    RK_CORE(tecore_graph_launch(exec, s));
    RK_CORE(tecore_stream_synchronize(s));
    RK_OK(tecomm_comm_status(c, NULL));
    graph_check(&g, rank, n, it, s);
  }
  RK_CORE(tecore_graph_exec_destroy(exec));
  const tecore_devptr_t plain[] = {g.ag_all, g.ag_b, g.ag_d, g.rs_a, g.rs_b, g.rs_d};
  for (int i = 0; i < 6; i++) RK_CORE(tecore_mem_free(plain[i]));
  RK_OK(tecomm_mem_free(c, g.ag_a));
  RK_OK(tecomm_mem_free(c, g.part));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(graph_replays_new_inputs) {
  tc_run_ranks(_i + 2, rank_graph, NULL, 120);
  tc_shm_release();
}
END_TEST

/* ---- ranks that differ ----------------------------------------------------------------- */

/* Rank 1 passes another n: every rank's status is TECOMM_ERR_MISMATCH
 * within 2 s, and the next call is refused. */
static void rank_mismatch(int rank, int n, void *arg) {
  const int rs = *(const int *)arg;
  setenv("TECOMM_TIMEOUT", "10000", 1); /* a mismatch is found at once, not by the timeout */
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  struct killed_bufs k;
  RK_OK(tecomm_mem_alloc(c, 8192, &k.sym));
  RK_CORE(tecore_mem_alloc(1 << 16, &k.plain));
  RK_CORE(tecore_memset_d8_async(k.plain, 0x3c, 1 << 16, s));
  const size_t nn = rank == 1 ? 8 : 16;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (rs) {
    struct tecomm_gemm_rs_args g = {.a = k.plain, .b = k.plain + 8192, .d = k.plain + 16384,
                                    .partials = k.sym, .rows = 4, .n = nn, .k = 32,
                                    .dtype = TECORE_DTYPE_BF16, .d_dtype = TECORE_DTYPE_BF16};
    RK_OK(tecomm_gemm_rs(c, &g, s));
  } else {
    struct tecomm_ag_gemm_args g = {.a = k.sym, .a_all = k.plain, .b = k.plain + 8192,
                                    .d = k.plain + 16384, .rows = 4, .n = nn, .k = 32,
                                    .dtype = TECORE_DTYPE_BF16, .d_dtype = TECORE_DTYPE_BF16};
    RK_OK(tecomm_ag_gemm(c, &g, s));
  }
  RK_ASSERT(te_stream_wait(s, 5000) == TECORE_SUCCESS, "the stream did not come back in 5 s");
  tecomm_result_t st = tecomm_comm_status(c, NULL);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  RK_ASSERT(st == TECOMM_ERR_MISMATCH, "status: %s (%s)", tecomm_result_name(st),
            tecomm_last_error());
  RK_ASSERT(strstr(tecomm_last_error(), rs ? "GEMM+reduce-scatter" : "all-gather+GEMM"),
            "detail does not name the call: %s", tecomm_last_error());
  RK_ASSERT(secs <= 2.0, "MISMATCH after %.2f s, want <= 2 s", secs);
  RK_EXPECT(TECOMM_ERR_MISMATCH, "differs", tecomm_comm_status(c, NULL)); /* sticky */
  RK_CORE(tecore_mem_free(k.plain));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(mismatched_shapes_fail_every_rank) {
  int rs = _i;
  tc_run_ranks(2, rank_mismatch, &rs, 30);
  tc_shm_release();
}
END_TEST

/* Rank 1 passes another symmetric allocation as partials than rank 0:
 * the peers only read, so the allocation each rank left out keeps its
 * pattern on every rank (nothing is written over), whatever the call
 * computes. */
static void rank_other_partials(int rank, int n, void *arg) {
  (void)arg;
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  const size_t bytes = (size_t)n * 4 * 16 * 2;
  tecore_devptr_t p[2], plain;
  for (int i = 0; i < 2; i++) {
    RK_OK(tecomm_mem_alloc(c, bytes, &p[i]));
    RK_CORE(tecore_memset_d8_async(p[i], 0x5a, bytes, s));
  }
  RK_CORE(tecore_mem_alloc(1 << 16, &plain));
  RK_CORE(tecore_memset_d8_async(plain, 0x3c, 1 << 16, s));
  RK_CORE(tecore_stream_synchronize(s));
  RK_ASSERT(tc_shm_barrier(tc_shm) == 0, "barrier");
  struct tecomm_gemm_rs_args g = {.a = plain, .b = plain + 8192, .d = plain + 16384,
                                  .partials = p[rank % 2], .rows = 4, .n = 16, .k = 32,
                                  .dtype = TECORE_DTYPE_BF16, .d_dtype = TECORE_DTYPE_BF16};
  RK_OK(tecomm_gemm_rs(c, &g, s));
  RK_CORE(tecore_stream_synchronize(s));
  RK_ASSERT(tc_shm_barrier(tc_shm) == 0, "barrier");
  unsigned char *h = dev_get(p[1 - rank % 2], bytes, s);
  for (size_t i = 0; i < bytes; i++)
    RK_ASSERT(h[i] == 0x5a, "byte %zu of the partials this rank did not pass was written (0x%02x)",
              i, h[i]);
  free(h);
  for (int i = 0; i < 2; i++) RK_OK(tecomm_mem_free(c, p[i]));
  RK_CORE(tecore_mem_free(plain));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(other_partials_never_written) {
  tc_run_ranks(2, rank_other_partials, NULL, 30);
  tc_shm_release();
}
END_TEST

/* Rank 0's call waits for rank 1, which never makes it: rank 0's abort
 * ends the side stream's wait, the stream comes back, and the call's
 * error is TECOMM_ERR_ABORTED, then and after. */
static void rank_abort(int rank, int n, void *arg) {
  const int rs = *(const int *)arg;
  setenv("TECOMM_TIMEOUT", "30000", 1); /* the abort ends it, not the timeout */
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  struct killed_bufs k;
  RK_OK(tecomm_mem_alloc(c, 8192, &k.sym));
  RK_CORE(tecore_mem_alloc(1 << 16, &k.plain));
  RK_CORE(tecore_memset_d8_async(k.plain, 0x3c, 1 << 16, s));
  RK_OK(killed_call(c, rs, &k, n, s)); /* together first: the side stream and scratch exist */
  RK_CORE(tecore_stream_synchronize(s));
  RK_ASSERT(tc_shm_barrier(tc_shm) == 0, "barrier");
  if (rank == 0) {
    RK_OK(killed_call(c, rs, &k, n, s));
    usleep(300000);
    RK_OK(tecomm_comm_abort(c));
    RK_ASSERT(te_stream_wait(s, 3000) == TECORE_SUCCESS,
              "the stream did not come back within 3 s of the abort");
    RK_EXPECT(TECOMM_ERR_ABORTED, "aborted", tecomm_comm_status(c, NULL));
    RK_EXPECT(TECOMM_ERR_ABORTED, "aborted", killed_call(c, rs, &k, n, s));
  }
  RK_ASSERT(tc_shm_barrier(tc_shm) == 0, "barrier");
  if (rank != 0) RK_OK(tecomm_comm_abort(c)); /* its peer is gone from the protocol */
  RK_CORE(tecore_mem_free(k.plain));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(abort_ends_a_waiting_call) {
  int rs = _i;
  tc_run_ranks(2, rank_abort, &rs, 60);
  tc_shm_release();
}
END_TEST

/* ---- other levels ------------------------------------------------------------------------ */

/* Without a pool (rank 1's refused: the registered in-place level) both
 * calls run on symmetric segments and match float64; without the IPC
 * workspaces (TECOMM_TEST_FAIL=ipc: the NCCL level) they are refused
 * with TECOMM_ERR_NOT_SUPPORTED saying why, and the communicator stays
 * healthy. */
static void rank_levels(int rank, int n, void *arg) {
  const int no_ipc = *(const int *)arg;
  if (no_ipc) setenv("TECOMM_TEST_FAIL", "ipc:1", 1);
  else if (rank == 1) setenv("TECOMM_POOL_MB", "16777216", 1); /* 16 TiB: refused */
  tecomm_comm_t c = tc_rank_comm(rank, n);
  char d[4096];
  RK_OK(tecomm_comm_describe(c, 0, d, sizeof d));
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  if (!no_ipc) {
    RK_ASSERT(strstr(d, "level: registered in-place"), "not at the in-place level:\n%s", d);
    ag_case(c, s, rank, n, 0);
    rs_case(c, s, rank, n, 0);
  } else {
    RK_ASSERT(!strstr(d, "level: pool") && !strstr(d, "level: registered in-place"),
              "still at an IPC level:\n%s", d);
    tecore_devptr_t plain;
    RK_CORE(tecore_mem_alloc(1 << 16, &plain));
    struct tecomm_ag_gemm_args ag = {.a = plain, .a_all = plain + 4096, .b = plain + 8192,
                                     .d = plain + 16384, .rows = 4, .n = 16, .k = 32,
                                     .dtype = TECORE_DTYPE_BF16, .d_dtype = TECORE_DTYPE_BF16};
    struct tecomm_gemm_rs_args rs = {.a = plain, .b = plain + 8192, .d = plain + 16384,
                                     .partials = plain + 24576, .rows = 4, .n = 16, .k = 32,
                                     .dtype = TECORE_DTYPE_BF16, .d_dtype = TECORE_DTYPE_BF16};
    RK_EXPECT(TECOMM_ERR_NOT_SUPPORTED, "IPC mappings", tecomm_ag_gemm(c, &ag, s));
    RK_EXPECT(TECOMM_ERR_NOT_SUPPORTED, "IPC mappings", tecomm_gemm_rs(c, &rs, s));
    RK_CORE(tecore_mem_free(plain));
  }
  RK_OK(tecomm_comm_status(c, NULL));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(levels_without_pool_or_ipc) {
  int no_ipc = _i;
  tc_run_ranks(2, rank_levels, &no_ipc, 110);
  tc_shm_release();
}
END_TEST

static Suite *overlap_suite(void) {
  setenv("TECORE_VDEV_DEVICES", "8", 0);
  Suite *s = suite_create("comm_overlap");
  TCase *tc = te_tcase(s, "products", 0);
  tcase_add_loop_test(tc, ag_gemm_matches_float64, 0, 4);
  tcase_add_loop_test(tc, ag_gemm_a8_quantizes_on_arrival, 0, 4);
  tcase_add_loop_test(tc, gemm_rs_matches_float64, 0, 4);
  tcase_add_loop_test(tc, levels_without_pool_or_ipc, 0, 2);
  tc = te_tcase(s, "errors", 0);
  tcase_add_test(tc, argument_errors_named);
  tc = te_tcase(s, "agreement", 0);
  tcase_add_loop_test(tc, mismatched_shapes_fail_every_rank, 0, 2);
  tcase_add_test(tc, other_partials_never_written);
  tc = te_tcase(s, "graph", 0);
  tcase_add_loop_test(tc, graph_replays_new_inputs, 0, 2);
  tc = te_tcase(s, "timeout", 0);
  tcase_add_loop_test(tc, killed_rank_times_out, 0, 4);
  tcase_add_loop_test(tc, abort_ends_a_waiting_call, 0, 2);
  return s;
}

TE_TEST_MAIN(overlap_suite, TE_TEST_DEVICE)
