/* SPDX-License-Identifier: Apache-2.0 */
/* perf_gemm.c -- te-allreduce-perf -C ag-gemm | gemm-rs: the GEMMs with
 * sequence parallelism's collective inside (tecomm_ag_gemm,
 * tecomm_gemm_rs) at one shape, beside what they are judged against, in
 * the same run:
 *   overlap   the overlapped call
 *   gemm      the whole GEMM alone (m x n x k): the floor, since the
 *             overlapped call does this GEMM's work and more
 *   chunks    the GEMM cut in --chunks row blocks (default: the ranks'),
 *             multiplied back to back with no communication: what the
 *             overlapped call's GEMMs cost alone, so its ceiling; with
 *             one rank and --chunks n, the ceiling of n ranks' call on
 *             one GPU
 *   pair      the collective, then the GEMM (all-gather + GEMM), or the
 *             GEMM, then the collective (GEMM + reduce-scatter): the
 *             unoverlapped form, through libtecomm's table
 *   coll      the collective alone: the bytes' own time
 *   nccl      the pair with NCCL's collective (NCCL itself, nccl_peer.h;
 *             cuda, unless --no-nccl): the usual unfused baseline
 * Each is eager or -G ops captured in one graph, its time the largest
 * over the ranks of each rank's mean, the median of three rounds that
 * each start at another row (one order, on one H200, made the first row
 * 7-13 % faster than the same GEMM measured second).  vs_gemm is gemm's
 * time over the row's (issue 61 asks >= 0.9 of the overlapped call).  With -c 1 one
 * more overlapped call is compared with the pair's result (#wrong:
 * elements apart by more than 2^-6 of their size plus 2^-6 of the
 * row's scale, the two GEMMs being cut differently). */
#include "config.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <te/gemm.h>
#include "cli.h"
#include "common/convert.h"
#include "nccl_peer.h"
#include "perf_gemm.h"

enum { OP_OVERLAP, OP_GEMM, OP_CHUNKS, OP_PAIR, OP_COLL, OP_NCCL, OP_COUNT };
static const char *const op_names[OP_COUNT] = {"overlap", "gemm",  "chunks",
                                               "pair",    "coll", "nccl"};

struct pg {
  const struct perf_gemm_opts *o;
  tecomm_comm_t comm;
  int rank, n;
  size_t rows, esz, desz;
  int chunks;            /* the chunks row's row blocks */
  tecore_dtype_t ddt;    /* d's: the operands', BF16 for E4M3 */
  tecore_devptr_t si;    /* E4M3: the factors of a and b (1.0 each) */
  tecore_stream_t s;
  tecore_event_t e0, e1;
  tecore_devptr_t a;     /* ag: symmetric [m][k] (this rank's rows in place); rs: [m][k] */
  tecore_devptr_t b;     /* [n][k] */
  tecore_devptr_t d;     /* ag: [m][n]; rs: [rows][n] */
  tecore_devptr_t full;  /* rs: symmetric [m][n] the pair's GEMM writes; partials after it */
  tecore_devptr_t tbuf;
  struct nccl_peer *peer; /* NULL: no nccl row */
  char peer_why[200];
};

#define PG_DIE(...)                                                            \
  do {                                                                         \
    fprintf(stderr, "te-allreduce-perf: ");                                    \
    fprintf(stderr, __VA_ARGS__);                                              \
    fprintf(stderr, "\n");                                                     \
    exit(TE_EXIT_FAIL);                                                        \
  } while (0)
