/* SPDX-License-Identifier: Apache-2.0 */
/* embedding.h -- the parameters of kernels/embedding.cu (declared once,
 * kparams.h) and what both backends share: the status word and the
 * backward's order.
 *
 * Status word (a uint64_t the host reads): 0, or bit 63 | bit 62 for a
 * position (else an id) | token << 32 | (uint32_t)id.
 *
 * Backward order: tokens are taken in chunks of TE_EMB_CHUNK; for each
 * chunk and each table row some token of the chunk names, the row is
 * read (to float), the chunk's rows of dy are added in token order, and it
 * is stored back (rounded to dW's dtype).  Blocks own TE_EMB_ROWS rows of
 * the table each, so no two write one row, and the vdev implementation
 * follows the same order: the same bits.
 *
 * The window (a shard of the table, te/embedding.h): w (forward) and dw
 * (backward) hold the table's elements [wfirst, wfirst + wcount) at
 * element (e - wfirst); the rest is neither read nor written (the forward
 * writes 0 for it).  The whole table: 0, vocab * hidden.  The backward's
 * blocks start at row row0 (the window's first), and the vector path
 * needs wfirst and wcount multiples of 8 (a vector wholly in or out). */
#ifndef TE_KERNELS_EMBEDDING_H
#define TE_KERNELS_EMBEDDING_H

#include "kparams.h"
#include "te_hd.h"
#include "fmath.h"

#define TE_EMB_CHUNK 8192
#define TE_EMB_ROWS 64
#define TE_EMB_THREADS 256
/* flags */
#define TE_EMB_VEC 0x1    /* hidden % 8 == 0, every row 16-byte aligned */
#define TE_EMB_POS 0x2    /* backward: the table is the positions' (status bit 62) */
#define TE_EMB_STORE 0x4  /* te_emb_fwd the other way: out[ids[t]] = w[t] (no p) */
#define TE_EMB_DT(w, s) (((w) >> (4 * (s))) & 0xf)

#define TE_EMB_STATUS_SET (1ull << 63)
#define TE_EMB_STATUS_POS (1ull << 62)

#define TE_EMB_FWD_PARAMS(P)              \
  P(const void *, w, eptr(12, 0))         \
  P(const void *, p, eptr(12, 1))         \
  P(void *, out, eptr(12, 2))             \
  P(const int *, ids, ptr)                \
  P(const int *, positions, ptr)          \
  P(unsigned long long *, status, ptr)    \
  P(unsigned long long, tokens, val)      \
  P(unsigned long long, hidden, val)      \
  P(long long, vocab, val)                \
  P(long long, max_pos, val)              \
  P(long long, seq_len, val)              \
  P(unsigned long long, wfirst, val)      \
  P(unsigned long long, wcount, val)      \
  P(int, flags, val)                      \
  P(int, dtypes, val)

#define TE_EMB_BWD_PARAMS(P)              \
  P(const void *, dy, eptr(9, 0))         \
  P(void *, dw, eptr(9, 1))               \
  P(const int *, ids, ptr)                \
  P(unsigned long long *, status, ptr)    \
  P(unsigned long long, tokens, val)      \
  P(unsigned long long, hidden, val)      \
  P(long long, vocab, val)                \
  P(long long, seq_len, val)              \
  P(unsigned long long, wfirst, val)      \
  P(unsigned long long, wcount, val)      \
  P(long long, row0, val)                 \
  P(int, flags, val)                      \
  P(int, dtypes, val)

/* The backward's vector kernels, one for each (dy, dW) dtype pair, in
 * the order of the table: 3 * dy + dW (TE_FP8_DT_F32, F16, BF16 = 0, 1, 2). */
#define TE_EMB_BWD_VEC_LIST(X)                                                       \
  X(te_emb_bwd_f32_f32, F32, F32) X(te_emb_bwd_f32_f16, F32, F16)                    \
  X(te_emb_bwd_f32_bf16, F32, BF16) X(te_emb_bwd_f16_f32, F16, F32)                  \
  X(te_emb_bwd_f16_f16, F16, F16) X(te_emb_bwd_f16_bf16, F16, BF16)                  \
  X(te_emb_bwd_bf16_f32, BF16, F32) X(te_emb_bwd_bf16_f16, BF16, F16)                \
  X(te_emb_bwd_bf16_bf16, BF16, BF16)

/* The row token t names: ids[t], or the implied position. */
TE_HD long long te_emb_id(const int *ids, unsigned long long t, long long seq_len) {
  if (ids) return ids[t];
  return seq_len > 0 ? (long long)(t % (unsigned long long)seq_len) : (long long)t;
}

/* Row rb's columns inside the window: [*lo, *hi) (empty when *lo >= *hi);
 * rb = the row's first element. */
TE_HD void te_emb_window(unsigned long long rb, unsigned long long hidden,
                         unsigned long long wfirst, unsigned long long wcount,
                         unsigned long long *lo, unsigned long long *hi) {
  const unsigned long long end = wfirst + wcount;
  *lo = wfirst > rb ? wfirst - rb : 0;
  *hi = end <= rb ? 0 : end - rb < hidden ? end - rb : hidden;
}

TE_HD unsigned long long te_emb_status(unsigned long long t, long long id, int pos) {
  return TE_EMB_STATUS_SET | (pos ? TE_EMB_STATUS_POS : 0ull) | ((t & 0x3fffffffull) << 32) |
         (unsigned long long)(uint32_t)id;
}

#endif
