#!/usr/bin/env bash
# Scale benchmarks (`make bench`; issues 8, 15 and 31). Never part of `make test`.
#
# First the proxier over the fake kernel at 1k/10k/50k Services (full sync,
# one-endpoint change with kernel operations, steady-state heap) and the
# in-process informer-to-kernel churn at 10k Services: the raw `go test -bench`
# output and a markdown table in _output/bench/, the plot docs/sync-scaling.png.
# About 6-8 minutes on 2 cores.
#
# Then the comparison in the real-kernel VM (test/e2e/scale_test.go, as root), one
# run per Service count, each on the same objects in the same VM, one daemon after
# the other: upstream kube-proxy v1.37.2 --proxy-mode=ipvs, the same binary
# --proxy-mode=nftables, ours with the iptables rules backend and ours with the
# nftables rules backend; then the kernel's own tools writing the same content
# (ipvsadm -R, ip -batch, ipset restore, nft -f). For each daemon, read from the
# kernel: start to everything programmed, its user and system CPU time by then
# (/proc/PID/stat, with its child processes), the start-up and a later full sync,
# 20 one-endpoint changes from API write to the kernel (p50/p99/max), RSS. Each
# run prints a SCALE-CMP table and SCALE-RATIO lines (ours / upstream, ours / the
# tools, the kernel's share of our start-up) and writes _output/bench/vm-N.json;
# hack/bench-report.py makes the table _output/bench/vm-table.md and the plot
# docs/bench-vm.svg from them (copied to docs/bench/vm-N.json). Under TCG on a
# loaded 2-core host (2026-12-06): 21 min at 1,000 Services, 55 min at 10,000
# (upstream's ipvs mode runs to the bound at both).
#
#   BENCH_SIZES=1000,10000     Service counts of the VM runs (default 1000,10000)
#                              and of the fake-kernel benchmarks (default
#                              1000,10000,50000); above 60000 the test apiserver's
#                              Service range is widened to 10.96.0.0/12
#                              (KPI_E2E_SERVICE_CIDR)
#   BENCH_PROXIES=...          columns, in this order (default
#                              upstream,upstream-nftables,ours,ours-nftables)
#   BENCH_ENDPOINTS=4          endpoints per Service (default 4)
#   BENCH_BOUND=15m            start-up bound: upstream is reported "not after" it,
#                              ours fails past it (KPI_SCALE_PROGRAM_TIMEOUT)
#   BENCH_FLOOR=0              leave the kernel tools' floor out
#   KPI_VM_MEM=MiB             VM memory (default 2048 up to 2,000 Services,
#                              4096 up to 20,000, 8192 above)
#   CHURN_SECONDS=10           churn duration of the fake-kernel run (default 15)
#   BENCH_VM=0                 leave the VM runs out (they need root, qemu, 2-8 GiB)
#   BENCH_FAKE=0               leave the fake-kernel benchmarks out (only the VM runs)
#   BENCH_GETALL=0             leave out the in-VM IPVS bulk-read benchmark
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
out=_output/bench
mkdir -p "$out"
vm_sizes=${BENCH_SIZES:-1000,10000}
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
# One TestScaleVM run per size with every column of BENCH_PROXIES and the floor.
proxies=${BENCH_PROXIES:-upstream,upstream-nftables,ours,ours-nftables}
endpoints=${BENCH_ENDPOINTS:-4}
bound=${BENCH_BOUND:-15m}
commit=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
if [[ -n $(git status --porcelain -- cmd pkg go.mod go.sum 2>/dev/null) ]]; then
  commit="$commit+uncommitted"
