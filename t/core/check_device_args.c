/* SPDX-License-Identifier: Apache-2.0 */
/* check_device_args.c -- argument validation of every public function of
 * te/device.h, te/kernel.h and te/elementwise.h: each bad argument (NULL
 * out-pointer, zero size, NULL or misaligned address, unknown flags, enum
 * values or ordinals, unknown kernel ids) returns TECORE_ERR_INVALID with a
 * detail naming the argument, and nothing crashes.  Also the device's
 * identity: count, properties, and the backend TE_DEVICE asked for.
 *
 * No test here creates a multicast object: NCCL_NVLS_ENABLE=0 stays set
 * (tests.h), and every mc call below has a bad argument. */
#include "tests.h"

/* ---- identity ---- */

START_TEST(device_identity) {
  int count = -1;
  TE_OK(tecore_device_count(&count));
  ck_assert_int_ge(count, 1);
  for (int d = 0; d < count; d++) {
    struct tecore_device_props p;
    memset(&p, 0x5a, sizeof p);
    TE_OK(tecore_device_get_props(d, &p));
    ck_assert_int_eq(p.ordinal, d);
    ck_assert_msg(memchr(p.name, 0, sizeof p.name) && p.name[0], "device %d has no name", d);
    ck_assert_int_gt(p.sm_count, 0);
    ck_assert_uint_gt(p.total_mem, 0);
    ck_assert_int_gt(p.max_threads_per_block, 0);
    ck_assert_int_gt(p.cc_major, 0);
    ck_assert_int_eq(p.warp_size, 32);
    ck_assert_int_ge(p.max_shared_per_block, 48 * 1024);
    ck_assert_msg(p.unified_addressing == 0 || p.unified_addressing == 1, "unified %d",
                  p.unified_addressing);
  }
  int v = 0;
  TE_OK(tecore_driver_version(&v));
  ck_assert_int_gt(v, 0);

  tecore_backend_t b = TECORE_BACKEND_NONE;
  TE_OK(tecore_backend(&b));
  ck_assert_msg(b == TECORE_BACKEND_CUDA || b == TECORE_BACKEND_VDEV, "backend %d", (int)b);
  ck_assert_str_eq(tecore_backend_name(TECORE_BACKEND_CUDA), "cuda");
  ck_assert_str_eq(tecore_backend_name(TECORE_BACKEND_VDEV), "vdev");
  ck_assert_str_eq(tecore_backend_name(TECORE_BACKEND_NONE), "none");
  ck_assert_ptr_nonnull(tecore_backend_name((tecore_backend_t)77));
  const char *want = getenv("TE_DEVICE");
  if (want && (strcmp(want, "cuda") == 0 || strcmp(want, "vdev") == 0))
    ck_assert_str_eq(tecore_backend_name(b), want);

  /* the calling thread has the fixture's context */
  tecore_ctx_t cur = NULL;
  TE_OK(tecore_ctx_get_current(&cur));
  ck_assert_ptr_eq(cur, te_ctx);
  int can = -1, link = -7;
  TE_OK(tecore_device_peer(0, 0, &can, &link));
  ck_assert_int_ge(link, -1);
}
END_TEST

START_TEST(init_is_idempotent) {
  TE_OK(tecore_init());
  TE_OK(tecore_init());
  tecore_backend_t a, b;
  TE_OK(tecore_backend(&a));
  TE_OK(tecore_init());
  TE_OK(tecore_backend(&b));
  ck_assert_int_eq(a, b);
}
END_TEST

/* ---- devices, contexts ---- */

START_TEST(bad_device_args) {
  int n = 0;
  TE_OK(tecore_device_count(&n));
  struct tecore_device_props p;
  int can, link;
  tecore_ctx_t c;
  TE_EXPECT_INVALID("backend", tecore_backend(NULL));
  TE_EXPECT_INVALID("version", tecore_driver_version(NULL));
  TE_EXPECT_INVALID("count", tecore_device_count(NULL));
  TE_EXPECT_INVALID("props", tecore_device_get_props(0, NULL));
  TE_EXPECT_INVALID("ordinal", tecore_device_get_props(-1, &p));
  TE_EXPECT_INVALID("ordinal", tecore_device_get_props(n, &p));
  TE_EXPECT_INVALID("can", tecore_device_peer(0, 0, NULL, &link));
  TE_EXPECT_INVALID("link", tecore_device_peer(0, 0, &can, NULL));
  TE_EXPECT_INVALID("ordinal", tecore_device_peer(-1, 0, &can, &link));
  TE_EXPECT_INVALID("ordinal", tecore_device_peer(0, n, &can, &link));
  TE_EXPECT_INVALID("ctx", tecore_ctx_create(0, NULL));
  TE_EXPECT_INVALID("ordinal", tecore_ctx_create(-1, &c));
  TE_EXPECT_INVALID("ordinal", tecore_ctx_create(n, &c));
  TE_EXPECT_INVALID("ctx", tecore_ctx_destroy(NULL));
  TE_EXPECT_INVALID("ctx", tecore_ctx_get_current(NULL));
  TE_OK(tecore_ctx_synchronize());
}
END_TEST

