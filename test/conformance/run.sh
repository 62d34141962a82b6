#!/usr/bin/env bash
# Runs upstream's e2e suite (e2e.test and ginkgo v1.37.2, test/conformance/build.sh)
# against a fresh conformance cluster (test/conformance/cluster/up.sh) per
# column, and writes a table of every test's result and time per column.
#
#   test/conformance/run.sh
#   FOCUS='Services should serve a basic endpoint' test/conformance/run.sh
#   test/conformance/run.sh report [OUT]   # the page again from OUT/run.json
#
# Environment:
#   FOCUS     ginkgo focus (default '\[sig-network\] (Services|Networking)')
#   PROXIES   comma-separated columns (default upstream-ipvs,ours-iptables,ours-nftables),
#             each installed on a fresh cluster by up.sh (KPI_CONF_PROXY) the way
#             kubeadm users do, with the same KubeProxyConfiguration (kubeadm
#             v1.37.2's addon: mode ipvs, clusterCIDR 10.244.0.0/16):
#             upstream-ipvs  kubeadm's DaemonSet, upstream kube-proxy v1.37.2
#             ours-iptables  deploy/kubeadm-extras, our image, rulesBackend iptables
#             ours-nftables  the same with rulesBackend nftables
#   PROCS     ginkgo parallel processes (default 3)
#   PARALLEL  1: every column's cluster at once (default: one after another)
#   KPI_CONF_OUT  results folder (default _output/conformance)
#   KPI_CONF_BUILD  what build.sh builds: all (default), or ci (test/conformance/ci.sh:
#             e2e-network.test and images-ci; KPI_CONF_E2E and KPI_CONF_IMAGES_DIR
#             name them)
#   KPI_CONF_E2E  the suite binary in build.sh's bin/ (default e2e.test)
# Skipped: test/conformance/skip.txt (each line a regular expression and its
# reason); a skip list that would skip a [Conformance] test of the focus fails
# the run before any cluster starts.
#
# Writes OUT/COLUMN/{e2e.log,junit_01.xml,results.tsv,took,cluster/} (cluster/:
# every component's log, the nodes' consoles, the kube-system pods' logs,
# timings), OUT/run.json (the command, commit, date, focus, skip list) and
# OUT/results.md (report.py: totals, differences, failures, skips with their
# reasons, one row per spec); with neither FOCUS nor PROXIES set,
# docs/CONFORMANCE.md too. Exit 0 when no test
# failed in any column.
set -euo pipefail
# The whole script is one compound command: bash reads it all before running
# it, so editing the file while it runs cannot change what runs.
{
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
log() { echo "[conformance] $*" >&2; }
die() { log "FAIL: $*"; exit 1; }

# run.sh report [OUT]: the page again from a finished run's folder.
if [[ ${1:-} == report ]]; then
	out=${2:-${KPI_CONF_OUT:-$repo/_output/conformance}}
	[[ -f $out/run.json ]] || die "no $out/run.json: not a finished run's folder"
	if python3 -c 'import json, sys; sys.exit(not json.load(open(sys.argv[1]))["record"])' "$out/run.json"; then
		python3 "$here/report.py" "$out" --doc "$repo/docs/CONFORMANCE.md"
		log "wrote $out/results.md and docs/CONFORMANCE.md"
	else
		python3 "$here/report.py" "$out"
		log "wrote $out/results.md"
	fi
	exit 0
fi

focus=${FOCUS:-'\[sig-network\] (Services|Networking)'}
procs=${PROCS:-3}
out=${KPI_CONF_OUT:-$repo/_output/conformance}
IFS=, read -r -a columns <<<"${PROXIES:-upstream-ipvs,ours-iptables,ours-nftables}"
build=$("$here/build.sh" "${KPI_CONF_BUILD:-all}")
bin=$build/bin
e2e=$bin/${KPI_CONF_E2E:-e2e.test}
[[ -x $e2e ]] || die "no $e2e (test/conformance/build.sh)"

# The skip list: "REGEX  # REASON" per line.
skips=()
while IFS= read -r line; do
	[[ -z $line || $line == \#* ]] && continue
	[[ $line == *'  # '* ]] || die "skip.txt: no reason on: $line"
	re=${line%  # *}
	reason=${line##*  # }
	[[ -n $re && -n ${reason// /} ]] || die "skip.txt: empty pattern or reason on: $line"
	skips+=("$re")
done <"$here/skip.txt"
skip=$(IFS='|'; echo "${skips[*]}")

# No [Conformance] test of the focus may be skipped.
dry() { # SKIP -> how many [Conformance] specs of the focus would run
	local d
	d=$(mktemp -d)
	"$e2e" --ginkgo.dry-run --ginkgo.no-color --ginkgo.focus="$focus" --ginkgo.label-filter=Conformance \
		${1:+--ginkgo.skip="$1"} --provider=skeleton --report-dir="$d" 2>&1 |
		awk '/^Will run/ {print $3}'
	rm -rf "$d"
}
all=$(dry '')
kept=$(dry "$skip")
[[ -n $all && $all == "$kept" ]] || die "skip.txt skips [Conformance] tests of the focus ($kept of $all would run)"
log "focus: $focus; $all [Conformance] specs in it, none skipped; ${#skips[@]} skip patterns"

# One image of ours for every column: HEAD's when the run starts.
IFS=$'\t' read -r proxy_archive proxy_version < <("$here/cluster/proxy-image.sh")
commit=$(git -C "$repo" rev-parse --short HEAD)
mkdir -p "$out"
failed=0 t0=$SECONDS
declare -A took=()
cmd="make conformance${FOCUS:+ FOCUS='$FOCUS'}${PROXIES:+ PROXIES=$PROXIES}${PARALLEL:+ PARALLEL=$PARALLEL}"
for col in "${columns[@]}"; do
	case $col in
	ours-iptables | ours-nftables | upstream-ipvs) ;;
	*) die "unknown column $col (ours-iptables, ours-nftables, upstream-ipvs)" ;;
	esac
done

# run_column COLUMN: a fresh cluster with that kube-proxy, the suite against it;
# writes OUT/COLUMN/{e2e.log,junit_01.xml,results.tsv,took,cluster/}.
run_column() {
	local col=$1 proxy=$1 d=$out/$1 start rc
	rm -rf "$d"
	mkdir -p "$d"
	log "$col: a fresh cluster, then $(basename "$e2e") ($procs processes); log in $d/e2e.log"
	start=$SECONDS
	set +e
	KPI_CONF_PROXY=$proxy KPI_CONF_BUILD_DIR=$build KPI_CONF_PROXY_ARCHIVE=$proxy_archive KPI_CONF_LOGS_DIR=$d/cluster \
		"$here/cluster/up.sh" "$bin/ginkgo" --procs="$procs" --no-color --timeout=4h \
		--focus="$focus" ${skip:+--skip="$skip"} "$e2e" -- \
		--provider=skeleton --num-nodes="${KPI_CONF_NODES:-2}" --kubectl-path="$bin/kubectl" --report-dir="$d" --disable-log-dump \
		>"$d/e2e.log" 2>&1
	rc=$?
	set -e
	echo $((SECONDS - start)) >"$d/took"
	log "$col: exit $rc after $(cat "$d/took") s"
	[[ -f $d/junit_01.xml ]] || { log "$col: no junit report (tail of $d/e2e.log below)"; tail -30 "$d/e2e.log" >&2; return 1; }
	python3 - "$d/junit_01.xml" >"$d/results.tsv" <<'EOF'
import sys, xml.etree.ElementTree as ET
for tc in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    name = tc.get("name", "")
    if not name.startswith("[It] "):
        continue
    status = "pass"
    if tc.find("skipped") is not None:
        status = "skip"
    if tc.find("failure") is not None or tc.find("error") is not None:
        status = "fail"
    print("%s\t%s\t%.0f" % (name[5:], status, float(tc.get("time", "0"))))
EOF
	if grep -qP '\tfail\t' "$d/results.tsv"; then return 1; fi
}

if [[ ${PARALLEL:-0} == 1 ]]; then
	# Every column's cluster at once: each in its own namespace and run folder,
	# the same host load for all of them (slower per spec than one at a time).
	declare -A pid_of=()
	for col in "${columns[@]}"; do
		run_column "$col" &
		pid_of[$col]=$!
	done
	for col in "${columns[@]}"; do
		wait "${pid_of[$col]}" || failed=1
	done
else
	for col in "${columns[@]}"; do
		run_column "$col" || failed=1
	done
fi
for col in "${columns[@]}"; do
	took[$col]=$(cat "$out/$col/took" 2>/dev/null || echo '?')
done

# What the page needs to know of the run; report.py renders it (and
# `run.sh report` renders it again from the same folder).
record=0
[[ -n ${FOCUS:-} || -n ${PROXIES:-} ]] || record=1
commit_note=''
git -C "$repo" diff --quiet HEAD -- test/conformance 2>/dev/null || commit_note=' (test/conformance/ with uncommitted changes)'
per_column=$(for c in "${columns[@]}"; do printf '%s=%s\n' "$c" "${took[$c]}"; done)
KPI_R_COMMAND=$cmd KPI_R_COMMIT=$commit KPI_R_COMMIT_NOTE=$commit_note KPI_R_PROXY_VERSION=$proxy_version \
	KPI_R_TOOK=$((SECONDS - t0)) KPI_R_PARALLEL=${PARALLEL:-0} KPI_R_FOCUS=$focus KPI_R_PROCS=$procs \
	KPI_R_E2E=$(basename "$e2e") KPI_R_GINKGO=$("$bin/ginkgo" version 2>/dev/null | awk '{print $NF}') \
	KPI_R_SKIPS="$(grep -v '^#' "$here/skip.txt" | grep .)" KPI_R_COLUMNS="${columns[*]}" KPI_R_TOOK_PER_COLUMN=$per_column KPI_R_RECORD=$record \
	python3 -c '
import json, os, sys, time
e = lambda k: os.environ["KPI_R_" + k]
json.dump({
    "command": e("COMMAND"), "commit": e("COMMIT"), "commit_note": e("COMMIT_NOTE"),
    "proxy_version": e("PROXY_VERSION"), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "took": int(e("TOOK")), "parallel": e("PARALLEL") == "1", "focus": e("FOCUS"), "procs": e("PROCS"),
    "e2e": e("E2E"), "ginkgo": e("GINKGO"), "skips": [l.split("  # ", 1) for l in e("SKIPS").splitlines()], "columns": e("COLUMNS").split(),
    "took_per_column": dict(l.split("=", 1) for l in e("TOOK_PER_COLUMN").splitlines() if l),
    "record": e("RECORD") == "1",
}, open(sys.argv[1], "w"), indent=1)
' "$out/run.json"
# The whole suite in every column is the project's record.
if ((record)); then
	python3 "$here/report.py" "$out" --doc "$repo/docs/CONFORMANCE.md"
	log "wrote docs/CONFORMANCE.md"
else
	python3 "$here/report.py" "$out"
fi
log "table: $out/results.md"
sed -n '/^## Totals/,/^## Where/p' "$out/results.md" | grep '^| [a-z]' >&2 || true
exit "$failed"
exit
}
