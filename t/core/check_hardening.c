/* SPDX-License-Identifier: Apache-2.0 */
/* check_hardening.c -- the public API's answers to bad input (issue 9):
 * calls that fail leave their objects and out-parameters as they were,
 * descriptors that overflow or wrap are refused, destroyed handles are
 * recognized, tunables and debug settings parse as documented.  Each test
 * is named after what broke (a crash, a leak, a silent acceptance). */
#include "check_graph_common.h"
#include <te/ops.h>
#include <te/recipe.h>

/* ---- sequences ------------------------------------------------------------------- */

static tecore_seq_t *small_seq(void) {
  struct tecore_seq_config cfg = {.rows = 8, .features = 16, .dtype = TECORE_DTYPE_F32,
                                  .seed = te_rand_u64()};
  tecore_seq_t *s = NULL;
  TE_OK(tecore_seq_create(&cfg, &s));
  struct tecore_op_desc lin = {.kind = TECORE_OP_LINEAR, .features = 32, .bias = 1};
  TE_OK(tecore_seq_add(s, &lin, NULL));
  TE_OK(tecore_seq_build(s, te_stream));
  return s;
}

/* A destroy refused during a global capture freed the object anyway (its
 * buffers leaked; a retry was a use after free). */
START_TEST(test_seq_destroy_during_capture_leaves_seq_intact) {
  tecore_seq_t *s = small_seq();
  size_t pb = 0, tb = 0, pb2 = 0, tb2 = 0;
  TE_OK(tecore_seq_memory(s, &pb, &tb));
  ck_assert_uint_gt(tb, 0);
  TE_OK(tecore_stream_begin_capture(te_stream, TECORE_CAPTURE_GLOBAL));
  TE_EXPECT_ERR(TECORE_ERR_CAPTURE, NULL, tecore_seq_destroy(s));
  tecore_graph_t g = NULL;
  TE_EXPECT_FAIL(tecore_stream_end_capture(te_stream, &g)); /* the capture was invalidated */
  TE_OK(tecore_seq_memory(s, &pb2, &tb2));
  ck_assert_uint_eq(pb2, pb);
  ck_assert_uint_eq(tb2, tb);
  TE_OK(tecore_seq_destroy(s));
}
END_TEST

/* A sequence used after destroy was read from freed memory. */
START_TEST(test_seq_use_after_destroy_is_invalid) {
  tecore_seq_t *s = small_seq();
  TE_OK(tecore_seq_destroy(s));
  size_t tb = 0;
  TE_EXPECT_INVALID("not a live sequence", tecore_seq_memory(s, NULL, &tb));
  tecore_dtype_t dt;
  TE_EXPECT_INVALID("not a live sequence", tecore_seq_dtype(s, &dt));
  TE_EXPECT_INVALID("not a live sequence", tecore_seq_zero_grad(s, te_stream));
  TE_EXPECT_INVALID("not a live sequence", tecore_seq_destroy(s));
  tecore_seq_t *fake = (tecore_seq_t *)&tb;
  TE_EXPECT_INVALID("not a live sequence", tecore_seq_build(fake, te_stream));
}
END_TEST

/* A registered kind whose shape function gave [2^40][2^40] was accepted. */
static tecore_result_t huge_shape(const struct tecore_op_desc *desc, struct tecore_op_shape *sh,
                                  void *ctx) {
  (void)desc;
  (void)ctx;
  sh->out_rows = (size_t)1 << 40;
  sh->out_features = (size_t)1 << 40;
  return TECORE_SUCCESS;
}

static tecore_result_t nop_exec(const struct tecore_seq_exec *x) {
  (void)x;
  return TECORE_SUCCESS;
}

START_TEST(test_op_kind_shape_overflow_is_refused) {
  struct tecore_op_kind_def def = {.name = "huge", .shape = huge_shape, .forward = nop_exec,
                                   .backward = nop_exec};
  int kind = TECORE_OP_USER_FIRST + (int)te_rand_below(8);
  TE_OK(tecore_ops_register_kind(kind, &def));
  struct tecore_seq_config cfg = {.rows = 4, .features = 8, .dtype = TECORE_DTYPE_F32};
  tecore_seq_t *s = NULL;
  TE_OK(tecore_seq_create(&cfg, &s));
  struct tecore_op_desc d = {.kind = kind};
  TE_EXPECT_INVALID("too large", tecore_seq_add(s, &d, NULL));
  TE_OK(tecore_seq_destroy(s));
  TE_OK(tecore_ops_register_kind(kind, NULL));
}
END_TEST

/* ---- memory pools and callables ----------------------------------------------------- */

