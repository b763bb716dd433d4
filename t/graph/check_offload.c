/* SPDX-License-Identifier: Apache-2.0 */
/* check_offload.c -- activation offload (te/offload.h):
 *   - tensors travel whole and come back bit for bit, with their dtype,
 *     shape and layout: BF16, F32, FP8 per-tensor (rowwise + columnwise +
 *     scale + scale_inv + columnwise scale_inv + amax) and MXFP8 (E8M0
 *     block scales), through the pool and through spill files, the device
 *     buffers poisoned between save and restore;
 *   - the do-not-offload mark and the size threshold: nothing is copied
 *     (the poison stays), the descriptor comes back;
 *   - a fuser sequence of MLP blocks with offload attached computes the
 *     same bits (output, input gradient, every parameter gradient) as the
 *     same sequence without, BF16, F32 and FP8, prefetch 1 and 2, pool and
 *     spill files, eagerly and as graphed callables (warmup hooks off/on),
 *     over two steps, replayed on the caller's stream and on a side
 *     stream; device memory of the sequence goes down; the gradient
 *     buffers keep their addresses; tensors marked keep stay where they
 *     are;
 *   - faults: an injected EIO on a spill write and on a read, and a full
 *     file system (RLIMIT_FSIZE): the step's check fails naming the file,
 *     the tensor and the cause, the sequence's next forward fails too, and
 *     nothing hangs (every wait bounded);
 *   - without io_uring (TEGRAPH_OFFLOAD_NO_URING) the context stays in host
 *     memory and says why;
 *   - argument checks. */
#include "tests.h"
#include <signal.h>
#include <sys/resource.h>
#include <te/offload.h>

#define WAIT_MS 60000
#define ROWS 64
#define HIDDEN 128
#define FFN 512
#define MIN_ELEMS 1024

static uint16_t bf16_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}

/* Random bf16 values in [-2, 2) on the device. */
static tecore_devptr_t rand_bf16(size_t n) {
  uint16_t *h = malloc(n * 2);
  for (size_t i = 0; i < n; i++) h[i] = bf16_of(te_rand_float(-2, 2));
  tecore_devptr_t d = te_dalloc(n * 2);
  te_h2d(d, h, n * 2);
  free(h);
  return d;
}

static tecore_devptr_t rand_bytes_dev(size_t n) {
  unsigned char *h = malloc(n);
  te_rand_bytes(h, n);
  tecore_devptr_t d = te_dalloc(n);
  te_h2d(d, h, n);
  free(h);
  return d;
}

static void expect_dev_eq(tecore_devptr_t a, tecore_devptr_t b, size_t n, const char *what) {
  unsigned char *x = malloc(n), *y = malloc(n);
  te_d2h(x, a, n);
  te_d2h(y, b, n);
  te_expect_mem_eq(x, y, n, what);
  free(x);
  free(y);
}

static tegraph_offload_t *make_ctx(size_t budget, const char *dir, int prefetch) {
  struct tegraph_offload_config cfg = {.host_budget = budget, .min_elems = MIN_ELEMS,
                                       .prefetch = prefetch};
  const char *dirs[1] = {dir};
  if (dir) {
    cfg.dirs = dirs;
    cfg.ndirs = 1;
    cfg.files_per_dir = 3;            /* striped */
    cfg.stripe_bytes = 16384;
    cfg.staging_bytes = 32768;
  }
  tegraph_offload_t *c = NULL;
  tegraph_result_t r = tegraph_offload_create(&cfg, &c);
  ck_assert_msg(r == TEGRAPH_SUCCESS, "tegraph_offload_create: %s: %s", tegraph_result_name(r),
                tegraph_last_error());
  return c;
}

#define TG_OK(call)                                                                      \
  do {                                                                                   \
    tegraph_result_t tg_ok_r_ = (call);                                                  \
    ck_assert_msg(tg_ok_r_ == TEGRAPH_SUCCESS, "%s returned %s: %s", #call,              \
                  tegraph_result_name(tg_ok_r_), tegraph_last_error());                  \
  } while (0)

/* ---- tensors ---------------------------------------------------------------------- */

struct held {
  struct tecore_tensor t;
  tecore_devptr_t buf[6];
  size_t bytes[6];
  int n;
  tecore_devptr_t copy[6];    /* the original values */
};

static void hold(struct held *h, tecore_devptr_t *field, size_t bytes) {
  *field = rand_bytes_dev(bytes);
  h->buf[h->n] = *field;
  h->bytes[h->n] = bytes;
  h->copy[h->n] = te_dalloc(bytes);
  TE_OK(tecore_memcpy_async(h->copy[h->n], *field, bytes, te_stream));
  h->n++;
}

/* A tensor of the given kind with random contents in every buffer. */
static void make_tensor(struct held *h, int kind) {
  memset(h, 0, sizeof *h);
  size_t rows = 64 + 32 * te_rand_below(4), cols = 128;
  size_t shape[2] = {rows, cols};
  size_t n = rows * cols;
  switch (kind) {
  case 0:
    TE_OK(tecore_tensor_init(&h->t, TECORE_DTYPE_BF16, 2, shape, 0));
    hold(h, &h->t.data, n * 2);
    break;
  case 1:
    TE_OK(tecore_tensor_init(&h->t, TECORE_DTYPE_F32, 2, shape, 0));
    hold(h, &h->t.data, n * 4);
    break;
  case 2:   /* per-tensor FP8: both copies, scale, both scale_invs, amax */
    TE_OK(tecore_tensor_init(&h->t, TECORE_DTYPE_E4M3, 2, shape, 0));
    h->t.scaling = TECORE_SCALING_DELAYED;
    hold(h, &h->t.data, n);
    hold(h, &h->t.columnwise_data, n);
    hold(h, &h->t.scale, 4);
    hold(h, &h->t.scale_inv, 4);
    hold(h, &h->t.columnwise_scale_inv, 4);
    hold(h, &h->t.amax, 4);
    break;
  default:  /* MXFP8: E8M0 block scales of both directions */
    TE_OK(tecore_tensor_init(&h->t, TECORE_DTYPE_E5M2, 2, shape, 0));
    h->t.scaling = TECORE_SCALING_MXFP8;
    hold(h, &h->t.data, n);
    hold(h, &h->t.columnwise_data, n);
    hold(h, &h->t.scale_inv, rows * (cols / 32));
    hold(h, &h->t.columnwise_scale_inv, (rows / 32) * cols);
    break;
  }
  TE_OK(tecore_stream_synchronize(te_stream));
}

