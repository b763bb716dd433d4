/* SPDX-License-Identifier: Apache-2.0 */
/* te/ops.h -- the operation fuser: a sequence of basic operations (Linear,
 * Bias, activations, norms, Quantize, ConstantScale, residual fork and add,
 * Identity/Reshape, RoPE and attention over packed sequences of tokens,
 * and communication slots that upper layers fill) run
 * forward and backward, with fusions chosen separately for each direction
 * from a registry of patterns.
 *
 * Shapes.  A sequence works on 2-D activations [rows][features] (the 2-D
 * view of te/tensor.h): rows are the tokens of one microbatch, fixed when
 * the sequence is created, features change from operation to operation
 * (Linear: out_features; gated activations: half; Reshape: any divisor of
 * rows * features).  Activations, their gradients and the parameters have
 * the sequence's dtype (F32, F16 or BF16); parameter gradients are F32.
 *
 * Life cycle.
 *   tecore_seq_create        an empty sequence (host memory only)
 *   tecore_seq_add           appends operations, in forward order
 *   tecore_seq_set_recipe    FP8 recipe (any time; NULL: no FP8)
 *   tecore_seq_build         allocates every buffer (parameters, their
 *                            gradients, saved activations, FP8 copies and
 *                            scaling state, scratch), initializes the
 *                            parameters from the seed, plans the fusions
 *   tecore_seq_forward / tecore_seq_backward, per microbatch
 *   tecore_seq_update_scales after a step's last backward (delayed FP8)
 *   tecore_seq_zero_grad     before the next step's first backward
 *   tecore_seq_destroy
 * Forward and backward only queue work on the stream they are given (no
 * allocation, no host synchronization), so both can be captured into
 * graphs (libtegraph's graphed callables); a graph bakes in the addresses
 * and the fusion plan, so capture again after tecore_seq_set_recipe.
 *
 * Fusion.  The forward and the backward pass are each covered by groups of
 * consecutive operations; a group is one operation run by itself or a
 * fusion pattern that matched there.  The two passes are planned
 * independently, so the groups differ: e.g. RMSNorm -> Linear -> GELU ->
 * Linear runs forward as rmsnorm+quantize | linear+bias+gelu (GEMM
 * epilogue) | linear+bias+add, and backward (FP8) as rmsnorm_bwd_add |
 * dgelu+dbias+cast_transpose | linear.  Plans are recomputed when the
 * recipe changes.  tecore_seq_describe and tecore_seq_groups say what was
 * chosen.  TECORE_SEQ_NO_FUSION (or TECORE_OPS_FUSION=0) runs every operation
 * by itself: the reference for the fused plan.
 *
 * Gradients.  tecore_seq_backward ADDS each parameter's gradient into its
 * F32 gradient buffer, so the gradients of several microbatches accumulate
 * until tecore_seq_zero_grad clears them.  The input gradient (dx) and the
 * activations' gradients are written, not accumulated.  The buffers are
 * allocated once by tecore_seq_build and never replaced: an optimizer or a
 * captured graph may hold their addresses for the sequence's lifetime
 * (tecore_seq_params).
 *
 * Memory.  An activation's gradient lives only from the backward group
 * that writes it to the group that reads it, so the backward plan shares
 * buffers between gradients whose lives do not overlap (in a stack of
 * blocks, one block's set serves them all).  A residual slot's gradient
 * lives until its maker's backward; only each slot's latest use keeps a
 * gradient of its own (tecore_seq_extra reads it after the backward).  A new plan (a recipe change) may lay the shared buffers out
 * anew; the old ones stay allocated until tecore_seq_destroy, so a graph
 * captured before still replays on memory that exists.
 * TECORE_SEQ_NO_GRAD_SHARING gives every gradient a buffer of its own.
 *
 * Ownership.  The sequence owns every buffer it allocates and frees them in
 * tecore_seq_destroy (parameter gradients in a region of the caller's:
 * tecore_seq_set_grad_region).  The input and output tensors of forward and the
 * gradients of backward are the caller's; forward keeps a reference to its
 * input (it is the first Linear's saved activation, or a residual), so the
 * input must stay unchanged until the backward of that microbatch ran.
 * Aliasing: forward's out shares no byte with in; backward's dx none with
 * dy, nor with the last forward's input (that backward still reads it).
 * Otherwise TECORE_ERR_INVALID names both, and nothing is queued.
 *
 * Overlap.  When a Linear's backward is followed (in backward order) by
 * an operation whose kind says its backward may overlap
 * (TECORE_OP_BACKWARD_OVERLAP: libtecomm's sums, tp_copy's and
 * allreduce's), the backward runs the Linear's dgrad GEMM, then forks a
 * side stream of the highest priority (an event recorded on the caller's
 * stream), queues that operation's backward there, queues the Linear's
 * weight-gradient GEMM on the caller's stream, and joins the side stream
 * back (an event) before the next group: the collective runs while the
 * wgrad GEMM does, and is scheduled before the GEMM takes every SM.  The
 * fork and join are events, so a capture of the pass records both
 * streams' work in one graph.  The gradients those operations touch get
 * buffers of their own (not shared with the Linear's), so the results
 * are the same bits as without overlap.  Forward, a Linear alone followed
 * by a pattern that works on row blocks (TECORE_FUSION_ROWS: libtecomm's
 * allreduce + residual add + RMSNorm) runs its GEMM in
 * TECORE_OPS_FWD_CHUNKS blocks of rows, each block's pattern on the side
 * stream while the next block's GEMM runs (when each block holds at least
 * TECORE_OPS_FWD_CHUNK_MIN_KB of the GEMM's output: below that the calls'
 * latency costs more than the overlap gains).  TECORE_OPS_OVERLAP=0 or
 * TECORE_SEQ_NO_OVERLAP runs everything on the caller's stream.
 *
 * Objects are not locked: one thread at a time per sequence.  The
 * registration tables are locked. */
#ifndef TE_OPS_H
#define TE_OPS_H

#include <stddef.h>
#include <stdint.h>
#include <te/result.h>
#include <te/dtype.h>
#include <te/device.h>
#include <te/tensor.h>
#include <te/recipe.h>
#include <te/deprecated.h>
#include <te/rope.h>
#include <te/attention.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tecore_seq tecore_seq_t;

/* Operation kinds.  Kinds below TECORE_OP_BUILTIN_COUNT_ are libtecore's,
 * each defined by a struct tecore_op_kind_def as registered kinds are;
 * the communication kinds have no implementation until an upper layer
 * registers one (tecore_ops_register_kind); TECORE_OP_USER_FIRST ..
 * TECORE_OP_KIND_MAX - 1 are free for new kinds. */
typedef enum tecore_op_kind {
  TECORE_OP_IDENTITY = 0,          /* y = x */
  TECORE_OP_RESHAPE = 1,           /* y = x viewed as [rows*features/f][f] */
  TECORE_OP_LINEAR = 2,            /* y = x W^T (+ b); W [out][in], b [out] */
  TECORE_OP_BIAS = 3,              /* y = x + b, b [features] */
  TECORE_OP_GELU = 4,              /* te/activation.h's functions */
  TECORE_OP_RELU = 5,
  TECORE_OP_SILU = 6,
  TECORE_OP_QGELU = 7,
  TECORE_OP_SWIGLU = 8,            /* gated: [rows][2f] -> [rows][f] */
  TECORE_OP_GEGLU = 9,
  TECORE_OP_REGLU = 10,
  TECORE_OP_LAYERNORM = 11,        /* gamma, beta [features] */
  TECORE_OP_RMSNORM = 12,          /* gamma [features] */
  TECORE_OP_QUANTIZE = 13,         /* y = x, plus an FP8 copy of y (FP8 recipe) */
  TECORE_OP_CONSTANT_SCALE = 14,   /* y = scale * x */
  TECORE_OP_MAKE_EXTRA_OUTPUT = 15,/* y = x, and x goes to residual slot `slot` */
  TECORE_OP_ADD_EXTRA_INPUT = 16,  /* y = x + slot `slot` */
  TECORE_OP_ALLREDUCE = 17,        /* registered by libtecomm */
  TECORE_OP_REDUCE_SCATTER = 18,   /* registered by libtecomm */
  TECORE_OP_ALLGATHER = 19,        /* registered by libtecomm */
  /* the tensor-parallel pair (registered by libtecomm, te/comm.h): */
  TECORE_OP_TP_COPY = 20,          /* y = x; backward: allreduce of dy */
  TECORE_OP_TP_REDUCE = 21,        /* y = allreduce of x; backward: dx = dy */
  /* the attention block's own (ctx: the structs below): */
  TECORE_OP_ROPE = 22,             /* packed QKV -> packed QKV, Q and K rotated */
  TECORE_OP_ATTENTION = 23,        /* packed QKV -> O [rows][heads * head_dim] */
  TECORE_OP_BUILTIN_COUNT_ = 24,
  TECORE_OP_USER_FIRST = 64,
  TECORE_OP_KIND_MAX = 128
} tecore_op_kind_t;

