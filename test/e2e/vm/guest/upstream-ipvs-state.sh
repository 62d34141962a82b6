#!/bin/bash
# Recreates on the node what upstream `kube-proxy --proxy-mode=ipvs` (1.3x)
# leaves behind when it stops, plus a few iptables-mode leftovers, kubelet's own
# KUBE- chains and third-party state that --cleanup must NOT touch:
#   - kube-ipvs0 with a ClusterIP, IPVS virtual servers for a ClusterIP, a node
#     port and an LB IP, every upstream ipset (IPv4 and IPv6 names);
#   - nat/filter chains and jumps as upstream's ipvs proxier writes them;
#   - kubelet's KUBE-FIREWALL / KUBE-KUBELET-CANARY (kept), a foreign chain
#     E2E-FOREIGN with a jump from INPUT (kept), a foreign virtual server
#     10.0.2.70:9999 (kept).
set -euo pipefail

ip link add kube-ipvs0 type dummy
ip addr add 10.96.200.1/32 dev kube-ipvs0
ip addr add 10.0.2.90/32 dev kube-ipvs0
ipvsadm -A -t 10.96.200.1:80 -s rr
ipvsadm -a -t 10.96.200.1:80 -r 10.244.0.250:8080 -m
ipvsadm -A -u 10.96.200.1:53 -s rr
ipvsadm -A -t 10.0.2.15:30080 -s rr
ipvsadm -a -t 10.0.2.15:30080 -r 10.244.0.250:8080 -m
ipvsadm -A -t 10.0.2.90:80 -s rr
# 198.51.100.0:20000 is upstream's probe of the IPVS kernel support.
ipvsadm -A -t 198.51.100.0:20000 -s rr
ipvsadm -A -t 10.0.2.70:9999 -s wlc

# Upstream names IPv6 sets KUBE-6-* and cuts a name over ipset's 31
# characters to 31 (KUBE-6-LOAD-BALANCER-SOURCE-CID,
# KUBE-6-NODE-PORT-LOCAL-SCTP-HAS).
mkset() {
	local name=${1:0:31}
	shift
	ipset create "$name" "$@"
}
for fam in inet inet6; do
	p=KUBE-
	[[ $fam == inet6 ]] && p=KUBE-6-
	mkset ${p}LOOP-BACK hash:ip,port,ip family $fam
	mkset ${p}CLUSTER-IP hash:ip,port family $fam
	mkset ${p}EXTERNAL-IP hash:ip,port family $fam
	mkset ${p}EXTERNAL-IP-LOCAL hash:ip,port family $fam
	mkset ${p}LOAD-BALANCER hash:ip,port family $fam
	mkset ${p}LOAD-BALANCER-LOCAL hash:ip,port family $fam
	mkset ${p}LOAD-BALANCER-FW hash:ip,port family $fam
	mkset ${p}LOAD-BALANCER-SOURCE-IP hash:ip,port,ip family $fam
	mkset ${p}LOAD-BALANCER-SOURCE-CIDR hash:ip,port,net family $fam
	mkset ${p}NODE-PORT-SCTP-HASH hash:ip,port family $fam
	mkset ${p}NODE-PORT-LOCAL-SCTP-HASH hash:ip,port family $fam
	mkset ${p}IPVS-IPS hash:ip family $fam
	for s in NODE-PORT-TCP NODE-PORT-LOCAL-TCP NODE-PORT-UDP NODE-PORT-LOCAL-UDP HEALTH-CHECK-NODE-PORT; do
		mkset ${p}$s bitmap:port range 0-65535
	done
done
ipset add KUBE-CLUSTER-IP 10.96.200.1,tcp:80
ipset add KUBE-CLUSTER-IP 10.96.200.1,udp:53
ipset add KUBE-LOAD-BALANCER 10.0.2.90,tcp:80
ipset add KUBE-NODE-PORT-TCP 30080
ipset add KUBE-IPVS-IPS 10.96.200.1
ipset add KUBE-LOOP-BACK 10.244.0.250,tcp:8080,10.244.0.250

iptables-restore --noflush <<'RULES'
*nat
:KUBE-SERVICES - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-LOAD-BALANCER - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-SVC-ERIFXISQEP7F7OF4 - [0:0]
:KUBE-SEP-Z6JCHCWTSDXQNTWQ - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
-A KUBE-POSTROUTING -m comment --comment "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose" -m set --match-set KUBE-LOOP-BACK dst,dst,src -j MASQUERADE
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
-A KUBE-SERVICES ! -s 10.244.0.0/16 -m comment --comment "Kubernetes service cluster ip + port for masquerade purpose" -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m comment --comment "Kubernetes service lb portal" -m set --match-set KUBE-LOAD-BALANCER dst,dst -j KUBE-LOAD-BALANCER
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT
-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT
-A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ
-A KUBE-NODE-PORT -p tcp -m comment --comment "Kubernetes nodeport TCP port for masquerade purpose" -m set --match-set KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ
-A KUBE-SVC-ERIFXISQEP7F7OF4 -j KUBE-SEP-Z6JCHCWTSDXQNTWQ
-A KUBE-SEP-Z6JCHCWTSDXQNTWQ -p tcp -j DNAT --to-destination 10.244.0.250:8080
COMMIT
*filter
:KUBE-FORWARD - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
:KUBE-SOURCE-RANGES-FIREWALL - [0:0]
:KUBE-IPVS-FILTER - [0:0]
:KUBE-IPVS-OUT-FILTER - [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
:E2E-FOREIGN - [0:0]
-A INPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-FILTER
-A INPUT -m comment --comment "kube-proxy firewall rules" -j KUBE-PROXY-FIREWALL
-A INPUT -m comment --comment "kubernetes health check rules" -j KUBE-NODE-PORT
-A INPUT -j KUBE-FIREWALL
-A INPUT -j E2E-FOREIGN
-A FORWARD -m comment --comment "kube-proxy firewall rules" -j KUBE-PROXY-FIREWALL
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A OUTPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-OUT-FILTER
-A OUTPUT -j KUBE-FIREWALL
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A KUBE-NODE-PORT -m comment --comment "Kubernetes health check node port" -m set --match-set KUBE-HEALTH-CHECK-NODE-PORT dst -j ACCEPT
-A KUBE-PROXY-FIREWALL -m comment --comment "Kubernetes load balancer firewall" -m set --match-set KUBE-LOAD-BALANCER-FW dst,dst -j KUBE-SOURCE-RANGES-FIREWALL
-A KUBE-SOURCE-RANGES-FIREWALL -j DROP
-A KUBE-IPVS-FILTER -m set --match-set KUBE-LOAD-BALANCER dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-CLUSTER-IP dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT --reject-with icmp-port-unreachable
-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP
-A E2E-FOREIGN -p tcp --dport 9999 -j ACCEPT
COMMIT
*mangle
:KUBE-PROXY-CANARY - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
COMMIT
RULES

ip6tables-restore --noflush <<'RULES'
*nat
:KUBE-SERVICES - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-MARK-MASQ - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A KUBE-SERVICES -m set --match-set KUBE-6-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
COMMIT
*filter
:KUBE-FORWARD - [0:0]
:KUBE-IPVS-FILTER - [0:0]
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A INPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-FILTER
COMMIT
RULES
