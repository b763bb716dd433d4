/* SPDX-License-Identifier: Apache-2.0 */
/* overlap/ag_gemm.c -- tecomm_ag_gemm: all-gather + GEMM, the chunks of
 * the gathered rows multiplied as they arrive.
 *
 * Rank r, n ranks, chunk s = rank s's rows (rows x k).  Caller's stream:
 * GEMM of chunk r (its own a: no wait), then of chunks r+1, r+2, ...
 * each after its event.  Side stream: a barrier (every rank's a is
 * written), the peers' chunks pulled from their symmetric a in the same
 * ring order with an event after each, the own chunk copied into a_all
 * (unless in place), a closing barrier (no peer still reads this rank's
 * a: the caller may overwrite it once the call is done), joined into the
 * caller's stream at the end.  Each chunk's GEMM adds the bias and, with
 * gelu_aux, applies GELU in its epilogue (ov.c's tc_ov_gemm), or with
 * TECOMM_AG_GEMM_DGELU multiplies by gelu' of gelu_aux's rows.  With a8
 * each chunk is quantized on the caller's stream right before its GEMM,
 * which multiplies the codes (E5M2 ones, a gradient's, without fast
 * accumulation): the copies move the 16-bit rows.  dtype E5M2: a
 * gradient's codes, gathered as they are and multiplied the same way.
 * TECOMM_AG_GEMM_PULLS splits each pull over that many streams (pieces
 * after the opening barrier, joined into the side stream before the
 * chunk's event): more copy engines on one chunk. */
#include "overlap/ov.h"

TECORE_TUNABLE_INT(tc_tun_ag_pulls, "TECOMM_AG_GEMM_PULLS", 1, 1, TC_OV_PULLS,
                   "tecomm_ag_gemm: copy streams each peer's rows are pulled over, in as many "
                   "pieces (1: one stream; more: more copy engines on each pull)")

struct ag_q {
  const struct tecomm_ag_gemm_args *g;
  struct tc_ov_shape sh;   /* the GEMM's: dtype E4M3 with a8 */
  size_t chunk;    /* bytes of one rank's rows of a */
  size_t dchunk;   /* bytes of one rank's rows of d */
  int in_place;    /* a == a_all + rank * chunk */
  size_t chunk8;   /* a8: bytes of one rank's codes (rows x k), else 0 */
};

/* Whether [p, p+bytes) shares a byte with d, a, a_all, b or gelu_aux. */
static int ag_touches(struct tecomm_comm *c, const struct ag_q *q, tecore_devptr_t p,
                      size_t bytes) {
  const struct tecomm_ag_gemm_args *g = q->g;
  const size_t n = (size_t)c->nranks, dsz = n * q->dchunk;
  const size_t bsz = g->n * g->k * tecore_dtype_size(q->sh.dtype);
  return tc_ov_overlap(p, bytes, g->d, dsz) || tc_ov_overlap(p, bytes, g->a_all, n * q->chunk) ||
         tc_ov_overlap(p, bytes, g->a, q->chunk) || tc_ov_overlap(p, bytes, g->b, bsz) ||
         (g->gelu_aux && tc_ov_overlap(p, bytes, g->gelu_aux, dsz));
}

/* a8 (when set): an E4M3 or E5M2 tensor of delayed scaling over
 * n*rows x k codes, rowwise only, with its scale and scale_inv, in bounds,
 * apart from the other buffers; dtype (the gathered rows') BF16 or F16. */
static tecomm_result_t ag_check_a8(struct tecomm_comm *c, const struct ag_q *q, const char *fn) {
  const struct tecomm_ag_gemm_args *g = q->g;
  const struct tecore_tensor *t = g->a8;
  const size_t n = (size_t)c->nranks, bytes = n * q->chunk8;
  TC_ARG((t->dtype == TECORE_DTYPE_E4M3 || t->dtype == TECORE_DTYPE_E5M2) &&
             t->scaling == TECORE_SCALING_DELAYED,
         "%s: args->a8 is %s with scaling %s, not E4M3 or E5M2 with delayed scaling", fn,
         tecore_dtype_name(t->dtype), tecore_scaling_name(t->scaling));
  TC_ARG(tecore_tensor_numel(t) == n * g->rows * g->k,
         "%s: args->a8 has %zu elements, not nranks x rows x k = %zu", fn, tecore_tensor_numel(t),
         n * g->rows * g->k);
  TC_ARG(!t->columnwise_data && !t->columnwise_scale_inv,
         "%s: args->a8 has a columnwise copy: it is written rowwise only", fn);
  TC_ARG(t->scale && t->scale % 4 == 0 && t->scale_inv && t->scale_inv % 4 == 0 &&
             t->amax % 4 == 0,
         "%s: args->a8's scale and scale_inv must be set, and they and amax 4-byte aligned", fn);
  TC_CHECK(tc_ov_check_ptr(c, t->data, bytes, 16, "a8->data", fn));
  TC_ARG(!ag_touches(c, q, t->data, bytes),
         "%s: args->a8's codes overlap args->d, a, a_all, b or gelu_aux", fn);
  const tecore_devptr_t w[3] = {t->scale, t->scale_inv, t->amax};
  for (int i = 0; i < 3; i++)
    TC_ARG(!w[i] || (!tc_ov_overlap(w[i], 4, t->data, bytes) && !ag_touches(c, q, w[i], 4)),
           "%s: args->a8's scale, scale_inv or amax lies in a buffer of the call", fn);
  return TECOMM_SUCCESS;
}

