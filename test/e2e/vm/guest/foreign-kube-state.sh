#!/bin/bash
# Recreates on the node what upstream kube-proxy's iptables and nftables modes
# leave behind (which `kube-proxy --cleanup` must remove) next to state of other
# software that also uses the KUBE- prefix (which it must keep):
#   - upstream iptables mode: nat KUBE-SERVICES / KUBE-NODEPORTS / KUBE-POSTROUTING /
#     KUBE-MARK-MASQ / KUBE-PROXY-CANARY, per-Service KUBE-SVC-/KUBE-SEP-/KUBE-EXT-/
#     KUBE-SVL-/KUBE-FW- chains (16-character base32 hashes), filter KUBE-SERVICES /
#     KUBE-EXTERNAL-SERVICES / KUBE-NODEPORTS / KUBE-FORWARD / KUBE-PROXY-FIREWALL /
#     KUBE-PROXY-CANARY, mangle KUBE-PROXY-CANARY, with upstream's jump rules;
#   - upstream nftables mode: the tables "ip kube-proxy" and "ip6 kube-proxy";
#   - kube-router (kept): ipsets KUBE-SRC-* / KUBE-DST-* / KUBE-ROUTER-LOCAL-IPS,
#     chains KUBE-ROUTER-INPUT / KUBE-ROUTER-FORWARD / KUBE-POD-FW-* / KUBE-NWPLCY-*
#     using them, nat KUBE-ROUTER-HAIRPIN; a KUBE-SVC- look-alike that is not a
#     hash name; an nftables table "ip e2e-foreign".
set -euo pipefail

iptables-restore --noflush <<'RULES'
*nat
:KUBE-SERVICES - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-PROXY-CANARY - [0:0]
:KUBE-SVC-ERIFXISQEP7F7OF4 - [0:0]
:KUBE-SVL-ERIFXISQEP7F7OF4 - [0:0]
:KUBE-EXT-ERIFXISQEP7F7OF4 - [0:0]
:KUBE-FW-ERIFXISQEP7F7OF4 - [0:0]
:KUBE-SEP-Z6JCHCWTSDXQNTWQ - [0:0]
:KUBE-ROUTER-HAIRPIN - [0:0]
:KUBE-SVC-ROUTERLOOKALIKE - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A POSTROUTING -m comment --comment "kube-router hairpin" -j KUBE-ROUTER-HAIRPIN
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
-A KUBE-SERVICES -d 10.96.123.4/32 -p tcp -m comment --comment "default/web cluster IP" -m tcp --dport 80 -j KUBE-SVC-ERIFXISQEP7F7OF4
-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
-A KUBE-NODEPORTS -p tcp -m comment --comment "default/web" -m tcp --dport 30123 -j KUBE-EXT-ERIFXISQEP7F7OF4
-A KUBE-EXT-ERIFXISQEP7F7OF4 -j KUBE-SVC-ERIFXISQEP7F7OF4
-A KUBE-SVC-ERIFXISQEP7F7OF4 ! -s 10.244.0.0/16 -d 10.96.123.4/32 -p tcp -m tcp --dport 80 -j KUBE-MARK-MASQ
-A KUBE-SVC-ERIFXISQEP7F7OF4 -j KUBE-SEP-Z6JCHCWTSDXQNTWQ
-A KUBE-SEP-Z6JCHCWTSDXQNTWQ -s 10.244.0.251/32 -j KUBE-MARK-MASQ
-A KUBE-SEP-Z6JCHCWTSDXQNTWQ -p tcp -m tcp -j DNAT --to-destination 10.244.0.251:8080
-A KUBE-ROUTER-HAIRPIN -j RETURN
-A KUBE-SVC-ROUTERLOOKALIKE -j RETURN
COMMIT
*filter
:KUBE-SERVICES - [0:0]
:KUBE-EXTERNAL-SERVICES - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
:KUBE-PROXY-CANARY - [0:0]
:KUBE-ROUTER-INPUT - [0:0]
:KUBE-ROUTER-FORWARD - [0:0]
:KUBE-POD-FW-XY3QPEMSFBYW4NXR - [0:0]
:KUBE-NWPLCY-LBFODUCDZ4KNAEPD - [0:0]
-A INPUT -m comment --comment "kube-router netpol" -j KUBE-ROUTER-INPUT
-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A INPUT -m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS
-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES
-A FORWARD -m comment --comment "kube-router netpol" -j KUBE-ROUTER-FORWARD
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES
-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-SERVICES -d 10.96.123.5/32 -p tcp -m comment --comment "default/empty has no endpoints" -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
-A KUBE-ROUTER-INPUT -j KUBE-POD-FW-XY3QPEMSFBYW4NXR
-A KUBE-ROUTER-FORWARD -j KUBE-POD-FW-XY3QPEMSFBYW4NXR
-A KUBE-POD-FW-XY3QPEMSFBYW4NXR -j KUBE-NWPLCY-LBFODUCDZ4KNAEPD
COMMIT
*mangle
:KUBE-PROXY-CANARY - [0:0]
COMMIT
RULES

