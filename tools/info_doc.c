/* SPDX-License-Identifier: Apache-2.0
 * info_doc.c -- te-info's document for scripts (--json, --csv), through
 * the tools' output layer (out.h), as fi_info and nvidia-smi -q let
 * scripts read what a node has: the build, the backends and optional
 * parts (cuda, vdev, NCCL, verbs, io_uring, multicast) with whether each
 * is there, every device with its properties, the shared libraries loaded
 * in the process after libte has looked for them, and every tunable.
 * --json writes all of it; --csv one table: the devices, or with -e the
 * tunables.  A secret tunable's value is never written. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <te/comm.h>
#include <te/core.h>
#include <te/graph.h>
#include "info.h"
#include "out.h"

static void backends(struct te_out *o, int init_ok, tecore_backend_t be) {
  static const struct te_out_col cols[] = {
      {"name", TE_OUT_STR, -10, 0, 0, 0},     {"kind", TE_OUT_STR, -7, 0, 0, 0},
      {"available", TE_OUT_BOOL, 9, 0, 0, 0}, {"in_use", TE_OUT_BOOL, 6, 0, 0, 0},
      {"detail", TE_OUT_STR, 0, 0, 0, 0}};
  char d[256];
  int drv = 0, cuda_built = strstr(tecore_build_config(), "cuda=yes") != NULL;
  te_out_table(o, "backends", cols, 5);
  tecore_driver_version(&drv);
  if (init_ok && be == TECORE_BACKEND_CUDA)
    snprintf(d, sizeof d, "driver API %d.%d", drv / 1000, (drv % 1000) / 10);
  else
    snprintf(d, sizeof d, "%s", !cuda_built ? "built without CUDA"
                                : "not in use (TE_DEVICE=cuda requires it)");
  te_out_row(o, (struct te_out_val[]){TE_OUT_S("cuda"), TE_OUT_S("device"),
                                      TE_OUT_N(init_ok && be == TECORE_BACKEND_CUDA),
                                      TE_OUT_N(init_ok && be == TECORE_BACKEND_CUDA), TE_OUT_S(d)});
  te_out_row(o, (struct te_out_val[]){TE_OUT_S("vdev"), TE_OUT_S("device"), TE_OUT_N(1),
                                      TE_OUT_N(init_ok && be == TECORE_BACKEND_VDEV),
                                      TE_OUT_S("the virtual device (CPU threads)")});
  int nv = 0;
  int nccl = tecomm_nccl_version(&nv) == TECOMM_SUCCESS;
  if (nccl) snprintf(d, sizeof d, "%d.%d.%d", nv / 10000, (nv / 100) % 100, nv % 100);
  else snprintf(d, sizeof d, "%s", tecomm_last_error());
  te_out_row(o, (struct te_out_val[]){TE_OUT_S("nccl"), TE_OUT_S("comm"), TE_OUT_N(nccl),
                                      TE_OUT_N(nccl), TE_OUT_S(d)});
  char names[8][64];
  int nd = 0, verbs = tecomm_verbs_devices(&nd, names, 8) == TECOMM_SUCCESS;
  if (verbs) {
    size_t n = (size_t)snprintf(d, sizeof d, "%d device%s", nd, nd == 1 ? "" : "s");
    for (int i = 0; i < nd && i < 8 && n < sizeof d; i++)
      n += (size_t)snprintf(d + n, sizeof d - n, "%s%s", i ? ", " : ": ", names[i]);
  } else {
    snprintf(d, sizeof d, "%s", tecore_last_error());
  }
  te_out_row(o, (struct te_out_val[]){TE_OUT_S("verbs"), TE_OUT_S("comm"),
                                      TE_OUT_N(verbs && nd > 0), TE_OUT_N(verbs && nd > 0),
                                      TE_OUT_S(d)});
  int uring = 0;
  const char *why = "";
  if (tegraph_uring_probe(&uring, &why) != TEGRAPH_SUCCESS) why = tegraph_last_error();
  te_out_row(o, (struct te_out_val[]){TE_OUT_S("io_uring"), TE_OUT_S("io"), TE_OUT_N(uring),
                                      TE_OUT_N(uring), TE_OUT_S(why)});
  const char *mc = te_info_multicast();
  te_out_row(o, (struct te_out_val[]){TE_OUT_S("multicast"), TE_OUT_S("comm"),
                                      TE_OUT_N(strncmp(mc, "disabled", 8) != 0),
                                      TE_OUT_N(strncmp(mc, "disabled", 8) != 0), TE_OUT_S(mc)});
  te_out_table_end(o);
}

static void devices(struct te_out *o, int n) {
  static const struct te_out_col cols[] = {
      {"index", TE_OUT_NUM, 0, 0, 0, 0},         {"name", TE_OUT_STR, 0, 0, 0, 0},
      {"cc", TE_OUT_STR, 0, 0, 0, 0},            {"sms", TE_OUT_NUM, 0, 0, 0, 0},
      {"warp", TE_OUT_NUM, 0, 0, 0, 0},          {"threads_per_block", TE_OUT_NUM, 0, 0, 0, 0},
      {"shared_per_block", TE_OUT_NUM, 0, 0, 0, 0}, {"memory_bytes", TE_OUT_NUM, 0, 0, 0, 0},
      {"l2_bytes", TE_OUT_NUM, 0, 0, 0, 0},      {"bus_bits", TE_OUT_NUM, 0, 0, 0, 0},
      {"mem_clock_khz", TE_OUT_NUM, 0, 0, 0, 0}, {"pci", TE_OUT_STR, 0, 0, 0, 0},
      {"unified_addressing", TE_OUT_BOOL, 0, 0, 0, 0}, {"vmm", TE_OUT_BOOL, 0, 0, 0, 0},
      {"posix_fd_handles", TE_OUT_BOOL, 0, 0, 0, 0}, {"multicast", TE_OUT_BOOL, 0, 0, 0, 0},
      {"stream_mem_ops", TE_OUT_BOOL, 0, 0, 0, 0}, {"gpudirect_rdma", TE_OUT_BOOL, 0, 0, 0, 0},
      {"gpudirect_detail", TE_OUT_STR, 0, 0, 0, 0}};
  enum { NC = sizeof cols / sizeof cols[0] };
  te_out_table(o, "devices", cols, NC);
  for (int i = 0; i < n; i++) {
    struct tecore_device_props p;
    if (tecore_device_get_props(i, &p) != TECORE_SUCCESS) {
      fprintf(stderr, "te-info: device %d: %s\n", i, tecore_last_error());
      continue;
    }
    char cc[16], pci[32], why[160];
    snprintf(cc, sizeof cc, "%d.%d", p.cc_major, p.cc_minor);
    snprintf(pci, sizeof pci, "%04x:%02x:%02x", p.pci_domain, p.pci_bus, p.pci_device);
    int gdr = 0, gok = tecomm_gpudirect(i, &gdr, why, sizeof why) == TECOMM_SUCCESS;
    if (!gok) snprintf(why, sizeof why, "unknown (%s)", tecomm_last_error());
    struct te_out_val v[NC] = {
        TE_OUT_N(i), TE_OUT_S(p.name), TE_OUT_S(cc), TE_OUT_N(p.sm_count), TE_OUT_N(p.warp_size),
        TE_OUT_N(p.max_threads_per_block), TE_OUT_N(p.max_shared_per_block),
        TE_OUT_N(p.total_mem), TE_OUT_N(p.l2_bytes), TE_OUT_N(p.mem_bus_width),
        TE_OUT_N(p.mem_clock_khz), TE_OUT_S(pci), TE_OUT_N(p.unified_addressing),
        TE_OUT_N(p.vmm_supported), TE_OUT_N(p.posix_fd_handles), TE_OUT_N(p.multicast_supported),
        TE_OUT_N(p.stream_mem_ops), gok ? TE_OUT_N(gdr) : TE_OUT_NONE, TE_OUT_S(why)};
    te_out_row(o, v);
  }
  te_out_table_end(o);
}

/* the peer matrix as rows (a, b): whether a maps b's memory, and NVLinks */
static void peers(struct te_out *o, int n) {
  static const struct te_out_col cols[] = {
      {"a", TE_OUT_NUM, 0, 0, 0, 0}, {"b", TE_OUT_NUM, 0, 0, 0, 0},
      {"access", TE_OUT_BOOL, 0, 0, 0, 0}, {"nvlinks", TE_OUT_NUM, 0, 0, 0, 0}};
  te_out_table(o, "peers", cols, 4);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {
      int can = 0, link = 0;
      if (i == j || tecore_device_peer(i, j, &can, &link) != TECORE_SUCCESS) continue;
      te_out_row(o, (struct te_out_val[]){TE_OUT_N(i), TE_OUT_N(j), TE_OUT_N(can),
                                          link >= 0 ? TE_OUT_N(link) : TE_OUT_NONE});
    }
  te_out_table_end(o);
}

