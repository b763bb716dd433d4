/* SPDX-License-Identifier: Apache-2.0
 *
 * fuzz_comm.c -- fuzz-api's libtecomm operations.  A run holds one
 * communicator of one rank (a callback bootstrap inside the process, so
 * the whole init runs: capabilities, the socket mesh, the pool, vdev's
 * NCCL), and the public calls take it with the arguments the rest of
 * fuzz-api draws: pointers of every kind, sizes up to 2^64, dtypes, ops,
 * algorithms and flags in and out of range, streams live, destroyed or
 * capturing.  comm_misc may abort the communicator (later calls must say
 * ABORTED); comm_renew makes a new one.
 *
 * The oracle: every result is a documented tecomm_result_t (not BOOTSTRAP
 * or SYSTEM on one rank, never an unknown value), a failure leaves
 * tecomm_last_error() non-empty, and nothing crashes, hangs or trips the
 * sanitizers.  A device error is recovered as fuzz-api recovers one. */
#include "fuzz_api.h"

#include <stdio.h>
#include <string.h>
#include <te/comm.h>

#define NM 3 /* symmetric allocations */

static struct {
  tecomm_comm_t comm;
  int aborted;
  tecore_devptr_t m[NM];
  size_t m_bytes[NM];
} M;

static int comm_allowed(tecomm_result_t r) {
  switch (r) {
    case TECOMM_SUCCESS:
    case TECOMM_ERR_INVALID:
    case TECOMM_ERR_NOMEM:
    case TECOMM_ERR_DEVICE:
    case TECOMM_ERR_CAPTURE: /* a libtecore capture failure keeps its code */
    case TECOMM_ERR_TIMEOUT:
    case TECOMM_ERR_NOT_SUPPORTED:
    case TECOMM_ERR_ABORTED: return 1;
    default: return 0;
  }
}

static tecomm_result_t check_comm(tecomm_result_t r, const char *fn) {
  if (!comm_allowed(r))
    fz_finding("%s returned %s (%d), not a documented result: %s", fn, tecomm_result_name(r), (int)r,
            tecomm_last_error());
  if (r != TECOMM_SUCCESS && !tecomm_last_error()[0])
    fz_finding("%s returned %s with an empty tecomm_last_error()", fn, tecomm_result_name(r));
  if (r == TECOMM_ERR_ABORTED && !M.aborted)
    fz_finding("%s returned ABORTED on a communicator nobody aborted: %s", fn, tecomm_last_error());
  fz_count_result(r == TECOMM_SUCCESS);
  if (fz_tracing() && r != TECOMM_SUCCESS)
    printf("    -> %s: %s\n", tecomm_result_name(r), tecomm_last_error());
  /* a libtecore failure under it may have left a stream a sticky error */
  if (r == TECOMM_ERR_DEVICE || r == TECOMM_ERR_CAPTURE || r == TECOMM_ERR_TIMEOUT)
    fz_after(TECORE_ERR_ILLEGAL_ADDRESS);
  return r;
}

/* MC(call): one checked libtecomm call */
#define MC(call) (fz_count_call(#call), tecore_clear_error(), check_comm((call), #call))

static int one_allgather(const void *send, void *recv, size_t bytes, void *ctx) {
  (void)ctx;
  memcpy(recv, send, bytes);
  return 0;
}
static int one_barrier(void *ctx) {
  (void)ctx;
  return 0;
}

static void comm_make(void) {
  struct tecomm_bootstrap b = {.kind = TECOMM_BOOTSTRAP_CALLBACKS,
                               .allgather = one_allgather,
                               .barrier = one_barrier};
  M.aborted = 0;
  if (MC(tecomm_comm_init(0, 1, 0, &b, &M.comm)) != TECOMM_SUCCESS)
    fz_finding("tecomm_comm_init of one rank failed: %s", tecomm_last_error());
}

void fz_comm_setup(void) {
  memset(&M, 0, sizeof M);
  comm_make();
}

static void comm_end(void) {
  for (int i = 0; i < NM; i++)
    if (M.m[i]) MC(tecomm_mem_free(M.comm, M.m[i]));
  memset(M.m, 0, sizeof M.m);
  if (M.comm) MC(tecomm_comm_destroy(M.comm));
  M.comm = NULL;
}

