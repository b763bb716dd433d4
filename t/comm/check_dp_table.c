/* SPDX-License-Identifier: Apache-2.0
 * check_dp_table.c -- embedding tables held as shards by the
 * data-parallel group (TECOMM_DP_TABLE_SHARDS, te/comm_dp.h,
 * libtecomm/dp/dp_table.c), ranks as forked processes.  Each rank holds a
 * V x C F32 table (the same values) beside a plain F32 tensor, ZeRO-2 or
 * 3, the mean over the ranks (desc.scale 0), two microbatches a step of T
 * tokens a rank (ids fresh each step, one of them outside the table):
 *   - tecomm_dp_embedding_fwd gives each rank its tokens' rows, F32 or
 *     BF16, bit for bit the host's table[id] (a zero row for the id
 *     outside), eager and replayed from a captured step graph;
 *   - after both microbatches' tecomm_dp_embedding_bwd (dout F32 or BF16)
 *     and tecomm_dp_finish, this rank's gradient shard is bit for bit the
 *     host's F32 sums (every rank's tokens in order, rank 0 first; both
 *     microbatches; times 1 / ranks), and no element outside the shard
 *     exists on the device; a step with no backward leaves a zero shard;
 *   - the global norm's parts (tecomm_dp_norm_parts) count the table's
 *     shards: within 1e-6 of the host's norm over every gradient;
 *   - tecomm_dp_gather_value gives the whole table back, bit for bit;
 *   - C = 24 (the kernels' vector path) and 13 (elements), 2 and 4 ranks;
 *   - refusals name the argument (a first call while capturing among
 *     them); ranks whose table rows differ are
 *     refused with the field named; a rank killed before the forward is
 *     named by the other's status within TECOMM_TIMEOUT, nothing hangs. */
#include "comm_ranks.h"
#include <math.h>
#include <te/comm_dp.h>

enum { V = 100, T = 37, MB = 2, NX = 200, STEPS = 3 };

struct tcase {
  int nranks, cols, zero;
  tecore_dtype_t xdt;   /* the forward's output and dout */
};

static tecore_devptr_t dalloc(size_t bytes) {
  tecore_devptr_t p = 0;
  RK_CORE(tecore_mem_alloc(bytes, &p));
  return p;
}

static struct tecore_tensor tens(tecore_dtype_t dt, size_t r, size_t c, tecore_devptr_t p) {
  struct tecore_tensor t;
  size_t sh[2] = {r, c};
  RK_CORE(tecore_tensor_init(&t, dt, 2, sh, p));
  return t;
}

/* Rank r's ids of microbatch mb in step k: in [0, V), the last one V + 3
 * (outside: a zero row, no gradient). */
static void ids_of(int r, int k, int mb, int32_t *ids) {
  float f[T];
  tc_make_input(f, T, TECORE_DTYPE_F32, r, 1000 + 10 * (uint64_t)k + (uint64_t)mb);
  for (int t = 0; t < T; t++) ids[t] = (int32_t)((f[t] + 2.0f) * 1000.0f) % V;
  ids[T - 1] = V + 3;
}

static void dout_of(int r, int k, int mb, size_t C, tecore_dtype_t dt, void *h) {
  tc_make_input(h, T * C, dt, r, 2000 + 10 * (uint64_t)k + (uint64_t)mb);
}

static float elem(const void *h, size_t i, tecore_dtype_t dt) {
  return dt == TECORE_DTYPE_F32 ? ((const float *)h)[i] : te_bf16_to_f32(((const uint16_t *)h)[i]);
}

static uint32_t bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

struct tstate {
  const struct tcase *tc;
  int rank, n;
  size_t C, first, count;         /* the table's shard */
  float *table, *gref;            /* the whole table; the host's reduced gradient (V * C) */
  float *xref;                    /* the plain tensor's reduced gradient */
  tecore_devptr_t ids, out, dout, xg;
  tecomm_dp_t dp;
  tecore_stream_t s;
};

