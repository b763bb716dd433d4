/* SPDX-License-Identifier: Apache-2.0 */
/* allreduce.c -- tecomm_allreduce, tecomm_allreduce_add_rmsnorm and the
 * amax reduction for delayed scaling: argument checks, the communicator's
 * state (a device-side timeout surfaces here, on the next call), the
 * algorithm (tc_select), then the level that runs it (level.h; the IPC
 * kernels' path and the composite fused call they share are in
 * ar_run.c). */
#include "level.h"
#include "base/agree.h"
#include "te_results.h"
#include <stdio.h>
#include <string.h>

/* One allreduce as the common path takes it: a struct tc_call (level.h)
 * holding the public call's arguments, checked, and in algo the
 * algorithm asked for (TECOMM_ALGO_AUTO: the table).  fa: the fused
 * call's arguments, NULL for a plain allreduce (send is then fa->x, recv
 * unused).  how: TC_AR_SCRATCH, the caller reads send no more after this
 * call (tc_allreduce_scratch), so an algorithm that reduce-scatters into
 * its input may use symmetric send where it lies instead of a staged
 * copy; TC_AR_BESIDE, a narrow grid (tc_internal.h). */

static int dtype_ok(tecore_dtype_t d) {
  return d == TECORE_DTYPE_F32 || d == TECORE_DTYPE_BF16 || d == TECORE_DTYPE_F16;
}

/* The common path: the communicator's health, the algorithm, then the
 * level that runs it. */
static tecomm_result_t run(struct tecomm_comm *c, const struct tc_call *q) {
  const int scratch = (q->how & TC_AR_SCRATCH) != 0;
  struct tc_call k = *q;
  k.algo = TECOMM_ALGO_AUTO; /* selection's, below */
  k.bytes = q->count * tecore_dtype_size(q->dtype);
  k.cap = tc_capturing(q->stream);
  tecomm_result_t ready = tc_comm_ready(c, q->fn, !k.cap);
  if (ready != TECOMM_SUCCESS) return tc_agree_refused(c, ready, q->fn); /* peers may wait */
  k.seg = tc_seg_find(c, q->send, k.bytes, &k.off);
  if (c->nranks == 1) {
    if (q->algo != TECOMM_ALGO_AUTO && q->algo != TECOMM_ALGO_NCCL &&
        c->level > TC_LEVEL_INPLACE)
      return TC_ERR(TECOMM_ERR_NOT_SUPPORTED, "%s: algorithm %s: level %s", q->fn,
                    tecomm_algo_name(q->algo), tc_level_name(c->level));
    return q->fa ? tc_run_composite(c, &k, tc_copy_reduce)
                 : tc_copy_reduce(c, q->send, q->recv, q->count, q->dtype, q->op, q->stream, q->fn);
  }
  /* in place on symmetric memory when the algorithm allows; two-shot
   * reduce-scatters into its input, so a symmetric input is used directly
   * only when the caller reduces it in place (plain send == recv) or
   * gives it up (scratch): else it would hold partial sums afterwards */
  k.in_place = (!q->fa && q->send == q->recv) || scratch;
  /* fused: Lamport's kernel takes rows of a multiple of 8 elements; where
   * this rank's operands are not aligned for it, fused_align gives it
   * aligned copies (a choice made from hidden alone, the same on every
   * rank) */
  struct tc_call_facts facts = tc_call_facts_of(&k);
  facts.fused_lamport_ok = !q->fa || tc_ar_fused_rows_vec(q->fa->hidden);
  TC_CHECK(tc_select(c, q->algo, &facts, &k.algo));
  const struct tc_level *l = tc_level_at(tc_algo_at(k.algo));
  return l->run(c, &k);
}

/* An operand in symmetric memory must lie inside its allocation: the
 * kernels read and write the same offsets of every peer's slot, so a
 * count past it would reach another allocation, or a peer's memory. */
tecomm_result_t tc_sym_bounds(struct tecomm_comm *c, tecore_devptr_t p, size_t bytes,
                              const char *what, const char *fn) {
  struct tc_seg *s = NULL;
  size_t off = 0, room = 0;
  if (!p || !tc_sym_room(c, p, &s, &off, &room)) return TECOMM_SUCCESS;
  if (room == 0)
    return TC_ERR(TECOMM_ERR_INVALID,
                  "%s: %s 0x%llx is free symmetric pool space (freed, or never allocated by "
                  "tecomm_mem_alloc)", fn, what, (unsigned long long)p);
  if (bytes > room)
    return TC_ERR(TECOMM_ERR_INVALID,
                  "%s: %s 0x%llx: %zu bytes run past its symmetric allocation (%zu bytes from "
                  "%s to its end)", fn, what, (unsigned long long)p, bytes, room, what);
  return TECOMM_SUCCESS;
}

/* The checks every allreduce makes of its arguments (the communicator's,
 * TC_COMM, the public entry points make first). */
