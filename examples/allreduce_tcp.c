/* SPDX-License-Identifier: Apache-2.0 */
/* allreduce_tcp.c -- two ranks over libtecomm's TCP rendezvous: an
 * allreduce, then the allreduce fused with the residual add and RMSNorm.
 *
 * The program forks its two ranks (one process each; the parent touches
 * no device).  Rank 0 listens on TECOMM_ROOT (here 127.0.0.1 and a free
 * port), rank 1 connects; each then calls, on its own device:
 *   1. tecomm_allreduce: sum of both ranks' x [ROWS][HIDDEN] (F32);
 *   2. tecomm_allreduce_add_rmsnorm:
 *        residual_out = sum(x) + residual_in
 *        out = residual_out / sqrt(mean(residual_out^2) + eps) * gamma
 * Inputs are multiples of 1/4 below 8, so the sums are exact in F32:
 * the allreduce and residual_out must equal the host's sums bit for bit;
 * out is within 1e-5 (relative to the row's scale) of a double reference.
 * Outputs are poisoned first.  Every rank checks its own results.
 *
 * The rendezvous authenticates its ranks with TECOMM_SECRET when it is
 * set: the program draws one (64 hex digits) when the environment has
 * none, so both ranks share it.  On the virtual device it asks for two
 * devices (TECORE_VDEV_DEVICES=2), one a rank; on GPUs each rank takes
 * its own (two are needed).
 *
 * Build and run against an installed libte:
 *   cc -std=c99 allreduce_tcp.c $(pkg-config --cflags --libs te-comm) -lm \
 *     -Wl,-rpath,"$(pkg-config --variable=libdir te-comm)" -o allreduce_tcp
 *   ./allreduce_tcp       (TE_DEVICE=vdev runs it without a GPU)
 * Exit 0 when both ranks' results are right, 1 otherwise. */
#define _POSIX_C_SOURCE 200809L
#include <te/comm.h>
#include <te/core.h>
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { NRANKS = 2, ROWS = 8, HIDDEN = 256 };
#define N (ROWS * HIDDEN)

static int rank_id;

#define TRY(call)                                                                   \
  do {                                                                              \
    if ((call) != 0) {                                                              \
      fprintf(stderr, "allreduce_tcp: rank %d: %s: %s\n", rank_id, #call,           \
              tecore_last_error());                                                 \
      exit(1);                                                                      \
    }                                                                               \
  } while (0)

static tecore_devptr_t host(void *p) { return (tecore_devptr_t)(uintptr_t)p; }

/* Rank r's element i: a multiple of 1/4 in [-2, 2], so sums are exact. */
static float input(int r, int i) { return (float)((i * 7 + r * 5) % 17 - 8) / 4.0f; }
static float residual(int i) { return (float)(i % 9 - 4) / 4.0f; }
static float gamma_of(int j) { return 0.5f + (float)(j % 5) / 8.0f; }

static tecore_devptr_t dev_alloc(size_t bytes) {
  tecore_devptr_t p;
  TRY(tecore_mem_alloc(bytes, &p));
  return p;
}

