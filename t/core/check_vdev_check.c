/* SPDX-License-Identifier: Apache-2.0 */
/* check_vdev_check.c -- the driver's promises and the memory checker
 * (issue 9).  Frees do not release memory that queued work still uses
 * (mem_free, mem_free_host, vmm_unmap, delayed_state_free; these run on
 * both backends); destroying a stream blocked in a wait does not hang; on
 * vdev every launch, copy, memset and graph launch has its addresses
 * checked, and a bad one is a sticky TECORE_ERR_ILLEGAL_ADDRESS naming the
 * kernel, parameter and address, never a crash (TECORE_VDEV_CHECK=0 turns
 * it off); the device layer refuses what the driver refuses (grid x above
 * 2^31-1, shared memory above the device's limit, vmm_create above the
 * device's memory, free_va of a mapped range, bad kernel tables, wrapping
 * host registrations).  Each test is named after what broke. */
#include "tests.h"
#include <pthread.h>
#include <te/recipe.h>

/* ---- a stream held in a wait the host releases -------------------------------- */

struct gate {
  uint32_t *flag;                 /* pinned host word the stream waits on */
  int delay_ms;
  pthread_t thread;
};

static void *gate_opener(void *arg) {
  struct gate *g = arg;
  te_sleep_ms(g->delay_ms);
  __atomic_store_n(g->flag, 1u, __ATOMIC_RELEASE);
  return NULL;
}

/* Makes stream wait until the gate opens, delay_ms from now (a thread
 * opens it, so a free that blocks as cuMemFree does cannot deadlock). */
static void gate_close(struct gate *g, tecore_stream_t stream, int delay_ms) {
  void *h = NULL;
  TE_OK(tecore_mem_alloc_host(64, &h));
  g->flag = h;
  *g->flag = 0;
  g->delay_ms = delay_ms;
  TE_OK(tecore_stream_wait_value32(stream, te_hptr(g->flag), 1, TECORE_WAIT_GEQ));
  ck_assert_int_eq(pthread_create(&g->thread, NULL, gate_opener, g), 0);
}

static void gate_done(struct gate *g) {
  pthread_join(g->thread, NULL);
  TE_OK(tecore_mem_free_host(g->flag));
}

/* ---- (a) frees wait for the queued work ------------------------------------------ */

/* 64 MiB memset queued behind a closed gate, a copy of its tail queued
 * after it, then the free: the memset and the copy must still run on live
 * memory (the free returned at once and the worker wrote freed memory). */
START_TEST(test_vdev_free_waits_for_queued_memset) {
  size_t bytes = (size_t)64 << 20, tail = 4096;
  uint8_t v = (uint8_t)(1 + te_rand_below(254));
  tecore_devptr_t p = te_dalloc(bytes), q = te_dalloc(tail);
  te_poison_dev(q, tail);
  struct gate g;
  gate_close(&g, te_stream, 200);
  TE_OK(tecore_memset_d8_async(p, v, bytes, te_stream));
  TE_OK(tecore_memcpy_async(q, p + bytes - tail, tail, te_stream));
  TE_OK(tecore_mem_free(p));
  TE_OK(tecore_stream_synchronize(te_stream));
  gate_done(&g);
  unsigned char got[4096];
  te_d2h(got, q, tail);
  te_expect_bytes_eq(got, v, tail, "tail of the freed buffer copied after its memset");
  TE_OK(tecore_mem_free(q));
}
END_TEST

/* Pinned host memory copied to the device by queued work, freed before
 * the copy ran. */
START_TEST(test_vdev_free_host_waits_for_queued_copy) {
  size_t bytes = (size_t)8 << 20;
  void *h = NULL;
  TE_OK(tecore_mem_alloc_host(bytes, &h));
  unsigned char *want = malloc(bytes), *got = malloc(bytes);
  ck_assert_ptr_nonnull(want);
  ck_assert_ptr_nonnull(got);
  te_rand_bytes(want, bytes);
  memcpy(h, want, bytes);
  tecore_devptr_t d = te_dalloc(bytes);
  te_poison_dev(d, bytes);
  struct gate g;
  gate_close(&g, te_stream, 200);
  TE_OK(tecore_memcpy_async(d, te_hptr(h), bytes, te_stream));
  TE_OK(tecore_mem_free_host(h));
  TE_OK(tecore_stream_synchronize(te_stream));
  gate_done(&g);
  te_d2h(got, d, bytes);
  te_expect_mem_eq(got, want, bytes, "device copy of pinned memory freed while queued");
  TE_OK(tecore_mem_free(d));
  free(want);
  free(got);
}
END_TEST

