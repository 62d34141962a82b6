#!/usr/bin/env bash
# The reboot test of issue 28, run by up.sh inside the cluster's namespace:
#
#   test/conformance/cluster/up.sh test/conformance/cluster/reboot.sh
#
# With our DaemonSet installed as written (apiServer given as a host name:
# up.sh's default), a Deployment of two agnhost netexec pods (one per node)
# behind a ClusterIP Service and a client pod on the last node: that node
# reboots at once (sysrq b: no shutdown, as a power cycle). It must come back
# Ready, its kube-proxy must start again and program the node (the Service's
# virtual server in its IPVS, the ClusterIP on kube-ipvs0) and the client pod,
# restarted by the kubelet, must reach the Service, both pods answering,
# by its ClusterIP and by its DNS name. Prints each step's time after the reboot.
set -euo pipefail
# The whole script is one compound command: bash reads it all before running
# it, so editing the file while it runs cannot change what runs.
{
: "${KUBECONFIG:?run me through up.sh (or source RUN/env)}"
k() { "$KPI_CONF_KUBECTL" "$@"; }
log() { printf '[reboot %4ss] %s\n' "$((SECONDS - t0))" "$*" >&2; }
fail() { log "FAIL: $*"; exit 1; }
t0=$SECONDS
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
agnhost=$(awk -F'\t' '$1 ~ /\/agnhost:/ {print $1; exit}' "$KPI_CONF_IMAGES_DIR/index.tsv")
node=${KPI_REBOOT_NODE:-${KPI_CONF_NODE_NAMES##* }}
ns=kpi-reboot

k create namespace "$ns" >/dev/null
k apply -n "$ns" -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector:
              matchLabels: {app: web}
            topologyKey: kubernetes.io/hostname
      containers:
      - name: netexec
        image: $agnhost
        args: ["netexec", "--http-port=8080"]
        readinessProbe:
          httpGet: {path: /healthz, port: 8080}
          periodSeconds: 2
---
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector: {app: web}
  ports:
  - port: 80
    targetPort: 8080
---
apiVersion: v1
kind: Pod
metadata:
  name: client
spec:
  nodeName: $node
  containers:
  - name: client
    image: $agnhost
    args: ["pause"]
EOF
k -n "$ns" rollout status deploy/web --timeout=600s >/dev/null
k -n "$ns" wait --for=condition=Ready pod/client --timeout=600s >/dev/null
vip=$(k -n "$ns" get svc web -o jsonpath='{.spec.clusterIP}')
pods=$(k -n "$ns" get pods -l app=web -o jsonpath='{.items[*].metadata.name}')

# check: 8 requests by ClusterIP and 8 by name, all answered, by both pods.
check() {
	local target out answered by
	for target in "$vip" "web.$ns.svc.cluster.local"; do
		out=$(k -n "$ns" exec client -- sh -c \
			"for i in 1 2 3 4 5 6 7 8; do curl -s -m 5 http://$target/hostname; echo; done" 2>&1) || return 1
		answered=$(grep -cE '^web-' <<<"$out" || true)
		by=$(grep -E '^web-' <<<"$out" | sort -u | tr '\n' ' ')
		log "client on $node -> $target: $answered/8 answered, by $by"
		[[ $answered == 8 && $(wc -w <<<"$by") == 2 ]] || return 1
	done
}
check || fail "the Service does not answer before the reboot"
# deploy/standalone labels its pods k8s-app=kube-proxy-ipvs; the kubeadm
# installs (deploy/kubeadm, or kubeadm's addon with deploy/kubeadm-extras)
# keep kubeadm's k8s-app=kube-proxy.
proxy_pod() { k -n kube-system get pods -l 'k8s-app in (kube-proxy-ipvs,kube-proxy)' --field-selector "spec.nodeName=$node" -o jsonpath='{.items[0].metadata.name}'; }
restarts() { k -n kube-system get pod "$(proxy_pod)" -o jsonpath='{.status.containerStatuses[0].restartCount}'; }
before=$(restarts)
boot_id=$(k get node "$node" -o jsonpath='{.status.nodeInfo.bootID}')

log "rebooting $node (sysrq b)"
KPI_NODE_SH_TIMEOUT=3 "$here/node-sh.sh" "$KPI_CONF_RUN" "$node" 'sync; echo 1 >/proc/sys/kernel/sysrq; echo b >/proc/sysrq-trigger' >/dev/null 2>&1 || true
t0=$SECONDS
log "rebooted"
# Back: a new boot ID and Ready.
while [[ $(k get node "$node" -o jsonpath='{.status.nodeInfo.bootID}' 2>/dev/null) == "$boot_id" ]]; do
	((SECONDS - t0 < 600)) || fail "$node did not report a new boot within 600 s"
	sleep 2
done
log "$node reports a new boot ID"
until [[ $(k get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]; do
	((SECONDS - t0 < 600)) || fail "$node not Ready within 600 s"
	sleep 2
done
log "$node Ready"
# kube-proxy started again (a new container after the reboot) and ready.
until [[ $(restarts) -gt $before && $(k -n kube-system get pod "$(proxy_pod)" -o jsonpath='{.status.containerStatuses[0].ready}') == true ]]; do
	((SECONDS - t0 < 600)) || fail "kube-proxy on $node not ready again within 600 s: $(k -n kube-system get pods -o wide | tr '\n' ' ')"
	sleep 2
done
log "kube-proxy ($(proxy_pod), ${KPI_CONF_PROXY:-standalone}) on $node ready again (restarts $before -> $(restarts))"
until "$here/node-sh.sh" "$KPI_CONF_RUN" "$node" "ipvsadm -Ln -t $vip:80 && ip -4 addr show kube-ipvs0 | grep -qw $vip" >/dev/null 2>&1; do
	((SECONDS - t0 < 600)) || fail "$node's IPVS has no virtual server $vip:80 within 600 s"
	sleep 2
done
log "$node programs $vip:80 (IPVS, kube-ipvs0): $("$here/node-sh.sh" "$KPI_CONF_RUN" "$node" "ipvsadm -Ln -t $vip:80 | grep -c -- '->.*Masq'") real servers"
until [[ $(k -n "$ns" get pod client -o jsonpath='{.status.containerStatuses[0].ready}') == true ]]; do
	((SECONDS - t0 < 600)) || fail "the client pod did not come back within 600 s"
	sleep 2
done
k -n "$ns" rollout status deploy/web --timeout=600s >/dev/null
log "client and web pods running again"
until check; do
	((SECONDS - t0 < 600)) || fail "the client on $node does not reach the Service within 600 s of the reboot"
	sleep 5
done
log "PASS: $node rebooted, its kube-proxy programs it and its pods reach the Service (pods: $pods before)"
k delete namespace "$ns" --wait=false >/dev/null
exit
}
