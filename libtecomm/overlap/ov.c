/* SPDX-License-Identifier: Apache-2.0 */
/* overlap/ov.c -- the overlapped GEMMs' shared parts (ov.h): the side
 * stream, events and staging kept on the communicator, the checks, one
 * chunk's GEMM, the barrier. */
#include "overlap/ov.h"
#include "level.h"
#include <stdlib.h>
#include <string.h>
#include <te/gemm.h>

static void ov_free(struct tecomm_comm *c) {
  struct tc_ov *ov = c->ov;
  if (!ov) return;
  if (ov->side) (void)tecore_stream_synchronize(ov->side); /* copies in flight read stage */
  if (ov->start) (void)tecore_event_destroy(ov->start);
  if (ov->done) (void)tecore_event_destroy(ov->done);
  if (ov->gate) (void)tecore_event_destroy(ov->gate);
  for (int i = 0; i < TC_AR_MAX_RANKS; i++)
    if (ov->chunk[i]) (void)tecore_event_destroy(ov->chunk[i]);
  for (int i = 0; i < TC_OV_PULLS - 1; i++) {
    if (ov->pull[i]) (void)tecore_stream_synchronize(ov->pull[i]);
    if (ov->pulled[i]) (void)tecore_event_destroy(ov->pulled[i]);
    if (ov->pull[i]) (void)tecore_stream_destroy(ov->pull[i]);
  }
  if (ov->side) (void)tecore_stream_destroy(ov->side);
  if (ov->stage) (void)tecore_mem_free(ov->stage);
  for (int i = 0; i < ov->n_old; i++) (void)tecore_mem_free(ov->stage_old[i]);
  free(ov);
  c->ov = NULL;
}

static tecomm_result_t ov_make(struct tecomm_comm *c, const char *fn) {
  struct tc_ov *ov = calloc(1, sizeof *ov);
  if (!ov) return TC_ERR(TECOMM_ERR_NOMEM, "%s: the overlap state", fn);
  c->ov = ov;
  c->ov_free = ov_free;
  /* the greatest priority: its kernels are one-warp barriers that the
   * copies wait for, and must not queue behind a GEMM's waves of blocks */
  int least = 0, greatest = 0;
  TC_CORE(tecore_stream_priority_range(&least, &greatest), fn);
  TC_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, greatest, &ov->side), fn);
  TC_CORE(tecore_event_create(TECORE_EVENT_DISABLE_TIMING, &ov->start), fn);
  TC_CORE(tecore_event_create(TECORE_EVENT_DISABLE_TIMING, &ov->done), fn);
  TC_CORE(tecore_event_create(TECORE_EVENT_DISABLE_TIMING, &ov->gate), fn);
  for (int i = 0; i < TC_AR_MAX_RANKS; i++)
    TC_CORE(tecore_event_create(TECORE_EVENT_DISABLE_TIMING, &ov->chunk[i]), fn);
  /* the further pull streams: made here, outside any capture, so that
   * TECOMM_AG_GEMM_PULLS and TECOMM_GEMM_RS_PULLS can be read at each
   * call */
  for (int i = 0; i < TC_OV_PULLS - 1; i++) {
    TC_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, greatest, &ov->pull[i]), fn);
    TC_CORE(tecore_event_create(TECORE_EVENT_DISABLE_TIMING, &ov->pulled[i]), fn);
  }
  return TECOMM_SUCCESS;
}

/* Staging grows in powers of two from 1 MiB; an outgrown buffer stays
 * until the communicator goes (a captured graph may still name it). */
static tecomm_result_t ov_stage(struct tc_ov *ov, size_t bytes, const char *fn) {
  size_t want = (size_t)1 << 20;
  while (want < bytes) want *= 2;
  if (ov->n_old >= (int)(sizeof ov->stage_old / sizeof ov->stage_old[0]))
    return TC_ERR(TECOMM_ERR_NOMEM, "%s: the staging buffer grew %d times", fn, ov->n_old + 1);
  tecore_devptr_t d = 0;
  TC_CORE(tecore_mem_alloc(want, &d), fn);
  if (ov->stage) ov->stage_old[ov->n_old++] = ov->stage;
  ov->stage = d;
  ov->stage_bytes = want;
  return TECOMM_SUCCESS;
}