static int one_library(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  const char *path = info->dlpi_name;
  if (!path || !*path || strstr(path, "linux-vdso")) return 0; /* the program, the vDSO */
  const char *base = strrchr(path, '/');
  te_out_row(arg, (struct te_out_val[]){TE_OUT_S(base ? base + 1 : path), TE_OUT_S(path)});
  return 0;
}

/* every shared object in the process, after libte has loaded what it
 * found (the driver, NCCL, libibverbs, liburing, cuBLASLt...) */
static void libraries(struct te_out *o) {
  static const struct te_out_col cols[] = {{"name", TE_OUT_STR, 0, 0, 0, 0},
                                           {"path", TE_OUT_STR, 0, 0, 0, 0}};
  te_out_table(o, "libraries", cols, 2);
  dl_iterate_phdr(one_library, o);
  te_out_table_end(o);
}

static int secret(const char *env) {
  size_t n = strlen(env);
  return n >= 7 && strcmp(env + n - 7, "_SECRET") == 0;
}

static int tunables_doc(struct te_out *o) {
  static const struct te_out_col cols[] = {
      {"env", TE_OUT_STR, 0, 0, 0, 0},     {"type", TE_OUT_STR, 0, 0, 0, 0},
      {"default", TE_OUT_STR, 0, 0, 0, 0}, {"value", TE_OUT_STR, 0, 0, 0, 0},
      {"set", TE_OUT_BOOL, 0, 0, 0, 0},    {"min", TE_OUT_NUM, 0, 0, 0, 0},
      {"max", TE_OUT_NUM, 0, 0, 0, 0},     {"choices", TE_OUT_STR, 0, 0, 0, 0},
      {"help", TE_OUT_STR, 0, 0, 0, 0},    {"formerly", TE_OUT_STR, 0, 0, 0, 0}};
  int n = 0, rc = 0;
  if (tecore_tunable_count(&n) != TECORE_SUCCESS) return 1;
  te_out_table(o, "tunables", cols, 10);
  for (int i = 0; i < n; i++) {
    struct tecore_tunable_info t;
    if (tecore_tunable_get_info(i, &t) != TECORE_SUCCESS) {
      rc = 1;
      continue;
    }
    int num = t.type == TECORE_TUNABLE_INT;
    char def[64], val[64];
    snprintf(def, sizeof def, "%lld", (long long)t.def_int);
    snprintf(val, sizeof val, "%lld", (long long)t.value_int);
    struct te_out_val v[10] = {
        TE_OUT_S(t.env), TE_OUT_S(num ? "int" : "string"), TE_OUT_S(num ? def : t.def_str),
        /* never written: logs and bug reports keep it */
        TE_OUT_S(num ? val : secret(t.env) ? "" : t.value_str), TE_OUT_N(t.set_in_env),
        num ? TE_OUT_N(t.min) : TE_OUT_NONE, num ? TE_OUT_N(t.max) : TE_OUT_NONE,
        TE_OUT_S(t.choices ? t.choices : ""), TE_OUT_S(t.help),
        TE_OUT_S(t.old_env ? t.old_env : "")};
    te_out_row(o, v);
  }
  te_out_table_end(o);
  return rc;
}