static void held_free(struct held *h) {
  for (int i = 0; i < h->n; i++) {
    TE_OK(tecore_mem_free(h->buf[i]));
    TE_OK(tecore_mem_free(h->copy[i]));
  }
}

/* Saves every kind, poisons the device buffers, restores, compares. */
static void tensors_round_trip(const char *dir, size_t budget) {
  tegraph_offload_t *c = make_ctx(budget, dir, 0);
  struct held h[4];
  int id[4];
  for (int k = 0; k < 4; k++) {
    make_tensor(&h[k], k);
    TG_OK(tegraph_offload_save(c, &h[k].t, 0, te_stream, &id[k]));
  }
  for (int k = 0; k < 4; k++) {
    TG_OK(tegraph_offload_save_done(c, id[k], te_stream));
    for (int i = 0; i < h[k].n; i++)   /* stream-ordered after the copy out */
      TE_OK(tecore_memset_d8_async(h[k].buf[i], TE_POISON_BYTE, h[k].bytes[i], te_stream));
  }
  for (int k = 3; k >= 0; k--) {
    struct tecore_tensor back;
    memset(&back, 0, sizeof back);
    TG_OK(tegraph_offload_restore(c, id[k], te_stream, &back));
    ck_assert_int_eq(back.dtype, h[k].t.dtype);
    ck_assert_int_eq(back.scaling, h[k].t.scaling);
    ck_assert_int_eq(back.ndim, 2);
    ck_assert_uint_eq(back.shape[0], h[k].t.shape[0]);
    ck_assert_uint_eq(back.shape[1], h[k].t.shape[1]);
    ck_assert(back.data == h[k].t.data && back.columnwise_data == h[k].t.columnwise_data &&
              back.scale_inv == h[k].t.scale_inv &&
              back.columnwise_scale_inv == h[k].t.columnwise_scale_inv &&
              back.amax == h[k].t.amax && back.scale == h[k].t.scale);
  }
  ck_assert_int_eq(te_stream_wait(te_stream, WAIT_MS), TECORE_SUCCESS);
  TG_OK(tegraph_offload_check(c));
  static const char *const names[] = {"bf16", "f32", "fp8 per-tensor", "mxfp8"};
  for (int k = 0; k < 4; k++) {
    for (int i = 0; i < h[k].n; i++) {
      char what[64];
      snprintf(what, sizeof what, "%s buffer %d", names[k], i);
      expect_dev_eq(h[k].buf[i], h[k].copy[i], h[k].bytes[i], what);
    }
  }
  struct tegraph_offload_stats st;
  TG_OK(tegraph_offload_get_stats(c, &st));
  if (dir) {
    ck_assert_msg(st.saves_to_files > 0, "nothing went to the files (%s)", st.why);
    printf("# %s; %llu bytes to host, %llu to files\n", st.why,
           (unsigned long long)st.saves_to_host, (unsigned long long)st.saves_to_files);
  } else {
    ck_assert_uint_eq(st.saves_to_files, 0);
  }
  TG_OK(tegraph_offload_reset(c));
  TG_OK(tegraph_offload_destroy(c));
  for (int k = 0; k < 4; k++) held_free(&h[k]);
}

START_TEST(tensors_whole_through_the_pool) { tensors_round_trip(NULL, 4u << 20); }
END_TEST

START_TEST(tensors_whole_through_spill_files) {
  char dir[4096];
  te_tmpdir(dir, sizeof dir);
  tensors_round_trip(dir, 160 * 1024);   /* 4 x 32 KiB staging + 32 KiB: most spills */
  te_rmtree(dir);
}
END_TEST

START_TEST(keep_mark_and_threshold_copy_nothing) {
  tegraph_offload_t *c = make_ctx(1u << 20, NULL, 0);
  struct held big, small;
  make_tensor(&big, 0);
  memset(&small, 0, sizeof small);
  size_t shape[2] = {4, 8};   /* 32 elements < MIN_ELEMS */
  TE_OK(tecore_tensor_init(&small.t, TECORE_DTYPE_BF16, 2, shape, 0));
  hold(&small, &small.t.data, 64);
  int a, b;
  TG_OK(tegraph_offload_save(c, &big.t, TEGRAPH_SAVE_KEEP, te_stream, &a));
  TG_OK(tegraph_offload_save(c, &small.t, 0, te_stream, &b));
  TE_OK(tecore_memset_d8_async(big.buf[0], TE_POISON_BYTE, big.bytes[0], te_stream));
  TE_OK(tecore_memset_d8_async(small.buf[0], TE_POISON_BYTE, 64, te_stream));
  struct tecore_tensor back;
  TG_OK(tegraph_offload_restore(c, a, te_stream, &back));
  ck_assert(back.data == big.t.data && back.dtype == TECORE_DTYPE_BF16);
  TG_OK(tegraph_offload_restore(c, b, te_stream, &back));
  ck_assert(back.data == small.t.data);
  TE_OK(tecore_stream_synchronize(te_stream));
  /* nothing was copied back: the poison is still there */
  unsigned char *x = malloc(big.bytes[0]);
  te_d2h(x, big.buf[0], big.bytes[0]);
  te_expect_bytes_eq(x, TE_POISON_BYTE, big.bytes[0], "a kept tensor");
  free(x);
  struct tegraph_offload_stats st;
  TG_OK(tegraph_offload_get_stats(c, &st));
  ck_assert_uint_eq(st.saves_to_host + st.saves_to_files, 0);
  TG_OK(tegraph_offload_destroy(c));
  held_free(&big);
  held_free(&small);
}
END_TEST

/* ---- sequences ---------------------------------------------------------------------- */

#define NB 5
#define MAXP 64

