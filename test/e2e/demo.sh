#!/usr/bin/env bash
# `make demo`: on a fresh Debian machine, installs what is missing, builds
# everything (cold: kube-apiserver takes 10-25 min on 2 cores, with progress),
# then runs test/e2e/cmd/e2e-demo: apiserver on 127.0.0.1, the IPVS VM as a
# node, our kube-proxy in it, a Service over three pods, `ipvsadm -Ln`, and
# ClusterIP fetches showing which pod answered. Shuts everything down.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
export CGO_ENABLED=0
step() { echo "[demo] $(date -u +%T) $*"; }

step "installing dependencies (if missing)"
hack/install-deps.sh
if [[ ! -x bin/kube-proxy ]]; then
	step "building bin/kube-proxy"
	go build -o bin/kube-proxy ./cmd/kube-proxy
fi
step "building kube-apiserver and etcd (cached after the first time)"
test/e2e/lib/build-tools.sh >/dev/null
step "preparing the VM kernel and initramfs (cached after the first time)"
kdir=$(test/e2e/vm/build-kernel.sh)
test/e2e/vm/build-initramfs.sh "$kdir" >/dev/null
step "building the demo driver"
go build -o "${TMPDIR:-/tmp}/kpi-e2e-demo" ./test/e2e/cmd/e2e-demo
exec "${TMPDIR:-/tmp}/kpi-e2e-demo" --kube-proxy "${KPI_KUBE_PROXY:-bin/kube-proxy}" "$@"
