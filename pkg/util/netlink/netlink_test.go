package netlink

import (
	"context"
	"net"
	"testing"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/testing/netns"
	vnl "github.com/vishvananda/netlink"
)

// setupContractLinks creates, in the current (private) namespace, the links the
// contract expects: dev (a veth end, as this host kernel has no dummy link type)
// and "other" with 192.0.2.1/24 and 2001:db8::1/64. Both are up, so the kernel
// gives them IPv6 link-local addresses, which must not show up in the results.
func setupContractLinks(t *testing.T, dev string) {
	t.Helper()
	veth := &vnl.Veth{LinkAttrs: vnl.LinkAttrs{Name: dev}, PeerName: "other"}
	if err := vnl.LinkAdd(veth); err != nil {
		t.Fatalf("creating veth pair: %v", err)
	}
	other, err := vnl.LinkByName("other")
	if err != nil {
		t.Fatal(err)
	}
	for _, cidr := range []string{"192.0.2.1/24", "2001:db8::1/64"} {
		a, err := vnl.ParseAddr(cidr)
		if err != nil {
			t.Fatal(err)
		}
		a.Flags = 0x80 // IFA_F_NODAD: no tentative phase for the test address
		if err := vnl.AddrAdd(other, a); err != nil {
			t.Fatalf("adding %s: %v", cidr, err)
		}
	}
	for _, name := range []string{dev, "other"} {
		l, err := vnl.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := vnl.LinkSetUp(l); err != nil {
			t.Fatalf("setting %s up: %v", name, err)
		}
	}
}

func TestIntegrationAddressContract(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		setupContractLinks(t, "dev0")
		c, err := New()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// Wait for nothing: link-local addresses may or may not exist yet, and the
		// contract must hold either way.
		checkAddressContract(t, c, "dev0")
	})
}

// TestIntegrationLinkLocalFiltered makes sure the kernel's own IPv6 link-local
// address on an up link is left out of ListBindAddress and GetLocalAddresses.
func TestIntegrationLinkLocalFiltered(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		setupContractLinks(t, "dev0")
		l, err := vnl.LinkByName("dev0")
		if err != nil {
			t.Fatal(err)
		}
		ll, err := vnl.ParseAddr("fe80::99/64")
		if err != nil {
			t.Fatal(err)
		}
		if err := vnl.AddrAdd(l, ll); err != nil {
			t.Fatal(err)
		}
		c, err := New()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx := context.Background()
		got, err := c.ListBindAddress(ctx, "dev0")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 0 {
			t.Errorf("ListBindAddress = %v, want no addresses", got)
		}
		all, err := c.GetLocalAddresses(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, ip := range all {
			if ip.IsLinkLocalUnicast() && ip.To4() == nil || ip.IsLoopback() {
				t.Errorf("GetLocalAddresses returned %s", ip)
			}
		}
		if len(all) != 2 || !all[0].Equal(net.ParseIP("192.0.2.1")) {
			t.Errorf("GetLocalAddresses = %v", all)
		}
	})
}

// TestIntegrationBindRefusalContract: the host kernel's bind refusals on an up
// veth end, the table TestFakeBindRefusalContract runs.
func TestIntegrationBindRefusalContract(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		setupContractLinks(t, "dev0")
		c, err := New()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		checkBindRefusalContract(t, c, "dev0")
	})
}
