/* SPDX-License-Identifier: Apache-2.0 */
/* ar_kernels.c -- the allreduce kernels' table (kernels/comm_ar.cu on
 * cuda, ar_vdev.c on vdev) and the host side of ar_kernels.h: workspace
 * sizes and initialisation, argument checks, launch shapes (every rank
 * derives the same grid from the same call, which keeps the per-block
 * barrier counters in step), the fused epilogue's plan, and the host's
 * reads and writes of the error and abort words. */
#include "ar_internal.h"
#include "algos.h"
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <te/fp8.h>
#include <te/norm.h>
#include "common/norm.h"


#ifdef TE_HAVE_CUDA
#define AR_FATBIN te_fatbin_comm_ar
#define AR_FATBIN_BYTES ((size_t)(te_fatbin_comm_ar_end - te_fatbin_comm_ar))
#else
#define AR_FATBIN NULL
#define AR_FATBIN_BYTES 0
#endif

/* One parameter: struct te_ar_params by value (its pointers are not
 * launch-checked one by one: they point into peers' mappings). */
#define AR_DEF(sym, fn) \
  {.name = sym, .vdev = fn, .nparams = 1, .param_size = {sizeof(struct te_ar_params)}, .param_is_ptr = {0}}
static const struct tecore_kernel_def ar_defs[TE_AR_K_COUNT_] = {
    [TE_AR_K_ONESHOT] = AR_DEF("te_comm_ar_oneshot", te_ar_vdev_oneshot),
    [TE_AR_K_TWOSHOT] = AR_DEF("te_comm_ar_twoshot", te_ar_vdev_twoshot),
    [TE_AR_K_LAMPORT] = AR_DEF("te_comm_ar_lamport", te_ar_vdev_lamport),
    [TE_AR_K_ONESHOT_FUSED] = AR_DEF("te_comm_ar_oneshot_fused", te_ar_vdev_oneshot),
    [TE_AR_K_LAMPORT_FUSED] = AR_DEF("te_comm_ar_lamport_fused", te_ar_vdev_lamport),
    [TE_AR_K_ADDNORM] = AR_DEF("te_comm_ar_addnorm", te_ar_vdev_addnorm),
    [TE_AR_K_ONESHOT_FUSED_WIDE] = AR_DEF("te_comm_ar_oneshot_fused_wide", te_ar_vdev_oneshot),
    [TE_AR_K_LAMPORT_FUSED_WIDE] = AR_DEF("te_comm_ar_lamport_fused_wide", te_ar_vdev_lamport),
    [TE_AR_K_ADDNORM_WIDE] = AR_DEF("te_comm_ar_addnorm_wide", te_ar_vdev_addnorm),
    [TE_AR_K_NVLS] = AR_DEF("te_comm_ar_nvls", te_ar_vdev_nvls),
    /* vdev runs a grid's blocks whole, whatever their size: the same C */
    [TE_AR_K_LAMPORT_FUSED_SPREAD] = AR_DEF("te_comm_ar_lamport_fused_spread", te_ar_vdev_lamport),
    [TE_AR_K_LAMPORT_FUSED_SPREAD4] = AR_DEF("te_comm_ar_lamport_fused_spread4", te_ar_vdev_lamport),
    [TE_AR_K_PROBE_LAUNCH] = AR_DEF("te_comm_ar_probe_launch", te_ar_vdev_probe_launch),
    [TE_AR_K_PROBE_EXCHANGE] = AR_DEF("te_comm_ar_probe_exchange", te_ar_vdev_probe_exchange),
    [TE_AR_K_LAMPORT2] = AR_DEF("te_comm_ar_lamport2", te_ar_vdev_lamport),
    [TE_AR_K_LAMPORT4] = AR_DEF("te_comm_ar_lamport4", te_ar_vdev_lamport),
    [TE_AR_K_TWOSHOT_FUSED] = AR_DEF("te_comm_ar_twoshot_fused", te_ar_vdev_twoshot_fused),
    [TE_AR_K_TWOSHOT_FUSED_WIDE] = AR_DEF("te_comm_ar_twoshot_fused_wide", te_ar_vdev_twoshot_fused),
    [TE_AR_K_CE_REDUCE] = AR_DEF("te_comm_ar_ce_reduce", te_ar_vdev_ce_reduce),
    [TE_AR_K_GATHER] = AR_DEF("te_comm_ar_gather", te_ar_vdev_gather),
};

/* Programmatic dependent launch of every allreduce kernel: on an sm_90
 * GPU the next kernel of a stream (or graph) starts while this one ends
 * (kernels/comm_ar.cu's entry points wait and trigger; the comment there
 * says why it is safe).  0 turns it off, so one run can compare both. */
TECORE_TUNABLE_INT(tc_tun_pdl, "TECOMM_PDL", 1, 0, 1,
                   "1: launch the allreduce kernels with programmatic dependent launch (cuda, "
                   "sm_90 and newer; vdev ignores it); 0: ordinary launches")

/* The fused Lamport kernel with a row spread over more threads (2 or 4
 * for each thread of the RMSNorm plan; the same bits).  0 keeps the plan's
 * block, so one run can compare both. */
TECORE_TUNABLE_INT(tc_tun_fused_spread, "TECOMM_FUSED_SPREAD", 1, 0, 1,
                   "1: the fused Lamport allreduce + add + RMSNorm spreads each row over 2-4x "
                   "the RMSNorm plan's threads (hidden <= 8192, 16-bit dtypes, <= 4 ranks); 0: the plan's "
                   "block")

/* The fused two-shot: one kernel that reduce-scatters by rows and runs
 * the epilogue from each row's owner (comm_ar.h), or the older two-shot
 * (reduce-scatter, all-gather into in[rank]) followed by the ADDNORM
 * kernel.  The same bits; 0 keeps the older path for comparison. */
TECORE_TUNABLE_INT(tc_tun_fused_twoshot, "TECOMM_FUSED_TWOSHOT", 1, 0, 1,
                   "1: the fused two-shot allreduce + add + RMSNorm is one kernel that "
                   "reduce-scatters by rows and normalises each row from its owner's buffer (no "
                   "all-gather); 0: two-shot then a separate add + RMSNorm kernel.  Every rank "
                   "must use the same value")

const char *tc_ar_fused_twoshot_variant(void) {
  return tecore_tunable_int(&tc_tun_fused_twoshot)
             ? "rows (reduce-scatter by rows + add + RMSNorm, one kernel)"
             : "gather (two-shot, then the add + RMSNorm kernel)";
}

