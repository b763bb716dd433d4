/* SPDX-License-Identifier: Apache-2.0 */
/* coll.c -- tecomm_reduce_scatter and tecomm_allgather: argument checks,
 * the communicator's state (a device-side timeout surfaces here, on the
 * next call, as for allreduce), the algorithm, then the level that runs
 * it (level.h: run_coll).
 *
 * The algorithms: lamport (the IPC Lamport kernel: each rank pushes into
 * the peers' buffers, no barrier, any send), oneshot (the IPC kernels:
 * one-shot over the block each rank keeps, or the gather kernel), ce (the
 * same with the copy engines moving the bytes), nccl, verbs.  auto takes
 * lamport where the block fits its buffers and allreduce's Lamport edge
 * (tc_table_edges), else the IPC kernels where the communicator has them
 * for this input (the pool, or symmetric memory at the registered
 * in-place level), else NCCL, else verbs.  TECOMM_ALGO
 * names allreduce algorithms and does not apply here.  One rank: a copy. */
#include "level.h"
#include "base/agree.h"
#include <string.h>

/* One call as the common path takes it: the public call's arguments. */
struct coll_q {
  tc_coll_t coll;
  tecore_devptr_t send, recv;
  size_t count;
  tecore_dtype_t dtype;
  tecomm_op_t op; /* reduce-scatter */
  tecomm_algo_t asked;
  tecore_stream_t stream;
  const char *fn;
};

static const char *coll_name(tc_coll_t k) {
  return k == TC_COLL_REDUCE_SCATTER ? "reduce-scatter" : "all-gather";
}

static int sums_dtype(tecore_dtype_t d) {
  return d == TECORE_DTYPE_F32 || d == TECORE_DTYPE_BF16 || d == TECORE_DTYPE_F16;
}

static int fp8_dtype(tecore_dtype_t d) {
  return d == TECORE_DTYPE_E4M3 || d == TECORE_DTYPE_E5M2;
}

/* The algorithms the two collectives have. */
static int coll_algo(tecomm_algo_t a) {
  return a == TECOMM_ALGO_AUTO || a == TECOMM_ALGO_ONESHOT || a == TECOMM_ALGO_CE ||
         a == TECOMM_ALGO_LAMPORT || a == TECOMM_ALGO_NCCL || a == TECOMM_ALGO_VERBS;
}

/* count, dtype, op and algo. */
static tecomm_result_t check_kind(const struct coll_q *q) {
  const char *fn = q->fn;
  TC_ARG(q->count > 0, "%s: count is 0", fn);
  TC_ARG(q->count <= ((size_t)1 << 40), "%s: count %zu is too large", fn, q->count);
  if (q->coll == TC_COLL_REDUCE_SCATTER) {
    TC_ARG(sums_dtype(q->dtype),
           "%s: dtype %d (%s) is not F32, BF16 or F16%s", fn, (int)q->dtype,
           tecore_dtype_name(q->dtype),
           fp8_dtype(q->dtype) ? " (FP8 is not summed here; tecomm_allgather moves it)" : "");
    TC_ARG(q->op == TECOMM_SUM || q->op == TECOMM_MAX,
           "%s: op %d is not TECOMM_SUM or TECOMM_MAX", fn, (int)q->op);
  } else {
    TC_ARG(sums_dtype(q->dtype) || fp8_dtype(q->dtype),
           "%s: dtype %d (%s) is not F32, BF16, F16, E4M3 or E5M2", fn, (int)q->dtype,
           tecore_dtype_name(q->dtype));
  }
  TC_ARG((unsigned)q->asked < TECOMM_ALGO_COUNT_, "%s: algo %d is not a tecomm_algo", fn,
         (int)q->asked);
  if (!coll_algo(q->asked))
    return TC_ERR(TECOMM_ERR_NOT_SUPPORTED,
                  "%s: algorithm %s does not run %s (auto, oneshot, lamport, ce, nccl and verbs "
                  "do)",
                  fn,
                  tecomm_algo_name(q->asked), coll_name(q->coll));
  return TECOMM_SUCCESS;
}

/* send and recv: set, aligned, overlapping only in the in-place form,
 * inside their symmetric allocations. */
static tecomm_result_t check_buffers(struct tecomm_comm *c, const struct coll_q *q) {
  const char *fn = q->fn;
  const tecore_devptr_t send = q->send, recv = q->recv;
  TC_ARG(send, "%s: send is 0", fn);
  TC_ARG(recv, "%s: recv is 0", fn);
  const size_t esz = tecore_dtype_size(q->dtype);
  TC_ARG(send % esz == 0 && recv % esz == 0, "%s: send or recv is not aligned to %zu bytes", fn,
         esz);
  const size_t bytes = q->count * esz, all = (size_t)c->nranks * bytes, mine = c->rank * bytes;
  const int rs = q->coll == TC_COLL_REDUCE_SCATTER;
  const size_t sb = rs ? all : bytes, rb = rs ? bytes : all;
  const int in_place = rs ? recv == send + mine : send == recv + mine;
  TC_ARG(in_place || send + sb <= recv || recv + rb <= send,
         "%s: send and recv overlap without being the in-place form (%s)", fn,
         rs ? "recv == send + rank * count * esize" : "send == recv + rank * count * esize");
  TC_CHECK(tc_sym_bounds(c, send, sb, "send", fn));
  TC_CHECK(tc_sym_bounds(c, recv, rb, "recv", fn));
  return TECOMM_SUCCESS;
}

