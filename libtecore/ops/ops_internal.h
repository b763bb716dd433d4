/* SPDX-License-Identifier: Apache-2.0 */
/* ops_internal.h -- the operation fuser's private structures: a sequence's
 * operations, the activation boundaries between them (storage, aliases,
 * FP8 copies), residual slots, the fusion plan of each pass, scratch, and
 * the internal executors shared by the ops_*.c files.
 *
 * Kinds.  Every operation carries its kind's definition (te_kind): the
 * public tecore_op_kind_def, for libtecore's own kinds as for registered
 * ones, plus what only libtecore's GEMM and Quantize need from the
 * sequence's FP8 machinery.  The sequence and the planner read properties
 * from it, never the kind's number (only the fusion patterns name kinds).
 *
 * Boundaries.  A sequence of n operations has n + 1 boundaries: boundary b
 * is the input of op b and the output of op b - 1; boundary 0 is the
 * caller's input, boundary n the caller's output (resolved at each call).
 * A boundary either owns storage or aliases an earlier boundary (forward:
 * TECORE_OP_ALIAS_FORWARD, e.g. Identity, Reshape, Quantize, MakeExtraOutput
 * pass their input through) and, separately, its gradient owns storage or
 * aliases a later boundary's gradient (TECORE_OP_ALIAS_BACKWARD: Identity,
 * Reshape, Quantize, Bias, AddExtraInput).
 *
 * Files.  Each calls only files on lower lines, or to its right on its
 * own line (t/lint/circles.sh):
 *   ops_transformer.c                  a transformer block, through te/ops.h
 *   ops_seq.c ops_exec.c ops_saved.c ops_grad.c
 *                                      a sequence's life, its passes, saved
 *                                      tensors, caller gradients
 *   ops_plan.c                         the fusion plan of each pass
 *   ops_registry.c                     kinds and patterns, built in or registered
 *   ops_kinds.c ops_fusions.c          libtecore's kinds and fusion patterns
 *   ops_attn.c ops_linear.c ops_basic.c
 *                                      the executors they share
 *   ops_overlap.c ops_store.c          backward overlap; storage and views */
#ifndef TECORE_OPS_INTERNAL_H
#define TECORE_OPS_INTERNAL_H

#include "internal.h"
#include <te/ops.h>

/* ---- kinds ------------------------------------------------------------------ */

/* te_kind.fp8: a kind's part in the sequence's FP8 state */
#define TE_KIND_GEMM 0x1u       /* runs te_linear_fwd/bwd: an FP8 copy of its input, FP8
                                   weight and gradient scaling entries, bf16 copies (F32) */
#define TE_KIND_FP8_COPY 0x2u   /* leaves an FP8 copy of its output (Quantize) */
#define TE_KIND_ATTN 0x4u       /* attention: lse and (F32) bf16 copies of its own (ops_attn.c) */

struct te_kind {
  struct tecore_op_kind_def def;
  unsigned fp8;                 /* TE_KIND_*; 0 for registered kinds */
  size_t ctx_bytes;             /* > 0: desc->ctx points to a parameter struct of this size,
                                   copied into te_op.prm by tecore_seq_add (RoPE, attention) */
};

/* libtecore's kinds, indexed by kind (ops_kinds.c); the communication
 * slots have a name and no executors. */
extern const struct te_kind te_builtin_kinds[TECORE_OP_BUILTIN_COUNT_];

/* ---- fusion patterns -------------------------------------------------------- */

/* A pattern in a plan: the definition (copied) and where it came from. */
struct te_fusion {
  struct tecore_fusion_def def;
  int builtin_id;     /* TE_FUSE_* for libtecore's own, -1 for registered ones */
};

/* libtecore's built-in patterns (ops_fusions.c); the ids let the planner
 * record a pattern's side effects on the boundaries. */
enum te_fuse_id {
  TE_FUSE_NORM_QUANTIZE = 0,    /* [norm] before an FP8 Linear: FP8 norm output */
  TE_FUSE_NORM_Q_QUANTIZE,      /* [norm, Quantize] before an FP8 Linear */
  TE_FUSE_ACT_QUANTIZE,         /* [activation] before an FP8 Linear: FP8 output */
  TE_FUSE_LINEAR_EPI,           /* Linear (+Bias) (+GELU | +AddExtraInput): GEMM epilogue */
  TE_FUSE_DACT_CT,              /* backward [Linear, (Bias), act]: dact+dbias+cast+transpose */
  TE_FUSE_DGRAD_DGELU,          /* backward [Linear, (Bias), GELU, Linear]: DGELU epilogue */
  TE_FUSE_DGACT_CT,             /* backward [Linear, gated act]: FP8 dact, byte transpose */
  TE_FUSE_NORM_BWD_ADD,         /* backward [MakeExtraOutput, RMSNorm or LayerNorm] */
  TE_FUSE_DGRAD_ADD,            /* backward [MakeExtraOutput, Linear]: dgrad with C */
  TE_FUSE_ROPE_Q,               /* inference [RoPE] before FP8 attention: FP8 Q/K/V */
  TE_FUSE_ATTN_Q,               /* inference [attention] on them: O in E4M3 (the next FP8
                                   Linear's input) or in the dtype */
};

