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

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy"
)

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

// objectConfig delivers one kind's informer events, typed, to its handlers; the
// Service, EndpointSlice and Node configs are instances of it.
type objectConfig[T any, H any] struct {
	logger   klog.Logger
	kind     string
	name     string
	informer cache.SharedIndexInformer
	resync   time.Duration
	synced   cache.InformerSynced
	handlers fanout[H]
	add      func(H, T)
	update   func(H, T, T)
	remove   func(H, T)
	isSynced func(H)
	// reduce, when set, is the informer's transform (an object to the record T): the
	// informer caches records, and an object that arrives unreduced (an informer
	// started before the transform was set) is reduced on delivery.
	reduce cache.TransformFunc
	// meta, when set, gives a record's identity: the config can then take objects
	// of the first list early (EarlyFrom, early.go).
	meta  func(T) *proxy.RecordMeta
	early *earlyObjects[T]
}

func (c *objectConfig[T, H]) register(informer cache.SharedIndexInformer, resyncPeriod time.Duration) {
	if c.reduce != nil {
		if err := informer.SetTransform(c.reduce); err != nil {
			c.logger.Error(err, "The informer caches whole objects; they are reduced on delivery")
		}
	}
	c.informer, c.resync = informer, resyncPeriod
}

// listen adds the config's own handler to the informer (once, from Run). An informer
// started before (the daemon starts its lists before it builds the proxier) hands the
// new handler every object it holds as an add, so nothing that arrived before is
// missed.
func (c *objectConfig[T, H]) listen() {
	reg, err := c.informer.AddEventHandlerWithResyncPeriod(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.handleAdd,
		UpdateFunc: c.handleUpdate,
		DeleteFunc: c.handleDelete,
	}, c.resync)
	if err != nil {
		// Only happens when the informer has been stopped; nothing will ever sync.
		c.logger.Error(err, "Failed to register event handler")
		c.synced = func() bool { return false }
		return
	}
	c.synced = reg.HasSynced
}

// RegisterEventHandler adds a handler; call it before Run.
func (c *objectConfig[T, H]) RegisterEventHandler(h H) { c.handlers.add(h) }

// Run starts delivering the informer's events to the handlers (the objects the
// informer already holds first, as adds), waits for the initial list and then tells
// every handler it has synced.
func (c *objectConfig[T, H]) Run(stopCh <-chan struct{}) {
	c.beginEarly()
	c.listen()
	waitAndNotify(c.logger, c.name, stopCh, c.synced, func() {
		c.endEarly()
		c.handlers.each(c.isSynced)
	})
}

// object returns obj, reduced if it is not yet, as a T (see objectAs).
func (c *objectConfig[T, H]) object(obj any) (T, bool) {
	if c.reduce != nil {
		// The transforms pass through what they do not reduce and never fail.
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			t.Obj, _ = c.reduce(t.Obj)
			obj = t
		} else {
			obj, _ = c.reduce(obj)
		}
	}
	return objectAs[T](c.logger, obj, c.kind)
}

func (c *objectConfig[T, H]) handleAdd(obj any) {
	o, ok := c.object(obj)
	if !ok || c.confirmEarly(o) {
		return
	}
	c.handlers.each(func(h H) { c.add(h, o) })
}

func (c *objectConfig[T, H]) handleUpdate(oldObj, newObj any) {
	old, ok := c.object(oldObj)
	if !ok {
		return
	}
	o, ok := c.object(newObj)
	if !ok {
		return
	}
	c.handlers.each(func(h H) { c.update(h, old, o) })
}

func (c *objectConfig[T, H]) handleDelete(obj any) {
	o, ok := c.object(obj)
	if !ok {
		return
	}
	c.handlers.each(func(h H) { c.remove(h, o) })
}

// ServiceConfig delivers Service informer events to ServiceHandlers, each Service as a
// proxy.ServiceRecord.
type ServiceConfig struct {
	objectConfig[*proxy.ServiceRecord, ServiceHandler]
}