/* vmm_unmap of a range a queued memset writes: the unmap waits for it. */
START_TEST(test_vdev_vmm_unmap_waits_for_queued_memset) {
  if (!te_props.vmm_supported) return;
  size_t g = 0;
  TE_OK(tecore_vmm_granularity(&g, 0));
  tecore_devptr_t va = 0, q = te_dalloc(4096);
  tecore_vmm_handle_t h = 0;
  TE_OK(tecore_vmm_reserve(g, 0, &va));
  TE_OK(tecore_vmm_create(g, 0, &h));
  TE_OK(tecore_vmm_map(va, g, h, 0));
  TE_OK(tecore_vmm_set_access(va, g, 0));
  uint32_t v = te_rand_u32() | 1u;
  te_poison_dev(q, 4096);
  struct gate gt;
  gate_close(&gt, te_stream, 200);
  TE_OK(tecore_memset_d32_async(va, v, g / 4, te_stream));
  TE_OK(tecore_memcpy_async(q, va + g - 4096, 4096, te_stream));
  TE_OK(tecore_vmm_unmap(va, g));
  TE_OK(tecore_stream_synchronize(te_stream));
  gate_done(&gt);
  uint32_t got[1024];
  te_d2h(got, q, sizeof got);
  for (int i = 0; i < 1024; i++)
    ck_assert_msg(got[i] == v, "word %d of the unmapped range's tail is 0x%08x, want 0x%08x", i,
                  got[i], v);
  TE_OK(tecore_vmm_release(h));
  TE_OK(tecore_vmm_free_va(va, g));
  TE_OK(tecore_mem_free(q));
}
END_TEST

/* tecore_delayed_state_free promises "after the work using it is done". */
START_TEST(test_delayed_state_free_waits_for_queued_work) {
  struct tecore_recipe r;
  TE_OK(tecore_recipe_init(&r, TECORE_RECIPE_DELAYED));
  struct tecore_delayed_state st;
  size_t count = 4096;
  TE_OK(tecore_delayed_state_create(&r, TECORE_FP8_ACTIVATION, count, te_stream, &st));
  tecore_devptr_t q = te_dalloc(count * 4);
  te_poison_dev(q, count * 4);
  uint32_t v = te_rand_u32() | 1u;
  struct gate g;
  gate_close(&g, te_stream, 200);
  TE_OK(tecore_memset_d32_async(st.amax, v, count, te_stream));
  TE_OK(tecore_memcpy_async(q, st.amax, count * 4, te_stream));
  TE_OK(tecore_delayed_state_free(&st));
  ck_assert_uint_eq(st.base, 0);
  TE_OK(tecore_stream_synchronize(te_stream));
  gate_done(&g);
  uint32_t *got = malloc(count * 4);
  ck_assert_ptr_nonnull(got);
  te_d2h(got, q, count * 4);
  for (size_t i = 0; i < count; i++)
    ck_assert_msg(got[i] == v, "amax word %zu is 0x%08x, want 0x%08x", i, got[i], v);
  free(got);
  TE_OK(tecore_mem_free(q));
}
END_TEST

/* Destroying a stream blocked in a wait that nobody will release returned
 * only after TECORE_VDEV_WAIT_TIMEOUT (60 s; forever with 0). */
START_TEST(test_stream_destroy_fails_pending_wait) {
  if (te_backend_kind != TECORE_BACKEND_VDEV) return; /* a GPU's wait stays on the device */
  tecore_stream_t s = NULL;
  TE_OK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  void *h = NULL;
  TE_OK(tecore_mem_alloc_host(64, &h));
  *(uint32_t *)h = 0;
  TE_OK(tecore_stream_wait_value32(s, te_hptr(h), 1, TECORE_WAIT_EQ));
  te_sleep_ms(50); /* the worker is in the wait */
  uint64_t t0 = 0, t1 = 0;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  t0 = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
  TE_OK(tecore_stream_destroy(s));
  clock_gettime(CLOCK_MONOTONIC, &ts);
  t1 = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
  ck_assert_msg(t1 - t0 < 5000, "stream_destroy took %llu ms", (unsigned long long)(t1 - t0));
  TE_EXPECT_INVALID(NULL, tecore_stream_synchronize(s)); /* the handle is gone */
  TE_OK(tecore_mem_free_host(h));
}
END_TEST

/* ---- (b) vdev checks every address ---------------------------------------------- */

static int vdev_only(void) { return te_backend_kind == TECORE_BACKEND_VDEV; }

/* A stream of the test's own: the error is sticky, and the fixture's
 * stream must stay clean for its teardown. */
static tecore_stream_t own_stream(void) {
  tecore_stream_t s = NULL;
  TE_OK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  return s;
}

/* The stream keeps the error: a later synchronize reports it too; then
 * it is destroyed (when it is not the legacy one). */
static void expect_sticky(tecore_stream_t s, const char *what) {
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, what, tecore_stream_synchronize(s));
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, what, tecore_stream_query(s));
  if (s) TE_OK(tecore_stream_destroy(s));
}

