package ipvs

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy"
)

// inputs are what the proxier has taken of the Services, their endpoints and the
// node: the desired state is built from them alone.
type inputs struct {
	// svcPorts are the ports of every Service with ports in this family, as the
	// service tracker reports them (never written: desired virtual servers point at
	// their names). The endpoints are read from the endpoints tracker, which holds
	// them anyway (EndpointsChangeTracker.Endpoints): at 50k Services a map of
	// service ports and one of endpoints, keyed by a 64-byte name, took 11 MB.
	svcPorts             map[types.NamespacedName][]proxy.ServicePort
	nodeLabels           map[string]string
	nodeLabelsChanged    bool
	servicesSynced       bool
	endpointSlicesSynced bool
	// deferred are the Services a warm sync left unbuilt until their endpoints
	// arrive (warm.go).
	deferred sets.Set[types.NamespacedName]
}

func newInputs() inputs {
	return inputs{svcPorts: map[types.NamespacedName][]proxy.ServicePort{}}
}

// kernelMemory is what the proxier knows the kernel holds, and the reads and
// writes that keep that knowledge true.
type kernelMemory struct {
	applied  *appliedState // nil: unknown, the next sync reads the kernel
	needFull bool
	// warmed: warm syncs wrote the applied state; the first sync after the lists
	// are complete compares every key against it (warm.go).
	warmed   bool
	lastFull time.Time
	// lastRead is how long the last periodic resync read took (resyncDue).
	lastRead time.Duration
	// setsEmptied is set by a backend's prepare that wrote its sets anew (empty).
	setsEmptied bool
	// draining are the TCP real servers at weight 0 whose endpoint is gone, with
	// their deadline (unix ns).
	draining map[drainKey]int64
	hcSynced bool
	// resync is the periodic resync's kernel read in flight beside the sync loop
	// (nil when none), and journal the keys syncs wrote since it began (resync.go).
	resync  *resyncRead
	journal *journal
	// resyncOps are the kernel operations of the last read taken, counted in the
	// stats of the sync that takes it.
	resyncOps [numKernelOps]int
	// slicer walks the keys of a periodic resync still to be compared, a slice per
	// sync (resync_slices.go).
	slicer *resyncSlicer
	// otherModesRemoved: upstream's iptables- and nftables-mode leftovers are gone;
	// otherBackendRemoved: what the other rules backends left of this family is gone
	// (after the first full sync that wrote every member and rule); beside is the
	// run of those removals beside the sync loop (nil when none; cleanup_beside.go).
	otherModesRemoved   bool
	otherBackendRemoved bool
	beside              *besideRun
}

// failureMemory is what failed: objects the kernel refused, retried with backoff
// (retry.go); values not programmed at all (refusals.go); the ClusterIP keys
// external addresses must not take; the held-back list; and the backoff of syncs
// that failed as a whole.
type failureMemory struct {
	retries      map[retryKey]*retryState
	retryWait    time.Duration
	refusals     map[types.NamespacedName][]refusal
	extKeys      map[types.NamespacedName][]vsKey
	extClaims    map[vsKey]sets.Set[types.NamespacedName]
	heldBackView heldBackView
	// heldBackPublishedEmpty: the last published list was empty (skip republishing).
	heldBackPublishedEmpty bool
	retryDelay             time.Duration
}

func newFailureMemory() failureMemory {
	return failureMemory{
		retries:   map[retryKey]*retryState{},
		refusals:  map[types.NamespacedName][]refusal{},
		extKeys:   map[types.NamespacedName][]vsKey{},
		extClaims: map[vsKey]sets.Set[types.NamespacedName]{},
	}
}