/* The blocks' sequence; rc: the first block recomputed (FULL). */
static tecore_seq_t *make_seq_rc(tecore_dtype_t dt, const struct tecore_recipe *recipe,
                                 uint64_t seed, int rc) {
  struct tecore_seq_config cfg = {.rows = ROWS, .features = HIDDEN, .dtype = dt, .seed = seed};
  tecore_seq_t *q = NULL;
  TE_OK(tecore_seq_create(&cfg, &q));
  for (int l = 0; l < NB; l++) {
    struct tecore_op_desc d[6];
    memset(d, 0, sizeof d);
    d[0].kind = TECORE_OP_MAKE_EXTRA_OUTPUT;
    d[1].kind = TECORE_OP_RMSNORM;
    d[1].epsilon = 1e-5f;
    d[2].kind = TECORE_OP_LINEAR;
    d[2].features = FFN;
    d[2].bias = 1;
    d[3].kind = TECORE_OP_GELU;
    d[4].kind = TECORE_OP_LINEAR;
    d[4].features = HIDDEN;
    d[4].bias = 1;
    d[5].kind = TECORE_OP_ADD_EXTRA_INPUT;
    for (int k = 0; k < 6; k++) TE_OK(tecore_seq_add(q, &d[k], NULL));
  }
  if (rc) TE_OK(tecore_seq_set_recompute(q, 0, 6, TECORE_SEQ_RECOMPUTE_FULL));
  if (recipe) TE_OK(tecore_seq_set_recipe(q, recipe, te_stream));
  TE_OK(tecore_seq_build(q, te_stream));
  return q;
}

static tecore_seq_t *make_seq(tecore_dtype_t dt, const struct tecore_recipe *recipe,
                              uint64_t seed) {
  return make_seq_rc(dt, recipe, seed, 0);
}

static struct tegraph_offload_seq_desc seq_desc(tecore_seq_t *q,
                                                struct tegraph_offload_block *b) {
  for (int l = 0; l < NB; l++) b[l] = (struct tegraph_offload_block){6 * (size_t)l, 6};
  return (struct tegraph_offload_seq_desc){.seq = q, .blocks = b, .nblocks = NB};
}

/* What one step leaves: output, input gradient, parameter gradients. */
struct step_io {
  tecore_devptr_t x, y, dy, dx;
  size_t es;
};

static void run_step(tecore_seq_t *q, const struct step_io *io, tecore_dtype_t dt, int fp8) {
  size_t sh[2] = {ROWS, HIDDEN};
  struct tecore_tensor x, y, dy, dx;
  TE_OK(tecore_tensor_init(&x, dt, 2, sh, io->x));
  TE_OK(tecore_tensor_init(&y, dt, 2, sh, io->y));
  TE_OK(tecore_tensor_init(&dy, dt, 2, sh, io->dy));
  TE_OK(tecore_tensor_init(&dx, dt, 2, sh, io->dx));
  TE_OK(tecore_seq_forward(q, &x, &y, 0, te_stream));
  TE_OK(tecore_seq_backward(q, &dy, &dx, te_stream));
  if (fp8) TE_OK(tecore_seq_update_scales(q, te_stream));
}

static tecore_devptr_t rand_act(tecore_dtype_t dt, size_t n) {
  if (dt == TECORE_DTYPE_BF16) return rand_bf16(n);
  float *h = malloc(n * 4);
  te_rand_floats(h, n, -2, 2);
  tecore_devptr_t d = te_dalloc(n * 4);
  te_h2d(d, h, n * 4);
  free(h);
  return d;
}

static void io_make(struct step_io *io, tecore_dtype_t dt) {
  size_t n = ROWS * HIDDEN;
  io->es = tecore_dtype_size(dt);
  io->x = rand_act(dt, n);
  io->dy = rand_act(dt, n);
  io->y = te_dalloc(n * io->es);
  io->dx = te_dalloc(n * io->es);
  te_poison_dev(io->y, n * io->es);
  te_poison_dev(io->dx, n * io->es);
}

static void io_free(struct step_io *io) {
  TE_OK(tecore_mem_free(io->x));
  TE_OK(tecore_mem_free(io->y));
  TE_OK(tecore_mem_free(io->dy));
  TE_OK(tecore_mem_free(io->dx));
}

/* a's and b's outputs and parameter gradients are the same bits */
static void expect_same(tecore_seq_t *a, const struct step_io *ia, tecore_seq_t *b,
                        const struct step_io *ib, const char *what) {
  char w[160];
  snprintf(w, sizeof w, "%s: output", what);
  expect_dev_eq(ia->y, ib->y, ROWS * HIDDEN * ia->es, w);
  snprintf(w, sizeof w, "%s: input gradient", what);
  expect_dev_eq(ia->dx, ib->dx, ROWS * HIDDEN * ia->es, w);
  struct tecore_seq_param pa[MAXP], pb[MAXP];
  size_t na = 0, nb = 0;
  TE_OK(tecore_seq_params(a, pa, MAXP, &na));
  TE_OK(tecore_seq_params(b, pb, MAXP, &nb));
  ck_assert_uint_eq(na, nb);
  for (size_t i = 0; i < na; i++) {
    snprintf(w, sizeof w, "%s: gradient of op %zu's %s", what, pa[i].op, pa[i].name);
    expect_dev_eq(pa[i].grad.data, pb[i].grad.data, tecore_tensor_numel(&pa[i].grad) * 4, w);
  }
}