/* ---- memory ---- */

START_TEST(bad_memory_args) {
  tecore_devptr_t d = te_dalloc(4096);
  void *h = NULL;
  size_t f, t;
  TE_EXPECT_INVALID("dptr", tecore_mem_alloc(16, NULL));
  TE_EXPECT_INVALID("bytes", tecore_mem_alloc(0, &d));
  TE_EXPECT_INVALID("free_bytes", tecore_mem_info(NULL, &t));
  TE_EXPECT_INVALID("total_bytes", tecore_mem_info(&f, NULL));
  TE_EXPECT_INVALID("ptr", tecore_mem_alloc_host(16, NULL));
  TE_EXPECT_INVALID("bytes", tecore_mem_alloc_host(0, &h));
  ck_assert_ptr_null(h);
  /* freeing nothing is allowed, like free(NULL) */
  TE_OK(tecore_mem_free(0));
  TE_OK(tecore_mem_free_host(NULL));

  char *buf = aligned_alloc(4096, 8192);
  ck_assert_ptr_nonnull(buf);
  TE_EXPECT_INVALID("ptr", tecore_mem_host_register(NULL, 4096, 0));
  TE_EXPECT_INVALID("bytes", tecore_mem_host_register(buf, 0, 0));
  TE_EXPECT_INVALID("flags", tecore_mem_host_register(buf, 4096, 0x100));
  TE_EXPECT_INVALID("ptr", tecore_mem_host_unregister(NULL));
  tecore_devptr_t hd;
  TE_EXPECT_INVALID("host", tecore_mem_host_device_ptr(NULL, &hd));
  TE_EXPECT_INVALID("dptr", tecore_mem_host_device_ptr(buf, NULL));

  TE_EXPECT_INVALID("dst", tecore_memcpy_async(0, d, 16, te_stream));
  TE_EXPECT_INVALID("src", tecore_memcpy_async(d, 0, 16, te_stream));
  TE_EXPECT_INVALID("dst", tecore_memcpy(0, d, 16));
  TE_EXPECT_INVALID("src", tecore_memcpy(d, 0, 16));
  TE_EXPECT_INVALID("dst", tecore_memset_d8_async(0, 1, 16, te_stream));
  TE_EXPECT_INVALID("dst", tecore_memset_d16_async(0, 1, 16, te_stream));
  TE_EXPECT_INVALID("dst", tecore_memset_d32_async(0, 1, 16, te_stream));
  TE_EXPECT_INVALID("dst", tecore_memset_d16_async(d + 1, 1, 16, te_stream));
  TE_EXPECT_INVALID("dst", tecore_memset_d32_async(d + 2, 1, 16, te_stream));
  TE_EXPECT_INVALID("dst", tecore_memset_d32_async(d + 1, 1, 16, te_stream));
  /* zero-length work is a no-op, not an error */
  TE_OK(tecore_memcpy_async(d, d + 64, 0, te_stream));
  TE_OK(tecore_memset_d32_async(d, 1, 0, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  free(buf);
  TE_OK(tecore_mem_free(d));
}
END_TEST

/* ---- streams and events ---- */

START_TEST(bad_stream_args) {
  int least = 0, greatest = 0, prio;
  tecore_stream_t s;
  tecore_event_t e, ok_ev;
  float ms;
  TE_EXPECT_INVALID("least", tecore_stream_priority_range(NULL, &greatest));
  TE_EXPECT_INVALID("greatest", tecore_stream_priority_range(&least, NULL));
  TE_OK(tecore_stream_priority_range(&least, &greatest));
  TE_EXPECT_INVALID("stream", tecore_stream_create(0, 0, NULL));
  TE_EXPECT_INVALID("flags", tecore_stream_create(0x80, 0, &s));
  TE_EXPECT_INVALID("priority", tecore_stream_create(0, least + 1, &s));
  TE_EXPECT_INVALID("priority", tecore_stream_create(0, greatest - 1, &s));
  TE_EXPECT_INVALID("stream", tecore_stream_destroy(NULL));
  TE_EXPECT_INVALID("event", tecore_stream_wait_event(te_stream, NULL));
  TE_EXPECT_INVALID("priority", tecore_stream_get_priority(te_stream, NULL));

  TE_EXPECT_INVALID("event", tecore_event_create(0, NULL));
  TE_EXPECT_INVALID("flags", tecore_event_create(0x40, &e));
  TE_EXPECT_INVALID("event", tecore_event_destroy(NULL));
  TE_EXPECT_INVALID("event", tecore_event_record(NULL, te_stream));
  TE_EXPECT_INVALID("event", tecore_event_synchronize(NULL));
  TE_EXPECT_INVALID("event", tecore_event_query(NULL));
  TE_OK(tecore_event_create(0, &ok_ev));
  TE_OK(tecore_event_record(ok_ev, te_stream));
  TE_EXPECT_INVALID("ms", tecore_event_elapsed(NULL, ok_ev, ok_ev));
  TE_EXPECT_INVALID("start", tecore_event_elapsed(&ms, NULL, ok_ev));
  TE_EXPECT_INVALID("end", tecore_event_elapsed(&ms, ok_ev, NULL));
  TE_OK(tecore_event_synchronize(ok_ev));
  TE_OK(tecore_event_destroy(ok_ev));
  /* the legacy default stream (NULL) is a stream */
  TE_OK(tecore_stream_synchronize(NULL));
  TE_OK(tecore_stream_query(NULL));
  TE_OK(tecore_stream_get_priority(te_stream, &prio));
}
END_TEST

START_TEST(bad_memop_args) {
  tecore_devptr_t d = te_dalloc(64);
  TE_EXPECT_INVALID("addr", tecore_stream_write_value64(te_stream, 0, 1));
  TE_EXPECT_INVALID("addr", tecore_stream_write_value64(te_stream, d + 4, 1));
  TE_EXPECT_INVALID("addr", tecore_stream_wait_value64(te_stream, 0, 1, TECORE_WAIT_GEQ));
  TE_EXPECT_INVALID("addr", tecore_stream_wait_value64(te_stream, d + 4, 1, TECORE_WAIT_GEQ));
  TE_EXPECT_INVALID("condition",
                    tecore_stream_wait_value64(te_stream, d, 1, (tecore_wait_cond_t)9));
  TE_EXPECT_INVALID("condition",
                    tecore_stream_wait_value64(te_stream, d, 1, (tecore_wait_cond_t)-1));
  TE_EXPECT_INVALID("addr", tecore_stream_write_value32(te_stream, 0, 1));
  TE_EXPECT_INVALID("addr", tecore_stream_write_value32(te_stream, d + 2, 1));
  TE_EXPECT_INVALID("addr", tecore_stream_wait_value32(te_stream, 0, 1, TECORE_WAIT_EQ));
  TE_EXPECT_INVALID("addr", tecore_stream_wait_value32(te_stream, d + 1, 1, TECORE_WAIT_EQ));
  TE_EXPECT_INVALID("condition",
                    tecore_stream_wait_value32(te_stream, d, 1, (tecore_wait_cond_t)4));
  /* a 32-bit op at a 4-byte (not 8-byte) boundary is fine */
  TE_OK(tecore_stream_write_value32(te_stream, d + 4, 5));
  TE_OK(tecore_stream_wait_value32(te_stream, d + 4, 5, TECORE_WAIT_EQ));
  ck_assert_int_eq(te_stream_wait(te_stream, 10000), TECORE_SUCCESS);
  TE_OK(tecore_mem_free(d));
}
END_TEST

/* ---- capture and graphs ---- */

START_TEST(bad_graph_args) {
  tecore_graph_t g = NULL;
  tecore_graph_exec_t x = NULL;
  tecore_capture_status_t st;
  size_t n;
  tecore_graph_update_result_t why;
  int re;
  TE_EXPECT_INVALID(NULL, tecore_stream_begin_capture(NULL, TECORE_CAPTURE_GLOBAL));
  TE_EXPECT_INVALID("mode", tecore_stream_begin_capture(te_stream, (tecore_capture_mode_t)5));
  TE_EXPECT_INVALID("graph", tecore_stream_end_capture(te_stream, NULL));
  TE_EXPECT_INVALID("status", tecore_stream_capture_status(te_stream, NULL));
  /* ending a capture that never began fails (the driver's "illegal state") */
  TE_EXPECT_FAIL(tecore_stream_end_capture(te_stream, &g));
  ck_assert_ptr_null(g);
  TE_OK(tecore_stream_capture_status(te_stream, &st));
  ck_assert_int_eq(st, TECORE_CAPTURE_NONE);

  TE_EXPECT_INVALID("graph", tecore_graph_destroy(NULL));
  TE_EXPECT_INVALID("graph", tecore_graph_node_count(NULL, &n));
  TE_EXPECT_INVALID("graph", tecore_graph_dot(NULL, "/tmp/x.dot"));
  TE_EXPECT_INVALID("graph", tecore_graph_instantiate(&x, NULL));
  TE_EXPECT_INVALID("exec", tecore_graph_exec_destroy(NULL));
  TE_EXPECT_INVALID("exec", tecore_graph_launch(NULL, te_stream));
  TE_EXPECT_INVALID("exec", tecore_graph_upload(NULL, te_stream));

  /* a real graph for the remaining arguments */
  tecore_devptr_t d = te_dalloc(256);
  TE_OK(tecore_stream_begin_capture(te_stream, TECORE_CAPTURE_GLOBAL));
  TE_OK(tecore_memset_d32_async(d, 7, 64, te_stream));
  TE_OK(tecore_stream_end_capture(te_stream, &g));
  ck_assert_ptr_nonnull(g);
  TE_EXPECT_INVALID("count", tecore_graph_node_count(g, NULL));
  TE_EXPECT_INVALID("path", tecore_graph_dot(g, NULL));
  TE_EXPECT_INVALID("path", tecore_graph_dot(g, ""));
  TE_EXPECT_INVALID("exec", tecore_graph_instantiate(NULL, g));
  TE_OK(tecore_graph_instantiate(&x, g));
  TE_EXPECT_INVALID("exec", tecore_graph_exec_update(NULL, g, &why));
  TE_EXPECT_INVALID("graph", tecore_graph_exec_update(x, NULL, &why));
  TE_EXPECT_INVALID("exec", tecore_graph_exec_update_or_instantiate(NULL, g, &re));
  TE_EXPECT_INVALID("graph", tecore_graph_exec_update_or_instantiate(&x, NULL, &re));
  ck_assert_ptr_nonnull(tecore_graph_update_result_name((tecore_graph_update_result_t)99));
  ck_assert_str_ne(tecore_graph_update_result_name(TECORE_GRAPH_UPDATE_TOPOLOGY_CHANGED),
                   tecore_graph_update_result_name(TECORE_GRAPH_UPDATE_SUCCESS));
  TE_OK(tecore_graph_exec_destroy(x));
  TE_OK(tecore_graph_destroy(g));
  TE_OK(tecore_mem_free(d));
}
END_TEST

/* ---- VMM and multicast ---- */

START_TEST(bad_vmm_args) {
  size_t g = 0;
  tecore_devptr_t va = 0;
  tecore_vmm_handle_t h = 0;
  int fd, n = 0;
  TE_OK(tecore_device_count(&n));
  TE_EXPECT_INVALID("granularity", tecore_vmm_granularity(NULL, 0));
  TE_OK(tecore_vmm_granularity(&g, 0));
  ck_assert_uint_gt(g, 0);
  TE_EXPECT_INVALID("va", tecore_vmm_reserve(g, 0, NULL));
  TE_EXPECT_INVALID("bytes", tecore_vmm_reserve(0, 0, &va));
  TE_EXPECT_INVALID("bytes", tecore_vmm_reserve(g + 1, 0, &va));
  TE_EXPECT_INVALID("align", tecore_vmm_reserve(g, 3 * g, &va));
  TE_EXPECT_INVALID("handle", tecore_vmm_create(g, 0, NULL));
  TE_EXPECT_INVALID("bytes", tecore_vmm_create(0, 0, &h));
  TE_EXPECT_INVALID("bytes", tecore_vmm_create(g / 2, 0, &h));
  TE_EXPECT_INVALID("flags", tecore_vmm_create(g, 0x40, &h));
  TE_EXPECT_INVALID("handle", tecore_vmm_release(0));

  TE_OK(tecore_vmm_reserve(2 * g, 0, &va));
  TE_OK(tecore_vmm_create(g, 0, &h));
  TE_EXPECT_INVALID("va", tecore_vmm_map(0, g, h, 0));
  TE_EXPECT_INVALID("bytes", tecore_vmm_map(va, 0, h, 0));
  TE_EXPECT_INVALID("handle", tecore_vmm_map(va, g, 0, 0));
  TE_EXPECT_INVALID("va", tecore_vmm_map(va + g / 2, g, h, 0));
  TE_EXPECT_INVALID("offset", tecore_vmm_map(va, g, h, g / 2));
  TE_OK(tecore_vmm_map(va, g, h, 0));
  TE_EXPECT_INVALID("va", tecore_vmm_set_access(0, g, 0));
  TE_EXPECT_INVALID("bytes", tecore_vmm_set_access(va, 0, 0));
  TE_EXPECT_INVALID("ordinal", tecore_vmm_set_access(va, g, -1));
  TE_EXPECT_INVALID("ordinal", tecore_vmm_set_access(va, g, n));
  TE_OK(tecore_vmm_set_access(va, g, 0));
  TE_EXPECT_INVALID("va", tecore_vmm_unmap(0, g));
  TE_EXPECT_INVALID("bytes", tecore_vmm_unmap(va, 0));
  TE_EXPECT_INVALID("handle", tecore_vmm_export_fd(0, &fd));
  TE_EXPECT_INVALID("fd", tecore_vmm_export_fd(h, NULL));
  TE_EXPECT_INVALID("fd", tecore_vmm_import_fd(-1, &h));
  TE_EXPECT_INVALID("handle", tecore_vmm_import_fd(0, NULL));
  TE_OK(tecore_vmm_unmap(va, g));
  TE_OK(tecore_vmm_release(h));
  TE_EXPECT_INVALID("va", tecore_vmm_free_va(0, 2 * g));
  TE_EXPECT_INVALID("bytes", tecore_vmm_free_va(va, 0));
  TE_OK(tecore_vmm_free_va(va, 2 * g));
}
END_TEST

START_TEST(bad_multicast_args) {
  size_t g;
  tecore_mc_handle_t mc;
  int fd;
  TE_EXPECT_INVALID("granularity", tecore_mc_granularity(1 << 21, 1, NULL));
  TE_EXPECT_INVALID("bytes", tecore_mc_granularity(0, 1, &g));
  TE_EXPECT_INVALID("ndevices", tecore_mc_granularity(1 << 21, 0, &g));
  TE_EXPECT_INVALID("mc", tecore_mc_create(1 << 21, 1, 0, NULL));
  TE_EXPECT_INVALID("bytes", tecore_mc_create(0, 1, 0, &mc));
  TE_EXPECT_INVALID("ndevices", tecore_mc_create(1 << 21, 0, 0, &mc));
  TE_EXPECT_INVALID("ndevices", tecore_mc_create(1 << 21, -2, 0, &mc));
  TE_EXPECT_INVALID("flags", tecore_mc_create(1 << 21, 1, 0x4, &mc));
  TE_EXPECT_INVALID("mc", tecore_mc_add_device(0, 0));
  TE_EXPECT_INVALID("mc", tecore_mc_bind_mem(0, 0, 1, 0, 1 << 21));
  TE_EXPECT_INVALID("mem", tecore_mc_bind_mem(1, 0, 0, 0, 1 << 21));
  TE_EXPECT_INVALID("bytes", tecore_mc_bind_mem(1, 0, 1, 0, 0));
  TE_EXPECT_INVALID("mc", tecore_mc_unbind(0, 0, 0, 1 << 21));
  TE_EXPECT_INVALID("bytes", tecore_mc_unbind(1, 0, 0, 0));
  TE_EXPECT_INVALID("mc", tecore_mc_release(0));
  TE_EXPECT_INVALID("mc", tecore_mc_export_fd(0, &fd));
  TE_EXPECT_INVALID("fd", tecore_mc_export_fd(1, NULL));
  TE_EXPECT_INVALID("fd", tecore_mc_import_fd(-1, &mc));
  TE_EXPECT_INVALID("mc", tecore_mc_import_fd(0, NULL));
}
END_TEST

/* tecore_mc_granularity answered for 1000 devices (a query only: the
 * argument check comes before the operator's rule and the driver, so no
 * multicast object is made or asked about). */
START_TEST(mc_granularity_ndevices_1000_refused) {
  size_t g = 12345;
  TE_EXPECT_INVALID("ndevices 1000", tecore_mc_granularity(1 << 21, 1000, &g));
  TE_EXPECT_INVALID("ndevices 577", tecore_mc_granularity(1 << 21, 577, &g));
  TE_EXPECT_INVALID("ndevices -1", tecore_mc_granularity(1 << 21, -1, &g));
  ck_assert_msg(g == 12345, "a refused query wrote *granularity");
}
END_TEST

/* ---- kernels ---- */

static void vdev_nop(const struct tecore_launch_cfg *cfg, void *const *args) {
  (void)cfg;
  (void)args;
}
static const struct tecore_kernel_def test_defs[] = {
    {.name = "te_test_args_nop", .vdev = vdev_nop, .nparams = 2, .param_size = {8, 4},
     .param_is_ptr = {1, 0}},
};

START_TEST(bad_kernel_args) {
  static const struct tecore_kernel_table table = {
      .module = "t/core/check_device_args", .count = 1, .kernels = test_defs};
  int id = -1, id2 = -2;
  TE_EXPECT_INVALID("table", tecore_kernel_table_register(NULL, &id));
  TE_EXPECT_INVALID("first_id", tecore_kernel_table_register(&table, NULL));
  static const struct tecore_kernel_table empty = {.module = "t/empty", .count = 0,
                                                   .kernels = test_defs};
  TE_EXPECT_INVALID(NULL, tecore_kernel_table_register(&empty, &id));
  static const struct tecore_kernel_table nomod = {.module = NULL, .count = 1,
                                                   .kernels = test_defs};
  TE_EXPECT_INVALID("module", tecore_kernel_table_register(&nomod, &id));
  static const struct tecore_kernel_def toomany[] = {
      {.name = "te_test_toomany", .nparams = TECORE_KERNEL_MAX_PARAMS + 1}};
  static const struct tecore_kernel_table big = {.module = "t/big", .count = 1,
                                                 .kernels = toomany};
  TE_EXPECT_INVALID("te_test_toomany", tecore_kernel_table_register(&big, &id));
  static const struct tecore_kernel_def noname[] = {{.name = NULL, .nparams = 0}};
  static const struct tecore_kernel_table anon = {.module = "t/anon", .count = 1,
                                                  .kernels = noname};
  TE_EXPECT_INVALID(NULL, tecore_kernel_table_register(&anon, &id));

  TE_OK(tecore_kernel_table_register(&table, &id));
  TE_OK(tecore_kernel_table_register(&table, &id2));
  ck_assert_int_eq(id, id2);
  int found = -1;
  TE_OK(tecore_kernel_find("te_test_args_nop", &found));
  ck_assert_int_eq(found, id);
  const struct tecore_kernel_def *def = NULL;
  TE_OK(tecore_kernel_get_def(id, &def));
  ck_assert_ptr_eq(def, &test_defs[0]);

  TE_EXPECT_INVALID("name", tecore_kernel_find(NULL, &found));
  TE_EXPECT_INVALID("id", tecore_kernel_find("te_test_args_nop", NULL));
  TE_EXPECT_INVALID("te_test_no_such_kernel", tecore_kernel_find("te_test_no_such_kernel", &found));
  TE_EXPECT_INVALID("def", tecore_kernel_get_def(id, NULL));
  TE_EXPECT_INVALID("id", tecore_kernel_get_def(-1, &def));
  TE_EXPECT_INVALID("id", tecore_kernel_get_def(1 << 20, &def));

  tecore_devptr_t d = te_dalloc(64);
  void *p = (void *)(uintptr_t)d;
  int v = 3;
  void *args[] = {&p, &v};
  void *nullarg[] = {&p, NULL};
  struct tecore_launch_cfg cfg = {.grid = {1, 1, 1}, .block = {32, 1, 1}};
  TE_EXPECT_INVALID("id", tecore_kernel_launch(-1, &cfg, args, te_stream));
  TE_EXPECT_INVALID("id", tecore_kernel_launch(1 << 20, &cfg, args, te_stream));
  TE_EXPECT_INVALID("cfg", tecore_kernel_launch(id, NULL, args, te_stream));
  TE_EXPECT_INVALID("args", tecore_kernel_launch(id, &cfg, NULL, te_stream));
  TE_EXPECT_INVALID("args", tecore_kernel_launch(id, &cfg, nullarg, te_stream));
  struct tecore_launch_cfg zero_grid = {.grid = {0, 1, 1}, .block = {32, 1, 1}};
  TE_EXPECT_INVALID("grid", tecore_kernel_launch(id, &zero_grid, args, te_stream));
  struct tecore_launch_cfg zero_block = {.grid = {1, 1, 1}, .block = {32, 0, 1}};
  TE_EXPECT_INVALID("block", tecore_kernel_launch(id, &zero_block, args, te_stream));
  struct tecore_launch_cfg fat_block = {.grid = {1, 1, 1}, .block = {1024, 2, 1}};
  TE_EXPECT_INVALID("block", tecore_kernel_launch(id, &fat_block, args, te_stream));
  struct tecore_launch_cfg tall_grid = {.grid = {1, 70000, 1}, .block = {32, 1, 1}};
  TE_EXPECT_INVALID("grid", tecore_kernel_launch(id, &tall_grid, args, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  TE_OK(tecore_mem_free(d));
}
END_TEST

/* tecore_kernel_launch_ex checks what tecore_kernel_launch checks, names
 * itself, and refuses flag bits no TECORE_LAUNCH_* value has. */
START_TEST(bad_kernel_launch_ex_args) {
  int id = -1;
  TE_OK(tecore_kernel_find("te_fill", &id));
  tecore_devptr_t d = te_dalloc(64);
  void *p = (void *)(uintptr_t)d;
  int dt = (int)TECORE_DTYPE_F32;
  unsigned long long n = 16;
  float v = 1.5f;
  void *args[] = {&p, &dt, &n, &v};
  void *nullarg[] = {&p, &dt, NULL, &v};
  struct tecore_launch_cfg cfg = {.grid = {1, 1, 1}, .block = {32, 1, 1}};
  te_poison_dev(d, 64);
  TE_EXPECT_INVALID("tecore_kernel_launch_ex: kernel id -1",
                    tecore_kernel_launch_ex(-1, &cfg, args, 0, te_stream));
  TE_EXPECT_INVALID("id", tecore_kernel_launch_ex(1 << 20, &cfg, args, TECORE_LAUNCH_PDL, te_stream));
  TE_EXPECT_INVALID("tecore_kernel_launch_ex: cfg is NULL",
                    tecore_kernel_launch_ex(id, NULL, args, TECORE_LAUNCH_PDL, te_stream));
  TE_EXPECT_INVALID("args", tecore_kernel_launch_ex(id, &cfg, NULL, 0, te_stream));
  TE_EXPECT_INVALID("args[2]", tecore_kernel_launch_ex(id, &cfg, nullarg, 0, te_stream));
  TE_EXPECT_INVALID("flags 0x2", tecore_kernel_launch_ex(id, &cfg, args, 0x2u, te_stream));
  TE_EXPECT_INVALID("0x80000000",
                    tecore_kernel_launch_ex(id, &cfg, args, TECORE_LAUNCH_PDL | 0x80000000u,
                                            te_stream));
  struct tecore_launch_cfg zero_grid = {.grid = {0, 1, 1}, .block = {32, 1, 1}};
  TE_EXPECT_INVALID("grid", tecore_kernel_launch_ex(id, &zero_grid, args, TECORE_LAUNCH_PDL,
                                                    te_stream));
  /* refused launches queued nothing: the buffer keeps its poison */
  TE_OK(tecore_stream_synchronize(te_stream));
  unsigned char got[64];
  te_d2h(got, d, 64);
  for (int i = 0; i < 64; i++) ck_assert_int_eq(got[i], TE_POISON_BYTE);
  TE_OK(tecore_mem_free(d));
}
END_TEST

/* A PDL launch with nothing before it on the stream and an ordinary one
 * (flags 0) do what tecore_kernel_launch does: a fill of random values
 * over a poisoned buffer, each element checked.  (A kernel that does not
 * execute griddepcontrol.wait -- te_fill -- may take the flag only where
 * no kernel precedes it: hence the synchronize.) */
START_TEST(kernel_launch_ex_runs) {
  int id = -1;
  TE_OK(tecore_kernel_find("te_fill", &id));
  enum { N = 1000 };
  tecore_devptr_t d = te_dalloc(N * sizeof(float));
  for (unsigned flags = 0; flags <= TECORE_LAUNCH_PDL; flags++) {
    te_poison_dev(d, N * sizeof(float));
    void *p = (void *)(uintptr_t)d;
    int dt = (int)TECORE_DTYPE_F32;
    unsigned long long n = N - 3; /* the last three stay poisoned */
    float v = te_rand_float(-4.0f, 4.0f);
    void *args[] = {&p, &dt, &n, &v};
    struct tecore_launch_cfg cfg = {.grid = {4, 1, 1}, .block = {128, 1, 1}};
    TE_OK(tecore_kernel_launch_ex(id, &cfg, args, flags, te_stream));
    TE_OK(tecore_stream_synchronize(te_stream));
    float got[N];
    te_d2h(got, d, sizeof got);
    for (int i = 0; i < N - 3; i++)
      ck_assert_msg(te_f32_bits_of(got[i]) == te_f32_bits_of(v), "flags %u: element %d is %a, want %a",
                    flags, i, (double)got[i], (double)v);
    const unsigned char *b = (const unsigned char *)&got[N - 3];
    for (int i = 0; i < 12; i++) ck_assert_int_eq(b[i], TE_POISON_BYTE);
  }
  TE_OK(tecore_mem_free(d));
}
END_TEST

START_TEST(bad_elementwise_args) {
  tecore_devptr_t d = te_dalloc(256), a = te_dalloc(256), b = te_dalloc(256);
  te_poison_dev(d, 256);
  TE_EXPECT_INVALID("dst", tecore_fill(0, TECORE_DTYPE_F32, 4, 1.0, te_stream));
  TE_EXPECT_INVALID("dst", tecore_fill(d + 2, TECORE_DTYPE_F32, 4, 1.0, te_stream));
  TE_EXPECT_INVALID("dst", tecore_fill(d + 1, TECORE_DTYPE_BF16, 4, 1.0, te_stream));
  TE_EXPECT_INVALID("dtype", tecore_fill(d, TECORE_DTYPE_E4M3, 4, 1.0, te_stream));
  TE_EXPECT_INVALID("dtype", tecore_fill(d, TECORE_DTYPE_I32, 4, 1.0, te_stream));
  TE_EXPECT_INVALID("dtype", tecore_fill(d, (tecore_dtype_t)99, 4, 1.0, te_stream));
  TE_EXPECT_INVALID("dtype", tecore_fill(d, (tecore_dtype_t)-1, 4, 1.0, te_stream));
  TE_EXPECT_INVALID("dst", tecore_scale_add(0, a, 1, b, 1, TECORE_DTYPE_F32, 4, te_stream));
  TE_EXPECT_INVALID("a", tecore_scale_add(d, 0, 1, b, 1, TECORE_DTYPE_F32, 4, te_stream));
  TE_EXPECT_INVALID("b", tecore_scale_add(d, a, 1, 0, 1, TECORE_DTYPE_F32, 4, te_stream));
  TE_EXPECT_INVALID("a", tecore_scale_add(d, a + 2, 1, b, 1, TECORE_DTYPE_F32, 4, te_stream));
  TE_EXPECT_INVALID("b", tecore_scale_add(d, a, 1, b + 1, 1, TECORE_DTYPE_F16, 4, te_stream));
  TE_EXPECT_INVALID("dtype", tecore_scale_add(d, a, 1, b, 1, TECORE_DTYPE_E5M2, 4, te_stream));
  TE_EXPECT_INVALID("dtype",
                    tecore_scale_add(d, a, 1, b, 1, (tecore_dtype_t)1234, 4, te_stream));
  /* nothing was written by the rejected calls */
  unsigned char host[256];
  te_d2h(host, d, sizeof host);
  te_expect_bytes_eq(host, TE_POISON_BYTE, sizeof host, "dst after rejected calls");
  TE_OK(tecore_mem_free(d));
  TE_OK(tecore_mem_free(a));
  TE_OK(tecore_mem_free(b));
}
END_TEST

static Suite *device_args_suite(void) {
  Suite *s = suite_create("device_args");
  TCase *tc = te_tcase(s, "identity", 1);
  tcase_add_test(tc, device_identity);
  tcase_add_test(tc, init_is_idempotent);
  tc = te_tcase(s, "bad_args", 1);
  tcase_add_test(tc, bad_device_args);
  tcase_add_test(tc, bad_memory_args);
  tcase_add_test(tc, bad_stream_args);
  tcase_add_test(tc, bad_memop_args);
  tcase_add_test(tc, bad_graph_args);
  tcase_add_test(tc, bad_vmm_args);
  tcase_add_test(tc, bad_multicast_args);
  tcase_add_test(tc, mc_granularity_ndevices_1000_refused);
  tcase_add_test(tc, bad_kernel_args);
  tcase_add_test(tc, bad_kernel_launch_ex_args);
  tcase_add_test(tc, kernel_launch_ex_runs);
  tcase_add_test(tc, bad_elementwise_args);
  return s;
}

TE_TEST_MAIN(device_args_suite, TE_TEST_DEVICE)
