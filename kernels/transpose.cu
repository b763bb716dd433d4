// SPDX-License-Identifier: Apache-2.0
// transpose.cu -- the cast-transpose family: one pass over an input
// [rows][cols] (F32, F16 or BF16) that writes its FP8 (E4M3/E5M2) rowwise
// copy [rows][cols] and columnwise copy, optionally the column sums of the
// values (dbias, first stage) and the amax; the values are the input itself
// or dx = dy * act'(x) for GELU, ReLU, SiLU, QGELU.
//
// Scaling:
//   per-tensor (te_ct_pt_*): q = fp8(v * *scale); the columnwise copy is the
//     transpose [cols][rows]; amax max-accumulated with one atomic per
//     block; *scale_inv (and the columnwise one) = 1 / *scale.
//   MXFP8 (te_ct_mx_*): 1x32 blocks along rows (E8M0 scales
//     [rows][cdiv(cols,32)]) and 32x1 blocks along columns (E8M0
//     [cdiv(rows,32)][cols]); the columnwise copy keeps the [rows][cols]
//     layout (te/tensor.h).
// Any shape: tiles of 64x64 (kernels/common/transpose.h gives the launch
// shape and the dbias order, shared with the vdev implementation);
// 16-byte loads and stores where rows are 16-byte aligned, element paths
// for tails and unaligned tensors.
//
// The per-tensor dact kernels with BF16 or F16 input run ct_body_pt2
// instead of ct_body: 128 threads of two tile rows each, the same bytes.
//
// Kernel names: te_ct_{pt,mx}_{none,gelu,relu,silu,qgelu}_{f32,f16,bf16},
// and the same with _db for the variants that also make dbias partial sums
// (the others ignore ws); the parameters are the same for all (see
// CT_PARAMS), and the flags word carries the output dtype and the
// vector-path bits.  te_ct_dbias_reduce
// is the second stage of dbias.
#include "common/transpose.h"
#include "common/transpose_params.h"
#include "ldst.cuh"
#include "pdl.cuh"

#define CT_T TE_CT_TILE

// 16 elements of row-major p from element index idx: n valid (0..16),
// the rest 0; vec: one or two 16-byte vectors per 8 elements.
template <int DT>
__device__ __forceinline__ void ct_ld16(const void *p, unsigned long long idx, int n, bool vec,
                                        float *v) {
  if (vec && n == TE_CT_CHUNK) {
    te_dev_ld8(p, idx, DT, v);
    te_dev_ld8(p, idx + 8, DT, v + 8);
  } else {
#pragma unroll
    for (int k = 0; k < TE_CT_CHUNK; k++) v[k] = k < n ? te_ld(p, idx + k, DT) : 0.0f;
  }
}

// Two FP8 codes from two scaled floats, lo in the low byte.  No NaN
// patch-up (ldst.cuh's te_dev_fp8x2 has one): a product here is NaN only
// as the GPU's canonical NaN, which the instruction turns into 0x7F, the
// code te_ct_q gives every NaN product.
__device__ __forceinline__ uint32_t ct_fp8x2(float lo, float hi, int dt) {
  unsigned short r;
  if (dt == TE_FP8_DT_E4M3)
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}

// Four bytes of FP8 from four scaled floats.
__device__ __forceinline__ uint32_t ct_fp8x4(float a, float b, float c, float d, int dt) {
  return ct_fp8x2(a, b, dt) | (ct_fp8x2(c, d, dt) << 16);
}

// Stores 16 bytes w[0..3] (little-endian) to p + idx, n valid.
__device__ __forceinline__ void ct_st16(uint8_t *p, unsigned long long idx, int n, bool vec,
                                        const uint32_t *w) {
  if (vec && n == TE_CT_CHUNK) {
    *(uint4 *)(p + idx) = make_uint4(w[0], w[1], w[2], w[3]);
  } else {
#pragma unroll
    for (int k = 0; k < TE_CT_CHUNK; k++)
      if (k < n) p[idx + k] = (uint8_t)(w[k >> 2] >> (8 * (k & 3)));
  }
}

// Reduce-scatter over the 8 lanes of a warp that hold the same 16 columns
// (lane bits 2..4 = the row within the warp's 8 rows): in v[16], this
// lane's values of columns 16*tj + k; out r[2], the reduction over the 8
// rows of columns 16*tj + ct_rs_col(lane) + i.  14 shuffles instead of a
// full butterfly's 48.  Every output is op applied as the tree
// ((a0 op a1) op (a2 op a3)) op ((a4 op a5) op (a6 op a7)) of the rows
// (op commutative), the order kernels/common/transpose.h documents.
// One level of it: in[2n] -> out[n], exchanging with the lane `mask` away;
// the lane with that bit set keeps the upper half.
template <int N, typename T, typename OP>
__device__ __forceinline__ void ct_rs_step(const T *in, T *out, int lane, int mask, OP op) {
  const bool hi = lane & mask;
#pragma unroll
  for (int i = 0; i < N; i++) {
    T send = hi ? in[i] : in[i + N], keep = hi ? in[i + N] : in[i];
    out[i] = op(keep, __shfl_xor_sync(0xffffffffu, send, mask));
  }
}
template <typename T, typename OP>
__device__ __forceinline__ void ct_rs16(const T *v, T *r, int lane, OP op) {
  T a[8], b[4];
  ct_rs_step<8>(v, a, lane, 4, op);
  ct_rs_step<4>(a, b, lane, 8, op);
  ct_rs_step<2>(b, r, lane, 16, op);
}
__device__ __forceinline__ int ct_rs_col(int lane) {
  return ((lane & 4) ? 8 : 0) + ((lane & 8) ? 4 : 0) + ((lane & 16) ? 2 : 0);
}
struct ct_add {
  __device__ float operator()(float a, float b) const { return __fadd_rn(a, b); }
};
struct ct_max {
  __device__ uint32_t operator()(uint32_t a, uint32_t b) const { return te_max_u32(a, b); }
};

