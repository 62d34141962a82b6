package ipvs

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipfamily"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/netlink"
)

// bindSignal closes began when a bind of many addresses starts.
type bindSignal struct {
	netlink.Handle
	once     sync.Once
	began    chan struct{}
	bigBinds atomic.Int32
}

func (g *bindSignal) BindAddresses(ctx context.Context, ips []net.IP, dev string) []error {
	if len(ips) >= bindBesideMin {
		g.bigBinds.Add(1)
		g.once.Do(func() { close(g.began) })
	}
	return g.Handle.BindAddresses(ctx, ips, dev)
}

// startWith delivers objs as the initial lists and returns the first, full
// sync's stats (the sync that ends the lists runs it).
func startWith(e *testEnv, objs []any) SyncStats {
	e.t.Helper()
	for _, o := range objs {
		e.add(o)
	}
	e.p.OnServiceSynced()
	e.p.OnEndpointSlicesSynced()
	st := e.p.LastSyncStats()
	if st.Err != nil || !st.Full {
		e.t.Fatalf("first sync: full=%v err=%v", st.Full, st.Err)
	}
	return st
}

func phaseNames(st SyncStats) string {
	var names []string
	for _, ph := range st.phases {
		names = append(names, ph.name)
	}
	return strings.Join(names, " ")
}

// TestLargeBindRunsBesideSetWrites: a sync binding hundreds of addresses (a
// start-up) binds them while it writes the sets (which come before the binds in
// its plan), and ends with every address
// bound and counted, and every virtual server written.
func TestLargeBindRunsBesideSetWrites(t *testing.T) {
	const n = 300
	e := newTestEnv(t, v1.IPv4Protocol)
	// The first set write waits (up to 5 s) for the binds to begin: they must
	// begin beside it, not after it.
	gate := &bindSignal{Handle: e.nl, began: make(chan struct{})}
	var overlapped atomic.Bool
	var once sync.Once
	e.ipset.InjectError = func(_ int, line string) error {
		if strings.HasPrefix(line, "add ") {
			once.Do(func() {
				select {
				case <-gate.began:
					overlapped.Store(true)
				case <-time.After(5 * time.Second):
				}
			})
		}
		return nil
	}
	e.p.kernel.Netlink = gate
	st := startWith(e, manyServices(n))

	if gate.bigBinds.Load() != 1 {
		t.Fatalf("%d binds of %d or more addresses, want 1", gate.bigBinds.Load(), bindBesideMin)
	}
	if !overlapped.Load() {
		t.Errorf("the bind of %d addresses did not run beside the set writes (phases %s)", n, phaseNames(st))
	}
	if got := strings.Count(e.ipvs.Dump(), "\n  ->"); got != 2*n { // manyServices: two endpoints each
		t.Errorf("%d real servers in IPVS, want %d", got, 2*n)
	}
	bound, err := e.nl.ListBindAddress(context.Background(), netlink.DefaultDummyDevice, ipfamily.IPv4)
	if err != nil {
		t.Fatal(err)
	}
	if len(bound) != n || e.p.applied.addrs.Len() != n {
		t.Errorf("%d addresses on %s, %d applied; want %d", len(bound), netlink.DefaultDummyDevice, e.p.applied.addrs.Len(), n)
	}
	if st.AddressOps != n || st.ops[opBindAddress] != n {
		t.Errorf("AddressOps %d, bind ops %d; want %d", st.AddressOps, st.ops[opBindAddress], n)
	}
	if names := phaseNames(st); !strings.Contains(names, "binds-wait") || !strings.Contains(names, "binds-beside") || strings.Contains(names, " binds ") {
		t.Errorf("phases %q: want binds-wait and binds-beside instead of binds", names)
	}
	if st.Failed != 0 {
		t.Errorf("failed %d", st.Failed)
	}
}

// TestRefusedBindBesideHoldsBackItsServiceOnly: the kernel refusing one address of
// a bind that runs beside the set writes holds back that Service alone (its
// virtual server is not written: the IPVS step waits for the binds), the sync stays
// good, and the retry binds it and writes the virtual server.
func TestRefusedBindBesideHoldsBackItsServiceOnly(t *testing.T) {
	const n = 300
	e := newTestEnv(t, v1.IPv4Protocol)
	f := &stickyFault{n: 123}
	e.p.kernel.Netlink = &faultyNetlink{Handle: e.nl, f: f}
	st := startWith(e, manyServices(n))
	if f.object == "" {
		t.Fatal("no address was refused")
	}
	// Two failures: the address, and its virtual server waiting for it.
	if st.Failed != 2 || e.p.needFull {
		t.Fatalf("refusal of %q: failed=%d needFull=%v, want 2 and false", f.object, st.Failed, e.p.needFull)
	}
	held := map[string]bool{}
	for _, h := range e.p.HeldBack() {
		for _, s := range h.Services {
			held[s] = true
		}
	}
	if len(held) != 1 {
		t.Fatalf("held back %v, want one Service", held)
	}
	if e.p.applied.addrs.Len() != n-1 || st.AddressOps != n {
		t.Errorf("%d addresses applied, %d address ops; want %d and %d", e.p.applied.addrs.Len(), st.AddressOps, n-1, n)
	}
	if !strings.Contains(phaseNames(st), "binds-beside") {
		t.Errorf("phases %q: the bind did not run beside", phaseNames(st))
	}
	vip := strings.TrimPrefix(f.object, "bind ") + ":80"
	if strings.Contains(e.ipvs.Dump(), vip) {
		t.Errorf("virtual server %s written although its address was refused", vip)
	}

	f.cleared = true
	e.clock.Step(time.Second)
	if st := e.mustSync(); st.Failed != 0 {
		t.Fatalf("retry failed %d", st.Failed)
	}
	if e.p.applied.addrs.Len() != n || len(e.p.HeldBack()) != 0 {
		t.Errorf("after the retry: %d addresses applied, held back %+v", e.p.applied.addrs.Len(), e.p.HeldBack())
	}
	if !strings.Contains(e.ipvs.Dump(), vip) {
		t.Errorf("virtual server %s missing after the retry", vip)
	}
}