/* Step k's inputs on the device: each microbatch's ids and dout. */
static void upload(struct tstate *z, int k) {
  const size_t C = z->C, es = tecore_dtype_size(z->tc->xdt);
  int32_t ids[T];
  unsigned char hd[T * 24 * 4];
  for (int mb = 0; mb < MB; mb++) {
    ids_of(z->rank, k, mb, ids);
    dout_of(z->rank, k, mb, C, z->tc->xdt, hd);
    RK_CORE(tecore_memcpy(z->ids + (size_t)mb * T * 4, te_hptr(ids), sizeof ids));
    RK_CORE(tecore_memcpy(z->dout + (size_t)mb * T * C * es, te_hptr(hd), T * C * es));
  }
}

/* One step's passes (capturable): both microbatches' forward, each
 * into its own rows of out, and backward; finish. */
static void passes(struct tstate *z) {
  const size_t C = z->C, es = tecore_dtype_size(z->tc->xdt);
  for (int mb = 0; mb < MB; mb++) {
    tecore_devptr_t ids = z->ids + (size_t)mb * T * 4;
    struct tecore_tensor o = tens(z->tc->xdt, T, C, z->out + (size_t)mb * T * C * es);
    RK_OK(tecomm_dp_embedding_fwd(z->dp, 0, ids, T, &o, z->s));
    struct tecore_tensor d = tens(z->tc->xdt, T, C, z->dout + (size_t)mb * T * C * es);
    RK_OK(tecomm_dp_embedding_bwd(z->dp, 0, ids, T, &d, z->s));
  }
  RK_OK(tecomm_dp_finish(z->dp, z->s));
}

/* The step's outputs to the host (poisoned on the device after). */
static void outputs(struct tstate *z, void *hout) {
  const size_t n = (size_t)MB * T * z->C, es = tecore_dtype_size(z->tc->xdt);
  RK_CORE(tecore_stream_synchronize(z->s));
  RK_CORE(tecore_memcpy(te_hptr(hout), z->out, n * es));
  RK_CORE(tecore_memset_d8_async(z->out, 0xff, n * es, z->s));
}

/* The host's step k: the outputs of this rank's tokens and the reduced
 * gradients, in the device's order. */
static void reference(struct tstate *z, int k, void *oref) {
  const size_t C = z->C, es = tecore_dtype_size(z->tc->xdt);
  const float sc = 1.0f / (float)z->n;
  memset(z->gref, 0, V * C * sizeof *z->gref);
  int32_t ids[T];
  float *hd = malloc(T * C * 4);
  RK_ASSERT(hd, "out of host memory");
  for (int mb = 0; mb < MB; mb++) {
    ids_of(z->rank, k, mb, ids);
    for (size_t t = 0; t < T; t++)
      for (size_t c = 0; c < C; c++) {
        float v = ids[t] < V ? z->table[(size_t)ids[t] * C + c] : 0.0f;
        char *dst = (char *)oref + ((size_t)mb * T * C + t * C + c) * es;
        if (es == 4) memcpy(dst, &v, 4);
        else {
          uint16_t b = te_f32_to_bf16(v);
          memcpy(dst, &b, 2);
        }
      }
    for (int r = 0; r < z->n; r++) {   /* every rank's tokens, rank 0's first */
      ids_of(r, k, mb, ids);
      dout_of(r, k, mb, C, z->tc->xdt, hd);
      for (size_t t = 0; t < T; t++)
        for (size_t c = 0; c < C && ids[t] < V; c++)
          z->gref[(size_t)ids[t] * C + c] += elem(hd, t * C + c, z->tc->xdt);
    }
  }
  for (size_t i = 0; i < V * C; i++) z->gref[i] *= sc;
  free(hd);
}

