dnl SPDX-License-Identifier: Apache-2.0
dnl te.m4 -- libte's own configure checks: warnings, CUDA toolkit, options.

dnl TE_CC_WARNINGS: the warnings (and code-generation rules) every file
dnl builds with.  -ffp-contract=off: no multiply fused into a following add
dnl behind the code's back, so the element math of kernels/common gives the
dnl GPU's bits on any host (gnu11 would allow fusing on FMA targets).
AC_DEFUN([TE_CC_WARNINGS], [
  TE_CFLAGS="-std=gnu11 -ffp-contract=off -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wno-unused-parameter -fvisibility=hidden"
  AC_SUBST([TE_CFLAGS])
])

dnl AX_PTHREAD_SIMPLE: -pthread for compile and link (gcc and clang both take it).
AC_DEFUN([AX_PTHREAD_SIMPLE], [
  PTHREAD_CFLAGS=-pthread
  PTHREAD_LIBS=-pthread
  AC_SUBST([PTHREAD_CFLAGS])
  AC_SUBST([PTHREAD_LIBS])
])

dnl TE_CHECK_CUDA: --with-cuda[=DIR], --with-cuda-arch=LIST.
dnl Finds cuda.h and nvcc.  Nothing links -lcuda: the driver is dlopen'ed at
dnl run time.  Without a toolkit the libraries build with the vdev backend only.
AC_DEFUN([TE_CHECK_CUDA], [
  AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda@<:@=DIR@:>@],
      [CUDA toolkit to build the cuda backend and kernels with (default: /usr/local/cuda when present)])],
    [], [with_cuda=check])
  AC_ARG_WITH([cuda-arch],
    [AS_HELP_STRING([--with-cuda-arch=LIST],
      [SASS architectures, space separated (default: "90 90a"); PTX for the first is always added for newer GPUs])],
    [], [with_cuda_arch="90 90a"])
  have_cuda=no
  te_cuda_summary="no (vdev backend only)"
  te_cuda_arch_summary="none"
  te_backends_extra=""
  CUDA_HOME=""
  AS_CASE([$with_cuda],
    [no], [],
    [yes|check], [AS_IF([test -f /usr/local/cuda/include/cuda.h], [CUDA_HOME=/usr/local/cuda])],
    [CUDA_HOME=$with_cuda])
  AS_IF([test -n "$CUDA_HOME"], [
    AS_IF([test -f "$CUDA_HOME/include/cuda.h"], [], [AC_MSG_ERROR([no cuda.h under $CUDA_HOME/include])])
    AC_PATH_PROG([NVCC], [nvcc], [], [$CUDA_HOME/bin$PATH_SEPARATOR$PATH])
    AS_IF([test -z "$NVCC"], [AC_MSG_ERROR([nvcc not found under $CUDA_HOME/bin])])
    AC_PATH_PROG([CUOBJDUMP], [cuobjdump], [], [$CUDA_HOME/bin$PATH_SEPARATOR$PATH])
    CUDA_CPPFLAGS="-I$CUDA_HOME/include"
    te_cuda_version=`sed -n 's/^#define CUDA_VERSION \(@<:@0-9@:>@*\).*/\1/p' "$CUDA_HOME/include/cuda.h"`
    AS_IF([test "0$te_cuda_version" -lt 12040],
      [AC_MSG_ERROR([CUDA $te_cuda_version is too old: libte needs 12.4 or newer (cuLibraryLoadData, cuLaunchKernelEx)])])
    NVCC_GENCODE=""
    te_first_arch=""
    for a in $with_cuda_arch; do
      base=`echo $a | sed 's/@<:@a-z@:>@*$//'`
      test -n "$te_first_arch" || te_first_arch=$base
      NVCC_GENCODE="$NVCC_GENCODE -gencode arch=compute_$a,code=sm_$a"
    done
    dnl the same machine code without the PTX: code that calls the device
    dnl runtime (relocatable, linked with cudadevrt) cannot be JIT-linked
    dnl from PTX when the driver loads it
    NVCC_GENCODE_SASS="$NVCC_GENCODE"
    dnl kernels/attention.cu holds wgmma kernels: where sm_90a is built, its
    dnl fatbin carries no plain sm_90 code, so a Hopper GPU loads the sm_90a
    dnl machine code (the plain build of those kernels is a trap)
    te_have_90a=no
    for a in $with_cuda_arch; do test "x$a" = x90a && te_have_90a=yes; done
    NVCC_GENCODE_WG=""
    for a in $with_cuda_arch; do
      AS_IF([test "x$a" = x90 && test $te_have_90a = yes], [],
        [NVCC_GENCODE_WG="$NVCC_GENCODE_WG -gencode arch=compute_$a,code=sm_$a"])
    done
    NVCC_GENCODE_WG="$NVCC_GENCODE_WG -gencode arch=compute_$te_first_arch,code=compute_$te_first_arch"
    AS_IF([test $te_have_90a = yes],
      [AC_DEFINE([TE_CUDA_HAVE_SM90A], [1], [sm_90a machine code is built (wgmma kernels)])])
    NVCC_GENCODE="$NVCC_GENCODE -gencode arch=compute_$te_first_arch,code=compute_$te_first_arch"
    have_cuda=yes
    te_cuda_summary="$CUDA_HOME (CUDA_VERSION $te_cuda_version)"
    te_cuda_arch_summary="sm_`echo $with_cuda_arch | sed 's/ /, sm_/g'` + PTX compute_$te_first_arch"
    te_backends_extra=", cuda"
    AC_DEFINE([TE_HAVE_CUDA], [1], [the cuda backend and kernels are built])
    AC_DEFINE_UNQUOTED([TE_CUDA_TOOLKIT_VERSION], [$te_cuda_version], [CUDA_VERSION of the build toolkit])
  ])
  AC_DEFINE_UNQUOTED([TE_CUDA_ARCH_SUMMARY], ["$te_cuda_arch_summary"], [architectures in the fatbins])
  AC_SUBST([CUDA_HOME])
  AC_SUBST([CUDA_CPPFLAGS])
  AC_SUBST([NVCC_GENCODE])
  AC_SUBST([NVCC_GENCODE_SASS])
  AC_SUBST([NVCC_GENCODE_WG])
  AM_CONDITIONAL([HAVE_CUDA], [test "x$have_cuda" = xyes])
  AM_CONDITIONAL([HAVE_CUOBJDUMP], [test -n "$CUOBJDUMP"])
])