/* ---- a sequence ---------------------------------------------------------------- */

struct te_op {
  struct tecore_op_desc d;
  struct tecore_op_kind_def def;   /* its kind (copied when added) */
  unsigned fp8;                    /* te_kind.fp8 */
  size_t in_rows, in_cols, out_rows, out_cols;
  size_t nparams;
  struct tecore_op_param_def pdef[TECORE_OP_MAX_PARAMS];
  tecore_devptr_t param[TECORE_OP_MAX_PARAMS], grad[TECORE_OP_MAX_PARAMS];
  size_t plen[TECORE_OP_MAX_PARAMS];   /* elements of each parameter */
  size_t nsaved;
  tecore_devptr_t saved[TECORE_OP_MAX_SAVED];   /* norms: rsigma, mu */
  /* Linear */
  size_t lin;                      /* index among the Linears (scaling state entries) */
  int hp;                          /* an FP8 sequence runs this Linear in its own dtype
                                      (TECORE_OPS_FP8_MIN_MNK: too small to gain) */
  tecore_devptr_t w16, x16;        /* F32 sequences: bf16 copies of W and of the input;
                                      TECORE_SEQ_F32_WEIGHTS: w16 is the 16-bit copy of the
                                      F32 weight a Linear not in FP8 multiplies by */
  tecore_devptr_t w8_row, w8_col;  /* FP8: the quantized weight, rowwise (what the forward
                                      GEMM reads); w8_col its columnwise copy kept from the
                                      forward with TECORE_OPS_W8_COL_KEEP=1, else 0 (the
                                      backward makes it in tecore_seq.w8_col) */
  tecore_devptr_t w8_srow, w8_scol;/* block recipe: the 128x128 blocks' scale_inv of w8_row
                                      and of w8_col (kept), [cdiv(out,128)][cdiv(in,128)] and
                                      its transpose; else 0 */
  unsigned param_ext;              /* bit p: param[p] is the caller's (tecore_seq_set_param):
                                      never freed by the sequence */
  unsigned grad_ext;               /* bit p: grad[p] is the caller's
                                      (tecore_seq_set_param_grad): never freed */
  unsigned grad_fresh;             /* bit p: grad[p] is to be overwritten, not added to
                                      (tecore_seq_zero_grad marked it; its first writer in
                                      the next backward clears the bit: te_grad_take_fresh) */
  int w8_ext;                      /* w8_row is the caller's (tecore_seq_set_fp8_weight_data,
                                      while given): never freed; a new recipe or given 0
                                      gives the sequence its own again */
  int w8_given;                    /* training, delayed scaling: the caller writes w8_row,
                                      its scale_inv and amax before each forward
                                      (tecore_seq_set_fp8_weight_given); the forward never
                                      quantizes the weight; cleared by a new recipe */
  int w8_cached;                   /* inference: w8_row holds the weight at the current
                                      scale; no forward quantizes it again until cleared */
  int gelu_aux_only;               /* inference: the GEMM library refused the GELU epilogue
                                      without aux for this Linear: not asked again */
  int gelu_daux;                   /* its last forward saved gelu' as aux (the DAUX
                                      epilogues), not the pre-activation */
  int gelu_daux_off;               /* the GEMM library refused the DAUX forward for this
                                      Linear: not asked again */
  /* RoPE and attention: the desc->ctx struct as tecore_seq_add copied it
   * (own_ctx 1); d.ctx still points to the caller's, which may be gone:
   * later calls read prm (te_op_desc) */
  int own_ctx;
  union {
    struct tecore_op_rope_args rope;
    struct tecore_op_attention_args attn;
  } prm;
  /* attention (ops_attn.c) */
  tecore_devptr_t lse;             /* float [heads][rows]: forward writes, backward reads */
  tecore_devptr_t qkv16, o16;      /* F32 sequences: bf16 input and output, kept for backward */
  tecore_devptr_t do16, dqkv16;    /* F32 sequences: bf16 gradients (scratch of the backward) */
  int qkv8;                        /* FP8 Q/K/V (rope+quantize): entries qkv8_entry .. + 2
                                      (Q, K, V) of tecore_seq.st_qkv, qkv8_buf their codes
                                      (compact Q, then K, then V); 0: none */
  size_t qkv8_entry;
  tecore_devptr_t qkv8_buf;
  /* a slot role (MakeExtraOutput / AddExtraInput) */
  int pair;                        /* its use of the slot: an index into tecore_seq.pairs, or -1 */
  unsigned ext;                    /* TE_EXT_X16: x16 is the caller's (tecore_seq_set_saved) */
  unsigned rc;                     /* TE_EXT_X16: x16 lies in the recompute pool */
};

