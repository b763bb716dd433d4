/* SPDX-License-Identifier: Apache-2.0 */
/* attn_libte.c -- libte's own attention kernels (kernels/attention.cu):
 * their table, the launches of a forward and a backward, and the two rows
 * of the backend table that run them: "libte" on a GPU, and "vdev" on the
 * virtual device, where the table's entries are attn_vdev.c's C
 * implementations (every problem, E4M3 included).
 *
 * The GPU kernels take BF16 and F16 with head_dim a multiple of 8 up to
 * 128 (64-wide tiles for head_dim <= 64, 128-wide above; the columns past
 * head_dim are zeros in shared memory), and every layout whose rows start
 * on 16 bytes.  E4M3 is cuDNN's (or vdev's): refused here.  The forward
 * is te_attn_fwd3 (two warpgroups of 64 query rows on wgmma) on compute
 * capability 9.0 where the build has sm_90a code (TECORE_ATTN_WGMMA),
 * else te_attn_fwd2 (4 warps of 32 query rows, two blocks an SM) where its
 * grid fits, te_attn_fwd (8 warps of 16 rows) otherwise; the backward
 * te_attn_bwd2 (8 warps of 16 keys) likewise, else te_attn_bwd; on vdev
 * each pair runs the same C twin. */
#include "attn/attn_internal.h"
#include <stdio.h>

/* ---- the table ------------------------------------------------------------------------- */

enum { K_SEQLENS, K_FWD64, K_FWD128, K_BWD_PREP, K_BWD64, K_BWD128, K_BWD_DQ, K_FWD2_64,
       K_FWD2_128, K_BWD2_64, K_BWD2_128, K_FWD3_64, K_FWD3_128, K_BWD3_64, K_BWD3_128,
       K_CHECK };

#define ATTN_DEF(sym, fn) TE_KDEF(sym, fn, TE_ATTN_PARAMS)
static const struct tecore_kernel_def attn_kernels[] = {
    [K_SEQLENS] = TE_KDEF("te_attn_seqlens", te_attn_vdev_seqlens, TE_ATTN_SEQLENS_PARAMS),
    [K_FWD64] = ATTN_DEF("te_attn_fwd_d64", te_attn_vdev_fwd),
    [K_FWD128] = ATTN_DEF("te_attn_fwd_d128", te_attn_vdev_fwd),
    [K_BWD_PREP] = ATTN_DEF("te_attn_bwd_prep", te_attn_vdev_bwd_prep),
    [K_BWD64] = ATTN_DEF("te_attn_bwd_d64", te_attn_vdev_bwd),
    [K_BWD128] = ATTN_DEF("te_attn_bwd_d128", te_attn_vdev_bwd),
    [K_BWD_DQ] = ATTN_DEF("te_attn_bwd_dq", te_attn_vdev_bwd_dq),
    [K_FWD2_64] = ATTN_DEF("te_attn_fwd2_d64", te_attn_vdev_fwd),
    [K_FWD2_128] = ATTN_DEF("te_attn_fwd2_d128", te_attn_vdev_fwd),
    [K_BWD2_64] = ATTN_DEF("te_attn_bwd2_d64", te_attn_vdev_bwd),
    [K_BWD2_128] = ATTN_DEF("te_attn_bwd2_d128", te_attn_vdev_bwd),
    [K_FWD3_64] = ATTN_DEF("te_attn_fwd3_d64", te_attn_vdev_fwd),
    [K_FWD3_128] = ATTN_DEF("te_attn_fwd3_d128", te_attn_vdev_fwd),
    [K_BWD3_64] = ATTN_DEF("te_attn_bwd3_d64", te_attn_vdev_bwd),
    [K_BWD3_128] = ATTN_DEF("te_attn_bwd3_d128", te_attn_vdev_bwd),
    [K_CHECK] = TE_KDEF("te_attn_seqlens_check", te_attn_vdev_seqlens_check, TE_ATTN_CHECK_PARAMS),
};
#define ATTN_ALIGN TE_KALIGN(TE_ATTN_PARAMS)
static const struct te_kalign attn_align[] = {
    [K_SEQLENS] = TE_KALIGN(TE_ATTN_SEQLENS_PARAMS),
    [K_FWD64] = ATTN_ALIGN, [K_FWD128] = ATTN_ALIGN, [K_BWD_PREP] = ATTN_ALIGN,
    [K_BWD64] = ATTN_ALIGN, [K_BWD128] = ATTN_ALIGN, [K_BWD_DQ] = ATTN_ALIGN,
    [K_FWD2_64] = ATTN_ALIGN, [K_FWD2_128] = ATTN_ALIGN,
    [K_BWD2_64] = ATTN_ALIGN, [K_BWD2_128] = ATTN_ALIGN,
    [K_FWD3_64] = ATTN_ALIGN, [K_FWD3_128] = ATTN_ALIGN,
    [K_BWD3_64] = ATTN_ALIGN, [K_BWD3_128] = ATTN_ALIGN,
    [K_CHECK] = TE_KALIGN(TE_ATTN_CHECK_PARAMS),
};

