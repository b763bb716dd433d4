// SPDX-License-Identifier: Apache-2.0
// gemm16.cu -- libte's own 16-bit GEMM on Hopper's warpgroup MMAs
// (sm_90a), for the epilogues cuBLASLt runs slowly: on an H100 its bias +
// GELU + aux and dGELU + bias-gradient kernels for GPT-2's fc1 and fc2
// (32768 x 3072 x 768) took 597-607 us a call, the same GEMM without
// epilogue 225 (bench/2026-11-23g-gpu.md).  Here the epilogue rides on the
// accumulators (419 us a call there; the plain GEMM runs at 0.83x
// cuBLASLt's at 4096^3, bench/2026-12-03-gpu.md):
//
//  - a block computes 128 x 256 of D in two warpgroups of 64 rows, each
//    with wgmma m64n128k16 twice a k-step (both operands in shared
//    memory; B K-major, or MN-major for a B stored [k][n]);
//  - the k-loop runs over four 64-deep stages of 128-byte swizzled tiles
//    (kernels/wgmma.cuh), filled by cp.async two k-tiles ahead; one
//    stage's MMAs stay in flight while the next ones are issued;
//  - blocks are persistent, one an SM, taking output blocks grid apart
//    (columns fastest: the blocks running together share A's rows in
//    L2); the next output block's first k-tiles load during the epilogue;
//  - the epilogue goes through shared memory (the stages the next block's
//    loads leave free), so that D and aux move as whole rows of 16-byte
//    accesses: the bias, the pre-activation as aux and D = gelu of it, or
//    D = A B * gelu'(aux) with each column's sum over the block's 128
//    rows into part -- in a fixed order (a thread's two rows, then the 8
//    lanes of a column, then the 8 warps in order), so the bias gradient
//    te_gemm16_bgrad adds from the parts is the same bits on every run.
//    GELU and gelu' use the special-function unit (gelu_sfu): the
//    correctly rounded forms of kernels/common/act.h cost more than the
//    MMAs (701 us a call).
//
// Shapes: m a multiple of 128, n of 256, k of 64, every row 16-byte
// aligned (libtecore/cuda/cuda_gemm16.c checks; anything else goes to
// cuBLASLt).  Built for anything but sm_90a the kernels trap:
// cuda_gemm16.c launches them only on compute capability 9.0 from a build
// with sm_90a.

#include "async.cuh"
#include "common/act.h"
#include "common/gemm16_params.h"
#include "wgmma.cuh"

#define EPI_LIN 0
#define EPI_GELU 1
#define EPI_DGELU 2

