// SPDX-License-Identifier: Apache-2.0
// elementwise.cu -- fill, uniform initialization and scale-and-add over n elements of f32/f16/bf16,
// and memset (1-, 2- or 4-byte elements) as a kernel.
// Grid-stride loops.  scale_add moves 16 bytes per load and store where all
// three pointers are 16-byte aligned (8 16-bit or 4 f32 elements), with an
// element loop for the tail and for unaligned pointers.  The element math
// is kernels/common/elementwise.h, shared with the vdev implementation.
#include "common/elementwise.h"
#include "common/elementwise_params.h"
#include "colsum.cuh"
#include "ldst.cuh"
#include "pdl.cuh"

extern "C" __global__ void te_fill(TE_KSIG(TE_FILL_PARAMS)) {
  te_pdl_enter();
  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += stride)
    te_ew_store(dst, i, dtype, value);
}

extern "C" __global__ void te_init_uniform(TE_KSIG(TE_INIT_UNIFORM_PARAMS)) {
  te_pdl_enter();
  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += stride)
    te_ew_store(dst, i, dtype, te_ew_uniform(state, i, bound, round));
}

// A memset as a kernel: 16-byte stores of the repeated pattern where dst
// is 16-byte aligned, element stores for the head-less tail and otherwise.
// The pattern of a 1- or 2-byte value repeats exactly in 4 bytes.
extern "C" __global__ void te_memset(TE_KSIG(TE_MEMSET_PARAMS)) {
  te_pdl_enter();
  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  unsigned word = elem_size == 1 ? (value & 0xffu) * 0x01010101u
                  : elem_size == 2 ? (value & 0xffffu) * 0x00010001u
                                   : value;
  unsigned long long done = 0;
  if (((unsigned long long)dst & 15) == 0) {
    unsigned long long nv = n * (unsigned long long)elem_size / 16;
    uint4 v = make_uint4(word, word, word, word);
    for (unsigned long long i = tid; i < nv; i += stride) ((uint4 *)dst)[i] = v;
    done = nv * 16 / (unsigned long long)elem_size;
  }
  for (unsigned long long i = done + tid; i < n; i += stride) {
    if (elem_size == 1) ((unsigned char *)dst)[i] = (unsigned char)value;
    else if (elem_size == 2) ((unsigned short *)dst)[i] = (unsigned short)value;
    else ((unsigned *)dst)[i] = value;
  }
}

// A copy as a kernel: 16-byte loads and stores where both ends are
// 16-byte aligned, bytes for the tail and otherwise.  Either end may be
// pinned host memory (its device address): each thread's loads go out at
// once, so the PCIe reads of a small copy overlap.
extern "C" __global__ void te_copy(TE_KSIG(TE_COPY_PARAMS)) {
  te_pdl_enter();
  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  unsigned long long done = 0;
  if ((((unsigned long long)dst | (unsigned long long)src) & 15) == 0) {
    unsigned long long nv = n / 16;
    for (unsigned long long i = tid; i < nv; i += stride)
      ((uint4 *)dst)[i] = ((const uint4 *)src)[i];
    done = nv * 16;
  }
  for (unsigned long long i = done + tid; i < n; i += stride)
    ((unsigned char *)dst)[i] = ((const unsigned char *)src)[i];
}

// A 2-D copy of 4-byte elements between strides, zeros past the source
// (elementwise_params.h): one thread an element of the destination's
// extent, grid-stride.  Small arrays (a GEMM operand's block scales).
extern "C" __global__ void te_copy2d_u32(TE_KSIG(TE_COPY2D_U32_PARAMS)) {
  te_pdl_enter();
  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  unsigned long long total = drows * dcols;
  for (unsigned long long e = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
       e < total; e += stride) {
    unsigned long long i = e / dcols, j = e % dcols;
    dst[i * dsi + j * dsj] = i < srows && j < scols ? src[i * ssi + j * ssj] : 0u;
  }
}