/* Two steps of a (no offload) and b (offload), same seed, same inputs. */
static void seq_same_bits(tecore_dtype_t dt, int fp8, int prefetch, const char *dir,
                          size_t budget, const char *what) {
  struct tecore_recipe rc, *recipe = NULL;
  if (fp8) {
    TE_OK(tecore_recipe_init(&rc, TECORE_RECIPE_DELAYED));
    recipe = &rc;
  }
  uint64_t seed = te_rand_u64();
  tecore_seq_t *a = make_seq(dt, recipe, seed), *b = make_seq(dt, recipe, seed);
  struct tecore_seq_param p0[MAXP], p1[MAXP];
  size_t np = 0;
  TE_OK(tecore_seq_params(b, p0, MAXP, &np));
  tegraph_offload_t *c = make_ctx(budget, dir, prefetch);
  struct tegraph_offload_block blocks[NB];
  struct tegraph_offload_seq_desc d = seq_desc(b, blocks);
  TG_OK(tegraph_offload_attach(c, &d));
  struct tegraph_offload_stats st;
  TG_OK(tegraph_offload_get_stats(c, &st));
  printf("# %s: %zu saved tensors offloaded, %zu kept; sequence %zu -> %zu bytes + ring %zu; "
         "a pass moves %zu bytes to host, %zu to files\n", what, st.offloaded, st.kept,
         st.seq_bytes_before, st.seq_bytes_after, st.ring_bytes, st.pass_to_host,
         st.pass_to_files);
  ck_assert_msg(st.offloaded > 0, "%s: nothing offloaded", what);
  ck_assert_msg(st.seq_bytes_after + st.ring_bytes < st.seq_bytes_before,
                "%s: device memory did not go down", what);
  if (dir) ck_assert_msg(st.pass_to_files > 0, "%s: nothing spilled (%s)", what, st.why);
  struct step_io ia, ib;
  io_make(&ia, dt);
  io_make(&ib, dt);
  TE_OK(tecore_memcpy_async(ib.x, ia.x, ROWS * HIDDEN * ia.es, te_stream));
  TE_OK(tecore_memcpy_async(ib.dy, ia.dy, ROWS * HIDDEN * ia.es, te_stream));
  for (int step = 0; step < 2; step++) {
    run_step(a, &ia, dt, fp8);
    run_step(b, &ib, dt, fp8);
  }
  ck_assert_int_eq(te_stream_wait(te_stream, WAIT_MS), TECORE_SUCCESS);
  TG_OK(tegraph_offload_check(c));
  expect_same(a, &ia, b, &ib, what);
  TE_OK(tecore_seq_params(b, p1, MAXP, &np));
  for (size_t i = 0; i < np; i++)
    ck_assert_msg(p0[i].grad.data == p1[i].grad.data, "gradient %zu was replaced", i);
  TG_OK(tegraph_offload_destroy(c));   /* detaches: b gets storage of its own back */
  /* detached, b still computes the same */
  run_step(a, &ia, dt, fp8);
  run_step(b, &ib, dt, fp8);
  ck_assert_int_eq(te_stream_wait(te_stream, WAIT_MS), TECORE_SUCCESS);
  expect_same(a, &ia, b, &ib, what);
  io_free(&ia);
  io_free(&ib);
  TE_OK(tecore_seq_destroy(a));
  TE_OK(tecore_seq_destroy(b));
}

START_TEST(seq_bf16_same_bits) { seq_same_bits(TECORE_DTYPE_BF16, 0, 1, NULL, 16u << 20, "bf16"); }
END_TEST
START_TEST(seq_f32_same_bits) { seq_same_bits(TECORE_DTYPE_F32, 0, 1, NULL, 16u << 20, "f32"); }
END_TEST
START_TEST(seq_fp8_same_bits) { seq_same_bits(TECORE_DTYPE_BF16, 1, 1, NULL, 16u << 20, "fp8"); }
END_TEST
START_TEST(seq_fp8_prefetch2_same_bits) {
  seq_same_bits(TECORE_DTYPE_BF16, 1, 2, NULL, 16u << 20, "fp8, prefetch 2");
}
END_TEST
START_TEST(seq_fp8_spill_same_bits) {
  char dir[4096];
  te_tmpdir(dir, sizeof dir);
  seq_same_bits(TECORE_DTYPE_BF16, 1, 1, dir, 256 * 1024, "fp8, host budget spilled to files");
  te_rmtree(dir);
}
END_TEST


/* The do-not-offload mark on the sequence path: the marked tensors keep
 * the sequence's own storage (never laid over the ring, never copied) and
 * the step still gives the same bits. */
START_TEST(seq_keep_mark_honoured) {
  uint64_t seed = te_rand_u64();
  tecore_seq_t *a = make_seq(TECORE_DTYPE_BF16, NULL, seed), *b = make_seq(TECORE_DTYPE_BF16, NULL,
                                                                          seed);
  size_t ns = 0;
  TE_OK(tecore_seq_get_saved(b, NULL, 0, &ns));
  struct tecore_seq_saved *sv = calloc(ns, sizeof *sv), *sv2 = calloc(ns, sizeof *sv2);
  TE_OK(tecore_seq_get_saved(b, sv, ns, &ns));
  /* mark every saved tensor of blocks 0 and 1, and one at random elsewhere */
  size_t keep[64], nkeep = 0;
  for (size_t i = 0; i < ns && nkeep < 63; i++)
    if (sv[i].op_first < 12) keep[nkeep++] = i;
  keep[nkeep++] = 12 + (size_t)te_rand_below(ns - 12);   /* ns > 12: 5 blocks */
  tegraph_offload_t *c = make_ctx(16u << 20, NULL, 1);
  struct tegraph_offload_block blocks[NB];
  struct tegraph_offload_seq_desc d = seq_desc(b, blocks);
  d.keep = keep;
  d.nkeep = nkeep;
  TG_OK(tegraph_offload_attach(c, &d));
  TE_OK(tecore_seq_get_saved(b, sv2, ns, &ns));
  for (size_t k = 0; k < nkeep; k++) {
    size_t i = keep[k];
    ck_assert_msg(!sv2[i].external && sv2[i].ptr == sv[i].ptr,
                  "saved tensor %zu is marked keep but was moved", i);
  }
  struct tegraph_offload_stats st;
  TG_OK(tegraph_offload_get_stats(c, &st));
  ck_assert_msg(st.offloaded > 0, "nothing offloaded besides the marks");
  struct step_io ia, ib;
  io_make(&ia, TECORE_DTYPE_BF16);
  io_make(&ib, TECORE_DTYPE_BF16);
  TE_OK(tecore_memcpy_async(ib.x, ia.x, ROWS * HIDDEN * 2, te_stream));
  TE_OK(tecore_memcpy_async(ib.dy, ia.dy, ROWS * HIDDEN * 2, te_stream));
  run_step(a, &ia, TECORE_DTYPE_BF16, 0);
  run_step(b, &ib, TECORE_DTYPE_BF16, 0);
  ck_assert_int_eq(te_stream_wait(te_stream, WAIT_MS), TECORE_SUCCESS);
  expect_same(a, &ia, b, &ib, "keep marks");
  TG_OK(tegraph_offload_destroy(c));
  io_free(&ia);
  io_free(&ib);
  free(sv);
  free(sv2);
  TE_OK(tecore_seq_destroy(a));
  TE_OK(tecore_seq_destroy(b));
}
END_TEST

/* ---- graphs ------------------------------------------------------------------------- */

struct gctx {
  tecore_seq_t *q;
  tegraph_offload_t *c;
  int off_calls, on_calls;
};

