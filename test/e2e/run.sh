#!/usr/bin/env bash
# Runs the end-to-end suite (make e2e): real kube-apiserver + etcd on
# 127.0.0.1, a qemu VM with Debian's kernel as the node, our kube-proxy in it.
# Prints a per-scenario result table. A scenario that cannot run fails.
#
# Environment: KPI_E2E_RUN (go test -run regexp), KPI_E2E_BACKENDS (the rules
# backends to run the suite with, default "iptables nftables"), KPI_KUBE_PROXY (binary to
# test, default bin/kube-proxy), KPI_CACHE, KPI_E2E_KEEP=1 (keep logs),
# KPI_E2E_TIMEOUT (go test -timeout, default 60m), KPI_E2E_IMAGE_ROOTFS=0 (run
# the daemon on the VM's own tools instead of from the container image's root
# filesystem; TestDaemonRunsFromImage then fails).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
export CGO_ENABLED=0

step() { echo "[e2e] $(date -u +%T) $*"; }
t0=$SECONDS
step "dependencies"
hack/install-deps.sh || exit 1
if [[ -z ${KPI_KUBE_PROXY:-} && ! -x bin/kube-proxy ]]; then
	step "building bin/kube-proxy"
	go build -o bin/kube-proxy ./cmd/kube-proxy || { echo "[e2e] FAIL: bin/kube-proxy does not build"; exit 1; }
fi
# Cold builds are slow: do them here, with progress, before go test starts.
s=$SECONDS; step "kube-apiserver and etcd"
test/e2e/lib/build-tools.sh >/dev/null || exit 1
step "tools ready in $((SECONDS - s)) s"
s=$SECONDS; step "kernel and initramfs"
kdir=$(test/e2e/vm/build-kernel.sh) && test/e2e/vm/build-initramfs.sh "$kdir" >/dev/null || exit 1
test/e2e/vm/accel.sh "$kdir/vmlinux" >/dev/null
step "VM image ready in $((SECONDS - s)) s"
if [[ ${KPI_E2E_IMAGE_ROOTFS:-1} != 0 ]]; then
	s=$SECONDS; step "container image root filesystem (hack/image-rootfs.sh)"
	hack/image-rootfs.sh >/dev/null || exit 1
	step "image root filesystem ready in $((SECONDS - s)) s"
	unset KPI_IMAGE_REBUILD # done once: the suite reuses it
fi

# Every scenario runs with the daemon's default rules backend (iptables +
# ipset); those that check traffic or the rules run a second time with
# --ipvs-rules-backend=nftables (issue 16), their state checks reading the
# nftables table (test/e2e/framework/rules.go). A scenario must be in one of
# the two lists below, or the run fails.
nft_scenarios=(
	TestDualStack TestHostileObjectsIsolated TestPerServiceScheduler
	TestLoadBalancerSourceRanges TestLoadBalancerIPModeProxy TestExternalTrafficPolicyLocal
	TestInternalTrafficPolicyLocal TestTerminatingEndpointFallback TestIgnoredServices TestSCTP TestTopologyHints
	TestRollingUpdateUnderLoad TestAPIServerRestart TestTamperingRepaired
	TestClusterIPTCPRoundRobin TestClusterIPUDP TestNodePortFromNode TestServiceDeletionLeavesNothing
	TestSessionAffinityClientIP TestEndpointRemoval TestExternalIP TestHealthzAndMetrics TestPodToServiceSourceIP
	TestLoadBalancerIngressIP TestKubeProxyRestartUnderLoad TestCleanupLeavesNothing
	TestTwoNodeTestbed TestTwoNodeExternalToRemoteEndpoints TestTwoNodeExternalTrafficPolicyLocal
	TestTwoNodePodToRemotePod TestTwoNodeLoadBalancerSourceRanges TestTwoNodeUDPEndpointReplacement
	TestTwoNodeSessionAffinityFromOutside TestTwoNodeTerminatingDrain TestTwoNodeSoak TestExplain TestUDPOnePacketScheduling
	TestTwoNodeConsistentHashing
)
# Run with the default backend only, and why.
declare -A iptables_only=(
	[TestExpandVars]="no daemon: the manifests' variable expansion"
	[TestDeployManifestServerSideDryRun]="no daemon: the apiserver's dry run of the manifest"
	[TestHarnessDirectIPVS]="no daemon: the testbed's own IPVS"
	[TestStandaloneManifestRunsAsWritten]="the manifest as written, which chooses no backend"
	[TestKubeadmMigrationManifestRunsAsWritten]="the migration manifest as written, which chooses no backend"
	[TestDaemonRunsFromImage]="the image's tools as the iptables backend calls them (the nftables backend uses netlink)"
	[TestMigrationUpstreamIPVSBothWays]="upstream's ipsets and chains adopted in place: the iptables backend's contract"
	[TestMigrationFromUpstreamIPTablesMode]="from upstream's iptables mode; TestNFTablesBackend covers moving to nftables"
	[TestMigrationFromUpstreamNFTablesMode]="from upstream's nftables mode; TestNFTablesBackend covers moving to nftables"
	[TestCleanupUpstreamIPVSState]="upstream's state removed by --cleanup; no daemon of ours runs"
	[TestCleanupKeepsForeignKUBEState]="foreign KUBE- ipsets and chains beside the iptables backend's"
	[TestNFTablesBackend]="switches the backend itself, both ways"
	[TestTwoNodeNFTables]="switches both nodes to nftables itself, after the same traffic on iptables"
	[TestStartWithoutAPIServer]="control-plane resilience (a start without the apiserver), not the rules backend"
	[TestLongAPIServerOutageUnderTraffic]="control-plane resilience (a long apiserver outage), not the rules backend"
	[TestRollbackFromNFTablesToUpstreamIPVS]="switches our daemon to nftables itself, then rolls back to upstream's ipvs mode"
)
listed=" ${nft_scenarios[*]} ${!iptables_only[*]} "
unlisted=()
while read -r name; do
	[[ $listed == *" $name "* ]] || unlisted+=("$name")
