/* SPDX-License-Identifier: Apache-2.0 */
/* te-offload-bench -- activation offload's figures, each beside its peer
 * measured in the same run:
 *   pool D2H and H2D (tegraph_offload_save / _restore of one tensor)
 *       vs a raw tecore_memcpy_async between device and pinned memory of
 *       the same size;
 *   spill write and read (the same calls with a budget that holds only
 *       the staging buffers, so the tensor goes to files in --dir)
 *       vs a raw io_uring O_DIRECT loop (the same queue depth and chunk,
 *       fixed buffers, a file written once before the timed passes, as
 *       the pool's warm-up does) writing and reading a file in the same
 *       directory;
 *   the step (forward + backward of an FP8 stack of MLP blocks) with and
 *       without offload;
 *   the service engine's CPU time per second, idle and handing off.
 * Sizes default to the GPU's (256 MiB tensors, the te-demo model) or,
 * on vdev, to small ones.  Every figure is a row of named fields
 * (tools/out.h): a table, --csv or --json. */
#define _GNU_SOURCE 1   /* O_DIRECT */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <te/core.h>
#include <te/graph.h>
#include <te/offload.h>
#include "cli.h"
#include "out.h"
#include "mlp_block.h"

#define CK(call)                                                                         \
  do {                                                                                   \
    tecore_result_t r_ = (call);                                                         \
    if (r_ != TECORE_SUCCESS) {                                                          \
      fprintf(stderr, "te-offload-bench: %s: %s (%s)\n", #call, tecore_strerror(r_),     \
              tecore_last_error());                                                      \
      exit(TE_EXIT_FAIL);                                                                \
    }                                                                                    \
  } while (0)