static tecore_result_t g_fwd(void *u, tecore_stream_t s, const struct tegraph_io *io) {
  return tecore_seq_forward(((struct gctx *)u)->q, &io->inputs[0], &io->outputs[0],
                            io->noop_flag, s);
}
static tecore_result_t g_bwd(void *u, tecore_stream_t s, const struct tegraph_io *io) {
  return tecore_seq_backward(((struct gctx *)u)->q, &io->grad_outputs[0], &io->grad_inputs[0],
                             s);
}
static tecore_result_t g_off(void *u) {
  ((struct gctx *)u)->off_calls++;
  return tegraph_offload_hook_off(((struct gctx *)u)->c);
}
static tecore_result_t g_on(void *u) {
  ((struct gctx *)u)->on_calls++;
  return tegraph_offload_hook_on(((struct gctx *)u)->c);
}

static void graphed_same_bits(const char *dir, size_t budget, int side, const char *what) {
  struct tecore_recipe rc;
  TE_OK(tecore_recipe_init(&rc, TECORE_RECIPE_DELAYED));
  uint64_t seed = te_rand_u64();
  tecore_seq_t *a = make_seq(TECORE_DTYPE_BF16, &rc, seed), *b = make_seq(TECORE_DTYPE_BF16, &rc,
                                                                         seed);
  struct gctx g = {.q = b, .c = make_ctx(budget, dir, 1)};
  struct tegraph_offload_block blocks[NB];
  struct tegraph_offload_seq_desc d = seq_desc(b, blocks);
  TG_OK(tegraph_offload_attach(g.c, &d));
  struct step_io ia, ib;
  io_make(&ia, TECORE_DTYPE_BF16);
  io_make(&ib, TECORE_DTYPE_BF16);
  TE_OK(tecore_memcpy_async(ib.x, ia.x, ROWS * HIDDEN * 2, te_stream));
  TE_OK(tecore_memcpy_async(ib.dy, ia.dy, ROWS * HIDDEN * 2, te_stream));
  size_t sh[2] = {ROWS, HIDDEN};
  struct tecore_tensor sx, so, tdy, tdx;
  TE_OK(tecore_tensor_init(&sx, TECORE_DTYPE_BF16, 2, sh, ib.x));
  TE_OK(tecore_tensor_init(&so, TECORE_DTYPE_BF16, 2, sh, 0));
  struct tegraph_callable_desc cd = {
      .forward = g_fwd, .backward = g_bwd, .user = &g, .sample_inputs = &sx, .ninputs = 1,
      .outputs = &so, .noutputs = 1, .num_warmup = 2, .pre_warmup = g_off, .post_warmup = g_on,
      .capture_mode = TECORE_CAPTURE_THREAD_LOCAL};
  TE_OK(tecore_stream_synchronize(te_stream));
  tegraph_callable_t *cb = NULL;
  tegraph_result_t r = tegraph_callable_create(&cd, NULL, &cb);
  ck_assert_msg(r == TEGRAPH_SUCCESS, "tegraph_callable_create: %s", tegraph_last_error());
  ck_assert_int_eq(g.off_calls, 1);
  ck_assert_int_eq(g.on_calls, 1);
  /* a does what warmup did to b: two forward and backward passes; then
   * both start from zero gradients */
  for (int k = 0; k < 2; k++) run_step(a, &ia, TECORE_DTYPE_BF16, 0);
  TE_OK(tecore_seq_zero_grad(a, te_stream));
  TE_OK(tecore_seq_zero_grad(b, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  struct tegraph_replay_opts ro = {.stream = te_stream, .is_first_microbatch = 1};
  tecore_stream_t side_stream = NULL;
  if (side) {   /* the replays run on a side stream, joined back through an event */
    TE_OK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &side_stream));
    ro.replay_stream = side_stream;
  }
  for (int step = 0; step < 2; step++) {
    run_step(a, &ia, TECORE_DTYPE_BF16, 1);
    struct tecore_tensor y = so;
    y.data = ib.y;
    TG_OK(tegraph_callable_forward(cb, &sx, 1, NULL, NULL, 0, &y, 1, &ro));
    TE_OK(tecore_tensor_init(&tdy, TECORE_DTYPE_BF16, 2, sh, ib.dy));
    TE_OK(tecore_tensor_init(&tdx, TECORE_DTYPE_BF16, 2, sh, ib.dx));
    TG_OK(tegraph_callable_backward(cb, &tdy, 1, &tdx, 1, &ro));
    TE_OK(tecore_seq_update_scales(b, te_stream));
  }
  ck_assert_int_eq(te_stream_wait(te_stream, WAIT_MS), TECORE_SUCCESS);
  TG_OK(tegraph_offload_check(g.c));
  expect_same(a, &ia, b, &ib, what);
  TG_OK(tegraph_callable_destroy(cb));
  if (side_stream) TE_OK(tecore_stream_destroy(side_stream));
  TG_OK(tegraph_offload_destroy(g.c));
  io_free(&ia);
  io_free(&ib);
  TE_OK(tecore_seq_destroy(a));
  TE_OK(tecore_seq_destroy(b));
}

START_TEST(graphed_fp8_same_bits) { graphed_same_bits(NULL, 16u << 20, 0, "graphed fp8"); }
END_TEST
START_TEST(graphed_side_stream_replay_same_bits) {
  graphed_same_bits(NULL, 16u << 20, 1, "graphed fp8, side-stream replay");
}
END_TEST
START_TEST(graphed_fp8_spill_same_bits) {
  char dir[4096];
  te_tmpdir(dir, sizeof dir);
  graphed_same_bits(dir, 256 * 1024, 0, "graphed fp8, spilled");
  te_rmtree(dir);
}
END_TEST

/* ---- faults -------------------------------------------------------------------------- */

/* One step with spill, a fault set up by arm(): the check fails with the
 * words in want[], the next forward fails, nothing hangs. */
