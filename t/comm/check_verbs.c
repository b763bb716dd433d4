/* check_verbs.c -- libtecomm's verbs path outside the test VM: ranks
 * as forked processes (t/lib/comm_ranks.h) on one host, with "soft", the
 * loopback RDMA device (TECOMM_VERBS_LIB=soft, libtecomm/verbs/verbs_soft.c),
 * and TECOMM_NODE_MAP making them ranks of several nodes.
 * SPDX-License-Identifier: Apache-2.0
 *
 *   - hierarchical allreduce (2 nodes x 2 ranks; 3 nodes of 2, 1 and 2
 *     ranks): F32, BF16, F16 x SUM, MAX, 1 element to 70000 (several
 *     chunks, the leaders' ring and recursive doubling), eager and
 *     replayed from a graph, into poisoned outputs, against a float64
 *     reference (tolerance below), the same bits on every rank;
 *   - flat verbs (one rank a node; 2 ranks: what two GPUs run), the same
 *     checks;
 *   - every test forces the verbs path (set_common_env) and proves on
 *     every rank that it is the one that runs (verbs_comm);
 *   - the device's inline size is what the device granted (soft: 400 B,
 *     asked 1 KiB and refused, as rxe does), not a constant;
 *   - the service engine polls the completion queue: another engine job
 *     completes while a verbs allreduce waits for a late peer;
 *   - an injected error completion (TECOMM_VERBS_FAULT=wc:N:R): every rank
 *     of both nodes gets a clear error naming a rank within the bound,
 *     nothing hangs, destroy returns, and no file descriptor is left open
 *     (nor memory, under ASan: LeakSanitizer checks the rank);
 *   - TECOMM_ALGO=verbs runs hierarchical calls (the node groups keep
 *     their own table) and the caller's communicator still refuses IPC;
 *   - describe says hierarchical or flat and how GPUDirect stands;
 *     tecomm_gpudirect says it for every device (never yes on vdev).
 * Skipped when libtecomm was built without verbs. */
#include "comm_ranks.h"
#include <dirent.h>
#include <te/graph.h>
#include <te/svc.h>

/* A libtegraph call that must succeed on this rank. */
#define RK_GRAPH(call)                                                         \
  do {                                                                         \
    tegraph_result_t rk_g_ = (call);                                           \
    RK_ASSERT(rk_g_ == TEGRAPH_SUCCESS, "%s returned %d: %s", #call, (int)rk_g_, \
              tecore_last_error());                                            \
  } while (0)

static double half_ulp(tecore_dtype_t dt) {
  return dt == TECORE_DTYPE_F32 ? 0x1p-24 : dt == TECORE_DTYPE_BF16 ? 0x1p-8 : 0x1p-11;
}

/* SUM tolerance against the float64 sum, mag the sum of magnitudes (a
 * bound on every partial sum): the node's IPC reduction folds in float
 * (n - 1 f32 roundings) and rounds once to dt; each of the leaders' steps
 * (at most nnodes: ring reduce-scatter or recursive doubling) rounds a
 * partial to dt; the broadcast adds exact zeros. */
static double sum_tol(int n, int nnodes, tecore_dtype_t dt, double mag) {
  return (n - 1) * 0x1p-24 * mag + (nnodes + 1) * half_ulp(dt) * mag * 1.0001;
}

struct vcase {
  const char *map;        /* TECOMM_NODE_MAP */
  int nnodes;
  const char *kind;       /* what describe must say: "hierarchical" or "flat" */
};

/* The verbs path, forced.  Verbs is the last link of the chain (MNNVL ->
 * NCCL -> verbs across nodes): on a cuda host with libnccl.so.2 the ranks
 * of TECOMM_NODE_MAP's "nodes" stand at the NCCL level, verbs never
 * opens, and an allreduce runs NCCL (where an injected verbs fault is
 * never reached: the 2026-11-22 2x H200 run), so the links ahead of it go
 * off, and TECOMM_ALGO=verbs makes every call run verbs or fail.
 * verbs_comm then proves it on every rank (the level, the choice). */
