#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# t/install/installcheck-fortran.sh -- make installcheck builds fortran/example.f90
# (the example of te_fortran(7)) against the INSTALLED modules with the
# link line pkg-config te-fortran gives (and its libdir as run path), runs
# it on vdev with no LD_LIBRARY_PATH, and checks its one line of output.
# Exit 0 pass, 1 fail, 77 when the Fortran modules were not built or
# installed, or pkg-config or gfortran is missing.
set -u
PKG_CONFIG=${PKG_CONFIG:-pkg-config}
FC=${FC:-gfortran}
command -v "$PKG_CONFIG" >/dev/null 2>&1 || { echo "no pkg-config"; exit 77; }
command -v "$FC" >/dev/null 2>&1 || { echo "no Fortran compiler ($FC)"; exit 77; }
[ -f "$libdir/pkgconfig/te-fortran.pc" ] || { echo "te-fortran.pc not installed (built --without-fortran?)"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/te-fortran.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
export PKG_CONFIG_PATH="$libdir/pkgconfig"
fmoddir=$($PKG_CONFIG --variable=fmoddir te-fortran) || { echo "pkg-config cannot read te-fortran"; exit 1; }
[ -f "$fmoddir/te_core.mod" ] || { echo "$fmoddir/te_core.mod: not installed"; exit 1; }
cd "$tmp" || exit 1
# shellcheck disable=SC2046
"$FC" -o example "$top_srcdir/fortran/example.f90" $($PKG_CONFIG --cflags --libs te-fortran) \
  -Wl,-rpath,"$($PKG_CONFIG --variable=libdir te-fortran)" || { echo "example.f90 did not build"; exit 1; }
out=$(env -u LD_LIBRARY_PATH TE_DEVICE=vdev ./example) || { echo "example failed: $out"; exit 1; }
echo "$out"
echo "$out" | grep -q "^x -> e4m3 -> f32: largest relative error" || { echo "unexpected output"; exit 1; }
