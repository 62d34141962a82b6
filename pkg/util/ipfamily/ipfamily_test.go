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