#define PG_CORE(call)                                                          \
  do {                                                                         \
    tecore_result_t r_ = (call);                                               \
    if (r_ != TECORE_SUCCESS)                                                  \
      PG_DIE("%s: %s: %s", #call, tecore_result_name(r_), tecore_last_error()); \
  } while (0)
#define PG_COMM(call)                                                          \
  do {                                                                         \
    tecomm_result_t r_ = (call);                                               \
    if (r_ != TECOMM_SUCCESS)                                                  \
      PG_DIE("%s: %s: %s", #call, tecomm_result_name(r_), tecomm_last_error()); \
  } while (0)

/* d[rows][n] = a[rows][k] b^T; E4M3 with fast accumulation, as the
 * overlapped calls multiply (the fuser's FP8 forward GEMM): the rows
 * compare like with like */
static void gemm(const struct pg *p, tecore_devptr_t a, size_t rows, tecore_devptr_t d) {
  const struct perf_gemm_opts *o = p->o;
  struct tecore_tensor A, B, D;
  const size_t sa[2] = {rows, o->k}, sb[2] = {o->n, o->k}, sd[2] = {rows, o->n};
  PG_CORE(tecore_tensor_init(&A, o->dtype, 2, sa, a));
  PG_CORE(tecore_tensor_init(&B, o->dtype, 2, sb, p->b));
  PG_CORE(tecore_tensor_init(&D, p->ddt, 2, sd, d));
  const struct tecore_gemm_opts fast = {.fast_accum = 1};
  if (o->dtype == TECORE_DTYPE_E4M3) {
    A.scaling = B.scaling = TECORE_SCALING_DELAYED;
    A.scale_inv = p->si;
    B.scale_inv = p->si + 4;
  }
  PG_CORE(tecore_gemm(&A, TECORE_GEMM_N, &B, TECORE_GEMM_T, &D, 1.0f, 0.0f,
                      o->dtype == TECORE_DTYPE_E4M3 ? &fast : NULL, p->s));
}

static void coll(const struct pg *p) {
  const struct perf_gemm_opts *o = p->o;
  if (!o->rs) {
    const size_t blk = p->rows * o->k;
    PG_COMM(tecomm_allgather(p->comm, p->a + p->rank * blk * p->esz, p->a, blk, o->dtype, p->s));
  } else {
    const size_t blk = p->rows * o->n;
    PG_COMM(tecomm_reduce_scatter(p->comm, p->full, p->d, blk, p->ddt, TECOMM_SUM, p->s));
  }
}

/* The pair with NCCL's all-gather or reduce-scatter. */
static void nccl_pair(const struct pg *p) {
  const struct perf_gemm_opts *o = p->o;
  if (!o->rs) {
    const size_t blk = p->rows * o->k;
    if (nccl_peer_call(p->peer, NCCL_PEER_ALLGATHER, p->a + p->rank * blk * p->esz, p->a, blk,
                       o->dtype, p->s))
      PG_DIE("NCCL's all-gather failed");
  }
  gemm(p, p->a, o->m, o->rs ? p->full : p->d);
  if (o->rs && nccl_peer_call(p->peer, NCCL_PEER_REDUCE_SCATTER, p->full, p->d, p->rows * o->n,
                              p->ddt, p->s))
    PG_DIE("NCCL's reduce-scatter failed");
}

static void overlap(const struct pg *p) {
  const struct perf_gemm_opts *o = p->o;
  if (!o->rs) {
    struct tecomm_ag_gemm_args g = {.a = p->a + p->rank * p->rows * o->k * p->esz, .a_all = p->a,
                                    .b = p->b, .d = p->d, .rows = p->rows, .n = o->n, .k = o->k,
                                    .dtype = o->dtype, .d_dtype = p->ddt, .a_scale_inv = p->si,
                                    .b_scale_inv = p->si ? p->si + 4 : 0};
    PG_COMM(tecomm_ag_gemm(p->comm, &g, p->s));
  } else {
    struct tecomm_gemm_rs_args g = {.a = p->a, .b = p->b, .d = p->d, .partials = p->full,
                                    .rows = p->rows, .n = o->n, .k = o->k, .dtype = o->dtype,
                                    .d_dtype = p->ddt, .a_scale_inv = p->si,
                                    .b_scale_inv = p->si ? p->si + 4 : 0};
    PG_COMM(tecomm_gemm_rs(p->comm, &g, p->s));
  }
}

static void op(const struct pg *p, int which) {
  const struct perf_gemm_opts *o = p->o;
  switch (which) {
  case OP_OVERLAP: overlap(p); break;
  case OP_GEMM: gemm(p, p->a, o->m, o->rs ? p->full : p->d); break;
  case OP_CHUNKS: {
    const size_t r = o->m / (size_t)p->chunks;
    for (int j = 0; j < p->chunks; j++)
      gemm(p, p->a + (size_t)j * r * o->k * p->esz, r,
           (o->rs ? p->full : p->d) + (size_t)j * r * o->n * p->desz);
    break;
  }
  case OP_PAIR:
    if (!o->rs) coll(p);
    gemm(p, p->a, o->m, o->rs ? p->full : p->d);
    if (o->rs) coll(p);
    break;
  case OP_NCCL: nccl_pair(p); break;
  default: coll(p); break;
  }
}

/* op over the ranks of x (a one-float allreduce, waited for). */
static float over_ranks(const struct pg *p, float x, tecomm_op_t how) {
  float h = x;
  PG_CORE(tecore_memcpy_async(p->tbuf, (tecore_devptr_t)(uintptr_t)&h, sizeof h, p->s));
  PG_CORE(tecore_stream_synchronize(p->s));
  PG_COMM(tecomm_allreduce(p->comm, p->tbuf, p->tbuf, 1, TECORE_DTYPE_F32, how, p->s));
  PG_CORE(tecore_memcpy_async((tecore_devptr_t)(uintptr_t)&h, p->tbuf, sizeof h, p->s));
  PG_CORE(tecore_stream_synchronize(p->s));
  return h;
}

/* Microseconds per operation (the largest over the ranks). */
static double measure(const struct pg *p, int which) {
  const struct perf_gemm_opts *o = p->o;
  for (int i = 0; i < o->warmup; i++) op(p, which);
  tecore_graph_exec_t exec = NULL;
  if (o->graph_ops > 0) {
    tecore_graph_t g;
    PG_CORE(tecore_stream_begin_capture(p->s, TECORE_CAPTURE_THREAD_LOCAL));
    for (int i = 0; i < o->graph_ops; i++) op(p, which);
    PG_CORE(tecore_stream_end_capture(p->s, &g));
    PG_CORE(tecore_graph_instantiate(&exec, g));
    PG_CORE(tecore_graph_destroy(g));
    PG_CORE(tecore_graph_launch(exec, p->s));
  }
  (void)over_ranks(p, 0.0f, TECOMM_MAX); /* every rank starts together */
  PG_CORE(tecore_event_record(p->e0, p->s));
  for (int i = 0; i < o->iters; i++) {
    if (exec) PG_CORE(tecore_graph_launch(exec, p->s));
    else op(p, which);
  }
  PG_CORE(tecore_event_record(p->e1, p->s));
  PG_CORE(tecore_stream_synchronize(p->s));
  float ms = 0;
  PG_CORE(tecore_event_elapsed(&ms, p->e0, p->e1));
  if (exec) PG_CORE(tecore_graph_exec_destroy(exec));
  PG_COMM(tecomm_comm_status(p->comm, NULL));
  return over_ranks(p, ms * 1000.0f / (float)(o->iters * (o->graph_ops > 0 ? o->graph_ops : 1)),
                    TECOMM_MAX);
}

/* Small random values, different on every rank (E4M3: bytes of
 * magnitude below 1, never NaN). */
static void fill(const struct pg *p, tecore_devptr_t d, size_t count, unsigned salt) {
  uint16_t *h = malloc(count * 2);
  if (!h) PG_DIE("malloc");
  unsigned char *h8 = (unsigned char *)h;
  uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(p->rank * 64 + (int)salt + 1);
  for (size_t i = 0; i < count; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    float v = (float)((int)(x >> 59) - 16) / 16.0f;
    if (p->o->dtype == TECORE_DTYPE_E4M3)
      h8[i] = (unsigned char)(((x >> 56) & 0x80u) | ((x >> 40) & 0x7fu) % 0x38u);
    else
      h[i] = p->o->dtype == TECORE_DTYPE_BF16 ? te_f32_to_bf16(v) : te_f32_to_f16(v);
  }
  PG_CORE(tecore_memcpy_async(d, (tecore_devptr_t)(uintptr_t)h, count * p->esz, p->s));
  PG_CORE(tecore_stream_synchronize(p->s));
  free(h);
}

static float *get(const struct pg *p, tecore_devptr_t d, size_t count) {
  uint16_t *h = malloc(count * 2);
  float *f = malloc(count * sizeof *f);
  if (!h || !f) PG_DIE("malloc");
  PG_CORE(tecore_memcpy_async((tecore_devptr_t)(uintptr_t)h, d, count * 2, p->s));
  PG_CORE(tecore_stream_synchronize(p->s));
  for (size_t i = 0; i < count; i++)
    f[i] = p->ddt == TECORE_DTYPE_BF16 ? te_bf16_to_f32(h[i]) : te_f16_to_f32(h[i]);
  free(h);
  return f;
}

/* Elements of the overlapped call's d apart from the pair's (summed over
 * the ranks). */
static long check(const struct pg *p) {
  const size_t cnt = (p->o->rs ? p->rows : p->o->m) * p->o->n;
  fill(p, p->a, p->o->m * p->o->k, 1);
  op(p, OP_PAIR);
  float *want = get(p, p->d, cnt);
  fill(p, p->a, p->o->m * p->o->k, 1);
  op(p, OP_OVERLAP);
  float *got = get(p, p->d, cnt);
  double scale = 0;
  for (size_t i = 0; i < cnt; i++) scale = fmax(scale, fabs(want[i]));
  long wrong = 0;
  for (size_t i = 0; i < cnt; i++)
    if (!(fabs(got[i] - want[i]) <= 0x1p-6 * (fabs(want[i]) + scale))) wrong++;
  free(want);
  free(got);
  return (long)over_ranks(p, (float)wrong, TECOMM_SUM);
}

static void setup(struct pg *p) {
  const struct perf_gemm_opts *o = p->o;
  PG_COMM(tecomm_comm_rank(p->comm, &p->rank, &p->n, NULL));
  if (o->m % (size_t)p->n) PG_DIE("--mnk: m %zu is not a multiple of the %d ranks", o->m, p->n);
  p->rows = o->m / (size_t)p->n;
  p->chunks = o->chunks ? o->chunks : p->n;
  if (o->m % (size_t)p->chunks)
    PG_DIE("--chunks %d: m %zu is not a multiple of it", p->chunks, o->m);
  p->esz = tecore_dtype_size(o->dtype);
  p->ddt = o->dtype == TECORE_DTYPE_E4M3 ? TECORE_DTYPE_BF16 : o->dtype;
  p->desz = tecore_dtype_size(p->ddt);
  PG_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &p->s));
  PG_CORE(tecore_event_create(TECORE_EVENT_DEFAULT, &p->e0));
  PG_CORE(tecore_event_create(TECORE_EVENT_DEFAULT, &p->e1));
  PG_CORE(tecore_mem_alloc(16, &p->tbuf));
  if (!o->rs) PG_COMM(tecomm_mem_alloc(p->comm, o->m * o->k * p->esz, &p->a));
  else PG_CORE(tecore_mem_alloc(o->m * o->k * p->esz, &p->a));
  PG_CORE(tecore_mem_alloc(o->n * o->k * p->esz, &p->b));
  PG_CORE(tecore_mem_alloc((o->rs ? p->rows : o->m) * o->n * p->desz, &p->d));
  if (o->rs) PG_COMM(tecomm_mem_alloc(p->comm, o->m * o->n * p->desz, &p->full));
  if (o->dtype == TECORE_DTYPE_E4M3) {
    const float one[2] = {1.0f, 1.0f};
    PG_CORE(tecore_mem_alloc(sizeof one, &p->si));
    PG_CORE(tecore_memcpy_async(p->si, (tecore_devptr_t)(uintptr_t)one, sizeof one, p->s));
    PG_CORE(tecore_stream_synchronize(p->s));
  }
  fill(p, p->a, o->m * o->k, 1);
  fill(p, p->b, o->n * o->k, 2);
  snprintf(p->peer_why, sizeof p->peer_why, "--no-nccl");
  if (o->nccl) p->peer = nccl_peer_open(p->comm, p->s, p->peer_why, sizeof p->peer_why);
}

