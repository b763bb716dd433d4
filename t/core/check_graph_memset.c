/* SPDX-License-Identifier: Apache-2.0 */
/* check_graph_memset.c -- captured memsets become kernel nodes.
 *
 * On cuda a graph launches several times slower when memset nodes sit
 * among its kernel nodes (te-bench --graph), and cuBLASLt puts memsets
 * into a captured step by itself.  tecore_graph_memsets_to_kernels turns
 * every 1-D memset node into a te_memset kernel node with the same edges,
 * and libtegraph does it to every graph it captures (TEGRAPH_MEMSET_KERNELS).
 *
 *   - memsets_become_kernels: a raw capture of 1-, 2- and 4-byte memsets at
 *     aligned and unaligned addresses, with kernels reading what they
 *     wrote and a later memset overwriting a buffer a kernel read (so a
 *     lost edge shows as a wrong value), replaced node for node: no memset
 *     node left, each replacement a te_memset node; every byte equals the
 *     host reference (exact), the bytes around each range keep their
 *     poison, over two replays with fresh poison;
 *   - tegraph_capture_has_no_memset: the same work through
 *     tegraph_graph_begin/end_capture: no memset node, same bytes;
 *   - step_graph_*: te-demo's training step (zero_grad, the forward's
 *     no-op flag and dx cleared by memsets, forward, backward, FP8 scale
 *     update, AdamW) of two MLP blocks captured into one tegraph_graph on
 *     one sequence and run eagerly on a twin built from the same seed:
 *     the graph holds no memset node, and the output, dx, every parameter
 *     gradient, the BF16 parameters and the F32 master weights equal the
 *     eager step's bit for bit (tolerance exact: the same kernels on the
 *     same data in the same order), over two steps with fresh random
 *     inputs and poisoned outputs; BF16 and delayed-scaling FP8.
 *   - copies_become_kernels: a raw capture of a copy in from pinned host
 *     memory, a kernel reading it, a device-to-device copy to an odd
 *     address, a copy out to pinned host memory at an odd offset, a large
 *     device-to-device copy and a large copy out to pinned memory:
 *     tecore_graph_copies_to_kernels with limits of 0 replaces nothing,
 *     with the host limit only the two small host copies, then with no
 *     device limit the two device copies too, never the large host one;
 *     over two replays with fresh random input and fresh poison, every
 *     byte copied equals the host reference (exact) and the poison around
 *     it stays;
 *   - tegraph_capture_has_no_small_copy: the same through libtegraph
 *     (TEGRAPH_COPY_KERNELS' default): all but the large host copy are
 *     kernels.
 * Misuse: a NULL graph is refused with a detail naming it. */
#include "check_graph_common.h"
#include "common/convert.h"
#include "../tools/mlp_block.h"

/* ---- node census ------------------------------------------------------------------ */

/* Counts graph's memset nodes and its te_memset kernel nodes. */
static void census(tecore_graph_t g, size_t *memsets, size_t *te_memsets, size_t *total) {
  int id = -1;
  TE_OK(tecore_kernel_find("te_memset", &id));
  size_t n = 0;
  TE_OK(tecore_graph_nodes(g, NULL, 0, &n));
  struct tecore_graph_node_desc *d = calloc(n ? n : 1, sizeof *d);
  TE_OK(tecore_graph_nodes(g, d, n, &n));
  *memsets = *te_memsets = 0;
  for (size_t i = 0; i < n; i++) {
    *memsets += d[i].type == TECORE_GRAPH_NODE_MEMSET;
    *te_memsets += d[i].type == TECORE_GRAPH_NODE_KERNEL && d[i].kernel_id == id;
  }
  if (total) *total = n;
  free(d);
}

/* ---- raw memsets ------------------------------------------------------------------ */

/* The work: four memsets into one poisoned arena (d8 at offset 1, d16 at
 * offset 2, d32 at a 16-byte boundary, d32 at offset 4), then
 * src = v (d32); y1 = alpha*src + beta*x; src = w (d32); y2 = alpha*src + beta*x. */
