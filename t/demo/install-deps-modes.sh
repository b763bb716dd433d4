#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# install-deps-modes.sh -- install-deps.sh's two package sets, read through
# --print (nothing is installed): --runtime names exactly what building and
# using the libraries needs (compiler, autotools, pkg-config, liburing,
# libibverbs) and none of the test machinery; the default is a superset
# that also has the test suites', installcheck's and the test VM's
# packages; an unknown option is bad usage (exit 2).
# Exit 0 pass, 1 fail.
script=$(dirname "$0")/../../install-deps.sh
fail=0
rt=$(sh "$script" --print --runtime) || { echo "--print --runtime failed"; exit 1; }
full=$(sh "$script" --print) || { echo "--print failed"; exit 1; }
for p in build-essential autoconf automake libtool pkg-config liburing-dev libibverbs-dev; do
  echo "$rt" | grep -qx "$p" || { echo "--runtime lacks $p"; fail=1; }
  echo "$full" | grep -qx "$p" || { echo "the default lacks $p"; fail=1; }
done
for p in check libsubunit-dev mandoc valgrind mpich libmpich-dev qemu-system-x86 \
    busybox-static rdma-core cmake gfortran python3; do
  echo "$rt" | grep -qx "$p" && { echo "--runtime installs $p, a test dependency"; fail=1; }
  echo "$full" | grep -qx "$p" || { echo "the default lacks $p"; fail=1; }
done
[ "$(echo "$rt" | wc -l)" = 7 ] || { echo "--runtime names other packages:"; echo "$rt"; fail=1; }
sh "$script" --no-such-option >/dev/null 2>&1
rc=$?
[ $rc = 2 ] || { echo "an unknown option exits $rc, not 2"; fail=1; }
exit $fail