/* ---- sequences of tokens: RoPE and attention --------------------------------
 * Rows are tokens.  ROPE and ATTENTION take a packed QKV activation, as one
 * Linear(features -> (heads + 2 kv_heads) * head_dim) writes it: each row
 * holds the token's heads query heads, then kv_heads key heads, then
 * kv_heads value heads, head_dim elements each.  Their parameters come
 * through desc.ctx, a struct the caller fills and tecore_seq_add copies
 * (the struct need not outlive the call).
 *
 * The sequence structure.  cu_seqlens 0: the rows are batch sequences of
 * max_seqlen tokens each, one after the other (rows = batch * max_seqlen).
 * Otherwise a device int32 [batch + 1] of prefix sums of the lengths (0
 * first, each length at most max_seqlen, the last value at most rows),
 * the caller's, which every pass reads where it lies: it is a keyword
 * input of the pass, rewritten before each forward (the backward reads
 * what the forward did), and a graph captured once replays with the
 * values it finds (libtegraph's callables of a sequence).  Rows past the
 * last sequence are padding: attention writes zeros there (its output and
 * the packed gradient of its input), RoPE rotates them as if they
 * continued the last sequence, so they stay finite and add nothing to a
 * Linear's weight gradient when their dy rows are zero.  The two kinds
 * read their own struct's cu_seqlens: give both the same array. */
struct tecore_op_rope_args {
  int heads, kv_heads, head_dim; /* heads % kv_heads == 0; head_dim even */
  int rotary_dim;                /* even, <= head_dim; 0: head_dim */
  float theta;                   /* the base; 0: 10000 */
  int style;                     /* tecore_rope_style_t (te/rope.h) */
  tecore_devptr_t cu_seqlens;    /* int32 [batch + 1], or 0 (above) */
  size_t batch, max_seqlen;
};
struct tecore_op_attention_args {
  int heads, kv_heads, head_dim; /* heads % kv_heads == 0; head_dim a multiple of 8, <= 256 */
  float scale;                   /* softmax scale; 0: 1 / sqrt(head_dim) */
  unsigned flags;                /* TECORE_ATTN_CAUSAL, TECORE_ATTN_WINDOW (te/attention.h) */
  size_t window_left;            /* with TECORE_ATTN_WINDOW */
  tecore_devptr_t cu_seqlens;    /* int32 [batch + 1], or 0 (above) */
  size_t batch, max_seqlen;
};

/* Residual slots of one sequence: 0 .. TECORE_SEQ_MAX_SLOTS - 1 open at a
 * time; a slot made and added is free to be made again (a deep stack of
 * blocks can use slot 0 in every block). */
#define TECORE_SEQ_MAX_SLOTS 16

/* One operation, as tecore_seq_add takes it.  Zero the struct, set kind
 * and what the kind reads:
 *   LINEAR            features (out_features, >= 1), bias (0 or 1)
 *   RESHAPE           features (the new last dimension; divides
 *                     rows * features of the input)
 *   LAYERNORM/RMSNORM epsilon (> 0), norm_flags (TECORE_NORM_*, te/norm.h)
 *   CONSTANT_SCALE    scale (finite)
 *   MAKE_EXTRA_OUTPUT slot: the residual fork; a slot is made, then added
 *   ADD_EXTRA_INPUT   once (with one shape), and may then be made again.
 *                     A slot added but never made is an extra input the
 *                     caller writes; one made but never added is an extra
 *                     output the caller reads (tecore_seq_extra).
 *   ROPE              ctx: a struct tecore_op_rope_args; input and output
 *                     [rows][(heads + 2 kv_heads) head_dim]: Q and K
 *                     rotated (te/rope.h, positions from the sequence
 *                     structure), V copied; backward rotates dQ and dK
 *                     back in place, dV passes through
 *   ATTENTION         ctx: a struct tecore_op_attention_args; input
 *                     [rows][(heads + 2 kv_heads) head_dim], output
 *                     [rows][heads head_dim] (te/attention.h); backward
 *                     reads its input, its output and the softmax
 *                     statistics it saved, writes the packed dQKV.  F32
 *                     sequences run it on bf16 copies (kept for the
 *                     backward), F16 and BF16 ones on their tensors.
 *                     FP8: a BF16/F16 TECORE_SEQ_INFERENCE sequence under
 *                     a delayed recipe, ATTENTION right after a ROPE of
 *                     the same heads, plans rope+quantize (RoPE writes
 *                     E4M3 Q, K and V, tecore_rope_fwd_fp8, with delayed
 *                     scaling state of their own: not in
 *                     tecore_seq_fp8_state, whose layout stays the
 *                     training twin's; tecore_seq_update_scales updates
 *                     it from the inference forwards' amaxes) and
 *                     attention+quantize (attention reads them and writes
 *                     O as the next Linear's FP8 input at its scale, its
 *                     amax counted; that Linear quantizes nothing), or
 *                     attention_fp8 (O in the dtype) when no FP8 Linear
 *                     follows.  Training sequences keep RoPE and attention
 *                     in the dtype (attention's backward has no FP8 path
 *                     and reads Q, K, V and O); so do current scaling,
 *                     TECORE_SEQ_NO_FUSION and a backend refusing E4M3
 *   registered kinds  the fields their definition lists
 *                     (tecore_op_kind_def.fields), ctx among them
 * Fields a kind does not read must be 0. */
struct tecore_op_desc {
  int kind;             /* tecore_op_kind_t or a registered kind */
  size_t features;
  int bias;
  float epsilon;
  unsigned norm_flags;
  float scale;
  int slot;
  void *ctx;
};

/* tecore_seq_config.flags */
#define TECORE_SEQ_NO_FUSION 0x1u   /* every operation runs by itself */
#define TECORE_SEQ_NO_GRAD_SHARING 0x2u /* each activation gradient in a buffer of its own */
#define TECORE_SEQ_NO_OVERLAP 0x4u  /* no backward collective on the side stream (below) */
#define TECORE_SEQ_INFERENCE 0x8u   /* forward only, FP8 weights cached (below) */
#define TECORE_SEQ_F32_WEIGHTS 0x10u /* Linear weights kept in F32 (below) */
#define TECORE_SEQ_DEFER_SAVED 0x20u /* no storage for saved tensors the backward never
                                        reads: the caller's (tecore_seq_set_saved) */
#define TECORE_SEQ_GRAD_FP8_GIVEN 0x40u /* the last Linear's FP8 gradient copies in the
                                           caller's memory (tecore_seq_grad_fp8) */
#define TECORE_SEQ_BF16_WGRAD 0x80u /* Linear weight gradients in BF16 (below) */
#define TECORE_SEQ_NO_GELU_EPILOGUE 0x100u /* GELU apart from the GEMMs (below) */

/* GELU apart.  A sequence created with TECORE_SEQ_NO_GELU_EPILOGUE plans a
 * Linear followed by GELU without the GEMM's GELU epilogue: the GELU and,
 * in the backward, its gradient run as kernels of their own (the GEMM
 * keeps a bias epilogue), as under TECORE_OPS_GELU_EPILOGUE=0.  For a GEMM
 * library whose GELU epilogues are slower than the separate kernels (a
 * caller that knows its device sets it per sequence, not the process's
 * environment). */

