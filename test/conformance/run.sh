#!/usr/bin/env bash
# Runs upstream's e2e suite (e2e.test and ginkgo v1.37.2, test/conformance/build.sh)
# against a fresh conformance cluster (test/conformance/cluster/up.sh) per
# column, and writes a table of every test's result and time per column.
#
#   test/conformance/run.sh
#   FOCUS='Services should serve a basic endpoint' test/conformance/run.sh
#   test/conformance/run.sh report [OUT]   # the page again from OUT's column folders
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
#   FAMILIES  ipv4 (default) or dual: dual-stack clusters (KPI_CONF_FAMILIES of
#             cluster/up.sh); the default focus is then upstream's
#             [Feature:IPv6DualStack] specs and the record docs/CONFORMANCE-DUALSTACK.md
#   KPI_CONF_OUT  results folder (default _output/conformance)
#   KPI_CONF_BUILD  what build.sh builds: all (default), or ci (test/conformance/ci.sh:
#             e2e-network.test and images-ci; KPI_CONF_E2E and KPI_CONF_IMAGES_DIR
#             name them)
#   KPI_CONF_E2E  the suite binary in build.sh's bin/ (default e2e.test)
# Skipped: test/conformance/skip.txt (each line a regular expression and its
# reason); a skip list that would skip a [Conformance] test of the focus fails
# the run before any cluster starts. Run alone, after the others and with one
# ginkgo process: test/conformance/alone.txt (the same form; passes.sh).
#
# Writes OUT/COLUMN/{e2e.log,junit_01.xml,results.tsv,run.json,cluster/}
# (cluster/: every component's log, the nodes' consoles, the kube-system pods'
# logs, each node's kube-proxy metrics at the end (metrics-NODE.txt),
# timings; run.json: the column's command, commit, date, focus, skip
# list) and OUT/results.md (report.py: totals, differences, failures, skips
# with their reasons, one row per spec) from every column folder in OUT, this
# run's and earlier ones'. Without FOCUS each column with a report is kept as
# docs/conformance/FAMILIES/COLUMN.json (commit it), and once the three are
# there (from one run or several) docs/CONFORMANCE.md is written from them. Exit 0 when no test
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
	python3 "$here/report.py" "$out"
	log "wrote $out/results.md"
	for families in ipv4 dual; do
		[[ $families == ipv4 ]] && doc=docs/CONFORMANCE.md || doc=docs/CONFORMANCE-DUALSTACK.md
		[[ -d $repo/docs/conformance/$families ]] || continue
		python3 "$here/report.py" "$repo/docs/conformance/$families" --doc "$repo/$doc"
	done
	exit 0
fi

families=${FAMILIES:-ipv4}
case $families in
ipv4)
	focus=${FOCUS:-'\[sig-network\] (Services|Networking)'}
	doc=docs/CONFORMANCE.md
	;;
dual)
	focus=${FOCUS:-'\[Feature:IPv6DualStack\]'}
	doc=docs/CONFORMANCE-DUALSTACK.md
	;;
*) die "FAMILIES=$families: want ipv4 or dual" ;;
esac
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

