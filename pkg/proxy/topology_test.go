package proxy

// Address ranges: see serviceport_test.go. This node is node-a in zone z1.

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

type tep struct {
	ip                          string
	ready, serving, terminating bool
	local                       bool
	zones, nodes                []string
}

func (e tep) endpoint() *Endpoint {
	ep := NewEndpoint(netip.MustParseAddr(e.ip), 80, e.local, e.ready, e.serving, e.terminating)
	if e.zones != nil {
		ep.Hints = &EndpointHints{Zones: sets.New(e.zones...)}
	}
	if e.nodes != nil {
		if ep.Hints == nil {
			ep.Hints = &EndpointHints{}
		}
		ep.Hints.Nodes = sets.New(e.nodes...)
	}
	return ep
}

// Endpoint states.
func ready(ip string) tep { return tep{ip: ip, ready: true, serving: true} }
func termServing(ip string) tep {
	return tep{ip: ip, serving: true, terminating: true}
}
func termNotServing(ip string) tep { return tep{ip: ip, terminating: true} }
func unready(ip string) tep        { return tep{ip: ip} }
func (e tep) isLocal() tep         { e.local = true; return e }
func (e tep) forZones(z ...string) tep {
	e.zones = z
	return e
}
func (e tep) forNodes(n ...string) tep {
	e.nodes = n
	return e
}

// ipList renders endpoints by IP; nil and empty differ ("nil" vs "").
func epIPs(eps []*Endpoint) string {
	if eps == nil {
		return "nil"
	}
	var ips []string
	for _, ep := range eps {
		ips = append(ips, ep.IP())
	}
	return strings.Join(ips, ",")
}

