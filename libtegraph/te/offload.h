/* SPDX-License-Identifier: Apache-2.0 */
/* te/offload.h -- activation offload: saved activations leave the device
 * during forward and come back ahead of backward, stream-ordered and
 * capturable into the same graphs as the compute.
 *
 * One context owns
 *   - one pinned host pool (tecore_mem_host_register), allocated once at
 *     creation, of the host budget's size, sub-allocated for the tensors
 *     it holds;
 *   - a D2H and an H2D copy stream, forked from and joined back to the
 *     compute stream through events;
 *   - past the host budget, spill files in the directories the caller
 *     names, written and read by the service engine (te/svc.h) through its
 *     io_uring: O_DIRECT where the file system takes it, the pool
 *     registered as a fixed buffer, two staging buffers a direction so
 *     copies and file I/O overlap, stripes spread over several files.
 *     Without io_uring (tegraph_uring_probe) the context keeps everything
 *     in host memory and says why (tegraph_offload_get_stats).
 *
 * Two ways to use it.
 *
 * Tensors (tegraph_offload_save / tegraph_offload_restore): any tensor,
 * plain or FP8 of any scaling mode, travels whole -- data, columnwise data,
 * amax, scale, scale_inv, columnwise scale_inv -- and comes back with its
 * dtype, shape and layout, bit for bit, into its own device buffers.  Eager
 * only (the host layout is decided per call).
 *
 * A fuser sequence (tegraph_offload_attach): offload is a property of the
 * sequence.  The caller names the blocks (consecutive operations, e.g.
 * one transformer layer each); the saved tensors of each block
 * (tecore_seq_get_saved: those the backward reads, at least min_elems
 * elements, not marked keep) are laid over a ring of prefetch + 1 device
 * slots, block j in slot j mod (prefetch + 1).  During forward, block j's
 * tensors start copying out as soon as its last group has run (an event on
 * the compute stream), overlapping block j + 1; block j + prefetch + 1
 * waits for that copy before it writes the slot.  During backward, block j
 * comes back as soon as block j + prefetch + 1's backward has freed the
 * slot, and block j's backward waits for it: prefetch blocks ahead,
 * double-buffered with the default prefetch 1.  The last prefetch + 1
 * blocks never leave (their slots are not reused before their backward).
 * Device memory: the offloaded blocks' saved tensors shrink from one set a
 * block to one set a slot.  All of this is queued from the sequence's pass
 * hooks (tecore_seq_set_hooks), so a captured forward or backward holds
 * its copies, events and engine hand-offs, and replays them.
 *
 * Errors: a failed spill write or read (ENOSPC, EIO, a short read, a
 * timeout) fails the step: tegraph_offload_check returns TEGRAPH_ERR_IO
 * naming the file and the tensor, and so does the sequence's next forward
 * (through its hook).  A tensor's device storage is reused only after its
 * write completed; a failed reload leaves NaN bytes (0xff), never stale
 * data, and an error.
 *
 * Threads: a context is not locked; one thread at a time. */
#ifndef TE_OFFLOAD_H
#define TE_OFFLOAD_H

#include <stddef.h>
#include <stdint.h>
#include <te/graph.h>
#include <te/deprecated.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tegraph_offload tegraph_offload_t;

/* tegraph_offload_config.flags */
#define TEGRAPH_OFFLOAD_NO_DIRECT 0x1u   /* spill files without O_DIRECT */

struct tegraph_offload_config {
  size_t host_budget;        /* bytes of pinned host memory (0: TEGRAPH_OFFLOAD_HOST_MB) */
  size_t min_elems;          /* tensors with fewer elements stay on the device
                                (0: TEGRAPH_OFFLOAD_MIN_ELEMS, 262144 as TE) */
  int prefetch;              /* blocks reloaded ahead of backward, >= 1 (0: 1); the
                                ring has prefetch + 1 slots */
  const char *const *dirs;   /* spill directories (NULL with ndirs 0: no spill) */
  size_t ndirs;
  int files_per_dir;         /* stripe over this many files in each directory (0: 1) */
  size_t stripe_bytes;       /* stripe size, a multiple of 4096 (0: 1 MiB) */
  size_t staging_bytes;      /* each of the 4 staging buffers, a multiple of stripe_bytes
                                (0: TEGRAPH_OFFLOAD_STAGING_MB); taken from the budget */
  unsigned flags;            /* TEGRAPH_OFFLOAD_* */
};

/* Creates a context: allocates the pool, the copy streams and events,
 * and (with dirs) probes io_uring, creates one file per stripe (removed at
 * destroy) and registers the pool with the service engine.  Synchronous
 * (a setup call). */
tegraph_result_t tegraph_offload_create(const struct tegraph_offload_config *cfg,
                                        tegraph_offload_t **ctx);
/* Detaches a sequence still attached, waits for the copy streams, frees
 * everything and removes the spill files. */
tegraph_result_t tegraph_offload_destroy(tegraph_offload_t *ctx);

/* ---- tensors ---------------------------------------------------------------- */

