/* vm_allreduce.c -- one rank of the test VM's inter-node allreduce tests
 * (t/vm/guest-tests.sh starts one process per rank in each guest; they
 * meet through the TCP bootstrap, TECOMM_RANK / TECOMM_NRANKS /
 * TECOMM_ROOT, and run on vdev).
 * SPDX-License-Identifier: Apache-2.0
 *
 *   vm_allreduce check SEED     the communicator stands at the verbs level,
 *       hierarchical (or flat with TECOMM_VERBS_HIER=0);
 *       allreduce (auto and TECOMM_ALGO_VERBS, eager and captured in a
 *       graph) of fresh random inputs (every rank derives every rank's
 *       inputs from SEED) in F32/BF16/F16, SUM and MAX, sizes on both sides
 *       of the recursive-doubling / ring edge, into poisoned outputs, each
 *       element within its tolerance of a float64 reference
 *   vm_allreduce nomr           TECOMM_VERBS_FAULT made a rank's memory
 *       registration fail: init still succeeds, on every rank at the same
 *       level (not verbs), and an explicit verbs call says why
 *   vm_allreduce exit VICTIM    one call, then rank VICTIM exits; the others'
 *       next calls fail within the bound with an error naming a rank
 *   vm_allreduce cut            calls in a loop while the guest script takes
 *       a NIC down: every rank stops with an error within the bound
 *   vm_allreduce wcfault        TECOMM_VERBS_FAULT=wc:N:0 makes a work
 *       completion of rank 0 (node 0's leader) an error: every rank of both
 *       nodes stops with an error within the bound, rank 0's saying so
 * Prints "TE-VM-TEST <name> rank=R PASS" or "... FAIL: why"; exit 0 / 1. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <te/comm.h>
#include <te/core.h>
#include <te/graph.h>
#include "common/convert.h"

static int g_rank = -1;
static const char *g_test = "?";
static uint64_t g_digest = 0xcbf29ce484222325ull;   /* FNV-1a of every result */

