package ipvs

// After the first full sync that succeeds, a proxier removes upstream's
// iptables- and nftables-mode leftovers (leftovers.go) and, once nothing is held
// back, what the other rules backend left of this family (removeOther). Under
// emulation at 10k Services that is half a second to a second of iptables-save,
// ipset and netlink reads, and a change that arrived meanwhile used to wait for
// it. With the nftables backend neither touches anything the sync loop writes (the
// loop writes IPVS, addresses and our own table; the removals read and write
// iptables, ipsets and upstream's tables), so they run beside the loop and the
// loop takes their outcome at its next full sync. With the iptables backend the
// leftovers live in the tables the loop writes (upstream's iptables mode shares
// KUBE-SERVICES' name), so they stay in the loop.

import (
	"context"
	"time"
)

// besideRun is one run of the removals beside the loop.
type besideRun struct {
	done  chan struct{}
	modes bool // removeOtherModesLeftovers ran
	other bool // removeOther ran
	// What they reported: everything went.
	modesOK, otherOK bool
	stats            SyncStats
	took             time.Duration
}

// removalsBesideLoop reports whether this proxier's removals run beside the loop.
func (p *Proxier) removalsBesideLoop() bool { return p.rules.RemovalsBeside() }

// afterFullSync runs after a full sync that succeeded: the removals still due, in
// the loop or beside it.
func (p *Proxier) afterFullSync(stats *SyncStats) {
	if !p.takeBeside() {
		return // a run beside the loop is still going
	}
	modes := !p.otherModesRemoved
	other := !p.otherBackendRemoved && !p.rulesHeldBack()
	if !modes && !other {
		return
	}
	rm := &removeStep{leftovers: modes, otherBackends: other}
	pl := &syncPlan{steps: []step{rm}}
	if p.logger.V(4).Enabled() {
		p.logger.V(4).Info("Removal plan", "beside", p.removalsBesideLoop(), "plan", pl.String())
	}
	if !p.removalsBesideLoop() {
		_, _ = p.run(p.ctx, pl, stats, nil)
		p.otherModesRemoved = p.otherModesRemoved || rm.leftoversOK
		p.otherBackendRemoved = p.otherBackendRemoved || rm.otherOK
		return
	}
	r := &besideRun{done: make(chan struct{}), modes: modes, other: other}
	p.beside = r
	go func(ctx context.Context) {
		defer close(r.done)
		start := time.Now()
		defer func() { r.took = time.Since(start) }()
		p.runBeside(ctx, pl, &r.stats)
		r.modesOK, r.otherOK = rm.leftoversOK, rm.otherOK
	}(p.ctx)
}

// remove carries out a removal step.
func (p *Proxier) remove(ctx context.Context, s *removeStep, stats *SyncStats) {
	if s.leftovers {
		s.leftoversOK = p.removeOtherModesLeftovers(ctx, stats)
	}
	if s.otherBackends {
		s.otherOK = p.removeOtherBackends(ctx, stats)
	}
}

// takeBeside takes the outcome of a run beside the loop that ended, and reports
// whether none is running now.
func (p *Proxier) takeBeside() bool {
	r := p.beside
	if r == nil {
		return true
	}
	select {
	case <-r.done:
	default:
		return false
	}
	p.beside = nil
	p.otherModesRemoved = p.otherModesRemoved || (r.modes && r.modesOK)
	p.otherBackendRemoved = p.otherBackendRemoved || (r.other && r.otherOK)
	p.logger.V(2).Info("Removals beside the sync loop ended", "leftovers", r.modes, "leftoversRemoved", r.modes && r.modesOK,
		"otherBackend", r.other, "otherBackendRemoved", r.other && r.otherOK, "took", r.took)
	return true
}

// waitBeside waits for a run beside the loop and takes its outcome (tests, and a
// caller that needs the removals done).
func (p *Proxier) waitBeside() {
	p.mu.Lock()
	r := p.beside
	p.mu.Unlock()
	if r == nil {
		return
	}
	<-r.done
	p.mu.Lock()
	defer p.mu.Unlock()
	p.takeBeside()
}
