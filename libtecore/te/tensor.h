/* SPDX-License-Identifier: Apache-2.0 */
/* te/tensor.h -- the tensor descriptor every libtecore kernel takes: element
 * type, shape, rowwise and columnwise data, and the scale buffers of its
 * scaling mode; validation; required scale-buffer shapes; DLPack import
 * and export without copies.
 *
 * A descriptor owns nothing.  Every pointer in it is a device address the
 * caller allocated (tecore_mem_alloc) and frees; the descriptor is plain
 * data, copied by value, and may live on the stack.
 *
 * Shapes.  Up to TECORE_TENSOR_MAX_DIMS dimensions, row-major, compact.
 * Kernels see a tensor as its 2-D view: cols = the last dimension,
 * rows = the product of all the others (1 for a 1-D tensor; a 0-D tensor
 * is 1 x 1).
 *
 * Scaling modes and the buffers each needs (rows x cols is the 2-D view;
 * "cdiv" rounds up):
 *
 *   TECORE_SCALING_NONE          plain data (F32, F16, BF16, or any dtype as
 *                                bytes); no scales.  amax may still be set
 *                                where a kernel offers to compute it.
 *   TECORE_SCALING_DELAYED       per-tensor FP8 (E4M3/E5M2), q = fp8(x * scale);
 *   TECORE_SCALING_CURRENT       scale, scale_inv, amax: one float each.
 *                                Delayed: the kernel reads *scale (set by the
 *                                recipe from the amax history).  Current: the
 *                                kernel computes amax, then *scale from it
 *                                (amax_epsilon, TECORE_TENSOR_POW2_SCALES),
 *                                then quantizes; it needs amax and overwrites
 *                                it with this tensor's amax.  Both write
 *                                *scale_inv; delayed max-accumulates |x| into
 *                                *amax when amax is set (the recipe resets it).
 *                                columnwise_data is the transpose [cols][rows];
 *                                columnwise_scale_inv is optional (0: scale_inv
 *                                serves both; else it gets the same value).
 *   TECORE_SCALING_MXFP8         1x32 blocks with E8M0 scales (OCP MX).
 *                                rowwise: data [rows][cols], blocks of 32 along
 *                                a row, scale_inv E8M0 [rows][cdiv(cols,32)].
 *                                columnwise: columnwise_data has the SAME layout
 *                                as data ([rows][cols], not transposed), blocks
 *                                of 32 along a column, columnwise_scale_inv
 *                                E8M0 [cdiv(rows,32)][cols].
 *   TECORE_SCALING_BLOCK_1X128   FP32 scale_inv per block (powers of two with
 *   TECORE_SCALING_BLOCK_128X128 TECORE_TENSOR_POW2_SCALES); per-block scale =
 *                                fp8_max / max(block amax, amax_epsilon).
 *                                rowwise data [rows][cols]; columnwise_data the
 *                                transpose [cols][rows].
 *                                1x128:   scale_inv [rows][cdiv(cols,128)],
 *                                         columnwise_scale_inv
 *                                         [cols][cdiv(rows,128)] (blocks of 128
 *                                         along a row of the transpose).
 *                                128x128: scale_inv [cdiv(rows,128)][cdiv(cols,128)],
 *                                         columnwise_scale_inv
 *                                         [cdiv(cols,128)][cdiv(rows,128)].
 *   All scale arrays are compact row-major (no padding).  In the block and
 *   MXFP8 modes amax and scale are optional; when amax is set the kernel
 *   also max-accumulates the tensor's |x| into it.
 *
 * Alignment rule.  data and columnwise_data must be aligned to their element
 * size; amax, scale and FP32 scale_inv to 4 bytes.  Kernels take 16-byte
 * vector paths when a pointer is 16-byte aligned (and, for 2-D kernels,
 * when a row's bytes are a multiple of 16) and slower element paths
 * otherwise, so 16-byte alignment is a speed matter, not a correctness one;
 * kernels that require it say so and check with TECORE_TENSOR_ALIGN16.
 * tecore_mem_alloc returns 256-byte aligned memory. */
#ifndef TE_TENSOR_H
#define TE_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include <te/result.h>
#include <te/dtype.h>
#include <te/device.h>
#include <te/dlpack.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TECORE_TENSOR_MAX_DIMS 8

typedef enum tecore_scaling_mode {
  TECORE_SCALING_NONE = 0,
  TECORE_SCALING_DELAYED = 1,        /* per-tensor, scale read from *scale */
  TECORE_SCALING_CURRENT = 2,        /* per-tensor, scale from this tensor's amax */
  TECORE_SCALING_MXFP8 = 3,          /* 1x32 blocks, E8M0 scales */
  TECORE_SCALING_BLOCK_1X128 = 4,    /* 1x128 blocks, FP32 scales */
  TECORE_SCALING_BLOCK_128X128 = 5,  /* 128x128 blocks, FP32 scales */
  TECORE_SCALING_COUNT_
} tecore_scaling_mode_t;

/* tecore_tensor.flags */
#define TECORE_TENSOR_POW2_SCALES 0x1u  /* current/block: round scales down to 2^k */