#define GK(call)                                                                         \
  do {                                                                                   \
    tegraph_result_t r_ = (call);                                                        \
    if (r_ != TEGRAPH_SUCCESS) {                                                         \
      fprintf(stderr, "te-offload-bench: %s: %s (%s)\n", #call, tegraph_strerror(r_),    \
              tegraph_last_error());                                                     \
      exit(TE_EXIT_FAIL);                                                                \
    }                                                                                    \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static tecore_stream_t S;
static tecore_event_t E0, E1;
/* judge: targets are judged on a GPU only (vdev figures are timings of
 * CPU threads, not GPU speed); OUT.quiet: --quiet, the figures only */
static int judge;
static struct te_out OUT = {.tool = "te-offload-bench"};

/* a row: ratio = peer_time / time (> 1: faster than the peer) */
static const struct te_out_col cols[] = {
    {"section", TE_OUT_STR, -7, 0, 0, 0},     {"name", TE_OUT_STR, -22, 0, 0, 0},
    {"time", TE_OUT_NUM, 10, "%.3f", 0, 0},   {"unit", TE_OUT_STR, -4, 0, 0, 0},
    {"rate_gbs", TE_OUT_NUM, 9, "%.2f", 0, "GB/s"},
    {"peer", TE_OUT_STR, -24, 0, 0, 0},       {"peer_time", TE_OUT_NUM, 10, "%.3f", 0, 0},
    {"peer_rate_gbs", TE_OUT_NUM, 9, "%.2f", 0, "GB/s"},
    {"ratio", TE_OUT_NUM, 7, "%.3f", 0, 0},   {"target", TE_OUT_STR, -14, 0, 0, 0},
    {"verdict", TE_OUT_STR, -7, 0, 0, 0},     {"note", TE_OUT_STR, 0, 0, 0, 0}};
enum { NCOLS = sizeof cols / sizeof cols[0] };

/* bytes: what the row moved, for its rates (0: none); peer, target,
 * note: NULL for none */
struct ob_row {
  const char *section, *name;
  double time;
  const char *unit;
  double bytes;
  const char *peer;
  double peer_time;
  const char *target;
  int met;
  const char *note;
};

static void row(const struct ob_row *r) {
  const char *section = r->section, *name = r->name, *unit = r->unit, *peer = r->peer;
  const char *target = r->target, *note = r->note;
  const double time = r->time, bytes = r->bytes, peer_time = r->peer_time;
  const int met = r->met;
  int judged = target && judge;
  struct te_out_val v[NCOLS] = {
      TE_OUT_S(section), TE_OUT_S(name), TE_OUT_N(time), TE_OUT_S(unit),
      bytes > 0 ? TE_OUT_N(bytes / (time * 1e-3) / 1e9) : TE_OUT_NONE, TE_OUT_S(peer ? peer : ""),
      peer ? TE_OUT_N(peer_time) : TE_OUT_NONE,
      peer && bytes > 0 ? TE_OUT_N(bytes / (peer_time * 1e-3) / 1e9) : TE_OUT_NONE,
      peer ? TE_OUT_N(peer_time / time) : TE_OUT_NONE, TE_OUT_S(judged ? target : ""),
      TE_OUT_S(judged ? (met ? "PASS" : "MISS") : ""), TE_OUT_S(note ? note : "")};
  te_out_row(&OUT, v);
}

static double elapsed_ms(void) {
  CK(tecore_event_synchronize(E1));
  float ms = 0;
  CK(tecore_event_elapsed(&ms, E0, E1));
  return ms;
}

/* A copy figure beside its peer's; target: the percentage of the peer's
 * bandwidth to reach */
static void line(const char *section, const char *what, double bytes, double ms, const char *peer,
                 double peer_ms, double target) {
  char t[32];
  snprintf(t, sizeof t, ">= %.0f%% of peer", target);
  row(&(struct ob_row){.section = section, .name = what, .time = ms, .unit = "ms", .bytes = bytes,
                       .peer = peer, .peer_time = peer_ms, .target = t,
                       .met = peer_ms / ms * 100.0 >= target});
}

/* ---- pool and spill vs their peers ------------------------------------------------ */

static tegraph_offload_t *make_ctx(size_t budget, const char *dir, size_t chunk) {
  const char *dirs[1] = {dir};
  struct tegraph_offload_config cfg = {.host_budget = budget, .min_elems = 1,
                                       .dirs = dir ? dirs : NULL, .ndirs = dir ? 1 : 0,
                                       .files_per_dir = 1, .stripe_bytes = chunk,
                                       .staging_bytes = chunk * 8};
  tegraph_offload_t *c = NULL;
  GK(tegraph_offload_create(&cfg, &c));
  return c;
}

/* Times iters save+save_done (out) and restore (in) of t through c. */
static void time_ctx(tegraph_offload_t *c, const struct tecore_tensor *t, int iters, double *out_ms,
                     double *in_ms) {
  *out_ms = *in_ms = 0;
  for (int i = -1; i < iters; i++) {   /* i = -1: warm-up */
    int id = 0;
    struct tecore_tensor back;
    CK(tecore_event_record(E0, S));
    GK(tegraph_offload_save(c, t, 0, S, &id));
    GK(tegraph_offload_save_done(c, id, S));
    CK(tecore_event_record(E1, S));
    double o = elapsed_ms();
    CK(tecore_event_record(E0, S));
    GK(tegraph_offload_restore(c, id, S, &back));
    CK(tecore_event_record(E1, S));
    double n = elapsed_ms();
    CK(tecore_stream_synchronize(S));
    GK(tegraph_offload_check(c));
    GK(tegraph_offload_reset(c));
    if (i >= 0) {
      *out_ms += o / iters;
      *in_ms += n / iters;
    }
  }
}

static void bench_pool(size_t bytes, int iters) {
  tecore_devptr_t d = 0;
  void *h = NULL;
  CK(tecore_mem_alloc(bytes, &d));
  CK(tecore_mem_alloc_host(bytes, &h));
  CK(tecore_memset_d8_async(d, 0x5a, bytes, S));
  double raw_out = 0, raw_in = 0;
  for (int i = -1; i < iters; i++) {
    CK(tecore_event_record(E0, S));
    CK(tecore_memcpy_async((tecore_devptr_t)(uintptr_t)h, d, bytes, S));
    CK(tecore_event_record(E1, S));
    double o = elapsed_ms();
    CK(tecore_event_record(E0, S));
    CK(tecore_memcpy_async(d, (tecore_devptr_t)(uintptr_t)h, bytes, S));
    CK(tecore_event_record(E1, S));
    double n = elapsed_ms();
    if (i >= 0) {
      raw_out += o / iters;
      raw_in += n / iters;
    }
  }
  tegraph_offload_t *c = make_ctx(bytes + (1 << 20), NULL, 1 << 20);
  struct tecore_tensor t;
  size_t sh[1] = {bytes};
  CK(tecore_tensor_init(&t, TECORE_DTYPE_U8, 1, sh, d));
  double out = 0, in = 0;
  time_ctx(c, &t, iters, &out, &in);
  char what[64];
  snprintf(what, sizeof what, "pool D2H %zu MiB", bytes >> 20);
  line("pool", what, (double)bytes, out, "raw pinned memcpy D2H", raw_out, 90);
  snprintf(what, sizeof what, "pool H2D %zu MiB", bytes >> 20);
  line("pool", what, (double)bytes, in, "raw pinned memcpy H2D", raw_in, 90);
  GK(tegraph_offload_destroy(c));
  CK(tecore_mem_free(d));
  CK(tecore_mem_free_host(h));
}

/* A raw io_uring loop: bytes of buf to (or from) the file fd, chunk
 * bytes a request, qd in flight; seconds, or -1.  The file is written
 * once untimed first, as the pool's warm-up writes its spill files, so
 * neither side's timed writes extend a file. */
static double raw_uring(int fd, void *buf, size_t bytes, size_t chunk, unsigned qd, int rd) {
  struct io_uring ring;
  if (io_uring_queue_init(qd, &ring, 0) != 0) return -1;
  /* fixed buffers, as the pool's staging buffers are (set up untimed) */
  struct iovec iov = {.iov_base = buf, .iov_len = bytes};
  int fixed = io_uring_register_buffers(&ring, &iov, 1) == 0;
  double t0 = now_s();
  size_t next = 0, done = 0;
  unsigned inflight = 0;
  int err = 0;
  while (done < bytes && !err) {
    while (inflight < qd && next < bytes) {
      struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
      if (!sqe) break;
      size_t len = bytes - next < chunk ? bytes - next : chunk;
      if (rd && fixed)
        io_uring_prep_read_fixed(sqe, fd, (char *)buf + next, (unsigned)len, next, 0);
      else if (fixed)
        io_uring_prep_write_fixed(sqe, fd, (char *)buf + next, (unsigned)len, next, 0);
      else if (rd)
        io_uring_prep_read(sqe, fd, (char *)buf + next, (unsigned)len, next);
      else
        io_uring_prep_write(sqe, fd, (char *)buf + next, (unsigned)len, next);
      next += len;
      inflight++;
    }
    io_uring_submit(&ring);
    struct io_uring_cqe *cqe;
    if (io_uring_wait_cqe(&ring, &cqe) != 0) break;
    if (cqe->res < 0) err = -cqe->res;
    else done += (size_t)cqe->res;
    io_uring_cqe_seen(&ring, cqe);
    inflight--;
  }
  double t = now_s() - t0;
  io_uring_queue_exit(&ring);
  if (err) {
    fprintf(stderr, "te-offload-bench: raw io_uring %s: %s\n", rd ? "read" : "write",
            strerror(err));
    return -1;
  }
  return t;
}

/* The spill figures; -1 when they could not be taken (said on stderr, once). */
static int bench_spill(const char *dir, size_t bytes, int iters) {
  int ok = 0;
  const char *why = "";
  GK(tegraph_uring_probe(&ok, &why));
  if (!ok) {
    te_out_note(&OUT, "spill: skipped: %s", why);
    return 0;
  }
  size_t chunk = 1 << 20;
  unsigned qd = 16;   /* the staging buffer's stripes: 8 a chunk, two chunks in flight */
  void *h = NULL;
  CK(tecore_mem_alloc_host(bytes, &h));
  memset(h, 0x3c, bytes);
  double w = 0, r = 0;
  char path[4096];
  snprintf(path, sizeof path, "%s/te-offload-bench.raw.%d", dir, (int)getpid());
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
  if (fd < 0 && errno == EINVAL) fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) {
    fprintf(stderr, "te-offload-bench: --dir %s: cannot create %s: %s\n", dir, path,
            strerror(errno));
    CK(tecore_mem_free_host(h));
    return -1;
  }
  int bad = raw_uring(fd, h, bytes, chunk, qd, 0) < 0;   /* warm-up: the file's blocks */
  for (int i = 0; i < iters && !bad; i++) {
    double a = raw_uring(fd, h, bytes, chunk, qd, 0);
    double b = raw_uring(fd, h, bytes, chunk, qd, 1);
    bad = a < 0 || b < 0;
    w += a * 1e3 / iters;
    r += b * 1e3 / iters;
  }
  close(fd);
  unlink(path);
  if (bad) {
    CK(tecore_mem_free_host(h));
    return -1;
  }
  tecore_devptr_t d = 0;
  CK(tecore_mem_alloc(bytes, &d));
  CK(tecore_memset_d8_async(d, 0x5a, bytes, S));
  /* a budget of the staging buffers plus a page: the tensor goes to files */
  tegraph_offload_t *c = make_ctx(4 * 8 * chunk + 4096, dir, chunk);
  struct tegraph_offload_stats st;
  GK(tegraph_offload_get_stats(c, &st));
  struct tecore_tensor t;
  size_t sh[1] = {bytes};
  CK(tecore_tensor_init(&t, TECORE_DTYPE_U8, 1, sh, d));
  double out = 0, in = 0;
  time_ctx(c, &t, iters, &out, &in);
  te_out_note(&OUT, "spill: %s", st.why);
  char what[64];
  snprintf(what, sizeof what, "spill write %zu MiB", bytes >> 20);
  line("spill", what, (double)bytes, out, "raw io_uring write", w, 90);
  snprintf(what, sizeof what, "spill read %zu MiB", bytes >> 20);
  line("spill", what, (double)bytes, in, "raw io_uring read", r, 90);
  GK(tegraph_offload_destroy(c));
  CK(tecore_mem_free(d));
  CK(tecore_mem_free_host(h));
  return 0;
}

