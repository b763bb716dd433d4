/* SPDX-License-Identifier: Apache-2.0 */
/* bench_fp8.c -- te-bench's FP8 section: the memory-bound kernels of
 * issue 3 at the sizes of its targets (H100), each beside the copy floor.
 * Bytes counted are the minimum each kernel must move (inputs read once,
 * outputs written once; scale arrays included where they are not tiny).
 * On the vdev backend the sizes are divided by 64 (the figures then say
 * nothing about a GPU; the section still runs every kernel). */
#include "bench.h"
#include <stdio.h>
#include <string.h>

struct fp8_arg {
  struct tecore_tensor in, out, in2, gamma, beta, dbias;
  tecore_devptr_t ws, rsigma, mu;
  size_t ws_bytes;
  tecore_activation_t act;
};

/* A device float set to value. */
static tecore_devptr_t dev_float(struct tb_ctx *c, float value) {
  tecore_devptr_t p = 0;
  if (tecore_mem_alloc(4, &p) || tecore_memcpy(p, (tecore_devptr_t)(uintptr_t)&value, 4)) {
    c->failed = 1;
    return 0;
  }
  return p;
}

/* An FP8 output of rows x cols in mode, with every buffer it needs. */
static int make_out(struct tb_ctx *c, struct tecore_tensor *t, size_t rows, size_t cols,
                    tecore_scaling_mode_t mode, int columnwise) {
  size_t shape[2] = {rows, cols};
  if (tecore_tensor_init(t, TECORE_DTYPE_E4M3, 2, shape, 0)) return -1;
  t->scaling = mode;
  if (tecore_mem_alloc(rows * cols, &t->data)) return -1;
  if (columnwise && tecore_mem_alloc(rows * cols, &t->columnwise_data)) return -1;
  for (int cw = 0; cw <= columnwise; cw++) {
    size_t sr, sc;
    tecore_dtype_t sd;
    if (tecore_tensor_scale_shape(t, cw, &sr, &sc, &sd)) return -1;
    tecore_devptr_t *dst = cw ? &t->columnwise_scale_inv : &t->scale_inv;
    if (sr > 0 && sc > 0 && tecore_mem_alloc(sr * sc * tecore_dtype_size(sd), dst)) return -1;
  }
  if (mode == TECORE_SCALING_DELAYED || mode == TECORE_SCALING_CURRENT) {
    t->scale = dev_float(c, 4.0f);
    t->amax = dev_float(c, 0.0f);
  }
  return c->failed ? -1 : 0;
}

static void free_tensor(struct tecore_tensor *t) {
  tecore_devptr_t *p[] = {&t->data, &t->columnwise_data, &t->amax, &t->scale, &t->scale_inv,
                          &t->columnwise_scale_inv};
  for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) {
    tecore_mem_free(*p[i]);
    *p[i] = 0;
  }
}

static int make_in(struct tb_ctx *c, struct tecore_tensor *t, size_t rows, size_t cols,
                   tecore_dtype_t dt) {
  size_t shape[2] = {rows, cols};
  tecore_devptr_t d = tb_alloc_random(c, rows * cols, dt);
  return (!d || tecore_tensor_init(t, dt, 2, shape, d)) ? -1 : 0;
}

static tecore_result_t quantize_body(struct tb_ctx *c, void *arg) {
  struct fp8_arg *a = arg;
  return tecore_quantize(&a->in, &a->out, 0, c->s);
}
static tecore_result_t ct_body(struct tb_ctx *c, void *arg) {
  struct fp8_arg *a = arg;
  return tecore_cast_transpose(&a->in, &a->out, c->s);
}
static tecore_result_t rms_body(struct tb_ctx *c, void *arg) {
  struct fp8_arg *a = arg;
  return tecore_rmsnorm_fwd(&a->in, &a->gamma, 1e-5f, 0, &a->out, a->rsigma, c->s);
}
static tecore_result_t ln_body(struct tb_ctx *c, void *arg) {
  struct fp8_arg *a = arg;
  return tecore_layernorm_fwd(&a->in, &a->gamma, &a->beta, 1e-5f, 0, &a->out, a->mu, a->rsigma,
                              c->s);
}
static tecore_result_t act_body(struct tb_ctx *c, void *arg) {
  struct fp8_arg *a = arg;
  return tecore_act_fwd(a->act, &a->in, &a->out, 0, c->s);
}
static tecore_result_t dact_body(struct tb_ctx *c, void *arg) {
  struct fp8_arg *a = arg;
  return tecore_dact_dbias_cast_transpose(a->act, &a->in, &a->in2, &a->out, &a->dbias, a->ws,
                                          a->ws_bytes, c->s);
}

static void shape_str(char *s, size_t n, size_t rows, size_t cols) {
  snprintf(s, n, "%zux%zu", rows, cols);
}

/* One row of tb_fp8's table: a kernel, its shape and what it is held to.
 * kind: 0 plain, 1 RMSNorm (gamma, rsigma), 2 LayerNorm (beta, mu too),
 * 3 dact (x, dbias, workspace). */
