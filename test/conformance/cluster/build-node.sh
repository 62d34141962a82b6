#!/usr/bin/env bash
# Builds (once) the disk image of a conformance node VM and the small
# initramfs that mounts it, both cached by content under
# ${KPI_CACHE:-/var/cache/kube-proxy-ipvs}/conformance-node/<kver>-<key>/:
#
#   disk.img      raw ext4 (sparse, 8 GiB): Debian bookworm (mmdebstrap minbase)
#                 with containerd, runc, containernetworking-plugins, iptables,
#                 ipset, ipvsadm, conntrack, nftables, kmod, iproute2 and a few
#                 tools, plus Debian's kernel modules (test/e2e/vm/build-kernel.sh,
#                 the kernel with IPVS), depmod'ed. No kubelet, no configuration:
#                 up.sh shares those with the guest at boot (9p, /kpi), so the
#                 image changes only with the package list or the kernel.
#   boot-<hash>.cpio.gz
#                 /init (guest/boot-init), busybox and the modules needed to
#                 mount the disk and the share (virtio, ext4, 9p); it
#                 switch_roots into the disk and runs /kpi/node-init. Keyed
#                 by guest/boot-init apart from the disk (seconds to rebuild);
#                 the entry's "boot.cpio.gz" links to the current one.
#   vmlinux       a link to the kernel up.sh boots
#   manifest.txt  package versions
#
#   preload-<key>.img
#                 with --preload IMAGES_DIR: disk.img with every image of
#                 IMAGES_DIR/index.tsv (test/conformance/build.sh's images)
#                 imported into containerd's k8s.io namespace by one boot of
#                 the node (guest/node-init, MODE=preload), keyed by index.tsv
#                 and the archives' contents; with ARCHIVE=REFERENCE
#                 arguments (our kube-proxy image), a second one made from
#                 the first by importing those, keyed by their contents. A
#                 node booting it imports nothing. The 4 newest are kept.
#
# Each node boots a sparse copy of disk.img (up.sh), so the image stays clean.
#
# Usage: build-node.sh                       prints the entry folder
#        build-node.sh --preload IMAGES_DIR [ARCHIVE=REFERENCE...]
#                                            prints the preloaded disk's path
# The disk's key covers the recipe number below, the package list, the mirror
# and the kernel version; .debs are kept in conformance-node/debs for rebuilds.
# Needs root, mmdebstrap, mkfs.ext4 (hack/install-deps.sh). Prints the folder.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../.." && pwd)
cache=${KPI_CACHE:-/var/cache/kube-proxy-ipvs}
mirror=${KPI_IMAGE_MIRROR:-http://deb.debian.org}
suite=bookworm
log() { echo "[conformance-node] $*" >&2; }
die() { log "FAIL: $*"; exit 1; }

packages=(containerd runc containernetworking-plugins iptables ipset ipvsadm conntrack
	nftables kmod iproute2 procps mount util-linux ca-certificates curl iputils-ping
	netcat-openbsd socat ethtool less bash-completion)
sources=("deb $mirror/debian $suite $suite-updates main"
	"deb $mirror/debian-security $suite-security main")

# Bump when the way the disk is made changes (a new key rebuilds: minutes).
recipe=1
kdir=$("$repo/test/e2e/vm/build-kernel.sh")
kver=$(cat "$kdir/kver")
key=$({
	echo "recipe $recipe"
	printf '%s\n' "${packages[@]}" "${sources[@]}" "$kver"
} | sha256sum | cut -c1-12)
out="$cache/conformance-node/$kver-$key"

# The boot initramfs: busybox and the modules to reach the disk and the share.
boot_key=$(cat "$here/guest/boot-init" "$here/build-node.sh" | sha256sum | cut -c1-12)
boot_cpio() {
	local cpio="$out/boot-$boot_key.cpio.gz" boot
	if [[ ! -f $cpio ]]; then
		boot=$(mktemp -d)
		mkdir -p "$boot"/{bin,proc,sys,dev,newroot,lib/modules}
		cp /bin/busybox "$boot/bin/busybox"
		file -L "$boot/bin/busybox" | grep -q 'statically linked' || die "/bin/busybox is not static (install busybox-static)"
		for a in sh mount umount switch_root insmod mkdir sleep cat echo ls; do ln -s busybox "$boot/bin/$a"; done
		: >"$boot/modules.order"
		for m in virtio_pci virtio_blk virtio_net ext4 9p 9pnet_virtio; do
			modprobe -d "$kdir/root" -S "$kver" --show-depends "$m" | awk '$1=="insmod" {print $2}'
		done | awk '!seen[$0]++' | while read -r ko; do
			cp "$ko" "$boot/lib/modules/"
			basename "$ko" >>"$boot/modules.order"
		done
		install -m 0755 "$here/guest/boot-init" "$boot/init"
		(cd "$boot" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) | gzip -1 >"$cpio.tmp"
		rm -rf "$boot"
		mv "$cpio.tmp" "$cpio"
		find "$out" -maxdepth 1 -name 'boot-*.cpio.gz' ! -name "boot-$boot_key.cpio.gz" -delete
	fi
	ln -sfn "boot-$boot_key.cpio.gz" "$out/boot.cpio.gz"
}

preload_dir='' extra=()
if [[ ${1:-} == --preload ]]; then
	preload_dir=${2:?usage: $0 --preload IMAGES_DIR [ARCHIVE=REFERENCE...]}
	[[ -f $preload_dir/index.tsv ]] || die "no $preload_dir/index.tsv"
	extra=("${@:3}")
fi
# preload_into BASE KEY IMAGES_DIR FILE=REFERENCE...: prints $out/preload-KEY.img,
# made (once) by booting the node on a copy of BASE with MODE=preload, which
# imports each FILE of IMAGES_DIR (see the header).
preload_into() {
	local base=$1 k=$2 dir=$3 img work share rc t=$SECONDS
	shift 3
	img="$out/preload-$k.img"
	if [[ ! -f $img ]]; then
		exec 8>"$cache/conformance-node/.lock-preload"
		flock 8
	fi
	if [[ -f $img ]]; then
		touch "$img"
		echo "$img"
		return 0
	fi
	log "preloading $* into a copy of $(basename "$base") (one boot of the node VM)"
	work=$(mktemp -d "$out/preload.XXXXXX")
	share=$work/share
	mkdir -p "$share"
	install -m 0755 "$here/guest/node-init" "$share/node-init"
	printf 'MODE=preload\nNODE_NAME=preload\nSANDBOX_IMAGE=\nIMAGE_NAMES=%q\n' "$*" >"$share/node.env"
	cp --sparse=always "$base" "$work/disk.img"
	set +e
	# shellcheck disable=SC2046 # accel.sh prints a word list
	timeout -k 5 1800 qemu-system-x86_64 $("$repo/test/e2e/vm/accel.sh" "$kdir/vmlinux") -machine pc -smp 2 -m 2048 \
		-nodefaults -no-user-config -nographic -no-reboot -display none -serial "file:$work/console.log" \
		-drive "file=$work/disk.img,if=virtio,format=raw,cache=unsafe" \
		-virtfs "local,path=$share,mount_tag=kpi,security_model=none,readonly=on" \
		-virtfs "local,path=$dir,mount_tag=images,security_model=none,readonly=on" \
		-kernel "$kdir/vmlinux" -initrd "$out/boot.cpio.gz" -append "console=ttyS0 quiet loglevel=3 panic=-1" \
		</dev/null >/dev/null 2>"$work/qemu.err"
	rc=$?
	set -e
	if ! grep -q 'preload done: rc=0' "$work/console.log"; then
		grep kpi-node "$work/console.log" >&2 || tail -20 "$work/console.log" >&2
		cat "$work/qemu.err" >&2
		rm -rf "$work"
		die "preloading the images failed (qemu exit $rc; console above)"
	fi
	mv "$work/disk.img" "$img"
	rm -rf "$work"
	log "preloaded $(basename "$img") in $((SECONDS - t)) s"
	echo "$img"
}
# preload: the images of IMAGES_DIR/index.tsv (keyed by it and the archives'
# contents), then, on top of that, the extra archives (keyed by the first
# image and their contents): what changes with every commit (our kube-proxy
# image) costs one import, not all of them.
preload() {
	local names=() ref file k img a sum dir
	while IFS=$'\t' read -r ref file; do
		[[ -n $ref && $ref != \#* ]] && names+=("$file=$ref")
	done <"$preload_dir/index.tsv"
	k=$({
		cat "$preload_dir/index.tsv"
		for ref in "${names[@]}"; do sha256sum "$preload_dir/${ref%%=*}"; done | cut -d' ' -f1
	} | sha256sum | cut -c1-12)
	img=$(preload_into "$out/disk.img" "$k" "$preload_dir" "${names[@]}")
	if ((${#extra[@]})); then
		dir=$(mktemp -d "$out/extra.XXXXXX")
		names=() sum=$k
		for a in "${extra[@]}"; do
			file=$(basename "${a%%=*}")
			ln "${a%%=*}" "$dir/$file" 2>/dev/null || cp "${a%%=*}" "$dir/$file"
			names+=("$file=${a#*=}")
			sum+=" ${a#*=} $(sha256sum "$dir/$file" | cut -d' ' -f1)"
		done
		k=$(sha256sum <<<"$sum" | cut -c1-12)
		img=$(preload_into "$img" "$k" "$dir" "${names[@]}")
		rm -rf "$dir"
	fi
	# Keep the last few (each is ~1 GB on disk).
	find "$out" -maxdepth 1 -name 'preload-*.img' -printf '%T@ %p\n' | sort -rn | tail -n +5 | cut -d' ' -f2- | xargs -r rm -f
	echo "$img"
}
finish() { # prints what was asked for
	boot_cpio
	if [[ -n $preload_dir ]]; then preload; else echo "$out"; fi
}

ready() { [[ -f "$out/disk.img" && -f "$out/manifest.txt" ]]; }
if ready; then
	finish
	exit 0
fi
[[ $(id -u) -eq 0 ]] || die "building the node image needs root (mmdebstrap --mode=root)"
command -v mmdebstrap >/dev/null || die "mmdebstrap missing: run hack/install-deps.sh"
mkdir -p "$cache/conformance-node/debs"
exec 9>"$cache/conformance-node/.lock"
flock 9
if ready; then
	finish
	exit 0
fi
start=$SECONDS
log "building the node image ($suite, kernel $kver) into $out"
rm -rf "$out"
mkdir -p "$out"
work=$(mktemp -d "$cache/conformance-node/work.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The root filesystem: minbase plus the node's packages, no docs.
opts=(--mode=root --variant=minbase --format=directory
	--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
	--aptopt='Acquire::Languages "none"' --aptopt='APT::Install-Recommends "false"'
	--dpkgopt=force-unsafe-io
	--include="$(IFS=,; echo "${packages[*]}")")
for p in doc groff info linda lintian/overrides locale man; do
	opts+=("--dpkgopt=path-exclude=/usr/share/$p/*")
done
opts+=(--dpkgopt='path-include=/usr/share/doc/*/copyright')
# shellcheck disable=SC2016 # $1 is the hook's argument (the chroot)
opts+=(--setup-hook='mkdir -p "$1"/var/cache/apt/archives'
	--setup-hook="sync-in $cache/conformance-node/debs /var/cache/apt/archives"
	--customize-hook="sync-out /var/cache/apt/archives $cache/conformance-node/debs")
root=$work/root
mmdebstrap "${opts[@]}" "$suite" "$root" "${sources[@]}" >"$work/mmdebstrap.log" 2>&1 || {
	tail -40 "$work/mmdebstrap.log" >&2
	die "mmdebstrap failed (log above)"
}
find "$cache/conformance-node/debs" -name '*.deb' -mtime +30 -delete
log "mmdebstrap done in $((SECONDS - start)) s"

# Debian's kernel modules, as the kernel package installs them.
mkdir -p "$root/lib/modules"
cp -a "$kdir/root/lib/modules/$kver" "$root/lib/modules/"
depmod -b "$root" "$kver"
# Mount points the node's /kpi/node-init uses.
mkdir -p "$root/kpi" "$root/var/lib/kubelet" "$root/var/lib/containerd" "$root/etc/cni/net.d" "$root/etc/containerd"
# shellcheck disable=SC2016 # dpkg-query's format
{
	echo "# conformance node image built by test/conformance/cluster/build-node.sh on $(date -u +%FT%TZ)"
	echo "kernel: $kver ($(basename "$kdir"))"
	printf 'source: %s\n' "${sources[@]}"
	echo "# packages"
	chroot "$root" dpkg-query -W -f '${Package} ${Version}\n'
} >"$work/manifest.txt"

# The disk: ext4 made from the directory (no loop device, no mount).
mkfs.ext4 -q -F -L kpi-root -E root_owner=0:0 -d "$root" "$work/disk.img" 8G


ln -sf "$kdir/vmlinux" "$work/vmlinux"
mv "$work/disk.img" "$work/vmlinux" "$work/manifest.txt" "$out/"
for old in "$cache/conformance-node/"*-*; do
	if [[ -d $old && $old != "$out" && $(basename "$old") != debs ]]; then rm -rf "$old"; fi
done
log "node image ready in $((SECONDS - start)) s: disk $(du -h "$out/disk.img" | cut -f1) used of 8G"
finish