struct mwork {
  size_t bytes;                   /* arena */
  tecore_devptr_t arena, src, x, y1, y2;
  size_t off[4], cnt[4];
  unsigned esz[4];
  uint32_t val[4];
  uint32_t v, w;
  float alpha, beta;
  size_t n;                       /* floats of src, x, y1, y2 */
};

static void mwork_new(struct mwork *m) {
  memset(m, 0, sizeof *m);
  static const unsigned esz[4] = {1, 2, 4, 4};
  static const size_t off[4] = {1, 2, 16, 4};
  size_t at = 0;
  for (int k = 0; k < 4; k++) {
    at = (at + 63) / 64 * 64 + off[k];   /* the offset past a 64-byte boundary */
    m->esz[k] = esz[k];
    m->off[k] = at;
    m->cnt[k] = 1 + (size_t)te_rand_below(3000);
    m->val[k] = te_rand_u32();
    at += m->cnt[k] * esz[k] + 32;      /* 32 poisoned bytes after each range */
  }
  m->bytes = at + 64;
  m->arena = te_dalloc(m->bytes);
  m->n = 100 + (size_t)te_rand_below(2000);
  m->src = te_dalloc(m->n * 4);
  m->y1 = te_dalloc(m->n * 4);
  m->y2 = te_dalloc(m->n * 4);
  m->x = tgt_rand_dev(m->n, -4, 4);
  m->v = te_f32_bits_of(te_rand_float(-3, 3));
  m->w = te_f32_bits_of(te_rand_float(5, 9));
  m->alpha = te_rand_float(0.5f, 2);
  m->beta = te_rand_float(-2, -0.5f);
}

static void mwork_free(struct mwork *m) {
  TE_OK(tecore_mem_free(m->arena));
  TE_OK(tecore_mem_free(m->src));
  TE_OK(tecore_mem_free(m->y1));
  TE_OK(tecore_mem_free(m->y2));
  TE_OK(tecore_mem_free(m->x));
}

static void mwork_poison(const struct mwork *m) {
  te_poison_dev(m->arena, m->bytes);
  te_poison_dev_nan(m->src, m->n);
  te_poison_dev_nan(m->y1, m->n);
  te_poison_dev_nan(m->y2, m->n);
}

static void mwork_enqueue(const struct mwork *m, tecore_stream_t s) {
  for (int k = 0; k < 4; k++) {
    tecore_devptr_t p = m->arena + m->off[k];
    if (m->esz[k] == 1) TE_OK(tecore_memset_d8_async(p, (uint8_t)m->val[k], m->cnt[k], s));
    else if (m->esz[k] == 2) TE_OK(tecore_memset_d16_async(p, (uint16_t)m->val[k], m->cnt[k], s));
    else TE_OK(tecore_memset_d32_async(p, m->val[k], m->cnt[k], s));
  }
  TE_OK(tecore_memset_d32_async(m->src, m->v, m->n, s));
  TE_OK(tecore_scale_add(m->y1, m->src, m->alpha, m->x, m->beta, TECORE_DTYPE_F32, m->n, s));
  TE_OK(tecore_memset_d32_async(m->src, m->w, m->n, s));
  TE_OK(tecore_scale_add(m->y2, m->src, m->alpha, m->x, m->beta, TECORE_DTYPE_F32, m->n, s));
}

/* Every byte of the arena and every float of y1, y2 against the host
 * reference (exact). */