static tecomm_result_t check_common(size_t count, tecore_dtype_t dtype, tecomm_algo_t algo,
                                    const char *fn) {
  TC_ARG(count > 0, "%s: count is 0", fn);
  TC_ARG(dtype_ok(dtype), "%s: dtype %d (%s) is not F32, BF16 or F16", fn, (int)dtype,
         tecore_dtype_name(dtype));
  TC_ARG((unsigned)algo < TECOMM_ALGO_COUNT_, "%s: algo %d is not a tecomm_algo", fn, (int)algo);
  TC_ARG(count <= ((size_t)1 << 40), "%s: count %zu is too large", fn, count);
  return TECOMM_SUCCESS;
}

/* tecomm_allreduce_algo on a communicator known to be live (one the
 * caller gave and tc_comm_valid passed, or a node group of the hierarchy,
 * which only libtecomm holds): the plain call's checks, then run. */
static tecomm_result_t allreduce_live(struct tecomm_comm *comm, const struct tc_call *q) {
  const tecore_devptr_t send = q->send, recv = q->recv;
  const char *fn = q->fn;
  TC_CHECK(check_common(q->count, q->dtype, q->algo, fn));
  TC_ARG(send, "%s: send is 0", fn);
  TC_ARG(recv, "%s: recv is 0", fn);
  TC_ARG(q->op == TECOMM_SUM || q->op == TECOMM_MAX, "%s: op %d is not TECOMM_SUM or TECOMM_MAX",
         fn, (int)q->op);
  size_t esz = tecore_dtype_size(q->dtype);
  TC_ARG(send % esz == 0 && recv % esz == 0, "%s: send or recv is not aligned to %zu bytes", fn, esz);
  size_t bytes = q->count * esz;
  TC_ARG(send == recv || send + bytes <= recv || recv + bytes <= send,
         "%s: send and recv overlap without being equal", fn);
  TC_CHECK(tc_sym_bounds(comm, send, bytes, "send", fn));
  TC_CHECK(tc_sym_bounds(comm, recv, bytes, "recv", fn));
  return tc_comm_fail(comm, run(comm, q));
}

/* A communicator from the caller: a live one (the handle registry), then
 * allreduce_live (q->fn is set here). */
static tecomm_result_t allreduce(tecomm_comm_t comm, struct tc_call q) {
  static const char fn[] = "tecomm_allreduce";
  TC_COMM(comm, fn);
  q.fn = fn;
  return allreduce_live(comm, &q);
}

tecomm_result_t tc_allreduce_group(struct tecomm_comm *c, tecore_devptr_t send,
                                   tecore_devptr_t recv, size_t count, tecore_dtype_t dtype,
                                   tecomm_op_t op, tecore_stream_t stream, const char *fn) {
  return allreduce_live(c, &(struct tc_call){.send = send, .recv = recv, .count = count,
                                             .dtype = dtype, .op = op,
                                             .algo = TECOMM_ALGO_AUTO, .stream = stream,
                                             .fn = fn});
}

TE_EXPORT tecomm_result_t tecomm_allreduce_algo(tecomm_comm_t comm, tecore_devptr_t send,
                                                tecore_devptr_t recv, size_t count,
                                                tecore_dtype_t dtype, tecomm_op_t op,
                                                tecomm_algo_t algo, tecore_stream_t stream) {
  return allreduce(comm, (struct tc_call){.send = send, .recv = recv, .count = count,
                                          .dtype = dtype, .op = op, .algo = algo,
                                          .stream = stream});
}

TE_EXPORT tecomm_result_t tecomm_allreduce(tecomm_comm_t comm, tecore_devptr_t send,
                                           tecore_devptr_t recv, size_t count, tecore_dtype_t dtype,
                                           tecomm_op_t op, tecore_stream_t stream) {
  return tecomm_allreduce_algo(comm, send, recv, count, dtype, op, TECOMM_ALGO_AUTO, stream);
}

