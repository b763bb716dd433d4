/* SPDX-License-Identifier: Apache-2.0 */
/* check_svc.c -- the service engine (te/svc.h):
 *   - a write then a read of a file handed over in stream order (random
 *     bytes, the read buffer poisoned first), through a fixed buffer;
 *   - a callback runs after the stream's earlier work and before its later
 *     work (values copied through it, bit for bit);
 *   - a captured graph hands the engine the job at every replay;
 *   - a poll that says "not yet" does not hold the engine: another job
 *     runs meanwhile (and releases it); a failing poll fails its job;
 *   - failures come back through the next call, the stream never hangs:
 *     an injected EIO on a write and on a read (read buffer left 0xff, not
 *     stale), a short read, a read that never completes (a pipe) failing
 *     by TECORE_SVC_TIMEOUT_MS, a wait whose job was never launched ending
 *     by the backend's wait timeout (vdev);
 *   - a job with a run queued is not destroyed (NOT_READY, nothing waits);
 *   - the idle engine's CPU time per second, and its busy figures;
 *   - argument checks.
 * Every stream wait is bounded (te_stream_wait). */
#include "tests.h"
#include <pthread.h>

#define WAIT_MS 30000

static void *pinned(size_t bytes) {
  void *p = NULL;
  TE_OK(tecore_mem_alloc_host(bytes, &p));
  ck_assert_ptr_nonnull(p);
  return p;
}

static int tmpfile_in(char *dir, size_t n) {
  te_tmpdir(dir, n);
  char path[4200];
  snprintf(path, sizeof path, "%s/f", dir);
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
  return fd;
}

START_TEST(write_then_read_in_stream_order) {
  char dir[4096];
  int fd = tmpfile_in(dir, sizeof dir);
  size_t bytes = 4096 * (1 + te_rand_below(64));
  unsigned char *a = pinned(2 * bytes), *b = a + bytes;
  unsigned char *want = malloc(bytes);
  te_rand_bytes(want, bytes);
  tecore_devptr_t src = te_dalloc(bytes);
  te_h2d(src, want, bytes);
  te_poison_host(a, 2 * bytes);
  int idx = -1;
  TE_OK(tecore_svc_register_buffer(a, 2 * bytes, &idx));
  ck_assert_int_ge(idx, 0);
  struct tecore_svc_op w = {.kind = TECORE_SVC_WRITE, .fd = fd, .buf = a, .bytes = bytes,
                            .buf_index = idx, .name = "write test"};
  struct tecore_svc_op r = {.kind = TECORE_SVC_READ, .fd = fd, .buf = b, .bytes = bytes,
                            .buf_index = idx, .name = "read test"};
  tecore_svc_job_t *jw = NULL, *jr = NULL;
  TE_OK(tecore_svc_job_create(&w, 1, &jw));
  TE_OK(tecore_svc_job_create(&r, 1, &jr));
  /* device -> a, a -> file, file -> b, b -> device: one stream, no host sync */
  tecore_devptr_t dst = te_dalloc(bytes);
  TE_OK(tecore_memset_d8_async(dst, TE_POISON_BYTE, bytes, te_stream));
  TE_OK(tecore_memcpy_async(te_hptr(a), src, bytes, te_stream));
  TE_OK(tecore_svc_job_enqueue(jw, te_stream));
  TE_OK(tecore_svc_job_enqueue(jr, te_stream));
  TE_OK(tecore_memcpy_async(dst, te_hptr(b), bytes, te_stream));
  ck_assert_int_eq(te_stream_wait(te_stream, WAIT_MS), TECORE_SUCCESS);
  unsigned char *got = malloc(bytes);
  te_d2h(got, dst, bytes);
  te_expect_mem_eq(got, want, bytes, "file round trip");
  uint64_t runs = 0;
  TE_OK(tecore_svc_job_status(jw, &runs));
  ck_assert_uint_eq(runs, 1);
  struct tecore_svc_stats st;
  TE_OK(tecore_svc_get_stats(&st));
  ck_assert_int_eq(st.running, 1);
  ck_assert_uint_ge(st.bytes_written, bytes);
  ck_assert_uint_ge(st.bytes_read, bytes);
  printf("# engine: %s\n", st.why);
  TE_OK(tecore_svc_job_destroy(jw));
  TE_OK(tecore_svc_job_destroy(jr));
  TE_OK(tecore_svc_unregister_buffer(idx));
  TE_OK(tecore_svc_get_stats(&st));
  ck_assert_int_eq(st.running, 0);   /* the last user gone: the engine stopped */
  TE_OK(tecore_mem_free(src));
  TE_OK(tecore_mem_free(dst));
  TE_OK(tecore_mem_free_host(a));
  free(want);
  free(got);
  close(fd);
  te_rmtree(dir);
}
END_TEST

