#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# dlpack-order.sh -- <te/core.h> beside a framework's dlpack.h, in either
# order, is no redefinition (te/dlpack.h: the standard DLPACK_DLPACK_H_
# guard).  t/core/dlpack_user.c is compiled with the stand-in framework header
# t/fw/dlpack/dlpack.h included before <te/core.h>, after it, and with
# te/dlpack.h alone (included twice), as C99 and as C++11, warnings as
# errors; each case also checks whose declarations ended up in use.
# Environment: srcdir, top_builddir (automake, t/Makefile.inc); CC, CXX.
# Exit 77 when neither compiler is found.
set -u
top=${srcdir:-.}
build=${top_builddir:-.}
CC=${CC:-cc}
CXX=${CXX:-g++}
inc="-I$top/t/fw -I$build/libtecore -I$top/libtecore"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlpack-order.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
fail=0 ran=0

try() {   # try LANG "COMPILER" "FLAGS": each order with that compiler
  lang=$1 comp=$2 flags=$3
  command -v "${comp%% *}" >/dev/null 2>&1 || { echo "dlpack-order: no $lang compiler ($comp)"; return; }
  for order in 1 2 3; do
    case $order in
      1) want=1 what="framework dlpack.h first" ;;
      2) want=0 what="framework dlpack.h after te/core.h" ;;
      *) want=0 what="te/dlpack.h alone, twice" ;;
    esac
    # shellcheck disable=SC2086
    if $comp $flags -fsyntax-only -Wall -Wextra -Werror -DTE_T_ORDER=$order -DTE_T_WANT_FW=$want \
        $inc "$src" > "$tmp/out" 2>&1; then
      ran=$((ran + 1))
    else
      echo "dlpack-order: $lang, $what: does not compile:"; cat "$tmp/out"; fail=1
    fi
  done
}

src=$top/t/core/dlpack_user.c
try C "$CC" "-std=c99 -pedantic"
cp "$top/t/core/dlpack_user.c" "$tmp/dlpack_user.cc"
src=$tmp/dlpack_user.cc
try C++ "$CXX" "-std=c++11"
[ $ran -eq 0 ] && { echo "dlpack-order: no compiler ran; skipped"; exit 77; }
[ $fail -eq 0 ] && echo "dlpack-order: $ran compilations, both orders, no redefinition"
exit $fail
