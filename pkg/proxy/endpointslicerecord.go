package proxy

import (
	"fmt"
	"math"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// EndpointSliceRecord is an EndpointSlice as kube-proxy keeps it: validated and reduced
// to what a proxier uses, in the endpoint slice cache's own form. The EndpointSlice
// informer caches records instead of objects (config.NewEndpointSliceConfig installs
// the transform), and the change trackers keep the same records' endpoints, so a
// slice's endpoints exist once in the daemon. At 10 endpoints a trimmed object held
// about 2.5 KB besides what the proxier kept of it; its record holds ~150 bytes more.
//
// A record is a runtime.Object only so that an informer can store it. Its content
// never changes after NewEndpointSliceRecord: DeepCopyObject copies the header and
// shares the endpoints.
type EndpointSliceRecord struct {
	RecordMeta
	// Service is the slice's kubernetes.io/service-name label, "" when it has none.
	Service     string
	AddressType discovery.AddressType
	// triggerTime is the endpoints.kubernetes.io/last-change-trigger-time annotation
	// in Unix nanoseconds, 0 when absent or malformed (TriggerTime): 8 bytes where a
	// time.Time takes 24, which puts the record in a smaller size class.
	triggerTime int64
	// nodeName is the node whose endpoints info marks local.
	nodeName string
	// info is nil for an address type no proxier programs (FQDN) and for a slice
	// without the service-name label; else it points at infoData (one allocation
	// with the record; the trackers keep the pointer).
	info     *sliceInfo
	infoData sliceInfo
}

// NewEndpointSliceRecord reduces slice for a proxier running on nodeName. Parts that
// cannot be programmed (a port without a name or number, an unsupported protocol, an
// endpoint without a valid address of the slice's family) are logged and left out,
// once per slice version, whichever family's proxier takes it. A nil slice has a nil
// record.
func NewEndpointSliceRecord(slice *discovery.EndpointSlice, nodeName string) *EndpointSliceRecord {
	if slice == nil {
		return nil
	}
	r := &EndpointSliceRecord{
		// No UID: no Event names a slice.
		RecordMeta:  RecordMeta{Namespace: internString(slice.Namespace), Name: slice.Name, ResourceVersion: slice.ResourceVersion},
		Service:     slice.Labels[discovery.LabelServiceName],
		AddressType: discovery.AddressType(internString(string(slice.AddressType))),
		triggerTime: lastChangeTriggerTime(slice),
		nodeName:    nodeName,
	}
	if strings.HasPrefix(r.Name, r.Service) {
		// The controller names a slice after its Service: pack the name alone.
		packStrings(&r.Name, &r.ResourceVersion)
		r.Service = r.Name[:len(r.Service)]
	} else {
		packStrings(&r.Name, &r.ResourceVersion, &r.Service)
	}
	if r.Service == "" {
		return r // ignored by every tracker
	}
	switch slice.AddressType {
	case discovery.AddressTypeIPv4:
		r.info = &r.infoData
		newSliceInfo(slice, r.serviceName(), v1.IPv4Protocol, nodeName, r.info)
	case discovery.AddressTypeIPv6:
		r.info = &r.infoData
		newSliceInfo(slice, r.serviceName(), v1.IPv6Protocol, nodeName, r.info)
	}
	return r
}

func (r *EndpointSliceRecord) serviceName() types.NamespacedName {
	return types.NamespacedName{Namespace: r.Namespace, Name: r.Service}
}

// keys returns the Service the slice belongs to and the slice's own name.
func (r *EndpointSliceRecord) keys() (types.NamespacedName, string, error) {
	if r.Service == "" {
		return types.NamespacedName{}, "", fmt.Errorf("endpoint slice %s/%s has no %s label", r.Namespace, r.Name, discovery.LabelServiceName)
	}
	if r.Namespace == "" || r.Name == "" {
		return types.NamespacedName{}, "", fmt.Errorf("endpoint slice for service %s has no namespace or name", r.Service)
	}
	return r.serviceName(), r.Name, nil
}

// DeepCopyObject copies the header; the endpoints are immutable and shared.
func (r *EndpointSliceRecord) DeepCopyObject() runtime.Object {
	c := *r
	return &c
}

// TriggerTime is the endpoints.kubernetes.io/last-change-trigger-time annotation (in
// UTC), zero when absent or malformed.
func (r *EndpointSliceRecord) TriggerTime() time.Time {
	if r.triggerTime == 0 {
		return time.Time{}
	}
	return time.Unix(0, r.triggerTime).UTC()
}

// lastChangeTriggerTime parses endpoints.kubernetes.io/last-change-trigger-time into
// Unix nanoseconds; 0 when absent, malformed or not after the Unix epoch.
func lastChangeTriggerTime(slice *discovery.EndpointSlice) int64 {
	val, ok := slice.Annotations[v1.EndpointsLastChangeTriggerTime]
	if !ok {
		return 0
	}
	t, err := time.Parse(time.RFC3339Nano, val)
	if err != nil {
		klog.InfoS("Ignoring malformed last-change-trigger-time annotation", "endpointSlice", klog.KObj(slice), "value", val, "err", err)
		return 0
	}
	if !t.After(time.Unix(0, 0)) || !t.Before(time.Unix(0, math.MaxInt64)) {
		return 0 // no latency to measure from it
	}
	return t.UnixNano()
}
