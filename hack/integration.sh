#!/usr/bin/env bash
# Runs every root-only integration test of the repository against the host kernel.
#
# Convention: a test that needs the real kernel but no IPVS (ipset, iptables legacy
# and nft, conntrack, netlink addresses, sysctl) is named TestIntegration<Name> and
# starts with netns.Run (pkg/util/testing/netns), which re-executes it in a fresh
# network and mount namespace: the host's network state is never touched. Tests
# that need IPVS or dummy links are built with -tags vmtest, named TestVM<Name>,
# and run in the qemu VM instead (test/e2e).
#
# Usage: hack/integration.sh [packages...]   (default ./pkg/... ./cmd/...)
# Extra `go test` flags: GOTEST_FLAGS="-timeout 30m".
#
# This script FAILS (never skips) when not run as root, when a required tool is
# missing or does not work in a throwaway namespace, when a test fails, and when
# an integration test skipped.
set -euo pipefail

cd "$(dirname "$0")/.."

fail() { echo "integration.sh: FAIL: $*" >&2; exit 1; }

[[ "$(id -u)" == 0 ]] || fail "must run as root (integration tests create network namespaces)"

tools=(go unshare ip ipset conntrack
	iptables-legacy iptables-legacy-save iptables-legacy-restore
	ip6tables-legacy ip6tables-legacy-save ip6tables-legacy-restore
	iptables-nft iptables-nft-save iptables-nft-restore
	ip6tables-nft ip6tables-nft-save ip6tables-nft-restore)
missing=()
for t in "${tools[@]}"; do
	command -v "$t" >/dev/null 2>&1 || missing+=("$t")
done
((${#missing[@]} == 0)) || fail "missing tools: ${missing[*]} (apt-get install -y iptables ipset conntrack iproute2 util-linux)"

# The kernel must support what the tests use; check in a namespace of our own.
if ! out=$(unshare --net bash -c '
	set -e
	ipset create probe-ip hash:ip,port && ipset destroy probe-ip
	ipset create probe-bm bitmap:port range 0-65535 && ipset destroy probe-bm
	iptables-legacy -t nat -S >/dev/null && ip6tables-legacy -t nat -S >/dev/null
	iptables-nft -t nat -S >/dev/null && ip6tables-nft -t nat -S >/dev/null
	conntrack -L >/dev/null 2>&1
' 2>&1); then
	fail "kernel support probe failed in a private namespace: $out"
fi

pkgs=("$@")
((${#pkgs[@]} > 0)) || pkgs=(./pkg/... ./cmd/... ./test/e2e/cmd/...)

log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
# shellcheck disable=SC2086
# The HTTP flood test bounds a latency, so it runs alone afterwards (with
# KPI_FLOOD_ALONE=1), when its package is among those asked for and no -run was given.
flood='^TestIntegrationHTTPServersNotStarved$'
go test -count=1 -v -run '^TestIntegration' -skip "$flood" ${GOTEST_FLAGS:-} "${pkgs[@]}" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
if ((rc == 0)) && [[ ${GOTEST_FLAGS:-} != *-run* ]] && go list "${pkgs[@]}" 2>/dev/null | grep -qx 'github.com/kube-proxy-ipvs/kube-proxy-ipvs/cmd/kube-proxy/app'; then
	KPI_FLOOD_ALONE=1 go test -count=1 -v -run "$flood" ./cmd/kube-proxy/app 2>&1 | tee -a "$log"
	rc=${PIPESTATUS[0]}
fi
set -e
((rc == 0)) || fail "go test exited $rc"

# A skipped integration test is a failure here (lines from netns children carry
# a "[netns]" prefix and are reported again by their parent).
if skipped=$(grep -E '^\s*--- SKIP: TestIntegration' "$log" | grep -v '\[netns\]'); then
	fail "integration tests skipped:
$skipped"
fi
ran=$(grep -cE '^--- PASS: TestIntegration' "$log" || true)
((ran > 0)) || fail "no integration test ran"
echo "integration.sh: OK: $ran integration tests passed"
