package proxy

import (
	"cmp"
	"net/netip"
	"reflect"
	"slices"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	netutils "k8s.io/utils/net"
)

// endpointSliceCache holds, per Service, the EndpointSlices as last applied and the
// ones received since. Slices are kept by name because an endpoint can move from one
// slice to another: merging all of a Service's slices is what gives its endpoints.
//
// Slices arrive reduced and validated (EndpointSliceRecord), so that an update
// touching only irrelevant fields compares equal and causes no sync.
type endpointSliceCache struct {
	// nodeName is the node the records' locality must have been decided for.
	nodeName string
	// byService is guarded by the EndpointsChangeTracker's lock.
	byService map[types.NamespacedName]*sliceTracker
	// pending names the Services with pending slices, so that counting and checking
	// out changes cost what changed, not the cluster's size.
	pending sets.Set[types.NamespacedName]
}

// sliceTracker holds one Service's slices by name, sorted; most Services have one
// slice, and a list of one costs a fraction of a map of one.
type sliceTracker struct {
	applied []namedSlice
	pending []namedSlice // nil when nothing is pending
	// merged are the applied slices' endpoints merged, when there are several (nil
	// for one: its endpoints are read from the slice).
	merged EndpointsMap
	// one is where applied starts: most Services have one slice, which so needs no
	// allocation of its own.
	one [1]namedSlice
}

func newSliceTracker() *sliceTracker {
	t := &sliceTracker{}
	t.applied = t.one[:0]
	return t
}

type namedSlice struct {
	name string
	info *sliceInfo
}

// findSlice returns the position of name in list, and whether it is there.
func findSlice(list []namedSlice, name string) (int, bool) {
	return slices.BinarySearchFunc(list, name, func(e namedSlice, name string) int { return cmp.Compare(e.name, name) })
}

func getSlice(list []namedSlice, name string) (*sliceInfo, bool) {
	if i, ok := findSlice(list, name); ok {
		return list[i].info, true
	}
	return nil, false
}

// putSlice sets name to info in list and returns the list.
func putSlice(list []namedSlice, name string, info *sliceInfo) []namedSlice {
	i, ok := findSlice(list, name)
	if ok {
		list[i].info = info
		return list
	}
	return slices.Insert(list, i, namedSlice{name, info})
}

// deleteSlice removes name from list and returns the list (nil when empty).
func deleteSlice(list []namedSlice, name string) []namedSlice {
	if i, ok := findSlice(list, name); ok {
		list = slices.Delete(list, i, i+1)
	}
	if len(list) == 0 {
		return nil
	}
	return list
}

// sliceInfo is the part of an EndpointSlice the proxier uses: per port, the finished
// Endpoints, which endpointsMap hands out as they are (they are immutable), so a
// slice's endpoints exist once in memory however often its Service is merged.
type sliceInfo struct {
	remove bool
	ports  []slicePort // sorted by name, protocol, port
}

type slicePort struct {
	name     string
	port     int32
	protocol v1.Protocol
	// endpoints are the endpoints on the port, sorted by Endpoint.String().
	endpoints []*Endpoint
}

func sameSlicePort(a, b slicePort) bool {
	return a.name == b.name && a.protocol == b.protocol && a.port == b.port
}

func newEndpointSliceCache(nodeName string) *endpointSliceCache {
	return &endpointSliceCache{nodeName: nodeName, byService: make(map[types.NamespacedName]*sliceTracker), pending: sets.New[types.NamespacedName]()}
}

// updatePending records slice as pending and reports whether that changed the
// pending state. A slice that goes back to what is applied (or an unseen slice that is
// removed) leaves no pending entry, so PendingChanges counts only real changes.
func (c *endpointSliceCache) updatePending(svc types.NamespacedName, sliceName string, info *sliceInfo) bool {
	remove := info.remove
	tracker := c.byService[svc]
	var applied, pending *sliceInfo
	var inApplied, inPending bool
	if tracker != nil {
		applied, inApplied = getSlice(tracker.applied, sliceName)
		pending, inPending = getSlice(tracker.pending, sliceName)
	}

	sameAsApplied := !inApplied && remove || inApplied && reflect.DeepEqual(applied, info)
	if sameAsApplied {
		if !inPending {
			return false
		}
		tracker.pending = deleteSlice(tracker.pending, sliceName)
		if len(tracker.pending) == 0 {
			c.pending.Delete(svc)
			if len(tracker.applied) == 0 {
				delete(c.byService, svc)
			}
		}
		return true
	}
	if inPending && reflect.DeepEqual(pending, info) {
		return false
	}
	if tracker == nil {
		tracker = newSliceTracker()
		c.byService[svc] = tracker
	}
	tracker.pending = putSlice(tracker.pending, sliceName, info)
	c.pending.Insert(svc)
	return true
}

// pendingServices names the Services with pending slice changes.
func (c *endpointSliceCache) pendingServices() sets.Set[string] {
	out := sets.New[string]()
	for svc := range c.pending {
		out.Insert(svc.String())
	}
	return out
}

