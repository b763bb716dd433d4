/* SPDX-License-Identifier: Apache-2.0
 * check_dp_fp8.c -- ZeRO-3 under delayed FP8 scaling (te/comm_dp.h,
 * libtecomm/dp/dp_zero3_fp8.c), ranks as forked processes: a BF16
 * sequence of FL Linears [FH][FH] with bias and a GELU between, whose
 * Linears run in FP8 (delayed scaling), trained by AdamW (F32 masters,
 * BF16 values written) under ZeRO-0 and ZeRO-3 on the same rows:
 *   - each FP8 Linear's weight gathered as E4M3 codes (each rank quantizes
 *     its shard with the weight's delayed scale; the amaxes reduced with
 *     MAX) into the bucket's ring slot space, before each forward and
 *     backward (no rank keeps a layer's codes): the outputs, the FP8
 *     weights' scale_inv, amax and scale after tecore_seq_update_scales,
 *     and the parameters after AdamW (every layer's dgrad read the codes) are
 *     ZeRO-0's bit for bit, eager and replayed from the captured step
 *     graph, 2 and 4 ranks, over FP_STEPS steps of fresh inputs;
 *   - the same with the codes kept in the sequence's copies across the
 *     step (TECOMM_DP_FP8_KEEP=1, gathered in the forwards only); ranks
 *     whose setting differs refused, the field named;
 *   - the sequence frees the weights' values and codes at create;
 *   - an eager step all-gathers about half the bytes ZeRO-3 gathers with
 *     the codes refused (TECORE_OPS_FUSION_OFF=weight_fp8: the values in
 *     BF16, forward and backward), tecomm_dp_describe's count;
 *   - the recipe changed under the group: current scaling gathers the
 *     values (the forwards quantize them), delayed again the codes;
 *     ZeRO-0's outputs either way;
 *   - destroy gives the sequence its values back, and its forwards
 *     quantize the weights again (ZeRO-0's outputs). */
#include "fuser_vals.h"
#include <te/comm_dp.h>

enum { FL = 4, FH = 128, FB = 16, FNP = 2 * FL, MB = 2, FP_STEPS = 5,
       FG = FL * (FH * FH + FH) };

static tecore_seq_t *model(tecore_stream_t s) {
  struct tecore_seq_config cfg = {.rows = FB, .features = FH, .dtype = TECORE_DTYPE_BF16,
                                  .seed = 23};
  tecore_seq_t *q;
  RK_CORE(tecore_seq_create(&cfg, &q));
  const struct tecore_op_desc lin = {.kind = TECORE_OP_LINEAR, .features = FH, .bias = 1},
                              act = {.kind = TECORE_OP_GELU};
  for (size_t l = 0; l < FL; l++) {
    RK_CORE(tecore_seq_add(q, &lin, NULL));
    if (l + 1 < FL) RK_CORE(tecore_seq_add(q, &act, NULL));
  }
  struct tecore_recipe rc;
  RK_CORE(tecore_recipe_init(&rc, TECORE_RECIPE_DELAYED));
  RK_CORE(tecore_seq_set_recipe(q, &rc, s));
  RK_CORE(tecore_seq_build(q, s));
  return q;
}

static void params(tecore_seq_t *q, struct tecore_seq_param *p) {
  size_t n = 0;
  RK_CORE(tecore_seq_params(q, p, FNP, &n));
  RK_ASSERT(n == FNP, "%zu parameters", n);
}

/* The group: the parameters, the last operation's first. */
static tecomm_dp_t group(tecomm_comm_t c, tecore_seq_t *q, int zero) {
  struct tecore_seq_param p[FNP];
  struct tecomm_dp_tensor t[FNP];
  params(q, p);
  for (size_t i = 0; i < FNP; i++) {
    const struct tecore_seq_param *r = &p[FNP - 1 - i];
    t[i] = (struct tecomm_dp_tensor){.name = r->name, .grad = r->grad.data,
                                     .grad_dtype = TECORE_DTYPE_F32, .value = r->value.data,
                                     .value_dtype = TECORE_DTYPE_BF16,
                                     .count = tecore_tensor_numel(&r->value), .op = r->op};
  }
  struct tecomm_dp_desc desc = {.comm = c, .tensors = t, .ntensors = FNP, .seq = q,
                                .bucket_bytes = 4096, .zero = zero};
  tecomm_dp_t dp = NULL;
  RK_OK(tecomm_dp_create(&desc, &dp));
  return dp;
}

