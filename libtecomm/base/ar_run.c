/* SPDX-License-Identifier: Apache-2.0 */
/* ar_run.c -- what the levels share to run a call once it is chosen:
 * the IPC kernels' path (the input staged in the pool or read in place,
 * the copy-engine scratch, the kernel launch) for the nvls, mnnvl and ipc
 * levels, and the composite fused call (allreduce, then add and RMSNorm
 * as kernels of their own) for the levels that only sum (nccl, verbs)
 * and for one rank.  Both align a fused call's operands the same way on
 * every rank (fused_align), so that every rank runs the same row plan
 * and gets the same bits.  Below the levels: it calls nothing above. */
#include "level.h"
#include "agree.h"
#include <stdio.h>
#include <string.h>

/* How far staging may go past the pool. */
TECORE_TUNABLE_INT(tc_tun_stage_mb, "TECOMM_STAGE_MB", 4096, 0, 16777216,
                   "MiB of symmetric segments of its own (made collectively past the pool) the "
                   "staging copy of allreduce inputs that are not symmetric memory may take in "
                   "all; 0: staging in the pool only")

/* The staging buffer for bytes of input (not symmetric memory), in the
 * pool while it fits there, else a segment of its own; sizes grow in
 * powers of two from 64 KiB, and an outgrown buffer stays allocated
 * (captured graphs may still name it).
 *
 * Every rank takes the same decision.  Whether to grow follows from the
 * calls (every rank makes the same ones; stage_bytes is the same
 * everywhere); where the new buffer goes is decided from one allgather
 * of (bytes, pool offset, limit, capturing): the pool when every rank
 * got the same offset, else a segment made by tc_seg_create, which every
 * rank gets or none (TECOMM_ERR_NOMEM naming the rank that could not).
 * Bounded: the segments together stay within TECOMM_STAGE_MB (the least
 * any rank allows).  A segment is not made during a capture (device
 * memory is not allocated then): an eager call of the size must come
 * first, as a graph's warm-up does. */
tecomm_result_t tc_stage_get(struct tecomm_comm *c, size_t count, tecore_dtype_t dtype, int cap,
                             const char *fn) {
  size_t bytes = count * tecore_dtype_size(dtype);
  if (c->stage_seg && c->stage_bytes >= bytes) return TECOMM_SUCCESS;
  if (!c->pool)
    return TC_ERR(TECOMM_ERR_NOT_SUPPORTED, "%s: no pool to stage an input in (level %s)", fn,
                  tc_level_name(c->level));
  size_t want = 64 * 1024;
  while (want < bytes) want *= 2;
  size_t got = want, off = tc_pool_take(c->pool, want);
  if (off == (size_t)-1) off = tc_pool_take(c->pool, bytes), got = bytes;
  size_t limit = (size_t)tecore_tunable_int(&tc_tun_stage_mb) << 20;
  /* the call's count and dtype go along: ranks that disagree are told so
   * here, where the sizes meet (TECOMM_ERR_MISMATCH, as the kernels would) */
  uint64_t mine[6] = {bytes, off, limit, (uint64_t)cap, count, (uint64_t)dtype},
           all[6 * TC_AR_MAX_RANKS];
  tecomm_result_t r = c->mesh->allgather(c->mesh, mine, all, sizeof mine);
  int same_off = 1, anycap = 0, diverged = -1;
  for (int p = 0; r == TECOMM_SUCCESS && p < c->nranks; p++) {
    if ((all[6 * p] != bytes || all[6 * p + 4] != count || all[6 * p + 5] != (uint64_t)dtype) &&
        diverged < 0)
      diverged = p;
    same_off = same_off && all[6 * p + 1] == off;
    if (all[6 * p + 2] < limit) limit = (size_t)all[6 * p + 2];
    anycap = anycap || all[6 * p + 3];
  }
  if (r == TECOMM_SUCCESS && diverged < 0 && same_off && off != (size_t)-1) {
    c->stage_seg = c->pool;
    c->stage = off;
    c->stage_bytes = got;
    return TECOMM_SUCCESS;
  }
  if (off != (size_t)-1) (void)tc_pool_give(c->pool, off);
  if (r != TECOMM_SUCCESS) return r;
  if (diverged >= 0) {
    const uint64_t *o = &all[6 * diverged];
    c->sticky_peer = diverged;
    if (o[5] != (uint64_t)dtype)
      return TC_ERR(TECOMM_ERR_MISMATCH,
                    "%s: rank %d's collective call differs from this rank's: dtype %s here, %s "
                    "on rank %d", fn, diverged, tecore_dtype_name(dtype),
                    tecore_dtype_name((tecore_dtype_t)o[5]), diverged);
    return TC_ERR(TECOMM_ERR_MISMATCH,
                  "%s: rank %d's collective call differs from this rank's: count %zu here, %llu "
                  "on rank %d", fn, diverged, count, (unsigned long long)o[4], diverged);
  }
  /* past the pool: a segment of its own, within what is left of the limit */
  size_t left = limit > c->stage_seg_total ? limit - c->stage_seg_total : 0;
  if (want > left) want = bytes;
  if (bytes > left)
    return TC_ERR(TECOMM_ERR_NOMEM,
                  "%s: an input of %zu bytes that is not symmetric memory fits neither the pool "
                  "(TECOMM_POOL_MB=%zu) nor what TECOMM_STAGE_MB=%zu leaves for staging segments "
                  "(%zu bytes): raise one, or allocate the input with tecomm_mem_alloc",
                  fn, bytes, c->pool_req_mb, limit >> 20, left);
  if (anycap)
    return TC_ERR(TECOMM_ERR_NOT_SUPPORTED,
                  "%s: an input of %zu bytes that is not symmetric memory needs a staging segment "
                  "past the pool, which is not made during a capture: make one eager call of "
                  "this size before capturing (or allocate the input with tecomm_mem_alloc)",
                  fn, bytes);
  struct tc_seg *seg = NULL;
  int bad = -1;
  TC_CHECK(tc_seg_create(c, want, "stage", &seg, &bad));
  seg->internal = 1;
  c->stage_seg = seg;
  c->stage = 0;
  c->stage_bytes = seg->bytes;
  c->stage_seg_total += seg->bytes;
  TC_INFO("%s: staging past the pool: a segment of %zu bytes on every rank (%zu of "
          "TECOMM_STAGE_MB's %zu MiB taken)",
          fn, seg->bytes, c->stage_seg_total, limit >> 20);
  return TECOMM_SUCCESS;
}


