/* SPDX-License-Identifier: Apache-2.0
 * check_capture.c -- libtecomm's collectives inside libtegraph's graphed
 * callables, ranks as forked processes (t/lib/comm_ranks.h), 2, 3 and 4 ranks:
 *   - a callable whose forward is y = allreduce(x) (Lamport, one-shot,
 *     two-shot, one after the other in the same graph, on inputs that are
 *     the callable's static buffers, so one-shot and two-shot stage them
 *     through the pool) then the fused residual add + RMSNorm on the
 *     Lamport result: warmed up eagerly, captured once, replayed 200 times
 *     with new inputs copied in by tegraph_callable_forward; every output
 *     of every replay against a float64 reference (the allreduces within
 *     n - 1 f32 roundings plus half an ulp of bf16, the three algorithms
 *     with the same bits), the same bits on every rank.
 * The kernels keep their addresses inside one by-value parameter, so the
 * callable copies its inputs in rather than rebinding them: the replays
 * exercise the counters and flags in device memory, not new addresses. */
#include "comm_ranks.h"
#include <te/graph.h>
#include "common/convert.h"

#define GR_COUNT 1024 /* bf16 elements: 4 rows of 256 for the norm */
#define GR_HIDDEN 256
#define GR_REPLAYS 200

struct gr_model {
  tecomm_comm_t c;
  tecore_devptr_t resid, gamma, scratch; /* the norm's residual and weight; the
                                            one-shot and two-shot copies of x */
};

/* outputs: 0 Lamport, 1 one-shot, 2 two-shot, 3 the norm of Lamport's sum */
static tecore_result_t gr_forward(void *u, tecore_stream_t s, const struct tegraph_io *io) {
  struct gr_model *m = u;
  tecore_devptr_t x = io->inputs[0].data;
  static const tecomm_algo_t algos[3] = {TECOMM_ALGO_LAMPORT, TECOMM_ALGO_ONESHOT,
                                         TECOMM_ALGO_TWOSHOT};
  for (int a = 0; a < 3; a++)
    if (tecomm_allreduce_algo(m->c, x, io->outputs[a].data, GR_COUNT, TECORE_DTYPE_BF16, TECOMM_SUM,
                              algos[a], s) != TECOMM_SUCCESS)
      return TECORE_ERR_INTERNAL;
  struct tecomm_add_rmsnorm an = {.x = x, .rows = GR_COUNT / GR_HIDDEN, .hidden = GR_HIDDEN,
                                  .dtype = TECORE_DTYPE_BF16, .residual_in = m->resid,
                                  .residual_out = m->scratch, .gamma = m->gamma, .eps = 1e-5f,
                                  .out = io->outputs[3].data, .algo = TECOMM_ALGO_LAMPORT};
  return tecomm_allreduce_add_rmsnorm(m->c, &an, s) == TECOMM_SUCCESS ? TECORE_SUCCESS
                                                                        : TECORE_ERR_INTERNAL;
}

/* Rank r's input of replay it: bf16 in [-2, 2), never zero. */
static void gr_input(uint16_t *h, int r, int it) {
  uint64_t x = te_test_seed ^ ((uint64_t)(r + 1) << 40) ^ ((uint64_t)it * 0x9e3779b97f4a7c15ull);
  for (size_t i = 0; i < GR_COUNT; i++) {
    float v = (float)((double)(te_splitmix64(&x) >> 11) / 9007199254740992.0 * 4.0 - 2.0);
    h[i] = te_f32_to_bf16(v == 0.0f ? 0.5f : v);
  }
}

