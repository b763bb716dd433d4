/* SPDX-License-Identifier: Apache-2.0 */
/* check_graph_callable.c -- graphed callables (te/graph.h):
 *   - graphed and eager runs give identical outputs, input gradients and
 *     accumulated parameter gradients over several steps of several
 *     microbatches, with rebinding, with copy-in only, and with the
 *     weight gradient delayed into backward_dw;
 *   - a model whose parameter gradient the caller zeroes every step reads
 *     1.0 after each step (not 1.0, 2.0, 2.0: the gradient buffer is the
 *     caller's, never replaced or reset); warmup runs between its hooks;
 *   - keyword tensors: required, checked by name, dtype and shape, any
 *     order;
 *   - rebinding gives the same bits as copy-in, and the slot query says
 *     which path each buffer took; a buffer a kernel hides in a non-pointer
 *     parameter is copied, one a memcpy reads is rebound;
 *   - side-stream replay is ordered after the caller's stream and before
 *     the caller's event (and joins back without an event);
 *   - two callables captured in an interleaved pipeline order from one pool
 *     replay a chain correctly;
 *   - reset points rebound buffers back at the static ones; reset with
 *     re-capture picks up a changed function and updates in place.
 * Models (n floats, n random in [500, 3000), values random):
 *   lin: y = alpha*x + b [+ shift + 0.5*mask]; gx = alpha*gy; gb += gy
 *        (library kernels only: runs on every backend)
 *   mul: y = w*x + shift; gx = w*gy; gw += x*gy (the suite's test kernels:
 *        vdev)
 * Graphed and eager runs use the same kernels on the same values: every
 * comparison is bit for bit (tolerance exact). */
#include "check_graph_common.h"

#define WAIT_MS 20000

static size_t rand_n(void) { return 500 + (size_t)te_rand_below(2500); }

/* ---- the models --------------------------------------------------------------------- */

struct model {
  size_t n;
  float alpha;
  tecore_devptr_t p, g;     /* the parameter and its gradient: the caller's */
  int kw;                   /* lin: 0 none, 2: shift and mask */
  int split_dw;             /* the parameter gradient in backward_dw */
  int calls[3][3];          /* [pass][phase] */
  int pre_hooks, post_hooks;
  int memcpy_input;         /* lin: read x through a copy into scratch */
  tecore_devptr_t scratch;
};

static void count_call(struct model *m, int pass, const struct tegraph_io *io) {
  m->calls[pass][io->phase]++;
}

static tecore_result_t lin_fwd(void *u, tecore_stream_t s, const struct tegraph_io *io) {
  struct model *m = u;
  count_call(m, 0, io);
  tecore_devptr_t x = io->inputs[0].data, y = io->outputs[0].data;
  if (m->memcpy_input) {
    tecore_result_t r = tecore_memcpy_async(m->scratch, x, m->n * 4, s);
    if (r) return r;
    x = m->scratch;
  }
  tecore_result_t r = tecore_scale_add(y, x, m->alpha, m->p, 1.0f, TECORE_DTYPE_F32, m->n, s);
  if (r || !m->kw) return r;
  /* kw order at capture is the desc's: shift, mask */
  r = tecore_scale_add(y, y, 1.0f, io->kw[0].data, 1.0f, TECORE_DTYPE_F32, m->n, s);
  if (r) return r;
  return tecore_scale_add(y, y, 1.0f, io->kw[1].data, 0.5f, TECORE_DTYPE_F32, m->n, s);
}

static tecore_result_t lin_gb(struct model *m, const struct tegraph_io *io, tecore_stream_t s) {
  return tecore_scale_add(m->g, m->g, 1.0f, io->grad_outputs[0].data, 1.0f, TECORE_DTYPE_F32,
                          m->n, s);
}

static tecore_result_t lin_bwd(void *u, tecore_stream_t s, const struct tegraph_io *io) {
  struct model *m = u;
  count_call(m, 1, io);
  tecore_devptr_t gy = io->grad_outputs[0].data, gx = io->grad_inputs[0].data;
  tecore_result_t r = TECORE_SUCCESS;
  if (gx) r = tecore_scale_add(gx, gy, m->alpha, gy, 0.0f, TECORE_DTYPE_F32, m->n, s);
  if (r || m->split_dw) return r;
  return lin_gb(m, io, s);
}

static tecore_result_t lin_dw(void *u, tecore_stream_t s, const struct tegraph_io *io) {
  struct model *m = u;
  count_call(m, 2, io);
  return lin_gb(m, io, s);
}

static tecore_result_t mul_fwd(void *u, tecore_stream_t s, const struct tegraph_io *io) {
  struct model *m = u;
  count_call(m, 0, io);
  tecore_devptr_t y = io->outputs[0].data;
  tecore_result_t r = tgt_mul(y, m->p, io->inputs[0].data, m->n, s);
  if (r) return r;
  return tecore_scale_add(y, y, 1.0f, io->kw[0].data, 1.0f, TECORE_DTYPE_F32, m->n, s);
}

static tecore_result_t mul_gw(struct model *m, const struct tegraph_io *io, tecore_stream_t s) {
  return tgt_fma_acc(m->g, io->inputs[0].data, io->grad_outputs[0].data, m->n, s);
}

static tecore_result_t mul_bwd(void *u, tecore_stream_t s, const struct tegraph_io *io) {
  struct model *m = u;
  count_call(m, 1, io);
  tecore_result_t r = tgt_mul(io->grad_inputs[0].data, m->p, io->grad_outputs[0].data, m->n, s);
  if (r || m->split_dw) return r;
  return mul_gw(m, io, s);
}

static tecore_result_t mul_dw(void *u, tecore_stream_t s, const struct tegraph_io *io) {
  struct model *m = u;
  count_call(m, 2, io);
  return mul_gw(m, io, s);
}

static tecore_result_t hook_pre(void *u) {
  ((struct model *)u)->pre_hooks++;
  return TECORE_SUCCESS;
}