/* BF16 weight gradients.  In a BF16 or F16 sequence created with
 * TECORE_SEQ_BF16_WGRAD every Linear's weight gradient is stored in BF16,
 * the weight-gradient GEMM's own output (rounded from its F32
 * accumulators), as PyTorch's autocast gives the gradient of a BF16
 * weight copy before widening it: half the bytes to store, to write and
 * for an optimizer to read (tecore_optim_tensor.grad_dtype BF16).  A
 * backward adds into it in BF16, so gradient accumulation over several
 * microbatches rounds once per microbatch: F32 gradients (no flag) suit
 * that better.  Biases, norm gains and registered kinds keep F32
 * gradients.  tecore_seq_params and tecore_seq_op give each gradient
 * tensor with its dtype.  Refused for an F32 sequence. */

/* F32 weights.  In a BF16 or F16 sequence created with
 * TECORE_SEQ_F32_WEIGHTS, every Linear's weight is stored in F32 (its
 * bias, the norms' gains and the activations keep the sequence's dtype):
 * tecore_seq_params and tecore_seq_op give it as an F32 tensor.  An
 * optimizer can then update the weight itself as its master copy, with
 * no 16-bit model copy beside it (a BF16 model's 2 bytes per weight).  A
 * Linear in FP8 quantizes the F32 weight directly (the scale and amax of
 * F32 values, no BF16 rounding in between); a Linear in the sequence's
 * dtype (no recipe, or one below TECORE_OPS_FP8_MIN_MNK) multiplies by a
 * 16-bit copy that each forward rounds from the F32 weight (nearest even)
 * and keeps for the backward, so that training saves nothing there.
 * Given the same weight values (a BF16 weight's values widened to F32),
 * the forward and backward give the same bits with and without the flag.
 * In an F32 sequence the flag changes nothing. */

/* Inference.  A sequence created with TECORE_SEQ_INFERENCE runs forward
 * only (tecore_seq_backward: TECORE_ERR_INVALID) and plans it for that:
 *   - the FP8 weight copies are quantized by the first forward after
 *     tecore_seq_build, after tecore_seq_set_recipe and after
 *     tecore_seq_weights_changed (and tecore_seq_update_scales, whose new
 *     weight scales they must follow), and by no other: later forwards
 *     queue no weight quantize at all (the state is kept on the host, per
 *     Linear), whatever noop_flag says;
 *   - activations are quantized rowwise only (no columnwise copy, no
 *     cast+transpose: that copy is for the weight gradient), and the
 *     weights too;
 *   - a Linear+GELU GEMM writes no pre-activation (te/gemm.h's GELU
 *     epilogues without aux; the aux one where the GEMM library lacks
 *     them);
 *   - under a delayed recipe, RoPE and attention run in E4M3 (ROPE and
 *     ATTENTION above: rope+quantize, attention+quantize);
 *   - with a recipe every Linear runs in FP8, whatever its size:
 *     TECORE_OPS_FP8_MIN_MNK does not apply (the per-step bookkeeping it
 *     weighs, the weights' quantize and the transposes, is gone);
 *   - no gradients are allocated (a third of a BF16 model's training
 *     memory, parameters' F32 gradients and activations' alike):
 *     tecore_seq_params, tecore_seq_op and tecore_seq_extra give gradient
 *     tensors with data 0, tecore_seq_zero_grad does nothing and
 *     tecore_seq_set_grad is refused.
 * A forward that would quantize the weights is refused during a stream
 * capture (TECORE_ERR_CAPTURE): the graph would bake the quantize in and
 * replay it every time.  Run one forward outside a capture first; graphs
 * captured after it read the cached copies where they lie, so after
 * tecore_seq_weights_changed one eager forward refreshes them for every
 * such graph.  The output of an inference forward has the same bits as a
 * training sequence's forward of the same operations, parameters and
 * FP8 scales (tecore_seq_fp8_state) run with the same kernels (the same
 * TECORE_OPS_FP8_MIN_MNK choices). */

struct tecore_seq_config {
  size_t rows;            /* tokens per microbatch (>= 1) */
  size_t features;        /* the input's last dimension (>= 1) */
  tecore_dtype_t dtype;   /* activations and parameters: F32, F16 or BF16 */
  uint64_t seed;          /* parameter initialization (tecore_seq_build) */
  unsigned flags;         /* TECORE_SEQ_* */
};

/* Creates an empty sequence (no device memory yet). */
tecore_result_t tecore_seq_create(const struct tecore_seq_config *cfg, tecore_seq_t **seq);
/* Frees the sequence and every buffer it allocated (the memory goes back
 * once the work queued before is done, as tecore_mem_free): no graph may
 * use them afterwards.  During a capture that forbids frees:
 * TECORE_ERR_CAPTURE, and the sequence is left as it was. */
tecore_result_t tecore_seq_destroy(tecore_seq_t *seq);
/* Marks the sequence as used by another object (hold 1), or no longer
 * (hold 0).  While held, tecore_seq_destroy fails with TECORE_ERR_INVALID
 * and a second hold is refused: libtegraph's tegraph_callable_from_seq
 * holds its sequence for the callable's life. */
tecore_result_t tecore_seq_hold(tecore_seq_t *seq, int hold);
/* Appends an operation (before tecore_seq_build); *index (may be NULL)
 * gets its position.  Checks the description and the shapes now; a
 * communication kind with no registered implementation returns
 * TECORE_ERR_NOT_SUPPORTED. */
tecore_result_t tecore_seq_add(tecore_seq_t *seq, const struct tecore_op_desc *desc,
                               size_t *index);
/* Sets the FP8 recipe (copied; NULL: no FP8, the GEMMs take 16-bit
 * operands).  Delayed and current per-tensor scaling and block scaling
 * are supported (MXFP8: TECORE_ERR_NOT_SUPPORTED), with E4M3 or HYBRID
 * formats.
 * After tecore_seq_build it recreates the scaling state on stream and
 * plans both passes again: no work of the sequence may be queued. */
tecore_result_t tecore_seq_set_recipe(tecore_seq_t *seq, const struct tecore_recipe *recipe,
                                      tecore_stream_t stream);
/* Allocates the buffers, fills the parameters (Linear: uniform in
 * +-1/sqrt(in_features) for weight and bias, from the seed; Bias, beta: 0;
 * gamma: 1, or 0 with TECORE_NORM_ZERO_CENTERED_GAMMA), zeroes the
 * gradients, plans the fusions.  Synchronous (returns when done). */
tecore_result_t tecore_seq_build(tecore_seq_t *seq, tecore_stream_t stream);

/* Runs the forward pass on stream: in [rows][features] (the sequence's
 * dtype), out [out_rows][out_features].  noop_flag: 0 or the device
 * address of an int32; when nonzero at run time the FP8 weight copies
 * quantized by an earlier forward are reused (later microbatches of a
 * step; te/fp8.h's no-op flag; libtegraph passes it as io->noop_flag).
 * An inference sequence ignores it (its weight copies are cached, see
 * "Inference" above). */
tecore_result_t tecore_seq_forward(tecore_seq_t *seq, const struct tecore_tensor *in,
                                   const struct tecore_tensor *out, tecore_devptr_t noop_flag,
                                   tecore_stream_t stream);
/* Runs the backward pass of the last forward on stream: dy has out's shape
 * and dtype; dx (NULL: not wanted) in's.  Parameter gradients are added
 * into their buffers.  An inference sequence has no backward:
 * TECORE_ERR_INVALID.  dy may instead be the FP8 tensor
 * tecore_seq_grad_fp8 gives, its rowwise codes written (in stream order)
 * by the caller's kernel: the last Linear then quantizes nothing, and
 * makes its columnwise copy as the byte transpose of those codes. */