/* gelu_aux (when set; an input under TECOMM_AG_GEMM_DGELU): in bounds,
 * aligned, apart from everything else. */
static tecomm_result_t ag_check_aux(struct tecomm_comm *c, const struct ag_q *q, const char *fn) {
  const struct tecomm_ag_gemm_args *g = q->g;
  if (!g->gelu_aux) return TECOMM_SUCCESS;
  const size_t n = (size_t)c->nranks, bytes = n * q->dchunk;
  const size_t esz = tecore_dtype_size(g->dtype);
  TC_CHECK(tc_ov_check_ptr(c, g->gelu_aux, bytes, tc_ov_align(&q->sh, g->d_dtype), "gelu_aux",
                           fn));
  TC_ARG(!tc_ov_overlap(g->gelu_aux, bytes, g->d, bytes) &&
             !tc_ov_overlap(g->gelu_aux, bytes, g->a_all, n * q->chunk) &&
             !tc_ov_overlap(g->gelu_aux, bytes, g->a, q->chunk) &&
             !tc_ov_overlap(g->gelu_aux, bytes, g->b, g->n * g->k * esz),
         "%s: args->gelu_aux overlaps args->d, a, a_all or b", fn);
  return tc_ov_check_bias(c, &q->sh, g->gelu_aux, bytes);
}

