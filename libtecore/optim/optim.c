/* SPDX-License-Identifier: Apache-2.0 */
/* optim.c -- tecore_adam_step and tecore_sgd_step, and the optimizer kernel
 * table (kernels/optim.cu on cuda, optim_vdev.c on vdev) with its launch
 * helper.  The tensors go to the kernels by value, TE_OPTIM_MAX a launch,
 * in one parameter block (kernels/common/optim.h); all arguments are
 * checked before the first launch, so a bad call queues nothing. */
#include "optim/optim_internal.h"
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>

/* The kernels take each parameter block by value: it must stay under the
 * 4 KiB kernel-parameter limit, and its layout is shared with nvcc. */
_Static_assert(sizeof(struct te_optim_params) <= 4096, "te_optim_params over 4 KiB");
_Static_assert(sizeof(struct te_l2_params) <= 4096, "te_l2_params over 4 KiB");
_Static_assert(sizeof(struct te_unscale_params) <= 4096, "te_unscale_params over 4 KiB");
_Static_assert(sizeof(struct te_optim_state) == sizeof(struct tecore_optim_state) &&
                   offsetof(struct te_optim_state, lr) == offsetof(struct tecore_optim_state, lr),
               "struct tecore_optim_state differs from the kernels' te_optim_state");

/* ---- the table ------------------------------------------------------------ */

static const struct tecore_kernel_def optim_kernels[] = {
    [TE_OPTIM_K_ADAM] = TE_KDEF("te_optim_adam", te_optim_vdev_adam, TE_OPTIM_STEP_PARAMS),
    [TE_OPTIM_K_SGD] = TE_KDEF("te_optim_sgd", te_optim_vdev_sgd, TE_OPTIM_STEP_PARAMS),
    [TE_OPTIM_K_L2_PARTIAL] =
        TE_KDEF("te_optim_l2_partial", te_optim_vdev_l2_partial, TE_OPTIM_L2_PARTIAL_PARAMS),
    [TE_OPTIM_K_L2_FINAL] =
        TE_KDEF("te_optim_l2_final", te_optim_vdev_l2_final, TE_OPTIM_L2_FINAL_PARAMS),
    [TE_OPTIM_K_UNSCALE] =
        TE_KDEF("te_optim_unscale", te_optim_vdev_unscale, TE_OPTIM_UNSCALE_PARAMS),
    [TE_OPTIM_K_COMMIT] = TE_KDEF("te_optim_commit", te_optim_vdev_commit, TE_OPTIM_COMMIT_PARAMS),
};
_Static_assert(TE_ARRAY_SIZE(optim_kernels) == TE_OPTIM_K_COUNT_, "optim kernel table");

static const struct te_kalign optim_align[] = {
    [TE_OPTIM_K_ADAM] = TE_KALIGN(TE_OPTIM_STEP_PARAMS),
    [TE_OPTIM_K_SGD] = TE_KALIGN(TE_OPTIM_STEP_PARAMS),
    [TE_OPTIM_K_L2_PARTIAL] = TE_KALIGN(TE_OPTIM_L2_PARTIAL_PARAMS),
    [TE_OPTIM_K_L2_FINAL] = TE_KALIGN(TE_OPTIM_L2_FINAL_PARAMS),
    [TE_OPTIM_K_UNSCALE] = TE_KALIGN(TE_OPTIM_UNSCALE_PARAMS),
    [TE_OPTIM_K_COMMIT] = TE_KALIGN(TE_OPTIM_COMMIT_PARAMS),
};

TE_KERNEL_TABLE_FATBIN_ALIGNED(optim_first_id, "libtecore/optim", optim_kernels, optim_align,
                               optim)

tecore_result_t te_optim_launch(int k, unsigned blocks, void **args, tecore_stream_t stream) {
  int optim_id = optim_first_id();
  if (optim_id < 0)
    return TE_ERR(TECORE_ERR_INTERNAL, "the optimizer kernel table could not be registered");
  struct tecore_launch_cfg cfg = {.grid = {blocks ? blocks : 1, 1, 1},
                                  .block = {TE_OPTIM_THREADS, 1, 1}};
  TE_CHECK(te_kernel_launch_pdl(optim_id + k, &cfg, args, stream));
  return TECORE_SUCCESS;
}

