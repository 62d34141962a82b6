package proxy

import (
	"slices"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// ServiceRecord is a Service as kube-proxy keeps it: the fields a proxier reads, laid
// out compactly. The Service informer caches records instead of objects
// (config.NewServiceConfig installs the transform): a cached *v1.Service costs about
// 1 KB even trimmed (the struct alone is 592 bytes), a typical record about 300 bytes,
// its rarely set fields behind one pointer.
//
// What it keeps: name, namespace, UID (Events), resourceVersion (the informer tells
// updates from resyncs by it), the per-Service scheduler annotations; spec type,
// clusterIP(s), ports (name, protocol, port, nodePort), externalIPs, session
// affinity and its timeout, loadBalancerSourceRanges, external and internal traffic
// policies, healthCheckNodePort, trafficDistribution; status load balancer ingress IP
// and ipMode. A record never changes after NewServiceRecord.
type ServiceRecord struct {
	RecordMeta
	serviceType v1.ServiceType
	// clusterIPs[:nClusterIPs] is spec.clusterIPs, or spec.clusterIP alone when an old
	// API server wrote only that; in place, as a Service has one or two (the API allows
	// no more; extras.moreClusterIPs has any others).
	clusterIPs            [2]string
	nClusterIPs           uint8
	ports                 []recordPort
	sessionAffinity       v1.ServiceAffinity
	internalTrafficPolicy *v1.ServiceInternalTrafficPolicy
	// extras is nil unless the Service sets one of its fields.
	extras *serviceExtras
}

type recordPort struct {
	name     string
	protocol v1.Protocol
	port     int32
	nodePort int32
}

// serviceExtras are the fields most Services leave unset.
type serviceExtras struct {
	moreClusterIPs        []string          // spec.clusterIPs[2:]
	annotations           map[string]string // the scheduler annotations only
	externalIPs           []string
	affinityTimeout       *int32
	sourceRanges          []string
	externalTrafficPolicy v1.ServiceExternalTrafficPolicy
	healthCheckNodePort   int32
	trafficDistribution   *string
	ingress               []v1.LoadBalancerIngress // IP and IPMode
}

// schedulerAnnotationKeys are the annotations a record keeps.
var schedulerAnnotationKeys = []string{AnnotationScheduler, AnnotationSchedulerFlags, AnnotationKubeRouterScheduler, AnnotationKubeRouterSchedFlags}

// NewServiceRecord reduces svc to its record (nil for nil). The record shares svc's
// strings; svc itself is not kept.
func NewServiceRecord(svc *v1.Service) *ServiceRecord {
	if svc == nil {
		return nil
	}
	spec := &svc.Spec
	r := &ServiceRecord{
		RecordMeta:            RecordMeta{Namespace: internString(svc.Namespace), Name: svc.Name, ResourceVersion: svc.ResourceVersion, UID: svc.UID},
		serviceType:           v1.ServiceType(internString(string(spec.Type))),
		sessionAffinity:       v1.ServiceAffinity(internString(string(spec.SessionAffinity))),
		internalTrafficPolicy: internTrafficPolicy(spec.InternalTrafficPolicy),
	}
	ips := spec.ClusterIPs
	if len(ips) == 0 && spec.ClusterIP != "" {
		ips = []string{spec.ClusterIP}
	}
	r.nClusterIPs = uint8(copy(r.clusterIPs[:], ips))
	uid := string(r.UID)
	packStrings(&r.Name, &r.ResourceVersion, &uid, &r.clusterIPs[0], &r.clusterIPs[1])
	r.UID = types.UID(uid)
	if len(spec.Ports) > 0 {
		r.ports = make([]recordPort, len(spec.Ports))
		for i, p := range spec.Ports {
			r.ports[i] = recordPort{name: internString(p.Name), protocol: v1.Protocol(internString(string(p.Protocol))), port: p.Port, nodePort: p.NodePort}
		}
	}
	x := serviceExtras{
		moreClusterIPs:        cloneStrings(ips[int(r.nClusterIPs):]),
		externalIPs:           spec.ExternalIPs,
		sourceRanges:          spec.LoadBalancerSourceRanges,
		externalTrafficPolicy: v1.ServiceExternalTrafficPolicy(internString(string(spec.ExternalTrafficPolicy))),
		healthCheckNodePort:   spec.HealthCheckNodePort,
		trafficDistribution:   spec.TrafficDistribution,
	}
	if cfg := spec.SessionAffinityConfig; cfg != nil && cfg.ClientIP != nil {
		x.affinityTimeout = cfg.ClientIP.TimeoutSeconds
	}
	for _, k := range schedulerAnnotationKeys {
		if v, ok := svc.Annotations[k]; ok {
			if x.annotations == nil {
				x.annotations = map[string]string{}
			}
			x.annotations[k] = v
		}
	}
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		x.ingress = append(x.ingress, v1.LoadBalancerIngress{IP: ing.IP, IPMode: ing.IPMode})
	}
	if len(x.moreClusterIPs) > 0 || len(x.externalIPs) > 0 || len(x.sourceRanges) > 0 || x.externalTrafficPolicy != "" || x.healthCheckNodePort != 0 ||
		x.trafficDistribution != nil || x.affinityTimeout != nil || x.annotations != nil || x.ingress != nil {
		r.extras = &x
	}
	return r
}

