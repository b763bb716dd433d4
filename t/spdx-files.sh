# SPDX-License-Identifier: Apache-2.0
# t/spdx-files.sh -- sourced by t/spdx-lint.sh and t/spdx-add.sh: which files
# must carry the SPDX licence line, and in which comment syntax.  Kept in
# one place so that the lint checks exactly what the inserter writes.
#
#   spdx_files [--man]     the files, one per line, relative to the top of
#                          the tree (git ls-files in a clone; find in an
#                          unpacked tarball); --man adds the man pages
#   spdx_style FILE        c | slash | hash | dnl | roff | bang | skip
#
# SPDX_ID is the line's text without its comment marks.

SPDX_ID='SPDX-License-Identifier: Apache-2.0'
# how far down a file the line may sit (a shebang and a one-line title come
# first in some files)
SPDX_HEAD_LINES=5

# spdx_files [--man]: every file a licence header belongs in
spdx_files() {
  # git's list only where this folder is a clone's top (not an unpacked
  # tarball inside one, as make distcheck makes)
  if [ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$(pwd -P)" ]; then
    git ls-files
  else
    find . -type f ! -path './.git/*' | sed 's|^\./||'
  fi | while IFS= read -r f; do
    [ -f "$f" ] || continue
    case $f in
      # what autotools and configure write (in a tarball or an in-tree
      # build; a clone's git ls-files has none of them)
      config/*|build*/*|_build/*|autom4te.cache/*|*/.libs/*|*/.deps/*|.devdeps/*) continue ;;
      configure|aclocal.m4|config.h.in|config.h|config.status|libtool|Makefile) continue ;;
      Makefile.in|*/Makefile.in|m4/libtool.m4|m4/lt*.m4|libte-*/*) continue ;;
      *.c|*.h|*.cu|*.cuh|*.S|*.sh|*.am|*.ac|*.in|*.f90|*.F90|*.inc|*.map|*.m4|*.py)
        echo "$f" ;;
      */Makefile.inc|Makefile.inc) echo "$f" ;;
      man/man[0-9]/*.[0-9])
        [ "${1:-}" = --man ] && echo "$f" ;;
      *)
        # scripts without an extension (.ci/run): by their shebang
        case $(head -c 2 "$f" 2>/dev/null) in '#!') echo "$f" ;; esac ;;
    esac
  done
}

# spdx_style FILE: the comment syntax the line takes in FILE
spdx_style() {
  f=$1
  base=${f%.in}
  case $base in
    *.c|*.h|*.S|*.map)
      # C-family files whose first line is a // comment keep that style
      if head -1 "$f" | grep -q '^//'; then echo slash; else echo c; fi ;;
    *.cu|*.cuh)
      if head -1 "$f" | grep -q '^/\*'; then echo c; else echo slash; fi ;;
    *.ac|*.m4) echo dnl ;;
    *.f90|*.F90) echo bang ;;
    man/man[0-9]/*.[0-9])
      # a link page is exactly one .so line (t/man-lint.sh): left alone
      if [ "$(grep -cv '^\.so ' "$f")" = 0 ]; then echo skip; else echo roff; fi ;;
    *) echo hash ;;    # shell, automake, pkg-config, CMake, linker-less rest
  esac
}
