/* SPDX-License-Identifier: Apache-2.0 */
/* dp_priv.h -- the data-parallel group's state (te/comm_dp.h), shared by
 * dp.c (the public calls and the pass hooks), dp_layout.c (buckets and
 * shards), dp_agree.c (the ranks' models compared) and dp_run.c (the
 * reductions, the gather and the norm's parts).
 *
 * Layout.  The tensors, in the caller's order, fill buckets of at most
 * bucket_bytes of gradient (a tensor larger than that is a bucket of its
 * own; a bucket holds one gradient dtype and one value dtype).  Inside a
 * bucket each tensor starts at a multiple of DP_ALIGN elements, and the
 * bucket is padded to a multiple of DP_ALIGN * nranks elements: shard r
 * of a bucket is its elements [r * shard, (r + 1) * shard), so every
 * shard, and every tensor's part of it, starts DP_ALIGN-aligned (the
 * optimizer's vector kernels read the parts where they lie). */
#ifndef TECOMM_DP_PRIV_H
#define TECOMM_DP_PRIV_H

#include "base/tc_internal.h"
#include "te_handles.h"
#include <te/comm_dp.h>

#define DP_ALIGN 64   /* elements */

/* dp is a live group of this library (never one destroyed). */
#define DP_LIVE(dp, fn)                                                        \
  do {                                                                         \
    TC_ARG(dp, "%s: dp is NULL", fn);                                          \
    TC_ARG(te_handle_live(dp), "%s: dp is not a live data-parallel group", fn); \
  } while (0)

struct dp_tensor {
  struct tecomm_dp_tensor t;
  char name[64];
  size_t bucket;
  size_t off;          /* its first element in the bucket */
  size_t span_off;     /* in place: its gradient's byte offset in the bucket's span */
  size_t param;        /* ZeRO-3: its index in tecore_seq_params of the sequence */
  int fp8;             /* ZeRO-3: an FP8 Linear's weight, gathered as E4M3 codes into
                          w8 (dp_zero3_fp8.c) */
  struct tecore_tensor w8;     /* then: the sequence's FP8 weight (tecore_seq_fp8_weight) */
};

struct dp_bucket {
  size_t t0, t1;       /* tensors [t0, t1) */
  size_t elems;        /* padded: a multiple of DP_ALIGN * nranks */
  size_t shard;        /* elems / nranks */
  tecore_dtype_t gdt, vdt;
  size_t pending;      /* tensors not written yet in this backward */
  int launched;
  int inplace;         /* reduced where the gradients lie (dp_inplace.c) */
  int why;             /* 0 (in place) or the dp_packed_why it is packed */
  tecore_devptr_t span;        /* in place: the first gradient's address */
  size_t span_elems;           /* in place: to the last gradient's end, padding included */
  size_t seg_off;              /* in place: the span's offset in its symmetric allocation */
  /* ZeRO-3 (dp_zero3.c): a bucket of the sequence's parameters holds
   * its value shard in vshard and is all-gathered, with the other
   * buckets of its unit, into the unit's ring slot before the passes
   * read it */
  int sharded;                 /* ZeRO-3: its values sharded (seq below) */
  int seq;                     /* its tensors are the sequence's parameters (ZeRO-3, or
                                  ZeRO-2 with TECOMM_DP_GRAD_SHARDS: in a unit) */
  size_t op_lo, op_hi;         /* the operations its tensors belong to */
  size_t vs_off;               /* bytes: its value shard in d->vshard */
  size_t unit;                 /* its gather unit (d->u) */
  size_t ring_off;             /* bytes: its values in the unit's slot */
  int fp8;                     /* its tensors are FP8 weights (dp_tensor.fp8): their codes
                                  are gathered into its slot space, not their values ... */
  int codes;                   /* ... while the recipe still has them so (each forward
                                  asks: tc_dp_zero3_fp8_refresh); else the values */
  /* TECOMM_DP_GRAD_SHARDS (dp_zero3_grad.c): its gradients lie in its
   * unit's slot of the gradient ring, reduce-scattered into gshard */
  size_t gring_off;            /* bytes: its gradients in the unit's gradient slot */
  size_t gs_off;               /* bytes: its reduced shard in d->gshard */
  size_t gacc;                 /* reductions since tecomm_dp_finish: the first writes the
                                  shard, the later ones add to it */
  /* TECOMM_DP_TABLE_SHARDS (dp_table.c): an embedding table, never
   * reduced; its value and gradient shards in d->tval and d->tgrad */
  int table;
  size_t tv_off, tg_off;       /* bytes */
  size_t tacc;                 /* embedding backwards since tecomm_dp_finish */
};