namespace {

constexpr int BM = TE_GEMM16_BM, BK = TE_GEMM16_BK;
static_assert(BK == 64, "a stage is one 128-byte column block of k");
static_assert(TE_GEMM16_THREADS == 256 && BM == 128, "the loads' split below");

// GELU and its derivative on the special-function unit (ex2.approx,
// rcp.approx): x s and s + x z' s (1 - s), s = 1 / (1 + e), e = 2^-(x (A1
// + A2 x^2)) = e^-z, as kernels/common/act.h's te_act_gelu and
// te_act_dgelu compute them with correctly rounded steps (which cost the
// epilogue more than the MMAs: 701 us a GPT-2 fc1 call on an H100).
// x is clamped to +-TE_ACT_GELU_C inside, as there; a NaN stays a NaN.
#if TE_WGMMA
__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float rcp_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float gelu_sfu(float x) {
  const float xc = fminf(fmaxf(x, -TE_ACT_GELU_C), TE_ACT_GELU_C);
  const float e = ex2_approx(-xc * fmaf(xc * xc, TE_ACT_GELU_A2, TE_ACT_GELU_A1));
  return x * rcp_approx(1.0f + e);
}
__device__ __forceinline__ float dgelu_sfu(float x) {
  const float xc = fminf(fmaxf(x, -TE_ACT_GELU_C), TE_ACT_GELU_C), x2 = xc * xc;
  const float e = ex2_approx(-xc * fmaf(x2, TE_ACT_GELU_A2, TE_ACT_GELU_A1));
  const float s = rcp_approx(1.0f + e);
  const float d = fmaf(xc * fmaf(x2, TE_ACT_GELU_K2X3, TE_ACT_GELU_K1), s * (e * s), s);
  return x != x ? x : d;
}
#endif

#if TE_WGMMA
// The bias of columns c and c + 1.
template <int DT>
__device__ __forceinline__ float2 bias2(const te_gemm16_params &p, int c) {
  return elem<DT>::unpack(*reinterpret_cast<const uint32_t *>(
      static_cast<const typename elem<DT>::t *>(p.bias) + c));
}
#endif

#if TE_WGMMA
// Shared-memory tiles of the epilogue: 128 rows of BN 16-bit values, each
// row 16 bytes longer than BN (a warp's fragment stores, 8 rows of 16
// bytes, then fall on 32 different banks).
template <int BN> __device__ __forceinline__ constexpr int tile_pitch() { return (BN + 8) * 2; }

// The epilogue of one warpgroup's 64 x 128 half of the block into shared
// memory: d the accumulators (m64n128 layout: d[4j + 2hr + e] is row g +
// 8 hr of the warp's 16, column 8 j + 2 tq + e), at byte offset `at` of
// the tile dt (row r0, column c0 + 2 tq); EPI_LIN writes alpha A B + bias
// (the GELU's aux), EPI_GELU its GELU, EPI_DGELU alpha A B times gelu' of
// the aux dt holds on entry.  cs, when sums (EPI_DGELU), gets this
// thread's sums of its two rows for the 32 columns it holds.
template <int DT, int EPI, int BN>
__device__ __forceinline__ void epilogue_half(const te_gemm16_params &p, const float *d,
                                              unsigned char *dt, int at, int col, bool sums,
                                              float *cs) {
  constexpr int PITCH = tile_pitch<BN>();
#pragma unroll
  for (int j = 0; j < 16; j++) {
    float2 b = make_float2(0.0f, 0.0f);
    if (EPI != EPI_DGELU && p.bias) b = bias2<DT>(p, col + 8 * j);
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
      const int o = at + hr * 8 * PITCH + j * 16;
      uint32_t *dp = reinterpret_cast<uint32_t *>(dt + o);
      float y0 = d[4 * j + 2 * hr] * p.alpha, y1 = d[4 * j + 2 * hr + 1] * p.alpha;
      if (EPI == EPI_GELU) {
        y0 = gelu_sfu(y0 + b.x);
        y1 = gelu_sfu(y1 + b.y);
      } else if (EPI == EPI_DGELU) {
        const float2 u = elem<DT>::unpack(*dp);
        y0 *= dgelu_sfu(u.x);
        y1 *= dgelu_sfu(u.y);
        if (sums) {  // the float values, as the reference sums them
          if (hr == 0) {
            cs[2 * j] = y0;
            cs[2 * j + 1] = y1;
          } else {
            cs[2 * j] = te_add_rn(cs[2 * j], y0);
            cs[2 * j + 1] = te_add_rn(cs[2 * j + 1], y1);
          }
        }
      } else {
        y0 += b.x;
        y1 += b.y;
      }
      *dp = elem<DT>::pack(y0, y1);
    }
  }
}

