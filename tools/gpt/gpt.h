/* SPDX-License-Identifier: Apache-2.0
 * gpt.h -- te-gpt's parts (tools/te-gpt.c holds the options and the
 * loop): the model (gpt_model.c: token embedding -> blocks -> final norm
 * -> LM head as one fuser sequence, cross-entropy), the training step and
 * AdamW (gpt_train.c), the byte corpus and its sampler (gpt_data.c),
 * checkpoints in safetensors (gpt_ckpt.c over st.c), generation
 * (gpt_sample.c), under --tp, where a rank's slices lie in the whole
 * tensors (gpt_tp.c), and the reads of files (gpt_io.c).
 *
 * Shapes: a microbatch is batch sequences of seq tokens, rows = batch *
 * seq; activations [rows][hidden] BF16, logits [rows][vocab] BF16,
 * parameters BF16 in the sequence with F32 masters (AdamW's), the token
 * and position tables F32 (the embedding reads them directly).  Under an
 * FP8 recipe the Linears' weights are F32 in the sequence
 * (TECORE_SEQ_F32_WEIGHTS) and are AdamW's masters themselves: the FP8
 * GEMMs quantize them directly and no BF16 copy is kept. */
#ifndef TE_GPT_H
#define TE_GPT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <te/core.h>

#define GPT_ERR(...) (fprintf(stderr, "te-gpt: " __VA_ARGS__), fputc('\n', stderr))
/* a libtecore call that must succeed: else the message and exit 1 */
#define GPT_CHECK(call)                                                                 \
  do {                                                                                  \
    tecore_result_t r_ = (call);                                                        \
    if (r_ != TECORE_SUCCESS) gpt_die_call(#call, r_);                                  \
  } while (0)
void gpt_die_call(const char *what, tecore_result_t r) __attribute__((noreturn));
/* a libtegraph call that must succeed (te/graph.h included where used) */
#define GPT_GCHECK(call)                                                                   \
  do {                                                                                     \
    tegraph_result_t r_ = (call);                                                          \
    if (r_ != TEGRAPH_SUCCESS) {                                                           \
      GPT_ERR("%s failed: %s (%s)", #call, tegraph_strerror(r_), tegraph_last_error());    \
      exit(1);                                                                             \
    }                                                                                      \
  } while (0)
void *gpt_xalloc(size_t bytes);   /* calloc or exit 1 */
tecore_devptr_t gpt_dalloc(size_t bytes, size_t *counter);
struct tecore_tensor gpt_tensor2(tecore_dtype_t dt, size_t rows, size_t cols, tecore_devptr_t p);
uint64_t gpt_splitmix(uint64_t *x);
double gpt_now(void);          /* seconds, CLOCK_MONOTONIC */

struct gpt_bpe;   /* gpt_bpe.h: --tokenizer */
enum gpt_norm { GPT_LAYERNORM, GPT_RMSNORM };
enum gpt_act { GPT_GELU, GPT_SWIGLU, GPT_GEGLU, GPT_RELU };

struct gpt_config {
  int layers, hidden, heads, kv_heads, ffn, seq, vocab;
  int norm;       /* enum gpt_norm */
  int act;        /* enum gpt_act */
  int rope;       /* 1: RoPE on Q and K; 0: a learned position table */
  int bias;       /* 1: Linears (not the LM head) have biases */
  /* a run option, not the model's (never saved): the training sequence
   * allocates no storage for the saved tensors its backward never reads
   * (TECORE_SEQ_DEFER_SAVED); gpt_share_saved must then give them */
  int share_saved;
  /* a run option too: the Linears' weight gradients in BF16
   * (TECORE_SEQ_BF16_WGRAD) */
  int wgrad_bf16;
  /* a run option too: GELU as its own kernels, not in the GEMMs'
   * epilogues (TECORE_SEQ_NO_GELU_EPILOGUE) */
  int gelu_apart;
  /* a run option too: each block recomputed in the backward (--recompute) */
  int recompute;  /* enum gpt_recompute */
  /* the model's RoPE base (0: 10000) */
  float rope_theta;
};
enum gpt_recompute { GPT_RECOMPUTE_NONE = 0, GPT_RECOMPUTE_SELECTIVE = 1, GPT_RECOMPUTE_FULL = 2 };

/* One trained tensor: the PyTorch-style name, the model's copy (BF16 in
 * the sequence, or the F32 table itself), its F32 gradient, AdamW's
 * master and moments. */
struct gpt_param {
  char name[96];
  size_t rows, cols;           /* [out][in] for a Linear (nn.Linear's layout) */
  tecore_devptr_t value;       /* BF16 (sequence) or F32 (embedding tables, and the
                                  sequence's Linear weights under an FP8 recipe: the
                                  master itself, TECORE_SEQ_F32_WEIGHTS) */
  tecore_devptr_t grad;        /* grad_dtype */
  tecore_dtype_t grad_dtype;   /* F32; BF16 for a Linear's weight under --wgrad bf16 */
  tecore_devptr_t master, m, v;/* F32 */
  int bf16;                    /* value is a BF16 copy of master */
  int table;                   /* an embedding table (p[0], and p[1] without RoPE) */
  int decay;                   /* AdamW weight decay applies (matrices, not gains/biases) */
  int sharded;                 /* --tp: split over the ranks (the block's Linears) */
  size_t op;                   /* the sequence operation it belongs to (not a table) */
  int lin_weight;              /* a Linear's weight (tecore_seq_fp8_weight) */
  /* --dp: the elements [dp_first, dp_first + dp_count) this rank owns
   * (tecomm_dp_shard); dp_sharded: --zero 1, 2 or 3, AdamW's master and
   * moments hold those elements only; dp_z3: --zero 3 and a parameter of
   * the sequence, whose value (in the ring the passes gather into) is
   * no copy to read: this rank's shard of it lies at dp_value
   * (tecomm_dp_value_shard; 0 when dp_count is); also the token table
   * under --table-shards, which the group holds as a shard */
  size_t dp_first, dp_count;
  int dp_sharded, dp_z3;
  tecore_devptr_t dp_value;
  /* its reduced gradient at dp_first (tecomm_dp_grad_shard; 0 when
   * dp_count is), what AdamW and the norm read; dp_gring: --zero 3
   * without --sp and a parameter of the sequence, its gradient's shard
   * the group's own (TECOMM_DP_GRAD_SHARDS: grad points into the group's
   * ring, whole only inside a backward) */
  tecore_devptr_t dp_grad;
  int dp_gring;
};

/* Tensor parallelism (--tp): this rank's part of every block (te/transformer.h). */
struct gpt_tp {
  int size, rank;
  int sp;                      /* --sp: the training model's blocks sequence-parallel */
  void *ctx;                   /* the TP operations' struct tecomm_op_params */
  void *comm;                  /* tecomm_comm_t: the gradient norm's and the decode's sums */
  /* --save: host memory every rank maps (made before the ranks fork),
   * gpt_tp_area_bytes of it, where a split tensor's slices meet */
  void *area;
  size_t area_bytes;
  int (*barrier)(void *ctx);   /* every rank waits for all; nonzero: a rank is gone */
  void *barrier_ctx;
};

/* Data parallelism (--dp, gpt_dp.c): this rank's place, its group's
 * communicator and the data-parallel group (te/comm_dp.h). */
struct gpt_dp {
  int size, rank, zero;        /* size 0 or 1: one replica */
  int gshards;                 /* --grad-shards: under --zero 3, TECOMM_DP_GRAD_SHARDS */
  int tshards;                 /* --table-shards: under --zero 2, 3 (not --tp),
                                  TECOMM_DP_TABLE_SHARDS for the token table */
  size_t tok_index;            /* tshards on: the token table's index in the group */
  tecore_devptr_t xf;          /* tshards with a position table: F32 [rows][hidden], the
                                  token rows before the positions are added */
  tecore_devptr_t iota;        /* ... int32 [rows]: 0, 1, ...; the positions (t % seq) */
  tecore_devptr_t posids;
  void *comm;                  /* tecomm_comm_t: the ranks holding the same slices */
  void *group;                 /* tecomm_dp_t */
};

struct gpt_model {
  struct gpt_config c;
  struct gpt_tp tp;            /* size 0: one process */
  struct gpt_dp dp;
  size_t batch, rows;
  /* the sequence's rows: rows, or under --sp (tp.sp, a training model)
   * this rank's rows / tp.size of them from row0 on: the blocks' norms and
   * residuals, the final norm, the LM head and the loss on those */
  size_t srows, row0;
  tecore_devptr_t dx_sh;           /* --sp: BF16 [srows][hidden], gathered into dx */
  tecore_devptr_t sp_sum;          /* --sp: F32 [2], the eval loss's sums over the ranks */
  tecore_seq_t *seq;
  struct gpt_param *p;
  size_t np;
  size_t dev_bytes;            /* device memory te-gpt allocated itself */
  size_t nparams;              /* elements of every parameter (N of the flop count) */
  /* the embedding tables, also p[0] (and p[1] without RoPE) */
  tecore_devptr_t tok, tok_grad, pos, pos_grad;
  /* per microbatch buffers */
  tecore_devptr_t ids, labels;     /* int32 [rows] */
  tecore_devptr_t x, dx;           /* BF16 [rows][hidden] */
  tecore_devptr_t logits;          /* BF16 [rows][vocab]: dlogits after the backward */
  tecore_devptr_t loss, lse;       /* F32 [rows] */
  tecore_devptr_t means;           /* F32 [2 * max microbatches]: {mean, count} each */
  tecore_devptr_t dloss;           /* F32: 1 / accum */
  tecore_devptr_t noop;            /* int32 {0, 1}: the FP8 weights quantized, reused */
  /* FP8 training, per-tensor scaling: the cross-entropy's backward writes
   * dlogits straight into the LM head's FP8 gradient (tecore_seq_grad_fp8);
   * dlogits8 2: over the logits themselves, the columnwise copy in their
   * second half (TECORE_SEQ_GRAD_FP8_GIVEN: the sequence keeps no buffer
   * of the head's gradient size); 1: into the sequence's buffer, the
   * columnwise copy in the dead logits; 0: BF16 dlogits */
  int dlogits8;
  struct tecore_tensor g8;
  tecore_devptr_t xent_ws;         /* dlogits8 2: the first rows' codes (XENT_WS_ROWS) */
  size_t xent_ws_bytes;
  int max_mb;
  void *gsym;                  /* --dp, --zero 0/1: the gradients' symmetric memory
                                  (gpt_dp.c); NULL: plain allocations */
  void *scratch;               /* gpt_share_saved's arenas */
  size_t nscratch;
};

/* The model and its buffers (parameters initialized from seed); recipe
 * NULL: BF16.  rope/attention flags from c.  Exits 1 on failure. */
void gpt_model_create(struct gpt_model *m, const struct gpt_config *c, size_t batch, int max_mb,
                      const struct tecore_recipe *recipe, uint64_t seed, tecore_stream_t s);
/* The same, this rank's part (tp); its blocks' parameters are sliced from
 * the one-process model of the same seed, so the ranks compute it. */
void gpt_model_create_tp(struct gpt_model *m, const struct gpt_config *c, size_t batch,
                         int max_mb, const struct tecore_recipe *recipe, uint64_t seed,
                         const struct gpt_tp *tp, tecore_stream_t s);
/* The same under --tp and --dp (either may be NULL): with --dp and --zero
 * 0 or 1 the gradients (the sequence's region and the tables') in dp's
 * symmetric memory, so that the data-parallel group reduces them where
 * they lie.  Collective over dp->comm: every rank creates its model in
 * lockstep. */
struct gpt_ranks {
  const struct gpt_tp *tp;
  const struct gpt_dp *dp;
};
void gpt_model_create_dp(struct gpt_model *m, const struct gpt_config *c, size_t batch,
                         int max_mb, const struct tecore_recipe *recipe, uint64_t seed,
                         const struct gpt_ranks *ranks, tecore_stream_t s);
void gpt_model_destroy(struct gpt_model *m);
/* Forward of one microbatch (ids/labels on the device) to the loss:
 * means[mb] = {mean, count}.  backward: the gradients added (dloss);
 * with_loss: after gpt_logits alone, the loss's forward (means[mb]) and
 * its gradient in one pass over the logits (tecore_xent_fwd_bwd). */
void gpt_forward(struct gpt_model *m, int mb, int reuse_fp8, tecore_stream_t s);
void gpt_backward(struct gpt_model *m, int mb, int with_loss, tecore_stream_t s);
/* Embedding and the sequence alone: the logits of m->ids. */
void gpt_logits(struct gpt_model *m, int reuse_fp8, tecore_stream_t s);
/* The saved tensors the backward never reads laid over shared scratch by
 * their forward lifetimes (gpt_mem.c): *shared_bytes of them on
 * *arena_bytes; before any capture.  gpt_share_free: the arenas. */
void gpt_share_saved(struct gpt_model *m, size_t *shared_bytes, size_t *arena_bytes);
/* --recompute: every block of a training sequence (gpt_recompute.c), before its build */
void gpt_recompute_blocks(struct gpt_model *m, int inference);
void gpt_share_free(struct gpt_model *m);
/* group[i]: the forward group of operation i (tecore_seq_groups), -1 for
 * one the plan does not list; *nops: the operations the plan covers.
 * The array is the caller's to free. */
size_t *gpt_forward_groups(const struct gpt_model *m, size_t *nops);
/* Where the device memory goes, in bytes: the sequence's parameters and
 * their gradients, the optimizer's F32 masters and moments, the embedding
 * tables with their gradients, the saved activations (read back by the
 * backward, and the rest with the shared scratch), the FP8 copies and
 * workspaces of the sequence, the logits, and what is left. */
struct gpt_train;
struct gpt_mem {
  size_t params, grads, optim, tables, saved_back, saved_other, fp8_other, logits, rest, total;
};
void gpt_mem_count(const struct gpt_model *m, const struct gpt_train *t, struct gpt_mem *g);
/* The sequence's plan in direction dir (tecore_seq_describe) as a
 * malloc'd string, whatever its length. */
char *gpt_describe(const struct gpt_model *m, tecore_seq_dir_t dir);

/* ---- --tp: slices and whole tensors (gpt_tp.c) ---- */
/* p is split over the ranks (not replicated, not a rank-0-only bias). */
int gpt_tp_split(const struct gpt_model *m, const struct gpt_param *p);
/* The shape of p in the one-process model (p's own when not split). */
void gpt_tp_whole_shape(const struct gpt_model *m, const struct gpt_param *p, size_t *rows,
                        size_t *cols);
/* Where element (row, col) of rank r's slice (cols wide) of the parameter
 * name lies in the whole tensor, row-major (a bias: row 0, col the element). */
size_t gpt_tp_whole_index(const struct gpt_config *c, const char *name, int tp, int r, size_t row,
                          size_t col, size_t cols);
/* gpt_tp_whole_index of (row, col), and in *len how many elements from
 * there on in the slice's row follow one another in the whole tensor too
 * (the moves copy runs, not elements: a name is classified per run). */
size_t gpt_tp_whole_run(const struct gpt_config *c, const char *name, int tp, int r, size_t row,
                        size_t col, size_t cols, size_t *len);
/* The bytes of the largest split tensor of c as F32: struct gpt_tp's area. */
size_t gpt_tp_area_bytes(const struct gpt_config *c);
/* Collective over the ranks, every split parameter in m's order: this
 * rank's slice (host F32 [rows][cols]) into the area; on rank 0 a new host
 * array of the whole tensor (caller frees), NULL on the others.  Exits 1
 * when a rank is gone. */
float *gpt_tp_gather(const struct gpt_model *m, const struct gpt_param *p, const float *slice);
/* --sp: n elements of dt at buf summed over the tensor-parallel ranks (in
 * stream order); the replicated parameters' gradients summed so; dx_sh of
 * every rank gathered into dx.  Exit 1 when the communicator fails. */
void gpt_sp_sum(const struct gpt_model *m, tecore_devptr_t buf, size_t n, tecore_dtype_t dt,
                tecore_stream_t s);
void gpt_sp_grads(const struct gpt_model *m, tecore_stream_t s);
void gpt_sp_gather_dx(const struct gpt_model *m, tecore_stream_t s);
/* This rank's slice of p from the whole F32 tensor's bytes (any alignment)
 * into slice (host [rows][cols]). */
void gpt_tp_slice(const struct gpt_model *m, const struct gpt_param *p, const void *whole,
                  float *slice);

/* ---- --dp: the data-parallel group (gpt_dp.c) ---- */
/* The group over m->dp.comm: every trained tensor, the sequence's in the
 * order the backward finishes them, then the embedding tables; each
 * parameter's shard (dp_first, dp_count; dp_sharded under --zero 1, 2).
 * recipe: compared across the ranks.  Before gpt_train_init.  Exits 1
 * on failure. */
void gpt_dp_create(struct gpt_model *m, const struct tecore_recipe *recipe, tecore_stream_t s);
void gpt_dp_destroy(struct gpt_model *m);
/* The group's stage, buckets and how many run in place (one line). */
void gpt_dp_summary(const struct gpt_model *m, char *buf, size_t len);
/* --zero 3: the device bytes of the blocks' values the group holds (the
 * shards and the ring of two gathered units; tecomm_dp_describe); else 0. */
size_t gpt_dp_value_bytes(const struct gpt_model *m);
/* --zero 3 with gradient shards: the gradients' bytes the group holds
 * (its shards and ring); else 0. */
size_t gpt_dp_grad_bytes(const struct gpt_model *m);
/* --table-shards: the bytes of the token table's shards and scratch the
 * group holds; else 0. */
size_t gpt_dp_table_bytes(const struct gpt_model *m);
/* --table-shards: x = the embedding of m->ids (the group's sharded
 * table, and the position table) and its backward; *_whole: the token
 * table gathered whole into m->tok again (collective; for generation). */
void gpt_dp_embed_fwd(struct gpt_model *m, struct tecore_tensor *x, tecore_stream_t s);
void gpt_dp_embed_bwd(struct gpt_model *m, const struct tecore_tensor *dx, tecore_stream_t s);
void gpt_dp_table_whole(struct gpt_model *m, tecore_stream_t s);
/* The gradients' symmetric memory on dp->comm under --zero 0 or 1 (free
 * with free() after the last release); NULL without --dp or under
 * --zero 2.  alloc and release take it as ctx (tecore_seq_grad_region):
 * tecomm_mem_alloc, or plain device memory on every rank alike where
 * the communicator has no symmetric memory (ranks across hosts). */
void *gpt_dp_gsym_new(const struct gpt_dp *dp);
tecore_result_t gpt_dp_gsym_alloc(void *ctx, size_t bytes, tecore_devptr_t *p);
tecore_result_t gpt_dp_gsym_release(void *ctx, tecore_devptr_t p);
/* n floats at buf summed over the data-parallel ranks, on s (capturable). */
void gpt_dp_sum(const struct gpt_model *m, tecore_devptr_t buf, size_t n, tecore_stream_t s);
/* A new device buffer of p's whole F32 tensor from every rank's shard
 * (shard: this rank's dp_count floats), on s; the caller frees it. */
tecore_devptr_t gpt_dp_whole(const struct gpt_model *m, const struct gpt_param *p, tecore_devptr_t shard,
                             tecore_stream_t s);
/* Rows [first, first + count) of a drawn batch of batch * dp sequences:
 * this rank's slice (ids and labels of batch * dp * seq entries each). */
void gpt_dp_slice(const struct gpt_model *m, const int32_t *all, int32_t *mine);

/* ---- files (gpt_io.c) ---- */
/* path opened for reading without waiting, refused (a message, -1)
 * unless a regular file; the descriptor and its *size. */
int gpt_open_regular(const char *path, uint64_t *size);
/* n bytes at off of fd into buf: 0, or a message naming path and -1. */
int gpt_read_at(int fd, uint64_t off, void *buf, size_t n, const char *path);

/* ---- the corpus (gpt_data.c, gpt_shard.c) ---- */
/* The most bytes --data's tokens may take in memory in all (te-gpt(1)). */
#define GPT_DATA_MAX ((uint64_t)1 << 30)
struct gpt_data {
  uint8_t *tok;                /* n tokens, width bytes each, little-endian */
  int width;                   /* 1: bytes; 2 or 4: the widest shard's tokens */
  size_t n, ntrain;            /* training: [0, ntrain); validation: [ntrain, n) */
  int synthetic;               /* random tokens, drawn per batch */
  int vocab;
  char source[512];            /* what was read, for the notes */
  const struct gpt_bpe *bpe;   /* while loading: --tokenizer's, for text files */
};
struct gpt_data_opts {
  char **files;                /* --data (nfiles), else the man pages under corpus_dir */
  int nfiles;
  const char *corpus_dir;
  const char *val;             /* --val: the validation set (else the last tenth) */
  const char *tokenizer;       /* --tokenizer: text files read as its ids (NULL: bytes) */
  int seq, vocab, synthetic;
};
int gpt_data_load(struct gpt_data *d, const struct gpt_data_opts *o);
/* --eval: path's tokens (text through tokenizer when given and path is no
 * shard), all of them validation windows */
int gpt_data_load_eval(struct gpt_data *d, const char *path, int seq, int vocab,
                       const char *tokenizer);
void gpt_data_free(struct gpt_data *d);
/* Fills ids and labels (host int32 [batch * seq]) with a training batch
 * drawn with *rng, or validation batch k of nbatch (fixed windows). */
void gpt_data_batch(const struct gpt_data *d, int seq, size_t batch, uint64_t *rng, int32_t *ids,
                    int32_t *labels);
void gpt_data_val_batch(const struct gpt_data *d, int seq, size_t batch, int k, int nbatch,
                        int32_t *ids, int32_t *labels);
/* The validation windows: their number, and window j into ids and labels
 * (int32 [seq]; 0 past the last, 1 else). */
size_t gpt_data_windows(const struct gpt_data *d, int seq);
int gpt_data_window(const struct gpt_data *d, int seq, size_t j, int32_t *ids, int32_t *labels);
/* llm token shards: the header's bytes and magics (gpt_shard.c) */
#define GPT_SHARD_HEADER 1024
#define GPT_SHARD_MAGIC16 20240520u
#define GPT_SHARD_MAGIC32 20240801u
/* fd (of size bytes) as a shard: 1 with the token *width and count *ntok,
 * 0 when it is no shard (no magic: bytes), -1 with a message when its
 * header is wrong (version, count against the size) */
int gpt_shard_probe(int fd, uint64_t size, const char *path, int *width, uint64_t *ntok);
/* --tokenize: in's bytes, or its byte-level BPE ids when tokenizer (a
 * tokenizer.json or vocab.json path) is given, as a shard at out (version
 * 1, uint16; version 2, uint32, for a vocabulary past 65536); 0 or -1 */
int gpt_shard_write(const char *in, const char *out, const char *tokenizer);

/* ---- training ---- */
struct gpt_train {
  double lr, min_lr, wd, beta1, beta2, eps, clip;
  int warmup, decay_steps, accum;
  int64_t step;                /* steps taken */
  uint64_t rng;                /* the sampler's state */
  struct tecore_optim_tensor *ot;   /* [np]: decayed first, then the others */
  size_t ndecay, nopt;         /* ot[0, ndecay) decayed, [ndecay, nopt) not */
  tecore_devptr_t l2ws;
  size_t l2wsb;
  struct tecore_tensor *grads; /* [np + 1] views for the norm: replicated, (--tp) the
                                  ranks' split norms (normvec), then the split ones */
  size_t nrep, nsh, nvec;      /* nvec: 1 with --tp, else 0 */
  tecore_devptr_t normvec;     /* --tp: float [tp]: rank r's split gradients' norm in
                                  slot r, summed over the ranks on the device */
  /* --tp: n floats at buf summed over the ranks in stream order (capturable) */
  void (*sum_ranks)(tecore_devptr_t buf, size_t n, struct gpt_model *m, tecore_stream_t s);
  float *pinned;               /* [0] grad norm, [4..] means */
  int32_t *hids, *hlabels;     /* pinned staging [accum][rows] */
  int use_graph;               /* replay the forward/backward part as a graph */
  struct tegraph_graph *graph; /* captured after the first eager step */
  int eager_steps;
  size_t w8_opt;               /* Linear weights whose FP8 codes AdamW writes
                                  (tecore_seq_fp8_weight): the forwards after the
                                  first step quantize no weight (m->noop[0] = 1) */
  int w8_flag_set;             /* m->noop[0] = 1 was queued */
  tecore_devptr_t ostate;      /* struct tecore_optim_state [2]: decayed group, the rest */
  tecore_devptr_t clipf;       /* float: the clip factor */
  struct tecore_optim_state *hstate;   /* pinned staging of ostate */
  int host_launch;             /* launch the step graph from the host (else from the device) */
  /* queue the step graphs to a graph chain's launcher once both sets'
   * graphs were launched (tecore_graph_chain_create): no driver call a
   * step; stopped when anything else is to run on the stream */
  int chain_mode;
  tecore_graph_chain_t chain;
  int chain_launches;          /* steps queued through the chain */
  char chain_note[96];         /* the chain's launcher starts, for the summary */
  int graph_launched;          /* the step graph was launched at least once */
  /* One process with the step graph: the host queues the next step before
   * it waits for this one, so a launch finds the device busy (a launch
   * right after a long wait costs several times more host time).  Two
   * graphs, each with its own pinned staging and outputs, alternate. */
  int pipeline;                /* allowed (te-gpt: not with --no-pipeline, --offload, --tp) */
  int queue_next;              /* per step, set by the caller: another step follows directly */
  struct gpt_stage {
    int32_t *hids, *hlabels;
    float *pinned;
    struct tecore_optim_state *hstate;
    struct tegraph_graph *graph;
    tecore_event_t done;       /* recorded after its launch */
    uint64_t ticket;           /* its last launch's chain ticket (0: not chained) */
    int launched;
  } set[2];                    /* t->hids ... t->graph are set[cur]'s */
  int cur;                     /* the set of the step that completes next */
  int inflight;                /* that step is queued already */
  double launch_us;            /* the least host time of a step graph's launch */
  double launch_all[64];       /* the host time of each launch, the first 64 */
  int nlaunch;
  const struct gpt_run_args *run_args;   /* stored by gpt_save (or NULL) */
  const char *tokenizer;       /* --tokenizer (or NULL): copied into gpt_save's directory,
                                  --eval's text read through it */
};
/* The median host time of the step graph's launches so far (0: none). */
double gpt_launch_median(const struct gpt_train *t);
/* The median of v[0..n) (sorted in place); NAN for none. */
double gpt_median(double *v, size_t n);
void gpt_train_init(struct gpt_train *t, struct gpt_model *m, tecore_stream_t s);
void gpt_train_free(struct gpt_train *t);
double gpt_lr_at(const struct gpt_train *t, int64_t step);
/* One step (accum microbatches); returns the mean loss, *gnorm the
 * gradient norm before clipping. */
double gpt_train_step(struct gpt_train *t, struct gpt_model *m, const struct gpt_data *d,
                      tecore_stream_t s, double *gnorm);
/* The step graph's nodes by kind (kernels, copies, memsets, other) into
 * buf, e.g. "812 kernel, 0 memcpy, 0 memset, 3 other nodes"; "" when there
 * is no step graph. */
void gpt_graph_census(const struct gpt_train *t, char *buf, size_t n);
/* The mean loss over nval validation batches (gpt_data_val_batch). */
double gpt_val_loss(struct gpt_train *t, struct gpt_model *m, const struct gpt_data *d, int nval,
                    tecore_stream_t s);
/* The forward of the batch staged in t->hids and t->hlabels (labels
 * -100 ignored): the mean loss and the tokens it is over. */
void gpt_forward_loss(struct gpt_train *t, struct gpt_model *m, tecore_stream_t s, double *mean,
                      double *count);

/* ---- the run's options and its log (gpt_run.c) ---- */
/* "--name=value" (or "--name") words, malloc'd: the resolved settings
 * that define a run, stored in its checkpoint (te-gpt(1), "Checkpoints") */
struct gpt_run_args {
  char **arg;
  size_t n, cap;
};
void gpt_run_args_add(struct gpt_run_args *a, const char *name, const char *value);
void gpt_run_args_free(struct gpt_run_args *a);
/* The words as metadata "te-gpt.arg.N" into meta (room entries): their
 * count, or (size_t)-1 with a message when one does not fit. */
struct st_meta;
struct st_file;
size_t gpt_run_args_meta(const struct gpt_run_args *a, struct st_meta *meta, size_t room);
/* The stored words of f (path for messages) as an argv: *words[0] is
 * "te-gpt", the rest malloc'd and kept for the run (the options point
 * into them); each checked to be an option without control bytes.  0, or -1 with a message. */
int gpt_run_args_words(const struct st_file *f, const char *path, char ***words, int *n);
/* --log FILE: the step rows appended as "step N loss X val_loss Y ..." */
struct gpt_log {
  FILE *f;                     /* NULL: no --log */
};
struct gpt_log_row {
  int64_t step;
  double loss, val_loss, lr, grad_norm, ms, tokens_per_s;   /* val_loss NAN: none */
  double elapsed_s, eta_s;     /* since the first step began; the steps left at the median */
};
int gpt_log_open(struct gpt_log *l, const char *path);   /* path NULL: none; 0 or -1 */
void gpt_log_step(struct gpt_log *l, const struct gpt_log_row *r);
void gpt_log_close(struct gpt_log *l);

/* ---- --eval FILE (gpt_eval.c) ---- */
struct gpt_eval_result {
  size_t windows;              /* of the file (gpt_data_windows) */
  double tokens;               /* predicted: windows * seq */
  double loss, perplexity;     /* the mean over those tokens, exp(loss) */
};
/* The loss over every window of path (text through t->tokenizer); under
 * --dp collective, the ranks' sums added.  0, or -1 with a message. */
int gpt_eval(struct gpt_train *t, struct gpt_model *m, const char *path, tecore_stream_t s,
             struct gpt_eval_result *r);
/* gpt_eval printed as out's document (notes and fields): an exit status. */
struct te_out;
int gpt_eval_report(struct te_out *out, struct gpt_train *t, struct gpt_model *m,
                    const char *path, tecore_stream_t s);

/* ---- checkpoints ---- */
/* --tp: every rank calls it; the slices are gathered (gpt_tp_gather), rank
 * 0 alone writes the files, the layout of a one-process run's. */
int gpt_save(const char *dir, struct gpt_model *m, struct gpt_train *t, tecore_stream_t s);
/* The options a checkpoint's run was given (gpt_run_args_words). */
int gpt_load_run_args(const char *dir, char ***words, int *n);
/* Reads the configuration of a checkpoint (model.safetensors). */
int gpt_load_config(const char *dir, struct gpt_config *c);
/* --tp: each rank takes its slices of the whole tensors (a checkpoint of
 * one process or of any --tp). */
int gpt_load(const char *dir, struct gpt_model *m, struct gpt_train *t, tecore_stream_t s);

/* ---- the tokenizer in a checkpoint (gpt_ckpt_tok.c) ---- */
/* The tokenizer file path copied into dir: tokenizer.json, or a
 * vocab.json with the merges.txt beside it; *name the file written
 * ("tokenizer.json" or "vocab.json").  0, or -1 with a message. */
int gpt_tok_copy(const char *path, const char *dir, const char **name);
/* --load dir: the tokenizer its metadata records as a new path (the
 * caller frees), *path NULL when it records none; given (--tokenizer, or
 * NULL) must hold the same bytes.  0, or -1 with a message naming both. */
int gpt_tok_of_checkpoint(const char *dir, const char *given, char **path);
/* --load-hf dir: dir/tokenizer.json as a new path when te-gpt reads it,
 * else NULL (a note on stderr when the file is there but refused). */
char *gpt_tok_of_hf(const char *dir);

/* ---- Hugging Face GPT-2 checkpoints (gpt_hf.c) ---- */
/* --load-hf: the shape from dir/config.json (GPT-2's keys) */
int gpt_hf_config(const char *dir, struct gpt_config *c);
/* --load-hf: the weights from dir/model.safetensors (GPT-2's names), on
 * every rank (--tp: each its slices) */
int gpt_hf_load(const char *dir, struct gpt_model *m, tecore_stream_t s);
/* --save-hf: dir/model.safetensors and dir/config.json of a GPT-2-shaped
 * model, and the tokenizer (or NULL) as dir/tokenizer.json; under --tp
 * and --dp every rank calls it (the tensors made whole), rank 0 writes.
 * 0, or -1 with a message */
int gpt_hf_save(const char *dir, struct gpt_model *m, const char *tokenizer, tecore_stream_t s);

/* ---- generation ---- */
struct gpt_sample_opts {
  int n, top_k;
  double temperature;          /* 0: greedy */
  uint64_t seed;
  const char *prompt;
  int check;                   /* also the whole model's logits, compared */
  int no_graph;                /* eager decode steps (default: one graph, replayed) */
  double *steady_t0;           /* or NULL: gpt_now() before the third decode step */
  double *check_diff, *check_max;   /* check: max |kv - whole|, max |whole| */
  double *margin;              /* or NULL: the least gap between the two largest logits */
  const struct gpt_bpe *bpe;   /* or NULL: bytes; else the prompt's ids, any id drawn */
  uint32_t *ids;               /* or NULL: the n ids drawn */
};
/* Generates o->n bytes after the prompt into out (n + 1 bytes): 0, or -1
 * with a message when a logit is not finite (no sample). */
int gpt_sample(struct gpt_model *m, const struct gpt_sample_opts *o, char *out,
               tecore_stream_t s);

#endif
