/* SPDX-License-Identifier: Apache-2.0 */
/* check_coll.c -- tecomm_reduce_scatter and tecomm_allgather through the
 * communicator, ranks as forked processes (t/lib/comm_ranks.h), 1, 2, 3
 * and 4 ranks:
 *   - every algorithm the level offers (auto, oneshot, ce, lamport, and
 *     nccl where the communicator has it) x every dtype (FP8 too for all-gather) x
 *     SUM, MAX x odd counts (1, 7, 1023, 4097), plain or symmetric
 *     memory, in place or not, poisoned outputs and guard bytes around
 *     recv:
 *       reduce-scatter against the float64 sum (tolerance: the IPC
 *       kernels fold in float and round once, (n - 1) f32 roundings of
 *       the magnitude plus half an ulp of the dtype; NCCL rounds each
 *       partial: n half ulps of the magnitude) and bit for bit against
 *       the float fold in rank order rounded once (IPC algorithms);
 *       MAX exact;
 *       all-gather byte for byte (random bytes: NaN patterns of FP8
 *       included), every rank the same bits;
 *   - reduce-scatter's block is the bits allreduce gives for it;
 *   - Lamport reduce-scatter, all-gather and allreduce back to back
 *     (its rotating buffers), checked after; all-gather of the armed
 *     pattern's bytes, every dtype, moved exactly;
 *   - without a pool (the registered in-place level): the kernels on
 *     symmetric inputs, NCCL for plain ones, the kernels refused on them;
 *   - argument errors named (count 0, dtype, FP8 refused for
 *     reduce-scatter, overlapping send/recv that is not the in-place
 *     form, recv past its symmetric allocation, unsupported algorithms);
 *   - ranks that pass different counts, dtypes or collectives: every rank
 *     gets TECOMM_ERR_MISMATCH within 2 s;
 *   - a rank SIGKILLed between calls: the others get TECOMM_ERR_TIMEOUT
 *     naming it within TECOMM_TIMEOUT + 1 s; a call waiting for a peer
 *     ends when its rank aborts (TECOMM_ERR_ABORTED, then and after);
 *   - the verbs level (soft device, ranks as nodes): flat reduce-scatter
 *     and all-gather, hierarchical reduce-scatter and all-gather;
 *   - captured in a graph and replayed with new inputs, each result checked. */
#include "comm_ranks.h"
#include <time.h>

#define GUARD 256 /* bytes of guard on each side of a receive buffer */

static const tecore_dtype_t sum_dtypes[] = {TECORE_DTYPE_F32, TECORE_DTYPE_BF16,
                                            TECORE_DTYPE_F16};
static const tecore_dtype_t all_dtypes[] = {TECORE_DTYPE_F32, TECORE_DTYPE_BF16, TECORE_DTYPE_F16,
                                            TECORE_DTYPE_E4M3, TECORE_DTYPE_E5M2};
static const size_t counts[] = {1, 7, 1023, 4097};

static double half_ulp(tecore_dtype_t dt) {
  return dt == TECORE_DTYPE_F32 ? 0x1p-24 : dt == TECORE_DTYPE_BF16 ? 0x1p-8 : 0x1p-11;
}

/* The float fold in rank order, rounded once to dt: the bits the IPC
 * kernels give (kernels/common/comm_ar.h). */
static float fold(float acc, float v, tecomm_op_t op) {
  return op == TECOMM_SUM ? acc + v : (v > acc || v != v ? v : acc);
}

/* Rank r's random bytes for an all-gather case. */
static void make_bytes(unsigned char *p, size_t n, int r, uint64_t salt) {
  uint64_t x = te_test_seed ^ ((uint64_t)(r + 1) << 40) ^ (salt * 0x9e3779b97f4a7c15ull);
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(te_splitmix64(&x) >> 56);
}

/* A device buffer of bytes with GUARD bytes of 0x5A on each side: plain
 * device memory, or symmetric (the same offset on every rank). */
struct gbuf {
  tecore_devptr_t base, p;
  size_t bytes;
  int sym;
};

static struct gbuf gbuf_make(tecomm_comm_t c, size_t bytes, int sym, tecore_stream_t s) {
  struct gbuf b = {0, 0, bytes, sym};
  if (sym) RK_OK(tecomm_mem_alloc(c, bytes + 2 * GUARD, &b.base));
  else RK_CORE(tecore_mem_alloc(bytes + 2 * GUARD, &b.base));
  b.p = b.base + GUARD;
  RK_CORE(tecore_memset_d8_async(b.base, 0x5A, bytes + 2 * GUARD, s));
  return b;
}

/* The guards are still 0x5A; then frees b. */
static void gbuf_check_free(tecomm_comm_t c, struct gbuf *b, tecore_stream_t s, const char *what) {
  unsigned char g[2][GUARD];
  RK_CORE(tecore_memcpy_async(te_hptr(g[0]), b->base, GUARD, s));
  RK_CORE(tecore_memcpy_async(te_hptr(g[1]), b->p + b->bytes, GUARD, s));
  RK_CORE(tecore_stream_synchronize(s));
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < GUARD; i++)
      RK_ASSERT(g[k][i] == 0x5A, "%s: guard byte %d %s the buffer was written (0x%02x)", what,
                k ? i : GUARD - i, k ? "after" : "before", g[k][i]);
  if (b->sym) RK_OK(tecomm_mem_free(c, b->base));
  else RK_CORE(tecore_mem_free(b->base));
}

struct coll_case {
  int rs; /* 1 reduce-scatter, 0 all-gather */
  tecomm_algo_t algo;
  tecore_dtype_t dt;
  tecomm_op_t op;
  size_t count;
  int kind; /* bit 0: in place; bit 1: symmetric memory */
};

static void case_name(char *w, size_t n, int nranks, const struct coll_case *k) {
  snprintf(w, n, "%d ranks, %s, %s, %s, %s, count %zu, %s%s", nranks,
           k->rs ? "reduce-scatter" : "all-gather", tecomm_algo_name(k->algo),
           tecore_dtype_name(k->dt), k->op == TECOMM_SUM ? "sum" : "max", k->count,
           k->kind & 2 ? "symmetric" : "plain", k->kind & 1 ? " in place" : "");
}

/* Reduce-scatter's block of this rank against float64 and the fold.
 * nccl: the partial sums were rounded to the dtype on the way (NCCL, the
 * verbs ring): the wider tolerance, no bit check. */
