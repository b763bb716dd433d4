#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# fortran-map.sh -- fortran/libtefortran.map lists exactly what libtefortran
# must export, and the built library exports exactly that, under the map's
# version nodes.  The map names symbols explicitly (one node per release,
# no glob), so it is checked as t/lint/map-lint.sh checks the C libraries':
#   1. the map against what the modules define (fortran/gen-fortran.py
#      --symbols: gfortran's names for the module procedures and the
#      types' helpers) and the C doors of fortran/te_fortran.c
#      (TEFORTRAN_EXPORT), both ways (needs python3);
#   2. the built fortran/.libs/libtefortran.so: each dynamic symbol it
#      defines is a name of the map, at a node of the map, and each name of
#      the map is there -- so a gfortran whose naming drifted is caught
#      here, not by a program that fails to link against the installed
#      library (only when configure applied the map: TE_T_FORTRAN_MAP).
# Exit 77 when neither part can run.  Environment: srcdir, top_builddir,
# NM, TE_T_CC, TE_T_FORTRAN_MAP (t/Makefile.inc, fortran/Makefile.inc).
set -u
srcdir=${srcdir:-.}
build=${top_builddir:-.}
map=$srcdir/fortran/libtefortran.map
[ -f "$map" ] || { echo "fortran-map: $map is missing"; exit 1; }
tmp=${TMPDIR:-/tmp}/fortran-map.$$
mkdir -p "$tmp" || exit 99
trap 'rm -rf "$tmp"' EXIT
status=0
ran=0

# the map's global names and its node names; a glob or a repeat is an error
perl -0777 -pe 's{/\*.*?\*/}{ }gs' "$map" > "$tmp/map.txt" 2>/dev/null ||
  sed 's,/\*.*\*/,,' "$map" > "$tmp/map.txt"
awk '/global:/ {g = 1; next} /local:/ {g = 0} g && /[*?]/ {print "GLOB " $0}
     g && /^[ \t]*[A-Za-z_][A-Za-z0-9_]*;/ {sub(/^[ \t]*/, ""); sub(/;.*/, ""); print}' \
  "$tmp/map.txt" | sort > "$tmp/map.names"
sed -n 's/^[ \t]*\(TEFORTRAN_[0-9.]*\)[ \t]*{.*/\1/p' "$tmp/map.txt" | sort > "$tmp/map.nodes"
if grep -q '^GLOB' "$tmp/map.names"; then
  echo "fortran-map: the map exports by glob: list each symbol"; status=1
  sed -i '/^GLOB/d' "$tmp/map.names"
fi
dups=$(uniq -d "$tmp/map.names")
[ -z "$dups" ] || { echo "fortran-map: the map lists a name twice: $dups"; status=1; }
[ -s "$tmp/map.nodes" ] || { echo "fortran-map: the map has no TEFORTRAN_ node"; status=1; }

# 1. what the sources define
if command -v python3 >/dev/null 2>&1; then
  ran=1
  { CC=${TE_T_CC:-cc} python3 "$srcdir/fortran/gen-fortran.py" --srcdir "$srcdir" --symbols ||
      echo "GEN-FAILED"
    sed -n 's/^TEFORTRAN_EXPORT [^(]*[ *]\([A-Za-z_][A-Za-z0-9_]*\)(.*/\1/p' \
      "$srcdir/fortran/te_fortran.c"; } | sort -u > "$tmp/want"
  if grep -q GEN-FAILED "$tmp/want"; then
    echo "fortran-map: fortran/gen-fortran.py --symbols failed"; status=1
  else
    for s in $(comm -23 "$tmp/want" "$tmp/map.names"); do
      echo "fortran-map: $s is defined by the modules or te_fortran.c but not in the map" \
        "(add it to the node of the release that first ships it)"; status=1
    done
    for s in $(comm -13 "$tmp/want" "$tmp/map.names"); do
      echo "fortran-map: the map exports $s, which nothing defines"; status=1
    done
  fi
else
  echo "fortran-map: no python3: the map is not compared with the modules"
fi

# 2. what the built library exports
lib=$build/fortran/.libs/libtefortran.so
if [ "${TE_T_FORTRAN_MAP:-no}" = yes ] && [ -f "$lib" ]; then
  ran=1
  ${NM:-nm} -D --defined-only "$lib" > "$tmp/nm" || { echo "fortran-map: nm $lib failed"; exit 1; }
  # "addr type name[@@node]"; the nodes themselves are absolute symbols
  awk '$2 != "A" {print $3}' "$tmp/nm" | sort > "$tmp/so"
  sed 's/@.*//' "$tmp/so" | sort > "$tmp/so.names"
  for s in $(comm -23 "$tmp/so.names" "$tmp/map.names"); do
    echo "fortran-map: libtefortran.so exports $s, which the map does not list"; status=1
  done
  for s in $(comm -13 "$tmp/so.names" "$tmp/map.names"); do
    echo "fortran-map: libtefortran.so does not define $s (did gfortran's naming change?)"
    status=1
  done
  if grep -q '@' "$tmp/so"; then   # nm shows versions (binutils >= 2.35)
    for s in $(grep -v '@@TEFORTRAN_' "$tmp/so"); do
      echo "fortran-map: libtefortran.so exports $s outside a TEFORTRAN_ node"; status=1
    done
    for v in $(sed -n 's/.*@@//p' "$tmp/so" | sort -u); do
      grep -qx "$v" "$tmp/map.nodes" || { echo "fortran-map: node $v is not the map's"; status=1; }
    done
  fi
  echo "fortran-map: libtefortran.so exports $(wc -l < "$tmp/so.names") symbols"
else
  echo "fortran-map: libtefortran was not built with the map here (TE_T_FORTRAN_MAP=${TE_T_FORTRAN_MAP:-no})"
fi

[ $ran = 1 ] || { echo "fortran-map: nothing to check; skipped"; exit 77; }
[ $status = 0 ] && echo "fortran-map: the map, the modules and the library agree"
exit $status