/* ---- the step with and without offload ---------------------------------------------- */

static void bench_step(size_t tokens, size_t hidden, int layers, int iters) {
  struct tecore_seq_config cfg = {.rows = tokens, .features = hidden, .dtype = TECORE_DTYPE_BF16,
                                  .seed = 5};
  tecore_seq_t *q = NULL;
  CK(tecore_seq_create(&cfg, &q));
  for (int l = 0; l < layers; l++) CK(te_tools_add_mlp_block(q, l, hidden, 4 * hidden));
  struct tecore_recipe rc;
  CK(tecore_recipe_init(&rc, TECORE_RECIPE_DELAYED));
  CK(tecore_seq_set_recipe(q, &rc, S));
  CK(tecore_seq_build(q, S));
  size_t n = tokens * hidden;
  tecore_devptr_t x, y, dy;
  CK(tecore_mem_alloc(n * 2, &x));
  CK(tecore_mem_alloc(n * 2, &y));
  CK(tecore_mem_alloc(n * 2, &dy));
  CK(tecore_memset_d16_async(x, 0x3c00, n, S));    /* bf16 1.0 */
  CK(tecore_memset_d16_async(dy, 0x3a00, n, S));   /* bf16 ~0.0005 */
  size_t sh[2] = {tokens, hidden};
  struct tecore_tensor tx, ty, tdy;
  CK(tecore_tensor_init(&tx, TECORE_DTYPE_BF16, 2, sh, x));
  CK(tecore_tensor_init(&ty, TECORE_DTYPE_BF16, 2, sh, y));
  CK(tecore_tensor_init(&tdy, TECORE_DTYPE_BF16, 2, sh, dy));
  double ms[2] = {0, 0};
  size_t before = 0, after = 0, ring = 0, moved = 0;
  for (int pass = 0; pass < 2; pass++) {
    tegraph_offload_t *c = NULL;
    if (pass == 1) {
      /* a pool that holds what the backward reads back */
      size_t ns = 0, need = 1 << 20;
      CK(tecore_seq_get_saved(q, NULL, 0, &ns));
      struct tecore_seq_saved *sv = calloc(ns, sizeof *sv);
      CK(tecore_seq_get_saved(q, sv, ns, &ns));
      for (size_t i = 0; i < ns; i++)
        if (sv[i].read_back) need += (sv[i].bytes + 255) & ~(size_t)255;
      free(sv);
      c = make_ctx(need, NULL, 1 << 20);
      struct tegraph_offload_block *b = calloc((size_t)layers, sizeof *b);
      for (int l = 0; l < layers; l++) b[l] = (struct tegraph_offload_block){6 * (size_t)l, 6};
      struct tegraph_offload_seq_desc d = {.seq = q, .blocks = b, .nblocks = (size_t)layers};
      GK(tegraph_offload_attach(c, &d));
      free(b);
      struct tegraph_offload_stats st;
      GK(tegraph_offload_get_stats(c, &st));
      before = st.seq_bytes_before;
      after = st.seq_bytes_after;
      ring = st.ring_bytes;
      moved = st.pass_to_host;
    }
    for (int i = -1; i < iters; i++) {
      CK(tecore_event_record(E0, S));
      CK(tecore_seq_forward(q, &tx, &ty, 0, S));
      CK(tecore_seq_backward(q, &tdy, NULL, S));
      CK(tecore_event_record(E1, S));
      double t = elapsed_ms();
      if (i >= 0) ms[pass] += t / iters;
    }
    if (c) GK(tegraph_offload_destroy(c));
  }
  char name[64], note[160];
  snprintf(name, sizeof name, "step %d x [%zu][%zu]", layers, tokens, hidden);
  snprintf(note, sizeof note, "memory %.1f MiB -> %.1f MiB + ring %.1f MiB; %.1f MiB each way",
           before / 1048576.0, after / 1048576.0, ring / 1048576.0, moved / 1048576.0);
  /* with offload, against the same step without it */
  row(&(struct ob_row){.section = "step", .name = name, .time = ms[1], .unit = "ms",
                       .peer = "the step without offload", .peer_time = ms[0],
                       .target = "<= 1.05x the time", .met = ms[1] / ms[0] <= 1.05, .note = note});
  CK(tecore_mem_free(x));
  CK(tecore_mem_free(y));
  CK(tecore_mem_free(dy));
  CK(tecore_seq_destroy(q));
}