struct bufs {
  tecore_devptr_t x[MB], dy[MB], y;
};

/* Step k's rows of this rank (BF16 inputs, output gradients / rows). */
static void draw(struct bufs *z, int rank, int n, uint64_t k) {
  static uint16_t x[MB * 4 * FB * FH], w[MB * 4 * FB * FH];
  static float f[MB * 4 * FB * FH];
  size_t rows = (size_t)MB * (size_t)n * FB;
  tc_make_input(x, rows * FH, TECORE_DTYPE_BF16, 91, 2 * k);
  tc_make_input(f, rows * FH, TECORE_DTYPE_F32, 91, 2 * k + 1);
  for (size_t i = 0; i < rows * FH; i++) f[i] /= (float)rows;
  RK_CORE(tecore_cvt_f32_to_bf16(f, w, rows * FH));
  for (int m = 0; m < MB; m++) {
    size_t at = ((size_t)m * (size_t)n + (size_t)rank) * FB * FH;
    RK_CORE(tecore_memcpy(z->x[m], te_hptr(x + at), FB * FH * 2));
    RK_CORE(tecore_memcpy(z->dy[m], te_hptr(w + at), FB * FH * 2));
  }
}

static void passes(tecore_seq_t *q, tecomm_dp_t dp, const struct bufs *z, tecore_stream_t s) {
  RK_CORE(tecore_seq_zero_grad(q, s));
  for (int m = 0; m < MB; m++) {
    struct tecore_tensor X = t2(TECORE_DTYPE_BF16, FB, FH, z->x[m]),
                         Y = t2(TECORE_DTYPE_BF16, FB, FH, z->y),
                         DY = t2(TECORE_DTYPE_BF16, FB, FH, z->dy[m]);
    RK_CORE(tecore_seq_forward(q, &X, &Y, 0, s));
    if (m == MB - 1) RK_OK(tecomm_dp_arm(dp));
    RK_CORE(tecore_seq_backward(q, &DY, NULL, s));
  }
  RK_OK(tecomm_dp_finish(dp, s));
}

/* AdamW over this rank's shard (ZeRO-0: all) of each tensor: F32 masters
 * from the BF16 values, which it writes back. */
static void adam_init(tecomm_dp_t dp, tecore_seq_t *q, int zero, struct tecore_optim_tensor *ot) {
  static uint16_t hb[FH * FH];
  static float hf[FH * FH];
  struct tecore_seq_param p[FNP];
  params(q, p);
  for (size_t i = 0; i < FNP; i++) {
    const struct tecore_seq_param *r = &p[FNP - 1 - i];
    size_t first = 0, n = tecore_tensor_numel(&r->value);
    tecore_devptr_t v = r->value.data;
    if (zero) RK_OK(tecomm_dp_shard(dp, i, &first, &n));
    if (zero) RK_OK(tecomm_dp_value_shard(dp, i, &v));
    tecore_devptr_t m0 = dev_alloc(n ? n * 4 : 4), m1 = dev_alloc(n ? n * 4 : 4),
                    m2 = dev_alloc(n ? n * 4 : 4);
    RK_CORE(tecore_memset_d32_async(m1, 0, n ? n : 1, NULL));
    RK_CORE(tecore_memset_d32_async(m2, 0, n ? n : 1, NULL));
    RK_CORE(tecore_memcpy(te_hptr(hb), v, n * 2));
    RK_CORE(tecore_cvt_bf16_to_f32(hb, hf, n));
    RK_CORE(tecore_memcpy(m0, te_hptr(hf), n * 4));
    ot[i] = (struct tecore_optim_tensor){.param = m0, .grad = r->grad.data + first * 4,
                                         .exp_avg = m1, .exp_avg_sq = m2, .model = v,
                                         .numel = n, .grad_dtype = TECORE_DTYPE_F32,
                                         .model_dtype = TECORE_DTYPE_BF16};
  }
  RK_CORE(tecore_stream_synchronize(NULL));
}

static void adam(struct tecore_optim_tensor *ot, int64_t k, tecore_stream_t s) {
  struct tecore_adam_config ac = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                                  .weight_decay = 0.1, .step = k, .flags = TECORE_ADAM_W};
  RK_CORE(tecore_adam_step(ot, FNP, &ac, 0, 0, s));
}

