/* SPDX-License-Identifier: Apache-2.0 */
/* check_ops_param.c -- tecore_seq_set_param (te/ops.h): a parameter's
 * value in storage the caller gives (what libtecomm's ZeRO-3 points into
 * its ring); and tecore_seq_set_param_grad, its gradient so (ZeRO-3's
 * gradient ring): every gradient moved into one poisoned allocation,
 * zero_grad and two microbatches give the twin's gradients bit for bit,
 * the sequence's bytes drop by the gradients', ptr 0 gives its own
 * zeroed storage back, refusals name the argument; and
 * tecore_seq_set_fp8_weight_data, a given FP8 weight's codes so (ZeRO-3's
 * ring): the twin's bits, the bytes freed, a new recipe or given 0 end it.  Every parameter moved into one allocation of the caller's:
 * tecore_seq_params reports the new addresses, the sequence's parameter
 * bytes drop by theirs, and fresh random values written there give two
 * microbatches of forward and backward the same bits as the twin
 * sequence holding the same values in its own storage (BF16; FP8
 * delayed, whose forward quantizes the moved weights).  ptr 0 gives
 * storage of the sequence's own again, zeroed, and the caller's memory is
 * no longer read or written.  Refusals name the argument.  Destroy never
 * frees the caller's memory (ASan would see the double free).
 *
 * Shapes: two pre-norm MLP blocks (RMSNorm, Linear+bias, GELU,
 * Linear+bias, residual), hidden 48, ffn 80, 32 tokens.
 *
 * Tolerance: none -- the same kernels on the same bytes at other
 * addresses, on vdev and cuda alike. */
#include "tests.h"
#include "common/convert.h"

/* the small Linears in FP8 on cuda too (its default keeps them in BF16) */
__attribute__((constructor)) static void fp8_everywhere(void) {
  setenv("TECORE_OPS_FP8_MIN_MNK", "0", 0);
}

enum { HID = 48, FFN = 80, ROWS = 32, NBLK = 2, MAXP = 64 };
#define NY ((size_t)ROWS * HID)
#include "seq_twin.h"

static size_t round256(size_t b) { return (b + 255) / 256 * 256; }

static tecore_seq_t *mlp(const struct tecore_recipe *rc) {
  struct tecore_seq_config cfg = {.rows = ROWS, .features = HID, .dtype = TECORE_DTYPE_BF16,
                                  .seed = 13};
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
  TE_OK(tecore_seq_build(s, te_stream));
  return s;
}

static size_t param_list(tecore_seq_t *s, struct tecore_seq_param *p) {
  size_t n = 0;
  TE_OK(tecore_seq_params(s, p, MAXP, &n));
  ck_assert_uint_gt(n, 0);
  return n;
}

static size_t value_bytes(const struct tecore_seq_param *p) {
  return tecore_tensor_numel(&p->value) * tecore_dtype_size(p->value.dtype);
}

static size_t grad_bytes(const struct tecore_seq_param *p) {
  return tecore_tensor_numel(&p->grad) * tecore_dtype_size(p->grad.dtype);
}

/* Every parameter's value (grad 0) or gradient (1) of s into one
 * allocation (returned), 256 bytes apart at least, poisoned first: the
 * values are what the caller writes, the gradients what zero_grad and the
 * backward write.  The sequence's own are freed; tecore_seq_params
 * reports the new addresses. */
static tecore_devptr_t move_all(tecore_seq_t *s, int grad) {
  struct tecore_seq_param p[MAXP];
  size_t (*bytes)(const struct tecore_seq_param *) = grad ? grad_bytes : value_bytes;
  size_t n = param_list(s, p), total = 0;
  for (size_t i = 0; i < n; i++) total += round256(bytes(&p[i]));
  tecore_devptr_t base = te_dalloc(total);
  te_poison_dev(base, total);
  size_t p0 = 0, p1 = 0, off = 0;
  TE_OK(tecore_seq_memory(s, &p0, NULL));
  for (size_t i = 0; i < n; i++) {
    TE_OK(grad ? tecore_seq_set_param_grad(s, i, base + off)
               : tecore_seq_set_param(s, i, base + off));
    off += round256(bytes(&p[i]));
  }
  TE_OK(tecore_seq_memory(s, &p1, NULL));
  ck_assert_uint_eq(p1, p0 - total);   /* the sequence's own are freed */
  param_list(s, p);
  off = 0;
  for (size_t i = 0; i < n; i++) {
    tecore_devptr_t at = grad ? p[i].grad.data : p[i].value.data;
    ck_assert_msg(at == base + off, "%s %zu (%s): at 0x%llx, given base + %zu",
                  grad ? "gradient" : "parameter", i, p[i].name, (unsigned long long)at, off);
    off += round256(bytes(&p[i]));
  }
  return base;
}

