/* SPDX-License-Identifier: Apache-2.0
 * out.c -- the tools' shared output layer (out.h): rows of named fields as
 * an aligned table, CSV or JSON; notes and progress kept off stdout where
 * a script reads it. */
#include "out.h"
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>
#include <te/core.h>

/* the document's stream */
#define F (o->f ? o->f : stdout)

static void csv_field(FILE *f, const char *s) {
  if (!strpbrk(s, ",\"\n\r")) {
    fputs(s, f);
    return;
  }
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"') fputc('"', f);
    fputc(*s, f);
  }
  fputc('"', f);
}

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; s && *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\')
      fprintf(f, "\\%c", ch);
    else if (ch < 0x20)
      fprintf(f, "\\u%04x", ch);
    else
      fputc(ch, f);
  }
  fputc('"', f);
}

/* A number for CSV and JSON: whole numbers exactly, others to 9 digits;
 * "" for none (JSON writes null). */
static void number(char *buf, size_t len, const struct te_out_val *v) {
  if (!v->set || !isfinite(v->n))
    buf[0] = '\0';
  else if (v->n == floor(v->n) && fabs(v->n) < 9007199254740992.0)
    snprintf(buf, len, "%.0f", v->n);
  else
    snprintf(buf, len, "%.9g", v->n);
}

FILE *te_out_notes(const struct te_out *o) {
  return o->format == TE_OUT_TABLE ? F : stderr;
}

void te_out_progress_clear(struct te_out *o) {
  if (!o->progress_shown) return;
  fputs("\r\033[K", stderr);
  fflush(stderr);
  o->progress_shown = 0;
}

void te_out_progress(struct te_out *o, const char *fmt, ...) {
  if (o->quiet || !isatty(STDERR_FILENO)) return;
  va_list ap;
  fprintf(stderr, "\r\033[K%s: ", o->tool);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fflush(stderr);
  o->progress_shown = 1;
}

void te_out_note(struct te_out *o, const char *fmt, ...) {
  if (o->quiet) return;
  te_out_progress_clear(o);
  FILE *f = te_out_notes(o);
  va_list ap;
  fputs("# ", f);
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fputc('\n', f);
  fflush(f);
}

void te_out_begin(struct te_out *o) {
  o->writes = 0;
  o->begun = 1;
  if (o->format != TE_OUT_JSON) return;
  fprintf(F, "{\"tool\": ");
  json_string(F, o->tool);
  fprintf(F, ", \"libte\": ");
  json_string(F, tecore_version_string());
  fflush(F);
}

static int json_key(struct te_out *o, const char *key) {
  if (o->format != TE_OUT_JSON || o->in_table || !o->begun) return 0;
  fprintf(F, ", ");
  json_string(F, key);
  fprintf(F, ": ");
  return 1;
}

void te_out_field_s(struct te_out *o, const char *key, const char *value) {
  if (json_key(o, key)) json_string(F, value ? value : "");
}

void te_out_field_n(struct te_out *o, const char *key, double value) {
  char buf[64];
  struct te_out_val v = TE_OUT_N(value);
  number(buf, sizeof buf, &v);
  if (json_key(o, key)) fputs(buf[0] ? buf : "null", F);
}

void te_out_field_b(struct te_out *o, const char *key, int value) {
  if (json_key(o, key)) fputs(value ? "true" : "false", F);
}

static int shown(const struct te_out *o, const struct te_out_col *c) {
  if (o->format == TE_OUT_TABLE) return !(c->flags & TE_OUT_NO_TABLE);
  if (o->format == TE_OUT_JSON) return !(c->flags & TE_OUT_NO_JSON);
  return 1;
}

void te_out_table(struct te_out *o, const char *name, const struct te_out_col *cols, int ncols) {
  te_out_progress_clear(o);
  o->cols = cols;
  o->ncols = ncols;
  o->nrows = 0;
  o->in_table = 1;
  /* CSV holds one table: the first */
  o->writes = o->format == TE_OUT_TABLE ? !o->own_table : o->format != TE_OUT_CSV || o->ntables == 0;
  o->ntables++;
  if (o->format == TE_OUT_JSON) {
    fprintf(F, ", ");
    json_string(F, name);
    fprintf(F, ": [");
  } else if (o->format == TE_OUT_CSV && o->writes) {
    for (int i = 0; i < ncols; i++) fprintf(F, "%s%s", i ? "," : "", cols[i].name);
    fputc('\n', F);
  } else if (o->format == TE_OUT_TABLE && o->writes && !o->no_heading) {
    char line[2048];
    size_t n = (size_t)snprintf(line, sizeof line, "%s", o->head_prefix ? o->head_prefix : "");
    for (int i = 0, first = 1; i < ncols && n < sizeof line; i++) {
      if (!shown(o, &cols[i])) continue;
      const char *t = cols[i].title ? cols[i].title : cols[i].name;
      n += (size_t)snprintf(line + n, sizeof line - n, "%s%*s", first ? "" : " ", cols[i].width, t);
      first = 0;
    }
    while (n && line[n - 1] == ' ') line[--n] = '\0';
    fprintf(F, "%s\n", line);
  }
  fflush(F);
}