/* A callback that copies n floats from src to dst and scales by 2. */
struct copy_arg {
  const float *src;
  float *dst;
  size_t n;
  int calls;
};
static tecore_result_t copy_cb(void *p) {
  struct copy_arg *c = p;
  for (size_t i = 0; i < c->n; i++) c->dst[i] = 2.0f * c->src[i];
  c->calls++;
  return TECORE_SUCCESS;
}

START_TEST(callback_between_stream_work) {
  size_t n = 256 + te_rand_below(4096);
  float *x = malloc(n * 4), *got = malloc(n * 4);
  te_rand_floats(x, n, -4, 4);
  float *ha = pinned(n * 4), *hb = pinned(n * 4);
  te_poison_host(ha, n * 4);
  te_poison_host(hb, n * 4);
  tecore_devptr_t d = te_dalloc(n * 4), e = te_dalloc(n * 4);
  te_h2d(d, x, n * 4);
  te_poison_dev(e, n * 4);
  struct copy_arg ca = {.src = ha, .dst = hb, .n = n};
  struct tecore_svc_op op = {.kind = TECORE_SVC_CALL, .fn = copy_cb, .arg = &ca, .name = "copy"};
  tecore_svc_job_t *j = NULL;
  TE_OK(tecore_svc_job_create(&op, 1, &j));
  TE_OK(tecore_memcpy_async(te_hptr(ha), d, n * 4, te_stream));   /* before: fills ha */
  TE_OK(tecore_svc_job_enqueue(j, te_stream));
  TE_OK(tecore_memcpy_async(e, te_hptr(hb), n * 4, te_stream));   /* after: reads hb */
  ck_assert_int_eq(te_stream_wait(te_stream, WAIT_MS), TECORE_SUCCESS);
  te_d2h(got, e, n * 4);
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(got[i] == 2.0f * x[i], "[%zu] %g, want %g", i, (double)got[i],
                  (double)(2.0f * x[i]));
  ck_assert_int_eq(ca.calls, 1);
  TE_OK(tecore_svc_job_destroy(j));
  TE_OK(tecore_mem_free(d));
  TE_OK(tecore_mem_free(e));
  TE_OK(tecore_mem_free_host(ha));
  TE_OK(tecore_mem_free_host(hb));
  free(x);
  free(got);
}
END_TEST

static tecore_result_t count_cb(void *p) {
  (*(int *)p)++;
  return TECORE_SUCCESS;
}

/* A poll that is done only once another job has run: the engine must
 * keep turning while a poll says "not yet" (a verbs transfer waiting for
 * its peer), or the other job never runs. */
struct poll_arg {
  int release, polls, fail_after;
  int released_before_done;
};
static tecore_result_t wait_poll(void *p) {
  struct poll_arg *a = p;
  a->polls++;
  if (a->fail_after && a->polls >= a->fail_after) {
    tecore_set_error("the transfer broke (test)");
    return TECORE_ERR_SYSTEM;
  }
  if (!__atomic_load_n(&a->release, __ATOMIC_ACQUIRE)) return TECORE_ERR_NOT_READY;
  a->released_before_done = 1;
  return TECORE_SUCCESS;
}
static tecore_result_t release_cb(void *p) {
  __atomic_store_n(&((struct poll_arg *)p)->release, 1, __ATOMIC_RELEASE);
  return TECORE_SUCCESS;
}

