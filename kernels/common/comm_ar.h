/* SPDX-License-Identifier: Apache-2.0 */
/* comm_ar.h -- the allreduce protocols' shared definitions, for
 * kernels/comm_ar.cu (the GPU) and libtecomm/base/ar_vdev.c (vdev, the same
 * protocol in C on shared memfd memory): the workspace layout, the kernel
 * parameter block, how work is cut between blocks, the element math of a
 * reduction and the Lamport sentinel rules.  Both sides include this file
 * so they agree on every offset and every rounding.
 *
 * Workspace (one per rank, at the same offset of every rank's pool; all
 * offsets from its base, lines of TE_AR_LINE bytes so that words written by
 * peers never share a line with words polled locally):
 *   TE_AR_OFF_ERR      u32 error word: code | (peer + 1) << 16 (0: none)
 *   TE_AR_OFF_ABORT    u32 abort word: non-zero makes every waiter quit
 *   TE_AR_OFF_LAM      u64 Lamport call counter, u64 bytes armed-and-used
 *                      per buffer [3], u32 blocks of this call that have read the counter
 *   TE_AR_OFF_EPOCH    u64 [TE_AR_MAX_BLOCKS]: barrier phases block b has
 *                      passed (only block b of this rank reads or writes it)
 *   TE_AR_OFF_PROBE    the latency probe (tecomm_probe): u64 call counter
 *                      (this rank's own), then, a line on, u64 word s for
 *                      each rank s, written by rank s with its call number
 *   TE_AR_OFF_PROBE_DESC  u64 [2][rank s]: the descriptor hash rank s's
 *                      probe exchange number k carried (0: a plain probe),
 *                      in row k & 1 (a peer one exchange ahead writes the
 *                      other row; te_ar_probe_desc)
 *   TE_AR_OFF_DESC     struct te_ar_desc: this rank's latest call, written
 *                      by the kernel that starts it (the host reads it, and
 *                      the peers' copies, to name a mismatch)
 *   TE_AR_OFF_FLAGS    u64 flag of (block b, source rank s), one per
 *                      TE_AR_FLAG_STRIDE: written by rank s's block b with
 *                      the phase it reached, polled by this rank's block b;
 *                      at te_ar_flag_desc (two u64, by phase parity), s's
 *                      descriptor hash, written before the flag (release)
 *                      and compared after it: a peer one phase ahead (the
 *                      next barrier, maybe of the next call) writes the
 *                      other word, and it cannot get two phases ahead
 *   TE_AR_OFF_LAMBUF   Lamport buffers [3][nranks][slot bytes]; slot s of
 *                      buffer i holds rank s's input of a call using i
 *
 * Barrier (one-shot, two-shot): block b of every rank counts phases in
 * epoch[b]; at a barrier it writes the new phase into flag (b, self) of
 * every rank's workspace (release) and waits until flag (b, s) of its own
 * workspace reaches that phase for every s (acquire).  Values only grow
 * and no rank can get two phases ahead of another, so "flag >= phase" is
 * the test.  The phase lives in device memory, so a captured graph
 * replays with fresh phases.  Every rank launches the same grid for the
 * same call, so block b's counter moves in step on every rank.
 *
 * Agreement.  Every rank's call carries a descriptor (count, dtype, op,
 * algorithm and its variant, nranks, the fused shape: struct te_ar_desc)
 * and its 64-bit hash (never 0).  The ranks compare it inside the
 * protocol they already run, before anything is written to an output or
 * a peer's buffer: at every barrier (the hash beside the flag), in the
 * probe exchange of the copy-engine one-shot (beside the probe word), and
 * in Lamport through a descriptor granule of each slot (its last 16
 * bytes: hash, call counter, count, written with the data, polled like
 * it).  A rank that sees another hash writes TE_AR_MISMATCH (the peer) in
 * its error word and leaves: the peer sees the same and leaves too.  The
 * sequence number is the protocol's own: the barrier phase, the Lamport
 * call counter (in the descriptor granule).
 *
 * Lamport: see TE_AR_LAM_* below.
 *
 * NVLS (NVLink multicast).  Each rank owns one more allocation, its
 * member of a multicast object, laid out like a workspace from
 * TE_AR_OFF_LAM on (the Lamport state words and buffers), followed by the
 * data buffer of the simple protocol at nv_data.  lam_ws is this rank's
 * (unicast) address of it, mc the multicast address of the same offsets:
 * a store through mc lands in every member, a load-reduce through mc
 * reads every member and returns the reduction.  Barriers, the error and
 * abort words stay in the unicast workspaces (ws[]).
 *   simple: block b copies its part of every rank's chunk of this rank's
 *     input into the data buffer of its member; barrier; it load-reduces
 *     its part of chunk `rank` through mc and stores the result through
 *     mc (every member gets it); barrier; it copies its part of every
 *     chunk from its member to out (or the fused epilogue reads it there).
 *     One rank reduces each element, so every rank gets the same bits.
 *   Lamport: as the IPC Lamport, but a rank's input goes out with one
 *     store through mc instead of one per peer; polling, folding in rank
 *     order and re-arming stay local.
 * MNNVL (multi-node NVLink) is the IPC Lamport protocol itself, with ws[]
 * the peers' workspaces imported from fabric handles.
 *
 * Fused two-shot by rows (residual add + RMSNorm after a reduce-scatter,
 * one kernel, no all-gather).  The rows are cut into nranks contiguous
 * chunks (te_ar_row_chunk); rank q owns chunk q.  The rows are also cut
 * into groups of rpb rows; block b takes the groups g = b, b + G, ...
 * (G blocks) in both phases, so a block's barrier covers exactly what the
 * same block of every peer wrote:
 *   barrier 1 (every input is in place);
 *   block b reduces, in rank order, the rows of its groups that lie in
 *     chunk `rank` and stores them, rounded to the dtype, over this rank's
 *     input in[rank] (no peer reads those rows of in[rank]: each reduces
 *     its own chunk);
 *   barrier 2 (every chunk is reduced);
 *   block b runs the epilogue over every row of its groups, reading the
 *     row's allreduced values from its owner's input in[owner] (a peer
 *     mapping, or local);
 *   barrier 3 (no peer still reads this rank's input: the next call may
 *     stage its input there).
 * One rank reduces each row in rank order, so every rank gets the same
 * bits, and the epilogue sees the values the two-shot + ADDNORM path does.
 *
 * Copy-engine one-shot (TE_AR_CE; libtecomm/base/ar_kernels.c drives it).  The
 * bytes move by the copy engines (stream memcpys from peer mappings) and
 * the SMs only read local memory, so a GEMM beside it keeps its SMs while
 * the bytes travel:
 *   barrier (the probe exchange: every input in place);
 *   copy every peer's input into local scratch;
 *   the CE reduce kernel folds the inputs in rank order (this rank's own
 *     and the scratch copies: in[] of the kernel are local) into out;
 *   barrier (no peer still reads this rank's input: the caller may
 *     overwrite it, the next call may stage into it).  In place (out is
 *     this rank's input) this barrier comes before the fold.
 * Fused (residual add + RMSNorm), the copies are followed by the one-shot
 * fused kernel over them, whose own first barrier frees the inputs.
 * Every rank folds the same values in the same order with one-shot's
 * math: the same bits on every rank, and as one-shot and two-shot.  On 2
 * ranks it moves the bytes two-shot does (the peer's input, once); on
 * more, n - 1 inputs.
 *
 * Reduce-scatter and all-gather (TE_AR_V_RS, TE_AR_V_AG in the variant).
 * Reduce-scatter is the one-shot kernel (or the copy-engine one-shot)
 * over a range: the host points in[s] at block `rank` of rank s's input,
 * so each rank folds, in rank order, the one block it keeps, with
 * one-shot's math (the bits allreduce gives for that block).  No peer
 * reads the block a rank keeps, so the GPU kernel stores as it folds and
 * meets its peers twice only (inputs in place; no peer still reads),
 * where the allreduce meets them before each round's stores.
 * The ranks cut a call into granules alike only when their in[] have one
 * alignment, so 16-byte granules are taken only when a block is whole
 * 16-byte lines (the host clears vec otherwise).  All-gather is the
 * gather kernel: p.count is the bytes of one block; barrier (every input
 * in place); block b copies its 16-byte granules of every rank's input
 * in[s] to out + s * count (16-byte moves where both ends allow, bytes
 * otherwise: no barrier depends on that choice); barrier (no peer still
 * reads this rank's input).  Its copy-engine form is the same with the
 * probe exchange as both barriers and stream memcpys between them.
 *
 * Lamport reduce-scatter and all-gather (TE_AR_LAMPORT with TE_AR_V_RS
 * or TE_AR_V_AG): allreduce's Lamport kernel, its buffers, counter,
 * re-arm and descriptor granule, with a slot holding one block.  Only
 * in[rank] (this rank's send, anywhere in device memory) is read.
 *   reduce-scatter: block s of the input goes to slot `rank` of rank s's
 *     buffer, under allreduce's sentinel rule; a rank folds its n slots in
 *     rank order: allreduce's Lamport bits for that block.
 *   all-gather: bytes must arrive exactly (FP8, a -0.0, any pattern), so
 *     the sentinel cannot be in the data: a slot holds 16-byte granules
 *     {4 data bytes, flag, 4 data bytes, flag} written and read as two
 *     64-bit words (each lands whole), flag te_ar_lam_ag_flag(k), never
 *     the armed word.  A slot carries 8 bytes of the block a granule, so
 *     all-gather's blocks are half the allreduce's Lamport bytes
 *     (te_ar_lam_ag_slot).  Granule g of slot s goes to out + s * bytes +
 *     8 g. */
