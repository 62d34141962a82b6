package ipvs

import (
	"time"

	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
)

// A periodic resync reads what the kernel holds (every virtual server and real server,
// every set member, kube-ipvs0's addresses) and repairs what differs. At 10k Services
// that read takes seconds on a busy or emulated node, and a change that arrived during
// it used to wait for all of it. So the read runs beside the sync loop, on handles of
// its own, while syncs go on applying changes; the sync after it ends is the full one.
//
// A read that overlaps writes may have seen a key before or after a write. The syncs
// made during the read note every key they write in a journal; when the read is taken,
// those keys get p.applied's value (what the writes left, as far as they succeeded)
// instead of the read's. Drift on such a key is found by the next resync. Everything
// else the read saw is as it was, and is repaired as before.

// resyncRead is one read in flight.
type resyncRead struct {
	done    chan struct{}
	started time.Time
	state   *appliedState
	stats   SyncStats
	err     error
}

// journal lists the keys written since a resync read began.
type journal struct {
	vs      sets.Set[vsKey]
	entries sets.Set[rules.Member]
	addrs   sets.Set[string]
	// rewritten are the sets whose headers and members were rewritten whole
	// (resized).
	rewritten sets.Set[rules.Set]
}

// notePlan records the keys a sync's plan writes (nil journal: no read in flight).
// A key the sync compared but did not write kept its value: the read's is the
// kernel's, and drift there is repaired by the sync that takes the read.
func (j *journal) notePlan(pl *syncPlan) {
	if j == nil {
		return
	}
	for _, s := range pl.steps {
		switch s := s.(type) {
		case rules.Members:
			for _, c := range s.Changes {
				j.entries.Insert(c.Member)
			}
		case bindStep:
			j.addrs.Insert(s.addrs...)
		case unbindStep:
			j.addrs.Insert(s.addrs...)
		case ipvsStep:
			for _, vp := range s.vs {
				j.vs.Insert(vp.key)
			}
		}
	}
}

func (j *journal) noteVS(k vsKey) {
	if j != nil {
		j.vs.Insert(k)
	}
}

func (j *journal) noteSetRewrite(base rules.Set) {
	if j != nil {
		j.rewritten.Insert(base)
	}
}

// correct gives the journal's keys their applied value in snap, and its digests.
func (j *journal) correct(snap, applied *appliedState) {
	for k := range j.vs {
		if a, ok := applied.vs[k]; ok {
			snap.vs[k] = a
		} else {
			delete(snap.vs, k)
		}
	}
	d := snap.digests
	for e := range j.entries {
		had, has := snap.entries.Has(e), applied.entries.Has(e)
		if has {
			snap.entries.Insert(e)
		} else {
			snap.entries.Delete(e)
		}
		d.correctEntry(e, had, has)
	}
	for a := range j.addrs {
		had, has := snap.addrs.Has(a), applied.addrs.Has(a)
		if has {
			snap.addrs.Insert(a)
		} else {
			snap.addrs.Delete(a)
		}
		d.correctAddr(a, had, has)
	}
	for base := range j.rewritten {
		for e := range snap.entries {
			if e.Set == base {
				snap.entries.Delete(e)
			}
		}
		for e := range applied.entries {
			if e.Set == base {
				snap.entries.Insert(e)
			}
		}
		d.recountSet(snap, base)
	}
}

// resyncPace: a periodic resync read starts no sooner than resyncPace times the
// last read's duration after the full sync that took it. At 100,000 Services x 4
// in the test VM one read took 3 min (the kernel's dumps of IPVS and of the sets
// are O(N^2)) and the IPv6 proxier's, with nothing of its own, 20-30 s (the
// IPVS dump holds both families): every syncPeriod (30 s) meant reading all the
// time, a vCPU taken from the changes.
const resyncPace = 3

// resyncDue says whether a periodic resync read is due at now: a syncPeriod
// after the last full sync, and no sooner than resyncPace times the last read.
func (p *Proxier) resyncDue(now time.Time) bool {
	return now.Sub(p.lastFull) >= max(p.opts.SyncPeriod, resyncPace*p.lastRead)
}

// startResync starts a resync read beside the sync loop.
func (p *Proxier) startResync() {
	r := &resyncRead{done: make(chan struct{}), started: p.clock.Now()}
	p.resync = r
	p.journal = &journal{vs: sets.New[vsKey](), entries: sets.New[rules.Member](), addrs: sets.New[string](), rewritten: sets.New[rules.Set]()}
	ipvsH, nl := p.kernel.IPVS, p.kernel.Netlink
	if p.kernel.Reader != nil {
		ipvsH, nl = p.kernel.Reader.IPVS, p.kernel.Reader.Netlink
	}
	ctx := p.ctx
	// The backend may check the rules it last wrote as it reads (the iptables
	// backend checks our chains and jumps).
	var want []byte
	if p.applied != nil {
		want = p.applied.iptables
	}
	read := p.rules.Observe(want)
	p.goResync(func() {
		defer close(r.done)
		r.stats.phase(p.clock.Now(), "")
		r.state, r.err = p.observe(ctx, ipvsH, nl, read, &r.stats)
		r.stats.phase(p.clock.Now(), "observe-addrs")
		if r.err == nil && r.state.rules.Repair {
			// The rules were tampered with (or their printed form is not known yet):
			// written again here, unless the loop writes them meanwhile.
			pl := &syncPlan{steps: []step{rules.Repair{Text: want, Reading: r.state.rules}}}
			r.state.rulesChecked = p.runBeside(ctx, pl, &r.stats).Repaired
			r.stats.phase(p.clock.Now(), "rules")
		}
		if r.err == nil {
			if r.state.rulesChecked {
				r.state.iptables = want
			}
			r.state.digests = digestsOf(r.state)
			r.stats.phase(p.clock.Now(), "digests")
		}
		if p.syncRunner != nil {
			p.syncRunner.Run() // the next sync takes it
		}
	})
}

// takeResync returns the finished read, corrected by the journal, or nil while it runs
// (or when none is in flight). It must run in the sync loop.
func (p *Proxier) takeResync() (*appliedState, error) {
	r := p.resync
	if r == nil {
		return nil, nil
	}
	select {
	case <-r.done:
	default:
		return nil, nil
	}
	j := p.journal
	p.resync, p.journal = nil, nil
	p.lastRead = p.clock.Since(r.started)
	observeResyncRead(p.opts.IPFamily, p.lastRead)
	for op, n := range r.stats.ops {
		p.resyncOps[op] += n
	}
	if r.err != nil {
		return nil, r.err
	}
	j.correct(r.state, p.applied)
	p.logger.V(2).Info("Periodic resync read the kernel beside the sync loop", "elapsed", p.clock.Since(r.started),
		"virtualServers", len(r.state.vs), "journaledVirtualServers", j.vs.Len(), "journaledEntries", j.entries.Len(),
		"phases", r.stats.phaseList())
	return r.state, nil
}

// dropResync forgets the read in flight (its result is never used).
func (p *Proxier) dropResync() {
	p.resync, p.journal = nil, nil
}
