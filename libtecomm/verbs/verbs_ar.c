/* verbs_ar.c -- the host allreduce over a verbs endpoint (verbs_priv.h).
 * SPDX-License-Identifier: Apache-2.0
 *
 * Recursive doubling for small payloads on a power-of-two rank count
 * (log2 N exchanges of the whole buffer), a ring otherwise (reduce-scatter
 * then all-gather: 2(N-1) exchanges of 1/N of it).  Both leave every rank
 * with the same bits: recursive doubling adds the same two partial sums
 * on both partners (IEEE addition commutes), the ring reduces each
 * segment once and passes the result on.  Each is a list of exchanges run
 * as a state machine (tc_vb_ar_poll), so that the service engine can poll
 * it between its other jobs.  BF16 and F16 are reduced in
 * float and rounded back after each step, as a device kernel would. */
#include "verbs_priv.h"
#include "common/convert.h"   /* the kernels' bf16/f16 rounding, bit for bit */

#include <stdlib.h>
#include <string.h>

TECORE_TUNABLE_INT(tc_tun_verbs_rd_max_kb, "TECOMM_VERBS_RD_MAX_KB", 64, 0, 1048576,
                   "largest payload (KiB) the verbs allreduce sends by recursive doubling "
                   "(power-of-two rank counts); larger ones go round the ring")

static float op2(float acc, float in, tecomm_op_t op) {
  if (op == TECOMM_SUM) return acc + in;
  return (in > acc || in != in) ? in : acc;   /* MAX; a NaN wins */
}

/* Elementwise acc = acc (op) in over n elements of dtype (host). */
static void tc_vb_reduce(void *acc, const void *in, size_t n, tecore_dtype_t dtype, tecomm_op_t op) {
  if (dtype == TECORE_DTYPE_F32) {
    float *a = acc;
    const float *b = in;
    for (size_t i = 0; i < n; i++) a[i] = op2(a[i], b[i], op);
  } else if (dtype == TECORE_DTYPE_BF16) {
    uint16_t *a = acc;
    const uint16_t *b = in;
    for (size_t i = 0; i < n; i++) a[i] = te_f32_to_bf16(op2(te_bf16_to_f32(a[i]), te_bf16_to_f32(b[i]), op));
  } else {
    uint16_t *a = acc;
    const uint16_t *b = in;
    for (size_t i = 0; i < n; i++) a[i] = te_f32_to_f16(op2(te_f16_to_f32(a[i]), te_f16_to_f32(b[i]), op));
  }
}

/* Segment i of count elements cut in n: its first element and length. */
static void segment(size_t count, int n, int i, size_t *first, size_t *len) {
  size_t base = count / (size_t)n, extra = count % (size_t)n;
  *first = (size_t)i * base + ((size_t)i < extra ? (size_t)i : extra);
  *len = base + ((size_t)i < extra);
}

/* Starts exchange number a->step: its sends and receives. */
static void step_start(tc_vb_t *vb, struct tc_vb_ar *a) {
  int me = 0, n = 1;
  tc_vb_ranks(vb, &me, &n);
  char *buf = a->buf;
  size_t es = a->es, so, sl, ro, rl;
  if (a->gather) {         /* block me - s goes on, block me - s - 1 comes in */
    segment(a->count, n, ((me - a->step) % n + n) % n, &so, &sl);
    segment(a->count, n, ((me - a->step - 1) % n + n) % n, &ro, &rl);
    tc_vb_xfer_start(vb, &a->x, (me + 1) % n, buf + so, sl, (me + n - 1) % n, buf + ro, rl);
    return;
  }
  if (a->rd) {
    int partner = me ^ (1 << a->step);
    tc_vb_xfer_start(vb, &a->x, partner, buf, a->count * es, partner, a->tmp, a->count * es);
    return;
  }
  if (a->step < n - 1) {   /* reduce-scatter: the peer's partial sum into tmp */
    int s = a->step;
    segment(a->count, n, ((me - s) % n + n) % n, &so, &sl);
    segment(a->count, n, ((me - s - 1) % n + n) % n, &ro, &rl);
    tc_vb_xfer_start(vb, &a->x, (me + 1) % n, buf + so * es, sl * es, (me + n - 1) % n, a->tmp,
                     rl * es);
  } else {                 /* all-gather: finished segments straight into buf */
    int s = a->step - (n - 1);
    segment(a->count, n, ((me + 1 - s) % n + n) % n, &so, &sl);
    segment(a->count, n, ((me - s) % n + n) % n, &ro, &rl);
    tc_vb_xfer_start(vb, &a->x, (me + 1) % n, buf + so * es, sl * es, (me + n - 1) % n,
                     buf + ro * es, rl * es);
  }
}

