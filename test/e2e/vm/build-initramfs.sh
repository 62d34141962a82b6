#!/usr/bin/env bash
# Builds (once) the base initramfs for the e2e VM: busybox-static, the real
# network tools with their shared libraries (bash, iproute2, ipvsadm, ipset,
# iptables legacy+nft, conntrack, nft, kmod), the guest /init and the closure of
# the kernel modules the tests need, depmod'ed so modprobe autoloads work.
# Binaries under test go into a second, per-run cpio appended to this one.
#
# Usage: build-initramfs.sh KERNEL_DIR   (from build-kernel.sh)
# Prints the path of base.cpio.gz (cached by kernel version and by the hash of
# this script and guest/init).
set -euo pipefail

kdir=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${KPI_CACHE:-/var/cache/kube-proxy-ipvs}
kver=$(cat "$kdir/kver")
key=$(cat "$here/build-initramfs.sh" "$here/guest/init" | sha256sum | cut -c1-12)
out="$cache/initramfs/$kver-$key"
log() { echo "[initramfs] $*" >&2; }

if [[ -f "$out/base.cpio.gz" ]]; then
	echo "$out/base.cpio.gz"
	exit 0
fi
mkdir -p "$cache/initramfs"
# Concurrent runs wait for each other instead of building twice.
exec 9>"$cache/initramfs/.lock"
flock 9
if [[ -f "$out/base.cpio.gz" ]]; then
	echo "$out/base.cpio.gz"
	exit 0
fi
start=$SECONDS
log "building the base initramfs for $kver into $out"
mkdir -p "$out"
root=$(mktemp -d "$out/root.XXXXXX")
trap 'rm -rf "$root"' EXIT

mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,usr/lib,lib,lib64,etc,proc,sys,dev,tmp,run,var/run,var/lib,root,mnt,kpi}
ln -s ../run "$root/var/run" 2>/dev/null || true

# Real tools first, with every library ldd names.
copy_bin() { # path-on-host
	local src=$1 real
	real=$(readlink -f "$src")
	mkdir -p "$root$(dirname "$src")"
	cp -L "$real" "$root$src"
	ldd "$real" 2>/dev/null | awk '/=>/ {print $3} /^\t\// {print $1}' | while read -r lib; do
		[[ -n $lib && -e $lib ]] || continue
		mkdir -p "$root$(dirname "$lib")"
		[[ -e "$root$lib" ]] || cp -L "$lib" "$root$lib"
	done
}
for b in /bin/bash /sbin/ip /sbin/ipvsadm /sbin/ipset /usr/sbin/xtables-legacy-multi \
	/usr/sbin/xtables-nft-multi /usr/sbin/conntrack /usr/sbin/nft /bin/kmod; do
	if [[ ! -e $b ]]; then
		b2=$(command -v "$(basename "$b")" || true)
		[[ -n $b2 ]] || { log "missing $b: run hack/install-deps.sh"; exit 1; }
		b=$b2
	fi
	copy_bin "$b"
done
mkdir -p "$root/usr/lib/x86_64-linux-gnu/xtables"
for so in /usr/lib/x86_64-linux-gnu/xtables/*.so; do copy_bin "$so"; done
# The xtables plugins link against libxtables etc.: copy_bin did the libs.

sb=/usr/sbin
for t in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
	# Debian's default alternative is the nft backend: match it.
	ln -sf xtables-nft-multi "$root$sb/$t"
	ln -sf xtables-nft-multi "$root$sb/${t/tables/tables-nft}"
	ln -sf xtables-legacy-multi "$root$sb/${t/tables/tables-legacy}"
done
for t in modprobe lsmod insmod rmmod depmod modinfo; do ln -sf /bin/kmod "$root/sbin/$t"; done

# busybox for everything else, never shadowing a real tool (its applets lack
# netns support and other features the tests need).
cp /bin/busybox "$root/bin/busybox"
for applet in $(/bin/busybox --list-full); do
	name=$(basename "$applet")
	case $name in
	ip | ipvsadm | ipset | iptables* | ip6tables* | conntrack | nft | bash | modprobe | lsmod | insmod | rmmod | depmod | modinfo | init | linuxrc) continue ;;
	esac
	if [[ -e "$root/bin/$name" || -e "$root/sbin/$name" || -e "$root/usr/bin/$name" || -e "$root/usr/sbin/$name" ]]; then
		continue
	fi
	mkdir -p "$root/$(dirname "$applet")"
	ln -s /bin/busybox "$root/$applet"
done
ln -sf bash "$root/bin/sh"

cp /etc/protocols /etc/services "$root/etc/" 2>/dev/null || true
echo 'root:x:0:0:root:/root:/bin/bash' >"$root/etc/passwd"
echo 'root:x:0:' >"$root/etc/group"
echo 'hosts: files' >"$root/etc/nsswitch.conf"
printf '127.0.0.1 localhost\n10.0.2.15 kpi-node\n' >"$root/etc/hosts"
echo kpi-node >"$root/etc/hostname"
mkdir -p "$root/etc/iproute2" && cp -r /etc/iproute2/. "$root/etc/iproute2/" 2>/dev/null || true

# Kernel modules: the closure of everything networking tests may touch.
kroot="$kdir/root"
mdir="lib/modules/$kver"
mods=(virtio_pci virtio_net dummy veth bridge br_netfilter sctp nf_conntrack_netlink)
while read -r ko; do
	mods+=("$(basename "$ko" .ko)")
done < <(cd "$kroot/$mdir/kernel" && find net/netfilter net/ipv4/netfilter net/ipv6/netfilter net/bridge -name '*.ko')
log "resolving the closure of ${#mods[@]} modules"
printf '%s\n' "${mods[@]}" | sort -u | while read -r m; do
	modprobe -d "$kroot" -S "$kver" --show-depends "$m" 2>/dev/null | awk '$1=="insmod" {print $2}'
done | sort -u | while read -r ko; do
	rel=${ko#"$kroot"/}
	mkdir -p "$root/$(dirname "$rel")"
	cp "$ko" "$root/$rel"
done
cp "$kroot/$mdir"/modules.{order,builtin,builtin.modinfo} "$root/$mdir/" 2>/dev/null || true
depmod -b "$root" "$kver"
log "$(find "$root/lib/modules" -name '*.ko' | wc -l) modules"

install -m 0755 "$here/guest/init" "$root/init"

(cd "$root" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet) | gzip -1 >"$out/base.cpio.gz.tmp"
mv "$out/base.cpio.gz.tmp" "$out/base.cpio.gz"
# Older images of this kernel (other script versions) are dead weight.
for old in "$cache/initramfs/$kver"-*; do
	[[ $old == "$out" ]] || rm -rf "$old"
done
log "base initramfs $(du -h "$out/base.cpio.gz" | cut -f1) built in $((SECONDS - start)) s"
echo "$out/base.cpio.gz"
