#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# fini-valgrind.sh -- valgrind finds no errors, no leaks and no threads left
# by a program that initializes libtecore, quantizes, captures and replays
# a graph and calls tecore_fini() (t/core/fini_valgrind.c).  Every leak kind is
# an error here (definite, indirect, possible -- a thread never joined
# shows as a possibly lost stack -- and still reachable: whatever libte
# keeps in globals must be freed by tecore_fini).  On the vdev backend
# (TE_DEVICE=vdev: valgrind does not run the CUDA driver).
# Exit 77 without valgrind or in a sanitizer build (ASan and valgrind do
# not mix; config.h's TE_CONFIG_FLAGS says which).  Environment:
# top_builddir (t/Makefile.inc).
set -u
build=${top_builddir:-.}
command -v valgrind >/dev/null 2>&1 || { echo "fini-valgrind: no valgrind; skipped"; exit 77; }
grep -q 'sanitizers=yes' "$build/config.h" 2>/dev/null &&
  { echo "fini-valgrind: sanitizer build; skipped"; exit 77; }
log=$(mktemp "${TMPDIR:-/tmp}/fini-valgrind.XXXXXX") || exit 99
trap 'rm -f "$log"' EXIT
TE_DEVICE=vdev "$build/libtool" --mode=execute valgrind -q --leak-check=full \
  --show-leak-kinds=all --errors-for-leak-kinds=all --error-exitcode=3 \
  --log-file="$log" "$build/t/core/fini_valgrind"
rc=$?
cat "$log"
case $rc in
  0) echo "fini-valgrind: no errors, no leaks, no threads left" ;;
  3) echo "fini-valgrind: valgrind reported the errors above" ;;
  *) echo "fini-valgrind: the program failed (exit $rc)" ;;
esac
exit $rc