START_TEST(poll_op_lets_other_jobs_run) {
  struct poll_arg pa = {0};
  struct tecore_svc_op pop = {.kind = TECORE_SVC_POLL, .fn = wait_poll, .arg = &pa,
                              .name = "poll", .buf_index = -1};
  struct tecore_svc_op rop = {.kind = TECORE_SVC_CALL, .fn = release_cb, .arg = &pa,
                              .name = "release", .buf_index = -1};
  tecore_svc_job_t *jp = NULL, *jr = NULL;
  TE_OK(tecore_svc_job_create(&pop, 1, &jp));
  TE_OK(tecore_svc_job_create(&rop, 1, &jr));
  tecore_stream_t s2 = NULL;
  TE_OK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s2));
  TE_OK(tecore_svc_job_enqueue(jp, te_stream));
  TE_OK(tecore_svc_kick());
  usleep(20000);   /* the engine is polling jp now */
  ck_assert_msg(__atomic_load_n(&pa.polls, __ATOMIC_ACQUIRE) > 0, "the poll was never called");
  TE_OK(tecore_svc_job_enqueue(jr, s2));
  TE_OK(tecore_svc_kick());
  ck_assert_int_eq(te_stream_wait(s2, WAIT_MS), TECORE_SUCCESS);
  ck_assert_int_eq(te_stream_wait(te_stream, WAIT_MS), TECORE_SUCCESS);
  ck_assert_msg(pa.released_before_done && pa.polls > 1, "polls %d", pa.polls);
  uint64_t runs = 0;
  TE_OK(tecore_svc_job_status(jp, &runs));
  ck_assert_int_eq(runs, 1);
  /* a poll that fails: the job's sticky error names it, the stream goes on */
  struct poll_arg pf = {.fail_after = 3};
  struct tecore_svc_op fop = {.kind = TECORE_SVC_POLL, .fn = wait_poll, .arg = &pf,
                              .name = "broken transfer", .buf_index = -1};
  tecore_svc_job_t *jf = NULL;
  TE_OK(tecore_svc_job_create(&fop, 1, &jf));
  /* the enqueue's wait returns the run's failure when the engine met it
   * before the call returned (three polls: a slow host, ASan): either */
  tecore_result_t q = tecore_svc_job_enqueue(jf, te_stream);
  ck_assert_msg(q == TECORE_SUCCESS ||
                    (q == TECORE_ERR_SYSTEM && strstr(tecore_last_error(), "broke (test)")),
                "enqueue: %s: %s", tecore_result_name(q), tecore_last_error());
  TE_OK(tecore_svc_kick());
  ck_assert_int_eq(te_stream_wait(te_stream, WAIT_MS), TECORE_SUCCESS);
  tecore_result_t r = tecore_svc_job_status(jf, NULL);
  ck_assert_msg(r == TECORE_ERR_SYSTEM && strstr(tecore_last_error(), "broken transfer") &&
                    strstr(tecore_last_error(), "broke (test)"),
                "status %s: %s", tecore_result_name(r), tecore_last_error());
  ck_assert_int_eq(pf.polls, 3);
  TE_OK(tecore_svc_job_destroy(jf));
  TE_OK(tecore_svc_job_destroy(jp));
  TE_OK(tecore_svc_job_destroy(jr));
  TE_OK(tecore_stream_destroy(s2));
}
END_TEST

static tecore_result_t ctx_cb(void *arg) { return tecore_ctx_get_current(arg); }

/* The engine thread ran callbacks with no current context, so a device
 * call in one opened device 0's primary context whatever the job's
 * creator used (on 4 H100s rank 2 of check_verbs was left 16 descriptors
 * of /dev/nvidia0): a callback runs in its creator's context. */