/* One rank: both calls and their checks; returns the exit status. */
static int run_rank(int rank) {
  static float x[N], res[N], gam[HIDDEN], got[N], got_res[N];
  rank_id = rank;
  for (int i = 0; i < N; i++) x[i] = input(rank, i), res[i] = residual(i);
  for (int j = 0; j < HIDDEN; j++) gam[j] = gamma_of(j);

  tecomm_comm_t comm;
  /* rank and count given; device -1: this rank's index on the host */
  if (tecomm_comm_init(rank, NRANKS, -1, NULL, &comm) != TECOMM_SUCCESS) {
    fprintf(stderr, "allreduce_tcp: rank %d: tecomm_comm_init: %s\n", rank, tecomm_last_error());
    return 1;
  }
  tecore_stream_t s;
  TRY(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  tecore_devptr_t dx = dev_alloc(sizeof x), dsum = dev_alloc(sizeof x), dres = dev_alloc(sizeof x),
                  dres_out = dev_alloc(sizeof x), dout = dev_alloc(sizeof x),
                  dgamma = dev_alloc(sizeof gam);
  TRY(tecore_memcpy(dx, host(x), sizeof x));
  TRY(tecore_memcpy(dres, host(res), sizeof res));
  TRY(tecore_memcpy(dgamma, host(gam), sizeof gam));
  TRY(tecore_memset_d8_async(dsum, 0xff, sizeof x, s));   /* poison: NaN */
  TRY(tecore_memset_d8_async(dres_out, 0xff, sizeof x, s));
  TRY(tecore_memset_d8_async(dout, 0xff, sizeof x, s));

  /* 1. the allreduce: dsum = x(rank 0) + x(rank 1) */
  TRY(tecomm_allreduce(comm, dx, dsum, N, TECORE_DTYPE_F32, TECOMM_SUM, s));
  /* 2. fused: the sum, + residual, RMSNorm -- one call */
  struct tecomm_add_rmsnorm a = {.x = dx, .rows = ROWS, .hidden = HIDDEN,
                                 .dtype = TECORE_DTYPE_F32, .residual_in = dres,
                                 .residual_out = dres_out, .gamma = dgamma, .eps = 1e-5f,
                                 .out = dout};
  TRY(tecomm_allreduce_add_rmsnorm(comm, &a, s));
  TRY(tecore_stream_synchronize(s));

  int bad = 0;
  TRY(tecore_memcpy(host(got), dsum, sizeof got));
  for (int i = 0; i < N; i++)
    if (got[i] != input(0, i) + input(1, i) && bad++ < 3)
      fprintf(stderr, "allreduce_tcp: rank %d: sum[%d] = %g, expected %g\n", rank, i, got[i],
              input(0, i) + input(1, i));
  TRY(tecore_memcpy(host(got_res), dres_out, sizeof got_res));
  TRY(tecore_memcpy(host(got), dout, sizeof got));
  for (int r = 0; r < ROWS; r++) {
    double sq = 0, v[HIDDEN];
    for (int j = 0; j < HIDDEN; j++) {
      int i = r * HIDDEN + j;
      v[j] = (double)input(0, i) + input(1, i) + residual(i);   /* exact */
      sq += v[j] * v[j];
      if (got_res[i] != (float)v[j] && bad++ < 3)
        fprintf(stderr, "allreduce_tcp: rank %d: residual_out[%d] = %g, expected %g\n", rank, i,
                got_res[i], v[j]);
    }
    double rs = 1.0 / sqrt(sq / HIDDEN + 1e-5);
    for (int j = 0; j < HIDDEN; j++) {
      int i = r * HIDDEN + j;
      double ref = v[j] * rs * gamma_of(j), tol = 1e-5 * (fabs(ref) + rs);
      if (!(fabs(got[i] - ref) <= tol) && bad++ < 3)
        fprintf(stderr, "allreduce_tcp: rank %d: out[%d] = %.9g, reference %.9g\n", rank, i,
                got[i], ref);
    }
  }
  TRY(tecore_mem_free(dx));
  TRY(tecore_mem_free(dsum));
  TRY(tecore_mem_free(dres));
  TRY(tecore_mem_free(dres_out));
  TRY(tecore_mem_free(dout));
  TRY(tecore_mem_free(dgamma));
  TRY(tecore_stream_destroy(s));
  if (tecomm_comm_destroy(comm) != TECOMM_SUCCESS) {
    fprintf(stderr, "allreduce_tcp: rank %d: tecomm_comm_destroy: %s\n", rank, tecomm_last_error());
    return 1;
  }
  if (bad) {
    fprintf(stderr, "allreduce_tcp: rank %d: %d values wrong\n", rank, bad);
    return 1;
  }
  printf("allreduce_tcp: rank %d of %d: allreduce and allreduce + add + RMSNorm right\n", rank,
         NRANKS);
  return 0;
}

/* A free TCP port on the loopback (the kernel picks one; we let it go). */
static int free_port(void) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
  if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

/* TECOMM_SECRET for both ranks, unless the environment has one. */
static int set_secret(void) {
  if (getenv("TECOMM_SECRET")) return 0;
  unsigned char b[32];
  char hex[65];
  FILE *f = fopen("/dev/urandom", "rb");
  if (!f || fread(b, 1, sizeof b, f) != sizeof b) {
    if (f) fclose(f);
    return -1;
  }
  fclose(f);
  for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", b[i]);
  return setenv("TECOMM_SECRET", hex, 1);
}

int main(void) {
  char root[64];
  int port = free_port();
  if (port < 0 || set_secret() != 0) {
    perror("allreduce_tcp: setting up the rendezvous");
    return 1;
  }
  snprintf(root, sizeof root, "127.0.0.1:%d", port);
  setenv("TECOMM_ROOT", root, 1);
  setenv("TECORE_VDEV_DEVICES", "2", 0);   /* vdev: a device for each rank */
  fflush(stdout);
  pid_t pid[NRANKS];
  for (int r = 0; r < NRANKS; r++) {
    pid[r] = fork();
    if (pid[r] < 0) {
      perror("allreduce_tcp: fork");
      return 1;
    }
    if (pid[r] == 0) exit(run_rank(r));   /* exit: flushes the rank's output */
  }
  /* wait for both, for at most two minutes (a rank that died leaves the
   * other waiting in the rendezvous until its own timeout) */
  int status = 0, left = NRANKS;
  for (int waited = 0; left > 0 && waited < 1200; waited++) {
    for (int r = 0; r < NRANKS; r++) {
      int st;
      if (pid[r] > 0 && waitpid(pid[r], &st, WNOHANG) == pid[r]) {
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) status = 1;
        pid[r] = 0;
        left--;
      }
    }
    if (left > 0) nanosleep(&(struct timespec){0, 100000000}, NULL);
  }
  for (int r = 0; r < NRANKS; r++)
    if (pid[r] > 0) {
      fprintf(stderr, "allreduce_tcp: rank %d did not finish in 120 s\n", r);
      kill(pid[r], SIGKILL);
      waitpid(pid[r], NULL, 0);
      status = 1;
    }
  return status;
}