START_TEST(test_vdev_launch_null_pointer_param_is_illegal_address) {
  if (!vdev_only()) return;
  tecore_stream_t s = own_stream();
  int id = -1;
  TE_OK(tecore_kernel_find("te_fill", &id));
  void *dst = NULL;
  int dt = TECORE_DTYPE_F32;
  unsigned long long n = 1024;
  float v = 1.0f;
  void *args[] = {&dst, &dt, &n, &v};
  struct tecore_launch_cfg cfg = {.grid = {4, 1, 1}, .block = {256, 1, 1}};
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "te_fill, parameter 0, address 0x0",
                tecore_kernel_launch(id, &cfg, args, s));
  expect_sticky(s, "te_fill");
  /* a pointer inside no allocation, in a parameter that may be 0 elsewhere */
  tecore_stream_t s2 = NULL;
  TE_OK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s2));
  tecore_devptr_t p = te_dalloc(4096);
  TE_OK(tecore_mem_free(p));
  dst = (void *)(uintptr_t)p;
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "not allocated",
                tecore_kernel_launch(id, &cfg, args, s2));
  TE_OK(tecore_stream_destroy(s2));
}
END_TEST

START_TEST(test_vdev_memcpy_past_end_is_illegal_address) {
  if (!vdev_only()) return;
  tecore_stream_t s = own_stream();
  size_t n = 1000 + te_rand_below(4000);
  tecore_devptr_t a = te_dalloc(n), b = te_dalloc(2 * n);
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "past the end", tecore_memcpy(b, a, n + 1));
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "destination", tecore_memcpy(a + 1, b, n));
  /* the legacy stream keeps it */
  expect_sticky(NULL, "past the end");
  TE_OK(tecore_stream_destroy(s));
}
END_TEST

START_TEST(test_vdev_memcpy_from_freed_buffer_is_illegal_address) {
  if (!vdev_only()) return;
  tecore_stream_t s = own_stream();
  tecore_devptr_t a = te_dalloc(256), b = te_dalloc(256);
  TE_OK(tecore_mem_free(a));
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "source",
                tecore_memcpy_async(b, a, 256, s));
  expect_sticky(s, "not allocated");
}
END_TEST

START_TEST(test_vdev_memcpy_from_unallocated_address_is_illegal_address) {
  if (!vdev_only()) return;
  tecore_stream_t s = own_stream();
  tecore_devptr_t b = te_dalloc(256);
  /* the first page is never mapped */
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "neither allocated nor mapped",
                tecore_memcpy_async(b, (tecore_devptr_t)0x40, 64, s));
  expect_sticky(s, "0x40");
}
END_TEST

START_TEST(test_vdev_memset_size_max_is_illegal_address) {
  if (!vdev_only()) return;
  tecore_stream_t s = own_stream();
  tecore_devptr_t p = te_dalloc(4096);
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "memset",
                tecore_memset_d8_async(p, 0, SIZE_MAX, s));
  tecore_stream_t s2 = NULL;
  TE_OK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s2));
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "memset",
                tecore_memset_d32_async(p, 0, SIZE_MAX / 4, s2));
  TE_OK(tecore_stream_destroy(s2));
}
END_TEST

START_TEST(test_vdev_fill_larger_than_buffer_is_illegal_address) {
  if (!vdev_only()) return;
  tecore_stream_t s = own_stream();
  size_t n = 100 + te_rand_below(1000);
  tecore_devptr_t p = te_dalloc(n * 4);
  TE_OK(tecore_fill(p, TECORE_DTYPE_F32, n, 1.5, s));
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "dst",
                tecore_fill(p, TECORE_DTYPE_F32, n + 1, 1.5, s));
  TE_OK(tecore_stream_synchronize(s));
  float *got = malloc(n * 4);
  te_d2h(got, p, n * 4);
  for (size_t i = 0; i < n; i++) ck_assert_msg(got[i] == 1.5f, "element %zu is %g", i, got[i]);
  free(got);
  TE_OK(tecore_stream_destroy(s));
}
END_TEST

START_TEST(test_vdev_quantize_shape_larger_than_buffer_is_illegal_address) {
  if (!vdev_only()) return;
  tecore_stream_t s = own_stream();
  size_t rows = 16, cols = 64, shape[2] = {rows, cols};
  tecore_devptr_t in = te_dalloc(rows * cols * 4), q = te_dalloc(rows * cols),
                  scales = te_dalloc(16);
  te_poison_dev(in, rows * cols * 4);
  TE_OK(tecore_fill(in, TECORE_DTYPE_F32, rows * cols, 0.25, s));
  float one = 1.0f;
  te_h2d(scales, &one, 4);
  te_h2d(scales + 4, &one, 4);
  struct tecore_tensor ti, to;
  TE_OK(tecore_tensor_init(&ti, TECORE_DTYPE_F32, 2, shape, in));
  TE_OK(tecore_tensor_init(&to, TECORE_DTYPE_E4M3, 2, shape, q));
  to.scaling = TECORE_SCALING_DELAYED;
  to.scale = scales;
  to.scale_inv = scales + 4;
  TE_OK(tecore_quantize(&ti, &to, 0, s));
  TE_OK(tecore_stream_synchronize(s));
  size_t big[2] = {rows * 2, cols};
  TE_OK(tecore_tensor_init(&ti, TECORE_DTYPE_F32, 2, big, in));
  TE_OK(tecore_tensor_init(&to, TECORE_DTYPE_E4M3, 2, big, q));
  to.scaling = TECORE_SCALING_DELAYED;
  to.scale = scales;
  to.scale_inv = scales + 4;
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "past the end",
                tecore_quantize(&ti, &to, 0, s));
  /* a later launch on the thread is not blamed for it */
  TE_OK(tecore_fill(in, TECORE_DTYPE_F32, rows * cols, 0.5, s));
  TE_OK(tecore_stream_synchronize(s));
  TE_OK(tecore_stream_destroy(s));
}
END_TEST

