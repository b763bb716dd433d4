/* SPDX-License-Identifier: Apache-2.0 */
/* bench.h -- te-bench's shared timing harness.  A figure is always printed
 * beside its floor: bytes / copy bandwidth measured in the same run.
 * Every figure is one row (struct tb_row) through tb_row, which prints it
 * as a table, CSV or JSON (tools/bench_out.c, through tools/out.h). */
#ifndef TE_BENCH_H
#define TE_BENCH_H

#include <stddef.h>
#include <te/core.h>
#include "out.h"

struct tb_ctx {
  int mb, iters, failed;
  tecore_stream_t s;
  tecore_event_t e0, e1;
  double copy_gbs;            /* device-to-device copy, read + write bytes per second / 1e9 */
  tecore_backend_t backend;
  char device[256];
  struct te_out out;          /* table, --csv or --json (tools/out.h); out.quiet: --quiet */
  int speed;                  /* 1: a GPU (targets judged); 0: vdev, figures are not speed */
  const char *section;        /* the section the rows belong to ("fp8", "graph", ...) */
  int nrows;
  char host[128], driver[32], toolkit[32];
};

/* One measurement.  ratio = peer_time / time is printed when peer is set
 * (> 1: faster than the peer; for copy-bound kernels, the fraction of copy
 * bandwidth reached).  target is judged (met) only on a GPU. */
struct tb_row {
  const char *name, *shape;
  double time;                /* <= 0: nothing measured, no row */
  const char *unit;           /* "ms" (default) or "us" */
  double rate;
  const char *rate_unit;      /* "GB/s", "TFLOP/s", or NULL: no rate */
  const char *peer;           /* what the figure is set against, or NULL */
  double peer_time;           /* in unit */
  const char *target;         /* e.g. ">= 90% of copy", or NULL */
  int met;
  const char *note;
};

/* The header (host, GPU, driver, toolkit, backend) and, for tables and
 * CSV, the column names; tb_end closes a JSON document. */
void tb_begin(struct tb_ctx *c);
void tb_end(struct tb_ctx *c);
void tb_row(struct tb_ctx *c, const struct tb_row *r);
/* An explanatory line ("# ..."): on stdout in the table, on stderr in CSV
 * and JSON modes; not under --quiet.  A section's start also shows as
 * progress on a terminal's stderr (tb_progress). */
void tb_info(struct tb_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tb_progress(struct tb_ctx *c, const char *what);

/* One timed body: runs the kernel(s) once on c->s. */
typedef tecore_result_t (*tb_body)(struct tb_ctx *c, void *arg);

int tb_setup(struct tb_ctx *c);
void tb_teardown(struct tb_ctx *c);
/* Times body (3 warm-ups, then c->iters runs between two events); returns
 * milliseconds per run, or -1 after printing the error. */
double tb_time(struct tb_ctx *c, tb_body body, void *arg);
/* Prints one line: name, shape, time, GB/s for bytes, the floor and the
 * percentage of copy bandwidth; target_pct > 0 adds PASS/MISS. */
void tb_report(struct tb_ctx *c, const char *name, const char *shape, double ms, double bytes,
               double target_pct);
/* Allocates bytes of device memory filled with random values of dtype in
 * [-2, 2) (f32/f16/bf16) or bytes (others). */
tecore_devptr_t tb_alloc_random(struct tb_ctx *c, size_t count, tecore_dtype_t dtype);
/* The same with another stream of values for each seed (tb_alloc_random
 * is seed 0, whose values depend on count alone). */
tecore_devptr_t tb_alloc_random_seeded(struct tb_ctx *c, size_t count, tecore_dtype_t dtype,
                                       uint64_t seed);

void tb_elementwise(struct tb_ctx *c);
void tb_fp8(struct tb_ctx *c);
void tb_gemm(struct tb_ctx *c);
/* tools/bench_model.c: RoPE, embedding backward, cross-entropy */
void tb_model(struct tb_ctx *c);
/* tools/bench_attn.c: BF16 causal attention beside the GEMM rate */
void tb_attention(struct tb_ctx *c);
/* Host clock (CLOCK_MONOTONIC) in microseconds, and the median of v[0..n)
 * (sorts v). */
double tb_now_us(void);
double tb_median(double *v, int n);
void tb_graph(struct tb_ctx *c);  /* tools/bench_graph.c (links libtegraph) */
/* tools/bench_launch.c: graph launch cost by node count and kind (part of tb_graph) */
void tb_graph_launch(struct tb_ctx *c);
/* tools/bench_step.c: the FP8 training step, graph vs eager (part of tb_graph) */
int tb_graph_step(struct tb_ctx *c);

#define TB_CHECK(call)                                                              \
  do {                                                                              \
    tecore_result_t r_ = (call);                                                    \
    if (r_ != TECORE_SUCCESS) {                                                     \
      fprintf(stderr, "te-bench: %s: %s (%s)\n", #call, tecore_strerror(r_),        \
              tecore_last_error());                                                 \
      return r_;                                                                    \
    }                                                                               \
  } while (0)

#endif
