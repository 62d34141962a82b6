#!/usr/bin/env bash
# Builds the images the conformance cluster imports, as OCI image-layout
# archives (linux/amd64), without Docker or a registry, into DIR/images:
#
#   pause.oci.tar    registry.k8s.io/pause:3.10.2: pause/main.go, static
#   agnhost.oci.tar  registry.k8s.io/e2e-test-images/agnhost:2.66.1:
#                    k8s.io/kubernetes v1.37.2's test/images/agnhost on Debian
#                    (agnhost/Dockerfile's runtime stage, hack/image-rootfs.sh),
#                    with iperf 2.2.1 built from Debian trixie's source
#   coredns.oci.tar  registry.k8s.io/coredns/coredns:v1.14.6: coredns/main.go
#   kube-proxy.oci.tar  registry.k8s.io/kube-proxy:v1.37.2: upstream's kube-proxy
#                    (DIR/bin/kube-proxy) in an image of our image's shape: the
#                    runtime stage of the repository's Dockerfile, the same
#                    path and ENTRYPOINT (the upstream-ipvs column)
#   busybox.oci.tar  registry.k8s.io/e2e-test-images/busybox:1.37.0-2: Debian's
#                    busybox-static (1.35), every applet linked to /bin/busybox
#   regression-issue-74839.oci.tar  registry.k8s.io/e2e-test-images/
#                    regression-issue-74839:1.5: that program of the module, static
#   index.tsv        "REFERENCE<TAB>NAME.oci.tar", one line per reference
#
# The [sig-network] Services and Networking tests use pause, agnhost and the
# cluster's DNS; busybox and regression-issue-74839 serve the Conntrack tests
# (kube-proxy's UDP conntrack cleanup and its INVALID-drop rule) and busybox
# is the framework's default test image.
#
# The references are the ones e2e.test and kubeadm v1.37.2 ask for
# (test/utils/image/manifest.go, cmd/kubeadm/app/constants); the tag check at
# the end compares them with `e2e.test --list-images` when DIR/bin has it.
#
# Usage: test/conformance/images/build.sh DIR [full|ci]  (test/conformance/build.sh runs it)
# "ci" builds pause, agnhost and coredns only, into DIR/images-ci: what
# `make test`'s conformance step (test/conformance/ci.sh) uses.
# Needs root for the agnhost root filesystem (mmdebstrap --mode=root).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
dir=${1:?usage: $0 DIR [full|ci]}
set_=${2:-full}
cache=${KPI_CACHE:-/var/cache/kube-proxy-ipvs}
case $set_ in
full) out="$dir/images" ;;
ci) out="$dir/images-ci" ;;
*) echo "usage: $0 DIR [full|ci]" >&2; exit 2 ;;
esac
log() { echo "[conformance-images] $*" >&2; }
die() {
	log "FAIL: $*"
	exit 1
}

pause_ref=registry.k8s.io/pause:3.10.2
agnhost_ref=registry.k8s.io/e2e-test-images/agnhost:2.66.1
coredns_ref=registry.k8s.io/coredns/coredns:v1.14.6
kube_proxy_ref=registry.k8s.io/kube-proxy:v1.37.2
busybox_ref=registry.k8s.io/e2e-test-images/busybox:1.37.0-2
r74839_ref=registry.k8s.io/e2e-test-images/regression-issue-74839:1.5

