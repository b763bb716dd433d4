// SPDX-License-Identifier: Apache-2.0
// gemm16.cu -- libte's own 16-bit GEMM on Hopper's warpgroup MMAs
// (sm_90a), for the epilogues cuBLASLt runs slowly: on an H100 its bias +
// GELU + aux and dGELU + bias-gradient kernels for GPT-2's fc1 and fc2
// (32768 x 3072 x 768) took 597-607 us a call, the same GEMM without
// epilogue 225 (bench/2026-11-23.md, session 13).  Here the epilogue runs beside
// the next block's MMAs: 288 us a call for bias + GELU + aux, 387 for
// dGELU + bias gradient (bench/2026-11-26.md, session 29).  A block is
// warp-specialized, 512 threads:
//
//  - warp 0 is the producer: one lane feeds three 64-deep stages of
//    128-byte swizzled tiles (kernels/wgmma.cuh) through the tensor memory
//    accelerator (TMA; the tensor maps come with the parameters), each
//    stage an mbarrier "full" (the bytes arrived) and "empty" (the MMAs
//    are done with it) -- it runs ahead into the next output block while
//    the MMAs finish one;
//  - warpgroups 2 and 3 run the MMAs: a block of 128 x 256 of D, 64 rows
//    each, wgmma m64n128k16 twice a k-step (both operands in shared
//    memory; B K-major, or MN-major for a B stored [k][n]), one k-tile's
//    MMAs in flight while the next are issued; at the end of a block they
//    write its values, alpha A B (+ bias) rounded to the 16-bit type, to an
//    output tile in shared memory and go on with the next block;
//  - warps 1-7 take the output tile to global memory, 16 bytes a lane and
//    whole rows a warp: D (the plain and bias epilogues); aux and D =
//    gelu(aux); or D = dy gelu'(aux) with each column's sum of the float
//    products over the block's 128 rows into part -- in a fixed order (a
//    lane's rows in order, then the seven warps in order), so the bias
//    gradient te_gemm16_bgrad adds from the parts is the same bits on
//    every run.  EPI_GELUD writes gelu'(pre) as aux instead of pre (the
//    DAUX epilogues, te/gemm.h) and EPI_DMUL multiplies by that aux: the
//    dGELU's gelu' moves to the forward, whose epilogue warps keep up
//    with the MMAs.  Rounding alpha A B to the type before the GELU or the
//    dGELU's product is what cuBLASLt does too (t/core/check_gemm.c's
//    tolerances); GELU and gelu' use the special-function unit
//    (gelu_sfu): the correctly rounded forms of kernels/common/act.h cost
//    more than the MMAs;
//  - named barriers hand the output tile over (FULL) and back (EMPTY);
//    setmaxnreg gives the MMA warpgroups 168 registers a thread (their
//    accumulators are 128) and the others 88;
//  - blocks are persistent, one an SM, taking output blocks grid apart
//    (columns fastest: the blocks running together share A's rows in L2).
//
// EPI_DMUL also has a wide form, gemm16w below (384 threads, one
// m64n256k16 MMA a k-step, the aux tile through the TMA).
//
// Shapes: m a multiple of 128, n of 256, k of 64, every row 16-byte
// aligned (libtecore/cuda/cuda_gemm16.c checks; anything else goes to
// cuBLASLt).  Built for anything but sm_90a the kernels trap:
// cuda_gemm16.c launches them only on compute capability 9.0 from a build
// with sm_90a.

#include "async.cuh"
#include "common/act.h"
#include "common/gemm16_params.h"
#include "pdl.cuh"
#include "sfu.cuh"
#include "wgmma.cuh"

#define EPI_LIN 0
#define EPI_GELU 1
#define EPI_DGELU 2
#define EPI_GELUD 3  // EPI_GELU with gelu' (not the pre-activation) as aux
#define EPI_DMUL 4   // EPI_DGELU's backward from that aux: a product