/* A local scratch of this rank's (grown on an eager call in powers of two
 * from 1 MiB; an outgrown buffer stays allocated -- a captured graph may
 * still name it, eager work may still use it -- until the communicator
 * goes): the copy-engine one-shot's copies of the peers' inputs, and the
 * aligned copies of fused_align. */
/* One of the communicator's scratches: its fields in struct tecomm_comm. */
struct scratch_ref {
  tecore_devptr_t *buf;
  size_t *have;
  tecore_devptr_t *old; /* outgrown buffers, max_old of them at most */
  int *n_old, max_old;
  const char *what;     /* whose scratch, for messages */
};

static tecomm_result_t scratch_get(const struct scratch_ref *s, size_t bytes, int cap,
                                   const char *fn) {
  if (*s->have >= bytes) return TECOMM_SUCCESS;
  if (cap)
    return TC_ERR(TECOMM_ERR_NOT_SUPPORTED,
                  "%s: %s needs %zu bytes of scratch, which is not allocated during a capture: "
                  "make one eager call of this size first",
                  fn, s->what, bytes);
  size_t want = (size_t)1 << 20;
  while (want < bytes) want *= 2;
  if (*s->n_old + (*s->buf != 0) > s->max_old)
    return TC_ERR(TECOMM_ERR_NOMEM, "%s: the scratch of %s grew %d times", fn, s->what,
                  *s->n_old + 1);
  tecore_devptr_t d = 0;
  TC_CORE(tecore_mem_alloc(want, &d), fn);
  if (*s->buf) s->old[(*s->n_old)++] = *s->buf;
  *s->buf = d;
  *s->have = want;
  return TECOMM_SUCCESS;
}

tecomm_result_t tc_ce_scratch_get(struct tecomm_comm *c, size_t bytes, int cap, const char *fn) {
  const struct scratch_ref s = {&c->ce_scratch, &c->ce_scratch_bytes, c->ce_old, &c->n_ce_old,
                                (int)(sizeof c->ce_old / sizeof c->ce_old[0]),
                                "the copy-engine one-shot"};
  return scratch_get(&s, bytes, cap, fn);
}

static int al16(tecore_devptr_t p) { return (p & 15u) == 0; }