// What a call of the family asks (the flags word, the outputs given) and
// where this thread's 16 columns start, for ct_body and ct_body_pt2.
struct ct_what {
  int out_dt;
  bool amax_only, vin, vrow, vcol, dbias, wrow, wcol;
  unsigned long long col0, c;   // the block's first column; this thread's
  int ncol;                     // columns of the 16 inside the tensor
};
__device__ __forceinline__ ct_what ct_what_of(bool db, unsigned flags, const void *orow,
                                              const void *ocol, const float *ws,
                                              unsigned long long cols, int tj) {
  ct_what w;
  w.out_dt = TE_CT_OUT_OF(flags);
  w.amax_only = (flags & TE_CT_F_AMAX_ONLY) != 0;
  w.vin = (flags & TE_CT_F_VEC_IN) != 0;
  w.vrow = (flags & TE_CT_F_VEC_ROW) != 0;
  w.vcol = (flags & TE_CT_F_VEC_COL) != 0;
  w.dbias = db && ws != nullptr && !w.amax_only;
  w.wrow = orow != nullptr && !w.amax_only;
  w.wcol = ocol != nullptr && !w.amax_only;
  w.col0 = (unsigned long long)blockIdx.x * CT_T;
  w.c = w.col0 + (unsigned long long)tj * TE_CT_CHUNK;
  w.ncol = w.c < cols ? (int)min(cols - w.c, (unsigned long long)TE_CT_CHUNK) : 0;
  return w;
}

// The kernels' parameters (kernels/common/transpose_params.h), which the
// body takes too.
#define CT_PARAMS TE_KSIG(TE_CT_PARAMS)
#define CT_ARGS TE_KNAMES(TE_CT_PARAMS)

