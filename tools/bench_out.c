/* SPDX-License-Identifier: Apache-2.0
 * bench_out.c -- te-bench's output: the header (machine, GPU, driver,
 * toolkit) and one row per measurement with named columns, as an aligned
 * table (default), CSV (--csv: a header row of column names, then the
 * machine columns repeated in every row so that files from several
 * machines concatenate) or JSON (--json: one object, the machine fields
 * and "rows": [...]), all through the tools' output layer (out.h).  On vdev the figures are timings of the virtual
 * device's CPU threads, not GPU speed: targets are neither printed nor
 * judged there, and the header says so. */
#include "bench.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* the columns, in order (CSV header, JSON keys); the machine's are the
 * JSON document's fields, repeated in every CSV row so that files from
 * several machines concatenate */
#define MACHINE (TE_OUT_NO_TABLE | TE_OUT_NO_JSON)
static const struct te_out_col cols[] = {
    {"host", TE_OUT_STR, 0, 0, MACHINE, 0},     {"gpu", TE_OUT_STR, 0, 0, MACHINE, 0},
    {"driver", TE_OUT_STR, 0, 0, MACHINE, 0},   {"toolkit", TE_OUT_STR, 0, 0, MACHINE, 0},
    {"backend", TE_OUT_STR, 0, 0, MACHINE, 0},  {"section", TE_OUT_STR, 0, 0, TE_OUT_NO_TABLE, 0},
    {"name", TE_OUT_STR, -38, 0, 0, 0},         {"shape", TE_OUT_STR, -18, 0, 0, 0},
    {"time", TE_OUT_NUM, 10, "%.3f", 0, 0},     {"unit", TE_OUT_STR, -4, 0, 0, 0},
    {"rate", TE_OUT_NUM, 9, "%.2f", 0, 0},      {"rate_unit", TE_OUT_STR, -8, 0, 0, "unit"},
    {"peer", TE_OUT_STR, -26, 0, 0, 0},         {"peer_time", TE_OUT_NUM, 10, "%.3f", 0, 0},
    {"ratio", TE_OUT_NUM, 7, "%.3fx", 0, 0},    {"target", TE_OUT_STR, -21, 0, 0, " target"},
    {"verdict", TE_OUT_STR, -7, 0, 0, 0},       {"note", TE_OUT_STR, 0, 0, 0, 0}};
enum { NCOLS = sizeof cols / sizeof cols[0] };

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
  struct te_out *o = &c->out;
  o->tool = "te-bench";
  te_out_begin(o);
  te_out_field_s(o, "host", c->host);
  te_out_field_s(o, "gpu", c->device);
  te_out_field_s(o, "driver", c->driver);
  te_out_field_s(o, "toolkit", c->toolkit);
  te_out_field_s(o, "backend", tecore_backend_name(c->backend));
  te_out_field_b(o, "speed", c->speed);
  if (o->format == TE_OUT_TABLE) {
    printf("# te-bench %s  host %s  gpu %s  driver %s  toolkit %s  backend %s\n",
           tecore_version_string(), c->host, c->device, c->driver, c->toolkit,
           tecore_backend_name(c->backend));
    if (!c->speed)
      printf("# vdev: these are timings of the virtual device (CPU threads), not GPU speed;"
             " no targets are judged\n");
  }
  te_out_note(o, "build: %s", tecore_build_config());
  te_out_table(o, "rows", cols, NCOLS);
}

void tb_end(struct tb_ctx *c) { te_out_end(&c->out); }

void tb_info(struct tb_ctx *c, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  te_out_note(&c->out, "%s", buf);
}

void tb_progress(struct tb_ctx *c, const char *what) {
  te_out_progress(&c->out, "%s%s%s ...", c->section ? c->section : "",
                  c->section ? ": " : "", what);
}

void tb_row(struct tb_ctx *c, const struct tb_row *r) {
  if (r->time <= 0) return;
  int judged = r->target && c->speed, peer = r->peer && r->peer_time > 0;
  struct te_out_val v[NCOLS] = {
      TE_OUT_S(c->host), TE_OUT_S(c->device), TE_OUT_S(c->driver), TE_OUT_S(c->toolkit),
      TE_OUT_S(tecore_backend_name(c->backend)), TE_OUT_S(c->section ? c->section : ""),
      TE_OUT_S(r->name), TE_OUT_S(r->shape ? r->shape : ""), TE_OUT_N(r->time),
      TE_OUT_S(r->unit ? r->unit : "ms"), r->rate_unit ? TE_OUT_N(r->rate) : TE_OUT_NONE,
      TE_OUT_S(r->rate_unit ? r->rate_unit : ""), TE_OUT_S(r->peer ? r->peer : ""),
      peer ? TE_OUT_N(r->peer_time) : TE_OUT_NONE,
      peer ? TE_OUT_N(r->peer_time / r->time) : TE_OUT_NONE,
      TE_OUT_S(judged ? r->target : ""), TE_OUT_S(judged ? (r->met ? "PASS" : "MISS") : ""),
      TE_OUT_S(r->note ? r->note : "")};
  te_out_row(&c->out, v);
}
