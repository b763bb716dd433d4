/* SPDX-License-Identifier: Apache-2.0
 * gpt_hf_llama.c -- Llama checkpoints in Hugging Face's names and layout
 * (LlamaForCausalLM), in (--load-hf) and out (--save-hf): te-gpt with
 * RMSNorm (epsilon 1e-5), SwiGLU, RoPE and no biases.  The mapping:
 *   tok_embeddings.weight      model.embed_tokens.weight
 *   layers.N.attn_norm.weight  model.layers.N.input_layernorm.weight
 *   layers.N.attn.qkv.weight   rows [0, H hs): q_proj, the next KV hs: k_proj,
 *                              the last KV hs: v_proj (model.layers.N.self_attn.)
 *   layers.N.attn.proj.weight  self_attn.o_proj.weight
 *   layers.N.mlp_norm.weight   post_attention_layernorm.weight
 *   layers.N.mlp.fc1.weight    rows [0, ffn): mlp.gate_proj, [ffn, 2 ffn): up_proj
 *                              (SwiGLU is silu(a) * b over [a | b], HF's
 *                              down(silu(gate(x)) * up(x)))
 *   layers.N.mlp.fc2.weight    mlp.down_proj.weight
 *   norm.weight, lm_head.weight  model.norm.weight, lm_head.weight
 * All [out][in] on both sides: no transposes.  No permutation of q and k
 * either: HF's Llama files hold q_proj and k_proj already permuted for
 * rotate_half (dimension k paired with k + hs/2, angle pos * theta^(-2k/hs)),
 * which is te-gpt's RoPE; the permutation lives in HF's conversion from
 * Meta's interleaved layout, not in these files.  lm_head.weight absent
 * (tie_word_embeddings) is embed_tokens' copy, trained untied. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "gpt_ckpt.h"

/* te-gpt's block tensor (after "layers.N.") -> HF's parts (after
 * "model.layers.N."), stacked by rows in te-gpt's */
static const struct {
  const char *te, *hf[3];
} block_names[] = {
    {"attn_norm.weight", {"input_layernorm.weight"}},
    {"attn.qkv.weight", {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                         "self_attn.v_proj.weight"}},
    {"attn.proj.weight", {"self_attn.o_proj.weight"}},
    {"mlp_norm.weight", {"post_attention_layernorm.weight"}},
    {"mlp.fc1.weight", {"mlp.gate_proj.weight", "mlp.up_proj.weight"}},
    {"mlp.fc2.weight", {"mlp.down_proj.weight"}},
};

struct parts {
  int n;
  char name[3][160];
  size_t rows[3];
};

/* the rows of each part of te-gpt's block tensor i (rows in all) */
static void part_rows(const struct gpt_config *c, size_t i, size_t rows, struct parts *p) {
  size_t hs = (size_t)(c->hidden / c->heads);
  if (p->n == 3) {
    p->rows[0] = (size_t)c->heads * hs, p->rows[1] = p->rows[2] = (size_t)c->kv_heads * hs;
  } else if (p->n == 2) {
    p->rows[0] = p->rows[1] = rows / 2;
  } else {
    p->rows[0] = rows;
  }
  (void)i;
}

/* HF's parts of te-gpt's tensor p: 0, or -1 (no counterpart) */
static int hf_parts(const struct gpt_model *m, const struct gpt_param *p, struct parts *out) {
  const struct gpt_config *c = &m->c;
  size_t rows, cols;   /* the whole tensor's (--tp) */
  gpt_tp_whole_shape(m, p, &rows, &cols);
  static const char *const top[][2] = {{"tok_embeddings.weight", "model.embed_tokens.weight"},
                                       {"norm.weight", "model.norm.weight"},
                                       {"lm_head.weight", "lm_head.weight"}};
  int layer, at = 0;
  out->n = 1, out->rows[0] = rows;
  for (size_t i = 0; i < 3; i++)
    if (!strcmp(p->name, top[i][0])) return snprintf(out->name[0], 160, "%s", top[i][1]), 0;
  if (sscanf(p->name, "layers.%d.%n", &layer, &at) != 1 || !at) return -1;
  for (size_t i = 0; i < sizeof block_names / sizeof block_names[0]; i++) {
    if (strcmp(p->name + at, block_names[i].te)) continue;
    for (out->n = 0; out->n < 3 && block_names[i].hf[out->n]; out->n++)
      snprintf(out->name[out->n], 160, "model.layers.%d.%s", layer, block_names[i].hf[out->n]);
    part_rows(c, i, rows, out);
    return 0;
  }
  return -1;
}