static tecomm_result_t ag_check(struct tecomm_comm *c, const struct tecomm_ag_gemm_args *g,
                                struct ag_q *q, const char *fn) {
  TC_ARG(g, "%s: args is NULL", fn);
  q->g = g;
  TC_ARG(!(g->flags & ~(TECOMM_AG_GEMM_B_KN | TECOMM_AG_GEMM_DGELU)),
         "%s: args->flags 0x%x has unknown bits", fn, g->flags);
  const int dgelu = (g->flags & TECOMM_AG_GEMM_DGELU) != 0;
  TC_ARG(!dgelu || (g->gelu_aux && !g->bias && !g->a8 &&
                    (g->dtype == TECORE_DTYPE_BF16 || g->dtype == TECORE_DTYPE_F16) &&
                    g->d_dtype == g->dtype),
         "%s: TECOMM_AG_GEMM_DGELU wants gelu_aux set, no bias, no a8, and BF16 or F16 "
         "operands with d of their dtype (gelu_aux 0x%llx, bias 0x%llx, a8 %s, dtype %s, "
         "d_dtype %s)", fn, (unsigned long long)g->gelu_aux, (unsigned long long)g->bias,
         g->a8 ? "set" : "NULL", tecore_dtype_name(g->dtype), tecore_dtype_name(g->d_dtype));
  TC_ARG(!g->a8 || !(g->flags & TECOMM_AG_GEMM_B_KN),
         "%s: args->a8 with TECOMM_AG_GEMM_B_KN: an FP8 GEMM takes b as [n][k] only", fn);
  TC_ARG(!g->a8 || g->dtype == TECORE_DTYPE_BF16 || g->dtype == TECORE_DTYPE_F16,
         "%s: args->a8 is set with args->dtype %s: the rows gathered and quantized are BF16 or "
         "F16", fn, tecore_dtype_name(g->dtype));
  /* with a8 the GEMM multiplies FP8 codes (E5M2 ones: a gradient's, by
   * E4M3 b): its scales are a8's and b's; dtype E5M2 gathers such codes
   * themselves (a's scale a_scale_inv) */
  const int codes5 = g->dtype == TECORE_DTYPE_E5M2;
  const tecore_dtype_t mdt = g->a8 || codes5 ? TECORE_DTYPE_E4M3 : g->dtype;
  q->sh = (struct tc_ov_shape){.rows = g->rows, .n = g->n, .k = g->k, .dtype = mdt,
                               .d_dtype = g->d_dtype, .b = g->b,
                               .a_scale_inv = g->a8 ? g->a8->scale_inv : g->a_scale_inv,
                               .b_scale_inv = g->b_scale_inv, .bias = g->bias,
                               .gelu = g->gelu_aux != 0, .dgelu = dgelu,
                               .b_kn = (g->flags & TECOMM_AG_GEMM_B_KN) != 0,
                               .grad8 = codes5 || (g->a8 && g->a8->dtype == TECORE_DTYPE_E5M2),
                               .fn = fn};
  TC_CHECK(tc_ov_check_shape(&q->sh));
  TC_CHECK(tc_ov_check_level(c, fn)); /* before the operands: says why they cannot be read */
  const size_t esz = tecore_dtype_size(g->dtype), dsz = tecore_dtype_size(g->d_dtype);
  const size_t bsz = tecore_dtype_size(mdt), n = (size_t)c->nranks;
  q->chunk = g->rows * g->k * esz;
  q->dchunk = g->rows * g->n * dsz;
  q->chunk8 = g->a8 ? g->rows * g->k : 0;
  q->in_place = g->a == g->a_all + (size_t)c->rank * q->chunk;
  const size_t al = tc_ov_align(&q->sh, g->dtype), dal = tc_ov_align(&q->sh, g->d_dtype);
  TC_CHECK(tc_ov_check_ptr(c, g->a, q->chunk, al, "a", fn));
  TC_CHECK(tc_ov_check_ptr(c, g->a_all, n * q->chunk, al, "a_all", fn));
  TC_CHECK(tc_ov_check_ptr(c, g->b, g->n * g->k * bsz, al, "b", fn));
  TC_CHECK(tc_ov_check_ptr(c, g->d, n * q->dchunk, dal, "d", fn));
  TC_CHECK(tc_ov_check_bias(c, &q->sh, g->d, n * q->dchunk));
  TC_CHECK(tc_ov_check_bias(c, &q->sh, g->a_all, n * q->chunk));
  TC_CHECK(ag_check_aux(c, q, fn));
  const tecore_devptr_t all_end = g->a_all + n * q->chunk;
  TC_ARG(q->in_place || g->a + q->chunk <= g->a_all || all_end <= g->a,
         "%s: args->a overlaps args->a_all without being the in-place form (a == a_all + "
         "rank * rows * k * esize)", fn);
  TC_ARG(!tc_ov_overlap(g->d, n * q->dchunk, g->a_all, n * q->chunk) &&
             !tc_ov_overlap(g->d, n * q->dchunk, g->a, q->chunk) &&
             !tc_ov_overlap(g->d, n * q->dchunk, g->b, g->n * g->k * bsz),
         "%s: args->d overlaps args->a, a_all or b", fn);
  TC_ARG(!tc_ov_overlap(g->a_all, n * q->chunk, g->b, g->n * g->k * bsz),
         "%s: args->a_all overlaps args->b", fn);
  if (g->a8) TC_CHECK(ag_check_a8(c, q, fn));
  TC_ARG(c->nranks == 1 || tc_ov_mine(c, q->in_place ? g->a_all : g->a,
                                       q->in_place ? n * q->chunk : q->chunk),
         "%s: args->%s is not this rank's symmetric memory (tecomm_mem_alloc): the peers copy "
         "from it", fn, q->in_place ? "a_all (in place)" : "a");
  return TECOMM_SUCCESS;
}

/* What chunk j's GEMM multiplies: src (rank j's rows of a or a_all), or
 * with a8 its codes, quantized from src now on st into a8's rows j. */
static tecomm_result_t ag_operand(const struct ag_q *q, tecore_devptr_t src, int j,
                                  tecore_stream_t st, tecore_devptr_t *out) {
  const struct tecomm_ag_gemm_args *g = q->g;
  *out = src;
  if (!g->a8) return TECOMM_SUCCESS;
  struct tecore_tensor in, y = *g->a8;
  const size_t sh[2] = {g->rows, g->k};
  TC_CORE(tecore_tensor_init(&in, g->dtype, 2, sh, src), q->sh.fn);
  y.ndim = 2, y.shape[0] = g->rows, y.shape[1] = g->k;
  y.data = *out = g->a8->data + (size_t)j * q->chunk8;
  TC_CORE(tecore_quantize(&in, &y, 0, st), q->sh.fn);
  return TECOMM_SUCCESS;
}

/* One rank: the GEMM, and a copied into a_all. */
static tecomm_result_t ag_one(const struct ag_q *q, tecore_stream_t st) {
  if (!q->in_place) TC_CORE(tecore_memcpy_async(q->g->a_all, q->g->a, q->chunk, st), q->sh.fn);
  tecore_devptr_t a;
  TC_CHECK(ag_operand(q, q->g->a, 0, st, &a));
  return tc_ov_gemm(&q->sh, a, q->g->d, q->g->gelu_aux, st);
}

