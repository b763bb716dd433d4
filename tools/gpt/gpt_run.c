/* SPDX-License-Identifier: Apache-2.0
 * gpt_run.c -- what a te-gpt run keeps beside its tensors: the options
 * that define it ("--name=value" words, kept in its checkpoint's metadata
 * as "te-gpt.arg.N" and read back on --load, where the command line
 * overrides them), and --log, the step rows also as lines of a file. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "gpt.h"
#include "st.h"

static char *dup_word(const char *name, const char *value) {
  size_t n = strlen(name) + (value ? strlen(value) + 1 : 0) + 3;
  char *w = gpt_xalloc(n);
  snprintf(w, n, "--%s%s%s", name, value ? "=" : "", value ? value : "");
  return w;
}

void gpt_run_args_add(struct gpt_run_args *a, const char *name, const char *value) {
  if (a->n == a->cap) {
    a->cap = a->cap ? 2 * a->cap : 16;
    a->arg = realloc(a->arg, a->cap * sizeof *a->arg);
    if (!a->arg) GPT_ERR("out of host memory"), exit(1);
  }
  a->arg[a->n++] = dup_word(name, value);
}

void gpt_run_args_free(struct gpt_run_args *a) {
  for (size_t i = 0; i < a->n; i++) free(a->arg[i]);
  free(a->arg);
  memset(a, 0, sizeof *a);
}

size_t gpt_run_args_meta(const struct gpt_run_args *a, struct st_meta *meta, size_t room) {
  size_t n = 0;
  for (size_t i = 0; a && i < a->n; i++) {
    if (n == room || strlen(a->arg[i]) >= ST_MAX_VALUE) {
      GPT_ERR("--save: the run's option %zu (%.40s...) does not fit the checkpoint's metadata",
              i, a->arg[i]);
      return (size_t)-1;
    }
    snprintf(meta[n].key, ST_MAX_NAME, "te-gpt.arg.%zu", i);
    snprintf(meta[n++].value, ST_MAX_VALUE, "%s", a->arg[i]);
  }
  return n;
}

/* a stored word: an option ("--" then no control byte) */
static int word_ok(const char *v) {
  if (strncmp(v, "--", 2)) return 0;
  for (const unsigned char *p = (const unsigned char *)v; *p; p++)
    if (*p < 0x20 || *p == 0x7f) return 0;
  return 1;
}

int gpt_run_args_words(const struct st_file *f, const char *path, char ***words, int *n) {
  char key[64], b[256];
  int k = 0;
  for (;; k++) {
    snprintf(key, sizeof key, "te-gpt.arg.%d", k);
    if (!st_meta_get(f, key)) break;
  }
  char **w = gpt_xalloc(((size_t)k + 2) * sizeof *w);
  w[0] = "te-gpt";
  for (int i = 0; i < k; i++) {
    snprintf(key, sizeof key, "te-gpt.arg.%d", i);
    const char *v = st_meta_get(f, key);
    if (!word_ok(v)) {
      st_escape(v, b, sizeof b);
      GPT_ERR("%s: metadata \"%s\": \"%s\" is not an option", path, key, b);
      for (int j = 1; j <= i; j++) free(w[j]);
      return free(w), -1;
    }
    w[i + 1] = gpt_xalloc(strlen(v) + 1);
    memcpy(w[i + 1], v, strlen(v) + 1);
  }
  *words = w;
  *n = k + 1;
  return 0;
}

int gpt_log_open(struct gpt_log *l, const char *path) {
  l->f = NULL;
  if (!path) return 0;
  l->f = fopen(path, "a");
  if (!l->f) return GPT_ERR("--log %s: %m", path), -1;
  return 0;
}

void gpt_log_step(struct gpt_log *l, const struct gpt_log_row *r) {
  if (!l->f) return;
  char val[32] = "-";
  if (!isnan(r->val_loss)) snprintf(val, sizeof val, "%.4f", r->val_loss);
  fprintf(l->f, "step %lld loss %.4f val_loss %s lr %.3e grad_norm %.4f ms %.2f tokens_per_s %.0f "
          "elapsed_s %.6f eta_s %.3f\n", (long long)r->step, r->loss, val, r->lr, r->grad_norm,
          r->ms, r->tokens_per_s, r->elapsed_s, r->eta_s);
  fflush(l->f);
}

void gpt_log_close(struct gpt_log *l) {
  if (l->f) fclose(l->f);
  l->f = NULL;
}
