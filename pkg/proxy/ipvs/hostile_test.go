package ipvs

// Test address ranges: as in helpers_test.go. The good Services use 10.96.0.1-10.96.0.10,
// 203.0.113.1 and node port 30001; hostile objects use anything else, except where
// they aim at a good Service's address on purpose.

import (
	"regexp"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
)

// apiserver marks whether a v1.37 kube-apiserver accepts the object (from its
// validation code; a rejected object still reaches kube-proxy from an older apiserver,
// a restored backup, or a bug, so it must be handled all the same).
type apiserver string

const (
	accepted apiserver = "accepted"
	rejected apiserver = "rejected"
)

type hostileCase struct {
	name string
	api  apiserver
	objs []any
	// events is the number of Warning Events the objects must cause, once.
	events int
	// check, when set, asserts what the hostile objects themselves program.
	check func(t *testing.T, e *testEnv)
}

func goodObjects() []any {
	return []any{
		makeService("good", "a", clusterIP("10.96.0.1"), port("p", v1.ProtocolTCP, 80, 0)),
		makeSlice("good", "a", "a-1", tcp("p", 80), endpoint("10.244.2.1"), endpoint("10.244.1.1")),
		makeService("good", "dns", clusterIP("10.96.0.10"), port("dns", v1.ProtocolUDP, 53, 0)),
		makeSlice("good", "dns", "dns-1", udp("dns", 53), endpoint("10.244.2.10")),
		makeService("good", "lb", clusterIP("10.96.0.3"), port("p", v1.ProtocolTCP, 80, 30001),
			lbIngress("203.0.113.1"), sourceRanges("198.18.0.0/15")),
		makeSlice("good", "lb", "lb-1", tcp("p", 80), endpoint("10.244.2.3")),
	}
}

// goodTokens name the good Services' kernel objects in the fakes' dumps.
var goodTokens = []string{"10.96.0.1:80", "10.96.0.10:53", "10.96.0.3:80", "203.0.113.1:80", ":30001",
	"10.96.0.1,tcp:80", "10.96.0.10,udp:53", "10.96.0.3,tcp:80", "203.0.113.1,tcp:80", " 30001",
	"10.244.1.1,tcp:80,10.244.1.1"}

// goodState is the part of the kernel state that belongs to the good Services.
func goodState(e *testEnv) string {
	var b strings.Builder
	keep := false
	for _, line := range strings.Split(e.ipvs.Dump(), "\n") {
		if !strings.HasPrefix(line, "  ->") {
			keep = false
			for _, tok := range goodTokens {
				if strings.Contains(line, tok+" ") {
					keep = true
				}
			}
		}
		if keep {
			b.WriteString(line + "\n")
		}
	}
	for _, line := range strings.Split(e.setMembers(), "\n") {
		for _, tok := range goodTokens {
			if strings.HasSuffix(line, tok) || strings.Contains(line, tok+",") {
				b.WriteString(line + "\n")
				break
			}
		}
	}
	for _, line := range strings.Split(e.nl.Dump(), "\n") {
		for _, ip := range []string{"10.96.0.1/", "10.96.0.10/", "10.96.0.3/", "203.0.113.1/"} {
			if strings.Contains(line, ip) {
				b.WriteString(line + "\n")
			}
		}
	}
	return b.String()
}

func svcWith(name string, mods ...func(*v1.Service)) *v1.Service {
	return makeService("bad", name, mods...)
}

func epsFor(svc string, eps ...discovery.Endpoint) *discovery.EndpointSlice {
	return makeSlice("bad", svc, svc+"-1", tcp("p", 80), eps...)
}

func withPorts(ports ...v1.ServicePort) func(*v1.Service) {
	return func(s *v1.Service) { s.Spec.Ports = ports }
}

func hasLine(t *testing.T, dump, re string) {
	t.Helper()
	if !regexp.MustCompile(re).MatchString(dump) {
		t.Errorf("missing %q in:\n%s", re, dump)
	}
}

func lacks(t *testing.T, dump, sub string) {
	t.Helper()
	if strings.Contains(dump, sub) {
		t.Errorf("unexpected %q in:\n%s", sub, dump)
	}
}