static void set_common_env(const char *map) {
  setenv("TECOMM_VERBS_LIB", "soft", 1);
  setenv("TECOMM_NODE_MAP", map, 1);
  setenv("TECOMM_VERBS_CHUNK_KB", "64", 1);   /* 70000 F32 elements: several chunks */
  setenv("TECOMM_POOL_MB", "16", 1);
  setenv("TECOMM_NCCL", "0", 1);
  setenv("TECOMM_MNNVL_ENABLE", "0", 1);
  setenv("TECOMM_ALGO", "verbs", 1);
}

/* The rank's communicator, asserted to stand at the verbs level and to
 * run verbs for count F32 elements (what tecomm_allreduce would run). */
static tecomm_comm_t verbs_comm(int rank, int n, size_t count) {
  tecomm_comm_t c = tc_rank_comm(rank, n);
  char d[4096];
  RK_OK(tecomm_comm_describe(c, count * 4, d, sizeof d));
  RK_ASSERT(strstr(d, "level: verbs"), "the communicator is not at the verbs level:\n%s", d);
  tecomm_algo_t a = TECOMM_ALGO_AUTO;
  RK_OK(tecomm_comm_choose(c, count, TECORE_DTYPE_F32, 0, &a));
  RK_ASSERT(a == TECOMM_ALGO_VERBS, "%zu F32 elements would run %s, not verbs:\n%s", count,
            tecomm_algo_name(a), d);
  return c;
}

/* One allreduce of count elements into a poisoned recv, checked on this
 * rank against every rank's input; graph: captured once and replayed. */
static void one_case(tecomm_comm_t c, int rank, int n, int nnodes, size_t count,
                     tecore_dtype_t dt, tecomm_op_t op, int graph, uint64_t salt,
                     tecore_stream_t st) {
  size_t es = tecore_dtype_size(dt), bytes = count * es;
  void *in = malloc(bytes), *peer = malloc(bytes), *out = malloc(bytes);
  double *ref = malloc(count * sizeof *ref), *mag = calloc(count, sizeof *mag);
  RK_ASSERT(in && peer && out && ref && mag, "out of host memory");
  tc_make_input(in, count, dt, rank, salt);
  for (size_t i = 0; i < count; i++) ref[i] = op == TECOMM_SUM ? 0.0 : -INFINITY;
  for (int r = 0; r < n; r++) {
    tc_make_input(peer, count, dt, r, salt);
    for (size_t i = 0; i < count; i++) {
      double v = tc_from_dt(peer, i, dt);
      ref[i] = op == TECOMM_SUM ? ref[i] + v : fmax(ref[i], v);
      mag[i] += fabs(v);
    }
  }
  tecore_devptr_t send = 0, recv = 0;
  RK_CORE(tecore_mem_alloc(bytes, &send));
  RK_CORE(tecore_mem_alloc(bytes, &recv));
  RK_CORE(tecore_memcpy(send, (tecore_devptr_t)(uintptr_t)in, bytes));
  RK_CORE(tecore_memset_d8_async(recv, 0xff, bytes, st));   /* NaN in every format */
  if (graph) {
    tegraph_graph_t *g = NULL;
    RK_GRAPH(tegraph_graph_create(0, &g));
    RK_GRAPH(tegraph_graph_begin_capture(g, st, TECORE_CAPTURE_GLOBAL, 0));
    RK_OK(tecomm_allreduce(c, send, recv, count, dt, op, st));
    RK_GRAPH(tegraph_graph_end_capture(g, NULL));
    RK_GRAPH(tegraph_graph_launch(g, st));
    RK_CORE(tecore_svc_kick());
    RK_CORE(tecore_stream_synchronize(st));
    RK_GRAPH(tegraph_graph_destroy(g));
  } else {
    RK_OK(tecomm_allreduce(c, send, recv, count, dt, op, st));
    RK_CORE(tecore_stream_synchronize(st));
  }
  RK_OK(tecomm_comm_status(c, NULL));
  RK_CORE(tecore_memcpy((tecore_devptr_t)(uintptr_t)out, recv, bytes));
  for (size_t i = 0; i < count; i++) {
    double got = tc_from_dt(out, i, dt);
    double tol = op == TECOMM_SUM ? sum_tol(n, nnodes, dt, mag[i]) : 0.0;
    RK_ASSERT(fabs(got - ref[i]) <= tol,
              "%s %s, %zu elements%s: element %zu is %.9g, expected %.9g (tolerance %.3g)",
              tecore_dtype_name(dt), op == TECOMM_SUM ? "sum" : "max", count,
              graph ? " (graph)" : "", i, got, ref[i], tol);
  }
  tc_rank_digest(out, bytes);
  RK_CORE(tecore_mem_free(send));
  RK_CORE(tecore_mem_free(recv));
  free(in), free(peer), free(out), free(ref), free(mag);
}