// One 16-byte vector of VEC elements of dtype: loads, computes, stores.
template <int VEC>
__device__ __forceinline__ uint4 scale_add_vec(uint4 va, uint4 vb, float alpha, float beta,
                                               int dtype) {
  uint4 vd;
#pragma unroll
  for (int j = 0; j < VEC; j++)
    te_ew_store(&vd, j, dtype,
                te_ew_scale_add(te_ew_load(&va, j, dtype), alpha, te_ew_load(&vb, j, dtype), beta));
  return vd;
}

extern "C" __global__ void te_scale_add(TE_KSIG(TE_SCALE_ADD_PARAMS)) {
  te_pdl_enter();
  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  unsigned long long done = 0;
  if ((((unsigned long long)dst | (unsigned long long)a | (unsigned long long)b) & 15) == 0) {
    int vec = dtype == TE_EW_F32 ? 4 : 8;
    unsigned long long nv = n / vec;
    const uint4 *pa = (const uint4 *)a, *pb = (const uint4 *)b;
    uint4 *pd = (uint4 *)dst;
    for (unsigned long long i = tid; i < nv; i += stride)
      pd[i] = vec == 4 ? scale_add_vec<4>(pa[i], pb[i], alpha, beta, dtype)
                       : scale_add_vec<8>(pa[i], pb[i], alpha, beta, dtype);
    done = nv * vec;
  }
  for (unsigned long long i = done + tid; i < n; i += stride)
    te_ew_store(dst, i, dtype,
                te_ew_scale_add(te_ew_load(a, i, dtype), alpha, te_ew_load(b, i, dtype), beta));
}

// Column sums, part 1 (te_colsum_part): each thread adds its 8 columns
// over its lane's rows of the part, TE_COLSUM_UNROLL rows' loads in
// flight before any is added (in row order); the block's lanes are then
// added in lane order through shared memory (kernels/common/
// elementwise_params.h; elementwise_vdev.c adds in the same order).
extern "C" __global__ void __launch_bounds__(TE_COLSUM_VECS * TE_COLSUM_LANES)
    te_colsum_part(TE_KSIG(TE_COLSUM_PART_PARAMS)) {
  te_pdl_enter();
  __shared__ float part[TE_COLSUM_LANES][TE_COLSUM_VECS * 8 + 1];
  const te_colsum_at w = te_colsum_place(rows, rpp);
  const unsigned long long c = w.c, r1 = w.r1;
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  if (c < cols) {
    unsigned long long r = w.r;
    for (; r + (TE_COLSUM_UNROLL - 1) * TE_COLSUM_LANES < r1;
         r += TE_COLSUM_UNROLL * TE_COLSUM_LANES) {
      float v[TE_COLSUM_UNROLL][8];
#pragma unroll
      for (int u = 0; u < TE_COLSUM_UNROLL; u++)
        te_dev_ld8(in, (r + (unsigned long long)u * TE_COLSUM_LANES) * ld + c, dtype, v[u]);
#pragma unroll
      for (int u = 0; u < TE_COLSUM_UNROLL; u++)
#pragma unroll
        for (int k = 0; k < 8; k++) s[k] = te_add_rn(s[k], v[u][k]);
    }
    for (; r < r1; r += TE_COLSUM_LANES) {
      float v[8];
      te_dev_ld8(in, r * ld + c, dtype, v);
#pragma unroll
      for (int k = 0; k < 8; k++) s[k] = te_add_rn(s[k], v[k]);
    }
  }
  te_colsum_block_end(part, s, ws, cols);
}