tecomm_result_t tc_ov_get(struct tecomm_comm *c, size_t stage_bytes, int cap, const char *fn,
                          struct tc_ov **out) {
  struct tc_ov *ov = c->ov;
  if ((!ov || ov->stage_bytes < stage_bytes) && cap)
    return TC_ERR(TECOMM_ERR_CAPTURE,
                  "%s: its side stream, events and staging (%zu bytes) are made outside a "
                  "capture: make one eager call of this shape first",
                  fn, stage_bytes);
  if (!ov) {
    tecomm_result_t r = ov_make(c, fn);
    if (r != TECOMM_SUCCESS) {
      ov_free(c);
      return r;
    }
    ov = c->ov;
  }
  if (ov->stage_bytes < stage_bytes) TC_CHECK(ov_stage(ov, stage_bytes, fn));
  *out = ov;
  return TECOMM_SUCCESS;
}

static int gemm_dtype(tecore_dtype_t d) {
  return d == TECORE_DTYPE_BF16 || d == TECORE_DTYPE_F16 || d == TECORE_DTYPE_E4M3;
}

size_t tc_ov_align(const struct tc_ov_shape *g, tecore_dtype_t dtype) {
  return g->dtype == TECORE_DTYPE_E4M3 ? 16 : tecore_dtype_size(dtype);
}

/* E4M3: the scales, and the FP8 GEMM's row rules (cuBLASLt's, on both
 * backends), checked here because a GEMM refused after the first chunk
 * would leave the peers waiting. */
static tecomm_result_t check_fp8(const struct tc_ov_shape *g) {
  const char *fn = g->fn;
  TC_ARG(g->d_dtype == TECORE_DTYPE_BF16 || g->d_dtype == TECORE_DTYPE_F16 ||
             g->d_dtype == TECORE_DTYPE_F32,
         "%s: args->d_dtype %s: an E4M3 GEMM writes BF16, F16 or F32 here", fn,
         tecore_dtype_name(g->d_dtype));
  TC_ARG(g->a_scale_inv && g->a_scale_inv % 4 == 0 && g->b_scale_inv && g->b_scale_inv % 4 == 0,
         "%s: args->a_scale_inv and b_scale_inv must be set (4-byte aligned) for E4M3", fn);
  TC_ARG(g->k % 16 == 0, "%s: args->k %zu is not a multiple of 16 (an E4M3 GEMM's rows)", fn,
         g->k);
  TC_ARG(g->n * tecore_dtype_size(g->d_dtype) % 16 == 0,
         "%s: args->n %zu: rows of d are not a multiple of 16 bytes (an E4M3 GEMM's rule)", fn,
         g->n);
  return TECOMM_SUCCESS;
}

tecomm_result_t tc_ov_check_shape(const struct tc_ov_shape *g) {
  const char *fn = g->fn;
  TC_ARG(g->rows > 0 && g->n > 0 && g->k > 0, "%s: args->rows, n and k must be > 0 (%zu, %zu, %zu)",
         fn, g->rows, g->n, g->k);
  const size_t lim = (size_t)1 << 31;
  TC_ARG(g->rows < lim && g->n < lim && g->k < lim,
         "%s: args->rows, n or k is 2^31 or more (%zu, %zu, %zu)", fn, g->rows, g->n, g->k);
  /* every byte count (times nranks and 4 bytes an element) fits a size_t */
  const size_t big = (size_t)1 << 46;
  TC_ARG(g->rows * g->k < big && g->rows * g->n < big && g->n * g->k < big,
         "%s: args->rows x k, rows x n or n x k is 2^46 elements or more", fn);
  TC_ARG(gemm_dtype(g->dtype), "%s: args->dtype %s is not BF16, F16 or E4M3", fn,
         tecore_dtype_name(g->dtype));
  TC_ARG(!g->bias || g->d_dtype == TECORE_DTYPE_BF16 || g->d_dtype == TECORE_DTYPE_F16,
         "%s: args->bias is set with args->d_dtype %s: the bias epilogue here wants a BF16 or "
         "F16 d (the bias has d's dtype)", fn, tecore_dtype_name(g->d_dtype));
  TC_ARG(!g->gelu || g->d_dtype == TECORE_DTYPE_BF16 || g->d_dtype == TECORE_DTYPE_F16,
         "%s: args->gelu_aux is set with args->d_dtype %s: the GELU epilogue here wants a BF16 "
         "or F16 d (gelu_aux has d's dtype)", fn, tecore_dtype_name(g->d_dtype));
  TC_ARG(!g->gelu || g->n % 8 == 0,
         "%s: args->gelu_aux is set with args->n %zu: the GELU epilogue wants n a multiple of 8",
         fn, g->n);
  TC_ARG(!g->b_kn || g->dtype != TECORE_DTYPE_E4M3,
         "%s: TECOMM_AG_GEMM_B_KN with E4M3 operands: an FP8 GEMM takes b as [n][k] only", fn);
  if (g->dtype == TECORE_DTYPE_E4M3) return check_fp8(g);
  TC_ARG(g->d_dtype == g->dtype || g->d_dtype == TECORE_DTYPE_F32,
         "%s: args->d_dtype %s is not args->dtype (%s) or F32", fn, tecore_dtype_name(g->d_dtype),
         tecore_dtype_name(g->dtype));
  return TECOMM_SUCCESS;
}

