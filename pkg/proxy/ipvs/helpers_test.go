package ipvs

// Test address ranges (fixed for every test in this package):
//   node:          192.168.0.10 on eth0 (primary), 192.168.1.10 on eth1; fd00:1::10 on eth0
//   cluster IPs:   10.96.0.0/16, fd00:96::/112
//   pods:          10.244.1.0/24 on this node ("node-a"), 10.244.2.0/24 on node-b; fd00:244::/64
//   external/LB:   203.0.113.0/24, 2001:db8::/64
//   clients:       198.18.0.0/15 (off-cluster)

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/healthcheck"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	iptablesrules "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules/iptables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/conntrack"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipfamily"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipset"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/netlink"
	nft "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/sysctl"
)

const testNode = "node-a"

type testEnv struct {
	t     *testing.T
	ipvs  *ipvs.Fake
	ipset *ipset.Fake
	ipt   *iptables.Fake
	nl    *netlink.Fake
	sc    *sysctl.Fake
	ct    *conntrack.Fake
	nft   *nft.Fake
	hc    *healthcheck.FakeServiceHealthServer
	clock *testingclock.FakeClock
	p     *Proxier
	opts  Options
}

// newTestEnv builds a proxier over fresh fakes; mods adjust its options.
func newTestEnv(t *testing.T, family v1.IPFamily, mods ...func(*Options)) *testEnv {
	t.Helper()
	e := &testEnv{
		t:     t,
		ipvs:  ipvs.NewFake(),
		ipset: ipset.NewFake(),
		nl:    netlink.NewFake(),
		sc:    sysctl.NewFake(nil),
		ct:    conntrack.NewFake(),
		nft:   nft.NewFake(),
		hc:    healthcheck.NewFakeServiceHealthServer(),
		clock: testingclock.NewFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)),
	}
	proto := iptables.ProtocolIPv4
	nodeIP := net.ParseIP("192.168.0.10")
	if family == v1.IPv6Protocol {
		proto = iptables.ProtocolIPv6
		nodeIP = net.ParseIP("fd00:1::10")
	}
	e.ipt = iptables.NewFake(proto)
	e.nl.AddLink("lo", "127.0.0.1", "::1")
	e.nl.AddLink("eth0", "192.168.0.10", "fd00:1::10")
	e.nl.AddLink("eth1", "192.168.1.10")
	e.opts = Options{
		IPFamily:      family,
		NodeName:      testNode,
		NodeIP:        nodeIP,
		SyncPeriod:    30 * time.Second,
		MinSyncPeriod: 0,
		Scheduler:     "rr",
		MasqueradeBit: 14,
		ServiceHealth: e.hc,
		KernelVersion: "6.1.0-57-amd64",
	}
	for _, m := range mods {
		m(&e.opts)
	}
	p, err := NewProxier(context.Background(), e.opts, e.kernel(), e.clock)
	if err != nil {
		t.Fatalf("NewProxier: %v", err)
	}
	e.p = p
	// A periodic resync's read runs at once, so the sync that starts it takes it
	// (resync_test.go runs it later on purpose).
	p.goResync = func(f func()) { f() }
	// Periodic resyncs compare their keys in slices of a few, so that every test
	// that resyncs goes through the slices (resync_slices.go).
	p.resyncSliceKeys = testResyncSliceKeys
	return e
}

// testResyncSliceKeys is the slice size of the test proxiers' resyncs.
const testResyncSliceKeys = 3

func (e *testEnv) kernel() Kernel {
	return Kernel{IPVS: e.ipvs, IPSet: &referencedIPSet{Fake: e.ipset, ipt: e.ipt}, IPTables: e.ipt, Netlink: e.nl, Sysctl: e.sc, Conntrack: e.ct, NFTables: e.nft}
}

// referencedIPSet tells the ipset Fake, before every batch, which sets the iptables
// Fake's rules reference, as the kernel knows: a referenced set cannot be destroyed.
type referencedIPSet struct {
	*ipset.Fake
	ipt *iptables.Fake
}

func (r *referencedIPSet) Apply(ctx context.Context, tx *ipset.Transaction) error {
	all, err := r.Fake.SaveAll(ctx)
	if err != nil {
		return err
	}
	refs := r.ipt.MatchSetRefs()
	for name := range all {
		r.Fake.SetReferences(name, refs[name])
	}
	return r.Fake.Apply(ctx, tx)
}

// start delivers the initial lists and runs the first (full) sync.
func (e *testEnv) start(objs ...any) {
	e.t.Helper()
	for _, o := range objs {
		e.add(o)
	}
	e.p.OnServiceSynced()
	e.p.OnEndpointSlicesSynced()
	e.mustSync()
}

