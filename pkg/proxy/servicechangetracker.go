package proxy

import (
	"cmp"
	"reflect"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
)

// ServiceChangeTracker accumulates Service changes for one IP family between syncs.
// Informer handlers call Update; the sync loop applies everything at once with
// ServicePortMap.Update.
type ServiceChangeTracker struct {
	ipFamily v1.IPFamily
	recorder events.EventRecorder

	lock sync.Mutex
	// items holds, per Service, its ports as last applied (previous) and as they
	// are now (current). A Service whose current equals previous has no entry.
	items map[types.NamespacedName]*serviceChange
}

type serviceChange struct {
	previous ServicePortMap
	current  ServicePortMap
}

// NewServiceChangeTracker returns a tracker for ipFamily. recorder (may be nil)
// receives Warning events for Service values that cannot be programmed.
func NewServiceChangeTracker(ipFamily v1.IPFamily, recorder events.EventRecorder) *ServiceChangeTracker {
	return &ServiceChangeTracker{
		ipFamily: ipFamily,
		recorder: recorder,
		items:    make(map[types.NamespacedName]*serviceChange),
	}
}

// Update records a Service add (previous nil), update, or delete (current nil). It
// returns true if the tracker holds any change that needs a sync, whether or not this
// call caused it (as upstream). Changes coalesce: an add followed by a delete before
// the next sync leaves nothing to do.
func (sct *ServiceChangeTracker) Update(previous, current *ServiceRecord) bool {
	svc := current
	if svc == nil {
		svc = previous
	}
	if svc == nil {
		return false
	}
	nn := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	currentPorts := serviceToServicePorts(current.Service(), sct.ipFamily, sct.recorder)

	sct.lock.Lock()
	defer sct.lock.Unlock()
	change, ok := sct.items[nn]
	if !ok {
		change = &serviceChange{previous: serviceToServicePorts(previous.Service(), sct.ipFamily, nil)}
		sct.items[nn] = change
	}
	change.current = currentPorts
	if reflect.DeepEqual(change.previous, change.current) {
		delete(sct.items, nn)
	} else {
		klog.V(4).InfoS("Service ports changed", "service", nn, "ipFamily", sct.ipFamily, "ports", len(change.current))
	}
	return len(sct.items) > 0
}

// PendingChanges is the number of Services with changes not yet applied.
func (sct *ServiceChangeTracker) PendingChanges() int {
	sct.lock.Lock()
	defer sct.lock.Unlock()
	return len(sct.items)
}

// UpdateServiceMapResult says what a ServicePortMap.Update changed.
type UpdateServiceMapResult struct {
	// UpdatedServices is every Service whose ports were added, changed or removed.
	UpdatedServices sets.Set[types.NamespacedName]
	// Ports are the ports of each updated Service after the update, sorted by name
	// (none for a Service that is gone or has nothing for this family): a proxier
	// can keep them instead of a ServicePortMap. The lists are never written.
	Ports map[types.NamespacedName][]ServicePort
}

// ServicePort is one port of a Service: its name and its info.
type ServicePort struct {
	Name ServicePortName
	Info *ServicePortInfo
}

// Update applies and clears the tracker's pending changes.
func (sm ServicePortMap) Update(sct *ServiceChangeTracker) UpdateServiceMapResult {
	result, previous := sct.checkout()
	for nn, old := range previous {
		for name := range old {
			delete(sm, name)
		}
		for _, p := range result.Ports[nn] {
			sm[p.Name] = p.Info
		}
	}
	return result
}

// Checkout clears the tracker's pending changes and returns them, for a proxier that
// keeps UpdateServiceMapResult.Ports instead of a ServicePortMap.
func (sct *ServiceChangeTracker) Checkout() UpdateServiceMapResult {
	result, _ := sct.checkout()
	return result
}

// checkout returns the changes, and each changed Service's ports before them.
func (sct *ServiceChangeTracker) checkout() (UpdateServiceMapResult, map[types.NamespacedName]ServicePortMap) {
	result := UpdateServiceMapResult{
		UpdatedServices: sets.New[types.NamespacedName](),
		Ports:           map[types.NamespacedName][]ServicePort{},
	}
	if sct == nil {
		return result, nil
	}
	sct.lock.Lock()
	items := sct.items
	sct.items = make(map[types.NamespacedName]*serviceChange)
	sct.lock.Unlock()

	previous := make(map[types.NamespacedName]ServicePortMap, len(items))
	for nn, change := range items {
		result.UpdatedServices.Insert(nn)
		previous[nn] = change.previous
		ports := make([]ServicePort, 0, len(change.current))
		for name, info := range change.current {
			ports = append(ports, ServicePort{Name: name, Info: info})
		}
		slices.SortFunc(ports, func(a, b ServicePort) int {
			return cmp.Or(cmp.Compare(a.Name.String(), b.Name.String()), cmp.Compare(a.Name.Protocol, b.Name.Protocol))
		})
		result.Ports[nn] = ports
	}
	return result, previous
}