/* Rank j's rows of gelu_aux (0 without it). */
static tecore_devptr_t ag_aux(const struct ag_q *q, int j) {
  return q->g->gelu_aux ? q->g->gelu_aux + (size_t)j * q->dchunk : 0;
}

/* The side stream's part: barrier, the peers' chunks in ring order
 * (event after each), the own chunk into a_all, barrier. */
static tecomm_result_t ag_side(struct tecomm_comm *c, struct tc_ov *ov, const struct ag_q *q,
                               const struct tc_ar_call *bar) {
  const struct tecomm_ag_gemm_args *g = q->g;
  const char *fn = q->sh.fn;
  const int r = c->rank, n = c->nranks;
  tecore_stream_t side = ov->side;
  const int pulls = (int)tecore_tunable_int(&tc_tun_ag_pulls);
  TC_CHECK(tc_ov_barrier(c, bar, side, fn));
  if (pulls > 1) TC_CORE(tecore_event_record(ov->gate, side), fn);   /* the pieces follow it */
  for (int i = 1; i < n; i++) {
    const int j = (r + i) % n;
    tecore_devptr_t src;
    TC_CHECK(tc_ov_peer(c, q->in_place ? g->a_all + (size_t)j * q->chunk : g->a, j, &src, fn));
    TC_CHECK(tc_ov_pull(ov, g->a_all + (size_t)j * q->chunk, src, q->chunk, pulls, ov->gate,
                        NULL, fn));
    TC_CORE(tecore_event_record(ov->chunk[i], side), fn);
  }
  /* the own rows last: no GEMM waits for them (it reads a) */
  if (!q->in_place)
    TC_CORE(tecore_memcpy_async(g->a_all + (size_t)r * q->chunk, g->a, q->chunk, side), fn);
  TC_CHECK(tc_ov_barrier(c, bar, side, fn));
  TC_CORE(tecore_event_record(ov->done, side), fn);
  return TECOMM_SUCCESS;
}

/* The caller's stream: own chunk at once, then each as it lands. */
static tecomm_result_t ag_main(struct tecomm_comm *c, struct tc_ov *ov, const struct ag_q *q,
                               tecore_stream_t st) {
  const struct tecomm_ag_gemm_args *g = q->g;
  const char *fn = q->sh.fn;
  const int r = c->rank, n = c->nranks;
  tecore_devptr_t a;
  TC_CHECK(ag_operand(q, g->a, r, st, &a));
  TC_CHECK(tc_ov_gemm(&q->sh, a, g->d + (size_t)r * q->dchunk, ag_aux(q, r), st));
  for (int i = 1; i < n; i++) {
    const int j = (r + i) % n;
    TC_CORE(tecore_stream_wait_event(st, ov->chunk[i]), fn);
    TC_CHECK(ag_operand(q, g->a_all + (size_t)j * q->chunk, j, st, &a));
    TC_CHECK(tc_ov_gemm(&q->sh, a, g->d + (size_t)j * q->dchunk, ag_aux(q, j), st));
  }
  TC_CORE(tecore_stream_wait_event(st, ov->done), fn);
  return TECOMM_SUCCESS;
}

static tecomm_result_t ag_run(struct tecomm_comm *c, const struct ag_q *q, tecore_stream_t st) {
  const char *fn = q->sh.fn;
  const int cap = tc_capturing(st);
  TC_CHECK(tc_comm_ready(c, fn, !cap));
  if (c->nranks == 1) return ag_one(q, st);
  struct tc_ov *ov;
  TC_CHECK(tc_ov_get(c, 0, cap, fn, &ov));
  struct tc_ar_call bar;
  tc_ov_call_init(c, q->g->rows * q->g->k, q->g->dtype, q->g->n, &bar);
  bar.coll = TC_AR_COLL_ALLGATHER;
  bar.sym_in = q->in_place ? 2 : 1;
  TC_CORE(tecore_event_record(ov->start, st), fn);
  TC_CORE(tecore_stream_wait_event(ov->side, ov->start), fn);
  TC_CHECK(ag_side(c, ov, q, &bar));
  return ag_main(c, ov, q, st);
}

TE_EXPORT tecomm_result_t tecomm_ag_gemm(tecomm_comm_t comm, const struct tecomm_ag_gemm_args *args,
                                         tecore_stream_t stream) {
  static const char fn[] = "tecomm_ag_gemm";
  TC_COMM(comm, fn);
  struct ag_q q;
  TC_CHECK(ag_check(comm, args, &q, fn));
  return tc_comm_fail(comm, ag_run(comm, &q, stream));
}