/* Warmup ran the backward for real: the caller clears what it accumulated. */
static tecore_result_t hook_post(void *u) {
  struct model *m = u;
  m->post_hooks++;
  tecore_result_t r = tecore_memset_d32_async(m->g, 0, m->n, NULL);
  return r ? r : tecore_stream_synchronize(NULL);
}

static void model_new(struct model *m, size_t n, float alpha) {
  memset(m, 0, sizeof *m);
  m->n = n;
  m->alpha = alpha;
  m->p = tgt_rand_dev(n, -1, 1);
  m->g = te_dalloc(n * 4);
  TE_OK(tecore_memset_d32_async(m->g, 0, n, te_stream));
  m->scratch = te_dalloc(n * 4);
}

static void model_free(struct model *m) {
  TE_OK(tecore_mem_free(m->p));
  TE_OK(tecore_mem_free(m->g));
  TE_OK(tecore_mem_free(m->scratch));
}

/* A desc over model m: one input x, one output y, [n] f32 each. */
static const char *const kw_names2[] = {"shift", "mask"};
struct descbuf {
  struct tecore_tensor x, y, kw[2];
  struct tegraph_callable_desc d;
};
static void desc_for(struct descbuf *b, struct model *m, tegraph_fn f, tegraph_fn bw,
                     tegraph_fn dw, int nkw, tecore_devptr_t sample_x) {
  memset(b, 0, sizeof *b);
  b->x = tgt_vec(sample_x, m->n);
  b->y = tgt_vec(0, m->n);
  b->kw[0] = tgt_vec(0, m->n);
  b->kw[1] = tgt_vec(0, m->n);
  b->d.forward = f;
  b->d.backward = bw;
  b->d.backward_dw = dw;
  b->d.user = m;
  b->d.sample_inputs = &b->x;
  b->d.ninputs = 1;
  b->d.kw_names = kw_names2;
  b->d.sample_kw = b->kw;
  b->d.nkw = (size_t)nkw;
  b->d.outputs = &b->y;
  b->d.noutputs = 1;
  b->d.capture_mode = TECORE_CAPTURE_GLOBAL;
}

/* The eager reference: the same functions on the caller's buffers. */
static void eager(struct model *m, tegraph_fn f, tecore_devptr_t x, const tecore_devptr_t *kw,
                  int nkw, tecore_devptr_t y) {
  struct tecore_tensor in = tgt_vec(x, m->n), out = tgt_vec(y, m->n), k[2];
  for (int i = 0; i < nkw; i++) k[i] = tgt_vec(kw[i], m->n);
  struct tegraph_io io = {.phase = TEGRAPH_PHASE_EAGER, .inputs = &in, .ninputs = 1,
                          .kw_names = kw_names2, .kw = k, .nkw = (size_t)nkw,
                          .outputs = &out, .noutputs = 1};
  TE_OK(f(m, te_stream, &io));
}
static void eager_bwd(struct model *m, tegraph_fn f, tecore_devptr_t x, tecore_devptr_t gy,
                      tecore_devptr_t gx) {
  struct tecore_tensor in = tgt_vec(x, m->n), go = tgt_vec(gy, m->n), gi = tgt_vec(gx, m->n);
  struct tecore_tensor y = tgt_vec(0, m->n);
  struct tegraph_io io = {.phase = TEGRAPH_PHASE_EAGER, .inputs = &in, .ninputs = 1,
                          .outputs = &y, .noutputs = 1, .grad_outputs = &go,
                          .grad_inputs = &gi};
  TE_OK(f(m, te_stream, &io));
}

static struct tegraph_replay_opts on_stream(int first) {
  return (struct tegraph_replay_opts){.stream = te_stream, .is_first_microbatch = first};
}

/* ---- graphed == eager, with gradient accumulation ------------------------------------ */

