package config

import (
	v1 "k8s.io/api/core/v1"
)

// lastAppliedAnnotation holds a copy of the whole object written by `kubectl apply`.
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// TrimForCache is the informer factories' transform. Services and EndpointSlices are
// not cached as objects at all: NewServiceConfig and NewEndpointSliceConfig give their
// informers transforms of their own (ReduceServices, ReduceEndpointSlices), which
// make the compact records pkg/proxy keeps; this one passes them through. A Node (this
// node only) keeps everything but managed fields, kubectl's last-applied copy and the
// image list, the bulk of a Node (kube-proxy reads labels and addresses).
//
// It changes the object in place (client-go hands the transform a freshly decoded
// object), is idempotent, and passes anything else (tombstones included) through.
func TrimForCache(obj any) (any, error) {
	if o, ok := obj.(*v1.Node); ok && o != nil {
		o.ManagedFields = nil
		delete(o.Annotations, lastAppliedAnnotation)
		o.Status.Images = nil
	}
	return obj, nil
}
