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
	// Ports are the port names of each updated Service after the update, sorted
	// (none for a Service that is gone or has nothing for this family): the proxier
	// needs no port bookkeeping of its own.
	Ports map[types.NamespacedName][]ServicePortName
}

// Update applies and clears the tracker's pending changes.
func (sm ServicePortMap) Update(sct *ServiceChangeTracker) UpdateServiceMapResult {
	result := UpdateServiceMapResult{
		UpdatedServices: sets.New[types.NamespacedName](),
		Ports:           map[types.NamespacedName][]ServicePortName{},
	}
	if sct == nil {
		return result
	}
	sct.lock.Lock()
	items := sct.items
	sct.items = make(map[types.NamespacedName]*serviceChange)
	sct.lock.Unlock()

	for nn, change := range items {
		result.UpdatedServices.Insert(nn)
		for name := range change.previous {
			if _, kept := change.current[name]; !kept {
				delete(sm, name)
			}
		}
		names := make([]ServicePortName, 0, len(change.current))
		for name, info := range change.current {
			sm[name] = info
			names = append(names, name)
		}
		slices.SortFunc(names, func(a, b ServicePortName) int {
			return cmp.Or(cmp.Compare(a.String(), b.String()), cmp.Compare(a.Protocol, b.Protocol))
		})
		result.Ports[nn] = names
	}
	return result
}