// checkoutChanges applies every pending slice and returns, per Service, its
// endpoints before and after.
func (c *endpointSliceCache) checkoutChanges() map[types.NamespacedName]*endpointsChange {
	changes := make(map[types.NamespacedName]*endpointsChange, c.pending.Len())
	for svc := range c.pending {
		tracker := c.byService[svc]
		if tracker == nil || len(tracker.pending) == 0 {
			continue
		}
		change := &endpointsChange{previous: c.endpointsMap(svc, tracker.applied)}
		for _, p := range tracker.pending {
			if p.info.remove {
				tracker.applied = deleteSlice(tracker.applied, p.name)
			} else {
				tracker.applied = putSlice(tracker.applied, p.name, p.info)
			}
		}
		tracker.pending = nil // most Services have nothing pending most of the time
		change.current = c.endpointsMap(svc, tracker.applied)
		changes[svc] = change
		tracker.merged = nil
		if len(tracker.applied) > 1 {
			tracker.merged = change.current
		}
		if len(tracker.applied) == 0 {
			delete(c.byService, svc)
		}
	}
	if len(c.pending) > 1024 {
		// clear keeps the table: after the initial list it would hold a slot for
		// every Service for good.
		c.pending = sets.New[types.NamespacedName]()
	} else {
		clear(c.pending)
	}
	return changes
}

// endpoints are spn's applied endpoints (endpointsMap's, without making the map).
func (c *endpointSliceCache) endpoints(spn ServicePortName) []*Endpoint {
	tracker := c.byService[spn.NamespacedName]
	switch {
	case tracker == nil || len(tracker.applied) == 0:
		return nil
	case tracker.merged != nil:
		return tracker.merged[spn]
	}
	// As endpointsMap: of two ports with one name and protocol, the last wins.
	var eps []*Endpoint
	for _, port := range tracker.applied[0].info.ports {
		if port.name == spn.Port && port.protocol == spn.Protocol && len(port.endpoints) > 0 {
			eps = port.endpoints
		}
	}
	return eps
}

// removedSlice marks a slice's removal in the pending list.
var removedSlice = &sliceInfo{remove: true}

// newSliceInfo validates and reduces a slice of svc for the proxier of family on
// nodeName into info.
func newSliceInfo(slice *discovery.EndpointSlice, svc types.NamespacedName, family v1.IPFamily, nodeName string, info *sliceInfo) {
	logger := sliceLogger{slice: slice, svc: svc, family: family}
	for _, p := range slice.Ports {
		switch {
		case p.Name == nil:
			logger.Info("Ignoring endpoint port with nil name")
			continue
		case p.Port == nil || *p.Port < 1 || *p.Port > 65535:
			logger.Info("Ignoring endpoint port with invalid port number", "portName", *p.Name)
			continue
		}
		protocol := v1.ProtocolTCP // the API default
		if p.Protocol != nil {
			protocol = *p.Protocol
		}
		if !supportedProtocols.Has(protocol) {
			logger.Info("Ignoring endpoint port with unsupported protocol", "portName", *p.Name, "protocol", protocol)
			continue
		}
		info.ports = append(info.ports, slicePort{name: internString(*p.Name), port: *p.Port, protocol: v1.Protocol(internString(string(protocol)))})
	}
	slices.SortFunc(info.ports, func(a, b slicePort) int {
		return cmp.Or(cmp.Compare(a.name, b.name), cmp.Compare(a.protocol, b.protocol), cmp.Compare(a.port, b.port))
	})
	info.ports = slices.CompactFunc(info.ports, sameSlicePort)

	addrs := make([]Endpoint, 0, len(slice.Endpoints)) // one per usable address
	for i := range slice.Endpoints {
		if addr, ok := endpointOf(&slice.Endpoints[i], family, nodeName, logger); ok {
			addrs = append(addrs, addr)
		}
	}

	for i, port := range info.ports {
		eps := addrs // one allocation holds a port's endpoints
		if i < len(info.ports)-1 {
			eps = slices.Clone(addrs)
		}
		out := make([]*Endpoint, len(eps))
		for j := range eps {
			eps[j].Port = port.port
			out[j] = &eps[j]
		}
		info.ports[i].endpoints = sortEndpoints(out)
	}
}