tecore_result_t tecore_seq_backward(tecore_seq_t *seq, const struct tecore_tensor *dy,
                                    const struct tecore_tensor *dx, tecore_stream_t stream);

/* The FP8 gradient of the sequence's output, for a caller whose own kernel
 * computes that gradient and can write it quantized (tecore_xent_bwd with
 * args->dlogits: the cross-entropy's dlogits straight into the LM head's
 * FP8 gradient, a 16-bit [tokens][vocab] write and the Linear's
 * cast+transpose of it saved).  t receives the sequence's own buffer and
 * its gradient-quantizer state: dtype E5M2 (E4M3 under the E4M3 format),
 * [out_rows][out_features], rowwise data, scale, amax and scale_inv of
 * the recipe's per-tensor (delayed or current) scaling.  columnwise_data
 * is the sequence's scratch, or 0 where the gradient is larger than that
 * (an LM head): the caller then sets it to scratch of its own,
 * out_rows * out_features bytes, 16-byte aligned, that the backward
 * overwrites (the dead 16-bit logits serve).  The caller writes the
 * rowwise codes, then passes t as tecore_seq_backward's dy.
 * TECORE_ERR_NOT_SUPPORTED (nothing written) when the last operation is
 * not a built-in Linear without a bias running in FP8 in a backward group
 * of its own, under the block recipe (no transposable codes), for an
 * inference sequence, or when TECORE_OPS_FUSION_OFF names grad_fp8: the
 * caller then passes its 16-bit gradient.  Valid from tecore_seq_build
 * until the recipe changes; the buffer is scratch the backward reuses, so
 * write it right before each backward. */
tecore_result_t tecore_seq_grad_fp8(const tecore_seq_t *seq, struct tecore_tensor *t);
/* Inference sequences (TECORE_SEQ_INFERENCE): the parameters were
 * changed by the caller (e.g. copied in from a trained model), so the next
 * forward quantizes the FP8 weight copies again.  Host-side only: it
 * queues nothing, and may be called before the new values are written as
 * long as they are written (in stream order) before that forward.  A
 * training sequence needs no such call (its forward quantizes the weights
 * unless the noop flag says not to): TECORE_ERR_INVALID. */
tecore_result_t tecore_seq_weights_changed(tecore_seq_t *seq);
/* Zeroes every parameter gradient (and the gradients of extra outputs) on
 * stream. */
tecore_result_t tecore_seq_zero_grad(tecore_seq_t *seq, tecore_stream_t stream);
/* Delayed scaling: folds the amaxes recorded since the last update into
 * the histories and computes the next scales (tecore_delayed_update_multi
 * for activations, weights and gradients: one launch), on stream.  Call once per step,
 * after its last backward.  No-op for other recipes and without one.  An
 * inference sequence's next forward quantizes its weights again (their
 * scales changed). */
tecore_result_t tecore_seq_update_scales(tecore_seq_t *seq, tecore_stream_t stream);

/* The sequence's FP8 scaling state of role (activations: one entry per
 * FP8 copy of an activation; weights and gradients: one per Linear, in
 * operation order), as the delayed layout of te/recipe.h (current scaling
 * keeps its amax, scale and scale_inv entries there too, history 1).  The
 * state is the sequence's (do not free it); a sequence with no FP8 state
 * (no recipe, or every Linear left in its dtype) gives a zeroed *st
 * (count 0).  Two sequences of the same operations and recipe have the
 * same layout, so copying one's allocation (base, (3 + history_len) *
 * count floats) over the other's gives it the same scales: how a trained
 * model's inference twin (TECORE_SEQ_INFERENCE) gets its scales.  Valid
 * until the recipe changes. */
tecore_result_t tecore_seq_fp8_state(const tecore_seq_t *seq, tecore_fp8_role_t role,
                                     struct tecore_delayed_state *st);

/* ---- what was built and planned ------------------------------------------ */

typedef enum tecore_seq_dir {
  TECORE_SEQ_FORWARD = 0,
  TECORE_SEQ_BACKWARD = 1,
  /* pass hooks only: a recomputed unit's forward groups, run again inside
   * the backward pass (tecore_seq_set_recompute, tecore_seq_set_hooks) */
  TECORE_SEQ_RECOMPUTE = 2
} tecore_seq_dir_t;

/* One group of a pass: ops [first, first + count) run by `name` (a fusion
 * pattern's name, or the operation kind's name when it runs alone). */
struct tecore_seq_group {
  const char *name;
  size_t first, count;
};
/* Lists the groups of pass dir in forward order (backward runs them in
 * reverse): up to max in groups[], the total in *count.  Needs a built
 * sequence.  Names stay valid until the plan changes. */
tecore_result_t tecore_seq_groups(const tecore_seq_t *seq, tecore_seq_dir_t dir,
                                  struct tecore_seq_group *groups, size_t max, size_t *count);
/* Writes the plan of dir as one line of text, e.g.
 *   "forward: make_extra_output[0] | rmsnorm+quantize[1] | linear+bias+gelu[2-3]"
 * (a Linear an FP8 sequence runs in its dtype: "linear(bf16)[4]"; a
 * backward collective on the side stream, "Overlap": "tp_copy(side)[2]";
 * a forward GEMM in 4 row blocks, the pattern after it pipelined on the
 * side stream: "linear(x4)[5]"; an inference sequence: "forward (inference,
 * FP8 weights quantized once, rowwise only): ..." and "backward: none
 * (inference)")
 * into buf (len bytes, NUL-terminated, truncated to fit); *needed (may be
 * NULL) gets the length without the NUL.  buf may be NULL with len 0. */
tecore_result_t tecore_seq_describe(const tecore_seq_t *seq, tecore_seq_dir_t dir, char *buf,
                                    size_t len, size_t *needed);

/* A parameter and its gradient (both owned by the sequence). */
struct tecore_seq_param {
  size_t op;                     /* the operation that owns it */
  const char *name;              /* "weight", "bias", "gamma", "beta" */
  struct tecore_tensor value;    /* the sequence's dtype */
  struct tecore_tensor grad;     /* F32, same shape (an inference sequence: data 0) */
};
/* Lists the parameters in operation order: up to max in params[], the
 * total in *count.  Needs a built sequence. */
tecore_result_t tecore_seq_params(const tecore_seq_t *seq, struct tecore_seq_param *params,
                                  size_t max, size_t *count);

/* Gives parameter index (as tecore_seq_params lists it) the storage ptr:
 * device memory of the caller's, 16-byte aligned, at least the
 * parameter's bytes inside one allocation; the sequence frees its own.
 * The value is what lies at ptr when a pass reads it (nothing is copied):
 * a fully sharded data-parallel group (tecomm_dp_create, ZeRO-3) points
 * each layer's weights into a ring it all-gathers them into before the
 * layer's forward and backward.  Several parameters may share storage
 * when the caller orders their lives.  ptr 0: storage of the sequence's
 * own again, zeroed.  No work of the sequence may be queued or captured;
 * graphs captured before keep the old address.  tecore_seq_set_param(3). */
tecore_result_t tecore_seq_set_param(tecore_seq_t *seq, size_t index, tecore_devptr_t ptr);

/* Gives parameter index's gradient the storage ptr (its gradient dtype's
 * bytes, as tecore_seq_params gives it; device memory, 16-byte aligned,
 * inside one allocation); the sequence frees its own (a gradient in a
 * region, tecore_seq_set_grad_region, leaves its bytes there).  The
 * backward adds into what lies at ptr, as into its own storage:
 * tecore_seq_zero_grad zeroes it.  Several gradients may share storage
 * when the caller zeroes it between their writers and reads each in
 * between (a fully sharded data-parallel group reduce-scatters each
 * layer's gradients out of a ring of two layers as the backward writes
 * them: tecomm_dp_create, TECOMM_DP_GRAD_SHARDS).  ptr 0: storage of the
 * sequence's own again, zeroed.  No work of the sequence may be queued
 * or captured.  tecore_seq_set_param_grad(3). */
tecore_result_t tecore_seq_set_param_grad(tecore_seq_t *seq, size_t index, tecore_devptr_t ptr);

