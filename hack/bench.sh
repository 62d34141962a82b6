#!/usr/bin/env bash
# Scale benchmarks of issue 8 (`make bench`): the proxier over the fake kernel at
# 1k/10k/50k Services (full sync, one-endpoint change with kernel operations,
# steady-state heap) and the in-process informer-to-kernel churn at 10k Services.
# Writes the raw `go test -bench` output and a markdown table to _output/bench/ and
# the plot to docs/sync-scaling.png. About 6-8 minutes on 2 cores.
# Then the scale run in the real-kernel VM (test/e2e/scale_test.go, as root):
# 1,000 Services x 4 endpoints, upstream kube-proxy v1.37.2 (ipvs mode) and ours
# one after the other on the same objects: start to all programmed (IPVS, each
# ipset, iptables), periodic full resync, 20 single-endpoint changes from API
# write to IPVS, RSS, printed side by side with ratios; then the IPVS bulk-read
# benchmark; results in _output/bench/vm.txt. 20-40 min under TCG when the e2e
# caches are warm (~30 min more cold: kube-apiserver and upstream kube-proxy).
#   BENCH_SIZES=1000,10000   fewer Service counts (default 1000,10000,50000)
#   CHURN_SECONDS=10         churn duration per run (default 15)
#   BENCH_VM=0               leave the VM run out (it needs root, qemu, ~2 GiB)
#   BENCH_VM_SERVICES=N      Services of the VM comparison (default 1000)
#   BENCH_VM_SIZES="100 300 1000"  compare at each of these sizes (default
#                            BENCH_VM_SERVICES); with the 10k run they make the plot
#                            docs/vm-scaling.png and the table _output/bench/vm-table.md
#   BENCH_VM_10K=1           also compare at 10,000 Services x 10 (VM of 4 GiB):
#                            upstream is then stopped at KPI_SCALE_PROGRAM_TIMEOUT
#                            (default 15m) and reported as "not after" it
#   BENCH_FAKE=0             leave the fake-kernel benchmarks out (only the VM run)
#   BENCH_VM_NFT=0           leave out the run of ours with --ipvs-rules-backend=nftables
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
  echo "!!! BENCH_VM=0: the in-VM scale runs (real kernel, upstream vs ours) were LEFT OUT;" >&2
  echo "!!! $out/vm.txt is not written (a stale one is removed)" >&2
  rm -f "$out/vm.txt"
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "!!! the in-VM scale run needs root (qemu, the e2e testbed): run as root or set BENCH_VM=0" >&2
  exit 1
fi
# Side by side (issue 15): upstream kube-proxy v1.37.2 in ipvs mode and ours on the
# same objects in the same VM, syncPeriod 30s (upstream's default), 20 changes.
# BENCH_VM_SIZES / BENCH_VM_SERVICES (default 1000) set the sizes; BENCH_VM_10K=1
# adds a run at 10,000 Services x 10 endpoints (KPI_VM_MEM 4096; BENCH_VM_10K_PROXIES,
# default ours,upstream: upstream would take hours there under TCG, so it is
# measured as far as it gets in KPI_SCALE_PROGRAM_TIMEOUT).
vmrun() { # log services mem endpoints proxies [rules-backend]
  mkdir -p "$out/logs-$2${6:+-$6}"
  echo ">>> VM comparison at $2 Services x $4 endpoints ($5${6:+, ours with the $6 rules backend}) -> $out/$1" >&2
  KPI_SCALE_LOG_DIR=$PWD/$out/logs-$2${6:+-$6} KPI_SCALE_RULES_BACKEND=${6:-} KPI_VM_MEM=$3 KPI_SCALE_SERVICES=$2 KPI_SCALE_ENDPOINTS=$4 KPI_SCALE_PROXIES=$5 KPI_SCALE_CHANGES=20 KPI_SCALE_SYNC_PERIOD=30s \
    CGO_ENABLED=0 $GO test -tags e2e,e2escale -count=1 -v -timeout 180m -run '^TestScaleVM$' ./test/e2e/ 2>&1 | tee "$out/$1"
}
vmcmd="KPI_VM_MEM=2048 KPI_SCALE_SERVICES=N KPI_SCALE_PROXIES=ours,upstream KPI_SCALE_CHANGES=20 KPI_SCALE_SYNC_PERIOD=30s go test -tags e2e,e2escale -count=1 -v -timeout 180m -run '^TestScaleVM\$' ./test/e2e/"
echo ">>> VM scale runs: test/e2e/lib/prepare.sh && $vmcmd -> $out/vm.txt" >&2
accel=$(test/e2e/lib/prepare.sh)
test/e2e/lib/build-tools.sh >/dev/null # upstream kube-proxy
# The harness runs bin/kube-proxy as it finds it: build it from this tree.
CGO_ENABLED=0 $GO build -o bin/kube-proxy ./cmd/kube-proxy
rm -f "$out/vm.txt" "$out"/vm-*.log
logs=()
sweep=()
for n in ${BENCH_VM_SIZES:-${BENCH_VM_SERVICES:-1000}}; do
  vmrun "vm-$n.log" "$n" "${KPI_VM_MEM:-2048}" 4 ours,upstream
  logs+=("$out/vm-$n.log")
  sweep+=("$out/vm-$n.log")
done
n=${BENCH_VM_SERVICES:-1000}
# Ours with the nftables rules backend (issue 16) on the same workload.
if [[ ${BENCH_VM_NFT:-1} == 1 ]]; then
  vmrun "vm-$n-nftables.log" "$n" "${KPI_VM_MEM:-2048}" 4 ours nftables
  logs+=("$out/vm-$n-nftables.log")
fi
if [[ ${BENCH_VM_10K:-0} == 1 ]]; then
  vmrun vm-10000.log 10000 "${KPI_VM_MEM_10K:-4096}" 10 "${BENCH_VM_10K_PROXIES:-ours,upstream}"
  logs+=("$out/vm-10000.log")
  sweep+=("$out/vm-10000.log")
  if [[ ${BENCH_VM_NFT:-1} == 1 ]]; then
    vmrun vm-10000-nftables.log 10000 "${KPI_VM_MEM_10K:-4096}" 10 ours nftables
    logs+=("$out/vm-10000-nftables.log")
  fi
fi
# The kernel layer: IPVS read in bulk (GetAll) against one destination dump per
# virtual server, 10,000 x 4, in the VM.
echo ">>> VM kernel benchmark: BenchmarkVMGetAll -> $out/vm-getall.txt" >&2
CGO_ENABLED=0 $GO test -c -tags vmtest -o "$out/ipvs-vm.test" ./pkg/util/ipvs
test/e2e/vm/run-in-vm.sh "$PWD/$out/ipvs-vm.test" -test.run '^$' -test.bench BenchmarkVMGetAll -test.benchtime 1x | tee "$out/vm-getall.txt"
{
  echo "# $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), qemu $accel"
  echo "# $vmcmd (after test/e2e/lib/prepare.sh)"
  for l in "${logs[@]}"; do
    echo "# $l"
    grep -E '^SCALE-(VM|CMP):' "$l"
  done
  grep -E '^BenchmarkVMGetAll' "$out/vm-getall.txt"
} > "$out/vm.txt"
# Start-up and change latency against Service count, upstream and ours.
$GO run ./test/scale/cmd/benchplot -vm -table "$out/vm-table.md" -png docs/vm-scaling.png "${sweep[@]}"
cat "$out/vm-table.md" >> "$out/vm.txt"
echo >&2
cat "$out/vm.txt"
echo "VM runs: $out/vm.txt (full logs ${logs[*]})" >&2
