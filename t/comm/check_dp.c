/* SPDX-License-Identifier: Apache-2.0
 * check_dp.c -- the data-parallel group (te/comm_dp.h), ranks as forked
 * processes (t/lib/comm_ranks.h) training a two-Linear MLP (F32 fuser
 * sequence: Linear + bias, GELU, Linear + bias; loss sum(y .* W) / rows):
 *   - dp = 2 and 4 ranks of B rows each give the gradients of one process
 *     with N * B rows, within DP_TOL of the largest gradient, over
 *     DP_SEEDS fresh inputs (the worst printed beside the tolerance);
 *     buckets small enough that most launch from the backward's hooks;
 *     every rank's reduced gradients the same bits;
 *   - ZeRO-1 and ZeRO-2 against ZeRO-0: the gradients in each rank's
 *     shard, and AdamW run on the shards only, then tecomm_dp_gather, give
 *     every rank ZeRO-0's parameters bit for bit (reduce-scatter folds the
 *     ranks in allreduce's order), 2 and 4 ranks; the global norm's parts;
 *     tecomm_dp_value_shard and tecomm_dp_gather_value below ZeRO-3;
 *   - ZeRO-3 against ZeRO-0 on a six-layer model, two microbatches a
 *     step: outputs, the gradients in each rank's shards and the
 *     parameters after AdamW (tecomm_dp_gather_value) the same bits, eager
 *     and replayed from the captured step graph, 2 and 4 ranks; the
 *     parameters' bytes a step holds are ZeRO-0's less the values plus a
 *     shard and two layers; destroy gives the sequence its values back;
 *     with each bias a Bias operation, the fused backward group over
 *     [Linear, Bias, GELU, Linear] gathered as one unit;
 *   - ZeRO-3 with TECOMM_DP_GRAD_SHARDS (the gradients reduce-scattered
 *     out of a ring of two layers into shards): one microbatch a step
 *     ZeRO-0's bits as above; two, each reduced then added in the shard,
 *     within Z3_MB_TOL of the tensor's largest gradient; the sequence's
 *     gradient bytes freed and the group holding a shard and two layers;
 *     a rank killed before the backward named;
 *   - ranks whose models differ (a tensor's count, the stage, the
 *     recipe) refused on every rank with the field named;
 *   - gradients in a region of symmetric memory (tecore_seq_set_grad_region
 *     over tecomm_mem_alloc): every bucket reduced in place under ZeRO-0
 *     and ZeRO-1 (tecomm_dp_describe says so; packed under ZeRO-2, and
 *     where the gradients are not one span), the same bits as the packed
 *     path, gradients and parameters after AdamW, 2 and 4 ranks; one rank
 *     in place where another packs: refused, the field named;
 *   - a rank killed mid-step, packed, in place and ZeRO-3: the other's finish or
 *     status names it within TECOMM_TIMEOUT (1 s here), no hang;
 *   - argument errors name the argument. */
#include "comm_ranks.h"
#include <math.h>
#include <te/comm_dp.h>

enum { F = 32, H = 48, O = 16, B = 8, DP_SEEDS = 200 };
/* F32 sums of at most 4 * B rows in another order than one process's:
 * observed worst ~1e-7 of the largest gradient (the test prints it); the
 * limit leaves 100x */
#define DP_TOL 1e-5

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

/* The gradient region in symmetric memory of the communicator ctx
 * (tecore_seq_set_grad_region; collective: every rank builds alike). */
static tecore_result_t sym_alloc(void *ctx, size_t bytes, tecore_devptr_t *base) {
  tecomm_result_t r = tecomm_mem_alloc((tecomm_comm_t)ctx, bytes, base);
  return r == TECOMM_SUCCESS ? TECORE_SUCCESS : TECORE_ERR_NOMEM;
}
static tecore_result_t sym_release(void *ctx, tecore_devptr_t base) {
  tecore_result_t r = tecore_ctx_synchronize();
  if (r != TECORE_SUCCESS) return r;
  return tecomm_mem_free((tecomm_comm_t)ctx, base) == TECOMM_SUCCESS ? TECORE_SUCCESS
                                                                      : TECORE_ERR_INVALID;
}

/* The MLP over rows rows (the same parameters for every rows: one seed);
 * with sym, its gradients in sym's symmetric memory. */
static tecore_seq_t *mlp_in(size_t rows, tecore_stream_t s, tecomm_comm_t sym) {
  struct tecore_seq_config cfg = {.rows = rows, .features = F, .dtype = TECORE_DTYPE_F32,
                                  .seed = 7};
  tecore_seq_t *q;
  RK_CORE(tecore_seq_create(&cfg, &q));
  const struct tecore_op_desc d[] = {{.kind = TECORE_OP_LINEAR, .features = H, .bias = 1},
                                     {.kind = TECORE_OP_GELU},
                                     {.kind = TECORE_OP_LINEAR, .features = O, .bias = 1}};
  for (size_t k = 0; k < 3; k++) RK_CORE(tecore_seq_add(q, &d[k], NULL));
  struct tecore_seq_grad_region g = {.alloc = sym_alloc, .release = sym_release, .ctx = sym};
  if (sym) RK_CORE(tecore_seq_set_grad_region(q, &g));
  RK_CORE(tecore_seq_build(q, s));
  return q;
}

static tecore_seq_t *mlp(size_t rows, tecore_stream_t s) { return mlp_in(rows, s, NULL); }

enum { NP = 4 };   /* fc1 weight, bias, fc2 weight, bias */
static void params(tecore_seq_t *q, struct tecore_seq_param *p) {
  size_t n = 0;
  RK_CORE(tecore_seq_params(q, p, NP, &n));
  RK_ASSERT(n == NP, "%zu parameters", n);
}

/* The group's tensors: the parameters in the order the backward finishes
 * them (the last operation's first). */
static void dp_tensors(const struct tecore_seq_param *p, struct tecomm_dp_tensor *t) {
  for (size_t i = 0; i < NP; i++) {
    const struct tecore_seq_param *q = &p[NP - 1 - i];
    t[i] = (struct tecomm_dp_tensor){.name = q->name, .grad = q->grad.data,
                                     .grad_dtype = TECORE_DTYPE_F32, .value = q->value.data,
                                     .value_dtype = TECORE_DTYPE_F32,
                                     .count = tecore_tensor_numel(&q->value), .op = q->op};
  }
}

static tecomm_dp_t dp_make_f(tecomm_comm_t c, tecore_seq_t *q, int zero, size_t bucket,
                             unsigned flags) {
  struct tecore_seq_param p[NP];
  struct tecomm_dp_tensor t[NP];
  params(q, p);
  dp_tensors(p, t);
  struct tecomm_dp_desc desc = {.comm = c, .tensors = t, .ntensors = NP, .seq = q,
                                .bucket_bytes = bucket, .zero = zero, .flags = flags};
  tecomm_dp_t dp = NULL;
  RK_OK(tecomm_dp_create(&desc, &dp));
  return dp;
}

static tecomm_dp_t dp_make(tecomm_comm_t c, tecore_seq_t *q, int zero, size_t bucket) {
  return dp_make_f(c, q, zero, bucket, 0);
}

/* Seed k's global input [rows][F] and loss weights [rows][O] (every rank
 * draws the same). */
static void draw(float *x, float *w, size_t rows, uint64_t k) {
  tc_make_input(x, rows * F, TECORE_DTYPE_F32, 99, 2 * k);
  tc_make_input(w, rows * O, TECORE_DTYPE_F32, 99, 2 * k + 1);
}

/* One step of q on rows rows of x (dy = w / rows): zeroed gradients,
 * forward, (armed) backward, finish. */
static void step(tecore_seq_t *q, tecomm_dp_t dp, const float *x, const float *w, size_t rows,
                 tecore_devptr_t dx, tecore_devptr_t dy, tecore_devptr_t y, tecore_stream_t s) {
  static float dyh[4 * B * O];
  for (size_t i = 0; i < rows * O; i++) dyh[i] = w[i] / (float)rows;
  RK_CORE(tecore_memcpy_async(dx, te_hptr(x), rows * F * 4, s));
  RK_CORE(tecore_memcpy_async(dy, te_hptr(dyh), rows * O * 4, s));
  RK_CORE(tecore_seq_zero_grad(q, s));
  struct tecore_tensor X = t2(rows, F, dx), Y = t2(rows, O, y), DY = t2(rows, O, dy);
  RK_CORE(tecore_seq_forward(q, &X, &Y, 0, s));
  if (dp) RK_OK(tecomm_dp_arm(dp));
  RK_CORE(tecore_seq_backward(q, &DY, NULL, s));
  if (dp) RK_OK(tecomm_dp_finish(dp, s));
  RK_CORE(tecore_stream_synchronize(s));
}