/* The parameters' gradients in memory of the caller's (a collective's
 * symmetric memory, so that it reduces them where they lie).  At build
 * the sequence lays every parameter gradient out in operation order, each
 * at a multiple of 256 bytes from the start, calls alloc once with the
 * total and places them there; destroy (or a failed build) calls release
 * with what alloc gave.  tecore_seq_set_grad_region(3). */
struct tecore_seq_grad_region {
  /* *base: at least bytes of device memory, 256-byte aligned */
  tecore_result_t (*alloc)(void *ctx, size_t bytes, tecore_devptr_t *base);
  tecore_result_t (*release)(void *ctx, tecore_devptr_t base);   /* NULL: none */
  void *ctx;
};
/* Before build, on a training sequence; the struct is copied; NULL: the
 * sequence's own allocations again. */
tecore_result_t tecore_seq_set_grad_region(tecore_seq_t *seq,
                                           const struct tecore_seq_grad_region *region);

/* What an operation is after tecore_seq_add (and, after build, its buffers). */
struct tecore_op_info {
  struct tecore_op_desc desc;
  const char *name;                    /* the kind's name */
  size_t in_rows, in_features, out_rows, out_features;
  size_t nparams;                      /* 0, 1 or 2 */
  struct tecore_tensor param[2];       /* after build: Linear weight, bias; Bias bias;
                                          norms gamma, beta */
  struct tecore_tensor grad[2];        /* F32 */
  struct tecore_tensor saved[2];       /* norms: rsigma, and mu (LayerNorm), F32 [rows] */
  /* after build, an operation with a slot role (MAKE_EXTRA_OUTPUT,
   * ADD_EXTRA_INPUT, ...): its use of the slot, value and gradient
   * [in_rows][in_features] of the sequence's dtype; else zeroed */
  struct tecore_tensor extra_value, extra_grad;
};
tecore_result_t tecore_seq_op(const tecore_seq_t *seq, size_t index, struct tecore_op_info *info);

/* The FP8 copy that the Linear at operation index reads as its input, for
 * a fusion pattern that writes it (TECORE_FUSION_WRITES_FP8 or
 * TECORE_FUSION_QUANTIZES_INPUT): E4M3,
 * [in_rows][in_features], its rowwise data and the recipe's scaling state
 * (scale, scale_inv, amax of the activation's slot; scaling delayed or
 * current; under the block recipe BLOCK_1X128 with scale_inv the blocks'
 * array [in_rows][cdiv(in_features,128)], no scale or amax);
 * columnwise_data is the sequence's (backward fills it).
 * TECORE_ERR_NOT_SUPPORTED when that Linear does not run in FP8: no
 * recipe, not built yet, or a high-precision plan for a small GEMM
 * (TECORE_OPS_FP8_MIN_MNK).  Valid from tecore_seq_build (pattern
 * predicates, which planning calls, may use it) until the recipe changes. */
tecore_result_t tecore_seq_fp8_input(const tecore_seq_t *seq, size_t index,
                                     struct tecore_tensor *t);

/* The FP8 weight of the Linear at index as a training forward writes it,
 * for a caller that writes the codes itself: the optimizer, which has the
 * updated F32 weight in hand (tecore_adam_step's model, model_scale,
 * model_scale_inv, model_amax), so that the next forward reads the
 * weight's 4 bytes an element no more.  t: E4M3 [out][in], rowwise data
 * (columnwise_data 0: the backward makes that copy), and the delayed
 * scaling state of the weight's slot (scale read; scale_inv written;
 * amax max-accumulated, folded by tecore_seq_update_scales as the
 * forward's own quantize would have it).  A forward quantizes the weights
 * only where its noop_flag is 0: after writing the codes, the caller
 * passes a nonzero noop_flag to every forward until the weights change
 * otherwise (a checkpoint loaded: a noop_flag of 0 once).  Write them
 * after tecore_seq_update_scales (the scale the next forward uses).
 * TECORE_ERR_NOT_SUPPORTED when the operation is no Linear running in FP8,
 * for an inference sequence (its copies are cached), a current or block
 * recipe (the scale follows from the weight itself), with
 * TECORE_OPS_W8_COL_KEEP, or when TECORE_OPS_FUSION_OFF names
 * weight_fp8.  Valid from tecore_seq_build until the recipe changes. */
tecore_result_t tecore_seq_fp8_weight(const tecore_seq_t *seq, size_t index,
                                      struct tecore_tensor *t);
/* given 1: no forward quantizes the weight of the Linear at index any
 * more, whatever its noop_flag: the caller writes its codes, scale_inv
 * and amax (tecore_seq_fp8_weight's t) before every forward, and the
 * weight's high-precision value is read by nothing in the passes (ZeRO-3
 * gathers the codes instead, te/comm_dp.h).  given 0: the forwards
 * quantize it again.  The same conditions and errors as
 * tecore_seq_fp8_weight; a new recipe ends it. */
tecore_result_t tecore_seq_set_fp8_weight_given(tecore_seq_t *seq, size_t index, int given);
/* While the weight of the Linear at index is given: its codes (out * in
 * bytes, rowwise, what the passes read) lie at ptr, storage of the
 * caller's (a ZeRO-3 ring slot the group gathers them into before each
 * pass), and the sequence's own copy is freed.  ptr 0: the sequence's
 * own again (its bytes undefined until written); given 0 and a new
 * recipe end it too.  TECORE_ERR_INVALID for a weight not given. */
tecore_result_t tecore_seq_set_fp8_weight_data(tecore_seq_t *seq, size_t index,
                                               tecore_devptr_t ptr);
/* The FP8 operands of the forward GEMM of the Linear at index, made on
 * stream as the Linear's own forward makes them, for a fusion pattern
 * that runs that GEMM itself (libtecomm's linear+reduce_scatter): *a its
 * input (rowwise data; columnwise_data 0 where the backward makes that
 * copy), quantized from x unless the group before wrote it or the
 * calling pattern writes it itself (TECORE_FUSION_QUANTIZES_INPUT): x is
 * then not read and may be NULL (that group may leave x unwritten); *w the
 * weight (rowwise), quantized unless noop_flag (the forward's) says so or
 * the caller gives the codes (tecore_seq_set_fp8_weight_given); both with
 * the recipe's scaling state.  Call once per forward, from the pattern's
 * executor.  TECORE_ERR_NOT_SUPPORTED when the operation is no Linear
 * running in FP8 (tecore_seq_fp8_input's conditions). */
tecore_result_t tecore_seq_linear_fp8_operands(tecore_seq_t *seq, size_t index,
                                               const struct tecore_tensor *x,
                                               tecore_devptr_t noop_flag, tecore_stream_t stream,
                                               struct tecore_tensor *a, struct tecore_tensor *w);

/* For a backward fusion pattern that runs the data-gradient GEMM of the
 * FP8 Linear at index itself, on codes of its output gradient that the
 * pattern writes (libtecomm's allgather+dgrad quantizes the gradient's
 * rows as they arrive): *dy8 the gradient's FP8 tensor as the Linear's own
 * backward fills it (E5M2 [out_rows][out_features], the rowwise data the
 * sequence's scratch, for the caller to write; the recipe's scale,
 * scale_inv and amax of the gradient's slot; no columnwise copy), and,
 * with w set, *w the weight's FP8 copy whose columnwise_data, made now on
 * stream, holds the transposed codes [in_features][out_features] the GEMM
 * dx = dy W multiplies (under w's scale_inv).  w NULL queues nothing.
 * Then tecore_seq_linear_wgrad.  TECORE_ERR_NOT_SUPPORTED when the
 * operation is no Linear running in FP8, for an inference sequence, under
 * current or block scaling (the codes are made before the whole gradient
 * is seen), or where the gradient's copies are not the sequence's scratch
 * (an LM head's). */
tecore_result_t tecore_seq_linear_fp8_dgrad_operands(tecore_seq_t *seq, size_t index,
                                                     tecore_stream_t stream,
                                                     struct tecore_tensor *dy8,
                                                     struct tecore_tensor *w);

