/* check_hardening.c -- the public API's answers to bad input (issue 9):
 * calls that fail leave their objects and out-parameters as they were,
 * descriptors that overflow or wrap are refused, destroyed handles are
 * recognized, tunables and debug settings parse as documented.  Each test
 * is named after what broke (a crash, a leak, a silent acceptance). */
#include "tests.h"
#include <te/ops.h>

/* ---- sequences ------------------------------------------------------------------- */

static tecore_seq_t *small_seq(void) {
  struct tecore_seq_config cfg = {.rows = 8, .features = 16, .dtype = TECORE_DTYPE_F32,
                                  .seed = te_rand_u64()};
  tecore_seq_t *s = NULL;
  TE_OK(tecore_seq_create(&cfg, &s));
  struct tecore_op_desc lin = {.kind = TECORE_OP_LINEAR, .features = 32, .bias = 1};
  TE_OK(tecore_seq_add(s, &lin, NULL));
  TE_OK(tecore_seq_build(s, te_stream));
  return s;
}

/* A destroy refused during a global capture freed the object anyway (its
 * buffers leaked; a retry was a use after free). */
START_TEST(test_seq_destroy_during_capture_leaves_seq_intact) {
  tecore_seq_t *s = small_seq();
  size_t pb = 0, tb = 0, pb2 = 0, tb2 = 0;
  TE_OK(tecore_seq_memory(s, &pb, &tb));
  ck_assert_uint_gt(tb, 0);
  TE_OK(tecore_stream_begin_capture(te_stream, TECORE_CAPTURE_GLOBAL));
  TE_EXPECT_ERR(TECORE_ERR_CAPTURE, NULL, tecore_seq_destroy(s));
  tecore_graph_t g = NULL;
  TE_EXPECT_FAIL(tecore_stream_end_capture(te_stream, &g)); /* the capture was invalidated */
  TE_OK(tecore_seq_memory(s, &pb2, &tb2));
  ck_assert_uint_eq(pb2, pb);
  ck_assert_uint_eq(tb2, tb);
  TE_OK(tecore_seq_destroy(s));
}
END_TEST

static Suite *hardening_suite(void) {
  Suite *s = suite_create("hardening");
  TCase *tc = te_tcase(s, "seq", 1);
  tcase_add_test(tc, test_seq_destroy_during_capture_leaves_seq_intact);
  return s;
}

TE_TEST_MAIN(hardening_suite, TE_TEST_DEVICE)
