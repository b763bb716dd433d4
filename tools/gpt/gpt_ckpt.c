/* SPDX-License-Identifier: Apache-2.0
 * gpt_ckpt.c -- te-gpt's checkpoints, two safetensors files in a
 * directory (st.h):
 *   model.safetensors      the F32 weights under PyTorch-style names
 *                          (nn.Linear's [out][in]; te-gpt(1) lists them),
 *                          the configuration in "__metadata__"
 *   optimizer.safetensors  AdamW's moments ("<name>.exp_avg",
 *                          "<name>.exp_avg_sq"), the FP8 scaling state,
 *                          and in "__metadata__" the step and the
 *                          sampler's state
 * Loading takes the F32 masters and rounds the BF16 copies from them as
 * AdamW does, so that a resumed run continues with the same bits. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "gpt.h"
#include "st.h"
#include "gpt_ckpt.h"

static const char *const norm_names[] = {"layernorm", "rmsnorm"};
static const char *const act_names[] = {"gelu", "swiglu", "geglu", "relu"};
static const char *const fp8_roles[] = {"activation", "weight", "gradient"};

/* the config as metadata (meta: at least 16 entries); the count */
static size_t config_meta(const struct gpt_config *c, int64_t step, struct st_meta *meta) {
  const struct { const char *k; int v; } iv[] = {
      {"layers", c->layers}, {"hidden", c->hidden}, {"heads", c->heads},
      {"kv_heads", c->kv_heads}, {"ffn", c->ffn}, {"seq", c->seq}, {"vocab", c->vocab},
      {"rope", c->rope}, {"bias", c->bias}};
  size_t n = 0;
  snprintf(meta[n].key, ST_MAX_NAME, "format");
  snprintf(meta[n++].value, ST_MAX_VALUE, "te-gpt 1");
  for (size_t i = 0; i < sizeof iv / sizeof iv[0]; i++, n++) {
    snprintf(meta[n].key, ST_MAX_NAME, "%s", iv[i].k);
    snprintf(meta[n].value, ST_MAX_VALUE, "%d", iv[i].v);
  }
  snprintf(meta[n].key, ST_MAX_NAME, "norm");
  snprintf(meta[n++].value, ST_MAX_VALUE, "%s", norm_names[c->norm]);
  snprintf(meta[n].key, ST_MAX_NAME, "act");
  snprintf(meta[n++].value, ST_MAX_VALUE, "%s", act_names[c->act]);
  snprintf(meta[n].key, ST_MAX_NAME, "lm_head");
  snprintf(meta[n++].value, ST_MAX_VALUE, "untied");
  snprintf(meta[n].key, ST_MAX_NAME, "layout");
  snprintf(meta[n++].value, ST_MAX_VALUE, "nn.Linear [out][in]; attn.qkv rows: query heads, key heads, value heads");
  if (c->rope_theta > 0) {   /* written only where not the default 10000 (llama3-8b) */
    snprintf(meta[n].key, ST_MAX_NAME, "rope_theta");
    snprintf(meta[n++].value, ST_MAX_VALUE, "%d", (int)c->rope_theta);
  }
  snprintf(meta[n].key, ST_MAX_NAME, "step");
  snprintf(meta[n++].value, ST_MAX_VALUE, "%" PRId64, step);
  return n;
}

/* a device F32 buffer of n floats into a new host array */
static float *download(tecore_devptr_t p, size_t n, tecore_stream_t s) {
  float *h = gpt_xalloc(n * 4);
  GPT_CHECK(tecore_stream_synchronize(s));
  GPT_CHECK(tecore_memcpy((tecore_devptr_t)(uintptr_t)h, p, n * 4));
  return h;
}

static void set_tensor(struct st_tensor *t, const char *name, const char *suffix, size_t rows,
                       size_t cols, const float *data) {
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s%s", name, suffix);
  t->dtype = ST_F32;
  t->ndim = rows > 1 ? 2 : 1;
  t->shape[0] = rows > 1 ? rows : cols;
  t->shape[1] = cols;
  t->data = data;
}

static int write_free(const char *dir, const char *file, struct st_tensor *t, size_t n,
                      struct st_meta *meta, size_t nmeta) {
  char path[4096], err[512];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  int rc = st_write(path, t, n, meta, nmeta, err, sizeof err);
  if (rc) GPT_ERR("%s", err);
  for (size_t i = 0; i < n; i++) free((void *)t[i].data);
  return rc;
}

