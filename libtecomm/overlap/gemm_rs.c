/* SPDX-License-Identifier: Apache-2.0 */
/* overlap/gemm_rs.c -- tecomm_gemm_rs: GEMM + reduce-scatter, each
 * destination's block fetched by its owner while the next multiplies.
 *
 * Rank r, n ranks, block s = rows s*rows .. of a, whose product rank s
 * keeps.  Caller's stream: at step i = 1 .. n-1, the GEMM of block r+i
 * into this rank's symmetric partials slot r+i, a barrier (every rank's
 * step-i product is written), an event; last, block r into slot r.  Side
 * stream, at step i: after the event, the copy engine pulls rank r-i's
 * slot r (its product for this rank's rows) into local scratch.  The
 * barrier is on the caller's stream, not the side stream: queued on the
 * side stream it waited for an SM until the next block's GEMM (one CTA an
 * SM, every SM) ended, and each pull with it (2 H200s, 8192 x 4096 x
 * 7168: 0.85x the GEMM alone); on the caller's stream it costs one
 * barrier a step between the GEMMs.  TECOMM_GEMM_RS_PULLS splits each
 * pull into that many pieces on as many streams (more copy engines on
 * one peer's block; 1: the side stream alone), in case one engine's pull
 * takes longer than a block's GEMM and the pulls queue behind each other
 * (2 or 4 H200s, 8192 x 4096 x 3584: 80 us stay exposed with one).  The
 * caller's stream joins the side stream, then the one-shot
 * kernel folds slot r and the n-1 copies in rank order (its barrier:
 * every rank's pulls are done, so the next call may overwrite the
 * partials), fused with the residual add and RMSNorm when args->norm is
 * set.  Pulls, not pushes: a peer only ever reads this rank's memory, so
 * ranks that disagree (other shapes, other allocations) read wrong bytes
 * and fail, never write over another buffer.  Folding in float and
 * rounding once keeps the bits independent of timing: a GEMM with beta =
 * 1 into one buffer would round after every rank, in arrival order. */
#include "overlap/ov.h"
#include "level.h"

TECORE_TUNABLE_INT(tc_tun_rs_pulls, "TECOMM_GEMM_RS_PULLS", 1, 1, TC_OV_PULLS,
                   "tecomm_gemm_rs: copy streams each peer's block is pulled over, in as many "
                   "pieces (1: one stream; more: more copy engines on each pull)")

struct rs_q {
  const struct tecomm_gemm_rs_args *g;
  struct tc_ov_shape sh;
  size_t achunk;   /* bytes of one block of a */
  size_t blk;      /* bytes of one block of the product (d_dtype) */
};

static tecomm_result_t rs_check_norm(struct tecomm_comm *c, const struct rs_q *q,
                                     const char *fn) {
  const struct tecomm_gemm_rs_args *g = q->g;
  const struct tecomm_rs_add_rmsnorm *m = g->norm;
  const size_t dsz = tecore_dtype_size(g->d_dtype);
  if (!m) return tc_ov_check_ptr(c, g->d, q->blk, tc_ov_align(&q->sh, g->d_dtype), "d", fn);
  TC_ARG(!g->d, "%s: args->d must be 0 with args->norm (the norm writes residual_out and out)",
         fn);
  TC_ARG(m->out || m->fp8_out, "%s: args->norm: neither out nor fp8_out is set", fn);
  TC_ARG(m->eps >= 0.0f && m->eps <= 1e30f, "%s: args->norm->eps %g is not finite and >= 0", fn,
         (double)m->eps);
  TC_CHECK(tc_ov_check_ptr(c, m->residual_in, q->blk, dsz, "norm->residual_in", fn));
  TC_CHECK(tc_ov_check_ptr(c, m->residual_out, q->blk, dsz, "norm->residual_out", fn));
  TC_CHECK(tc_ov_check_ptr(c, m->gamma, g->n * dsz, dsz, "norm->gamma", fn));
  if (m->out) TC_CHECK(tc_ov_check_ptr(c, m->out, q->blk, dsz, "norm->out", fn));
  if (m->rsigma) TC_CHECK(tc_ov_check_ptr(c, m->rsigma, g->rows * 4, 4, "norm->rsigma", fn));
  return TECOMM_SUCCESS;
}

