#!/usr/bin/env bash
# Brings up a fresh conformance cluster: a Kubernetes v1.37.2 control plane and
# KPI_CONF_NODES (default 2) node VMs running kubelet, containerd and the CNI
# bridge plugin, with our kube-proxy installed from deploy/standalone as a user
# installs it. Everything lives in a network namespace made for this run
# (kpi-conf-<pid>); nothing touches the host's own network. See README.md.
#
#   test/conformance/cluster/up.sh              # up, then wait: Ctrl-C (or SIGTERM) tears it down
#   test/conformance/cluster/up.sh CMD [ARG...] # up, run CMD in the namespace, tear down; CMD's exit code
#
# CMD (and anything run with `ip netns exec kpi-conf-<pid>`) sees KUBECONFIG
# (the admin), KPI_CONF_RUN (the run folder), KPI_CONF_NS, KPI_CONF_NODES and
# the node names/IPs in KPI_CONF_NODE_NAMES / KPI_CONF_NODE_IPS; $KPI_CONF_RUN/env
# holds the same for other shells.
#
# Environment:
#   KPI_CONF_NODES        node VMs (default 2)
#   KPI_CONF_VM_MEM       MiB per node VM (default 2048)
#   KPI_CONF_VM_CPUS      vCPUs per node VM (default 2)
#   KPI_CONF_PROXY        which kube-proxy, installed as a user installs it:
#                         standalone     deploy/standalone with our image (default)
#                         ours-iptables  kubeadm's addon objects + deploy/kubeadm-extras, our image
#                         ours-nftables  the same with rulesBackend: nftables
#                         upstream-ipvs  kubeadm's addon as rendered, upstream kube-proxy v1.37.2
#                         none
#   KPI_CONF_FAMILIES     ipv4 (default) or dual: dual-stack nodes, pods and Service
#                         ranges (IPv4 first), for upstream's [Feature:IPv6DualStack] specs
#   KPI_CONF_DNS          coredns (default: coredns.yaml, the kube-dns Service 10.96.0.10) or none
#   KPI_CONF_APISERVER_NAME  the name kube-proxy's apiServer uses (default
#                         kpi-apiserver, in every node's /etc/hosts); "ip" puts the address
#   KPI_CONF_PROXY_ARCHIVE   our image as an OCI archive (default: proxy-image.sh)
#   KPI_CONF_BUILD_DIR    test/conformance/build.sh's folder (default: build.sh bin)
#   KPI_CONF_IMAGES_DIR   folder with index.tsv and the OCI archives (default BUILD_DIR/images)
#   KPI_CONF_TIMEOUT      seconds to wait for nodes Ready and kube-proxy (default 900)
#   KPI_CONF_KEEP=1       keep the run folder (logs, consoles) after teardown
#   KPI_CONF_LOGS_DIR     copy the logs, consoles and timings there at teardown
#   KPI_CONF_RUN_DIR      the run folder (default /tmp/kpi-conf-<pid>)
set -euo pipefail
# The whole script is one compound command: bash reads it all before running
# it, so editing the file while it runs cannot change what runs.
{

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../.." && pwd)
t0=$SECONDS
log() { printf '[cluster %4ss] %s\n' "$((SECONDS - t0))" "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }
[[ $(id -u) -eq 0 ]] || die "needs root (network namespace, taps, qemu)"

nodes=${KPI_CONF_NODES:-2}
timeout=${KPI_CONF_TIMEOUT:-900}
proxy=${KPI_CONF_PROXY:-standalone}
ns=kpi-conf-$$
run=${KPI_CONF_RUN_DIR:-/tmp/kpi-conf-$$}
gw=10.10.0.1
apiserver_name=${KPI_CONF_APISERVER_NAME:-kpi-apiserver}
service_cidr=10.96.0.0/16
cluster_cidr=10.244.0.0/16
# Dual-stack: the same layout in IPv6, IPv4 first (the primary family).
families=${KPI_CONF_FAMILIES:-ipv4}
gw6=''
case $families in
ipv4) ;;
dual)
	gw6=fd00:10::1
	service_cidr+=,fd00:96::/112
	cluster_cidr+=,fd00:244::/48
	;;
