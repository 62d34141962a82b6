package app

// Addresses: 10.0.0.0/8, 192.0.2.0/24 (TEST-NET-1), fd00::/8.

import (
	"net"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
)

// TestCIDRsClassifiedByAddress: nodePortAddresses and excludeCIDRs are split by
// family as upstream splits them (by the address: an IPv4-mapped IPv6 CIDR is IPv4),
// in the canonical form the proxier matches IPv4 addresses against.
func TestCIDRsClassifiedByAddress(t *testing.T) {
	list := []string{"primary", "::ffff:192.0.2.0/120", "10.0.0.0/8", "fd00::/64", "::ffff:0:0/95"}
	if diff := cmp.Diff([]string{"primary", "192.0.2.0/24", "10.0.0.0/8"}, familyCIDRs(list, v1.IPv4Protocol)); diff != "" {
		t.Errorf("IPv4 (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"primary", "fd00::/64", "::fffe:0:0/95"}, familyCIDRs(list, v1.IPv6Protocol)); diff != "" {
		t.Errorf("IPv6 (-want +got):\n%s", diff)
	}
	if got := nodePortListenIPs([]string{"::ffff:192.0.2.7/128"}, v1.IPv4Protocol); len(got) != 1 || !got[0].Equal(net.ParseIP("192.0.2.7")) {
		t.Errorf("listen IPs of an IPv4-mapped host CIDR: %v", got)
	}
	cidrs, err := parseCIDRs([]string{"::ffff:192.0.2.0/120"})
	if err != nil {
		t.Fatal(err)
	}
	if !cidrs[0].Contains(net.ParseIP("192.0.2.9").To4()) || cidrs[0].String() != "192.0.2.0/24" {
		t.Errorf("excludeCIDR %s does not hold 192.0.2.9 as IPv4", cidrs[0])
	}
}
