#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# tutorial-sync.sh -- the program printed in libte-tutorial(7) (its THE
# PROGRAM section, roff-escaped) is examples/tutorial_layer.c, byte for
# byte once unescaped (\e -> \, a leading \& dropped), so that the page a
# reader copies from is the program installcheck builds and runs.
# Exit 0: the same; 1: they differ (the diff is printed).
set -u
srcdir=${srcdir:-.}
page=$srcdir/man/man7/libte-tutorial.7
prog=$srcdir/examples/tutorial_layer.c
tmp=${TMPDIR:-/tmp}/te-tutorial-sync.$$
trap 'rm -f "$tmp"' EXIT
awk '/^\.SH THE PROGRAM/ { on = 1; next }
     on && /^\.EX$/ { inex = 1; next }
     inex && /^\.EE$/ { exit }
     inex { sub(/^\\&/, ""); gsub(/\\e/, "\\"); print }' "$page" > "$tmp"
if cmp -s "$tmp" "$prog"; then
  echo "ok: libte-tutorial(7) prints examples/tutorial_layer.c"
  exit 0
fi
echo "libte-tutorial(7)'s program differs from examples/tutorial_layer.c:"
diff "$tmp" "$prog"
exit 1
