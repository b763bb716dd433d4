#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# t/lint/spdx-selftest.sh -- make check's test of t/lint/spdx-add.sh and
# t/lint/spdx-lint.sh on a small made-up tree (not on libte's own files, whose
# headers are added in one go later): one file of each comment syntax, a
# file that already has the line, a script known by its shebang only, a
# man page, a man link page and a README that must stay as they are.
# Asserts: the lint fails before and lists each file; spdx-add writes the
# exact expected first lines; the lint passes after; a second spdx-add
# changes no byte; file modes are kept.  Exit 0 pass, 1 fail.
set -u
here=$(cd "$(dirname "$0")" && pwd) || exit 1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/spdx-selftest.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

mkdir -p "$tmp/t/lint" "$tmp/src" "$tmp/man/man7" "$tmp/man/man3" "$tmp/.ci"
cp "$here/spdx-files.sh" "$here/spdx-add.sh" "$here/spdx-lint.sh" "$tmp/t/lint/"
cd "$tmp" || exit 1
printf '/* a.c -- what a is for,\n * over two lines. */\nint a;\n' > src/a.c
printf '// k.cu -- a kernel.\n__global__ void k() {}\n' > src/k.cu
printf '/* k2.cu -- a kernel with C comments. */\n' > src/k2.cu
printf '#!/bin/sh\n# s.sh -- a script.\necho hi\n' > src/s.sh
chmod 755 src/s.sh
printf '#!/bin/bash\n# run -- CI, known by its shebang.\n' > .ci/run
chmod 755 .ci/run
printf '# Makefile.am -- the build.\nSUBDIRS =\n' > Makefile.am
printf 'dnl configure.ac -- configure.\nAC_INIT([x], [1])\n' > configure.ac
printf 'dnl x.m4 -- a macro.\n' > src/x.m4
printf '/* x.map -- exports. */\nX_1 { global: x; local: *; };\n' > src/x.map
printf '# x.pc -- pkg-config file.\nName: x\n' > src/x.pc.in
printf '/* v.h -- version (generated). */\n#define V 1\n' > src/v.h.in
printf '! f.f90 -- a module.\nmodule f\nend module\n' > src/f.f90
printf '/* SPDX-License-Identifier: Apache-2.0 */\n/* has.h -- has it. */\n' > src/has.h
: > src/empty.sh
printf '.\\" x.7 -- a page.\n.TH X 7\n.SH NAME\nx \\- y\n' > man/man7/x.7
printf "'\\\\\" t\n.TH T 7\n" > man/man7/t.7
printf '.so man7/x.7\n' > man/man3/x_link.3
printf '# README\n' > README.md
before=$(cksum README.md man/man3/x_link.3 src/has.h)

out=$(sh t/lint/spdx-lint.sh --man) && bad "the lint passed on a tree without the lines"
for f in src/a.c src/k.cu src/s.sh .ci/run Makefile.am configure.ac src/x.m4 src/x.map \
         src/x.pc.in src/v.h.in src/f.f90 src/empty.sh man/man7/x.7 man/man7/t.7; do
  echo "$out" | grep -q "^spdx-lint: $f:" || bad "the lint did not list $f"
done
echo "$out" | grep -q 'has\.h\|x_link\|README' && bad "the lint listed a file that is fine"

sh t/lint/spdx-add.sh --man > add1.out || bad "spdx-add failed: $(cat add1.out)"
expect() {   # expect FILE LINE-NO TEXT
  got=$(sed -n "$2p" "$1")
  [ "$got" = "$3" ] || bad "$1 line $2 is '$got', expected '$3'"
}
ID='SPDX-License-Identifier: Apache-2.0'
expect src/a.c 1 "/* $ID */"
expect src/a.c 2 '/* a.c -- what a is for,'
expect src/k.cu 1 "// $ID"
expect src/k2.cu 1 "/* $ID */"
expect src/s.sh 1 '#!/bin/sh'
expect src/s.sh 2 "# $ID"
expect .ci/run 2 "# $ID"
expect Makefile.am 1 "# $ID"
expect configure.ac 1 "dnl $ID"
expect src/x.m4 1 "dnl $ID"
expect src/x.map 1 "/* $ID */"
expect src/x.pc.in 1 "# $ID"
expect src/v.h.in 1 "/* $ID */"
expect src/f.f90 1 "! $ID"
expect src/empty.sh 1 "# $ID"
expect man/man7/x.7 1 ".\\\" $ID"
expect man/man7/t.7 1 "'\\\" t"
expect man/man7/t.7 2 ".\\\" $ID"
[ "$(wc -l < src/a.c)" = 4 ] || bad "src/a.c gained more than one line"
[ -x src/s.sh ] && [ -x .ci/run ] || bad "spdx-add lost an executable bit"
[ "$(cksum README.md man/man3/x_link.3 src/has.h)" = "$before" ] ||
  bad "spdx-add changed a file it must leave alone"

sh t/lint/spdx-lint.sh --man > lint2.out || bad "the lint fails after spdx-add: $(cat lint2.out)"
snap=$(find . -type f ! -name '*.out' | sort | xargs cksum)
sh t/lint/spdx-add.sh --man > add2.out || bad "the second spdx-add failed"
grep -q '^spdx-add: 0 files changed' add2.out || bad "the second spdx-add changed files: $(cat add2.out)"
[ "$(find . -type f ! -name '*.out' | sort | xargs cksum)" = "$snap" ] ||
  bad "the second spdx-add changed bytes"
if [ -n "${MANDOC:-}" ]; then
  "$MANDOC" -T lint -W warning man/man7/x.7 > mandoc.out 2>&1 || true
  grep -q 'comment\|SPDX' mandoc.out && bad "mandoc objects to the inserted comment: $(cat mandoc.out)"
fi
[ $fail = 0 ] && echo "ok: spdx-add inserts the line in every syntax, once; spdx-lint agrees"
exit $fail