static void teardown(struct pg *p) {
  nccl_peer_close(p->peer);
  if (!p->o->rs) PG_COMM(tecomm_mem_free(p->comm, p->a));
  else PG_CORE(tecore_mem_free(p->a));
  if (p->full) PG_COMM(tecomm_mem_free(p->comm, p->full));
  PG_CORE(tecore_mem_free(p->b));
  PG_CORE(tecore_mem_free(p->d));
  if (p->si) PG_CORE(tecore_mem_free(p->si));
  PG_CORE(tecore_mem_free(p->tbuf));
  PG_CORE(tecore_event_destroy(p->e0));
  PG_CORE(tecore_event_destroy(p->e1));
  PG_CORE(tecore_stream_destroy(p->s));
}

static const struct te_out_col cols[] = {
    {"op", TE_OUT_STR, -8, 0, 0, 0},
    {"time_us", TE_OUT_NUM, 10, "%.1f", 0, "time(us)"},
    {"tflops", TE_OUT_NUM, 8, "%.1f", 0, "TFLOP/s"},
    {"vs_gemm", TE_OUT_NUM, 8, "%.3f", 0, "vs_gemm"}};
enum { NCOLS = sizeof cols / sizeof cols[0] };

static void header(const struct pg *p) {
  const struct perf_gemm_opts *o = p->o;
  struct te_out *out = o->out;
  int dev = 0;
  tecomm_comm_rank(p->comm, NULL, NULL, &dev);
  struct tecore_device_props props;
  memset(&props, 0, sizeof props);
  tecore_device_get_props(dev, &props);
  te_out_begin(out);
  te_out_field_s(out, "gpu", props.name);
  te_out_field_s(out, "coll", o->rs ? "gemm-rs" : "ag-gemm");
  te_out_field_n(out, "ranks", p->n);
  te_out_field_n(out, "m", (double)o->m);
  te_out_field_n(out, "n", (double)o->n);
  te_out_field_n(out, "k", (double)o->k);
  te_out_field_s(out, "dtype", tecore_dtype_name(o->dtype));
  te_out_field_n(out, "graph_ops", o->graph_ops);
  te_out_field_n(out, "iters", o->iters);
  te_out_note(out, "te-allreduce-perf -C %s: %d ranks of %s, d = a b^T with m %zu (%zu rows a rank) "
              "n %zu k %zu, %s, %s, %d iterations",
              o->rs ? "gemm-rs" : "ag-gemm", p->n, props.name, o->m, p->rows, o->n, o->k,
              tecore_dtype_name(o->dtype), o->graph_ops > 0 ? "graph-captured" : "eager", o->iters);
  if (!p->peer) te_out_note(out, "nccl: none (%s)", p->peer_why);
  te_out_note(out, "floor: the gemm row (the whole GEMM alone); chunks: the GEMM in %d row "
              "blocks, no communication (the overlapped call's ceiling); coll: the collective's "
              "bytes alone; target: overlap's vs_gemm >= 0.9", p->chunks);
  te_out_table(out, "rows", cols, NCOLS);
}