// endpointOf is ep as the proxier of family on nodeName uses it (its port is set by
// the caller), or false when it cannot be used.
func endpointOf(ep *discovery.Endpoint, family v1.IPFamily, nodeName string, logger sliceLogger) (Endpoint, bool) {
	if len(ep.Addresses) == 0 {
		logger.Info("Ignoring endpoint without addresses")
		return Endpoint{}, false
	}
	// Only the first address is used; the API reserves the others.
	a, ok := parseEndpointAddr(ep.Addresses[0])
	if !ok {
		logger.Info("Ignoring endpoint with invalid address", "address", ep.Addresses[0])
		return Endpoint{}, false
	}
	if a.Is4() != (family == v1.IPv4Protocol) {
		logger.Info("Ignoring endpoint whose address does not match the slice's family", "address", ep.Addresses[0])
		return Endpoint{}, false
	}
	addr := Endpoint{
		addr: a.As16(),
		// Nil conditions default as the API documents them.
		Ready:       ep.Conditions.Ready == nil || *ep.Conditions.Ready,
		Serving:     ep.Conditions.Serving == nil || *ep.Conditions.Serving,
		Terminating: ep.Conditions.Terminating != nil && *ep.Conditions.Terminating,
	}
	if ep.NodeName != nil {
		addr.IsLocal = nodeName != "" && *ep.NodeName == nodeName
	}
	if ep.Hints != nil && (len(ep.Hints.ForZones) > 0 || len(ep.Hints.ForNodes) > 0) {
		addr.Hints = &EndpointHints{}
		for _, z := range ep.Hints.ForZones {
			if addr.Hints.Zones == nil {
				addr.Hints.Zones = sets.New[string]()
			}
			addr.Hints.Zones.Insert(z.Name)
		}
		for _, n := range ep.Hints.ForNodes {
			if addr.Hints.Nodes == nil {
				addr.Hints.Nodes = sets.New[string]()
			}
			addr.Hints.Nodes.Insert(n.Name)
		}
	}
	return addr, true
}

// parseEndpointAddr parses an endpoint's address as the API validation of old
// servers let it be written (IPv4 with leading zeros included), IPv4 and IPv4-mapped
// IPv6 as IPv4; false when it is no address.
func parseEndpointAddr(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return netip.Addr{}, false // net.ParseIP refuses a zone too
		}
		return a.Unmap(), true
	}
	ip := netutils.ParseIPSloppy(s)
	if ip == nil {
		return netip.Addr{}, false
	}
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap(), true
}

// sortEndpoints sorts by String() and drops later copies of an endpoint listed twice
// in one slice, keeping the most usable (the first of equals: the sort is stable).
func sortEndpoints(eps []*Endpoint) []*Endpoint {
	if len(eps) < 2 {
		return eps
	}
	keys := make(map[*Endpoint]string, len(eps))
	for _, ep := range eps {
		keys[ep] = ep.String()
	}
	slices.SortStableFunc(eps, func(a, b *Endpoint) int {
		return cmp.Or(cmp.Compare(keys[a], keys[b]), cmp.Compare(usability(b), usability(a)))
	})
	return slices.CompactFunc(eps, func(a, b *Endpoint) bool { return keys[a] == keys[b] })
}

// endpointsMap merges a Service's slices into its endpoints per service port. An
// endpoint listed more than once (in one slice or several, as happens while the
// controller moves it) is kept once: the most usable copy wins, ties go to the slice
// whose name sorts first, so the result never depends on map order.
func (c *endpointSliceCache) endpointsMap(svc types.NamespacedName, byName []namedSlice) EndpointsMap {
	if len(byName) == 1 {
		// One slice (the usual case): its endpoints are already sorted and unique.
		info := byName[0].info
		em := make(EndpointsMap, len(info.ports))
		for _, port := range info.ports {
			if len(port.endpoints) > 0 {
				em[ServicePortName{NamespacedName: svc, Port: port.name, Protocol: port.protocol}] = port.endpoints
			}
		}
		return em
	}

	merged := make(map[ServicePortName]map[string]*Endpoint)
	for _, ns := range byName { // sorted by name
		info := ns.info
		for _, port := range info.ports {
			spn := ServicePortName{NamespacedName: svc, Port: port.name, Protocol: port.protocol}
			byEndpoint := merged[spn]
			if byEndpoint == nil {
				byEndpoint = make(map[string]*Endpoint)
				merged[spn] = byEndpoint
			}
			for _, ep := range port.endpoints {
				key := ep.String()
				if have, ok := byEndpoint[key]; !ok || usability(ep) > usability(have) {
					byEndpoint[key] = ep
				}
			}
		}
	}

	em := make(EndpointsMap, len(merged))
	for spn, byEndpoint := range merged {
		if len(byEndpoint) == 0 {
			continue
		}
		keys := make([]string, 0, len(byEndpoint))
		for key := range byEndpoint {
			keys = append(keys, key)
		}
		slices.Sort(keys) // the keys are the endpoints' String()
		eps := make([]*Endpoint, len(keys))
		for i, key := range keys {
			eps[i] = byEndpoint[key]
		}
		em[spn] = eps
	}
	return em
}

// sliceLogger builds its structured logger only when something is logged: most
// slices are valid, and the values cost allocations on every update.
type sliceLogger struct {
	slice  *discovery.EndpointSlice
	svc    types.NamespacedName
	family v1.IPFamily
}

func (l sliceLogger) Info(msg string, kv ...any) {
	klog.Background().WithValues("endpointSlice", klog.KObj(l.slice), "service", l.svc, "ipFamily", l.family).Info(msg, kv...)
}

// usability ranks duplicate copies of an endpoint: ready beats serving-terminating
// beats neither.
func usability(ep *Endpoint) int {
	switch {
	case ep.Ready:
		return 2
	case ep.Serving:
		return 1
	default:
		return 0
	}
}
