#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# header-cxx.sh -- libte's public headers as a C++ program sees them:
#  1. each header of libtecore/te, libtegraph/te and libtecomm/te compiles
#     alone under `g++ -fsyntax-only -Wall -Wextra -Werror` (self-contained,
#     extern "C", nothing C-only);
#  2. t/lint/cxx_names.cc names every struct that once shared its name with a
#     function without the `struct` keyword (the functions were renamed:
#     tecore_device_get_props and the others), so it compiles;
#  3. with TE_DEPRECATED_NAMES defined, C++ still sees the old names (a
#     program that wrote `struct` keeps building), and a C call of an old
#     name draws the compiler's deprecation warning naming the new one.
# Needs a C++ compiler (CXX, else g++): exit 77 without one.
# Environment: srcdir, top_builddir (automake, t/Makefile.inc); CC, CXX.
set -u
top=${srcdir:-.}
build=${top_builddir:-.}
CXX=${CXX:-g++}
CC=${CC:-cc}
command -v "$CXX" >/dev/null 2>&1 || { echo "header-cxx: no C++ compiler ($CXX); skipped"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/header-cxx.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
inc="-I$build/libtecore -I$top/libtecore -I$top/libtegraph -I$top/libtecomm"
fail=0

# te/comm_mpi.h needs the caller's MPI: its include path from pkg-config,
# as a system directory (-isystem): -Werror judges libte's header, not
# MPI's own (Open MPI's C++ bindings warn under -Wextra)
mpi_inc=$(pkg-config --cflags-only-I mpich 2>/dev/null || pkg-config --cflags-only-I ompi-c 2>/dev/null) ||
  mpi_inc=
mpi_inc=$(printf '%s\n' $mpi_inc | sed -n 's/^-I/-isystem /p' | tr '\n' ' ')
for h in "$top"/libtecore/te/*.h "$top"/libtegraph/te/*.h "$top"/libtecomm/te/*.h; do
  name=te/${h##*/}
  extra=
  if [ "$name" = te/comm_mpi.h ]; then
    if [ -z "$mpi_inc" ] && ! printf '#include <mpi.h>\n' | $CXX -x c++ -fsyntax-only - 2>/dev/null; then
      echo "header-cxx: note: no MPI headers; <te/comm_mpi.h> not checked"; continue
    fi
    extra=$mpi_inc
  fi
  printf '#include <%s>\nint main() { return 0; }\n' "$name" > "$tmp/one.cc"
  if ! $CXX -std=c++11 -fsyntax-only -Wall -Wextra -Werror $inc $extra "$tmp/one.cc" > "$tmp/out" 2>&1; then
    echo "header-cxx: <$name> does not compile alone as C++:"; cat "$tmp/out"; fail=1
  fi
done

if ! $CXX -std=c++11 -fsyntax-only -Wall -Wextra -Werror $inc "$top/t/lint/cxx_names.cc" > "$tmp/out" 2>&1; then
  echo "header-cxx: t/lint/cxx_names.cc needs 'struct' (a function shares a struct's name?):"
  cat "$tmp/out"; fail=1
fi

cat > "$tmp/old.cc" <<'EOT'
#define TE_DEPRECATED_NAMES 1
#include <te/core.h>
#include <te/offload.h>
int main() {
  struct tecore_device_props p;
  return tecore_device_props(0, &p) != TECORE_SUCCESS;
}
EOT
if ! $CXX -std=c++11 -fsyntax-only -Wno-deprecated-declarations -Werror $inc "$tmp/old.cc" > "$tmp/out" 2>&1; then
  echo "header-cxx: with TE_DEPRECATED_NAMES, C++ does not see tecore_device_props:"
  cat "$tmp/out"; fail=1
fi

cat > "$tmp/old.c" <<'EOT'
#include <te/core.h>
int main(void) {
  struct tecore_device_props p;
  return tecore_device_props(0, &p) != TECORE_SUCCESS;
}
EOT
if $CC -fsyntax-only -Werror=deprecated-declarations $inc "$tmp/old.c" > "$tmp/out" 2>&1; then
  echo "header-cxx: calling tecore_device_props from C draws no deprecation warning"; fail=1
elif ! grep -q tecore_device_get_props "$tmp/out"; then
  echo "header-cxx: the deprecation warning does not name tecore_device_get_props:"
  cat "$tmp/out"; fail=1
fi

[ $fail -eq 0 ] && echo "header-cxx: every public header compiles as C++ and no struct needs 'struct'"
exit $fail
