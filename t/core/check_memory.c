/* SPDX-License-Identifier: Apache-2.0 */
/* check_memory.c -- device and pinned host memory (te/device.h): alloc and
 * free, page-locked host allocation and registration with their device
 * addresses, copies host->device->device->host of random data at odd sizes
 * and offsets, 8/16/32-bit memsets against a host reference (with poisoned
 * guard bytes around the target to catch overruns), and mem_info. */
#include "tests.h"

/* Odd sizes: a byte, a few bytes, around a page, around a MiB. */
static const size_t sizes[] = {1, 3, 7, 4095, 4097, 65537, (1u << 20) + 13};
#define NSIZES (sizeof sizes / sizeof sizes[0])

START_TEST(alloc_and_free) {
  tecore_devptr_t p[8] = {0};
  for (int i = 0; i < 8; i++) {
    size_t bytes = 1 + te_rand_below(1u << 16);
    p[i] = te_dalloc(bytes);
    /* distinct, non-overlapping, usable at both ends */
    for (int j = 0; j < i; j++) ck_assert_msg(p[i] != p[j], "two allocations at 0x%llx",
                                              (unsigned long long)p[i]);
    unsigned char ends[2] = {(unsigned char)(i + 1), (unsigned char)(0x80 | i)}, back[2];
    TE_OK(tecore_memcpy(p[i], te_hptr(&ends[0]), 1));
    TE_OK(tecore_memcpy(p[i] + bytes - 1, te_hptr(&ends[1]), 1));
    TE_OK(tecore_memcpy(te_hptr(&back[0]), p[i], 1));
    TE_OK(tecore_memcpy(te_hptr(&back[1]), p[i] + bytes - 1, 1));
    ck_assert_int_eq(back[0], ends[0]);
    ck_assert_int_eq(back[1], ends[1]);
  }
  /* 256-byte alignment, as the driver gives */
  for (int i = 0; i < 8; i++) ck_assert_uint_eq(p[i] % 256, 0);
  for (int i = 0; i < 8; i++) TE_OK(tecore_mem_free(p[i]));
}
END_TEST

/* Random bytes host -> device -> device -> host, through pageable memory
 * (unified addressing) and sync/async copies. */
START_TEST(copy_round_trip) {
  ck_assert_int_eq(te_props.unified_addressing, 1);
  for (size_t k = 0; k < NSIZES; k++) {
    size_t n = sizes[k];
    unsigned char *src = malloc(n), *dst = malloc(n);
    ck_assert_ptr_nonnull(src);
    ck_assert_ptr_nonnull(dst);
    te_rand_bytes(src, n);
    te_poison_host(dst, n);
    tecore_devptr_t a = te_dalloc(n), b = te_dalloc(n);
    te_poison_dev(a, n);
    te_poison_dev(b, n);
    TE_OK(tecore_memcpy_async(a, te_hptr(src), n, te_stream));
    TE_OK(tecore_memcpy_async(b, a, n, te_stream));
    TE_OK(tecore_memcpy_async(te_hptr(dst), b, n, te_stream));
    TE_OK(tecore_stream_synchronize(te_stream));
    char what[64];
    snprintf(what, sizeof what, "async round trip of %zu bytes", n);
    te_expect_mem_eq(dst, src, n, what);

    /* the synchronous form, at odd offsets inside the buffers */
    size_t off = n > 8 ? 1 + te_rand_below(n / 2) : 0, len = n - off;
    te_poison_host(dst, n);
    te_rand_bytes(src, n);
    TE_OK(tecore_memcpy(a + off, te_hptr(src + off), len));
    TE_OK(tecore_memcpy(b, a + off, len));
    TE_OK(tecore_memcpy(te_hptr(dst), b, len));
    snprintf(what, sizeof what, "sync copy of %zu bytes at offset %zu", len, off);
    te_expect_mem_eq(dst, src + off, len, what);
    te_expect_bytes_eq(dst + len, TE_POISON_BYTE, n - len, "bytes past a short copy");
    TE_OK(tecore_mem_free(a));
    TE_OK(tecore_mem_free(b));
    free(src);
    free(dst);
  }
}
END_TEST