// The block's 128 x BN tile between shared memory (padded rows) and a
// row-major matrix of row stride ld at (m0, n0), 16 bytes a thread at a
// time: a warp covers whole rows.  to_smem: by cp.async (the caller
// waits).
template <int BN, bool to_smem>
__device__ __forceinline__ void tile_copy(unsigned char *t, void *g, long long ld, int m0,
                                          int n0) {
  constexpr int CPR = BN / 8;  // 16-byte chunks a row
#pragma unroll 4
  for (int i = threadIdx.x; i < BM * CPR; i += TE_GEMM16_THREADS) {
    const int r = i / CPR, c = i % CPR;
    unsigned char *s = t + r * tile_pitch<BN>() + c * 16;
    uint16_t *q = static_cast<uint16_t *>(g) + (long long)(m0 + r) * ld + n0 + c * 8;
    if (to_smem) cp_async16(s, q, 16);
    else *reinterpret_cast<uint4 *>(q) = *reinterpret_cast<const uint4 *>(s);
  }
}

#endif

template <int DT, int BMN, int EPI, int BN, int ST>
__device__ __forceinline__ void gemm16(const te_gemm16_params &p) {
#if TE_WGMMA
  typedef typename elem<DT>::t T;
  static_assert(BN == 128 || BN == 256, "one or two m64n128 MMAs a k-step");
  constexpr int NH = BN / 128;                               // column halves of 128
  constexpr uint32_t A_BYTES = BM * BK * 2, STAGE = A_BYTES + BN * BK * 2;
  constexpr int BRS = TE_GEMM16_THREADS / (BN / 8);          // MN-major B: k-rows a pass
  // AHEAD k-tiles load while one computes and the one before may still be
  // read by its MMAs
  constexpr int AHEAD = ST - 2;
  static_assert(AHEAD >= 1, "at least three stages");
  // the epilogue's tile (padded rows) and column sums, in the stages the
  // next block's first k-tiles do not take
  constexpr int PITCH = tile_pitch<BN>();
  constexpr int TILE = BM * PITCH;
  static_assert(TILE + 8 * BN * 4 <= (ST - AHEAD) * STAGE, "the epilogue's tile fits");
  extern __shared__ __align__(128) unsigned char smem[];  // aligned to 1024 below
  const uint32_t s0 = (smem_addr(smem) + 1023u) & ~1023u;
  unsigned char *const et = smem + (s0 - smem_addr(smem)) + AHEAD * STAGE;
  float *const ws = reinterpret_cast<float *>(et + TILE);  // [8 warps][BN] column sums
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32;
  const int nb = p.n / BN, tiles = nb * (p.m / BM), kt = p.k / BK;

  // This thread's share of a stage: A's rows ar + 32 i (i < 4) at 16-byte
  // chunk ac; B K-major likewise (rows of n, i < BN / 32); B MN-major its
  // k-rows br + BRS i (i < 64 / BRS) at chunk bc of the BN / 8 across the
  // columns (column block bc / 8).  Rows 32 (BRS, a multiple of 8) apart
  // keep the swizzle phase.
  static_assert(BRS % 8 == 0, "MN-major rows keep the swizzle phase");
  const int ar = tid / 8, ac = tid % 8, br = tid / (BN / 8), bc = tid % (BN / 8);
  const uint32_t adst = ar * 128 + ((ac ^ (ar & 7)) << 4);
  const uint32_t bdst = BMN == 0 ? adst : (bc / 8) * (BK * 128) + br * 128 +
                                              (((bc % 8) ^ (br & 7)) << 4);
  // k-tile t of block `tile` into stage st
  auto load = [&](int tile, int t, int st) {
    const int m0 = tile / nb * BM, n0 = tile % nb * BN, k0 = t * BK;
    const uint32_t sa = s0 + st * STAGE, sb = sa + A_BYTES;
    const T *ap = static_cast<const T *>(p.a) + (long long)(m0 + ar) * p.lda + ac * 8 + k0;
#pragma unroll
    for (int i = 0; i < 4; i++) cp_async16_at(sa + adst + i * 32 * 128, ap + (long long)i * 32 * p.lda);
    if (BMN == 0) {
      const T *bp = static_cast<const T *>(p.b) + (long long)(n0 + ar) * p.ldb + ac * 8 + k0;
#pragma unroll
      for (int i = 0; i < BN / 32; i++)
        cp_async16_at(sb + bdst + i * 32 * 128, bp + (long long)i * 32 * p.ldb);
    } else {
      const T *bp = static_cast<const T *>(p.b) + (long long)(k0 + br) * p.ldb + n0 + bc * 8;
#pragma unroll
      for (int i = 0; i < BK / BRS; i++)
        cp_async16_at(sb + bdst + i * BRS * 128, bp + (long long)BRS * i * p.ldb);
    }
  };
  // the first k-tiles of block `tile` (an empty group each past the end)
  auto prologue = [&](int tile) {
#pragma unroll
    for (int i = 0; i < AHEAD; i++) {
      if (tile < tiles && i < kt) load(tile, i, i);
      cp_async_commit();
    }
  };

  // Persistent: this block takes blocks blockIdx.x, + gridDim.x, ...
  // (column blocks fastest: the blocks running together share A's rows in
  // L2), the next one's first k-tiles loading during this one's epilogue.
  int tile = blockIdx.x;
  prologue(tile);
  for (; tile < tiles; tile += gridDim.x) {
    const int m0 = tile / nb * BM, n0 = tile % nb * BN;
    float acc[NH][64];  // columns 128 h .. 128 h + 127 of the warpgroup's 64 rows
    for (int t = 0; t < kt; t++) {
      cp_async_wait<AHEAD - 1>();  // k-tile t is in (the later ones may still load)
      wg_proxy_fence();
      // every warpgroup has waited for its MMAs of k-tile t - 2: that
      // stage is free for k-tile t + AHEAD (and the last epilogue is done
      // with its tile)
      __syncthreads();
      if (t + AHEAD < kt) load(tile, t + AHEAD, (t + AHEAD) % ST);
      cp_async_commit();
      const uint32_t sa = s0 + (t % ST) * STAGE, sb = sa + A_BYTES;
      wg_fence();
#pragma unroll
      for (int kk = 0; kk < BK / 16; kk++) {
        const int accum = t > 0 || kk > 0;
        const uint64_t da = wg_desc_k(sa + wg * 64 * 128 + kk * 32);
#pragma unroll
        for (int h = 0; h < NH; h++) {
          if (BMN == 0)
            wg_ss_n128<DT, 0, 0>(acc[h], da, wg_desc_k(sb + h * 128 * 128 + kk * 32), accum);
          else
            wg_ss_n128<DT, 0, 1>(acc[h], da,
                                 wg_desc_mn(sb + h * 2 * BK * 128 + kk * 2048, BK * 128), accum);
        }
      }
      wg_commit();
      wg_wait<1>();
    }
    wg_wait<0>();
#pragma unroll
    for (int h = 0; h < NH; h++) wg_keep_all<64>(acc[h]);

    // Every warpgroup's MMAs are done: stages 0 .. AHEAD - 1 take the next
    // block's first k-tiles while the epilogue runs through the others
    // (aux's tile in first for the dGELU, then D's and aux's tiles out,
    // whole rows of 16-byte accesses a warp).
    __syncthreads();
    if (EPI == EPI_DGELU) {
      tile_copy<BN, true>(et, p.aux, p.ldd, m0, n0);
      cp_async_commit();
    }
    prologue(tile + gridDim.x);
    if (EPI == EPI_DGELU) {
      cp_async_wait<AHEAD>();  // aux's tile (the next block's may still load)
      __syncthreads();
    }
    const int g = lane / 4, tq = lane % 4, rl = wg * 64 + warp * 16 + g;
    const bool sums = EPI == EPI_DGELU && p.part;
    const int w8 = wg * 4 + warp;
    if (EPI == EPI_GELU) {
      // the pre-activation (aux) first, then D through the same tile
#pragma unroll
      for (int h = 0; h < NH; h++)
        epilogue_half<DT, EPI_LIN, BN>(p, acc[h], et, rl * PITCH + (h * 128 + 2 * tq) * 2,
                                       n0 + h * 128 + 2 * tq, false, nullptr);
      __syncthreads();
      tile_copy<BN, false>(et, p.aux, p.ldd, m0, n0);
      __syncthreads();
    }
#pragma unroll
    for (int h = 0; h < NH; h++) {
      float cs[32];
      epilogue_half<DT, EPI, BN>(p, acc[h], et, rl * PITCH + (h * 128 + 2 * tq) * 2,
                                 n0 + h * 128 + 2 * tq, sums, cs);
      if (sums) {
        // the 8 lanes of a column (g = 0..7) in a fixed tree
#pragma unroll
        for (int i = 0; i < 32; i++) {
          cs[i] = te_add_rn(cs[i], __shfl_xor_sync(0xffffffffu, cs[i], 4));
          cs[i] = te_add_rn(cs[i], __shfl_xor_sync(0xffffffffu, cs[i], 8));
          cs[i] = te_add_rn(cs[i], __shfl_xor_sync(0xffffffffu, cs[i], 16));
        }
        if (g == 0) {
#pragma unroll
          for (int j = 0; j < 16; j++) {
            ws[w8 * BN + h * 128 + 8 * j + 2 * tq] = cs[2 * j];
            ws[w8 * BN + h * 128 + 8 * j + 2 * tq + 1] = cs[2 * j + 1];
          }
        }
      }
    }
    __syncthreads();
    tile_copy<BN, false>(et, p.d, p.ldd, m0, n0);
    if (sums && tid < BN) {
      // then the block's 8 warps in order
      float s = ws[tid];
#pragma unroll
      for (int w = 1; w < 8; w++) s = te_add_rn(s, ws[w * BN + tid]);
      p.part[(long long)(tile / nb) * p.n + n0 + tid] = s;
    }
    // the next mainloop's first barrier keeps the tile until every warp
    // has copied it out
  }
  cp_async_wait<0>();
#else
  __trap();
#endif
}

}  // namespace