namespace {

constexpr int BM = TE_GEMM16_BM, BK = TE_GEMM16_BK;
static_assert(BK == 64, "a stage is one 128-byte column block of k");
static_assert(BM == 128, "two MMA warpgroups of 64 rows");

// GELU and its derivative on the special-function unit (ex2.approx,
// rcp.approx): x s and s + x z' s (1 - s), s = 1 / (1 + e), e = 2^-(x (A1
// + A2 x^2)) = e^-z, as kernels/common/act.h's te_act_gelu and
// te_act_dgelu compute them with correctly rounded steps (which cost the
// epilogue more than the MMAs: 701 us a GPT-2 fc1 call on an H100).
// x is clamped to +-TE_ACT_GELU_C inside, as there; a NaN stays a NaN.
#if TE_WGMMA
__device__ __forceinline__ float rcp_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
// gelu and gelu' of one x: one ex2 and one rcp for both (the unused one
// of gelu_sfu and dgelu_sfu is dead code, the asm not volatile)
__device__ __forceinline__ float2 gelu_dgelu_sfu(float x) {
  const float xc = fminf(fmaxf(x, -TE_ACT_GELU_C), TE_ACT_GELU_C), x2 = xc * xc;
  const float e = te_ex2_ftz(-xc * fmaf(x2, TE_ACT_GELU_A2, TE_ACT_GELU_A1));
  const float s = rcp_approx(1.0f + e);
  const float d = fmaf(xc * fmaf(x2, TE_ACT_GELU_K2X3, TE_ACT_GELU_K1), s * (e * s), s);
  return make_float2(x * s, x != x ? x : d);
}
__device__ __forceinline__ float gelu_sfu(float x) { return gelu_dgelu_sfu(x).x; }
__device__ __forceinline__ float dgelu_sfu(float x) { return gelu_dgelu_sfu(x).y; }
#endif

#if TE_WGMMA
// mbarriers (the stages' full and empty signals) and the tensor memory
// accelerator's 2-D tile loads into them.
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_expect(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
// Until the phase of the given parity has completed (a fresh barrier's
// phase "1" counts as completed: the producer's first pass through the
// empty stages does not wait).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
// The box of tensor map tm at (c0 innermost, c1) into shared memory at dst,
// counted on bar.
__device__ __forceinline__ void tma_load(uint32_t dst, const te_gemm16_tmap *tm, int c0, int c1,
                                         uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(tm)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
// Named barriers between the MMA warpgroups and the epilogue warps.
__device__ __forceinline__ void bar_sync(int id, int n) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int n) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ uint4 ld_g16(const void *p) {
  return *reinterpret_cast<const uint4 *>(p);
}
__device__ __forceinline__ void st_g16(void *p, uint4 v) { *reinterpret_cast<uint4 *>(p) = v; }
__device__ __forceinline__ void prefetch_l2(const void *p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}
#endif

static_assert(TE_GEMM16_THREADS == 4 * 128, "two load/epilogue warpgroups, two MMA ones");

#if TE_WGMMA
// The registers a warpgroup's threads hold: a launch gives every thread
// REGS_LAUNCH (the SM's 65536 over the block, in 8s: 128); then the MMA
// warpgroups take 168 (their accumulators are 128) from what the others
// give back.  A raise (setmaxnreg, inc) waits for registers of the
// block's own pool, so the two must balance within the launch's share: at
// 640 threads (96 each) the others would keep 48, and eleven epilogue
// warps that spill ran the dGELU slower than seven
// (bench/2026-11-26.md, session 29).
constexpr int REGS_LAUNCH = 65536 / TE_GEMM16_THREADS / 8 * 8, REGS_MMA = 168;
constexpr int REGS_EPI = (TE_GEMM16_THREADS * REGS_LAUNCH - 2 * 128 * REGS_MMA) / 256 / 8 * 8;
static_assert(REGS_EPI == 88, "the epilogue's registers");
template <int N> __device__ __forceinline__ void regs_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> __device__ __forceinline__ void regs_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

// The backward epilogues (aux read, column sums) and the forward ones.
template <int EPI> struct epi_kind {
  static constexpr bool bwd = EPI == EPI_DGELU || EPI == EPI_DMUL;
};

// One 16-byte chunk (8 columns) of an output row: v the tile's values
// (alpha A B + bias, or the backward's alpha A B); EPI_LIN stores them to
// D, EPI_GELU to aux and their GELU to D, EPI_GELUD their GELU to D and
// gelu' to aux; EPI_DGELU v gelu'(x) (x the aux chunk) to D, EPI_DMUL v x,
// with the float products added to cs.
template <int DT, int EPI>
__device__ __forceinline__ void epi_chunk(uint4 v, uint4 x, void *d, void *aux, float *cs) {
  if (EPI == EPI_LIN) {
    st_g16(d, v);
    return;
  }
  const uint32_t *u = reinterpret_cast<const uint32_t *>(&v);
  const uint32_t *a = reinterpret_cast<const uint32_t *>(&x);
  uint4 g, q;
  uint32_t *o = reinterpret_cast<uint32_t *>(&g), *oq = reinterpret_cast<uint32_t *>(&q);
  if (EPI == EPI_GELU) st_g16(aux, v);
#pragma unroll
  for (int j = 0; j < 4; j++) {
    const float2 y = elem<DT>::unpack(u[j]);
    if (EPI == EPI_GELU) {
      o[j] = elem<DT>::pack(gelu_sfu(y.x), gelu_sfu(y.y));
    } else if (EPI == EPI_GELUD) {
      const float2 r0 = gelu_dgelu_sfu(y.x), r1 = gelu_dgelu_sfu(y.y);
      o[j] = elem<DT>::pack(r0.x, r1.x);
      oq[j] = elem<DT>::pack(r0.y, r1.y);
    } else {
      const float2 z = elem<DT>::unpack(a[j]);
      const float y0 = EPI == EPI_DMUL ? y.x * z.x : y.x * dgelu_sfu(z.x);
      const float y1 = EPI == EPI_DMUL ? y.y * z.y : y.y * dgelu_sfu(z.y);
      cs[2 * j] = te_add_rn(cs[2 * j], y0);  // the float values, as the reference sums them
      cs[2 * j + 1] = te_add_rn(cs[2 * j + 1], y1);
      o[j] = elem<DT>::pack(y0, y1);
    }
  }
  if (EPI == EPI_GELUD) st_g16(aux, q);
  st_g16(d, g);
}
#endif

// The producer of both kernels (one lane): stage it % ST of every k-tile
// it, in the order the MMA warpgroups take them, once they have released
// it -- A's 128 rows of the block and B's 256 columns, through the TMA;
// nb blocks a row of them, tiles blocks, kt k-tiles a block.
template <int BMN>
__device__ __forceinline__ void produce(const te_gemm16_params &p, uint32_t s0, uint32_t full0,
                                        uint32_t empty0, int nb, int tiles, int kt) {
  constexpr int BN = TE_GEMM16_BN, ST = TE_GEMM16_STAGES;
  constexpr uint32_t A_BYTES = BM * BK * 2, STAGE = A_BYTES + BN * BK * 2;
  int it = 0;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int m0 = tile / nb * BM, n0 = tile % nb * BN;
    for (int t = 0; t < kt; t++, it++) {
      const int s = it % ST;
      mbar_wait(empty0 + 8 * s, ((it / ST) & 1) ^ 1);
      const uint32_t sa = s0 + s * STAGE, sb = sa + A_BYTES, fb = full0 + 8 * s;
      mbar_expect(fb, STAGE);
      tma_load(sa, &p.ta, t * BK, m0, fb);
      if (BMN == 0) {
        tma_load(sb, &p.tb, t * BK, n0, fb);
      } else {
#pragma unroll
        for (int cb = 0; cb < BN / 64; cb++)
          tma_load(sb + cb * BK * 128, &p.tb, n0 + cb * 64, t * BK, fb);
      }
    }
  }
}

// The MMA warpgroups' k-loop of one output block, in both kernels:
// k-tile t as stage it % ST fills (it counting on across blocks), a
// fence, mma(sa, sb, kk, accumulate) for its four 16-deep steps, one
// k-tile's MMAs in flight while the next are issued, each stage released
// (lane 0 of every MMA warp) once its MMAs are done.
template <typename Mma>
__device__ __forceinline__ void mma_block(uint32_t s0, uint32_t full0, uint32_t empty0, int kt,
                                          int &it, int lane, Mma mma) {
  constexpr int ST = TE_GEMM16_STAGES;
  constexpr uint32_t A_BYTES = BM * BK * 2, STAGE = A_BYTES + TE_GEMM16_BN * BK * 2;
  for (int t = 0; t < kt; t++, it++) {
    const int s = it % ST;
    mbar_wait(full0 + 8 * s, (it / ST) & 1);
    const uint32_t sa = s0 + s * STAGE, sb = sa + A_BYTES;
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < BK / 16; kk++) mma(sa, sb, kk, t > 0 || kk > 0);
    wg_commit();
    wg_wait<1>();  // k-tile t - 1's MMAs are done: its stage is free
    if (t > 0 && lane == 0) mbar_arrive(empty0 + 8 * ((it - 1) % ST));
  }
  wg_wait<0>();
  if (lane == 0) mbar_arrive(empty0 + 8 * ((it - 1) % ST));
}

