/* SPDX-License-Identifier: Apache-2.0 */
/* nccl.c -- loads libnccl.so.2 once (dlopen + dlsym; the ABI is nccl.h's,
 * copied as numbers into nccl.h here), for the NCCL backend of allreduce
 * and the bootstrap adapter over an existing NCCL communicator; on vdev
 * the same table holds nccl_vdev.c's emulation. */
#include "nccl.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

TECORE_TUNABLE_INT(tc_tun_nccl, "TECOMM_NCCL", 1, 0, 1,
                   "0: never load libnccl.so.2, nor use vdev's emulation of it (no NCCL backend, "
                   "no NCCL fallback)")

static struct tc_nccl nccl;
static const struct tc_nccl *nccl_ok;
static char nccl_why[256] = "not loaded";
static pthread_once_t nccl_once = PTHREAD_ONCE_INIT;

static void nccl_load(void) {
  if (tecore_tunable_int(&tc_tun_nccl) == 0) {
    snprintf(nccl_why, sizeof nccl_why, "TECOMM_NCCL=0");
    return;
  }
  tecore_backend_t be = TECORE_BACKEND_NONE;
  if (tecore_backend(&be) == TECORE_SUCCESS && be == TECORE_BACKEND_VDEV) {
    tc_nccl_vdev_fill(&nccl);
    nccl_ok = &nccl;
    snprintf(nccl_why, sizeof nccl_why, "vdev's NCCL (emulated, the API of %d)", nccl.version);
    return;
  }
  if (be != TECORE_BACKEND_CUDA) {
    snprintf(nccl_why, sizeof nccl_why, "backend %s has no NCCL", tecore_backend_name(be));
    return;
  }
  void *lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(nccl_why, sizeof nccl_why, "libnccl.so.2 does not load: %s", dlerror());
    return;
  }
  struct {
    const char *name;
    void **slot;
  } syms[] = {
      {"ncclGetVersion", (void **)&nccl.GetVersion},
      {"ncclGetUniqueId", (void **)&nccl.GetUniqueId},
      {"ncclCommInitRank", (void **)&nccl.CommInitRank},
      {"ncclCommDestroy", (void **)&nccl.CommDestroy},
      {"ncclCommAbort", (void **)&nccl.CommAbort},
      {"ncclCommCount", (void **)&nccl.CommCount},
      {"ncclCommUserRank", (void **)&nccl.CommUserRank},
      {"ncclCommGetAsyncError", (void **)&nccl.CommGetAsyncError},
      {"ncclGetErrorString", (void **)&nccl.GetErrorString},
      {"ncclAllReduce", (void **)&nccl.AllReduce},
      {"ncclAllGather", (void **)&nccl.AllGather},
      {"ncclReduceScatter", (void **)&nccl.ReduceScatter},
  };
  for (size_t i = 0; i < TE_ARRAY_SIZE(syms); i++) {
    *syms[i].slot = dlsym(lib, syms[i].name);
    if (!*syms[i].slot) {
      snprintf(nccl_why, sizeof nccl_why, "libnccl.so.2 lacks %s", syms[i].name);
      dlclose(lib);
      return;
    }
  }
  /* optional: without it, init blocks (and is not bounded) */
  *(void **)&nccl.CommInitRankConfig = dlsym(lib, "ncclCommInitRankConfig");
  if (nccl.GetVersion(&nccl.version) != 0) nccl.version = 0;
  nccl_ok = &nccl;
  snprintf(nccl_why, sizeof nccl_why, "libnccl.so.2 %d", nccl.version);
  TC_INFO("NCCL %d loaded", nccl.version);
}

const struct tc_nccl *tc_nccl_get(const char **why) {
  pthread_once(&nccl_once, nccl_load);
  if (why) *why = nccl_why;
  return nccl_ok;
}

int tc_nccl_wait(const struct tc_nccl *n, tc_nccl_comm_t comm, int result, int64_t limit_ms) {
  if (result != TC_NCCL_IN_PROGRESS) return result;
  int64_t deadline = tc_now_ms() + limit_ms;
  for (;;) {
    int ar = TC_NCCL_IN_PROGRESS, g = n->CommGetAsyncError(comm, &ar);
    if (g != TC_NCCL_OK) return g;
    if (ar != TC_NCCL_IN_PROGRESS) return ar;
    if (tc_now_ms() > deadline) return -1;
    usleep(100);
  }
}

tecomm_result_t tc_nccl_err(int result, const char *what) {
  const char *s = nccl_ok && nccl.GetErrorString ? nccl.GetErrorString(result) : "?";
  if (result == TC_NCCL_REMOTE_ERROR) /* a peer failed: the chain's other links say TIMEOUT */
    return TC_ERR(TECOMM_ERR_TIMEOUT, "%s: NCCL error %d (%s)", what, result, s ? s : "?");
  return TC_ERR(TECOMM_ERR_DEVICE, "%s: NCCL error %d (%s)", what, result, s ? s : "?");
}

TE_EXPORT tecomm_result_t tecomm_nccl_version(int *version) {
  TC_ARG(version, "tecomm_nccl_version: version is NULL");
  const char *why = NULL;
  const struct tc_nccl *n = tc_nccl_get(&why);
  if (!n) return TC_ERR(TECOMM_ERR_NOT_SUPPORTED, "tecomm_nccl_version: %s", why);
  *version = n->version;
  return TECOMM_SUCCESS;
}
