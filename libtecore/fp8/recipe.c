/* SPDX-License-Identifier: Apache-2.0 */
/* recipe.c -- FP8 scaling recipes (te/recipe.h): recipe defaults and
 * checks, the format and scaling mode a tensor of a role gets, and the
 * delayed-scaling state of a group of tensors, and the update of one or
 * several such groups in one launch (kernels/fp8_recipe.cu on cuda,
 * fp8_vdev.c on vdev, both from kernels/common/fp8.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fp8/fp8_kernels.h"


/* States one tecore_delayed_update_multi call takes (te/recipe.h). */
#define TE_DELAYED_UPDATE_MAX_STATES ((size_t)1 << 20)

/* ---- recipes ----------------------------------------------------------------- */

TE_EXPORT tecore_result_t tecore_recipe_init(struct tecore_recipe *r, tecore_recipe_kind_t kind) {
  TE_ARG(r, "tecore_recipe_init: r is NULL");
  TE_ARG((unsigned)kind <= TECORE_RECIPE_BLOCK, "tecore_recipe_init: kind %d is not a recipe kind",
         (int)kind);
  memset(r, 0, sizeof *r);
  r->kind = kind;
  r->history_len = 1024;
  r->amax_algo = TECORE_AMAX_MAX;
  switch (kind) {
  case TECORE_RECIPE_DELAYED:
  case TECORE_RECIPE_CURRENT: r->format = TECORE_FP8_HYBRID; break;
  case TECORE_RECIPE_MXFP8: r->format = TECORE_FP8_E4M3; break;
  case TECORE_RECIPE_BLOCK:
    r->format = TECORE_FP8_E4M3;
    r->flags = TECORE_RECIPE_POW2_SCALES;
    break;
  }
  return TECORE_SUCCESS;
}

