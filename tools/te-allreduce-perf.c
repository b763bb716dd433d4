/* SPDX-License-Identifier: Apache-2.0 */
/* te-allreduce-perf.c -- collective bandwidth and latency, in the form of
 * nccl-tests' all_reduce_perf: a sweep of sizes (-b/-e/-f), one dtype (-d),
 * one collective (-C: allreduce, reduce-scatter or all-gather), one
 * algorithm (-a, default the table), eager or N operations captured in one
 * graph (-G N: time per operation), the fused allreduce + residual add +
 * RMSNorm (--fused H), and, in the same run, NCCL's time for the same
 * size and the ratio.  NCCL is the library itself, called by the tool on a
 * communicator of its own (nccl_peer.h), not libtecomm's nccl level.
 * Sizes are nccl-tests': the whole buffer (all ranks' blocks for
 * reduce-scatter's input and all-gather's output).  Columns: size, count, dtype, algo, time (us), algbw,
 * busbw (GB/s), #wrong, NCCL time (us), ratio, then the average bus
 * bandwidth; --csv and --json for a machine (tools/out.h: the document
 * alone on stdout, the header's lines on stderr).  The header gives the
 * latency floor measured the same way (tecomm_probe: an empty kernel, and
 * one word to and from every peer).
 *
 * Ranks: -n N forks N processes (one per GPU on cuda, vdev ranks on a
 * machine with no GPU) that meet over shared memory; without -n, a process
 * started by a launcher takes its rank from TECOMM_RANK/NRANKS/ROOT (the
 * TCP bootstrap, which needs the job's TECOMM_SECRET: libtecomm(7)) or,
 * under mpirun in a --with-mpi build, from MPI.
 *
 * Times are the largest over the ranks (each rank's mean over the timed
 * iterations, reduced with a MAX allreduce).  #wrong: elements that differ
 * from the exact result (the inputs are small integers times 1/4, whose
 * sums are exact in every dtype), counted after a separate checked call;
 * with --fused, elements beyond the tolerance of a float64 reference. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "config.h"
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <te/comm.h>
#include "cli.h"
#include "out.h"
#include "common/convert.h"
#include "nccl_peer.h"
#include "perf_gemm.h"
#ifdef TE_HAVE_MPI
#include <mpi.h>
#endif

/* -C: the collective timed */
enum coll { COLL_ALLREDUCE, COLL_REDUCE_SCATTER, COLL_ALLGATHER, COLL_AG_GEMM, COLL_GEMM_RS };
static const char *const coll_words[] = {"allreduce", "reduce-scatter", "allgather", "ag-gemm",
                                         "gemm-rs"};

struct opts {
  int nranks;            /* -n; 0: from the launcher */
  enum coll coll;        /* -C */
  size_t minb, maxb;
  double factor;
  tecore_dtype_t dtype;
  tecomm_algo_t algo;
  int graph_ops;         /* -G */
  int warmup, iters;
  size_t fused_hidden;   /* --fused */
  struct te_out *out;    /* table, --csv or --json (written by rank 0) */
  int check;
  int nccl;              /* compare with NCCL when present */
  int quiet;             /* --quiet: the column names and the rows only */
  size_t mnk[3];         /* --mnk: ag-gemm and gemm-rs's shape */
  int chunks;            /* --chunks: their chunks row's row blocks (0: the ranks) */
};

/* ---- the fork bootstrap: shared memory allgather + barrier --------------- */
struct shm {
  atomic_int arrived, sense;
  int n;
  unsigned char slot[64][4096];
};
static struct shm *g_shm;
static int g_rank;

static int shm_barrier(void *ctx) {
  struct shm *s = ctx;
  int my = !atomic_load(&s->sense);
  if (atomic_fetch_add(&s->arrived, 1) == s->n - 1) {
    atomic_store(&s->arrived, 0);
    atomic_store(&s->sense, my);
    return 0;
  }
  time_t t0 = time(NULL);
  while (atomic_load(&s->sense) != my) {
    if (time(NULL) - t0 > 60) return -1;
    usleep(20);
  }
  return 0;
}

static int shm_allgather(const void *send, void *recv, size_t bytes, void *ctx) {
  struct shm *s = ctx;
  if (bytes > sizeof s->slot[0] || shm_barrier(s)) return -1;
  memcpy(s->slot[g_rank], send, bytes);
  if (shm_barrier(s)) return -1;
  for (int r = 0; r < s->n; r++) memcpy((char *)recv + (size_t)r * bytes, s->slot[r], bytes);
  return 0;
}

#ifdef TE_HAVE_MPI
static int under_mpi(void) {
  return getenv("OMPI_COMM_WORLD_RANK") || getenv("PMI_RANK") || getenv("PMIX_RANK");
}
#endif

/* ---- data ---------------------------------------------------------------------- */

static float input_value(size_t i, int rank) {
  return (float)((int)((i * 7 + (size_t)rank * 3) % 16) - 8) * 0.25f;
}

static void store(void *p, size_t i, tecore_dtype_t dt, float v) {
  if (dt == TECORE_DTYPE_F32) ((float *)p)[i] = v;
  else ((uint16_t *)p)[i] = dt == TECORE_DTYPE_BF16 ? te_f32_to_bf16(v) : te_f32_to_f16(v);
}
static float load(const void *p, size_t i, tecore_dtype_t dt) {
  if (dt == TECORE_DTYPE_F32) return ((const float *)p)[i];
  uint16_t h = ((const uint16_t *)p)[i];
  return dt == TECORE_DTYPE_BF16 ? te_bf16_to_f32(h) : te_f16_to_f32(h);
}

