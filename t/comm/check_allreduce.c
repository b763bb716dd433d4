/* SPDX-License-Identifier: Apache-2.0 */
/* check_allreduce.c -- tecomm_allreduce and its fused form through the
 * communicator, ranks as forked processes (t/lib/comm_ranks.h), 2, 3, 4 and 8
 * ranks:
 *   - every algorithm (one-shot, two-shot, Lamport, the copy-engine
 *     one-shot, the table) x F32, BF16,
 *     F16 x SUM, MAX x counts of 1, odd counts, sizes that are not a
 *     multiple of 16 bytes, with inputs that are plain device memory or
 *     symmetric memory, in place or not, against a float64 reference
 *     (SUM: the error model of sum_tol, which differs for NCCL; MAX:
 *     exact), the same bits on every rank; 64 MB on 2 ranks;
 *   - the fused residual add + RMSNorm (+ FP8 delayed and current) against
 *     libtecore's unfused kernels run on an allreduce of the same order
 *     (bit for bit: residual_out, out and rsigma) and residual_out and
 *     rsigma against float64; with the odd ranks' x, residuals and out not
 *     16-byte aligned, the same bits as the unfused kernels on aligned
 *     buffers on every rank (one row plan everywhere)
 *     (1 rank: the composite path NCCL uses; NCCL itself where it is, on
 *     cuda);
 *   - inputs that are not symmetric memory past the pool: staged in
 *     segments every rank makes together (or none does, with the same
 *     error), bounded by TECOMM_STAGE_MB, not grown inside a capture;
 *   - every algorithm with send and recv aligned differently on different
 *     ranks (some 16-byte aligned, some not), against float64;
 *   - the copy-engine one-shot against two-shot bit for bit (2 and 4
 *     ranks, 4 MiB and a tail, aligned and unaligned outputs) and in a
 *     replayed graph;
 *   - 1000 graph replays with new inputs each time, every result checked;
 *   - a rank SIGKILLed mid-collective: the others get TECOMM_ERR_TIMEOUT
 *     naming it within TECOMM_TIMEOUT + 1 s, and nothing hangs.
 * MAX over F32 as the delayed-scaling recipe's amax_reduce, eager and in a
 * replayed graph: t/comm/check_fuser_ops. */
#include "comm_ranks.h"
#include <float.h>
#include "common/convert.h"
#include "common/fp8.h"

static const tecomm_algo_t algos[] = {TECOMM_ALGO_ONESHOT, TECOMM_ALGO_TWOSHOT,
                                      TECOMM_ALGO_LAMPORT, TECOMM_ALGO_CE, TECOMM_ALGO_AUTO};
enum { N_ALGOS = sizeof algos / sizeof algos[0] };
static const tecore_dtype_t dtypes[] = {TECORE_DTYPE_F32, TECORE_DTYPE_BF16, TECORE_DTYPE_F16};

/* Half an ulp of dt, relative to a value's magnitude. */
static double half_ulp(tecore_dtype_t dt) {
  return dt == TECORE_DTYPE_F32 ? 0x1p-24 : dt == TECORE_DTYPE_BF16 ? 0x1p-8 : 0x1p-11;
}

/* How far a SUM over n ranks may be from the float64 sum ref, mag the sum
 * of the inputs' magnitudes (which bounds every partial sum):
 *   - libtecomm's IPC kernels fold the ranks in float and round once to
 *     the dtype: n - 1 f32 roundings of partials, plus half an ulp of ref;
 *   - NCCL's ring and tree carry each partial sum between GPUs in the
 *     dtype, so each of the n - 1 partials is rounded to it (half an ulp
 *     of at most mag each), and the result is rounded once more: n half
 *     ulps of mag (plus the f32 roundings inside each step).
 * This is why a bf16 tolerance of half an ulp of the result held for 2
 * ranks on NCCL and not for 3 or 4. */
static double sum_tol(int n, tecore_dtype_t dt, int nccl, double mag, double ref) {
  double f32 = (n - 1) * 0x1p-24 * mag;
  if (nccl) return f32 + n * half_ulp(dt) * mag * 1.0001;
  return f32 + half_ulp(dt) * fabs(ref) * 1.0001;
}

/* The algorithm a call on comm ran (AUTO resolved as the table does). */
static tecomm_algo_t algo_used(tecomm_comm_t c, tecomm_algo_t asked, size_t count,
                               tecore_dtype_t dt, int fused) {
  tecomm_algo_t a = asked;
  if (a == TECOMM_ALGO_AUTO) RK_OK(tecomm_comm_choose(c, count, dt, fused, &a));
  return a;
}

/* Checks got (count of dt) against the float64 reduction of every rank's
 * input for salt; nccl: the call ran on NCCL (sum_tol says why it matters). */
static void check_result(const void *got, size_t count, tecore_dtype_t dt, tecomm_op_t op, int n,
                         int nccl, uint64_t salt, const char *what) {
  size_t esz = tecore_dtype_size(dt);
  unsigned char *in = malloc(count * esz);
  double *ref = malloc(count * sizeof *ref), *mag = calloc(count, sizeof *mag);
  RK_ASSERT(in && ref && mag, "malloc");
  for (int r = 0; r < n; r++) {
    tc_make_input(in, count, dt, r, salt);
    for (size_t i = 0; i < count; i++) {
      double v = tc_from_dt(in, i, dt);
      if (r == 0) ref[i] = v;
      else ref[i] = op == TECOMM_SUM ? ref[i] + v : (v > ref[i] ? v : ref[i]);
      mag[i] += fabs(v);
    }
  }
  for (size_t i = 0; i < count; i++) {
    double g = tc_from_dt(got, i, dt);
    double tol = op == TECOMM_MAX ? 0.0 : sum_tol(n, dt, nccl, mag[i], ref[i]);
    RK_ASSERT(fabs(g - ref[i]) <= tol,
              "%s: element %zu of %zu: got %.9g, want %.9g (float64), tolerance %.3g", what, i,
              count, g, ref[i], tol);
  }
  free(in);
  free(ref);
  free(mag);
}

struct ar_case {
  tecomm_algo_t algo;
  tecore_dtype_t dt;
  tecomm_op_t op;
  size_t count;
  int kind; /* 0 plain out of place, 1 plain in place, 2 symmetric out of place, 3 symmetric in place */
};

/* Half the spacing of E4M3 values at |v| (round to nearest): 3 mantissa
 * bits, normal from 2^-6, subnormal spacing 2^-9; saturating at 448. */
static double e4m3_half_ulp(double v) {
  double a = fabs(v);
  if (a < 0x1p-6) return 0x1p-10;
  int e;
  frexp(a, &e); /* a = m * 2^e, m in [0.5, 1) */
  return ldexp(1.0, e - 1 - 3) / 2;
}