fi
vmcmd="KPI_VM_MEM=MEM KPI_SCALE_SERVICES=N KPI_SCALE_ENDPOINTS=$endpoints KPI_SCALE_PROXIES=$proxies KPI_SCALE_FLOOR=${BENCH_FLOOR:-1} KPI_SCALE_CHANGES=20 KPI_SCALE_SYNC_PERIOD=30s KPI_SCALE_PROGRAM_TIMEOUT=$bound KPI_SCALE_JSON=_output/bench/vm-N.json go test -tags e2e,e2escale -count=1 -v -timeout 300m -run '^TestScaleVM\$' ./test/e2e/"
echo ">>> VM scale runs: test/e2e/lib/prepare.sh && $vmcmd -> $out/vm.txt" >&2
accel=$(test/e2e/lib/prepare.sh)
test/e2e/lib/build-tools.sh >/dev/null # upstream kube-proxy
# The harness runs bin/kube-proxy as it finds it: build it from this tree.
CGO_ENABLED=0 $GO build -o bin/kube-proxy ./cmd/kube-proxy
rm -f "$out/vm.txt" "$out"/vm-*.log "$out"/vm-*.json
logs=()
jsons=()
failed=()
for n in ${vm_sizes//,/ }; do
  mem=${KPI_VM_MEM:-}
  if [[ -z $mem ]]; then
    if ((n <= 2000)); then mem=2048; elif ((n <= 20000)); then mem=4096; else mem=8192; fi
  fi
  # More than 60,000 Services do not fit the test apiserver's default /16 range.
  if ((n > 60000)); then export KPI_E2E_SERVICE_CIDR=${KPI_E2E_SERVICE_CIDR:-10.96.0.0/12}; fi
  mkdir -p "$out/logs-$n"
  echo ">>> $(date -u +%T) VM comparison at $n Services x $endpoints endpoints ($proxies, floor ${BENCH_FLOOR:-1}, VM $mem MiB, bound $bound) -> $out/vm-$n.log" >&2
  if ! KPI_SCALE_LOG_DIR=$PWD/$out/logs-$n KPI_SCALE_JSON=$PWD/$out/vm-$n.json KPI_SCALE_COMMIT=$commit KPI_VM_MEM=$mem \
    KPI_SCALE_SERVICES=$n KPI_SCALE_ENDPOINTS=$endpoints KPI_SCALE_PROXIES=$proxies KPI_SCALE_FLOOR=${BENCH_FLOOR:-1} \
    KPI_SCALE_CHANGES=20 KPI_SCALE_SYNC_PERIOD=30s KPI_SCALE_PROGRAM_TIMEOUT=$bound \
    CGO_ENABLED=0 $GO test -tags e2e,e2escale -count=1 -v -timeout 300m -run '^TestScaleVM$' ./test/e2e/ > "$out/vm-$n.log" 2>&1; then
    failed+=("$n")
    echo "!!! the VM run at $n Services FAILED (a bound of ours, or the harness): see $out/vm-$n.log" >&2
  fi
  grep -E '^SCALE-(VM|CMP|RATIO):|^--- ' "$out/vm-$n.log" >&2 || true
  logs+=("$out/vm-$n.log")
  if [[ -s $out/vm-$n.json ]]; then
    jsons+=("$out/vm-$n.json")
    mkdir -p docs/bench && cp "$out/vm-$n.json" "docs/bench/vm-$n.json" # the plot's data, beside it
  fi
done
# The kernel layer: IPVS read in bulk (GetAll) against one destination dump per
# virtual server, 10,000 x 4, in the VM.
if [[ ${BENCH_GETALL:-1} == 1 ]]; then
  echo ">>> VM kernel benchmark: BenchmarkVMGetAll -> $out/vm-getall.txt" >&2
  CGO_ENABLED=0 $GO test -c -tags vmtest -o "$out/ipvs-vm.test" ./pkg/util/ipvs
  test/e2e/vm/run-in-vm.sh "$PWD/$out/ipvs-vm.test" -test.run '^$' -test.bench BenchmarkVMGetAll -test.benchtime 1x | tee "$out/vm-getall.txt"
fi
{
  echo "# $(date -u +%FT%TZ) commit $commit, qemu $accel"
  echo "# $vmcmd (after test/e2e/lib/prepare.sh)"
  for l in "${logs[@]}"; do
    echo "# $l"
    grep -E '^SCALE-(VM|CMP|RATIO):' "$l" || true
  done
  [[ -f $out/vm-getall.txt ]] && grep -E '^BenchmarkVMGetAll' "$out/vm-getall.txt"
} > "$out/vm.txt"
# The table and the plot of docs/PERFORMANCE.md.
if ((${#jsons[@]} > 0)); then
  python3 hack/bench-report.py -table "$out/vm-table.md" -svg docs/bench-vm.svg "${jsons[@]}"
  cat "$out/vm-table.md" >> "$out/vm.txt"
fi
echo >&2
cat "$out/vm.txt"
echo "VM runs: $out/vm.txt (full logs ${logs[*]}; JSON ${jsons[*]})" >&2
if ((${#failed[@]} > 0)); then
  echo "!!! failed at: ${failed[*]} Services" >&2
  exit 1
fi
