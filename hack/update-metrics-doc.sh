#!/usr/bin/env bash
# Rewrites the metrics reference of docs/OPERATIONS.md (the tables between its
# "BEGIN GENERATED metrics" markers) from the metrics the daemon registers: the
# registry is filled as the daemon fills it (hack/metricsdoc) and walked descriptor
# by descriptor. The operator notes are in hack/metricsdoc/notes.go.
# `go test ./hack/metricsdoc` fails while the doc and the registry differ.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
go test -count=1 -run '^TestOperationsDocMetrics$' ./hack/metricsdoc -update
echo "wrote docs/OPERATIONS.md"
