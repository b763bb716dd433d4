/* SPDX-License-Identifier: Apache-2.0 */
/* act_norm_bench.c -- the activation and norm kernels on a GPU: times them
 * next to the device-to-device copy bandwidth measured in the same run, and
 * dumps their outputs on fixed inputs so two backends can be compared byte
 * for byte.  Uses only the public API (<te/core.h>).
 *
 *   act_norm_bench bench [NAME]   time table (TE_DEVICE=cuda); NAME: only cases
 *                                 whose name contains it
 *   act_norm_bench dump FILE      outputs of many shapes and dtypes to FILE
 *
 * Build: cc -O2 -I libtecore -I BUILD/libtecore t/gpu/act_norm_bench.c
 *        -L BUILD/libtecore/.libs -ltecore -lm
 * "GB/s" is the minimum bytes a kernel must move (each input read once,
 * each output written once) over its time; "% copy" compares that with the
 * copy's (read + write) bytes per second. */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <te/core.h>

#define dump_dev(p, n) dump_dev_((p), (n), #p)
#define CK(call)                                                                          \
  do {                                                                                    \
    tecore_result_t r_ = (call);                                                          \
    if (r_ != TECORE_SUCCESS) {                                                           \
      fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call,                  \
              tecore_result_name(r_), tecore_last_error());                               \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

static tecore_stream_t st;
static uint64_t rng = 0x1234567887654321ull;
static uint32_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 16);
}
static float rndf(float lo, float hi) { return lo + (hi - lo) * (float)(rnd() & 0xffffff) / 16777216.0f; }

/* Device buffer of n random elements of dt (f32/bf16/f16 bit patterns made
 * from floats in [lo, hi)). */
