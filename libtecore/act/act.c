/* SPDX-License-Identifier: Apache-2.0 */
/* act.c -- activations forward and backward (te/activation.h): the kernel
 * table (its vdev twins are act_vdev.c's), and the public entry points that validate, choose the vector or element path, and
 * launch.  The element math is kernels/common/act.h on both backends. */
#include "act/act_internal.h"
#include <te/activation.h>

/* ---- the table ------------------------------------------------------------------ */

/* Kernel 2*kind is kind's forward, 2*kind+1 its backward. */
#define ACT_DEFS(kn)                                                        \
  TE_KDEF("te_act_fwd_" #kn, te_act_vdev_fwd_##kn, TE_ACT_FWD_PARAMS),         \
  TE_KDEF("te_act_bwd_" #kn, te_act_vdev_bwd_##kn, TE_ACT_BWD_PARAMS)
/* then the elementwise kinds' backward with column sums, 14 + kind */
#define ACT_K_COLSUM (2 * TECORE_ACT_COUNT_)
#define ACT_COLSUM_DEF(kn) \
  TE_KDEF("te_act_bwd_colsum_" #kn, te_act_vdev_bwd_colsum_##kn, TE_ACT_BWD_COLSUM_PARAMS)
static const struct tecore_kernel_def act_kernels[] = {
    ACT_DEFS(gelu), ACT_DEFS(relu), ACT_DEFS(silu), ACT_DEFS(qgelu),
    ACT_DEFS(swiglu), ACT_DEFS(geglu), ACT_DEFS(reglu),
    ACT_COLSUM_DEF(gelu), ACT_COLSUM_DEF(relu), ACT_COLSUM_DEF(silu), ACT_COLSUM_DEF(qgelu),
};
_Static_assert(TECORE_ACT_COUNT_ == 7 && TECORE_ACT_GELU == 0 && TECORE_ACT_QGELU == 3,
               "the column-sum kernels follow the 14 forward/backward ones, kinds 0-3");

#define ACT_ALIGNS TE_KALIGN(TE_ACT_FWD_PARAMS), TE_KALIGN(TE_ACT_BWD_PARAMS)
#define ACT_CS_ALIGN TE_KALIGN(TE_ACT_BWD_COLSUM_PARAMS)
static const struct te_kalign act_align[] = {
    ACT_ALIGNS,   ACT_ALIGNS,   ACT_ALIGNS,   ACT_ALIGNS,   ACT_ALIGNS, ACT_ALIGNS, ACT_ALIGNS,
    ACT_CS_ALIGN, ACT_CS_ALIGN, ACT_CS_ALIGN, ACT_CS_ALIGN,
};

TE_KERNEL_TABLE_FATBIN_ALIGNED(act_first_id, "libtecore/act", act_kernels, act_align, act)

/* ---- public entry points ---------------------------------------------------------- */

static const char *const act_names[TECORE_ACT_COUNT_] = {"gelu", "relu", "silu", "qgelu",
                                                         "swiglu", "geglu", "reglu"};

TE_EXPORT const char *tecore_activation_name(tecore_activation_t act) {
  return (unsigned)act < TECORE_ACT_COUNT_ ? act_names[act] : "?";
}

TE_EXPORT int tecore_activation_is_gated(tecore_activation_t act) {
  return (unsigned)act < TECORE_ACT_COUNT_ && te_act_is_gated((int)act);
}

/* Blocks of the grid-stride launch: enough to fill an H100 (132 SMs) with
 * 8 blocks of 256 threads each (the elementwise kinds' full occupancy),
 * fewer for small tensors. */
#define ACT_THREADS 256u
#define ACT_MAX_BLOCKS (132u * 8u)

static void act_shape(uint64_t work, struct tecore_launch_cfg *cfg) {
  uint64_t blocks = (work + ACT_THREADS - 1) / ACT_THREADS;
  if (blocks > ACT_MAX_BLOCKS) blocks = ACT_MAX_BLOCKS;
  if (blocks == 0) blocks = 1;
  *cfg = (struct tecore_launch_cfg){.grid = {(unsigned)blocks, 1, 1}, .block = {ACT_THREADS, 1, 1}};
}

/* The shapes of one call: rows x cols of the output (fwd) or dy (bwd). */
static tecore_result_t act_shapes(tecore_activation_t act, const struct tecore_tensor *narrow,
                                  const char *narrow_name, const struct tecore_tensor *wide,
                                  const char *wide_name, const char *fn, uint64_t *rows,
                                  uint64_t *cols) {
  size_t nr, nc, wr, wc;
  te_tensor_view(narrow, &nr, &nc);
  te_tensor_view(wide, &wr, &wc);
  if (te_act_is_gated((int)act)) {
    if (wr != nr || wc != 2 * nc)
      return TE_ERR(TECORE_ERR_INVALID,
                    "%s: %s is %zu x %zu, %s is %zu x %zu: a gated activation needs "
                    "[rows][2*cols] and [rows][cols]",
                    fn, wide_name, wr, wc, narrow_name, nr, nc);
  } else if (tecore_tensor_numel(narrow) != tecore_tensor_numel(wide)) {
    return TE_ERR(TECORE_ERR_INVALID, "%s: %s has %zu elements, %s %zu", fn, wide_name,
                  tecore_tensor_numel(wide), narrow_name, tecore_tensor_numel(narrow));
  }
  if (te_act_is_gated((int)act)) {
    *rows = nr;
    *cols = nc;
  } else {
    *rows = 1;
    *cols = tecore_tensor_numel(narrow);
  }
  return TECORE_SUCCESS;
}

/* te/activation.h's rule: what a call writes (out's data, amax and
 * scale_inv) shares no byte with what it reads nor with itself, except
 * that the output's data may be exactly an input's (same address, same
 * bytes, same element size): in place, each element is read and then
 * written by one thread.  in2 (backward's x) may be NULL. */
static tecore_result_t act_alias(const struct tecore_tensor *out, const char *aout,
                                 const struct tecore_tensor *in, const char *ain,
                                 const struct tecore_tensor *in2, const char *ain2,
                                 tecore_devptr_t noop_flag, const char *fn) {
  struct te_tensor_spans l = {.access = TE_ACCESS_WRITE, .pair = 1};
  te_tensor_spans(out, aout, TE_SPAN_DATA, &l);
  l.pair = 0;
  te_tensor_spans(out, aout, TE_SPAN_AMAX | TE_SPAN_SCALE_INV, &l);
  l.access = TE_ACCESS_READ;
  te_tensor_spans(out, aout, TE_SPAN_SCALE, &l);
  te_span_add(&l, "noop_flag", noop_flag, 4);
  size_t osz = tecore_dtype_size(out->dtype);
  l.pair = tecore_dtype_size(in->dtype) == osz;
  te_tensor_spans(in, ain, TE_SPAN_DATA, &l);
  if (in2) {
    l.pair = tecore_dtype_size(in2->dtype) == osz;
    te_tensor_spans(in2, ain2, TE_SPAN_DATA, &l);
  }
  return te_check_spans(l.span, l.n, fn);
}

TE_EXPORT tecore_result_t tecore_act_fwd(tecore_activation_t act, const struct tecore_tensor *in,
                                         struct tecore_tensor *out, tecore_devptr_t noop_flag,
                                         tecore_stream_t stream) {
  TE_ARG((unsigned)act < TECORE_ACT_COUNT_, "%s: act %d is not a tecore_activation_t", __func__,
         (int)act);
  TE_CHECK(te_check_hp_input(in, __func__, "in"));
  TE_CHECK(te_check_fused_output(out, __func__, "out"));
  TE_ARG(noop_flag % 4 == 0, "%s: noop_flag (0x%llx) is not aligned to 4 bytes", __func__,
         (unsigned long long)noop_flag);
  uint64_t rows, cols;
  TE_CHECK(act_shapes(act, out, "out", in, "in", __func__, &rows, &cols));
  TE_CHECK(act_alias(out, "out", in, "in", NULL, NULL, noop_flag, __func__));
  if (noop_flag) TE_CHECK(te_dev_check_range(noop_flag, 4, __func__, "noop_flag"));
  if (rows * cols == 0) return TECORE_SUCCESS;
  int id = act_first_id();
  if (id < 0) return TE_ERR(TECORE_ERR_INTERNAL, "%s: the activation kernels did not register", __func__);
  int vec = te_al16(in->data) && te_al16(out->data) &&
            (!te_act_is_gated((int)act) || cols % 8 == 0);
  struct tecore_launch_cfg cfg;
  act_shape(vec ? rows * cols / 8 : rows * cols, &cfg);
  struct te_act_fwd_args a = {.in = TE_DPTR(in->data), .out = TE_DPTR(out->data),
                              .noop = TE_DPTR(noop_flag), .rows = rows, .cols = cols,
                              .dtypes = (int)in->dtype | ((int)out->dtype << 4), .vec = vec};
  for (int pass = 0; pass < te_qout_passes(out); pass++) {
    struct te_qout q;
    TE_CHECK(te_qout_begin(out, pass, noop_flag, stream, &q));
    a.scale = q.scale;
    a.amax = q.amax;
    a.scale_inv = q.scale_inv;
    void *args[TE_KNPARAMS(TE_ACT_FWD_PARAMS)];
    te_act_fwd_args_ptrs(&a, args);
    TE_CHECK(te_kernel_launch_pdl(id + 2 * (int)act, &cfg, args, stream));
  }
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_act_bwd(tecore_activation_t act, const struct tecore_tensor *dy,
                                         const struct tecore_tensor *x, struct tecore_tensor *dx,
                                         tecore_stream_t stream) {
  TE_ARG((unsigned)act < TECORE_ACT_COUNT_, "%s: act %d is not a tecore_activation_t", __func__,
         (int)act);
  TE_CHECK(te_check_hp_input(dy, __func__, "dy"));
  TE_CHECK(te_check_hp_input(x, __func__, "x"));
  TE_CHECK(te_check_fused_output(dx, __func__, "dx"));
  uint64_t rows, cols;
  TE_CHECK(act_shapes(act, dy, "dy", x, "x", __func__, &rows, &cols));
  if (tecore_tensor_numel(dx) != tecore_tensor_numel(x))
    return TE_ERR(TECORE_ERR_INVALID, "%s: dx has %zu elements, x %zu", __func__,
                  tecore_tensor_numel(dx), tecore_tensor_numel(x));
  TE_CHECK(act_alias(dx, "dx", dy, "dy", x, "x", 0, __func__));
  if (rows * cols == 0) return TECORE_SUCCESS;
  int id = act_first_id();
  if (id < 0) return TE_ERR(TECORE_ERR_INTERNAL, "%s: the activation kernels did not register", __func__);
  int vec = te_al16(dy->data) && te_al16(x->data) && te_al16(dx->data) &&
            (!te_act_is_gated((int)act) || cols % 8 == 0);
  struct tecore_launch_cfg cfg;
  act_shape(vec ? rows * cols / 8 : rows * cols, &cfg);
  struct te_act_bwd_args a = {
      .dy = TE_DPTR(dy->data), .x = TE_DPTR(x->data), .dx = TE_DPTR(dx->data), .rows = rows,
      .cols = cols, .dtypes = (int)dy->dtype | ((int)x->dtype << 4) | ((int)dx->dtype << 8),
      .vec = vec};
  for (int pass = 0; pass < te_qout_passes(dx); pass++) {
    struct te_qout q;
    TE_CHECK(te_qout_begin(dx, pass, 0, stream, &q));
    a.scale = q.scale;
    a.amax = q.amax;
    a.scale_inv = q.scale_inv;
    void *args[TE_KNPARAMS(TE_ACT_BWD_PARAMS)];
    te_act_bwd_args_ptrs(&a, args);
    TE_CHECK(te_kernel_launch_pdl(id + 2 * (int)act + 1, &cfg, args, stream));
  }
  return TECORE_SUCCESS;
}

/* ---- the backward with column sums (the fuser's bias gradients) ------------------------ */

static int act_cs_tensor(const struct tecore_tensor *t, tecore_dtype_t dt, size_t rows,
                         size_t cols) {
  return t && t->ndim == 2 && t->dtype == dt && t->shape[0] == rows && t->shape[1] == cols &&
         t->data % 16 == 0 && t->scaling == TECORE_SCALING_NONE;
}

int te_act_bwd_colsum_ok(tecore_activation_t act, const struct tecore_tensor *dy,
                         const struct tecore_tensor *x, const struct tecore_tensor *dx) {
  if ((unsigned)act >= TECORE_ACT_COUNT_ || te_act_is_gated((int)act) || !dy || dy->ndim != 2)
    return 0;
  const tecore_dtype_t dt = dy->dtype;
  const size_t rows = dy->shape[0], cols = dy->shape[1];
  return (dt == TECORE_DTYPE_F32 || dt == TECORE_DTYPE_F16 || dt == TECORE_DTYPE_BF16) &&
         cols % 8 == 0 && act_cs_tensor(dy, dt, rows, cols) && act_cs_tensor(x, dt, rows, cols) &&
         act_cs_tensor(dx, dt, rows, cols);
}

tecore_result_t te_act_bwd_colsum(tecore_activation_t act, const struct tecore_tensor *dy,
                                  const struct tecore_tensor *x, const struct tecore_tensor *dx,
                                  tecore_devptr_t ws, size_t rpp, size_t parts,
                                  tecore_stream_t stream) {
  int id = act_first_id();
  if (id < 0) return TE_ERR(TECORE_ERR_INTERNAL, "the activation kernels did not register");
  if (!te_act_bwd_colsum_ok(act, dy, x, dx) || !rpp)
    return TE_ERR(TECORE_ERR_INTERNAL, "te_act_bwd_colsum: %s over these tensors is not a case "
                  "of the column-sum kernels", tecore_activation_name(act));
  const size_t rows = dy->shape[0], cols = dy->shape[1];
  if (!rows || !cols || !parts) return TECORE_SUCCESS;
  struct tecore_launch_cfg cfg = {
      .grid = {(unsigned)te_cdiv(cols, TE_COLSUM_VECS * 8), (unsigned)parts, 1},
      .block = {TE_COLSUM_VECS, TE_COLSUM_LANES, 1}};
  struct te_act_bwd_colsum_args k = {.dy = TE_DPTR(dy->data), .x = TE_DPTR(x->data),
                                     .dx = TE_DPTR(dx->data), .ws = TE_DPTR(ws), .rows = rows,
                                     .cols = cols, .rpp = rpp, .dtype = (int)dy->dtype};
  void *args[TE_KNPARAMS(TE_ACT_BWD_COLSUM_PARAMS)];
  te_act_bwd_colsum_args_ptrs(&k, args);
  return te_kernel_launch_pdl(id + ACT_K_COLSUM + (int)act, &cfg, args, stream);
}