TE_KERNEL_TABLE_FATBIN_ALIGNED(attn_first_id, "libtecore/attn", attn_kernels, attn_align, attention)

static tecore_result_t attn_id(int *id) {
  *id = attn_first_id();
  if (*id < 0) return TE_ERR(TECORE_ERR_INTERNAL, "attention: the kernels did not register");
  return TECORE_SUCCESS;
}

static int attn_on_vdev(void) {
  tecore_backend_t b = TECORE_BACKEND_NONE;
  return tecore_backend(&b) == TECORE_SUCCESS && b == TECORE_BACKEND_VDEV;
}

/* ---- launches ---------------------------------------------------------------------------- */

tecore_result_t te_attn_launch_seqlens(tecore_devptr_t cu_q, tecore_devptr_t cu_kv, size_t batch,
                                       size_t len_q, size_t len_kv, tecore_stream_t stream) {
  int id;
  TE_CHECK(attn_id(&id));
  struct te_attn_seqlens_args a = {.cu_q = TE_DPTR(cu_q), .cu_kv = TE_DPTR(cu_kv),
                                   .batch = (int)batch, .len_q = (int)len_q,
                                   .len_kv = (int)len_kv};
  struct tecore_launch_cfg cfg = {.grid = {1, 1, 1}, .block = {256, 1, 1}};
  void *args[TE_KNPARAMS(TE_ATTN_SEQLENS_PARAMS)];
  te_attn_seqlens_args_ptrs(&a, args);
  return te_kernel_launch_pdl(id + K_SEQLENS, &cfg, args, stream);
}

tecore_result_t te_attn_launch_check(const struct te_attn_problem *p, tecore_devptr_t status,
                                     tecore_stream_t stream) {
  int id;
  TE_CHECK(attn_id(&id));
  struct te_attn_check_args a = {
      .cu_q = TE_DPTR(p->cu_seqlens_q), .cu_kv = TE_DPTR(p->cu_seqlens_kv),
      .status = TE_DPTR(status), .batch = (int)p->batch, .total_q = (long long)p->total_q,
      .total_kv = (long long)p->total_kv, .max_q = (int)p->max_seqlen_q,
      .max_kv = (int)p->max_seqlen_kv};
  struct tecore_launch_cfg cfg = {.grid = {1, 1, 1}, .block = {256, 1, 1}};
  void *args[TE_KNPARAMS(TE_ATTN_CHECK_PARAMS)];
  te_attn_check_args_ptrs(&a, args);
  return te_kernel_launch_pdl(id + K_CHECK, &cfg, args, stream);
}

static size_t attn_bwd_workspace(const struct te_attn_problem *p) {
  size_t rows = p->total_q * (size_t)p->heads;
  size_t dsum = (rows * sizeof(float) + 255) / 256 * 256;
  return dsum + rows * (size_t)p->head_dim * sizeof(float);
}