START_TEST(callback_runs_in_the_creators_context) {
  tecore_ctx_t mine = NULL, seen = (tecore_ctx_t)(uintptr_t)0x5a5a;
  TE_OK(tecore_ctx_get_current(&mine));
  ck_assert_msg(mine != NULL, "the fixture's thread has no current context");
  struct tecore_svc_op op = {.kind = TECORE_SVC_CALL, .fn = ctx_cb, .arg = &seen, .name = "ctx"};
  tecore_svc_job_t *j = NULL;
  TE_OK(tecore_svc_job_create(&op, 1, &j));
  TE_OK(tecore_svc_job_enqueue(j, te_stream));
  TE_OK(tecore_svc_kick());
  ck_assert_int_eq(te_stream_wait(te_stream, WAIT_MS), TECORE_SUCCESS);
  ck_assert_msg(seen == mine, "the callback ran in context %p, its creator's is %p", (void *)seen,
                (void *)mine);
  TE_OK(tecore_svc_job_destroy(j));
}
END_TEST

START_TEST(graph_replays_hand_off_each_time) {
  int count = 0;
  struct tecore_svc_op op = {.kind = TECORE_SVC_CALL, .fn = count_cb, .arg = &count};
  tecore_svc_job_t *j = NULL;
  TE_OK(tecore_svc_job_create(&op, 1, &j));
  /* the graph: a value written before the job, copied after it */
  tecore_devptr_t d = te_dalloc(8);
  TE_OK(tecore_stream_begin_capture(te_stream, TECORE_CAPTURE_THREAD_LOCAL));
  TE_OK(tecore_memset_d32_async(d, 7, 2, te_stream));
  TE_OK(tecore_svc_job_enqueue(j, te_stream));
  TE_OK(tecore_memset_d32_async(d, 9, 1, te_stream));
  tecore_graph_t g = NULL;
  TE_OK(tecore_stream_end_capture(te_stream, &g));
  tecore_graph_exec_t ge = NULL;
  TE_OK(tecore_graph_instantiate(&ge, g));
  ck_assert_int_eq(count, 0);   /* capture ran nothing */
  int reps = 3 + (int)te_rand_below(5);
  for (int k = 0; k < reps; k++) {
    TE_OK(tecore_graph_launch(ge, te_stream));
    TE_OK(tecore_svc_kick());
  }
  ck_assert_int_eq(te_stream_wait(te_stream, WAIT_MS), TECORE_SUCCESS);
  ck_assert_int_eq(count, reps);
  uint64_t runs = 0;
  TE_OK(tecore_svc_job_status(j, &runs));
  ck_assert_uint_eq(runs, (uint64_t)reps);
  uint32_t v[2];
  te_d2h(v, d, 8);
  ck_assert_uint_eq(v[0], 9);
  ck_assert_uint_eq(v[1], 7);
  TE_OK(tecore_graph_exec_destroy(ge));
  TE_OK(tecore_graph_destroy(g));
  TE_OK(tecore_svc_job_destroy(j));
  TE_OK(tecore_mem_free(d));
}
END_TEST

/* One write or read of a file, with an injected fault: the stream goes on,
 * the job reports the errno and the op's name. */
static void injected(tecore_svc_op_kind_t kind) {
  char dir[4096];
  int fd = tmpfile_in(dir, sizeof dir);
  size_t bytes = 8192;
  unsigned char *buf = pinned(bytes);
  te_rand_bytes(buf, bytes);
  ck_assert_int_eq(pwrite(fd, buf, bytes, 0), (ssize_t)bytes);   /* something to read */
  struct tecore_svc_op op = {.kind = kind, .fd = fd, .buf = buf, .bytes = bytes, .buf_index = -1,
                             .name = "tensor 'blk1.h' in /x/spill.0"};
  tecore_svc_job_t *j = NULL;
  TE_OK(tecore_svc_job_create(&op, 1, &j));
  TE_OK(tecore_svc_inject_fault(kind, 1, EIO));
  TE_OK(tecore_svc_job_launch(j, te_stream));
  tecore_result_t wr = tecore_svc_job_wait(j, te_stream);   /* may already see the error */
  ck_assert_int_eq(te_stream_wait(te_stream, WAIT_MS), TECORE_SUCCESS);   /* no hang */
  (void)wr;
  uint64_t runs = 0;
  tecore_result_t r = tecore_svc_job_status(j, &runs);
  ck_assert_msg(r == TECORE_ERR_SYSTEM, "status %s: %s", tecore_result_name(r),
                tecore_last_error());
  ck_assert_uint_eq(runs, 1);
  const char *e = tecore_last_error();
  ck_assert_msg(strstr(e, "blk1.h") && strstr(e, "spill.0") && strstr(e, strerror(EIO)),
                "the error names neither the tensor, the file nor the errno: %s", e);
  if (kind == TECORE_SVC_READ) te_expect_bytes_eq(buf, 0xff, bytes, "failed read's buffer");
  /* the next launch reports it instead of running again */
  TE_EXPECT_ERR(TECORE_ERR_SYSTEM, "blk1.h", tecore_svc_job_launch(j, te_stream));
  TE_OK(tecore_svc_job_destroy(j));
  TE_OK(tecore_mem_free_host(buf));
  close(fd);
  te_rmtree(dir);
}

