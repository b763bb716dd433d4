/* SPDX-License-Identifier: Apache-2.0
 * bench_out.c -- te-bench's output: the header (machine, GPU, driver,
 * toolkit) and one row per measurement with named columns, as an aligned
 * table (default), CSV (--csv: a header row of column names, then the
 * machine columns repeated in every row so that files from several
 * machines concatenate) or JSON (--json: one object, the machine fields
 * and "rows": [...]).  On vdev the figures are timings of the virtual
 * device's CPU threads, not GPU speed: targets are neither printed nor
 * judged there, and the header says so. */
#include "bench.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* the columns, in order (CSV header, JSON keys) */
static const char *const cols[] = {"host", "gpu", "driver", "toolkit", "backend", "section",
                                   "name", "shape", "time", "unit", "rate", "rate_unit", "peer",
                                   "peer_time", "ratio", "target", "verdict", "note"};
enum { NCOLS = sizeof cols / sizeof cols[0] };

static void csv_field(const char *s) {
  if (!strpbrk(s, ",\"\n")) {
    fputs(s, stdout);
    return;
  }
  putchar('"');
  for (; *s; s++) {
    if (*s == '"') putchar('"');
    putchar(*s);
  }
  putchar('"');
}

static void json_string(const char *s) {
  putchar('"');
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\')
      printf("\\%c", ch);
    else if (ch < 0x20)
      printf("\\u%04x", ch);
    else
      putchar(ch);
  }
  putchar('"');
}

/* "13.0" from the driver's 13000; "none" for 0 */
static void cuda_version(char *buf, size_t len, int v) {
  if (v <= 0)
    snprintf(buf, len, "none");
  else
    snprintf(buf, len, "%d.%d", v / 1000, (v % 1000) / 10);
}

void tb_begin(struct tb_ctx *c) {
  struct tecore_device_props p;
  int drv = 0;
  if (gethostname(c->host, sizeof c->host) != 0) snprintf(c->host, sizeof c->host, "?");
  c->host[sizeof c->host - 1] = '\0';
  snprintf(c->device, sizeof c->device, "%s",
           tecore_device_get_props(0, &p) == TECORE_SUCCESS ? p.name : "?");
  tecore_driver_version(&drv);
  cuda_version(c->driver, sizeof c->driver, c->backend == TECORE_BACKEND_CUDA ? drv : 0);
  const char *tk = strstr(tecore_build_config(), "toolkit=");
  cuda_version(c->toolkit, sizeof c->toolkit, tk ? atoi(tk + 8) : 0);
  c->speed = c->backend == TECORE_BACKEND_CUDA;
  if (c->format == TB_CSV) {
    for (int i = 0; i < NCOLS; i++) printf("%s%s", i ? "," : "", cols[i]);
    printf("\n");
  } else if (c->format == TB_JSON) {
    printf("{\"tool\": \"te-bench\", \"libte\": ");
    json_string(tecore_version_string());
    printf(", \"host\": ");
    json_string(c->host);
    printf(", \"gpu\": ");
    json_string(c->device);
    printf(", \"driver\": ");
    json_string(c->driver);
    printf(", \"toolkit\": ");
    json_string(c->toolkit);
    printf(", \"backend\": ");
    json_string(tecore_backend_name(c->backend));
    printf(", \"speed\": %s, \"rows\": [", c->speed ? "true" : "false");
  } else {
    printf("# te-bench %s  host %s  gpu %s  driver %s  toolkit %s  backend %s\n",
           tecore_version_string(), c->host, c->device, c->driver, c->toolkit,
           tecore_backend_name(c->backend));
    if (!c->speed)
      printf("# vdev: these are timings of the virtual device (CPU threads), not GPU speed;"
             " no targets are judged\n");
    if (!c->quiet) printf("# build: %s\n", tecore_build_config());
    printf("%-38s %-18s %10s %-4s %9s %-8s %-26s %10s %7s  %-20s %-7s %s\n", "name", "shape",
           "time", "unit", "rate", "unit", "peer", "peer_time", "ratio", "target", "verdict",
           "note");
  }
  fflush(stdout);
}

