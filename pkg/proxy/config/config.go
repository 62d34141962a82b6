package config

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// ProxiedObjectsLabelSelector selects the Services and EndpointSlices kube-proxy
// handles: those not claimed by another service proxy and not headless (upstream's
// informer selector).
const ProxiedObjectsLabelSelector = "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless"

// fanout is a list of handlers that may be added to while events are delivered.
type fanout[H any] struct {
	mu       sync.RWMutex
	handlers []H
}

func (f *fanout[H]) add(h H) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handlers = append(f.handlers, h)
}

func (f *fanout[H]) each(call func(H)) {
	f.mu.RLock()
	handlers := f.handlers
	f.mu.RUnlock()
	for _, h := range handlers {
		call(h)
	}
}

// objectAs returns obj as a T, unwrapping a delete tombstone. ok is false (and the
// problem logged) for anything else: a wrong type must never crash the proxy.
func objectAs[T any](logger klog.Logger, obj any, kind string) (T, bool) {
	var zero T
	if t, ok := obj.(T); ok && !isNilPointer(obj) {
		return t, true
	}
	tombstone, ok := obj.(cache.DeletedFinalStateUnknown)
	if !ok {
		logger.Error(nil, "Ignoring informer event with unexpected object", "kind", kind, "type", fmt.Sprintf("%T", obj))
		return zero, false
	}
	t, ok := tombstone.Obj.(T)
	if !ok || isNilPointer(tombstone.Obj) {
		logger.Error(nil, "Ignoring tombstone with unexpected object", "kind", kind, "key", tombstone.Key, "type", fmt.Sprintf("%T", tombstone.Obj))
		return zero, false
	}
	return t, true
}

// isNilPointer catches a typed nil (*v1.Service)(nil), which a type assertion accepts.
func isNilPointer(obj any) bool {
	v := reflect.ValueOf(obj)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// waitAndNotify waits for the informer's first list, then tells every handler.
func waitAndNotify(logger klog.Logger, name string, stopCh <-chan struct{}, synced cache.InformerSynced, notify func()) {
	logger.Info("Starting config controller", "config", name)
	if !cache.WaitForNamedCacheSync(name, stopCh, synced) {
		return
	}
	notify()
}

// ServiceConfig delivers Service informer events to ServiceHandlers.
type ServiceConfig struct {
	logger   klog.Logger
	synced   cache.InformerSynced
	handlers fanout[ServiceHandler]
}

// NewServiceConfig registers on informer; resyncPeriod is configSyncPeriod.
func NewServiceConfig(ctx context.Context, informer coreinformers.ServiceInformer, resyncPeriod time.Duration) *ServiceConfig {
	c := &ServiceConfig{logger: klog.LoggerWithValues(klog.FromContext(ctx), "kind", "Service")}
	reg, err := informer.Informer().AddEventHandlerWithResyncPeriod(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.handleAdd,
		UpdateFunc: c.handleUpdate,
		DeleteFunc: c.handleDelete,
	}, resyncPeriod)
	if err != nil {
		// Only happens when the informer has been stopped; nothing will ever sync.
		c.logger.Error(err, "Failed to register Service event handler")
		c.synced = func() bool { return false }
	} else {
		c.synced = reg.HasSynced
	}
	return c
}

// RegisterEventHandler adds a handler; call it before Run.
func (c *ServiceConfig) RegisterEventHandler(h ServiceHandler) { c.handlers.add(h) }

// Run waits for the initial list and then calls OnServiceSynced on every handler.
func (c *ServiceConfig) Run(stopCh <-chan struct{}) {
	waitAndNotify(c.logger, "service config", stopCh, c.synced, func() {
		c.handlers.each(func(h ServiceHandler) { h.OnServiceSynced() })
	})
}

func (c *ServiceConfig) handleAdd(obj any) {
	svc, ok := objectAs[*v1.Service](c.logger, obj, "Service")
	if !ok {
		return
	}
	c.handlers.each(func(h ServiceHandler) { h.OnServiceAdd(svc) })
}

func (c *ServiceConfig) handleUpdate(oldObj, newObj any) {
	oldSvc, ok := objectAs[*v1.Service](c.logger, oldObj, "Service")
	if !ok {
		return
	}
	svc, ok := objectAs[*v1.Service](c.logger, newObj, "Service")
	if !ok {
		return
	}
	c.handlers.each(func(h ServiceHandler) { h.OnServiceUpdate(oldSvc, svc) })
}

func (c *ServiceConfig) handleDelete(obj any) {
	svc, ok := objectAs[*v1.Service](c.logger, obj, "Service")
	if !ok {
		return
	}
	c.handlers.each(func(h ServiceHandler) { h.OnServiceDelete(svc) })
}

// EndpointSliceConfig delivers EndpointSlice informer events to EndpointSliceHandlers.
type EndpointSliceConfig struct {
	logger   klog.Logger
	synced   cache.InformerSynced
	handlers fanout[EndpointSliceHandler]
}

