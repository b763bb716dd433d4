#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# t/install/installcheck-readme.sh -- make installcheck runs README.md's "Install
# and link" example as written, against the installed libte: the C block
# of that section is saved under the name its cc line compiles, and the
# section's sh block that starts with "cc " runs in a clean shell with no
# LD_LIBRARY_PATH, so the program must find libtecore.so.0 through the run
# path the README's link line records.  PKG_CONFIG_PATH comes from the
# section's `export PKG_CONFIG_PATH=...` line with its example prefix
# replaced by the installed one.  Extracted, not copied, so that the README
# and this test cannot drift apart.  Exit 0 pass, 1 fail.
set -u
readme=$top_srcdir/README.md
tmp=$(mktemp -d "${TMPDIR:-/tmp}/te-readme.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

# The fenced blocks of the section, each as "lang<TAB>line" records.
awk '/^## /{ insec = ($0 ~ /^## Install and link/) } insec' "$readme" |
  awk '/^```/{ if (lang == "") { lang = substr($0, 4); if (lang == "") lang = "-"; n++ }
              else lang = ""; next }
       lang != "" { print n "\t" lang "\t" $0 }' > "$tmp/blocks"
cblock=$(awk -F'\t' '$2 == "c" { print $1; exit }' "$tmp/blocks")
ccblock=$(awk -F'\t' '$2 == "sh" && $3 ~ /^cc / { print $1; exit }' "$tmp/blocks")
exportline=$(awk -F'\t' '$2 == "sh" && $3 ~ /^export PKG_CONFIG_PATH=/ { print $3; exit }' \
  "$tmp/blocks")
if [ -z "$cblock" ] || [ -z "$ccblock" ] || [ -z "$exportline" ]; then
  echo "README.md's Install and link section lost its C block, its cc line or its" \
    "export PKG_CONFIG_PATH line (blocks found: $(cut -f1,2 "$tmp/blocks" | sort -u | tr '\n' ' '))"
  exit 1
fi
awk -F'\t' -v b="$cblock" '$1 == b { sub(/^[^\t]*\t[^\t]*\t/, ""); print }' "$tmp/blocks" \
  > "$tmp/example.c"
awk -F'\t' -v b="$ccblock" '$1 == b { sub(/^[^\t]*\t[^\t]*\t/, ""); print }' "$tmp/blocks" \
  > "$tmp/link.sh"
src=$(awk '{ for (i = 1; i <= NF; i++) if ($i ~ /\.c$/) { print $i; exit } }' "$tmp/link.sh")
[ -n "$src" ] || { echo "the README's cc line names no .c file"; exit 1; }
mv "$tmp/example.c" "$tmp/$src"

# The README's prefix is an example: put the installed one in its place.
readme_dir=${exportline#export PKG_CONFIG_PATH=}
readme_prefix=${readme_dir%/lib/pkgconfig}
if [ "$libdir" = "$prefix/lib" ]; then
  pcpath=$prefix${readme_dir#"$readme_prefix"}
else
  pcpath=$libdir/pkgconfig    # configured with a libdir of its own
fi
echo "README: $exportline -> PKG_CONFIG_PATH=$pcpath"
echo "README: $(cat "$tmp/link.sh")"
echo "--- $src"
cat "$tmp/$src"
echo "---"
(cd "$tmp" && env -u LD_LIBRARY_PATH PKG_CONFIG_PATH="$pcpath" sh -e ./link.sh)
rc=$?
[ $rc = 0 ] || { echo "the README's example failed (exit $rc)"; exit 1; }
echo "the README's example built and ran against $libdir"
