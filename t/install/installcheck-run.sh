#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# t/install/installcheck-run.sh -- make installcheck's driver (t/install/installcheck.inc):
# runs each installcheck script given, each of which builds a program
# against the INSTALLED libte and runs it, and prints one line per script:
#   PASS: <script>   exit 0
#   SKIP: <script>   exit 77 (a tool it needs is missing; it says which)
#   FAIL: <script>   anything else; its log is printed below the line
# Logs go to <builddir>/t/installcheck-*.log.  Exit 1 when a script failed,
# or when one skipped and TE_INSTALLCHECK_STRICT=1 (CI sets it, so that a
# consumer that did not run cannot pass there).
#
# The scripts read from the environment: prefix, exec_prefix, libdir,
# includedir, bindir, docdir (the installed libte), top_srcdir (absolute), CC,
# CMAKE, PKG_CONFIG; each makes and removes its own temporary folder.
set -u
top_srcdir=$(cd "${top_srcdir:?}" && pwd) || exit 1
export top_srcdir
mkdir -p t
pass=0 skip=0 fail=0
for s in "$@"; do
  name=${s##*/}
  name=${name%.sh}
  log=t/$name.log
  $SHELL "$top_srcdir/$s" > "$log" 2>&1
  rc=$?
  case $rc in
    0) echo "PASS: $s"; pass=$((pass + 1)) ;;
    77) echo "SKIP: $s ($(tail -1 "$log"))"; skip=$((skip + 1)) ;;
    *) echo "FAIL: $s (exit $rc)"; sed 's/^/  | /' "$log"; fail=$((fail + 1)) ;;
  esac
done
echo "installcheck: $pass passed, $skip skipped, $fail failed (against $libdir)"
[ "$fail" = 0 ] || exit 1
if [ "$skip" != 0 ] && [ "${TE_INSTALLCHECK_STRICT:-0}" = 1 ]; then
  echo "installcheck: TE_INSTALLCHECK_STRICT=1 and $skip skipped" >&2
  exit 1
fi
exit 0