/* ---- argument checks ---------------------------------------------------------- */


/* A device address of tensors[i]: set when required, aligned when set. */
static tecore_result_t check_addr(tecore_devptr_t a, size_t align, int required, const char *fn,
                                  size_t i, const char *field) {
  if (!a) {
    if (required) return TE_ERR(TECORE_ERR_INVALID, "%s: tensors[%zu].%s is 0", fn, i, field);
    return TECORE_SUCCESS;
  }
  if (a % align)
    return TE_ERR(TECORE_ERR_INVALID, "%s: tensors[%zu].%s (0x%llx) is not aligned to %zu bytes",
                  fn, i, field, (unsigned long long)a, align);
  return TECORE_SUCCESS;
}

/* On vdev with its checks on: n elements of esize bytes at a lie inside
 * one live allocation.  The optimizer's pointers travel in a parameter
 * block, which the launch-time checker cannot see into, so this is their
 * only check; a kernel ran past a short buffer on the worker before.
 * (cuda: nothing; the driver reports a fault when the GPU makes one.) */
static tecore_result_t check_extent(tecore_devptr_t a, size_t n, size_t esize, const char *fn,
                                    size_t i, const char *field) {
  if (!a || !te_dev_checks_on()) return TECORE_SUCCESS;
  char what[64];
  if (i == (size_t)-1) snprintf(what, sizeof what, "%s", field);
  else snprintf(what, sizeof what, "tensors[%zu].%s", i, field);
  size_t bytes;
  if (__builtin_mul_overflow(n, esize, &bytes)) bytes = SIZE_MAX;
  return te_dev_check_range(a, bytes, fn, what);
}

static int is_model_dtype(tecore_dtype_t d) {
  return d == TECORE_DTYPE_BF16 || d == TECORE_DTYPE_F16 || d == TECORE_DTYPE_E4M3 ||
         d == TECORE_DTYPE_E5M2;
}

/* Checks tensors[i]; need_m / need_v: exp_avg / exp_avg_sq are used. */
static tecore_result_t check_tensor(const struct tecore_optim_tensor *t, size_t i, int need_m,
                                    int need_v, const char *fn) {
  if (t->numel == 0) return TECORE_SUCCESS;
  TE_ARG(te_optim_blocks(t->numel) <= TE_OPTIM_MAX_BLOCKS,
         "%s: tensors[%zu].numel %zu is too large (at most %llu)", fn, i, t->numel,
         TE_OPTIM_MAX_BLOCKS * TE_OPTIM_CHUNK);
  TE_ARG(te_dtype_is_hp(t->grad_dtype), "%s: tensors[%zu].grad_dtype %s is not f32, bf16 or f16",
         fn, i, tecore_dtype_name(t->grad_dtype));
  TE_CHECK(check_addr(t->param, 4, 1, fn, i, "param"));
  TE_CHECK(check_addr(t->grad, tecore_dtype_size(t->grad_dtype), 1, fn, i, "grad"));
  TE_CHECK(check_addr(t->exp_avg, 4, need_m, fn, i, "exp_avg"));
  TE_CHECK(check_addr(t->exp_avg_sq, 4, need_v, fn, i, "exp_avg_sq"));
  TE_CHECK(check_extent(t->param, t->numel, 4, fn, i, "param"));
  TE_CHECK(check_extent(t->grad, t->numel, tecore_dtype_size(t->grad_dtype), fn, i, "grad"));
  if (need_m) TE_CHECK(check_extent(t->exp_avg, t->numel, 4, fn, i, "exp_avg"));
  if (need_v) TE_CHECK(check_extent(t->exp_avg_sq, t->numel, 4, fn, i, "exp_avg_sq"));
  if (!t->model) {
    TE_ARG(!t->model_scale && !t->model_scale_inv && !t->model_amax,
           "%s: tensors[%zu].model is 0 but model_scale, model_scale_inv or model_amax is set",
           fn, i);
    return TECORE_SUCCESS;
  }
  TE_ARG(is_model_dtype(t->model_dtype),
         "%s: tensors[%zu].model_dtype %s is not bf16, f16, e4m3 or e5m2", fn, i,
         tecore_dtype_name(t->model_dtype));
  TE_CHECK(check_addr(t->model, tecore_dtype_size(t->model_dtype), 1, fn, i, "model"));
  TE_CHECK(check_extent(t->model, t->numel, tecore_dtype_size(t->model_dtype), fn, i, "model"));
  if (te_dtype_is_fp8(t->model_dtype)) {
    TE_CHECK(check_addr(t->model_scale, 4, 1, fn, i, "model_scale"));
    TE_CHECK(check_addr(t->model_scale_inv, 4, 0, fn, i, "model_scale_inv"));
    TE_CHECK(check_addr(t->model_amax, 4, 0, fn, i, "model_amax"));
    TE_CHECK(check_extent(t->model_scale, 1, 4, fn, i, "model_scale"));
    TE_CHECK(check_extent(t->model_scale_inv, 1, 4, fn, i, "model_scale_inv"));
    TE_CHECK(check_extent(t->model_amax, 1, 4, fn, i, "model_amax"));
  } else {
    TE_ARG(!t->model_scale && !t->model_scale_inv && !t->model_amax,
           "%s: tensors[%zu]: model_scale, model_scale_inv and model_amax are for FP8 "
           "models, but model_dtype is %s", fn, i, tecore_dtype_name(t->model_dtype));
  }
  return TECORE_SUCCESS;
}