// NewEndpointSliceConfig registers on informer; resyncPeriod is configSyncPeriod.
func NewEndpointSliceConfig(ctx context.Context, informer discoveryinformers.EndpointSliceInformer, resyncPeriod time.Duration) *EndpointSliceConfig {
	c := &EndpointSliceConfig{logger: klog.LoggerWithValues(klog.FromContext(ctx), "kind", "EndpointSlice")}
	reg, err := informer.Informer().AddEventHandlerWithResyncPeriod(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.handleAdd,
		UpdateFunc: c.handleUpdate,
		DeleteFunc: c.handleDelete,
	}, resyncPeriod)
	if err != nil {
		c.logger.Error(err, "Failed to register EndpointSlice event handler")
		c.synced = func() bool { return false }
	} else {
		c.synced = reg.HasSynced
	}
	return c
}

// RegisterEventHandler adds a handler; call it before Run.
func (c *EndpointSliceConfig) RegisterEventHandler(h EndpointSliceHandler) { c.handlers.add(h) }

// Run waits for the initial list and then calls OnEndpointSlicesSynced on every handler.
func (c *EndpointSliceConfig) Run(stopCh <-chan struct{}) {
	waitAndNotify(c.logger, "endpoint slice config", stopCh, c.synced, func() {
		c.handlers.each(func(h EndpointSliceHandler) { h.OnEndpointSlicesSynced() })
	})
}

func (c *EndpointSliceConfig) handleAdd(obj any) {
	slice, ok := objectAs[*discovery.EndpointSlice](c.logger, obj, "EndpointSlice")
	if !ok {
		return
	}
	c.handlers.each(func(h EndpointSliceHandler) { h.OnEndpointSliceAdd(slice) })
}

func (c *EndpointSliceConfig) handleUpdate(oldObj, newObj any) {
	oldSlice, ok := objectAs[*discovery.EndpointSlice](c.logger, oldObj, "EndpointSlice")
	if !ok {
		return
	}
	slice, ok := objectAs[*discovery.EndpointSlice](c.logger, newObj, "EndpointSlice")
	if !ok {
		return
	}
	c.handlers.each(func(h EndpointSliceHandler) { h.OnEndpointSliceUpdate(oldSlice, slice) })
}

func (c *EndpointSliceConfig) handleDelete(obj any) {
	slice, ok := objectAs[*discovery.EndpointSlice](c.logger, obj, "EndpointSlice")
	if !ok {
		return
	}
	c.handlers.each(func(h EndpointSliceHandler) { h.OnEndpointSliceDelete(slice) })
}

// NodeConfig delivers events of this node's Node object to NodeHandlers. The informer
// should be restricted to the one node (field selector metadata.name=<nodeName>).
type NodeConfig struct {
	logger   klog.Logger
	synced   cache.InformerSynced
	handlers fanout[NodeHandler]
}

// NewNodeConfig registers on informer; resyncPeriod is configSyncPeriod.
func NewNodeConfig(ctx context.Context, informer coreinformers.NodeInformer, resyncPeriod time.Duration) *NodeConfig {
	c := &NodeConfig{logger: klog.LoggerWithValues(klog.FromContext(ctx), "kind", "Node")}
	reg, err := informer.Informer().AddEventHandlerWithResyncPeriod(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.handleAdd,
		UpdateFunc: c.handleUpdate,
		DeleteFunc: c.handleDelete,
	}, resyncPeriod)
	if err != nil {
		c.logger.Error(err, "Failed to register Node event handler")
		c.synced = func() bool { return false }
	} else {
		c.synced = reg.HasSynced
	}
	return c
}

// RegisterEventHandler adds a handler; call it before Run.
func (c *NodeConfig) RegisterEventHandler(h NodeHandler) { c.handlers.add(h) }

// Run waits for the initial list and then calls OnNodeSynced on every handler.
func (c *NodeConfig) Run(stopCh <-chan struct{}) {
	waitAndNotify(c.logger, "node config", stopCh, c.synced, func() {
		c.handlers.each(func(h NodeHandler) { h.OnNodeSynced() })
	})
}

func (c *NodeConfig) handleAdd(obj any) {
	node, ok := objectAs[*v1.Node](c.logger, obj, "Node")
	if !ok {
		return
	}
	c.handlers.each(func(h NodeHandler) { h.OnNodeAdd(node) })
}

func (c *NodeConfig) handleUpdate(oldObj, newObj any) {
	oldNode, ok := objectAs[*v1.Node](c.logger, oldObj, "Node")
	if !ok {
		return
	}
	node, ok := objectAs[*v1.Node](c.logger, newObj, "Node")
	if !ok {
		return
	}
	c.handlers.each(func(h NodeHandler) { h.OnNodeUpdate(oldNode, node) })
}

func (c *NodeConfig) handleDelete(obj any) {
	node, ok := objectAs[*v1.Node](c.logger, obj, "Node")
	if !ok {
		return
	}
	c.handlers.each(func(h NodeHandler) { h.OnNodeDelete(node) })
}
