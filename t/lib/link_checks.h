/* SPDX-License-Identifier: Apache-2.0 */
/* link_checks.h -- what the suites of libtecomm's links above IPC
 * (t/comm/check_nvls.c, t/comm/check_mnnvl.c) share: one plain allreduce
 * and one fused residual add + RMSNorm (+ FP8 E4M3, delayed scaling) of a
 * given algorithm, each checked against a float64 reference and folded
 * into the rank's digest; the tolerances are those of the links' kernels
 * (one reduction in f32, one rounding to the dtype) or of NCCL and verbs
 * where a link fell back to them.  Ranks as forked processes
 * (t/lib/comm_ranks.h). */
#ifndef TE_T_LINK_CHECKS_H
#define TE_T_LINK_CHECKS_H
#include "comm_ranks.h"
#include "common/convert.h"
#include "common/fp8.h"

static const tecore_dtype_t dtypes[] TE_T_UNUSED = {TECORE_DTYPE_F32, TECORE_DTYPE_BF16,
                                                   TECORE_DTYPE_F16};

/* Half an ulp of dt, relative to a value's magnitude. */
static TE_T_UNUSED double half_ulp(tecore_dtype_t dt) {
  return dt == TECORE_DTYPE_F32 ? 0x1p-24 : dt == TECORE_DTYPE_BF16 ? 0x1p-8 : 0x1p-11;
}

/* The float64 reduction of every rank's input and the sum of magnitudes. */
static TE_T_UNUSED void reference(double *ref, double *mag, size_t count, tecore_dtype_t dt,
                                  tecomm_op_t op, int n, uint64_t salt) {
  unsigned char *in = malloc(count * tecore_dtype_size(dt));
  RK_ASSERT(in, "malloc");
  for (int r = 0; r < n; r++) {
    tc_make_input(in, count, dt, r, salt);
    for (size_t i = 0; i < count; i++) {
      double v = tc_from_dt(in, i, dt);
      if (r == 0) ref[i] = v, mag[i] = fabs(v);
      else ref[i] = op == TECOMM_SUM ? ref[i] + v : (v > ref[i] ? v : ref[i]), mag[i] += fabs(v);
    }
  }
  free(in);
}

/* libtecomm's kernels fold in f32 and round once; NCCL and verbs (where a
 * link fell back to them) round partial sums to the dtype
 * (check_ipc's sum_tol says more). */
static TE_T_UNUSED double sum_tol_of(int n, tecore_dtype_t dt, double mag, double ref,
                                     int nccl) {
  if (nccl) return (n - 1) * 0x1p-24 * mag + n * half_ulp(dt) * mag * 1.0001;
  return (n - 1) * 0x1p-24 * mag + half_ulp(dt) * fabs(ref) * 1.0001;
}
static TE_T_UNUSED double sum_tol(int n, tecore_dtype_t dt, double mag, double ref) {
  return sum_tol_of(n, dt, mag, ref, 0);
}

/* The algorithm a call ran, resolved as the table does. */
static TE_T_UNUSED tecomm_algo_t chosen(tecomm_comm_t c, size_t count, tecore_dtype_t dt,
                                        int fused) {
  tecomm_algo_t a = TECOMM_ALGO_AUTO;
  RK_OK(tecomm_comm_choose(c, count, dt, fused, &a));
  return a;
}

/* One plain allreduce of algo, checked against float64, folded into the
 * rank's digest. */
