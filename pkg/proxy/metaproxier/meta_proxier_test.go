package metaproxier

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy"
)

type recorder struct{ slices, services int }

func (r *recorder) OnServiceAdd(*proxy.ServiceRecord)                     { r.services++ }
func (r *recorder) OnServiceUpdate(_, _ *proxy.ServiceRecord)             { r.services++ }
func (r *recorder) OnServiceDelete(*proxy.ServiceRecord)                  { r.services++ }
func (r *recorder) OnServiceSynced()                                      {}
func (r *recorder) OnEndpointSliceAdd(*proxy.EndpointSliceRecord)         { r.slices++ }
func (r *recorder) OnEndpointSliceUpdate(_, _ *proxy.EndpointSliceRecord) { r.slices++ }
func (r *recorder) OnEndpointSliceDelete(*proxy.EndpointSliceRecord)      { r.slices++ }
func (r *recorder) OnEndpointSlicesSynced()                               {}
func (r *recorder) OnNodeAdd(*v1.Node)                                    {}
func (r *recorder) OnNodeUpdate(_, _ *v1.Node)                            {}
func (r *recorder) OnNodeDelete(*v1.Node)                                 {}
func (r *recorder) OnNodeSynced()                                         {}
func (r *recorder) Sync()                                                 {}
func (r *recorder) SyncLoop()                                             {}

// Slices go to their family's proxier only (FQDN slices to none); Services to both.
func TestDispatch(t *testing.T) {
	v4, v6 := &recorder{}, &recorder{}
	m := New(v4, v6)
	m.OnEndpointSliceAdd(&proxy.EndpointSliceRecord{AddressType: discovery.AddressTypeIPv4})
	m.OnEndpointSliceUpdate(nil, &proxy.EndpointSliceRecord{AddressType: discovery.AddressTypeIPv6})
	m.OnEndpointSliceDelete(&proxy.EndpointSliceRecord{AddressType: discovery.AddressTypeFQDN})
	m.OnServiceAdd(&proxy.ServiceRecord{})
	if v4.slices != 1 || v6.slices != 1 || v4.services != 1 || v6.services != 1 {
		t.Errorf("v4 %+v, v6 %+v", v4, v6)
	}
}