START_TEST(test_mempool_use_after_destroy_is_invalid) {
  tegraph_mempool_t *p = NULL;
  TG_OK(tegraph_mempool_create(1 << 20, &p));
  tecore_devptr_t d = 0;
  TG_OK(tegraph_mempool_alloc(p, 4096, &d));
  TG_OK(tegraph_mempool_free(p, d));
  TG_OK(tegraph_mempool_destroy(p));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "not a live pool", tegraph_mempool_alloc(p, 64, &d));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "not a live pool", tegraph_mempool_destroy(p));
  size_t used = 0, reserved = 0;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "not a live pool", tegraph_mempool_usage(p, &used, &reserved, NULL));
}
END_TEST

/* chunk_bytes SIZE_MAX was rounded up to a chunk of 0 bytes. */
/* Found by fuzz-api: a destroy refused during a global capture (its
 * chunks cannot be freed then) freed the pool anyway; the next callable
 * that was given the pool locked a mutex in freed memory and hung. */
START_TEST(test_mempool_destroy_during_capture_leaves_pool_intact) {
  tegraph_mempool_t *p = NULL;
  TG_OK(tegraph_mempool_create(1 << 20, &p));
  tecore_devptr_t d = 0;
  size_t n = 64 + te_rand_below(4096);
  TG_OK(tegraph_mempool_alloc(p, n, &d));
  TE_OK(tecore_stream_begin_capture(te_stream, TECORE_CAPTURE_GLOBAL));
  TG_EXPECT(TEGRAPH_ERR_CAPTURE, "tegraph_mempool_destroy", tegraph_mempool_destroy(p));
  tecore_graph_t g = NULL;
  TE_EXPECT_FAIL(tecore_stream_end_capture(te_stream, &g)); /* the capture was invalidated */
  size_t used = 0, reserved = 0;
  TG_OK(tegraph_mempool_usage(p, &used, &reserved, NULL));
  ck_assert_uint_ge(used, n);
  ck_assert_uint_ge(reserved, (size_t)1 << 20);
  uint8_t v = (uint8_t)(1 + te_rand_below(255)), back[64];
  TE_OK(tecore_memset_d8_async(d, v, 64, te_stream)); /* the block is still memory */
  te_d2h(back, d, 64);
  te_expect_bytes_eq(back, v, 64, "a block of the pool a refused destroy left");
  TG_OK(tegraph_mempool_free(p, d));
  TG_OK(tegraph_mempool_destroy(p));
  /* and a destroyed pool given to a callable is refused, not read */
  struct tegraph_callable_desc desc;
  memset(&desc, 0, sizeof desc);
  tegraph_callable_t *c = NULL;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "not a live pool", tegraph_callable_create(&desc, p, &c));
}
END_TEST

START_TEST(test_mempool_create_size_max_is_refused) {
  tegraph_mempool_t *p = (tegraph_mempool_t *)&p;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "chunk_bytes", tegraph_mempool_create(SIZE_MAX, &p));
  ck_assert_ptr_null(p);
}
END_TEST

/* forward: out = in (f32) */
static tecore_result_t copy_fwd(void *user, tecore_stream_t stream, const struct tegraph_io *io) {
  (void)user;
  return tecore_memcpy_async(io->outputs[0].data, io->inputs[0].data,
                             tecore_tensor_numel(&io->inputs[0]) * 4, stream);
}

static struct tecore_tensor f32_1d(size_t n, tecore_devptr_t data) {
  struct tecore_tensor t;
  TE_OK(tecore_tensor_init(&t, TECORE_DTYPE_F32, 1, &n, data));
  return t;
}

static struct tegraph_callable_desc copy_desc(const struct tecore_tensor *in,
                                              const struct tecore_tensor *out) {
  return (struct tegraph_callable_desc){.forward = copy_fwd, .sample_inputs = in, .ninputs = 1,
                                        .outputs = out, .noutputs = 1,
                                        .capture_mode = TECORE_CAPTURE_THREAD_LOCAL};
}

/* forward on a stream of its own, not the one it is given */
static tecore_stream_t stray_stream;
static tecore_result_t stray_fwd(void *user, tecore_stream_t stream, const struct tegraph_io *io) {
  (void)user;
  (void)stream;
  return tecore_memcpy_async(io->outputs[0].data, io->inputs[0].data,
                             tecore_tensor_numel(&io->inputs[0]) * 4, stray_stream);
}

/* A forward that enqueued on an unrelated stream gave an empty graph while
 * its work ran eagerly during capture. */
/* A from_seq callable whose sequence was destroyed (its hold dropped
 * with tecore_seq_hold(seq, 0) first) replayed on the freed buffers and
 * returned success.  Now the replay is refused before anything runs (the
 * output keeps its poison), also when another held sequence is made
 * right after (it may take the old address), and destroying the callable
 * leaves that other sequence's hold alone. */