/* Runs one case on this rank and checks it. */
static void run_case(tecomm_comm_t c, tecore_stream_t s, int rank, int n, const struct ar_case *k,
                     uint64_t salt) {
  size_t esz = tecore_dtype_size(k->dt), bytes = k->count * esz;
  unsigned char *h = malloc(bytes), *got = malloc(bytes);
  RK_ASSERT(h && got, "malloc");
  tc_make_input(h, k->count, k->dt, rank, salt);
  tecore_devptr_t send = 0, recv = 0;
  int sym = k->kind >= 2, inplace = k->kind & 1;
  if (sym) RK_OK(tecomm_mem_alloc(c, bytes, &send));
  else RK_CORE(tecore_mem_alloc(bytes, &send));
  if (inplace) recv = send;
  else RK_CORE(tecore_mem_alloc(bytes, &recv));
  RK_CORE(tecore_memcpy_async(send, te_hptr(h), bytes, s));
  if (!inplace) RK_CORE(tecore_memset_d8_async(recv, 0xA5, bytes, s));
  char what[200];
  snprintf(what, sizeof what, "%d ranks, %s, %s, %s, count %zu, %s%s", n, tecomm_algo_name(k->algo),
           tecore_dtype_name(k->dt), k->op == TECOMM_SUM ? "sum" : "max", k->count,
           sym ? "symmetric" : "plain", inplace ? " in place" : "");
  tecomm_result_t r = tecomm_allreduce_algo(c, send, recv, k->count, k->dt, k->op, k->algo, s);
  RK_ASSERT(r == TECOMM_SUCCESS, "%s: %s: %s", what, tecomm_result_name(r), tecomm_last_error());
  RK_CORE(tecore_memcpy_async(te_hptr(got), recv, bytes, s));
  RK_CORE(tecore_stream_synchronize(s));
  RK_OK(tecomm_comm_status(c, NULL));
  int nccl = algo_used(c, k->algo, k->count, k->dt, 0) == TECOMM_ALGO_NCCL;
  check_result(got, k->count, k->dt, k->op, n, nccl, salt, what);
  tc_rank_digest(got, bytes);
  if (sym) RK_OK(tecomm_mem_free(c, send));
  else RK_CORE(tecore_mem_free(send));
  if (!inplace) RK_CORE(tecore_mem_free(recv));
  free(h);
  free(got);
}

static void rank_matrix(int rank, int n, void *arg) {
  (void)arg;
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  static const size_t counts[] = {1, 3, 1001, 65537};
  uint64_t salt = 1;
  /* NCCL too where it is (cuda); vdev has none */
  int v, na = N_ALGOS + (tecomm_nccl_version(&v) == TECOMM_SUCCESS);
  for (int a = 0; a < na; a++)
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
      for (int op = 0; op < 2; op++)
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++, salt++) {
          tecomm_algo_t al = a < N_ALGOS ? algos[a] : TECOMM_ALGO_NCCL;
          struct ar_case cs = {al, dtypes[d], (tecomm_op_t)op, counts[k], (int)(salt % 4)};
          run_case(c, s, rank, n, &cs, salt);
        }
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(every_algo_dtype_op_size) {
  static const int ranks[] = {2, 3, 4, 8};
  int n = ranks[_i];
  tc_run_ranks(n, rank_matrix, NULL, 110);
  tc_expect_same_digest(n, "allreduce results");
  tc_shm_release();
}
END_TEST