dnl TE_OPTIONS: --enable-debug, --enable-sanitizers.
AC_DEFUN([TE_OPTIONS], [
  AC_ARG_ENABLE([debug],
    [AS_HELP_STRING([--enable-debug], [build with -O0 -g3 and internal consistency checks])],
    [], [enable_debug=no])
  AS_IF([test "x$enable_debug" = xyes], [
    TE_CFLAGS="$TE_CFLAGS -O0 -g3"
    AC_DEFINE([TE_DEBUG_BUILD], [1], [internal consistency checks])
  ])
  AC_ARG_ENABLE([sanitizers],
    [AS_HELP_STRING([--enable-sanitizers], [build with AddressSanitizer and UndefinedBehaviorSanitizer])],
    [], [enable_sanitizers=no])
  SAN_FLAGS=""
  AS_IF([test "x$enable_sanitizers" = xyes], [
    SAN_FLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
  ])
  AC_SUBST([SAN_FLAGS])
  dnl a library with an undefined symbol fails at its own link, not in a
  dnl program later; the sanitizer runtimes are resolved by the programs
  TE_LIB_LDFLAGS="-Wl,--no-undefined"
  AS_IF([test "x$enable_sanitizers" = xyes], [TE_LIB_LDFLAGS=""])
  AC_SUBST([TE_LIB_LDFLAGS])
  AC_DEFINE_UNQUOTED([TE_CONFIG_FLAGS], ["debug=$enable_debug sanitizers=$enable_sanitizers"], [configure options])
])
