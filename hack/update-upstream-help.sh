#!/usr/bin/env bash
# Captures `kube-proxy --help` of upstream kube-proxy (the version the e2e tools
# module builds, v1.37.2) into cmd/kube-proxy/app/testdata, where
# TestFlagDefaultsMatchUpstreamHelp compares every flag default of ours with it.
# The binary comes from test/e2e/lib/build-tools.sh (cached; a cold build takes
# 10-25 min on 2 cores).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tools=$("$root/test/e2e/lib/build-tools.sh")
ver=$(awk '($1=="k8s.io/kubernetes" && $2 ~ /^v/) {print $2; exit} ($1=="require" && $2=="k8s.io/kubernetes") {print $3; exit}' "$root/test/e2e/tools/go.mod")
out="$root/cmd/kube-proxy/app/testdata/upstream-kube-proxy-$ver-help.txt"
mkdir -p "$(dirname "$out")"
# COLUMNS and a pipe keep cobra from wrapping to a terminal's width.
COLUMNS=0 "$tools/kube-proxy" --help 2>&1 | cat >"$out"
echo "wrote $out ($(grep -c -- '--' "$out") lines with flags)"