static void rank_allreduce(int rank, int n, void *arg) {
  const struct vcase *vc = arg;
  set_common_env(vc->map);
  tecomm_comm_t c = verbs_comm(rank, n, 70000);
  char d[4096];
  RK_OK(tecomm_comm_describe(c, 0, d, sizeof d));
  RK_ASSERT(strstr(d, vc->kind), "describe:\n%s", d);
  RK_ASSERT(strstr(d, "gpudirect: "), "describe says nothing of GPUDirect:\n%s", d);
  /* the inline size is the device's: soft refuses 1 KiB and 512 B, takes
   * 256 B and grants its 400 (only ranks with an endpoint say it) */
  RK_ASSERT(!strstr(d, " B inline") || strstr(d, "400 B inline"), "inline size:\n%s", d);
  if (rank == 0) {
    printf("# %s\n", vc->map);
    for (char *l = strtok(d, "\n"); l; l = strtok(NULL, "\n")) printf("#   %s\n", l);
    fflush(stdout);   /* the rank leaves by _exit */
  }
  tecore_stream_t st = NULL;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &st));
  static const size_t counts[] = {1, 7, 1000, 70000};
  static const tecore_dtype_t dts[] = {TECORE_DTYPE_F32, TECORE_DTYPE_BF16, TECORE_DTYPE_F16};
  uint64_t salt = 1;
  for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++)
    for (size_t di = 0; di < 3; di++)
      for (int op = 0; op < 2; op++)
        one_case(c, rank, n, vc->nnodes, counts[ci], dts[di], op ? TECOMM_MAX : TECOMM_SUM, 0,
                 salt++, st);
  one_case(c, rank, n, vc->nnodes, 3000, TECORE_DTYPE_F32, TECOMM_SUM, 1, salt++, st);
  RK_CORE(tecore_stream_destroy(st));
  RK_OK(tecomm_comm_destroy(c));
}

static int have_verbs(void) {
  setenv("TECOMM_VERBS_LIB", "soft", 1);
  int n = 0;
  char names[2][64];
  if (tecomm_verbs_devices(&n, names, 2) != TECOMM_SUCCESS) {
    printf("# no verbs in this build: %s\n", tecomm_last_error());
    return 0;
  }
  return 1;
}

static const struct vcase cases[] = {
    {"0,0,1,1", 2, "verbs: hierarchical over 2 nodes"},
    {"0,0,1,2,2", 3, "verbs: hierarchical over 3 nodes"},
    {"0,1,2", 3, "verbs: flat over 3 ranks"},
    {"0,1", 2, "verbs: flat over 2 ranks"},   /* the case two GPUs run */
};

START_TEST(hier_allreduce_matches_float64) {
  if (!have_verbs()) return;
  const struct vcase *vc = &cases[_i];
  int n = 1;
  for (const char *p = vc->map; *p; p++) n += *p == ',';
  tc_run_ranks(n, rank_allreduce, (void *)vc, 100);
  tc_expect_same_digest(n, vc->map);
  tc_shm_release();
}
END_TEST

