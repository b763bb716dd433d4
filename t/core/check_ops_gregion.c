/* SPDX-License-Identifier: Apache-2.0 */
/* check_ops_gregion.c -- tecore_seq_set_grad_region (te/ops.h): a training
 * sequence's parameter gradients in one region the caller allocates.
 * The gradients lie there end to end in operation order, each 256-byte
 * aligned, the padding zeroed by the build (the callback hands back
 * memory full of 0xff, NaN as F32 and BF16) and never written; two
 * microbatches of forward and backward give the same bits as the twin
 * sequence with its own allocations (BF16; BF16 weight gradients; FP8
 * delayed); the memory counts are the twin's.  Refusals: bad arguments,
 * after build, inference.  A failing alloc, a base of 0 or misaligned, a
 * build failing after the region was taken: the build fails with the
 * reason, nothing stays allocated (every region handed out comes back
 * to release exactly once).
 *
 * Shapes: two pre-norm MLP blocks (RMSNorm, Linear+bias, GELU,
 * Linear+bias, residual), hidden 48, ffn 80, 32 tokens: an 80-float bias
 * is 320 bytes, so the gradients have padding between them.
 *
 * Tolerance: none -- the same kernels on the same bytes at other
 * addresses (both 256-byte aligned), on vdev and cuda alike. */
#include "tests.h"
#include "common/convert.h"

/* the small Linears in FP8 on cuda too (its default keeps them in BF16) */
__attribute__((constructor)) static void fp8_everywhere(void) {
  setenv("TECORE_OPS_FP8_MIN_MNK", "0", 0);
}

enum { HID = 48, FFN = 80, ROWS = 32, NBLK = 2, MAXP = 64 };
#define NY ((size_t)ROWS * HID)
#include "seq_twin.h"

/* The caller's side of the region: what alloc was asked and gave. */
enum gr_mode { GR_OK, GR_FAIL, GR_ZERO, GR_MISALIGNED, GR_RELEASE_FAILS };
struct region {
  enum gr_mode mode;
  int allocs, releases;
  size_t bytes;
  tecore_devptr_t real;    /* what tecore_mem_alloc gave */
  tecore_devptr_t given;   /* what alloc handed the sequence */
  tecore_devptr_t released;
};

static tecore_result_t gr_alloc(void *ctx, size_t bytes, tecore_devptr_t *base) {
  struct region *r = ctx;
  r->allocs++;
  r->bytes = bytes;
  if (r->mode == GR_FAIL) {
    tecore_set_error("the test's pool is exhausted");
    return TECORE_ERR_NOMEM;
  }
  if (r->mode == GR_ZERO) return *base = 0, TECORE_SUCCESS;
  tecore_result_t e = tecore_mem_alloc(bytes + 256, &r->real);
  if (e != TECORE_SUCCESS) return e;
  /* NaN everywhere: the build must zero what it does not fill */
  e = tecore_memset_d8_async(r->real, 0xff, bytes + 256, te_stream);
  if (e == TECORE_SUCCESS) e = tecore_stream_synchronize(te_stream);
  r->given = r->real + (r->mode == GR_MISALIGNED ? 16 : 0);
  *base = r->given;
  return e;
}

static tecore_result_t gr_release(void *ctx, tecore_devptr_t base) {
  struct region *r = ctx;
  r->releases++;
  r->released = base;
  tecore_result_t e = tecore_mem_free(r->real);
  r->real = 0;
  if (e != TECORE_SUCCESS || r->mode != GR_RELEASE_FAILS) return e;
  tecore_set_error("the test's release refuses");
  return TECORE_ERR_INVALID;
}

static struct tecore_seq_grad_region region_of(struct region *r) {
  return (struct tecore_seq_grad_region){.alloc = gr_alloc, .release = gr_release, .ctx = r};
}

static size_t round256(size_t b) { return (b + 255) / 256 * 256; }

/* ---- the model ------------------------------------------------------------------ */

static tecore_seq_t *mlp_unbuilt(unsigned flags, const struct tecore_recipe *rc) {
  struct tecore_seq_config cfg = {.rows = ROWS, .features = HID, .dtype = TECORE_DTYPE_BF16,
                                  .seed = 11, .flags = flags};
  tecore_seq_t *s = NULL;
  TE_OK(tecore_seq_create(&cfg, &s));
  for (int b = 0; b < NBLK; b++) {
    const struct tecore_op_desc d[6] = {
        {.kind = TECORE_OP_MAKE_EXTRA_OUTPUT, .slot = b},
        {.kind = TECORE_OP_RMSNORM, .epsilon = 1e-5f},
        {.kind = TECORE_OP_LINEAR, .features = FFN, .bias = 1},
        {.kind = TECORE_OP_GELU},
        {.kind = TECORE_OP_LINEAR, .features = HID, .bias = 1},
        {.kind = TECORE_OP_ADD_EXTRA_INPUT, .slot = b}};
    for (int k = 0; k < 6; k++) TE_OK(tecore_seq_add(s, &d[k], NULL));
  }
  if (rc) TE_OK(tecore_seq_set_recipe(s, rc, te_stream));
  return s;
}