static void mwork_check(const struct mwork *m, const char *when) {
  uint8_t *a = malloc(m->bytes), *want = malloc(m->bytes);
  te_d2h(a, m->arena, m->bytes);
  memset(want, TE_POISON_BYTE, m->bytes);
  for (int k = 0; k < 4; k++)
    for (size_t i = 0; i < m->cnt[k]; i++)
      for (unsigned b = 0; b < m->esz[k]; b++)
        want[m->off[k] + i * m->esz[k] + b] = (uint8_t)(m->val[k] >> (8 * b)); /* little endian */
  for (size_t i = 0; i < m->bytes; i++)
    ck_assert_msg(a[i] == want[i], "%s: arena byte %zu is 0x%02x, want 0x%02x", when, i, a[i],
                  want[i]);
  float *x = tgt_get(m->x, m->n), *y1 = tgt_get(m->y1, m->n), *y2 = tgt_get(m->y2, m->n);
  float *w1 = malloc(m->n * 4), *w2 = malloc(m->n * 4);
  float fv, fw;
  memcpy(&fv, &m->v, 4);
  memcpy(&fw, &m->w, 4);
  /* the kernel's arithmetic: fmaf(alpha, a, beta * b) (kernels/common/elementwise.h) */
  for (size_t i = 0; i < m->n; i++) {
    w1[i] = fmaf(m->alpha, fv, m->beta * x[i]);
    w2[i] = fmaf(m->alpha, fw, m->beta * x[i]);
  }
  char what[96];
  snprintf(what, sizeof what, "y1 (%s)", when);
  te_expect_f32_bits(y1, w1, m->n, what);
  snprintf(what, sizeof what, "y2 (%s)", when);
  te_expect_f32_bits(y2, w2, m->n, what);
  free(a);
  free(want);
  free(x);
  free(y1);
  free(y2);
  free(w1);
  free(w2);
}

START_TEST(memsets_become_kernels) {
  struct mwork m;
  mwork_new(&m);
  mwork_poison(&m);
  tecore_graph_t g = NULL;
  TE_OK(tecore_stream_begin_capture(te_stream, TECORE_CAPTURE_GLOBAL));
  mwork_enqueue(&m, te_stream);
  TE_OK(tecore_stream_end_capture(te_stream, &g));
  size_t ms = 0, tm = 0, total0 = 0, total1 = 0, replaced = 99;
  census(g, &ms, &tm, &total0);
  ck_assert_uint_eq(ms, 6);
  ck_assert_uint_eq(tm, 0);
  TE_OK(tecore_graph_memsets_to_kernels(g, &replaced));
  ck_assert_uint_eq(replaced, 6);
  census(g, &ms, &tm, &total1);
  ck_assert_msg(ms == 0, "%zu memset nodes left", ms);
  ck_assert_uint_eq(tm, 6);
  ck_assert_uint_eq(total1, total0);
  /* nothing ran yet: the arena still holds its poison */
  mwork_poison(&m);
  tecore_graph_exec_t x = NULL;
  TE_OK(tecore_graph_instantiate(&x, g));
  for (int rep = 0; rep < 2; rep++) {
    char when[48];
    mwork_poison(&m);
    TE_OK(tecore_graph_launch(x, te_stream));
    TE_OK(tecore_stream_synchronize(te_stream));
    snprintf(when, sizeof when, "replay %d", rep);
    mwork_check(&m, when);
  }
  /* a second pass finds nothing to do */
  TE_OK(tecore_graph_memsets_to_kernels(g, &replaced));
  ck_assert_uint_eq(replaced, 0);
  TE_OK(tecore_graph_exec_destroy(x));
  TE_OK(tecore_graph_destroy(g));
  mwork_free(&m);
}
END_TEST