*) die "KPI_CONF_FAMILIES=$families: want ipv4 or dual" ;;
esac

# ---- what the cluster is made of (all cached) ----
build=${KPI_CONF_BUILD_DIR:-$("$repo/test/conformance/build.sh" bin)}
images=${KPI_CONF_IMAGES_DIR:-$build/images}
for b in kubelet kube-controller-manager kube-scheduler kubectl; do
	[[ -x $build/bin/$b ]] || die "no $build/bin/$b (test/conformance/build.sh bin)"
done
[[ -f $images/index.tsv ]] || die "no $images/index.tsv: the images come from test/conformance/build.sh"
tools=$(KPI_TOOLS_UPSTREAM_PROXY=0 "$repo/test/e2e/lib/build-tools.sh")
node_image=$("$here/build-node.sh")
kubectl=$build/bin/kubectl
pause_ref=$(awk -F'\t' '$1 ~ /\/pause:/ {print $1; exit}' "$images/index.tsv")
[[ -n $pause_ref ]] || die "$images/index.tsv names no pause image"
dns=${KPI_CONF_DNS:-coredns}
coredns_ref=$(awk -F'\t' '$1 ~ /\/coredns:/ {print $1; exit}' "$images/index.tsv")
[[ $dns != coredns || -n $coredns_ref ]] || die "$images/index.tsv names no coredns image (KPI_CONF_DNS=none goes without)"
proxy_ref='' upstream_proxy_ref=''
case $proxy in
standalone | ours-iptables | ours-nftables | none) ;;
upstream-ipvs)
	upstream_proxy_ref=$(awk -F'\t' '$1 ~ /\/kube-proxy:/ {print $1; exit}' "$images/index.tsv")
	[[ -n $upstream_proxy_ref ]] || die "$images/index.tsv names no upstream kube-proxy image"
	;;
*) die "KPI_CONF_PROXY=$proxy: want standalone, ours-iptables, ours-nftables, upstream-ipvs or none" ;;
esac
if [[ $proxy == standalone || $proxy == ours-* ]]; then
	IFS=$'\t' read -r proxy_archive proxy_version < <("$here/proxy-image.sh")
	proxy_ref=kpi.local/kube-proxy-ipvs:$proxy_version
fi
# The node's disk with every image (index.tsv's, ours) already in containerd.
preload=("$images")
[[ -z $proxy_ref ]] || preload+=("$proxy_archive=$proxy_ref")
node_disk=$("$here/build-node.sh" --preload "${preload[@]}")