static struct tecore_kernel_table ar_table = {
    .module = "libtecomm/allreduce", .count = TE_AR_K_COUNT_, .kernels = ar_defs};
static int ar_first_id = -1;
static tecore_result_t ar_reg_result = TECORE_ERR_INTERNAL;
static pthread_once_t ar_once = PTHREAD_ONCE_INIT;

static void ar_register_once(void) {
  ar_table.fatbin = AR_FATBIN;
  ar_table.fatbin_bytes = AR_FATBIN_BYTES;
  ar_reg_result = tecore_kernel_table_register(&ar_table, &ar_first_id);
}

tecore_result_t tc_ar_kernels_register(void) {
  pthread_once(&ar_once, ar_register_once);
  if (ar_reg_result != TECORE_SUCCESS)
    return AR_ERR(ar_reg_result, "tc_ar_kernels_register: the allreduce kernel table did not register");
  return TECORE_SUCCESS;
}

/* Registered when the library loads, so the cuda backend loads the code
 * at init and no launch has to (a module load inside a stream's wait would
 * deadlock: libtecore's TE_KERNEL_TABLE says why). */
__attribute__((constructor)) static void ar_at_load(void) { (void)tc_ar_kernels_register(); }

/* ---- workspace ------------------------------------------------------------------ */

/* A Lamport slot: the data in whole lines, then a line whose last 16
 * bytes are the descriptor granule (comm_ar.h, Agreement). */
static size_t ar_slot_bytes(size_t max_bytes) {
  size_t s = max_bytes < 16 ? 16 : max_bytes;
  return (s + TE_AR_LINE - 1) / TE_AR_LINE * TE_AR_LINE + TE_AR_LAM_DESC_PAD;
}

size_t tc_ar_workspace_bytes(int nranks, size_t max_bytes) {
  if (nranks < 1 || nranks > TC_AR_MAX_RANKS) return 0;
  if (max_bytes > (SIZE_MAX - TE_AR_OFF_LAMBUF) / 3 / (size_t)nranks - TE_AR_LINE -
                      TE_AR_LAM_DESC_PAD)
    return 0;
  return TE_AR_OFF_LAMBUF + 3u * (size_t)nranks * ar_slot_bytes(max_bytes);
}

tecore_result_t tc_ar_workspace_init(tecore_devptr_t ws, int nranks, size_t max_bytes,
                                         tecore_stream_t stream) {
  static const char fn[] = "tc_ar_workspace_init";
  AR_ARG(ws, "%s: ws is 0", fn);
  AR_ARG(ws % 16 == 0, "%s: ws (0x%llx) is not aligned to 16 bytes", fn, (unsigned long long)ws);
  AR_ARG(nranks >= 1 && nranks <= TC_AR_MAX_RANKS, "%s: nranks %d outside [1, %d]", fn, nranks,
         TC_AR_MAX_RANKS);
  AR_ARG(tc_ar_workspace_bytes(nranks, max_bytes) > 0, "%s: max_bytes %zu is too large", fn,
         max_bytes);
  AR_CHECK(tc_ar_kernels_register());
  AR_CHECK(tecore_memset_d8_async(ws, 0, TE_AR_OFF_LAMBUF, stream));
  size_t lam = 3u * (size_t)nranks * ar_slot_bytes(max_bytes);
  AR_CHECK(tecore_memset_d32_async(ws + TE_AR_OFF_LAMBUF, TE_AR_LAM_ARM, lam / 4, stream));
  return TECORE_SUCCESS;
}

size_t tc_ar_nvls_bytes(int nranks, size_t lamport_max_bytes, size_t data_bytes) {
  size_t lam = tc_ar_workspace_bytes(nranks, lamport_max_bytes);
  if (lam == 0 || data_bytes > SIZE_MAX / 2 - lam) return 0;
  return lam + (data_bytes + 15) / 16 * 16;
}

tecore_result_t tc_ar_nvls_init(tecore_devptr_t uc, int nranks, size_t lamport_max_bytes,
                                    tecore_stream_t stream) {
  /* the same words as a workspace: zero state, armed Lamport buffers */
  return tc_ar_workspace_init(uc, nranks, lamport_max_bytes, stream);
}

size_t tc_ar_lamport_block_max(tc_ar_coll_t coll, size_t ws_max_bytes) {
  /* all-gather's slot carries 8 bytes a 16-byte granule (comm_ar.h) */
  return coll == TC_AR_COLL_ALLGATHER ? ws_max_bytes / 16u * 8u : ws_max_bytes;
}

size_t tc_ar_max_bytes(tc_ar_algo_t algo, int nranks, size_t ws_max_bytes) {
  if (nranks < 1 || nranks > TC_AR_MAX_RANKS) return 0;
  if (algo == TC_AR_LAMPORT) return ws_max_bytes;
  if (algo == TC_AR_ONESHOT || algo == TC_AR_TWOSHOT) return SIZE_MAX;
  if (algo == TC_AR_CE) return nranks >= 2 ? SIZE_MAX / 16 : 0;
  return 0;
}

/* A CE scratch slot: one peer's input, in whole 16-byte lines. */
static size_t ce_slot_bytes(size_t count, size_t esz) { return (count * esz + 15u) / 16u * 16u; }

size_t tc_ar_ce_scratch_bytes(int nranks, size_t count, tecore_dtype_t dtype) {
  size_t esz = tecore_dtype_size(dtype);
  if (nranks < 2 || nranks > TC_AR_MAX_RANKS || esz == 0) return 0;
  if (count > (SIZE_MAX / TC_AR_MAX_RANKS - 16u) / esz) return 0;
  return (size_t)(nranks - 1) * ce_slot_bytes(count, esz);
}

/* ---- launch --------------------------------------------------------------------- */


/* The most blocks a call uses: co-resident on an H100/H200 (132 SMs), so
 * block b's peers run when it waits for them.  vdev runs blocks one after
 * another; a few keep its per-block protocol honest without making every
 * call a long series of barriers between processes. */
TECORE_TUNABLE_INT(tc_tun_ar_blocks, "TECOMM_AR_BLOCKS", TE_AR_MAX_BLOCKS, 1, TE_AR_MAX_BLOCKS,
                   "on a GPU, the most thread blocks an IPC allreduce kernel takes (one-shot, "
                   "two-shot, Lamport, NVLS); fewer leave SMs to kernels that run beside it, such "
                   "as an overlapped GEMM.  Every rank must use the same value")

