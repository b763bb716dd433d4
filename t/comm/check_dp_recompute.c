/* SPDX-License-Identifier: Apache-2.0
 * check_dp_recompute.c -- the data-parallel group (te/comm_dp.h) over a
 * sequence that recomputes activations (tecore_seq_set_recompute), ranks
 * as forked processes (t/lib/comm_ranks.h), on a six-layer F32 MLP
 * (Linear + bias, GELU; one layer a ZeRO-3 gather unit), two microbatches
 * a step:
 *   - ZeRO-0, 1, 2, 3, and 3 and 2 with gradient shards
 *     (TECOMM_DP_GRAD_SHARDS, the gradients reduce-scattered out of a
 *     ring of two layers), each
 *     recomputing the whole model (FULL: the
 *     backward's first group runs six layers' forward again, through
 *     every unit of ZeRO-3's ring of two), three layers a range (FULL),
 *     or the GELUs (SELECTIVE), against the same stage without
 *     recomputation: the outputs, the gradients in this rank's shards
 *     and the parameters after AdamW (tecomm_dp_gather_value) the same
 *     bits (the recomputed forward runs the same kernels on the same
 *     values, the two fusions a range's edge would cut turned off on
 *     both sides), on cuda within RC_TOL of the largest, 2 ranks, three
 *     steps; ZeRO-3's steps replayed from the
 *     captured step graph from the second on (the gathers the recomputed
 *     forward needs inside).  The hooks see each group run again as
 *     TECORE_SEQ_RECOMPUTE: taken for a backward group, it would launch
 *     its buckets before their gradients were written (other bits);
 *     taken for a forward, ZeRO-3 would restart its pass. */
#include "comm_ranks.h"
#include <math.h>
#include <te/comm_dp.h>

enum { L = 6, H = 128, B = 8, NP = 2 * L, MB = 2, NG = L * (H * H + H), STEPS = 3 };
enum mode { PLAIN, WHOLE, THIRDS, SELECT, NMODES };
/* A range's edge cuts a fusion (THIRDS: the backward's dgrad + dgelu +
 * dbias across op 6; SELECTIVE: the forward's Linear + bias + GELU), and
 * another rounding of a gradient, however small, moves a parameter whose
 * gradient is near zero by up to lr * dg / eps in AdamW: the suite turns
 * both fusions off (TECORE_OPS_FUSION_OFF), so that every mode has the
 * plain plans and asks for the same bits.  Where the bits may differ
 * (cuda: a GEMM library's choice) RC_TOL of the largest; the limit leaves
 * 100x over F32 sums of 128 terms */
#define RC_TOL 1e-5
static int rank_of_test;

static tecore_devptr_t dalloc(size_t bytes) {
  tecore_devptr_t p = 0;
  RK_CORE(tecore_mem_alloc(bytes, &p));
  return p;
}

static struct tecore_tensor t2(size_t r, size_t c, tecore_devptr_t p) {
  struct tecore_tensor t;
  size_t sh[2] = {r, c};
  RK_CORE(tecore_tensor_init(&t, TECORE_DTYPE_F32, 2, sh, p));
  return t;
}

/* The recomputed ranges of mode m over n operations (a layer is two:
 * Linear, GELU; the last has no GELU). */
static void mark(tecore_seq_t *q, enum mode m, size_t n) {
  const tecore_seq_recompute_t full = TECORE_SEQ_RECOMPUTE_FULL;
  if (m == WHOLE) RK_CORE(tecore_seq_set_recompute(q, 0, n, full));
  if (m == THIRDS) {
    RK_CORE(tecore_seq_set_recompute(q, 0, 6, full));
    RK_CORE(tecore_seq_set_recompute(q, 6, n - 6, full));
  }
  if (m == SELECT) RK_CORE(tecore_seq_set_recompute(q, 0, n, TECORE_SEQ_RECOMPUTE_SELECTIVE));
}

static tecore_seq_t *model(enum mode m, tecore_stream_t s) {
  struct tecore_seq_config cfg = {.rows = B, .features = H, .dtype = TECORE_DTYPE_F32,
                                  .seed = 11};
  tecore_seq_t *q;
  RK_CORE(tecore_seq_create(&cfg, &q));
  const struct tecore_op_desc lin = {.kind = TECORE_OP_LINEAR, .features = H, .bias = 1},
                              act = {.kind = TECORE_OP_GELU};
  for (size_t l = 0; l < L; l++) {
    RK_CORE(tecore_seq_add(q, &lin, NULL));
    if (l + 1 < L) RK_CORE(tecore_seq_add(q, &act, NULL));
  }
  mark(q, m, 2 * L - 1);
  RK_CORE(tecore_seq_build(q, s));
  return q;
}