static void same_bits(const struct tecore_recipe *rc) {
  tecore_seq_t *own = mlp(rc), *moved = mlp(rc);
  tecore_devptr_t base = move_all(moved, 0);
  twins_same(moved, own);
  TE_OK(tecore_seq_destroy(moved));   /* the caller's memory stays the caller's */
  TE_OK(tecore_seq_destroy(own));
  TE_OK(tecore_mem_free(base));
}

START_TEST(test_param_moved_bf16_same_bits) { same_bits(NULL); }
END_TEST

START_TEST(test_param_moved_fp8_delayed_same_bits) {
  struct tecore_recipe rc;
  TE_OK(tecore_recipe_init(&rc, TECORE_RECIPE_DELAYED));
  same_bits(&rc);
}
END_TEST

/* ptr 0: the sequence's own storage again, zeroed; the caller's memory
 * no longer touched by a pass. */
START_TEST(test_param_back_to_own_zeroed) {
  tecore_seq_t *s = mlp(NULL);
  struct tecore_seq_param p[MAXP];
  size_t n = param_list(s, p);
  size_t bytes = value_bytes(&p[1]);   /* block 0's fc1 weight */
  tecore_devptr_t mine = te_dalloc(bytes);
  put_bf16(mine, bytes / 2, -0.2f, 0.2f);
  unsigned char *want = malloc(bytes), *got = malloc(bytes);
  ck_assert(want && got);
  te_d2h(want, mine, bytes);
  TE_OK(tecore_seq_set_param(s, 1, mine));
  TE_OK(tecore_seq_set_param(s, 1, 0));
  TE_OK(tecore_seq_set_param(s, 1, 0));   /* already its own: nothing to do */
  param_list(s, p);
  ck_assert(p[1].value.data != mine);
  te_d2h(got, p[1].value.data, bytes);
  for (size_t i = 0; i < bytes; i++) ck_assert_msg(got[i] == 0, "own byte %zu: 0x%02x", i, got[i]);
  tecore_devptr_t x = te_dalloc(NY * 2), y = te_dalloc(NY * 2);
  size_t sh[2] = {ROWS, HID};
  struct tecore_tensor X, Y;
  put_bf16(x, NY, -1.f, 1.f);
  TE_OK(tecore_tensor_init(&X, TECORE_DTYPE_BF16, 2, sh, x));
  TE_OK(tecore_tensor_init(&Y, TECORE_DTYPE_BF16, 2, sh, y));
  TE_OK(tecore_seq_forward(s, &X, &Y, 0, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  te_d2h(got, mine, bytes);
  te_expect_mem_eq(want, got, bytes, "the caller's memory after ptr 0");
  ck_assert_uint_eq(n, NBLK * 5);
  TE_OK(tecore_seq_destroy(s));
  TE_OK(tecore_mem_free(mine));
  TE_OK(tecore_mem_free(x));
  TE_OK(tecore_mem_free(y));
  free(want);
  free(got);
}
END_TEST

/* Every gradient into one poisoned allocation of the caller's, 256 bytes
 * apart at least: zero_grad clears it, the backward adds there. */
START_TEST(test_grad_moved_same_bits) {
  tecore_seq_t *own = mlp(NULL), *moved = mlp(NULL);
  struct tecore_seq_param p[MAXP];
  tecore_devptr_t base = move_all(moved, 1);
  param_list(moved, p);
  twins_same(moved, own);
  /* ptr 0: storage of its own again, zeroed; the caller's untouched */
  size_t gb = grad_bytes(&p[1]);
  tecore_devptr_t at1 = base + round256(grad_bytes(&p[0]));
  unsigned char *want = malloc(gb), *got = malloc(gb);
  ck_assert(want && got);
  te_d2h(want, at1, gb);
  TE_OK(tecore_seq_set_param_grad(moved, 1, 0));
  TE_OK(tecore_seq_set_param_grad(moved, 1, 0));   /* already its own: nothing to do */
  param_list(moved, p);
  ck_assert(p[1].grad.data != at1);
  te_d2h(got, p[1].grad.data, gb);
  for (size_t i = 0; i < gb; i++) ck_assert_msg(got[i] == 0, "own byte %zu: 0x%02x", i, got[i]);
  twins_same(moved, own);   /* and the backward writes its own again */
  te_d2h(got, at1, gb);
  te_expect_mem_eq(want, got, gb, "the caller's memory after ptr 0");
  TE_OK(tecore_seq_destroy(moved));   /* the caller's memory stays the caller's */
  TE_OK(tecore_seq_destroy(own));
  TE_OK(tecore_mem_free(base));
  free(want);
  free(got);
}
END_TEST

/* The refusals both calls share, for set (tecore_seq_set_param or
 * _grad); grad: the gradient's (also: an inference sequence has none). */
/* tecore_seq_set_fp8_weight_data: every given FP8 weight's codes (as the
 * sequence's own forward quantized them) copied into one poisoned
 * allocation of the caller's and pointed at there: the sequence's bytes
 * drop by theirs, and two microbatches give the twin's dx and gradients
 * bit for bit (the forward's GEMM and the backward's transpose read them
 * there).  Then a new recipe gives the sequence storage of its own again:
 * a forward no longer touches the caller's bytes.  Refusals named. */
enum { MAXL = 8 };
START_TEST(test_fp8_codes_moved_same_bits) {
  struct tecore_recipe rc;
  TE_OK(tecore_recipe_init(&rc, TECORE_RECIPE_DELAYED));
  tecore_seq_t *own = mlp(&rc), *moved = mlp(&rc);
  draw_params(own, moved);
  tecore_devptr_t x = te_dalloc(NY * 2), y = te_dalloc(NY * 2);
  size_t sh[2] = {ROWS, HID};
  struct tecore_tensor X, Y;
  put_bf16(x, NY, -1.f, 1.f);
  TE_OK(tecore_tensor_init(&X, TECORE_DTYPE_BF16, 2, sh, x));
  TE_OK(tecore_tensor_init(&Y, TECORE_DTYPE_BF16, 2, sh, y));
  TE_OK(tecore_seq_forward(moved, &X, &Y, 0, te_stream));   /* its codes quantized */
  TE_OK(tecore_stream_synchronize(te_stream));
  size_t lin[MAXL], nl = 0, total = 0, bytes[MAXL];
  struct tecore_tensor w8;
  for (size_t i = 0; nl < MAXL; i++) {
    struct tecore_op_info info;
    if (tecore_seq_op(moved, i, &info) != TECORE_SUCCESS) break;
    if (tecore_seq_fp8_weight(moved, i, &w8) != TECORE_SUCCESS) continue;
    bytes[nl] = tecore_tensor_numel(&w8);
    total += round256(bytes[nl]);
    lin[nl++] = i;
  }
  tecore_clear_error();
  ck_assert_uint_eq(nl, 2 * NBLK);
  tecore_devptr_t base = te_dalloc(total);
  te_poison_dev(base, total);
  TE_EXPECT_INVALID("not given", tecore_seq_set_fp8_weight_data(moved, lin[0], base));
  size_t m0 = 0, m1 = 0, off = 0;
  TE_OK(tecore_seq_memory(moved, NULL, &m0));
  for (size_t k = 0; k < nl; k++) {
    TE_OK(tecore_seq_fp8_weight(moved, lin[k], &w8));
    TE_OK(tecore_memcpy(base + off, w8.data, bytes[k]));
    TE_OK(tecore_seq_set_fp8_weight_given(moved, lin[k], 1));
    TE_EXPECT_INVALID("16-byte aligned", tecore_seq_set_fp8_weight_data(moved, lin[k], base + 8));
    TE_EXPECT_INVALID("needs", tecore_seq_set_fp8_weight_data(moved, lin[k], base + total - 16));
    TE_OK(tecore_seq_set_fp8_weight_data(moved, lin[k], base + off));
    TE_OK(tecore_seq_set_fp8_weight_data(moved, lin[k], base + off));   /* again: nothing */
    TE_OK(tecore_seq_fp8_weight(moved, lin[k], &w8));
    ck_assert_msg(w8.data == base + off, "Linear %zu's codes at 0x%llx, given base + %zu",
                  lin[k], (unsigned long long)w8.data, off);
    off += round256(bytes[k]);
  }
  TE_OK(tecore_seq_memory(moved, NULL, &m1));
  ck_assert_msg(m1 + total - nl * 255 <= m0, "the sequence holds %zu bytes, %zu before: "
                "the codes' %zu not freed", m1, m0, total);
  /* the same steps as the twin, whose forwards quantize its own codes */
  twins_steps_same(own, moved);
  /* a new recipe: the sequence's own codes again, the caller's untouched */
  TE_OK(tecore_seq_set_recipe(moved, &rc, te_stream));
  te_poison_dev(base, total);
  unsigned char *want = malloc(total), *got = malloc(total);
  ck_assert(want && got);
  te_d2h(want, base, total);
  TE_OK(tecore_seq_forward(moved, &X, &Y, 0, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  te_d2h(got, base, total);
  te_expect_mem_eq(want, got, total, "the caller's codes memory after a new recipe");
  TE_OK(tecore_seq_fp8_weight(moved, lin[0], &w8));
  ck_assert(w8.data < base || w8.data >= base + total);
  /* given 0 ends it too */
  TE_OK(tecore_seq_set_fp8_weight_given(moved, lin[1], 1));
  TE_OK(tecore_seq_set_fp8_weight_data(moved, lin[1], base));
  TE_OK(tecore_seq_set_fp8_weight_given(moved, lin[1], 0));
  TE_OK(tecore_seq_fp8_weight(moved, lin[1], &w8));
  ck_assert(w8.data != base);
  TE_EXPECT_INVALID("seq", tecore_seq_set_fp8_weight_data(NULL, lin[0], base));
  TE_OK(tecore_seq_destroy(moved));   /* never frees the caller's memory */
  TE_OK(tecore_seq_destroy(own));
  TE_OK(tecore_mem_free(base));
  TE_OK(tecore_mem_free(x));
  TE_OK(tecore_mem_free(y));
  free(want), free(got);
}
END_TEST

typedef tecore_result_t (*set_fn)(tecore_seq_t *, size_t, tecore_devptr_t);
static void args_refused(set_fn set, int grad) {
  tecore_seq_t *s = mlp(NULL);
  struct tecore_seq_param p[MAXP];
  size_t n = param_list(s, p), bytes = grad ? grad_bytes(&p[1]) : value_bytes(&p[1]);
  tecore_devptr_t m = te_dalloc(bytes);
  TE_EXPECT_INVALID("seq is NULL", set(NULL, 0, m));
  char msg[32];
  snprintf(msg, sizeof msg, "index %zu is out of range", n);
  TE_EXPECT_INVALID(msg, set(s, n, m));
  TE_EXPECT_INVALID("16-byte aligned", set(s, 1, m + 8));
  TE_EXPECT_INVALID("needs", set(s, 1, m + 256));
  uint64_t host = 0;
  TE_EXPECT_INVALID("not in an allocation",
                    set(s, 1, (tecore_devptr_t)(uintptr_t)&host & ~(tecore_devptr_t)15));
  param_list(s, p);
  ck_assert((grad ? p[1].grad.data : p[1].value.data) != m);   /* nothing changed */
  struct tecore_seq_config cfg = {.rows = ROWS, .features = HID, .dtype = TECORE_DTYPE_BF16};
  tecore_seq_t *u = NULL;
  TE_OK(tecore_seq_create(&cfg, &u));
  TE_EXPECT_INVALID("not built", set(u, 0, m));
  TE_OK(tecore_seq_destroy(u));
  if (grad) {
    cfg.flags = TECORE_SEQ_INFERENCE;
    TE_OK(tecore_seq_create(&cfg, &u));
    const struct tecore_op_desc lin = {.kind = TECORE_OP_LINEAR, .features = HID};
    TE_OK(tecore_seq_add(u, &lin, NULL));
    TE_OK(tecore_seq_build(u, te_stream));
    TE_EXPECT_INVALID("inference sequence", set(u, 0, m));
    TE_OK(tecore_seq_destroy(u));
  }
  TE_OK(tecore_seq_destroy(s));
  TE_EXPECT_INVALID("not a live sequence", set(s, 0, m));
  TE_OK(tecore_mem_free(m));
}

START_TEST(test_grad_args_refused) { args_refused(tecore_seq_set_param_grad, 1); }
END_TEST

START_TEST(test_param_args_refused) { args_refused(tecore_seq_set_param, 0); }
END_TEST

static Suite *ops_param_suite(void) {
  Suite *s = suite_create("ops_param");
  TCase *tc = te_tcase(s, "param", 1);
  tcase_add_test(tc, test_param_moved_bf16_same_bits);
  tcase_add_test(tc, test_param_moved_fp8_delayed_same_bits);
  tcase_add_test(tc, test_param_back_to_own_zeroed);
  tcase_add_test(tc, test_param_args_refused);
  tcase_add_test(tc, test_grad_moved_same_bits);
  tcase_add_test(tc, test_grad_args_refused);
  tcase_add_test(tc, test_fp8_codes_moved_same_bits);
  return s;
}

TE_TEST_MAIN(ops_param_suite, TE_TEST_DEVICE)
