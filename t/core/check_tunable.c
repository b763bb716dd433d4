/* SPDX-License-Identifier: Apache-2.0 */
/* check_tunable.c -- the tunable registry (te/tunable.h): parsing of INT
 * (decimal, 0x hex, range) and STRING (free text, choices) values, defaults
 * on bad input (with a WARN log line), read-once semantics, duplicate
 * detection and the listing API.  Every test uses its own TE_TEST_* names,
 * so tests stay independent even with CK_FORK=no. */
#include "tests.h"

#define TUN_INT(var, envname, def, lo, hi)                                          \
  static struct tecore_tunable var = {.name = #var, .env = envname,                 \
                                      .type = TECORE_TUNABLE_INT, .def_int = (def), \
                                      .min = (lo), .max = (hi), .help = "test knob"}
#define TUN_STR(var, envname, def, choicelist)                                      \
  static struct tecore_tunable var = {.name = #var, .env = envname,                 \
                                      .type = TECORE_TUNABLE_STRING, .def_str = (def), \
                                      .choices = (choicelist), .help = "test knob"}

/* Registers t with the variable set to value (NULL: unset) and reads it. */
static int64_t read_int(struct tecore_tunable *t, const char *value) {
  if (value) setenv(t->env, value, 1);
  else unsetenv(t->env);
  TE_OK(tecore_tunable_register(t));
  return tecore_tunable_int(t);
}
static const char *read_str(struct tecore_tunable *t, const char *value) {
  if (value) setenv(t->env, value, 1);
  else unsetenv(t->env);
  TE_OK(tecore_tunable_register(t));
  return tecore_tunable_str(t);
}

START_TEST(int_decimal_and_hex) {
  int64_t dec = (int64_t)te_rand_below(1000000) + 1, hex = (int64_t)te_rand_below(0xffff) + 1;
  char buf[64];
  TUN_INT(a, "TE_TEST_INT_DEC", 7, -1000000, 1000000);
  snprintf(buf, sizeof buf, "%lld", (long long)dec);
  ck_assert_int_eq(read_int(&a, buf), dec);
  TUN_INT(b, "TE_TEST_INT_HEX", 7, 0, 0x10000);
  snprintf(buf, sizeof buf, "0x%llx", (long long)hex);
  ck_assert_int_eq(read_int(&b, buf), hex);
  TUN_INT(c, "TE_TEST_INT_NEG", 7, -1000000, 1000000);
  snprintf(buf, sizeof buf, "-%lld", (long long)dec);
  ck_assert_int_eq(read_int(&c, buf), -dec);
  TUN_INT(d, "TE_TEST_INT_UNSET", 42, 0, 100);
  ck_assert_int_eq(read_int(&d, NULL), 42);
  /* the bounds themselves are accepted */
  TUN_INT(e, "TE_TEST_INT_MAXB", 1, 0, 99);
  ck_assert_int_eq(read_int(&e, "99"), 99);
  TUN_INT(f, "TE_TEST_INT_BIG", 1, 0, INT64_MAX);
  ck_assert_int_eq(read_int(&f, "0x7fffffffffffffff"), INT64_MAX);
}
END_TEST

/* Out of range and garbage give the default; the WARN line names the
 * variable.  TE_DEBUG_FILE is set before the first log call of this
 * process (the log reads its settings once; fork mode gives this test a
 * process of its own). */