int gpt_ckpt_writer(const struct gpt_model *m) {
  return (m->tp.size <= 1 || m->tp.rank == 0) && (m->dp.size <= 1 || m->dp.rank == 0);
}

/* p's buffer buf (its master or a moment) as the whole tensor on the
 * host: --zero's shards made whole (sharded), --tp's slices gathered
 * (every rank takes part); the writer's array, *rows x *cols, NULL on
 * the other ranks */
static float *whole_host(const struct gpt_model *m, const struct gpt_param *p, int sharded,
                         tecore_devptr_t buf, size_t *rows, size_t *cols, tecore_stream_t s) {
  tecore_devptr_t whole_dev = sharded ? gpt_dp_whole(m, p, buf, s) : 0;
  float *h = download(whole_dev ? whole_dev : buf, p->rows * p->cols, s);
  if (whole_dev) GPT_CHECK(tecore_mem_free(whole_dev));
  *rows = p->rows, *cols = p->cols;
  if (gpt_tp_split(m, p)) {
    float *whole = gpt_tp_gather(m, p, h);
    free(h);
    h = whole;
    gpt_tp_whole_shape(m, p, rows, cols);
  }
  if (!gpt_ckpt_writer(m)) return free(h), NULL;
  return h;
}

/* an F32 parameter's master is its value (whole on every rank, also
 * under --zero 1, 2, whose master is a view of the shard) */
float *gpt_param_values(const struct gpt_model *m, const struct gpt_param *p, size_t *rows,
                        size_t *cols, tecore_stream_t s) {
  /* an F32 parameter's master is its value (whole on every rank under
   * --zero 1, 2, whose master is a view of the shard); under --zero 3 the
   * sequence's F32 values are shards too */
  const int shard = p->bf16 || p->dp_z3;
  return whole_host(m, p, p->dp_sharded && shard, shard ? p->master : p->value, rows, cols, s);
}

/* p's buffer as the whole tensor into t[*k] on the writer */
static void add_whole(struct st_tensor *t, size_t *k, const struct gpt_model *m,
                      const struct gpt_param *p, const char *suffix, tecore_devptr_t buf,
                      tecore_stream_t s) {
  size_t rows, cols;
  float *h = whole_host(m, p, p->dp_sharded, buf, &rows, &cols, s);
  if (h) set_tensor(&t[(*k)++], p->name, suffix, rows, cols, h);
}

int gpt_save(const char *dir, struct gpt_model *m, struct gpt_train *t, tecore_stream_t s) {
  /* --tp, --dp: rank 0 alone writes */
  int writer = gpt_ckpt_writer(m);
  if (writer && mkdir(dir, 0777) && errno != EEXIST) {
    GPT_ERR("--save %s: %s", dir, strerror(errno));
    return -1;
  }
  size_t room = t->run_args ? t->run_args->n : 0;
  struct st_meta *meta = gpt_xalloc((20 + room) * sizeof *meta);
  size_t nm = config_meta(&m->c, t->step, meta);
  const char *tok = NULL;   /* the tokenizer first: the metadata names it */
  if (writer && t->tokenizer && gpt_tok_copy(t->tokenizer, dir, &tok)) return free(meta), -1;
  if (tok) {
    snprintf(meta[nm].key, ST_MAX_NAME, "tokenizer");
    snprintf(meta[nm++].value, ST_MAX_VALUE, "%s", tok);
  }
  size_t na = gpt_run_args_meta(t->run_args, meta + nm, room);
  if (na == (size_t)-1) return free(meta), -1;
  nm += na;
  /* rank 0 has every tensor's name (the biases of the row-parallel Linears
   * are its own), so m->np of them, twice for the moments */
  struct st_tensor *w = gpt_xalloc((2 * m->np + 3) * sizeof *w);
  size_t k = 0;
  for (size_t i = 0; i < m->np; i++) {
    size_t rows, cols;
    float *h = gpt_param_values(m, &m->p[i], &rows, &cols, s);
    if (h) set_tensor(&w[k++], m->p[i].name, "", rows, cols, h);
  }
  if (writer && write_free(dir, "model.safetensors", w, k, meta, nm))
    return free(w), free(meta), -1;
  k = 0;
  for (size_t i = 0; i < m->np; i++) {
    add_whole(w, &k, m, &m->p[i], ".exp_avg", m->p[i].m, s);
    add_whole(w, &k, m, &m->p[i], ".exp_avg_sq", m->p[i].v, s);
  }
  /* --tp: the amaxes are reduced over the ranks (te-gpt sets the recipe's
   * amax_reduce), so every rank holds rank 0's FP8 state */
  for (int r = 0; r < 3 && writer; r++) {
    struct tecore_delayed_state st;
    GPT_CHECK(tecore_seq_fp8_state(m->seq, (tecore_fp8_role_t)r, &st));
    if (!st.count) continue;
    size_t n = (3 + (size_t)st.history_len) * st.count;
    set_tensor(&w[k], "fp8_state.", fp8_roles[r], 3 + (size_t)st.history_len, st.count,
               download(st.base, n, s));
    k++;
  }
  int rc = 0;
  if (writer) {
    nm = 0;
    snprintf(meta[nm].key, ST_MAX_NAME, "step");
    snprintf(meta[nm++].value, ST_MAX_VALUE, "%" PRId64, t->step);
    snprintf(meta[nm].key, ST_MAX_NAME, "sampler_state");
    snprintf(meta[nm++].value, ST_MAX_VALUE, "%016" PRIx64, t->rng);
    rc = write_free(dir, "optimizer.safetensors", w, k, meta, nm);
  }
  free(w);
  free(meta);
  return rc;
}