/* The weight gradient of the Linear at index, dW += dy^T x, and its bias
 * gradient (the column sums of dy) when it has a bias, added on stream as
 * its own backward adds them (the same kernels and bits), for a backward
 * fusion pattern that runs the Linear's data-gradient GEMM itself
 * (libtecomm's allgather+dgrad, whose all-gather gives dy).  x
 * [in_rows][in_features] and dy [out_rows][out_features], 2-D, of the
 * sequence's dtype.  Where the Linear runs in FP8, the codes of dy are
 * those the caller wrote into tecore_seq_linear_fp8_dgrad_operands' dy8
 * (dy itself is read only for a bias's column sums; it may be NULL, and
 * then the bias's gradient is the caller's: tecore_seq_linear_bgrad) and
 * x is not read (the forward's FP8 copy is; it may be NULL).
 * TECORE_ERR_NOT_SUPPORTED unless the sequence is BF16 or F16 and built
 * and the operation a Linear (FP8: under
 * tecore_seq_linear_fp8_dgrad_operands' conditions).  Call once per
 * backward, from the pattern's executor. */
tecore_result_t tecore_seq_linear_wgrad(tecore_seq_t *seq, size_t index,
                                        const struct tecore_tensor *x,
                                        const struct tecore_tensor *dy, tecore_stream_t stream);
/* db (device, F32 [out_features]: column sums of the Linear's output
 * gradient the caller took, e.g. summed over ranks that each hold some
 * of its rows) added to the bias gradient of the Linear at index on
 * stream as its own backward adds its column sums (the first
 * contribution after tecore_seq_zero_grad overwrites).  For a pattern
 * that calls tecore_seq_linear_wgrad without dy.  TECORE_ERR_NOT_SUPPORTED
 * unless the operation is a Linear with a bias of a built training
 * sequence. */
tecore_result_t tecore_seq_linear_bgrad(tecore_seq_t *seq, size_t index, tecore_devptr_t db,
                                        tecore_stream_t stream);

/* The residual slot's value and gradient, [rows][features] of the
 * sequence's dtype.  An extra input (added, never made): write value
 * before forward; its gradient is written by backward.  An extra output
 * (made, never added): value after forward (it aliases the activation it
 * forks: the caller's input when it forks the input); write grad before
 * backward (zeroed by build and by tecore_seq_zero_grad): backward adds it.
 * A slot made and added inside the sequence: value and grad as of the last
 * forward and backward.  A slot used several times: its latest use.  Either
 * pointer may be NULL. */
tecore_result_t tecore_seq_extra(const tecore_seq_t *seq, int slot, struct tecore_tensor *value,
                                 struct tecore_tensor *grad);
/* The sequence's dtype (its activations' and boundaries', F32, F16 or
 * BF16: tecore_seq_config.dtype), whatever its weights' (an F32 weight
 * under TECORE_SEQ_F32_WEIGHTS). */
tecore_result_t tecore_seq_dtype(const tecore_seq_t *seq, tecore_dtype_t *dtype);
/* Device bytes the sequence holds (*param_bytes: parameters and their
 * gradients; *total_bytes: everything); either may be NULL. */
tecore_result_t tecore_seq_memory(const tecore_seq_t *seq, size_t *param_bytes,
                                  size_t *total_bytes);

/* ---- saved tensors and pass hooks (activation offload) -------------------
 * What a forward leaves for its backward, so that an upper layer
 * (libtegraph's te/offload.h) can move it off the device between the
 * passes: the activations at the boundaries between operations, their FP8
 * copies and F32 sequences' bf16 copies of a Linear's input.  The caller's
 * input and output (boundaries 0 and n), storage an earlier boundary's
 * alias shares, norms' statistics and the parameters are not listed. */

typedef enum tecore_seq_saved_part {
  TECORE_SEQ_SAVED_DATA = 0,     /* the activation, the sequence's dtype [rows][cols] */
  TECORE_SEQ_SAVED_FP8_ROW = 1,  /* its FP8 copy, rowwise, 1 byte [rows][cols] */
  TECORE_SEQ_SAVED_FP8_COL = 2,  /* its FP8 copy, columnwise, 1 byte [cols][rows] */
  TECORE_SEQ_SAVED_BF16 = 3      /* F32 sequences: Linear op's bf16 copy of its input */
} tecore_seq_saved_part_t;

struct tecore_seq_saved {
  size_t bnd;            /* the boundary (input of op bnd), or for BF16 the Linear's index */
  tecore_seq_saved_part_t part;
  size_t op_first;       /* the first operation whose forward writes it */
  size_t op_last;        /* the last operation that reads it (forward or backward) */
  tecore_dtype_t dtype;  /* the sequence's dtype, BF16, or an FP8 format's byte (U8) */
  size_t rows, cols;     /* as stored (FP8_COL: [cols][rows] of the boundary) */
  size_t bytes;
  tecore_devptr_t ptr;   /* where it is stored now */
  int external;          /* 1: storage given by tecore_seq_set_saved; TECORE_SEQ_SAVED_RECOMPUTED:
                            the recompute pool (tecore_seq_set_recompute) */
  int written;           /* 1: the current plan's forward writes it */
  int read_back;         /* 1: the current plan's backward may read what forward wrote */
};
/* Lists the saved tensors of a built sequence (in boundary order): up to
 * max in saved[] (may be NULL with max 0), the total in *count.  The list
 * follows the current plan: list again after tecore_seq_set_recipe. */
tecore_result_t tecore_seq_get_saved(const tecore_seq_t *seq, struct tecore_seq_saved *saved,
                                     size_t max, size_t *count);
#if TE_DEPRECATED_NAMES_VISIBLE
/* Deprecated former name of tecore_seq_get_saved (te/deprecated.h). */
tecore_result_t tecore_seq_saved(const tecore_seq_t *seq, struct tecore_seq_saved *saved,
                                 size_t max, size_t *count)
    TE_DEPRECATED("use tecore_seq_get_saved");
#endif
/* Gives the gradient of boundary bnd (the gradient of op bnd's input, the
 * output of op bnd - 1; 1 <= bnd < the number of operations) the storage
 * ptr: device memory of at least [rows][features] of the sequence's dtype,
 * 256-byte aligned, the caller's (e.g. symmetric memory a collective reads
 * where it lies).  A boundary whose gradient is a later one's (an
 * operation that aliases its gradient, te/ops.h) gives that one's.  ptr 0
 * gives it storage of the sequence's own again (allocated now).  Several
 * boundaries, of one sequence or several, may share storage when the
 * caller orders their lives: in a backward pass a gradient lives from the
 * group that writes it to the group that reads it.  No work of the
 * sequence may be queued or captured; graphs captured before keep the old
 * address. */
tecore_result_t tecore_seq_set_grad(tecore_seq_t *seq, size_t bnd, tecore_devptr_t ptr);

/* Gives saved tensor index (as listed) the storage ptr (device memory of
 * at least its bytes, 256-byte aligned, the caller's), and frees the
 * sequence's own; ptr 0 gives it storage of the sequence's own again
 * (allocated now).  Several tensors may share storage when the caller
 * orders their lives (that is how offload saves memory).  No work of the
 * sequence may be queued or captured; the plan's graphs captured before
 * keep the old address. */
tecore_result_t tecore_seq_set_saved(tecore_seq_t *seq, size_t index, tecore_devptr_t ptr);

/* Called around each group of each pass (first, count: the group's
 * operations) on the pass's stream, from tecore_seq_forward and
 * tecore_seq_backward; a failure fails the pass with the hook's error.
 * Hooks only queue work (the passes may be captured).  Under overlap
 * (above) an overlapped operation's (or row-block pattern's) hooks get
 * the side stream and are called between the before and after of the
 * Linear's group, whose after comes once its weight-gradient GEMM is
 * queued (forward: once the side stream is joined): the calls nest.
 * Recomputation (tecore_seq_set_recompute): within the backward pass, on
 * its stream, each forward group a unit runs again gets before and after
 * with dir TECORE_SEQ_RECOMPUTE, ahead of the backward group whose before
 * follows (not FORWARD: it is no forward pass; a hook with nothing to do
 * there returns; one that provides the operations' parameters, as ZeRO-3
 * does, sees their reads). */
