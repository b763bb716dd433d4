/* SPDX-License-Identifier: Apache-2.0 */
/* ops_saved.c -- what a sequence's forward leaves for its backward (the
 * saved tensors: boundary activations, their FP8 copies, F32 sequences'
 * bf16 Linear inputs), listed for an upper layer and re-pointed at storage
 * the caller gives, and the pass hooks.  This is all activation offload
 * (libtegraph's te/offload.h) needs from the fuser: it lays the saved
 * tensors of several blocks over the same device memory and moves them to
 * the host and back between the passes through the hooks.
 *
 * Which tensors backward reads (read_back) follows the executors: Linear
 * reads its input (16-bit, or its FP8 copies, or the bf16 copy of an F32
 * sequence), activations and norms read their input, registered kinds are
 * assumed to read theirs; Bias, Identity, Reshape, Quantize, ConstantScale
 * and the slot operations read nothing of the forward's; attention
 * (TECORE_OP_BACKWARD_OUTPUT) reads its output too. */
#include "ops/ops_internal.h"

#include <string.h>

/* The boundary whose storage boundary b uses. */
static size_t owner(const tecore_seq_t *s, size_t b) {
  while (s->bnd[b].alias >= 0) b = (size_t)s->bnd[b].alias;
  return b;
}

/* Does op c's backward read its input (the forward's values)?  Its kind
 * says (TECORE_OP_BACKWARD_NO_INPUT; registered kinds are taken to read
 * it unless they say not); a Linear reads its FP8 or bf16 copy instead
 * where it has one. */
static int bwd_reads_input_hp(const tecore_seq_t *s, size_t c) {
  const struct te_op *o = &s->ops[c];
  if (o->fp8 & TE_KIND_GEMM) return !te_op_fp8(s, c) && s->cfg.dtype != TECORE_DTYPE_F32;
  return !(o->def.flags & TECORE_OP_BACKWARD_NO_INPUT);
}

/* The slots forked from boundary b's storage: *last grows to their
 * adders; 1 when an adder inside a recomputed unit that did not make the
 * slot adds it again in the backward (the storage is read back). */
static int slot_readers(const tecore_seq_t *s, size_t b, size_t *last) {
  int again = 0;
  for (size_t p = 0; p < s->npairs; p++) {
    const struct te_slot *sl = &s->pairs[p];
    if (sl->maker < 0 || sl->adder < 0 || owner(s, (size_t)sl->maker) != b) continue;
    if ((size_t)sl->adder > *last) *last = (size_t)sl->adder;
    if (te_rc_reads(s, b, (size_t)sl->adder)) again = 1;
  }
  return again;
}

/* One saved tensor and where its pointer lives. */
struct saved_ref {
  struct tecore_seq_saved info;
  tecore_devptr_t *field;
  unsigned *ext;
  unsigned *rcm;                   /* its te_bnd.rc or te_op.rc */
  unsigned bit;
};