/* the table's text of one field */
static void table_field(const struct te_out_col *c, const struct te_out_val *v, char *buf,
                        size_t len) {
  if (c->type == TE_OUT_STR)
    snprintf(buf, len, "%s", v->s ? v->s : "");
  else if (!v->set || !isfinite(v->n))
    snprintf(buf, len, "-");
  else if (c->type == TE_OUT_BOOL)
    snprintf(buf, len, "%s", v->n != 0 ? "yes" : "no");
  else
    snprintf(buf, len, c->fmt ? c->fmt : "%g", v->n);
}

void te_out_row(struct te_out *o, const struct te_out_val *v) {
  if (!o->in_table || !o->writes) return;
  te_out_progress_clear(o);
  char buf[512];
  if (o->format == TE_OUT_CSV) {
    for (int i = 0; i < o->ncols; i++) {
      if (i) fputc(',', F);
      if (o->cols[i].type == TE_OUT_STR)
        csv_field(F, v[i].s ? v[i].s : "");
      else if (o->cols[i].type == TE_OUT_BOOL)
        fputs(!v[i].set ? "" : v[i].n != 0 ? "true" : "false", F);
      else {
        number(buf, sizeof buf, &v[i]);
        fputs(buf, F);
      }
    }
    fputc('\n', F);
  } else if (o->format == TE_OUT_JSON) {
    fprintf(F, "%s\n  {", o->nrows ? "," : "");
    for (int i = 0, first = 1; i < o->ncols; i++) {
      if (!shown(o, &o->cols[i])) continue;
      fprintf(F, "%s", first ? "" : ", ");
      json_string(F, o->cols[i].name);
      fprintf(F, ": ");
      first = 0;
      if (o->cols[i].type == TE_OUT_STR) {
        json_string(F, v[i].s ? v[i].s : "");
        continue;
      }
      if (o->cols[i].type == TE_OUT_BOOL) {
        fputs(!v[i].set ? "null" : v[i].n != 0 ? "true" : "false", F);
        continue;
      }
      number(buf, sizeof buf, &v[i]);
      fputs(buf[0] ? buf : "null", F);
    }
    fputc('}', F);
  } else {
    char line[4096];
    size_t n = 0;
    line[0] = '\0';
    for (int i = 0, first = 1; i < o->ncols && n < sizeof line; i++) {
      if (!shown(o, &o->cols[i])) continue;
      table_field(&o->cols[i], &v[i], buf, sizeof buf);
      /* a row under a "#" heading starts one column further, as nccl-tests' do */
      const char *lead = first && o->head_prefix ? o->head_prefix : first ? "" : " ";
      n += (size_t)snprintf(line + n, sizeof line - n, "%*s%*s", (int)strlen(lead), "",
                            o->cols[i].width, buf);
      first = 0;
    }
    while (n && line[n - 1] == ' ') line[--n] = '\0';
    fprintf(F, "%s\n", line);
  }
  o->nrows++;
  fflush(F);
}

void te_out_table_end(struct te_out *o) {
  if (!o->in_table) return;
  if (o->format == TE_OUT_JSON) fprintf(F, "%s]", o->nrows ? "\n" : "");
  o->in_table = 0;
  fflush(F);
}

void te_out_take_stdout(struct te_out *o) {
  if (o->format == TE_OUT_TABLE || o->f) return;
  fflush(stdout);
  int fd = dup(STDOUT_FILENO);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f) return; /* the document then shares stdout with the prose */
  o->f = f;
  dup2(STDERR_FILENO, STDOUT_FILENO);
}

void te_out_end(struct te_out *o) {
  te_out_progress_clear(o);
  te_out_table_end(o);
  if (o->format == TE_OUT_JSON && o->begun) fprintf(F, "}\n");
  o->begun = 0;
  fflush(F);
}
