/* SPDX-License-Identifier: Apache-2.0 */
/* optim.h -- the element math and launch geometry of the optimizer kernels
 * (kernels/optim.cu) and their vdev implementations (libtecore/optim):
 * Adam / AdamW and SGD with momentum on FP32 master weights with a refreshed
 * BF16 / F16 / FP8 model copy, the two-stage L2 norm of many tensors, and
 * unscaling with a found-inf flag.
 *
 * Shapes.  Every kernel walks a list of flat tensors of any length n
 * (n >= 1).  The grid is over (tensor, chunk) pairs: tensor t owns the
 * blocks block0 .. block0 + nblocks - 1, block c of it works on elements
 * c*CHUNK .. min(n, (c+1)*CHUNK) - 1 (CHUNK: TE_OPTIM_CHUNK for the steps and
 * unscale, TE_RED_CHUNK for the norm).  Inside a chunk, thread k of the
 * block takes the 4-element groups k, k + 256, k + 512, ... (TE_OPTIM_STEPS
 * or TE_RED_STEPS of them), with one 16-byte vector of each array per group
 * where the tensor's pointers allow it (vec = 1) and element accesses
 * otherwise.  The tensors of one launch travel by value in one kernel
 * parameter of at most 4 KiB (struct te_optim_params and friends).
 *
 * Same bits on both sides.  Every float operation is one IEEE operation in
 * round-to-nearest-even (fmath.h), never contracted into an fma, so the GPU
 * and the vdev compute the same master weights and moments bit for bit; the
 * model copy uses convert.h / fp8.h rounding (the GPU's cvt instructions
 * give the same bytes).  The L2 norm adds squares in double (a float's
 * square is exact in double) in one fixed order: per thread in the order it
 * visits its elements, then a fixed tree over the block's 256 threads (the
 * warp shuffles' pairing, written out in te_l2_tree256 for the vdev), then
 * the partials in index order in a single block, so both backends produce
 * the same norm bit for bit. */
#ifndef TE_KERNELS_OPTIM_H
#define TE_KERNELS_OPTIM_H

#include "te_hd.h"
#include "fmath.h"
#include "ldst.h"
#ifndef __CUDACC__
#include <math.h>
#endif

#define TE_OPTIM_THREADS 256
#define TE_OPTIM_VEC 4                                       /* elements per group */
#define TE_OPTIM_STEPS 4                                     /* groups per thread per chunk */
#define TE_OPTIM_CHUNK (TE_OPTIM_THREADS * TE_OPTIM_VEC * TE_OPTIM_STEPS)   /* 4096 */
/* The L2 norm reads one array: a block takes 4x as many groups, so that its
 * fixed costs (finding its tensor, the block reduction) stay small against
 * its bytes (measured on an H100: F32 94% -> 100% of the copy rate, BF16
 * 70% -> 77%). */
#define TE_RED_STEPS 16
#define TE_RED_CHUNK (TE_OPTIM_THREADS * TE_OPTIM_VEC * TE_RED_STEPS)       /* 16384 */

/* Model-copy type: a tecore_dtype_t value, or none. */
#define TE_OPTIM_W_NONE (-1)

/* Optimizer kinds and Adam's weight-decay modes (te_optim_hp.kind). */
#define TE_OPTIM_ADAM_L2 0   /* weight decay added to the gradient (Adam) */
#define TE_OPTIM_ADAMW 1     /* decoupled weight decay (AdamW) */
#define TE_OPTIM_SGD 2

/* Hyperparameters as the kernels use them; derived values (bias corrections,
 * 1 - beta, the AdamW decay factor) are computed on the host in double and
 * rounded once. */
struct te_optim_hp {
  float lr;
  float beta1, beta2;      /* Adam */
  float omb1, omb2;        /* 1 - beta1, 1 - beta2 */
  float eps;
  float wd;                /* weight decay */
  float step_size;         /* Adam: lr / (1 - beta1^step) (lr without bias correction) */
  float bc2_sqrt;          /* Adam: sqrt(1 - beta2^step) (1 without bias correction) */
  float decay;             /* AdamW: 1 - lr * wd */
  float momentum;          /* SGD */
  float damp1;             /* SGD: 1 - dampening */
  int kind;                /* TE_OPTIM_ADAM_L2, TE_OPTIM_ADAMW, TE_OPTIM_SGD */
  int first;               /* SGD: first step, the momentum buffer starts as the gradient */
  int nesterov;            /* SGD */
  int pad_;
};