void gpt_ckpt_close(struct gpt_ckpt *c) {
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
  st_free(&c->f);
}

/* The 8-byte length checked against the file's size before the header
 * is read (a header length past the file costs nothing), then the
 * header parsed. */
int gpt_ckpt_open(const char *dir, const char *file, struct gpt_ckpt *c) {
  char err[512];
  uint8_t first[8] = {0};
  uint64_t size, n;
  memset(&c->f, 0, sizeof c->f);
  snprintf(c->path, sizeof c->path, "%s/%s", dir, file);
  c->fd = gpt_open_regular(c->path, &size);
  if (c->fd < 0) return -1;
  if (gpt_read_at(c->fd, 0, first, size < 8 ? (size_t)size : 8, c->path)) return gpt_ckpt_close(c), -1;
  if (st_header_len(first, size, &n, err, sizeof err)) {
    GPT_ERR("%s: not a valid safetensors file: %s", c->path, err);
    return gpt_ckpt_close(c), -1;
  }
  char *hdr = gpt_xalloc((size_t)n);
  int rc = gpt_read_at(c->fd, 8, hdr, (size_t)n, c->path);
  if (!rc && st_parse_header(hdr, (size_t)n, size - 8 - n, &c->f, err, sizeof err)) {
    GPT_ERR("%s: not a valid safetensors file: %s", c->path, err);
    rc = -1;
  }
  free(hdr);
  c->data_off = 8 + n;
  if (rc) gpt_ckpt_close(c);
  return rc;
}

/* a metadata value of the file as printable text: never its bytes as
 * they are (an escape sequence in a checkpoint would reach the user's
 * terminal) */
static const char *shown(const char *v, char *buf, size_t n) {
  if (!v) return "missing";
  st_escape(v, buf, n);
  return buf;
}

/* an integer metadata value in [lo, hi] */
static int meta_int(const struct st_file *f, const char *key, long lo, long hi, int *out) {
  const char *v = st_meta_get(f, key);
  char *end, b[256];
  errno = 0;
  long x = v ? strtol(v, &end, 10) : 0;
  if (!v || !*v || *end || errno || x < lo || x > hi) {
    GPT_ERR("checkpoint metadata \"%s\": %s%s%s (an integer in %ld..%ld expected)", key,
            v ? "\"" : "", shown(v, b, sizeof b), v ? "\"" : "", lo, hi);
    return -1;
  }
  *out = (int)x;
  return 0;
}

static int meta_name(const struct st_file *f, const char *key, const char *const *names, int n,
                     int *out) {
  const char *v = st_meta_get(f, key);
  char b[256];
  for (int i = 0; v && i < n; i++)
    if (!strcmp(v, names[i])) return *out = i, 0;
  GPT_ERR("checkpoint metadata \"%s\": %s", key, shown(v, b, sizeof b));
  return -1;
}

