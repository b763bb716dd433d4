/* SPDX-License-Identifier: Apache-2.0
 * gpt_tp.c -- where a --tp rank's slice of a parameter lies in the whole
 * (one-process) tensor, and the moves between the two that checkpoints
 * need: the slices of a split tensor gathered into the whole one on rank
 * 0 (through host memory all ranks map, struct gpt_tp's area), and a
 * rank's slice taken from a whole tensor read from a file.
 *
 * The layout is tecore_seq_add_transformer(3)'s: per block the QKV Linear
 * and fc1 are column-parallel (the rank's query, key and value heads; the
 * rank's rows of each half of a gated fc1), the output Linear and fc2
 * row-parallel (the rank's columns), their biases whole on rank 0 alone
 * (added once before the sum).  Everything else is replicated.  Element
 * (row, col) of rank r's slice [rows][cols] is element gpt_tp_whole_index
 * of the whole [whole rows][whole cols], row-major; a bias is one row.
 *
 * --sp (a training model): the sums sequence parallelism adds outside the
 * blocks: the replicated parameters' gradients, the embedding's gradient
 * gathered, the losses. */
#include <stdlib.h>
#include <string.h>
#include "gpt.h"
#include <te/comm.h>

/* the rank-0-only biases of the row-parallel Linears */
static int rank0_bias(const char *name) {
  return strstr(name, "attn.proj.bias") || strstr(name, "mlp.fc2.bias");
}

static int column_parallel(const char *name) {
  return strstr(name, "attn.qkv.") || strstr(name, "mlp.fc1.");
}

int gpt_tp_split(const struct gpt_model *m, const struct gpt_param *p) {
  return m->tp.size > 1 && p->sharded && !rank0_bias(p->name);
}

void gpt_tp_whole_shape(const struct gpt_model *m, const struct gpt_param *p, size_t *rows,
                        size_t *cols) {
  *rows = p->rows, *cols = p->cols;
  if (!gpt_tp_split(m, p)) return;
  if (p->rows > 1 && column_parallel(p->name)) *rows *= (size_t)m->tp.size;
  else *cols *= (size_t)m->tp.size;   /* a bias, or a row-parallel weight */
}

size_t gpt_tp_whole_index(const struct gpt_config *c, const char *name, int tp, int r, size_t row,
                          size_t col, size_t cols) {
  size_t H = (size_t)c->hidden, hd = H / (size_t)c->heads, f = (size_t)c->ffn / (size_t)tp;
  size_t qn = (size_t)(c->heads / tp) * hd, kn = (size_t)(c->kv_heads / tp) * hd;
  int vec = strstr(name, ".bias") != NULL;
  size_t i = vec ? col : row;   /* the row of a matrix, the element of a vector */
  if (strstr(name, "attn.qkv.")) {
    size_t fr = i < qn ? (size_t)r * qn + i
                : i < qn + kn ? (size_t)c->heads * hd + (size_t)r * kn + (i - qn)
                : (size_t)(c->heads + c->kv_heads) * hd + (size_t)r * kn + (i - qn - kn);
    return vec ? fr : fr * H + col;
  }
  if (strstr(name, "mlp.fc1.")) {
    size_t fr = i < f ? (size_t)r * f + i : (size_t)c->ffn + (size_t)r * f + (i - f);
    return vec ? fr : fr * H + col;
  }
  if (!vec && strstr(name, "attn.proj.")) return row * H + (size_t)r * qn + col;
  if (!vec && strstr(name, "mlp.fc2.")) return row * (size_t)c->ffn + (size_t)r * f + col;
  return row * cols + col;
}

size_t gpt_tp_whole_run(const struct gpt_config *c, const char *name, int tp, int r, size_t row,
                        size_t col, size_t cols, size_t *len) {
  size_t end = cols;   /* a matrix's row lies whole in a row of the whole one */
  if (strstr(name, ".bias")) {   /* a column-parallel bias: its q, k, v or halves apart */
    size_t hd = (size_t)c->hidden / (size_t)c->heads, f = (size_t)c->ffn / (size_t)tp;
    size_t qn = (size_t)(c->heads / tp) * hd, kn = (size_t)(c->kv_heads / tp) * hd;
    if (strstr(name, "attn.qkv.")) end = col < qn ? qn : col < qn + kn ? qn + kn : cols;
    else if (strstr(name, "mlp.fc1.") && col < f) end = f;
    if (end > cols) end = cols;
  }
  *len = end - col;
  return gpt_tp_whole_index(c, name, tp, r, row, col, cols);
}

size_t gpt_tp_area_bytes(const struct gpt_config *c) {
  size_t H = (size_t)c->hidden, hd = H / (size_t)c->heads;
  size_t qkv = (size_t)(c->heads + 2 * c->kv_heads) * hd * H;
  size_t fc1 = (c->act == GPT_SWIGLU || c->act == GPT_GEGLU ? 2 : 1) * (size_t)c->ffn * H;
  size_t fc2 = H * (size_t)c->ffn, proj = H * (size_t)c->heads * hd, n = qkv;
  if (fc1 > n) n = fc1;
  if (fc2 > n) n = fc2;
  if (proj > n) n = proj;
  return n * sizeof(float);
}

