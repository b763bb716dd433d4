/* SPDX-License-Identifier: Apache-2.0 */
/* check_comm.c -- libtecomm's communicators and symmetric memory, ranks as
 * forked processes (t/lib/comm_ranks.h):
 *   - init over caller callbacks with 2, 3, 4 and 8 ranks: ranks, devices,
 *     the same description on every rank, symmetric memory written by each
 *     rank and read by every peer through tecomm_mem_peer_ptr;
 *   - the pool's first fit with merging (a freed hole is reused, freeing
 *     everything gives the whole pool back), allocations past the pool as
 *     registered segments peers can read;
 *   - a pool that one rank cannot allocate: every rank lands on the same
 *     documented fallback (registered in-place) and says so identically;
 *   - the TCP rendezvous from the environment, and its bounded connect;
 *   - split into tensor-parallel groups (color, key; TECOMM_SPLIT_NONE);
 *   - the latency probe: eager and graph-replayed, waiting for a late
 *     rank, and timing out on a killed one;
 *   - abort, status, the NVLS line, and bad arguments with their errors. */
#include "comm_ranks.h"
#include "config.h" /* TE_HAVE_MPI */
#include <netinet/in.h>
#include <sys/socket.h>

/* A random pattern of bytes for (rank, salt): every rank can make any
 * rank's pattern. */
static void pattern(unsigned char *p, size_t n, int rank, uint64_t salt) {
  uint64_t x = te_test_seed ^ ((uint64_t)rank << 48) ^ salt;
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = te_splitmix64(&x);
    memcpy(p + i, &v, n - i < 8 ? n - i : 8);
  }
}

/* Writes this rank's pattern into ptr, then (after a barrier) reads every
 * peer's copy through tecomm_mem_peer_ptr and checks it. */
static void check_symmetric(tecomm_comm_t c, int rank, int n, tecore_devptr_t ptr, size_t bytes,
                            uint64_t salt) {
  unsigned char *mine = malloc(bytes), *got = malloc(bytes), *want = malloc(bytes);
  RK_ASSERT(mine && got && want, "malloc");
  pattern(mine, bytes, rank, salt);
  RK_CORE(tecore_memcpy(ptr, te_hptr(mine), bytes));
  RK_ASSERT(tc_shm_barrier(tc_shm) == 0, "barrier");
  for (int p = 0; p < n; p++) {
    tecore_devptr_t pp = 0;
    RK_OK(tecomm_mem_peer_ptr(c, ptr, p, &pp));
    if (p == rank) RK_ASSERT(pp == ptr, "peer_ptr of myself 0x%llx != 0x%llx",
                             (unsigned long long)pp, (unsigned long long)ptr);
    memset(got, 0xA5, bytes);
    RK_CORE(tecore_memcpy(te_hptr(got), pp, bytes));
    pattern(want, bytes, p, salt);
    for (size_t i = 0; i < bytes; i++)
      RK_ASSERT(got[i] == want[i], "rank %d's byte %zu of %zu seen from rank %d: 0x%02x, want 0x%02x",
                p, i, bytes, rank, got[i], want[i]);
  }
  RK_ASSERT(tc_shm_barrier(tc_shm) == 0, "barrier");
  free(mine);
  free(got);
  free(want);
}

