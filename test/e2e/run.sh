#!/usr/bin/env bash
# Runs the end-to-end suite (make e2e): real kube-apiserver + etcd on
# 127.0.0.1, a qemu VM with Debian's kernel as the node, our kube-proxy in it.
# Prints a per-scenario result table. A scenario that cannot run fails.
#
# Environment: KPI_E2E_RUN (go test -run regexp), KPI_KUBE_PROXY (binary to
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

log=$(mktemp /tmp/kpi-e2e.XXXXXX.log)
s=$SECONDS; step "go test -tags e2e ./test/e2e (log: $log)"
go test -tags e2e -count=1 -v -timeout "${KPI_E2E_TIMEOUT:-60m}" ${KPI_E2E_RUN:+-run "$KPI_E2E_RUN"} ./test/e2e/ 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
step "suite ran in $((SECONDS - s)) s (total $((SECONDS - t0)) s)"

echo
echo "[e2e] results"
printf '%-40s %-6s %s\n' SCENARIO RESULT TIME
awk '/^--- (PASS|FAIL|SKIP): / {t=$4; r=$2; sub(/:$/, "", r); gsub(/[()]/, "", t); printf "%-40s %-6s %s\n", $3, r, t}' "$log"
pass=$(grep -c '^--- PASS: ' "$log")
fail=$(grep -c '^--- FAIL: ' "$log")
skip=$(grep -c '^--- SKIP: ' "$log")
echo "$pass passed, $((fail + skip)) failed"
if ((fail > 0)); then
	# CI keeps only the tail of the output, and a failed scenario's dump
	# (kernel state, daemon logs) follows its failure message: repeat each
	# failed scenario's own log lines here, first line of each, shortened.
	echo
	echo "[e2e] what the failed scenarios logged (last 15 lines each; the full log: $log)"
	awk '
		/^=== (RUN|CONT)   / { cur = $3; sub(/\/.*/, "", cur) }
		/^    [A-Za-z0-9_]+_test\.go:[0-9]+: / { n[cur]++; line[cur, n[cur]] = substr($0, 1, 240) }
		/^--- FAIL: / {
			name = $3; print "  " name ":"
			for (i = (n[name] > 15 ? n[name] - 14 : 1); i <= n[name]; i++) print "  " line[name, i]
		}
	' "$log"
fi
if ((skip > 0)); then
	echo "[e2e] FAIL: $skip scenario(s) skipped: every e2e scenario must run"
	rc=1
fi
if ((pass + fail + skip == 0)); then
	echo "[e2e] FAIL: no scenario ran (testbed setup failed: see the log above)"
	rc=1
fi
exit "$rc"