static tecore_devptr_t rand_dev(size_t n, tecore_dtype_t dt, float lo, float hi) {
  size_t es = tecore_dtype_size(dt);
  unsigned char *h = malloc(n * es + 16);
  for (size_t i = 0; i < n; i++) {
    float f = rndf(lo, hi);
    uint32_t u;
    memcpy(&u, &f, 4);
    if (dt == TECORE_DTYPE_F32) memcpy(h + 4 * i, &f, 4);
    else if (dt == TECORE_DTYPE_BF16) {
      uint16_t b = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
      memcpy(h + 2 * i, &b, 2);
    } else {
      /* f16 of a float in a modest range: round the mantissa to 10 bits */
      uint32_t a = u & 0x7fffffffu, s = (u >> 16) & 0x8000u;
      uint16_t b = a < 0x38800000u ? (uint16_t)s
                                   : (uint16_t)(s | ((a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13));
      memcpy(h + 2 * i, &b, 2);
    }
  }
  tecore_devptr_t d;
  CK(tecore_mem_alloc(n * es + 256, &d));
  CK(tecore_memcpy(d, (tecore_devptr_t)(uintptr_t)h, n * es));
  free(h);
  return d;
}
static tecore_devptr_t zdev(size_t bytes) {
  tecore_devptr_t d;
  CK(tecore_mem_alloc(bytes + 256, &d));
  CK(tecore_memset_d8_async(d, 0, bytes + 256, st));
  CK(tecore_stream_synchronize(st)); /* before any synchronous copy into it */
  return d;
}
static struct tecore_tensor t2(tecore_dtype_t dt, size_t r, size_t c, tecore_devptr_t p) {
  struct tecore_tensor t;
  size_t s[2] = {r, c};
  CK(tecore_tensor_init(&t, dt, 2, s, p));
  return t;
}
static struct tecore_tensor t1(tecore_dtype_t dt, size_t n, tecore_devptr_t p) {
  struct tecore_tensor t;
  CK(tecore_tensor_init(&t, dt, 1, &n, p));
  return t;
}
/* Makes t an FP8 delayed-scaling output with its own scale buffers. */
static void fp8_out(struct tecore_tensor *t, float scale) {
  tecore_devptr_t s = zdev(16);
  CK(tecore_memcpy(s, (tecore_devptr_t)(uintptr_t)&scale, 4));
  t->scaling = TECORE_SCALING_DELAYED;
  t->scale = s;
  t->scale_inv = s + 4;
  t->amax = s + 8;
}

/* ---- timing ---------------------------------------------------------------------- */

typedef void (*work_fn)(void *ctx);
static double time_ms(work_fn fn, void *ctx, int reps) {
  tecore_event_t a, b;
  CK(tecore_event_create(0, &a));
  CK(tecore_event_create(0, &b));
  for (int i = 0; i < 3; i++) fn(ctx);
  CK(tecore_event_record(a, st));
  for (int i = 0; i < reps; i++) fn(ctx);
  CK(tecore_event_record(b, st));
  CK(tecore_event_synchronize(b));
  float ms;
  CK(tecore_event_elapsed(&ms, a, b));
  CK(tecore_event_destroy(a));
  CK(tecore_event_destroy(b));
  return ms / reps;
}

struct copy_ctx {
  tecore_devptr_t a, b;
  size_t bytes;
};
static void do_copy(void *p) {
  struct copy_ctx *c = p;
  CK(tecore_memcpy_async(c->b, c->a, c->bytes, st));
}

struct case_ctx {
  int kind; /* see run_case */
  int op;
  struct tecore_tensor x, g, b, y, dy, dx, dg, db;
  tecore_devptr_t mu, rs, ws;
  size_t wsb;
};
static void do_case(void *p) {
  struct case_ctx *c = p;
  switch (c->kind) {
    case 0: CK(tecore_rmsnorm_fwd(&c->x, &c->g, 1e-6f, 0, &c->y, c->rs, st)); break;
    case 1: CK(tecore_layernorm_fwd(&c->x, &c->g, &c->b, 1e-5f, 0, &c->y, c->mu, c->rs, st)); break;
    case 2: CK(tecore_act_fwd(c->op, &c->x, &c->y, 0, st)); break;
    case 3: CK(tecore_act_bwd(c->op, &c->dy, &c->x, &c->dx, st)); break;
    case 4: CK(tecore_rmsnorm_bwd(&c->dy, &c->x, c->rs, &c->g, 0, &c->dx, &c->dg, c->ws, c->wsb, st)); break;
    case 5:
      CK(tecore_layernorm_bwd(&c->dy, &c->x, c->mu, c->rs, &c->g, 0, &c->dx, &c->dg, &c->db, c->ws,
                              c->wsb, st));
      break;
  }
}

static double copy_gbps;
static const char *filter; /* bench only the cases whose name contains it */

static void report(const char *name, struct case_ctx *c, double bytes) {
  if (filter && !strstr(name, filter)) return;
  double ms = time_ms(do_case, c, 20);
  double gbps = bytes / ms / 1e6;
  printf("%-48s %9.1f us %8.1f GB/s  floor %8.1f us  %5.1f%% of copy\n", name, ms * 1e3, gbps,
         bytes / copy_gbps / 1e3, 100.0 * gbps / copy_gbps);
  fflush(stdout);
}

static void bench_norm(int ln, size_t rows, size_t h, tecore_dtype_t din, tecore_dtype_t dout) {
  struct case_ctx c = {.kind = ln};
  c.x = t2(din, rows, h, rand_dev(rows * h, din, -2, 3));
  c.g = t1(din, h, rand_dev(h, din, 0.5f, 1.5f));
  c.b = t1(din, h, rand_dev(h, din, -1, 1));
  c.y = t2(dout, rows, h, zdev(rows * h * tecore_dtype_size(dout)));
  if (dout == TECORE_DTYPE_E4M3 || dout == TECORE_DTYPE_E5M2) fp8_out(&c.y, 100.0f);
  c.mu = zdev(rows * 4);
  c.rs = zdev(rows * 4);
  double bytes = (double)rows * h * (tecore_dtype_size(din) + tecore_dtype_size(dout)) + rows * 4.0 * (ln ? 2 : 1);
  char name[128];
  snprintf(name, sizeof name, "%s fwd %zux%zu %s->%s", ln ? "layernorm" : "rmsnorm", rows, h,
           tecore_dtype_name(din), tecore_dtype_name(dout));
  report(name, &c, bytes);
  /* backward on the same shape */
  c.kind = ln ? 5 : 4;
  c.dy = t2(din, rows, h, rand_dev(rows * h, din, -1, 1));
  c.dx = t2(din, rows, h, zdev(rows * h * tecore_dtype_size(din)));
  c.dg = t1(din, h, zdev(h * 4));
  c.db = t1(din, h, zdev(h * 4));
  CK(tecore_norm_bwd_workspace_size(ln ? TECORE_NORM_LAYERNORM : TECORE_NORM_RMSNORM, rows, h, &c.wsb));
  c.ws = zdev(c.wsb);
  do_case(&c); /* rsigma from the forward above is in c.rs */
  bytes = (double)rows * h * 3 * tecore_dtype_size(din);
  snprintf(name, sizeof name, "%s bwd %zux%zu %s (+%zu KiB ws)", ln ? "layernorm" : "rmsnorm", rows,
           h, tecore_dtype_name(din), c.wsb >> 10);
  report(name, &c, bytes);
  CK(tecore_ctx_synchronize());
  tecore_devptr_t ps[] = {c.x.data, c.g.data, c.b.data, c.y.data, c.mu, c.rs, c.dy.data, c.dx.data,
                          c.dg.data, c.db.data, c.ws};
  for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) CK(tecore_mem_free(ps[i]));
  if (c.y.scale) CK(tecore_mem_free(c.y.scale));
}