// cloneStrings copies ss and its strings (nil when empty).
func cloneStrings(ss []string) []string {
	if len(ss) == 0 {
		return nil
	}
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strings.Clone(s)
	}
	return out
}

// clusterIPList is spec.clusterIPs as the record keeps it (shared: not to be written).
func (r *ServiceRecord) clusterIPList() []string {
	if r.nClusterIPs == 0 {
		return nil
	}
	ips := r.clusterIPs[:r.nClusterIPs]
	if r.extras != nil && len(r.extras.moreClusterIPs) > 0 {
		ips = append(slices.Clip(ips), r.extras.moreClusterIPs...)
	}
	return ips
}

// Service is the Service the record was made from, as far as the record keeps it: what
// the port builder reads, and what an Event names.
func (r *ServiceRecord) Service() *v1.Service {
	if r == nil {
		return nil
	}
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: r.Name, UID: r.UID, ResourceVersion: r.ResourceVersion},
		Spec: v1.ServiceSpec{
			Type:                  r.serviceType,
			ClusterIPs:            r.clusterIPList(),
			SessionAffinity:       r.sessionAffinity,
			InternalTrafficPolicy: r.internalTrafficPolicy,
		},
	}
	if r.nClusterIPs > 0 {
		svc.Spec.ClusterIP = r.clusterIPs[0]
	}
	for _, p := range r.ports {
		svc.Spec.Ports = append(svc.Spec.Ports, v1.ServicePort{Name: p.name, Protocol: p.protocol, Port: p.port, NodePort: p.nodePort})
	}
	if x := r.extras; x != nil {
		svc.Annotations = x.annotations
		svc.Spec.ExternalIPs = x.externalIPs
		svc.Spec.LoadBalancerSourceRanges = x.sourceRanges
		svc.Spec.ExternalTrafficPolicy = x.externalTrafficPolicy
		svc.Spec.HealthCheckNodePort = x.healthCheckNodePort
		svc.Spec.TrafficDistribution = x.trafficDistribution
		if x.affinityTimeout != nil {
			svc.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: x.affinityTimeout}}
		}
		svc.Status.LoadBalancer.Ingress = x.ingress
	}
	return svc
}

// DeepCopyObject copies the header; the rest is immutable and shared.
func (r *ServiceRecord) DeepCopyObject() runtime.Object {
	c := *r
	return &c
}

// internedStrings shares the strings records repeat (namespaces, port names, types,
// protocols). It is bounded: when full it starts again (what it handed out stays
// valid; only the sharing restarts).
var internedStrings = struct {
	sync.Mutex
	m map[string]string
}{m: map[string]string{}}

const maxInternedStrings = 1 << 14

func internString(s string) string {
	if s == "" {
		return ""
	}
	internedStrings.Lock()
	defer internedStrings.Unlock()
	if shared, ok := internedStrings.m[s]; ok {
		return shared
	}
	if len(internedStrings.m) >= maxInternedStrings {
		clear(internedStrings.m)
	}
	s = strings.Clone(s) // not a view into a larger decoded buffer
	internedStrings.m[s] = s
	return s
}

var (
	policyCluster = v1.ServiceInternalTrafficPolicyCluster
	policyLocal   = v1.ServiceInternalTrafficPolicyLocal
)

func internTrafficPolicy(p *v1.ServiceInternalTrafficPolicy) *v1.ServiceInternalTrafficPolicy {
	switch {
	case p == nil:
		return nil
	case *p == policyCluster:
		return &policyCluster
	case *p == policyLocal:
		return &policyLocal
	}
	return p
}