static void spill_fault(void (*arm)(void), const char *const *want, int nwant) {
  char dir[4096];
  te_tmpdir(dir, sizeof dir);
  tecore_seq_t *b = make_seq(TECORE_DTYPE_BF16, NULL, te_rand_u64());
  tegraph_offload_t *c = make_ctx(256 * 1024, dir, 1);
  struct tegraph_offload_block blocks[NB];
  struct tegraph_offload_seq_desc d = seq_desc(b, blocks);
  TG_OK(tegraph_offload_attach(c, &d));
  struct step_io io;
  io_make(&io, TECORE_DTYPE_BF16);
  arm();
  run_step(b, &io, TECORE_DTYPE_BF16, 0);
  ck_assert_int_eq(te_stream_wait(te_stream, WAIT_MS), TECORE_SUCCESS);   /* no hang */
  tegraph_result_t r = tegraph_offload_check(c);
  ck_assert_msg(r == TEGRAPH_ERR_IO, "check: %s (%s)", tegraph_result_name(r),
                tegraph_last_error());
  const char *e = tegraph_last_error();
  printf("# the step failed with: %s\n", e);
  for (int i = 0; i < nwant; i++)
    ck_assert_msg(strstr(e, want[i]), "the error does not say \"%s\": %s", want[i], e);
  /* the next forward is refused with the same cause */
  size_t sh[2] = {ROWS, HIDDEN};
  struct tecore_tensor x, y;
  TE_OK(tecore_tensor_init(&x, TECORE_DTYPE_BF16, 2, sh, io.x));
  TE_OK(tecore_tensor_init(&y, TECORE_DTYPE_BF16, 2, sh, io.y));
  TE_EXPECT_ERR(TECORE_ERR_SYSTEM, "te-offload.", tecore_seq_forward(b, &x, &y, 0, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  TG_OK(tegraph_offload_destroy(c));
  io_free(&io);
  TE_OK(tecore_seq_destroy(b));
  te_rmtree(dir);
}

static void arm_write_eio(void) { TE_OK(tecore_svc_inject_fault(TECORE_SVC_WRITE, 2, EIO)); }
static void arm_read_eio(void) { TE_OK(tecore_svc_inject_fault(TECORE_SVC_READ, 1, EIO)); }
static void arm_fsize(void) {
  signal(SIGXFSZ, SIG_IGN);   /* the write then fails with EFBIG, or short */
  struct rlimit rl = {.rlim_cur = 48 * 1024, .rlim_max = RLIM_INFINITY};
  ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
}

START_TEST(spill_write_eio_fails_the_step) {
  const char *want[] = {"te-offload.", "block", strerror(EIO), "write"};
  spill_fault(arm_write_eio, want, 4);
}
END_TEST
START_TEST(spill_read_eio_fails_the_step) {
  const char *want[] = {"te-offload.", "block", strerror(EIO), "read"};
  spill_fault(arm_read_eio, want, 4);
}
END_TEST
START_TEST(full_file_system_fails_the_step) {
  const char *want[] = {"te-offload.", "block", "write"};
  spill_fault(arm_fsize, want, 3);
}
END_TEST

START_TEST(no_uring_stays_in_host_memory) {
  setenv("TEGRAPH_OFFLOAD_NO_URING", "1", 1);
  char dir[4096];
  te_tmpdir(dir, sizeof dir);
  tegraph_offload_t *c = make_ctx(256 * 1024, dir, 1);
  struct tegraph_offload_stats st;
  TG_OK(tegraph_offload_get_stats(c, &st));
  ck_assert_int_eq(st.spill, 0);
  ck_assert_msg(strstr(st.why, "TEGRAPH_OFFLOAD_NO_URING"), "why: %s", st.why);
  /* what fits the pool is offloaded; the rest stays on the device */
  tecore_seq_t *a = make_seq(TECORE_DTYPE_BF16, NULL, 7), *b = make_seq(TECORE_DTYPE_BF16, NULL, 7);
  struct tegraph_offload_block blocks[NB];
  struct tegraph_offload_seq_desc d = seq_desc(b, blocks);
  TG_OK(tegraph_offload_attach(c, &d));
  TG_OK(tegraph_offload_get_stats(c, &st));
  ck_assert_uint_eq(st.pass_to_files, 0);
  ck_assert_uint_le(st.pass_to_host, st.pool_bytes);
  struct step_io ia, ib;
  io_make(&ia, TECORE_DTYPE_BF16);
  io_make(&ib, TECORE_DTYPE_BF16);
  TE_OK(tecore_memcpy_async(ib.x, ia.x, ROWS * HIDDEN * 2, te_stream));
  TE_OK(tecore_memcpy_async(ib.dy, ia.dy, ROWS * HIDDEN * 2, te_stream));
  run_step(a, &ia, TECORE_DTYPE_BF16, 0);
  run_step(b, &ib, TECORE_DTYPE_BF16, 0);
  ck_assert_int_eq(te_stream_wait(te_stream, WAIT_MS), TECORE_SUCCESS);
  expect_same(a, &ia, b, &ib, "no io_uring");
  TG_OK(tegraph_offload_destroy(c));
  io_free(&ia);
  io_free(&ib);
  TE_OK(tecore_seq_destroy(a));
  TE_OK(tecore_seq_destroy(b));
  te_rmtree(dir);
}
END_TEST

#define TG_EXPECT(code, what, call)                                                      \
  do {                                                                                   \
    tegraph_result_t tg_e_ = (call);                                                     \
    ck_assert_msg(tg_e_ == (code), "%s returned %s, want %s", #call,                     \
                  tegraph_result_name(tg_e_), tegraph_result_name(code));                \
    ck_assert_msg(strstr(tegraph_last_error(), (what)), "%s: detail \"%s\" lacks \"%s\"", \
                  #call, tegraph_last_error(), (what));                                  \
  } while (0)

START_TEST(bad_arguments) {
  struct tegraph_offload_config cfg = {.host_budget = 1 << 20};
  tegraph_offload_t *c = NULL;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "ctx", tegraph_offload_create(&cfg, NULL));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "cfg", tegraph_offload_create(NULL, &c));
  cfg.prefetch = -1;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "prefetch", tegraph_offload_create(&cfg, &c));
  cfg.prefetch = 0;
  cfg.ndirs = 1;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "dirs", tegraph_offload_create(&cfg, &c));
  cfg.ndirs = 0;
  cfg.stripe_bytes = 1000;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "stripe_bytes", tegraph_offload_create(&cfg, &c));
  cfg.stripe_bytes = 0;
  cfg.flags = 0x80;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "flags", tegraph_offload_create(&cfg, &c));
  cfg.flags = 0;
  ck_assert_ptr_null(c);
  TG_OK(tegraph_offload_create(&cfg, &c));
  int id;
  struct tecore_tensor t;
  size_t sh[1] = {16};
  TE_OK(tecore_tensor_init(&t, TECORE_DTYPE_F32, 1, sh, 0));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "data", tegraph_offload_save(c, &t, 0, te_stream, &id));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "flags", tegraph_offload_save(c, &t, 0x10, te_stream, &id));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "id", tegraph_offload_restore(c, 3, te_stream, &t));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "attached", tegraph_offload_enable(c, 1));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "attached", tegraph_offload_detach(c));
  struct tegraph_offload_seq_desc d = {0};
  TG_EXPECT(TEGRAPH_ERR_INVALID, "seq", tegraph_offload_attach(c, &d));
  tecore_seq_t *q = make_seq(TECORE_DTYPE_BF16, NULL, 1);
  struct tegraph_offload_block blk = {28, 6};
  d = (struct tegraph_offload_seq_desc){.seq = q, .blocks = &blk, .nblocks = 1};
  TG_EXPECT(TEGRAPH_ERR_INVALID, "blocks[0]", tegraph_offload_attach(c, &d));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "st", tegraph_offload_get_stats(c, NULL));
  TG_OK(tegraph_offload_destroy(c));
  TE_OK(tecore_seq_destroy(q));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "ctx", tegraph_offload_destroy(NULL));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "ctx", tegraph_offload_check(NULL));
}
END_TEST

