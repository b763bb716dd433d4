/* SPDX-License-Identifier: Apache-2.0 */
/* check_embedding.c -- token embedding (te/embedding.h): the gather with
 * and without a positions' table (exact: one float add), the backward
 * against the order te/embedding.h promises (bit for bit) and a float64
 * reference, bit-identical run to run with many repeated ids over several
 * chunks, the vector kernels of several dtype pairs (whole and part-filled
 * items, aligned and unaligned ids) and the element path, out-of-range ids written as zeros
 * and reported on the next call and by tecore_embedding_check, the store
 * (the gather's reverse: named rows written, the others' poison kept),
 * shards of the token table (each shard's forward the whole table's inside
 * it and 0 outside, their sum the whole's; each shard's backward the
 * whole's bits, the storage around it untouched), and every bad argument.
 * Fresh random inputs, poisoned outputs. */
#include "parts_util.h"
#include <te/embedding.h>

START_TEST(embedding_fwd_values) {
  int V = 50, P = 16, H = 64, T = 40;
  tecore_dtype_t wd[2] = {TECORE_DTYPE_BF16, TECORE_DTYPE_F32};
  for (int k = 0; k < 2; k++)
    for (int hh = 0; hh < 2; hh++) {
      int Hh = hh ? 13 : H; /* 13: the element path */
      float *w = malloc(V * Hh * 4), *p = malloc(P * Hh * 4), *got = malloc(T * Hh * 4);
      int32_t ids[40], pos[40];
      te_rand_floats(w, (size_t)V * Hh, -1, 1);
      te_rand_floats(p, (size_t)P * Hh, -1, 1);
      for (int t = 0; t < T; t++) { ids[t] = (int32_t)te_rand_below(V); pos[t] = (int32_t)te_rand_below(P); }
      tecore_devptr_t dw = pu_upload(w, (size_t)V * Hh, wd[k]), dp = pu_upload(p, (size_t)P * Hh, TECORE_DTYPE_F32);
      tecore_devptr_t di = pu_upload_i32(ids, T), dpos = pu_upload_i32(pos, T), dout = te_dalloc(T * Hh * 4);
      struct tecore_tensor tw = pu_tensor2(wd[k], V, Hh, dw), tp = pu_tensor2(TECORE_DTYPE_F32, P, Hh, dp),
                           to = pu_tensor2(TECORE_DTYPE_F32, T, Hh, dout);
      for (int withp = 0; withp < 3; withp++) {
        te_poison_dev(dout, T * Hh * 4);
        struct tecore_embedding_args a = {.weight = &tw, .ids = di, .tokens = T,
                                          .pos_weight = withp ? &tp : NULL,
                                          .positions = withp == 1 ? dpos : 0,
                                          .seq_len = withp == 2 ? 16 : 0};
        TE_OK(tecore_embedding_fwd(&a, &to, te_stream));
        TE_OK(tecore_stream_synchronize(te_stream));
        te_d2h(got, dout, T * Hh * 4);
        for (int t = 0; t < T; t++)
          for (int j = 0; j < Hh; j++) {
            int ps = withp == 1 ? pos[t] : t % 16;
            float want = w[ids[t] * Hh + j] + (withp ? p[ps * Hh + j] : 0.0f);
            ck_assert_msg(got[t * Hh + j] == want, "out[%d][%d] %g want %g (pos table %d)", t, j,
                          got[t * Hh + j], want, withp);
          }
      }
      TE_OK(tecore_mem_free(dw)); TE_OK(tecore_mem_free(dp)); TE_OK(tecore_mem_free(di));
      TE_OK(tecore_mem_free(dpos)); TE_OK(tecore_mem_free(dout));
      free(w); free(p); free(got);
    }
}
END_TEST

/* dW in the promised order: chunks of 8192 tokens (TE_EMB_CHUNK); per
 * chunk each named row read (rounded to dt), its tokens' dy added in
 * order in float, and stored rounded. */
static void bwd_emulate(float *dw, const float *dy, const int32_t *ids, int T, int V, int H,
                        tecore_dtype_t dt) {
  for (int c0 = 0; c0 < T; c0 += 8192) {
    int c1 = c0 + 8192 < T ? c0 + 8192 : T;
    for (int v = 0; v < V; v++) {
      int any = 0;
      for (int t = c0; t < c1; t++) any |= ids[t] == v;
      if (!any) continue;
      for (int j = 0; j < H; j++) {
        float acc = dw[v * H + j];
        for (int t = c0; t < c1; t++)
          if (ids[t] == v) acc += dy[(size_t)t * H + j];
        dw[v * H + j] = pu_round(acc, dt);
      }
    }
  }
}

/* ids_off: the ids start that many int32 past a 16-byte boundary (the
 * kernel's scalar id loads). */
