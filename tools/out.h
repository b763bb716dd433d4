/* SPDX-License-Identifier: Apache-2.0
 * out.h -- the output layer every te-* tool shares, so that scripts read
 * them alike: rows of named fields, printed as an aligned table (the
 * default, for people), as CSV (--csv: one header row of column names,
 * then one row per record, every row with as many fields as the header)
 * or as JSON (--json: one object, {"tool": "te-x", "libte": "0.2.0",
 * document fields..., "<table>": [{row}, ...], ...}).
 *
 * In CSV and JSON modes stdout carries the document and nothing else:
 * notes (te_out_note) and progress (te_out_progress) go to stderr.  CSV
 * holds one table, the first the tool opens; later tables and document
 * fields are JSON's alone (the tool's man page says which table CSV has).
 *
 * Use:
 *   struct te_out out = {.tool = "te-x"};   (cli.out = &out: --csv/--json)
 *   te_out_begin(&out);
 *   te_out_field_s(&out, "host", host);
 *   te_out_table(&out, "rows", cols, ncols);
 *   te_out_row(&out, (struct te_out_val[]){TE_OUT_S("a"), TE_OUT_N(1.5)});
 *   te_out_table_end(&out);
 *   te_out_end(&out);
 * A number that is not there (TE_OUT_NONE) is empty in CSV, null in JSON
 * and "-" in the table. */
#ifndef TE_TOOLS_OUT_H
#define TE_TOOLS_OUT_H

#include <stdio.h>

enum te_out_format { TE_OUT_TABLE, TE_OUT_CSV, TE_OUT_JSON };
enum te_out_type { TE_OUT_STR, TE_OUT_NUM, TE_OUT_BOOL };

/* where a column appears (te_out_col.flags) */
#define TE_OUT_NO_TABLE 1u /* CSV and JSON only (a machine field in every row) */
#define TE_OUT_NO_JSON 2u  /* not in JSON rows (the document has it once) */

struct te_out_col {
  const char *name;      /* CSV header and JSON key */
  enum te_out_type type; /* JSON writes numbers and booleans bare */
  int width;             /* the table's field width; < 0: left-aligned */
  const char *fmt;       /* the table's printf format of a number ("%.3f"); NULL: "%g" */
  unsigned flags;        /* TE_OUT_NO_TABLE, TE_OUT_NO_JSON */
  const char *title;     /* the table's heading; NULL: name */
};

/* One field of a row: a string, or a number (set: it is there). */
struct te_out_val {
  const char *s;
  double n;
  int set;
};
#define TE_OUT_S(str) ((struct te_out_val){.s = (str)})
#define TE_OUT_N(num) ((struct te_out_val){.n = (double)(num), .set = 1})
#define TE_OUT_NONE ((struct te_out_val){.s = 0})

struct te_out {
  const char *tool;          /* "te-bench" */
  enum te_out_format format; /* set by te_cli_next for --csv / --json */
  int quiet;                 /* no notes, no progress */
  const char *head_prefix;   /* the table's heading line starts with it ("#"); NULL: "" */
  int no_heading;            /* the table: no heading line */
  int own_table;             /* the tool prints its own prose for people: in the table
                              * mode the layer writes no heading and no rows */
  FILE *f;                   /* the document's stream; NULL: stdout */
  /* the layer's own state */
  const struct te_out_col *cols;
  int ncols, nrows, ntables, in_table, writes, progress_shown, begun;
};

/* The JSON document's opening ({"tool": ..., "libte": ...}); nothing else. */
void te_out_begin(struct te_out *o);
/* Fields of the JSON document, outside tables (CSV and the table: nothing). */
void te_out_field_s(struct te_out *o, const char *key, const char *value);
void te_out_field_n(struct te_out *o, const char *key, double value);
void te_out_field_b(struct te_out *o, const char *key, int value);
/* A table of rows named name (the JSON key): its heading (table), its
 * header row (CSV, first table only).  The columns outlive the table. */
void te_out_table(struct te_out *o, const char *name, const struct te_out_col *cols, int ncols);
/* One row: ncols values in the columns' order. */
void te_out_row(struct te_out *o, const struct te_out_val *v);
void te_out_table_end(struct te_out *o);
/* Closes the JSON document; flushes stdout. */
void te_out_end(struct te_out *o);
/* A note for people ("# ..." in the table on stdout; on stderr in CSV and
 * JSON modes); none under quiet. */
void te_out_note(struct te_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Progress of a long run ("te-x: ..." over the previous one) on stderr,
 * only when stderr is a terminal and not quiet; te_out_progress_clear
 * erases it (rows, notes and te_out_end clear it first). */
void te_out_progress(struct te_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void te_out_progress_clear(struct te_out *o);
/* For a tool whose prose goes to stdout everywhere (printf): in CSV and
 * JSON modes, the document keeps the real stdout (o->f) and file
 * descriptor 1 becomes stderr's, so that every other line goes there. */
void te_out_take_stdout(struct te_out *o);
/* The stream that carries notes and diagnostics in o's mode. */
FILE *te_out_notes(const struct te_out *o);

#endif