#ifndef TE_KERNELS_COMM_AR_H
#define TE_KERNELS_COMM_AR_H

#include "ldst.h"
#include "fmath.h"

#define TE_AR_MAX_RANKS 8
#define TE_AR_MAX_BLOCKS 128
#define TE_AR_LINE 128
#define TE_AR_FLAG_STRIDE 64

#define TE_AR_OFF_ERR 0u
#define TE_AR_OFF_ABORT 128u
#define TE_AR_OFF_LAM 256u
#define TE_AR_OFF_EPOCH 512u
#define TE_AR_OFF_PROBE 1536u /* after the epochs (512 + 8 * TE_AR_MAX_BLOCKS) */
#define TE_AR_OFF_PROBE_DESC 1728u /* TE_AR_OFF_PROBE + TE_AR_LINE + 64 */
#define TE_AR_OFF_DESC 1856u       /* past the probe hashes, 48 bytes */
#define TE_AR_OFF_FLAGS 2048u
#define TE_AR_FLAG_DESC 8u /* in a flag line: the writer's descriptor hashes [2] */
/* Bytes past a Lamport slot's data: its descriptor granule is the last 16 */
#define TE_AR_LAM_DESC_PAD 128u
#define TE_AR_OFF_LAMBUF \
  (TE_AR_OFF_FLAGS + TE_AR_MAX_BLOCKS * TE_AR_MAX_RANKS * TE_AR_FLAG_STRIDE)
