package netlink

import (
	"context"
	"fmt"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/fakeops"
	"net"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipfamily"
)

// Operation names counted by Fake.Ops and accepted by Fake.InjectError.
const (
	OpEnsureDummy = "EnsureDummy"
	OpDeleteDummy = "DeleteDummy"
	OpBind        = "Bind"
	OpUnbind      = "Unbind"
	OpListBind    = "ListBind"
	OpListLocal   = "ListLocal"
	OpWatch       = "Watch"
)

type fakeLink struct {
	dummy bool
	addrs map[string]net.IP
}

// Fake is an in-memory Handle with the kernel's answers: a missing link is ENODEV
// (IsNotFound) except for DeleteDummyDevice, binding a bound address reports
// "already bound", unbinding an unbound address succeeds. Node interfaces are set
// up with AddLink. A failed call changes nothing.
//
// Binds are refused as the kernel refuses them on any link but lo, whatever its
// type and state (ipv6_add_addr), with EADDRNOTAVAIL (IsAddressNotAvailable):
// IPv6 multicast, :: and ::1 (on the link named "lo" ::1 is accepted). IPv6
// link-local addresses are bound (and left out of ListBindAddress, as the Client
// does). The kernel binds any IPv4 address: multicast, 255.255.255.255,
// 0.0.0.0 and 127.0.0.0/8 included, so the Fake does too.
// TestFakeBindRefusalContract, TestIntegrationBindRefusalContract (an up veth,
// host kernel) and TestVMBindRefusalContract (the down dummy, in the VM) prove
// each rule.
type Fake struct {
	mu               sync.Mutex
	links            map[string]*fakeLink
	watches          []*fakeWatch
	fakeops.Recorder // Ops, ResetOps, InjectError
}

var _ Handle = &Fake{}

// NewFake returns a Fake with no links.
func NewFake() *Fake {
	return &Fake{links: map[string]*fakeLink{}}
}

// AddLink adds (or replaces) a non-dummy link holding the given addresses, e.g.
// AddLink("eth0", "10.0.0.5", "fd00::5") or AddLink("lo", "127.0.0.1", "::1").
func (f *Fake) AddLink(name string, ips ...string) {
	f.mu.Lock()
	defer f.notify(name)
	defer f.mu.Unlock()
	l := &fakeLink{addrs: map[string]net.IP{}}
	for _, s := range ips {
		ip := net.ParseIP(s)
		if ip == nil {
			panic(fmt.Sprintf("netlink.Fake.AddLink: invalid IP %q", s))
		}
		l.addrs[ip.String()] = normalizeIP(ip)
	}
	f.links[name] = l
}

// RemoveLink deletes a link and its addresses, as `ip link del` does.
func (f *Fake) RemoveLink(name string) {
	f.mu.Lock()
	defer f.notify(name)
	defer f.mu.Unlock()
	delete(f.links, name)
}

// NotifyAddressChange calls every watcher as the kernel's notification socket
// does when notifications were lost (an overrun): nothing may have changed.
func (f *Fake) NotifyAddressChange() {
	f.notify("")
}

type fakeWatch struct {
	ctx        context.Context
	excludeDev string
	changed    func()
}

// WatchLocalAddresses registers changed; the Fake calls it synchronously, after
// its lock is released, for every AddLink, RemoveLink, bind and unbind on a
// link other than excludeDev, and for NotifyAddressChange.
func (f *Fake) WatchLocalAddresses(ctx context.Context, excludeDev string, changed func()) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, OpWatch); err != nil {
		return fmt.Errorf("subscribing to address notifications: %w", err)
	}
	f.watches = append(f.watches, &fakeWatch{ctx: ctx, excludeDev: excludeDev, changed: changed})
	return nil
}

// notify calls the live watchers that do not exclude dev ("" calls all).
// Callers must not hold f.mu.
func (f *Fake) notify(dev string) {
	f.mu.Lock()
	var call []func()
	live := f.watches[:0]
	for _, w := range f.watches {
		if w.ctx.Err() != nil {
			continue
		}
		live = append(live, w)
		if dev == "" || dev != w.excludeDev {
			call = append(call, w.changed)
		}
	}
	clear(f.watches[len(live):]) // a pruned watch must not stay reachable
	f.watches = live
	f.mu.Unlock()
	for _, fn := range call {
		fn()
	}
}

func (f *Fake) begin(ctx context.Context, op string) error {
	return f.Recorder.Begin(ctx, op)
}

func (f *Fake) link(dev string) (*fakeLink, error) {
	l, ok := f.links[dev]
	if !ok {
		return nil, fmt.Errorf("finding link %s: %w", dev, unix.ENODEV)
	}
	return l, nil
}

