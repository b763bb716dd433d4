/* SPDX-License-Identifier: Apache-2.0 */
/* check_stream.c -- streams, events and stream memory operations
 * (te/device.h):
 *   - work in one stream runs in order (a chain of dependent copies, memsets
 *     and kernels gives the host reference bit for bit);
 *   - events: record / query / synchronize / elapsed, NOT_READY while the
 *     recorded work is blocked, failures on timing-disabled events;
 *   - cross-stream order through stream_wait_event;
 *   - priorities;
 *   - wait_value32/64 released by another stream's write_value or by the
 *     host writing pinned memory, for every condition, with the work behind
 *     the wait checked still undone (destination poisoned, NOT_READY)
 *     before the release and done after it.
 * Streams are NON_BLOCKING so the legacy default stream never joins in.
 * Waits are bounded (te_stream_wait) so broken ordering fails, not hangs. */
#include "tests.h"
#include <pthread.h>

#define WAIT_MS 20000 /* bound on any wait that should end */
#define BLOCKED_MS 20 /* time given to a wrongly released wait to show */

static tecore_stream_t new_stream(void) {
  tecore_stream_t s = NULL;
  TE_OK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  ck_assert_ptr_nonnull(s);
  return s;
}

static tecore_result_t event_wait(tecore_event_t e, int timeout_ms) {
  for (int waited = 0;; waited++) {
    tecore_result_t r = tecore_event_query(e);
    if (r != TECORE_ERR_NOT_READY) return r;
    if (waited > timeout_ms * 5) return TECORE_ERR_TIMEOUT;
    usleep(200);
  }
}

/* alpha*a + beta*b in float with the kernel's rounding: one rounding for
 * beta*b and one for the fused multiply-add (te/elementwise.h computes in
 * float; kernels/common documents fmaf(alpha, a, beta*b)). */
static float ref_scale_add(float a, float alpha, float b, float beta) {
  float bb = beta * b;
  return fmaf(alpha, a, bb);
}

/* ---- ordering within a stream ---- */

START_TEST(in_order_chain) {
  size_t n = 1000 + te_rand_below(20000);
  size_t bytes = n * sizeof(float);
  float *x = malloc(bytes), *ref = malloc(bytes), *out = NULL;
  te_rand_floats(x, n, -2.0f, 2.0f);
  TE_OK(tecore_mem_alloc_host(bytes, (void **)&out));
  tecore_devptr_t out_d;
  TE_OK(tecore_mem_host_device_ptr(out, &out_d));
  tecore_devptr_t dx = te_dalloc(bytes), dy = te_dalloc(bytes), dz = te_dalloc(bytes),
                  dw = te_dalloc(bytes);
  float c = te_rand_float(0.5f, 1.5f), v = te_rand_float(-3.0f, -1.0f);
  float a1 = te_rand_float(-2, 2), b1 = te_rand_float(-2, 2), a2 = te_rand_float(-2, 2),
        b2 = te_rand_float(-2, 2), a3 = te_rand_float(-2, 2);
  for (int round = 0; round < 3; round++) {
    te_poison_host_nan(out, n);
    te_poison_dev_nan(dy, n);
    te_poison_dev_nan(dz, n);
    te_poison_dev_nan(dw, n);
    /* nothing synchronizes between these: only stream order makes them right */
    TE_OK(tecore_memcpy_async(dx, te_hptr(x), bytes, te_stream));
    TE_OK(tecore_memset_d32_async(dy, te_f32_bits_of(c), n, te_stream));
    TE_OK(tecore_scale_add(dy, dx, a1, dy, b1, TECORE_DTYPE_F32, n, te_stream));
    TE_OK(tecore_memcpy_async(dz, dy, bytes, te_stream));
    TE_OK(tecore_scale_add(dz, dz, a2, dx, b2, TECORE_DTYPE_F32, n, te_stream));
    TE_OK(tecore_fill(dw, TECORE_DTYPE_F32, n, v, te_stream));
    TE_OK(tecore_scale_add(dw, dw, 1.0f, dz, a3, TECORE_DTYPE_F32, n, te_stream));
    TE_OK(tecore_memcpy_async(out_d, dw, bytes, te_stream));
    ck_assert_int_eq(te_stream_wait(te_stream, WAIT_MS), TECORE_SUCCESS);
    for (size_t i = 0; i < n; i++) {
      float y = ref_scale_add(x[i], a1, c, b1);
      float z = ref_scale_add(y, a2, x[i], b2);
      ref[i] = ref_scale_add(v, 1.0f, z, a3);
    }
    te_expect_f32_bits(out, ref, n, "chain result");
    /* new inputs for the next round, same buffers */
    te_rand_floats(x, n, -2.0f, 2.0f);
  }
  TE_OK(tecore_mem_free(dx));
  TE_OK(tecore_mem_free(dy));
  TE_OK(tecore_mem_free(dz));
  TE_OK(tecore_mem_free(dw));
  TE_OK(tecore_mem_free_host(out));
  free(x);
  free(ref);
}
END_TEST