/* The IPC kernels can run the call: their workspace on every rank, and
 * the input where they read it (the pool stages any; without a pool,
 * symmetric memory only). */
static int ipc_ready(const struct tecomm_comm *c, const struct tc_call *k) {
  if (!c->ws.me || c->n_kernels != c->nranks) return 0;
  return c->level == TC_LEVEL_POOL || (c->level == TC_LEVEL_INPLACE && k->seg);
}

/* The Lamport kernel can run the call: the workspace on every rank (any
 * send: it pushes it itself), and the block within limit bytes. */
static int lamport_ready(const struct tecomm_comm *c, const struct tc_call *k, size_t limit) {
  if (!c->ws.me || c->n_kernels != c->nranks || c->level > TC_LEVEL_INPLACE) return 0;
  tc_ar_coll_t ac = k->coll == TC_COLL_REDUCE_SCATTER ? TC_AR_COLL_REDUCE_SCATTER
                                                      : TC_AR_COLL_ALLGATHER;
  return k->bytes <= tc_ar_lamport_block_max(ac, limit < c->ws.max_bytes ? limit : c->ws.max_bytes);
}

/* Lamport asked for by name. */
static tecomm_result_t pick_lamport(struct tecomm_comm *c, const struct tc_call *k) {
  if (lamport_ready(c, k, SIZE_MAX)) return TECOMM_SUCCESS;
  if (!c->ws.me || c->n_kernels != c->nranks || c->level > TC_LEVEL_INPLACE)
    return TC_ERR(TECOMM_ERR_NOT_SUPPORTED, "%s: algorithm lamport needs the IPC kernels: level %s (%s)",
                  k->fn, tc_level_name(c->level), c->level_why);
  return TC_ERR(TECOMM_ERR_NOT_SUPPORTED,
                "%s: algorithm lamport takes blocks of at most %zu bytes here (count * esize is "
                "%zu; TECOMM_MAX_TOKENS x TECOMM_MAX_HIDDEN size its buffers)",
                k->fn,
                tc_ar_lamport_block_max(k->coll == TC_COLL_REDUCE_SCATTER ? TC_AR_COLL_REDUCE_SCATTER
                                                                          : TC_AR_COLL_ALLGATHER,
                                        c->ws.max_bytes),
                k->bytes);
}

/* The algorithm: asked, checked, or auto's choice. */
static tecomm_result_t pick(struct tecomm_comm *c, tecomm_algo_t asked, const struct tc_call *k,
                            tecomm_algo_t *algo) {
  const char *fn = k->fn;
  if (asked == TECOMM_ALGO_ONESHOT || asked == TECOMM_ALGO_CE) {
    if (!ipc_ready(c, k))
      return TC_ERR(TECOMM_ERR_NOT_SUPPORTED,
                    "%s: algorithm %s needs the IPC kernels over symmetric memory: level %s (%s)%s",
                    fn, tecomm_algo_name(asked), tc_level_name(c->level), c->level_why,
                    c->level == TC_LEVEL_INPLACE ? "; send is not symmetric memory" : "");
    *algo = asked;
    return TECOMM_SUCCESS;
  }
  if (asked == TECOMM_ALGO_LAMPORT) {
    TC_CHECK(pick_lamport(c, k));
    *algo = asked;
    return TECOMM_SUCCESS;
  }
  const struct tc_call_facts f = tc_call_facts_of(k); /* neither fused nor beside */
  if (asked != TECOMM_ALGO_AUTO) return tc_level_at(tc_algo_at(asked))->pick(c, asked, &f, algo);
  size_t lam_edge, one_edge;
  tc_table_edges(c->nranks, &lam_edge, &one_edge);
  if (lamport_ready(c, k, lam_edge)) {
    *algo = TECOMM_ALGO_LAMPORT;
    return TECOMM_SUCCESS;
  }
  if (ipc_ready(c, k)) {
    *algo = TECOMM_ALGO_ONESHOT;
    return TECOMM_SUCCESS;
  }
  /* then the levels below the kernels that run them, in the chain's order
   * (the kernel levels' own tables choose allreduce algorithms) */
  for (int i = 0; i < TC_LV_COUNT; i++) {
    const struct tc_level *l = tc_levels[i];
    tecomm_algo_t a = TECOMM_ALGO_AUTO;
    if (!l->run_coll || i == TC_LV_IPC) continue;
    TC_CHECK(l->pick(c, TECOMM_ALGO_AUTO, &f, &a));
    if (a != TECOMM_ALGO_AUTO) {
      *algo = a;
      return TECOMM_SUCCESS;
    }
  }
  return TC_ERR(TECOMM_ERR_NOT_SUPPORTED, "%s: no algorithm runs %s here: level %s (%s)", fn,
                coll_name(k->coll), tc_level_name(c->level), c->level_why);
}

