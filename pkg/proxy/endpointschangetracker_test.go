package proxy

// Address ranges: see serviceport_test.go.

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
)

const thisNode = "node-a"

// sliceUpdate hands slice to ect as the EndpointSlice informer does: as its record,
// reduced for ect's node.
func sliceUpdate(ect *EndpointsChangeTracker, slice *discovery.EndpointSlice, remove bool) bool {
	return ect.EndpointSliceUpdate(NewEndpointSliceRecord(slice, ect.cache.nodeName), remove)
}

// dumpEndpoints renders an EndpointsMap as text, one endpoint per line, in map order
// of service ports (sorted) and the map's own order of endpoints (which must already
// be sorted).
func dumpEndpoints(em EndpointsMap) string {
	names := make([]ServicePortName, 0, len(em))
	for spn := range em {
		names = append(names, spn)
	}
	slices.SortFunc(names, func(a, b ServicePortName) int {
		return strings.Compare(a.String()+"/"+string(a.Protocol), b.String()+"/"+string(b.Protocol))
	})
	var lines []string
	for _, spn := range names {
		for _, ep := range em[spn] {
			lines = append(lines, fmt.Sprintf("%s/%s %s", spn, spn.Protocol, dumpEndpoint(ep)))
		}
	}
	return strings.Join(lines, "\n")
}

func dumpEndpoint(ep *Endpoint) string {
	var b strings.Builder
	b.WriteString(ep.String())
	for _, f := range []struct {
		on   bool
		name string
	}{{ep.Ready, "ready"}, {ep.Serving, "serving"}, {ep.Terminating, "terminating"}, {ep.IsLocal, "local"}} {
		if f.on {
			b.WriteString(" " + f.name)
		}
	}
	if ep.ZoneHints() != nil {
		b.WriteString(" forZones=" + strings.Join(sets.List(ep.ZoneHints()), ","))
	}
	if ep.NodeHints() != nil {
		b.WriteString(" forNodes=" + strings.Join(sets.List(ep.NodeHints()), ","))
	}
	return b.String()
}

func epPort(name string, port int32, protocol v1.Protocol) discovery.EndpointPort {
	return discovery.EndpointPort{Name: ptr.To(name), Port: ptr.To(port), Protocol: ptr.To(protocol)}
}

type epOpt func(*discovery.Endpoint)

func endpoint(addr string, opts ...epOpt) discovery.Endpoint {
	ep := discovery.Endpoint{Addresses: []string{addr}}
	for _, o := range opts {
		o(&ep)
	}
	return ep
}

func conditions(ready, serving, terminating *bool) epOpt {
	return func(ep *discovery.Endpoint) {
		ep.Conditions = discovery.EndpointConditions{Ready: ready, Serving: serving, Terminating: terminating}
	}
}

func notReady() epOpt { return conditions(ptr.To(false), ptr.To(false), ptr.To(false)) }

func terminating() epOpt { return conditions(ptr.To(false), ptr.To(true), ptr.To(true)) }

func onNode(n string) epOpt { return func(ep *discovery.Endpoint) { ep.NodeName = ptr.To(n) } }

func inZone(z string) epOpt { return func(ep *discovery.Endpoint) { ep.Zone = ptr.To(z) } }

func hints(zones, nodes []string) epOpt {
	return func(ep *discovery.Endpoint) {
		ep.Hints = &discovery.EndpointHints{}
		for _, z := range zones {
			ep.Hints.ForZones = append(ep.Hints.ForZones, discovery.ForZone{Name: z})
		}
		for _, n := range nodes {
			ep.Hints.ForNodes = append(ep.Hints.ForNodes, discovery.ForNode{Name: n})
		}
	}
}

func makeSlice(name, svc string, at discovery.AddressType, ports []discovery.EndpointPort, eps ...discovery.Endpoint) *discovery.EndpointSlice {
	s := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{discovery.LabelServiceName: svc}},
		AddressType: at,
		Ports:       ports,
		Endpoints:   eps,
	}
	return s
}

var (
	http80  = []discovery.EndpointPort{epPort("http", 80, v1.ProtocolTCP)}
	dnsUDP  = []discovery.EndpointPort{epPort("dns", 53, v1.ProtocolUDP)}
	v4      = discovery.AddressTypeIPv4
	v6      = discovery.AddressTypeIPv6
	noSlice = (*discovery.EndpointSlice)(nil)
)

