#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# comm-mpi.sh -- libtecomm's MPI bootstrap under mpirun (3 ranks on vdev):
# t/comm_mpi checks rank and size, symmetric memory across the ranks, an
# allreduce and a split.  Skipped (77) in a build without MPI.
set -u
if [ -z "${MPIRUN:-}" ] || [ ! -x "${top_builddir:-.}/t/comm_mpi" ]; then
  echo "comm-mpi: built without MPI (configure --with-mpi); skipping"
  exit 77
fi
flags=
# Open MPI refuses root without these, and counts cores as slots
if "$MPIRUN" --version 2>&1 | grep -q "Open MPI"; then
  flags="--allow-run-as-root --oversubscribe"
fi
# MPI libraries keep allocations to exit: leak reports there are not ours
ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" TE_DEVICE=vdev timeout 120 "$MPIRUN" $flags -n 3 "${top_builddir:-.}/t/comm_mpi"
rc=$?
[ $rc -eq 0 ] && echo "1 passed, 0 failed" || echo "0 passed, 1 failed"
exit $rc