#if TE_WGMMA
// What every role of a block knows: the shared memory's aligned address
// (s0) and pointer (sp), its barriers (auxf: the wide kernel's only), the
// blocks of n, the output blocks and the k-steps.
struct g_block {
  uint32_t s0;
  unsigned char *sp;
  uint32_t full0, empty0, auxf;
  int nb, tiles, kt;
};

// The 512-thread kernel's roles: warp 0 loads (one lane issues the TMA
// copies), warps 1-7 run the epilogue, warpgroups 2 and 3 the MMAs.
struct g_layout {
  static constexpr int EPI_WARPS = 7, EPI_THREADS = EPI_WARPS * 32, MMA_THREADS = 256;
  // an epilogue warp's rows: e + 7 i, the first FULL of them below 128 for
  // every warp, one more for warps 0 and 1
  static constexpr int FULL = BM / EPI_WARPS, EXTRA = BM % EPI_WARPS;
  // named barriers: the output tile written (FULL) and read (EMPTY), and
  // the epilogue warps among themselves (the column sums)
  static constexpr int BAR_FULL = 1, BAR_EMPTY = 2, BAR_EPI = 3;
  static constexpr int HANDOFF = MMA_THREADS + EPI_THREADS;
  static constexpr int BN = TE_GEMM16_BN, ST = TE_GEMM16_STAGES;
  static constexpr uint32_t A_BYTES = BM * BK * 2, STAGE = A_BYTES + BN * BK * 2;
  static constexpr uint32_t OUT = ST * STAGE, OUT_BYTES = BM * BN * 2, SUMS = OUT + OUT_BYTES;
  static constexpr uint32_t BIAS = SUMS + EPI_WARPS * BN * 4, BARS = BIAS + BN * 4;
};
static_assert(g_layout::BN == 256, "two m64n128 MMAs a k-step, 32 16-byte chunks an output row");
static_assert(g_layout::BARS + 2 * g_layout::ST * 8 + 1024 <= TE_GEMM16_SMEM,
              "the shared memory asked for");