static void tp_barrier(const struct gpt_tp *tp) {
  if (tp->barrier(tp->barrier_ctx)) {
    GPT_ERR("--tp: rank %d: a checkpoint's gather waited for a rank in vain", tp->rank);
    exit(1);
  }
}

float *gpt_tp_gather(const struct gpt_model *m, const struct gpt_param *p, const float *slice) {
  const struct gpt_tp *tp = &m->tp;
  size_t rows, cols;
  gpt_tp_whole_shape(m, p, &rows, &cols);
  size_t n = rows * cols;
  if (!tp->area || n * sizeof(float) > tp->area_bytes) {
    GPT_ERR("--tp: %s [%zu][%zu] does not fit the gather's area (%zu bytes)", p->name, rows,
            cols, tp->area_bytes);
    exit(1);
  }
  float *area = tp->area;
  tp_barrier(tp);   /* rank 0 has taken the last tensor out */
  for (size_t r = 0, len; r < p->rows; r++)
    for (size_t k = 0; k < p->cols; k += len) {
      size_t i = gpt_tp_whole_run(&m->c, p->name, tp->size, tp->rank, r, k, p->cols, &len);
      memcpy(&area[i], &slice[r * p->cols + k], len * sizeof *area);
    }
  tp_barrier(tp);   /* every slice is in */
  if (tp->rank) return NULL;
  float *whole = gpt_xalloc(n * sizeof *whole);
  memcpy(whole, area, n * sizeof *whole);
  return whole;
}

void gpt_tp_slice(const struct gpt_model *m, const struct gpt_param *p, const void *whole,
                  float *slice) {
  const struct gpt_tp *tp = &m->tp;
  const unsigned char *w = whole;   /* a file's bytes: no alignment promised */
  for (size_t r = 0, len; r < p->rows; r++)
    for (size_t k = 0; k < p->cols; k += len) {
      size_t i = gpt_tp_whole_run(&m->c, p->name, tp->size, tp->rank, r, k, p->cols, &len);
      memcpy(&slice[r * p->cols + k], w + i * sizeof(float), len * sizeof(float));
    }
}

/* ---- --sp: sequence parallelism's sums ---- */

static void sp_call(tecomm_result_t r, const char *what) {
  if (r == TECOMM_SUCCESS) return;
  GPT_ERR("--sp: %s: %s (%s)", what, tecomm_strerror(r), tecomm_last_error());
  exit(1);
}

void gpt_sp_sum(const struct gpt_model *m, tecore_devptr_t buf, size_t n, tecore_dtype_t dt,
                tecore_stream_t s) {
  sp_call(tecomm_allreduce((tecomm_comm_t)m->tp.comm, buf, buf, n, dt, TECOMM_SUM, s),
          "the sum over the tensor-parallel ranks");
}

/* --zero 2, 3: p's gradient whole again from the dp ranks' reduced
 * shards (the rest zeroed, then summed: x + 0 is x).  The tp ranks' dp
 * groups shard differently (rank 0 alone holds the row-parallel biases,
 * which shift its buckets), so a tp sum of the shards would add a
 * reduced element to an unreduced one. */
static void sp_dp_whole(const struct gpt_model *m, const struct gpt_param *p,
                        tecore_stream_t s) {
  size_t es = tecore_dtype_size(p->grad_dtype), n = p->rows * p->cols;
  size_t end = p->dp_first + p->dp_count;
  if (p->dp_first) GPT_CHECK(tecore_memset_d8_async(p->grad, 0, p->dp_first * es, s));
  if (end < n) GPT_CHECK(tecore_memset_d8_async(p->grad + end * es, 0, (n - end) * es, s));
  sp_call(tecomm_allreduce((tecomm_comm_t)m->dp.comm, p->grad, p->grad, n, p->grad_dtype,
                           TECOMM_SUM, s),
          "the sum of the shards over the data-parallel ranks");
}

/* The replicated parameters of the sequence (the norms, the LM head) saw
 * this rank's rows only: their gradients summed over the ranks.  The
 * row-parallel biases (rank 0's) saw every row, the tables are
 * backpropagated over the gathered rows on every rank (gpt_backward). */
void gpt_sp_grads(const struct gpt_model *m, tecore_stream_t s) {
  for (size_t i = 0; i < m->np; i++) {
    const struct gpt_param *p = &m->p[i];
    if (p->sharded || p->table) continue;
    if (m->dp.group && m->dp.zero >= 2) sp_dp_whole(m, p, s);
    gpt_sp_sum(m, p->grad, p->rows * p->cols, p->grad_dtype, s);
  }
}

void gpt_sp_gather_dx(const struct gpt_model *m, tecore_stream_t s) {
  sp_call(tecomm_allgather((tecomm_comm_t)m->tp.comm, m->dx_sh, m->dx,
                           m->srows * (size_t)m->c.hidden, TECORE_DTYPE_BF16, s),
          "the all-gather of the embedding's gradient");
}