func hostileCases() []hostileCase {
	ok := endpoint("10.244.2.50")
	return []hostileCase{
		// loadBalancerSourceRanges
		{name: "source range 0.0.0.0/0 means everyone", api: accepted, objs: []any{
			svcWith("lb-all", clusterIP("10.96.1.1"), port("p", v1.ProtocolTCP, 80, 0), lbIngress("203.0.113.10"), sourceRanges("0.0.0.0/0")),
			epsFor("lb-all", ok)}, check: func(t *testing.T, e *testEnv) {
			m := e.setMembers()
			hasLine(t, m, `KUBE-LOAD-BALANCER 203\.0\.113\.10,tcp:80`)
			lacks(t, m, "KUBE-LOAD-BALANCER-FW 203.0.113.10")
			lacks(t, m, "KUBE-LOAD-BALANCER-SOURCE-CIDR 203.0.113.10")
			for _, src := range []string{"198.51.100.7", "192.168.0.10"} {
				if v := e.tracer().trace(packet{src: src, dst: "203.0.113.10", port: 80, proto: "tcp"}); v.String() != "10.244.2.50:80 masq" {
					t.Errorf("from %s to the LB: %v, want the endpoint", src, v)
				}
			}
		}},
		{name: "source ranges with 0.0.0.0/0 among others", api: accepted, objs: []any{
			svcWith("lb-all2", clusterIP("10.96.1.2"), port("p", v1.ProtocolTCP, 80, 0), lbIngress("203.0.113.11"), sourceRanges("10.0.0.0/8", "0.0.0.0/0")),
			epsFor("lb-all2", ok)}, check: func(t *testing.T, e *testEnv) {
			lacks(t, e.setMembers(), "KUBE-LOAD-BALANCER-FW 203.0.113.11")
		}},
		{name: "source range not a CIDR", api: rejected, events: 1, objs: []any{
			svcWith("lb-badrange", clusterIP("10.96.1.3"), port("p", v1.ProtocolTCP, 80, 0), lbIngress("203.0.113.12"), sourceRanges("300.0.0.0/8")),
			epsFor("lb-badrange", ok)}},
		// LoadBalancer ingress addresses (status, written by controllers; IP syntax only)
		{name: "LB IP 0.0.0.0", api: accepted, events: 1, objs: []any{
			svcWith("lb-zero", clusterIP("10.96.1.4"), port("p", v1.ProtocolTCP, 80, 0), lbIngress("0.0.0.0")), epsFor("lb-zero", ok)},
			check: func(t *testing.T, e *testEnv) { lacks(t, e.ipvs.Dump(), "0.0.0.0:80") }},
		{name: "LB IP multicast", api: accepted, events: 1, objs: []any{
			svcWith("lb-mcast", clusterIP("10.96.1.5"), port("p", v1.ProtocolTCP, 80, 0), lbIngress("239.0.0.1")), epsFor("lb-mcast", ok)}},
		{name: "LB IP broadcast", api: accepted, events: 1, objs: []any{
			svcWith("lb-bcast", clusterIP("10.96.1.6"), port("p", v1.ProtocolTCP, 80, 0), lbIngress("255.255.255.255")), epsFor("lb-bcast", ok)}},
		{name: "LB IP loopback", api: accepted, events: 1, objs: []any{
			svcWith("lb-lo", clusterIP("10.96.1.7"), port("p", v1.ProtocolTCP, 80, 0), lbIngress("127.0.0.1")), epsFor("lb-lo", ok)}},
		{name: "LB IP link-local", api: accepted, events: 1, objs: []any{
			svcWith("lb-ll", clusterIP("10.96.1.8"), port("p", v1.ProtocolTCP, 80, 0), lbIngress("169.254.1.1")), epsFor("lb-ll", ok)}},
		{name: "LB IP that is another Service's ClusterIP and port", api: accepted, events: 1, objs: []any{
			svcWith("lb-steal-dns", clusterIP("10.96.1.9"), port("dns", v1.ProtocolUDP, 53, 0), lbIngress("10.96.0.10")),
			makeSlice("bad", "lb-steal-dns", "s-1", udp("dns", 53), endpoint("10.244.2.66"))}},
		{name: "LB ipMode Proxy", api: accepted, objs: []any{
			svcWith("lb-proxy", clusterIP("10.96.1.10"), port("p", v1.ProtocolTCP, 80, 0), func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeLoadBalancer
				s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "203.0.113.13", IPMode: ptr.To(v1.LoadBalancerIPModeProxy)}}
			}), epsFor("lb-proxy", ok)}, check: func(t *testing.T, e *testEnv) { lacks(t, e.ipvs.Dump(), "203.0.113.13") }},
		// externalIPs
		{name: "externalIP multicast", api: accepted, events: 1, objs: []any{
			svcWith("ext-mcast", clusterIP("10.96.1.11"), port("p", v1.ProtocolTCP, 80, 0), externalIPs("239.1.1.1")), epsFor("ext-mcast", ok)}},
		{name: "externalIP broadcast", api: accepted, events: 1, objs: []any{
			svcWith("ext-bcast", clusterIP("10.96.1.12"), port("p", v1.ProtocolTCP, 80, 0), externalIPs("255.255.255.255")), epsFor("ext-bcast", ok)}},
		{name: "externalIP loopback", api: rejected, events: 1, objs: []any{
			svcWith("ext-lo", clusterIP("10.96.1.13"), port("p", v1.ProtocolTCP, 80, 0), externalIPs("127.0.0.2")), epsFor("ext-lo", ok)}},
		{name: "externalIP 0.0.0.0", api: rejected, events: 1, objs: []any{
			svcWith("ext-zero", clusterIP("10.96.1.14"), port("p", v1.ProtocolTCP, 80, 0), externalIPs("0.0.0.0")), epsFor("ext-zero", ok)}},
		{name: "externalIP that is another Service's ClusterIP and port", api: accepted, events: 1, objs: []any{
			svcWith("a-x", clusterIP("10.96.1.15"), port("p", v1.ProtocolTCP, 80, 0), externalIPs("10.96.0.1")), epsFor("a-x", endpoint("10.244.2.66"))},
			check: func(t *testing.T, e *testEnv) {
				if v := e.tracer().trace(packet{src: "10.244.1.5", dst: "10.96.0.1", port: 80, proto: "tcp", fromBridge: true}); strings.Contains(v.String(), "10.244.2.66") {
					t.Errorf("the ClusterIP was hijacked: %v", v)
				}
			}},
		{name: "externalIP on another Service's ClusterIP, other port", api: accepted, objs: []any{
			svcWith("ext-otherport", clusterIP("10.96.1.16"), port("p", v1.ProtocolTCP, 8080, 0), externalIPs("10.96.0.1")),
			makeSlice("bad", "ext-otherport", "s-1", tcp("p", 8080), endpoint("10.244.2.67"))},
			check: func(t *testing.T, e *testEnv) { hasLine(t, e.ipvs.Dump(), `TCP  10\.96\.0\.1:8080 rr`) }},
		{name: "externalIP with blanks", api: rejected, objs: []any{
			svcWith("ext-blank", clusterIP("10.96.1.17"), port("p", v1.ProtocolTCP, 80, 0), externalIPs(" 203.0.113.20 ")), epsFor("ext-blank", ok)},
			check: func(t *testing.T, e *testEnv) { hasLine(t, e.ipvs.Dump(), `TCP  203\.0\.113\.20:80 rr`) }},
		{name: "externalIP not an address", api: rejected, events: 1, objs: []any{
			svcWith("ext-junk", clusterIP("10.96.1.18"), port("p", v1.ProtocolTCP, 80, 0), externalIPs("not-an-ip")), epsFor("ext-junk", ok)}},
		// ClusterIP and ports
		{name: "ClusterIP multicast", api: rejected, events: 1, objs: []any{
			svcWith("cip-mcast", clusterIP("224.1.1.1"), port("p", v1.ProtocolTCP, 80, 0)), epsFor("cip-mcast", ok)}},
		{name: "ClusterIP not an address", api: rejected, events: 1, objs: []any{
			svcWith("cip-junk", clusterIP("10.96.1.300"), port("p", v1.ProtocolTCP, 80, 0)), epsFor("cip-junk", ok)}},
		// The apiserver defaults the protocol to TCP; an empty one only comes from
		// clients that bypass it, as our fuzzers do.
		{name: "port without protocol is TCP", api: accepted, objs: []any{
			svcWith("noproto", clusterIP("10.96.1.19"), withPorts(v1.ServicePort{Name: "p", Port: 80})), epsFor("noproto", ok)},
			check: func(t *testing.T, e *testEnv) {
				hasLine(t, e.ipvs.Dump(), `TCP  10\.96\.1\.19:80 rr\n  -> 10\.244\.2\.50:80 Masq 1 0 0`)
			}},
		{name: "unsupported protocol", api: rejected, events: 1, objs: []any{
			svcWith("icmp", clusterIP("10.96.1.20"), withPorts(v1.ServicePort{Name: "p", Port: 80, Protocol: "ICMP"}))}},
		{name: "port 0", api: rejected, events: 1, objs: []any{
			svcWith("port0", clusterIP("10.96.1.21"), withPorts(v1.ServicePort{Name: "p", Port: 0, Protocol: v1.ProtocolTCP}))}},
		{name: "duplicate port", api: rejected, events: 1, objs: []any{
			svcWith("dup", clusterIP("10.96.1.22"), withPorts(v1.ServicePort{Name: "p", Port: 80, Protocol: v1.ProtocolTCP},
				v1.ServicePort{Name: "q", Port: 80, Protocol: v1.ProtocolTCP})), epsFor("dup", ok)}},
		{name: "node port out of range", api: rejected, events: 1, objs: []any{
			svcWith("np-range", clusterIP("10.96.1.23"), withPorts(v1.ServicePort{Name: "p", Port: 80, Protocol: v1.ProtocolTCP, NodePort: 70000}),
				func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeNodePort }), epsFor("np-range", ok)}},
		{name: "session affinity timeout 0", api: rejected, events: 1, objs: []any{
			svcWith("aff0", clusterIP("10.96.1.24"), port("p", v1.ProtocolTCP, 80, 0), affinity(0)), epsFor("aff0", ok)}},
		{name: "health check node port out of range", api: rejected, objs: []any{
			svcWith("hc-range", clusterIP("10.96.1.25"), port("p", v1.ProtocolTCP, 80, 30025), lbIngress("203.0.113.25"), etpLocal(70000)), epsFor("hc-range", ok)}},
		{name: "ExternalName with a ClusterIP", api: rejected, objs: []any{
			svcWith("extname", clusterIP("10.96.1.26"), port("p", v1.ProtocolTCP, 80, 0), func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeExternalName }), epsFor("extname", ok)},
			check: func(t *testing.T, e *testEnv) { lacks(t, e.ipvs.Dump(), "10.96.1.26") }},
		// EndpointSlices
		{name: "endpoint multicast next to a pod", api: accepted, events: 1, objs: []any{
			svcWith("ep-mcast", clusterIP("10.96.1.30"), port("p", v1.ProtocolTCP, 80, 0)), epsFor("ep-mcast", endpoint("239.1.2.3"), ok)},
			check: func(t *testing.T, e *testEnv) {
				hasLine(t, e.ipvs.Dump(), `TCP  10\.96\.1\.30:80 rr\n  -> 10\.244\.2\.50:80 Masq 1 0 0\n`)
			}},
		{name: "endpoint broadcast", api: accepted, events: 1, objs: []any{
			svcWith("ep-bcast", clusterIP("10.96.1.31"), port("p", v1.ProtocolTCP, 80, 0)), epsFor("ep-bcast", endpoint("255.255.255.255"), ok)}},
		{name: "endpoint 0.0.0.0", api: rejected, events: 1, objs: []any{
			svcWith("ep-zero", clusterIP("10.96.1.32"), port("p", v1.ProtocolTCP, 80, 0)), epsFor("ep-zero", endpoint("0.0.0.0"), ok)}},
		{name: "endpoint loopback", api: rejected, events: 1, objs: []any{
			svcWith("ep-lo", clusterIP("10.96.1.33"), port("p", v1.ProtocolTCP, 80, 0)), epsFor("ep-lo", endpoint("127.0.0.1"), ok)}},
		{name: "endpoint link-local", api: rejected, events: 1, objs: []any{
			svcWith("ep-ll", clusterIP("10.96.1.34"), port("p", v1.ProtocolTCP, 80, 0)), epsFor("ep-ll", endpoint("169.254.0.5"), ok)}},
		{name: "endpoint not an address", api: rejected, objs: []any{
			svcWith("ep-junk", clusterIP("10.96.1.35"), port("p", v1.ProtocolTCP, 80, 0)), epsFor("ep-junk", endpoint("not-an-ip"), ok)},
			check: func(t *testing.T, e *testEnv) {
				hasLine(t, e.ipvs.Dump(), `TCP  10\.96\.1\.35:80 rr\n  -> 10\.244\.2\.50:80 Masq 1 0 0\n`)
			}},
		{name: "endpoint of the other family in an IPv4 slice", api: rejected, objs: []any{
			svcWith("ep-v6", clusterIP("10.96.1.36"), port("p", v1.ProtocolTCP, 80, 0)), epsFor("ep-v6", ok, endpoint("fd00:244::99"))}},
		{name: "slice with port 0 and no name", api: rejected, objs: []any{
			svcWith("ep-port0", clusterIP("10.96.1.37"), port("p", v1.ProtocolTCP, 80, 0)),
			makeSlice("bad", "ep-port0", "s-1", []slicePort{{"p", v1.ProtocolTCP, 0}}, ok)}},
		{name: "slice for a Service that does not exist", api: accepted, objs: []any{epsFor("ghost", ok)}},
		{name: "slice naming a good Service from another namespace", api: accepted, objs: []any{
			makeSlice("bad", "a", "a-evil", tcp("p", 80), endpoint("10.244.2.66"))}},
		// Nodes
		{name: "own Node with odd labels", api: accepted, objs: []any{&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode,
			Labels: map[string]string{v1.LabelTopologyZone: strings.Repeat("z", 63), "": "x"}}}}},
		{name: "a Node that is not ours", api: accepted, objs: []any{&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "someone-else"}}}},
	}
}

