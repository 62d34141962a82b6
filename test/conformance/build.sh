#!/usr/bin/env bash
# Builds (once) what the conformance cluster and upstream's e2e suite need, all
# from Go modules (test/conformance/tools, k8s.io/kubernetes v1.37.2) and
# Debian packages, and caches it outside the repository, keyed by the tools
# module's go.mod and go.sum, so a fresh clone elsewhere reuses it:
#
#   DIR/bin/{kubelet,kube-controller-manager,kube-scheduler,kubectl,kube-proxy,ginkgo,e2e.test}
#   DIR/bin/e2e-network.test  upstream's suite with only its network specs (tools/e2enetwork)
#   DIR/images/NAME.oci.tar   OCI image-layout archives, linux/amd64
#   DIR/images/index.tsv      "REFERENCE<TAB>NAME.oci.tar" per image
#   DIR/images-ci/            pause, agnhost and CoreDNS only, the same way
#
# Usage: build.sh        -> builds the binaries and the images, prints DIR
#        build.sh bin    -> builds only the binaries (kubelet first), prints DIR
#        build.sh ci     -> only what `make test`'s conformance step (ci.sh) uses:
#                           kubelet, kube-controller-manager, kube-scheduler,
#                           kubectl, ginkgo, e2e-network.test and DIR/images-ci
#                           (copied from DIR/images when that is complete)
#
# The build flags never change (and match test/e2e/lib/build-tools.sh), so the
# Go build cache hits on every rebuild: cold builds take tens of minutes on
# 2 cores, warm ones seconds. The version ldflags only touch the link step.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tools="$here/tools"
cache=${KPI_CACHE:-/var/cache/kube-proxy-ipvs}
what=${1:-all}
case $what in
all | bin | ci) ;;
*)
	echo "usage: $0 [bin|ci]" >&2
	exit 2
	;;
esac

k8s_ver=$(awk '($1=="require" && $2=="k8s.io/kubernetes") {print $3; exit} ($1=="k8s.io/kubernetes" && $2 ~ /^v/) {print $2; exit}' "$tools/go.mod")
sum=$(cat "$tools/go.mod" "$tools/go.sum" | sha256sum | cut -c1-12)
out="$cache/conformance/k8s-${k8s_ver}-${sum}"

log() { echo "[conformance-build] $*" >&2; }

# What upstream's hack/lib/version.sh stamps, so every component reports the
# release it is built from (kubectl version, node status, e2e.test --version).
major=${k8s_ver#v}
major=${major%%.*}
minor=${k8s_ver#v*.}
minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$k8s_ver -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done

# go_build NAME CMD...: runs a go command in the tools module with the flags
# shared by every build, printing progress every 100 packages.
go_run() {
	local name=$1
	shift
	(
		cd "$tools"
		CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" nice -n 10 "$@" 2>&1 |
			awk -v n="$name" '/^[a-zA-Z0-9._~/-]+$/ {c++; if (c%100==0) {printf "[conformance-build] %s: %d packages compiled\n", n, c > "/dev/stderr"; fflush()}; next} {print > "/dev/stderr"}'
		exit "${PIPESTATUS[0]}"
	)
}

build_bin() { # name package
	local name=$1 pkg=$2
	[[ -x "$out/bin/$name" ]] && return 0
	mkdir -p "$out/bin"
	log "building $name ($pkg, tools module of k8s.io/kubernetes $k8s_ver) into $out/bin"
	local start=$SECONDS
	if [[ $name == *.test ]]; then
		# -vet=off: go test -c would otherwise run go vet over the suite and,
		# for its facts, over every package it imports.
		go_run "$name" go test -c -vet=off -v -ldflags="$ldflags" -o "$out/bin/$name.tmp" "$pkg"
	else
		go_run "$name" go build -v -ldflags="$ldflags" -o "$out/bin/$name.tmp" "$pkg"
	fi
	mv "$out/bin/$name.tmp" "$out/bin/$name"
	log "$name built in $((SECONDS - start)) s"
}

bins=(kubelet kube-controller-manager kube-scheduler kubectl kube-proxy ginkgo e2e.test)
images=images
if [[ $what == ci ]]; then
	bins=(kubelet kube-controller-manager kube-scheduler kubectl ginkgo e2e-network.test)
	images=images-ci
fi
images_done() { # FOLDER
	[[ -f "$out/$1/index.tsv" && $(cat "$out/$1/.key" 2>/dev/null) == "$(images_key)" ]]
}
have_all() {
	local b
	for b in "${bins[@]}"; do [[ -x "$out/bin/$b" ]] || return 1; done
	[[ $what == bin ]] || images_done "$images"
}
images_key() { # every input of images/build.sh but the tools module (in DIR's name)
	cat "$here/images/build.sh" "$here"/images/*/*.go "$here"/images/*/Dockerfile \
		"$here"/images/*/go.{mod,sum} "$here/../../hack/image-rootfs.sh" "$here/../../Dockerfile" \
		"$here"/../../hack/image/* 2>/dev/null | sha256sum | cut -c1-12
}

# Concurrent runs (two engineers, CI) wait for each other instead of racing;
# a cache already complete is printed without waiting for the lock.
if have_all; then
	echo "$out"
	exit 0
fi
mkdir -p "$cache/conformance"
exec 9>"$cache/conformance/.lock"
flock 9

# kubelet first: the node VMs need it before anything else.
build_bin kubelet k8s.io/kubernetes/cmd/kubelet
build_bin kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
build_bin kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
build_bin kubectl k8s.io/kubernetes/cmd/kubectl
build_bin ginkgo github.com/onsi/ginkgo/v2/ginkgo
if [[ $what == ci ]]; then
	# The same specs, framework and flags as e2e.test without the other
	# areas' suites: about half e2e.test's cold build (tools/e2enetwork).
	build_bin e2e-network.test ./e2enetwork
else
	# Upstream's kube-proxy: the upstream-ipvs column's image (images/build.sh).
	build_bin kube-proxy k8s.io/kubernetes/cmd/kube-proxy
	build_bin e2e.test k8s.io/kubernetes/test/e2e
fi

if [[ $what != bin ]] && ! images_done "$images"; then
	key=$(images_key)
	start=$SECONDS
	if [[ $what == ci ]] && images_done images; then
		# The full set holds CI's three: link them, no rebuild.
		rm -rf "$out/images-ci"
		mkdir -p "$out/images-ci"
		awk -F'\t' '$2 ~ /^(pause|agnhost|coredns)\.oci\.tar$/' "$out/images/index.tsv" >"$out/images-ci/index.tsv"
		cut -f2 "$out/images-ci/index.tsv" | while read -r f; do ln -f "$out/images/$f" "$out/images-ci/$f"; done
	else
		"$here/images/build.sh" "$out" "${what/all/full}"
	fi
	echo "$key" >"$out/$images/.key"
	log "$images built in $((SECONDS - start)) s"
fi
echo "$out"
