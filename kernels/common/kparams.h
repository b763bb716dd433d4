/* SPDX-License-Identifier: Apache-2.0 */
/* kparams.h -- a kernel's parameters declared once, for nvcc and for C.
 *
 * A kernel's parameter list is an X-macro in kernels/common/, one entry a
 * parameter, in order:
 *
 *   #define TE_FILL_PARAMS(P)                 \
 *     P(void *, dst, ptr)                     \
 *     P(int, dtype, val)                      \
 *     P(unsigned long long, n, val)           \
 *     P(float, value, val)
 *
 * P(type, name, kind); kind says how the parameter travels:
 *   ptr    a device pointer                     (param_is_ptr 1)
 *   nnptr  a device pointer never 0: vdev checks a 0 as an error
 *          (param_is_ptr TECORE_KERNEL_PTR_NONNULL, 2)
 *   rptr   a device pointer, __restrict__ in the kernel (param_is_ptr 1)
 *   val    a scalar by value                    (param_is_ptr 0)
 *   eptr(j, s), nneptr(j, s), reptr(j, s)
 *          ptr, nnptr and rptr for elements whose type is chosen at run
 *          time: a tecore_dtype_t code in 4-bit field s of int parameter
 *          j, or the whole int when s is TE_KP_WHOLE.  The pointer must be
 *          aligned to that element's size (see alignment below).
 *   blk    a parameter block (struct) by value, const in the kernel
 *   gcblk  the same, __grid_constant__ in the kernel (no copy to local
 *          memory); a block's type is written `struct name`.
 * The list generates everything that used to be copied by hand:
 *
 *   nvcc (the kernel's .cu file):
 *     extern "C" __global__ void te_fill(TE_KSIG(TE_FILL_PARAMS)) { ... }
 *     body(TE_KNAMES(TE_FILL_PARAMS));        -- forwards the parameters
 *     struct s { TE_KMEMBERS(TE_FILL_PARAMS) }; -- gathers them
 *   C (the library's table and vdev code):
 *     TE_KARGS(te_fill_args, TE_FILL_PARAMS)
 *       struct te_fill_args { void *dst; int dtype; ... };  one member a
 *       parameter (a block's member points to it); te_fill_args_of(args)
 *       reads a launch's void *args[] into it (vdev); te_fill_args_ptrs(&a,
 *       args) fills void *args[] from it (launch).
 *     TE_KDEF("te_fill", vdev_fill, TE_FILL_PARAMS)
 *       a struct tecore_kernel_def initializer: name, vdev function,
 *       nparams, param_size[] and param_is_ptr[] from the list.
 *
 *     TE_KALIGN(LIST)
 *       a struct te_kalign initializer: the alignment each pointer
 *       parameter needs, libtecore's own record next to the public table
 *       (TE_KERNEL_TABLE_ALIGNED): the pointee's alignment for a typed
 *       pointer (float * 4, const int * 4, struct x * its own), 1 for
 *       void *, or the run-time element size for the e*ptr kinds.  A launch
 *       whose pointer is less aligned is refused (kernel.c): the C kernels
 *       would make a misaligned access (undefined behaviour, a UBSan
 *       abort), a GPU would raise a misaligned-address error.
 *
 * So the .cu signature, the size/pointer tables and the vdev reader cannot
 * disagree.  Any library's kernels may use it: libtecore's do, and
 * libtecomm's and libtegraph's tables (registered through te/kernel.h's
 * tecore_kernel_table_register) can, by including this header. */
#ifndef TE_KERNELS_KPARAMS_H
#define TE_KERNELS_KPARAMS_H

/* ---- the kernel's signature and forwarding (nvcc) --------------------------- */

#define TE_KP_SIG_ptr(t, n) t n
#define TE_KP_SIG_nnptr(t, n) t n
#define TE_KP_SIG_rptr(t, n) t __restrict__ n
#define TE_KP_SIG_val(t, n) t n
#define TE_KP_SIG_blk(t, n) const t n
#define TE_KP_SIG_gcblk(t, n) const __grid_constant__ t n
/* The e*ptr kinds are function-like: TE_KP_SIG_eptr(j, s) leaves the name
 * of the plain kind's macro, which the (t, n) that follows then calls. */