static void check_step(struct tstate *z, int k, const void *hout, const void *oref,
                       const char *how) {
  const size_t C = z->C, es = tecore_dtype_size(z->tc->xdt);
  RK_ASSERT(!memcmp(hout, oref, (size_t)MB * T * C * es),
            "step %d (%s): the forward's rows differ from table[id]", k, how);
  tecore_devptr_t gp = 0;
  RK_OK(tecomm_dp_grad_shard(z->dp, 0, &gp));
  RK_ASSERT(!z->count || gp, "no gradient shard for %zu elements", z->count);
  float *g = malloc((z->count ? z->count : 1) * 4);
  RK_ASSERT(g, "out of host memory");
  if (z->count) RK_CORE(tecore_memcpy(te_hptr(g), gp, z->count * 4));
  for (size_t i = 0; i < z->count; i++)
    RK_ASSERT(bits(g[i]) == bits(z->gref[z->first + i]),
              "step %d (%s): table gradient element %zu: %.9g, the host's %.9g", k, how,
              z->first + i, (double)g[i], (double)z->gref[z->first + i]);
  free(g);
}

static void check_norm(struct tstate *z) {
  struct tecore_tensor vec;
  RK_OK(tecomm_dp_norm_parts(z->dp, &vec, z->s));
  float parts[8];
  RK_CORE(tecore_stream_synchronize(z->s));
  RK_CORE(tecore_memcpy(te_hptr(parts), vec.data, (size_t)z->n * 4));
  double got = 0, want = 0;
  for (int r = 0; r < z->n; r++) got += (double)parts[r] * parts[r];
  for (size_t i = 0; i < V * z->C; i++) want += (double)z->gref[i] * z->gref[i];
  for (size_t i = 0; i < NX; i++) want += (double)z->xref[i] * z->xref[i];
  got = sqrt(got), want = sqrt(want);
  RK_ASSERT(fabs(got - want) <= 1e-6 * want, "norm %.9g, the host's %.9g", got, want);
}

