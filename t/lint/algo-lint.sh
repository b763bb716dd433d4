#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# algo-lint.sh -- the pages list libtecomm's allreduce algorithms as the one
# list does (TC_ALGOS in libtecomm/base/algos.h, issue 30):
#  1. libtecomm(7)'s Algorithms section has one tagged entry per algorithm
#     (every name but auto), and no entry the list lacks;
#  2. tecomm_comm_describe(3) lists what tecomm_algo_name returns: every
#     name, in the list's (the enum's) order;
#  3. libtecomm(7)'s TECOMM_ALGO entry gives every name, in that order.
# Exit 0 pass, 1 a finding (all listed).
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/algo-lint.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
say() { echo "algo-lint: $*"; fail=1; }
# a page's text with roff's escaped minus as a plain one
text() { sed 's/\\-/-/g' "$1"; }

# the list: X(ID, "name", kernel, at, clobbers) rows of TC_ALGOS
sed -n '/^#define TC_ALGOS(X)/,/^$/p' "$top/libtecomm/base/algos.h" |
  sed -n 's/^ *X([A-Z_]*, "\([a-z-]*\)",.*/\1/p' > "$tmp/list"
[ -s "$tmp/list" ] || { say "no algorithms found in libtecomm/base/algos.h"; exit 1; }
grep -v '^auto$' "$tmp/list" | sort > "$tmp/list-noauto"

# 1: libtecomm(7), Algorithms: the first word of each .TP tag
text "$top/man/man7/libtecomm.7" > "$tmp/tecomm7"
sed -n '/^\.SS Algorithms$/,/^\.S[SH] /p' "$tmp/tecomm7" |
  awk 'tag { if ($1 == ".B" || $1 == ".BR") print $2; tag = 0 } $1 == ".TP" { tag = 1 }' |
  tr -d '"' | sort > "$tmp/page7"
comm -23 "$tmp/list-noauto" "$tmp/page7" | while read -r a; do
  echo "algo-lint: libtecomm(7), Algorithms, has no entry for '$a'"
done > "$tmp/missing"
comm -13 "$tmp/list-noauto" "$tmp/page7" | while read -r a; do
  echo "algo-lint: libtecomm(7), Algorithms, has an entry '$a' that libtecomm/base/algos.h lacks"
done >> "$tmp/missing"
[ -s "$tmp/missing" ] && { cat "$tmp/missing"; fail=1; }

# 2: tecomm_comm_describe(3): tecomm_algo_name's values, in order
text "$top/man/man3/tecomm_comm_describe.3" |
  sed -n '/^\.BR tecomm_algo_name ()/,/("unknown"/p' |
  awk '$1 == ".B" || $1 == ".BR" { print $2 }' | tr -d ',' | grep -v '^tecomm_algo_name$' \
  > "$tmp/page3"
cmp -s "$tmp/list" "$tmp/page3" ||
  say "tecomm_comm_describe(3) lists $(echo $(cat "$tmp/page3")), not $(echo $(cat "$tmp/list"))"

# 3: libtecomm(7), ENVIRONMENT, TECOMM_ALGO: the names in order
sed -n '/^\.SH ENVIRONMENT$/,/^\.SH [A-Z]/p' "$tmp/tecomm7" |
  awk '/^\.B TECOMM_ALGO$/ { on = 1; next } on && /^\.(TP|PP|SH)/ { exit } on' |
  grep -oE '[a-z][a-z-]*' | grep -vx 'default' > "$tmp/env7"
cmp -s "$tmp/list" "$tmp/env7" ||
  say "libtecomm(7)'s TECOMM_ALGO gives $(echo $(cat "$tmp/env7")), not $(echo $(cat "$tmp/list"))"

[ $fail = 0 ] && echo "algo-lint: $(wc -l < "$tmp/list") algorithms, as libtecomm/base/algos.h lists them"
exit $fail