/* ---- TECOMM_ALGO=verbs and the node groups --------------------------------------- */

/* TECOMM_ALGO=verbs once reached the node groups of a hierarchical
 * communicator too, which stand at the pool level: every hierarchical
 * call failed with "algorithm verbs: level pool".  The variable is the
 * caller's: the hierarchical allreduce runs (checked against float64),
 * and the caller's communicator still refuses an IPC algorithm by name. */
static void rank_algo_env(int rank, int n, void *arg) {
  (void)arg;
  set_common_env("0,0,1,1");
  tecomm_comm_t c = verbs_comm(rank, n, 1000);
  tecore_stream_t st = NULL;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &st));
  one_case(c, rank, n, 2, 1000, TECORE_DTYPE_F32, TECOMM_SUM, 0, 7, st);
  tecore_devptr_t buf = 0;
  RK_CORE(tecore_mem_alloc(4096, &buf));
  RK_EXPECT(TECOMM_ERR_NOT_SUPPORTED, "level verbs",
            tecomm_allreduce_algo(c, buf, buf, 1024, TECORE_DTYPE_F32, TECOMM_SUM,
                                  TECOMM_ALGO_ONESHOT, st));
  RK_OK(tecomm_comm_status(c, NULL));   /* a refused call fails nothing */
  RK_CORE(tecore_mem_free(buf));
  RK_CORE(tecore_stream_destroy(st));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(algo_verbs_env_runs_hierarchical_calls) {
  if (!have_verbs()) return;
  tc_run_ranks(4, rank_algo_env, NULL, 60);
  tc_expect_same_digest(4, "TECOMM_ALGO=verbs, 0,0,1,1");
  tc_shm_release();
}
END_TEST

/* ---- the engine polls: its other jobs run while verbs waits -------------------- */

static tecore_result_t bump(void *arg) {
  __atomic_add_fetch((int *)arg, 1, __ATOMIC_SEQ_CST);
  return TECORE_SUCCESS;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void rank_engine(int rank, int n, void *arg) {
  (void)arg;
  set_common_env("0,1");
  /* the host agreement (TECOMM_HOST_AGREE) would hold rank 0 in the call
   * itself until its late peer comes; this test is about the engine */
  setenv("TECOMM_HOST_AGREE", "0", 1);
  size_t count = 4096;
  tecomm_comm_t c = verbs_comm(rank, n, count);
  tecore_devptr_t buf = 0;
  RK_CORE(tecore_mem_alloc(count * 4, &buf));
  RK_CORE(tecore_memset_d32_async(buf, 0x3f800000u, count, NULL));   /* 1.0f */
  RK_CORE(tecore_stream_synchronize(NULL));
  tecore_stream_t sv = NULL, so = NULL;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &sv));
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &so));
  int bumps = 0;
  struct tecore_svc_op op = {.kind = TECORE_SVC_CALL, .fn = bump, .arg = &bumps,
                             .name = "another engine job", .buf_index = -1};
  tecore_svc_job_t *job = NULL;
  RK_CORE(tecore_svc_job_create(&op, 1, &job));
  /* one eager call first, so that staging and the verbs job exist */
  RK_OK(tecomm_allreduce(c, buf, buf, count, TECORE_DTYPE_F32, TECOMM_SUM, sv));
  RK_CORE(tecore_stream_synchronize(sv));
  RK_OK(tc_shm_barrier(tc_shm) == 0 ? TECOMM_SUCCESS : TECOMM_ERR_BOOTSTRAP);
  double t0 = now_s();
  if (rank == 1) {
    usleep(1500 * 1000);   /* the peer is late: rank 0's transfer waits for it */
  } else {
    RK_OK(tecomm_allreduce(c, buf, buf, count, TECORE_DTYPE_F32, TECOMM_SUM, sv));
    usleep(100 * 1000);    /* the engine has the verbs job in hand now */
    for (int k = 0; k < 3; k++) {
      RK_CORE(tecore_svc_job_enqueue(job, so));
      RK_CORE(tecore_svc_kick());
      RK_CORE(tecore_stream_synchronize(so));
    }
    double t_other = now_s() - t0;
    RK_ASSERT(bumps == 3, "the other job ran %d times, not 3", bumps);
    RK_ASSERT(t_other < 1.0, "the other job took until %.2f s: the verbs job held the engine",
              t_other);
  }
  if (rank == 1) RK_OK(tecomm_allreduce(c, buf, buf, count, TECORE_DTYPE_F32, TECOMM_SUM, sv));
  RK_CORE(tecore_stream_synchronize(sv));
  double t_verbs = now_s() - t0;
  if (rank == 0)
    RK_ASSERT(t_verbs > 1.3, "the verbs allreduce ended at %.2f s, before its peer joined", t_verbs);
  float h[4];
  RK_CORE(tecore_memcpy((tecore_devptr_t)(uintptr_t)h, buf, sizeof h));
  RK_ASSERT(h[0] == 4.0f && h[3] == 4.0f, "two allreduces of 1.0 on 2 ranks gave %g, not 4", h[0]);
  RK_OK(tecomm_comm_status(c, NULL));
  RK_CORE(tecore_svc_job_destroy(job));
  RK_CORE(tecore_stream_destroy(so));
  RK_CORE(tecore_stream_destroy(sv));
  RK_CORE(tecore_mem_free(buf));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(engine_job_runs_while_verbs_waits) {
  if (!have_verbs()) return;
  tc_run_ranks(2, rank_engine, NULL, 60);
  tc_shm_release();
}
END_TEST