START_TEST(test_callable_forward_after_seq_destroyed_fails) {
  tecore_seq_t *s = small_seq();
  tecore_devptr_t x = te_dalloc(8 * 16 * 4), y = te_dalloc(8 * 32 * 4);
  float hx[8 * 16], hy[8 * 32];
  te_rand_floats(hx, 8 * 16, -1, 1);
  te_h2d(x, hx, sizeof hx);
  size_t shape[2] = {8, 16}, oshape[2] = {8, 32};
  struct tecore_tensor in, out;
  TE_OK(tecore_tensor_init(&in, TECORE_DTYPE_F32, 2, shape, x));
  TE_OK(tecore_tensor_init(&out, TECORE_DTYPE_F32, 2, oshape, y));
  struct tegraph_seq_callable_desc d = {.seq = s, .sample_input = &in,
                                        .capture_mode = TECORE_CAPTURE_THREAD_LOCAL};
  tegraph_callable_t *c = NULL;
  TG_OK(tegraph_callable_from_seq(&d, NULL, &c));
  struct tegraph_replay_opts o = {.stream = te_stream};
  te_poison_dev(y, sizeof hy);
  TG_OK(tegraph_callable_forward(c, &in, 1, NULL, NULL, 0, &out, 1, &o));
  TE_OK(tecore_stream_synchronize(te_stream));
  te_d2h(hy, y, sizeof hy);
  for (size_t i = 0; i < 8 * 32; i++) ck_assert_msg(isfinite(hy[i]), "y[%zu] = %g", i, hy[i]);
  TE_OK(tecore_seq_hold(s, 0));
  TE_OK(tecore_seq_destroy(s));
  te_poison_dev(y, sizeof hy);
  TG_EXPECT(TEGRAPH_ERR_STATE, "was destroyed",
            tegraph_callable_forward(c, &in, 1, NULL, NULL, 0, &out, 1, &o));
  tecore_seq_t *s2 = small_seq();
  TE_OK(tecore_seq_hold(s2, 1));
  TG_EXPECT(TEGRAPH_ERR_STATE, "was destroyed",
            tegraph_callable_forward(c, &in, 1, NULL, NULL, 0, &out, 1, &o));
  TE_OK(tecore_stream_synchronize(te_stream));
  uint32_t w;
  te_d2h(&w, y, 4);
  ck_assert_msg(w == 0xA5A5A5A5u, "a refused replay wrote the output (%#x)", w);
  TG_OK(tegraph_callable_destroy(c));
  TE_EXPECT_INVALID("held", tecore_seq_destroy(s2));   /* its hold is still its own */
  TE_OK(tecore_seq_hold(s2, 0));
  TE_OK(tecore_seq_destroy(s2));
  TE_OK(tecore_mem_free(x));
  TE_OK(tecore_mem_free(y));
}
END_TEST

START_TEST(test_callable_forward_on_unrelated_stream_is_refused) {
  TE_OK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &stray_stream));
  size_t n = 32;
  tecore_devptr_t x = te_dalloc(n * 4);
  TE_OK(tecore_fill(x, TECORE_DTYPE_F32, n, 1.0, te_stream));
  struct tecore_tensor in = f32_1d(n, x), out = f32_1d(n, 0);
  struct tegraph_callable_desc d = copy_desc(&in, &out);
  d.forward = stray_fwd;
  tegraph_callable_t *c = NULL;
  TG_EXPECT(TEGRAPH_ERR_CAPTURE, "captured nothing", tegraph_callable_create(&d, NULL, &c));
  ck_assert_ptr_null(c);
  TE_OK(tecore_stream_synchronize(stray_stream));
  TE_OK(tecore_stream_destroy(stray_stream));
}
END_TEST

START_TEST(test_callable_use_after_destroy_is_invalid) {
  size_t n = 64 + te_rand_below(64);
  tecore_devptr_t x = te_dalloc(n * 4), y = te_dalloc(n * 4);
  TE_OK(tecore_fill(x, TECORE_DTYPE_F32, n, 2.0, te_stream));
  struct tecore_tensor in = f32_1d(n, x), out = f32_1d(n, 0);
  struct tegraph_callable_desc d = copy_desc(&in, &out);
  tegraph_callable_t *c = NULL;
  TG_OK(tegraph_callable_create(&d, NULL, &c));
  struct tecore_tensor yo = f32_1d(n, y);
  struct tegraph_replay_opts o = {.stream = te_stream};
  TG_OK(tegraph_callable_forward(c, &in, 1, NULL, NULL, 0, &yo, 1, &o));
  TE_OK(tecore_stream_synchronize(te_stream));
  float *got = malloc(n * 4);
  te_d2h(got, y, n * 4);
  for (size_t i = 0; i < n; i++) ck_assert_msg(got[i] == 2.0f, "y[%zu] = %g", i, got[i]);
  free(got);
  TG_OK(tegraph_callable_destroy(c));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "not a live callable",
            tegraph_callable_forward(c, &in, 1, NULL, NULL, 0, &yo, 1, &o));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "not a live callable", tegraph_callable_destroy(c));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "not a live callable", tegraph_callable_reset(c, 0));
}
END_TEST

