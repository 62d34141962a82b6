package ipvs

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	iptablesrules "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules/iptables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipset"
)

// flowCase is one packet and where it must end up.
type flowCase struct {
	name string
	pkt  packet
	want string
}

// packetFlowObjects are Services covering every Service feature.
func packetFlowObjects() []any {
	return []any{
		// Plain ClusterIP, two endpoints on two nodes.
		makeService("ns", "web", clusterIP("10.96.0.10"), port("http", v1.ProtocolTCP, 80, 0)),
		makeSlice("ns", "web", "web-1", tcp("http", 8080), endpoint("10.244.1.5"), endpoint("10.244.2.7")),
		// NodePort with externalIPs.
		makeService("ns", "np", clusterIP("10.96.0.11"), port("p", v1.ProtocolTCP, 81, 30081), externalIPs("203.0.113.5")),
		makeSlice("ns", "np", "np-1", tcp("p", 9000), endpoint("10.244.2.8")),
		// LoadBalancer with source ranges; the node's address is not in them.
		makeService("ns", "lb", clusterIP("10.96.0.12"), port("p", v1.ProtocolTCP, 443, 30443), lbIngress("203.0.113.10"), sourceRanges("198.18.0.0/24")),
		makeSlice("ns", "lb", "lb-1", tcp("p", 8443), endpoint("10.244.2.9")),
		// eTP=Local LoadBalancer with a local and a remote endpoint.
		makeService("ns", "local", clusterIP("10.96.0.13"), port("p", v1.ProtocolTCP, 80, 30080), lbIngress("203.0.113.11"), etpLocal(32000)),
		makeSlice("ns", "local", "local-1", tcp("p", 80), endpoint("10.244.1.20"), endpoint("10.244.2.20")),
		// iTP=Local with only a remote endpoint.
		makeService("ns", "itp", clusterIP("10.96.0.14"), port("p", v1.ProtocolTCP, 80, 0), itpLocal),
		makeSlice("ns", "itp", "itp-1", tcp("p", 80), endpoint("10.244.2.30")),
		// UDP DNS-like service.
		makeService("ns", "dns", clusterIP("10.96.0.53"), port("dns", v1.ProtocolUDP, 53, 0)),
		makeSlice("ns", "dns", "dns-1", udp("dns", 5353), endpoint("10.244.1.53")),
	}
}

// packetFlowCases starts a proxier with Services covering every Service feature and
// returns it with the flows its rules must produce.
func packetFlowCases(t *testing.T) (*testEnv, []flowCase) {
	e := newTestEnv(t, v1.IPv4Protocol, func(o *Options) {
		o.LocalDetectorArgs = []string{"!", "-s", "10.244.0.0/16"}
	})
	e.start(packetFlowObjects()...)
	return e, []flowCase{
		{"pod to cluster IP", packet{src: "10.244.1.99", dst: "10.96.0.10", port: 80, proto: "tcp", fromBridge: true}, "10.244.1.5:8080,10.244.2.7:8080"},
		{"off-cluster source to cluster IP is masqueraded", packet{src: "198.18.0.1", dst: "10.96.0.10", port: 80, proto: "tcp"}, "10.244.1.5:8080,10.244.2.7:8080 masq"},
		{"hairpin: endpoint to its own service is masqueraded", packet{src: "10.244.1.5", dst: "10.96.0.10", port: 80, proto: "tcp", fromBridge: true}, "10.244.1.5:8080,10.244.2.7:8080 masq"},
		{"other port of a service address is rejected", packet{src: "10.244.1.99", dst: "10.96.0.10", port: 22, proto: "tcp", fromBridge: true}, "REJECT"},
		{"node port on the node address", packet{src: "198.18.0.1", dst: "192.168.0.10", port: 30081, proto: "tcp"}, "10.244.2.8:9000 masq"},
		{"node port on the second node address", packet{src: "198.18.0.1", dst: "192.168.1.10", port: 30081, proto: "tcp"}, "10.244.2.8:9000 masq"},
		{"external IP", packet{src: "198.18.0.1", dst: "203.0.113.5", port: 81, proto: "tcp"}, "10.244.2.8:9000 masq"},
		{"LB from an allowed source", packet{src: "198.18.0.7", dst: "203.0.113.10", port: 443, proto: "tcp"}, "10.244.2.9:8443 masq"},
		{"LB from a source outside the ranges is dropped", packet{src: "198.19.0.7", dst: "203.0.113.10", port: 443, proto: "tcp"}, "DROP"},
		{"LB from the node itself is dropped (kubernetes#119656)", packet{src: "203.0.113.10", dst: "203.0.113.10", port: 443, proto: "tcp", fromNode: true}, "DROP"},
		{"eTP=Local LB keeps the source and uses the local endpoint", packet{src: "198.18.0.1", dst: "203.0.113.11", port: 80, proto: "tcp"}, "10.244.1.20:80"},
		{"eTP=Local node port keeps the source", packet{src: "198.18.0.1", dst: "192.168.0.10", port: 30080, proto: "tcp"}, "10.244.1.20:80"},
		{"eTP=Local cluster IP uses every endpoint", packet{src: "10.244.1.99", dst: "10.96.0.13", port: 80, proto: "tcp", fromBridge: true}, "10.244.1.20:80,10.244.2.20:80"},
		{"iTP=Local without local endpoints has none", packet{src: "10.244.1.99", dst: "10.96.0.14", port: 80, proto: "tcp", fromBridge: true}, "NO-ENDPOINTS"},
		{"UDP cluster IP", packet{src: "10.244.1.99", dst: "10.96.0.53", port: 53, proto: "udp", fromBridge: true}, "10.244.1.53:5353"},
		{"UDP to a TCP-only service port is rejected", packet{src: "10.244.1.99", dst: "10.96.0.10", port: 80, proto: "udp", fromBridge: true}, "REJECT"},
		{"health check node port is accepted locally", packet{src: "198.18.0.1", dst: "192.168.0.10", port: 32000, proto: "tcp"}, "LOCAL"},
	}
}