START_TEST(injected_eio_on_write) { injected(TECORE_SVC_WRITE); }
END_TEST
START_TEST(injected_eio_on_read) { injected(TECORE_SVC_READ); }
END_TEST

START_TEST(short_read_is_an_error_not_garbage) {
  char dir[4096];
  int fd = tmpfile_in(dir, sizeof dir);
  unsigned char *buf = pinned(8192);
  te_rand_bytes(buf, 8192);
  ck_assert_int_eq(pwrite(fd, buf, 4096, 0), 4096);
  struct tecore_svc_op op = {.kind = TECORE_SVC_READ, .fd = fd, .buf = buf, .bytes = 8192,
                             .buf_index = -1, .name = "tensor 't' in f"};
  tecore_svc_job_t *j = NULL;
  TE_OK(tecore_svc_job_create(&op, 1, &j));
  TE_OK(tecore_svc_job_launch(j, te_stream));
  (void)tecore_svc_job_wait(j, te_stream);
  ck_assert_int_eq(te_stream_wait(te_stream, WAIT_MS), TECORE_SUCCESS);
  TE_EXPECT_ERR(TECORE_ERR_SYSTEM, "short read", tecore_svc_job_status(j, NULL));
  te_expect_bytes_eq(buf, 0xff, 8192, "short read's buffer");
  TE_OK(tecore_svc_job_destroy(j));
  TE_OK(tecore_mem_free_host(buf));
  close(fd);
  te_rmtree(dir);
}
END_TEST

START_TEST(read_that_never_ends_times_out) {
  setenv("TECORE_SVC_TIMEOUT_MS", "300", 1);   /* read once, at the first job */
  int p[2];
  ck_assert_int_eq(pipe(p), 0);
  unsigned char *buf = pinned(4096);
  struct tecore_svc_op op = {.kind = TECORE_SVC_READ, .fd = p[0], .buf = buf, .bytes = 4096,
                             .buf_index = -1, .name = "pipe"};
  tecore_svc_job_t *j = NULL;
  TE_OK(tecore_svc_job_create(&op, 1, &j));
  TE_OK(tecore_svc_job_enqueue(j, te_stream));
  ck_assert_int_eq(te_stream_wait(te_stream, WAIT_MS), TECORE_SUCCESS);   /* bounded */
  TE_EXPECT_ERR(TECORE_ERR_TIMEOUT, "TECORE_SVC_TIMEOUT_MS", tecore_svc_job_status(j, NULL));
  /* the cancelled read completes in the engine; then the job can go */
  tecore_result_t r;
  for (int k = 0; (r = tecore_svc_job_destroy(j)) == TECORE_ERR_NOT_READY && k < 3000; k++)
    te_sleep_ms(10);
  TE_OK(r);
  TE_OK(tecore_mem_free_host(buf));
  close(p[0]);
  close(p[1]);
}
END_TEST