static void bwd_case(int T, int V, int H, tecore_dtype_t dyt, tecore_dtype_t dwt, int ids_off) {
  float *dy = malloc((size_t)T * H * 4), *w0 = malloc(V * H * 4), *want = malloc(V * H * 4),
        *got = malloc(V * H * 4), *got2 = malloc(V * H * 4);
  int32_t *ids = malloc((T + ids_off) * 4);
  double *ref = malloc(V * H * 8);
  te_rand_floats(dy, (size_t)T * H, -1, 1);
  te_rand_floats(w0, V * H, -1, 1);
  for (int t = 0; t < T + ids_off; t++)
    ids[t] = t % 5 ? (int32_t)te_rand_below(V / 3 + 1) : (int32_t)te_rand_below(V);
  tecore_devptr_t ddy = pu_upload(dy, (size_t)T * H, dyt), di0 = pu_upload_i32(ids, T + ids_off);
  tecore_devptr_t di = di0 + 4 * (tecore_devptr_t)ids_off;
  memmove(ids, ids + ids_off, T * 4);
  tecore_devptr_t dw = pu_upload(w0, V * H, dwt);
  struct tecore_tensor tdy = pu_tensor2(dyt, T, H, ddy), tdw = pu_tensor2(dwt, V, H, dw);
  struct tecore_embedding_args a = {.ids = di, .tokens = T};
  for (int run = 0; run < 2; run++) {
    float *w = pu_round(0, dwt) == 0 ? w0 : w0;
    tecore_devptr_t tmp = pu_upload(w, V * H, dwt);
    TE_OK(tecore_memcpy_async(dw, tmp, V * H * tecore_dtype_size(dwt), te_stream));
    TE_OK(tecore_embedding_bwd(&a, &tdy, &tdw, NULL, te_stream));
    TE_OK(tecore_stream_synchronize(te_stream));
    pu_download(run ? got2 : got, dw, V * H, dwt);
    TE_OK(tecore_mem_free(tmp));
  }
  te_expect_mem_eq(got2, got, V * H * 4, "dW, second run against first");
  memcpy(want, w0, V * H * 4);
  bwd_emulate(want, dy, ids, T, V, H, dwt);
  te_expect_f32_bits(got, want, V * H, "dW against the promised order");
  for (int i = 0; i < V * H; i++) ref[i] = w0[i];
  for (int t = 0; t < T; t++)
    for (int j = 0; j < H; j++) ref[ids[t] * H + j] += dy[(size_t)t * H + j];
  for (int i = 0; i < V * H; i++) {
    double tol = dwt == TECORE_DTYPE_F32 ? 1e-5 * (1 + fabs(ref[i])) * (T / 100 + 1) : 0.05 * (1 + fabs(ref[i]));
    ck_assert_msg(fabs(got[i] - ref[i]) <= tol, "dW[%d] %g, float64 %g", i, got[i], ref[i]);
  }
  TE_OK(tecore_mem_free(ddy)); TE_OK(tecore_mem_free(di0)); TE_OK(tecore_mem_free(dw));
  free(dy); free(w0); free(want); free(got); free(got2); free(ids); free(ref);
}

START_TEST(embedding_bwd_deterministic) {
  bwd_case(2600, 150, 64, TECORE_DTYPE_BF16, TECORE_DTYPE_F32, 0);  /* 3 blocks */
  bwd_case(17000, 150, 16, TECORE_DTYPE_F32, TECORE_DTYPE_BF16, 0); /* 3 chunks: bf16 rounds */
  bwd_case(300, 20, 24, TECORE_DTYPE_F32, TECORE_DTYPE_BF16, 0);
  bwd_case(1500, 200, 520, TECORE_DTYPE_BF16, TECORE_DTYPE_F32, 0); /* a part-filled warp item */
  bwd_case(300, 40, 1288, TECORE_DTYPE_F32, TECORE_DTYPE_F32, 0);   /* items 768, 1024 wide */
  bwd_case(300, 40, 1288, TECORE_DTYPE_BF16, TECORE_DTYPE_F32, 0);
  bwd_case(3000, 130, 64, TECORE_DTYPE_F16, TECORE_DTYPE_F16, 1);   /* ids not 16-byte aligned */
  bwd_case(9000, 70, 8, TECORE_DTYPE_BF16, TECORE_DTYPE_BF16, 3);   /* ... and a short quad */
  bwd_case(200, 70, 7, TECORE_DTYPE_F16, TECORE_DTYPE_F32, 0);      /* element path */
}
END_TEST

START_TEST(embedding_bwd_positions_table) {
  int T = 30, V = 9, P = 10, H = 16;
  float dy[30 * 16], zero[160] = {0}, got[160];
  int32_t ids[30];
  te_rand_floats(dy, T * H, -1, 1);
  for (int t = 0; t < T; t++) ids[t] = (int32_t)te_rand_below(V);
  tecore_devptr_t ddy = pu_upload(dy, T * H, TECORE_DTYPE_F32), di = pu_upload_i32(ids, T);
  tecore_devptr_t dw = pu_upload(zero, V * H, TECORE_DTYPE_F32), dp = pu_upload(zero, P * H, TECORE_DTYPE_F32);
  struct tecore_tensor tdy = pu_tensor2(TECORE_DTYPE_F32, T, H, ddy),
                       tdw = pu_tensor2(TECORE_DTYPE_F32, V, H, dw),
                       tdp = pu_tensor2(TECORE_DTYPE_F32, P, H, dp);
  struct tecore_embedding_args a = {.ids = di, .tokens = T, .seq_len = 10};
  TE_OK(tecore_embedding_bwd(&a, &tdy, &tdw, &tdp, te_stream));
  te_d2h(got, dp, P * H * 4);
  for (int p = 0; p < P; p++)
    for (int j = 0; j < H; j++) {
      float want = 0;
      for (int t = p; t < T; t += 10) want += dy[t * H + j];
      ck_assert_msg(got[p * H + j] == want, "dpos[%d][%d] %g want %g", p, j, got[p * H + j], want);
    }
  TE_OK(tecore_mem_free(ddy)); TE_OK(tecore_mem_free(di));
  TE_OK(tecore_mem_free(dw)); TE_OK(tecore_mem_free(dp));
}
END_TEST

/* The position table with its positions implied (t % S, S <= its P rows:
 * te_emb_bwd_pos, a thread a vector): random rows to add to, against the
 * promised order (bwd_emulate's chunks, 16-bit rows rounded where a chunk
 * ends), rows S..P-1 untouched, the dy table's gradient beside it. */
