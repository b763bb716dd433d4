/* SPDX-License-Identifier: Apache-2.0 */
/* te/embedding.h -- token embedding: the forward gathers rows of a
 * [vocab][hidden] table by int32 ids (plus, optionally, rows of a
 * positions' table); the backward adds the output's gradient into dW's
 * rows, deterministically (the same bits run to run, whatever the
 * scheduling: each vocabulary row's gradients are added in token order).
 *
 * Shapes: weight [vocab][hidden], pos_weight [max_pos][hidden] (2-D views),
 * ids int32 [tokens], positions int32 [tokens] (or implied: token %
 * seq_len, or the token's index when seq_len is 0), out and dout
 * [tokens][hidden].  Dtypes F32, F16, BF16 (each tensor its own), float
 * math.
 *
 * Out-of-range ids.  An id outside 0 .. vocab-1 (or a position outside
 * 0 .. max_pos-1) is never read: its output row is written as zeros and
 * its gradient is dropped.  When args->status is set (a uint64_t in mapped
 * host memory, tecore_mem_alloc_host, zeroed once), the kernel records one
 * offending token there; the next call that is given the same word fails
 * with TECORE_ERR_INVALID naming the token and id (and clears it), and
 * tecore_embedding_check reports it after waiting for the stream.
 *
 * A shard of the token table (shard_count nonzero, for a table that a
 * data-parallel group holds split, ZeRO-style): weight (forward) and
 * dweight (backward) keep the whole table's shape [vocab][hidden], but
 * their data holds only its elements [shard_first, shard_first +
 * shard_count), row-major and contiguous.  The forward writes an output
 * element of a table element outside the shard as 0, so the sum of the
 * shards' forwards is the whole table's, exactly; the backward adds into
 * the shard's elements only, with the whole table's order and bits, and
 * reads nothing outside it.  Not with pos_weight or dpos_weight.
 *
 * Everything runs in stream order on stream, allocates nothing and is
 * graph-capturable. */
#ifndef TE_EMBEDDING_H
#define TE_EMBEDDING_H

#include <stddef.h>
#include <stdint.h>
#include <te/result.h>
#include <te/device.h>
#include <te/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

struct tecore_embedding_args {
  const struct tecore_tensor *weight;     /* forward: [vocab][hidden] */
  const struct tecore_tensor *pos_weight; /* forward: [max_pos][hidden], or NULL */
  tecore_devptr_t ids;                    /* int32 [tokens] */
  size_t tokens;
  tecore_devptr_t positions;              /* int32 [tokens], or 0 (implied) */
  size_t seq_len;                         /* implied positions: token % seq_len; 0: token */
  uint64_t *status;                       /* mapped host word, or NULL */
  size_t shard_first, shard_count;   /* a shard of the token table (above); 0, 0: the whole table */
};

/* out = weight[ids] (+ pos_weight[positions]). */
tecore_result_t tecore_embedding_fwd(const struct tecore_embedding_args *args,
                                     struct tecore_tensor *out, tecore_stream_t stream);

/* dweight[ids[t]] += dout[t] for every token in order, and, when
 * dpos_weight is set, dpos_weight[positions[t]] += dout[t] (args->weight
 * and pos_weight are not read; dweight and dpos_weight give the tables'
 * shapes).  Rows no token names are left as they are. */
tecore_result_t tecore_embedding_bwd(const struct tecore_embedding_args *args,
                                     const struct tecore_tensor *dout,
                                     struct tecore_tensor *dweight,
                                     struct tecore_tensor *dpos_weight, tecore_stream_t stream);

/* table[ids[t]] = in[t] for every row t of in ([tokens][hidden], converted
 * to table's dtype): the reverse of the gather, e.g. a KV cache's append
 * at a position read from device memory (so a graph replays it for each
 * new position).  ids int32 [tokens], distinct; an id outside table's rows
 * writes nothing and is reported through *status (NULL: not reported). */
tecore_result_t tecore_embedding_store(const struct tecore_tensor *in, tecore_devptr_t ids,
                                       struct tecore_tensor *table, uint64_t *status,
                                       tecore_stream_t stream);

/* Waits for stream, then reads and clears *status: TECORE_SUCCESS, or
 * TECORE_ERR_INVALID naming the token and id that an earlier call met.
 * Synchronous: not for use while capturing a graph. */
tecore_result_t tecore_embedding_check(uint64_t *status, tecore_stream_t stream);

#ifdef __cplusplus
}
#endif
#endif
