package proxy

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// benchSlices makes services x endpoints (one slice per service, 10.1.0.0/16 then up).
func benchSlices(services, endpoints int) []*discovery.EndpointSlice {
	out := make([]*discovery.EndpointSlice, 0, services)
	for s := range services {
		var eps []discovery.Endpoint
		for e := range endpoints {
			n := s*endpoints + e
			eps = append(eps, endpoint(fmt.Sprintf("10.%d.%d.%d", 1+n>>16, (n>>8)&0xff, n&0xff), onNode(fmt.Sprintf("node-%d", e%50))))
		}
		out = append(out, makeSlice(fmt.Sprintf("svc-%d-abc", s), fmt.Sprintf("svc-%d", s), v4, http80, eps...))
	}
	return out
}

// BenchmarkEndpointsOneSliceChange: cost of a sync's Update after one slice of a large
// cluster changed; it should not grow with the number of services.
func BenchmarkEndpointsOneSliceChange(b *testing.B) {
	quietLogs(b)
	for _, services := range []int{100, 5000} {
		b.Run(fmt.Sprintf("services=%d/endpoints=100", services), func(b *testing.B) {
			slices := benchSlices(services, 100)
			ect := NewEndpointsChangeTracker(v1.IPv4Protocol, "node-1")
			em := EndpointsMap{}
			for _, s := range slices {
				sliceUpdate(ect, s, false)
			}
			em.Update(ect)
			// The informer reduces each slice before the handler gets it.
			changedSlice := slices[0].DeepCopy()
			changedSlice.Endpoints = changedSlice.Endpoints[1:]
			first, changed := NewEndpointSliceRecord(slices[0], "node-1"), NewEndpointSliceRecord(changedSlice, "node-1")
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				s := first
				if i%2 == 0 {
					s = changed
				}
				ect.EndpointSliceUpdate(s, false)
				if res := em.Update(ect); res.UpdatedServices.Len() != 1 {
					b.Fatalf("updated %v", res.UpdatedServices)
				}
			}
		})
	}
}

// BenchmarkServiceChange: Update for one changed Service in a large map.
func BenchmarkServiceChange(b *testing.B) {
	quietLogs(b)
	sct := NewServiceChangeTracker(v1.IPv4Protocol, nil)
	sm := ServicePortMap{}
	for s := range 5000 {
		serviceUpdate(sct, nil, makeService(fmt.Sprintf("svc-%d", s), clusterIPs(fmt.Sprintf("10.0.%d.%d", s>>8, s&0xff)),
			ports(tcpPort("http", 80), udpPort("dns", 53))))
	}
	sm.Update(sct)
	// The informer makes the records before the handler gets them.
	a := NewServiceRecord(makeService("svc-0", clusterIPs("10.0.0.0"), ports(tcpPort("http", 80), udpPort("dns", 53))))
	c := NewServiceRecord(makeService("svc-0", clusterIPs("10.0.0.0"), ports(tcpPort("http", 8080), udpPort("dns", 53))))
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			sct.Update(a, c)
		} else {
			sct.Update(c, a)
		}
		if res := sm.Update(sct); res.UpdatedServices.Len() != 1 {
			b.Fatalf("updated %v", res.UpdatedServices)
		}
	}
}
