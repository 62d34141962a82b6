#!/usr/bin/env bash
# Installs (idempotently) every Debian package the project's tests need:
# namespace integration tests (iptables, ipset, conntrack, iproute2, socat) and
# the qemu end-to-end testbed (qemu, busybox, cpio, kmod, xz, ...) and
# mmdebstrap, which builds the container image's root filesystem for it
# (hack/image-rootfs.sh), and curl, gcc and g++, which fetch and build the
# conformance agnhost image's iperf 2.2 (test/conformance/images/build.sh).
# `apt-get update` runs only when something is missing.
set -euo pipefail

pkgs=(
	iptables ipset ipvsadm conntrack nftables iproute2 socat
	qemu-system-x86 busybox-static cpio kmod xz-utils zstd gzip binutils
	bash coreutils util-linux procps ca-certificates git make
	mmdebstrap curl gcc g++ libc6-dev
)

missing=()
for p in "${pkgs[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done

if ((${#missing[@]} == 0)); then
	echo "[deps] all ${#pkgs[@]} packages already installed"
	exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
	echo "[deps] missing packages (${missing[*]}) and not root: install them by hand" >&2
	exit 1
fi

echo "[deps] installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "[deps] done"