static void same_bytes(const void *a, const void *b, size_t n, const char *what, int64_t k) {
  const unsigned char *x = a, *y = b;
  for (size_t i = 0; i < n; i++)
    RK_ASSERT(x[i] == y[i], "step %lld: ZeRO-3 %s byte %zu: 0x%02x, ZeRO-0 0x%02x",
              (long long)k, what, i, x[i], y[i]);
}

/* Each Linear's FP8 scale_inv, amax and scale, on the host (under ZeRO-3
 * the codes lie in the ring only while their unit does: the outputs and
 * the parameters after AdamW, whose gradients every layer's dgrad gave,
 * hold them to ZeRO-0's). */
struct w8host {
  float sc[FL][3];
};

static void w8_fetch(tecore_seq_t *q, struct w8host *h) {
  for (size_t l = 0; l < FL; l++) {
    struct tecore_tensor w8;
    RK_CORE(tecore_seq_fp8_weight(q, 2 * l, &w8));
    RK_CORE(tecore_memcpy(te_hptr(&h->sc[l][0]), w8.scale_inv, 4));
    RK_CORE(tecore_memcpy(te_hptr(&h->sc[l][1]), w8.amax, 4));
    RK_CORE(tecore_memcpy(te_hptr(&h->sc[l][2]), w8.scale, 4));
  }
}

/* The values after AdamW: ZeRO-0's from the sequence, ZeRO-3's gathered. */
static void values(tecore_seq_t *q, tecomm_dp_t d3, uint16_t *out, tecore_stream_t s) {
  struct tecore_seq_param p[FNP];
  params(q, p);
  tecore_devptr_t w = d3 ? dev_alloc(FH * FH * 2) : 0;
  size_t at = 0;
  for (size_t k = 0; k < FNP; k++) {
    size_t cnt = tecore_tensor_numel(&p[k].value);
    tecore_devptr_t src = p[k].value.data;
    if (d3) {
      RK_CORE(tecore_memset_d8_async(w, 0xff, cnt * 2, s));   /* poisoned: NaN */
      RK_OK(tecomm_dp_gather_value(d3, FNP - 1 - k, w, s));
      src = w;
    }
    RK_CORE(tecore_stream_synchronize(s));
    RK_CORE(tecore_memcpy(te_hptr(out + at), src, cnt * 2));
    at += cnt;
  }
  if (w) RK_CORE(tecore_mem_free(w));
}

static size_t gathered(tecomm_dp_t dp) {
  char line[4096];
  RK_OK(tecomm_dp_describe(dp, line, sizeof line, NULL));
  const char *v = strstr(line, "buckets of FP8 codes, ");
  size_t b = 0;
  RK_ASSERT(v && sscanf(v, "buckets of FP8 codes, %zu bytes gathered", &b) == 1,
            "describe: \"%s\"", line);
  return b;
}

static size_t fp8_buckets(tecomm_dp_t dp) {
  char line[4096];
  RK_OK(tecomm_dp_describe(dp, line, sizeof line, NULL));
  const char *v = strstr(line, "; values: ");
  size_t s0 = 0, s1 = 0, nb = 0, nz = 0, nu = 0, shards = 0;
  RK_ASSERT(v && sscanf(v, "; values: %zu sharded buckets in %zu units, shards %zu bytes, ring "
                        "%zu + %zu bytes, %zu buckets", &nz, &nu, &shards, &s0, &s1, &nb) == 6,
            "describe: \"%s\"", line);
  return nb;
}

/* One eager step, then (graphed) FP_STEPS - 1 more: ZeRO-3 against
 * ZeRO-0, each step's outputs, FP8 weights and values. */