static tecore_result_t check_common(const struct tecore_optim_tensor *tensors, size_t count,
                                    const void *cfg, tecore_devptr_t gsi,
                                    tecore_devptr_t found_inf, const char *fn) {
  TE_ARG(count == 0 || tensors, "%s: tensors is NULL", fn);
  TE_ARG(cfg, "%s: cfg is NULL", fn);
  TE_ARG(gsi % 4 == 0, "%s: grad_scale_inv (0x%llx) is not aligned to 4 bytes", fn,
         (unsigned long long)gsi);
  TE_ARG(found_inf % 4 == 0, "%s: found_inf (0x%llx) is not aligned to 4 bytes", fn,
         (unsigned long long)found_inf);
  TE_CHECK(check_extent(gsi, 1, 4, fn, (size_t)-1, "grad_scale_inv"));
  TE_CHECK(check_extent(found_inf, 1, 4, fn, (size_t)-1, "found_inf"));
  return TECORE_SUCCESS;
}

/* A double hyperparameter that the kernels get as a float: finite in both. */
static int finite_f(double x) { return isfinite(x) && isfinite((float)x); }

/* ---- aliasing ------------------------------------------------------------------- */

/* A step's tensors and device scalars, as the entry point checked them;
 * need_m, need_v: the optimizer keeps the first or second moment. */
struct optim_step {
  const struct tecore_optim_tensor *tensors;
  size_t count;
  tecore_devptr_t gsi, found_inf, state;
  int need_m, need_v;
  const char *fn;
};

/* te/optim.h's rule for a step: what it writes (param, the moments, the
 * model copy, its scale_inv and amax, the step state) shares no byte with
 * anything else of the call, except that tensors may max-accumulate into
 * one model_amax.  Checked over all tensors before the first launch; the
 * spans are named "tensors[i].field" without formatting each name. */
