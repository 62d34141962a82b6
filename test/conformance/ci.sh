#!/usr/bin/env bash
# make test's conformance step (`make conformance-ci`): the specs of upstream's
# e2e suite named in test/conformance/ci.txt, run by test/conformance/run.sh
# against ours on a fresh two-node conformance cluster (one column,
# ours-iptables by default), with e2e-network.test (upstream's suite with only
# its network specs, `build.sh ci`) and the three images those specs use.
#
# It passes only when every spec of ci.txt ran and passed. Anything else fails
# it with a message saying what: a list line without a reason, or matching no
# spec or more than one, a spec skip.txt or the suite itself skips, a failed
# spec, a cluster that did not come up, a build that failed, not being root.
# It never skips silently.
#
#   test/conformance/ci.sh            build (cached), then run and check
#   test/conformance/ci.sh prebuild   start `ci.sh prepare` in the background at
#                                     nice 19 and return: `make test` does this
#                                     first, so the cold build uses the CPU the
#                                     other layers leave idle; the run waits for
#                                     it and redoes in the foreground whatever it
#                                     did not finish. Log: OUT/prebuild.log
#   test/conformance/ci.sh prepare    everything the run needs before its
#                                     cluster, all cached: build.sh ci, the node
#                                     disk, our image of HEAD (proxy-image.sh)
#                                     and the disk preloaded with the images and
#                                     ours (build-node.sh --preload: one boot of
#                                     a node VM per new commit)
#
# Environment:
#   KPI_CONF_CI_PROXIES  columns (default ours-iptables; ours-nftables, or both)
#   KPI_CONF_OUT         results folder (default _output/conformance-ci)
#   PROCS                ginkgo processes (default: one per spec of ci.txt)
set -euo pipefail
# The whole script is one compound command: editing the file while it runs
# cannot change what runs.
{
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
t0=$SECONDS
log() { echo "[conformance-ci] $*" >&2; }
die() {
	log "FAIL: $*"
	log "FAIL: the conformance step of make test did not pass (it never skips; see above)"
	exit 1
}

proxies=${KPI_CONF_CI_PROXIES:-ours-iptables}
out=${KPI_CONF_OUT:-$repo/_output/conformance-ci}
[[ $(id -u) -eq 0 ]] || die "needs root: the cluster's network namespace, taps and VMs (test/conformance/cluster/up.sh)"

prebuilding() { # the background build of `ci.sh prebuild` still runs
	local pid
	pid=$(cat "$out/prebuild.pid" 2>/dev/null) || return 1
	[[ -n $pid ]] && { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -q ' prebuild '
}
if [[ ${1:-} == prebuild ]]; then
	mkdir -p "$out"
	if prebuilding; then
		log "prebuild: already running (pid $(cat "$out/prebuild.pid"))"
		exit 0
	fi
	# Its own session: make's exit leaves it alone; it ends when built.
	setsid nice -n 19 "$here/ci.sh" prepare prebuild </dev/null >"$out/prebuild.log" 2>&1 &
	echo $! >"$out/prebuild.pid"
	log "prebuild: ci.sh prepare in the background (pid $!, nice 19), log $out/prebuild.log"
	exit 0
fi
if [[ ${1:-} == prepare ]]; then
	step() { # WHAT CMD...: runs CMD, says how long it took
		local what=$1 s=$SECONDS
		shift
		"$@" >"$out/prepare.out" || die "prepare: $what failed"
		log "prepare: $what done in $((SECONDS - s)) s ($(date -u +%T))"
	}
	mkdir -p "$out"
	step "build.sh ci" "$here/build.sh" ci
	build=$(cat "$out/prepare.out")
	step "node disk" "$here/cluster/build-node.sh"
	step "our image" "$here/cluster/proxy-image.sh"
	IFS=$'\t' read -r archive version <"$out/prepare.out"
	step "preloaded disk" "$here/cluster/build-node.sh" --preload "$build/images-ci" \
		"$archive=kpi.local/kube-proxy-ipvs:$version"
	rm -f "$out/prepare.out"
	exit 0
fi
[[ $# -eq 0 ]] || die "usage: $0 [prebuild|prepare]"

# "REGEX  # REASON" per line, in ci.txt and skip.txt alike.
read_list() { # FILE ARRAY: ARRAY gets the regular expressions
	local line re reason
	local -n list=$2
	list=()
	while IFS= read -r line; do
		[[ -z $line || $line == \#* ]] && continue
		[[ $line == *'  # '* ]] || die "$1: no reason on: $line"
		re=${line%%  # *}
		reason=${line#*  # }
		[[ -n $re && -n ${reason// /} ]] || die "$1: empty pattern or reason on: $line"
		list+=("$re")
	done <"$1"
}
read_list "$here/ci.txt" specs
[[ ${#specs[@]} -gt 0 ]] || die "ci.txt names no spec"
read_list "$here/skip.txt" skips
focus=$(IFS='|'; echo "${specs[*]}")
skip=$(IFS='|'; echo "${skips[*]}")

if [[ -f $out/prebuild.pid ]]; then
	if prebuilding; then
		log "waiting for the background build (pid $(cat "$out/prebuild.pid"), log $out/prebuild.log)"
		while prebuilding; do sleep 5; done
	fi
	sed 's/^/[prebuild] /' "$out/prebuild.log" >&2 || true
	rm -f "$out/prebuild.pid"
fi
log "building what it needs (test/conformance/build.sh ci; cached)"
build=$("$here/build.sh" ci) || die "test/conformance/build.sh ci failed"
e2e=$build/bin/e2e-network.test
images=$build/images-ci
[[ -x $e2e && -f $images/index.tsv ]] || die "build.sh ci left no $e2e or $images/index.tsv"

# Every line names exactly one spec of the suite, and skip.txt skips none.
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
"$e2e" --ginkgo.dry-run --ginkgo.v --ginkgo.no-color --provider=skeleton --report-dir="$d" \
	--ginkgo.focus="$focus" ${skip:+--ginkgo.skip="$skip"} >"$d/dry.log" 2>&1 ||
	{ tail -20 "$d/dry.log" >&2; die "the dry run of $e2e failed"; }
python3 - "$d/dry.log" "${specs[@]}" <<'EOF' || die "ci.txt does not name ${#specs[@]} distinct specs that run (above)"
import re, sys
names = sorted({l.rstrip("\n") for l in open(sys.argv[1]) if l.startswith("[sig-")})
bad = 0
for rx in sys.argv[2:]:
    hits = [n for n in names if re.search(rx, n)]
    if len(hits) != 1:
        print("[conformance-ci] %d specs would run for %s%s" % (len(hits), rx, "".join("\n    " + h for h in hits)), file=sys.stderr)
        bad = 1
if len(names) != len(sys.argv) - 2:
    print("[conformance-ci] %d specs would run, ci.txt has %d lines" % (len(names), len(sys.argv) - 2), file=sys.stderr)
    bad = 1
sys.exit(bad)
EOF
log "${#specs[@]} specs of ci.txt, column(s) $proxies, results in $out"

set +e
PROCS=${PROCS:-${#specs[@]}} FOCUS=$focus PROXIES=$proxies KPI_CONF_OUT=$out KPI_CONF_BUILD=ci KPI_CONF_E2E=e2e-network.test \
	KPI_CONF_IMAGES_DIR=$images "$here/run.sh"
rc=$?
set -e

# run.sh's exit code says a spec failed; that each one ran and passed is
# checked here, column by column.
IFS=, read -r -a columns <<<"$proxies"
bad=0
for col in "${columns[@]}"; do
	tsv=$out/$col/results.tsv
	if [[ ! -s $tsv ]]; then
		log "$col: no results ($out/$col/e2e.log, $out/$col/cluster/)"
		bad=1
		continue
	fi
	python3 - "$tsv" "$col" "${specs[@]}" <<'EOF' || bad=1
import re, sys
tsv, col, rxs = sys.argv[1], sys.argv[2], sys.argv[3:]
rows = [l.rstrip("\n").split("\t") for l in open(tsv) if l.strip()]
bad = 0
for rx in rxs:
    hits = [r for r in rows if re.search(rx, r[0])]
    st = hits[0][1] if len(hits) == 1 else "missing" if not hits else "ambiguous"
    t = hits[0][2] + " s" if len(hits) == 1 else ""
    print("[conformance-ci] %s: %-4s %5s  %s" % (col, st, t, rx.replace("\\", "")), file=sys.stderr)
    bad |= st != "pass"
sys.exit(bad)
EOF
done
took=$((SECONDS - t0))
if [[ $rc -ne 0 || $bad -ne 0 ]]; then
	die "not every spec of ci.txt ran and passed (run.sh exit $rc) after $took s; logs: $out/COLUMN/e2e.log and cluster/"
fi
log "PASS: ${#specs[@]} specs in $proxies, $took s (table: $out/results.md)"
exit 0
}