/* The parameters' gradients (or values) of q, concatenated, on the host. */
static size_t fetch(tecore_seq_t *q, int values, float *out) {
  struct tecore_seq_param p[NP];
  params(q, p);
  size_t n = 0;
  for (size_t i = 0; i < NP; i++) {
    const struct tecore_tensor *t = values ? &p[i].value : &p[i].grad;
    size_t k = tecore_tensor_numel(t);
    RK_CORE(tecore_memcpy(te_hptr(out + n), t->data, k * 4));
    n += k;
  }
  return n;
}

enum { NG = F * H + H + H * O + O };

/* ---- dp N ranks == one process of N * B rows ------------------------------------ */

static void rank_equals_one(int rank, int n, void *arg) {
  (void)arg;
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  tecore_seq_t *qd = mlp(B, s), *qr = mlp((size_t)n * B, s);
  /* 2 KiB buckets: fc2's bias and weight, fc1's bias, fc1's weight apart */
  tecomm_dp_t dp = dp_make(c, qd, 0, 2048);
  size_t rows = (size_t)n * B;
  tecore_devptr_t dx = dalloc(rows * F * 4), dy = dalloc(rows * O * 4), y = dalloc(rows * O * 4);
  static float x[4 * B * F], w[4 * B * O], gd[NG], gr[NG];
  double worst = 0;
  for (uint64_t k = 0; k < DP_SEEDS; k++) {
    draw(x, w, rows, k);
    memset(gd, 0xff, sizeof gd);   /* poisoned: NaN */
    step(qd, dp, x + (size_t)rank * B * F, w + (size_t)rank * B * O, B, dx, dy, y, s);
    step(qr, NULL, x, w, rows, dx, dy, y, s);
    fetch(qd, 0, gd);
    fetch(qr, 0, gr);
    double big = 0, diff = 0;
    for (size_t i = 0; i < NG; i++) big = fmax(big, fabs(gr[i]));
    for (size_t i = 0; i < NG; i++) diff = fmax(diff, fabs((double)gd[i] - gr[i]));
    RK_ASSERT(!isnan(diff), "seed %llu: a gradient is NaN", (unsigned long long)k);
    worst = fmax(worst, diff / big);
    tc_rank_digest(gd, sizeof gd);
  }
  tc_shm->value[rank][0] = worst;
  RK_ASSERT(worst <= DP_TOL, "dp %d: gradients differ from one process's by %g of the largest "
            "(limit %g)", n, worst, DP_TOL);
  RK_OK(tecomm_dp_destroy(dp));
  RK_CORE(tecore_seq_destroy(qd));
  RK_CORE(tecore_seq_destroy(qr));
  (void)tecomm_comm_destroy(c);
}

START_TEST(dp_ranks_equal_one_process) {
  int n = _i ? 4 : 2;
  tc_run_ranks(n, rank_equals_one, NULL, 300);
  tc_expect_same_digest(n, "the reduced gradients");
  double worst = 0;
  for (int r = 0; r < n; r++) worst = fmax(worst, tc_shm->value[r][0]);
  printf("# dp %d x %d rows vs one process of %d rows, %d seeds: worst gradient difference %.3g "
         "of the largest (limit %g)\n", n, B, n * B, DP_SEEDS, worst, DP_TOL);
  tc_shm_release();
}
END_TEST

/* ---- ZeRO-1 and ZeRO-2 against ZeRO-0 ------------------------------------------- */

struct adam_set {
  struct tecore_optim_tensor ot[NP];
};

/* AdamW state for dp's tensors: all of each (ZeRO-0) or this rank's shard. */
static void adam_init(tecomm_dp_t dp, tecore_seq_t *q, int zero, struct adam_set *a) {
  struct tecore_seq_param p[NP];
  struct tecomm_dp_tensor t[NP];
  params(q, p);
  dp_tensors(p, t);
  for (size_t i = 0; i < NP; i++) {
    size_t first = 0, n = t[i].count;
    if (zero) RK_OK(tecomm_dp_shard(dp, i, &first, &n));
    tecore_devptr_t m = dalloc(n ? n * 4 : 4), v = dalloc(n ? n * 4 : 4);
    RK_CORE(tecore_memset_d32_async(m, 0, n ? n : 1, NULL));
    RK_CORE(tecore_memset_d32_async(v, 0, n ? n : 1, NULL));
    a->ot[i] = (struct tecore_optim_tensor){.param = t[i].value + first * 4,
                                            .grad = t[i].grad + first * 4, .exp_avg = m,
                                            .exp_avg_sq = v, .numel = n,
                                            .grad_dtype = TECORE_DTYPE_F32};
  }
  RK_CORE(tecore_stream_synchronize(NULL));
}

static void adam(struct adam_set *a, int64_t stepno, tecore_stream_t s) {
  struct tecore_adam_config ac = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                                  .weight_decay = 0.1, .step = stepno, .flags = TECORE_ADAM_W};
  RK_CORE(tecore_adam_step(a->ot, NP, &ac, 0, 0, s));
}

/* |a - b| at most tol of the largest |b| (tol 0: the same bits) */
static void same(const float *a, const float *b, size_t n, double tol, const char *what, int z) {
  double big = 0;
  for (size_t i = 0; i < n; i++) big = fmax(big, fabs(b[i]));
  for (size_t i = 0; i < n; i++) {
    if (tol == 0)
      RK_ASSERT(memcmp(&a[i], &b[i], 4) == 0, "ZeRO-%d %s [%zu]: %a, ZeRO-0 %a", z, what, i,
                (double)a[i], (double)b[i]);
    else
      RK_ASSERT(fabs((double)a[i] - b[i]) <= tol * big, "ZeRO-%d %s [%zu]: %g, ZeRO-0 %g", z,
                what, i, (double)a[i], (double)b[i]);
  }
}

/* The gradients of q in this rank's shards, against ref (all of them). */
static void same_shard_grads(tecomm_dp_t dp, tecore_seq_t *q, const float *ref, double tol,
                             int z) {
  static float g[NG];
  fetch(q, 0, g);
  struct tecore_seq_param p[NP];
  params(q, p);
  size_t base[NP], at = 0;
  for (size_t i = 0; i < NP; i++) base[i] = at, at += tecore_tensor_numel(&p[i].value);
  for (size_t i = 0; i < NP; i++) {
    size_t first, n, k = NP - 1 - i;   /* the group's tensor i is parameter k */
    RK_OK(tecomm_dp_shard(dp, i, &first, &n));
    same(g + base[k] + first, ref + base[k] + first, n, tol, "gradient", z);
  }
}

/* The global norm from the parts, against the host's of ref. */
static void same_norm(tecomm_dp_t dp, const float *ref, tecore_stream_t s) {
  struct tecore_tensor vec;
  RK_OK(tecomm_dp_norm_parts(dp, &vec, s));
  size_t wsb = 0;
  RK_CORE(tecore_l2norm_multi_workspace_size(&vec, 1, &wsb));
  tecore_devptr_t ws = dalloc(wsb ? wsb : 8), nd = dalloc(4);
  RK_CORE(tecore_l2norm_multi(&vec, 1, ws, wsb, nd, 0, s));
  float got = 0;
  RK_CORE(tecore_memcpy_async(te_hptr(&got), nd, 4, s));
  RK_CORE(tecore_stream_synchronize(s));
  double want = 0;
  for (size_t i = 0; i < NG; i++) want += (double)ref[i] * ref[i];
  want = sqrt(want);
  RK_ASSERT(fabs(got - want) <= 1e-5 * want, "global norm %.9g, want %.9g", (double)got, want);
  RK_CORE(tecore_mem_free(ws));
  RK_CORE(tecore_mem_free(nd));
}