func (e *testEnv) add(o any) {
	switch o := o.(type) {
	case *v1.Service:
		e.p.OnServiceAdd(proxy.NewServiceRecord(o))
	case *discovery.EndpointSlice:
		e.p.OnEndpointSliceAdd(e.record(o))
	case *v1.Node:
		e.p.OnNodeAdd(o)
	default:
		e.t.Fatalf("unknown object %T", o)
	}
}

// record is slice as the EndpointSlice informer caches and delivers it.
func (e *testEnv) record(slice *discovery.EndpointSlice) *proxy.EndpointSliceRecord {
	return proxy.NewEndpointSliceRecord(slice, e.p.opts.NodeName)
}

func (e *testEnv) updateSlice(old, cur *discovery.EndpointSlice) {
	e.p.OnEndpointSliceUpdate(e.record(old), e.record(cur))
}

func (e *testEnv) deleteService(svc *v1.Service) {
	e.p.OnServiceDelete(proxy.NewServiceRecord(svc))
}

func (e *testEnv) deleteSlice(slice *discovery.EndpointSlice) {
	e.p.OnEndpointSliceDelete(e.record(slice))
}

// sync runs one sync now and keeps the ipset Fake's references in step with the
// iptables rules, as the kernel would.
func (e *testEnv) sync() SyncStats {
	e.t.Helper()
	e.p.syncProxyRules()
	// Removals beside the loop (cleanup_beside.go) end before the test looks.
	e.p.waitBeside()
	return e.p.LastSyncStats()
}

func (e *testEnv) mustSync() SyncStats {
	e.t.Helper()
	st := e.sync()
	if st.Err != nil {
		e.t.Fatalf("sync failed: %v", st.Err)
	}
	return st
}

// setMembers dumps the non-empty sets, one "SET entry" per line, sorted.
func (e *testEnv) setMembers() string {
	var b strings.Builder
	for _, line := range strings.Split(e.ipset.Dump(), "\n") {
		if strings.HasPrefix(line, "add ") {
			b.WriteString(strings.TrimPrefix(line, "add ") + "\n")
		}
	}
	return b.String()
}

func (e *testEnv) iptablesSave() string {
	var b bytes.Buffer
	for _, tbl := range []iptables.Table{iptables.TableNAT, iptables.TableFilter} {
		if err := e.ipt.SaveInto(context.Background(), tbl, &b); err != nil {
			e.t.Fatal(err)
		}
	}
	return b.String()
}

func (e *testEnv) tracer() *tracer {
	all, err := e.ipset.SaveAll(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	var local []string
	ips, _ := e.nl.GetLocalAddresses(context.Background(), "")
	for _, ip := range ips {
		local = append(local, ip.String())
	}
	bound, _ := e.nl.ListBindAddress(context.Background(), netlink.DefaultDummyDevice, ipfamily.Any)
	for _, ip := range bound {
		local = append(local, ip.String())
	}
	return newTracer(e.t, e.iptablesSave(), all, e.ipvs, local)
}

// Object builders.

func makeService(ns, name string, mods ...func(*v1.Service)) *v1.Service {
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeClusterIP,
			IPFamilies: []v1.IPFamily{v1.IPv4Protocol},
		},
	}
	for _, m := range mods {
		m(s)
	}
	if len(s.Spec.ClusterIPs) == 0 && s.Spec.ClusterIP != "" {
		s.Spec.ClusterIPs = []string{s.Spec.ClusterIP}
	}
	return s
}

func clusterIP(ip string) func(*v1.Service) {
	return func(s *v1.Service) {
		s.Spec.ClusterIP = ip
		s.Spec.ClusterIPs = []string{ip}
		if strings.Contains(ip, ":") {
			s.Spec.IPFamilies = []v1.IPFamily{v1.IPv6Protocol}
		}
	}
}

func port(name string, proto v1.Protocol, p int32, nodePort int32) func(*v1.Service) {
	return func(s *v1.Service) {
		s.Spec.Ports = append(s.Spec.Ports, v1.ServicePort{Name: name, Protocol: proto, Port: p, NodePort: nodePort, TargetPort: intstr.FromInt32(p)})
		if nodePort != 0 && s.Spec.Type == v1.ServiceTypeClusterIP {
			s.Spec.Type = v1.ServiceTypeNodePort
		}
	}
}

func externalIPs(ips ...string) func(*v1.Service) {
	return func(s *v1.Service) { s.Spec.ExternalIPs = ips }
}

func lbIngress(ips ...string) func(*v1.Service) {
	return func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		for _, ip := range ips {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: ip})
		}
	}
}