// One function on purpose (about 165 lines, past the project's 120): the
// tile loop carries the thread's running amax, its two dbias column sums
// and the shared tiles' double-buffer index in registers from the load
// and activation through the rowwise cast into the transposed store.
// Helpers would take that state by reference; whether nvcc then emits the
// same code for every <IN, ACT, MX, DB> instantiation has to be shown on
// the SASS (cuobjdump -sass before and after), and until it is the phases
// stay in one body.
template <int IN, int ACT, bool MX, bool DB>
__device__ __forceinline__ void ct_body(CT_PARAMS) {
  // per-tensor: FP8 tiles for the transpose, two so one barrier per tile
  // suffices; rows of 4 16-byte chunks, chunk j of row r stored at
  // j ^ ((r / 16) % 4) so that the column reads hit 4 different banks.
  __shared__ __align__(16) uint8_t tbuf[2][CT_T * CT_T];
  __shared__ uint32_t cmax[TE_CT_WARPS][CT_T];   // MXFP8: per-warp column amax
  __shared__ float cmult[CT_T / TE_CT_MX_BLOCK][CT_T];
  __shared__ float part[TE_CT_WARPS][CT_T];      // dbias: per-warp column sums

  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int tr = t >> 2, tj = t & 3;
  // dbias is a template parameter: without it the kernels need fewer
  // registers (the cast kernels 32 instead of 40-48)
  const ct_what cw = ct_what_of(DB, flags, orow, ocol, ws, cols, tj);
  const int out_dt = cw.out_dt, ncol = cw.ncol;
  const bool amax_only = cw.amax_only, vin = cw.vin, vrow = cw.vrow, vcol = cw.vcol;
  const bool dbias = cw.dbias, wrow = cw.wrow, wcol = cw.wcol;
  const unsigned long long col0 = cw.col0, c = cw.c;

  // The per-tensor scale.  In the dact kernels thread 0 reads it once the
  // first tile's loads are out and hands it over through shared memory at
  // a barrier that every thread reaches with its own loads in flight, and
  // 1/scale is written at the end: a block casts one tile at 8192^2, and
  // with the scale read first (ptxas takes it into a uniform register at
  // once, R2UR, which waits for the load) every block waited one L2
  // latency before loading its tile.  The cast kernels read it first: the
  // late read costs them 8 registers (32 -> 40, 8 -> 6 blocks an SM).
  __shared__ float smult;
  const bool pt_scale = !MX && !amax_only;
  constexpr bool LATE_SCALE = ACT != TE_CT_ACT_NONE;
  float mult = 1.0f;
  if (pt_scale && !LATE_SCALE) {
    mult = *scale;
    if (blockIdx.x == 0 && blockIdx.y == 0 && t == 0) {
      float si = te_fp8_scale_inv(mult);
      if (sinv) *(float *)sinv = si;
      if (csinv) *(float *)csinv = si;
    }
  }

  uint32_t am = 0;
  // dbias: each tile's 8 rows per warp are reduced at once (ct_rs16), so a
  // lane carries two column sums across tiles, not sixteen
  float acc[2] = {0.0f, 0.0f};

  const unsigned long long rtiles = (rows + CT_T - 1) / CT_T;
  const unsigned long long rt0 = (unsigned long long)blockIdx.y * tpb;
  const unsigned long long rt1 = min(rt0 + tpb, rtiles);
  int buf = 0;
  for (unsigned long long rt = rt0; rt < rt1; rt++) {
    const unsigned long long row0 = rt * CT_T, r = row0 + tr;
    const int n = r < rows ? ncol : 0;
    const unsigned long long idx = r * cols + c;
    float v[TE_CT_CHUNK];
    ct_ld16<IN>(in, idx, n, vin, v);
    if (ACT != TE_CT_ACT_NONE) {
      float xv[TE_CT_CHUNK];
      ct_ld16<IN>(x, idx, n, vin, xv);
      if (LATE_SCALE && pt_scale && rt == rt0) {
        if (t == 0) smult = *scale;
        __syncthreads();
        mult = smult;
      }
#pragma unroll
      for (int k = 0; k < TE_CT_CHUNK; k++) v[k] = te_ct_value(ACT, v[k], xv[k]);
    }
    if (amax) {
#pragma unroll
      for (int k = 0; k < TE_CT_CHUNK; k++) am = te_max_u32(am, te_abs_bits(v[k]));
    }
    if (dbias) {
      float r2[2];
      ct_rs16(v, r2, lane, ct_add());
      acc[0] = __fadd_rn(acc[0], r2[0]);
      acc[1] = __fadd_rn(acc[1], r2[1]);
    }
    if (amax_only) continue;

    if (!MX) {
      uint32_t w[4];
#pragma unroll
      for (int i = 0; i < 4; i++)
        w[i] = ct_fp8x4(te_mul_rn(v[4 * i], mult), te_mul_rn(v[4 * i + 1], mult),
                        te_mul_rn(v[4 * i + 2], mult), te_mul_rn(v[4 * i + 3], mult), out_dt);
      if (wrow && n) ct_st16(orow, idx, n, vrow, w);
      if (wcol) {
        uint8_t *tb = tbuf[buf];
        *(uint4 *)(tb + tr * CT_T + ((tj ^ ((tr >> 4) & 3)) << 4)) =
            make_uint4(w[0], w[1], w[2], w[3]);
        __syncthreads();
        // thread -> output row (input column) tc, input rows rb*16 .. +15
        const int tc = warp * 8 + (lane & 7), rb = lane >> 3;
        const unsigned long long oc = col0 + tc, orow0 = row0 + rb * 16;
        if (oc < cols && orow0 < rows) {
          const uint8_t *src = tb + (((tc >> 4) ^ rb) << 4) + (tc & 15) + rb * 16 * CT_T;
          uint32_t o[4];
#pragma unroll
          for (int i = 0; i < 4; i++)
            o[i] = (uint32_t)src[(4 * i) * CT_T] | ((uint32_t)src[(4 * i + 1) * CT_T] << 8) |
                   ((uint32_t)src[(4 * i + 2) * CT_T] << 16) |
                   ((uint32_t)src[(4 * i + 3) * CT_T] << 24);
          const int nr = (int)min(rows - orow0, (unsigned long long)16);
          ct_st16(ocol, oc * rows + orow0, nr, vcol, o);
        }
        buf ^= 1;
      }
    } else {
      if (wrow) {
        // a 32-element block is two threads' chunks: lanes l and l^1
        uint32_t m = 0;
#pragma unroll
        for (int k = 0; k < TE_CT_CHUNK; k++) m = te_max_u32(m, te_abs_bits(v[k]));
        m = te_max_u32(m, __shfl_xor_sync(0xffffffffu, m, 1));
        const uint8_t e8 = te_e8m0_from_amax(te_bits_f32(m), out_dt);
        const float rm = te_e8m0_quant_mult(e8);
        uint32_t w[4];
#pragma unroll
        for (int i = 0; i < 4; i++)
          w[i] = ct_fp8x4(te_mul_rn(v[4 * i], rm), te_mul_rn(v[4 * i + 1], rm),
                          te_mul_rn(v[4 * i + 2], rm), te_mul_rn(v[4 * i + 3], rm), out_dt);
        if (n) {
          ct_st16(orow, idx, n, vrow, w);
          if (!(tj & 1))
            ((uint8_t *)sinv)[r * ((cols + TE_CT_MX_BLOCK - 1) / TE_CT_MX_BLOCK) +
                              c / TE_CT_MX_BLOCK] = e8;
        }
      }
      if (wcol) {
        // column amax over a warp's 8 rows (lanes with equal tj), then
        // over the 4 warps of each 32-row block
        uint32_t m[TE_CT_CHUNK], mr[2];
#pragma unroll
        for (int k = 0; k < TE_CT_CHUNK; k++) m[k] = te_abs_bits(v[k]);
        ct_rs16(m, mr, lane, ct_max());
        cmax[warp][tj * TE_CT_CHUNK + ct_rs_col(lane)] = mr[0];
        cmax[warp][tj * TE_CT_CHUNK + ct_rs_col(lane) + 1] = mr[1];
        __syncthreads();
        if (t < 2 * CT_T) {
          const int h = t / CT_T, cc = t % CT_T;
          uint32_t mm = 0;
#pragma unroll
          for (int w4 = 0; w4 < 4; w4++) mm = te_max_u32(mm, cmax[4 * h + w4][cc]);
          const uint8_t e8 = te_e8m0_from_amax(te_bits_f32(mm), out_dt);
          cmult[h][cc] = te_e8m0_quant_mult(e8);
          const unsigned long long br = row0 + (unsigned long long)h * TE_CT_MX_BLOCK;
          if (br < rows && col0 + cc < cols)
            ((uint8_t *)csinv)[(br / TE_CT_MX_BLOCK) * cols + col0 + cc] = e8;
        }
        __syncthreads();
        const float *cm = cmult[tr / TE_CT_MX_BLOCK] + tj * TE_CT_CHUNK;
        uint32_t w[4];
#pragma unroll
        for (int i = 0; i < 4; i++)
          w[i] = ct_fp8x4(te_mul_rn(v[4 * i], cm[4 * i]), te_mul_rn(v[4 * i + 1], cm[4 * i + 1]),
                          te_mul_rn(v[4 * i + 2], cm[4 * i + 2]),
                          te_mul_rn(v[4 * i + 3], cm[4 * i + 3]), out_dt);
        if (n) ct_st16(ocol, idx, n, vcol, w);
      }
    }
  }

  if (LATE_SCALE && pt_scale && blockIdx.x == 0 && blockIdx.y == 0 && t == 0) {
    float si = te_fp8_scale_inv(*scale);
    if (sinv) *(float *)sinv = si;
    if (csinv) *(float *)csinv = si;
  }
  if (amax) te_dev_block_amax(amax, am);

  if (dbias) {
    // the 8 warps in order
    part[warp][tj * TE_CT_CHUNK + ct_rs_col(lane)] = acc[0];
    part[warp][tj * TE_CT_CHUNK + ct_rs_col(lane) + 1] = acc[1];
    __syncthreads();
    if (t < CT_T && col0 + t < cols) {
      float s = part[0][t];
#pragma unroll
      for (int w8 = 1; w8 < TE_CT_WARPS; w8++) s = __fadd_rn(s, part[w8][t]);
      ws[(unsigned long long)blockIdx.y * cols + col0 + t] = s;
    }
  }
}