// TestPacketFlows drives the tracer over the state the proxier programs for a set of
// Services covering every Service feature, and checks where packets go.
func TestPacketFlows(t *testing.T) {
	e, cases := packetFlowCases(t)
	tr := e.tracer()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tr.trace(tc.pkt).String(); got != tc.want {
				t.Errorf("trace(%+v) = %q, want %q", tc.pkt, got, tc.want)
			}
		})
	}
}

// TestEntriesAreCanonical: every member the builder produces is already in the form
// `ipset save` prints, so a full sync that reads the kernel back finds no difference.
func TestEntriesAreCanonical(t *testing.T) {
	for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		e := newTestEnv(t, family)
		if family == v1.IPv4Protocol {
			e.start(
				makeService("ns", "lb", clusterIP("10.96.0.12"), port("p", v1.ProtocolTCP, 443, 30443), lbIngress("203.0.113.10"),
					sourceRanges("198.18.0.0/24", "192.168.0.10/32"), externalIPs("203.0.113.5")),
				makeSlice("ns", "lb", "lb-1", tcp("p", 8443), endpoint("10.244.1.9")),
				makeService("ns", "s", clusterIP("10.96.0.13"), port("p", v1.ProtocolSCTP, 80, 30080), etpLocal(32000)),
				makeSlice("ns", "s", "s-1", []slicePort{{"p", v1.ProtocolSCTP, 80}}, endpoint("10.244.1.10")),
			)
		} else {
			svc := makeService("ns", "lb", clusterIP("fd00:96::12"), port("p", v1.ProtocolUDP, 53, 30053), lbIngress("2001:db8::10"),
				sourceRanges("2001:db8:1::/64", "fd00:1::10/128"))
			e.start(svc, makeSlice("ns", "lb", "lb-1", udp("p", 53), endpoint("fd00:244::1:9")))
		}
		specs := map[string]*ipset.Set{}
		for _, s := range iptablesrules.SetSpecs(family) {
			specs[s.Name] = s
		}
		all, _ := e.ipset.SaveAll(context.Background())
		n := 0
		for name, s := range all {
			for _, entry := range s.Entries {
				n++
				canon, err := ipset.CanonicalEntry(s.Type, specs[name].Family, entry)
				if err != nil || canon != entry {
					t.Errorf("%s: entry %q of %s is not canonical (%q, %v)", family, entry, name, canon, err)
				}
			}
		}
		if n < 8 {
			t.Errorf("%s: only %d entries checked", family, n)
		}
		// A second full sync over the same kernel changes nothing.
		e.clock.Step(time.Minute)
		st := e.mustSync()
		if !st.Full || st.IPSetOps != 0 || st.IPVSOps != 0 || st.AddressOps != 0 {
			t.Errorf("%s: a full sync over an up-to-date kernel issued writes: %+v", family, st)
		}
	}
}