#define TE_KP_SIG_eptr(j, s) TE_KP_SIG_ptr
#define TE_KP_SIG_nneptr(j, s) TE_KP_SIG_nnptr
#define TE_KP_SIG_reptr(j, s) TE_KP_SIG_rptr
#define TE_KP_SIG_(t, n, k) , TE_KP_SIG_##k(t, n)
#define TE_KP_NAME_(t, n, k) , n
/* Drops the leading comma every entry above writes. */
#define TE_KP_TAIL_(first, ...) __VA_ARGS__
#define TE_KP_TAIL(...) TE_KP_TAIL_(__VA_ARGS__)

/* The parameter declarations of a kernel definition. */
#define TE_KSIG(LIST) TE_KP_TAIL(LIST(TE_KP_SIG_))
/* The parameter names, comma-separated (to forward them to a body). */
#define TE_KNAMES(LIST) TE_KP_TAIL(LIST(TE_KP_NAME_))

/* Members: a pointer or scalar as itself, a block as a pointer to it. */
#define TE_KP_MEMBER_ptr(t, n) t n;
#define TE_KP_MEMBER_nnptr(t, n) t n;
#define TE_KP_MEMBER_rptr(t, n) t n;
#define TE_KP_MEMBER_val(t, n) t n;
#define TE_KP_MEMBER_blk(t, n) const t *n;
#define TE_KP_MEMBER_gcblk(t, n) const t *n;
#define TE_KP_MEMBER_eptr(j, s) TE_KP_MEMBER_ptr
#define TE_KP_MEMBER_nneptr(j, s) TE_KP_MEMBER_nnptr
#define TE_KP_MEMBER_reptr(j, s) TE_KP_MEMBER_rptr
#define TE_KP_MEMBER_(t, n, k) TE_KP_MEMBER_##k(t, n)
/* One member a parameter, in order: struct x { TE_KMEMBERS(LIST) }; (a
 * kernel may gather its parameters so, initialized with TE_KNAMES). */
#define TE_KMEMBERS(LIST) LIST(TE_KP_MEMBER_)

/* ---- the table entry and the typed arguments (C) ------------------------------ */
#ifndef __CUDACC__
#include <stdint.h>

#define TE_KP_ISPTR_ptr 1
#define TE_KP_ISPTR_nnptr 2
#define TE_KP_ISPTR_rptr 1
#define TE_KP_ISPTR_val 0
#define TE_KP_ISPTR_blk 0
#define TE_KP_ISPTR_gcblk 0
#define TE_KP_ISPTR_eptr(j, s) 1
#define TE_KP_ISPTR_nneptr(j, s) 2
#define TE_KP_ISPTR_reptr(j, s) 1
#define TE_KP_COUNT_(t, n, k) +1
#define TE_KP_SIZE_(t, n, k) (uint16_t)sizeof(t),
#define TE_KP_PTRFLAG_(t, n, k) TE_KP_ISPTR_##k,

/* The number of parameters of LIST (a constant expression). */
#define TE_KNPARAMS(LIST) (0 LIST(TE_KP_COUNT_))

/* A struct tecore_kernel_def initializer (te/kernel.h). */
#define TE_KDEF(sym, vdev_fn, LIST)                                                \
  {                                                                                \
    .name = (sym), .vdev = (vdev_fn), .nparams = TE_KNPARAMS(LIST),                \
    .param_size = {LIST(TE_KP_SIZE_)}, .param_is_ptr = { LIST(TE_KP_PTRFLAG_) }    \
  }

/* What each parameter needs of its pointer's alignment: align bytes, or,
 * when dt_param is not TE_KP_NO_DT, the size of the element whose dtype
 * code is 4-bit field dt_slot of int parameter dt_param (the whole int
 * when dt_slot is TE_KP_WHOLE).  Values and
 * blocks need nothing (align 0). */
#define TE_KP_NO_DT 0xff
#define TE_KP_WHOLE 0xff /* dt_slot: the whole int is the dtype code */
struct te_kparam_align {
  uint8_t align;
  uint8_t dt_param;
  uint8_t dt_slot;
};
struct te_kalign {
  struct te_kparam_align p[24]; /* TECORE_KERNEL_MAX_PARAMS (checked in kernel.c) */
};
#define TE_KP_EAT_(...)
/* the pointee's alignment; void pointers 1 (through char, since
 * __alignof__ of void is an extension) */