/* Found by fuzz-api: tecore_scale_add checked its pointers' alignment
 * but not their extent, and the worker read past the end of a and b. */
START_TEST(test_vdev_scale_add_larger_than_buffer_is_illegal_address) {
  if (!vdev_only()) return;
  tecore_stream_t s = own_stream();
  size_t n = 100 + te_rand_below(1000);
  tecore_devptr_t d = te_dalloc(4 * n), a = te_dalloc(4 * n), b = te_dalloc(4 * n);
  float *x = malloc(4 * n), *got = malloc(4 * n);
  ck_assert_ptr_nonnull(x);
  ck_assert_ptr_nonnull(got);
  te_rand_floats(x, n, -2.0f, 2.0f);
  te_h2d(a, x, 4 * n);
  te_h2d(b, x, 4 * n);
  te_poison_dev(d, 4 * n);
  tecore_devptr_t big = te_dalloc(4 * (2 * n + 1));
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "a (0x",
                tecore_scale_add(big, a, 1.0f, b, 1.0f, TECORE_DTYPE_F32, 2 * n + 1, s));
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "dst",
                tecore_scale_add(d + 4, a, 1.0f, b, 1.0f, TECORE_DTYPE_F32, n, s));
  /* refused before queuing: the stream is clean, the right size works */
  TE_OK(tecore_scale_add(d, a, 0.5f, b, 1.5f, TECORE_DTYPE_F32, n, s));
  TE_OK(tecore_stream_synchronize(s));
  te_d2h(got, d, 4 * n);
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(got[i] == 0.5f * x[i] + 1.5f * x[i], "element %zu is %g, want %g", i,
                  (double)got[i], (double)(0.5f * x[i] + 1.5f * x[i]));
  free(x);
  free(got);
  TE_OK(tecore_stream_destroy(s));
}
END_TEST

/* Found by fuzz-api: a tensor whose byte count overflows (f32 [2^62][2])
 * skipped the extent check, and tecore_act_bwd queued a kernel that wrote
 * past its buffer (SEGV on the worker).  The descriptor check refuses it
 * now, on both backends. */
START_TEST(test_tensor_with_overflowing_bytes_is_refused) {
  tecore_stream_t s = own_stream();
  size_t shape[2] = {((size_t)1 << 62) + te_rand_below(16), 2};
  tecore_devptr_t a = te_dalloc(4096), b = te_dalloc(4096), c = te_dalloc(4096);
  struct tecore_tensor dy, x, dx;
  TE_OK(tecore_tensor_init(&dy, TECORE_DTYPE_F32, 2, shape, a));
  TE_OK(tecore_tensor_init(&x, TECORE_DTYPE_F32, 2, shape, b));
  TE_OK(tecore_tensor_init(&dx, TECORE_DTYPE_F32, 2, shape, c));
  TE_EXPECT_INVALID("dy: the shape's byte count overflows",
                    tecore_act_bwd(TECORE_ACT_SILU, &dy, &x, &dx, s));
  TE_EXPECT_INVALID("byte count overflows", tecore_act_fwd(TECORE_ACT_GELU, &x, &dx, 0, s));
  TE_OK(tecore_stream_synchronize(s));
  TE_OK(tecore_stream_destroy(s));
}
END_TEST

/* Found by fuzz-api: block and MXFP8 scale arrays had only their first
 * byte checked, so a scale_inv buffer too small for [rows][cdiv(cols,32)]
 * was written past. */
START_TEST(test_vdev_mxfp8_scale_inv_too_small_is_illegal_address) {
  if (!vdev_only()) return;
  tecore_stream_t s = own_stream();
  size_t rows = 64, cols = 64, shape[2] = {rows, cols};
  tecore_devptr_t in = te_dalloc(rows * cols * 4), q = te_dalloc(rows * cols),
                  sc = te_dalloc(4096);
  TE_OK(tecore_fill(in, TECORE_DTYPE_F32, rows * cols, 0.75, s));
  struct tecore_tensor ti, to;
  TE_OK(tecore_tensor_init(&ti, TECORE_DTYPE_F32, 2, shape, in));
  TE_OK(tecore_tensor_init(&to, TECORE_DTYPE_E4M3, 2, shape, q));
  to.scaling = TECORE_SCALING_MXFP8;
  to.scale_inv = sc + 4096 - rows * (cols / 32) + 1; /* one byte short */
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "out->scale_inv", tecore_quantize(&ti, &to, 0, s));
  to.scale_inv = sc + 4096 - rows * (cols / 32); /* just fits */
  TE_OK(tecore_quantize(&ti, &to, 0, s));
  TE_OK(tecore_stream_synchronize(s));
  uint8_t e[128];
  te_d2h(e, to.scale_inv, sizeof e);
  for (size_t i = 0; i < sizeof e; i++) /* 0.75 in blocks of 32: amax 0.75, E8M0 2^-8 (120) */
    ck_assert_msg(e[i] == e[0] && e[0] != 0, "scale %zu is %u, scale 0 is %u", i, e[i], e[0]);
  TE_OK(tecore_stream_destroy(s));
}
END_TEST

