package ipvs

import (
	"iter"
	"time"
)

// A periodic resync compares every key the index wants and every key the read found
// (virtual servers, set members, kube-ipvs0's addresses). At 10k Services under TCG
// that comparison alone is about a second, and a change that arrived meanwhile used to
// wait for all of it. So the comparison is done in slices of resyncSliceKeys keys: the
// first slice is the full sync (the read taken as the applied state, the backend's
// programme, the rules), and each further slice is a partial sync that also takes the
// changes queued since the one before. A change thus waits for at most one slice.
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
		count := 0
		// tick ends the slice after n keys; false means the walk was stopped.
		tick := func() bool {
			if count++; count < n {
				return true
			}
			count = 0
			return yield(struct{}{})
		}
		// A key found right costs a lookup, not a plan: a quarter of a tick.
		skipped := 0
		skip := func() bool {
			s.compared++
			if skipped++; skipped < 4 {
				return true
			}
			skipped = 0
			return tick()
		}
		// A member of a set whose digests agree is not compared at all: a sixteenth.
		passed := 0
		pass := func() bool {
			if passed++; passed < 16 {
				return true
			}
			passed = 0
			return tick()
		}
		for k := range ix.vs {
			s.t.vs.Insert(k)
			if !tick() {
				return
			}
		}
		// The applied side only for what the index does not want (now): a key both
		// hold was compared on the index side.
		for k := range a.vs {
			if ix.vs[k] != nil {
				if !skip() {
					return
				}
				continue
			}
			s.t.vs.Insert(k)
			if !tick() {
				return
			}
		}
		// A set member or address the applied state already holds is right: it is
		// passed over here instead of being handed to the plan, which would look it up
		// twice more to find nothing to do.
		walkSets := !ag.setsAgree()
		if walkSets {
			for e := range ix.setRefs {
				if ag.sets[e.set] {
					if !pass() {
						return
					}
					continue
				}
				if a.entries.Has(e) {
					if !skip() {
						return
					}
					continue
				}
				s.t.entries.Insert(e)
				if !tick() {
					return
				}
			}
		}
		if !ag.addrs || !ag.sets[setIPVSIPs] {
			for addr := range ix.bindRefs {
				if a.addrs.Has(addr) && a.entries.Has(setEntry{setIPVSIPs, addr}) {
					if !skip() {
						return
					}
					continue
				}
				s.t.addrs.Insert(addr)
				s.t.entries.Insert(setEntry{setIPVSIPs, addr})
				if !tick() {
					return
				}
			}
		}
		if walkSets {
			for e := range a.entries {
				if ag.sets[e.set] {
					if !pass() {
						return
					}
					continue
				}
				if ix.hasEntry(e) {
					if !skip() {
						return
					}
					continue
				}
				s.t.entries.Insert(e)
				if !tick() {
					return
				}
			}
		}
		if !ag.addrs {
			for addr := range a.addrs {
				if ix.hasAddr(addr) {
					if !skip() {
						return
					}
					continue
				}
				s.t.addrs.Insert(addr)
				if !tick() {
					return
				}
			}
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
// also takes the changes queued meanwhile. It adds their stats to total and returns
// how many ran and the longest, or the error that ended them.
func (p *Proxier) resyncSlices(total *SyncStats) (int, time.Duration, error) {
	n, longest := 0, time.Duration(0)
	for p.slicer != nil {
		if p.betweenSlices != nil {
			p.betweenSlices()
		}
		start := p.clock.Now()
		st, err := p.sync(p.ctx, false, nil, start)
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

// addSlice adds a slice's counts and phase times to a resync's stats. What a slice
// wrote for the changes it took is not drift.
func (s *SyncStats) addSlice(st SyncStats) {
	if st.Services > 0 {
		s.notDrift.ipvs += st.IPVSOps
		s.notDrift.ipset += st.IPSetOps
		s.notDrift.addr += st.AddressOps
		s.notDrift.nft += st.NFTablesOps
	}
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
