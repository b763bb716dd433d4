/* SPDX-License-Identifier: Apache-2.0 */
/* te-info -- what libte was built with and what it sees: version, build
 * configuration, optional parts, the backend and each device with its
 * properties (GPUDirect RDMA among them: whether an RDMA NIC could reach
 * its memory), the peer/NVLink matrix for several GPUs; -e lists every
 * tunable with its default, current value and help.  --json and --csv
 * write the same for scripts (info_doc.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <te/comm.h>
#include <te/core.h>
#include <te/graph.h>
#include "cli.h"
#include "info.h"
#include "out.h"

static const char usage_text[] =
    "usage: te-info [-e] [--csv | --json] [-v] [-q] [-h] [--version]\n"
    "  (none)          version, build configuration, backend and devices\n"
    "  -e, --tunables  list every tunable: variable, default, current value, help\n"
    "  --json          one JSON object: build, backends, devices, peers, loaded\n"
    "                  libraries and tunables (with -e: the tunables alone)\n"
    "  --csv           CSV: one row per device (with -e: one row per tunable)\n"
    "  -v              print the version number only\n"
    "  --version       print \"te-info (libte) VERSION\"\n"
    "  -q, --quiet     print nothing (but the --csv or --json document): the exit\n"
    "                  status says whether a backend works\n"
    "  -h, --help      this help\n"
    "exit status: 0 ok, 1 no usable backend (or a failure), 2 a wrong command line\n";

/* 1 for a tunable whose value is a secret (TECOMM_SECRET). */
static int secret(const char *env) {
  size_t n = strlen(env);
  return n >= 7 && strcmp(env + n - 7, "_SECRET") == 0;
}

static int list_tunables(void) {
  int n = 0;
  if (tecore_tunable_count(&n) != TECORE_SUCCESS) return 1;
  printf("%d tunables (set them in the environment; read once per process)\n\n", n);
  for (int i = 0; i < n; i++) {
    struct tecore_tunable_info t;
    if (tecore_tunable_get_info(i, &t) != TECORE_SUCCESS) return 1;
    if (t.type == TECORE_TUNABLE_INT)
      printf("%-28s default %lld, range [%lld, %lld], now %lld%s\n", t.env, (long long)t.def_int,
             (long long)t.min, (long long)t.max, (long long)t.value_int,
             t.set_in_env ? " (set)" : "");
    else if (secret(t.env)) /* never printed: logs and bug reports keep it */
      printf("%-28s default \"\", now %s\n", t.env, t.set_in_env ? "(set, not shown)" : "\"\"");
    else
      printf("%-28s default \"%s\"%s%s, now \"%s\"%s\n", t.env, t.def_str,
             t.choices ? ", one of " : "", t.choices ? t.choices : "", t.value_str,
             t.set_in_env ? " (set)" : "");
    printf("    %s\n", t.help);
    if (t.old_env)
      printf("    (formerly %s: deprecated, still read for one release)\n", t.old_env);
  }
  return 0;
}

static void print_build(void) {
  int ma, mi, pa;
  tecore_version(&ma, &mi, &pa);
  printf("libte %d.%d.%d (headers %s)\n", ma, mi, pa, TECORE_VERSION_STRING);
  printf("build:       %s\n", tecore_build_config());
  int uring = 0;
  const char *why = "";
  if (tegraph_uring_probe(&uring, &why) == TEGRAPH_SUCCESS)
    printf("io_uring:    %s (%s)\n", uring ? "yes" : "no", why);
  int nv = 0;
  char names[8][64];
  tecomm_result_t cr = tecomm_verbs_devices(&nv, names, 8);
  if (cr == TECOMM_SUCCESS && nv > 0) {
    printf("verbs:       %d device%s", nv, nv == 1 ? "" : "s");
    for (int i = 0; i < nv && i < 8; i++) printf("%s%s", i ? ", " : ": ", names[i]);
    printf("%s\n", nv > 8 ? ", ..." : "");
  } else if (cr == TECOMM_SUCCESS) {
    printf("verbs:       no devices (libibverbs loaded; no RDMA device or rdma subsystem "
           "on this node)\n");
  } else {
    printf("verbs:       unavailable: %s\n", tecore_last_error());
  }
  printf("multicast:   %s\n", te_info_multicast());
}

const char *te_info_multicast(void) {
  /* NCCL's variable as NCCL reads it; ours through the registry */
  const char *nvls = getenv("NCCL_NVLS_ENABLE");
  struct tecore_tunable_info tnvls;
  if (nvls && strcmp(nvls, "0") == 0) return "disabled by NCCL_NVLS_ENABLE=0";
  if (tecore_tunable_find("TECOMM_NVLS_ENABLE", &tnvls) == TECORE_SUCCESS && tnvls.value_int == 0)
    return "disabled by TECOMM_NVLS_ENABLE=0";
  return "allowed where the device has it";
}

