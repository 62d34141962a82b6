package ipvs

import (
	"cmp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
)

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
	// holds exactly the bound addresses, so bindRefs counts its entries too.
	setRefs map[setEntry]int
	// setDigests are the distinct entries per set (base name): their count and sum
	// (digest.go); addrDigest is bindRefs' (kube-ipvs0's addresses).
	setDigests map[string]setDigest
	addrDigest setDigest
	// srcRanges are the entries of the LoadBalancer source-range sets by port
	// (the nftables backend rewrites a port's elements together; reading them here
	// keeps a partial sync from walking every entry of every set).
	srcRanges map[srcPort]sets.Set[setEntry]
	bindRefs  map[string]int
	outRefs   map[string]int
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
	entries   sets.Set[setEntry]
	addrs     sets.Set[string]
	outFilter bool
	health    bool
}

func newTouched() *touched {
	return &touched{vs: sets.New[vsKey](), entries: sets.New[setEntry](), addrs: sets.New[string]()}
}

func newDesiredIndex() *desiredIndex {
	return &desiredIndex{
		services:      map[types.NamespacedName]*serviceState{},
		vs:            map[vsKey]*desiredVS{},
		setRefs:       map[setEntry]int{},
		setDigests:    map[string]setDigest{},
		srcRanges:     map[srcPort]sets.Set[setEntry]{},
		bindRefs:      map[string]int{},
		outRefs:       map[string]int{},
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
			ix.addrDigest.add(a)
			ix.addMember(setEntry{setIPVSIPs, a})
			t.entries.Insert(setEntry{setIPVSIPs, a})
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
			ix.addrDigest.remove(a)
			ix.removeMember(setEntry{setIPVSIPs, a})
			t.entries.Insert(setEntry{setIPVSIPs, a})
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
func (ix *desiredIndex) noteSourceRange(e setEntry, add bool) {
	if !isSourceRangeSet(e.set) {
		return
	}
	k, ok := srcPortOfEntry(e.entry)
	if !ok {
		return
	}
	if add {
		if ix.srcRanges[k] == nil {
			ix.srcRanges[k] = sets.New[setEntry]()
		}
		ix.srcRanges[k].Insert(e)
		return
	}
	if ix.srcRanges[k].Delete(e).Len() == 0 {
		delete(ix.srcRanges, k)
	}
}

func (ix *desiredIndex) unref(e setEntry, t *touched) {
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

func (ix *desiredIndex) hasEntry(e setEntry) bool {
	if e.set == setIPVSIPs {
		return ix.bindRefs[e.entry] > 0
	}
	return ix.setRefs[e] > 0
}
func (ix *desiredIndex) hasAddr(a string) bool    { return ix.bindRefs[a] > 0 }
func (ix *desiredIndex) setEmpty(set string) bool { return ix.setDigests[set].n == 0 }

// setSize is how many distinct entries set (base name) wants.
func (ix *desiredIndex) setSize(set string) int { return ix.setDigests[set].n }

// addMember and removeMember keep setDigests in step as an entry's first claim comes
// and its last goes.
func (ix *desiredIndex) addMember(e setEntry) {
	d := ix.setDigests[e.set]
	d.add(e.entry)
	ix.setDigests[e.set] = d
}

func (ix *desiredIndex) removeMember(e setEntry) {
	d := ix.setDigests[e.set]
	if d.remove(e.entry); d.n <= 0 {
		delete(ix.setDigests, e.set)
		return
	}
	ix.setDigests[e.set] = d
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
		t.entries.Insert(setEntry{setIPVSIPs, a})
	}
	t.outFilter, t.health = true, true
	return t
}

// The owners of an object, for reporting a write the kernel refused. They are found by
// scanning every Service: this runs only on failures.

func (ix *desiredIndex) ownersOfEntry(e setEntry) []types.NamespacedName {
	return ix.owners(func(st *serviceState) bool {
		if e.set == setIPVSIPs {
			_, ok := slices.BinarySearch(st.bindAddrs, e.entry)
			return ok
		}
		_, ok := slices.BinarySearchFunc(st.setEntries, e, func(x, y setEntry) int {
			return cmp.Or(strings.Compare(x.set, y.set), strings.Compare(x.entry, y.entry))
		})
		return ok
	})
}

func (ix *desiredIndex) ownersOfAddr(a string) []types.NamespacedName {
	return ix.owners(func(st *serviceState) bool {
		_, ok := slices.BinarySearch(st.bindAddrs, a)
		return ok
	})
}

func (ix *desiredIndex) ownersOfOutRule(r string) []types.NamespacedName {
	return ix.owners(func(st *serviceState) bool {
		_, ok := slices.BinarySearch(st.outFilterRules, r)
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
