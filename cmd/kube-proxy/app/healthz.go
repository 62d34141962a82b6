package app

import (
	v1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/healthcheck"
)

// healthzNodeHandler feeds this node's Node events to the health server, which
// answers 503 on /healthz while the node is missing, being deleted or tainted
// for deletion.
type healthzNodeHandler struct {
	hs *healthcheck.ProxyHealthServer
}

func (h healthzNodeHandler) OnNodeAdd(node *v1.Node)       { h.hs.SyncNode(node) }
func (h healthzNodeHandler) OnNodeUpdate(_, node *v1.Node) { h.hs.SyncNode(node) }
func (h healthzNodeHandler) OnNodeDelete(*v1.Node)         { h.hs.SyncNode(nil) }
func (h healthzNodeHandler) OnNodeSynced()                 {}
