// Package proxy holds what every proxier shares: the service and endpoint maps built
// from the API objects, the change trackers that feed them, and topology-aware
// endpoint selection.
package proxy

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
)

// ServicePortName identifies one port of a Service.
type ServicePortName struct {
	types.NamespacedName
	Port     string
	Protocol v1.Protocol
}

func (spn ServicePortName) String() string {
	return fmt.Sprintf("%s%s", spn.NamespacedName.String(), fmtPortName(spn.Port))
}

func fmtPortName(in string) string {
	if in == "" {
		return ""
	}
	return ":" + in
}

// ServicePortInfo is everything a proxier needs about one port of a Service, for one
// IP family. It is immutable once built. There is one per Service port, so the fields
// most Services leave empty sit behind one pointer (External; read them through the
// methods of the same names).
type ServicePortInfo struct {
	ClusterIP           net.IP
	Port                int
	Protocol            v1.Protocol
	NodePort            int
	SessionAffinityType v1.ServiceAffinity
	StickyMaxAgeSeconds int
	ExternalPolicyLocal bool // externalTrafficPolicy: Local (and externally accessible)
	InternalPolicyLocal bool
	// Scheduler and SchedulerFlags are the per-Service scheduler annotations, as
	// written (validated by the proxier), from SchedulerSource: AnnotationScheduler /
	// AnnotationSchedulerFlags, or kube-router's pair when ours are absent.
	Scheduler       string
	SchedulerFlags  string
	SchedulerSource string
	// UID is the Service's, for the Events about it.
	UID types.UID
	// External is nil when the Service sets none of its fields.
	External *ServicePortExternal
}

// ServicePortExternal are the parts of a ServicePortInfo most Services do not have.
type ServicePortExternal struct {
	ExternalIPs              []net.IP     // of this family
	LoadBalancerVIPs         []net.IP     // of this family, ipMode != Proxy
	LoadBalancerSourceRanges []*net.IPNet // of this family
	HealthCheckNodePort      int
	TrafficDistribution      string
}

// ExternalIPs are the Service's external IPs of this family.
func (s *ServicePortInfo) ExternalIPs() []net.IP {
	if s.External == nil {
		return nil
	}
	return s.External.ExternalIPs
}

// LoadBalancerVIPs are the load balancer ingress IPs of this family whose ipMode is
// not Proxy.
func (s *ServicePortInfo) LoadBalancerVIPs() []net.IP {
	if s.External == nil {
		return nil
	}
	return s.External.LoadBalancerVIPs
}

// LoadBalancerSourceRanges are the Service's source ranges of this family.
func (s *ServicePortInfo) LoadBalancerSourceRanges() []*net.IPNet {
	if s.External == nil {
		return nil
	}
	return s.External.LoadBalancerSourceRanges
}

// HealthCheckNodePort is the health check node port of an eTP=Local LoadBalancer.
func (s *ServicePortInfo) HealthCheckNodePort() int {
	if s.External == nil {
		return 0
	}
	return s.External.HealthCheckNodePort
}

// TrafficDistribution is spec.trafficDistribution ("" when unset).
func (s *ServicePortInfo) TrafficDistribution() string {
	if s.External == nil {
		return ""
	}
	return s.External.TrafficDistribution
}

// String is "clusterIP:port/protocol".
func (s *ServicePortInfo) String() string {
	return net.JoinHostPort(s.ClusterIP.String(), strconv.Itoa(s.Port)) + "/" + string(s.Protocol)
}

// ExternallyAccessible reports whether the port is reachable from outside the cluster.
func (s *ServicePortInfo) ExternallyAccessible() bool {
	return s.NodePort != 0 || len(s.LoadBalancerVIPs()) != 0 || len(s.ExternalIPs()) != 0
}

// UsesClusterEndpoints reports whether some traffic goes to any endpoint in the cluster.
func (s *ServicePortInfo) UsesClusterEndpoints() bool {
	return !s.InternalPolicyLocal || (s.ExternallyAccessible() && !s.ExternalPolicyLocal)
}

// UsesLocalEndpoints reports whether some traffic goes only to node-local endpoints.
func (s *ServicePortInfo) UsesLocalEndpoints() bool {
	return s.InternalPolicyLocal || (s.ExternalPolicyLocal && s.ExternallyAccessible())
}

// Endpoint is one backend of a ServicePort, for one IP family. There are hundreds of
// thousands of them in a large cluster, so it is kept to 32 bytes: the address is 16
// bytes in place (its text took a string of its own besides the header), the node and
// zone names are not kept (IsLocal and the hints are all the proxier reads) and the
// rarely present hints sit behind one pointer.
type Endpoint struct {
	// addr is the address, IPv4 in its IPv4-mapped form (an IPv6 endpoint is never
	// IPv4-mapped: such an address is IPv4, see newSliceInfo).
	addr        [16]byte
	Port        int32
	IsLocal     bool // on this node
	Ready       bool
	Serving     bool
	Terminating bool
	Hints       *EndpointHints // nil when the slice carries no hints
}

// EndpointHints are an endpoint's topology hints.
type EndpointHints struct {
	Zones sets.Set[string] // nil when the slice carries no zone hints
	Nodes sets.Set[string] // nil when the slice carries no node hints
}

// ZoneHints are the zones the endpoint is hinted for, nil when there are none.
func (e *Endpoint) ZoneHints() sets.Set[string] {
	if e.Hints == nil {
		return nil
	}
	return e.Hints.Zones
}

// NodeHints are the nodes the endpoint is hinted for, nil when there are none.
func (e *Endpoint) NodeHints() sets.Set[string] {
	if e.Hints == nil {
		return nil
	}
	return e.Hints.Nodes
}

// NewEndpoint is an endpoint at addr and port with the given conditions (no hints).
func NewEndpoint(addr netip.Addr, port int32, isLocal, ready, serving, terminating bool) *Endpoint {
	return &Endpoint{addr: addr.Unmap().As16(), Port: port, IsLocal: isLocal, Ready: ready, Serving: serving, Terminating: terminating}
}

// Addr is the endpoint's address (IPv4 as 4 bytes).
func (e *Endpoint) Addr() netip.Addr { return netip.AddrFrom16(e.addr).Unmap() }

// Addr16 is the endpoint's address as 16 bytes, IPv4 in its IPv4-mapped form.
func (e *Endpoint) Addr16() [16]byte { return e.addr }

// IP is the address in its canonical text form.
func (e *Endpoint) IP() string { return e.Addr().String() }

// String is "ip:port".
func (e *Endpoint) String() string { return net.JoinHostPort(e.IP(), strconv.Itoa(int(e.Port))) }

// ServicePortMap maps each service port to its info.
type ServicePortMap map[ServicePortName]*ServicePortInfo

// EndpointsMap maps each service port to its endpoints, de-duplicated, sorted by String().
type EndpointsMap map[ServicePortName][]*Endpoint
