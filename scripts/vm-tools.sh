#!/usr/bin/env bash
# vm-tools.sh: what the cgroup v2 suite (tests/cgroupv2, through tests/vm) needs to boot a
# real unified-hierarchy kernel under QEMU: qemu-system-x86 and busybox-static from Debian's
# packages, a Debian 6.1 kernel (its vmlinux and the few modules the VM loads) and the base
# initramfs, all in .cache/vm. Idempotent: it does nothing when the cached files are newer
# than this script. Run as root (apt-get); the first run downloads about 90 MB.
#
# The kernel package is pinned (kernel_pkg below, or TIDAL_VM_KERNEL_PKG); when Debian has
# dropped that ABI the newest linux-image-6.1.0-*-amd64 it offers is taken instead.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
cache="$root/.cache/vm"
kernel_pkg="${TIDAL_VM_KERNEL_PKG:-linux-image-6.1.0-57-amd64}"

# Modules the initramfs loads, in load order (dependencies first, from each .ko's depends=):
# virtio-pci for the devices, 9p over virtio for the shared folder, virtio-blk and brd for
# block devices io.max can limit.
modules=(
	drivers/virtio/virtio_ring drivers/virtio/virtio
	drivers/virtio/virtio_pci_legacy_dev drivers/virtio/virtio_pci_modern_dev drivers/virtio/virtio_pci
	drivers/block/virtio_blk drivers/block/brd
	net/9p/9pnet net/9p/9pnet_virtio fs/netfs/netfs fs/fscache/fscache fs/9p/9p
)

fresh=1
for f in vmlinux initramfs.cpio kernel-version; do
	[[ -s "$cache/$f" && "$cache/$f" -nt scripts/vm-tools.sh ]] || fresh=0
done
for b in qemu-system-x86_64 busybox; do
	command -v "$b" >/dev/null || fresh=0
done
if [[ $fresh == 1 ]]; then
	echo "vm-tools: up to date in $cache ($(cat "$cache/kernel-version"))"
	exit 0
fi
if [[ $(id -u) != 0 ]]; then
	# apt-get needs root; so do the suite's cgroups. Without CI the suite skips.
	echo "vm-tools: needs root to install QEMU and the kernel; tests/cgroupv2 will skip" >&2
	[[ "${CI:-}" == true ]] && exit 1
	exit 0
fi
start=$SECONDS

if ! command -v qemu-system-x86_64 >/dev/null || ! [[ -x /bin/busybox ]]; then
	echo "vm-tools: installing qemu-system-x86 and busybox-static"
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y --no-install-recommends qemu-system-x86 busybox-static >/dev/null ||
		{ apt-get update >/dev/null && apt-get install -y --no-install-recommends qemu-system-x86 busybox-static >/dev/null; }
fi

mkdir -p "$cache"
work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
if ! apt-cache show "$kernel_pkg" >/dev/null 2>&1; then
	[[ -n "$(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64$' 2>/dev/null)" ]] || apt-get update >/dev/null
	newest=$(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64$' | awk '{print $1}' | sort -V | tail -1)
	[[ -n "$newest" ]] || { echo "vm-tools: no linux-image-6.1.0-*-amd64 in the apt sources" >&2; exit 1; }
	echo "vm-tools: $kernel_pkg is gone from the archive; using $newest"
	kernel_pkg=$newest
fi
echo "vm-tools: downloading $kernel_pkg"
(cd "$work" && apt-get download "$kernel_pkg" >/dev/null 2>&1) ||
	{ apt-get update >/dev/null && (cd "$work" && apt-get download "$kernel_pkg" >/dev/null); }
deb=$(ls "$work"/*.deb)
release=${kernel_pkg#linux-image-}
paths=("./boot/vmlinuz-$release")
for m in "${modules[@]}"; do paths+=("./lib/modules/$release/kernel/$m.ko"); done
dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$work" "${paths[@]}"

# The uncompressed vmlinux boots through its PVH entry point, faster than the bzImage under
# emulation. vmlinuz carries it as an xz stream: cut from the xz magic and decompress (xz
# complains about the trailing bytes after the stream; the output is whole).
vmlinuz="$work/boot/vmlinuz-$release"
offset=$(LC_ALL=C grep -abo $'\xfd7zXZ' "$vmlinuz" | head -1 | cut -d: -f1)
[[ -n "$offset" ]] || { echo "vm-tools: no xz stream in $vmlinuz" >&2; exit 1; }
unxz="xz -dc"
command -v xz >/dev/null || unxz="busybox xzcat"
tail -c +$((offset + 1)) "$vmlinuz" | $unxz >"$work/vmlinux" 2>/dev/null || true
head -c 4 "$work/vmlinux" | grep -q $'\x7fELF' || { echo "vm-tools: vmlinux from $vmlinuz is not an ELF" >&2; exit 1; }

# The base initramfs: busybox, the modules and /init. /init (PID 1) mounts what the suite
# needs, enables the controllers at the root as systemd would, mounts the 9p share on /mnt
# and runs /mnt/run.sh as its child; the exit status goes to /mnt/exit-status and, through
# isa-debug-exit, to QEMU.
img="$work/root"
mkdir -p "$img"/{bin,dev,proc,sys,tmp,mnt,run,etc,lib/modules}
cp /bin/busybox "$img/bin/busybox"
for m in "${modules[@]}"; do
	cp "$work/lib/modules/$release/kernel/$m.ko" "$img/lib/modules/"
	echo "$(basename "$m")" >>"$img/lib/modules/order"
done
echo "root:x:0:0:root:/:/bin/sh" >"$img/etc/passwd"
echo "root:x:0:" >"$img/etc/group"
cat >"$img/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mount -t cgroup2 cgroup2 /sys/fs/cgroup
for m in $(cat /lib/modules/order); do insmod /lib/modules/$m.ko || echo "init: insmod $m failed"; done
for c in $(cat /sys/fs/cgroup/cgroup.controllers); do echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control; done
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 share /mnt || echo "init: cannot mount the share"
ip link set lo up 2>/dev/null
hostname tidal-vm
echo "init: up; cgroup2 controllers: $(cat /sys/fs/cgroup/cgroup.subtree_control)"
rc=1
if [ -f /mnt/run.sh ]; then
	cd /mnt
	sh /mnt/run.sh
	rc=$?
	cd /
fi
echo "$rc" >/mnt/exit-status
sync
echo "init: run.sh exited $rc"
printf "\\$(printf %o $((rc & 127)))" | dd of=/dev/port bs=1 seek=244 count=1 2>/dev/null
poweroff -f
EOF
chmod +x "$img/init"
# busybox cpio: the host may have none. A newc archive needs no padding to concatenate when
# it is the only part.
(cd "$img" && find . | busybox cpio -o -H newc 2>/dev/null) >"$work/initramfs.cpio"

mv "$work/vmlinux" "$cache/vmlinux"
mv "$work/initramfs.cpio" "$cache/initramfs.cpio"
echo "$kernel_pkg" >"$cache/kernel-version"
echo "vm-tools: ready in $((SECONDS - start))s: $cache/{vmlinux,initramfs.cpio} ($kernel_pkg)"
