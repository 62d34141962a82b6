package proxy

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/events"
)

// serviceUpdate hands a Service change to sct as the Service informer does: as
// records.
func serviceUpdate(sct *ServiceChangeTracker, previous, current *v1.Service) bool {
	return sct.Update(NewServiceRecord(previous), NewServiceRecord(current))
}

func udpPort(name string, port int32) v1.ServicePort {
	return v1.ServicePort{Name: name, Port: port, Protocol: v1.ProtocolUDP}
}

func tcpPort(name string, port int32) v1.ServicePort {
	return v1.ServicePort{Name: name, Port: port, Protocol: v1.ProtocolTCP}
}

func nsn(name string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: name} }

// svcEvent is one informer event: add (old nil), update, or delete (new nil).
type svcEvent struct{ old, new *v1.Service }

func TestServiceChangeTracker(t *testing.T) {
	dns := makeService("dns", clusterIPs("10.0.0.10"), ports(udpPort("dns", 53), tcpPort("dns-tcp", 53)))
	dnsTCPOnly := makeService("dns", clusterIPs("10.0.0.10"), ports(tcpPort("dns-tcp", 53)))
	dnsOneUDP := makeService("dns", clusterIPs("10.0.0.10"), ports(udpPort("dns", 53), udpPort("dns2", 5353)))
	dnsOtherUDP := makeService("dns", clusterIPs("10.0.0.10"), ports(udpPort("dns2", 5353)))
	web := makeService("web", clusterIPs("10.0.0.20"), ports(tcpPort("http", 80)))
	webRelabelled := web.DeepCopy()
	webRelabelled.Labels = map[string]string{"team": "x"}
	web8080 := makeService("web", clusterIPs("10.0.0.20"), ports(tcpPort("http", 8080)))
	webV6 := makeService("web", clusterIPs("fd00:10::20"), ports(tcpPort("http", 80)))
	sctp := makeService("sctp", clusterIPs("10.0.0.30"), ports(v1.ServicePort{Name: "s", Port: 9, Protocol: v1.ProtocolSCTP}))

	testCases := []struct {
		name string
		// initial events are applied (synced) before the events under test.
		initial     []svcEvent
		events      []svcEvent
		wantPending []bool // Update's return value per event
		wantMap     string
		wantUpdated []types.NamespacedName
	}{
		{
			name:        "add",
			events:      []svcEvent{{nil, web}},
			wantPending: []bool{true},
			wantMap:     "ns/web:http/TCP 10.0.0.20:80/TCP",
			wantUpdated: []types.NamespacedName{nsn("web")},
		},
		{
			name:        "add then delete before a sync coalesces to nothing",
			events:      []svcEvent{{nil, web}, {web, nil}},
			wantPending: []bool{true, false},
		},
		{
			name:        "update that does not change ports is no change",
			initial:     []svcEvent{{nil, web}},
			events:      []svcEvent{{web, webRelabelled}},
			wantPending: []bool{false},
			wantMap:     "ns/web:http/TCP 10.0.0.20:80/TCP",
		},
		{
			name:        "update and revert before a sync is no change",
			initial:     []svcEvent{{nil, web}},
			events:      []svcEvent{{web, web8080}, {web8080, web}},
			wantPending: []bool{true, false},
			wantMap:     "ns/web:http/TCP 10.0.0.20:80/TCP",
		},
		{
			name:        "port number change",
			initial:     []svcEvent{{nil, web}},
			events:      []svcEvent{{web, web8080}},
			wantPending: []bool{true},
			wantMap:     "ns/web:http/TCP 10.0.0.20:8080/TCP",
			wantUpdated: []types.NamespacedName{nsn("web")},
		},
		{
			name:        "delete then re-add unchanged before a sync is no change",
			initial:     []svcEvent{{nil, web}},
			events:      []svcEvent{{web, nil}, {nil, web}},
			wantPending: []bool{true, false},
			wantMap:     "ns/web:http/TCP 10.0.0.20:80/TCP",
		},
		{
			name:        "service moving to the other family leaves this one",
			initial:     []svcEvent{{nil, web}},
			events:      []svcEvent{{web, webV6}},
			wantPending: []bool{true},
			wantUpdated: []types.NamespacedName{nsn("web")},
		},
		{
			name:        "deleting a UDP service reports its cluster IP",
			initial:     []svcEvent{{nil, dns}, {nil, web}},
			events:      []svcEvent{{dns, nil}},
			wantPending: []bool{true},
			wantMap:     "ns/web:http/TCP 10.0.0.20:80/TCP",
			wantUpdated: []types.NamespacedName{nsn("dns")},
		},
		{
			name:        "dropping the only UDP port reports the IP even if TCP remains",
			initial:     []svcEvent{{nil, dns}},
			events:      []svcEvent{{dns, dnsTCPOnly}},
			wantPending: []bool{true},
			wantMap:     "ns/dns:dns-tcp/TCP 10.0.0.10:53/TCP",
			wantUpdated: []types.NamespacedName{nsn("dns")},
		},
		{
			name:        "dropping one of two UDP ports keeps the IP in use",
			initial:     []svcEvent{{nil, dnsOneUDP}},
			events:      []svcEvent{{dnsOneUDP, dnsOtherUDP}},
			wantPending: []bool{true},
			wantMap:     "ns/dns:dns2/UDP 10.0.0.10:5353/UDP",
			wantUpdated: []types.NamespacedName{nsn("dns")},
		},
		{
			name:        "deleting a TCP service reports no UDP IP",
			initial:     []svcEvent{{nil, web}},
			events:      []svcEvent{{web, nil}},
			wantPending: []bool{true},
			wantUpdated: []types.NamespacedName{nsn("web")},
		},
		{
			name:        "deleting an SCTP service reports its cluster IP",
			initial:     []svcEvent{{nil, sctp}},
			events:      []svcEvent{{sctp, nil}},
			wantPending: []bool{true},
			wantUpdated: []types.NamespacedName{nsn("sctp")},
		},
		{
			name:        "independent services; the return value says any change is pending",
			events:      []svcEvent{{nil, web}, {nil, dns}, {dns, nil}},
			wantPending: []bool{true, true, true},
			wantMap:     "ns/web:http/TCP 10.0.0.20:80/TCP",
			wantUpdated: []types.NamespacedName{nsn("web")},
		},
		{
			name:        "nil, nil",
			events:      []svcEvent{{nil, nil}},
			wantPending: []bool{false},
		},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			sct := NewServiceChangeTracker(v1.IPv4Protocol, nil)
			sm := make(ServicePortMap)
			for _, e := range tc.initial {
				serviceUpdate(sct, e.old, e.new)
			}
			sm.Update(sct)

			var gotPending []bool
			for _, e := range tc.events {
				gotPending = append(gotPending, serviceUpdate(sct, e.old, e.new))
			}
			if diff := cmp.Diff(tc.wantPending, gotPending); diff != "" {
				t.Errorf("Update returns (-want +got):\n%s", diff)
			}
			// Every Service left with a net change is pending, and only those.
			if got := sct.PendingChanges(); got != len(tc.wantUpdated) {
				t.Errorf("PendingChanges = %d, want %d", got, len(tc.wantUpdated))
			}

			result := sm.Update(sct)
			if diff := cmp.Diff(tc.wantMap, dumpServicePorts(sm)); diff != "" {
				t.Errorf("map (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(sets.New(tc.wantUpdated...), result.UpdatedServices); diff != "" {
				t.Errorf("UpdatedServices (-want +got):\n%s", diff)
			}
			for _, n := range tc.wantUpdated {
				var want []ServicePortName
				for spn := range sm {
					if spn.NamespacedName == n {
						want = append(want, spn)
					}
				}
				if len(want) != len(result.Ports[n]) {
					t.Errorf("Ports[%s] = %v, want the map's %v", n, result.Ports[n], want)
				}
				for _, spn := range want {
					if !slices.ContainsFunc(result.Ports[n], func(p ServicePort) bool { return p.Name == spn && p.Info == sm[spn] }) {
						t.Errorf("Ports[%s] lacks %s", n, spn)
					}
				}
			}

			// Applying clears the tracker.
			if sct.PendingChanges() != 0 {
				t.Errorf("changes still pending after Update")
			}
			again := sm.Update(sct)
			if again.UpdatedServices.Len() != 0 || len(again.Ports) != 0 {
				t.Errorf("second Update reported changes: %+v", again)
			}
		})
	}
}

func TestServiceChangeTrackerEventsOnlyForCurrent(t *testing.T) {
	recorder := events.NewFakeRecorder(10)
	sct := NewServiceChangeTracker(v1.IPv4Protocol, recorder)
	bad := makeService("a", func(s *v1.Service) { s.Spec.ExternalIPs = []string{"bogus"} })
	fixed := makeService("a")
	// The informer's old object was reported when it was new; only report the new one.
	serviceUpdate(sct, bad, fixed)
	if got := drainEvents(recorder); len(got) != 0 {
		t.Fatalf("events for the old object: %q", got)
	}
	serviceUpdate(sct, fixed, bad)
	if got := drainEvents(recorder); len(got) != 1 {
		t.Fatalf("want one event for the new object, got %q", got)
	}
}
