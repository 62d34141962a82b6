#!/bin/bash
# Prepares the VM as a dual-stack Kubernetes node: a pod bridge cbr0
# (10.244.0.1/24, fd00:244::1/64), bridged traffic through iptables and
# ip6tables (br_netfilter: without it pod->VIP->pod replies bypass IPVS),
# forwarding on in both families, and the node's IPv6 address fd00:10::15/64
# on eth0 (beside 10.0.2.15).
set -euo pipefail
modprobe br_netfilter
ip link add cbr0 type bridge
ip addr add 10.244.0.1/24 dev cbr0
ip -6 addr add fd00:244::1/64 dev cbr0 nodad
ip link set cbr0 up
ip -6 addr add fd00:10::15/64 dev eth0 nodad
sysctl -qw net.bridge.bridge-nf-call-iptables=1
sysctl -qw net.bridge.bridge-nf-call-ip6tables=1
sysctl -qw net.ipv4.ip_forward=1
sysctl -qw net.ipv6.conf.all.forwarding=1