/* ---- the engine's cost ------------------------------------------------------------------ */

static tecore_result_t nothing(void *arg) {
  (void)arg;
  return TECORE_SUCCESS;
}

static void bench_engine(int handoffs) {
  struct tecore_svc_op op = {.kind = TECORE_SVC_CALL, .fn = nothing};
  tecore_svc_job_t *j = NULL;
  CK(tecore_svc_job_create(&op, 1, &j));
  struct tecore_svc_stats a, b, c;
  CK(tecore_svc_get_stats(&a));
  double t0 = now_s();
  for (int i = 0; i < handoffs; i++) CK(tecore_svc_job_enqueue(j, S));
  CK(tecore_stream_synchronize(S));
  double t = now_s() - t0;
  CK(tecore_svc_get_stats(&b));
  usleep(1000000);
  CK(tecore_svc_get_stats(&c));
  char name[64], note[320];
  snprintf(name, sizeof name, "engine hand-off x %d", handoffs);
  snprintf(note, sizeof note, "CPU %.3f s/s while handing off; idle CPU %.4f s/s, %.0f wake-ups/s "
           "(%s)", (b.cpu_s - a.cpu_s) / (b.up_s - a.up_s), (c.cpu_s - b.cpu_s) / (c.up_s - b.up_s),
           (double)(c.wakeups - b.wakeups) / (c.up_s - b.up_s), c.why);
  row(&(struct ob_row){.section = "engine", .name = name, .time = t / handoffs * 1e6, .unit = "us",
                       .note = note});
  CK(tecore_svc_job_destroy(j));
}

