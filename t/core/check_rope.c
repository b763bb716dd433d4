/* SPDX-License-Identifier: Apache-2.0 */
/* check_rope.c -- rotary position embedding (te/rope.h) against a float64
 * reference: both conventions, partial rotary dim, positions implied by a
 * fixed length, by cu_seqlens, or given, a caller's table, slices of a
 * packed QKV in place and out of place with poisoned outputs, the element
 * path, bwd(fwd(x)) == x, the FP8 variant against the dequantized
 * reference, and every bad argument.  Fresh random inputs in [-1, 1). */
#include "parts_util.h"
#include <te/rope.h>

#define PI2 6.283185307179586

enum { POS_FIXED, POS_CU, POS_GIVEN };

struct rcase {
  tecore_dtype_t dt;
  tecore_rope_style_t style;
  int T, H, Hk, D, rot, pos_mode, table, inplace;
};

/* positions of the case; cu: 3 sequences */
static void rc_positions(const struct rcase *c, int32_t *pos, int32_t *cu, int32_t *given) {
  cu[0] = 0;
  cu[1] = c->T / 3;
  cu[2] = c->T / 3 + c->T / 4;
  cu[3] = c->T;
  for (int t = 0; t < c->T; t++) {
    given[t] = (int32_t)te_rand_below(70000);
    if (c->pos_mode == POS_FIXED) pos[t] = t % 7;
    else if (c->pos_mode == POS_GIVEN) pos[t] = given[t];
    else pos[t] = t - (t >= cu[2] ? cu[2] : t >= cu[1] ? cu[1] : 0);
  }
}

/* y = rope(x) of one head, in double; sign -1: the inverse. */
static void ref_head(const float *x, double *y, int D, int rot, int inter, double pos, int sign) {
  for (int j = 0; j < D; j++) y[j] = x[j];
  for (int i = 0; i < rot / 2; i++) {
    double a = pos * pow(10000.0, -2.0 * i / rot), c = cos(a), s = sign * sin(a);
    int j1 = inter ? 2 * i : i, j2 = inter ? 2 * i + 1 : i + rot / 2;
    y[j1] = x[j1] * c - x[j2] * s;
    y[j2] = x[j2] * c + x[j1] * s;
  }
}

/* Runs one case on a packed [T][H + 2Hk][D] buffer, Q and K rotated in
 * place or into a poisoned packed output, and checks Q, K and the
 * untouched V. */
