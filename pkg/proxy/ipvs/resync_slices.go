package ipvs

import (
	"iter"
	"maps"
	"time"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
)

// A periodic resync compares every key the index wants and every key the read found
// (virtual servers, set members, kube-ipvs0's addresses). At 10k Services under TCG
// that comparison alone is about a second, and a change that arrived meanwhile used to
// wait for all of it. So the comparison is done in slices of resyncSliceKeys keys: the
// first slice is the full sync (the read taken as the applied state, the backend's
// programme, the rules), and each further slice is a partial sync, preceded by one
// that applies the changes queued since the slice before. A change thus waits for at
// most one slice, and the slices write only drift (the changes' syncs are not counted
// as repairs).
//
// Between slices the partial syncs keep p.applied true to what they write, as always,
// so a key compared in a later slice is compared against the kernel as it is then: a
// key a change wrote is already right, a key it removed is no longer walked. The walk
// goes over the index's and the applied state's maps as they are when it reaches them
// (Go allows a map to change while it is ranged over: an entry added meanwhile may or
// may not be seen, which is fine, as the sync that added it planned it).

// defaultResyncSliceKeys is how many keys a slice compares: at 10k Services x 4 under
// TCG about 60 ms of work, natively a few milliseconds.
const defaultResyncSliceKeys = 4096

// resyncSlicer walks the keys of a resync one slice at a time.
type resyncSlicer struct {
	t *touched // where the walk puts the keys of the slice being filled
	// compared counts the keys of the slice being filled that the walk compared and
	// found right (they are not in t).
	compared int
	next     func() (struct{}, bool)
	stop     func()
}

// newResyncSlicer walks the keys of ix and a, n at a time. The members of a set whose
// digests agree (ag) are not walked (digest.go).
func newResyncSlicer(ix *desiredIndex, a *appliedState, ag agreement, n int) *resyncSlicer {
	s := &resyncSlicer{}
	walk := func(yield func(struct{}) bool) {
		w := &walker{n: n, yield: yield, compared: &s.compared}
		addVS := func(k vsKey) { s.t.vs.Insert(k) }
		addEntry := func(e rules.Member) { s.t.entries.Insert(e) }
		addAddr := func(addr string) { s.t.addrs.Insert(addr) }
		agreed := func(e rules.Member) bool { return ag.sets[e.Set] }
		// Every virtual server the index wants; the applied side only for what the
		// index does not want (now): a key both hold was compared on the index side.
		if !walkKeys(w, maps.Keys(ix.vs), nil, nil, addVS) ||
			!walkKeys(w, maps.Keys(a.vs), nil, func(k vsKey) bool { return ix.vs[k] != nil }, addVS) {
			return
		}
		// A set member or address the applied state already holds is right: it is
		// passed over instead of being handed to the plan, which would look it up
		// twice more to find nothing to do.
		walkSets := !ag.setsAgree()
		if walkSets && !walkKeys(w, maps.Keys(ix.setRefs), agreed, a.entries.Has, addEntry) {
			return
		}
		if (!ag.addrs || !ag.sets[rules.IPVSIPs]) && !walkKeys(w, maps.Keys(ix.bindRefs), nil,
			func(addr string) bool { return a.addrs.Has(addr) && a.entries.Has(ipvsIPMember(addr)) },
			func(addr string) { addAddr(addr); addEntry(ipvsIPMember(addr)) }) {
			return
		}
		if walkSets && !walkKeys(w, maps.Keys(a.entries), agreed, ix.hasEntry, addEntry) {
			return
		}
		if !ag.addrs {
			walkKeys(w, maps.Keys(a.addrs), nil, ix.hasAddr, addAddr)
		}
	}
	s.next, s.stop = iter.Pull(iter.Seq[struct{}](walk))
	return s
}

// fill puts the next slice's keys into t and reports whether keys may be left, and
// how many more it compared and found right.
func (s *resyncSlicer) fill(t *touched) (more bool, compared int) {
	s.t, s.compared = t, 0
	_, more = s.next()
	s.t = nil
	if !more {
		s.stop()
	}
	return more, s.compared
}

// endSlicing stops a walk in progress (a failure, or a full sync that starts over).
func (p *Proxier) endSlicing() {
	if p.slicer != nil {
		p.slicer.stop()
		p.slicer = nil
	}
}