static const char usage_text[] =
    "usage: te-offload-bench [--mb N] [--dir DIR] [--iters N] [--tokens N] [--hidden N]\n"
    "                        [--layers N] [--skip pool,spill,step,engine] [--csv | --json]\n"
    "                        [-q] [-h] [--version]\n"
    "  --mb N       tensor size for the pool and spill figures (cuda: 256, vdev: 8)\n"
    "  --dir DIR    file system for the spill figures ($TMPDIR or /tmp)\n"
    "  --iters N    timed repetitions (cuda: 10, vdev: 3)\n"
    "  --tokens N   the step's tokens (cuda: 8192, vdev: 64)\n"
    "  --hidden N   the step's model width (cuda: 4096, vdev: 64)\n"
    "  --layers N   the step's MLP blocks (cuda: 8, vdev: 5)\n"
    "  --skip LIST  leave out some of pool, spill, step, engine (comma-separated)\n"
    "  --csv        CSV: a row of column names, then one row per figure\n"
    "  --json       one JSON object: the run, and \"rows\": one object per figure\n"
    "  -q, --quiet  the figures only\n"
    "  -h, --help   this help\n"
    "  --version    print \"te-offload-bench (libte) VERSION\"\n"
    "  on vdev no targets are judged: its figures are not GPU speed\n"
    "exit status: 0 ok, 1 a part failed (a --dir it cannot write, a library call),\n"
    "  2 a wrong command line\n";