static void rank_graph_callable(int rank, int n, void *arg) {
  (void)arg;
  struct gr_model m = {.c = tc_rank_comm(rank, n)};
  size_t bytes = GR_COUNT * 2;
  uint16_t res[GR_COUNT], gam[GR_HIDDEN];
  for (size_t i = 0; i < GR_COUNT; i++) res[i] = te_f32_to_bf16(0.25f * (float)((int)(i % 9) - 4));
  for (size_t i = 0; i < GR_HIDDEN; i++) gam[i] = te_f32_to_bf16(1.0f + 0.125f * (float)(i % 5));
  RK_CORE(tecore_mem_alloc(bytes, &m.resid));
  RK_CORE(tecore_mem_alloc(bytes, &m.scratch));
  RK_CORE(tecore_mem_alloc(GR_HIDDEN * 2, &m.gamma));
  RK_CORE(tecore_memcpy(m.resid, te_hptr(res), bytes));
  RK_CORE(tecore_memcpy(m.gamma, te_hptr(gam), GR_HIDDEN * 2));

  size_t shape[1] = {GR_COUNT};
  struct tecore_tensor sample, outs[4];
  RK_CORE(tecore_tensor_init(&sample, TECORE_DTYPE_BF16, 1, shape, 0));
  for (int k = 0; k < 4; k++) RK_CORE(tecore_tensor_init(&outs[k], TECORE_DTYPE_BF16, 1, shape, 0));
  struct tegraph_callable_desc d = {.forward = gr_forward, .user = &m, .sample_inputs = &sample,
                                    .ninputs = 1, .outputs = outs, .noutputs = 4, .num_warmup = 2,
                                    .capture_mode = TECORE_CAPTURE_THREAD_LOCAL};
  tegraph_callable_t *cb = NULL;
  tegraph_result_t gr = tegraph_callable_create(&d, NULL, &cb);
  RK_ASSERT(gr == TEGRAPH_SUCCESS, "tegraph_callable_create: %s: %s", tegraph_result_name(gr),
            tegraph_last_error());

  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  tecore_devptr_t xin, yout[4];
  RK_CORE(tecore_mem_alloc(bytes, &xin));
  for (int k = 0; k < 4; k++) RK_CORE(tecore_mem_alloc(bytes, &yout[k]));
  uint16_t h[GR_COUNT], peer[GR_COUNT], got[4][GR_COUNT];
  double sum[GR_COUNT], mag[GR_COUNT];
  struct tegraph_replay_opts ro = {.stream = s, .is_first_microbatch = 1};
  for (int it = 0; it < GR_REPLAYS; it++) {
    gr_input(h, rank, it);
    RK_CORE(tecore_memcpy_async(xin, te_hptr(h), bytes, s));
    for (int k = 0; k < 4; k++) RK_CORE(tecore_memset_d8_async(yout[k], 0xA5, bytes, s));
    struct tecore_tensor in, o[4];
    RK_CORE(tecore_tensor_init(&in, TECORE_DTYPE_BF16, 1, shape, xin));
    for (int k = 0; k < 4; k++) RK_CORE(tecore_tensor_init(&o[k], TECORE_DTYPE_BF16, 1, shape, yout[k]));
    gr = tegraph_callable_forward(cb, &in, 1, NULL, NULL, 0, o, 4, &ro);
    RK_ASSERT(gr == TEGRAPH_SUCCESS, "replay %d: %s: %s", it, tegraph_result_name(gr),
              tegraph_last_error());
    for (int k = 0; k < 4; k++) RK_CORE(tecore_memcpy_async(te_hptr(got[k]), yout[k], bytes, s));
    RK_CORE(tecore_stream_synchronize(s));
    for (size_t i = 0; i < GR_COUNT; i++) sum[i] = mag[i] = 0;
    for (int p = 0; p < n; p++) {
      gr_input(peer, p, it);
      for (size_t i = 0; i < GR_COUNT; i++) {
        double v = te_bf16_to_f32(peer[i]);
        sum[i] += v;
        mag[i] += fabs(v);
      }
    }
    /* the allreduces: float64 within n - 1 f32 roundings and half a bf16
     * ulp; the three algorithms fold in the same order: the same bits */
    for (size_t i = 0; i < GR_COUNT; i++) {
      double g = te_bf16_to_f32(got[0][i]);
      double tol = (n - 1) * 0x1p-24 * mag[i] + 0x1p-8 * fabs(sum[i]) * 1.0001;
      RK_ASSERT(fabs(g - sum[i]) <= tol, "replay %d: Lamport[%zu] %.9g, float64 %.12g (tol %.3g)",
                it, i, g, sum[i], tol);
      RK_ASSERT(got[1][i] == got[0][i] && got[2][i] == got[0][i],
                "replay %d: element %zu: Lamport 0x%04x, one-shot 0x%04x, two-shot 0x%04x", it, i,
                got[0][i], got[1][i], got[2][i]);
    }
    /* the norm of (sum + residual) per row, within a bf16 ulp and a bit */
    for (size_t row = 0; row < GR_COUNT / GR_HIDDEN; row++) {
      double ss = 0, v[GR_HIDDEN];
      for (size_t j = 0; j < GR_HIDDEN; j++) {
        size_t i = row * GR_HIDDEN + j;
        v[j] = (double)te_bf16_to_f32(te_f32_to_bf16((float)te_bf16_to_f32(got[0][i]) +
                                                     te_bf16_to_f32(res[i])));
        ss += v[j] * v[j];
      }
      double rs = 1.0 / sqrt(ss / GR_HIDDEN + 1e-5);
      for (size_t j = 0; j < GR_HIDDEN; j++) {
        size_t i = row * GR_HIDDEN + j;
        double want = v[j] * rs * te_bf16_to_f32(gam[j]), g = te_bf16_to_f32(got[3][i]);
        RK_ASSERT(fabs(g - want) <= 0x1p-7 * fabs(want) + 1e-6,
                  "replay %d: norm[%zu] %.9g, float64 %.9g", it, i, g, want);
      }
    }
    tc_rank_digest(got, sizeof got);
  }
  RK_OK(tecomm_comm_status(m.c, NULL));
  tegraph_result_t dr = tegraph_callable_destroy(cb);
  RK_ASSERT(dr == TEGRAPH_SUCCESS, "tegraph_callable_destroy: %s", tegraph_last_error());
  RK_CORE(tecore_mem_free(xin));
  for (int k = 0; k < 4; k++) RK_CORE(tecore_mem_free(yout[k]));
  RK_CORE(tecore_mem_free(m.resid));
  RK_CORE(tecore_mem_free(m.scratch));
  RK_CORE(tecore_mem_free(m.gamma));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(m.c));
}

START_TEST(graphed_callable_replays_allreduce) {
  static const int ranks[] = {2, 3, 4};
  tc_run_ranks(ranks[_i], rank_graph_callable, NULL, 110);
  tc_expect_same_digest(ranks[_i], "graphed callable outputs");
  tc_shm_release();
}
END_TEST

static Suite *comm_graph_suite(void) {
  setenv("TECORE_VDEV_DEVICES", "8", 0);
  Suite *s = suite_create("comm_graph");
  TCase *tc = te_tcase(s, "callable", 0);
  tcase_add_loop_test(tc, graphed_callable_replays_allreduce, 0, 3);
  return s;
}

TE_TEST_MAIN(comm_graph_suite, TE_TEST_DEVICE)