/* Measured on 2x H200 (bench/2026-11-23.md, session 6): te-demo --tp 2's step
 * with its backward sums beside the wgrad GEMM took 65.18 ms at 128
 * blocks, 64.35 at 32 and 66.80 at 16. */
TECORE_TUNABLE_INT(tc_tun_ar_overlap_blocks, "TECOMM_AR_OVERLAP_BLOCKS", 32, 1, TE_AR_MAX_BLOCKS,
                   "on a GPU, the most thread blocks an IPC allreduce kernel takes when it runs "
                   "beside another kernel (the fuser's backward sums overlapped with a GEMM); "
                   "at most TECOMM_AR_BLOCKS; not the copy-engine one-shot's kernels (local "
                   "reads, the whole grid).  Every rank must use the same value")

/* Threads a block of the plain Lamport kernel: a call of g granules
 * takes ceil(g / this) blocks (each thread one granule a round), and a
 * call that fits one block gets no more warps than it has granules.  0
 * picks the smallest of 128 and 256 with which the call fits
 * TECOMM_AR_BLOCKS blocks, else 512: more blocks of fewer warps spread
 * a call over more SMs, whose stores and polls then run side by side.
 * Measured on 2x H200 (bench/2026-11-23.md, session 8), us per call with 128 /
 * 256 / 512 threads: 8 KB 3.03 / 3.18 / 3.42, 64 KB 3.36 / 3.53 / 3.81,
 * 128 KB 3.56 / 3.64 / 4.03, 256 KB 3.91 / 4.04 / 4.33; at 1 MB, where
 * 256 would need more than 128 blocks, 512 took 6.54 against 6.96. */
TECORE_TUNABLE_INT(tc_tun_lam_threads, "TECOMM_LAMPORT_THREADS", 0, 0, TE_AR_THREADS,
                   "on a GPU, threads a block of the plain Lamport kernel (allreduce, "
                   "reduce-scatter, all-gather), rounded down to a multiple of 32 (at least "
                   "32); 0 (default): 128 while the call "
                   "fits TECOMM_AR_BLOCKS such blocks, else 256 while it fits, else 512.  "
                   "Every rank must use the same value")

static uint32_t ar_max_blocks(int beside) {
  tecore_backend_t b = TECORE_BACKEND_NONE;
  if (tecore_backend(&b) == TECORE_SUCCESS && b == TECORE_BACKEND_CUDA) {
    int64_t m = tecore_tunable_int(&tc_tun_ar_blocks);
    int64_t o = tecore_tunable_int(&tc_tun_ar_overlap_blocks);
    return (uint32_t)(beside && o < m ? o : m);
  }
  return 3;
}

static uint32_t ar_blocks(uint64_t work, uint64_t per_block, int beside) {
  uint64_t g = (work + per_block - 1) / per_block;
  uint32_t m = ar_max_blocks(beside);
  if (g < 1) g = 1;
  return g > m ? m : (uint32_t)g;
}

static int al16(uint64_t p) { return (p & 15u) == 0; }

static tecore_result_t ar_check_fused(const struct tc_ar_call *c, const char *fn) {
  const struct tc_ar_fused *f = c->fused;
  AR_ARG(f->hidden > 0, "%s: fused->hidden is 0", fn);
  AR_ARG(f->hidden <= 0x7fffffffu, "%s: fused->hidden %zu is too large", fn, f->hidden);
  AR_ARG(c->count % f->hidden == 0, "%s: count %zu is not a multiple of fused->hidden %zu", fn,
         c->count, f->hidden);
  AR_ARG(f->eps >= 0.0f && f->eps <= 1e30f, "%s: fused->eps %g is not a finite value >= 0", fn,
         (double)f->eps);
  AR_ARG(f->residual_in, "%s: fused->residual_in is 0", fn);
  AR_ARG(f->residual_out, "%s: fused->residual_out is 0", fn);
  AR_ARG(f->gamma, "%s: fused->gamma is 0", fn);
  AR_ARG(f->out || f->fp8_out, "%s: fused: neither out nor fp8_out is set", fn);
  AR_ARG(f->rsigma % 4 == 0, "%s: fused->rsigma (0x%llx) is not aligned to 4 bytes", fn,
         (unsigned long long)f->rsigma);
  if (f->fp8_out) {
    const struct tecore_tensor *q = f->fp8_out;
    AR_ARG(q->dtype == TECORE_DTYPE_E4M3 || q->dtype == TECORE_DTYPE_E5M2,
           "%s: fused->fp8_out: dtype %s is not E4M3 or E5M2", fn, tecore_dtype_name(q->dtype));
    AR_ARG(q->scaling == TECORE_SCALING_DELAYED || q->scaling == TECORE_SCALING_CURRENT,
           "%s: fused->fp8_out: scaling %s is not delayed or current", fn,
           tecore_scaling_name(q->scaling));
    AR_ARG(q->data && q->scale, "%s: fused->fp8_out: data and scale must be set", fn);
    AR_ARG(q->scaling != TECORE_SCALING_CURRENT || q->amax,
           "%s: fused->fp8_out: current scaling needs amax", fn);
    AR_ARG(tecore_tensor_numel(q) == c->count, "%s: fused->fp8_out has %zu elements, count is %zu",
           fn, tecore_tensor_numel(q), c->count);
    AR_ARG(!q->columnwise_data, "%s: fused->fp8_out: columnwise_data is not written here", fn);
  }
  return TECORE_SUCCESS;
}

