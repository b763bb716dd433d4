/* SPDX-License-Identifier: Apache-2.0
 * dlpack_user.c -- compiled (as C and as C++, never run) by
 * t/core/dlpack-order.sh: a program that includes a framework's dlpack.h and
 * <te/core.h> in the order TE_T_ORDER says, hands a framework DLTensor to
 * libtecore and back, and uses the DLPack 1.x types libtecore does not
 * need (DLManagedTensorVersioned, the flag bits), which must still be
 * there whoever declared them.  TE_T_WANT_FW: 1 when the framework's
 * declarations must be the ones in use (it was included first), 0 when
 * te/dlpack.h's must (it came first; the framework's was then a no-op). */
#if TE_T_ORDER == 1
#include <dlpack/dlpack.h>
#include <te/core.h>
#elif TE_T_ORDER == 2
#include <te/core.h>
#include <dlpack/dlpack.h>
#else
#include <te/dlpack.h>
#include <te/dlpack.h>
#include <te/core.h>
#endif

#if TE_T_WANT_FW && !defined(FW_DLPACK_STANDIN)
#error "the framework's dlpack.h came first but its declarations are not in use"
#endif
#if !TE_T_WANT_FW && !defined(TE_DLPACK_DECLARED)
#error "te/dlpack.h came first but its declarations are not in use"
#endif
#if DLPACK_MAJOR_VERSION != 1
#error "DLPACK_MAJOR_VERSION is not 1"
#endif

static void release(DLManagedTensorVersioned *self) { (void)self; }

int te_t_dlpack_user(void *data, int64_t *shape) {
  DLManagedTensorVersioned m;
  m.version.major = DLPACK_MAJOR_VERSION;
  m.version.minor = DLPACK_MINOR_VERSION;
  m.manager_ctx = 0;
  m.deleter = release;
  m.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
  m.dl_tensor.data = data;
  m.dl_tensor.device.device_type = kDLCPU;
  m.dl_tensor.device.device_id = 0;
  m.dl_tensor.ndim = 2;
  m.dl_tensor.dtype.code = kDLFloat;
  m.dl_tensor.dtype.bits = 32;
  m.dl_tensor.dtype.lanes = 1;
  m.dl_tensor.shape = shape;
  m.dl_tensor.strides = 0;
  m.dl_tensor.byte_offset = 0;
  struct tecore_tensor t;
  if (tecore_tensor_from_dlpack(&m.dl_tensor, &t) != TECORE_SUCCESS) return 1;
  DLTensor back;
  int64_t sh[TECORE_TENSOR_MAX_DIMS], st[TECORE_TENSOR_MAX_DIMS];
  return tecore_tensor_to_dlpack(&t, 0, &back, sh, st) != TECORE_SUCCESS;
}