static void bench_act(int op, size_t rows, size_t cols, tecore_dtype_t din, tecore_dtype_t dout) {
  int gated = tecore_activation_is_gated(op);
  size_t ic = gated ? 2 * cols : cols;
  struct case_ctx c = {.kind = 2, .op = op};
  c.x = t2(din, rows, ic, rand_dev(rows * ic, din, -4, 4));
  c.y = t2(dout, rows, cols, zdev(rows * cols * tecore_dtype_size(dout)));
  if (dout == TECORE_DTYPE_E4M3 || dout == TECORE_DTYPE_E5M2) fp8_out(&c.y, 100.0f);
  char name[128];
  snprintf(name, sizeof name, "%s fwd %zux%zu %s->%s", tecore_activation_name(op), rows, cols,
           tecore_dtype_name(din), tecore_dtype_name(dout));
  report(name, &c, (double)rows * ic * tecore_dtype_size(din) + (double)rows * cols * tecore_dtype_size(dout));
  c.kind = 3;
  c.dy = t2(din, rows, cols, rand_dev(rows * cols, din, -1, 1));
  c.dx = t2(din, rows, ic, zdev(rows * ic * tecore_dtype_size(din)));
  snprintf(name, sizeof name, "%s bwd %zux%zu %s", tecore_activation_name(op), rows, cols,
           tecore_dtype_name(din));
  report(name, &c, (double)rows * cols * tecore_dtype_size(din) + 2.0 * rows * ic * tecore_dtype_size(din));
  CK(tecore_ctx_synchronize());
  CK(tecore_mem_free(c.x.data));
  CK(tecore_mem_free(c.y.data));
  CK(tecore_mem_free(c.dy.data));
  CK(tecore_mem_free(c.dx.data));
  if (c.y.scale) CK(tecore_mem_free(c.y.scale));
}