START_TEST(graphed_matches_eager) {
  if (!tgt_available("graphed_matches_eager")) return;
  const struct {
    unsigned flags;
    int split;
  } modes[] = {{0, 0}, {TEGRAPH_CALLABLE_NO_REBIND, 0}, {0, 1}};
  for (size_t mode = 0; mode < 3; mode++) {
    size_t n = rand_n();
    struct model mg, me;
    model_new(&mg, n, 1.0f);
    me = mg; /* the same parameter, its own gradient */
    me.g = te_dalloc(n * 4);
    mg.split_dw = me.split_dw = modes[mode].split;
    struct descbuf b;
    tecore_devptr_t sx = tgt_rand_dev(n, -1, 1);
    desc_for(&b, &mg, mul_fwd, mul_bwd, modes[mode].split ? mul_dw : NULL, 1, sx);
    b.d.flags = modes[mode].flags;
    b.d.num_warmup = 1;
    b.d.post_warmup = hook_post;
    tegraph_callable_t *c = NULL;
    TG_OK(tegraph_callable_create(&b.d, NULL, &c));
    tecore_devptr_t x = te_dalloc(n * 4), shift = te_dalloc(n * 4), gy = te_dalloc(n * 4);
    tecore_devptr_t y = te_dalloc(n * 4), gx = te_dalloc(n * 4);
    tecore_devptr_t y_ref = te_dalloc(n * 4), gx_ref = te_dalloc(n * 4);
    for (int step = 0; step < 3; step++) {
      /* the caller zeroes its gradients, then accumulates 4 microbatches */
      TE_OK(tecore_memset_d32_async(mg.g, 0, n, te_stream));
      TE_OK(tecore_memset_d32_async(me.g, 0, n, te_stream));
      for (int mb = 0; mb < 4; mb++) {
        float *h = malloc(n * 4);
        te_rand_floats(h, n, -2, 2);
        te_h2d(x, h, n * 4);
        te_rand_floats(h, n, -1, 1);
        te_h2d(shift, h, n * 4);
        te_rand_floats(h, n, -1, 1);
        te_h2d(gy, h, n * 4);
        free(h);
        te_poison_dev_nan(y, n);
        te_poison_dev_nan(gx, n);
        struct tecore_tensor in = tgt_vec(x, n), kw = tgt_vec(shift, n);
        struct tecore_tensor out = tgt_vec(y, n), go = tgt_vec(gy, n), gi = tgt_vec(gx, n);
        const char *names[] = {"shift"};
        struct tegraph_replay_opts o = on_stream(mb == 0);
        TG_OK(tegraph_callable_forward(c, &in, 1, names, &kw, 1, &out, 1, &o));
        TG_OK(tegraph_callable_backward(c, &go, 1, &gi, 1, &o));
        if (modes[mode].split) TG_OK(tegraph_callable_backward_dw(c, &o));
        eager(&me, mul_fwd, x, &shift, 1, y_ref);
        eager_bwd(&me, mul_bwd, x, gy, gx_ref);
        if (modes[mode].split) eager_bwd(&me, mul_dw, x, gy, gx_ref);
        TE_OK(te_stream_wait(te_stream, WAIT_MS));
        tgt_expect_same(y, y_ref, n, "y");
        tgt_expect_same(gx, gx_ref, n, "gx");
      }
      tgt_expect_same(mg.g, me.g, n, "accumulated gw");
      struct tegraph_slot_info si;
      TG_OK(tegraph_callable_slot(c, TEGRAPH_SLOT_INPUT, 0, NULL, &si));
      ck_assert_int_eq(si.last_path, modes[mode].flags ? TEGRAPH_PATH_COPIED
                                                       : TEGRAPH_PATH_REBOUND);
    }
    ck_assert_int_eq(mg.calls[0][TEGRAPH_PHASE_WARMUP], 1);
    ck_assert_int_eq(mg.calls[0][TEGRAPH_PHASE_CAPTURE], 1);
    ck_assert_int_eq(mg.calls[1][TEGRAPH_PHASE_CAPTURE], 1);
    ck_assert_int_eq(mg.calls[2][TEGRAPH_PHASE_CAPTURE], modes[mode].split);
    TG_OK(tegraph_callable_destroy(c));
    tecore_devptr_t fr[] = {x, shift, gy, y, gx, y_ref, gx_ref, sx, me.g};
    for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) TE_OK(tecore_mem_free(fr[i]));
    model_free(&mg);
  }
}
END_TEST

/* The caller zeroes the gradient each step; one microbatch of gy = 1
 * through y = x + b must leave exactly 1.0 in it, step after step. */
START_TEST(zeroed_gradients_read_one) {
  size_t n = rand_n();
  struct model m;
  model_new(&m, n, 1.0f);
  struct descbuf b;
  desc_for(&b, &m, lin_fwd, lin_bwd, NULL, 0, 0);
  b.d.num_warmup = 2;
  b.d.pre_warmup = hook_pre;
  b.d.post_warmup = hook_post;
  tegraph_callable_t *c = NULL;
  tecore_devptr_t g_before = m.g;
  TG_OK(tegraph_callable_create(&b.d, NULL, &c));
  ck_assert_int_eq(m.pre_hooks, 1);
  ck_assert_int_eq(m.post_hooks, 1);
  ck_assert_int_eq(m.calls[0][TEGRAPH_PHASE_WARMUP], 2);
  ck_assert_int_eq(m.calls[1][TEGRAPH_PHASE_WARMUP], 2);
  tecore_devptr_t x = tgt_rand_dev(n, -3, 3), ones = te_dalloc(n * 4);
  TE_OK(tecore_fill(ones, TECORE_DTYPE_F32, n, 1.0, te_stream));
  float *want = malloc(n * 4);
  for (size_t i = 0; i < n; i++) want[i] = 1.0f;
  for (int step = 0; step < 3; step++) {
    TE_OK(tecore_memset_d32_async(m.g, 0, n, te_stream)); /* the optimizer's zero_grad */
    struct tecore_tensor in = tgt_vec(x, n), go = tgt_vec(ones, n);
    struct tegraph_replay_opts o = on_stream(1);
    TG_OK(tegraph_callable_forward(c, &in, 1, NULL, NULL, 0, NULL, 0, &o));
    TG_OK(tegraph_callable_backward(c, &go, 1, NULL, 0, &o));
    TE_OK(te_stream_wait(te_stream, WAIT_MS));
    float *g = tgt_get(m.g, n);
    char what[64];
    snprintf(what, sizeof what, "gradient after step %d", step);
    te_expect_f32_bits(g, want, n, what);
    free(g);
  }
  ck_assert_uint_eq(m.g, g_before); /* still the caller's buffer */
  free(want);
  TG_OK(tegraph_callable_destroy(c));
  TE_OK(tecore_mem_free(x));
  TE_OK(tecore_mem_free(ones));
  model_free(&m);
}
END_TEST

/* ---- keyword tensors ------------------------------------------------------------------- */