static void rank_init(int rank, int n, void *arg) {
  (void)arg;
  tecomm_comm_t c = tc_rank_comm(rank, n);
  int r = -1, nr = -1, dev = -1;
  RK_OK(tecomm_comm_rank(c, &r, &nr, &dev));
  RK_ASSERT(r == rank && nr == n && dev == rank, "rank %d/%d device %d, want %d/%d device %d", r, nr,
            dev, rank, n, rank);
  char d[4096];
  RK_OK(tecomm_comm_describe(c, 4096, d, sizeof d));
  /* the whole line, as the level table generates it */
  RK_ASSERT(strstr(d, "\nchain: nvls (lamport, simple) -> ipc pool (lamport, oneshot, twoshot by "
                       "size) -> ipc registered in-place -> nccl -> verbs\n"),
            "describe: %s", d);
  tecore_backend_t be;
  RK_CORE(tecore_backend(&be));
  if (be == TECORE_BACKEND_VDEV) RK_ASSERT(strstr(d, "level: pool ("), "describe: %s", d);
  /* the IPC table names the fused two-shot in effect (TECOMM_FUSED_TWOSHOT) */
  RK_ASSERT(!strstr(d, "twoshot above") || strstr(d, "fused add + rmsnorm on twoshot: rows ("),
            "describe: %s", d);
  /* where the table gives a plain call two-shot, a fused one on 2 ranks
   * takes one-shot (the same NVLink bytes in one phase), on more two-shot */
  tecomm_algo_t plain = TECOMM_ALGO_AUTO, fused = TECOMM_ALGO_AUTO;
  const size_t big = (size_t)1 << 20;   /* 2 MiB of bf16: above every Lamport edge */
  if (tecomm_comm_choose(c, big, TECORE_DTYPE_BF16, 0, &plain) == TECOMM_SUCCESS &&
      plain == TECOMM_ALGO_TWOSHOT) {
    RK_OK(tecomm_comm_choose(c, big, TECORE_DTYPE_BF16, 1, &fused));
    RK_ASSERT(fused == (n == 2 ? TECOMM_ALGO_ONESHOT : TECOMM_ALGO_TWOSHOT),
              "%d ranks, 2 MiB fused: %s, want %s", n, tecomm_algo_name(fused),
              n == 2 ? "oneshot" : "twoshot");
    RK_ASSERT(!strstr(d, "fused add + rmsnorm (2 ranks): oneshot") == (n != 2), "describe: %s",
              d);
  }
  /* the copy-engine one-shot for sums beside a GEMM: on 2 ranks only, from
   * TECOMM_CE_MIN_KB (1024 KiB by default) */
  if (strstr(d, "twoshot above"))
    RK_ASSERT(!strstr(d, "beside another kernel (overlapped sums): ce from 1024 KiB "
                         "(TECOMM_CE_MIN_KB)") == (n != 2),
              "%d ranks, describe: %s", n, d);
  tecore_clear_error();
  tc_rank_digest(d, strlen(d));
  size_t sizes[] = {1, 1000, 65537};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    tecore_devptr_t p = 0;
    RK_OK(tecomm_mem_alloc(c, sizes[i], &p));
    RK_ASSERT(p && p % 256 == 0, "tecomm_mem_alloc gave 0x%llx", (unsigned long long)p);
    check_symmetric(c, rank, n, p, sizes[i], i);
    RK_OK(tecomm_mem_free(c, p));
  }
  RK_OK(tecomm_comm_status(c, NULL));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(init_callbacks) {
  static const int counts[] = {2, 3, 4, 8};
  int n = counts[_i];
  tc_run_ranks(n, rank_init, NULL, 60);
  tc_expect_same_digest(n, "tecomm_comm_describe");
  tc_shm_release();
}
END_TEST

/* First fit with merging: a hole is reused; freeing all gives back the
 * start; past the pool a registered segment. */