/* A sample of f32 [2^62 + 1]: its byte count wrapped, and the callable got
 * a 1.5 KiB buffer its forward wrote past. */
START_TEST(test_callable_create_rejects_wrapping_sample_bytes) {
  struct tecore_tensor in = f32_1d(1, 0), out = f32_1d(16, 0);
  in.shape[0] = ((size_t)1 << 62) + 1;
  struct tegraph_callable_desc d = copy_desc(&in, &out);
  tegraph_callable_t *c = NULL;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "overflows", tegraph_callable_create(&d, NULL, &c));
  ck_assert_ptr_null(c);
  in = f32_1d(16, 0);
  out.ndim = 2;
  out.shape[0] = out.shape[1] = (size_t)1 << 32;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "outputs[0]", tegraph_callable_create(&d, NULL, &c));
}
END_TEST

/* Misaligned sample data was accepted (and replay refused it later). */
START_TEST(test_callable_create_rejects_misaligned_sample_data) {
  tecore_devptr_t x = te_dalloc(4096);
  struct tecore_tensor in = f32_1d(16, x + 2), out = f32_1d(16, 0);
  struct tegraph_callable_desc d = copy_desc(&in, &out);
  tegraph_callable_t *c = NULL;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "aligned", tegraph_callable_create(&d, NULL, &c));
}
END_TEST

/* tegraph_callable_create's errors named tegraph_callables_create. */
START_TEST(test_callable_create_errors_name_callable_create) {
  struct tecore_tensor in = f32_1d(16, 0), out = f32_1d(16, 0);
  struct tegraph_callable_desc d = copy_desc(&in, &out);
  d.forward = NULL;
  tegraph_callable_t *c = NULL;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "tegraph_callable_create: ",
            tegraph_callable_create(&d, NULL, &c));
  ck_assert_msg(!strstr(tegraph_last_error(), "callables_create"), "detail: %s",
                tegraph_last_error());
}
END_TEST

/* The sequence of a from_seq callable could be destroyed under it (the
 * next replay read freed memory), and a second callable could share it. */
START_TEST(test_callable_from_seq_holds_its_sequence) {
  tecore_seq_t *s = small_seq();
  tecore_devptr_t x = te_dalloc(8 * 16 * 4);
  TE_OK(tecore_fill(x, TECORE_DTYPE_F32, 8 * 16, 0.5, te_stream));
  size_t shape[2] = {8, 16};
  struct tecore_tensor sample;
  TE_OK(tecore_tensor_init(&sample, TECORE_DTYPE_F32, 2, shape, x));
  struct tegraph_seq_callable_desc d = {.seq = s, .sample_input = &sample,
                                        .capture_mode = TECORE_CAPTURE_THREAD_LOCAL};
  tegraph_callable_t *c = NULL, *c2 = NULL;
  TG_OK(tegraph_callable_from_seq(&d, NULL, &c));
  TE_EXPECT_INVALID("held", tecore_seq_destroy(s));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "held", tegraph_callable_from_seq(&d, NULL, &c2));
  ck_assert_ptr_null(c2);
  TG_OK(tegraph_callable_destroy(c));
  TE_OK(tecore_seq_destroy(s));
}
END_TEST

/* ---- tensors and DLPack ------------------------------------------------------------ */

static DLTensor dl_f32(void *data, int ndim, int64_t *shape, int64_t *strides) {
  DLTensor dl;
  memset(&dl, 0, sizeof dl);
  dl.data = data;
  dl.device.device_type = kDLCUDA;
  dl.ndim = ndim;
  dl.dtype.code = kDLFloat;
  dl.dtype.bits = 32;
  dl.dtype.lanes = 1;
  dl.shape = shape;
  dl.strides = strides;
  return dl;
}

/* Shape {2^40, 2^40+1, 1}, strides {2^40+1, 1, 1}: a signed overflow in the
 * stride check (UBSan abort). */
