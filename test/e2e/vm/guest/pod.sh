#!/bin/bash
# Pods are network namespaces on cbr0.
#   pod.sh add NAME IP [IP6]   namespace NAME, eth0=IP/24 (and IP6/64) on a veth
#                              in cbr0 (hairpin on)
#   pod.sh del NAME
set -euo pipefail
op=$1 name=$2
host="v${name:0:13}"
# A new pod often reuses the address of one just deleted: the node's neighbour
# entry may still be REACHABLE with the old veth's MAC (for up to 45 s), and
# the node's packets would go to a MAC nobody has. A real CNI announces the
# new MAC; here the node forgets the old one.
forget() { ip neigh del "$1" dev cbr0 2>/dev/null || true; }
case $op in
add)
	ip=$3
	ip netns add "$name"
	ip link add "$host" type veth peer name eth0 netns "$name"
	ip link set "$host" master cbr0
	ip link set "$host" up
	# pod -> its own Service VIP -> back to itself crosses the bridge port twice.
	ip link set "$host" type bridge_slave hairpin on
	ip -n "$name" link set lo up
	ip -n "$name" addr add "$ip/24" dev eth0
	ip -n "$name" link set eth0 up
	ip -n "$name" route add default via 10.244.0.1
	forget "$ip"
	if [[ -n ${4:-} ]]; then
		ip -n "$name" -6 addr add "$4/64" dev eth0 nodad
		ip -n "$name" -6 route add default via fd00:244::1
		forget "$4"
	fi
	;;
del)
	ip netns del "$name"
	;;
*)
	echo "pod.sh: unknown op $op" >&2
	exit 2
	;;
esac