// The epilogue warps: rows e, e + 7, ... of each output tile, 16 bytes
// (8 columns) a lane, from the tile the MMA warpgroups leave in shared
// memory to D (and aux); the dGELU's column sums in a fixed order (a
// lane's rows in order, then the seven warps in order).
template <int DT, int EPI>
__device__ __forceinline__ void gemm16_epilogue(const te_gemm16_params &p, const g_block gb,
                                                int tid, int e, int lane) {
  typedef g_layout L;
  typedef typename elem<DT>::t T;
  constexpr int EPI_WARPS = L::EPI_WARPS, EPI_THREADS = L::EPI_THREADS, BN = L::BN;
  constexpr int FULL = L::FULL, BAR_EMPTY = L::BAR_EMPTY, BAR_EPI = L::BAR_EPI;
  constexpr int HANDOFF = L::HANDOFF;
  unsigned char *const sp = gb.sp;
  const int nb = gb.nb, tiles = gb.tiles;
  const unsigned char *const ob = sp + L::OUT + (lane / 8) * (BM * 128);
  float *const ws = reinterpret_cast<float *>(sp + L::SUMS);
  const bool sums = epi_kind<EPI>::bwd && p.part;
  // element offset of row r's chunk in D and aux, relative to the tile
  auto at = [&](int r) { return (long long)r * p.ldd + 8 * lane; };
  auto tile_at = [&](int tile) {
    return (long long)(tile / nb * BM) * p.ldd + tile % nb * BN;
  };
  auto row = [&](int r) {  // row r's chunk of the shared tile
    return *reinterpret_cast<const uint4 *>(ob + r * 128 + (((lane % 8) ^ (r % 8)) << 4));
  };
  const T *const auxr = static_cast<const T *>(p.aux);
  // the bias of an output block's columns, as floats in shared memory
  // for the MMA warpgroups (global loads there would stall the MMAs)
  float *const sbias = reinterpret_cast<float *>(sp + L::BIAS);
  const bool bias = !epi_kind<EPI>::bwd && p.bias;
  auto bias_of = [&](int tile) {
    const T *b = static_cast<const T *>(p.bias) + tile % nb * BN;
    for (int c = tid - 32; c < BN; c += EPI_THREADS) sbias[c] = elem<DT>::to_float(b[c]);
  };
  if (bias) bias_of(blockIdx.x);
  if (epi_kind<EPI>::bwd)
    for (int r = e; r < BM; r += EPI_WARPS) prefetch_l2(auxr + tile_at(blockIdx.x) + at(r));
  bar_arrive(BAR_EMPTY, HANDOFF);  // the tile is free for the first block
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int m0 = tile / nb * BM, n0 = tile % nb * BN;
    const bool more = tile + (int)gridDim.x < tiles;
    if (epi_kind<EPI>::bwd && more)
      for (int r = e; r < BM; r += EPI_WARPS)
        prefetch_l2(auxr + tile_at(tile + gridDim.x) + at(r));
    T *const d = static_cast<T *>(p.d) + tile_at(tile);
    T *const aux = static_cast<T *>(p.aux) + tile_at(tile);
    float cs[8];
#pragma unroll
    for (int i = 0; i < 8; i++) cs[i] = 0.0f;
    const uint4 none = make_uint4(0, 0, 0, 0);
    // the dGELU's aux three rows ahead, the first ones before the tile
    // is ready
    constexpr int RB = 3;
    static_assert(FULL % RB == 0, "whole batches");
    uint4 x[RB], xn[RB];
    if (epi_kind<EPI>::bwd) {
#pragma unroll
      for (int i = 0; i < RB; i++) x[i] = ld_g16(aux + at(e + EPI_WARPS * i));
    }
    bar_sync(L::BAR_FULL, HANDOFF);
    if (bias && more) bias_of(tile + gridDim.x);  // the MMAs are done with this block's
    if (!epi_kind<EPI>::bwd) {
#pragma unroll 3
      for (int i = 0; i < FULL; i++) {
        const int r = e + EPI_WARPS * i;
        epi_chunk<DT, EPI>(row(r), none, d + at(r), aux + at(r), cs);
      }
    } else {
      // batches of RB rows, the next batch's aux loading while one is
      // computed
#pragma unroll 1
      for (int b = 0; b < FULL / RB; b++) {
        if (b + 1 < FULL / RB) {
#pragma unroll
          for (int i = 0; i < RB; i++)
            xn[i] = ld_g16(aux + at(e + EPI_WARPS * ((b + 1) * RB + i)));
        }
#pragma unroll
        for (int i = 0; i < RB; i++) {
          const int r = e + EPI_WARPS * (b * RB + i);
          epi_chunk<DT, EPI>(row(r), x[i], d + at(r), nullptr, cs);
        }
#pragma unroll
        for (int i = 0; i < RB; i++) x[i] = xn[i];
      }
    }
    if (e < L::EXTRA) {
      const int r = e + EPI_WARPS * FULL;
      epi_chunk<DT, EPI>(row(r), epi_kind<EPI>::bwd ? ld_g16(aux + at(r)) : none, d + at(r),
                         aux + at(r), cs);
    }
    if (more) bar_arrive(BAR_EMPTY, HANDOFF);  // done reading the tile
    if (sums) {
#pragma unroll
      for (int i = 0; i < 8; i++) ws[e * BN + 8 * lane + i] = cs[i];
      bar_sync(BAR_EPI, EPI_THREADS);
      for (int c = tid - 32; c < BN; c += EPI_THREADS) {
        float s = ws[c];
#pragma unroll
        for (int w = 1; w < EPI_WARPS; w++) s = te_add_rn(s, ws[w * BN + c]);
        p.part[(long long)(m0 / BM) * p.n + n0 + c] = s;
      }
      bar_sync(BAR_EPI, EPI_THREADS);  // ws free for the next tile
    }
  }
}