/* the Lamport state words inside TE_AR_OFF_LAM */
#define TE_AR_LAM_COUNTER 0u  /* u64 */
#define TE_AR_LAM_USED 8u     /* u64 [3] */
#define TE_AR_LAM_DONE 32u    /* u32: blocks that have read the counter */

/* error codes in the error word (same values as TC_AR_*, libtecomm/base/ar_kernels.h) */
#define TE_AR_OK 0u
#define TE_AR_TIMEOUT 1u
#define TE_AR_ABORTED 2u
#define TE_AR_MISMATCH 3u
#define TE_AR_ERRWORD(code, peer) ((uint32_t)(code) | ((uint32_t)((peer) + 1) << 16))

/* algorithms (tc_ar_algo_t) and ops */
#define TE_AR_ONESHOT 0
#define TE_AR_TWOSHOT 1
#define TE_AR_LAMPORT 2
#define TE_AR_NVLS 3
#define TE_AR_CE 4
#define TE_AR_SUM 0
#define TE_AR_MAX 1

/* fused-epilogue flags (params.fflags) */
#define TE_AR_F_FUSED 0x1     /* residual add + RMSNorm */
#define TE_AR_F_OUT 0x2       /* write out (allreduce dtype) */
#define TE_AR_F_Q 0x4         /* write the FP8 copy (q_data with *q_scale) */
#define TE_AR_F_AMAX 0x8      /* max |norm output| into *q_amax (atomic, bits) */

