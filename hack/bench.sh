#!/usr/bin/env bash
# Scale benchmarks of issue 8 (`make bench`): the proxier over the fake kernel at
# 1k/10k/50k Services (full sync, one-endpoint change with kernel operations,
# steady-state heap) and the in-process informer-to-kernel churn at 10k Services.
# Writes the raw `go test -bench` output and a markdown table to _output/bench/ and
# the plot to docs/sync-scaling.png. About 6-8 minutes on 2 cores.
# Then the scale run in the real-kernel VM (test/e2e/scale_test.go, as root):
# 1,000 Services x 4 endpoints from daemon start to all programmed, and 10
# single-endpoint changes from API write to IPVS; results in _output/bench/vm.txt.
# A few minutes more when the e2e caches are warm (~15 min cold: kube-apiserver).
#   BENCH_SIZES=1000,10000   fewer Service counts (default 1000,10000,50000)
#   CHURN_SECONDS=10         churn duration per run (default 15)
#   BENCH_VM=0               leave the VM run out (it needs root, qemu, ~1 GiB)
#   BENCH_FAKE=0             leave the fake-kernel benchmarks out (only the VM run)
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

if [[ ${BENCH_FAKE:-1} == 0 ]]; then
  echo "!!! BENCH_FAKE=0: the fake-kernel benchmarks (full sync, one-endpoint change, heap, churn) were LEFT OUT" >&2
else
bench full.txt 'BenchmarkFullSync' 3x ./pkg/proxy/ipvs/
bench incremental.txt 'BenchmarkOneEndpointChange' 2000x ./pkg/proxy/ipvs/
bench heap.txt 'BenchmarkSteadyStateHeap' 1x ./pkg/proxy/ipvs/
bench churn.txt 'BenchmarkInformerToKernel' 1x ./test/scale/

cat "$out"/full.txt "$out"/incremental.txt "$out"/heap.txt "$out"/churn.txt > "$out/all.txt"
$GO run ./test/scale/cmd/benchplot -in "$out/all.txt" -table "$out/results.md" -png docs/sync-scaling.png
echo "table: $out/results.md; plot: docs/sync-scaling.png" >&2
fi

# The real kernel: our kube-proxy in the e2e VM against a real kube-apiserver.
if [[ ${BENCH_VM:-1} == 0 ]]; then
  echo "!!! BENCH_VM=0: the in-VM scale run (real kernel, 1,000 Services) was LEFT OUT;" >&2
  echo "!!! $out/vm.txt is not written (a stale one is removed)" >&2
  rm -f "$out/vm.txt"
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "!!! the in-VM scale run needs root (qemu, the e2e testbed): run as root or set BENCH_VM=0" >&2
  exit 1
fi
# Twice: with the e2e config (syncPeriod 10s) and with syncPeriod 60s, which
# keeps periodic full resyncs out of the one-endpoint changes.
vmcmd="go test -tags e2e,e2escale -count=1 -v -timeout 60m -run '^TestScaleVM\$' ./test/e2e/"
echo ">>> VM scale run: test/e2e/lib/prepare.sh && $vmcmd (then with KPI_SCALE_SYNC_PERIOD=60s) -> $out/vm.txt" >&2
accel=$(test/e2e/lib/prepare.sh)
rm -f "$out/vm.txt" "$out/vm.log" "$out/vm-60s.log"
CGO_ENABLED=0 $GO test -tags e2e,e2escale -count=1 -v -timeout 60m -run '^TestScaleVM$' ./test/e2e/ 2>&1 | tee "$out/vm.log"
KPI_SCALE_SYNC_PERIOD=60s CGO_ENABLED=0 $GO test -tags e2e,e2escale -count=1 -v -timeout 60m -run '^TestScaleVM$' ./test/e2e/ 2>&1 | tee "$out/vm-60s.log"
{
  echo "# $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), qemu $accel"
  echo "# $vmcmd (after test/e2e/lib/prepare.sh)"
  grep '^SCALE-VM:' "$out/vm.log"
  echo "# KPI_SCALE_SYNC_PERIOD=60s $vmcmd"
  grep '^SCALE-VM:' "$out/vm-60s.log"
} > "$out/vm.txt"
echo >&2
cat "$out/vm.txt"
echo "VM runs: $out/vm.txt (full logs $out/vm.log, $out/vm-60s.log)" >&2