START_TEST(test_from_dlpack_stride_overflow_is_refused) {
  tecore_devptr_t p = te_dalloc(256);
  int64_t shape[3] = {(int64_t)1 << 40, ((int64_t)1 << 40) + 1, 1};
  int64_t strides[3] = {((int64_t)1 << 40) + 1, 1, 1};
  DLTensor dl = dl_f32((void *)(uintptr_t)p, 3, shape, strides);
  struct tecore_tensor t, before;
  te_poison_host(&t, sizeof t);
  before = t;
  TE_EXPECT_INVALID("overflows", tecore_tensor_from_dlpack(&dl, &t));
  ck_assert_msg(memcmp(&t, &before, sizeof t) == 0, "a refused import changed *t");
  /* the same with the overflow in the strides only */
  int64_t shape2[2] = {(int64_t)1 << 32, (int64_t)1 << 31};
  int64_t strides2[2] = {(int64_t)1 << 31, 1};
  dl = dl_f32((void *)(uintptr_t)p, 2, shape2, strides2);
  TE_EXPECT_FAIL(tecore_tensor_from_dlpack(&dl, &t));
}
END_TEST

/* Found by fuzz-parse: f32 [2^59][16] has an element count that fits in
 * size_t and a byte count that does not; it was accepted. */
START_TEST(test_from_dlpack_byte_count_overflow_is_refused) {
  tecore_devptr_t p = te_dalloc(256);
  int64_t shape[2] = {((int64_t)1 << 59) + (int64_t)te_rand_below(1000), 16};
  DLTensor dl = dl_f32((void *)(uintptr_t)p, 2, shape, NULL);
  struct tecore_tensor t, before;
  te_poison_host(&t, sizeof t);
  before = t;
  TE_EXPECT_INVALID("byte count overflows", tecore_tensor_from_dlpack(&dl, &t));
  ck_assert_msg(memcmp(&t, &before, sizeof t) == 0, "a refused import changed *t");
  size_t s2[2] = {(size_t)shape[0], 16};
  TE_OK(tecore_tensor_init(&t, TECORE_DTYPE_F32, 2, s2, p));
  TE_EXPECT_INVALID("byte count overflows", tecore_tensor_validate(&t, 0));
  /* one byte per element fits */
  TE_OK(tecore_tensor_init(&t, TECORE_DTYPE_U8, 2, s2, p));
  TE_OK(tecore_tensor_validate(&t, 0));
}
END_TEST

START_TEST(test_from_dlpack_rejects_bad_device_ids) {
  tecore_devptr_t p = te_dalloc(256);
  int64_t shape[1] = {16};
  DLTensor dl = dl_f32((void *)(uintptr_t)p, 1, shape, NULL);
  struct tecore_tensor t;
  TE_OK(tecore_tensor_from_dlpack(&dl, &t));
  ck_assert_int_eq(t.device, 0);
  dl.device.device_id = -3;
  TE_EXPECT_INVALID("device_id", tecore_tensor_from_dlpack(&dl, &t));
  dl.device.device_id = 77;
  TE_EXPECT_INVALID("device 77", tecore_tensor_from_dlpack(&dl, &t));
}
END_TEST

START_TEST(test_from_dlpack_rejects_wrapping_data_offset) {
  int64_t shape[1] = {16};
  DLTensor dl = dl_f32((void *)(uintptr_t)0x10000, 1, shape, NULL);
  dl.byte_offset = UINT64_MAX - 0x100;
  struct tecore_tensor t;
  TE_EXPECT_INVALID("wraps", tecore_tensor_from_dlpack(&dl, &t));
}
END_TEST

START_TEST(test_to_dlpack_rejects_data_0) {
  size_t n = 8;
  struct tecore_tensor t;
  TE_OK(tecore_tensor_init(&t, TECORE_DTYPE_F32, 1, &n, 0));
  DLTensor dl;
  int64_t shape[8], strides[8];
  TE_EXPECT_INVALID("data is 0", tecore_tensor_to_dlpack(&t, 0, &dl, shape, strides));
  t.data = te_dalloc(64);
  TE_OK(tecore_tensor_to_dlpack(&t, 0, &dl, shape, strides));
  ck_assert_ptr_eq(dl.data, (void *)(uintptr_t)t.data);
}
END_TEST

/* Found by fuzz-parse: an empty tensor may have any other extents, and
 * tecore_tensor_to_dlpack multiplied them into int64 strides (a signed
 * overflow, UBSan abort). */