// ---- the per-tensor dact kernels: two rows a thread ------------------------
//
// TE_CT_THREADS_PT2 threads; thread t holds tile rows 2p and 2p+1 (p =
// t/4) and the 16 columns 16*(t%4) ..: two chunks, so what a thread pays
// once a tile (indices, the scale, the loop, the dbias and amax epilogue)
// is spread over twice the elements, and a warp has twice the loads in
// flight.  The bytes are the ones ct_body (and vdev) gives: the same
// element math and the same dbias order, since the 8 rows of a dbias group
// (kernels/common/transpose.h) are now 4 lanes' row pairs, and
// ((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7)) adds each pair in the thread before
// two shuffle levels add the pairs.
//
// The transposed copy goes through a tile in shared memory whose row r
// sits at slot te_ct_pt2_slot(r) (bits 0 and 1 of r swapped) so that the
// 8 lanes of a quarter-warp store rows 4q, 4q+2 (and 4q+1, 4q+3) into the
// two halves of the 128-byte bank line: no bank conflict; the 16-byte
// chunks are swizzled by row/16 as in ct_body.  It is read two columns at
// a time (16-bit loads, then byte permutes).
__device__ __forceinline__ int ct_pt2_slot(int r) {
  return (r & ~3) | ((r & 1) << 1) | ((r >> 1) & 1);
}

// Reduce-scatter over the 4 lanes (lane bits 2 and 3) that hold the same
// 16 columns of one dbias group: in s[16], this lane's row-pair sums of
// columns 16*tj + k; out r[4], the group sums of columns 16*tj +
// ct_pt2_col(lane) + i.
__device__ __forceinline__ void ct_pt2_rs(const float *s, float *r, int lane) {
  float a[8];
  ct_rs_step<8>(s, a, lane, 4, ct_add());
  ct_rs_step<4>(a, r, lane, 8, ct_add());
}
__device__ __forceinline__ int ct_pt2_col(int lane) { return ((lane & 4) ? 8 : 0) + ((lane & 8) ? 4 : 0); }

