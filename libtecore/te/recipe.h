/* SPDX-License-Identifier: Apache-2.0 */
/* te/recipe.h -- FP8 scaling recipes: which format each tensor gets and how
 * its scales are chosen.
 *
 *   delayed   per-tensor scale from a history of past amaxes (the scale a
 *             kernel uses this step was computed from earlier steps);
 *             state on the device: this step's amax, the history, scale and
 *             scale_inv for a group of tensors, updated by one kernel for the
 *             whole group (or for several groups) after an optional
 *             cross-rank MAX reduction.
 *   current   per-tensor scale from this tensor's own amax (two passes).
 *   mxfp8     1x32 blocks with E8M0 scales (OCP MX).
 *   block     1x128 blocks (activations, gradients) and 128x128 blocks
 *             (weights), FP32 scales, optionally powers of two.
 *
 * Formats: E4M3 everywhere, E5M2 everywhere, or HYBRID (E4M3 for
 * activations and weights, E5M2 for gradients).
 *
 * The scale rules (kernels/common/fp8.h, identical on both backends):
 *   delayed: scale = fp8_max * 2^-margin / amax, where amax is the max of
 *            the history window (TECORE_AMAX_MAX) or this step's amax
 *            (TECORE_AMAX_MOST_RECENT); the old scale is kept when that
 *            amax is 0 or not finite; FLT_MAX where the quotient overflows.
 *   current, block: scale = fp8_max / max(amax, amax_epsilon); 1 when amax
 *            is not finite or the floor is 0.
 *   TECORE_RECIPE_POW2_SCALES rounds a computed scale down to a power of two.
 *   scale_inv = 1 / scale. */
#ifndef TE_RECIPE_H
#define TE_RECIPE_H

#include <stddef.h>
#include <te/result.h>
#include <te/dtype.h>
#include <te/device.h>
#include <te/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tecore_fp8_format {
  TECORE_FP8_E4M3 = 0,
  TECORE_FP8_E5M2 = 1,
  TECORE_FP8_HYBRID = 2   /* E4M3 forward (activations, weights), E5M2 gradients */
} tecore_fp8_format_t;

typedef enum tecore_recipe_kind {
  TECORE_RECIPE_DELAYED = 0,
  TECORE_RECIPE_CURRENT = 1,
  TECORE_RECIPE_MXFP8 = 2,
  TECORE_RECIPE_BLOCK = 3
} tecore_recipe_kind_t;

typedef enum tecore_amax_algo {
  TECORE_AMAX_MAX = 0,          /* max over the history window */
  TECORE_AMAX_MOST_RECENT = 1   /* this step's amax */
} tecore_amax_algo_t;

/* What a tensor is, which picks its format (HYBRID) and block shape (block). */
typedef enum tecore_fp8_role {
  TECORE_FP8_ACTIVATION = 0,
  TECORE_FP8_WEIGHT = 1,
  TECORE_FP8_GRADIENT = 2
} tecore_fp8_role_t;

/* Cross-rank reduction of amaxes, called by tecore_delayed_update before the
 * update kernel: it must enqueue on stream an in-place MAX reduction of the
 * count floats at amax across the ranks (e.g. an allreduce), and return
 * TECORE_SUCCESS, or an error that tecore_delayed_update returns.  It may be
 * called while stream captures a graph. */
typedef tecore_result_t (*tecore_amax_reduce_fn)(tecore_devptr_t amax, size_t count,
                                                 tecore_stream_t stream, void *ctx);

#define TECORE_RECIPE_POW2_SCALES 0x1u

struct tecore_recipe {
  tecore_recipe_kind_t kind;
  tecore_fp8_format_t format;
  /* delayed */
  int margin;                        /* 0 .. 126 */
  int history_len;                   /* 1 .. 65536 */
  tecore_amax_algo_t amax_algo;
  tecore_amax_reduce_fn amax_reduce; /* NULL: no cross-rank reduction */
  void *amax_reduce_ctx;
  /* current and block */
  float amax_epsilon;                /* >= 0 */
  unsigned flags;                    /* TECORE_RECIPE_POW2_SCALES */
};

/* The defaults of a kind: delayed: HYBRID, margin 0, history 1024, max;
 * current: HYBRID, epsilon 0; mxfp8: E4M3; block: E4M3, epsilon 0, power-
 * of-two scales. */
tecore_result_t tecore_recipe_init(struct tecore_recipe *r, tecore_recipe_kind_t kind);
tecore_result_t tecore_recipe_validate(const struct tecore_recipe *r);
/* The FP8 dtype (TECORE_DTYPE_E4M3 / E5M2) of a tensor of role. */
tecore_result_t tecore_recipe_dtype(const struct tecore_recipe *r, tecore_fp8_role_t role,
                                    tecore_dtype_t *dtype);
/* Sets t's dtype, scaling mode, amax_epsilon and flags for a tensor of role
 * (the shape and the pointers stay the caller's). */
tecore_result_t tecore_recipe_apply(const struct tecore_recipe *r, tecore_fp8_role_t role,
                                    struct tecore_tensor *t);

/* ---- delayed scaling state ---------------------------------------------------
 * One device allocation for a group of count tensors of one role, laid out
 *   amax[count] | history[history_len][count] | scale[count] | scale_inv[count]
 * (floats).  Quantize kernels max-accumulate into amax[i]; the update moves
 * amax into the history (row 0 the most recent, row history_len-1 the
 * oldest), computes scale and scale_inv, and resets amax to 0. */
struct tecore_delayed_state {
  size_t count;
  int history_len;
  tecore_dtype_t dtype;        /* E4M3 or E5M2 */
  tecore_devptr_t base;        /* the allocation (tecore_delayed_state_free frees it) */
  tecore_devptr_t amax;
  tecore_devptr_t history;
  tecore_devptr_t scale;
  tecore_devptr_t scale_inv;
};

/* Allocates and initializes (amax and history 0, scale and scale_inv 1) in
 * stream order on stream.  r must be a delayed recipe. */
tecore_result_t tecore_delayed_state_create(const struct tecore_recipe *r, tecore_fp8_role_t role,
                                            size_t count, tecore_stream_t stream,
                                            struct tecore_delayed_state *st);
/* Frees the allocation (after the work using it is done) and zeroes *st. */
tecore_result_t tecore_delayed_state_free(struct tecore_delayed_state *st);
/* Points t's amax, scale and scale_inv at entry index, and sets its dtype
 * and scaling mode (TECORE_SCALING_DELAYED). */
tecore_result_t tecore_delayed_state_tensor(const struct tecore_delayed_state *st, size_t index,
                                            struct tecore_tensor *t);
/* The step's update, on stream: r->amax_reduce (when set) on st->amax,
 * then one kernel for all count tensors: history shift, amax selection,
 * new scale and scale_inv, amax reset. */
tecore_result_t tecore_delayed_update(const struct tecore_recipe *r,
                                      const struct tecore_delayed_state *st,
                                      tecore_stream_t stream);
/* The same for count states of recipe r (one per role, say), in one
 * launch for up to 16 states (more: one launch per 16): r->amax_reduce on
 * each state's amax in order, then the update of all of them.  An entry
 * that is all zeros (count 0, base 0) is a group of no tensors and is
 * skipped; count 0 queues nothing.  The states must not share a byte.
 * count <= 2^20. */
tecore_result_t tecore_delayed_update_multi(const struct tecore_recipe *r,
                                            const struct tecore_delayed_state *states,
                                            size_t count, tecore_stream_t stream);

#ifdef __cplusplus
}
#endif
#endif
