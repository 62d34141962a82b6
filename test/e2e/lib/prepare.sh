#!/usr/bin/env bash
# Prepares what `go test -tags e2e ./test/e2e/` needs, the way test/e2e/run.sh
# does before its go test: Debian packages, bin/kube-proxy (CGO_ENABLED=0,
# rebuilt unless KPI_KUBE_PROXY names another binary), kube-apiserver + etcd,
# kernel + initramfs and the KVM probe, all cached (see test/e2e/README.md).
# Progress goes to stderr; stdout is the qemu accelerator line (accel.sh).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
cd "$root"
export CGO_ENABLED=0
step() { echo "[prepare] $(date -u +%T) $*" >&2; }

step "dependencies"
hack/install-deps.sh >&2
if [[ -z ${KPI_KUBE_PROXY:-} ]]; then
	step "building bin/kube-proxy"
	go build -o bin/kube-proxy ./cmd/kube-proxy
fi
s=$SECONDS; step "kube-apiserver and etcd"
test/e2e/lib/build-tools.sh >/dev/null
step "tools ready in $((SECONDS - s)) s"
s=$SECONDS; step "kernel and initramfs"
kdir=$(test/e2e/vm/build-kernel.sh)
test/e2e/vm/build-initramfs.sh "$kdir" >/dev/null
accel=$(test/e2e/vm/accel.sh "$kdir/vmlinux")
step "VM image ready in $((SECONDS - s)) s (qemu $accel)"
echo "$accel"
