#!/usr/bin/env bash
# Prints the version of the tree, from git: the nearest v* tag as `git describe`
# writes it (v1.2.3, or v1.2.3-4-gabcdef0 past it), or v0.0.0-<commits>-g<hash>
# before the first tag; "-dirty" when the work tree has uncommitted changes.
# `hack/version.sh ldflags` prints the -ldflags that stamp it into the binary
# (k8s.io/component-base/version: --version, kubernetes_build_info).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

version() {
	if v=$(git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null); then
		echo "$v"
		return
	fi
	if ! git rev-parse --verify -q HEAD >/dev/null 2>&1; then
		echo v0.0.0-dev
		return
	fi
	local n h dirty=""
	n=$(git rev-list --count HEAD)
	h=$(git rev-parse --short=7 HEAD)
	git diff --quiet HEAD -- 2>/dev/null || dirty=-dirty
	echo "v0.0.0-$n-g$h$dirty"
}

v=${VERSION:-$(version)}
case ${1:-} in
ldflags)
	commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
	date=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ 2>/dev/null || echo 1970-01-01T00:00:00Z)
	state=clean
	[[ $v == *-dirty ]] && state=dirty
	pkg=k8s.io/component-base/version
	echo "-X $pkg.gitVersion=$v -X $pkg.gitCommit=$commit -X $pkg.gitTreeState=$state -X $pkg.buildDate=$date"
	;;
"") echo "$v" ;;
*) echo "usage: $0 [ldflags]" >&2; exit 2 ;;
esac