#endif

template <int DT, int BMN, int EPI>
__device__ __forceinline__ void gemm16(const te_gemm16_params &p) {
#if TE_WGMMA
  typedef g_layout L;
  extern __shared__ __align__(128) unsigned char smem[];  // aligned to 1024 below
  const uint32_t s0 = (smem_addr(smem) + 1023u) & ~1023u;
  unsigned char *const sp = smem + (s0 - smem_addr(smem));
  // full[s] at BARS + 8 s, empty[s] at BARS + 8 (ST + s)
  const uint32_t full0 = s0 + L::BARS, empty0 = full0 + 8 * L::ST;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int nb = p.n / L::BN, tiles = nb * (p.m / BM), kt = p.k / BK;
  if (tid == 0) {
    for (int s = 0; s < L::ST; s++) {
      mbar_init(full0 + 8 * s, 1);        // the producer's expect_tx
      mbar_init(empty0 + 8 * s, 8);       // lane 0 of each MMA warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const g_block gb = {s0, sp, full0, empty0, 0, nb, tiles, kt};

  if (warp < 8) {
    regs_dec<REGS_EPI>();
    if (warp == 0) {
      if (lane == 0) produce<BMN>(p, s0, full0, empty0, nb, tiles, kt);
      return;
    }
    gemm16_epilogue<DT, EPI>(p, gb, tid, warp - 1, lane);
    return;
  }
  // The MMA warpgroups stay in this body: as a function of their own
  // (gemm16w_mma's shape) nvcc 13.0 scheduled them differently.
  constexpr int BAR_FULL = L::BAR_FULL, BAR_EMPTY = L::BAR_EMPTY, HANDOFF = L::HANDOFF;
  constexpr uint32_t OUT = L::OUT, BIAS = L::BIAS;
  regs_inc<REGS_MMA>();
  // The MMA warpgroups: rows 64 wg .. 64 wg + 63 of each output block,
  // k-tile by k-tile as the stages fill; then the block's values (alpha A
  // B + bias: D, or the GELU's pre-activation; the dGELU's alpha A B) in
  // the 16-bit type to the output tile in shared memory: four 128-byte
  // swizzled column blocks of 64, so a warp's fragment stores fall on 32
  // banks and the epilogue warps read whole rows.
  const int wg = tid / 128 - 2, mw = warp % 4, g = lane / 4, tq = lane % 4;
  const int rl = wg * 64 + mw * 16 + g;  // this thread's rows rl and rl + 8 (rl % 8 == g)
  int it = 0;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    float acc[2][64];  // columns 128 h .. 128 h + 127 of the warpgroup's 64 rows
    mma_block(s0, full0, empty0, kt, it, lane, [&](uint32_t sa, uint32_t sb, int kk, int accum) {
      const uint64_t da = wg_desc_k(sa + wg * 64 * 128 + kk * 32);
#pragma unroll
      for (int h = 0; h < 2; h++) {
        if (BMN == 0)
          wg_ss_n128<DT, 0, 0>(acc[h], da, wg_desc_k(sb + h * 128 * 128 + kk * 32), accum);
        else
          wg_ss_n128<DT, 0, 1>(acc[h], da,
                               wg_desc_mn(sb + h * 2 * BK * 128 + kk * 2048, BK * 128), accum);
      }
    });
#pragma unroll
    for (int h = 0; h < 2; h++) wg_keep_all<64>(acc[h]);

    bar_sync(BAR_EMPTY, HANDOFF);  // the epilogue warps are done with the last tile
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
      for (int j = 0; j < 16; j++) {
        float2 b = make_float2(0.0f, 0.0f);
        if (!epi_kind<EPI>::bwd && p.bias)
          b = *reinterpret_cast<const float2 *>(sp + BIAS + 4 * (h * 128 + 8 * j + 2 * tq));
        // column block 2 h + j / 8, chunk j % 8 (swizzled by the row)
        unsigned char *const o = sp + OUT + (2 * h + j / 8) * (BM * 128) + rl * 128 +
                                 (((j % 8) ^ g) << 4) + 4 * tq;
#pragma unroll
        for (int hr = 0; hr < 2; hr++)
          *reinterpret_cast<uint32_t *>(o + hr * 8 * 128) =
              elem<DT>::pack(fmaf(acc[h][4 * j + 2 * hr], p.alpha, b.x),
                             fmaf(acc[h][4 * j + 2 * hr + 1], p.alpha, b.y));
      }
    bar_arrive(BAR_FULL, HANDOFF);
  }
#else
  __trap();
#endif
}

// The wide product kernel (EPI_DMUL, te_gemm16_*_dmulw, 384 threads): the
// 512-thread kernel's two m64n128k16 MMAs a k-step read A from shared
// memory twice, which with the TMA's writes costs more shared-memory
// cycles than the MMAs take (bench/2026-11-26.md, session 31); one m64n256k16
// reads it once, but its 128 accumulators compile only where a thread may
// hold 154 registers, which leaves a block of 384 threads and three
// epilogue warps -- too few to load the aux rows and multiply as the
// 512-thread kernel's seven do.  So here the aux tile comes through the
// TMA, into the output tile itself, once the epilogue warps have stored
// the last block's; the MMA warpgroups multiply their (rounded) values by
// it in place, and the epilogue warps only store the products and add
// their columns (the 16-bit products, in the fixed order of the
// 512-thread kernel: a lane's rows in order, then the warps in order).
//
//  - warp 0: the producer, as in gemm16;
//  - warps 1-3: the epilogue; thread 32 also asks the TMA for the next
//    block's aux tile (mbarrier AUXF) once the three have read the tile;
//  - warpgroups 1 and 2: the MMAs, 64 rows of the 128 x 256 block each.
#if TE_WGMMA
// The wide kernel's shared memory: the stages, the output tile, the
// epilogue warps' column sums, then the barriers (full, empty, auxf).
struct w_layout {
  static constexpr int EPI_WARPS = 3, EPI_THREADS = EPI_WARPS * 32, MMA_THREADS = 256;
  static constexpr int FULL = BM / EPI_WARPS, EXTRA = BM % EPI_WARPS;
  static constexpr int BAR_FULL = 1, BAR_EPI = 3, HANDOFF = MMA_THREADS + EPI_THREADS;
  static constexpr int BN = TE_GEMM16_BN, ST = TE_GEMM16_STAGES;
  static constexpr uint32_t A_BYTES = BM * BK * 2, STAGE = A_BYTES + BN * BK * 2;
  static constexpr uint32_t OUT = ST * STAGE, OUT_BYTES = BM * BN * 2, SUMS = OUT + OUT_BYTES;
  static constexpr uint32_t BARS = SUMS + EPI_WARPS * BN * 4;
};
static_assert(TE_GEMM16_THREADS_W == 128 + w_layout::MMA_THREADS, "a loading warpgroup, two MMA ones");
static_assert(w_layout::BARS + (2 * w_layout::ST + 1) * 8 + 1024 <= TE_GEMM16_SMEM_W,
              "the shared memory asked for");

// Epilogue warp e (1-3 less one): stores the products of each output
// block and sums its columns; thread 32 loads the next block's aux tile.
template <int DT>
__device__ __forceinline__ void gemm16w_epilogue(const te_gemm16_params &p, const g_block &b,
                                                 int tid, int e, int lane) {
  typedef w_layout L;
  typedef typename elem<DT>::t T;
  constexpr int EPI_WARPS = L::EPI_WARPS, EPI_THREADS = L::EPI_THREADS, BN = L::BN;
  const uint32_t s0 = b.s0, auxf = b.auxf;
  unsigned char *const sp = b.sp;
  const int nb = b.nb, tiles = b.tiles;
  // the aux tile of output block `tile` into the output tile: four
  // column blocks of 64, swizzled as the MMA warpgroups address it
  auto aux_load = [&](int tile) {
    mbar_expect(auxf, L::OUT_BYTES);
#pragma unroll
    for (int cb = 0; cb < BN / 64; cb++)
      tma_load(s0 + L::OUT + cb * (BM * 128), &p.tx, tile % nb * BN + cb * 64, tile / nb * BM,
               auxf);
  };
  if (tid == 32) aux_load(blockIdx.x);
  const unsigned char *const ob = sp + L::OUT + (lane / 8) * (BM * 128);
  float *const ws = reinterpret_cast<float *>(sp + L::SUMS);
  auto row = [&](int r) {
    return *reinterpret_cast<const uint4 *>(ob + r * 128 + (((lane % 8) ^ (r % 8)) << 4));
  };
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int m0 = tile / nb * BM, n0 = tile % nb * BN;
    T *const d = static_cast<T *>(p.d) + (long long)m0 * p.ldd + n0 + 8 * lane;
    float cs[8];
#pragma unroll
    for (int i = 0; i < 8; i++) cs[i] = 0.0f;
    auto one = [&](int r) {
      const uint4 v = row(r);
      if (p.part) {
        const uint32_t *u = reinterpret_cast<const uint32_t *>(&v);
#pragma unroll
        for (int j = 0; j < 4; j++) {
          const float2 y = elem<DT>::unpack(u[j]);
          cs[2 * j] = te_add_rn(cs[2 * j], y.x);
          cs[2 * j + 1] = te_add_rn(cs[2 * j + 1], y.y);
        }
      }
      st_g16(d + (long long)r * p.ldd, v);
    };
    bar_sync(L::BAR_FULL, L::HANDOFF);  // the products are in the tile
#pragma unroll 6
    for (int i = 0; i < L::FULL; i++) one(e + EPI_WARPS * i);
    if (e < L::EXTRA) one(e + EPI_WARPS * L::FULL);
    if (p.part) {
#pragma unroll
      for (int i = 0; i < 8; i++) ws[e * BN + 8 * lane + i] = cs[i];
    }
    bar_sync(L::BAR_EPI, EPI_THREADS);  // the tile read, the sums written
    if (tid == 32 && tile + (int)gridDim.x < tiles) {
      wg_proxy_fence();
      aux_load(tile + gridDim.x);
    }
    if (p.part)
      for (int c = tid - 32; c < BN; c += EPI_THREADS) {
        float s = ws[c];
#pragma unroll
        for (int w = 1; w < EPI_WARPS; w++) s = te_add_rn(s, ws[w * BN + c]);
        p.part[(long long)(m0 / BM) * p.n + n0 + c] = s;
      }
    // ws is next written after the next FULL, which every epilogue
    // thread reaches only past these sums
  }
}