static void attn_params(const struct te_attn_problem *p, struct te_attn_params *k) {
  *k = (struct te_attn_params){
      .q = TE_DPTR(p->q.ptr), .k = TE_DPTR(p->k.ptr), .v = TE_DPTR(p->v.ptr),
      .o = TE_DPTR(p->o.ptr), .d_o = TE_DPTR(p->d_o.ptr), .dq = TE_DPTR(p->dq.ptr),
      .dk = TE_DPTR(p->dk.ptr), .dv = TE_DPTR(p->dv.ptr),
      .q_ts = (long long)p->q.token_stride, .q_hs = (long long)p->q.head_stride,
      .k_ts = (long long)p->k.token_stride, .k_hs = (long long)p->k.head_stride,
      .v_ts = (long long)p->v.token_stride, .v_hs = (long long)p->v.head_stride,
      .o_ts = (long long)p->o.token_stride, .o_hs = (long long)p->o.head_stride,
      .do_ts = (long long)p->d_o.token_stride, .do_hs = (long long)p->d_o.head_stride,
      .dq_ts = (long long)p->dq.token_stride, .dq_hs = (long long)p->dq.head_stride,
      .dk_ts = (long long)p->dk.token_stride, .dk_hs = (long long)p->dk.head_stride,
      .dv_ts = (long long)p->dv.token_stride, .dv_hs = (long long)p->dv.head_stride,
      .cu_q = TE_DPTR(p->cu_seqlens_q), .cu_kv = TE_DPTR(p->cu_seqlens_kv),
      .lse = TE_DPTR(p->lse),
      .total_q = (long long)p->total_q, .total_kv = (long long)p->total_kv,
      .batch = (int)p->batch, .heads = p->heads, .kv_heads = p->kv_heads,
      .head_dim = p->head_dim, .max_q = (int)p->max_seqlen_q, .max_kv = (int)p->max_seqlen_kv,
      .scale = p->scale, .scale_log2 = p->scale * 1.4426950408889634f, .causal = p->causal,
      .window = p->window_left, .qkv_dt = (int)p->qkv_dtype, .o_dt = (int)p->o_dtype,
      .q_si = TE_DPTR(p->q_scale_inv), .k_si = TE_DPTR(p->k_scale_inv),
      .v_si = TE_DPTR(p->v_scale_inv), .o_scale = TE_DPTR(p->o_scale),
      .o_scale_inv = TE_DPTR(p->o_scale_inv), .o_amax = TE_DPTR(p->o_amax),
      .s_amax = TE_DPTR(p->s_amax)};
}

static tecore_result_t attn_launch(int k, const struct te_attn_params *kp, unsigned gx,
                                   unsigned gy, unsigned gz, unsigned threads, unsigned smem,
                                   tecore_stream_t stream) {
  int id;
  TE_CHECK(attn_id(&id));
  struct tecore_launch_cfg cfg = {.grid = {gx, gy, gz}, .block = {threads, 1, 1},
                                  .shared_bytes = smem};
  struct te_attn_args a = {.p = kp};
  void *args[TE_KNPARAMS(TE_ATTN_PARAMS)];
  te_attn_args_ptrs(&a, args);
  return te_kernel_launch_pdl(id + k, &cfg, args, stream);
}

/* Shared memory of the forward: the Q tile and two K and V tiles; of the
 * backward: K and V, Q and dO, the P and dS tiles, lse and D, and the
 * next tile's Q, dO, lse and D (113 KiB at head_dim 128: two blocks an
 * SM). */
static unsigned attn_fwd_smem(int dp) {
  return (unsigned)(TE_ATTN_FWD_BM + 4 * TE_ATTN_FWD_BN) * (unsigned)dp * 2u;
}
/* te_attn_fwd2: the Q tile and two K and V tiles of rows padded to dp + 8
 * elements (102 KiB at head_dim 128, 90 KiB at 64: two blocks an SM). */
static unsigned attn_fwd2_smem(int dp) {
  unsigned bn = dp == 64 ? TE_ATTN_FWD2_BN64 : TE_ATTN_FWD2_BN128;
  return (TE_ATTN_FWD2_BM + 4u * bn) * (unsigned)(dp + 8) * 2u;
}
static unsigned attn_bwd_smem(int dp) {
  return (unsigned)(2 * TE_ATTN_BWD_BN + 4 * TE_ATTN_BWD_BM) * (unsigned)dp * 2u +
         2u * TE_ATTN_BWD_BM * TE_ATTN_BWD_BN * 2u + 4u * TE_ATTN_BWD_BM * 4u;
}
/* te_attn_bwd2: K and V, two buffers of Q and dO (rows padded to dp + 8
 * elements), dS^T (rows of bm + 8) and two of lse and D (155 KiB at
 * head_dim 128, 144 KiB at 64: one block an SM). */
static unsigned attn_bwd2_bm(int dp) {
  return dp == 64 ? TE_ATTN_BWD2_BM64 : TE_ATTN_BWD2_BM128;
}
static unsigned attn_bwd2_smem(int dp) {
  unsigned bm = attn_bwd2_bm(dp), bn = TE_ATTN_BWD2_BN;
  return (2u * bn + 4u * bm) * (unsigned)(dp + 8) * 2u + bn * (bm + 8u) * 2u + 4u * bm * 4u;
}

/* te_attn_fwd3: the Q tile and two K and V tiles in 128-byte swizzled
 * rows, and 1 KiB to align them (161 KiB at head_dim 128: one block an
 * SM; 49 KiB at 64: two). */
static unsigned attn_fwd3_smem(int dp) {
  unsigned bn = dp == 64 ? TE_ATTN_FWD3_BN64 : TE_ATTN_FWD3_BN128;
  return (TE_ATTN_FWD3_BM + 4u * bn) * (unsigned)dp * 2u + 1024u;
}