static void verdict(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void verdict(int ok, const char *fmt, ...) {
  char why[600] = "";
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  printf("TE-VM-TEST %s rank=%d %s%s%s\n", g_test, g_rank, ok ? "PASS" : "FAIL", *why ? ": " : "",
         why);
  fflush(stdout);
  exit(ok ? 0 : 1);
}

#define CK(call)                                                                              \
  do {                                                                                        \
    int r_ = (int)(call);                                                                     \
    if (r_ != 0) verdict(0, "%s:%d: %s: %d (%s)", __FILE__, __LINE__, #call, r_,              \
                         tecore_last_error());                                                \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* splitmix64: rank r's element i of case k under seed s */
static double input(uint64_t s, int k, int r, size_t i) {
  uint64_t z = s + 0x9e3779b97f4a7c15ull * ((uint64_t)k * 1000003u + (uint64_t)r * 7919u + i + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0;   /* [-1, 1) */
}

static void put(void *p, size_t i, tecore_dtype_t dt, double v) {
  if (dt == TECORE_DTYPE_F32) ((float *)p)[i] = (float)v;
  else ((uint16_t *)p)[i] = dt == TECORE_DTYPE_BF16 ? te_f32_to_bf16((float)v) : te_f32_to_f16((float)v);
}
static double get(const void *p, size_t i, tecore_dtype_t dt) {
  if (dt == TECORE_DTYPE_F32) return ((const float *)p)[i];
  uint16_t h = ((const uint16_t *)p)[i];
  return dt == TECORE_DTYPE_BF16 ? te_bf16_to_f32(h) : te_f16_to_f32(h);
}
/* the value rank r contributes: its input rounded to dt, as the device holds it */
static double held(uint64_t s, int k, int r, size_t i, tecore_dtype_t dt) {
  uint32_t buf[1];
  put(buf, 0, dt, input(s, k, r, i));
  return get(buf, 0, dt);
}

static tecomm_comm_t open_comm(void) {
  tecomm_comm_t c = NULL;
  CK(tecomm_comm_init(-1, -1, -1, NULL, &c));
  int n = 0;
  CK(tecomm_comm_rank(c, &g_rank, &n, NULL));
  return c;
}

/* One allreduce case; returns the number of elements out of tolerance. */
static size_t one_case(tecomm_comm_t c, int nranks, uint64_t seed, int k, size_t count,
                       tecore_dtype_t dt, tecomm_op_t op, tecomm_algo_t algo, int graph,
                       tecore_stream_t st) {
  size_t es = tecore_dtype_size(dt), bytes = count * es;
  void *h = malloc(bytes), *o = malloc(bytes);
  tecore_devptr_t send = 0, recv = 0;
  CK(tecore_mem_alloc(bytes, &send));
  CK(tecore_mem_alloc(bytes, &recv));
  for (size_t i = 0; i < count; i++) put(h, i, dt, input(seed, k, g_rank, i));
  CK(tecore_memcpy(send, (tecore_devptr_t)(uintptr_t)h, bytes));
  /* poison (NaN in every format), on the call's stream: a non-blocking
   * stream does not wait for the legacy one */
  CK(tecore_memset_d8_async(recv, 0xff, bytes, st));
  if (graph) {
    tegraph_graph_t *g = NULL;
    CK(tegraph_graph_create(0, &g));
    CK(tegraph_graph_begin_capture(g, st, TECORE_CAPTURE_GLOBAL, 0));
    CK(tecomm_allreduce_algo(c, send, recv, count, dt, op, algo, st));
    CK(tegraph_graph_end_capture(g, NULL));
    CK(tegraph_graph_launch(g, st));
    CK(tecore_stream_synchronize(st));
    CK(tegraph_graph_destroy(g));
  } else {
    CK(tecomm_allreduce_algo(c, send, recv, count, dt, op, algo, st));
    CK(tecore_stream_synchronize(st));
  }
  CK(tecomm_comm_status(c, NULL));
  CK(tecore_memcpy((tecore_devptr_t)(uintptr_t)o, recv, bytes));
  /* tolerance: the reduction's rounding, each step in dt (2^-23, 2^-8,
   * 2^-11 of the running magnitude), times the steps, plus slack */
  double ulp = dt == TECORE_DTYPE_F32 ? 1.2e-7 : dt == TECORE_DTYPE_BF16 ? 7.9e-3 : 9.8e-4;
  size_t bad = 0;
  for (size_t i = 0; i < count; i++) {
    double ref = op == TECOMM_SUM ? 0.0 : -INFINITY, mag = 0.0;
    for (int r = 0; r < nranks; r++) {
      double v = held(seed, k, r, i, dt);
      ref = op == TECOMM_SUM ? ref + v : (v > ref ? v : ref);
      mag += fabs(v);
    }
    double tol = op == TECOMM_SUM ? 2.0 * nranks * ulp * mag : 0.0;
    double got = get(o, i, dt);
    if (!(fabs(got - ref) <= tol)) {
      if (bad < 3)
        fprintf(stderr, "rank %d case %d: element %zu: %.9g, expected %.9g (tolerance %.3g)\n",
                g_rank, k, i, got, ref, tol);
      bad++;
    }
  }
  for (size_t i = 0; i < bytes; i++)   /* every rank must end with the same bits */
    g_digest = (g_digest ^ ((const unsigned char *)o)[i]) * 0x100000001b3ull;
  CK(tecore_mem_free(send));
  CK(tecore_mem_free(recv));
  free(h);
  free(o);
  return bad;
}

static void test_check(uint64_t seed) {
  tecomm_comm_t c = open_comm();
  int n = 0;
  CK(tecomm_comm_rank(c, NULL, &n, NULL));
  char d[2048];
  CK(tecomm_comm_describe(c, 0, d, sizeof d));
  if (!strstr(d, "level: verbs")) verdict(0, "not at the verbs level:\n%s", d);
  /* two ranks on each guest: the hierarchical path (unless asked flat) */
  const char *kind = getenv("TECOMM_VERBS_HIER") && atoi(getenv("TECOMM_VERBS_HIER")) == 0
                         ? "verbs: flat over 4 ranks" : "verbs: hierarchical over 2 nodes";
  if (!strstr(d, kind)) verdict(0, "describe lacks \"%s\":\n%s", kind, d);
  if (g_rank == 0) printf("# seed %llu\n%s", (unsigned long long)seed, d);
  tecore_stream_t st = NULL;
  CK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &st));
  /* 70000 F32 elements (273 KiB): the ring, over several 64 KiB chunks */
  static const size_t counts[] = {1, 5, 1000, 70000};
  static const tecore_dtype_t dts[] = {TECORE_DTYPE_F32, TECORE_DTYPE_BF16, TECORE_DTYPE_F16};
  int k = 0;
  size_t bad = 0;
  for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++)
    for (size_t di = 0; di < 3; di++) {
      tecomm_op_t op = (k % 3 == 2) ? TECOMM_MAX : TECOMM_SUM;
      tecomm_algo_t algo = (k % 2) ? TECOMM_ALGO_VERBS : TECOMM_ALGO_AUTO;
      size_t b = one_case(c, n, seed, k, counts[ci], dts[di], op, algo, 0, st);
      if (b) fprintf(stderr, "rank %d: %zu wrong of %zu (%s, %s)\n", g_rank, b, counts[ci],
                     tecore_dtype_name(dts[di]), op == TECOMM_SUM ? "sum" : "max");
      bad += b;
      k++;
    }
  /* captured: the same call replays from a graph */
  bad += one_case(c, n, seed, k++, 3000, TECORE_DTYPE_F32, TECOMM_SUM, TECOMM_ALGO_AUTO, 1, st);
  CK(tecore_stream_destroy(st));
  CK(tecomm_comm_destroy(c));
  verdict(bad == 0, "%zu elements out of tolerance; digest %016llx", bad,
          (unsigned long long)g_digest);
}