#define GEMM16_KERNEL(name, DT, BMN, EPI, BN, ST, MINB)                             \
  extern "C" __global__ void __launch_bounds__(TE_GEMM16_THREADS, MINB)             \
      name(TE_KSIG(TE_GEMM16_PARAMS)) {                                             \
    gemm16<DT, BMN, EPI, BN, ST>(p);                                                \
  }
#define GEMM16_EPIS(pre, t, DT, b, BMN, BN, ST, MINB)                               \
  GEMM16_KERNEL(pre##_##t##_##b##_lin, DT, BMN, EPI_LIN, BN, ST, MINB)              \
  GEMM16_KERNEL(pre##_##t##_##b##_gelu, DT, BMN, EPI_GELU, BN, ST, MINB)            \
  GEMM16_KERNEL(pre##_##t##_##b##_dgelu, DT, BMN, EPI_DGELU, BN, ST, MINB)
#define GEMM16_ALL(pre, BN, ST, MINB)                                               \
  GEMM16_EPIS(pre, bf16, BF16, kn, 0, BN, ST, MINB)                                 \
  GEMM16_EPIS(pre, bf16, BF16, nk, 1, BN, ST, MINB)                                 \
  GEMM16_EPIS(pre, f16, F16, kn, 0, BN, ST, MINB)                                   \
  GEMM16_EPIS(pre, f16, F16, nk, 1, BN, ST, MINB)
GEMM16_ALL(te_gemm16, TE_GEMM16_BN, TE_GEMM16_STAGES, 1)

// The bias gradient from the parts (TE_GEMM16_BGRAD_PARAMS): lane l of a
// column adds parts l, l + LANES, ... in order; lane 0 then the lanes.
extern "C" __global__ void __launch_bounds__(TE_GEMM16_BG_COLS * TE_GEMM16_BG_LANES)
    te_gemm16_bgrad(TE_KSIG(TE_GEMM16_BGRAD_PARAMS)) {
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