tecomm_result_t tc_ov_check_level(struct tecomm_comm *c, const char *fn) {
  if (c->nranks == 1 || (c->ws.me && c->n_kernels == c->nranks && c->level <= TC_LEVEL_INPLACE))
    return TECOMM_SUCCESS;
  return TC_ERR(TECOMM_ERR_NOT_SUPPORTED,
                "%s: the overlapped GEMMs copy over the IPC mappings: level %s (%s)", fn,
                tc_level_name(c->level), c->level_why);
}

tecomm_result_t tc_ov_check_ptr(struct tecomm_comm *c, tecore_devptr_t p, size_t bytes,
                                size_t esize, const char *what, const char *fn) {
  TC_ARG(p, "%s: args->%s is 0", fn, what);
  TC_ARG(p % esize == 0, "%s: args->%s (0x%llx) is not aligned to %zu bytes", fn, what,
         (unsigned long long)p, esize);
  return tc_sym_bounds(c, p, bytes, what, fn);
}

tecomm_result_t tc_ov_check_bias(struct tecomm_comm *c, const struct tc_ov_shape *g,
                                 tecore_devptr_t out, size_t out_bytes) {
  if (!g->bias) return TECOMM_SUCCESS;
  const size_t bytes = g->n * tecore_dtype_size(g->d_dtype);
  TC_CHECK(tc_ov_check_ptr(c, g->bias, bytes, tc_ov_align(g, g->d_dtype), "bias", g->fn));
  TC_ARG(!tc_ov_overlap(g->bias, bytes, out, out_bytes), "%s: args->bias overlaps an output",
         g->fn);
  return TECOMM_SUCCESS;
}

tecomm_result_t tc_ov_gemm(const struct tc_ov_shape *g, tecore_devptr_t a, tecore_devptr_t d,
                           tecore_devptr_t aux, tecore_stream_t stream) {
  struct tecore_tensor A, B, D, X;
  const size_t sa[2] = {g->rows, g->k}, sd[2] = {g->rows, g->n};
  const size_t sb[2] = {g->b_kn ? g->k : g->n, g->b_kn ? g->n : g->k};
  TC_CORE(tecore_tensor_init(&A, g->grad8 ? TECORE_DTYPE_E5M2 : g->dtype, 2, sa, a), g->fn);
  TC_CORE(tecore_tensor_init(&B, g->dtype, 2, sb, g->b), g->fn);
  TC_CORE(tecore_tensor_init(&D, g->d_dtype, 2, sd, d), g->fn);
  if (g->dtype == TECORE_DTYPE_E4M3) { /* per-tensor: *scale_inv dequantizes */
    A.scaling = B.scaling = TECORE_SCALING_DELAYED;
    A.scale_inv = g->a_scale_inv;
    B.scale_inv = g->b_scale_inv;
  }
  /* the fuser's Linear adds its bias and GELU so: the same bits */
  struct tecore_tensor bias;
  struct tecore_gemm_opts o = {.epilogue = g->dgelu  ? TECORE_GEMM_EPI_DGELU
                                           : g->gelu ? TECORE_GEMM_EPI_GELU_AUX
                                                     : TECORE_GEMM_EPI_NONE};
  if (g->bias) {
    TC_CORE(tecore_tensor_init(&bias, g->d_dtype, 1, &g->n, g->bias), g->fn);
    o.bias = &bias;
    o.epilogue = g->gelu ? TECORE_GEMM_EPI_BIAS_GELU_AUX : TECORE_GEMM_EPI_BIAS;
  }
  if (g->gelu) {
    TC_CORE(tecore_tensor_init(&X, g->d_dtype, 2, sd, aux), g->fn);
    o.aux = &X;
  }
  /* E4M3: fast accumulation, as the fuser's FP8 Linear forward runs its
   * GEMM (the overlapped fusions keep the plain path's bits); a
   * gradient's E5M2 codes (the data gradient) without, as its backward */
  o.fast_accum = g->dtype == TECORE_DTYPE_E4M3 && !g->grad8;
  const int plain = !g->bias && !g->gelu && !o.fast_accum;
  TC_CORE(tecore_gemm(&A, TECORE_GEMM_N, &B, g->b_kn ? TECORE_GEMM_N : TECORE_GEMM_T, &D, 1.0f,
                      0.0f, plain ? NULL : &o, stream), g->fn);
  return TECOMM_SUCCESS;
}

