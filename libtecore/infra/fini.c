/* SPDX-License-Identifier: Apache-2.0
 * fini.c -- tecore_fini: the end of libtecore in a process, and the hooks
 * the libraries above it (libtegraph, libtecomm) register to free their
 * own state first.
 *
 * The order: the hooks, last registered first (an upper library may still
 * call libtecore to give back device memory or streams); the service
 * engine (its thread joined, its ring and pinned slabs freed); the device
 * backend (vdev: every stream drained and its worker joined, the registry
 * and memory bookkeeping freed); then libtecore's own tables (live
 * handles, tunable strings, the log file).  From then on every call that
 * needs the device returns TECORE_ERR_NOT_INITIALIZED: libtecore's model
 * is that the first initialization decides for the life of the process
 * (tecore_init), so a finished library does not start again.  A second
 * tecore_fini does nothing. */
#include "internal.h"
#include "device/device_ops.h"
#include "svc/svc_internal.h"

#define TE_FINI_HOOKS 16

static pthread_mutex_t fini_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  void (*fn)(void *arg);
  void *arg;
} hooks[TE_FINI_HOOKS];
static int nhooks;
static int finishing;   /* tecore_fini has begun (under fini_lock) */

TE_EXPORT tecore_result_t tecore_fini_register(void (*fn)(void *arg), void *arg) {
  TE_ARG(fn, "tecore_fini_register: fn is NULL");
  tecore_result_t r = TECORE_SUCCESS;
  pthread_mutex_lock(&fini_lock);
  int i;
  for (i = 0; i < nhooks; i++)
    if (hooks[i].fn == fn && hooks[i].arg == arg) break;
  if (finishing)
    r = TE_ERR(TECORE_ERR_NOT_INITIALIZED, "tecore_fini_register: tecore_fini() already ran");
  else if (i == nhooks && nhooks == TE_FINI_HOOKS)
    r = TE_ERR(TECORE_ERR_NOMEM, "tecore_fini_register: fn: all %d hooks are taken",
               TE_FINI_HOOKS);
  else if (i == nhooks) {
    hooks[nhooks].fn = fn;
    hooks[nhooks].arg = arg;
    nhooks++;
  }
  pthread_mutex_unlock(&fini_lock);
  return r;
}

/* The hooks run without the lock, so one that calls tecore_fini or
 * tecore_fini_register gets an answer (success, or NOT_INITIALIZED), not a
 * deadlock. */
TE_EXPORT tecore_result_t tecore_fini(void) {
  pthread_mutex_lock(&fini_lock);
  if (finishing) {
    pthread_mutex_unlock(&fini_lock);
    return TECORE_SUCCESS;
  }
  finishing = 1;
  int n = nhooks;
  nhooks = 0;
  pthread_mutex_unlock(&fini_lock);
  TE_INFO(TECORE_SUBSYS_INIT, "tecore_fini: %d hook(s), then the service engine and the backend",
          n);
  for (int i = n - 1; i >= 0; i--) hooks[i].fn(hooks[i].arg);
  te_svc_fini();
  te_device_fini();   /* from here on no call reaches the backend (te_finished) */
  te_handles_fini();
  te_tunables_fini();
  te_log_fini();
  return TECORE_SUCCESS;
}
