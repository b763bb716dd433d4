/* SPDX-License-Identifier: Apache-2.0 */
/* optim_reduce.c -- tecore_l2norm_multi (with its workspace size),
 * tecore_clip_grad_norm (the norm and the clipping scale, on the device) and
 * tecore_unscale_multi: the loss-scaling and gradient-norm helpers of an
 * optimizer step, over lists of plain F32 / F16 / BF16 tensors read as flat
 * arrays.  The tensors go to the kernels by value in batches (TE_L2_MAX,
 * TE_UNSCALE_MAX a launch); every argument is checked before the first
 * launch. */
#include "optim/optim_internal.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* A plain F32 / F16 / BF16 tensor with its data set (or empty). */
static tecore_result_t check_plain(const struct tecore_tensor *t, const char *fn,
                                   const char *arg) {
  TE_CHECK(te_tensor_check(t, TECORE_TENSOR_ROWWISE, fn, arg));
  if (t->scaling != TECORE_SCALING_NONE || !te_dtype_is_hp(t->dtype))
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s must be f32, f16 or bf16 with scaling none (is %s, %s)",
                  fn, arg, tecore_dtype_name(t->dtype), tecore_scaling_name(t->scaling));
  return TECORE_SUCCESS;
}

/* Checks the norm's tensors and counts their blocks (the partial sums). */
static tecore_result_t l2_check(const struct tecore_tensor *tensors, size_t count, const char *fn,
                                uint64_t *nparts) {
  char arg[40];
  uint64_t total = 0;
  TE_ARG(count == 0 || tensors, "%s: tensors is NULL", fn);
  for (size_t i = 0; i < count; i++) {
    snprintf(arg, sizeof arg, "tensors[%zu]", i);
    TE_CHECK(check_plain(&tensors[i], fn, arg));
    total += te_red_blocks(tecore_tensor_numel(&tensors[i]));
    TE_ARG(total <= TE_OPTIM_MAX_BLOCKS, "%s: the tensors hold too many elements (over %llu)",
           fn, TE_OPTIM_MAX_BLOCKS * TE_RED_CHUNK);
  }
  *nparts = total;
  return TECORE_SUCCESS;
}

/* te/optim.h's rule: the partial sums (the used part of workspace), norm,
 * found_inf and (clip) scale are written, the tensors read; none shares a
 * byte with another (a scale inside a gradient would change the norm's
 * input while it is read). */
static tecore_result_t l2_alias(const struct tecore_tensor *tensors, size_t count,
                                tecore_devptr_t ws, size_t ws_used, tecore_devptr_t norm,
                                tecore_devptr_t found_inf, tecore_devptr_t scale,
                                const char *fn) {
  struct te_span small[8], *s = small;
  if (count + 4 > TE_ARRAY_SIZE(small) && !(s = malloc((count + 4) * sizeof *s)))
    return TE_ERR(TECORE_ERR_NOMEM, "%s: no host memory to check %zu tensors", fn, count);
  size_t n = 0;
  s[n++] = (struct te_span){"workspace", ws, ws_used, TE_ACCESS_WRITE, 0, NULL, 0};
  s[n++] = (struct te_span){"norm", norm, 4, TE_ACCESS_WRITE, 0, NULL, 0};
  s[n++] = (struct te_span){"found_inf", found_inf, 4, TE_ACCESS_WRITE, 0, NULL, 0};
  s[n++] = (struct te_span){"scale", scale, scale ? 4 : 0, TE_ACCESS_WRITE, 0, NULL, 0};
  for (size_t i = 0; i < count; i++) {
    size_t bytes = tecore_tensor_numel(&tensors[i]) * tecore_dtype_size(tensors[i].dtype);
    s[n++] = (struct te_span){"tensors", tensors[i].data, bytes, TE_ACCESS_READ, 0, "", i};
  }
  tecore_result_t r = te_check_spans(s, n, fn);
  if (s != small) free(s);
  return r;
}

