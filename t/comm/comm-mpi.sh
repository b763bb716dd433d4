#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# comm-mpi.sh -- te/comm_mpi.h under each MPI that configure found (MPICH,
# Open MPI, or a plain mpicc): t/comm/comm_mpi.c is compiled by that MPI's own
# mpicc against the built libtecomm (which links no MPI) and run as 3 ranks
# on vdev under that MPI's mpirun; it checks the bare MPI kind's refusal,
# rank and size, symmetric memory across the ranks, an allreduce and a
# split.  Every MPI found must pass; skipped (77) when none was found.
set -u
b=${top_builddir:-.}
s=${srcdir:-.}
run_one() {   # run_one NAME MPICC MPIRUN
  name=$1 mpicc=$2 mpirun=$3
  [ -n "$mpicc" ] && [ -n "$mpirun" ] || return 0
  found=$((found + 1))
  exe=$b/t/comm/comm_mpi-$name
  # the sanitizer runtimes come first in a sanitized build's programs
  if ! $mpicc ${TE_T_SANITIZERS:-} -I"$s/libtecore" -I"$b/libtecore" -I"$s/libtecomm" \
      -o "$exe" "$s/t/comm/comm_mpi.c" -L"$b/libtecomm/.libs" -L"$b/libtecore/.libs" \
      -ltecomm -ltecore -Wl,-rpath,"$(cd "$b" && pwd)/libtecomm/.libs:$(cd "$b" && pwd)/libtecore/.libs"; then
    echo "not ok - $name: $mpicc could not build t/comm/comm_mpi.c"; failed=$((failed + 1)); return 0
  fi
  # te/comm_mpi.h only: the library itself needs no MPI
  if command -v ldd >/dev/null && ldd "$b/libtecomm/.libs/libtecomm.so" | grep -q "libmpi\|libopen-rte\|libopen-pal"; then
    echo "not ok - libtecomm.so links an MPI library"; failed=$((failed + 1)); return 0
  fi
  flags=
  # Open MPI refuses root without these (even for --version), and counts
  # cores as slots
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  if "$mpirun" --version 2>&1 | grep -q "Open MPI\|OpenRTE"; then
    flags="--oversubscribe"
  fi
  # MPI libraries keep allocations to exit: leak reports there are not ours
  if ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" TE_DEVICE=vdev timeout 120 \
      "$mpirun" $flags -n 3 "$exe"; then
    echo "ok - $name ($mpicc, $mpirun)"; passed=$((passed + 1))
  else
    echo "not ok - $name ($mpicc, $mpirun)"; failed=$((failed + 1))
  fi
}
found=0 passed=0 failed=0
# nothing of MPI reaches the consumers of te-comm (nor te-fortran's, which
# requires it)
if grep -qi 'mpi' "$b/libtecomm/te-comm.pc"; then
  echo "not ok - te-comm.pc names MPI: $(grep -i mpi "$b/libtecomm/te-comm.pc")"; failed=1
fi
run_one mpich "${MPICC_MPICH:-}" "${MPIRUN_MPICH:-}"
run_one openmpi "${MPICC_OPENMPI:-}" "${MPIRUN_OPENMPI:-}"
run_one other "${MPICC_OTHER:-}" "${MPIRUN_OTHER:-}"
if [ "$found" -eq 0 ]; then
  echo "comm-mpi: no mpicc and mpirun found (install mpich or openmpi-bin); skipping"
  exit 77
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