/* Copies t out after the work queued on stream (t stays the caller's, and
 * its buffers may be reused once the copy is done: tegraph_offload_save_done).
 * *id names it for restore.  A tensor saved with TEGRAPH_SAVE_KEEP (the
 * do-not-offload mark) or with fewer than min_elems elements stays:
 * nothing is copied, and restore gives its descriptor back.  Host memory
 * comes from the pool (the spill files past it) until
 * tegraph_offload_reset. */
#define TEGRAPH_SAVE_KEEP 0x1u   /* do not offload this tensor */
tegraph_result_t tegraph_offload_save(tegraph_offload_t *ctx, const struct tecore_tensor *t,
                                      unsigned flags, tecore_stream_t stream, int *id);
/* Queues on stream a wait for save id's copy-out (then its device buffers
 * may be overwritten). */
tegraph_result_t tegraph_offload_save_done(tegraph_offload_t *ctx, int id,
                                           tecore_stream_t stream);
/* Copies save id back into its device buffers, ordered after the work
 * queued on stream and before the work queued on it afterwards, and
 * writes its descriptor (dtype, shape, scaling, every pointer) to *t. */
tegraph_result_t tegraph_offload_restore(tegraph_offload_t *ctx, int id, tecore_stream_t stream,
                                         struct tecore_tensor *t);
/* Forgets every save (their host memory and file space become free).
 * TEGRAPH_ERR_STATE while a copy of one may still run (never waits). */
tegraph_result_t tegraph_offload_reset(tegraph_offload_t *ctx);

/* ---- sequences ------------------------------------------------------------------ */

/* A block: operations [first, first + count) of the sequence. */
struct tegraph_offload_block {
  size_t first, count;
};

struct tegraph_offload_seq_desc {
  tecore_seq_t *seq;                         /* built, recipe set */
  const struct tegraph_offload_block *blocks;/* in order, disjoint, >= 1 */
  size_t nblocks;
  const size_t *keep;                        /* saved-tensor indices (tecore_seq_get_saved)
                                                never offloaded; may be NULL */
  size_t nkeep;
};
/* Lays the blocks' saved tensors over the ring (device memory of the
 * context's), places their host copies (pool, then files), installs the
 * sequence's hooks and enables offload.  One sequence per context; no work
 * of the sequence may be queued.  After tecore_seq_set_recipe, detach and
 * attach again. */
tegraph_result_t tegraph_offload_attach(tegraph_offload_t *ctx,
                                        const struct tegraph_offload_seq_desc *d);
/* Gives the sequence storage of its own back and removes the hooks. */
tegraph_result_t tegraph_offload_detach(tegraph_offload_t *ctx);
/* on = 0: the saved tensors go back to storage of the sequence's own and
 * the hooks do nothing (warmup); on = 1: the ring and the schedule again.
 * Allocates or frees device memory: no work of the sequence may be queued
 * and no capture may be running. */
tegraph_result_t tegraph_offload_enable(tegraph_offload_t *ctx, int on);
/* tegraph_hook-shaped switches for a callable's pre_warmup and
 * post_warmup, with the context as user: enable(0) and enable(1). */
tecore_result_t tegraph_offload_hook_off(void *ctx);
tecore_result_t tegraph_offload_hook_on(void *ctx);

/* ---- state ------------------------------------------------------------------------- */

/* The first spill failure (TEGRAPH_ERR_IO, naming the file and the tensor),
 * or TEGRAPH_SUCCESS.  Sticky; never waits: call it after the step's work
 * is known done (e.g. a stream synchronize). */
tegraph_result_t tegraph_offload_check(tegraph_offload_t *ctx);

struct tegraph_offload_stats {
  int spill;                  /* 1: spill files in use */
  char why[200];              /* why there is no spill, or what it uses */
  size_t pool_bytes;          /* the pinned pool (budget) */
  size_t host_bytes;          /* of it holding tensors now */
  size_t file_bytes;          /* file space holding tensors now */
  size_t ring_bytes;          /* device memory of the ring (attached sequence) */
  size_t seq_bytes_before;    /* the sequence's device bytes before attach */
  size_t seq_bytes_after;     /* ... with offload on, not counting the ring */
  size_t offloaded, kept;     /* saved tensors moved / left (size, mark, last blocks) */
  size_t pass_to_host;        /* bytes one forward copies to the pool (and one backward */
  size_t pass_to_files;       /*   back), and to the files */
  uint64_t saves_to_host, saves_to_files;  /* tensor API: bytes saved so far */
};
tegraph_result_t tegraph_offload_get_stats(tegraph_offload_t *ctx, struct tegraph_offload_stats *st);
#if TE_DEPRECATED_NAMES_VISIBLE
/* Deprecated former name of tegraph_offload_get_stats (te/deprecated.h). */
tegraph_result_t tegraph_offload_stats(tegraph_offload_t *ctx, struct tegraph_offload_stats *st)
    TE_DEPRECATED("use tegraph_offload_get_stats");
#endif

#ifdef __cplusplus
}
#endif
#endif
