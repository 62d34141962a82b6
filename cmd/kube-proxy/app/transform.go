package app

import (
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// lastAppliedAnnotation holds a copy of the whole object written by `kubectl apply`.
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// trimForCache is the informers' transform: it drops, before an object is cached, the
// parts kube-proxy never reads. At tens of thousands of Services the informer caches
// are most of the daemon's heap, and managed fields and kubectl's last-applied copy are
// often half of an object. It changes the object in place (client-go hands the
// transform a freshly decoded object), is idempotent, and passes anything else
// (tombstones included) through.
func trimForCache(obj any) (any, error) {
	switch o := obj.(type) {
	case *v1.Service:
		o.ManagedFields = nil
		delete(o.Annotations, lastAppliedAnnotation)
	case *discovery.EndpointSlice:
		o.ManagedFields = nil
		delete(o.Annotations, lastAppliedAnnotation)
		for i := range o.Endpoints {
			ep := &o.Endpoints[i]
			ep.TargetRef = nil
			ep.Hostname = nil
			ep.DeprecatedTopology = nil
		}
	case *v1.Node:
		o.ManagedFields = nil
		delete(o.Annotations, lastAppliedAnnotation)
		// The image list is the bulk of a Node; kube-proxy reads labels and addresses.
		o.Status.Images = nil
	}
	return obj, nil
}