static void step_both(tecore_seq_t *q0, tecore_seq_t *q3, tecomm_dp_t d0, tecomm_dp_t d3,
                      struct bufs *z, const int rn[3], tecore_stream_t s) {
  const int rank = rn[0], n = rn[1], graphed = rn[2];
  static struct tecore_optim_tensor a0[FNP], a3[FNP];
  static uint16_t y0[FB * FH], y3[FB * FH], v0[FG], v3[FG];
  static struct w8host h0, h3;
  adam_init(d0, q0, 0, a0);
  adam_init(d3, q3, 3, a3);
  tecore_graph_exec_t exec = NULL;
  for (int64_t k = 1; k <= FP_STEPS; k++) {
    draw(z, rank, n, 700 + (uint64_t)k);
    passes(q0, d0, z, s);
    RK_CORE(tecore_stream_synchronize(s));
    RK_CORE(tecore_memcpy(te_hptr(y0), z->y, sizeof y0));
    RK_CORE(tecore_memset_d8_async(z->y, 0xff, sizeof y0, s));   /* poisoned: NaN */
    if (graphed && k == 2) {
      tecore_graph_t g = NULL;
      RK_CORE(tecore_stream_begin_capture(s, TECORE_CAPTURE_THREAD_LOCAL));
      passes(q3, d3, z, s);
      RK_CORE(tecore_stream_end_capture(s, &g));
      RK_CORE(tecore_graph_instantiate(&exec, g));
      RK_CORE(tecore_graph_destroy(g));
    }
    if (exec) RK_CORE(tecore_graph_launch(exec, s));
    else passes(q3, d3, z, s);
    RK_CORE(tecore_stream_synchronize(s));
    RK_CORE(tecore_memcpy(te_hptr(y3), z->y, sizeof y3));
    same_bytes(y3, y0, sizeof y0, "output", k);
    w8_fetch(q0, &h0);
    w8_fetch(q3, &h3);
    same_bytes(&h3, &h0, sizeof h0, "FP8 weights' scale_inv, amax, scale", k);
    RK_CORE(tecore_seq_update_scales(q0, s));
    RK_CORE(tecore_seq_update_scales(q3, s));
    adam(a0, k, s);
    adam(a3, k, s);
    values(q0, NULL, v0, s);
    values(q3, d3, v3, s);
    same_bytes(v3, v0, sizeof v0, "values after AdamW", k);
    w8_fetch(q0, &h0);
    w8_fetch(q3, &h3);
    same_bytes(h3.sc, h0.sc, sizeof h0.sc, "scale_inv, amax, scale after the update", k);
    tc_rank_digest(v3, sizeof v3);
  }
  if (exec) RK_CORE(tecore_graph_exec_destroy(exec));
}

static void bufs_init(struct bufs *z) {
  for (int m = 0; m < MB; m++) z->x[m] = dev_alloc(FB * FH * 2), z->dy[m] = dev_alloc(FB * FH * 2);
  z->y = dev_alloc(FB * FH * 2);
}

/* A step of both on fresh rows: ZeRO-3's outputs ZeRO-0's bits. */
static void one_step(tecore_seq_t *q0, tecore_seq_t *q3, tecomm_dp_t d0, tecomm_dp_t d3,
                     struct bufs *z, const int rn[2], uint64_t k, tecore_stream_t s) {
  static uint16_t y0[FB * FH], y3[FB * FH];
  draw(z, rn[0], rn[1], k);
  passes(q0, d0, z, s);
  RK_CORE(tecore_stream_synchronize(s));
  RK_CORE(tecore_memcpy(te_hptr(y0), z->y, sizeof y0));
  RK_CORE(tecore_memset_d8_async(z->y, 0xff, sizeof y0, s));   /* poisoned: NaN */
  passes(q3, d3, z, s);
  RK_CORE(tecore_stream_synchronize(s));
  RK_CORE(tecore_memcpy(te_hptr(y3), z->y, sizeof y3));
  same_bytes(y3, y0, sizeof y0, "output after a recipe change", (int64_t)k);
  RK_CORE(tecore_seq_update_scales(q0, s));
  RK_CORE(tecore_seq_update_scales(q3, s));
}

/* The recipe changed under the group: current scaling has no FP8 weight
 * to hand out (the values gathered, the forwards quantize them), delayed
 * again the codes; ZeRO-0's outputs either way. */