func (f *Fake) EnsureDummyDevice(ctx context.Context, dev string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, OpEnsureDummy); err != nil {
		return false, fmt.Errorf("creating dummy link %s: %w", dev, err)
	}
	if _, ok := f.links[dev]; ok {
		return true, nil
	}
	f.links[dev] = &fakeLink{dummy: true, addrs: map[string]net.IP{}}
	return false, nil
}

func (f *Fake) DeleteDummyDevice(ctx context.Context, dev string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, OpDeleteDummy); err != nil {
		return fmt.Errorf("deleting dummy link %s: %w", dev, err)
	}
	delete(f.links, dev)
	return nil
}

func (f *Fake) EnsureAddressBind(ctx context.Context, ip net.IP, dev string) (bool, error) {
	if _, err := hostNet(ip); err != nil {
		return false, fmt.Errorf("binding address to %s: %w", dev, err)
	}
	changed := false
	defer func() {
		if changed {
			f.notify(dev)
		}
	}()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, OpBind); err != nil {
		return false, fmt.Errorf("binding address %s to %s: %w", ip, dev, err)
	}
	l, err := f.link(dev)
	if err != nil {
		return false, fmt.Errorf("binding address %s: %w", ip, err)
	}
	if _, ok := l.addrs[ip.String()]; ok {
		return true, nil
	}
	if !kernelBinds(ip, dev) {
		return false, fmt.Errorf("binding address %s to %s: %w", ip, dev, unix.EADDRNOTAVAIL)
	}
	l.addrs[ip.String()] = normalizeIP(append(net.IP(nil), ip...))
	changed = true
	return false, nil
}

// BindAddresses is EnsureAddressBind for each address, one operation each.
func (f *Fake) BindAddresses(ctx context.Context, ips []net.IP, dev string) []error {
	errs := make([]error, len(ips))
	for i, ip := range ips {
		_, errs[i] = f.EnsureAddressBind(ctx, ip, dev)
	}
	return errs
}

func (f *Fake) UnbindAddress(ctx context.Context, ip net.IP, dev string) error {
	if _, err := hostNet(ip); err != nil {
		return fmt.Errorf("unbinding address from %s: %w", dev, err)
	}
	changed := false
	defer func() {
		if changed {
			f.notify(dev)
		}
	}()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, OpUnbind); err != nil {
		return fmt.Errorf("unbinding address %s from %s: %w", ip, dev, err)
	}
	l, err := f.link(dev)
	if err != nil {
		return fmt.Errorf("unbinding address %s: %w", ip, err)
	}
	if _, ok := l.addrs[ip.String()]; ok {
		delete(l.addrs, ip.String())
		changed = true
	}
	return nil
}

func (f *Fake) ListBindAddress(ctx context.Context, dev string, af ipfamily.Family) ([]net.IP, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, OpListBind); err != nil {
		return nil, fmt.Errorf("listing addresses of %s: %w", dev, err)
	}
	l, err := f.link(dev)
	if err != nil {
		return nil, fmt.Errorf("listing addresses: %w", err)
	}
	var out []net.IP
	for _, ip := range l.addrs {
		if (ip.To4() != nil || !ip.IsLinkLocalUnicast()) && af.Has(ip) {
			out = append(out, append(net.IP(nil), ip...))
		}
	}
	return sortIPs(out), nil
}

func (f *Fake) GetLocalAddresses(ctx context.Context, excludeDev string) ([]net.IP, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, OpListLocal); err != nil {
		return nil, fmt.Errorf("listing local addresses: %w", err)
	}
	seen := map[string]bool{}
	var out []net.IP
	for name, l := range f.links {
		if name == excludeDev {
			continue
		}
		for key, ip := range l.addrs {
			if isNodeAddress(ip) && !seen[key] {
				seen[key] = true
				out = append(out, append(net.IP(nil), ip...))
			}
		}
	}
	return sortIPs(out), nil
}

// Dump prints one line per link, sorted by name, with its addresses sorted:
//
//	eth0: 10.0.0.5 fd00::5
//	kube-ipvs0 (dummy): 10.96.0.1 10.96.0.10
func (f *Fake) Dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	names := make([]string, 0, len(f.links))
	for name := range f.links {
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, name := range names {
		l := f.links[name]
		b.WriteString(name)
		if l.dummy {
			b.WriteString(" (dummy)")
		}
		b.WriteString(":")
		ips := make([]net.IP, 0, len(l.addrs))
		for _, ip := range l.addrs {
			ips = append(ips, ip)
		}
		for _, ip := range sortIPs(ips) {
			b.WriteString(" " + ip.String())
		}
		b.WriteString("\n")
	}
	return b.String()
}

// kernelBinds is ipv6_add_addr's address check (see Fake): the Fake knows the
// loopback device by its name.
func kernelBinds(ip net.IP, dev string) bool {
	if ip.To4() != nil {
		return true
	}
	return !ip.IsMulticast() && !ip.IsUnspecified() && (!ip.IsLoopback() || dev == "lo")
}