static void rank_pool(int rank, int n, void *arg) {
  (void)arg;
  setenv("TECOMM_POOL_MB", "4", 1);
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_devptr_t a, b, d, e, f, big;
  RK_OK(tecomm_mem_alloc(c, 1000, &a));
  RK_OK(tecomm_mem_alloc(c, 5000, &b));
  RK_OK(tecomm_mem_alloc(c, 300, &d));
  RK_ASSERT(b == a + 1024 && d == b + 5120, "first fit in order: a 0x%llx b 0x%llx d 0x%llx",
            (unsigned long long)a, (unsigned long long)b, (unsigned long long)d);
  RK_OK(tecomm_mem_free(c, b));
  RK_OK(tecomm_mem_alloc(c, 4000, &e)); /* fits the hole b left */
  RK_ASSERT(e == b, "the hole at 0x%llx was not reused (got 0x%llx)", (unsigned long long)b,
            (unsigned long long)e);
  RK_OK(tecomm_mem_free(c, e));
  RK_OK(tecomm_mem_free(c, a)); /* merges with the hole after it */
  RK_OK(tecomm_mem_alloc(c, 6000, &f));
  RK_ASSERT(f == a, "merged hole not reused: 0x%llx, want 0x%llx", (unsigned long long)f,
            (unsigned long long)a);
  RK_OK(tecomm_mem_free(c, f));
  RK_OK(tecomm_mem_free(c, d));
  /* everything merged: the whole pool in one piece */
  RK_OK(tecomm_mem_alloc(c, 3u << 20, &f));
  RK_ASSERT(f == a, "after freeing all, 3 MiB at 0x%llx, want 0x%llx", (unsigned long long)f,
            (unsigned long long)a);
  /* past the pool: its own segment, still symmetric */
  RK_OK(tecomm_mem_alloc(c, 64u << 20, &big));
  RK_ASSERT(big < a || big >= a + (4u << 20), "64 MiB past a 4 MiB pool came from the pool");
  check_symmetric(c, rank, n, big, 1u << 20, 7);
  RK_OK(tecomm_mem_free(c, big));
  RK_OK(tecomm_mem_free(c, f));
  RK_EXPECT(TECOMM_ERR_INVALID, "ptr", tecomm_mem_free(c, a + 8));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(pool_first_fit_merge) {
  tc_run_ranks(3, rank_pool, NULL, 60);
  tc_shm_release();
}
END_TEST

/* One rank asks for a pool larger than its device: every rank goes to
 * registered in-place and says the same. */
static void rank_pool_fail(int rank, int n, void *arg) {
  (void)arg;
  if (rank == 1) setenv("TECOMM_POOL_MB", "16777216", 1); /* 16 TiB */
  tecomm_comm_t c = tc_rank_comm(rank, n);
  char d[4096];
  RK_OK(tecomm_comm_describe(c, 1000, d, sizeof d));
  RK_ASSERT(strstr(d, "level: registered in-place (rank 1 could not allocate its pool"),
            "rank %d describe: %s", rank, d);
  tc_rank_digest(d, strlen(d));
  /* symmetric memory still works, each allocation registered */
  tecore_devptr_t p = 0;
  RK_OK(tecomm_mem_alloc(c, 4096, &p));
  check_symmetric(c, rank, n, p, 4096, 3);
  /* a plain buffer has no IPC path now: every rank sends it to NCCL
   * (vdev's NCCL on vdev) and the sum is exact (small integers in f32) */
  {
    enum { N = 1024 };
    float mine[N], got[N];
    for (int i = 0; i < N; i++) mine[i] = (float)((rank + 1) * (i % 97) - 3 * rank);
    tecore_devptr_t plain = 0;
    tecore_stream_t s;
    RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
    RK_CORE(tecore_mem_alloc(sizeof mine, &plain));
    RK_CORE(tecore_memcpy(plain, te_hptr(mine), sizeof mine));
    RK_OK(tecomm_allreduce(c, plain, plain, N, TECORE_DTYPE_F32, TECOMM_SUM, s));
    RK_CORE(tecore_stream_synchronize(s));
    memset(got, 0xA5, sizeof got);
    RK_CORE(tecore_memcpy(te_hptr(got), plain, sizeof got));
    for (int i = 0; i < N; i++) {
      float want = (float)(n * (n + 1) / 2 * (i % 97) - 3 * n * (n - 1) / 2);
      RK_ASSERT(got[i] == want, "element %d: %g, want %g", i, got[i], want);
    }
    RK_CORE(tecore_mem_free(plain));
    RK_CORE(tecore_stream_destroy(s));
  }
  RK_OK(tecomm_mem_free(c, p));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(pool_exhaustion_one_rank_same_fallback) {
  tc_run_ranks(3, rank_pool_fail, NULL, 60);
  tc_expect_same_digest(3, "tecomm_comm_describe after one rank's pool failed");
  tc_shm_release();
}
END_TEST

/* ---- TCP rendezvous ------------------------------------------------------------ */

/* A port nobody listens on right now (bound and released). */
static int free_port(void) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  ck_assert_int_ge(s, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  ck_assert_int_eq(bind(s, (struct sockaddr *)&a, sizeof a), 0);
  socklen_t l = sizeof a;
  ck_assert_int_eq(getsockname(s, (struct sockaddr *)&a, &l), 0);
  close(s);
  return ntohs(a.sin_port);
}

static int tcp_port;

static void rank_tcp(int rank, int n, void *arg) {
  (void)arg;
  char v[64];
  snprintf(v, sizeof v, "%d", rank);
  setenv("TECOMM_RANK", v, 1);
  snprintf(v, sizeof v, "%d", n);
  setenv("TECOMM_NRANKS", v, 1);
  snprintf(v, sizeof v, "127.0.0.1:%d", tcp_port);
  setenv("TECOMM_ROOT", v, 1);
  tecomm_comm_t c = NULL;
  RK_OK(tecomm_comm_init(-1, -1, rank, NULL, &c));
  int r, nr;
  RK_OK(tecomm_comm_rank(c, &r, &nr, NULL));
  RK_ASSERT(r == rank && nr == n, "TCP bootstrap: rank %d of %d, want %d of %d", r, nr, rank, n);
  tecore_devptr_t p;
  RK_OK(tecomm_mem_alloc(c, 777, &p));
  check_symmetric(c, rank, n, p, 777, 11);
  RK_OK(tecomm_mem_free(c, p));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(tcp_env_bootstrap) {
  tcp_port = free_port();
  tc_run_ranks(3, rank_tcp, NULL, 60);
  tc_shm_release();
}
END_TEST

static void rank_tcp_noroot(int rank, int n, void *arg) {
  (void)n;
  (void)arg;
  char v[64];
  setenv("TECOMM_TIMEOUT", "500", 1);
  snprintf(v, sizeof v, "127.0.0.1:%d", tcp_port);
  struct tecomm_bootstrap b = {.kind = TECOMM_BOOTSTRAP_ENV, .root = v};
  tecomm_comm_t c = NULL;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  /* rank 1 of 2 with no rank 0 anywhere */
  /* the timeout's value, as tecomm_comm_status gives it (issue 32) */
  RK_EXPECT(TECOMM_ERR_TIMEOUT, "did not listen on", tecomm_comm_init(1, 2, rank, &b, &c));
  RK_ASSERT(strstr(tecomm_last_error(), "within TECOMM_TIMEOUT (500 ms)"), "%s",
            tecomm_last_error());
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  RK_ASSERT(s < 1.5, "the connect gave up after %.2f s (TECOMM_TIMEOUT 0.5 s)", s);
  RK_ASSERT(c == NULL, "a failed init left a communicator");
}

START_TEST(tcp_connect_bounded) {
  tcp_port = free_port();
  tc_run_ranks(1, rank_tcp_noroot, NULL, 30);
  tc_shm_release();
}
END_TEST

/* ---- split ------------------------------------------------------------------------- */

/* 5 ranks: {0,1} and {2,3} in reverse key order; rank 4 takes no part. */
static void rank_split(int rank, int n, void *arg) {
  (void)arg;
  tecomm_comm_t c = tc_rank_comm(rank, n), g = NULL;
  int color = rank == 4 ? TECOMM_SPLIT_NONE : rank / 2;
  RK_OK(tecomm_comm_split(c, color, -rank, &g));
  if (rank == 4) {
    RK_ASSERT(g == NULL, "TECOMM_SPLIT_NONE gave a communicator");
  } else {
    int r, nr, dev;
    RK_OK(tecomm_comm_rank(g, &r, &nr, &dev));
    RK_ASSERT(nr == 2 && r == 1 - rank % 2 && dev == rank,
              "split: world rank %d is %d of %d on device %d, want %d of 2 on %d", rank, r, nr, dev,
              1 - rank % 2, rank);
    /* the group's own symmetric memory, checked within the group: every
     * rank passes a barrier of the whole world in check_symmetric, so
     * the two groups run it side by side */
    tecore_devptr_t p;
    RK_OK(tecomm_mem_alloc(g, 3000, &p));
    unsigned char mine[3000], got[3000], want[3000];
    pattern(mine, sizeof mine, rank, 21);
    RK_CORE(tecore_memcpy(p, te_hptr(mine), sizeof mine));
    RK_ASSERT(tc_shm_barrier(tc_shm) == 0, "barrier");
    tecore_devptr_t pp;
    RK_OK(tecomm_mem_peer_ptr(g, p, 1 - r, &pp));
    RK_CORE(tecore_memcpy(te_hptr(got), pp, sizeof got));
    int peer_world = (rank / 2) * 2 + (rank % 2 ? 0 : 1);
    pattern(want, sizeof want, peer_world, 21);
    RK_ASSERT(memcmp(got, want, sizeof got) == 0, "split group: rank %d sees wrong bytes of %d",
              rank, peer_world);
    RK_ASSERT(tc_shm_barrier(tc_shm) == 0, "barrier");
    RK_OK(tecomm_mem_free(g, p));
    RK_OK(tecomm_comm_destroy(g));
  }
  if (rank == 4) {
    RK_ASSERT(tc_shm_barrier(tc_shm) == 0, "barrier");
    RK_ASSERT(tc_shm_barrier(tc_shm) == 0, "barrier");
  }
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(split_tensor_parallel_groups) {
  tc_run_ranks(5, rank_split, NULL, 60);
  tc_shm_release();
}
END_TEST

/* ---- abort, status, NVLS line ------------------------------------------------------ */

static void rank_abort(int rank, int n, void *arg) {
  (void)arg;
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  tecomm_comm_t c = tc_rank_comm(rank, n);
  char d[4096];
  RK_OK(tecomm_comm_describe(c, 0, d, sizeof d));
  RK_ASSERT(strstr(d, "nvls: refused (NCCL_NVLS_ENABLE=0)"), "describe: %s", d);
  RK_OK(tecomm_comm_abort(c));
  int peer = 5;
  RK_EXPECT(TECOMM_ERR_ABORTED, "aborted", tecomm_comm_status(c, &peer));
  RK_ASSERT(peer == -1, "status after abort named peer %d", peer);
  tecore_devptr_t p = 0;
  RK_EXPECT(TECOMM_ERR_ABORTED, "aborted", tecomm_mem_alloc(c, 64, &p));
  RK_EXPECT(TECOMM_ERR_ABORTED, "aborted",
            tecomm_allreduce(c, 64, 64, 1, TECORE_DTYPE_F32, TECOMM_SUM, NULL));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(abort_fails_later_calls) {
  tc_run_ranks(2, rank_abort, NULL, 60);
  tc_shm_release();
}
END_TEST

/* ---- the latency probe ------------------------------------------------------------------ */

static double since(const struct timespec *t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) * 1e-9;
}

/* Exchanges eager and replayed from a graph all come back; an exchange
 * waits for a late rank (it cannot return before that rank's word
 * arrives); a killed rank fails the others' next exchange with a
 * timeout naming it, within TECOMM_TIMEOUT + 1 s. */
static void rank_probe(int rank, int n, void *arg) {
  (void)arg;
  setenv("TECOMM_TIMEOUT", "1000", 1);
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  for (int i = 0; i < 30; i++) {
    RK_OK(tecomm_probe(c, TECOMM_PROBE_EXCHANGE, s));
    RK_OK(tecomm_probe(c, TECOMM_PROBE_LAUNCH, s));
  }
  tecore_graph_t g;
  tecore_graph_exec_t e;
  RK_CORE(tecore_stream_begin_capture(s, TECORE_CAPTURE_THREAD_LOCAL));
  for (int i = 0; i < 4; i++) {
    RK_OK(tecomm_probe(c, TECOMM_PROBE_EXCHANGE, s));
    RK_OK(tecomm_probe(c, TECOMM_PROBE_LAUNCH, s));
  }
  RK_CORE(tecore_stream_end_capture(s, &g));
  RK_CORE(tecore_graph_instantiate(&e, g));
  for (int i = 0; i < 25; i++) RK_CORE(tecore_graph_launch(e, s));
  RK_ASSERT(te_stream_wait(s, 20000) == TECORE_SUCCESS, "the probes did not come back in 20 s");
  RK_OK(tecomm_comm_status(c, NULL));
  RK_CORE(tecore_graph_exec_destroy(e));
  RK_CORE(tecore_graph_destroy(g));

  /* the last rank comes 300 ms late: the others' exchange waits for it */
  RK_ASSERT(tc_shm_barrier(tc_shm) == 0, "barrier");
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (rank == n - 1) usleep(300 * 1000);
  RK_OK(tecomm_probe(c, TECOMM_PROBE_EXCHANGE, s));
  RK_ASSERT(te_stream_wait(s, 5000) == TECORE_SUCCESS, "the late exchange did not come back");
  double late = since(&t0);
  RK_ASSERT(late >= 0.25, "rank %d's exchange returned after %.3f s, before the late rank came "
            "(300 ms)", rank, late);
  RK_OK(tecomm_comm_status(c, NULL));

  /* the last rank dies between exchanges */
  RK_ASSERT(tc_shm_barrier(tc_shm) == 0, "barrier");
  if (rank == n - 1) raise(SIGKILL);
  clock_gettime(CLOCK_MONOTONIC, &t0);
  RK_OK(tecomm_probe(c, TECOMM_PROBE_EXCHANGE, s));
  RK_ASSERT(te_stream_wait(s, 5000) == TECORE_SUCCESS, "the stream did not come back within 5 s");
  int peer = -2;
  tecomm_result_t st = tecomm_comm_status(c, &peer);
  double secs = since(&t0);
  RK_ASSERT(st == TECOMM_ERR_TIMEOUT, "status after a peer died: %s (%s)", tecomm_result_name(st),
            tecomm_last_error());
  RK_ASSERT(peer == n - 1, "status names peer %d, want %d", peer, n - 1);
  RK_ASSERT(secs <= 2.0, "TIMEOUT after %.2f s, want <= TECOMM_TIMEOUT + 1 s = 2 s", secs);
  RK_EXPECT(TECOMM_ERR_TIMEOUT, "rank 2", tecomm_probe(c, TECOMM_PROBE_EXCHANGE, s));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(probe_waits_for_every_peer) {
  tc_run_ranks_ex(3, rank_probe, NULL, 60, 2);
  tc_shm_release();
}
END_TEST

/* ---- bad arguments ------------------------------------------------------------------- */

static int cb_fail(const void *s, void *r, size_t b, void *ctx) {
  (void)s, (void)r, (void)b, (void)ctx;
  return 3;
}
static int cb_barrier_ok(void *ctx) {
  (void)ctx;
  return 0;
}

static void rank_bad(int rank, int n, void *arg) {
  (void)arg;
  tecomm_comm_t c = NULL;
  struct tecomm_bootstrap b = tc_boot_shm();
  RK_EXPECT(TECOMM_ERR_INVALID, "comm", tecomm_comm_init(rank, n, rank, &b, NULL));
  RK_EXPECT(TECOMM_ERR_INVALID, "nranks", tecomm_comm_init(0, 0, 0, &b, &c));
  RK_EXPECT(TECOMM_ERR_INVALID, "rank", tecomm_comm_init(5, 2, 0, &b, &c));
  RK_EXPECT(TECOMM_ERR_INVALID, "device", tecomm_comm_init(0, 2, -7, &b, &c));
  struct tecomm_bootstrap bad = b;
  bad.allgather = NULL;
  RK_EXPECT(TECOMM_ERR_INVALID, "allgather", tecomm_comm_init(rank, n, rank, &bad, &c));
  bad = b;
  bad.kind = (tecomm_bootstrap_kind_t)42;
  RK_EXPECT(TECOMM_ERR_INVALID, "kind", tecomm_comm_init(rank, n, rank, &bad, &c));
  bad = b;
  bad.kind = TECOMM_BOOTSTRAP_NCCL;
  bad.nccl_comm = NULL;
  RK_EXPECT(TECOMM_ERR_INVALID, "nccl_comm", tecomm_comm_init(rank, n, rank, &bad, &c));
  {
    /* vdev's NCCL: a caller's communicator cannot be one of its own (on
     * cuda a pointer that is no communicator would reach NCCL itself) */
    tecore_backend_t be0;
    int junk = 0;
    RK_CORE(tecore_init());
    RK_CORE(tecore_backend(&be0));
    bad.nccl_comm = &junk;
    if (be0 == TECORE_BACKEND_VDEV)
      RK_EXPECT(TECOMM_ERR_NOT_SUPPORTED, "ncclAllGather",
                tecomm_comm_init(rank, n, rank, &bad, &c));
  }
  bad = b;
  bad.allgather = cb_fail;
  bad.barrier = cb_barrier_ok;
  RK_EXPECT(TECOMM_ERR_BOOTSTRAP, "allgather", tecomm_comm_init(rank, n, rank, &bad, &c));
  RK_ASSERT(c == NULL, "failed init left a communicator");
  RK_EXPECT(TECOMM_ERR_INVALID, "comm",
            tecomm_allreduce(NULL, 64, 64, 1, TECORE_DTYPE_F32, TECOMM_SUM, NULL));
  RK_EXPECT(TECOMM_ERR_INVALID, "comm", tecomm_comm_status(NULL, NULL));
  RK_EXPECT(TECOMM_ERR_INVALID, "comm", tecomm_mem_alloc(NULL, 64, NULL));
  RK_EXPECT(TECOMM_ERR_INVALID, "comm", tecomm_probe(NULL, TECOMM_PROBE_LAUNCH, NULL));
  tecomm_algo_t a;
  RK_EXPECT(TECOMM_ERR_INVALID, "name", tecomm_algo_parse("fastest", &a));
  RK_OK(tecomm_algo_parse("twoshot", &a));
  RK_ASSERT(a == TECOMM_ALGO_TWOSHOT && strcmp(tecomm_algo_name(a), "twoshot") == 0, "algo names");

  c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  tecore_devptr_t buf = 0, out = 0, p = 0;
  RK_CORE(tecore_mem_alloc(4096, &buf));
  RK_CORE(tecore_mem_alloc(4096, &out));
  RK_EXPECT(TECOMM_ERR_INVALID, "count",
            tecomm_allreduce(c, buf, out, 0, TECORE_DTYPE_F32, TECOMM_SUM, s));
  RK_EXPECT(TECOMM_ERR_INVALID, "dtype",
            tecomm_allreduce(c, buf, out, 8, TECORE_DTYPE_E4M3, TECOMM_SUM, s));
  RK_EXPECT(TECOMM_ERR_INVALID, "op",
            tecomm_allreduce(c, buf, out, 8, TECORE_DTYPE_F32, (tecomm_op_t)7, s));
  RK_EXPECT(TECOMM_ERR_INVALID, "algo",
            tecomm_allreduce_algo(c, buf, out, 8, TECORE_DTYPE_F32, TECOMM_SUM,
                                  (tecomm_algo_t)99, s));
  RK_EXPECT(TECOMM_ERR_INVALID, "send",
            tecomm_allreduce(c, 0, out, 8, TECORE_DTYPE_F32, TECOMM_SUM, s));
  RK_EXPECT(TECOMM_ERR_INVALID, "overlap",
            tecomm_allreduce(c, buf, buf + 4, 8, TECORE_DTYPE_F32, TECOMM_SUM, s));
  RK_EXPECT(TECOMM_ERR_INVALID, "aligned",
            tecomm_allreduce(c, buf + 2, out, 8, TECORE_DTYPE_F32, TECOMM_SUM, s));
  /* NCCL refuses an element type it has no reduction for */
  RK_EXPECT(TECOMM_ERR_INVALID, "dtype",
            tecomm_allreduce_algo(c, buf, out, 8, TECORE_DTYPE_E4M3, TECOMM_SUM,
                                  TECOMM_ALGO_NCCL, s));
  struct tecomm_add_rmsnorm fa = {.x = buf, .rows = 2, .hidden = 4, .dtype = TECORE_DTYPE_F32,
                                  .residual_in = out, .residual_out = out, .gamma = out,
                                  .eps = 1e-5f, .out = 0};
  RK_EXPECT(TECOMM_ERR_INVALID, "nothing to write", tecomm_allreduce_add_rmsnorm(c, &fa, s));
  fa.out = buf;
  RK_EXPECT(TECOMM_ERR_INVALID, "overlaps args->out", tecomm_allreduce_add_rmsnorm(c, &fa, s));
  fa.out = out + 1024;
  fa.hidden = 0;
  RK_EXPECT(TECOMM_ERR_INVALID, "hidden", tecomm_allreduce_add_rmsnorm(c, &fa, s));
  fa.hidden = 4;
  fa.eps = -1.0f;
  RK_EXPECT(TECOMM_ERR_INVALID, "eps", tecomm_allreduce_add_rmsnorm(c, &fa, s));
  RK_EXPECT(TECOMM_ERR_INVALID, "args", tecomm_allreduce_add_rmsnorm(c, NULL, s));
  RK_EXPECT(TECOMM_ERR_INVALID, "bytes", tecomm_mem_alloc(c, 0, &p));
  RK_EXPECT(TECOMM_ERR_INVALID, "ptr", tecomm_mem_free(c, buf));
  RK_EXPECT(TECOMM_ERR_INVALID, "peer", tecomm_mem_peer_ptr(c, buf, n, &p));
  RK_EXPECT(TECOMM_ERR_INVALID, "symmetric", tecomm_mem_peer_ptr(c, buf, 0, &p));
  RK_EXPECT(TECOMM_ERR_INVALID, "color", tecomm_comm_split(c, -5, 0, &c));
  RK_EXPECT(TECOMM_ERR_INVALID, "len", tecomm_comm_describe(c, 0, (char *)&p, 0));
  RK_EXPECT(TECOMM_ERR_INVALID, "what", tecomm_probe(c, (tecomm_probe_t)9, s));
  /* every rank gets the bad size error, none waits for a peer */
  RK_EXPECT(TECOMM_ERR_INVALID, "same calls", tecomm_mem_alloc(c, rank == 0 ? 512 : 1024, &p));
  /* MPI: libtecomm links none; the kind without te/comm_mpi.h's callbacks
   * is refused, naming the header */
  bad = b;
  bad.kind = TECOMM_BOOTSTRAP_MPI;
  bad.mpi_comm = &bad;
  bad.allgather = NULL;
  bad.barrier = NULL;
  tecomm_comm_t c2 = NULL;
  RK_EXPECT(TECOMM_ERR_NOT_SUPPORTED, "te/comm_mpi.h", tecomm_comm_init(rank, n, rank, &bad, &c2));
  RK_CORE(tecore_mem_free(buf));
  RK_CORE(tecore_mem_free(out));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(bad_arguments) {
  tc_run_ranks(2, rank_bad, NULL, 60);
  tc_shm_release();
}
END_TEST

START_TEST(tunables_listed) {
  static const char *const vars[] = {"TECOMM_TIMEOUT", "TECOMM_POOL_MB", "TECOMM_MAX_TOKENS",
                                     "TECOMM_MAX_HIDDEN", "TECOMM_ALGO", "TECOMM_NCCL",
                                     "TECOMM_RANK", "TECOMM_NRANKS", "TECOMM_ROOT",
                                     "TECOMM_ONESHOT_MAX_KB", "TECOMM_LAMPORT_MAX_KB",
                                     "TECOMM_AR_BLOCKS", "TECOMM_AR_OVERLAP_BLOCKS",
                                     "TECOMM_FUSED_TWOSHOT"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    struct tecore_tunable_info info;
    TE_OK(tecore_tunable_find(vars[i], &info));
    ck_assert_msg(info.help && strlen(info.help) > 20, "%s has no help text", vars[i]);
  }
}
END_TEST

static Suite *comm_suite(void) {
  /* every rank gets its own virtual device */
  setenv("TECORE_VDEV_DEVICES", "8", 0);
  Suite *s = suite_create("comm");
  TCase *tc = te_tcase(s, "init", 0);
  tcase_add_loop_test(tc, init_callbacks, 0, 4);
  tc = te_tcase(s, "pool", 0);
  tcase_add_test(tc, pool_first_fit_merge);
  tcase_add_test(tc, pool_exhaustion_one_rank_same_fallback);
  tc = te_tcase(s, "tcp", 0);
  tcase_add_test(tc, tcp_env_bootstrap);
  tcase_add_test(tc, tcp_connect_bounded);
  tc = te_tcase(s, "split", 0);
  tcase_add_test(tc, split_tensor_parallel_groups);
  tc = te_tcase(s, "probe", 0);
  tcase_add_test(tc, probe_waits_for_every_peer);
  tc = te_tcase(s, "errors", 0);
  tcase_add_test(tc, abort_fails_later_calls);
  tcase_add_test(tc, bad_arguments);
  tcase_add_test(tc, tunables_listed);
  return s;
}

TE_TEST_MAIN(comm_suite, TE_TEST_DEVICE)
