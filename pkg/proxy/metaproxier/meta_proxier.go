// Package metaproxier fans events out to one proxier per IP family (dual-stack).
package metaproxier

import (
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/klog/v2"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy"
)

type metaProxier struct {
	ipv4 proxy.Provider
	ipv6 proxy.Provider
}

// New returns a Provider that dispatches to an IPv4 and an IPv6 proxier. Each proxier
// filters objects by family itself, so every event goes to both.
func New(ipv4, ipv6 proxy.Provider) proxy.Provider {
	return &metaProxier{ipv4: ipv4, ipv6: ipv6}
}

func (m *metaProxier) Sync() {
	m.ipv4.Sync()
	m.ipv6.Sync()
}

// SyncLoop runs the IPv6 loop in the background and the IPv4 one in the caller.
func (m *metaProxier) SyncLoop() {
	go m.ipv6.SyncLoop()
	m.ipv4.SyncLoop()
}

func (m *metaProxier) OnServiceAdd(s *proxy.ServiceRecord) {
	m.ipv4.OnServiceAdd(s)
	m.ipv6.OnServiceAdd(s)
}

func (m *metaProxier) OnServiceUpdate(o, s *proxy.ServiceRecord) {
	m.ipv4.OnServiceUpdate(o, s)
	m.ipv6.OnServiceUpdate(o, s)
}

func (m *metaProxier) OnServiceDelete(s *proxy.ServiceRecord) {
	m.ipv4.OnServiceDelete(s)
	m.ipv6.OnServiceDelete(s)
}

func (m *metaProxier) OnServiceSynced() {
	m.ipv4.OnServiceSynced()
	m.ipv6.OnServiceSynced()
}

// forSlice returns the proxier of a slice's address family, nil (logged) for others.
func (m *metaProxier) forSlice(e *proxy.EndpointSliceRecord) proxy.Provider {
	switch e.AddressType {
	case discovery.AddressTypeIPv4:
		return m.ipv4
	case discovery.AddressTypeIPv6:
		return m.ipv6
	}
	klog.V(4).InfoS("EndpointSlice address type not supported", "addressType", e.AddressType, "endpointSlice", klog.KObj(e))
	return nil
}

func (m *metaProxier) OnEndpointSliceAdd(e *proxy.EndpointSliceRecord) {
	if p := m.forSlice(e); p != nil {
		p.OnEndpointSliceAdd(e)
	}
}

func (m *metaProxier) OnEndpointSliceUpdate(o, e *proxy.EndpointSliceRecord) {
	if p := m.forSlice(e); p != nil {
		p.OnEndpointSliceUpdate(o, e)
	}
}

func (m *metaProxier) OnEndpointSliceDelete(e *proxy.EndpointSliceRecord) {
	if p := m.forSlice(e); p != nil {
		p.OnEndpointSliceDelete(e)
	}
}

func (m *metaProxier) OnEndpointSlicesSynced() {
	m.ipv4.OnEndpointSlicesSynced()
	m.ipv6.OnEndpointSlicesSynced()
}

func (m *metaProxier) OnNodeAdd(n *v1.Node) {
	m.ipv4.OnNodeAdd(n)
	m.ipv6.OnNodeAdd(n)
}

func (m *metaProxier) OnNodeUpdate(o, n *v1.Node) {
	m.ipv4.OnNodeUpdate(o, n)
	m.ipv6.OnNodeUpdate(o, n)
}

func (m *metaProxier) OnNodeDelete(n *v1.Node) {
	m.ipv4.OnNodeDelete(n)
	m.ipv6.OnNodeDelete(n)
}

func (m *metaProxier) OnNodeSynced() {
	m.ipv4.OnNodeSynced()
	m.ipv6.OnNodeSynced()
}
