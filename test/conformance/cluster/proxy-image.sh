#!/usr/bin/env bash
# Prints the OCI archive of our kube-proxy image for the conformance cluster:
# the amd64 half of what `make release` writes (hack/release.sh with
# KPI_RELEASE_ARCHES=amd64: the same root filesystem, binary, ENTRYPOINT and
# labels), built from a clean snapshot of the repository's HEAD (a git
# worktree, so nobody's half-done edit goes in) and cached by commit under
# ${KPI_CACHE:-/var/cache/kube-proxy-ipvs}/conformance-proxy/<commit>/.
#
# KPI_CONF_PROXY_ARCHIVE=PATH uses an existing archive instead (e.g. one of
# _output/release/<version>/). The archive's index.json names the image by
# ref.name = the version; up.sh imports it as kpi.local/kube-proxy-ipvs:<version>.
# Output: one line "ARCHIVE<TAB>VERSION".
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
cache=${KPI_CACHE:-/var/cache/kube-proxy-ipvs}
log() { echo "[proxy-image] $*" >&2; }

ref_name() { # the ref.name of an OCI archive's index.json
	tar -xOf "$1" index.json | python3 -c 'import json,sys; print(json.load(sys.stdin)["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"])'
}
if [[ -n ${KPI_CONF_PROXY_ARCHIVE:-} ]]; then
	printf '%s\t%s\n' "$KPI_CONF_PROXY_ARCHIVE" "$(ref_name "$KPI_CONF_PROXY_ARCHIVE")"
	exit 0
fi
commit=$(git -C "$repo" rev-parse HEAD)
out="$cache/conformance-proxy/$commit"
archive=$(ls "$out"/kube-proxy-ipvs-*.oci.tar 2>/dev/null | head -1 || true)
if [[ -n $archive ]]; then
	printf '%s\t%s\n' "$archive" "$(ref_name "$archive")"
	exit 0
fi
mkdir -p "$cache/conformance-proxy"
exec 9>"$cache/conformance-proxy/.lock"
flock 9
wt=$(mktemp -d /tmp/wt-conf-proxy.XXXXXX)
rmdir "$wt"
git -C "$repo" worktree add --detach "$wt" "$commit" >/dev/null 2>&1
trap 'git -C "$repo" worktree remove --force "$wt" >/dev/null 2>&1 || rm -rf "$wt"' EXIT
log "building the amd64 image of $commit (hack/release.sh in a clean worktree)"
start=$SECONDS
if ! (cd "$wt" && KPI_RELEASE_ARCHES=amd64 KPI_RELEASE_DIR="$out.tmp" nice -n 10 hack/release.sh) >"$wt.log" 2>&1; then
	tail -30 "$wt.log" >&2
	rm -f "$wt.log"
	log "FAIL: hack/release.sh failed (log above)"
	exit 1
fi
rm -f "$wt.log"
rm -rf "$out"
mv "$out.tmp" "$out"
# Older commits' images are dead weight: the 5 newest stay.
find "$cache/conformance-proxy" -mindepth 1 -maxdepth 1 -type d -printf '%T@ %p\n' | sort -rn | tail -n +6 |
	cut -d' ' -f2- | xargs -r rm -rf
archive=$(ls "$out"/kube-proxy-ipvs-*.oci.tar | head -1)
log "$archive in $((SECONDS - start)) s"
printf '%s\t%s\n' "$archive" "$(ref_name "$archive")"
