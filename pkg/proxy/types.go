// Package proxy holds what every proxier shares: the service and endpoint maps built
// from the API objects, the change trackers that feed them, and topology-aware
// endpoint selection.
package proxy

import (
	"fmt"
	"net"
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
// IP family. It is immutable once built.
type ServicePortInfo struct {
	ClusterIP                net.IP
	Port                     int
	Protocol                 v1.Protocol
	NodePort                 int
	ExternalIPs              []net.IP     // of this family
	LoadBalancerVIPs         []net.IP     // of this family, ipMode != Proxy
	LoadBalancerSourceRanges []*net.IPNet // of this family
	SessionAffinityType      v1.ServiceAffinity
	StickyMaxAgeSeconds      int
	ExternalPolicyLocal      bool // externalTrafficPolicy: Local (and externally accessible)
	InternalPolicyLocal      bool
	HealthCheckNodePort      int
	TrafficDistribution      string
	// Scheduler and SchedulerFlags are the per-Service scheduler annotations, as
	// written (validated by the proxier), from SchedulerSource: AnnotationScheduler /
	// AnnotationSchedulerFlags, or kube-router's pair when ours are absent.
	Scheduler       string
	SchedulerFlags  string
	SchedulerSource string
}

// String is "clusterIP:port/protocol".
func (s *ServicePortInfo) String() string {
	return net.JoinHostPort(s.ClusterIP.String(), strconv.Itoa(s.Port)) + "/" + string(s.Protocol)
}

// ExternallyAccessible reports whether the port is reachable from outside the cluster.
func (s *ServicePortInfo) ExternallyAccessible() bool {
	return s.NodePort != 0 || len(s.LoadBalancerVIPs) != 0 || len(s.ExternalIPs) != 0
}

// UsesClusterEndpoints reports whether some traffic goes to any endpoint in the cluster.
func (s *ServicePortInfo) UsesClusterEndpoints() bool {
	return !s.InternalPolicyLocal || (s.ExternallyAccessible() && !s.ExternalPolicyLocal)
}

// UsesLocalEndpoints reports whether some traffic goes only to node-local endpoints.
func (s *ServicePortInfo) UsesLocalEndpoints() bool {
	return s.InternalPolicyLocal || (s.ExternalPolicyLocal && s.ExternallyAccessible())
}

// Endpoint is one backend of a ServicePort, for one IP family.
type Endpoint struct {
	IP          string // canonical text form
	Port        int
	IsLocal     bool // on this node
	Ready       bool
	Serving     bool
	Terminating bool
	// The endpoint's node and zone are not kept: IsLocal and the hints are all the
	// proxier reads, and 500k endpoints at 50k Services make every field count.
	ZoneHints sets.Set[string] // nil when the slice carries no zone hints
	NodeHints sets.Set[string] // nil when the slice carries no node hints
}

// String is "ip:port".
func (e *Endpoint) String() string { return net.JoinHostPort(e.IP, strconv.Itoa(e.Port)) }

// ServicePortMap maps each service port to its info.
type ServicePortMap map[ServicePortName]*ServicePortInfo

// EndpointsMap maps each service port to its endpoints, de-duplicated, sorted by String().
type EndpointsMap map[ServicePortName][]*Endpoint