struct te_bnd {
  size_t rows, cols;
  tecore_devptr_t hp;              /* owned storage, or 0 (aliased, or boundary 0 / n) */
  int alias;                       /* forward: the boundary whose storage this is, or -1 */
  tecore_devptr_t g;               /* gradient storage (own, or in the shared arena), or 0 */
  int galias;                      /* backward: the boundary whose gradient this is, or -1 */
  int gshared;                     /* g lies in the arena laid out by the backward plan */
  int f8;                          /* FP8 copy: activation scaling entry, or -1 */
  tecore_devptr_t f8_row, f8_col;
  tecore_devptr_t f8_srow, f8_scol;/* block recipe: the 1x128 blocks' scale_inv of f8_row,
                                      [rows][cdiv(cols,128)], and of f8_col,
                                      [cols][cdiv(rows,128)]; resident, never saved or
                                      offloaded (a 32nd of the codes' bytes); else 0 */
  /* set by the forward plan */
  int f8_ready;                    /* its producer writes the FP8 copy */
  int f8_rowonly;                  /* ... rowwise only (the columnwise copy is made in backward) */
  int hp_valid;                    /* the high-precision data is written */
  unsigned ext;                    /* storage the caller gave (tecore_seq_set_saved): TE_EXT_* */
  unsigned rc;                     /* parts in the recompute pool (ops_recompute.c): TE_EXT_* */
};
/* TECORE_SEQ_DEFER_SAVED: a saved tensor's storage field before the caller
 * gives it (tecore_seq_set_saved); never dereferenced: a forward is refused
 * while one is left */
#define TE_SAVED_PENDING ((tecore_devptr_t)1)
#define TE_EXT_HP 0x1u
#define TE_EXT_F8_ROW 0x2u
#define TE_EXT_F8_COL 0x4u
#define TE_EXT_X16 0x8u
#define TE_EXT_GRAD 0x10u                /* the gradient's storage (tecore_seq_set_grad) */

/* One use of a residual slot: made (forked) and/or added.  A slot is used
 * again once its pair is complete (made, then added). */
struct te_slot {
  int slot;
  int maker, adder;                /* op indices, or -1 */
  tecore_devptr_t value, grad;     /* owned storage for extra inputs / outputs */
};

struct te_group {
  const struct te_fusion *f;       /* NULL: the op by itself */
  size_t first, count;
  const char *name;
  /* backward only */
  int grad_dead;                   /* TECORE_EXEC_GRAD_DEAD: no later group reads the gradient
                                      of the output, the sequence's storage */
  int overlap;                     /* the group starts with a Linear whose wgrad GEMM waits for
                                      the next group (in backward order, one operation of a
                                      TECORE_OP_BACKWARD_OVERLAP kind) to be queued on the side
                                      stream (ops_overlap.c) */
  /* forward only */
  size_t chunks;                   /* > 1: a Linear alone whose GEMM runs in this many row
                                      blocks, the next group (TECORE_FUSION_ROWS) run on each
                                      on the side stream (ops_overlap.c) */
};

struct te_plan {
  struct te_fusion *fusions;       /* the patterns the plan uses (copies) */
  size_t nfusions;
  struct te_group *groups[2];
  size_t ngroups[2];
};

/* Activation recomputation (ops_recompute.c): a range the caller set, and
 * a unit, the ops [first, first + count) whose forward the backward runs
 * again (a FULL range is one unit; a SELECTIVE one, a unit per run of
 * attention-core and activation operations in it). */
struct te_rc_range {
  size_t first, count;
  int mode;                        /* tecore_seq_recompute_t */
};
struct te_rc {
  size_t first, count;
  /* set by the plan (te_rc_plan) */
  size_t trig;                     /* the backward group before which the forward runs again */
  size_t gf0, gf1;                 /* its forward groups [gf0, gf1) */
};

struct te_alloc {
  tecore_devptr_t p;
  size_t bytes;
  int param;
};

struct tecore_seq {
  struct tecore_seq_config cfg;
  int held;                        /* tecore_seq_hold: another object uses it */
  struct te_op *ops;
  size_t nops, cap;
  struct te_bnd *bnd;              /* nops + 1, after build */
  struct te_slot *pairs;           /* every use of a slot, in op order */
  size_t npairs, cap_pairs;
  int slot_last[TECORE_SEQ_MAX_SLOTS]; /* each slot's latest pair, or -1 */
  size_t nlinear;
  int built;

  int fp8;                         /* a recipe is set */
  int fp8_run;                     /* FP8 in effect: a recipe is set and at least one Linear
                                      runs in FP8; with every Linear left in the dtype
                                      (te_op.hp) the sequence plans and runs as without a
                                      recipe: no FP8 copies, amaxes or scale updates */
  struct tecore_recipe recipe;
  int have_state;
  struct tecore_delayed_state st_act, st_w, st_g;
  size_t nf8;                      /* activation entries */
  /* FP8 Q/K/V of rope+quantize (te_op.qkv8): their own activation state,
   * apart from st_act, so that a training sequence and its inference twin
   * keep one st_act layout (tecore_seq_fp8_state); updated with the others */
  struct tecore_delayed_state st_qkv;
  size_t nqkv8;

  struct te_plan plan;