// The MMA warpgroups: each output block's 64 x 256 half, times alpha,
// rounded, times the aux tile in place.
template <int DT, int BMN>
__device__ __forceinline__ void gemm16w_mma(const te_gemm16_params &p, const g_block &b, int tid,
                                            int warp, int lane) {
  typedef w_layout L;
  const uint32_t s0 = b.s0, full0 = b.full0, empty0 = b.empty0, auxf = b.auxf;
  unsigned char *const sp = b.sp;
  const int tiles = b.tiles, kt = b.kt;
  const int wg = tid / 128 - 1, mw = warp % 4, g = lane / 4, tq = lane % 4;
  const int rl = wg * 64 + mw * 16 + g;  // this thread's rows rl and rl + 8 (rl % 8 == g)
  int it = 0, nt = 0;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x, nt++) {
    float acc[128];  // the m64n256 fragment: column 8 j + 2 tq (+1) at 4 j (+1), row + 8 at + 2
    mma_block(s0, full0, empty0, kt, it, lane, [&](uint32_t sa, uint32_t sb, int kk, int accum) {
      const uint64_t da = wg_desc_k(sa + wg * 64 * 128 + kk * 32);
      if (BMN == 0)
        wg_ss_n256<DT, 0, 0>(acc, da, wg_desc_k(sb + kk * 32), accum);
      else
        wg_ss_n256<DT, 0, 1>(acc, da, wg_desc_mn(sb + kk * 2048, BK * 128), accum);
    });
    wg_keep_all<128>(acc);

    mbar_wait(auxf, nt & 1);  // the block's aux is in the tile
#pragma unroll
    for (int j = 0; j < 32; j++) {
      unsigned char *const o =
          sp + L::OUT + (j / 8) * (BM * 128) + rl * 128 + (((j % 8) ^ g) << 4) + 4 * tq;
#pragma unroll
      for (int hr = 0; hr < 2; hr++) {
        uint32_t *const q = reinterpret_cast<uint32_t *>(o + hr * 8 * 128);
        const float2 z = elem<DT>::unpack(*q);
        // alpha A B rounded to the type, as the 512-thread kernel's tile
        const float2 y = elem<DT>::unpack(elem<DT>::pack(fmaf(acc[4 * j + 2 * hr], p.alpha, 0.0f),
                                                         fmaf(acc[4 * j + 2 * hr + 1], p.alpha,
                                                              0.0f)));
        *q = elem<DT>::pack(y.x * z.x, y.y * z.y);
      }
    }
    bar_arrive(L::BAR_FULL, L::HANDOFF);
  }
}
#endif