/* Threads per block of the unfused kernels. */
#define TE_AR_THREADS 512
/* The fused kernels come in two builds: blocks of at most this many
 * threads (registers for the common row lengths), and of up to 1024. */
#define TE_AR_FUSED_NARROW 256
/* The spread fused Lamport kernel: the RMSNorm plan's tpr x rows-per-block
 * threads each get `spread` threads (2 or 4) that share its vectors, so a
 * row's loads, waits and element math run on up to this many threads
 * while the sum over the row keeps the plan's order (kernels/comm_ar.cu). */
#define TE_AR_SPREAD_THREADS 512
/* calls of at most this many rows take a spread of 2 (libtecomm/base/ar_kernels.c) */
#define TE_AR_SPREAD_FEW_ROWS 16
/* The fused two-shot by rows: threads per block it aims for (rows of the
 * RMSNorm plan stacked: tpr x rows-per-block, at most this many), so a
 * grid of at most TE_AR_MAX_BLOCKS co-resident blocks keeps enough loads
 * in flight; plans of more threads (tpr 1024) take the wide build. */
#define TE_AR_FUSED_RS_THREADS 512
/* Granules (16-byte vectors, or elements when vec == 1) a GPU thread keeps
 * in registers per round of the one-shot kernel. */
#define TE_AR_UNROLL 4

/* A call's descriptor: what every rank's call must agree on.  hash is
 * te_ar_desc_hash of the rest (never 0; 0 in a call: nothing to check). */
struct te_ar_desc {
  uint64_t hash;
  uint64_t count;                 /* elements */
  int32_t algo, op, dtype, nranks;
  uint32_t hidden;                /* fused: the row; else 0 */
  float eps;                      /* fused */
  uint32_t variant;               /* TE_AR_V_* */
  uint32_t pad_;
};
#define TE_AR_V_FUSED 0x1u        /* the fused epilogue */
#define TE_AR_V_RS_ROWS 0x2u      /* fused two-shot by rows (TECOMM_FUSED_TWOSHOT) */
#define TE_AR_V_MC 0x4u           /* through a multicast region (NVLS Lamport) */
#define TE_AR_V_RS 0x8u           /* reduce-scatter (Reduce-scatter and all-gather, above) */
#define TE_AR_V_AG 0x10u          /* all-gather */
#define TE_AR_V_SYM 0x20u         /* inputs read where the callers' send lies (symmetric) */
#define TE_AR_V_SYM_INPLACE 0x40u /* all-gather: read in place from the peers' recv */
#define TE_AR_V_GEMM 0x80u        /* a barrier or fold of an overlapped GEMM (libtecomm/overlap/) */

/* The one kernel parameter, passed by value (the same bytes on both
 * sides: fixed-width fields, 8-byte ones first). */
struct te_ar_params {
  uint64_t ws[TE_AR_MAX_RANKS];   /* workspaces (device addresses) */
  uint64_t in[TE_AR_MAX_RANKS];   /* inputs (Lamport: only in[rank] is read) */
  uint64_t out;
  uint64_t count;                 /* elements */
  uint64_t timeout_ns;            /* 0: wait forever */
  uint64_t lam_slot;              /* bytes of one Lamport slot */
  /* fused epilogue */
  uint64_t res_in, res_out, gamma, fout;
  uint64_t q_data, q_scale, q_amax, q_scale_inv;
  uint64_t rsigma;                /* F32 [rows]: each row's 1/rms, or 0 */
  /* NVLS (see above); lam_ws 0: the Lamport state is in ws[rank] */
  uint64_t lam_ws, mc, nv_data;
  uint64_t rows;
  uint32_t hidden;
  float eps;
  int32_t rank, nranks, dtype, op;
  int32_t vec;                    /* elements per granule: 16 / element size, or 1 */
  int32_t fflags;                 /* TE_AR_F_* */
  int32_t tpr, nv, rpb;           /* the RMSNorm row plan (norm.h): threads per row,
                                     vectors per thread, rows per block */
  int32_t nvec;                   /* norm vector length: 8 or 1 */
  int32_t q_dtype;                /* E4M3 / E5M2 */
  int32_t spread;                 /* the spread fused Lamport kernel: threads per plan
                                     thread (TE_AR_SPREAD_THREADS below); else 0 */
  struct te_ar_desc desc;         /* the call's descriptor (Agreement, above) */
};