struct te_optim_entry {
  float *p;                /* master weights, F32 [n] */
  const void *g;           /* gradient [n], g_dt */
  float *m;                /* exp_avg / momentum buffer [n] (SGD without momentum: NULL) */
  float *v;                /* exp_avg_sq [n] (SGD: NULL) */
  void *w;                 /* model copy [n], w_dt, or NULL */
  const float *w_scale;    /* FP8 model: q = fp8(p * *w_scale) */
  float *w_scale_inv;      /* FP8 model: 1 / *w_scale written, or NULL */
  unsigned *w_amax;        /* FP8 model: max-accumulated |p| bits, or NULL */
  unsigned long long n;
  unsigned block0, nblocks;
  int g_dt, w_dt;          /* w_dt: TE_OPTIM_W_NONE when w is NULL */
  int vec;                 /* every pointer in use is aligned for 4-element vectors */
  int pad_;
};

/* The step counter and learning rate in device memory (struct
 * tecore_optim_state of te/optim.h, the same layout). */
struct te_optim_state {
  long long step;          /* steps taken: this one is step + 1 */
  double lr;
};

/* Where the hyperparameters come from when a step reads its step number
 * and learning rate from device memory (te_optim_params.state set): the
 * double values that the host would have used. */
struct te_optim_dev_hp {
  double beta1, beta2, wd;
  int bias_correction;     /* Adam: 0 with TECORE_ADAM_NO_BIAS_CORRECTION */
  int pad_;
};

#define TE_OPTIM_MAX 40    /* tensors per launch: the parameter stays under 4 KiB */
struct te_optim_params {
  const int *found_inf;    /* skip everything when *found_inf != 0; or NULL */
  const float *gsi;        /* gradient multiplier (grad scale inverse), or NULL */
  const struct te_optim_state *state;   /* or NULL: hp holds the step's values */
  struct te_optim_dev_hp dhp;           /* with state */
  struct te_optim_hp hp;
  int count;
  int pad_;
  struct te_optim_entry e[TE_OPTIM_MAX];
};

#define TE_L2_MAX 120
struct te_l2_entry {
  const void *x;
  unsigned long long n;
  unsigned block0, nblocks;
  int dt;
  int vec;
};
struct te_l2_params {
  double *partial;         /* partial[base + blockIdx.x] = the block's sum of squares */
  unsigned base;
  int count;
  struct te_l2_entry e[TE_L2_MAX];
};

#define TE_UNSCALE_MAX 80
struct te_unscale_entry {
  const void *in;
  void *out;
  unsigned long long n;
  unsigned block0, nblocks;
  int in_dt, out_dt;
  int vec;
  int pad_;
};
struct te_unscale_params {
  const float *scale;      /* float[1]: out = in * *scale */
  int *found_inf;          /* set to 1 when an output is not finite; or NULL */
  int count;
  int pad_;
  struct te_unscale_entry e[TE_UNSCALE_MAX];
};

/* ---- the step's values from device memory ------------------------------------ */

/* b^t for t >= 0 by squaring and multiplying, low bit first: the same
 * double operations on both sides (libm's pow and the GPU's differ). */
TE_HD double te_optim_powi(double b, long long t) {
  double r = 1.0, x = b;
  unsigned long long u = t > 0 ? (unsigned long long)t : 0;
  while (u) {
    if (u & 1) r = te_dmul_rn(r, x);
    u >>= 1;
    if (u) x = te_dmul_rn(x, x);
  }
  return r;
}

/* Fills the step-dependent fields of h from the state that params point at
 * (step t = state->step + 1, lr = state->lr) as the host fills them from a
 * tecore_*_config, but with te_optim_powi for beta^t. */
TE_HD void te_optim_hp_from_state(struct te_optim_hp *h, const struct te_optim_state *st,
                                  const struct te_optim_dev_hp *d) {
  const long long t = st->step + 1;
  const double lr = st->lr;
  h->lr = (float)lr;
  if (h->kind == TE_OPTIM_SGD) {
    h->first = t == 1;
    return;
  }
  double bc1 = 1.0, bc2 = 1.0;
  if (d->bias_correction) {
    bc1 = te_dsub_rn(1.0, te_optim_powi(d->beta1, t));
    bc2 = te_dsub_rn(1.0, te_optim_powi(d->beta2, t));
  }
  h->step_size = (float)te_ddiv_rn(lr, bc1);
  h->bc2_sqrt = (float)te_dsqrt_rn(bc2);
  h->decay = (float)te_dsub_rn(1.0, te_dmul_rn(lr, d->wd));
}

/* ---- element math ------------------------------------------------------------ */

/* One Adam / AdamW element: p, m, v updated from the gradient g (already
 * unscaled).  The order of operations is the contract both sides keep:
 *   L2:    g = g + wd*p
 *   m = beta1*m + (1-beta1)*g;  v = beta2*v + (1-beta2)*(g*g)
 *   denom = sqrt(v) / sqrt(1-beta2^t) + eps
 *   AdamW: p = p * (1 - lr*wd)
 *   p = p - (lr / (1-beta1^t)) * (m / denom)                              */