template <int DT, int BMN>
__device__ __forceinline__ void gemm16w(const te_gemm16_params &p) {
#if TE_WGMMA
  typedef w_layout L;
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t s0 = (smem_addr(smem) + 1023u) & ~1023u;
  unsigned char *const sp = smem + (s0 - smem_addr(smem));
  const uint32_t full0 = s0 + L::BARS, empty0 = full0 + 8 * L::ST, auxf = empty0 + 8 * L::ST;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int nb = p.n / L::BN, tiles = nb * (p.m / BM), kt = p.k / BK;
  if (tid == 0) {
    for (int s = 0; s < L::ST; s++) {
      mbar_init(full0 + 8 * s, 1);
      mbar_init(empty0 + 8 * s, 8);
    }
    mbar_init(auxf, 1);  // thread 32's expect_tx
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const g_block b = {s0, sp, full0, empty0, auxf, nb, tiles, kt};
  if (warp < 4) {
    if (warp == 0) {
      if (lane == 0) produce<BMN>(p, s0, full0, empty0, nb, tiles, kt);
      return;
    }
    gemm16w_epilogue<DT>(p, b, tid, warp - 1, lane);
    return;
  }
  gemm16w_mma<DT, BMN>(p, b, tid, warp, lane);
#else
  __trap();
#endif
}

}  // namespace