static void params(tecore_seq_t *q, struct tecore_seq_param *p) {
  size_t n = 0;
  RK_CORE(tecore_seq_params(q, p, NP, &n));
  RK_ASSERT(n == NP, "%zu parameters", n);
}

/* The group of stage zero (4: ZeRO-3 with TECOMM_DP_GRAD_SHARDS, 5:
 * ZeRO-2 with them): the parameters, the last operation's first; 4 KiB
 * buckets (one layer a ZeRO-3 unit). */
static tecomm_dp_t group(tecomm_comm_t c, tecore_seq_t *q, int zero) {
  struct tecore_seq_param p[NP];
  struct tecomm_dp_tensor t[NP];
  params(q, p);
  for (size_t i = 0; i < NP; i++) {
    const struct tecore_seq_param *r = &p[NP - 1 - i];
    t[i] = (struct tecomm_dp_tensor){.name = r->name, .grad = r->grad.data,
                                     .grad_dtype = TECORE_DTYPE_F32, .value = r->value.data,
                                     .value_dtype = TECORE_DTYPE_F32,
                                     .count = tecore_tensor_numel(&r->value), .op = r->op};
  }
  struct tecomm_dp_desc desc = {.comm = c, .tensors = t, .ntensors = NP, .seq = q,
                                .bucket_bytes = 4096,
                                .zero = zero == 5 ? 2 : zero > 3 ? 3 : zero,
                                .flags = zero > 3 ? TECOMM_DP_GRAD_SHARDS : 0};
  tecomm_dp_t dp = NULL;
  RK_OK(tecomm_dp_create(&desc, &dp));
  return dp;
}

/* One side of the comparison: a model, its group, AdamW over its shards. */
struct side {
  tecore_seq_t *q;
  tecomm_dp_t dp;
  int zero;
  struct tecore_optim_tensor ot[NP];
  tecore_graph_exec_t exec;
};

static void side_init(struct side *d, tecomm_comm_t c, enum mode m, int zero, tecore_stream_t s) {
  d->q = model(m, s);
  d->dp = group(c, d->q, zero);
  d->zero = zero;
  d->exec = NULL;
  struct tecore_seq_param p[NP];
  params(d->q, p);
  for (size_t i = 0; i < NP; i++) {
    const struct tecore_seq_param *r = &p[NP - 1 - i];
    size_t first = 0, n = tecore_tensor_numel(&r->value);
    tecore_devptr_t v = r->value.data, g = r->grad.data;
    if (zero) RK_OK(tecomm_dp_shard(d->dp, i, &first, &n));
    if (zero) RK_OK(tecomm_dp_value_shard(d->dp, i, &v));
    if (zero) RK_OK(tecomm_dp_grad_shard(d->dp, i, &g));
    tecore_devptr_t m1 = dalloc(n ? n * 4 : 4), m2 = dalloc(n ? n * 4 : 4);
    RK_CORE(tecore_memset_d32_async(m1, 0, n ? n : 1, NULL));
    RK_CORE(tecore_memset_d32_async(m2, 0, n ? n : 1, NULL));
    d->ot[i] = (struct tecore_optim_tensor){.param = v, .grad = g,
                                            .exp_avg = m1, .exp_avg_sq = m2, .numel = n,
                                            .grad_dtype = TECORE_DTYPE_F32};
  }
  RK_CORE(tecore_stream_synchronize(NULL));
}

/* The device buffers of a step: MB microbatches' inputs and output
 * gradients, and the outputs. */
struct bufs {
  tecore_devptr_t x[MB], dy[MB], y;
};

/* Seed k's inputs: this rank's rows of each microbatch (dy = w / rows). */
static void draw(struct bufs *z, int rank, int n, uint64_t k) {
  static float x[MB * 2 * B * H], w[MB * 2 * B * H];
  size_t rows = (size_t)MB * (size_t)n * B;
  tc_make_input(x, rows * H, TECORE_DTYPE_F32, 61, 2 * k);
  tc_make_input(w, rows * H, TECORE_DTYPE_F32, 61, 2 * k + 1);
  for (size_t i = 0; i < rows * H; i++) w[i] /= (float)rows;
  for (int m = 0; m < MB; m++) {
    size_t at = ((size_t)m * (size_t)n + (size_t)rank) * B * H;
    RK_CORE(tecore_memcpy(z->x[m], te_hptr(x + at), B * H * 4));
    RK_CORE(tecore_memcpy(z->dy[m], te_hptr(w + at), B * H * 4));
  }
}