func sourceRanges(cidrs ...string) func(*v1.Service) {
	return func(s *v1.Service) { s.Spec.LoadBalancerSourceRanges = cidrs }
}

func etpLocal(hcPort int32) func(*v1.Service) {
	return func(s *v1.Service) {
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = hcPort
	}
}

func itpLocal(s *v1.Service) {
	p := v1.ServiceInternalTrafficPolicyLocal
	s.Spec.InternalTrafficPolicy = &p
}

func affinity(timeout int32) func(*v1.Service) {
	return func(s *v1.Service) {
		s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To(timeout)}}
	}
}

type epMod func(*discovery.Endpoint)

func terminating(serving bool) epMod {
	return func(e *discovery.Endpoint) {
		e.Conditions.Ready = ptr.To(false)
		e.Conditions.Serving = ptr.To(serving)
		e.Conditions.Terminating = ptr.To(true)
	}
}

func endpoint(ip string, mods ...epMod) discovery.Endpoint {
	e := discovery.Endpoint{Addresses: []string{ip}, Conditions: discovery.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}}
	if strings.HasPrefix(ip, "10.244.1.") || strings.HasPrefix(ip, "fd00:244::1") {
		e.NodeName = ptr.To(testNode)
	} else {
		e.NodeName = ptr.To("node-b")
	}
	for _, m := range mods {
		m(&e)
	}
	return e
}

type slicePort struct {
	name  string
	proto v1.Protocol
	port  int32
}

func makeSlice(ns, svc, name string, ports []slicePort, eps ...discovery.Endpoint) *discovery.EndpointSlice {
	at := discovery.AddressTypeIPv4
	if len(eps) > 0 && strings.Contains(eps[0].Addresses[0], ":") {
		at = discovery.AddressTypeIPv6
	}
	s := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discovery.LabelServiceName: svc}},
		AddressType: at,
		Endpoints:   eps,
	}
	for _, p := range ports {
		s.Ports = append(s.Ports, discovery.EndpointPort{Name: ptr.To(p.name), Protocol: ptr.To(p.proto), Port: ptr.To(p.port)})
	}
	return s
}

func tcp(name string, p int32) []slicePort { return []slicePort{{name, v1.ProtocolTCP, p}} }
func udp(name string, p int32) []slicePort { return []slicePort{{name, v1.ProtocolUDP, p}} }

// writeEach answers a pipelined Write through h's single calls, one by one, as the
// kernel answers each request of a batch: a wrapper that refuses some calls refuses
// them in a Write too.
func writeEach(ctx context.Context, h ipvs.Interface, writes []ipvs.Write) []error {
	errs := make([]error, len(writes))
	for i, w := range writes {
		switch w.Kind {
		case ipvs.WriteAddVirtualServer:
			errs[i] = h.AddVirtualServer(ctx, w.VS)
		case ipvs.WriteUpdateVirtualServer:
			errs[i] = h.UpdateVirtualServer(ctx, w.VS)
		case ipvs.WriteDeleteVirtualServer:
			errs[i] = h.DeleteVirtualServer(ctx, w.VS)
		case ipvs.WriteAddRealServer:
			errs[i] = h.AddRealServer(ctx, w.VS, w.RS)
		case ipvs.WriteUpdateRealServer:
			errs[i] = h.UpdateRealServer(ctx, w.VS, w.RS)
		case ipvs.WriteDeleteRealServer:
			errs[i] = h.DeleteRealServer(ctx, w.VS, w.RS)
		}
	}
	return errs
}

// waitFor polls cond until it holds or d has passed (for work the fake clock starts
// on a goroutine of its own).
func waitFor(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); ; time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}

// member is the member of set that ipset prints as text (the test's shorthand).
func member(set rules.Set, text string) rules.Member {
	m, err := iptablesrules.ParseIPSetEntry(set, text)
	if err != nil {
		panic(err)
	}
	return m
}

// nftRuleset is the nftables backend's table, when the proxier runs that backend.
func nftRuleset(e *testEnv) nft.Ruleset {
	if e.p.rules.Name() != RulesBackendNFTables {
		return nil
	}
	return e.p.kernel.NFTRules
}

// reloadRules makes the rules backend anew on e.p.kernel's handles, after a test
// swapped one of them; the next full sync reads what the backend remembers.
func (e *testEnv) reloadRules() {
	e.t.Helper()
	b, err := newRulesBackend(e.p.rules.Name(), e.p.rulesConfig(), rulesKernel(e.p.kernel))
	if err != nil {
		e.t.Fatal(err)
	}
	e.p.rules = b
}