/* Misuse (issue 28), each a test that failed before its fix. */

/* detach, enable(0) and destroy between a forward and its backward were
 * SUCCESS, and the backward then gave a wrong input gradient */
START_TEST(detach_between_forward_and_backward_refused) {
  const tecore_dtype_t dt = TECORE_DTYPE_BF16;
  uint64_t seed = te_rand_u64();
  tecore_seq_t *a = make_seq(dt, NULL, seed), *b = make_seq(dt, NULL, seed);
  tegraph_offload_t *c = make_ctx(16u << 20, NULL, 1);
  struct tegraph_offload_block blocks[NB];
  struct tegraph_offload_seq_desc d = seq_desc(b, blocks);
  TG_OK(tegraph_offload_attach(c, &d));
  struct step_io ia, ib;
  io_make(&ia, dt);
  io_make(&ib, dt);
  TE_OK(tecore_memcpy_async(ib.x, ia.x, ROWS * HIDDEN * ia.es, te_stream));
  TE_OK(tecore_memcpy_async(ib.dy, ia.dy, ROWS * HIDDEN * ia.es, te_stream));
  run_step(a, &ia, dt, 0);
  size_t sh[2] = {ROWS, HIDDEN};
  struct tecore_tensor x, y, dy, dx;
  TE_OK(tecore_tensor_init(&x, dt, 2, sh, ib.x));
  TE_OK(tecore_tensor_init(&y, dt, 2, sh, ib.y));
  TE_OK(tecore_tensor_init(&dy, dt, 2, sh, ib.dy));
  TE_OK(tecore_tensor_init(&dx, dt, 2, sh, ib.dx));
  TE_OK(tecore_seq_forward(b, &x, &y, 0, te_stream));
  TG_EXPECT(TEGRAPH_ERR_STATE, "backward", tegraph_offload_detach(c));
  TG_EXPECT(TEGRAPH_ERR_STATE, "backward", tegraph_offload_enable(c, 0));
  TG_EXPECT(TEGRAPH_ERR_STATE, "backward", tegraph_offload_destroy(c));
  TE_OK(tecore_seq_backward(b, &dy, &dx, te_stream));
  ck_assert_int_eq(te_stream_wait(te_stream, WAIT_MS), TECORE_SUCCESS);
  expect_same(a, &ia, b, &ib, "refused detach");
  TG_OK(tegraph_offload_detach(c));   /* the backward has ended: allowed */
  /* a forward whose backward never runs is dropped by reset */
  TG_OK(tegraph_offload_attach(c, &d));
  TE_OK(tecore_seq_forward(b, &x, &y, 0, te_stream));
  TG_EXPECT(TEGRAPH_ERR_STATE, "backward", tegraph_offload_detach(c));
  TG_OK(tegraph_offload_reset(c));
  TG_OK(tegraph_offload_destroy(c));
  io_free(&ia);
  io_free(&ib);
  TE_OK(tecore_seq_destroy(a));
  TE_OK(tecore_seq_destroy(b));
}
END_TEST

/* pass hooks and recomputation combine since the recomputed forward got
 * its own hook direction; offload's would move the tensors it rewrites:
 * attach refuses a recomputing sequence, and leaves it without hooks */
START_TEST(attach_to_recomputing_seq_refused) {
  tecore_seq_t *q = make_seq_rc(TECORE_DTYPE_BF16, NULL, te_rand_u64(), 1);
  tegraph_offload_t *c = make_ctx(16u << 20, NULL, 1);
  struct tegraph_offload_block blocks[NB];
  struct tegraph_offload_seq_desc d = seq_desc(q, blocks);
  TG_EXPECT(TEGRAPH_ERR_NOT_SUPPORTED, "recomputes", tegraph_offload_attach(c, &d));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "no sequence is attached", tegraph_offload_detach(c));
  TG_OK(tegraph_offload_destroy(c));
  TE_OK(tecore_seq_destroy(q));
}
END_TEST

/* a second destroy, or a call after destroy, was a use-after-free */
START_TEST(destroy_twice_and_use_after_destroy) {
  struct tegraph_offload_config cfg = {.host_budget = 1 << 20};
  tegraph_offload_t *c = NULL;
  TG_OK(tegraph_offload_create(&cfg, &c));
  TG_OK(tegraph_offload_destroy(c));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "tegraph_offload_destroy: ctx", tegraph_offload_destroy(c));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "tegraph_offload_check: ctx", tegraph_offload_check(c));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "tegraph_offload_reset: ctx", tegraph_offload_reset(c));
}
END_TEST

/* staging_bytes not a multiple of stripe_bytes was SUCCESS; stripe_bytes
 * 2^62 overflowed a pointer */
START_TEST(stripe_and_staging_sizes_refused) {
  struct tegraph_offload_config cfg = {.host_budget = 1 << 20};
  tegraph_offload_t *c = NULL;
  cfg.stripe_bytes = 8192;
  cfg.staging_bytes = 12288;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "staging_bytes", tegraph_offload_create(&cfg, &c));
  cfg.staging_bytes = 0;
  cfg.stripe_bytes = (size_t)1 << 62;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "stripe_bytes", tegraph_offload_create(&cfg, &c));
  ck_assert_ptr_null(c);
}
END_TEST