for s in KUBE-SRC-QHFSCNLEDHCOY6AN KUBE-DST-VXGMXAR5CU2IZTVI KUBE-ROUTER-LOCAL-IPS; do
	ipset create "$s" hash:ip family inet
done
ipset add KUBE-DST-VXGMXAR5CU2IZTVI 10.244.0.252
iptables -A KUBE-NWPLCY-LBFODUCDZ4KNAEPD -m set --match-set KUBE-SRC-QHFSCNLEDHCOY6AN src -m set --match-set KUBE-DST-VXGMXAR5CU2IZTVI dst -j ACCEPT

nft add table ip kube-proxy
nft 'add chain ip kube-proxy services { type nat hook prerouting priority -100 ; }'
nft add table ip6 kube-proxy
nft add table ip e2e-foreign

# IPVS as upstream's ipvs mode leaves it (removed): a ClusterIP virtual server on
# kube-ipvs0 and a node port one on the node's own address, its port in
# KUBE-NODE-PORT-TCP; beside them (kept) a keepalived virtual server on the same
# port whose VIP another node holds (not an address of this node).
ipset create KUBE-NODE-PORT-TCP bitmap:port range 0-65535
ipset add KUBE-NODE-PORT-TCP 30123
ip link add kube-ipvs0 type dummy
ip addr add 10.96.123.4/32 dev kube-ipvs0
ipvsadm -A -t 10.96.123.4:80 -s rr
ipvsadm -a -t 10.96.123.4:80 -r 10.244.0.251:8080 -m
ipvsadm -A -t 10.0.2.15:30123 -s rr
ipvsadm -a -t 10.0.2.15:30123 -r 10.244.0.251:8080 -m
ipvsadm -A -t 192.0.2.80:30123 -s wrr
ipvsadm -a -t 192.0.2.80:30123 -r 10.244.0.250:8080 -m -w 2

# Calico (kept): cali-* chains in filter and nat with its jumps from the built-in
# chains, and an ipset its rules use.
ipset create cali40all-ipam-pools hash:net family inet
ipset add cali40all-ipam-pools 10.244.0.0/16
iptables-restore --noflush <<'RULES'
*filter
:cali-INPUT - [0:0]
:cali-FORWARD - [0:0]
:cali-fw-cali1234567890a - [0:0]
-I INPUT 1 -m comment --comment "cali:Cz_u1IQiXIMmKD4c" -j cali-INPUT
-I FORWARD 1 -m comment --comment "cali:wUHhoiAYhphO9Mso" -j cali-FORWARD
-A cali-FORWARD -o cali1234567890a -m comment --comment "cali:to-wl-dispatch" -j cali-fw-cali1234567890a
-A cali-fw-cali1234567890a -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A cali-INPUT -m comment --comment "cali:msRIDfJRWnYwzW4g" -j ACCEPT
COMMIT
*nat
:cali-nat-outgoing - [0:0]
-A POSTROUTING -m comment --comment "cali:O3lYWMrLQYEMJtB5" -j cali-nat-outgoing
-A cali-nat-outgoing -m set --match-set cali40all-ipam-pools src -m set ! --match-set cali40all-ipam-pools dst -j MASQUERADE
COMMIT
RULES