START_TEST(test_to_dlpack_stride_overflow_is_refused) {
  size_t shape[3] = {0, (size_t)1 << 31, ((size_t)1 << 60) + te_rand_below(1000)};
  struct tecore_tensor t;
  TE_OK(tecore_tensor_init(&t, TECORE_DTYPE_F32, 3, shape, 0));
  TE_OK(tecore_tensor_validate(&t, 0)); /* empty: a legal descriptor */
  DLTensor dl;
  int64_t sh[8], st[8], sh0[8], st0[8];
  te_poison_host(sh, sizeof sh);
  te_poison_host(st, sizeof st);
  memcpy(sh0, sh, sizeof sh);
  memcpy(st0, st, sizeof st);
  TE_EXPECT_INVALID("overflows int64", tecore_tensor_to_dlpack(&t, 0, &dl, sh, st));
  ck_assert_msg(!memcmp(sh, sh0, sizeof sh) && !memcmp(st, st0, sizeof st),
                "a refused export wrote into shape or strides");
  shape[2] = (size_t)INT64_MAX + 1;
  TE_OK(tecore_tensor_init(&t, TECORE_DTYPE_F32, 3, shape, 0));
  TE_EXPECT_INVALID("does not fit", tecore_tensor_to_dlpack(&t, 0, &dl, sh, st));
  /* the largest that fits is exported with its strides */
  size_t fit[3] = {0, (size_t)1 << 31, (size_t)1 << 31};
  TE_OK(tecore_tensor_init(&t, TECORE_DTYPE_F32, 3, fit, 0));
  TE_OK(tecore_tensor_to_dlpack(&t, 0, &dl, sh, st));
  ck_assert_int_eq(dl.ndim, 3);
  ck_assert_int_eq(st[2], 1);
  ck_assert_int_eq(st[1], (int64_t)1 << 31);
  ck_assert_int_eq(st[0], (int64_t)1 << 62);
  ck_assert_int_eq(sh[1], (int64_t)1 << 31);
}
END_TEST

START_TEST(test_tensor_validate_checks_device) {
  size_t n = 8;
  struct tecore_tensor t;
  TE_OK(tecore_tensor_init(&t, TECORE_DTYPE_F32, 1, &n, te_dalloc(64)));
  TE_OK(tecore_tensor_validate(&t, TECORE_TENSOR_ROWWISE));
  t.device = -1;
  TE_EXPECT_INVALID("device -1", tecore_tensor_validate(&t, TECORE_TENSOR_ROWWISE));
  int count = 0;
  TE_OK(tecore_device_count(&count));
  t.device = count;
  TE_EXPECT_INVALID("device", tecore_tensor_validate(&t, TECORE_TENSOR_ROWWISE));
}
END_TEST

