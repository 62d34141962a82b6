// Package config turns shared-informer events into calls on proxier handlers.
package config

import "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy"

// The handlers are declared beside what they receive (pkg/proxy); these names are
// kept for the informer side.
type (
	ServiceHandler       = proxy.ServiceHandler
	EndpointSliceHandler = proxy.EndpointSliceHandler
	NodeHandler          = proxy.NodeHandler
)
