/* SPDX-License-Identifier: Apache-2.0
 * gpt_hf.c -- GPT-2 checkpoints in Hugging Face's names and layout, in
 * (--load-hf DIR) and out (--save-hf DIR): DIR/config.json and
 * DIR/model.safetensors of GPT2LMHeadModel.  GPT-2 is te-gpt with
 * LayerNorm (epsilon 1e-5), GELU's tanh form ("gelu_new"), learned
 * positions, biases and kv_heads = heads; its Linears are Conv1D, whose
 * weights are stored [in][out], so every block weight is transposed on
 * the way (te-gpt's are nn.Linear's [out][in]); c_attn's output columns
 * are the query heads, the key heads, the value heads, as te-gpt's qkv
 * rows are.  The names come with or without "transformer."; lm_head.weight
 * absent (tie_word_embeddings) is wte's copy, trained untied from there.
 * The model file alone: training starts afresh (step 0).  Llama's layout
 * (model_type "llama", a model with RoPE): gpt_hf_llama.c. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "gpt_ckpt.h"

/* te-gpt's name (after "layers.N.") -> GPT-2's (after "h.N."), and
 * whether the tensor is a Conv1D weight (transposed) */
static const struct {
  const char *te, *hf;
  int conv;
} block_names[] = {
    {"attn_norm.weight", "ln_1.weight", 0}, {"attn_norm.bias", "ln_1.bias", 0},
    {"attn.qkv.weight", "attn.c_attn.weight", 1}, {"attn.qkv.bias", "attn.c_attn.bias", 0},
    {"attn.proj.weight", "attn.c_proj.weight", 1}, {"attn.proj.bias", "attn.c_proj.bias", 0},
    {"mlp_norm.weight", "ln_2.weight", 0}, {"mlp_norm.bias", "ln_2.bias", 0},
    {"mlp.fc1.weight", "mlp.c_fc.weight", 1}, {"mlp.fc1.bias", "mlp.c_fc.bias", 0},
    {"mlp.fc2.weight", "mlp.c_proj.weight", 1}, {"mlp.fc2.bias", "mlp.c_proj.bias", 0},
};
static const struct {
  const char *te, *hf;
} top_names[] = {{"tok_embeddings.weight", "wte.weight"}, {"pos_embeddings.weight", "wpe.weight"},
                 {"norm.weight", "ln_f.weight"}, {"norm.bias", "ln_f.bias"}};

/* GPT-2's name of te-gpt's tensor te (prefix before the transformer's
 * names; lm_head.weight has none) into hf; *conv: transposed.  -1: none. */
static int hf_name(const char *te, const char *prefix, char *hf, size_t n, int *conv) {
  int layer, at = 0;
  *conv = 0;
  if (!strcmp(te, "lm_head.weight")) return snprintf(hf, n, "lm_head.weight"), 0;
  for (size_t i = 0; i < sizeof top_names / sizeof top_names[0]; i++)
    if (!strcmp(te, top_names[i].te)) return snprintf(hf, n, "%s%s", prefix, top_names[i].hf), 0;
  if (sscanf(te, "layers.%d.%n", &layer, &at) != 1 || !at) return -1;
  for (size_t i = 0; i < sizeof block_names / sizeof block_names[0]; i++)
    if (!strcmp(te + at, block_names[i].te)) {
      *conv = block_names[i].conv;
      return snprintf(hf, n, "%sh.%d.%s", prefix, layer, block_names[i].hf), 0;
    }
  return -1;
}

/* ---- config.json: the few keys GPT-2's config gives, read as untrusted
 * text (at most 1 MiB; a key's value is found after its quoted name) ---- */

static char *read_text(const char *path, size_t max) {
  uint64_t size;
  int fd = gpt_open_regular(path, &size);
  if (fd < 0) return NULL;
  if (size > max) {
    GPT_ERR("%s: %llu bytes, more than a config holds (%zu)", path, (unsigned long long)size, max);
    return close(fd), NULL;
  }
  char *t = gpt_xalloc((size_t)size + 1);
  int rc = gpt_read_at(fd, 0, t, (size_t)size, path);
  close(fd);
  if (rc || memchr(t, 0, (size_t)size)) {
    if (!rc) GPT_ERR("%s: a NUL byte: not JSON text", path);
    return free(t), NULL;
  }
  return t;
}

/* the value after "key": in text, or NULL */
const char *gpt_hf_json_value(const char *text, const char *key) {
  char q[96];
  snprintf(q, sizeof q, "\"%s\"", key);
  for (const char *p = strstr(text, q); p; p = strstr(p + 1, q)) {
    const char *v = p + strlen(q);
    while (*v == ' ' || *v == '\t' || *v == '\n' || *v == '\r') v++;
    if (*v != ':') continue;
    for (v++; *v == ' ' || *v == '\t' || *v == '\n' || *v == '\r'; v++) {}
    return v;
  }
  return NULL;
}