#define TE_KP_PTR_ALIGN_(t) \
  {(uint8_t)__alignof__(*_Generic((t)0, void *: (char *)0, const void *: (const char *)0, \
                                  default: (t)0)), TE_KP_NO_DT, 0}
#define TE_KP_ALIGN_ptr(t) TE_KP_PTR_ALIGN_(t)
#define TE_KP_ALIGN_nnptr(t) TE_KP_PTR_ALIGN_(t)
#define TE_KP_ALIGN_rptr(t) TE_KP_PTR_ALIGN_(t)
#define TE_KP_ALIGN_val(t) {0, TE_KP_NO_DT, 0}
#define TE_KP_ALIGN_blk(t) {0, TE_KP_NO_DT, 0}
#define TE_KP_ALIGN_gcblk(t) {0, TE_KP_NO_DT, 0}
#define TE_KP_ALIGN_eptr(j, s) {1, (j), (s)} TE_KP_EAT_
#define TE_KP_ALIGN_nneptr(j, s) {1, (j), (s)} TE_KP_EAT_
#define TE_KP_ALIGN_reptr(j, s) {1, (j), (s)} TE_KP_EAT_
#define TE_KP_ALIGN_(t, n, k) TE_KP_ALIGN_##k(t),

/* The struct te_kalign initializer of LIST (see the top of the file). */
#define TE_KALIGN(LIST) \
  {                     \
    { LIST(TE_KP_ALIGN_) } \
  }

/* args[i] points to parameter i's value (te/kernel.h). */
#define TE_KP_READ_ptr(t, n) a.n = *(t const *)args[i++];
#define TE_KP_READ_nnptr(t, n) a.n = *(t const *)args[i++];
#define TE_KP_READ_rptr(t, n) a.n = *(t const *)args[i++];
#define TE_KP_READ_val(t, n) a.n = *(t const *)args[i++];
#define TE_KP_READ_blk(t, n) a.n = (const t *)args[i++];
#define TE_KP_READ_gcblk(t, n) a.n = (const t *)args[i++];
#define TE_KP_READ_eptr(j, s) TE_KP_READ_ptr
#define TE_KP_READ_nneptr(j, s) TE_KP_READ_nnptr
#define TE_KP_READ_reptr(j, s) TE_KP_READ_rptr
#define TE_KP_READ_(t, n, k) TE_KP_READ_##k(t, n)
#define TE_KP_WRITE_ptr(n) args[i++] = (void *)&a->n;
#define TE_KP_WRITE_nnptr(n) args[i++] = (void *)&a->n;
#define TE_KP_WRITE_rptr(n) args[i++] = (void *)&a->n;
#define TE_KP_WRITE_val(n) args[i++] = (void *)&a->n;
#define TE_KP_WRITE_blk(n) args[i++] = (void *)a->n;
#define TE_KP_WRITE_gcblk(n) args[i++] = (void *)a->n;
#define TE_KP_WRITE_eptr(j, s) TE_KP_WRITE_ptr
#define TE_KP_WRITE_nneptr(j, s) TE_KP_WRITE_nnptr
#define TE_KP_WRITE_reptr(j, s) TE_KP_WRITE_rptr
#define TE_KP_WRITE_(t, n, k) TE_KP_WRITE_##k(n)

/* struct tag, tag_of (void *const *args -> struct tag: the vdev side) and
 * tag_ptrs (struct tag * -> void *args[TE_KNPARAMS(LIST)]: the launch
 * side; the args point into the struct, which must outlive the launch
 * call). */
#define TE_KARGS(tag, LIST)                                                        \
  struct tag {                                                                     \
    TE_KMEMBERS(LIST)                                                              \
  };                                                                               \
  TE_KARGS_FNS(tag, LIST)
/* The same functions for a struct tag defined elsewhere (a header that
 * nvcc reads too: its helpers take the kernel's arguments as one). */
#define TE_KARGS_FNS(tag, LIST)                                                    \
  static inline struct tag tag##_of(void *const *args) {                           \
    struct tag a;                                                                  \
    unsigned i = 0;                                                                \
    LIST(TE_KP_READ_)                                                              \
    (void)i;                                                                       \
    return a;                                                                      \
  }                                                                                \
  static inline void tag##_ptrs(struct tag *a, void **args) {                      \
    unsigned i = 0;                                                                \
    LIST(TE_KP_WRITE_)                                                             \
    (void)i;                                                                       \
  }

#endif /* !__CUDACC__ */
#endif