static TE_T_UNUSED void plain_case(tecomm_comm_t c, tecore_stream_t s, int rank, int n,
                                   tecomm_algo_t algo, tecore_dtype_t dt, tecomm_op_t op,
                                   size_t count, uint64_t salt) {
  size_t bytes = count * tecore_dtype_size(dt);
  unsigned char *h = malloc(bytes), *got = malloc(bytes);
  double *ref = malloc(count * sizeof *ref), *mag = malloc(count * sizeof *mag);
  RK_ASSERT(h && got && ref && mag, "malloc");
  tc_make_input(h, count, dt, rank, salt);
  tecore_devptr_t send = 0, recv = 0;
  RK_CORE(tecore_mem_alloc(bytes, &send));
  RK_CORE(tecore_mem_alloc(bytes, &recv));
  RK_CORE(tecore_memcpy_async(send, te_hptr(h), bytes, s));
  RK_CORE(tecore_memset_d8_async(recv, 0xA5, bytes, s)); /* poison */
  tecomm_result_t r = tecomm_allreduce_algo(c, send, recv, count, dt, op, algo, s);
  RK_ASSERT(r == TECOMM_SUCCESS, "%d ranks, %s, %s, count %zu: %s: %s", n, tecomm_algo_name(algo),
            tecore_dtype_name(dt), count, tecomm_result_name(r), tecomm_last_error());
  RK_CORE(tecore_memcpy_async(te_hptr(got), recv, bytes, s));
  RK_CORE(tecore_stream_synchronize(s));
  RK_OK(tecomm_comm_status(c, NULL));
  reference(ref, mag, count, dt, op, n, salt);
  tecomm_algo_t ran = algo == TECOMM_ALGO_AUTO ? chosen(c, count, dt, 0) : algo;
  int nccl = ran == TECOMM_ALGO_NCCL || ran == TECOMM_ALGO_VERBS;
  for (size_t i = 0; i < count; i++) {
    double g = tc_from_dt(got, i, dt);
    double tol = op == TECOMM_MAX ? 0.0 : sum_tol_of(n, dt, mag[i], ref[i], nccl);
    RK_ASSERT(fabs(g - ref[i]) <= tol,
              "%d ranks, %s, %s, %s, count %zu: element %zu: got %.9g, want %.9g (float64), "
              "tolerance %.3g", n, tecomm_algo_name(algo), tecore_dtype_name(dt),
              op == TECOMM_SUM ? "sum" : "max", count, i, g, ref[i], tol);
  }
  tc_rank_digest(got, bytes);
  RK_CORE(tecore_mem_free(send));
  RK_CORE(tecore_mem_free(recv));
  free(h);
  free(got);
  free(ref);
  free(mag);
}

/* One fused call of algo (rows x hidden of dt, FP8 E4M3 copy with delayed
 * scaling), checked against float64. */