static tecore_result_t ar_check(const struct tc_ar_call *c, const char *fn) {
  AR_ARG(c, "%s: call is NULL", fn);
  AR_ARG((unsigned)c->algo < TC_AR_ALGO_COUNT_, "%s: algo %d is not a tc_ar_algo_t", fn,
         (int)c->algo);
  AR_ARG(c->op == TC_AR_SUM || c->op == TC_AR_MAX, "%s: op %d is not SUM or MAX", fn,
         (int)c->op);
  AR_ARG(c->dtype == TECORE_DTYPE_F32 || c->dtype == TECORE_DTYPE_BF16 ||
             c->dtype == TECORE_DTYPE_F16 ||
             (c->coll == TC_AR_COLL_ALLGATHER &&
              (c->dtype == TECORE_DTYPE_E4M3 || c->dtype == TECORE_DTYPE_E5M2)),
         "%s: dtype %s is not f32, bf16 or f16%s", fn, tecore_dtype_name(c->dtype),
         c->coll == TC_AR_COLL_ALLGATHER ? " (or e4m3, e5m2 for all-gather)" : "");
  AR_ARG(c->coll >= TC_AR_COLL_ALLREDUCE && c->coll <= TC_AR_COLL_ALLGATHER,
         "%s: coll %d is not a tc_ar_coll_t", fn, (int)c->coll);
  AR_ARG(c->coll == TC_AR_COLL_ALLREDUCE ||
             ((c->algo == TC_AR_ONESHOT || c->algo == TC_AR_CE ||
               (c->algo == TC_AR_LAMPORT && !c->nvls_mc)) &&
              !c->fused),
         "%s: reduce-scatter and all-gather run one-shot, Lamport (no multicast) or the copy "
         "engines, unfused (algo %d)",
         fn, (int)c->algo);
  AR_ARG(c->nranks >= 1 && c->nranks <= TC_AR_MAX_RANKS, "%s: nranks %d outside [1, %d]", fn,
         c->nranks, TC_AR_MAX_RANKS);
  AR_ARG(c->rank >= 0 && c->rank < c->nranks, "%s: rank %d outside [0, %d)", fn, c->rank,
         c->nranks);
  AR_ARG(c->count <= (uint64_t)INT64_MAX / 4, "%s: count %zu is too large", fn, c->count);
  for (int s = 0; s < c->nranks; s++) {
    AR_ARG(c->ws[s], "%s: ws[%d] is 0", fn, s);
    AR_ARG(al16(c->ws[s]), "%s: ws[%d] (0x%llx) is not aligned to 16 bytes", fn, s,
           (unsigned long long)c->ws[s]);
    if ((c->algo != TC_AR_LAMPORT && c->algo != TC_AR_NVLS) || s == c->rank)
      AR_ARG(c->in[s], "%s: in[%d] is 0", fn, s);
  }
  size_t bytes = c->count * (size_t)tecore_dtype_size(c->dtype);
  if (c->algo == TC_AR_LAMPORT) {
    AR_ARG(c->ws_max_bytes > 0, "%s: Lamport needs ws_max_bytes (the workspaces' max_bytes)", fn);
    AR_ARG(bytes <= tc_ar_lamport_block_max(c->coll, c->ws_max_bytes),
           "%s: %zu bytes exceed the %zu bytes the Lamport buffers were sized for "
           "(tc_ar_lamport_block_max)",
           fn, bytes, tc_ar_lamport_block_max(c->coll, c->ws_max_bytes));
  }
  AR_ARG(!c->nvls_uc == !c->nvls_mc, "%s: nvls_uc and nvls_mc go together", fn);
  AR_ARG(c->algo != TC_AR_NVLS || c->nvls_mc,
         "%s: NVLS needs the multicast region (nvls_uc, nvls_mc)", fn);
  AR_ARG(!c->nvls_mc || c->algo == TC_AR_NVLS || c->algo == TC_AR_LAMPORT,
         "%s: a multicast region goes with NVLS or Lamport only", fn);
  AR_ARG(!c->nvls_mc || (al16(c->nvls_uc) && al16(c->nvls_mc)),
         "%s: nvls_uc and nvls_mc must be aligned to 16 bytes", fn);
  if (c->algo == TC_AR_NVLS) {
    AR_ARG(c->op == TC_AR_SUM, "%s: NVLS reduces with SUM only", fn);
    AR_ARG(bytes <= c->nvls_data_bytes,
           "%s: %zu bytes exceed the NVLS data buffer's %zu", fn, bytes, c->nvls_data_bytes);
    AR_ARG(c->ws_max_bytes > 0, "%s: NVLS needs ws_max_bytes (the region's Lamport size)", fn);
  }
  if (c->algo == TC_AR_CE)
    AR_ARG(c->nranks >= 2, "%s: the copy-engine one-shot needs 2 or more ranks", fn);
  /* all-gather's copy-engine form copies straight into out: no scratch */
  if (c->algo == TC_AR_CE && c->coll != TC_AR_COLL_ALLGATHER) {
    size_t need = tc_ar_ce_scratch_bytes(c->nranks, c->count, c->dtype);
    AR_ARG(c->scratch && al16(c->scratch) && c->scratch_bytes >= need,
           "%s: the copy-engine one-shot needs %zu bytes of 16-byte aligned scratch (scratch "
           "0x%llx, %zu bytes)",
           fn, need, (unsigned long long)c->scratch, c->scratch_bytes);
  }
  if (c->fused) AR_CHECK(ar_check_fused(c, fn));
  else AR_ARG(c->out, "%s: out is 0", fn);
  return TECORE_SUCCESS;
}

static void ar_params_base(const struct tc_ar_call *c, struct te_ar_params *p) {
  memset(p, 0, sizeof *p);
  for (int s = 0; s < c->nranks; s++) {
    p->ws[s] = c->ws[s];
    p->in[s] = c->in[s];
  }
  p->out = c->out;
  p->count = c->count;
  p->timeout_ns = c->timeout_ns;
  p->lam_slot = ar_slot_bytes(c->ws_max_bytes);
  p->rank = c->rank;
  p->nranks = c->nranks;
  p->dtype = (int32_t)c->dtype;
  p->op = (int32_t)c->op;
  if (c->nvls_mc) {
    p->lam_ws = c->nvls_uc;
    p->mc = c->nvls_mc;
    p->nv_data = te_ar_nvls_data_off(c->nranks, p->lam_slot);
  }
  /* the descriptor every rank's call must match (a plain probe has none) */
  struct te_ar_desc *d = &p->desc;
  if (c->count == 0) return;
  d->count = c->count;
  d->algo = (int32_t)c->algo;
  d->op = (int32_t)c->op;
  d->dtype = (int32_t)c->dtype;
  d->nranks = c->nranks;
  if (c->fused) {
    d->hidden = (uint32_t)c->fused->hidden;
    d->eps = c->fused->eps;
    d->variant |= TE_AR_V_FUSED;
    if (c->algo == TC_AR_TWOSHOT && tecore_tunable_int(&tc_tun_fused_twoshot))
      d->variant |= TE_AR_V_RS_ROWS;
  }
  if (c->nvls_mc) d->variant |= TE_AR_V_MC;
  if (c->coll == TC_AR_COLL_REDUCE_SCATTER) d->variant |= TE_AR_V_RS;
  if (c->coll == TC_AR_COLL_ALLGATHER) d->variant |= TE_AR_V_AG;
  if (c->sym_in) d->variant |= c->sym_in == 2 ? TE_AR_V_SYM | TE_AR_V_SYM_INPLACE : TE_AR_V_SYM;
  _Static_assert(TC_AR_DESC_GEMM == TE_AR_V_GEMM, "ar_kernels.h's TC_AR_DESC_GEMM");
  if (c->gemm_dim) {
    d->variant |= TE_AR_V_GEMM;
    if (!c->fused) d->hidden = (uint32_t)c->gemm_dim;
  }
  d->hash = te_ar_desc_hash(d);
}