struct fp8_case {
  const char *name;
  size_t rows, cols;
  tecore_scaling_mode_t mode;
  int columnwise;
  tb_body body;
  double bytes_per_el, target;
  int kind;
};

/* One kernel: builds inputs and outputs, times, reports, frees. */
static void run_one(struct tb_ctx *c, const struct fp8_case *k) {
  const char *name = k->name;
  const size_t rows = k->rows, cols = k->cols;
  const int kind = k->kind;
  struct fp8_arg a;
  tb_progress(c, name);
  memset(&a, 0, sizeof a);
  a.act = TECORE_ACT_GELU;
  char shape[32];
  shape_str(shape, sizeof shape, rows, cols);
  if (make_in(c, &a.in, rows, cols, TECORE_DTYPE_BF16) ||
      make_out(c, &a.out, rows, cols, k->mode, k->columnwise))
    goto out;
  if (kind == 1 || kind == 2) { /* norms: gamma (and beta) [cols], rsigma/mu [rows] */
    if (make_in(c, &a.gamma, 1, cols, TECORE_DTYPE_BF16)) goto out;
    a.gamma.ndim = 1, a.gamma.shape[0] = cols;
    if (kind == 2) {
      if (make_in(c, &a.beta, 1, cols, TECORE_DTYPE_BF16)) goto out;
      a.beta.ndim = 1, a.beta.shape[0] = cols;
      if (tecore_mem_alloc(rows * 4, &a.mu)) goto out;
    }
    if (tecore_mem_alloc(rows * 4, &a.rsigma)) goto out;
  }
  if (kind == 3) { /* dact: x, dbias [cols], workspace */
    if (make_in(c, &a.in2, rows, cols, TECORE_DTYPE_BF16)) goto out;
    size_t n = cols;
    if (tecore_tensor_init(&a.dbias, TECORE_DTYPE_BF16, 1, &n, 0) ||
        tecore_mem_alloc(cols * 2, &a.dbias.data) ||
        tecore_cast_transpose_dbias_workspace_size(&a.in, &a.ws_bytes) ||
        (a.ws_bytes && tecore_mem_alloc(a.ws_bytes, &a.ws)))
      goto out;
  }
  tb_report(c, name, shape, tb_time(c, k->body, &a), k->bytes_per_el * rows * cols, k->target);
  goto done;
out:
  fprintf(stderr, "te-bench: %s: set-up failed: %s\n", name, tecore_last_error());
  c->failed = 1;
done:
  free_tensor(&a.in);
  free_tensor(&a.in2);
  free_tensor(&a.out);
  free_tensor(&a.gamma);
  free_tensor(&a.beta);
  free_tensor(&a.dbias);
  tecore_mem_free(a.ws);
  tecore_mem_free(a.rsigma);
  tecore_mem_free(a.mu);
}

void tb_fp8(struct tb_ctx *c) {
  size_t div = c->backend == TECORE_BACKEND_VDEV ? 8 : 1; /* per dimension: 64x fewer elements */
  size_t R = 8192 / div, C = 8192 / div;                  /* 64M elements on a GPU */
  size_t NR = 16384 / div, NC = 4096 / div;
  double target = c->backend == TECORE_BACKEND_CUDA ? 90 : 0;
  c->section = "fp8";
  tb_info(c, "fp8 kernels: BF16 in, E4M3 out; bytes/element counted: read + write");
  /* current scaling: amax pass (2 B/el) + quantize pass (3 B/el); target
   * 110% of the floor = 100/1.1 = 90.9% of copy bandwidth over 5 B/el */
  const double cur = target ? 100.0 / 1.1 : 0, mx = target ? 85 : 0;
  const tecore_scaling_mode_t dl = TECORE_SCALING_DELAYED;
  const struct fp8_case cases[] = {
      {"quantize delayed (3 B/el)", R, C, dl, 0, quantize_body, 3, target, 0},
      {"quantize current (5 B/el 2-pass)", R, C, TECORE_SCALING_CURRENT, 0, quantize_body, 5, cur, 0},
      {"quantize mxfp8 row+col (4.06 B/el)", R, C, TECORE_SCALING_MXFP8, 1, quantize_body,
       4.0 + 2.0 / 32, mx, 0},
      {"cast+transpose (4 B/el)", R, C, dl, 1, ct_body, 4, target, 0},
      {"rmsnorm+quantize (3 B/el)", NR, NC, dl, 0, rms_body, 3, target, 1},
      {"layernorm+quantize (3 B/el)", NR, NC, dl, 0, ln_body, 3, target, 2},
      {"gelu+quantize (3 B/el)", NR, NC, dl, 0, act_body, 3, target, 0},
      {"dgelu+dbias+cast+transpose (6 B/el)", R, C, dl, 1, dact_body, 6, target, 3},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_one(c, &cases[i]);
}