enum { ROUNDS = 3 };
static double median3(const double *v) {
  const double lo = v[0] < v[1] ? v[0] : v[1], hi = v[0] < v[1] ? v[1] : v[0];
  return v[2] < lo ? lo : v[2] > hi ? hi : v[2];
}

int perf_gemm_run(tecomm_comm_t comm, const struct perf_gemm_opts *o) {
  struct pg p = {.o = o, .comm = comm};
  setup(&p);
  double us[OP_COUNT], r[OP_COUNT][ROUNDS];
  for (int k = 0; k < ROUNDS; k++)
    for (int i = 0; i < OP_COUNT; i++) {
      const int w = (i + k * 2) % OP_COUNT;   /* every round starts elsewhere */
      r[w][k] = w != OP_NCCL || p.peer ? measure(&p, w) : -1.0;
    }
  for (int w = 0; w < OP_COUNT; w++) us[w] = median3(r[w]);
  long wrong = o->check ? check(&p) : -1;
  if (p.rank == 0) {
    header(&p);
    const double flops = 2.0 * (double)o->m * (double)o->n * (double)o->k;
    for (int w = 0; w < OP_COUNT; w++) {
      if (us[w] < 0) continue;
      struct te_out_val v[NCOLS] = {
          TE_OUT_S(op_names[w]), TE_OUT_N(us[w]),
          w == OP_COLL ? TE_OUT_NONE : TE_OUT_N(flops / us[w] * 1e-6),
          w == OP_COLL ? TE_OUT_NONE : TE_OUT_N(us[OP_GEMM] / us[w])};
      te_out_row(o->out, v);
    }
    te_out_table_end(o->out);
    te_out_field_n(o->out, "wrong", (double)wrong);
    FILE *f = te_out_notes(o->out);
    if (wrong >= 0) fprintf(f, "# wrong elements (overlap against pair): %ld%s\n", wrong,
                            wrong ? " (FAIL)" : "");
    te_out_end(o->out);
  }
  teardown(&p);
  return wrong > 0 ? TE_EXIT_FAIL : TE_EXIT_OK;
}