/* ---- an injected error completion ------------------------------------------------ */

/* LeakSanitizer's check, in a sanitizer build (ranks leave by _exit,
 * which skips the one at exit): nonzero when memory leaked. */
extern int __lsan_do_recoverable_leak_check(void) __attribute__((weak));

/* The descriptors open now; with out, their targets ("fd:target ...", the
 * directory's own among them), so that a failure names what stayed open. */
static int open_fds_list(char *out, size_t len) {
  int k = 0;
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  if (out && len) out[0] = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    k++;
    if (!out) continue;
    char path[300], target[256];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t t = readlink(path, target, sizeof target - 1);
    target[t > 0 ? t : 0] = 0;
    size_t used = strlen(out);
    snprintf(out + used, len - used, "%s:%s ", e->d_name, target);
  }
  closedir(d);
  return k - 1;   /* the directory's own */
}

/* The entries of after ("fd:target " each) that before lacks, into out. */
static void fds_new(const char *before, const char *after, char *out, size_t len) {
  out[0] = 0;
  for (const char *p = after; *p;) {
    const char *e = strchr(p, ' ');
    size_t n = e ? (size_t)(e - p) + 1 : strlen(p);
    char one[300];
    snprintf(one, sizeof one, "%.*s", (int)n, p);
    if (!strstr(before, one)) {
      size_t used = strlen(out);
      snprintf(out + used, len - used, "%s", one);
    }
    p += n;
  }
}

static tecore_result_t nothing(void *arg) {
  (void)arg;
  return TECORE_SUCCESS;
}

/* What the verbs path makes the device and the engine do once, each kind
 * of thing once: a stream, device and page-locked host memory, a copy
 * between them, an engine job on the stream. */