/* A fused call's row plan, algorithm and grid must be the same on every
 * rank: they decide which rank reduces which rows and which blocks meet at
 * each barrier.  They follow from hidden and from whether the epilogue's
 * operands allow 16-byte vectors -- and those (residuals, out, gamma, the
 * FP8 data, and x where the algorithm reads x itself: Lamport, NVLS, MNNVL)
 * are each rank's own.  So with hidden % 8 == 0 every rank takes the
 * vector plan, and a rank whose operands are not 16-byte aligned runs the
 * call on aligned copies in a scratch of its own: residual_in, gamma and x
 * copied in before, residual_out, out and the FP8 bytes copied out after,
 * on the same stream (the same bits: the copies move bytes).  al->args
 * (and al->fp8 for the FP8 tensor) is the call as it runs; al->post, when
 * set, the copies out are due after the launch. */

static int fused_unaligned(const struct tecomm_add_rmsnorm *a, int reads_x) {
  tecore_devptr_t d8 = a->fp8_out ? a->fp8_out->data : 0;
  return !al16(a->residual_in) || !al16(a->residual_out) || !al16(a->out) || !al16(a->gamma) ||
         !al16(d8) || (reads_x && !al16(a->x));
}

static tecomm_result_t fused_align(struct tecomm_comm *c, const struct tecomm_add_rmsnorm *a,
                                   int reads_x, int cap, tecore_stream_t stream,
                                   struct tc_al_call *al, const char *fn) {
  struct tecomm_add_rmsnorm *b = &al->args;
  struct tecore_tensor *q = &al->fp8;
  struct tc_al_post *post = &al->post;
  *b = *a;
  post->n = 0;
  if (!tc_ar_fused_rows_vec(a->hidden) || !fused_unaligned(a, reads_x)) return TECOMM_SUCCESS;
  const size_t esz = tecore_dtype_size(a->dtype), count = a->rows * a->hidden;
  const size_t line = 256, bytes = (count * esz + line - 1) / line * line;
  const size_t gbytes = (a->hidden * esz + line - 1) / line * line;
  const size_t qbytes = (count + line - 1) / line * line;
  /* room for the operands that need a copy only: x, residual_in (and
   * residual_out with it when they are one), residual_out, out, gamma, the
   * FP8 bytes, in that order */
  const int same = a->residual_in == a->residual_out;
  const size_t sz[6] = {reads_x && !al16(a->x) ? bytes : 0,
                        !al16(a->residual_in) ? bytes : 0,
                        !same && !al16(a->residual_out) ? bytes : 0,
                        a->out && !al16(a->out) ? bytes : 0,
                        !al16(a->gamma) ? gbytes : 0,
                        a->fp8_out && !al16(a->fp8_out->data) ? qbytes : 0};
  size_t at[6], need = 0;
  for (int i = 0; i < 6; i++) at[i] = need, need += sz[i];
  const struct scratch_ref sr = {&c->al_scratch, &c->al_scratch_bytes, c->al_old, &c->n_al_old,
                                 (int)(sizeof c->al_old / sizeof c->al_old[0]),
                                 "a fused call with operands that are not 16-byte aligned"};
  TC_CHECK(scratch_get(&sr, need, cap, fn));
  tecore_devptr_t p = c->al_scratch;
  tecore_devptr_t px = p + at[0], prin = p + at[1], prout = p + at[2], pout = p + at[3];
  tecore_devptr_t pg = p + at[4], pq = p + at[5];
  const size_t nb = count * esz;
  if (reads_x && !al16(a->x)) {
    TC_CORE(tecore_memcpy_async(px, a->x, nb, stream), fn);
    b->x = px;
  }
  if (!al16(a->gamma)) {
    TC_CORE(tecore_memcpy_async(pg, a->gamma, a->hidden * esz, stream), fn);
    b->gamma = pg;
  }
  if (same) {
    if (!al16(a->residual_in)) {
      TC_CORE(tecore_memcpy_async(prin, a->residual_in, nb, stream), fn);
      b->residual_in = b->residual_out = prin;
      post->to[post->n] = a->residual_out, post->from[post->n] = prin, post->bytes[post->n++] = nb;
    }
  } else {
    if (!al16(a->residual_in)) {
      TC_CORE(tecore_memcpy_async(prin, a->residual_in, nb, stream), fn);
      b->residual_in = prin;
    }
    if (!al16(a->residual_out)) {
      b->residual_out = prout;
      post->to[post->n] = a->residual_out, post->from[post->n] = prout, post->bytes[post->n++] = nb;
    }
  }
  if (a->out && !al16(a->out)) {
    b->out = pout;
    post->to[post->n] = a->out, post->from[post->n] = pout, post->bytes[post->n++] = nb;
  }
  if (a->fp8_out && !al16(a->fp8_out->data)) {
    *q = *a->fp8_out;
    q->data = pq;
    b->fp8_out = q;
    post->to[post->n] = a->fp8_out->data, post->from[post->n] = pq, post->bytes[post->n++] = count;
  }
  return TECOMM_SUCCESS;
}