# The specs run alone (alone.txt) and those run on three nodes (three-nodes.txt),
# the same form: the exact names of those in the focus (and not skipped), as one
# regular expression each for passes.sh.
patterns_of() { # FILE -> its patterns joined with |
	local line out=()
	while IFS= read -r line; do
		[[ -z $line || $line == \#* ]] && continue
		[[ $line == *'  # '* ]] || die "$(basename "$1"): no reason on: $line"
		out+=("${line%  # *}")
	done <"$1"
	(IFS='|'; echo "${out[*]}")
}
focus_names() { # REGEX [SKIP] -> the exact-name regex of the focus's specs matching REGEX
	local d
	d=$(mktemp -d)
	"$e2e" --ginkgo.dry-run --ginkgo.no-color --ginkgo.focus="$focus" ${2:+--ginkgo.skip="$2"} \
		--provider=skeleton --report-dir="$d" >/dev/null 2>&1
	python3 "$here/report.py" --names "$d/junit_01.xml" "$1"
	rm -rf "$d"
}
# The two-node cluster skips the three-node specs (a spec of both lists runs on
# three nodes, alone there: that cluster runs one ginkgo process); it is not
# started when the focus holds nothing else.
three='' alone='' main=1
three_rx=$(patterns_of "$here/three-nodes.txt")
[[ -z $three_rx ]] || three=$(focus_names "$three_rx" "$skip")
main_skip=$skip
[[ -z $three ]] || main_skip=${skip:+$skip|}$three
alone_rx=$(patterns_of "$here/alone.txt")
[[ -z $alone_rx ]] || alone=$(focus_names "$alone_rx" "$main_skip")
[[ -z $three ]] || main=$(focus_names '.' "$main_skip")

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
[[ -z $alone ]] || log "run alone after the others (alone.txt): $(tr '|' '\n' <<<"$alone" | grep -c .) specs"
[[ -z $three ]] || log "run on a second cluster of three nodes (three-nodes.txt): $(tr '|' '\n' <<<"$three" | grep -c .) specs"
[[ -n $main ]] || log "no spec of the focus runs on two nodes: the two-node cluster is not started"

# One image of ours for every column: HEAD's when the run starts.
IFS=$'\t' read -r proxy_archive proxy_version < <("$here/cluster/proxy-image.sh")
commit=$(git -C "$repo" rev-parse --short HEAD)
mkdir -p "$out"
failed=0
cmd="make conformance${FOCUS:+ FOCUS='$FOCUS'}${PROXIES:+ PROXIES=$PROXIES}${PARALLEL:+ PARALLEL=$PARALLEL}${FAMILIES:+ FAMILIES=$FAMILIES}"
for col in "${columns[@]}"; do
	case $col in
	ours-iptables | ours-nftables | upstream-ipvs) ;;
	*) die "unknown column $col (ours-iptables, ours-nftables, upstream-ipvs)" ;;
	esac
done

# write_meta COLUMN SECONDS STARTED: OUT/COLUMN/run.json, what report.py says
# of the column (a column's folder may outlive the run: the page shows each
# column's own commit, date and command).
commit_note=''
git -C "$repo" diff --quiet HEAD -- test/conformance 2>/dev/null || commit_note=' (test/conformance/ with uncommitted changes)'
ginkgo_version=$("$bin/ginkgo" version 2>/dev/null | awk '{print $NF}')
write_meta() {
	KPI_R_COLUMN=$1 KPI_R_TOOK=$2 KPI_R_STARTED=$3 KPI_R_COMMAND=$cmd KPI_R_COMMIT=$commit KPI_R_COMMIT_NOTE=$commit_note \
		KPI_R_PROXY_VERSION=$proxy_version KPI_R_PARALLEL=${PARALLEL:-0} KPI_R_FOCUS=$focus KPI_R_PROCS=$procs \
		KPI_R_E2E=$(basename "$e2e") KPI_R_GINKGO=$ginkgo_version KPI_R_FAMILIES=$families \
		KPI_R_RECORD=$([[ -z ${FOCUS:-} ]] && echo 1 || echo 0) KPI_R_SKIPS="$(grep -v '^#' "$here/skip.txt" | grep .)" \
		KPI_R_ALONE="$(grep -v '^#' "$here/alone.txt" | grep . || true)" \
		KPI_R_THREE="$(grep -v '^#' "$here/three-nodes.txt" | grep . || true)" KPI_R_TWO=$([[ -n $main ]] && echo 1 || echo 0) \
		python3 -c '
import json, os, sys
e = lambda k: os.environ["KPI_R_" + k]
json.dump({
    "column": e("COLUMN"), "command": e("COMMAND"), "commit": e("COMMIT"), "commit_note": e("COMMIT_NOTE"),
    "proxy_version": e("PROXY_VERSION"), "started": e("STARTED"), "took": int(e("TOOK")),
    "parallel": e("PARALLEL") == "1", "focus": e("FOCUS"), "procs": e("PROCS"), "e2e": e("E2E"),
    "ginkgo": e("GINKGO"), "families": e("FAMILIES"), "record": e("RECORD") == "1",
    "skips": [l.split("  # ", 1) for l in e("SKIPS").splitlines()],
    "alone": [l.split("  # ", 1) for l in e("ALONE").splitlines()],
    "three_nodes": [l.split("  # ", 1) for l in e("THREE").splitlines()],
    "two_nodes": e("TWO") == "1",
}, open(sys.argv[1], "w"), indent=1)
' "$out/$1/run.json"
}