/* ZeRO-3: buckets whose operations overlap (an operation's weight and
 * bias of two gradient dtypes) gathered together into one ring slot;
 * also those of a group of the plan that would read three units. */
struct dp_unit {
  size_t f0, f1;               /* its buckets: d->fwd[f0 .. f1) */
  size_t op_lo, op_hi;
  size_t bytes;                /* its values in the slot */
  int slot;                    /* its forward position mod 2 */
  int gathered, used;          /* its values lie in its slot (gather queued); this
                                  pass: every group reading it ran */
  tecore_event_t ready;        /* recorded on the side stream after its gather */
  size_t gbytes;               /* TECOMM_DP_GRAD_SHARDS: its gradients in the slot */
  size_t gpending;             /* its buckets not reduced yet in this backward */
  int gready;                  /* this backward: the slot is its (the wait queued) */
};

/* Why a bucket is packed into the buffer (dp_inplace.c). */
enum dp_packed_why {
  DP_PACKED_ZERO2 = 1,
  DP_PACKED_ONE_RANK,
  DP_PACKED_NOT_SYMMETRIC,
  DP_PACKED_NOT_CONTIGUOUS,
  DP_PACKED_OFF,
  DP_PACKED_COUNT_
};

struct tecomm_dp {
  tecomm_comm_t comm;
  int rank, nranks, zero;
  float scale;
  struct dp_tensor *t;
  size_t nt;
  struct dp_bucket *b;
  size_t nb;
  size_t bucket_bytes;
  tecore_seq_t *seq;
  int hooked;                  /* seq's hooks are this group's */
  int armed;
  int forked;                  /* the side stream has work the caller's has not joined */
  tecomm_result_t hook_err;    /* a hook's launch failed: finish says so */
  tecore_stream_t side;        /* the communication stream */
  tecore_event_t fork, join;
  tecore_devptr_t buf;         /* symmetric: the largest bucket, gradient or value bytes */
  int buf_plain;               /* buf is plain device memory (no symmetric memory at the
                                  communicator's level: ranks across hosts) */
  size_t buf_bytes;
  tecore_devptr_t scale_dev;   /* F32: scale */
  tecore_devptr_t normvec;     /* F32 [nranks] */
  tecore_devptr_t l2ws;
  size_t l2wsb;
  struct tecore_tensor *views; /* this rank's shard of each gradient (norm) */
  size_t nviews;
  /* ZeRO-3 (dp_zero3.c) */
  size_t nops;                 /* the sequence's operations */
  tecore_devptr_t vshard;      /* the value shards of the sharded buckets */
  size_t vshard_bytes;
  tecore_devptr_t ring;        /* 2 slots, slot_size[0] then slot_size[1] bytes (the
                                  largest unit of that forward parity: the LM head's
                                  slot is not every layer's): the gathered values */
  int ring_plain;              /* plain device memory (no symmetric memory) */
  size_t slot_size[2];
  size_t *fwd, nfwd;           /* the sharded buckets in forward order */
  struct dp_unit *u;           /* the gather units in forward order */
  size_t nu;
  int swapped;                 /* the sequence's parameters point into the ring */
  int pass_dir;                /* the pass the hooks are in, or -1 */
  tecore_stream_t pass_stream;
  size_t occ[2];               /* the unit each slot holds, or SIZE_MAX */
  int fwd_done;                /* the last pass was a whole forward: its last two units
                                  are still in their slots for the backward */
  int rc_started;              /* a recomputed forward began this backward pass */
  size_t nfp8;                 /* buckets of FP8 codes (dp_bucket.fp8) */
  int fp8_keep;                /* TECOMM_DP_FP8_KEEP: the codes kept in the sequence's own
                                  copies, gathered in the forwards only */
  tecore_devptr_t f8_dummy;    /* 256 bytes: a zero to quantize, where a rank holds none of
                                  a weight, and its code */
  size_t gathered_bytes;       /* the values' and codes' bytes ZeRO-3's all-gathers have
                                  queued (nranks shards each) */
  /* TECOMM_DP_GRAD_SHARDS (dp_zero3_grad.c) */
  int gshards;
  tecore_devptr_t gring;       /* 2 slots of gslot_size[0] and [1] bytes (as ring): the
                                  units' gradients, zero between their writers */
  int gring_plain;
  int gowed;                   /* freed: the sequence's gradients to be its own again */
  size_t gslot_size[2];
  tecore_devptr_t gshard;      /* this rank's reduced gradients of the sharded buckets */
  size_t gshard_bytes;
  tecore_event_t gfree[2];     /* recorded on the side stream when a slot's unit is reduced
                                  and the slot zeroed */
  int gfree_rec[2];            /* ... since the last join: the next writer waits */
  size_t gocc[2];              /* the unit whose gradients a slot holds, or SIZE_MAX */
  /* TECOMM_DP_TABLE_SHARDS (dp_table.c) */
  int tshards;
  tecore_devptr_t tval, tgrad; /* this rank's shards of the tables' values and gradients */
  size_t tval_bytes, tgrad_bytes;
  tecore_devptr_t tscr;        /* symmetric: every rank's ids, then their rows */
  int tscr_plain;
  size_t tscr_bytes;
};

