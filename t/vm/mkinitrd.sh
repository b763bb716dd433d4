#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# mkinitrd.sh -- the test VM's initramfs: busybox, the kernel modules soft-RoCE
# needs, rdma-core's libibverbs with its rxe provider, the rdma tool, and the
# given test programs with every shared library they load (found by ldd).
#
# usage: mkinitrd.sh KROOT OUT.cpio INIT LIBDIR PROGRAM...
#   KROOT    a Debian linux-image package unpacked with dpkg-deb -x (its
#            lib/modules/<version>/ holds the .ko files, maybe .ko.xz)
#   INIT     the script that becomes /init
#   LIBDIR   where the programs' own libraries are (LD_LIBRARY_PATH for ldd)
#   PROGRAM  ELF programs, copied to /te/bin
# The archive is an uncompressed newc cpio (the kernel takes it as is).
set -eu
kroot=$1 out=$2 init=$3 libdir=$4
shift 4
bb=$(command -v busybox) || { echo "mkinitrd: no busybox" >&2; exit 77; }
root=$(mktemp -d "${TMPDIR:-/tmp}/te-initrd.XXXXXX")
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/bin" "$root/lib/modules" "$root/te/bin" "$root/te/lib" "$root/etc/libibverbs.d" \
         "$root/proc" "$root/sys" "$root/dev" "$root/tmp" "$root/run"
# merged /usr, as Debian's: a library or provider found under /lib or
# /usr/lib is where libibverbs (which looks in /usr/lib/...) expects it
mkdir -p "$root/usr"
ln -s ../lib "$root/usr/lib"
ln -s ../bin "$root/usr/bin"
ln -s ../bin "$root/usr/sbin"
ln -s bin "$root/sbin"
cp "$bb" "$root/bin/busybox"
cp "$init" "$root/init"
chmod 755 "$root/init"

# the modules, in load order (decompressed: busybox insmod takes plain .ko)
kver=$(ls "$kroot/lib/modules" | head -n 1)
mods="e1000 crc32_generic udp_tunnel ip6_udp_tunnel ib_core ib_uverbs rdma_rxe"
for m in $mods; do
  f=$(find "$kroot/lib/modules/$kver" -name "$m.ko" -o -name "$m.ko.xz" -o -name "$m.ko.zst" | head -n 1)
  [ -n "$f" ] || { echo "mkinitrd: module $m not in $kroot ($kver)" >&2; exit 1; }
  case $f in
    *.xz) xz -dc "$f" > "$root/lib/modules/$m.ko" ;;
    *.zst) zstd -qdc "$f" > "$root/lib/modules/$m.ko" ;;
    *) cp "$f" "$root/lib/modules/$m.ko" ;;
  esac
done
echo "$mods" > "$root/lib/modules/order"

# copies a file to the same path in the image, with every library it needs
add() {
  for f in "$@"; do
    [ -e "$root$f" ] && continue
    mkdir -p "$root$(dirname "$f")"
    cp -L "$f" "$root$f"
    LD_LIBRARY_PATH="$libdir" ldd "$f" 2>/dev/null | awk '/=> \// {print $3} /^\t\/.*ld-linux/ {print $1}' |
      while read -r lib; do add "$lib"; done
  done
}

# rdma-core: libibverbs and the rxe provider (dlopened: found by name)
ibv=$(ldconfig -p | awk '/libibverbs\.so\.1 .*x86-64/ {print $NF; exit}')
[ -n "$ibv" ] || { echo "mkinitrd: libibverbs.so.1 not installed" >&2; exit 77; }
add "$ibv"
prov=$(ls "$(dirname "$ibv")"/libibverbs/librxe-rdmav*.so 2>/dev/null | head -n 1)
[ -n "$prov" ] || { echo "mkinitrd: rdma-core's rxe provider not installed" >&2; exit 77; }
add "$prov"
cp /etc/libibverbs.d/rxe.driver "$root/etc/libibverbs.d/"
rdma=$(command -v rdma || true)
[ -n "$rdma" ] && add "$rdma"
# liburing, as libtecore loads it when present
uring=$(ldconfig -p | awk '/liburing\.so\.2 .*x86-64/ {print $NF; exit}')
[ -n "$uring" ] && add "$uring"

for p in "$@"; do
  cp -L "$p" "$root/te/bin/$(basename "$p")"
  LD_LIBRARY_PATH="$libdir" ldd "$p" 2> /dev/null | awk '/=> \// {print $3} /^\t\/.*ld-linux/ {print $1}' |
    while read -r lib; do
      case $lib in
        "$libdir"/*|*/libte*) cp -L "$lib" "$root/te/lib/" ;;
        *) add "$lib" ;;
      esac
    done
done
(cd "$root" && find . | "$bb" cpio -o -H newc 2>/dev/null) > "$out"