static void test_nomr(void) {
  tecomm_comm_t c = open_comm();
  char d[2048];
  CK(tecomm_comm_describe(c, 0, d, sizeof d));
  if (strstr(d, "level: verbs")) verdict(0, "at the verbs level despite the failed registration");
  tecore_devptr_t p = 0;
  CK(tecore_mem_alloc(64, &p));
  tecomm_result_t r = tecomm_allreduce_algo(c, p, p, 16, TECORE_DTYPE_F32, TECOMM_SUM,
                                            TECOMM_ALGO_VERBS, NULL);
  const char *why = tecore_last_error();
  int ok = r == TECOMM_ERR_NOT_SUPPORTED && strstr(why, "memory registration failed") &&
           strstr(why, "rank 2");
  CK(tecore_mem_free(p));
  CK(tecomm_comm_destroy(c));
  verdict(ok, "%s (%s)", tecomm_result_name(r), why);
}

/* Calls until one fails; returns its result and the seconds it took from
 * the first failing call's start to the error. */
static tecomm_result_t until_error(tecomm_comm_t c, size_t count, int max_calls, double *secs,
                                   char *why, size_t wl) {
  tecore_stream_t st = NULL;
  CK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &st));
  tecore_devptr_t p = 0;
  CK(tecore_mem_alloc(count * 4, &p));
  CK(tecore_memset_d8_async(p, 0, count * 4, st));
  tecomm_result_t r = TECOMM_SUCCESS;
  double t0 = now_s();
  for (int i = 0; i < max_calls && r == TECOMM_SUCCESS; i++) {
    t0 = now_s();
    r = tecomm_allreduce(c, p, p, count, TECORE_DTYPE_F32, TECOMM_SUM, st);
    if (r == TECOMM_SUCCESS && tecore_stream_synchronize(st) != TECORE_SUCCESS) r = TECOMM_ERR_DEVICE;
    if (r == TECOMM_SUCCESS) r = tecomm_comm_status(c, NULL);
  }
  *secs = now_s() - t0;
  snprintf(why, wl, "%s", tecore_last_error());
  (void)tecore_stream_synchronize(st);
  (void)tecore_mem_free(p);
  (void)tecore_stream_destroy(st);
  return r;
}

