#!/usr/bin/env bash
# Runs upstream's e2e suite (e2e.test and ginkgo v1.37.2, test/conformance/build.sh)
# against a fresh conformance cluster (test/conformance/cluster/up.sh) per
# column, and writes a table of every test's result and time per column.
#
#   test/conformance/run.sh
#   FOCUS='Services should serve a basic endpoint' test/conformance/run.sh
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
# Writes OUT/COLUMN/{e2e.log,junit_01.xml,results.tsv,cluster/} (cluster/: every
# component's log, the nodes' consoles, the kube-system pods' logs, timings)
# and OUT/results.md (the command, commit, date and one row per spec); with
# neither FOCUS nor PROXIES set, docs/CONFORMANCE.md too. Exit 0 when no test
# failed in any column.
set -euo pipefail
# The whole script is one compound command: bash reads it all before running
# it, so editing the file while it runs cannot change what runs.
{
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
log() { echo "[conformance] $*" >&2; }
die() { log "FAIL: $*"; exit 1; }

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

{
	echo "Upstream's e2e suite ($(basename "$e2e") v1.37.2, ginkgo $("$bin/ginkgo" version 2>/dev/null | awk '{print $NF}'), $procs processes) on the conformance cluster"
	echo "(test/conformance/cluster/README.md), a fresh cluster per column."
	echo
	echo "- command: \`$cmd\`"
	echo "- commit: $commit when the run started$(git -C "$repo" diff --quiet HEAD -- test/conformance 2>/dev/null || echo ' (test/conformance/ with uncommitted changes)'); our image kube-proxy-ipvs $proxy_version, built from a clean worktree of it (test/conformance/cluster/proxy-image.sh)"
	echo "- date: $(date -u +%FT%TZ), took $((SECONDS - t0)) s$([[ ${PARALLEL:-0} == 1 ]] && echo ', the columns at the same time')"
	echo "- focus: \`$focus\`; skipped: test/conformance/skip.txt (${#skips[@]} patterns, each with its reason)"
	echo "- per column: $(for c in "${columns[@]}"; do printf '%s %s s; ' "$c" "${took[$c]:-?}"; done)"
	echo
	python3 - "$out" "$focus" "${columns[@]}" <<'EOF'
import os, re, sys
out, focus, cols = sys.argv[1], sys.argv[2], sys.argv[3:]
rx = re.compile(focus)
rows, tot = {}, {c: {"pass": 0, "fail": 0, "skip": 0} for c in cols}
for c in cols:
    p = os.path.join(out, c, "results.tsv")
    if not os.path.exists(p):
        continue
    for line in open(p):
        name, st, t = line.rstrip("\n").split("\t")
        if not rx.search(name):
            continue
        rows.setdefault(name, {})[c] = (st, t)
        tot[c][st] += 1
print("| test | " + " | ".join(cols) + " |")
print("| --- |" + " --- |" * len(cols))
for name in sorted(rows):
    cells = []
    for c in cols:
        st, t = rows[name].get(c, ("-", ""))
        cells.append("%s %ss" % (st, t) if st != "skip" else "skip")
    print("| %s | %s |" % (name.replace("|", "\\|"), " | ".join(cells)))
print("| **total** | " + " | ".join("%d pass, %d fail, %d skip" % (tot[c]["pass"], tot[c]["fail"], tot[c]["skip"]) for c in cols) + " |")
EOF
} >"$out/results.md"
# The whole suite in every column is the project's record.
if [[ -z ${FOCUS:-} && -z ${PROXIES:-} ]]; then
	{
		echo "# Conformance: upstream's [sig-network] e2e suite"
		echo
		echo "Written by \`make conformance\` (test/conformance/run.sh); do not edit."
		echo
		cat "$out/results.md"
	} >"$repo/docs/CONFORMANCE.md"
	log "wrote docs/CONFORMANCE.md"
fi
log "table: $out/results.md"
tail -1 "$out/results.md" >&2
exit "$failed"
exit
}
