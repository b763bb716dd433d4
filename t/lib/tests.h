/* SPDX-License-Identifier: Apache-2.0 */
/* tests.h -- the harness every t/check_*.c suite shares: TAP main, backend
 * skip, device fixture, seeded random inputs, poison fills and compares
 * that say where and by how much a result is wrong.
 *
 * Include it first in a suite (it defines _GNU_SOURCE).  A suite is one
 * program; main is TE_TEST_MAIN(make_suite, flags), which
 *   - prints "# seed N" (TE_TEST_SEED=N reproduces a run; otherwise a fresh
 *     seed is drawn each run) and "# backend NAME";
 *   - with TE_TEST_DEVICE, probes tecore_init() in a forked child (so the
 *     runner process never touches the device: on cuda a context does not
 *     survive fork) and, when TE_DEVICE=cuda finds no driver or no GPU,
 *     prints "1..0 # SKIP no GPU: <detail>", which tap-driver.sh counts as
 *     a skip;
 *   - runs the suite with TAP on stdout and exits 0: the TAP lines carry the
 *     result and tap-driver.sh turns "not ok" into a failure.
 * Tests use only the public API (<te/core.h>).  Device set-up happens only
 * in checked fixtures (te_dev_setup / te_dev_teardown), i.e. inside the
 * forked child that runs one test.
 *
 * NCCL_NVLS_ENABLE=0 is put in the environment of every suite (unless the
 * caller set it): no test may create an NVLink multicast object on a real
 * GPU machine.  check_vmm lifts it only when the backend is vdev. */
#ifndef TE_TESTS_H
#define TE_TESTS_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <te/core.h>
#include "rng.h"

#define TE_T_UNUSED __attribute__((unused))

/* Check's ck_assert_msg (and every ck_assert_* built on it) marks a point
 * on each success: a message to the runner, which unpacks them all after
 * the test by shifting its buffer, quadratic in their number (and a byte
 * loop under ASan).  Suites that assert element by element spent most of
 * their time there.  Here a success does nothing; a failure is reported
 * as before (the marked point only named the last assertion passed before
 * a crash, which the sanitizers' stack traces name better). */
