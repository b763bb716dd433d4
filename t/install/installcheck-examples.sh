#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# t/install/installcheck-examples.sh -- make installcheck builds every example
# INSTALLED under $docdir/examples (examples/Makefile.inc) against the
# installed prefix and runs it on vdev with no LD_LIBRARY_PATH:
#   the C ones with the link line of the installed .pc files (te-core,
#   te-graph, te-comm) and their libdir as run path;
#   graphed_callables.cpp through its CMakeLists.txt (find_package(libte));
#   rmsnorm_fp8.f90 and train_block.f90 with FC (gfortran) and pkg-config
#   te-fortran (train_block: its last line must say the loss fell);
#   allreduce_tcp with a random TECOMM_SECRET (64 hex digits) and
#   TECOMM_INSECURE=1 in both ranks' environment; offload with its spill
#   directory in a temporary folder; allreduce_mpi with the mpicc of each
#   MPI configure found (MPICC_MPICH, MPICC_OPENMPI, MPICC_OTHER), run as
#   3 ranks under that MPI's mpirun (none found: not run, and said so).
# Each example checks its own results and exits non-zero on a wrong one;
# the build line of each one's opening comment must carry -Wl,-rpath.
# Exit 0 all passed; 1 one failed (or is not installed); 77 when nothing
# failed but a compiler was missing (no C++ compiler or cmake for the C++
# example, no Fortran compiler, or libte built without its Fortran
# modules), so that example did not run; pkg-config or CC missing skips all.
set -u
PKG_CONFIG=${PKG_CONFIG:-pkg-config}
CC=${CC:-cc}
CMAKE=${CMAKE:-cmake}
FC=${FC:-gfortran}
command -v "$PKG_CONFIG" >/dev/null 2>&1 || { echo "no pkg-config"; exit 77; }
command -v "${CC%% *}" >/dev/null 2>&1 || { echo "no C compiler ($CC)"; exit 77; }
ex=${docdir:?}/examples
tmp=$(mktemp -d "${TMPDIR:-/tmp}/te-examples.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
export PKG_CONFIG_PATH="$libdir/pkgconfig"
export TE_DEVICE=vdev
fail=0 skipped=""
for f in README fp8_gemm.c train_step.c tutorial_layer.c graphed_callables.cpp CMakeLists.txt rmsnorm_fp8.f90 train_block.f90 \
    allreduce_tcp.c allreduce_mpi.c offload.c; do
  [ -f "$ex/$f" ] || { echo "$ex/$f: not installed"; fail=1; }
done
[ $fail = 0 ] || exit 1
# the build line in each opening comment names the run path: without it,
# a prefix the loader does not search gives a binary that cannot start
for f in fp8_gemm.c train_step.c tutorial_layer.c rmsnorm_fp8.f90 train_block.f90 allreduce_tcp.c \
    allreduce_mpi.c offload.c; do
  head -n 30 "$ex/$f" | grep -q -- '-Wl,-rpath,' || { echo "FAIL: $f: its build line has no -Wl,-rpath"; fail=1; }
done

# run NAME COMMAND...: runs an example, its output in the log
run() {
  name=$1
  shift
  echo "== $name"
  if env -u LD_LIBRARY_PATH "$@"; then
    echo "PASS: $name"
  else
    echo "FAIL: $name (exit $?)"
    fail=1
  fi
}

# the C examples, each with the package its header needs
for e in fp8_gemm:te-core train_step:te-core tutorial_layer:te-core offload:te-graph allreduce_tcp:te-comm; do
  name=${e%%:*} pc=${e#*:}
  # shellcheck disable=SC2046
  if ! $CC -std=c99 -Wall -Werror -o "$tmp/$name" "$ex/$name.c" \
      $($PKG_CONFIG --cflags --libs "$pc") -lm -Wl,-rpath,"$($PKG_CONFIG --variable=libdir "$pc")"; then
    echo "FAIL: $name.c did not build"
    fail=1
    continue
  fi
  case $name in
  offload) mkdir -p "$tmp/spill"; run "$name" "$tmp/$name" "$tmp/spill" ;;
  allreduce_tcp)
    secret=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
    run "$name" env TECOMM_SECRET="$secret" TECOMM_INSECURE=1 "$tmp/$name" ;;
  *) run "$name" "$tmp/$name" ;;
  esac
