#!/bin/bash
# Prepares the VM as a Kubernetes node: a pod bridge cbr0 (10.244.0.1/24),
# bridged traffic through iptables (br_netfilter: without it pod->VIP->pod
# replies bypass IPVS), forwarding on.
set -euo pipefail
modprobe br_netfilter
ip link add cbr0 type bridge
ip addr add 10.244.0.1/24 dev cbr0
ip link set cbr0 up
sysctl -qw net.bridge.bridge-nf-call-iptables=1
sysctl -qw net.ipv4.ip_forward=1
