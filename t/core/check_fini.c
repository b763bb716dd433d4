/* SPDX-License-Identifier: Apache-2.0
 * check_fini.c -- tecore_fini (te/device.h): it joins the library's threads
 * (vdev stream workers, the legacy default stream's, the service engine's)
 * -- counted in /proc/self/task -- even for streams the program never
 * destroyed, after running what was queued on them; it runs the hooks of
 * tecore_fini_register last registered first (libtegraph's among them)
 * while the device still works; afterwards device calls return
 * TECORE_ERR_NOT_INITIALIZED and start nothing, host-only calls still
 * work, pinned host memory the program did not free stays its own, and a
 * second tecore_fini is harmless.
 *
 * tecore_fini ends libtecore for the whole process, so every test runs
 * in a child of its own (Check's fork mode, the default); under CK_FORK=no
 * the tests say so and do nothing.  Under cuda the streams are the
 * driver's and the driver keeps threads of its own, so the stream test
 * checks the queued work only, and the engine test counts from after
 * tecore_init. */
#include "tests.h"
#include <dirent.h>
#include <te/graph.h>

/* Threads of this process. */
static int thread_count(void) {
  DIR *d = opendir("/proc/self/task");
  ck_assert_msg(d != NULL, "opendir /proc/self/task: %s", strerror(errno));
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

#define NEED_FORK()                                                            \
  do {                                                                         \
    if (!te_test_forking) {                                                    \
      printf("# %s: needs CK_FORK=yes (tecore_fini ends the process's library)\n", __func__); \
      return;                                                                  \
    }                                                                          \
  } while (0)

static int on_vdev(void) {
  tecore_backend_t b = TECORE_BACKEND_NONE;
  TE_OK(tecore_backend(&b));
  return b == TECORE_BACKEND_VDEV;
}

START_TEST(fini_joins_stream_workers_left_running) {
  NEED_FORK();
  int base = thread_count();
  TE_OK(tecore_init());
  int vdev = on_vdev();
  tecore_stream_t s[3];
  for (int i = 0; i < 3; i++) TE_OK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s[i]));
  /* work still queued on a stream nobody destroys: a fill, then a copy back */
  size_t n = 1 << 16;
  tecore_devptr_t d;
  TE_OK(tecore_mem_alloc(n * 4, &d));
  float *h = NULL;
  TE_OK(tecore_mem_alloc_host(n * 4, (void **)&h));
  te_poison_host_nan(h, n);
  float v = te_rand_float(1.0f, 2.0f);
  TE_OK(tecore_fill(d, TECORE_DTYPE_F32, n, v, s[1]));
  TE_OK(tecore_memcpy_async(te_hptr(h), d, n * 4, s[1]));
  tecore_devptr_t d2;
  TE_OK(tecore_mem_alloc(4096, &d2));
  TE_OK(tecore_memset_d8_async(d2, 0, 4096, NULL));   /* the legacy stream's worker */
  TE_OK(tecore_stream_destroy(s[0]));
  int during = thread_count();
  ck_assert_msg(!vdev || during > base, "no worker threads seen (%d before, %d after)", base,
                during);
  TE_OK(tecore_fini());
  if (vdev) ck_assert_int_eq(thread_count(), base);
  for (size_t i = 0; i < n; i++)   /* queued work ran before the join */
    ck_assert_msg(h[i] == v, "h[%zu] = %g, want %g: fini dropped queued work", i, (double)h[i],
                  (double)v);
  /* h stays mapped and the program's (tecore_fini(3)): tecore_mem_free_host
   * no longer works and free(3) is not for it; the child exits with it. */
}
END_TEST

/* vdev's tecore_fini unmapped its whole arena, pinned host memory with it,
 * so reading what the last copies wrote there crashed.  Pinned buffers
 * between device ones (whose pages go), one freed before: the live ones
 * keep the bytes the queued copies wrote and stay writable. */