// NewServiceConfig delivers informer's events from Run on; resyncPeriod is
// configSyncPeriod. It makes the informer cache records (ReduceServices) in place of
// the objects, so it must be called before the informer starts (which may be before
// Run); a started informer's objects are reduced on delivery instead, and its cache
// keeps them whole.
func NewServiceConfig(ctx context.Context, informer coreinformers.ServiceInformer, resyncPeriod time.Duration) *ServiceConfig {
	c := &ServiceConfig{objectConfig[*proxy.ServiceRecord, ServiceHandler]{
		logger:   klog.LoggerWithValues(klog.FromContext(ctx), "kind", "Service"),
		kind:     "Service",
		name:     "service config",
		add:      ServiceHandler.OnServiceAdd,
		update:   ServiceHandler.OnServiceUpdate,
		remove:   ServiceHandler.OnServiceDelete,
		isSynced: ServiceHandler.OnServiceSynced,
		reduce:   ReduceServices,
		meta:     func(r *proxy.ServiceRecord) *proxy.RecordMeta { return &r.RecordMeta },
	}}
	c.register(informer.Informer(), resyncPeriod)
	return c
}

// ReduceServices is the Service informer's transform: each Service is cached as its
// proxy.ServiceRecord. Anything else (a record already, when the informer hands a
// cached object back through the transform on a resync, or a tombstone) passes
// through.
func ReduceServices(obj any) (any, error) {
	if svc, ok := obj.(*v1.Service); ok && svc != nil {
		return proxy.NewServiceRecord(svc), nil
	}
	return obj, nil
}

// EndpointSliceConfig delivers EndpointSlice informer events to EndpointSliceHandlers,
// each slice as a proxy.EndpointSliceRecord.
type EndpointSliceConfig struct {
	objectConfig[*proxy.EndpointSliceRecord, EndpointSliceHandler]
}

// NewEndpointSliceConfig delivers informer's events from Run on; resyncPeriod is
// configSyncPeriod, and nodeName the node whose endpoints are local. It makes the
// informer cache records (ReduceEndpointSlices) in place of the objects, so it must be
// called before the informer starts (which may be before Run); a started informer's
// objects are reduced on delivery instead, and its cache keeps them whole.
func NewEndpointSliceConfig(ctx context.Context, informer discoveryinformers.EndpointSliceInformer, resyncPeriod time.Duration, nodeName string) *EndpointSliceConfig {
	c := &EndpointSliceConfig{objectConfig[*proxy.EndpointSliceRecord, EndpointSliceHandler]{
		logger:   klog.LoggerWithValues(klog.FromContext(ctx), "kind", "EndpointSlice"),
		kind:     "EndpointSlice",
		name:     "endpoint slice config",
		add:      EndpointSliceHandler.OnEndpointSliceAdd,
		update:   EndpointSliceHandler.OnEndpointSliceUpdate,
		remove:   EndpointSliceHandler.OnEndpointSliceDelete,
		isSynced: EndpointSliceHandler.OnEndpointSlicesSynced,
		reduce:   ReduceEndpointSlices(nodeName),
		meta:     func(r *proxy.EndpointSliceRecord) *proxy.RecordMeta { return &r.RecordMeta },
	}}
	c.register(informer.Informer(), resyncPeriod)
	return c
}

// ReduceEndpointSlices is the EndpointSlice informer's transform: each slice is cached
// as its proxy.EndpointSliceRecord for nodeName. Anything else (a record already,
// when the informer hands a cached object back through the transform on a resync, or
// a tombstone) passes through.
func ReduceEndpointSlices(nodeName string) cache.TransformFunc {
	return func(obj any) (any, error) {
		if slice, ok := obj.(*discovery.EndpointSlice); ok && slice != nil {
			return proxy.NewEndpointSliceRecord(slice, nodeName), nil
		}
		return obj, nil
	}
}

// NodeConfig delivers events of this node's Node object to NodeHandlers. The informer
// should be restricted to the one node (field selector metadata.name=<nodeName>).
type NodeConfig struct {
	objectConfig[*v1.Node, NodeHandler]
}

// NewNodeConfig delivers informer's events from Run on; resyncPeriod is
// configSyncPeriod.
func NewNodeConfig(ctx context.Context, informer coreinformers.NodeInformer, resyncPeriod time.Duration) *NodeConfig {
	c := &NodeConfig{objectConfig[*v1.Node, NodeHandler]{
		logger:   klog.LoggerWithValues(klog.FromContext(ctx), "kind", "Node"),
		kind:     "Node",
		name:     "node config",
		add:      NodeHandler.OnNodeAdd,
		update:   NodeHandler.OnNodeUpdate,
		remove:   NodeHandler.OnNodeDelete,
		isSynced: NodeHandler.OnNodeSynced,
	}}
	c.register(informer.Informer(), resyncPeriod)
	return c
}