/* ---- events ---- */

START_TEST(events_basic) {
  tecore_event_t start, end, untimed, never, blocking;
  TE_OK(tecore_event_create(TECORE_EVENT_DEFAULT, &start));
  TE_OK(tecore_event_create(TECORE_EVENT_DEFAULT, &end));
  TE_OK(tecore_event_create(TECORE_EVENT_DISABLE_TIMING, &untimed));
  TE_OK(tecore_event_create(TECORE_EVENT_DEFAULT, &never));
  TE_OK(tecore_event_create(TECORE_EVENT_BLOCKING_SYNC, &blocking));
  size_t n = 1u << 20;
  tecore_devptr_t d = te_dalloc(n * 4);
  TE_OK(tecore_event_record(start, te_stream));
  TE_OK(tecore_fill(d, TECORE_DTYPE_F32, n, 2.5, te_stream));
  TE_OK(tecore_event_record(end, te_stream));
  TE_OK(tecore_event_record(untimed, te_stream));
  TE_OK(tecore_event_record(blocking, te_stream));
  TE_OK(tecore_event_synchronize(end));
  ck_assert_int_eq(tecore_event_query(end), TECORE_SUCCESS);
  ck_assert_int_eq(tecore_event_query(start), TECORE_SUCCESS);
  TE_OK(tecore_event_synchronize(blocking));
  float ms = -1.0f;
  TE_OK(tecore_event_elapsed(&ms, start, end));
  ck_assert_msg(ms >= 0.0f && ms < 60000.0f, "elapsed %g ms", (double)ms);
  /* the fill is done once end is: spot-check it */
  float back[4];
  te_d2h(back, d + (n - 4) * 4, sizeof back);
  for (int i = 0; i < 4; i++) ck_assert_float_eq(back[i], 2.5f);

  /* an event never recorded is complete, as the driver says */
  ck_assert_int_eq(tecore_event_query(never), TECORE_SUCCESS);
  TE_OK(tecore_event_synchronize(never));
  /* timing-disabled and never-recorded events have no time */
  TE_EXPECT_FAIL(tecore_event_elapsed(&ms, start, untimed));
  TE_EXPECT_FAIL(tecore_event_elapsed(&ms, untimed, end));
  TE_EXPECT_FAIL(tecore_event_elapsed(&ms, start, never));

  /* re-recording moves the event: elapsed grows */
  float ms2 = -1.0f;
  te_sleep_ms(5);
  TE_OK(tecore_fill(d, TECORE_DTYPE_F32, n, 1.0, te_stream));
  TE_OK(tecore_event_record(end, te_stream));
  TE_OK(tecore_event_synchronize(end));
  TE_OK(tecore_event_elapsed(&ms2, start, end));
  ck_assert_msg(ms2 >= ms, "second elapsed %g < first %g", (double)ms2, (double)ms);

  TE_OK(tecore_mem_free(d));
  TE_OK(tecore_event_destroy(start));
  TE_OK(tecore_event_destroy(end));
  TE_OK(tecore_event_destroy(untimed));
  TE_OK(tecore_event_destroy(never));
  TE_OK(tecore_event_destroy(blocking));
}
END_TEST

