package proxy

import (
	v1 "k8s.io/api/core/v1"
)

// ServiceHandler receives Service changes, each Service as the informer caches it: a
// ServiceRecord. Implementations only record the change and poke their sync runner;
// they never touch the kernel.
type ServiceHandler interface {
	OnServiceAdd(service *ServiceRecord)
	OnServiceUpdate(oldService, service *ServiceRecord)
	OnServiceDelete(service *ServiceRecord)
	// OnServiceSynced is called once the informer's initial list has been delivered.
	OnServiceSynced()
}

// EndpointSliceHandler receives EndpointSlice changes, each slice as the informer
// caches it: an EndpointSliceRecord, already reduced to what a proxier uses.
type EndpointSliceHandler interface {
	OnEndpointSliceAdd(slice *EndpointSliceRecord)
	OnEndpointSliceUpdate(oldSlice, slice *EndpointSliceRecord)
	OnEndpointSliceDelete(slice *EndpointSliceRecord)
	OnEndpointSlicesSynced()
}

// NodeHandler receives changes of this node's Node object.
type NodeHandler interface {
	OnNodeAdd(node *v1.Node)
	OnNodeUpdate(oldNode, node *v1.Node)
	OnNodeDelete(node *v1.Node)
	OnNodeSynced()
}