/* st.amax += 1 made the update kernel read floats at an odd address. */
START_TEST(test_delayed_update_rejects_misaligned_state) {
  struct tecore_recipe r;
  TE_OK(tecore_recipe_init(&r, TECORE_RECIPE_DELAYED));
  struct tecore_delayed_state st, bad;
  TE_OK(tecore_delayed_state_create(&r, TECORE_FP8_ACTIVATION, 4, te_stream, &st));
  TE_OK(tecore_delayed_update(&r, &st, te_stream));
  bad = st;
  bad.amax += 1;
  TE_EXPECT_INVALID("amax", tecore_delayed_update(&r, &bad, te_stream));
  bad = st;
  bad.scale_inv += 2;
  TE_EXPECT_INVALID("scale_inv", tecore_delayed_update(&r, &bad, te_stream));
  bad = st;
  bad.history = 0;
  TE_EXPECT_INVALID("history", tecore_delayed_update(&r, &bad, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  TE_OK(tecore_delayed_state_free(&st));
}
END_TEST

/* ---- out-parameters of failed calls ----------------------------------------------- */

/* A failed instantiate set *exec to NULL, losing the caller's handle. */
START_TEST(test_graph_instantiate_failure_keeps_exec) {
  tecore_devptr_t b = te_dalloc(256);
  tecore_graph_t g = NULL;
  tecore_graph_exec_t x = NULL;
  TE_OK(tecore_stream_begin_capture(te_stream, TECORE_CAPTURE_THREAD_LOCAL));
  TE_OK(tecore_memset_d8_async(b, 1, 256, te_stream));
  TE_OK(tecore_stream_end_capture(te_stream, &g));
  TE_OK(tecore_graph_instantiate(&x, g));
  tecore_graph_exec_t keep = x;
  TE_OK(tecore_graph_destroy(g));
  TE_EXPECT_FAIL(tecore_graph_instantiate(&x, g)); /* a destroyed graph */
  ck_assert_ptr_eq(x, keep);
  TE_EXPECT_FAIL(tecore_graph_instantiate_with_flags(&x, g, 0, NULL));
  ck_assert_ptr_eq(x, keep);
  TE_OK(tecore_graph_launch(x, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  TE_OK(tecore_graph_exec_destroy(x));
  tecore_stream_t s = (tecore_stream_t)&keep;
  TE_EXPECT_FAIL(tecore_stream_create(0, 99, &s));
  ck_assert_ptr_eq(s, (tecore_stream_t)&keep);
}
END_TEST

/* tecore_graph_nodes zeroed all max entries (max * sizeof could overflow,
 * and a max larger than the array was a buffer overrun). */
START_TEST(test_graph_nodes_touches_only_described_entries) {
  tecore_devptr_t b = te_dalloc(256);
  tecore_graph_t g = NULL;
  TE_OK(tecore_stream_begin_capture(te_stream, TECORE_CAPTURE_THREAD_LOCAL));
  TE_OK(tecore_memset_d8_async(b, 1, 256, te_stream));
  TE_OK(tecore_memset_d8_async(b, 2, 128, te_stream));
  TE_OK(tecore_stream_end_capture(te_stream, &g));
  struct tecore_graph_node_desc nodes[4], want;
  te_poison_host(nodes, sizeof nodes);
  te_poison_host(&want, sizeof want);
  size_t count = 0;
  TE_OK(tecore_graph_nodes(g, nodes, SIZE_MAX / 2, &count));
  ck_assert_uint_eq(count, 2);
  ck_assert_int_eq(nodes[0].type, TECORE_GRAPH_NODE_MEMSET);
  ck_assert_int_eq(nodes[1].type, TECORE_GRAPH_NODE_MEMSET);
  te_expect_mem_eq(&nodes[2], &want, sizeof want, "nodes[2], past the count");
  te_expect_mem_eq(&nodes[3], &want, sizeof want, "nodes[3], past the count");
  TE_OK(tecore_graph_destroy(g));
  count = 77;
  TE_EXPECT_FAIL(tecore_graph_nodes(g, nodes, 4, &count));
  ck_assert_uint_eq(count, 77);
}
END_TEST

/* ---- aliasing ----------------------------------------------------------------------- */

/* An FP8 output [rows][cols] with delayed scaling over fresh buffers. */
static struct tecore_tensor fp8_out(size_t rows, size_t cols) {
  size_t shape[2] = {rows, cols};
  struct tecore_tensor t;
  TE_OK(tecore_tensor_init(&t, TECORE_DTYPE_E4M3, 2, shape, te_dalloc(rows * cols)));
  tecore_devptr_t sc = te_dalloc(16);
  float one = 1.0f;
  te_h2d(sc, &one, 4);
  t.scaling = TECORE_SCALING_DELAYED;
  t.scale = sc;
  t.scale_inv = sc + 4;
  t.amax = sc + 8;
  return t;
}

/* Quantize and dequantize with in/out overlapping, amax inside the input,
 * scale == scale_inv, and quantize_multi outputs in one buffer were
 * accepted. */
START_TEST(test_quantize_aliasing_is_refused) {
  size_t rows = 8, cols = 64, shape[2] = {rows, cols};
  tecore_devptr_t x = te_dalloc(rows * cols * 4);
  TE_OK(tecore_fill(x, TECORE_DTYPE_F32, rows * cols, 0.5, te_stream));
  struct tecore_tensor in, out = fp8_out(rows, cols), bad;
  TE_OK(tecore_tensor_init(&in, TECORE_DTYPE_F32, 2, shape, x));
  TE_OK(tecore_quantize(&in, &out, 0, te_stream));
  bad = out;
  bad.data = x + 64; /* the output inside the input */
  TE_EXPECT_INVALID("out->data overlaps in->data", tecore_quantize(&in, &bad, 0, te_stream));
  bad = out;
  bad.amax = x + 4 * (te_rand_below(rows * cols));
  TE_EXPECT_INVALID("out->amax overlaps in->data", tecore_quantize(&in, &bad, 0, te_stream));
  bad = out;
  bad.scale_inv = bad.scale;
  TE_EXPECT_INVALID("out->scale_inv overlaps out->scale", tecore_quantize(&in, &bad, 0, te_stream));
  tecore_devptr_t amax = te_dalloc(4);
  TE_OK(tecore_amax(&in, amax, 0, 0, te_stream));
  TE_EXPECT_INVALID("amax overlaps in->data", tecore_amax(&in, x + 8, 0, 0, te_stream));
  /* dequantize into the FP8 input's own bytes */
  struct tecore_tensor back;
  TE_OK(tecore_tensor_init(&back, TECORE_DTYPE_F32, 2, shape, te_dalloc(rows * cols * 4)));
  TE_OK(tecore_dequantize(&out, &back, te_stream));
  struct tecore_tensor back_bad = back;
  back_bad.data = out.scale_inv; /* written over the scale inverse it reads */
  /* it overlaps in->scale_inv and runs past that 16-byte allocation: the
   * message names the latter, the more basic fault, and out->data either way */
  TE_EXPECT_INVALID("out->data",
                    tecore_dequantize(&out, &back_bad, te_stream));
  /* quantize_multi: two outputs' data in one buffer */
  struct tecore_tensor ins[2] = {in, in}, outs[2] = {out, fp8_out(rows, cols)};
  TE_OK(tecore_quantize_multi(ins, outs, 2, 0, te_stream));
  /* both in one buffer with room for each, so that they only overlap
   * (outs[0]'s own buffer has no room for a second output 16 bytes in:
   * that would run past its allocation, a fault found first) */
  tecore_devptr_t both = te_dalloc(2 * rows * cols);
  outs[0].data = both;
  outs[1].data = both + 16;
  TE_EXPECT_INVALID("out[1]->data overlaps out[0]->data",
                    tecore_quantize_multi(ins, outs, 2, 0, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
}
END_TEST

/* tecore_tensor_validate compared the device ordinal with the count only
 * once a backend was up: device 99 passed when validation came first (this
 * tcase has no device fixture: no backend is up when the test starts). */
START_TEST(test_tensor_validate_device_before_backend) {
  size_t n = 8;
  struct tecore_tensor t;
  TE_OK(tecore_tensor_init(&t, TECORE_DTYPE_F32, 1, &n, 0x100000));
  t.device = 99;
  tecore_result_t r = tecore_tensor_validate(&t, TECORE_TENSOR_ROWWISE);
  char msg[512];
  snprintf(msg, sizeof msg, "%s", tecore_last_error());
  int count = 0;
  if (tecore_device_count(&count) != TECORE_SUCCESS) return;   /* no backend: no count */
  ck_assert_msg(r == TECORE_ERR_INVALID && strstr(msg, "device 99"), "device 99 of %d: %s (%s)",
                count, tecore_result_name(r), msg);
  t.device = 0;
  TE_OK(tecore_tensor_validate(&t, TECORE_TENSOR_ROWWISE));
}
END_TEST

static Suite *hardening_suite(void) {
  Suite *s = suite_create("hardening");
  TCase *tc = te_tcase(s, "seq", 1);
  tcase_add_test(tc, test_seq_destroy_during_capture_leaves_seq_intact);
  tcase_add_test(tc, test_seq_use_after_destroy_is_invalid);
  tcase_add_test(tc, test_op_kind_shape_overflow_is_refused);
  tc = te_tcase(s, "tegraph", 1);
  tcase_add_test(tc, test_mempool_use_after_destroy_is_invalid);
  tcase_add_test(tc, test_mempool_create_size_max_is_refused);
  tcase_add_test(tc, test_mempool_destroy_during_capture_leaves_pool_intact);
  tcase_add_test(tc, test_callable_use_after_destroy_is_invalid);
  tcase_add_test(tc, test_callable_create_rejects_wrapping_sample_bytes);
  tcase_add_test(tc, test_callable_create_rejects_misaligned_sample_data);
  tcase_add_test(tc, test_callable_create_errors_name_callable_create);
  tcase_add_test(tc, test_callable_from_seq_holds_its_sequence);
  tcase_add_test(tc, test_callable_forward_on_unrelated_stream_is_refused);
  tcase_add_test(tc, test_callable_forward_after_seq_destroyed_fails);
  tc = te_tcase(s, "tensors", 1);
  tcase_add_test(tc, test_from_dlpack_stride_overflow_is_refused);
  tcase_add_test(tc, test_from_dlpack_byte_count_overflow_is_refused);
  tcase_add_test(tc, test_from_dlpack_rejects_bad_device_ids);
  tcase_add_test(tc, test_from_dlpack_rejects_wrapping_data_offset);
  tcase_add_test(tc, test_to_dlpack_rejects_data_0);
  tcase_add_test(tc, test_to_dlpack_stride_overflow_is_refused);
  tcase_add_test(tc, test_tensor_validate_checks_device);
  tcase_add_test(tc, test_delayed_update_rejects_misaligned_state);
  tc = te_tcase(s, "cold", 0);
  tcase_add_test(tc, test_tensor_validate_device_before_backend);
  tc = te_tcase(s, "aliasing", 1);
  tcase_add_test(tc, test_quantize_aliasing_is_refused);
  tc = te_tcase(s, "out_params", 1);
  tcase_add_test(tc, test_graph_instantiate_failure_keeps_exec);
  tcase_add_test(tc, test_graph_nodes_touches_only_described_entries);
  return s;
}

TE_TEST_MAIN(hardening_suite, TE_TEST_DEVICE)