/* tecomm_allreduce_add_rmsnorm; how: as run's. */
static tecomm_result_t add_rmsnorm(tecomm_comm_t comm, const struct tecomm_add_rmsnorm *a,
                                   unsigned how, tecore_stream_t stream) {
  static const char fn[] = "tecomm_allreduce_add_rmsnorm";
  TC_COMM(comm, fn);
  TC_ARG(a, "%s: args is NULL", fn);
  TC_ARG(a->rows > 0 && a->hidden > 0, "%s: args->rows (%zu) and args->hidden (%zu) must be > 0", fn,
         a->rows, a->hidden);
  TC_CHECK(check_common(a->rows * a->hidden, a->dtype, a->algo, fn));
  TC_ARG(a->x, "%s: args->x is 0", fn);
  TC_ARG(a->residual_in, "%s: args->residual_in is 0", fn);
  TC_ARG(a->residual_out, "%s: args->residual_out is 0", fn);
  TC_ARG(a->gamma, "%s: args->gamma is 0", fn);
  TC_ARG(a->out || a->fp8_out, "%s: args->out is 0 and args->fp8_out is NULL: nothing to write", fn);
  TC_ARG(a->eps >= 0.0f && a->eps == a->eps, "%s: args->eps (%g) must be >= 0", fn, (double)a->eps);
  if (a->fp8_out) {
    const struct tecore_tensor *t = a->fp8_out;
    TC_ARG(t->dtype == TECORE_DTYPE_E4M3 || t->dtype == TECORE_DTYPE_E5M2,
           "%s: args->fp8_out has dtype %s, not E4M3 or E5M2", fn, tecore_dtype_name(t->dtype));
    TC_ARG(t->scaling == TECORE_SCALING_DELAYED || t->scaling == TECORE_SCALING_CURRENT,
           "%s: args->fp8_out must use delayed or current scaling", fn);
    TC_ARG(tecore_tensor_numel(t) == a->rows * a->hidden && t->data,
           "%s: args->fp8_out must have rows x hidden elements and data", fn);
  }
  /* peers may still read x while this rank writes its outputs */
  size_t bytes = a->rows * a->hidden * tecore_dtype_size(a->dtype);
  TC_ARG(a->x + bytes <= a->residual_out || a->residual_out + bytes <= a->x,
         "%s: args->x overlaps args->residual_out", fn);
  TC_ARG(!a->out || a->x + bytes <= a->out || a->out + bytes <= a->x,
         "%s: args->x overlaps args->out", fn);
  size_t b8 = a->rows * a->hidden;
  TC_ARG(!a->fp8_out || a->x + bytes <= a->fp8_out->data || a->fp8_out->data + b8 <= a->x,
         "%s: args->x overlaps args->fp8_out", fn);
  TC_ARG(a->rsigma % 4 == 0, "%s: args->rsigma (0x%llx) is not aligned to 4 bytes", fn,
         (unsigned long long)a->rsigma);
  TC_ARG(!a->rsigma || a->x + bytes <= a->rsigma || a->rsigma + a->rows * 4 <= a->x,
         "%s: args->x overlaps args->rsigma", fn);
  TC_CHECK(tc_sym_bounds(comm, a->x, bytes, "args->x", fn));
  TC_CHECK(tc_sym_bounds(comm, a->residual_in, bytes, "args->residual_in", fn));
  TC_CHECK(tc_sym_bounds(comm, a->residual_out, bytes, "args->residual_out", fn));
  TC_CHECK(tc_sym_bounds(comm, a->out, bytes, "args->out", fn));
  return tc_comm_fail(comm, run(comm, &(struct tc_call){.send = a->x,
                                                        .count = a->rows * a->hidden,
                                                        .dtype = a->dtype, .op = TECOMM_SUM,
                                                        .algo = a->algo, .fa = a, .how = how,
                                                        .stream = stream, .fn = fn}));
}

TE_EXPORT tecomm_result_t tecomm_allreduce_add_rmsnorm(tecomm_comm_t comm,
                                                       const struct tecomm_add_rmsnorm *a,
                                                       tecore_stream_t stream) {
  return add_rmsnorm(comm, a, 0, stream);
}

/* The fuser's sums (fuser_ops.c). */
tecomm_result_t tc_allreduce_scratch(tecomm_comm_t comm, tecore_devptr_t send, tecore_devptr_t recv,
                                     size_t count, tecore_dtype_t dtype, tecomm_algo_t algo,
                                     unsigned how, tecore_stream_t stream) {
  TC_ARG(!(how & ~(TC_AR_SCRATCH | TC_AR_BESIDE)), "tc_allreduce_scratch: how 0x%x", how);
  return allreduce(comm, (struct tc_call){.send = send, .recv = recv, .count = count,
                                          .dtype = dtype, .op = TECOMM_SUM, .algo = algo,
                                          .how = how, .stream = stream});
}

tecomm_result_t tc_allreduce_add_rmsnorm_scratch(tecomm_comm_t comm,
                                                 const struct tecomm_add_rmsnorm *a, unsigned how,
                                                 tecore_stream_t stream) {
  TC_ARG(!(how & ~(TC_AR_SCRATCH | TC_AR_BESIDE)), "tc_allreduce_add_rmsnorm_scratch: how 0x%x",
         how);
  return add_rmsnorm(comm, a, how, stream);
}

TE_EXPORT tecore_result_t tecomm_amax_reduce(tecore_devptr_t amax, size_t count,
                                             tecore_stream_t stream, void *ctx) {
  tecomm_result_t r = tecomm_allreduce((tecomm_comm_t)ctx, amax, amax, count, TECORE_DTYPE_F32,
                                       TECOMM_MAX, stream);
  return (tecore_result_t)te_result_to_core((int)r);
}