static int print_devices(void) {
  tecore_result_t r = tecore_init();
  if (r != TECORE_SUCCESS) {
    printf("backend:     none: %s (%s)\n", tecore_strerror(r), tecore_last_error());
    return 1;
  }
  tecore_backend_t b;
  tecore_backend(&b);
  int drv = 0, n = 0;
  tecore_driver_version(&drv);
  tecore_device_count(&n);
  if (b == TECORE_BACKEND_VDEV)
    printf("backend:     vdev -- no GPU in use: running on the virtual device (TE_DEVICE=cuda to require one)\n");
  else
    printf("backend:     cuda (driver API %d.%d)\n", drv / 1000, (drv % 1000) / 10);
  printf("devices:     %d\n", n);
  for (int i = 0; i < n; i++) {
    struct tecore_device_props p;
    if (tecore_device_get_props(i, &p) != TECORE_SUCCESS) {
      printf("  [%d] error: %s\n", i, tecore_last_error());
      continue;
    }
    printf("  [%d] %s\n", i, p.name);
    printf("      compute capability %d.%d, %d SMs, warp %d, %d threads/block, %d KiB shared/block\n",
           p.cc_major, p.cc_minor, p.sm_count, p.warp_size, p.max_threads_per_block,
           p.max_shared_per_block / 1024);
    printf("      memory %.1f GiB, L2 %.1f MiB", p.total_mem / 1073741824.0, p.l2_bytes / 1048576.0);
    if (p.mem_bus_width && p.mem_clock_khz)
      printf(", bus %d bit at %d MHz (peak %.0f GB/s)", p.mem_bus_width, p.mem_clock_khz / 1000,
             2.0 * p.mem_clock_khz * 1e3 * (p.mem_bus_width / 8) / 1e9);
    printf("\n      PCI %04x:%02x:%02x, unified addressing %s, VMM %s, POSIX fd handles %s, "
           "multicast %s, stream memory ops %s\n",
           p.pci_domain, p.pci_bus, p.pci_device, p.unified_addressing ? "yes" : "no",
           p.vmm_supported ? "yes" : "no", p.posix_fd_handles ? "yes" : "no",
           p.multicast_supported ? "yes" : "no", p.stream_mem_ops ? "yes" : "no");
    int gdr = 0;
    char why[160];
    if (tecomm_gpudirect(i, &gdr, why, sizeof why) == TECOMM_SUCCESS)
      printf("      GPUDirect RDMA: %s\n", why);
    else
      printf("      GPUDirect RDMA: unknown (%s)\n", tecomm_last_error());
  }
  if (n > 1) {
    printf("peer access (NVLink links; '-' no access, 'P' PCIe):\n      ");
    for (int j = 0; j < n; j++) printf("%5d", j);
    printf("\n");
    for (int i = 0; i < n; i++) {
      printf("  %3d ", i);
      for (int j = 0; j < n; j++) {
        int can = 0, link = 0;
        if (i == j)
          printf("%5s", "X");
        else if (tecore_device_peer(i, j, &can, &link) != TECORE_SUCCESS || !can)
          printf("%5s", "-");
        else if (link > 0)
          printf("%4s%d", "NV", link);
        else
          printf("%5s", link < 0 ? "?" : "P");
      }
      printf("\n");
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  static const struct option longs[] = {{"tunables", no_argument, 0, 'e'}, TE_CLI_FORMATS,
                                        TE_CLI_LONGS, {0, 0, 0, 0}};
  struct te_out out = {.tool = "te-info"};
  struct te_cli cli = {.prog = "te-info", .usage = usage_text, .shorts = "evqh", .longs = longs,
                       .out = &out};
  int opt, tunables = 0;
  while ((opt = te_cli_next(&cli, argc, argv)) != -1) {
    switch (opt) {
    case TE_CLI_EXIT: return cli.status;
    case 'e': tunables = 1; break;
    case 'v': printf("%s\n", tecore_version_string()); return TE_EXIT_OK; /* the number alone */
    }
  }
  if (te_cli_end(&cli, argc, argv)) return cli.status;
  /* the document even under -q: it is what was asked for */
  if (out.format != TE_OUT_TABLE) return te_info_doc(&out, tunables) ? TE_EXIT_FAIL : TE_EXIT_OK;
  if (cli.quiet) return tecore_init() == TECORE_SUCCESS ? TE_EXIT_OK : TE_EXIT_FAIL;
  if (tunables) return list_tunables() ? TE_EXIT_FAIL : TE_EXIT_OK;
  print_build();
  return print_devices() ? TE_EXIT_FAIL : TE_EXIT_OK;
}
