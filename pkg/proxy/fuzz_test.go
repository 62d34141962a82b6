package proxy

// Seed corpora live in testdata/fuzz/<FuzzName>/. Run e.g.
//   go test -run=NONE -fuzz=FuzzServiceToServicePorts -fuzztime=60s ./pkg/proxy/

import (
	"encoding/json"
	"fmt"
	"net"
	"reflect"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

func quietLogs(tb testing.TB) {
	// The builders log every skipped value; at fuzzing rates that is only noise.
	// The zero logr.Logger discards everything.
	klog.SetLogger(klog.Logger{})
	tb.Cleanup(klog.ClearLogger)
}

// FuzzServiceToServicePorts builds a Service from the fuzzed fields (and, if extra is
// valid JSON, overlays it onto the object), then checks what every family's view
// of it must satisfy.
func FuzzServiceToServicePorts(f *testing.F) {
	f.Add("10.0.0.1", "fd00:10::1", "LoadBalancer", int32(80), "TCP", int32(30080), "192.0.2.1", "198.51.100.1", "VIP", "203.0.113.0/24", "", int32(60), []byte(`{}`))
	quietLogs(f)
	f.Fuzz(func(t *testing.T, ip1, ip2, svcType string, port int32, protocol string, nodePort int32,
		externalIP, lbIP, lbMode, sourceRange, annotation string, timeout int32, extra []byte) {
		svc := &v1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "fuzz", Annotations: map[string]string{
				v1.AnnotationLoadBalancerSourceRangesKey: annotation,
			}},
			Spec: v1.ServiceSpec{
				Type:       v1.ServiceType(svcType),
				ClusterIP:  ip1,
				ClusterIPs: []string{ip1, ip2},
				Ports: []v1.ServicePort{
					{Name: "a", Port: port, Protocol: v1.Protocol(protocol), NodePort: nodePort},
					{Name: "b", Port: port, Protocol: v1.ProtocolUDP},
					{Name: "c", Port: port + 1, Protocol: v1.Protocol(protocol)},
				},
				ExternalIPs:              []string{externalIP, ip2},
				LoadBalancerSourceRanges: []string{sourceRange},
				SessionAffinity:          v1.ServiceAffinityClientIP,
				SessionAffinityConfig:    &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To(timeout)}},
				ExternalTrafficPolicy:    v1.ServiceExternalTrafficPolicyLocal,
				HealthCheckNodePort:      nodePort,
			},
			Status: v1.ServiceStatus{LoadBalancer: v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{
				{IP: lbIP, IPMode: ptr.To(v1.LoadBalancerIPMode(lbMode))},
				{IP: ip1},
			}}},
		}
		if len(extra) > 0 {
			_ = json.Unmarshal(extra, svc) // invalid JSON just leaves the fields above
		}
		original := svc.DeepCopy()

		keysByFamily := map[v1.IPFamily]sets.Set[ServicePortName]{}
		for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
			m := serviceToServicePorts(svc, family, nil)
			checkServicePorts(t, svc, family, m)
			if again := serviceToServicePorts(svc, family, nil); !reflect.DeepEqual(m, again) {
				t.Fatalf("%s: not deterministic:\n%s\n---\n%s", family, dumpServicePorts(m), dumpServicePorts(again))
			}
			if m != nil {
				keysByFamily[family] = sets.KeySet(m)
			}

			// Through the tracker: add then delete before a sync is no change.
			sct := NewServiceChangeTracker(family, nil)
			serviceUpdate(sct, nil, svc)
			if serviceUpdate(sct, svc, nil) || sct.PendingChanges() != 0 {
				t.Fatalf("%s: add+delete left a pending change", family)
			}
			sm := ServicePortMap{}
			serviceUpdate(sct, nil, svc)
			res := sm.Update(sct)
			if len(m) > 0 && !reflect.DeepEqual(sm, m) || len(m) == 0 && len(sm) != 0 {
				t.Fatalf("%s: map after Update differs from the built ports", family)
			}
			if (len(m) > 0) != res.UpdatedServices.Has(types.NamespacedName{Namespace: "ns", Name: "fuzz"}) {
				t.Fatalf("%s: UpdatedServices %v for %d ports", family, res.UpdatedServices, len(m))
			}
		}
		// Port validation does not depend on the family.
		if len(keysByFamily) == 2 && !keysByFamily[v1.IPv4Protocol].Equal(keysByFamily[v1.IPv6Protocol]) {
			t.Fatalf("families disagree on ports: %v vs %v", keysByFamily[v1.IPv4Protocol], keysByFamily[v1.IPv6Protocol])
		}
		if !reflect.DeepEqual(original, svc) {
			t.Fatal("the Service object was modified")
		}
	})
}