int gpt_load_config(const char *dir, struct gpt_config *c) {
  struct gpt_ckpt ck;
  if (gpt_ckpt_open(dir, "model.safetensors", &ck)) return -1;
  const struct st_file f = ck.f;
  const char *fmt = st_meta_get(&f, "format");
  char b[256];
  int rc = 0;
  if (!fmt || strcmp(fmt, "te-gpt 1")) {
    GPT_ERR("%s/model.safetensors: not a te-gpt checkpoint (metadata \"format\": %s)", dir,
            shown(fmt, b, sizeof b));
    rc = -1;
  }
  rc = rc || meta_int(&f, "layers", 1, 1024, &c->layers) ||
       meta_int(&f, "hidden", 8, 65536, &c->hidden) || meta_int(&f, "heads", 1, 1024, &c->heads) ||
       meta_int(&f, "kv_heads", 1, 1024, &c->kv_heads) ||
       meta_int(&f, "ffn", 1, 1 << 20, &c->ffn) || meta_int(&f, "seq", 1, 1 << 20, &c->seq) ||
       meta_int(&f, "vocab", 2, 1 << 24, &c->vocab) || meta_int(&f, "rope", 0, 1, &c->rope) ||
       meta_int(&f, "bias", 0, 1, &c->bias) || meta_name(&f, "norm", norm_names, 2, &c->norm) ||
       meta_name(&f, "act", act_names, 4, &c->act);
  /* optional: checkpoints of the default RoPE base carry none */
  int theta = 0;
  if (!rc && st_meta_get(&f, "rope_theta")) rc = meta_int(&f, "rope_theta", 1, 1 << 30, &theta);
  c->rope_theta = (float)theta;
  gpt_ckpt_close(&ck);
  return rc ? -1 : 0;
}

int gpt_load_run_args(const char *dir, char ***words, int *n) {
  struct gpt_ckpt ck;
  if (gpt_ckpt_open(dir, "model.safetensors", &ck)) return -1;
  int rc = gpt_run_args_words(&ck.f, ck.path, words, n);
  gpt_ckpt_close(&ck);
  return rc;
}

/* a loaded tensor holds finite numbers only: a NaN or an infinity is
 * refused with its name and place (it would train to a NaN loss, or
 * sample from logits that are not numbers) */
static int all_finite(const float *v, size_t n, const char *file, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(v[i])) {
      GPT_ERR("%s: tensor \"%s\" holds %s at element %zu", file, name,
              isnan(v[i]) ? "a NaN" : "an infinity", i);
      return 0;
    }
  return 1;
}

float *gpt_ckpt_read(const struct gpt_ckpt *ck, const char *name, size_t rows, size_t cols) {
  const char *file = strrchr(ck->path, '/') ? strrchr(ck->path, '/') + 1 : ck->path;
  const struct st_tensor *t = st_find(&ck->f, name);
  if (!t) return GPT_ERR("%s: no tensor \"%s\"", file, name), NULL;
  uint64_t want0 = rows > 1 ? rows : cols;
  int ndim = rows > 1 ? 2 : 1;
  if (t->dtype != ST_F32 || t->ndim != ndim || t->shape[0] != want0 ||
      (ndim == 2 && t->shape[1] != cols)) {
    GPT_ERR("%s: tensor \"%s\" is %s [%" PRIu64 "%s], te-gpt expects F32 [%" PRIu64 "%s]", file,
            name, st_dtype_name(t->dtype), t->ndim ? t->shape[0] : 0, t->ndim > 1 ? ", ..." : "",
            want0, ndim == 2 ? ", ..." : "");
    return NULL;
  }
  /* the shape is the one asked for: its bytes are what the caller expects */
  size_t bytes = (size_t)(t->end - t->begin);
  float *h = gpt_xalloc(bytes);
  if (gpt_read_at(ck->fd, ck->data_off + t->begin, h, bytes, ck->path) ||
      !all_finite(h, bytes / sizeof *h, file, name))
    return free(h), NULL;
  return h;
}

/* The F32 tensor name into device dst: [rows][cols] (a vector when rows
 * is 1), or with p (--tp, a split parameter) p's whole shape, of which
 * this rank's slice. */
static int load_tensor(const struct gpt_ckpt *ck, const char *name, const struct gpt_model *m,
                       const struct gpt_param *p, size_t rows, size_t cols, tecore_devptr_t dst) {
  int split = p && gpt_tp_split(m, p);
  size_t wr = rows, wc = cols;
  if (split) gpt_tp_whole_shape(m, p, &wr, &wc);
  float *whole = gpt_ckpt_read(ck, name, wr, wc), *h = whole;
  if (!whole) return -1;
  if (split) {
    h = gpt_xalloc(rows * cols * sizeof *h);
    gpt_tp_slice(m, p, whole, h);
  }
  GPT_CHECK(tecore_memcpy(dst, (tecore_devptr_t)(uintptr_t)h, rows * cols * 4));
  if (h != whole) free(h);
  free(whole);
  return 0;
}