/* One rank: its block is the whole result. */
static tecomm_result_t one_rank(const struct tc_call *k) {
  if (k->send != k->recv)
    TC_CORE(tecore_memcpy_async(k->recv, k->send, k->bytes, k->stream), k->fn);
  return TECOMM_SUCCESS;
}

static tecomm_result_t run(struct tecomm_comm *c, const struct coll_q *q);

/* A node-local group's all-gather (c->groups), for the hierarchical
 * verbs one: the common path on the group (its health, algorithm and
 * level). */
tecomm_result_t tc_allgather_group(struct tecomm_comm *g, tecore_devptr_t send,
                                    tecore_devptr_t recv, size_t count, tecore_dtype_t dtype,
                                    tecore_stream_t stream, const char *fn) {
  const struct coll_q q = {.coll = TC_COLL_ALLGATHER, .send = send, .recv = recv, .count = count,
                           .dtype = dtype, .op = TECOMM_SUM, .asked = TECOMM_ALGO_AUTO,
                           .stream = stream, .fn = fn};
  return tc_comm_fail(g, run(g, &q));
}

/* The common path: the communicator's health, the algorithm, the level. */
static tecomm_result_t run(struct tecomm_comm *c, const struct coll_q *q) {
  const size_t esz = tecore_dtype_size(q->dtype), bytes = q->count * esz;
  struct tc_call k = {.coll = q->coll, .send = q->send, .recv = q->recv, .count = q->count,
                      .bytes = bytes, .dtype = q->dtype, .op = q->op,
                      .cap = tc_capturing(q->stream), .stream = q->stream, .fn = q->fn};
  tecomm_result_t ready = tc_comm_ready(c, q->fn, !k.cap);
  if (ready != TECOMM_SUCCESS) return tc_agree_refused(c, ready, q->fn); /* peers may wait */
  if (c->nranks == 1) return one_rank(&k);
  const int rs = q->coll == TC_COLL_REDUCE_SCATTER;
  const size_t mine = (size_t)c->rank * bytes;
  k.seg = tc_seg_find(c, q->send, rs ? (size_t)c->nranks * bytes : bytes, &k.off);
  k.in_place = rs ? q->recv == q->send + mine : q->send == q->recv + mine;
  TC_CHECK(pick(c, q->asked, &k, &k.algo));
  const struct tc_level *l = tc_level_at(tc_algo_at(k.algo));
  if (!l->run_coll)
    return TC_ERR(TECOMM_ERR_NOT_SUPPORTED, "%s: the %s level has no %s (algorithm %s)", q->fn,
                  l->name, coll_name(q->coll), tecomm_algo_name(k.algo));
  return l->run_coll(c, &k);
}

static tecomm_result_t coll(tecomm_comm_t comm, const struct coll_q *q) {
  TC_COMM(comm, q->fn);
  TC_CHECK(check_kind(q));
  TC_CHECK(check_buffers(comm, q));
  return tc_comm_fail(comm, run(comm, q));
}

TE_EXPORT tecomm_result_t tecomm_reduce_scatter_algo(tecomm_comm_t comm, tecore_devptr_t send,
                                                     tecore_devptr_t recv, size_t count,
                                                     tecore_dtype_t dtype, tecomm_op_t op,
                                                     tecomm_algo_t algo, tecore_stream_t stream) {
  return coll(comm, &(struct coll_q){.coll = TC_COLL_REDUCE_SCATTER, .send = send, .recv = recv,
                                     .count = count, .dtype = dtype, .op = op, .asked = algo,
                                     .stream = stream, .fn = "tecomm_reduce_scatter"});
}

TE_EXPORT tecomm_result_t tecomm_reduce_scatter(tecomm_comm_t comm, tecore_devptr_t send,
                                                tecore_devptr_t recv, size_t count,
                                                tecore_dtype_t dtype, tecomm_op_t op,
                                                tecore_stream_t stream) {
  return tecomm_reduce_scatter_algo(comm, send, recv, count, dtype, op, TECOMM_ALGO_AUTO, stream);
}

TE_EXPORT tecomm_result_t tecomm_allgather_algo(tecomm_comm_t comm, tecore_devptr_t send,
                                                tecore_devptr_t recv, size_t count,
                                                tecore_dtype_t dtype, tecomm_algo_t algo,
                                                tecore_stream_t stream) {
  return coll(comm, &(struct coll_q){.coll = TC_COLL_ALLGATHER, .send = send, .recv = recv,
                                     .count = count, .dtype = dtype, .op = TECOMM_SUM,
                                     .asked = algo, .stream = stream, .fn = "tecomm_allgather"});
}

TE_EXPORT tecomm_result_t tecomm_allgather(tecomm_comm_t comm, tecore_devptr_t send,
                                           tecore_devptr_t recv, size_t count,
                                           tecore_dtype_t dtype, tecore_stream_t stream) {
  return tecomm_allgather_algo(comm, send, recv, count, dtype, TECOMM_ALGO_AUTO, stream);
}
