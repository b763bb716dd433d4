/* SPDX-License-Identifier: Apache-2.0 */
/* check_profile.c -- the kernel profile (te/profile.h):
 *   - every eager launch is counted once under its kernel's name, launches
 *     into a capturing stream and after stop are not, and the work itself
 *     is unchanged (the filled buffer is checked against the host);
 *   - the report's "all" line adds up the rows, and a second report is
 *     empty (the records were released);
 *   - start while recording and stop while not are refused;
 *   - a report to a closed or read-only descriptor is refused with the
 *     records kept; one whose write fails is an error.
 * SPDX-License-Identifier: Apache-2.0 */
#include "tests.h"
#include <fcntl.h>
#include <te/profile.h>

/* The report's rows: calls of the row whose first two columns start with
 * name (and carry label when not NULL); -1 when there is none. */
static long row_calls(const char *text, const char *name, double *us) {
  const char *p = text;
  size_t nl = strlen(name);
  while (p && *p) {
    if (strncmp(p, name, nl) == 0 && (p[nl] == ' ' || p[nl] == '_')) {
      char kname[64], extra[64];
      long calls;
      double total;
      /* kernel rows have no shape: "name calls total mean share" */
      if (sscanf(p, "%63s %ld %lf", kname, &calls, &total) == 3 ||
          sscanf(p, "%63s %63s %ld %lf", kname, extra, &calls, &total) == 4) {
        if (us) *us = total;
        return calls;
      }
    }
    p = strchr(p, '\n');
    if (p) p++;
  }
  return -1;
}

static char *report_text(double *total) {
  FILE *f = tmpfile();
  ck_assert_ptr_nonnull(f);
  TE_OK(tecore_profile_report(fileno(f), total));
  off_t len = lseek(fileno(f), 0, SEEK_END);
  ck_assert(len >= 0);
  char *buf = calloc((size_t)len + 1, 1);
  ck_assert(pread(fileno(f), buf, (size_t)len, 0) == (ssize_t)len);
  fclose(f);
  return buf;
}

START_TEST(counts_each_eager_launch_once) {
  size_t n = 256 + te_rand_below(4096);
  int fills = 1 + (int)te_rand_below(5), sets = 1 + (int)te_rand_below(5);
  float value = te_rand_float(-4.0f, 4.0f);
  tecore_devptr_t d = te_dalloc(n * sizeof(float));
  tecore_stream_t s = NULL;
  TE_OK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  TE_OK(tecore_profile_start());
  for (int i = 0; i < sets; i++) TE_OK(tecore_memset_d8_async(d, 0xA5, n * sizeof(float), s));
  for (int i = 0; i < fills; i++) TE_OK(tecore_fill(d, TECORE_DTYPE_F32, n, value, s));
  /* captured: not recorded */
  tecore_graph_t g = NULL;
  TE_OK(tecore_stream_begin_capture(s, TECORE_CAPTURE_THREAD_LOCAL));
  TE_OK(tecore_fill(d, TECORE_DTYPE_F32, n, value, s));
  TE_OK(tecore_stream_end_capture(s, &g));
  TE_OK(tecore_graph_destroy(g));
  TE_OK(tecore_profile_stop());
  TE_OK(tecore_fill(d, TECORE_DTYPE_F32, n, value, s)); /* after stop: not recorded */
  TE_OK(tecore_stream_synchronize(s));

  double total = -1, fill_us = -1, set_us = -1;
  char *text = report_text(&total);
  long fc = row_calls(text, "te_fill", &fill_us), sc = row_calls(text, "memset_async", &set_us);
  long all = row_calls(text, "all", NULL);
  ck_assert_msg(fc == fills, "te_fill: %ld calls recorded, %d made:\n%s", fc, fills, text);
  ck_assert_msg(sc == sets, "memset_async: %ld calls recorded, %d made:\n%s", sc, sets, text);
  ck_assert_msg(all == fills + sets, "all: %ld records, want %d:\n%s", all, fills + sets, text);
  ck_assert_msg(total > 0 && fill_us >= 0 && set_us >= 0, "times %g %g %g", total, fill_us, set_us);
  /* the rows add up to the total within the printed rounding (0.1 us a row) */
  ck_assert_msg(fabs(fill_us + set_us - total) <= 0.2 + 1e-9 * total, "%g + %g != %g", fill_us,
                set_us, total);
  free(text);

  float *got = malloc(n * sizeof(float));
  te_d2h(got, d, n * sizeof(float));
  for (size_t i = 0; i < n; i++) ck_assert_msg(got[i] == value, "[%zu] %g != %g", i, got[i], value);
  free(got);

  total = -1;
  text = report_text(&total); /* released: empty */
  ck_assert_msg(total == 0 && row_calls(text, "te_fill", NULL) == -1, "second report:\n%s", text);
  free(text);
  TE_OK(tecore_mem_free(d));
  TE_OK(tecore_stream_destroy(s));
}
END_TEST

