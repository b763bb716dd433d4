/* SPDX-License-Identifier: Apache-2.0 */
/* recipe.c -- FP8 scaling recipes (te/recipe.h): recipe defaults and
 * checks, the format and scaling mode a tensor of a role gets, and the
 * delayed-scaling state of a group of tensors with its one-launch update
 * (kernels/fp8_recipe.cu on cuda, vdev_delayed_update below on vdev, both
 * from kernels/common/fp8.h). */
#include <math.h>
#include <string.h>
#include "fp8/fp8_internal.h"
#include "common/fp8.h"
#include "common/fp8_recipe_params.h"

TE_KARGS(te_delayed_update_args, TE_FP8_DELAYED_UPDATE_PARAMS)

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

static void vdev_delayed_update(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_delayed_update_args a = te_delayed_update_args_of(args);
  float *amax = a.amax, *hist = a.history, *scale = a.scale, *scale_inv = a.scale_inv;
  uint64_t count = a.count;
  int len = a.len;
  (void)cfg;
  if (a.noop && *a.noop) return;
  for (uint64_t i = 0; i < count; i++) {
    float v = amax[i];
    uint32_t win = te_abs_bits(v);
    for (int k = len - 1; k >= 1; k--) {
      float h = hist[(uint64_t)(k - 1) * count + i];
      hist[(uint64_t)k * count + i] = h;
      win = te_max_u32(win, te_abs_bits(h));
    }
    hist[i] = v;
    float s = te_fp8_delayed_scale(te_bits_f32(a.most_recent ? te_abs_bits(v) : win), scale[i],
                                   a.fp8_max, a.margin_mult, a.pow2);
    scale[i] = s;
    scale_inv[i] = te_fp8_scale_inv(s);
    amax[i] = 0.0f;
  }
}

static const struct tecore_kernel_def r_kernels[] = {
    TE_KDEF("te_fp8_delayed_update", vdev_delayed_update, TE_FP8_DELAYED_UPDATE_PARAMS),
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

static tecore_result_t state_check(const struct tecore_delayed_state *st, const char *fn) {
  if (!st) return TE_ERR(TECORE_ERR_INVALID, "%s: st is NULL", fn);
  if (!st->base || !st->count || st->history_len < 1 || !te_dtype_is_fp8(st->dtype))
    return TE_ERR(TECORE_ERR_INVALID, "%s: st is not a created delayed-scaling state", fn);
  /* the kernel reads floats through each: a changed pointer must stay
   * float-aligned (a misaligned one was a misaligned load on the device) */
  const struct {
    const char *name;
    tecore_devptr_t p;
  } f[] = {{"amax", st->amax}, {"history", st->history}, {"scale", st->scale},
           {"scale_inv", st->scale_inv}};
  for (size_t i = 0; i < TE_ARRAY_SIZE(f); i++)
    if (!f[i].p || f[i].p % sizeof(float))
      return TE_ERR(TECORE_ERR_INVALID, "%s: st->%s (0x%llx) is 0 or not 4-byte aligned", fn,
                    f[i].name, (unsigned long long)f[i].p);
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_delayed_state_tensor(const struct tecore_delayed_state *st,
                                                      size_t index, struct tecore_tensor *t) {
  TE_CHECK(state_check(st, __func__));
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

TE_EXPORT tecore_result_t tecore_delayed_update(const struct tecore_recipe *r,
                                                const struct tecore_delayed_state *st,
                                                tecore_stream_t stream) {
  TE_CHECK(recipe_check(r, __func__));
  TE_ARG(r->kind == TECORE_RECIPE_DELAYED,
         "tecore_delayed_update: r is not a delayed-scaling recipe (kind %d)", (int)r->kind);
  TE_CHECK(state_check(st, __func__));
  TE_ARG(r->history_len == st->history_len,
         "tecore_delayed_update: r->history_len %d differs from the state's %d (set at creation)",
         r->history_len, st->history_len);
  /* st is the caller's plain data: a count or pointer changed since
   * creation must not send the kernel past the allocation (vdev's checks;
   * one compare on the cuda path) */
  TE_ARG(st->count <= ((size_t)1 << 32), "tecore_delayed_update: st->count %zu is above 2^32",
         st->count);
  size_t vec = st->count * sizeof(float);
  TE_ARG((size_t)st->history_len <= SIZE_MAX / vec,
         "tecore_delayed_update: st->count %zu x history_len %d overflows", st->count,
         st->history_len);
  TE_CHECK(te_dev_check_range(st->amax, vec, __func__, "st->amax"));
  TE_CHECK(te_dev_check_range(st->history, vec * (size_t)st->history_len, __func__,
                              "st->history"));
  TE_CHECK(te_dev_check_range(st->scale, vec, __func__, "st->scale"));
  TE_CHECK(te_dev_check_range(st->scale_inv, vec, __func__, "st->scale_inv"));
  if (r->amax_reduce) {
    tecore_result_t rr = r->amax_reduce(st->amax, st->count, stream, r->amax_reduce_ctx);
    if (rr != TECORE_SUCCESS)
      return TE_ERR(rr, "tecore_delayed_update: the amax_reduce hook failed: %s (%s)",
                    tecore_result_name(rr), tecore_last_error());
  }
  int id = r_first_id();
  if (id < 0) return TE_ERR(TECORE_ERR_INTERNAL, "FP8 recipe kernel table could not be registered");
  struct te_delayed_update_args a = {
      .amax = TE_DPTR(st->amax), .history = TE_DPTR(st->history), .scale = TE_DPTR(st->scale),
      .scale_inv = TE_DPTR(st->scale_inv), .count = st->count, .len = st->history_len,
      .most_recent = r->amax_algo == TECORE_AMAX_MOST_RECENT,
      .fp8_max = te_fp8_max((int)st->dtype), .margin_mult = ldexpf(1.0f, -r->margin),
      .pow2 = (r->flags & TECORE_RECIPE_POW2_SCALES) ? 1 : 0, .noop = NULL};
  void *args[TE_KNPARAMS(TE_FP8_DELAYED_UPDATE_PARAMS)];
  te_delayed_update_args_ptrs(&a, args);
  /* 32 tensors a block, 32 threads on each tensor's history (kernels/fp8_recipe.cu) */
  struct tecore_launch_cfg cfg = {.grid = {(unsigned)((a.count + 31) / 32), 1, 1},
                                  .block = {32, 32, 1}};
  TE_CHECK(tecore_kernel_launch(id, &cfg, args, stream));
  return TECORE_SUCCESS;
}
