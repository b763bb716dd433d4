/* SPDX-License-Identifier: Apache-2.0 */
/* overlap/ov.h -- what the two overlapped GEMMs (ag_gemm.c, gemm_rs.c)
 * share: the communicator's side stream and events, the staging buffer,
 * the argument checks, one chunk's GEMM, and the barrier every rank's
 * side stream passes (the probe exchange of base/ar_kernels.c with the
 * call's descriptor: bounded by TECOMM_TIMEOUT, a different call or shape
 * on a peer is TECOMM_ERR_MISMATCH).
 *
 * Why a side stream: the peer copies go to the copy engines as stream
 * memcpys, and a memcpy queued behind a GEMM on the caller's stream would
 * wait for it.  Events order each chunk's copy against its GEMM, and the
 * side stream joins the caller's before the call returns, so the call is
 * stream-ordered like any other collective (and captured with it). */
#ifndef TC_OVERLAP_OV_H
#define TC_OVERLAP_OV_H

#include "comm_priv.h"
#include "base/ar_kernels.h"

/* Most copy streams one pull is split over (TECOMM_AG_GEMM_PULLS,
 * TECOMM_GEMM_RS_PULLS). */
#define TC_OV_PULLS 4

struct tc_ov {
  tecore_stream_t side;
  tecore_stream_t pull[TC_OV_PULLS - 1]; /* a pull's further pieces */
  tecore_event_t pulled[TC_OV_PULLS - 1]; /* each one's last copy */
  tecore_event_t gate;                   /* what the further pieces follow */
  tecore_event_t start;                 /* the call's start, on the caller's stream */
  tecore_event_t chunk[TC_AR_MAX_RANKS]; /* chunk i (ring order) copied, or multiplied */
  tecore_event_t done;                  /* the side stream's last work */
  tecore_devptr_t stage;                /* gemm_rs: the peers' blocks before their push */
  size_t stage_bytes;
  tecore_devptr_t stage_old[16];        /* outgrown (a captured graph may name them) */
  int n_old;
};

/* One call's shape, as the checks and the chunk GEMMs read it. */
struct tc_ov_shape {
  size_t rows, n, k;
  tecore_dtype_t dtype, d_dtype;
  tecore_devptr_t b;
  tecore_devptr_t a_scale_inv, b_scale_inv; /* E4M3 operands */
  tecore_devptr_t bias;                     /* [n] of d_dtype, or 0 */
  int gelu;                                 /* the GELU epilogue, aux written */
  int dgelu;                                /* with gelu: the dGELU epilogue, aux read */
  int b_kn;                                 /* b is [k][n]: d = a b (16-bit only) */
  int grad8;                                /* dtype E4M3: a's codes are E5M2 (a gradient's,
                                               b a weight's E4M3), no fast accumulation */
  const char *fn;
};

/* The communicator's state, made on the first call (not under capture)
 * with at least stage_bytes of staging; grown (outside capture) when a
 * call needs more. */
tecomm_result_t tc_ov_get(struct tecomm_comm *c, size_t stage_bytes, int cap, const char *fn,
                          struct tc_ov **ov);
/* rows, n, k, the dtypes, the scales of E4M3 operands and the bias's
 * dtype (not its pointer: tc_ov_check_bias). */
tecomm_result_t tc_ov_check_shape(const struct tc_ov_shape *g);
/* p's alignment for the GEMM: 16 bytes for E4M3 operands, else the
 * element's size. */
size_t tc_ov_align(const struct tc_ov_shape *g, tecore_dtype_t dtype);
/* The IPC workspaces the barriers run over. */
tecomm_result_t tc_ov_check_level(struct tecomm_comm *c, const char *fn);
/* p set, aligned to esize, and (symmetric memory) inside its allocation. */
tecomm_result_t tc_ov_check_ptr(struct tecomm_comm *c, tecore_devptr_t p, size_t bytes,
                                size_t esize, const char *what, const char *fn);
/* The bias (when set): in bounds, aligned, apart from the outputs
 * [out, out+out_bytes). */
tecomm_result_t tc_ov_check_bias(struct tecomm_comm *c, const struct tc_ov_shape *g,
                                 tecore_devptr_t out, size_t out_bytes);
/* Whether [p, p+pb) and [q, q+qb) share a byte. */
static inline int tc_ov_overlap(tecore_devptr_t p, size_t pb, tecore_devptr_t q, size_t qb) {
  return p < q + qb && q < p + pb;
}
/* d[rows][n] = a[rows][k] b^T (b_kn: a b) (+ bias, the GEMM's epilogue) on stream;
 * with g->gelu, aux[rows][n] = that and d = gelu(aux); with g->dgelu too,
 * d = that * gelu'(aux) (aux read). */
tecomm_result_t tc_ov_gemm(const struct tc_ov_shape *g, tecore_devptr_t a, tecore_devptr_t d,
                           tecore_devptr_t aux, tecore_stream_t stream);
/* bytes from src (a peer's) to dst in up to pulls pieces of 256-byte
 * multiples: piece 0 on the side stream (which the caller has ordered),
 * piece p on pull stream p after event after.  used NULL: the side
 * stream then waits for every piece (an event recorded on it after the
 * call marks the whole copy); else *used says how many streams took a
 * piece, for tc_ov_pull_join. */
tecomm_result_t tc_ov_pull(struct tc_ov *ov, tecore_devptr_t dst, tecore_devptr_t src,
                           size_t bytes, int pulls, tecore_event_t after, int *used,
                           const char *fn);
/* stream waits for the last piece on pull streams 1 .. used-1. */
tecomm_result_t tc_ov_pull_join(struct tc_ov *ov, int used, tecore_stream_t stream,
                                const char *fn);
/* The kernel call the barriers and the fold start from: this rank, the
 * workspaces, the timeout, and the descriptor's count, dtype and the
 * GEMM's other dimension. */
void tc_ov_call_init(struct tecomm_comm *c, size_t count, tecore_dtype_t dtype, size_t dim,
                     struct tc_ar_call *call);
/* The barrier on stream; a kernel error is the communicator's. */
tecomm_result_t tc_ov_barrier(struct tecomm_comm *c, const struct tc_ar_call *call,
                              tecore_stream_t stream, const char *fn);
/* Whether [ptr, ptr+bytes) lies in this rank's slot of one symmetric
 * segment (where tc_ov_peer finds its peers' copies). */
int tc_ov_mine(struct tecomm_comm *c, tecore_devptr_t ptr, size_t bytes);
/* peer's address of ptr (symmetric memory of this rank). */
tecomm_result_t tc_ov_peer(struct tecomm_comm *c, tecore_devptr_t ptr, int peer,
                           tecore_devptr_t *out, const char *fn);

#endif