/* FNV-1a over the descriptor's fields past the hash; never 0. */
TE_HD uint64_t te_ar_desc_hash(const struct te_ar_desc *d) {
  const unsigned char *b = (const unsigned char *)d + 8;
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned i = 0; i < sizeof *d - 8; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h | 1u;
}

/* ---- element math ------------------------------------------------------- */

TE_HD int te_ar_esize(int dtype) { return dtype == TE_FP8_DT_F32 ? 4 : 2; }

/* The reduction of two floats: SUM one IEEE add; MAX where a NaN wins
 * (te_fmax_nan).  Every rank folds ranks 0 .. n-1 in that order starting
 * from rank 0's value, so every rank gets the same bits. */
TE_HD float te_ar_op(float a, float b, int op) {
  return op == TE_AR_SUM ? te_add_rn(a, b) : te_fmax_nan(a, b);
}

/* v rounded to dtype and back (the value a store then a load gives). */
TE_HD float te_ar_round(float v, int dtype) {
  if (dtype == TE_FP8_DT_F32) return v;
  if (dtype == TE_FP8_DT_BF16) return te_bf16_to_f32(te_f32_to_bf16(v));
  return te_f16_to_f32(te_f32_to_f16(v));
}

/* The fused epilogue of one element: residual_out = round(ar + res) in the
 * allreduce dtype (what tecore_scale_add(1, ar, 1, res) gives). */
TE_HD float te_ar_residual(float ar, float res, int dtype) {
  return te_ar_round(te_add_rn(ar, res), dtype);
}

/* ---- Lamport sentinels ---------------------------------------------------
 * An armed buffer holds 0x8000 in every 16-bit half: -0.0 in bf16 and f16.
 * Writers never write that: a 16-bit -0.0 input is written as +0.0 (which
 * can only flip the sign of a zero result), and for f32 the armed word
 * 0x80008000 (the negative subnormal -4.6e-41) is written as -0.0 (a
 * difference below any f32 sum's rounding but that of all-tiny inputs).
 * The pattern does not depend on the dtype, so a buffer armed after an f32
 * call serves a bf16 one.  A reader waits on a 16-byte granule until none
 * of its 32-bit words is still armed (a 16-byte store may land in pieces;
 * each word is whole). */
#define TE_AR_LAM_ARM 0x80008000u

TE_HD uint32_t te_ar_lam_fix(uint32_t w, int dtype) {
  if (dtype == TE_FP8_DT_F32) return w == TE_AR_LAM_ARM ? 0x80000000u : w;
  if ((w & 0xffffu) == 0x8000u) w &= 0xffff0000u;
  if ((w >> 16) == 0x8000u) w &= 0x0000ffffu;
  return w;
}
/* 1 when a word a writer wrote is there (no half still armed). */
TE_HD int te_ar_lam_ready(uint32_t w, int dtype) {
  if (dtype == TE_FP8_DT_F32) return w != TE_AR_LAM_ARM;
  return (w & 0xffffu) != 0x8000u && (w >> 16) != 0x8000u;
}

/* The descriptor granule of a Lamport slot: hash, call counter k and
 * count, each 32-bit word with no 16-bit half 0x8000, so that it is never
 * armed under any dtype's rule (ranks that disagree on the dtype still
 * read each other's). */
TE_HD uint32_t te_ar_desc_fix(uint32_t w) { return te_ar_lam_fix(w, TE_FP8_DT_BF16); }
TE_HD void te_ar_desc_words(const struct te_ar_params *p, uint64_t k, uint32_t *w) {
  w[0] = te_ar_desc_fix((uint32_t)p->desc.hash);
  w[1] = te_ar_desc_fix((uint32_t)(p->desc.hash >> 32));
  w[2] = te_ar_desc_fix((uint32_t)k);
  w[3] = te_ar_desc_fix((uint32_t)p->desc.count);
}
/* Lamport all-gather: the flag of call k's granules (odd, so never the
 * armed word), and the slot bytes a block of bytes takes. */
