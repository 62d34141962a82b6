#!/usr/bin/env bash
# The conformance cluster's smoke test, run by up.sh inside the cluster's
# namespace (test/conformance/cluster/up.sh test/conformance/cluster/smoke.sh):
# a Deployment of two agnhost netexec pods, one per node, behind a ClusterIP
# Service; from a client pod on each node, 8 HTTP requests to the Service by
# its DNS name (CoreDNS, itself behind a ClusterIP) and 8 to its ClusterIP.
# Every request must be answered and both pods must answer each client, so
# every client reaches the pod on the other node through our kube-proxy.
# Exit 0 when all holds; prints what each client saw.
set -euo pipefail
# The whole script is one compound command: bash reads it all before running
# it, so editing the file while it runs cannot change what runs.
{
: "${KUBECONFIG:?run me through up.sh (or source RUN/env)}"
k() { "$KPI_CONF_KUBECTL" "$@"; }
log() { echo "[smoke] $*" >&2; }
agnhost=$(awk -F'\t' '$1 ~ /\/agnhost:/ {print $1; exit}' "$KPI_CONF_IMAGES_DIR/index.tsv")
[[ -n $agnhost ]] || { log "FAIL: no agnhost image in the images' index.tsv"; exit 1; }
ns=kpi-smoke
start=$SECONDS

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
        ports:
        - containerPort: 8080
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
EOF
for n in $KPI_CONF_NODE_NAMES; do
	k run -n "$ns" "client-$n" --image="$agnhost" --restart=Never \
		--overrides="{\"apiVersion\":\"v1\",\"spec\":{\"nodeName\":\"$n\"}}" -- pause >/dev/null
done
k -n "$ns" rollout status deploy/web --timeout=600s >/dev/null
k -n "$ns" wait --for=condition=Ready pod -l run --timeout=600s >/dev/null 2>&1 ||
	k -n "$ns" wait --for=condition=Ready pod --all --timeout=600s >/dev/null
log "web and clients ready in $((SECONDS - start)) s"
k -n "$ns" get pods -o wide >&2
vip=$(k -n "$ns" get svc web -o jsonpath='{.spec.clusterIP}')
declare -A pod_node=()
while read -r pod node; do pod_node[$pod]=$node; done < <(k -n "$ns" get pods -l app=web -o jsonpath='{range .items[*]}{.metadata.name} {.spec.nodeName}{"\n"}{end}')

fail=0
for n in $KPI_CONF_NODE_NAMES; do
	for target in "web.$ns.svc.cluster.local" "$vip"; do
		out=$(k -n "$ns" exec "client-$n" -- sh -c \
			"for i in 1 2 3 4 5 6 7 8; do curl -s -m 5 http://$target/hostname || echo FAILED; echo; done" 2>&1 || true)
		answers=$(grep -c . <<<"$out" || true)
		failed=$(grep -c FAILED <<<"$out" || true)
		pods=$(grep -v FAILED <<<"$out" | grep . | sort -u | tr '\n' ' ')
		remote=0
		for p in $pods; do [[ ${pod_node[$p]:-} != "$n" && -n ${pod_node[$p]:-} ]] && remote=1; done
		verdict=ok
		if ((answers != 8 || failed > 0 || remote == 0)) || [[ $(wc -w <<<"$pods") -ne 2 ]]; then
			verdict=FAIL
			fail=1
		fi
		echo "client on $n -> http://$target/hostname: $((answers - failed))/8 answered, by: $pods(remote pod answered: $remote) $verdict"
	done
done
k delete namespace "$ns" --wait=false >/dev/null
log "done in $((SECONDS - start)) s"
exit "$fail"
exit
}
