/* verbs_ar.c -- the host allreduce over a verbs endpoint (verbs_priv.h).
 * SPDX-License-Identifier: Apache-2.0
 *
 * Recursive doubling for small payloads on a power-of-two rank count
 * (log2 N exchanges of the whole buffer), a ring otherwise (reduce-scatter
 * then all-gather: 2(N-1) exchanges of 1/N of it).  Both leave every rank
 * with the same bits: recursive doubling adds the same two partial sums
 * on both partners (IEEE addition commutes), the ring reduces each
 * segment once and passes the result on.  BF16 and F16 are reduced in
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

static tecomm_result_t ring(tc_vb_t *vb, int me, int n, char *buf, size_t count, size_t es,
                            tecore_dtype_t dtype, tecomm_op_t op, char *tmp) {
  int next = (me + 1) % n, prev = (me + n - 1) % n;
  for (int s = 0; s < n - 1; s++) {   /* reduce-scatter */
    size_t so, sl, ro, rl;
    segment(count, n, ((me - s) % n + n) % n, &so, &sl);
    segment(count, n, ((me - s - 1) % n + n) % n, &ro, &rl);
    TC_CHECK(tc_vb_sendrecv(vb, next, buf + so * es, sl * es, prev, tmp, rl * es));
    tc_vb_reduce(buf + ro * es, tmp, rl, dtype, op);
  }
  for (int s = 0; s < n - 1; s++) {   /* all-gather */
    size_t so, sl, ro, rl;
    segment(count, n, ((me + 1 - s) % n + n) % n, &so, &sl);
    segment(count, n, ((me - s) % n + n) % n, &ro, &rl);
    TC_CHECK(tc_vb_sendrecv(vb, next, buf + so * es, sl * es, prev, buf + ro * es, rl * es));
  }
  return TECOMM_SUCCESS;
}

static tecomm_result_t doubling(tc_vb_t *vb, int me, int n, char *buf, size_t count, size_t es,
                                tecore_dtype_t dtype, tecomm_op_t op, char *tmp) {
  for (int mask = 1; mask < n; mask <<= 1) {
    int partner = me ^ mask;
    TC_CHECK(tc_vb_sendrecv(vb, partner, buf, count * es, partner, tmp, count * es));
    tc_vb_reduce(buf, tmp, count, dtype, op);
  }
  return TECOMM_SUCCESS;
}

tecomm_result_t tc_vb_allreduce(tc_vb_t *vb, void *buf, size_t count, tecore_dtype_t dtype,
                                tecomm_op_t op) {
  size_t es = tecore_dtype_size(dtype), bytes = count * es;
  int me = 0, n = 1;
  tc_vb_ranks(vb, &me, &n);
  tecomm_result_t r = tc_vb_status(vb, "verbs allreduce");
  if (r == TECOMM_SUCCESS && n > 1 && count > 0) {
    int pow2 = (n & (n - 1)) == 0;
    int rd = pow2 && bytes <= (size_t)tecore_tunable_int(&tc_tun_verbs_rd_max_kb) * 1024;
    size_t tb = rd ? bytes : (count / (size_t)n + 1) * es;
    char *tmp = malloc(tb ? tb : 1);
    if (!tmp)
      r = TC_ERR(TECOMM_ERR_NOMEM, "verbs allreduce: out of host memory (%zu bytes)", tb);
    else if (rd)
      r = doubling(vb, me, n, buf, count, es, dtype, op, tmp);
    else
      r = ring(vb, me, n, buf, count, es, dtype, op, tmp);
    free(tmp);
  }
  if (r != TECOMM_SUCCESS) memset(buf, 0xff, bytes);   /* NaN, never partial sums */
  return r;
}
