package proxy

import (
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	netutils "k8s.io/utils/net"
)

// The meta-proxier runs one proxier (one tracker pair) per IP family and uses these
// filters to hand each only the objects that concern it. The trackers ignore the
// others anyway; the filters just save the work.

// ServiceConcernsFamily reports whether svc has a cluster IP of family. For an update,
// forward it to a family if either the old or the new object concerns it, so that the
// proxier sees a Service leave its family.
func ServiceConcernsFamily(svc *v1.Service, family v1.IPFamily) bool {
	if svc == nil || svc.Spec.Type == v1.ServiceTypeExternalName {
		return false
	}
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 {
		ips = []string{svc.Spec.ClusterIP}
	}
	for _, s := range ips {
		if ip := netutils.ParseIPSloppy(s); ip != nil && ipFamilyOf(ip) == family {
			return true
		}
	}
	return false
}

// EndpointSliceConcernsFamily reports whether slice carries addresses of family
// (FQDN slices concern no family).
func EndpointSliceConcernsFamily(slice *discovery.EndpointSlice, family v1.IPFamily) bool {
	return slice != nil && slice.AddressType == addressTypeOf(family)
}

// addressTypeOf is the EndpointSlice address type holding family's addresses.
func addressTypeOf(family v1.IPFamily) discovery.AddressType {
	if family == v1.IPv6Protocol {
		return discovery.AddressTypeIPv6
	}
	return discovery.AddressTypeIPv4
}
