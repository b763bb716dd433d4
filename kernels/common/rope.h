/* SPDX-License-Identifier: Apache-2.0 */
/* rope.h -- the parameters of kernels/rope.cu (declared once, kparams.h)
 * and the math both backends share: a token's position and the cos / sin
 * of its angle for frequency i.
 *
 * The angle pos * theta^(-2i/rotary_dim) is formed and reduced modulo
 * 2 pi in double, then cos and sin are taken in float, so an angle of
 * 100000 radians is as accurate as one of 1.  Rotation: one IEEE operation
 * each (fmath.h), y1 = x1*c - x2*s, y2 = x2*c + x1*s, so cuda and vdev
 * agree to the last bit up to the sin/cos libraries' rounding. */
#ifndef TE_KERNELS_ROPE_H
#define TE_KERNELS_ROPE_H

#include "kparams.h"
#include "te_hd.h"
#include "fmath.h"
#ifndef __CUDACC__
#include <math.h>
#endif

/* flags */
#define TE_ROPE_INTERLEAVED 0x1 /* pairs 2i, 2i+1 (else i, i + rot/2) */
#define TE_ROPE_INVERSE 0x2     /* the backward: sin negated */
#define TE_ROPE_INPLACE 0x4     /* y is x: the pass-through part is left alone */
#define TE_ROPE_TABLE 0x8       /* cos_t / sin_t give the angles' cos and sin */
/* dtypes: x's code in bits 0-3, y's in bits 4-7 (TE_FP8_DT_*) */
#define TE_ROPE_DT(w, s) (((w) >> (4 * (s))) & 0xf)

/* Threads of a block; each block takes tokens blockIdx.x, + gridDim.x, ... */
#define TE_ROPE_THREADS 128
/* te_rope_v8: work items (16 elements) a thread keeps in flight, and the
 * shared-memory cos/sin table of a group of tokens (floats each). */
#define TE_ROPE_UNROLL 4
#define TE_ROPE_CS 2048

/* te_rope_v8's group: tokens whose cos/sin a block computes at once, so
 * that one pass of the block (TE_ROPE_UNROLL items a thread) covers them;
 * 1 .. TE_ROPE_CS / half.  The launcher sizes the grid by it. */
TE_HD int te_rope_group(int heads, int rot) {
  int items = heads * (rot / 16), half = rot / 2;
  int g = items > 0 ? TE_ROPE_UNROLL * TE_ROPE_THREADS / items : 1;
  if (g > TE_ROPE_CS / half) g = TE_ROPE_CS / half;
  return g < 1 ? 1 : g;
}

/* te_rope_v8 (8 frequencies a thread, 16-byte loads) and te_rope_v1 */
#define TE_ROPE_PARAMS(P)                  \
  P(const void *, x, eptr(22, 0))          \
  P(void *, y, eptr(22, 1))                \
  P(const float *, cos_t, ptr)             \
  P(const float *, sin_t, ptr)             \
  P(const int *, positions, ptr)           \
  P(const int *, cu_seqlens, ptr)          \
  P(const float *, scale, ptr)             \
  P(unsigned *, amax, ptr)                 \
  P(float *, scale_inv, ptr)               \
  P(unsigned long long, tokens, val)       \
  P(unsigned long long, x_ts, val)         \
  P(unsigned long long, x_hs, val)         \
  P(unsigned long long, y_ts, val)         \
  P(unsigned long long, y_hs, val)         \
  P(int, heads, val)                       \
  P(int, head_dim, val)                    \
  P(int, rot_dim, val)                     \
  P(int, batch, val)                       \
  P(long long, seq_len, val)               \
  P(long long, table_len, val)             \
  P(double, log2_theta, val)               \
  P(int, flags, val)                       \
  P(int, dtypes, val)                      \
  P(unsigned long long *, status, ptr)

#define TE_ROPE_2PI_HI 6.28318530717958623200e+00
#define TE_ROPE_2PI_LO 2.44929359829470635445e-16
#define TE_ROPE_INV_2PI 1.59154943091895335769e-01

/* The position of token t: given, from cu_seqlens (the sequence b with
 * cu[b] <= t < cu[b+1], by bisection), or t modulo seq_len. */
TE_HD long long te_rope_pos(unsigned long long t, const int *positions, const int *cu, int batch,
                            long long seq_len) {
  if (positions) return positions[t];
  if (cu) {
    int lo = 0, hi = batch; /* cu[lo] <= t < cu[hi] */
    while (hi - lo > 1) {
      int mid = (lo + hi) / 2;
      if ((long long)cu[mid] <= (long long)t) lo = mid; else hi = mid;
    }
    return (long long)t - cu[lo];
  }
  return seq_len > 0 ? (long long)(t % (unsigned long long)seq_len) : (long long)t;
}

/* theta^(-2i/rot) in double. */
TE_HD double te_rope_inv_freq(int i, int rot, double log2_theta) {
  return exp2(-(double)(2 * i) / (double)rot * log2_theta);
}

/* cos and sin of pos * inv_freq (sin negated for the inverse). */
TE_HD void te_rope_cs(long long pos, double inv_freq, int inverse, float *c, float *s) {
  double a = (double)pos * inv_freq;
  double k = rint(a * TE_ROPE_INV_2PI);
  double r = fma(-k, TE_ROPE_2PI_HI, a);
  r = fma(-k, TE_ROPE_2PI_LO, r);
  float rf = (float)r;
  *c = cosf(rf);
  *s = inverse ? -sinf(rf) : sinf(rf);
}

/* The same from a caller's table (a position outside it: cos 0, sin 0,
 * so the rotated part is written as zeros, never read from outside; the
 * kernels report it, te_rope_status). */
/* The caller's table: cos and sin [len][half]. */
struct te_rope_tab {
  const float *cos_t, *sin_t;
  long long len;
};
TE_HD void te_rope_cs_table(long long pos, int i, int half, struct te_rope_tab t, int inverse,
                            float *c, float *s) {
  if (pos < 0 || pos >= t.len) {
    *c = 0.0f;
    *s = 0.0f;
    return;
  }
  *c = t.cos_t[pos * half + i];
  float v = t.sin_t[pos * half + i];
  *s = inverse ? -v : v;
}

/* Status word (a uint64_t the host reads) of a table lookup that missed:
 * 0, or bit 63 | the token in bits 32-62 | the position (int32, clamped)
 * in bits 0-31.  The first miss a kernel sees is kept. */
#define TE_ROPE_STATUS_SET (1ull << 63)
TE_HD unsigned long long te_rope_status(unsigned long long t, long long pos) {
  long long p = pos < -2147483647ll - 1 ? -2147483647ll - 1 : (pos > 2147483647ll ? 2147483647ll : pos);
  return TE_ROPE_STATUS_SET | ((t & 0x7fffffffull) << 32) | (unsigned long long)(unsigned)(int)p;
}
/* 1 when token t's position misses the caller's table (flags TE_ROPE_TABLE). */
TE_HD int te_rope_table_miss(int flags, long long pos, long long table_len) {
  return (flags & TE_ROPE_TABLE) && (pos < 0 || pos >= table_len);
}

/* The rotation of one pair. */
TE_HD void te_rope_rot(float x1, float x2, float c, float s, float *y1, float *y2) {
  *y1 = te_sub_rn(te_mul_rn(x1, c), te_mul_rn(x2, s));
  *y2 = te_add_rn(te_mul_rn(x2, c), te_mul_rn(x1, s));
}

#endif
