/* SPDX-License-Identifier: Apache-2.0 */
/* check_vdev_memcheck.c -- vdev's red zones (TECORE_VDEV_MEMCHECK=1, set by
 * main before anything reads it; issue 57): a kernel that writes one byte
 * past the end or before the start of a buffer it was given -- inside the
 * buffer's page, where neither the address checks nor the guard page see
 * it -- is a sticky TECORE_ERR_ILLEGAL_ADDRESS naming the kernel, the
 * allocation and the offsets, found after the kernel (a parameter's
 * buffer), at synchronize (a buffer reached through a pointer table) or at
 * free (a host write); in-bounds writes at every size stay clean; copies
 * and memsets into a red zone are refused before they run.  The tests use
 * a kernel of their own that writes a byte range relative to its pointer.
 * vdev only: on a GPU compute-sanitizer --tool memcheck is the checker. */
#include "tests.h"

/* dst[from .. to) = value, offsets in bytes, from may be negative;
 * through == 1: dst holds a device pointer, the range is written there */
static void write_range(const struct tecore_launch_cfg *cfg, void *const *args) {
  (void)cfg;
  unsigned char *dst = *(unsigned char *const *)args[0];
  int64_t from = *(const int64_t *)args[1], to = *(const int64_t *)args[2];
  unsigned value = *(const unsigned *)args[3], through = *(const unsigned *)args[4];
  if (through) memcpy(&dst, dst, sizeof dst);
  for (int64_t i = from; i < to; i++) dst[i] = (unsigned char)value;
}

static const struct tecore_kernel_def range_defs[] = {
    {.name = "te_test_write_range",
     .vdev = write_range,
     .nparams = 5,
     .param_size = {8, 8, 8, 4, 4},
     .param_is_ptr = {TECORE_KERNEL_PTR_NONNULL, 0, 0, 0, 0}}};
static const struct tecore_kernel_table range_table = {
    .module = "t/vdev_memcheck", .count = 1, .kernels = range_defs};

static int vdev_only(void) { return te_backend_kind == TECORE_BACKEND_VDEV; }

/* Launches te_test_write_range on s. */
static void write_bytes(tecore_stream_t s, tecore_devptr_t dst, int64_t from, int64_t to,
                        unsigned value, unsigned through) {
  int id = -1;
  TE_OK(tecore_kernel_table_register(&range_table, &id));
  void *p = (void *)(uintptr_t)dst;
  void *args[] = {&p, &from, &to, &value, &through};
  struct tecore_launch_cfg cfg = {.grid = {1, 1, 1}, .block = {1, 1, 1}};
  TE_OK(tecore_kernel_launch(id, &cfg, args, s));
}

static tecore_stream_t own_stream(void) {
  tecore_stream_t s = NULL;
  TE_OK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  return s;
}

/* The sizes to try: small ones, around the red zones' alignment and the
 * page, and a larger odd one. */
static const size_t sizes[] = {1, 2, 3, 7, 63, 64, 65, 255, 256, 257, 511, 1000, 3583,
                               3584, 3585, 4095, 4096, 4097, 8191, 65539, (1u << 20) + 5};
#define NSIZES (sizeof sizes / sizeof sizes[0])

/* (a) one byte past the end, at every size: the synchronize names the
 * kernel, the allocation and offset +bytes; the error is sticky; then the
 * red zone is clean again (a fresh stream synchronizes, the free succeeds). */
START_TEST(test_kernel_writing_one_byte_past_end_is_named) {
  if (!vdev_only()) return;
  for (size_t i = 0; i < NSIZES; i++) {
    size_t n = sizes[i];
    tecore_devptr_t p = te_dalloc(n);
    tecore_stream_t s = own_stream();
    write_bytes(s, p, 0, (int64_t)n + 1, 1 + te_rand_below(200), 0);
    char want[96];
    snprintf(want, sizeof want, "kernel te_test_write_range wrote out of bounds");
    TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, want, tecore_stream_synchronize(s));
    snprintf(want, sizeof want, "+%zu): 1 bytes of its red zones written, offsets +%zu to +%zu",
             n, n, n);
    TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, want, tecore_stream_synchronize(s));
    TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "from 1 to 1 bytes past its end",
                  tecore_stream_query(s));
    TE_OK(tecore_stream_destroy(s));
    TE_OK(tecore_stream_synchronize(te_stream));
    TE_OK(tecore_mem_free(p));
  }
}
END_TEST