  /* scratch shared by the ops (one stream runs them in order) */
  size_t max_elems, max_cols;
  tecore_devptr_t one_f32;         /* 1.0f: the scale of casts */
  tecore_devptr_t zeros16;         /* bf16 zeros [max(rows, cols)][16]: bias-add GEMMs */
  size_t zeros_rows;
  tecore_devptr_t dy16;            /* F32 sequences: bf16 copy of a gradient */
  tecore_devptr_t dy8_row, dy8_col;/* FP8 gradient, both copies */
  tecore_devptr_t dy8_srow, dy8_scol; /* block recipe: their 1x128 scale_inv arrays, sized
                                      for the largest Linear output */
  tecore_devptr_t w8_scol;         /* block recipe: the 128x128 scale_inv of the weight
                                      columnwise copy the backward makes (in w8_col, or in
                                      dy8_col: te_w8_in_dy8), sized for the largest weight */
  size_t nfresh;                   /* parameter gradients marked to be overwritten
                                      (te_op.grad_fresh bits set) */
  tecore_stream_t fresh_stream;    /* the capturing stream zero_grad marked them on */
  tecore_devptr_t w8_col;          /* training (not TECORE_OPS_W8_COL_KEEP): one Linear's
                                      weight columnwise FP8 copy (the
                                      dgrad GEMM's operand), the byte transpose of its w8_row
                                      made right before that GEMM, on the sequence's one
                                      stream; sized for the largest weight (inference: 0) */
  size_t dy8_col_elems;            /* dy8_col's size (dy8_row: max_elems; a larger
                                      gradient makes its copies one at a time) */
  size_t dy8_row_elems, w8_col_bytes; /* dy8_row's and w8_col's sizes */
  int grad8_given;                 /* TECORE_SEQ_GRAD_FP8_GIVEN in effect (the plan lets the
                                      last Linear take an FP8 gradient): that gradient's
                                      copies are the caller's, dy8_row and dy8_col are sized
                                      for the other Linears (ops_seq.c alloc_grad8) */
  tecore_devptr_t f8_dummy;        /* FP8 output the bias gradient kernel writes and nobody reads */
  tecore_devptr_t dvec, dvec2;     /* F32 [max_cols]: reduced vectors (dbias, dgamma, dbeta) */
  tecore_devptr_t dvec16;          /* dtype [max_cols]: a reduced vector in the sequence's dtype */
  tecore_devptr_t dvec_tmp;        /* F32 [max_cols]: dvec16 converted, before it is added */
  tecore_devptr_t junk_f32;        /* scale_inv the bias gradient kernel writes and nobody reads */
  tecore_devptr_t ws;              /* norm backward and dbias workspace */
  size_t ws_bytes;
  tecore_devptr_t gemm_ws;
  size_t gemm_ws_bytes;
  tecore_devptr_t cws;             /* column sums' scratch (a bias gradient without the GEMM's
                                      epilogue, ops_linear.c); 0: none */
  size_t cws_bytes;
  size_t cs_op;                    /* the Linear whose output gradient's column sums an
                                      activation's or a norm's backward left in cws
                                      (te_linear_act_bwd, te_linear_norm_bwd), cs_parts
                                      parts of it, summed over the tensor at cs_src;
                                      SIZE_MAX: none */
  size_t cs_parts;
  tecore_devptr_t cs_src;
  int cs_done;                     /* the norm's reduction already added the sums into that
                                      Linear's bias gradient */
  tecore_devptr_t kvb;             /* F32 [max_cols]: an attention block's output Linear's
                                      bias gradient from this backward alone (the norm's
                                      reduction copies it), for the QKV Linear's key and value
                                      bias gradients (ops_linear.c); 0: none */
  size_t kvb_op;                   /* that output Linear, or SIZE_MAX */
  tecore_devptr_t g0;              /* dx when the caller wants none */
  tecore_devptr_t garena;          /* the shared activation gradients (laid out by the backward plan) */
  size_t garena_bytes;

  /* the current call's caller tensors */
  tecore_devptr_t run_in, run_out, run_dy, run_dx;
  tecore_devptr_t run_dy8_col;     /* a backward given the FP8 gradient (tecore_seq_grad_fp8):
                                      where the last Linear makes its columnwise copy; 0
                                      otherwise */
  tecore_devptr_t run_dy8_row;     /* with grad8_given: the caller's rowwise codes */
  int have_forward;                /* a forward ran since build / the last recipe change */

  struct tecore_seq_hooks hooks;   /* tecore_seq_set_hooks; all NULL: none */

  /* backward overlap (ops_overlap.c): made by build when the sequence has
   * a Linear followed by an overlapping kind and overlap is on */
  int overlap;                     /* on for this sequence (tunable and config) */
  tecore_stream_t side;            /* highest priority, non-blocking; 0: none */
  tecore_event_t ev_fork, ev_join;
  size_t defer_op;                 /* te_linear_bwd of this op records its wgrad in
                                      `pend` instead of queuing it; SIZE_MAX: none */
  size_t chunk_op, chunk_n;        /* te_linear_fwd of chunk_op runs its GEMM in chunk_n row
                                      blocks, calling chunk_done after each; SIZE_MAX: none */
  tecore_result_t (*chunk_done)(tecore_seq_t *s, size_t row0, size_t rows);
  void *chunk_arg;                 /* chunk_done's (ops_exec.c) */
  struct te_wgrad {
    int valid;
    size_t op;
    struct tecore_tensor dy, x;    /* the operands as te_linear_bwd prepared them */
    int x8_transpose;              /* x's columnwise FP8 copy still to be made (x8_both) */
    tecore_devptr_t bias_grad;     /* F32 bias gradient the GEMM's BGRAD epilogue adds to, or 0 */
  } pend;