static void check_rs(const void *got, int rank, int n, const struct coll_case *k, uint64_t salt,
                     int nccl, const char *what) {
  const size_t cnt = k->count, esz = tecore_dtype_size(k->dt);
  unsigned char *in = malloc(n * cnt * esz);
  double *ref = calloc(cnt, sizeof *ref), *mag = calloc(cnt, sizeof *mag);
  float *acc = calloc(cnt, sizeof *acc);
  RK_ASSERT(in && ref && mag && acc, "malloc");
  for (int r = 0; r < n; r++) {
    tc_make_input(in, n * cnt, k->dt, r, salt);
    for (size_t i = 0; i < cnt; i++) {
      double v = tc_from_dt(in, rank * cnt + i, k->dt);
      ref[i] = r == 0 ? v : k->op == TECOMM_SUM ? ref[i] + v : (v > ref[i] ? v : ref[i]);
      acc[i] = r == 0 ? (float)v : fold(acc[i], (float)v, k->op);
      mag[i] += fabs(v);
    }
  }
  unsigned char one[4];
  for (size_t i = 0; i < cnt; i++) {
    double g = tc_from_dt(got, i, k->dt), tol = 0.0;
    if (k->op == TECOMM_SUM)
      tol = nccl ? (n - 1) * 0x1p-24 * mag[i] + n * half_ulp(k->dt) * mag[i] * 1.0001
                 : (n - 1) * 0x1p-24 * mag[i] + half_ulp(k->dt) * fabs(ref[i]) * 1.0001;
    RK_ASSERT(fabs(g - ref[i]) <= tol, "%s: element %zu: got %.9g, want %.9g (float64), tol %.3g",
              what, i, g, ref[i], tol);
    if (nccl) continue;
    tc_to_dt(one, 0, k->dt, acc[i]);
    RK_ASSERT(memcmp(one, (const unsigned char *)got + i * esz, esz) == 0,
              "%s: element %zu: got %.9g, not the rank-order fold's bits (%.9g)", what, i, g,
              tc_from_dt(one, 0, k->dt));
  }
  free(in);
  free(ref);
  free(mag);
  free(acc);
}

/* All-gather's result: every rank's bytes in its slot. */
static void check_ag(const unsigned char *got, int n, const struct coll_case *k, uint64_t salt,
                     const char *what) {
  const size_t bytes = k->count * tecore_dtype_size(k->dt);
  unsigned char *want = malloc(bytes);
  RK_ASSERT(want, "malloc");
  for (int r = 0; r < n; r++) {
    make_bytes(want, bytes, r, salt);
    for (size_t i = 0; i < bytes; i++)
      RK_ASSERT(got[r * bytes + i] == want[i], "%s: rank %d's byte %zu: got 0x%02x, want 0x%02x",
                what, r, i, got[r * bytes + i], want[i]);
  }
  free(want);
}

/* The call ran NCCL or verbs (auto: at those levels), whose partial
 * sums are rounded to the dtype. */
static int ran_nccl(tecomm_comm_t c, tecomm_algo_t a) {
  if (a == TECOMM_ALGO_NCCL || a == TECOMM_ALGO_VERBS) return 1;
  if (a != TECOMM_ALGO_AUTO) return 0;
  char d[4096];
  RK_OK(tecomm_comm_describe(c, 0, d, sizeof d));
  return strstr(d, "level: nccl") != NULL || strstr(d, "level: verbs") != NULL;
}

/* One case on this rank: inputs, poison, the call, the checks. */
static void run_case(tecomm_comm_t c, tecore_stream_t s, int rank, int n,
                     const struct coll_case *k, uint64_t salt) {
  const size_t esz = tecore_dtype_size(k->dt), bytes = k->count * esz, all = n * bytes;
  const int inplace = k->kind & 1, sym = (k->kind & 2) != 0;
  unsigned char *h = malloc(all), *got = malloc(all);
  RK_ASSERT(h && got, "malloc");
  char what[256];
  case_name(what, sizeof what, n, k);
  /* in place: one buffer of nranks blocks; else send and recv of their own */
  struct gbuf big = gbuf_make(c, all, sym, s), small = {0};
  tecore_devptr_t send, recv;
  if (k->rs) {
    tc_make_input(h, n * k->count, k->dt, rank, salt);
    RK_CORE(tecore_memcpy_async(big.p, te_hptr(h), all, s));
    send = big.p;
    if (inplace) {
      recv = send + rank * bytes;
    } else {
      small = gbuf_make(c, bytes, sym, s);
      RK_CORE(tecore_memset_d8_async(small.p, 0xA5, bytes, s));
      recv = small.p;
    }
  } else {
    make_bytes(h, bytes, rank, salt);
    recv = big.p;
    RK_CORE(tecore_memset_d8_async(recv, 0xA5, all, s));
    if (inplace) {
      send = recv + rank * bytes;
    } else {
      small = gbuf_make(c, bytes, sym, s);
      send = small.p;
    }
    RK_CORE(tecore_memcpy_async(send, te_hptr(h), bytes, s));
  }
  tecomm_result_t r =
      k->rs ? tecomm_reduce_scatter_algo(c, send, recv, k->count, k->dt, k->op, k->algo, s)
            : tecomm_allgather_algo(c, send, recv, k->count, k->dt, k->algo, s);
  RK_ASSERT(r == TECOMM_SUCCESS, "%s: %s: %s", what, tecomm_result_name(r), tecomm_last_error());
  RK_CORE(tecore_memcpy_async(te_hptr(got), recv, k->rs ? bytes : all, s));
  RK_CORE(tecore_stream_synchronize(s));
  RK_OK(tecomm_comm_status(c, NULL));
  if (k->rs) {
    check_rs(got, rank, n, k, salt, ran_nccl(c, k->algo), what);
  } else {
    check_ag(got, n, k, salt, what);
    tc_rank_digest(got, all);
  }
  gbuf_check_free(c, &big, s, what);
  if (small.base) gbuf_check_free(c, &small, s, what);
  free(h);
  free(got);
}

/* The algorithms the communicator offers: auto, the IPC kernels where it
 * has them, NCCL where it has it. */
static int offered(tecomm_comm_t c, tecomm_algo_t *a) {
  char d[2048];
  int n = 0;
  RK_OK(tecomm_comm_describe(c, 0, d, sizeof d));
  a[n++] = TECOMM_ALGO_AUTO;
  if (strstr(d, "level: pool"))
    a[n++] = TECOMM_ALGO_ONESHOT, a[n++] = TECOMM_ALGO_CE, a[n++] = TECOMM_ALGO_LAMPORT;
  if (strstr(d, "nccl: on")) a[n++] = TECOMM_ALGO_NCCL;
  return n;
}

