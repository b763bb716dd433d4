/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_nvml.c -- NVLink link counts for tecore_device_peer, from NVML
 * loaded with dlopen("libnvidia-ml.so.1") once.  NVML is optional: without
 * it (or when it fails) the count is -1, "unknown".
 *
 * Only the few NVML types used are declared here (no nvml.h is needed to
 * build); their layouts are NVML's stable ABI for the _v2 entry points. */
#include "cuda_backend.h"

#include <dlfcn.h>
#include <pthread.h>

typedef int te_nvml_return_t;          /* nvmlReturn_t: 0 = NVML_SUCCESS */
typedef struct te_nvml_device_st *te_nvml_device_t;
typedef struct {                       /* nvmlPciInfo_t (v2 layout and later) */
  char bus_id_legacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pci_device_id;
  unsigned int pci_subsystem_id;
  char bus_id[32];
} te_nvml_pci_info_t;

enum {
  TE_NVML_SUCCESS = 0,
  TE_NVML_FEATURE_ENABLED = 1,
  TE_NVML_NVLINK_DEVICE_TYPE_SWITCH = 2,
  /* NVML_NVLINK_MAX_LINKS in current NVML; links past a device's own count
   * answer an error and are skipped, so a larger bound is harmless. */
  TE_NVML_MAX_LINKS = 18
};

static struct {
  pthread_once_t once;
  int ok;
  te_nvml_return_t (*init)(void);
  te_nvml_return_t (*by_pci_bus_id)(const char *bus_id, te_nvml_device_t *dev);
  te_nvml_return_t (*link_state)(te_nvml_device_t dev, unsigned link, int *active);
  te_nvml_return_t (*remote_pci)(te_nvml_device_t dev, unsigned link, te_nvml_pci_info_t *pci);
  te_nvml_return_t (*remote_type)(te_nvml_device_t dev, unsigned link, int *type); /* optional */
} g_nvml = {.once = PTHREAD_ONCE_INIT};

static void nvml_load(void) {
  void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    TE_INFO(TECORE_SUBSYS_DEVICE, "cuda: libnvidia-ml.so.1 not found (%s): NVLink counts unknown",
            dlerror());
    return;
  }
  g_nvml.init = (te_nvml_return_t (*)(void))dlsym(lib, "nvmlInit_v2");
  g_nvml.by_pci_bus_id = (te_nvml_return_t (*)(const char *, te_nvml_device_t *))dlsym(
      lib, "nvmlDeviceGetHandleByPciBusId_v2");
  g_nvml.link_state = (te_nvml_return_t (*)(te_nvml_device_t, unsigned, int *))dlsym(
      lib, "nvmlDeviceGetNvLinkState");
  g_nvml.remote_pci = (te_nvml_return_t (*)(te_nvml_device_t, unsigned, te_nvml_pci_info_t *))dlsym(
      lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
  g_nvml.remote_type = (te_nvml_return_t (*)(te_nvml_device_t, unsigned, int *))dlsym(
      lib, "nvmlDeviceGetNvLinkRemoteDeviceType");
  if (!g_nvml.init || !g_nvml.by_pci_bus_id || !g_nvml.link_state || !g_nvml.remote_pci) {
    TE_INFO(TECORE_SUBSYS_DEVICE, "cuda: libnvidia-ml.so.1 lacks NVLink queries: counts unknown");
    dlclose(lib);
    return;
  }
  te_nvml_return_t r = g_nvml.init();
  if (r != TE_NVML_SUCCESS) {
    TE_INFO(TECORE_SUBSYS_DEVICE, "cuda: nvmlInit_v2 failed (%d): NVLink counts unknown", r);
    dlclose(lib);
    return;
  }
  /* NVML stays initialized (and loaded) for the life of the process. */
  g_nvml.ok = 1;
}

int te_cuda_nvlink_count(const char *pci_bus_id_a, int domain_b, int bus_b, int device_b) {
  pthread_once(&g_nvml.once, nvml_load);
  if (!g_nvml.ok) return -1;
  te_nvml_device_t dev;
  if (g_nvml.by_pci_bus_id(pci_bus_id_a, &dev) != TE_NVML_SUCCESS) return -1;
  int links = 0;
  for (unsigned l = 0; l < TE_NVML_MAX_LINKS; l++) {
    int active = 0;
    if (g_nvml.link_state(dev, l, &active) != TE_NVML_SUCCESS ||
        active != TE_NVML_FEATURE_ENABLED)
      continue;
    /* Through an NVSwitch every link reaches every GPU of the fabric. */
    int type = -1;
    if (g_nvml.remote_type && g_nvml.remote_type(dev, l, &type) == TE_NVML_SUCCESS &&
        type == TE_NVML_NVLINK_DEVICE_TYPE_SWITCH) {
      links++;
      continue;
    }
    te_nvml_pci_info_t pci;
    if (g_nvml.remote_pci(dev, l, &pci) != TE_NVML_SUCCESS) continue;
    if ((int)pci.domain == domain_b && (int)pci.bus == bus_b && (int)pci.device == device_b)
      links++;
  }
  return links;
}