START_TEST(start_and_stop_refuse_misuse) {
  TE_EXPECT_INVALID("tecore_profile_stop", tecore_profile_stop());
  TE_OK(tecore_profile_start());
  TE_EXPECT_INVALID("already recording", tecore_profile_start());
  TE_OK(tecore_profile_stop());
  TE_EXPECT_INVALID("not recording", tecore_profile_stop());
  double total = -1;
  TE_OK(tecore_profile_report(-1, &total));
  ck_assert(total == 0);
  TE_OK(tecore_profile_report(-1, NULL));
}
END_TEST

/* tecore_profile_report to a closed descriptor returned success and lost
 * the records.  A closed or read-only fd is refused with the records kept
 * (the next report has them); a write that fails (/dev/full) is
 * TECORE_ERR_SYSTEM naming the fd. */
START_TEST(report_to_closed_fd_fails) {
  int fills = 1 + (int)te_rand_below(4);
  tecore_devptr_t d = te_dalloc(1024);
  TE_OK(tecore_profile_start());
  for (int i = 0; i < fills; i++) TE_OK(tecore_fill(d, TECORE_DTYPE_F32, 256, 1.5f, te_stream));
  TE_OK(tecore_profile_stop());
  int p[2];
  ck_assert_int_eq(pipe(p), 0);
  close(p[0]);
  close(p[1]);
  double total = -1;
  TE_EXPECT_INVALID("not an open descriptor", tecore_profile_report(p[1], &total));
  ck_assert_msg(total == -1, "total_us written by a refused report");
  int ro = open("/dev/null", O_RDONLY);
  ck_assert_int_ge(ro, 0);
  TE_EXPECT_INVALID("reading only", tecore_profile_report(ro, &total));
  close(ro);
  char *text = report_text(&total);
  ck_assert_msg(row_calls(text, "te_fill", NULL) == fills, "the refused reports lost the "
                "records: %d fills, the report:\n%s", fills, text);
  free(text);
  int full = open("/dev/full", O_WRONLY);
  if (full >= 0) {
    TE_OK(tecore_profile_start());
    TE_OK(tecore_fill(d, TECORE_DTYPE_F32, 256, 1.5f, te_stream));
    TE_OK(tecore_profile_stop());
    TE_EXPECT_ERR(TECORE_ERR_SYSTEM, "writing the report", tecore_profile_report(full, NULL));
    close(full);
  }
  TE_OK(tecore_mem_free(d));
}
END_TEST

static Suite *profile_suite(void) {
  Suite *s = suite_create("profile");
  TCase *tc = te_tcase(s, "profile", 1);
  tcase_add_test(tc, counts_each_eager_launch_once);
  tcase_add_test(tc, start_and_stop_refuse_misuse);
  tcase_add_test(tc, report_to_closed_fd_fails);
  return s;
}

TE_TEST_MAIN(profile_suite, TE_TEST_DEVICE)
