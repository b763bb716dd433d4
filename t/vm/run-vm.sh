#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# run-vm.sh -- the test VM: two QEMU guests (TCG: no KVM needed) with
# soft-RoCE, joined by a virtual link, run libtecomm's inter-node tests
# (t/vm/guest-tests.sh: the verbs devices, a 2-node x 2-rank hierarchical
# allreduce on vdev, the same bits on every rank, te-allreduce-perf -a
# verbs, te-gpt --dp 2 --zero 1 with one rank a guest (its losses this
# host's forked run's), a failed memory registration, a peer that exits, an injected
# error completion, the link cut mid-transfer).  Each guest boots Debian's own
# kernel (a linux-image package unpacked, not installed) with an
# initramfs made here (t/vm/mkinitrd.sh); results come back as
# "TE-VM-TEST name rank=R PASS|FAIL" lines on the serial consoles.
#
# Exit 0: every expected result passed; 1: one failed or is missing (the
# consoles are printed); 77: skip -- no qemu-system-x86_64, no kernel
# package, busybox or rdma-core's rxe provider missing, TE_VM=0, or a
# sanitizer build (the VM runs the plain build's programs).
#
# Environment: top_builddir, TE_T_SANITIZERS (t/Makefile.inc);
#   TE_VM_KERNEL  an unpacked linux-image package (dpkg-deb -x), or
#   TE_VM_CACHE   a directory holding linux-image-*-amd64*.deb (unpacked
#                 into it on first use; .ci/run fetches one there);
#                 default $HOME/.cache/libte-vm
#   TE_VM_TIMEOUT seconds the whole VM run may take (default 280)
#   TE_TEST_SEED  the allreduce inputs' seed (default: random, printed)
set -u
b=${top_builddir:-.}
b=$(cd "$b" && pwd) || exit 1
here=$(cd "$(dirname "$0")" && pwd) || exit 1
skip() { echo "SKIP: $*"; exit 77; }

[ "${TE_VM:-1}" = 0 ] && skip "TE_VM=0"
[ -n "${TE_T_SANITIZERS:-}" ] && skip "sanitizer build: the VM runs the plain build's programs"
qemu=$(command -v qemu-system-x86_64) || skip "no qemu-system-x86_64 (apt-get install qemu-system-x86)"
command -v busybox > /dev/null || skip "no busybox (apt-get install busybox-static)"

kroot=${TE_VM_KERNEL:-}
if [ -z "$kroot" ]; then
  cache=${TE_VM_CACHE:-${HOME:-/tmp}/.cache/libte-vm}
  deb=$(ls "$cache"/linux-image-*-amd64*.deb 2>/dev/null | grep -v -- -dbg | head -n 1)
  [ -n "$deb" ] || skip "no kernel package in $cache (apt-get download linux-image-<version>-amd64 there)"
  kroot=$cache/root.$(basename "$deb" .deb)
  if [ ! -d "$kroot/boot" ]; then
    command -v dpkg-deb > /dev/null || skip "no dpkg-deb to unpack $deb"
    rm -rf "$kroot.tmp" && mkdir -p "$kroot.tmp" && dpkg-deb -x "$deb" "$kroot.tmp" &&
      mv "$kroot.tmp" "$kroot" || { echo "FAIL: cannot unpack $deb"; exit 1; }
  fi
fi
kernel=$(ls "$kroot"/boot/vmlinuz-* 2>/dev/null | head -n 1)
[ -n "$kernel" ] || skip "no boot/vmlinuz-* in $kroot"