#define DIE(...)                                                               \
  do {                                                                         \
    fprintf(stderr, "te-allreduce-perf: rank %d: ", g_rank);                   \
    fprintf(stderr, __VA_ARGS__);                                              \
    fprintf(stderr, "\n");                                                     \
    exit(1);                                                                   \
  } while (0)
#define CORE(call)                                                             \
  do {                                                                         \
    tecore_result_t r_ = (call);                                               \
    if (r_ != TECORE_SUCCESS)                                                  \
      DIE("%s: %s: %s", #call, tecore_result_name(r_), tecore_last_error());   \
  } while (0)
#define COMM(call)                                                             \
  do {                                                                         \
    tecomm_result_t r_ = (call);                                               \
    if (r_ != TECOMM_SUCCESS)                                                  \
      DIE("%s: %s: %s", #call, tecomm_result_name(r_), tecomm_last_error());   \
  } while (0)

/* Everything one rank measures with. */
struct bench {
  const struct opts *o;
  tecomm_comm_t comm;
  int rank, n;
  tecore_stream_t s;
  tecore_event_t e0, e1;
  tecore_devptr_t x, out, resid, gamma, tbuf; /* tbuf: one float for the MAX of times */
  size_t cap;                                  /* bytes of x */
  int x_plain;                                 /* x is tecore memory (no symmetric memory) */
  int probe;                                   /* >= 0: op_once is tecomm_probe(probe) */
  struct nccl_peer *peer;                      /* NCCL itself, or NULL */
  int on_peer;                                 /* op_once calls the peer */
  char peer_why[200];                          /* why there is no peer */
  double floor_us[2];                          /* the probes' times (-1: none) */
};

/* The byte offset of this rank's block of a buffer of count elements. */
static size_t block_off(const struct bench *b, size_t count) {
  return (size_t)b->rank * (count / (size_t)b->n) * tecore_dtype_size(b->o->dtype);
}

/* One operation of NCCL itself; --fused: the allreduce, then libtecore's
 * add and RMSNorm kernels (what the fused call replaces). */
static tecomm_result_t peer_once(struct bench *b, size_t count) {
  const struct opts *o = b->o;
  size_t blk = count / (size_t)b->n, off = block_off(b, count);
  int r = o->coll == COLL_REDUCE_SCATTER
              ? nccl_peer_call(b->peer, NCCL_PEER_REDUCE_SCATTER, b->x, b->x + off, blk, o->dtype, b->s)
          : o->coll == COLL_ALLGATHER
              ? nccl_peer_call(b->peer, NCCL_PEER_ALLGATHER, b->x + off, b->x, blk, o->dtype, b->s)
              : nccl_peer_call(b->peer, NCCL_PEER_ALLREDUCE, b->x, b->x, count, o->dtype, b->s);
  if (r != 0) DIE("NCCL (the peer): result %d", r);
  if (!o->fused_hidden) return TECOMM_SUCCESS;
  CORE(tecore_scale_add(b->resid, b->x, 1.0f, b->resid, 1.0f, o->dtype, count, b->s));
  size_t shape[2] = {count / o->fused_hidden, o->fused_hidden};
  struct tecore_tensor x, g, y;
  CORE(tecore_tensor_init(&x, o->dtype, 2, shape, b->resid));
  CORE(tecore_tensor_init(&g, o->dtype, 1, &o->fused_hidden, b->gamma));
  CORE(tecore_tensor_init(&y, o->dtype, 2, shape, b->out));
  CORE(tecore_rmsnorm_fwd(&x, &g, 1e-5f, 0, &y, 0, b->s));
  return TECOMM_SUCCESS;
}

/* One operation of the benchmark on algo (in place on the symmetric
 * input: reduce-scatter into this rank's block, all-gather from it). */
static tecomm_result_t op_once(struct bench *b, size_t count, tecomm_algo_t algo) {
  const struct opts *o = b->o;
  if (b->probe >= 0) return tecomm_probe(b->comm, (tecomm_probe_t)b->probe, b->s);
  if (b->on_peer) return peer_once(b, count);
  size_t blk = count / (size_t)b->n, off = block_off(b, count);
  if (o->coll == COLL_REDUCE_SCATTER)
    return tecomm_reduce_scatter_algo(b->comm, b->x, b->x + off, blk, o->dtype, TECOMM_SUM, algo,
                                      b->s);
  if (o->coll == COLL_ALLGATHER)
    return tecomm_allgather_algo(b->comm, b->x + off, b->x, blk, o->dtype, algo, b->s);
  if (o->fused_hidden) {
    struct tecomm_add_rmsnorm a = {.x = b->x, .rows = count / o->fused_hidden,
                                   .hidden = o->fused_hidden, .dtype = o->dtype,
                                   .residual_in = b->resid, .residual_out = b->resid,
                                   .gamma = b->gamma, .eps = 1e-5f, .out = b->out, .algo = algo};
    return tecomm_allreduce_add_rmsnorm(b->comm, &a, b->s);
  }
  return tecomm_allreduce_algo(b->comm, b->x, b->x, count, o->dtype, TECOMM_SUM, algo, b->s);
}

/* Host barrier through the communicator: a one-float allreduce, waited for. */
static void barrier(struct bench *b) {
  COMM(tecomm_allreduce(b->comm, b->tbuf, b->tbuf, 1, TECORE_DTYPE_F32, TECOMM_MAX, b->s));
  CORE(tecore_stream_synchronize(b->s));
}

/* Mean microseconds per operation on this rank, then the max over ranks;
 * -1 when the algorithm cannot run the size. */
static double measure(struct bench *b, size_t count, tecomm_algo_t algo) {
  const struct opts *o = b->o;
  tecomm_result_t r = op_once(b, count, algo); /* also the first warmup */
  int ok = r == TECOMM_SUCCESS;
  if (!ok && r != TECOMM_ERR_NOT_SUPPORTED && r != TECOMM_ERR_NOMEM)
    DIE("%s: %s", tecomm_result_name(r), tecomm_last_error());
  /* every rank fails alike (the decision is collective), so no one waits */
  if (!ok) return -1.0;
  for (int i = 1; i < o->warmup; i++) COMM(op_once(b, count, algo));
  tecore_graph_exec_t exec = NULL;
  if (o->graph_ops > 0) {
    tecore_graph_t g;
    CORE(tecore_stream_begin_capture(b->s, TECORE_CAPTURE_THREAD_LOCAL));
    for (int i = 0; i < o->graph_ops; i++) COMM(op_once(b, count, algo));
    CORE(tecore_stream_end_capture(b->s, &g));
    CORE(tecore_graph_instantiate(&exec, g));
    CORE(tecore_graph_destroy(g));
    CORE(tecore_graph_launch(exec, b->s)); /* warm the graph */
  }
  barrier(b);
  CORE(tecore_event_record(b->e0, b->s));
  for (int i = 0; i < o->iters; i++) {
    if (exec) CORE(tecore_graph_launch(exec, b->s));
    else COMM(op_once(b, count, algo));
  }
  CORE(tecore_event_record(b->e1, b->s));
  CORE(tecore_stream_synchronize(b->s));
  float ms = 0;
  CORE(tecore_event_elapsed(&ms, b->e0, b->e1));
  if (exec) CORE(tecore_graph_exec_destroy(exec));
  COMM(tecomm_comm_status(b->comm, NULL));
  float us = ms * 1000.0f / (float)(o->iters * (o->graph_ops > 0 ? o->graph_ops : 1));
  CORE(tecore_memcpy_async(b->tbuf, (tecore_devptr_t)(uintptr_t)&us, sizeof us, b->s));
  COMM(tecomm_allreduce(b->comm, b->tbuf, b->tbuf, 1, TECORE_DTYPE_F32, TECOMM_MAX, b->s));
  CORE(tecore_stream_synchronize(b->s));
  CORE(tecore_memcpy_async((tecore_devptr_t)(uintptr_t)&us, b->tbuf, sizeof us, b->s));
  CORE(tecore_stream_synchronize(b->s));
  return us;
}

/* Reduce-scatter and all-gather: fresh inputs (all-gather: this rank's
 * block, the rest of the buffer poisoned), one checked call; the elements
 * of the output that are wrong. */
static long check_blocks(struct bench *b, size_t count, tecomm_algo_t algo) {
  const struct opts *o = b->o;
  const int rs = o->coll == COLL_REDUCE_SCATTER;
  size_t esz = tecore_dtype_size(o->dtype), blk = count / (size_t)b->n;
  size_t off = block_off(b, count), bytes = count * esz;
  unsigned char *h = malloc(bytes);
  if (!h) DIE("out of host memory");
  for (size_t i = 0; i < count; i++)
    store(h, i, o->dtype, rs ? input_value(i, b->rank)
                          : i / blk == (size_t)b->rank ? input_value(i % blk, b->rank) : -1024.0f);
  CORE(tecore_memcpy_async(b->x, (tecore_devptr_t)(uintptr_t)h, bytes, b->s));
  COMM(op_once(b, count, algo));
  CORE(tecore_memcpy_async((tecore_devptr_t)(uintptr_t)h, b->x, bytes, b->s));
  CORE(tecore_stream_synchronize(b->s));
  long wrong = 0;
  for (size_t i = 0; i < (rs ? blk : count); i++) {
    float want = 0;
    if (rs)
      for (int r = 0; r < b->n; r++) want += input_value((size_t)b->rank * blk + i, r);
    else
      want = input_value(i % blk, (int)(i / blk));
    if (load(h + (rs ? off : 0), i, o->dtype) != want) wrong++;
  }
  free(h);
  return wrong;
}

/* Fresh inputs, one checked call; the elements that are wrong. */
static long check_once(struct bench *b, size_t count, tecomm_algo_t algo) {
  const struct opts *o = b->o;
  if (o->coll != COLL_ALLREDUCE) return check_blocks(b, count, algo);
  size_t esz = tecore_dtype_size(o->dtype), bytes = count * esz;
  unsigned char *h = malloc(bytes), *got = malloc(bytes);
  unsigned char *res = NULL, *gam = NULL;
  if (!h || !got) DIE("out of host memory");
  for (size_t i = 0; i < count; i++) store(h, i, o->dtype, input_value(i, b->rank));
  /* every copy goes through the benchmark's stream: a synchronous copy
   * from pageable memory may return before its DMA lands, and nothing
   * orders that DMA with a non-blocking stream (2026-11-22: Lamport, which
   * reads its input at once, saw the previous sweep's bytes) */
  CORE(tecore_memcpy_async(b->x, (tecore_devptr_t)(uintptr_t)h, bytes, b->s));
  size_t H = o->fused_hidden;
  if (H) {
    res = malloc(bytes);
    gam = malloc(H * esz);
    if (!res || !gam) DIE("out of host memory");
    for (size_t i = 0; i < count; i++) store(res, i, o->dtype, input_value(i + 5, 99));
    for (size_t i = 0; i < H; i++) store(gam, i, o->dtype, 1.0f + 0.125f * (float)(i % 5));
    CORE(tecore_memcpy_async(b->resid, (tecore_devptr_t)(uintptr_t)res, bytes, b->s));
    CORE(tecore_memcpy_async(b->gamma, (tecore_devptr_t)(uintptr_t)gam, H * esz, b->s));
  }
  COMM(op_once(b, count, algo));
  CORE(tecore_memcpy_async((tecore_devptr_t)(uintptr_t)got, H ? b->out : b->x, bytes, b->s));
  CORE(tecore_stream_synchronize(b->s));
  long wrong = 0;
  if (!H) {
    for (size_t i = 0; i < count; i++) {
      float want = 0;
      for (int r = 0; r < b->n; r++) want += input_value(i, r);
      if (load(got, i, o->dtype) != want) wrong++;
    }
  } else {
    double tol = o->dtype == TECORE_DTYPE_F32 ? 1e-5 : o->dtype == TECORE_DTYPE_BF16 ? 2e-2 : 3e-3;
    for (size_t row = 0; row < count / H; row++) {
      double ss = 0, *v = malloc(H * sizeof *v);
      if (!v) DIE("out of host memory");
      for (size_t j = 0; j < H; j++) {
        size_t i = row * H + j;
        double sum = 0;
        for (int r = 0; r < b->n; r++) sum += input_value(i, r);
        v[j] = sum + load(res, i, o->dtype);
        ss += v[j] * v[j];
      }
      double rs = 1.0 / sqrt(ss / (double)H + 1e-5);
      for (size_t j = 0; j < H; j++) {
        double want = v[j] * rs * load(gam, j, o->dtype);
        if (fabs(load(got, row * H + j, o->dtype) - want) > tol * (fabs(want) + 1.0)) wrong++;
      }
      free(v);
    }
  }
  free(h);
  free(got);
  free(res);
  free(gam);
  return wrong;
}

static const char *dtype_str(tecore_dtype_t d) {
  return d == TECORE_DTYPE_F32 ? "float" : d == TECORE_DTYPE_BF16 ? "bf16" : "half";
}

/* the columns of a row, as nccl-tests' all_reduce_perf names them in the table */
static const struct te_out_col cols[] = {
    {"size", TE_OUT_NUM, 12, "%.0f", 0, 0},     {"count", TE_OUT_NUM, 12, "%.0f", 0, 0},
    {"dtype", TE_OUT_STR, 6, 0, 0, "type"},     {"algo", TE_OUT_STR, 8, 0, 0, 0},
    {"time_us", TE_OUT_NUM, 10, "%.2f", 0, "time(us)"},
    {"algbw_gbs", TE_OUT_NUM, 8, "%.2f", 0, "algbw"},
    {"busbw_gbs", TE_OUT_NUM, 8, "%.2f", 0, "busbw"},
    {"wrong", TE_OUT_NUM, 7, "%.0f", 0, "#wrong"},
    {"nccl_us", TE_OUT_NUM, 10, "%.2f", 0, "nccl(us)"},
    {"ratio", TE_OUT_NUM, 7, "%.2f", 0, 0}};
enum { NCOLS = sizeof cols / sizeof cols[0] };

static void header(struct bench *b) {
  const struct opts *o = b->o;
  struct te_out *out = o->out;
  char host[128] = "?";
  gethostname(host, sizeof host - 1);
  tecore_backend_t be = TECORE_BACKEND_NONE;
  tecore_backend(&be);
  int dev = 0;
  tecomm_comm_rank(b->comm, NULL, NULL, &dev);
  struct tecore_device_props p;
  memset(&p, 0, sizeof p);
  tecore_device_get_props(dev, &p);
  int nv = 0;
  char nccl[64] = "none";
  if (tecomm_nccl_version(&nv) == TECOMM_SUCCESS)
    snprintf(nccl, sizeof nccl, "%d.%d.%d", nv / 10000, (nv / 100) % 100, nv % 100);
  te_out_begin(out);
  te_out_field_s(out, "host", host);
  te_out_field_n(out, "ranks", b->n);
  te_out_field_s(out, "backend", tecore_backend_name(be));
  te_out_field_s(out, "gpu", p.name);
  te_out_field_s(out, "nccl", nccl);
  te_out_field_s(out, "coll", coll_words[o->coll]);
  te_out_field_s(out, "dtype", dtype_str(o->dtype));
  te_out_field_s(out, "algo", tecomm_algo_name(o->algo));
  te_out_field_n(out, "graph_ops", o->graph_ops);
  te_out_field_n(out, "fused_hidden", (double)o->fused_hidden);
  te_out_field_n(out, "warmup_iters", o->warmup);
  te_out_field_n(out, "iters", o->iters);
  te_out_note(out, "te-allreduce-perf: machine %s, %d ranks, backend %s, GPUs %d x %s (sm_%d%d), NCCL %s",
              host, b->n, tecore_backend_name(be), b->n, p.name, p.cc_major, p.cc_minor, nccl);
  te_out_note(out, "minBytes %zu maxBytes %zu step: %g(factor) warmup iters: %d iters: %d graph: %d "
              "dtype: %s coll: %s algo: %s fused: %zu",
              o->minb, o->maxb, o->factor, o->warmup, o->iters, o->graph_ops, dtype_str(o->dtype),
              coll_words[o->coll], tecomm_algo_name(o->algo), o->fused_hidden);
  if (b->peer)
    te_out_note(out, "nccl(us): NCCL called directly on a communicator of its own%s",
                o->fused_hidden ? ", then libtecore's add and RMSNorm kernels" : "");
  else if (o->nccl)
    te_out_note(out, "nccl(us): none (%s)", b->peer_why);
  char d[2048];
  if (!out->quiet && tecomm_comm_describe(b->comm, 0, d, sizeof d) == TECOMM_SUCCESS)
    for (char *l = strtok(d, "\n"); l; l = strtok(NULL, "\n")) te_out_note(out, "%s", l);
  /* the floor beside the figures, even with -q (off stdout in CSV and JSON) */
  te_out_field_n(out, "floor_launch_us", b->floor_us[0]);
  te_out_field_n(out, "floor_exchange_us", b->floor_us[1]);
  te_out_field_s(out, "floor_mode", o->graph_ops > 0 ? "graph-captured" : "eager");
  FILE *f = te_out_notes(out);
  if (b->floor_us[0] >= 0)
    fprintf(f, "# floor (us per op, %s): an empty kernel %.2f, one word to and from every peer "
            "%.2f (tecomm_probe)\n",
            o->graph_ops > 0 ? "graph-captured" : "eager", b->floor_us[0], b->floor_us[1]);
  else
    fprintf(f, "# floor: none (no IPC workspaces at this level)\n");
  fflush(f);
  te_out_table(out, "rows", cols, NCOLS);
}

/* After the rows: the mean bus bandwidth over the sizes that ran (as
 * nccl-tests prints it), and the wrong elements in all. */
static void footer(struct bench *b, double busbw_sum, int ran, long wrong) {
  struct te_out *out = b->o->out;
  double avg = ran ? busbw_sum / ran : 0;
  te_out_table_end(out);
  te_out_field_n(out, "avg_busbw_gbs", avg);
  te_out_field_n(out, "sizes_run", ran);
  te_out_field_n(out, "wrong_total", wrong);
  FILE *f = te_out_notes(out);
  if (out->format == TE_OUT_TABLE || !out->quiet) {
    fprintf(f, "# Avg bus bandwidth: %.4f GB/s (mean busbw over %d size%s)\n", avg, ran,
            ran == 1 ? "" : "s");
    fprintf(f, "# wrong elements: %ld%s\n", wrong, wrong ? " (FAIL)" : "");
  }
  te_out_end(out);
}

static int run_rank(const struct opts *o, int rank, int n, int device,
                    const struct tecomm_bootstrap *bs) {
  struct bench b = {.o = o, .rank = rank, .n = n, .probe = -1};
  g_rank = rank;
  COMM(tecomm_comm_init(rank, n, device, bs, &b.comm));
  COMM(tecomm_comm_rank(b.comm, &b.rank, &b.n, NULL));
  g_rank = b.rank;
  if (o->coll == COLL_AG_GEMM || o->coll == COLL_GEMM_RS) {
    const struct perf_gemm_opts g = {.rs = o->coll == COLL_GEMM_RS, .m = o->mnk[0],
                                     .n = o->mnk[1], .k = o->mnk[2], .dtype = o->dtype,
                                     .warmup = o->warmup, .iters = o->iters,
                                     .graph_ops = o->graph_ops, .check = o->check, .out = o->out,
                                     .nccl = o->nccl, .chunks = o->chunks};
    int rc = perf_gemm_run(b.comm, &g);
    COMM(tecomm_comm_destroy(b.comm));
    return rc;
  }
  CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &b.s));
  CORE(tecore_event_create(TECORE_EVENT_DEFAULT, &b.e0));
  CORE(tecore_event_create(TECORE_EVENT_DEFAULT, &b.e1));
  size_t esz = tecore_dtype_size(o->dtype);
  b.cap = o->maxb < esz ? esz : o->maxb;
  if (o->fused_hidden && b.cap < o->fused_hidden * esz) b.cap = o->fused_hidden * esz;
  /* the input is symmetric memory, as a GEMM writing into it would make
   * it: the allreduce reads it in place */
  tecomm_result_t mr = tecomm_mem_alloc(b.comm, b.cap, &b.x);
  if (mr == TECOMM_ERR_NOT_SUPPORTED) {
    /* across nodes (NCCL, verbs) there is no symmetric memory: plain memory */
    CORE(tecore_mem_alloc(b.cap, &b.x));
    b.x_plain = 1;
  } else {
    COMM(mr);
  }
  CORE(tecore_mem_alloc(sizeof(float) * 4, &b.tbuf));
  CORE(tecore_memset_d8_async(b.tbuf, 0, sizeof(float) * 4, b.s));
  if (o->fused_hidden) {
    CORE(tecore_mem_alloc(b.cap, &b.out));
    CORE(tecore_mem_alloc(b.cap, &b.resid));
    CORE(tecore_mem_alloc(o->fused_hidden * esz, &b.gamma));
  }
  /* the latency floors (tecomm_probe), measured as the sizes are */
  b.probe = TECOMM_PROBE_LAUNCH;
  b.floor_us[0] = measure(&b, 1, TECOMM_ALGO_AUTO);
  b.probe = TECOMM_PROBE_EXCHANGE;
  b.floor_us[1] = b.floor_us[0] >= 0 ? measure(&b, 1, TECOMM_ALGO_AUTO) : -1.0;
  b.probe = -1;
  if (o->nccl) b.peer = nccl_peer_open(b.comm, b.s, b.peer_why, sizeof b.peer_why);
  if (b.rank == 0) header(&b);
  int ran = 0;
  double busbw_sum = 0;
  long wrong_total = 0;
  for (double sz = (double)o->minb; sz <= (double)o->maxb * 1.0000001;
       sz = o->factor > 1 ? sz * o->factor : sz + (double)o->minb) {
    size_t bytes = (size_t)sz, count = bytes / esz;
    if (o->fused_hidden) count = count / o->fused_hidden * o->fused_hidden;
    if (o->coll != COLL_ALLREDUCE) count = count / (size_t)b.n * (size_t)b.n;
    if (count == 0) continue;
    bytes = count * esz;
    tecomm_algo_t algo = o->algo;
    if (b.rank == 0) te_out_progress(o->out, "%zu bytes ...", bytes);
    if (algo == TECOMM_ALGO_AUTO && o->coll == COLL_ALLREDUCE &&
        tecomm_comm_choose(b.comm, count, o->dtype, o->fused_hidden != 0, &algo) != TECOMM_SUCCESS)
      algo = TECOMM_ALGO_AUTO;
    long wrong = -1;
    double us = measure(&b, count, o->algo);
    if (us >= 0 && o->check) {
      long w = check_once(&b, count, o->algo);
      float wf = (float)w;
      CORE(tecore_memcpy_async(b.tbuf, (tecore_devptr_t)(uintptr_t)&wf, sizeof wf, b.s));
      COMM(tecomm_allreduce(b.comm, b.tbuf, b.tbuf, 1, TECORE_DTYPE_F32, TECOMM_SUM, b.s));
      CORE(tecore_stream_synchronize(b.s));
      float fw = 0;
      CORE(tecore_memcpy_async((tecore_devptr_t)(uintptr_t)&fw, b.tbuf, sizeof fw, b.s));
      CORE(tecore_stream_synchronize(b.s));
      wrong = (long)fw;
    }
    double nus = -1.0;
    if (b.peer) {
      b.on_peer = 1;
      nus = measure(&b, count, TECOMM_ALGO_AUTO);
      b.on_peer = 0;
    }
    if (wrong > 0) wrong_total += wrong;
    if (b.rank == 0) {
      double algbw = us > 0 ? (double)bytes / us * 1e-3 : 0;
      /* nccl-tests' factors: allreduce moves 2 (n - 1) / n of the buffer
       * over each rank's links, reduce-scatter and all-gather (n - 1) / n */
      double busbw = algbw * (o->coll == COLL_ALLREDUCE ? 2.0 : 1.0) * (b.n - 1) / b.n;
      if (us >= 0) {
        ran++;
        busbw_sum += busbw;
      }
      struct te_out_val v[NCOLS] = {
          TE_OUT_N(bytes), TE_OUT_N(count), TE_OUT_S(dtype_str(o->dtype)),
          TE_OUT_S(tecomm_algo_name(algo)), us >= 0 ? TE_OUT_N(us) : TE_OUT_NONE,
          us >= 0 ? TE_OUT_N(algbw) : TE_OUT_NONE, us >= 0 ? TE_OUT_N(busbw) : TE_OUT_NONE,
          wrong >= 0 ? TE_OUT_N(wrong) : TE_OUT_NONE, nus >= 0 ? TE_OUT_N(nus) : TE_OUT_NONE,
          us > 0 && nus > 0 ? TE_OUT_N(us / nus) : TE_OUT_NONE};
      te_out_row(o->out, v);
    }
  }
  if (b.rank == 0) footer(&b, busbw_sum, ran, wrong_total);
  nccl_peer_close(b.peer);
  if (b.x_plain)
    CORE(tecore_mem_free(b.x));
  else
    COMM(tecomm_mem_free(b.comm, b.x));
  if (o->fused_hidden) {
    CORE(tecore_mem_free(b.out));
    CORE(tecore_mem_free(b.resid));
    CORE(tecore_mem_free(b.gamma));
  }
  CORE(tecore_mem_free(b.tbuf));
  CORE(tecore_event_destroy(b.e0));
  CORE(tecore_event_destroy(b.e1));
  CORE(tecore_stream_destroy(b.s));
  COMM(tecomm_comm_destroy(b.comm));
  /* a wrong element fails the run (the count is summed over the ranks) */
  return wrong_total ? TE_EXIT_FAIL : TE_EXIT_OK;
}

