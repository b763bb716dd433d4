#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# doc-lint.sh -- the documentation agrees with the code (issue 32):
#  1. every libte name cited as name(N) in a man page (te-*, te_*, libte*,
#     tecore_*, tegraph_*, tecomm_*) has the page man/manN/name.N;
#  2. every function the three built libraries export has a man3 page;
#  3. every tunable te-info -e lists is documented in a man page;
#  4. every option a tool's --help names (--long and -x) is in its
#     section-1 page, and every installed tool is in libte(7)'s diagram
#     and SEE ALSO;
#  5. every allreduce algorithm libtecomm knows (the names
#     tecomm_algo_name returns, read from libtecomm/base/algos.h) is named by
#     tecomm_algo_name(3), libtecomm(7) and libte(7), and libte(7) calls
#     none of them planned;
#  6. every man page's footer names configure.ac's version (libte X.Y.Z);
#  7. every bench/ or doc/ path that code, tests, man pages and documents
#     cite exists;
#  8. in a git checkout, every commit a bench/ record cites outside its
#     verbatim outputs (fenced blocks) is in the history, and every source
#     path doc/*.md and bench/README.md cite (a whole `...` span) exists.
# man-lint.sh checks the pages' form; this checks what they say.
# Exit 0 pass, 1 a finding (all listed), 77 when the tools are not built.
# Environment (from t/Makefile.inc): top_builddir.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
bld=${top_builddir:-.}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/doc-lint.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
say() { echo "doc-lint: $*"; fail=1; }
[ -x "$bld/tools/te-info" ] || { echo "SKIP: $bld/tools/te-info not built"; exit 77; }
# a page's text with roff's escaped minus as a plain one
text() { sed 's/\\-/-/g; s/\\(em/-/g' "$1"; }

# ---- 1: cited pages exist -------------------------------------------------
for p in "$top"/man/man[1-8]/*.[1-8]; do
  text "$p" | tr -d '"' |
    grep -oE '(^|[^A-Za-z0-9_-])(te-[a-z0-9-]+|te_[a-z0-9_]+|libte[a-z]*|tecore_[a-z0-9_]+|tegraph_[a-z0-9_]+|tecomm_[a-z0-9_]+) ?\([1-8]\)' |
    sed -E 's/^[^a-z]//; s/ ?\(([1-8])\)$/ \1/' | sort -u |
    while read -r name sec; do
      [ -f "$top/man/man$sec/$name.$sec" ] || echo "${p#"$top"/} cites $name($sec), which has no page"
    done
done > "$tmp/cites"
[ -s "$tmp/cites" ] && { sed 's/^/doc-lint: /' "$tmp/cites"; fail=1; }

# ---- 2: every exported function has a page --------------------------------
NM=${NM:-nm}   # may carry flags ("nm -B"): split on purpose
for l in libtecore libtegraph libtecomm; do
  so=$bld/$l/.libs/$l.so
  [ -f "$so" ] || { say "$so not built"; continue; }
  $NM -D --defined-only "$so" | awk '$2 == "T" { sub(/@.*/, "", $3); print $3 }'
done | sort -u > "$tmp/exports"
[ -s "$tmp/exports" ] || say "no exported functions found"
while read -r fn; do
  [ -f "$top/man/man3/$fn.3" ] || say "exported function $fn has no page man/man3/$fn.3"
done < "$tmp/exports"

# ---- 3: every tunable is documented ---------------------------------------
"$bld/tools/te-info" -e > "$tmp/tunables" 2>&1 || say "te-info -e failed"
cat "$top"/man/man[1-8]/*.[1-8] | sed 's/\\-/-/g' > "$tmp/allman"
for v in $(sed -n 's/^\([A-Z][A-Z0-9_]*\) .*/\1/p' "$tmp/tunables"); do
  grep -qw "$v" "$tmp/allman" || say "tunable $v (te-info -e) is in no man page"
done

# ---- 4: the tools' options and libte(7)'s list of tools -------------------
tools=$(sed -n 's/^bin_PROGRAMS += tools\///p' "$top/tools/Makefile.inc")
[ -n "$tools" ] || say "no tools found in tools/Makefile.inc"
text "$top/man/man7/libte.7" > "$tmp/libte7"
sed -n '/^\.EX/,/^\.EE/p' "$tmp/libte7" > "$tmp/diagram"
sed -n '/^\.SH SEE ALSO/,$p' "$tmp/libte7" > "$tmp/seealso"
for t in $tools; do
  page=$top/man/man1/$t.1
  [ -f "$page" ] || { say "tool $t has no page man/man1/$t.1"; continue; }
  "$bld/tools/$t" --help > "$tmp/help" 2>&1 || say "$t --help failed"
  text "$page" > "$tmp/page"
  for o in $(grep -oE '(^|[^A-Za-z0-9-])--?[A-Za-z][A-Za-z0-9-]*' "$tmp/help" |
               sed -E 's/^[^-]*//' | sort -u); do
    # -x as a flag of its own in the page, --long anywhere in it
    grep -qE -- "(^|[^A-Za-z0-9-])$o([^A-Za-z0-9-]|\$)" "$tmp/page" ||
      say "$t --help names $o; man/man1/$t.1 does not"
  done
  grep -q "$t(1)" "$tmp/diagram" || say "libte(7)'s diagram does not show $t(1)"
  grep -q "^\.BR $t (1)" "$tmp/seealso" || say "libte(7)'s SEE ALSO does not cite $t(1)"
