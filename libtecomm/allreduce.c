/* SPDX-License-Identifier: Apache-2.0 */
/* allreduce.c -- tecomm_allreduce, tecomm_allreduce_add_rmsnorm and the
 * amax reduction for delayed scaling: argument checks, the communicator's
 * state (a device-side timeout surfaces here, on the next call), the
 * algorithm, staging of inputs that are not symmetric memory (a copy into
 * the pool, or past it into a segment every rank makes together, on the
 * same stream), then the NVLS, IPC or MNNVL kernel (MNNVL:
 * the Lamport kernel over the fabric-imported workspaces), or NCCL.
 *
 * The NCCL path of the fused call (and the one-rank case) is the
 * allreduce followed by libtecore's own kernels: tecore_scale_add for the
 * residual, tecore_rmsnorm_fwd for the norm (and again for the FP8 copy). */
#include "level.h"
#include "agree.h"
#include "te_results.h"
#include <stdio.h>
#include <string.h>

/* One allreduce as the common path takes it: the public call's arguments,
 * checked.  fa: the fused call's arguments, NULL for a plain allreduce
 * (send is then fa->x, recv unused).  how: TC_AR_SCRATCH, the caller reads
 * send no more after this call (tc_allreduce_scratch), so an algorithm
 * that reduce-scatters into its input may use symmetric send where it
 * lies instead of a staged copy; TC_AR_BESIDE, a narrow grid
 * (tc_internal.h). */
struct tc_ar_run {
  tecore_devptr_t send, recv;
  size_t count;
  tecore_dtype_t dtype;
  tecomm_op_t op;
  tecomm_algo_t asked; /* TECOMM_ALGO_AUTO: the table */
  const struct tecomm_add_rmsnorm *fa;
  unsigned how;
  tecore_stream_t stream;
  const char *fn; /* the public function, for messages */
};

