#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# t/install/installcheck-cmake.sh -- make installcheck configures and builds the
# CMake project t/install/project/CMakeLists.txt (a C++ consumer of the
# imported targets libte::graph and libte::comm; where libte's Fortran
# modules are installed, a Fortran consumer of libte::fortran too, built
# with the compiler libte was built with, FC) against the installed
# libteConfig.cmake, runs them with no LD_LIBRARY_PATH, and checks that the
# version file refuses a series this libte is not (find_package(libte 9.0))
# and that the package refuses a component it lacks.
# Exit 0 pass, 1 fail, 77 when cmake or a C++ compiler is missing.
set -u
CMAKE=${CMAKE:-cmake}
command -v "$CMAKE" >/dev/null 2>&1 || { echo "no cmake (configure found none)"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/te-cmake.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
cfg=$libdir/cmake/libte/libteConfig.cmake
[ -f "$cfg" ] || { echo "$cfg: not installed"; exit 1; }
[ -f "$libdir/cmake/libte/libteConfigVersion.cmake" ] || { echo "no libteConfigVersion.cmake"; exit 1; }

# the Fortran consumer where the modules are installed (a libte built
# without a Fortran compiler has none to test)
fortran=OFF
if [ -f "$libdir/libtefortran.so" ]; then
  fortran=ON
  [ -f "$includedir/te/finclude/te_core.mod" ] || { echo "libtefortran without te_core.mod"; exit 1; }
fi
echo "Fortran consumer: $fortran (FC=${FC:-})"

# CMake's own C++ compiler test says when there is none: a skip, not a failure
"$CMAKE" -S "$top_srcdir/t/install/project" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release -DLIBTE_CONSUMER_FORTRAN=$fortran \
  ${FC:+-DCMAKE_Fortran_COMPILER="$FC"} > "$tmp/configure.log" 2>&1
rc=$?
cat "$tmp/configure.log"
if [ $rc != 0 ]; then
  grep -q 'No CMAKE_CXX_COMPILER could be found' "$tmp/configure.log" && { echo "no C++ compiler"; exit 77; }
  echo "cmake could not configure the consumer against $prefix"
  exit 1
fi
"$CMAKE" --build "$tmp/build" || { echo "the consumer did not build"; exit 1; }
env -u LD_LIBRARY_PATH "$tmp/build/consumer" || { echo "the consumer failed"; exit 1; }
if [ $fortran = ON ]; then
  env -u LD_LIBRARY_PATH TE_DEVICE=vdev "$tmp/build/fconsumer" ||
    { echo "the Fortran consumer failed"; exit 1; }
fi

# the version file: an incompatible request is refused with a clear reason
mkdir -p "$tmp/v9"
cat > "$tmp/v9/CMakeLists.txt" <<'CML'
cmake_minimum_required(VERSION 3.13)
project(v9 LANGUAGES NONE)
find_package(libte 9.0 CONFIG REQUIRED)
CML
if "$CMAKE" -S "$tmp/v9" -B "$tmp/v9/build" -DCMAKE_PREFIX_PATH="$prefix" > "$tmp/v9.log" 2>&1; then
  echo "find_package(libte 9.0) was satisfied by libte ${PACKAGE_VERSION:-?}"
  exit 1
fi
grep -q 'libteConfigVersion.cmake\|version' "$tmp/v9.log" ||
  { cat "$tmp/v9.log"; echo "find_package(libte 9.0) failed for another reason"; exit 1; }
echo "find_package(libte 9.0) refused, as it must be"

# a component libte does not have is refused, naming it
mkdir -p "$tmp/nocomp"
cat > "$tmp/nocomp/CMakeLists.txt" <<'CML'
cmake_minimum_required(VERSION 3.13)
project(nocomp LANGUAGES NONE)
find_package(libte CONFIG REQUIRED COMPONENTS core python)
CML
if "$CMAKE" -S "$tmp/nocomp" -B "$tmp/nocomp/build" -DCMAKE_PREFIX_PATH="$prefix" \
    > "$tmp/nocomp.log" 2>&1; then
  echo "find_package(libte COMPONENTS python) was satisfied"
  exit 1
fi
grep -q "no component 'python'" "$tmp/nocomp.log" ||
  { cat "$tmp/nocomp.log"; echo "find_package(libte COMPONENTS python) failed for another reason"; exit 1; }
echo "find_package(libte COMPONENTS python) refused, as it must be"