/* An event behind a blocked wait is NOT_READY, and so is its stream. */
START_TEST(events_not_ready) {
  tecore_stream_t a = new_stream(), b = new_stream();
  tecore_devptr_t flag = te_dalloc(64);
  uint32_t zero = 0;
  te_h2d(flag, &zero, 4);
  tecore_event_t before, after;
  TE_OK(tecore_event_create(0, &before));
  TE_OK(tecore_event_create(0, &after));
  TE_OK(tecore_event_record(before, a));
  TE_OK(tecore_stream_wait_value32(a, flag, 1, TECORE_WAIT_EQ));
  TE_OK(tecore_event_record(after, a));
  ck_assert_int_eq(event_wait(before, WAIT_MS), TECORE_SUCCESS);
  te_sleep_ms(BLOCKED_MS);
  ck_assert_int_eq(tecore_event_query(after), TECORE_ERR_NOT_READY);
  ck_assert_int_eq(tecore_stream_query(a), TECORE_ERR_NOT_READY);
  float ms;
  ck_assert_int_eq(tecore_event_elapsed(&ms, before, after), TECORE_ERR_NOT_READY);
  TE_OK(tecore_stream_write_value32(b, flag, 1));
  ck_assert_int_eq(event_wait(after, WAIT_MS), TECORE_SUCCESS);
  TE_OK(tecore_event_elapsed(&ms, before, after));
  ck_assert_msg(ms >= 0.0f, "elapsed %g", (double)ms);
  ck_assert_int_eq(te_stream_wait(a, WAIT_MS), TECORE_SUCCESS);
  ck_assert_int_eq(te_stream_wait(b, WAIT_MS), TECORE_SUCCESS);
  TE_OK(tecore_event_destroy(before));
  TE_OK(tecore_event_destroy(after));
  TE_OK(tecore_stream_destroy(a));
  TE_OK(tecore_stream_destroy(b));
  TE_OK(tecore_mem_free(flag));
}
END_TEST

/* ---- cross-stream order ---- */

START_TEST(cross_stream_wait_event) {
  tecore_stream_t a = new_stream(), b = new_stream(), c = new_stream();
  size_t n = 4096 + te_rand_below(4096), bytes = n * 4;
  tecore_devptr_t flag = te_dalloc(64), buf = te_dalloc(bytes);
  uint64_t zero = 0;
  te_h2d(flag, &zero, 8);
  te_poison_dev(buf, bytes);
  float *out = NULL;
  TE_OK(tecore_mem_alloc_host(bytes, (void **)&out));
  te_poison_host_nan(out, n);
  tecore_devptr_t out_d;
  TE_OK(tecore_mem_host_device_ptr(out, &out_d));
  tecore_event_t ea;
  TE_OK(tecore_event_create(TECORE_EVENT_DISABLE_TIMING, &ea));
  float v = te_rand_float(1.0f, 100.0f);
  /* the fill kernel has run once before a stream blocks (a first launch
   * behind a blocked stream is first_launch_while_stream_waits's subject) */
  TE_OK(tecore_fill(buf, TECORE_DTYPE_F32, n, 0.5, c));
  ck_assert_int_eq(te_stream_wait(c, WAIT_MS), TECORE_SUCCESS);
  te_poison_dev(buf, bytes);

  /* a: blocked, then fills buf; b: waits for a's event, then copies buf out */
  TE_OK(tecore_stream_wait_value64(a, flag, 1, TECORE_WAIT_GEQ));
  TE_OK(tecore_fill(buf, TECORE_DTYPE_F32, n, v, a));
  TE_OK(tecore_event_record(ea, a));
  TE_OK(tecore_stream_wait_event(b, ea));
  TE_OK(tecore_memcpy_async(out_d, buf, bytes, b));
  te_sleep_ms(BLOCKED_MS);
  ck_assert_int_eq(tecore_stream_query(b), TECORE_ERR_NOT_READY);
  ck_assert_int_eq(tecore_event_query(ea), TECORE_ERR_NOT_READY);
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(isnan(out[i]), "out[%zu] = %g written before the event", i, (double)out[i]);

  /* re-recording the event later does not reach back: b waits for the
   * record that was current when its wait was enqueued */
  TE_OK(tecore_event_record(ea, c));
  ck_assert_int_eq(event_wait(ea, WAIT_MS), TECORE_SUCCESS);
  te_sleep_ms(BLOCKED_MS);
  ck_assert_int_eq(tecore_stream_query(b), TECORE_ERR_NOT_READY);
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(isnan(out[i]), "out[%zu] = %g written after a re-record", i, (double)out[i]);

  TE_OK(tecore_stream_write_value64(c, flag, 1));
  ck_assert_int_eq(te_stream_wait(b, WAIT_MS), TECORE_SUCCESS);
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(out[i] == v, "out[%zu] = %.9g, want %.9g", i, (double)out[i], (double)v);
  ck_assert_int_eq(te_stream_wait(a, WAIT_MS), TECORE_SUCCESS);
  ck_assert_int_eq(te_stream_wait(c, WAIT_MS), TECORE_SUCCESS);

  /* waiting on a completed (or never recorded) event does not block */
  tecore_event_t fresh;
  TE_OK(tecore_event_create(0, &fresh));
  TE_OK(tecore_stream_wait_event(b, fresh));
  TE_OK(tecore_stream_wait_event(b, ea));
  ck_assert_int_eq(te_stream_wait(b, WAIT_MS), TECORE_SUCCESS);

  TE_OK(tecore_event_destroy(ea));
  TE_OK(tecore_event_destroy(fresh));
  TE_OK(tecore_mem_free_host(out));
  TE_OK(tecore_mem_free(flag));
  TE_OK(tecore_mem_free(buf));
  TE_OK(tecore_stream_destroy(a));
  TE_OK(tecore_stream_destroy(b));
  TE_OK(tecore_stream_destroy(c));
}
END_TEST