#undef ck_assert_msg
#define ck_assert_msg(expr, ...)                                                     \
  ((expr) ? (void)0                                                                  \
          : _ck_assert_failed(__FILE__, __LINE__, "Assertion '" #expr "' failed",    \
                              ##__VA_ARGS__))

/* Per-test time limit (seconds) under Check's fork mode.  Generous: the
 * sanitizer build on two shared cores is several times slower than a plain
 * one.  CK_TIMEOUT_MULTIPLIER scales it further. */
#define TE_TEST_TIMEOUT 120

/* ---- random inputs ----------------------------------------------------------
 * xoshiro256** seeded through splitmix64.  main() seeds it once; under fork
 * mode each test starts from that state, so a failing test reproduces with
 * TE_TEST_SEED alone (CK_RUN_CASE / CK_RUN_SUITE select it). */
static uint64_t te_test_seed;

static TE_T_UNUSED uint32_t te_rand_u32(void) { return (uint32_t)(te_rand_u64() >> 32); }

/* Uniform in [0, n) (n > 0). */
static TE_T_UNUSED uint64_t te_rand_below(uint64_t n) { return te_rand_u64() % n; }

/* Uniform in [lo, hi). */
static TE_T_UNUSED float te_rand_float(float lo, float hi) {
  return lo + (hi - lo) * (float)((double)(te_rand_u64() >> 40) / (double)(1ull << 24));
}

static TE_T_UNUSED void te_rand_bytes(void *p, size_t n) {
  unsigned char *b = p;
  while (n >= 8) {
    uint64_t v = te_rand_u64();
    memcpy(b, &v, 8);
    b += 8;
    n -= 8;
  }
  if (n) {
    uint64_t v = te_rand_u64();
    memcpy(b, &v, n);
  }
}

/* Random floats in [lo, hi), never all equal (tests never run on zeros). */
static TE_T_UNUSED void te_rand_floats(float *p, size_t n, float lo, float hi) {
  for (size_t i = 0; i < n; i++) p[i] = te_rand_float(lo, hi);
}

/* ---- poison -----------------------------------------------------------------
 * Outputs are filled with a pattern no correct result produces before a
 * kernel or copy writes them, so "not written" shows as a mismatch. */
#define TE_POISON_BYTE 0xA5u
#define TE_NAN_F32_BITS 0x7fc0deadu

static TE_T_UNUSED void te_poison_host(void *p, size_t bytes) { memset(p, TE_POISON_BYTE, bytes); }

static TE_T_UNUSED void te_poison_host_nan(float *p, size_t n) {
  uint32_t bits = TE_NAN_F32_BITS;
  for (size_t i = 0; i < n; i++) memcpy(&p[i], &bits, 4);
}

static TE_T_UNUSED float te_f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static TE_T_UNUSED uint32_t te_f32_bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* ---- result checks ------------------------------------------------------- */

/* Asserts a call succeeds; on failure says what it returned and why. */
#define TE_OK(call)                                                                  \
  do {                                                                               \
    tecore_result_t te_ok_r_ = (call);                                               \
    ck_assert_msg(te_ok_r_ == TECORE_SUCCESS, "%s returned %s: %s", #call,           \
                  tecore_result_name(te_ok_r_), tecore_last_error());                \
  } while (0)

/* Asserts a call fails with code and leaves a detail that mentions what
 * (when what is not NULL; the argument's name, normally). */
#define TE_EXPECT_ERR(code, what, call)                                              \
  do {                                                                               \
    tecore_clear_error();                                                            \
    tecore_result_t te_ex_r_ = (call);                                               \
    const char *te_ex_d_ = tecore_last_error();                                      \
    ck_assert_msg(te_ex_r_ == (code), "%s returned %s, expected %s (detail: \"%s\")", \
                  #call, tecore_result_name(te_ex_r_), tecore_result_name(code),     \
                  te_ex_d_);                                                         \
    ck_assert_msg(te_ex_d_ && te_ex_d_[0], "%s: empty tecore_last_error()", #call);  \
    const char *te_ex_w_ = (what);                                                   \
    ck_assert_msg(!te_ex_w_ || strstr(te_ex_d_, te_ex_w_),                           \
                  "%s: detail \"%s\" does not mention \"%s\"", #call, te_ex_d_,     \
                  te_ex_w_ ? te_ex_w_ : "");                                         \
  } while (0)

#define TE_EXPECT_INVALID(what, call) TE_EXPECT_ERR(TECORE_ERR_INVALID, what, call)

/* Asserts a call fails (any code but SUCCESS) with a non-empty detail. */
#define TE_EXPECT_FAIL(call)                                                         \
  do {                                                                               \
    tecore_clear_error();                                                            \
    tecore_result_t te_ex_r_ = (call);                                               \
    ck_assert_msg(te_ex_r_ != TECORE_SUCCESS, "%s succeeded, expected a failure",    \
                  #call);                                                            \
    ck_assert_msg(tecore_last_error()[0], "%s returned %s with an empty detail",     \
                  #call, tecore_result_name(te_ex_r_));                              \
  } while (0)

/* ---- compares ---------------------------------------------------------------
 * Each reports the first bad index with got and want, and the tolerance. */

/* Every byte of p equals v. */
static TE_T_UNUSED void te_expect_bytes_eq(const void *p, unsigned v, size_t n,
                                           const char *what) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(b[i] == (unsigned char)v, "%s: byte %zu of %zu is 0x%02x, want 0x%02x",
                  what, i, n, b[i], v & 0xffu);
}

/* got == want byte for byte. */
static TE_T_UNUSED void te_expect_mem_eq(const void *got, const void *want, size_t n,
                                         const char *what) {
  const unsigned char *g = got, *w = want;
  if (memcmp(g, w, n) == 0) return;
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(g[i] == w[i], "%s: byte %zu of %zu is 0x%02x, want 0x%02x", what, i, n,
                  g[i], w[i]);
}

/* |got - want| <= abs_tol + rel_tol * |want| elementwise; NaN matches NaN. */
static TE_T_UNUSED void te_expect_f32_near(const float *got, const float *want, size_t n,
                                           double abs_tol, double rel_tol, const char *what) {
  for (size_t i = 0; i < n; i++) {
    double g = got[i], w = want[i];
    if (isnan(g) && isnan(w)) continue;
    int ok = (g == w) || fabs(g - w) <= abs_tol + rel_tol * fabs(w);
    ck_assert_msg(ok, "%s[%zu] of %zu: got %.9g (%a), want %.9g (%a); tolerance %g + %g*|want|",
                  what, i, n, g, g, w, w, abs_tol, rel_tol);
  }
}

/* f32 bit for bit; any NaN matches any NaN (payloads differ between CPU and GPU). */
static TE_T_UNUSED void te_expect_f32_bits(const float *got, const float *want, size_t n,
                                           const char *what) {
  for (size_t i = 0; i < n; i++) {
    uint32_t g = te_f32_bits_of(got[i]), w = te_f32_bits_of(want[i]);
    if (g == w || (isnan(got[i]) && isnan(want[i]))) continue;
    ck_assert_msg(0, "%s[%zu] of %zu: got 0x%08x (%.9g), want 0x%08x (%.9g); tolerance: exact",
                  what, i, n, g, (double)got[i], w, (double)want[i]);
  }
}

/* 16-bit floats (f16 when exp_bits == 5, bf16 when 8) bit for bit; NaN
 * matches NaN.  as_f32 converts for the message. */
static TE_T_UNUSED void te_expect_half_bits(const uint16_t *got, const uint16_t *want, size_t n,
                                            int exp_bits, float (*as_f32)(uint16_t),
                                            const char *what) {
  unsigned mant_bits = 15u - (unsigned)exp_bits;
  uint16_t exp_mask = (uint16_t)(((1u << exp_bits) - 1u) << mant_bits);
  uint16_t mant_mask = (uint16_t)((1u << mant_bits) - 1u);
  for (size_t i = 0; i < n; i++) {
    uint16_t g = got[i], w = want[i];
    if (g == w) continue;
    int gnan = (g & exp_mask) == exp_mask && (g & mant_mask);
    int wnan = (w & exp_mask) == exp_mask && (w & mant_mask);
    if (gnan && wnan) continue;
    ck_assert_msg(0, "%s[%zu] of %zu: got 0x%04x (%.9g), want 0x%04x (%.9g); tolerance: exact",
                  what, i, n, g, (double)as_f32(g), w, (double)as_f32(w));
  }
}

/* ---- device fixture -------------------------------------------------------- */

static tecore_ctx_t te_ctx;
static tecore_stream_t te_stream;  /* a non-blocking stream for the test */
static struct tecore_device_props te_props;
static tecore_backend_t te_backend_kind;
static int te_test_forking;        /* 1 when Check forks each test */

static TE_T_UNUSED void te_dev_setup(void) {
  TE_OK(tecore_init());
  TE_OK(tecore_backend(&te_backend_kind));
  TE_OK(tecore_ctx_create(0, &te_ctx));
  TE_OK(tecore_device_get_props(0, &te_props));
  TE_OK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &te_stream));
}

static TE_T_UNUSED void te_dev_teardown(void) {
  if (te_stream) {
    TE_OK(tecore_stream_synchronize(te_stream));
    TE_OK(tecore_stream_destroy(te_stream));
    te_stream = NULL;
  }
  if (te_ctx) {
    TE_OK(tecore_ctx_destroy(te_ctx));
    te_ctx = NULL;
  }
}

/* Device memory; the test frees it (tecore_mem_free). */
static TE_T_UNUSED tecore_devptr_t te_dalloc(size_t bytes) {
  tecore_devptr_t p = 0;
  TE_OK(tecore_mem_alloc(bytes, &p));
  ck_assert_msg(p != 0, "tecore_mem_alloc(%zu) gave address 0", bytes);
  return p;
}

static TE_T_UNUSED tecore_devptr_t te_hptr(const void *p) { return (tecore_devptr_t)(uintptr_t)p; }

/* Waits for a stream with a bound, so a test that breaks ordering fails
 * instead of hanging: TECORE_SUCCESS, an error, or TECORE_ERR_TIMEOUT. */
static TE_T_UNUSED tecore_result_t te_stream_wait(tecore_stream_t s, int timeout_ms) {
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    tecore_result_t r = tecore_stream_query(s);
    if (r != TECORE_ERR_NOT_READY) return r;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long ms = (t1.tv_sec - t0.tv_sec) * 1000L + (t1.tv_nsec - t0.tv_nsec) / 1000000L;
    if (ms > timeout_ms) return TECORE_ERR_TIMEOUT;
    usleep(200);
  }
}

static TE_T_UNUSED void te_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* Synchronous copies through the test stream (host pointers pass as
 * device addresses under unified addressing). */
static TE_T_UNUSED void te_h2d(tecore_devptr_t dst, const void *src, size_t bytes) {
  TE_OK(tecore_memcpy_async(dst, te_hptr(src), bytes, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
}
static TE_T_UNUSED void te_d2h(void *dst, tecore_devptr_t src, size_t bytes) {
  TE_OK(tecore_memcpy_async(te_hptr(dst), src, bytes, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
}
/* Fills device bytes with the poison byte. */
static TE_T_UNUSED void te_poison_dev(tecore_devptr_t dst, size_t bytes) {
  TE_OK(tecore_memset_d8_async(dst, TE_POISON_BYTE, bytes, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
}
/* Fills n device floats with a quiet NaN. */
static TE_T_UNUSED void te_poison_dev_nan(tecore_devptr_t dst, size_t n) {
  TE_OK(tecore_memset_d32_async(dst, TE_NAN_F32_BITS, n, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
}

/* Reads a whole small file into buf ("" when it does not exist). */
static TE_T_UNUSED void te_read_text(const char *path, char *buf, size_t n) {
  buf[0] = '\0';
  FILE *fp = fopen(path, "r");
  if (!fp) return;
  size_t k = fread(buf, 1, n - 1, fp);
  buf[k] = '\0';
  fclose(fp);
}

/* Stops the profile (tecore_profile_start) and returns its report as a
 * string the caller frees: which kernels ran, a row each. */
static TE_T_UNUSED char *te_profile_text(void) {
  TE_OK(tecore_profile_stop());
  FILE *f = tmpfile();
  ck_assert_ptr_nonnull(f);
  TE_OK(tecore_profile_report(fileno(f), NULL));
  long len = ftell(f);
  ck_assert(len >= 0);
  rewind(f);
  char *text = calloc((size_t)len + 1, 1);
  ck_assert_ptr_nonnull(text);
  ck_assert_uint_eq(fread(text, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  return text;
}

/* A fresh private folder for files a test writes (removed by te_rmtree). */
static TE_T_UNUSED void te_tmpdir(char *out, size_t n) {
  const char *base = getenv("TMPDIR");
  snprintf(out, n, "%s/te-test-XXXXXX", base && base[0] ? base : "/tmp");
  ck_assert_msg(mkdtemp(out) != NULL, "mkdtemp(%s): %s", out, strerror(errno));
}
static TE_T_UNUSED void te_rmtree(const char *dir) {
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "# could not remove %s\n", dir);
}

/* A tcase with the suite's time limit and, when dev, the device fixture. */
static TE_T_UNUSED TCase *te_tcase(Suite *s, const char *name, int dev) {
  TCase *tc = tcase_create(name);
  tcase_set_timeout(tc, TE_TEST_TIMEOUT);
  if (dev) tcase_add_checked_fixture(tc, te_dev_setup, te_dev_teardown);
  suite_add_tcase(s, tc);
  return tc;
}

/* ---- main ------------------------------------------------------------------ */

#define TE_TEST_NODEVICE 0u
#define TE_TEST_DEVICE 1u

/* Runs tecore_init() in a child; *detail gets its detail on failure. */
static TE_T_UNUSED tecore_result_t te_probe_init(char *detail, size_t n, char *backend,
                                                 size_t bn) {
  int fds[2];
  detail[0] = backend[0] = '\0';
  if (pipe(fds) != 0) return TECORE_ERR_SYSTEM;
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) return TECORE_ERR_SYSTEM;
  if (pid == 0) {
    char msg[1024];
    tecore_backend_t b = TECORE_BACKEND_NONE;
    tecore_result_t r = tecore_init();
    if (r == TECORE_SUCCESS) tecore_backend(&b);
    int len = snprintf(msg, sizeof msg, "%d\n%s\n%s", (int)r, tecore_backend_name(b),
                       r == TECORE_SUCCESS ? "" : tecore_last_error());
    if (write(fds[1], msg, (size_t)len) < 0) _exit(1);
    _exit(0);
  }
  close(fds[1]);
  char buf[1024];
  size_t got = 0;
  ssize_t k;
  while (got + 1 < sizeof buf && (k = read(fds[0], buf + got, sizeof buf - 1 - got)) > 0)
    got += (size_t)k;
  buf[got] = '\0';
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (got == 0) {
    snprintf(detail, n, "tecore_init() probe died (status 0x%x)", status);
    return TECORE_ERR_INTERNAL;
  }
  int code = atoi(buf);
  char *nl1 = strchr(buf, '\n');
  char *nl2 = nl1 ? strchr(nl1 + 1, '\n') : NULL;
  if (nl1 && nl2) {
    *nl2 = '\0';
    snprintf(backend, bn, "%s", nl1 + 1);
    snprintf(detail, n, "%s", nl2 + 1);
  }
  return (tecore_result_t)code;
}

static TE_T_UNUSED int te_test_main(Suite *(*make)(void), unsigned flags) {
  const char *seed_env = getenv("TE_TEST_SEED");
  if (seed_env && seed_env[0]) {
    te_test_seed = strtoull(seed_env, NULL, 0);
  } else {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ ((uint64_t)getpid() << 40);
    int fd = open("/dev/urandom", O_RDONLY);
    if (fd >= 0) {
      uint64_t u;
      if (read(fd, &u, sizeof u) == (ssize_t)sizeof u) x ^= u;
      close(fd);
    }
    te_test_seed = te_splitmix64(&x) >> 1;  /* keep it readable as a positive number */
  }
  te_rng_seed(te_test_seed);
  printf("# seed %" PRIu64 " (TE_TEST_SEED=%" PRIu64 " reproduces this run)\n", te_test_seed,
         te_test_seed);

  /* never create NVLink multicast on a real GPU from a test */
  setenv("NCCL_NVLS_ENABLE", "0", 0);

  if (flags & TE_TEST_DEVICE) {
    char detail[900], backend[32];
    tecore_result_t r = te_probe_init(detail, sizeof detail, backend, sizeof backend);
    const char *want = getenv("TE_DEVICE");
    if (r != TECORE_SUCCESS && want && strcmp(want, "cuda") == 0 &&
        (r == TECORE_ERR_NO_DRIVER || r == TECORE_ERR_NO_DEVICE ||
         r == TECORE_ERR_NOT_SUPPORTED)) {
      printf("1..0 # SKIP no GPU: %s (%s)\n", tecore_result_name(r), detail);
      return 0;
    }
    if (r != TECORE_SUCCESS)
      printf("# tecore_init() failed: %s: %s\n", tecore_result_name(r), detail);
    else
      printf("# backend %s (TE_DEVICE=%s)\n", backend, want ? want : "unset");
  }
  fflush(stdout);

  Suite *s = make();
  SRunner *sr = srunner_create(s);
  te_test_forking = srunner_fork_status(sr) == CK_FORK;
  if (!te_test_forking) printf("# CK_FORK=no: tests share one process\n");
  srunner_set_tap(sr, "-");
  srunner_run_all(sr, CK_SILENT);
  srunner_free(sr);
  return 0;
}

/* main() of a suite: TE_TEST_MAIN(make_suite, TE_TEST_DEVICE). */
#define TE_TEST_MAIN(suite_fn, flags) \
  int main(void) { return te_test_main((suite_fn), (flags)); }

#endif