int main(int argc, char **argv) {
  size_t mb = 0, tokens = 0, hidden = 0;
  int iters = 0, layers = 0;
  long long v;
  const char *dir = getenv("TMPDIR");
  const char *skip = "";
  static const struct option longs[] = {
      {"mb", required_argument, 0, 'm'},     {"dir", required_argument, 0, 'd'},
      {"iters", required_argument, 0, 'i'},  {"tokens", required_argument, 0, 't'},
      {"hidden", required_argument, 0, 'H'}, {"layers", required_argument, 0, 'l'},
      {"skip", required_argument, 0, 's'},   TE_CLI_FORMATS,
      TE_CLI_LONGS,                          {0, 0, 0, 0}};
  struct te_cli cli = {.prog = "te-offload-bench", .usage = usage_text, .shorts = "qh",
                       .longs = longs, .out = &OUT};
  int opt;
  while ((opt = te_cli_next(&cli, argc, argv)) != -1) {
    switch (opt) {
    case TE_CLI_EXIT: return cli.status;
    case 'm':
      if (te_cli_long(&cli, "--mb", optarg, 1, 1 << 20, 0, &v)) return cli.status;
      mb = (size_t)v;
      break;
    case 'd': dir = optarg; break;
    case 'i':
      if (te_cli_int(&cli, "--iters", optarg, 1, 1000000, &iters)) return cli.status;
      break;
    case 't':
      if (te_cli_long(&cli, "--tokens", optarg, 1, 1 << 24, 0, &v)) return cli.status;
      tokens = (size_t)v;
      break;
    case 'H':
      if (te_cli_long(&cli, "--hidden", optarg, 1, 1 << 20, 0, &v)) return cli.status;
      hidden = (size_t)v;
      break;
    case 'l':
      if (te_cli_int(&cli, "--layers", optarg, 1, 4096, &layers)) return cli.status;
      break;
    case 's': {
      /* each word must be one of the parts: a typo is not a silent no-op */
      char buf[256], *save = NULL;
      snprintf(buf, sizeof buf, "%s", optarg);
      for (char *w = strtok_r(buf, ",", &save); w; w = strtok_r(NULL, ",", &save))
        if (strcmp(w, "pool") && strcmp(w, "spill") && strcmp(w, "step") && strcmp(w, "engine"))
          return te_cli_error(&cli, "--skip: '%s' is not pool, spill, step or engine", w);
      skip = optarg;
      break;
    }
    }
  }
  if (te_cli_end(&cli, argc, argv)) return cli.status;
  if (!dir || !*dir) dir = "/tmp";
  CK(tecore_init());
  tecore_ctx_t ctx;
  CK(tecore_ctx_create(0, &ctx));
  tecore_backend_t be;
  CK(tecore_backend(&be));
  struct tecore_device_props props;
  CK(tecore_device_get_props(0, &props));
  int gpu = be == TECORE_BACKEND_CUDA;
  judge = gpu;
  mb = mb ? mb : gpu ? 256 : 8;
  iters = iters > 0 ? iters : gpu ? 10 : 3;
  tokens = tokens ? tokens : gpu ? 8192 : 64;
  hidden = hidden ? hidden : gpu ? 4096 : 64;
  layers = layers > 0 ? layers : gpu ? 8 : 5;
  CK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &S));
  CK(tecore_event_create(TECORE_EVENT_DEFAULT, &E0));
  CK(tecore_event_create(TECORE_EVENT_DEFAULT, &E1));
  te_out_begin(&OUT);
  te_out_field_s(&OUT, "backend", tecore_backend_name(be));
  te_out_field_s(&OUT, "gpu", props.name);
  te_out_field_n(&OUT, "iters", iters);
  te_out_field_b(&OUT, "speed", gpu);
  te_out_note(&OUT, "te-offload-bench: backend %s, device %s, %d iterations", tecore_backend_name(be),
              props.name, iters);
  if (!gpu) te_out_note(&OUT, "vdev: figures of the virtual device (CPU threads), not GPU speed; no targets");
  te_out_table(&OUT, "rows", cols, NCOLS);
  if (!strstr(skip, "pool")) {
    te_out_progress(&OUT, "pool ...");
    bench_pool(mb << 20, iters);
  }
  int failed = 0;   /* a part that could not run fails the whole (exit 1) */
  if (!strstr(skip, "spill")) {
    te_out_progress(&OUT, "spill ...");
    if (bench_spill(dir, mb << 20, iters)) failed = 1;
  }
  if (!strstr(skip, "step")) {
    te_out_progress(&OUT, "step ...");
    bench_step(tokens, hidden, layers, iters);
  }
  if (!strstr(skip, "engine")) {
    te_out_progress(&OUT, "engine ...");
    bench_engine(gpu ? 10000 : 200);
  }
  te_out_end(&OUT);
  CK(tecore_event_destroy(E0));
  CK(tecore_event_destroy(E1));
  CK(tecore_stream_destroy(S));
  CK(tecore_ctx_destroy(ctx));
  return failed ? TE_EXIT_FAIL : TE_EXIT_OK;
}
