/* SPDX-License-Identifier: Apache-2.0 */
/* ar_vdev.c -- the allreduce protocols of kernels/comm_ar.cu in C, for the
 * vdev backend.  A vdev kernel runs its whole grid on the stream's worker
 * thread, block after block; ranks are processes sharing memfd memory, so
 * these loops run the protocol for real against peers running the same
 * loops at the same time: flags are C11 atomics with release/acquire
 * ordering, Lamport words are written and polled atomically, and every
 * wait is bounded by CLOCK_MONOTONIC against the call's timeout and gives
 * up on the abort word, exactly where the GPU kernels do.
 *
 * Blocks run one after another, in the same order on every rank, so block
 * b's barriers meet block b's of the peers as on the GPU.  The element
 * math (kernels/common/comm_ar.h, norm.h) is the GPU's, so both backends
 * give the same bits. */
#include "ar_internal.h"
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "common/norm.h"

#define VP(a) ((void *)(uintptr_t)(a))

/* One rank's view of a call while it runs. */
struct vctx {
  const struct te_ar_params *p;
  uint64_t deadline; /* CLOCK_MONOTONIC ns; 0: none */
  uint32_t *err, *abort_word;
};

static uint64_t vnow(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void vctx_init(struct vctx *c, const struct te_ar_params *p) {
  c->p = p;
  c->deadline = p->timeout_ns ? vnow() + p->timeout_ns : 0;
  c->err = VP(p->ws[p->rank] + TE_AR_OFF_ERR);
  c->abort_word = VP(p->ws[p->rank] + TE_AR_OFF_ABORT);
}

/* The first failure of a call is the one reported. */
static void vfail(struct vctx *c, uint32_t code, int peer) {
  uint32_t none = 0;
  __atomic_compare_exchange_n(c->err, &none, TE_AR_ERRWORD(code, peer), 0, __ATOMIC_SEQ_CST,
                              __ATOMIC_SEQ_CST);
}

/* Between two polls: 0 to poll again, -1 to give up (abort, an earlier
 * failure of this rank, or the deadline; the error word says which).
 * The worker yields, since ranks may outnumber cores. */
static int vpoll_again(struct vctx *c, int peer) {
  if (__atomic_load_n(c->abort_word, __ATOMIC_ACQUIRE)) {
    vfail(c, TE_AR_ABORTED, peer);
    return -1;
  }
  if (__atomic_load_n(c->err, __ATOMIC_ACQUIRE)) return -1;
  if (c->deadline && vnow() > c->deadline) {
    vfail(c, TE_AR_TIMEOUT, peer);
    return -1;
  }
  sched_yield();
  return 0;
}

/* Has this rank already failed (an earlier call timed out or was aborted)?
 * Then the call does nothing: waiting again for a dead peer would only
 * cost another timeout. */
static int vfailed(struct vctx *c) {
  return __atomic_load_n(c->err, __ATOMIC_ACQUIRE) != 0 ||
         __atomic_load_n(c->abort_word, __ATOMIC_ACQUIRE) != 0;
}

/* A kernel's start: its parameters with c set up, or NULL when this rank
 * already failed (vfailed). */
static const struct te_ar_params *vbegin(void *const *args, struct vctx *c) {
  const struct te_ar_params *p = args[0];
  vctx_init(c, p);
  if (vfailed(c)) return NULL;
  /* the call's descriptor, for the host to name a mismatch */
  if (p->desc.hash) memcpy(VP(p->ws[p->rank] + TE_AR_OFF_DESC), &p->desc, sizeof p->desc);
  return p;
}

/* Peer s published hash h for this call: 0 when it is this call's, else
 * the error word says TE_AR_MISMATCH (s) and -1. */
static int vagree(struct vctx *c, uint64_t h, int s) {
  if (!c->p->desc.hash || h == c->p->desc.hash) return 0;
  vfail(c, TE_AR_MISMATCH, s);
  return -1;
}

/* Block b's part (of G) of chunk q (of n) of ngran items, [*lo, *hi):
 * comm_ar.h's split for two-shot and NVLS, the same on every rank. */
static void vpart(uint64_t ngran, int n, int q, uint32_t G, uint32_t b, uint64_t *lo,
                  uint64_t *hi) {
  uint64_t clo, chi, l, h;
  te_ar_chunk(ngran, n, q, &clo, &chi);
  te_ar_split(chi - clo, G, b, &l, &h);
  *lo = clo + l;
  *hi = clo + h;
}

/* How the all-gather's chunks are cut: ngran items of per elements of esz
 * bytes over n chunks, clipped at count elements. */
struct vchunks {
  uint64_t ngran, per, count;
  size_t esz;
  int n;
};

/* The all-gather's copy-out: block b (of G) part of every chunk from src
 * to dst. */
static void vcopy_parts(char *dst, const char *src, const struct vchunks *v, uint32_t G,
                        uint32_t b) {
  const uint64_t ngran = v->ngran, per = v->per, count = v->count;
  const size_t esz = v->esz;
  const int n = v->n;
  for (int q = 0; q < n; q++) {
    uint64_t lo, hi;
    vpart(ngran, n, q, G, b, &lo, &hi);
    uint64_t e0 = lo * per, e1 = hi * per < count ? hi * per : count;
    if (e1 > e0) memcpy(dst + e0 * esz, src + e0 * esz, (size_t)(e1 - e0) * esz);
  }
}

/* Block b's barrier at phase (comm_ar.h). */
static int vbarrier(struct vctx *c, int b, uint64_t phase) {
  const struct te_ar_params *p = c->p;
  for (int s = 0; s < p->nranks; s++) {
    uint64_t line = te_ar_flag_addr(p->ws[s], b, p->rank);
    __atomic_store_n((uint64_t *)VP(te_ar_flag_desc(line, phase)), p->desc.hash,
                     __ATOMIC_RELAXED);
    __atomic_store_n((uint64_t *)VP(line), phase, __ATOMIC_RELEASE);
  }
  for (int s = 0; s < p->nranks; s++) {
    uint64_t line = te_ar_flag_addr(p->ws[p->rank], b, s);
    const uint64_t *f = VP(line);
    while (__atomic_load_n(f, __ATOMIC_ACQUIRE) < phase)
      if (vpoll_again(c, s)) return -1;
    /* the descriptor came with the flag: compared before any data moves */
    if (vagree(c, __atomic_load_n((uint64_t *)VP(te_ar_flag_desc(line, phase)), __ATOMIC_RELAXED),
               s))
      return -1;
  }
  return 0;
}

/* Block b takes nphases phases of its counter; returns the first one's base. */
static uint64_t vphases(const struct te_ar_params *p, int b, int nphases) {
  uint64_t *e = VP(p->ws[p->rank] + TE_AR_OFF_EPOCH + 8u * (unsigned)b);
  uint64_t base = *e;
  *e = base + (uint64_t)nphases;
  return base;
}

/* Element e reduced over the ranks' inputs, in rank order. */
static float vreduce_elem(const struct te_ar_params *p, uint64_t e) {
  float acc = te_ld(VP(p->in[0]), e, p->dtype);
  for (int s = 1; s < p->nranks; s++) acc = te_ar_op(acc, te_ld(VP(p->in[s]), e, p->dtype), p->op);
  return acc;
}

/* ---- the fused epilogue -----------------------------------------------------
 * ar[0 .. count-1]: the allreduced values (already rounded to the dtype).
 * Per row: residual_out = round(ar + residual_in), then RMSNorm of that row
 * with norm.h's summation order for the plan (tpr, nv, nvec) the host took
 * from te_norm_plan_fwd, the output and/or the FP8 copy, the amax, and
 * the row's rsigma (the statistic tecore_rmsnorm_fwd saves, the same
 * bits). */
/* The FP8 copy's scale (1 without one); its inverse is written, as the
 * unfused quantize does. */
static float vfp8_scale(const struct te_ar_params *p) {
  float sc = (p->fflags & TE_AR_F_Q) ? *(const float *)VP(p->q_scale) : 1.0f;
  if ((p->fflags & TE_AR_F_Q) && p->q_scale_inv) *(float *)VP(p->q_scale_inv) = te_fp8_scale_inv(sc);
  return sc;
}

/* The epilogue of one row: ar[0 .. hidden-1] its allreduced values, r
 * hidden floats of scratch, sc the FP8 scale; *am takes the amax. */
static void vepilogue_row(const struct te_ar_params *p, uint64_t row, const float *ar, float *r,
                          float sc, float *am) {
  int dt = p->dtype;
  unsigned H = p->hidden;
  float part[1024];
  unsigned nvecs = p->nvec == 8 ? H / 8 : H;
  uint64_t base = row * H;
  for (unsigned c = 0; c < H; c++) {
    r[c] = te_ar_residual(ar[c], te_ld(VP(p->res_in), base + c, dt), dt);
    te_st(VP(p->res_out), base + c, dt, r[c]);
  }
  for (int t = 0; t < p->tpr; t++) {
    float s = 0.0f;
    for (int j = 0; j < p->nv; j++) {
      unsigned vi = (unsigned)j * (unsigned)p->tpr + (unsigned)t;
      if (vi >= nvecs) continue;
      for (int k = 0; k < p->nvec; k++) {
        float v = r[vi * (unsigned)p->nvec + (unsigned)k];
        s = te_fma_rn(v, v, s);
      }
    }
    part[t] = s;
  }
  float rs = te_norm_rsigma(te_norm_mean(te_norm_tree_sum(part, p->tpr), (float)H), p->eps);
  if (p->rsigma) ((float *)VP(p->rsigma))[row] = rs;
  for (unsigned c = 0; c < H; c++) {
    float o = te_rms_out(r[c], rs, te_norm_gamma(te_ld(VP(p->gamma), c, dt), te_norm_zc(0)));
    *am = te_amax_f32(*am, o);
    if (p->fflags & TE_AR_F_OUT) te_st(VP(p->fout), base + c, dt, o);
    if (p->fflags & TE_AR_F_Q) te_st(VP(p->q_data), base + c, p->q_dtype, te_mul_rn(o, sc));
  }
}

/* am into *q_amax (a max over the bits of |x|, as the GPU's atomics). */
static void vamax_publish(const struct te_ar_params *p, float am) {
  if (!(p->fflags & TE_AR_F_AMAX) || !te_abs_bits(am)) return;
  unsigned *amax = VP(p->q_amax), v = te_abs_bits(am);
  unsigned cur = __atomic_load_n(amax, __ATOMIC_RELAXED);
  while (v > cur &&
         !__atomic_compare_exchange_n(amax, &cur, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}

static void vepilogue(const struct te_ar_params *p, const float *ar) {
  float *r = malloc((size_t)p->hidden * sizeof(float));
  if (!r) return; /* cannot happen for sane sizes; the test sees poison */
  float sc = vfp8_scale(p), am = 0.0f;
  for (uint64_t row = 0; row < p->rows; row++)
    vepilogue_row(p, row, ar + row * p->hidden, r, sc, &am);
  vamax_publish(p, am);
  free(r);
}

/* ---- multicast (NVLS) ----------------------------------------------------------
 * The members behind a multicast address, as the device layer's emulation
 * resolves them (the order is the same in every process).  One per rank is
 * expected; anything else is a broken object: the call fails (error word)
 * instead of reducing over the wrong members. */
static int vmc_members(struct vctx *c, tecore_devptr_t mc_va, tecore_devptr_t *members, int *n) {
  int got = 0;
  if (tecore_mc_members(mc_va, members, TE_AR_MAX_RANKS, &got) != TECORE_SUCCESS ||
      got != c->p->nranks) {
    vfail(c, TE_AR_ABORTED, c->p->rank);
    return -1;
  }
  *n = got;
  return 0;
}

/* ---- one-shot ----------------------------------------------------------------
 * Block b: barrier (every input is ready), reduce its granules of every
 * input in rank order, barrier (every rank has read them), store.  No
 * store happens before every peer has read, so out may be in[rank].
 * Reduce-scatter stores before the second barrier, as the GPU's does: no
 * peer reads the block it keeps. */
void te_ar_vdev_oneshot(const struct tecore_launch_cfg *cfg, void *const *args) {
  struct vctx c;
  const struct te_ar_params *p = vbegin(args, &c);
  if (!p) return;
  uint32_t G = cfg->grid[0];
  uint64_t vec = (uint64_t)p->vec, ngran = p->count / vec;
  const int rs = (p->desc.variant & TE_AR_V_RS) != 0;
  float *acc = malloc((size_t)p->count * sizeof(float));
  if (!acc) {
    vfail(&c, TE_AR_ABORTED, p->rank);
    return;
  }
  for (uint32_t b = 0; b < G; b++) {
    uint64_t lo, hi;
    te_ar_split(ngran, G, b, &lo, &hi);
    uint64_t e0 = lo * vec, e1 = hi * vec;
    uint64_t t0 = b == 0 ? ngran * vec : p->count; /* block 0 takes the tail */
    uint64_t base = vphases(p, (int)b, 2);
    if (vbarrier(&c, (int)b, base + 1)) break;
    for (uint64_t e = e0; e < e1; e++) acc[e] = vreduce_elem(p, e);
    for (uint64_t e = t0; e < p->count; e++) acc[e] = vreduce_elem(p, e);
    if (!rs && vbarrier(&c, (int)b, base + 2)) break;
    if (p->fflags & TE_AR_F_FUSED) continue; /* the epilogue writes, after every block */
    for (uint64_t e = e0; e < e1; e++) te_st(VP(p->out), e, p->dtype, acc[e]);
    for (uint64_t e = t0; e < p->count; e++) te_st(VP(p->out), e, p->dtype, acc[e]);
    if (rs && vbarrier(&c, (int)b, base + 2)) break;
  }
  if ((p->fflags & TE_AR_F_FUSED) && !vfailed(&c)) {
    for (uint64_t e = 0; e < p->count; e++) acc[e] = te_ar_round(acc[e], p->dtype);
    vepilogue(p, acc);
  }
  free(acc);
}

/* ---- two-shot ------------------------------------------------------------------
 * Block b: barrier; reduce its part of chunk `rank` (no other rank reads
 * that chunk of any input) and store the sum into chunk `rank` of every
 * rank's input; barrier; copy its part of every chunk of in[rank] into out
 * unless out is in[rank].  No third barrier: after the second no rank
 * touches a peer's input, and a peer writes into this one again only after
 * the next call's first barrier.  The tail past the last full granule is
 * reduced like one-shot by block 0 before the second barrier and stored
 * after it.  kernels/comm_ar.cu does the same. */
void te_ar_vdev_twoshot(const struct tecore_launch_cfg *cfg, void *const *args) {
  struct vctx c;
  const struct te_ar_params *p = vbegin(args, &c);
  if (!p) return;
  uint32_t G = cfg->grid[0];
  int n = p->nranks, r = p->rank, dt = p->dtype;
  uint64_t vec = (uint64_t)p->vec, ngran = p->count / vec;
  float tail[16];
  uint64_t t0 = ngran * vec, ntail = p->count - t0;
  size_t esz = (size_t)te_ar_esize(dt);
  for (uint32_t b = 0; b < G; b++) {
    uint64_t base = vphases(p, (int)b, 2), lo, hi;
    if (vbarrier(&c, (int)b, base + 1)) return;
    vpart(ngran, n, r, G, b, &lo, &hi);
    /* the sum of chunk `rank`, pushed into every rank's input */
    for (uint64_t e = lo * vec; e < hi * vec; e++) {
      float v = vreduce_elem(p, e);
      for (int q = 0; q < n; q++) te_st(VP(p->in[q]), e, dt, v);
    }
    if (b == 0)
      for (uint64_t i = 0; i < ntail; i++) tail[i] = vreduce_elem(p, t0 + i);
    if (vbarrier(&c, (int)b, base + 2)) return;
    if (p->out != p->in[r])
      vcopy_parts(VP(p->out), VP(p->in[r]), &(struct vchunks){ngran, vec, p->count, esz, n}, G, b);
    if (b == 0)
      for (uint64_t i = 0; i < ntail; i++) te_st(VP(p->out), t0 + i, dt, tail[i]);
  }
}

/* ---- all-gather (kernels/common/comm_ar.h) ------------------------------------------
 * p->count is the bytes of one block.  Block b: barrier (every input in
 * place), its 16-byte granules of every rank's input into that rank's
 * slot of out (a slot that is already the input is left alone), barrier
 * (no peer still reads this rank's input). */
void te_ar_vdev_gather(const struct tecore_launch_cfg *cfg, void *const *args) {
  struct vctx c;
  const struct te_ar_params *p = vbegin(args, &c);
  if (!p) return;
  const uint32_t G = cfg->grid[0];
  const uint64_t bytes = p->count, ngran = (bytes + 15u) / 16u;
  for (uint32_t b = 0; b < G; b++) {
    uint64_t base = vphases(p, (int)b, 2), lo, hi;
    if (vbarrier(&c, (int)b, base + 1)) return;
    te_ar_split(ngran, G, b, &lo, &hi);
    uint64_t e0 = lo * 16u, e1 = hi * 16u < bytes ? hi * 16u : bytes;
    for (int s = 0; s < p->nranks && e1 > e0; s++) {
      uint64_t dst = p->out + (uint64_t)s * bytes;
      if (dst != p->in[s]) memcpy(VP(dst + e0), VP(p->in[s] + e0), (size_t)(e1 - e0));
    }
    if (vbarrier(&c, (int)b, base + 2)) return;
  }
}

/* ---- the copy-engine one-shot's sum (kernels/common/comm_ar.h) -------------------
 * in[] are local: this rank's input and the scratch copies of the peers';
 * element e folded in rank order into out.  No waits. */
void te_ar_vdev_ce_reduce(const struct tecore_launch_cfg *cfg, void *const *args) {
  (void)cfg;
  struct vctx c;
  const struct te_ar_params *p = vbegin(args, &c);
  if (!p) return;
  for (uint64_t e = 0; e < p->count; e++) {
    float v = vreduce_elem(p, e);
    te_st(VP(p->out), e, p->dtype, v);
  }
}

/* ---- Lamport one-shot ------------------------------------------------------------
 * Call k uses buffer i = k % 3 of every workspace.  Block b writes its
 * 16-byte granules of this rank's input into slot `rank` of buffer i of
 * every rank (sentinels fixed, the bytes past the input zero), then polls
 * the same granules of every slot of its own buffer i until no word is
 * armed, reduces them in rank order and stores.  Between the two (its
 * bytes out, the peers' on their way) it re-arms its part of buffer
 * (k + 2) % 3, the one the previous call used: this rank read all of it
 * in that call, so every peer's write has landed, and no peer writes it
 * again before call k + 2, which it cannot start before it has this
 * rank's data of call k + 1, written after this kernel ends.  Once
 * every block has read the counter (here: at once, the blocks share one
 * read; on the GPU the last block to arrive) it records the bytes this
 * call uses (for the next call's re-arm) and advances the counter, so a
 * replayed graph walks the buffers too; the next call reads both only
 * after this one has ended.
 *
 * What keeps a fast peer from overwriting data not yet read: a rank ends
 * call k only with every peer's call-k data in hand, so no rank is ever
 * more than one call ahead of another, and the buffer a call writes into
 * is never the one a slower peer still reads (k - 1) or re-arms (k - 2).
 * A granule is taken only when none of its 16-bit halves (32-bit words
 * for f32) is still armed: a 16-byte store may land in pieces. */
static int vlam_granule_ready(struct vctx *c, const uint32_t *w, int peer) {
  for (int j = 0; j < 4; j++)
    while (!te_ar_lam_ready(__atomic_load_n(&w[j], __ATOMIC_ACQUIRE), c->p->dtype))
      if (vpoll_again(c, peer)) return -1;
  return 0;
}

/* Lamport's agreement (comm_ar.h): this call's descriptor granule into
 * slot `rank` of buffer bi of every rank (dst[s] its slot base there), the
 * previous call's granules of buffer bj re-armed, then each peer's granule
 * of this call waited for and compared. */
static int vlam_desc(struct vctx *c, uint64_t lws, const tecore_devptr_t *dst, int ndst,
                     uint64_t k, int bj) {
  const struct te_ar_params *p = c->p;
  uint64_t at = te_ar_lam_desc_off(p->lam_slot);
  uint32_t mine[4];
  te_ar_desc_words(p, k, mine);
  for (int s = 0; s < ndst; s++)
    for (int j = 0; j < 4; j++)
      __atomic_store_n((uint32_t *)VP(dst[s] + at) + j, mine[j], __ATOMIC_RELEASE);
  for (int s = 0; s < p->nranks; s++)
    for (int j = 0; j < 4; j++)
      __atomic_store_n((uint32_t *)VP(te_ar_lam_addr(lws, p->lam_slot, p->nranks, bj, s) + at) + j,
                       TE_AR_LAM_ARM, __ATOMIC_RELAXED);
  int bi = (int)(k % 3);
  for (int s = 0; s < p->nranks; s++) {
    const uint32_t *w = VP(te_ar_lam_addr(lws, p->lam_slot, p->nranks, bi, s) + at);
    uint32_t got[4];
    for (int j = 0; j < 4; j++) {
      while (!te_ar_lam_ready(got[j] = __atomic_load_n(&w[j], __ATOMIC_ACQUIRE), TE_FP8_DT_BF16))
        if (vpoll_again(c, s)) return -1;
    }
    if (!p->desc.hash) continue;
    if (memcmp(got, mine, sizeof mine) != 0) {
      vfail(c, TE_AR_MISMATCH, s);
      return -1;
    }
  }
  return 0;
}

/* Block b's part of buffer bj (the previous call's, used_j bytes a slot)
 * re-armed in every slot. */
static void vlam_rearm(const struct te_ar_params *p, uint64_t lws, int bj, uint64_t used_j,
                       uint32_t G, uint32_t b) {
  uint64_t wlo, whi;
  te_ar_split(used_j / 4, G, b, &wlo, &whi);
  for (int s = 0; s < p->nranks; s++) {
    uint32_t *d = VP(te_ar_lam_addr(lws, p->lam_slot, p->nranks, bj, s));
    for (uint64_t i = wlo; i < whi; i++) __atomic_store_n(&d[i], TE_AR_LAM_ARM, __ATOMIC_RELAXED);
  }
}

/* Lamport all-gather (comm_ar.h): p->count is the bytes of a block; granule
 * g of slot `rank` of every rank gets bytes 8g .. 8g+7 of the input as two
 * 64-bit words {data, flag}; then every slot's granule g, once both flags
 * are call k's, goes to out + s * bytes + 8g. */
static void vlam_gather(struct vctx *c, uint32_t G, uint64_t lws, const tecore_devptr_t *dst,
                        uint64_t k, int bj, uint64_t used_j) {
  const struct te_ar_params *p = c->p;
  const int n = p->nranks, bi = (int)(k % 3);
  const uint64_t bytes = p->count, ngr = (bytes + 7u) / 8u;
  const uint64_t flag = (uint64_t)te_ar_lam_ag_flag(k) << 32;
  const char *src = VP(p->in[p->rank]);
  for (uint32_t b = 0; b < G; b++) {
    uint64_t lo, hi;
    te_ar_split(ngr, G, b, &lo, &hi);
    for (uint64_t g = lo; g < hi; g++) {
      uint32_t w[2] = {0, 0};
      memcpy(w, src + g * 8, (size_t)(bytes - g * 8 < 8 ? bytes - g * 8 : 8));
      for (int s = 0; s < n; s++)
        for (int j = 0; j < 2; j++) {
          if (j == 1 && g % 61 == 7) sched_yield(); /* the granule lands in pieces */
          __atomic_store_n((uint64_t *)VP(dst[s] + g * 16) + j, w[j] | flag, __ATOMIC_RELEASE);
        }
    }
    vlam_rearm(p, lws, bj, used_j, G, b);
    for (uint64_t g = lo; g < hi; g++)
      for (int s = 0; s < n; s++) {
        const uint64_t *q = VP(te_ar_lam_addr(lws, p->lam_slot, n, bi, s) + g * 16);
        uint32_t w[2];
        for (int j = 0; j < 2; j++) {
          uint64_t v;
          while (((v = __atomic_load_n(&q[j], __ATOMIC_ACQUIRE)) & ~0xffffffffull) != flag)
            if (vpoll_again(c, s)) return;
          w[j] = (uint32_t)v;
        }
        uint64_t to = p->out + (uint64_t)s * bytes;
        if (to != p->in[p->rank])
          memcpy(VP(to + g * 8), w, (size_t)(bytes - g * 8 < 8 ? bytes - g * 8 : 8));
      }
  }
}

void te_ar_vdev_lamport(const struct tecore_launch_cfg *cfg, void *const *args) {
  struct vctx c;
  const struct te_ar_params *p = vbegin(args, &c);
  if (!p) return;
  uint32_t G = cfg->grid[0];
  int n = p->nranks, r = p->rank, dt = p->dtype;
  const int rs = (p->desc.variant & TE_AR_V_RS) != 0, ag = (p->desc.variant & TE_AR_V_AG) != 0;
  uint64_t lws = te_ar_lam_ws(p);
  char *lam = VP(lws + TE_AR_OFF_LAM);
  uint64_t k = __atomic_load_n((uint64_t *)(lam + TE_AR_LAM_COUNTER), __ATOMIC_ACQUIRE);
  int bi = (int)(k % 3), bj = (int)((k + 2) % 3);
  uint64_t *used = (uint64_t *)(lam + TE_AR_LAM_USED);
  uint64_t used_j = __atomic_load_n(&used[bj], __ATOMIC_RELAXED);
  size_t esz = (size_t)te_ar_esize(dt);
  uint64_t nbytes = p->count * esz, ngr = (nbytes + 15) / 16;
  /* every block has the counter: record this call's bytes, advance */
  __atomic_store_n(&used[bi], ag ? te_ar_lam_ag_slot(p->count) : ngr * 16, __ATOMIC_RELAXED);
  __atomic_store_n((uint64_t *)(lam + TE_AR_LAM_COUNTER), k + 1, __ATOMIC_RELEASE);
  uint64_t epg = 16 / esz; /* elements per granule */
  float *acc = (p->fflags & TE_AR_F_FUSED) ? malloc((size_t)p->count * sizeof(float)) : NULL;
  if ((p->fflags & TE_AR_F_FUSED) && !acc) {
    vfail(&c, TE_AR_ABORTED, r);
    return;
  }
  const char *src = VP(p->in[r]);
  /* where this rank's slot of buffer bi is, in every rank: the peers'
   * workspaces, or (NVLS) the members behind the multicast address, as a
   * multimem store reaches them */
  tecore_devptr_t dst[TE_AR_MAX_RANKS];
  int ndst = n;
  if (p->mc) {
    if (vmc_members(&c, te_ar_lam_addr(p->mc, p->lam_slot, n, bi, r), dst, &ndst)) {
      free(acc);
      return;
    }
  } else {
    for (int s = 0; s < n; s++) dst[s] = te_ar_lam_addr(p->ws[s], p->lam_slot, n, bi, r);
  }
  /* the descriptor granule out to every rank with the data, re-armed
   * where the previous call's was, then every peer's read back and
   * compared before this rank stores anything */
  if (vlam_desc(&c, lws, dst, ndst, k, bj)) {
    free(acc);
    return;
  }
  if (ag) {
    vlam_gather(&c, G, lws, dst, k, bj, used_j);
    return;
  }
  for (uint32_t b = 0; b < G; b++) {
    uint64_t lo, hi;
    te_ar_split(ngr, G, b, &lo, &hi);
    for (uint64_t g = lo; g < hi; g++) {
      uint64_t off = g * 16, len = nbytes - off < 16 ? nbytes - off : 16;
      for (int s = 0; s < ndst; s++) {
        /* reduce-scatter: rank s gets block s of the input */
        uint32_t w[4] = {0, 0, 0, 0};
        memcpy(w, src + (rs ? (uint64_t)s * nbytes : 0) + off, (size_t)len);
        for (int j = 0; j < 4; j++) w[j] = te_ar_lam_fix(w[j], dt);
        uint32_t *d = VP(dst[s] + off);
        for (int j = 0; j < 4; j++) {
          /* a GPU's 16-byte store may land in pieces: now and then this
           * one does too, a pause between its halves, so a reader that
           * takes a granule before every word is there gets caught */
          if (j == 2 && g % 61 == 7) sched_yield();
          __atomic_store_n(&d[j], w[j], __ATOMIC_RELEASE);
        }
      }
    }
    vlam_rearm(p, lws, bj, used_j, G, b); /* the previous call's buffer */
    for (uint64_t g = lo; g < hi; g++) {
      uint64_t off = g * 16;
      for (int s = 0; s < n; s++)
        if (vlam_granule_ready(&c, VP(te_ar_lam_addr(lws, p->lam_slot, n, bi, s) + off), s)) {
          free(acc);
          return;
        }
      for (uint64_t e = g * epg; e < (g + 1) * epg && e < p->count; e++) {
        float a = 0.0f;
        for (int s = 0; s < n; s++) {
          const void *slot = VP(te_ar_lam_addr(lws, p->lam_slot, n, bi, s));
          float v = te_ld(slot, e, dt);
          a = s == 0 ? v : te_ar_op(a, v, p->op);
        }
        if (acc) acc[e] = te_ar_round(a, dt);
        else te_st(VP(p->out), e, dt, a);
      }
    }
  }
  if (acc) {
    vepilogue(p, acc);
    free(acc);
  }
}

/* ---- the epilogue alone ----------------------------------------------------------
 * ar = in[rank] (two-shot's reduced values, left there by an in-place
 * two-shot call before this launch).  No peer is involved. */
void te_ar_vdev_addnorm(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_ar_params *p = args[0];
  (void)cfg;
  float *ar = malloc((size_t)p->count * sizeof(float));
  if (!ar) return;
  for (uint64_t e = 0; e < p->count; e++) ar[e] = te_ld(VP(p->in[p->rank]), e, p->dtype);
  vepilogue(p, ar);
  free(ar);
}

/* ---- the fused two-shot by rows ----------------------------------------------------
 * comm_ar.h's protocol, block by block as on the GPU: block b takes the
 * row groups b, b + G, ... (groups of rpb rows); barrier; it reduces the
 * rows of its groups in chunk `rank` (te_ar_row_chunk), in rank order,
 * over in[rank]; barrier; it runs the epilogue of every row of its
 * groups from the row's owner's input; barrier (no peer still reads this
 * rank's input).  The stores round to the dtype and the epilogue reads
 * them back, so the values are the two-shot + ADDNORM path's. */
void te_ar_vdev_twoshot_fused(const struct tecore_launch_cfg *cfg, void *const *args) {
  struct vctx c;
  const struct te_ar_params *p = vbegin(args, &c);
  if (!p) return;
  uint32_t G = cfg->grid[0];
  int n = p->nranks, dt = p->dtype;
  uint64_t H = p->hidden, R = (uint64_t)p->rpb, groups = (p->rows + R - 1) / R, clo, chi;
  te_ar_row_chunk(p->rows, n, p->rank, &clo, &chi);
  float *ar = malloc((size_t)H * sizeof(float)), *r = malloc((size_t)H * sizeof(float));
  if (!ar || !r) {
    vfail(&c, TE_AR_ABORTED, p->rank);
    free(ar);
    free(r);
    return;
  }
  float sc = vfp8_scale(p), am = 0.0f;
  for (uint32_t b = 0; b < G; b++) {
    uint64_t base = vphases(p, (int)b, 3);
    if (vbarrier(&c, (int)b, base + 1)) break;
    for (uint64_t rg = b; rg < groups; rg += G)
      for (uint64_t row = rg * R; row < rg * R + R && row < p->rows; row++) {
        if (row < clo || row >= chi) continue;
        for (uint64_t e = row * H; e < row * H + H; e++)
          te_st(VP(p->in[p->rank]), e, dt, vreduce_elem(p, e));
      }
    if (vbarrier(&c, (int)b, base + 2)) break;
    for (uint64_t rg = b; rg < groups; rg += G)
      for (uint64_t row = rg * R; row < rg * R + R && row < p->rows; row++) {
        const void *src = VP(p->in[te_ar_row_owner(p->rows, n, row)]);
        for (uint64_t e = 0; e < H; e++) ar[e] = te_ld(src, row * H + e, dt);
        vepilogue_row(p, row, ar, r, sc, &am);
      }
    if (vbarrier(&c, (int)b, base + 3)) break;
  }
  vamax_publish(p, am);
  free(ar);
  free(r);
}

/* ---- NVLS simple ------------------------------------------------------------------
 * comm_ar.h's NVLS simple protocol on the emulated multicast object: the
 * load-reduce through mc reads every member behind the address (in the
 * device layer's member order) and folds them in float, the store through
 * mc writes every member.  Block b handles part b of every chunk in each
 * phase, as on the GPU.  The last granule is padded with zeros in the
 * member. */
void te_ar_vdev_nvls(const struct tecore_launch_cfg *cfg, void *const *args) {
  struct vctx c;
  const struct te_ar_params *p = vbegin(args, &c);
  if (!p) return;
  uint32_t G = cfg->grid[0];
  int n = p->nranks, r = p->rank, dt = p->dtype;
  size_t esz = (size_t)te_ar_esize(dt);
  uint64_t nbytes = p->count * esz, ngr = (nbytes + 15) / 16, epg = 16 / esz;
  char *uc = VP(te_ar_lam_ws(p) + p->nv_data);
  tecore_devptr_t mem[TE_AR_MAX_RANKS];
  int nmem = 0;
  if (vmc_members(&c, p->mc + p->nv_data, mem, &nmem)) return;
  const char *src = VP(p->in[r]);
  for (uint32_t b = 0; b < G; b++) {
    uint64_t base = vphases(p, (int)b, 2), lo, hi;
    for (int q = 0; q < n; q++) {
      vpart(ngr, n, q, G, b, &lo, &hi);
      for (uint64_t g = lo; g < hi; g++) {
        uint64_t off = g * 16, len = nbytes - off < 16 ? nbytes - off : 16;
        memset(uc + off, 0, 16);
        memcpy(uc + off, src + off, (size_t)len);
      }
    }
    if (vbarrier(&c, (int)b, base + 1)) return;
    vpart(ngr, n, r, G, b, &lo, &hi);
    for (uint64_t e = lo * epg; e < hi * epg; e++) {
      float a = te_ld(VP(mem[0]), e, dt);
      for (int s = 1; s < nmem; s++) a = te_add_rn(a, te_ld(VP(mem[s]), e, dt));
      for (int s = 0; s < nmem; s++) te_st(VP(mem[s]), e, dt, a);
    }
    if (vbarrier(&c, (int)b, base + 2)) return;
    if (!p->out) continue; /* fused: the epilogue kernel reads the member */
    vcopy_parts(VP(p->out), uc, &(struct vchunks){ngr, epg, p->count, esz, n}, G, b);
  }
}

/* ---- the latency probe (kernels/comm_ar.cu says what each measures) -------------- */
void te_ar_vdev_probe_launch(const struct tecore_launch_cfg *cfg, void *const *args) {
  (void)cfg;
  (void)args;
}

void te_ar_vdev_probe_exchange(const struct tecore_launch_cfg *cfg, void *const *args) {
  (void)cfg;
  struct vctx c;
  const struct te_ar_params *p = vbegin(args, &c);
  if (!p) return;
  uint64_t *ctr = VP(p->ws[p->rank] + TE_AR_OFF_PROBE);
  uint64_t k = __atomic_load_n(ctr, __ATOMIC_RELAXED) + 1;
  /* the descriptor hash beside the word (0: a plain probe); the
   * copy-engine one-shot's exchanges compare it */
  for (int s = 0; s < p->nranks; s++) {
    __atomic_store_n((uint64_t *)VP(te_ar_probe_desc(p->ws[s], p->rank, k)), p->desc.hash,
                     __ATOMIC_RELAXED);
    __atomic_store_n((uint64_t *)VP(te_ar_probe_addr(p->ws[s], p->rank)), k, __ATOMIC_RELEASE);
  }
  for (int s = 0; s < p->nranks; s++) {
    const uint64_t *w = VP(te_ar_probe_addr(p->ws[p->rank], s));
    while (__atomic_load_n(w, __ATOMIC_ACQUIRE) < k)
      if (vpoll_again(&c, s)) return;
    const uint64_t *h = VP(te_ar_probe_desc(p->ws[p->rank], s, k));
    if (vagree(&c, __atomic_load_n(h, __ATOMIC_RELAXED), s)) return;
  }
  __atomic_store_n(ctr, k, __ATOMIC_RELAXED);
}
