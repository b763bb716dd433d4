#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# ldd-lint.sh -- libibverbs and liburing are loaded at run time, never
# linked: no library of libte needs either (ldd, the NEEDED entries), none
# leaves an ibv_* or io_uring_* symbol undefined (a call that slipped past
# the dlopen tables, verbs_api.h and te_uring.h, would), and te-info runs
# and says which verbs devices there are or why there are none -- also
# when the libraries cannot be loaded (TECOMM_VERBS_LIB and
# TECORE_URING_LIB pointed at names that do not exist), when offload
# spill must stay in host memory and say why.
# Exit 0: all hold; 1: one does not.  Environment: top_builddir, NM.
set -u
b=${top_builddir:-.}
nm=${NM:-nm}
status=0
fail() { echo "FAIL: $*"; status=1; }

for lib in libtecore/.libs/libtecore.so libtegraph/.libs/libtegraph.so \
           libtecomm/.libs/libtecomm.so; do
  so=$b/$lib
  [ -f "$so" ] || { fail "$so not built"; continue; }
  if command -v ldd >/dev/null 2>&1; then
    deps=$(LD_LIBRARY_PATH="$b/libtecore/.libs:$b/libtegraph/.libs:$b/libtecomm/.libs" ldd "$so" 2>&1)
    echo "$deps" | grep -E 'libibverbs|liburing' && fail "ldd $lib shows the line(s) above"
  fi
  if command -v readelf >/dev/null 2>&1; then
    readelf -d "$so" | grep NEEDED | grep -E 'libibverbs|liburing' &&
      fail "$lib has the NEEDED entries above"
  fi
  und=$($nm -D --undefined-only "$so" | awk '{print $NF}' | grep -E '^(ibv_|__ibv_|io_uring_|__io_uring_)')
  [ -n "$und" ] && fail "$lib leaves these undefined (call them through the dlopen table): $und"
  echo "ok: $lib links neither libibverbs nor liburing"
done

info=$b/tools/te-info
[ -x "$info" ] || { fail "$info not built"; exit 1; }
tmp=${TMPDIR:-/tmp}/ldd-lint.$$
trap 'rm -rf "$tmp" "$tmp".*' EXIT
mkdir -p "$tmp" || exit 99

# te-info may fail later (TE_DEVICE=cuda without a GPU); its build lines
# come first either way.
TE_DEVICE=vdev "$info" > "$tmp.out" 2>&1
v=$(grep '^verbs:' "$tmp.out")
case $v in
  "verbs:       "[0-9]*" device"*": "?*) echo "ok: te-info: $v" ;;
  "verbs:       no devices ("*) echo "ok: te-info: $v" ;;
  "verbs:       unavailable: "*" "?*) echo "ok: te-info: $v" ;;
  *) cat "$tmp.out"; fail "te-info has no verbs line that lists devices or says why not" ;;
esac
grep '^io_uring:    ' "$tmp.out" || fail "te-info has no io_uring line"

# Neither library loadable: both lines name the missing library.
TE_DEVICE=vdev TECOMM_VERBS_LIB=libte-no-such-verbs.so.1 TECORE_URING_LIB=libte-no-such-uring.so.2 \
  "$info" > "$tmp.out" 2>&1
if grep -q '^verbs: *unavailable: tecomm_verbs_devices: libte-no-such-verbs.so.1 not found' "$tmp.out"; then
  echo "ok: without libibverbs: $(grep '^verbs:' "$tmp.out")"
else
  cat "$tmp.out"; fail "te-info without libibverbs does not name the missing library"
fi
if grep -q '^io_uring: *no (libte-no-such-uring.so.2 not found' "$tmp.out"; then
  echo "ok: without liburing: $(grep '^io_uring:' "$tmp.out")"
else
  cat "$tmp.out"; fail "te-info without liburing does not name the missing library"
fi

# Offload asked to spill without liburing: it keeps working, in memory,
# and its warning says why.
demo=$b/tools/te-demo
if [ -x "$demo" ]; then
  if TE_DEVICE=vdev TECORE_URING_LIB=libte-no-such-uring.so.2 "$demo" --no-graphs --steps 2 \
       --microbatches 2 --layers 4 --tokens 64 --no-bf16 --offload --offload-prefetch 1 \
       --offload-dir "$tmp" --host-budget 0.3 > "$tmp.demo" 2>&1; then
    if grep -q 'no spill: libte-no-such-uring.so.2 not found' "$tmp.demo"; then
      echo "ok: te-demo offload without liburing: $(grep -o 'no spill: [^;]*' "$tmp.demo" | head -1)"
    else
      cat "$tmp.demo"; fail "te-demo's offload without liburing does not say why it cannot spill"
    fi
  else
    cat "$tmp.demo"; fail "te-demo --offload-dir without liburing failed"
  fi
fi
exit $status