START_TEST(keyword_tensors_checked) {
  size_t n = rand_n();
  struct model m;
  model_new(&m, n, 2.0f);
  m.kw = 2;
  struct descbuf b;
  desc_for(&b, &m, lin_fwd, NULL, NULL, 2, 0);
  tegraph_callable_t *c = NULL;
  TG_OK(tegraph_callable_create(&b.d, NULL, &c));
  tecore_devptr_t x = tgt_rand_dev(n, -1, 1), sh = tgt_rand_dev(n, -1, 1);
  tecore_devptr_t mk = tgt_rand_dev(n, 0, 1), y = te_dalloc(n * 4), y_ref = te_dalloc(n * 4);
  struct tecore_tensor in = tgt_vec(x, n), out = tgt_vec(y, n);
  struct tecore_tensor kw[3] = {tgt_vec(mk, n), tgt_vec(sh, n), tgt_vec(sh, n)};
  struct tegraph_replay_opts o = on_stream(1);
  /* any order: mask first */
  const char *rev[] = {"mask", "shift"};
  te_poison_dev_nan(y, n);
  TG_OK(tegraph_callable_forward(c, &in, 1, rev, kw, 2, &out, 1, &o));
  tecore_devptr_t kref[2] = {sh, mk};
  eager(&m, lin_fwd, x, kref, 2, y_ref);
  TE_OK(te_stream_wait(te_stream, WAIT_MS));
  tgt_expect_same(y, y_ref, n, "y with keyword tensors in another order");
  /* missing, unknown, repeated, mismatched: refused, nothing changed */
  const char *one[] = {"shift"};
  TG_EXPECT(TEGRAPH_ERR_INVALID, "nkw is 1",
            tegraph_callable_forward(c, &in, 1, one, kw + 1, 1, &out, 1, &o));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "nkw is 0",
            tegraph_callable_forward(c, &in, 1, NULL, NULL, 0, &out, 1, &o));
  const char *bogus[] = {"shift", "bogus"};
  TG_EXPECT(TEGRAPH_ERR_INVALID, "unknown keyword tensor 'bogus'",
            tegraph_callable_forward(c, &in, 1, bogus, kw + 1, 2, &out, 1, &o));
  const char *twice[] = {"shift", "shift"};
  TG_EXPECT(TEGRAPH_ERR_INVALID, "'shift' is given twice",
            tegraph_callable_forward(c, &in, 1, twice, kw + 1, 2, &out, 1, &o));
  struct tecore_tensor bad[2] = {tgt_vec(mk, n), tgt_vec(sh, n)};
  bad[0].shape[0] = n - 1;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "keyword tensor 'mask': shape",
            tegraph_callable_forward(c, &in, 1, rev, bad, 2, &out, 1, &o));
  bad[0] = tgt_vec(mk, n);
  bad[0].dtype = TECORE_DTYPE_BF16;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "keyword tensor 'mask': dtype bf16",
            tegraph_callable_forward(c, &in, 1, rev, bad, 2, &out, 1, &o));
  bad[0] = tgt_vec(0, n);
  TG_EXPECT(TEGRAPH_ERR_INVALID, "data is 0",
            tegraph_callable_forward(c, &in, 1, rev, bad, 2, &out, 1, &o));
  struct tegraph_slot_info si;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "no keyword tensor named 'bogus'",
            tegraph_callable_slot(c, TEGRAPH_SLOT_KEYWORD, 0, "bogus", &si));
  TG_OK(tegraph_callable_slot(c, TEGRAPH_SLOT_KEYWORD, 0, "mask", &si));
  ck_assert_int_eq(si.last_path, TEGRAPH_PATH_REBOUND);
  /* still usable: new values, same names */
  TE_OK(tecore_fill(mk, TECORE_DTYPE_F32, n, 0.25, te_stream));
  te_poison_dev_nan(y, n);
  TG_OK(tegraph_callable_forward(c, &in, 1, rev, kw, 2, &out, 1, &o));
  eager(&m, lin_fwd, x, kref, 2, y_ref);
  TE_OK(te_stream_wait(te_stream, WAIT_MS));
  tgt_expect_same(y, y_ref, n, "y after refused calls");
  TG_OK(tegraph_callable_destroy(c));
  tecore_devptr_t fr[] = {x, sh, mk, y, y_ref};
  for (size_t i = 0; i < 5; i++) TE_OK(tecore_mem_free(fr[i]));
  model_free(&m);
}
END_TEST

/* ---- rebinding -------------------------------------------------------------------------- */

