/* SPDX-License-Identifier: Apache-2.0 */
/* te/comm_dp.h -- data parallelism over a libtecomm communicator: every
 * rank holds the whole model, trains on its own rows, and the gradients
 * are reduced over the ranks in buckets, each as soon as the backward
 * wrote its last gradient, on a communication stream that overlaps the
 * rest of the backward (and is captured with it into a step graph).
 * ZeRO stages: 0, every bucket allreduced; 1, the same, and each rank
 * updates its shard of the parameters (the optimizer's masters and
 * moments exist for the shard only), then tecomm_dp_gather all-gathers
 * the updated values; 2, every bucket reduce-scattered: a rank's
 * gradients are reduced inside its shard only; 3, as 2, and each rank
 * holds only its shard of the values of the sequence's parameters (the
 * sequence's parameters point into a ring of two gather units (a bucket,
 * or buckets one operation or one fused group reads) that the pass hooks
 * all-gather each unit into before the first group that reads it, the
 * next unit's gather overlapping the current one's work:
 * tecore_seq_set_param; with TECOMM_DP_GRAD_SHARDS their gradients in a
 * second ring, reduce-scattered out of it into shards).  tecomm_dp_create(3) is
 * the overview: the layout of the buckets and shards, the mean over the
 * ranks, validation, errors. */
#ifndef TE_COMM_DP_H
#define TE_COMM_DP_H

#include <stddef.h>
#include <te/comm.h>
#include <te/ops.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tecomm_dp *tecomm_dp_t;

/* tecomm_dp_tensor.op of a gradient no sequence operation writes (it is
 * reduced by tecomm_dp_finish). */
#define TECOMM_DP_NO_OP ((size_t)-1)

/* One trained tensor: its gradient (reduced over the ranks), its value
 * (gathered under ZeRO-1/2/3; may be 0 under ZeRO-0; under ZeRO-3 a
 * tensor with an op is that operation's parameter of the sequence, as
 * tecore_seq_params gives it), count elements each. */
struct tecomm_dp_tensor {
  const char *name;            /* for messages, or NULL */
  tecore_devptr_t grad;
  tecore_dtype_t grad_dtype;   /* F32 or BF16 */
  tecore_devptr_t value;
  tecore_dtype_t value_dtype;  /* F32 or BF16 (with value) */
  size_t count;
  size_t op;                   /* the operation of desc.seq whose backward writes the
                                  gradient last, or TECOMM_DP_NO_OP */
  size_t rows;                 /* an embedding table (op TECOMM_DP_NO_OP): its rows, count /
                                  rows elements each; 0: not a table */
};

struct tecomm_dp_desc {
  tecomm_comm_t comm;          /* the data-parallel group (the caller's; outlives dp) */
  const struct tecomm_dp_tensor *tensors;   /* in the order the backward finishes them */
  size_t ntensors;
  tecore_seq_t *seq;           /* NULL: every bucket reduced by tecomm_dp_finish */
  size_t bucket_bytes;         /* 0: TECOMM_DP_BUCKET_MB */
  int zero;                    /* 0, 1, 2 or 3 */
  float scale;                 /* the reduced gradients times scale; 0: 1 / nranks (the mean) */
  const struct tecore_recipe *recipe;   /* compared across the ranks; NULL: none */
  unsigned flags;              /* TECOMM_DP_*, below; the same on every rank */
};

/* desc.flags, ZeRO-2 or 3 with desc.seq only: no rank keeps the whole
 * gradient of the sequence's parameters.  They point into a ring of two
 * gather units' gradients (tecore_seq_set_param_grad; ZeRO-3's units,
 * under ZeRO-2 too, whose values stay whole; each unit's slot zeroed
 * before the backward writes it), every backward reduce-scatters each
 * bucket out of the ring as soon as it is written (armed or not) into
 * this rank's gradient shard, which the step's first backward writes and
 * later microbatches add to; tecomm_dp_grad_shard says where a tensor's
 * part lies (desc.tensors[i].grad is no longer read or written for
 * them).  The sequence's own gradient storage is freed; destroy gives it
 * storage of its own again, zeroed. */
#define TECOMM_DP_GRAD_SHARDS 0x1u

/* desc.flags, ZeRO-2 or 3: no rank keeps a whole embedding table (the
 * tensors with rows).  Each is a bucket of its own, and this rank holds
 * its part of the value (tecomm_dp_value_shard; copied from
 * desc.tensors[i].value at create, which is no longer read) and of the
 * gradient (tecomm_dp_grad_shard; .grad is no longer read or written),
 * never reduced: tecomm_dp_embedding_fwd and _bwd run every rank's tokens
 * against the shards instead.  tecomm_dp_gather skips them;
 * tecomm_dp_gather_value all-gathers them. */
#define TECOMM_DP_TABLE_SHARDS 0x2u

/* Collective over desc->comm.  Refuses (TECOMM_ERR_MISMATCH on every
 * rank, the first differing field and the rank named) ranks whose
 * tensors, stage, bucket size or recipe differ.  Installs desc->seq's
 * pass hooks (te/ops.h: one set a sequence).  Free with
 * tecomm_dp_destroy. */
tecomm_result_t tecomm_dp_create(const struct tecomm_dp_desc *desc, tecomm_dp_t *dp);
/* Collective; waits for dp's work, frees its memory, removes the hooks.
 * Under ZeRO-3 it gathers the values back into the sequence (and gives
 * its gradients storage of their own); a sequence destroyed just before
 * gets nothing back (no gathers, no allocations).  NULL is accepted. */