/* Below ZeRO-3 a shard lies in the value itself, and a tensor's whole
 * value is a copy of it (no rank takes part): the same bits. */
static void same_value_calls(tecomm_dp_t dp, tecore_seq_t *q, tecore_stream_t s) {
  struct tecore_seq_param p[NP];
  struct tecomm_dp_tensor t[NP];
  params(q, p);
  dp_tensors(p, t);
  static float want[H * F], got[H * F];
  tecore_devptr_t w = dalloc(H * F * 4);
  for (size_t i = 0; i < NP; i++) {
    size_t first, cnt;
    tecore_devptr_t at = 0;
    RK_OK(tecomm_dp_shard(dp, i, &first, &cnt));
    RK_OK(tecomm_dp_value_shard(dp, i, &at));
    RK_ASSERT(at == (cnt ? t[i].value + first * 4 : 0), "tensor %zu: shard at 0x%llx", i,
              (unsigned long long)at);
    RK_CORE(tecore_memset_d32_async(w, 0x7fc00000u, t[i].count, s));   /* poisoned: NaN */
    RK_OK(tecomm_dp_gather_value(dp, i, w, s));
    RK_CORE(tecore_stream_synchronize(s));
    RK_CORE(tecore_memcpy(te_hptr(got), w, t[i].count * 4));
    RK_CORE(tecore_memcpy(te_hptr(want), t[i].value, t[i].count * 4));
    RK_ASSERT(memcmp(got, want, t[i].count * 4) == 0, "tensor %zu: gather_value differs", i);
  }
  RK_CORE(tecore_mem_free(w));
}

static void rank_zero_stages(int rank, int n, void *arg) {
  (void)arg;
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  tecore_seq_t *q[3];
  tecomm_dp_t dp[3];
  struct adam_set a[3];
  for (int z = 0; z < 3; z++) {
    q[z] = mlp(B, s);
    dp[z] = dp_make(c, q[z], z, 2048);
    adam_init(dp[z], q[z], z, &a[z]);
  }
  tecore_devptr_t dx = dalloc(B * F * 4), dy = dalloc(B * O * 4), y = dalloc(B * O * 4);
  static float x[4 * B * F], w[4 * B * O], g0[NG], v0[NG], v[NG];
  /* reduce-scatter folds every block in rank order, as the allreduce
   * does (tecomm_reduce_scatter(3)): the same bits on any number of ranks */
  double tol = 0;
  (void)n;
  for (int64_t k = 1; k <= 3; k++) {
    draw(x, w, (size_t)n * B, 1000 + (uint64_t)k);
    for (int z = 0; z < 3; z++)
      step(q[z], dp[z], x + (size_t)rank * B * F, w + (size_t)rank * B * O, B, dx, dy, y, s);
    fetch(q[0], 0, g0);
    same_norm(dp[0], g0, s);
    same_norm(dp[2], g0, s);
    for (int z = 1; z < 3; z++) same_shard_grads(dp[z], q[z], g0, tol, z);
    for (int z = 0; z < 3; z++) adam(&a[z], k, s);
    for (int z = 1; z < 3; z++) RK_OK(tecomm_dp_gather(dp[z], s));
    RK_CORE(tecore_stream_synchronize(s));
    for (int z = 0; z < 3; z++) same_value_calls(dp[z], q[z], s);
    fetch(q[0], 1, v0);
    for (int z = 1; z < 3; z++) {
      memset(v, 0, sizeof v);
      fetch(q[z], 1, v);
      same(v, v0, NG, tol, "parameter after AdamW and the gather", z);
    }
    tc_rank_digest(v0, sizeof v0);
  }
  for (int z = 0; z < 3; z++) {
    RK_OK(tecomm_dp_destroy(dp[z]));
    RK_CORE(tecore_seq_destroy(q[z]));
  }
  (void)tecomm_comm_destroy(c);
}

START_TEST(zero_1_2_take_zero_0_steps) {
  int n = _i ? 4 : 2;
  tc_run_ranks(n, rank_zero_stages, NULL, 300);
  tc_expect_same_digest(n, "the parameters after three steps");
  tc_shm_release();
}
END_TEST

/* ---- buckets reduced where the gradients lie ------------------------------------ */

/* dp's describe line says want buckets in place (and also, when given). */
static void expect_inplace(tecomm_dp_t dp, size_t want, const char *also) {
  char line[1024], key[64];
  size_t need = 0;
  RK_OK(tecomm_dp_describe(dp, line, sizeof line, &need));
  RK_ASSERT(need < sizeof line && strlen(line) == need, "describe: %zu bytes, \"%s\"", need, line);
  snprintf(key, sizeof key, "(%zu in place,", want);
  RK_ASSERT(strstr(line, key) != NULL, "describe: \"%s\", want \"%s\"", line, key);
  RK_ASSERT(!also || strstr(line, also), "describe: \"%s\", want \"%s\"", line, also);
}

static void same_bits(const float *a, const float *b, size_t n, const char *what) {
  for (size_t i = 0; i < n; i++)
    RK_ASSERT(memcmp(&a[i], &b[i], 4) == 0, "%s [%zu]: in place %a, packed %a", what, i,
              (double)a[i], (double)b[i]);
}

/* The group's tensors 1 and 3 (the weights) alone, in one bucket: fc1's
 * bias lies between them, so they are no span. */
static void expect_gap_packed(tecomm_comm_t c, tecore_seq_t *q) {
  struct tecore_seq_param p[NP];
  struct tecomm_dp_tensor t[NP], w[2];
  params(q, p);
  dp_tensors(p, t);
  w[0] = t[1], w[1] = t[3];
  w[0].op = w[1].op = TECOMM_DP_NO_OP;
  struct tecomm_dp_desc desc = {.comm = c, .tensors = w, .ntensors = 2};
  tecomm_dp_t dp = NULL;
  RK_OK(tecomm_dp_create(&desc, &dp));
  expect_inplace(dp, 0, "gradients not contiguous");
  RK_OK(tecomm_dp_destroy(dp));
}

struct inplace_case {
  int zero;
  size_t bucket;   /* 0: one bucket of the four tensors; 2048: one each */
};

static void rank_inplace(int rank, int n, void *arg) {
  const struct inplace_case *ic = arg;
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  tecore_seq_t *qp = mlp(B, s), *qi = mlp_in(B, s, c);
  tecomm_dp_t dp = dp_make(c, qp, ic->zero, ic->bucket), di = dp_make(c, qi, ic->zero, ic->bucket);
  /* the sequence's own allocations: apart, each in no symmetric memory */
  expect_inplace(dp, 0, ic->zero == 2 ? "ZeRO-2"
                        : ic->bucket ? "not in one symmetric allocation"
                                     : "gradients not contiguous");
  expect_inplace(di, ic->zero == 2 ? 0 : ic->bucket ? NP : 1, NULL);
  expect_gap_packed(c, qi);
  struct adam_set a[2];
  adam_init(dp, qp, ic->zero, &a[0]);
  adam_init(di, qi, ic->zero, &a[1]);
  tecore_devptr_t dx = dalloc(B * F * 4), dy = dalloc(B * O * 4), y = dalloc(B * O * 4);
  static float x[4 * B * F], w[4 * B * O], gp[NG], gi[NG], vp[NG], vi[NG];
  for (int64_t k = 1; k <= 3; k++) {
    draw(x, w, (size_t)n * B, 3000 + (uint64_t)k);
    memset(gi, 0xff, sizeof gi);   /* poisoned: NaN */
    step(qp, dp, x + (size_t)rank * B * F, w + (size_t)rank * B * O, B, dx, dy, y, s);
    step(qi, di, x + (size_t)rank * B * F, w + (size_t)rank * B * O, B, dx, dy, y, s);
    fetch(qp, 0, gp);
    fetch(qi, 0, gi);
    same_bits(gi, gp, NG, "reduced gradient");
    adam(&a[0], k, s);
    adam(&a[1], k, s);
    if (ic->zero) RK_OK(tecomm_dp_gather(dp, s));
    if (ic->zero) RK_OK(tecomm_dp_gather(di, s));
    RK_CORE(tecore_stream_synchronize(s));
    fetch(qp, 1, vp);
    fetch(qi, 1, vi);
    same_bits(vi, vp, NG, "parameter after AdamW");
    tc_rank_digest(vi, sizeof vi);
  }
  RK_OK(tecomm_dp_destroy(dp));
  RK_OK(tecomm_dp_destroy(di));
  RK_CORE(tecore_seq_destroy(qp));
  RK_CORE(tecore_seq_destroy(qi));   /* its region back to c */
  (void)tecomm_comm_destroy(c);
}