/* Found by fuzz-api: the norms' workspace, mu and rsigma were raw
 * pointers whose extent nothing checked; a short workspace was written
 * past by the backward's partial sums (SEGV on the worker). */
START_TEST(test_vdev_norm_short_workspace_is_illegal_address) {
  if (!vdev_only()) return;
  tecore_stream_t s = own_stream();
  size_t rows = 64 + te_rand_below(64), hidden = 32, shape[2] = {rows, hidden}, h1[1] = {hidden};
  size_t ws = 0;
  TE_OK(tecore_norm_bwd_workspace_size(TECORE_NORM_LAYERNORM, rows, hidden, &ws));
  tecore_devptr_t x = te_dalloc(rows * hidden * 4), y = te_dalloc(rows * hidden * 4),
                  g = te_dalloc(hidden * 4), b = te_dalloc(hidden * 4), dg = te_dalloc(hidden * 4),
                  db = te_dalloc(hidden * 4), mu = te_dalloc(rows * 4), rs = te_dalloc(rows * 4),
                  w = te_dalloc(ws), dx = te_dalloc(rows * hidden * 4),
                  small = te_dalloc(ws / 2 + 16); /* last: its declared size overlaps no buffer */
  TE_OK(tecore_fill(x, TECORE_DTYPE_F32, rows * hidden, 0.5, s));
  TE_OK(tecore_fill(g, TECORE_DTYPE_F32, hidden, 1.0, s));
  TE_OK(tecore_fill(b, TECORE_DTYPE_F32, hidden, 0.0, s));
  struct tecore_tensor tx, ty, tg, tb, tdg, tdb, tdx;
  TE_OK(tecore_tensor_init(&tdx, TECORE_DTYPE_F32, 2, shape, dx));
  TE_OK(tecore_tensor_init(&tx, TECORE_DTYPE_F32, 2, shape, x));
  TE_OK(tecore_tensor_init(&ty, TECORE_DTYPE_F32, 2, shape, y));
  TE_OK(tecore_tensor_init(&tg, TECORE_DTYPE_F32, 1, h1, g));
  TE_OK(tecore_tensor_init(&tb, TECORE_DTYPE_F32, 1, h1, b));
  TE_OK(tecore_tensor_init(&tdg, TECORE_DTYPE_F32, 1, h1, dg));
  TE_OK(tecore_tensor_init(&tdb, TECORE_DTYPE_F32, 1, h1, db));
  /* mu one float short */
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "mu",
                tecore_layernorm_fwd(&tx, &tg, &tb, 1e-5f, 0, &ty, mu + 4, rs, s));
  TE_OK(tecore_layernorm_fwd(&tx, &tg, &tb, 1e-5f, 0, &ty, mu, rs, s));
  /* dy = y */
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "workspace",
                tecore_layernorm_bwd(&ty, &tx, mu, rs, &tg, 0, &tdx, &tdg, &tdb, small, ws, s));
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "rsigma",
                tecore_rmsnorm_bwd(&ty, &tx, rs + 8, &tg, 0, &tdx, &tdg, w, ws, s));
  TE_OK(tecore_layernorm_bwd(&ty, &tx, mu, rs, &tg, 0, &tdx, &tdg, &tdb, w, ws, s));
  TE_OK(tecore_stream_synchronize(s)); /* nothing refused was queued: the stream is clean */
  TE_OK(tecore_stream_destroy(s));
}
END_TEST

/* Found by fuzz-api: a range ending exactly at 2^64 has an end of 0, and
 * the pageable-memory check took it for mapped without looking; the
 * worker's memset then ran at 0xfffffffffffff000. */
START_TEST(test_vdev_memset_ending_at_2_64_is_illegal_address) {
  if (!vdev_only()) return;
  tecore_stream_t s = own_stream();
  size_t n = 1 + te_rand_below(4096);
  tecore_devptr_t top = (tecore_devptr_t)0 - n;
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "neither allocated nor mapped",
                tecore_memset_d8_async(top, 0x5a, n, s));
  expect_sticky(s, "memset");
  s = own_stream();
  tecore_devptr_t d = te_dalloc(n);
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "source", tecore_memcpy_async(d, top, n, s));
  expect_sticky(s, "memcpy");
}
END_TEST

/* Found by fuzz-api: pinned host memory was heap memory, still mapped
 * after tecore_mem_free_host, so a copy through the stale pointer passed
 * the checks as pageable memory and wrote freed heap (ASan: use after
 * free on a stream worker). */