static void bench(void) {
  struct copy_ctx cc = {.bytes = (size_t)1 << 30};
  CK(tecore_mem_alloc(cc.bytes, &cc.a));
  CK(tecore_mem_alloc(cc.bytes, &cc.b));
  CK(tecore_memset_d8_async(cc.a, 1, cc.bytes, st));
  double ms = time_ms(do_copy, &cc, 10);
  copy_gbps = 2.0 * cc.bytes / ms / 1e6;
  printf("device-to-device copy of 1 GiB: %.1f us, %.1f GB/s (read + write)\n", ms * 1e3, copy_gbps);
  CK(tecore_mem_free(cc.a));
  CK(tecore_mem_free(cc.b));
  const tecore_dtype_t bf = TECORE_DTYPE_BF16, e4 = TECORE_DTYPE_E4M3;
  bench_norm(0, 16384, 4096, bf, e4);
  bench_norm(1, 16384, 4096, bf, e4);
  bench_norm(0, 16384, 4096, bf, bf);
  bench_norm(1, 16384, 4096, bf, bf);
  bench_norm(0, 16384, 1024, bf, e4);
  bench_norm(0, 8192, 8192, bf, e4);
  bench_norm(1, 4096, 12288, bf, e4);
  bench_norm(0, 1024, 65536, bf, e4);
  bench_norm(1, 16384, 4096, TECORE_DTYPE_F32, e4);
  bench_norm(1, 16384, 4095, bf, e4);
  bench_act(TECORE_ACT_GELU, 16384, 4096, bf, e4);
  bench_act(TECORE_ACT_GELU, 16384, 4096, bf, bf);
  bench_act(TECORE_ACT_SILU, 16384, 4096, bf, e4);
  bench_act(TECORE_ACT_RELU, 16384, 4096, bf, e4);
  bench_act(TECORE_ACT_QGELU, 16384, 4096, bf, e4);
  bench_act(TECORE_ACT_SWIGLU, 16384, 4096, bf, e4);
  bench_act(TECORE_ACT_GEGLU, 16384, 4096, bf, e4);
  bench_act(TECORE_ACT_GELU, 16384, 4095, bf, e4);
}

/* ---- dump ------------------------------------------------------------------------ */

static FILE *dumpf, *idxf;
static char label[160];
/* Appends bytes of device memory to the dump, and "offset bytes label
 * part" to the index (FILE.idx), so a difference can be named. */
static void dump_dev_(tecore_devptr_t p, size_t bytes, const char *part) {
  fprintf(idxf, "%ld %zu %s %s\n", ftell(dumpf), bytes, label, part);
  unsigned char *h = malloc(bytes + 1);
  CK(tecore_ctx_synchronize());
  CK(tecore_memcpy((tecore_devptr_t)(uintptr_t)h, p, bytes));
  fwrite(h, 1, bytes, dumpf);
  free(h);
}