func checkServicePorts(t *testing.T, svc *v1.Service, family v1.IPFamily, m ServicePortMap) {
	t.Helper()
	if m != nil && len(m) == 0 {
		t.Fatalf("%s: empty non-nil map", family)
	}
	type portKey struct {
		port     int
		protocol v1.Protocol
	}
	seen := sets.New[portKey]()
	ipOK := func(what string, ip net.IP) {
		if ip == nil || ipFamilyOf(ip) != family {
			t.Fatalf("%s: %s %v not of the family", family, what, ip)
		}
	}
	for name, info := range m {
		if name.Namespace != svc.Namespace || name.Name != svc.Name || name.Protocol != info.Protocol {
			t.Fatalf("%s: key %v does not match info %v", family, name, info)
		}
		if !supportedProtocols.Has(info.Protocol) || info.Port < 1 || info.Port > 65535 || info.NodePort < 0 || info.NodePort > 65535 {
			t.Fatalf("%s: invalid port %v nodePort %d", family, info, info.NodePort)
		}
		k := portKey{info.Port, info.Protocol}
		if seen.Has(k) {
			t.Fatalf("%s: duplicate %v", family, k)
		}
		seen.Insert(k)
		ipOK("clusterIP", info.ClusterIP)
		for _, list := range [][]net.IP{info.ExternalIPs(), info.LoadBalancerVIPs()} {
			uniq := sets.New[string]()
			for _, ip := range list {
				ipOK("ip", ip)
				if uniq.Has(ip.String()) {
					t.Fatalf("%s: duplicate IP %v", family, ip)
				}
				uniq.Insert(ip.String())
			}
		}
		for _, cidr := range info.LoadBalancerSourceRanges() {
			if cidrFamilyOf(cidr) != family {
				t.Fatalf("%s: source range %v of the other family", family, cidr)
			}
		}
		switch info.SessionAffinityType {
		case v1.ServiceAffinityNone:
			if info.StickyMaxAgeSeconds != 0 {
				t.Fatalf("%s: timeout without affinity", family)
			}
		case v1.ServiceAffinityClientIP:
			if info.StickyMaxAgeSeconds < 1 || info.StickyMaxAgeSeconds > maxStickyMaxAgeSeconds {
				t.Fatalf("%s: timeout %d out of range", family, info.StickyMaxAgeSeconds)
			}
		default:
			t.Fatalf("%s: affinity %q", family, info.SessionAffinityType)
		}
		if info.HealthCheckNodePort() != 0 && (!info.ExternalPolicyLocal || svc.Spec.Type != v1.ServiceTypeLoadBalancer) {
			t.Fatalf("%s: health check node port without eTP Local load balancer", family)
		}
	}
}

// sliceOp is one decoded informer event for FuzzEndpointSliceMerge.
type sliceOp struct {
	slice  *discovery.EndpointSlice
	remove bool
	sync   bool // apply pending changes after this event
}