START_TEST(wait_without_launch_is_bounded_by_the_backend) {
  if (te_backend_kind != TECORE_BACKEND_VDEV) return;   /* the bound is vdev's tunable */
  setenv("TECORE_VDEV_WAIT_TIMEOUT", "1", 1);   /* read at the stream's first wait */
  struct tecore_svc_op op = {.kind = TECORE_SVC_CALL, .fn = count_cb, .arg = &(int){0}};
  tecore_svc_job_t *j = NULL;
  TE_OK(tecore_svc_job_create(&op, 1, &j));
  TE_OK(tecore_svc_job_wait(j, te_stream));   /* nobody will ever complete it */
  tecore_result_t r = te_stream_wait(te_stream, WAIT_MS);
  ck_assert_msg(r == TECORE_ERR_TIMEOUT, "stream: %s", tecore_result_name(r));
  ck_assert_int_eq(tecore_stream_synchronize(te_stream), TECORE_ERR_TIMEOUT);
  TE_OK(tecore_svc_job_destroy(j));
  /* the stream is poisoned by design: a fresh one for the teardown */
  TE_OK(tecore_stream_destroy(te_stream));
  TE_OK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &te_stream));
}
END_TEST

START_TEST(destroy_with_a_run_queued_is_refused) {
  uint64_t *gate = pinned(8);
  *gate = 0;
  tecore_devptr_t gd;
  TE_OK(tecore_mem_host_device_ptr(gate, &gd));
  int count = 0;
  struct tecore_svc_op op = {.kind = TECORE_SVC_CALL, .fn = count_cb, .arg = &count};
  tecore_svc_job_t *j = NULL;
  TE_OK(tecore_svc_job_create(&op, 1, &j));
  TE_OK(tecore_stream_wait_value64(te_stream, gd, 1, TECORE_WAIT_EQ));
  TE_OK(tecore_svc_job_enqueue(j, te_stream));
  TE_EXPECT_ERR(TECORE_ERR_NOT_READY, "queued", tecore_svc_job_destroy(j));
  __atomic_store_n(gate, 1, __ATOMIC_RELEASE);
  ck_assert_int_eq(te_stream_wait(te_stream, WAIT_MS), TECORE_SUCCESS);
  ck_assert_int_eq(count, 1);
  TE_OK(tecore_svc_job_destroy(j));
  TE_OK(tecore_mem_free_host(gate));
}
END_TEST

START_TEST(idle_engine_burns_no_core) {
  int count = 0;
  struct tecore_svc_op op = {.kind = TECORE_SVC_CALL, .fn = count_cb, .arg = &count};
  tecore_svc_job_t *j = NULL;
  TE_OK(tecore_svc_job_create(&op, 1, &j));
  /* busy: many hand-offs back to back */
  int n = 200;
  struct tecore_svc_stats s0, s1, s2;
  TE_OK(tecore_svc_get_stats(&s0));
  for (int k = 0; k < n; k++) TE_OK(tecore_svc_job_enqueue(j, te_stream));
  ck_assert_int_eq(te_stream_wait(te_stream, WAIT_MS), TECORE_SUCCESS);
  TE_OK(tecore_svc_get_stats(&s1));
  ck_assert_int_eq(count, n);
  double busy_cpu = (s1.cpu_s - s0.cpu_s) / (s1.up_s - s0.up_s);
  /* idle: a second with nothing to do */
  te_sleep_ms(1000);
  TE_OK(tecore_svc_get_stats(&s2));
  double idle_cpu = (s2.cpu_s - s1.cpu_s) / (s2.up_s - s1.up_s);
  printf("# engine: %d hand-offs in %.3f s, CPU %.3f s/s busy; idle CPU %.4f s/s, %.0f "
         "wake-ups/s\n", n, s1.up_s - s0.up_s, busy_cpu, idle_cpu,
         (double)(s2.wakeups - s1.wakeups) / (s2.up_s - s1.up_s));
  ck_assert_msg(idle_cpu < 0.05, "the idle engine used %.3f CPU seconds per second", idle_cpu);
  TE_OK(tecore_svc_job_destroy(j));
}
END_TEST

/* The probe (liburing is loaded at run time) and the engine agree on
 * whether there is an io_uring; a "no" comes with a reason. */
