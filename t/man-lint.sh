#!/bin/sh
# man-lint.sh -- make check's test of the man pages under man/:
#  1. every full page passes `mandoc -T lint -W warning` with no output;
#  2. every link page is exactly one `.so manN/page.N` line naming an existing
#     full page whose NAME section lists the link's name (so whatis/apropos
#     find it) -- checked here rather than by mandoc, which warns on every .so;
#  3. every public function declared in the installed headers
#     (libtecore/te/*.h, libtegraph/te/*.h, libtecomm/te/*.h) has a man3 page;
#  4. every page is listed in man/Makefile.inc, so that it is installed.
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
# named in the Makefile fragments (teinclude_HEADERS).  A header that is in
# the tree but not installed yet is work in progress and is only reported.
# Prototypes are found with comments and preprocessor lines removed: an
# identifier tecore_/tegraph_/tecomm_... directly followed by "(".
# Function-pointer typedefs ("(*tecore_x)(") do not match.
cat "$top"/Makefile.am "$top"/*/Makefile.inc 2>/dev/null |
  grep -oE 'lib(tecore|tegraph|tecomm)/te/[A-Za-z0-9_]+\.h' | sort -u >"$tmp/installed"
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
  sed -E 's/^[^a-z]*//; s/[[:space:]]*\($//' | sort -u >"$tmp/functions"

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
if [ -f Makefile.inc ]; then
  for page in man[0-9]/*.[0-9]; do
    [ -f "$page" ] || continue
    if ! grep -q "man/$page\\b" Makefile.inc; then
      echo "man-lint: man/$page is not listed in man/Makefile.inc"
      fail=1
    fi
  done
  for listed in $(sed -n 's/^[^#]*\(man\/man[0-9]\/[A-Za-z0-9_.-]*\.[0-9]\).*/\1/p' Makefile.inc); do
    if [ ! -f "${listed#man/}" ]; then
      echo "man-lint: man/Makefile.inc lists $listed, which does not exist"
      fail=1
    fi
  done
fi

echo "man-lint: $npages pages, $nfuncs public functions checked"
exit $fail