/* dp_layout.c: buckets and offsets from d->t (the tensors copied in). */
tecomm_result_t tc_dp_layout(struct tecomm_dp *d);
/* The part of tensor i in shard r of its bucket: [*first, *first + *n). */
void tc_dp_part(const struct tecomm_dp *d, size_t i, int r, size_t *first, size_t *n);
/* The device address of tensor i's value element `first` of this rank's
 * shard (ZeRO-3 sharded bucket: in vshard, dp_zero3.c's; else in the
 * value). */
tecore_devptr_t tc_dp_value_at(const struct tecomm_dp *d, size_t i, size_t first);
/* Tensor i's reduced gradient at element first of this rank's shard (in
 * dp_zero3_grad.c's shards under gshards; else in the gradient). */
tecore_devptr_t tc_dp_grad_at(const struct tecomm_dp *d, size_t i, size_t first);

/* dp_inplace.c: each bucket in place or packed (b->inplace, b->why),
 * from the layout alone; after tc_dp_layout. */
tecomm_result_t tc_dp_inplace(struct tecomm_dp *d);
const char *tc_dp_packed_why(int why);

/* dp_agree.c: collective; TECOMM_ERR_MISMATCH naming the first field
 * where a rank's model differs from this rank's. */
tecomm_result_t tc_dp_agree(struct tecomm_dp *d, const struct tecore_recipe *recipe);

/* dp_run.c: bucket k reduced on d->side after stream's work so far. */
tecomm_result_t tc_dp_launch(struct tecomm_dp *d, size_t k, tecore_stream_t stream);
/* dp_run.c: bytes of symmetric memory on d->comm, which the IPC kernels
 * read where it lies, zeroed on d->side; where the level has none (ranks
 * across hosts: NCCL, verbs; every rank alike) plain device memory, and
 * *plain says so.  what names it in an error.  tc_dp_sym_free gives it
 * back (0 accepted). */
tecomm_result_t tc_dp_sym_alloc(struct tecomm_dp *d, size_t bytes, tecore_devptr_t *p, int *plain,
                                const char *what);
void tc_dp_sym_free(struct tecomm_dp *d, tecore_devptr_t p, int plain);
/* d->side waits for stream's work so far. */
tecomm_result_t tc_dp_fork(struct tecomm_dp *d, tecore_stream_t stream);
/* stream waits for d->side (when it has work). */
tecomm_result_t tc_dp_join(struct tecomm_dp *d, tecore_stream_t stream);
tecomm_result_t tc_dp_gather_all(struct tecomm_dp *d, tecore_stream_t stream);
tecomm_result_t tc_dp_norm(struct tecomm_dp *d, tecore_stream_t stream);
/* The norm's shard views and workspace (at create). */
tecomm_result_t tc_dp_norm_setup(struct tecomm_dp *d);
/* dp_run.c: bucket b's gathered value into dst (bytes of b->elems),
 * from the shard this rank holds at src, on s. */
tecomm_result_t tc_dp_gather_to(struct tecomm_dp *d, const struct dp_bucket *b,
                                tecore_devptr_t src, tecore_devptr_t dst, tecore_stream_t s);

/* dp_zero3.c: ZeRO-3's set-up (after tc_dp_layout: the buckets' op
 * ranges, the shards, the ring, the sequence's parameters pointed into
 * it), its pass hooks, and the undoing at destroy (the whole values
 * gathered back into storage of the sequence's own). */
