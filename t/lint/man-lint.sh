#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# man-lint.sh -- make check's test of the man pages under man/:
#  1. every full page passes `mandoc -T lint -W warning` with no output;
#  2. every link page is exactly one `.so manN/page.N` line naming an existing
#     full page whose NAME section lists the link's name (so whatis/apropos
#     find it) -- checked here rather than by mandoc, which warns on every .so;
#  3. every public function declared in the installed headers
#     (libtecore/te/*.h, libtegraph/te/*.h, libtecomm/te/*.h) has a man3 page;
#  4. every page is listed once in dist_man_MANS (man/Makefile.inc, or the
#     Makefile.inc of the folder that owns it), so that it is installed.
# MANDOC comes from configure (AC_PATH_PROG); without mandoc the test is
# skipped (exit 77).  Exit 1 on any finding, listing all of them.
set -u

srcdir=${srcdir:-.}
top=${top_srcdir:-$srcdir}
MANDOC=${MANDOC:-}

if [ -z "$MANDOC" ]; then
  echo "man-lint: mandoc not found by configure; skipping"
  exit 77
fi
if [ ! -d "$top/man" ]; then
  echo "man-lint: no man/ under $top" >&2
  exit 1
fi
top=$(cd "$top" && pwd) || exit 1

fail=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/man-lint.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

cd "$top/man" || exit 1

# ---- 1 and 2: full pages through mandoc, link pages checked by hand -------
full=""
npages=0
for page in man[0-9]/*.[0-9]; do
  [ -f "$page" ] || continue
  npages=$((npages + 1))
  first=$(sed -n 1p "$page")
  case $first in
  ".so "*)
    lines=$(grep -c . "$page")
    target=${first#.so }
    name=$(basename "$page" | sed 's/\.[0-9]$//')
    if [ "$lines" -ne 1 ]; then
      echo "man-lint: $page: a link page must hold only its .so line"
      fail=1
    elif [ ! -f "$target" ]; then
      echo "man-lint: $page: .so target $target does not exist"
      fail=1
    elif sed -n 1p "$target" | grep -q '^\.so '; then
      echo "man-lint: $page: .so target $target is itself a link"
      fail=1
    elif ! sed -n '/^\.SH NAME/,/^\.SH/p' "$target" | grep -q "\\b$name\\b"; then
      echo "man-lint: $page: $name is not in the NAME section of $target"
      fail=1
    fi
    ;;
  *)
    full="$full $page"
    ;;
  esac
done

if [ -n "$full" ]; then
  # shellcheck disable=SC2086
  "$MANDOC" -T lint -W warning $full >"$tmp/lint" 2>&1
  if [ -s "$tmp/lint" ]; then
    cat "$tmp/lint"
    echo "man-lint: mandoc reported the problems above"
    fail=1
  fi
fi

# ---- 3: every public function has a man3 page -----------------------------
# The public headers are those the build installs: the lib*/te/*.h files
# named in Makefile.am and its fragments (teinclude_HEADERS).  A header that is in
# the tree but not installed yet is work in progress and is only reported.
# Prototypes are found with comments and preprocessor lines removed: an
# identifier tecore_/tegraph_/tecomm_... directly followed by "(".
# Function-pointer typedefs ("(*tecore_x)(") do not match, and a type name
# before one ("typedef tecore_result_t (*fn)(...)") is dropped: names ending
# in _t are types.
# The build's text: Makefile.am and the fragments it includes, followed
# through nested includes (as automake does).
frags="Makefile.am"
: >"$tmp/make-text"
while [ -n "$frags" ]; do
  next=""
  for f in $frags; do
    [ -f "$top/$f" ] || continue
    sed 's/#.*//' "$top/$f" >>"$tmp/make-text"
    # shellcheck disable=SC2016 # the $(...) are make's, matched literally
    next="$next $(sed -n 's/^include[[:space:]]\{1,\}//p' "$top/$f" |
      sed 's/^\$(top_srcdir)\///; s/^\$(srcdir)\///')"
  done
  # shellcheck disable=SC2086,SC2116 # split on purpose: an empty list ends the loop
  frags=$(echo $next)
done
grep -oE 'lib(tecore|tegraph|tecomm)/te/[A-Za-z0-9_]+\.h' "$tmp/make-text" | sort -u >"$tmp/installed"
for h in "$top"/libtecore/te/*.h "$top"/libtegraph/te/*.h "$top"/libtecomm/te/*.h; do
  [ -f "$h" ] || continue
  rel=${h#"$top"/}
  if ! grep -qx "$rel" "$tmp/installed"; then
    echo "man-lint: note: $rel is not installed (not in teinclude_HEADERS); not checked" >&2
    continue
  fi
  awk '
    { line = $0; out = ""
      while (line != "") {
        if (inc) {
          i = index(line, "*/"); if (i == 0) { line = ""; break }
          line = substr(line, i + 2); inc = 0
        } else {
          i = index(line, "/*"); if (i == 0) { out = out line; line = ""; break }
          out = out substr(line, 1, i - 1) " "; line = substr(line, i + 2); inc = 1
        }
      }
      sub(/\/\/.*/, "", out)
      if (out ~ /^[ \t]*#/) { cont = (out ~ /\\$/); next }
      if (cont) { cont = (out ~ /\\$/); next }
      print out }' "$h"
done | grep -oE '(^|[^A-Za-z0-9_])(tecore|tegraph|tecomm)_[a-z0-9_]+[[:space:]]*\(' |
  sed -E 's/^[^a-z]*//; s/[[:space:]]*\($//' | grep -v '_t$' | sort -u >"$tmp/functions"

nfuncs=$(wc -l <"$tmp/functions")
if [ "$nfuncs" -eq 0 ]; then
  echo "man-lint: found no public functions in the headers (is top_srcdir right?)"
  fail=1
fi
while read -r fn; do
  if [ ! -f "man3/$fn.3" ]; then
    echo "man-lint: public function $fn has no page man/man3/$fn.3"
    fail=1
  fi
done <"$tmp/functions"

# ---- 4: every page is installed -------------------------------------------
# Pages are listed in dist_man_MANS by man/Makefile.inc and by the fragments
# of the folders that own them; each must be listed exactly once.
grep -oE 'man/man[0-9]/[A-Za-z0-9_.+-]+\.[0-9]' "$tmp/make-text" | sort >"$tmp/listed"
for page in man[0-9]/*.[0-9]; do
  [ -f "$page" ] || continue
  case $(grep -cx "man/$page" "$tmp/listed") in
  0) echo "man-lint: man/$page is not listed in dist_man_MANS (man/Makefile.inc or its folder's Makefile.inc)"
     fail=1 ;;
  1) ;;
  *) echo "man-lint: man/$page is listed in dist_man_MANS more than once"
     fail=1 ;;
  esac
done
sort -u "$tmp/listed" >"$tmp/listed-once"
while read -r listed; do
  if [ ! -f "${listed#man/}" ]; then
    echo "man-lint: dist_man_MANS lists $listed, which does not exist"
    fail=1
  fi
done <"$tmp/listed-once"

echo "man-lint: $npages pages, $nfuncs public functions checked"
exit $fail