static TE_T_UNUSED void fused_case(tecomm_comm_t c, tecore_stream_t s, int rank, int n,
                                   tecomm_algo_t algo, tecore_dtype_t dt, size_t rows,
                                   size_t hidden, uint64_t salt) {
  size_t count = rows * hidden, esz = tecore_dtype_size(dt), bytes = count * esz;
  unsigned char *hx = malloc(bytes), *hres = malloc(bytes), *hg = malloc(hidden * esz);
  unsigned char *ro = malloc(bytes), *out = malloc(bytes), *q = malloc(count);
  double *ref = malloc(count * sizeof *ref), *mag = malloc(count * sizeof *mag);
  RK_ASSERT(hx && hres && hg && ro && out && q && ref && mag, "malloc");
  tc_make_input(hx, count, dt, rank, salt);
  tc_make_input(hres, count, dt, 1000, salt); /* the same residual on every rank */
  tc_make_input(hg, hidden, dt, 1001, salt);
  tecore_devptr_t x, res, rout, g, o, q8, scale, sinv;
  RK_CORE(tecore_mem_alloc(bytes, &x));
  RK_CORE(tecore_mem_alloc(bytes, &res));
  RK_CORE(tecore_mem_alloc(bytes, &rout));
  RK_CORE(tecore_mem_alloc(hidden * esz, &g));
  RK_CORE(tecore_mem_alloc(bytes, &o));
  RK_CORE(tecore_mem_alloc(count, &q8));
  RK_CORE(tecore_mem_alloc(4, &scale));
  RK_CORE(tecore_mem_alloc(4, &sinv));
  float sc = 8.0f;
  RK_CORE(tecore_memcpy_async(x, te_hptr(hx), bytes, s));
  RK_CORE(tecore_memcpy_async(res, te_hptr(hres), bytes, s));
  RK_CORE(tecore_memcpy_async(g, te_hptr(hg), hidden * esz, s));
  RK_CORE(tecore_memcpy_async(scale, te_hptr(&sc), 4, s));
  RK_CORE(tecore_memset_d8_async(rout, 0xA5, bytes, s));
  RK_CORE(tecore_memset_d8_async(o, 0xA5, bytes, s));
  RK_CORE(tecore_memset_d8_async(q8, 0xA5, count, s));
  size_t shape[2] = {rows, hidden};
  struct tecore_tensor t8;
  RK_CORE(tecore_tensor_init(&t8, TECORE_DTYPE_E4M3, 2, shape, q8));
  t8.scaling = TECORE_SCALING_DELAYED;
  t8.scale = scale;
  t8.scale_inv = sinv;
  const float eps = 1e-5f;
  struct tecomm_add_rmsnorm a = {.x = x, .rows = rows, .hidden = hidden, .dtype = dt,
                                 .residual_in = res, .residual_out = rout, .gamma = g, .eps = eps,
                                 .out = o, .fp8_out = &t8, .algo = algo};
  tecomm_result_t r = tecomm_allreduce_add_rmsnorm(c, &a, s);
  RK_ASSERT(r == TECOMM_SUCCESS, "fused %s %s %zux%zu: %s: %s", tecomm_algo_name(algo),
            tecore_dtype_name(dt), rows, hidden, tecomm_result_name(r), tecomm_last_error());
  RK_CORE(tecore_memcpy_async(te_hptr(ro), rout, bytes, s));
  RK_CORE(tecore_memcpy_async(te_hptr(out), o, bytes, s));
  RK_CORE(tecore_memcpy_async(te_hptr(q), q8, count, s));
  RK_CORE(tecore_stream_synchronize(s));
  RK_OK(tecomm_comm_status(c, NULL));
  reference(ref, mag, count, dt, TECOMM_SUM, n, salt);
  for (size_t row = 0; row < rows; row++) {
    double ss = 0.0;
    for (size_t k = 0; k < hidden; k++) {
      size_t i = row * hidden + k;
      double want = ref[i] + tc_from_dt(hres, i, dt), got = tc_from_dt(ro, i, dt);
      double tol = sum_tol(n, dt, mag[i], ref[i]) + half_ulp(dt) * (fabs(want) + fabs(ref[i])) * 1.0001;
      RK_ASSERT(fabs(got - want) <= tol,
                "fused %s %s: residual_out[%zu][%zu] = %.9g, want %.9g (float64), tolerance %.3g",
                tecomm_algo_name(algo), tecore_dtype_name(dt), row, k, got, want, tol);
      ss += got * got;
    }
    double rs = 1.0 / sqrt(ss / (double)hidden + eps);
    for (size_t k = 0; k < hidden; k++) {
      size_t i = row * hidden + k;
      double want = tc_from_dt(ro, i, dt) * rs * tc_from_dt(hg, k, dt), got = tc_from_dt(out, i, dt);
      double tol = 4 * half_ulp(dt) * fabs(want) + 1e-6;
      RK_ASSERT(fabs(got - want) <= tol, "fused %s %s: out[%zu][%zu] = %.9g, want %.9g, tolerance %.3g",
                tecomm_algo_name(algo), tecore_dtype_name(dt), row, k, got, want, tol);
      double w8 = got * sc, g8 = te_e4m3_to_f32(q[i]);
      RK_ASSERT(fabs(g8 - w8) <= 0.0625 * fabs(w8) + 0x1p-9,
                "fused %s %s: fp8_out[%zu][%zu] = %.6g, want %.6g (out x scale)",
                tecomm_algo_name(algo), tecore_dtype_name(dt), row, k, g8, w8);
    }
  }
  tc_rank_digest(ro, bytes);
  tc_rank_digest(out, bytes);
  tc_rank_digest(q, count);
  tecore_devptr_t all[] = {x, res, rout, g, o, q8, scale, sinv};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) RK_CORE(tecore_mem_free(all[i]));
  free(hx);
  free(hres);
  free(hg);
  free(ro);
  free(out);
  free(q);
  free(ref);
  free(mag);
}

static TE_T_UNUSED void describe(tecomm_comm_t c, size_t bytes, char *d, size_t len) {
  RK_OK(tecomm_comm_describe(c, bytes, d, len));
}

#endif