mkdir -p "$out"
work=$(mktemp -d "$out/.work.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The flags of test/conformance/build.sh and test/e2e/lib/build-tools.sh, so
# the Go build cache hits.
gobuild() { # MODULE_DIR OUTPUT PACKAGE
	local mod=$1 o=$2 pkg=$3 start=$SECONDS
	(cd "$mod" && CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" nice -n 10 go build -ldflags='-s -w' -o "$o" "$pkg")
	log "built $(basename "$o") in $((SECONDS - start)) s"
}

gobuild "$root" "$work/ocibuild" ./test/conformance/images/ocibuild
gobuild "$root" "$work/pause" ./test/conformance/images/pause
gobuild "$root/test/conformance/tools" "$work/agnhost" k8s.io/kubernetes/test/images/agnhost
gobuild "$here/coredns" "$work/coredns" .
[[ $set_ == ci ]] ||
	gobuild "$root/test/conformance/tools" "$work/regression-issue-74839" k8s.io/kubernetes/test/images/regression-issue-74839

index=()
image() { # NAME REFERENCE OCIBUILD_ARGS...
	local name=$1 ref=$2 start=$SECONDS
	shift 2
	"$work/ocibuild" -out "$out/$name.oci.tar" -ref "$ref" "$@" >/dev/null
	index+=("$ref	$name.oci.tar")
	log "$name.oci.tar ($ref): $(du -h "$out/$name.oci.tar" | cut -f1) in $((SECONDS - start)) s"
}

image pause "$pause_ref" -file "$work/pause=/pause" -entrypoint '["/pause"]'

# agnhost's root filesystem: the Dockerfile's runtime stage replayed by
# hack/image-rootfs.sh in a cache of its own (the script removes the other
# entries of its cache: the kube-proxy image's must stay).
entry=$(KPI_DOCKERFILE="$here/agnhost/Dockerfile" KPI_CACHE="$cache/conformance/rootfs/agnhost" \
	nice -n 10 "$root/hack/image-rootfs.sh")
[[ $(cat "$entry/binary-path") == /agnhost ]] || die "agnhost/Dockerfile: COPY destination is not /agnhost"
kmod=$(cd "$root/test/conformance/tools" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)

# iperf 2.2: "Networking IPerf2" parses the 17 CSV fields of iperf >= 2.2.0
# (upstream's alpine image has 2.2); bookworm's iperf is 2.1.8 (9 fields). So
# /usr/bin/iperf is built from Debian trixie's source of 2.2.1 (checked by its
# SHA256) on this bookworm host, linked against the same glibc and libstdc++
# as the image's bookworm, and cached. The apt package stays in the image for
# its libraries and man page; the second layer's binary replaces its own.
iperf_ver=2.2.1+dfsg
iperf_sum=9cbbcb3c8489913871ad1855199a6c03e5d402837c9210b7baf7997aa064cd2c
iperf=$cache/conformance/iperf-$iperf_ver/iperf
if [[ ! -x $iperf ]]; then
	start=$SECONDS
	src=$work/iperf-src
	mkdir -p "$src" "$(dirname "$iperf")"
	curl -fsS --retry 3 -o "$src/orig.tar.xz" \
		"${KPI_DEBIAN_MIRROR:-http://deb.debian.org/debian}/pool/main/i/iperf/iperf_$iperf_ver.orig.tar.xz" ||
		die "downloading iperf $iperf_ver's source"
	echo "$iperf_sum  $src/orig.tar.xz" | sha256sum -c --quiet - || die "iperf $iperf_ver's source: wrong SHA256"
	tar -xJf "$src/orig.tar.xz" -C "$src" --strip-components=1
	# Debian's repack drops src/service.c (Windows service code, all under
	# #ifdef WIN32) but not its line in src/Makefile.am: an empty one builds.
	[[ -f $src/src/service.c ]] || echo '/* Windows only */' >"$src/src/service.c"
	(cd "$src" && ./configure --quiet >/dev/null && nice -n 10 make -s -j"$(nproc)" >/dev/null 2>&1) ||
		die "building iperf $iperf_ver (gcc, g++, make)"
	install -m 0755 "$src/src/iperf" "$iperf.tmp"
	mv "$iperf.tmp" "$iperf"
	log "built iperf $iperf_ver in $((SECONDS - start)) s"
fi
# It must run on the image's own libraries, not only the host's.
lib=$entry/image/lib/x86_64-linux-gnu:$entry/image/usr/lib/x86_64-linux-gnu
"$entry/image/lib64/ld-linux-x86-64.so.2" --library-path "$lib" "$iperf" -v 2>&1 | grep -q '^iperf version 2\.2\.' ||
	die "iperf $iperf_ver does not run on the agnhost image's libraries"

image agnhost "$agnhost_ref" -rootfs "$entry/image" \
	-file "$work/agnhost=/agnhost" -file "$iperf=/usr/bin/iperf" -link /agnhost-2=agnhost -dir /uploads \
	-file "$kmod/test/images/agnhost/porter/localhost.crt=/localhost.crt" \
	-file "$kmod/test/images/agnhost/porter/localhost.key=/localhost.key" \
	-entrypoint '["/agnhost"]' -cmd '["pause"]' \
	-port 80/tcp -port 8080/tcp -port 8081/tcp -port 9376/tcp -port 5000/tcp

# As upstream's image: CoreDNS alone, listening on 53 and serving metrics on
# 9153 (kubeadm's Deployment runs it with NET_BIND_SERVICE).
image coredns "$coredns_ref" -file "$work/coredns=/coredns" -entrypoint '["/coredns"]' \
	-port 53/udp -port 53/tcp -port 9153/tcp

if [[ $set_ == full ]]; then
	# Upstream kube-proxy on our image's root filesystem (the Dockerfile of the
	# working tree, as the e2e suite takes it), in a cache of its own.
	[[ -x "$dir/bin/kube-proxy" ]] || die "no $dir/bin/kube-proxy (test/conformance/build.sh builds it)"
	entry=$(KPI_CACHE="$cache/conformance/rootfs/kube-proxy" nice -n 10 "$root/hack/image-rootfs.sh")
	entrypoint=$(python3 -c 'import json,sys; print(json.dumps(sys.stdin.read().split()))' <"$entry/entrypoint")
	image kube-proxy "$kube_proxy_ref" -rootfs "$entry/image" \
		-file "$dir/bin/kube-proxy=$(cat "$entry/binary-path")" -entrypoint "$entrypoint"

	# busybox: the binary of Debian's busybox-static (.debs kept in the cache).
	debs="$cache/conformance/debs"
	mkdir -p "$debs"
	(cd "$debs" && apt-get download busybox-static >/dev/null 2>&1) ||
		compgen -G "$debs/busybox-static_*.deb" >/dev/null || die "apt-get download busybox-static failed (apt-get update?)"
	deb=$(ls -t "$debs"/busybox-static_*.deb | head -1)
	dpkg-deb -x "$deb" "$work/busybox"
	bb=$work/busybox/bin/busybox
	links=()
	for applet in $("$bb" --list-full); do
		[[ /$applet == /bin/busybox ]] || links+=(-link "/$applet=/bin/busybox")
	done
	image busybox "$busybox_ref" -file "$bb=/bin/busybox" "${links[@]}" -dir /tmp -cmd '["sh"]'

	image regression-issue-74839 "$r74839_ref" -file "$work/regression-issue-74839=/regression-issue-74839" \
		-entrypoint '["/regression-issue-74839"]' -port 9000/tcp
fi

# e2e.test names the images it uses; ours must be those exact references.
# (e2e-network.test lists the same: the list is the framework's.)
for e2e in "$dir/bin/e2e.test" "$dir/bin/e2e-network.test"; do
	[[ -x $e2e ]] || continue
	listed=$("$e2e" --list-images 2>/dev/null)
	refs=("$pause_ref" "$agnhost_ref")
	[[ $set_ == ci ]] || refs+=("$busybox_ref" "$r74839_ref")
	for ref in "${refs[@]}"; do
		grep -qxF "$ref" <<<"$listed" || die "$ref is not in $(basename "$e2e") --list-images"
	done
	break
done

printf '%s\n' "${index[@]}" >"$out/index.tsv.tmp"
mv "$out/index.tsv.tmp" "$out/index.tsv"
log "index: $out/index.tsv"
