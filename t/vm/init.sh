#!/bin/busybox sh
# SPDX-License-Identifier: Apache-2.0
# init.sh -- /init of a test VM guest: mounts the kernel's file systems,
# loads soft-RoCE (rdma_rxe after its dependencies), puts an rxe device on
# eth0, then runs t/vm/guest-tests.sh and powers off.  The kernel command
# line says which node this is: te.node=0 (192.168.77.1, the bootstrap
# root) or te.node=1 (192.168.77.2).  Every line that matters goes to the
# serial console, which the host reads.
/bin/busybox --install -s /bin
export PATH=/bin:/te/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mkdir -p /dev/shm && mount -t tmpfs tmpfs /dev/shm
node=0
for a in $(cat /proc/cmdline); do
  case $a in
    te.node=*) node=${a#te.node=} ;;
    te.seed=*) export TE_VM_SEED=${a#te.seed=} ;;
  esac
done
echo "TE-VM: node $node up after $(cut -d' ' -f1 /proc/uptime) s"
for m in $(cat /lib/modules/order); do
  insmod /lib/modules/$m.ko || echo "TE-VM: insmod $m failed"
done
ip link set lo up
ip addr add 192.168.77.$((node + 1))/24 dev eth0
ip link set eth0 up
# the rdma tool by its absolute path: busybox has no applet of that name,
# but a bare name would still find an applet first for others
if [ -x /usr/bin/rdma ]; then
  /usr/bin/rdma link add rxe0 type rxe netdev eth0 || echo "TE-VM: rdma link add failed"
else
  echo eth0 > /sys/module/rdma_rxe/parameters/add
fi
export LD_LIBRARY_PATH=/te/lib
export TE_VM_NODE=$node
sh /te/bin/guest-tests.sh
echo "TE-VM: node $node done after $(cut -d' ' -f1 /proc/uptime) s"
poweroff -f