/* ZeRO-0 and ZeRO-1, one bucket and four, 2 ranks (then 4; and 3, where
 * fc2's 16-element bias is a span no rank count divides): the same bits
 * as the packed path; ZeRO-2 packs. */
START_TEST(inplace_buckets_same_bits_as_packed) {
  static const struct inplace_case cases[] = {{0, 0}, {0, 2048}, {1, 0}, {1, 2048}, {2, 0},
                                              {0, 0}, {1, 2048}};
  int n = _i == 5 ? 4 : _i == 6 ? 3 : 2;
  struct inplace_case ic = cases[_i];
  tc_run_ranks(n, rank_inplace, &ic, 300);
  tc_expect_same_digest(n, "the parameters after three steps");
  tc_shm_release();
}
END_TEST

/* TECOMM_DP_INPLACE=0 on every rank: the region's buckets packed. */
static void rank_inplace_off(int rank, int n, void *arg) {
  (void)arg;
  setenv("TECOMM_DP_INPLACE", "0", 1);
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  tecore_seq_t *q = mlp_in(B, s, c);
  tecomm_dp_t dp = dp_make(c, q, 0, 2048);
  expect_inplace(dp, 0, "TECOMM_DP_INPLACE=0");
  RK_OK(tecomm_dp_destroy(dp));
  RK_CORE(tecore_seq_destroy(q));
  (void)tecomm_comm_destroy(c);
}

START_TEST(inplace_off_packs_every_bucket) {
  tc_run_ranks(2, rank_inplace_off, NULL, 120);
  tc_shm_release();
}
END_TEST

/* The last rank's first bucket is packed (its gradient moved out of the
 * region, or TECOMM_DP_INPLACE=0 there), the others' in place: refused on
 * every rank, the field named. */
static void rank_inplace_mismatch(int rank, int n, void *arg) {
  const int k = *(const int *)arg;   /* 0: a gradient moved; 1: TECOMM_DP_INPLACE=0 there */
  if (k == 1 && rank == n - 1) setenv("TECOMM_DP_INPLACE", "0", 1);
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  tecore_seq_t *q = mlp_in(B, s, c);
  struct tecore_seq_param p[NP];
  struct tecomm_dp_tensor t[NP];
  params(q, p);
  dp_tensors(p, t);
  tecore_devptr_t moved = dalloc(O * 4);
  if (k == 0 && rank == n - 1) t[0].grad = moved;
  struct tecomm_dp_desc desc = {.comm = c, .tensors = t, .ntensors = NP, .seq = q,
                                .bucket_bytes = 2048};
  tecomm_dp_t dp = NULL;
  RK_EXPECT(TECOMM_ERR_MISMATCH, "tensor 0 (bias): its bucket reduced in place",
            tecomm_dp_create(&desc, &dp));
  RK_ASSERT(dp == NULL, "a refused group was handed out");
  RK_CORE(tecore_mem_free(moved));
  RK_CORE(tecore_seq_destroy(q));
  (void)tecomm_comm_destroy(c);
}

START_TEST(inplace_on_one_rank_only_refused) {
  int k = _i;
  tc_run_ranks(2, rank_inplace_mismatch, &k, 120);
  tc_shm_release();
}
END_TEST

/* ---- models that differ --------------------------------------------------------- */

static void rank_mismatch(int rank, int n, void *arg) {
  int k = *(const int *)arg;
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  tecore_seq_t *q = mlp(B, s);
  struct tecore_seq_param p[NP];
  struct tecomm_dp_tensor t[NP];
  params(q, p);
  dp_tensors(p, t);
  struct tecore_recipe rc;
  RK_CORE(tecore_recipe_init(&rc, TECORE_RECIPE_DELAYED));
  struct tecomm_dp_desc desc = {.comm = c, .tensors = t, .ntensors = NP, .seq = q,
                                .zero = 1, .recipe = &rc};
  static const char *const field[] = {"tensor 2 (bias): count", "ZeRO stage", "margin",
                                      "value_dtype", "desc->flags"};
  if (k == 4) desc.zero = 3;
  if (rank == n - 1) {   /* the last rank's model differs */
    if (k == 0) t[2].count--;
    if (k == 1) desc.zero = 2;
    if (k == 2) rc.margin = 3;
    if (k == 3) t[1].value_dtype = TECORE_DTYPE_BF16;
    if (k == 4) desc.flags = TECOMM_DP_GRAD_SHARDS;
  }
  tecomm_dp_t dp = NULL;
  RK_EXPECT(TECOMM_ERR_MISMATCH, field[k], tecomm_dp_create(&desc, &dp));
  RK_ASSERT(dp == NULL, "a refused group was handed out");
  RK_CORE(tecore_seq_destroy(q));
  (void)tecomm_comm_destroy(c);
}

START_TEST(mismatched_models_refused_with_the_field_named) {
  int k = _i;
  tc_run_ranks(2, rank_mismatch, &k, 120);
  tc_shm_release();
}
END_TEST

/* ---- ZeRO-3: the values sharded, gathered by the passes ------------------------- */

/* A deeper model, so that a ring of two buckets is less than the whole:
 * ZL Linears [ZH][ZH] with bias and a GELU between, F32; with sep, each
 * bias a Bias operation of its own, so that the backward's fused group
 * [Linear, Bias, GELU, Linear] reads three operations' parameters. */
enum { ZL = 6, ZH = 128, ZNP = 2 * ZL, MB = 2, ZG = ZL * (ZH * ZH + ZH) };

static tecore_seq_t *deep(tecore_stream_t s, int sep) {
  struct tecore_seq_config cfg = {.rows = B, .features = ZH, .dtype = TECORE_DTYPE_F32,
                                  .seed = 11};
  tecore_seq_t *q;
  RK_CORE(tecore_seq_create(&cfg, &q));
  const struct tecore_op_desc lin = {.kind = TECORE_OP_LINEAR, .features = ZH, .bias = !sep},
                              bias = {.kind = TECORE_OP_BIAS}, act = {.kind = TECORE_OP_GELU};
  for (size_t l = 0; l < ZL; l++) {
    RK_CORE(tecore_seq_add(q, &lin, NULL));
    if (sep) RK_CORE(tecore_seq_add(q, &bias, NULL));
    if (l + 1 < ZL) RK_CORE(tecore_seq_add(q, &act, NULL));
  }
  RK_CORE(tecore_seq_build(q, s));
  return q;
}

static void zparams(tecore_seq_t *q, struct tecore_seq_param *p) {
  size_t n = 0;
  RK_CORE(tecore_seq_params(q, p, ZNP, &n));
  RK_ASSERT(n == ZNP, "%zu parameters", n);
}

/* The deep model's group: its parameters, the last operation's first. */
static tecomm_dp_t zdp_make(tecomm_comm_t c, tecore_seq_t *q, int zero, unsigned flags) {
  struct tecore_seq_param p[ZNP];
  struct tecomm_dp_tensor t[ZNP];
  zparams(q, p);
  for (size_t i = 0; i < ZNP; i++) {
    const struct tecore_seq_param *r = &p[ZNP - 1 - i];
    t[i] = (struct tecomm_dp_tensor){.name = r->name, .grad = r->grad.data,
                                     .grad_dtype = TECORE_DTYPE_F32, .value = r->value.data,
                                     .value_dtype = TECORE_DTYPE_F32,
                                     .count = tecore_tensor_numel(&r->value), .op = r->op};
  }
  /* 4 KiB: ZeRO-0 buckets each bias and each weight apart; ZeRO-3 keeps
   * an operation's two together (one layer a bucket) */
  struct tecomm_dp_desc desc = {.comm = c, .tensors = t, .ntensors = ZNP, .seq = q,
                                .bucket_bytes = 4096, .zero = zero, .flags = flags};
  tecomm_dp_t dp = NULL;
  RK_OK(tecomm_dp_create(&desc, &dp));
  return dp;
}