/* (b) one byte before the start, and far into the red zone before it. */
START_TEST(test_kernel_writing_before_start_is_named) {
  if (!vdev_only()) return;
  tecore_devptr_t p = te_dalloc(100);
  tecore_stream_t s = own_stream();
  write_bytes(s, p, -1, 0, 7, 0);
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS,
                "offsets -1 to -1 (from 1 to 1 bytes before its start)",
                tecore_stream_synchronize(s));
  TE_OK(tecore_stream_destroy(s));
  s = own_stream();
  write_bytes(s, p, -256, -200, 7, 0);
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS,
                "56 bytes of its red zones written, offsets -256 to -201",
                tecore_stream_synchronize(s));
  TE_OK(tecore_stream_destroy(s));
  TE_OK(tecore_mem_free(p));
}
END_TEST

/* (c) in bounds at every size, with every byte value (the poison's
 * included): clean through launches, synchronizes and frees; each buffer
 * 256-byte aligned, as cudaMalloc's are. */
START_TEST(test_in_bounds_writes_stay_clean_at_every_size) {
  if (!vdev_only()) return;
  tecore_devptr_t p[NSIZES];
  for (size_t i = 0; i < NSIZES; i++) {
    p[i] = te_dalloc(sizes[i]);
    ck_assert_uint_eq(p[i] % 256, 0);
    TE_OK(tecore_fill(p[i], TECORE_DTYPE_F32, sizes[i] / 4, 1.0, te_stream));
    TE_OK(tecore_memset_d8_async(p[i], 0xcb, sizes[i], te_stream));
    write_bytes(te_stream, p[i], 0, (int64_t)sizes[i], 3, 0);
  }
  TE_OK(tecore_stream_synchronize(te_stream));
  TE_OK(tecore_ctx_synchronize());
  for (size_t i = 0; i < NSIZES; i++) {
    unsigned char last = 0;
    te_d2h(&last, p[i] + sizes[i] - 1, 1);
    ck_assert_uint_eq(last, 3);
    TE_OK(tecore_mem_free(p[i]));
  }
}
END_TEST

/* (d) copies and memsets into a red zone are refused before they run, and
 * leave it clean. */
START_TEST(test_copies_into_red_zones_are_refused) {
  if (!vdev_only()) return;
  size_t n = 1000;
  tecore_devptr_t p = te_dalloc(n);
  unsigned char h[1001] = {0};
  tecore_stream_t s = own_stream();
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "ends 1 bytes past the end",
                tecore_memcpy_async(p, te_hptr(h), n + 1, s));
  TE_OK(tecore_stream_destroy(s));
  s = own_stream();
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "in the red zone 1 bytes past the end of device memory",
                tecore_memset_d8_async(p + n, 1, 1, s));
  TE_OK(tecore_stream_destroy(s));
  s = own_stream();
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "starts 1 bytes before device memory",
                tecore_memcpy_async(p - 1, te_hptr(h), 2, s));
  TE_OK(tecore_stream_destroy(s));
  s = own_stream();
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "in the red zone 8 bytes before device memory",
                tecore_memcpy_async(p - 8, te_hptr(h), 4, s));
  TE_OK(tecore_stream_destroy(s));
  s = own_stream();
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "past the end",
                tecore_memcpy_async(te_hptr(h), p, n + 1, s));
  TE_OK(tecore_stream_destroy(s));
  TE_OK(tecore_stream_synchronize(te_stream));
  TE_OK(tecore_mem_free(p));
}
END_TEST