void tc_ov_call_init(struct tecomm_comm *c, size_t count, tecore_dtype_t dtype, size_t dim,
                     struct tc_ar_call *call) {
  memset(call, 0, sizeof *call);
  call->algo = TC_AR_ONESHOT;
  call->op = TC_AR_SUM;
  call->dtype = dtype;
  call->count = count;
  call->rank = c->rank;
  call->nranks = c->nranks;
  call->timeout_ns = (uint64_t)tc_timeout_ms() * 1000000ull;
  call->ws_max_bytes = c->ws.max_bytes;
  for (int r = 0; r < c->nranks; r++) call->ws[r] = c->ws.peer[r];
  call->gemm_dim = dim;
}

tecomm_result_t tc_ov_barrier(struct tecomm_comm *c, const struct tc_ar_call *call,
                              tecore_stream_t stream, const char *fn) {
  tecore_result_t r = tc_ar_probe(call, 1, stream);
  return r == TECORE_SUCCESS ? TECOMM_SUCCESS : tc_comm_fail(c, tc_core(r, fn));
}

int tc_ov_mine(struct tecomm_comm *c, tecore_devptr_t ptr, size_t bytes) {
  size_t off = 0;
  return tc_seg_find(c, ptr, bytes, &off) != NULL;
}

tecomm_result_t tc_ov_peer(struct tecomm_comm *c, tecore_devptr_t ptr, int peer,
                           tecore_devptr_t *out, const char *fn) {
  size_t off = 0;
  struct tc_seg *s = tc_seg_find(c, ptr, 1, &off);
  if (!s)
    return TC_ERR(TECOMM_ERR_INVALID, "%s: 0x%llx is not this rank's symmetric memory", fn,
                  (unsigned long long)ptr);
  *out = tc_seg_addr(s, peer, off);
  return TECOMM_SUCCESS;
}

/* An event may be recorded again once a wait on it is queued: the wait
 * takes the record made before it. */
tecomm_result_t tc_ov_pull(struct tc_ov *ov, tecore_devptr_t dst, tecore_devptr_t src,
                           size_t bytes, int pulls, tecore_event_t after, int *used,
                           const char *fn) {
  size_t piece = (bytes / (size_t)pulls + 255) & ~(size_t)255;
  if (!piece) piece = 256;   /* fewer bytes than pulls: one piece */
  const int np = (int)((bytes + piece - 1) / piece);
  for (int p = 0; p < np; p++) {
    tecore_stream_t ps = p ? ov->pull[p - 1] : ov->side;
    const size_t off = (size_t)p * piece, len = bytes - off < piece ? bytes - off : piece;
    if (p) TC_CORE(tecore_stream_wait_event(ps, after), fn);
    TC_CORE(tecore_memcpy_async(dst + off, src + off, len, ps), fn);
  }
  if (!used) return tc_ov_pull_join(ov, np, ov->side, fn);
  *used = np;
  return TECOMM_SUCCESS;
}

tecomm_result_t tc_ov_pull_join(struct tc_ov *ov, int used, tecore_stream_t stream,
                                const char *fn) {
  for (int p = 1; p < used; p++) {
    TC_CORE(tecore_event_record(ov->pulled[p - 1], ov->pull[p - 1]), fn);
    TC_CORE(tecore_stream_wait_event(stream, ov->pulled[p - 1]), fn);
  }
  return TECOMM_SUCCESS;
}