/* ---- priorities ---- */

START_TEST(priorities) {
  int least = 99, greatest = 99;
  TE_OK(tecore_stream_priority_range(&least, &greatest));
  ck_assert_int_le(greatest, least);
  ck_assert_msg(greatest <= 0 && least >= 0, "range [%d, %d] excludes 0", greatest, least);
  int p = 99;
  TE_OK(tecore_stream_get_priority(te_stream, &p));
  ck_assert_int_eq(p, 0);
  int want[3] = {greatest, least, (greatest + least) / 2};
  for (int i = 0; i < 3; i++) {
    tecore_stream_t s;
    TE_OK(tecore_stream_create(i == 1 ? TECORE_STREAM_DEFAULT : TECORE_STREAM_NON_BLOCKING,
                               want[i], &s));
    TE_OK(tecore_stream_get_priority(s, &p));
    ck_assert_int_eq(p, want[i]);
    /* and it runs work */
    tecore_devptr_t d = te_dalloc(64);
    TE_OK(tecore_memset_d32_async(d, 0x11223344u + (uint32_t)i, 16, s));
    TE_OK(tecore_stream_synchronize(s));
    uint32_t back[16];
    TE_OK(tecore_memcpy(te_hptr(back), d, sizeof back));
    for (int k = 0; k < 16; k++) ck_assert_uint_eq(back[k], 0x11223344u + (uint32_t)i);
    TE_OK(tecore_mem_free(d));
    TE_OK(tecore_stream_destroy(s));
  }
}
END_TEST

/* ---- stream memory operations ---- */

/* A flag word: device memory, or pinned host memory the host writes. */
struct flag {
  int host;
  unsigned width;
  void *h;              /* host view (host flags) */
  tecore_devptr_t d;    /* device address */
};

static struct flag flag_new(int host, unsigned width) {
  struct flag f = {.host = host, .width = width};
  if (host) {
    TE_OK(tecore_mem_alloc_host(64, &f.h));
    memset(f.h, 0, 64);
    TE_OK(tecore_mem_host_device_ptr(f.h, &f.d));
  } else {
    f.d = te_dalloc(64);
  }
  return f;
}
static void flag_free(struct flag *f) {
  if (f->host) TE_OK(tecore_mem_free_host(f->h));
  else TE_OK(tecore_mem_free(f->d));
}
/* Sets the flag now, from the host (for the initial value). */
static void flag_set_now(struct flag *f, uint64_t v) {
  if (f->host) {
    if (f->width == 64) __atomic_store_n((uint64_t *)f->h, v, __ATOMIC_SEQ_CST);
    else __atomic_store_n((uint32_t *)f->h, (uint32_t)v, __ATOMIC_SEQ_CST);
  } else {
    uint32_t v32 = (uint32_t)v;
    te_h2d(f->d, f->width == 64 ? (const void *)&v : (const void *)&v32, f->width / 8);
  }
}
/* Releases: host store for host flags, else write_value from stream s. */
static void flag_release(struct flag *f, uint64_t v, tecore_stream_t s) {
  if (f->host) {
    flag_set_now(f, v);
  } else if (f->width == 64) {
    TE_OK(tecore_stream_write_value64(s, f->d, v));
  } else {
    TE_OK(tecore_stream_write_value32(s, f->d, (uint32_t)v));
  }
}
static void flag_wait(struct flag *f, tecore_stream_t s, uint64_t v, tecore_wait_cond_t c) {
  if (f->width == 64) TE_OK(tecore_stream_wait_value64(s, f->d, v, c));
  else TE_OK(tecore_stream_wait_value32(s, f->d, (uint32_t)v, c));
}