static tecore_result_t recipe_check(const struct tecore_recipe *r, const char *fn) {
  if (!r) return TE_ERR(TECORE_ERR_INVALID, "%s: r is NULL", fn);
  if ((unsigned)r->kind > TECORE_RECIPE_BLOCK)
    return TE_ERR(TECORE_ERR_INVALID, "%s: r->kind %d is not a recipe kind", fn, (int)r->kind);
  if ((unsigned)r->format > TECORE_FP8_HYBRID)
    return TE_ERR(TECORE_ERR_INVALID, "%s: r->format %d is not E4M3, E5M2 or HYBRID", fn,
                  (int)r->format);
  if (r->flags & ~TECORE_RECIPE_POW2_SCALES)
    return TE_ERR(TECORE_ERR_INVALID, "%s: r->flags 0x%x has unknown bits", fn, r->flags);
  if (!(r->amax_epsilon >= 0.0f) || !isfinite(r->amax_epsilon))
    return TE_ERR(TECORE_ERR_INVALID, "%s: r->amax_epsilon %g is not a finite value >= 0", fn,
                  (double)r->amax_epsilon);
  if (r->kind == TECORE_RECIPE_DELAYED) {
    if (r->margin < 0 || r->margin > 126)
      return TE_ERR(TECORE_ERR_INVALID, "%s: r->margin %d is outside 0..126", fn, r->margin);
    if (r->history_len < 1 || r->history_len > 65536)
      return TE_ERR(TECORE_ERR_INVALID, "%s: r->history_len %d is outside 1..65536", fn,
                    r->history_len);
    if ((unsigned)r->amax_algo > TECORE_AMAX_MOST_RECENT)
      return TE_ERR(TECORE_ERR_INVALID, "%s: r->amax_algo %d is not max or most_recent", fn,
                    (int)r->amax_algo);
  }
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_recipe_validate(const struct tecore_recipe *r) {
  return recipe_check(r, __func__);
}

static tecore_result_t role_check(tecore_fp8_role_t role, const char *fn) {
  if ((unsigned)role > TECORE_FP8_GRADIENT)
    return TE_ERR(TECORE_ERR_INVALID, "%s: role %d is not activation, weight or gradient", fn,
                  (int)role);
  return TECORE_SUCCESS;
}

static tecore_dtype_t recipe_dtype(const struct tecore_recipe *r, tecore_fp8_role_t role) {
  if (r->format == TECORE_FP8_E4M3) return TECORE_DTYPE_E4M3;
  if (r->format == TECORE_FP8_E5M2) return TECORE_DTYPE_E5M2;
  return role == TECORE_FP8_GRADIENT ? TECORE_DTYPE_E5M2 : TECORE_DTYPE_E4M3;
}

TE_EXPORT tecore_result_t tecore_recipe_dtype(const struct tecore_recipe *r, tecore_fp8_role_t role,
                                              tecore_dtype_t *dtype) {
  TE_CHECK(recipe_check(r, __func__));
  TE_CHECK(role_check(role, __func__));
  TE_ARG(dtype, "tecore_recipe_dtype: dtype is NULL");
  *dtype = recipe_dtype(r, role);
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_recipe_apply(const struct tecore_recipe *r, tecore_fp8_role_t role,
                                              struct tecore_tensor *t) {
  TE_CHECK(recipe_check(r, __func__));
  TE_CHECK(role_check(role, __func__));
  TE_ARG(t, "tecore_recipe_apply: t is NULL");
  t->dtype = recipe_dtype(r, role);
  switch (r->kind) {
  case TECORE_RECIPE_DELAYED: t->scaling = TECORE_SCALING_DELAYED; break;
  case TECORE_RECIPE_CURRENT: t->scaling = TECORE_SCALING_CURRENT; break;
  case TECORE_RECIPE_MXFP8: t->scaling = TECORE_SCALING_MXFP8; break;
  case TECORE_RECIPE_BLOCK:
    t->scaling = role == TECORE_FP8_WEIGHT ? TECORE_SCALING_BLOCK_128X128 : TECORE_SCALING_BLOCK_1X128;
    break;
  }
  t->amax_epsilon = r->amax_epsilon;
  t->flags = (r->flags & TECORE_RECIPE_POW2_SCALES) ? TECORE_TENSOR_POW2_SCALES : 0u;
  return TECORE_SUCCESS;
}

/* ---- the delayed-scaling update kernel ----------------------------------------- */

static const struct tecore_kernel_def r_kernels[] = {
    TE_KDEF("te_fp8_delayed_update", te_fp8_vdev_delayed_update, TE_FP8_DELAYED_UPDATE_PARAMS),
};

static const struct te_kalign r_align[] = {TE_KALIGN(TE_FP8_DELAYED_UPDATE_PARAMS)};

TE_KERNEL_TABLE_FATBIN_ALIGNED(r_first_id, "libtecore/fp8_recipe", r_kernels, r_align,
                               fp8_recipe)

/* ---- delayed-scaling state ----------------------------------------------------- */

TE_EXPORT tecore_result_t tecore_delayed_state_create(const struct tecore_recipe *r,
                                                      tecore_fp8_role_t role, size_t count,
                                                      tecore_stream_t stream,
                                                      struct tecore_delayed_state *st) {
  TE_CHECK(recipe_check(r, __func__));
  TE_CHECK(role_check(role, __func__));
  TE_ARG(r->kind == TECORE_RECIPE_DELAYED,
         "tecore_delayed_state_create: r is not a delayed-scaling recipe (kind %d)", (int)r->kind);
  TE_ARG(st, "tecore_delayed_state_create: st is NULL");
  TE_ARG(count >= 1 && count <= ((size_t)1 << 32),
         "tecore_delayed_state_create: count %zu is outside 1..2^32", count);
  size_t words = count * ((size_t)r->history_len + 3);
  tecore_devptr_t base = 0;
  TE_CHECK(tecore_mem_alloc(words * sizeof(float), &base));
  struct tecore_delayed_state s = {
      .count = count, .history_len = r->history_len, .dtype = recipe_dtype(r, role),
      .base = base, .amax = base,
      .history = base + count * sizeof(float),
      .scale = base + count * ((size_t)r->history_len + 1) * sizeof(float),
      .scale_inv = base + count * ((size_t)r->history_len + 2) * sizeof(float)};
  tecore_result_t res;
  TE_CHECK_GOTO(tecore_memset_d32_async(s.amax, 0u, count * ((size_t)r->history_len + 1), stream),
                res, fail);
  TE_CHECK_GOTO(tecore_memset_d32_async(s.scale, 0x3f800000u /* 1.0f */, 2 * count, stream), res,
                fail);
  *st = s;
  return TECORE_SUCCESS;
fail:
  (void)tecore_stream_synchronize(stream);
  (void)tecore_mem_free(base);
  return res;
}

TE_EXPORT tecore_result_t tecore_delayed_state_free(struct tecore_delayed_state *st) {
  TE_ARG(st, "tecore_delayed_state_free: st is NULL");
  if (st->base) TE_CHECK(tecore_mem_free(st->base));
  memset(st, 0, sizeof *st);
  return TECORE_SUCCESS;
}

/* name: how the caller's argument is called ("st", "states[2]"). */
static tecore_result_t state_check(const struct tecore_delayed_state *st, const char *name,
                                   const char *fn) {
  if (!st) return TE_ERR(TECORE_ERR_INVALID, "%s: %s is NULL", fn, name);
  if (!st->base || !st->count || st->history_len < 1 || !te_dtype_is_fp8(st->dtype))
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s is not a created delayed-scaling state", fn, name);
  /* the kernel reads floats through each: a changed pointer must stay
   * float-aligned (a misaligned one was a misaligned load on the device) */
  const struct {
    const char *name;
    tecore_devptr_t p;
  } f[] = {{"amax", st->amax}, {"history", st->history}, {"scale", st->scale},
           {"scale_inv", st->scale_inv}};
  for (size_t i = 0; i < TE_ARRAY_SIZE(f); i++)
    if (!f[i].p || f[i].p % sizeof(float))
      return TE_ERR(TECORE_ERR_INVALID, "%s: %s->%s (0x%llx) is 0 or not 4-byte aligned", fn,
                    name, f[i].name, (unsigned long long)f[i].p);
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_delayed_state_tensor(const struct tecore_delayed_state *st,
                                                      size_t index, struct tecore_tensor *t) {
  TE_CHECK(state_check(st, "st", __func__));
  TE_ARG(t, "tecore_delayed_state_tensor: t is NULL");
  TE_ARG(index < st->count, "tecore_delayed_state_tensor: index %zu is not below count %zu", index,
         st->count);
  t->dtype = st->dtype;
  t->scaling = TECORE_SCALING_DELAYED;
  t->amax = st->amax + index * sizeof(float);
  t->scale = st->scale + index * sizeof(float);
  t->scale_inv = st->scale_inv + index * sizeof(float);
  return TECORE_SUCCESS;
}

/* A zeroed entry of tecore_delayed_update_multi: a group of no tensors
 * (what make_state-style callers hold for a role without tensors). */
static int state_empty(const struct tecore_delayed_state *st) { return !st->base && !st->count; }

/* The checks of one state of an update: created, of r's history length,
 * its arrays inside live allocations (st is the caller's plain data: a
 * count or pointer changed since creation must not send the kernel past
 * the allocation; vdev's checks, one compare on the cuda path).  name: how
 * the caller's argument is called ("st", "states[2]"). */
static tecore_result_t update_state_check(const struct tecore_recipe *r,
                                          const struct tecore_delayed_state *st,
                                          const char *name, const char *fn) {
  TE_CHECK(state_check(st, name, fn));
  TE_ARG(r->history_len == st->history_len,
         "%s: r->history_len %d differs from %s's %d (set at creation)", fn, r->history_len, name,
         st->history_len);
  TE_ARG(st->count <= ((size_t)1 << 32), "%s: %s->count %zu is above 2^32", fn, name, st->count);
  size_t vec = st->count * sizeof(float);
  TE_ARG((size_t)st->history_len <= SIZE_MAX / vec, "%s: %s->count %zu x history_len %d overflows",
         fn, name, st->count, st->history_len);
  char what[64];
  const struct {
    const char *field;
    tecore_devptr_t p;
    size_t bytes;
  } f[] = {{"amax", st->amax, vec},
           {"history", st->history, vec * (size_t)st->history_len},
           {"scale", st->scale, vec},
           {"scale_inv", st->scale_inv, vec}};
  for (size_t k = 0; k < TE_ARRAY_SIZE(f); k++) {
    snprintf(what, sizeof what, "%s->%s", name, f[k].field);
    TE_CHECK(te_dev_check_range(f[k].p, f[k].bytes, fn, what));
  }
  return TECORE_SUCCESS;
}

/* The update writes every array of every state: none may share a byte
 * with another (two states over one allocation would race in one launch,
 * and be updated twice).  Spans named "states[i].field". */
static tecore_result_t update_alias_check(const struct tecore_delayed_state *states, size_t n,
                                          int one, const char *fn) {
  struct te_span small[4 * 4], *sp = small;
  if (n > 4 && !(sp = malloc(4 * n * sizeof *sp)))
    return TE_ERR(TECORE_ERR_NOMEM, "%s: no host memory to check %zu states", fn, n);
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    const struct tecore_delayed_state *st = &states[i];
    if (state_empty(st)) continue;
    size_t vec = st->count * sizeof(float);
#define DU_SPAN(f, bytes)                                                                 \
  sp[m++] = one ? (struct te_span){"st->" #f, st->f, bytes, TE_ACCESS_WRITE, 0, NULL, 0}  \
                : (struct te_span){"states", st->f, bytes, TE_ACCESS_WRITE, 0, "." #f, i}
    DU_SPAN(amax, vec);
    DU_SPAN(history, vec * (size_t)st->history_len);
    DU_SPAN(scale, vec);
    DU_SPAN(scale_inv, vec);
#undef DU_SPAN
  }
  tecore_result_t res = te_check_spans(sp, m, fn);
  if (sp != small) free(sp);
  return res;
}

/* The update of n states (empty ones skipped), checked, then the hooks,
 * then TE_DU_MAX states a launch.  one: called as tecore_delayed_update
 * (the argument is named st, and an empty state is an error). */
static tecore_result_t delayed_update(const struct tecore_recipe *r,
                                      const struct tecore_delayed_state *states, size_t n, int one,
                                      tecore_stream_t stream, const char *fn) {
  TE_CHECK(recipe_check(r, fn));
  TE_ARG(r->kind == TECORE_RECIPE_DELAYED, "%s: r is not a delayed-scaling recipe (kind %d)", fn,
         (int)r->kind);
  TE_ARG(n <= TE_DELAYED_UPDATE_MAX_STATES, "%s: count %zu is above 2^20", fn, n);
  TE_ARG(states || n == 0, "%s: states is NULL but count is %zu", fn, n);
  char name[48];
  for (size_t i = 0; i < n; i++) {
    if (!one && state_empty(&states[i])) continue;
    if (one) snprintf(name, sizeof name, "st");
    else snprintf(name, sizeof name, "states[%zu]", i);
    TE_CHECK(update_state_check(r, &states[i], name, fn));
  }
  TE_CHECK(update_alias_check(states, n, one, fn));
  if (r->amax_reduce)
    for (size_t i = 0; i < n; i++) {
      if (state_empty(&states[i])) continue;
      tecore_result_t rr = r->amax_reduce(states[i].amax, states[i].count, stream,
                                          r->amax_reduce_ctx);
      if (rr != TECORE_SUCCESS)
        return TE_ERR(rr, "%s: the amax_reduce hook failed: %s (%s)", fn, tecore_result_name(rr),
                      tecore_last_error());
    }
  int id = r_first_id();
  if (id < 0) return TE_ERR(TECORE_ERR_INTERNAL, "FP8 recipe kernel table could not be registered");
  struct te_du_params p;
  memset(&p, 0, sizeof p);
  p.len = r->history_len;
  p.most_recent = r->amax_algo == TECORE_AMAX_MOST_RECENT;
  p.margin_mult = ldexpf(1.0f, -r->margin);
  p.pow2 = (r->flags & TECORE_RECIPE_POW2_SCALES) ? 1 : 0;
  /* blockDim.y: enough rows for the whole history in one pass, 4 .. 128 */
  unsigned ty = TE_DU_MIN_TY;
  while (ty < TE_DU_MAX_TY && (size_t)ty * TE_DU_ROWS < (size_t)r->history_len - 1) ty *= 2;
  struct tecore_launch_cfg cfg = {.grid = {0, 1, 1}, .block = {TE_DU_TX, ty, 1}};
  void *args[TE_KNPARAMS(TE_FP8_DELAYED_UPDATE_PARAMS)];
  struct te_delayed_update_args a = {.p = &p};
  te_delayed_update_args_ptrs(&a, args);
  uint64_t blocks = 0;
  for (size_t i = 0; i < n; i++) {
    const struct tecore_delayed_state *st = &states[i];
    if (state_empty(st)) continue;
    uint64_t nb = (st->count + TE_DU_TX - 1) / TE_DU_TX;
    if (p.nstates == TE_DU_MAX || blocks + nb > TE_DU_MAX_BLOCKS) {
      cfg.grid[0] = (unsigned)blocks;
      TE_CHECK(te_kernel_launch_pdl(id, &cfg, args, stream));
      p.nstates = 0;
      blocks = 0;
    }
    p.st[p.nstates++] = (struct te_du_state){
        .amax = TE_DPTR(st->amax), .history = TE_DPTR(st->history),
        .scale = TE_DPTR(st->scale), .scale_inv = TE_DPTR(st->scale_inv), .count = st->count,
        .fp8_max = te_fp8_max((int)st->dtype), .block0 = (unsigned)blocks};
    blocks += nb;
  }
  if (p.nstates) {
    cfg.grid[0] = (unsigned)blocks;
    TE_CHECK(te_kernel_launch_pdl(id, &cfg, args, stream));
  }
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_delayed_update(const struct tecore_recipe *r,
                                                const struct tecore_delayed_state *st,
                                                tecore_stream_t stream) {
  TE_CHECK(recipe_check(r, __func__));
  TE_CHECK(state_check(st, "st", __func__));
  return delayed_update(r, st, 1, 1, stream, __func__);
}

TE_EXPORT tecore_result_t tecore_delayed_update_multi(const struct tecore_recipe *r,
                                                      const struct tecore_delayed_state *states,
                                                      size_t count, tecore_stream_t stream) {
  return delayed_update(r, states, count, 0, stream, __func__);
}