/* The device buffers of a step: MB microbatches' inputs and output
 * gradients, and the outputs. */
struct zbufs {
  tecore_devptr_t x[MB], dy[MB], y;
};

static void zbufs_init(struct zbufs *z) {
  for (int m = 0; m < MB; m++) z->x[m] = dalloc(B * ZH * 4), z->dy[m] = dalloc(B * ZH * 4);
  z->y = dalloc(B * ZH * 4);
}

/* Seed k's inputs: this rank's rows of each microbatch (dy = w / rows). */
static void zdraw(struct zbufs *z, int rank, int n, uint64_t k, tecore_stream_t s) {
  static float x[MB * 4 * B * ZH], w[MB * 4 * B * ZH];
  size_t rows = (size_t)MB * (size_t)n * B;
  tc_make_input(x, rows * ZH, TECORE_DTYPE_F32, 77, 2 * k);
  tc_make_input(w, rows * ZH, TECORE_DTYPE_F32, 77, 2 * k + 1);
  for (size_t i = 0; i < rows * ZH; i++) w[i] /= (float)rows;
  for (int m = 0; m < MB; m++) {
    size_t at = ((size_t)m * (size_t)n + (size_t)rank) * B * ZH;
    RK_CORE(tecore_memcpy(z->x[m], te_hptr(x + at), B * ZH * 4));
    RK_CORE(tecore_memcpy(z->dy[m], te_hptr(w + at), B * ZH * 4));
  }
  (void)s;
}

/* One step's passes: mb microbatches accumulated, the last armed. */
static void zpasses_mb(tecore_seq_t *q, tecomm_dp_t dp, const struct zbufs *z, int mb,
                       tecore_stream_t s) {
  RK_CORE(tecore_seq_zero_grad(q, s));
  for (int m = 0; m < mb; m++) {
    struct tecore_tensor X = t2(B, ZH, z->x[m]), Y = t2(B, ZH, z->y), DY = t2(B, ZH, z->dy[m]);
    RK_CORE(tecore_seq_forward(q, &X, &Y, 0, s));
    if (m == mb - 1) RK_OK(tecomm_dp_arm(dp));
    RK_CORE(tecore_seq_backward(q, &DY, NULL, s));
  }
  RK_OK(tecomm_dp_finish(dp, s));
}

static void zpasses(tecore_seq_t *q, tecomm_dp_t dp, const struct zbufs *z, tecore_stream_t s) {
  zpasses_mb(q, dp, z, MB, s);
}

/* AdamW over this rank's shard of every tensor of dp (ZeRO-0: all). */
static void zadam_init(tecomm_dp_t dp, tecore_seq_t *q, int zero, struct tecore_optim_tensor *ot) {
  struct tecore_seq_param p[ZNP];
  zparams(q, p);
  for (size_t i = 0; i < ZNP; i++) {
    const struct tecore_seq_param *r = &p[ZNP - 1 - i];
    size_t first = 0, n = tecore_tensor_numel(&r->value);
    tecore_devptr_t v = r->value.data, g = r->grad.data;
    if (zero) RK_OK(tecomm_dp_shard(dp, i, &first, &n));
    if (zero) RK_OK(tecomm_dp_value_shard(dp, i, &v));
    if (zero) RK_OK(tecomm_dp_grad_shard(dp, i, &g));
    RK_ASSERT(!n || zero != 3 || g, "tensor %zu: no gradient shard", i);
    tecore_devptr_t m1 = dalloc(n ? n * 4 : 4), m2 = dalloc(n ? n * 4 : 4);
    RK_CORE(tecore_memset_d32_async(m1, 0, n ? n : 1, NULL));
    RK_CORE(tecore_memset_d32_async(m2, 0, n ? n : 1, NULL));
    ot[i] = (struct tecore_optim_tensor){.param = v, .grad = g,
                                         .exp_avg = m1, .exp_avg_sq = m2, .numel = n,
                                         .grad_dtype = TECORE_DTYPE_F32};
  }
  RK_CORE(tecore_stream_synchronize(NULL));
}

static void zadam(struct tecore_optim_tensor *ot, int64_t stepno, tecore_stream_t s) {
  struct tecore_adam_config ac = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                                  .weight_decay = 0.1, .step = stepno, .flags = TECORE_ADAM_W};
  RK_CORE(tecore_adam_step(ot, ZNP, &ac, 0, 0, s));
}

/* The deep model's gradients (values 0) or values (1), its parameter
 * order, concatenated on the host. */
static void zfetch(tecore_seq_t *q, int values, float *out) {
  struct tecore_seq_param p[ZNP];
  zparams(q, p);
  size_t at = 0;
  for (size_t i = 0; i < ZNP; i++) {
    const struct tecore_tensor *t = values ? &p[i].value : &p[i].grad;
    size_t k = tecore_tensor_numel(t);
    RK_CORE(tecore_memcpy(te_hptr(out + at), t->data, k * 4));
    at += k;
  }
}

/* Every tensor of d3 whole (tecomm_dp_gather_value), the parameter order. */
static void zgathered(tecomm_dp_t d3, tecore_seq_t *q, float *out, tecore_stream_t s) {
  struct tecore_seq_param p[ZNP];
  zparams(q, p);
  tecore_devptr_t w = dalloc(ZH * ZH * 4);
  size_t at = 0;
  for (size_t k = 0; k < ZNP; k++) {   /* parameter k is the group's tensor ZNP - 1 - k */
    size_t cnt = tecore_tensor_numel(&p[k].value);
    RK_CORE(tecore_memset_d32_async(w, 0x7fc00000u, cnt, s));   /* poisoned: NaN */
    RK_OK(tecomm_dp_gather_value(d3, ZNP - 1 - k, w, s));
    RK_CORE(tecore_stream_synchronize(s));
    RK_CORE(tecore_memcpy(te_hptr(out + at), w, cnt * 4));
    at += cnt;
  }
  RK_CORE(tecore_mem_free(w));
}

static void zsame_bits(const float *a, const float *b, size_t n, const char *what, int64_t k) {
  for (size_t i = 0; i < n; i++)
    RK_ASSERT(memcmp(&a[i], &b[i], 4) == 0, "step %lld: ZeRO-3 %s [%zu]: %a, ZeRO-0 %a",
              (long long)k, what, i, (double)a[i], (double)b[i]);
}

/* d3's gradients in this rank's shards (tecomm_dp_grad_shard) against
 * ZeRO-0's g0: the same bits (tol 0), or within tol of the tensor's
 * largest |g0|. */
static void zsame_shard_grads(tecomm_dp_t d3, tecore_seq_t *q3, const float *g0, double tol,
                              int64_t k) {
  static float g[ZH * ZH];
  size_t base[ZNP], at = 0;
  struct tecore_seq_param p[ZNP];
  zparams(q3, p);
  for (size_t i = 0; i < ZNP; i++) base[i] = at, at += tecore_tensor_numel(&p[i].value);
  for (size_t i = 0; i < ZNP; i++) {
    size_t first, n, j = ZNP - 1 - i, cnt = tecore_tensor_numel(&p[j].value);
    tecore_devptr_t at_dev = 0;
    RK_OK(tecomm_dp_shard(d3, i, &first, &n));
    RK_OK(tecomm_dp_grad_shard(d3, i, &at_dev));
    RK_ASSERT(!n == !at_dev, "tensor %zu: %zu elements, shard at 0x%llx", i, n,
              (unsigned long long)at_dev);
    if (!n) continue;
    memset(g, 0xff, n * 4);
    RK_CORE(tecore_memcpy(te_hptr(g), at_dev, n * 4));
    if (tol == 0) {
      zsame_bits(g, g0 + base[j] + first, n, "gradient", k);
      continue;
    }
    double big = 0;
    for (size_t e = 0; e < cnt; e++) big = fmax(big, fabs(g0[base[j] + e]));
    for (size_t e = 0; e < n; e++) {
      double want = g0[base[j] + first + e];
      RK_ASSERT(fabs(g[e] - want) <= tol * big, "step %lld: tensor %zu [%zu]: ZeRO-3 gradient "
                "shard %.9g, ZeRO-0 %.9g, allowed %.3g", (long long)k, i, first + e,
                (double)g[e], want, tol * big);
    }
  }
}