int te_info_doc(struct te_out *o, int tunables_only) {
  int ma, mi, pa, n = 0, rc = 0;
  tecore_backend_t be = TECORE_BACKEND_NONE;
  tecore_result_t r = tecore_init();
  int init_ok = r == TECORE_SUCCESS;
  if (init_ok) {
    tecore_backend(&be);
    tecore_device_count(&n);
  }
  tecore_version(&ma, &mi, &pa);
  te_out_begin(o);
  te_out_field_s(o, "headers", TECORE_VERSION_STRING);
  te_out_field_s(o, "build", tecore_build_config());
  te_out_field_s(o, "backend", init_ok ? tecore_backend_name(be) : "none");
  if (!init_ok) {
    te_out_field_s(o, "backend_error", tecore_last_error());
    fprintf(stderr, "te-info: no backend: %s (%s)\n", tecore_strerror(r), tecore_last_error());
  }
  te_out_field_n(o, "device_count", n);
  /* CSV holds the first table: the devices, or with -e the tunables */
  if (tunables_only) {
    rc |= tunables_doc(o);
  } else {
    devices(o, n);
    backends(o, init_ok, be);
    if (n > 1) peers(o, n);
    libraries(o);
    rc |= tunables_doc(o);
  }
  te_out_end(o);
  return rc || !init_ok;
}
