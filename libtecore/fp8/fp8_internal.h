/* SPDX-License-Identifier: Apache-2.0 */
/* fp8_internal.h -- private header of libtecore's FP8 code (quantize,
 * recipes).  What the FP8 family shares with the other kernel
 * families -- tensor checks, the 2-D view, dtype predicates, the FP8
 * output-pass protocol -- is the kernel-support layer below it
 * (ksupport/ksupport.h), which this header brings in for the files that
 * include it. */
#ifndef TECORE_FP8_INTERNAL_H
#define TECORE_FP8_INTERNAL_H

#include "ksupport/ksupport.h"

#endif