/* an integer key in [lo, hi]; def when absent or null (def < 0: required) */
int gpt_hf_json_int(const char *text, const char *path, const char *key, long lo, long hi,
                    long def, int *out) {
  const char *v = gpt_hf_json_value(text, key);
  if (!v || !strncmp(v, "null", 4)) {
    if (def >= 0) return *out = (int)def, 0;
    return GPT_ERR("%s: no \"%s\"", path, key), -1;
  }
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (end == v || errno || x < lo || x > hi || *end == '.' || *end == 'e' || *end == 'E')
    return GPT_ERR("%s: \"%s\" is not an integer in %ld..%ld", path, key, lo, hi), -1;
  *out = (int)x;
  return 0;
}

/* a string key's value is want (one of n), absent: def */
int gpt_hf_json_is(const char *text, const char *key, const char *const *want, int n, int def) {
  const char *v = gpt_hf_json_value(text, key);
  if (!v) return def;
  for (int i = 0; i < n; i++) {
    size_t k = strlen(want[i]);
    if (v[0] == '"' && !strncmp(v + 1, want[i], k) && v[k + 1] == '"') return 1;
  }
  return 0;
}

static int check_gpt2(const char *text, const char *path) {
  static const char *const gpt2[] = {"gpt2"}, *const tanh_gelu[] = {"gelu_new",
                                                                    "gelu_pytorch_tanh"};
  if (!gpt_hf_json_is(text, "model_type", gpt2, 1, 0))
    return GPT_ERR("%s: \"model_type\" is not \"gpt2\" or \"llama\": te-gpt reads those "
                   "layouts only", path), -1;
  if (!gpt_hf_json_is(text, "activation_function", tanh_gelu, 2, 1))
    return GPT_ERR("%s: \"activation_function\" is not GELU's tanh form (gelu_new), te-gpt's",
                   path), -1;
  const char *e = gpt_hf_json_value(text, "layer_norm_epsilon");
  if (e && strtod(e, NULL) != 1e-5)
    return GPT_ERR("%s: \"layer_norm_epsilon\" is not 1e-05, te-gpt's", path), -1;
  return 0;
}

int gpt_hf_config(const char *dir, struct gpt_config *c) {
  char path[4200];
  snprintf(path, sizeof path, "%s/config.json", dir);
  char *t = read_text(path, 1 << 20);
  if (!t) return -1;
  static const char *const llama[] = {"llama"};
  if (gpt_hf_json_is(t, "model_type", llama, 1, 0)) {
    int rc = gpt_hf_llama_config(t, path, c);
    return free(t), rc;
  }
  int rc = check_gpt2(t, path) || gpt_hf_json_int(t, path, "n_layer", 1, 1024, -1, &c->layers) ||
           gpt_hf_json_int(t, path, "n_embd", 8, 65536, -1, &c->hidden) ||
           gpt_hf_json_int(t, path, "n_head", 1, 1024, -1, &c->heads) ||
           gpt_hf_json_int(t, path, "n_positions", 1, 1 << 20, -1, &c->seq) ||
           gpt_hf_json_int(t, path, "vocab_size", 256, 1 << 24, -1, &c->vocab);
  if (!rc && (c->hidden % c->heads || (c->hidden / c->heads) % 8 || c->hidden / c->heads > 256)) {
    GPT_ERR("%s: head size n_embd / n_head = %d / %d: te-gpt needs a multiple of 8, at most 256",
            path, c->hidden, c->heads);
    rc = 1;
  }
  rc = rc || gpt_hf_json_int(t, path, "n_inner", 1, 1 << 20, 4L * c->hidden, &c->ffn);
  free(t);
  c->kv_heads = c->heads;
  c->norm = GPT_LAYERNORM, c->act = GPT_GELU, c->rope = 0, c->bias = 1;
  return rc ? -1 : 0;
}

/* ---- import ---- */

/* src [rows][cols] as [cols][rows], a new array */
static float *transposed(const float *src, size_t rows, size_t cols) {
  float *t = gpt_xalloc(rows * cols * sizeof *t);
  for (size_t r = 0; r < rows; r++)
    for (size_t c = 0; c < cols; c++) t[c * rows + r] = src[r * cols + c];
  return t;
}

/* p from the file: its GPT-2 tensor (wte's for an absent lm_head) */
static int load_param(const struct gpt_ckpt *ck, const char *prefix, struct gpt_model *m,
                      struct gpt_param *p, tecore_stream_t s) {
  char hf[256];
  int conv;
  if (hf_name(p->name, prefix, hf, sizeof hf, &conv))
    return GPT_ERR("--load-hf: te-gpt's %s has no GPT-2 counterpart", p->name), -1;
  if (!strcmp(hf, "lm_head.weight") && !st_find(&ck->f, hf)) {
    snprintf(hf, sizeof hf, "%swte.weight", prefix);   /* tied */
    fprintf(stderr, "# te-gpt: --load-hf: no lm_head.weight: the LM head starts as wte's "
            "copy (tied), and trains untied\n");
  }
  size_t rows, cols;   /* the whole tensor's (--tp: gpt_param_set takes the slice) */
  gpt_tp_whole_shape(m, p, &rows, &cols);
  float *h = conv ? gpt_ckpt_read(ck, hf, cols, rows) : gpt_ckpt_read(ck, hf, rows, cols);
  if (!h) return -1;
  if (conv) {
    float *t = transposed(h, cols, rows);
    free(h);
    h = t;
  }
  gpt_param_set(m, p, h, s);
  free(h);
  return 0;
}

