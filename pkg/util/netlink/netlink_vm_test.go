//go:build vmtest

package netlink

// Real-kernel tests that need the dummy link type, which the development host
// lacks: built with -tags vmtest and run as root inside the test VM (hack/vmtest.sh).

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/testing/netns"
	vnl "github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func TestVMDummyDevice(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		c, err := New()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		checkDummyContract(t, c)
	})
}

// TestVMDummyDeviceLeftDown: kube-ipvs0 is created down, as upstream kube-proxy
// creates it, so it has no IPv6 link-local address; an existing link is left as
// it is (a link someone set up stays up).
func TestVMDummyDeviceLeftDown(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		c, err := New()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx := context.Background()
		if _, err := c.EnsureDummyDevice(ctx, DefaultDummyDevice); err != nil {
			t.Fatal(err)
		}
		l, err := vnl.LinkByName(DefaultDummyDevice)
		if err != nil {
			t.Fatal(err)
		}
		if l.Type() != "dummy" {
			t.Errorf("link type %q, want dummy", l.Type())
		}
		if l.Attrs().Flags&net.FlagUp != 0 {
			t.Errorf("%s is up, want it down as upstream leaves it", DefaultDummyDevice)
		}
		addrs, err := vnl.AddrList(l, unix.AF_UNSPEC)
		if err != nil {
			t.Fatal(err)
		}
		if len(addrs) != 0 {
			t.Errorf("fresh %s has addresses %v, want none", DefaultDummyDevice, addrs)
		}
		if err := vnl.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
		if existed, err := c.EnsureDummyDevice(ctx, DefaultDummyDevice); err != nil || !existed {
			t.Fatalf("EnsureDummyDevice on an existing link = %v, %v", existed, err)
		}
		if l, err = vnl.LinkByName(DefaultDummyDevice); err != nil || l.Attrs().Flags&net.FlagUp == 0 {
			t.Errorf("%s: an existing up link was changed (err %v)", DefaultDummyDevice, err)
		}
	})
}

// TestVMServiceAddressOnDownDummy: an address bound to the down kube-ipvs0 is a
// local address the node accepts connections on, in both families; this is what
// lets IPVS (at LOCAL_IN) see packets to a ClusterIP.
func TestVMServiceAddressOnDownDummy(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		c, err := New()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx := context.Background()
		if _, err := c.EnsureDummyDevice(ctx, DefaultDummyDevice); err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{"10.96.0.7", "fd00:96::7"} {
			ip := net.ParseIP(s)
			if _, err := c.EnsureAddressBind(ctx, ip, DefaultDummyDevice); err != nil {
				t.Fatal(err)
			}
			routes, err := localRoute(ip)
			if err != nil {
				t.Fatalf("route to %s: %v", s, err)
			}
			if len(routes) == 0 || routes[0].Type != unix.RTN_LOCAL {
				t.Errorf("route to %s = %+v, want a local route", s, routes)
			}
			addr := net.JoinHostPort(s, "8080")
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				t.Errorf("listening on %s bound to the down %s: %v", addr, DefaultDummyDevice, err)
				continue
			}
			go func() {
				if conn, err := ln.Accept(); err == nil {
					conn.Close()
				}
			}()
			conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Errorf("connecting to %s: %v", addr, err)
			} else {
				conn.Close()
			}
			ln.Close()
		}
		l, err := vnl.LinkByName(DefaultDummyDevice)
		if err != nil || l.Attrs().Flags&net.FlagUp != 0 {
			t.Errorf("%s is up after binding addresses (err %v)", DefaultDummyDevice, err)
		}
	})
}

func TestVMAddressContractOnDummy(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		setupContractLinks(t, "dev0")
		c, err := New()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx := context.Background()
		if _, err := c.EnsureDummyDevice(ctx, DefaultDummyDevice); err != nil {
			t.Fatal(err)
		}
		checkAddressContract(t, c, DefaultDummyDevice)
		checkBindAddressesContract(t, c, DefaultDummyDevice)
		// A service address bound to the (down) dummy device is a local address:
		// the kernel routes it to the host (table local), which IPVS needs.
		for _, s := range []string{"10.96.0.7", "fd00:96::7"} {
			if _, err := c.EnsureAddressBind(ctx, net.ParseIP(s), DefaultDummyDevice); err != nil {
				t.Fatal(err)
			}
			routes, err := localRoute(net.ParseIP(s))
			if err != nil {
				t.Fatalf("route to %s: %v", s, err)
			}
			if len(routes) == 0 || routes[0].Type != unix.RTN_LOCAL {
				t.Errorf("route to %s = %+v, want a local route", s, routes)
			}
		}
	})
}

// TestVMLocalAddressesIgnoreDummyCost: GetLocalAddresses runs on every sync,
// so it must not read kube-ipvs0's addresses (one per Service) from the
// kernel: with 3,000 of them bound it reads only the other links' addresses,
// and still returns exactly those.
func TestVMLocalAddressesIgnoreDummyCost(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		setupContractLinks(t, "dev0")
		dev0, err := vnl.LinkByName("dev0")
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{"192.0.2.10/24", "2001:db8::10/64"} {
			a, _ := vnl.ParseAddr(s)
			if err := vnl.AddrAdd(dev0, a); err != nil {
				t.Fatal(err)
			}
		}
		c, err := New()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if c.strict == nil {
			t.Fatal("no strict-check rtnetlink socket on this kernel (4.20+ has one)")
		}
		ctx := context.Background()
		if _, err := c.EnsureDummyDevice(ctx, DefaultDummyDevice); err != nil {
			t.Fatal(err)
		}
		for i := range 3000 {
			ip := net.IPv4(10, 96, byte(i/250), byte(1+i%250))
			if _, err := c.EnsureAddressBind(ctx, ip, DefaultDummyDevice); err != nil {
				t.Fatal(err)
			}
		}
		c.addrMessages = 0
		got, err := c.GetLocalAddresses(ctx, DefaultDummyDevice)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != "[192.0.2.1 192.0.2.10 2001:db8::1 2001:db8::10]" { // setupContractLinks put .1 and ::1
			t.Errorf("GetLocalAddresses = %v, want dev0's four addresses", got)
		}
		// dev0's four addresses, its IPv6 link-local one, lo's two.
		if c.addrMessages > 10 {
			t.Errorf("GetLocalAddresses read %d address messages with 3,000 addresses on %s: it must not dump the dummy's", c.addrMessages, DefaultDummyDevice)
		}
		t.Logf("%d address messages read", c.addrMessages)
	})
}

// TestVMWatchLocalAddresses: the address watch with a real dummy link as the
// excluded device (kube-ipvs0's role).
func TestVMWatchLocalAddresses(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		checkWatch(t, func(t *testing.T, name string) {
			if err := vnl.LinkAdd(&vnl.Dummy{LinkAttrs: vnl.LinkAttrs{Name: name}}); err != nil {
				t.Fatal(err)
			}
		})
	})
}

// localRoute asks the kernel for the route to ip, for up to 2 s: an IPv6 address's
// local route is installed shortly after the address, not with it.
func localRoute(ip net.IP) ([]vnl.Route, error) {
	deadline := time.Now().Add(2 * time.Second)
	for {
		routes, err := vnl.RouteGet(ip)
		if (err == nil && len(routes) > 0 && routes[0].Type == unix.RTN_LOCAL) || time.Now().After(deadline) {
			return routes, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