/* te_attn_bwd3: K and V, two buffers each of Q, dO and dS^T in 128-byte
 * swizzled rows, two of lse and D, and 1 KiB to align them (162 KiB at
 * head_dim 128, 98 KiB at 64). */
static unsigned attn_bwd3_smem(int dp) {
  return (2u * TE_ATTN_BWD3_BN + 4u * TE_ATTN_BWD3_BM) * (unsigned)dp * 2u +
         2u * TE_ATTN_BWD3_BN * TE_ATTN_BWD3_BM * 2u + 4u * TE_ATTN_BWD3_BM * 4u + 1024u;
}

TE_PARAM_INT(attn_wgmma_param, "TECORE_ATTN_WGMMA", 1, 0, 1,
             "1: libte's attention kernels (forward and backward) run on the warpgroup "
             "MMAs (wgmma) on compute capability 9.0; 0: on mma.sync everywhere");

/* 1 where te_attn_fwd3 and te_attn_bwd3 run: sm_90a code in the build, device 0 of
 * compute capability 9.0 (read once) and TECORE_ATTN_WGMMA on.  On vdev
 * it runs the same C twin as the other forwards. */
static int attn_wgmma_ok(void) {
#ifdef TE_CUDA_HAVE_SM90A
  static int cached = -1;
  int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (v < 0) {
    struct tecore_device_props props;
    v = tecore_device_get_props(0, &props) == TECORE_SUCCESS && props.cc_major == 9 &&
        props.cc_minor == 0;
    __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
  }
  return v && tecore_tunable_int(&attn_wgmma_param);
#else
  return 0;
#endif
}

static tecore_result_t attn_launch_fwd(const struct te_attn_problem *p,
                                       tecore_stream_t stream) {
  if (p->max_seqlen_q == 0) return TECORE_SUCCESS;
  struct te_attn_params kp;
  attn_params(p, &kp);
  int dp = p->head_dim <= 64 ? 64 : 128;
  size_t nq2 = (p->max_seqlen_q + TE_ATTN_FWD2_BM - 1) / TE_ATTN_FWD2_BM;
  /* te_attn_fwd3 (wgmma): query blocks on grid x, so that resident
   * blocks share a head's keys */
  size_t nq3 = (p->max_seqlen_q + TE_ATTN_FWD3_BM - 1) / TE_ATTN_FWD3_BM;
  if (nq3 <= 0x7fffffff && p->heads <= 65535 && p->batch <= 65535 && attn_wgmma_ok())
    return attn_launch(dp == 64 ? K_FWD3_64 : K_FWD3_128, &kp, (unsigned)nq3,
                       (unsigned)p->heads, (unsigned)p->batch, TE_ATTN_FWD3_THREADS,
                       attn_fwd3_smem(dp), stream);
  /* te_attn_fwd2 (4 warps of 32 rows, two blocks an SM; its query blocks
   * on grid z) where it applies, else te_attn_fwd (8 warps of 16 rows):
   * setting use_fwd2 to 0 brings the first back everywhere. */
  int use_fwd2 = nq2 <= 65535 && p->batch <= 65535;
  if (use_fwd2)
    return attn_launch(dp == 64 ? K_FWD2_64 : K_FWD2_128, &kp, (unsigned)p->heads,
                       (unsigned)p->batch, (unsigned)nq2, TE_ATTN_FWD2_THREADS,
                       attn_fwd2_smem(dp), stream);
  unsigned gx = (unsigned)((p->max_seqlen_q + TE_ATTN_FWD_BM - 1) / TE_ATTN_FWD_BM);
  return attn_launch(dp == 64 ? K_FWD64 : K_FWD128, &kp, gx, (unsigned)p->heads,
                     (unsigned)p->batch, TE_ATTN_FWD_THREADS, attn_fwd_smem(dp), stream);
}