  /* activation recomputation (ops_recompute.c) */
  struct te_rc_range *rcr;         /* tecore_seq_set_recompute's ranges, in op order */
  size_t nrcr;
  struct te_rc *rc;                /* their units, in op order */
  size_t nrc;
  tecore_devptr_t rc_pool;         /* the units' saved tensors, one unit's worth */
  size_t rc_pool_bytes;
  tecore_devptr_t run_noop;        /* the last forward's noop_flag (the recompute's) */

  struct te_alloc *allocs;
  size_t nallocs, cap_allocs;
  size_t bytes_total, bytes_param;

  /* the parameters' gradients in the caller's region (ops_gregion.c) */
  struct tecore_seq_grad_region gregion;   /* alloc NULL: none set */
  tecore_devptr_t gr_base;         /* what alloc gave at build; 0: none */
  size_t gr_bytes, gr_used;
};

/* ---- the argument checks every tecore_seq_* call opens with ---------------
 * te_seq_arg: s given and a live sequence (not destroyed); te_seq_op_arg:
 * that, and index naming one of its operations.  TECORE_ERR_INVALID naming
 * fn, else TECORE_SUCCESS. */
static inline tecore_result_t te_seq_arg(const tecore_seq_t *s, const char *fn) {
  TE_ARG(s, "%s: seq is NULL", fn);
  TE_ARG(te_handle_live(s), "%s: seq %p is not a live sequence (destroyed?)", fn,
         (const void *)s);
  return TECORE_SUCCESS;
}

static inline tecore_result_t te_seq_op_arg(const tecore_seq_t *s, size_t index, const char *fn) {
  tecore_result_t r = te_seq_arg(s, fn);
  if (r != TECORE_SUCCESS) return r;
  TE_ARG(index < s->nops, "%s: index %zu is out of range (the sequence has %zu operations)", fn,
         index, s->nops);
  return TECORE_SUCCESS;
}

/* ---- ops_store.c: the bottom of ops/, which every other file may call ---------------- */
/* A device allocation of the sequence (param: counted as parameter
 * memory), freed by destroy or by te_seq_release. */
tecore_result_t te_seq_alloc(tecore_seq_t *s, size_t bytes, int param, tecore_devptr_t *p);
tecore_result_t te_seq_release(tecore_seq_t *s, tecore_devptr_t p);
/* The storage boundary b resolves to (following aliases). */
tecore_devptr_t te_bnd_hp(const tecore_seq_t *s, size_t b);
tecore_devptr_t te_bnd_grad(const tecore_seq_t *s, size_t b);
void te_t2d(struct tecore_tensor *t, tecore_dtype_t dt, size_t rows, size_t cols,
            tecore_devptr_t data);
/* The value and gradient storage of pair p (te_op.pair) as of the
 * current call. */
tecore_devptr_t te_slot_value(const tecore_seq_t *s, int p);
tecore_devptr_t te_slot_grad(const tecore_seq_t *s, int p);

/* ---- ops_registry.c ------------------------------------------------------------------ */
/* Copies kind's definition (built in or registered) into *k; 0 if kind
 * has no implementation. */
int te_kind_lookup(int kind, struct te_kind *k);
/* A snapshot of the registered fusion patterns (caller frees). */
tecore_result_t te_fusions_snapshot(struct te_fusion **out, size_t *n);

/* ---- ops_attn.c: RoPE and attention --------------------------------------------------- */
tecore_result_t te_rope_shape(const struct tecore_op_desc *d, struct tecore_op_shape *sh,
                              void *ctx);
tecore_result_t te_rope_op_fwd(const struct tecore_seq_exec *x);
tecore_result_t te_rope_op_bwd(const struct tecore_seq_exec *x);
tecore_result_t te_attn_shape(const struct tecore_op_desc *d, struct tecore_op_shape *sh,
                              void *ctx);
tecore_result_t te_attn_ws(const struct tecore_op_desc *d, size_t rows, size_t cols,
                           size_t *bytes, void *ctx);
tecore_result_t te_attn_op_fwd(const struct tecore_seq_exec *x);
tecore_result_t te_attn_op_bwd(const struct tecore_seq_exec *x);
/* Allocates attention op i's own buffers (tecore_seq_build). */
tecore_result_t te_attn_op_alloc(tecore_seq_t *s, size_t i);
/* The FP8 attention of inference sequences (ops_fusions.c's rope+quantize
 * and attention+quantize): can attention op i take FP8 Q/K/V from the RoPE
 * before it (no recipe needed yet: the plan's static conditions and the
 * backend); with o8, can it also write O in E4M3?  No error is left. */
int te_attn_fp8_takes(const tecore_seq_t *s, size_t i, int o8);
tecore_result_t te_rope_q_fwd(const struct tecore_seq_exec *x);
tecore_result_t te_attn_q_fwd(const struct tecore_seq_exec *x);
tecore_result_t te_attn_q_ws(const tecore_seq_t *s, size_t first, size_t *bytes, void *ctx);

/* ---- ops_recompute.c / ops_saved.c: activation recomputation ------------------------ */
/* 1 when a group of pass dir of ops [first, first + count) would cross a
 * unit's edge where the plan may not. */