/* Stream a waits for the flag then copies random data into pinned memory;
 * before the release the copy must not have happened. */
static void wait_then_copy(unsigned width, int host_flag) {
  tecore_stream_t a = new_stream(), b = new_stream();
  struct flag f = flag_new(host_flag, width);
  size_t bytes = 1000 + te_rand_below(100000);
  unsigned char *src = malloc(bytes), *dst = NULL;
  te_rand_bytes(src, bytes);
  tecore_devptr_t dsrc = te_dalloc(bytes), ddst;
  te_h2d(dsrc, src, bytes);
  TE_OK(tecore_mem_alloc_host(bytes, (void **)&dst));
  te_poison_host(dst, bytes);
  TE_OK(tecore_mem_host_device_ptr(dst, &ddst));

  uint64_t mask = width == 64 ? ~0ull : 0xffffffffull;
  uint64_t target = (te_rand_u64() & mask) | 1, start = (target - 1 - te_rand_below(1000)) & mask;
  flag_set_now(&f, start);
  flag_wait(&f, a, target, TECORE_WAIT_GEQ);
  TE_OK(tecore_memcpy_async(ddst, dsrc, bytes, a));

  te_sleep_ms(BLOCKED_MS);
  ck_assert_msg(tecore_stream_query(a) == TECORE_ERR_NOT_READY,
                "%u-bit %s flag 0x%llx: wait GEQ 0x%llx did not block", width,
                host_flag ? "host" : "device", (unsigned long long)start,
                (unsigned long long)target);
  te_expect_bytes_eq(dst, TE_POISON_BYTE, bytes, "copy destination before the release");
  /* a value still below the target keeps it blocked */
  flag_release(&f, (target - 1) & mask, b);
  if (!host_flag) ck_assert_int_eq(te_stream_wait(b, WAIT_MS), TECORE_SUCCESS);
  te_sleep_ms(BLOCKED_MS);
  ck_assert_int_eq(tecore_stream_query(a), TECORE_ERR_NOT_READY);
  te_expect_bytes_eq(dst, TE_POISON_BYTE, bytes, "copy destination after a short write");

  flag_release(&f, (target + te_rand_below(3)) & mask, b);
  ck_assert_msg(te_stream_wait(a, WAIT_MS) == TECORE_SUCCESS,
                "%u-bit %s flag: stream not released", width, host_flag ? "host" : "device");
  te_expect_mem_eq(dst, src, bytes, "copy destination after the release");
  ck_assert_int_eq(te_stream_wait(b, WAIT_MS), TECORE_SUCCESS);

  TE_OK(tecore_mem_free(dsrc));
  TE_OK(tecore_mem_free_host(dst));
  flag_free(&f);
  free(src);
  TE_OK(tecore_stream_destroy(a));
  TE_OK(tecore_stream_destroy(b));
}

START_TEST(wait64_released_by_stream) { wait_then_copy(64, 0); }
END_TEST
START_TEST(wait64_released_by_host) { wait_then_copy(64, 1); }
END_TEST
START_TEST(wait32_released_by_stream) { wait_then_copy(32, 0); }
END_TEST
START_TEST(wait32_released_by_host) { wait_then_copy(32, 1); }
END_TEST

/* Each condition: start blocked, a second non-matching value keeps it
 * blocked, the release value frees it. */
struct cond_case {
  tecore_wait_cond_t cond;
  const char *name;
  uint64_t value, start, still, release;
};

