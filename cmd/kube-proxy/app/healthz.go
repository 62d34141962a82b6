package app

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// HealthServer is what the run loop needs from pkg/proxy/healthcheck's
// ProxyHealthServer: serve until ctx ends, and learn about the Node so /healthz
// can report node eligibility.
type HealthServer interface {
	Run(ctx context.Context) error
	SyncNode(node *v1.Node)
}

// healthzNodeHandler feeds Node events to the health server.
type healthzNodeHandler struct{ hs HealthServer }

func (h healthzNodeHandler) OnNodeAdd(node *v1.Node)       { h.hs.SyncNode(node) }
func (h healthzNodeHandler) OnNodeUpdate(_, node *v1.Node) { h.hs.SyncNode(node) }

// OnNodeDelete reports the node as being deleted, which makes it ineligible.
func (h healthzNodeHandler) OnNodeDelete(node *v1.Node) {
	gone := node.DeepCopy()
	if gone.DeletionTimestamp == nil {
		now := metav1.Now()
		gone.DeletionTimestamp = &now
	}
	h.hs.SyncNode(gone)
}

func (h healthzNodeHandler) OnNodeSynced() {}

// defaultHealthServer is set once pkg/proxy/healthcheck is available.
var defaultHealthServer func(addr string, healthTimeout time.Duration) HealthServer