tecomm_result_t tc_dp_zero3_check(struct tecomm_dp *d);
/* dp_zero3_fp8.c: before tc_dp_layout, the FP8 Linears' weights marked
 * (dp_tensor.fp8: ZeRO-3 with the sequence under delayed scaling);
 * setup (after the ring): the sequence told their codes are given and
 * lie in the ring (tecore_seq_set_fp8_weight_data); gather: bucket b's
 * codes into its slot space on d->side (in a forward its amaxes
 * reduced); free: the forwards quantize them again, into storage of the
 * sequence's own. */
void tc_dp_zero3_fp8_mark(struct tecomm_dp *d);
tecomm_result_t tc_dp_zero3_fp8_setup(struct tecomm_dp *d);
tecomm_result_t tc_dp_zero3_fp8_gather(struct tecomm_dp *d, const struct dp_bucket *b);
/* At a forward's start: each FP8 bucket's codes or values (b->codes). */
void tc_dp_zero3_fp8_refresh(struct tecomm_dp *d);
void tc_dp_zero3_fp8_free(struct tecomm_dp *d);
/* ZeRO-3: bucket b's space in its unit's ring slot (its values, or its
 * FP8 codes). */
static inline tecore_devptr_t tc_dp_slot_at(const struct tecomm_dp *d,
                                            const struct dp_bucket *b) {
  return d->ring + (d->u[b->unit].slot ? d->slot_size[0] : 0) + b->ring_off;
}
tecomm_result_t tc_dp_zero3_setup(struct tecomm_dp *d);
tecore_result_t tc_dp_zero3_before(struct tecomm_dp *d, tecore_seq_dir_t dir, size_t first,
                                   size_t count, tecore_stream_t stream);
tecore_result_t tc_dp_zero3_after(struct tecomm_dp *d, tecore_seq_dir_t dir, size_t first,
                                  size_t count, tecore_stream_t stream);
void tc_dp_zero3_free(struct tecomm_dp *d);
/* Tensor i's whole value into dst on s (ZeRO-3: gathered; collective). */
/* dp_zero3_grad.c: TECOMM_DP_GRAD_SHARDS.  layout (host, after the
 * units): the gradient slots and shards; setup (device): the ring, the
 * shards, the sequence's gradients pointed into the ring; pass: a
 * backward begins (its buckets launch again); before: a backward group's
 * units' slots waited for; launch: bucket k reduce-scattered out of the
 * ring (dp.c calls it for such a bucket); finish: after the join; free: the ring and
 * shards; own (after every other free): the sequence's gradients its own
 * again. */
tecomm_result_t tc_dp_zg_layout(struct tecomm_dp *d);
tecomm_result_t tc_dp_zg_setup(struct tecomm_dp *d);
void tc_dp_zg_pass(struct tecomm_dp *d);
tecomm_result_t tc_dp_zg_before(struct tecomm_dp *d, size_t first, size_t count,
                                tecore_stream_t stream);
tecomm_result_t tc_dp_zg_launch(struct tecomm_dp *d, size_t k, tecore_stream_t stream);
void tc_dp_zg_finish(struct tecomm_dp *d);
void tc_dp_zg_free(struct tecomm_dp *d);
void tc_dp_zg_own(struct tecomm_dp *d);
/* Bucket b reduced out of the ring (the sequence's, under gshards). */
static inline int tc_dp_zg_owns(const struct tecomm_dp *d, const struct dp_bucket *b) {
  return d->gshards && b->seq;
}
tecomm_result_t tc_dp_value_whole(struct tecomm_dp *d, size_t i, tecore_devptr_t dst,
                                  tecore_stream_t s);

/* dp_table.c: TECOMM_DP_TABLE_SHARDS.  layout (host, after tc_dp_layout):
 * the tables' buckets and the shards' places; setup (device, after the
 * buffer): the shards, this rank's part of each value copied in; finish:
 * each table's gradient scaled (on stream), the count reset; whole:
 * table i's value all-gathered into dst; free. */
void tc_dp_table_layout(struct tecomm_dp *d);
tecomm_result_t tc_dp_table_setup(struct tecomm_dp *d);
tecomm_result_t tc_dp_table_finish(struct tecomm_dp *d, tecore_stream_t stream);
tecomm_result_t tc_dp_table_whole(struct tecomm_dp *d, size_t i, tecore_devptr_t dst,
                                  tecore_stream_t s);
void tc_dp_table_free(struct tecomm_dp *d);

#endif
