/* SPDX-License-Identifier: Apache-2.0
 * te/dlpack.h -- the DLPack types libtecore's tensor import and export
 * take (tecore_tensor_from_dlpack, tecore_tensor_to_dlpack: te/tensor.h),
 * declared so that a framework's own dlpack.h may come before or after.
 *
 * DLPack (github.com/dmlc/dlpack) is a C ABI: every framework that speaks
 * it carries a copy of its dlpack.h, and every copy guards itself with the
 * macro DLPACK_DLPACK_H_.  This header follows the same convention:
 *   - a dlpack.h included first (DLPACK_DLPACK_H_, or a DLPack version
 *     macro, defined): its declarations are used and nothing is declared
 *     here;
 *   - this header first: it declares the DLPack 1.1 ABI -- the version
 *     macros, DLPackVersion, DLDeviceType, DLDevice, DLDataTypeCode,
 *     DLDataType, DLTensor, DLManagedTensor, DLManagedTensorVersioned and
 *     the flag bits -- and defines DLPACK_DLPACK_H_, so a dlpack.h included
 *     later sees its guard and adds nothing, and no type is defined twice.
 * The declarations are written from the DLPack specification's layout
 * (layout-compatible with every 1.x dlpack.h; the enumerators are those of
 * 1.1).  TE_DLPACK_DECLARED is defined when this header supplied them. */
#ifndef TE_DLPACK_H
#define TE_DLPACK_H

#if !defined(DLPACK_DLPACK_H_) && !defined(DLPACK_VERSION) && !defined(DLPACK_MAJOR_VERSION)
#define DLPACK_DLPACK_H_
#define TE_DLPACK_DECLARED 1

#include <stddef.h>
#include <stdint.h>

#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 1

#ifdef __cplusplus
#define DLPACK_EXTERN_C extern "C"
#else
#define DLPACK_EXTERN_C
#endif
#ifndef DLPACK_DLL
#define DLPACK_DLL
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version a producer fills in (DLManagedTensorVersioned). */
typedef struct {
  uint32_t major;
  uint32_t minor;
} DLPackVersion;

/* Where the memory lives.  Fixed at 32 bits in C++ as in C. */
#ifdef __cplusplus
typedef enum : int32_t {
#else
typedef enum {
#endif
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLExtDev = 12,
  kDLCUDAManaged = 13,
  kDLOneAPI = 14,
  kDLWebGPU = 15,
  kDLHexagon = 16,
  kDLMAIA = 17
} DLDeviceType;

typedef struct {
  DLDeviceType device_type;
  int32_t device_id;
} DLDevice;

/* What DLDataType.code holds. */
typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLOpaqueHandle = 3U,
  kDLBfloat = 4U,
  kDLComplex = 5U,
  kDLBool = 6U,
  kDLFloat8_e3m4 = 7U,
  kDLFloat8_e4m3 = 8U,
  kDLFloat8_e4m3b11fnuz = 9U,
  kDLFloat8_e4m3fn = 10U,
  kDLFloat8_e4m3fnuz = 11U,
  kDLFloat8_e5m2 = 12U,
  kDLFloat8_e5m2fnuz = 13U,
  kDLFloat8_e8m0fnu = 14U,
  kDLFloat6_e2m3fn = 15U,
  kDLFloat6_e3m2fn = 16U,
  kDLFloat4_e2m1fn = 17U
} DLDataTypeCode;

typedef struct {
  uint8_t code;    /* a DLDataTypeCode */
  uint8_t bits;
  uint16_t lanes;
} DLDataType;

/* A strided view of memory; the producer owns it. */
typedef struct {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides;      /* in elements; NULL means compact row-major */
  uint64_t byte_offset;
} DLTensor;

/* A DLTensor handed over with the deleter its consumer calls when done. */
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

#define DLPACK_FLAG_BITMASK_READ_ONLY (1UL << 0UL)
#define DLPACK_FLAG_BITMASK_IS_COPIED (1UL << 1UL)
#define DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED (1UL << 2UL)

/* The versioned hand-over of DLPack 1.x. */
typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned *self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;

#ifdef __cplusplus
}
#endif

#endif /* declared here */
#endif