static tecomm_result_t rs_check(struct tecomm_comm *c, const struct tecomm_gemm_rs_args *g,
                                struct rs_q *q, const char *fn) {
  TC_ARG(g, "%s: args is NULL", fn);
  q->g = g;
  q->sh = (struct tc_ov_shape){.rows = g->rows, .n = g->n, .k = g->k, .dtype = g->dtype,
                               .d_dtype = g->d_dtype, .b = g->b, .a_scale_inv = g->a_scale_inv,
                               .b_scale_inv = g->b_scale_inv, .bias = g->bias, .fn = fn};
  TC_CHECK(tc_ov_check_shape(&q->sh));
  TC_CHECK(tc_ov_check_level(c, fn)); /* before the operands: says why they cannot be read */
  const size_t esz = tecore_dtype_size(g->dtype), dsz = tecore_dtype_size(g->d_dtype);
  const size_t n = (size_t)c->nranks;
  q->achunk = g->rows * g->k * esz;
  q->blk = g->rows * g->n * dsz;
  const size_t al = tc_ov_align(&q->sh, g->dtype), dal = tc_ov_align(&q->sh, g->d_dtype);
  TC_CHECK(tc_ov_check_ptr(c, g->a, n * q->achunk, al, "a", fn));
  TC_CHECK(tc_ov_check_ptr(c, g->b, g->n * g->k * esz, al, "b", fn));
  TC_CHECK(tc_ov_check_ptr(c, g->partials, n * q->blk, dal, "partials", fn));
  TC_CHECK(rs_check_norm(c, q, fn));
  TC_ARG(c->nranks == 1 || tc_ov_mine(c, g->partials, n * q->blk),
         "%s: args->partials is not this rank's symmetric memory (tecomm_mem_alloc): the peers "
         "read it", fn);
  const tecore_devptr_t outs[] = {g->d, g->norm ? g->norm->residual_out : 0,
                                  g->norm ? g->norm->out : 0};
  for (int i = 0; i < 3; i++)
    TC_ARG(!outs[i] || (!tc_ov_overlap(outs[i], q->blk, g->partials, n * q->blk) &&
                        !tc_ov_overlap(outs[i], q->blk, g->a, n * q->achunk) &&
                        !tc_ov_overlap(outs[i], q->blk, g->b, g->n * g->k * esz)),
           "%s: args->%s overlaps args->partials, a or b", fn,
           i == 0 ? "d" : i == 1 ? "norm->residual_out" : "norm->out");
  TC_CHECK(tc_ov_check_bias(c, &q->sh, g->partials, n * q->blk));
  for (int i = 0; i < 3; i++)
    if (outs[i]) TC_CHECK(tc_ov_check_bias(c, &q->sh, outs[i], q->blk));
  TC_ARG(!tc_ov_overlap(g->partials, n * q->blk, g->a, n * q->achunk) &&
             !tc_ov_overlap(g->partials, n * q->blk, g->b, g->n * g->k * esz),
         "%s: args->partials overlaps args->a or b", fn);
  return TECOMM_SUCCESS;
}

/* The fold's kernel call, made and checked before anything is queued
 * (a call refused after the GEMMs would leave the peers waiting in its
 * barrier): the one-shot kernel over slot rank and the pulled copies
 * (in[s] for rank s), plain, or fused with the norm on the operands
 * every rank plans alike (tc_fused_align: their aligned copies are
 * queued now, before the GEMMs, which do not touch them). */
struct rs_fold {
  struct tc_ar_call k;
  struct tc_ar_fused f;
  struct tc_al_call al;
};

static tecomm_result_t rs_fold_make(struct tecomm_comm *c, const struct rs_q *q,
                                    tecore_devptr_t pulled, int cap, tecore_stream_t st,
                                    struct rs_fold *fo) {
  const struct tecomm_gemm_rs_args *g = q->g;
  const struct tecomm_rs_add_rmsnorm *m = g->norm;
  const int r = c->rank, n = c->nranks;
  struct tc_ar_call *k = &fo->k;
  tc_ov_call_init(c, g->rows * g->n, g->d_dtype, g->k, k);
  k->in[r] = g->partials + (size_t)r * q->blk;
  for (int i = 1; i < n; i++) k->in[(r - i + n) % n] = pulled + (size_t)(i - 1) * q->blk;
  k->out = g->d;
  fo->al.post.n = 0;
  if (m) {
    const struct tecomm_add_rmsnorm fa = {
        .rows = g->rows, .hidden = g->n, .dtype = g->d_dtype, .residual_in = m->residual_in,
        .residual_out = m->residual_out, .gamma = m->gamma, .eps = m->eps, .out = m->out,
        .fp8_out = m->fp8_out, .rsigma = m->rsigma};
    TC_CHECK(tc_fused_align(c, &fa, 0, cap, st, &fo->al, q->sh.fn));
    const struct tecomm_add_rmsnorm *al = &fo->al.args;
    fo->f = (struct tc_ar_fused){.hidden = al->hidden, .eps = al->eps,
                                 .residual_in = al->residual_in, .residual_out = al->residual_out,
                                 .gamma = al->gamma, .out = al->out, .fp8_out = al->fp8_out,
                                 .rsigma = al->rsigma};
    k->fused = &fo->f;
    k->out = 0;
  }
  tecore_result_t e = tc_ar_check(k);
  return e == TECORE_SUCCESS ? TECOMM_SUCCESS : tc_core(e, q->sh.fn);
}

