package config

import (
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// lastAppliedAnnotation holds a copy of the whole object written by `kubectl apply`.
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// The labels and annotations kube-proxy reads; the informers keep no others.
var (
	// serviceLabels: the informers' label selector already leaves out Services that
	// carry them (upstream's service-proxy-name and headless rules); kept so that a
	// cached object never says otherwise.
	serviceLabels = []string{"service.kubernetes.io/service-proxy-name", v1.IsHeadlessService}
	// serviceAnnotations: the per-Service scheduler annotations (pkg/proxy).
	serviceAnnotations = []string{
		"kube-proxy-ipvs.io/scheduler", "kube-proxy-ipvs.io/scheduler-flags",
		"kube-router.io/service.scheduler", "kube-router.io/service.schedflags",
	}
)

// TrimForCache is the informers' transform: before an object is cached it keeps only
// what kube-proxy reads, and shares the values that repeat across objects (namespaces,
// port names, types). At tens of thousands of Services
// the informer caches are most of the daemon's heap: managed fields, kubectl's
// last-applied copy, selectors, owner references and endpoint targetRefs are often
// more than half of an object.
//
// What survives, per kind (every other field is left empty):
//   - Service: name, namespace, UID (Events), resourceVersion (the informer tells
//     updates from resyncs by it), the labels and annotations above; spec type,
//     clusterIP(s), ports (name, protocol, port, nodePort), externalIPs, session
//     affinity and its config, loadBalancerSourceRanges, external and internal
//     traffic policies, healthCheckNodePort, trafficDistribution; status load
//     balancer ingress IP and ipMode.
//   - EndpointSlice: not handled here; its informer caches records
//     (ReduceEndpointSlices, proxy.EndpointSliceRecord), a slice passes through.
//   - Node (this node only): everything but managed fields, the last-applied copy and
//     the image list.
//
// The shared values are never written through: cached objects are read-only. It
// changes the object in place (client-go hands the transform a freshly decoded
// object), is idempotent, and passes anything else (tombstones included) through.
// TestTrimForCache lists the fields it drops; the proxier's state built from trimmed
// objects is the same as from whole ones (pkg/proxy/ipvs TestTrimmedObjectsSameState).
func TrimForCache(obj any) (any, error) {
	switch o := obj.(type) {
	case *v1.Service:
		if o != nil {
			trimService(o)
		}
	case *v1.Node:
		if o == nil {
			break
		}
		o.ManagedFields = nil
		delete(o.Annotations, lastAppliedAnnotation)
		// The image list is the bulk of a Node; kube-proxy reads labels and addresses.
		o.Status.Images = nil
	}
	return obj, nil
}

func trimService(s *v1.Service) {
	s.ObjectMeta = metav1.ObjectMeta{
		Name:            s.Name,
		Namespace:       intern(s.Namespace),
		UID:             s.UID,
		ResourceVersion: s.ResourceVersion,
		Labels:          keepOnly(s.Labels, serviceLabels),
		Annotations:     keepOnly(s.Annotations, serviceAnnotations),
	}
	spec := &s.Spec
	for i := range spec.Ports {
		p := &spec.Ports[i]
		spec.Ports[i] = v1.ServicePort{Name: intern(p.Name), Protocol: v1.Protocol(intern(string(p.Protocol))), Port: p.Port, NodePort: p.NodePort}
	}
	clusterIP := spec.ClusterIP
	if len(spec.ClusterIPs) > 0 && spec.ClusterIPs[0] == clusterIP {
		clusterIP = spec.ClusterIPs[0] // one copy of the text
	}
	s.Spec = v1.ServiceSpec{
		Type:                     v1.ServiceType(intern(string(spec.Type))),
		Ports:                    spec.Ports,
		ClusterIP:                clusterIP,
		ClusterIPs:               spec.ClusterIPs,
		ExternalIPs:              spec.ExternalIPs,
		SessionAffinity:          v1.ServiceAffinity(intern(string(spec.SessionAffinity))),
		SessionAffinityConfig:    spec.SessionAffinityConfig,
		LoadBalancerSourceRanges: spec.LoadBalancerSourceRanges,
		ExternalTrafficPolicy:    v1.ServiceExternalTrafficPolicy(intern(string(spec.ExternalTrafficPolicy))),
		HealthCheckNodePort:      spec.HealthCheckNodePort,
		InternalTrafficPolicy:    spec.InternalTrafficPolicy,
		TrafficDistribution:      spec.TrafficDistribution,
	}
	ingress := s.Status.LoadBalancer.Ingress
	for i := range ingress {
		ingress[i] = v1.LoadBalancerIngress{IP: ingress[i].IP, IPMode: ingress[i].IPMode}
	}
	if len(ingress) == 0 {
		ingress = nil
	}
	s.Status = v1.ServiceStatus{LoadBalancer: v1.LoadBalancerStatus{Ingress: ingress}}
}

// keepOnly returns m reduced to keys: m itself when it has no other key, nil when it
// has none of them.
func keepOnly(m map[string]string, keys []string) map[string]string {
	n := 0
	for _, k := range keys {
		if _, ok := m[k]; ok {
			n++
		}
	}
	switch {
	case n == 0:
		return nil
	case n == len(m):
		return m
	}
	out := make(map[string]string, n)
	for _, k := range keys {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	return out
}

// intern returns one shared copy of s, for strings many objects repeat.
func intern(s string) string {
	if s == "" {
		return ""
	}
	return *internPtr(&s)
}

// stringPtrs shares strings and *string values (namespaces, node, zone and port
// names). It is bounded: names come and go over a cluster's life, and when it is full
// it starts again (what was handed out stays valid; only the sharing restarts).
var stringPtrs = struct {
	sync.Mutex
	m map[string]*string
}{m: map[string]*string{}}

const maxSharedStrings = 1 << 14

func internPtr(p *string) *string {
	if p == nil {
		return nil
	}
	stringPtrs.Lock()
	defer stringPtrs.Unlock()
	if shared, ok := stringPtrs.m[*p]; ok {
		return shared
	}
	if len(stringPtrs.m) >= maxSharedStrings {
		clear(stringPtrs.m)
	}
	s := strings.Clone(*p) // not a view into a larger decoded buffer
	stringPtrs.m[s] = &s
	return &s
}