START_TEST(uring_probe_agrees_with_the_engine) {
  int ok = -1;
  const char *why = NULL;
  ck_assert_int_eq(tecore_svc_uring_probe(&ok, &why), TECORE_SUCCESS);
  ck_assert(ok == 0 || ok == 1);
  ck_assert_ptr_nonnull(why);
  ck_assert_msg(strlen(why) > 0, "the probe gives no reason");
  tecore_svc_job_t *j = NULL;
  int n = 0;
  struct tecore_svc_op op = {.kind = TECORE_SVC_CALL, .fn = count_cb, .arg = &n, .buf_index = -1};
  ck_assert_int_eq(tecore_svc_job_create(&op, 1, &j), TECORE_SUCCESS);
  struct tecore_svc_stats st;
  ck_assert_int_eq(tecore_svc_get_stats(&st), TECORE_SUCCESS);
  ck_assert_int_eq(st.running, 1);
  ck_assert_msg(st.uring == ok, "probe says %d (%s), the engine %d (%s)", ok, why, st.uring, st.why);
  ck_assert_int_eq(tecore_svc_job_destroy(j), TECORE_SUCCESS);
}
END_TEST

START_TEST(bad_arguments) {
  tecore_svc_job_t *j = NULL;
  struct tecore_svc_op op = {.kind = TECORE_SVC_READ, .fd = -1, .buf = &op, .bytes = 1,
                             .buf_index = -1};
  TE_EXPECT_INVALID("job", tecore_svc_job_create(&op, 1, NULL));
  TE_EXPECT_INVALID("ops", tecore_svc_job_create(NULL, 1, &j));
  TE_EXPECT_INVALID("nops", tecore_svc_job_create(&op, 0, &j));
  TE_EXPECT_INVALID("fd", tecore_svc_job_create(&op, 1, &j));
  op.fd = 0;
  op.bytes = 0;
  TE_EXPECT_INVALID("bytes", tecore_svc_job_create(&op, 1, &j));
  op.bytes = 1;
  op.buf_index = 999;
  TE_EXPECT_INVALID("buf_index", tecore_svc_job_create(&op, 1, &j));
  op.kind = TECORE_SVC_CALL;
  op.fn = NULL;
  TE_EXPECT_INVALID("fn", tecore_svc_job_create(&op, 1, &j));
  op.kind = TECORE_SVC_POLL;
  TE_EXPECT_INVALID("TECORE_SVC_POLL", tecore_svc_job_create(&op, 1, &j));
  op.kind = (tecore_svc_op_kind_t)42;
  TE_EXPECT_INVALID("kind", tecore_svc_job_create(&op, 1, &j));
  ck_assert_ptr_null(j);
  TE_EXPECT_INVALID("job", tecore_svc_job_destroy(NULL));
  TE_EXPECT_INVALID("job", tecore_svc_job_launch(NULL, te_stream));
  TE_EXPECT_INVALID("job", tecore_svc_job_wait(NULL, te_stream));
  TE_EXPECT_INVALID("job", tecore_svc_job_status(NULL, NULL));
  TE_EXPECT_INVALID("st", tecore_svc_get_stats(NULL));
  int idx;
  TE_EXPECT_INVALID("buf", tecore_svc_register_buffer(NULL, 1, &idx));
  TE_EXPECT_INVALID("index", tecore_svc_register_buffer(&idx, 1, NULL));
  TE_EXPECT_INVALID("index", tecore_svc_unregister_buffer(5));
  TE_EXPECT_INVALID("kind", tecore_svc_inject_fault(TECORE_SVC_CALL, 1, EIO));
  TE_EXPECT_INVALID("err", tecore_svc_inject_fault(TECORE_SVC_READ, 1, 0));
  TE_EXPECT_INVALID("supported", tecore_svc_uring_probe(NULL, NULL));
}
END_TEST

/* Misuse (issue 28), each a test that failed before its fix. */

static tecore_result_t nop_call(void *p) {
  (void)p;
  return TECORE_SUCCESS;
}

