#!/usr/bin/env bash
# Writes a release into _output/release/<version>/ (the version of hack/version.sh),
# without Docker or a registry:
#
#   kube-proxy-linux-amd64, kube-proxy-linux-arm64   static binaries (CGO_ENABLED=0,
#                                                    -trimpath, hack/version.sh ldflags, -s -w)
#   kube-proxy-ipvs-<version>.oci.tar               the image: an OCI image layout whose
#                                                    index.json names (ref.name <version>) a
#                                                    multi-arch index, one manifest per
#                                                    architecture, one layer each
#   image-manifest-linux-<arch>.txt                 the root filesystem's manifest.txt of
#                                                    hack/image-rootfs.sh: every Debian package
#                                                    version the image holds
#   sbom.spdx.json                                  SPDX 2.3: Go modules of each binary,
#                                                    Debian packages of each architecture
#   SHA256SUMS                                      over every other file
#
# The image is the Dockerfile's runtime stage as hack/image-rootfs.sh replays it (for
# a foreign architecture: derived from the native root filesystem, see there), with
# the binary at the COPY destination and the Dockerfile's ENTRYPOINT and LABELs, the
# ARGs VERSION, REVISION and CREATED set to the version, the commit and its date
# (hack/release: also every mtime is clamped to that date).
#
# Environment: VERSION (default hack/version.sh), KPI_RELEASE_ARCHES (default
# "amd64 arm64"), KPI_RELEASE_DIR (default _output/release/<version>), and those of
# hack/image-rootfs.sh. Needs root (hack/image-rootfs.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
GO=${GO:-go}
log() { echo "[release] $*" >&2; }

version=${VERSION:-$(hack/version.sh)}
revision=$(git rev-parse HEAD)
created=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ)
read -r -a arches <<<"${KPI_RELEASE_ARCHES:-amd64 arm64}"
out=${KPI_RELEASE_DIR:-_output/release/$version}
ldflags="$(VERSION=$version hack/version.sh ldflags) -s -w"
start=$SECONDS

rm -rf "$out"
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

platforms=()
for arch in "${arches[@]}"; do
	log "building kube-proxy-linux-$arch ($version)"
	CGO_ENABLED=0 GOOS=linux GOARCH=$arch "$GO" build -trimpath -ldflags "$ldflags" \
		-o "$out/kube-proxy-linux-$arch" ./cmd/kube-proxy
done
hack/image-rootfs.sh --plan >"$tmp/plan"
for arch in "${arches[@]}"; do
	entry=$(KPI_IMAGE_ARCH=$arch hack/image-rootfs.sh)
	cp "$entry/manifest.txt" "$out/image-manifest-linux-$arch.txt"
	platforms+=(-platform "$arch=$entry,$out/kube-proxy-linux-$arch")
done
log "writing the image layout and the SBOM"
"$GO" run ./hack/release -version "$version" -revision "$revision" -created "$created" \
	-plan "$tmp/plan" "${platforms[@]}" -out "$out"
(cd "$out" && find . -maxdepth 1 -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort | xargs sha256sum -- >SHA256SUMS)
log "$out in $((SECONDS - start)) s:"
(cd "$out" && ls -l) >&2
echo "$out"
