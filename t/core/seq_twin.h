/* SPDX-License-Identifier: Apache-2.0 */
/* seq_twin.h -- what check_ops_gregion.c and check_ops_param.c share: a
 * sequence compared with its twin (the same model, its parameters or
 * gradients placed elsewhere) over two microbatches, bit for bit.  The
 * includer defines HID, ROWS, MAXP and NY. */
#ifndef TE_T_SEQ_TWIN_H
#define TE_T_SEQ_TWIN_H

#include "tests.h"
#include "common/convert.h"

static void put_bf16(tecore_devptr_t p, size_t n, float lo, float hi) {
  uint16_t *h = malloc(n * 2);
  ck_assert_ptr_nonnull(h);
  for (size_t i = 0; i < n; i++) h[i] = te_f32_to_bf16(te_rand_float(lo, hi));
  te_h2d(p, h, n * 2);
  free(h);
}

/* Fresh random parameters in a, the same bytes in b. */
static void draw_params(tecore_seq_t *a, tecore_seq_t *b) {
  struct tecore_seq_param pa[MAXP], pb[MAXP];
  size_t na = 0, nb = 0;
  TE_OK(tecore_seq_params(a, pa, MAXP, &na));
  TE_OK(tecore_seq_params(b, pb, MAXP, &nb));
  ck_assert_uint_eq(na, nb);
  for (size_t i = 0; i < na; i++) {
    size_t m = tecore_tensor_numel(&pa[i].value), es = tecore_dtype_size(pa[i].value.dtype);
    ck_assert_int_eq(pa[i].value.dtype, TECORE_DTYPE_BF16);
    float lo = -0.2f, hi = 0.2f;
    if (strcmp(pa[i].name, "gamma") == 0) lo = 0.5f, hi = 1.5f;
    put_bf16(pa[i].value.data, m, lo, hi);
    TE_OK(tecore_memcpy(pb[i].value.data, pa[i].value.data, m * es));
  }
}

/* Two microbatches on s: forward, backward (accumulating), the same x
 * and dy for every sequence of a test; dx read back into dx_h. */
static void two_steps(tecore_seq_t *s, tecore_devptr_t const xs[2], tecore_devptr_t const dys[2],
                      uint16_t *dx_h) {
  size_t sh[2] = {ROWS, HID};
  tecore_devptr_t yp = te_dalloc(NY * 2), dxp = te_dalloc(NY * 2);
  struct tecore_tensor y, dx;
  TE_OK(tecore_tensor_init(&y, TECORE_DTYPE_BF16, 2, sh, yp));
  TE_OK(tecore_tensor_init(&dx, TECORE_DTYPE_BF16, 2, sh, dxp));
  TE_OK(tecore_seq_zero_grad(s, te_stream));
  for (int k = 0; k < 2; k++) {
    struct tecore_tensor x, dy;
    TE_OK(tecore_tensor_init(&x, TECORE_DTYPE_BF16, 2, sh, xs[k]));
    TE_OK(tecore_tensor_init(&dy, TECORE_DTYPE_BF16, 2, sh, dys[k]));
    te_poison_dev(dxp, NY * 2);
    TE_OK(tecore_seq_forward(s, &x, &y, 0, te_stream));
    TE_OK(tecore_seq_backward(s, &dy, &dx, te_stream));
  }
  TE_OK(tecore_seq_update_scales(s, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  te_d2h(dx_h, dxp, NY * 2);
  TE_OK(tecore_mem_free(yp));
  TE_OK(tecore_mem_free(dxp));
}

/* Every gradient of a and b: the same bytes. */
static void expect_same_grads(tecore_seq_t *a, tecore_seq_t *b) {
  struct tecore_seq_param pa[MAXP], pb[MAXP];
  size_t na = 0, nb = 0;
  TE_OK(tecore_seq_params(a, pa, MAXP, &na));
  TE_OK(tecore_seq_params(b, pb, MAXP, &nb));
  ck_assert_uint_eq(na, nb);
  for (size_t i = 0; i < na; i++) {
    ck_assert_int_eq(pa[i].grad.dtype, pb[i].grad.dtype);
    size_t bytes = tecore_tensor_numel(&pa[i].grad) * tecore_dtype_size(pa[i].grad.dtype);
    unsigned char *ha = malloc(bytes), *hb = malloc(bytes);
    ck_assert(ha && hb);
    te_d2h(ha, pa[i].grad.data, bytes);
    te_d2h(hb, pb[i].grad.data, bytes);
    te_expect_mem_eq(hb, ha, bytes, pa[i].name);
    free(ha);
    free(hb);
  }
}

/* Two microbatches of a and b from the same fresh inputs: dx and every
 * gradient the same bits. */
static void twins_steps_same(tecore_seq_t *a, tecore_seq_t *b) {
  tecore_devptr_t xs[2], dys[2];
  for (int k = 0; k < 2; k++) {
    put_bf16(xs[k] = te_dalloc(NY * 2), NY, -1.5f, 1.5f);
    put_bf16(dys[k] = te_dalloc(NY * 2), NY, -0.05f, 0.05f);
  }
  uint16_t *dx0 = malloc(NY * 2), *dx1 = malloc(NY * 2);
  ck_assert(dx0 && dx1);
  two_steps(a, xs, dys, dx0);
  two_steps(b, xs, dys, dx1);
  te_expect_mem_eq(dx1, dx0, NY * 2, "dx");
  expect_same_grads(a, b);
  for (int k = 0; k < 2; k++) {
    TE_OK(tecore_mem_free(xs[k]));
    TE_OK(tecore_mem_free(dys[k]));
  }
  free(dx0);
  free(dx1);
}

/* Fresh parameters in a, the same in b (draw_params), then
 * twins_steps_same. */
static void twins_same(tecore_seq_t *a, tecore_seq_t *b) {
  draw_params(a, b);
  twins_steps_same(a, b);
}

#endif