prog() {   # the ELF behind a libtool wrapper
  for p in "$b/$1/.libs/$2" "$b/$1/.libs/lt-$2" "$b/$1/$2"; do
    [ -f "$p" ] && head -c 4 "$p" | grep -q ELF && { echo "$p"; return 0; }
  done
  return 1
}
vmar=$(prog t/vm vm_allreduce) || { echo "FAIL: t/vm/vm_allreduce not built"; exit 1; }
info=$(prog tools te-info) || { echo "FAIL: tools/te-info not built"; exit 1; }
perf=$(prog tools te-allreduce-perf) || { echo "FAIL: tools/te-allreduce-perf not built"; exit 1; }
gpt=$(prog tools te-gpt) || { echo "FAIL: tools/te-gpt not built"; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/te-vm.XXXXXX") || exit 1
pids=
cleanup() {
  for p in $pids; do kill "$p" 2> /dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
start=$(date +%s)
cp "$here/guest-tests.sh" "$tmp/guest-tests.sh"
sh "$here/mkinitrd.sh" "$kroot" "$tmp/initrd.cpio" "$here/init.sh" \
   "$b/libtecore/.libs:$b/libtegraph/.libs:$b/libtecomm/.libs" \
   "$vmar" "$info" "$perf" "$gpt" "$tmp/guest-tests.sh"
rc=$?
[ $rc = 77 ] && skip "the initramfs cannot be made (see above)"
[ $rc = 0 ] || { echo "FAIL: mkinitrd.sh failed ($rc)"; exit 1; }
echo "# initramfs: $(($(wc -c < "$tmp/initrd.cpio") / 1048576)) MiB in $(($(date +%s) - start)) s; kernel $kernel"

seed=${TE_TEST_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
echo "# seed $seed (TE_TEST_SEED=$seed reproduces the inputs)"
# the guests' te-gpt --dp 2, here as forked ranks on this host: the
# losses both guests must give (the two ranks' sums are one addition,
# the same bits whichever level adds)
gpt_opts=$(sed -n 's/^gpt_opts="\(.*\)"$/\1/p' "$here/guest-tests.sh")
# shellcheck disable=SC2086
gpt_want=$(TE_DEVICE=vdev "$b/tools/te-gpt" $gpt_opts --seed "$seed" 2> "$tmp/gpt.err" |
           sed 1d | cut -d, -f2 | tr '\n' ' ')
[ -n "$gpt_want" ] || { echo "FAIL: te-gpt $gpt_opts on this host:"; cat "$tmp/gpt.err"; exit 1; }
limit=${TE_VM_TIMEOUT:-280}
# the guests' link: a Unix stream socket in the run's own directory (no
# TCP port another job on the machine could hold); guest 0 listens, and
# guest 1 starts only once the socket exists (qemu takes seconds to start
# on a loaded machine, and a client that finds no listener exits)
sock=$tmp/link.sock
[ ${#sock} -lt 100 ] || { echo "FAIL: the socket path $sock is too long for AF_UNIX"; exit 1; }
guest() {   # node, netdev side (server=on or server=off)
  timeout -k 5 "$limit" "$qemu" -nodefaults -no-user-config -machine pc -accel tcg -m 1024 -smp 1 \
    -display none -monitor none -serial "file:$tmp/console.$1" -no-reboot \
    -kernel "$kernel" -initrd "$tmp/initrd.cpio" \
    -append "console=ttyS0 panic=-1 no_timer_check quiet te.node=$1 te.seed=$seed" \
    -netdev "stream,id=n0,$2,addr.type=unix,addr.path=$sock" \
    -device "e1000,netdev=n0,mac=52:54:00:77:00:0$1" > "$tmp/qemu.$1" 2>&1
  echo "$?" > "$tmp/qemu-rc.$1"
}
guest 0 server=on &
pids="$!"
i=0
while [ ! -S "$sock" ] && [ $i -lt 600 ] && kill -0 $pids 2> /dev/null; do
  sleep 0.1
  i=$((i + 1))
done
if [ -S "$sock" ]; then
  guest 1 server=off &
  pids="$pids $!"
else
  echo "FAIL: guest 0 did not open its link socket within 60 s"
fi
wait $pids
pids=
secs=$(($(date +%s) - start))

# every test, and the ranks (or nodes) that must report it
expect="devices:node0,node1 check:0,1,2,3 nomr:0,1,2,3 perf:node0,node1 gpt:node0,node1 exit:0,1,2,3 wcfault:0,1,2,3 cut:0,1,2,3"
status=0
cat "$tmp/console.0" "$tmp/console.1" 2> /dev/null | grep '^TE-VM-TEST ' > "$tmp/results"
for e in $expect; do
  t=${e%%:*}
  for r in $(echo "${e#*:}" | tr , ' '); do
    line=$(grep "^TE-VM-TEST $t rank=$r " "$tmp/results" | head -n 1)
    case $line in
      *" PASS"*) echo "ok: $line" ;;
      "") echo "FAIL: no result from test $t, rank $r"; status=1 ;;
      *) echo "FAIL: $line"; status=1 ;;
    esac
  done
done
# the same bits on every rank of both nodes
digests=$(grep '^TE-VM-TEST check rank=[0-3] PASS' "$tmp/results" | sed -n 's/.*digest \([0-9a-f]*\).*/\1/p' | sort -u)
case $(echo "$digests" | grep -c .) in
  1) echo "ok: the check results are the same bits on every rank (digest $digests)" ;;
  *) echo "FAIL: the ranks' check results differ: $(echo $digests)"; status=1 ;;
esac
# te-gpt across the guests: the one-host run's losses
# (the serial console ends its lines with \r; the words compared alone)
got=$(sed -n 's/^TE-VM-TEST gpt rank=node0 PASS: losses //p' "$tmp/results" | head -n 1 | tr -d '\r')
got=$(echo $got)
gpt_want=$(echo $gpt_want)
if [ -n "$got" ] && [ "$got" = "$gpt_want" ]; then
  echo "ok: te-gpt --dp 2 across the guests gives this host's losses: $got"
else
  echo "FAIL: te-gpt --dp 2 across the guests: losses '$got', on this host '$gpt_want'"; status=1
fi
echo "# the VM run took $secs s (limit $limit s)"
if [ $status != 0 ]; then
  for n in 0 1; do
    echo "---- guest $n console ----"
    cat "$tmp/console.$n" 2> /dev/null
    cat "$tmp/qemu.$n" 2> /dev/null
    echo "(qemu $n exit status: $(cat "$tmp/qemu-rc.$n" 2> /dev/null || echo "not started"))"
  done
fi
exit $status