static tecore_result_t attn_launch_bwd(const struct te_attn_problem *p,
                                       tecore_stream_t stream) {
  struct te_attn_params kp;
  attn_params(p, &kp);
  size_t rows = p->total_q * (size_t)p->heads;
  kp.dsum = TE_DPTR(p->workspace);
  kp.dq_acc = TE_DPTR(p->workspace + (rows * sizeof(float) + 255) / 256 * 256);
  unsigned rg = (unsigned)((rows + 7) / 8);
  TE_CHECK(attn_launch(K_BWD_PREP, &kp, rg, 1, 1, TE_ATTN_ROW_THREADS, 0, stream));
  if (p->max_seqlen_kv) {
    int dp = p->head_dim <= 64 ? 64 : 128;
    size_t nk2 = (p->max_seqlen_kv + TE_ATTN_BWD2_BN - 1) / TE_ATTN_BWD2_BN;
    /* te_attn_bwd2 (8 warps of 16 keys, P in registers; its key blocks on
     * grid z) where it applies, else te_attn_bwd (4 warps of 16 keys):
     * setting use_bwd2 to 0 brings the second back everywhere. */
    int use_bwd2 = nk2 <= 65535 && p->batch <= 65535;
    size_t nk3 = (p->max_seqlen_kv + TE_ATTN_BWD3_BN - 1) / TE_ATTN_BWD3_BN;
    if (nk3 <= 0x7fffffff && p->kv_heads <= 65535 && p->batch <= 65535 && attn_wgmma_ok())
      TE_CHECK(attn_launch(dp == 64 ? K_BWD3_64 : K_BWD3_128, &kp, (unsigned)nk3,
                           (unsigned)p->kv_heads, (unsigned)p->batch, TE_ATTN_BWD3_THREADS,
                           attn_bwd3_smem(dp), stream));
    else if (use_bwd2)
      TE_CHECK(attn_launch(dp == 64 ? K_BWD2_64 : K_BWD2_128, &kp, (unsigned)p->kv_heads,
                           (unsigned)p->batch, (unsigned)nk2, TE_ATTN_BWD2_THREADS,
                           attn_bwd2_smem(dp), stream));
    else
      TE_CHECK(attn_launch(dp == 64 ? K_BWD64 : K_BWD128, &kp,
                           (unsigned)((p->max_seqlen_kv + TE_ATTN_BWD_BN - 1) / TE_ATTN_BWD_BN),
                           (unsigned)p->kv_heads, (unsigned)p->batch, TE_ATTN_BWD_THREADS,
                           attn_bwd_smem(dp), stream));
  }
  return attn_launch(K_BWD_DQ, &kp, rg, 1, 1, TE_ATTN_ROW_THREADS, 0, stream);
}

/* ---- the row ------------------------------------------------------------------------------- */

static int libte_view_ok(const struct te_attn_view *v, const char *name, char *why, size_t len) {
  if (v->ptr % 16 || v->token_stride % 8 || v->head_stride % 8) {
    snprintf(why, len, "%s: libte's kernels read rows of 16-byte vectors: its address and "
             "strides must be multiples of 16 bytes", name);
    return 0;
  }
  return 1;
}

static int libte_supports(const struct te_attn_problem *p, int backward, char *why, size_t len) {
  if (p->qkv_dtype == TECORE_DTYPE_E4M3) {
    snprintf(why, len, "dtype E4M3: libte's kernels take BF16 and F16 (FP8 runs on cuDNN)");
    return 0;
  }
  if (p->head_dim > 128) {
    snprintf(why, len, "head_dim %d: libte's kernels take up to 128", p->head_dim);
    return 0;
  }
  if (!libte_view_ok(&p->q, "q", why, len) || !libte_view_ok(&p->k, "k", why, len) ||
      !libte_view_ok(&p->v, "v", why, len) || !libte_view_ok(&p->o, "o", why, len))
    return 0;
  if (backward &&
      (!libte_view_ok(&p->d_o, "d_o", why, len) || !libte_view_ok(&p->dq, "dq", why, len) ||
       !libte_view_ok(&p->dk, "dk", why, len) || !libte_view_ok(&p->dv, "dv", why, len)))
    return 0;
  return 1;
}

static size_t libte_workspace(const struct te_attn_problem *p, int backward) {
  return backward ? attn_bwd_workspace(p) : 0;
}

const struct te_attn_backend te_attn_backend_libte = {
    .name = "libte",
    .supports = libte_supports,
    .workspace = libte_workspace,
    .fwd = attn_launch_fwd,
    .bwd = attn_launch_bwd,
};

/* The same launches on the virtual device, whatever the problem. */
static int vdev_supports(const struct te_attn_problem *p, int backward, char *why, size_t len) {
  (void)p;
  (void)backward;
  if (attn_on_vdev()) return 1;
  snprintf(why, len, "runs only on the virtual device");
  return 0;
}

const struct te_attn_backend te_attn_backend_vdev = {
    .name = "vdev",
    .supports = vdev_supports,
    .workspace = libte_workspace,
    .fwd = attn_launch_fwd,
    .bwd = attn_launch_bwd,
};
