#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Regenerates the build system from configure.ac and the Makefile fragments.
set -e
cd "$(dirname "$0")"
autoreconf -fi