# cluster NODES REPORTS PROCS FOCUS SKIP ALONE: a fresh cluster of NODES nodes
# with column $col's kube-proxy and the suite against it (passes.sh: the specs of
# ALONE after the others, with one process), reports and logs under REPORTS.
cluster() {
	local nodes=$1 reports=$2
	shift 2
	mkdir -p "$reports"
	KPI_CONF_NODES=$nodes KPI_CONF_FAMILIES=$families KPI_CONF_PROXY=$col KPI_CONF_BUILD_DIR=$build \
		KPI_CONF_PROXY_ARCHIVE=$proxy_archive KPI_CONF_LOGS_DIR=$reports/cluster \
		"$here/cluster/up.sh" "$here/passes.sh" "$bin/ginkgo" "$e2e" "$@" "$reports" \
		--provider=skeleton --num-nodes="$nodes" --kubectl-path="$bin/kubectl" --disable-log-dump \
		>"$reports/e2e.log" 2>&1
}

# run_column COLUMN: the suite on a fresh two-node cluster with that kube-proxy
# (KPI_CONF_NODES nodes), then the specs of three-nodes.txt on a fresh cluster of
# three; writes OUT/COLUMN/{e2e.log,junit_01.xml,alone/junit_01.xml,
# three/{e2e.log,junit_01.xml,cluster/},results.tsv,run.json,cluster/}.
run_column() {
	local col=$1 d=$out/$1 start started rc=0 rc3=0
	rm -rf "$d"
	mkdir -p "$d"
	start=$SECONDS started=$(date -u +%FT%TZ)
	set +e
	if [[ -n $main ]]; then
		log "$col: a fresh cluster, then $(basename "$e2e") ($procs processes); log in $d/e2e.log"
		cluster "${KPI_CONF_NODES:-2}" "$d" "$procs" "$focus" "$main_skip" "$alone"
		rc=$?
		log "$col: exit $rc after $((SECONDS - start)) s"
	fi
	if [[ -n $three ]]; then
		log "$col: a fresh cluster of three nodes for three-nodes.txt's specs; log in $d/three/e2e.log"
		cluster 3 "$d/three" 1 "$three" "$skip" ""
		rc3=$?
		log "$col: three nodes: exit $rc3 after $((SECONDS - start)) s"
	fi
	set -e
	write_meta "$col" "$((SECONDS - start))" "$started"
	local first=$d
	[[ -n $main ]] || first=$d/three
	[[ -f $first/junit_01.xml ]] || { log "$col: no junit report (tail of $first/e2e.log below)"; tail -30 "$first/e2e.log" >&2; return 1; }
	[[ -z $three || -f $d/three/junit_01.xml ]] || { log "$col: no junit report of the three nodes (tail of $d/three/e2e.log below)"; tail -30 "$d/three/e2e.log" >&2; return 1; }
	# One line per spec of the focus: NAME<TAB>pass|fail|skip<TAB>SECONDS (ci.sh reads it).
	python3 "$here/report.py" --tsv "$d" >"$d/results.tsv"
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
# The page: report.py renders every column folder of OUT, this run's and any
# left by earlier runs (each says its own commit, date and command).
python3 "$here/report.py" "$out"
# The whole focus is the record: each column that has a report is kept in the
# repository (docs/conformance/FAMILIES/COLUMN.json, committed), where the
# columns of several runs, on several machines, add up to the record page.
if [[ -z ${FOCUS:-} ]]; then
	for col in "${columns[@]}"; do
		[[ -f $out/$col/junit_01.xml ]] || continue
		python3 "$here/report.py" --export "$out/$col" "$repo/docs/conformance/$families/$col.json"
		log "kept $col as docs/conformance/$families/$col.json"
	done
	python3 "$here/report.py" "$repo/docs/conformance/$families" --doc "$repo/$doc"
fi
log "table: $out/results.md"
sed -n '/^## Totals/,/^## Where/p' "$out/results.md" | grep '^| [a-z]' >&2 || true
exit "$failed"
exit
}