/* Calls visit for each saved tensor in order; stops at a nonzero return. */
static int walk(const tecore_seq_t *cs, int (*visit)(struct saved_ref *r, void *arg), void *arg) {
  tecore_seq_t *s = (tecore_seq_t *)cs;   /* the refs may be written through by set_saved */
  size_t n = s->nops;
  size_t es = tecore_dtype_size(s->cfg.dtype);
  for (size_t b = 0; b <= n; b++) {
    struct te_bnd *bd = &s->bnd[b];
    /* the operations that read boundary b's storage in forward: consumers
     * of every boundary aliasing it, and slot adders of a fork of it */
    size_t last = b, first = b > 0 ? b - 1 : 0;
    int hp_back = 0;
    /* the FP8 copies live on boundary b itself, aliased or not: op b's
     * (an FP8 Linear's) input (a TP_COPY before it aliases b to its own
     * input, and the copies were then taken for scratch: NaN gradients) */
    const int lin = b < n && te_op_fp8(s, b);
    for (size_t c = b; c < n; c++) {
      if (owner(s, c) != b) continue;
      last = c;
      if (bwd_reads_input_hp(s, c) || te_rc_reads(s, b, c)) hp_back = 1;
    }
    /* an operation whose backward reads its output (attention's O) */
    for (size_t c = b > 0 ? b - 1 : 0; c + 1 < n; c++)
      if ((s->ops[c].def.flags & TECORE_OP_BACKWARD_OUTPUT) && owner(s, c + 1) == b) hp_back = 1;
    if (slot_readers(s, b, &last)) hp_back = 1;
    struct saved_ref r;
    memset(&r, 0, sizeof r);
    r.info.bnd = b;
    r.info.op_first = first;
    r.info.op_last = last;
    r.info.rows = bd->rows;
    r.info.cols = bd->cols;
    r.ext = &bd->ext;
    r.rcm = &bd->rc;
    if (b > 0 && b < n && bd->alias < 0 && bd->hp) {
      r.info.part = TECORE_SEQ_SAVED_DATA;
      r.info.dtype = s->cfg.dtype;
      r.info.bytes = bd->rows * bd->cols * es;
      r.field = &bd->hp;
      r.bit = TE_EXT_HP;
      r.info.written = bd->hp_valid;
      r.info.read_back = bd->hp_valid && hp_back;
      if (visit(&r, arg)) return 1;
    }
    if (s->fp8_run && bd->f8 >= 0 && bd->f8_row) {
      struct tecore_tensor t;
      tecore_dtype_t f8 = TECORE_DTYPE_E4M3;
      if (te_bnd_f8_tensor(s, b, &t) == TECORE_SUCCESS) f8 = t.dtype;
      r.info.dtype = f8;
      r.info.bytes = bd->rows * bd->cols;
      r.info.part = TECORE_SEQ_SAVED_FP8_ROW;
      r.field = &bd->f8_row;
      r.bit = TE_EXT_F8_ROW;
      r.info.written = bd->f8_ready || lin;
      /* the backward reads the columnwise copy (the weight gradient's
       * k-major operand); the rowwise one only when it makes that copy
       * from it (after a norm+quantize, which writes rowwise only) */
      r.info.read_back = r.info.written && lin && (bd->f8_rowonly || !bd->f8_col);
      /* a unit's Linear run again reads the FP8 input written before it */
      if (bd->f8_ready && lin && te_rc_reads(s, b, b)) r.info.read_back = 1;
      if (visit(&r, arg)) return 1;
      if (!bd->f8_col) continue;   /* inference: no columnwise copy at all */
      r.info.part = TECORE_SEQ_SAVED_FP8_COL;
      r.info.rows = bd->cols;
      r.info.cols = bd->rows;
      r.field = &bd->f8_col;
      r.bit = TE_EXT_F8_COL;
      /* a norm+quantize writes the rowwise copy only; backward makes this one */
      r.info.written = lin && !bd->f8_rowonly;
      r.info.read_back = r.info.written;
      if (visit(&r, arg)) return 1;
    }
  }
  for (size_t i = 0; i < n; i++) {
    struct te_op *o = &s->ops[i];
    if (!(o->fp8 & TE_KIND_GEMM) || !o->x16) continue;
    struct saved_ref r;
    memset(&r, 0, sizeof r);
    r.info.bnd = i;
    r.info.part = TECORE_SEQ_SAVED_BF16;
    r.info.op_first = r.info.op_last = i;
    r.info.dtype = TECORE_DTYPE_BF16;
    r.info.rows = o->in_rows;
    r.info.cols = o->in_cols;
    r.info.bytes = o->in_rows * o->in_cols * 2;
    r.field = &o->x16;
    r.ext = &o->ext;
    r.rcm = &o->rc;
    r.bit = TE_EXT_X16;
    r.info.written = r.info.read_back = !s->fp8_run && s->cfg.dtype == TECORE_DTYPE_F32;
    if (visit(&r, arg)) return 1;
  }
  return 0;
}

struct list_arg {
  struct tecore_seq_saved *out;
  size_t max, k;
};

static int list_visit(struct saved_ref *r, void *arg) {
  struct list_arg *a = arg;
  if (a->k < a->max) {
    a->out[a->k] = r->info;
    a->out[a->k].ptr = *r->field == TE_SAVED_PENDING ? 0 : *r->field;
    a->out[a->k].external = (*r->ext & r->bit) != 0;
    if (*r->rcm & r->bit) {   /* the backward reads what the forward run again writes */
      a->out[a->k].external = TECORE_SEQ_SAVED_RECOMPUTED;
      a->out[a->k].read_back = 0;
    }
  }
  a->k++;
  return 0;
}

