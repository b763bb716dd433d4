#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu-run-ab.sh -- on a GPU machine, from the top of a configured and
# built tree: the whole suite under
# TE_DEVICE=cuda, and te-bench --all of this tree beside an older tree's,
# both built here the same way, so that a refactor shows it changed no
# figure (issue 30: within 1% of before on every row, same call).
#
#     OUT=gpu-out OLD=/path/to/libte-0.2.0.tar.gz PHASES="check ab" bash bench/gpu-run-ab.sh
#
# Phases: check  make -j4 check TE_DEVICE=cuda (test-suite.log kept), while
#                the old tree builds in /tmp/te-old (kept while the machine
#                stays warm);
#         ab     te-bench --all: this tree, then the old one (AB_ORDER=ba:
#                old first), each run's output in $OUT/te-bench-{new,old}-N.txt
#                (N: AB_PASS, default 1).
# Never changes clocks, power, MIG or multicast.
set -u
out=${OUT:-gpu-out}
mkdir -p "$out"
summary="$out/summary.txt"
phases=${PHASES:-check ab}
old=${OLD:-}
pass=${AB_PASS:-1}
jobs=$(nproc)
# cuDNN from PyTorch's environment, for the attention rows of both trees
cudnn=$(python3 -c 'import nvidia.cudnn; print(list(nvidia.cudnn.__path__)[0])' 2>/dev/null)
[ -n "$cudnn" ] && export TECORE_CUDNN_LIB="$cudnn/lib/libcudnn.so.9"
step() {   # step NAME COMMAND...: runs it, output to $out/NAME.txt
  local name=$1
  shift
  local t0=$SECONDS
  timeout "${STEP_TIMEOUT:-400}" "$@" > "$out/$name.txt" 2>&1
  local rc=$?
  printf '%-24s rc %3d %5d s  %s\n' "$name" "$rc" $((SECONDS - t0)) "$*" >> "$summary"
}
has() { case " $phases " in *" $1 "*) return 0 ;; esac; return 1; }
build_old() {
  [ -n "$old" ] && [ -f "$old" ] || { echo "no OLD tarball"; return 1; }
  [ -x /tmp/te-old/tools/te-bench ] && { echo "old tree already built"; return 0; }
  rm -rf /tmp/te-old && mkdir -p /tmp/te-old &&
    tar -xzf "$old" -C /tmp/te-old --strip-components=1 &&
    (cd /tmp/te-old && ./configure -q ${CONFIGURE_FLAGS:-} > configure.log 2>&1 &&
       make -s -j"$jobs" > make.log 2>&1) || { tail -30 /tmp/te-old/make.log; return 1; }
  echo "old tree built"
}
if has check; then
  step machine sh -c 'nvidia-smi; nvcc --version | tail -2'
  build_old > "$out/old-build.txt" 2>&1 &
  bpid=$!
  step make-check env TE_DEVICE=cuda make -k -j"${CHECK_JOBS:-4}" check
  cp test-suite.log "$out/test-suite.log" 2>/dev/null
  grep -E '^(FAIL|ERROR):' test-suite.log > "$out/failures.txt" 2>/dev/null
  wait "$bpid"
fi
if has ab; then
  [ -x /tmp/te-old/tools/te-bench ] || build_old > "$out/old-build.txt" 2>&1
  if [ "${AB_ORDER:-ab}" = ab ]; then
    step "te-bench-new-$pass" tools/te-bench --all
    step "te-bench-old-$pass" /tmp/te-old/tools/te-bench --all
  else
    step "te-bench-old-$pass" /tmp/te-old/tools/te-bench --all
    step "te-bench-new-$pass" tools/te-bench --all
  fi
fi
cat "$summary"