static const char usage_text[] =
    "usage: te-allreduce-perf [-n ranks] [-b minbytes] [-e maxbytes] [-f factor]\n"
    "         [-d float|bf16|half|e4m3] [-C allreduce|reduce-scatter|allgather|ag-gemm|gemm-rs]\n"
    "         [-a auto|oneshot|twoshot|lamport|nccl|verbs|nvls|nvls-lamport|mnnvl|ce]\n"
    "         [-G ops] [-w warmup] [-i iters] [-c 0|1] [--fused hidden] [--no-nccl]\n"
    "         [--mnk M,N,K] [--chunks C]\n"
    "         [--csv | --json] [-q] [-h] [--version]\n"
    "  -n N           fork N ranks (one per GPU, or vdev ranks); without it, ranks come\n"
    "                 from TECOMM_RANK/NRANKS/ROOT and TECOMM_SECRET (or mpirun)\n"
    "  -b BYTES       the smallest size (default 8; K, M or G may follow)\n"
    "  -e BYTES       the largest size (default 64M; K, M or G may follow)\n"
    "  -f FACTOR      multiply the size by FACTOR each step (default 2; 1: add -b instead)\n"
    "  -d DTYPE       float, bf16 or half (default bf16); e4m3 with ag-gemm, gemm-rs\n"
    "  -C COLL        the collective: allreduce (default), reduce-scatter or allgather;\n"
    "                 sizes are the whole buffer, a multiple of the ranks' count;\n"
    "                 ag-gemm or gemm-rs: the overlapped GEMM at --mnk against the GEMM\n"
    "                 alone, the unoverlapped pair and the collective alone\n"
    "  -a ALGO        the algorithm for every size (default auto: libtecomm's table)\n"
    "  -G N           capture N operations in one graph and time its replays (per op;\n"
    "                 default 0: eager launches)\n"
    "  -w N           warm-up operations per size (default 5)\n"
    "  -i N           timed operations per size (default 20)\n"
    "  -c 0|1         check the result of one more call per size (#wrong; default 1)\n"
    "  --fused H      allreduce + residual add + RMSNorm over rows of H elements\n"
    "  --mnk M,N,K    ag-gemm, gemm-rs: d[M][N] = a[M][K] b[N][K]^T, M every rank's rows\n"
    "                 together (default 8192,4096,4096)\n"
    "  --chunks C     ag-gemm, gemm-rs: the chunks row cuts the GEMM in C row blocks,\n"
    "                 no communication (default: the ranks; 1 to 64, dividing M)\n"
    "  --no-nccl      do not time NCCL (the library itself, on cuda) beside each size\n"
    "  --csv          CSV on stdout: a header row, then one row per size\n"
    "  --json         one JSON object on stdout: the run, \"rows\", the average bus bandwidth\n"
    "  -q, --quiet    the rows, the floor and the average only (no header lines)\n"
    "  -h, --help     this help\n"
    "  --version      print \"te-allreduce-perf (libte) VERSION\"\n"
    "  with --csv or --json, the header, floor and average lines go to stderr\n"
    "exit status: 0 ok, 1 a rank failed or an element was wrong, 2 a wrong command line\n"
    "see te-allreduce-perf(1)\n";
