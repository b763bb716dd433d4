#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# circles.sh -- no import circle between source files (issue 30): a file
# naming a function or object another defines depends on it
# (t/lint/circles.py reads every .c file).  libtecomm and libtegraph: no
# circle at all.  libtecore: none either, inside a folder or across
# folders, except that a backend's folder (cuda/, vdev/) counts as one
# part: its files implement one ops table together (doc/ARCHITECTURE.md,
# 2).
set -u
src=${srcdir:-.}
command -v python3 > /dev/null || { echo "SKIP: no python3"; exit 77; }
cd "$src" || exit 1
py="python3 t/lint/circles.py"
status=0
check() {   # library, circles.py arguments...
  lib=$1
  shift
  if $py "$@"; then
    echo "ok: $lib: no import circle"
  else
    echo "FAIL: $lib has an import circle (above)"
    status=1
  fi
}
check libtecomm libtecomm
check libtegraph libtegraph
check libtecore --allow libtecore/cuda --allow libtecore/vdev libtecore
exit $status
