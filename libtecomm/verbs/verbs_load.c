/* verbs_load.c -- dlopen of libibverbs.so.1 (once) into the te_ibv table
 * (verbs_api.h), so that no libtecomm binary depends on rdma-core.
 * SPDX-License-Identifier: Apache-2.0 */
#include "verbs_api.h"

#include <stdio.h>
#include <string.h>

#ifdef TE_HAVE_VERBS
#include <dlfcn.h>
#include <pthread.h>

struct te_ibv_api te_ibv;

TECORE_TUNABLE_STR(tc_tun_verbs_lib, "TECOMM_VERBS_LIB", "libibverbs.so.1", NULL,
                   "the libibverbs shared object the verbs path loads at run time (a path, or "
                   "a name the dynamic loader searches for); \"soft\": a built-in loopback device "
                   "between processes of one host, for tests")

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int loaded;
static char why[320];

static void verbs_load(void) {
  const char *soname = tecore_tunable_str(&tc_tun_verbs_lib);
  if (soname && strcmp(soname, "soft") == 0) {
    te_ibv = tc_vb_soft_api;
    loaded = 1;
    return;
  }
  dlerror();
  void *lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *e = dlerror();
    snprintf(why, sizeof why, "%s not found (%s): install rdma-core's libibverbs",
             soname, e ? e : "dlopen failed");
    return;
  }
  struct te_ibv_api api;
#define TE_IBV_LOAD_(name, ret, args)                                                     \
  *(void **)(&api.name) = dlsym(lib, "ibv_" #name);                                       \
  if (!api.name) {                                                                        \
    snprintf(why, sizeof why, "%s lacks ibv_%s: libibverbs too old", soname, #name); \
    dlclose(lib);                                                                         \
    return;                                                                               \
  }
  TE_IBV_SYMBOLS(TE_IBV_LOAD_)
#undef TE_IBV_LOAD_
  te_ibv = api;
  loaded = 1;   /* the handle stays open: providers hold on to it */
}

tecomm_result_t tc_verbs_load(const char *who) {
  pthread_once(&once, verbs_load);
  if (!loaded) return TC_ERR(TECOMM_ERR_NOT_SUPPORTED, "%s: %s", who, why);
  return TECOMM_SUCCESS;
}
#else
tecomm_result_t tc_verbs_load(const char *who) {
  return TC_ERR(TECOMM_ERR_NOT_SUPPORTED,
                "%s: libtecomm was built without verbs (no infiniband/verbs.h at build time, "
                "or configure --without-verbs)", who);
}
#endif
