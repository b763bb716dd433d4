#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# t/install/installcheck-pkgconfig.sh -- make installcheck builds
# t/install/project/consumer.c with the link line the installed te-core,
# te-graph and te-comm .pc files give (and their libdir as run path), runs
# it with no LD_LIBRARY_PATH, and checks what the .pc files say: the
# version configure set, a URL: field, and libdir/includedir where make
# install put the libraries and headers.  Exit 0 pass, 1 fail, 77 when
# pkg-config or a C compiler is missing.
set -u
PKG_CONFIG=${PKG_CONFIG:-pkg-config}
CC=${CC:-cc}
command -v "$PKG_CONFIG" >/dev/null 2>&1 || { echo "no pkg-config"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/te-pc.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
export PKG_CONFIG_PATH="$libdir/pkgconfig"
fail=0
for pc in te-core te-graph te-comm; do
  f=$libdir/pkgconfig/$pc.pc
  [ -f "$f" ] || { echo "$f: not installed"; fail=1; continue; }
  grep -q '^URL: https\?://' "$f" || { echo "$f: no URL: field"; fail=1; }
  v=$($PKG_CONFIG --modversion "$pc") || { echo "$pc: pkg-config cannot read it"; fail=1; continue; }
  [ "$v" = "${PACKAGE_VERSION:-$v}" ] || { echo "$pc: version $v, configure said $PACKAGE_VERSION"; fail=1; }
  [ "$($PKG_CONFIG --variable=libdir "$pc")" = "$libdir" ] ||
    { echo "$pc: libdir is not $libdir"; fail=1; }
  [ -f "$($PKG_CONFIG --variable=includedir "$pc")/te/core.h" ] ||
    { echo "$pc: includedir has no te/core.h"; fail=1; }
done
[ $fail = 0 ] || exit 1
# shellcheck disable=SC2046
$CC -std=c99 -Wall -Werror -o "$tmp/consumer" "$top_srcdir/t/install/project/consumer.c" \
  $($PKG_CONFIG --cflags --libs te-core te-graph te-comm) -lm \
  -Wl,-rpath,"$($PKG_CONFIG --variable=libdir te-core)" || { echo "consumer.c did not build"; exit 1; }
env -u LD_LIBRARY_PATH "$tmp/consumer" || { echo "consumer.c failed"; exit 1; }