TE_HD void te_adam_elem(float *p, float *m, float *v, float g, const struct te_optim_hp *h) {
  float pp = *p;
  if (h->kind == TE_OPTIM_ADAM_L2) g = te_add_rn(g, te_mul_rn(h->wd, pp));
  float mm = te_add_rn(te_mul_rn(h->beta1, *m), te_mul_rn(h->omb1, g));
  float vv = te_add_rn(te_mul_rn(h->beta2, *v), te_mul_rn(h->omb2, te_mul_rn(g, g)));
  float denom = te_add_rn(te_div_rn(te_sqrt_rn(vv), h->bc2_sqrt), h->eps);
  if (h->kind == TE_OPTIM_ADAMW) pp = te_mul_rn(pp, h->decay);
  *p = te_sub_rn(pp, te_mul_rn(h->step_size, te_div_rn(mm, denom)));
  *m = mm;
  *v = vv;
}

/* One SGD element (PyTorch's order):
 *   d = g + wd*p                                  (when wd != 0)
 *   momentum != 0:  b = first ? d : momentum*b + (1-dampening)*d
 *                   d = nesterov ? d + momentum*b : b
 *   p = p - lr*d
 * b may be NULL when momentum is 0. */
TE_HD void te_sgd_elem(float *p, float *b, float g, const struct te_optim_hp *h) {
  float pp = *p;
  float d = g;
  if (h->wd != 0.0f) d = te_add_rn(d, te_mul_rn(h->wd, pp));
  if (h->momentum != 0.0f) {
    float bb = h->first ? d : te_add_rn(te_mul_rn(h->momentum, *b), te_mul_rn(h->damp1, d));
    *b = bb;
    d = h->nesterov ? te_add_rn(d, te_mul_rn(h->momentum, bb)) : bb;
  }
  *p = te_sub_rn(pp, te_mul_rn(h->lr, d));
}

/* The model copy of one master weight: the value to convert (FP8: times
 * the scale, one rounding), and the byte or half stored. */
TE_HD float te_optim_w_value(float p, int w_dt, float scale) {
  return te_dt_is_fp8(w_dt) ? te_mul_rn(p, scale) : p;
}

/* 1 when v, stored as dt, is not finite: not finite in float, or beyond what
 * a 16-bit type rounds to a finite value (F16: |v| >= 65520; BF16: |v| at or
 * above the midpoint between its max and infinity). */
TE_HD int te_unscale_bad(float v, int dt) {
  uint32_t a = te_f32_bits(v) & 0x7fffffffu;
  if (a >= 0x7f800000u) return 1;
  if (dt == TE_FP8_DT_F16) return a >= 0x477ff000u;
  if (dt == TE_FP8_DT_BF16) return a >= 0x7f7f8000u;
  return 0;
}

/* ---- L2 norm order ------------------------------------------------------------
 * The block reduction of 256 per-thread sums, as the GPU does it with warp
 * shuffles: within each warp lane l adds lane l+off for off = 16, 8, 4, 2, 1
 * (lane 0 ends with the warp's sum), then warp 0 does the same over the 8
 * warp sums with off = 4, 2, 1.  a[] is overwritten. */
TE_HD double te_l2_tree256(double *a) {
  double ws[8];
  for (int w = 0; w < 8; w++) {
    double *x = a + 32 * w;
    for (int off = 16; off > 0; off >>= 1)
      for (int l = 0; l < off; l++) x[l] = x[l] + x[l + off];
    ws[w] = x[0];
  }
  for (int off = 4; off > 0; off >>= 1)
    for (int l = 0; l < off; l++) ws[l] = ws[l] + ws[l + off];
  return ws[0];
}

/* Square of a float as a double: exact, so an fma or a separate add gives
 * the same sum on both sides. */
TE_HD double te_l2_sq(float x) { return (double)x * (double)x; }

/* 1 when a double is finite. */
TE_HD int te_l2_finite(double s) {
#ifdef __CUDA_ARCH__
  return isfinite(s);
#else
  return isfinite(s) ? 1 : 0;
#endif
}

/* Gradient clipping's factor for a norm n: max_norm / (n + 1e-6) when n
 * exceeds max_norm, else exactly 1 (the gradients are then left as they
 * are); a NaN norm gives NaN.  The same float operations on both backends. */
TE_HD float te_clip_scale(float n, float max_norm) {
  if (!(n <= max_norm)) return n != n ? n : te_div_rn(max_norm, te_add_rn(n, 1e-6f));
  return 1.0f;
}

#endif