// 16 elements of a 16-bit (BF16, F16) row-major p from element index idx,
// packed two a register (element 2k in the low half of u[k]): n valid, the
// rest 0; vec: two 16-byte vectors.
__device__ __forceinline__ void ct_ld16h(const void *p, unsigned long long idx, int n, bool vec,
                                         uint32_t *u) {
  const uint16_t *q = (const uint16_t *)p + idx;
  if (vec && n == TE_CT_CHUNK) {
    const uint4 a = ((const uint4 *)q)[0], b = ((const uint4 *)q)[1];
    u[0] = a.x; u[1] = a.y; u[2] = a.z; u[3] = a.w;
    u[4] = b.x; u[5] = b.y; u[6] = b.z; u[7] = b.w;
  } else {
#pragma unroll
    for (int k = 0; k < TE_CT_CHUNK / 2; k++)
      u[k] = (2 * k < n ? (uint32_t)q[2 * k] : 0u) | (2 * k + 1 < n ? (uint32_t)q[2 * k + 1] << 16 : 0u);
  }
}
// Element i of a packed pair as float (exact: BF16 and F16 widen exactly).
template <int IN>
__device__ __forceinline__ float ct_h2f(uint32_t u, int i) {
  if (IN == TE_FP8_DT_BF16) return __uint_as_float(i ? u & 0xffff0000u : u << 16);
  return te_dev_h2f(i ? u >> 16 : u & 0xffffu);
}

// The running amax of ct_body_pt2 as two maxima of the values' bits, one
// signed and one unsigned, so that an element costs one operand of a
// three-way max (VIMNMX3) in each, not an AND and half a max: the signed
// maximum is the largest |v| of the values with the sign bit clear (the
// others are negative as int32), the unsigned one the largest |v| of
// those with it set when there is one; max(|v|) as bits, te_abs_bits'
// order (NaN above infinity), is the larger of the two with the sign bit
// cleared.
struct ct_amax2 {
  int s;
  uint32_t u;
};
__device__ __forceinline__ void ct_amax2_add(ct_amax2 *m, float a, float b) {
  const uint32_t ua = __float_as_uint(a), ub = __float_as_uint(b);
  m->s = max(m->s, max((int)ua, (int)ub));
  m->u = max(m->u, max(ua, ub));
}
__device__ __forceinline__ uint32_t ct_amax2_bits(const ct_amax2 *m) {
  return te_max_u32((uint32_t)m->s & 0x7fffffffu, m->u & 0x7fffffffu);
}

// One row chunk of ct_body_pt2: v = dy * act'(x) from the packed inputs;
// the amax; s = v (first row) or s + v (second, when sum); w = the FP8
// codes of v * mult.
// What ct_pt2_row adds to: the running amax and the dbias row sums.
struct pt2_acc {
  ct_amax2 *am;
  float *s;
};
template <int IN, int ACT>
__device__ __forceinline__ void ct_pt2_row(const uint32_t *d, const uint32_t *xs, float mult,
                                           int out_dt, bool want_amax, const pt2_acc acc,
                                           bool sum, uint32_t *w) {
  ct_amax2 *am = acc.am;
  float *s = acc.s;
  float v[TE_CT_CHUNK];
#pragma unroll
  for (int k = 0; k < TE_CT_CHUNK; k++)
    v[k] = te_ct_value(ACT, ct_h2f<IN>(d[k >> 1], k & 1), ct_h2f<IN>(xs[k >> 1], k & 1));
  if (want_amax) {
#pragma unroll
    for (int k = 0; k < TE_CT_CHUNK; k += 2) ct_amax2_add(am, v[k], v[k + 1]);
  }
#pragma unroll
  for (int k = 0; k < TE_CT_CHUNK; k++) s[k] = sum ? __fadd_rn(s[k], v[k]) : v[k];
#pragma unroll
  for (int i = 0; i < 4; i++)
    w[i] = ct_fp8x4(te_mul_rn(v[4 * i], mult), te_mul_rn(v[4 * i + 1], mult),
                    te_mul_rn(v[4 * i + 2], mult), te_mul_rn(v[4 * i + 3], mult), out_dt);
}