/* 64 MB (plus an odd tail) through the staging copy, and 8 MB symmetric. */
static void rank_large(int rank, int n, void *arg) {
  (void)arg;
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  struct ar_case big = {TECOMM_ALGO_AUTO, TECORE_DTYPE_F32, TECOMM_SUM, (16u << 20) + 3, 0};
  run_case(c, s, rank, n, &big, 1001);
  struct ar_case mid = {TECOMM_ALGO_ONESHOT, TECORE_DTYPE_BF16, TECOMM_SUM, (4u << 20) + 1, 3};
  run_case(c, s, rank, n, &mid, 1002);
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(large_64mb) {
  tc_run_ranks(2, rank_large, NULL, 110);
  tc_expect_same_digest(2, "64 MB allreduce");
  tc_shm_release();
}
END_TEST

/* ---- outputs and inputs aligned differently on different ranks ---------------------
 * Nothing asks the ranks' buffers to share an alignment: rank r's recv
 * (and, for odd r, its send) sits r * 2 bytes past a 256-byte boundary, so
 * some ranks can use 16-byte vectors and others cannot.  Every algorithm
 * must still cut the call the same way on every rank. */
static void rank_mixed_align(int rank, int n, void *arg) {
  (void)arg;
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  static const size_t counts[] = {1001, 65537};
  const tecore_dtype_t dt = TECORE_DTYPE_BF16;
  uint64_t salt = 9500;
  for (int a = 0; a < N_ALGOS; a++)
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++, salt++) {
      size_t count = counts[k], bytes = count * 2;
      uint16_t *h = malloc(bytes), *got = malloc(bytes);
      RK_ASSERT(h && got, "malloc");
      tecore_devptr_t sb, rb;
      RK_CORE(tecore_mem_alloc(bytes + 64, &sb));
      RK_CORE(tecore_mem_alloc(bytes + 64, &rb));
      tecore_devptr_t send = sb + (rank & 1 ? 2u : 0u), recv = rb + 2u * (unsigned)rank;
      tc_make_input(h, count, dt, rank, salt);
      RK_CORE(tecore_memcpy_async(send, te_hptr(h), bytes, s));
      RK_CORE(tecore_memset_d8_async(recv, 0xA5, bytes, s));
      char what[160];
      snprintf(what, sizeof what, "%d ranks, %s, count %zu, send +%u, recv +%u bytes", n,
               tecomm_algo_name(algos[a]), count, rank & 1 ? 2u : 0u, 2u * (unsigned)rank);
      tecomm_result_t r = tecomm_allreduce_algo(c, send, recv, count, dt, TECOMM_SUM, algos[a], s);
      RK_ASSERT(r == TECOMM_SUCCESS, "%s: %s", what, tecomm_last_error());
      RK_CORE(tecore_memcpy_async(te_hptr(got), recv, bytes, s));
      RK_CORE(tecore_stream_synchronize(s));
      tecomm_result_t st = tecomm_comm_status(c, NULL);
      RK_ASSERT(st == TECOMM_SUCCESS, "%s: status %s: %s", what, tecomm_result_name(st),
                tecomm_last_error());
      check_result(got, count, dt, TECOMM_SUM, n, 0, salt, what);
      tc_rank_digest(got, bytes);
      RK_CORE(tecore_mem_free(sb));
      RK_CORE(tecore_mem_free(rb));
      free(h);
      free(got);
    }
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(buffers_aligned_differently_per_rank) {
  static const int ranks[] = {2, 3};
  int n = ranks[_i];
  tc_run_ranks(n, rank_mixed_align, NULL, 110);
  tc_expect_same_digest(n, "results with rank-dependent alignment");
  tc_shm_release();
}
END_TEST

/* ---- the copy-engine one-shot ------------------------------------------------------
 * The same bits as two-shot (every sum folds the ranks in rank order with
 * the same math), whatever the output's alignment; then a graph of it
 * replayed with new inputs and poisoned outputs, against float64. */
static void rank_ce(int rank, int n, void *arg) {
  (void)arg;
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  const tecore_dtype_t dt = TECORE_DTYPE_BF16;
  const size_t count = (2u << 20) + 5, bytes = count * 2;
  uint16_t *h = malloc(bytes), *ts = malloc(bytes), *ce = malloc(bytes);
  RK_ASSERT(h && ts && ce, "malloc");
  tecore_devptr_t in, out, out_odd;
  RK_CORE(tecore_mem_alloc(bytes, &in));
  RK_CORE(tecore_mem_alloc(bytes, &out));
  RK_CORE(tecore_mem_alloc(bytes + 2, &out_odd)); /* out_odd + 2: not 16-byte aligned */
  for (int odd = 0; odd < 2; odd++) {
    tecore_devptr_t o = odd ? out_odd + 2 : out;
    uint64_t salt = 9100u + (uint64_t)odd;
    tc_make_input(h, count, dt, rank, salt);
    RK_CORE(tecore_memcpy_async(in, te_hptr(h), bytes, s));
    RK_CORE(tecore_memset_d8_async(o, 0xA5, bytes, s));
    RK_OK(tecomm_allreduce_algo(c, in, o, count, dt, TECOMM_SUM, TECOMM_ALGO_TWOSHOT, s));
    RK_CORE(tecore_memcpy_async(te_hptr(ts), o, bytes, s));
    RK_CORE(tecore_memset_d8_async(o, 0x5A, bytes, s));
    RK_OK(tecomm_allreduce_algo(c, in, o, count, dt, TECOMM_SUM, TECOMM_ALGO_CE, s));
    RK_CORE(tecore_memcpy_async(te_hptr(ce), o, bytes, s));
    RK_CORE(tecore_stream_synchronize(s));
    RK_OK(tecomm_comm_status(c, NULL));
    size_t i = 0;
    while (i < count && ts[i] == ce[i]) i++;
    RK_ASSERT(i == count, "%d ranks, %s output: ce and twoshot differ at element %zu of %zu "
              "(0x%04x against 0x%04x)", n, odd ? "unaligned" : "aligned", i, count, ce[i], ts[i]);
    check_result(ce, count, dt, TECOMM_SUM, n, 0, salt, "ce against float64");
    tc_rank_digest(ce, bytes);
  }
  tecore_graph_t g;
  tecore_graph_exec_t e;
  RK_CORE(tecore_stream_begin_capture(s, TECORE_CAPTURE_GLOBAL));
  tecomm_result_t r = tecomm_allreduce_algo(c, in, out, count, dt, TECOMM_SUM, TECOMM_ALGO_CE, s);
  RK_CORE(tecore_stream_end_capture(s, &g));
  RK_ASSERT(r == TECOMM_SUCCESS, "captured ce: %s", tecomm_last_error());
  RK_CORE(tecore_graph_instantiate(&e, g));
  for (int it = 0; it < 3; it++) {
    uint64_t salt = 9200u + (uint64_t)it;
    tc_make_input(h, count, dt, rank, salt);
    RK_CORE(tecore_memcpy_async(in, te_hptr(h), bytes, s));
    RK_CORE(tecore_memset_d8_async(out, 0xA5, bytes, s));
    RK_CORE(tecore_graph_launch(e, s));
    RK_CORE(tecore_memcpy_async(te_hptr(ce), out, bytes, s));
    RK_CORE(tecore_stream_synchronize(s));
    check_result(ce, count, dt, TECOMM_SUM, n, 0, salt, "ce graph replay");
    tc_rank_digest(ce, bytes);
  }
  RK_OK(tecomm_comm_status(c, NULL));
  RK_CORE(tecore_graph_exec_destroy(e));
  RK_CORE(tecore_graph_destroy(g));
  RK_CORE(tecore_mem_free(in));
  RK_CORE(tecore_mem_free(out));
  RK_CORE(tecore_mem_free(out_odd));
  free(h);
  free(ts);
  free(ce);
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(ce_matches_twoshot_bits) {
  static const int ranks[] = {2, 4};
  int n = ranks[_i];
  tc_run_ranks(n, rank_ce, NULL, 110);
  tc_expect_same_digest(n, "ce results");
  tc_shm_release();
}
END_TEST

/* ---- fused add + RMSNorm ---------------------------------------------------------- */

struct fused_case {
  tecomm_algo_t algo;
  tecore_dtype_t dt;
  size_t rows, hidden;
  int fp8;          /* 0 none, 1 delayed, 2 current */
  int same_resid;   /* residual_out == residual_in */
  int no_out;       /* out = 0: only the FP8 copy (the NCCL path needs a scratch buffer) */
  int skew;         /* odd ranks' residuals and out sit one element past 16-byte alignment */
};

static void rank_fused_case(tecomm_comm_t c, tecore_stream_t s, int rank, int n,
                            const struct fused_case *k, uint64_t salt) {
  size_t count = k->rows * k->hidden, esz = tecore_dtype_size(k->dt), bytes = count * esz;
  unsigned char *hx = malloc(bytes), *hr = malloc(bytes), *hg = malloc(k->hidden * esz);
  unsigned char *o1 = malloc(bytes), *o2 = malloc(bytes), *r1 = malloc(bytes), *r2 = malloc(bytes);
  uint8_t *q1 = malloc(count), *q2 = malloc(count);
  float *s1 = malloc(k->rows * 4), *s2 = malloc(k->rows * 4);
  RK_ASSERT(hx && hr && hg && o1 && o2 && r1 && r2 && q1 && q2 && s1 && s2, "malloc");
  tc_make_input(hx, count, k->dt, rank, salt);
  tc_make_input(hr, count, k->dt, 100, salt); /* the residual: the same on every rank */
  tc_make_input(hg, k->hidden, k->dt, 101, salt);
  tecore_devptr_t x, rin, rout, g, out, tmp, rout2, out2, q, q2d, sc, rs1, rs2;
  RK_CORE(tecore_mem_alloc(bytes + 16, &x));
  RK_CORE(tecore_mem_alloc(bytes + 16, &rin));
  RK_CORE(tecore_mem_alloc(bytes + 16, &rout));
  RK_CORE(tecore_mem_alloc(k->hidden * esz, &g));
  RK_CORE(tecore_mem_alloc(bytes + 16, &out));
  RK_CORE(tecore_mem_alloc(bytes, &tmp));
  RK_CORE(tecore_mem_alloc(bytes + 16, &rout2));
  RK_CORE(tecore_mem_alloc(bytes + 16, &out2));
  /* skew: the odd ranks' x, residuals and out are not 16-byte aligned, the
   * even ranks' are.  The call must meet itself on every rank (one row
   * plan everywhere: the odd ranks work on aligned copies), and give the
   * bits of the unfused kernels on aligned buffers (rout2, out2 stay so) */
  const size_t off = k->skew && (rank & 1) ? esz : 0;
  x += off, rin += off, rout += off, out += off;
  RK_CORE(tecore_mem_alloc(count + 16, &q));
  RK_CORE(tecore_mem_alloc(count + 16, &q2d));
  RK_CORE(tecore_mem_alloc(64, &sc)); /* scale, scale_inv, amax for each of the two */
  RK_CORE(tecore_mem_alloc(k->rows * 4, &rs1));
  RK_CORE(tecore_mem_alloc(k->rows * 4, &rs2));
  RK_CORE(tecore_memset_d8_async(rs1, 0xA5, k->rows * 4, s));
  RK_CORE(tecore_memcpy_async(x, te_hptr(hx), bytes, s));
  RK_CORE(tecore_memcpy_async(rin, te_hptr(hr), bytes, s));
  RK_CORE(tecore_memcpy_async(g, te_hptr(hg), k->hidden * esz, s));
  RK_CORE(tecore_memset_d8_async(out, 0xA5, bytes, s));
  RK_CORE(tecore_memset_d8_async(rout, 0xA5, bytes, s));
  float scales[16] = {0};
  scales[0] = scales[8] = 3.5f;         /* scale */
  scales[1] = scales[9] = 1.0f / 3.5f;  /* scale_inv */
  RK_CORE(tecore_memcpy_async(sc, te_hptr(scales), sizeof scales, s));
  size_t shape[2] = {k->rows, k->hidden};
  struct tecore_tensor t8a, t8b;
  if (k->fp8) {
    RK_CORE(tecore_tensor_init(&t8a, TECORE_DTYPE_E4M3, 2, shape, q));
    t8a.scaling = k->fp8 == 1 ? TECORE_SCALING_DELAYED : TECORE_SCALING_CURRENT;
    t8a.scale = sc;
    t8a.scale_inv = sc + 4;
    t8a.amax = sc + 8;
    t8b = t8a;
    t8b.data = q2d;
    t8b.scale = sc + 32;
    t8b.scale_inv = sc + 36;
    t8b.amax = sc + 40;
  }
  if (k->same_resid) RK_CORE(tecore_memcpy_async(rout, rin, bytes, s));
  struct tecomm_add_rmsnorm a = {.x = x, .rows = k->rows, .hidden = k->hidden, .dtype = k->dt,
                                 .residual_in = k->same_resid ? rout : rin, .residual_out = rout,
                                 .gamma = g, .eps = 1e-5f, .out = k->no_out ? 0 : out,
                                 .fp8_out = k->fp8 ? &t8a : NULL, .algo = k->algo,
                                 .rsigma = rs1};
  tecomm_result_t r = tecomm_allreduce_add_rmsnorm(c, &a, s);
  RK_ASSERT(r == TECOMM_SUCCESS, "fused %s %s rows %zu hidden %zu: %s: %s",
            tecomm_algo_name(k->algo), tecore_dtype_name(k->dt), k->rows, k->hidden,
            tecomm_result_name(r), tecomm_last_error());
  /* the unfused path: the plain allreduce (checked by the matrix) with the
   * fused call's algorithm, then libtecore's add and RMSNorm.  Every IPC
   * algorithm folds the ranks in the same order, so an IPC fused call and
   * any IPC allreduce give the same sums; NCCL's order is its own, so the
   * NCCL fused call is compared with the NCCL allreduce. */
  int nccl = n > 1 && algo_used(c, k->algo, count, k->dt, 1) == TECOMM_ALGO_NCCL;
  RK_OK(tecomm_allreduce_algo(c, x, tmp, count, k->dt, TECOMM_SUM,
                              nccl ? TECOMM_ALGO_NCCL : k->algo == TECOMM_ALGO_NCCL
                                                             ? TECOMM_ALGO_AUTO
                                                             : k->algo,
                              s));
  RK_CORE(tecore_scale_add(rout2, tmp, 1.0f, rin, 1.0f, k->dt, count, s));
  struct tecore_tensor tx, tg, ty;
  RK_CORE(tecore_tensor_init(&tx, k->dt, 2, shape, rout2));
  RK_CORE(tecore_tensor_init(&tg, k->dt, 1, &k->hidden, g));
  RK_CORE(tecore_tensor_init(&ty, k->dt, 2, shape, out2));
  RK_CORE(tecore_rmsnorm_fwd(&tx, &tg, 1e-5f, 0, &ty, rs2, s));
  if (k->fp8) RK_CORE(tecore_rmsnorm_fwd(&tx, &tg, 1e-5f, 0, &t8b, 0, s));
  RK_CORE(tecore_memcpy_async(te_hptr(o1), out, bytes, s));
  RK_CORE(tecore_memcpy_async(te_hptr(o2), out2, bytes, s));
  RK_CORE(tecore_memcpy_async(te_hptr(r1), rout, bytes, s));
  RK_CORE(tecore_memcpy_async(te_hptr(r2), rout2, bytes, s));
  RK_CORE(tecore_memcpy_async(te_hptr(s1), rs1, k->rows * 4, s));
  RK_CORE(tecore_memcpy_async(te_hptr(s2), rs2, k->rows * 4, s));
  if (k->fp8) {
    RK_CORE(tecore_memcpy_async(te_hptr(q1), q, count, s));
    RK_CORE(tecore_memcpy_async(te_hptr(q2), q2d, count, s));
    RK_CORE(tecore_memcpy_async(te_hptr(scales), sc, sizeof scales, s));
  }
  RK_CORE(tecore_stream_synchronize(s));
  RK_OK(tecomm_comm_status(c, NULL));
  /* The fused call promises the unfused path's bits when both reduce in
   * the same order (above): residual_out = round(round(sum) + residual_in)
   * either way, and the norm sums in tecore_rmsnorm_fwd's order.  Against
   * float64: the sum's error (sum_tol) plus the rounding of the add. */
  double ulp = 2 * half_ulp(k->dt);
  unsigned char *xr = malloc(bytes);
  double *sum = calloc(count, sizeof *sum), *mag = calloc(count, sizeof *mag);
  RK_ASSERT(xr && sum && mag, "malloc");
  for (int p = 0; p < n; p++) {
    tc_make_input(xr, count, k->dt, p, salt);
    for (size_t i = 0; i < count; i++) {
      sum[i] += tc_from_dt(xr, i, k->dt);
      mag[i] += fabs(tc_from_dt(xr, i, k->dt));
    }
  }
  char how[96];
  snprintf(how, sizeof how, "%s, %s, rows %zu, hidden %zu%s", nccl ? "nccl" : "ipc",
           tecomm_algo_name(k->algo), k->rows, k->hidden, k->skew ? ", skewed" : "");
  for (size_t i = 0; i < count; i++) {
    double a1 = tc_from_dt(r1, i, k->dt), a2 = tc_from_dt(r2, i, k->dt);
    RK_ASSERT(memcmp(r1 + i * esz, r2 + i * esz, esz) == 0,
              "residual_out[%zu] (%s): fused %.9g, unfused %.9g: not the same bits", i, how, a1, a2);
    double ref = sum[i] + tc_from_dt(hr, i, k->dt);
    double tol = sum_tol(n, k->dt, nccl, mag[i], sum[i]) + half_ulp(k->dt) * fabs(ref) * 1.0001;
    RK_ASSERT(fabs(a1 - ref) <= tol, "residual_out[%zu] (%s): %.9g, float64 %.12g, tolerance %.3g",
              i, how, a1, ref, tol);
    double b1 = tc_from_dt(o1, i, k->dt), b2 = tc_from_dt(o2, i, k->dt);
    if (k->no_out) /* out was not to be written: still the poison */
      RK_ASSERT(memcmp(o1 + i * esz, "\xa5\xa5\xa5\xa5", esz) == 0, "out[%zu] written with out = 0", i);
    else
      RK_ASSERT(memcmp(o1 + i * esz, o2 + i * esz, esz) == 0,
                "out[%zu] (%s): fused %.9g, unfused %.9g: not the same bits", i, how, b1, b2);
    if (k->fp8) {
      double f1 = te_e4m3_to_f32(q1[i]), f2 = te_e4m3_to_f32(q2[i]);
      RK_ASSERT(fabs(f1 - f2) <= 0.07 * fabs(f2) + 0x1p-9 + 2 * ulp * 3.5 * (fabs(b2) + 1.0),
                "fp8_out[%zu]: fused %g (0x%02x), unfused %g (0x%02x)", i, f1, q1[i], f2, q2[i]);
    }
  }
  /* rsigma: the fused kernel's statistic is tecore_rmsnorm_fwd's, bit for
   * bit, and within the float32 error of a sum of hidden squares (half of
   * it, through the square root: hidden / 2 units of 2^-24, plus 4 for the
   * mean and the reciprocal square root) of 1 / sqrt(mean(r^2) + eps) in
   * float64 over the fused residual_out r */
  for (size_t row = 0; row < k->rows; row++) {
    uint32_t b1, b2;
    memcpy(&b1, &s1[row], 4);
    memcpy(&b2, &s2[row], 4);
    RK_ASSERT(b1 == b2, "rsigma[%zu] (%s): fused %.9g (0x%08x), tecore_rmsnorm_fwd %.9g (0x%08x)",
              row, how, (double)s1[row], b1, (double)s2[row], b2);
    double ss = 0;
    for (size_t col = 0; col < k->hidden; col++) {
      double v = tc_from_dt(r1, row * k->hidden + col, k->dt);
      ss += v * v;
    }
    double ref = 1.0 / sqrt(ss / (double)k->hidden + 1e-5);
    double tol = ref * (4.0 + 0.5 * (double)k->hidden) * 0x1p-24;
    RK_ASSERT(fabs(s1[row] - ref) <= tol, "rsigma[%zu] (%s): %.9g, float64 %.12g, tolerance %.3g",
              row, how, (double)s1[row], ref, tol);
  }
  /* The FP8 copy against float64: q = E4M3(residual_out * rsigma * gamma *
   * scale), round to nearest; the kernel's three float products add at
   * most 2^-21 of the value before that rounding, which is then at most
   * half an E4M3 ulp.  amax = max |residual_out * rsigma * gamma| (before
   * the scale) within 2^-21.  The scale is the one the call used (delayed:
   * the tensor's 3.5; current: written from the amax). */
  if (k->fp8) {
    double sc8 = scales[0], am = 0;
    for (size_t i = 0; i < count; i++) {
      size_t row = i / k->hidden, col = i % k->hidden;
      double o = tc_from_dt(r1, i, k->dt) * (double)s1[row] * tc_from_dt(hg, col, k->dt);
      am = fmax(am, fabs(o));
      double ref = o * sc8, got8 = te_e4m3_to_f32(q1[i]);
      double tol = e4m3_half_ulp(ref) + 0x1p-21 * fabs(ref);
      RK_ASSERT(fabs(got8 - ref) <= tol,
                "fp8_out[%zu] (%s, %s scaling): %g (0x%02x), float64 %.9g (scale %g), "
                "tolerance %.3g (half an E4M3 ulp)",
                i, how, k->fp8 == 1 ? "delayed" : "current", got8, q1[i], ref, sc8, tol);
    }
    RK_ASSERT(fabs(scales[2] - am) <= 0x1p-21 * am, "fp8 amax %.9g, float64 %.12g",
              (double)scales[2], am);
  }
  if (k->fp8) { /* amax at float 2 (fused) and 10 (unfused); scales at 0 and 8 */
    RK_ASSERT(fabs(scales[2] - scales[10]) <= 1e-2 * fabs(scales[10]) + 1e-6,
              "fp8 amax: fused %g, unfused %g", (double)scales[2], (double)scales[10]);
    RK_ASSERT(scales[2] > 0, "fp8 amax not written");
    RK_ASSERT(fabs(scales[0] - scales[8]) <= 1e-2 * fabs(scales[8]),
              "fp8 scale: fused %g, unfused %g", (double)scales[0], (double)scales[8]);
  }
  free(xr);
  free(sum);
  free(mag);
  tc_rank_digest(o1, bytes);
  tc_rank_digest(r1, bytes);
  tc_rank_digest(s1, k->rows * 4);
  if (k->fp8) tc_rank_digest(q1, count);
  x -= off, rin -= off, rout -= off, out -= off;
  tecore_devptr_t all[] = {x, rin, rout, g, out, tmp, rout2, out2, q, q2d, sc, rs1, rs2};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) RK_CORE(tecore_mem_free(all[i]));
  free(hx), free(hr), free(hg), free(o1), free(o2), free(r1), free(r2), free(q1), free(q2);
  free(s1), free(s2);
}

static void rank_fused(int rank, int n, void *arg) {
  (void)arg;
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  static const struct fused_case cases[] = {
      {TECOMM_ALGO_AUTO, TECORE_DTYPE_BF16, 1, 4096, 0, 0, 0, 0},
      {TECOMM_ALGO_LAMPORT, TECORE_DTYPE_BF16, 3, 256, 1, 0, 0, 0},
      {TECOMM_ALGO_ONESHOT, TECORE_DTYPE_F32, 5, 100, 0, 1, 0, 0},
      {TECOMM_ALGO_TWOSHOT, TECORE_DTYPE_F16, 7, 64, 2, 0, 0, 0},
      {TECOMM_ALGO_ONESHOT, TECORE_DTYPE_BF16, 16, 8192, 1, 1, 0, 0},
      {TECOMM_ALGO_AUTO, TECORE_DTYPE_F32, 2, 33, 2, 1, 0, 0},
      {TECOMM_ALGO_AUTO, TECORE_DTYPE_BF16, 4, 128, 1, 1, 1, 0},
      {TECOMM_ALGO_CE, TECORE_DTYPE_BF16, 16, 8192, 1, 1, 0, 0},
      {TECOMM_ALGO_CE, TECORE_DTYPE_F32, 5, 100, 2, 0, 0, 0},
      {TECOMM_ALGO_CE, TECORE_DTYPE_F16, 7, 64, 1, 0, 1, 0},
      {TECOMM_ALGO_ONESHOT, TECORE_DTYPE_BF16, 40, 1024, 0, 0, 0, 1},
      {TECOMM_ALGO_TWOSHOT, TECORE_DTYPE_BF16, 40, 1024, 0, 0, 0, 1},
      {TECOMM_ALGO_LAMPORT, TECORE_DTYPE_BF16, 40, 1024, 0, 0, 0, 1},
      {TECOMM_ALGO_CE, TECORE_DTYPE_BF16, 40, 1024, 0, 0, 0, 1},
      {TECOMM_ALGO_LAMPORT, TECORE_DTYPE_BF16, 12, 512, 1, 1, 0, 1},
      {TECOMM_ALGO_AUTO, TECORE_DTYPE_F16, 24, 256, 1, 0, 1, 1},
  };
  int v, nccl = tecomm_nccl_version(&v) == TECOMM_SUCCESS;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct fused_case k = cases[i];
    if (n == 1) k.algo = TECOMM_ALGO_AUTO; /* one rank: the unfused path itself */
    rank_fused_case(c, s, rank, n, &k, 5000 + i);
    if (nccl) {
      k.algo = TECOMM_ALGO_NCCL;
      rank_fused_case(c, s, rank, n, &k, 6000 + i);
    }
  }
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(fused_add_rmsnorm_vs_unfused) {
  static const int ranks[] = {1, 2, 4}; /* 1: the NCCL path's composite, on vdev too */
  tc_run_ranks(ranks[_i], rank_fused, NULL, 110);
  tc_expect_same_digest(ranks[_i], "fused outputs");
  tc_shm_release();
}
END_TEST

/* ---- staging past the pool -----------------------------------------------------------
 * An input that is not symmetric memory and does not fit the pool (here
 * TECOMM_POOL_MB=1) is staged in a segment every rank makes together
 * (it was TECOMM_ERR_NOMEM "raise TECOMM_POOL_MB" before, the failure of
 * te-demo --tp 2 at 8192 tokens). */

/* The plain allreduce of a graph-captured call, count elements of F32,
 * checked against float64; the capture must succeed (the staging buffer
 * is already big enough). */
static void captured_case(tecomm_comm_t c, tecore_stream_t s, int rank, int n, size_t count,
                          uint64_t salt) {
  size_t bytes = count * 4;
  float *h = malloc(bytes), *got = malloc(bytes);
  RK_ASSERT(h && got, "malloc");
  tecore_devptr_t in, out;
  RK_CORE(tecore_mem_alloc(bytes, &in));
  RK_CORE(tecore_mem_alloc(bytes, &out));
  tecore_graph_t g;
  tecore_graph_exec_t e;
  RK_CORE(tecore_stream_begin_capture(s, TECORE_CAPTURE_GLOBAL));
  tecomm_result_t r = tecomm_allreduce(c, in, out, count, TECORE_DTYPE_F32, TECOMM_SUM, s);
  RK_CORE(tecore_stream_end_capture(s, &g));
  RK_ASSERT(r == TECOMM_SUCCESS, "captured allreduce of %zu bytes: %s", bytes, tecomm_last_error());
  RK_CORE(tecore_graph_instantiate(&e, g));
  for (int it = 0; it < 2; it++) {
    tc_make_input(h, count, TECORE_DTYPE_F32, rank, salt + (uint64_t)it);
    RK_CORE(tecore_memcpy_async(in, te_hptr(h), bytes, s));
    RK_CORE(tecore_memset_d8_async(out, 0xA5, bytes, s));
    RK_CORE(tecore_graph_launch(e, s));
    RK_CORE(tecore_memcpy_async(te_hptr(got), out, bytes, s));
    RK_CORE(tecore_stream_synchronize(s));
    check_result(got, count, TECORE_DTYPE_F32, TECOMM_SUM, n, 0, salt + (uint64_t)it,
                 "graph replay staged past the pool");
    tc_rank_digest(got, bytes);
  }
  RK_CORE(tecore_graph_exec_destroy(e));
  RK_CORE(tecore_graph_destroy(g));
  RK_CORE(tecore_mem_free(in));
  RK_CORE(tecore_mem_free(out));
  free(h);
  free(got);
}

/* 1 MiB pool: 3 MiB plain allreduce, a 2.4 MiB fused call (two-shot
 * stages its input), then 5 MiB: refused inside a capture (a new segment
 * is not made there) on every rank alike, run eagerly, then captured and
 * replayed. */
static void rank_stage_grows(int rank, int n, void *arg) {
  (void)arg;
  setenv("TECOMM_POOL_MB", "1", 1);
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  struct ar_case big = {TECOMM_ALGO_AUTO, TECORE_DTYPE_F32, TECOMM_SUM, (768u << 10) + 5, 0};
  run_case(c, s, rank, n, &big, 7001);
  struct fused_case fk = {TECOMM_ALGO_TWOSHOT, TECORE_DTYPE_BF16, 600, 2048, 1, 0, 0, 0};
  rank_fused_case(c, s, rank, n, &fk, 7002);
  size_t count5 = (5u << 18) + 3; /* 5 MiB of F32 and a tail */
  tecore_devptr_t in, out;
  RK_CORE(tecore_mem_alloc(count5 * 4, &in));
  RK_CORE(tecore_mem_alloc(count5 * 4, &out));
  tecore_graph_t g;
  RK_CORE(tecore_stream_begin_capture(s, TECORE_CAPTURE_GLOBAL));
  tecore_clear_error();
  tecomm_result_t r = tecomm_allreduce(c, in, out, count5, TECORE_DTYPE_F32, TECOMM_SUM, s);
  char detail[512];
  snprintf(detail, sizeof detail, "%s", tecomm_last_error());
  RK_CORE(tecore_stream_end_capture(s, &g));
  RK_CORE(tecore_graph_destroy(g));
  RK_ASSERT(r == TECOMM_ERR_NOT_SUPPORTED && strstr(detail, "eager call"),
            "a new staging segment inside a capture: %s (%s), want NOT_SUPPORTED naming the "
            "eager call", tecomm_result_name(r), detail);
  RK_CORE(tecore_mem_free(in));
  RK_CORE(tecore_mem_free(out));
  struct ar_case five = {TECOMM_ALGO_AUTO, TECORE_DTYPE_F32, TECOMM_SUM, count5, 0};
  run_case(c, s, rank, n, &five, 7003);
  captured_case(c, s, rank, n, count5, 7004);
  RK_OK(tecomm_comm_status(c, NULL));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(staging_past_the_pool_grows_on_every_rank) {
  static const int ranks[] = {2, 3};
  tc_run_ranks(ranks[_i], rank_stage_grows, NULL, 110);
  tc_expect_same_digest(ranks[_i], "staged results");
  tc_shm_release();
}
END_TEST

/* The staging segment fails on rank 1 alone (TECOMM_TEST_FAIL=stage:1), or
 * TECOMM_STAGE_MB=4 bounds the segments: every rank returns the same
 * TECOMM_ERR_NOMEM, and the communicator still works for inputs that fit. */
static void rank_stage_refused(int rank, int n, void *arg) {
  int which = *(const int *)arg;
  setenv("TECOMM_POOL_MB", "1", 1);
  if (which == 0) setenv("TECOMM_TEST_FAIL", "stage:1", 1);
  else setenv("TECOMM_STAGE_MB", "4", 1);
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  if (which == 1) { /* 3 MiB: a 4 MiB segment, all the bound allows */
    struct ar_case big = {TECOMM_ALGO_AUTO, TECORE_DTYPE_F32, TECOMM_SUM, (768u << 10) + 5, 0};
    run_case(c, s, rank, n, &big, 7101);
  }
  size_t count = which == 0 ? (768u << 10) + 5 : (5u << 18);
  tecore_devptr_t in, out;
  RK_CORE(tecore_mem_alloc(count * 4, &in));
  RK_CORE(tecore_mem_alloc(count * 4, &out));
  RK_EXPECT(TECOMM_ERR_NOMEM, which == 0 ? "rank 1 could not allocate" : "TECOMM_STAGE_MB=4",
            tecomm_allreduce(c, in, out, count, TECORE_DTYPE_F32, TECOMM_SUM, s));
  RK_CORE(tecore_mem_free(in));
  RK_CORE(tecore_mem_free(out));
  struct ar_case fits = {TECOMM_ALGO_TWOSHOT, TECORE_DTYPE_BF16, TECOMM_SUM, (128u << 10) + 1, 0};
  run_case(c, s, rank, n, &fits, 7102);
  RK_OK(tecomm_comm_status(c, NULL));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(staging_refused_on_one_rank_fails_every_rank) {
  int which = _i;
  tc_run_ranks(3, rank_stage_refused, &which, 110);
  tc_expect_same_digest(3, "results after a refused staging");
  tc_shm_release();
}
END_TEST

/* ---- graphs ---------------------------------------------------------------------- */

/* One graph holds four allreduces (Lamport, one-shot, two-shot and NCCL's
 * on their own buffers; two-shot again where there is no NCCL); 1000
 * replays, new inputs before each, every output checked. */
static void rank_graph(int rank, int n, void *arg) {
  (void)arg;
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  enum { K = 4, COUNT = 301, REPLAYS = 1000 };
  int v;
  tecomm_algo_t ga[K] = {TECOMM_ALGO_LAMPORT, TECOMM_ALGO_ONESHOT, TECOMM_ALGO_TWOSHOT,
                         tecomm_nccl_version(&v) == TECOMM_SUCCESS ? TECOMM_ALGO_NCCL
                                                                   : TECOMM_ALGO_TWOSHOT};
  const tecore_dtype_t dt = TECORE_DTYPE_BF16;
  size_t bytes = COUNT * 2;
  tecore_devptr_t in[K], out[K];
  for (int k = 0; k < K; k++) {
    RK_CORE(tecore_mem_alloc(bytes, &in[k]));
    RK_CORE(tecore_mem_alloc(bytes, &out[k]));
    RK_CORE(tecore_memset_d8_async(in[k], 0, bytes, s));
  }
  RK_CORE(tecore_stream_synchronize(s));
  tecore_graph_t g;
  tecore_graph_exec_t e;
  RK_CORE(tecore_stream_begin_capture(s, TECORE_CAPTURE_GLOBAL));
  for (int k = 0; k < K; k++)
    RK_OK(tecomm_allreduce_algo(c, in[k], out[k], COUNT, dt, TECOMM_SUM, ga[k], s));
  RK_CORE(tecore_stream_end_capture(s, &g));
  RK_CORE(tecore_graph_instantiate(&e, g));
  /* one host buffer per input: an async copy from pageable memory may
   * read it when the stream gets there (vdev does), so none is reused
   * before the stream is synchronized */
  uint16_t h[K][COUNT], got[COUNT];
  for (int it = 0; it < REPLAYS; it++) {
    for (int k = 0; k < K; k++) {
      tc_make_input(h[k], COUNT, dt, rank, (uint64_t)it * K + k + 100000);
      RK_CORE(tecore_memcpy_async(in[k], te_hptr(h[k]), bytes, s));
      RK_CORE(tecore_memset_d8_async(out[k], 0xA5, bytes, s));
    }
    RK_CORE(tecore_graph_launch(e, s));
    for (int k = 0; k < K; k++) {
      RK_CORE(tecore_memcpy_async(te_hptr(got), out[k], bytes, s));
      RK_CORE(tecore_stream_synchronize(s));
      char what[96];
      snprintf(what, sizeof what, "replay %d of %d, %s", it, REPLAYS, tecomm_algo_name(ga[k]));
      check_result(got, COUNT, dt, TECOMM_SUM, n, ga[k] == TECOMM_ALGO_NCCL,
                   (uint64_t)it * K + k + 100000, what);
      tc_rank_digest(got, bytes);
    }
  }
  RK_OK(tecomm_comm_status(c, NULL));
  RK_CORE(tecore_graph_exec_destroy(e));
  RK_CORE(tecore_graph_destroy(g));
  for (int k = 0; k < K; k++) {
    RK_CORE(tecore_mem_free(in[k]));
    RK_CORE(tecore_mem_free(out[k]));
  }
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(graph_1000_replays_new_data) {
  tc_run_ranks(3, rank_graph, NULL, 110);
  tc_expect_same_digest(3, "graph replays");
  tc_shm_release();
}
END_TEST

/* ---- a killed rank -------------------------------------------------------------- */

/* deaf: the survivors' vdev NCCL notices no dead peer, as a real NCCL's
 * kernels may not: libtecomm's watchdog must end the wait */
struct killed_case {
  tecomm_algo_t algo;
  int deaf;
};

static void rank_killed(int rank, int n, void *arg) {
  const struct killed_case *k = arg;
  tecomm_algo_t algo = k->algo;
  setenv("TECOMM_TIMEOUT", "1000", 1);
  if (k->deaf) setenv("TECOMM_TEST_FAIL", "nccl-deaf:0,nccl-deaf:1", 1);
  /* what NCCL and the watchdog do with a dead peer (as under a graph's
   * replay, where no host agreement runs; with it, the agreement finds
   * the dead rank before NCCL is called: t/comm/check_agree.c) */
  if (algo == TECOMM_ALGO_NCCL) setenv("TECOMM_HOST_AGREE", "0", 1);
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  tecore_devptr_t buf;
  RK_CORE(tecore_mem_alloc(4096, &buf));
  RK_CORE(tecore_memset_d8_async(buf, 0x3c, 4096, s));
  RK_OK(tecomm_allreduce_algo(c, buf, buf, 1000, TECORE_DTYPE_F32, TECOMM_SUM, algo, s));
  RK_CORE(tecore_stream_synchronize(s));
  RK_ASSERT(tc_shm_barrier(tc_shm) == 0, "barrier");
  if (rank == n - 1) raise(SIGKILL); /* dies between collectives: the peers wait in the next */
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  RK_OK(tecomm_allreduce_algo(c, buf, buf, 1000, TECORE_DTYPE_F32, TECOMM_SUM, algo, s));
  tecore_result_t w = te_stream_wait(s, 5000);
  RK_ASSERT(w == TECORE_SUCCESS, "the stream did not come back within 5 s: %s",
            tecore_result_name(w));
  int peer = -2;
  tecomm_result_t st = tecomm_comm_status(c, &peer);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  RK_ASSERT(st == TECOMM_ERR_TIMEOUT, "status after a peer died: %s (%s)", tecomm_result_name(st),
            tecomm_last_error());
  /* NCCL does not say which peer failed: its remote error, and the
   * communicator it made aborted so that its kernels end */
  const char *says = k->deaf                    ? "the watchdog aborted the NCCL communicator"
                     : algo == TECOMM_ALGO_NCCL ? "NCCL reports error 6"
                                                : "rank 2";
  RK_ASSERT(peer == (algo == TECOMM_ALGO_NCCL ? -1 : n - 1), "status names peer %d", peer);
  RK_ASSERT(strstr(tecomm_last_error(), says), "detail does not say \"%s\": %s", says,
            tecomm_last_error());
  RK_ASSERT(secs <= 2.0, "TIMEOUT after %.2f s, want <= TECOMM_TIMEOUT + 1 s = 2 s", secs);
  RK_EXPECT(TECOMM_ERR_TIMEOUT, says,
            tecomm_allreduce_algo(c, buf, buf, 1000, TECORE_DTYPE_F32, TECOMM_SUM, algo, s));
  RK_CORE(tecore_mem_free(buf));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(killed_rank_timeout) {
  static const struct killed_case which[] = {
      {TECOMM_ALGO_ONESHOT, 0}, {TECOMM_ALGO_LAMPORT, 0}, {TECOMM_ALGO_TWOSHOT, 0},
      {TECOMM_ALGO_CE, 0},      {TECOMM_ALGO_NCCL, 0},    {TECOMM_ALGO_NCCL, 1}};
  struct killed_case k = which[_i];
  /* on a GPU, how soon a real NCCL gives up on the dead peer is NCCL's or
   * the watchdog's (TECOMM_TIMEOUT after the call started): vdev's NCCL
   * plays both behaviours, deaf or not */
  if (k.algo == TECOMM_ALGO_NCCL && !tc_on_vdev()) {
    printf("# nccl: a dead peer on a real NCCL; not run on %s\n", tc_run_backend);
    return;
  }
  tc_run_ranks_ex(3, rank_killed, &k, 30, 2);
  tc_shm_release();
}
END_TEST

static Suite *allreduce_suite(void) {
  setenv("TECORE_VDEV_DEVICES", "8", 0);
  Suite *s = suite_create("comm_allreduce");
  TCase *tc = te_tcase(s, "matrix", 0);
  tcase_add_loop_test(tc, every_algo_dtype_op_size, 0, 4);
  tcase_add_test(tc, large_64mb);
  tcase_add_loop_test(tc, ce_matches_twoshot_bits, 0, 2);
  tcase_add_loop_test(tc, buffers_aligned_differently_per_rank, 0, 2);
  tc = te_tcase(s, "fused", 0);
  tcase_add_loop_test(tc, fused_add_rmsnorm_vs_unfused, 0, 3);
  tc = te_tcase(s, "staging", 0);
  tcase_add_loop_test(tc, staging_past_the_pool_grows_on_every_rank, 0, 2);
  tcase_add_loop_test(tc, staging_refused_on_one_rank_fails_every_rank, 0, 2);
  tc = te_tcase(s, "graph", 0);
  tcase_add_test(tc, graph_1000_replays_new_data);
  tc = te_tcase(s, "timeout", 0);
  tcase_add_loop_test(tc, killed_rank_timeout, 0, 6);
  return s;
}

TE_TEST_MAIN(allreduce_suite, TE_TEST_DEVICE)