static void cond_cases(unsigned width, int host_flag) {
  uint64_t top = width == 64 ? 0xfffffffffffffff0ull : 0xfffffff0ull;
  uint64_t r = te_rand_u32() & 0xffffu;
  const struct cond_case cases[] = {
      /* GEQ is cyclic: 5 is "after" top, top - 16 is "before" it */
      {TECORE_WAIT_GEQ, "GEQ", top, top - 16, top - 1, 5},
      {TECORE_WAIT_GEQ, "GEQ", 1000 + r, 10 + r, 999 + r, 1000 + r},
      {TECORE_WAIT_EQ, "EQ", 77 + r, 78 + r, 76 + r, 77 + r},
      {TECORE_WAIT_AND, "AND", 0x10, 0x0f, 0x2f, 0x30},
      {TECORE_WAIT_NOR, "NOR", top, 0x0f, 0x0f, 0x07},
  };
  tecore_stream_t a = new_stream(), b = new_stream();
  struct flag f = flag_new(host_flag, width);
  tecore_devptr_t done = te_dalloc(64);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const struct cond_case *c = &cases[i];
    uint32_t zero = 0, one = 0;
    te_h2d(done, &zero, 4);
    flag_set_now(&f, c->start);
    flag_wait(&f, a, c->value, c->cond);
    TE_OK(tecore_stream_write_value32(a, done, 1));
    te_sleep_ms(BLOCKED_MS);
    ck_assert_msg(tecore_stream_query(a) == TECORE_ERR_NOT_READY,
                  "%u-bit %s wait %s 0x%llx passed with 0x%llx", width,
                  host_flag ? "host" : "device", c->name, (unsigned long long)c->value,
                  (unsigned long long)c->start);
    flag_release(&f, c->still, b);
    if (!host_flag) ck_assert_int_eq(te_stream_wait(b, WAIT_MS), TECORE_SUCCESS);
    te_sleep_ms(BLOCKED_MS);
    ck_assert_msg(tecore_stream_query(a) == TECORE_ERR_NOT_READY,
                  "%u-bit %s wait %s 0x%llx passed with 0x%llx", width,
                  host_flag ? "host" : "device", c->name, (unsigned long long)c->value,
                  (unsigned long long)c->still);
    te_d2h(&one, done, 4);
    ck_assert_uint_eq(one, 0);
    flag_release(&f, c->release, b);
    ck_assert_msg(te_stream_wait(a, WAIT_MS) == TECORE_SUCCESS,
                  "%u-bit %s wait %s 0x%llx not released by 0x%llx", width,
                  host_flag ? "host" : "device", c->name, (unsigned long long)c->value,
                  (unsigned long long)c->release);
    ck_assert_int_eq(te_stream_wait(b, WAIT_MS), TECORE_SUCCESS);
    te_d2h(&one, done, 4);
    ck_assert_uint_eq(one, 1);
  }
  /* a wait already satisfied does not block */
  flag_set_now(&f, 42);
  flag_wait(&f, a, 42, TECORE_WAIT_EQ);
  ck_assert_int_eq(te_stream_wait(a, WAIT_MS), TECORE_SUCCESS);
  TE_OK(tecore_mem_free(done));
  flag_free(&f);
  TE_OK(tecore_stream_destroy(a));
  TE_OK(tecore_stream_destroy(b));
}

START_TEST(conditions64_device) { cond_cases(64, 0); }
END_TEST
START_TEST(conditions32_device) { cond_cases(32, 0); }
END_TEST
START_TEST(conditions64_host) { cond_cases(64, 1); }
END_TEST
START_TEST(conditions32_host) { cond_cases(32, 1); }
END_TEST

/* write_value lands in order with other work and at full width. */
START_TEST(write_value_width) {
  tecore_devptr_t d = te_dalloc(64);
  te_poison_dev(d, 64);
  uint64_t v64 = te_rand_u64() | (1ull << 63);
  uint32_t v32 = te_rand_u32() | 1u;
  TE_OK(tecore_stream_write_value64(te_stream, d + 8, v64));
  TE_OK(tecore_stream_write_value32(te_stream, d + 20, v32));
  unsigned char back[64];
  te_d2h(back, d, 64);
  uint64_t g64;
  uint32_t g32;
  memcpy(&g64, back + 8, 8);
  memcpy(&g32, back + 20, 4);
  ck_assert_msg(g64 == v64, "write_value64: got 0x%llx want 0x%llx", (unsigned long long)g64,
                (unsigned long long)v64);
  ck_assert_uint_eq(g32, v32);
  te_expect_bytes_eq(back, TE_POISON_BYTE, 8, "bytes before the 64-bit write");
  te_expect_bytes_eq(back + 16, TE_POISON_BYTE, 4, "bytes between the writes");
  te_expect_bytes_eq(back + 24, TE_POISON_BYTE, 40, "bytes after the 32-bit write");
  TE_OK(tecore_mem_free(d));
}
END_TEST

