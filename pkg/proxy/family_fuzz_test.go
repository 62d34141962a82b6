package proxy

// Addresses: any, built by the fuzzer; the seeds use 10.0.0.0/8, 198.18.0.0/15,
// 203.0.113.0/24 and fd00::/8.

import (
	"fmt"
	"net"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	netutils "k8s.io/utils/net"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipfamily"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipset"
)

// addressForm writes the address a (4 or 16 bytes) in one of the textual forms the
// API server has accepted in Service fields (its legacy, sloppy parser: leading zeros
// in IPv4, IPv4-mapped and IPv4-compatible IPv6, IPv6 written out or compressed).
func addressForm(a net.IP, form uint8) string {
	v4 := a.To4()
	switch form % 7 {
	case 0: // the usual form of its family
		return a.String()
	case 1: // IPv4 with leading zeros ("010.001.002.003")
		if v4 == nil {
			return a.String()
		}
		return fmt.Sprintf("%03d.%03d.%03d.%03d", v4[0], v4[1], v4[2], v4[3])
	case 2: // IPv4-mapped, dotted ("::ffff:10.1.2.3")
		if v4 == nil {
			return a.String()
		}
		return "::ffff:" + v4.String()
	case 3: // IPv4-mapped, in hex groups ("::ffff:a01:203")
		if v4 == nil {
			return a.String()
		}
		return fmt.Sprintf("::ffff:%x:%x", uint16(v4[0])<<8|uint16(v4[1]), uint16(v4[2])<<8|uint16(v4[3]))
	case 4: // IPv4-mapped, written out ("0:0:0:0:0:ffff:10.1.2.3")
		if v4 == nil {
			return a.String()
		}
		return "0:0:0:0:0:ffff:" + v4.String()
	case 5: // IPv4-compatible (deprecated, IPv6): "::10.1.2.3"
		if v4 == nil {
			return a.String()
		}
		return "::" + v4.String()
	default: // IPv6 written out in full, upper case
		a16 := a.To16()
		groups := make([]string, 8)
		for i := range groups {
			groups[i] = fmt.Sprintf("%04X", uint16(a16[2*i])<<8|uint16(a16[2*i+1]))
		}
		return strings.Join(groups, ":")
	}
}