// TestEndpointSliceParsing feeds one or more slices to a fresh IPv4 tracker and
// compares the resulting map.
func TestEndpointSliceParsing(t *testing.T) {
	testCases := []struct {
		name        string
		family      v1.IPFamily
		slices      []*discovery.EndpointSlice
		wantChanged []bool
		want        string
	}{
		{
			name:        "nil conditions default to ready and serving, not terminating",
			slices:      []*discovery.EndpointSlice{makeSlice("web-1", "web", v4, http80, endpoint("10.1.0.1"))},
			wantChanged: []bool{true},
			want:        "ns/web:http/TCP 10.1.0.1:80 ready serving",
		},
		{
			name: "explicit conditions, node, zone, locality",
			slices: []*discovery.EndpointSlice{makeSlice("web-1", "web", v4, http80,
				endpoint("10.1.0.1", onNode(thisNode), inZone("z1")),
				endpoint("10.1.0.2", onNode("node-b"), notReady()),
				endpoint("10.1.0.3", onNode(thisNode), terminating()),
				endpoint("10.1.0.4", conditions(ptr.To(false), nil, ptr.To(true))),
			)},
			wantChanged: []bool{true},
			want: strings.Join([]string{
				"ns/web:http/TCP 10.1.0.1:80 ready serving local",
				"ns/web:http/TCP 10.1.0.2:80",
				"ns/web:http/TCP 10.1.0.3:80 serving terminating local",
				// Serving nil means serving, as the API documents.
				"ns/web:http/TCP 10.1.0.4:80 serving terminating",
			}, "\n"),
		},
		{
			name: "zone and node hints",
			slices: []*discovery.EndpointSlice{makeSlice("web-1", "web", v4, http80,
				endpoint("10.1.0.1", hints([]string{"z1", "z2"}, []string{thisNode})),
				endpoint("10.1.0.2", hints(nil, nil)),
			)},
			wantChanged: []bool{true},
			want:        "ns/web:http/TCP 10.1.0.1:80 ready serving forZones=z1,z2 forNodes=node-a\nns/web:http/TCP 10.1.0.2:80 ready serving",
		},
		{
			name:   "slice without the service-name label is ignored",
			slices: []*discovery.EndpointSlice{makeSlice("web-1", "", v4, http80, endpoint("10.1.0.1"))},
			// The label being present but empty is the same as missing.
			wantChanged: []bool{false},
		},
		{
			name: "slice without a namespace is ignored",
			slices: []*discovery.EndpointSlice{func() *discovery.EndpointSlice {
				s := makeSlice("web-1", "web", v4, http80, endpoint("10.1.0.1"))
				s.Namespace = ""
				return s
			}()},
			wantChanged: []bool{false},
		},
		{
			name:        "FQDN slice is ignored",
			slices:      []*discovery.EndpointSlice{makeSlice("web-1", "web", discovery.AddressTypeFQDN, http80, endpoint("web.example.com"))},
			wantChanged: []bool{false},
		},
		{
			name:        "IPv6 slice is ignored by the IPv4 tracker",
			slices:      []*discovery.EndpointSlice{makeSlice("web-1", "web", v6, http80, endpoint("fd00:1::1"))},
			wantChanged: []bool{false},
		},
		{
			name:        "IPv6 slice for the IPv6 tracker",
			family:      v1.IPv6Protocol,
			slices:      []*discovery.EndpointSlice{makeSlice("web-1", "web", v6, http80, endpoint("fd00:1::1"), endpoint("10.1.0.1"))},
			wantChanged: []bool{true},
			want:        "ns/web:http/TCP [fd00:1::1]:80 ready serving",
		},
		{
			name:        "IPv4 slice is ignored by the IPv6 tracker",
			family:      v1.IPv6Protocol,
			slices:      []*discovery.EndpointSlice{makeSlice("web-1", "web", v4, http80, endpoint("10.1.0.1"))},
			wantChanged: []bool{false},
		},
		{
			name:        "nil slice",
			slices:      []*discovery.EndpointSlice{noSlice},
			wantChanged: []bool{false},
		},
		{
			name: "invalid, wrong-family and empty addresses are skipped; sloppy IPs canonicalised",
			slices: []*discovery.EndpointSlice{makeSlice("web-1", "web", v4, http80,
				endpoint("not-an-ip"),
				endpoint("10.1.0.300"),
				endpoint("fd00:1::1"),
				discovery.Endpoint{},
				endpoint("010.001.000.007"),
				discovery.Endpoint{Addresses: []string{"10.1.0.8", "10.1.0.99"}}, // only the first counts
			)},
			wantChanged: []bool{true},
			want:        "ns/web:http/TCP 10.1.0.7:80 ready serving\nns/web:http/TCP 10.1.0.8:80 ready serving",
		},
		{
			name: "bad ports are skipped, nil protocol is TCP",
			slices: []*discovery.EndpointSlice{makeSlice("web-1", "web", v4, []discovery.EndpointPort{
				{Name: ptr.To("noport")},
				{Name: ptr.To("zero"), Port: ptr.To[int32](0)},
				{Name: ptr.To("big"), Port: ptr.To[int32](65536)},
				{Port: ptr.To[int32](81)}, // nil name
				{Name: ptr.To("icmp"), Port: ptr.To[int32](82), Protocol: ptr.To(v1.Protocol("ICMP"))},
				{Name: ptr.To("default"), Port: ptr.To[int32](83)},
				epPort("", 84, v1.ProtocolSCTP),
			}, endpoint("10.1.0.1"))},
			wantChanged: []bool{true},
			want:        "ns/web/SCTP 10.1.0.1:84 ready serving\nns/web:default/TCP 10.1.0.1:83 ready serving",
		},
		{
			name: "a slice with no usable port yields nothing",
			slices: []*discovery.EndpointSlice{makeSlice("web-1", "web", v4, []discovery.EndpointPort{
				{Name: ptr.To("zero"), Port: ptr.To[int32](0)},
			}, endpoint("10.1.0.1"))},
			wantChanged: []bool{true},
		},
		{
			name: "several slices merge; the same name on two ports keeps both numbers",
			slices: []*discovery.EndpointSlice{
				makeSlice("web-1", "web", v4, http80, endpoint("10.1.0.2")),
				makeSlice("web-2", "web", v4, []discovery.EndpointPort{epPort("http", 8080, v1.ProtocolTCP)}, endpoint("10.1.0.1")),
				makeSlice("other-1", "other", v4, http80, endpoint("10.1.0.9")),
			},
			wantChanged: []bool{true, true, true},
			want: strings.Join([]string{
				"ns/other:http/TCP 10.1.0.9:80 ready serving",
				"ns/web:http/TCP 10.1.0.1:8080 ready serving",
				"ns/web:http/TCP 10.1.0.2:80 ready serving",
			}, "\n"),
		},
		{
			name: "duplicate endpoint within a slice is kept once, ready copy wins",
			slices: []*discovery.EndpointSlice{makeSlice("web-1", "web", v4, http80,
				endpoint("10.1.0.1", notReady()),
				endpoint("10.1.0.1", onNode(thisNode)),
				endpoint("10.1.0.1", terminating()),
			)},
			wantChanged: []bool{true},
			want:        "ns/web:http/TCP 10.1.0.1:80 ready serving local",
		},
		{
			name: "duplicate endpoint across slices: ready copy wins (ready in the later slice)",
			slices: []*discovery.EndpointSlice{
				makeSlice("web-a", "web", v4, http80, endpoint("10.1.0.1", terminating())),
				makeSlice("web-b", "web", v4, http80, endpoint("10.1.0.1", onNode("node-b"))),
			},
			wantChanged: []bool{true, true},
			want:        "ns/web:http/TCP 10.1.0.1:80 ready serving",
		},
		{
			name: "duplicate endpoint across slices: ready copy wins (ready in the earlier slice)",
			slices: []*discovery.EndpointSlice{
				makeSlice("web-b", "web", v4, http80, endpoint("10.1.0.1", terminating())),
				makeSlice("web-a", "web", v4, http80, endpoint("10.1.0.1", onNode("node-b"))),
			},
			wantChanged: []bool{true, true},
			want:        "ns/web:http/TCP 10.1.0.1:80 ready serving",
		},
		{
			name: "duplicate endpoint across slices, equally usable: first slice by name wins",
			slices: []*discovery.EndpointSlice{
				makeSlice("web-b", "web", v4, http80, endpoint("10.1.0.1", onNode("node-b"))),
				makeSlice("web-a", "web", v4, http80, endpoint("10.1.0.1", onNode("node-c"))),
			},
			wantChanged: []bool{true, true},
			want:        "ns/web:http/TCP 10.1.0.1:80 ready serving",
		},
		{
			name: "endpoints are sorted by their ip:port text",
			slices: []*discovery.EndpointSlice{makeSlice("web-1", "web", v4, http80,
				endpoint("10.1.0.10"), endpoint("10.1.0.9"), endpoint("10.1.0.1"),
			)},
			wantChanged: []bool{true},
			// Text order: "10.1.0.10:80" < "10.1.0.1:80" because '0' < ':'.
			want: "ns/web:http/TCP 10.1.0.10:80 ready serving\nns/web:http/TCP 10.1.0.1:80 ready serving\nns/web:http/TCP 10.1.0.9:80 ready serving",
		},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			family := tc.family
			if family == "" {
				family = v1.IPv4Protocol
			}
			ect := NewEndpointsChangeTracker(family, thisNode)
			var changed []bool
			for _, s := range tc.slices {
				changed = append(changed, sliceUpdate(ect, s, false))
			}
			if diff := cmp.Diff(tc.wantChanged, changed); diff != "" {
				t.Errorf("EndpointSliceUpdate returns (-want +got):\n%s", diff)
			}
			em := make(EndpointsMap)
			em.Update(ect)
			if diff := cmp.Diff(tc.want, dumpEndpoints(em)); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}
			checkTrackerEndpoints(t, ect, em)
		})
	}
}