/* The gradients of s lie in r's region, in order, 256-byte aligned, and
 * fill it exactly. */
static void expect_in_region(tecore_seq_t *s, const struct region *r) {
  struct tecore_seq_param p[MAXP];
  size_t n = 0, off = 0;
  TE_OK(tecore_seq_params(s, p, MAXP, &n));
  ck_assert_uint_gt(n, 0);
  for (size_t i = 0; i < n; i++) {
    size_t bytes = tecore_tensor_numel(&p[i].grad) * tecore_dtype_size(p[i].grad.dtype);
    ck_assert_msg(p[i].grad.data == r->given + off, "parameter %zu (%s of op %zu): gradient at "
                  "0x%llx, expected base + %zu", i, p[i].name, p[i].op,
                  (unsigned long long)p[i].grad.data, off);
    off += round256(bytes);
  }
  ck_assert_uint_eq(off, r->bytes);
}

/* The padding after each gradient: zeros (the build wrote them over the
 * callback's 0xff; the passes never touch them). */
static void expect_padding_zero(tecore_seq_t *s, const struct region *r) {
  unsigned char *h = malloc(r->bytes);
  ck_assert_ptr_nonnull(h);
  te_d2h(h, r->given, r->bytes);
  struct tecore_seq_param p[MAXP];
  size_t n = 0, off = 0;
  TE_OK(tecore_seq_params(s, p, MAXP, &n));
  for (size_t i = 0; i < n; i++) {
    size_t bytes = tecore_tensor_numel(&p[i].grad) * tecore_dtype_size(p[i].grad.dtype);
    for (size_t k = off + bytes; k < off + round256(bytes); k++)
      ck_assert_msg(h[k] == 0, "padding byte %zu after parameter %zu (%s): 0x%02x", k, i,
                    p[i].name, h[k]);
    off += round256(bytes);
  }
  free(h);
}

/* A sequence with a region against its twin without: layout, memory,
 * the bits of two microbatches, the release at destroy. */
static void same_bits(unsigned flags, const struct tecore_recipe *rc) {
  struct region r = {.mode = GR_OK};
  struct tecore_seq_grad_region g = region_of(&r);
  tecore_seq_t *own = mlp_unbuilt(flags, rc), *in = mlp_unbuilt(flags, rc);
  TE_OK(tecore_seq_set_grad_region(in, &g));
  TE_OK(tecore_seq_build(own, te_stream));
  TE_OK(tecore_seq_build(in, te_stream));
  ck_assert_int_eq(r.allocs, 1);
  expect_in_region(in, &r);
  size_t p0 = 0, t0 = 0, p1 = 1, t1 = 1;
  TE_OK(tecore_seq_memory(own, &p0, &t0));
  TE_OK(tecore_seq_memory(in, &p1, &t1));
  ck_assert_uint_eq(p0, p1);
  ck_assert_uint_eq(t0, t1);
  twins_same(own, in);
  expect_padding_zero(in, &r);
  TE_OK(tecore_seq_destroy(own));
  ck_assert_int_eq(r.releases, 0);
  TE_OK(tecore_seq_destroy(in));
  ck_assert_int_eq(r.releases, 1);
  ck_assert(r.released == r.given);
}

START_TEST(test_gregion_bf16_same_bits) { same_bits(0, NULL); }
END_TEST

START_TEST(test_gregion_bf16_wgrad_same_bits) { same_bits(TECORE_SEQ_BF16_WGRAD, NULL); }
END_TEST

START_TEST(test_gregion_fp8_delayed_same_bits) {
  struct tecore_recipe rc;
  TE_OK(tecore_recipe_init(&rc, TECORE_RECIPE_DELAYED));
  same_bits(0, &rc);
}
END_TEST

/* ---- refusals and failures ------------------------------------------------------------ */

START_TEST(test_gregion_args_refused) {
  struct region r = {.mode = GR_OK};
  struct tecore_seq_grad_region g = region_of(&r), none = {.ctx = &r};
  TE_EXPECT_INVALID("seq is NULL", tecore_seq_set_grad_region(NULL, &g));
  tecore_seq_t *s = mlp_unbuilt(0, NULL);
  TE_EXPECT_INVALID("region->alloc is NULL", tecore_seq_set_grad_region(s, &none));
  /* set, then removed: the sequence's own allocations */
  TE_OK(tecore_seq_set_grad_region(s, &g));
  TE_OK(tecore_seq_set_grad_region(s, NULL));
  TE_OK(tecore_seq_build(s, te_stream));
  ck_assert_int_eq(r.allocs, 0);
  TE_EXPECT_INVALID("built", tecore_seq_set_grad_region(s, &g));
  TE_EXPECT_INVALID("built", tecore_seq_set_grad_region(s, NULL));
  TE_OK(tecore_seq_destroy(s));
  TE_EXPECT_INVALID("not a live sequence", tecore_seq_set_grad_region(s, &g));
  s = mlp_unbuilt(TECORE_SEQ_INFERENCE, NULL);
  TE_EXPECT_INVALID("inference", tecore_seq_set_grad_region(s, &g));
  TE_OK(tecore_seq_destroy(s));
  ck_assert_int_eq(r.allocs, 0);
  ck_assert_int_eq(r.releases, 0);
}
END_TEST

