/* SPDX-License-Identifier: Apache-2.0 */
/* offload_internal.h -- activation offload's private state (te/offload.h):
 * the context (pool, staging buffers, copy streams, spill files), a part
 * (one contiguous device range and where its copy lives: the pool or the
 * spill space, with the engine jobs that write and read each chunk), a
 * transfer (parts moved together), the tensor saves and the attached
 * sequence's plan. */
#ifndef TEGRAPH_OFFLOAD_INTERNAL_H
#define TEGRAPH_OFFLOAD_INTERNAL_H

#include "te_handles.h"
#include "tg_internal.h"
#include <te/offload.h>

enum ol_where { OL_HOST = 0, OL_FILE = 1 };

struct ol_part {
  tecore_devptr_t dev;
  size_t bytes;
  int where;                      /* enum ol_where */
  size_t host_off;                /* OL_HOST: offset in the pool */
  uint64_t file_off;              /* OL_FILE: offset in the spill space (stripe-aligned) */
  size_t nchunks;                 /* OL_FILE: staging-buffer-sized pieces */
  unsigned first_parity;          /* OL_FILE: staging buffer of chunk 0 (0 or 1) */
  tecore_svc_job_t **wjob, **rjob;/* OL_FILE: per chunk */
  char name[96];
};

/* Parts moved together: one tensor, or one block's saved tensors. */
struct ol_xfer {
  struct ol_part *parts;
  size_t nparts;
  unsigned chunks;                /* file chunks placed so far (the parity counter) */
};

struct ol_save {
  struct tecore_tensor t;
  int kept;
  struct ol_xfer x;
  tecore_event_t out_done, in_done;
  int restored;
};

struct ol_block {
  size_t first, end;              /* ops [first, end) */
  int copied;                     /* leaves the device (not one of the last slots' blocks) */
  struct ol_xfer x;
  tecore_event_t ev_fwd, out_done, ev_bwd, in_done;
  /* per pass */
  int fwd_waited, out_issued, reload_issued, bwd_waited;
};

struct ol_seq {
  tecore_seq_t *seq;
  size_t nops;
  struct ol_block *b;
  size_t nb;
  int K;                          /* ring slots: prefetch + 1 */
  tecore_devptr_t ring;
  size_t slot_bytes;
  size_t *ring_idx;               /* saved-tensor indices laid over the ring ... */
  tecore_devptr_t *ring_ptr;      /* ... and their addresses there */
  size_t nring;
  int enabled;
  size_t before, after;           /* tecore_seq_memory totals */
  size_t offloaded, kept;
  size_t pass_host, pass_files;
  size_t host_end;                /* the pool bytes the plan holds */
  int pending;                    /* a forward ran and its backward has not ended */
  uint64_t file_end;
};

struct tegraph_offload {
  struct tegraph_offload_config cfg;
  size_t min_elems;
  int prefetch;
  /* pool */
  unsigned char *pool;
  int pool_registered;             /* malloc'd and tecore_mem_host_register'ed */
  tecore_devptr_t pool_d;
  size_t pool_bytes, host_cap, host_used;
  unsigned char *stage[4];        /* 0, 1: out (D2H then write); 2, 3: in (read then H2D) */
  size_t stage_bytes;
  int buf_index;                  /* the pool's engine registration, or -1 */
  /* spill */
  int spill;
  char why[200];
  size_t nfiles;
  int *fds;
  char **paths;
  uint64_t file_used;
  size_t stripe;
  /* streams */
  tecore_stream_t d2h, h2d;
  tecore_event_t tail;            /* joins a copy stream back to the compute stream */
  /* tensor saves */
  struct ol_save *saves;
  size_t nsaves, cap_saves;
  size_t save_host_base;          /* where the saves' pool space starts */
  uint64_t save_file_base;
  uint64_t saves_host, saves_files;
  /* the attached sequence */
  struct ol_seq *sq;
  tegraph_result_t failed;        /* sticky */
  char failmsg[600];
};

/* offload_xfer.c */
/* Adds a part (device range) to x, its copy placed in the pool or, past
 * it, in the spill space (jobs made now).  fn names the caller. */
tegraph_result_t ol_add_part(tegraph_offload_t *c, struct ol_xfer *x, tecore_devptr_t dev,
                             size_t bytes, const char *name, const char *fn);
void ol_xfer_free(struct ol_xfer *x);
/* Queue x's copies out on the D2H stream / back on the H2D stream. */
tegraph_result_t ol_out(tegraph_offload_t *c, const struct ol_xfer *x, const char *fn);
tegraph_result_t ol_in(tegraph_offload_t *c, const struct ol_xfer *x, const char *fn);
/* The first engine failure among x's jobs (recorded in c). */
tegraph_result_t ol_xfer_check(tegraph_offload_t *c, const struct ol_xfer *x);
size_t ol_xfer_bytes(const struct ol_xfer *x, int where);

/* offload_seq.c */
tegraph_result_t ol_seq_check(tegraph_offload_t *c);
/* TEGRAPH_ERR_STATE naming fn while a forward's tensors are out (the
 * attached sequence ran a forward whose backward has not ended). */
tegraph_result_t ol_seq_idle(const tegraph_offload_t *c, const char *fn);
/* The plan goes whatever fails (tegraph_offload_destroy). */
void ol_seq_drop(tegraph_offload_t *c);
/* When the attached sequence was destroyed: the plan goes without a call
 * to it (its saved-tensor pointers and hooks went with it) and 1 is
 * returned; else 0.  fn names the caller in the log line. */
int ol_seq_forget_gone(tegraph_offload_t *c, const char *fn);

/* TEGRAPH_ERR_INVALID naming fn unless c is a live context (te_handles.h:
 * a destroyed one is never read); inline, so that the context's file and
 * the files it calls need not call each other back. */
static inline tegraph_result_t ol_live(const tegraph_offload_t *c, const char *fn) {
  TG_ARG(c, "%s: ctx is NULL", fn);
  TG_ARG(te_handle_live(c), "%s: ctx %p is not a live offload context (destroyed?)", fn,
         (const void *)c);
  return TEGRAPH_SUCCESS;
}
/* offload_tensor.c: frees the tensor saves (their copies are done). */
tegraph_result_t ol_saves_free(tegraph_offload_t *c);

#endif