static void run_case(const struct rcase *c) {
  int W = c->H + 2 * c->Hk;
  size_t n = (size_t)c->T * W * c->D;
  float *h = malloc(n * 4), *got = malloc(n * 4);
  double y[512];
  te_rand_floats(h, n, -1.0f, 1.0f);
  tecore_devptr_t qkv = pu_upload(h, n, c->dt), out = qkv;
  if (!c->inplace) {
    out = te_dalloc(n * tecore_dtype_size(c->dt) + 16);
    te_poison_dev(out, n * tecore_dtype_size(c->dt));
  }
  int32_t *pos = malloc(c->T * 4), cu[4], *given = malloc(c->T * 4);
  rc_positions(c, pos, cu, given);
  tecore_devptr_t dcu = pu_upload_i32(cu, 4), dpos = pu_upload_i32(pos, c->T);
  size_t es = tecore_dtype_size(c->dt), ts = (size_t)W * c->D;
  struct tecore_rope_args a = {
      .dtype = c->dt, .tokens = c->T, .q_heads = c->H, .k_heads = c->Hk, .head_dim = c->D,
      .rotary_dim = c->rot == c->D ? 0 : c->rot, .style = c->style,
      .q_in = {qkv, ts, c->D}, .q_out = {out, ts, c->D},
      .k_in = {qkv + (size_t)c->H * c->D * es, ts, 0},
      .k_out = {out + (size_t)c->H * c->D * es, ts, 0}};
  if (c->pos_mode == POS_FIXED) a.seq_len = 7;
  if (c->pos_mode == POS_CU) { a.cu_seqlens = dcu; a.batch = 3; }
  if (c->pos_mode == POS_GIVEN) a.positions = dpos;
  float *ct = NULL, *st = NULL;
  tecore_devptr_t dct = 0, dst = 0;
  if (c->table) {
    int L = c->pos_mode == POS_GIVEN ? 70000 : c->T;
    ct = malloc((size_t)L * c->rot / 2 * 4);
    st = malloc((size_t)L * c->rot / 2 * 4);
    for (int p = 0; p < L; p++)
      for (int i = 0; i < c->rot / 2; i++) {
        double ang = p * pow(10000.0, -2.0 * i / c->rot);
        ct[(size_t)p * c->rot / 2 + i] = (float)cos(ang);
        st[(size_t)p * c->rot / 2 + i] = (float)sin(ang);
      }
    dct = pu_upload(ct, (size_t)L * c->rot / 2, TECORE_DTYPE_F32);
    dst = pu_upload(st, (size_t)L * c->rot / 2, TECORE_DTYPE_F32);
    a.cos_table = dct;
    a.sin_table = dst;
    a.table_len = L;
  }
  TE_OK(tecore_rope_fwd(&a, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  pu_download(got, out, n, c->dt);
  /* tolerance: the output's rounding (2^-8 bf16, 2^-11 f16) of |y| <= 1.5,
   * the float sin/cos and the table's float values */
  double tol = c->dt == TECORE_DTYPE_BF16 ? 1.2e-2 : c->dt == TECORE_DTYPE_F16 ? 1.5e-3 : 2e-6;
  for (int t = 0; t < c->T; t++)
    for (int hh = 0; hh < W; hh++) {
      const float *x = h + ((size_t)t * W + hh) * c->D;
      const float *g = got + ((size_t)t * W + hh) * c->D;
      if (hh < c->H + c->Hk) ref_head(x, y, c->D, c->rot, c->style, pos[t], 1);
      for (int j = 0; j < c->D; j++) {
        if (hh >= c->H + c->Hk) {
          /* V: in place untouched; out of place never written */
          if (c->inplace) ck_assert_msg(g[j] == x[j], "V[%d][%d][%d] changed", t, hh, j);
          continue;
        }
        ck_assert_msg(fabs(g[j] - y[j]) <= tol, "rope %s style %d rot %d/%d pos mode %d: "
                      "[%d][%d][%d] got %.7g want %.7g (tol %g)", tecore_dtype_name(c->dt),
                      c->style, c->rot, c->D, c->pos_mode, t, hh, j, g[j], y[j], tol);
      }
    }
  free(h); free(got); free(pos); free(given); free(ct); free(st);
  if (!c->inplace) TE_OK(tecore_mem_free(out));
  TE_OK(tecore_mem_free(qkv));
  TE_OK(tecore_mem_free(dcu));
  TE_OK(tecore_mem_free(dpos));
  if (dct) { TE_OK(tecore_mem_free(dct)); TE_OK(tecore_mem_free(dst)); }
}

START_TEST(rope_both_styles_positions) {
  tecore_dtype_t dts[3] = {TECORE_DTYPE_BF16, TECORE_DTYPE_F32, TECORE_DTYPE_F16};
  for (int style = 0; style < 2; style++)
    for (int pm = 0; pm < 3; pm++)
      for (int k = 0; k < 3; k++) {
        struct rcase c = {.dt = dts[k], .style = style, .T = 37, .H = 4, .Hk = 2, .D = 64,
                          .rot = 64, .pos_mode = pm, .inplace = (pm + k) % 2};
        run_case(&c);
      }
}
END_TEST

START_TEST(rope_partial_rotary_dim) {
  for (int style = 0; style < 2; style++) {
    struct rcase c = {.dt = TECORE_DTYPE_BF16, .style = style, .T = 20, .H = 3, .Hk = 1, .D = 128,
                      .rot = 32, .pos_mode = POS_GIVEN, .inplace = style};
    run_case(&c);
    c.inplace = !c.inplace;
    c.rot = 96;
    run_case(&c);
  }
}
END_TEST

START_TEST(rope_caller_table) {
  struct rcase c = {.dt = TECORE_DTYPE_F32, .style = TECORE_ROPE_HALVES, .T = 24, .H = 2, .Hk = 2,
                    .D = 32, .rot = 32, .pos_mode = POS_CU, .table = 1};
  run_case(&c);
  c.style = TECORE_ROPE_INTERLEAVED;
  c.inplace = 1;
  run_case(&c);
}
END_TEST

/* head_dim 6, rotary 4: the element path */
START_TEST(rope_element_path) {
  for (int style = 0; style < 2; style++) {
    struct rcase c = {.dt = TECORE_DTYPE_BF16, .style = style, .T = 9, .H = 3, .Hk = 1, .D = 6,
                      .rot = 4, .pos_mode = POS_FIXED, .inplace = style};
    run_case(&c);
  }
}
END_TEST

START_TEST(rope_bwd_inverts_fwd) {
  int T = 33, H = 4, D = 64;
  size_t n = (size_t)T * H * D;
  float *h = malloc(n * 4), *got = malloc(n * 4);
  te_rand_floats(h, n, -1.0f, 1.0f);
  for (int style = 0; style < 2; style++) {
    tecore_devptr_t x = pu_upload(h, n, TECORE_DTYPE_F32), y = te_dalloc(n * 4);
    te_poison_dev(y, n * 4);
    struct tecore_rope_args a = {.dtype = TECORE_DTYPE_F32, .tokens = T, .q_heads = H,
                                 .head_dim = D, .rotary_dim = 48, .style = style,
                                 .theta = 500000.0f, .q_in = {x}, .q_out = {y}};
    TE_OK(tecore_rope_fwd(&a, te_stream));
    a.q_in.data = y;
    a.q_out.data = y;
    TE_OK(tecore_rope_bwd(&a, te_stream));
    TE_OK(tecore_stream_synchronize(te_stream));
    pu_download(got, y, n, TECORE_DTYPE_F32);
    te_expect_f32_near(got, h, n, 2e-6, 0.0, "bwd(fwd(x))");
    TE_OK(tecore_mem_free(x));
    TE_OK(tecore_mem_free(y));
  }
  free(h);
  free(got);
}
END_TEST

/* FP8: q8/k8 = fp8(rope) and v8 = fp8(v) against the dequantized
 * reference: delayed scaling (scale 4) and current scaling. */
START_TEST(rope_fp8_qkv) {
  int T = 21, H = 4, Hk = 2, D = 64, W = H + 2 * Hk;
  size_t n = (size_t)T * W * D, ts = (size_t)W * D;
  float *h = malloc(n * 4);
  te_rand_floats(h, n, -2.0f, 2.0f);
  tecore_devptr_t qkv = pu_upload(h, n, TECORE_DTYPE_BF16);
  for (int mode = 0; mode < 2; mode++) {
    tecore_devptr_t buf[3], sc[3];
    struct tecore_tensor t8[3];
    int heads[3] = {H, Hk, Hk};
    for (int i = 0; i < 3; i++) {
      size_t m = (size_t)T * heads[i] * D;
      buf[i] = te_dalloc(m);
      te_poison_dev(buf[i], m);
      sc[i] = te_dalloc(16);
      float init[3] = {4.0f, 0.0f, -1.0f}; /* scale, amax, scale_inv */
      te_h2d(sc[i], init, 12);
      t8[i] = pu_tensor2(TECORE_DTYPE_E4M3, T, (size_t)heads[i] * D, buf[i]);
      t8[i].scaling = mode ? TECORE_SCALING_CURRENT : TECORE_SCALING_DELAYED;
      t8[i].scale = sc[i];
      t8[i].amax = sc[i] + 4;
      t8[i].scale_inv = sc[i] + 8;
    }
    struct tecore_rope_args a = {.dtype = TECORE_DTYPE_BF16, .tokens = T, .q_heads = H,
                                 .k_heads = Hk, .head_dim = D, .style = TECORE_ROPE_HALVES,
                                 .seq_len = 5, .q_in = {qkv, ts, D},
                                 .k_in = {qkv + (size_t)H * D * 2, ts, D}};
    struct tecore_rope_view v = {qkv + (size_t)(H + Hk) * D * 2, ts, D};
    TE_OK(tecore_rope_fwd_fp8(&a, &v, Hk, &t8[0], &t8[1], &t8[2], te_stream));
    TE_OK(tecore_stream_synchronize(te_stream));
    for (int i = 0; i < 3; i++) {
      size_t m = (size_t)T * heads[i] * D;
      float *q = malloc(m * 4), sv[3];
      double *ref = malloc(m * 8), amax = 0, y[64];
      int h0 = i == 0 ? 0 : i == 1 ? H : H + Hk;
      for (int t = 0; t < T; t++)
        for (int hh = 0; hh < heads[i]; hh++) {
          const float *x = h + ((size_t)t * W + h0 + hh) * D;
          ref_head(x, y, D, i == 2 ? 0 : D, 0, t % 5, 1);
          for (int j = 0; j < D; j++) {
            ref[((size_t)t * heads[i] + hh) * D + j] = y[j];
            amax = fmax(amax, fabs(y[j]));
          }
        }
      pu_download(q, buf[i], m, TECORE_DTYPE_E4M3);
      te_d2h(sv, sc[i], 12);
      ck_assert_msg(fabs(sv[1] - amax) <= 1e-2 * amax, "tensor %d amax %g want %g", i, sv[1], amax);
      if (mode) ck_assert_msg(fabs(sv[0] - 448.0 / sv[1]) <= 1e-3 * sv[0], "scale %g", sv[0]);
      ck_assert_msg(fabs(sv[2] * sv[0] - 1.0) < 1e-6, "scale_inv %g scale %g", sv[2], sv[0]);
      for (size_t e = 0; e < m; e++) {
        double d = q[e] * sv[2];
        /* E4M3: 3 mantissa bits, half an ulp 2^-4 relative, plus bf16 input */
        ck_assert_msg(fabs(d - ref[e]) <= 0.07 * fabs(ref[e]) + 0.02 / sv[0] + 1e-2,
                      "fp8 tensor %d [%zu]: got %g want %g", i, e, d, ref[e]);
      }
      free(q);
      free(ref);
      TE_OK(tecore_mem_free(buf[i]));
      TE_OK(tecore_mem_free(sc[i]));
    }
  }
  TE_OK(tecore_mem_free(qkv));
  free(h);
}
END_TEST

START_TEST(rope_bad_arguments) {
  tecore_devptr_t b = te_dalloc(1 << 16), c = b + 8192;
  struct tecore_rope_args g = {.dtype = TECORE_DTYPE_BF16, .tokens = 4, .q_heads = 2,
                               .head_dim = 64, .q_in = {b}, .q_out = {c}};
  struct tecore_rope_args a;
  TE_OK(tecore_rope_fwd(&g, te_stream));
  TE_EXPECT_INVALID("args", tecore_rope_fwd(NULL, te_stream));
  a = g; a.dtype = TECORE_DTYPE_E4M3;
  TE_EXPECT_INVALID("args->dtype", tecore_rope_fwd(&a, te_stream));
  a = g; a.q_heads = 0;
  TE_EXPECT_INVALID("args->q_heads", tecore_rope_fwd(&a, te_stream));
  a = g; a.k_heads = -1;
  TE_EXPECT_INVALID("args->k_heads", tecore_rope_fwd(&a, te_stream));
  a = g; a.head_dim = 63;
  TE_EXPECT_INVALID("args->head_dim", tecore_rope_fwd(&a, te_stream));
  a = g; a.rotary_dim = 66;
  TE_EXPECT_INVALID("args->rotary_dim", tecore_rope_fwd(&a, te_stream));
  a = g; a.rotary_dim = 31;
  TE_EXPECT_INVALID("args->rotary_dim", tecore_rope_fwd(&a, te_stream));
  a = g; a.style = 7;
  TE_EXPECT_INVALID("args->style", tecore_rope_fwd(&a, te_stream));
  a = g; a.theta = -1.0f;
  TE_EXPECT_INVALID("args->theta", tecore_rope_fwd(&a, te_stream));
  a = g; a.positions = b + 16384; a.cu_seqlens = b + 20000;  a.batch = 1;
  TE_EXPECT_INVALID("args->cu_seqlens", tecore_rope_fwd(&a, te_stream));
  a = g; a.positions = b + 16386;
  TE_EXPECT_INVALID("args->positions", tecore_rope_fwd(&a, te_stream));
  a = g; a.cu_seqlens = b + 16384;
  TE_EXPECT_INVALID("args->batch", tecore_rope_fwd(&a, te_stream));
  a = g; a.cos_table = b + 16384;
  TE_EXPECT_INVALID("sin_table", tecore_rope_fwd(&a, te_stream));
  a = g; a.cos_table = b + 16384; a.sin_table = b + 32768;
  TE_EXPECT_INVALID("args->table_len", tecore_rope_fwd(&a, te_stream));
  a = g; a.q_in.data = 0;
  TE_EXPECT_INVALID("args->q_in", tecore_rope_fwd(&a, te_stream));
  a = g; a.q_out.data = c + 1;
  TE_EXPECT_INVALID("args->q_out", tecore_rope_fwd(&a, te_stream));
  a = g; a.q_in.head_stride = 32;
  TE_EXPECT_INVALID("args->q_in", tecore_rope_fwd(&a, te_stream));
  a = g; a.q_in.token_stride = 64;  /* heads of a token overlap the next token */
  TE_EXPECT_INVALID("args->q_in", tecore_rope_fwd(&a, te_stream));
  a = g; a.q_out.data = b + 128;  /* partly over q_in */
  TE_EXPECT_INVALID("args->q_out overlaps args->q_in", tecore_rope_fwd(&a, te_stream));
  a = g; a.k_heads = 2; a.k_in.data = b + 4096; a.k_out.data = c + 128;
  TE_EXPECT_INVALID("args->k_out overlaps args->q_out", tecore_rope_bwd(&a, te_stream));
  a = g; a.positions = c; 
  TE_EXPECT_INVALID("args->q_out overlaps args->positions", tecore_rope_fwd(&a, te_stream));
  /* FP8 */
  struct tecore_tensor q8 = pu_tensor2(TECORE_DTYPE_E4M3, 4, 128, b + 40000);
  q8.scaling = TECORE_SCALING_DELAYED;
  q8.scale = b + 60000;
  q8.scale_inv = b + 60004;
  a = g;
  TE_EXPECT_INVALID("args->q_out", tecore_rope_fwd_fp8(&a, NULL, 0, &q8, NULL, NULL, te_stream));
  a.q_out.data = 0;
  TE_OK(tecore_rope_fwd_fp8(&a, NULL, 0, &q8, NULL, NULL, te_stream));
  struct tecore_tensor bad = q8;
  bad.shape[1] = 64;
  TE_EXPECT_INVALID("q8", tecore_rope_fwd_fp8(&a, NULL, 0, &bad, NULL, NULL, te_stream));
  bad = q8;
  bad.dtype = TECORE_DTYPE_BF16;
  bad.scaling = TECORE_SCALING_NONE;
  TE_EXPECT_INVALID("q8", tecore_rope_fwd_fp8(&a, NULL, 0, &bad, NULL, NULL, te_stream));
  TE_EXPECT_INVALID("v_in", tecore_rope_fwd_fp8(&a, NULL, 2, &q8, NULL, &q8, te_stream));
  bad = q8;
  bad.data = b;
  TE_EXPECT_INVALID("q8", tecore_rope_fwd_fp8(&a, NULL, 0, &bad, NULL, NULL, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  TE_OK(tecore_mem_free(b));
}
END_TEST

/* ---- hostile input (issue 57) ------------------------------------------------------------- */

/* In place, tokens 2^25 + 1 at token_stride 2^39: the byte extent
 * (2^25 2^39 + 64) 2 wrapped to 128, the range check passed and the kernel
 * ran off the address space (SEGV).  Refused, naming the view. */
START_TEST(rope_refuses_extent_wrapping) {
  tecore_devptr_t b = te_dalloc(4096);
  te_poison_dev(b, 4096);
  struct tecore_rope_args a = {.dtype = TECORE_DTYPE_BF16, .tokens = (1u << 25) + 1,
                               .q_heads = 1, .head_dim = 64,
                               .q_in = {b, (size_t)1 << 39, 0}, .q_out = {b, (size_t)1 << 39, 0}};
  TE_EXPECT_INVALID("args->q_in: 33554433 tokens at token_stride 549755813888",
                    tecore_rope_fwd(&a, te_stream));
  TE_EXPECT_INVALID("args->q_in: 33554433 tokens", tecore_rope_bwd(&a, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  unsigned char h[4096];
  te_d2h(h, b, sizeof h);
  te_expect_bytes_eq(h, TE_POISON_BYTE, sizeof h, "the buffer of a refused call");
  TE_OK(tecore_mem_free(b));
}
END_TEST

/* A position outside the cos/sin table was silently zeroed.  Now the
 * documented contract (te/rope.h): the rotated part written as zeros
 * (exactly), the pass-through part copied, the in-table tokens rotated
 * (reference within 2e-6, F32), nothing written around the output
 * (256-byte poison guards), and the token reported through the status
 * word. */
START_TEST(rope_position_outside_table_zeroed_and_reported) {
  enum { T = 12, H = 2, D = 32, ROT = 16, L = 8, G = 256 };
  float x[T * H * D], got[T * H * D];
  double y[D];
  te_rand_floats(x, T * H * D, -1.0f, 1.0f);
  int32_t pos[T];
  for (int t = 0; t < T; t++) pos[t] = (int32_t)te_rand_below(L);
  pos[3] = -1, pos[7] = L, pos[10] = 100000;
  float ct[L * ROT / 2], st[L * ROT / 2];
  for (int p = 0; p < L; p++)
    for (int i = 0; i < ROT / 2; i++) {
      double ang = p * pow(10000.0, -2.0 * i / ROT);
      ct[p * ROT / 2 + i] = (float)cos(ang), st[p * ROT / 2 + i] = (float)sin(ang);
    }
  tecore_devptr_t dx = pu_upload(x, T * H * D, TECORE_DTYPE_F32), dpos = pu_upload_i32(pos, T);
  tecore_devptr_t dct = pu_upload(ct, L * ROT / 2, TECORE_DTYPE_F32);
  tecore_devptr_t dst = pu_upload(st, L * ROT / 2, TECORE_DTYPE_F32);
  size_t nb = sizeof got;
  tecore_devptr_t out = te_dalloc(nb + 2 * G);
  te_poison_dev(out, nb + 2 * G);
  void *hs = NULL;
  TE_OK(tecore_mem_alloc_host(8, &hs));
  uint64_t *status = hs;
  *status = 0;
  struct tecore_rope_args a = {.dtype = TECORE_DTYPE_F32, .tokens = T, .q_heads = H,
                               .head_dim = D, .rotary_dim = ROT, .cos_table = dct,
                               .sin_table = dst, .table_len = L, .positions = dpos,
                               .q_in = {dx}, .q_out = {out + G}, .status = status};
  TE_OK(tecore_rope_fwd(&a, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  pu_download(got, out + G, T * H * D, TECORE_DTYPE_F32);
  for (int t = 0; t < T; t++)
    for (int h = 0; h < H; h++) {
      const float *xi = x + (t * H + h) * D, *g = got + (t * H + h) * D;
      int miss = pos[t] < 0 || pos[t] >= L;
      if (!miss) ref_head(xi, y, D, ROT, 0, pos[t], 1);
      for (int j = 0; j < D; j++) {
        double want = j >= ROT ? xi[j] : miss ? 0.0 : y[j];
        ck_assert_msg(fabs(g[j] - want) <= (miss || j >= ROT ? 0.0 : 2e-6),
                      "token %d (position %d) head %d [%d]: %.9g, want %.9g", t, pos[t], h, j,
                      (double)g[j], want);
      }
    }
  unsigned char guard[G];
  te_d2h(guard, out, G);
  te_expect_bytes_eq(guard, TE_POISON_BYTE, G, "the guard before q_out");
  te_d2h(guard, out + G + nb, G);
  te_expect_bytes_eq(guard, TE_POISON_BYTE, G, "the guard after q_out");
  const char *want = te_backend_kind == TECORE_BACKEND_VDEV ? "position -1 at token 3"
                                                            : "outside the cos/sin table";
  TE_EXPECT_INVALID(want, tecore_rope_check(status, te_stream));
  ck_assert_uint_eq(*status, 0);
  /* the next call given a word that holds a report fails with it */
  TE_OK(tecore_rope_fwd(&a, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  TE_EXPECT_INVALID("an earlier call met position", tecore_rope_fwd(&a, te_stream));
  ck_assert_uint_eq(*status, 0);
  uint64_t plain[2] = {7, 7};
  a.status = plain;
  TE_EXPECT_INVALID("args->status is not mapped host memory", tecore_rope_fwd(&a, te_stream));
  TE_EXPECT_INVALID("status", tecore_rope_check(plain, te_stream));
  ck_assert_uint_eq(plain[0], 7);
  TE_OK(tecore_mem_free_host(hs));
  tecore_devptr_t f[] = {dx, dpos, dct, dst, out};
  for (int i = 0; i < 5; i++) TE_OK(tecore_mem_free(f[i]));
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("rope");
  TCase *tc = te_tcase(s, "values", 1);
  tcase_add_test(tc, rope_both_styles_positions);
  tcase_add_test(tc, rope_partial_rotary_dim);
  tcase_add_test(tc, rope_caller_table);
  tcase_add_test(tc, rope_element_path);
  tcase_add_test(tc, rope_bwd_inverts_fwd);
  tcase_add_test(tc, rope_fp8_qkv);
  tc = te_tcase(s, "arguments", 1);
  tcase_add_test(tc, rope_bad_arguments);
  tcase_add_test(tc, rope_refuses_extent_wrapping);
  tcase_add_test(tc, rope_position_outside_table_zeroed_and_reported);
  return s;
}

TE_TEST_MAIN(make_suite, TE_TEST_DEVICE)