tecomm_result_t tecomm_dp_destroy(tecomm_dp_t dp);
/* The next backward of desc.seq is the step's last microbatch: its hooks
 * launch each bucket as its last gradient is written.  Host only. */
tecomm_result_t tecomm_dp_arm(tecomm_dp_t dp);
/* Launches the buckets not launched yet (all of them without a sequence,
 * or when not armed) and makes stream wait for every reduction; disarms.
 * Collective (every rank calls it once a step, after its last backward);
 * capturable.  The reduced gradients are ready on stream. */
tecomm_result_t tecomm_dp_finish(tecomm_dp_t dp, tecore_stream_t stream);
/* The elements [*first, *first + *count) of tensor index that this rank
 * owns (its shard; *count may be 0), under every stage. */
tecomm_result_t tecomm_dp_shard(tecomm_dp_t dp, size_t index, size_t *first, size_t *count);
/* ZeRO-1/2: every tensor's value all-gathered from the ranks' shards
 * (each rank updated its own), on stream (ZeRO-3: the tensors no
 * operation reads; the passes gather the others).  Collective;
 * capturable. */
tecomm_result_t tecomm_dp_gather(tecomm_dp_t dp, tecore_stream_t stream);
/* Where this rank's reduced gradient of tensor index lies (its element
 * first of tecomm_dp_shard; 0 for an empty shard): inside the tensor's
 * gradient (ZeRO-0/1: all of it is reduced; 2 and 3: the shard only), or
 * under TECOMM_DP_GRAD_SHARDS the group's gradient shards, for the
 * optimizer and the norm to read after tecomm_dp_finish.  Host only. */
tecomm_result_t tecomm_dp_grad_shard(tecomm_dp_t dp, size_t index, tecore_devptr_t *ptr);
/* Where this rank's shard of tensor index's value lies (its element
 * first of tecomm_dp_shard; 0 for an empty shard): the value itself, or
 * under ZeRO-3 the group's shard storage, which the optimizer updates
 * and the passes gather from.  Host only. */
tecomm_result_t tecomm_dp_value_shard(tecomm_dp_t dp, size_t index, tecore_devptr_t *ptr);
/* Tensor index's whole value (count elements of value_dtype) into dst on
 * stream: under ZeRO-3 all-gathered from the shards (collective: every
 * rank calls it with the same index; outside the passes), else copied
 * from the value (ZeRO-1/2: as the last tecomm_dp_gather left it). */
tecomm_result_t tecomm_dp_gather_value(tecomm_dp_t dp, size_t index, tecore_devptr_t dst,
                                       tecore_stream_t stream);
/* The global gradient norm's parts: on stream, this rank's shard norm of
 * the reduced gradients into slot rank of an F32 vector [nranks], summed
 * over the ranks; *vec (the dp's) is that vector, whose L2 norm is the
 * global norm: pass it to tecore_l2norm_multi or tecore_clip_grad_norm.
 * Collective; capturable; after tecomm_dp_finish. */
tecomm_result_t tecomm_dp_norm_parts(tecomm_dp_t dp, struct tecore_tensor *vec,
                                     tecore_stream_t stream);
/* TECOMM_DP_TABLE_SHARDS: the rows of table index (a tensor with rows)
 * that int32 ids [tokens] name, into out [tokens][count / rows] (F32 or
 * BF16), bit for bit what tecore_embedding_fwd gives from the whole table:
 * every rank's ids are all-gathered, each rank writes the elements of its
 * shard for all of them (zeros elsewhere), and those rows are
 * reduce-scattered back to their ranks (one nonzero term each: exact).
 * An id outside the table gives a zero row (not reported); a -0 element
 * comes back +0.  Collective
 * (the same tokens on every rank); capturable once a call outside a
 * capture has sized the group's scratch (symmetric memory: nranks * tokens
 * ids and rows of out's dtype; a later call that needs more sizes it again). */
tecomm_result_t tecomm_dp_embedding_fwd(tecomm_dp_t dp, size_t index, tecore_devptr_t ids,
                                        size_t tokens, const struct tecore_tensor *out,
                                        tecore_stream_t stream);
/* Its backward: dout [tokens][count / rows] (F32 or BF16) of every rank
 * all-gathered with the ids and added into this rank's gradient shard
 * (tecore_embedding_bwd's order over the ranks' tokens, rank 0's first),
 * which the first call after tecomm_dp_finish zeroes first, so that
 * microbatches accumulate; tecomm_dp_finish scales it by desc.scale.  The
 * shard then holds the sum over the ranks: no reduction follows.
 * Collective; capturable as the forward. */
tecomm_result_t tecomm_dp_embedding_bwd(tecomm_dp_t dp, size_t index, tecore_devptr_t ids,
                                        size_t tokens, const struct tecore_tensor *dout,
                                        tecore_stream_t stream);
/* One line: the stage, the buckets, and for each whether it is reduced
 * in place (its gradients one span of symmetric memory) or packed into
 * the buffer, and why; into buf (len bytes, NUL-terminated, truncated),
 * *needed (may be NULL) the length without the NUL.  Host only. */
tecomm_result_t tecomm_dp_describe(tecomm_dp_t dp, char *buf, size_t len, size_t *needed);

#ifdef __cplusplus
}
#endif
#endif
