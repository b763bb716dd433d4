/* SPDX-License-Identifier: Apache-2.0 */
/* util.c -- libtecomm's errors (detail string, log line, libtecore result
 * conversion; common/te_upper.h and common/te_results.h do the work), its timeout, the clock, and
 * whether a stream captures. */
#include "comm_priv.h"
#include "algos.h"
#include "te_results.h"
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

tecomm_result_t tc_err(tecomm_result_t code, const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  te_upper_verr(TECORE_SUBSYS_COMM, tecomm_result_name(code), file, line, fmt, ap);
  va_end(ap);
  return code;
}

tecomm_result_t tc_core(tecore_result_t r, const char *what) {
  te_upper_core_detail(r, what);
  return (tecomm_result_t)te_result_to_comm((int)r);
}

int64_t tc_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Each tunable is defined in the file that reads it; this one is read
 * wherever a wait is bounded. */
TECORE_TUNABLE_INT(tc_tun_timeout_ms, "TECOMM_TIMEOUT", 30000, 1, 86400000,
                   "milliseconds a peer may keep a device-side wait or a host exchange waiting "
                   "before the call fails with TECOMM_ERR_TIMEOUT naming it")

int64_t tc_timeout_ms(void) { return tecore_tunable_int(&tc_tun_timeout_ms); }

uint64_t tc_machine_id(void) {
  static uint64_t h;
  uint64_t v = __atomic_load_n(&h, __ATOMIC_ACQUIRE);
  if (v) return v;
  char id[64] = "";
  int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t n = read(fd, id, sizeof id - 1);
    if (n > 0) id[n] = '\0';
    close(fd);
  }
  v = 0xcbf29ce484222325ull; /* FNV-1a */
  for (const char *p = id; *p; p++) v = (v ^ (unsigned char)*p) * 0x100000001b3ull;
  if (!v) v = 1;
  __atomic_store_n(&h, v, __ATOMIC_RELEASE);
  return v;
}

int tc_capturing(tecore_stream_t stream) {
  tecore_capture_status_t st = TECORE_CAPTURE_NONE;
  if (tecore_stream_capture_status(stream, &st) != TECORE_SUCCESS) return 0;
  return st != TECORE_CAPTURE_NONE;
}

const char *tc_level_name(tc_level_t l) {
#define TC_PLACE_NAME_(place, text) \
  case TC_LEVEL_##place:            \
    return text;
#define TC_LV_PLACE_NAME_(id, name, places) places(TC_PLACE_NAME_)
  switch (l) {
    TC_LEVELS(TC_LV_PLACE_NAME_)
  default:
    return "none";
  }
}

void tc_put(struct tc_text *t, const char *fmt, ...) {
  if (t->len >= t->cap) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
  va_end(ap);
  if (n > 0) t->len = t->len + (size_t)n < t->cap ? t->len + (size_t)n : t->cap - 1;
}

TE_EXPORT const char *tecomm_algo_name(tecomm_algo_t algo) {
  const char *n = tc_algo_name(algo);
  return n ? n : "unknown";
}

TE_EXPORT tecomm_result_t tecomm_algo_parse(const char *name, tecomm_algo_t *algo) {
  TC_ARG(name, "tecomm_algo_parse: name is NULL");
  TC_ARG(algo, "tecomm_algo_parse: algo is NULL");
  int i = tc_algo_by_name(name);
  if (i < 0)
    return TC_ERR(TECOMM_ERR_INVALID, "tecomm_algo_parse: name \"%s\" is not one of %s", name,
                  TC_ALGO_CHOICES);
  *algo = (tecomm_algo_t)i;
  return TECOMM_SUCCESS;
}
