#!/bin/bash
# Runs a command from the container image's root filesystem (/image: the
# Dockerfile's runtime stage built by hack/image-rootfs.sh, with our
# kube-proxy in it) the way a container runtime runs a privileged hostNetwork
# container of our DaemonSets: in its own mount namespace (the node's network
# namespace, or whichever one the caller is in), chrooted into the image, with
# a fresh /proc and a read-write /sys of that network namespace, the node's
# /dev, and the volumes given with --bind (the DaemonSets mount
# /lib/modules read-only and /run/xtables.lock; a missing source is created as
# an empty file, as hostPath FileOrCreate does). The image itself is
# shared by every container started from it, except what the image's iptables
# wrapper (hack/image/iptables-wrapper) writes on its first call: the image's
# /etc/alternatives, /var/lib/dpkg/alternatives and /var/log are copied into a
# tmpfs of this container's own, as a container runtime gives each container
# a writable layer: every container starts with the alternatives as built
# (iptables -> the wrapper), and the backend its first iptables call picks
# goes with it.
#
#   image-exec.sh [--bind SRC:DST[:ro]]... [--] CMD [ARGS...]
#
# Give CMD as a path when it names a busybox applet (/bin/sh, not sh): the
# VM's chroot is busybox's, which runs an applet's name as its own applet
# (busybox ash, with busybox's readlink and the rest) instead of the image's.
#
# The environment is the image's (PATH=/usr/local/sbin:...:/bin, HOME=/root)
# plus the caller's other variables. The command keeps this script's PID (every
# step execs), so the caller can signal it.
set -euo pipefail
image=${KPI_IMAGE_ROOT:-/image}

if [[ -z ${KPI_IMAGE_EXEC_NS:-} ]]; then
	# A private mount namespace: the mounts below vanish with the process.
	export KPI_IMAGE_EXEC_NS=1
	exec unshare -m --propagation private "$0" "$@"
fi
unset KPI_IMAGE_EXEC_NS

[[ -x $image/bin/sh ]] || { echo "image-exec: no image root filesystem at $image" >&2; exit 127; }
binds=()
while (($#)); do
	case $1 in
	--bind) binds+=("$2"); shift 2 ;;
	--) shift; break ;;
	*) break ;;
	esac
done
(($#)) || { echo "usage: image-exec.sh [--bind SRC:DST[:ro]]... [--] CMD [ARGS...]" >&2; exit 2; }

mount -t proc proc "$image/proc"
# Mounted here, sysfs shows the caller's network namespace (ip netns exec node2 ...).
mount -t sysfs sysfs "$image/sys"
mount --rbind /dev "$image/dev"
# The container's writable layer for the alternatives (see above); the path
# is shared, the tmpfs on it private to this mount namespace.
layer=/run/kpi-image-layer
mkdir -p "$layer"
mount -t tmpfs -o mode=0755 kpi-image-layer "$layer"
for d in /etc/alternatives /var/lib/dpkg/alternatives /var/log; do
	mkdir -p "$layer$d"
	cp -a "$image$d/." "$layer$d/"
	mount --bind "$layer$d" "$image$d"
done
for b in "${binds[@]}"; do
	IFS=: read -r src dst opt <<<"$b"
	# Resolved inside the image: its /var/run is a symlink to /run.
	dst=$(chroot "$image" /usr/bin/realpath -m "$dst")
	# A missing source is a file to create (hostPath FileOrCreate: the xtables lock).
	[[ -e $src ]] || { mkdir -p "$(dirname "$src")" && : >"$src"; }
	if [[ -d $src ]]; then
		mkdir -p "$image$dst"
	else
		mkdir -p "$(dirname "$image$dst")"
		[[ -e $image$dst ]] || : >"$image$dst"
	fi
	mount --bind "$src" "$image$dst"
	if [[ $opt == ro ]]; then
		mount -o remount,bind,ro "$image$dst"
	fi
done
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
exec chroot "$image" "$@"