/* ZeRO-3's test: sep (each bias a Bias op), flags (TECOMM_DP_GRAD_SHARDS)
 * and the microbatches a step. */
struct z3arg {
  int sep, mb;
  unsigned flags;
  int zero;   /* 3, or 2 (with flags: the gradients in units, the values whole) */
};

/* Two microbatches' gradients reduced apart and added (the gradient
 * ring) against added, then reduced (ZeRO-0): F32 sums of 2 * 4 terms in
 * another order, a few ulps of the largest; the limit leaves 20x */
#define Z3_MB_TOL 1e-5

static void rank_zero3(int rank, int n, void *arg) {
  const struct z3arg *za = arg;
  const int sep = za->sep;
  /* accumulated apart: not the same bits, and AdamW would carry the
   * difference into the next step's gradients: compared each step
   * without the update */
  const int adam = !(za->flags && za->mb > 1);
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  tecore_seq_t *q0 = deep(s, sep), *q3 = deep(s, sep);
  const int zs = za->zero ? za->zero : 3;
  tecomm_dp_t d0 = zdp_make(c, q0, 0, 0), d3 = zdp_make(c, q3, zs, za->flags);
  /* a layer a unit; with sep the backward's dgrad+dgelu+dbias groups
   * [Linear, Bias, GELU, Linear] each make three operations one unit,
   * and a Bias left apart (512 bytes, under the 4096-byte buckets) joins
   * the unit after it: 4 of 12 */
  if (zs == 3)
    expect_inplace(d3, 0, sep ? "12 sharded buckets in 4 units" : "6 sharded buckets in 6 units");
  else
    expect_inplace(d3, 0, "; gradients: shards");
  static struct tecore_optim_tensor a0[ZNP], a3[ZNP];
  zadam_init(d0, q0, 0, a0);
  zadam_init(d3, q3, zs, a3);
  struct zbufs z;
  zbufs_init(&z);
  static float y0[B * ZH], y3[B * ZH], g0[ZG], v0[ZG], v3[ZG];
  tecore_graph_exec_t exec = NULL;
  for (int64_t k = 1; k <= 4; k++) {
    zdraw(&z, rank, n, 500 + (uint64_t)k, s);
    zpasses_mb(q0, d0, &z, za->mb, s);
    RK_CORE(tecore_stream_synchronize(s));
    RK_CORE(tecore_memcpy(te_hptr(y0), z.y, sizeof y0));
    RK_CORE(tecore_memset_d32_async(z.y, 0x7fc00000u, B * ZH, s));   /* poisoned: NaN */
    if (k == 2) {   /* from the second step on, the step graph (the gathers inside) */
      tecore_graph_t g = NULL;
      RK_CORE(tecore_stream_begin_capture(s, TECORE_CAPTURE_THREAD_LOCAL));
      zpasses_mb(q3, d3, &z, za->mb, s);
      RK_CORE(tecore_stream_end_capture(s, &g));
      RK_CORE(tecore_graph_instantiate(&exec, g));
      RK_CORE(tecore_graph_destroy(g));
    }
    if (exec) RK_CORE(tecore_graph_launch(exec, s));
    else zpasses_mb(q3, d3, &z, za->mb, s);
    RK_CORE(tecore_stream_synchronize(s));
    RK_CORE(tecore_memcpy(te_hptr(y3), z.y, sizeof y3));
    zsame_bits(y3, y0, B * ZH, "output", k);
    zfetch(q0, 0, g0);
    zsame_shard_grads(d3, q3, g0, adam ? 0 : Z3_MB_TOL, k);
    if (adam) zadam(a0, k, s);
    if (adam) zadam(a3, k, s);
    if (adam && zs == 2) RK_OK(tecomm_dp_gather(d3, s));   /* each rank's updated shard to all */
    RK_CORE(tecore_stream_synchronize(s));
    zfetch(q0, 1, v0);
    memset(v3, 0xff, sizeof v3);
    zgathered(d3, q3, v3, s);
    zsame_bits(v3, v0, ZG, "parameter after AdamW", k);
    tc_rank_digest(v3, sizeof v3);
  }
  RK_CORE(tecore_graph_exec_destroy(exec));
  RK_OK(tecomm_dp_destroy(d3));   /* the whole values back in the sequence */
  zfetch(q3, 1, v3);
  zsame_bits(v3, v0, ZG, "parameter given back at destroy", 5);
  RK_OK(tecomm_dp_destroy(d0));
  RK_CORE(tecore_seq_destroy(q0));
  RK_CORE(tecore_seq_destroy(q3));
  (void)tecomm_comm_destroy(c);
}

/* The same bits as ZeRO-0 (the same reduction order: reduce-scatter
 * folds the ranks as allreduce does; the gathered values are the
 * values): outputs, gradients, parameters after AdamW, eager and from
 * the captured step graph, 2 and 4 ranks; and where a fused group reads
 * three operations' parameters. */
START_TEST(zero_3_takes_zero_0_steps) {
  struct z3arg za = {.sep = _i >= 2, .mb = MB};
  int n = _i % 2 ? 4 : 2;
  tc_run_ranks(n, rank_zero3, &za, 300);
  tc_expect_same_digest(n, "the parameters after four steps");
  tc_shm_release();
}
END_TEST

/* TECOMM_DP_GRAD_SHARDS: the gradients reduce-scattered out of a ring of
 * two layers into shards (tecomm_dp_grad_shard).  One microbatch a step:
 * ZeRO-0's bits (the same reduction, read where it lies), outputs,
 * gradient shards and the parameters after AdamW, eager and from the
 * step graph, 2 and 4 ranks, and with the Bias ops apart; two
 * microbatches (each reduced, then added in the shard): within Z3_MB_TOL
 * of the largest gradient of the tensor.  _i 8-13: the same under ZeRO-2
 * (the values whole, gathered by tecomm_dp_gather after AdamW). */
START_TEST(zero_3_gradient_shards_take_zero_0_steps) {
  struct z3arg za = {.sep = (_i / 2) % 2, .mb = _i % 8 >= 4 ? MB : 1,
                     .flags = TECOMM_DP_GRAD_SHARDS, .zero = _i >= 8 ? 2 : 3};
  int n = _i % 2 ? 4 : 2;
  tc_run_ranks(n, rank_zero3, &za, 300);
  tc_expect_same_digest(n, "the parameters after four steps");
  tc_shm_release();
}
END_TEST

/* The bytes of values and gradients a step of the deep model holds under
 * stage zero: the sequence's parameters (tecore_seq_memory, its
 * allocator's count) and ZeRO-3's shards and ring (tecomm_dp_describe). */
static size_t zero_step_bytes(tecomm_comm_t c, int rank, int n, int zero, unsigned flags,
                              tecore_stream_t s) {
  tecore_seq_t *q = deep(s, 0);
  tecomm_dp_t dp = zdp_make(c, q, zero, flags);
  struct zbufs z;
  zbufs_init(&z);
  zdraw(&z, rank, n, 9, s);
  zpasses(q, dp, &z, s);
  RK_CORE(tecore_stream_synchronize(s));
  size_t held = 0, nz = 0, nu = 0, shards = 0, s0 = 0, s1 = 0, gshards = 0, g0 = 0, g1 = 0;
  RK_CORE(tecore_seq_memory(q, &held, NULL));
  char line[2048];
  RK_OK(tecomm_dp_describe(dp, line, sizeof line, NULL));
  const char *v = strstr(line, "; values: ");
  RK_ASSERT(!v == (zero < 3), "describe: \"%s\"", line);
  if (v)
    RK_ASSERT(sscanf(v, "; values: %zu sharded buckets in %zu units, shards %zu bytes, ring %zu "
                     "+ %zu bytes", &nz, &nu, &shards, &s0, &s1) == 5 && nz == ZL && nu == ZL,
              "describe: \"%s\"", line);
  const char *g = strstr(line, "; gradients: ");
  RK_ASSERT(!g == !flags, "describe: \"%s\"", line);
  if (g)
    RK_ASSERT(sscanf(g, "; gradients: shards %zu bytes, ring %zu + %zu bytes", &gshards, &g0,
                     &g1) == 3, "describe: \"%s\"", line);
  RK_OK(tecomm_dp_destroy(dp));
  RK_CORE(tecore_seq_destroy(q));
  for (int m = 0; m < MB; m++) {
    RK_CORE(tecore_mem_free(z.x[m]));
    RK_CORE(tecore_mem_free(z.dy[m]));
  }
  RK_CORE(tecore_mem_free(z.y));
  return held + shards + s0 + s1 + gshards + g0 + g1;
}

