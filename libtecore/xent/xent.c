/* SPDX-License-Identifier: Apache-2.0 */
/* xent.c -- fused softmax + cross-entropy (te/loss.h): the kernel table of
 * kernels/xent.cu and its vdev implementation (xent_vdev.c), argument
 * checks, and the entry points: one pass (one rank), or max, callback,
 * sums, callback, finish (a vocabulary split across ranks); the mean; the
 * backward, in place or into args->dlogits (FP8 through te_qout). */
#include "xent/xent_internal.h"
#include <limits.h>
#include <math.h>
#include <string.h>
#include <te/loss.h>

/* ---- the table ---------------------------------------------------------------------- */

enum { K_ROW, K_MEAN, K_BWD, K_TRAIN };
static const struct tecore_kernel_def xent_kernels[] = {
    [K_ROW] = TE_KDEF("te_xent_row", te_xent_vdev_row, TE_XENT_ROW_PARAMS),
    [K_MEAN] = TE_KDEF("te_xent_mean", te_xent_vdev_mean, TE_XENT_MEAN_PARAMS),
    [K_BWD] = TE_KDEF("te_xent_bwd", te_xent_vdev_bwd, TE_XENT_BWD_PARAMS),
    [K_TRAIN] = TE_KDEF("te_xent_train", te_xent_vdev_train, TE_XENT_TRAIN_PARAMS),
};
static const struct te_kalign xent_align[] = {
    [K_ROW] = TE_KALIGN(TE_XENT_ROW_PARAMS),
    [K_MEAN] = TE_KALIGN(TE_XENT_MEAN_PARAMS),
    [K_BWD] = TE_KALIGN(TE_XENT_BWD_PARAMS),
    [K_TRAIN] = TE_KALIGN(TE_XENT_TRAIN_PARAMS),
};
TE_KERNEL_TABLE_FATBIN_ALIGNED(xent_first_id, "libtecore/xent", xent_kernels, xent_align, xent)

/* ---- checks ------------------------------------------------------------------------------ */

struct xent_call {
  size_t tokens, vocab, vtot;
  int dt, vec;
};

static tecore_result_t xent_check_vec(tecore_devptr_t p, size_t n, int required, const char *fn,
                                      const char *arg) {
  TE_ARG(p || !required || n == 0, "%s: %s is 0", fn, arg);
  TE_ARG(p % 4 == 0, "%s: %s (0x%llx) is not aligned to 4 bytes", fn, arg, (unsigned long long)p);
  if (p && n && te_dev_checks_on()) TE_CHECK(te_dev_check_range(p, n * 4, fn, arg));
  return TECORE_SUCCESS;
}