/* tecore_seq_set_saved with a buffer smaller than the tensor was SUCCESS */
START_TEST(seq_set_saved_small_buffer_refused) {
  tecore_seq_t *q = make_seq(TECORE_DTYPE_BF16, NULL, 1);
  struct tecore_seq_saved sv[64];
  size_t ns = 0;
  TE_OK(tecore_seq_get_saved(q, sv, 64, &ns));
  ck_assert_uint_gt(ns, 0);
  size_t i = 0;
  while (i < ns && sv[i].bytes <= 256) i++;
  ck_assert_uint_lt(i, ns);
  tecore_devptr_t small = te_dalloc(256);
  TE_EXPECT_INVALID("bytes", tecore_seq_set_saved(q, i, small));
  tecore_devptr_t big = te_dalloc(sv[i].bytes);
  TE_OK(tecore_seq_set_saved(q, i, big));
  TE_OK(tecore_seq_set_saved(q, i, 0));
  TE_OK(tecore_mem_free(small));
  TE_OK(tecore_mem_free(big));
  TE_OK(tecore_seq_destroy(q));
}
END_TEST

/* destroy (and detach) after the attached sequence was destroyed returned
 * INVALID with an empty message: detach called into the gone sequence,
 * and the error was cleared on the way out.  The sequence took its hooks
 * and saved-tensor pointers with it: both now let the plan go and
 * succeed, after a full step too. */
START_TEST(offload_destroy_after_seq_destroyed) {
  const tecore_dtype_t dt = TECORE_DTYPE_BF16;
  for (int detach_first = 0; detach_first < 2; detach_first++) {
    tecore_seq_t *b = make_seq(dt, NULL, te_rand_u64());
    tegraph_offload_t *c = make_ctx(16u << 20, NULL, 1);
    struct tegraph_offload_block blocks[NB];
    struct tegraph_offload_seq_desc d = seq_desc(b, blocks);
    TG_OK(tegraph_offload_attach(c, &d));
    struct step_io io;
    io_make(&io, dt);
    run_step(b, &io, dt, 0);
    ck_assert_int_eq(te_stream_wait(te_stream, WAIT_MS), TECORE_SUCCESS);
    TE_OK(tecore_seq_destroy(b));
    if (detach_first) TG_OK(tegraph_offload_detach(c));
    TG_OK(tegraph_offload_destroy(c));
    io_free(&io);
  }
}
END_TEST

/* A restore into memory freed after the save fails (the copy in meets an
 * illegal address); the check then said success, and destroy returned
 * TEGRAPH_ERR_DEVICE, that same earlier failure kept by the context's
 * stream.  Now the context is failed from the restore on (the check
 * names the illegal address), and destroy frees it and succeeds. */
START_TEST(offload_destroy_after_failed_restore) {
  if (te_backend_kind != TECORE_BACKEND_VDEV) return;   /* cuda may not fault on freed memory */
  tegraph_offload_t *c = make_ctx(4u << 20, NULL, 0);
  struct held h;
  make_tensor(&h, 0);
  int id = -1;
  TG_OK(tegraph_offload_save(c, &h.t, 0, te_stream, &id));
  TG_OK(tegraph_offload_save_done(c, id, te_stream));
  ck_assert_int_eq(te_stream_wait(te_stream, WAIT_MS), TECORE_SUCCESS);
  TE_OK(tecore_mem_free(h.buf[0]));
  tecore_stream_t s = NULL;   /* its own: a fault is sticky */
  TE_OK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  struct tecore_tensor back;
  tegraph_result_t r = tegraph_offload_restore(c, id, s, &back);
  if (r == TEGRAPH_SUCCESS) (void)te_stream_wait(s, WAIT_MS);
  tegraph_result_t rc = tegraph_offload_check(c);
  ck_assert_msg(rc != TEGRAPH_SUCCESS && strstr(tegraph_last_error(), "illegal address"),
                "a restore into freed memory (restore: %s): the check says %s: %s",
                tegraph_result_name(r), tegraph_result_name(rc), tegraph_last_error());
  TG_OK(tegraph_offload_destroy(c));
  TE_OK(tecore_mem_free(h.copy[0]));
  (void)tecore_stream_destroy(s);
  tecore_clear_error();
}
END_TEST

static Suite *offload_suite(void) {
  Suite *s = suite_create("offload");
  TCase *tc = te_tcase(s, "tensors", 1);
  tcase_add_test(tc, tensors_whole_through_the_pool);
  tcase_add_test(tc, tensors_whole_through_spill_files);
  tcase_add_test(tc, keep_mark_and_threshold_copy_nothing);
  tc = te_tcase(s, "sequence", 1);
  tcase_add_test(tc, seq_bf16_same_bits);
  tcase_add_test(tc, seq_f32_same_bits);
  tcase_add_test(tc, seq_fp8_same_bits);
  tcase_add_test(tc, seq_fp8_prefetch2_same_bits);
  tcase_add_test(tc, seq_fp8_spill_same_bits);
  tcase_add_test(tc, seq_keep_mark_honoured);
  tc = te_tcase(s, "graphs", 1);
  tcase_add_test(tc, graphed_fp8_same_bits);
  tcase_add_test(tc, graphed_side_stream_replay_same_bits);
  tcase_add_test(tc, graphed_fp8_spill_same_bits);
  tc = te_tcase(s, "faults", 1);
  tcase_add_test(tc, spill_write_eio_fails_the_step);
  tcase_add_test(tc, spill_read_eio_fails_the_step);
  tcase_add_test(tc, full_file_system_fails_the_step);
  tcase_add_test(tc, no_uring_stays_in_host_memory);
  tcase_add_test(tc, bad_arguments);
  tc = te_tcase(s, "misuse", 1);
  tcase_add_test(tc, detach_between_forward_and_backward_refused);
  tcase_add_test(tc, destroy_twice_and_use_after_destroy);
  tcase_add_test(tc, attach_to_recomputing_seq_refused);
  tcase_add_test(tc, offload_destroy_after_seq_destroyed);
  tcase_add_test(tc, offload_destroy_after_failed_restore);
  tcase_add_test(tc, stripe_and_staging_sizes_refused);
  tcase_add_test(tc, seq_set_saved_small_buffer_refused);
  return s;
}

TE_TEST_MAIN(offload_suite, TE_TEST_DEVICE)