TE_HD uint32_t te_ar_lam_ag_flag(uint64_t k) { return (uint32_t)k | 1u; }
TE_HD uint64_t te_ar_lam_ag_slot(uint64_t bytes) { return (bytes + 7u) / 8u * 16u; }

/* Offset of the descriptor granule in a slot of slot_bytes. */
TE_HD uint64_t te_ar_lam_desc_off(uint64_t slot_bytes) { return slot_bytes - 16u; }

/* ---- work split ----------------------------------------------------------
 * n items over g blocks: block b gets [*lo, *hi), contiguous ranges, the
 * first ones one item longer.  The same function on every rank and both
 * backends, so block b of every rank touches the same items. */
TE_HD void te_ar_split(uint64_t n, uint32_t g, uint32_t b, uint64_t *lo, uint64_t *hi) {
  /* a 64-bit division is a long subroutine on the GPU, and a small call
   * waits for this one before its first load: divide in 32 bits when n
   * fits (the same quotient) */
  uint64_t q, r;
  if (n >> 32 == 0) {
    q = (uint32_t)n / g;
    r = (uint32_t)n % g;
  } else {
    q = n / g;
    r = n % g;
  }
  *lo = (uint64_t)b * q + (b < r ? b : r);
  *hi = *lo + q + (b < r ? 1 : 0);
}

/* Two-shot: chunk c of ngran granules (c = 0 .. n-1), c's owner reduces it. */
TE_HD void te_ar_chunk(uint64_t ngran, int n, int c, uint64_t *lo, uint64_t *hi) {
  te_ar_split(ngran, (uint32_t)n, (uint32_t)c, lo, hi);
}

/* Fused two-shot by rows: chunk q of rows (rows of rank q), and the
 * owner of a row (the q whose chunk holds it). */
TE_HD void te_ar_row_chunk(uint64_t rows, int n, int q, uint64_t *lo, uint64_t *hi) {
  te_ar_split(rows, (uint32_t)n, (uint32_t)q, lo, hi);
}
TE_HD int te_ar_row_owner(uint64_t rows, int n, uint64_t row) {
  uint64_t q = rows / (uint64_t)n, r = rows % (uint64_t)n, big = r * (q + 1);
  if (row < big) return (int)(row / (q + 1));
  return (int)(r + (row - big) / q);
}

/* Addresses in a workspace. */
TE_HD uint64_t te_ar_flag_addr(uint64_t ws, int block, int src) {
  return ws + TE_AR_OFF_FLAGS +
         ((uint64_t)block * TE_AR_MAX_RANKS + (uint64_t)src) * TE_AR_FLAG_STRIDE;
}
/* The hash word of a flag line (te_ar_flag_addr) for phase. */
TE_HD uint64_t te_ar_flag_desc(uint64_t line, uint64_t phase) {
  return line + TE_AR_FLAG_DESC + 8u * (phase & 1u);
}
TE_HD uint64_t te_ar_lam_addr(uint64_t ws, uint64_t slot_bytes, int nranks, int buf, int src) {
  return ws + TE_AR_OFF_LAMBUF + ((uint64_t)buf * (uint64_t)nranks + (uint64_t)src) * slot_bytes;
}
/* Rank src's word of the probe line in workspace ws. */
TE_HD uint64_t te_ar_probe_addr(uint64_t ws, int src) {
  return ws + TE_AR_OFF_PROBE + TE_AR_LINE + 8u * (uint64_t)src;
}
/* Rank src's probe hash word for exchange k in workspace ws. */
TE_HD uint64_t te_ar_probe_desc(uint64_t ws, int src, uint64_t k) {
  return ws + TE_AR_OFF_PROBE_DESC + 64u * (k & 1u) + 8u * (uint64_t)src;
}
/* Where a call's Lamport state and buffers live on this rank. */
TE_HD uint64_t te_ar_lam_ws(const struct te_ar_params *p) {
  return p->lam_ws ? p->lam_ws : p->ws[p->rank];
}
/* The NVLS simple protocol's data buffer: offset in the region. */
TE_HD uint64_t te_ar_nvls_data_off(int nranks, uint64_t slot_bytes) {
  return TE_AR_OFF_LAMBUF + 3u * (uint64_t)nranks * slot_bytes;
}

#endif