START_TEST(test_vdev_memcpy_to_freed_pinned_buffer_is_illegal_address) {
  if (!vdev_only()) return;
  tecore_stream_t s = own_stream();
  void *h = NULL;
  TE_OK(tecore_mem_alloc_host(4096, &h));
  tecore_devptr_t d = te_dalloc(64);
  TE_OK(tecore_memcpy_async(te_hptr(h), d, 64, s)); /* live: fine */
  TE_OK(tecore_stream_synchronize(s));
  TE_OK(tecore_mem_free_host(h));
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "not allocated",
                tecore_memcpy_async(te_hptr(h) + 1280, d, 8, s));
  expect_sticky(s, "destination");
}
END_TEST

/* Found by fuzz-api: a delayed-scaling state is plain data; with its count
 * raised after creation, tecore_delayed_update sent the kernel past the
 * allocation (a segfault on the stream worker). */
START_TEST(test_delayed_update_past_its_state_is_illegal_address) {
  if (!vdev_only()) return;
  struct tecore_recipe r;
  TE_OK(tecore_recipe_init(&r, TECORE_RECIPE_DELAYED));
  r.history_len = 1 + (int)te_rand_below(8);
  struct tecore_delayed_state st, bad;
  size_t count = 1 + te_rand_below(300);
  TE_OK(tecore_delayed_state_create(&r, TECORE_FP8_ACTIVATION, count, te_stream, &st));
  bad = st;
  bad.count = count * 4096;
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "st->", tecore_delayed_update(&r, &bad, te_stream));
  bad = st;
  bad.count = SIZE_MAX / 2;
  TE_EXPECT_INVALID("count", tecore_delayed_update(&r, &bad, te_stream));
  TE_OK(tecore_delayed_update(&r, &st, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  TE_OK(tecore_delayed_state_free(&st));
}
END_TEST

/* A captured memset whose buffer is freed before the graph launches. */
START_TEST(test_vdev_graph_node_at_freed_buffer_fails_launch) {
  if (!vdev_only()) return;
  tecore_stream_t s = own_stream();
  tecore_devptr_t b = te_dalloc(1 << 16);
  tecore_graph_t graph = NULL;
  tecore_graph_exec_t exec = NULL;
  TE_OK(tecore_stream_begin_capture(s, TECORE_CAPTURE_THREAD_LOCAL));
  TE_OK(tecore_memset_d8_async(b, 7, 1 << 16, s));
  TE_OK(tecore_stream_end_capture(s, &graph));
  TE_OK(tecore_graph_instantiate(&exec, graph));
  TE_OK(tecore_graph_launch(exec, s));
  TE_OK(tecore_stream_synchronize(s));
  TE_OK(tecore_mem_free(b));
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "graph node 0",
                tecore_graph_launch(exec, s));
  expect_sticky(s, "memset");
  TE_OK(tecore_graph_exec_destroy(exec));
  TE_OK(tecore_graph_destroy(graph));
}
END_TEST

/* TECORE_VDEV_CHECK=0: no checks (a copy one byte past the end of an
 * allocation, inside its page, runs); TECORE_VDEV_MEMCHECK=1 (CI's
 * sanitizer pass) would turn them on again. */
START_TEST(test_vdev_check_off_tunable_skips_checks) {
  setenv("TECORE_VDEV_CHECK", "0", 1);
  setenv("TECORE_VDEV_MEMCHECK", "0", 1);
  te_dev_setup();
  if (vdev_only()) {
    tecore_devptr_t a = te_dalloc(100), b = te_dalloc(200);
    TE_OK(tecore_memcpy(b, a, 101));
    TE_OK(tecore_stream_synchronize(NULL));
  }
  te_dev_teardown();
}
END_TEST

/* ---- (b) the device layer refuses what the driver refuses ----------------------- */

static void nop_kernel(const struct tecore_launch_cfg *cfg, void *const *args) {
  (void)cfg;
  (void)args;
}

START_TEST(test_kernel_register_rejects_duplicate_name) {
  static const struct tecore_kernel_def twice[] = {
      {.name = "te_test_twice", .vdev = nop_kernel},
      {.name = "te_test_twice", .vdev = nop_kernel}};
  static const struct tecore_kernel_table t1 = {.module = "t/twice", .count = 2, .kernels = twice};
  int id = -1;
  TE_EXPECT_INVALID("te_test_twice", tecore_kernel_table_register(&t1, &id));
  static const struct tecore_kernel_def fill[] = {{.name = "te_fill", .vdev = nop_kernel}};
  static const struct tecore_kernel_table t2 = {.module = "t/fill_again", .count = 1,
                                                .kernels = fill};
  TE_OK(tecore_init());
  TE_EXPECT_INVALID("already registered", tecore_kernel_table_register(&t2, &id));
}
END_TEST

