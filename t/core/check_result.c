/* SPDX-License-Identifier: Apache-2.0 */
/* check_result.c -- result codes, their names and messages, and the
 * per-thread last-error detail (te/result.h).  Needs no device: failing
 * calls come from the tunable registry, which validates like every other
 * public function. */
#include "tests.h"
#include <pthread.h>

/* Every code from the one list, with the name and message it must have. */
static const struct {
  tecore_result_t code;
  const char *name, *msg;
} all_codes[] = {
#define TE_T_ROW_(name, value, msg) {name, #name, msg},
    TECORE_RESULT_LIST(TE_T_ROW_)
#undef TE_T_ROW_
};
#define NCODES (sizeof all_codes / sizeof all_codes[0])

START_TEST(codes_are_dense_and_counted) {
  ck_assert_int_eq((int)NCODES, (int)TECORE_RESULT_COUNT_);
  for (size_t i = 0; i < NCODES; i++) ck_assert_int_eq((int)all_codes[i].code, (int)i);
  ck_assert_int_eq(TECORE_SUCCESS, 0);
}
END_TEST

START_TEST(names_and_messages_distinct) {
  for (size_t i = 0; i < NCODES; i++) {
    tecore_result_t r = all_codes[i].code;
    const char *name = tecore_result_name(r), *msg = tecore_strerror(r);
    ck_assert_ptr_nonnull(name);
    ck_assert_ptr_nonnull(msg);
    ck_assert_msg(name[0] && msg[0], "code %d has an empty name or message", (int)r);
    ck_assert_str_eq(name, all_codes[i].name);
    ck_assert_str_eq(msg, all_codes[i].msg);
    for (size_t j = 0; j < i; j++) {
      tecore_result_t q = all_codes[j].code;
      ck_assert_msg(strcmp(name, tecore_result_name(q)) != 0, "codes %d and %d share the name %s",
                    (int)r, (int)q, name);
      ck_assert_msg(strcmp(msg, tecore_strerror(q)) != 0,
                    "codes %d and %d share the message \"%s\"", (int)r, (int)q, msg);
    }
  }
}
END_TEST

START_TEST(unknown_code) {
  const tecore_result_t bad[] = {TECORE_RESULT_COUNT_, (tecore_result_t)-1,
                                 (tecore_result_t)1000, (tecore_result_t)0x7fffffff};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const char *msg = tecore_strerror(bad[i]), *name = tecore_result_name(bad[i]);
    ck_assert_ptr_nonnull(msg);
    ck_assert_ptr_nonnull(name);
    ck_assert_msg(strstr(msg, "unknown"), "tecore_strerror(%d) = \"%s\"", (int)bad[i], msg);
    ck_assert_msg(strstr(name, "unknown"), "tecore_result_name(%d) = \"%s\"", (int)bad[i],
                  name);
  }
}
END_TEST

START_TEST(detail_names_the_argument) {
  struct tecore_tunable_info info;
  tecore_clear_error();
  ck_assert_str_eq(tecore_last_error(), "");
  TE_EXPECT_INVALID("count", tecore_tunable_count(NULL));
  TE_EXPECT_INVALID("info", tecore_tunable_get_info(0, NULL));
  TE_EXPECT_INVALID("env", tecore_tunable_find(NULL, &info));
  TE_EXPECT_INVALID("index", tecore_tunable_get_info(-1, &info));
  /* the detail names the function too */
  TE_EXPECT_INVALID("tecore_tunable_count", tecore_tunable_count(NULL));
  tecore_clear_error();
  ck_assert_str_eq(tecore_last_error(), "");
}
END_TEST

START_TEST(set_error_formats) {
  unsigned v = te_rand_u32();
  tecore_set_error("layer said %u and %s", v, "more");
  char want[64];
  snprintf(want, sizeof want, "layer said %u and more", v);
  ck_assert_str_eq(tecore_last_error(), want);
  /* errno is the caller's */
  errno = ENOTTY;
  tecore_set_error("x");
  ck_assert_int_eq(errno, ENOTTY);
  tecore_clear_error();
  ck_assert_str_eq(tecore_last_error(), "");
}
END_TEST

/* ---- per thread ---- */

struct thread_view {
  char seen_at_start[256];
  char own[256];
  pthread_barrier_t *go, *done;
};

static void *other_thread(void *arg) {
  struct thread_view *v = arg;
  snprintf(v->seen_at_start, sizeof v->seen_at_start, "%s", tecore_last_error());
  (void)tecore_tunable_get_info(0, NULL); /* the thread's own failure */
  snprintf(v->own, sizeof v->own, "%s", tecore_last_error());
  pthread_barrier_wait(v->go);   /* main checks its detail is still its own */
  pthread_barrier_wait(v->done);
  return NULL;
}

START_TEST(detail_is_per_thread) {
  pthread_barrier_t go, done;
  pthread_barrier_init(&go, NULL, 2);
  pthread_barrier_init(&done, NULL, 2);
  struct thread_view v = {.go = &go, .done = &done};
  TE_EXPECT_INVALID("count", tecore_tunable_count(NULL));
  char mine[256];
  snprintf(mine, sizeof mine, "%s", tecore_last_error());
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, other_thread, &v), 0);
  pthread_barrier_wait(&go);
  /* the other thread failed differently after ours: ours is unchanged */
  ck_assert_str_eq(tecore_last_error(), mine);
  pthread_barrier_wait(&done);
  pthread_join(th, NULL);
  ck_assert_msg(v.seen_at_start[0] == '\0',
                "a new thread sees another thread's detail: \"%s\"", v.seen_at_start);
  ck_assert_msg(strstr(v.own, "info") != NULL, "the thread's own detail: \"%s\"", v.own);
  ck_assert_str_ne(v.own, mine);
  pthread_barrier_destroy(&go);
  pthread_barrier_destroy(&done);
}
END_TEST

static Suite *result_suite(void) {
  Suite *s = suite_create("result");
  TCase *tc = te_tcase(s, "codes", 0);
  tcase_add_test(tc, codes_are_dense_and_counted);
  tcase_add_test(tc, names_and_messages_distinct);
  tcase_add_test(tc, unknown_code);
  tc = te_tcase(s, "detail", 0);
  tcase_add_test(tc, detail_names_the_argument);
  tcase_add_test(tc, set_error_formats);
  tcase_add_test(tc, detail_is_per_thread);
  return s;
}

TE_TEST_MAIN(result_suite, TE_TEST_NODEVICE)
