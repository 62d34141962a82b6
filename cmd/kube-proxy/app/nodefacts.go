package app

import (
	"net"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// nodeFacts are what the proxier is built from that only this node's Node object
// tells: its IPs (the primary family's first) and its spec.podCIDRs (read by
// detectLocalMode NodeCIDR). What the Node does not tell at start-up (the apiserver
// unreachable, the Node not registered yet or without addresses or podCIDRs) is
// assumed as upstream assumes it, and learnt later from the node watch
// (generation.go), which rebuilds the proxier for what it learns.
type nodeFacts struct {
	primary v1.IPFamily
	ips     map[v1.IPFamily]net.IP
	// ipsAssumed: neither the Node nor a specific bindAddress gave an address, so
	// ips is upstream's fallback, IPv4 loopback.
	ipsAssumed bool
	podCIDRs   []string
}

// startNodeFacts are the facts to start with: node's (nil when it could not be
// read), or the fallbacks for what it lacks.
func startNodeFacts(node *v1.Node, bindAddress string) nodeFacts {
	f := nodeFacts{}
	var ok bool
	if f.primary, f.ips, ok = nodeIPsOf(node, bindAddress); !ok {
		f.primary, f.ips, f.ipsAssumed = v1.IPv4Protocol, map[v1.IPFamily]net.IP{v1.IPv4Protocol: net.IPv4(127, 0, 0, 1)}, true
	}
	if node != nil {
		f.podCIDRs = slices.Clone(node.Spec.PodCIDRs)
	}
	return f
}

// learn returns f with what node tells: its IPs when it has any, its podCIDRs when
// it has some. What it does not tell (a Node deleted, or one whose addresses are
// gone for a moment) leaves f's value as it was: the proxier keeps what it knew.
func (f nodeFacts) learn(node *v1.Node, bindAddress string) nodeFacts {
	if primary, ips, ok := nodeIPsOf(node, bindAddress); ok {
		f.primary, f.ips, f.ipsAssumed = primary, ips, false
	}
	if node != nil && len(node.Spec.PodCIDRs) > 0 {
		f.podCIDRs = slices.Clone(node.Spec.PodCIDRs)
	}
	return f
}

// complete reports whether nothing the proxier is built from was assumed.
func (f nodeFacts) complete(nodeCIDR bool) bool {
	return !f.ipsAssumed && (!nodeCIDR || len(f.podCIDRs) > 0)
}

// changes names what the proxier would be built differently from in g: "nodeIPs"
// (the primary family or an address) and, in detectLocalMode NodeCIDR only,
// "podCIDRs". Empty when g builds the same proxier.
func (f nodeFacts) changes(g nodeFacts, nodeCIDR bool) []string {
	var out []string
	if f.primary != g.primary || f.ipsString() != g.ipsString() {
		out = append(out, "nodeIPs")
	}
	if nodeCIDR && !slices.Equal(f.podCIDRs, g.podCIDRs) {
		out = append(out, "podCIDRs")
	}
	return out
}

// ipsString prints the IPs primary family first, for logs and comparison:
// "10.0.2.15,fd00:10::15".
func (f nodeFacts) ipsString() string {
	var parts []string
	for _, fam := range []v1.IPFamily{f.primary, otherFamily(f.primary)} {
		if ip := f.ips[fam]; ip != nil {
			parts = append(parts, ip.String())
		}
	}
	return strings.Join(parts, ",")
}

// logValues are the facts as key/value pairs for a log line.
func (f nodeFacts) logValues(nodeCIDR bool) []any {
	kv := []any{"nodeIPs", f.ipsString(), "nodeIPsAssumed", f.ipsAssumed, "podCIDRs", f.podCIDRs}
	if nodeCIDR && len(f.podCIDRs) == 0 {
		kv = append(kv, "localTrafficDetection", "none until the Node has spec.podCIDRs")
	}
	return kv
}