// resyncSlices runs the slices after a resync's first one, each a partial sync that
// compares the next keys, preceded by a partial sync of the changes queued meanwhile
// (if any). It adds their stats to total and returns how many slices ran and the
// longest, or the error that ended them.
func (p *Proxier) resyncSlices(total *SyncStats) (int, time.Duration, error) {
	n, longest := 0, time.Duration(0)
	for p.slicer != nil {
		if p.betweenSlices != nil {
			p.betweenSlices()
		}
		if p.changesPending() {
			st, err := p.syncChanges(p.ctx, p.clock.Now())
			total.addChanges(st)
			if err != nil {
				p.endSlicing()
				return n, longest, err
			}
		}
		start := p.clock.Now()
		st, err := p.syncSlice(p.ctx, start)
		n++
		longest = max(longest, p.clock.Since(start))
		total.addSlice(st)
		if err != nil {
			p.endSlicing()
			return n, longest, err
		}
	}
	return n, longest, nil
}

// changesPending reports whether a change waits to be applied: a Service's, its
// endpoints', or the node's labels or addresses.
func (p *Proxier) changesPending() bool {
	return p.serviceChanges.PendingChanges() > 0 || p.endpointsChanges.PendingChangeCount() > 0 ||
		p.nodeLabelsChanged || (p.addrWatch && p.addrsChanged.Load())
}

// resyncRead reports whether a resync read has finished and waits to be taken.
func (p *Proxier) resyncRead() bool {
	if p.resync == nil {
		return false
	}
	select {
	case <-p.resync.done:
		return true
	default:
		return false
	}
}

// addChanges adds a sync of changes made during a resync to the resync's stats: what
// it wrote is not drift.
func (s *SyncStats) addChanges(st SyncStats) {
	s.notDrift.ipvs += st.IPVSOps
	s.notDrift.ipset += st.IPSetOps
	s.notDrift.addr += st.AddressOps
	s.notDrift.nft += st.NFTablesOps
	s.addSlice(st)
}

// addSlice adds a sync's counts and phase times to a resync's stats.
func (s *SyncStats) addSlice(st SyncStats) {
	s.Services += st.Services
	s.Compared += st.Compared
	s.IPVSOps += st.IPVSOps
	s.IPSetOps += st.IPSetOps
	s.AddressOps += st.AddressOps
	s.NFTablesOps += st.NFTablesOps
	s.IPTablesWrite = s.IPTablesWrite || st.IPTablesWrite
	s.Failed += st.Failed
	for i, n := range st.ops {
		s.ops[i] += n
	}
	for _, ph := range st.phases {
		found := false
		for i := range s.phases {
			if s.phases[i].name == ph.name {
				s.phases[i].took += ph.took
				found = true
				break
			}
		}
		if !found {
			s.phases = append(s.phases, ph)
		}
	}
}

// walker counts a slice's work as the walk goes and ends the slice when it is full.
type walker struct {
	n     int
	yield func(struct{}) bool
	// compared counts the keys found right (the slicer's count for this slice).
	compared *int
	// ticks, and the keys found right and passed over since the last tick.
	count, skipped, passed int
}

// tick counts a key to plan; false means the walk was stopped.
func (w *walker) tick() bool {
	if w.count++; w.count < w.n {
		return true
	}
	w.count = 0
	return w.yield(struct{}{})
}

// skip counts a key found right: a lookup, not a plan, so a quarter of a tick.
func (w *walker) skip() bool {
	*w.compared++
	if w.skipped++; w.skipped < 4 {
		return true
	}
	w.skipped = 0
	return w.tick()
}

// pass counts a member of a set whose digests agree: not compared at all, a sixteenth.
func (w *walker) pass() bool {
	if w.passed++; w.passed < 16 {
		return true
	}
	w.passed = 0
	return w.tick()
}

// walkKeys walks keys: a key agreed (nil: none) says is passed over, one right (nil:
// none) says is skipped, the others are added to the slice. It reports false when the
// walk was stopped.
func walkKeys[K comparable](w *walker, keys iter.Seq[K], agreed, right func(K) bool, add func(K)) bool {
	for k := range keys {
		var more bool
		switch {
		case agreed != nil && agreed(k):
			more = w.pass()
		case right != nil && right(k):
			more = w.skip()
		default:
			add(k)
			more = w.tick()
		}
		if !more {
			return false
		}
	}
	return true
}
