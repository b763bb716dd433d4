/* verbs_priv.h -- libtecomm's verbs transport: reliable-connected queue
 * pairs between every pair of ranks on one RDMA device, registered host
 * staging buffers, and the host allreduce that runs over them.
 * SPDX-License-Identifier: Apache-2.0
 *
 * The wire protocol.  Rank a sends rank b a message in chunks of at most
 * slot_bytes (<= 8 MiB, rxe's largest message); each chunk goes into the
 * next of TC_VB_SLOTS receive slots b keeps for a: RDMA WRITEs of the
 * chunk's data, the last work request a WRITE_WITH_IMM whose immediate
 * carries the chunk's length, so b's completion says the whole chunk is
 * there (RC delivers in order).  a writes a slot only with a credit: it
 * starts with TC_VB_SLOTS and b returns one (a zero-byte WRITE_WITH_IMM,
 * TC_VB_IMM_CREDIT) each time it has copied a slot out, so a never
 * overruns b.  The connection data (QPN, GID, LID, PSN, rkey and address
 * of the receive slots) goes through the communicator's host exchange.
 *
 * Failures.  An error completion, a queue pair in the error state, a
 * peer that stops answering (no completion or credit within
 * TECOMM_TIMEOUT; the RC retry itself ends after TECOMM_VERBS_TIMEOUT and
 * TECOMM_VERBS_RETRY) make the endpoint failed: a sticky
 * TECOMM_ERR_TIMEOUT (the peer did not answer) or TECOMM_ERR_SYSTEM (any
 * other verbs failure) whose detail names the peer; every later call
 * returns it at once.  Nothing waits without a bound. */
#ifndef TECOMM_VERBS_PRIV_H
#define TECOMM_VERBS_PRIV_H

#include "boot/boot.h"
#include "verbs_api.h"

#define TC_VB_SLOTS 4                 /* receive slots per peer (the credits) */
#define TC_VB_MAX_MSG (8u << 20)      /* rxe's largest message */
#define TC_VB_IMM_CREDIT 0x80000000u  /* immediate: credits (low bits: how many) */
#define TC_VB_IMM_LEN 0x00ffffffu     /* immediate of a data chunk: its length */

typedef struct tc_vb tc_vb_t;

/* Opens the verbs endpoint of the ranks of b that pass member != 0
 * (collective: every rank of b calls it, and every rank gets the same
 * answer; a non-member gets *out NULL): the device
 * (TECOMM_VERBS_DEVICE, or the first with an active port), a queue pair
 * to each peer, staging buffers for chunks of slot_bytes, and the
 * exchange of connection data over b.  TECOMM_ERR_NOT_SUPPORTED naming
 * the first rank that could not, and why, when any rank cannot. */
tecomm_result_t tc_vb_open(struct tc_boot *b, int member, tc_vb_t **out);
void tc_vb_close(tc_vb_t *vb);

/* This rank and the number of ranks (members) of the endpoint. */
void tc_vb_ranks(const tc_vb_t *vb, int *rank, int *nranks);

/* The device and port in use ("rxe0:1"), for descriptions. */
const char *tc_vb_name(const tc_vb_t *vb);
/* Bytes the queue pairs carry inline (what the device granted). */
unsigned tc_vb_inline(const tc_vb_t *vb);

/* Sends sbytes of sbuf to member to and receives rbytes from member from
 * into rbuf, at once (either may be -1 or 0 bytes): the exchange one step
 * of a ring or of recursive doubling needs, free of deadlock however
 * large.  Start it, then poll until it says 1 (done) or -1 (the endpoint
 * failed: tc_vb_status says why); 0: not yet.  Each poll drives the
 * completion queue once and never blocks; no progress for TECOMM_TIMEOUT
 * fails the endpoint, naming the peer. */
struct tc_vb_xfer {
  int to, from;
  const char *sbuf;
  char *rbuf;
  size_t sbytes, rbytes, sent, got;
  int64_t last;                /* when it last moved (TECOMM_TIMEOUT counts from there) */
};
void tc_vb_xfer_start(tc_vb_t *vb, struct tc_vb_xfer *x, int to, const void *sbuf, size_t sbytes,
                      int from, void *rbuf, size_t rbytes);
int tc_vb_xfer_poll(tc_vb_t *vb, struct tc_vb_xfer *x);

/* The endpoint's sticky failure (TECOMM_SUCCESS while healthy); the
 * detail is copied into the thread's last error when it failed. */
tecomm_result_t tc_vb_status(tc_vb_t *vb, const char *fn);

/* The communicator rank the sticky failure concerns, or -1. */
int tc_vb_failed_peer(tc_vb_t *vb);

/* In-place allreduce of count elements of dtype (F32, BF16, F16) at buf
 * in host memory over every member of the endpoint: recursive doubling
 * up to TECOMM_VERBS_RD_MAX_KB when the member count is a power of two, a
 * ring (reduce-scatter then all-gather) otherwise; a state machine for
 * the service engine to poll: tc_vb_ar_start, then tc_vb_ar_poll until 1
 * (done) or -1 (failed: buf filled with 0xff bytes, NaN in every float
 * format, never partial sums; tc_vb_status says why); 0: not yet.  The
 * state owns a scratch buffer until tc_vb_ar_fini. */
struct tc_vb_ar {
  void *buf;
  size_t count, es;
  tecore_dtype_t dtype;
  tecomm_op_t op;
  int rd;                      /* recursive doubling (else the ring) */
  int gather;                  /* the ring's all-gather alone (tc_vb_ag_start) */
  int step, nsteps;            /* the exchange under way */
  char *tmp;
  size_t tmp_bytes;
  struct tc_vb_xfer x;
};
tecomm_result_t tc_vb_ar_start(tc_vb_t *vb, struct tc_vb_ar *a, void *buf, size_t count,
                               tecore_dtype_t dtype, tecomm_op_t op);
/* The same state machine as an all-gather of bytes bytes a member, in
 * place in buf (members * bytes; this member's block at me * bytes):
 * the ring's all-gather half, n - 1 exchanges, bytes moved untouched. */
tecomm_result_t tc_vb_ag_start(tc_vb_t *vb, struct tc_vb_ar *a, void *buf, size_t bytes);
int tc_vb_ar_poll(tc_vb_t *vb, struct tc_vb_ar *a);
void tc_vb_ar_fini(struct tc_vb_ar *a);

#endif