// sliceEvent is one EndpointSlice informer event.
type sliceEvent struct {
	slice  *discovery.EndpointSlice
	remove bool
}

func TestEndpointsChangeTracker(t *testing.T) {
	web1 := makeSlice("web-1", "web", v4, http80, endpoint("10.1.0.1"), endpoint("10.1.0.2"))
	web1Relabelled := web1.DeepCopy()
	web1Relabelled.Labels["extra"] = "x"
	web1Relabelled.ResourceVersion = "7"
	web1One := makeSlice("web-1", "web", v4, http80, endpoint("10.1.0.1"))
	web2 := makeSlice("web-2", "web", v4, http80, endpoint("10.1.0.2"))
	dns1 := makeSlice("dns-1", "dns", v4, dnsUDP, endpoint("10.1.0.53"), endpoint("10.1.0.54"))
	dns1One := makeSlice("dns-1", "dns", v4, dnsUDP, endpoint("10.1.0.53"))
	dns1Terminating := makeSlice("dns-1", "dns", v4, dnsUDP, endpoint("10.1.0.53", terminating()), endpoint("10.1.0.54", notReady()))
	dns1NotReady := makeSlice("dns-1", "dns", v4, dnsUDP, endpoint("10.1.0.53", notReady()))
	sctp1 := makeSlice("s-1", "s", v4, []discovery.EndpointPort{epPort("s", 9, v1.ProtocolSCTP)}, endpoint("10.1.0.9"))

	testCases := []struct {
		name        string
		initial     []sliceEvent
		events      []sliceEvent
		wantChanged []bool
		wantPending []string
		wantMap     string
		wantUpdated []types.NamespacedName
	}{
		{
			name:        "add",
			events:      []sliceEvent{{web1, false}},
			wantChanged: []bool{true},
			wantPending: []string{"ns/web"},
			wantMap:     "ns/web:http/TCP 10.1.0.1:80 ready serving\nns/web:http/TCP 10.1.0.2:80 ready serving",
			wantUpdated: []types.NamespacedName{nsn("web")},
		},
		{
			name:        "add then delete before a sync coalesces to nothing",
			events:      []sliceEvent{{web1, false}, {web1, true}},
			wantChanged: []bool{true, true},
		},
		{
			name:        "deleting a slice never seen is no change",
			events:      []sliceEvent{{web1, true}},
			wantChanged: []bool{false},
		},
		{
			name:        "update touching only irrelevant fields is no change",
			initial:     []sliceEvent{{web1, false}},
			events:      []sliceEvent{{web1Relabelled, false}},
			wantChanged: []bool{false},
			wantMap:     "ns/web:http/TCP 10.1.0.1:80 ready serving\nns/web:http/TCP 10.1.0.2:80 ready serving",
		},
		{
			name:        "update and revert before a sync is no change",
			initial:     []sliceEvent{{web1, false}},
			events:      []sliceEvent{{web1One, false}, {web1, false}},
			wantChanged: []bool{true, true},
			wantMap:     "ns/web:http/TCP 10.1.0.1:80 ready serving\nns/web:http/TCP 10.1.0.2:80 ready serving",
		},
		{
			name:        "repeating the pending state is no change",
			events:      []sliceEvent{{web1, false}, {web1, false}},
			wantChanged: []bool{true, false},
			wantPending: []string{"ns/web"},
			wantMap:     "ns/web:http/TCP 10.1.0.1:80 ready serving\nns/web:http/TCP 10.1.0.2:80 ready serving",
			wantUpdated: []types.NamespacedName{nsn("web")},
		},
		{
			name:        "endpoint moving to another slice in two steps is no change",
			initial:     []sliceEvent{{web1, false}},
			events:      []sliceEvent{{web2, false}, {web1One, false}},
			wantChanged: []bool{true, true},
			wantPending: []string{"ns/web"},
			wantMap:     "ns/web:http/TCP 10.1.0.1:80 ready serving\nns/web:http/TCP 10.1.0.2:80 ready serving",
		},
		{
			name:        "last slice deleted removes the service's endpoints",
			initial:     []sliceEvent{{web1, false}, {dns1, false}},
			events:      []sliceEvent{{web1, true}},
			wantChanged: []bool{true},
			wantPending: []string{"ns/web"},
			wantMap:     "ns/dns:dns/UDP 10.1.0.53:53 ready serving\nns/dns:dns/UDP 10.1.0.54:53 ready serving",
			wantUpdated: []types.NamespacedName{nsn("web")},
		},
		{
			name:        "UDP endpoint removed is stale",
			initial:     []sliceEvent{{dns1, false}},
			events:      []sliceEvent{{dns1One, false}},
			wantChanged: []bool{true},
			wantPending: []string{"ns/dns"},
			wantMap:     "ns/dns:dns/UDP 10.1.0.53:53 ready serving",
			wantUpdated: []types.NamespacedName{nsn("dns")},
		},
		{
			name:        "UDP endpoint no longer serving is stale, serving-terminating is not",
			initial:     []sliceEvent{{dns1, false}},
			events:      []sliceEvent{{dns1Terminating, false}},
			wantChanged: []bool{true},
			wantPending: []string{"ns/dns"},
			wantMap:     "ns/dns:dns/UDP 10.1.0.53:53 serving terminating\nns/dns:dns/UDP 10.1.0.54:53",
			wantUpdated: []types.NamespacedName{nsn("dns")},
		},
		{
			name:        "deleting the UDP slice makes every serving endpoint stale",
			initial:     []sliceEvent{{dns1, false}},
			events:      []sliceEvent{{dns1, true}},
			wantChanged: []bool{true},
			wantPending: []string{"ns/dns"},
			wantUpdated: []types.NamespacedName{nsn("dns")},
		},
		{
			name:        "removing a UDP endpoint that never served is not stale",
			initial:     []sliceEvent{{dns1NotReady, false}},
			events:      []sliceEvent{{dns1NotReady, true}},
			wantChanged: []bool{true},
			wantPending: []string{"ns/dns"},
			wantUpdated: []types.NamespacedName{nsn("dns")},
		},
		{
			name:        "SCTP is connectionless for conntrack too",
			initial:     []sliceEvent{{sctp1, false}},
			events:      []sliceEvent{{sctp1, true}},
			wantChanged: []bool{true},
			wantPending: []string{"ns/s"},
			wantUpdated: []types.NamespacedName{nsn("s")},
		},
		{
			name:        "TCP endpoint removed is not reported",
			initial:     []sliceEvent{{web1, false}},
			events:      []sliceEvent{{web1One, false}},
			wantChanged: []bool{true},
			wantPending: []string{"ns/web"},
			wantMap:     "ns/web:http/TCP 10.1.0.1:80 ready serving",
			wantUpdated: []types.NamespacedName{nsn("web")},
		},
		{
			name:        "UDP port going from no serving endpoint to some is newly active",
			initial:     []sliceEvent{{dns1NotReady, false}},
			events:      []sliceEvent{{dns1One, false}},
			wantChanged: []bool{true},
			wantPending: []string{"ns/dns"},
			wantMap:     "ns/dns:dns/UDP 10.1.0.53:53 ready serving",
			wantUpdated: []types.NamespacedName{nsn("dns")},
		},
		{
			name:        "new UDP service is newly active",
			events:      []sliceEvent{{dns1One, false}, {sctp1, false}},
			wantChanged: []bool{true, true},
			wantPending: []string{"ns/dns", "ns/s"},
			wantMap:     "ns/dns:dns/UDP 10.1.0.53:53 ready serving\nns/s:s/SCTP 10.1.0.9:9 ready serving",
			wantUpdated: []types.NamespacedName{nsn("dns"), nsn("s")},
		},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			ect := NewEndpointsChangeTracker(v1.IPv4Protocol, thisNode)
			em := make(EndpointsMap)
			for _, e := range tc.initial {
				sliceUpdate(ect, e.slice, e.remove)
			}
			em.Update(ect)

			var changed []bool
			for _, e := range tc.events {
				changed = append(changed, sliceUpdate(ect, e.slice, e.remove))
			}
			if diff := cmp.Diff(tc.wantChanged, changed); diff != "" {
				t.Errorf("EndpointSliceUpdate returns (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(sets.New(tc.wantPending...), ect.PendingChanges()); diff != "" {
				t.Errorf("PendingChanges (-want +got):\n%s", diff)
			}
			result := em.Update(ect)
			if diff := cmp.Diff(tc.wantMap, dumpEndpoints(em)); diff != "" {
				t.Errorf("map (-want +got):\n%s", diff)
			}
			checkTrackerEndpoints(t, ect, em)
			if diff := cmp.Diff(sets.New(tc.wantUpdated...), result.UpdatedServices); diff != "" {
				t.Errorf("UpdatedServices (-want +got):\n%s", diff)
			}
			if ect.PendingChanges().Len() != 0 {
				t.Errorf("changes still pending after Update")
			}
			if again := em.Update(ect); again.UpdatedServices.Len() != 0 {
				t.Errorf("second Update reported changes: %v", again.UpdatedServices)
			}
		})
	}
}

