/* SPDX-License-Identifier: Apache-2.0 */
/* kernel.c -- the kernel registry: tables of kernels registered by
 * libtecore and the libraries above it, ids, and validated launches.
 * Ids are dense: a table's kernels get consecutive ids in registration
 * order.  Entries are never removed, so a pointer to one stays valid. */
#include "device_ops.h"
#include "common/kparams.h"
#include "profile_hook.h"
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define TE_MAX_TABLES 64
#define TE_MAX_KERNELS 1024

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct te_kernel_module reg_modules[TE_MAX_TABLES];
static int reg_module_loaded[TE_MAX_TABLES];
static int reg_ntables;
static struct te_kernel_entry reg_kernels[TE_MAX_KERNELS];
static int reg_nkernels; /* read without the lock: published with release */
/* Each entry's align is libtecore's own record of each pointer parameter's
 * alignment (kparams.h TE_KALIGN), NULL for kernels registered without
 * one (other libraries' tables through the public call: their pointers
 * are checked for 0 and range only). */
_Static_assert(sizeof(((struct te_kalign *)0)->p) / sizeof(struct te_kparam_align) ==
                   TECORE_KERNEL_MAX_PARAMS,
               "struct te_kalign holds TECORE_KERNEL_MAX_PARAMS parameters");

static tecore_result_t prepare_range(const struct te_device_ops *o, int first, int end);

TE_EXPORT tecore_result_t tecore_kernel_table_register(const struct tecore_kernel_table *table,
                                                       int *first_id) {
  TE_ARG(table, "tecore_kernel_table_register: table is NULL");
  TE_ARG(first_id, "tecore_kernel_table_register: first_id is NULL");
  TE_ARG(table->module && table->module[0], "tecore_kernel_table_register: module name is empty");
  TE_ARG(table->count > 0 && table->kernels,
         "tecore_kernel_table_register: table %s has no kernels", table->module);
  TE_ARG(!table->fatbin == !table->fatbin_bytes,
         "tecore_kernel_table_register: table %s: fatbin and fatbin_bytes disagree", table->module);
  for (unsigned i = 0; i < table->count; i++) {
    const struct tecore_kernel_def *d = &table->kernels[i];
    TE_ARG(d->name && d->name[0], "tecore_kernel_table_register: %s kernel %u has no name",
           table->module, i);
    TE_ARG(d->nparams <= TECORE_KERNEL_MAX_PARAMS,
           "tecore_kernel_table_register: %s has %u parameters (max %d)", d->name, d->nparams,
           TECORE_KERNEL_MAX_PARAMS);
    for (unsigned p = 0; p < d->nparams; p++) {
      TE_ARG(d->param_size[p] > 0, "tecore_kernel_table_register: %s parameter %u has size 0",
             d->name, p);
      TE_ARG(d->param_is_ptr[p] <= TECORE_KERNEL_PTR_NONNULL,
             "tecore_kernel_table_register: %s parameter %u: param_is_ptr %u is not 0, "
             "TECORE_KERNEL_PTR or TECORE_KERNEL_PTR_NONNULL",
             d->name, p, d->param_is_ptr[p]);
      TE_ARG(!d->param_is_ptr[p] || d->param_size[p] == 8,
             "tecore_kernel_table_register: %s parameter %u is a pointer of %u bytes (pointers "
             "are 8 bytes)",
             d->name, p, d->param_size[p]);
    }
    /* a kernel nothing can run is a table bug, not a launch-time surprise */
    TE_ARG(d->vdev || table->fatbin,
           "tecore_kernel_table_register: %s kernel %s has neither a vdev function nor a fatbin",
           table->module, d->name);
    for (unsigned j = 0; j < i; j++)
      TE_ARG(strcmp(table->kernels[j].name, d->name) != 0,
             "tecore_kernel_table_register: %s names kernel %s twice", table->module, d->name);
  }
  pthread_mutex_lock(&reg_lock);
  for (int t = 0; t < reg_ntables; t++) {
    if (reg_modules[t].table == table) {
      /* the same table again: the same ids */
      for (int k = 0; k < reg_nkernels; k++)
        if (reg_kernels[k].table == table) {
          *first_id = k;
          break;
        }
      pthread_mutex_unlock(&reg_lock);
      return TECORE_SUCCESS;
    }
  }
  /* kernels are found by name: a second table may not reuse one */
  for (int k = 0; k < reg_nkernels; k++)
    for (unsigned i = 0; i < table->count; i++)
      if (strcmp(reg_kernels[k].def->name, table->kernels[i].name) == 0) {
        const char *other = reg_kernels[k].table->module;
        pthread_mutex_unlock(&reg_lock);
        return TE_ERR(TECORE_ERR_INVALID,
                      "tecore_kernel_table_register: %s: kernel %s is already registered by %s",
                      table->module, table->kernels[i].name, other);
      }
  if (reg_ntables == TE_MAX_TABLES || reg_nkernels + (int)table->count > TE_MAX_KERNELS) {
    pthread_mutex_unlock(&reg_lock);
    return TE_ERR(TECORE_ERR_NOMEM, "tecore_kernel_table_register: registry full (%d tables, %d kernels)",
                  TE_MAX_TABLES, TE_MAX_KERNELS);
  }
  int t = reg_ntables++;
  reg_modules[t].table = table;
  reg_modules[t].backend_handle = NULL;
  int base = reg_nkernels;
  for (unsigned i = 0; i < table->count; i++) {
    struct te_kernel_entry *e = &reg_kernels[base + (int)i];
    e->def = &table->kernels[i];
    e->table = table;
    e->id = base + (int)i;
    e->table_index = t;
    e->backend_handle = NULL;
  }
  __atomic_store_n(&reg_nkernels, base + (int)table->count, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&reg_lock);
  *first_id = base;
  /* no log line here: registration runs in constructors, and logging
   * would read TE_DEBUG before main() could set it */
  /* registered after the backend came up (a library loaded later): load
   * now.  Tables registered from constructors are loaded at init. */
  const struct te_device_ops *o = te_ops_if_ready();
  if (o && prepare_range(o, base, base + (int)table->count) != TECORE_SUCCESS)
    TE_WARN(TECORE_SUBSYS_KERNEL, "loading kernel module %s failed (%s)", table->module,
            tecore_last_error());
  return TECORE_SUCCESS;
}

