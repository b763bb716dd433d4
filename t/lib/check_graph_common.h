/* SPDX-License-Identifier: Apache-2.0 */
/* check_graph_common.h -- what the libtegraph suites (t/check_graph_*.c)
 * share: result checks for tegraph_result_t, small test kernels registered
 * through tecore_kernel_table_register with vdev C implementations only
 * (no fatbin: on cuda the tests that need them say so and skip that case),
 * device buffers of floats, and plain tensor descriptors.
 *
 * Test kernels (n floats each; every pointer parameter is marked a pointer
 * in the table, so libtegraph can rebind it):
 *   tgt_mul(z, a, b, n)              z[i] = a[i] * b[i]
 *   tgt_fma_acc(acc, a, b, n)        acc[i] += a[i] * b[i]
 *   tgt_quant(q, w, scale, n, noop, count)
 *                                    when *noop == 0: q[i] = rint(w[i]*scale)/scale
 *                                    and (*count)++ (a weight "quantize" that
 *                                    honours the no-op flag and counts its runs)
 *   tgt_hidden(box, out)             out[i] = box.in[i], box = {in, n} passed by
 *                                    value as a 16-byte non-pointer parameter (an
 *                                    address libtegraph cannot see as a pointer) */
#ifndef TE_CHECK_GRAPH_COMMON_H
#define TE_CHECK_GRAPH_COMMON_H

#include "tests.h"
#include "common/convert.h"
#include <pthread.h>
#include <te/graph.h>

/* ---- result checks ---------------------------------------------------------- */

#define TG_OK(call)                                                                  \
  do {                                                                               \
    tegraph_result_t tg_ok_r_ = (call);                                              \
    ck_assert_msg(tg_ok_r_ == TEGRAPH_SUCCESS, "%s returned %s: %s", #call,          \
                  tegraph_result_name(tg_ok_r_), tegraph_last_error());              \
  } while (0)

