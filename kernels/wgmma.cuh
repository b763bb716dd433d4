// SPDX-License-Identifier: Apache-2.0
// wgmma.cuh -- Hopper's warpgroup tensor-core instructions (sm_90a), as
// used by kernels/attention_fwd3.cuh: shared-memory matrix descriptors of
// 128-byte swizzled tiles, the fence / commit / wait of the asynchronous
// MMAs, and m64nNk16 MMAs with A in shared memory or in registers (F32
// accumulators, BF16 or F16 inputs).  TE_WGMMA is 1 where the code is
// compiled for sm_90a; elsewhere the callers compile to a trap.
//
// Tiles.  A tile of R rows (R a multiple of 8) and DP columns of 16-bit
// elements is stored as DP / 64 column blocks of R x 128 bytes, row r of a
// block at r * 128 and its 16-byte chunk c at (c ^ (r & 7)) * 16 -- the
// 128-byte swizzle the tensor cores undo, the block 1024-byte aligned.
// The same bytes serve as a K-major operand (rows = M or N, the 64
// columns of a block = 4 k-steps of 16, stepped by adding 32 bytes to the
// start address) and as an MN-major one (rows = K: 16 rows a k-step,
// 2048 bytes on; the column blocks LBO bytes apart along N).
#ifndef TE_KERNELS_WGMMA_CUH
#define TE_KERNELS_WGMMA_CUH

#include <stdint.h>

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TE_WGMMA 1
#else
#define TE_WGMMA 0
#endif

// Byte offset of (row r, 16-byte chunk c) in a 128-byte swizzled tile of R
// rows (above).
template <int R> __device__ __forceinline__ uint32_t sw128_off(int r, int c) {
  return (uint32_t)((c >> 3) * (R * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// A shared-memory matrix descriptor: start address, leading and stride
// byte offsets (16-byte units), 128-byte swizzle (layout type 1).
__device__ __forceinline__ uint64_t wg_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((saddr & 0x3FFFFu) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFFu) << 16) |
         ((uint64_t)((sbo >> 4) & 0x3FFFu) << 32) | (1ull << 62);
}
// K-major operand at saddr: 8-row groups 1024 bytes apart.
__device__ __forceinline__ uint64_t wg_desc_k(uint32_t saddr) { return wg_desc(saddr, 16, 1024); }
// MN-major operand at saddr: 8-row (K) groups 1024 bytes apart, 64-column
// (MN) blocks lbo bytes apart.
__device__ __forceinline__ uint64_t wg_desc_mn(uint32_t saddr, uint32_t lbo) {
  return wg_desc(saddr, lbo, 1024);
}

#if TE_WGMMA
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Shared-memory writes of the generic proxy (st.shared, cp.async) made
// visible to the tensor cores' reads.
__device__ __forceinline__ void wg_proxy_fence() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Keeps the compiler from moving a register's uses across a wgmma's
// asynchronous window (its accumulators and A fragments).
__device__ __forceinline__ void wg_keep(float &x) { asm volatile("" : "+f"(x)::"memory"); }
__device__ __forceinline__ void wg_keep(uint32_t &x) { asm volatile("" : "+r"(x)::"memory"); }
template <int N> __device__ __forceinline__ void wg_keep_all(float *x) {
#pragma unroll
  for (int i = 0; i < N; i++) wg_keep(x[i]);
}
template <int N> __device__ __forceinline__ void wg_keep_all(uint32_t *x) {
#pragma unroll
  for (int i = 0; i < N; i++) wg_keep(x[i]);
}

// The MMAs' asm for both input types (TY: "bf16" or "f16"); TE_WG_Dn and
// TE_WG_Rn: the n accumulators as operands and as their names in the asm.
#define TE_WG_D16 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), \
  "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), \
  "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define TE_WG_R16 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
#define TE_WG_SS_N32(TY) \
  asm volatile( \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n32k16.f32." TY "." TY " " \
      TE_WG_R16 \
      "%16, %17, p, 1, 1, %19, %20;\n}\n" \
      : TE_WG_D16 \
      : "l"(a), "l"(b), "r"(acc), "n"(TA), "n"(TB))
#define TE_WG_RS_N32(TY) \
  asm volatile( \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n32k16.f32." TY "." TY " " \
      TE_WG_R16 \
      "{%16, %17, %18, %19}, %20, p, 1, 1, %22;\n}\n" \
      : TE_WG_D16 \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(acc), "n"(TB))
// d[0..16) (+)= A B, m64n32k16: A and B in shared memory (descriptors a, b;
// transposed: TA, TB), accumulated when acc is nonzero.
template <int DT, int TA, int TB>
__device__ __forceinline__ void wg_ss_n32(float *d, uint64_t a, uint64_t b, int acc) {
  if (DT == BF16) TE_WG_SS_N32("bf16");
  else TE_WG_SS_N32("f16");
}
// d[0..16) (+)= A B, m64n32k16: A in registers (a[4], the m16n8k16 A fragment of
// the warp's 16 rows), B in shared memory (descriptor b; transposed: TB).
template <int DT, int TB>
__device__ __forceinline__ void wg_rs_n32(float *d, const uint32_t *a, uint64_t b,
                                          int acc) {
  if (DT == BF16) TE_WG_RS_N32("bf16");
  else TE_WG_RS_N32("f16");
}

#define TE_WG_D32 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), \
  "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), \
  "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), \
  "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), \
  "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), \
  "+f"(d[31])
#define TE_WG_R32 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, " \
  "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