// Column sums, part 2 (te_colsum_final): the parts of TE_COLSUM_FCOLS
// columns, lane l adding parts l, l + TE_COLSUM_FLANES, ...; lane 0 then
// adds the lanes in order, and out's old value when acc.
extern "C" __global__ void __launch_bounds__(TE_COLSUM_FCOLS * TE_COLSUM_FLANES)
    te_colsum_final(TE_KSIG(TE_COLSUM_FINAL_PARAMS)) {
  te_pdl_enter();
  __shared__ float lane[TE_COLSUM_FLANES][TE_COLSUM_FCOLS + 1];
  const unsigned tx = threadIdx.x, ty = threadIdx.y;
  const unsigned long long c = (unsigned long long)blockIdx.x * TE_COLSUM_FCOLS + tx;
  float s = 0.0f;
  // a lane's parts loaded PMAX at a time before any is added (one round
  // trip, not one a part), then added in part order
  constexpr int PMAX = 16;
  if (c < cols)
    for (unsigned long long p = ty; p < parts; p += PMAX * TE_COLSUM_FLANES) {
      float v[PMAX];
#pragma unroll
      for (int i = 0; i < PMAX; i++) {
        const unsigned long long q = p + (unsigned long long)i * TE_COLSUM_FLANES;
        v[i] = q < parts ? ws[q * cols + c] : 0.0f;
      }
#pragma unroll
      for (int i = 0; i < PMAX; i++)
        if (p + (unsigned long long)i * TE_COLSUM_FLANES < parts) s = te_add_rn(s, v[i]);
    }
  lane[ty][tx] = s;
  __syncthreads();
  if (ty == 0 && c < cols) {
    float t = lane[0][tx];
    for (int l = 1; l < TE_COLSUM_FLANES; l++) t = te_add_rn(t, lane[l][tx]);
    out[c] = acc ? te_add_rn(out[c], t) : t;
  }
}

// The key and value parts of a packed QKV bias gradient
// (TE_QKV_KV_BIAS_PARAMS): lane l of a column adds its rows' products in
// order, then lane 0 the lanes.
extern "C" __global__ void __launch_bounds__(TE_QKV_KV_COLS * TE_QKV_KV_LANES)
    te_qkv_kv_bias(TE_KSIG(TE_QKV_KV_BIAS_PARAMS)) {
  te_pdl_enter();
  __shared__ float lane[TE_QKV_KV_LANES][TE_QKV_KV_COLS + 1];
  const unsigned tx = threadIdx.x, ty = threadIdx.y;
  const unsigned kvd = (unsigned)(kv_heads * head_dim), n_in = (unsigned)(heads * head_dim);
  const unsigned c = blockIdx.x * TE_QKV_KV_COLS + tx;
  float s_l = 0.0f;
  if (c >= kvd && c < 2 * kvd) {
    const unsigned g = (c - kvd) / (unsigned)head_dim, d = (c - kvd) % (unsigned)head_dim;
    const unsigned rep = (unsigned)(heads / kv_heads);
    for (unsigned r = 0; r < rep; r++) {
      const unsigned j = (g * rep + r) * (unsigned)head_dim + d;
      // batches of 8 rows' loads in flight before their products are added
      unsigned i = ty;
      for (; i + 7 * TE_QKV_KV_LANES < n_out; i += 8 * TE_QKV_KV_LANES) {
        float sv[8], wv[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
          const unsigned iu = i + u * TE_QKV_KV_LANES;
          sv[u] = s[iu];
          wv[u] = te_ew_load(w, (unsigned long long)iu * n_in + j, dtype);
        }
#pragma unroll
        for (int u = 0; u < 8; u++) s_l = te_add_rn(s_l, te_mul_rn(sv[u], wv[u]));
      }
      for (; i < n_out; i += TE_QKV_KV_LANES)
        s_l = te_add_rn(s_l, te_mul_rn(s[i], te_ew_load(w, (unsigned long long)i * n_in + j, dtype)));
    }
  }
  lane[ty][tx] = s_l;
  __syncthreads();
  if (ty != 0 || c >= 2 * kvd) return;
  if (c < kvd) {   // the key part: exactly 0
    if (!acc) out[c] = 0.0f;
    return;
  }
  float t = lane[0][tx];
  for (int l = 1; l < TE_QKV_KV_LANES; l++) t = te_add_rn(t, lane[l][tx]);
  out[c] = acc ? te_add_rn(out[c], t) : t;
}