static void recipe_change(tecore_seq_t *q0, tecore_seq_t *q3, tecomm_dp_t d0, tecomm_dp_t d3,
                          struct bufs *z, const int rn[2], tecore_stream_t s) {
  static const tecore_recipe_kind_t kinds[2] = {TECORE_RECIPE_CURRENT, TECORE_RECIPE_DELAYED};
  size_t moved[2];
  for (int i = 0; i < 2; i++) {
    struct tecore_recipe rc;
    RK_CORE(tecore_recipe_init(&rc, kinds[i]));
    RK_CORE(tecore_stream_synchronize(s));
    RK_CORE(tecore_seq_set_recipe(q0, &rc, s));
    RK_CORE(tecore_seq_set_recipe(q3, &rc, s));
    size_t g = gathered(d3);
    one_step(q0, q3, d0, d3, z, rn, 900 + (uint64_t)i, s);
    moved[i] = gathered(d3) - g;
  }
  /* the weights' half, the biases' BF16 alike: at most 55 % */
  RK_ASSERT(20 * moved[1] <= 11 * moved[0], "a step gathers %zu bytes under current scaling "
            "(the values), %zu under delayed (the codes): not about half", moved[0], moved[1]);
}

static void rank_fp8(int rank, int n, void *arg) {
  const int graphed = *(const int *)arg & 1;
  if (*(const int *)arg & 2) setenv("TECOMM_DP_FP8_KEEP", "1", 1);   /* the codes kept */
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  tecore_seq_t *q0 = model(s), *q3 = model(s);
  tecomm_dp_t d0 = group(c, q0, 0), d3 = group(c, q3, 3);
  RK_ASSERT(fp8_buckets(d3) == FL, "%zu buckets of FP8 codes, want %d", fp8_buckets(d3), FL);
  struct bufs z;
  bufs_init(&z);
  step_both(q0, q3, d0, d3, &z, (const int[3]){rank, n, graphed}, s);
  recipe_change(q0, q3, d0, d3, &z, (const int[2]){rank, n}, s);
  RK_OK(tecomm_dp_destroy(d3));   /* values back; the forwards quantize again */
  static uint16_t y0[FB * FH], y3[FB * FH];
  struct tecore_tensor X = t2(TECORE_DTYPE_BF16, FB, FH, z.x[0]),
                       Y = t2(TECORE_DTYPE_BF16, FB, FH, z.y);
  RK_CORE(tecore_seq_forward(q0, &X, &Y, 0, s));
  RK_CORE(tecore_stream_synchronize(s));
  RK_CORE(tecore_memcpy(te_hptr(y0), z.y, sizeof y0));
  RK_CORE(tecore_memset_d8_async(z.y, 0xff, sizeof y0, s));
  RK_CORE(tecore_seq_forward(q3, &X, &Y, 0, s));
  RK_CORE(tecore_stream_synchronize(s));
  RK_CORE(tecore_memcpy(te_hptr(y3), z.y, sizeof y3));
  same_bytes(y3, y0, sizeof y0, "output after destroy", FP_STEPS + 1);
  RK_OK(tecomm_dp_destroy(d0));
  RK_CORE(tecore_seq_destroy(q0));
  RK_CORE(tecore_seq_destroy(q3));
  (void)tecomm_comm_destroy(c);
}

/* ZeRO-3's steps are ZeRO-0's bit for bit under delayed FP8: the codes
 * each rank quantizes from its shard with the delayed scale are those the
 * whole weight gives, and the amax reduced with MAX is the whole
 * weight's.  _i: 2 or 4 ranks, eager or from the step graph; 4 and 5:
 * the codes kept across the step (TECOMM_DP_FP8_KEEP=1). */
START_TEST(zero_3_fp8_takes_zero_0_steps) {
  int n = _i % 2 ? 4 : 2, mode = (_i >= 2 && _i < 4) | (_i == 5) | (_i >= 4) << 1;
  tc_run_ranks(n, rank_fp8, &mode, 300);
  tc_expect_same_digest(n, "the values after the steps");
  tc_shm_release();
}
END_TEST

/* One eager step's bytes all-gathered by ZeRO-3: rank 0's count in
 * value[0][off]. */