/* The fused call where no kernel fuses it (nccl, verbs, one rank):
 * allreduce with reduce, then add, RMSNorm (+ FP8) as kernels. */
static tecomm_result_t composite(struct tecomm_comm *c, const struct tecomm_add_rmsnorm *a,
                                 tc_reduce_fn reduce, tecore_stream_t stream, const char *fn) {
  size_t count = a->rows * a->hidden, bytes = count * tecore_dtype_size(a->dtype);
  tecore_devptr_t t = a->residual_out;
  if (a->residual_out == a->residual_in) {
    if (a->out) {
      t = a->out; /* written last anyway */
    } else {
      if (c->scratch_bytes < bytes) {
        if (tc_capturing(stream))
          return TC_ERR(TECOMM_ERR_NOT_SUPPORTED,
                        "%s: residual_out == residual_in and out == 0 need a scratch buffer; "
                        "make one eager call of this size before capturing",
                        fn);
        if (c->scratch) (void)tecore_mem_free(c->scratch);
        c->scratch = 0;
        c->scratch_bytes = 0;
        TC_CORE(tecore_mem_alloc(bytes, &c->scratch), fn);
        c->scratch_bytes = bytes;
      }
      t = c->scratch;
    }
  }
  TC_CHECK(reduce(c, a->x, t, count, a->dtype, TECOMM_SUM, stream, fn));
  TC_CORE(tecore_scale_add(a->residual_out, t, 1.0f, a->residual_in, 1.0f, a->dtype, count, stream),
          fn);
  size_t shape[2] = {a->rows, a->hidden};
  struct tecore_tensor x, g, y;
  TC_CORE(tecore_tensor_init(&x, a->dtype, 2, shape, a->residual_out), fn);
  TC_CORE(tecore_tensor_init(&g, a->dtype, 1, &a->hidden, a->gamma), fn);
  if (a->out) {
    TC_CORE(tecore_tensor_init(&y, a->dtype, 2, shape, a->out), fn);
    TC_CORE(tecore_rmsnorm_fwd(&x, &g, a->eps, 0, &y, a->rsigma, stream), fn);
  }
  if (a->fp8_out) {
    y = *a->fp8_out;
    TC_CORE(tecore_rmsnorm_fwd(&x, &g, a->eps, 0, &y, a->out ? 0 : a->rsigma, stream), fn);
  }
  return TECOMM_SUCCESS;
}

/* The composite on the operands fused_align gives: the same row plan,
 * and so the same bits, as the IPC kernels and every other rank, whatever
 * this rank's alignment. */
tecomm_result_t tc_run_composite(struct tecomm_comm *c, const struct tc_call *k,
                                 tc_reduce_fn reduce) {
  struct tc_al_call al;
  TC_CHECK(fused_align(c, k->fa, 0, k->cap, k->stream, &al, k->fn));
  TC_CHECK(composite(c, &al.args, reduce, k->stream, k->fn));
  for (int i = 0; i < al.post.n; i++)
    TC_CORE(tecore_memcpy_async(al.post.to[i], al.post.from[i], al.post.bytes[i], k->stream),
            k->fn);
  return TECOMM_SUCCESS;
}

/* One rank: the sum is the input. */
tecomm_result_t tc_copy_reduce(struct tecomm_comm *c, tecore_devptr_t send,
                                   tecore_devptr_t recv, size_t count, tecore_dtype_t dtype,
                                   tecomm_op_t op, tecore_stream_t stream, const char *fn) {
  (void)c;
  (void)op;
  if (send != recv)
    TC_CORE(tecore_memcpy_async(recv, send, count * tecore_dtype_size(dtype), stream), fn);
  return TECOMM_SUCCESS;
}

/* Where the kernel reads its input: symmetric memory in place when the
 * protocol allows, this rank's own input (Lamport and NVLS push it
 * themselves), or a copy staged in the pool. */
static tecomm_result_t kernel_inputs(struct tecomm_comm *c, const struct tc_call *k,
                                     struct tc_ar_call *call) {
  struct tc_seg *seg = k->seg;
  if (seg && tc_ar_clobbers_input(call->algo) && !k->in_place) seg = NULL; /* stage it */
  if (seg) {
    for (int r = 0; r < c->nranks; r++) call->in[r] = tc_seg_addr(seg, r, k->off);
  } else if (call->algo == TC_AR_LAMPORT || call->algo == TC_AR_NVLS) {
    call->in[c->rank] = k->send; /* they push their own input; peers' in[] unused */
  } else {
    TC_CHECK(tc_stage_get(c, k->count, k->dtype, k->cap, k->fn));
    for (int r = 0; r < c->nranks; r++) call->in[r] = tc_seg_addr(c->stage_seg, r, c->stage);
    TC_CORE(tecore_memcpy_async(call->in[c->rank], k->send, k->bytes, k->stream), k->fn);
  }
  return TECOMM_SUCCESS;
}