static void passes(struct side *d, const struct bufs *z, tecore_stream_t s) {
  RK_CORE(tecore_seq_zero_grad(d->q, s));
  for (int m = 0; m < MB; m++) {
    struct tecore_tensor X = t2(B, H, z->x[m]), Y = t2(B, H, z->y), DY = t2(B, H, z->dy[m]);
    RK_CORE(tecore_seq_forward(d->q, &X, &Y, 0, s));
    if (m == MB - 1) RK_OK(tecomm_dp_arm(d->dp));
    RK_CORE(tecore_seq_backward(d->q, &DY, NULL, s));
  }
  RK_OK(tecomm_dp_finish(d->dp, s));
}

/* Step k's passes (ZeRO-3 from the captured graph from the second on)
 * and the outputs into y (poisoned first). */
static void step(struct side *d, const struct bufs *z, int64_t k, float *y, tecore_stream_t s) {
  RK_CORE(tecore_memset_d32_async(z->y, 0x7fc00000u, B * H, s));   /* poisoned: NaN */
  if (d->zero >= 3 && k == 2) {
    tecore_graph_t g = NULL;
    RK_CORE(tecore_stream_begin_capture(s, TECORE_CAPTURE_THREAD_LOCAL));
    passes(d, z, s);
    RK_CORE(tecore_stream_end_capture(s, &g));
    RK_CORE(tecore_graph_instantiate(&d->exec, g));
    RK_CORE(tecore_graph_destroy(g));
  }
  if (d->exec) RK_CORE(tecore_graph_launch(d->exec, s));
  else passes(d, z, s);
  RK_CORE(tecore_stream_synchronize(s));
  RK_CORE(tecore_memcpy(te_hptr(y), z->y, B * H * 4));
}

/* The gradients in this rank's shards (ZeRO-0: whole), the group's
 * tensor order, NaN where outside. */
static void shard_grads(const struct side *d, float *out) {
  struct tecore_seq_param p[NP];
  params(d->q, p);
  size_t at = 0;
  for (size_t i = 0; i < NP; i++) {
    const struct tecore_seq_param *r = &p[NP - 1 - i];
    size_t cnt = tecore_tensor_numel(&r->value), first = 0, n = cnt;
    tecore_devptr_t g = r->grad.data;
    if (d->zero) RK_OK(tecomm_dp_shard(d->dp, i, &first, &n));
    if (d->zero) RK_OK(tecomm_dp_grad_shard(d->dp, i, &g));
    for (size_t e = 0; e < cnt; e++) out[at + e] = NAN;
    if (n) RK_CORE(tecore_memcpy(te_hptr(out + at + first), g, n * 4));
    at += cnt;
  }
}

/* Every tensor whole (tecomm_dp_gather_value), the group's order. */
static void values(const struct side *d, float *out, tecore_stream_t s) {
  struct tecore_seq_param p[NP];
  params(d->q, p);
  tecore_devptr_t w = dalloc(H * H * 4);
  size_t at = 0;
  for (size_t i = 0; i < NP; i++) {
    size_t cnt = tecore_tensor_numel(&p[NP - 1 - i].value);
    RK_CORE(tecore_memset_d32_async(w, 0x7fc00000u, cnt, s));   /* poisoned: NaN */
    RK_OK(tecomm_dp_gather_value(d->dp, i, w, s));
    RK_CORE(tecore_stream_synchronize(s));
    RK_CORE(tecore_memcpy(te_hptr(out + at), w, cnt * 4));
    at += cnt;
  }
  RK_CORE(tecore_mem_free(w));
}

/* The same plans, forward and backward: the same kernels run. */
static int same_plans(tecore_seq_t *a, tecore_seq_t *b) {
  for (int dir = TECORE_SEQ_FORWARD; dir <= TECORE_SEQ_BACKWARD; dir++) {
    char pa[4096], pb[4096];
    RK_CORE(tecore_seq_describe(a, (tecore_seq_dir_t)dir, pa, sizeof pa, NULL));
    RK_CORE(tecore_seq_describe(b, (tecore_seq_dir_t)dir, pb, sizeof pb, NULL));
    if (strcmp(pa, pb) != 0) return 0;
  }
  return 1;
}

/* a against b (without): the same bits where the plans are the same,
 * else within RC_TOL of b's largest magnitude; NaN where both are
 * (outside a shard), on one side only a difference. */