#define TE_WG_SS_N64(TY) \
  asm volatile( \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " \
      TE_WG_R32 \
      "%32, %33, p, 1, 1, %35, %36;\n}\n" \
      : TE_WG_D32 \
      : "l"(a), "l"(b), "r"(acc), "n"(TA), "n"(TB))
#define TE_WG_RS_N64(TY) \
  asm volatile( \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " \
      TE_WG_R32 \
      "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n" \
      : TE_WG_D32 \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(acc), "n"(TB))
// d[0..32) (+)= A B, m64n64k16: A and B in shared memory (descriptors a, b;
// transposed: TA, TB), accumulated when acc is nonzero.
template <int DT, int TA, int TB>
__device__ __forceinline__ void wg_ss_n64(float *d, uint64_t a, uint64_t b, int acc) {
  if (DT == BF16) TE_WG_SS_N64("bf16");
  else TE_WG_SS_N64("f16");
}
// d[0..32) (+)= A B, m64n64k16: A in registers (a[4], the m16n8k16 A fragment of
// the warp's 16 rows), B in shared memory (descriptor b; transposed: TB).
template <int DT, int TB>
__device__ __forceinline__ void wg_rs_n64(float *d, const uint32_t *a, uint64_t b,
                                          int acc) {
  if (DT == BF16) TE_WG_RS_N64("bf16");
  else TE_WG_RS_N64("f16");
}

#define TE_WG_D64 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), \
  "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), \
  "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), \
  "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), \
  "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), \
  "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), \
  "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), \
  "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), \
  "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), \
  "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), \
  "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define TE_WG_R64 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, " \
  "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, " \
  "%34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, " \
  "%50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
#define TE_WG_SS_N128(TY) \
  asm volatile( \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " " \
      TE_WG_R64 \
      "%64, %65, p, 1, 1, %67, %68;\n}\n" \
      : TE_WG_D64 \
      : "l"(a), "l"(b), "r"(acc), "n"(TA), "n"(TB))
#define TE_WG_RS_N128(TY) \
  asm volatile( \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " " \
      TE_WG_R64 \
      "{%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n" \
      : TE_WG_D64 \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(acc), "n"(TB))
// d[0..64) (+)= A B, m64n128k16: A and B in shared memory (descriptors a, b;
// transposed: TA, TB), accumulated when acc is nonzero.
template <int DT, int TA, int TB>
__device__ __forceinline__ void wg_ss_n128(float *d, uint64_t a, uint64_t b, int acc) {
  if (DT == BF16) TE_WG_SS_N128("bf16");
  else TE_WG_SS_N128("f16");
}
// d[0..64) (+)= A B, m64n128k16: A in registers (a[4], the m16n8k16 A fragment of
// the warp's 16 rows), B in shared memory (descriptor b; transposed: TB).
template <int DT, int TB>
__device__ __forceinline__ void wg_rs_n128(float *d, const uint32_t *a, uint64_t b,
                                          int acc) {
  if (DT == BF16) TE_WG_RS_N128("bf16");
  else TE_WG_RS_N128("f16");
}

#define TE_WG_D128 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), \
  "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), \
  "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), \
  "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), \
  "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), \
  "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), \
  "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), \
  "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), \
  "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), \
  "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), \
  "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), \
  "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), \
  "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
  "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), \
  "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), \
  "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), \
  "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
  "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), \
  "+f"(d[126]), "+f"(d[127])
#define TE_WG_R128 \
  "{" \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, " \
  "%14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, " \
  "%28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, " \
  "%42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, " \
  "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, " \
  "%70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, " \
  "%84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, " \
  "%98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, " \
  "%126, %127" \
  "}, "
#define TE_WG_SS_N256(TY) \
  asm volatile( \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." TY "." TY " " \
      TE_WG_R128 \
      "%128, %129, p, 1, 1, %131, %132;\n}\n" \
      : TE_WG_D128 \
      : "l"(a), "l"(b), "r"(acc), "n"(TA), "n"(TB))
// d[0..128) (+)= A B, m64n256k16: A and B in shared memory (descriptors a,
// b; transposed: TA, TB), accumulated when acc is nonzero.  Its 128
// accumulators compile only in a kernel whose threads may hold at least
// 154 registers (ptxas): a block of at most 384 threads.
template <int DT, int TA, int TB>
__device__ __forceinline__ void wg_ss_n256(float *d, uint64_t a, uint64_t b, int acc) {
  if (DT == BF16) TE_WG_SS_N256("bf16");
  else TE_WG_SS_N256("f16");
}

// d (64 x N, N = 64 or 128) += A B over K = 16 KS, issued as one group
// after a fence: A the register fragments a[KS][4], B read MN-major
// (transposed) from KS 16-row k-steps 2048 bytes apart from b, 64-column
// blocks lbo bytes apart.
template <int DT, int N, int KS>
__device__ __forceinline__ void wg_rs_mn_group(float *d, uint32_t (*a)[4], uint32_t b,
                                               uint32_t lbo) {
  static_assert(N == 64 || N == 128, "m64n64k16 or m64n128k16");
  wg_fence();
#pragma unroll
  for (int kk = 0; kk < KS; kk++) {
    const uint64_t bd = wg_desc_mn(b + kk * 2048, lbo);
    if (N == 128) wg_rs_n128<DT, 1>(d, a[kk], bd, 1);
    else wg_rs_n64<DT, 1>(d, a[kk], bd, 1);
  }
  wg_commit();
}

#endif  // TE_WGMMA
#endif