static tecore_result_t ar_go(int k, const struct tecore_launch_cfg *cfg, struct te_ar_params *p,
                             tecore_stream_t stream) {
  void *args[] = {p};
  unsigned flags = tecore_tunable_int(&tc_tun_pdl) ? TECORE_LAUNCH_PDL : 0;
  return tecore_kernel_launch_ex(ar_first_id + k, cfg, args, flags, stream);
}

/* The Lamport kernel and grid for ngr granules a slot on n ranks. */
static int ar_lam_cfg(uint64_t ngr, int n, int beside, struct tecore_launch_cfg *cfg) {
  uint32_t t = (uint32_t)tecore_tunable_int(&tc_tun_lam_threads) / 32u * 32u;
  if (tecore_tunable_int(&tc_tun_lam_threads) == 0) {
    uint64_t mb = ar_max_blocks(beside);
    t = ngr <= 128u * mb ? 128u : ngr <= 256u * mb ? 256u : TE_AR_THREADS;
  } else if (t < 32u) {
    t = 32u;
  }
  cfg->grid[0] = ar_blocks(ngr, t, beside);
  /* one block: no more warps than granules (a 16-byte call is one) */
  cfg->block[0] = cfg->grid[0] == 1 && ngr < t ? (uint32_t)(ngr + 31) / 32u * 32u : t;
  /* the build for the fewest ranks that holds n: less code on a small
   * call's critical path (kernels/comm_ar.cu, ar_lamport) */
  return n <= 2 ? TE_AR_K_LAMPORT2 : n <= 4 ? TE_AR_K_LAMPORT4 : TE_AR_K_LAMPORT;
}

/* The plain allreduce of p (count elements from in[] to out). */
static tecore_result_t ar_plain(int algo, struct te_ar_params *p, int beside,
                                tecore_stream_t stream) {
  int n = p->nranks;
  int vec = 16 / te_ar_esize(p->dtype);
  for (int s = 0; s < n; s++)
    if ((algo != TC_AR_LAMPORT || s == p->rank) && !al16(p->in[s])) vec = 1;
  /* One-shot and two-shot cut the call into granules, and size their grid,
   * by the inputs' alignment alone: the inputs are symmetric (the same
   * offset of every rank's pool or segment), so every rank cuts alike,
   * while out is each rank's own and may be aligned on one rank and not
   * on another (the kernels then store its granules element by element).
   * Lamport and NVLS share out a call by bytes, whatever vec is. */
  if (algo != TC_AR_ONESHOT && algo != TC_AR_TWOSHOT && !al16(p->out)) vec = 1;
  /* reduce-scatter: in[] lie rank * count elements into the inputs, so
   * every rank's in[] have one alignment only when a block is whole lines */
  if ((p->desc.variant & TE_AR_V_RS) && p->count * (uint64_t)te_ar_esize(p->dtype) % 16u) vec = 1;
  p->vec = vec;
  uint64_t ngran = p->count / (uint64_t)vec;
  struct tecore_launch_cfg cfg = {.grid = {1, 1, 1}, .block = {TE_AR_THREADS, 1, 1}};
  int k;
  if (algo == TC_AR_ONESHOT) {
    cfg.grid[0] = ar_blocks(ngran, (uint64_t)TE_AR_THREADS * TE_AR_UNROLL, beside);
    k = TE_AR_K_ONESHOT;
  } else if (algo == TC_AR_TWOSHOT) {
    cfg.grid[0] = ar_blocks((ngran + (uint64_t)n - 1) / (uint64_t)n, TE_AR_THREADS, beside);
    k = TE_AR_K_TWOSHOT;
  } else if (algo == TC_AR_NVLS) {
    uint64_t ngr = (p->count * (uint64_t)te_ar_esize(p->dtype) + 15) / 16;
    cfg.grid[0] = ar_blocks((ngr + (uint64_t)n - 1) / (uint64_t)n, TE_AR_THREADS, beside);
    k = TE_AR_K_NVLS;
  } else {
    k = ar_lam_cfg((p->count * (uint64_t)te_ar_esize(p->dtype) + 15) / 16, n, beside, &cfg);
  }
  return ar_go(k, &cfg, p, stream);
}

/* The fused call: residual add + RMSNorm (+ FP8) after the allreduce. */
static tecore_result_t ce_pull(const struct tc_ar_call *c, struct te_ar_params *p,
                               tecore_stream_t stream);

/* The fused call's operands and flags in the kernels' parameters. */
static void fused_params(const struct tc_ar_call *c, struct te_ar_params *p) {
  const struct tc_ar_fused *f = c->fused;
  const struct tecore_tensor *q = f->fp8_out;
  int current = q && q->scaling == TECORE_SCALING_CURRENT;
  p->res_in = f->residual_in;
  p->res_out = f->residual_out;
  p->gamma = f->gamma;
  p->fout = f->out;
  p->rsigma = f->rsigma;
  p->rows = c->count / f->hidden;
  p->hidden = (uint32_t)f->hidden;
  p->eps = f->eps;
  p->fflags = TE_AR_F_FUSED | (f->out ? TE_AR_F_OUT : 0);
  if (q) {
    p->q_data = q->data;
    p->q_scale = q->scale;
    p->q_amax = q->amax;
    p->q_scale_inv = q->scale_inv;
    p->q_dtype = (int32_t)q->dtype;
    /* current scaling: this pass finds the amax; the bytes come after */
    p->fflags |= current ? TE_AR_F_AMAX : (TE_AR_F_Q | (q->amax ? TE_AR_F_AMAX : 0));
  }
}

/* Current scaling's second pass: the scale from the amax the kernel
 * found, then the FP8 bytes (libtecore's RMSNorm on residual_out). */