static void rank_bytes(int rank, int n, void *arg) {
  const int off = *(const int *)arg;
  if (off) setenv("TECORE_OPS_FUSION_OFF", "weight_fp8", 1);   /* the values in BF16 */
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  tecore_seq_t *q = model(s);
  size_t before_mem = 0, after_mem = 0;
  RK_CORE(tecore_seq_memory(q, NULL, &before_mem));
  tecomm_dp_t dp = group(c, q, 3);
  RK_ASSERT(fp8_buckets(dp) == (off ? 0 : FL), "%zu buckets of FP8 codes", fp8_buckets(dp));
  /* the sequence keeps neither the values nor (codes gathered) the codes */
  RK_CORE(tecore_seq_memory(q, NULL, &after_mem));
  const size_t freed = (size_t)FG * 2 + (off ? 0 : (size_t)FL * FH * FH);
  RK_ASSERT(after_mem + freed <= before_mem, "the sequence holds %zu bytes, %zu before the "
            "group: less than %zu freed", after_mem, before_mem, freed);
  struct bufs z;
  bufs_init(&z);
  draw(&z, rank, n, 3);
  size_t before = gathered(dp);
  passes(q, dp, &z, s);
  RK_CORE(tecore_stream_synchronize(s));
  tc_shm->value[rank][0] = (double)(gathered(dp) - before);
  RK_OK(tecomm_dp_destroy(dp));
  RK_CORE(tecore_seq_destroy(q));
  (void)tecomm_comm_destroy(c);
}

/* The weights' codes are half the bytes of their BF16 values, gathered
 * before each forward and backward as the values are: a step moves half
 * the weights' bytes (the biases' BF16 values alike both ways: at most
 * 55 % of the whole). */
START_TEST(zero_3_fp8_gathers_half_the_bytes) {
  double b[2];
  for (int off = 0; off < 2; off++) {
    tc_run_ranks(2, rank_bytes, &off, 300);
    const int skipped = tc_ranks_skipped(2);
    b[off] = tc_shm->value[0][0];
    tc_shm_release();
    if (skipped) return;   /* fewer GPUs than ranks: no bytes were moved (said above) */
  }
  printf("# ZeRO-3, 2 ranks, %d microbatches: a step all-gathers %.0f bytes with FP8 codes, "
         "%.0f with BF16 values\n", MB, b[0], b[1]);
  ck_assert_msg(b[0] > 0 && b[0] <= 0.55 * b[1], "FP8 codes: %.0f bytes a step, BF16 values %.0f",
                b[0], b[1]);
}
END_TEST

/* TECOMM_DP_FP8_KEEP differs between the ranks (their gathers would
 * not pair): refused on every rank, the field named. */
static void rank_keep_mismatch(int rank, int n, void *arg) {
  (void)arg;
  if (rank == n - 1) setenv("TECOMM_DP_FP8_KEEP", "1", 1);
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  tecore_seq_t *q = model(s);
  struct tecore_seq_param p[FNP];
  struct tecomm_dp_tensor t[FNP];
  params(q, p);
  for (size_t i = 0; i < FNP; i++) {
    const struct tecore_seq_param *r = &p[FNP - 1 - i];
    t[i] = (struct tecomm_dp_tensor){.grad = r->grad.data, .grad_dtype = TECORE_DTYPE_F32,
                                     .value = r->value.data, .value_dtype = TECORE_DTYPE_BF16,
                                     .count = tecore_tensor_numel(&r->value), .op = r->op};
  }
  struct tecomm_dp_desc desc = {.comm = c, .tensors = t, .ntensors = FNP, .seq = q,
                                .bucket_bytes = 4096, .zero = 3};
  tecomm_dp_t dp = NULL;
  RK_EXPECT(TECOMM_ERR_MISMATCH, "TECOMM_DP_FP8_KEEP", tecomm_dp_create(&desc, &dp));
  RK_CORE(tecore_seq_destroy(q));
  (void)tecomm_comm_destroy(c);
}

START_TEST(zero_3_fp8_keep_differs_refused) {
  tc_run_ranks(2, rank_keep_mismatch, NULL, 120);
  tc_shm_release();
}
END_TEST

static Suite *dp_fp8_suite(void) {
  setenv("TECORE_VDEV_DEVICES", "8", 0);
  /* on cuda the small Linears would run in BF16 (TECORE_OPS_FP8_MIN_MNK's
   * default), and have no FP8 weight to gather */
  setenv("TECORE_OPS_FP8_MIN_MNK", "0", 0);
  Suite *s = suite_create("comm_dp_fp8");
  TCase *tc = te_tcase(s, "dp_fp8", 0);
  tcase_add_loop_test(tc, zero_3_fp8_takes_zero_0_steps, 0, 6);
  tcase_add_test(tc, zero_3_fp8_keep_differs_refused);
  tcase_add_test(tc, zero_3_fp8_gathers_half_the_bytes);
  return s;
}

TE_TEST_MAIN(dp_fp8_suite, TE_TEST_DEVICE)
