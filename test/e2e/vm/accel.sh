#!/usr/bin/env bash
# Prints the qemu accelerator and CPU flags: KVM when it really boots our
# kernel, TCG otherwise (the testbed must work on machines without KVM).
#
# /dev/kvm existing is not enough: on nested hosts qemu may abort on MSRs
# (-cpu max/host) or hang after the BIOS. So KVM is probed by booting the
# kernel with no root filesystem: it panics at once and, with panic=-1 and
# -no-reboot, qemu exits. The verdict is cached per host kernel, qemu and guest
# kernel. KPI_VM_ACCEL=kvm|tcg forces the choice.
# Usage: accel.sh [VMLINUX]
set -uo pipefail
tcg="-accel tcg,thread=multi -cpu max"
kvm="-accel kvm -cpu host,-arch-capabilities"
case ${KPI_VM_ACCEL:-auto} in
kvm) echo "$kvm"; exit 0 ;;
tcg) echo "$tcg"; exit 0 ;;
esac
vmlinux=${1:-}
if [[ ! -r /dev/kvm || ! -w /dev/kvm || -z $vmlinux ]]; then
	echo "$tcg"
	exit 0
fi
cache=${KPI_CACHE:-/var/cache/kube-proxy-ipvs}
key=$({ uname -r; qemu-system-x86_64 --version | head -1; stat -c %s "$vmlinux"; } | sha256sum | cut -c1-12)
verdict="$cache/accel/$key"
if [[ ! -f $verdict ]]; then
	mkdir -p "$cache/accel"
	echo "[accel] probing KVM (once per host; up to 20 s)" >&2
	if timeout 20 qemu-system-x86_64 $kvm -machine pc -m 256 -nodefaults -no-user-config \
		-nographic -no-reboot -display none -serial stdio -kernel "$vmlinux" \
		-append 'console=ttyS0 panic=-1 loglevel=1' </dev/null 2>/dev/null | grep -q 'Kernel panic'; then
		echo kvm >"$verdict"
	else
		echo tcg >"$verdict"
	fi
	echo "[accel] KVM probe: $(cat "$verdict")" >&2
fi
if [[ $(cat "$verdict") == kvm ]]; then echo "$kvm"; else echo "$tcg"; fi
