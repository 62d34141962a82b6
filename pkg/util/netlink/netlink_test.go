package netlink

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/testing/netns"
	vnl "github.com/vishvananda/netlink"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipfamily"
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
		got, err := c.ListBindAddress(ctx, "dev0", ipfamily.Any)
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

// TestIntegrationAddressWritesLookUpTheLinkOnce: binding and unbinding many
// addresses looks the link up once, not once per address; a link deleted and
// made again under the same name (a new index) is found again by the next write,
// and a link that is gone is reported as not found.
func TestIntegrationAddressWritesLookUpTheLinkOnce(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		ctx := context.Background()
		setupContractLinks(t, "dev0")
		c, err := New()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for i := 1; i <= 20; i++ {
			if _, err := c.EnsureAddressBind(ctx, net.ParseIP(fmt.Sprintf("10.96.0.%d", i)), "dev0"); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.UnbindAddress(ctx, net.ParseIP("10.96.0.1"), "dev0"); err != nil {
			t.Fatal(err)
		}
		if c.linkLookups != 1 {
			t.Errorf("21 address writes looked the link up %d times, want 1", c.linkLookups)
		}
		got, err := c.ListBindAddress(ctx, "dev0", ipfamily.Any)
		if err != nil || len(got) != 19 {
			t.Fatalf("dev0 holds %v (%v), want 19 addresses", got, err)
		}

		// The link made again: a new index.
		if err := vnl.LinkDel(&vnl.Veth{LinkAttrs: vnl.LinkAttrs{Name: "dev0"}}); err != nil {
			t.Fatal(err)
		}
		if err := vnl.LinkAdd(&vnl.Veth{LinkAttrs: vnl.LinkAttrs{Name: "dev0"}, PeerName: "peer0"}); err != nil {
			t.Fatal(err)
		}
		if existed, err := c.EnsureAddressBind(ctx, net.ParseIP("10.96.0.1"), "dev0"); err != nil || existed {
			t.Fatalf("binding on the new dev0: existed %v, %v", existed, err)
		}
		if got, err := c.ListBindAddress(ctx, "dev0", ipfamily.Any); err != nil || len(got) != 1 || !got[0].Equal(net.ParseIP("10.96.0.1")) {
			t.Fatalf("the new dev0 holds %v (%v), want 10.96.0.1", got, err)
		}
		if c.linkLookups != 2 {
			t.Errorf("link lookups %d, want 2 (once more for the new link)", c.linkLookups)
		}

		// Gone: not found, from either write.
		if err := vnl.LinkDel(&vnl.Veth{LinkAttrs: vnl.LinkAttrs{Name: "dev0"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.EnsureAddressBind(ctx, net.ParseIP("10.96.0.2"), "dev0"); !IsNotFound(err) {
			t.Errorf("binding on a missing link: %v, want not found", err)
		}
		if err := c.UnbindAddress(ctx, net.ParseIP("10.96.0.1"), "dev0"); !IsNotFound(err) {
			t.Errorf("unbinding on a missing link: %v, want not found", err)
		}
	})
}

// TestAddrsOfLinksSkipsVanishedLinks: a link whose dump answers ENODEV was
// deleted after the link list and has no address; any other error fails.
func TestAddrsOfLinksSkipsVanishedLinks(t *testing.T) {
	link := func(index int, name string) vnl.Link {
		return &vnl.Veth{LinkAttrs: vnl.LinkAttrs{Index: index, Name: name}}
	}
	links := []vnl.Link{link(1, "lo"), link(2, "eth0"), link(3, "veth-gone"), link(4, "kube-ipvs0")}
	addr := func(cidr string) vnl.Addr {
		a, err := vnl.ParseAddr(cidr)
		if err != nil {
			t.Fatal(err)
		}
		return *a
	}
	var asked []int
	got, err := addrsOfLinks(links, 4, func(index int) ([]vnl.Addr, error) {
		asked = append(asked, index)
		switch index {
		case 2:
			return []vnl.Addr{addr("192.0.2.1/24")}, nil
		case 3:
			return nil, fmt.Errorf("dump: %w", unix.ENODEV)
		}
		return nil, nil
	})
	if err != nil {
		t.Fatalf("addrsOfLinks = %v, want no error for a vanished link", err)
	}
	if len(got) != 1 || !got[0].IP.Equal(net.ParseIP("192.0.2.1")) {
		t.Errorf("addrsOfLinks = %v, want eth0's 192.0.2.1", got)
	}
	if fmt.Sprint(asked) != "[1 2 3]" {
		t.Errorf("dumped links %v, want [1 2 3] (not the excluded 4)", asked)
	}
	_, err = addrsOfLinks(links, 4, func(index int) ([]vnl.Addr, error) {
		if index == 2 {
			return nil, unix.EPERM
		}
		return nil, nil
	})
	if err == nil || !strings.Contains(err.Error(), "eth0") {
		t.Errorf("addrsOfLinks with EPERM on eth0 = %v, want an error naming eth0", err)
	}
}

// TestIntegrationLocalAddressesWhileALinkIsDeleted: a link deleted between
// GetLocalAddresses' link list and its address dumps (a pod's veth going away
// during a sync) leaves the others' addresses and no error. Seen in the
// conformance cluster: each such sync failed and was retried as a full one.
func TestIntegrationLocalAddressesWhileALinkIsDeleted(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		setupContractLinks(t, "dev0")
		gone := &vnl.Veth{LinkAttrs: vnl.LinkAttrs{Name: "gone0"}, PeerName: "gone1"}
		if err := vnl.LinkAdd(gone); err != nil {
			t.Fatal(err)
		}
		c, err := New()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if c.strict == nil {
			t.Fatal("this kernel has no strict address dumps (4.20+): the per-link path is not the one under test")
		}
		deleted := false
		c.linksListed = func() {
			l, err := vnl.LinkByName("gone0")
			if err != nil {
				t.Fatal(err)
			}
			if err := vnl.LinkDel(l); err != nil {
				t.Fatal(err)
			}
			deleted = true
		}
		got, err := c.GetLocalAddresses(context.Background(), "dev0")
		if err != nil {
			t.Fatalf("GetLocalAddresses with a link deleted after the link list = %v", err)
		}
		if !deleted {
			t.Fatal("the link was not deleted between the list and the dumps")
		}
		if len(got) != 2 || !got[0].Equal(net.ParseIP("192.0.2.1")) || !got[1].Equal(net.ParseIP("2001:db8::1")) {
			t.Errorf("GetLocalAddresses = %v, want other's 192.0.2.1 and 2001:db8::1", got)
		}
	})
}
