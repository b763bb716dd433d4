#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# funcs.sh -- short functions and struct arguments (issue 30): no function
# of libtecore, libtecomm or libtegraph over 120 lines, and none outside
# their public API with more than 8 parameters (t/lint/funcs.py lists
# each; a longer list is a struct: a descriptor of the call, or its
# shapes and pointers grouped).  The GPU kernels (kernels/*.cu) are not C
# files of the libraries and are not read.
set -u
src=${srcdir:-.}
command -v python3 > /dev/null || { echo "SKIP: no python3"; exit 77; }
cd "$src" || exit 1
py="python3 t/lint/funcs.py"
status=0
for lib in libtecore libtecomm libtegraph; do
  if $py "$lib"; then
    echo "ok: $lib: no function over 120 lines, no private one over 8 parameters"
  else
    echo "FAIL: $lib (above)"
    status=1
  fi
done
exit $status
