#!/usr/bin/env bash
# Renders kubeadm's kube-proxy addon (what `kubeadm init phase addon kube-proxy
# --print-manifest` prints) for deploy/testdata/kubeadm-config.yaml with
# kubeadm v1.37.2's own code (hack/kubeadm-render, a separate Go module with
# the same k8s.io replaces as test/e2e/tools), into
#   deploy/testdata/kubeadm-v1.37.2-addon-kube-proxy.yaml  (every object)
#   deploy/kubeadm/kube-proxy-daemonset.yaml               (the DaemonSet: the kustomize base)
# The deploy tests check that kubeadm's config.conf loads with our strict
# loader and that the image patch and the kustomization change only the image.
# A cold build compiles much of k8s.io/kubernetes: 10-40 min on 2 cores.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=$(mktemp -d)/kubeadm-render
(cd "$root/hack/kubeadm-render" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -o "$bin" .)
out=$(grep -v '^#' "$root/deploy/testdata/kubeadm-config.yaml" | "$bin")
{
	echo "# kubeadm v1.37.2's kube-proxy addon for testdata/kubeadm-config.yaml, as"
	echo "# \`kubeadm init phase addon kube-proxy --print-manifest\` prints it, rendered"
	echo "# with kubeadm's own code by hack/update-kubeadm-testdata.sh. Do not edit."
	echo "$out"
} >"$root/deploy/testdata/kubeadm-v1.37.2-addon-kube-proxy.yaml"
{
	echo "# kubeadm v1.37.2's kube-system/kube-proxy DaemonSet, exactly as \`kubeadm init"
	echo "# phase addon kube-proxy --print-manifest\` renders it (hack/update-kubeadm-testdata.sh"
	echo "# writes this file): the base the kustomization changes the image of."
	echo "$out" | awk 'BEGIN{RS="\n---"} /kind: DaemonSet/ {sub(/^\n+/, ""); print}'
} >"$root/deploy/kubeadm/kube-proxy-daemonset.yaml"
echo "wrote deploy/testdata/kubeadm-v1.37.2-addon-kube-proxy.yaml and deploy/kubeadm/kube-proxy-daemonset.yaml"