TE_EXPORT tecore_result_t tecore_seq_get_saved(const tecore_seq_t *s,
                                               struct tecore_seq_saved *saved, size_t max,
                                               size_t *count) {
  static const char fn[] = "tecore_seq_get_saved";
  TE_CHECK(te_seq_arg(s, fn));
  TE_ARG(count, "%s: count is NULL", fn);
  TE_ARG(saved || max == 0, "%s: saved is NULL but max is %zu", fn, max);
  TE_ARG(s->built, "%s: the sequence is not built (tecore_seq_build)", fn);
  struct list_arg a = {.out = saved, .max = max};
  walk(s, list_visit, &a);
  *count = a.k;
  return TECORE_SUCCESS;
}

struct find_arg {
  size_t want, k;
  struct saved_ref found;
  int hit;
};

static int find_visit(struct saved_ref *r, void *arg) {
  struct find_arg *a = arg;
  if (a->k++ != a->want) return 0;
  a->found = *r;
  a->hit = 1;
  return 1;
}

TE_EXPORT tecore_result_t tecore_seq_set_saved(tecore_seq_t *s, size_t index, tecore_devptr_t ptr) {
  static const char fn[] = "tecore_seq_set_saved";
  TE_CHECK(te_seq_arg(s, fn));
  TE_ARG(s->built, "%s: the sequence is not built (tecore_seq_build)", fn);
  TE_ARG(ptr % 256 == 0, "%s: ptr 0x%llx is not 256-byte aligned", fn, (unsigned long long)ptr);
  struct find_arg a = {.want = index};
  walk(s, find_visit, &a);
  TE_ARG(a.hit, "%s: index %zu is out of range (the sequence saves %zu tensors)", fn, index, a.k);
  struct saved_ref *r = &a.found;
  TE_ARG(!(*r->rcm & r->bit), "%s: saved tensor %zu lies in the recompute pool "
         "(tecore_seq_set_recompute): the sequence lays it out itself", fn, index);
  int ext = (*r->ext & r->bit) != 0;
  if (ptr) {
    /* the tensor's bytes must fit where ptr points: the sequence writes
     * all of them there */
    tecore_devptr_t base = 0;
    size_t len = 0;
    TE_ARG(tecore_mem_range(ptr, &base, &len) == TECORE_SUCCESS,
           "%s: ptr 0x%llx is not in an allocation of the device layer", fn,
           (unsigned long long)ptr);
    TE_ARG(ptr - base <= len && r->info.bytes <= len - (size_t)(ptr - base),
           "%s: saved tensor %zu needs %zu bytes; ptr 0x%llx has %zu to the end of its "
           "allocation", fn, index, r->info.bytes, (unsigned long long)ptr,
           ptr - base <= len ? len - (size_t)(ptr - base) : (size_t)0);
    if (!ext && *r->field != TE_SAVED_PENDING) TE_CHECK(te_seq_release(s, *r->field));
    *r->field = ptr;
    *r->ext |= r->bit;
    return TECORE_SUCCESS;
  }
  /* already the sequence's own (not TECORE_SEQ_DEFER_SAVED's pending) */
  if (!ext && *r->field != TE_SAVED_PENDING) return TECORE_SUCCESS;
  tecore_devptr_t own = 0;
  TE_CHECK(te_seq_alloc(s, r->info.bytes, 0, &own));
  *r->field = own;
  *r->ext &= ~r->bit;
  return TECORE_SUCCESS;
}

tecore_result_t te_saved_alloc(tecore_seq_t *s, size_t bytes, tecore_devptr_t *field) {
  if (s->cfg.flags & TECORE_SEQ_DEFER_SAVED) {
    *field = TE_SAVED_PENDING;
    return TECORE_SUCCESS;
  }
  return te_seq_alloc(s, bytes, 0, field);
}

struct settle_arg {
  tecore_seq_t *s;
  int own;                         /* give every pending tensor the sequence's storage */
  size_t pending;
  tecore_result_t r;
};

static int settle_visit(struct saved_ref *r, void *arg) {
  struct settle_arg *a = arg;
  if (*r->field != TE_SAVED_PENDING) return 0;
  if (!r->info.read_back && !a->own) {
    a->pending++;
    return 0;
  }
  a->r = te_seq_alloc(a->s, r->info.bytes, 0, r->field);
  return a->r != TECORE_SUCCESS;
}

tecore_result_t te_saved_settle(tecore_seq_t *s, size_t *pending) {
  struct settle_arg a = {.s = s, .r = TECORE_SUCCESS};
  if (s->cfg.flags & TECORE_SEQ_DEFER_SAVED) walk(s, settle_visit, &a);
  if (pending) *pending = a.pending;
  return a.r;
}