static void rank_zero3_memory(int rank, int n, void *arg) {
  (void)arg;
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  size_t u0 = zero_step_bytes(c, rank, n, 0, 0, s), u3 = zero_step_bytes(c, rank, n, 3, 0, s);
  size_t ug = zero_step_bytes(c, rank, n, 3, TECOMM_DP_GRAD_SHARDS, s);
  /* ZeRO-0 less the values, plus their shard (1 / n, each layer padded
   * to 64 * n elements and 256 bytes) and two layers (the ring); with
   * the gradient ring the same again for the gradients */
  size_t all = (size_t)ZG * 4, layer = (ZH * ZH + 64 + ZH) * 4;
  size_t part = all / (size_t)n + 2 * layer + ZL * (64 * 4 * (size_t)n + 256);
  size_t want = u0 - all + part, wantg = u0 - 2 * all + 2 * part;
  tc_shm->value[rank][0] = (double)u0, tc_shm->value[rank][1] = (double)u3;
  tc_shm->value[rank][2] = (double)want, tc_shm->value[rank][3] = (double)ug;
  RK_ASSERT(u3 <= want, "ZeRO-3 holds %zu bytes of parameters in a step, ZeRO-0 %zu: more than "
            "the bound %zu (ZeRO-0 less the values %zu, plus a shard and two layers)", u3, u0,
            want, all);
  RK_ASSERT(ug <= wantg, "ZeRO-3 with gradient shards holds %zu bytes of parameters and "
            "gradients in a step, ZeRO-0 %zu: more than the bound %zu (ZeRO-0 less the values "
            "and gradients, 2 x %zu, plus a shard and two layers of each)", ug, u0, wantg, all);
  (void)tecomm_comm_destroy(c);
}

/* The parameters' bytes a step holds under ZeRO-3 are ZeRO-0's less the
 * values, plus a shard of them and two layers (the ring). */
START_TEST(zero_3_holds_a_shard_of_the_values) {
  int n = _i ? 4 : 2;
  tc_run_ranks(n, rank_zero3_memory, NULL, 300);
  printf("# ZeRO-3, %d ranks, %d layers of %d x %d: a step holds %.0f bytes of values and "
         "gradients (ZeRO-0 %.0f; the values %d; bound %.0f); with gradient shards %.0f\n", n,
         ZL, ZH, ZH, tc_shm->value[0][1], tc_shm->value[0][0], ZG * 4, tc_shm->value[0][2],
         tc_shm->value[0][3]);
  tc_shm_release();
}
END_TEST

/* The sequence destroyed before its ZeRO-3 group (what a program about
 * to exit does): the group's destroy gathers nothing and gives nothing
 * back.  The last rank destroys its group while rank 0 is still asleep:
 * a gather at teardown would make it wait for rank 0. */
static void rank_seq_first(int rank, int n, void *arg) {
  const unsigned flags = *(const unsigned *)arg;
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  tecore_seq_t *q = deep(s, 0);
  tecomm_dp_t d3 = zdp_make(c, q, 3, flags);
  struct zbufs z;
  zbufs_init(&z);
  zdraw(&z, rank, n, 31, s);
  zpasses(q, d3, &z, s);
  RK_CORE(tecore_stream_synchronize(s));
  RK_ASSERT(tc_shm_barrier(tc_shm) == 0, "barrier");
  RK_CORE(tecore_seq_destroy(q));
  if (rank == 0) sleep(2);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  RK_OK(tecomm_dp_destroy(d3));
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  RK_ASSERT(rank == 0 || ms < 1000, "rank %d: tecomm_dp_destroy after the sequence's took %.0f "
            "ms (waited for rank 0: a collective at teardown)", rank, ms);
  for (int m = 0; m < MB; m++) {
    RK_CORE(tecore_mem_free(z.x[m]));
    RK_CORE(tecore_mem_free(z.dy[m]));
  }
  RK_CORE(tecore_mem_free(z.y));
  RK_CORE(tecore_stream_destroy(s));
  (void)tecomm_comm_destroy(c);
}

START_TEST(zero_3_sequence_destroyed_first) {
  unsigned flags = _i ? TECOMM_DP_GRAD_SHARDS : 0;
  tc_run_ranks(2, rank_seq_first, &flags, 120);
  tc_shm_release();
}
END_TEST

/* ---- a rank killed mid-step ------------------------------------------------------ */

static void rank_killed(int rank, int n, void *arg) {
  /* 0 packed, 1 in place, 2 ZeRO-3, 3 ZeRO-3 with gradient shards (the
   * peer gone after the forward: the backward's reduce-scatters out of
   * the gradient ring, and its gathers, need it) */
  const int mode = *(const int *)arg;
  setenv("TECOMM_TIMEOUT", "1000", 1);
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  tecore_seq_t *q = mlp_in(B, s, mode == 1 ? c : NULL);
  tecomm_dp_t dp = dp_make_f(c, q, mode >= 2 ? 3 : 0, 2048,
                             mode == 3 ? TECOMM_DP_GRAD_SHARDS : 0);
  tecore_devptr_t dx = dalloc(B * F * 4), dy = dalloc(B * O * 4), y = dalloc(B * O * 4);
  static float x[B * F], w[B * O];
  draw(x, w, B, 5);
  step(q, dp, x, w, B, dx, dy, y, s);   /* one whole step: set-up done */
  RK_ASSERT(tc_shm_barrier(tc_shm) == 0, "barrier");
  if (rank == n - 1 && mode < 3) raise(SIGKILL);
  struct tecore_tensor X = t2(B, F, dx), Y = t2(B, O, y), DY = t2(B, O, dy);
  /* ZeRO-3: the forward's gathers already need the peer */
  tecore_result_t r = tecore_seq_forward(q, &X, &Y, 0, s);
  if (mode == 3) {
    RK_CORE(r);
    RK_CORE(tecore_stream_synchronize(s));
    RK_ASSERT(tc_shm_barrier(tc_shm) == 0, "barrier");
    if (rank == n - 1) raise(SIGKILL);
  }
  RK_OK(tecomm_dp_arm(dp));
  if (r == TECORE_SUCCESS) r = tecore_seq_backward(q, &DY, NULL, s);
  tecomm_result_t f = tecomm_dp_finish(dp, s);
  tecore_result_t w8 = te_stream_wait(s, 5000);
  RK_ASSERT(w8 == TECORE_SUCCESS, "the stream did not come back within 5 s");
  int peer = -2;
  tecomm_result_t st = tecomm_comm_status(c, &peer);
  RK_ASSERT(r != TECORE_SUCCESS || f != TECOMM_SUCCESS || st != TECOMM_SUCCESS,
            "every call succeeded with a peer dead");
  RK_ASSERT(st == TECOMM_ERR_TIMEOUT, "status after a peer died: %s (%s)",
            tecomm_result_name(st), tecomm_last_error());
  RK_ASSERT(peer == n - 1, "status names peer %d, want %d", peer, n - 1);
  /* ZeRO-3's destroy gathers the values back; with the peer gone it
   * tries no gather (each would wait out TECOMM_TIMEOUT) */
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  (void)tecomm_dp_destroy(dp);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  RK_ASSERT(ms < 500, "tecomm_dp_destroy took %.0f ms with a peer gone", ms);
  (void)tecore_seq_destroy(q);
  (void)tecomm_comm_destroy(c);
}

/* Packed, in place, ZeRO-3 (the peer gone before the forward's
 * gathers), and ZeRO-3 with gradient shards (gone before the backward). */
START_TEST(killed_rank_named_not_hung) {
  int mode = _i;
  tc_run_ranks_ex(2, rank_killed, &mode, 60, 1);
  tc_shm_release();
}
END_TEST

/* ---- arguments ------------------------------------------------------------------ */