static void rank_table(int rank, int n, void *arg) {
  const struct tcase *tc = arg;
  struct tstate z = {.tc = tc, .rank = rank, .n = n, .C = (size_t)tc->cols};
  const size_t C = z.C, es = tecore_dtype_size(tc->xdt);
  tecomm_comm_t c = tc_rank_comm(rank, n);
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &z.s));
  z.table = malloc(V * C * 4), z.gref = malloc(V * C * 4), z.xref = calloc(NX, 4);
  RK_ASSERT(z.table && z.gref && z.xref, "out of host memory");
  tc_make_input(z.table, V * C, TECORE_DTYPE_F32, 0, 7);   /* the same table on every rank */
  tecore_devptr_t tv = dalloc(V * C * 4), tg = dalloc(V * C * 4), xv = dalloc(NX * 4);
  z.xg = dalloc(NX * 4);
  RK_CORE(tecore_memcpy(tv, te_hptr(z.table), V * C * 4));
  RK_CORE(tecore_memset_d32_async(tg, 0x7fc00000u, V * C, z.s));   /* never read: NaN */
  RK_CORE(tecore_memset_d32_async(xv, 0, NX, z.s));
  RK_CORE(tecore_stream_synchronize(z.s));
  const struct tecomm_dp_tensor t[2] = {
      {.name = "tok", .grad = tg, .grad_dtype = TECORE_DTYPE_F32, .value = tv,
       .value_dtype = TECORE_DTYPE_F32, .count = V * C, .op = TECOMM_DP_NO_OP, .rows = V},
      {.name = "x", .grad = z.xg, .grad_dtype = TECORE_DTYPE_F32, .value = xv,
       .value_dtype = TECORE_DTYPE_F32, .count = NX, .op = TECOMM_DP_NO_OP}};
  struct tecomm_dp_desc desc = {.comm = c, .tensors = t, .ntensors = 2, .zero = tc->zero,
                                .flags = TECOMM_DP_TABLE_SHARDS};
  RK_OK(tecomm_dp_create(&desc, &z.dp));
  RK_OK(tecomm_dp_shard(z.dp, 0, &z.first, &z.count));
  /* the caller's table is no longer read: poisoned */
  RK_CORE(tecore_memset_d32_async(tv, 0x7fc00000u, V * C, z.s));
  z.ids = dalloc(MB * T * 4), z.out = dalloc(MB * T * C * 4), z.dout = dalloc(MB * T * C * 4);
  void *hout = malloc((size_t)MB * T * C * es), *oref = malloc((size_t)MB * T * C * es);
  RK_ASSERT(hout && oref, "out of host memory");
  RK_CORE(tecore_memset_d8_async(z.out, 0xff, (size_t)MB * T * C * es, z.s));   /* poisoned */
  float xh[NX];
  tecore_graph_exec_t exec = NULL;
  for (int k = 1; k <= STEPS + 2; k++) {
    /* the plain tensor: every rank's k, reduced (mean) */
    for (size_t i = 0; i < NX; i++) xh[i] = (float)(rank + 1) * (float)k / 64.0f + (float)i;
    for (size_t i = 0; i < NX; i++) {
      float sum = 0;
      for (int r = 0; r < n; r++) sum += (float)(r + 1) * (float)k / 64.0f + (float)i;
      z.xref[i] = sum * (1.0f / (float)n);
    }
    RK_CORE(tecore_stream_synchronize(z.s));
    RK_CORE(tecore_memcpy(z.xg, te_hptr(xh), sizeof xh));
    upload(&z, k);
    reference(&z, k, oref);
    if (k == STEPS + 1) {   /* the scratch sized by the eager steps: the step captured */
      tecore_graph_t g = NULL;
      RK_CORE(tecore_stream_begin_capture(z.s, TECORE_CAPTURE_THREAD_LOCAL));
      passes(&z);
      RK_CORE(tecore_stream_end_capture(z.s, &g));
      RK_CORE(tecore_graph_instantiate(&exec, g));
      RK_CORE(tecore_graph_destroy(g));
    }
    if (exec) RK_CORE(tecore_graph_launch(exec, z.s));
    else passes(&z);
    outputs(&z, hout);
    check_step(&z, k, hout, oref, exec ? "graph" : "eager");
    check_norm(&z);
  }
  RK_CORE(tecore_graph_exec_destroy(exec));
  /* a step without the embedding's backward: a zero gradient shard */
  RK_OK(tecomm_dp_finish(z.dp, z.s));
  RK_CORE(tecore_stream_synchronize(z.s));
  memset(z.gref, 0, V * C * 4);
  check_step(&z, STEPS + 3, oref, oref, "no backward");
  /* the whole table back */
  float *whole = malloc(V * C * 4);
  RK_ASSERT(whole, "out of host memory");
  memset(whole, 0xff, V * C * 4);
  tecore_devptr_t wd = dalloc(V * C * 4);
  RK_OK(tecomm_dp_gather_value(z.dp, 0, wd, z.s));
  RK_CORE(tecore_stream_synchronize(z.s));
  RK_CORE(tecore_memcpy(te_hptr(whole), wd, V * C * 4));
  RK_ASSERT(!memcmp(whole, z.table, V * C * 4), "tecomm_dp_gather_value: the table differs");
  tc_rank_digest(whole, V * C * 4);
  char line[512];
  RK_OK(tecomm_dp_describe(z.dp, line, sizeof line, NULL));
  RK_ASSERT(strstr(line, " table [0,1)") && strstr(line, "; tables: shards "),
            "describe: %s", line);
  RK_OK(tecomm_dp_destroy(z.dp));
  tecore_devptr_t fr[] = {tv, tg, xv, z.xg, z.ids, z.out, z.dout, wd};
  for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) RK_CORE(tecore_mem_free(fr[i]));
  free(whole), free(hout), free(oref), free(z.table), free(z.gref), free(z.xref);
  RK_CORE(tecore_stream_destroy(z.s));
  RK_OK(tecomm_comm_destroy(c));
}