template <int IN, int ACT, bool DB>
__device__ __forceinline__ void ct_body_pt2(CT_PARAMS) {
  __shared__ __align__(16) uint8_t tbuf[2][CT_T * CT_T];
  __shared__ __align__(16) float part[CT_T / 8][CT_T];   // dbias: per-group column sums
  __shared__ uint32_t wmax[TE_CT_THREADS_PT2 / 32];      // amax: per-warp maxima
  __shared__ float smult;

  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int p = t >> 2, tj = t & 3;
  const ct_what cw = ct_what_of(DB, flags, orow, ocol, ws, cols, tj);
  const bool amax_only = cw.amax_only, dbias = cw.dbias;
  // shared-tile offsets of this thread's two rows (store) and of its two
  // columns' 16-row block (load)
  const int swz = (tj ^ ((p >> 3) & 3)) << 4;
  const int st0 = ct_pt2_slot(2 * p) * CT_T + swz, st1 = ct_pt2_slot(2 * p + 1) * CT_T + swz;
  const int c2 = lane & 7, rb = lane >> 3, tc = warp * 16 + 2 * c2;
  const int ld0 = rb * 16 * CT_T + ((warp ^ rb) << 4) + 2 * c2;

  float mult = 1.0f;
  ct_amax2 am = {0, 0u};
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};

  const unsigned long long rtiles = (rows + CT_T - 1) / CT_T;
  const unsigned long long rt0 = (unsigned long long)blockIdx.y * tpb;
  const unsigned long long rt1 = min(rt0 + tpb, rtiles);
  int buf = 0;
  for (unsigned long long rt = rt0; rt < rt1; rt++) {
    const unsigned long long row0 = rt * CT_T, r = row0 + 2 * p;
    const int n0 = r < rows ? cw.ncol : 0, n1 = r + 1 < rows ? cw.ncol : 0;
    const unsigned long long idx = r * cols + cw.c;
    // the inputs stay packed (two 16-bit values a register) until used
    uint32_t d0[TE_CT_CHUNK / 2], d1[TE_CT_CHUNK / 2], x0[TE_CT_CHUNK / 2], x1[TE_CT_CHUNK / 2];
    ct_ld16h(in, idx, n0, cw.vin, d0);
    ct_ld16h(in, idx + cols, n1, cw.vin, d1);
    ct_ld16h(x, idx, n0, cw.vin, x0);
    ct_ld16h(x, idx + cols, n1, cw.vin, x1);
    // the scale, read once the first tile's loads are out (ct_body says why)
    if (!amax_only && rt == rt0) {
      if (t == 0) smult = *scale;
      __syncthreads();
      mult = smult;
    }
    // row 2p, then row 2p+1 (s: the row-pair sums for dbias), so that one
    // row's floats are live at a time
    float s[TE_CT_CHUNK];
    uint32_t w0[4], w1[4];
    ct_pt2_row<IN, ACT>(d0, x0, mult, cw.out_dt, amax != nullptr, {&am, s}, false, w0);
    ct_pt2_row<IN, ACT>(d1, x1, mult, cw.out_dt, amax != nullptr, {&am, s}, DB, w1);
    if (dbias) {
      float r4[4];
      ct_pt2_rs(s, r4, lane);
#pragma unroll
      for (int i = 0; i < 4; i++) acc[i] = __fadd_rn(acc[i], r4[i]);
    }
    if (amax_only) continue;
    if (cw.wrow) {
      if (n0) ct_st16(orow, idx, n0, cw.vrow, w0);
      if (n1) ct_st16(orow, idx + cols, n1, cw.vrow, w1);
    }
    if (cw.wcol) {
      uint8_t *tb = tbuf[buf];
      *(uint4 *)(tb + st0) = make_uint4(w0[0], w0[1], w0[2], w0[3]);
      *(uint4 *)(tb + st1) = make_uint4(w1[0], w1[1], w1[2], w1[3]);
      __syncthreads();
      // output rows (input columns) tc and tc+1, input rows rb*16 .. +15
      const unsigned long long oc = cw.col0 + tc, orow0 = row0 + rb * 16;
      if (oc < cols && orow0 < rows) {
        const uint8_t *src = tb + ld0;
        uint32_t h[TE_CT_CHUNK];
#pragma unroll
        for (int k = 0; k < TE_CT_CHUNK; k++) h[k] = *(const uint16_t *)(src + ct_pt2_slot(k) * CT_T);
        // h[k] = column tc in byte 0, tc+1 in byte 1, of input row k
        uint32_t o0[4], o1[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
          const uint32_t lo = __byte_perm(h[4 * i], h[4 * i + 1], 0x5140);
          const uint32_t hi = __byte_perm(h[4 * i + 2], h[4 * i + 3], 0x5140);
          o0[i] = __byte_perm(lo, hi, 0x5410);
          o1[i] = __byte_perm(lo, hi, 0x7632);
        }
        const int nr = (int)min(rows - orow0, (unsigned long long)16);
        ct_st16(ocol, oc * rows + orow0, nr, cw.vcol, o0);
        if (oc + 1 < cols) ct_st16(ocol, (oc + 1) * rows + orow0, nr, cw.vcol, o1);
      }
      buf ^= 1;
    }
  }

  if (!amax_only && blockIdx.x == 0 && blockIdx.y == 0 && t == 0) {
    float si = te_fp8_scale_inv(*scale);
    if (sinv) *(float *)sinv = si;
    if (csinv) *(float *)csinv = si;
  }
  // amax and dbias share one barrier (te_dev_block_amax has two of its
  // own): each warp's amax and the group sums go to shared memory, then
  // thread 0 max-accumulates the block's amax (the atomic only where it
  // raises the value) and threads 0..63 add the 8 groups in order.
  if (amax) {
    const uint32_t m = __reduce_max_sync(0xffffffffu, ct_amax2_bits(&am));
    if (lane == 0) wmax[warp] = m;
  }
  if (dbias)
    *(float4 *)&part[p >> 2][tj * TE_CT_CHUNK + ct_pt2_col(lane)] =
        make_float4(acc[0], acc[1], acc[2], acc[3]);
  if (amax || dbias) __syncthreads();
  if (amax && t == 0) {
    uint32_t m = wmax[0];
#pragma unroll
    for (int w = 1; w < TE_CT_THREADS_PT2 / 32; w++) m = te_max_u32(m, wmax[w]);
    if (m > *(volatile unsigned *)amax) atomicMax(amax, m);
  }
  if (dbias) {
    if (t < CT_T && cw.col0 + t < cols) {
      float s = part[0][t];
#pragma unroll
      for (int g = 1; g < CT_T / 8; g++) s = __fadd_rn(s, part[g][t]);
      ws[(unsigned long long)blockIdx.y * cols + cw.col0 + t] = s;
    }
  }
}