START_TEST(rebinding_equals_copy) {
  size_t n = rand_n();
  struct model m;
  model_new(&m, n, te_rand_float(0.5f, 2));
  struct model m2 = m;
  m2.g = te_dalloc(n * 4);
  TE_OK(tecore_memset_d32_async(m2.g, 0, n, te_stream));
  struct descbuf b, b2;
  desc_for(&b, &m, lin_fwd, lin_bwd, NULL, 0, 0);
  desc_for(&b2, &m2, lin_fwd, lin_bwd, NULL, 0, 0);
  b2.d.flags = TEGRAPH_CALLABLE_NO_REBIND;
  tegraph_callable_t *rb = NULL, *cp = NULL;
  TG_OK(tegraph_callable_create(&b.d, NULL, &rb));
  TG_OK(tegraph_callable_create(&b2.d, NULL, &cp));
  struct tegraph_slot_info si;
  TG_OK(tegraph_callable_slot(rb, TEGRAPH_SLOT_INPUT, 0, NULL, &si));
  ck_assert_int_eq(si.rebindable, 1);
  ck_assert_uint_eq(si.uses, 1); /* forward's scale_add reads x */
  ck_assert_int_eq(si.last_path, TEGRAPH_PATH_NONE);
  TG_OK(tegraph_callable_slot(cp, TEGRAPH_SLOT_INPUT, 0, NULL, &si));
  ck_assert_int_eq(si.rebindable, 0);
  ck_assert_msg(strstr(si.why, "NO_REBIND"), "why: %s", si.why);
  tecore_devptr_t y1 = te_dalloc(n * 4), y2 = te_dalloc(n * 4);
  tecore_devptr_t g1 = te_dalloc(n * 4), g2 = te_dalloc(n * 4);
  for (int mb = 0; mb < 4; mb++) {
    /* a new input tensor at a new address each time */
    tecore_devptr_t x = tgt_rand_dev(n, -2, 2), gy = tgt_rand_dev(n, -1, 1);
    struct tecore_tensor in = tgt_vec(x, n), go = tgt_vec(gy, n);
    /* outputs into the caller's buffers on odd microbatches, static ones else */
    struct tecore_tensor o1 = tgt_vec(mb & 1 ? y1 : 0, n), o2 = tgt_vec(mb & 1 ? y2 : 0, n);
    struct tecore_tensor gi1 = tgt_vec(mb & 1 ? g1 : 0, n), gi2 = tgt_vec(mb & 1 ? g2 : 0, n);
    te_poison_dev_nan(y1, n);
    te_poison_dev_nan(y2, n);
    struct tegraph_replay_opts o = on_stream(1);
    TG_OK(tegraph_callable_forward(rb, &in, 1, NULL, NULL, 0, &o1, 1, &o));
    TG_OK(tegraph_callable_forward(cp, &in, 1, NULL, NULL, 0, &o2, 1, &o));
    TG_OK(tegraph_callable_backward(rb, &go, 1, &gi1, 1, &o));
    TG_OK(tegraph_callable_backward(cp, &go, 1, &gi2, 1, &o));
    TE_OK(te_stream_wait(te_stream, WAIT_MS));
    if (mb & 1) {
      ck_assert_uint_eq(o1.data, y1);
      tgt_expect_same(y1, y2, n, "y: rebound vs copied");
      tgt_expect_same(g1, g2, n, "gx: rebound vs copied");
    } else {
      ck_assert_uint_ne(o1.data, 0); /* the static outputs' descriptors */
      tgt_expect_same(o1.data, o2.data, n, "static y: rebound vs copied");
      tgt_expect_same(gi1.data, gi2.data, n, "static gx: rebound vs copied");
    }
    tgt_expect_same(m.g, m2.g, n, "accumulated gb");
    TG_OK(tegraph_callable_slot(rb, TEGRAPH_SLOT_INPUT, 0, NULL, &si));
    ck_assert_int_eq(si.last_path, TEGRAPH_PATH_REBOUND);
    ck_assert_uint_eq(si.bound, x);
    TG_OK(tegraph_callable_slot(rb, TEGRAPH_SLOT_OUTPUT, 0, NULL, &si));
    ck_assert_int_eq(si.last_path, mb & 1 ? TEGRAPH_PATH_REBOUND : TEGRAPH_PATH_STATIC);
    TG_OK(tegraph_callable_slot(cp, TEGRAPH_SLOT_INPUT, 0, NULL, &si));
    ck_assert_int_eq(si.last_path, TEGRAPH_PATH_COPIED);
    ck_assert_uint_eq(si.bound, si.tensor.data);
    TG_OK(tegraph_callable_slot(cp, TEGRAPH_SLOT_GRAD_INPUT, 0, NULL, &si));
    ck_assert_int_eq(si.last_path, mb & 1 ? TEGRAPH_PATH_COPIED : TEGRAPH_PATH_STATIC);
    TE_OK(tecore_mem_free(x));
    TE_OK(tecore_mem_free(gy));
  }
  /* the static buffer itself: nothing to do */
  TG_OK(tegraph_callable_slot(rb, TEGRAPH_SLOT_INPUT, 0, NULL, &si));
  struct tecore_tensor st = si.tensor;
  struct tegraph_replay_opts o = on_stream(1);
  TG_OK(tegraph_callable_forward(rb, &st, 1, NULL, NULL, 0, NULL, 0, &o));
  TG_OK(tegraph_callable_slot(rb, TEGRAPH_SLOT_INPUT, 0, NULL, &si));
  ck_assert_int_eq(si.last_path, TEGRAPH_PATH_STATIC);
  ck_assert_uint_eq(si.bound, si.tensor.data);
  /* a misaligned address is copied, never rebound */
  tecore_devptr_t xm = te_dalloc(n * 4 + 16);
  struct tecore_tensor inm = tgt_vec(xm + 4, n);
  TG_OK(tegraph_callable_forward(rb, &inm, 1, NULL, NULL, 0, NULL, 0, &o));
  TG_OK(tegraph_callable_slot(rb, TEGRAPH_SLOT_INPUT, 0, NULL, &si));
  ck_assert_int_eq(si.last_path, TEGRAPH_PATH_COPIED);
  TE_OK(te_stream_wait(te_stream, WAIT_MS));
  TG_OK(tegraph_callable_destroy(rb));
  TG_OK(tegraph_callable_destroy(cp));
  tecore_devptr_t fr[] = {y1, y2, g1, g2, xm, m2.g};
  for (size_t i = 0; i < 6; i++) TE_OK(tecore_mem_free(fr[i]));
  model_free(&m);
}
END_TEST

/* Creation waits for work the caller queued before it: here a stream that
 * writes the parameter only once a thread releases it 150 ms later.  The
 * warmup's forward (whose result stays in the static output) must see the
 * written parameter. */
struct release_arg {
  tecore_devptr_t flag;
};

static void *release_later(void *p) {
  struct release_arg *a = p;
  struct timespec ts = {0, 150 * 1000 * 1000};
  nanosleep(&ts, NULL);
  tecore_stream_t s2 = NULL;
  if (tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s2) == TECORE_SUCCESS) {
    (void)tecore_stream_write_value32(s2, a->flag, 1);
    (void)tecore_stream_synchronize(s2);
    (void)tecore_stream_destroy(s2);
  }
  return NULL;
}

