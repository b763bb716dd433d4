#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# tunables-listed.sh -- every tunable the three libraries define in their
# sources (TECORE_TUNABLE_* of te/tunable.h, or libtecore's TE_PARAM_*
# names for them) is listed by te-info -e with a help line under it: the
# registration runs when each library loads, so nothing is missed because
# no call has read it yet.  And each is documented as a user's knob: an
# entry of its own (a .TP tag naming it) in the ENVIRONMENT section of a
# man page under man/ (issue 58).  The names are taken from the sources,
# so a new tunable is checked without editing this script.
# Exit 0: all listed; 1: some missing (named); 77: no perl or no te-info.
set -u
top=${top_srcdir:-${srcdir:-.}}
info="${top_builddir:-.}/tools/te-info"
command -v perl >/dev/null 2>&1 || { echo "SKIP: no perl"; exit 77; }
test -x "$info" || { echo "SKIP: $info not built"; exit 77; }
tmp=${TMPDIR:-/tmp}/tunables-listed.$$
trap 'rm -f "$tmp".*' EXIT

# "NAME" of every registration: the macro, the variable, then the name;
# in a build without CUDA the cuda backend's sources are not compiled
# (TE_T_HAVE_CUDA comes from t/Makefile.inc)
skip=NONE
test "x${TE_T_HAVE_CUDA:-yes}" = xyes || skip="$top/libtecore/cuda"
find "$top/libtecore" "$top/libtegraph" "$top/libtecomm" -name '*.c' | grep -v "^$skip/" | sort |
  xargs perl -0777 -ne '
  while (/\b(?:TECORE_TUNABLE|TE_PARAM)_(?:INT|STR)(?:_RENAMED)?\(\s*\w+\s*,\s*"([A-Z][A-Z0-9_]*)"/g) {
    print "$1\n";
  }' | sort -u > "$tmp.src"
test -s "$tmp.src" || { echo "FAIL: no tunable found in the sources under $top"; exit 1; }

"$info" -e > "$tmp.out" 2>&1 || { echo "FAIL: te-info -e failed:"; cat "$tmp.out"; exit 1; }
status=0
n=0
while read -r name; do
  n=$((n + 1))
  # the name at the start of a line, then an indented, non-empty help line
  if ! awk -v name="$name" '
      found { ok = ($0 ~ /^    [^ ]/); exit }
      $1 == name { found = 1 }
      END { exit !(found && ok) }' "$tmp.out"; then
    echo "FAIL: te-info -e does not list $name with a help line under it"
    status=1
  fi
done < "$tmp.src"
test $status -eq 0 && echo "ok: te-info -e lists the $n tunables the sources define, each with its help"

# the names each ENVIRONMENT section gives an entry (a .TP paragraph's tag)
perl -ne '
  $in = ($1 =~ /^ENVIRONMENT/) if /^\.SH\s+"?(.*?)"?\s*$/;
  if ($in && $tp && /^\.B[RI]?\s/) { print "$1\n" while /\b([A-Z][A-Z0-9]*_[A-Z0-9_]+)\b/g }
  $tp = /^\.TP/;
  close ARGV if eof;' "$top"/man/man[137]/*.[137] | sort -u > "$tmp.man"
missing=$(comm -23 "$tmp.src" "$tmp.man")
if test -n "$missing"; then
  for name in $missing; do
    echo "FAIL: $name has no entry in the ENVIRONMENT section of any man page"
  done
  status=1
else
  echo "ok: each of the $n tunables has an entry in a man page's ENVIRONMENT section"
fi
exit $status