/* Where p's whole F32 values go: a BF16 parameter's master, an F32 one's
 * value (its master a view of it), else (generation, or --zero 1, 2,
 * whose BF16 master is the rank's shard; --zero 3, whose values are) a
 * temporary *tmp. */
static tecore_devptr_t param_dst(const struct gpt_param *p, tecore_devptr_t *tmp) {
  int part = p->dp_sharded && (p->bf16 || p->dp_z3);
  tecore_devptr_t dst = part ? 0 : p->bf16 ? p->master : p->value;
  *tmp = 0;
  if (!dst) dst = *tmp = gpt_dalloc(p->rows * p->cols * 4, NULL);
  return dst;
}

/* From p's whole F32 values at dst: --zero's shard of them into the
 * master (--zero 3: and the BF16 value's shard), the BF16 copy as AdamW
 * writes it (nearest even, scaled by one,
 * a device float 1); *tmp freed */
static void param_round(struct gpt_param *p, tecore_devptr_t dst, tecore_devptr_t *tmp,
                        tecore_devptr_t one, tecore_stream_t s) {
  size_t n = p->rows * p->cols;
  if (p->dp_sharded && (p->bf16 || p->dp_z3) && p->dp_count)
    GPT_CHECK(tecore_memcpy(p->master, dst + p->dp_first * 4, p->dp_count * 4));
  if (p->dp_z3) {   /* --zero 3: the BF16 shard only (the passes gather it) */
    if (p->bf16 && p->dp_count) {
      struct tecore_tensor a = gpt_tensor2(TECORE_DTYPE_F32, 1, p->dp_count, p->master);
      struct tecore_tensor b = gpt_tensor2(TECORE_DTYPE_BF16, 1, p->dp_count, p->dp_value);
      GPT_CHECK(tecore_unscale_multi(&a, &b, 1, one, 0, s));
    }
  } else if (p->bf16) {
    struct tecore_tensor a = gpt_tensor2(TECORE_DTYPE_F32, 1, n, dst);
    struct tecore_tensor b = gpt_tensor2(TECORE_DTYPE_BF16, 1, n, p->value);
    GPT_CHECK(tecore_unscale_multi(&a, &b, 1, one, 0, s));
  }
  GPT_CHECK(tecore_stream_synchronize(s));
  if (*tmp) GPT_CHECK(tecore_mem_free(*tmp));
  *tmp = 0;
}

static tecore_devptr_t device_one(tecore_stream_t s) {
  tecore_devptr_t one = gpt_dalloc(4, NULL);
  GPT_CHECK(tecore_memset_d32_async(one, 0x3f800000u, 1, s));
  GPT_CHECK(tecore_stream_synchronize(s));
  return one;
}

void gpt_param_set(struct gpt_model *m, struct gpt_param *p, const float *h, tecore_stream_t s) {
  tecore_devptr_t tmp, dst = param_dst(p, &tmp), one = device_one(s);
  float *slice = NULL;
  if (gpt_tp_split(m, p)) {   /* --tp: this rank's slice of the whole h */
    slice = gpt_xalloc(p->rows * p->cols * sizeof *slice);
    gpt_tp_slice(m, p, h, slice);
    h = slice;
  }
  GPT_CHECK(tecore_memcpy(dst, (tecore_devptr_t)(uintptr_t)h, p->rows * p->cols * 4));
  free(slice);
  param_round(p, dst, &tmp, one, s);
  GPT_CHECK(tecore_mem_free(one));
}

static int load_model(const char *dir, struct gpt_model *m, tecore_stream_t s) {
  struct gpt_ckpt ck;
  if (gpt_ckpt_open(dir, "model.safetensors", &ck)) return -1;
  int rc = 0;
  tecore_devptr_t one = device_one(s);
  for (size_t i = 0; i < m->np && !rc; i++) {
    struct gpt_param *p = &m->p[i];
    tecore_devptr_t tmp, dst = param_dst(p, &tmp);
    rc = load_tensor(&ck, p->name, m, p, p->rows, p->cols, dst);
    param_round(p, dst, &tmp, one, s);
  }
  /* --tp: rank 0 holds every name (the others lack the biases of the
   * row-parallel Linears) */
  if (!rc && (m->tp.size <= 1 || m->tp.rank == 0) && ck.f.nt != m->np) {
    GPT_ERR("%s/model.safetensors holds %zu tensors, the model %zu", dir, ck.f.nt, m->np);
    rc = -1;
  }
  GPT_CHECK(tecore_mem_free(one));
  gpt_ckpt_close(&ck);
  return rc;
}