// TestHostileObjects syncs each hostile or malformed object together with good
// Services: no failed sync, the good Services' kernel state identical to a run without
// the object, one Warning Event per refused value (not repeated by resyncs), and the
// state of a run without the object once it is deleted.
func TestHostileObjects(t *testing.T) {
	baseline := func() *testEnv {
		e := newTestEnv(t, v1.IPv4Protocol)
		e.start(goodObjects()...)
		return e
	}
	b := baseline()
	wantGood := goodState(b)
	wantAll := b.ipvs.Dump() + b.ipset.Dump() + b.nl.Dump() + b.iptablesSave()
	if !strings.Contains(wantGood, "10.96.0.1:80") || !strings.Contains(wantGood, "KUBE-CLUSTER-IP 10.96.0.10,udp:53") {
		t.Fatalf("good state filter selects nothing useful:\n%s", wantGood)
	}

	cases := hostileCases()
	if len(cases) < 30 {
		t.Fatalf("only %d hostile cases, want at least 30", len(cases))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := events.NewFakeRecorder(100)
			e := newTestEnv(t, v1.IPv4Protocol, func(o *Options) { o.Recorder = rec })
			e.start(goodObjects()...)
			for _, o := range c.objs {
				e.add(o)
			}
			e.mustSync()
			if got := goodState(e); got != wantGood {
				t.Errorf("good Services changed (apiserver: %s):\n--- want\n%s--- got\n%s", c.api, wantGood, got)
			}
			if c.check != nil {
				c.check(t, e)
			}
			// Resyncs, partial and full, report nothing again.
			e.clock.Step(2 * time.Second)
			e.mustSync()
			e.clock.Step(31 * time.Second)
			if st := e.mustSync(); !st.Full {
				t.Fatalf("expected a full sync")
			}
			if n := countEvents(rec); n != c.events {
				t.Errorf("%d Warning Events, want %d", n, c.events)
			}
			if got := goodState(e); got != wantGood {
				t.Errorf("good Services changed after a full resync")
			}

			// Deleting the objects restores the state of a run without them.
			for _, o := range c.objs {
				switch o := o.(type) {
				case *v1.Service:
					e.deleteService(o)
				case *discovery.EndpointSlice:
					e.deleteSlice(o)
				case *v1.Node:
					if o.Name == testNode {
						e.p.OnNodeUpdate(o, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}})
					}
				}
			}
			e.mustSync()
			if got := e.ipvs.Dump() + e.ipset.Dump() + e.nl.Dump() + e.iptablesSave(); got != wantAll {
				t.Errorf("state after deleting the hostile objects differs from a run without them")
			}
			if h := e.p.HeldBack(); len(h) != 0 {
				t.Errorf("still held back after deletion: %+v", h)
			}
		})
	}
}

func countEvents(rec *events.FakeRecorder) int {
	n := 0
	for {
		select {
		case ev := <-rec.Events:
			if strings.HasPrefix(ev, v1.EventTypeWarning) {
				n++
			}
		default:
			return n
		}
	}
}