static void pos_case(int T, int S, int P, int H, tecore_dtype_t dyt, tecore_dtype_t dwt) {
  float *dy = malloc((size_t)T * H * 4), *w0 = malloc((size_t)P * H * 4),
        *want = malloc((size_t)P * H * 4), *got = malloc((size_t)P * H * 4);
  int32_t *pos = malloc((size_t)T * 4), *ids = malloc((size_t)T * 4);
  te_rand_floats(dy, (size_t)T * H, -1, 1);
  te_rand_floats(w0, (size_t)P * H, -1, 1);
  for (int t = 0; t < T; t++) {
    pos[t] = t % S;
    ids[t] = (int32_t)te_rand_below(7);
  }
  tecore_devptr_t ddy = pu_upload(dy, (size_t)T * H, dyt), di = pu_upload_i32(ids, T);
  tecore_devptr_t dp = pu_upload(w0, (size_t)P * H, dwt);
  tecore_devptr_t dw = te_dalloc((size_t)7 * H * 4);
  TE_OK(tecore_memset_d8_async(dw, 0, (size_t)7 * H * 4, te_stream));
  struct tecore_tensor tdy = pu_tensor2(dyt, T, H, ddy), tdp = pu_tensor2(dwt, P, H, dp),
                       tdw = pu_tensor2(TECORE_DTYPE_F32, 7, H, dw);
  struct tecore_embedding_args a = {.ids = di, .tokens = T, .seq_len = S};
  TE_OK(tecore_embedding_bwd(&a, &tdy, &tdw, &tdp, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  pu_download(got, dp, (size_t)P * H, dwt);
  for (int i = 0; i < P * H; i++) w0[i] = pu_round(w0[i], dwt);
  memcpy(want, w0, (size_t)P * H * 4);
  bwd_emulate(want, dy, pos, T, P, H, dwt);
  char what[96];
  snprintf(what, sizeof what, "dpos T %d S %d P %d H %d %s -> %s", T, S, P, H,
           tecore_dtype_name(dyt), tecore_dtype_name(dwt));
  te_expect_f32_bits(got, want, (size_t)P * H, what);
  TE_OK(tecore_mem_free(ddy)); TE_OK(tecore_mem_free(di));
  TE_OK(tecore_mem_free(dp)); TE_OK(tecore_mem_free(dw));
  free(dy); free(w0); free(want); free(got); free(pos); free(ids);
}

START_TEST(embedding_bwd_positions_implied) {
  pos_case(17000, 1000, 1200, 16, TECORE_DTYPE_F32, TECORE_DTYPE_BF16); /* 3 chunks: rounds */
  pos_case(17000, 999, 999, 8, TECORE_DTYPE_BF16, TECORE_DTYPE_F16);
  pos_case(2600, 128, 130, 64, TECORE_DTYPE_BF16, TECORE_DTYPE_F32);    /* GPT-2's types */
  pos_case(700, 1000, 1000, 24, TECORE_DTYPE_F16, TECORE_DTYPE_F32);    /* tokens < seq_len */
  pos_case(301, 7, 9, 40, TECORE_DTYPE_F32, TECORE_DTYPE_F32);          /* a part sequence */
}
END_TEST

START_TEST(embedding_out_of_range_reported) {
  int V = 10, H = 16, T = 8;
  float w[160], got[8 * 16];
  int32_t ids[8] = {1, 2, 3, 10, 4, 5, 6, 7};
  te_rand_floats(w, V * H, -1, 1);
  uint64_t *st = NULL;
  TE_OK(tecore_mem_alloc_host(sizeof *st, (void **)&st));
  *st = 0;
  tecore_devptr_t dw = pu_upload(w, V * H, TECORE_DTYPE_F32), di = pu_upload_i32(ids, T),
                  dout = te_dalloc(T * H * 4);
  te_poison_dev(dout, T * H * 4);
  struct tecore_tensor tw = pu_tensor2(TECORE_DTYPE_F32, V, H, dw),
                       to = pu_tensor2(TECORE_DTYPE_F32, T, H, dout);
  struct tecore_embedding_args a = {.weight = &tw, .ids = di, .tokens = T, .status = st};
  TE_OK(tecore_embedding_fwd(&a, &to, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  te_d2h(got, dout, sizeof got);
  for (int j = 0; j < H; j++) ck_assert_msg(got[3 * H + j] == 0.0f, "row of id 10 not zero");
  ck_assert_msg(got[4 * H] == w[4 * H], "row 4 wrong");
  /* the next call reports it (and queues nothing), then works again */
  TE_EXPECT_INVALID("token 3", tecore_embedding_fwd(&a, &to, te_stream));
  ck_assert_msg(strstr(tecore_last_error(), "id 10"), "detail: %s", tecore_last_error());
  ck_assert_msg(*st == 0, "status not cleared");
  ids[3] = -5;
  te_h2d(di, ids, sizeof ids);
  TE_OK(tecore_embedding_fwd(&a, &to, te_stream));
  TE_EXPECT_INVALID("id -5", tecore_embedding_check(st, te_stream));
  TE_OK(tecore_embedding_check(st, te_stream));
  /* the backward drops it and reports it too */
  struct tecore_tensor tdw = pu_tensor2(TECORE_DTYPE_F32, V, H, dw);
  TE_OK(tecore_embedding_bwd(&a, &to, &tdw, NULL, te_stream));
  TE_EXPECT_INVALID("token 3", tecore_embedding_check(st, te_stream));
  TE_OK(tecore_mem_free(dw)); TE_OK(tecore_mem_free(di)); TE_OK(tecore_mem_free(dout));
  TE_OK(tecore_mem_free_host(st));
}
END_TEST

/* The backward's ids out of range where a thread's 32 ids are loaded at
 * once (100 tokens: threads 0-2 take whole quads): the bad tokens add
 * nothing, every other row is the float64 sum, and one of them is reported. */
START_TEST(embedding_bwd_out_of_range_vector_ids) {
  enum { T = 100, V = 150, H = 64 };
  static float dy[T * H], w0[V * H], got[V * H];
  static double ref[V * H];
  int32_t ids[T];
  te_rand_floats(dy, T * H, -1, 1);
  te_rand_floats(w0, V * H, -1, 1);
  for (int t = 0; t < T; t++) ids[t] = (int32_t)te_rand_below(V);
  ids[40] = V;   /* past the table, thread 1 */
  ids[70] = -3;  /* negative, thread 2 */
  uint64_t *st = NULL;
  TE_OK(tecore_mem_alloc_host(sizeof *st, (void **)&st));
  *st = 0;
  tecore_devptr_t ddy = pu_upload(dy, T * H, TECORE_DTYPE_BF16), di = pu_upload_i32(ids, T),
                  dw = pu_upload(w0, V * H, TECORE_DTYPE_F32);
  struct tecore_tensor tdy = pu_tensor2(TECORE_DTYPE_BF16, T, H, ddy),
                       tdw = pu_tensor2(TECORE_DTYPE_F32, V, H, dw);
  struct tecore_embedding_args a = {.ids = di, .tokens = T, .status = st};
  TE_OK(tecore_embedding_bwd(&a, &tdy, &tdw, NULL, te_stream));
  TE_EXPECT_INVALID("token", tecore_embedding_check(st, te_stream));
  const char *e = tecore_last_error();
  ck_assert_msg(strstr(e, "token 40") || strstr(e, "token 70"), "detail: %s", e);
  pu_download(got, dw, V * H, TECORE_DTYPE_F32);
  for (int i = 0; i < V * H; i++) ref[i] = w0[i];
  for (int t = 0; t < T; t++)
    if (ids[t] >= 0 && ids[t] < V)
      for (int j = 0; j < H; j++) ref[ids[t] * H + j] += pu_round(dy[t * H + j], TECORE_DTYPE_BF16);
  for (int i = 0; i < V * H; i++)
    ck_assert_msg(fabs(got[i] - ref[i]) <= 1e-5 * (1 + fabs(ref[i])), "dW[%d] %g, float64 %g",
                  i, got[i], ref[i]);
  TE_OK(tecore_mem_free(ddy)); TE_OK(tecore_mem_free(di)); TE_OK(tecore_mem_free(dw));
  TE_OK(tecore_mem_free_host(st));
}
END_TEST

/* tecore_embedding_store: the named rows of a poisoned table get the
 * input rows (converted: exact for bf16 -> f32 and f32 -> bf16 rounded
 * once, as pu_round does), every other row keeps its poison; an id past
 * the table writes nothing and is reported; the vector (H 64) and element
 * (H 13) paths. */
START_TEST(embedding_store_rows) {
  int V = 37, T = 11;
  tecore_dtype_t it[2] = {TECORE_DTYPE_F32, TECORE_DTYPE_BF16};
  tecore_dtype_t tt[2] = {TECORE_DTYPE_BF16, TECORE_DTYPE_F32};
  uint64_t *st = NULL;
  TE_OK(tecore_mem_alloc_host(sizeof *st, (void **)&st));
  *st = 0;
  for (int k = 0; k < 2; k++)
    for (int hh = 0; hh < 2; hh++) {
      int H = hh ? 13 : 64;
      size_t es = tecore_dtype_size(tt[k]);
      float *in = malloc((size_t)T * H * 4), *got = malloc((size_t)V * H * 4);
      unsigned char *poison = malloc((size_t)V * H * es), *raw = malloc((size_t)V * H * es);
      int32_t ids[11], perm[37];
      for (int i = 0; i < V; i++) perm[i] = i;
      for (int i = V - 1; i > 0; i--) {   /* distinct ids: a shuffle's first T */
        int j = (int)te_rand_below((uint32_t)i + 1), x = perm[i];
        perm[i] = perm[j], perm[j] = x;
      }
      for (int t = 0; t < T; t++) ids[t] = perm[t];
      ids[5] = V + 3;   /* past the table: nothing written, reported */
      te_rand_floats(in, (size_t)T * H, -4, 4);
      tecore_devptr_t din = pu_upload(in, (size_t)T * H, it[k]), di = pu_upload_i32(ids, T);
      tecore_devptr_t dt = te_dalloc((size_t)V * H * es);
      te_poison_dev(dt, (size_t)V * H * es);
      te_d2h(poison, dt, (size_t)V * H * es);
      struct tecore_tensor ti = pu_tensor2(it[k], T, H, din), tb = pu_tensor2(tt[k], V, H, dt);
      TE_OK(tecore_embedding_store(&ti, di, &tb, st, te_stream));
      TE_EXPECT_INVALID("token 5", tecore_embedding_check(st, te_stream));
      te_d2h(raw, dt, (size_t)V * H * es);
      pu_download(got, dt, (size_t)V * H, tt[k]);
      for (int r = 0; r < V; r++) {
        int t = -1;
        for (int q = 0; q < T; q++)
          if (ids[q] == r) t = q;
        if (t < 0) {
          ck_assert_msg(!memcmp(raw + (size_t)r * H * es, poison + (size_t)r * H * es, H * es),
                        "row %d, named by no id, was written (H %d)", r, H);
          continue;
        }
        for (int j = 0; j < H; j++)
          ck_assert_msg(got[r * H + j] == pu_round(in[t * H + j], tt[k]),
                        "table[%d][%d] = %g, want in[%d][%d] = %g (H %d)", r, j,
                        got[r * H + j], t, j, in[t * H + j], H);
      }
      TE_OK(tecore_mem_free(din)); TE_OK(tecore_mem_free(di)); TE_OK(tecore_mem_free(dt));
      free(in); free(got); free(poison); free(raw);
    }
  /* arguments */
  tecore_devptr_t b = te_dalloc(1 << 16);
  struct tecore_tensor ti = pu_tensor2(TECORE_DTYPE_BF16, 4, 64, b),
                       tb = pu_tensor2(TECORE_DTYPE_BF16, 10, 64, b + 8192), bad;
  tecore_devptr_t ids = b + 32768;
  TE_OK(tecore_memset_d32_async(ids, 1, 16, te_stream));
  TE_OK(tecore_embedding_store(&ti, ids, &tb, NULL, te_stream));
  TE_EXPECT_INVALID("in", tecore_embedding_store(NULL, ids, &tb, NULL, te_stream));
  TE_EXPECT_INVALID("table", tecore_embedding_store(&ti, ids, NULL, NULL, te_stream));
  TE_EXPECT_INVALID("ids", tecore_embedding_store(&ti, 0, &tb, NULL, te_stream));
  TE_EXPECT_INVALID("ids", tecore_embedding_store(&ti, ids + 2, &tb, NULL, te_stream));
  bad = tb; bad.shape[1] = 32;
  TE_EXPECT_INVALID("table", tecore_embedding_store(&ti, ids, &bad, NULL, te_stream));
  bad = tb; bad.dtype = TECORE_DTYPE_E4M3;
  TE_EXPECT_INVALID("table", tecore_embedding_store(&ti, ids, &bad, NULL, te_stream));
  bad = tb; bad.data = b + 64;
  TE_EXPECT_INVALID("overlaps", tecore_embedding_store(&ti, ids, &bad, NULL, te_stream));
  TE_EXPECT_INVALID("status", tecore_embedding_store(&ti, ids, &tb, (uint64_t *)(uintptr_t)4,
                                                     te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  TE_OK(tecore_mem_free(b));
  TE_OK(tecore_mem_free_host(st));
}
END_TEST

START_TEST(embedding_bad_arguments) {
  tecore_devptr_t b = te_dalloc(1 << 16);
  struct tecore_tensor tw = pu_tensor2(TECORE_DTYPE_BF16, 10, 64, b),
                       to = pu_tensor2(TECORE_DTYPE_F32, 4, 64, b + 8192), bad,
                       tp = pu_tensor2(TECORE_DTYPE_F32, 8, 64, b + 16384);
  tecore_devptr_t ids = b + 32768;
  TE_OK(tecore_memset_d32_async(ids, 1, 16, te_stream));
  struct tecore_embedding_args g = {.weight = &tw, .ids = ids, .tokens = 4}, a;
  TE_OK(tecore_embedding_fwd(&g, &to, te_stream));
  TE_EXPECT_INVALID("args", tecore_embedding_fwd(NULL, &to, te_stream));
  TE_EXPECT_INVALID("out", tecore_embedding_fwd(&g, NULL, te_stream));
  a = g; a.weight = NULL;
  TE_EXPECT_INVALID("args->weight", tecore_embedding_fwd(&a, &to, te_stream));
  a = g; a.ids = 0;
  TE_EXPECT_INVALID("args->ids", tecore_embedding_fwd(&a, &to, te_stream));
  a = g; a.ids = ids + 2;
  TE_EXPECT_INVALID("args->ids", tecore_embedding_fwd(&a, &to, te_stream));
  a = g; a.tokens = 5;
  TE_EXPECT_INVALID("args->tokens", tecore_embedding_fwd(&a, &to, te_stream));
  a = g; a.positions = ids; a.seq_len = 3;
  TE_EXPECT_INVALID("args->seq_len", tecore_embedding_fwd(&a, &to, te_stream));
  bad = tp; bad.shape[1] = 32; a = g; a.pos_weight = &bad;
  TE_EXPECT_INVALID("args->pos_weight", tecore_embedding_fwd(&a, &to, te_stream));
  bad = to; bad.shape[1] = 32;
  TE_EXPECT_INVALID("out", tecore_embedding_fwd(&g, &bad, te_stream));
  bad = to; bad.dtype = TECORE_DTYPE_E4M3;
  TE_EXPECT_INVALID("out", tecore_embedding_fwd(&g, &bad, te_stream));
  bad = to; bad.data = b + 64;
  TE_EXPECT_INVALID("out->data overlaps args->weight", tecore_embedding_fwd(&g, &bad, te_stream));
  a = g; a.status = (uint64_t *)(uintptr_t)4;
  TE_EXPECT_INVALID("args->status", tecore_embedding_fwd(&a, &to, te_stream));
  TE_EXPECT_INVALID("status", tecore_embedding_check(NULL, te_stream));
  TE_EXPECT_INVALID("dout", tecore_embedding_bwd(&g, NULL, &tp, NULL, te_stream));
  TE_EXPECT_INVALID("dweight", tecore_embedding_bwd(&g, &to, NULL, NULL, te_stream));
  bad = tp; bad.shape[1] = 32;
  TE_EXPECT_INVALID("dweight", tecore_embedding_bwd(&g, &to, &bad, NULL, te_stream));
  TE_EXPECT_INVALID("dpos_weight", tecore_embedding_bwd(&g, &to, &tp, &bad, te_stream));
  TE_EXPECT_INVALID("dweight->data overlaps dout", tecore_embedding_bwd(&g, &to, &to, NULL, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  TE_OK(tecore_mem_free(b));
}
END_TEST

/* A status word that is not live mapped host memory (a plain heap word
 * holding what looks like a report, a freed mapped word) is refused
 * before it is read or cleared: the heap word keeps its bits, the freed
 * one is never touched (ASan would see it), and nothing is queued. */
START_TEST(embedding_status_unmapped_untouched) {
  tecore_devptr_t b = te_dalloc(1 << 16);
  struct tecore_tensor tw = pu_tensor2(TECORE_DTYPE_F32, 10, 64, b),
                       to = pu_tensor2(TECORE_DTYPE_F32, 4, 64, b + 8192);
  tecore_devptr_t ids = b + 32768;
  TE_OK(tecore_memset_d32_async(ids, 1, 4, te_stream));
  te_poison_dev(to.data, 4 * 64 * 4);
  uint64_t *heap = malloc(sizeof *heap), *freed = NULL;
  ck_assert_ptr_nonnull(heap);
  const uint64_t word = (3ull << 32) | 77u;   /* "id 77 at token 3" */
  *heap = word;
  struct tecore_embedding_args a = {.weight = &tw, .ids = ids, .tokens = 4, .status = heap};
  TE_EXPECT_INVALID("not mapped host memory", tecore_embedding_fwd(&a, &to, te_stream));
  ck_assert_msg(*heap == word, "the refused status word was cleared: %#llx",
                (unsigned long long)*heap);
  TE_EXPECT_INVALID("not mapped host memory", tecore_embedding_check(heap, te_stream));
  ck_assert_msg(*heap == word, "tecore_embedding_check cleared an unmapped word");
  TE_OK(tecore_mem_alloc_host(sizeof *freed, (void **)&freed));
  TE_OK(tecore_mem_free_host(freed));
  a.status = freed;
  TE_EXPECT_INVALID("args->status", tecore_embedding_fwd(&a, &to, te_stream));
  TE_EXPECT_INVALID("args->status", tecore_embedding_bwd(&a, &to, &tw, NULL, te_stream));
  TE_EXPECT_INVALID("status", tecore_embedding_store(&to, ids, &tw, freed, te_stream));
  TE_EXPECT_INVALID("status", tecore_embedding_check(freed, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  uint32_t got;
  te_d2h(&got, to.data, sizeof got);
  ck_assert_msg(got == 0xA5A5A5A5u, "a refused call wrote out: %#x", got);
  free(heap);
  TE_OK(tecore_mem_free(b));
}
END_TEST

/* ---- shards of the token table (args->shard_first, shard_count) ---------- */

/* cut[0] = 0 < cut[1] < ... < cut[ns] = n, the inner cuts drawn fresh,
 * multiples of align (8: the vector path's shards). */
static void shard_cuts(size_t n, int ns, size_t align, size_t *cut) {
  cut[0] = 0;
  cut[ns] = n;
  for (int k = 1; k < ns; k++) {
    int dup;
    do {
      cut[k] = (1 + te_rand_below(n / align - 1)) * align;
      dup = 0;
      for (int q = 1; q < k; q++) dup |= cut[q] == cut[k];
    } while (dup);
    for (int q = k; q > 1 && cut[q - 1] > cut[q]; q--) {
      size_t x = cut[q];
      cut[q] = cut[q - 1], cut[q - 1] = x;
    }
  }
}

#define SHARD_GUARD 8   /* poisoned elements either side of a shard's storage */

/* A shard's storage: count elements of dt copied from the whole table at
 * first, with SHARD_GUARD poisoned elements either side when guard (the
 * data then 16 or 32 bytes past the allocation: aligned), else exactly
 * count elements (the range checks and ASan see a read past them). */
static tecore_devptr_t shard_alloc(tecore_devptr_t whole, size_t first, size_t count,
                                   tecore_dtype_t dt, int guard, tecore_devptr_t *data) {
  size_t es = tecore_dtype_size(dt), g = guard ? SHARD_GUARD : 0;
  tecore_devptr_t b = te_dalloc((count + 2 * g) * es);
  te_poison_dev(b, (count + 2 * g) * es);
  *data = b + g * es;
  TE_OK(tecore_memcpy_async(*data, whole + first * es, count * es, te_stream));
  return b;
}

/* ids over [0, V) with repeats, each row on either side of an inner cut
 * named twice, and ids[bad] outside the table. */
static void shard_ids(int32_t *ids, int T, int V, int H, const size_t *cut, int ns, int bad) {
  for (int t = 0; t < T; t++)
    ids[t] = t > 0 && te_rand_below(4) == 0 ? ids[te_rand_below((uint64_t)t)]
                                             : (int32_t)te_rand_below((uint64_t)V);
  for (int k = 1; k < ns; k++)
    for (int d = -1; d <= 1; d++)
      for (int rep = 0; rep < 2; rep++) {
        long long r = (long long)(cut[k] - (d < 0)) / H + (d > 0);
        int t = (int)te_rand_below((uint64_t)T);
        if (r < V && t != bad) ids[t] = (int32_t)r;
      }
  ids[bad] = te_rand_below(2) ? V + (int32_t)te_rand_below(4) : -1 - (int32_t)te_rand_below(4);
}

/* The status word after a call: the bad token reported, and cleared. */
static void shard_reported(uint64_t *st, int bad, const char *what) {
  char tok[32];
  snprintf(tok, sizeof tok, "token %d ", bad);
  tecore_clear_error();
  tecore_result_t r = tecore_embedding_check(st, te_stream);
  ck_assert_msg(r == TECORE_ERR_INVALID && strstr(tecore_last_error(), tok),
                "%s: the id outside the table not reported: %s (%s)", what,
                tecore_result_name(r), tecore_last_error());
}

/* A [V][H] table of dtype wt split at cut[0..ns] (NULL: drawn, multiples
 * of align).  Forward: each shard's output is the whole table's inside
 * the shard and +0 outside, and their sum is the whole's, bit for bit.
 * Backward (dy dtype dyt, random dW): each shard's elements get the whole
 * table's bits; guards around even shards keep their poison, odd shards
 * have storage of exactly their elements.  The whole table against the
 * host (exact gather; the promised order, and float64). */
static void shard_case(int V, int H, int T, tecore_dtype_t wt, tecore_dtype_t dyt, int ns,
                       size_t align, const size_t *fixed) {
  const size_t n = (size_t)V * H, es = tecore_dtype_size(wt);
  size_t cut[9];
  ck_assert(ns >= 1 && ns <= 8);
  if (fixed) memcpy(cut, fixed, (ns + 1) * sizeof *cut);
  else shard_cuts(n, ns, align, cut);
  char what[160];
  int len = snprintf(what, sizeof what, "V %d H %d T %d %s dy %s cuts", V, H, T,
                     tecore_dtype_name(wt), tecore_dtype_name(dyt));
  for (int k = 0; k <= ns && len < (int)sizeof what - 12; k++)
    len += snprintf(what + len, sizeof what - len, " %zu", cut[k]);
  printf("# shard case %s\n", what);
  float *w = malloc(n * 4), *g0 = malloc(n * 4), *want = malloc(n * 4),
        *dy = malloc((size_t)T * H * 4), *fw = malloc((size_t)T * H * 4),
        *fs = malloc((size_t)T * H * 4), *sum = malloc((size_t)T * H * 4),
        *exp = malloc((size_t)T * H * 4), *gw = malloc(n * 4);
  unsigned char *gw_raw = malloc(n * es), *raw = malloc((n + 2 * SHARD_GUARD) * es);
  double *ref = malloc(n * 8);
  int32_t *ids = malloc((size_t)T * 4);
  const int bad = (int)te_rand_below((uint64_t)T);
  te_rand_floats(w, n, -1, 1);
  te_rand_floats(g0, n, -1, 1);
  te_rand_floats(dy, (size_t)T * H, -1, 1);
  shard_ids(ids, T, V, H, cut, ns, bad);
  tecore_devptr_t dw = pu_upload(w, n, wt), dg0 = pu_upload(g0, n, wt), dgw = pu_upload(g0, n, wt),
                  ddy = pu_upload(dy, (size_t)T * H, dyt), di = pu_upload_i32(ids, T),
                  dout = te_dalloc((size_t)T * H * 4);
  uint64_t *st = NULL;
  TE_OK(tecore_mem_alloc_host(sizeof *st, (void **)&st));
  *st = 0;
  struct tecore_tensor tw = pu_tensor2(wt, V, H, dw), tgw = pu_tensor2(wt, V, H, dgw),
                       tdy = pu_tensor2(dyt, T, H, ddy),
                       to = pu_tensor2(TECORE_DTYPE_F32, T, H, dout);
  struct tecore_embedding_args a = {.weight = &tw, .ids = di, .tokens = T, .status = st};

  /* the whole table */
  te_poison_dev(dout, (size_t)T * H * 4);
  TE_OK(tecore_embedding_fwd(&a, &to, te_stream));
  shard_reported(st, bad, what);
  te_d2h(fw, dout, (size_t)T * H * 4);
  for (int t = 0; t < T; t++)
    for (int j = 0; j < H; j++)
      exp[(size_t)t * H + j] = t == bad ? 0.0f : w[(size_t)ids[t] * H + j];
  te_expect_f32_bits(fw, exp, (size_t)T * H, "whole table's forward");
  TE_OK(tecore_embedding_bwd(&a, &tdy, &tgw, NULL, te_stream));
  shard_reported(st, bad, what);
  te_d2h(gw_raw, dgw, n * es);
  pu_download(gw, dgw, n, wt);
  memcpy(want, g0, n * 4);
  bwd_emulate(want, dy, ids, T, V, H, wt);
  te_expect_f32_bits(gw, want, n, "whole table's dW against the promised order");
  for (size_t i = 0; i < n; i++) ref[i] = g0[i];
  for (int t = 0; t < T; t++)
    for (int j = 0; j < H && t != bad; j++) ref[(size_t)ids[t] * H + j] += dy[(size_t)t * H + j];
  for (size_t i = 0; i < n; i++) {
    double tol = wt == TECORE_DTYPE_F32 ? 1e-5 * (1 + fabs(ref[i])) * (T / 100 + 1)
                                        : 0.05 * (1 + fabs(ref[i]));
    ck_assert_msg(fabs(gw[i] - ref[i]) <= tol, "%s: dW[%zu] %g, float64 %g", what, i, gw[i],
                  ref[i]);
  }

  /* each shard */
  memset(sum, 0, (size_t)T * H * 4);
  for (int k = 0; k < ns; k++) {
    const size_t first = cut[k], count = cut[k + 1] - cut[k], g = k % 2 ? 0 : SHARD_GUARD;
    char wk[200];
    snprintf(wk, sizeof wk, "%s: shard %d [%zu, %zu)", what, k, first, first + count);
    tecore_devptr_t sd, sb = shard_alloc(dw, first, count, wt, !g ? 0 : 1, &sd);
    struct tecore_tensor tsw = pu_tensor2(wt, V, H, sd);
    struct tecore_embedding_args as = a;
    as.weight = &tsw;
    as.shard_first = first;
    as.shard_count = count;
    te_poison_dev(dout, (size_t)T * H * 4);
    TE_OK(tecore_embedding_fwd(&as, &to, te_stream));
    shard_reported(st, bad, wk);
    te_d2h(fs, dout, (size_t)T * H * 4);
    for (int t = 0; t < T; t++)
      for (int j = 0; j < H; j++) {
        size_t i = (size_t)t * H + j, e = (size_t)ids[t] * H + j;
        exp[i] = t != bad && e >= first && e < first + count ? fw[i] : 0.0f;
        sum[i] += fs[i];
      }
    te_expect_f32_bits(fs, exp, (size_t)T * H, wk);
    TE_OK(tecore_mem_free(sb));

    sb = shard_alloc(dg0, first, count, wt, !g ? 0 : 1, &sd);
    struct tecore_tensor tsg = pu_tensor2(wt, V, H, sd);
    TE_OK(tecore_embedding_bwd(&as, &tdy, &tsg, NULL, te_stream));
    shard_reported(st, bad, wk);
    te_d2h(raw, sb, (count + 2 * g) * es);
    te_expect_bytes_eq(raw, TE_POISON_BYTE, g * es, "the guard before a shard's dW");
    te_expect_bytes_eq(raw + (g + count) * es, TE_POISON_BYTE, g * es,
                       "the guard after a shard's dW");
    te_expect_mem_eq(raw + g * es, gw_raw + first * es, count * es, wk);
    TE_OK(tecore_mem_free(sb));
  }
  te_expect_f32_bits(sum, fw, (size_t)T * H, "the shards' forwards summed");
  TE_OK(tecore_mem_free(dw)); TE_OK(tecore_mem_free(dg0)); TE_OK(tecore_mem_free(dgw));
  TE_OK(tecore_mem_free(ddy)); TE_OK(tecore_mem_free(di)); TE_OK(tecore_mem_free(dout));
  TE_OK(tecore_mem_free_host(st));
  free(w); free(g0); free(want); free(dy); free(fw); free(fs); free(sum); free(exp); free(gw);
  free(gw_raw); free(raw); free(ref); free(ids);
}

START_TEST(embedding_shard_matches_whole_table) {
  const tecore_dtype_t F32 = TECORE_DTYPE_F32, BF16 = TECORE_DTYPE_BF16;
  /* inside row 0, then across the 64-row block at row 64 (vector path) */
  shard_case(150, 64, 700, F32, BF16, 6, 8, (const size_t[]){0, 24, 40, 1000, 4136, 7000, 9600});
  shard_case(150, 64, 9000, BF16, F32, 3, 8, NULL);  /* 2 chunks: bf16 rows rounded per chunk */
  shard_case(150, 64, 600, BF16, BF16, 4, 8, NULL);
  shard_case(40, 1288, 300, BF16, F32, 3, 8, NULL);  /* items 768 columns wide, several a row */
  shard_case(40, 1288, 300, F32, BF16, 4, 8, NULL);  /* ... and 1024 */
  /* cuts off the 8-element grid: the element path with hidden % 8 == 0 */
  shard_case(150, 64, 500, F32, BF16, 3, 1, (const size_t[]){0, 1001, 5003, 9600});
  shard_case(150, 64, 500, BF16, F32, 4, 1, NULL);
  /* hidden 13: the element path */
  shard_case(97, 13, 500, BF16, BF16, 4, 1, NULL);
  shard_case(97, 13, 500, F32, F32, 3, 1, (const size_t[]){0, 1, 777, 1261});
  shard_case(97, 13, 400, F32, BF16, 1, 1, (const size_t[]){0, 1261});  /* one shard: the whole */
}
END_TEST

/* A shard's bad arguments: past the table (the sum overflowing among
 * them), shard_first without shard_count, the positions' tables with a
 * shard; the overlap and range checks take the shard's bytes, not the
 * table's. */
START_TEST(embedding_shard_bad_arguments) {
  tecore_devptr_t b = te_dalloc(1 << 16);
  /* a [10][64] bf16 table's shard of 256 elements (512 bytes) at b */
  struct tecore_tensor tw = pu_tensor2(TECORE_DTYPE_BF16, 10, 64, b),
                       to = pu_tensor2(TECORE_DTYPE_F32, 4, 64, b + 8192),
                       tp = pu_tensor2(TECORE_DTYPE_F32, 8, 64, b + 16384), near;
  tecore_devptr_t ids = b + 32768;
  TE_OK(tecore_memset_d32_async(ids, 1, 16, te_stream));
  struct tecore_embedding_args g = {.weight = &tw, .ids = ids, .tokens = 4, .shard_first = 128,
                                    .shard_count = 256}, a;
  TE_OK(tecore_embedding_fwd(&g, &to, te_stream));
  TE_OK(tecore_embedding_bwd(&g, &to, &tw, NULL, te_stream));
  a = g; a.shard_first = 640 - 255;
  TE_EXPECT_INVALID("args->shard_first", tecore_embedding_fwd(&a, &to, te_stream));
  TE_EXPECT_INVALID("args->shard_first", tecore_embedding_bwd(&a, &to, &tw, NULL, te_stream));
  a = g; a.shard_first = SIZE_MAX - 100;
  TE_EXPECT_INVALID("args->shard_first", tecore_embedding_fwd(&a, &to, te_stream));
  TE_EXPECT_INVALID("args->shard_first", tecore_embedding_bwd(&a, &to, &tw, NULL, te_stream));
  a = g; a.shard_first = 8; a.shard_count = SIZE_MAX - 4;
  TE_EXPECT_INVALID("args->shard_count", tecore_embedding_fwd(&a, &to, te_stream));
  a = g; a.shard_count = 0;
  TE_EXPECT_INVALID("args->shard_first", tecore_embedding_fwd(&a, &to, te_stream));
  TE_EXPECT_INVALID("args->shard_first", tecore_embedding_bwd(&a, &to, &tw, NULL, te_stream));
  a = g; a.pos_weight = &tp;
  TE_EXPECT_INVALID("args->pos_weight", tecore_embedding_fwd(&a, &to, te_stream));
  TE_EXPECT_INVALID("dpos_weight", tecore_embedding_bwd(&g, &to, &tw, &tp, te_stream));
  /* out right past the shard's 512 bytes, inside the whole table's 1280: no overlap */
  near = to; near.data = b + 512;
  TE_OK(tecore_embedding_fwd(&g, &near, te_stream));
  TE_OK(tecore_embedding_bwd(&g, &near, &tw, NULL, te_stream));
  near.data = b + 256;
  TE_EXPECT_INVALID("out->data overlaps args->weight", tecore_embedding_fwd(&g, &near, te_stream));
  TE_EXPECT_INVALID("dweight->data overlaps dout", tecore_embedding_bwd(&g, &near, &tw, NULL,
                                                                       te_stream));
  if (te_backend_kind == TECORE_BACKEND_VDEV) { /* cuda: only with TECORE_CUDA_CHECK=1 */
    /* the range checks take the shard's bytes: exactly its 512 pass, 16 more do not */
    tecore_devptr_t s = te_dalloc(512), o = te_dalloc(4 * 64 * 4);
    TE_OK(tecore_memset_d8_async(s, 0, 512, te_stream));
    tw.data = s;
    to.data = o;
    TE_OK(tecore_embedding_fwd(&g, &to, te_stream));
    TE_OK(tecore_embedding_bwd(&g, &to, &tw, NULL, te_stream));
    a = g; a.shard_count = 264;
    TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "args->weight->data",
                  tecore_embedding_fwd(&a, &to, te_stream));
    TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "dweight->data",
                  tecore_embedding_bwd(&a, &to, &tw, NULL, te_stream));
    TE_OK(tecore_stream_synchronize(te_stream));
    TE_OK(tecore_mem_free(s));
    TE_OK(tecore_mem_free(o));
  }
  TE_OK(tecore_stream_synchronize(te_stream));
  TE_OK(tecore_mem_free(b));
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("embedding");
  TCase *tc = te_tcase(s, "values", 1);
  tcase_add_test(tc, embedding_fwd_values);
  tcase_add_test(tc, embedding_bwd_deterministic);
  tcase_add_test(tc, embedding_bwd_positions_table);
  tcase_add_test(tc, embedding_bwd_positions_implied);
  tcase_add_test(tc, embedding_out_of_range_reported);
  tcase_add_test(tc, embedding_bwd_out_of_range_vector_ids);
  tcase_add_test(tc, embedding_store_rows);
  tcase_add_test(tc, embedding_shard_matches_whole_table);
  tc = te_tcase(s, "arguments", 1);
  tcase_add_test(tc, embedding_bad_arguments);
  tcase_add_test(tc, embedding_status_unmapped_untouched);
  tcase_add_test(tc, embedding_shard_bad_arguments);
  return s;
}

TE_TEST_MAIN(make_suite, TE_TEST_DEVICE)