START_TEST(creation_waits_for_queued_work) {
  size_t n = rand_n();
  struct model m;
  model_new(&m, n, 1.5f);
  tecore_devptr_t x = tgt_rand_dev(n, -1, 1), flag = te_dalloc(4), y_ref = te_dalloc(n * 4);
  TE_OK(tecore_memset_d32_async(flag, 0, 1, te_stream));
  TE_OK(tecore_memset_d32_async(m.p, 0, n, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  /* the parameter becomes 3.0 once the flag is set */
  float three = 3.0f;
  uint32_t bits;
  memcpy(&bits, &three, 4);
  tecore_stream_t s1 = NULL;
  TE_OK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s1));
  TE_OK(tecore_stream_wait_value32(s1, flag, 1, TECORE_WAIT_EQ));
  TE_OK(tecore_memset_d32_async(m.p, bits, n, s1));
  struct release_arg ra = {flag};
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, release_later, &ra), 0);
  struct descbuf b;
  desc_for(&b, &m, lin_fwd, NULL, NULL, 0, x);
  b.d.num_warmup = 1;
  tegraph_callable_t *c = NULL;
  TG_OK(tegraph_callable_create(&b.d, NULL, &c));
  pthread_join(th, NULL);
  struct tegraph_slot_info si;
  TG_OK(tegraph_callable_slot(c, TEGRAPH_SLOT_OUTPUT, 0, NULL, &si));
  eager(&m, lin_fwd, x, NULL, 0, y_ref);   /* p is 3.0 by now */
  TE_OK(tecore_stream_synchronize(te_stream));
  ck_assert_int_eq(m.calls[0][TEGRAPH_PHASE_WARMUP], 1);
  tgt_expect_same(si.tensor.data, y_ref, n, "the warmup's output (1.5 x + 3)");
  TG_OK(tegraph_callable_destroy(c));
  TE_OK(tecore_stream_destroy(s1));
  TE_OK(tecore_mem_free(x));
  TE_OK(tecore_mem_free(flag));
  TE_OK(tecore_mem_free(y_ref));
  model_free(&m);
}
END_TEST

/* A kernel that holds the input's address in a non-pointer parameter makes
 * it non-rebindable (copied); a memcpy that reads it is rebound. */
static tecore_result_t hidden_fwd(void *u, tecore_stream_t s, const struct tegraph_io *io) {
  struct model *m = u;
  return tgt_hidden(io->outputs[0].data, io->inputs[0].data, m->n, s);
}

START_TEST(rebind_sees_every_use) {
  size_t n = rand_n();
  struct model m;
  model_new(&m, n, 1.5f);
  m.memcpy_input = 1;
  struct descbuf b;
  desc_for(&b, &m, lin_fwd, NULL, NULL, 0, 0);
  tegraph_callable_t *c = NULL;
  TG_OK(tegraph_callable_create(&b.d, NULL, &c));
  struct tegraph_slot_info si;
  TG_OK(tegraph_callable_slot(c, TEGRAPH_SLOT_INPUT, 0, NULL, &si));
  ck_assert_int_eq(si.rebindable, 1);
  ck_assert_uint_eq(si.uses, 1); /* the memcpy's source */
  tecore_devptr_t x = tgt_rand_dev(n, -1, 1), y = te_dalloc(n * 4), y_ref = te_dalloc(n * 4);
  struct tecore_tensor in = tgt_vec(x, n), out = tgt_vec(y, n);
  struct tegraph_replay_opts o = on_stream(1);
  te_poison_dev_nan(y, n);
  TG_OK(tegraph_callable_forward(c, &in, 1, NULL, NULL, 0, &out, 1, &o));
  TE_OK(te_stream_wait(te_stream, WAIT_MS));
  eager(&m, lin_fwd, x, NULL, 0, y_ref);
  TE_OK(te_stream_wait(te_stream, WAIT_MS));
  tgt_expect_same(y, y_ref, n, "y through a rebound memcpy");
  TG_OK(tegraph_callable_slot(c, TEGRAPH_SLOT_INPUT, 0, NULL, &si));
  ck_assert_int_eq(si.last_path, TEGRAPH_PATH_REBOUND);
  TG_OK(tegraph_callable_destroy(c));

  if (tgt_available("rebind_sees_every_use (hidden pointer)")) {
    desc_for(&b, &m, hidden_fwd, NULL, NULL, 0, 0);
    TG_OK(tegraph_callable_create(&b.d, NULL, &c));
    TG_OK(tegraph_callable_slot(c, TEGRAPH_SLOT_INPUT, 0, NULL, &si));
    ck_assert_int_eq(si.rebindable, 0);
    ck_assert_msg(strstr(si.why, "not a pointer parameter"), "why: %s", si.why);
    TG_OK(tegraph_callable_slot(c, TEGRAPH_SLOT_OUTPUT, 0, NULL, &si));
    ck_assert_int_eq(si.rebindable, 1);
    te_poison_dev_nan(y, n);
    TG_OK(tegraph_callable_forward(c, &in, 1, NULL, NULL, 0, &out, 1, &o));
    TE_OK(te_stream_wait(te_stream, WAIT_MS));
    tgt_expect_same(y, x, n, "y = x through a hidden pointer");
    TG_OK(tegraph_callable_slot(c, TEGRAPH_SLOT_INPUT, 0, NULL, &si));
    ck_assert_int_eq(si.last_path, TEGRAPH_PATH_COPIED);
    TG_OK(tegraph_callable_destroy(c));
  }
  TE_OK(tecore_mem_free(x));
  TE_OK(tecore_mem_free(y));
  TE_OK(tecore_mem_free(y_ref));
  model_free(&m);
}
END_TEST

/* ---- side-stream replay ----------------------------------------------------------------- */

