#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# map-lint.sh -- every public function is in its library's symbol map, and
# the map lists nothing else.  The .map files name each symbol explicitly
# (one node per release, as liburing's do): a function declared in a
# public header (te/*.h) but missing from the map would be hidden from
# callers, and a name in the map that no header declares is a leftover.
# Run by make check; srcdir is the source tree.
#
# Declarations are found with a small perl filter over each header:
# comments and preprocessor lines dropped, then every statement (split at
# ; { }) that is not static or a typedef and names <prefix>_<word>( after
# a type is a function.
set -u
srcdir=${srcdir:-.}
command -v perl >/dev/null 2>&1 || { echo "map-lint: no perl; skipped"; exit 77; }

status=0
tmp=${TMPDIR:-/tmp}/map-lint.$$
mkdir -p "$tmp" || exit 99
trap 'rm -rf "$tmp"' EXIT

for lib in libtecore:tecore libtegraph:tegraph libtecomm:tecomm; do
  dir=${lib%%:*}
  prefix=${lib#*:}
  map=$srcdir/$dir/$dir.map
  [ -f "$map" ] || { echo "map-lint: $map is missing"; status=1; continue; }
  perl -e '
    my $p = shift; local $/;
    for my $f (@ARGV) {
      open(my $h, "<", $f) or die "$f: $!"; my $t = <$h>; close $h;
      $t =~ s{/\*.*?\*/}{ }gs; $t =~ s{//[^\n]*}{}g;
      $t =~ s{^[ \t]*#(?:[^\n]*\\\n)*[^\n]*}{}gm;
      for my $st (split /[;{}]/, $t) {
        next if $st =~ /\b(?:static|typedef)\b/;
        print "$1\n" if $st =~ /^\s*(?:extern\s+)?[A-Za-z_][\w\s\*]*?[\s\*]\b(${p}_\w+)\s*\(/s;
      }
    }' "$prefix" "$srcdir"/$dir/te/*.h | sort -u > "$tmp/$dir.h"
  # the map's names: "name;" entries of the global: sections (comments
  # dropped); a glob there is an error
  perl -0777 -pe 's{/\*.*?\*/}{ }gs' "$map" > "$tmp/$dir.map"
  awk '/global:/ {g = 1; next} /local:/ {g = 0} g && /[*?]/ {print "GLOB " $0}
       g && /^[ \t]*[A-Za-z_][A-Za-z0-9_]*;/ {sub(/^[ \t]*/, ""); sub(/;.*/, ""); print}' \
    "$tmp/$dir.map" | sort > "$tmp/$dir.m"
  if grep -q '^GLOB' "$tmp/$dir.m"; then
    echo "map-lint: $dir.map exports by glob ($(grep '^GLOB' "$tmp/$dir.m" | head -1 | \
      sed 's/^GLOB *//')); list each symbol"; status=1
    sed -i '/^GLOB/d' "$tmp/$dir.m"
  fi
  dups=$(uniq -d "$tmp/$dir.m")
  if [ -n "$dups" ]; then
    echo "map-lint: $dir.map lists a name twice: $dups"; status=1
  fi
  missing=$(comm -23 "$tmp/$dir.h" "$tmp/$dir.m")
  extra=$(comm -13 "$tmp/$dir.h" "$tmp/$dir.m")
  for s in $missing; do
    echo "map-lint: $s is declared in $dir/te/*.h but not exported by $dir/$dir.map"; status=1
  done
  for s in $extra; do
    echo "map-lint: $dir/$dir.map exports $s, which no header in $dir/te/ declares"; status=1
  done
  [ -s "$tmp/$dir.h" ] || { echo "map-lint: found no declarations in $dir/te/*.h"; status=1; }
done
[ $status -eq 0 ] && echo "map-lint: every public function is in its map, and nothing else"
exit $status