TE_EXPORT tecore_result_t tecore_l2norm_multi_workspace_size(const struct tecore_tensor *tensors,
                                                             size_t count, size_t *bytes) {
  static const char fn[] = "tecore_l2norm_multi_workspace_size";
  TE_ARG(bytes, "%s: bytes is NULL", fn);
  uint64_t nparts;
  TE_CHECK(l2_check(tensors, count, fn, &nparts));
  *bytes = (size_t)nparts * sizeof(double);
  return TECORE_SUCCESS;
}

/* What the final stage writes: the norm, and (clip) the gradient scale
 * min(1, max_norm / (norm + 1e-6)). */
struct l2_out {
  tecore_devptr_t norm, scale, found_inf;
  float max_norm;
};

static tecore_result_t l2_run(const struct tecore_tensor *tensors, size_t count,
                              tecore_devptr_t workspace, size_t workspace_bytes,
                              const struct l2_out *o, tecore_stream_t stream, const char *fn) {
  tecore_devptr_t norm = o->norm, found_inf = o->found_inf;
  uint64_t nparts;
  TE_CHECK(l2_check(tensors, count, fn, &nparts));
  TE_ARG(norm, "%s: norm is 0", fn);
  TE_ARG(norm % 4 == 0, "%s: norm (0x%llx) is not aligned to 4 bytes", fn,
         (unsigned long long)norm);
  TE_ARG(found_inf % 4 == 0, "%s: found_inf (0x%llx) is not aligned to 4 bytes", fn,
         (unsigned long long)found_inf);
  if (nparts) {
    TE_ARG(workspace, "%s: workspace is 0 (%llu bytes are needed)", fn,
           (unsigned long long)(nparts * sizeof(double)));
    TE_ARG(workspace % 8 == 0, "%s: workspace (0x%llx) is not aligned to 8 bytes", fn,
           (unsigned long long)workspace);
    TE_ARG(workspace_bytes >= nparts * sizeof(double),
           "%s: workspace_bytes %zu is too small (%llu are needed; see "
           "tecore_l2norm_multi_workspace_size)", fn, workspace_bytes,
           (unsigned long long)(nparts * sizeof(double)));
    /* vdev: the bytes the kernels write, inside an allocation */
    TE_CHECK(te_dev_check_range(workspace, (size_t)nparts * sizeof(double), fn, "workspace"));
  }
  TE_CHECK(te_dev_check_range(norm, sizeof(float), fn, "norm"));
  if (found_inf) TE_CHECK(te_dev_check_range(found_inf, sizeof(int32_t), fn, "found_inf"));
  TE_CHECK(l2_alias(tensors, count, workspace, (size_t)nparts * sizeof(double), norm, found_inf,
                    o->scale, fn));

  /* stage 1: partial sums, TE_L2_MAX tensors a launch */
  struct te_l2_params p;
  memset(&p, 0, sizeof p);
  p.partial = TE_DPTR(workspace);
  unsigned blocks = 0;
  for (size_t i = 0; i < count; i++) {
    uint64_t n = tecore_tensor_numel(&tensors[i]);
    if (n == 0) continue;
    if (p.count == TE_L2_MAX) {
      void *args[] = {&p};
      TE_CHECK(te_optim_launch(TE_OPTIM_K_L2_PARTIAL, blocks, args, stream));
      p.base += blocks;
      p.count = 0;
      blocks = 0;
    }
    struct te_l2_entry *e = &p.e[p.count++];
    size_t esz = tecore_dtype_size(tensors[i].dtype);
    e->x = TE_DPTR(tensors[i].data);
    e->n = n;
    e->block0 = blocks;
    e->nblocks = (unsigned)te_red_blocks(n);
    e->dt = (int)tensors[i].dtype;
    e->vec = te_optim_aligned(tensors[i].data, 4 * esz);
    blocks += e->nblocks;
  }
  if (p.count) {
    void *args[] = {&p};
    TE_CHECK(te_optim_launch(TE_OPTIM_K_L2_PARTIAL, blocks, args, stream));
  }

  /* stage 2: one block adds the partials in index order */
  struct te_optim_l2_final_args a = {.partial = TE_DPTR(workspace), .nparts = (unsigned)nparts,
                                     .norm = TE_DPTR(norm), .found_inf = TE_DPTR(found_inf),
                                     .scale = TE_DPTR(o->scale), .max_norm = o->max_norm};
  void *args[TE_KNPARAMS(TE_OPTIM_L2_FINAL_PARAMS)];
  te_optim_l2_final_args_ptrs(&a, args);
  TE_CHECK(te_optim_launch(TE_OPTIM_K_L2_FINAL, 1, args, stream));
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_l2norm_multi(const struct tecore_tensor *tensors, size_t count,
                                              tecore_devptr_t workspace, size_t workspace_bytes,
                                              tecore_devptr_t norm, tecore_devptr_t found_inf,
                                              tecore_stream_t stream) {
  struct l2_out o = {.norm = norm, .found_inf = found_inf};
  return l2_run(tensors, count, workspace, workspace_bytes, &o, stream, "tecore_l2norm_multi");
}

TE_EXPORT tecore_result_t tecore_clip_grad_norm(const struct tecore_tensor *tensors, size_t count,
                                                tecore_devptr_t workspace, size_t workspace_bytes,
                                                float max_norm, tecore_devptr_t norm,
                                                tecore_devptr_t scale, tecore_devptr_t found_inf,
                                                tecore_stream_t stream) {
  static const char fn[] = "tecore_clip_grad_norm";
  TE_ARG(max_norm > 0 && max_norm <= 3.0e38f, "%s: max_norm %g is not a finite value > 0", fn,
         (double)max_norm);
  TE_ARG(scale, "%s: scale is 0", fn);
  TE_ARG(scale % 4 == 0, "%s: scale (0x%llx) is not aligned to 4 bytes", fn,
         (unsigned long long)scale);
  TE_ARG(scale != norm && (!found_inf || scale != found_inf),
         "%s: scale (0x%llx) is norm or found_inf", fn, (unsigned long long)scale);
  TE_CHECK(te_dev_check_range(scale, sizeof(float), fn, "scale"));
  struct l2_out o = {.norm = norm, .scale = scale, .found_inf = found_inf, .max_norm = max_norm};
  return l2_run(tensors, count, workspace, workspace_bytes, &o, stream, fn);
}

/* te/optim.h's rule: out[i] may be in[i] itself (in place is one thread
 * reading then writing its own elements: only exactly the same buffer with
 * the same element size is safe); nothing written may share a byte with
 * anything else of the call, across all pairs. */
static tecore_result_t unscale_alias(const struct tecore_tensor *in,
                                     const struct tecore_tensor *out, size_t count,
                                     tecore_devptr_t scale, tecore_devptr_t found_inf,
                                     const char *fn) {
  struct te_span small[10], *s = small;
  if (2 * count + 2 > TE_ARRAY_SIZE(small) && !(s = malloc((2 * count + 2) * sizeof *s)))
    return TE_ERR(TECORE_ERR_NOMEM, "%s: no host memory to check %zu tensors", fn, count);
  size_t n = 0;
  s[n++] = (struct te_span){"scale", scale, 4, TE_ACCESS_READ, 0, NULL, 0};
  s[n++] = (struct te_span){"found_inf", found_inf, 4, TE_ACCESS_WRITE, 0, NULL, 0};
  for (size_t i = 0; i < count; i++) {
    size_t e = tecore_tensor_numel(&in[i]);
    unsigned pair = (unsigned)i + 1u;
    s[n++] = (struct te_span){"out", out[i].data, e * tecore_dtype_size(out[i].dtype),
                              TE_ACCESS_WRITE, pair, "", i};
    s[n++] = (struct te_span){"in", in[i].data, e * tecore_dtype_size(in[i].dtype),
                              TE_ACCESS_READ, pair, "", i};
  }
  tecore_result_t r = te_check_spans(s, n, fn);
  if (s != small) free(s);
  return r;
}

TE_EXPORT tecore_result_t tecore_unscale_multi(const struct tecore_tensor *in,
                                               const struct tecore_tensor *out, size_t count,
                                               tecore_devptr_t scale, tecore_devptr_t found_inf,
                                               tecore_stream_t stream) {
  static const char fn[] = "tecore_unscale_multi";
  TE_ARG(count == 0 || in, "%s: in is NULL", fn);
  TE_ARG(count == 0 || out, "%s: out is NULL", fn);
  TE_ARG(scale, "%s: scale is 0", fn);
  TE_ARG(scale % 4 == 0, "%s: scale (0x%llx) is not aligned to 4 bytes", fn,
         (unsigned long long)scale);
  TE_ARG(found_inf % 4 == 0, "%s: found_inf (0x%llx) is not aligned to 4 bytes", fn,
         (unsigned long long)found_inf);
  char ain[40], aout[40];
  for (size_t i = 0; i < count; i++) {   /* everything checked before any launch */
    snprintf(ain, sizeof ain, "in[%zu]", i);
    snprintf(aout, sizeof aout, "out[%zu]", i);
    TE_CHECK(check_plain(&in[i], fn, ain));
    TE_CHECK(check_plain(&out[i], fn, aout));
    size_t n = tecore_tensor_numel(&in[i]);
    TE_ARG(tecore_tensor_numel(&out[i]) == n, "%s: %s has %zu elements, %s has %zu", fn, aout,
           tecore_tensor_numel(&out[i]), ain, n);
    TE_ARG(te_optim_blocks(n) <= TE_OPTIM_MAX_BLOCKS, "%s: %s is too large (%zu elements)", fn,
           ain, n);
  }
  TE_CHECK(unscale_alias(in, out, count, scale, found_inf, fn));
  /* in the parameter block: the launch-time checker cannot see them */
  TE_CHECK(te_dev_check_range(scale, sizeof(float), fn, "scale"));
  if (found_inf) TE_CHECK(te_dev_check_range(found_inf, sizeof(int32_t), fn, "found_inf"));

  struct te_unscale_params p;
  memset(&p, 0, sizeof p);
  p.scale = TE_DPTR(scale);
  p.found_inf = TE_DPTR(found_inf);
  uint64_t blocks = 0;
  for (size_t i = 0; i < count; i++) {
    uint64_t n = tecore_tensor_numel(&in[i]);
    if (n == 0) continue;
    uint64_t nb = te_optim_blocks(n);
    if (p.count == TE_UNSCALE_MAX || blocks + nb > TE_OPTIM_MAX_BLOCKS) {
      void *args[] = {&p};
      TE_CHECK(te_optim_launch(TE_OPTIM_K_UNSCALE, (unsigned)blocks, args, stream));
      p.count = 0;
      blocks = 0;
    }
    struct te_unscale_entry *e = &p.e[p.count++];
    memset(e, 0, sizeof *e);
    e->in = TE_DPTR(in[i].data);
    e->out = TE_DPTR(out[i].data);
    e->n = n;
    e->block0 = (unsigned)blocks;
    e->nblocks = (unsigned)nb;
    e->in_dt = (int)in[i].dtype;
    e->out_dt = (int)out[i].dtype;
    e->vec = te_optim_aligned(in[i].data, 4 * tecore_dtype_size(in[i].dtype)) &&
             te_optim_aligned(out[i].data, 4 * tecore_dtype_size(out[i].dtype));
    blocks += nb;
  }
  if (p.count) {
    void *args[] = {&p};
    TE_CHECK(te_optim_launch(TE_OPTIM_K_UNSCALE, (unsigned)blocks, args, stream));
  }
  return TECORE_SUCCESS;
}
