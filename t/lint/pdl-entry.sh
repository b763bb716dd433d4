#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# pdl-entry.sh -- every libtecore kernel begins with te_pdl_enter();
# (kernels/pdl.cuh), because libtecore launches them with programmatic
# dependent launch (TECORE_PDL): t/lint/pdl-entry.py lists any that does
# not.  Reads the sources only: runs with or without CUDA.
set -u
src=${srcdir:-.}
command -v python3 > /dev/null || { echo "SKIP: no python3"; exit 77; }
if python3 "$src/t/lint/pdl-entry.py" "$src"; then
  echo "ok: every kernel of kernels/ begins with te_pdl_enter()"
  exit 0
fi
echo "FAIL: the kernels above may race under programmatic dependent launch"
exit 1