done

# the MPI example, with each MPI's own mpicc (te/comm_mpi.h) and mpirun
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpis=0
for m in "mpich|${MPICC_MPICH:-}|${MPIRUN_MPICH:-}" "openmpi|${MPICC_OPENMPI:-}|${MPIRUN_OPENMPI:-}" \
    "other|${MPICC_OTHER:-}|${MPIRUN_OTHER:-}"; do
  name=${m%%|*} rest=${m#*|}
  mpicc=${rest%%|*} mpirun=${rest#*|}
  [ -n "$mpicc" ] && [ -n "$mpirun" ] || continue
  mpis=$((mpis + 1))
  # shellcheck disable=SC2046
  if ! $mpicc -std=c99 -Wall -Werror -o "$tmp/allreduce_mpi-$name" "$ex/allreduce_mpi.c" \
      $($PKG_CONFIG --cflags --libs te-comm) -Wl,-rpath,"$($PKG_CONFIG --variable=libdir te-comm)"; then
    echo "FAIL: allreduce_mpi.c did not build with $mpicc"
    fail=1
    continue
  fi
  flags=
  "$mpirun" --version 2>&1 | grep -q "Open MPI\|OpenRTE" && flags=--oversubscribe
  run "allreduce_mpi ($name)" timeout 120 "$mpirun" $flags -n 3 "$tmp/allreduce_mpi-$name"
done
[ $mpis -gt 0 ] || echo "note: no mpicc and mpirun configured: allreduce_mpi.c not run"

# the C++ example, through CMake (its own C++ compiler test says when there is none)
if ! command -v "$CMAKE" >/dev/null 2>&1; then
  skipped="$skipped graphed_callables.cpp (no cmake)"
elif "$CMAKE" -S "$ex" -B "$tmp/cmake" -DCMAKE_PREFIX_PATH="$prefix" > "$tmp/cmake.log" 2>&1; then
  if "$CMAKE" --build "$tmp/cmake"; then
    run graphed_callables "$tmp/cmake/graphed_callables"
  else
    echo "FAIL: graphed_callables.cpp did not build"
    fail=1
  fi
elif grep -q 'No CMAKE_CXX_COMPILER could be found' "$tmp/cmake.log"; then
  skipped="$skipped graphed_callables.cpp (no C++ compiler)"
else
  cat "$tmp/cmake.log"
  echo "FAIL: cmake could not configure the examples against $prefix"
  fail=1
fi

# the Fortran examples; train_block's exit status says whether the loss
# fell below half, its last line is checked too
if ! command -v "$FC" >/dev/null 2>&1; then
  skipped="$skipped rmsnorm_fp8.f90 train_block.f90 (no Fortran compiler $FC)"
elif [ ! -f "$libdir/pkgconfig/te-fortran.pc" ]; then
  skipped="$skipped rmsnorm_fp8.f90 train_block.f90 (libte built without its Fortran modules)"
else
  for name in rmsnorm_fp8 train_block; do
    # shellcheck disable=SC2046
    if ! (cd "$tmp" && "$FC" -o "$name" "$ex/$name.f90" $($PKG_CONFIG --cflags --libs te-fortran) \
        -Wl,-rpath,"$($PKG_CONFIG --variable=libdir te-fortran)"); then
      echo "FAIL: $name.f90 did not build"
      fail=1
      continue
    fi
    # the output kept for the check below ($1 is the inner sh's)
    # shellcheck disable=SC2016
    run "$name" sh -c '"$1" > "$1.out" 2>&1; rc=$?; cat "$1.out"; exit $rc' sh "$tmp/$name"
  done
  if [ -f "$tmp/train_block.out" ] && ! tail -n 1 "$tmp/train_block.out" | grep -q "^train_block: the loss fell from"; then
    echo "FAIL: train_block did not say the loss fell"
    fail=1
  fi
fi

[ $fail = 0 ] || exit 1
if [ -n "$skipped" ]; then
  echo "not run:$skipped"
  exit 77
fi
echo "every example built against $prefix and passed"
