#!/usr/bin/env bash
# Builds (once) the real kube-apiserver, etcd and upstream kube-proxy from the separate tools module
# test/e2e/tools and caches them outside the repository, keyed by version and by
# the module's go.sum, so a fresh clone elsewhere reuses them. The build flags
# never change, so the Go build cache hits on every rebuild.
#
# Usage: build-tools.sh            -> prints the cache folder holding the binaries
#        build-tools.sh --check    -> prints it if etcd and kube-apiserver (the slow
#                                     ones) are built, else exits 3 and builds nothing
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tools="$here/tools"
cache=${KPI_CACHE:-/var/cache/kube-proxy-ipvs}
k8s_ver=$(awk '($1=="k8s.io/kubernetes" && $2 ~ /^v/) {print $2; exit} ($1=="require" && $2=="k8s.io/kubernetes") {print $3; exit}' "$tools/go.mod")
etcd_ver=$(awk '$1=="go.etcd.io/etcd/server/v3" {print $2; exit}' "$tools/go.mod")
# The key covers the module's go.sum and the mains: a changed main must not
# reuse a binary built from the old one. etcd-seed, the scale tests' helper that
# writes objects straight into etcd (framework.BulkSeed), is keyed on its own
# sources instead (build_one's second argument), so changing it never relinks
# kube-apiserver.
mains=()
for f in "$tools"/cmd/*/*.go; do
	[[ $f == "$tools/cmd/etcd-seed/"* ]] || mains+=("$f")
done
sum=$(cat "$tools/go.sum" "${mains[@]}" | sha256sum | cut -c1-12)
seed_sum=$(cat "$tools/go.mod" "$tools"/cmd/etcd-seed/*.go | sha256sum | cut -c1-12)
out="$cache/tools/k8s-${k8s_ver}-etcd-${etcd_ver}-${sum}"

log() { echo "[build-tools] $*" >&2; }

build_one() { # name [key]: key names the sources the folder's key leaves out
	local name=$1 key=${2:-}
	if [[ -x "$out/$name" && (-z $key || $(cat "$out/$name.key" 2>/dev/null) == "$key") ]]; then
		return 0
	fi
	mkdir -p "$out"
	log "building $name ($k8s_ver / etcd $etcd_ver) into $out: cold builds take 10-25 min on 2 cores, warm ones seconds"
	local start=$SECONDS
	(
		cd "$tools"
		# Progress: go build -v names every package as it finishes compiling.
		CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" go build -v -ldflags='-s -w' -o "$out/$name.tmp" "./cmd/$name" 2>&1 |
			awk -v n="$name" '/^[a-zA-Z0-9._~/-]+$/ {c++; if (c%100==0) {printf "[build-tools] %s: %d packages compiled\n", n, c > "/dev/stderr"; fflush()}; next} {print > "/dev/stderr"}'
		exit "${PIPESTATUS[0]}"
	)
	mv "$out/$name.tmp" "$out/$name"
	if [[ -n $key ]]; then
		echo "$key" >"$out/$name.key"
	fi
	log "$name built in $((SECONDS - start)) s"
}

if [[ ${1:-} == --check ]]; then
	for name in etcd kube-apiserver; do
		if [[ ! -x "$out/$name" ]]; then
			log "$name is not built in $out (run test/e2e/lib/build-tools.sh: cold builds take 10-25 min)"
			exit 3
		fi
	done
	echo "$out"
	exit 0
fi

# Concurrent runs (two engineers, CI) wait for each other instead of racing.
mkdir -p "$cache"
exec 9>"$cache/.lock-tools"
flock 9
build_one etcd
build_one kube-apiserver
build_one etcd-seed "$seed_sum"
# Upstream kube-proxy: only for the migration scenarios and `make bench`'s
# side-by-side figures (KPI_TOOLS_UPSTREAM_PROXY=0 leaves it out).
if [[ ${KPI_TOOLS_UPSTREAM_PROXY:-1} != 0 ]]; then
	build_one kube-proxy
fi
echo "$out"
