#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# t/lint/fails-before-fix.sh -- shows that a suite's tests fail on the tree
# before their fix: builds the libraries of an older commit (vdev only,
# no CUDA, in a scratch git worktree), compiles today's suite sources
# against them, runs each suite and prints one line per test,
#
#   <suite> <test> before=<PASS|FAIL|CRASH> <first line of the failure>
#
# then the same for the current build tree, so the two columns can be
# compared.  Not run by make check (a build of an older tree takes minutes).
#
#   t/lint/fails-before-fix.sh [-s SHIM]... [-D DEFINE]... BEFORE SUITE...
#
#   BEFORE   the commit before the fix (e.g. the branch's merge base)
#   SUITE    <folder>/check_<x> (its sources: t/<folder>/check_<x>.c and the t/lib/*.h headers
#            of today's tree)
#   -s SHIM  an extra C file linked into each suite: a stand-in for a
#            function the fix added (t/lint/fbf_mem_range_shim.c; the record
#            must say which, and what it returns); tests that call it
#            fail for that reason
#   -D       a define for the suite's compile (a stand-in for a constant
#            the fix added)
#
# Environment: BUILD (today's build tree, default ./build-asan), KEEP=1
# keeps the scratch tree.  Output: stdout; the record of a run lives in
# bench/ (bench/2026-11-22.md, "Issue 9: the new tests fail before the fix").
set -u
shims= defs=
while getopts s:D: o; do
  case $o in
    s) shims="$shims $(cd "$(dirname "$OPTARG")" && pwd)/$(basename "$OPTARG")" ;;
    D) defs="$defs -D$OPTARG" ;;
    *) echo "usage: $0 [-s shim.c] [-D def] BEFORE SUITE..." >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 2 ] || { echo "usage: $0 [-s shim.c] [-D def] BEFORE SUITE..." >&2; exit 2; }
before=$1
shift
src=$(git rev-parse --show-toplevel) || exit 2
build=${BUILD:-$src/build-asan}
rev=$(git -C "$src" rev-parse --short "$before") || exit 2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fbf.XXXXXX") || exit 2
cleanup() {
  git -C "$src" worktree remove --force "$tmp/src" >/dev/null 2>&1
  [ "${KEEP:-0}" = 1 ] || rm -rf "$tmp"
}
trap cleanup EXIT
echo "# fails-before-fix: libraries of $rev ($(git -C "$src" log -1 --format=%s "$before"))"
echo "# suites from $(git -C "$src" rev-parse --short HEAD)$(git -C "$src" diff --quiet || echo ' (with uncommitted changes)')"
git -C "$src" worktree add --detach "$tmp/src" "$before" >/dev/null 2>&1 || {
  echo "cannot check out $before" >&2; exit 1; }
(
  cd "$tmp/src" && ./autogen.sh >/dev/null 2>&1 && mkdir -p b && cd b &&
    ../configure -q --without-cuda >/dev/null 2>&1 &&
    make -j2 libtecore/libtecore.la libtegraph/libtegraph.la >"$tmp/build.log" 2>&1
) || { echo "building $rev failed; see $tmp/build.log" >&2; KEEP=1; exit 1; }
lib=$tmp/src/b
inc="-I$tmp/src -I$tmp/src/libtecore -I$tmp/src/libtegraph -I$tmp/src/common -I$tmp/src/kernels -I$lib -I$lib/libtecore -I$lib/libtecore/te"
# today's test headers over the old ones (the suites include them by name)
mkdir -p "$tmp/t" && cp "$src"/t/lib/*.h "$tmp/t/"

# One line per test of a TAP stream: "ok N - file:tcase:test: msg" (Check's
# format) becomes "test PASS" or "test FAIL msg".
tap_lines() {
  sed -n -e 's/^ok [0-9]* - [^:]*:[^:]*:\([^:]*\):.*$/\1 PASS/p' \
         -e 's/^not ok [0-9]* - [^:]*:[^:]*:\([^:]*\): *\(.*\)$/\1 FAIL \2/p'
}

status=0
for s in "$@"; do
  n=$(basename "$s")   # a suite by its path under t/ (core/check_act)
  cp "$src/t/$s.c" "$tmp/t/$n.c"
  if ! cc -std=gnu11 -O1 -g -D_GNU_SOURCE $defs $inc -I"$tmp/t" "$tmp/t/$n.c" $shims \
       -o "$tmp/$n" -L"$lib/libtegraph/.libs" -L"$lib/libtecore/.libs" -ltegraph -ltecore \
       $(pkg-config --libs check 2>/dev/null || echo -lcheck) -lm -lpthread \
       >"$tmp/$n.cc.log" 2>&1; then
    echo "$s (all) before=NOBUILD $(grep -m1 'error' "$tmp/$n.cc.log")"
    status=1
    continue
  fi
  LD_LIBRARY_PATH="$lib/libtegraph/.libs:$lib/libtecore/.libs" TE_DEVICE=vdev \
    "$tmp/$n" >"$tmp/$n.before" 2>&1
  TE_DEVICE=vdev "$build/t/$s" >"$tmp/$n.after" 2>&1
  tap_lines <"$tmp/$n.after" >"$tmp/$n.after.l"
  tap_lines <"$tmp/$n.before" >"$tmp/$n.before.l"
  while read -r t r m; do
    b=$(grep "^$t " "$tmp/$n.before.l" | head -1 | cut -d' ' -f2-)
    [ -n "$b" ] || b="CRASH (no TAP line: the suite died)"
    echo "$s $t before=$b | after=$r"
  done <"$tmp/$n.after.l"
done
exit $status