void tb_end(struct tb_ctx *c) {
  if (c->format == TB_JSON) printf("%s]}\n", c->nrows ? "\n" : "");
  fflush(stdout);
}

void tb_info(struct tb_ctx *c, const char *fmt, ...) {
  if (c->quiet || c->format != TB_TEXT) return;
  va_list ap;
  printf("# ");
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  fflush(stdout);
}

void tb_row(struct tb_ctx *c, const struct tb_row *r) {
  if (r->time <= 0) return;
  char v[NCOLS][160];
  const char *unit = r->unit ? r->unit : "ms";
  int judged = r->target && c->speed;
  snprintf(v[0], sizeof v[0], "%s", c->host);
  snprintf(v[1], sizeof v[1], "%s", c->device);
  snprintf(v[2], sizeof v[2], "%s", c->driver);
  snprintf(v[3], sizeof v[3], "%s", c->toolkit);
  snprintf(v[4], sizeof v[4], "%s", tecore_backend_name(c->backend));
  snprintf(v[5], sizeof v[5], "%s", c->section ? c->section : "");
  snprintf(v[6], sizeof v[6], "%s", r->name);
  snprintf(v[7], sizeof v[7], "%s", r->shape ? r->shape : "");
  snprintf(v[8], sizeof v[8], "%.6g", r->time);
  snprintf(v[9], sizeof v[9], "%s", unit);
  v[10][0] = '\0';
  if (r->rate_unit) snprintf(v[10], sizeof v[10], "%.6g", r->rate);
  snprintf(v[11], sizeof v[11], "%s", r->rate_unit ? r->rate_unit : "");
  snprintf(v[12], sizeof v[12], "%s", r->peer ? r->peer : "");
  snprintf(v[13], sizeof v[13], "%s", "");
  snprintf(v[14], sizeof v[14], "%s", "");
  if (r->peer && r->peer_time > 0) {
    snprintf(v[13], sizeof v[13], "%.6g", r->peer_time);
    snprintf(v[14], sizeof v[14], "%.4g", r->peer_time / r->time);
  }
  snprintf(v[15], sizeof v[15], "%s", judged ? r->target : "");
  snprintf(v[16], sizeof v[16], "%s", judged ? (r->met ? "PASS" : "MISS") : "");
  snprintf(v[17], sizeof v[17], "%s", r->note ? r->note : "");
  if (c->format == TB_CSV) {
    for (int i = 0; i < NCOLS; i++) {
      if (i) putchar(',');
      csv_field(v[i]);
    }
    putchar('\n');
  } else if (c->format == TB_JSON) {
    printf("%s\n  {", c->nrows ? "," : "");
    /* the machine fields are the document's; numbers stay numbers */
    for (int i = 5, first = 1; i < NCOLS; i++, first = 0) {
      printf("%s\"%s\": ", first ? "" : ", ", cols[i]);
      int num = (i == 8 || i == 10 || i == 13 || i == 14);
      if (num && v[i][0])
        fputs(v[i], stdout);
      else if (num)
        fputs("null", stdout);
      else
        json_string(v[i]);
    }
    putchar('}');
  } else {
    /* the table: fixed decimals, so that columns line up */
    char line[1024];
    if (r->rate_unit) snprintf(v[10], sizeof v[10], "%.2f", r->rate);
    if (r->peer && r->peer_time > 0) {
      snprintf(v[13], sizeof v[13], "%.3f", r->peer_time);
      snprintf(v[14], sizeof v[14], "%.3fx", r->peer_time / r->time);
    }
    snprintf(line, sizeof line, "%-38s %-18s %10.3f %-4s %9s %-8s %-26s %10s %7s  %-20s %-7s %s",
             v[6], v[7], r->time, v[9], v[10], v[11], v[12], v[13], v[14], v[15], v[16], v[17]);
    size_t n = strlen(line);
    while (n && line[n - 1] == ' ') line[--n] = '\0';
    puts(line);
  }
  c->nrows++;
  fflush(stdout);
}