// decodeSliceOps turns fuzz bytes into a sequence of EndpointSlice events over a small
// universe (3 slice names, 2 services, 8 addresses, 2 nodes) so that collisions,
// moves between slices and duplicates are common. freeAddr is an arbitrary address
// string mixed in to exercise parsing.
func decodeSliceOps(data []byte, freeAddr string) []sliceOp {
	addrs := []string{"10.1.0.1", "10.1.0.2", "010.1.0.3", "fd00:1::1", "fd00:1::02", freeAddr, "", "10.1.0.1"}
	protocols := []v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP, "ICMP"}
	next := func() byte {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return b
	}
	var ops []sliceOp
	for len(data) > 0 && len(ops) < 64 {
		h := next()
		name := fmt.Sprintf("slice-%d", h%3)
		svc := fmt.Sprintf("svc-%d", (h>>2)%2)
		at := []discovery.AddressType{discovery.AddressTypeIPv4, discovery.AddressTypeIPv6, discovery.AddressTypeFQDN}[(h>>3)%3]
		op := sliceOp{remove: h&0x40 != 0, sync: h&0x80 != 0}
		slice := &discovery.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{discovery.LabelServiceName: svc}},
			AddressType: at,
		}
		for range next() % 3 {
			p := next()
			slice.Ports = append(slice.Ports, discovery.EndpointPort{
				Name:     ptr.To([]string{"", "a", "b"}[p%3]),
				Port:     ptr.To(int32(p>>2) % 4 * 100), // includes 0
				Protocol: ptr.To(protocols[(p>>4)%4]),
			})
		}
		for range next() % 5 {
			e := next()
			ep := discovery.Endpoint{Addresses: []string{addrs[e%8]}}
			c := next()
			bits := func(i uint) *bool {
				switch (c >> (2 * i)) & 3 {
				case 0:
					return nil
				case 1:
					return ptr.To(false)
				default:
					return ptr.To(true)
				}
			}
			ep.Conditions = discovery.EndpointConditions{Ready: bits(0), Serving: bits(1), Terminating: bits(2)}
			if e&0x08 != 0 {
				ep.NodeName = ptr.To([]string{thisNode, "node-b"}[(e>>4)%2])
			}
			if e&0x20 != 0 {
				ep.Hints = &discovery.EndpointHints{ForZones: []discovery.ForZone{{Name: "z1"}}, ForNodes: []discovery.ForNode{{Name: thisNode}}}
			}
			slice.Endpoints = append(slice.Endpoints, ep)
		}
		op.slice = slice
		ops = append(ops, op)
	}
	return ops
}

// FuzzEndpointSliceMerge applies a random event sequence with random sync points and
// checks the result equals a fresh tracker fed only the surviving slices, in reverse
// order: merging must not depend on history or order.
func FuzzEndpointSliceMerge(f *testing.F) {
	f.Add([]byte{0x00, 0x01, 0x01, 0x02, 0x01, 0x0a, 0x00}, "10.1.0.9")
	quietLogs(f)
	f.Fuzz(func(t *testing.T, data []byte, freeAddr string) {
		ops := decodeSliceOps(data, freeAddr)
		for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
			ect := NewEndpointsChangeTracker(family, thisNode)
			em := EndpointsMap{}
			type key struct{ svc, name string }
			live := map[key]*discovery.EndpointSlice{}
			var order []key
			for _, op := range ops {
				sliceUpdate(ect, op.slice, op.remove)
				if op.slice.AddressType == addressTypeOf(family) {
					k := key{op.slice.Labels[discovery.LabelServiceName], op.slice.Name}
					if op.remove {
						delete(live, k)
					} else {
						if _, ok := live[k]; !ok {
							order = append(order, k)
						}
						live[k] = op.slice
					}
				}
				if op.sync {
					em.Update(ect)
				}
			}
			em.Update(ect)
			checkEndpointsMap(t, family, em)

			fresh := NewEndpointsChangeTracker(family, thisNode)
			for _, k := range slices.Backward(order) {
				if s, ok := live[k]; ok {
					sliceUpdate(fresh, s, false)
				}
			}
			want := EndpointsMap{}
			want.Update(fresh)
			if !reflect.DeepEqual(want, em) {
				t.Fatalf("%s: history-dependent result:\nincremental:\n%s\nfresh:\n%s", family, dumpEndpoints(em), dumpEndpoints(want))
			}
		}
	})
}

func checkEndpointsMap(t *testing.T, family v1.IPFamily, em EndpointsMap) {
	t.Helper()
	for spn, eps := range em {
		if len(eps) == 0 {
			t.Fatalf("%s: %v has an empty list", family, spn)
		}
		for i, ep := range eps {
			ip := net.ParseIP(ep.IP())
			if ip == nil || ipFamilyOf(ip) != family || ip.String() != ep.IP() {
				t.Fatalf("%s: %v: bad IP %q", family, spn, ep.IP())
			}
			if ep.Port < 1 || ep.Port > 65535 {
				t.Fatalf("%s: %v: bad port %d", family, spn, ep.Port)
			}
			if i > 0 && eps[i-1].String() >= ep.String() {
				t.Fatalf("%s: %v: not strictly sorted: %s then %s", family, spn, eps[i-1], ep)
			}
		}
	}
}