static int fork_ranks(const struct opts *o_);

/* --mnk M,N,K: three sizes of 1 to 2^31; 1 when it is not that. */
static int parse_mnk(const char *arg, size_t mnk[3]) {
  const char *p = arg;
  for (int i = 0; i < 3; i++) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(p, &end, 10);
    if (end == p || errno || v < 1 || v > (1ull << 31) || *p == '-') return 1;
    mnk[i] = (size_t)v;
    if (i < 2 && *end != ',') return 1;
    p = end + (i < 2);
  }
  return *p != 0;
}

int main(int argc, char **argv) {
  struct te_out out = {.tool = "te-allreduce-perf", .head_prefix = "#"};
  struct opts o = {.out = &out, .nranks = 0, .minb = 8, .maxb = 64u << 20, .factor = 2, .dtype = TECORE_DTYPE_BF16,
                   .algo = TECOMM_ALGO_AUTO, .graph_ops = 0, .warmup = 5, .iters = 20,
                   .check = 1, .nccl = 1, .mnk = {8192, 4096, 4096}};
  static const struct option lo[] = {{"fused", required_argument, 0, 'F'},
                                     {"mnk", required_argument, 0, 'M'},
                                     {"chunks", required_argument, 0, 'K'},
                                     TE_CLI_FORMATS,
                                     {"no-nccl", no_argument, 0, 'N'},
                                     TE_CLI_LONGS,
                                     {0, 0, 0, 0}};
  struct te_cli cli = {.prog = "te-allreduce-perf", .usage = usage_text,
                       .shorts = "n:b:e:f:d:C:a:G:w:i:c:qh", .longs = lo,
                       .out = &out};
  long long v;
  int ch;
  while ((ch = te_cli_next(&cli, argc, argv)) != -1) {
    switch (ch) {
    case TE_CLI_EXIT: return cli.status;
    case 'n':
      if (te_cli_int(&cli, "-n", optarg, 1, 64, &o.nranks)) return cli.status;
      break;
    case 'b':
      if (te_cli_long(&cli, "-b", optarg, 1, 1ll << 40, 1, &v)) return cli.status;
      o.minb = (size_t)v;
      break;
    case 'e':
      if (te_cli_long(&cli, "-e", optarg, 1, 1ll << 40, 1, &v)) return cli.status;
      o.maxb = (size_t)v;
      break;
    case 'f':
      if (te_cli_double(&cli, "-f", optarg, 1.0, 1e6, &o.factor)) return cli.status;
      break;
    case 'd':
      if (!strcmp(optarg, "float") || !strcmp(optarg, "f32") || !strcmp(optarg, "fp32"))
        o.dtype = TECORE_DTYPE_F32;
      else if (!strcmp(optarg, "bf16") || !strcmp(optarg, "bfloat16"))
        o.dtype = TECORE_DTYPE_BF16;
      else if (!strcmp(optarg, "half") || !strcmp(optarg, "f16") || !strcmp(optarg, "fp16"))
        o.dtype = TECORE_DTYPE_F16;
      else if (!strcmp(optarg, "e4m3"))
        o.dtype = TECORE_DTYPE_E4M3;
      else
        return te_cli_error(&cli, "-d %s: not float, bf16, half or e4m3", optarg);
      break;
    case 'C': {
      int c = -1;
      for (int i = 0; i < (int)(sizeof coll_words / sizeof coll_words[0]); i++)
        if (!strcmp(optarg, coll_words[i])) c = i;
      if (c < 0)
        return te_cli_error(&cli, "-C %s: not allreduce, reduce-scatter, allgather, ag-gemm or "
                            "gemm-rs", optarg);
      o.coll = (enum coll)c;
      break;
    }
    case 'a':
      if (tecomm_algo_parse(optarg, &o.algo) != TECOMM_SUCCESS)
        return te_cli_error(&cli, "-a %s: %s", optarg, tecomm_last_error());
      break;
    case 'G':
      if (te_cli_int(&cli, "-G", optarg, 0, 1 << 20, &o.graph_ops)) return cli.status;
      break;
    case 'w':
      if (te_cli_int(&cli, "-w", optarg, 1, 1 << 20, &o.warmup)) return cli.status;
      break;
    case 'i':
      if (te_cli_int(&cli, "-i", optarg, 1, 1 << 24, &o.iters)) return cli.status;
      break;
    case 'c':
      if (te_cli_int(&cli, "-c", optarg, 0, 1, &o.check)) return cli.status;
      break;
    case 'F':
      if (te_cli_long(&cli, "--fused", optarg, 1, 1 << 24, 1, &v)) return cli.status;
      o.fused_hidden = (size_t)v;
      break;
    case 'N': o.nccl = 0; break;
    case 'M':
      if (parse_mnk(optarg, o.mnk)) return te_cli_error(&cli, "--mnk %s: not M,N,K (each 1 to 2^31)", optarg);
      break;
    case 'K':
      if (te_cli_int(&cli, "--chunks", optarg, 1, 64, &o.chunks)) return cli.status;
      break;
    }
  }
  if (te_cli_end(&cli, argc, argv)) return cli.status;
  if (o.maxb < o.minb) return te_cli_error(&cli, "-e %zu is below -b %zu", o.maxb, o.minb);
  const int gemm_mode = o.coll == COLL_AG_GEMM || o.coll == COLL_GEMM_RS;
  if (gemm_mode && o.dtype == TECORE_DTYPE_F32)
    return te_cli_error(&cli, "-C %s: -d bf16, half or e4m3 (the GEMM's operands)",
                        coll_words[o.coll]);
  if (!gemm_mode && o.dtype == TECORE_DTYPE_E4M3)
    return te_cli_error(&cli, "-d e4m3 goes with -C ag-gemm or gemm-rs");
  if (o.chunks && !gemm_mode)
    return te_cli_error(&cli, "--chunks goes with -C ag-gemm or gemm-rs");
  if (o.chunks && o.mnk[0] % (size_t)o.chunks)
    return te_cli_error(&cli, "--chunks %d: M (%zu) is not a multiple of it", o.chunks, o.mnk[0]);
  if (o.fused_hidden && o.coll != COLL_ALLREDUCE)
    return te_cli_error(&cli, "--fused is an allreduce's epilogue, not %s's", coll_words[o.coll]);
  o.quiet = cli.quiet;
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (o.nranks == 0) {
#ifdef TE_HAVE_MPI
    if (!getenv("TECOMM_RANK") && under_mpi()) {
      MPI_Init(&argc, &argv);
      MPI_Comm world = MPI_COMM_WORLD;
      struct tecomm_bootstrap bs = {.kind = TECOMM_BOOTSTRAP_MPI, .mpi_comm = &world};
      int rc = run_rank(&o, -1, -1, -1, &bs);
      MPI_Finalize();
      return rc;
    }
#endif
    return run_rank(&o, -1, -1, -1, NULL); /* TECOMM_RANK / NRANKS / ROOT */
  }
  return fork_ranks(&o);
}