static const struct tcase cases[] = {
    {2, 24, 2, TECORE_DTYPE_F32}, {2, 24, 3, TECORE_DTYPE_BF16}, {4, 24, 2, TECORE_DTYPE_BF16},
    {2, 13, 2, TECORE_DTYPE_F32}, {4, 13, 3, TECORE_DTYPE_BF16}, {4, 24, 3, TECORE_DTYPE_F32}};

START_TEST(table_shards_take_the_whole_tables_steps) {
  const struct tcase *tc = &cases[_i];
  printf("# %d ranks, %d columns, ZeRO-%d, %s rows\n", tc->nranks, tc->cols, tc->zero,
         tecore_dtype_name(tc->xdt));
  tc_run_ranks(tc->nranks, rank_table, (void *)tc, 120);
  if (!tc_ranks_skipped(tc->nranks)) tc_expect_same_digest(tc->nranks, "the gathered table");
  tc_shm_release();
}
END_TEST

/* ---- refusals -------------------------------------------------------------------- */

static void rank_args(int rank, int n, void *arg) {
  (void)arg;
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  const size_t C = 16;
  tecore_devptr_t tv = dalloc(V * C * 4), tg = dalloc(V * C * 4), ids = dalloc(T * 4 + 4);
  tecore_devptr_t out = dalloc(T * C * 4);
  RK_CORE(tecore_memset_d32_async(tv, 0, V * C, s));
  RK_CORE(tecore_memset_d32_async(ids, 0, T + 1, s));
  RK_CORE(tecore_stream_synchronize(s));
  struct tecomm_dp_tensor t[2] = {
      {.name = "tok", .grad = tg, .grad_dtype = TECORE_DTYPE_F32, .value = tv,
       .value_dtype = TECORE_DTYPE_F32, .count = V * C, .op = TECOMM_DP_NO_OP, .rows = V},
      {.name = "plain", .grad = tg, .grad_dtype = TECORE_DTYPE_F32, .value = tv,
       .value_dtype = TECORE_DTYPE_F32, .count = 64, .op = TECOMM_DP_NO_OP}};
  struct tecomm_dp_desc desc = {.comm = c, .tensors = t, .ntensors = 2, .zero = 2,
                                .flags = TECOMM_DP_TABLE_SHARDS}, d2 = desc;
  struct tecomm_dp_tensor bad[2] = {t[0], t[1]};
  tecomm_dp_t dp = NULL;
  d2.zero = 1;
  RK_EXPECT(TECOMM_ERR_INVALID, "TECOMM_DP_TABLE_SHARDS needs ZeRO-2 or 3",
            tecomm_dp_create(&d2, &dp));
  d2 = desc, d2.tensors = bad, bad[0].rows = 7;   /* 1600 elements: not a multiple of 7 */
  RK_EXPECT(TECOMM_ERR_INVALID, "desc->tensors[0].rows 7", tecomm_dp_create(&d2, &dp));
  bad[0] = t[0], bad[0].value = 0;
  RK_EXPECT(TECOMM_ERR_INVALID, "desc->tensors[0].value is 0", tecomm_dp_create(&d2, &dp));
  RK_ASSERT(!dp, "a refused create gave a group");
  /* without the flag: a group with no table shards */
  d2 = desc, d2.flags = 0;
  RK_OK(tecomm_dp_create(&d2, &dp));
  struct tecore_tensor o = tens(TECORE_DTYPE_F32, T, C, out);
  RK_EXPECT(TECOMM_ERR_INVALID, "TECOMM_DP_TABLE_SHARDS",
            tecomm_dp_embedding_fwd(dp, 0, ids, T, &o, s));
  RK_OK(tecomm_dp_destroy(dp));
  RK_OK(tecomm_dp_create(&desc, &dp));
  /* the scratch is sized outside a capture only */
  tecore_graph_t g = NULL;
  RK_CORE(tecore_stream_begin_capture(s, TECORE_CAPTURE_THREAD_LOCAL));
  tecore_clear_error();
  tecomm_result_t cr = tecomm_dp_embedding_fwd(dp, 0, ids, T, &o, s);
  char cmsg[512];
  snprintf(cmsg, sizeof cmsg, "%s", tecomm_last_error());
  RK_CORE(tecore_stream_end_capture(s, &g));
  if (g) RK_CORE(tecore_graph_destroy(g));
  RK_ASSERT(cr == TECOMM_ERR_INVALID && strstr(cmsg, "outside a capture"),
            "a first call while capturing: %s (%s)", tecomm_result_name(cr), cmsg);
  RK_EXPECT(TECOMM_ERR_INVALID, "dp is NULL", tecomm_dp_embedding_fwd(NULL, 0, ids, T, &o, s));
  RK_EXPECT(TECOMM_ERR_INVALID, "not an embedding table",
            tecomm_dp_embedding_fwd(dp, 1, ids, T, &o, s));
  RK_EXPECT(TECOMM_ERR_INVALID, "index 2", tecomm_dp_embedding_fwd(dp, 2, ids, T, &o, s));
  RK_EXPECT(TECOMM_ERR_INVALID, "ids is 0", tecomm_dp_embedding_fwd(dp, 0, 0, T, &o, s));
  RK_EXPECT(TECOMM_ERR_INVALID, "not aligned", tecomm_dp_embedding_fwd(dp, 0, ids + 2, T, &o, s));
  RK_EXPECT(TECOMM_ERR_INVALID, "tokens 0", tecomm_dp_embedding_fwd(dp, 0, ids, 0, &o, s));
  RK_EXPECT(TECOMM_ERR_INVALID, "out is NULL", tecomm_dp_embedding_fwd(dp, 0, ids, T, NULL, s));
  RK_EXPECT(TECOMM_ERR_INVALID, "holds", tecomm_dp_embedding_fwd(dp, 0, ids, T - 1, &o, s));
  struct tecore_tensor o16 = tens(TECORE_DTYPE_F16, T, C, out);
  RK_EXPECT(TECOMM_ERR_INVALID, "F32 or BF16", tecomm_dp_embedding_bwd(dp, 0, ids, T, &o16, s));
  RK_OK(tecomm_dp_destroy(dp));
  RK_EXPECT(TECOMM_ERR_INVALID, "not a live", tecomm_dp_embedding_bwd(dp, 0, ids, T, &o, s));
  tecore_devptr_t fr[] = {tv, tg, ids, out};
  for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) RK_CORE(tecore_mem_free(fr[i]));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(bad_arguments_named) {
  tc_run_ranks(2, rank_args, NULL, 60);
  tc_shm_release();
}
END_TEST

