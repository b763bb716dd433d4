#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# fortran-gen.sh -- the committed Fortran modules (fortran/te_*.f90) and the
# layout programs (t/fortran_layout_*) are what fortran/gen-fortran.py
# writes from today's headers.  A public header changed without running
# the generator fails here, with the diff.  Needs python3 (skipped without).
set -u
srcdir=${srcdir:-.}
command -v python3 >/dev/null 2>&1 || { echo "fortran-gen: no python3; skipped"; exit 77; }
tmp=${TMPDIR:-/tmp}/fortran-gen.$$
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp" || exit 99
CC=${TE_T_CC:-cc} python3 "$srcdir/fortran/gen-fortran.py" --srcdir "$srcdir" --outdir "$tmp" || exit 1
status=0
for f in fortran/te_core.f90 fortran/te_graph.f90 fortran/te_comm.f90 \
         t/fortran/fortran_layout_c.c t/fortran/fortran_layout_f.f90; do
  if ! diff -u "$srcdir/$f" "$tmp/$f"; then
    echo "fortran-gen: $f is out of date: run fortran/gen-fortran.py and commit the result"
    status=1
  fi
done
[ $status = 0 ] && echo "fortran-gen: the Fortran modules match the headers"
exit $status
