#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# t/lint/spdx-add.sh -- inserts `SPDX-License-Identifier: Apache-2.0` into every
# source file that lacks it (the files and syntax of t/lint/spdx-files.sh), so
# that t/lint/spdx-lint.sh passes.  Idempotent: a file that has the line in its
# first lines is left byte for byte as it was.
#
#   t/lint/spdx-add.sh [--man] [--dry-run]    run from anywhere inside the tree
#
# Where the line goes, per syntax:
#   C, CUDA, .S, .map   first line: /* SPDX-License-Identifier: Apache-2.0 */
#                       (// ... where the file's own comments are //)
#   shell, automake,    first line, or the second after a #! line:
#   pkg-config, CMake   # SPDX-License-Identifier: Apache-2.0
#   autoconf, m4        first line: dnl SPDX-License-Identifier: Apache-2.0
#   Fortran             first line: ! SPDX-License-Identifier: Apache-2.0
#   roff (--man)        first line, or after a '\" preprocessor line:
#                       .\" SPDX-License-Identifier: Apache-2.0
# Prints each file it changes.  Exit 1 if a file could not be written.
set -u
here=$(cd "$(dirname "$0")" && pwd) || exit 1
cd "$here/../.." || exit 1
. "$here/spdx-files.sh"

man=
dry=
for a in "$@"; do
  case $a in
    --man) man=--man ;;
    --dry-run) dry=1 ;;
    *) echo "usage: t/lint/spdx-add.sh [--man] [--dry-run]" >&2; exit 2 ;;
  esac
done

changed=0
rc=0
for f in $(spdx_files $man); do
  style=$(spdx_style "$f")
  [ "$style" = skip ] && continue
  head -n "$SPDX_HEAD_LINES" "$f" | grep -q "$SPDX_ID" && continue
  after=0                 # insert after this many lines (0: at the top)
  case $style in
    c)     line="/* $SPDX_ID */" ;;
    slash) line="// $SPDX_ID" ;;
    dnl)   line="dnl $SPDX_ID" ;;
    bang)  line="! $SPDX_ID" ;;
    hash)  line="# $SPDX_ID"
           case $(head -c 2 "$f") in '#!') after=1 ;; esac ;;
    roff)  line=".\\\" $SPDX_ID"
           head -1 "$f" | grep -q "^'\\\\\"" && after=1 ;;
  esac
  echo "spdx-add: $f"
  changed=$((changed + 1))
  [ -n "$dry" ] && continue
  tmp="$f.spdx-add.$$"
  # awk keeps every other byte of the file (and its mode, through cat >);
  # the line goes through the environment, where awk leaves \" alone
  if SPDX_LINE=$line awk -v n="$after" 'NR == n + 1 { print ENVIRON["SPDX_LINE"] }
       { print } END { if (NR < n + 1) print ENVIRON["SPDX_LINE"] }' "$f" > "$tmp" &&
     cat "$tmp" > "$f"; then
    rm -f "$tmp"
  else
    echo "spdx-add: cannot rewrite $f" >&2
    rm -f "$tmp"
    rc=1
  fi
done
echo "spdx-add: $changed files ${dry:+would be }changed"
exit $rc