START_TEST(test_kernel_register_rejects_4_byte_pointer) {
  static const struct tecore_kernel_def d[] = {
      {.name = "te_test_ptr4", .vdev = nop_kernel, .nparams = 1, .param_size = {4},
       .param_is_ptr = {1}}};
  static const struct tecore_kernel_table t = {.module = "t/ptr4", .count = 1, .kernels = d};
  int id = -1;
  TE_EXPECT_INVALID("pointer of 4 bytes", tecore_kernel_table_register(&t, &id));
}
END_TEST

START_TEST(test_kernel_register_rejects_kernel_without_code) {
  static const struct tecore_kernel_def d[] = {{.name = "te_test_nocode"}};
  static const struct tecore_kernel_table t = {.module = "t/nocode", .count = 1, .kernels = d};
  int id = -1;
  TE_EXPECT_INVALID("neither a vdev function nor a fatbin",
                    tecore_kernel_table_register(&t, &id));
}
END_TEST

START_TEST(test_launch_rejects_what_the_driver_rejects) {
  static const struct tecore_kernel_def d[] = {{.name = "te_test_limits", .vdev = nop_kernel}};
  static const struct tecore_kernel_table t = {.module = "t/limits", .count = 1, .kernels = d};
  int id = -1;
  TE_OK(tecore_kernel_table_register(&t, &id));
  struct tecore_launch_cfg cfg = {.grid = {0xffffffffu, 1, 1}, .block = {1, 1, 1}};
  TE_EXPECT_INVALID("grid x", tecore_kernel_launch(id, &cfg, NULL, te_stream));
  cfg.grid[0] = 1;
  cfg.shared_bytes = 1u << 30;
  TE_EXPECT_INVALID("shared memory", tecore_kernel_launch(id, &cfg, NULL, te_stream));
  cfg.shared_bytes = (unsigned)te_props.max_shared_per_block;
  if (vdev_only()) TE_OK(tecore_kernel_launch(id, &cfg, NULL, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
}
END_TEST

START_TEST(test_vmm_create_above_device_memory_fails) {
  if (!te_props.vmm_supported) return;
  tecore_vmm_handle_t h = 0;
  TE_EXPECT_FAIL(tecore_vmm_create((size_t)1 << 50, 0, &h));
  ck_assert_uint_eq(h, 0);
}
END_TEST

START_TEST(test_vmm_free_va_of_mapped_range_fails) {
  if (!te_props.vmm_supported) return;
  size_t g = 0;
  TE_OK(tecore_vmm_granularity(&g, 0));
  tecore_devptr_t va = 0;
  tecore_vmm_handle_t h = 0;
  TE_OK(tecore_vmm_reserve(2 * g, 0, &va));
  TE_OK(tecore_vmm_create(g, 0, &h));
  TE_OK(tecore_vmm_map(va + g, g, h, 0));
  TE_OK(tecore_vmm_set_access(va + g, g, 0));
  TE_EXPECT_FAIL(tecore_vmm_free_va(va, 2 * g));
  /* the mapping is intact */
  uint32_t v = te_rand_u32(), back = 0;
  te_h2d(va + g, &v, 4);
  te_d2h(&back, va + g, 4);
  ck_assert_uint_eq(back, v);
  TE_OK(tecore_vmm_unmap(va + g, g));
  TE_OK(tecore_vmm_release(h));
  TE_OK(tecore_vmm_free_va(va, 2 * g));
}
END_TEST

START_TEST(test_host_register_rejects_wrapping_and_twice) {
  size_t bytes = 3 * 4096;
  void *buf = NULL;
  ck_assert_int_eq(posix_memalign(&buf, 4096, bytes), 0);
  TE_EXPECT_FAIL(tecore_mem_host_register(buf, SIZE_MAX, 0));
  TE_EXPECT_FAIL(tecore_mem_host_register((void *)(UINTPTR_MAX - 4095), 8192, 0));
  TE_OK(tecore_mem_host_register(buf, bytes, 0));
  TE_EXPECT_FAIL(tecore_mem_host_register(buf, bytes, 0));
  TE_EXPECT_FAIL(tecore_mem_host_register((char *)buf + 4096, 4096, 0));
  tecore_devptr_t d = 0;
  TE_OK(tecore_mem_host_device_ptr((char *)buf + 5, &d));
  TE_OK(tecore_mem_host_unregister(buf));
  TE_EXPECT_FAIL(tecore_mem_host_unregister(buf));
  free(buf);
}
END_TEST

/* ---- a destroyed handle stays dead --------------------------------------------------
 * An object's handle is its address.  A new event that took a destroyed
 * one's memory made the stale handle name it: a second destroy of the
 * stale handle succeeded and freed another owner's event (a callable's,
 * fuzz-api found).  vdev keeps the memory of destroyed streams, events,
 * graphs and executables for the next 1024 destructions. */
START_TEST(test_vdev_destroyed_handle_names_no_new_object) {
  if (!vdev_only()) return; /* the driver reuses handles: its rule, not ours */
  /* 16 destroyed at once: more than malloc's per-size cache holds, so
   * without the quarantine the next creations take their memory */
  enum { N = 16 };
  tecore_event_t dead[N], ev[N];
  tecore_stream_t dead_s[N], st[N];
  for (int i = 0; i < N; i++) {
    TE_OK(tecore_event_create(TECORE_EVENT_DISABLE_TIMING, &dead[i]));
    TE_OK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &dead_s[i]));
  }
  for (int i = 0; i < N; i++) {
    TE_OK(tecore_event_destroy(dead[i]));
    TE_OK(tecore_stream_destroy(dead_s[i]));
  }
  for (int i = 0; i < N; i++) {
    TE_OK(tecore_event_create(TECORE_EVENT_DISABLE_TIMING, &ev[i]));
    TE_OK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &st[i]));
    for (int j = 0; j < N; j++) {
      ck_assert_msg(ev[i] != dead[j], "new event %d has destroyed event %d's handle", i, j);
      ck_assert_msg(st[i] != dead_s[j], "new stream %d has destroyed stream %d's handle", i, j);
    }
  }
  for (int j = 0; j < N; j++) {
    TE_EXPECT_FAIL(tecore_event_destroy(dead[j]));
    TE_EXPECT_FAIL(tecore_event_record(dead[j], NULL));
    TE_EXPECT_FAIL(tecore_stream_destroy(dead_s[j]));
  }
  for (int i = 0; i < N; i++) {
    TE_OK(tecore_event_destroy(ev[i]));
    TE_OK(tecore_stream_destroy(st[i]));
  }
}
END_TEST