int te_rc_splits(const tecore_seq_t *s, tecore_seq_dir_t dir, size_t first, size_t count);
/* 1 when op c's forward, run again in the backward inside its unit, reads
 * boundary b's storage written outside that unit (by op b - 1): the
 * backward then reads it (tecore_seq_get_saved's read_back). */
int te_rc_reads(const tecore_seq_t *s, size_t b, size_t c);
/* After the plan: the units' saved tensors laid over the pool, last[u]
 * the last operation reading unit u's (te_rc_layout, ops_saved.c), then
 * the units' forward groups and triggers from last (te_rc_plan). */
tecore_result_t te_rc_layout(tecore_seq_t *s, size_t *last_reader);
void te_rc_plan(tecore_seq_t *s, const size_t *last);
void te_rc_free(tecore_seq_t *s);

/* ---- ops_plan.c --------------------------------------------------------------------- */
/* Plans both passes, records what the forward groups leave at the
 * boundaries, and lays the shared activation gradients (te_bnd.gshared)
 * out in the arena by the backward plan's lifetimes. */
tecore_result_t te_plan_build(tecore_seq_t *s);
void te_plan_free(struct te_plan *p);

/* ---- ops_fusions.c: built-in patterns ----------------------------------------------- */
extern const struct te_fusion te_builtin_fusions[];
extern const size_t te_builtin_fusion_count;

/* ---- ops_basic.c / ops_linear.c: what the executors share ------------------------------ */

/* The FP8 copy of boundary b (activation role), both copies as present. */
tecore_result_t te_bnd_f8_tensor(const tecore_seq_t *s, size_t b, struct tecore_tensor *t);
/* Does Linear op's backward put its weight's columnwise FP8 copy in
 * dy8_col (free then: a gradient larger than it, ops_linear.c's
 * linear_bwd_split, keeps both its copies in dy8_row), not in w8_col? */
static inline int te_w8_in_dy8(const tecore_seq_t *s, size_t op) {
  const struct te_op *o = &s->ops[op];
  return o->in_rows * o->out_cols > s->dy8_col_elems && o->plen[0] <= s->dy8_col_elems;
}
/* Does it put it in the caller's columnwise gradient copy instead (the
 * last Linear with TECORE_SEQ_GRAD_FP8_GIVEN, one copy at a time: that
 * copy is dead once the weight gradient was queued, and it holds the
 * weight)? */
static inline int te_w8_in_given(const tecore_seq_t *s, size_t op) {
  const struct te_op *o = &s->ops[op];
  return s->grad8_given && op + 1 == s->nops && o->in_rows * o->out_cols > s->dy8_col_elems &&
         o->plen[0] <= o->in_rows * o->out_cols;
}
/* Is g a parameter gradient marked to be overwritten (tecore_seq_zero_grad)?
 * Clears the mark: the caller writes g now, a store or a GEMM with beta 0
 * instead of adding.  Decided when the work is queued, so a captured step
 * (zero_grad, forward, backward) replays the same choices. */
int te_grad_take_fresh(tecore_seq_t *s, tecore_devptr_t g);
/* Gives back a mark te_grad_take_fresh took (it returned 1) when the
 * writer it was taken for did not write after all. */
void te_grad_put_fresh(tecore_seq_t *s, tecore_devptr_t g);
/* The end of a backward: fills the gradients whose mark no writer took. */
tecore_result_t te_grad_fill_fresh(tecore_seq_t *s, tecore_stream_t stream);
/* The start of a backward: marks made in a capture that is not this
 * stream's are filled (zeros, as a fill in zero_grad would have left). */
tecore_result_t te_grad_fresh_check(tecore_seq_t *s, tecore_stream_t stream);
/* F32 dst[i] += src[i] (src of dtype dt), n elements; a marked parameter
 * gradient dst gets src (te_grad_take_fresh). */
tecore_result_t te_accum_f32(tecore_seq_t *s, tecore_devptr_t dst, tecore_devptr_t src,
                             tecore_dtype_t dt, size_t n, tecore_stream_t stream);
/* An F32 parameter gradient a kernel writes: grad itself when marked to be
 * overwritten (the mark taken), else tmp; then te_grad_add adds tmp. */
tecore_devptr_t te_grad_out(tecore_seq_t *s, tecore_devptr_t grad, tecore_devptr_t tmp);
tecore_result_t te_grad_add(tecore_devptr_t grad, tecore_devptr_t out, size_t n,
                            tecore_stream_t stream);
/* Converts n elements between float types (through tecore_unscale_multi with scale 1). */
tecore_result_t te_cast(tecore_seq_t *s, tecore_devptr_t dst, tecore_dtype_t ddt,
                        tecore_devptr_t src, tecore_dtype_t sdt, size_t n,
                        tecore_stream_t stream);
/* y = x + bias (bias broadcast along rows), y may be x. */
tecore_result_t te_bias_add(tecore_seq_t *s, const struct tecore_tensor *x,
                            const struct tecore_tensor *y, tecore_devptr_t bias,
                            tecore_stream_t stream);
/* gradF32 += column sums of dy. */
tecore_result_t te_bias_grad(tecore_seq_t *s, const struct tecore_tensor *dy,
                             tecore_devptr_t grad, tecore_stream_t stream);

