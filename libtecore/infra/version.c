/* SPDX-License-Identifier: Apache-2.0 */
/* version.c -- run-time version and build configuration. */
#include "internal.h"

TE_EXPORT void tecore_version(int *major, int *minor, int *patch) {
  if (major) *major = TECORE_VERSION_MAJOR;
  if (minor) *minor = TECORE_VERSION_MINOR;
  if (patch) *patch = TECORE_VERSION_PATCH;
}

TE_EXPORT const char *tecore_version_string(void) { return TECORE_VERSION_STRING; }

#ifdef TE_HAVE_CUDA
#define TE_STR2_(x) #x
#define TE_STR_(x) TE_STR2_(x)
#define TE_CFG_CUDA "cuda=yes toolkit=" TE_STR_(TE_CUDA_TOOLKIT_VERSION)
#else
#define TE_CFG_CUDA "cuda=no"
#endif

TE_EXPORT const char *tecore_build_config(void) {
  return TE_CFG_CUDA " arch=\"" TE_CUDA_ARCH_SUMMARY "\" " TE_CONFIG_FLAGS;
}