/* A moment into dst: whole, or (--zero 1, 2) this rank's shard of it,
 * so a checkpoint of any number of ranks resumes on any other. */
static int load_moment(const struct gpt_ckpt *ck, const char *name, const struct gpt_model *m,
                       const struct gpt_param *p, tecore_devptr_t dst) {
  if (!p->dp_sharded)
    return load_tensor(ck, name, m, p, p->rows, p->cols, dst);
  tecore_devptr_t tmp = gpt_dalloc(p->rows * p->cols * 4, NULL);
  int rc = load_tensor(ck, name, m, p, p->rows, p->cols, tmp);
  if (!rc && p->dp_count) GPT_CHECK(tecore_memcpy(dst, tmp + p->dp_first * 4, p->dp_count * 4));
  GPT_CHECK(tecore_mem_free(tmp));
  return rc;
}

static int load_optim(const char *dir, struct gpt_model *m, struct gpt_train *t) {
  struct gpt_ckpt ck;
  if (gpt_ckpt_open(dir, "optimizer.safetensors", &ck)) return -1;
  const struct st_file f = ck.f;
  int rc = 0;
  char name[256];
  for (size_t i = 0; i < m->np && !rc; i++) {
    struct gpt_param *p = &m->p[i];
    snprintf(name, sizeof name, "%s.exp_avg", p->name);
    rc = load_moment(&ck, name, m, p, p->m);
    snprintf(name, sizeof name, "%s.exp_avg_sq", p->name);
    rc = rc || load_moment(&ck, name, m, p, p->v);
  }
  for (int r = 0; r < 3 && !rc; r++) {
    struct tecore_delayed_state st;
    GPT_CHECK(tecore_seq_fp8_state(m->seq, (tecore_fp8_role_t)r, &st));
    snprintf(name, sizeof name, "fp8_state.%s", fp8_roles[r]);
    int have = st_find(&f, name) != NULL;
    if (have != (st.count > 0)) {
      GPT_ERR("optimizer.safetensors %s FP8 state \"%s\": the checkpoint was saved with "
              "another --recipe", have ? "has" : "lacks", name);
      rc = -1;
    } else if (have) {
      rc = load_tensor(&ck, name, m, NULL, 3 + (size_t)st.history_len,
                       st.count, st.base);
    }
  }
  const char *step = st_meta_get(&f, "step"), *rng = st_meta_get(&f, "sampler_state");
  char *e1 = NULL, *e2 = NULL;
  errno = 0;
  long long sv = step ? strtoll(step, &e1, 10) : -1;
  unsigned long long rv = rng ? strtoull(rng, &e2, 16) : 0;
  if (!rc && (!step || !*step || *e1 || sv < 0 || !rng || strlen(rng) != 16 || *e2 || errno)) {
    GPT_ERR("optimizer.safetensors: metadata \"step\" or \"sampler_state\" missing or malformed");
    rc = -1;
  }
  if (!rc) {
    t->step = sv;
    t->rng = rv;
  }
  gpt_ckpt_close(&ck);
  return rc;
}

/* The model file alone (no optimizer.safetensors: an exported model, a
 * checkpoint trimmed for sampling) samples and starts training: AdamW's
 * moments zero, the FP8 state fresh, step 0, the sampler from --seed. */
static int optim_absent(const char *dir) {
  char path[4096];
  struct stat st;
  snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
  if (stat(path, &st) == 0 || errno != ENOENT) return 0;
  fprintf(stderr, "# te-gpt: %s has no optimizer.safetensors: the model alone, AdamW starts "
          "afresh from step 0\n", dir);
  return 1;
}

int gpt_load(const char *dir, struct gpt_model *m, struct gpt_train *t, tecore_stream_t s) {
  if (load_model(dir, m, s)) return -1;
  return t && !optim_absent(dir) ? load_optim(dir, m, t) : 0;
}