START_TEST(tegraph_capture_has_no_memset) {
  struct mwork m;
  mwork_new(&m);
  tegraph_graph_t *g = NULL;
  TG_OK(tegraph_graph_create(0, &g));
  TG_OK(tegraph_graph_begin_capture(g, te_stream, TECORE_CAPTURE_GLOBAL, 0));
  mwork_enqueue(&m, te_stream);
  TG_OK(tegraph_graph_end_capture(g, NULL));
  tecore_graph_t tg = NULL;
  TG_OK(tegraph_graph_handles(g, &tg, NULL));
  size_t ms = 0, tm = 0;
  census(tg, &ms, &tm, NULL);
  ck_assert_msg(ms == 0, "tegraph_graph_end_capture left %zu memset nodes", ms);
  ck_assert_uint_eq(tm, 6);
  mwork_poison(&m);
  TG_OK(tegraph_graph_launch(g, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  mwork_check(&m, "tegraph replay");
  TG_OK(tegraph_graph_destroy(g));
  mwork_free(&m);
}
END_TEST

START_TEST(memsets_to_kernels_misuse) {
  size_t n = 5;
  TE_EXPECT_ERR(TECORE_ERR_INVALID, "graph is NULL", tecore_graph_memsets_to_kernels(NULL, &n));
}
END_TEST

/* ---- copies ---------------------------------------------------------------------- */

/* Counts graph's memcpy nodes and its te_copy kernel nodes. */
static void copy_census(tecore_graph_t g, size_t *copies, size_t *te_copies) {
  int id = -1;
  TE_OK(tecore_kernel_find("te_copy", &id));
  size_t n = 0;
  TE_OK(tecore_graph_nodes(g, NULL, 0, &n));
  struct tecore_graph_node_desc *d = calloc(n ? n : 1, sizeof *d);
  TE_OK(tecore_graph_nodes(g, d, n, &n));
  *copies = *te_copies = 0;
  for (size_t i = 0; i < n; i++) {
    *copies += d[i].type == TECORE_GRAPH_NODE_MEMCPY;
    *te_copies += d[i].type == TECORE_GRAPH_NODE_KERNEL && d[i].kernel_id == id;
  }
  free(d);
}

enum { COPY_MAX = 262144 };   /* TEGRAPH_COPY_KERNELS' default */

/* in (pinned) -> a; y = alpha * a + beta * x; y -> b + 3 (bytes, device);
 * b + 3 -> out + 1 (pinned); big1 -> big2 (COPY_MAX + 16 bytes, device);
 * big1 -> hbig (the same, to pinned memory: stays a copy node). */
struct cwork {
  size_t n;
  float *in;
  uint8_t *out, *hbig;
  tecore_devptr_t a, x, y, b, big1, big2;
  float alpha, beta;
};

static void cwork_new(struct cwork *c) {
  memset(c, 0, sizeof *c);
  c->n = 1 + (size_t)te_rand_below(4000);
  TE_OK(tecore_mem_alloc_host(c->n * 4, (void **)&c->in));
  TE_OK(tecore_mem_alloc_host(c->n * 4 + 64, (void **)&c->out));
  TE_OK(tecore_mem_alloc_host(COPY_MAX + 16, (void **)&c->hbig));
  c->a = te_dalloc(c->n * 4);
  c->y = te_dalloc(c->n * 4);
  c->b = te_dalloc(c->n * 4 + 16);
  c->x = tgt_rand_dev(c->n, -4, 4);
  c->big1 = tgt_rand_dev(COPY_MAX / 4 + 4, -1, 1);
  c->big2 = te_dalloc(COPY_MAX + 16);
  c->alpha = te_rand_float(0.5f, 2);
  c->beta = te_rand_float(-2, -0.5f);
}

static void cwork_free(struct cwork *c) {
  TE_OK(tecore_mem_free_host(c->in));
  TE_OK(tecore_mem_free_host(c->out));
  TE_OK(tecore_mem_free_host(c->hbig));
  tecore_devptr_t dev[] = {c->a, c->y, c->b, c->x, c->big1, c->big2};
  for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) TE_OK(tecore_mem_free(dev[i]));
}

/* fresh random input, poisoned outputs */
static void cwork_fresh(struct cwork *c) {
  for (size_t i = 0; i < c->n; i++) c->in[i] = te_rand_float(-3, 3);
  memset(c->out, TE_POISON_BYTE, c->n * 4 + 64);
  memset(c->hbig, TE_POISON_BYTE, COPY_MAX + 16);
  te_poison_dev(c->a, c->n * 4);
  te_poison_dev(c->y, c->n * 4);
  te_poison_dev(c->b, c->n * 4 + 16);
  te_poison_dev(c->big2, COPY_MAX + 16);
}

static void cwork_enqueue(const struct cwork *c, tecore_stream_t s) {
  size_t bytes = c->n * 4;
  TE_OK(tecore_memcpy_async(c->a, (tecore_devptr_t)(uintptr_t)c->in, bytes, s));
  TE_OK(tecore_scale_add(c->y, c->a, c->alpha, c->x, c->beta, TECORE_DTYPE_F32, c->n, s));
  TE_OK(tecore_memcpy_async(c->b + 3, c->y, bytes, s));
  TE_OK(tecore_memcpy_async((tecore_devptr_t)(uintptr_t)(c->out + 1), c->b + 3, bytes, s));
  TE_OK(tecore_memcpy_async(c->big2, c->big1, COPY_MAX + 16, s));
  TE_OK(tecore_memcpy_async((tecore_devptr_t)(uintptr_t)c->hbig, c->big1, COPY_MAX + 16, s));
}

static void cwork_check(const struct cwork *c, const char *when) {
  float *x = tgt_get(c->x, c->n);
  for (size_t i = 0; i < c->n; i++) {
    float want = fmaf(c->alpha, c->in[i], c->beta * x[i]), got;
    memcpy(&got, c->out + 1 + 4 * i, 4);
    ck_assert_msg(te_f32_bits_of(got) == te_f32_bits_of(want), "%s: out[%zu] = %.9g, want %.9g",
                  when, i, got, want);
  }
  ck_assert_msg(c->out[0] == TE_POISON_BYTE, "%s: the byte before the copy out was written", when);
  for (size_t i = 1 + c->n * 4; i < c->n * 4 + 64; i++)
    ck_assert_msg(c->out[i] == TE_POISON_BYTE, "%s: byte %zu past the copy out was written",
                  when, i);
  uint8_t *b1 = malloc(COPY_MAX + 16), *b2 = malloc(COPY_MAX + 16);
  te_d2h(b1, c->big1, COPY_MAX + 16);
  te_d2h(b2, c->big2, COPY_MAX + 16);
  ck_assert_msg(memcmp(b1, b2, COPY_MAX + 16) == 0, "%s: the large copy differs", when);
  ck_assert_msg(memcmp(b1, c->hbig, COPY_MAX + 16) == 0, "%s: the large copy out differs", when);
  free(b1);
  free(b2);
  free(x);
}

START_TEST(copies_become_kernels) {
  struct cwork c;
  cwork_new(&c);
  tecore_graph_t g = NULL;
  TE_OK(tecore_stream_begin_capture(te_stream, TECORE_CAPTURE_GLOBAL));
  cwork_enqueue(&c, te_stream);
  TE_OK(tecore_stream_end_capture(te_stream, &g));
  size_t cp = 0, tc = 0, replaced = 99;
  copy_census(g, &cp, &tc);
  ck_assert_uint_eq(cp, 5);
  ck_assert_uint_eq(tc, 0);
  TE_OK(tecore_graph_copies_to_kernels(g, 0, 0, &replaced));
  ck_assert_uint_eq(replaced, 0);
  TE_OK(tecore_graph_copies_to_kernels(g, COPY_MAX, 0, &replaced));
  ck_assert_uint_eq(replaced, 2);   /* the small copy in and the small copy out */
  copy_census(g, &cp, &tc);
  ck_assert_msg(cp == 3 && tc == 2, "host limit only: %zu memcpy, %zu te_copy nodes", cp, tc);
  TE_OK(tecore_graph_copies_to_kernels(g, COPY_MAX, SIZE_MAX, &replaced));
  ck_assert_uint_eq(replaced, 2);   /* the two copies within the device */
  copy_census(g, &cp, &tc);
  ck_assert_msg(cp == 1, "%zu memcpy nodes left (the large copy out only should stay)", cp);
  ck_assert_uint_eq(tc, 4);
  tecore_graph_exec_t x = NULL;
  TE_OK(tecore_graph_instantiate(&x, g));
  for (int rep = 0; rep < 2; rep++) {
    char when[48];
    cwork_fresh(&c);
    TE_OK(tecore_graph_launch(x, te_stream));
    TE_OK(tecore_stream_synchronize(te_stream));
    snprintf(when, sizeof when, "replay %d", rep);
    cwork_check(&c, when);
  }
  TE_OK(tecore_graph_copies_to_kernels(g, COPY_MAX, SIZE_MAX, &replaced));
  ck_assert_uint_eq(replaced, 0);
  TE_OK(tecore_graph_exec_destroy(x));
  TE_OK(tecore_graph_destroy(g));
  cwork_free(&c);
}
END_TEST

START_TEST(tegraph_capture_has_no_small_copy) {
  struct cwork c;
  cwork_new(&c);
  tegraph_graph_t *g = NULL;
  TG_OK(tegraph_graph_create(0, &g));
  TG_OK(tegraph_graph_begin_capture(g, te_stream, TECORE_CAPTURE_GLOBAL, 0));
  cwork_enqueue(&c, te_stream);
  TG_OK(tegraph_graph_end_capture(g, NULL));
  tecore_graph_t tg = NULL;
  TG_OK(tegraph_graph_handles(g, &tg, NULL));
  size_t cp = 0, tc = 0;
  copy_census(tg, &cp, &tc);
  ck_assert_msg(cp == 1 && tc == 4, "tegraph_graph_end_capture: %zu memcpy, %zu te_copy nodes",
                cp, tc);
  cwork_fresh(&c);
  TG_OK(tegraph_graph_launch(g, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  cwork_check(&c, "tegraph replay");
  TG_OK(tegraph_graph_destroy(g));
  cwork_free(&c);
}
END_TEST

START_TEST(copies_to_kernels_misuse) {
  size_t n = 5;
  TE_EXPECT_ERR(TECORE_ERR_INVALID, "graph is NULL",
                tecore_graph_copies_to_kernels(NULL, 1024, 1024, &n));
}
END_TEST

/* ---- the training step ------------------------------------------------------------ */

enum { ROWS = 32, HIDDEN = 64, FFN = 128, BLOCKS = 2, MAXP = 16 };
static const uint64_t SEQ_SEED = 20261122;

/* One model with its optimizer: the sequence, F32 master weights and
 * moments, AdamW's device state, the step's buffers. */
struct model {
  tecore_seq_t *seq;
  struct tecore_seq_param p[MAXP];
  struct tecore_optim_tensor ot[MAXP];
  size_t np;
  tecore_devptr_t state, flag;
  struct tecore_tensor x, y, dy, dx;
};

static void model_new(struct model *m, const struct tecore_recipe *recipe) {
  memset(m, 0, sizeof *m);
  struct tecore_seq_config cfg = {.rows = ROWS, .features = HIDDEN, .dtype = TECORE_DTYPE_BF16,
                                  .seed = SEQ_SEED};
  TE_OK(tecore_seq_create(&cfg, &m->seq));
  for (int b = 0; b < BLOCKS; b++) TE_OK(te_tools_add_mlp_block(m->seq, b, HIDDEN, FFN));
  if (recipe) TE_OK(tecore_seq_set_recipe(m->seq, recipe, te_stream));
  TE_OK(tecore_seq_build(m->seq, te_stream));
  TE_OK(tecore_seq_params(m->seq, m->p, MAXP, &m->np));
  ck_assert(m->np > 0 && m->np <= MAXP);
  for (size_t i = 0; i < m->np; i++) {
    size_t k = tecore_tensor_numel(&m->p[i].value);
    struct tecore_optim_tensor *t = &m->ot[i];
    t->numel = k;
    t->grad = m->p[i].grad.data;
    t->grad_dtype = TECORE_DTYPE_F32;
    t->model = m->p[i].value.data;
    t->model_dtype = TECORE_DTYPE_BF16;
    t->param = te_dalloc(k * 4);
    t->exp_avg = te_dalloc(k * 4);
    t->exp_avg_sq = te_dalloc(k * 4);
    /* master weights from the model's bf16 values, moments zero */
    uint16_t *h = malloc(k * 2);
    float *f = malloc(k * 4);
    te_d2h(h, m->p[i].value.data, k * 2);
    for (size_t j = 0; j < k; j++) f[j] = te_bf16_to_f32(h[j]);
    te_h2d(t->param, f, k * 4);
    memset(f, 0, k * 4);
    te_h2d(t->exp_avg, f, k * 4);
    te_h2d(t->exp_avg_sq, f, k * 4);
    free(h);
    free(f);
  }
  struct tecore_optim_state s0 = {0, 1e-3};
  m->state = te_dalloc(sizeof s0);
  te_h2d(m->state, &s0, sizeof s0);
  m->flag = te_dalloc(4);
  m->x = tgt_bf16_tensor(ROWS, HIDDEN);
  m->y = tgt_bf16_tensor(ROWS, HIDDEN);
  m->dy = tgt_bf16_tensor(ROWS, HIDDEN);
  m->dx = tgt_bf16_tensor(ROWS, HIDDEN);
}

static void model_free(struct model *m) {
  for (size_t i = 0; i < m->np; i++) {
    TE_OK(tecore_mem_free(m->ot[i].param));
    TE_OK(tecore_mem_free(m->ot[i].exp_avg));
    TE_OK(tecore_mem_free(m->ot[i].exp_avg_sq));
  }
  TE_OK(tecore_mem_free(m->state));
  TE_OK(tecore_mem_free(m->flag));
  TE_OK(tecore_mem_free(m->x.data));
  TE_OK(tecore_mem_free(m->y.data));
  TE_OK(tecore_mem_free(m->dy.data));
  TE_OK(tecore_mem_free(m->dx.data));
  TE_OK(tecore_seq_destroy(m->seq));
}

/* te-demo's step, with the memsets a step may hold (the forward's no-op
 * flag cleared, dx cleared before the backward writes it). */
static void queue_step(const struct model *m, tecore_stream_t s) {
  TE_OK(tecore_seq_zero_grad(m->seq, s));
  TE_OK(tecore_memset_d32_async(m->flag, 0, 1, s));
  TE_OK(tecore_seq_forward(m->seq, &m->x, &m->y, m->flag, s));
  TE_OK(tecore_memset_d8_async(m->dx.data, 0, ROWS * HIDDEN * 2, s));
  TE_OK(tecore_seq_backward(m->seq, &m->dy, &m->dx, s));
  TE_OK(tecore_seq_update_scales(m->seq, s));
  struct tecore_adam_config ac = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                                  .weight_decay = 0.01, .flags = TECORE_ADAM_W,
                                  .state = m->state};
  TE_OK(tecore_adam_step(m->ot, m->np, &ac, 0, 0, s));
}

static void expect_same_bytes(tecore_devptr_t a, tecore_devptr_t b, size_t bytes,
                              const char *what) {
  uint8_t *ha = malloc(bytes), *hb = malloc(bytes);
  te_d2h(ha, a, bytes);
  te_d2h(hb, b, bytes);
  size_t nz = 0;
  for (size_t i = 0; i < bytes; i++) {
    ck_assert_msg(ha[i] == hb[i], "%s: byte %zu differs (graph 0x%02x, eager 0x%02x)", what, i,
                  ha[i], hb[i]);
    nz += ha[i] != 0;
  }
  ck_assert_msg(nz > 0, "%s: all zero (the comparison would prove nothing)", what);
  free(ha);
  free(hb);
}

static void step_graph_vs_eager(const struct tecore_recipe *recipe, const char *name) {
  struct model a, b;
  model_new(&a, recipe);
  model_new(&b, recipe);
  /* the same warmup step on both, eagerly (lazy buffers and choices
   * happen outside the capture) */
  struct model *both[2] = {&a, &b};
  tgt_rand_bf16(&a.x, -1.5f, 1.5f);
  tgt_rand_bf16(&a.dy, -0.1f, 0.1f);
  TE_OK(tecore_memcpy_async(b.x.data, a.x.data, ROWS * HIDDEN * 2, te_stream));
  TE_OK(tecore_memcpy_async(b.dy.data, a.dy.data, ROWS * HIDDEN * 2, te_stream));
  for (int k = 0; k < 2; k++) queue_step(both[k], te_stream);
  TE_OK(tecore_stream_synchronize(te_stream));

  tegraph_graph_t *g = NULL;
  TG_OK(tegraph_graph_create(TEGRAPH_INSTANTIATE_UPLOAD, &g));
  TG_OK(tegraph_graph_begin_capture(g, te_stream, TECORE_CAPTURE_THREAD_LOCAL, 0));
  queue_step(&a, te_stream);
  TG_OK(tegraph_graph_end_capture(g, NULL));
  TG_OK(tegraph_graph_instantiate(g, te_stream));
  tecore_graph_t tg = NULL;
  TG_OK(tegraph_graph_handles(g, &tg, NULL));
  size_t ms = 0, tm = 0, total = 0;
  census(tg, &ms, &tm, &total);
  ck_assert_msg(ms == 0, "%s: the step graph holds %zu memset nodes of %zu", name, ms, total);
  ck_assert_msg(tm >= 2, "%s: the step's own memsets are not te_memset nodes (%zu)", name, tm);

  size_t n = ROWS * HIDDEN;
  for (int st = 0; st < 2; st++) {
    tgt_rand_bf16(&a.x, -1.5f, 1.5f);
    tgt_rand_bf16(&a.dy, -0.1f, 0.1f);
    TE_OK(tecore_memcpy_async(b.x.data, a.x.data, n * 2, te_stream));
    TE_OK(tecore_memcpy_async(b.dy.data, a.dy.data, n * 2, te_stream));
    for (int k = 0; k < 2; k++) {
      te_poison_dev(both[k]->y.data, n * 2);
      te_poison_dev(both[k]->dx.data, n * 2);
    }
    TG_OK(tegraph_graph_launch(g, te_stream));
    queue_step(&b, te_stream);
    TE_OK(tecore_stream_synchronize(te_stream));
    char what[160];
    snprintf(what, sizeof what, "%s: step %d: y", name, st);
    expect_same_bytes(a.y.data, b.y.data, n * 2, what);
    snprintf(what, sizeof what, "%s: step %d: dx", name, st);
    expect_same_bytes(a.dx.data, b.dx.data, n * 2, what);
    for (size_t i = 0; i < a.np; i++) {
      size_t k = a.ot[i].numel;
      snprintf(what, sizeof what, "%s: step %d: op %zu's %s gradient", name, st, a.p[i].op,
               a.p[i].name);
      expect_same_bytes(a.p[i].grad.data, b.p[i].grad.data, k * 4, what);
      snprintf(what, sizeof what, "%s: step %d: op %zu's %s (bf16)", name, st, a.p[i].op,
               a.p[i].name);
      expect_same_bytes(a.p[i].value.data, b.p[i].value.data, k * 2, what);
      snprintf(what, sizeof what, "%s: step %d: op %zu's %s master weight", name, st, a.p[i].op,
               a.p[i].name);
      expect_same_bytes(a.ot[i].param, b.ot[i].param, k * 4, what);
    }
  }
  printf("# %s: step graph of %zu nodes, %zu te_memset and no memset nodes = eager, bit for "
         "bit, 2 steps\n", name, total, tm);
  TG_OK(tegraph_graph_destroy(g));
  model_free(&a);
  model_free(&b);
}

START_TEST(step_graph_bf16) { step_graph_vs_eager(NULL, "bf16"); }
END_TEST

START_TEST(step_graph_fp8_delayed) {
  struct tecore_recipe r;
  TE_OK(tecore_recipe_init(&r, TECORE_RECIPE_DELAYED));
  step_graph_vs_eager(&r, "fp8 delayed");
}
END_TEST

static Suite *memset_suite(void) {
  Suite *s = suite_create("graph_memset");
  TCase *tc = tgt_tcase(s, "memsets");
  tcase_add_test(tc, memsets_become_kernels);
  tcase_add_test(tc, tegraph_capture_has_no_memset);
  tcase_add_test(tc, memsets_to_kernels_misuse);
  tcase_add_test(tc, copies_become_kernels);
  tcase_add_test(tc, tegraph_capture_has_no_small_copy);
  tcase_add_test(tc, copies_to_kernels_misuse);
  tc = tgt_tcase(s, "step_graph");
  tcase_add_test(tc, step_graph_bf16);
  tcase_add_test(tc, step_graph_fp8_delayed);
  return s;
}

TE_TEST_MAIN(memset_suite, TE_TEST_DEVICE)