/* Fails with code, and the detail mentions what (unless NULL). */
#define TG_EXPECT(code, what, call)                                                  \
  do {                                                                               \
    tecore_clear_error();                                                            \
    tegraph_result_t tg_ex_r_ = (call);                                              \
    const char *tg_ex_d_ = tegraph_last_error();                                     \
    ck_assert_msg(tg_ex_r_ == (code), "%s returned %s, expected %s (detail: \"%s\")", \
                  #call, tegraph_result_name(tg_ex_r_), tegraph_result_name(code),   \
                  tg_ex_d_);                                                         \
    ck_assert_msg(tg_ex_d_ && tg_ex_d_[0], "%s: empty detail", #call);               \
    const char *tg_ex_w_ = (what);                                                   \
    ck_assert_msg(!tg_ex_w_ || strstr(tg_ex_d_, tg_ex_w_),                           \
                  "%s: detail \"%s\" does not mention \"%s\"", #call, tg_ex_d_,      \
                  tg_ex_w_ ? tg_ex_w_ : "");                                         \
  } while (0)

/* ---- test kernels -------------------------------------------------------------- */

struct tgt_box {
  const float *in;
  unsigned long long n;
};

static void tgt_mul_vdev(const struct tecore_launch_cfg *cfg, void *const *args) {
  float *z = *(float *const *)args[0];
  const float *a = *(const float *const *)args[1], *b = *(const float *const *)args[2];
  unsigned long long n = *(const unsigned long long *)args[3];
  (void)cfg;
  for (unsigned long long i = 0; i < n; i++) z[i] = a[i] * b[i];
}

static void tgt_fma_acc_vdev(const struct tecore_launch_cfg *cfg, void *const *args) {
  float *acc = *(float *const *)args[0];
  const float *a = *(const float *const *)args[1], *b = *(const float *const *)args[2];
  unsigned long long n = *(const unsigned long long *)args[3];
  (void)cfg;
  for (unsigned long long i = 0; i < n; i++) acc[i] += a[i] * b[i];
}

static void tgt_quant_vdev(const struct tecore_launch_cfg *cfg, void *const *args) {
  float *q = *(float *const *)args[0];
  const float *w = *(const float *const *)args[1];
  float scale = *(const float *)args[2];
  unsigned long long n = *(const unsigned long long *)args[3];
  const int32_t *noop = *(const int32_t *const *)args[4];
  int32_t *count = *(int32_t *const *)args[5];
  (void)cfg;
  if (noop && *noop) return;
  for (unsigned long long i = 0; i < n; i++) q[i] = rintf(w[i] * scale) / scale;
  (*count)++;
}

static void tgt_hidden_vdev(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct tgt_box *box = (const struct tgt_box *)args[0];
  float *out = *(float *const *)args[1];
  (void)cfg;
  for (unsigned long long i = 0; i < box->n; i++) out[i] = box->in[i];
}

enum { TGT_MUL, TGT_FMA_ACC, TGT_QUANT, TGT_HIDDEN };
static const struct tecore_kernel_def tgt_defs[] = {
    [TGT_MUL] = {.name = "tgt_mul", .vdev = tgt_mul_vdev, .nparams = 4,
                 .param_size = {8, 8, 8, 8}, .param_is_ptr = {1, 1, 1, 0}},
    [TGT_FMA_ACC] = {.name = "tgt_fma_acc", .vdev = tgt_fma_acc_vdev, .nparams = 4,
                     .param_size = {8, 8, 8, 8}, .param_is_ptr = {1, 1, 1, 0}},
    [TGT_QUANT] = {.name = "tgt_quant", .vdev = tgt_quant_vdev, .nparams = 6,
                   .param_size = {8, 8, 4, 8, 8, 8}, .param_is_ptr = {1, 1, 0, 0, 1, 1}},
    [TGT_HIDDEN] = {.name = "tgt_hidden", .vdev = tgt_hidden_vdev, .nparams = 2,
                    .param_size = {16, 8}, .param_is_ptr = {0, 1}},
};
static const struct tecore_kernel_table tgt_table = {
    .module = "t/graph/check_graph", .count = 4, .kernels = tgt_defs};

/* The first id of the test table (registered once). */
static TE_T_UNUSED int tgt_id(int k) {
  int first = -1;
  TE_OK(tecore_kernel_table_register(&tgt_table, &first));
  return first + k;
}

/* 1 when the test kernels can run (vdev); else prints why the case is skipped. */
static TE_T_UNUSED int tgt_available(const char *what) {
  if (te_backend_kind == TECORE_BACKEND_VDEV) return 1;
  printf("# %s: skipped on %s (needs the suite's vdev-only test kernels)\n", what,
         tecore_backend_name(te_backend_kind));
  return 0;
}

static TE_T_UNUSED tecore_result_t tgt_launch(int k, void **args, unsigned long long n,
                                              tecore_stream_t s) {
  struct tecore_launch_cfg cfg = {.grid = {(unsigned)((n + 255) / 256 ? (n + 255) / 256 : 1), 1, 1},
                                  .block = {256, 1, 1}};
  return tecore_kernel_launch(tgt_id(k), &cfg, args, s);
}

static TE_T_UNUSED tecore_result_t tgt_mul(tecore_devptr_t z, tecore_devptr_t a,
                                           tecore_devptr_t b, size_t n, tecore_stream_t s) {
  void *pz = (void *)(uintptr_t)z, *pa = (void *)(uintptr_t)a, *pb = (void *)(uintptr_t)b;
  unsigned long long nn = n;
  void *args[] = {&pz, &pa, &pb, &nn};
  return tgt_launch(TGT_MUL, args, nn, s);
}

static TE_T_UNUSED tecore_result_t tgt_fma_acc(tecore_devptr_t acc, tecore_devptr_t a,
                                               tecore_devptr_t b, size_t n, tecore_stream_t s) {
  void *pz = (void *)(uintptr_t)acc, *pa = (void *)(uintptr_t)a, *pb = (void *)(uintptr_t)b;
  unsigned long long nn = n;
  void *args[] = {&pz, &pa, &pb, &nn};
  return tgt_launch(TGT_FMA_ACC, args, nn, s);
}

static TE_T_UNUSED tecore_result_t tgt_quant(tecore_devptr_t q, tecore_devptr_t w, float scale,
                                             size_t n, tecore_devptr_t noop,
                                             tecore_devptr_t count, tecore_stream_t s) {
  void *pq = (void *)(uintptr_t)q, *pw = (void *)(uintptr_t)w;
  void *pn = (void *)(uintptr_t)noop, *pc = (void *)(uintptr_t)count;
  unsigned long long nn = n;
  void *args[] = {&pq, &pw, &scale, &nn, &pn, &pc};
  return tgt_launch(TGT_QUANT, args, nn, s);
}

static TE_T_UNUSED tecore_result_t tgt_hidden(tecore_devptr_t out, tecore_devptr_t in, size_t n,
                                              tecore_stream_t s) {
  struct tgt_box box = {(const float *)(uintptr_t)in, n};
  void *po = (void *)(uintptr_t)out;
  void *args[] = {&box, &po};
  return tgt_launch(TGT_HIDDEN, args, n, s);
}

/* ---- fixture ----------------------------------------------------------------------- */

/* The device fixture plus one eager launch of libtecore's elementwise
 * kernels, so that a backend that cannot run them fails here, in the
 * fixture, rather than inside a capture. */
static TE_T_UNUSED void tgt_setup(void) {
  te_dev_setup();
  tecore_devptr_t p = 0;
  TE_OK(tecore_mem_alloc(64, &p));
  TE_OK(tecore_fill(p, TECORE_DTYPE_F32, 16, 1.0, te_stream));
  TE_OK(tecore_scale_add(p, p, 1.0f, p, 0.0f, TECORE_DTYPE_F32, 16, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  TE_OK(tecore_mem_free(p));
}

/* A tcase with the suite's time limit and the fixture above. */
static TE_T_UNUSED TCase *tgt_tcase(Suite *s, const char *name) {
  TCase *tc = te_tcase(s, name, 0);
  tcase_add_checked_fixture(tc, tgt_setup, te_dev_teardown);
  return tc;
}

/* ---- buffers and tensors ------------------------------------------------------- */

/* A BF16 [rows][cols] device tensor (the test frees data). */
static TE_T_UNUSED struct tecore_tensor tgt_bf16_tensor(size_t rows, size_t cols) {
  struct tecore_tensor t;
  size_t sh[2] = {rows, cols};
  TE_OK(tecore_tensor_init(&t, TECORE_DTYPE_BF16, 2, sh, te_dalloc(rows * cols * 2)));
  return t;
}

/* Fresh random BF16 values in [lo, hi) into t. */
static TE_T_UNUSED void tgt_rand_bf16(const struct tecore_tensor *t, float lo, float hi) {
  size_t n = tecore_tensor_numel(t);
  uint16_t *h = malloc(n * 2);
  for (size_t i = 0; i < n; i++) h[i] = te_f32_to_bf16(te_rand_float(lo, hi));
  te_h2d(t->data, h, n * 2);
  free(h);
}

/* n device floats holding fresh random values in [lo, hi). */
static TE_T_UNUSED tecore_devptr_t tgt_rand_dev(size_t n, float lo, float hi) {
  float *h = malloc(n * 4);
  te_rand_floats(h, n, lo, hi);
  tecore_devptr_t d = te_dalloc(n * 4);
  te_h2d(d, h, n * 4);
  free(h);
  return d;
}

/* A 1-D f32 tensor of n elements at d. */
static TE_T_UNUSED struct tecore_tensor tgt_vec(tecore_devptr_t d, size_t n) {
  struct tecore_tensor t;
  TE_OK(tecore_tensor_init(&t, TECORE_DTYPE_F32, 1, &n, d));
  return t;
}

/* A host copy of n device floats (the caller frees it). */
static TE_T_UNUSED float *tgt_get(tecore_devptr_t d, size_t n) {
  float *h = malloc(n * 4);
  te_d2h(h, d, n * 4);
  return h;
}

/* The same n floats at a and b, bit for bit. */
static TE_T_UNUSED void tgt_expect_same(tecore_devptr_t got, tecore_devptr_t want, size_t n,
                                        const char *what) {
  float *g = tgt_get(got, n), *w = tgt_get(want, n);
  te_expect_f32_bits(g, w, n, what);
  free(g);
  free(w);
}

/* ---- snapshots, and a callable of library kernels ------------------------------ */

/* A host copy of a device range, to show later that nothing wrote it
 * (taken after the test's stream has run what was queued). */
struct snap {
  tecore_devptr_t p;
  size_t bytes;
  unsigned char *h;
};
static TE_T_UNUSED struct snap snap_take(tecore_devptr_t p, size_t bytes) {
  struct snap s = {p, bytes, malloc(bytes)};
  TE_OK(tecore_stream_synchronize(te_stream));
  te_d2h(s.h, p, bytes);
  return s;
}
/* The range holds what it held at snap_take, byte for byte (after every
 * stream of the context has run what was queued). */
static TE_T_UNUSED void snap_expect(struct snap *s, const char *what) {
  unsigned char *now = malloc(s->bytes);
  TE_OK(tecore_ctx_synchronize());
  te_d2h(now, s->p, s->bytes);
  te_expect_mem_eq(now, s->h, s->bytes, what);
  free(now);
  free(s->h);
}

/* y = 2x forward, dx = 3dy backward (library kernels: both backends). */
static TE_T_UNUSED tecore_result_t dbl_fwd(void *u, tecore_stream_t s,
                                           const struct tegraph_io *io) {
  size_t n = *(size_t *)u;
  return tecore_scale_add(io->outputs[0].data, io->inputs[0].data, 2.0f, io->inputs[0].data, 0.0f,
                          TECORE_DTYPE_F32, n, s);
}
static TE_T_UNUSED tecore_result_t dbl_bwd(void *u, tecore_stream_t s,
                                           const struct tegraph_io *io) {
  size_t n = *(size_t *)u;
  return tecore_scale_add(io->grad_inputs[0].data, io->grad_outputs[0].data, 3.0f,
                          io->grad_outputs[0].data, 0.0f, TECORE_DTYPE_F32, n, s);
}

/* The callable of dbl_fwd/dbl_bwd over *n floats; *sample gets its sample
 * input (random, in a buffer the caller frees). */
static TE_T_UNUSED tegraph_callable_t *dbl_callable(size_t *n, struct tecore_tensor *sample) {
  tecore_devptr_t sx = tgt_rand_dev(*n, -1, 1);
  *sample = tgt_vec(sx, *n);
  static struct tecore_tensor y;
  y = tgt_vec(0, *n);
  struct tegraph_callable_desc d = {.forward = dbl_fwd,
                                    .backward = dbl_bwd,
                                    .user = n,
                                    .sample_inputs = sample,
                                    .ninputs = 1,
                                    .outputs = &y,
                                    .noutputs = 1,
                                    .capture_mode = TECORE_CAPTURE_GLOBAL};
  tegraph_callable_t *c = NULL;
  TG_OK(tegraph_callable_create(&d, NULL, &c));
  return c;
}

/* got holds k * x[i] exactly (one float product). */
static TE_T_UNUSED void expect_scaled(tecore_devptr_t got, const float *x, float k, size_t n,
                                      const char *what) {
  float *g = tgt_get(got, n), *w = malloc(n * 4);
  for (size_t i = 0; i < n; i++) w[i] = k * x[i];
  te_expect_f32_near(g, w, n, 0, 0, what);
  free(g);
  free(w);
}

#endif