// TestSmallBindRunsInOrder: a change's few addresses are bound in the plan's
// order, before the IPVS writes, as before.
func TestSmallBindRunsInOrder(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	e.start()
	for _, o := range manyServices(3) {
		e.add(o)
	}
	st := e.mustSync()
	if names := phaseNames(st); !strings.Contains(names, "binds") || strings.Contains(names, "binds-beside") {
		t.Errorf("phases %q: want binds in order", names)
	}
	if e.p.applied.addrs.Len() != 3 {
		t.Errorf("%d addresses applied, want 3", e.p.applied.addrs.Len())
	}
}

// ipvsSignal closes wrote at the first IPVS write.
type ipvsSignal struct {
	ipvs.Interface
	once  sync.Once
	wrote chan struct{}
}

func (s *ipvsSignal) Write(ctx context.Context, writes []ipvs.Write) []error {
	s.once.Do(func() { close(s.wrote) })
	return s.Interface.Write(ctx, writes)
}

// chunkGate makes the bind of the addresses after the first bindChunk wait (up
// to 5 s) for the first IPVS write, and refuses one address of a later chunk.
type chunkGate struct {
	netlink.Handle
	ipvs       *ipvsSignal
	refuse     string
	calls      atomic.Int32
	overlapped atomic.Bool
}

func (g *chunkGate) BindAddresses(ctx context.Context, ips []net.IP, dev string) []error {
	if g.calls.Add(1) == 2 {
		select {
		case <-g.ipvs.wrote:
			g.overlapped.Store(true)
		case <-time.After(5 * time.Second):
		}
	}
	errs := g.Handle.BindAddresses(ctx, ips, dev)
	for i, ip := range ips {
		if ip.String() == g.refuse {
			_ = g.Handle.UnbindAddress(ctx, ip, dev)
			errs[i] = errRefused
		}
	}
	return errs
}

// TestIPVSTrailsTheBinds: at a start-up binding more than one chunk of
// addresses, the virtual servers of the Services whose addresses are bound are
// written while the later addresses are still being bound; a Service whose
// address (in a later chunk) the kernel refuses is held back alone, and every
// other virtual server is written.
func TestIPVSTrailsTheBinds(t *testing.T) {
	const n = 2*bindChunk + 50
	e := newTestEnv(t, v1.IPv4Protocol)
	sig := &ipvsSignal{Interface: e.p.kernel.IPVS, wrote: make(chan struct{})}
	objs := manyServices(n)
	refused := "10.96.1.201" // svc-450: in the second chunk of binds
	gate := &chunkGate{Handle: e.nl, ipvs: sig, refuse: refused}
	e.p.kernel.IPVS = sig
	e.p.kernel.Netlink = gate
	st := startWith(e, objs)

	if calls := gate.calls.Load(); calls != 3 {
		t.Fatalf("%d bind calls for %d addresses, want 3 (chunks of %d)", calls, n, bindChunk)
	}
	if !gate.overlapped.Load() {
		t.Errorf("no virtual server was written before the second chunk of binds (phases %s)", phaseNames(st))
	}
	dump := e.ipvs.Dump()
	if got := strings.Count(dump, "\n  ->"); got != 2*(n-1) { // manyServices: two endpoints each
		t.Errorf("%d real servers in IPVS, want %d", got, 2*(n-1))
	}
	if strings.Contains(dump, refused+":80") {
		t.Errorf("virtual server %s:80 written although its address was refused", refused)
	}
	held := map[string]bool{}
	for _, h := range e.p.HeldBack() {
		for _, s := range h.Services {
			held[s] = true
		}
	}
	if len(held) != 1 || st.Failed != 2 || e.p.needFull {
		t.Errorf("held back %v, failed %d, needFull %v; want one Service, 2 and false", held, st.Failed, e.p.needFull)
	}
	if e.p.applied.addrs.Len() != n-1 || st.AddressOps != n {
		t.Errorf("%d addresses applied, %d address ops; want %d and %d", e.p.applied.addrs.Len(), st.AddressOps, n-1, n)
	}
}

// TestAddrOwnersAgreesWithOwnersOfAddr: the map addrOwners builds from its second
// ask on answers as the walk of ownersOfAddr does, for every bound address.
func TestAddrOwnersAgreesWithOwnersOfAddr(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	startWith(e, manyServices(20))
	owners := e.p.index.addrOwners()
	addrs := e.p.applied.addrs.UnsortedList()
	if len(addrs) != 20 {
		t.Fatalf("%d addresses bound, want 20", len(addrs))
	}
	for _, a := range append(addrs, "10.0.0.99") {
		got, want := owners(a), e.p.index.ownersOfAddr(a)
		if !slices.Equal(got, want) {
			t.Errorf("owners of %s: %v, want %v", a, got, want)
		}
	}
}