/* A build that fails: the code and the reason, nothing held, the region
 * (when one was handed out) released once; the sequence builds after. */
static void failed_build(struct region *r, tecore_result_t code, const char *why,
                         const struct tecore_recipe *rc, int features) {
  struct tecore_seq_grad_region g = region_of(r);
  tecore_seq_t *s = mlp_unbuilt(0, rc);
  if (features) {
    const struct tecore_op_desc d = {.kind = TECORE_OP_LINEAR, .features = (size_t)features};
    TE_OK(tecore_seq_add(s, &d, NULL));
  }
  TE_OK(tecore_seq_set_grad_region(s, &g));
  TE_EXPECT_ERR(code, why, tecore_seq_build(s, te_stream));
  ck_assert_int_eq(r->allocs, 1);
  ck_assert_int_eq(r->releases, r->given ? 1 : 0);
  ck_assert(r->released == r->given);
  ck_assert(r->real == 0);
  size_t pb = 1, tb = 1;
  TE_OK(tecore_seq_memory(s, &pb, &tb));
  ck_assert_uint_eq(pb, 0);
  ck_assert_uint_eq(tb, 0);
  struct tecore_seq_param p;
  size_t n = 0;
  TE_EXPECT_INVALID("not built", tecore_seq_params(s, &p, 1, &n));
  if (!features) {   /* the same sequence builds with a good region */
    *r = (struct region){.mode = GR_OK};
    TE_OK(tecore_seq_build(s, te_stream));
    expect_in_region(s, r);
  }
  TE_OK(tecore_seq_destroy(s));
  ck_assert_int_eq(r->releases, r->allocs);
}

START_TEST(test_gregion_alloc_fails_build_fails) {
  struct region r = {.mode = GR_FAIL};
  failed_build(&r, TECORE_ERR_NOMEM, "the test's pool is exhausted", NULL, 0);
}
END_TEST

START_TEST(test_gregion_alloc_base_zero_refused) {
  struct region r = {.mode = GR_ZERO};
  failed_build(&r, TECORE_ERR_INVALID, "base 0", NULL, 0);
}
END_TEST

START_TEST(test_gregion_alloc_misaligned_released) {
  struct region r = {.mode = GR_MISALIGNED};
  failed_build(&r, TECORE_ERR_INVALID, "not a multiple of 256", NULL, 0);
}
END_TEST

/* The recipe set before the operations, then a Linear whose 24 features
 * FP8 GEMMs refuse: the build fails after it took the region. */
START_TEST(test_gregion_build_fails_after_alloc_released) {
  struct tecore_recipe rc;
  TE_OK(tecore_recipe_init(&rc, TECORE_RECIPE_DELAYED));
  struct region r = {.mode = GR_OK};
  failed_build(&r, TECORE_ERR_INVALID, "multiples of 16", &rc, 24);
}
END_TEST

START_TEST(test_gregion_release_error_from_destroy) {
  struct region r = {.mode = GR_RELEASE_FAILS};
  struct tecore_seq_grad_region g = region_of(&r);
  tecore_seq_t *s = mlp_unbuilt(0, NULL);
  TE_OK(tecore_seq_set_grad_region(s, &g));
  TE_OK(tecore_seq_build(s, te_stream));
  TE_EXPECT_INVALID("the test's release refuses", tecore_seq_destroy(s));
  ck_assert_int_eq(r.releases, 1);
  TE_EXPECT_INVALID("not a live sequence", tecore_seq_destroy(s));   /* destroyed all the same */
}
END_TEST

static Suite *ops_gregion_suite(void) {
  Suite *s = suite_create("ops_gregion");
  TCase *tc = te_tcase(s, "same_bits", 1);
  tcase_add_test(tc, test_gregion_bf16_same_bits);
  tcase_add_test(tc, test_gregion_bf16_wgrad_same_bits);
  tcase_add_test(tc, test_gregion_fp8_delayed_same_bits);
  tc = te_tcase(s, "refusals", 1);
  tcase_add_test(tc, test_gregion_args_refused);
  tcase_add_test(tc, test_gregion_alloc_fails_build_fails);
  tcase_add_test(tc, test_gregion_alloc_base_zero_refused);
  tcase_add_test(tc, test_gregion_alloc_misaligned_released);
  tcase_add_test(tc, test_gregion_build_fails_after_alloc_released);
  tcase_add_test(tc, test_gregion_release_error_from_destroy);
  return s;
}

TE_TEST_MAIN(ops_gregion_suite, TE_TEST_DEVICE)