void tc_ar_call_init(struct tecomm_comm *c, const struct tc_call *k, struct tc_ar_call *call) {
  memset(call, 0, sizeof *call);
  call->algo = (tc_ar_algo_t)tc_algo_kernel(k->algo);
  call->op = k->op == TECOMM_MAX ? TC_AR_MAX : TC_AR_SUM;
  call->dtype = k->dtype;
  call->count = k->count;
  call->rank = c->rank;
  call->nranks = c->nranks;
  call->out = k->recv;
  call->timeout_ns = (uint64_t)tc_timeout_ms() * 1000000ull;
  call->ws_max_bytes = c->ws.max_bytes;
  for (int r = 0; r < c->nranks; r++) call->ws[r] = c->ws.peer[r];
}

tecomm_result_t tc_run_kernel(struct tecomm_comm *c, const struct tc_call *k) {
  struct tc_ar_call call;
  tc_ar_call_init(c, k, &call);
  call.nvls_uc = k->nvls_uc;
  call.nvls_mc = k->nvls_mc;
  call.nvls_data_bytes = k->nvls_data_bytes;
  call.beside = (k->how & TC_AR_BESIDE) != 0;
  if (call.algo == TC_AR_CE) {
    TC_CHECK(tc_ce_scratch_get(c, tc_ar_ce_scratch_bytes(c->nranks, k->count, k->dtype), k->cap,
                            k->fn));
    call.scratch = c->ce_scratch;
    call.scratch_bytes = c->ce_scratch_bytes;
  }
  TC_CHECK(kernel_inputs(c, k, &call));
  struct tc_ar_fused f;
  struct tc_al_call alc;
  alc.post.n = 0;
  if (k->fa) {
    /* Lamport and NVLS read this rank's x themselves (in[rank]) */
    const int reads_x = call.algo == TC_AR_LAMPORT || call.algo == TC_AR_NVLS;
    TC_CHECK(fused_align(c, k->fa, reads_x, k->cap, k->stream, &alc, k->fn));
    const struct tecomm_add_rmsnorm *al = &alc.args;
    if (reads_x) call.in[c->rank] = al->x;
    f = (struct tc_ar_fused){.hidden = al->hidden, .eps = al->eps,
                             .residual_in = al->residual_in, .residual_out = al->residual_out,
                             .gamma = al->gamma, .out = al->out, .fp8_out = al->fp8_out,
                             .rsigma = al->rsigma};
    call.fused = &f;
    call.out = 0;
  }
  TC_CORE(tc_ar_launch(&call, k->stream), k->fn);
  return tc_fused_post(&alc, k->stream, k->fn);
}

tecomm_result_t tc_fused_align(struct tecomm_comm *c, const struct tecomm_add_rmsnorm *a,
                               int reads_x, int cap, tecore_stream_t stream,
                               struct tc_al_call *al, const char *fn) {
  al->post.n = 0;
  return fused_align(c, a, reads_x, cap, stream, al, fn);
}

tecomm_result_t tc_fused_post(const struct tc_al_call *al, tecore_stream_t stream,
                              const char *fn) {
  const struct tc_al_post *p = &al->post;
  for (int i = 0; i < p->n; i++)
    TC_CORE(tecore_memcpy_async(p->to[i], p->from[i], p->bytes[i], stream), fn);
  return TECOMM_SUCCESS;
}

tecomm_result_t tc_run_agreed(struct tecomm_comm *c, const struct tc_call *k, tc_reduce_fn reduce) {
  const struct tecomm_add_rmsnorm *fa = k->fa;
  TC_CHECK(tc_agree_host(c, &(struct tc_agree_call){.count = k->count, .dtype = k->dtype,
                                                     .op = k->op, .algo = k->algo,
                                                     .hidden = fa ? fa->hidden : 0,
                                                     .eps = fa ? fa->eps : 0.0f}, k->fn));
  if (fa) return tc_run_composite(c, k, reduce);
  return reduce(c, k->send, k->recv, k->count, k->dtype, k->op, k->stream, k->fn);
}