struct tecore_tensor {
  tecore_dtype_t dtype;              /* of data and columnwise_data */
  tecore_scaling_mode_t scaling;
  int ndim;                          /* 0 .. TECORE_TENSOR_MAX_DIMS */
  size_t shape[TECORE_TENSOR_MAX_DIMS];
  tecore_devptr_t data;              /* rowwise, [rows][cols]; 0 if absent */
  tecore_devptr_t columnwise_data;   /* see the mode table above; 0 if absent */
  tecore_devptr_t amax;              /* float[1] or 0 */
  tecore_devptr_t scale;             /* float[1] (per-tensor modes) or 0 */
  tecore_devptr_t scale_inv;         /* rowwise scale_inv (see above) or 0 */
  tecore_devptr_t columnwise_scale_inv;
  float amax_epsilon;                /* current and block scaling: amax floor (>= 0) */
  unsigned flags;                    /* TECORE_TENSOR_* */
  int device;                        /* device ordinal (from DLPack; 0 by default) */
};

/* Sets *t to a plain (TECORE_SCALING_NONE) tensor of dtype and shape over
 * data (which may be 0, to be set later); every other field 0.
 * shape may be NULL when ndim is 0. */
tecore_result_t tecore_tensor_init(struct tecore_tensor *t, tecore_dtype_t dtype, int ndim,
                                   const size_t *shape, tecore_devptr_t data);
/* Number of elements (product of the shape; 1 for ndim 0; 0 when t is NULL
 * or malformed). */
size_t tecore_tensor_numel(const struct tecore_tensor *t);
/* The 2-D view: *cols = last dimension, *rows = product of the others. */
tecore_result_t tecore_tensor_2d(const struct tecore_tensor *t, size_t *rows, size_t *cols);

/* The scale_inv buffer a mode needs (columnwise = 0: rowwise scale_inv;
 * 1: columnwise_scale_inv), as a 2-D array *srows x *scols of *dtype
 * (F32, or E8M0 for MXFP8).  Per-tensor modes: 1 x 1 F32.  NONE: 0 x 0.
 * Bytes to allocate: srows * scols * tecore_dtype_size(*dtype). */
tecore_result_t tecore_tensor_scale_shape(const struct tecore_tensor *t, int columnwise,
                                          size_t *srows, size_t *scols, tecore_dtype_t *dtype);

/* Validation flags: what the caller is about to use. */
#define TECORE_TENSOR_ROWWISE 0x1u     /* data and (scaled modes) scale_inv must be set */
#define TECORE_TENSOR_COLUMNWISE 0x2u  /* columnwise_data and its scale_inv must be set */
#define TECORE_TENSOR_NEED_SCALE 0x4u  /* per-tensor: scale must be set */
#define TECORE_TENSOR_NEED_AMAX 0x8u   /* amax must be set */
#define TECORE_TENSOR_ALIGN16 0x10u    /* data pointers must be 16-byte aligned */

/* Checks that *t is well formed (dtype known, ndim in range, no dimension
 * 0 unless the whole tensor is empty, scaling mode known and consistent
 * with dtype: the FP8 modes need E4M3 or E5M2), that the buffers flags ask
 * for are set, and the alignment rule.  On failure returns
 * TECORE_ERR_INVALID and a detail naming the field. */
tecore_result_t tecore_tensor_validate(const struct tecore_tensor *t, unsigned flags);

/* "none", "delayed", "current", "mxfp8", "block1x128", "block128x128", "?" */
const char *tecore_scaling_name(tecore_scaling_mode_t mode);

/* ---- DLPack ----------------------------------------------------------------
 * DLTensor and its parts come from te/dlpack.h, which steps aside for a
 * framework's own dlpack.h included first and makes one included later a
 * no-op (the standard DLPACK_DLPACK_H_ guard), so either order compiles. */

/* Describes a DLTensor as a plain tensor (TECORE_SCALING_NONE) over the
 * same memory, no copy: data = dl->data + byte_offset.  Accepted: device
 * kDLCUDA, kDLCUDAHost, kDLCUDAManaged (and kDLCPU on the vdev backend,
 * whose device memory is host memory); lanes 1; dtypes f32, f16, bf16,
 * f64, float8_e4m3fn, float8_e5m2, float8_e8m0fnu, int32, int64, uint8
 * (and bool as U8); strides NULL or compact row-major (a dimension of
 * extent 1 may have any stride); ndim <= TECORE_TENSOR_MAX_DIMS.  The
 * DLTensor's memory stays its producer's. */
tecore_result_t tecore_tensor_from_dlpack(const DLTensor *dl, struct tecore_tensor *t);
/* Describes t's rowwise data (columnwise = 0) or its columnwise data
 * (columnwise = 1; shape [cols][rows] where the mode transposes) as a
 * DLTensor, no copy.  shape and strides are caller storage of at least
 * TECORE_TENSOR_MAX_DIMS entries that dl points into; they must outlive
 * dl.  Device: kDLCUDA (cuda backend) or kDLCPU (vdev). */
tecore_result_t tecore_tensor_to_dlpack(const struct tecore_tensor *t, int columnwise,
                                        DLTensor *dl, int64_t *shape, int64_t *strides);

#ifdef __cplusplus
}
#endif
#endif
