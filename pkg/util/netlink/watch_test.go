package netlink

// Test addresses: 192.0.2.0/24 and 2001:db8::/64 on the node's links,
// 10.96.0.0/16 bound to the excluded device.

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/testing/netns"
	vnl "github.com/vishvananda/netlink"
)

// counter counts changed calls and lets a test wait for the next one.
type counter struct{ ch chan struct{} }

func newCounter() *counter { return &counter{ch: make(chan struct{}, 1<<16)} }

func (c *counter) changed() { c.ch <- struct{}{} }

// expect waits for at least one call and drains the others already made.
func (c *counter) expect(t *testing.T, what string) {
	t.Helper()
	select {
	case <-c.ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no change reported within 10 s", what)
	}
	c.drain(100 * time.Millisecond)
}

// expectNone fails if a call arrives within d.
func (c *counter) expectNone(t *testing.T, what string, d time.Duration) {
	t.Helper()
	if n := c.drain(d); n != 0 {
		t.Errorf("%s: %d changes reported, want none", what, n)
	}
}

func (c *counter) drain(d time.Duration) int {
	n := 0
	deadline := time.After(d)
	for {
		select {
		case <-c.ch:
			n++
		case <-deadline:
			return n
		}
	}
}

func TestFakeWatchLocalAddresses(t *testing.T) {
	f := NewFake()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	if err := f.WatchLocalAddresses(ctx, DefaultDummyDevice, func() { calls++ }); err != nil {
		t.Fatal(err)
	}
	step := func(what string, want int, fn func()) {
		t.Helper()
		before := calls
		fn()
		if got := calls - before; got != want {
			t.Errorf("%s: %d changes reported, want %d", what, got, want)
		}
	}
	step("AddLink eth0", 1, func() { f.AddLink("eth0", "192.0.2.1") })
	step("EnsureDummyDevice", 0, func() { f.EnsureDummyDevice(ctx, DefaultDummyDevice) })
	step("bind to the dummy", 0, func() { f.EnsureAddressBind(ctx, net.ParseIP("10.96.0.1"), DefaultDummyDevice) })
	step("unbind from the dummy", 0, func() { f.UnbindAddress(ctx, net.ParseIP("10.96.0.1"), DefaultDummyDevice) })
	step("bind to eth0", 1, func() { f.EnsureAddressBind(ctx, net.ParseIP("192.0.2.2"), "eth0") })
	step("bind to eth0 again", 0, func() { f.EnsureAddressBind(ctx, net.ParseIP("192.0.2.2"), "eth0") })
	step("unbind from eth0", 1, func() { f.UnbindAddress(ctx, net.ParseIP("192.0.2.2"), "eth0") })
	step("unbind an unbound address", 0, func() { f.UnbindAddress(ctx, net.ParseIP("192.0.2.2"), "eth0") })
	step("RemoveLink eth0", 1, func() { f.RemoveLink("eth0") })
	step("NotifyAddressChange", 1, f.NotifyAddressChange)
	cancel()
	step("after the context ended", 0, func() { f.AddLink("eth1", "192.0.2.3") })
}

// checkWatch drives a real subscription in the current (private) namespace:
// other is a link holding node addresses, excluded the link the watch ignores
// (kube-ipvs0's role); addExcluded creates the latter. Both are kept down, so
// the kernel adds no link-local addresses of its own.
func checkWatch(t *testing.T, addExcluded func(t *testing.T, name string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := vnl.LinkAdd(&vnl.Veth{LinkAttrs: vnl.LinkAttrs{Name: "other"}, PeerName: "other-peer"}); err != nil {
		t.Fatal(err)
	}
	other, err := vnl.LinkByName("other")
	if err != nil {
		t.Fatal(err)
	}
	addr := func(link vnl.Link, cidr string) {
		t.Helper()
		a, err := vnl.ParseAddr(cidr)
		if err != nil {
			t.Fatal(err)
		}
		if err := vnl.AddrAdd(link, a); err != nil {
			t.Fatalf("adding %s: %v", cidr, err)
		}
	}
	c, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The excluded link does not exist yet when the watch starts, as on a
	// node's first start.
	const excluded = "kpv-excl"
	n := newCounter()
	if err := c.WatchLocalAddresses(ctx, excluded, n.changed); err != nil {
		t.Fatal(err)
	}
	addr(other, "192.0.2.1/24")
	n.expect(t, "an address added to another link")
	addr(other, "2001:db8::1/64")
	n.expect(t, "an IPv6 address added to another link")

	addExcluded(t, excluded)
	n.drain(time.Second) // its creation may count as one change
	ex, err := vnl.LinkByName(excluded)
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	w := c.lastWatch
	c.mu.Unlock()
	w.mu.Lock()
	before := w.messages
	w.mu.Unlock()
	for i := range 500 {
		addr(ex, net.IPv4(10, 96, byte(i/250), byte(1+i%250)).String()+"/32")
	}
	n.expectNone(t, "500 addresses bound to the excluded link", time.Second)
	w.mu.Lock()
	delivered := w.messages - before
	w.mu.Unlock()
	// The socket filter drops them in the kernel.
	if delivered != 0 {
		t.Errorf("%d notifications of the excluded link reached the process, want 0 (socket filter)", delivered)
	}

	if err := vnl.AddrDel(other, &vnl.Addr{IPNet: &net.IPNet{IP: net.ParseIP("192.0.2.1"), Mask: net.CIDRMask(24, 32)}}); err != nil {
		t.Fatal(err)
	}
	n.expect(t, "an address removed from another link")
	got, err := c.GetLocalAddresses(ctx, excluded)
	if err != nil || len(got) != 1 || !got[0].Equal(net.ParseIP("2001:db8::1")) {
		t.Errorf("GetLocalAddresses = %v, %v; want [2001:db8::1]", got, err)
	}

	// Renamed away from the excluded name, its addresses are node addresses.
	if err := vnl.LinkSetName(ex, "kpv-renamed"); err != nil {
		t.Fatal(err)
	}
	n.expect(t, "the excluded link renamed")
	addr(ex, "10.97.0.1/32")
	n.expect(t, "an address added to the renamed link")

	cancel()
	time.Sleep(200 * time.Millisecond)
	n.drain(0)
	addr(other, "192.0.2.9/24")
	n.expectNone(t, "after the context ended", 500*time.Millisecond)
}

func TestIntegrationWatchLocalAddresses(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		// The host kernel has no dummy links: a veth end plays kube-ipvs0.
		checkWatch(t, func(t *testing.T, name string) {
			if err := vnl.LinkAdd(&vnl.Veth{LinkAttrs: vnl.LinkAttrs{Name: name}, PeerName: name + "-p"}); err != nil {
				t.Fatal(err)
			}
		})
	})
}

func TestAddressFilterShape(t *testing.T) {
	if p := addressFilter(-1); len(p) != 1 || p[0].K != 0xffffffff {
		t.Errorf("no excluded link: %+v, want accept all", p)
	}
	p := addressFilter(7)
	// Every jump lands inside the program, and it ends with accept.
	for i, ins := range p {
		if ins.Code&0x07 == 0x05 && (i+1+int(ins.Jt) >= len(p) || i+1+int(ins.Jf) >= len(p)) {
			t.Errorf("instruction %d jumps out of the program", i)
		}
	}
	if last := p[len(p)-1]; last.K != 0xffffffff {
		t.Errorf("last instruction %+v, want accept", last)
	}
}