static void warm_device(void) {
  tecore_stream_t s = NULL;
  tecore_devptr_t d = 0;
  void *h = NULL;
  tecore_svc_job_t *job = NULL;
  struct tecore_svc_op op = {.kind = TECORE_SVC_CALL, .fn = nothing, .name = "warm-up",
                             .buf_index = -1};
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  RK_CORE(tecore_mem_alloc(4096, &d));
  RK_CORE(tecore_mem_alloc_host(4096, &h));
  RK_CORE(tecore_memset_d8_async(d, 0, 4096, s));
  RK_CORE(tecore_memcpy_async((tecore_devptr_t)(uintptr_t)h, d, 4096, s));
  RK_CORE(tecore_svc_job_create(&op, 1, &job));
  RK_CORE(tecore_svc_job_enqueue(job, s));
  RK_CORE(tecore_svc_kick());
  RK_CORE(tecore_stream_synchronize(s));
  RK_CORE(tecore_svc_job_destroy(job));
  RK_CORE(tecore_mem_free_host(h));
  RK_CORE(tecore_mem_free(d));
  RK_CORE(tecore_stream_destroy(s));
}

static void rank_fault(int rank, int n, void *arg) {
  const char *map = arg;
  set_common_env(map);
  setenv("TECOMM_VERBS_FAULT", "wc:9:0", 1);   /* rank 0's 9th completion: in its first calls */
  setenv("TECOMM_TIMEOUT", "3000", 1);
  /* the library's and the driver's own descriptors (the engine's eventfd,
   * the device's, those a cuda context and its first allocations open and
   * keep) open first, so that the count after destroy compares like with
   * like; the rank holds its device's context, so that it outlives the
   * communicator's hold on it (on cuda the communicator's is the primary
   * context, gone at destroy when nothing else holds it, and buf with it) */
  RK_CORE(tecore_init());
  tecore_ctx_t own = NULL;
  RK_CORE(tecore_ctx_create(rank, &own));
  warm_device();
  /* and one communicator of the same kind made and destroyed, with no
   * call (the injected error is the 9th completion of a communicator's
   * own endpoints): on cuda its peer probing and mappings make the driver
   * open every GPU's device file, the UVM and capability files and an
   * eventfd, which the driver keeps for the process's life (12 more on 4
   * H100s, none of them libte's); a second communicator opens them no
   * more, so the count after destroy judges what libte opened */
  RK_OK(tecomm_comm_destroy(verbs_comm(rank, n, 20000)));
  static char before[8192], after[8192];
  int fds0 = open_fds_list(before, sizeof before);
  size_t count = 20000;
  tecomm_comm_t c = verbs_comm(rank, n, count);
  tecore_devptr_t buf = 0;
  tecore_stream_t st = NULL;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &st));
  RK_CORE(tecore_mem_alloc(count * 4, &buf));
  RK_CORE(tecore_memset_d32_async(buf, 0, count, st));
  tecomm_result_t r = TECOMM_SUCCESS;
  double t0 = now_s(), t_fail = 0;
  int calls = 0;
  for (; calls < 30 && r == TECOMM_SUCCESS; calls++) {
    t0 = now_s();
    r = tecomm_allreduce(c, buf, buf, count, TECORE_DTYPE_F32, TECOMM_SUM, st);
    if (r == TECOMM_SUCCESS && tecore_stream_synchronize(st) != TECORE_SUCCESS) r = TECOMM_ERR_DEVICE;
    if (r == TECOMM_SUCCESS) r = tecomm_comm_status(c, NULL);
    if (r == TECOMM_SUCCESS) {   /* and the next call would see it: status once more */
      usleep(200 * 1000);
      r = tecomm_comm_status(c, NULL);
    }
  }
  t_fail = now_s() - t0;
  char why[900];
  snprintf(why, sizeof why, "%s", tecomm_last_error());
  int peer = -2;
  (void)tecomm_comm_status(c, &peer);
  RK_ASSERT(r != TECOMM_SUCCESS, "30 calls succeeded despite the injected error completion");
  RK_ASSERT(strstr(why, "rank "), "the error names no rank: %s", why);
  RK_ASSERT(peer >= 0 && peer < n, "tecomm_comm_status named peer %d", peer);
  if (rank == 0) RK_ASSERT(strstr(why, "injected"), "rank 0's error: %s", why);
  /* within the bound: TECOMM_TIMEOUT (3 s) for the stragglers, plus slack */
  RK_ASSERT(t_fail < 3 * 3.0 + 3.0, "the error took %.1f s (%s)", t_fail, why);
  /* sticky: the next call fails at once, with the same kind of error */
  tecomm_result_t r2 = tecomm_allreduce(c, buf, buf, count, TECORE_DTYPE_F32, TECOMM_SUM, st);
  RK_ASSERT(r2 != TECOMM_SUCCESS, "a call after the failure succeeded");
  (void)tecore_stream_synchronize(st);
  double t1 = now_s();
  (void)tecomm_comm_destroy(c);
  RK_ASSERT(now_s() - t1 < 3 * 3.0 + 3.0, "destroy took %.1f s", now_s() - t1);
  RK_CORE(tecore_mem_free(buf));
  RK_CORE(tecore_stream_destroy(st));
  int fds1 = open_fds_list(after, sizeof after);
  char extra[700];
  fds_new(before, after, extra, sizeof extra);
  RK_ASSERT(fds1 <= fds0, "%d file descriptors open after destroy, %d before the communicator; "
            "new: %s", fds1, fds0, extra);
  RK_CORE(tecore_ctx_destroy(own));
  if (__lsan_do_recoverable_leak_check)
    RK_ASSERT(__lsan_do_recoverable_leak_check() == 0, "memory leaked (LeakSanitizer's report "
              "is above)");
  snprintf(tc_shm->msg[rank], sizeof tc_shm->msg[0], "%s after %d calls, %.2f s: %s",
           tecomm_result_name(r), calls, t_fail, why);
}

