package ipvs

import (
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
)

// ipvsIPMember is the KUBE-IPVS-IPS member of an address bound to kube-ipvs0 (its
// canonical text).
func ipvsIPMember(a string) rules.Member {
	addr, _ := netip.ParseAddr(a)
	return rules.AddrMember(rules.IPVSIPs, addr.Unmap())
}

// desiredIndex aggregates the desired state of every Service. Several Services may
// want the same kernel object (an external IP shared by two Services, a node port entry,
// the same endpoint in two Services' hairpin entries), so objects are reference counted
// and a virtual server claimed twice goes to the Service whose name sorts first, which
// keeps the outcome independent of event order.
type desiredIndex struct {
	services map[types.NamespacedName]*serviceState
	// vs holds every claim on a virtual server key, chained through desiredVS.next.
	vs map[vsKey]*desiredVS
	// setRefs counts the claims on each set entry, except KUBE-IPVS-IPS's: that set
	// holds exactly the bound addresses, so bindRefs counts its entries too. The
	// counts are int32: an entry of setRefs is 44 bytes, not 48.
	setRefs map[rules.Member]int32
	// setDigests are the distinct entries per set (base name): their count and sum
	// (digest.go); addrDigest is bindRefs' (kube-ipvs0's addresses).
	setDigests map[rules.Set]setDigest
	addrDigest setDigest
	// srcRanges are the entries of the LoadBalancer source-range sets by port
	// (the nftables backend rewrites a port's elements together; reading them here
	// keeps a partial sync from walking every entry of every set).
	srcRanges map[rules.ServicePort]sets.Set[rules.Member]
	bindRefs  map[string]int32
	outRefs   map[rules.OutFilter]int
	// health check node ports and local endpoint counts of eTP=Local services
	hcPorts       map[types.NamespacedName]uint16
	hcEndpoints   map[types.NamespacedName]int
	noLocalIntern sets.Set[types.NamespacedName]
	noLocalExtern sets.Set[types.NamespacedName]
}

// touched collects the keys a change may have altered, so that only they are diffed
// against the kernel.
type touched struct {
	vs        sets.Set[vsKey]
	entries   sets.Set[rules.Member]
	addrs     sets.Set[string]
	outFilter bool
	health    bool
}

func newTouched() *touched {
	return &touched{vs: sets.New[vsKey](), entries: sets.New[rules.Member](), addrs: sets.New[string]()}
}

func newDesiredIndex() *desiredIndex {
	return &desiredIndex{
		services:      map[types.NamespacedName]*serviceState{},
		vs:            map[vsKey]*desiredVS{},
		setRefs:       map[rules.Member]int32{},
		setDigests:    map[rules.Set]setDigest{},
		srcRanges:     map[rules.ServicePort]sets.Set[rules.Member]{},
		bindRefs:      map[string]int32{},
		outRefs:       map[rules.OutFilter]int{},
		hcPorts:       map[types.NamespacedName]uint16{},
		hcEndpoints:   map[types.NamespacedName]int{},
		noLocalIntern: sets.New[types.NamespacedName](),
		noLocalExtern: sets.New[types.NamespacedName](),
	}
}

// set replaces the desired state of one Service (nil removes it) and records in t every
// key whose desired value may have changed.
func (ix *desiredIndex) set(name types.NamespacedName, st *serviceState, t *touched) {
	if old := ix.services[name]; old != nil {
		ix.remove(name, old, t)
	}
	if st == nil {
		delete(ix.services, name)
		return
	}
	if st.stateExtras == nil {
		st.stateExtras = noStateExtras // a state made by hand, in tests
	}
	ix.services[name] = st
	for _, d := range st.virtualServers {
		d.next = ix.vs[d.key]
		ix.vs[d.key] = d
		t.vs.Insert(d.key)
	}
	for _, e := range st.setEntries {
		if ix.setRefs[e]++; ix.setRefs[e] == 1 {
			ix.addMember(e)
			ix.noteSourceRange(e, true)
			t.entries.Insert(e)
		}
	}
	for _, a := range st.bindAddrs {
		if ix.bindRefs[a]++; ix.bindRefs[a] == 1 {
			t.addrs.Insert(a)
			ix.addrDigest.addAddr(a)
			ix.addMember(ipvsIPMember(a))
			t.entries.Insert(ipvsIPMember(a))
		}
	}
	for _, r := range st.outFilterRules {
		if ix.outRefs[r]++; ix.outRefs[r] == 1 {
			t.outFilter = true
		}
	}
	if st.healthCheckNodePort != 0 {
		ix.hcPorts[name] = uint16(st.healthCheckNodePort)
		ix.hcEndpoints[name] = st.localEndpoints
		t.health = true
	}
	if st.noLocalInternal {
		ix.noLocalIntern.Insert(name)
	}
	if st.noLocalExternal {
		ix.noLocalExtern.Insert(name)
	}
}

