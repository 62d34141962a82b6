#!/usr/bin/env bash
# Fetches Debian's kernel (without installing it) and prepares it for qemu:
# the .deb is downloaded with apt-get, unpacked with dpkg -x, depmod'ed, and the
# ELF vmlinux is extracted from the bzImage (PVH boot, faster than the bzImage
# under TCG). Everything is cached under $KPI_CACHE/kernel/<package>_<version>.
#
# Prints the cache folder: it holds vmlinux, kver (the release string) and root/
# (the unpacked package, modules under root/lib/modules/KVER).
set -euo pipefail

cache=${KPI_CACHE:-/var/cache/kube-proxy-ipvs}
log() { echo "[kernel] $*" >&2; }

pkg=${KPI_KERNEL_PKG:-}
if [[ -z $pkg ]]; then
	pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
	if [[ -z $pkg ]]; then
		log "apt-cache knows no linux-image-amd64: running apt-get update"
		apt-get update -q >&2
		pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
	fi
fi
[[ -n $pkg ]] || { log "cannot find the concrete linux-image package"; exit 1; }
ver=$(apt-cache policy "$pkg" | awk '/Candidate:/ {print $2}')
dir="$cache/kernel/${pkg}_${ver}"

if [[ -f "$dir/done" ]]; then
	echo "$dir"
	exit 0
fi

mkdir -p "$dir"
# Concurrent runs wait for each other instead of unpacking into one folder.
exec 9>"$dir.lock"
flock 9
if [[ -f "$dir/done" ]]; then
	echo "$dir"
	exit 0
fi
start=$SECONDS
deb=$(ls "$dir"/*.deb 2>/dev/null | head -1 || true)
if [[ -z $deb ]]; then
	log "downloading $pkg $ver (~70 MB)"
	(cd "$dir" && apt-get download -q "$pkg=$ver" >&2)
	deb=$(ls "$dir"/*.deb | head -1)
fi
log "unpacking $(basename "$deb")"
rm -rf "$dir/root"
dpkg -x "$deb" "$dir/root"
kver=$(ls "$dir/root/lib/modules" | head -1)
depmod -b "$dir/root" "$kver"
echo "$kver" >"$dir/kver"

log "extracting vmlinux from the bzImage"
bz="$dir/root/boot/vmlinuz-$kver"
off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$bz" | head -1 | cut -d: -f1)
[[ -n $off ]] || { log "no xz stream in $bz"; exit 1; }
tail -c +"$((off + 1))" "$bz" | xz -dcq >"$dir/vmlinux.tmp" 2>/dev/null || true
if ! head -c 4 "$dir/vmlinux.tmp" | grep -q 'ELF'; then
	log "vmlinux extraction failed; falling back to the bzImage"
	cp "$bz" "$dir/vmlinux.tmp"
fi
mv "$dir/vmlinux.tmp" "$dir/vmlinux"
touch "$dir/done"
log "kernel $kver ready in $((SECONDS - start)) s"
echo "$dir"