static tecore_result_t xent_check_args(const struct tecore_xent_args *a, struct xent_call *c,
                                       const char *fn) {
  TE_ARG(a, "%s: args is NULL", fn);
  TE_ARG(a->logits, "%s: args->logits is NULL", fn);
  TE_CHECK(te_tensor_check(a->logits, TECORE_TENSOR_ROWWISE, fn, "args->logits"));
  TE_ARG(a->logits->scaling == TECORE_SCALING_NONE &&
             (a->logits->dtype == TECORE_DTYPE_BF16 || a->logits->dtype == TECORE_DTYPE_F32),
         "%s: args->logits: dtype %s (scaling %s) is not bf16 or f32", fn,
         tecore_dtype_name(a->logits->dtype), tecore_scaling_name(a->logits->scaling));
  te_tensor_view(a->logits, &c->tokens, &c->vocab);
  TE_ARG(c->tokens <= INT_MAX, "%s: args->logits: %zu tokens exceed %d", fn, c->tokens, INT_MAX);
  TE_ARG(c->vocab >= 1 && c->vocab <= INT_MAX, "%s: args->logits: vocabulary %zu is not in 1 .. %d",
         fn, c->vocab, INT_MAX);
  c->vtot = a->vocab_total ? a->vocab_total : c->vocab;
  TE_ARG(c->vtot <= INT_MAX && a->vocab_offset <= c->vtot - c->vocab,
         "%s: args->vocab_offset %zu + %zu columns exceed args->vocab_total %zu", fn,
         a->vocab_offset, c->vocab, c->vtot);
  TE_ARG(a->reduce || c->vtot == c->vocab,
         "%s: args->vocab_total %zu differs from the logits' %zu columns without args->reduce",
         fn, c->vtot, c->vocab);
  TE_ARG(isfinite(a->label_smoothing) && a->label_smoothing >= 0.0f && a->label_smoothing < 1.0f,
         "%s: args->label_smoothing %g is not in [0, 1)", fn, (double)a->label_smoothing);
  TE_CHECK(xent_check_vec(a->labels, c->tokens, 1, fn, "args->labels"));
  c->dt = (int)a->logits->dtype;
  size_t es = tecore_dtype_size(a->logits->dtype);
  c->vec = a->logits->data % 16 == 0 && (c->vocab * es) % 16 == 0;
  if (a->reduce && c->tokens) {
    TE_ARG(a->workspace_bytes >= 16 * c->tokens,
           "%s: args->workspace_bytes %zu is below the %zu tecore_xent_workspace_size gives", fn,
           a->workspace_bytes, 16 * c->tokens);
    TE_ARG(a->workspace && a->workspace % 16 == 0,
           "%s: args->workspace (0x%llx) is 0 or not aligned to 16 bytes", fn,
           (unsigned long long)a->workspace);
    if (te_dev_checks_on()) TE_CHECK(te_dev_check_range(a->workspace, 16 * c->tokens, fn, "args->workspace"));
  }
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_xent_workspace_size(size_t tokens, size_t *bytes) {
  TE_ARG(bytes, "%s: bytes is NULL", __func__);
  TE_ARG(tokens <= INT_MAX, "%s: tokens %zu exceed %d", __func__, tokens, INT_MAX);
  *bytes = 16 * tokens;
  return TECORE_SUCCESS;
}

static void xent_span_logits(struct te_tensor_spans *l, const struct tecore_xent_args *a) {
  te_tensor_spans(a->logits, "args->logits", TE_SPAN_DATA, l);
}

/* ---- forward ------------------------------------------------------------------------------ */

static tecore_result_t xent_row(const struct tecore_xent_args *a, const struct xent_call *c,
                                int mode, tecore_devptr_t loss, tecore_devptr_t lse, int id,
                                tecore_stream_t stream) {
  unsigned long long cap = (unsigned long long)te_sm_count() * 4ull;
  unsigned blocks = (unsigned)(c->tokens < cap ? c->tokens : cap);
  if (mode == TE_XENT_FINISH) blocks = (unsigned)te_cdiv(c->tokens, TE_XENT_THREADS);
  struct tecore_launch_cfg cfg = {.grid = {blocks, 1, 1}, .block = {TE_XENT_THREADS, 1, 1}};
  struct te_xent_row_args k = {
      .x = TE_DPTR(a->logits->data), .labels = TE_DPTR(a->labels), .loss = TE_DPTR(loss),
      .lse = TE_DPTR(lse), .ws = TE_DPTR(a->workspace), .tokens = c->tokens, .vocab = c->vocab,
      .vocab_off = (long long)a->vocab_offset, .vocab_total = (long long)c->vtot,
      .ignore = a->ignore_index, .smoothing = a->label_smoothing,
      .mode = mode | (c->vec ? TE_XENT_VEC : 0), .dtype = c->dt};
  void *args[TE_KNPARAMS(TE_XENT_ROW_PARAMS)];
  te_xent_row_args_ptrs(&k, args);
  return te_kernel_launch_pdl(id + K_ROW, &cfg, args, stream);
}

static tecore_result_t xent_reduce(const struct tecore_xent_args *a, tecore_xent_reduce_op_t op,
                                   tecore_devptr_t p, size_t n, tecore_stream_t stream,
                                   const char *fn) {
  tecore_result_t r = a->reduce(op, p, n, stream, a->reduce_ctx);
  if (r != TECORE_SUCCESS)
    return TE_ERR(r, "%s: args->reduce (%s of %zu floats) returned %s", fn,
                  op == TECORE_XENT_REDUCE_MAX ? "max" : "sum", n, tecore_result_name(r));
  return TECORE_SUCCESS;
}

/* {mean, count} of loss over the tokens not ignored (count_only: mean[1]
 * only, loss not read). */
static tecore_result_t xent_mean(const struct tecore_xent_args *a, const struct xent_call *c,
                                 tecore_devptr_t loss, tecore_devptr_t mean, int count_only,
                                 int id, tecore_stream_t stream) {
  struct tecore_launch_cfg cfg = {.grid = {1, 1, 1}, .block = {TE_XENT_MEAN_THREADS, 1, 1}};
  struct te_xent_mean_args k = {.loss = TE_DPTR(loss), .labels = TE_DPTR(a->labels),
                                .mean = TE_DPTR(mean), .tokens = c->tokens,
                                .ignore = a->ignore_index, .count_only = count_only};
  void *kargs[TE_KNPARAMS(TE_XENT_MEAN_PARAMS)];
  te_xent_mean_args_ptrs(&k, kargs);
  return te_kernel_launch_pdl(id + K_MEAN, &cfg, kargs, stream);
}

TE_EXPORT tecore_result_t tecore_xent_fwd(const struct tecore_xent_args *args, tecore_devptr_t loss,
                                          tecore_devptr_t lse, tecore_devptr_t mean,
                                          tecore_stream_t stream) {
  const char *fn = __func__;
  struct xent_call c;
  TE_CHECK(xent_check_args(args, &c, fn));
  TE_CHECK(xent_check_vec(loss, c.tokens, 1, fn, "loss"));
  TE_CHECK(xent_check_vec(lse, c.tokens, 1, fn, "lse"));
  TE_CHECK(xent_check_vec(mean, 2, 0, fn, "mean"));
  struct te_tensor_spans l = {.access = TE_ACCESS_WRITE};
  te_span_add(&l, "loss", loss, c.tokens * 4);
  te_span_add(&l, "lse", lse, c.tokens * 4);
  te_span_add(&l, "mean", mean, 8);
  if (args->reduce) te_span_add(&l, "args->workspace", args->workspace, 16 * c.tokens);
  l.access = TE_ACCESS_READ;
  xent_span_logits(&l, args);
  te_span_add(&l, "args->labels", args->labels, c.tokens * 4);
  TE_CHECK(te_check_spans(l.span, l.n, fn));
  int id = xent_first_id();
  if (id < 0) return TE_ERR(TECORE_ERR_INTERNAL, "%s: the cross-entropy kernels did not register", fn);
  if (c.tokens) {
    if (!args->reduce) {
      TE_CHECK(xent_row(args, &c, TE_XENT_FULL, loss, lse, id, stream));
    } else {
      TE_CHECK(xent_row(args, &c, TE_XENT_MAX, loss, lse, id, stream));
      TE_CHECK(xent_reduce(args, TECORE_XENT_REDUCE_MAX, args->workspace, c.tokens, stream, fn));
      TE_CHECK(xent_row(args, &c, TE_XENT_SUMS, loss, lse, id, stream));
      TE_CHECK(xent_reduce(args, TECORE_XENT_REDUCE_SUM, args->workspace + 4 * c.tokens,
                           3 * c.tokens, stream, fn));
      TE_CHECK(xent_row(args, &c, TE_XENT_FINISH, loss, lse, id, stream));
    }
  }
  if (!mean) return TECORE_SUCCESS;
  return xent_mean(args, &c, loss, mean, 0, id, stream);
}

/* ---- backward ------------------------------------------------------------------------------ */

/* One launch over rows [a, b) of the logits with FP8 codes written at out
 * (xent_slices): the backward's kernel, or the forward + backward one. */
typedef tecore_result_t (*xent_slice_fn)(void *ctx, size_t a, size_t b, void *out);

/* FP8 dlogits over the logits themselves: row t's codes go to bytes
 * [t * vocab, (t + 1) * vocab) of the buffer, which hold 16-bit (F32) row
 * t / 2 (t / 4).  A launch over rows [a, b) writes bytes [a * vocab,
 * b * vocab), below row a's first byte as long as b <= es * a (es the
 * logits' element size): so rows [a, es * a) read nothing another row of
 * the launch writes and write only rows the launches before read.  Row 0
 * would write its own bytes, so the first slice, rows [0, first), goes to
 * the workspace and is copied down after it; then slices grow es times
 * each, log_es(tokens / first) + 1 launches in all. */
static tecore_result_t xent_slices(const struct tecore_xent_args *args, const struct xent_call *c,
                                   size_t first, xent_slice_fn fn, void *ctx,
                                   tecore_stream_t stream) {
  const size_t es = tecore_dtype_size(args->logits->dtype), V = c->vocab;
  char *y = (char *)(uintptr_t)args->dlogits->data;
  size_t a = 0;
  while (a < c->tokens) {
    size_t b = a ? a * es : first;
    if (b > c->tokens) b = c->tokens;
    /* the invariant the order rests on: this launch writes only bytes
     * earlier launches finished reading */
    if (a && b * V > a * V * es)
      return TE_ERR(TECORE_ERR_INTERNAL, "xent: in-place slice [%zu, %zu) would write rows "
                    "not read yet", a, b);
    TE_CHECK(fn(ctx, a, b, a ? (void *)(y + a * V) : TE_DPTR(args->workspace)));
    if (!a)
      TE_CHECK(tecore_memcpy_async(args->logits->data, args->workspace, b * V, stream));
    a = b;
  }
  return TECORE_SUCCESS;
}

/* What the backward launches, checked: the mean flag, dlogits over the
 * logits as FP8 codes (in8, its first slice's rows in the workspace), the
 * vector path, and the kernel's arguments but the FP8 pass's pointers. */
struct xent_bwd_plan {
  int m, in8, vec;
  size_t first;
  const struct tecore_tensor *y;
  struct tecore_launch_cfg cfg;
  struct te_xent_bwd_args k;
};

static tecore_result_t xent_bwd_plan_make(const struct tecore_xent_args *args,
                                          const struct xent_call *c, tecore_devptr_t lse,
                                          tecore_devptr_t dloss, tecore_devptr_t mean,
                                          unsigned flags, const char *fn,
                                          struct xent_bwd_plan *pl) {
  memset(pl, 0, sizeof *pl);
  TE_ARG((flags & ~TECORE_XENT_DLOSS_MEAN) == 0, "%s: flags 0x%x has unknown bits", fn, flags);
  int m = pl->m = (flags & TECORE_XENT_DLOSS_MEAN) != 0;
  TE_CHECK(xent_check_vec(lse, c->tokens, 1, fn, "lse"));
  TE_CHECK(xent_check_vec(dloss, m ? 1 : c->tokens, 1, fn, "dloss"));
  TE_ARG(m || !mean, "%s: mean is set without TECORE_XENT_DLOSS_MEAN", fn);
  TE_CHECK(xent_check_vec(mean, 2, m, fn, "mean"));
  const struct tecore_tensor *y = pl->y = args->dlogits;
  if (y) {
    TE_CHECK(te_check_fused_output(y, fn, "args->dlogits"));
    size_t yr, yc;
    te_tensor_view(y, &yr, &yc);
    TE_ARG(yr == c->tokens && yc == c->vocab,
           "%s: args->dlogits is [%zu][%zu], the logits [%zu][%zu]", fn, yr, yc, c->tokens,
           c->vocab);
  }
  /* FP8 codes over the logits' own bytes (rowwise, the first tokens *
   * vocab bytes): rows in slices that only overwrite rows already read,
   * the first slice through args->workspace (xent_slices) */
  const int in8 = pl->in8 = y && y->data == args->logits->data;
  if (in8) {
    TE_ARG(y->dtype == TECORE_DTYPE_E4M3 || y->dtype == TECORE_DTYPE_E5M2,
           "%s: args->dlogits shares the logits' address but is %s: in place only as FP8 "
           "codes (a 16-bit dlogits in place: args->dlogits NULL)", fn,
           tecore_dtype_name(y->dtype));
    TE_ARG(y->scaling == TECORE_SCALING_DELAYED,
           "%s: args->dlogits shares the logits' address but its scaling is %s: in place only "
           "under delayed scaling (current scaling's amax pass would overwrite the logits "
           "before its codes pass reads them)", fn, tecore_scaling_name(y->scaling));
    size_t first = c->vocab ? args->workspace_bytes / c->vocab : 0;
    if (first > c->tokens) first = c->tokens;
    pl->first = first;
    TE_ARG(c->tokens == 0 || (args->workspace && first >= 1),
           "%s: args->dlogits is FP8 over the logits: args->workspace (0x%llx, %zu bytes) must "
           "hold at least one row of codes (%zu bytes)", fn,
           (unsigned long long)args->workspace, args->workspace_bytes, c->vocab);
    if (c->tokens && te_dev_checks_on())
      TE_CHECK(te_dev_check_range(args->workspace, first * c->vocab, fn, "args->workspace"));
  }
  /* the vector path: an output in the logits' dtype (in place or not) or
   * FP8, 16-byte aligned (FP8: 8) */
  int vec = c->vec;
  if (y && vec) {
    int f8 = y->dtype == TECORE_DTYPE_E4M3 || y->dtype == TECORE_DTYPE_E5M2;
    vec = f8 ? y->data % 8 == 0 : y->dtype == args->logits->dtype && y->data % 16 == 0;
    /* in place: each slice's codes start at a row, the first in the workspace */
    if (in8) vec = vec && c->vocab % 8 == 0 && args->workspace % 8 == 0;
  }
  pl->vec = vec;
  /* Rows cut into near-equal slices of at most TE_XENT_BWD_CHUNK units: a
   * grid of many short blocks with no partly filled last wave of long ones
   * (a block a row, persistent, left a third of the SMs' slots idle). */
  unsigned long long units = vec ? c->vocab / 8 : c->vocab;
  unsigned long long nch = (units + TE_XENT_BWD_CHUNK - 1) / TE_XENT_BWD_CHUNK;
  if (!nch) nch = 1;
  unsigned long long chunk = (units + nch - 1) / nch;
  unsigned rows = (unsigned)(c->tokens < 65535 ? c->tokens : 65535);
  pl->cfg = (struct tecore_launch_cfg){.grid = {(unsigned)nch, rows, 1},
                                       .block = {TE_XENT_BWD_THREADS, 1, 1}};
  pl->k = (struct te_xent_bwd_args){
      .x = TE_DPTR(args->logits->data), .labels = TE_DPTR(args->labels), .lse = TE_DPTR(lse),
      .dloss = TE_DPTR(dloss), .mean = TE_DPTR(mean), .tokens = c->tokens, .vocab = c->vocab,
      .chunk = chunk ? chunk : 1,
      .vocab_off = (long long)args->vocab_offset, .vocab_total = (long long)c->vtot,
      .ignore = args->ignore_index, .smoothing = args->label_smoothing, .dtype = c->dt,
      .flags = (m ? TE_XENT_DLOSS_MEAN : 0) | (vec ? TE_XENT_VEC : 0),
      .y = y ? TE_DPTR(y->data) : NULL, .ydtype = y ? (int)y->dtype : c->dt};
  return TECORE_SUCCESS;
}

/* The spans a backward writes (the gradient's home, FP8 amax and
 * scale_inv, the first slice's workspace) and reads (the logits when not
 * overwritten, y's scale, labels, dloss, and lse and mean when given: the
 * one-pass call writes those two and lists them itself). */
static void xent_bwd_spans(const struct tecore_xent_args *args, const struct xent_call *c,
                           const struct xent_bwd_plan *pl, tecore_devptr_t lse,
                           tecore_devptr_t dloss, tecore_devptr_t mean,
                           struct te_tensor_spans *l) {
  const struct tecore_tensor *y = pl->y;
  l->access = TE_ACCESS_WRITE;
  if (pl->in8) {
    xent_span_logits(l, args);
    te_tensor_spans(y, "args->dlogits", TE_SPAN_AMAX | TE_SPAN_SCALE_INV, l);
    te_span_add(l, "args->workspace", args->workspace, pl->first * c->vocab);
  } else if (y) {
    te_tensor_spans(y, "args->dlogits", TE_SPAN_DATA | TE_SPAN_AMAX | TE_SPAN_SCALE_INV, l);
  } else {
    xent_span_logits(l, args);
  }
  l->access = TE_ACCESS_READ;
  if (y) te_tensor_spans(y, "args->dlogits", TE_SPAN_SCALE, l);
  if (y && !pl->in8) xent_span_logits(l, args);
  te_span_add(l, "args->labels", args->labels, c->tokens * 4);
  if (lse) te_span_add(l, "lse", lse, c->tokens * 4);
  te_span_add(l, "dloss", dloss, (pl->m ? 1 : c->tokens) * 4);
  if (mean) te_span_add(l, "mean", mean, 8);
}

struct xent_bwd_slice {
  const struct xent_call *c;
  const struct xent_bwd_plan *pl;
  const struct te_xent_bwd_args *k0;   /* this pass's scale, amax, scale_inv */
  int id;
  tecore_stream_t stream;
};

static tecore_result_t xent_bwd_slice(void *ctx, size_t a, size_t b, void *out) {
  const struct xent_bwd_slice *sl = ctx;
  const struct te_xent_bwd_args *k0 = sl->k0;
  const size_t es = tecore_dtype_size((tecore_dtype_t)sl->c->dt), V = sl->c->vocab;
  struct te_xent_bwd_args k = *k0;
  k.x = (void *)((char *)k0->x + a * V * es);
  k.labels = (void *)((const int32_t *)k0->labels + a);
  k.lse = (void *)((const float *)k0->lse + a);
  if (!sl->pl->m) k.dloss = (void *)((const float *)k0->dloss + a);
  k.tokens = b - a;
  k.y = out;
  struct tecore_launch_cfg cfg = sl->pl->cfg;
  cfg.grid[1] = (unsigned)(k.tokens < 65535 ? k.tokens : 65535);
  void *kargs[TE_KNPARAMS(TE_XENT_BWD_PARAMS)];
  te_xent_bwd_args_ptrs(&k, kargs);
  return te_kernel_launch_pdl(sl->id + K_BWD, &cfg, kargs, sl->stream);
}

/* The backward's launches (one, or the in-place slices; two passes for a
 * current-scaled FP8 dlogits). */
static tecore_result_t xent_bwd_run(const struct tecore_xent_args *args, const struct xent_call *c,
                                    struct xent_bwd_plan *pl, int id, tecore_stream_t stream) {
  const struct tecore_tensor *y = pl->y;
  for (int pass = 0; pass < (y ? te_qout_passes(y) : 1); pass++) {
    struct te_qout q = {0};
    if (y) TE_CHECK(te_qout_begin(y, pass, 0, stream, &q));
    pl->k.scale = q.scale;
    pl->k.amax = q.amax;
    pl->k.scale_inv = q.scale_inv;
    if (pl->in8) {
      struct xent_bwd_slice sl = {.c = c, .pl = pl, .k0 = &pl->k, .id = id, .stream = stream};
      TE_CHECK(xent_slices(args, c, pl->first, xent_bwd_slice, &sl, stream));
      continue;
    }
    void *kargs[TE_KNPARAMS(TE_XENT_BWD_PARAMS)];
    te_xent_bwd_args_ptrs(&pl->k, kargs);
    TE_CHECK(te_kernel_launch_pdl(id + K_BWD, &pl->cfg, kargs, stream));
  }
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_xent_bwd(const struct tecore_xent_args *args, tecore_devptr_t lse,
                                          tecore_devptr_t dloss, tecore_devptr_t mean,
                                          unsigned flags, tecore_stream_t stream) {
  const char *fn = __func__;
  struct xent_call c;
  TE_CHECK(xent_check_args(args, &c, fn));
  struct xent_bwd_plan pl;
  TE_CHECK(xent_bwd_plan_make(args, &c, lse, dloss, mean, flags, fn, &pl));
  struct te_tensor_spans l = {.access = TE_ACCESS_WRITE};
  xent_bwd_spans(args, &c, &pl, lse, dloss, mean, &l);
  TE_CHECK(te_check_spans(l.span, l.n, fn));
  if (!c.tokens) return TECORE_SUCCESS;
  int id = xent_first_id();
  if (id < 0) return TE_ERR(TECORE_ERR_INTERNAL, "%s: the cross-entropy kernels did not register", fn);
  return xent_bwd_run(args, &c, &pl, id, stream);
}

/* ---- forward and backward in one pass ---------------------------------------------------- */

struct xent_train_slice {
  const struct xent_call *c;
  const struct xent_bwd_plan *pl;
  struct te_xent_train_args k;   /* the whole call's */
  unsigned blocks;
  int id;
  tecore_stream_t stream;
};

static tecore_result_t xent_train_slice(void *ctx, size_t a, size_t b, void *out) {
  const struct xent_train_slice *sl = ctx;
  const size_t es = tecore_dtype_size((tecore_dtype_t)sl->c->dt), V = sl->c->vocab;
  struct te_xent_train_args k = sl->k;
  k.x = (void *)((char *)sl->k.x + a * V * es);
  k.labels = (void *)((const int32_t *)sl->k.labels + a);
  k.loss = (void *)((float *)sl->k.loss + a);
  k.lse = (void *)((float *)sl->k.lse + a);
  if (!sl->pl->m) k.dloss = (void *)((const float *)sl->k.dloss + a);
  k.tokens = b - a;
  if (out) k.y = out;
  unsigned blocks = (unsigned)(k.tokens < sl->blocks ? k.tokens : sl->blocks);
  struct tecore_launch_cfg cfg = {
      .grid = {blocks, 1, 1}, .block = {TE_XENT_THREADS, 1, 1},
      .shared_bytes = (unsigned)(V * es)};
  void *kargs[TE_KNPARAMS(TE_XENT_TRAIN_PARAMS)];
  te_xent_train_args_ptrs(&k, kargs);
  return te_kernel_launch_pdl(sl->id + K_TRAIN, &cfg, kargs, sl->stream);
}

TE_EXPORT tecore_result_t tecore_xent_fwd_bwd(const struct tecore_xent_args *args,
                                              tecore_devptr_t loss, tecore_devptr_t lse,
                                              tecore_devptr_t mean, tecore_devptr_t dloss,
                                              unsigned flags, tecore_stream_t stream) {
  const char *fn = __func__;
  struct xent_call c;
  TE_CHECK(xent_check_args(args, &c, fn));
  TE_CHECK(xent_check_vec(loss, c.tokens, 1, fn, "loss"));
  TE_CHECK(xent_check_vec(mean, 2, 0, fn, "mean"));
  /* mean is the forward's output with per-token gradients too */
  const int m = (flags & TECORE_XENT_DLOSS_MEAN) != 0;
  struct xent_bwd_plan pl;
  TE_CHECK(xent_bwd_plan_make(args, &c, lse, dloss, m ? mean : 0, flags, fn, &pl));
  size_t row_bytes = c.vocab * tecore_dtype_size(args->logits->dtype);
  if (args->reduce || !pl.vec || (pl.y && te_qout_passes(pl.y) > 1) ||
      row_bytes > TE_XENT_TRAIN_MAX_ROW) {
    /* a vocabulary split across ranks (the sums cross ranks before any
     * gradient), current scaling (the amax before any code), unaligned
     * rows or rows longer than a block's shared memory holds: the two
     * calls, the same results */
    TE_CHECK(tecore_xent_fwd(args, loss, lse, mean, stream));
    return tecore_xent_bwd(args, lse, dloss, m ? mean : 0, flags, stream);
  }
  struct te_tensor_spans l = {.access = TE_ACCESS_WRITE};
  te_span_add(&l, "loss", loss, c.tokens * 4);
  te_span_add(&l, "lse", lse, c.tokens * 4);
  te_span_add(&l, "mean", mean, 8);
  xent_bwd_spans(args, &c, &pl, 0, dloss, 0, &l);
  TE_CHECK(te_check_spans(l.span, l.n, fn));
  int id = xent_first_id();
  if (id < 0) return TE_ERR(TECORE_ERR_INTERNAL, "%s: the cross-entropy kernels did not register", fn);
  if (!c.tokens) return mean ? xent_mean(args, &c, loss, mean, 0, id, stream) : TECORE_SUCCESS;
  /* the gradient of the mean needs the count before the rows */
  if (pl.m) TE_CHECK(xent_mean(args, &c, loss, mean, 1, id, stream));
  struct te_qout q = {0};
  if (pl.y) TE_CHECK(te_qout_begin(pl.y, 0, 0, stream, &q));
  /* two blocks an SM, each holding its row in shared memory */
  struct xent_train_slice sl = {
      .c = &c, .pl = &pl, .blocks = te_sm_count() * 2u, .id = id, .stream = stream,
      .k = {.x = TE_DPTR(args->logits->data), .labels = TE_DPTR(args->labels),
            .loss = TE_DPTR(loss), .lse = TE_DPTR(lse), .dloss = TE_DPTR(dloss),
            .mean = TE_DPTR(mean), .y = pl.y ? TE_DPTR(pl.y->data) : NULL, .scale = q.scale,
            .amax = q.amax, .scale_inv = q.scale_inv, .tokens = c.tokens, .vocab = c.vocab,
            .vocab_total = (long long)c.vtot, .ignore = args->ignore_index,
            .smoothing = args->label_smoothing, .dtype = c.dt, .flags = pl.m ? TE_XENT_DLOSS_MEAN : 0,
            .ydtype = pl.y ? (int)pl.y->dtype : c.dt}};
  if (pl.in8)
    TE_CHECK(xent_slices(args, &c, pl.first, xent_train_slice, &sl, stream));
  else
    TE_CHECK(xent_train_slice(&sl, 0, c.tokens, NULL));
  return mean ? xent_mean(args, &c, loss, mean, 0, id, stream) : TECORE_SUCCESS;
}
