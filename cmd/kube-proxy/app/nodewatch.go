package app

import (
	"sync"

	v1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy"
)

// nodeWatch receives this node's Node events for the whole life of the daemon (one
// informer, started by Run, watching this Node only). It forwards them to the
// running proxier (which reads the topology labels) and keeps the latest Node, which
// runProxiers compares with the node facts the proxier was built from.
type nodeWatch struct {
	mu     sync.Mutex
	node   *v1.Node // nil: none seen, or deleted
	synced bool     // the informer has listed once
	target proxy.NodeHandler

	// changed holds one notification for runProxiers: it reads the latest Node, so
	// one pending is enough however many events came.
	changed chan struct{}
}

var _ proxy.NodeHandler = &nodeWatch{}

func newNodeWatch() *nodeWatch {
	return &nodeWatch{changed: make(chan struct{}, 1)}
}

func (w *nodeWatch) OnNodeAdd(node *v1.Node) {
	w.event(node, func(h proxy.NodeHandler) { h.OnNodeAdd(node) })
}

func (w *nodeWatch) OnNodeUpdate(oldNode, node *v1.Node) {
	w.event(node, func(h proxy.NodeHandler) { h.OnNodeUpdate(oldNode, node) })
}

func (w *nodeWatch) OnNodeDelete(node *v1.Node) {
	w.event(nil, func(h proxy.NodeHandler) { h.OnNodeDelete(node) })
}

func (w *nodeWatch) OnNodeSynced() {
	w.mu.Lock()
	w.synced = true
	if w.target != nil {
		w.target.OnNodeSynced()
	}
	w.mu.Unlock()
	w.notify()
}

// event records node as the latest (nil: deleted) and forwards the event, under the
// lock, so that setTarget never misses or repeats one.
func (w *nodeWatch) event(node *v1.Node, forward func(proxy.NodeHandler)) {
	w.mu.Lock()
	w.node = node
	if w.target != nil {
		forward(w.target)
	}
	w.mu.Unlock()
	w.notify()
}

func (w *nodeWatch) notify() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// setTarget makes h receive the events from now on (nil: nobody), starting with the
// latest Node as an add and the synced call if the informer has listed.
func (w *nodeWatch) setTarget(h proxy.NodeHandler) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.target = h
	if h == nil {
		return
	}
	if w.node != nil {
		h.OnNodeAdd(w.node)
	}
	if w.synced {
		h.OnNodeSynced()
	}
}

// latest returns the latest Node (nil: none) and whether the informer has listed.
func (w *nodeWatch) latest() (*v1.Node, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.node, w.synced
}
