#!/usr/bin/env bash
# Scale benchmarks of issue 8 (`make bench`): the proxier over the fake kernel at
# 1k/10k/50k Services (full sync, one-endpoint change with kernel operations,
# steady-state heap) and the in-process informer-to-kernel churn at 10k Services.
# Writes the raw `go test -bench` output and a markdown table to _output/bench/ and
# the plot to docs/sync-scaling.png. About 6-8 minutes on 2 cores.
#   BENCH_SIZES=1000,10000   fewer Service counts (default 1000,10000,50000)
#   CHURN_SECONDS=10         churn duration per run (default 15)
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
out=_output/bench
mkdir -p "$out"
export BENCH_SIZES=${BENCH_SIZES:-1000,10000,50000}

bench() { # file pattern benchtime package
  echo ">>> $2 ($3) -> $out/$1" >&2
  $GO test -count=1 -timeout 30m -run '^$' -bench "$2" -benchmem -benchtime "$3" "$4" | tee "$out/$1"
}

bench full.txt 'BenchmarkFullSync' 3x ./pkg/proxy/ipvs/
bench incremental.txt 'BenchmarkOneEndpointChange' 2000x ./pkg/proxy/ipvs/
bench heap.txt 'BenchmarkSteadyStateHeap' 1x ./pkg/proxy/ipvs/
bench churn.txt 'BenchmarkInformerToKernel' 1x ./test/scale/

cat "$out"/full.txt "$out"/incremental.txt "$out"/heap.txt "$out"/churn.txt > "$out/all.txt"
$GO run ./test/scale/cmd/benchplot -in "$out/all.txt" -table "$out/results.md" -png docs/sync-scaling.png
echo "table: $out/results.md; plot: docs/sync-scaling.png" >&2
