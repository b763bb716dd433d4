/* SPDX-License-Identifier: Apache-2.0
 * check_deprecated.c -- the former function names kept for one release
 * (te/deprecated.h): each old name gives exactly what its new name gives
 * (same results, same out-parameters, same refusals), and the first call
 * of each logs one WARN line naming the replacement, and only one.
 *
 * The renames: tecore_device_props -> tecore_device_get_props,
 * tecore_tunable_info -> tecore_tunable_get_info, tecore_kernel_def ->
 * tecore_kernel_get_def, tecore_seq_saved -> tecore_seq_get_saved,
 * tecore_svc_stats -> tecore_svc_get_stats, tegraph_offload_stats ->
 * tegraph_offload_get_stats. */
#include "tests.h"
#include <te/graph.h>
#include <te/offload.h>

/* This suite calls the deprecated names on purpose. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

START_TEST(device_props_forwards) {
  int n = 0;
  TE_OK(tecore_device_count(&n));
  ck_assert_int_ge(n, 1);
  for (int d = 0; d < n; d++) {
    struct tecore_device_props a, b;
    memset(&a, 0xA5, sizeof a);  /* the same poison: padding compares equal */
    memset(&b, 0xA5, sizeof b);
    TE_OK(tecore_device_get_props(d, &a));
    TE_OK(tecore_device_props(d, &b));
    ck_assert_msg(memcmp(&a, &b, sizeof a) == 0, "device %d: old and new props differ", d);
    ck_assert_int_eq(b.ordinal, d);
  }
  struct tecore_device_props p;
  TE_EXPECT_INVALID("props", tecore_device_props(0, NULL));
  TE_EXPECT_INVALID("ordinal", tecore_device_props(n, &p));
}
END_TEST

START_TEST(tunable_info_forwards) {
  int n = 0;
  TE_OK(tecore_tunable_count(&n));
  ck_assert_int_gt(n, 0);
  for (int i = 0; i < n; i++) {
    struct tecore_tunable_info a, b;
    memset(&a, 0xA5, sizeof a);
    memset(&b, 0x5A, sizeof b);
    TE_OK(tecore_tunable_get_info(i, &a));
    TE_OK(tecore_tunable_info(i, &b));
    ck_assert_ptr_eq(a.env, b.env);
    ck_assert_int_eq(a.type, b.type);
    ck_assert_int_eq(a.value_int, b.value_int);
    ck_assert_ptr_eq(a.value_str, b.value_str);
  }
  struct tecore_tunable_info t;
  TE_EXPECT_INVALID("index", tecore_tunable_info(n, &t));
  TE_EXPECT_INVALID("info", tecore_tunable_info(0, NULL));
}
END_TEST

START_TEST(kernel_def_forwards) {
  int checked = 0;
  for (int id = 0; id < 4096; id++) {
    const struct tecore_kernel_def *a = (const void *)1, *b = (const void *)2;
    tecore_result_t ra = tecore_kernel_get_def(id, &a);
    tecore_result_t rb = tecore_kernel_def(id, &b);
    ck_assert_int_eq(ra, rb);
    if (ra != TECORE_SUCCESS) break;
    ck_assert_ptr_eq(a, b);
    checked++;
  }
  ck_assert_int_gt(checked, 0);  /* libtecore registers its tables at load */
  TE_EXPECT_INVALID("def", tecore_kernel_def(0, NULL));
}
END_TEST

START_TEST(svc_stats_forwards) {
  struct tecore_svc_stats a, b;
  memset(&a, 0xA5, sizeof a);
  memset(&b, 0x5A, sizeof b);
  TE_OK(tecore_svc_get_stats(&a));
  TE_OK(tecore_svc_stats(&b));
  ck_assert_int_eq(a.running, b.running);
  ck_assert_int_eq(a.uring, b.uring);
  ck_assert_str_eq(a.why, b.why);
  TE_EXPECT_INVALID("st", tecore_svc_stats(NULL));
}
END_TEST

/* The seq and offload names are checked on their refusals here (the
 * suites of te/ops.h and te/offload.h cover the calls themselves under the
 * new names): the old name must reach the same argument checks. */
START_TEST(seq_saved_and_offload_stats_forward) {
  size_t count = 77;
  TE_EXPECT_INVALID("seq", tecore_seq_saved(NULL, NULL, 0, &count));
  ck_assert_uint_eq(count, 77);
  struct tegraph_offload_stats st;
  ck_assert_int_eq(tegraph_offload_stats(NULL, &st), TEGRAPH_ERR_INVALID);
  ck_assert_msg(strstr(tecore_last_error(), "ctx"), "detail: %s", tecore_last_error());
}
END_TEST

/* ---- the one-time warning: in a child of our own, whose log is set up
 * from the environment we give it (the log reads it once per process) ---- */
static void call_each_old_name_twice(void) {
  struct tecore_device_props p;
  struct tecore_tunable_info t;
  const struct tecore_kernel_def *d;
  struct tecore_svc_stats s;
  struct tegraph_offload_stats o;
  size_t c;
  for (int k = 0; k < 2; k++) {
    (void)tecore_device_props(0, &p);
    (void)tecore_tunable_info(0, &t);
    (void)tecore_kernel_def(0, &d);
    (void)tecore_svc_stats(&s);
    (void)tecore_seq_saved(NULL, NULL, 0, &c);
    (void)tegraph_offload_stats(NULL, &o);
  }
}

static int count_in(const char *text, const char *what) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, what)) != NULL; p += strlen(what)) n++;
  return n;
}

START_TEST(first_call_warns_once) {
  char dir[256], path[300];
  te_tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/log", dir);
  fflush(stdout);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    setenv("TE_DEBUG", "WARN", 1);
    unsetenv("TE_DEBUG_SUBSYS");
    setenv("TE_DEBUG_FILE", path, 1);
    call_each_old_name_twice();
    _exit(0);
  }
  int status = 0;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status 0x%x", status);
  static char text[65536];
  FILE *f = fopen(path, "r");
  ck_assert_msg(f != NULL, "no log file %s", path);
  size_t len = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[len] = 0;
  static const char *const pairs[][2] = {
      {"tecore_device_props()", "tecore_device_get_props()"},
      {"tecore_tunable_info()", "tecore_tunable_get_info()"},
      {"tecore_kernel_def()", "tecore_kernel_get_def()"},
      {"tecore_svc_stats()", "tecore_svc_get_stats()"},
      {"tecore_seq_saved()", "tecore_seq_get_saved()"},
      {"tegraph_offload_stats()", "tegraph_offload_get_stats()"},
  };
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
    char line[128];
    snprintf(line, sizeof line, "%s is deprecated", pairs[i][0]);
    ck_assert_msg(count_in(text, line) == 1, "'%s' logged %d times, want once; log:\n%s", line,
                  count_in(text, line), text);
    ck_assert_msg(count_in(text, pairs[i][1]) == 1, "the warning does not name %s", pairs[i][1]);
  }
  te_rmtree(dir);
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("deprecated");
  TCase *tc = te_tcase(s, "forwarders", 1);
  tcase_add_test(tc, device_props_forwards);
  tcase_add_test(tc, tunable_info_forwards);
  tcase_add_test(tc, kernel_def_forwards);
  tcase_add_test(tc, svc_stats_forwards);
  tcase_add_test(tc, seq_saved_and_offload_stats_forward);
  tc = te_tcase(s, "warning", 0);
  tcase_add_test(tc, first_call_warns_once);
  return s;
}

TE_TEST_MAIN(make_suite, TE_TEST_DEVICE)