/* ---- config.json ---- */

/* the keys te-gpt cannot follow: refused by name */
static int check_llama(const char *t, const char *path) {
  static const char *const silu[] = {"silu"}, *const no[] = {"false"};
  const char *e = gpt_hf_json_value(t, "rms_norm_eps"), *rs = gpt_hf_json_value(t, "rope_scaling");
  if (!gpt_hf_json_is(t, "hidden_act", silu, 1, 1))
    return GPT_ERR("%s: \"hidden_act\" is not \"silu\" (SwiGLU, te-gpt's)", path), -1;
  if (e && strtod(e, NULL) != 1e-5)
    return GPT_ERR("%s: \"rms_norm_eps\" is not 1e-05, te-gpt's", path), -1;
  if (rs && strncmp(rs, "null", 4))
    return GPT_ERR("%s: \"rope_scaling\" is given: te-gpt's RoPE has no scaling", path), -1;
  for (int k = 0; k < 2; k++) {
    const char *key = k ? "mlp_bias" : "attention_bias", *v = gpt_hf_json_value(t, key);
    if (v && strncmp(v, no[0], 5))
      return GPT_ERR("%s: \"%s\" is not false: te-gpt's Llama has no biases", path, key), -1;
  }
  return 0;
}

static int llama_theta(const char *t, const char *path, struct gpt_config *c) {
  const char *v = gpt_hf_json_value(t, "rope_theta");
  char *end;
  double th = v ? strtod(v, &end) : 10000.0;
  if (v && (end == v || !(th > 1.0 && th < 1e12)))
    return GPT_ERR("%s: \"rope_theta\" is not a number in (1, 1e12)", path), -1;
  c->rope_theta = (float)th;
  return 0;
}

int gpt_hf_llama_config(const char *t, const char *path, struct gpt_config *c) {
  int seq = 0, head_dim = 0;
  int rc = check_llama(t, path) || llama_theta(t, path, c) ||
           gpt_hf_json_int(t, path, "num_hidden_layers", 1, 1024, -1, &c->layers) ||
           gpt_hf_json_int(t, path, "hidden_size", 8, 65536, -1, &c->hidden) ||
           gpt_hf_json_int(t, path, "num_attention_heads", 1, 1024, -1, &c->heads) ||
           gpt_hf_json_int(t, path, "num_key_value_heads", 1, 1024, c->heads, &c->kv_heads) ||
           gpt_hf_json_int(t, path, "intermediate_size", 1, 1 << 20, -1, &c->ffn) ||
           gpt_hf_json_int(t, path, "max_position_embeddings", 1, 1 << 24, -1, &seq) ||
           gpt_hf_json_int(t, path, "vocab_size", 256, 1 << 24, -1, &c->vocab);
  if (rc) return -1;
  rc = gpt_hf_json_int(t, path, "head_dim", 1, 1024, c->hidden / c->heads, &head_dim);
  if (!rc && (c->hidden % c->heads || head_dim != c->hidden / c->heads || head_dim % 8 ||
              head_dim > 256 || c->heads % c->kv_heads)) {
    GPT_ERR("%s: head_dim %d, hidden_size %d over %d heads, %d key/value heads: te-gpt needs "
            "hidden / heads, a multiple of 8 up to 256, and heads a multiple of the key/value "
            "heads", path, head_dim, c->hidden, c->heads, c->kv_heads);
    return -1;
  }
  /* RoPE has no table of positions: the run's --seq holds unless the
   * model's context is shorter */
  if (seq < c->seq) c->seq = seq;
  c->norm = GPT_RMSNORM, c->act = GPT_SWIGLU, c->rope = 1, c->bias = 0;
  return rc ? -1 : 0;
}

/* ---- import ---- */