/* ---- the recompute pool (ops_recompute.c) ---------------------------------------- */

static int unit_starts(const tecore_seq_t *s, size_t b) {
  for (size_t u = 0; u < s->nrc; u++)
    if (s->rc[u].first == b) return 1;
  return 0;
}

/* Does unit u's forward write saved tensor r, which nothing past the
 * operation right after the unit reads (and no other unit's forward run
 * again)?  Then the unit's run gives it back and it may lie in the pool. */
static int unit_makes(const tecore_seq_t *s, size_t u, const struct saved_ref *r) {
  const size_t a = s->rc[u].first, b = a + s->rc[u].count, x = r->info.bnd;
  if (*r->ext & r->bit) return 0;   /* the caller's */
  if (r->info.part == TECORE_SEQ_SAVED_BF16) return a <= x && x < b;
  if (x < a || x > b || x >= s->nops) return 0;
  if (r->info.op_last > b || (r->info.op_last == b && unit_starts(s, b))) return 0;
  const struct te_bnd *bd = &s->bnd[x];
  const int data = r->info.part == TECORE_SEQ_SAVED_DATA;
  if (x == a) return !data && te_op_fp8(s, a) && !bd->f8_ready;   /* the Linear quantizes it */
  if (x == b) return data ? bd->hp_valid : bd->f8_ready;          /* the unit's last op writes */
  return 1;
}

struct pool_arg {
  tecore_seq_t *s;
  size_t u, off, last;
  int assign;
  tecore_result_t r;
};

static int pool_visit(struct saved_ref *r, void *arg) {
  struct pool_arg *a = arg;
  if (!unit_makes(a->s, a->u, r)) return 0;
  if (r->info.op_last > a->last) a->last = r->info.op_last;
  if (a->assign) {
    if (*r->field != TE_SAVED_PENDING) {
      a->r = te_seq_release(a->s, *r->field);
      if (a->r != TECORE_SUCCESS) return 1;
    }
    *r->field = a->s->rc_pool + a->off;
    *r->rcm |= r->bit;
  }
  a->off += (r->info.bytes + 255) & ~(size_t)255;
  return 0;
}

/* Tensors of an older layout leave the pool (pending: given storage below). */
static int unpool_visit(struct saved_ref *r, void *arg) {
  (void)arg;
  if (!(*r->rcm & r->bit)) return 0;
  *r->rcm &= ~r->bit;
  *r->field = TE_SAVED_PENDING;
  return 0;
}

/* Lays each unit's saved tensors over the pool from its start (one unit's
 * worth: the largest), freeing their own storage; last_reader[u] gets the
 * last operation reading unit u's pooled tensors.  A new layout (a recipe
 * changed) allocates a larger pool where needed: the old one stays
 * allocated until destroy, so graphs captured before still replay. */
tecore_result_t te_rc_layout(tecore_seq_t *s, size_t *last_reader) {
  walk(s, unpool_visit, NULL);
  size_t need = 0;
  for (size_t u = 0; u < s->nrc; u++) {
    struct pool_arg a = {.s = s, .u = u};
    walk(s, pool_visit, &a);
    last_reader[u] = a.last;
    if (a.off > need) need = a.off;
  }
  if (need > s->rc_pool_bytes) {
    TE_CHECK(te_seq_alloc(s, need, 0, &s->rc_pool));
    s->rc_pool_bytes = need;
  }
  for (size_t u = 0; u < s->nrc; u++) {
    struct pool_arg a = {.s = s, .u = u, .assign = 1, .r = TECORE_SUCCESS};
    walk(s, pool_visit, &a);
    TE_CHECK(a.r);
  }
  /* what left the pool: its own storage again (or pending, deferred) */
  struct settle_arg st = {.s = s, .own = !(s->cfg.flags & TECORE_SEQ_DEFER_SAVED),
                          .r = TECORE_SUCCESS};
  if (st.own) walk(s, settle_visit, &st);
  return st.r;
}

TE_EXPORT tecore_result_t tecore_seq_set_hooks(tecore_seq_t *s, const struct tecore_seq_hooks *h) {
  TE_CHECK(te_seq_arg(s, "tecore_seq_set_hooks"));
  if (h) {
    TE_ARG(h->before || h->after, "tecore_seq_set_hooks: hooks has neither before nor after");
    s->hooks = *h;
  } else {
    memset(&s->hooks, 0, sizeof s->hooks);
  }
  return TECORE_SUCCESS;
}