// Blocks per SM the compiler must leave room for, for the dact kernels.
// A block casts one 64x64 tile at 8192^2 (TE_CT_TARGET_BLOCKS), so it has
// nothing to load while it computes, converts and waits at its barrier:
// only other resident blocks keep the memory busy.  Since the FMA-only
// activations (kernels/common/act.h) the per-tensor kernels with bf16 or
// f32 input fit in 48 registers without spilling (ptxas, sm_90a: stack
// 0; te_ct_pt_gelu_bf16_db took 64 at 4 blocks, and at 6 blocks, 40
// registers, it spills 24 bytes, 15 local loads and stores a tile), so
// 5 blocks (40 warps) fit, not 4 (32).  f16 input (its conversions) and
// MXFP8 (its scale tiles) would spill 8 to 40 bytes at 48 and keep 4.
// (Before those activations 4 blocks of 64 registers, a few bytes of
// spill, beat 3 blocks of 71: dgelu 8192^2 on an H100, 256 against 288 us.)
#ifndef CT_MINB_ACT
#define CT_MINB_ACT 5
#endif
// ct_body_pt2: 8 blocks of 128 threads (32 warps, 64 registers), no spill
// (ptxas, CUDA 13.0, sm_90a) once a row's floats are live one row at a
// time (ct_pt2_row) and the dbias row-pair sum has no run-time branch; the
// first version, all 64 values unpacked at once, spilled 100-200 bytes
// even at 72 or 80 registers.
#ifndef CT_MINB_PT2
#define CT_MINB_PT2 8
#endif
#ifndef CT_MINB_ACT_SPILLS
#define CT_MINB_ACT_SPILLS 4
#endif
#define CT_KERNEL_(bounds, name, MXV, ACTV, DTV, DBV)                             \
  extern "C" __global__ void bounds name(CT_PARAMS) {                             \
    te_pdl_enter();                                                               \
    ct_body<DTV, ACTV, MXV, DBV>(CT_ARGS);                                        \
  }