static int dtype_ok(tecore_dtype_t d) {
  return d == TECORE_DTYPE_F32 || d == TECORE_DTYPE_BF16 || d == TECORE_DTYPE_F16;
}

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
static tecomm_result_t stage_get(struct tecomm_comm *c, size_t count, tecore_dtype_t dtype,
                                 int cap, const char *fn) {
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

static tecomm_result_t ce_scratch_get(struct tecomm_comm *c, size_t bytes, int cap,
                                      const char *fn) {
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
struct al_post {
  tecore_devptr_t to[3], from[3];
  size_t bytes[3];
  int n;
};
struct al_call {
  struct tecomm_add_rmsnorm args; /* its fp8_out may point to fp8: used in place */
  struct tecore_tensor fp8;
  struct al_post post;
};

static int fused_unaligned(const struct tecomm_add_rmsnorm *a, int reads_x) {
  tecore_devptr_t d8 = a->fp8_out ? a->fp8_out->data : 0;
  return !al16(a->residual_in) || !al16(a->residual_out) || !al16(a->out) || !al16(a->gamma) ||
         !al16(d8) || (reads_x && !al16(a->x));
}

static tecomm_result_t fused_align(struct tecomm_comm *c, const struct tecomm_add_rmsnorm *a,
                                   int reads_x, int cap, tecore_stream_t stream,
                                   struct al_call *al, const char *fn) {
  struct tecomm_add_rmsnorm *b = &al->args;
  struct tecore_tensor *q = &al->fp8;
  struct al_post *post = &al->post;
  *b = *a;
  post->n = 0;
  if (a->hidden % 8 != 0 || !fused_unaligned(a, reads_x)) return TECOMM_SUCCESS;
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
  struct al_call al;
  TC_CHECK(fused_align(c, k->fa, 0, k->cap, k->stream, &al, k->fn));
  TC_CHECK(composite(c, &al.args, reduce, k->stream, k->fn));
  for (int i = 0; i < al.post.n; i++)
    TC_CORE(tecore_memcpy_async(al.post.to[i], al.post.from[i], al.post.bytes[i], k->stream),
            k->fn);
  return TECOMM_SUCCESS;
}

/* One rank: the sum is the input. */
static tecomm_result_t copy_reduce(struct tecomm_comm *c, tecore_devptr_t send,
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
    TC_CHECK(stage_get(c, k->count, k->dtype, k->cap, k->fn));
    for (int r = 0; r < c->nranks; r++) call->in[r] = tc_seg_addr(c->stage_seg, r, c->stage);
    TC_CORE(tecore_memcpy_async(call->in[c->rank], k->send, k->bytes, k->stream), k->fn);
  }
  return TECOMM_SUCCESS;
}

tecomm_result_t tc_run_kernel(struct tecomm_comm *c, const struct tc_call *k) {
  struct tc_ar_call call;
  memset(&call, 0, sizeof call);
  call.algo = (tc_ar_algo_t)tc_algo_kernel(k->algo);
  call.nvls_uc = k->nvls_uc;
  call.nvls_mc = k->nvls_mc;
  call.nvls_data_bytes = k->nvls_data_bytes;
  call.op = k->op == TECOMM_MAX ? TC_AR_MAX : TC_AR_SUM;
  call.dtype = k->dtype;
  call.count = k->count;
  call.rank = c->rank;
  call.nranks = c->nranks;
  call.out = k->recv;
  call.timeout_ns = (uint64_t)tc_timeout_ms() * 1000000ull;
  call.ws_max_bytes = c->ws.max_bytes;
  call.beside = (k->how & TC_AR_BESIDE) != 0;
  if (call.algo == TC_AR_CE) {
    TC_CHECK(ce_scratch_get(c, tc_ar_ce_scratch_bytes(c->nranks, k->count, k->dtype), k->cap,
                            k->fn));
    call.scratch = c->ce_scratch;
    call.scratch_bytes = c->ce_scratch_bytes;
  }
  for (int r = 0; r < c->nranks; r++) call.ws[r] = c->ws.peer[r];
  TC_CHECK(kernel_inputs(c, k, &call));
  struct tc_ar_fused f;
  struct al_call alc;
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
  for (int i = 0; i < alc.post.n; i++)
    TC_CORE(tecore_memcpy_async(alc.post.to[i], alc.post.from[i], alc.post.bytes[i], k->stream),
            k->fn);
  return TECOMM_SUCCESS;
}

/* The common path: the communicator's health, the algorithm, then the
 * level that runs it. */
static tecomm_result_t run(struct tecomm_comm *c, const struct tc_ar_run *q) {
  const int scratch = (q->how & TC_AR_SCRATCH) != 0;
  struct tc_call k = {.send = q->send, .recv = q->recv, .count = q->count,
                      .bytes = q->count * tecore_dtype_size(q->dtype), .dtype = q->dtype,
                      .op = q->op, .fa = q->fa, .how = q->how, .cap = tc_capturing(q->stream),
                      .stream = q->stream, .fn = q->fn};
  tecomm_result_t ready = tc_comm_ready(c, q->fn, !k.cap);
  if (ready != TECOMM_SUCCESS) return tc_agree_refused(c, ready, q->fn); /* peers may wait */
  k.seg = tc_seg_find(c, q->send, k.bytes, &k.off);
  if (c->nranks == 1) {
    if (q->asked != TECOMM_ALGO_AUTO && q->asked != TECOMM_ALGO_NCCL &&
        c->level > TC_LEVEL_INPLACE)
      return TC_ERR(TECOMM_ERR_NOT_SUPPORTED, "%s: algorithm %s: level %s", q->fn,
                    tecomm_algo_name(q->asked), tc_level_name(c->level));
    return q->fa ? tc_run_composite(c, &k, copy_reduce)
                 : copy_reduce(c, q->send, q->recv, q->count, q->dtype, q->op, q->stream, q->fn);
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
  const struct tc_call_facts facts = {.bytes = k.bytes, .symmetric = k.seg != NULL,
                                      .in_place = k.in_place,
                                      .fused_lamport_ok = !q->fa || q->fa->hidden % 8 == 0,
                                      .sum = q->op == TECOMM_SUM, .fused = q->fa != NULL,
                                      .beside = (q->how & TC_AR_BESIDE) != 0};
  TC_CHECK(tc_select(c, q->asked, &facts, &k.algo));
  const struct tc_level *l = tc_level_at(tc_algo_at(k.algo));
  return q->fa ? l->run_fused(c, &k) : l->run(c, &k);
}

/* An operand in symmetric memory must lie inside its allocation: the
 * kernels read and write the same offsets of every peer's slot, so a
 * count past it would reach another allocation, or a peer's memory. */
static tecomm_result_t sym_bounds(struct tecomm_comm *c, tecore_devptr_t p, size_t bytes,
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
static tecomm_result_t allreduce_live(struct tecomm_comm *comm, const struct tc_ar_run *q) {
  const tecore_devptr_t send = q->send, recv = q->recv;
  const char *fn = q->fn;
  TC_CHECK(check_common(q->count, q->dtype, q->asked, fn));
  TC_ARG(send, "%s: send is 0", fn);
  TC_ARG(recv, "%s: recv is 0", fn);
  TC_ARG(q->op == TECOMM_SUM || q->op == TECOMM_MAX, "%s: op %d is not TECOMM_SUM or TECOMM_MAX",
         fn, (int)q->op);
  size_t esz = tecore_dtype_size(q->dtype);
  TC_ARG(send % esz == 0 && recv % esz == 0, "%s: send or recv is not aligned to %zu bytes", fn, esz);
  size_t bytes = q->count * esz;
  TC_ARG(send == recv || send + bytes <= recv || recv + bytes <= send,
         "%s: send and recv overlap without being equal", fn);
  TC_CHECK(sym_bounds(comm, send, bytes, "send", fn));
  TC_CHECK(sym_bounds(comm, recv, bytes, "recv", fn));
  return tc_comm_fail(comm, run(comm, q));
}

/* A communicator from the caller: a live one (the handle registry), then
 * allreduce_live (q->fn is set here). */
static tecomm_result_t allreduce(tecomm_comm_t comm, struct tc_ar_run q) {
  static const char fn[] = "tecomm_allreduce";
  TC_COMM(comm, fn);
  q.fn = fn;
  return allreduce_live(comm, &q);
}

tecomm_result_t tc_allreduce_group(struct tecomm_comm *c, tecore_devptr_t send,
                                   tecore_devptr_t recv, size_t count, tecore_dtype_t dtype,
                                   tecomm_op_t op, tecore_stream_t stream, const char *fn) {
  return allreduce_live(c, &(struct tc_ar_run){.send = send, .recv = recv, .count = count,
                                               .dtype = dtype, .op = op,
                                               .asked = TECOMM_ALGO_AUTO, .stream = stream,
                                               .fn = fn});
}

TE_EXPORT tecomm_result_t tecomm_allreduce_algo(tecomm_comm_t comm, tecore_devptr_t send,
                                                tecore_devptr_t recv, size_t count,
                                                tecore_dtype_t dtype, tecomm_op_t op,
                                                tecomm_algo_t algo, tecore_stream_t stream) {
  return allreduce(comm, (struct tc_ar_run){.send = send, .recv = recv, .count = count,
                                            .dtype = dtype, .op = op, .asked = algo,
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
  TC_CHECK(sym_bounds(comm, a->x, bytes, "args->x", fn));
  TC_CHECK(sym_bounds(comm, a->residual_in, bytes, "args->residual_in", fn));
  TC_CHECK(sym_bounds(comm, a->residual_out, bytes, "args->residual_out", fn));
  TC_CHECK(sym_bounds(comm, a->out, bytes, "args->out", fn));
  return tc_comm_fail(comm, run(comm, &(struct tc_ar_run){.send = a->x,
                                                          .count = a->rows * a->hidden,
                                                          .dtype = a->dtype, .op = TECOMM_SUM,
                                                          .asked = a->algo, .fa = a, .how = how,
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
  return allreduce(comm, (struct tc_ar_run){.send = send, .recv = recv, .count = count,
                                            .dtype = dtype, .op = TECOMM_SUM, .asked = algo,
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