/* The GEMM type the bias / aux of a Linear's GEMM must have. */
tecore_dtype_t te_linear_companion(const tecore_seq_t *s);
/* Whether s takes GELU epilogues (its flags, TECORE_OPS_GELU_EPILOGUE):
 * linear+gelu and TECORE_FUSION_GELU_EPILOGUE patterns (ops_fusions.c). */
int te_gelu_epilogue(const tecore_seq_t *s);
/* An inference sequence (TECORE_SEQ_INFERENCE, te/ops.h): forward only,
 * FP8 weights cached, activations quantized rowwise only. */
static inline int te_seq_infer(const tecore_seq_t *s) {
  return (s->cfg.flags & TECORE_SEQ_INFERENCE) != 0;
}

/* The dtype of parameter p of op o: the sequence's, except a Linear's
 * weight under TECORE_SEQ_F32_WEIGHTS (F32 in a 16-bit sequence). */
static inline tecore_dtype_t te_param_dtype(const tecore_seq_t *s, const struct te_op *o,
                                            size_t p) {
  if (p == 0 && (o->fp8 & TE_KIND_GEMM) && (s->cfg.flags & TECORE_SEQ_F32_WEIGHTS))
    return TECORE_DTYPE_F32;
  return s->cfg.dtype;
}
/* The dtype of parameter p's gradient: F32, except a Linear's weight
 * under TECORE_SEQ_BF16_WGRAD (BF16: the wgrad GEMM's output). */
static inline tecore_dtype_t te_grad_dtype(const tecore_seq_t *s, const struct te_op *o,
                                           size_t p) {
  if (p == 0 && (o->fp8 & TE_KIND_GEMM) && (s->cfg.flags & TECORE_SEQ_BF16_WGRAD))
    return TECORE_DTYPE_BF16;
  return TECORE_DTYPE_F32;
}
/* ops_gregion.c (tecore_seq_set_grad_region): build opens the caller's
 * region (one alloc for every parameter gradient, zeroed on stream;
 * nothing when none is set), init_params takes each gradient from it in operation order (or
 * from te_seq_alloc without a region), unbuild and destroy close it (the
 * caller's release). */
tecore_result_t te_gregion_open(tecore_seq_t *s, tecore_stream_t stream);
tecore_result_t te_gregion_take(tecore_seq_t *s, const struct te_op *o, size_t p,
                                tecore_devptr_t *g);
tecore_result_t te_gregion_close(tecore_seq_t *s);
/* Storage for a saved tensor (bytes into *field): the sequence's own, or
 * TE_SAVED_PENDING under TECORE_SEQ_DEFER_SAVED (te_saved_settle gives
 * the ones the backward reads their own after planning). */
tecore_result_t te_saved_alloc(tecore_seq_t *s, size_t bytes, tecore_devptr_t *field);
/* TECORE_SEQ_DEFER_SAVED, after planning: the pending saved tensors the
 * backward reads get storage of their own; *pending (may be NULL) counts
 * the ones left to the caller. */
tecore_result_t te_saved_settle(tecore_seq_t *s, size_t *pending);
/* Does the sequence's recipe scale by blocks (TECORE_RECIPE_BLOCK: 1x128
 * activations and gradients, 128x128 weights)?  Then no FP8 copy is the
 * byte transpose of another (a 1x128 block of the transpose covers other
 * elements), so the columnwise copies are quantized from the high-
 * precision tensors, and the per-tensor fusions (norm+quantize, dact+
 * cast_transpose, rope/attention+quantize) are not planned. */
static inline int te_seq_block(const tecore_seq_t *s) {
  return s->fp8 && s->recipe.kind == TECORE_RECIPE_BLOCK;
}
/* Does op i (a Linear) run its GEMMs in FP8?  The sequence has a recipe
 * and the op is not one left in the sequence's dtype (te_op.hp). */
static inline int te_op_fp8(const tecore_seq_t *s, size_t i) {
  return s->fp8 && (s->ops[i].fp8 & TE_KIND_GEMM) && !s->ops[i].hp;
}
/* Does op i (a Linear) cast its F32 weight (TECORE_SEQ_F32_WEIGHTS) to
 * w16, in the sequence's dtype, for 16-bit GEMMs?  Those not in FP8. */
static inline int te_w16_cast(const tecore_seq_t *s, size_t i) {
  return (s->ops[i].fp8 & TE_KIND_GEMM) && s->cfg.dtype != TECORE_DTYPE_F32 &&
         (s->cfg.flags & TECORE_SEQ_F32_WEIGHTS) && !te_op_fp8(s, i);
}

struct te_lin_fwd {
  size_t op;                        /* the Linear */
  const struct tecore_tensor *x;    /* its input (act) */
  const struct tecore_tensor *y;    /* the GEMM's output */
  tecore_devptr_t bias;             /* the bias to add (Linear's or a Bias op's), or 0 */
  const struct tecore_tensor *aux;  /* GELU epilogue: the pre-activation to write; or NULL */
  int aux_dead;                     /* with aux: nothing reads it (inference): the GELU
                                       epilogue without aux, where the GEMM library has it */
  const struct tecore_tensor *C;    /* residual to add (beta = 1), or NULL */
  tecore_devptr_t noop_flag;
  tecore_stream_t stream;
};
tecore_result_t te_linear_fwd(tecore_seq_t *s, const struct te_lin_fwd *a);

