/* SPDX-License-Identifier: Apache-2.0 */
/* vdev_kernel.c -- kernel launch on vdev: the parameter values are copied
 * when the launch is submitted (so the caller's argument storage may die at
 * once, and a captured node owns its values), then the kernel's C
 * implementation runs the whole grid on the stream's worker thread.
 *
 * The copy packs parameter i at a 16-byte aligned offset, so every value
 * is as aligned for the C function as it was in the caller's storage. */
#include "vdev/vdev.h"
#include <stdlib.h>
#include <string.h>

#define ARG_ALIGN 16

size_t te_vdev_arg_offset(const struct tecore_kernel_def *def, unsigned i) {
  size_t off = 0;
  for (unsigned p = 0; p < i; p++)
    off += (def->param_size[p] + ARG_ALIGN - 1) & ~(size_t)(ARG_ALIGN - 1);
  return off;
}

/* The kernels' C implementations are linked in: nothing to resolve per
 * context. */
tecore_result_t te_vdev_kernel_prepare(struct te_kernel_entry *k, struct te_kernel_module *mod) {
  (void)k;
  (void)mod;
  return TECORE_SUCCESS;
}

/* Nothing to load: the implementations are linked in. */
tecore_result_t te_vdev_kernel_module_load(struct te_kernel_module *mod) {
  mod->backend_handle = NULL;
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_kernel_op(const struct te_kernel_entry *k,
                                  const struct tecore_launch_cfg *cfg, void *const *args,
                                  struct vdev_op *op, const char *fn) {
  const struct tecore_kernel_def *def = k->def;
  if (!def->vdev)
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: kernel %s has no vdev implementation", fn,
                  def->name);
  if (def->nparams > TECORE_KERNEL_MAX_PARAMS)
    return TE_ERR(TECORE_ERR_INVALID, "%s: kernel %s has %u parameters", fn, def->name,
                  def->nparams);
  if (def->nparams && !args)
    return TE_ERR(TECORE_ERR_INVALID, "%s: kernel %s: args is NULL", fn, def->name);
  *op = (struct vdev_op){.type = VDEV_OP_KERNEL,
                         .u.kernel = {.def = def,
                                      .align = __atomic_load_n(&k->align, __ATOMIC_ACQUIRE),
                                      .id = k->id,
                                      .cfg = *cfg}};
  size_t bytes = te_vdev_arg_offset(def, def->nparams);
  if (bytes) {
    op->u.kernel.args = malloc(bytes);
    if (!op->u.kernel.args) return TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
    memset(op->u.kernel.args, 0, bytes);
    for (unsigned i = 0; i < def->nparams; i++) {
      if (!args[i]) {
        free(op->u.kernel.args);
        op->u.kernel.args = NULL;
        return TE_ERR(TECORE_ERR_INVALID, "%s: kernel %s: args[%u] is NULL", fn, def->name, i);
      }
      memcpy(op->u.kernel.args + te_vdev_arg_offset(def, i), args[i], def->param_size[i]);
    }
  }
  op->u.kernel.args_bytes = bytes;
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_kernel_launch(struct te_kernel_entry *k, struct te_kernel_module *mod,
                                      const struct tecore_launch_cfg *cfg, void *const *args,
                                      unsigned flags, tecore_stream_t stream) {
  static const char fn[] = "vdev kernel_launch";
  (void)mod;
  /* TECORE_LAUNCH_PDL: a stream runs its kernels one after another here,
   * which is what a programmatic launch may always fall back to */
  (void)flags;
  struct vdev_op op;
  TE_CHECK(te_vdev_kernel_op(k, cfg, args, &op, fn));
  return te_vdev_submit(stream, &op, fn);
}

/* Runs on the worker.  The kernel gets a scratch copy of the values: a C
 * implementation may write through its parameter pointers, and a graph
 * node must replay the same values every launch. */
tecore_result_t te_vdev_kernel_run(const struct vdev_op *op) {
  const struct tecore_kernel_def *def = op->u.kernel.def;
  unsigned char stack_buf[512] __attribute__((aligned(ARG_ALIGN)));
  unsigned char *buf = stack_buf;
  size_t bytes = op->u.kernel.args_bytes;
  if (bytes > sizeof stack_buf) {
    buf = aligned_alloc(ARG_ALIGN, (bytes + ARG_ALIGN - 1) & ~(size_t)(ARG_ALIGN - 1));
    if (!buf) return TECORE_ERR_NOMEM;
  }
  if (bytes) memcpy(buf, op->u.kernel.args, bytes);
  void *argv[TECORE_KERNEL_MAX_PARAMS] = {0};
  for (unsigned i = 0; i < def->nparams; i++) argv[i] = buf + te_vdev_arg_offset(def, i);
  def->vdev(&op->u.kernel.cfg, argv);
  if (buf != stack_buf) free(buf);
  return TECORE_SUCCESS;
}