static void rank_args(int rank, int n, void *arg) {
  (void)arg;
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  tecore_seq_t *q = mlp(B, s);
  struct tecore_seq_param p[NP];
  struct tecomm_dp_tensor t[NP], bad[NP];
  params(q, p);
  dp_tensors(p, t);
  struct tecomm_dp_desc desc = {.comm = c, .tensors = t, .ntensors = NP, .seq = q}, d2;
  tecomm_dp_t dp = NULL;
  RK_EXPECT(TECOMM_ERR_INVALID, "desc is NULL", tecomm_dp_create(NULL, &dp));
  RK_EXPECT(TECOMM_ERR_INVALID, "dp is NULL", tecomm_dp_create(&desc, NULL));
  d2 = desc, d2.zero = 4;
  RK_EXPECT(TECOMM_ERR_INVALID, "desc->zero 4", tecomm_dp_create(&d2, &dp));
  d2 = desc, d2.ntensors = 0;
  RK_EXPECT(TECOMM_ERR_INVALID, "ntensors 0", tecomm_dp_create(&d2, &dp));
  d2 = desc, d2.scale = -1;
  RK_EXPECT(TECOMM_ERR_INVALID, "desc->scale", tecomm_dp_create(&d2, &dp));
  d2 = desc, d2.tensors = bad;
  memcpy(bad, t, sizeof bad), bad[1].grad = 0;
  RK_EXPECT(TECOMM_ERR_INVALID, "tensors[1].grad is 0", tecomm_dp_create(&d2, &dp));
  memcpy(bad, t, sizeof bad), bad[2].grad_dtype = TECORE_DTYPE_F16;
  RK_EXPECT(TECOMM_ERR_INVALID, "tensors[2].grad_dtype", tecomm_dp_create(&d2, &dp));
  memcpy(bad, t, sizeof bad), bad[3].op = 9;
  RK_EXPECT(TECOMM_ERR_INVALID, "tensors[3].op 9", tecomm_dp_create(&d2, &dp));
  memcpy(bad, t, sizeof bad), bad[0].value = 0, d2.zero = 1;
  RK_EXPECT(TECOMM_ERR_INVALID, "tensors[0].value is 0 under ZeRO-1", tecomm_dp_create(&d2, &dp));
  d2 = desc, d2.zero = 3, d2.flags = 0xc;
  RK_EXPECT(TECOMM_ERR_INVALID, "unknown bits 0xc", tecomm_dp_create(&d2, &dp));
  d2 = desc, d2.zero = 1, d2.flags = TECOMM_DP_GRAD_SHARDS;
  RK_EXPECT(TECOMM_ERR_INVALID, "needs ZeRO-2 or 3 and desc->seq (desc->zero 1",
            tecomm_dp_create(&d2, &dp));
  d2.zero = 3, d2.seq = NULL;
  for (size_t i = 0; i < NP; i++) bad[i] = t[i], bad[i].op = TECOMM_DP_NO_OP;
  d2.tensors = bad;
  RK_EXPECT(TECOMM_ERR_INVALID, "seq NULL", tecomm_dp_create(&d2, &dp));
  d2 = desc, d2.tensors = bad;
  /* ZeRO-3 points the sequence's parameters into its ring: a value that
   * is no parameter of it, or another operation's, is refused */
  tecore_devptr_t other = dalloc(H * F * 4);
  memcpy(bad, t, sizeof bad), bad[3].value = other, d2.zero = 3;
  RK_EXPECT(TECOMM_ERR_INVALID, "tensors[3].value is no parameter's value",
            tecomm_dp_create(&d2, &dp));
  memcpy(bad, t, sizeof bad), bad[1].op = 0;
  RK_EXPECT(TECOMM_ERR_INVALID, "tensors[1].op 0: the parameter is operation 2's",
            tecomm_dp_create(&d2, &dp));
  RK_CORE(tecore_mem_free(other));
  RK_ASSERT(dp == NULL, "a refused group was handed out");
  dp = dp_make(c, q, 0, 0);
  size_t first, count;
  RK_EXPECT(TECOMM_ERR_INVALID, "index 4", tecomm_dp_shard(dp, 4, &first, &count));
  RK_EXPECT(TECOMM_ERR_INVALID, "first is NULL", tecomm_dp_shard(dp, 0, NULL, &count));
  RK_EXPECT(TECOMM_ERR_INVALID, "ZeRO-0", tecomm_dp_gather(dp, s));
  RK_EXPECT(TECOMM_ERR_INVALID, "dp is NULL", tecomm_dp_finish(NULL, s));
  RK_EXPECT(TECOMM_ERR_INVALID, "vec is NULL", tecomm_dp_norm_parts(dp, NULL, s));
  tecore_devptr_t vp = 0;
  RK_EXPECT(TECOMM_ERR_INVALID, "ptr is NULL", tecomm_dp_value_shard(dp, 0, NULL));
  RK_EXPECT(TECOMM_ERR_INVALID, "index 4", tecomm_dp_value_shard(dp, 4, &vp));
  RK_EXPECT(TECOMM_ERR_INVALID, "ptr is NULL", tecomm_dp_grad_shard(dp, 0, NULL));
  RK_EXPECT(TECOMM_ERR_INVALID, "index 4", tecomm_dp_grad_shard(dp, 4, &vp));
  RK_EXPECT(TECOMM_ERR_INVALID, "dp is NULL", tecomm_dp_grad_shard(NULL, 0, &vp));
  /* ZeRO-0: the shard's part of the gradient, where it lies */
  RK_OK(tecomm_dp_shard(dp, 1, &first, &count));
  RK_OK(tecomm_dp_grad_shard(dp, 1, &vp));
  RK_ASSERT(vp == (count ? t[1].grad + first * 4 : 0), "ZeRO-0: tecomm_dp_grad_shard 0x%llx, "
            "the gradient 0x%llx, shard [%zu, +%zu)", (unsigned long long)vp,
            (unsigned long long)t[1].grad, first, count);
  RK_EXPECT(TECOMM_ERR_INVALID, "dst is 0", tecomm_dp_gather_value(dp, 0, 0, s));
  RK_EXPECT(TECOMM_ERR_INVALID, "index 7", tecomm_dp_gather_value(dp, 7, t[0].grad, s));
  RK_EXPECT(TECOMM_ERR_INVALID, "dp is NULL", tecomm_dp_gather_value(NULL, 0, t[0].grad, s));
  RK_OK(tecomm_dp_destroy(dp));
  RK_EXPECT(TECOMM_ERR_INVALID, "not a live", tecomm_dp_arm(dp));
  RK_OK(tecomm_dp_destroy(NULL));
  RK_CORE(tecore_seq_destroy(q));
  (void)tecomm_comm_destroy(c);
}

START_TEST(bad_arguments_named) {
  tc_run_ranks(2, rank_args, NULL, 120);
  tc_shm_release();
}
END_TEST

static Suite *dp_suite(void) {
  setenv("TECORE_VDEV_DEVICES", "8", 0);
  Suite *s = suite_create("comm_dp");
  TCase *tc = te_tcase(s, "dp", 0);
  tcase_add_loop_test(tc, dp_ranks_equal_one_process, 0, 2);
  tcase_add_loop_test(tc, zero_1_2_take_zero_0_steps, 0, 2);
  tcase_add_loop_test(tc, zero_3_takes_zero_0_steps, 0, 4);
  tcase_add_loop_test(tc, zero_3_gradient_shards_take_zero_0_steps, 0, 14);
  tcase_add_loop_test(tc, zero_3_holds_a_shard_of_the_values, 0, 2);
  tcase_add_loop_test(tc, zero_3_sequence_destroyed_first, 0, 2);
  tcase_add_loop_test(tc, mismatched_models_refused_with_the_field_named, 0, 5);
  tcase_add_loop_test(tc, killed_rank_named_not_hung, 0, 4);
  tcase_add_loop_test(tc, inplace_buckets_same_bits_as_packed, 0, 7);
  tcase_add_loop_test(tc, inplace_on_one_rank_only_refused, 0, 2);
  tcase_add_test(tc, inplace_off_packs_every_bucket);
  tcase_add_test(tc, bad_arguments_named);
  return s;
}

TE_TEST_MAIN(dp_suite, TE_TEST_DEVICE)