START_TEST(injected_error_completion_fails_every_rank) {
  if (!have_verbs()) return;
  static const char *const maps[] = {"0,0,1,1", "0,1"};
  const char *map = maps[_i];
  int n = _i == 0 ? 4 : 2;
  tc_run_ranks(n, rank_fault, (void *)map, 90);
  for (int r = 0; r < n; r++) printf("# %s rank %d: %s\n", map, r, tc_shm->msg[r]);
  tc_shm_release();
}
END_TEST

START_TEST(tunables_listed) {
  static const char *const vars[] = {"TECOMM_NODE_MAP", "TECOMM_VERBS_HIER", "TECOMM_VERBS_FAULT",
                                     "TECOMM_VERBS_LIB"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    struct tecore_tunable_info info;
    TE_OK(tecore_tunable_find(vars[i], &info));
    ck_assert_msg(info.help && strlen(info.help) > 20, "%s has no help text", vars[i]);
  }
}
END_TEST

/* ---- GPUDirect RDMA: detected, never required -------------------------------------- */

/* Asserts a tecomm call fails with code and a detail naming what. */
#define GDR_EXPECT(code, what, call)                                           \
  do {                                                                         \
    tecore_clear_error();                                                      \
    tecomm_result_t g_r_ = (call);                                             \
    ck_assert_msg(g_r_ == (code), "%s returned %s, expected %s (%s)", #call,   \
                  tecomm_result_name(g_r_), tecomm_result_name(code),          \
                  tecomm_last_error());                                        \
    ck_assert_msg(strstr(tecomm_last_error(), (what)), "%s: detail \"%s\" lacks \"%s\"", \
                  #call, tecomm_last_error(), (what));                         \
  } while (0)

/* tecomm_gpudirect on every device: a yes or no that its line agrees with
 * (never yes on vdev), into poisoned outputs, truncated safely; bad
 * arguments refused naming them, with the outputs cleared.  Last in the
 * suite: it starts the backend in the test's process (CK_FORK=no). */
START_TEST(gpudirect_query_says_why_and_refuses_bad_args) {
  int ndev = 0;
  ck_assert_int_eq(tecore_device_count(&ndev), TECORE_SUCCESS);
  tecore_backend_t be = TECORE_BACKEND_NONE;
  ck_assert_int_eq(tecore_backend(&be), TECORE_SUCCESS);
  char why[160], small[8], again[160];
  for (int d = 0; d < ndev; d++) {
    int p = 7;
    memset(why, 'x', sizeof why);
    ck_assert_msg(tecomm_gpudirect(d, &p, why, sizeof why) == TECOMM_SUCCESS, "device %d: %s", d,
                  tecomm_last_error());
    ck_assert_msg(memchr(why, '\0', sizeof why), "device %d: why is not terminated", d);
    printf("# device %d: gpudirect %d: %s\n", d, p, why);
    ck_assert_msg(p == 0 || p == 1, "device %d: possible is %d", d, p);
    ck_assert_msg(p == (strncmp(why, "possible (", 10) == 0), "device %d: %d but \"%s\"", d, p, why);
    ck_assert_msg(strstr(why, "host staging"), "device %d: \"%s\" says nothing of staging", d, why);
    if (be != TECORE_BACKEND_CUDA)
      ck_assert_msg(p == 0 && strstr(why, "host memory"), "device %d on %s: %d, \"%s\"", d,
                    tecore_backend_name(be), p, why);
    /* truncated: the first 7 bytes, terminated */
    memset(small, 'x', sizeof small);
    int p2 = 7;
    ck_assert_int_eq(tecomm_gpudirect(d, &p2, small, sizeof small), TECOMM_SUCCESS);
    ck_assert_msg(p2 == p && strlen(small) == 7 && strncmp(small, why, 7) == 0,
                  "truncated to 8 bytes: \"%.8s\" (%d), expected \"%.7s\" (%d)", small, p2, why, p);
    /* no line wanted */
    p2 = 7;
    ck_assert_int_eq(tecomm_gpudirect(d, &p2, NULL, 0), TECOMM_SUCCESS);
    ck_assert_int_eq(p2, p);
    ck_assert_int_eq(tecomm_gpudirect(d, &p2, again, sizeof again), TECOMM_SUCCESS);
    ck_assert_str_eq(again, why);
  }
  int p = 7;
  GDR_EXPECT(TECOMM_ERR_INVALID, "possible", tecomm_gpudirect(0, NULL, why, sizeof why));
  GDR_EXPECT(TECOMM_ERR_INVALID, "why", tecomm_gpudirect(0, &p, NULL, 5));
  ck_assert_int_eq(p, 0);
  char num[48];
  snprintf(num, sizeof num, "device %d", ndev);
  p = 7;
  memset(why, 'x', sizeof why);
  GDR_EXPECT(TECOMM_ERR_INVALID, num, tecomm_gpudirect(ndev, &p, why, sizeof why));
  ck_assert_msg(p == 0 && why[0] == '\0', "a refused call left %d, \"%.20s\"", p, why);
  GDR_EXPECT(TECOMM_ERR_INVALID, "device -1", tecomm_gpudirect(-1, &p, why, sizeof why));
}
END_TEST

static Suite *verbs_suite(void) {
  setenv("TECORE_VDEV_DEVICES", "8", 0);
  Suite *s = suite_create("comm_verbs");
  TCase *tc = te_tcase(s, "allreduce", 0);
  tcase_add_loop_test(tc, hier_allreduce_matches_float64, 0,
                      (int)(sizeof cases / sizeof cases[0]));
  tcase_add_test(tc, algo_verbs_env_runs_hierarchical_calls);
  tc = te_tcase(s, "engine", 0);
  tcase_add_test(tc, engine_job_runs_while_verbs_waits);
  tc = te_tcase(s, "faults", 0);
  tcase_add_loop_test(tc, injected_error_completion_fails_every_rank, 0, 2);
  tcase_add_test(tc, tunables_listed);
  tc = te_tcase(s, "gpudirect", 0);
  tcase_add_test(tc, gpudirect_query_says_why_and_refuses_bad_args);
  return s;
}

TE_TEST_MAIN(verbs_suite, TE_TEST_DEVICE)
