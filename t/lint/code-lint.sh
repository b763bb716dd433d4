#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# code-lint.sh -- make check's lint of the sources for two kinds of rot:
#  1. dead or misplaced functions: a non-static function of a library
#     (libtecore, libtegraph, libtecomm) that the library does not export
#     and that no other object of the library references.  It is either
#     dead (remove it) or used only in its own file (make it static).  Read
#     from the built objects with nm: what each object defines (T, W), what
#     any object of the library leaves undefined (U), and what the shared
#     library exports (its dynamic symbol table).
#  2. stale file names: a file name (*.c, *.h, *.cu, *.cuh, *.S, *.inc,
#     *.am, *.ac, *.sh, *.map) cited in a comment -- C, CUDA and assembly
#     comments, and '#' comment lines of the build files and scripts --
#     that names no file of the source or build tree, as a path from the
#     top, from the citing file's folder, or as the tail of a path.
#     Headers of other packages (the CUDA toolkit, DLPack) are listed below.
# The function check runs in the full configuration only (with CUDA: in a
# build without it, what only the cuda backend calls looks unused).
# Exit 0: clean; 1: findings (all listed); 77: skip (no shared libraries
# built, so no export table to read).
# Environment (from t/Makefile.inc): NM, top_builddir, TE_T_HAVE_CUDA;
# srcdir (automake).
set -u

top=${top_srcdir:-${srcdir:-.}}
build=${top_builddir:-.}
NM=${NM:-nm}
top=$(cd "$top" && pwd) || exit 1
build=$(cd "$build" && pwd) || exit 1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/code-lint.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0

# ---- 1. functions no one calls ------------------------------------------------------

