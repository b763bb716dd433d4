/* util.c -- libtecomm's errors (detail string, log line, libtecore result
 * mapping), its tunables, and the clock. */
#include "tc_internal.h"
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

tecomm_result_t tc_err(tecomm_result_t code, const char *file, int line, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  tecore_set_error("%s", buf);
  tecore_log(TECORE_LOG_INFO, TECORE_SUBSYS_COMM, file, line, "%s: %s",
             tecomm_result_name(code), buf);
  return code;
}

tecomm_result_t tc_core(tecore_result_t r, const char *what) {
  char buf[1024];
  snprintf(buf, sizeof buf, "%s: %s", what, tecore_last_error());
  tecore_set_error("%s", buf);
  switch (r) {
  case TECORE_SUCCESS:
    return TECOMM_SUCCESS;
  case TECORE_ERR_INVALID:
    return TECOMM_ERR_INVALID;
  case TECORE_ERR_NOMEM:
  case TECORE_ERR_DEVICE_NOMEM:
    return TECOMM_ERR_NOMEM;
  case TECORE_ERR_TIMEOUT:
    return TECOMM_ERR_TIMEOUT;
  case TECORE_ERR_NOT_SUPPORTED:
  case TECORE_ERR_DISABLED:
    return TECOMM_ERR_NOT_SUPPORTED;
  default:
    return TECOMM_ERR_DEVICE;
  }
}

int64_t tc_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- tunables ---------------------------------------------------------------
 * Registered when the library loads, so te-info -e lists them before any
 * communicator exists; each is read once, on first use. */
#define TC_PARAM_INT(var, envname, def, lo, hi, helptext)                      \
  struct tecore_tunable var = {.name = #var, .env = envname,                   \
                               .type = TECORE_TUNABLE_INT, .def_int = (def),   \
                               .min = (lo), .max = (hi), .help = helptext};
#define TC_PARAM_STR(var, envname, def, choicelist, helptext)                  \
  struct tecore_tunable var = {.name = #var, .env = envname,                   \
                               .type = TECORE_TUNABLE_STRING, .def_str = (def), \
                               .choices = (choicelist), .help = helptext};

TC_PARAM_INT(tc_tun_timeout_ms, "TECOMM_TIMEOUT", 30000, 1, 86400000,
             "milliseconds a peer may keep a device-side wait or a host exchange waiting "
             "before the call fails with TECOMM_ERR_TIMEOUT naming it")
TC_PARAM_INT(tc_tun_pool_mb, "TECOMM_POOL_MB", 256, 0, 16777216,
             "MiB of each rank's symmetric pool for tecomm_mem_alloc and staged allreduce "
             "inputs (the kernels' workspace comes on top); 0: no pool")
TC_PARAM_INT(tc_tun_max_tokens, "TECOMM_MAX_TOKENS", 64, 1, 1048576,
             "tokens (rows) the Lamport buffers are sized for: Lamport runs up to "
             "TECOMM_MAX_TOKENS x TECOMM_MAX_HIDDEN elements of 4 bytes")
TC_PARAM_INT(tc_tun_max_hidden, "TECOMM_MAX_HIDDEN", 8192, 1, 1048576,
             "hidden size the Lamport buffers are sized for (with TECOMM_MAX_TOKENS)")
TC_PARAM_STR(tc_tun_algo, "TECOMM_ALGO", "auto", "auto|oneshot|twoshot|lamport|nccl",
             "allreduce algorithm for every call that asks for auto (the selection table)")
TC_PARAM_INT(tc_tun_nccl, "TECOMM_NCCL", 1, 0, 1,
             "0: never load libnccl.so.2 (no NCCL backend, no NCCL fallback)")
TC_PARAM_INT(tc_tun_rank, "TECOMM_RANK", -1, -1, 1048575,
             "this process's rank, for the environment (TCP) bootstrap")
TC_PARAM_INT(tc_tun_nranks, "TECOMM_NRANKS", -1, -1, 1048576,
             "the number of ranks, for the environment (TCP) bootstrap")
TC_PARAM_STR(tc_tun_root, "TECOMM_ROOT", "", NULL,
             "host:port where rank 0 listens for the environment (TCP) bootstrap")
TC_PARAM_INT(tc_tun_oneshot_max_kb, "TECOMM_ONESHOT_MAX_KB", 0, 0, 1048576,
             "largest payload (KiB) the table gives to one-shot; 0: the built-in table")
TC_PARAM_INT(tc_tun_lamport_max_kb, "TECOMM_LAMPORT_MAX_KB", 0, 0, 1048576,
             "largest payload (KiB) the table gives to Lamport; 0: the built-in table")

__attribute__((constructor)) static void tc_tunables_register(void) {
  struct tecore_tunable *all[] = {&tc_tun_timeout_ms, &tc_tun_pool_mb,      &tc_tun_max_tokens,
                                  &tc_tun_max_hidden, &tc_tun_algo,         &tc_tun_nccl,
                                  &tc_tun_rank,       &tc_tun_nranks,       &tc_tun_root,
                                  &tc_tun_oneshot_max_kb, &tc_tun_lamport_max_kb};
  for (size_t i = 0; i < TC_ARRAY_SIZE(all); i++) (void)tecore_tunable_register(all[i]);
}

int64_t tc_timeout_ms(void) { return tecore_tunable_int(&tc_tun_timeout_ms); }