void fz_comm_cleanup(void) { comm_end(); }

void op_comm_renew(const int64_t *a) {
  (void)a;
  comm_end();
  comm_make();
}

static tecore_dtype_t dtype_of(int64_t a) {
  static const tecore_dtype_t d[] = {TECORE_DTYPE_F32, TECORE_DTYPE_BF16, TECORE_DTYPE_F16,
                                     TECORE_DTYPE_BF16, TECORE_DTYPE_E4M3, (tecore_dtype_t)77};
  return d[fz_ix(a, sizeof d / sizeof d[0])];
}

static tecomm_algo_t algo_of(int64_t a) {
  uint64_t k = fz_ix(a, TECOMM_ALGO_COUNT_ + 2);
  if (k == TECOMM_ALGO_COUNT_ + 1) return (tecomm_algo_t)-3;
  return (tecomm_algo_t)k; /* TECOMM_ALGO_COUNT_ itself: out of range */
}

/* comm_allreduce send(P) recv(P) count op-dtype algo stream */
void op_comm_allreduce(const int64_t *a) {
  tecore_devptr_t send = fz_ptr(a, NULL), recv = fz_ptr(a + 3, NULL);
  if (fz_ix(a[7], 4) == 0) recv = send; /* in place */
  size_t count = (size_t)a[6];
  tecomm_op_t op = fz_ix(a[7], 8) == 7 ? (tecomm_op_t)9 : fz_ix(a[7], 2) ? TECOMM_MAX : TECOMM_SUM;
  MC(tecomm_allreduce_algo(M.comm, send, recv, count, dtype_of(a[8]), op, algo_of(a[9]),
                           fz_stream(a[10])));
}

/* comm_fused x(P) residual gamma out rows hidden mode algo stream: the
 * operands are buffer bases (mode may misalign them, alias them, leave
 * out or rsigma 0, pass an FP8 tensor, bend eps) */
void op_comm_fused(const int64_t *a) {
  unsigned mode = (unsigned)fz_ix(a[7], 1u << 12);
  struct tecomm_add_rmsnorm f = {0};
  f.x = fz_ptr(a, NULL);
  f.residual_in = fz_buf(a[3], NULL) + ((mode & 1) ? 2 : 0);
  f.residual_out = (mode & 2) ? f.residual_in : fz_buf(a[3] + 1, NULL);
  f.gamma = fz_buf(a[4], NULL);
  f.out = (mode & 4) ? 0 : fz_buf(a[5], NULL);
  f.rsigma = (mode & 8) ? fz_buf(a[5] + 2, NULL) + ((mode & 16) ? 1 : 0) : 0;
  f.fp8_out = (mode & 32) ? fz_tensor(a[8]) : NULL;
  f.rows = (size_t)a[6] % 4097;
  f.hidden = (size_t)a[8] % 9000;
  f.dtype = dtype_of(mode >> 6);
  static const float eps[] = {1e-5f, 0.0f, -1.0f, 1e30f, 1e-6f, 1e-5f, 1e-5f, 1e-5f};
  f.eps = eps[(mode >> 9) & 7];
  if (((mode >> 9) & 7) == 7) f.eps = __builtin_nanf("");
  f.algo = algo_of(a[9]);
  MC(tecomm_allreduce_add_rmsnorm(M.comm, (mode & 2048) ? NULL : &f, fz_stream(a[10])));
}

/* comm_mem mode size slot: alloc, free (maybe a wrong or freed address),
 * peer pointers */
void op_comm_mem(const int64_t *a) {
  uint64_t s = fz_ix(a[2], NM);
  switch (fz_ix(a[0], 6)) {
    case 0:
    case 1:
      if (M.m[s]) break;
      if (MC(tecomm_mem_alloc(M.comm, (size_t)a[1] % ((size_t)64 << 20), &M.m[s])) !=
          TECOMM_SUCCESS)
        M.m[s] = 0;
      else
        M.m_bytes[s] = (size_t)a[1] % ((size_t)64 << 20);
      break;
    case 2:
      if (M.m[s] && MC(tecomm_mem_free(M.comm, M.m[s])) == TECOMM_SUCCESS) M.m[s] = 0;
      break;
    case 3: /* not an allocation of the communicator: refused, nothing freed */
      MC(tecomm_mem_free(M.comm, M.m[s] ? M.m[s] + 16 : fz_buf(a[1], NULL)));
      break;
    case 4: {
      tecore_devptr_t p = 0;
      MC(tecomm_mem_peer_ptr(M.comm, M.m[s] + (M.m[s] ? (uint64_t)a[1] % (M.m_bytes[s] + 64) : 0),
                             (int)(a[1] % 3) - 1, fz_ix(a[1], 5) ? &p : NULL));
      break;
    }
    default: MC(tecomm_mem_alloc(M.comm, (size_t)a[1], NULL)); break;
  }
}