# ---- teardown: by PID and by namespace name ----
pids=()
cleanup() {
	local rc=$? p
	# A second signal must not cut the teardown short (VMs and the namespace would stay).
	trap - EXIT
	trap "" INT TERM
	log "tearing down (exit $rc)"
	if [[ -n ${KPI_CONF_LOGS_DIR:-} && -f $run/pki/admin.kubeconfig ]]; then
		# What ran in kube-system (kube-proxy, CoreDNS), while the cluster still answers.
		mkdir -p "$run/logs/pods"
		k get pods -A -o wide >"$run/logs/pods/pods.txt" 2>&1 || true
		local pod
		for pod in $(k -n kube-system get pods -o name 2>/dev/null); do
			timeout 30 ip netns exec "$ns" "$kubectl" --kubeconfig "$run/pki/admin.kubeconfig" -n kube-system \
				logs --all-containers --prefix "$pod" >"$run/logs/pods/${pod#pod/}.log" 2>&1 || true
		done
		# Each node's kube-proxy metrics (sync durations, programming latency): what
		# the column's proxy cost, read where the suite ran.
		local node
		for node in "${names[@]}"; do
			KPI_NODE_SH_TIMEOUT=30 "$here/node-sh.sh" "$run" "$node" 'curl -s --max-time 10 127.0.0.1:10249/metrics' \
				>"$run/logs/metrics-$node.txt" 2>&1 || true
		done
	fi
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for _ in $(seq 50); do
		local alive=0
		for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
		((alive)) || break
		sleep 0.2
	done
	for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
	ip netns del "$ns" 2>/dev/null || true
	rm -rf "/dev/shm/$ns"
	if [[ -n ${KPI_CONF_LOGS_DIR:-} ]]; then
		mkdir -p "$KPI_CONF_LOGS_DIR"
		cp -r "$run/logs/." "$KPI_CONF_LOGS_DIR/" 2>/dev/null || true
		find "$KPI_CONF_LOGS_DIR" -name '*.sock' -delete
		cp "$run/timings" "$KPI_CONF_LOGS_DIR/" 2>/dev/null || true
	fi
	if [[ ${KPI_CONF_KEEP:-0} == 1 ]]; then log "kept $run"; else rm -rf "$run"; fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

rm -rf "$run"
mkdir -p "$run"/{pki,logs,images}
inns() { ip netns exec "$ns" "$@"; }
# start NAME CMD...: a process in the namespace, logged, its PID remembered.
start() {
	local name=$1
	shift
	ip netns exec "$ns" "$@" >"$run/logs/$name.log" 2>&1 </dev/null &
	pids+=($!)
	echo $! >"$run/logs/$name.pid"
}
k() { inns "$kubectl" --kubeconfig "$run/pki/admin.kubeconfig" "$@"; }

# ---- network: a bridge in our namespace, one tap per node ----
names=() ips=() ips6=()
for i in $(seq "$nodes"); do
	names+=("node$i")
	ips+=("10.10.0.$((10 + i))")
	[[ -z $gw6 ]] || ips6+=("fd00:10::$((10 + i))")
done
ip netns add "$ns"
inns ip link set lo up
inns ip link add br0 type bridge
inns ip link set br0 address 02:00:0a:0a:00:01
inns ip addr add "$gw/24" dev br0
inns ip link set br0 up
for i in $(seq "$nodes"); do
	inns ip tuntap add "tap$i" mode tap
	inns ip link set "tap$i" master br0
	inns ip link set "tap$i" up
	# The namespace reaches every pod directly (host-gw), as the nodes do.
	inns ip route add "10.244.$i.0/24" via "${ips[i - 1]}"
done
log "namespace $ns: br0 $gw/24, nodes ${ips[*]}, pods 10.244.N.0/24 on nodeN"
if [[ -n $gw6 ]]; then
	inns ip -6 addr add "$gw6/64" dev br0 nodad
	for i in $(seq "$nodes"); do
		inns ip -6 route add "fd00:244:$i::/64" via "${ips6[i - 1]}"
	done
	log "dual-stack: br0 also $gw6/64, nodes ${ips6[*]}, pods fd00:244:N::/64 on nodeN, Services $service_cidr"
fi

# ---- PKI ----
sans="IP:$gw,IP:10.96.0.1,IP:127.0.0.1,DNS:$apiserver_name,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
"$here/certs.sh" "$run/pki" "https://$gw:6443" "$sans" "${names[@]}"

# ---- control plane ----
mkdir -p "/dev/shm/$ns"
start etcd "$tools/etcd" --name=kpi --data-dir="/dev/shm/$ns/etcd" \
	--listen-client-urls=http://127.0.0.1:2379 --advertise-client-urls=http://127.0.0.1:2379 \
	--listen-peer-urls=http://127.0.0.1:2380 --initial-advertise-peer-urls=http://127.0.0.1:2380 \
	--initial-cluster=kpi=http://127.0.0.1:2380 --unsafe-no-fsync --log-level=warn
p=$run/pki
start kube-apiserver "$tools/kube-apiserver" --advertise-address="$gw" --bind-address=0.0.0.0 --secure-port=6443 \
	--etcd-servers=http://127.0.0.1:2379 \
	--client-ca-file="$p/ca.crt" --tls-cert-file="$p/apiserver.crt" --tls-private-key-file="$p/apiserver.key" \
	--kubelet-client-certificate="$p/apiserver-kubelet-client.crt" --kubelet-client-key="$p/apiserver-kubelet-client.key" \
	--kubelet-preferred-address-types=InternalIP \
	--authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
	--service-account-issuer=https://kubernetes.default.svc.cluster.local \
	--service-account-key-file="$p/sa.pub" --service-account-signing-key-file="$p/sa.key" \
	--service-cluster-ip-range="$service_cidr" --service-node-port-range=30000-32767 \
	--allow-privileged=true --v=1
for _ in $(seq 120); do
	k get --raw /readyz >/dev/null 2>&1 && break
	sleep 1
done
k get --raw /readyz >/dev/null 2>&1 || die "kube-apiserver not ready: $(tail -5 "$run/logs/kube-apiserver.log")"
log "kube-apiserver ready on https://$gw:6443"
start kube-controller-manager "$build/bin/kube-controller-manager" --kubeconfig="$p/controller-manager.kubeconfig" \
	--authentication-kubeconfig="$p/controller-manager.kubeconfig" --authorization-kubeconfig="$p/controller-manager.kubeconfig" \
	--bind-address=127.0.0.1 --leader-elect=false --use-service-account-credentials=true \
	--controllers='*,bootstrapsigner,tokencleaner' --cluster-name=kpi-conformance \
	--cluster-signing-cert-file="$p/ca.crt" --cluster-signing-key-file="$p/ca.key" \
	--root-ca-file="$p/ca.crt" --service-account-private-key-file="$p/sa.key" \
	--service-cluster-ip-range="$service_cidr" --cluster-cidr="$cluster_cidr" --allocate-node-cidrs=false \
	--v=1
start kube-scheduler "$build/bin/kube-scheduler" --kubeconfig="$p/scheduler.kubeconfig" \
	--authentication-kubeconfig="$p/scheduler.kubeconfig" --authorization-kubeconfig="$p/scheduler.kubeconfig" \
	--bind-address=127.0.0.1 --leader-elect=false --v=1

# ---- images shared with every node (read-only 9p) ----
image_names=()
while IFS=$'\t' read -r ref file; do
	[[ -n $ref && $ref != \#* ]] || continue
	ln "$images/$file" "$run/images/$file" 2>/dev/null || cp "$images/$file" "$run/images/$file"
	image_names+=("$file=$ref")
done <"$images/index.tsv"
if [[ -n $proxy_ref ]]; then
	ln "$proxy_archive" "$run/images/kube-proxy-ipvs.oci.tar" 2>/dev/null || cp "$proxy_archive" "$run/images/kube-proxy-ipvs.oci.tar"
	image_names+=("kube-proxy-ipvs.oci.tar=$proxy_ref")
fi

# ---- node VMs ----
accel=$("$repo/test/e2e/vm/accel.sh" "$(readlink -f "$node_image/vmlinux")")
hosts="$gw $apiserver_name"
for i in $(seq "$nodes"); do hosts+=$'\n'"${ips[i - 1]} ${names[i - 1]}"; done
for i in $(seq "$nodes"); do
	n=${names[i - 1]} ip=${ips[i - 1]}
	share=$run/$n
	mkdir -p "$share/bin"
	ln "$build/bin/kubelet" "$share/bin/kubelet" 2>/dev/null || cp "$build/bin/kubelet" "$share/bin/kubelet"
	install -m 0755 "$here/guest/node-init" "$share/node-init"
	cp "$p/ca.crt" "$share/ca.crt"
	cp "$p/kubelet-$n.kubeconfig" "$share/kubelet.kubeconfig"
	cat >"$share/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: /kpi/ca.crt
authorization:
  mode: Webhook
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
clusterDNS: [10.96.0.10]
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
failSwapOn: false
serializeImagePulls: false
evictionHard:
  memory.available: 50Mi
  nodefs.available: 5%
  imagefs.available: 5%
imageGCHighThresholdPercent: 98
imageGCLowThresholdPercent: 95
EOF
	routes='' node_ips=$ip
	for j in $(seq "$nodes"); do
		((j == i)) || routes+="10.244.$j.0/24@${ips[j - 1]} "
		[[ -z $gw6 ]] || ((j == i)) || routes+="fd00:244:$j::/64@${ips6[j - 1]} "
	done
	[[ -z $gw6 ]] || node_ips+=,${ips6[i - 1]}
	{
		printf 'NODE_NAME=%q\nNODE_IP=%q\nGATEWAY=%q\nPOD_CIDR=%q\nPOD_ROUTES=%q\n' "$n" "$ip/24" "$gw" "10.244.$i.0/24" "$routes"
		[[ -z $gw6 ]] || printf 'NODE_IP6=%q\nGATEWAY6=%q\nPOD_CIDR6=%q\n' "${ips6[i - 1]}/64" "$gw6" "fd00:244:$i::/64"
		printf 'HOSTS=%q\nSANDBOX_IMAGE=%q\nIMAGE_NAMES=%q\n' "$hosts" "$pause_ref" "${image_names[*]}"
		printf 'KUBELET_ARGS=%q\n' "--config=/kpi/kubelet-config.yaml --kubeconfig=/kpi/kubelet.kubeconfig --node-ip=$node_ips --hostname-override=$n --v=2"
	} >"$share/node.env"
	# The node's own disk: a sparse copy (2 s), kept across a power cycle.
	cp --sparse=always "$node_disk" "$run/$n.img"
	# shellcheck disable=SC2086 # accel is a word list
	start "qemu-$n" qemu-system-x86_64 $accel -machine pc -smp "${KPI_CONF_VM_CPUS:-2}" -m "${KPI_CONF_VM_MEM:-2048}" \
		-nodefaults -no-user-config -nographic -display none \
		-serial "file:$run/logs/console-$n.log" \
		-serial "unix:$run/logs/shell-$n.sock,server=on,wait=off" \
		-netdev "tap,id=n0,ifname=tap$i,script=no,downscript=no" \
		-device "virtio-net-pci,netdev=n0,mac=52:54:00:0a:00:$((10 + i)),romfile=" \
		-drive "file=$run/$n.img,if=virtio,format=raw,cache=unsafe" \
		-virtfs "local,path=$share,mount_tag=kpi,security_model=none,readonly=on" \
		-virtfs "local,path=$run/images,mount_tag=images,security_model=none,readonly=on" \
		-kernel "$node_image/vmlinux" -initrd "$node_image/boot.cpio.gz" \
		-append "console=ttyS0 quiet loglevel=3 panic=-1"
done
boot=$SECONDS
log "booting ${names[*]} ($(awk '{print $2}' <<<"$accel" | cut -d, -f1), ${KPI_CONF_VM_MEM:-2048} MiB, ${KPI_CONF_VM_CPUS:-2} vCPUs each)"

{
	printf 'export KUBECONFIG=%q\nexport KPI_CONF_RUN=%q\nexport KPI_CONF_NS=%q\nexport KPI_CONF_NODES=%q\n' \
		"$p/admin.kubeconfig" "$run" "$ns" "$nodes"
	printf 'export KPI_CONF_NODE_NAMES=%q\nexport KPI_CONF_NODE_IPS=%q\nexport KPI_CONF_KUBECTL=%q\n' "${names[*]}" "${ips[*]}" "$kubectl"
	printf 'export KPI_CONF_FAMILIES=%q\n' "$families"
	printf 'export KPI_CONF_BUILD_DIR=%q\nexport KPI_CONF_IMAGES_DIR=%q\nexport KPI_CONF_PROXY_IMAGE=%q\n' "$build" "$images" "$proxy_ref"
} >"$run/env"

# ---- nodes: registered (then their pod range), Ready ----
alive() { # every qemu still running
	local i
	for i in $(seq "$nodes"); do
		kill -0 "$(cat "$run/logs/qemu-${names[i - 1]}.pid")" 2>/dev/null ||
			die "the VM of ${names[i - 1]} exited: $(tail -5 "$run/logs/console-${names[i - 1]}.log")"
	done
}
declare -A registered=() ready=()
while ((${#ready[@]} < nodes)); do
	((SECONDS - boot < timeout)) || die "nodes not Ready after $timeout s: $(k get nodes 2>&1 | tr '\n' ' ')"
	alive
	for i in $(seq "$nodes"); do
		n=${names[i - 1]}
		if [[ -z ${registered[$n]:-} ]] && k get node "$n" >/dev/null 2>&1; then
			# Static pod ranges, one per node, as the CNI config and the
			# host-gw routes already use them.
			cidrs="\"10.244.$i.0/24\""
			[[ -z $gw6 ]] || cidrs+=",\"fd00:244:$i::/64\""
			k patch node "$n" --type merge -p "{\"spec\":{\"podCIDR\":\"10.244.$i.0/24\",\"podCIDRs\":[$cidrs]}}" >/dev/null
			registered[$n]=$((SECONDS - boot))
			log "$n registered ${registered[$n]} s after qemu started"
		fi
		if [[ -n ${registered[$n]:-} && -z ${ready[$n]:-} ]] &&
			[[ $(k get node "$n" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]; then
			ready[$n]=$((SECONDS - boot))
			log "$n Ready ${ready[$n]} s after qemu started"
		fi
	done
	sleep 2
done
{
	echo "# seconds after qemu started (TCG unless KVM works), $(date -u +%FT%TZ)"
	for n in "${names[@]}"; do echo "$n registered ${registered[$n]} ready ${ready[$n]}"; done
} >"$run/timings"

# wait_image REF: every node's status lists REF (node-init imports what the
# preloaded disk lacks in the background, after the kubelet started).
wait_image() {
	local ref=$1 since=$SECONDS n missing
	while true; do
		missing=''
		for n in "${names[@]}"; do
			k get node "$n" -o jsonpath='{range .status.images[*]}{range .names[*]}{@}{"\n"}{end}{end}' 2>/dev/null |
				grep -qxF "$ref" || missing+="$n "
		done
		[[ -n $missing ]] || break
		((SECONDS - since < timeout)) || die "image $ref not on $missing after $timeout s"
		alive
		sleep 2
	done
	log "$ref on every node $((SECONDS - boot)) s after qemu started"
}

# ---- kube-proxy, as a user installs it ----
server=https://$apiserver_name:6443
[[ $apiserver_name != ip ]] || server=https://$gw:6443
# edited SRC DST WANT SED-ARGS...: DST is SRC edited; exactly WANT lines differ.
edited() {
	local src=$1 dst=$2 want=$3 changed
	shift 3
	sed "$@" "$src" >"$dst"
	changed=$(diff "$src" "$dst" | grep -c '^>' || true)
	[[ $changed == "$want" ]] || die "editing $src changed $changed lines, want $want"
}
# ds_ready NAME: the DaemonSet's pods ready on every node.
ds_ready() {
	local since=$SECONDS st want have
	while true; do
		((SECONDS - since < timeout)) || die "DaemonSet $1 not ready: $(k -n kube-system get pods -o wide 2>&1 | tr '\n' ' ')"
		alive
		st=$(k -n kube-system get ds "$1" -o jsonpath='{.status.desiredNumberScheduled} {.status.numberReady}' 2>/dev/null || true)
		read -r want have <<<"$st"
		[[ -n ${want:-} && $want == "$nodes" && ${have:-} == "$nodes" ]] && break
		sleep 2
	done
	log "DaemonSet $1 ready on $nodes nodes $((SECONDS - since)) s after apply"
	echo "$1 ready $((SECONDS - since)) s after apply" >>"$run/timings"
}
case $proxy in
standalone)
	# deploy/standalone as written, two values substituted (the README's steps).
	wait_image "$proxy_ref"
	edited "$repo/deploy/standalone/kube-proxy-ipvs.yaml" "$run/kube-proxy-ipvs.yaml" 2 \
		-e "s|^\(        image: \)kube-proxy-ipvs:dev\$|\1$proxy_ref|" \
		-e "s|^\(  apiServer: \)\"https://CHANGE-ME:6443\"\$|\1\"$server\"|"
	k apply -f "$run/kube-proxy-ipvs.yaml" >/dev/null
	log "applied deploy/standalone (image $proxy_ref, apiServer $server)"
	ds_ready kube-proxy-ipvs
	;;
upstream-ipvs | ours-iptables | ours-nftables)
	# kubeadm v1.37.2's kube-proxy addon as kubeadm renders it (deploy/testdata:
	# mode ipvs, clusterCIDR 10.244.0.0/16), the server substituted; its
	# DaemonSet with upstream's image, or deploy/kubeadm-extras (kubeadm's
	# DaemonSet, our image and our settings) with the image set and, for
	# nftables, rulesBackend edited as its comment says.
	# A dual-stack cluster: clusterCIDR as kubeadm renders a dual podSubnet.
	want=1
	[[ -z $gw6 ]] || want=2
	edited "$repo/deploy/testdata/kubeadm-v1.37.2-addon-kube-proxy.yaml" "$run/kubeadm-addon.yaml" "$want" \
		-e "s|^\(        server: \)https://10.0.2.100:6443\$|\1$server|" \
		-e "s|^\(    clusterCIDR: \)10.244.0.0/16\$|\1$cluster_cidr|"
	python3 - "$run/kubeadm-addon.yaml" >"$run/kubeadm-addon-objects.yaml" <<'PY'
import sys
docs = open(sys.argv[1]).read().split("\n---\n")
print("\n---\n".join(d for d in docs if "\nkind: DaemonSet" not in "\n" + d))
PY
	k apply -f "$run/kubeadm-addon-objects.yaml" >/dev/null
	if [[ $proxy == upstream-ipvs ]]; then
		wait_image "$upstream_proxy_ref"
		k apply -f "$run/kubeadm-addon.yaml" >/dev/null
		log "applied kubeadm's kube-proxy addon (upstream $upstream_proxy_ref, mode ipvs, server $server)"
	else
		wait_image "$proxy_ref"
		mkdir -p "$run/deploy"
		cp -r "$repo/deploy/kubeadm" "$repo/deploy/kubeadm-extras" "$run/deploy/"
		edited "$repo/deploy/kubeadm/kustomization.yaml" "$run/deploy/kubeadm/kustomization.yaml" 2 \
			-e "s|^\(  newName: \)kube-proxy-ipvs\$|\1${proxy_ref%:*}|" -e "s|^\(  newTag: \)dev\$|\1${proxy_ref##*:}|"
		backend=${proxy#ours-}
		if [[ $backend != iptables ]]; then
			edited "$repo/deploy/kubeadm-extras/ipvs-config.yaml" "$run/deploy/kubeadm-extras/ipvs-config.yaml" 1 \
				-e "s|^\(    rulesBackend: \)iptables\$|\1$backend|"
		fi
		k apply --server-side --force-conflicts -k "$run/deploy/kubeadm-extras" >/dev/null
		log "applied kubeadm's addon objects and deploy/kubeadm-extras (image $proxy_ref, rulesBackend $backend, server $server)"
	fi
	ds_ready kube-proxy
	;;
none) ;;
esac
# ---- cluster DNS: CoreDNS at 10.96.0.10 (a Service our kube-proxy serves) ----
if [[ $dns == coredns ]]; then
	wait_image "$coredns_ref"
	sed "s|COREDNS_IMAGE|$coredns_ref|" "$here/coredns.yaml" >"$run/coredns.yaml"
	k apply -f "$run/coredns.yaml" >/dev/null
	applied=$SECONDS
	while true; do
		((SECONDS - applied < timeout)) || die "CoreDNS not available: $(k -n kube-system get pods -o wide 2>&1 | tr '\n' ' ')"
		alive
		[[ $(k -n kube-system get deploy coredns -o jsonpath='{.status.availableReplicas}' 2>/dev/null) == 2 ]] && break
		sleep 2
	done
	log "CoreDNS available $((SECONDS - applied)) s after apply"
	echo "coredns available $((SECONDS - applied)) s after apply" >>"$run/timings"
fi
log "cluster up in $((SECONDS - t0)) s: $(k get nodes --no-headers 2>&1 | awk '{printf "%s %s; ", $1, $2}')"
log "use it: ip netns exec $ns bash -c '. $run/env; \$KPI_CONF_KUBECTL get pods -A'"

if (($# > 0)); then
	set +e
	# shellcheck disable=SC1091
	inns bash -c '. "$1"; shift; exec "$@"' _ "$run/env" "$@"
	rc=$?
	set -e
	exit "$rc"
fi
log "waiting: Ctrl-C or SIGTERM to pid $$ tears the cluster down"
while true; do
	alive
	sleep 5
done
exit
}
