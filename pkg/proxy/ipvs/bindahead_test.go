package ipvs

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipfamily"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/netlink"
)

func withBindAhead(o *Options) { o.BindAhead = true }

// bound is the sorted addresses of this family on kube-ipvs0.
func (e *testEnv) bound() []string {
	e.t.Helper()
	ips, err := e.nl.ListBindAddress(context.Background(), netlink.DefaultDummyDevice, ipfamily.IPv4)
	if err != nil && !netlink.IsNotFound(err) {
		e.t.Fatal(err)
	}
	var out []string
	for _, ip := range ips {
		out = append(out, ip.String())
	}
	slices.Sort(out)
	return out
}

// aheadServices: two that bind, one deleted before the lists end, and four
// that bind nothing (headless, ExternalName, no port, the other family).
func aheadServices() []*v1.Service {
	headless := makeService("ns", "headless", port("http", v1.ProtocolTCP, 80, 0))
	headless.Spec.ClusterIP, headless.Spec.ClusterIPs = v1.ClusterIPNone, []string{v1.ClusterIPNone}
	ext := makeService("ns", "ext")
	ext.Spec.Type, ext.Spec.ExternalName = v1.ServiceTypeExternalName, "example.com"
	return []*v1.Service{
		makeService("ns", "web", clusterIP("10.96.0.10"), port("http", v1.ProtocolTCP, 80, 0)),
		makeService("ns", "np", clusterIP("10.96.0.11"), port("dns", v1.ProtocolUDP, 53, 30053)),
		makeService("ns", "gone", clusterIP("10.96.0.20"), port("http", v1.ProtocolTCP, 80, 0)),
		headless, ext,
		makeService("ns", "noport", clusterIP("10.96.0.40")),
		makeService("ns", "v6", clusterIP("fd00:96::50"), port("http", v1.ProtocolTCP, 80, 0)),
	}
}

// TestBindAheadBindsClusterIPsBeforeTheFirstSync: with BindAhead, the ClusterIPs
// of the Services that arrive before the lists are complete are bound to
// kube-ipvs0 at once, and nothing else is written; the first full sync finds
// them bound (no bind of its own), removes the address of a Service deleted
// meanwhile, and ends in the kernel state a proxier without it reaches.
func TestBindAheadBindsClusterIPsBeforeTheFirstSync(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol, withBindAhead)
	svcs := aheadServices()
	for _, s := range svcs {
		e.add(s)
	}
	want := []string{"10.96.0.10", "10.96.0.11", "10.96.0.20"}
	if !waitFor(5*time.Second, func() bool { return slices.Equal(e.bound(), want) }) {
		t.Fatalf("kube-ipvs0 holds %v before the lists are complete, want %v", e.bound(), want)
	}
	if d := e.ipvs.Dump(); d != "" {
		t.Errorf("IPVS written before the lists are complete:\n%s", d)
	}
	if m := e.setMembers(); m != "" {
		t.Errorf("set members written before the lists are complete:\n%s", m)
	}
	e.deleteService(svcs[2]) // gone
	eps := []any{
		makeSlice("ns", "web", "web-1", tcp("http", 8080), endpoint("10.244.1.5")),
		makeSlice("ns", "np", "np-1", udp("dns", 53), endpoint("10.244.2.8")),
	}
	for _, s := range eps {
		e.add(s)
	}
	e.nl.ResetOps()
	e.p.OnServiceSynced()
	e.p.OnEndpointSlicesSynced()
	e.mustSync()
	if got := e.bound(); !slices.Equal(got, want[:2]) {
		t.Errorf("after the first sync kube-ipvs0 holds %v, want %v", got, want[:2])
	}
	if ops := e.nl.Ops(); ops[netlink.OpBind] != 0 || ops[netlink.OpUnbind] != 1 {
		t.Errorf("the first sync bound %d and unbound %d addresses, want 0 and 1 (the deleted Service's)", ops[netlink.OpBind], ops[netlink.OpUnbind])
	}
	if e.p.ahead.Load() != nil {
		t.Error("the binding ahead still runs after the first sync")
	}

	// The same lists without binding ahead: the same kernel state.
	cold := newTestEnv(t, v1.IPv4Protocol)
	for _, s := range svcs {
		if s.Name != "gone" {
			cold.add(s)
		}
	}
	cold.start(eps...)
	if got, want := warmKernel(t, e, nil), warmKernel(t, cold, nil); got != want {
		t.Errorf("kernel after binding ahead:\n%s\nwithout:\n%s", got, want)
	}
}

