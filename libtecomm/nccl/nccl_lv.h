/* SPDX-License-Identifier: Apache-2.0 */
/* nccl_lv.h -- the nccl level's state (nccl_level.c, nccl_watch.c): the
 * communicator's NCCL communicator and its watchdog, reached through
 * c->lv[TC_LV_NCCL]; private to those two files. */
#ifndef TC_NCCL_LV_H
#define TC_NCCL_LV_H

#include "level.h"
#include "nccl.h"

struct tc_nccl_watch;
struct tc_nccl_lv {
  tc_nccl_comm_t comm;          /* NULL: no NCCL (off, or aborted) */
  struct tc_nccl_watch *watch;  /* after init, comm is touched under its lock only */
  const char *loaded;           /* the loader's word on libnccl (nccl.c) */
};
#define NL(c) ((struct tc_nccl_lv *)(c)->lv[TC_LV_NCCL])

/* ---- the NCCL communicator after init (nccl_watch.c) ---------------------------
 * Its lock, its watchdog (TECOMM_NCCL_WATCHDOG: a collective that runs
 * TECOMM_TIMEOUT without ending gets the NCCL communicator aborted), NCCL's
 * asynchronous error, abort and end. */
tecomm_result_t tc_nccl_open_watch(struct tecomm_comm *c);
/* Stops the watchdog, then destroys (aborts, after a failure) the NCCL
 * communicator. */
void tc_nccl_close(struct tecomm_comm *c);
/* The watchdog's or NCCL's failure made the communicator's (sticky). */
void tc_nccl_health(struct tecomm_comm *c);
void tc_nccl_abort(struct tecomm_comm *c);
/* Locks c->nccl for an NCCL call; fails (unlocked) when it is gone. */
tecomm_result_t tc_nccl_lock(struct tecomm_comm *c, const char *fn);
void tc_nccl_unlock(struct tecomm_comm *c);
/* Under the lock: brackets an NCCL call on stream for the watchdog. */
struct tc_nccl_op;
struct tc_nccl_op *tc_nccl_watch_begin(struct tecomm_comm *c, tecore_stream_t stream);
void tc_nccl_watch_end(struct tecomm_comm *c, struct tc_nccl_op *o, tecore_stream_t stream, int ok);

#endif