START_TEST(side_stream_replay) {
  size_t n = rand_n();
  struct model m;
  model_new(&m, n, 3.0f);
  struct descbuf b;
  desc_for(&b, &m, lin_fwd, NULL, NULL, 0, 0);
  tegraph_callable_t *c = NULL;
  TG_OK(tegraph_callable_create(&b.d, NULL, &c));
  tecore_stream_t side = NULL;
  tecore_event_t done = NULL;
  TE_OK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &side));
  TE_OK(tecore_event_create(TECORE_EVENT_DISABLE_TIMING, &done));
  uint32_t *flag = NULL;
  TE_OK(tecore_mem_alloc_host(64, (void **)&flag));
  tecore_devptr_t dflag = 0;
  TE_OK(tecore_mem_host_device_ptr(flag, &dflag));
  tecore_devptr_t x = te_dalloc(n * 4), xnew = tgt_rand_dev(n, -1, 1), y = te_dalloc(n * 4);
  tecore_devptr_t y_ref = te_dalloc(n * 4);
  TE_OK(tecore_fill(x, TECORE_DTYPE_F32, n, 7.0, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  for (int variant = 0; variant < 2; variant++) {
    *(volatile uint32_t *)flag = 0;
    te_poison_dev_nan(y, n);
    /* the caller's stream is held by a flag, then writes the new input */
    TE_OK(tecore_stream_wait_value32(te_stream, dflag, 1, TECORE_WAIT_GEQ));
    TE_OK(tecore_memcpy_async(x, xnew, n * 4, te_stream));
    struct tecore_tensor in = tgt_vec(x, n), out = tgt_vec(y, n);
    struct tegraph_replay_opts o = {.stream = te_stream, .replay_stream = side,
                                    .done = variant ? NULL : done, .is_first_microbatch = 1};
    TG_OK(tegraph_callable_forward(c, &in, 1, NULL, NULL, 0, &out, 1, &o));
    te_sleep_ms(30);
    if (!variant) ck_assert_int_eq(tecore_event_query(done), TECORE_ERR_NOT_READY);
    ck_assert_int_eq(tecore_stream_query(side), TECORE_ERR_NOT_READY);
    *(volatile uint32_t *)flag = 1;
    if (!variant) {
      /* the event marks the end of the replay on the side stream */
      for (int i = 0; i < 2000 && tecore_event_query(done) == TECORE_ERR_NOT_READY; i++)
        te_sleep_ms(5);
      TE_OK(tecore_event_query(done));
    } else {
      /* joined back: the caller's stream waits for the side stream */
      TE_OK(te_stream_wait(te_stream, WAIT_MS));
    }
    float *got = tgt_get(y, n);
    eager(&m, lin_fwd, xnew, NULL, 0, y_ref);
    TE_OK(te_stream_wait(te_stream, WAIT_MS));
    float *want = tgt_get(y_ref, n);
    te_expect_f32_bits(got, want, n, variant ? "y (joined back)" : "y (event)");
    free(got);
    free(want);
    TE_OK(tecore_fill(xnew, TECORE_DTYPE_F32, n, -2.5, te_stream));
  }
  TE_OK(tecore_stream_synchronize(side));
  TG_OK(tegraph_callable_destroy(c));
  TE_OK(tecore_stream_destroy(side));
  TE_OK(tecore_event_destroy(done));
  TE_OK(tecore_mem_free_host(flag));
  tecore_devptr_t fr[] = {x, xnew, y, y_ref};
  for (size_t i = 0; i < 4; i++) TE_OK(tecore_mem_free(fr[i]));
  model_free(&m);
}
END_TEST

/* ---- two callables, interleaved pipeline order ----------------------------------------- */

START_TEST(two_callables_interleaved) {
  size_t n = rand_n();
  struct model ma, mb;
  model_new(&ma, n, 2.0f);
  model_new(&mb, n, -0.5f);
  struct model ra = ma, rb = mb; /* eager twins with their own gradients */
  ra.g = te_dalloc(n * 4);
  rb.g = te_dalloc(n * 4);
  TE_OK(tecore_memset_d32_async(ra.g, 0, n, te_stream));
  TE_OK(tecore_memset_d32_async(rb.g, 0, n, te_stream));
  ma.split_dw = ra.split_dw = 1; /* a's weight gradient is delayed */
  struct tegraph_callable_desc d[2];
  struct descbuf ba, bb;
  desc_for(&ba, &ma, lin_fwd, lin_bwd, lin_dw, 0, 0);
  desc_for(&bb, &mb, lin_fwd, lin_bwd, NULL, 0, 0);
  ba.d.num_warmup = bb.d.num_warmup = 1;
  ba.d.post_warmup = bb.d.post_warmup = hook_post;
  d[0] = ba.d;
  d[1] = bb.d;
  /* a pipeline order: forward a, forward b, backward b, backward a, wgrad a */
  const struct tegraph_schedule_entry order[] = {{0, TEGRAPH_PASS_FORWARD},
                                                 {1, TEGRAPH_PASS_FORWARD},
                                                 {1, TEGRAPH_PASS_BACKWARD},
                                                 {0, TEGRAPH_PASS_BACKWARD},
                                                 {0, TEGRAPH_PASS_BACKWARD_DW}};
  tegraph_mempool_t *pool = NULL;
  TG_OK(tegraph_mempool_create(0, &pool));
  tegraph_callable_t *c[2] = {NULL, NULL};
  TG_OK(tegraph_callables_create(d, 2, order, 5, pool, c));
  int users = 0;
  size_t used = 0;
  TG_OK(tegraph_mempool_usage(pool, &used, NULL, &users));
  ck_assert_int_eq(users, 2);
  ck_assert_uint_ge(used, 4 * n * 4 + 4 * n * 4); /* x, y, gy, gx of each */
  TG_EXPECT(TEGRAPH_ERR_STATE, "destroy them first", tegraph_mempool_destroy(pool));
  tecore_devptr_t za = te_dalloc(n * 4), zb = te_dalloc(n * 4), ga = te_dalloc(n * 4);
  tecore_devptr_t gb = te_dalloc(n * 4);
  for (int mbi = 0; mbi < 3; mbi++) {
    tecore_devptr_t x = tgt_rand_dev(n, -1, 1), gz = tgt_rand_dev(n, -1, 1);
    struct tecore_tensor in = tgt_vec(x, n), ya = tgt_vec(0, n), yb = tgt_vec(0, n);
    struct tecore_tensor go = tgt_vec(gz, n), gia = tgt_vec(0, n), gib = tgt_vec(0, n);
    struct tegraph_replay_opts o = on_stream(1);
    /* z = b(a(x)): b's input is a's static output */
    TG_OK(tegraph_callable_forward(c[0], &in, 1, NULL, NULL, 0, &ya, 1, &o));
    TG_OK(tegraph_callable_forward(c[1], &ya, 1, NULL, NULL, 0, &yb, 1, &o));
    TG_OK(tegraph_callable_backward(c[1], &go, 1, &gib, 1, &o));
    TG_OK(tegraph_callable_backward(c[0], &gib, 1, &gia, 1, &o));
    TG_OK(tegraph_callable_backward_dw(c[0], &o));
    eager(&ra, lin_fwd, x, NULL, 0, za);
    eager(&rb, lin_fwd, za, NULL, 0, zb);
    eager_bwd(&rb, lin_bwd, za, gz, gb);
    eager_bwd(&ra, lin_bwd, x, gb, ga);
    eager_bwd(&ra, lin_dw, x, gb, ga);
    TE_OK(te_stream_wait(te_stream, WAIT_MS));
    tgt_expect_same(yb.data, zb, n, "z = b(a(x))");
    tgt_expect_same(gia.data, ga, n, "dz/dx");
    tgt_expect_same(ma.g, ra.g, n, "a's accumulated gradient");
    tgt_expect_same(mb.g, rb.g, n, "b's accumulated gradient");
    struct tegraph_slot_info si;
    /* a's static output is not b's buffer: b rebinds to it */
    TG_OK(tegraph_callable_slot(c[1], TEGRAPH_SLOT_INPUT, 0, NULL, &si));
    ck_assert_int_eq(si.last_path, TEGRAPH_PATH_REBOUND);
    TE_OK(tecore_mem_free(x));
    TE_OK(tecore_mem_free(gz));
  }
  TG_OK(tegraph_callable_destroy(c[0]));
  TG_OK(tegraph_callable_destroy(c[1]));
  TG_OK(tegraph_mempool_usage(pool, &used, NULL, &users));
  ck_assert_int_eq(users, 0);
  ck_assert_uint_eq(used, 0);
  TG_OK(tegraph_mempool_destroy(pool));
  tecore_devptr_t fr[] = {za, zb, ga, gb, ra.g, rb.g};
  for (size_t i = 0; i < 6; i++) TE_OK(tecore_mem_free(fr[i]));
  model_free(&ma);
  model_free(&mb);
}
END_TEST

/* ---- reset --------------------------------------------------------------------------------- */

START_TEST(reset_and_recapture) {
  size_t n = rand_n();
  struct model m;
  model_new(&m, n, 2.0f);
  struct descbuf b;
  desc_for(&b, &m, lin_fwd, lin_bwd, NULL, 0, 0);
  tegraph_callable_t *c = NULL;
  TG_OK(tegraph_callable_create(&b.d, NULL, &c));
  tecore_devptr_t x = tgt_rand_dev(n, -1, 1), y = te_dalloc(n * 4), y_ref = te_dalloc(n * 4);
  struct tecore_tensor in = tgt_vec(x, n), out = tgt_vec(0, n);
  struct tegraph_replay_opts o = on_stream(1);
  TG_OK(tegraph_callable_forward(c, &in, 1, NULL, NULL, 0, &out, 1, &o));
  struct tegraph_slot_info si;
  TG_OK(tegraph_callable_slot(c, TEGRAPH_SLOT_INPUT, 0, NULL, &si));
  ck_assert_uint_eq(si.bound, x);
  /* reset: the graphs read the static buffer again; backward needs a forward */
  TG_OK(tegraph_callable_reset(c, 0));
  TG_OK(tegraph_callable_slot(c, TEGRAPH_SLOT_INPUT, 0, NULL, &si));
  ck_assert_uint_eq(si.bound, si.tensor.data);
  ck_assert_int_eq(si.last_path, TEGRAPH_PATH_NONE);
  struct tecore_tensor go = tgt_vec(x, n);
  TG_EXPECT(TEGRAPH_ERR_STATE, "no forward",
            tegraph_callable_backward(c, &go, 1, NULL, 0, &o));
  /* the function changes (a new alpha): re-capture, updated in place */
  m.alpha = -4.0f;
  TG_OK(tegraph_callable_reset(c, TEGRAPH_RESET_RECAPTURE));
  ck_assert_int_eq(m.calls[0][TEGRAPH_PHASE_CAPTURE], 2);
  out = tgt_vec(y, n);
  te_poison_dev_nan(y, n);
  TG_OK(tegraph_callable_forward(c, &in, 1, NULL, NULL, 0, &out, 1, &o));
  eager(&m, lin_fwd, x, NULL, 0, y_ref);
  TE_OK(te_stream_wait(te_stream, WAIT_MS));
  tgt_expect_same(y, y_ref, n, "y after re-capture with a new alpha");
  TG_OK(tegraph_callable_slot(c, TEGRAPH_SLOT_INPUT, 0, NULL, &si));
  ck_assert_int_eq(si.last_path, TEGRAPH_PATH_REBOUND);
  TG_EXPECT(TEGRAPH_ERR_INVALID, "flags", tegraph_callable_reset(c, 0x10));
  TG_OK(tegraph_callable_destroy(c));
  TE_OK(tecore_mem_free(x));
  TE_OK(tecore_mem_free(y));
  TE_OK(tecore_mem_free(y_ref));
  model_free(&m);
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("graph_callable");
  TCase *tc = tgt_tcase(s, "results");
  tcase_add_test(tc, graphed_matches_eager);
  tcase_add_test(tc, zeroed_gradients_read_one);
  tcase_add_test(tc, keyword_tensors_checked);
  tc = tgt_tcase(s, "rebind");
  tcase_add_test(tc, rebinding_equals_copy);
  tcase_add_test(tc, rebind_sees_every_use);
  tcase_add_test(tc, creation_waits_for_queued_work);
  tc = tgt_tcase(s, "schedule");
  tcase_add_test(tc, side_stream_replay);
  tcase_add_test(tc, two_callables_interleaved);
  tcase_add_test(tc, reset_and_recapture);
  return s;
}

TE_TEST_MAIN(make_suite, TE_TEST_DEVICE)