/* comm_misc which arg size stream */
void op_comm_misc(const int64_t *a) {
  char text[512];
  int peer = 0, r = 0, n = 0, dev = 0, v = 0;
  tecomm_algo_t al = TECOMM_ALGO_AUTO;
  switch (fz_ix(a[0], 10)) {
    case 0: MC(tecomm_comm_status(M.comm, fz_ix(a[1], 2) ? &peer : NULL)); break;
    case 1: {
      size_t len = fz_ix(a[1], 3) == 0 ? 0 : fz_ix(a[1], 3) == 1 ? 7 : sizeof text;
      MC(tecomm_comm_describe(M.comm, (size_t)a[2], fz_ix(a[1], 5) ? text : NULL, len));
      break;
    }
    case 2:
      MC(tecomm_comm_choose(M.comm, (size_t)a[2], dtype_of(a[1]), (int)fz_ix(a[1], 3) - 1,
                            fz_ix(a[1], 7) ? &al : NULL));
      break;
    case 3:
      MC(tecomm_comm_rank(M.comm, fz_ix(a[1], 2) ? &r : NULL, fz_ix(a[1], 3) ? &n : NULL,
                          fz_ix(a[1], 5) ? &dev : NULL));
      break;
    case 4:
      MC(tecomm_probe(M.comm, (tecomm_probe_t)((int)fz_ix(a[1], 5) - 1), fz_stream(a[3])));
      break;
    case 5: {
      int64_t p[3] = {0, a[1], a[2] & 0xfff0};
      fz_count_call("tecomm_amax_reduce");
      tecore_clear_error();
      tecore_result_t cr = tecomm_amax_reduce(fz_ptr(p, NULL), (size_t)a[2] % 4097,
                                              fz_stream(a[3]), fz_ix(a[1], 9) ? M.comm : NULL);
      if (cr != TECORE_SUCCESS && !tecore_last_error()[0])
        fz_finding("tecomm_amax_reduce returned %s with an empty tecore_last_error()",
                tecore_result_name(cr));
      fz_count_result(cr == TECORE_SUCCESS);
      fz_after(cr);
      break;
    }
    case 6: MC(tecomm_nccl_version(fz_ix(a[1], 4) ? &v : NULL)); break;
    case 7:
      MC(tecomm_algo_parse(fz_ix(a[1], 4) == 0 ? NULL : fz_ix(a[1], 4) == 1 ? "twoshot" : "x",
                           fz_ix(a[1], 3) ? &al : NULL));
      fz_count_call("tecomm_algo_name");
      if (!tecomm_algo_name(algo_of(a[2]))) fz_finding("tecomm_algo_name returned NULL");
      break;
    case 8:
      if (fz_ix(a[1], 8) == 0) { /* rare: later calls must say ABORTED */
        if (MC(tecomm_comm_abort(M.comm)) == TECOMM_SUCCESS) M.aborted = 1;
      } else {
        MC(tecomm_comm_status(M.comm, &peer));
      }
      break;
    default:
      MC(fz_ix(a[1], 2) ? tecomm_ops_register() : tecomm_ops_unregister());
      break;
  }
}

/* comm_split color key: a group of one, destroyed again */
void op_comm_split(const int64_t *a) {
  tecomm_comm_t c = NULL;
  int color = fz_ix(a[0], 4) == 0 ? TECOMM_SPLIT_NONE : fz_ix(a[0], 4) == 1 ? -7 : (int)(a[0] % 5);
  int want_out = fz_ix(a[1], 6) != 0;
  if (MC(tecomm_comm_split(M.comm, color, (int)a[1], want_out ? &c : NULL)) == TECOMM_SUCCESS &&
      c)
    MC(tecomm_comm_destroy(c));
}