#define GEMM16_KERNEL(name, DT, BMN, EPI)                                           \
  extern "C" __global__ void __launch_bounds__(TE_GEMM16_THREADS, 1)                \
      name(TE_KSIG(TE_GEMM16_PARAMS)) {                                             \
    te_pdl_enter();                                                                 \
    gemm16<DT, BMN, EPI>(p);                                                        \
  }
#define GEMM16W_KERNEL(name, DT, BMN)                                               \
  extern "C" __global__ void __launch_bounds__(TE_GEMM16_THREADS_W, 1)              \
      name(TE_KSIG(TE_GEMM16_PARAMS)) {                                             \
    te_pdl_enter();                                                                 \
    gemm16w<DT, BMN>(p);                                                            \
  }
#define GEMM16_EPIS(t, DT, b, BMN)                                                  \
  GEMM16_KERNEL(te_gemm16_##t##_##b##_lin, DT, BMN, EPI_LIN)                        \
  GEMM16_KERNEL(te_gemm16_##t##_##b##_gelu, DT, BMN, EPI_GELU)                      \
  GEMM16_KERNEL(te_gemm16_##t##_##b##_dgelu, DT, BMN, EPI_DGELU)                    \
  GEMM16_KERNEL(te_gemm16_##t##_##b##_gelud, DT, BMN, EPI_GELUD)                    \
  GEMM16_KERNEL(te_gemm16_##t##_##b##_dmul, DT, BMN, EPI_DMUL)                      \
  GEMM16W_KERNEL(te_gemm16_##t##_##b##_dmulw, DT, BMN)
GEMM16_EPIS(bf16, BF16, kn, 0)
GEMM16_EPIS(bf16, BF16, nk, 1)
GEMM16_EPIS(f16, F16, kn, 0)
GEMM16_EPIS(f16, F16, nk, 1)

// The bias gradient from the parts (TE_GEMM16_BGRAD_PARAMS): lane l of a
// column adds parts l, l + LANES, ... in order; lane 0 then the lanes.
extern "C" __global__ void __launch_bounds__(TE_GEMM16_BG_COLS * TE_GEMM16_BG_LANES)
    te_gemm16_bgrad(TE_KSIG(TE_GEMM16_BGRAD_PARAMS)) {
  te_pdl_enter();
  __shared__ float lanes[TE_GEMM16_BG_LANES][TE_GEMM16_BG_COLS + 1];
  const int tx = threadIdx.x, ty = threadIdx.y, c = blockIdx.x * TE_GEMM16_BG_COLS + tx;
  float s = 0.0f;
  if (c < cols)
    for (int q = ty; q < parts; q += TE_GEMM16_BG_LANES) s = te_add_rn(s, part[(long long)q * cols + c]);
  lanes[ty][tx] = s;
  __syncthreads();
  if (ty != 0 || c >= cols) return;
  float t = lanes[0][tx];
  for (int l = 1; l < TE_GEMM16_BG_LANES; l++) t = te_add_rn(t, lanes[l][tx]);
  if (dtype == BF16) static_cast<__nv_bfloat16 *>(out)[c] = __float2bfloat16_rn(t);
  else if (dtype == F16) static_cast<__half *>(out)[c] = __float2half_rn(t);
  else static_cast<float *>(out)[c] = t;
}