/* -n: fork the ranks before anything touches the device (a CUDA context
 * does not survive fork); rank r uses device r on cuda.  The exit status:
 * 1 when a rank failed. */
static int fork_ranks(const struct opts *o_) {
  struct opts o = *o_;
  g_shm = mmap(NULL, sizeof *g_shm, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (g_shm == MAP_FAILED) {
    perror("te-allreduce-perf: mmap");
    return 1;
  }
  memset(g_shm, 0, sizeof *g_shm);
  g_shm->n = o.nranks;
  pid_t *pids = calloc((size_t)o.nranks, sizeof *pids);
  fflush(stdout);
  for (int r = 0; r < o.nranks; r++) {
    pids[r] = fork();
    if (pids[r] < 0) {
      perror("te-allreduce-perf: fork");
      return 1;
    }
    if (pids[r] == 0) {
      g_rank = r;
      struct tecomm_bootstrap bs = {.kind = TECOMM_BOOTSTRAP_CALLBACKS,
                                    .allgather = shm_allgather, .barrier = shm_barrier,
                                    .ctx = g_shm};
      /* device -1: the rank's index on its host modulo the device count,
       * so rank r drives GPU r */
      _exit(run_rank(&o, r, o.nranks, -1, &bs));
    }
  }
  int rc = 0;
  for (int r = 0; r < o.nranks; r++) {
    int st = 0;
    waitpid(pids[r], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 1;
  }
  free(pids);
  return rc;
}