func (ix *desiredIndex) remove(name types.NamespacedName, old *serviceState, t *touched) {
	for _, d := range old.virtualServers {
		ix.unlink(d)
		t.vs.Insert(d.key)
	}
	for _, e := range old.setEntries {
		ix.unref(e, t)
	}
	for _, a := range old.bindAddrs {
		if ix.bindRefs[a]--; ix.bindRefs[a] <= 0 {
			delete(ix.bindRefs, a)
			t.addrs.Insert(a)
			ix.addrDigest.removeAddr(a)
			ix.removeMember(ipvsIPMember(a))
			t.entries.Insert(ipvsIPMember(a))
		}
	}
	for _, r := range old.outFilterRules {
		if ix.outRefs[r]--; ix.outRefs[r] <= 0 {
			delete(ix.outRefs, r)
			t.outFilter = true
		}
	}
	if old.healthCheckNodePort != 0 {
		delete(ix.hcPorts, name)
		delete(ix.hcEndpoints, name)
		t.health = true
	}
	ix.noLocalIntern.Delete(name)
	ix.noLocalExtern.Delete(name)
}

// noteSourceRange keeps srcRanges in step when e, an entry of a source-range set,
// comes or goes.
func (ix *desiredIndex) noteSourceRange(e rules.Member, add bool) {
	if !e.Set.SourceRange() {
		return
	}
	k := e.ServicePort()
	if add {
		if ix.srcRanges[k] == nil {
			ix.srcRanges[k] = sets.New[rules.Member]()
		}
		ix.srcRanges[k].Insert(e)
		return
	}
	if ix.srcRanges[k].Delete(e).Len() == 0 {
		delete(ix.srcRanges, k)
	}
}

func (ix *desiredIndex) unref(e rules.Member, t *touched) {
	if ix.setRefs[e]--; ix.setRefs[e] <= 0 {
		delete(ix.setRefs, e)
		ix.removeMember(e)
		ix.noteSourceRange(e, false)
		t.entries.Insert(e)
	}
}

// unlink removes one claim from its key's chain.
func (ix *desiredIndex) unlink(d *desiredVS) {
	head := ix.vs[d.key]
	switch {
	case head == d && d.next == nil:
		delete(ix.vs, d.key)
	case head == d:
		ix.vs[d.key] = d.next
	default:
		for c := head; c != nil; c = c.next {
			if c.next == d {
				c.next = d.next
				break
			}
		}
	}
	d.next = nil
}

// virtualServer returns the desired virtual server for a key, or nil. Of several
// claims the Service whose name sorts first wins.
func (ix *desiredIndex) virtualServer(key vsKey) *desiredVS {
	best := ix.vs[key]
	if best == nil || best.next == nil {
		return best
	}
	bestName := best.owner().String()
	for c := best.next; c != nil; c = c.next {
		if n := c.owner().String(); n < bestName {
			best, bestName = c, n
		}
	}
	return best
}

func (ix *desiredIndex) hasEntry(e rules.Member) bool {
	if e.Set == rules.IPVSIPs {
		return ix.bindRefs[e.IP().String()] > 0
	}
	return ix.setRefs[e] > 0
}
func (ix *desiredIndex) hasAddr(a string) bool { return ix.bindRefs[a] > 0 }

// The desired index is what the rules backends read of the desired state
// (rules.Desired).
var _ rules.Desired = (*desiredIndex)(nil)

// SetSize is how many distinct members set wants.
func (ix *desiredIndex) SetSize(set rules.Set) int { return ix.setDigests[set].n }