static void rank_matrix(int rank, int n, void *arg) {
  const int rs = *(const int *)arg;
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  tecomm_algo_t algos[6];
  const int na = offered(c, algos);
  const tecore_dtype_t *dts = rs ? sum_dtypes : all_dtypes;
  const size_t nd = rs ? 3 : 5;
  uint64_t salt = 1;
  for (int a = 0; a < na; a++)
    for (size_t d = 0; d < nd; d++)
      for (int op = 0; op < (rs ? 2 : 1); op++)
        for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++, salt++) {
          struct coll_case k = {rs, algos[a], dts[d], (tecomm_op_t)op, counts[i], (int)(salt % 4)};
          run_case(c, s, rank, n, &k, salt);
        }
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(reduce_scatter_every_algo_dtype_op_count) {
  static const int ranks[] = {1, 2, 3, 4};
  int rs = 1;
  tc_run_ranks(ranks[_i], rank_matrix, &rs, 110);
  tc_shm_release();
}
END_TEST

START_TEST(allgather_every_algo_dtype_count) {
  static const int ranks[] = {1, 2, 3, 4};
  int rs = 0;
  tc_run_ranks(ranks[_i], rank_matrix, &rs, 110);
  tc_expect_same_digest(ranks[_i], "all-gather results");
  tc_shm_release();
}
END_TEST

/* ---- the registered in-place level ------------------------------------------------------
 * No pool (rank 1 cannot have one, so no rank does): the IPC kernels run
 * on symmetric inputs where they lie, plain inputs go to NCCL, and the
 * IPC algorithms asked for on a plain input are refused, naming why. */