static tecore_result_t check_step_alias(const struct optim_step *st) {
  enum { PER = 8 };
  struct te_span small[3 + 4 * PER], *s = small;
  if (st->count > 4 && !(s = malloc((3 + st->count * PER) * sizeof *s)))
    return TE_ERR(TECORE_ERR_NOMEM, "%s: no host memory to check %zu tensors", st->fn, st->count);
  size_t n = 0;
  s[n++] = (struct te_span){"grad_scale_inv", st->gsi, 4, TE_ACCESS_READ, 0, NULL, 0};
  s[n++] = (struct te_span){"found_inf", st->found_inf, 4, TE_ACCESS_READ, 0, NULL, 0};
  s[n++] = (struct te_span){"cfg->state", st->state, sizeof(struct tecore_optim_state),
                            TE_ACCESS_WRITE, 0, NULL, 0};
  for (size_t i = 0; i < st->count; i++) {
    const struct tecore_optim_tensor *t = &st->tensors[i];
    if (!t->numel) continue;
    size_t nb = t->numel * 4, wsz = t->model ? tecore_dtype_size(t->model_dtype) : 0;
#define OPT_SPAN(f, bytes, acc) s[n++] = (struct te_span){"tensors", t->f, bytes, acc, 0, "." #f, i}
    OPT_SPAN(param, nb, TE_ACCESS_WRITE);
    OPT_SPAN(grad, t->numel * tecore_dtype_size(t->grad_dtype), TE_ACCESS_READ);
    if (st->need_m) OPT_SPAN(exp_avg, nb, TE_ACCESS_WRITE);
    if (st->need_v) OPT_SPAN(exp_avg_sq, nb, TE_ACCESS_WRITE);
    OPT_SPAN(model, t->numel * wsz, TE_ACCESS_WRITE);
    OPT_SPAN(model_scale, t->model ? 4 : 0, TE_ACCESS_READ);
    OPT_SPAN(model_scale_inv, t->model ? 4 : 0, TE_ACCESS_WRITE);
    OPT_SPAN(model_amax, t->model ? 4 : 0, TE_ACCESS_REDUCE);
#undef OPT_SPAN
  }
  tecore_result_t r = te_check_spans(s, n, st->fn);
  if (s != small) free(s);
  return r;
}

/* ---- batching ------------------------------------------------------------------- */

/* Launches the tensors in batches of TE_OPTIM_MAX, each batch's grid one
 * block per chunk of each of its tensors. */
static tecore_result_t step_launch(int k, const struct optim_step *st,
                                   const struct te_optim_hp *hp,
                                   const struct te_optim_dev_hp *dhp, tecore_stream_t stream) {
  int need_m = st->need_m, need_v = st->need_v;
  struct te_optim_params p;
  memset(&p, 0, sizeof p);
  p.found_inf = (const int *)TE_DPTR(st->found_inf);
  p.gsi = (const float *)TE_DPTR(st->gsi);
  p.state = (const struct te_optim_state *)TE_DPTR(st->state);
  p.dhp = *dhp;
  p.hp = *hp;
  uint64_t blocks = 0;
  for (size_t i = 0; i < st->count; i++) {
    const struct tecore_optim_tensor *t = &st->tensors[i];
    if (t->numel == 0) continue;
    uint64_t nb = te_optim_blocks(t->numel);
    if (p.count == TE_OPTIM_MAX || blocks + nb > TE_OPTIM_MAX_BLOCKS) {
      void *args[] = {&p};
      TE_CHECK(te_optim_launch(k, (unsigned)blocks, args, stream));
      p.count = 0;
      blocks = 0;
    }
    struct te_optim_entry *e = &p.e[p.count++];
    size_t gsz = tecore_dtype_size(t->grad_dtype);
    size_t wsz = t->model ? tecore_dtype_size(t->model_dtype) : 1;
    memset(e, 0, sizeof *e);
    e->p = TE_DPTR(t->param);
    e->g = TE_DPTR(t->grad);
    e->m = need_m ? TE_DPTR(t->exp_avg) : NULL;
    e->v = need_v ? TE_DPTR(t->exp_avg_sq) : NULL;
    e->w = TE_DPTR(t->model);
    e->w_dt = t->model ? (int)t->model_dtype : TE_OPTIM_W_NONE;
    e->w_scale = TE_DPTR(t->model ? t->model_scale : 0);
    e->w_scale_inv = TE_DPTR(t->model ? t->model_scale_inv : 0);
    e->w_amax = TE_DPTR(t->model ? t->model_amax : 0);
    e->n = t->numel;
    e->block0 = (unsigned)blocks;
    e->nblocks = (unsigned)nb;
    e->g_dt = (int)t->grad_dtype;
    /* 4-element vectors: 16 bytes of F32, 8 of a 16-bit type, 4 of FP8 */
    e->vec = te_optim_aligned(t->param, 16) && te_optim_aligned(t->grad, 4 * gsz) &&
             te_optim_aligned(need_m ? t->exp_avg : 0, 16) &&
             te_optim_aligned(need_v ? t->exp_avg_sq : 0, 16) &&
             te_optim_aligned(t->model, 4 * wsz);
    blocks += nb;
  }
  if (p.count) {
    void *args[] = {&p};
    TE_CHECK(te_optim_launch(k, (unsigned)blocks, args, stream));
  }
  if (st->state) {   /* after every batch has read the step number */
    struct te_optim_commit_args a = {.state = TE_DPTR(st->state),
                                     .found_inf = TE_DPTR(st->found_inf)};
    void *args[TE_KNPARAMS(TE_OPTIM_COMMIT_PARAMS)];
    te_optim_commit_args_ptrs(&a, args);
    TE_CHECK(te_optim_launch(TE_OPTIM_K_COMMIT, 1, args, stream));
  }
  return TECORE_SUCCESS;
}