START_TEST(pinned_host_memory_survives_fini) {
  NEED_FORK();
  TE_OK(tecore_init());
  tecore_stream_t s;
  TE_OK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  enum { NB = 4 };
  size_t n = 3000 + te_rand_u32() % 5000;   /* not a whole number of pages */
  float *h[NB], *gone = NULL, src[NB];
  tecore_devptr_t d[NB];
  for (int b = 0; b < NB; b++) {
    TE_OK(tecore_mem_alloc(n * 4, &d[b]));
    TE_OK(tecore_mem_alloc_host(n * 4, (void **)&h[b]));
    if (b == 1) {
      gone = h[b];
      TE_OK(tecore_mem_alloc_host(n * 4, (void **)&h[b]));
    }
    te_poison_host_nan(h[b], n);
    src[b] = te_rand_float(-4.0f, 4.0f);
    TE_OK(tecore_fill(d[b], TECORE_DTYPE_F32, n, src[b], s));
    TE_OK(tecore_memcpy_async(te_hptr(h[b]), d[b], n * 4, s));
  }
  TE_OK(tecore_mem_free_host(gone));
  TE_OK(tecore_fini());
  for (int b = 0; b < NB; b++)
    for (size_t i = 0; i < n; i++) {
      ck_assert_msg(h[b][i] == src[b], "buffer %d: h[%zu] = %g, want %g", b, i, (double)h[b][i],
                    (double)src[b]);
      h[b][i] = -src[b];   /* still writable */
    }
}
END_TEST

static tecore_result_t nothing(void *arg) {
  (void)arg;
  return TECORE_SUCCESS;
}

START_TEST(fini_joins_the_service_engine) {
  NEED_FORK();
  struct tecore_svc_stats st;
  struct tecore_svc_op op = {.kind = TECORE_SVC_CALL, .fn = nothing, .name = "nothing"};
  tecore_svc_job_t *job = NULL;
  TE_OK(tecore_init());
  int base = thread_count();
  tecore_result_t r = tecore_svc_job_create(&op, 1, &job);
  if (r != TECORE_SUCCESS) {
    printf("# no service engine here (%s): %s\n", tecore_result_name(r), tecore_last_error());
    TE_OK(tecore_fini());
    ck_assert_int_eq(thread_count(), base);
    return;
  }
  TE_OK(tecore_svc_get_stats(&st));
  ck_assert_int_eq(st.running, 1);
  /* on cuda the driver starts threads of its own (host callbacks), which
   * are not libte's to join: the count is checked on vdev (asked before
   * fini: after it tecore_backend says NOT_INITIALIZED) */
  int vdev = on_vdev();
  TE_OK(tecore_fini());   /* the job is still there: the engine stops anyway */
  if (vdev) ck_assert_int_eq(thread_count(), base);
  TE_OK(tecore_svc_get_stats(&st));
  ck_assert_int_eq(st.running, 0);
  tecore_svc_job_t *again = NULL;
  TE_EXPECT_ERR(TECORE_ERR_NOT_INITIALIZED, "tecore_fini", tecore_svc_job_create(&op, 1, &again));
  if (vdev) ck_assert_int_eq(thread_count(), base);
}
END_TEST

