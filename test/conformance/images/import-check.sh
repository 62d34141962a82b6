#!/usr/bin/env bash
# Imports every archive of DIR/images/index.tsv into a real containerd and
# runs the images, the way the nodes will, on this host but isolated from it:
# Debian's containerd and runc (the .debs unpacked in a temporary folder,
# nothing installed), started in a network and mount namespace of their own
# with a tmpfs on /run, the CRI plugin off, state under the temporary folder.
# Containers get their own network namespaces; all traffic stays on their
# loopback. Checks:
#   - each archive imports and unpacks, under the reference index.tsv gives;
#   - agnhost: the tools the [sig-network] tests exec in it run (curl, nc,
#     ss, nslookup, wget, iperf, timeout), netexec answers over TCP and UDP,
#     the uid/gid upstream's image defines exist;
#   - pause runs and stops on SIGTERM; coredns prints its version;
#   - kube-proxy (upstream's) reports v1.37.2 next to iptables and ipvsadm;
#   - busybox's sh, sleep and nc run; regression-issue-74839 stays up.
#
# Usage: test/conformance/images/import-check.sh [DIR]  (default: build.sh's DIR)
# Needs root. Prints "import-check: N passed, M failed".
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dir=${1:-$("$here/../build.sh")}
index="$dir/images/index.tsv"
[[ -f $index ]] || {
	echo "import-check: FAIL: no $index" >&2
	exit 1
}
[[ $(id -u) -eq 0 ]] || {
	echo "import-check: FAIL: needs root (namespaces, mounts)" >&2
	exit 1
}