/* p from the file: its parts stacked (embed_tokens' for an absent lm_head) */
static int load_param(const struct gpt_ckpt *ck, struct gpt_model *m, struct gpt_param *p,
                      tecore_stream_t s) {
  struct parts pt;
  if (hf_parts(m, p, &pt))
    return GPT_ERR("--load-hf: te-gpt's %s has no Llama counterpart", p->name), -1;
  size_t rows, cols;   /* the whole tensor's (--tp: gpt_param_set takes the slice) */
  gpt_tp_whole_shape(m, p, &rows, &cols);
  if (!strcmp(pt.name[0], "lm_head.weight") && !st_find(&ck->f, pt.name[0])) {
    snprintf(pt.name[0], sizeof pt.name[0], "model.embed_tokens.weight");   /* tied */
    fprintf(stderr, "# te-gpt: --load-hf: no lm_head.weight: the LM head starts as "
            "embed_tokens' copy (tied), and trains untied\n");
  }
  float *h = gpt_xalloc(rows * cols * sizeof *h);
  size_t row = 0;
  for (int k = 0; k < pt.n; k++) {
    float *part = gpt_ckpt_read(ck, pt.name[k], pt.rows[k], cols);
    if (!part) return free(h), -1;
    memcpy(h + row * cols, part, pt.rows[k] * cols * sizeof *h);
    row += pt.rows[k];
    free(part);
  }
  gpt_param_set(m, p, h, s);
  free(h);
  return 0;
}

int gpt_hf_llama_load(const struct gpt_ckpt *ck, struct gpt_model *m, tecore_stream_t s) {
  int rc = 0;
  for (size_t i = 0; i < m->np && !rc; i++) rc = load_param(ck, m, &m->p[i], s);
  return rc;
}

/* ---- export ---- */

static int write_config(const char *dir, const struct gpt_config *c) {
  return gpt_hf_write_config(dir, "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
          "  \"vocab_size\": %d,\n  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n"
          "  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n"
          "  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n"
          "  \"max_position_embeddings\": %d,\n  \"rms_norm_eps\": 1e-05,\n"
          "  \"rope_theta\": %.1f,\n  \"rope_scaling\": null,\n  \"hidden_act\": \"silu\",\n"
          "  \"attention_bias\": false,\n  \"mlp_bias\": false,\n"
          "  \"tie_word_embeddings\": false,\n  \"torch_dtype\": \"float32\"\n}\n",
          c->vocab, c->hidden, c->ffn, c->layers, c->heads, c->kv_heads, c->hidden / c->heads,
          c->seq, c->rope_theta > 0 ? (double)c->rope_theta : 10000.0);
}

static int fits_llama(const struct gpt_config *c) {
  if (c->norm == GPT_RMSNORM && c->act == GPT_SWIGLU && c->rope && !c->bias) return 1;
  GPT_ERR("--save-hf: Llama's layout needs --norm rmsnorm --act swiglu --rope 1 --bias 0 "
          "(GPT-2's: --norm layernorm --act gelu --rope 0 --bias 1)");
  return 0;
}

/* p's whole F32 values cut into its parts appended at t[*n], on the
 * writer (every rank takes part: gpt_param_values) */
static void add_parts(const struct gpt_model *m, const struct gpt_param *p, struct st_tensor *t,
                      size_t *n, tecore_stream_t s) {
  struct parts pt;
  size_t rows, cols;
  float *h = gpt_param_values(m, p, &rows, &cols, s);
  if (!h) return;
  hf_parts(m, p, &pt);
  size_t row = 0;
  for (int k = 0; k < pt.n; k++, (*n)++) {
    struct st_tensor *x = &t[*n];
    float *d = gpt_xalloc(pt.rows[k] * cols * sizeof *d);
    memcpy(d, h + row * cols, pt.rows[k] * cols * sizeof *d);
    row += pt.rows[k];
    snprintf(x->name, sizeof x->name, "%s", pt.name[k]);
    x->dtype = ST_F32;
    x->ndim = rows > 1 ? 2 : 1;
    x->shape[0] = rows > 1 ? pt.rows[k] : cols;
    x->shape[1] = cols;
    x->data = d;
  }
  free(h);
}

int gpt_hf_llama_save(const char *dir, struct gpt_model *m, const char *tokenizer,
                      tecore_stream_t s) {
  if (!fits_llama(&m->c)) return -1;
  int writer = gpt_ckpt_writer(m);
  if (writer && mkdir(dir, 0777) && errno != EEXIST)
    return GPT_ERR("--save-hf %s: %s", dir, strerror(errno)), -1;
  struct st_tensor *t = gpt_xalloc(3 * m->np * sizeof *t);
  size_t n = 0;
  for (size_t i = 0; i < m->np; i++) add_parts(m, &m->p[i], t, &n, s);
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