START_TEST(int_bad_values_use_default) {
  char dir[256], path[512];
  te_tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/log", dir);
  setenv("TE_DEBUG", "WARN", 1);
  setenv("TE_DEBUG_FILE", path, 1);
  unsetenv("TE_DEBUG_SUBSYS");

  TUN_INT(hi, "TE_TEST_INT_HIGH", 17, 0, 100);
  ck_assert_int_eq(read_int(&hi, "101"), 17);
  TUN_INT(lo, "TE_TEST_INT_LOW", 17, 0, 100);
  ck_assert_int_eq(read_int(&lo, "-1"), 17);
  TUN_INT(g1, "TE_TEST_INT_JUNK1", 17, 0, 100);
  ck_assert_int_eq(read_int(&g1, "12abc"), 17);
  TUN_INT(g2, "TE_TEST_INT_JUNK2", 17, 0, 100);
  ck_assert_int_eq(read_int(&g2, "abc"), 17);
  TUN_INT(g3, "TE_TEST_INT_JUNK3", 17, 0, 100);
  ck_assert_int_eq(read_int(&g3, "0xZZ"), 17);
  TUN_INT(g4, "TE_TEST_INT_OVF", 17, INT64_MIN, INT64_MAX);
  ck_assert_int_eq(read_int(&g4, "99999999999999999999999"), 17);

  if (te_test_forking) {
    FILE *fp = fopen(path, "r");
    ck_assert_msg(fp != NULL, "no log file %s after invalid tunables", path);
    char text[8192];
    size_t n = fread(text, 1, sizeof text - 1, fp);
    text[n] = '\0';
    fclose(fp);
    const char *names[] = {"TE_TEST_INT_HIGH", "TE_TEST_INT_LOW",   "TE_TEST_INT_JUNK1",
                           "TE_TEST_INT_JUNK2", "TE_TEST_INT_JUNK3", "TE_TEST_INT_OVF"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
      ck_assert_msg(strstr(text, names[i]), "no WARN line names %s; log:\n%s", names[i], text);
    ck_assert_msg(strstr(text, "WARN"), "log lines are not marked WARN:\n%s", text);
  }
  te_rmtree(dir);
}
END_TEST

START_TEST(string_free_and_choices) {
  char word[32];
  snprintf(word, sizeof word, "w%08x", te_rand_u32());
  TUN_STR(free_text, "TE_TEST_STR_FREE", "dflt", NULL);
  ck_assert_str_eq(read_str(&free_text, word), word);
  TUN_STR(unset, "TE_TEST_STR_UNSET", "dflt", NULL);
  ck_assert_str_eq(read_str(&unset, NULL), "dflt");
  TUN_STR(ok, "TE_TEST_STR_OK", "alpha", "alpha|beta|gamma");
  ck_assert_str_eq(read_str(&ok, "beta"), "beta");
  TUN_STR(last, "TE_TEST_STR_LAST", "alpha", "alpha|beta|gamma");
  ck_assert_str_eq(read_str(&last, "gamma"), "gamma");
  TUN_STR(bad, "TE_TEST_STR_BAD", "alpha", "alpha|beta|gamma");
  ck_assert_str_eq(read_str(&bad, "delta"), "alpha");
  TUN_STR(prefix, "TE_TEST_STR_PREFIX", "alpha", "alpha|beta|gamma");
  ck_assert_str_eq(read_str(&prefix, "bet"), "alpha");
  TUN_STR(joined, "TE_TEST_STR_JOINED", "alpha", "alpha|beta|gamma");
  ck_assert_str_eq(read_str(&joined, "alpha|beta"), "alpha");
  /* the value outlives the environment string it came from */
  setenv("TE_TEST_STR_FREE", "changed", 1);
  unsetenv("TE_TEST_STR_FREE");
  ck_assert_str_eq(tecore_tunable_str(&free_text), word);
}
END_TEST

START_TEST(read_once) {
  TUN_INT(i, "TE_TEST_ONCE_INT", 1, 0, 1000);
  ck_assert_int_eq(read_int(&i, "5"), 5);
  setenv("TE_TEST_ONCE_INT", "6", 1);
  ck_assert_int_eq(tecore_tunable_int(&i), 5);
  unsetenv("TE_TEST_ONCE_INT");
  ck_assert_int_eq(tecore_tunable_int(&i), 5);
  TUN_STR(s, "TE_TEST_ONCE_STR", "d", NULL);
  ck_assert_str_eq(read_str(&s, "first"), "first");
  setenv("TE_TEST_ONCE_STR", "second", 1);
  ck_assert_str_eq(tecore_tunable_str(&s), "first");
  /* an unset variable read once stays the default after it is set */
  TUN_INT(u, "TE_TEST_ONCE_UNSET", 3, 0, 1000);
  ck_assert_int_eq(read_int(&u, NULL), 3);
  setenv("TE_TEST_ONCE_UNSET", "9", 1);
  ck_assert_int_eq(tecore_tunable_int(&u), 3);
}
END_TEST

/* 010 was read as octal 8 and 08 refused, though the help says decimal or
 * 0x-hex. */
START_TEST(test_int_tunable_leading_zero_is_decimal) {
  int64_t v = 10 + (int64_t)te_rand_below(80);
  char buf[32];
  TUN_INT(a, "TE_TEST_INT_LEAD0", 7, -1000, 1000);
  snprintf(buf, sizeof buf, "0%lld", (long long)v);
  ck_assert_int_eq(read_int(&a, buf), v);
  TUN_INT(b, "TE_TEST_INT_08", 7, 0, 100);
  ck_assert_int_eq(read_int(&b, "08"), 8);
  TUN_INT(c, "TE_TEST_INT_NEG0", 7, -100, 100);
  ck_assert_int_eq(read_int(&c, "-010"), -10);
  TUN_INT(d, "TE_TEST_INT_0X", 7, 0, 1000);
  ck_assert_int_eq(read_int(&d, "0X1F"), 31);
  TUN_INT(e, "TE_TEST_INT_0B", 7, 0, 1000);
  ck_assert_int_eq(read_int(&e, "0b11"), 7); /* not a format: the default */
}
END_TEST

/* A string tunable could be registered with a default outside its choices. */
START_TEST(test_tunable_default_outside_choices_is_refused) {
  TUN_STR(a, "TE_TEST_STR_BADDEF", "maybe", "yes|no");
  TE_EXPECT_INVALID("TE_TEST_STR_BADDEF", tecore_tunable_register(&a));
  struct tecore_tunable_info info;
  TE_EXPECT_FAIL(tecore_tunable_find("TE_TEST_STR_BADDEF", &info));
  TUN_STR(b, "TE_TEST_STR_GOODDEF", "NO", "yes|no");
  TE_OK(tecore_tunable_register(&b));
}
END_TEST

START_TEST(register_rules) {
  TUN_INT(a, "TE_TEST_DUP", 1, 0, 10);
  TUN_INT(b, "TE_TEST_DUP", 2, 0, 10);
  TE_OK(tecore_tunable_register(&a));
  TE_OK(tecore_tunable_register(&a)); /* idempotent for the same object */
  TE_EXPECT_INVALID("TE_TEST_DUP", tecore_tunable_register(&b));
  unsetenv("TE_TEST_DUP");
  ck_assert_int_eq(tecore_tunable_int(&a), 1);

  TE_EXPECT_INVALID(NULL, tecore_tunable_register(NULL));
  TUN_INT(noname, "TE_TEST_NONAME", 1, 0, 10);
  noname.name = NULL;
  TE_EXPECT_INVALID("name", tecore_tunable_register(&noname));
  TUN_INT(noenv, "TE_TEST_NOENV", 1, 0, 10);
  noenv.env = NULL;
  TE_EXPECT_INVALID("env", tecore_tunable_register(&noenv));
  TUN_INT(outside, "TE_TEST_DEF_OUTSIDE", 11, 0, 10);
  TE_EXPECT_INVALID("TE_TEST_DEF_OUTSIDE", tecore_tunable_register(&outside));
  TUN_INT(badtype, "TE_TEST_BADTYPE", 1, 0, 10);
  badtype.type = (tecore_tunable_type_t)7;
  TE_EXPECT_INVALID("TE_TEST_BADTYPE", tecore_tunable_register(&badtype));

  /* none of the rejected ones is listed */
  struct tecore_tunable_info info;
  const char *rejected[] = {"TE_TEST_NONAME", "TE_TEST_NOENV", "TE_TEST_DEF_OUTSIDE",
                            "TE_TEST_BADTYPE"};
  for (size_t k = 0; k < sizeof rejected / sizeof rejected[0]; k++)
    TE_EXPECT_FAIL(tecore_tunable_find(rejected[k], &info));
}
END_TEST

START_TEST(listing) {
  int before = -1, after = -1;
  TE_OK(tecore_tunable_count(&before));
  ck_assert_int_gt(before, 0); /* the library's own (TE_DEVICE, TE_DEBUG, ...) */
  TUN_INT(x, "TE_TEST_LIST_X", 5, -5, 50);
  TUN_STR(y, "TE_TEST_LIST_Y", "one", "one|two");
  setenv("TE_TEST_LIST_X", "0x10", 1);
  unsetenv("TE_TEST_LIST_Y");
  TE_OK(tecore_tunable_register(&x));
  TE_OK(tecore_tunable_register(&y));
  TE_OK(tecore_tunable_count(&after));
  ck_assert_int_eq(after, before + 2);

  int seen_x = 0, seen_y = 0;
  char prev[256] = "";
  for (int i = 0; i < after; i++) {
    struct tecore_tunable_info info;
    TE_OK(tecore_tunable_get_info(i, &info));
    ck_assert_ptr_nonnull(info.env);
    ck_assert_ptr_nonnull(info.name);
    ck_assert_msg(info.help && info.help[0], "%s has no help", info.env);
    ck_assert_msg(strcmp(prev, info.env) < 0, "not sorted by env: %s after %s", info.env, prev);
    snprintf(prev, sizeof prev, "%s", info.env);
    if (strcmp(info.env, "TE_TEST_LIST_X") == 0) {
      seen_x++;
      ck_assert_str_eq(info.name, "x");
      ck_assert_int_eq(info.type, TECORE_TUNABLE_INT);
      ck_assert_int_eq(info.def_int, 5);
      ck_assert_int_eq(info.min, -5);
      ck_assert_int_eq(info.max, 50);
      ck_assert_int_eq(info.value_int, 16);
      ck_assert_int_eq(info.set_in_env, 1);
    } else if (strcmp(info.env, "TE_TEST_LIST_Y") == 0) {
      seen_y++;
      ck_assert_int_eq(info.type, TECORE_TUNABLE_STRING);
      ck_assert_str_eq(info.def_str, "one");
      ck_assert_str_eq(info.choices, "one|two");
      ck_assert_str_eq(info.value_str, "one");
      ck_assert_int_eq(info.set_in_env, 0);
    }
  }
  ck_assert_int_eq(seen_x, 1);
  ck_assert_int_eq(seen_y, 1);

  struct tecore_tunable_info info;
  TE_OK(tecore_tunable_find("TE_TEST_LIST_X", &info));
  ck_assert_int_eq(info.value_int, 16);
  TE_OK(tecore_tunable_find("TE_DEVICE", &info));
  ck_assert_int_eq(info.type, TECORE_TUNABLE_STRING);
  ck_assert_msg(info.help && info.help[0], "TE_DEVICE has no help");
  TE_OK(tecore_tunable_find("TE_DEBUG", &info));
  TE_EXPECT_FAIL(tecore_tunable_find("TE_TEST_NO_SUCH_KNOB", &info));
  TE_EXPECT_INVALID("index", tecore_tunable_get_info(after, &info));
  TE_EXPECT_INVALID("index", tecore_tunable_get_info(-1, &info));
  TE_EXPECT_INVALID("info", tecore_tunable_find("TE_DEVICE", NULL));
  TE_EXPECT_INVALID("env", tecore_tunable_find(NULL, &info));
  TE_EXPECT_INVALID("count", tecore_tunable_count(NULL));
}
END_TEST

/* A renamed tunable (old_env): the old name is read when the new one is
 * unset, with a WARN line saying it is deprecated; the new name wins when
 * both are set; the listing and tecore_tunable_find know the old name.
 * (TE_OPS_FUSION and friends were renamed this way.) */
START_TEST(renamed_old_name_still_read) {
  char dir[256], path[512];
  te_tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/log", dir);
  setenv("TE_DEBUG", "WARN", 1);
  setenv("TE_DEBUG_FILE", path, 1);
  unsetenv("TE_DEBUG_SUBSYS");
  int64_t v_old = (int64_t)te_rand_below(1000) + 1, v_new = v_old + 1 + te_rand_below(1000);
  char buf[32];

  TUN_INT(old_only, "TE_TEST_RN_NEW1", 0, 0, 5000);
  old_only.old_env = "TE_TEST_RN_OLD1";
  unsetenv("TE_TEST_RN_NEW1");
  snprintf(buf, sizeof buf, "%lld", (long long)v_old);
  setenv("TE_TEST_RN_OLD1", buf, 1);
  TE_OK(tecore_tunable_register(&old_only));
  ck_assert_int_eq(tecore_tunable_int(&old_only), v_old);

  TUN_STR(both, "TE_TEST_RN_NEW2", "d", NULL);
  both.old_env = "TE_TEST_RN_OLD2";
  snprintf(buf, sizeof buf, "n%lld", (long long)v_new);
  setenv("TE_TEST_RN_NEW2", buf, 1);
  setenv("TE_TEST_RN_OLD2", "o", 1);
  TE_OK(tecore_tunable_register(&both));
  ck_assert_str_eq(tecore_tunable_str(&both), buf);

  TUN_INT(neither, "TE_TEST_RN_NEW3", 7, 0, 10);
  neither.old_env = "TE_TEST_RN_OLD3";
  unsetenv("TE_TEST_RN_NEW3");
  unsetenv("TE_TEST_RN_OLD3");
  TE_OK(tecore_tunable_register(&neither));
  ck_assert_int_eq(tecore_tunable_int(&neither), 7);

  struct tecore_tunable_info info;
  TE_OK(tecore_tunable_find("TE_TEST_RN_OLD1", &info));
  ck_assert_str_eq(info.env, "TE_TEST_RN_NEW1");
  ck_assert_str_eq(info.old_env, "TE_TEST_RN_OLD1");
  ck_assert_int_eq(info.set_in_env, 1);
  ck_assert_int_eq(info.value_int, v_old);
  TE_OK(tecore_tunable_find("TE_TEST_RN_NEW3", &info));
  ck_assert_int_eq(info.set_in_env, 0);

  /* a name is one tunable's, whether new or old */
  TUN_INT(clash_old, "TE_TEST_RN_NEW4", 0, 0, 1);
  clash_old.old_env = "TE_TEST_RN_NEW1";
  TE_EXPECT_INVALID("TE_TEST_RN_NEW1", tecore_tunable_register(&clash_old));
  TUN_INT(clash_new, "TE_TEST_RN_OLD1", 0, 0, 1);
  TE_EXPECT_INVALID("TE_TEST_RN_OLD1", tecore_tunable_register(&clash_new));
  TUN_INT(same, "TE_TEST_RN_NEW5", 0, 0, 1);
  same.old_env = "TE_TEST_RN_NEW5";
  TE_EXPECT_INVALID("old_env", tecore_tunable_register(&same));
  TE_EXPECT_FAIL(tecore_tunable_find("TE_TEST_RN_NEW4", &info));
  TE_EXPECT_FAIL(tecore_tunable_find("TE_TEST_RN_NEW5", &info));

  /* the library's own renamed knobs answer to their old names */
  TE_OK(tecore_tunable_find("TE_OPS_FUSION", &info));
  ck_assert_str_eq(info.env, "TECORE_OPS_FUSION");
  TE_OK(tecore_tunable_find("TE_OPS_GEMM_WORKSPACE_MB", &info));
  ck_assert_str_eq(info.env, "TECORE_OPS_GEMM_WORKSPACE_MB");
  /* the multicast switch is registered (te-info -e lists it), default on */
  TE_OK(tecore_tunable_find("TECOMM_NVLS_ENABLE", &info));
  ck_assert_int_eq(info.type, TECORE_TUNABLE_INT);
  ck_assert_int_eq(info.def_int, 1);
  ck_assert_int_eq(info.min, 0);
  ck_assert_int_eq(info.max, 1);

  if (te_test_forking) {
    FILE *fp = fopen(path, "r");
    ck_assert_msg(fp != NULL, "no log file %s after a deprecated name", path);
    char text[8192];
    size_t n = fread(text, 1, sizeof text - 1, fp);
    text[n] = '\0';
    fclose(fp);
    ck_assert_msg(strstr(text, "TE_TEST_RN_OLD1 is deprecated: use TE_TEST_RN_NEW1"),
                  "no deprecation line for TE_TEST_RN_OLD1; log:\n%s", text);
    ck_assert_msg(strstr(text, "TE_TEST_RN_OLD2 is deprecated and ignored"),
                  "no line saying TE_TEST_RN_OLD2 is ignored; log:\n%s", text);
    ck_assert_msg(!strstr(text, "TE_TEST_RN_OLD3"), "a warning for an unset old name:\n%s",
                  text);
  }
  unsetenv("TE_TEST_RN_OLD1");
  unsetenv("TE_TEST_RN_NEW2");
  unsetenv("TE_TEST_RN_OLD2");
  te_rmtree(dir);
}
END_TEST

static Suite *tunable_suite(void) {
  Suite *s = suite_create("tunable");
  TCase *tc = te_tcase(s, "values", 0);
  tcase_add_test(tc, int_decimal_and_hex);
  tcase_add_test(tc, int_bad_values_use_default);
  tcase_add_test(tc, string_free_and_choices);
  tcase_add_test(tc, read_once);
  tc = te_tcase(s, "registry", 0);
  tcase_add_test(tc, register_rules);
  tcase_add_test(tc, test_int_tunable_leading_zero_is_decimal);
  tcase_add_test(tc, test_tunable_default_outside_choices_is_refused);
  tcase_add_test(tc, listing);
  tcase_add_test(tc, renamed_old_name_still_read);
  return s;
}

TE_TEST_MAIN(tunable_suite, TE_TEST_NODEVICE)