int gpt_hf_load(const char *dir, struct gpt_model *m, tecore_stream_t s) {
  struct gpt_ckpt ck;
  if (gpt_ckpt_open(dir, "model.safetensors", &ck)) return -1;
  if (m->c.rope) {   /* a llama config.json (gpt_hf_config) */
    int rc = gpt_hf_llama_load(&ck, m, s);
    return gpt_ckpt_close(&ck), rc;
  }
  const char *prefix = st_find(&ck.f, "transformer.wte.weight") ? "transformer." : "";
  int rc = 0;
  for (size_t i = 0; i < m->np && !rc; i++) rc = load_param(&ck, prefix, m, &m->p[i], s);
  gpt_ckpt_close(&ck);
  return rc;
}

/* ---- export ---- */

static int fits_gpt2(const struct gpt_config *c) {
  if (c->norm == GPT_LAYERNORM && c->act == GPT_GELU && !c->rope && c->bias &&
      c->kv_heads == c->heads)
    return 1;
  GPT_ERR("--save-hf: GPT-2's layout needs --norm layernorm --act gelu --rope 0 --bias 1 and "
          "--kv-heads equal to --heads");
  return 0;
}

int gpt_hf_write_config(const char *dir, const char *fmt, ...) {
  char path[4200];
  snprintf(path, sizeof path, "%s/config.json", dir);
  FILE *f = fopen(path, "w");
  if (!f) return GPT_ERR("--save-hf %s: %s", path, strerror(errno)), -1;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  if (fclose(f)) return GPT_ERR("--save-hf %s: %s", path, strerror(errno)), -1;
  return 0;
}

static int write_config(const char *dir, const struct gpt_config *c) {
  return gpt_hf_write_config(dir, "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
          "  \"vocab_size\": %d,\n  \"n_positions\": %d,\n  \"n_ctx\": %d,\n  \"n_embd\": %d,\n"
          "  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_inner\": %d,\n"
          "  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": 1e-05,\n"
          "  \"scale_attn_weights\": true,\n  \"tie_word_embeddings\": false,\n"
          "  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n"
          "  \"torch_dtype\": \"float32\"\n}\n", c->vocab, c->seq, c->seq, c->hidden, c->layers,
          c->heads, c->ffn);
}

/* p as t (its whole F32 values in GPT-2's layout) on the writer: 1, else
 * 0 (every rank takes part: gpt_param_values) */
static int hf_tensor(const struct gpt_model *m, const struct gpt_param *p, struct st_tensor *t,
                     tecore_stream_t s) {
  size_t rows, cols;
  int conv;
  float *h = gpt_param_values(m, p, &rows, &cols, s);
  if (!h) return 0;
  hf_name(p->name, "transformer.", t->name, sizeof t->name, &conv);
  t->dtype = ST_F32;
  t->ndim = rows > 1 ? 2 : 1;
  t->shape[0] = rows > 1 ? (conv ? cols : rows) : cols;
  t->shape[1] = conv ? rows : cols;
  t->data = h;
  if (conv) t->data = transposed(h, rows, cols), free(h);
  return 1;
}

int gpt_hf_finish(const char *dir, const char *tokenizer) {
  const char *name;
  return tokenizer ? gpt_tok_copy(tokenizer, dir, &name) : 0;
}

int gpt_hf_save(const char *dir, struct gpt_model *m, const char *tokenizer, tecore_stream_t s) {
  if (m->c.rope) return gpt_hf_llama_save(dir, m, tokenizer, s);
  if (!fits_gpt2(&m->c)) return -1;
  int writer = gpt_ckpt_writer(m);
  if (writer && mkdir(dir, 0777) && errno != EEXIST)
    return GPT_ERR("--save-hf %s: %s", dir, strerror(errno)), -1;
  /* lm_head last (m->p's last): a file a tied model's is a prefix of */
  struct st_tensor *t = gpt_xalloc(m->np * sizeof *t);
  size_t n = 0;
  for (size_t i = 0; i < m->np; i++) n += (size_t)hf_tensor(m, &m->p[i], &t[n], s);
  if (!writer) return free(t), 0;
  struct st_meta meta = {.key = "format", .value = "pt"};
  char path[4200], err[512];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  int rc = st_write(path, t, n, &meta, 1, err, sizeof err);
  if (rc) GPT_ERR("--save-hf: %s", err);
  for (size_t i = 0; i < n; i++) free((void *)t[i].data);
  free(t);
  return rc || write_config(dir, &m->c) ? -1 : gpt_hf_finish(dir, tokenizer);
}
