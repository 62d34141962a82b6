#!/bin/bash
# Prepares the VM as a dual-stack Kubernetes node: a pod bridge cbr0
# (10.244.0.1/24, fd00:244::1/64), bridged traffic through iptables and
# ip6tables (br_netfilter: without it pod->VIP->pod replies bypass IPVS),
# forwarding on in both families, and the node's IPv6 address fd00:10::15/64
# on eth0 (beside 10.0.2.15).
set -euo pipefail
modprobe br_netfilter
# A fixed MAC: a bridge without one takes its lowest port's MAC, so adding
# or deleting a pod changes the gateway's MAC under the pods that learnt the
# old one; their frames then go to a MAC nobody answers (seen as a pod that
# cannot reach its gateway or any Service after another pod went away). CNI
# bridge plugins fix the bridge's MAC for the same reason.
ip link add cbr0 address 02:00:0a:f4:00:01 type bridge
ip addr add 10.244.0.1/24 dev cbr0
ip -6 addr add fd00:244::1/64 dev cbr0 nodad
ip link set cbr0 up
ip -6 addr add fd00:10::15/64 dev eth0 nodad
sysctl -qw net.bridge.bridge-nf-call-iptables=1
sysctl -qw net.bridge.bridge-nf-call-ip6tables=1
sysctl -qw net.ipv4.ip_forward=1
sysctl -qw net.ipv6.conf.all.forwarding=1