// FuzzAddressFamilyMatchesUpstream checks that an address or CIDR in any form the API
// server accepts is given to the family upstream gives it (k8s.io/utils/net, which
// classifies by the address: IPv4-mapped IPv6 is IPv4), and that a
// loadBalancerSourceRanges entry reaches exactly that family's proxier, in a form
// ipset accepts, and is left out by the other one without holding back the Service.
func FuzzAddressFamilyMatchesUpstream(f *testing.F) {
	f.Add([]byte{198, 18, 0, 0}, uint8(111), uint8(2))
	f.Add([]byte{10, 0, 0, 0}, uint8(104), uint8(3))
	f.Add([]byte{203, 0, 113, 0}, uint8(24), uint8(1))
	f.Add([]byte{203, 0, 113, 7}, uint8(128), uint8(4))
	f.Add([]byte{10, 1, 2, 3}, uint8(104), uint8(5))
	f.Add([]byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, uint8(64), uint8(6))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 0}, uint8(96), uint8(0))
	quietLogs(f)
	f.Fuzz(func(t *testing.T, raw []byte, prefix uint8, form uint8) {
		var a net.IP
		switch {
		case len(raw) >= 16:
			a = net.IP(raw[:16])
		case len(raw) >= 4:
			a = net.IPv4(raw[0], raw[1], raw[2], raw[3])
		default:
			return
		}
		addr := addressForm(a, form)

		// Addresses (clusterIPs, externalIPs, LoadBalancer ingress IPs).
		if ip := netutils.ParseIPSloppy(addr); ip != nil {
			if got, want := ipFamilyOf(ip), upstreamFamily(netutils.IPFamilyOf(ip)); got != want {
				t.Fatalf("address %q: family %s, upstream %s", addr, got, want)
			}
		}

		// CIDRs (loadBalancerSourceRanges).
		var cidr string
		if strings.Contains(addr, ":") {
			cidr = fmt.Sprintf("%s/%d", addr, prefix%129)
		} else {
			cidr = fmt.Sprintf("%s/%d", addr, prefix%33)
		}
		_, parsed, err := netutils.ParseCIDRSloppy(cidr)
		if err != nil {
			return // the API server refuses it too
		}
		upstream := upstreamFamily(netutils.IPFamilyOfCIDR(parsed))
		svc := &v1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ranges"},
			Spec: v1.ServiceSpec{
				Type:                     v1.ServiceTypeLoadBalancer,
				ClusterIP:                "10.96.0.10",
				ClusterIPs:               []string{"10.96.0.10", "fd00:96::10"},
				Ports:                    []v1.ServicePort{{Name: "p", Port: 80, Protocol: v1.ProtocolTCP, NodePort: 30080}},
				LoadBalancerSourceRanges: []string{cidr, "203.0.113.0/24", "fd00:203::/64"},
			},
			Status: v1.ServiceStatus{LoadBalancer: v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{
				{IP: "192.0.2.10"}, {IP: "fd00:192::10"},
			}}},
		}
		canonical := ipfamily.CanonicalCIDR(parsed)
		ones, _ := canonical.Mask.Size()
		for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
			m := serviceToServicePorts(svc, family, nil)
			if len(m) != 1 {
				t.Fatalf("%s: range %q: %d ports, want 1", family, cidr, len(m))
			}
			for _, info := range m {
				if info.ClusterIP == nil || len(info.LoadBalancerVIPs()) != 1 {
					t.Fatalf("%s: range %q held back the Service's addresses: %+v", family, cidr, info)
				}
				checkSourceRanges(t, family, cidr, canonical.String(), upstream == family, ones == 0, info)
			}
		}
	})
}

// checkSourceRanges checks one family's source ranges of a Service with the fuzzed
// range (canonical form want) and the two fixed ones.
func checkSourceRanges(t *testing.T, family v1.IPFamily, cidr, want string, ofFamily, allAddresses bool, info *ServicePortInfo) {
	t.Helper()
	var found bool
	for _, r := range info.LoadBalancerSourceRanges() {
		if cidrFamilyOf(r) != family {
			t.Fatalf("%s: range %s of the other family", family, r)
		}
		ipsetFamily := ipset.FamilyInet
		if family == v1.IPv6Protocol {
			ipsetFamily = ipset.FamilyInet6
		}
		entry := info.LoadBalancerVIPs()[0].String() + ",tcp:80," + r.String()
		if _, err := ipset.CanonicalEntry(ipset.HashIPPortNet, ipsetFamily, entry); err != nil {
			t.Fatalf("%s: range %q becomes an entry ipset refuses: %v", family, cidr, err)
		}
		found = found || r.String() == want
	}
	switch {
	case ofFamily && allAddresses:
		if len(info.LoadBalancerSourceRanges()) != 0 {
			t.Fatalf("%s: range %q allows every address, yet %v are filtered", family, cidr, info.LoadBalancerSourceRanges())
		}
	case ofFamily && !found:
		t.Fatalf("%s: range %q (%s) missing from %v", family, cidr, want, info.LoadBalancerSourceRanges())
	case !ofFamily && found:
		t.Fatalf("%s: range %q is the other family's (upstream), yet programmed here: %v", family, cidr, info.LoadBalancerSourceRanges())
	case !ofFamily && len(info.LoadBalancerSourceRanges()) != 1:
		t.Fatalf("%s: the other family's range %q changed this family's ranges: %v", family, cidr, info.LoadBalancerSourceRanges())
	}
}

// upstreamFamily turns k8s.io/utils/net's family ("4", "6") into the API's.
func upstreamFamily(f netutils.IPFamily) v1.IPFamily {
	switch f {
	case netutils.IPv4:
		return v1.IPv4Protocol
	case netutils.IPv6:
		return v1.IPv6Protocol
	}
	return ""
}