func TestCategorizeEndpoints(t *testing.T) {
	clusterIP := &ServicePortInfo{ClusterIP: net.ParseIP("10.0.0.1"), Port: 80, Protocol: v1.ProtocolTCP}
	iTPLocal := &ServicePortInfo{ClusterIP: net.ParseIP("10.0.0.1"), Port: 80, Protocol: v1.ProtocolTCP, InternalPolicyLocal: true}
	eTPLocal := &ServicePortInfo{ClusterIP: net.ParseIP("10.0.0.1"), Port: 80, Protocol: v1.ProtocolTCP, NodePort: 30080, ExternalPolicyLocal: true}
	bothLocal := &ServicePortInfo{ClusterIP: net.ParseIP("10.0.0.1"), Port: 80, Protocol: v1.ProtocolTCP, NodePort: 30080, ExternalPolicyLocal: true, InternalPolicyLocal: true}
	distributed := &ServicePortInfo{ClusterIP: net.ParseIP("10.0.0.1"), Port: 80, Protocol: v1.ProtocolTCP, External: &ServicePortExternal{TrafficDistribution: v1.ServiceTrafficDistributionPreferClose}}
	zoneLabels := map[string]string{v1.LabelTopologyZone: "z1"}

	testCases := []struct {
		name       string
		svc        *ServicePortInfo
		nodeLabels map[string]string
		endpoints  []tep
		// want cluster, local, allReachable as comma-separated IPs ("nil" for nil)
		cluster, local, all string
		hasAny              bool
	}{
		{
			name:    "no endpoints",
			svc:     clusterIP,
			cluster: "nil", local: "nil", all: "nil",
		},
		{
			name:      "cluster policy: ready endpoints",
			svc:       clusterIP,
			endpoints: []tep{ready("10.1.0.1"), ready("10.1.0.2").isLocal(), unready("10.1.0.3"), termServing("10.1.0.4")},
			cluster:   "10.1.0.1,10.1.0.2", local: "nil", all: "10.1.0.1,10.1.0.2", hasAny: true,
		},
		{
			name:      "cluster policy: no ready endpoint falls back to serving-terminating",
			svc:       clusterIP,
			endpoints: []tep{unready("10.1.0.1"), termServing("10.1.0.2"), termNotServing("10.1.0.3"), termServing("10.1.0.4")},
			cluster:   "10.1.0.2,10.1.0.4", local: "nil", all: "10.1.0.2,10.1.0.4", hasAny: true,
		},
		{
			name:      "cluster policy: nothing usable",
			svc:       clusterIP,
			endpoints: []tep{unready("10.1.0.1"), termNotServing("10.1.0.2")},
			cluster:   "", local: "nil", all: "", hasAny: false,
		},
		{
			name:       "zone hints: every ready endpoint hinted, some for this zone",
			svc:        clusterIP,
			nodeLabels: zoneLabels,
			endpoints:  []tep{ready("10.1.0.1").forZones("z1"), ready("10.1.0.2").forZones("z2"), ready("10.1.0.3").forZones("z1", "z2")},
			cluster:    "10.1.0.1,10.1.0.3", local: "nil", all: "10.1.0.1,10.1.0.3", hasAny: true,
		},
		{
			name:       "zone hints: none for this zone, use all",
			svc:        clusterIP,
			nodeLabels: zoneLabels,
			endpoints:  []tep{ready("10.1.0.1").forZones("z2"), ready("10.1.0.2").forZones("z3")},
			cluster:    "10.1.0.1,10.1.0.2", local: "nil", all: "10.1.0.1,10.1.0.2", hasAny: true,
		},
		{
			name:       "zone hints: a ready endpoint without hints disables topology",
			svc:        clusterIP,
			nodeLabels: zoneLabels,
			endpoints:  []tep{ready("10.1.0.1").forZones("z1"), ready("10.1.0.2")},
			cluster:    "10.1.0.1,10.1.0.2", local: "nil", all: "10.1.0.1,10.1.0.2", hasAny: true,
		},
		{
			name:       "zone hints: an unready endpoint without hints does not matter",
			svc:        clusterIP,
			nodeLabels: zoneLabels,
			endpoints:  []tep{ready("10.1.0.1").forZones("z1"), ready("10.1.0.2").forZones("z2"), unready("10.1.0.3")},
			cluster:    "10.1.0.1", local: "nil", all: "10.1.0.1", hasAny: true,
		},
		{
			name:       "zone hints: only an unready endpoint is hinted for this zone, use all",
			svc:        clusterIP,
			nodeLabels: zoneLabels,
			endpoints:  []tep{ready("10.1.0.1").forZones("z2"), unready("10.1.0.2").forZones("z1")},
			cluster:    "10.1.0.1", local: "nil", all: "10.1.0.1", hasAny: true,
		},
		{
			name:       "zone hints: node without a zone label ignores them",
			svc:        clusterIP,
			nodeLabels: map[string]string{},
			endpoints:  []tep{ready("10.1.0.1").forZones("z1"), ready("10.1.0.2").forZones("z2")},
			cluster:    "10.1.0.1,10.1.0.2", local: "nil", all: "10.1.0.1,10.1.0.2", hasAny: true,
		},
		{
			name:       "node hints: every ready endpoint hinted, one for this node (PreferSameNode)",
			svc:        clusterIP,
			nodeLabels: zoneLabels,
			endpoints: []tep{
				ready("10.1.0.1").isLocal().forNodes(thisNode).forZones("z1"),
				ready("10.1.0.2").forNodes("node-b").forZones("z1"),
				ready("10.1.0.3").forNodes("node-c").forZones("z2"),
			},
			cluster: "10.1.0.1", local: "nil", all: "10.1.0.1", hasAny: true,
		},
		{
			name:       "node hints: none for this node, fall back to zone hints",
			svc:        clusterIP,
			nodeLabels: zoneLabels,
			endpoints: []tep{
				ready("10.1.0.2").forNodes("node-b").forZones("z1"),
				ready("10.1.0.3").forNodes("node-c").forZones("z2"),
			},
			cluster: "10.1.0.2", local: "nil", all: "10.1.0.2", hasAny: true,
		},
		{
			name:       "node hints: missing on one endpoint, fall back to zone hints",
			svc:        clusterIP,
			nodeLabels: zoneLabels,
			endpoints: []tep{
				ready("10.1.0.1").isLocal().forNodes(thisNode).forZones("z1"),
				ready("10.1.0.2").forZones("z1"),
				ready("10.1.0.3").forNodes("node-c").forZones("z2"),
			},
			cluster: "10.1.0.1,10.1.0.2", local: "nil", all: "10.1.0.1,10.1.0.2", hasAny: true,
		},
		{
			name:       "node hints without zone hints and none for this node: all",
			svc:        clusterIP,
			nodeLabels: zoneLabels,
			endpoints:  []tep{ready("10.1.0.2").forNodes("node-b"), ready("10.1.0.3").forNodes("node-c")},
			cluster:    "10.1.0.2,10.1.0.3", local: "nil", all: "10.1.0.2,10.1.0.3", hasAny: true,
		},
		{
			name:       "terminating fallback ignores topology",
			svc:        clusterIP,
			nodeLabels: zoneLabels,
			endpoints:  []tep{termServing("10.1.0.1").forZones("z1"), termServing("10.1.0.2").forZones("z2")},
			cluster:    "10.1.0.1,10.1.0.2", local: "nil", all: "10.1.0.1,10.1.0.2", hasAny: true,
		},
		{
			name:       "the trafficDistribution field alone does not filter: hints do",
			svc:        distributed,
			nodeLabels: zoneLabels,
			endpoints:  []tep{ready("10.1.0.1"), ready("10.1.0.2")},
			cluster:    "10.1.0.1,10.1.0.2", local: "nil", all: "10.1.0.1,10.1.0.2", hasAny: true,
		},
		{
			name:      "iTP Local: local ready endpoints only",
			svc:       iTPLocal,
			endpoints: []tep{ready("10.1.0.1").isLocal(), ready("10.1.0.2"), termServing("10.1.0.3").isLocal()},
			cluster:   "nil", local: "10.1.0.1", all: "10.1.0.1", hasAny: true,
		},
		{
			name:      "iTP Local: no local endpoint, no fallback to remote",
			svc:       iTPLocal,
			endpoints: []tep{ready("10.1.0.2")},
			cluster:   "nil", local: "nil", all: "nil", hasAny: true,
		},
		{
			name:      "iTP Local: only a local serving-terminating endpoint",
			svc:       iTPLocal,
			endpoints: []tep{termServing("10.1.0.1").isLocal(), ready("10.1.0.2"), termNotServing("10.1.0.3").isLocal()},
			cluster:   "nil", local: "10.1.0.1", all: "10.1.0.1", hasAny: true,
		},
		{
			name:      "iTP Local: nothing usable anywhere",
			svc:       iTPLocal,
			endpoints: []tep{unready("10.1.0.1").isLocal(), termNotServing("10.1.0.2")},
			cluster:   "nil", local: "nil", all: "nil", hasAny: false,
		},
		{
			name:      "eTP Local: cluster set for internal traffic, local set for external",
			svc:       eTPLocal,
			endpoints: []tep{ready("10.1.0.1").isLocal(), ready("10.1.0.2"), unready("10.1.0.3").isLocal()},
			cluster:   "10.1.0.1,10.1.0.2", local: "10.1.0.1", all: "10.1.0.1,10.1.0.2", hasAny: true,
		},
		{
			name:      "eTP Local: local fallback to terminating is independent of the cluster set",
			svc:       eTPLocal,
			endpoints: []tep{termServing("10.1.0.1").isLocal(), ready("10.1.0.2")},
			cluster:   "10.1.0.2", local: "10.1.0.1", all: "10.1.0.1,10.1.0.2", hasAny: true,
		},
		{
			name:       "eTP Local: topology drops a local endpoint from the cluster set; all is the union",
			svc:        eTPLocal,
			nodeLabels: zoneLabels,
			endpoints:  []tep{ready("10.1.0.1").isLocal().forZones("z2"), ready("10.1.0.2").forZones("z1")},
			cluster:    "10.1.0.2", local: "10.1.0.1", all: "10.1.0.1,10.1.0.2", hasAny: true,
		},
		{
			name:      "eTP Local: no local endpoint",
			svc:       eTPLocal,
			endpoints: []tep{ready("10.1.0.2")},
			cluster:   "10.1.0.2", local: "nil", all: "10.1.0.2", hasAny: true,
		},
		{
			name:      "eTP and iTP Local: only local sets",
			svc:       bothLocal,
			endpoints: []tep{ready("10.1.0.1").isLocal(), ready("10.1.0.2")},
			cluster:   "nil", local: "10.1.0.1", all: "10.1.0.1", hasAny: true,
		},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			var eps []*Endpoint
			for _, e := range tc.endpoints {
				eps = append(eps, e.endpoint())
			}
			cluster, local, all, hasAny := CategorizeEndpoints(eps, tc.svc, thisNode, tc.nodeLabels)
			got := []string{epIPs(cluster), epIPs(local), epIPs(all)}
			want := []string{tc.cluster, tc.local, tc.all}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("[cluster local all] (-want +got):\n%s", diff)
			}
			if hasAny != tc.hasAny {
				t.Errorf("hasAnyEndpoints = %v, want %v", hasAny, tc.hasAny)
			}
		})
	}
}