// TestBindAheadLeavesBoundAddressesAlone: a restarted daemon finds its
// addresses bound; binding ahead reads them and binds only the new one (a
// duplicate bind costs the kernel the same walk of the device's addresses).
func TestBindAheadLeavesBoundAddressesAlone(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol, withBindAhead)
	ctx := context.Background()
	if _, err := e.nl.EnsureDummyDevice(ctx, netlink.DefaultDummyDevice); err != nil {
		t.Fatal(err)
	}
	for _, err := range e.nl.BindAddresses(ctx, []net.IP{net.ParseIP("10.96.0.10"), net.ParseIP("10.96.0.11")}, netlink.DefaultDummyDevice) {
		if err != nil {
			t.Fatal(err)
		}
	}
	e.nl.ResetOps()
	for _, s := range aheadServices()[:3] {
		e.add(s)
	}
	want := []string{"10.96.0.10", "10.96.0.11", "10.96.0.20"}
	if !waitFor(5*time.Second, func() bool { return slices.Equal(e.bound(), want) }) {
		t.Fatalf("kube-ipvs0 holds %v, want %v", e.bound(), want)
	}
	e.p.endBindAhead()
	if n := e.nl.Ops()[netlink.OpBind]; n != 1 {
		t.Errorf("%d binds ahead, want 1 (10.96.0.20 only)", n)
	}
}

// TestBindAheadOnlyBeforeTheListsAreComplete: without the option nothing is
// bound before the first sync; with it, a Service that arrives after the lists
// are complete goes through the sync as always, and with a warm start (whose
// syncs bind) it does not run.
func TestBindAheadOnlyBeforeTheListsAreComplete(t *testing.T) {
	off := newTestEnv(t, v1.IPv4Protocol)
	off.add(aheadServices()[0])
	time.Sleep(50 * time.Millisecond)
	if got := off.bound(); len(got) != 0 {
		t.Errorf("without BindAhead kube-ipvs0 holds %v before the first sync", got)
	}
	if off.p.ahead.Load() != nil {
		t.Error("binding ahead runs without the option")
	}
	warm := newTestEnv(t, v1.IPv4Protocol, withBindAhead, func(o *Options) { o.WarmStart = true })
	if warm.p.ahead.Load() != nil {
		t.Error("binding ahead runs beside a warm start")
	}

	e := newTestEnv(t, v1.IPv4Protocol, withBindAhead)
	e.start(makeService("ns", "web", clusterIP("10.96.0.10"), port("http", v1.ProtocolTCP, 80, 0)))
	e.p.bindAheadOf(proxy.NewServiceRecord(makeService("ns", "late", clusterIP("10.96.0.30"), port("http", v1.ProtocolTCP, 80, 0))))
	e.add(makeService("ns", "late", clusterIP("10.96.0.30"), port("http", v1.ProtocolTCP, 80, 0)))
	time.Sleep(50 * time.Millisecond)
	if got := e.bound(); !slices.Equal(got, []string{"10.96.0.10"}) {
		t.Errorf("after the first sync, before the next, kube-ipvs0 holds %v, want only the first sync's", got)
	}
	e.mustSync()
	if got := e.bound(); !slices.Equal(got, []string{"10.96.0.10", "10.96.0.30"}) {
		t.Errorf("after the next sync kube-ipvs0 holds %v", got)
	}
}