#define CT_BOUNDS_CAST __launch_bounds__(TE_CT_THREADS)
#define CT_BOUNDS_ACT(minb) __launch_bounds__(TE_CT_THREADS, minb)
#define CT_KERNELS_ACT(bounds, mode, act, dt, MXV, ACTV, DTV)                     \
  CT_KERNEL_(bounds, te_ct_##mode##_##act##_##dt, MXV, ACTV, DTV, false)          \
  CT_KERNEL_(bounds, te_ct_##mode##_##act##_##dt##_db, MXV, ACTV, DTV, true)
#define CT_KERNELS_DT(mode, MXV, dt, DTV, MINB)                                   \
  CT_KERNELS_ACT(CT_BOUNDS_CAST, mode, none, dt, MXV, TE_CT_ACT_NONE, DTV)        \
  CT_KERNELS_ACT(CT_BOUNDS_ACT(MINB), mode, gelu, dt, MXV, TE_ACT_GELU, DTV)      \
  CT_KERNELS_ACT(CT_BOUNDS_ACT(MINB), mode, relu, dt, MXV, TE_ACT_RELU, DTV)      \
  CT_KERNELS_ACT(CT_BOUNDS_ACT(MINB), mode, silu, dt, MXV, TE_ACT_SILU, DTV)      \
  CT_KERNELS_ACT(CT_BOUNDS_ACT(MINB), mode, qgelu, dt, MXV, TE_ACT_QGELU, DTV)
// The per-tensor dact kernels: ct_body_pt2, TE_CT_THREADS_PT2 threads.
#define CT_KERNEL_PT2_(name, ACTV, DTV, DBV, MINB)                                \
  extern "C" __global__ void __launch_bounds__(TE_CT_THREADS_PT2, MINB)           \
      name(CT_PARAMS) {                                                           \
    te_pdl_enter();                                                               \
    ct_body_pt2<DTV, ACTV, DBV>(CT_ARGS);                                         \
  }
#define CT_KERNELS_PT2_ACT(act, dt, ACTV, DTV, MINB)                             \
  CT_KERNEL_PT2_(te_ct_pt_##act##_##dt, ACTV, DTV, false, MINB)                   \
  CT_KERNEL_PT2_(te_ct_pt_##act##_##dt##_db, ACTV, DTV, true, MINB)
#define CT_KERNELS_PT(dt, DTV, MINB)                                              \
  CT_KERNELS_ACT(CT_BOUNDS_CAST, pt, none, dt, false, TE_CT_ACT_NONE, DTV)        \
  CT_KERNELS_PT2_ACT(gelu, dt, TE_ACT_GELU, DTV, MINB)                            \
  CT_KERNELS_PT2_ACT(relu, dt, TE_ACT_RELU, DTV, MINB)                            \
  CT_KERNELS_PT2_ACT(silu, dt, TE_ACT_SILU, DTV, MINB)                            \
  CT_KERNELS_PT2_ACT(qgelu, dt, TE_ACT_QGELU, DTV, MINB)

CT_KERNELS_DT(pt, false, f32, TE_FP8_DT_F32, CT_MINB_ACT)
CT_KERNELS_PT(f16, TE_FP8_DT_F16, CT_MINB_PT2)
CT_KERNELS_PT(bf16, TE_FP8_DT_BF16, CT_MINB_PT2)
CT_KERNELS_DT(mx, true, f32, TE_FP8_DT_F32, CT_MINB_ACT_SPILLS)
CT_KERNELS_DT(mx, true, f16, TE_FP8_DT_F16, CT_MINB_ACT_SPILLS)
CT_KERNELS_DT(mx, true, bf16, TE_FP8_DT_BF16, CT_MINB_ACT_SPILLS)

// dbias, second stage (the order of kernels/common/transpose.h): block of
// 256 threads = TE_CT_RED_COLS columns x TE_CT_RED_CHUNKS chunks of the
// parts partial sums; each thread adds its chunk, thread (c, 0) the chunk
// sums, and rounds to dtype (F32, F16, BF16).
extern "C" __global__ void __launch_bounds__(TE_CT_RED_COLS * TE_CT_RED_CHUNKS)
    te_ct_dbias_reduce(TE_KSIG(TE_CTR_PARAMS)) {
  te_pdl_enter();
  __shared__ float sums[TE_CT_RED_CHUNKS][TE_CT_RED_COLS];
  __shared__ int used[TE_CT_RED_CHUNKS];
  const int tc = threadIdx.x % TE_CT_RED_COLS, j = threadIdx.x / TE_CT_RED_COLS;
  const unsigned long long c = (unsigned long long)blockIdx.x * TE_CT_RED_COLS + tc;
  const unsigned chunk = te_ct_red_chunk(parts);
  const unsigned p0 = j * chunk, p1 = min(parts, p0 + chunk);
  if (tc == 0) used[j] = p0 < p1;
  if (c < cols && p0 < p1) {
    float s = ws[(unsigned long long)p0 * cols + c];
#pragma unroll 8
    for (unsigned p = p0 + 1; p < p1; p++) s = __fadd_rn(s, ws[(unsigned long long)p * cols + c]);
    sums[j][tc] = s;
  }
  __syncthreads();
  if (j == 0 && c < cols) {
    float s = sums[0][tc];
    for (int k = 1; k < TE_CT_RED_CHUNKS; k++)
      if (used[k]) s = __fadd_rn(s, sums[k][tc]);
    te_st(dbias, c, dtype, s);
  }
}

// Byte transpose (te_ct_byte_transpose): out [cols][rows] = in^T for
// 1-byte codes, the columnwise copy of an FP8 tensor from its rowwise one
// with the same per-tensor scale (no conversion, so no math to agree on).
// 64x64 tiles through shared memory; thread t loads 16 bytes of tile row
// t/4 (one 16-byte vector where the rows are 16-byte aligned) and stores
// 16 bytes of transposed row t/4 (input column), gathered from the tile's
// column; rows padded by 4 bytes so that the gathers of a warp spread
// over the banks.  Bounds checked for any shape; the blocks stride over
// the tiles, so any grid covers the tensor.
extern "C" __global__ void __launch_bounds__(TE_CT_THREADS)
    te_ct_byte_transpose(TE_KSIG(TE_CTB_PARAMS)) {
  te_pdl_enter();
  __shared__ __align__(16) uint8_t tile[CT_T][CT_T + 4];
  const int t = threadIdx.x, tr = t / 4, tc = (t % 4) * TE_CT_CHUNK;
  const bool vin = ((unsigned long long)in % 16 == 0) && cols % 16 == 0;
  const bool vout = ((unsigned long long)out % 16 == 0) && rows % 16 == 0;
  const unsigned long long rtiles = (rows + CT_T - 1) / CT_T, ctiles = (cols + CT_T - 1) / CT_T;
  for (unsigned long long ct = blockIdx.x; ct < ctiles; ct += gridDim.x) {
    const unsigned long long col0 = ct * CT_T;
    for (unsigned long long rt = blockIdx.y; rt < rtiles; rt += gridDim.y) {
      const unsigned long long row0 = rt * CT_T;
      const unsigned long long r = row0 + tr, c = col0 + tc;
      if (r < rows && c < cols) {
        const unsigned long long n = cols - c;
        const uint8_t *p = in + r * cols + c;
        if (vin && n >= TE_CT_CHUNK) {
          const uint4 v = *(const uint4 *)p;
          uint32_t *d = (uint32_t *)&tile[tr][tc];
          d[0] = v.x;
          d[1] = v.y;
          d[2] = v.z;
          d[3] = v.w;
        } else {
#pragma unroll
          for (int k = 0; k < TE_CT_CHUNK; k++)
            if (k < n) tile[tr][tc + k] = p[k];
        }
      }
      __syncthreads();
      // this thread's output row is input column col0 + tr, its 16 bytes
      // input rows row0 + tc ..
      const unsigned long long oc = col0 + tr, orow = row0 + tc;
      if (oc < cols && orow < rows) {
        const unsigned long long n = rows - orow;
        uint8_t *q = out + oc * rows + orow;
        if (vout && n >= TE_CT_CHUNK) {
          uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
          for (int k = 0; k < TE_CT_CHUNK; k++) w[k >> 2] |= (uint32_t)tile[tc + k][tr] << (8 * (k & 3));
          *(uint4 *)q = make_uint4(w[0], w[1], w[2], w[3]);
        } else {
#pragma unroll
          for (int k = 0; k < TE_CT_CHUNK; k++)
            if (k < n) q[k] = tile[tc + k][tr];
        }
      }
      __syncthreads();
    }
  }
}