static tecore_result_t fused_current_bytes(const struct tc_ar_call *c, const struct te_ar_params *p,
                                           tecore_stream_t stream) {
  const struct tc_ar_fused *f = c->fused;
  const struct tecore_tensor *q = f->fp8_out;
  AR_CHECK(tecore_compute_scale(q, 0, stream));
  struct tecore_tensor x, g, y = *q;
  size_t shape[2] = {(size_t)p->rows, f->hidden};
  AR_CHECK(tecore_tensor_init(&x, c->dtype, 2, shape, f->residual_out));
  AR_CHECK(tecore_tensor_init(&g, c->dtype, 1, &shape[1], f->gamma));
  y.scaling = TECORE_SCALING_DELAYED;
  y.amax = 0;
  return tecore_rmsnorm_fwd(&x, &g, f->eps, 0, &y, 0, stream);
}

static tecore_result_t ar_fused(const struct tc_ar_call *c, struct te_ar_params *p,
                                tecore_stream_t stream, const char *fn) {
  const struct tc_ar_fused *f = c->fused;
  const struct tecore_tensor *q = f->fp8_out;
  int current = q && q->scaling == TECORE_SCALING_CURRENT;
  fused_params(c, p);
  /* the row plan tecore_rmsnorm_fwd takes for x = residual_out, y = out */
  int nvec = tc_ar_fused_rows_vec(f->hidden) && al16(f->residual_in) && al16(f->residual_out) &&
                     al16(f->gamma) && al16(f->out) && (!q || al16(q->data))
                 ? 8
                 : 1;
  struct te_norm_plan plan = te_norm_plan_fwd(f->hidden, nvec);
  p->nvec = nvec;
  p->tpr = plan.tpr;
  p->nv = plan.nv;
  p->rpb = plan.rows_per_block;
  int vec_in = nvec == 8;
  for (int s = 0; s < c->nranks; s++)
    if ((c->algo != TC_AR_LAMPORT || s == c->rank) && !al16(c->in[s])) vec_in = 0;
  if (c->algo == TC_AR_CE && !al16(c->scratch)) vec_in = 0;
  if (current) AR_CHECK(tecore_memset_d32_async(q->amax, 0, 1, stream));

  uint64_t groups = (p->rows + (uint64_t)plan.rows_per_block - 1) / (uint64_t)plan.rows_per_block;
  struct tecore_launch_cfg rcfg = {.grid = {ar_blocks(groups, 1, c->beside), 1, 1},
                                   .block = {plan.threads, 1, 1}};
  p->vec = vec_in ? 8 : 1;
  int wide = plan.threads > TE_AR_FUSED_NARROW;
  if (c->algo == TC_AR_ONESHOT || c->algo == TC_AR_CE) {
    /* the copy-engine one-shot: the peers' inputs copied here first, then
     * the one-shot kernel over the local copies (its first barrier: every
     * rank's copies are done, so the inputs are free again) */
    struct tecore_launch_cfg ocfg = rcfg;
    if (c->algo == TC_AR_CE) { /* local reads: the whole grid, as ar_ce's */
      AR_CHECK(ce_pull(c, p, stream));
      ocfg.grid[0] = ar_blocks(groups, 1, 0);
    }
    AR_CHECK(ar_go(wide ? TE_AR_K_ONESHOT_FUSED_WIDE : TE_AR_K_ONESHOT_FUSED, &ocfg, p, stream));
  } else if (c->algo == TC_AR_LAMPORT) {
    if (!vec_in)
      return AR_ERR(TECORE_ERR_NOT_SUPPORTED,
                    "%s: fused Lamport needs hidden %% 8 == 0 and 16-byte aligned in[rank], "
                    "residual_in, residual_out, out, gamma (hidden %zu)",
                    fn, f->hidden);
    /* the spread kernel where the fast kernel's shape holds (16-bit,
     * vectors of 8, at most TE_NORM_FWD_NV_MAX of them a thread), 2 or
     * more threads can share each plan thread's vectors, and the ranks'
     * granules fit its registers (up to 4 ranks) */
    unsigned spread = plan.threads ? TE_AR_SPREAD_THREADS / plan.threads : 0;
    if (spread > (unsigned)plan.nv) spread = (unsigned)plan.nv;
    /* at a few rows, 2 threads a plan thread rather than 4: half the warps
     * an SM issue the protocol's set-up, stores and polls.  2x H200, hidden
     * 4096, us per call after a 32 MB copy (t/gpu/fused_ladder.cu): 1 row
     * 6.93 against 7.12, 16 rows 7.39-7.46 against 7.57-7.60; 64 rows 9.37
     * against 9.34, and back to back 7.66 against 6.93 */
    if (spread > 2 && p->rows <= TE_AR_SPREAD_FEW_ROWS) spread = 2;
    if (!wide && spread >= 2 && plan.nv <= TE_NORM_FWD_NV_MAX && c->dtype != TECORE_DTYPE_F32 &&
        c->nranks <= 4 && tecore_tunable_int(&tc_tun_fused_spread)) {
      struct tecore_launch_cfg scfg = rcfg;
      scfg.block[0] = plan.threads * spread;
      p->spread = (int32_t)spread;
      AR_CHECK(ar_go(c->nranks <= 2 ? TE_AR_K_LAMPORT_FUSED_SPREAD : TE_AR_K_LAMPORT_FUSED_SPREAD4,
                     &scfg, p, stream));
      p->spread = 0;
    } else {
      AR_CHECK(ar_go(wide ? TE_AR_K_LAMPORT_FUSED_WIDE : TE_AR_K_LAMPORT_FUSED, &rcfg, p, stream));
    }
  } else if (c->algo == TC_AR_NVLS) {
    /* NVLS simple into this rank's member (out 0: no copy-out), then the
     * epilogue from there */
    struct te_ar_params a = *p;
    a.fflags = 0;
    a.out = 0;
    AR_CHECK(ar_plain(TC_AR_NVLS, &a, c->beside, stream));
    struct te_ar_params e = *p;
    e.in[e.rank] = c->nvls_uc + p->nv_data;
    e.vec = nvec == 8 ? 8 : 1;
    struct tecore_launch_cfg ecfg = rcfg;
    ecfg.grid[0] = (unsigned)(groups < 65535u * 32u ? groups : 65535u * 32u);
    AR_CHECK(ar_go(wide ? TE_AR_K_ADDNORM_WIDE : TE_AR_K_ADDNORM, &ecfg, &e, stream));
  } else if (tecore_tunable_int(&tc_tun_fused_twoshot)) {
    /* the fused two-shot by rows, one kernel: the plan's rows stacked up
     * to TE_AR_FUSED_RS_THREADS threads a block (the row sums keep the
     * plan's order: they depend on tpr and nv only), a persistent grid */
    unsigned rpb = (unsigned)plan.rows_per_block;
    if (plan.threads < TE_AR_FUSED_RS_THREADS) rpb = TE_AR_FUSED_RS_THREADS / (unsigned)plan.tpr;
    p->rpb = (int32_t)rpb;
    uint64_t g = (p->rows + rpb - 1) / rpb;
    unsigned threads = (unsigned)plan.tpr * rpb;
    struct tecore_launch_cfg fcfg = {.grid = {ar_blocks(g, 1, c->beside), 1, 1},
                                     .block = {threads, 1, 1}};
    AR_CHECK(ar_go(threads > TE_AR_FUSED_RS_THREADS ? TE_AR_K_TWOSHOT_FUSED_WIDE
                                                    : TE_AR_K_TWOSHOT_FUSED,
                   &fcfg, p, stream));
  } else {
    /* two-shot in place into in[rank], then the epilogue from there */
    struct te_ar_params a = *p;
    a.fflags = 0;
    a.out = a.in[a.rank];
    AR_CHECK(ar_plain(TC_AR_TWOSHOT, &a, c->beside, stream));
    struct tecore_launch_cfg ecfg = rcfg;
    ecfg.grid[0] = (unsigned)(groups < 65535u * 32u ? groups : 65535u * 32u);
    AR_CHECK(ar_go(wide ? TE_AR_K_ADDNORM_WIDE : TE_AR_K_ADDNORM, &ecfg, p, stream));
  }
  if (current) AR_CHECK(fused_current_bytes(c, p, stream));
  return TECORE_SUCCESS;
}