static void test_dead(int victim, int cut, int fault) {
  tecomm_comm_t c = open_comm();
  double bound = 3.0 * (double)atoi(getenv("TECOMM_TIMEOUT") ? getenv("TECOMM_TIMEOUT") : "30000") / 1000.0 + 5.0;
  char why[600];
  double secs = 0;
  if (!cut && !fault) {
    tecomm_result_t r = until_error(c, 1024, 1, &secs, why, sizeof why);
    if (r != TECOMM_SUCCESS) verdict(0, "the first call failed: %s", why);
    if (g_rank == victim) {
      printf("TE-VM-TEST %s rank=%d PASS: exits now\n", g_test, g_rank);
      fflush(stdout);
      _exit(0);   /* no destroy: a peer that dies */
    }
    sleep(1);
  }
  /* cut: 64 KiB calls until the link goes; exit: calls until the dead
   * peer is noticed */
  tecomm_result_t r = until_error(c, 16384, cut ? 100000 : fault ? 50 : 3, &secs, why, sizeof why);
  int peer = -1;
  (void)tecomm_comm_status(c, &peer);
  int named = strstr(why, "rank ") != NULL;
  /* a node's other rank is stopped by its leader: ABORTED, naming it */
  int ok = r != TECOMM_SUCCESS &&
           (r == TECOMM_ERR_TIMEOUT || r == TECOMM_ERR_SYSTEM || r == TECOMM_ERR_ABORTED) && named &&
           secs <= bound;
  if (fault && g_rank == 0) ok = ok && strstr(why, "injected") != NULL;
  /* no destroy after a failure would hang: destroy must return too */
  double t1 = now_s();
  (void)tecomm_comm_destroy(c);
  verdict(ok, "%s after %.1f s (bound %.0f s), peer %d, destroy %.1f s: %s", tecomm_result_name(r),
          secs, bound, peer, now_s() - t1, why);
}

/* The nodes in step: a communicator made and destroyed (its rendezvous
 * and destroy's barrier wait for every rank), run between tests with a
 * long TECOMM_TIMEOUT, so that a test whose failures leave one node
 * seconds behind the other (wcfault's ranks wait out their timeout)
 * does not eat into the next test's rendezvous. */
static void test_sync(void) {
  tecomm_comm_t c = open_comm();
  CK(tecomm_comm_destroy(c));
  printf("TE-VM: rank %d in step\n", g_rank);
  exit(0);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *rk = getenv("TECOMM_RANK");
  g_rank = rk ? atoi(rk) : -1;
  if (argc < 2) {
    fprintf(stderr, "usage: vm_allreduce check SEED | nomr | exit VICTIM | cut | wcfault | sync\n");
    return 2;
  }
  g_test = argv[1];
  if (strcmp(argv[1], "check") == 0 && argc > 2) test_check(strtoull(argv[2], NULL, 10));
  if (strcmp(argv[1], "nomr") == 0) test_nomr();
  if (strcmp(argv[1], "exit") == 0 && argc > 2) test_dead(atoi(argv[2]), 0, 0);
  if (strcmp(argv[1], "cut") == 0) test_dead(-1, 1, 0);
  if (strcmp(argv[1], "wcfault") == 0) test_dead(-1, 0, 1);
  if (strcmp(argv[1], "sync") == 0) test_sync();
  fprintf(stderr, "vm_allreduce: unknown test %s\n", argv[1]);
  return 2;
}