struct tecore_seq_hooks {
  tecore_result_t (*before)(void *ctx, tecore_seq_t *seq, tecore_seq_dir_t dir, size_t first,
                            size_t count, tecore_stream_t stream);
  tecore_result_t (*after)(void *ctx, tecore_seq_t *seq, tecore_seq_dir_t dir, size_t first,
                           size_t count, tecore_stream_t stream);
  void *ctx;
};
/* Installs hooks (copied; NULL removes them).  One set per sequence. */
tecore_result_t tecore_seq_set_hooks(tecore_seq_t *seq, const struct tecore_seq_hooks *hooks);

/* ---- registration: new kinds and fusion patterns ------------------------- */

/* What an executor (an operation's own forward or backward, or a fusion)
 * gets: the group's ops [first, first + count) of seq, and the
 * activations at its count + 1 boundaries: act[0] the input of op first,
 * act[count] the output of the last op.  Forward: act[1..count] are the
 * executor's to write (all of them: later passes read the saved ones).
 * Backward: act[] as the forward wrote them; grad[count] is the gradient
 * of the output (read); grad[0..count-1] are the executor's to write
 * (grad[0] always: it is the next group's input), and parameter gradients
 * (tecore_seq_op) are to be ADDED to.  Everything must be queued on stream
 * only, without allocating or synchronizing (capture). */
struct tecore_seq_exec {
  tecore_seq_t *seq;
  tecore_seq_dir_t dir;
  size_t first, count;
  const struct tecore_tensor *act;      /* count + 1 */
  const struct tecore_tensor *grad;     /* backward: count + 1; forward: NULL */
  tecore_devptr_t noop_flag;            /* forward's argument */
  const struct tecore_recipe *recipe;   /* NULL: no FP8 */
  tecore_stream_t stream;
  void *ctx;                            /* the registration's ctx */
  tecore_devptr_t workspace;            /* backward scratch (tecore_op_kind_def.workspace) */
  size_t workspace_bytes;
  unsigned flags;                       /* TECORE_EXEC_* */
  size_t row0;                          /* forward, TECORE_FUSION_ROWS: the first row */
};
/* tecore_seq_exec.flags.  GRAD_DEAD (backward): grad[count], the gradient
 * of the group's output, is the sequence's storage (its own, or given by
 * tecore_seq_set_grad), not the caller's dy, and no later group reads it:
 * the executor may overwrite it (a collective may reduce in it, where it
 * lies, instead of a copy). */
#define TECORE_EXEC_GRAD_DEAD 0x1u
/* SIDE: the group runs on the sequence's side stream beside a GEMM (the
 * overlap, tecore_seq_backward(3)): a collective may take fewer SMs so
 * that the GEMM keeps most of them. */
#define TECORE_EXEC_SIDE 0x2u
typedef tecore_result_t (*tecore_seq_exec_fn)(const struct tecore_seq_exec *x);

/* tecore_op_kind_def.fields: the tecore_op_desc fields a kind reads (the
 * others must be 0 in every desc of the kind). */
#define TECORE_OP_FIELD_FEATURES 0x01u
#define TECORE_OP_FIELD_BIAS 0x02u
#define TECORE_OP_FIELD_EPSILON 0x04u   /* epsilon and norm_flags */
#define TECORE_OP_FIELD_SCALE 0x08u
#define TECORE_OP_FIELD_SLOT 0x10u      /* given with a slot role (below) */
#define TECORE_OP_FIELD_CTX 0x20u

/* tecore_op_kind_def.flags.  Aliasing: the output shares the input's
 * storage (same number of elements), or the input's gradient the output's
 * gradient, so the pass moves no bytes; except at the sequence's ends (the
 * caller's tensors), where the executor must copy: it compares the data
 * pointers it is given.  A slot role (at most one, with
 * TECORE_OP_FIELD_SLOT): the operation forks its input into residual slot
 * desc->slot (make) or adds that slot (add), with the pairing rules of
 * TECORE_OP_MAKE_EXTRA_OUTPUT and TECORE_OP_ADD_EXTRA_INPUT; its executors
 * find the slot's tensors in tecore_op_info.extra_value / extra_grad. */
#define TECORE_OP_ALIAS_FORWARD 0x1u
#define TECORE_OP_ALIAS_BACKWARD 0x2u
#define TECORE_OP_SLOT_MAKE 0x4u
#define TECORE_OP_SLOT_ADD 0x8u
/* Backward reads nothing the forward computed (no activation of the
 * sequence): the input need not be kept for it (what activation offload
 * saves, tecore_seq_get_saved).  Without it, backward is taken to read its
 * input. */
#define TECORE_OP_BACKWARD_NO_INPUT 0x10u
/* Its backward may run on the sequence's side stream, concurrently with
 * the weight-gradient GEMM of the Linear before it (te/ops.h, "Overlap"):
 * it reads only grad[1], writes only grad[0] (and grad[1] under
 * TECORE_EXEC_GRAD_DEAD), and uses neither the workspace nor anything
 * else of the sequence; it queues its work on the stream it is given
 * (x->stream), as ever. */
#define TECORE_OP_BACKWARD_OVERLAP 0x20u
/* Backward reads the operation's output too (act[count]), as attention
 * reads O: the output is kept for it (tecore_seq_get_saved lists it as
 * read back) even where the next operation's backward does not read it.
 * When the operation is the sequence's last, that is the caller's out of
 * tecore_seq_forward, which must then stay unchanged until the backward
 * of that microbatch ran. */
#define TECORE_OP_BACKWARD_OUTPUT 0x40u

/* How tecore_seq_build fills a parameter: zeros, ones, or uniform in
 * [-bound, bound] from the sequence's seed (one draw per element, in
 * operation and parameter order). */
typedef enum tecore_op_init {
  TECORE_OP_INIT_ZERO = 0,
  TECORE_OP_INIT_ONE = 1,
  TECORE_OP_INIT_UNIFORM = 2
} tecore_op_init_t;

#define TECORE_OP_MAX_PARAMS 2
#define TECORE_OP_MAX_SAVED 2

/* An operation's shape, as its kind's shape function fills it in: the
 * input's shape is given, the output's is preset to it; parameters
 * (value of the sequence's dtype and F32 gradient, rows 1: a vector) and
 * saved vectors (F32 [in_rows] each, written by forward for backward) are
 * preset to none.  tecore_seq_build allocates what it says, and
 * tecore_seq_op / tecore_seq_params show it. */
struct tecore_op_param_def {
  const char *name;            /* static string: "weight", "gamma", ... */
  size_t rows, cols;
  tecore_op_init_t init;
  double bound;                /* TECORE_OP_INIT_UNIFORM */
};
struct tecore_op_shape {
  size_t in_rows, in_features;
  size_t out_rows, out_features;
  size_t nparams;              /* 0 .. TECORE_OP_MAX_PARAMS */
  struct tecore_op_param_def param[TECORE_OP_MAX_PARAMS];
  size_t nsaved;               /* 0 .. TECORE_OP_MAX_SAVED */
};

/* An operation kind: libtecore's own kinds are defined by entries of this
 * form too, so a registered kind is run exactly as a built-in one. */