/* cfg->state: 0, or an 8-byte aligned device address. */
static tecore_result_t check_state(tecore_devptr_t state, const char *fn) {
  TE_ARG(state % 8 == 0, "%s: cfg->state (0x%llx) is not aligned to 8 bytes", fn,
         (unsigned long long)state);
  TE_CHECK(check_extent(state, 1, sizeof(struct tecore_optim_state), fn, (size_t)-1,
                        "cfg->state"));
  return TECORE_SUCCESS;
}

/* ---- entry points -------------------------------------------------------------- */

TE_EXPORT tecore_result_t tecore_adam_step(const struct tecore_optim_tensor *tensors, size_t count,
                                           const struct tecore_adam_config *cfg,
                                           tecore_devptr_t grad_scale_inv,
                                           tecore_devptr_t found_inf, tecore_stream_t stream) {
  static const char fn[] = "tecore_adam_step";
  TE_CHECK(check_common(tensors, count, cfg, grad_scale_inv, found_inf, fn));
  TE_CHECK(check_state(cfg->state, fn));
  /* with cfg->state, lr and step come from device memory */
  const double lr = cfg->state ? 0.0 : cfg->lr;
  const int64_t stepno = cfg->state ? 1 : cfg->step;
  TE_ARG(finite_f(lr) && lr >= 0, "%s: cfg->lr %g is not a finite value >= 0", fn, lr);
  TE_ARG(cfg->beta1 >= 0 && cfg->beta1 < 1, "%s: cfg->beta1 %g is not in [0, 1)", fn, cfg->beta1);
  TE_ARG(cfg->beta2 >= 0 && cfg->beta2 < 1, "%s: cfg->beta2 %g is not in [0, 1)", fn, cfg->beta2);
  TE_ARG(finite_f(cfg->eps) && cfg->eps >= 0, "%s: cfg->eps %g is not a finite value >= 0", fn,
         cfg->eps);
  TE_ARG(finite_f(cfg->weight_decay) && cfg->weight_decay >= 0,
         "%s: cfg->weight_decay %g is not a finite value >= 0", fn, cfg->weight_decay);
  TE_ARG(stepno >= 1, "%s: cfg->step %lld is not >= 1", fn, (long long)stepno);
  TE_ARG(!(cfg->flags & ~(TECORE_ADAM_W | TECORE_ADAM_NO_BIAS_CORRECTION)),
         "%s: cfg->flags 0x%x has unknown bits", fn, cfg->flags);

  struct te_optim_hp hp;
  memset(&hp, 0, sizeof hp);
  double bc1 = 1.0, bc2 = 1.0;
  if (!(cfg->flags & TECORE_ADAM_NO_BIAS_CORRECTION)) {
    bc1 = 1.0 - pow(cfg->beta1, (double)stepno);
    bc2 = 1.0 - pow(cfg->beta2, (double)stepno);
  }
  struct te_optim_dev_hp dhp = {.beta1 = cfg->beta1, .beta2 = cfg->beta2,
                                .wd = cfg->weight_decay,
                                .bias_correction = !(cfg->flags & TECORE_ADAM_NO_BIAS_CORRECTION)};
  hp.kind = (cfg->flags & TECORE_ADAM_W) ? TE_OPTIM_ADAMW : TE_OPTIM_ADAM_L2;
  hp.lr = (float)lr;
  hp.beta1 = (float)cfg->beta1;
  hp.beta2 = (float)cfg->beta2;
  hp.omb1 = (float)(1.0 - cfg->beta1);
  hp.omb2 = (float)(1.0 - cfg->beta2);
  hp.eps = (float)cfg->eps;
  hp.wd = (float)cfg->weight_decay;
  hp.step_size = (float)(lr / bc1);
  hp.bc2_sqrt = (float)sqrt(bc2);
  hp.decay = (float)(1.0 - lr * cfg->weight_decay);
  TE_ARG(isfinite(hp.step_size) && hp.bc2_sqrt > 0,
         "%s: cfg: lr / (1 - beta1^step) = %g or sqrt(1 - beta2^step) = %g is out of float "
         "range", fn, lr / bc1, sqrt(bc2));
  TE_ARG(isfinite(hp.decay), "%s: cfg: 1 - lr * weight_decay is out of float range", fn);

  for (size_t i = 0; i < count; i++)   /* everything checked before any launch */
    TE_CHECK(check_tensor(&tensors[i], i, 1, 1, fn));
  const struct optim_step st = {.tensors = tensors, .count = count, .gsi = grad_scale_inv,
                                .found_inf = found_inf, .state = cfg->state, .need_m = 1,
                                .need_v = 1, .fn = fn};
  TE_CHECK(check_step_alias(&st));
  TE_CHECK(step_launch(TE_OPTIM_K_ADAM, &st, &hp, &dhp, stream));
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_sgd_step(const struct tecore_optim_tensor *tensors, size_t count,
                                          const struct tecore_sgd_config *cfg,
                                          tecore_devptr_t grad_scale_inv,
                                          tecore_devptr_t found_inf, tecore_stream_t stream) {
  static const char fn[] = "tecore_sgd_step";
  TE_CHECK(check_common(tensors, count, cfg, grad_scale_inv, found_inf, fn));
  TE_CHECK(check_state(cfg->state, fn));
  const double lr = cfg->state ? 0.0 : cfg->lr;
  const int64_t stepno = cfg->state ? 1 : cfg->step;
  TE_ARG(finite_f(lr) && lr >= 0, "%s: cfg->lr %g is not a finite value >= 0", fn, lr);
  TE_ARG(finite_f(cfg->momentum) && cfg->momentum >= 0,
         "%s: cfg->momentum %g is not a finite value >= 0", fn, cfg->momentum);
  TE_ARG(finite_f(cfg->dampening) && finite_f(1.0 - cfg->dampening),
         "%s: cfg->dampening %g is not finite", fn, cfg->dampening);
  TE_ARG(finite_f(cfg->weight_decay) && cfg->weight_decay >= 0,
         "%s: cfg->weight_decay %g is not a finite value >= 0", fn, cfg->weight_decay);
  TE_ARG(stepno >= 1, "%s: cfg->step %lld is not >= 1", fn, (long long)stepno);
  TE_ARG(!(cfg->flags & ~TECORE_SGD_NESTEROV), "%s: cfg->flags 0x%x has unknown bits", fn,
         cfg->flags);
  int nesterov = (cfg->flags & TECORE_SGD_NESTEROV) != 0;
  TE_ARG(!nesterov || (cfg->momentum > 0 && cfg->dampening == 0),
         "%s: cfg: Nesterov needs momentum > 0 and dampening 0 (momentum %g, dampening %g)", fn,
         cfg->momentum, cfg->dampening);

  struct te_optim_hp hp;
  memset(&hp, 0, sizeof hp);
  hp.kind = TE_OPTIM_SGD;
  hp.lr = (float)lr;
  hp.wd = (float)cfg->weight_decay;
  hp.momentum = (float)cfg->momentum;
  hp.damp1 = (float)(1.0 - cfg->dampening);
  hp.first = stepno == 1;
  struct te_optim_dev_hp dhp = {.wd = cfg->weight_decay};
  hp.nesterov = nesterov;
  /* a momentum that rounds to 0 in float is no momentum: the kernels test the float */
  int need_m = hp.momentum != 0.0f;

  for (size_t i = 0; i < count; i++) TE_CHECK(check_tensor(&tensors[i], i, need_m, 0, fn));
  const struct optim_step st = {.tensors = tensors, .count = count, .gsi = grad_scale_inv,
                                .found_inf = found_inf, .state = cfg->state, .need_m = need_m,
                                .fn = fn};
  TE_CHECK(check_step_alias(&st));
  TE_CHECK(step_launch(TE_OPTIM_K_SGD, &st, &hp, &dhp, stream));
  return TECORE_SUCCESS;
}