/* (e) a kernel that reaches a buffer through a pointer table (not a
 * parameter): found at the next synchronize, naming the stream's last
 * kernel. */
START_TEST(test_write_through_pointer_table_found_at_synchronize) {
  if (!vdev_only()) return;
  tecore_devptr_t victim = te_dalloc(300), table = te_dalloc(8);
  te_h2d(table, &victim, sizeof victim);
  tecore_stream_t s = own_stream();
  write_bytes(s, table, 300, 304, 9, 1);
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "last kernel on this stream: te_test_write_range",
                tecore_stream_synchronize(s));
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS,
                "4 bytes of its red zones written, offsets +300 to +303", tecore_stream_query(s));
  TE_OK(tecore_stream_destroy(s));
  TE_OK(tecore_mem_free(victim));
  TE_OK(tecore_mem_free(table));
}
END_TEST

/* (f) a host write into the red zone (device memory is host memory here):
 * the free finds it, frees anyway, and says so. */
START_TEST(test_host_write_into_red_zone_found_at_free) {
  if (!vdev_only()) return;
  tecore_devptr_t p = te_dalloc(40);
  ((unsigned char *)(uintptr_t)p)[41] = 1;
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "found at free", tecore_mem_free(p));
  TE_EXPECT_INVALID("already freed", tecore_mem_free(p));
  /* ... and an event synchronize finds one too */
  p = te_dalloc(40);
  ((unsigned char *)(uintptr_t)p)[-3] = 1;
  tecore_event_t e = NULL;
  TE_OK(tecore_event_create(0, &e));
  TE_OK(tecore_event_record(e, te_stream));
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "offsets -3 to -3", tecore_event_synchronize(e));
  TE_OK(tecore_event_synchronize(e));
  TE_OK(tecore_event_destroy(e));
  TE_OK(tecore_mem_free(p));
}
END_TEST

/* (g) a kernel node of a graph: the launch's stream gets the error. */
START_TEST(test_graph_kernel_node_writing_past_end_is_named) {
  if (!vdev_only()) return;
  tecore_devptr_t p = te_dalloc(64);
  tecore_stream_t s = own_stream();
  tecore_graph_t g = NULL;
  tecore_graph_exec_t x = NULL;
  TE_OK(tecore_stream_begin_capture(s, TECORE_CAPTURE_THREAD_LOCAL));
  write_bytes(s, p, 60, 66, 5, 0);
  TE_OK(tecore_stream_end_capture(s, &g));
  TE_OK(tecore_graph_instantiate(&x, g));
  TE_OK(tecore_graph_launch(x, s));
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "te_test_write_range wrote out of bounds",
                tecore_stream_synchronize(s));
  TE_OK(tecore_graph_exec_destroy(x));
  TE_OK(tecore_graph_destroy(g));
  TE_OK(tecore_stream_destroy(s));
  TE_OK(tecore_mem_free(p));
}
END_TEST

static Suite *vdev_memcheck_suite(void) {
  Suite *s = suite_create("vdev_memcheck");
  TCase *tc = te_tcase(s, "red_zones", 1);
  tcase_add_test(tc, test_kernel_writing_one_byte_past_end_is_named);
  tcase_add_test(tc, test_kernel_writing_before_start_is_named);
  tcase_add_test(tc, test_in_bounds_writes_stay_clean_at_every_size);
  tcase_add_test(tc, test_copies_into_red_zones_are_refused);
  tcase_add_test(tc, test_write_through_pointer_table_found_at_synchronize);
  tcase_add_test(tc, test_host_write_into_red_zone_found_at_free);
  tcase_add_test(tc, test_graph_kernel_node_writing_past_end_is_named);
  return s;
}

/* the mode is read once, on first use: set before anything runs */
int main(void) {
  setenv("TECORE_VDEV_MEMCHECK", "1", 1);
  return te_test_main(vdev_memcheck_suite, TE_TEST_DEVICE);
}
