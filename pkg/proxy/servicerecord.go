package proxy

import (
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
	// clusterIPs is spec.clusterIPs, or spec.clusterIP alone when an old API server
	// wrote only that.
	clusterIPs            []string
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
		clusterIPs:            spec.ClusterIPs,
		sessionAffinity:       v1.ServiceAffinity(internString(string(spec.SessionAffinity))),
		internalTrafficPolicy: internTrafficPolicy(spec.InternalTrafficPolicy),
	}
	if len(r.clusterIPs) == 0 && spec.ClusterIP != "" {
		r.clusterIPs = []string{spec.ClusterIP}
	}
	if len(spec.Ports) > 0 {
		r.ports = make([]recordPort, len(spec.Ports))
		for i, p := range spec.Ports {
			r.ports[i] = recordPort{name: internString(p.Name), protocol: v1.Protocol(internString(string(p.Protocol))), port: p.Port, nodePort: p.NodePort}
		}
	}
	x := serviceExtras{
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
	if len(x.externalIPs) > 0 || len(x.sourceRanges) > 0 || x.externalTrafficPolicy != "" || x.healthCheckNodePort != 0 ||
		x.trafficDistribution != nil || x.affinityTimeout != nil || x.annotations != nil || x.ingress != nil {
		r.extras = &x
	}
	return r
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
			ClusterIPs:            r.clusterIPs,
			SessionAffinity:       r.sessionAffinity,
			InternalTrafficPolicy: r.internalTrafficPolicy,
		},
	}
	if len(r.clusterIPs) > 0 {
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
