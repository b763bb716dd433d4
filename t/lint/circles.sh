#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# circles.sh -- no import circle between the files of libtecomm (a file
# naming a function or object another defines depends on it; circles.py
# reads every .c file).  libtecore and libtegraph still have circles
# (doc/ARCHITECTURE.md, section 12): for them the test fails when a
# circle grows past the files it holds today, so that none gets worse
# while they are taken apart.
set -u
src=${srcdir:-.}
command -v python3 > /dev/null || { echo "SKIP: no python3"; exit 77; }
py="python3 $src/t/lint/circles.py"
status=0
cd "$src" || exit 1
if ! $py libtecomm; then
  echo "FAIL: libtecomm has an import circle (above)"
  status=1
else
  echo "ok: libtecomm: no import circle"
fi
# largest circle allowed today (files), per library; backends' own folders count as one
check_debt() {   # library, ceiling, circles.py arguments...
  lib=$1 max=$2
  shift 2
  n=$($py "$@" | sed -n 's/^circle of \([0-9]*\) files.*/\1/p' | sort -n | tail -n 1)
  n=${n:-0}
  if [ "$n" -gt "$max" ]; then
    echo "FAIL: $lib: a circle of $n files (at most $max today):"
    $py "$@"
    status=1
  else
    echo "ok: $lib: largest circle $n files (ceiling $max)"
  fi
}
check_debt libtecore 52 --allow libtecore/cuda --allow libtecore/vdev libtecore
check_debt libtegraph 4 libtegraph
exit $status
