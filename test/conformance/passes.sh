#!/usr/bin/env bash
# The suite's run on one cluster, as test/conformance/run.sh gives it to
# cluster/up.sh: every spec of the focus but those of test/conformance/alone.txt
# with PROCS ginkgo processes, then those alone with one.
#
#   passes.sh GINKGO E2E PROCS FOCUS SKIP ALONE REPORT_DIR [E2E_ARG...]
#
# ALONE is a regular expression of the exact names of the specs to run alone
# ("" for none); their report goes to REPORT_DIR/alone (report.py merges the
# two). The exit code is the first pass's, or the second's when the first
# passed.
set -uo pipefail
ginkgo=$1 e2e=$2 procs=$3 focus=$4 skip=$5 alone=$6 reports=$7
shift 7
first_skip=$skip
[[ -n $alone ]] && first_skip=${skip:+$skip|}$alone
"$ginkgo" --procs="$procs" --no-color --timeout=4h --focus="$focus" ${first_skip:+--skip="$first_skip"} \
	"$e2e" -- "$@" --report-dir="$reports"
rc=$?
[[ -z $alone ]] && exit "$rc"
echo "[conformance] the specs of alone.txt, one ginkgo process" >&2
mkdir -p "$reports/alone"
"$ginkgo" --procs=1 --no-color --timeout=2h --focus="$alone" ${skip:+--skip="$skip"} \
	"$e2e" -- "$@" --report-dir="$reports/alone"
rc2=$?
((rc != 0)) && exit "$rc"
exit "$rc2"