static tecomm_result_t rs_fold_run(const struct rs_fold *fo, tecore_stream_t st, const char *fn) {
  TC_CORE(tc_ar_launch(&fo->k, st), fn);
  return tc_fused_post(&fo->al, st, fn);
}

/* One rank: the GEMM into d, or into partials then the norm. */
static tecomm_result_t rs_one(struct tecomm_comm *c, const struct rs_q *q, int cap,
                              tecore_stream_t st) {
  if (!q->g->norm) return tc_ov_gemm(&q->sh, q->g->a, q->g->d, 0, st);
  struct rs_fold fo;
  TC_CHECK(rs_fold_make(c, q, 0, cap, st, &fo));
  TC_CHECK(tc_ov_gemm(&q->sh, q->g->a, q->g->partials, 0, st));
  return rs_fold_run(&fo, st, q->sh.fn);
}

/* Every block multiplied into its partials slot, own last; each peer's
 * product for this rank pulled once every rank has made it. */
static tecomm_result_t rs_blocks(struct tecomm_comm *c, struct tc_ov *ov, const struct rs_q *q,
                                 const struct tc_ar_call *bar, tecore_stream_t st) {
  const struct tecomm_gemm_rs_args *g = q->g;
  const char *fn = q->sh.fn;
  const int r = c->rank, n = c->nranks;
  const tecore_devptr_t mine = g->partials + (size_t)r * q->blk; /* slot r, on every rank */
  const int pulls = (int)tecore_tunable_int(&tc_tun_rs_pulls);
  int used = 1;
  for (int i = 1; i < n; i++) {
    const int j = (r + i) % n, from = (r - i + n) % n;
    TC_CHECK(tc_ov_gemm(&q->sh, g->a + (size_t)j * q->achunk, g->partials + (size_t)j * q->blk,
                        0, st));
    TC_CHECK(tc_ov_barrier(c, bar, st, fn));
    TC_CORE(tecore_event_record(ov->chunk[i], st), fn);
    TC_CORE(tecore_stream_wait_event(ov->side, ov->chunk[i]), fn);
    tecore_devptr_t src;
    TC_CHECK(tc_ov_peer(c, mine, from, &src, fn));
    TC_CHECK(tc_ov_pull(ov, ov->stage + (size_t)(i - 1) * q->blk, src, q->blk, pulls,
                        ov->chunk[i], &used, fn));
  }
  TC_CHECK(tc_ov_gemm(&q->sh, g->a + (size_t)r * q->achunk, mine, 0, st));
  TC_CORE(tecore_event_record(ov->done, ov->side), fn);
  TC_CORE(tecore_stream_wait_event(st, ov->done), fn);
  return tc_ov_pull_join(ov, used, st, fn);
}

static tecomm_result_t rs_run(struct tecomm_comm *c, const struct rs_q *q, tecore_stream_t st) {
  const char *fn = q->sh.fn;
  const int cap = tc_capturing(st);
  TC_CHECK(tc_comm_ready(c, fn, !cap));
  if (c->nranks == 1) return rs_one(c, q, cap, st);
  struct tc_ov *ov;
  TC_CHECK(tc_ov_get(c, (size_t)(c->nranks - 1) * q->blk, cap, fn, &ov));
  struct rs_fold fo;
  TC_CHECK(rs_fold_make(c, q, ov->stage, cap, st, &fo));
  TC_CORE(tecore_event_record(ov->start, st), fn);
  TC_CORE(tecore_stream_wait_event(ov->side, ov->start), fn);
  TC_CHECK(rs_blocks(c, ov, q, &fo.k, st));
  return rs_fold_run(&fo, st, fn);
}

TE_EXPORT tecomm_result_t tecomm_gemm_rs(tecomm_comm_t comm, const struct tecomm_gemm_rs_args *args,
                                         tecore_stream_t stream) {
  static const char fn[] = "tecomm_gemm_rs";
  TC_COMM(comm, fn);
  struct rs_q q;
  TC_CHECK(rs_check(comm, args, &q, fn));
  return tc_comm_fail(comm, rs_run(comm, &q, stream));
}