work=$(mktemp -d /tmp/import-check.XXXXXX)
pid=''
cleanup() {
	if [[ -n $pid ]]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

(cd "$work" && apt-get download containerd runc >/dev/null 2>&1) || {
	echo "import-check: FAIL: apt-get download containerd runc (run apt-get update?)" >&2
	exit 1
}
for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$work/root"; done
export PATH="$work/root/usr/bin:$work/root/usr/sbin:$PATH"
mkdir -p "$work/run" "$work/var"
cat >"$work/config.toml" <<EOF
version = 2
root = "$work/var"
state = "$work/run"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$work/run/containerd.sock"
[ttrpc]
  address = "$work/run/containerd.sock.ttrpc"
EOF
unshare -n -m --propagation private sh -c 'mount -t tmpfs tmpfs /run && exec containerd --config "$1"' sh "$work/config.toml" \
	>"$work/containerd.log" 2>&1 &
pid=$!
for _ in $(seq 50); do
	[[ -S $work/run/containerd.sock ]] && break
	sleep 0.2
done
[[ -S $work/run/containerd.sock ]] || {
	tail -20 "$work/containerd.log" >&2
	echo "import-check: FAIL: containerd did not start" >&2
	exit 1
}
# ctr in containerd's namespaces: the FIFOs it makes under /run must be the
# ones the shim sees. (ctr run can lose the output of a process that exits at
# once: the scripts below end with sleep 1.)
ctr=(nsenter -t "$pid" -m -n env PATH="$PATH" ctr --address "$work/run/containerd.sock" -n k8s.io)

passed=0 failed=0
check() { # NAME EXPECTED-REGEX OUTPUT
	if grep -qE -- "$2" <<<"$3"; then
		passed=$((passed + 1))
		echo "ok   $1"
	else
		failed=$((failed + 1))
		echo "FAIL $1: want /$2/, got:"
		sed 's/^/     /' <<<"$3"
	fi
}

declare -A ref_of
while IFS=$'\t' read -r ref name; do
	out=$("${ctr[@]}" images import "$dir/images/$name" 2>&1) || true
	check "import $name" "unpacking $ref .*done" "$out"
	ref_of[${name%.oci.tar}]=$ref
done <"$index"
listed=$("${ctr[@]}" images ls -q)
while IFS=$'\t' read -r ref _; do
	check "listed $ref" "^$ref\$" "$listed"
done <"$index"

if [[ -n ${ref_of[agnhost]:-} ]]; then
	out=$(timeout 60 "${ctr[@]}" run --rm "${ref_of[agnhost]}" agnhost-tools /bin/sh -c '
		curl --version | head -1; nc -h 2>&1 | head -1; ss -V; nslookup -version 2>&1 | head -1
		wget --version | head -1; iperf -v 2>&1; timeout --version | head -1
		id user-defined-in-image; ls -d /uploads /localhost.crt /localhost.key; readlink /agnhost-2
		sleep 1' 2>&1) || true
	for want in '^curl ' 'OpenBSD netcat' 'iproute2' '^nslookup ' 'GNU Wget' 'iperf version 2' 'GNU coreutils' \
		'uid=1000\(user-defined-in-image\).*50000\(group-defined-in-image\)' '^/uploads$' '^/localhost.key$' '^agnhost$'; do
		check "agnhost has $want" "$want" "$out"
	done
	out=$(timeout 60 "${ctr[@]}" run --rm "${ref_of[agnhost]}" agnhost-netexec /bin/sh -c '
		/agnhost netexec --http-port 8080 --udp-port 8081 >/dev/null 2>&1 &
		sleep 2
		echo "http: $(curl -g -q -s --max-time 5 http://127.0.0.1:8080/hostName)"
		echo "udp: $(echo hostName | nc -w 1 -u 127.0.0.1 8081)"
		echo hostName | nc -v -t -w 2 127.0.0.1 8080 2>&1 | head -1
		ss -ant46 "sport = :8080" | tail -n +2 | grep LISTEN
		sleep 1' 2>&1) || true
	check "agnhost netexec over HTTP" '^http: [a-z0-9.-]+$' "$out"
	check "agnhost netexec over UDP" '^udp: [a-z0-9.-]+$' "$out"
	check "agnhost nc -v -t" 'succeeded' "$out"
	check "agnhost ss sees the listener" 'LISTEN .*:8080' "$out"
fi
if [[ -n ${ref_of[pause]:-} ]]; then
	out=$({ timeout 30 "${ctr[@]}" run -d "${ref_of[pause]}" pause-check && sleep 1 && "${ctr[@]}" task ls &&
		"${ctr[@]}" task kill pause-check && sleep 1 && "${ctr[@]}" task ls; } 2>&1) || true
	check "pause runs" 'pause-check +[0-9]+ +RUNNING' "$out"
	check "pause stops on SIGTERM" 'pause-check +[0-9]+ +STOPPED' "$out"
	"${ctr[@]}" task delete pause-check >/dev/null 2>&1 || true
	"${ctr[@]}" container delete pause-check >/dev/null 2>&1 || true
fi
if [[ -n ${ref_of[coredns]:-} ]]; then
	out=$(timeout 30 "${ctr[@]}" run --rm "${ref_of[coredns]}" coredns-check /coredns -version 2>&1) || true
	check "coredns runs" '^CoreDNS-' "$out"
fi
if [[ -n ${ref_of[kube-proxy]:-} ]]; then
	out=$(timeout 30 "${ctr[@]}" run --rm "${ref_of[kube-proxy]}" kube-proxy-check /bin/sh -c \
		'/usr/local/bin/kube-proxy --version; iptables --version; command -v ipvsadm; sleep 1' 2>&1) || true
	check "kube-proxy is upstream's v1.37.2" '^Kubernetes v1\.37\.2$' "$out"
	check "kube-proxy image has iptables" '^iptables v' "$out"
	# (not ipvsadm --version: it loads ip_vs into the host's kernel)
	check "kube-proxy image has ipvsadm" '/ipvsadm$' "$out"
fi
if [[ -n ${ref_of[busybox]:-} ]]; then
	out=$(timeout 30 "${ctr[@]}" run --rm "${ref_of[busybox]}" busybox-check sh -c \
		'echo "sh: ok"; sleep 0 && echo "sleep: ok"; nc 2>&1 | head -1; sleep 1' 2>&1) || true
	check "busybox sh" '^sh: ok$' "$out"
	check "busybox sleep" '^sleep: ok$' "$out"
	check "busybox nc" 'BusyBox v1' "$out"
fi
if [[ -n ${ref_of[regression-issue-74839]:-} ]]; then
	out=$({ timeout 30 "${ctr[@]}" run -d --env POD_IP=127.0.0.1 "${ref_of[regression-issue-74839]}" r74839-check &&
		sleep 2 && "${ctr[@]}" task ls; } 2>&1) || true
	check "regression-issue-74839 keeps running (raw socket and :9000 open)" 'r74839-check +[0-9]+ +RUNNING' "$out"
	"${ctr[@]}" task kill -s SIGKILL r74839-check >/dev/null 2>&1 || true
	sleep 1
	"${ctr[@]}" task delete r74839-check >/dev/null 2>&1 || true
	"${ctr[@]}" container delete r74839-check >/dev/null 2>&1 || true
fi

echo "import-check: $passed passed, $failed failed"
((failed == 0))
