#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# install-deps.sh -- installs what building and testing libte needs on
# Debian or Ubuntu (run as root, or through sudo).  The CUDA toolkit is not
# installed here: configure finds /usr/local/cuda when present and builds
# the vdev-only libraries without it.  cmake is for make installcheck's
# CMake consumer.  qemu, busybox, rdma-core's rxe provider and iproute2's
# rdma tool are for the test VM (t/vm/run-vm.sh), whose guest kernel
# .ci/run fetches.
set -eu
if [ "$(id -u)" != 0 ]; then
  exec sudo "$0" "$@"
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends \
  build-essential autoconf automake libtool pkg-config \
  liburing-dev check libsubunit-dev libibverbs-dev mandoc valgrind \
  mpich libmpich-dev openmpi-bin libopenmpi-dev \
  qemu-system-x86 busybox-static rdma-core ibverbs-providers iproute2 \
  cmake gfortran python3