// Members lists the members set wants, sorted.
func (ix *desiredIndex) Members(set rules.Set) []rules.Member {
	var out []rules.Member
	if set == rules.IPVSIPs {
		for a := range ix.bindRefs {
			out = append(out, ipvsIPMember(a))
		}
	}
	for e := range ix.setRefs {
		if e.Set == set {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, rules.Compare)
	return out
}

// SourceRanges returns the source range members the index wants on port k, sorted.
func (ix *desiredIndex) SourceRanges(k rules.ServicePort) []rules.Member {
	es := ix.srcRanges[k].UnsortedList()
	slices.SortFunc(es, rules.Compare)
	return es
}

// SourceRangePorts lists the ports with source ranges.
func (ix *desiredIndex) SourceRangePorts() []rules.ServicePort {
	out := make([]rules.ServicePort, 0, len(ix.srcRanges))
	for k := range ix.srcRanges {
		out = append(out, k)
	}
	return out
}

// addMember and removeMember keep setDigests in step as an entry's first claim comes
// and its last goes.
func (ix *desiredIndex) addMember(e rules.Member) {
	d := ix.setDigests[e.Set]
	d.add(e)
	ix.setDigests[e.Set] = d
}

func (ix *desiredIndex) removeMember(e rules.Member) {
	d := ix.setDigests[e.Set]
	if d.remove(e); d.n <= 0 {
		delete(ix.setDigests, e.Set)
		return
	}
	ix.setDigests[e.Set] = d
}

// allTouched returns every key the index holds, for a full reconcile.
func (ix *desiredIndex) allTouched() *touched {
	t := newTouched()
	for k := range ix.vs {
		t.vs.Insert(k)
	}
	for e := range ix.setRefs {
		t.entries.Insert(e)
	}
	for a := range ix.bindRefs {
		t.addrs.Insert(a)
		t.entries.Insert(ipvsIPMember(a))
	}
	t.outFilter, t.health = true, true
	return t
}

// The owners of an object, for reporting a write the kernel refused. They are found by
// scanning every Service: this runs only on failures.

func (ix *desiredIndex) ownersOfEntry(e rules.Member) []types.NamespacedName {
	return ix.owners(func(st *serviceState) bool {
		if e.Set == rules.IPVSIPs {
			_, ok := slices.BinarySearch(st.bindAddrs, e.IP().String())
			return ok
		}
		_, ok := slices.BinarySearchFunc(st.setEntries, e, rules.Compare)
		return ok
	})
}

func (ix *desiredIndex) ownersOfAddr(a string) []types.NamespacedName {
	return ix.owners(func(st *serviceState) bool {
		_, ok := slices.BinarySearch(st.bindAddrs, a)
		return ok
	})
}

// addrOwners answers ownersOfAddr for many addresses: the first ask walks the
// index as ownersOfAddr does, the second builds a map in one pass (a start-up
// whose every bind is refused would otherwise walk every Service per address).
func (ix *desiredIndex) addrOwners() func(string) []types.NamespacedName {
	asks := 0
	var byAddr map[string][]types.NamespacedName
	return func(a string) []types.NamespacedName {
		if asks++; asks == 1 {
			return ix.ownersOfAddr(a)
		}
		if byAddr == nil {
			byAddr = map[string][]types.NamespacedName{}
			for name, st := range ix.services {
				for _, b := range st.bindAddrs {
					byAddr[b] = append(byAddr[b], name)
				}
			}
			for _, o := range byAddr {
				slices.SortFunc(o, func(x, y types.NamespacedName) int { return strings.Compare(x.String(), y.String()) })
			}
		}
		return byAddr[a]
	}
}

func (ix *desiredIndex) ownersOfOutRule(r rules.OutFilter) []types.NamespacedName {
	return ix.owners(func(st *serviceState) bool {
		_, ok := slices.BinarySearchFunc(st.outFilterRules, r, rules.CompareOutFilters)
		return ok
	})
}

func (ix *desiredIndex) owners(has func(*serviceState) bool) []types.NamespacedName {
	var out []types.NamespacedName
	for name, st := range ix.services {
		if has(st) {
			out = append(out, name)
		}
	}
	slices.SortFunc(out, func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
	return out
}
