package ipfamily

import (
	"net"
	"testing"
)

func TestHas(t *testing.T) {
	for _, c := range []struct {
		f    Family
		ip   string
		want bool
	}{
		{Any, "10.0.0.1", true}, {Any, "fd00::1", true},
		{IPv4, "10.0.0.1", true}, {IPv4, "fd00::1", false}, {IPv4, "::ffff:10.0.0.1", true},
		{IPv6, "10.0.0.1", false}, {IPv6, "fd00::1", true},
	} {
		if got := c.f.Has(net.ParseIP(c.ip)); got != c.want {
			t.Errorf("%d.Has(%s) = %v, want %v", c.f, c.ip, got, c.want)
		}
	}
}

func TestCIDRFamilyAndCanonicalForm(t *testing.T) {
	for _, c := range []struct {
		cidr   string
		family Family
		want   string
		inside string // an IPv4 or IPv6 address the canonical prefix holds
	}{
		{"10.0.0.0/8", IPv4, "10.0.0.0/8", "10.1.2.3"},
		{"fd00::/64", IPv6, "fd00::/64", "fd00::1"},
		{"::ffff:198.18.0.0/111", IPv4, "198.18.0.0/15", "198.19.255.255"},
		{"::ffff:10.0.0.0/104", IPv4, "10.0.0.0/8", "10.200.0.1"},
		{"::ffff:0.0.0.0/96", IPv4, "0.0.0.0/0", "203.0.113.9"},
		{"::ffff:10.1.2.3/128", IPv4, "10.1.2.3/32", "10.1.2.3"},
		{"::ffff:0:0/95", IPv6, "::fffe:0:0/95", "::fffe:0:1"},
		{"::10.0.0.0/104", IPv6, "::a00:0/104", "::a00:1"},
	} {
		_, n, err := net.ParseCIDR(c.cidr)
		if err != nil {
			t.Fatal(err)
		}
		if got := OfCIDR(n); got != c.family {
			t.Errorf("OfCIDR(%s) = %d, want %d", c.cidr, got, c.family)
		}
		cn := CanonicalCIDR(n)
		if cn.String() != c.want {
			t.Errorf("CanonicalCIDR(%s) = %s, want %s", c.cidr, cn, c.want)
		}
		if !cn.Contains(net.ParseIP(c.inside)) {
			t.Errorf("CanonicalCIDR(%s) = %s does not hold %s", c.cidr, cn, c.inside)
		}
		if (len(cn.IP) == net.IPv4len) != (c.family == IPv4) || len(cn.IP) != len(cn.Mask) {
			t.Errorf("CanonicalCIDR(%s): address %d bytes, mask %d bytes", c.cidr, len(cn.IP), len(cn.Mask))
		}
	}
}
