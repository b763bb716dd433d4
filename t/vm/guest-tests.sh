#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# guest-tests.sh -- what each test VM guest runs (started by init.sh with
# TE_VM_NODE=0 or 1): two ranks of a 2-node x 2-rank communicator per
# guest (processes on vdev; node 0 holds ranks 0-1 and the bootstrap
# root: the hierarchical path, IPC in each guest and verbs between the
# two leaders; te-gpt runs one rank a guest), through every test in turn, each on a bootstrap port of its own
# so the guests stay in step.  Every result is a "TE-VM-TEST name ..."
# line on the console; the host (t/vm/run-vm.sh) checks them all.
node=${TE_VM_NODE:-0}
seed=${TE_VM_SEED:-1}
root=192.168.77.1
export TE_DEVICE=vdev TECOMM_NRANKS=4
# a peer waits at most 8 s; the queue pairs give up after 7 x 67 ms
export TECOMM_TIMEOUT=8000 TECOMM_VERBS_TIMEOUT=14 TECOMM_VERBS_RETRY=7
# 64 KiB chunks keep rxe's work small (about 25 Mbit/s between the guests)
export TECOMM_VERBS_CHUNK_KB=64
# the rendezvous's secret (libtecomm(7), SECURITY): both guests make the
# same from the run's seed, so the keyed rendezvous runs across hosts
# (a real launcher draws one from /dev/urandom and hands it to every rank)
TECOMM_SECRET=$(printf 'te-vm-secret-%s' "$seed" | sha256sum | cut -c1-64)
export TECOMM_SECRET

# te-info sees the rxe device
out=$(/te/bin/te-info 2>&1 | grep '^verbs:')
case $out in
  *rxe0*) echo "TE-VM-TEST devices rank=node$node PASS: $out" ;;
  *) echo "TE-VM-TEST devices rank=node$node FAIL: $out" ;;
esac

# both ranks of this node; $1: port, the rest: the program's arguments
# (its status: 0 when both ranks exited 0)
ranks() {
  port=$1
  shift
  pids=
  for r in $((2 * node)) $((2 * node + 1)); do
    TECOMM_RANK=$r TECOMM_ROOT=$root:$port "$@" &
    pids="$pids $!"
  done
  st=0
  for p in $pids; do wait "$p" || st=1; done
  return $st
}

# the guests boot at their own pace (tens of seconds apart on a loaded
# machine): wait for the other one, so that the tests start in step
peer=192.168.77.$((2 - node))
i=0
until ping -c 1 -W 1 "$peer" > /dev/null 2>&1 || [ $i -ge 120 ]; do i=$((i + 1)); done
echo "TE-VM: node $node sees node $((1 - node)) after $i tries"

# the nodes in step before a test: a failure test leaves one node up to
# TECOMM_TIMEOUT behind the other, which would eat the next rendezvous's
# own TECOMM_TIMEOUT (vm_allreduce sync: a communicator made and destroyed,
# no verbs, waiting up to 120 s)
in_step() { TECOMM_TIMEOUT=120000 TECOMM_VERBS=0 ranks "$1" /te/bin/vm_allreduce sync > /dev/null 2>&1 ||
            echo "TE-VM: node $node: sync on port $1 failed"; }

ranks 29501 /te/bin/vm_allreduce check "$seed"
in_step 29511
# rank 2: node 1's leader (the other ranks of a node open no endpoint)
TECOMM_VERBS_FAULT=mr:2 ranks 29502 /te/bin/vm_allreduce nomr
in_step 29512
# te-allreduce-perf over verbs, for correctness only (its #wrong column)
# (rank 0 prints the table; every rank's exit status counts)
if ranks 29503 /te/bin/te-allreduce-perf -a verbs -b 8 -e 65536 -f 16 -w 1 -i 2 --csv \
     > /tmp/perf 2>&1 &&
   { [ "$node" = 1 ] || awk -F, '/^[0-9]/ && $4 == "verbs" && $8 == "0" {ok++} /^[0-9]/ && $8 != "0" {bad++}
                                 END {exit !(ok >= 4 && !bad)}' /tmp/perf; }; then
  echo "TE-VM-TEST perf rank=node$node PASS: both ranks exited 0$([ "$node" = 0 ] && echo "; $(grep -c ',verbs,' /tmp/perf) sizes over verbs, none wrong")"
else
  echo "TE-VM-TEST perf rank=node$node FAIL:"; cat /tmp/perf
fi
in_step 29513
ranks 29504 /te/bin/vm_allreduce exit 3
in_step 29514
# an injected error completion at node 0's leader (its 40th: a few calls in)
TECOMM_VERBS_FAULT=wc:40:0 ranks 29506 /te/bin/vm_allreduce wcfault
in_step 29515
# te-gpt --dp 2 --zero 1, one rank a guest: the gradients' allreduce and
# the parameters' all-gather over verbs between the guests; node 0 prints
# the losses, which the host compares with its own forked --dp 2 run
# (run-vm.sh reads gpt_opts from this file)
gpt_opts="--synthetic --lr 2e-3 --steps 3 --batch 1 --dp 2 --zero 1 --sample 0 --eval-every 0 --csv -q"
# shellcheck disable=SC2086
if TECOMM_NRANKS=2 TECOMM_RANK=$node TECOMM_ROOT=$root:29507 /te/bin/te-gpt $gpt_opts --seed "$seed" \
     > /tmp/gpt.csv 2> /tmp/gpt.err; then
  echo "TE-VM-TEST gpt rank=node$node PASS: losses $(sed 1d /tmp/gpt.csv | cut -d, -f2 | tr '\n' ' ')"
else
  echo "TE-VM-TEST gpt rank=node$node FAIL:"; cat /tmp/gpt.err /tmp/gpt.csv
fi
in_step 29516
# the link cut mid-transfer: node 1 takes its NIC down while the ranks loop
if [ "$node" = 1 ]; then (sleep 6; ip link set eth0 down; echo "TE-VM: eth0 down") & fi
ranks 29505 /te/bin/vm_allreduce cut