/* ---- errors and logs take no NULL format ------------------------------------------ */

START_TEST(test_set_error_and_log_with_null_format) {
  tecore_set_error("x %d", 1);
  ck_assert_str_eq(tecore_last_error(), "x 1");
  tecore_set_error(NULL);
  ck_assert_str_eq(tecore_last_error(), "");
  tecore_log(TECORE_LOG_ERROR, TECORE_SUBSYS_INIT, __FILE__, __LINE__, NULL);
}
END_TEST

static Suite *vdev_check_suite(void) {
  Suite *s = suite_create("vdev_check");
  TCase *tc = te_tcase(s, "frees", 1);
  tcase_add_test(tc, test_vdev_free_waits_for_queued_memset);
  tcase_add_test(tc, test_vdev_free_host_waits_for_queued_copy);
  tcase_add_test(tc, test_vdev_vmm_unmap_waits_for_queued_memset);
  tcase_add_test(tc, test_delayed_state_free_waits_for_queued_work);
  tcase_add_test(tc, test_stream_destroy_fails_pending_wait);
  tc = te_tcase(s, "checks", 1);
  tcase_add_test(tc, test_vdev_launch_null_pointer_param_is_illegal_address);
  tcase_add_test(tc, test_vdev_memcpy_past_end_is_illegal_address);
  tcase_add_test(tc, test_vdev_memcpy_from_freed_buffer_is_illegal_address);
  tcase_add_test(tc, test_vdev_memcpy_from_unallocated_address_is_illegal_address);
  tcase_add_test(tc, test_vdev_memset_size_max_is_illegal_address);
  tcase_add_test(tc, test_vdev_fill_larger_than_buffer_is_illegal_address);
  tcase_add_test(tc, test_vdev_quantize_shape_larger_than_buffer_is_illegal_address);
  tcase_add_test(tc, test_vdev_graph_node_at_freed_buffer_fails_launch);
  tcase_add_test(tc, test_vdev_scale_add_larger_than_buffer_is_illegal_address);
  tcase_add_test(tc, test_vdev_memcpy_to_freed_pinned_buffer_is_illegal_address);
  tcase_add_test(tc, test_vdev_memset_ending_at_2_64_is_illegal_address);
  tcase_add_test(tc, test_tensor_with_overflowing_bytes_is_refused);
  tcase_add_test(tc, test_vdev_mxfp8_scale_inv_too_small_is_illegal_address);
  tcase_add_test(tc, test_vdev_norm_short_workspace_is_illegal_address);
  tcase_add_test(tc, test_delayed_update_past_its_state_is_illegal_address);
  tcase_add_test(tc, test_vdev_destroyed_handle_names_no_new_object);
  tc = te_tcase(s, "check_off", 0);
  tcase_add_test(tc, test_vdev_check_off_tunable_skips_checks);
  tc = te_tcase(s, "driver_limits", 1);
  tcase_add_test(tc, test_kernel_register_rejects_duplicate_name);
  tcase_add_test(tc, test_kernel_register_rejects_4_byte_pointer);
  tcase_add_test(tc, test_kernel_register_rejects_kernel_without_code);
  tcase_add_test(tc, test_launch_rejects_what_the_driver_rejects);
  tcase_add_test(tc, test_vmm_create_above_device_memory_fails);
  tcase_add_test(tc, test_vmm_free_va_of_mapped_range_fails);
  tcase_add_test(tc, test_host_register_rejects_wrapping_and_twice);
  tc = te_tcase(s, "messages", 0);
  tcase_add_test(tc, test_set_error_and_log_with_null_format);
  return s;
}

TE_TEST_MAIN(vdev_check_suite, TE_TEST_DEVICE)