/* a second destroy, or a call after destroy, was a use-after-free */
START_TEST(job_destroy_twice_and_use_after_destroy) {
  struct tecore_svc_op op = {.kind = TECORE_SVC_CALL, .fn = nop_call, .name = "nop"};
  tecore_svc_job_t *j = NULL;
  TE_OK(tecore_svc_job_create(&op, 1, &j));
  TE_OK(tecore_svc_job_destroy(j));
  TE_EXPECT_INVALID("tecore_svc_job_destroy: job", tecore_svc_job_destroy(j));
  TE_EXPECT_INVALID("tecore_svc_job_launch: job", tecore_svc_job_launch(j, te_stream));
  TE_EXPECT_INVALID("tecore_svc_job_wait: job", tecore_svc_job_wait(j, te_stream));
  TE_EXPECT_INVALID("tecore_svc_job_status: job", tecore_svc_job_status(j, NULL));
}
END_TEST

/* an offset that wraps, a registration past the buffer, an op past its
 * registration: all were SUCCESS */
START_TEST(offsets_and_buffers_out_of_bounds_refused) {
  unsigned char *a = pinned(8192);
  struct tecore_svc_op op = {.kind = TECORE_SVC_READ, .fd = 0, .buf = a, .bytes = 4096,
                             .offset = UINT64_MAX - 100, .buf_index = -1};
  tecore_svc_job_t *j = NULL;
  TE_EXPECT_INVALID("offset", tecore_svc_job_create(&op, 1, &j));
  op.offset = (uint64_t)INT64_MAX - 10;
  TE_EXPECT_INVALID("offset", tecore_svc_job_create(&op, 1, &j));
  int idx = -1;
  TE_EXPECT_INVALID("bytes", tecore_svc_register_buffer(a, 1 << 20, &idx));
  TE_EXPECT_INVALID("bytes", tecore_svc_register_buffer(a + 4096, 8192, &idx));
  ck_assert_int_eq(idx, -1);
  TE_OK(tecore_svc_register_buffer(a, 4096, &idx));
  op.offset = 0;
  op.buf_index = idx;
  op.buf = a + 2048;   /* half past the registration */
  TE_EXPECT_INVALID("registered buffer", tecore_svc_job_create(&op, 1, &j));
  ck_assert_ptr_null(j);
  op.buf = a;
  TE_OK(tecore_svc_job_create(&op, 1, &j));
  TE_OK(tecore_svc_job_destroy(j));
  TE_OK(tecore_svc_unregister_buffer(idx));
  TE_OK(tecore_mem_free_host(a));
}
END_TEST

static Suite *svc_suite(void) {
  Suite *s = suite_create("svc");
  TCase *tc = te_tcase(s, "handoff", 1);
  tcase_add_test(tc, write_then_read_in_stream_order);
  tcase_add_test(tc, callback_between_stream_work);
  tcase_add_test(tc, callback_runs_in_the_creators_context);
  tcase_add_test(tc, graph_replays_hand_off_each_time);
  tcase_add_test(tc, poll_op_lets_other_jobs_run);
  tc = te_tcase(s, "errors", 1);
  tcase_add_test(tc, injected_eio_on_write);
  tcase_add_test(tc, injected_eio_on_read);
  tcase_add_test(tc, short_read_is_an_error_not_garbage);
  tcase_add_test(tc, read_that_never_ends_times_out);
  tcase_add_test(tc, wait_without_launch_is_bounded_by_the_backend);
  tcase_add_test(tc, destroy_with_a_run_queued_is_refused);
  tcase_add_test(tc, bad_arguments);
  tcase_add_test(tc, uring_probe_agrees_with_the_engine);
  tcase_add_test(tc, job_destroy_twice_and_use_after_destroy);
  tcase_add_test(tc, offsets_and_buffers_out_of_bounds_refused);
  tc = te_tcase(s, "cost", 1);
  tcase_add_test(tc, idle_engine_burns_no_core);
  return s;
}

TE_TEST_MAIN(svc_suite, TE_TEST_DEVICE)