/* Page-locked host memory: host and device views are the same bytes. */
START_TEST(host_alloc) {
  size_t n = 3 * 4096 + 123;
  unsigned char *h = NULL, *ref = malloc(n), *back = malloc(n);
  TE_OK(tecore_mem_alloc_host(n, (void **)&h));
  ck_assert_ptr_nonnull(h);
  tecore_devptr_t hd = 0, hd_mid = 0;
  TE_OK(tecore_mem_host_device_ptr(h, &hd));
  ck_assert_uint_ne(hd, 0);
  TE_OK(tecore_mem_host_device_ptr(h + 64, &hd_mid));
  ck_assert_uint_eq(hd_mid, hd + 64);

  /* host writes, device copies out */
  te_rand_bytes(h, n);
  memcpy(ref, h, n);
  tecore_devptr_t d = te_dalloc(n);
  te_poison_dev(d, n);
  TE_OK(tecore_memcpy_async(d, hd, n, te_stream));
  te_poison_host(back, n);
  TE_OK(tecore_memcpy_async(te_hptr(back), d, n, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  te_expect_mem_eq(back, ref, n, "pinned -> device -> host");

  /* device writes into it through its device address */
  te_rand_bytes(ref, n);
  te_h2d(d, ref, n);
  te_poison_host(h, n);
  TE_OK(tecore_memcpy_async(hd, d, n, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  te_expect_mem_eq(h, ref, n, "device -> pinned, read on the host");

  /* a memset through the device address lands in host memory */
  TE_OK(tecore_memset_d32_async(hd, 0x01020304u, 16, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  for (int i = 0; i < 16; i++) ck_assert_uint_eq(((uint32_t *)h)[i], 0x01020304u);
  ck_assert_uint_eq(h[64], ref[64]);

  TE_OK(tecore_mem_free(d));
  TE_OK(tecore_mem_free_host(h));
  free(ref);
  free(back);
}
END_TEST

/* Registered (page-locked in place) host memory. */
START_TEST(host_register) {
  size_t n = 4 * 4096;
  unsigned char *h = aligned_alloc(4096, n), *ref = malloc(n);
  ck_assert_ptr_nonnull(h);
  te_poison_host(h, n);
  TE_OK(tecore_mem_host_register(h, n, TECORE_HOST_REGISTER_MAPPED));
  tecore_devptr_t hd = 0;
  TE_OK(tecore_mem_host_device_ptr(h, &hd));
  ck_assert_uint_ne(hd, 0);
  tecore_devptr_t hd2 = 0;
  TE_OK(tecore_mem_host_device_ptr(h + 4096 + 8, &hd2));
  ck_assert_uint_eq(hd2, hd + 4096 + 8);

  te_rand_bytes(ref, n);
  tecore_devptr_t d = te_dalloc(n);
  te_h2d(d, ref, n);
  TE_OK(tecore_memcpy_async(hd, d, n, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  te_expect_mem_eq(h, ref, n, "device -> registered host memory");

  te_rand_bytes(h, n);
  memcpy(ref, h, n);
  te_poison_dev(d, n);
  TE_OK(tecore_memcpy_async(d, hd, n, te_stream));
  unsigned char *back = malloc(n);
  te_poison_host(back, n);
  TE_OK(tecore_memcpy_async(te_hptr(back), d, n, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  te_expect_mem_eq(back, ref, n, "registered host -> device -> host");

  TE_OK(tecore_mem_host_unregister(h));
  /* after unregistering, it has no device address of its own any more */
  tecore_clear_error();
  tecore_devptr_t gone = 0;
  ck_assert_int_ne(tecore_mem_host_device_ptr(h, &gone), TECORE_SUCCESS);
  TE_OK(tecore_mem_free(d));
  free(back);
  free(ref);
  free(h);
}
END_TEST

/* memset of width w over count elements at an aligned offset inside a
 * poisoned buffer; compares the whole buffer with a host reference. */
static void memset_case(unsigned w, size_t count, size_t off_elems) {
  size_t guard = 64, n = guard + (off_elems + count) * w + guard;
  tecore_devptr_t d = te_dalloc(n);
  unsigned char *ref = malloc(n), *got = malloc(n);
  te_poison_dev(d, n);
  memset(ref, TE_POISON_BYTE, n);
  uint32_t v = te_rand_u32();
  if (w == 1) v &= 0xffu;
  if (w == 2) v &= 0xffffu;
  if (v == (TE_POISON_BYTE * 0x01010101u & (w == 4 ? 0xffffffffu : (1u << (8 * w)) - 1))) v ^= 1;
  tecore_devptr_t dst = d + guard + off_elems * w;
  for (size_t i = 0; i < count; i++) memcpy(ref + guard + (off_elems + i) * w, &v, w);
  if (w == 1) TE_OK(tecore_memset_d8_async(dst, (uint8_t)v, count, te_stream));
  if (w == 2) TE_OK(tecore_memset_d16_async(dst, (uint16_t)v, count, te_stream));
  if (w == 4) TE_OK(tecore_memset_d32_async(dst, v, count, te_stream));
  te_poison_host(got, n);
  te_d2h(got, d, n);
  char what[96];
  snprintf(what, sizeof what, "memset_d%u of %zu elements to 0x%x at element %zu", 8 * w, count, v,
           off_elems);
  te_expect_mem_eq(got, ref, n, what);
  TE_OK(tecore_mem_free(d));
  free(ref);
  free(got);
}

START_TEST(memsets) {
  const size_t counts[] = {1, 3, 7, 1000, 4097, 100003};
  for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
    memset_case(1, counts[i], te_rand_below(9));
    memset_case(2, counts[i], te_rand_below(9));
    memset_case(4, counts[i], te_rand_below(9));
  }
  size_t rnd = 1 + te_rand_below(50000);
  memset_case(1, rnd, 0);
  memset_case(2, rnd, 1);
  memset_case(4, rnd, 3);
}
END_TEST

START_TEST(mem_info) {
  size_t free0 = 0, total = 0;
  TE_OK(tecore_mem_info(&free0, &total));
  ck_assert_uint_gt(total, 0);
  ck_assert_uint_le(free0, total);
  ck_assert_uint_gt(free0, 0);
  ck_assert_uint_le(total, te_props.total_mem);
  ck_assert_uint_ge(total, te_props.total_mem / 2);
}
END_TEST

static Suite *memory_suite(void) {
  Suite *s = suite_create("memory");
  TCase *tc = te_tcase(s, "device", 1);
  tcase_add_test(tc, alloc_and_free);
  tcase_add_test(tc, copy_round_trip);
  tcase_add_test(tc, memsets);
  tcase_add_test(tc, mem_info);
  tc = te_tcase(s, "host", 1);
  tcase_add_test(tc, host_alloc);
  tcase_add_test(tc, host_register);
  return s;
}

TE_TEST_MAIN(memory_suite, TE_TEST_DEVICE)