# The PIC object of each libtool object of library folder $1 whose source
# still exists (a stale object of a moved or removed file is skipped).
objects() {
  find "$build/$1" -name '*.lo' | while read -r lo; do
    rel=${lo#"$build"/}
    dir=${rel%/*}
    base=${rel##*/}
    base=${base%.lo}
    base=${base#*_la-}
    found=
    for ext in c S cc; do
      test -f "$top/$dir/$base.$ext" && found=1
    done
    test -n "$found" || continue
    obj=$(sed -n "s/^pic_object='\(.*\)'$/\1/p" "$lo")
    test -n "$obj" && test "$obj" != none || obj=$(sed -n "s/^non_pic_object='\(.*\)'$/\1/p" "$lo")
    test -n "$obj" && test "$obj" != none && echo "${lo%/*}/$obj"
  done
}

# Only the full configuration (with CUDA) is checked: without it, what
# only the cuda backend calls would look unused.
libs="libtecore libtegraph libtecomm"
if test "x${TE_T_HAVE_CUDA:-yes}" != xyes; then
  echo "# built without CUDA: the function check is skipped (the cuda backend's callers are missing)"
  libs=
fi
checked=0
for lib in $libs; do
  so=$build/$lib/.libs/$lib.so
  test -f "$so" || continue
  objects "$lib" > "$tmp/objs"
  test -s "$tmp/objs" || continue
  checked=$((checked + 1))
  # defined functions, with the object that defines them
  # shellcheck disable=SC2046
  $NM -A -g --defined-only $(cat "$tmp/objs") | awk -v b="$build/" '
    $(NF-1) == "T" || $(NF-1) == "W" {
      o = $1; sub(/:[^:]*$/, "", o); if (index(o, b) == 1) o = substr(o, length(b) + 1)
      print $NF, o
    }' | sort -u > "$tmp/def"
  # shellcheck disable=SC2046
  $NM -u $(cat "$tmp/objs") | awk 'NF { print $NF }' | sort -u > "$tmp/ref"
  $NM -D --defined-only "$so" | awk '{ sub(/@.*/, "", $NF); print $NF }' | sort -u > "$tmp/exp"
  { cat "$tmp/ref" "$tmp/exp"; } | sort -u > "$tmp/known"
  awk 'NR == FNR { seen[$1] = 1; next } !($1 in seen)' "$tmp/known" "$tmp/def" > "$tmp/dead"
  while read -r sym obj; do
    echo "FAIL: $lib: $sym (in $obj) is neither exported nor called from another file" \
      "of $lib: remove it, or make it static"
    fail=1
  done < "$tmp/dead"
done
if test $checked -eq 0 && test -n "$libs"; then
  echo "SKIP: no shared library with objects under $build (configure --disable-shared?)"
  exit 77
fi

# ---- 2. file names in comments -----------------------------------------------------

# Headers of other packages that comments name.
external="mpi.h cuda.h cuda_runtime.h cudaTypedefs.h cublasLt.h nvml.h nccl.h dlpack/dlpack.h
liburing.h infiniband/verbs.h"

# Every file of both trees (the build tree has the generated ones: config.h,
# te/version.h; the source tree autogen's: config/tap-driver.sh).
{ (cd "$top" && find . -name .git -prune -o -type f -print)
  (cd "$build" && find . -type f -print); } | sed 's|^\./||' | sort -u > "$tmp/files"
for e in $external; do echo "$e"; done >> "$tmp/files"

# The sources whose comments are read (from the source tree only).
(cd "$top" && find libtecore libtegraph libtecomm kernels tools t \
   \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.S' \) \
   -type f -print 2>/dev/null) | sort > "$tmp/csrc"
dirs="libtecore libtegraph libtecomm kernels tools t man bench m4"
# shellcheck disable=SC2086
(cd "$top" && { ls Makefile.am configure.ac autogen.sh install-deps.sh 2>/dev/null
   find $dirs \( -name Makefile.inc -o -name '*.sh' -o -name '*.m4' \) -type f -print \
     2>/dev/null | grep -v -e '^m4/libtool\.m4$' -e '^m4/lt.*\.m4$'; }) | sort -u > "$tmp/shsrc"

# Prints "file:line: name" for each file name cited in a comment.
cites='
function cite(text,   name) {
  while (match(text, /[A-Za-z0-9_.\/+-]*[A-Za-z0-9_]\.(c|h|cu|cuh|S|inc|am|ac|sh|map)([^A-Za-z0-9_]|$)/)) {
    name = substr(text, RSTART, RLENGTH)
    sub(/[^A-Za-z0-9_]$/, "", name)
    print FILENAME ":" FNR ": " name
    text = substr(text, RSTART + RLENGTH)
  }
}'
# C, CUDA, assembly: /* */ and // comments, string and character literals
# skipped.
(cd "$top" && xargs awk "$cites"'
FNR == 1 { inc = 0 }
{
  line = $0; out = ""; i = 1; n = length(line)
  while (i <= n) {
    c = substr(line, i, 1); c2 = substr(line, i, 2)
    if (inc) {
      if (c2 == "*/") { inc = 0; i += 2; continue }
      out = out c; i++; continue
    }
    if (c2 == "/*") { inc = 1; i += 2; out = out " "; continue }
    if (c2 == "//") { out = out " " substr(line, i + 2); break }
    if (c == "\"" || c == "'\''") {
      q = c; i++
      while (i <= n && substr(line, i, 1) != q) { if (substr(line, i, 1) == "\\") i++; i++ }
      i++; continue
    }
    i++
  }
  cite(out)
}' < "$tmp/csrc") > "$tmp/cites"
# Build files and scripts: lines that are comments (# or dnl).
(cd "$top" && xargs awk "$cites"'
/^[ \t]*(#|dnl)/ { cite($0) }' < "$tmp/shsrc") >> "$tmp/cites"

# A name exists as a path from the top, from the citing file's folder, or
# as the tail of some path.
awk -v list="$tmp/files" '
BEGIN {
  while ((getline f < list) > 0) {
    have[f] = 1
    while ((k = index(f, "/")) > 0) { f = substr(f, k + 1); have[f] = 1 }
  }
}
{
  split($0, p, ": "); where = p[1]; name = p[2]
  sub(/:[0-9]+$/, "", where)
  dir = where; if (!sub(/\/[^\/]*$/, "", dir)) dir = "."
  if ((name in have) || ((dir "/" name) in have)) next
  print
}' "$tmp/cites" > "$tmp/stale"
while read -r line; do
  echo "FAIL: ${line%: *}: the comment cites ${line##*: }, which is no file of the tree"
  fail=1
done < "$tmp/stale"

if test $fail -eq 0; then
  echo "ok: every library function is exported or called from another file;" \
    "every file name in a comment exists"
fi
exit $fail