done

# ---- 5: the allreduce algorithms ------------------------------------------
algos=$(sed -n '/^#define TC_ALGOS(X)/,/^$/p' "$top/libtecomm/base/algos.h" |
          sed -n 's/^ *X([A-Z_]*, "\([a-z-]*\)",.*/\1/p' | grep -v '^auto$')
[ -n "$algos" ] || say "no algorithm names found in libtecomm/base/algos.h"
page=$top/man/man3/tecomm_algo_name.3
first=$(sed -n 1p "$page")
case $first in .so\ *) page=$top/man/${first#.so } ;; esac
text "$page" | sed -n '/^\.BR tecomm_algo_name ()/,/^\.SH/p' > "$tmp/algopage"
text "$top/man/man7/libtecomm.7" > "$tmp/tecomm7"
for a in $algos; do
  grep -qE "^\.BR? $a( |\$)" "$tmp/algopage" || say "tecomm_algo_name(3) does not list '$a'"
  grep -qw -- "$a" "$tmp/tecomm7" || say "libtecomm(7) does not name the algorithm '$a'"
  grep -qw -- "$a" "$tmp/libte7" || say "libte(7) does not name the algorithm '$a'"
done
grep -qiE 'not there yet|planned' "$tmp/libte7" &&
  say "libte(7) calls something planned: $(grep -iE 'not there yet|planned' "$tmp/libte7" | head -2)"
# ---- 6: one version in every footer ----------------------------------------
ver=$(sed -n 's/^AC_INIT(\[libte\], \[\([0-9.]*\)\].*/\1/p' "$top/configure.ac")
[ -n "$ver" ] || say "no version found in configure.ac's AC_INIT"
for p in "$top"/man/man[1-8]/*.[1-8]; do
  th=$(grep -m1 '^\.TH ' "$p") || continue
  case $th in *"\"libte $ver\""*) ;; *) say "${p#"$top"/}: footer is not \"libte $ver\": $th" ;; esac
done

# ---- 7: cited bench/ and doc/ paths exist ----------------------------------
for d in libtecore libtegraph libtecomm kernels common tools t man doc bench fortran; do
  [ -d "$top/$d" ] && find "$top/$d" -type f \( -name '*.[ch]' -o -name '*.cu' -o -name '*.cuh' \
    -o -name '*.sh' -o -name '*.py' -o -name '*.md' -o -name '*.inc' -o -name '*.[1-8]' \)
done > "$tmp/files"
for f in README.md NEWS; do [ -f "$top/$f" ] && echo "$top/$f"; done >> "$tmp/files"
while read -r f; do
  [ "$f" = "$top/t/lint/doc-lint.sh" ] && continue
  sed 's/\\-/-/g' "$f" | grep -oE '(^|[^A-Za-z0-9_./-])(bench|doc)/[A-Za-z0-9_.-]+[A-Za-z0-9_]' |
    sed -E 's/^[^bd]//' | sort -u | while read -r c; do
      [ -e "$top/$c" ] || echo "doc-lint: ${f#"$top"/} cites $c, which does not exist"
    done
done < "$tmp/files" > "$tmp/paths"
[ -s "$tmp/paths" ] && { cat "$tmp/paths"; fail=1; }

# ---- 8: the records' commits exist (git checkouts only) --------------------
if git -C "$top" rev-parse --git-dir > /dev/null 2>&1; then
  for r in "$top"/bench/*.md; do
    awk '/^```/ { f = !f; next } !f' "$r" | grep -ohwE '[0-9a-f]{7,40}' | grep '[a-f]' | grep '[0-9]' |
      sort -u | while read -r h; do
        git -C "$top" cat-file -e "$h^{commit}" 2> /dev/null ||
          echo "doc-lint: ${r#"$top"/} cites commit $h, which is not in the history"
      done
  done > "$tmp/commits"
  [ -s "$tmp/commits" ] && { cat "$tmp/commits"; fail=1; }
  # the source paths the design documents cite (foo: a placeholder)
  sed 's/`/\n/g' "$top"/doc/*.md "$top/bench/README.md" |
    grep -oE '^(libtecore|libtegraph|libtecomm|kernels|tools|t|common|fortran|examples|cmake|m4)/[A-Za-z0-9_./-]*[A-Za-z0-9_]$' |
    grep -v foo | sort -u | while read -r c; do
      [ -e "$top/$c" ] || echo "doc-lint: doc/ cites $c, which does not exist"
    done > "$tmp/docpaths"
  [ -s "$tmp/docpaths" ] && { cat "$tmp/docpaths"; fail=1; }
fi

[ $fail = 0 ] && echo "doc-lint: $(wc -l < "$tmp/exports") functions, $(grep -c '^[A-Z]' "$tmp/tunables") tunables, tools: $(echo $tools), algorithms: $(echo $algos)"
exit $fail
