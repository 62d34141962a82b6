#!/bin/bash
# The two-node testbed inside the one VM (test/e2e/framework/twonode.go).
#
#   node1     the VM's root namespace (cbr0 10.244.0.1/24, eth0 10.0.2.15),
#             plus eth1 192.168.200.11/24 on the underlay
#   node2     namespace node2: eth0 192.168.200.12/24, cbr0 10.244.1.1/24
#   underlay  namespace holding the switch br0 (no address, no netfilter of
#             any node sees its frames)
#   outside   namespace outside: eth0 192.168.200.100/24 (and .200, a second
#             client address), no route to the pod networks; Service
#             addresses are routed to a node as an L2/BGP load balancer would
#
# Pod routes between the nodes are host-gw: 10.244.1.0/24 via node2's
# underlay address on node1 and 10.244.0.0/24 via node1's on node2.
#
#   twonode.sh setup
#   twonode.sh pod-add NODENS NAME IP GW     (NODENS "-" = root namespace)
#   twonode.sh pod-del NAME
#   twonode.sh route DST VIA                 (in outside)
set -euo pipefail
op=$1
shift
case $op in
setup)
	modprobe br_netfilter
	ip netns add underlay
	ip -n underlay link set lo up
	ip -n underlay link add br0 type bridge
	ip -n underlay link set br0 up

	ip link add eth1 type veth peer name p-node1 netns underlay
	ip addr add 192.168.200.11/24 dev eth1
	ip link set eth1 up
	ip -n underlay link set p-node1 master br0
	ip -n underlay link set p-node1 up

	ip netns add node2
	ip -n node2 link set lo up
	ip -n node2 link add eth0 type veth peer name p-node2 netns underlay
	ip -n node2 addr add 192.168.200.12/24 dev eth0
	ip -n node2 link set eth0 up
	ip -n underlay link set p-node2 master br0
	ip -n underlay link set p-node2 up
	# A fixed MAC, as on node1 (node-setup.sh says why).
	ip -n node2 link add cbr0 address 02:00:0a:f4:01:01 type bridge
	ip -n node2 addr add 10.244.1.1/24 dev cbr0
	ip -n node2 link set cbr0 up
	ip netns exec node2 sysctl -qw net.ipv4.ip_forward=1
	ip netns exec node2 sysctl -qw net.bridge.bridge-nf-call-iptables=1
	ip netns exec node2 sysctl -qw net.ipv4.conf.all.rp_filter=0

	ip netns add outside
	ip -n outside link set lo up
	ip -n outside link add eth0 type veth peer name p-out netns underlay
	ip -n outside addr add 192.168.200.100/24 dev eth0
	ip -n outside addr add 192.168.200.200/24 dev eth0
	ip -n outside link set eth0 up
	ip -n underlay link set p-out master br0
	ip -n underlay link set p-out up

	# host-gw pod routes
	ip route add 10.244.1.0/24 via 192.168.200.12
	ip -n node2 route add 10.244.0.0/24 via 192.168.200.11
	;;
pod-add)
	ns=$1 name=$2 ip=$3 gw=$4
	inn() { if [[ $ns == - ]]; then "$@"; else ip netns exec "$ns" "$@"; fi; }
	host="v${name:0:13}"
	ip netns add "$name"
	inn ip link add "$host" type veth peer name eth0 netns "$name"
	inn ip link set "$host" master cbr0
	inn ip link set "$host" up
	inn ip link set "$host" type bridge_slave hairpin on
	ip -n "$name" link set lo up
	ip -n "$name" addr add "$ip/24" dev eth0
	ip -n "$name" link set eth0 up
	ip -n "$name" route add default via "$gw"
	# The node forgets a neighbour entry left by a deleted pod with the same
	# address (pod.sh says why).
	inn ip neigh del "$ip" dev cbr0 2>/dev/null || true
	;;
pod-del)
	ip netns del "$1"
	;;
route)
	ip -n outside route replace "$1" via "$2"
	;;
*)
	echo "twonode.sh: unknown op $op" >&2
	exit 2
	;;
esac
