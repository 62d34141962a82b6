#!/usr/bin/env bash
# handover-watch.sh DIR: watches one kube-proxy handover (migration_test.go).
# Takes a first sample of every ipset member (`ipset save` add lines) and of
# the IPVS table (`ipvsadm -Sn`: each virtual server with its scheduler, flags
# and timeout, each real server with its forwarding method and weight), then
# samples both again, back to back, until DIR/stop exists. Every line of the
# first sample missing from a later one is written to DIR/missing as
# "<unix ms> <line>": an ipset member removed, a virtual server re-created or
# edited, a real server removed or its weight changed, even for one sample.
# DIR/ready appears once both loops run; DIR/summary at the end has one line
# per loop: "NAME samples N ms M".
set -u
dir=$1
# Niced (busybox has renice, not nice): under TCG two loops of process starts
# would otherwise take both vCPUs from the kube-proxy being watched.
renice -n 10 -p $$ >/dev/null
mkdir -p "$dir"
rm -f "$dir"/*
ipset save | grep '^add ' >"$dir/first-ipsets"
ipvsadm -Sn >"$dir/first-ipvs"
# watch NAME FIRST CMD...: one sampling loop; the ipset and the IPVS loops run
# side by side (each sample is a process start, slow under TCG).
watch() {
	local name=$1 file=$2 line out n=0 failed=0 at start=${EPOCHREALTIME/./}
	shift 2
	local -A first=()
	while IFS= read -r line; do
		first["$line"]=1
	done <"$file"
	touch "$dir/ready-$name"
	while [[ ! -e $dir/stop ]]; do
		# A here-string, not <(...): the guest has no /dev/fd.
		if ! out=$("$@" 2>/dev/null); then
			failed=$((failed + 1))
			continue
		fi
		local -A now=()
		while IFS= read -r line; do
			now["$line"]=1
		done <<<"$out"
		at=${EPOCHREALTIME/./}
		for line in "${!first[@]}"; do
			[[ -n ${now[$line]:-} ]] || echo "$((at / 1000)) $line" >>"$dir/missing"
		done
		unset now
		n=$((n + 1))
	done
	echo "$name samples $n ms $(((${EPOCHREALTIME/./} - start) / 1000)) failed $failed" >"$dir/summary-$name"
}
: >"$dir/missing"
watch ipset "$dir/first-ipsets" ipset save &
watch ipvs "$dir/first-ipvs" ipvsadm -Sn &
while [[ ! -e $dir/ready-ipset || ! -e $dir/ready-ipvs ]]; do sleep 0.01; done
touch "$dir/ready"
wait
# Whole or absent: the test reads it as soon as it exists.
cat "$dir/summary-ipset" "$dir/summary-ipvs" >"$dir/summary.tmp"
mv "$dir/summary.tmp" "$dir/summary"