/* The first launch of a kernel in a process must not wait for other
 * streams: a stream blocked on a flag the host (or the service engine)
 * releases later would deadlock it.  (Seen on cuda: the kernel table's
 * module was loaded at first launch, which waited for the blocked stream.)
 * The launch runs on a helper thread; if it is stuck, the host releases the
 * flag so the test ends with a failure instead of hanging. */
struct launch_job {
  tecore_ctx_t ctx;
  tecore_stream_t s;
  tecore_devptr_t d;
  size_t n;
  float v;
  tecore_result_t r;
  char detail[256];
  int done;
};

static void *launch_job_main(void *arg) {
  struct launch_job *j = arg;
  j->r = tecore_ctx_set_current(j->ctx);
  if (j->r == TECORE_SUCCESS) j->r = tecore_fill(j->d, TECORE_DTYPE_F32, j->n, j->v, j->s);
  if (j->r == TECORE_SUCCESS) j->r = te_stream_wait(j->s, WAIT_MS);
  snprintf(j->detail, sizeof j->detail, "%s", tecore_last_error());
  __atomic_store_n(&j->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

START_TEST(first_launch_while_stream_waits) {
  tecore_stream_t a = new_stream(), b = new_stream();
  struct flag f = flag_new(1, 64);
  flag_set_now(&f, 0);
  size_t n = 1000 + te_rand_below(10000);
  struct launch_job job = {.ctx = te_ctx, .s = b, .d = te_dalloc(n * 4), .n = n,
                           .v = te_rand_float(1, 10)};
  te_poison_dev(job.d, n * 4);
  flag_wait(&f, a, 1, TECORE_WAIT_GEQ);
  te_sleep_ms(BLOCKED_MS);
  ck_assert_int_eq(tecore_stream_query(a), TECORE_ERR_NOT_READY);
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, launch_job_main, &job), 0);
  int waited = 0;
  while (!__atomic_load_n(&job.done, __ATOMIC_ACQUIRE) && waited < 10000) {
    te_sleep_ms(5);
    waited += 5;
  }
  int stuck = !__atomic_load_n(&job.done, __ATOMIC_ACQUIRE);
  int a_still_blocked = tecore_stream_query(a) == TECORE_ERR_NOT_READY;
  flag_set_now(&f, 1); /* host release: unblocks a, and a stuck launch with it */
  pthread_join(th, NULL);
  ck_assert_msg(!stuck, "the first kernel launch on stream b did not finish in 10 s while "
                "stream a waited on a flag (it finished only after the release): a first "
                "launch must not wait for other streams");
  ck_assert_msg(job.r == TECORE_SUCCESS, "fill on b: %s: %s", tecore_result_name(job.r),
                job.detail);
  ck_assert_msg(a_still_blocked, "stream a passed its wait without a release");
  ck_assert_int_eq(te_stream_wait(a, WAIT_MS), TECORE_SUCCESS);
  float *got = malloc(n * 4);
  te_d2h(got, job.d, n * 4);
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(got[i] == job.v, "got[%zu] = %g, want %g", i, (double)got[i], (double)job.v);
  free(got);
  TE_OK(tecore_mem_free(job.d));
  flag_free(&f);
  TE_OK(tecore_stream_destroy(a));
  TE_OK(tecore_stream_destroy(b));
}
END_TEST

static Suite *stream_suite(void) {
  Suite *s = suite_create("stream");
  TCase *tc = te_tcase(s, "order", 1);
  tcase_add_test(tc, in_order_chain);
  tcase_add_test(tc, cross_stream_wait_event);
  tcase_add_test(tc, priorities);
  tc = te_tcase(s, "events", 1);
  tcase_add_test(tc, events_basic);
  tcase_add_test(tc, events_not_ready);
  tc = te_tcase(s, "memops", 1);
  tcase_add_test(tc, write_value_width);
  tcase_add_test(tc, first_launch_while_stream_waits);
  tcase_add_test(tc, wait64_released_by_stream);
  tcase_add_test(tc, wait64_released_by_host);
  tcase_add_test(tc, wait32_released_by_stream);
  tcase_add_test(tc, wait32_released_by_host);
  tcase_add_test(tc, conditions64_device);
  tcase_add_test(tc, conditions32_device);
  tcase_add_test(tc, conditions64_host);
  tcase_add_test(tc, conditions32_host);
  return s;
}

TE_TEST_MAIN(stream_suite, TE_TEST_DEVICE)
