#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# t/lint/spdx-lint.sh -- checks that every source file (C, CUDA, assembler,
# shell, automake, autoconf, m4, linker maps, .in templates, Fortran,
# Python) carries `SPDX-License-Identifier: Apache-2.0` in its first lines.
# The file list and the comment syntax per type are t/lint/spdx-files.sh's,
# shared with t/lint/spdx-add.sh, which inserts the line where it is missing.
#
#   t/lint/spdx-lint.sh [--man]    from anywhere, or as a make check test (it
#                             checks the tree it lies in); --man also checks
#                             the full man pages (link pages are exempt;
#                             SPDX_LINT_MAN=1 in the environment does the
#                             same, for make check)
#
# Exit 0: every file has it; 1: the files without it are listed.
set -u
here=$(cd "$(dirname "$0")" && pwd) || exit 1
cd "$here/../.." || exit 1
. "$here/spdx-files.sh"

man=
[ "${1:-}" = --man ] && man=--man
# as a make check test it takes no arguments: SPDX_LINT_MAN=1 means --man
[ "${SPDX_LINT_MAN:-0}" = 1 ] && man=--man
missing=0
total=0
for f in $(spdx_files $man); do
  [ "$(spdx_style "$f")" = skip ] && continue
  total=$((total + 1))
  if ! head -n "$SPDX_HEAD_LINES" "$f" | grep -q "$SPDX_ID"; then
    echo "spdx-lint: $f: no '$SPDX_ID' in its first $SPDX_HEAD_LINES lines"
    missing=$((missing + 1))
  fi
done
echo "spdx-lint: $total files checked, $missing without the licence line"
[ "$missing" = 0 ]