done < <(grep -l '^//go:build e2e$' test/e2e/*_test.go | xargs sed -n 's/^func \(Test[A-Za-z0-9_]*\)(t \*testing\.T).*/\1/p')
if ((${#unlisted[@]} > 0)); then
	echo "[e2e] FAIL: scenario(s) in neither backend list of test/e2e/run.sh: ${unlisted[*]}"
	exit 1
fi

# run_pass BACKEND LOG RUN-REGEXP: one go test run with KPI_E2E_RULES_BACKEND.
run_pass() {
	local backend=$1 log=$2 run=$3 s=$SECONDS
	step "go test -tags e2e ./test/e2e, rules backend $backend (log: $log)"
	KPI_E2E_RULES_BACKEND=$backend go test -tags e2e -count=1 -v -timeout "${KPI_E2E_TIMEOUT:-60m}" ${run:+-run "$run"} ./test/e2e/ 2>&1 | tee "$log"
	local r=${PIPESTATUS[0]}
	step "the $backend pass ran in $((SECONDS - s)) s (total $((SECONDS - t0)) s)"
	return "$r"
}

# report BACKEND LOG: the pass's result table; fails on a failed or skipped
# scenario, or none.
report() {
	local backend=$1 log=$2 r=0
	echo
	echo "[e2e] results, rules backend $backend"
	printf '%-40s %-6s %s\n' SCENARIO RESULT TIME
	awk '/^--- (PASS|FAIL|SKIP): / {t=$4; r=$2; sub(/:$/, "", r); gsub(/[()]/, "", t); printf "%-40s %-6s %s\n", $3, r, t}' "$log"
	local pass fail skip
	pass=$(grep -c '^--- PASS: ' "$log")
	fail=$(grep -c '^--- FAIL: ' "$log")
	skip=$(grep -c '^--- SKIP: ' "$log")
	echo "$pass passed, $((fail + skip)) failed ($backend)"
	if ((fail > 0)); then
		# CI keeps only the tail of the output, and a failed scenario's dump
		# (kernel state, daemon logs) follows its failure message: each failed
		# scenario's own log lines, shortened, are repeated after every
		# backend's table (failed_logs), so another pass's output cannot push
		# them out of the tail.
		{
		echo
		echo "[e2e] what the failed scenarios logged with $backend (last 15 lines each; the full log: $log)"
		awk '
			/^=== (RUN|CONT)   / { cur = $3; sub(/\/.*/, "", cur) }
			/^    [A-Za-z0-9_]+_test\.go:[0-9]+: / { n[cur]++; line[cur, n[cur]] = substr($0, 1, 240) }
			/^--- FAIL: / {
				name = $3; print "  " name ":"
				for (i = (n[name] > 15 ? n[name] - 14 : 1); i <= n[name]; i++) print "  " line[name, i]
			}
		' "$log"
		} >>"$failed_logs"
		r=1
	fi
	if ((skip > 0)); then
		echo "[e2e] FAIL: $skip scenario(s) skipped with $backend: every e2e scenario must run"
		r=1
	fi
	if ((pass + fail + skip == 0)); then
		echo "[e2e] FAIL: no scenario ran with $backend (testbed setup failed: see the log above)"
		r=1
	fi
	return "$r"
}

# KPI_E2E_BACKENDS chooses the passes (default: both); KPI_E2E_RUN narrows
# either, the nftables pass to the listed scenarios it matches.
backends=${KPI_E2E_BACKENDS:-iptables nftables}
rc=0
declare -A logs
for backend in $backends; do
	logs[$backend]=$(mktemp /tmp/kpi-e2e.XXXXXX.log)
	case $backend in
	iptables) run_pass iptables "${logs[$backend]}" "${KPI_E2E_RUN:-}" || rc=1 ;;
	nftables)
		names=$(printf '%s\n' "${nft_scenarios[@]}" | grep -E -- "${KPI_E2E_RUN:-.}" | paste -sd'|')
		if [[ -z $names ]]; then
			step "no scenario of the nftables pass matches KPI_E2E_RUN: nftables pass not run"
			unset 'logs[nftables]'
			continue
		fi
		# The soak's second run is shorter: the churn, restarts and final
		# comparison once more, on the other backend.
		KPI_SOAK_DURATION=${KPI_E2E_NFT_SOAK_DURATION:-3m} KPI_SOAK_SAMPLE=${KPI_E2E_NFT_SOAK_SAMPLE:-30s} \
			run_pass nftables "${logs[$backend]}" "^($names)\$" || rc=1
		;;
	*)
		echo "[e2e] FAIL: KPI_E2E_BACKENDS=$backends: want iptables and/or nftables"
		exit 1
		;;
	esac
done
failed_logs=$(mktemp /tmp/kpi-e2e-failed.XXXXXX)
for backend in $backends; do
	[[ -n ${logs[$backend]:-} ]] || continue
	report "$backend" "${logs[$backend]}" || rc=1
done
cat "$failed_logs"
rm -f "$failed_logs"
exit "$rc"