tecore_result_t tc_ar_probe(const struct tc_ar_call *call, int exchange,
                                tecore_stream_t stream) {
  static const char fn[] = "tc_ar_probe";
  AR_ARG(call, "%s: call is NULL", fn);
  AR_ARG(call->nranks >= 1 && call->nranks <= TC_AR_MAX_RANKS, "%s: nranks %d outside [1, %d]",
         fn, call->nranks, TC_AR_MAX_RANKS);
  AR_ARG(call->rank >= 0 && call->rank < call->nranks, "%s: rank %d outside [0, %d)", fn,
         call->rank, call->nranks);
  for (int s = 0; s < call->nranks; s++) AR_ARG(call->ws[s], "%s: ws[%d] is 0", fn, s);
  AR_CHECK(tc_ar_kernels_register());
  struct te_ar_params p;
  ar_params_base(call, &p);
  struct tecore_launch_cfg cfg = {.grid = {1, 1, 1}, .block = {32, 1, 1}};
  return ar_go(exchange ? TE_AR_K_PROBE_EXCHANGE : TE_AR_K_PROBE_LAUNCH, &cfg, &p, stream);
}

/* The copy-engine one-shot (kernels/common/comm_ar.h): barrier, copies
 * of every peer's input into scratch, the local fold into out, barrier;
 * in place (out == in[rank]) the second barrier comes before the fold,
 * which may overwrite the input only when no peer still copies it.  The
 * memcpys are the copy engines' (device to device, from the peers'
 * mappings); the SMs run a one-warp barrier twice and the sum of local
 * memory once. */
/* The copy-engine one-shot's first half, plain or fused: barrier (every
 * input in place), then every peer's input copied into scratch; p->in[]
 * then names the local copies. */
static tecore_result_t ce_pull(const struct tc_ar_call *c, struct te_ar_params *p,
                               tecore_stream_t stream) {
  const size_t esz = tecore_dtype_size(c->dtype), bytes = c->count * esz;
  const size_t slot = ce_slot_bytes(c->count, esz);
  AR_CHECK(tc_ar_probe(c, 1, stream));
  for (int s = 0, k = 0; s < c->nranks; s++) {
    if (s == c->rank) continue;
    p->in[s] = c->scratch + (size_t)k++ * slot;
    AR_CHECK(tecore_memcpy_async(p->in[s], c->in[s], bytes, stream));
  }
  return TECORE_SUCCESS;
}

static tecore_result_t ar_ce(const struct tc_ar_call *c, struct te_ar_params *p,
                             tecore_stream_t stream) {
  const int r = c->rank;
  const size_t esz = tecore_dtype_size(c->dtype);
  int vec = al16(c->out) && al16(c->scratch) ? (int)(16 / esz) : 1;
  AR_CHECK(ce_pull(c, p, stream));
  if (!al16(c->in[r])) vec = 1;
  p->vec = vec;
  /* the whole grid even beside a GEMM: the sum reads local memory only and
   * gets its SMs as the GEMM ends (2x H200, te-demo --tp 2 at 8192 tokens,
   * bench/2026-11-23.md, session 10: step 62.54 and 62.94 ms with 128 blocks
   * against 64.10 and 64.22 with TECOMM_AR_OVERLAP_BLOCKS' 32) */
  struct tecore_launch_cfg cfg = {
      .grid = {ar_blocks(c->count / (uint64_t)vec, (uint64_t)TE_AR_THREADS * 2, 0), 1, 1},
      .block = {TE_AR_THREADS, 1, 1}};
  const int in_place = c->out == c->in[r];
  if (in_place) AR_CHECK(tc_ar_probe(c, 1, stream));
  AR_CHECK(ar_go(TE_AR_K_CE_REDUCE, &cfg, p, stream));
  return in_place ? TECORE_SUCCESS : tc_ar_probe(c, 1, stream);
}

/* All-gather (kernels/common/comm_ar.h): the gather kernel over the
 * bytes of a block, or its copy-engine form (probe exchange, a stream
 * memcpy of every rank's input, probe exchange).  A block already in
 * place (in place on symmetric memory: in[rank] is its own slot of out)
 * is not copied. */