static void rank_inplace_level(int rank, int n, void *arg) {
  (void)arg;
  if (rank == 1) setenv("TECOMM_POOL_MB", "16777216", 1); /* 16 TiB: refused */
  tecomm_comm_t c = tc_rank_comm(rank, n);
  char d[4096];
  RK_OK(tecomm_comm_describe(c, 0, d, sizeof d));
  RK_ASSERT(strstr(d, "level: registered in-place"), "not at the in-place level:\n%s", d);
  const int nccl = strstr(d, "nccl: on") != NULL;
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  static const tecomm_algo_t sym_algos[] = {TECOMM_ALGO_ONESHOT, TECOMM_ALGO_CE, TECOMM_ALGO_AUTO};
  uint64_t salt = 1300;
  for (int a = 0; a < 3; a++)
    for (int kind = 2; kind < 4; kind++, salt++) {
      struct coll_case k = {1, sym_algos[a], TECORE_DTYPE_BF16, TECOMM_SUM, 1023, kind};
      run_case(c, s, rank, n, &k, salt);
      k.rs = 0;
      k.dt = TECORE_DTYPE_E5M2;
      run_case(c, s, rank, n, &k, salt);
    }
  for (int kind = 0; kind < 2 && nccl; kind++, salt++) {
    struct coll_case k = {1, TECOMM_ALGO_AUTO, TECORE_DTYPE_F32, TECOMM_MAX, 513, kind};
    run_case(c, s, rank, n, &k, salt);
    k.rs = 0;
    run_case(c, s, rank, n, &k, salt);
  }
  tecore_devptr_t plain;
  RK_CORE(tecore_mem_alloc(1 << 16, &plain));
  RK_EXPECT(TECOMM_ERR_NOT_SUPPORTED, "not symmetric",
            tecomm_reduce_scatter_algo(c, plain, plain + 32768, 64, TECORE_DTYPE_F32, TECOMM_SUM,
                                       TECOMM_ALGO_ONESHOT, s));
  RK_EXPECT(TECOMM_ERR_NOT_SUPPORTED, "not symmetric",
            tecomm_allgather_algo(c, plain, plain + 32768, 64, TECORE_DTYPE_F32, TECOMM_ALGO_CE,
                                  s));
  RK_CORE(tecore_mem_free(plain));
  RK_OK(tecomm_comm_status(c, NULL));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(registered_in_place_level) {
  tc_run_ranks(2 + _i, rank_inplace_level, NULL, 110);
  tc_shm_release();
}
END_TEST

/* ---- reduce-scatter against allreduce ----------------------------------------------
 * The block each rank keeps is, bit for bit, that block of allreduce's
 * one-shot result over the same input (one kernel, one fold), for the
 * one-shot and the copy-engine forms, block sizes that are whole 16-byte
 * lines and not. */
static void rank_rs_vs_ar(int rank, int n, void *arg) {
  (void)arg;
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  static const size_t cnts[] = {4096, 4099};
  uint64_t salt = 900;
  for (size_t d = 0; d < 3; d++)
    for (size_t i = 0; i < 2; i++, salt++) {
      const tecore_dtype_t dt = sum_dtypes[d];
      const size_t cnt = cnts[i], bytes = cnt * tecore_dtype_size(dt), all = n * bytes;
      unsigned char *h = malloc(all), *ar = malloc(all), *rs = malloc(bytes);
      RK_ASSERT(h && ar && rs, "malloc");
      tc_make_input(h, n * cnt, dt, rank, salt);
      tecore_devptr_t in, out, blk;
      RK_CORE(tecore_mem_alloc(all, &in));
      RK_CORE(tecore_mem_alloc(all, &out));
      RK_CORE(tecore_mem_alloc(bytes, &blk));
      RK_CORE(tecore_memcpy_async(in, te_hptr(h), all, s));
      RK_OK(tecomm_allreduce_algo(c, in, out, n * cnt, dt, TECOMM_SUM, TECOMM_ALGO_ONESHOT, s));
      RK_CORE(tecore_memcpy_async(te_hptr(ar), out, all, s));
      const tecomm_algo_t al[3] = {TECOMM_ALGO_ONESHOT, TECOMM_ALGO_CE, TECOMM_ALGO_LAMPORT};
      for (int a = 0; a < 3; a++) {
        RK_CORE(tecore_memset_d8_async(blk, 0xA5, bytes, s));
        RK_OK(tecomm_reduce_scatter_algo(c, in, blk, cnt, dt, TECOMM_SUM, al[a], s));
        RK_CORE(tecore_memcpy_async(te_hptr(rs), blk, bytes, s));
        RK_CORE(tecore_stream_synchronize(s));
        RK_ASSERT(memcmp(rs, ar + rank * bytes, bytes) == 0,
                  "%d ranks, %s, %s, count %zu: the block differs from allreduce's bits", n,
                  tecomm_algo_name(al[a]), tecore_dtype_name(dt), cnt);
      }
      RK_CORE(tecore_mem_free(in));
      RK_CORE(tecore_mem_free(out));
      RK_CORE(tecore_mem_free(blk));
      free(h);
      free(ar);
      free(rs);
    }
  RK_OK(tecomm_comm_status(c, NULL));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(reduce_scatter_is_allreduce_block_bits) {
  tc_run_ranks(2 + 2 * _i, rank_rs_vs_ar, NULL, 110);
  tc_shm_release();
}
END_TEST

/* ---- Lamport: back to back, mixed, sentinel bytes -------------------------------------
 * Lamport reduce-scatter, all-gather of its blocks and allreduce, each on
 * buffers of its own, ITERS rounds enqueued back to back with no sync
 * (the three rotating buffers, each collective re-arming what the one
 * before used, dtypes changing between calls), then checked: the block
 * against the float64 reference and the fold's bits, the all-gather of the
 * blocks byte for byte the allreduce's result (one fold, one rounding).
 * Then an all-gather of bytes that are the armed pattern (0x00 0x80: -0.0
 * in bf16 and f16, E4M3/E5M2 zero and -0, the f32 word 0x80008000) moves
 * them exactly. */
#define LM_ITERS 6

/* h: the input, kept until lamport_check (the copy is still queued) */
static void lamport_round(tecomm_comm_t c, tecore_stream_t s, int rank, int n, int it,
                          tecore_devptr_t *b, unsigned char **hp) {
  const tecore_dtype_t dt = sum_dtypes[it % 3];
  const size_t cnt = 1000 + 37 * (size_t)it, bytes = cnt * tecore_dtype_size(dt), all = n * bytes;
  unsigned char *h = *hp = malloc(all);
  RK_ASSERT(h, "malloc");
  tc_make_input(h, n * cnt, dt, rank, 7000 + (uint64_t)it);
  for (int i = 0; i < 4; i++) RK_CORE(tecore_mem_alloc(all, &b[i])); /* in, blk, ag, ar */
  RK_CORE(tecore_memcpy_async(b[0], te_hptr(h), all, s));
  RK_CORE(tecore_memset_d8_async(b[1], 0xA5, all, s));
  RK_CORE(tecore_memset_d8_async(b[2], 0xA5, all, s));
  RK_CORE(tecore_memset_d8_async(b[3], 0xA5, all, s));
  RK_OK(tecomm_reduce_scatter_algo(c, b[0], b[1], cnt, dt, TECOMM_SUM, TECOMM_ALGO_LAMPORT, s));
  RK_OK(tecomm_allgather_algo(c, b[1], b[2], cnt, dt, TECOMM_ALGO_LAMPORT, s));
  RK_OK(tecomm_allreduce_algo(c, b[0], b[3], n * cnt, dt, TECOMM_SUM, TECOMM_ALGO_LAMPORT, s));
}

static void lamport_check(int rank, int n, int it, const tecore_devptr_t *b, tecore_stream_t s) {
  const tecore_dtype_t dt = sum_dtypes[it % 3];
  const size_t cnt = 1000 + 37 * (size_t)it, bytes = cnt * tecore_dtype_size(dt), all = n * bytes;
  unsigned char *ag = malloc(all), *ar = malloc(all);
  RK_ASSERT(ag && ar, "malloc");
  RK_CORE(tecore_memcpy_async(te_hptr(ag), b[2], all, s));
  RK_CORE(tecore_memcpy_async(te_hptr(ar), b[3], all, s));
  RK_CORE(tecore_stream_synchronize(s));
  char what[128];
  snprintf(what, sizeof what, "%d ranks, lamport round %d, %s", n, it, tecore_dtype_name(dt));
  const struct coll_case k = {1, TECOMM_ALGO_LAMPORT, dt, TECOMM_SUM, cnt, 0};
  check_rs(ag + rank * bytes, rank, n, &k, 7000 + (uint64_t)it, 0, what);
  RK_ASSERT(memcmp(ag, ar, all) == 0, "%s: the all-gathered blocks differ from allreduce's bits",
            what);
  for (int i = 0; i < 4; i++) RK_CORE(tecore_mem_free(b[i]));
  free(ag);
  free(ar);
}

/* All-gather of the armed pattern, one byte a rank marked. */
static void lamport_sentinel_bytes(tecomm_comm_t c, tecore_stream_t s, int rank, int n,
                                   tecore_dtype_t dt) {
  const size_t cnt = 4099, bytes = cnt * tecore_dtype_size(dt), all = n * bytes;
  unsigned char *h = malloc(bytes), *got = malloc(all);
  RK_ASSERT(h && got, "malloc");
  for (size_t i = 0; i < bytes; i++) h[i] = i % 2 ? 0x80 : 0x00;
  h[(size_t)rank * 3 % bytes] = (unsigned char)(rank + 1);
  struct gbuf send = gbuf_make(c, bytes, 0, s), recv = gbuf_make(c, all, 0, s);
  RK_CORE(tecore_memcpy_async(send.p, te_hptr(h), bytes, s));
  RK_CORE(tecore_memset_d8_async(recv.p, 0xA5, all, s));
  RK_OK(tecomm_allgather_algo(c, send.p, recv.p, cnt, dt, TECOMM_ALGO_LAMPORT, s));
  RK_CORE(tecore_memcpy_async(te_hptr(got), recv.p, all, s));
  RK_CORE(tecore_stream_synchronize(s));
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < bytes; i++) {
      unsigned char want = i == (size_t)r * 3 % bytes ? (unsigned char)(r + 1) : i % 2 ? 0x80 : 0;
      RK_ASSERT(got[r * bytes + i] == want, "%s: rank %d's byte %zu: got 0x%02x, want 0x%02x",
                tecore_dtype_name(dt), r, i, got[r * bytes + i], want);
    }
  gbuf_check_free(c, &send, s, "sentinel bytes: send");
  gbuf_check_free(c, &recv, s, "sentinel bytes: recv");
  free(h);
  free(got);
}

static void rank_lamport_mix(int rank, int n, void *arg) {
  (void)arg;
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  tecore_devptr_t b[LM_ITERS][4];
  unsigned char *h[LM_ITERS];
  for (int it = 0; it < LM_ITERS; it++) lamport_round(c, s, rank, n, it, b[it], &h[it]);
  for (int it = 0; it < LM_ITERS; it++) {
    lamport_check(rank, n, it, b[it], s);
    free(h[it]);
  }
  for (size_t d = 0; d < sizeof all_dtypes / sizeof all_dtypes[0]; d++)
    lamport_sentinel_bytes(c, s, rank, n, all_dtypes[d]);
  RK_OK(tecomm_comm_status(c, NULL));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(lamport_back_to_back_and_sentinel_bytes) {
  tc_run_ranks(2 + _i, rank_lamport_mix, NULL, 110);
  tc_shm_release();
}
END_TEST

/* ---- the verbs level -----------------------------------------------------------------
 * Ranks of several "nodes" (TECOMM_NODE_MAP) over the soft loopback
 * device, the links ahead of verbs off: flat (one rank a node: the ring's
 * all-gather, reduce-scatter over the verbs allreduce) and hierarchical
 * (reduce-scatter over the hierarchy's allreduce; the all-gather gathers
 * in the node, the leaders over verbs, then spread in the node: 2 nodes
 * of 2 ranks, 2 + 1 uneven, and 2 + 1 interleaved (rank 1 alone on
 * node 1), every dtype, E4M3 too, checked to the byte, in place and
 * not. */
static void rank_verbs(int rank, int n, void *arg) {
  const char *map = arg;
  setenv("TECOMM_VERBS_LIB", "soft", 1);
  setenv("TECOMM_NODE_MAP", map, 1);
  setenv("TECOMM_VERBS_CHUNK_KB", "64", 1);
  setenv("TECOMM_POOL_MB", "16", 1);
  setenv("TECOMM_NCCL", "0", 1);
  setenv("TECOMM_MNNVL_ENABLE", "0", 1);
  tecomm_comm_t c = tc_rank_comm(rank, n);
  char d[4096];
  RK_OK(tecomm_comm_describe(c, 0, d, sizeof d));
  RK_ASSERT(strstr(d, "level: verbs"), "not at the verbs level:\n%s", d);
  const int hier = strstr(d, "hierarchical") != NULL;
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  static const size_t vcounts[] = {1, 7, 4097, 20000};
  uint64_t salt = 700;
  for (size_t t = 0; t < 5; t++)
    for (size_t i = 0; i < sizeof vcounts / sizeof vcounts[0]; i++, salt++) {
      tecomm_algo_t al = salt & 1 ? TECOMM_ALGO_VERBS : TECOMM_ALGO_AUTO;
      struct coll_case k = {0, al, all_dtypes[t], TECOMM_SUM, vcounts[i], (int)(salt % 2)};
      if (t < 3) {
        k.rs = 1;
        k.op = (tecomm_op_t)(salt / 2 % 2);
        run_case(c, s, rank, n, &k, salt);
        k.rs = 0;
      }
      run_case(c, s, rank, n, &k, salt + 10000);
    }
  RK_ASSERT(hier == (strchr(map, '0') != strrchr(map, '0')), "hierarchical: %d, map %s", hier,
            map);
  RK_OK(tecomm_comm_status(c, NULL));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(verbs_flat_and_hierarchical) {
  static const char *const maps[] = {"0,1", "0,1,2", "0,0,1,1", "0,0,1", "0,1,0"};
  setenv("TECOMM_VERBS_LIB", "soft", 1);
  int nd = 0;
  char names[2][64];
  if (tecomm_verbs_devices(&nd, names, 2) != TECOMM_SUCCESS) {
    printf("# no verbs in this build: %s\n", tecomm_last_error());
    return;
  }
  const char *map = maps[_i];
  tc_run_ranks((int)(strlen(map) + 1) / 2, rank_verbs, (void *)map, 110);
  tc_shm_release();
}
END_TEST

/* A rank of the hierarchical all-gather killed between calls (2 nodes of
 * 2; rank 3, a non-leader, dies): every survivor's next call or status
 * fails within TECOMM_TIMEOUT and slack, its stream comes back, and the
 * failure is sticky.  The host agreement is off: across "nodes" it runs
 * over the caller's bootstrap, this harness's shared-memory allgather,
 * which gives up on a dead rank only after 20 s; the data path must find
 * it: the dead rank's leader times out in its node gather and fails its
 * endpoint, the other leader's ring fails and stops its node. */
static double now_secs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void rank_verbs_killed(int rank, int n, void *arg) {
  (void)arg;
  setenv("TECOMM_VERBS_LIB", "soft", 1);
  setenv("TECOMM_NODE_MAP", "0,0,1,1", 1);
  setenv("TECOMM_NCCL", "0", 1);
  setenv("TECOMM_MNNVL_ENABLE", "0", 1);
  setenv("TECOMM_TIMEOUT", "1000", 1);
  setenv("TECOMM_HOST_AGREE", "0", 1);
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  tecore_devptr_t buf;
  RK_CORE(tecore_mem_alloc(1 << 16, &buf));
  RK_CORE(tecore_memset_d8_async(buf, 0x3c, 1 << 16, s));
  RK_OK(tecomm_allgather(c, buf + 32768, buf, 1000, TECORE_DTYPE_E4M3, s));
  RK_CORE(tecore_stream_synchronize(s));
  RK_ASSERT(tc_shm_barrier(tc_shm) == 0, "barrier");
  if (rank == n - 1) raise(SIGKILL);
  double t0 = now_secs();
  tecomm_result_t r = tecomm_allgather(c, buf + 32768, buf, 1000, TECORE_DTYPE_E4M3, s);
  RK_ASSERT(te_stream_wait(s, 5000) == TECORE_SUCCESS, "the stream did not come back in 5 s");
  if (r == TECOMM_SUCCESS) r = tecomm_comm_status(c, NULL);
  for (int i = 0; i < 20 && r == TECOMM_SUCCESS; i++) {   /* the leader's failure reaches it */
    usleep(100 * 1000);
    r = tecomm_comm_status(c, NULL);
  }
  const double secs = now_secs() - t0;
  RK_ASSERT(r == TECOMM_ERR_TIMEOUT || r == TECOMM_ERR_ABORTED || r == TECOMM_ERR_SYSTEM,
            "after rank %d died: %s (%s)", n - 1, tecomm_result_name(r), tecomm_last_error());
  RK_ASSERT(secs <= 4.0, "failed after %.2f s, want <= 4 s (TECOMM_TIMEOUT 1 s): %s (%s)", secs,
            tecomm_result_name(r), tecomm_last_error());
  tecomm_result_t again = tecomm_allgather(c, buf + 32768, buf, 1000, TECORE_DTYPE_E4M3, s);
  RK_ASSERT(again != TECOMM_SUCCESS, "a call after the failure succeeded");
  (void)tecore_stream_synchronize(s);
  RK_CORE(tecore_mem_free(buf));
  RK_CORE(tecore_stream_destroy(s));
  (void)tecomm_comm_destroy(c);
}

START_TEST(verbs_hier_allgather_killed_rank) {
  setenv("TECOMM_VERBS_LIB", "soft", 1);
  int nd = 0;
  char names[2][64];
  if (tecomm_verbs_devices(&nd, names, 2) != TECOMM_SUCCESS) return;
  tc_run_ranks_ex(4, rank_verbs_killed, NULL, 40, 3);
  tc_shm_release();
}
END_TEST

/* ---- argument errors ---------------------------------------------------------------- */

static void rank_args(int rank, int n, void *arg) {
  (void)arg;
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  const tecore_dtype_t F = TECORE_DTYPE_F32;
  tecore_devptr_t a, sym;
  RK_CORE(tecore_mem_alloc(4096, &a));
  RK_OK(tecomm_mem_alloc(c, 256, &sym));
  const tecomm_result_t INV = TECOMM_ERR_INVALID;
  RK_EXPECT(INV, "comm", tecomm_reduce_scatter(NULL, a, a + 2048, 8, F, TECOMM_SUM, s));
  RK_EXPECT(INV, "count is 0", tecomm_reduce_scatter(c, a, a + 2048, 0, F, TECOMM_SUM, s));
  RK_EXPECT(INV, "count is 0", tecomm_allgather(c, a, a + 2048, 0, F, s));
  RK_EXPECT(INV, "tecomm_allgather moves it",
            tecomm_reduce_scatter(c, a, a + 2048, 8, TECORE_DTYPE_E4M3, TECOMM_SUM, s));
  RK_EXPECT(INV, "dtype 99", tecomm_allgather(c, a, a + 2048, 8, (tecore_dtype_t)99, s));
  RK_EXPECT(INV, "op 7", tecomm_reduce_scatter(c, a, a + 2048, 8, F, (tecomm_op_t)7, s));
  RK_EXPECT(INV, "send is 0", tecomm_reduce_scatter(c, 0, a, 8, F, TECOMM_SUM, s));
  RK_EXPECT(INV, "recv is 0", tecomm_allgather(c, a, 0, 8, F, s));
  RK_EXPECT(INV, "aligned", tecomm_allgather(c, a + 2, a + 2048, 8, F, s));
  RK_EXPECT(INV, "algo 99",
            tecomm_reduce_scatter_algo(c, a, a + 2048, 8, F, TECOMM_SUM, (tecomm_algo_t)99, s));
  RK_EXPECT(TECOMM_ERR_NOT_SUPPORTED, "twoshot",
            tecomm_reduce_scatter_algo(c, a, a + 2048, 8, F, TECOMM_SUM, TECOMM_ALGO_TWOSHOT, s));
  /* Lamport's buffers (2 MiB a slot by default) take all-gather blocks of
   * half that: recv is never touched */
  if (n > 1)
    RK_EXPECT(TECOMM_ERR_NOT_SUPPORTED, "at most",
              tecomm_allgather_algo(c, a, a + (1u << 24), 300000, F, TECOMM_ALGO_LAMPORT, s));
  /* overlaps that are not the in-place form: recv one element into send's
   * blocks, and send overlapping another rank's slot */
  const size_t mine = (size_t)rank * 32;
  RK_EXPECT(INV, "in-place form",
            tecomm_reduce_scatter(c, a, a + mine + 4, 8, F, TECOMM_SUM, s));
  RK_EXPECT(INV, "in-place form", tecomm_allgather(c, a + mine + 4, a, 8, F, s));
  /* recv inside symmetric memory too small: 64 elements a block need
   * nranks * 256 bytes, the allocation has 256 */
  if (n > 1) RK_EXPECT(INV, "run past", tecomm_allgather(c, a, sym, 64, F, s));
  RK_EXPECT(INV, "run past", tecomm_reduce_scatter(c, a, sym + 128, 64, F, TECOMM_SUM, s));
  RK_OK(tecomm_comm_status(c, NULL));
  RK_OK(tecomm_mem_free(c, sym));
  RK_CORE(tecore_mem_free(a));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(argument_errors_named) {
  tc_run_ranks(_i + 1, rank_args, NULL, 60);
  tc_shm_release();
}
END_TEST

/* ---- ranks that disagree ----------------------------------------------------------- */

/* how: 0 counts differ, 1 dtypes differ, 2 one rank reduce-scatters while
 * the others all-gather, 3 one rank's input is symmetric memory, the
 * others' is not (the kernels would read garbage on the others) */
struct mismatch_case {
  tecomm_algo_t algo;
  int how;
};

static void rank_mismatch(int rank, int n, void *arg) {
  const struct mismatch_case *k = arg;
  setenv("TECOMM_TIMEOUT", "5000", 1); /* a mismatch must be found, not timed out */
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  tecore_devptr_t plain, a, b, sym; /* sym: freed by destroy (the communicator fails) */
  RK_OK(tecomm_mem_alloc(c, 1 << 16, &sym));
  RK_CORE(tecore_mem_alloc(1 << 16, &plain));
  a = plain;
  RK_CORE(tecore_mem_alloc(1 << 16, &b));
  RK_CORE(tecore_memset_d8_async(a, 0x3c, 1 << 16, s));
  /* a first call that agrees: the staging buffer exists, so the mismatch
   * is the kernels' or the host agreement's to find */
  RK_OK(tecomm_reduce_scatter_algo(c, a, b, 512, TECORE_DTYPE_F32, TECOMM_SUM, k->algo, s));
  RK_CORE(tecore_stream_synchronize(s));
  RK_ASSERT(tc_shm_barrier(tc_shm) == 0, "barrier");
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  size_t count = k->how == 0 && rank == 1 ? 300 : 200;
  tecore_dtype_t dt = k->how == 1 && rank == 1 ? TECORE_DTYPE_BF16 : TECORE_DTYPE_F32;
  if (k->how == 3 && rank == 0) a = sym;
  tecomm_result_t r =
      k->how == 2 && rank == 0
          ? tecomm_allgather_algo(c, a, b, count, dt, k->algo, s)
          : tecomm_reduce_scatter_algo(c, a, b, count, dt, TECOMM_SUM, k->algo, s);
  if (r == TECOMM_SUCCESS) { /* enqueued: the kernels find it */
    tecore_result_t w = te_stream_wait(s, 5000);
    RK_ASSERT(w == TECORE_SUCCESS, "the stream did not come back within 5 s");
    r = tecomm_comm_status(c, NULL);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  RK_ASSERT(r == TECOMM_ERR_MISMATCH, "%s, case %d: got %s (%s)", tecomm_algo_name(k->algo),
            k->how, tecomm_result_name(r), tecomm_last_error());
  static const char *const says[] = {"count", "dtype", "all-gather", "symmetric send in place"};
  const char *want = says[k->how];
  RK_ASSERT(strstr(tecomm_last_error(), want), "the detail does not name \"%s\": %s", want,
            tecomm_last_error());
  RK_ASSERT(secs <= 2.0, "TECOMM_ERR_MISMATCH after %.2f s, want <= 2 s", secs);
  RK_CORE(tecore_mem_free(plain));
  RK_CORE(tecore_mem_free(b));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(mismatched_calls_fail_every_rank) {
  static const tecomm_algo_t al[] = {TECOMM_ALGO_ONESHOT, TECOMM_ALGO_CE, TECOMM_ALGO_NCCL,
                                     TECOMM_ALGO_LAMPORT};
  struct mismatch_case k = {al[_i / 4], _i % 4};
  /* NCCL and Lamport read each rank's own buffer, wherever it lies */
  if (k.how == 3 && (k.algo == TECOMM_ALGO_NCCL || k.algo == TECOMM_ALGO_LAMPORT)) return;
  if (k.algo == TECOMM_ALGO_NCCL && !tc_on_vdev()) return; /* NCCL is there on vdev only for sure */
  tc_run_ranks(2 + (_i & 1), rank_mismatch, &k, 30);
  tc_shm_release();
}
END_TEST

/* ---- a killed rank -------------------------------------------------------------------- */

struct killed_case {
  tecomm_algo_t algo;
  int rs;
};

static tecomm_result_t killed_call(tecomm_comm_t c, const struct killed_case *k,
                                   tecore_devptr_t buf, tecore_stream_t s) {
  return k->rs ? tecomm_reduce_scatter_algo(c, buf, buf + 32768, 1000, TECORE_DTYPE_F32, TECOMM_SUM,
                                            k->algo, s)
               : tecomm_allgather_algo(c, buf + 32768, buf, 1000, TECORE_DTYPE_BF16, k->algo, s);
}

static void rank_killed(int rank, int n, void *arg) {
  const struct killed_case *k = arg;
  setenv("TECOMM_TIMEOUT", "1000", 1);
  /* NCCL's own answer to a dead peer (the host agreement would find it
   * first: t/comm/check_agree.c) */
  if (k->algo == TECOMM_ALGO_NCCL) setenv("TECOMM_HOST_AGREE", "0", 1);
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  tecore_devptr_t buf;
  RK_CORE(tecore_mem_alloc(1 << 16, &buf));
  RK_CORE(tecore_memset_d8_async(buf, 0x3c, 1 << 16, s));
  RK_OK(killed_call(c, k, buf, s));
  RK_CORE(tecore_stream_synchronize(s));
  RK_ASSERT(tc_shm_barrier(tc_shm) == 0, "barrier");
  if (rank == n - 1) raise(SIGKILL); /* between calls: the peers wait in the next one */
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  RK_OK(killed_call(c, k, buf, s));
  tecore_result_t w = te_stream_wait(s, 5000);
  RK_ASSERT(w == TECORE_SUCCESS, "the stream did not come back within 5 s");
  int peer = -2;
  tecomm_result_t st = tecomm_comm_status(c, &peer);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  RK_ASSERT(st == TECOMM_ERR_TIMEOUT, "status after a peer died: %s (%s)", tecomm_result_name(st),
            tecomm_last_error());
  const int nccl = k->algo == TECOMM_ALGO_NCCL;
  const char *says = nccl ? "NCCL reports error 6" : "rank 2";
  RK_ASSERT(peer == (nccl ? -1 : n - 1), "status names peer %d", peer);
  RK_ASSERT(strstr(tecomm_last_error(), says), "detail lacks \"%s\": %s", says,
            tecomm_last_error());
  RK_ASSERT(secs <= 2.0, "TIMEOUT after %.2f s, want <= TECOMM_TIMEOUT + 1 s = 2 s", secs);
  /* sticky: the next call is refused at once with the same failure */
  RK_EXPECT(TECOMM_ERR_TIMEOUT, says, killed_call(c, k, buf, s));
  RK_CORE(tecore_mem_free(buf));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(killed_rank_timeout) {
  static const tecomm_algo_t al[] = {TECOMM_ALGO_ONESHOT, TECOMM_ALGO_CE, TECOMM_ALGO_NCCL,
                                     TECOMM_ALGO_LAMPORT};
  struct killed_case k = {al[_i / 2], _i % 2};
  if (k.algo == TECOMM_ALGO_NCCL && !tc_on_vdev()) return; /* a real NCCL's own timing */
  tc_run_ranks_ex(3, rank_killed, &k, 30, 2);
  tc_shm_release();
}
END_TEST

/* ---- abort ---------------------------------------------------------------------------- */

/* Rank 0's call waits for rank 1, which never makes it: rank 0's abort
 * ends the wait (the stream comes back), the call's error is
 * TECOMM_ERR_ABORTED and so is every later one. */
static void rank_abort(int rank, int n, void *arg) {
  const int rs = *(const int *)arg;
  setenv("TECOMM_TIMEOUT", "30000", 1); /* the abort ends it, not the timeout */
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  tecore_devptr_t buf;
  RK_CORE(tecore_mem_alloc(1 << 16, &buf));
  RK_CORE(tecore_memset_d8_async(buf, 0x3c, 1 << 16, s));
  /* one call together first: the staging buffer exists (its growth is a
   * host exchange, which the lone call must not need) */
  RK_OK(tecomm_reduce_scatter_algo(c, buf, buf + 32768, 100, TECORE_DTYPE_F32, TECOMM_SUM,
                                   TECOMM_ALGO_ONESHOT, s));
  RK_CORE(tecore_stream_synchronize(s));
  RK_ASSERT(tc_shm_barrier(tc_shm) == 0, "barrier");
  if (rank == 0) {
    RK_OK(rs ? tecomm_reduce_scatter_algo(c, buf, buf + 32768, 100, TECORE_DTYPE_F32, TECOMM_SUM,
                                          TECOMM_ALGO_ONESHOT, s)
             : tecomm_allgather_algo(c, buf + 32768, buf, 100, TECORE_DTYPE_F16,
                                     TECOMM_ALGO_ONESHOT, s));
    usleep(300000);
    RK_OK(tecomm_comm_abort(c));
    tecore_result_t w = te_stream_wait(s, 3000);
    RK_ASSERT(w == TECORE_SUCCESS, "the stream did not come back within 3 s of the abort");
    RK_EXPECT(TECOMM_ERR_ABORTED, "aborted", tecomm_comm_status(c, NULL));
    RK_EXPECT(TECOMM_ERR_ABORTED, "aborted",
              tecomm_allgather(c, buf + 32768, buf, 100, TECORE_DTYPE_E4M3, s));
  }
  RK_ASSERT(tc_shm_barrier(tc_shm) == 0, "barrier");
  if (rank != 0) RK_OK(tecomm_comm_abort(c)); /* its peer is gone from the protocol */
  RK_CORE(tecore_mem_free(buf));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(abort_ends_a_waiting_call) {
  int rs = _i;
  tc_run_ranks(2, rank_abort, &rs, 60);
  tc_shm_release();
}
END_TEST

/* ---- graph capture ---------------------------------------------------------------------- */

#define G_COUNT 777
#define G_REPLAYS 20

static void rank_graph(int rank, int n, void *arg) {
  (void)arg;
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  tecomm_algo_t al[6];
  const int na = offered(c, al);
  const tecore_dtype_t dt = TECORE_DTYPE_BF16;
  const size_t bytes = G_COUNT * 2, all = n * bytes;
  tecore_devptr_t rs_in[6], rs_out[6], ag_in[6], ag_out[6];
  for (int a = 0; a < na; a++) {
    RK_CORE(tecore_mem_alloc(all, &rs_in[a]));
    RK_CORE(tecore_mem_alloc(bytes, &rs_out[a]));
    RK_CORE(tecore_mem_alloc(bytes, &ag_in[a]));
    RK_CORE(tecore_mem_alloc(all, &ag_out[a]));
    RK_CORE(tecore_memset_d8_async(rs_in[a], 0, all, s));
    RK_CORE(tecore_memset_d8_async(ag_in[a], 0, bytes, s));
    /* eager first: the scratch and staging a capture may not allocate */
    RK_OK(tecomm_reduce_scatter_algo(c, rs_in[a], rs_out[a], G_COUNT, dt, TECOMM_SUM, al[a], s));
    RK_OK(tecomm_allgather_algo(c, ag_in[a], ag_out[a], G_COUNT, dt, al[a], s));
  }
  RK_CORE(tecore_stream_synchronize(s));
  tecore_graph_t g;
  tecore_graph_exec_t e;
  RK_CORE(tecore_stream_begin_capture(s, TECORE_CAPTURE_GLOBAL));
  for (int a = 0; a < na; a++) {
    RK_OK(tecomm_reduce_scatter_algo(c, rs_in[a], rs_out[a], G_COUNT, dt, TECOMM_SUM, al[a], s));
    RK_OK(tecomm_allgather_algo(c, ag_in[a], ag_out[a], G_COUNT, dt, al[a], s));
  }
  RK_CORE(tecore_stream_end_capture(s, &g));
  RK_CORE(tecore_graph_instantiate(&e, g));
  unsigned char *h_rs[6], *h_ag[6], *got = malloc(all);
  for (int a = 0; a < na; a++) h_rs[a] = malloc(all), h_ag[a] = malloc(bytes);
  for (int it = 0; it < G_REPLAYS; it++) {
    for (int a = 0; a < na; a++) { /* new inputs, poisoned outputs */
      uint64_t salt = 5000 + (uint64_t)it * 8 + (uint64_t)a;
      tc_make_input(h_rs[a], n * G_COUNT, dt, rank, salt);
      make_bytes(h_ag[a], bytes, rank, salt);
      RK_CORE(tecore_memcpy_async(rs_in[a], te_hptr(h_rs[a]), all, s));
      RK_CORE(tecore_memcpy_async(ag_in[a], te_hptr(h_ag[a]), bytes, s));
      RK_CORE(tecore_memset_d8_async(rs_out[a], 0xA5, bytes, s));
      RK_CORE(tecore_memset_d8_async(ag_out[a], 0xA5, all, s));
    }
    RK_CORE(tecore_graph_launch(e, s));
    for (int a = 0; a < na; a++) {
      uint64_t salt = 5000 + (uint64_t)it * 8 + (uint64_t)a;
      char what[128];
      snprintf(what, sizeof what, "replay %d, %s", it, tecomm_algo_name(al[a]));
      struct coll_case k = {1, al[a], dt, TECOMM_SUM, G_COUNT, 0};
      RK_CORE(tecore_memcpy_async(te_hptr(got), rs_out[a], bytes, s));
      RK_CORE(tecore_stream_synchronize(s));
      check_rs(got, rank, n, &k, salt, ran_nccl(c, al[a]), what);
      k.rs = 0;
      RK_CORE(tecore_memcpy_async(te_hptr(got), ag_out[a], all, s));
      RK_CORE(tecore_stream_synchronize(s));
      check_ag(got, n, &k, salt, what);
    }
  }
  RK_OK(tecomm_comm_status(c, NULL));
  RK_CORE(tecore_graph_exec_destroy(e));
  RK_CORE(tecore_graph_destroy(g));
  for (int a = 0; a < na; a++) {
    RK_CORE(tecore_mem_free(rs_in[a]));
    RK_CORE(tecore_mem_free(rs_out[a]));
    RK_CORE(tecore_mem_free(ag_in[a]));
    RK_CORE(tecore_mem_free(ag_out[a]));
    free(h_rs[a]);
    free(h_ag[a]);
  }
  free(got);
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(graph_replays_new_data) {
  tc_run_ranks(2 + _i, rank_graph, NULL, 110);
  tc_shm_release();
}
END_TEST

static Suite *coll_suite(void) {
  setenv("TECORE_VDEV_DEVICES", "8", 0);
  Suite *s = suite_create("comm_coll");
  TCase *tc = te_tcase(s, "matrix", 0);
  tcase_add_loop_test(tc, reduce_scatter_every_algo_dtype_op_count, 0, 4);
  tcase_add_loop_test(tc, allgather_every_algo_dtype_count, 0, 4);
  tcase_add_loop_test(tc, reduce_scatter_is_allreduce_block_bits, 0, 2);
  tcase_add_loop_test(tc, lamport_back_to_back_and_sentinel_bytes, 0, 3);
  tcase_add_loop_test(tc, registered_in_place_level, 0, 2);
  tc = te_tcase(s, "verbs", 0);
  tcase_add_loop_test(tc, verbs_flat_and_hierarchical, 0, 5);
  tcase_add_test(tc, verbs_hier_allgather_killed_rank);
  tc = te_tcase(s, "errors", 0);
  tcase_add_loop_test(tc, argument_errors_named, 0, 2);
  tc = te_tcase(s, "agreement", 0);
  tcase_add_loop_test(tc, mismatched_calls_fail_every_rank, 0, 16);
  tc = te_tcase(s, "timeout", 0);
  tcase_add_loop_test(tc, killed_rank_timeout, 0, 8);
  tcase_add_loop_test(tc, abort_ends_a_waiting_call, 0, 2);
  tc = te_tcase(s, "graph", 0);
  tcase_add_loop_test(tc, graph_replays_new_data, 0, 2);
  return s;
}

TE_TEST_MAIN(coll_suite, TE_TEST_DEVICE)