START_TEST(after_fini_device_calls_fail_and_host_calls_work) {
  NEED_FORK();
  TE_OK(tecore_init());
  TE_OK(tecore_fini());
  TE_OK(tecore_fini());   /* twice: harmless */
  tecore_stream_t s = NULL;
  tecore_devptr_t d = 0;
  int count = -1;
  TE_EXPECT_ERR(TECORE_ERR_NOT_INITIALIZED, "tecore_fini", tecore_init());
  TE_EXPECT_ERR(TECORE_ERR_NOT_INITIALIZED, "tecore_fini", tecore_device_count(&count));
  TE_EXPECT_ERR(TECORE_ERR_NOT_INITIALIZED, "tecore_fini",
                tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  TE_EXPECT_ERR(TECORE_ERR_NOT_INITIALIZED, "tecore_fini", tecore_mem_alloc(256, &d));
  ck_assert_ptr_null(s);
  ck_assert_uint_eq(d, 0);
  /* libtegraph over a finished libtecore: whatever needs the device fails */
  tegraph_mempool_t *pool = NULL;
  tecore_devptr_t pd = 0;
  tegraph_result_t gr = tegraph_mempool_create(1 << 20, &pool);
  if (gr == TEGRAPH_SUCCESS) {
    gr = tegraph_mempool_alloc(pool, 4096, &pd);
    (void)tegraph_mempool_destroy(pool);
  }
  ck_assert_int_ne(gr, TEGRAPH_SUCCESS);
  ck_assert_msg(strstr(tegraph_last_error(), "tecore_fini"), "detail: %s", tegraph_last_error());
  /* host-only calls */
  float x = te_rand_float(-100.0f, 100.0f);
  ck_assert_float_eq(tecore_bf16_to_f32(tecore_f32_to_bf16(1.5f)), 1.5f);
  uint8_t q;
  TE_OK(tecore_cvt_f32_to_e4m3(&x, &q, 1));
  ck_assert_uint_eq(q, tecore_f32_to_e4m3(x));
  ck_assert_str_eq(tecore_dtype_name(TECORE_DTYPE_BF16), "bf16");
  int nt = 0;
  TE_OK(tecore_tunable_count(&nt));
  ck_assert_int_gt(nt, 0);
  struct tecore_tunable_info ti;
  TE_OK(tecore_tunable_find("TE_DEVICE", &ti));
  ck_assert_ptr_nonnull(ti.value_str);
}
END_TEST

START_TEST(fini_before_any_init) {
  NEED_FORK();
  int base = thread_count();
  TE_OK(tecore_fini());
  TE_EXPECT_ERR(TECORE_ERR_NOT_INITIALIZED, "tecore_fini", tecore_init());
  ck_assert_int_eq(thread_count(), base);   /* nothing was started */
}
END_TEST

/* ---- hooks ---- */
static int order[8], norder;
static int device_ok_in_hook;
static void hook(void *arg) {
  order[norder++] = (int)(intptr_t)arg;
  int n = 0;
  device_ok_in_hook += tecore_device_count(&n) == TECORE_SUCCESS && n > 0;
}

START_TEST(hooks_run_last_first_while_the_device_works) {
  NEED_FORK();
  TE_EXPECT_INVALID("fn", tecore_fini_register(NULL, NULL));
  TE_OK(tecore_fini_register(hook, (void *)(intptr_t)1));
  TE_OK(tecore_fini_register(hook, (void *)(intptr_t)2));
  TE_OK(tecore_fini_register(hook, (void *)(intptr_t)2));   /* the same twice: once */
  TE_OK(tecore_fini_register(hook, (void *)(intptr_t)3));
  TE_OK(tecore_init());
  TE_OK(tecore_fini());
  ck_assert_int_eq(norder, 3);
  ck_assert_int_eq(order[0], 3);
  ck_assert_int_eq(order[1], 2);
  ck_assert_int_eq(order[2], 1);
  ck_assert_int_eq(device_ok_in_hook, 3);
  TE_OK(tecore_fini());
  ck_assert_int_eq(norder, 3);   /* not again */
  TE_EXPECT_ERR(TECORE_ERR_NOT_INITIALIZED, "already",
                tecore_fini_register(hook, (void *)(intptr_t)4));
}
END_TEST

static tecore_result_t reentry_fini, reentry_register;
static void reentrant_hook(void *arg) {
  (void)arg;
  reentry_fini = tecore_fini();
  reentry_register = tecore_fini_register(hook, NULL);
}

START_TEST(hook_calling_fini_does_not_deadlock) {
  NEED_FORK();
  reentry_fini = reentry_register = TECORE_ERR_INTERNAL;
  TE_OK(tecore_fini_register(reentrant_hook, NULL));
  TE_OK(tecore_fini());
  ck_assert_int_eq(reentry_fini, TECORE_SUCCESS);
  ck_assert_int_eq(reentry_register, TECORE_ERR_NOT_INITIALIZED);
  ck_assert_int_eq(norder, 0);
}
END_TEST

START_TEST(hook_slots_run_out_cleanly) {
  NEED_FORK();
  tecore_result_t r = TECORE_SUCCESS;
  int k;
  for (k = 0; k < 64 && r == TECORE_SUCCESS; k++)
    r = tecore_fini_register(hook, (void *)(intptr_t)(100 + k));
  ck_assert_int_eq(r, TECORE_ERR_NOMEM);
  ck_assert_msg(strstr(tecore_last_error(), "fn"), "detail: %s", tecore_last_error());
  ck_assert_int_le(k, 17);   /* 16 slots, libtegraph's hook among them */
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("fini");
  TCase *tc = te_tcase(s, "fini", 0);
  tcase_add_test(tc, fini_joins_stream_workers_left_running);
  tcase_add_test(tc, pinned_host_memory_survives_fini);
  tcase_add_test(tc, fini_joins_the_service_engine);
  tcase_add_test(tc, after_fini_device_calls_fail_and_host_calls_work);
  tcase_add_test(tc, fini_before_any_init);
  tcase_add_test(tc, hooks_run_last_first_while_the_device_works);
  tcase_add_test(tc, hook_calling_fini_does_not_deadlock);
  tcase_add_test(tc, hook_slots_run_out_cleanly);
  return s;
}

TE_TEST_MAIN(make_suite, TE_TEST_DEVICE)