struct te_lin_bwd {
  size_t op;
  const struct tecore_tensor *x;    /* the forward's input (act) */
  const struct tecore_tensor *dy;   /* gradient of the Linear's output (unless dy8_ready) */
  int dy8_ready;                    /* the FP8 gradient copies are already in the scratch */
  tecore_devptr_t dy8_col_make;     /* nonzero: the rowwise FP8 gradient is in dy8_row (the
                                       caller's, tecore_seq_grad_fp8), the columnwise copy is
                                       made here by byte transposition (no bias, no aux) */
  tecore_devptr_t dy8_row_given;    /* with dy8_col_make: the rowwise codes are here, not in
                                       dy8_row (TECORE_SEQ_GRAD_FP8_GIVEN) */
  tecore_devptr_t bias_grad;        /* F32 gradient to add dbias into, or 0 */
  const struct tecore_tensor *dx;   /* dgrad output */
  const struct tecore_tensor *C;    /* added into dx (beta = 1), or NULL */
  const struct tecore_tensor *aux;  /* DGELU epilogue on dgrad: GELU's input; or NULL */
  int aux_daux;                     /* with aux: it holds gelu' instead (te_op.gelu_daux) */
  tecore_devptr_t dgelu_bias_grad;  /* with aux: F32 gradient of the bias before GELU, or 0 */
  tecore_stream_t stream;
};
tecore_result_t te_linear_bwd(tecore_seq_t *s, const struct te_lin_bwd *a);

/* tecore_seq_grad_fp8's tensor, or why not (fn names the caller). */
tecore_result_t te_seq_grad_fp8(const tecore_seq_t *s, struct tecore_tensor *t, const char *fn);
/* Whether the plan lets the last Linear take an FP8 gradient (the checks
 * of te_seq_grad_fp8 but the buffers'); the reason in the error if not. */
tecore_result_t te_seq_grad8_plan_ok(const tecore_seq_t *s, const char *fn);

/* TECORE_OPS_FUSION_OFF (ops_off.c): does it name `name` (whole names
 * only)?  The list itself, and its next name at *p (blanks around it
 * dropped; its length in *len, 0 for an empty item; *p moved past it;
 * NULL at the end). */
int te_fusion_named_off(const char *name);
const char *te_fusion_off_list(void);
const char *te_fusion_off_next(const char **p, size_t *len);

/* Build: the bytes of column-sum scratch (s->cws) the sequence's Linears
 * need for their bias gradients (TECORE_OPS_BGRAD_EPILOGUE); 0: none. */
size_t te_linear_cws_bytes(const tecore_seq_t *s);
/* An activation op's backward, dx = dy * act'(x); when the op before it
 * is a biased 16-bit Linear whose bias gradient is taken by column sums,
 * with those sums made on the way (te_act_bwd_colsum), left for that
 * Linear's backward, which runs next. */
tecore_result_t te_linear_act_bwd(tecore_seq_t *s, size_t act_op, tecore_activation_t act,
                                  const struct tecore_tensor *dy, const struct tecore_tensor *x,
                                  const struct tecore_tensor *dx, tecore_stream_t stream);

/* A norm operation's backward (its executor fills c; `first`: its group's
 * first op, whose input gradient is c->dx); when the op before that
 * boundary, past AddExtraInput operations (which pass the gradient
 * through), is a biased 16-bit Linear whose bias gradient is taken by
 * column sums, the norm kernel makes those sums of dx on the way
 * (TECORE_OPS_NORM_COLSUM), left for that Linear's backward. */
struct te_norm_bwd_call;
tecore_result_t te_linear_norm_bwd(tecore_seq_t *s, size_t first, struct te_norm_bwd_call *c,
                                   tecore_stream_t stream);

/* The weight-gradient GEMM that te_linear_bwd recorded in s->pend (on
 * stream), or nothing when none is pending. */
tecore_result_t te_linear_wgrad_pending(tecore_seq_t *s, tecore_stream_t stream);

/* ---- ops_overlap.c -------------------------------------------------------------------- */
/* Build: decides whether the sequence overlaps (tunable, config, a Linear
 * before an overlapping kind) and makes the side stream and events. */
tecore_result_t te_overlap_setup(tecore_seq_t *s);
/* Destroy / unbuild: releases them. */
void te_overlap_release(tecore_seq_t *s);
/* Plan: marks the backward groups (te_group.grad_dead, .overlap). */
void te_overlap_plan(tecore_seq_t *s);

/* An FP8 tensor descriptor of the gradient scratch for Linear lin. */
tecore_result_t te_dy8_tensor(const tecore_seq_t *s, size_t op, struct tecore_tensor *t);

/* A 1-D tensor [n] (parameters, reduced vectors). */
void te_vec(struct tecore_tensor *t, tecore_dtype_t dt, size_t n, tecore_devptr_t p);
/* The activation function of an activation operation (its kind's ctx). */
static inline tecore_activation_t te_op_act(const struct te_op *o) {
  return (tecore_activation_t)(uintptr_t)o->def.ctx;
}

#endif