static void expect_same(const float *a, const float *b, size_t n, int bits, const char *what,
                        const char *how, int64_t k) {
  double big = 0, worst = 0;
  for (size_t i = 0; i < n; i++)
    if (!isnan(b[i]) && fabs(b[i]) > big) big = fabs(b[i]);
  for (size_t i = 0; i < n; i++) {
    int nan_a = isnan(a[i]), nan_b = isnan(b[i]);
    double d = nan_a || nan_b ? (nan_a == nan_b ? 0 : INFINITY) : fabs((double)a[i] - b[i]);
    RK_ASSERT(bits ? memcmp(&a[i], &b[i], 4) == 0 : d <= RC_TOL * big,
              "step %lld, %s: %s [%zu]: %a, without %a (%s)", (long long)k, how, what, i,
              (double)a[i], (double)b[i], bits ? "bits asked" : "beyond RC_TOL");
    if (d > worst) worst = d;
  }
  if (!bits && rank_of_test == 0 && k == 1)
    fprintf(stderr, "# %s: %s: worst |a - b| %.3g of the largest %.3g (RC_TOL %.0e)\n", how,
            what, worst, big, RC_TOL);
}

static void adam(struct side *d, int64_t k, tecore_stream_t s) {
  struct tecore_adam_config ac = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                                  .weight_decay = 0.1, .step = k, .flags = TECORE_ADAM_W};
  RK_CORE(tecore_adam_step(d->ot, NP, &ac, 0, 0, s));
  if (d->zero == 1 || d->zero == 2 || d->zero == 5) RK_OK(tecomm_dp_gather(d->dp, s));
  RK_CORE(tecore_stream_synchronize(s));
}

static void side_free(struct side *d) {
  if (d->exec) RK_CORE(tecore_graph_exec_destroy(d->exec));
  RK_OK(tecomm_dp_destroy(d->dp));
  RK_CORE(tecore_seq_destroy(d->q));
}

static const char *const mode_name[NMODES] = {"none", "FULL whole model", "FULL by 3 layers",
                                              "SELECTIVE"};

struct arg {
  enum mode m;
  int zero;
};

static void rank_main(int rank, int n, void *argp) {
  const struct arg *a = argp;
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  static struct side plain, rc;
  side_init(&plain, c, PLAIN, a->zero, s);
  side_init(&rc, c, a->m, a->zero, s);
  struct bufs z;
  for (int m = 0; m < MB; m++) z.x[m] = dalloc(B * H * 4), z.dy[m] = dalloc(B * H * 4);
  z.y = dalloc(B * H * 4);
  static float y0[B * H], y1[B * H], g0[NG], g1[NG], v0[NG], v1[NG];
  char how[64];
  snprintf(how, sizeof how, "ZeRO-%d%s, %s", a->zero == 5 ? 2 : a->zero > 3 ? 3 : a->zero,
           a->zero > 3 ? " (gradient shards)" : "", mode_name[a->m]);
  rank_of_test = rank;
  RK_ASSERT(same_plans(plain.q, rc.q), "%s: the plans differ (TECORE_OPS_FUSION_OFF?)", how);
  tecore_backend_t be;
  RK_CORE(tecore_backend(&be));
  const int bits = be == TECORE_BACKEND_VDEV;
  for (int64_t k = 1; k <= STEPS; k++) {
    draw(&z, rank, n, 700 + (uint64_t)k);
    step(&plain, &z, k, y0, s);
    step(&rc, &z, k, y1, s);
    expect_same(y1, y0, B * H, bits, "output", how, k);
    shard_grads(&plain, g0);
    shard_grads(&rc, g1);
    expect_same(g1, g0, NG, bits, "gradient", how, k);
    adam(&plain, k, s);
    adam(&rc, k, s);
    values(&plain, v0, s);
    values(&rc, v1, s);
    expect_same(v1, v0, NG, bits, "parameter after AdamW", how, k);
  }
  side_free(&plain);
  side_free(&rc);
  (void)tecomm_comm_destroy(c);
}

/* _i: the stage (0-3; 4 ZeRO-3 and 5 ZeRO-2 with gradient shards) and
 * the mode (WHOLE, THIRDS, SELECT). */
START_TEST(dp_with_recompute_takes_the_steps_without) {
  struct arg a = {.m = (enum mode)(WHOLE + _i / 6), .zero = _i % 6};
  tc_run_ranks(2, rank_main, &a, 300);
  tc_shm_release();
}
END_TEST

static Suite *dp_rc_suite(void) {
  setenv("TECORE_VDEV_DEVICES", "8", 0);
  setenv("TECORE_OPS_FUSION_OFF", "linear+bias+gelu,dgrad+dgelu+dbias", 1);
  Suite *s = suite_create("comm_dp_recompute");
  TCase *tc = te_tcase(s, "dp_recompute", 0);
  tcase_add_loop_test(tc, dp_with_recompute_takes_the_steps_without, 0, 18);
  return s;
}

TE_TEST_MAIN(dp_rc_suite, TE_TEST_DEVICE)