struct tecore_op_kind_def {
  const char *name;            /* static string, e.g. "allreduce" */
  unsigned fields;             /* TECORE_OP_FIELD_* */
  unsigned flags;              /* TECORE_OP_ALIAS_*, TECORE_OP_SLOT_* */
  /* checks desc against the input's shape and fills in the rest of *shape
   * (NULL: the same shape, no parameters); an error names the argument */
  tecore_result_t (*shape)(const struct tecore_op_desc *desc, struct tecore_op_shape *shape,
                           void *ctx);
  /* bytes of device workspace backward needs (NULL: none); the sequence
   * allocates the largest of its operations' and gives it to every
   * executor (tecore_seq_exec.workspace) */
  tecore_result_t (*workspace)(const struct tecore_op_desc *desc, size_t in_rows,
                               size_t in_features, size_t *bytes, void *ctx);
  tecore_seq_exec_fn forward;  /* required */
  tecore_seq_exec_fn backward; /* required */
  void *ctx;
};
/* Registers the implementation of kind: TECORE_OP_ALLREDUCE,
 * TECORE_OP_REDUCE_SCATTER, TECORE_OP_ALLGATHER, TECORE_OP_TP_COPY,
 * TECORE_OP_TP_REDUCE or a kind in
 * [TECORE_OP_USER_FIRST, TECORE_OP_KIND_MAX).  def is copied; def NULL
 * removes the registration.  A kind already registered is refused
 * (remove it first).  Sequences built before keep the old one. */
tecore_result_t tecore_ops_register_kind(int kind, const struct tecore_op_kind_def *def);

#define TECORE_FUSION_MAX_OPS 8
/* A fusion pattern: nops consecutive operations of kinds[] (forward
 * order, in either pass), where applies (NULL: always) says yes for this
 * place and recipe (recipe NULL: no FP8); run executes the group.
 * Among the patterns that match, the plan takes the cover of the pass with
 * the fewest groups, ties broken by priority; registered patterns come
 * before built-in ones of equal standing. */
struct tecore_fusion_def {
  const char *name;            /* static string, unique; shown by describe */
  tecore_seq_dir_t dir;
  size_t nops;                 /* 1 .. TECORE_FUSION_MAX_OPS */
  int kinds[TECORE_FUSION_MAX_OPS];
  int (*applies)(const tecore_seq_t *seq, size_t first, const struct tecore_recipe *recipe,
                 void *ctx);
  tecore_seq_exec_fn run;      /* required */
  void *ctx;
  int priority;                /* 0 .. 100; higher wins ties */
  /* bytes of device workspace run needs at this place (NULL: what the
   * kinds of its operations ask for); a plan that takes the pattern grows
   * the sequence's workspace to it (tecore_seq_exec.workspace) */
  tecore_result_t (*workspace)(const tecore_seq_t *seq, size_t first, size_t *bytes, void *ctx);
  unsigned flags;              /* TECORE_FUSION_* */
};
/* tecore_fusion_def.flags.  WRITES_FP8 (forward): run writes the rowwise
 * FP8 input of the Linear right after the group (tecore_seq_fp8_input(seq,
 * first + nops)), which then does not quantize it, instead of the group's
 * output in the sequence's dtype (left unwritten, with the boundaries
 * that alias it: nothing may read them, as after libtecore's
 * rmsnorm+quantize).  applies must check that this Linear runs in FP8
 * (tecore_seq_fp8_input succeeds) under the recipe.  Under the block
 * recipe a training sequence does not plan such a pattern: the backward
 * makes the columnwise copy as a byte transpose of the rowwise one, which
 * 1x128 blocks do not allow. */
#define TECORE_FUSION_WRITES_FP8 0x1u
/* ROWS (forward): run may be called on a block of rows: act[] then are
 * the group's boundaries cut to rows [x->row0, x->row0 + act[0].shape[0])
 * (views into the full ones), and what run finds by itself (slot values,
 * saved vectors, tecore_seq_fp8_input's data) it offsets by row0; its
 * rows are independent (an allreduce, a residual add, a norm per row).
 * When such a group follows a Linear alone, the fuser may pipeline them
 * (te/ops.h, "Overlap"): the Linear's GEMM in row blocks on the caller's
 * stream, run on each block on the side stream as soon as the GEMM wrote
 * it. */
#define TECORE_FUSION_ROWS 0x2u
/* GELU_EPILOGUE: run applies a GELU in a GEMM's epilogue: the pattern is
 * planned only where libtecore's linear+gelu would be (not for a sequence
 * created with TECORE_SEQ_NO_GELU_EPILOGUE, nor under
 * TECORE_OPS_GELU_EPILOGUE=0). */
#define TECORE_FUSION_GELU_EPILOGUE 0x4u
/* QUANTIZES_INPUT (forward): the group holds one Linear, not its first
 * operation, and where that Linear runs in FP8 run writes its rowwise FP8
 * input itself (tecore_seq_fp8_input(seq, the Linear's index): the codes
 * with that tensor's scale, scale_inv written, |x| max-accumulated into
 * its amax, as tecore_quantize does), beside the group's boundaries in
 * the sequence's dtype: a pattern that quantizes the input piece by piece
 * as it arrives (libtecomm's allgather+linear).  The Linear's input then
 * counts as quantized: tecore_seq_linear_fp8_operands quantizes only the
 * weight (x may be NULL), and the backward makes the columnwise copy as a
 * byte transpose of the rowwise one, so that, as for WRITES_FP8, a
 * training sequence under the block recipe does not plan the pattern. */
#define TECORE_FUSION_QUANTIZES_INPUT 0x8u
/* INPUT_FP8_ONLY (with QUANTIZES_INPUT): where the Linear runs in FP8, run
 * writes its rowwise FP8 input instead of the boundary before the Linear
 * (the Linear's input in the sequence's dtype, left unwritten with the
 * boundaries of the group that alias it: nothing may read them, as after
 * libtecore's rmsnorm+quantize; the FP8 Linear's backward reads the
 * codes): a pattern that moves the codes instead of the 16-bit rows
 * (libtecomm's allgather+linear).  Where the Linear does not run in FP8,
 * run writes the boundary as without the flag. */
#define TECORE_FUSION_INPUT_FP8_ONLY 0x10u
/* Adds a pattern (def is copied) for sequences planned from now on. */
tecore_result_t tecore_ops_register_fusion(const struct tecore_fusion_def *def);
/* Removes the registered pattern called name. */
tecore_result_t tecore_ops_unregister_fusion(const char *name);

/* "linear", "rmsnorm", ... a registered kind's name, or "?". */
const char *tecore_op_kind_name(int kind);

/* ---- activation recomputation --------------------------------------------
 * A range of operations whose activations the backward computes again
 * instead of keeping them from the forward (tecore_seq_set_recompute(3)):
 *   FULL       the range keeps only its input (boundary first); its
 *              backward first runs the range's forward again from it
 *   SELECTIVE  within the range, each run of consecutive attention-core
 *              and activation operations (ROPE, ATTENTION, GELU, RELU,
 *              SILU, QGELU, SWIGLU, GEGLU, REGLU) is recomputed as FULL
 *              is: the Linears' (GEMMs') outputs stay kept
 * The saved tensors a recomputed forward writes share one pool, sized for
 * the largest unit (a block's worth), which tecore_seq_get_saved lists
 * with external TECORE_SEQ_SAVED_RECOMPUTED and read_back 0, and which
 * tecore_seq_set_saved refuses to move.  No forward group crosses a unit's
 * edge, nor a backward group the edge between two units.  The forward run again reads the last forward's noop_flag and
 * records the same amaxes (max-accumulated: delayed histories see each
 * value once), so the gradients are those of the plain backward.  Pass
 * hooks see each group run again with dir TECORE_SEQ_RECOMPUTE. */
typedef enum tecore_seq_recompute {
  TECORE_SEQ_RECOMPUTE_NONE = 0,
  TECORE_SEQ_RECOMPUTE_FULL = 1,
  TECORE_SEQ_RECOMPUTE_SELECTIVE = 2
} tecore_seq_recompute_t;
/* tecore_seq_saved.external of a tensor in the recompute pool */
#define TECORE_SEQ_SAVED_RECOMPUTED 2
/* Marks ops [first, first + count) as recomputed with mode (FULL or
 * SELECTIVE), before tecore_seq_build; ranges may not overlap. */
tecore_result_t tecore_seq_set_recompute(tecore_seq_t *seq, size_t first, size_t count,
                                         tecore_seq_recompute_t mode);

#ifdef __cplusplus
}
#endif
#endif
