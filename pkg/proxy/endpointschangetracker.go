package proxy

import (
	"reflect"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
)

// EndpointsChangeTracker accumulates EndpointSlice changes for one IP family between
// syncs. Informer handlers call EndpointSliceUpdate; the sync loop applies everything
// at once with EndpointsMap.Update.
type EndpointsChangeTracker struct {
	ipFamily    v1.IPFamily
	addressType discovery.AddressType

	lock  sync.Mutex
	cache *endpointSliceCache
	// lastChangeTriggerTimes feeds the network programming latency metric.
	lastChangeTriggerTimes map[types.NamespacedName][]time.Time
	// startTime: trigger times older than the tracker describe changes made before
	// this process started watching, which it did not program late.
	startTime time.Time
}

type endpointsChange struct {
	previous EndpointsMap
	current  EndpointsMap
}

// NewEndpointsChangeTracker returns a tracker for ipFamily; endpoints whose nodeName
// is nodeName are local.
func NewEndpointsChangeTracker(ipFamily v1.IPFamily, nodeName string) *EndpointsChangeTracker {
	return &EndpointsChangeTracker{
		ipFamily:               ipFamily,
		addressType:            addressTypeOf(ipFamily),
		cache:                  newEndpointSliceCache(nodeName),
		lastChangeTriggerTimes: make(map[types.NamespacedName][]time.Time),
		startTime:              time.Now(),
	}
}

// EndpointSliceUpdate records an add/update (removeSlice false) or delete of slice. It
// returns true if this call changed what is pending, i.e. a sync is needed. Slices of
// the other family or of type FQDN, and slices without the service-name label, are
// ignored.
func (ect *EndpointsChangeTracker) EndpointSliceUpdate(slice *EndpointSliceRecord, removeSlice bool) bool {
	if slice == nil {
		return false
	}
	if slice.AddressType != ect.addressType {
		klog.V(5).InfoS("Ignoring EndpointSlice of another address type", "endpointSlice", klog.KObj(slice), "addressType", slice.AddressType, "ipFamily", ect.ipFamily)
		return false
	}
	if slice.nodeName != ect.cache.nodeName {
		// Which endpoints are local was decided for another node: a wiring error.
		klog.ErrorS(nil, "Ignoring EndpointSlice reduced for another node", "endpointSlice", klog.KObj(slice), "node", slice.nodeName, "proxierNode", ect.cache.nodeName)
		return false
	}
	svc, sliceName, err := slice.keys()
	if err != nil {
		klog.InfoS("Ignoring EndpointSlice", "endpointSlice", klog.KObj(slice), "err", err)
		return false
	}

	ect.lock.Lock()
	defer ect.lock.Unlock()
	info := slice.info
	if removeSlice {
		info = removedSlice
	}
	changed := ect.cache.updatePending(svc, sliceName, info)
	if changed {
		// A deleted slice's trigger time is that of its last update, not of the
		// deletion, so it would misreport latency.
		if removeSlice {
			delete(ect.lastChangeTriggerTimes, svc)
		} else if t := slice.TriggerTime(); !t.IsZero() && t.After(ect.startTime) {
			ect.lastChangeTriggerTimes[svc] = append(ect.lastChangeTriggerTimes[svc], t)
		}
	}
	return changed
}

// PendingChanges names ("namespace/name") the Services with endpoint changes not yet
// applied.
func (ect *EndpointsChangeTracker) PendingChanges() sets.Set[string] {
	ect.lock.Lock()
	defer ect.lock.Unlock()
	return ect.cache.pendingServices()
}

// PendingChangeCount is the number of Services with endpoint changes not yet
// applied, in constant time (for the pending-changes gauge on every event).
func (ect *EndpointsChangeTracker) PendingChangeCount() int {
	ect.lock.Lock()
	defer ect.lock.Unlock()
	return ect.cache.pending.Len()
}

// UpdateEndpointsMapResult says what an EndpointsMap.Update changed.
type UpdateEndpointsMapResult struct {
	// UpdatedServices is every Service whose endpoints changed.
	UpdatedServices sets.Set[types.NamespacedName]
	// LastChangeTriggerTimes are the trigger times of the applied changes.
	LastChangeTriggerTimes map[types.NamespacedName][]time.Time
}

// Update applies and clears the tracker's pending changes.
func (em EndpointsMap) Update(ect *EndpointsChangeTracker) UpdateEndpointsMapResult {
	result, changes := ect.checkout()
	for svc := range result.UpdatedServices {
		change := changes[svc]
		for spn := range change.previous {
			delete(em, spn)
		}
		for spn, eps := range change.current {
			em[spn] = eps
		}
	}
	return result
}

// Checkout clears the tracker's pending changes and says what they changed, for a
// proxier that reads the endpoints from the tracker (Endpoints) instead of keeping an
// EndpointsMap.
func (ect *EndpointsChangeTracker) Checkout() UpdateEndpointsMapResult {
	result, _ := ect.checkout()
	return result
}

func (ect *EndpointsChangeTracker) checkout() (UpdateEndpointsMapResult, map[types.NamespacedName]*endpointsChange) {
	result := UpdateEndpointsMapResult{
		UpdatedServices:        sets.New[types.NamespacedName](),
		LastChangeTriggerTimes: make(map[types.NamespacedName][]time.Time),
	}
	if ect == nil {
		return result, nil
	}
	ect.lock.Lock()
	changes := ect.cache.checkoutChanges()
	// Handed over, not copied and cleared: clear keeps the table, which after an
	// initial list whose slices carry trigger times would hold a slot for every
	// Service for good.
	result.LastChangeTriggerTimes = ect.lastChangeTriggerTimes
	ect.lastChangeTriggerTimes = make(map[types.NamespacedName][]time.Time)
	ect.lock.Unlock()

	for svc, change := range changes {
		if !reflect.DeepEqual(change.previous, change.current) {
			result.UpdatedServices.Insert(svc)
		}
	}
	return result, changes
}

// Endpoints are the endpoints of spn as of the last Checkout (or Update), sorted by
// String(); shared, not to be written.
func (ect *EndpointsChangeTracker) Endpoints(spn ServicePortName) []*Endpoint {
	ect.lock.Lock()
	defer ect.lock.Unlock()
	return ect.cache.endpoints(spn)
}

// HasSlices reports whether any slice of svc in this family was applied by the last
// Checkout (or Update), even one without endpoints.
func (ect *EndpointsChangeTracker) HasSlices(svc types.NamespacedName) bool {
	ect.lock.Lock()
	defer ect.lock.Unlock()
	tracker := ect.cache.byService[svc]
	return tracker != nil && len(tracker.applied) > 0
}

// addressTypeOf is the EndpointSlice address type holding family's addresses.
func addressTypeOf(family v1.IPFamily) discovery.AddressType {
	if family == v1.IPv6Protocol {
		return discovery.AddressTypeIPv6
	}
	return discovery.AddressTypeIPv4
}