void te_kernel_table_set_align(int first, unsigned count, const struct te_kalign *aligns) {
  if (!aligns || first < 0) return;
  for (unsigned i = 0; i < count && first + (int)i < TE_MAX_KERNELS; i++)
    __atomic_store_n(&reg_kernels[first + (int)i].align, &aligns[i], __ATOMIC_RELEASE);
}

tecore_result_t te_kernel_check_align(int id, void *const *args, const char *who) {
  const struct te_kalign *al =
      id >= 0 && id < TE_MAX_KERNELS ? __atomic_load_n(&reg_kernels[id].align, __ATOMIC_ACQUIRE)
                                     : NULL;
  if (!al) return TECORE_SUCCESS;
  const struct tecore_kernel_def *def = reg_kernels[id].def;
  for (unsigned p = 0; p < def->nparams; p++) {
    if (!def->param_is_ptr[p] || def->param_size[p] != 8) continue;
    uint64_t v;
    memcpy(&v, args[p], 8);
    size_t need = te_kparam_align(al, def, p, args);
    if (!v || need <= 1 || v % need == 0) continue;
    /* why: the pointee's type, or the dtype argument that picked it */
    const struct te_kparam_align *a = &al->p[p];
    char why[96];
    if (a->dt_param == TE_KP_NO_DT)
      snprintf(why, sizeof why, "its element type");
    else if (a->dt_slot == TE_KP_WHOLE)
      snprintf(why, sizeof why, "dtype code %d in parameter %u", (int)te_kparam_dt_code(a, args),
               (unsigned)a->dt_param);
    else
      snprintf(why, sizeof why, "dtype code %u in field %u of parameter %u", te_kparam_dt_code(a, args),
               (unsigned)a->dt_slot, (unsigned)a->dt_param);
    return TE_ERR(TECORE_ERR_INVALID,
                  "%s: kernel %s parameter %u: pointer 0x%llx is not aligned to %zu bytes (%s)",
                  who, def->name, p, (unsigned long long)v, need, why);
  }
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_kernel_find(const char *name, int *id) {
  TE_ARG(name, "tecore_kernel_find: name is NULL");
  TE_ARG(id, "tecore_kernel_find: id is NULL");
  int n = __atomic_load_n(&reg_nkernels, __ATOMIC_ACQUIRE);
  for (int k = 0; k < n; k++)
    if (strcmp(reg_kernels[k].def->name, name) == 0) {
      *id = k;
      return TECORE_SUCCESS;
    }
  return TE_ERR(TECORE_ERR_INVALID, "tecore_kernel_find: no kernel named %s", name);
}

TE_EXPORT tecore_result_t tecore_kernel_get_def(int id, const struct tecore_kernel_def **def) {
  TE_ARG(def, "tecore_kernel_get_def: def is NULL");
  int n = __atomic_load_n(&reg_nkernels, __ATOMIC_ACQUIRE);
  TE_ARG(id >= 0 && id < n, "tecore_kernel_get_def: id %d outside [0, %d)", id, n);
  *def = reg_kernels[id].def;
  return TECORE_SUCCESS;
}

int te_kernel_count(void) { return __atomic_load_n(&reg_nkernels, __ATOMIC_ACQUIRE); }

struct te_kernel_entry *te_kernel_entry_at(int id) {
  return id >= 0 && id < te_kernel_count() ? &reg_kernels[id] : NULL;
}

/* Loads a table's module in the backend once. */
static tecore_result_t module_ready(const struct te_device_ops *o, int t) {
  if (__atomic_load_n(&reg_module_loaded[t], __ATOMIC_ACQUIRE)) return TECORE_SUCCESS;
  tecore_result_t r = TECORE_SUCCESS;
  pthread_mutex_lock(&reg_lock);
  if (!reg_module_loaded[t]) {
    r = o->kernel_module_load(&reg_modules[t]);
    if (r == TECORE_SUCCESS) __atomic_store_n(&reg_module_loaded[t], 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&reg_lock);
  return r;
}

/* Modules whose fatbin is absent (vdev-only tables, or a build without
 * CUDA) have nothing to load on cuda; their launches say so. */
static int has_code(const struct te_device_ops *o, const struct tecore_kernel_table *t) {
  return o->backend != TECORE_BACKEND_CUDA || t->fatbin != NULL;
}

static tecore_result_t prepare_range(const struct te_device_ops *o, int first, int end) {
  for (int k = first; k < end; k++) {
    struct te_kernel_entry *e = &reg_kernels[k];
    if (!has_code(o, e->table)) continue;
    TE_CHECK(module_ready(o, e->table_index));
    TE_CHECK(o->kernel_prepare(e, &reg_modules[e->table_index]));
  }
  return TECORE_SUCCESS;
}

/* The backend-ready hook: loads every registered module and prepares each
 * kernel in the current context, once the backend is up and again for
 * each new context (device.c runs it). */
static tecore_result_t kernel_preload(const struct te_device_ops *o) {
  return prepare_range(o, 0, __atomic_load_n(&reg_nkernels, __ATOMIC_ACQUIRE));
}

/* Before the other constructors (tables register from theirs), so the hook
 * is in place whatever brings the backend up. */
__attribute__((constructor(101))) static void kernel_hook_register(void) {
  te_device_on_ready(kernel_preload);
}

/* Dynamic shared memory any kernel may ask for without an opt-in (the
 * driver's 48 KiB); above it the device's per-block limit applies. */
#define TE_KERNEL_SHARED_FREE (48u * 1024)

/* The per-block shared memory limit of device 0, read once (a launch that
 * stays under 48 KiB, as nearly all do, never asks). */
static uint32_t shared_limit(const struct te_device_ops *o) {
  static uint32_t cached;
  uint32_t v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (v) return v;
  struct tecore_device_props props;
  memset(&props, 0, sizeof props);
  v = o->device_props(0, &props) == TECORE_SUCCESS && props.max_shared_per_block > 0
          ? (uint32_t)props.max_shared_per_block
          : TE_KERNEL_SHARED_FREE;
  __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
  return v;
}

/* The launch behind tecore_kernel_launch and tecore_kernel_launch_ex;
 * api names the public call in messages. */
static tecore_result_t kernel_launch(const char *api, int id, const struct tecore_launch_cfg *cfg,
                                     void *const *args, unsigned flags, tecore_stream_t stream) {
  TE_ARG(cfg, "%s: cfg is NULL", api);
  int n = __atomic_load_n(&reg_nkernels, __ATOMIC_ACQUIRE);
  TE_ARG(id >= 0 && id < n, "%s: kernel id %d outside [0, %d)", api, id, n);
  struct te_kernel_entry *k = &reg_kernels[id];
  TE_ARG(!(flags & ~TECORE_LAUNCH_FLAGS_ALL_),
         "%s: %s: flags 0x%x hold bits no TECORE_LAUNCH_* flag has (0x%x)", api, k->def->name,
         flags, flags & ~TECORE_LAUNCH_FLAGS_ALL_);
  TE_ARG(args || k->def->nparams == 0, "%s: %s: args is NULL", api, k->def->name);
  for (unsigned p = 0; p < k->def->nparams; p++)
    TE_ARG(args[p], "%s: %s: args[%u] is NULL", api, k->def->name, p);
  char who[160];
  snprintf(who, sizeof who, "%s: %s", api, k->def->name);
  TE_CHECK(te_launch_cfg_check(cfg, who));
  /* a pointer less aligned than its kernel reads it: a misaligned access
   * in the C kernel (undefined; a UBSan abort), an error on a GPU */
  TE_CHECK(te_kernel_check_align(id, args, api));
  const struct te_device_ops *o;
  TE_CHECK(te_ops_get(&o));
  TE_CHECK(te_error_deferred_take()); /* a tensor of this call overruns its buffer (vdev) */
  if (cfg->shared_bytes > TE_KERNEL_SHARED_FREE) {
    uint32_t limit = shared_limit(o);
    TE_ARG(cfg->shared_bytes <= limit, "%s: %s: %u bytes of shared memory exceed the device's %u",
           api, k->def->name, cfg->shared_bytes, limit);
  }
  TE_CHECK(module_ready(o, k->table_index));
  struct te_prof_mark pm;
  te_prof_begin(&pm, stream);
  tecore_result_t r = o->kernel_launch(k, &reg_modules[k->table_index], cfg, args, flags, stream);
  te_prof_end(&pm, k->def->name, NULL, r);
  return r;
}

TE_EXPORT tecore_result_t tecore_kernel_launch(int id, const struct tecore_launch_cfg *cfg,
                                               void *const *args, tecore_stream_t stream) {
  return kernel_launch("tecore_kernel_launch", id, cfg, args, 0, stream);
}

TE_EXPORT tecore_result_t tecore_kernel_launch_ex(int id, const struct tecore_launch_cfg *cfg,
                                                  void *const *args, unsigned flags,
                                                  tecore_stream_t stream) {
  return kernel_launch("tecore_kernel_launch_ex", id, cfg, args, flags, stream);
}

/* libtecore's own kernels that begin with te_pdl_enter (kernels/pdl.cuh):
 * the norms, activations, column sums, elementwise kernels, optimizers,
 * embedding, cross-entropy, RoPE, cuDNN attention's helpers and the
 * 16-bit GEMM.  A training step is a chain of several hundred dependent
 * kernels; each boundary costs a launch and a block ramp that the
 * programmatic launch hides behind the previous kernel's tail. */
TE_PARAM_INT(kernel_pdl, "TECORE_PDL", 1, 0, 1,
             "1: libtecore launches its own kernels (norms, activations, column sums, "
             "optimizers, embedding, cross-entropy, RoPE, the 16-bit GEMM) with programmatic "
             "dependent launch on cuda devices of compute capability 9.0 and newer, so that "
             "each one's launch overlaps the previous kernel's end; 0: ordinary launches")

tecore_result_t te_kernel_launch_pdl(int id, const struct tecore_launch_cfg *cfg,
                                     void *const *args, tecore_stream_t stream) {
  const unsigned flags = tecore_tunable_int(&kernel_pdl) ? TECORE_LAUNCH_PDL : 0;
  return kernel_launch("tecore_kernel_launch", id, cfg, args, flags, stream);
}

tecore_result_t te_kernel_node_replace(int id, tecore_graph_t graph, tecore_graph_node_t node,
                                       const struct tecore_launch_cfg *cfg, void *const *args,
                                       tecore_graph_node_t *out) {
  int n = __atomic_load_n(&reg_nkernels, __ATOMIC_ACQUIRE);
  if (id < 0 || id >= n)
    return TE_ERR(TECORE_ERR_INTERNAL, "kernel id %d outside [0, %d)", id, n);
  struct te_kernel_entry *k = &reg_kernels[id];
  const struct te_device_ops *o;
  TE_CHECK(te_ops_get(&o));
  if (!has_code(o, k->table))
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "kernel %s: this build has no GPU code for it",
                  k->def->name);
  TE_CHECK(module_ready(o, k->table_index));
  return o->graph_node_to_kernel(graph, node, k, &reg_modules[k->table_index], cfg, args, out);
}
