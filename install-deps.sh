#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# install-deps.sh -- installs libte's dependencies on Debian or Ubuntu (run
# as root, or through sudo).
#
#   install-deps.sh             what the README's two commands need:
#                               building, make check and make installcheck
#   install-deps.sh --runtime   only what building and using the libraries
#                               needs: a C compiler, the autotools,
#                               pkg-config, liburing and libibverbs
#   install-deps.sh --print [--runtime]
#                               print the package list, install nothing
#
# The CUDA toolkit is not installed here: configure finds /usr/local/cuda
# when present and builds the vdev-only libraries without it.  The default
# set adds: check and libsubunit (the test suites), mandoc (man-page lint),
# valgrind, MPICH and Open MPI (te/comm_mpi.h's test under each), cmake and gfortran (make
# installcheck's CMake and Fortran consumers, the Fortran modules), python3
# (its regex module and venv: the tokenizer's tests; .ci/run adds tokenizers),
# and qemu, busybox, rdma-core's rxe provider and iproute2's rdma tool for
# the test VM (t/vm/run-vm.sh), whose guest kernel .ci/run fetches.
# Exit 0 done, 1 apt-get failed, 2 bad usage.
set -eu
runtime_pkgs="build-essential autoconf automake libtool pkg-config liburing-dev libibverbs-dev"
test_pkgs="check libsubunit-dev mandoc valgrind mpich libmpich-dev openmpi-bin libopenmpi-dev
  qemu-system-x86 busybox-static rdma-core ibverbs-providers iproute2
  cmake gfortran python3 python3-venv python3-regex"
mode=full print=0
for a in "$@"; do
  case $a in
    --runtime) mode=runtime ;;
    --print) print=1 ;;
    -h|--help) sed -n '3,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install-deps.sh: unknown option '$a' (try --help)" >&2; exit 2 ;;
  esac
done
pkgs=$runtime_pkgs
[ $mode = runtime ] || pkgs="$pkgs $test_pkgs"
if [ $print = 1 ]; then
  # shellcheck disable=SC2086
  printf '%s\n' $pkgs
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  exec sudo "$0" "$@"
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q || exit 1
# shellcheck disable=SC2086
apt-get install -y -q --no-install-recommends $pkgs || exit 1