/* The last rank's table has other rows (the same count): refused on
 * every rank, the field named. */
static void rank_mismatch(int rank, int n, void *arg) {
  (void)arg;
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_devptr_t tv = dalloc(V * 16 * 4), tg = dalloc(V * 16 * 4);
  const struct tecomm_dp_tensor t = {.grad = tg, .grad_dtype = TECORE_DTYPE_F32, .value = tv,
                                     .value_dtype = TECORE_DTYPE_F32, .count = V * 16,
                                     .op = TECOMM_DP_NO_OP, .rows = rank == n - 1 ? 2 * V : V};
  struct tecomm_dp_desc desc = {.comm = c, .tensors = &t, .ntensors = 1, .zero = 2,
                                .flags = TECOMM_DP_TABLE_SHARDS};
  tecomm_dp_t dp = NULL;
  RK_EXPECT(TECOMM_ERR_MISMATCH, "rows", tecomm_dp_create(&desc, &dp));
  RK_CORE(tecore_mem_free(tv));
  RK_CORE(tecore_mem_free(tg));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(mismatched_tables_refused_with_the_field_named) {
  tc_run_ranks(2, rank_mismatch, NULL, 60);
  tc_shm_release();
}
END_TEST

/* A rank killed before a step's forward: the other's call, stream or
 * status names it within TECOMM_TIMEOUT (1 s), nothing hangs. */
static void rank_killed(int rank, int n, void *arg) {
  (void)arg;
  setenv("TECOMM_TIMEOUT", "1000", 1);
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  const size_t C = 16;
  tecore_devptr_t tv = dalloc(V * C * 4), tg = dalloc(V * C * 4), ids = dalloc(T * 4);
  tecore_devptr_t out = dalloc(T * C * 4);
  RK_CORE(tecore_memset_d32_async(tv, 0, V * C, s));
  RK_CORE(tecore_memset_d32_async(ids, 0, T, s));
  RK_CORE(tecore_stream_synchronize(s));
  const struct tecomm_dp_tensor t = {.grad = tg, .grad_dtype = TECORE_DTYPE_F32, .value = tv,
                                     .value_dtype = TECORE_DTYPE_F32, .count = V * C,
                                     .op = TECOMM_DP_NO_OP, .rows = V};
  struct tecomm_dp_desc desc = {.comm = c, .tensors = &t, .ntensors = 1, .zero = 3,
                                .flags = TECOMM_DP_TABLE_SHARDS};
  tecomm_dp_t dp = NULL;
  RK_OK(tecomm_dp_create(&desc, &dp));
  struct tecore_tensor o = tens(TECORE_DTYPE_BF16, T, C, out);
  RK_OK(tecomm_dp_embedding_fwd(dp, 0, ids, T, &o, s));   /* the scratch sized */
  RK_CORE(tecore_stream_synchronize(s));
  RK_ASSERT(tc_shm_barrier(tc_shm) == 0, "barrier");
  if (rank == n - 1) raise(SIGKILL);
  tecomm_result_t f = tecomm_dp_embedding_fwd(dp, 0, ids, T, &o, s);
  if (f == TECOMM_SUCCESS) f = tecomm_dp_embedding_bwd(dp, 0, ids, T, &o, s);
  tecore_result_t w = te_stream_wait(s, 5000);
  RK_ASSERT(w == TECORE_SUCCESS, "the stream did not come back within 5 s");
  int peer = -2;
  tecomm_result_t st = tecomm_comm_status(c, &peer);
  RK_ASSERT(st == TECOMM_ERR_TIMEOUT, "status after a peer died: %s (%s; the calls: %s)",
            tecomm_result_name(st), tecomm_last_error(), tecomm_result_name(f));
  RK_ASSERT(peer == n - 1, "status names peer %d, want %d", peer, n - 1);
  (void)tecomm_dp_destroy(dp);
  (void)tecomm_comm_destroy(c);
}

START_TEST(killed_rank_named_not_hung) {
  tc_run_ranks_ex(2, rank_killed, NULL, 60, 1);
  tc_shm_release();
}
END_TEST

static Suite *dp_table_suite(void) {
  setenv("TECORE_VDEV_DEVICES", "8", 0);
  Suite *s = suite_create("comm_dp_table");
  TCase *tc = te_tcase(s, "dp_table", 0);
  tcase_add_loop_test(tc, table_shards_take_the_whole_tables_steps, 0,
                      (int)(sizeof cases / sizeof cases[0]));
  tcase_add_test(tc, bad_arguments_named);
  tcase_add_test(tc, mismatched_tables_refused_with_the_field_named);
  tcase_add_test(tc, killed_rank_named_not_hung);
  return s;
}

TE_TEST_MAIN(dp_table_suite, TE_TEST_DEVICE)