/* What follows exchange a->step once it is complete: the reduction. */
static void step_finish(tc_vb_t *vb, struct tc_vb_ar *a) {
  int me = 0, n = 1;
  tc_vb_ranks(vb, &me, &n);
  if (a->gather) return;   /* the bytes landed where they belong */
  if (a->rd) {
    tc_vb_reduce(a->buf, a->tmp, a->count, a->dtype, a->op);
  } else if (a->step < n - 1) {
    size_t ro, rl;
    segment(a->count, n, ((me - a->step - 1) % n + n) % n, &ro, &rl);
    tc_vb_reduce((char *)a->buf + ro * a->es, a->tmp, rl, a->dtype, a->op);
  }
}

tecomm_result_t tc_vb_ar_start(tc_vb_t *vb, struct tc_vb_ar *a, void *buf, size_t count,
                               tecore_dtype_t dtype, tecomm_op_t op) {
  int me = 0, n = 1;
  tc_vb_ranks(vb, &me, &n);
  size_t es = tecore_dtype_size(dtype), bytes = count * es;
  int pow2 = (n & (n - 1)) == 0;
  int rd = pow2 && bytes <= (size_t)tecore_tunable_int(&tc_tun_verbs_rd_max_kb) * 1024;
  size_t tb = rd ? bytes : (count / (size_t)n + 1) * es;
  if (tb > a->tmp_bytes) {
    char *t = realloc(a->tmp, tb);
    if (!t) return TC_ERR(TECOMM_ERR_NOMEM, "verbs allreduce: out of host memory (%zu bytes)", tb);
    a->tmp = t;
    a->tmp_bytes = tb;
  }
  a->buf = buf;
  a->count = count;
  a->es = es;
  a->dtype = dtype;
  a->op = op;
  a->rd = rd;
  a->gather = 0;
  a->step = 0;
  a->nsteps = 0;
  if (n > 1 && count > 0)
    for (int m = 1; rd && m < n; m <<= 1) a->nsteps++;
  if (n > 1 && count > 0 && !rd) a->nsteps = 2 * (n - 1);
  if (a->nsteps) step_start(vb, a);
  return TECOMM_SUCCESS;
}

tecomm_result_t tc_vb_ag_start(tc_vb_t *vb, struct tc_vb_ar *a, void *buf, size_t bytes) {
  int me = 0, n = 1;
  tc_vb_ranks(vb, &me, &n);
  a->buf = buf;
  a->count = (size_t)n * bytes;
  a->es = 1;
  a->dtype = TECORE_DTYPE_E4M3; /* a byte each; never reduced */
  a->op = TECOMM_SUM;
  a->rd = 0;
  a->gather = 1;
  a->step = 0;
  a->nsteps = n > 1 && bytes ? n - 1 : 0;
  if (a->nsteps) step_start(vb, a);
  return TECOMM_SUCCESS;
}

int tc_vb_ar_poll(tc_vb_t *vb, struct tc_vb_ar *a) {
  for (;;) {
    if (a->step == a->nsteps) return 1;
    int st = tc_vb_xfer_poll(vb, &a->x);
    if (st == 0) return 0;
    if (st < 0) {
      memset(a->buf, 0xff, a->count * a->es);   /* NaN, never partial sums */
      return -1;
    }
    step_finish(vb, a);
    if (++a->step < a->nsteps) step_start(vb, a);
  }
}

void tc_vb_ar_fini(struct tc_vb_ar *a) {
  free(a->tmp);
  a->tmp = NULL;
  a->tmp_bytes = 0;
}