static tecore_result_t ar_gather(const struct tc_ar_call *c, struct te_ar_params *p,
                                 tecore_stream_t stream) {
  const uint64_t bytes = c->count * (uint64_t)tecore_dtype_size(c->dtype);
  if (c->algo == TC_AR_CE) {
    AR_CHECK(tc_ar_probe(c, 1, stream));
    for (int s = 0; s < c->nranks; s++)
      if (c->out + (uint64_t)s * bytes != c->in[s])
        AR_CHECK(tecore_memcpy_async(c->out + (uint64_t)s * bytes, c->in[s], bytes, stream));
    return tc_ar_probe(c, 1, stream);
  }
  p->count = bytes; /* the kernel moves bytes; the descriptor keeps the call's count */
  if (c->algo == TC_AR_LAMPORT) {
    /* 8-byte moves where the input, out and every block allow them */
    p->vec = (c->in[c->rank] | c->out | bytes) % 8u == 0 ? 8 : 1;
    struct tecore_launch_cfg lc = {.grid = {1, 1, 1}, .block = {TE_AR_THREADS, 1, 1}};
    int k = ar_lam_cfg((bytes + 7u) / 8u, c->nranks, c->beside, &lc);
    return ar_go(k, &lc, p, stream);
  }
  p->vec = 16;
  uint64_t work = (bytes + 15u) / 16u * (uint64_t)c->nranks;
  struct tecore_launch_cfg cfg = {
      .grid = {ar_blocks(work, (uint64_t)TE_AR_THREADS * TE_AR_UNROLL, c->beside), 1, 1},
      .block = {TE_AR_THREADS, 1, 1}};
  return ar_go(TE_AR_K_GATHER, &cfg, p, stream);
}

tecore_result_t tc_ar_check(const struct tc_ar_call *call) { return ar_check(call, "tc_ar_launch"); }

tecore_result_t tc_ar_launch(const struct tc_ar_call *call, tecore_stream_t stream) {
  static const char fn[] = "tc_ar_launch";
  AR_CHECK(ar_check(call, fn));
  AR_CHECK(tc_ar_kernels_register());
  if (call->count == 0) return TECORE_SUCCESS;
  struct te_ar_params p;
  ar_params_base(call, &p);
  tecore_result_t r = call->coll == TC_AR_COLL_ALLGATHER ? ar_gather(call, &p, stream)
                      : call->fused                   ? ar_fused(call, &p, stream, fn)
                      : call->algo == TC_AR_CE ? ar_ce(call, &p, stream)
                                                   : ar_plain((int)call->algo, &p, call->beside, stream);
  if (r != TECORE_SUCCESS && r != TECORE_ERR_NOT_SUPPORTED && r != TECORE_ERR_INVALID)
    tecore_set_error("%s: %s %s of %zu elements: %s", fn, tc_ar_kernel_name((int)call->algo),
                     call->coll == TC_AR_COLL_REDUCE_SCATTER ? "reduce-scatter"
                     : call->coll == TC_AR_COLL_ALLGATHER    ? "all-gather"
                                                             : "allreduce",
                     call->count, tecore_last_error());
  return r;
}

/* ---- error and abort words --------------------------------------------------------
 * Read and written through a stream of their own, so they do not queue
 * behind a collective that is waiting on the very words they touch. */

static tecore_result_t ar_bytes_io(tecore_devptr_t dev, void *host, size_t n, int write) {
  tecore_stream_t s = NULL;
  AR_CHECK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  tecore_devptr_t h = (tecore_devptr_t)(uintptr_t)host;
  tecore_result_t r = write ? tecore_memcpy_async(dev, h, n, s) : tecore_memcpy_async(h, dev, n, s);
  if (r == TECORE_SUCCESS) r = tecore_stream_synchronize(s);
  tecore_result_t r2 = tecore_stream_destroy(s);
  return r != TECORE_SUCCESS ? r : r2;
}

static tecore_result_t ar_word_io(tecore_devptr_t dev, uint32_t *host, int write) {
  return ar_bytes_io(dev, host, 4, write);
}

const char *tc_ar_desc_call(const struct tc_ar_desc *d) {
  if (d->variant & TE_AR_V_GEMM)
    return d->variant & TE_AR_V_AG ? "all-gather+GEMM" : "GEMM+reduce-scatter";
  return d->variant & TE_AR_V_RS ? "reduce-scatter"
         : d->variant & TE_AR_V_AG ? "all-gather"
                                   : "allreduce";
}

const char *tc_ar_desc_hidden(const struct tc_ar_desc *d) {
  if (!(d->variant & TE_AR_V_GEMM) || (d->variant & TE_AR_V_FUSED)) return "hidden (fused)";
  return d->variant & TE_AR_V_AG ? "n (the GEMM's)" : "k (the GEMM's)";
}

const char *tc_ar_desc_input(const struct tc_ar_desc *d) {
  return d->variant & TE_AR_V_SYM_INPLACE ? "symmetric recv in place"
         : d->variant & TE_AR_V_SYM       ? "symmetric send in place"
                                          : "a staged copy";
}

tecore_result_t tc_ar_desc_read(tecore_devptr_t ws, struct tc_ar_desc *d) {
  AR_ARG(ws && d, "tc_ar_desc_read: ws or d is 0");
  struct te_ar_desc w;
  AR_CHECK(ar_bytes_io(ws + TE_AR_OFF_DESC, &w, sizeof w, 0));
  *d = (struct tc_ar_desc){.hash = w.hash, .count = w.count, .algo = w.algo, .op = w.op,
                               .dtype = w.dtype, .nranks = w.nranks, .hidden = w.hidden,
                               .eps = w.eps, .variant = w.variant};
  return TECORE_SUCCESS;
}

tecore_result_t tc_ar_error(tecore_devptr_t ws, int *code, int *peer, int clear) {
  static const char fn[] = "tc_ar_error";
  AR_ARG(ws, "%s: ws is 0", fn);
  AR_ARG(code, "%s: code is NULL", fn);
  AR_ARG(peer, "%s: peer is NULL", fn);
  uint32_t w = 0;
  AR_CHECK(ar_word_io(ws + TE_AR_OFF_ERR, &w, 0));
  *code = (int)(w & 0xffffu);
  *peer = (int)(w >> 16) - 1;
  if (clear && w) {
    uint32_t zero = 0;
    AR_CHECK(ar_word_io(ws + TE_AR_OFF_ERR, &zero, 1));
  }
  return TECORE_SUCCESS;
}

tecore_result_t tc_ar_abort(tecore_devptr_t ws) {
  AR_ARG(ws, "tc_ar_abort: ws is 0");
  uint32_t one = 1;
  return ar_word_io(ws + TE_AR_OFF_ABORT, &one, 1);
}