func TestLastChangeTriggerTimes(t *testing.T) {
	ect := NewEndpointsChangeTracker(v1.IPv4Protocol, thisNode)
	after := ect.startTime.Add(time.Second).UTC()
	before := ect.startTime.Add(-time.Hour).UTC()
	annotated := func(name, svc, addr string, at time.Time) *discovery.EndpointSlice {
		s := makeSlice(name, svc, v4, http80, endpoint(addr))
		s.Annotations = map[string]string{v1.EndpointsLastChangeTriggerTime: at.Format(time.RFC3339Nano)}
		return s
	}
	sliceUpdate(ect, annotated("a-1", "a", "10.1.0.1", after), false)
	sliceUpdate(ect, annotated("a-1", "a", "10.1.0.2", after.Add(time.Second)), false)
	sliceUpdate(ect, annotated("b-1", "b", "10.1.0.3", before), false) // predates the tracker
	malformed := makeSlice("c-1", "c", v4, http80, endpoint("10.1.0.4"))
	malformed.Annotations = map[string]string{v1.EndpointsLastChangeTriggerTime: "yesterday"}
	sliceUpdate(ect, malformed, false)
	sliceUpdate(ect, annotated("d-1", "d", "10.1.0.5", after), false)
	sliceUpdate(ect, annotated("d-1", "d", "10.1.0.5", after), true) // deletion drops d's times

	em := make(EndpointsMap)
	got := em.Update(ect).LastChangeTriggerTimes
	want := map[types.NamespacedName][]time.Time{nsn("a"): {after, after.Add(time.Second)}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if again := em.Update(ect).LastChangeTriggerTimes; len(again) != 0 {
		t.Fatalf("trigger times not cleared: %v", again)
	}
}

// checkTrackerEndpoints: what the tracker hands out port by port (Endpoints) is what
// the map holds; a port the map lacks has none.
func checkTrackerEndpoints(t *testing.T, ect *EndpointsChangeTracker, em EndpointsMap) {
	t.Helper()
	for spn, eps := range em {
		got := ect.Endpoints(spn)
		if !reflect.DeepEqual(got, eps) {
			t.Errorf("Endpoints(%s) = %v, want the map's %v", spn, got, eps)
		}
		other := spn
		other.Port += "-not-a-port"
		if got := ect.Endpoints(other); got != nil {
			t.Errorf("Endpoints(%s) = %v, want none", other, got)
		}
	}
}