static void dump(const char *path) {
  char ipath[4200];
  snprintf(ipath, sizeof ipath, "%s.idx", path);
  dumpf = fopen(path, "wb");
  idxf = fopen(ipath, "w");
  if (!dumpf || !idxf) {
    perror(path);
    exit(1);
  }
  static const size_t shp[][2] = {{1, 1}, {5, 33}, {4, 1000}, {2, 8191}, {1, 65536}, {7, 4096},
                                  {3000, 16}, {9, 1024}, {5, 2048}, {2, 24576}};
  const tecore_dtype_t ins[] = {TECORE_DTYPE_F32, TECORE_DTYPE_BF16, TECORE_DTYPE_F16};
  const tecore_dtype_t outs[] = {TECORE_DTYPE_E4M3, TECORE_DTYPE_F32, TECORE_DTYPE_BF16,
                                 TECORE_DTYPE_E5M2, TECORE_DTYPE_F16};
  size_t count = 0;
  /* BF16 rows of 4096 and 8192 with gamma as stored (te_norm_fwd_full16),
   * more rows than its one wave of blocks */
  static const size_t whole[][2] = {{1400, 4096}, {700, 8192}};
  for (size_t s = 0; s < 2; s++)
    for (int k = 0; k < 4; k++) {
      size_t rows = whole[s][0], h = whole[s][1], n = rows * h;
      const tecore_dtype_t bf = TECORE_DTYPE_BF16;
      tecore_dtype_t dout = k < 2 ? TECORE_DTYPE_E4M3 : k == 2 ? bf : TECORE_DTYPE_E5M2;
      struct tecore_tensor x = t2(bf, rows, h, rand_dev(n, bf, -2, 3));
      struct tecore_tensor g = t1(bf, h, rand_dev(h, bf, -0.5f, 1.5f));
      struct tecore_tensor b = t1(bf, h, rand_dev(h, bf, -1, 1));
      struct tecore_tensor y = t2(dout, rows, h, zdev(n * 4));
      if (dout != bf) fp8_out(&y, 37.3f);
      tecore_devptr_t mu = zdev(rows * 4), rs = zdev(rows * 4);
      snprintf(label, sizeof label, "%s:%zux%zu:bf16->%s", k & 1 ? "rms" : "ln", rows, h,
               tecore_dtype_name(dout));
      if (k & 1) CK(tecore_rmsnorm_fwd(&x, &g, 1e-6f, 0, &y, rs, st));
      else CK(tecore_layernorm_fwd(&x, &g, &b, 1e-5f, 0, &y, mu, rs, st));
      dump_dev(y.data, n * tecore_dtype_size(dout));
      dump_dev(mu, rows * 4);
      dump_dev(rs, rows * 4);
      if (y.amax) dump_dev(y.amax, 4);
      count++;
      CK(tecore_ctx_synchronize());
      tecore_devptr_t ps[] = {x.data, g.data, b.data, y.data, mu, rs};
      for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) CK(tecore_mem_free(ps[i]));
      if (y.scale) CK(tecore_mem_free(y.scale));
    }
  for (size_t s = 0; s < sizeof shp / sizeof shp[0]; s++)
    for (int k = 0; k < 3; k++) {
      size_t rows = shp[s][0], h = shp[s][1], n = rows * h;
      tecore_dtype_t din = ins[(s + k) % 3], dout = outs[(s + k) % 5];
      struct tecore_tensor x = t2(din, rows, h, rand_dev(n, din, -2, 3));
      struct tecore_tensor g = t1(din, h, rand_dev(h, din, -0.5f, 1.5f));
      struct tecore_tensor b = t1(din, h, rand_dev(h, din, -1, 1));
      struct tecore_tensor y = t2(dout, rows, h, zdev(n * 4));
      if (dout == TECORE_DTYPE_E4M3 || dout == TECORE_DTYPE_E5M2) fp8_out(&y, 37.3f);
      tecore_devptr_t mu = zdev(rows * 4), rs = zdev(rows * 4);
      unsigned fl = k == 1 ? TECORE_NORM_ZERO_CENTERED_GAMMA : 0;
      snprintf(label, sizeof label, "%s:%zux%zu:%s->%s", k == 0 ? "ln" : k == 1 ? "rms" : "rms_add",
               rows, h, tecore_dtype_name(din), tecore_dtype_name(dout));
      /* k = 0: LayerNorm; 1: RMSNorm; 2: RMSNorm with bwd_add */
      if (k == 0) CK(tecore_layernorm_fwd(&x, &g, &b, 1e-5f, fl, &y, mu, rs, st));
      else CK(tecore_rmsnorm_fwd(&x, &g, 1e-6f, fl, &y, rs, st));
      dump_dev(y.data, n * tecore_dtype_size(dout));
      dump_dev(mu, rows * 4);
      dump_dev(rs, rows * 4);
      if (y.amax) dump_dev(y.amax, 4);
      struct tecore_tensor dy = t2(din, rows, h, rand_dev(n, din, -1, 1));
      struct tecore_tensor dx = t2(din, rows, h, zdev(n * 4));
      struct tecore_tensor dg = t1(TECORE_DTYPE_F32, h, zdev(h * 4)), db = t1(TECORE_DTYPE_F32, h, zdev(h * 4));
      size_t wsb;
      CK(tecore_norm_bwd_workspace_size(TECORE_NORM_LAYERNORM, rows, h, &wsb));
      tecore_devptr_t ws = zdev(wsb);
      if (k == 0) CK(tecore_layernorm_bwd(&dy, &x, mu, rs, &g, fl, &dx, &dg, &db, ws, wsb, st));
      else if (k == 1) CK(tecore_rmsnorm_bwd(&dy, &x, rs, &g, fl, &dx, &dg, ws, wsb, st));
      else CK(tecore_rmsnorm_bwd_add(&dy, &x, rs, &g, &dy, fl, &dx, &dg, ws, wsb, st));
      dump_dev(dx.data, n * tecore_dtype_size(din));
      dump_dev(dg.data, h * 4);
      dump_dev(db.data, h * 4);
      /* activations on the same data */
      for (int op = 0; op < TECORE_ACT_COUNT_; op++) {
        int gated = tecore_activation_is_gated(op);
        size_t cols = gated ? h / 2 : h;
        if (cols == 0) continue;
        struct tecore_tensor ai = t2(din, rows, gated ? 2 * cols : cols, x.data);
        struct tecore_tensor ao = t2(dout, rows, cols, y.data);
        ao.scaling = y.scaling;
        ao.scale = y.scale;
        ao.scale_inv = y.scale_inv;
        ao.amax = y.amax;
        snprintf(label, sizeof label, "%s:%zux%zu:%s->%s", tecore_activation_name(op), rows, cols,
                 tecore_dtype_name(din), tecore_dtype_name(dout));
        CK(tecore_act_fwd(op, &ai, &ao, 0, st));
        dump_dev(ao.data, rows * cols * tecore_dtype_size(dout));
        struct tecore_tensor ady = t2(din, rows, cols, dy.data);
        struct tecore_tensor adx = t2(din, rows, gated ? 2 * cols : cols, dx.data);
        CK(tecore_act_bwd(op, &ady, &ai, &adx, st));
        dump_dev(adx.data, rows * (gated ? 2 * cols : cols) * tecore_dtype_size(din));
        count += 2;
      }
      count += 2;
      CK(tecore_ctx_synchronize());
      tecore_devptr_t ps[] = {x.data, g.data, b.data, y.data, mu, rs, dy.data, dx.data, dg.data, db.data, ws};
      for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) CK(tecore_mem_free(ps[i]));
      if (y.scale) CK(tecore_mem_free(y.scale));
    }
  long bytes = ftell(dumpf);
  fclose(dumpf);
  fclose(idxf);
  printf("dumped %zu kernel outputs, %ld bytes, to %s\n", count, bytes, path);
}

int main(int argc, char **argv) {
  if (argc < 2 || (strcmp(argv[1], "bench") && (strcmp(argv[1], "dump") || argc < 3))) {
    fprintf(stderr, "usage: %s bench [NAME] | dump FILE\n", argv[0]);
    return 2;
  }
  tecore_ctx_t ctx;
  tecore_backend_t be;
  CK(tecore_init());
  CK(tecore_backend(&be));
  CK(tecore_ctx_create(0, &ctx));
  CK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &st));
  struct tecore_device_props p;
  CK(tecore_device_get_props(0, &p));
  int drv = 0;
  CK(tecore_driver_version(&drv));
  printf("# backend %s, device %s (%d SMs), driver %d, libtecore %s\n", tecore_backend_name(be),
         p.name, p.sm_count, drv, tecore_version_string());
  if (!strcmp(argv[1], "bench")) {
    filter = argc > 2 ? argv[2] : NULL;
    bench();
  }
  else dump(argv[2]);
  CK(tecore_stream_destroy(st));
  CK(tecore_ctx_destroy(ctx));
  return 0;
}
